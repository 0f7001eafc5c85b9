/* inventory.h - the tensors of a release checkpoint, from its config (inventory.c). */
#ifndef DSV41_INVENTORY_H
#define DSV41_INVENTORY_H

#include "model.h"

typedef struct {
    char name[96];
    const char *dtype;       /* safetensors dtype: "BF16", "F32", "F8_E4M3", "F8_E8M0", "I8" (packed fp4) */
    int32_t ndim;            /* 1 or 2 */
    int64_t shape[2];        /* as stored: [rows][cols] ([rows][cols/2] for I8), [rows][1] for a vector */
    int64_t nbytes;          /* its data */
} inv_tensor;

typedef struct {
    inv_tensor *t;           /* [n] in file order: globals, layers, DSpark blocks, final norm and head */
    size_t n, cap;
} inventory;

/* Every tensor the release checkpoint of c holds (vision aside), names as the release spells them. */
int inventory_build(const config *c, inventory *inv);
void inventory_free(inventory *inv);

#endif
