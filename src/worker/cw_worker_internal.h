// Internal to the worker: its state, shared by the files in src/worker that
// make up causeway-worker. Not installed.
#ifndef CW_WORKER_INTERNAL_H_
#define CW_WORKER_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cw_conn_parser.h"
#include "cw_frame.h"
#include "cw_net.h"
#include "cw_pjrt.h"
#include "cw_staging.h"
#include "cw_store.h"
#include "cw_worker.h"
#include "cw_worker_cluster.h"
#include "cw_worker_seq.h"

#define CW__READAHEAD (64 * 1024)
#define CW__BULK_ALIGN 64
#define CW__MAX_PEER_STATS 1024
#define CW__SHUTDOWN_GRACE_MS 10000
// Bound on launches in flight (handed to PJRT, not yet complete) when a
// multi-device launch is issued; until then it waits in its connection's
// queue. XLA's CPU client gives each device a
// semaphore of 32 in-flight computations (max_inflight_computations_per_device)
// and a multi-device Execute acquires it inside tasks on its client thread
// pool, which has only max(cores, devices) threads: exactly enough for one
// collective. With more than 32 launches queued, a dispatch task blocks one
// pool thread on that semaphore while the other devices' threads wait in an
// all-reduce rendezvous for the device that now has no thread to run on; XLA
// then aborts the process after 40 s (rendezvous.cc "only 3 of 4 arrived").
// In-process JAX with 4 CPU devices on 2 cores hits the same deadlock. So a
// multi-device launch is issued only while fewer than this many launches (of
// any kind: all count against the devices' semaphores) are in flight, well
// under 32, and its dispatch never blocks. Single-device launches are not
// held: XLA dispatches them on the calling thread (this loop), not its pool.
#ifndef CW__MAX_LAUNCHES_IN_FLIGHT  // a test build may raise it to show the deadlock
#define CW__MAX_LAUNCHES_IN_FLIGHT 16
#endif

typedef struct cw_conn_s cw_conn_t;
typedef void (*cw_bulk_free_fn)(void* user);
typedef struct cw_op_s cw_op_t;
typedef struct cw_stamp_state_s cw_stamp_state_t;
typedef struct cw_stamp_rec_s {
  uint64_t stamp;
  uint64_t session_id;
} cw_stamp_rec_t;

typedef struct cw_session_s {
  struct cw_session_s* next;
  uint64_t id;   // the wire id
  uint64_t key;  // store key, unique per incarnation (never reused)
  int connections;  // client connections that keep it alive
  cw_seq_t seq;     // ordering across its connections (cw_worker_seq.h)
  struct cw_wtrace_s* trace;  // obs: recorded events once the client asked; NULL: none
  bool paused;      // `causeway pause`: its launches wait in their queues
} cw_session_t;

typedef struct cw_peer_stat_s {
  char* name;
  uint64_t bytes_in;
  uint64_t bytes_out;
} cw_peer_stat_t;

// A request this worker sent on an outbound connection, awaiting its reply.
typedef void (*cw_outreq_fn)(cw_conn_t* c, cw_op_t* op, cw_status_t status);  // takes status
typedef struct cw_outreq_s {
  struct cw_outreq_s* next;
  uint64_t request_id;
  cw_outreq_fn fn;
  cw_op_t* op;  // NULL for HELLO
} cw_outreq_t;

typedef struct cw_launch_s {
  struct cw_launch_s* next;
  cw_conn_t* conn;  // referenced
  uint64_t request_id;
  uint64_t skey;
  Causeway__V1__LaunchRequest* req;  // owned
  size_t num_devices, num_args, num_outputs;
  uint64_t* out_serials;  // [num_devices * num_outputs]
  // Retained when the launch is applied, released when it is freed: a DELETE
  // of an id later in program order cannot take them from a waiting launch.
  cw_store_entry_t* exe;
  cw_store_entry_t** inputs;  // [num_devices * num_args]
  cw_status_t apply_error;    // an id missing (or of the wrong kind) when applied
  size_t events_left;
  cw_status_t first_error;
  bool donated_dropped;  // the donated inputs' ids are deleted
  int64_t trace_start_ns;  // obs: when it was issued to PJRT
  // A part of an island's launch (LaunchRequest.prepare): answered ready at
  // its turn, then held there until LAUNCH_GO says go (or cancel).
  bool prepared, go;
  bool go_request;  // request_id is the LAUNCH_GO's: the reply answers that
} cw_launch_t;

struct cw_conn_s {
  cw_conn_t* prev;
  cw_conn_t* next;
  cw_worker_t* w;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t timer;  // HELLO or connect deadline
  uv_connect_t connect_req;
  int refs;
  bool closing;
  bool outbound;
  bool connected;  // outbound: the connect completed
  bool hello_done;
  bool close_after_write;
  bool reading;
  bool paused;  // on the worker's resume list
  cw_conn_t* resume_next;
  int role;
  cw_session_t* session;  // keeps it alive when keeps_session
  bool keeps_session;
  size_t peer_stat;
  uint64_t uncounted_in, uncounted_out;  // moved before peer_stat was known
  int last_error;  // the libuv error that closed it, 0 if none
  char name[128];
  cw_conn_parser_t parser;
  uint8_t* readahead;
  size_t ra_off, ra_len;  // unparsed bytes while paused
  size_t writes_pending;
  // The frame whose bulk bytes are arriving, NULL when they are discarded.
  cw_op_t* recv;
  // Launches of this connection, issued in arrival order.
  cw_launch_t* launch_head;
  cw_launch_t* launch_tail;
  bool launch_waiting;
  cw_conn_t* throttle_next;  // on the worker's launch_throttled list
  // Outbound (SEND to a peer): the peer's address and session.
  char* peer_address;
  uint64_t dst_session;
  cw_outreq_t* outreqs;
  uint64_t next_request_id;
  // seq: the held request whose bulk bytes are arriving; the held request
  // being applied now (its bytes already received).
  cw_seq_held_t* recv_held;
  cw_seq_held_t* seq_applying;
  // seq flow control: requests of this connection held, and whether reading
  // stopped because the session holds its caps' worth (cw__seq_block).
  size_t seq_held;
  bool seq_blocked;
  bool is_controller;  // outbound: this worker's REGISTER connection
  // Small frames gathered for one write (cw__send): out[0..out_len) are
  // whole frames not yet handed to libuv; flush_queued: on w->flush_list.
  uint8_t* out;
  size_t out_len, out_cap;
  // A written buffer kept for reuse: with `out`, two buffers alternate
  // (one being written, one gathering) and a steady stream mallocs none.
  uint8_t* out_spare;
  size_t out_spare_cap;
  bool flush_queued;
  cw_conn_t* flush_next;
  cw_conn_t* stamp_wait_next;  // gang order: on the worker's list of waiters
};

// One request in progress that outlives its frame: waits on entries, PJRT
// events or a peer's reply.
typedef void (*cw_op_fn)(cw_op_t* op, cw_store_entry_t* entry);
struct cw_op_s {
  cw_worker_t* w;
  cw_conn_t* conn;  // referenced
  uint16_t type;
  uint64_t request_id;
  uint64_t skey;
  uint64_t id;       // the object waited on (source)
  uint64_t serial;   // of the entry this op creates or fills
  uint64_t dst_id;
  int dst_device;
  cw_op_fn cont;
  ProtobufCMessage* msg;  // owned request
  uint8_t* staging;       // owned (posix_memalign)
  uint64_t size;
  int dtype;
  int64_t* dims;  // owned
  size_t rank;
  int device;
  char* peer_address;
  uint64_t dst_session;
  cw_status_t status;  // SEND: the source's error, sent on as a poisoned PUT
  // Threadpool jobs.
  uv_work_t work;
  PJRT_LoadedExecutable* exe;
  uint32_t num_outputs, num_devices;
  char* name;
  cw_pjrt_shape_t* params;  // owned; parameter shapes when params_known
  size_t num_params;
  bool params_known;
  // op->staging came from elsewhere (a held request's bytes): plain free().
  bool staging_foreign;
  // DOWNLOAD/SEND straight from device memory: the source, pinned, and
  // (once ready) its bytes.
  struct cw_pin_s* pin;  // owned reference
  const void* view;
  // The entry op->id named when the request was applied (retained; NULL if
  // absent): waiting resumes on it, not on whatever op->id names by then.
  cw_store_entry_t* src;
  bool src_resolved;
  int64_t trace_start_ns;  // obs: when the request arrived
};

// A PJRT event completion, marshalled from a plugin thread to the loop.
typedef void (*cw_done_fn)(cw_worker_t* w, void* user, cw_status_t status);  // takes status
typedef struct cw_completion_s {
  struct cw_completion_s* next;
  cw_worker_t* w;
  PJRT_Event* event;
  cw_status_t status;
  cw_done_fn fn;
  void* user;
} cw_completion_t;

struct cw_worker_s {
  const cw_settings_t* settings;
  uv_loop_t loop;
  bool loop_initialized;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } listener;
  bool listening;
  bool is_pipe;
  char* unix_path;
  uv_async_t async;
  uv_idle_t idle;
  uv_prepare_t flush;      // writes gathered small frames before the loop blocks
  cw_conn_t* flush_list;   // connections with gathered frames (referenced)
  // The thread running the loop (set once it runs): a PJRT completion that
  // fires inline there needs no uv_async_send wakeup (cw__event_fired).
  pthread_t loop_thread;
  bool loop_thread_known;
  bool inline_completions;  // completions queued from the loop thread itself
  uv_signal_t sigterm, sigint;
  uv_timer_t shutdown_timer;
  bool handles_open;
  bool shutting_down;
  bool leak_on_exit;
  bool zero_copy_reported;
  char listen_address[256];
  const char* name;
  const char* token;
  cw_frame_limits_t prehello_limits, limits;
  cw_pjrt_t* pjrt;
  cw_store_t* store;
  Causeway__V1__Inventory inventory;
  bool inventory_ready;
  cw_conn_t* conns;  // inbound and outbound
  cw_conn_t* resume_list;
  cw_session_t* sessions;
  uint64_t next_session_key;
  cw_peer_stat_t* peer_stats;
  size_t num_peer_stats;
  // Completion queue from plugin threads.
  pthread_mutex_t mu;
  cw_completion_t* completions;  // LIFO under mu
  size_t outstanding;  // completions and threadpool jobs not yet applied
  // Counters for STATS.
  uint64_t launches, uploads, downloads, errors;
  // obs: bytes moved, for STATS fields 100-105 (controller metrics).
  uint64_t upload_bytes, download_bytes, send_bytes, put_bytes, sends, puts;
  size_t traced_sessions;  // obs: sessions with a trace (0: recording costs nothing)
  // Launches handed to PJRT whose completion events have not all fired, and
  // the connections (referenced, FIFO) whose next launch waits for that
  // count to drop below CW__MAX_LAUNCHES_IN_FLIGHT.
  size_t launches_in_flight;
  cw_conn_t* launch_throttled;
  cw_conn_t* launch_throttled_tail;
  size_t inbound_connections;
  // Bulk staging blocks, reused (staging-cache-bytes).
  cw_staging_t* staging;
  // Buffers whose device memory a write is reading in place.
  struct cw_pin_s* pins;
  // Cluster: the controller connection (REGISTER), the parent watch.
  cw_conn_t* controller;
  char advertised_address[256];
  cw_net_watch_t watch;
  // Health (cw_worker_health.c): heartbeats, reconnecting to the controller.
  uv_timer_t heartbeat_timer;
  uv_timer_t reconnect_timer;
  bool registered;             // the controller accepted REGISTER on w->controller
  uint64_t heartbeat_seq;
  int64_t reconnect_delay_ms;  // next wait before reconnecting
  // Operations (cw_worker_ops.c): `causeway drain`, and ops alive (for idle).
  bool draining;
  size_t ops_live;
  // Gang order: stamped launches issued in stamp order (cw_worker_sched.c).
  cw_stamp_state_t* stamps;
};

// cw_worker.c, shared with its modules.
void cw__reply(cw_conn_t* c, uint16_t type, uint64_t request_id, const ProtobufCMessage* msg);
void cw__reply_error(cw_conn_t* c, uint16_t type, uint64_t request_id, cw_status_t status);
void cw__launch_device_done(cw_worker_t* w, void* user, cw_status_t status);

// --- Session timelines (cw_worker_trace.c, obs) --------------------------------------
struct cw_wtrace_s;
bool cw_worker_trace_enabled(cw_worker_t* w, uint64_t skey);
// Records a complete event [start_ns, now) for session `skey` if it is traced.
void cw_worker_trace_record(cw_worker_t* w, uint64_t skey, const char* cat, const char* name,
                            int device, int64_t start_ns, uint64_t id, uint64_t seq,
                            uint64_t bytes, uint64_t launch_id, const char* peer);
// A traced launch's device completion at position `index`: swaps in a callback
// that records the execution and then calls *fn(user). No-op when untraced.
void cw_worker_trace_wrap_launch(cw_worker_t* w, cw_launch_t* l, size_t index, cw_done_fn* fn,
                                 void** user);
void cw_worker_trace_handle_start(cw_conn_t* c, const cw_frame_header_t* h,
                                  const Causeway__V1__TraceStartRequest* r);
void cw_worker_trace_handle_fetch(cw_conn_t* c, const cw_frame_header_t* h,
                                  const Causeway__V1__TraceFetchRequest* r);
void cw_worker_trace_free(struct cw_wtrace_s* t);
// --- cw_worker.c functions the modules use ----------------------------------------

// Sends one frame on `c` (see cw_worker.c).
void cw__send(cw_conn_t* c, uint16_t type, uint32_t flags, uint64_t request_id,
              const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len,
              cw_bulk_free_fn bulk_free, void* bulk_user);
// Connects to the controller at `address` and registers (asynchronously).
CW_MUST_USE cw_status_t cw__controller_connect(cw_worker_t* w, const char* address);

// --- Health (cw_worker_health.c) --------------------------------------------------

// Timers: heartbeats every --heartbeat-ms while registered; reconnecting.
void cw_worker_health_start(cw_worker_t* w);
void cw_worker_health_stop(cw_worker_t* w);
// The controller accepted REGISTER.
void cw_worker_health_registered(cw_worker_t* w);
// The controller connection `name` is gone (and the worker keeps serving):
// reconnect after 100 ms, doubling to --reconnect-max-ms, and register again.
void cw_worker_health_controller_lost(cw_worker_t* w, const char* name);

// --- cw_worker.c functions used by the other modules ---
void cw__launch_pump(cw_conn_t* c);
void cw__launch_fail(cw_worker_t* w, cw_launch_t* l, cw_status_t status);
void cw__drop_donated(cw_worker_t* w, uint64_t skey, const Causeway__V1__LaunchRequest* r);
void cw__conn_ref(cw_conn_t* c);
void cw__conn_unref(cw_conn_t* c);

// --- Operations (cw_worker_ops.c) ---
// ADMIN_HOLD, ADMIN_WORKER_DRAIN from the controller. Borrows msg.
void cw_worker_ops_handle(cw_conn_t* c, const cw_frame_header_t* h, const ProtobufCMessage* msg);
// A closing connection's launches held by a pause fail (nobody can resume them).
void cw_worker_ops_conn_closing(cw_conn_t* c);
// While draining: refuses LAUNCH, UPLOAD, COMPILE, LOAD (replies; frees *msg).
bool cw_worker_ops_refuse(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg);
// The operations fields of STATS; free the scratch with cw_worker_ops_stats_free.
typedef struct cw_worker_ops_scratch_s {
  Causeway__V1__AdminSessionStats* items;
  Causeway__V1__AdminSessionStats** ptrs;
} cw_worker_ops_scratch_t;
void cw_worker_ops_fill_stats(cw_worker_t* w, Causeway__V1__Stats* st,
                              cw_worker_ops_scratch_t* scratch);
void cw_worker_ops_stats_free(cw_worker_ops_scratch_t* scratch);

// --- cw_worker_sched.c: gang order ------------------------------------------------
// The stamp of a request from the controller (0: none, or not a stamped LAUNCH).
uint64_t cw_worker_stamp_of(const cw_conn_t* c, uint16_t type, const ProtobufCMessage* msg);
// True when the head launch of `c`, stamped `stamp`, must wait for its turn:
// `c` is parked (launch_waiting) and pumped again when the turn comes.
bool cw_worker_stamp_wait(cw_conn_t* c, uint64_t stamp);
// A stamped launch was issued or failed in its turn, or refused before it:
// records it, advances the order, resumes connections whose turn came.
void cw_worker_stamp_passed(cw_worker_t* w, uint64_t stamp, uint64_t session_id);
// A request dropped or refused before it became a launch: passes its stamp.
void cw_worker_stamp_drop(cw_conn_t* c, uint16_t type, const ProtobufCMessage* msg);
// A REGISTER goes out: the controller counts this worker's island from 1.
void cw_worker_stamp_restart(cw_worker_t* w);
// A prepared launch holds the turn of `stamp` (0: none holds it): the stall
// recovery must not go past it while the controller decides.
void cw_worker_stamp_hold(cw_worker_t* w, uint64_t stamp);
// Shutting down: nothing waits for a turn any more.
void cw_worker_stamp_stop(cw_worker_t* w);
// Points st->sched_stamps at the record; returns what the caller frees.
void* cw_worker_stamp_stats(cw_worker_t* w, Causeway__V1__Stats* st);
void cw_worker_stamp_free(cw_worker_t* w);

#endif  // CW_WORKER_INTERNAL_H_
