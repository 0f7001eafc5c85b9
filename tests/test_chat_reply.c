/* test_chat_reply.c - generated replies split back into reasoning, answer and tool calls.
 *
 * The tool-call block is checked against the encoder: an assistant turn with tool calls is
 * rendered by dsv41_chat_render, its DSML block cut out of the prompt and parsed back, and the
 * calls must come back with the same names and arguments. A streaming split must only ever
 * extend what it gave for a shorter text. */
#include <string.h>

#include "dsv41.h"
#include "testing.h"

#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c" /* ｜DSML｜ */

static int same(const char *text, int64_t a, int64_t b, const char *want) {
    return b - a == (int64_t)strlen(want) && !memcmp(text + a, want, strlen(want));
}

static void test_parts(void) {
    dsv41_reply_parts p;
    const char *think = "I should answer.</think>The answer is 4.";
    dsv41_chat_reply_parts(think, strlen(think), DSV41_REPLY_THINKING | DSV41_REPLY_FINAL, &p);
    CHECK(same(think, 0, p.reasoning_end, "I should answer.") && same(think, p.content_start, p.content_end, "The answer is 4.") &&
          p.calls_start == -1, "thinking: reasoning before </think>, the answer after");
    dsv41_chat_reply_parts(think, strlen(think), DSV41_REPLY_FINAL, &p);
    CHECK(p.reasoning_end == 0 && p.content_start == 0 && p.content_end == (int64_t)strlen(think), "chat mode: all of it is the answer");
    dsv41_chat_reply_parts(think, 18, DSV41_REPLY_THINKING, &p);
    CHECK(p.reasoning_end == 16 && p.content_end == 16, "a streaming '</' is held back from the reasoning");

    const char *calls = "Let me look.\n\n<" DSML " calls>\n<" DSML " invoke name=\"f\">\n</" DSML " invoke>\n</" DSML " calls>";
    dsv41_chat_reply_parts(calls, strlen(calls), DSV41_REPLY_TOOLS | DSV41_REPLY_FINAL, &p);
    CHECK(same(calls, p.content_start, p.content_end, "Let me look.") && p.calls_start == 14, "the answer stops before the block");
    dsv41_chat_reply_parts(calls, strlen(calls), DSV41_REPLY_FINAL, &p);
    CHECK(p.calls_start == -1 && p.content_end == (int64_t)strlen(calls), "without tools a block is text");

    /* every prefix of a reply extends the parts of the shorter ones */
    const char *full = "Hmm.</think>Sure:\n\n<" DSML " calls>\n<" DSML " invoke name=\"g\">\n</" DSML " invoke>\n</" DSML " calls>";
    int flags = DSV41_REPLY_THINKING | DSV41_REPLY_TOOLS, grows = 1;
    dsv41_reply_parts prev = {0, 0, 0, -1}, fin;
    dsv41_chat_reply_parts(full, strlen(full), flags | DSV41_REPLY_FINAL, &fin);
    for (size_t n = 0; n <= strlen(full); n++) {
        dsv41_chat_reply_parts(full, n, flags, &p);
        grows &= p.reasoning_end >= prev.reasoning_end && p.reasoning_end <= fin.reasoning_end;
        if (p.content_end > p.content_start) grows &= p.content_start == fin.content_start && p.content_end <= fin.content_end;
        grows &= p.content_end >= prev.content_end || prev.content_end <= prev.content_start;
        prev = p;
    }
    CHECK(grows && same(full, fin.content_start, fin.content_end, "Sure:"), "streamed parts only grow, up to the final ones");
}

static void test_calls(void) {
    const char *two = "<" DSML " calls>\n<" DSML " invoke name=\"get_weather\">\n<" DSML
                      " parameter name=\"city\" string=\"true\">Paris \"centre\"</" DSML " parameter>\n<" DSML
                      " parameter name=\"days\" string=\"false\">3</" DSML " parameter>\n</" DSML " invoke>\n<" DSML
                      " invoke name=\"noop\">\n</" DSML " invoke>\n</" DSML " calls>";
    char *got = dsv41_chat_reply_calls(two, strlen(two));
    CHECK(got && !strcmp(got, "[{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris \\\\\\\"centre\\\\\\\"\\\", "
                              "\\\"days\\\": 3}\"}, {\"name\": \"noop\", \"arguments\": \"{}\"}]"),
          "two calls, a string and a number argument: %s", got ? got : dsv41_error());
    free(got);
    const char *cut = "<" DSML " calls>\n<" DSML " invoke name=\"f\">\n<" DSML " parameter name=\"x\" string=\"true\">ab";
    CHECK(dsv41_chat_reply_calls(cut, strlen(cut)) == NULL, "a parameter cut off is refused");
    const char *none = "<" DSML " calls>\n</" DSML " calls>";
    CHECK(dsv41_chat_reply_calls(none, strlen(none)) == NULL, "a block without calls is refused");
    CHECK(dsv41_chat_reply_calls("hello", 5) == NULL, "text without a block is refused");
}

/* The encoder writes an assistant turn's calls as DSML; parsing that back gives the calls. */
static void test_round_trip(void) {
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, {\"role\": \"assistant\", \"content\": \"\", "
                       "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                       "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"when\\\": [1, 2.5, true], \\\"opts\\\": {\\\"unit\\\": \\\"C\\\"}}\"}}]}], "
                       "\"options\": {\"thinking_mode\": \"chat\"}}";
    char *prompt = dsv41_chat_render(chat, strlen(chat));
    CHECK(prompt != NULL, "the encoder renders a turn with tool calls: %s", prompt ? "" : dsv41_error());
    if (!prompt) return;
    const char *open = strstr(prompt, "<" DSML " calls>"), *close = open ? strstr(open, "</" DSML " calls>") : NULL;
    CHECK(open && close, "the rendered turn holds a DSML block");
    if (open && close) {
        char *got = dsv41_chat_reply_calls(open, (size_t)(close - open) + strlen("</" DSML " calls>"));
        const char *want = "[{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"when\\\": [1, 2.5, true], "
                           "\\\"opts\\\": {\\\"unit\\\": \\\"C\\\"}}\"}]";
        CHECK(got && !strcmp(got, want), "the encoder's block parses back to the same call: %s", got ? got : dsv41_error());
        free(got);
    }
    free(prompt);
}

int main(void) {
    test_parts();
    test_calls();
    test_round_trip();
    return test_summary();
}
