/* version.c - the version of the library the program linked. */
#include "dsv41.h"

const char *dsv41_version(void) { return DSV41_VERSION; }
