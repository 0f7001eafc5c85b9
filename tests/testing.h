/* testing.h - the few helpers every test program uses. Each CHECK counts one case; the program
 * ends with test_summary(), which prints the recognized "N passed, N failed" line. */
#ifndef DSV41_TESTING_H
#define DSV41_TESTING_H

#include <stdio.h>
#include <stdlib.h>

static int test_passed, test_failed;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            test_passed++;                                                 \
        } else {                                                           \
            test_failed++;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed != 0;
}

/* The shared data folder: $DSV41_SHARED, or ../shared beside the checkout. */
static inline const char *shared_dir(void) {
    const char *s = getenv("DSV41_SHARED");
    return s && *s ? s : "../shared";
}

/* The golden: $DSV41_GOLDEN, or the shared golden. A missing golden fails the suite. */
static inline const char *golden_path(void) {
    static char buf[1024];
    const char *g = getenv("DSV41_GOLDEN");
    if (g && *g) return g;
    snprintf(buf, sizeof buf, "%s/golden/ds41_tiny_golden.json", shared_dir());
    return buf;
}

#endif
