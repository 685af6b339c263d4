/* Internal to src/comm: one async-signal-safe line on SIGTERM naming the rank and the call in
 * progress (mpirun sends SIGTERM to every rank once one exits without finishing): signals.c.
 * comm.c installs it for worlds of more than one rank unless the program has its own handler,
 * and removes it at finalize and in mg_comm_world_fail (whose rank has said everything already).
 * Exports: mg_comm_signals_*. Needs: comm/comm_backend (reads a group's name, call and number). */
#ifndef MG_COMM_SIGNALS_H
#define MG_COMM_SIGNALS_H

#include "comm/comm_backend.h"

#include <stdbool.h>

void mg_comm_signals_install(int rank);
void mg_comm_signals_remove(void);
/* The call c is in (active) or made last (!active), for that line. */
void mg_comm_signals_note(const mg_comm *c, bool active);
/* c is being freed: the line must not read it any more. */
void mg_comm_signals_forget(const mg_comm *c);

#endif
