/* files.h - opening the files the library reads. */
#ifndef DSV41_FILES_H
#define DSV41_FILES_H

#include <stddef.h>

/* A read-only descriptor of the regular file at path, or -1 with a one-line message naming the
 * path in err. A FIFO, device or directory is refused without waiting: opening a FIFO for
 * reading would block until a writer appears. */
int file_open_regular(const char *path, char *err, size_t errlen);

#endif
