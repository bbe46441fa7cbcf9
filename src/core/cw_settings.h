// Every setting of every causeway program in one table: environment variable
// (CAUSEWAY_*), the programs that read it (scope), command-line flag, type,
// bounds, default and help. The daemons fill a cw_settings_t from defaults,
// then the environment, then their command line (--name=value or --name
// value); the PJRT plugin and the causeway tool from defaults and the
// environment. One parser checks every value and names the variable (or flag)
// and the accepted range when it refuses one.
#ifndef CW_CORE_SETTINGS_H_
#define CW_CORE_SETTINGS_H_

#include <stdint.h>
#include <stdio.h>

#include "cw_status.h"

typedef enum cw_setting_type_e {
  CW_SETTING_INT,
  CW_SETTING_STRING,
  CW_SETTING_BOOL,     // stored as 0/1 in ints; a bare --flag means 1
  CW_SETTING_SECONDS,  // decimal seconds, stored (and bounded) in milliseconds in ints
} cw_setting_type_t;

// Which programs read a setting (a bitmask). A program reads the environment
// variables and accepts the flags of its scope only, so a variable meant for
// one program (the plugin's, say) never changes another that inherits the
// environment (the embedded cluster's daemons).
typedef enum cw_setting_scope_e {
  CW_SCOPE_CONTROLLER = 1u << 0,  // causeway-controller
  CW_SCOPE_WORKER = 1u << 1,      // causeway-worker
  CW_SCOPE_PLUGIN = 1u << 2,      // libcauseway_pjrt.so: a JAX client, its embedded cluster, trace
  CW_SCOPE_TOOL = 1u << 3,        // the causeway command
  CW_SCOPE_CLIENT = 1u << 4,      // the C client library (src/client)
  CW_SCOPE_PROXY = 1u << 5,       // causeway-proxy, the IFRT proxy front
} cw_setting_scope_t;
#define CW_SCOPE_DAEMONS (CW_SCOPE_CONTROLLER | CW_SCOPE_WORKER)
#define CW_SCOPE_ALL                                                                   \
  (CW_SCOPE_CONTROLLER | CW_SCOPE_WORKER | CW_SCOPE_PLUGIN | CW_SCOPE_TOOL |          \
   CW_SCOPE_CLIENT | CW_SCOPE_PROXY)

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
  CW_SET_MAX_UNAUTH_CONNECTIONS,
  CW_SET_MAX_UNAUTH_PER_PEER,
  CW_SET_FRAMES_PER_WAKEUP,
  CW_SET_TLS,
  CW_SET_TLS_CA,
  CW_SET_TLS_CERT,
  CW_SET_TLS_KEY,
  CW_SET_TLS_REQUIRE_CLIENT_CERT,
  CW_SET_CREDENTIALS_CHECK_MS,
  CW_SET_PLUGIN,
  CW_SET_DEVICES,
  CW_SET_LISTEN,
  CW_SET_ADVERTISE,
  CW_SET_WORKER_NAME,
  CW_SET_CONTROLLER,
  CW_SET_EXIT_WITH_CONTROLLER,
  CW_SET_WATCH_FD,
  CW_SET_READY_FD,
  CW_SET_COMPILE_CACHE_BYTES,
  CW_SET_WORKER_COMPILES,
  CW_SET_MAX_HELD_REQUESTS,
  CW_SET_MAX_HELD_BYTES,
  CW_SET_STAGING_CACHE_BYTES,
  CW_SET_COMPILE_CACHE_DIR,
  CW_SET_COMPILE_CACHE_DISK_BYTES,
  CW_SET_METRICS_LISTEN,
  CW_SET_HEARTBEAT_MS,
  CW_SET_WORKER_TIMEOUT_MS,
  CW_SET_RECONNECT_MAX_MS,
  CW_SET_START_TIMEOUT_MS,
  CW_SET_RELAY_LAUNCHES,
  CW_SET_SCHED_WINDOW,
  CW_SET_RESUME_GRACE_MS,
  CW_SET_ISLAND,
  CW_SET_ISLAND_SIZE,
  CW_SET_HOST_CPU,
  CW_SET_MEMORY_LIMIT,
  CW_SET_MEMORY_WAIT_MS,
  // The plugin's: its embedded cluster, its session, its trace.
  CW_SET_LOCAL_WORKERS,
  CW_SET_LOCAL_DEVICES,
  CW_SET_BIN_DIR,
  CW_SET_CHILD_LOGS,
  CW_SET_KEEP_TMP,
  CW_SET_MIN_WORKERS,
  CW_SET_WAIT_MS,
  CW_SET_CONTROLLER_TIMEOUT_MS,
  CW_SET_WORKER_LINK_TIMEOUT_MS,
  CW_SET_CONTROLLER_RECONNECT_MS,
  CW_SET_SESSION_NAME,
  CW_SET_SESSION_DEVICES,
  CW_SET_PLATFORM,
  CW_SET_MIN_ISLAND,
  CW_SET_WORKERS,
  CW_SET_SHARE,
  CW_SET_WEIGHT,
  CW_SET_QUEUE_TIMEOUT,
  CW_SET_TRACE,
  CW_SET_WAIT_SPIN_US,
  CW_SET_WORKER_SPIN_US,
  CW_SET_HANDBACK_US,
  // The worker's custom-call handler sets (issue 10 item 2, docs/ffi.md).
  CW_SET_FFI_LIBRARIES,
  CW_SET_JAXLIB_PYTHON,
  CW_SET_PROXY_LISTEN,
  CW_SET_PROXY_PJRT_LIBRARY,
  CW_SET_PROXY_MAX_MESSAGE,
  CW_SET_PROXY_BUFFER_CACHE,
  CW_SET_PROXY_TRANSFER_DIR,
  CW_SET_PROXY_MAX_HOST_BUFFER,
  CW_SET_PROXY_MAX_SESSIONS,
  CW_SET_PROXY_HOST_BUFFER_BUDGET,
  CW_SET_COUNT,
} cw_setting_id_t;

typedef struct cw_setting_def_s {
  const char* env;        // environment variable (CAUSEWAY_*)
  const char* old_env;    // the name it had before, no longer read (NULL: none)
  unsigned scope;         // cw_setting_scope_t bits: the programs that read it
  const char* name;       // command-line flag without "--" (NULL: environment only)
  cw_setting_type_t type;
  int64_t min, max;       // bounds for ints, bools (0, 1) and seconds (in ms)
  // Text parsed like a value; "" for an int or seconds: unset, reads as 0.
  const char* default_value;
  bool secret;            // never from the command line, never printed
  bool empty_is_value;    // an empty variable sets "" (else it leaves the default)
  const char* help;
} cw_setting_def_t;

typedef struct cw_settings_s {
  unsigned scope;              // whose settings these are
  int64_t ints[CW_SET_COUNT];
  char* strings[CW_SET_COUNT];
  bool given[CW_SET_COUNT];    // set by the environment or a flag, not the default
} cw_settings_t;

// The row of `id` (static storage), NULL for an id out of range.
const cw_setting_def_t* cw_settings_def(cw_setting_id_t id);

// Fills `out` (caller storage) with every default, then the environment
// variables of `scope`. On failure `out` holds nothing (deinitializing it
// again is harmless); the error names the variable and what it accepts.
CW_MUST_USE cw_status_t cw_settings_initialize(cw_settings_t* out, unsigned scope);
// Frees the strings (secrets wiped first). Idempotent.
void cw_settings_deinitialize(cw_settings_t* settings);

// Sets the flag `name` of the settings' scope from text, checking type and
// bounds. Secrets are refused when `from_command_line`.
CW_MUST_USE cw_status_t cw_settings_set(cw_settings_t* settings,
                                        const char* name, const char* value,
                                        bool from_command_line);

// Parses --name=value / --name value flags from argv[1..argc).
CW_MUST_USE cw_status_t cw_settings_parse_args(cw_settings_t* settings,
                                               int argc, char** argv);

// Reads the token: CAUSEWAY_TOKEN if set, else the first line of the token
// file (with a warning when that file is readable by group or others).
// Borrowed result, "" when none.
CW_MUST_USE cw_status_t cw_settings_load_token(cw_settings_t* settings);

// The tokens a daemon accepts: tokens[0] is the one it presents; a token
// file's further non-empty lines are accepted too, so that a cluster can
// change its token without a restart (docs/operations.md, "Rotating
// credentials"). Empty (count 0): no token, anyone is accepted.
#define CW_TOKEN_SET_MAX 8
typedef struct cw_token_set_s {
  char** tokens;  // owned
  size_t count;
} cw_token_set_t;
// CAUSEWAY_TOKEN when the environment gives it (one token, never read
// again), else the token file read now.
CW_MUST_USE cw_status_t cw_settings_read_tokens(const cw_settings_t* settings,
                                                cw_token_set_t* out);
// The token file at `path` alone (its errors name it).
CW_MUST_USE cw_status_t cw_token_set_read_file(const char* path, cw_token_set_t* out);
void cw_token_set_clear(cw_token_set_t* set);  // wipes and frees; idempotent

// The environment's text for `id` (borrowed from the environment), NULL when
// unset or empty: for a library that reads one setting and keeps no table.
const char* cw_settings_getenv(cw_setting_id_t id);
// CAUSEWAY_TOKEN is in the environment with an empty value (servers refuse to
// start so unless CAUSEWAY_TOKEN_FILE gives the token: they would take it for
// no token and accept anyone).
bool cw_settings_token_set_empty(void);

// Logs one warning per old name of a setting of `scope` still set in the
// environment, naming the variable that replaced it. Returns their count.
size_t cw_settings_warn_old_names(unsigned scope);

static inline int64_t cw_settings_int(const cw_settings_t* s, cw_setting_id_t id) {
  return s->ints[id];
}
static inline const char* cw_settings_string(const cw_settings_t* s, cw_setting_id_t id) {
  return s->strings[id] ? s->strings[id] : "";
}
static inline bool cw_settings_given(const cw_settings_t* s, cw_setting_id_t id) {
  return s->given[id];
}

// The flags and variables of `scope`, one a line, with bounds and defaults.
void cw_settings_print_help(FILE* out, unsigned scope);

// Start-up shared by the daemons' main(): --help (prints `usage` and the
// settings of `scope`), warnings for old variable names, settings from
// defaults, environment and flags, the token, the log level (logs named
// `log_name`, a literal), and a required --listen. Returns true to run;
// otherwise false with *out_exit_code (0 after --help) and `settings`
// already deinitialized.
bool cw_settings_initialize_for_main(const char* program, const char* usage,
                                     const char* log_name, unsigned scope, int argc,
                                     char** argv, cw_settings_t* settings, int* out_exit_code);

#endif  // CW_CORE_SETTINGS_H_
