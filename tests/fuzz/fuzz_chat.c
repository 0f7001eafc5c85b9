/* fuzz_chat.c - the chat encoder on arbitrary case JSON: any input renders or fails with an
 * error, and a rendered prompt is a NUL-terminated string. The same bytes (up to a NUL) as the
 * content of a user message and of an assistant's reasoning, through the message structs (which
 * the library escapes into a case of its own): they render, or fail with an error, and a
 * rendered prompt holds each exactly as given. Seeds: chat_vectors.json's cases. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *prompt = dsv41_chat_render((const char *)data, size);
    if (prompt) (void)strlen(prompt);
    else if (!dsv41_error()[0]) abort(); /* a failure always says why */
    free(prompt);
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0;
    const dsv41_chat_message msgs[] = {{"user", text, NULL}, {"assistant", "done", text}, {"user", "and?", NULL}};
    const dsv41_chat_options opts = {1, 0};
    prompt = dsv41_chat_render_messages(msgs, 3, &opts);
    if (prompt && !strstr(prompt, text)) abort();
    if (!prompt && !dsv41_error()[0]) abort();
    free(prompt);
    free(text);
    return 0;
}
