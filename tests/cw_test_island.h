// Helpers for tests and benchmarks that drive islands through a real
// controller: controller sessions with a connection to each of their workers,
// compile options for a device list, and workers of the gang test plugin
// (tests/gangplugin, docs/gangplugin.md) whose "allreduce_sum f32[N] TAG"
// programs sum their inputs across every device of every process.
//
// No cmocka here: functions return a cw_status_t or, as cw_test_util, 0 on
// success and -1 after printing why; callers assert.
#ifndef CW_TESTS_TEST_ISLAND_H_
#define CW_TESTS_TEST_ISLAND_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_client.h"
#include "cw_test_util.h"

#define CW_TEST_SESSION_MAX_WORKERS 8

// Serialized xla.CompileOptionsProto naming session devices ids[0..n) as n
// partitions of one replica. malloc'd (the caller frees); NULL when out of
// memory or n > 64.
uint8_t* cw_test_compile_options(const int64_t* ids, size_t n, size_t* out_size);

// cw_client_call without bulk. *out_reply (when out_reply is not NULL) is
// the reply, freed with protobuf_c_message_free_unpacked; else it is freed.
CW_MUST_USE cw_status_t cw_test_call(cw_client_t* c, uint16_t type, const ProtobufCMessage* m,
                                     ProtobufCMessage** out_reply);

// REGISTER on `c` (a connection with HELLO role WORKER) as a pretend worker
// `name` at `address` with `devices` CPU devices of platform
// "cpu" version "test"; previous >= 0: RegisterRequest.previous. *out (may
// be NULL) gets the reply, freed with protobuf_c_message_free_unpacked.
CW_MUST_USE cw_status_t cw_test_register(cw_client_t* c, const char* name, const char* address,
                                         size_t devices, int32_t previous,
                                         Causeway__V1__RegisterReply** out);
// The RegisterRequest.revision both send: this build's, unless a test of an
// older worker sets it.
extern uint32_t cw_test_register_revision;
// The same with RegisterPrevious `previous` as given (borrowed; NULL: none).
CW_MUST_USE cw_status_t cw_test_register_previous(cw_client_t* c, const char* name,
                                                  const char* address, size_t devices,
                                                  Causeway__V1__RegisterPrevious* previous,
                                                  Causeway__V1__RegisterReply** out);

// A controller session: its connection, its SessionInfo, and one connection
// per worker of the session, by worker index.
typedef struct cw_test_session_s {
  cw_client_t* ctl;
  Causeway__V1__SessionInfo* info;
  cw_client_t* links[CW_TEST_SESSION_MAX_WORKERS];
} cw_test_session_t;

typedef struct cw_test_session_options_s {
  const char* controller;       // address
  const char* name;             // session and peer name
  const char* const* workers;   // workers to place on, by name (NULL: any)
  size_t num_workers;
  uint32_t num_devices;
  uint32_t min_island;          // 0: no minimum
  uint32_t min_workers;         // registered workers to wait for (up to 60 s)
} cw_test_session_options_t;

// Opens a shared session (share = true). On failure the session holds what
// was opened; cw_test_session_close releases it either way.
CW_MUST_USE cw_status_t cw_test_session_open(const cw_test_session_options_t* options,
                                             cw_test_session_t* out_session);
void cw_test_session_close(cw_test_session_t* s);

// Resumes `s` on a restarted controller at `controller` (SESSION_RESUME):
// joins in its session id and reports its devices (its SessionInfo's) and
// executable `exe` over session devices ids[0..n); `num_devices`: the
// allocation it was opened with. Checks the reply has the same devices;
// s->info and the worker connections stay as they were.
CW_MUST_USE cw_status_t cw_test_session_resume(cw_test_session_t* s, const char* controller,
                                               uint32_t num_devices, uint64_t exe,
                                               const int64_t* ids, size_t n);

// The session device with global id `id`, or NULL.
const Causeway__V1__GlobalDevice* cw_test_session_device(const cw_test_session_t* s, int32_t id);

// The connection to the worker of session device `id` and its local device
// id there; NOT_FOUND when the session has no such device or connection.
CW_MUST_USE cw_status_t cw_test_session_locate(const cw_test_session_t* s, int64_t id,
                                               cw_client_t** out_link, int* out_local);

// Uploads f32[elems] from `data` as buffer_id onto session device `id`,
// pipelined on its worker's connection: errors surface in
// cw_test_session_flush.
CW_MUST_USE cw_status_t cw_test_session_upload_f32(cw_test_session_t* s, int64_t id,
                                                   uint64_t buffer_id, const float* data,
                                                   size_t elems);

// Downloads buffer_id of session device `id` into out[0..elems); the buffer
// must hold exactly that many bytes.
CW_MUST_USE cw_status_t cw_test_session_download_f32(cw_test_session_t* s, int64_t id,
                                                     uint64_t buffer_id, float* out,
                                                     size_t elems);

// Flushes every worker connection of the session: the first error, or OK.
CW_MUST_USE cw_status_t cw_test_session_flush(cw_test_session_t* s);

// The session's ids of the devices of the named workers, worker by worker in
// the order given (a program on an island lists each member's devices
// together, in rank order). Writes at most max ids; returns the count.
size_t cw_test_session_ids(const cw_test_session_t* s, const char* const* workers,
                           size_t num_workers, int64_t* out_ids, size_t max);

// Compiles the gang plugin's "allreduce_sum f32[elems] TAG" (format cwgang)
// through the session's controller as exe over session devices ids[0..n).
CW_MUST_USE cw_status_t cw_test_gang_compile(cw_test_session_t* s, uint64_t exe, size_t elems,
                                             const char* tag, const int64_t* ids, size_t n);

// Launches exe through the session's controller, pipelined (done = NULL:
// errors surface in cw_client_flush(s->ctl)), with one argument in[d] and
// one output out[d] on each of its n devices.
CW_MUST_USE cw_status_t cw_test_gang_launch(cw_test_session_t* s, uint64_t exe,
                                            const uint64_t* in, const uint64_t* out, size_t n);
// The same with a completion callback (cw_client_launch's done and user).
CW_MUST_USE cw_status_t cw_test_gang_launch_cb(cw_test_session_t* s, uint64_t exe,
                                               const uint64_t* in, const uint64_t* out, size_t n,
                                               cw_client_done_fn done, void* user);

typedef struct cw_test_gang_worker_options_s {
  const char* controller;    // address
  const char* dir;           // CW_GANG_DIR: one fresh directory per gang
  int rank;                  // CW_GANG_RANK
  int size;                  // CW_GANG_SIZE
  const char* name;          // worker name
  const char* island;        // --island NAME --island-size SIZE; NULL: none
  int devices;               // 0: 1
  const char* plugin;        // NULL: $CW_GANGPLUGIN
  const char* inner_plugin;  // NULL: $CAUSEWAY_PJRT_PLUGIN
  const char* listen;        // NULL: 127.0.0.1:0
  const char* const* extra_args;  // more flags, NULL-terminated; NULL: none
} cw_test_gang_worker_options_t;

// Starts a causeway-worker over the gang plugin (cw_test_worker_start).
int cw_test_gang_worker_start(const cw_test_gang_worker_options_t* options,
                              cw_test_worker_t* out_worker);

#endif  // CW_TESTS_TEST_ISLAND_H_
