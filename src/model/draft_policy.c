/* draft_policy.c - which drafts speculative decoding verifies, and when it drafts at all.
 *
 * A round costs the drafter's forward plus a verify of its rows, and pays one token per kept
 * draft; a drafter that does not fit the text (or a high temperature) keeps few and makes
 * decoding several times slower than plain steps. Two rules spend the verifies where they pay,
 * and neither changes a token: the picks decide what is emitted, drafts only save forwards.
 *
 * The confident prefix (DeepSpec's evaluation, fastllm): the release's confidence head gives
 * each draft a logit of its chance to be kept given the drafts before it; a block is verified
 * up to the first draft whose sigmoid is under p_min. The choice of draft j reads c_1..c_j
 * only, as DSpark's appendix asks (c_{j+1} depends on draft j: looking past a cut would leak
 * it into a sampled verify).
 *
 * The pause (colibri's rule, its constants): when fewer than 6 of the latest 10 drafts proposed
 * were kept, 64 tokens are decoded plain before the next block, and the count starts afresh.
 * A draft the confidence cut left out counts as proposed and not kept, since the drafter's time
 * went into it: a drafter whose confidence says "no" every round pauses too. A count of drafts
 * rather than a clock keeps the policy a function of the tokens alone (the same rounds on every
 * host and run), and a fixed pause bounds what a poor drafter costs: two rounds of 5 drafts per
 * 64 plain tokens. */
#include <math.h>

#include "dsv41.h"

enum { RECENT = 10, RECENT_KEEP = 6, PAUSE_TOKENS = 64 };

dsv41_draft_policy dsv41_draft_policy_default(void) { return (dsv41_draft_policy){.p_min = 0.5f}; }

int32_t dsv41_draft_policy_cut(const dsv41_draft_policy *p, const float *confidence, int32_t n) {
    int32_t j = 0;
    /* in double, so the sigmoid of every float is computed without overflow or a denormal step */
    while (j < n && 1.0 / (1.0 + exp(-(double)confidence[j])) >= (double)p->p_min) j++;
    return j;
}

void dsv41_draft_policy_record(dsv41_draft_policy *p, int32_t proposed, int32_t kept) {
    if (proposed <= 0) {
        if (p->pause > 0) p->pause--;
        return;
    }
    for (int32_t i = 0; i < proposed; i++) p->kept = p->kept << 1 | (i < kept); /* the kept drafts come first */
    p->n_proposed = p->n_proposed + proposed < RECENT ? p->n_proposed + proposed : RECENT;
    int32_t n_kept = 0;
    for (int32_t i = 0; i < RECENT; i++) n_kept += p->kept >> i & 1;
    if (p->n_proposed == RECENT && n_kept < RECENT_KEEP) *p = (dsv41_draft_policy){.p_min = p->p_min, .pause = PAUSE_TOKENS};
}
