/* fuzz_chat.c - the chat encoder on arbitrary case JSON: any input renders or fails with an
 * error, and a rendered prompt is a NUL-terminated string. Seeds: chat_vectors.json's cases. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *prompt = dsv41_chat_render((const char *)data, size);
    if (prompt) (void)strlen(prompt);
    else if (!dsv41_error()[0]) abort(); /* a failure always says why */
    free(prompt);
    return 0;
}
