/* mpi_draft.c - speculative decoding on a model split over ranks, run by tests/mpi.sh under
 * mpirun on 1, 2 and 3 ranks with the tiny model with DSpark stages (dir in argv[1]), split by
 * experts or (--split rows) by rows.
 *
 * Three sessions follow greedy decoding's tokens by verifies of forced drafts, a different
 * kind each round (all the target's tokens, the last one wrong, the first one wrong, the
 * drafter's own); one verifies alone, two in one dsv41_batch_verify. Each round prints, on
 * rank 0, every session's drafts with a digest of the bits of their logits and confidence,
 * and what its verify kept: mpi.sh compares these lines between the ranks' run and one
 * process's. The program checks itself that every verify keeps exactly the drafts equal to
 * greedy decoding's tokens and picks the token after them. Then the sessions are reset,
 * copied, saved and loaded (reshape) and decode a token each. Exits 1 on a failed check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv41_dist.h"
#include "transport.h"

enum { PROMPT = 12, ROUNDS = 6, K = 4, CONT = 1 + ROUNDS * (K + 1) + K + 1, SESSIONS = 3 };

static unsigned long long digest(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Greedy decoding's tokens after the prompt, one forward a token: cont [CONT]. */
static int decode(dsv41_model *m, const int32_t *prompt, int32_t *cont, float *lg) {
    dsv41_session *s = dsv41_session_new(m);
    int rc = !s || dsv41_session_forward(s, prompt, PROMPT, lg, NULL);
    for (int i = 0; rc == 0 && i < CONT; i++) {
        cont[i] = argmax(lg, dsv41_model_vocab_size(m));
        rc = dsv41_session_forward(s, &cont[i], 1, lg, NULL);
    }
    dsv41_session_free(s);
    return rc;
}

/* Then the calls that change a session without a forward, which the other ranks repeat: s[0]
 * emptied and fed the prompt 5 rows at a time, s[1] made a copy of it, s[2] fed its next token
 * (at[i]: s[i]'s next token in cont), saved to a file, emptied and loaded back; then one greedy
 * decode step each.
 * Prints their logits' digests; each step must pick greedy decoding's next token, and the copy
 * must give its source's bits. */
static int reshape(const char *dir, dsv41_session **s, const int32_t *prompt, const int32_t *cont, const int32_t *at, float *lg,
                   int32_t V) {
    char path[4096];
    snprintf(path, sizeof path, "%s.session", dir);
    if (dsv41_session_reset(s[0]) || dsv41_session_set_prefill_rows(s[0], 5) ||
        dsv41_session_forward(s[0], prompt, PROMPT, NULL, NULL) || dsv41_session_copy(s[1], s[0]) ||
        dsv41_session_forward(s[2], &cont[at[2]], 1, NULL, NULL) || dsv41_session_save(s[2], path) ||
        dsv41_session_reset(s[2]) || dsv41_session_load(s[2], path))
        return remove(path), -1;
    remove(path);
    unsigned long long sum[SESSIONS];
    int bad = 0;
    for (int i = 0; i < SESSIONS; i++) {
        int32_t next = i < 2 ? 0 : at[i] + 1;
        if (dsv41_session_forward(s[i], &cont[next], 1, lg, NULL)) return -1;
        sum[i] = digest(lg, (size_t)V * sizeof *lg);
        printf("reshaped session %d at %d logits %016llx\n", i, dsv41_session_pos(s[i]), sum[i]);
        bad |= argmax(lg, V) != cont[next + 1];
    }
    if (bad || sum[1] != sum[0]) fprintf(stderr, "mpi_draft: a reset, copied or loaded session decodes otherwise than greedy decoding\n");
    return bad || sum[1] != sum[0];
}

static int lead(const char *dir) {
    static const int32_t prompt[PROMPT] = {2, 17, 47, 5, 9, 33, 61, 12, 8, 40, 3, 27};
    dsv41_model *m = dsv41_model_load(dir);
    if (!m) return fprintf(stderr, "mpi_draft: %s\n", dsv41_error()), 1;
    int32_t V = dsv41_model_vocab_size(m), cont[CONT], at[SESSIONS], ids[SESSIONS][K + 1], drafts[K], bad = 0;
    float *lg = malloc((size_t)V * K * sizeof *lg), conf[K];
    dsv41_session *s[SESSIONS] = {NULL};
    int rc = !lg || decode(m, prompt, cont, lg);
    for (int i = 0; rc == 0 && i < SESSIONS; i++) { /* the prompt and one token: a draft needs a decoded token */
        s[i] = dsv41_session_new(m);
        rc = !s[i] || dsv41_session_forward(s[i], prompt, PROMPT, NULL, NULL) || dsv41_session_forward(s[i], cont, 1, NULL, NULL);
        at[i] = 1;
    }
    for (int r = 0; rc == 0 && r < ROUNDS; r++) {
        for (int i = 0; rc == 0 && i < SESSIONS; i++) {
            int kind = (r + i) % 4, *blk = ids[i];
            if ((rc = dsv41_session_draft(s[i], cont[at[i]], K, drafts, lg, conf))) break;
            printf("round %d session %d drafts %d %d %d %d logits %016llx confidence %016llx\n", r, i, drafts[0], drafts[1],
                   drafts[2], drafts[3], digest(lg, (size_t)V * K * sizeof *lg), digest(conf, sizeof conf));
            memcpy(blk, cont + at[i], (K + 1) * sizeof *blk);
            if (kind == 1) blk[K] = (blk[K] + 1) % V;
            if (kind == 2) blk[1] = (blk[1] + 1) % V;
            if (kind == 3) memcpy(blk + 1, drafts, K * sizeof *blk);
        }
        int32_t kept[SESSIONS], next[SESSIONS], n[SESSIONS] = {K + 1, K + 1, K + 1};
        const int32_t *rows[SESSIONS] = {ids[0], ids[1], ids[2]};
        if (rc || (kept[0] = dsv41_session_verify(s[0], ids[0], K + 1, NULL, NULL, &next[0])) < 0 ||
            dsv41_batch_verify(s + 1, rows + 1, n + 1, 2, NULL, NULL, kept + 1, next + 1)) {
            rc = -1;
            break;
        }
        for (int i = 0; i < SESSIONS; i++) {
            int want = 0;
            while (want < K && ids[i][want + 1] == cont[at[i] + want + 1]) want++;
            printf("round %d session %d kept %d next %d logits %016llx\n", r, i, kept[i], next[i],
                   digest(dsv41_session_logits(s[i]), (size_t)V * sizeof(float)));
            if (kept[i] != want || next[i] != cont[at[i] + want + 1] || dsv41_session_pos(s[i]) != PROMPT + at[i] + want + 1) {
                fprintf(stderr, "mpi_draft: round %d session %d kept %d drafts and picked %d, greedy decoding %d and %d\n", r, i,
                        kept[i], next[i], want, cont[at[i] + want + 1]);
                bad = 1;
            }
            at[i] += kept[i] + 1;
        }
    }
    if (rc == 0 && !bad) bad = reshape(dir, s, prompt, cont, at, lg, V);
    if (rc || bad < 0) fprintf(stderr, "mpi_draft: %s\n", dsv41_error());
    for (int i = 0; i < SESSIONS; i++) dsv41_session_free(s[i]);
    dsv41_model_free(m);
    free(lg);
    return rc || bad;
}

int main(int argc, char **argv) {
    int rc, rank = transport_start(&argc, &argv); /* takes --split out of argv */
    if (argc != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpi_draft DIR [--split experts|rows]\n");
        transport_end();
        return 2;
    }
    if (rank == 0) {
        rc = lead(argv[1]);
        dsv41_dist_end(rc);
    } else {
        rc = dsv41_follow();
    }
    fflush(stdout);
    transport_end();
    return rc;
}
