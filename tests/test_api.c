/* test_api.c - the embedder's calls: sampler defaults, penalties, log-probabilities, BOS / EOS
 * from a checkpoint directory, chat messages as structs (against the shared chat vectors),
 * the version. Prints "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv41.h"
#include "json.h"
#include "testing.h"

static void test_defaults(void) {
    dsv41_sampler_params p = dsv41_sampler_params_default();
    CHECK(p.temperature == 0.6f && p.top_p == 0.95f && p.top_k == 0 && p.min_p == 0.0f && p.repeat_penalty == 1.0f &&
              p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.penalty_last_n == 64,
          "sampler defaults");
    dsv41_sampler *s = dsv41_sampler_new(&p, 10);
    CHECK(s != NULL, "the defaults are accepted: %s", s ? "" : dsv41_error());
    dsv41_sampler_free(s);
    CHECK(!strcmp(dsv41_version(), DSV41_VERSION), "dsv41_version is DSV41_VERSION");
    const char *sets[8];
    int32_t n = dsv41_kernel_sets(sets, 8);
    CHECK(n >= 1 && n <= 8 && !strcmp(sets[0], "scalar"), "the scalar set always runs");
}

static void test_penalties(void) {
    /* window of the last 4 of the history: ids 1, 0, 3, 0; id 0 twice */
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
    int32_t hist[5] = {4, 1, 0, 3, 0};
    dsv41_sampler_params p = dsv41_sampler_params_default();
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 4;
    CHECK(dsv41_apply_penalties(&p, hist, 5, l, 5) == 0, "penalties apply");
    /* 2/2 - 0.5 - 2*0.25; -2*2 - 0.5 - 0.25; untouched; 0.5/2 - 0.5 - 0.25; outside the window */
    CHECK(l[0] == 0.0f && l[1] == -4.75f && l[2] == 1.0f && l[3] == -0.5f && l[4] == 3.0f,
          "penalized logits: %g %g %g %g %g", l[0], l[1], l[2], l[3], l[4]);
    float z[3] = {1, 2, 3};
    dsv41_sampler_params zero = {0};
    int32_t h2[2] = {0, 2};
    CHECK(dsv41_apply_penalties(&zero, h2, 2, z, 3) == 0 && z[0] == 1 && z[2] == 3, "zeroed params change nothing");
    int32_t bad[1] = {7};
    CHECK(dsv41_apply_penalties(&p, bad, 1, z, 3) == -1 && strstr(dsv41_error(), "outside"), "an id outside is an error");
}

static void test_logprob(void) {
    float l[6] = {1.0f, -3.0f, 2.5f, 0.0f, 2.5f, -1.0f};
    double total = 0;
    for (int i = 0; i < 6; i++) total += exp(dsv41_logprob(l, 6, i));
    CHECK(fabs(total - 1.0) < 1e-6, "the probabilities add up to 1: %.9f", total);
    CHECK(fabsf(dsv41_logprob(l, 6, 2) - dsv41_logprob(l, 6, 0) - 1.5f) < 1e-6f, "log-probabilities differ as the logits");
    CHECK(dsv41_logprob(l, 6, 6) == -INFINITY && dsv41_logprob(l, 6, -1) == -INFINITY, "an id outside has none");
}

/* A directory with the V3 tokenizer linked in and the given config files. */
static void make_dir(const char *dir, const char *config, const char *tok_config) {
    char path[1200], target[2200];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(target, sizeof target, "%s/tokenizer/deepseek-v3/tokenizer.json", shared_dir());
    if (target[0] != '/') {
        char cwd[1024];
        snprintf(target, sizeof target, "%s/%s/tokenizer/deepseek-v3/tokenizer.json", getcwd(cwd, sizeof cwd), shared_dir());
    }
    unlink(path);
    CHECK(symlink(target, path) == 0, "link %s", target);
    const char *names[2] = {"config.json", "tokenizer_config.json"}, *texts[2] = {config, tok_config};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
        if (!texts[i]) continue;
        FILE *f = fopen(path, "w");
        fputs(texts[i], f);
        fclose(f);
    }
}

static void test_tokenizer_dir(void) {
    char tmpl[] = "/tmp/dsv41_api_XXXXXX", dir[64];
    CHECK(mkdtemp(tmpl) != NULL, "temporary folder");
    snprintf(dir, sizeof dir, "%s/ck", tmpl);
    static const struct {
        const char *config, *tok_config;
        int32_t bos, eos; /* -2: the load fails */
    } cases[] = {
        {NULL, NULL, 0, 1},                                                     /* the V4.1 spellings */
        {"{\"bos_token_id\": 5, \"eos_token_id\": 7}", NULL, 5, 7},
        {"{\"text_config\": {\"bos_token_id\": null, \"eos_token_id\": 9}}", NULL, -1, 9},
        {"{\"vocab_size\": 3}", "{\"bos_token\": {\"content\": \"<｜▁pad▁｜>\"}, \"eos_token\": \"<｜User｜>\"}", 2, 128803},
        {"{\"eos_token_id\": 99999999}", NULL, -2, -2},
        {"{\"eos_token_id\": \"x\"}", NULL, -2, -2},
        {NULL, "{\"eos_token\": \"<no such token>\"}", -2, -2},
        {"{not json", NULL, -2, -2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        make_dir(dir, cases[i].config, cases[i].tok_config);
        dsv41_tokenizer *t = dsv41_tokenizer_load_dir(dir);
        if (cases[i].bos == -2) CHECK(t == NULL && strstr(dsv41_error(), "tokenizer"), "case %zu fails", i);
        else CHECK(t && dsv41_tokenizer_bos(t) == cases[i].bos && dsv41_tokenizer_eos(t) == cases[i].eos,
                   "case %zu: bos %d eos %d (%s)", i, t ? dsv41_tokenizer_bos(t) : -9, t ? dsv41_tokenizer_eos(t) : -9,
                   t ? "" : dsv41_error());
        if (t) CHECK(dsv41_token_is_special(t, 1) && !dsv41_token_is_special(t, 100), "case %zu: special flags", i);
        dsv41_tokenizer_free(t);
    }
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    CHECK(system(cmd) == 0, "clean up");
    CHECK(dsv41_tokenizer_load_dir("/nonexistent/dir") == NULL && strstr(dsv41_error(), "/nonexistent/dir"),
          "a missing directory names itself");
}

static const char *str_or_null(const json *v) { return v && v->type == JSON_STR ? v->str : NULL; }

/* Every shared chat vector that structs can express renders to the vector's text. */
static void test_chat_structs(void) {
    char path[1100], err[256];
    snprintf(path, sizeof path, "%s/tokenizer/chat_vectors.json", shared_dir());
    json *all = json_load_file(path, err, sizeof err);
    CHECK(all && all->type == JSON_ARR, "chat vectors: %s", err);
    int tried = 0;
    for (size_t i = 0; all && i < all->len; i++) {
        const json *c = &all->items[i], *msgs = json_get(c, "messages"), *opt = json_get(c, "options"), *tools = json_get(c, "tools");
        const char *want = str_or_null(json_get(json_get(c, "expect"), "exact"));
        int ok = want && msgs && msgs->type == JSON_ARR && msgs->len <= 16 && (!tools || tools->type == JSON_NULL);
        dsv41_chat_message m[16];
        for (size_t k = 0; ok && k < msgs->len; k++) {
            const json *e = &msgs->items[k];
            for (size_t f = 0; f < e->len; f++)
                ok &= !strcmp(e->keys[f], "role") || !strcmp(e->keys[f], "content") || !strcmp(e->keys[f], "reasoning_content");
            const json *rc = json_get(e, "reasoning_content");
            m[k] = (dsv41_chat_message){str_or_null(json_get(e, "role")), str_or_null(json_get(e, "content")), str_or_null(rc)};
            ok &= m[k].role && m[k].content && (!rc || rc->type == JSON_NULL || m[k].reasoning_content);
        }
        dsv41_chat_options o = {1, 0};
        for (size_t f = 0; ok && opt && opt->type == JSON_OBJ && f < opt->len; f++) {
            const json *v = &opt->items[f];
            if (!strcmp(opt->keys[f], "thinking_mode")) o.thinking = !strcmp(str_or_null(v) ? v->str : "", "thinking");
            else if (!strcmp(opt->keys[f], "reasoning_effort") && v->type == JSON_STR)
                o.reasoning_effort = !strcmp(v->str, "low") ? 50 : !strcmp(v->str, "max") ? 100 : 75;
            else if (!strcmp(opt->keys[f], "reasoning_effort")) o.reasoning_effort = v->type == JSON_NUM ? (int32_t)v->num : 0;
            else ok &= !strcmp(opt->keys[f], "drop_thinking") && v->type == JSON_BOOL && v->num != 0;
        }
        if (!ok) continue;
        tried++;
        char *got = dsv41_chat_render_messages(m, (int32_t)msgs->len, opt && opt->type == JSON_OBJ ? &o : NULL);
        CHECK(got && !strcmp(got, want), "chat vector %s rendered from structs: %s", str_or_null(json_get(c, "name")),
              got ? got : dsv41_error());
        free(got);
    }
    CHECK(tried >= 15, "%d chat vectors tried", tried);
    json_free(all);
    /* strings that need escaping survive; a bad role is the encoder's error */
    dsv41_chat_message m[2] = {{"system", "quote \" back \\ tab \t nl \n ctl \x01 ☃", NULL}, {"user", "q", NULL}};
    dsv41_chat_options chat = {0, 0};
    char *got = dsv41_chat_render_messages(m, 2, &chat);
    CHECK(got && !strcmp(got, "<｜begin▁of▁sentence｜><｜System｜>quote \" back \\ tab \t nl \n ctl \x01 ☃<｜User｜>q<｜Assistant｜></think>"),
          "escaped text: %s", got ? got : dsv41_error());
    free(got);
    m[1].role = "robot";
    CHECK(dsv41_chat_render_messages(m, 2, NULL) == NULL && strstr(dsv41_error(), "role"), "a bad role");
    m[1].content = NULL;
    CHECK(dsv41_chat_render_messages(m, 2, NULL) == NULL && strstr(dsv41_error(), "message 1"), "a missing content");
}

int main(void) {
    test_defaults();
    test_penalties();
    test_logprob();
    test_tokenizer_dir();
    test_chat_structs();
    return test_summary();
}
