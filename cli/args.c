/* args.c - the table-driven option parser behind every subcommand (see args.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "dsv41.h"

const char OPT_REQUIRED[] = "required";

/* 1 when the first arg_len bytes of arg spell one of the '|'-separated names. */
static int name_is(const char *names, const char *arg, size_t arg_len) {
    for (const char *p = names; *p;) {
        size_t n = strcspn(p, "|");
        if (n == arg_len && !memcmp(p, arg, n)) return 1;
        p += n + (p[n] == '|');
    }
    return 0;
}

/* The first spelling of an option, for messages: "-n" of "-n|--n-predict". */
static int first_len(const char *names) { return (int)strcspn(names, "|"); }

static void print_help(const cli_cmd *c) {
    printf("usage: dsv41 %s %s\n%s\n", c->name, c->synopsis, c->about);
    if (c->n_opts) printf("\noptions:\n");
    for (int i = 0; i < c->n_opts; i++) {
        const cli_opt *o = &c->opts[i];
        char left[96];
        int w = snprintf(left, sizeof left, "  ");
        for (const char *p = o->names; *p && w < (int)sizeof left - 8;) {
            size_t n = strcspn(p, "|");
            w += snprintf(left + w, sizeof left - (size_t)w, "%s%.*s", p == o->names ? "" : ", ", (int)n, p);
            p += n + (p[n] == '|');
        }
        if (o->value && w < (int)sizeof left - 8) snprintf(left + w, sizeof left - (size_t)w, " %s", o->value);
        printf("%-30s%s%s", left, strlen(left) >= 30 ? "\n                              " : "", o->help);
        if (o->def == OPT_REQUIRED) printf(" (required)");
        else if (o->def) printf(" (default: %s)", o->def);
        printf("\n");
    }
    printf("  -h, --help                  this text\n");
}

/* A value o cannot take, named by the spelling the user wrote (flag [n]). */
static int bad_value(const cli_cmd *c, const cli_opt *o, const char *flag, int n, const char *v) {
    switch (o->kind) {
    case OPT_I32: case OPT_I64:
        fprintf(stderr, "dsv41: %s: %.*s wants an integer from %.0f to %.0f, not '%s'\n", c->name, n, flag, o->lo, o->hi, v);
        break;
    case OPT_F32:
        fprintf(stderr, "dsv41: %s: %.*s wants a number from %g to %g, not '%s'\n", c->name, n, flag, o->lo, o->hi, v);
        break;
    default:
        fprintf(stderr, "dsv41: %s: %.*s wants a non-negative integer below 2^64, not '%s'\n", c->name, n, flag, v);
    }
    return 2;
}

/* Stores v in o's target (given as flag [n]); returns 0 or 2 after a message. */
static int store(const cli_cmd *c, const cli_opt *o, const char *flag, int n, const char *v) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case OPT_FLAG: *(int *)o->dst = 1; return 0;
    case OPT_STR: *(const char **)o->dst = v; return 0;
    case OPT_LIST: {
        str_list *l = o->dst;
        if (l->n == STR_LIST_CAP) {
            fprintf(stderr, "dsv41: %s: %.*s is given more than %d times\n", c->name, first_len(o->names), o->names, STR_LIST_CAP);
            return 2;
        }
        l->v[l->n++] = v;
        return 0;
    }
    case OPT_I32: case OPT_I64: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno || (double)x < o->lo || (double)x > o->hi) return bad_value(c, o, flag, n, v);
        if (o->kind == OPT_I32) *(int32_t *)o->dst = (int32_t)x;
        else *(int64_t *)o->dst = (int64_t)x;
        return 0;
    }
    case OPT_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (v[0] < '0' || v[0] > '9' || *end || errno) return bad_value(c, o, flag, n, v);
        *(uint64_t *)o->dst = (uint64_t)x;
        return 0;
    }
    case OPT_F32: {
        double x = strtod(v, &end);
        if (end == v || *end || !isfinite(x) || x < o->lo || x > o->hi) return bad_value(c, o, flag, n, v);
        *(float *)o->dst = (float)x;
        return 0;
    }
    }
    return 2;
}

int args_parse(const cli_cmd *c, int argc, char **argv) {
    int n_pos = 0, options = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (options && (!strcmp(a, "-h") || !strcmp(a, "--help"))) { print_help(c); return 0; }
        if (options && !strcmp(a, "--")) { options = 0; continue; }
        if (!options || a[0] != '-' || !a[1]) {
            if (n_pos == c->max_pos) {
                fprintf(stderr, "dsv41: %s: unexpected argument '%s' (dsv41 %s --help)\n", c->name, a, c->name);
                return 2;
            }
            c->pos[n_pos++] = a;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = NULL;
        for (int k = 0; k < c->n_opts && !o; k++)
            if (name_is(c->opts[k].names, a, len)) o = &c->opts[k];
        if (!o) {
            fprintf(stderr, "dsv41: %s: unknown option '%.*s' (dsv41 %s --help)\n", c->name, (int)len, a, c->name);
            return 2;
        }
        const char *v = NULL;
        if (o->kind != OPT_FLAG) {
            if (eq) v = eq + 1;
            else if (i + 1 < argc) v = argv[++i];
            else {
                fprintf(stderr, "dsv41: %s: %.*s needs a value (%s)\n", c->name, (int)len, a, o->value);
                return 2;
            }
        } else if (eq) {
            fprintf(stderr, "dsv41: %s: %.*s takes no value\n", c->name, (int)len, a);
            return 2;
        }
        if (store(c, o, a, (int)len, v)) return 2;
        if (o->seen) *o->seen = 1;
    }
    if (n_pos < c->min_pos) {
        fprintf(stderr, "dsv41: %s: missing argument (usage: dsv41 %s %s)\n", c->name, c->name, c->synopsis);
        return 2;
    }
    for (int k = 0; k < c->n_opts; k++)
        if (c->opts[k].def == OPT_REQUIRED && !*(const char **)c->opts[k].dst) {
            fprintf(stderr, "dsv41: %s: %.*s is required (dsv41 %s --help)\n", c->name, first_len(c->opts[k].names),
                    c->opts[k].names, c->name);
            return 2;
        }
    if (c->n_pos) *c->n_pos = n_pos;
    return -1;
}

int args_apply_threads(int32_t threads) {
    if (threads && dsv41_set_threads(threads)) {
        fprintf(stderr, "dsv41: %s\n", dsv41_error());
        return 2;
    }
    return 0;
}
