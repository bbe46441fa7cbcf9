// Every tunable of causeway in one table: name, type, bounds, default and
// environment variable. Daemons fill a cw_settings_t from defaults, then the
// environment, then their command line (--name=value or --name value).
#ifndef CW_CORE_SETTINGS_H_
#define CW_CORE_SETTINGS_H_

#include <stdint.h>
#include <stdio.h>

#include "cw_status.h"

typedef enum cw_setting_type_e {
  CW_SETTING_INT,
  CW_SETTING_STRING,
  CW_SETTING_BOOL,  // stored as 0/1 in ints; a bare --flag means 1
} cw_setting_type_t;

typedef enum cw_setting_id_e {
  CW_SET_LOG_LEVEL,
  CW_SET_MAX_PAYLOAD,
  CW_SET_PREHELLO_MAX_PAYLOAD,
  CW_SET_MAX_BULK,
  CW_SET_TOKEN,
  CW_SET_TOKEN_FILE,
  CW_SET_HELLO_TIMEOUT_MS,
  CW_SET_CONNECT_TIMEOUT_MS,
  CW_SET_MAX_CONNECTIONS,
  CW_SET_FRAMES_PER_WAKEUP,
  CW_SET_PLUGIN,
  CW_SET_DEVICES,
  CW_SET_LISTEN,
  CW_SET_WORKER_NAME,
  CW_SET_CONTROLLER,
  CW_SET_EXIT_WITH_CONTROLLER,
  CW_SET_WATCH_FD,
  CW_SET_COMPILE_CACHE_BYTES,
  CW_SET_MAX_HELD_REQUESTS,
  CW_SET_MAX_HELD_BYTES,
  CW_SET_STAGING_CACHE_BYTES,
  CW_SET_COMPILE_CACHE_DIR,
  CW_SET_COMPILE_CACHE_DISK_BYTES,
  CW_SET_METRICS_LISTEN,
  CW_SET_HEARTBEAT_MS,
  CW_SET_WORKER_TIMEOUT_MS,
  CW_SET_RECONNECT_MAX_MS,
  CW_SET_RELAY_LAUNCHES,
  CW_SET_ISLAND,
  CW_SET_ISLAND_SIZE,
  CW_SET_COUNT,
} cw_setting_id_t;

typedef struct cw_setting_def_s {
  const char* name;      // command-line flag without "--"
  cw_setting_type_t type;
  int64_t min, max;      // bounds for ints (and bools: 0, 1)
  const char* default_value;
  const char* env;       // environment variable
  bool secret;           // never from the command line, never printed
  const char* help;
} cw_setting_def_t;

typedef struct cw_settings_s {
  int64_t ints[CW_SET_COUNT];
  char* strings[CW_SET_COUNT];
} cw_settings_t;

const cw_setting_def_t* cw_settings_def(cw_setting_id_t id);

// Fills `out` (caller storage) with defaults, then the environment.
CW_MUST_USE cw_status_t cw_settings_initialize(cw_settings_t* out);
void cw_settings_deinitialize(cw_settings_t* settings);

// Sets `name` from text, checking type and bounds. Secrets are refused when
// `from_command_line`.
CW_MUST_USE cw_status_t cw_settings_set(cw_settings_t* settings,
                                        const char* name, const char* value,
                                        bool from_command_line);

// Parses --name=value / --name value flags from argv[first..argc).
CW_MUST_USE cw_status_t cw_settings_parse_args(cw_settings_t* settings,
                                               int argc, char** argv);

// Reads the token: CW_TOKEN if set, else the first line of the token file.
// Borrowed result, "" when none.
CW_MUST_USE cw_status_t cw_settings_load_token(cw_settings_t* settings);

// Reads the first line of a token file into *out_token (heap, caller frees);
// warns when the file is readable by group or others. Shared with the PJRT
// plugin's CAUSEWAY_TOKEN_FILE.
CW_MUST_USE cw_status_t cw_settings_read_token_file(const char* path, char** out_token);

static inline int64_t cw_settings_int(const cw_settings_t* s, cw_setting_id_t id) {
  return s->ints[id];
}
static inline const char* cw_settings_string(const cw_settings_t* s, cw_setting_id_t id) {
  return s->strings[id] ? s->strings[id] : "";
}

void cw_settings_print_help(FILE* out);

// Start-up shared by the daemons' main(): --help (prints `usage` and the
// table), settings from defaults, environment and flags, the token, the log
// level (logs named `log_name`, a literal), and a required --listen. Returns
// true to run; otherwise false with *out_exit_code (0 after --help) and
// `settings` already deinitialized.
bool cw_settings_initialize_for_main(const char* program, const char* usage,
                                     const char* log_name, int argc, char** argv,
                                     cw_settings_t* settings, int* out_exit_code);

#endif  // CW_CORE_SETTINGS_H_
