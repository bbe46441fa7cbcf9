// The hostile-frame suites' harness. A real causeway-worker (real XLA CPU
// plugin) is fed malformed, truncated, oversized and out-of-order frames over
// raw sockets (cw_test_wire.h), so every byte is under the test's control.
// Each case asserts the outcome docs/protocol.md documents (an ERROR reply
// with the expected code and a message naming the problem, and/or the
// connection closed by the worker), then that the worker still serves a
// fresh connection (HELLO + PING). At the end of each suite the workers get
// SIGTERM and must exit 0 (under ASan: no leaks). Here: the worker processes
// (a plain one, and one that requires TOKEN), raw connections to them and
// well-formed conversations.
//
// Workers come from argv[1], else $CW_WORKER_BIN, else
// $CW_BUILD_DIR/bin/causeway-worker; the plugin from $CAUSEWAY_PJRT_PLUGIN. Worker
// logs go to $CW_HOSTILE_LOG_DIR (default: the temp dir) as
// hostile-<label>-<pid>.log and .out and are printed when a daemon misbehaves.
#ifndef CW_TESTS_TEST_HOSTILE_H_
#define CW_TESTS_TEST_HOSTILE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cw_test_wire.h"

#define TOKEN "hostile-secret-token"

// A daemon a suite started (a worker, or with daemon_start a controller).
typedef struct worker_s {
  const char* label;
  pid_t pid;
  char addr[256];
  char http_addr[256];  // host:port of its HTTP port (--metrics-listen); "" when none
  char log_path[512];
  char out_path[512];
  int exit_status;  // valid once reaped
  bool reaped;
} worker_t;

// The plain worker and the token worker (started by the group setups below).
extern worker_t g_plain;
extern worker_t g_token;

// Sleeps `ms` milliseconds.
void sleep_ms(int ms);

// Prints the tail of the worker's stdout and log to stderr.
void dump_worker(const worker_t* w);

// Reaps the worker if it has exited; true while it runs.
bool worker_running(worker_t* w);

// Words for a wait status ("exit 0", "killed by signal 9").
void describe_status(int st, char* out, size_t n);

// Opens a raw connection to `w` (TCP_NODELAY); fails the test if it cannot.
int conn_open(const worker_t* w);

// HELLO with `token` (may be NULL), `role` and `session`; asserts the reply.
// *out_reply (may be NULL) gets the HelloReply (free_unpacked it).
void hello_as(int fd, const char* token, Causeway__V1__Role role, uint64_t session,
              Causeway__V1__HelloReply** out_reply);

// HELLO as a client with no token.
void hello(int fd);

// PING `rid` and assert the echo.
void ping(int fd, uint64_t rid);

// The worker is up, and a fresh connection does HELLO + PING.
void assert_serving(worker_t* w);

// An UploadRequest of `id` (dims borrowed), device 0.
Causeway__V1__UploadRequest upload_req(uint64_t id, int dtype, int64_t* dims, size_t rank);

// Uploads f32[n] (0.5, 1.5, ...) as `id` and asserts the Ack.
void upload_f32(int fd, uint64_t rid, uint64_t id, int n);

// STATS `rid`; the caller frees the result with causeway__v1__stats__free_unpacked.
Causeway__V1__Stats* stats(int fd, uint64_t rid);

// Opens a connection that has done HELLO.
int open_hello(void);

// Sends `h` (+ payload, + bulk) and asserts ERROR `code` naming `keywords`,
// then that the connection is closed and the worker still serves.
void violation(const char* what, bool do_hello, const hdr_t* h, const void* payload,
               size_t plen, const void* bulk, size_t blen, uint64_t rid, uint32_t code,
               const char* keywords);

// How to start a daemon other than the suites' workers (daemon_start).
typedef struct daemon_spec_s {
  const char* bin;                  // the executable
  const char* const* args;          // argv[1..], NULL-terminated
  const char* const* env;           // "K=V" set in the child, NULL-terminated; may be NULL
  const char* listen_prefix;        // its stdout line "<prefix>ADDRESS"
  const char* http_prefix;          // NULL, or its line "<prefix>http://HOST:PORT..."
} daemon_spec_t;

// Starts `spec` as `w` (label set by the caller) with CAUSEWAY_HELLO_TIMEOUT_MS
// 300 and no token unless spec->env sets one; waits for its listen line (and
// HTTP line). Its stdout and stderr go to files in $CW_HOSTILE_LOG_DIR. False
// after printing why.
bool daemon_start(worker_t* w, const daemon_spec_t* spec);
// The worker binary hostile_init found.
const char* hostile_worker_bin(void);
// $CW_CONTROLLER_BIN, else $CW_BUILD_DIR/bin/causeway-controller.
const char* hostile_controller_bin(void);
// A fresh connection to `w` does HELLO (`token`, role CLIENT) and PING:
// fails the test (after dumping the daemon's log) if `w` is gone or does not.
void daemon_assert_serving(worker_t* w, const char* token);
// SIGTERM each of `ws` that was started and require exit 0 (no leak, no crash).
void daemons_sigterm_clean_exit(worker_t* const* ws, size_t n);
// SIGKILL whichever of `ws` still runs (a group teardown).
void daemons_kill(worker_t* const* ws, size_t n);

// $CAUSEWAY_PJRT_PLUGIN, or NULL after printing that it is not set.
const char* hostile_plugin(void);
// The counted suites (types, HTTP, TLS): prints `title`'s cases by kind
// (counts[k][0] the worker's, [1] the controller's) with the sums, and
// stores the per-daemon sums in out_per. Returns the total.
int hostile_print_counts(const char* title, const char* const* kinds, int num_kinds,
                         const int (*counts)[2], int out_per[2]);

// Call first in main: takes the worker binary from argv[1] or the environment.
void hostile_init(int argc, char** argv);
// Group setups: start the plain worker, or both workers; the teardown kills
// whichever still runs.
int hostile_group_setup(void** state);
int hostile_group_setup_with_token(void** state);
int hostile_group_teardown(void** state);
// The last case of every suite: SIGTERM each worker the suite started and
// require exit 0 (no leak, no crash).
void hostile_test_sigterm_clean_exit(void** state);

#endif  // CW_TESTS_TEST_HOSTILE_H_
