// The plugin's core objects, shared because several modules read their
// fields: the client (its controller connection, settings and tables: every
// module that sends), its workers (cw_plugin_worker.c owns them;
// cw_plugin_health.c replaces a worker's connection; transfers, launches and
// the timeline name them), and its devices with their memory (set up by
// cw_plugin_device.c, read by transfers and launches). Everything else is
// declared by the module that owns it, in its own header.
//
// Object model (every PJRT handle is one of these structs, cast):
//   PJRT_Client            -> cw_plugin_client_t (here)
//   PJRT_Device            -> cw_plugin_device_t (here; also its PJRT_DeviceDescription)
//   PJRT_Memory            -> cw_plugin_memory_t (here; starts with the memory vtable)
//   PJRT_Buffer            -> cw_plugin_buffer_t (cw_plugin_buffer.h)
//   PJRT_LoadedExecutable  -> cw_plugin_loaded_t, PJRT_Executable -> cw_plugin_exe_t
//                             (cw_plugin_executable.h)
//   PJRT_Event             -> cw_plugin_future_t (cw_plugin_event.h; one reference)
//   PJRT_Error             -> private to cw_plugin_error.c (starts with the error vtable)
#ifndef CW_PLUGIN_INTERNAL_H_
#define CW_PLUGIN_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_client.h"
#include "cw_pjrt_c_api.h"
#include "cw_plugin_cancel.h"
#include "cw_plugin_token.h"
#include "cw_settings.h"
#include "cw_tls.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_device_s cw_plugin_device_t;
typedef struct cw_plugin_cluster_s cw_plugin_cluster_t;  // cw_plugin_cluster.h

// One worker of the session (cw_plugin_worker.h). Others read its identity,
// `conn`, `dead` and `epoch`; the seq, send_mu, batched deletes and deferred
// errors are cw_plugin_worker.c's alone but for cw_plugin_health.c, which
// replaces the connection under send_mu.
typedef struct cw_plugin_worker_s {
  cw_plugin_client_t* client;
  uint32_t index;
  char* name;
  // Replaced with the connection (under send_mu); read by any thread with
  // cw_plugin_worker_address. The old text stays in `retired`.
  _Atomic(char*) address;
  uint32_t island;
  // Direct connection in the session. Replaced (under send_mu) when the
  // worker is: readers load it atomically; the old one stays valid in
  // `retired` for retire_grace_ms (cw_plugin_health.c).
  _Atomic(cw_client_t*) conn;
  // LAUNCH goes on `conn`, not through the controller. Atomic: a restarted
  // controller's answer sets it again, or LEASE_CHANGED, while other threads
  // launch.
  _Atomic bool direct_launch;
  // Requests for this worker sent through the controller and not yet
  // answered (cw_plugin_worker.c): with two or more LAUNCHes among them the
  // next may wait for a shared write, which their replies bring.
  _Atomic uint32_t relayed_out;
  // Same host (a Unix socket) and the kernel lets the worker copy our memory:
  // big arrays move by peer_address, not through the socket
  // (cw_plugin_transfer_probe_direct). Off after a replacement.
  _Atomic bool direct_bulk;
  _Atomic uint64_t seq;  // last seq handed out (first request gets 1)
  // Held from taking a seq to sending its request: each connection then
  // carries this worker's seqs in increasing order, which the worker's flow
  // control relies on (docs/protocol.md, "Ordering across connections").
  pthread_mutex_t send_mu;
  // Ids of dropped buffers whose DELETE waits (guarded by send_mu): sent as
  // one DELETE before this worker's next seq'd request, or when the batch is full.
  uint64_t* pending_deletes;
  size_t n_pending_deletes, cap_pending_deletes;
  uint64_t pending_delete_bytes;  // what those buffers hold on the worker
  _Atomic bool dead;
  pthread_mutex_t mu;  // guards dead_reason, deferred_error
  char* dead_reason;
  // The first error reply to a pipelined request nobody waits on (DELETE):
  // surfaced by the next blocking call on this worker (cw_plugin_worker_take_deferred).
  char* deferred_error;
  int deferred_code;        // its cw_status_code_t
  uint64_t deferred_count;  // such errors since it was last surfaced
  // Health (cw_plugin_health.c). epoch counts this client's reconnections to
  // replacements; buffers made in an older epoch lived on a lost worker.
  _Atomic uint32_t epoch;
  uint32_t incarnation;  // guarded by mu: the controller's, of the worker we talk to
  char* next_address;    // guarded by mu: a replacement announced (WORKER_UP)
  uint32_t next_incarnation;
  struct cw_plugin_retired_s* retired;  // guarded by send_mu: old connections and addresses
  size_t num_retired;
  int64_t retire_grace_ms;  // 0: CW_PLUGIN_RETIRE_GRACE_MS (tests set it)
  // Marked dead because our link to it failed (cw_plugin_worker_map_error),
  // not by the controller (worker_down): the worker may be fine, with our
  // session's arrays, and the path may heal; the next use reattaches then
  // (cw_plugin_health.c), at most once per CW_PLUGIN_REATTACH_EVERY_MS.
  _Atomic bool link_lost;
  _Atomic bool worker_down;  // WORKER_DOWN: only a replacement revives it
  // Fills sent on the link because a connection of their own was refused
  // (cw_plugin_fill.c): tests wait for it.
  _Atomic uint64_t fills_behind;
  uint64_t session_key;  // guarded by send_mu: HelloReply.session_key, our session's life there
  int64_t reattach_after_ms;  // guarded by send_mu
  // Guarded by send_mu: a thread is connecting to w, a reattach or a
  // replacement (not under send_mu, cw_plugin_health.c).
  bool connecting;
  _Atomic uint32_t downs;  // WORKER_DOWN events so far: one during a connect supersedes it
  // The seqs of relayed requests not answered yet, increasing: a reattach
  // fills no seq of one (it may still be on its way through the controller:
  // filled first, it would be refused as a duplicate).
  // Ordered by (epoch, seq): a replacement numbers from 1 again.
  pthread_mutex_t relayed_mu;
  struct cw_plugin_relayed_seq_s {
    uint32_t epoch;
    uint64_t seq;
  }* relayed_seqs;
  size_t n_relayed_seqs, cap_relayed_seqs;
} cw_plugin_worker_t;

// The worker's address now (the text stays readable for retire_grace_ms
// after a replacement swaps it).
static inline const char* cw_plugin_worker_address(const cw_plugin_worker_t* w) {
  return atomic_load_explicit(&w->address, memory_order_acquire);
}

// One memory of a device, as its worker's plugin has it ("device",
// "pinned_host", ...; cw_plugin_device.h).
typedef struct cw_plugin_memory_s {
  const PJRT_Memory_FunctionTable* vtable;  // first: callers read it
  cw_plugin_device_t* device;
  int id;  // unique in the client
  int kind_id;
  char* kind;
  bool is_default;  // the device's default memory: its kind is not sent
  char* debug_string;
  char* to_string;
  pthread_mutex_t mu;  // set_user_data's
  // Read without mu (JAX asks on every launch): entries are only added in
  // front, and freed with the client.
  _Atomic(struct cw_plugin_memory_user_data_s*) user_data;  // cw_plugin_device.c
} cw_plugin_memory_t;

// One device of the session's global table (cw_plugin_device.h).
struct cw_plugin_device_s {
  cw_plugin_client_t* client;
  int global_id;
  int local_id;  // index on its worker
  cw_plugin_worker_t* worker;
  uint32_t island;
  char* kind;
  char* debug_string;
  char* to_string;
  PJRT_NamedValue* attributes;
  size_t num_attributes;
  char** attr_strings;  // owned storage behind `attributes`
  size_t num_attr_strings;
  int64_t** attr_lists;
  size_t num_attr_lists;
  cw_plugin_memory_t* memories;  // the worker's memories of this device, its order
  size_t num_memories;
  PJRT_Memory** memory_ptrs;            // memories as handles
  cw_plugin_memory_t* default_memory;   // one of memories
  PJRT_Device* self_ptr;      // this, as an array of one
};

// Set up by client creation (cw_plugin_client.c) and read-only after, but
// for next_id and ctrl.
struct cw_plugin_client_s {
  // Connection to the controller. With `resume`, replaced when the controller
  // restarts: read it through cw_plugin_ctrl_get (cw_plugin_resume.h).
  cw_client_t* ctrl;
  struct cw_plugin_resume_s* resume;  // NULL: a lost controller fails calls at once
  char* ctrl_address;
  uint64_t session_id;
  cw_plugin_worker_t* workers;
  size_t num_workers;
  cw_plugin_device_t* devices;
  size_t num_devices;
  PJRT_Device** device_ptrs;
  PJRT_Memory** memory_ptrs;  // every device's memories, device order
  size_t num_memories;
  char* platform_name;
  char* platform_version;
  _Atomic uint64_t next_id;      // client-chosen object ids
  cw_plugin_cluster_t* cluster;  // embedded cluster, NULL when joining one
  cw_plugin_token_t token;       // presented in every HELLO
  int cancel_fd;                 // create option causeway_cancel_fd, -1: none
  cw_tls_t* tls;                 // CAUSEWAY_TLS when joining a cluster (NULL: off)
  cw_settings_t settings;        // CW_SCOPE_PLUGIN, read once at client creation
  int64_t wait_spin_us;          // CAUSEWAY_WAIT_SPIN_US
  _Atomic bool ready;            // workers and devices are set up (events may look)
  // The controller withdrew the session's direct-launch leases (LEASE_CHANGED):
  // set whenever the event comes, even before `ready` or while a resume mutes
  // events, and never cleared, so no SessionInfo applied later brings one back.
  _Atomic bool leases_withdrawn;
  // Set (under teardown_mu) before the connections are released: a reply
  // callback that would send on another worker's connection sends under
  // teardown_mu, and not once this is set (cw_plugin_transfer.c).
  pthread_mutex_t teardown_mu;
  bool closing;
  // Seq fills of relayed requests, on connections of their own
  // (cw_plugin_fill.c): made at the first.
  _Atomic(struct cw_plugin_fills_s*) fills;
  atomic_bool fills_closed;  // cw_plugin_fill_close: none are taken
};

// Next object id (never 0, never reused).
static inline uint64_t cw_plugin_client_new_id(cw_plugin_client_t* c) {
  return atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed);
}

#endif  // CW_PLUGIN_INTERNAL_H_
