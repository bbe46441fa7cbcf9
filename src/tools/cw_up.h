// `causeway up` / `causeway down` (cw_up.c): a local cluster -- a controller
// and N workers of D devices -- started in the background for any number of
// clients, its files in one private state directory:
//
//   DIR/lock        flock'd while an up or a down works on DIR
//   DIR/cluster     what down needs: the controller's address and, per
//                   process, its name, pid and start time (a pid reused by
//                   another program is never signalled)
//   DIR/env         the export lines up printed
//   DIR/token       the cluster's fresh token (0600)
//   DIR/NAME.sock   Unix sockets (unless --listen puts them on TCP)
//   DIR/NAME.log    each daemon's output
//
// The daemons run in their own session (setsid), so they outlive the shell
// that started them; workers exit with their controller. TLS: not yet (the
// protocol has none), so a TCP cluster is for a trusted network.
#ifndef CW_TOOLS_UP_H_
#define CW_TOOLS_UP_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cw_cli.h"
#include "cw_settings.h"

#define CW_UP_MAX_PROCS 65  // a controller and up to 64 workers (--workers)

typedef struct cw_up_proc_s {
  char name[32];  // "controller", "worker-0", ...
  pid_t pid;
  uint64_t start_time;  // /proc/PID/stat's starttime (clock ticks since boot)
} cw_up_proc_t;

typedef struct cw_up_state_s {
  char controller[512];  // the address clients use
  cw_up_proc_t procs[CW_UP_MAX_PROCS];
  size_t num_procs;
} cw_up_state_t;

// The state file's text (malloc'd; NULL when out of memory).
char* cw_up_state_format(const cw_up_state_t* state);
// Parses it; false (with a message in err) for text that is not one.
bool cw_up_state_parse(const char* text, cw_up_state_t* out, char* err, size_t err_size);

// The state directory: `dir` when given (a relative one from the working
// directory: the exports 'up' prints must work from anywhere), else
// $XDG_RUNTIME_DIR/causeway (an absolute XDG_RUNTIME_DIR that is a
// directory), else /tmp/causeway-UID. Writes out[size].
void cw_up_default_dir(const char* dir, char* out, size_t size);

// The commands; they return the tool's exit code (cw_cli.h) after printing
// what happened. up prints the export lines on stdout (so
// `eval "$(causeway up)"` works), everything else on stderr.
int cw_up_start(const cw_cli_args_t* args, const cw_settings_t* settings);
int cw_up_stop(const cw_cli_args_t* args);

#endif  // CW_TOOLS_UP_H_
