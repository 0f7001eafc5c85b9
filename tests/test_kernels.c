/* test_kernels.c - every fast kernel set this CPU runs against the scalar reference.
 *
 * quant (fp8 with 32x32 and per-row scales, fp4) and dense (f32, bf16, and e4m3 / fp4 through
 * the dequantizing path, in the canonical order of src/kernels/scalar.c) must equal the scalar kernel
 * bit for bit. Shapes are odd on purpose (rows and cols not multiples of 4/8/16/32, cols < 32,
 * chunks crossed); small shapes run at every token count from 1 to 40, large ones at 1, 2, 3, 7,
 * 13, 17, 40 and 64 (every tile remainder, both sides of the many-token paths); inputs mix large
 * and small magnitudes and zeros, and every result must not depend on how the rows are split.
 * Since the scalar kernel computes each token alone, equal bits also mean that no result depends
 * on the call's token count. Buffers end at a guard page, so reading past a weight, scale or
 * input faults. */
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/kernels.h"
#include "numerics.h"
#if defined(__x86_64__)
#define TILE_NATIVE 0
#include "kernels/amx_tiles.h"
#endif
#include "testing.h"

/* ---- buffers whose last byte sits just before an inaccessible page */
typedef struct { void *base; size_t len; } guard;
static guard guards[64];
static int n_guards;

static void *guarded(size_t n) {
    if (n_guards == (int)(sizeof guards / sizeof *guards)) { fprintf(stderr, "too many guarded buffers\n"); exit(2); }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (n + page - 1) / page * page + page;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { perror("mmap"); exit(2); }
    mprotect(m + len - page, page, PROT_NONE);
    guards[n_guards++] = (guard){m, len};
    return m + len - page - n;
}

static void free_guarded(void) {
    while (n_guards > 0) { n_guards--; munmap(guards[n_guards].base, guards[n_guards].len); }
}

/* ---- random numbers */
static uint64_t rng_state = 12345;
static uint64_t rnd(void) { return splitmix64(rng_state++); }
static double unif(void) { return (double)(rnd() >> 11) * 0x1p-53; }

/* a value of varied magnitude: 1 in 8 zero, otherwise sign * 10^[-3, 3) */
static float wild(void) {
    uint64_t r = rnd();
    if (r % 8 == 0) return 0.0f;
    return (float)((r & 16 ? -1.0 : 1.0) * pow(10.0, 6.0 * unif() - 3.0));
}

/* act_quant as linear() does it: e4m3 values and power-of-two scales per 32, by the scalar set
 * (itself checked against worked values in test_act_quant_values) */
static void act_quant(const float *x, int64_t n, float *q, float *s) { kernels_scalar.act_quant(x, n, q, s); }

/* ---- weights of each kind */
typedef enum { K_F32, K_BF16, K_E4M3_TILE, K_E4M3_ROW, K_FP4, N_KINDS } kind;
static const char *const KIND_NAME[N_KINDS] = {"f32", "bf16", "e4m3/32x32", "e4m3/row", "fp4"};

static uint8_t random_scale(void) {
    uint64_t r = rnd() % 64;
    if (r == 0) return 0;          /* 2^-127, subnormal */
    if (r == 1) return 254;        /* 2^127 */
    return (uint8_t)(112 + rnd() % 24);
}

static weight make_weight(kind k, int64_t rows, int64_t cols) {
    weight w = {0};
    w.rows = rows;
    w.cols = cols;
    w.mode = AS_STORED;
    int64_t nb = (cols + 31) / 32;
    switch (k) {
    case K_F32: {
        float *d = guarded((size_t)(rows * cols) * 4);
        for (int64_t i = 0; i < rows * cols; i++) d[i] = wild();
        w.type = DT_F32;
        w.data = d;
        break;
    }
    case K_BF16: {
        uint16_t *d = guarded((size_t)(rows * cols) * 2);
        for (int64_t i = 0; i < rows * cols; i++) d[i] = f32_to_bf16(wild());
        w.type = DT_BF16;
        w.data = d;
        break;
    }
    case K_E4M3_TILE:
    case K_E4M3_ROW: {
        uint8_t *d = guarded((size_t)(rows * cols));
        for (int64_t i = 0; i < rows * cols; i++) {
            uint8_t c = (uint8_t)rnd();
            d[i] = (c & 0x7F) == 0x7F ? c ^ 1 : c; /* no NaN codes here; they have their own test */
        }
        w.type = DT_E4M3;
        w.data = d;
        w.scale_rows = k == K_E4M3_TILE ? 32 : 1;
        break;
    }
    case K_FP4: {
        int64_t rb = (cols + 1) / 2;
        uint8_t *d = guarded((size_t)(rows * rb));
        for (int64_t i = 0; i < rows * rb; i++) d[i] = (uint8_t)rnd();
        w.type = DT_FP4;
        w.data = d;
        w.scale_rows = 1;
        break;
    }
    default: break;
    }
    if (w.scale_rows) {
        int64_t srows = (rows + w.scale_rows - 1) / w.scale_rows;
        uint8_t *s = guarded((size_t)(srows * nb));
        for (int64_t i = 0; i < srows * nb; i++) s[i] = random_scale();
        w.scale = s;
    }
    return w;
}

/* ---- comparing */
static int same_bits(float a, float b) { return f32_bits(a) == f32_bits(b); }

#define SENTINEL 12345.0f

/* Runs k and scalar on rows [0, rows) for T tokens, x with stride xstride and y with stride rows + 3,
 * then on a few row splits; counts checks. */
static void check_case(const kernel_set *k, const weight *w, int quant, int64_t T, const float *x, const float *xs,
                       int64_t xstride, const char *what) {
    const int64_t rows = w->rows, ys = rows + 3, n = T * ys;
    float *want = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    float *part = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) want[i] = got[i] = part[i] = SENTINEL;
    rows_fn ref = quant ? kernels_scalar.quant : kernels_scalar.dense, fast = quant ? k->quant : k->dense;
    ref(w, 0, rows, x, xs, T, xstride, want, ys);
    fast(w, 0, rows, x, xs, T, xstride, got, ys);
    int64_t bad = 0, first = -1;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < ys; r++) {
            int64_t i = t * ys + r;
            int ok = same_bits(got[i], r >= rows ? SENTINEL : want[i]);
            if (!ok && bad++ == 0) first = i;
        }
    CHECK(bad == 0, "%s %s %s rows=%lld cols=%lld T=%lld: %lld outputs differ, first [t=%lld r=%lld] %.9g vs %.9g",
          k->name, quant ? "quant" : "dense", what, (long long)rows, (long long)w->cols, (long long)T, (long long)bad,
          (long long)(first / ys), (long long)(first % ys), bad ? got[first] : 0.0, bad ? want[first] : 0.0);
    /* the same rows computed in pieces give the same bits */
    const int64_t cuts[] = {1, 3, rows / 2, rows - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        int64_t cut = cuts[c];
        if (cut <= 0 || cut >= rows) continue;
        fast(w, 0, cut, x, xs, T, xstride, part, ys);
        fast(w, cut, rows, x, xs, T, xstride, part + cut, ys);
        CHECK(memcmp(part, got, (size_t)n * sizeof(float)) == 0, "%s %s %s rows=%lld cols=%lld T=%lld: split at %lld differs",
              k->name, quant ? "quant" : "dense", what, (long long)rows, (long long)w->cols, (long long)T, (long long)cut);
    }
    free(want);
    free(got);
    free(part);
}

static void test_set(const kernel_set *k) {
    static const int64_t shapes[][2] = {{1, 1},  {1, 7},   {3, 31},  {5, 32},   {2, 33},    {7, 63},   {9, 64},
                                        {6, 65}, {11, 96}, {13, 127}, {4, 128}, {17, 129},  {5, 200},  {33, 255},
                                        {19, 513}, {8, 1000}, {6, 2080}, {5, 4130}, {3, 8200}, {70, 96}, {3, 0}, {37, 8200}, {530, 160},
                                        {2100, 40}};
    static const int64_t Ts[] = {1, 2, 3, 5, 7, 8, 13, 17, 40, 64};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1], nb = (cols + 31) / 32;
        const int every = rows * cols <= 3000; /* every token count from 1 to 40 */
        for (int64_t ti = 0; ti < (every ? 40 : (int64_t)(sizeof Ts / sizeof *Ts)); ti++) {
            const int64_t T = every ? ti + 1 : Ts[ti];
            /* Under a sanitizer or qemu (10x slower, the tile emulation most) the large shapes at
             * many tokens took most of the time: there it checks up to 17 tokens (past the 8- and
             * 16-token tiles) and the counts around 32 on the small shapes; a native build
             * checks every count */
            if (TEST_SLOWDOWN > 1.0 && T > 17 && (rows * cols > 50000 || (every && T != 31 && T != 32 && T != 33 && T != 40)))
                continue;
            /* keeps the scalar reference quick; 37 x 8200 at T = 7 crosses the dense cache blocks */
            if (cols > 1000 && (T >= 40 || (T > 3 && rows < 30))) continue;
            const int64_t xstride = cols + (T % 2) * 5; /* strided activations on odd T */
            float *x = guarded((size_t)(T * xstride) * sizeof(float));
            float *q = guarded((size_t)(T * xstride) * sizeof(float));
            float *xs = guarded((size_t)(T * nb) * sizeof(float));
            for (int64_t i = 0; i < T * xstride; i++) x[i] = q[i] = wild();
            for (int64_t t = 0; t < T; t++) act_quant(x + t * xstride, cols, q + t * xstride, xs + t * nb);
            for (int kd = 0; kd < N_KINDS; kd++) {
                weight w = make_weight((kind)kd, rows, cols);
                if (w.type == DT_E4M3 || w.type == DT_FP4) check_case(k, &w, 1, T, q, xs, xstride, KIND_NAME[kd]);
                check_case(k, &w, 0, T, x, NULL, xstride, KIND_NAME[kd]);
            }
            free_guarded();
        }
    }
}

/* Turns denormals-are-zero / flush-to-zero on or off for this thread. */
static void set_flush(int on) {
#if defined(__x86_64__)
    unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? csr | 0x8040 : csr & ~0x8040u);
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    fpcr = on ? fpcr | (1ull << 24) : fpcr & ~(1ull << 24);
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#else
    (void)on;
#endif
}

/* Inputs or weights outside the exact formats still give the scalar kernel's bits. */
static void test_outside_at(const kernel_set *k, int64_t T) {
    const int64_t rows = 9, cols = 77, nb = 3;
    float *x = guarded((size_t)(T * cols) * sizeof(float)), *q = guarded((size_t)(T * cols) * sizeof(float));
    float *xs = guarded((size_t)(T * nb) * sizeof(float));
    for (int64_t i = 0; i < T * cols; i++) x[i] = wild();
    for (int64_t t = 0; t < T; t++) act_quant(x + t * cols, cols, q + t * cols, xs + t * nb);
    weight w8 = make_weight(K_E4M3_ROW, rows, cols), w4 = make_weight(K_FP4, rows, cols);
    /* an input that is no e4m3 value */
    float keep = q[40];
    q[40] = 1.0f / 3.0f;
    check_case(k, &w8, 1, T, q, xs, cols, "e4m3, input 1/3");
    check_case(k, &w4, 1, T, q, xs, cols, "fp4, input 1/3");
    /* an input past the e4m3 range: the integer paths (inputs of at most 448 * 512 in their
     * digits) must leave it to a kernel that takes it */
    q[40] = 1000.0f;
    check_case(k, &w8, 1, T, q, xs, cols, "e4m3, input 1000");
    check_case(k, &w4, 1, T, q, xs, cols, "fp4, input 1000");
    /* and far past it (a NaN or huge activation from bad weights): no integer path overflows */
    q[40] = 3e38f;
    check_case(k, &w8, 1, T, q, xs, cols, "e4m3, input 3e38");
    check_case(k, &w4, 1, T, q, xs, cols, "fp4, input 3e38");
    /* and -2^22, whose 512x is exactly INT32_MIN, what the f32 -> int32 conversion also gives for
     * every input out of its range: a range check must not take it for a small integer */
    q[40] = -0x1p22f;
    check_case(k, &w8, 1, T, q, xs, cols, "e4m3, input -2^22");
    check_case(k, &w4, 1, T, q, xs, cols, "fp4, input -2^22");
    q[40] = keep;
    /* inputs with nothing in the low 3 bits of 512x (no input below 1/8): the integer paths
     * skip their products of those bits everywhere */
    float *coarse = guarded((size_t)(T * cols) * sizeof(float));
    for (int64_t i = 0; i < T * cols; i++) coarse[i] = (float)((int64_t)(rnd() % 897) - 448) * 0.5f;
    check_case(k, &w4, 1, T, coarse, xs, cols, "fp4, inputs on a 1/2 grid");
    check_case(k, &w8, 1, T, coarse, xs, cols, "e4m3, inputs on a 1/2 grid");
    /* the largest sums: inputs and weights in [256, 448], every 8th column of both small (their
     * products give the sums low bits), rows of one sign beside mixed rows (fp8 with many tokens
     * joins sums past 2^36 another way) */
    weight wbig = make_weight(K_E4M3_ROW, rows, cols);
    float *big = guarded((size_t)(T * cols) * sizeof(float));
    for (int64_t i = 0; i < T * cols; i++)
        big[i] = e4m3_to_f32((uint8_t)(i % cols % 8 == 2 ? 0x30 + rnd() % 16 : 0x78 + rnd() % 7));
    for (int64_t c = 0; c < cols; c++) {
        uint8_t code = (uint8_t)(c % 8 == 2 ? 0x28 + rnd() % 24 : 0x78 + rnd() % 7);
        ((uint8_t *)wbig.data)[2 * cols + c] = code;
        ((uint8_t *)wbig.data)[3 * cols + c] = code | 0x80;
    }
    check_case(k, &wbig, 1, T, big, xs, cols, "e4m3, the largest products");
    /* a NaN weight code, and NaN / huge scales */
    ((uint8_t *)w8.data)[5 * cols + 70] = 0x7F;
    check_case(k, &w8, 1, T, q, xs, cols, "e4m3 with a NaN code");
    check_case(k, &w8, 0, T, x, NULL, cols, "e4m3 with a NaN code");
    ((uint8_t *)w8.data)[5 * cols + 70] = 0x3F; /* the largest finite code's low bits, no NaN */
    ((uint8_t *)w8.data)[(rows - 1) * cols + cols - 1] = 0xFF;
    check_case(k, &w8, 1, T, q, xs, cols, "e4m3 with a negative NaN code");
    ((uint8_t *)w4.scale)[4 * nb + 1] = 255;
    check_case(k, &w4, 1, T, q, xs, cols, "fp4 with a NaN scale");
    /* input scales far below any act_quant gives (the fp4 paths fold 2^-10 or 2^-7 into them,
     * fp8 with many tokens 2^-15): one among normal ones, then all of them, so that their
     * products are what the sums hold */
    weight w8n = make_weight(K_E4M3_ROW, rows, cols); /* w8 holds NaN codes by now */
    float keep_s = xs[1];
    xs[1] = 0x1.000002p-120f; /* 2^-10 of it is no f32 */
    check_case(k, &w4, 1, T, q, xs, cols, "fp4 with an input scale near 2^-120");
    check_case(k, &w8n, 1, T, q, xs, cols, "e4m3 with an input scale near 2^-120");
    xs[1] = keep_s;
    float *tiny = guarded((size_t)(T * nb) * sizeof(float));
    for (int64_t i = 0; i < T * nb; i++) tiny[i] = 0x1.000002p-120f;
    check_case(k, &w4, 1, T, q, tiny, cols, "fp4 with input scales near 2^-120");
    check_case(k, &w8n, 1, T, q, tiny, cols, "e4m3 with input scales near 2^-120");
    /* subnormal weights with denormals flushed (the fp8 path decodes to subnormal f32) */
    weight ws = make_weight(K_E4M3_TILE, rows, cols);
    for (int64_t i = 0; i < rows * cols; i += 3) ((uint8_t *)ws.data)[i] &= 0x87; /* exponent 0 */
    set_flush(1);
    check_case(k, &ws, 1, T, q, xs, cols, "e4m3 subnormals, denormals flushed");
    set_flush(0);
    check_case(k, &ws, 1, T, q, xs, cols, "e4m3 subnormals");
    free_guarded();
}

/* Weights and inputs none of which is below 1/8, over whole superblocks of 512 columns: the fp8
 * tiles then take their main products alone, with no second pass (amx from 16 tokens: no D or E
 * products), and every block's sum (up to 2^35, any low bits) must be rounded once. Random codes
 * elsewhere put a small weight in nearly every superblock, and a part-filled one pads with zero
 * codes, so only this case reaches that join. */
static void test_main_sums(const kernel_set *k) {
    static const int64_t Ts[] = {1, 2, 6, 8, 13, 17, 33};
    const int64_t rows = 9, cols = 1024, nb = cols / 32;
    weight w = make_weight(K_E4M3_TILE, rows, cols);
    for (int64_t i = 0; i < rows * cols; i++) ((uint8_t *)w.data)[i] = (uint8_t)((0x20 + rnd() % 0x5F) | (rnd() & 0x80));
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        const int64_t T = Ts[ti];
        float *x = guarded((size_t)(T * cols) * sizeof(float)), *xs = guarded((size_t)(T * nb) * sizeof(float));
        for (int64_t i = 0; i < T * cols; i++) x[i] = e4m3_to_f32((uint8_t)((0x20 + rnd() % 0x5F) | (rnd() & 0x80)));
        for (int64_t i = 0; i < T * nb; i++) xs[i] = ldexpf(1.0f, (int)(rnd() % 21) - 10);
        check_case(k, &w, 1, T, x, xs, cols, "e4m3, no weight or input below 1/8");
    }
}

/* at one token (the decode step) and a few (the tiles; dense in one pass from 5 to 8), and at
 * more (the paths with tokens in lanes: fp8 and fp4 from 8, dense from 16; 17 and 40 end in a
 * part-filled vector of 16) */
static void test_outside(const kernel_set *k) {
    test_outside_at(k, 1);
    test_outside_at(k, 2);
    test_outside_at(k, 6);
    test_outside_at(k, 9);
    test_outside_at(k, 17);
    test_outside_at(k, 40);
}

/* The set's act_quant gives the scalar set's scales and values bit for bit (NaN for NaN). */
static void test_act_quant(const kernel_set *k) {
    static const int64_t ns[] = {1, 7, 31, 32, 33, 64, 95, 1000, 2048};
    /* grid ties after the scale of 1 that 448 gives: even mantissas win, in both ranges */
    static const float ties[] = {448.0f,          1.0625f,          1.1875f,        -1.1875f,      2.5f * 0x1p-9f,
                                 3.5f * 0x1p-9f,  7.5f * 0x1p-9f,   0.5f * 0x1p-9f, -0.5f * 0x1p-9f, 0x1p-130f,
                                 -0.0f,           15.75f * 0x1p-6f, 460.0f,         -1e30f,        240.0f};
    int bad = 0;
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        const int64_t n = ns[ni], nb = (n + 31) / 32;
        for (int pass = 0; pass < 3; pass++) {
            float *x = guarded((size_t)n * sizeof(float)), *q = guarded((size_t)n * sizeof(float));
            float *s = guarded((size_t)nb * sizeof(float)), *qr = guarded((size_t)n * sizeof(float));
            float *sr = guarded((size_t)nb * sizeof(float));
            for (int64_t i = 0; i < n; i++) x[i] = wild();
            if (pass == 1) /* ties, in the first block and spread over the rest */
                for (int64_t i = 0; i < n; i++)
                    if (i < 15 || rnd() % 4 == 0) x[i] = ties[(i < 15 ? i : (int64_t)(rnd() % 15))];
            if (pass == 2) /* non-finite values and extremes here and there */
                for (int64_t i = 0; i < n; i += 37) x[i] = (float[]){NAN, INFINITY, -INFINITY, 3e38f, 0x1p-149f}[rnd() % 5];
            k->act_quant(x, n, q, s);
            act_quant(x, n, qr, sr);
            for (int64_t b = 0; b < nb; b++) bad += memcmp(&s[b], &sr[b], sizeof(float)) != 0 && !(isnan(s[b]) && isnan(sr[b]));
            for (int64_t i = 0; i < n; i++) bad += memcmp(&q[i], &qr[i], sizeof(float)) != 0 && !(isnan(q[i]) && isnan(qr[i]));
            free_guarded();
        }
    }
    CHECK(bad == 0, "%s act_quant equals the scalar set's bit for bit (%d differences)", k->name, bad);
}

/* The scalar act_quant against worked values: one block whose largest magnitude, 448, gives
 * the scale 1, so each output is its input rounded to the e4m3 grid (step 2^-3 in [1, 2),
 * 2^-9 below 2^-6), ties to the even mantissa, signs kept; and a block of
 * tiny values, whose scale floors at pow2_ceil(1e-4 / 448) = 2^-22. */
static void test_act_quant_values(void) {
    static const float in[32] = {448.0f, 1.0625f, 1.1875f, -1.1875f, 2.5f * 0x1p-9f, 3.5f * 0x1p-9f, 7.5f * 0x1p-9f,
                                 0.5f * 0x1p-9f, -0.5f * 0x1p-9f, 0x1p-130f, -0.0f, 15.75f * 0x1p-6f, 100.0f, -200.0f,
                                 240.0f, 1.3f, -300.0f, 0.01f};
    static const float want[32] = {448.0f, 1.0f, 1.25f, -1.25f, 2.0f * 0x1p-9f, 4.0f * 0x1p-9f, 8.0f * 0x1p-9f,
                                   0.0f, -0.0f, 0.0f, -0.0f, 16.0f * 0x1p-6f, 96.0f, -192.0f,
                                   240.0f, 1.25f, -288.0f, 5.0f * 0x1p-9f};
    float q[32], s[1];
    kernels_scalar.act_quant(in, 32, q, s);
    int bad = s[0] != 1.0f;
    for (int i = 0; i < 32; i++) bad += memcmp(&q[i], &want[i], sizeof(float)) != 0;
    CHECK(bad == 0, "scalar act_quant: worked values (%d wrong, scale %g)", bad, (double)s[0]);
    float tiny[3] = {1e-9f, -3e-9f, 0.0f}, qt[3], st[1];
    kernels_scalar.act_quant(tiny, 3, qt, st);
    CHECK(st[0] == 0x1p-22f && qt[0] == e4m3_to_f32(f32_to_e4m3(1e-9f * 0x1p22f)) &&
              qt[1] == e4m3_to_f32(f32_to_e4m3(-3e-9f * 0x1p22f)) && qt[2] == 0.0f,
          "scalar act_quant: the amax floor");
}

#if defined(__x86_64__)
/* The emulated tile operations against TDPBUSD's and TDPBSSD's definition, written out here on
 * its own: for random shapes within the limits (M <= 16 rows, K <= 16 dwords, N <= 16 dwords) and
 * random bytes, C[m][n] + sum over k < 4K of A[m][k] (unsigned for TDPBUSD, signed for TDPBSSD)
 * * B[k / 4][4n + k % 4] (signed), in int64 and
 * then wrapped to 32 bits; accumulators near the int32 limits make the sums wrap. Loads and
 * stores keep to the configured rows and bytes (with a stride), and ldtilecfg's rules refuse
 * what the instruction refuses. */
static void test_tiles(void) {
    int bad = 0;
    for (int it = 0; it < 200; it++) {
        const int M = 1 + (int)(rnd() % 16), K = 1 + (int)(rnd() % 16), N = 1 + (int)(rnd() % 16);
        uint8_t a[16][80];
        int8_t b[16][80];
        int32_t c[16][20], got[16][20];
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 80; j++) a[r][j] = (uint8_t)rnd(), b[r][j] = (int8_t)rnd();
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 20; j++) c[r][j] = it % 3 ? (int32_t)rnd() : (int32_t)(rnd() % 2 ? 0x7FFFFF00 : -0x7FFFFF00);
        memset(got, 0x5A, sizeof got);
        amx_tilecfg cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        cfg.rows[0] = (uint8_t)M, cfg.colsb[0] = (uint16_t)(4 * K); /* A */
        cfg.rows[1] = (uint8_t)K, cfg.colsb[1] = (uint16_t)(4 * N); /* B */
        cfg.rows[5] = (uint8_t)M, cfg.colsb[5] = (uint16_t)(4 * N); /* C */
        bad += !amx_tilecfg_valid(&cfg);
        amx_emu ts;
        amx_emu_config(&ts, &cfg);
        amx_emu_load(&ts, 0, a, sizeof a[0]);
        amx_emu_load(&ts, 1, b, sizeof b[0]);
        amx_emu_load(&ts, 5, c, sizeof c[0]);
        const int a_signed = it % 2; /* tdpbssd on odd turns, tdpbusd on even ones */
        amx_emu_dp(&ts, 5, 0, 1, a_signed);
        amx_emu_store(&ts, 5, got, sizeof got[0]);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 20; n++) {
                int32_t want;
                if (m < M && n < N) {
                    int64_t sum = c[m][n];
                    for (int k = 0; k < 4 * K; k++)
                        sum += (int64_t)(a_signed ? (int8_t)a[m][k] : a[m][k]) * b[k / 4][4 * n + k % 4];
                    want = (int32_t)(uint32_t)(uint64_t)sum;
                } else {
                    want = 0x5A5A5A5A; /* not stored */
                }
                bad += got[m][n] != want;
            }
        for (int m = 0; m < 16; m++) /* nothing past the configured shape */
            for (int j = 0; j < 64; j++) bad += ts.t[5][m][j] != 0 && (m >= M || j >= 4 * N);
        amx_emu_release(&ts);
    }
    CHECK(bad == 0, "emulated TDPBUSD and TDPBSSD, loads and stores follow the instruction set's definition (%d differences)", bad);
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = 16, cfg.colsb[0] = 64;
    int valid = amx_tilecfg_valid(&cfg);
    cfg.rows[0] = 17;
    int refused = !amx_tilecfg_valid(&cfg);
    cfg.rows[0] = 16, cfg.colsb[0] = 68;
    refused += !amx_tilecfg_valid(&cfg);
    cfg.colsb[0] = 64, cfg.rows[8] = 1, cfg.colsb[8] = 4;
    refused += !amx_tilecfg_valid(&cfg);
    cfg.rows[8] = 0, cfg.colsb[8] = 0, cfg.reserved[3] = 1;
    refused += !amx_tilecfg_valid(&cfg);
    cfg.reserved[3] = 0, cfg.palette = 2;
    refused += !amx_tilecfg_valid(&cfg);
    cfg.palette = 1, cfg.rows[2] = 4;
    refused += !amx_tilecfg_valid(&cfg);
    CHECK(valid && refused == 6, "tile configurations: a full tile taken, %d of 6 bad ones refused", refused);
}
#endif

int main(void) {
    static const char *const names[] = {"avx2", "avx512", "neon", "amx"};
    int ran = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const kernel_set *k = kernels_find(names[i]);
        if (!k) {
            printf("kernel set %s: not available on this CPU, skipped\n", names[i]);
            continue;
        }
        printf("kernel set %s%s\n", k->name, dsv41_kernels_emulated(k->name) ? " (on the emulation of the tiles)" : "");
        test_set(k);
        test_outside(k);
        test_main_sums(k);
        test_act_quant(k);
        ran += strcmp(names[i], "amx") != 0;
    }
#if defined(__x86_64__)
    test_tiles();
    if (amx_native()) { /* the tile code on the instructions ran above: now on their emulation */
        printf("kernel set %s\n", kernels_amx_emulated.name);
        test_set(&kernels_amx_emulated);
        test_outside(&kernels_amx_emulated);
    }
#endif
    test_act_quant_values();
    CHECK(kernels_find("scalar") == &kernels_scalar && kernels_find("nonesuch") == NULL, "kernels_find");
    CHECK(kernels_best() != NULL && (ran == 0 || kernels_best() != &kernels_scalar), "kernels_best picks a fast set");
    printf("best: %s\n", kernels_best()->name);
    return test_summary();
}
