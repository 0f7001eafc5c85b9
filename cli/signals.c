/* signals.c - Ctrl-C and termination for the commands that run long. The handler only records
 * the signal and asks the session named here to stop its forward call (both async-signal-safe);
 * the command notices, cleans up (a half-written checkpoint is removed by the library) and
 * exits with 128 + the signal's number, as a shell expects of an interrupted program. */
#include <string.h>

#include "commands.h"

volatile sig_atomic_t cli_signal;
static dsv41_session *volatile target;

static void on_signal(int sig) {
    cli_signal = sig;
    dsv41_session *s = target;
    if (s) dsv41_session_cancel(s);
}

void cli_catch_signals(int terminate_too) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    if (!terminate_too) return;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

void cli_cancel_target(dsv41_session *s) { target = s; }
