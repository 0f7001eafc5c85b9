/* progress.h - the progress hook of long calls (progress.c). */
#ifndef DSV41_PROGRESS_H
#define DSV41_PROGRESS_H

#include <stdint.h>

/* Reports done of total units of a long call to the thread's dsv41_set_progress hook. */
void progress_report(const char *what, int64_t done, int64_t total);

#endif
