// The `causeway` operations tool: argument parsing and output formatting
// (the parts that do not need a controller; causeway_main.c does the rest,
// cw_up.c the local clusters of `causeway up` / `causeway down`).
#ifndef CW_TOOLS_CLI_H_
#define CW_TOOLS_CLI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proto/causeway.pb-c.h"

// Exit codes (docs/operations.md).
enum {
  CW_CLI_OK = 0,
  CW_CLI_FAILED = 1,       // the controller refused or failed the request
  CW_CLI_USAGE = 2,        // bad command line
  CW_CLI_UNREACHABLE = 3,  // cannot connect to or authenticate with the controller
  CW_CLI_NOT_FOUND = 4,    // no such session or worker
  CW_CLI_TIMEOUT = 5,      // drain --wait: not idle within --timeout
};

typedef enum cw_cli_command_e {
  CW_CLI_HELP = 0,
  CW_CLI_STATUS,
  CW_CLI_PAUSE,
  CW_CLI_RESUME,
  CW_CLI_DRAIN,
  CW_CLI_UNDRAIN,
  CW_CLI_UP,
  CW_CLI_DOWN,
} cw_cli_command_t;

typedef struct cw_cli_args_s {
  cw_cli_command_t command;
  const char* controller;  // --controller, else NULL (then $CAUSEWAY_CONTROLLER)
  const char* target;      // SESSION or WORKER
  uint64_t session_id;     // target is all digits: a session id, else a name
  bool json;
  bool wait;
  double timeout_s;  // drain --wait, up (until every worker registered); default 60
  // up and down: a local cluster whose files live in `dir`.
  const char* dir;             // --dir, else NULL: the default state directory
  int workers;                 // up --workers; default 2
  int devices;                 // up --devices (each worker's); default 4
  const char* listen;          // up --listen: the controller on TCP, else NULL: Unix sockets
  const char* metrics_listen;  // up --metrics-listen: the controller's HTTP port, else NULL
  const char* plugin;          // up --plugin, else NULL: $CAUSEWAY_PJRT_PLUGIN
  double grace_s;              // down --grace: SIGTERM, then SIGKILL after it; default 10
  double max_age_s;            // status --max-age: the last poll's numbers; -1: ask now
} cw_cli_args_t;

// Parses argv (argv[0] is the program). Returns true, or false with a
// message in err ("" for --help: print the usage, exit 0).
bool cw_cli_parse(int argc, char** argv, cw_cli_args_t* out, char* err, size_t err_size);

extern const char cw_cli_usage[];

// `causeway status` as a table / as pretty JSON (a malloc'd string the caller
// frees; NULL when out of memory).
void cw_cli_print_status(FILE* out, const Causeway__V1__AdminStatus* st);
char* cw_cli_status_json(const Causeway__V1__AdminStatus* st);

#endif  // CW_TOOLS_CLI_H_
