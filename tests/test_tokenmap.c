/* test_tokenmap.c - the Engram compressed token map of the V4.1 tokenizer must have the size
 * the release config asserts (99,092 compressed ids for 129,280 tokens), the reported fixed
 * points, and the sha256 a third party reports for the map as little-endian int32
 * (V41_REFERENCE.md 9.1). */
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "testing.h"
#include "tokenizer.h"

int main(void) {
    char tok[1024], added[1024];
    snprintf(tok, sizeof tok, "%s/tokenizer/deepseek-v3/tokenizer.json", shared_dir());
    snprintf(added, sizeof added, "%s/tokenizer/v41_added_tokens.json", shared_dir());
    dsv41_tokenizer *t = dsv41_tokenizer_load_with_added(tok, added);
    CHECK(t != NULL, "the V4.1 test tokenizer loads: %s", t ? "" : dsv41_error());
    if (!t) return test_summary();
    int32_t V = dsv41_tokenizer_n_vocab(t);
    int64_t *map = malloc((size_t)V * sizeof *map);
    int64_t n = engram_token_map(t, V, map);
    CHECK(V == 129280, "129280 tokens (got %d)", V);
    CHECK(n == 99092, "99092 compressed ids, as engram_compressed_vocab_size says (got %lld)", (long long)n);
    CHECK(map[0] == 0 && map[2] == 2 && map[3] == 3, "map[0] = 0, map[2] = 2, map[3] = 3");
    char path[] = "/tmp/dsv41-tokenmap-XXXXXX", cmd[128], sum[80] = "";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    for (int32_t i = 0; f && i < V; i++) {
        uint8_t le[4] = {(uint8_t)map[i], (uint8_t)(map[i] >> 8), (uint8_t)(map[i] >> 16), (uint8_t)(map[i] >> 24)};
        fwrite(le, 1, 4, f);
    }
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd, "sha256sum %s", path);
    FILE *p = popen(cmd, "r");
    if (p && fgets(sum, sizeof sum, p)) sum[64] = 0;
    if (p) pclose(p);
    unlink(path);
    CHECK(!strcmp(sum, "c60a86322ec17b4142bfef3c57a8d81fb428550cdf487f88a4320cb59fe46481"), "sha256 of the map: %s", sum);
    free(map);
    dsv41_tokenizer_free(t);
    return test_summary();
}
