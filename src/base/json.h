/* json.h - a small JSON reader for config files, golden files and tokenizer data.
 *
 * The whole document is parsed into one tree of nodes. Numbers keep both their double value
 * and, when the literal is an integer, an exact 64-bit value: the golden carries u64 probes
 * and int64 hash multipliers that a double cannot hold. */
#ifndef DSV41_JSON_H
#define DSV41_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "dsv41.h"

/* The public dsv41_json_type values, under the short names the library uses. */
typedef dsv41_json_type json_type;
#define JSON_NULL DSV41_JSON_NULL
#define JSON_BOOL DSV41_JSON_BOOL
#define JSON_NUM DSV41_JSON_NUM
#define JSON_STR DSV41_JSON_STR
#define JSON_ARR DSV41_JSON_ARR
#define JSON_OBJ DSV41_JSON_OBJ

/* The node behind the public dsv41_json handle. */
typedef struct dsv41_json {
    json_type type;
    double num;          /* JSON_NUM value, JSON_BOOL as 0/1 */
    int is_int;          /* integer literal that fits int64 or uint64 */
    int is_neg;          /* integer literal had a minus sign */
    uint64_t bits;       /* exact integer: the value as u64 (two's complement when negative) */
    char *str;           /* JSON_STR: NUL-terminated UTF-8 (may hold embedded NULs: see len) */
    size_t len;          /* JSON_STR byte length; JSON_ARR/JSON_OBJ item count */
    struct dsv41_json *items; /* [len] children of an array or object */
    char **keys;         /* [len] object keys, NULL for arrays */
} json;

/* Parse `len` bytes. Returns NULL and a one-line message in err on failure. */
json *json_parse(const char *text, size_t len, char *err, size_t errlen);
/* Read and parse a file; err names the file on failure. */
json *json_load_file(const char *path, char *err, size_t errlen);
void json_free(json *j);

/* Object member by key, NULL when absent or when o is not an object. */
const json *json_get(const json *o, const char *key);
/* Array item i, NULL when out of range or when a is not an array. */
const json *json_at(const json *a, size_t i);
/* The value of an integer literal that fits int64; INT64_MIN for anything else (a fraction,
 * 1e30, NaN, a u64 past INT64_MAX, not a number), which every range check refuses. */
int64_t json_i64(const json *n);
/* 0 with *out set when n is an integer literal in [lo, hi]; -1 otherwise (a float such as 1.5
 * or 1e30 is refused, never truncated). */
int json_int(const json *n, int64_t lo, int64_t hi, int64_t *out);

#endif
