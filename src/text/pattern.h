/* pattern.h - a JSON Schema pattern as grammar text (pattern.c). */
#ifndef DSV41_PATTERN_H
#define DSV41_PATTERN_H

#include "strbuf.h"

/* Appends to b the grammar of a JSON string (quotes included) whose value matches the regex re
 * (NUL-terminated, the subset of docs/STRUCTURED_OUTPUT.md); 0, or -1 with *why saying what in
 * it is unsupported or malformed. */
int pattern_grammar(const char *re, strbuf *b, const char **why);

#endif
