/* files.h - opening the files the library reads. */
#ifndef DSV41_FILES_H
#define DSV41_FILES_H

#include <stddef.h>

/* A read-only descriptor of the regular file at path, or -1 with a one-line message naming the
 * path in err. A FIFO, device or directory is refused without waiting: opening a FIFO for
 * reading would block until a writer appears. */
int file_open_regular(const char *path, char *err, size_t errlen);

/* The whole regular file at path (malloc'd, *len bytes, not NUL-terminated), or NULL with a
 * one-line message naming the path in err. */
char *file_read_all(const char *path, size_t *len, char *err, size_t errlen);

/* fsync of the directory dir, so that the names in it (a new file, a rename) survive a crash.
 * 0, or -1 with errno. */
int file_sync_dir(const char *dir);

#endif
