/* nprandom.c - numpy's default_rng(seed).integers(0, bound, n, int64), reproduced exactly.
 *
 * The Engram hash multipliers of the release are drawn this way, so a loader that computes
 * them from the config needs numpy's stream: SeedSequence (entropy pool mixing, then state
 * generation), PCG64 (128-bit LCG, XSL-RR output) seeded from four 64-bit words, and the
 * bounded draw (Lemire's multiply-shift with rejection for ranges above 32 bits). */
#include "nprandom.h"

typedef unsigned __int128 u128;

#define POOL 4

static uint32_t hashmix(uint32_t v, uint32_t *hash_const) {
    v ^= *hash_const;
    *hash_const *= 0x931e8875u;
    v *= *hash_const;
    return v ^ (v >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}

/* SeedSequence(seed).generate_state(4, uint64) */
static void seed_state(uint64_t seed, uint64_t out[4]) {
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, pool[POOL], hc = 0x43b0d7e5u;
    int n_entropy = seed >> 32 ? 2 : 1;
    for (int i = 0; i < POOL; i++) pool[i] = hashmix(i < n_entropy ? entropy[i] : 0, &hc);
    for (int src = 0; src < POOL; src++)
        for (int dst = 0; dst < POOL; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hc));
    uint32_t words[8], hb = 0x8b51f9ddu;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % POOL] ^ hb;
        hb *= 0x58f38dedu;
        v *= hb;
        words[i] = v ^ (v >> 16);
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
}

typedef struct {
    u128 state, inc;
} pcg64;

static const u128 PCG_MULT = ((u128)0x2360ED051FC65DA4ULL << 64) | 0x4385DF649FCCF645ULL;

static uint64_t pcg64_next(pcg64 *r) {
    r->state = r->state * PCG_MULT + r->inc;
    uint64_t x = (uint64_t)(r->state >> 64) ^ (uint64_t)r->state;
    unsigned rot = (unsigned)(r->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static void pcg64_seed(pcg64 *r, const uint64_t v[4]) {
    u128 initstate = ((u128)v[0] << 64) | v[1], initseq = ((u128)v[2] << 64) | v[3];
    r->state = 0;
    r->inc = (initseq << 1) | 1;
    pcg64_next(r);
    r->state += initstate;
    pcg64_next(r);
}

/* a uniform draw in [0, rng] for rng >= 2^32 (Lemire, as numpy's bounded_lemire_uint64) */
static uint64_t bounded64(pcg64 *r, uint64_t rng) {
    uint64_t excl = rng + 1;
    u128 m = (u128)pcg64_next(r) * excl;
    uint64_t left = (uint64_t)m;
    if (left < excl) {
        uint64_t threshold = (UINT64_MAX - rng) % excl;
        while (left < threshold) {
            m = (u128)pcg64_next(r) * excl;
            left = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* numpy's buffered 32-bit Lemire draw in [0, rng] for rng < 2^32 */
static uint32_t bounded32(pcg64 *r, uint32_t rng, uint64_t *buf, int *has) {
    uint32_t excl = rng + 1;
    uint64_t m;
    uint32_t left;
    do {
        uint32_t v;
        if (*has) { v = (uint32_t)(*buf >> 32); *has = 0; }
        else { *buf = pcg64_next(r); v = (uint32_t)*buf; *has = 1; }
        m = (uint64_t)v * excl;
        left = (uint32_t)m;
    } while (left < excl && left < (uint32_t)(UINT32_MAX - rng) % excl);
    return (uint32_t)(m >> 32);
}

void np_rng_integers(uint64_t seed, int64_t bound, int32_t n, int64_t *out) {
    uint64_t st[4], buf = 0;
    int has = 0;
    pcg64 r;
    seed_state(seed, st);
    pcg64_seed(&r, st);
    uint64_t rng = (uint64_t)bound - 1;
    for (int32_t i = 0; i < n; i++)
        out[i] = rng == 0 ? 0 : rng <= UINT32_MAX ? (int64_t)bounded32(&r, (uint32_t)rng, &buf, &has) : (int64_t)bounded64(&r, rng);
}
