/* fuzz_session.c - session files: any file loads into a session of the built-in model or is
 * refused with the session unchanged; never a crash, and a file that loads can be decoded from.
 * A random file almost never passes the checksum, so the first byte picks a mode:
 *   0: the rest is the file as it is;
 *   1: the rest with the built-in model's identity and a right checksum set (a crafted file);
 *   2: a real file, saved from a session fed the next bytes as ids (the count first, then how
 *      many of them came one by one), then changed by the (offset lo, offset hi, xor) triples
 *      that follow, its checksum set right: near-valid files that reach every check.
 * Seeds: one input per mode (seeds.sh). */
#include "fuzz.h"
#include "model.h"

static void set_checksum(uint8_t *file, size_t n) {
    uint64_t sum = checksum64(file, n - 8);
    for (int b = 0; b < 8; b++) file[n - 8 + b] = (uint8_t)(sum >> 8 * b);
}

/* The file [*len] a session of m saves after being fed the ids p [n] describes (*used bytes of it). */
static uint8_t *saved_file(dsv41_model *m, const uint8_t *p, size_t n, size_t *len, size_t *used) {
    int32_t V = dsv41_model_vocab_size(m), count = n > 0 ? p[0] % 40 : 0, single = n > 1 ? p[1] % 8 : 0, ids[40];
    for (int32_t i = 0; i < count; i++) ids[i] = (size_t)(2 + i) < n ? p[2 + i] % V : i % V;
    *used = 2 + (size_t)count < n ? 2 + (size_t)count : n;
    if (single > count) single = count;
    dsv41_session *s = dsv41_session_new(m);
    if (count - single > 0) dsv41_session_forward(s, ids, count - single, NULL, NULL);
    for (int32_t i = count - single; i < count; i++) dsv41_session_forward(s, ids + i, 1, NULL, NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/real.session", fuzz_dir());
    if (dsv41_session_save(s, path)) abort();
    dsv41_session_free(s);
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(1 << 20);
    *len = f ? fread(buf, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dsv41_model *m;
    static uint8_t identity[16];
    if (!m && !(m = dsv41_model_builtin())) abort();
    if (size < 1) return 0;
    uint8_t *file;
    size_t n;
    if (data[0] % 3 == 2) {
        size_t used;
        file = saved_file(m, data + 1, size - 1, &n, &used);
        memcpy(identity, file + 16, 16);
        for (size_t i = 1 + used; i + 3 <= size; i += 3) file[(data[i] | (size_t)data[i + 1] << 8) % n] ^= data[i + 2];
        set_checksum(file, n);
    } else {
        n = size - 1;
        file = malloc(size);
        memcpy(file, data + 1, n);
        if (data[0] % 3 == 1 && n >= 40) {
            memcpy(file + 16, identity, 16); /* set by a mode-2 input first; zeros before */
            set_checksum(file, n);
        }
    }
    dsv41_session *s = dsv41_session_new(m);
    int32_t ids[3] = {1, 2, 3}, n_ids;
    dsv41_session_forward(s, ids, 3, NULL, NULL);
    if (dsv41_session_load(s, fuzz_file("in.session", file, n)) == 0) {
        int32_t next = 5;
        if (dsv41_session_pos(s) < dsv41_model_max_seq_len(m) && dsv41_session_forward(s, &next, 1, NULL, NULL)) abort();
    } else if (dsv41_session_pos(s) != 3 || dsv41_session_tokens(s, &n_ids)[2] != 3) {
        abort();
    }
    dsv41_session_free(s);
    free(file);
    return 0;
}
