/* Subcommand entry points: each takes the arguments after its name and returns the exit code. */
#ifndef MG_CLI_H
#define MG_CLI_H

int mg_cli_train(int argc, char **argv);
/* Prints the error recorded by the library as one line and maps the status to an exit code. */
int mg_cli_report(int status);

#endif
