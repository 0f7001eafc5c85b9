/* test_numerics.c - codecs, fake quants, the filler, torch's top-k tie order and the Sinkhorn
 * split, each against values pinned by GOLDEN.md or recorded from torch. */
#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "model.h"
#include "numerics.h"
#include "testing.h"

static void test_e4m3(void) {
    static const struct { float x; uint8_t code; } pinned[] = {
        {1.0f, 0x38}, {0.5f, 0x30}, {448.0f, 0x7E}, {0x1p-6f, 0x08}, {0x1p-9f, 0x01},
        {1.0625f, 0x38}, {1.1875f, 0x3A}, {-1.5f, 0xBC}, {1000.0f, 0x7E}, {-1000.0f, 0xFE}, {1e-30f, 0x00},
    };
    for (size_t i = 0; i < sizeof pinned / sizeof *pinned; i++)
        CHECK(f32_to_e4m3(pinned[i].x) == pinned[i].code, "e4m3(%g) = 0x%02x, want 0x%02x", pinned[i].x,
              f32_to_e4m3(pinned[i].x), pinned[i].code);
    CHECK(f32_to_e4m3(NAN) == 0x7F, "e4m3(NaN)");
    int roundtrip = 1;
    for (int c = 0; c < 256; c++)
        if ((c & 0x7F) != 0x7F && f32_to_e4m3(e4m3_to_f32((uint8_t)c)) != (c == 0x80 ? 0x80 : c)) roundtrip = 0;
    CHECK(roundtrip, "every non-NaN e4m3 code round-trips");
    CHECK(isnan(e4m3_to_f32(0x7F)) && e4m3_to_f32(0x01) == 0x1p-9f && e4m3_to_f32(0x7E) == 448.0f, "e4m3 decode");
}

static void test_bf16_e8m0_e2m1(void) {
    /* bf16: round to nearest, ties to even on the dropped half */
    CHECK(bf16_round(bits_f32(0x3F808000u)) == bits_f32(0x3F800000u), "bf16 tie rounds down to even");
    CHECK(bf16_round(bits_f32(0x3F818000u)) == bits_f32(0x3F820000u), "bf16 tie rounds up to even");
    CHECK(bf16_round(bits_f32(0x3F808001u)) == bits_f32(0x3F810000u), "bf16 above the tie rounds up");
    CHECK(isnan(bf16_round(NAN)), "bf16 keeps NaN");
    CHECK(bf16_round(0.01751995086669922f) == 0.017578125f, "bf16 of the first embed value");
    /* the vector form gives bf16_round's bits for every kind of input, in runs of odd length */
    uint32_t pats[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x7FC00001u, 0xFF812345u, 0x7F800000u, 0xFF800000u,
                       0x7F7FFFFFu, 0x00000001u, 0x80008000u, 0x80018000u, 0x00000000u, 0x80000000u, 0x3F7FFFFFu};
    float v[64], w[64];
    for (int i = 0; i < 64; i++) v[i] = bits_f32(i < 14 ? pats[i] : (uint32_t)splitmix64((uint64_t)i));
    int same = 1;
    for (int n = 1; n <= 64; n += 7) {
        memcpy(w, v, sizeof v);
        bf16_round_n(w, n);
        for (int i = 0; i < 64; i++) {
            float want = i < n ? bf16_round(v[i]) : v[i];
            same &= memcmp(&w[i], &want, sizeof want) == 0;
        }
    }
    CHECK(same, "bf16_round_n equals bf16_round bit for bit");
    /* e8m0: exactly 1.5*2^k goes to the even exponent */
    CHECK(e8m0_to_f32(f32_to_e8m0(1.5f)) == 2.0f, "e8m0(1.5) = 2 (exponent 127 odd -> 128)");
    CHECK(e8m0_to_f32(f32_to_e8m0(3.0f)) == 2.0f, "e8m0(3) = 2 (exponent 128 even stays)");
    CHECK(e8m0_to_f32(f32_to_e8m0(1.4f)) == 1.0f && e8m0_to_f32(f32_to_e8m0(1.6f)) == 2.0f, "e8m0 nearest");
    CHECK(e8m0_to_f32(f32_to_e8m0(0.75f)) == 0.5f, "e8m0(0.75) = 0.5 (exponent 126 even stays)");
    /* e2m1 ties go to the even code */
    static const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -1.2f, 7.0f, -0.25f};
    static const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -1.0f, 6.0f, -0.0f};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        CHECK(e2m1_to_f32(f32_to_e2m1(in[i])) == want[i], "e2m1(%g) = %g, want %g", in[i],
              e2m1_to_f32(f32_to_e2m1(in[i])), want[i]);
    CHECK(pow2_ceil(1.0f) == 1.0f && pow2_ceil(1.0001f) == 2.0f && pow2_ceil(0.3f) == 0.5f, "pow2_ceil");
}

static void test_fake_quant(void) {
    float x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = bf16_round(sinf((float)i) * 3.0f);
    memcpy(y, x, sizeof x);
    fp8_fake_quant(y, 32);
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = pow2_ceil(amax / 448.0f);
    int ok = 1;
    for (int i = 0; i < 32; i++) ok &= y[i] == e4m3_to_f32(f32_to_e4m3(x[i] / s)) * s && fabsf(y[i] - x[i]) <= fabsf(x[i]) / 16;
    CHECK(ok, "fp8 fake quant is e4m3 with a power-of-two scale");
    memcpy(y, x, sizeof x);
    fp4_fake_quant_e8m0(y, 32, 32);
    s = pow2_ceil(amax / 6.0f);
    ok = 1;
    for (int i = 0; i < 32; i++) ok &= y[i] == e2m1_to_f32(f32_to_e2m1(x[i] / s)) * s;
    CHECK(ok, "fp4 e8m0 fake quant");
    float z[16] = {0};
    fp4_fake_quant_e4m3(z, 16, 16);
    CHECK(z[0] == 0.0f && z[15] == 0.0f, "an all-zero fp4 block stays zero (scale floor keeps it finite)");
}

/* Packed rows: the codes and scales where numerics.h puts them, and unpacking that gives the
 * fake-quantized values bit for bit on rows of every kind of value: zeros of both signs, NaN,
 * blocks from 2^-40 to 2^20 (subnormal e4m3 codes, scale floors), values far below their block's
 * largest. */
static void test_packed(void) {
    enum { N = 256 };
    float x[N], f[N], y[N];
    uint8_t row[N + N / 32];
    uint32_t seed = 7;
    int same[3] = {1, 1, 1}, daz[3] = {1, 1, 1};
    for (int trial = 0; trial < 300; trial++) {
        float mag = 1.0f;
        for (int i = 0; i < N; i++) {
            seed = seed * 1664525u + 1013904223u;
            if (i % 32 == 0) mag = ldexpf(1.0f, (int)(seed >> 26) - 40);
            float v = ((float)(seed >> 8 & 0xFFFF) / 32768.0f - 1.0f) * mag;
            int kind = (int)(seed >> 4 & 15);
            x[i] = kind == 0 ? 0.0f : kind == 1 ? -0.0f : kind == 2 && trial % 7 == 0 ? NAN : kind == 3 ? v * 1e-5f : bf16_round(v);
        }
        for (int k = 0; k < 3; k++) {
            memcpy(f, x, sizeof x);
            if (k == 0) fp8_fake_quant(f, N), fp8_pack(x, N, row), fp8_unpack(row, N, y);
            if (k == 1) fp4_fake_quant_e8m0(f, N, 32), fp4_pack_e8m0(x, N, row), fp4_unpack_e8m0(row, N, y);
            if (k == 2) fp4_fake_quant_e4m3(f, N, 16), fp4_pack_e4m3(x, N, row), fp4_unpack_e4m3(row, N, y);
            same[k] &= !memcmp(f, y, sizeof f);
#if defined(__x86_64__)
            /* a thread with denormals-are-zero (MXCSR.DAZ, as code built with -ffast-math sets it)
             * unpacks the same values: no value goes through a subnormal on the way */
            unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x0040);
            if (k == 0) fp8_unpack(row, N, y);
            if (k == 1) fp4_unpack_e8m0(row, N, y);
            if (k == 2) fp4_unpack_e4m3(row, N, y);
            _mm_setcsr(csr);
            daz[k] &= !memcmp(f, y, sizeof f);
#endif
        }
    }
    CHECK(same[0], "an fp8 row unpacks to the fp8 fake quant's values, bit for bit");
    CHECK(same[1], "an fp4 row with ue8m0 scales unpacks to its fake quant's values, bit for bit");
    CHECK(same[2], "an fp4 row with e4m3 scales unpacks to its fake quant's values, bit for bit");
    CHECK(daz[0] && daz[1] && daz[2], "the three unpack to the same values with denormals-are-zero set");
    CHECK(fp8_row_bytes(512) == 528 && fp4_row_bytes(512, 16) == 288 && fp4_row_bytes(128, 32) == 68,
          "V4.1-Flash's rows: 528, 288 and 68 bytes");
    memset(x, 0, sizeof x);
    x[0] = 1.0f;  /* fp8: s = 2^-8 (ue8m0 byte 119), 1.0 / s = 256 is e4m3 0x78; second block s = 2^-9 */
    x[33] = -0.5f; /* fp4 ue8m0, second block: s = pow2_ceil(0.5 / 6) = 2^-3 (byte 124), -4 is e2m1 0xE */
    fp8_pack(x, 64, row);
    CHECK(row[0] == 0x78 && row[1] == 0 && row[64] == 119 && row[65] == 118, "fp8 row: the codes, then a scale byte per 32");
    fp4_pack_e8m0(x, 64, row);
    CHECK(row[0] == 0x06 && row[16] == 0xE0 && row[32] == 125 && row[33] == 124,
          "fp4 row: two codes a byte, the even element low, then a ue8m0 byte per 32");
    x[1] = 3.0f; /* fp4 e4m3, first block: amax 3, s = e4m3(0.5) = 0x30; 1 / 0.5 = 2 is 0x4, 3 / 0.5 = 6 is 0x7 */
    fp4_pack_e4m3(x, 32, row);
    CHECK(row[0] == 0x74 && row[16] == 0x30, "fp4 row: an e4m3 scale byte per 16");
}

static void test_filler(void) {
    static const uint64_t probe[8] = {4530187002354869821ULL, 17455673724717726068ULL, 7244518941104967962ULL,
                                      6691932448422664946ULL, 5177458398162290887ULL, 7567973285506226951ULL,
                                      2584614307495523529ULL, 3386116918508268945ULL};
    for (int i = 0; i < 8; i++) CHECK(fixed_raw("probe", (uint64_t)i) == probe[i], "fixed_raw(probe, %d)", i);
    CHECK(fnv1a64("embed.weight") == 0x9ac37bcac2dc8a00ULL, "fnv1a64(embed.weight)");
    CHECK(fixed_raw("embed.weight", 0) == 0x847c3095632f2542ULL, "raw z of embed.weight[0]");
    float e0 = fixed_value("embed.weight", 0, 0.5, 0.0);
    CHECK(f32_bits(e0) == 0x3c8f8600u, "embed.weight[0] bits");
    CHECK(bf16_round(fixed_value("embed.weight", 1, 0.5, 0.0)) == -0.34765625f, "embed.weight[1] after bf16");
    CHECK(bf16_round(fixed_value("embed.weight", 2, 0.5, 0.0)) == -0.01055908203125f, "embed.weight[2] after bf16");
    CHECK(f32_bits(fixed_value("layers.0.hc_attn_fn", 0, 0.0625, 0.0)) == 0x3b1c86e0u, "hc_attn_fn[0]");
    CHECK(fixed_value("layers.0.hc_attn_fn", 1, 0.0625, 0.0) == -0.04594811797142029f, "hc_attn_fn[1]");
    static const float norm[4] = {0.97265625f, 1.0390625f, 1.0234375f, 0.953125f};
    for (int i = 0; i < 4; i++)
        CHECK(bf16_round(fixed_value("layers.0.attn_norm.weight", (uint64_t)i, 0.05, 1.0)) == norm[i], "attn_norm[%d]", i);
    CHECK(fixed_value("head.weight", 0, 0.125, 0.0) == 0.056958675384521484f, "head.weight[0]");
    CHECK(fixed_value("head.weight", 1, 0.125, 0.0) == -0.10099005699157715f, "head.weight[1]");
    static const uint64_t ids[14] = {2, 17, 47, 13, 32, 59, 39, 29, 42, 31, 36, 6, 27, 8};
    for (int t = 0; t < 14; t++) CHECK(fixed_int("input_ids", (uint64_t)t, 64) == ids[t], "input id %d", t);
}

/* Index sets recorded from torch 2.11's CPU topk: values as text, '-' = -inf, '+' = +inf. */
static void test_topk_ties(void) {
    static const struct { const char *vals; int k; int want[6]; } cases[] = {
        {"1 1 - - - - - 1 - - - -", 6, {0, 1, 7, 8, 9, 11}},
        {"0 0 0 - .25 - 1 - 0 - - .25", 6, {0, 2, 4, 6, 8, 11}},
        {"- 0 - .25 - - - - 2 - - - -", 6, {1, 3, 8, 9, 10, 12}},
        {"- - - 1 - - - - - - 0 - 1 -", 6, {3, 8, 9, 10, 11, 12}},
        {"1 0 1 0 - - - 2 .5 - 1 1", 6, {0, 2, 7, 8, 10, 11}},
        {"- - - - - - - - - 0 0 - .5", 6, {6, 7, 8, 9, 10, 12}},
        {".25 - - - - - - - - 0 - - - 1", 6, {0, 7, 8, 9, 12, 13}},
        {"- 1 .5 - - 1 - 2 .25 0 0 1", 6, {1, 2, 5, 7, 8, 11}},
        {"- .25 - - .5 - 0 2 - 0 .25 0 - -", 6, {1, 4, 6, 7, 10, 11}},
        {"- - - - .5 +", 3, {3, 4, 5}},
        {"- - - 0 0 + .5", 3, {3, 5, 6}},
        {"1 - .5 - - +", 3, {0, 2, 5}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        float v[32];
        int n = 0;
        char buf[128];
        snprintf(buf, sizeof buf, "%s", cases[c].vals);
        for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " "))
            v[n++] = tok[0] == '-' && !tok[1] ? -INFINITY : tok[0] == '+' ? INFINITY : strtof(tok, NULL);
        int32_t got[6], k = cases[c].k;
        topk_torch_cpu(v, n, k, got);
        for (int i = 1; i < k; i++) /* sort the set */
            for (int j = i; j > 0 && got[j] < got[j - 1]; j--) { int32_t t = got[j]; got[j] = got[j - 1]; got[j - 1] = t; }
        int same = 1;
        for (int i = 0; i < k; i++) same &= got[i] == cases[c].want[i];
        CHECK(same, "top-k tie case %zu: got {%d,%d,%d,...}", c, got[0], got[1], got[2]);
    }
}

/* Rows long enough for torch's partial sort (k * 64 <= n): the set is the first k by value, ties
 * to the lower index. Checked against a count of what beats each entry, on rows of few distinct
 * values (ties everywhere), NaN and -inf among them. */
static void test_topk_long(void) {
    static float v[40000];
    static int32_t got[600];
    static uint8_t in[40000];
    uint32_t seed = 7;
    int bad = 0;
    for (int rep = 0; rep < 6; rep++) {
        int32_t n = rep < 3 ? 40000 : 33000 + 777 * rep, k = rep % 2 ? 512 : 60; /* k * 64 <= n */
        for (int32_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            uint32_t r = (seed >> 9) % (rep == 5 ? 3 : 50);
            v[i] = r == 0 ? -INFINITY : r == 1 && rep == 4 ? NAN : (float)r * 0.25f;
        }
        topk_torch_cpu(v, n, k, got);
        memset(in, 0, (size_t)n);
        for (int32_t j = 0; j < k; j++) in[got[j]] = 1;
        /* i is in the set iff fewer than k entries come before it: greater (NaN greatest), or
         * equal at a lower index */
        for (int32_t i = 0; i < n; i++) {
            int32_t above = 0;
            for (int32_t j = 0; j < n && above < k; j++) {
                int jn = isnan(v[j]), in_ = isnan(v[i]);
                above += (jn && !in_) || (!jn && !in_ && v[j] > v[i]) || (j < i && jn == in_ && (jn || v[j] == v[i]));
            }
            bad += (above < k) != in[i];
        }
    }
    CHECK(bad == 0, "top-k of long rows: %d entries in or out of the set wrongly", bad);
}

static void test_sinkhorn(void) {
    float mix[24], scale[3] = {1.0f, 1.0f, 1.0f}, base[24] = {0}, pre[4], post[4], comb[16];
    for (int i = 0; i < 24; i++) mix[i] = sinf((float)i * 1.7f) * 2.0f;
    hc_split_sinkhorn(mix, scale, base, 4, 20, 1e-6f, pre, post, comb);
    int ok = 1;
    for (int j = 0; j < 4; j++) {
        float rs = 0, cs = 0;
        for (int k = 0; k < 4; k++) { rs += comb[j * 4 + k]; cs += comb[k * 4 + j]; }
        ok &= fabsf(rs - 1.0f) < 1e-3f && fabsf(cs - 1.0f) < 1e-5f;
        ok &= fabsf(pre[j] - (1.0f / (1.0f + expf(-mix[j])) + 1e-6f)) < 1e-7f;
        ok &= fabsf(post[j] - 2.0f / (1.0f + expf(-mix[4 + j]))) < 1e-7f;
    }
    CHECK(ok, "Sinkhorn: columns sum to 1, rows nearly, pre/post are the sigmoids");
    hc_split_sinkhorn(mix, scale, base, 4, 1, 1e-6f, pre, post, comb);
    float s0 = 0;
    for (int k = 0; k < 4; k++) s0 += comb[k * 4];
    CHECK(fabsf(s0 - 1.0f) < 1e-6f, "one iteration ends with a column pass");
}

int main(void) {
    test_e4m3();
    test_bf16_e8m0_e2m1();
    test_fake_quant();
    test_packed();
    test_filler();
    test_topk_ties();
    test_topk_long();
    test_sinkhorn();
    return test_summary();
}
