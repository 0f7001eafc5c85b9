/* testing.h - the few helpers every test program uses. Each CHECK counts one case; the program
 * ends with test_summary(), which prints the recognized "N passed, N failed" line. */
#ifndef DSV41_TESTING_H
#define DSV41_TESTING_H

#include <stdio.h>
#include <stdlib.h>

/* The sanitizer builds (make sanitize, make tsan): ASan's allocator keeps resident bookkeeping of
 * its own, and every sanitizer runs code several times slower, so the checks of memory and time
 * that guard against a wrong algorithm allow for them. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#if defined(TEST_ASAN) || defined(TEST_TSAN)
#define TEST_SLOWDOWN 20.0
#else
#define TEST_SLOWDOWN 1.0
#endif

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
