/* fuzz.h - what the libFuzzer harnesses share: a private scratch folder and writing an input
 * (or a part of one) to a file in it, since the library reads checkpoints, tokenizers and
 * goldens from paths. */
#ifndef DSV41_FUZZ_H
#define DSV41_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv41_dev.h"

/* A folder of this process's own, made once (in /dev/shm when there is one: the harnesses
 * write a file per input). */
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/dsv41-fuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

/* Writes n bytes to dir/name (dir: fuzz_dir()), or removes it when n is SIZE_MAX. Returns the path. */
static inline const char *fuzz_file(const char *name, const uint8_t *p, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
    if (n == SIZE_MAX) return path;
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n)) abort();
    fclose(f);
    return path;
}

#endif
