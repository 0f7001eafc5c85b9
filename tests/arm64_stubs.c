/* arm64_stubs.c - stand-ins for PCRE2 and utf8proc in the arm64 test programs (tests/neon.sh).
 *
 * The cross-built tests never tokenize or build an Engram token map, but the library's
 * checkpoint loader and tokenizer refer to both libraries, and this machine has no arm64
 * builds of them. Each stand-in stops the program if it is ever called. */
#include <stdio.h>
#include <stdlib.h>

#define STUB(name)                                                                  \
    void name(void);                                                                \
    void name(void) {                                                               \
        fprintf(stderr, "arm64 test: %s called, but this build has no arm64 library\n", #name); \
        abort();                                                                    \
    }

STUB(pcre2_code_free_8)
STUB(pcre2_compile_8)
STUB(pcre2_get_error_message_8)
STUB(pcre2_get_ovector_pointer_8)
STUB(pcre2_jit_compile_8)
STUB(pcre2_match_8)
STUB(pcre2_match_context_create_8)
STUB(pcre2_match_context_free_8)
STUB(pcre2_match_data_create_8)
STUB(pcre2_match_data_free_8)
STUB(pcre2_set_match_limit_8)
STUB(utf8proc_category)
STUB(utf8proc_decompose)
STUB(utf8proc_encode_char)
STUB(utf8proc_iterate)
STUB(utf8proc_map)
STUB(utf8proc_tolower)
STUB(utf8proc_toupper)
