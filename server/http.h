/* http.h - the HTTP listener of `dsv41 serve`. */
#ifndef SERVE_HTTP_H
#define SERVE_HTTP_H

#include "server.h"

struct MHD_Daemon;

/* Listens on host:port (0: any free port) with idle connections closed after timeout_s;
 * *bound gets the port. NULL with a message on stderr. */
struct MHD_Daemon *http_start(server *sv, const char *host, int port, int timeout_s, int *bound);
/* Stops accepting connections; the open ones go on. */
void http_quiesce(struct MHD_Daemon *d);
/* Waits (a few seconds at most) for the requests in flight to end, then closes every
 * connection and frees the listener. */
void http_stop(server *sv, struct MHD_Daemon *d);

#endif
