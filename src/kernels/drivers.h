/* drivers.h - the dense and quant drivers the x86 sets share (see kernels.h for what
 * they compute).
 *
 * Included by avx2.c and avx512.c after their tiles, so the one pair of loops
 * compiles under each file's target attributes with that file's pieces. Each defines before
 * including: TGT, DENSE_NAME and QUANT_NAME (the functions to define), QUANT_TT (tokens per quant
 * tile, TT or more: the tiles take 1 to 3 as constants, TT itself where QUANT_TT is TT, else
 * their token count as it comes), QUANT_FP8_CHUNK(T) (blocks
 * per prepared fp8 chunk for a call of T tokens), FP4_GROUP (weight bytes per fp4 group), fp8_usable() (whether the
 * fp8 tile may run in the current floating-point state), dense_tile, prep_u, fp4_prepare,
 * fp8_prepare, scales4, fp4_tile, fp8_tile, load_rows and store_rows.
 *
 * dense: token tiles inside cache-sized row blocks (row_block), so each weight byte comes from
 * memory once; a row holding a NaN e4m3 code goes to the scalar kernel (the f16 decoding has
 * no NaN). The tiles leave each row's 16 canonical partial sums halved to 8 lanes (lane j +
 * lane j+8), and join_rows finishes sum16 for 4 rows at once.
 * quant: the inputs are prepared once per chunk of blocks and token tile, and every row of
 * [r0, r1) passes over them: the quant tiles do enough work per weight byte that re-reading the
 * rows for each token tile costs less than preparing the inputs again per row block. Inputs
 * outside the exact range and NaN weight codes hand the whole call to the scalar kernel, which
 * gives the same bits. */

/* [sum of a, b, c, d], each the 8 lanes q_j = p_j + p_(j+8) of 16 partial sums, joined as sum16
 * goes on: q_j + q_(j+4), then j + j+2, then j + j+1 */
INL __m128 join_rows(const __m256 q[RT]) {
    __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(q[0], q[1], 0x20), _mm256_permute2f128_ps(q[0], q[1], 0x31));
    __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(q[2], q[3], 0x20), _mm256_permute2f128_ps(q[2], q[3], 0x31));
    /* [a0 a1 c0 c1 | b0 b1 d0 d1] + [a2 a3 c2 c3 | b2 b3 d2 d3] */
    __m256 s = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))));
    /* [a c a c | b d b d] */
    __m256 u = _mm256_add_ps(_mm256_shuffle_ps(s, s, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(s, s, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

TGT static void DENSE_NAME(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                           int64_t xstride, float *y, int64_t ystride) {
    const dtype ty = w->type;
    const int64_t cols = w->cols, nb = (cols + 31) / 32;
    int64_t rowbytes;
    switch (ty) {
    case DT_F32: rowbytes = 4 * cols; break;
    case DT_BF16: rowbytes = 2 * cols; break;
    case DT_E4M3: rowbytes = cols; break;
    case DT_FP4: rowbytes = (cols + 1) / 2; break;
    default: kernels_scalar.dense(w, r0, r1, x, xs, T, xstride, y, ystride); return;
    }
    const int64_t rblock = row_block(rowbytes, r1 - r0, T);
    for (int64_t rb = r0; rb < r1; rb += rblock) {
        const int64_t rb1 = imin(r1, rb + rblock);
        for (int64_t t0 = 0; t0 < T; t0 += TT) {
            const int nt = (int)imin(TT, T - t0);
            const float *xp[TT];
            for (int t = 0; t < TT; t++) xp[t] = x + (t0 + (t < nt ? t : 0)) * xstride;
            for (int64_t r = rb; r < rb1; r += RT) {
                const int nr = (int)imin(RT, rb1 - r);
                int64_t ri[RT];
                tile_rows(r, nr, ri);
                const uint8_t *rp[RT], *sp[RT];
                for (int i = 0; i < RT; i++) {
                    rp[i] = (const uint8_t *)w->data + ri[i] * rowbytes;
                    sp[i] = w->scale ? w->scale + (ri[i] / w->scale_rows) * nb : NULL;
                }
                __m256 half[TT][RT];
                int nan = 0;
#define DENSE_CASE(TY)                                                             \
    switch (nt) {                                                                  \
    case 1: nan = dense_tile(TY, rp, sp, cols, RT * rowbytes, xp, 1, half); break;  \
    case 2: nan = dense_tile(TY, rp, sp, cols, RT * rowbytes, xp, 2, half); break;  \
    case 3: nan = dense_tile(TY, rp, sp, cols, RT * rowbytes, xp, 3, half); break;  \
    default: nan = dense_tile(TY, rp, sp, cols, RT * rowbytes, xp, 4, half); break; \
    }
                switch (ty) {
                case DT_F32: DENSE_CASE(DT_F32); break;
                case DT_BF16: DENSE_CASE(DT_BF16); break;
                case DT_E4M3: DENSE_CASE(DT_E4M3); break;
                default: DENSE_CASE(DT_FP4); break;
                }
#undef DENSE_CASE
                for (int t = 0; t < nt; t++) store_rows(y + (t0 + t) * ystride + (r - r0), nr, join_rows(half[t]));
                for (int i = 0; i < nr; i++) /* a row with a NaN code: the reference's element-wise path */
                    if (nan >> i & 1)
                        kernels_scalar.dense(w, r + i, r + i + 1, x + t0 * xstride, xs, nt, xstride,
                                             y + t0 * ystride + (r + i - r0), ystride);
            }
        }
    }
}

/* Prefetches the block scales [b0, b0+nblk) of rows [a, e), which the tile that far ahead reads:
 * a scale row per weight row (fp4's 1x32 blocks) is a stream of its own beside the weights', and
 * left to the hardware its loads stalled the tiles (a tenth of an expert's time) */
INL void prefetch_scales(const weight *w, int64_t a, int64_t e, int64_t nb, int64_t b0, int64_t nblk) {
    const uint8_t *first = w->scale + (a / w->scale_rows) * nb + b0, *last = w->scale + ((e - 1) / w->scale_rows) * nb + b0 + nblk - 1;
    for (uintptr_t p = (uintptr_t)first & ~(uintptr_t)63; p <= (uintptr_t)last; p += 64) _mm_prefetch((const char *)p, _MM_HINT_T0);
}

TGT static void QUANT_NAME(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                           int64_t xstride, float *y, int64_t ystride) {
    const int fp4 = w->type == DT_FP4;
    if ((!fp4 && (w->type != DT_E4M3 || !fp8_usable())) || !w->scale || w->cols == 0) {
        kernels_scalar.quant(w, r0, r1, x, xs, T, xstride, y, ystride);
        return;
    }
    const int64_t cols = w->cols, nb = (cols + 31) / 32, rowbytes = fp4 ? (cols + 1) / 2 : cols;
    const int64_t chunk = fp4 ? FP4_CHUNK : QUANT_FP8_CHUNK(T), bpb = fp4 ? 16 : 32; /* weight bytes per block */
    /* prefetch distance: the same bytes of a later tile's rows, at least 4 KB ahead (short rows,
     * as in an expert's down projection, otherwise prefetch too late to hide the memory latency) */
    const int64_t tile = RT * rowbytes, pfd = tile * ((4096 + tile - 1) / tile), ahead = pfd / rowbytes;
    prep_u prep[T < QUANT_TT ? (T > 0 ? T : 1) : QUANT_TT]; /* on the stack: about 33 KB per token of a tile */
    _Alignas(64) float ws[FP4_CHUNK * 4];
    for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
        const int64_t nblk = imin(chunk, nb - b0);
        const int64_t bytes = imin(rowbytes - bpb * b0, bpb * nblk); /* the chunk's bytes per row */
        for (int64_t t0 = 0; t0 < T; t0 += QUANT_TT) {
            const int nt = (int)imin(QUANT_TT, T - t0);
            for (int t = 0; t < nt; t++) {
                const float *xt = x + (t0 + t) * xstride, *xst = xs + (t0 + t) * nb;
                int ok = fp4 ? fp4_prepare(xt, xst, cols, b0, nblk, &prep[t].p4)
                             : fp8_prepare(xt, xst, cols, b0, nblk, &prep[t].p8);
                if (!ok) {
                    kernels_scalar.quant(w, r0, r1, x, xs, T, xstride, y, ystride);
                    return;
                }
            }
            for (int64_t r = r0; r < r1; r += RT) {
                const int nr = (int)imin(RT, r1 - r);
                int64_t ri[RT];
                tile_rows(r, nr, ri);
                const uint8_t *rp[RT], *sp[RT];
                for (int i = 0; i < RT; i++) {
                    rp[i] = (const uint8_t *)w->data + ri[i] * rowbytes + bpb * b0;
                    sp[i] = w->scale + (ri[i] / w->scale_rows) * nb + (fp4 ? 0 : b0);
                }
                if (r + ahead < r1) prefetch_scales(w, r + ahead, imin(r1, r + ahead + RT), nb, b0, nblk);
                __m128 acc[QUANT_TT];
                for (int t = 0; t < nt; t++)
                    acc[t] = b0 > 0 ? load_rows(y + (t0 + t) * ystride + (r - r0), nr) : _mm_setzero_ps();
                int ok = 1;
                if (fp4) {
                    scales4(sp, b0, nblk, ws);
                    const int64_t ng = (nblk * 16 + FP4_GROUP - 1) / FP4_GROUP, last = bytes - FP4_GROUP * (ng - 1);
                    switch (nt) {
                    case 1: fp4_tile(rp, pfd, ng, last, nblk, prep, 1, ws, acc); break;
                    case 2: fp4_tile(rp, pfd, ng, last, nblk, prep, 2, ws, acc); break;
                    case 3: fp4_tile(rp, pfd, ng, last, nblk, prep, 3, ws, acc); break;
                    default: fp4_tile(rp, pfd, ng, last, nblk, prep, QUANT_TT == TT ? TT : nt, ws, acc); break;
                    }
                } else {
                    switch (nt) {
                    case 1: ok = fp8_tile(rp, pfd, bytes, nblk, sp, prep, 1, acc); break;
                    case 2: ok = fp8_tile(rp, pfd, bytes, nblk, sp, prep, 2, acc); break;
                    case 3: ok = fp8_tile(rp, pfd, bytes, nblk, sp, prep, 3, acc); break;
                    default: ok = fp8_tile(rp, pfd, bytes, nblk, sp, prep, QUANT_TT == TT ? TT : nt, acc); break;
                    }
                }
                if (!ok) { /* a NaN weight code */
                    kernels_scalar.quant(w, r0, r1, x, xs, T, xstride, y, ystride);
                    return;
                }
                for (int t = 0; t < nt; t++) store_rows(y + (t0 + t) * ystride + (r - r0), nr, acc[t]);
            }
        }
    }
}
