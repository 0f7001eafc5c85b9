/* stops.c - stop strings in a reply that grows a piece at a time (dsv41_stop_find).
 *
 * A reply ends before the earliest occurrence of any stop string, so no stop string is ever part
 * of it. Searching only from where an occurrence could first end after the latest piece keeps a
 * long reply linear; the bytes that could still begin a stop are what a stream holds back, so
 * what it sent is never taken back when the next piece completes a stop. */
#include <string.h>

#include "dsv41.h"

int64_t dsv41_stop_find(const char *text, size_t len, size_t prev, const char *const *stops, int32_t n, size_t *held) {
    int64_t cut = -1;
    size_t keep = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        if (sl == 0) continue;
        /* the text before prev held no occurrence: one now ends after prev */
        size_t start = prev >= sl ? prev - sl + 1 : 0;
        const char *hit = start < len ? memmem(text + start, len - start, stops[i], sl) : NULL;
        if (hit && (cut < 0 || hit - text < cut)) cut = hit - text;
        for (size_t k = sl - 1; k > keep; k--) /* the longest proper prefix the text ends with */
            if (k <= len && !memcmp(text + len - k, stops[i], k)) {
                keep = k;
                break;
            }
    }
    if (held) *held = cut >= 0 ? 0 : keep;
    return cut;
}
