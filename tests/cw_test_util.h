// Helpers for multi-process tests: start real causeway-worker daemons, read
// their listen line with a timeout, stop them (SIGTERM, exit status) or kill
// them (SIGKILL), temporary directories and whole-file reads.
//
// Functions return 0 on success and -1 on failure after printing why to
// stderr, so tests can assert_int_equal(..., 0) and still see the cause.
#ifndef CW_TESTS_TEST_UTIL_H_
#define CW_TESTS_TEST_UTIL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cw_time.h"

#define CW_TEST_LISTEN_PREFIX "causeway-worker listening on "

// A started child process. stdout goes through a pipe: the listen line is
// parsed from it, everything after it is copied to this process's stderr by
// a drain thread (so a chatty child never blocks). stderr is inherited.
typedef struct cw_test_process_s {
  pid_t pid;              // 0 when not running
  int stdout_fd;          // read end of the child's stdout, -1 when closed
  pthread_t drain_thread;
  bool drain_started;
  char label[64];         // prefix for forwarded output
} cw_test_process_t;

typedef struct cw_test_worker_options_s {
  const char* binary;     // NULL: $CW_WORKER_BIN, else $CW_BUILD_DIR/bin/causeway-worker
  const char* plugin;     // NULL: $CAUSEWAY_PJRT_PLUGIN
  int devices;            // 0: 1
  const char* listen;     // NULL: "127.0.0.1:0"
  const char* name;       // NULL: no --name flag
  const char* const* extra_args;  // NULL-terminated, may be NULL
  const char* const* extra_env;   // NULL-terminated "K=V" (override), may be NULL
  int start_timeout_ms;   // 0: 60000
} cw_test_worker_options_t;

typedef struct cw_test_worker_s {
  cw_test_process_t process;
  char address[512];      // from the listen line: host:port or socket path
} cw_test_worker_t;

// Monotonic milliseconds and sleep.
void cw_test_sleep_ms(int ms);

// Starts `argv[0]` (a path) with `argv` and the current environment plus
// `extra_env` ("K=V", overriding; may be NULL). The environment is built
// before fork, so this is safe in a multi-threaded process. Descriptors
// other than 0..2 are closed in the child.
int cw_test_process_spawn(const char* const* argv, const char* const* extra_env,
                          const char* label, cw_test_process_t* out_process);

// Reads the child's stdout until a line starting with `prefix`; copies the
// rest of that line (without newline) into out_rest. Lines before it are
// forwarded to stderr. Fails on timeout or EOF (child died).
int cw_test_process_read_line(cw_test_process_t* process, const char* prefix,
                              int timeout_ms, char* out_rest, size_t rest_capacity);

// Starts forwarding the rest of the child's stdout to stderr (drain thread).
int cw_test_process_start_drain(cw_test_process_t* process);

// Waits for the child to exit for up to timeout_ms. Returns its exit code,
// 128 + signal number if a signal ended it, or -1 on timeout (still running)
// or error. Joins the drain thread once the child is gone.
int cw_test_process_wait(cw_test_process_t* process, int timeout_ms);

// SIGTERM, then waits up to timeout_ms (0: 30000); if it is still running it
// is killed with SIGKILL and -1 is returned. Otherwise as cw_test_process_wait.
int cw_test_process_stop(cw_test_process_t* process, int timeout_ms);

// SIGKILL and reap. Returns as cw_test_process_wait. No-op (0) if not running.
int cw_test_process_kill(cw_test_process_t* process);

// Starts a worker and waits for its listen line (address into out->address).
int cw_test_worker_start(const cw_test_worker_options_t* options, cw_test_worker_t* out_worker);
// SIGTERM; returns the exit status as cw_test_process_stop (0 means clean,
// which under AddressSanitizer includes "no leaks").
int cw_test_worker_stop(cw_test_worker_t* worker, int timeout_ms);
int cw_test_worker_kill(cw_test_worker_t* worker);

// Starts causeway-controller (CW_CONTROLLER_BIN, else $CW_BUILD_DIR/bin)
// listening on 127.0.0.1 port 0 with `extra_args` (NULL-terminated, or
// NULL), waits for its listen line (address into out_address) and drains its
// output. Returns 0 on success.
int cw_test_controller_start(const char* const* extra_args, cw_test_process_t* out_process,
                             char* out_address, size_t address_capacity);

// Creates a fresh directory under $TMPDIR (or /tmp) named prefix.XXXXXX.
// Short, so Unix socket paths inside it fit in sun_path.
int cw_test_tempdir_create(const char* prefix, char* out_path, size_t capacity);
// Removes a directory tree (best effort). Returns 0 if it is gone.
int cw_test_tempdir_remove(const char* path);

// Reads a whole file into a malloc'd buffer (NUL-terminated, NUL not counted
// in *out_size). The caller frees *out_data.
int cw_test_read_file(const char* path, void** out_data, size_t* out_size);
int cw_test_write_file(const char* path, const void* data, size_t size);

// Reads test program NAME of the programs fixture ($CW_PROGRAMS_DIR, from
// tests/gen_programs.py): NAME.mlir and its compile options NAME.opts, as
// cw_test_read_file. Returns 0 on success.
int cw_test_read_program(const char* name, void** out_program, size_t* out_program_size,
                         void** out_options, size_t* out_options_size);

// What this process writes to stderr (fd 2) between _begin and _end: into
// `out`, NUL-terminated, cut to `capacity` - 1 bytes. Both return 0 on success.
typedef struct cw_test_stderr_capture_s {
  int saved_fd;
  FILE* file;
} cw_test_stderr_capture_t;
int cw_test_stderr_capture_begin(cw_test_stderr_capture_t* capture);
int cw_test_stderr_capture_end(cw_test_stderr_capture_t* capture, char* out, size_t capacity);

// getenv that returns `fallback` for unset or empty variables.
const char* cw_test_getenv(const char* name, const char* fallback);

// In cmocka tests: fails the test with the status message unless `expr`
// (a cw_status_t, taken) is OK. Needs cmocka.h and cw_status.h included.
#define CW_TEST_ASSERT_OK(expr)                                                 \
  do {                                                                          \
    cw_status_t cw_s__ = (expr);                                                \
    if (!cw_status_is_ok(cw_s__)) {                                             \
      fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #expr,          \
              cw_status_message(cw_s__));                                       \
      cw_status_free(cw_s__);                                                   \
      fail();                                                                   \
    }                                                                           \
  } while (0)

#endif  // CW_TESTS_TEST_UTIL_H_
