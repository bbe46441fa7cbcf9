// The compile service (cw_ctl_compile.c): a client's COMPILE is placed on one
// island (device ids rewritten to worker-local ones), compiled once per
// program, options and plugin version -- the memory cache, a compilation
// already running, the disk cache (cw_ctl_disk.c), then a worker's private
// session -- serialized, and LOADed into the client's session on the island.
#ifndef CW_CTL_COMPILE_H_
#define CW_CTL_COMPILE_H_

#include "cw_compile_cache.h"
#include "cw_ctl_internal.h"

// A client's COMPILE request, shared by the compiles it started (an island's
// parts) until each has answered: a cached executable that its worker
// cannot load is compiled again from it.
typedef struct cw_ctl_program_s {
  int refs;
  Causeway__V1__CompileRequest* req;  // owned
} cw_ctl_program_t;

// One client COMPILE in progress.
typedef struct cw_ctl_compile_s {
  struct cw_ctl_compile_s* next;  // waiters of one in-flight compilation
  cw_controller_t* ctl;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  cw_ctl_session_t* session;  // retained
  uint64_t exe_id;
  uint64_t exe_serial;
  uint32_t worker;
  uint8_t* options;  // rewritten to worker-local ids
  size_t options_size;
  int32_t* devices;  // global ids in the executable's device order
  size_t num_devices;
  bool cache_hit;
  bool disk_hit;    // the cached executable came from the disk
  bool recompiled;  // its cached executable was refused: compiled again
  bool loaded_before;  // LOAD found the id on the worker (ALREADY_EXISTS)
  bool counted;  // in its session's `compiling` (a client's COMPILE, not an island's part)
  cw_ctl_program_t* program;  // retained; NULL: not kept (out of memory)
  int64_t start_ms;
  Causeway__V1__CompileReply* load_reply;  // owned, from LOAD
  struct cw_ctl_gang_compile_s* gang;      // a part of an island's compile; NULL: alone
  // Placement on an island of several workers (cw_ctl_island_place): owned
  // until the executable takes them.
  uint32_t* parts;
  uint32_t* part_devices;
  size_t num_parts;
} cw_ctl_compile_t;

// One compilation on a worker's private session; identical requests wait on it.
typedef struct cw_ctl_inflight_s {
  struct cw_ctl_inflight_s* next;  // the controller's in-flight compilations
  struct cw_ctl_inflight_s* prev;
  cw_controller_t* ctl;
  uint8_t* key;
  size_t key_size;
  uint32_t worker;
  uint64_t private_exe_id;
  cw_ctl_compile_t* waiters;
  // The request kept (cw_ctl_compile_keep) while the disk cache is looked at
  // (cw_ctl_disk.c) or while it waits for a place at its worker. NULL otherwise.
  uint8_t* code;
  size_t code_size;
  char* format;
  uint8_t* options;
  size_t options_size;
  // Waiting for a place at its worker, or sent and counted in the worker's
  // compiles_out.
  bool queued;
  bool sent;
  struct cw_ctl_inflight_s* queue_next;
  struct cw_ctl_inflight_s* queue_prev;
} cw_ctl_inflight_t;

void cw_ctl_handle_compile(cw_net_conn_t* conn, const cw_frame_header_t* h,
                           ProtobufCMessage** msg);
// Another reference to `p` (NULL stays NULL).
cw_ctl_program_t* cw_ctl_program_retain(cw_ctl_program_t* p);
// The CPU a worker's executables are code for: its Inventory.host_cpu where
// its plugin compiles for the host CPU (platform "cpu"), else "" (a device
// plugin's code is the device's).
const char* cw_ctl_compile_code_cpu(const Causeway__V1__Inventory* inv);
// Finishes an in-flight compilation: its waiters load `entry` or fail with
// `st` (taken); frees `f`.
void cw_ctl_compile_inflight_finish(cw_ctl_inflight_t* f, cw_compile_cache_entry_t* entry,
                                    cw_status_t st);
// Sends the in-flight compilation's COMPILE to its worker (reopening the
// private link if needed), or queues it while the worker has
// CAUSEWAY_WORKER_COMPILES unanswered. Finishes `f` instead when no open
// session waits for it (CANCELLED), the worker cannot be reached
// (UNAVAILABLE) or there is no memory to queue it. The arguments stay the
// caller's (queued, `f` keeps a copy).
void cw_ctl_compile_send(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                         size_t code_size, const uint8_t* options, size_t options_size);
// The same with the request `f` kept (cw_ctl_compile_keep), which it queues
// without another copy.
void cw_ctl_compile_send_kept(cw_ctl_inflight_t* f);
// Keeps a copy of the request in `f` (code, format, options); false, keeping
// nothing, without memory for it. Finishing `f` frees it.
bool cw_ctl_compile_keep(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                         size_t code_size, const uint8_t* options, size_t options_size);
void cw_ctl_compile_drop_kept(cw_ctl_inflight_t* f);
// Answers a client COMPILE with `info` (its exe_id and cache_hit filled
// here), marks `e` (may be NULL) ready, counts it; `where` is for the log.
void cw_ctl_compile_answer(cw_controller_t* ctl, cw_net_conn_t* client, uint64_t request_id,
                           cw_ctl_exe_t* e, Causeway__V1__ExecutableInfo* info,
                           uint32_t num_outputs, uint32_t num_devices, const char* name,
                           bool cache_hit, int64_t start_ms, const char* where);

// Drops the queued compiles no open session waits for (a session closed).
void cw_ctl_compile_prune(cw_controller_t* ctl);
// Fails every queued compile (the controller is stopping).
void cw_ctl_compile_stop(cw_controller_t* ctl);

#endif  // CW_CTL_COMPILE_H_
