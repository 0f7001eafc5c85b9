/* commands.h - the dsv41 subcommands that live outside main.c. Each takes the arguments after
 * its name and returns the process exit status. */
#ifndef DSV41_COMMANDS_H
#define DSV41_COMMANDS_H

#include <signal.h>

#include "dsv41.h"

int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_run_text(int argc, char **argv);
int cmd_chat(int argc, char **argv);
/* server/serve.c */
int cmd_serve(int argc, char **argv);

/* Signals (signals.c): the last one caught, 0 while none was */
extern volatile sig_atomic_t cli_signal;
/* Catch SIGINT, and with terminate_too SIGTERM and SIGHUP, into cli_signal. */
void cli_catch_signals(int terminate_too);
/* The session whose forward call a caught signal cancels (NULL: none). */
void cli_cancel_target(dsv41_session *s);

#endif
