/* commands.h - the dsv41 subcommands that live outside main.c. Each takes the arguments after
 * its name and returns the process exit status. */
#ifndef DSV41_COMMANDS_H
#define DSV41_COMMANDS_H

int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_run_text(int argc, char **argv);
int cmd_chat(int argc, char **argv);
/* server/serve.c */
int cmd_serve(int argc, char **argv);

#endif
