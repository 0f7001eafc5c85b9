/* fuzz_golden.c - golden files: any file loads, builds its model and is checked, or fails with
 * an error; never a crash, and a check that compared nothing never reports success. Seeds:
 * the shared golden and goldens of one regime cut from it. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsv41_golden *g = dsv41_golden_load(fuzz_file("golden.json", data, size));
    if (!g) return 0;
    dsv41_model *m = dsv41_model_from_golden(g);
    if (m) {
        FILE *null = fopen("/dev/null", "w");
        int32_t passed = 0, failed = 0;
        if (dsv41_golden_check(g, m, null, &passed, &failed) == 0 && passed + failed == 0) abort();
        fclose(null);
        dsv41_model_free(m);
    }
    dsv41_golden_free(g);
    return 0;
}
