// Helpers the worker's multi-process tests share (cw_worker_*_test.c). Two
// ways to drive a real causeway-worker:
// - raw frames over a TCP socket, encoded with our own codec (no client
//   library): a worker of its own per test, HELLO, one call at a time;
// - the C client library against one worker per suite (g_worker), connected
//   in the role a test plays (client, or the controller's link).
// Failed expectations fail the running cmocka test.
#ifndef CW_WORKER_TEST_UTIL_H_
#define CW_WORKER_TEST_UTIL_H_

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include "cw_client.h"
#include "cw_frame.h"
#include "cw_test_launch.h"
#include "cw_test_util.h"

// ---- Raw frames ----------------------------------------------------------------

typedef struct {
  pid_t pid;
  int port;
  char addr[64];
} worker_t;

// Starts $CW_BUILD_DIR/bin/causeway-worker with 2 devices on 127.0.0.1 port
// 0, requiring `token` (NULL: none), and reads its listen line.
void start_worker(worker_t* w, const char* token);
// The same listening on `listen` (a Unix socket path: port 0).
void start_worker_at(worker_t* w, const char* token, const char* listen);
// SIGTERM; the worker must exit 0 within 30 s (under ASan: no leaks).
void stop_worker(worker_t* w);

// A TCP connection to 127.0.0.1:port whose reads time out after 60 s.
int dial(int port);
// The same to a Unix socket.
int dial_unix(const char* path);
void write_all(int fd, const void* p, size_t n);
// One frame: header, `m` packed (may be NULL), then `bulk_len` bulk bytes.
void send_frame(int fd, uint16_t type, uint64_t rid, const ProtobufCMessage* m,
                const void* bulk, uint64_t bulk_len);

typedef struct {
  cw_frame_header_t h;
  ProtobufCMessage* msg;
  uint8_t* bulk;
} reply_t;

// Reads one frame; false on EOF.
bool recv_frame(int fd, reply_t* r);
void reply_free(reply_t* r);

// One request, one reply (into *out if given, else freed); returns the error
// code (0 OK). Error replies are printed.
uint32_t call(int fd, uint16_t type, const ProtobufCMessage* m, const void* bulk,
              uint64_t bulk_len, reply_t* out);
// HELLO in `session` (0: a new one) as `role`; the session id, 0 if refused.
uint64_t hello(int fd, uint64_t session, int role, const char* token);

// Starts a worker (no token) and opens a connection that did HELLO as a
// client in a new session (its id into *out_session unless NULL).
int start_client(worker_t* w, uint64_t* out_session);

// f32[2,3] -> 2x + 1, as JAX lowers it (MLIR text); kAliasedProgram the same
// with its argument aliased to the result (what JAX emits for donate_argnums=0).
extern const char kScaleProgram[];
extern const char kAliasedProgram[];
// The shape g_dims of the f32 arrays upload() sends: {2, 3}.
extern int64_t g_dims[2];
// An UploadRequest of f32[2,3] (g_dims) as `id`, device 0.
void upload_request_init(Causeway__V1__UploadRequest* u, uint64_t id);
// UPLOAD of f32[2,3] `data` (`bytes` bulk bytes; `strides` NULL: dense) as
// `id` on `device`; returns the error code.
uint32_t upload(int fd, uint64_t id, const float* data, const int64_t* strides, size_t bytes,
                int device);
// UPLOAD of f32[n] `data` as `id`; returns the error code.
uint32_t upload_vector(int fd, uint64_t id, const float* data, int64_t n);

// A LAUNCH of `exe` on one device from argument `in` into output `out`,
// donating the argument when `donate`: l->req is ready to send (it points
// into *l; cw_test_launch.h).
typedef cw_test_launch_t launch1_t;
void launch1_init(launch1_t* l, uint64_t exe, uint64_t in, uint64_t out, bool donate);
// DOWNLOAD of `id` must give the 24 bytes of `want`.
void expect_download(int fd, uint64_t id, const float* want);

// ---- Through the client library -------------------------------------------------

// The suite's worker (2 devices, named "cluster-test"), started by
// suite_setup and stopped by suite_teardown (exit status 0 required).
extern cw_test_worker_t g_worker;
int suite_setup(void** state);
int suite_teardown(void** state);

// A client of g_worker in `role`, joining `session` (0: a new one).
cw_status_t connect_as(int role, uint64_t session, cw_client_t** out);

// Asserts `st` (taken) has `code`, printing it when it does not.
void assert_code(cw_status_t st, cw_status_code_t code);

// ---- Playing the controller (gang order, cw_worker_sched.c) ----------------------

// The worker's Stats.sched_stamps: up to `cap` entries of (stamp, session).
size_t sched_record(uint64_t* stamps, uint64_t* sessions, size_t cap);
// A raw connection to g_worker in session `id` as the controller.
int raw_link(uint64_t id);
// Reads the next frame on fd into *r if one comes within `ms`.
bool reply_within(int fd, int ms, reply_t* r);
// The next reply on fd (within 30 s) answers `rid` with `code` (0: OK).
void expect_reply(int fd, uint64_t rid, uint32_t code, const char* what);
// LAUNCH_GO for the part stamped `stamp`: go, or cancel.
void raw_go(int fd, uint64_t rid, uint64_t stamp, bool go);

#define ASSERT_OK CW_TEST_ASSERT_OK

#endif  // CW_WORKER_TEST_UTIL_H_
