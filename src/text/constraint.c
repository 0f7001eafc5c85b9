/* constraint.c - a reply held to a grammar: which tokens may come next, and advancing by one.
 *
 * The parse state is a set of stacks over grammar.h's byte-level rules (the Earley-free form
 * llama.cpp uses): each stack is a chain of frames, a frame a position in an alternative and
 * the frame to return to, and every stack's top stands on a terminal (a byte set or a token).
 * Frames are interned, so equal stacks are one id, and a set of stacks (sorted ids, plus
 * whether the grammar may end here) is interned as a state of a lazily built DFA over bytes:
 * a byte's transition from a state is computed once (advance the tops that take the byte, pop
 * finished rules, expand rules until terminals) and stored in the state's row of 256. A rule
 * reference that ends its alternative returns straight to the caller's frame (a tail call), so
 * x* and strings revisit the same states instead of growing stacks.
 *
 * A mask walks the tokenizer's byte trie (grammar.h) once from the current state, one row
 * lookup per trie node, skipping the subtree of every dead byte; masks are cached per state
 * (a state recurs inside strings, arrays, numbers), so a step that revisits a state costs only
 * applying its bitmap. Added tokens never match bytes: they are allowed where a stack's top is
 * their token terminal. Stops are allowed exactly where the grammar may end.
 *
 * All of it lives in the constraint, so a grammar stays read-only and shared. The tables grow
 * with what a reply explores and are rebuilt around the current state when they pass a bound
 * (between steps, never inside one); a state with too many stacks (an ambiguous grammar) is a
 * dead end with an error, never an unbounded step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar.h"
#include "numerics.h"
#include "sampler.h"
#include "tokenizer.h"

enum {
    UNKNOWN = -2,          /* a transition not computed yet */
    DEAD = -1,             /* no stack takes the byte */
    MAX_STACKS = 4096,     /* stacks in one state */
    MAX_STATES = 1 << 15,  /* states the tables may hold inside one step (256 transitions each) */
    KEEP_STATES = 1 << 13, /* states kept between steps before the tables are rebuilt */
    KEEP_FRAMES = 1 << 21, /* frames likewise */
    MAX_MASKS = 256,       /* bitmaps cached per constraint */
};

typedef struct {
    int32_t pos;    /* an element of g->el */
    int32_t parent; /* the frame returned to when the alternative ends, -1 at the bottom */
} frame;

typedef struct {
    int32_t first, n; /* its stacks' top frames: tops[first, first + n), ascending */
    int32_t can_end;  /* 1 when the grammar may end here */
    int32_t mask;     /* its bitmap in masks, or -1 */
    int32_t plain;    /* plain_next of it: a state, DEAD, MIXED, or UNKNOWN before it is known */
} dstate;

/* Where a reply stands: what accept moves and drafts walk on a copy of. */
typedef struct {
    int32_t state;  /* the DFA state (when not free) */
    int free;       /* before the trigger */
    int stopped;    /* a stop was accepted */
} cursor;

struct dsv41_constraint {
    const dsv41_grammar *g;
    int32_t *stop, n_stop; /* [n_stop] */
    int32_t trigger;
    cursor at;
    int32_t start;         /* the state at the grammar's start */
    frame *fr;             /* [n_fr] interned frames */
    int32_t n_fr, cap_fr;
    int32_t *fr_hash;      /* [fr_hcap] open addressing: frame id or -1 */
    uint32_t fr_hcap;
    uint32_t *stamp;       /* [cap_fr] the closure that last visited a frame */
    uint32_t epoch;
    dstate *st;            /* [n_st] interned states */
    int32_t n_st, cap_st;
    int32_t *st_hash;      /* [st_hcap] open addressing: state id or -1 */
    uint32_t st_hcap;
    int32_t *tops;         /* [n_tops] every state's top frames */
    int32_t n_tops, cap_tops;
    int32_t *trans;        /* [cap_st][256] byte transitions: a state, DEAD or UNKNOWN */
    uint32_t *masks;       /* [MAX_MASKS][words] cached bitmaps over the tokenizer's ids */
    int32_t n_masks, words;
    int32_t *work;         /* [2 * cap_work] (pos, parent) pairs a closure still expands */
    int32_t n_work, cap_work;
    int32_t *out;          /* [cap_out] a closure's terminal frames */
    int32_t n_out, cap_out;
    int32_t *path;         /* [trie depth + 1] states along the trie walk */
    int failed;            /* a limit was reached in this step: the error is set */
};

/* ---- interning */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static int grow(void **v, int32_t *cap, int64_t need, size_t sz) {
    if (need <= *cap) return 0;
    if (need > INT32_MAX / 2) return -1;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *nv = realloc(*v, (size_t)c * sz);
    if (!nv) return -1;
    *v = nv;
    *cap = c;
    return 0;
}

static int limit(dsv41_constraint *c, const char *what) {
    if (!c->failed) set_error("constraint: %s", what);
    c->failed = 1;
    return -1;
}

/* Rehashes a table of ids to twice its size; key(c, id) gives an id's hash. */
static int rehash(dsv41_constraint *c, int32_t **tab, uint32_t *cap, int32_t n, uint64_t (*key)(const dsv41_constraint *, int32_t)) {
    uint32_t nc = *cap ? *cap * 2 : 1024;
    int32_t *t = malloc((size_t)nc * sizeof *t);
    if (!t) return limit(c, "out of memory");
    memset(t, 0xFF, (size_t)nc * sizeof *t);
    for (int32_t id = 0; id < n; id++) {
        uint32_t h = (uint32_t)key(c, id) & (nc - 1);
        while (t[h] >= 0) h = (h + 1) & (nc - 1);
        t[h] = id;
    }
    free(*tab);
    *tab = t;
    *cap = nc;
    return 0;
}

static uint64_t frame_key(const dsv41_constraint *c, int32_t id) { return mix((uint64_t)(uint32_t)c->fr[id].pos << 32 | (uint32_t)c->fr[id].parent); }

static int32_t frame_intern(dsv41_constraint *c, int32_t pos, int32_t parent) {
    if ((uint32_t)c->n_fr * 2 >= c->fr_hcap && rehash(c, &c->fr_hash, &c->fr_hcap, c->n_fr, frame_key)) return -1;
    uint32_t m = c->fr_hcap - 1, h = (uint32_t)mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) & m;
    for (; c->fr_hash[h] >= 0; h = (h + 1) & m) {
        const frame *f = &c->fr[c->fr_hash[h]];
        if (f->pos == pos && f->parent == parent) return c->fr_hash[h];
    }
    int32_t cap = c->cap_fr;
    if (grow((void **)&c->fr, &c->cap_fr, c->n_fr + 1, sizeof *c->fr)) return limit(c, "out of memory");
    if (c->cap_fr != cap) {
        uint32_t *s = realloc(c->stamp, (size_t)c->cap_fr * sizeof *s);
        if (!s) return limit(c, "out of memory");
        memset(s + cap, 0, (size_t)(c->cap_fr - cap) * sizeof *s);
        c->stamp = s;
    }
    c->fr[c->n_fr] = (frame){pos, parent};
    c->fr_hash[h] = c->n_fr;
    return c->n_fr++;
}

static uint64_t tops_hash(const int32_t *t, int32_t n, int32_t can_end) {
    uint64_t h = mix((uint64_t)n << 1 | (uint64_t)can_end);
    for (int32_t k = 0; k < n; k++) h = mix(h ^ (uint32_t)t[k]);
    return h;
}

static uint64_t state_key(const dsv41_constraint *c, int32_t id) {
    const dstate *s = &c->st[id];
    return tops_hash(c->tops + s->first, s->n, s->can_end);
}

static int by_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of the closure's terminal frames (c->out, sorted here) and can_end. */
static int32_t state_intern(dsv41_constraint *c, int32_t can_end) {
    if (c->n_out > 1) qsort(c->out, (size_t)c->n_out, sizeof *c->out, by_id);
    int32_t n = 0;
    for (int32_t k = 0; k < c->n_out; k++)
        if (!n || c->out[k] != c->out[n - 1]) c->out[n++] = c->out[k];
    if (n > MAX_STACKS) return limit(c, "the grammar is too ambiguous: more than 4096 parse stacks at once");
    if ((uint32_t)c->n_st * 2 >= c->st_hcap && rehash(c, &c->st_hash, &c->st_hcap, c->n_st, state_key)) return -1;
    uint32_t m = c->st_hcap - 1, h = (uint32_t)tops_hash(c->out, n, can_end) & m;
    for (; c->st_hash[h] >= 0; h = (h + 1) & m) {
        const dstate *s = &c->st[c->st_hash[h]];
        if (s->n == n && s->can_end == can_end && (n == 0 || !memcmp(c->tops + s->first, c->out, (size_t)n * sizeof *c->out)))
            return c->st_hash[h];
    }
    if (c->n_st >= MAX_STATES) return limit(c, "the grammar needs more than 32768 states in one step");
    int32_t cap = c->cap_st;
    if (grow((void **)&c->tops, &c->cap_tops, (int64_t)c->n_tops + n, sizeof *c->tops) ||
        grow((void **)&c->st, &c->cap_st, c->n_st + 1, sizeof *c->st))
        return limit(c, "out of memory");
    if (c->cap_st != cap) {
        int32_t *t = realloc(c->trans, (size_t)c->cap_st * 256 * sizeof *t);
        if (!t) return limit(c, "out of memory");
        c->trans = t;
    }
    for (int32_t b = 0; b < 256; b++) c->trans[(size_t)c->n_st * 256 + (size_t)b] = UNKNOWN;
    if (n) memcpy(c->tops + c->n_tops, c->out, (size_t)n * sizeof *c->out);
    c->st[c->n_st] = (dstate){c->n_tops, n, can_end, -1, UNKNOWN};
    c->n_tops += n;
    c->st_hash[h] = c->n_st;
    return c->n_st++;
}

/* ---- closure: from (pos, parent) pairs to the terminal frames they reach */

static int work_push(dsv41_constraint *c, int32_t pos, int32_t parent) {
    if (grow((void **)&c->work, &c->cap_work, 2 * ((int64_t)c->n_work + 1), sizeof *c->work)) return limit(c, "out of memory");
    c->work[2 * c->n_work] = pos, c->work[2 * c->n_work + 1] = parent;
    c->n_work++;
    return 0;
}

/* Expands the queued pairs: a finished alternative returns to its parent (the grammar may end
 * when there is none), a rule reference becomes its alternatives, a terminal joins c->out.
 * Returns the resulting state, DEAD when nothing is left, or -1 - 1 (below DEAD) on a limit. */
static int32_t closure(dsv41_constraint *c) {
    const dsv41_grammar *g = c->g;
    int32_t can_end = 0;
    c->n_out = 0;
    while (c->n_work > 0) {
        c->n_work--;
        int32_t pos = c->work[2 * c->n_work], parent = c->work[2 * c->n_work + 1];
        int32_t k = frame_intern(c, pos, parent);
        if (k < 0) return UNKNOWN;
        if (c->stamp[k] == c->epoch) continue;
        c->stamp[k] = c->epoch;
        gram_el e = g->el[pos];
        if (e.kind == G_END) {
            if (parent < 0) can_end = 1;
            else if (work_push(c, c->fr[parent].pos, c->fr[parent].parent)) return UNKNOWN;
        } else if (e.kind == G_RULE) {
            int32_t ret = parent; /* a reference that ends its alternative returns straight to the caller */
            if (g->el[pos + 1].kind != G_END && (ret = frame_intern(c, pos + 1, parent)) < 0) return UNKNOWN;
            for (int32_t a = g->rule_alt[e.arg]; a < g->rule_alt[e.arg + 1]; a++)
                if (work_push(c, g->alt[a], ret)) return UNKNOWN;
        } else {
            if (grow((void **)&c->out, &c->cap_out, (int64_t)c->n_out + 1, sizeof *c->out)) {
                limit(c, "out of memory");
                return UNKNOWN;
            }
            c->out[c->n_out++] = k;
        }
    }
    if (c->n_out == 0 && !can_end) return DEAD;
    int32_t s = state_intern(c, can_end);
    return s < 0 ? UNKNOWN : s;
}

/* The state after state s takes byte b (kind G_BYTES) or token b (kind G_TOKEN). */
static int32_t advance(dsv41_constraint *c, int32_t s, int32_t kind, int32_t b) {
    c->epoch++;
    c->n_work = 0;
    for (int32_t k = 0; k < c->st[s].n; k++) {
        const frame *f = &c->fr[c->tops[c->st[s].first + k]];
        gram_el e = c->g->el[f->pos];
        int takes = e.kind == kind && (kind == G_TOKEN ? e.arg == b : grammar_set_has(c->g, e.arg, (uint8_t)b));
        if (takes && work_push(c, f->pos + 1, f->parent)) return UNKNOWN;
    }
    return closure(c);
}

/* The byte transition, computed on first use for the byte's whole class: a state, DEAD, or
 * UNKNOWN on a limit. */
static inline int32_t step(dsv41_constraint *c, int32_t s, uint8_t b) {
    int32_t t = c->trans[(size_t)s * 256 + b];
    if (t != UNKNOWN) return t;
    t = advance(c, s, G_BYTES, b);
    if (t == UNKNOWN) return t;
    int32_t *row = c->trans + (size_t)s * 256;
    for (int k = 0; k < 256; k++)
        if (c->g->byte_class[k] == c->g->byte_class[b]) row[k] = t;
    return t;
}

/* ---- plain text: where every plain character (tokentrie.h) acts alike */

enum { MIXED = -3 }; /* below DEAD and UNKNOWN */

/* The state every plain character leads to from s (through the same states for every byte of
 * a UTF-8 length and lead range, so a token cut inside a character is alive too); DEAD when
 * none can follow; MIXED when they differ; UNKNOWN on a limit. */
static int32_t plain_next_of(dsv41_constraint *c, int32_t s) {
    static const struct {
        uint8_t lead_lo, lead_hi, n;  /* lead bytes, continuation bytes */
        uint8_t lo[3], hi[3];         /* each continuation's range */
    } rows[] = {
        {0xC2, 0xDF, 1, {0x80}, {0xBF}},
        {0xE0, 0xE0, 2, {0xA0, 0x80}, {0xBF, 0xBF}},
        {0xE1, 0xEC, 2, {0x80, 0x80}, {0xBF, 0xBF}},
        {0xED, 0xED, 2, {0x80, 0x80}, {0x9F, 0xBF}},
        {0xEE, 0xEF, 2, {0x80, 0x80}, {0xBF, 0xBF}},
        {0xF0, 0xF0, 3, {0x90, 0x80, 0x80}, {0xBF, 0xBF, 0xBF}},
        {0xF1, 0xF3, 3, {0x80, 0x80, 0x80}, {0xBF, 0xBF, 0xBF}},
        {0xF4, 0xF4, 3, {0x80, 0x80, 0x80}, {0x8F, 0xBF, 0xBF}},
    };
    int32_t to = DEAD, live = 0, dead = 0;
    for (int b = 0x20; b < 0x7F; b++) {
        if (!tokentrie_plain_ascii(b)) continue;
        int32_t x = step(c, s, (uint8_t)b);
        if (x == UNKNOWN) return UNKNOWN;
        if (x == DEAD) { dead++; continue; }
        if (live++ && x != to) return MIXED;
        to = x;
    }
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int32_t at = DEAD;
        for (int b = rows[r].lead_lo; b <= rows[r].lead_hi; b++) {
            int32_t x = step(c, s, (uint8_t)b);
            if (x == UNKNOWN) return UNKNOWN;
            if (x == DEAD) { dead++; continue; }
            if (at != DEAD && x != at) return MIXED;
            at = x;
        }
        if (at == DEAD) continue;
        for (int k = 0; k < rows[r].n; k++) { /* each continuation: every byte of its range to one state */
            int32_t next = DEAD;
            for (int b = rows[r].lo[k]; b <= rows[r].hi[k]; b++) {
                int32_t x = step(c, at, (uint8_t)b);
                if (x == UNKNOWN) return UNKNOWN;
                if (x == DEAD || (next != DEAD && x != next)) return MIXED;
                next = x;
            }
            at = next;
        }
        if (live++ && at != to) return MIXED;
        to = at;
    }
    return !live ? DEAD : dead ? MIXED : to;
}

static int32_t plain_next(dsv41_constraint *c, int32_t s) {
    if (c->st[s].plain == UNKNOWN) {
        int32_t x = plain_next_of(c, s);
        if (x == UNKNOWN) return UNKNOWN;
        c->st[s].plain = x;
    }
    return c->st[s].plain;
}

/* How many plain characters may follow s, all alike: PLAIN_MAX when at least that many (or
 * any number); -1 when they act differently somewhere (the mask walks every token then);
 * UNKNOWN on a limit. */
static int32_t plain_run(dsv41_constraint *c, int32_t s) {
    int32_t chain[PLAIN_MAX + 1];
    chain[0] = s;
    for (int32_t j = 0; j < PLAIN_MAX; j++) {
        int32_t x = plain_next(c, chain[j]);
        if (x == UNKNOWN) return UNKNOWN;
        if (x == MIXED) return -1;
        if (x == DEAD) return j;
        for (int32_t i = 0; i <= j; i++)
            if (chain[i] == x) return PLAIN_MAX; /* a loop: any number */
        chain[j + 1] = x;
    }
    return PLAIN_MAX;
}

static int32_t start_state(dsv41_constraint *c) {
    const dsv41_grammar *g = c->g;
    c->epoch++;
    c->n_work = 0;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (work_push(c, g->alt[a], -1)) return UNKNOWN;
    return closure(c);
}

/* ---- rebuilding the tables around one state */

/* Empties every table and interns again the stacks of state s of old (the same grammar) into
 * c; returns the new state. c and old may be the same constraint. */
static int32_t state_move(dsv41_constraint *c, const dsv41_constraint *old, int32_t s) {
    int32_t n = old->st[s].n, can_end = old->st[s].can_end, total = 0;
    for (int32_t k = 0; k < n; k++)
        for (int32_t f = old->tops[old->st[s].first + k]; f >= 0; f = old->fr[f].parent) total++;
    int32_t *chain = malloc((size_t)(total + n + 1) * sizeof *chain); /* per stack: length, then pos bottom-up */
    if (!chain) {
        limit(c, "out of memory");
        return UNKNOWN;
    }
    int32_t w = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t len = 0, at = w + 1;
        for (int32_t f = old->tops[old->st[s].first + k]; f >= 0; f = old->fr[f].parent) len++;
        chain[w] = len;
        int32_t i = at + len;
        for (int32_t f = old->tops[old->st[s].first + k]; f >= 0; f = old->fr[f].parent) chain[--i] = old->fr[f].pos;
        w = at + len;
    }
    c->n_fr = c->n_st = c->n_tops = c->n_masks = 0;
    if (c->fr_hash) memset(c->fr_hash, 0xFF, (size_t)c->fr_hcap * sizeof *c->fr_hash);
    if (c->st_hash) memset(c->st_hash, 0xFF, (size_t)c->st_hcap * sizeof *c->st_hash);
    c->n_out = 0;
    int32_t r = 0;
    for (int32_t k = 0, i = 0; k < n && r == 0; k++) {
        int32_t len = chain[i++], parent = -1;
        for (int32_t j = 0; j < len && !c->failed; j++) parent = frame_intern(c, chain[i + j], parent);
        i += len;
        if (c->failed || grow((void **)&c->out, &c->cap_out, (int64_t)c->n_out + 1, sizeof *c->out)) r = limit(c, "out of memory");
        else c->out[c->n_out++] = parent;
    }
    free(chain);
    if (r) return UNKNOWN;
    int32_t t = state_intern(c, can_end);
    c->start = start_state(c);
    return t < 0 ? UNKNOWN : t;
}

/* Called between steps: rebuilds the tables when they have grown past their bounds. */
static int keep_bounded(dsv41_constraint *c) {
    c->failed = 0;
    if (c->at.free || c->at.stopped || (c->n_st < KEEP_STATES && c->n_fr < KEEP_FRAMES)) return 0;
    int32_t s = state_move(c, c, c->at.state);
    if (s < 0) return -1;
    c->at.state = s;
    return 0;
}

/* ---- masks */

static int is_stop(const dsv41_constraint *c, int32_t id) {
    for (int32_t k = 0; k < c->n_stop; k++)
        if (c->stop[k] == id) return 1;
    return 0;
}

/* The bitmap of state s, computed on first use: a walk of the token trie. NULL on a limit. */
static const uint32_t *state_mask(dsv41_constraint *c, int32_t s) {
    if (c->st[s].mask >= 0) return c->masks + (size_t)c->st[s].mask * (size_t)c->words;
    if (c->n_masks == MAX_MASKS) { /* full: start over (a reply's recent states come back first) */
        for (int32_t k = 0; k < c->n_st; k++) c->st[k].mask = -1;
        c->n_masks = 0;
    }
    int32_t slot = c->n_masks++;
    uint32_t *m = c->masks + (size_t)slot * (size_t)c->words;
    const tokentrie *tt = c->g->tt;
    int32_t run = plain_run(c, s);
    if (run == UNKNOWN) { c->n_masks--; return NULL; }
    if (run >= 0) memcpy(m, tt->plain + (size_t)run * (size_t)tt->words, (size_t)c->words * sizeof *m);
    else memset(m, 0, (size_t)c->words * sizeof *m);
    const byte_trie *tr = run >= 0 ? &tt->rest : &tt->all;
    c->path[0] = s;
    for (int32_t i = 1; i < tr->n;) {
        int32_t t = step(c, c->path[tr->depth[i] - 1], tr->byte[i]);
        if (t == UNKNOWN) { c->n_masks--; return NULL; }
        if (t == DEAD) { i = tr->next[i]; continue; }
        c->path[tr->depth[i]] = t;
        for (int32_t k = 0; k < tr->ntok[i]; k++) {
            int32_t id = tr->ids[tr->tok[i] + k];
            m[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    const dstate *d = &c->st[s];
    for (int32_t k = 0; k < d->n; k++) {
        gram_el e = c->g->el[c->fr[c->tops[d->first + k]].pos];
        if (e.kind == G_TOKEN) m[e.arg >> 5] |= 1u << (e.arg & 31);
    }
    for (int32_t k = 0; k < c->n_stop; k++) { /* a stop ends the reply: only where the grammar may end */
        int32_t id = c->stop[k];
        if (id < c->g->n_vocab) m[id >> 5] = (m[id >> 5] & ~(1u << (id & 31))) | (uint32_t)d->can_end << (id & 31);
    }
    c->st[s].mask = slot;
    return m;
}

/* 1 when id may follow at cursor u, 0 when not, -1 on a limit. */
static int cursor_allows(dsv41_constraint *c, const cursor *u, int32_t id) {
    if (id < 0 || id >= c->g->n_vocab) return u->free && !is_stop(c, id) && id >= 0;
    if (is_stop(c, id)) return !u->free && (u->stopped || c->st[u->state].can_end);
    if (u->free) return 1;
    if (u->stopped) return 0;
    const dstate *d = &c->st[u->state];
    if (d->mask >= 0) return (int)(c->masks[(size_t)d->mask * (size_t)c->words + (size_t)(id >> 5)] >> (id & 31) & 1);
    if (tokenizer_is_added(c->g->tok, id)) {
        for (int32_t k = 0; k < d->n; k++) {
            gram_el e = c->g->el[c->fr[c->tops[d->first + k]].pos];
            if (e.kind == G_TOKEN && e.arg == id) return 1;
        }
        return 0;
    }
    size_t len;
    const char *b = dsv41_token_bytes(c->g->tok, id, &len);
    if (!b || len == 0 || len > UINT16_MAX) return 0;
    int32_t s = u->state;
    for (size_t k = 0; k < len; k++)
        if ((s = step(c, s, (uint8_t)b[k])) < 0) return s == DEAD ? 0 : -1;
    return 1;
}

/* Moves cursor u past id, which cursor_allows said may follow; 0 or -1 on a limit. */
static int cursor_advance(dsv41_constraint *c, cursor *u, int32_t id) {
    if (is_stop(c, id)) { u->stopped = 1; return 0; }
    if (u->free) {
        if (id == c->trigger) u->free = 0, u->state = c->start;
        return 0;
    }
    int32_t s = u->state;
    if (tokenizer_is_added(c->g->tok, id)) s = advance(c, s, G_TOKEN, id);
    else {
        size_t len;
        const char *b = dsv41_token_bytes(c->g->tok, id, &len);
        for (size_t k = 0; k < len && s >= 0; k++) s = step(c, s, (uint8_t)b[k]);
    }
    if (s < 0) return -1;
    u->state = s;
    return 0;
}

/* ---- the public calls */

void dsv41_constraint_free(dsv41_constraint *c) {
    if (!c) return;
    free(c->stop);
    free(c->fr);
    free(c->fr_hash);
    free(c->stamp);
    free(c->st);
    free(c->st_hash);
    free(c->tops);
    free(c->trans);
    free(c->masks);
    free(c->work);
    free(c->out);
    free(c->path);
    free(c);
}

dsv41_constraint *dsv41_constraint_new(const dsv41_grammar *g, const int32_t *stop, int32_t n_stop, int32_t trigger) {
    if (!g || n_stop < 0 || (n_stop && !stop) || trigger < -1 || trigger >= g->n_vocab) {
        set_error("constraint: bad arguments (a grammar, stops [n_stop >= 0], a trigger id or -1)");
        return NULL;
    }
    for (int32_t k = 0; k < n_stop; k++)
        if (stop[k] < 0) { set_error("constraint: stop id %d is negative", stop[k]); return NULL; }
    dsv41_constraint *c = calloc(1, sizeof *c);
    if (!c) { set_error("out of memory"); return NULL; }
    c->g = g;
    c->trigger = trigger;
    c->n_stop = n_stop;
    c->words = g->tt->words;
    c->stop = malloc((size_t)(n_stop + 1) * sizeof *c->stop);
    c->masks = malloc((size_t)MAX_MASKS * (size_t)c->words * sizeof *c->masks);
    c->path = malloc((size_t)(g->tt->all.max_depth + 1) * sizeof *c->path);
    if (!c->stop || !c->masks || !c->path) {
        dsv41_constraint_free(c);
        set_error("out of memory");
        return NULL;
    }
    if (n_stop) memcpy(c->stop, stop, (size_t)n_stop * sizeof *stop);
    c->start = start_state(c);
    if (c->start < 0) {
        if (c->start == DEAD) set_error("constraint: the grammar matches nothing");
        dsv41_constraint_free(c);
        return NULL;
    }
    c->at = (cursor){c->start, trigger >= 0, 0};
    return c;
}

int dsv41_constraint_copy(dsv41_constraint *dst, const dsv41_constraint *src) {
    if (!dst || !src || dst->g != src->g) return set_error("constraint: copy between constraints of different grammars");
    if (dst == src) return 0;
    dst->failed = 0;
    dst->at = src->at;
    if (src->at.free || src->at.stopped) return 0;
    int32_t s = state_move(dst, src, src->at.state);
    if (s < 0) return -1;
    dst->at.state = s;
    return 0;
}

int dsv41_constraint_status(const dsv41_constraint *c) {
    if (c->at.stopped) return DSV41_CONSTRAINT_DONE;
    if (c->at.free) return DSV41_CONSTRAINT_OPEN;
    const dstate *d = &c->st[c->at.state];
    return !d->can_end ? DSV41_CONSTRAINT_OPEN : d->n == 0 ? DSV41_CONSTRAINT_DONE : DSV41_CONSTRAINT_CAN_END;
}

int32_t dsv41_constraint_mask(dsv41_constraint *c, float *logits, int32_t vocab_size) {
    if (keep_bounded(c)) return 0;
    int32_t V = c->g->n_vocab < vocab_size ? c->g->n_vocab : vocab_size, allowed = 0;
    if (c->at.free) { /* only the stops are masked */
        int32_t masked = 0;
        for (int32_t k = 0; k < c->n_stop; k++)
            if (c->stop[k] < vocab_size && logits[c->stop[k]] != -INFINITY) logits[c->stop[k]] = -INFINITY, masked++;
        return vocab_size - masked;
    }
    if (c->at.stopped) { /* only the stops: their logits kept, all others masked */
        float keep[16];
        int32_t n = c->n_stop < 16 ? c->n_stop : 16;
        for (int32_t k = 0; k < n; k++) keep[k] = c->stop[k] < vocab_size ? logits[c->stop[k]] : 0.0f;
        for (int32_t id = 0; id < vocab_size; id++) logits[id] = -INFINITY;
        for (int32_t k = 0; k < n; k++)
            if (c->stop[k] < vocab_size && isinf(logits[c->stop[k]])) logits[c->stop[k]] = keep[k], allowed++;
        return allowed;
    }
    const uint32_t *m = state_mask(c, c->at.state);
    if (!m) return 0;
    int32_t full = V / 32;
    for (int32_t w = 0; w < full; w++) { /* loops of a fixed 32, which the compiler turns into vector stores */
        uint32_t bits = m[w];
        float *l = logits + (size_t)w * 32;
        if (bits == 0xFFFFFFFFu) { allowed += 32; continue; }
        if (bits == 0) {
            for (int k = 0; k < 32; k++) l[k] = -INFINITY;
            continue;
        }
        allowed += __builtin_popcount(bits);
        for (int k = 0; k < 32; k++) l[k] = bits >> k & 1 ? l[k] : -INFINITY;
    }
    for (int32_t id = full * 32; id < V; id++)
        if (m[id >> 5] >> (id & 31) & 1) allowed++;
        else logits[id] = -INFINITY;
    for (int32_t id = V; id < vocab_size; id++) logits[id] = -INFINITY;
    return allowed;
}

int dsv41_constraint_allows(dsv41_constraint *c, int32_t id) {
    if (keep_bounded(c)) return 0;
    return cursor_allows(c, &c->at, id) == 1;
}

int dsv41_constraint_accept(dsv41_constraint *c, int32_t id) {
    if (keep_bounded(c)) return -1;
    int ok = cursor_allows(c, &c->at, id);
    if (ok < 0) return -1;
    if (!ok) return set_error("constraint: token %d is not allowed here", id);
    return cursor_advance(c, &c->at, id);
}

int32_t dsv41_constraint_drafts(dsv41_constraint *c, const int32_t *drafts, int32_t n) {
    if (keep_bounded(c)) return 0;
    cursor u = c->at;
    int32_t k = 0;
    while (k < n && !u.stopped && cursor_allows(c, &u, drafts[k]) == 1 && cursor_advance(c, &u, drafts[k]) == 0) k++;
    return k;
}

/* Greedy picks check the argmax first: masking only lowers logits to -INFINITY, so when the
 * argmax (the first of the largest, after the penalties) is allowed it is also the argmax of
 * the masked logits, and the mask need not be made. Any other draw (temperature, top-k/p, a
 * seeded stream) depends on the whole distribution, so it always masks first. */
int32_t dsv41_constraint_pick(void *ctx, float *logits, const int32_t *history, int32_t n, int *last) {
    dsv41_constrained_pick *p = ctx;
    dsv41_constraint *c = p->constraint;
    const dsv41_sampler_params *sp = sampler_params(p->sampler);
    int32_t V = sampler_vocab(p->sampler), t = -1;
    if (sp->temperature == 0.0f) {
        if (dsv41_apply_penalties(sp, history, n, logits, V)) return -1;
        t = argmax_f32(logits, V);
        if (dsv41_constraint_allows(c, t) != 1) t = -1;
    }
    if (t < 0) {
        if (dsv41_constraint_mask(c, logits, V) == 0) {
            if (!c->failed) set_error("constraint: no token can continue the grammar here");
            return -1;
        }
        t = sp->temperature == 0.0f ? dsv41_sample(p->sampler, logits) : dsv41_sample_pick(p->sampler, logits, history, n, NULL);
    }
    if (t < 0 || dsv41_constraint_accept(c, t)) return -1;
    if (is_stop(c, t) || dsv41_constraint_status(c) == DSV41_CONSTRAINT_DONE) *last = 1;
    return t;
}
