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

/* ---- stop strings, against a search of the whole text from scratch */

/* the earliest occurrence of any stop in text[0, len), or -1; and the longest proper prefix of
 * a stop the text ends with */
static int64_t stop_ref(const char *text, size_t len, const char *const *stops, int n, size_t *held) {
    int64_t cut = -1;
    *held = 0;
    for (int i = 0; i < n; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        for (size_t at = 0; sl && at + sl <= len; at++)
            if (!memcmp(text + at, stops[i], sl) && (cut < 0 || (int64_t)at < cut)) cut = (int64_t)at;
        for (size_t k = 1; k < sl && k <= len; k++)
            if (!memcmp(text + len - k, stops[i], k) && k > *held) *held = k;
    }
    if (cut >= 0) *held = 0;
    return cut;
}

static void test_stops(void) {
    const char *two[] = {"bc", "ab"};
    size_t held;
    CHECK(dsv41_stop_find("xabcd", 5, 0, two, 2, &held) == 1 && held == 0,
          "two stops in one piece: the earliest ends the text, whichever is listed first");
    CHECK(dsv41_stop_find("xa", 2, 0, two, 2, &held) == -1 && held == 1, "a trailing 'a' could begin 'ab': held back");
    const char *none[] = {NULL, ""};
    CHECK(dsv41_stop_find("ab", 2, 0, none, 2, &held) == -1 && held == 0, "NULL and empty stops never match");
    CHECK(dsv41_stop_find("x\0ab", 4, 0, two + 1, 1, &held) == 2, "a NUL byte in the text does not hide a stop after it");
    /* random texts over a 3-letter alphabet fed in random pieces, stops of 1 to 4 letters */
    uint64_t r = 7;
    int bad = 0;
    for (int round = 0; round < 3000 && !bad; round++) {
        char text[64], stop_buf[4][5];
        const char *stops[4];
        int n = 1 + (int)(r % 4);
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            int sl = 1 + (int)(r >> 60) % 4;
            for (int k = 0; k < sl; k++) stop_buf[i][k] = (char)('a' + (r >> (20 + 4 * k)) % 3);
            stop_buf[i][sl] = 0;
            stops[i] = stop_buf[i];
        }
        size_t len = 0;
        while (len < sizeof text && !bad) {
            size_t prev = len, piece = 1 + (size_t)(r >> 33) % 4;
            for (size_t k = 0; k < piece && len < sizeof text; k++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                text[len++] = (char)('a' + (r >> 40) % 3);
            }
            size_t h, want_h;
            int64_t got = dsv41_stop_find(text, len, prev, stops, n, &h), want = stop_ref(text, len, stops, n, &want_h);
            bad = got != want || h != want_h;
            if (got >= 0) break;
        }
    }
    CHECK(!bad, "3000 random replies fed in pieces: the same cut and hold-back as a search from scratch");
}

int main(void) {
    test_stops();
    test_parts();
    test_calls();
    test_round_trip();
    return test_summary();
}
