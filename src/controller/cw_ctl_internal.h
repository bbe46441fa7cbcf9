// Internal to the controller: its state, shared by the files in
// src/controller (cw_controller.c and the modules it grew). Not installed.
#ifndef CW_CTL_INTERNAL_H_
#define CW_CTL_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cw_frame.h"
#include "cw_compile_cache.h"
#include "cw_ctl_alloc_plan.h"
#include "cw_controller.h"
#include "cw_net.h"
#include "cw_settings.h"

#define CW__OPEN_TICK_MS 50
#define CW__MAX_WAIT_MS (10 * 60 * 1000)
#define CW__MAX_NAME 128
#define CW__MAX_ADDRESS 200
#define CW__MAX_WORKERS 4096
// Stamped launches relayed to an island's worker and not yet answered; more
// wait in the controller, where the island's scheduler orders them by weight.
#define CW__SCHED_MAX_OUTSTANDING 32

typedef struct cw_ctl_session_s cw_ctl_session_t;
typedef struct cw_ctl_peer_s cw_ctl_peer_t;

typedef struct cw_ctl_item_s cw_ctl_item_t;
typedef struct cw_ctl_sched_island_s cw_ctl_sched_island_t;
typedef struct cw_ctl_stamp_ring_s cw_ctl_stamp_ring_t;

typedef struct cw_ctl_worker_s {
  cw_controller_t* ctl;
  uint32_t index;
  char name[CW__MAX_NAME];
  char address[CW__MAX_ADDRESS + 1];
  bool alive;
  int32_t first_device;
  uint32_t num_devices;
  Causeway__V1__RegisterRequest* reg;  // owned: the worker's inventory
  cw_net_conn_t* private_conn;         // retained: the controller's compile session
  cw_ctl_item_t* queue_head;           // the island's queue
  cw_ctl_item_t* queue_tail;
  // Health (cw_ctl_health.c).
  cw_net_conn_t* reg_conn;      // borrowed: the live REGISTER connection, NULL once lost
  int64_t last_heartbeat_ms;
  uint32_t incarnation;         // 0 first, +1 each time a same-name worker takes the slot
  struct cw_ctl_worker_ops_s* ops;     // operations (cw_ctl_ops.c): drain, polled STATS
  cw_ctl_sched_island_t* sched;        // gang order (cw_ctl_sched.c); NULL until used
  // The island (cw_ctl_island.c): the index of the worker whose scheduler
  // orders it -- its own, or for an island that spans several workers
  // (--island NAME), the first member to register.
  uint32_t island;
  char island_name[CW__MAX_NAME];  // "": an island of its own
  uint32_t island_size, island_rank;
  bool island_restarting;  // the island's first member: replacements are taking every place
} cw_ctl_worker_t;

typedef enum cw_ctl_exe_state_e {
  CW__EXE_LOADING = 0,
  CW__EXE_READY,
  CW__EXE_FAILED,
} cw_ctl_exe_state_t;

// An executable of a session: where it lives and whether it is loaded.
typedef struct cw_ctl_exe_s {
  struct cw_ctl_exe_s* next;
  uint64_t id;
  uint64_t serial;  // distinguishes a re-created id from a stale one
  uint32_t worker;
  cw_ctl_exe_state_t state;
  cw_status_t error;  // FAILED
  // Kept while the session holds it, to LOAD it into a replacement worker.
  cw_compile_cache_entry_t* entry;  // retained (sticky past cache eviction)
  uint8_t* options;                 // rewritten compile options (owned)
  size_t options_size;
  // An executable of an island that spans several workers (cw_ctl_island.c):
  // `worker` is the island; it is loaded on parts[i], which runs part_devices[i]
  // of its devices, in order. num_parts 0: one worker.
  uint32_t* parts;
  uint32_t* part_devices;
  size_t num_parts;
  int32_t* devices;  // the session's device ids, in launch order (parts only)
  size_t num_devices;
} cw_ctl_exe_t;

struct cw_ctl_session_s {
  cw_ctl_session_t* next;
  cw_controller_t* ctl;
  uint64_t id;
  int refs;          // client connections, operations and queue items
  int clients;       // client connections
  bool closed;       // every client connection is gone
  cw_net_conn_t** links;  // [ctl->num_workers at open], retained; NULL: none
  size_t num_links;
  cw_ctl_exe_t* exes;
  uint64_t launches;  // relayed (metrics)
  // Health: the worker incarnation this session's client has rejoined, per
  // worker index (absent: 0, the first).
  uint32_t* joined;
  size_t num_joined;
  struct cw_ctl_session_ops_s* ops;  // operations (cw_ctl_ops.c): name, devices, paused
  // Allocation (cw_ctl_alloc.c). Not allocated: every device, by global id,
  // nothing reserved (OPEN_SESSION without num_devices).
  bool allocated;
  bool share;
  uint32_t weight;            // gang order: share of shared islands (>= 1)
  cw_alloc_device_t* vdevs;   // [num_vdevs]: session device id -> worker index, local id
  uint32_t num_vdevs;
};

struct cw_ctl_peer_s {
  cw_ctl_peer_t* next;
  cw_controller_t* ctl;
  cw_net_conn_t* conn;  // retained
  int role;
  bool hello_done;
  cw_ctl_session_t* session;  // clients: retained
  cw_ctl_worker_t* worker;    // a registered worker's connection
};

// A client request waiting in an island queue.
typedef struct cw_ctl_multi_s cw_ctl_multi_t;
struct cw_ctl_item_s {
  cw_ctl_item_t* next;
  uint16_t type;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  cw_ctl_session_t* session;  // retained
  ProtobufCMessage* msg;      // owned; relayed as it is
  cw_ctl_multi_t* multi;      // DELETE spanning workers; NULL otherwise
  uint32_t worker;
  int64_t received_ns;  // CLOCK_MONOTONIC at receipt (launch latency)
  uint64_t stamp;             // LAUNCH: the island's stamp once relayed (cw_ctl_sched.c)
};

// A DELETE split over several workers, or a LAUNCH over the workers of one
// island: one reply when all are done.
struct cw_ctl_multi_s {
  uint16_t type;
  int left;
  cw_status_t first_error;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  uint64_t first_id;
};

// An OPEN_SESSION waiting for enough workers.
typedef struct cw_ctl_open_wait_s {
  struct cw_ctl_open_wait_s* next;
  cw_ctl_peer_t* peer;
  cw_net_conn_t* conn;  // retained
  uint64_t request_id;
  uint32_t min_workers;
  int64_t deadline_ms;
  Causeway__V1__OpenSessionRequest* req;  // owned copy: the allocation asked for
} cw_ctl_open_wait_t;

typedef struct cw_ctl_alloc_wait_s cw_ctl_alloc_wait_t;

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
  struct cw_ctl_inflight_s* next;
  cw_controller_t* ctl;
  uint8_t* key;
  size_t key_size;
  uint32_t worker;
  uint64_t private_exe_id;
  cw_ctl_compile_t* waiters;
  // Kept while the disk cache is looked at (cw_ctl_disk.c): what COMPILE
  // sends to the worker on a miss. NULL otherwise.
  uint8_t* code;
  size_t code_size;
  char* format;
  uint8_t* options;
  size_t options_size;
} cw_ctl_inflight_t;

typedef struct cw_ctl_disk_s cw_ctl_disk_t;

struct cw_controller_s {
  const cw_settings_t* settings;
  uv_loop_t loop;
  bool loop_initialized;
  cw_net_t net;
  bool net_initialized;
  uv_signal_t sigterm, sigint;
  uv_timer_t open_tick;
  cw_net_watch_t watch;
  bool handles_open;
  bool shutting_down;
  const char* token;
  char name[64];
  cw_compile_cache_t* cache;
  cw_ctl_worker_t** workers;
  size_t num_workers;
  int32_t next_device;
  cw_ctl_peer_t* peers;
  cw_ctl_session_t* sessions;
  cw_ctl_open_wait_t* open_waits;
  cw_ctl_inflight_t* inflight;
  uint64_t next_private_exe_id;
  uint64_t next_exe_serial;
  // Counters for STATS.
  uint64_t compiles, cache_hits, cache_misses, launches_relayed, errors;
  uint64_t compiles_sent;  // COMPILE requests sent to workers
  cw_ctl_disk_t* disk;     // compile cache on disk; NULL when off
  struct cw_ctl_metrics_s* metrics;  // --metrics-listen (cw_ctl_metrics.c); NULL: off
  // Health (cw_ctl_health.c).
  uv_timer_t health_tick;
  int64_t health_last_tick_ms;
  uint64_t heartbeats, workers_timed_out, workers_replaced, exes_reloaded;
  struct cw_ctl_ops_s* ops;  // operations (cw_ctl_ops.c): STATS polling, recent errors
  // Allocation: OPEN_SESSIONs waiting for devices, FIFO (cw_ctl_alloc.c).
  cw_ctl_alloc_wait_t* alloc_queue;
  cw_ctl_alloc_wait_t* alloc_queue_tail;
  // Gang order: the record of stamps assigned, all islands (cw_ctl_sched.c).
  cw_ctl_stamp_ring_t* stamp_ring;
};

// --- cw_controller.c, used by the modules below --------------------------------------

// Finishes an in-flight compilation: its waiters load `entry` or fail with
// `st` (taken); frees `f`.
void cw__inflight_finish(cw_ctl_inflight_t* f, cw_compile_cache_entry_t* entry, cw_status_t st);
// Sends the in-flight compilation's COMPILE to its worker (reopening the
// private link if needed); finishes `f` with UNAVAILABLE if it cannot.
void cw__inflight_send_compile(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                               size_t code_size, const uint8_t* options, size_t options_size);

// --- cw_ctl_disk.c: the compile cache on disk (docs/operations.md) -------------------

// Opens the cache in --compile-cache-dir (off when empty): creates the
// directory, trims it to --compile-cache-disk-bytes.
CW_MUST_USE cw_status_t cw_ctl_disk_create(cw_controller_t* ctl);
void cw_ctl_disk_release(cw_controller_t* ctl);
// After a memory miss: looks for f's key on disk off the loop thread (the
// thread pool). Returns false when the disk cache is off (the caller sends
// COMPILE); true when the lookup runs: a hit then finishes `f` with the
// entry, a miss sends COMPILE with copies of the request's parts.
bool cw_ctl_disk_lookup(cw_controller_t* ctl, cw_ctl_inflight_t* f, const char* format,
                        const uint8_t* code, size_t code_size, const uint8_t* options,
                        size_t options_size);
// Stores a freshly compiled entry (retained until written) off the loop thread.
void cw_ctl_disk_store(cw_controller_t* ctl, const uint8_t* key, size_t key_size,
                       cw_compile_cache_entry_t* entry);
// Fills the disk fields of a STATS reply.
void cw_ctl_disk_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st);

// cw_controller.c, shared with its modules.
cw_net_conn_t* cw__link_open(cw_controller_t* ctl, cw_ctl_worker_t* w, uint64_t session_id);
// The controller's own connection to `w` (compiles, STATS polls, ADMIN_*),
// reopened when it was lost; NULL when it cannot be opened.
cw_net_conn_t* cw__private_link(cw_controller_t* ctl, cw_ctl_worker_t* w);

// --- Metrics (cw_ctl_metrics.c): Prometheus text over HTTP ------------------------------
// Starts the HTTP listener and the worker STATS poll when --metrics-listen is set.
CW_MUST_USE cw_status_t cw_ctl_metrics_start(cw_controller_t* ctl);
// Closes the listener, the poll timer and every HTTP connection (loop runs on).
void cw_ctl_metrics_stop(cw_controller_t* ctl);
// Frees what is left once the loop has closed its handles.
void cw_ctl_metrics_release(cw_controller_t* ctl);
// A launch reply (or error) from the island's worker for a relayed item.
void cw_ctl_metrics_on_launch_reply(cw_controller_t* ctl, const cw_ctl_item_t* it);
// A client compile answered; cache_hit says whether it compiled nothing.
void cw_ctl_metrics_on_compile(cw_controller_t* ctl, int64_t elapsed_ms, bool cache_hit);

// --- cw_controller.c functions the modules use ----------------------------------

void cw__reply_error(cw_controller_t* ctl, cw_net_conn_t* c, uint16_t type, uint64_t rid,
                     cw_status_t st);
void cw__broadcast_event(cw_controller_t* ctl, Causeway__V1__ClusterEvent* ev);
void cw__worker_lost(cw_ctl_worker_t* w, const char* why);
cw_net_conn_t* cw__session_link(cw_ctl_session_t* s, uint32_t index);
void cw__session_retain(cw_ctl_session_t* s);
void cw__session_release(cw_ctl_session_t* s);
cw_ctl_exe_t* cw__exe_find(cw_ctl_session_t* s, uint64_t id);
void cw__island_pump(cw_controller_t* ctl, uint32_t worker);
void cw__open_waits_check(cw_controller_t* ctl, bool expire);

// --- Health: heartbeats, worker loss and replacement (cw_ctl_health.c) ----------

// The heartbeat check timer (every min(worker-timeout-ms / 4, 250) ms).
void cw_ctl_health_start(cw_controller_t* ctl);
void cw_ctl_health_stop(cw_controller_t* ctl);
// HEALTH_HEARTBEAT from a worker's controller connection.
void cw_ctl_health_heartbeat(cw_ctl_peer_t* p);
// HEALTH_REJOIN from a client.
void cw_ctl_health_rejoin(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                          const Causeway__V1__HealthRejoinRequest* r);
// Which slot a REGISTER takes: *out_slot = a dead worker's slot it replaces
// (same name, device count and platform), or NULL for a new slot. Refuses a
// name a live worker holds.
CW_MUST_USE cw_status_t cw_ctl_health_slot_for(cw_controller_t* ctl,
                                               const Causeway__V1__RegisterRequest* r,
                                               cw_ctl_worker_t** out_slot);
// The new slot `w` of peer `p` is registered (borrows nothing).
void cw_ctl_health_registered(cw_ctl_peer_t* p, cw_ctl_worker_t* w);
// `p` takes over dead slot `w` with `r` (taken): answers the REGISTER,
// announces WORKER_UP and re-LOADs the sessions' executables there.
void cw_ctl_health_take_over(cw_ctl_peer_t* p, const cw_frame_header_t* h, cw_ctl_worker_t* w,
                             Causeway__V1__RegisterRequest* r);
// `w` was just marked dead: closes its REGISTER connection if still open
// (a silent worker) and detaches it, so a late close cannot touch the slot.
void cw_ctl_health_worker_lost(cw_ctl_worker_t* w);
// UNAVAILABLE when the item's session has not rejoined the worker's current
// incarnation (requests a client sent before it saw WORKER_UP); else OK.
CW_MUST_USE cw_status_t cw_ctl_health_item_check(cw_controller_t* ctl, const cw_ctl_item_t* it);
// A session that is told about the workers now has joined their incarnations.
void cw_ctl_health_session_joined(cw_ctl_session_t* s);
// Keeps what a re-LOAD needs (retains `entry`, copies `options`).
void cw_ctl_health_exe_keep(cw_ctl_exe_t* e, cw_compile_cache_entry_t* entry,
                            const uint8_t* options, size_t options_size);
void cw_ctl_health_exe_free(cw_ctl_exe_t* e);
void cw_ctl_health_session_free(cw_ctl_session_t* s);
void cw_ctl_health_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st);

// --- cw_controller.c functions used by the other modules ---
void cw__link_drop(cw_net_conn_t** link);
void cw__ignore_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                      const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len);

// --- Operations (cw_ctl_ops.c): `causeway status | pause | resume | drain` ---
cw_status_t cw_ctl_ops_create(cw_controller_t* ctl);
void cw_ctl_ops_stop(cw_controller_t* ctl);  // closes its timer (the loop runs after)
void cw_ctl_ops_release(cw_controller_t* ctl);
// ADMIN_* requests from a client connection. Takes `msg`.
void cw_ctl_ops_handle(cw_ctl_peer_t* p, const cw_frame_header_t* h, ProtobufCMessage* msg);
// Remembers an error answered to a peer (the recent-errors ring). Borrows st.
void cw_ctl_ops_record_error(cw_controller_t* ctl, const char* where, uint16_t type,
                             cw_status_t st);
// OPEN_SESSION: the name the client gave; the devices it was given.
void cw_ctl_ops_session_opened(cw_ctl_session_t* s, const Causeway__V1__OpenSessionRequest* r);
void cw_ctl_ops_session_devices(cw_ctl_session_t* s, const Causeway__V1__GlobalDevice* devs,
                                size_t n);
const char* cw_ctl_ops_session_name(const cw_ctl_session_t* s);
// The worker's last STATS from the once-a-second poll (scalar fields only;
// NULL before the first answer) and its age in seconds. Metrics read it too.
const Causeway__V1__Stats* cw_ctl_ops_worker_stats(const cw_ctl_worker_t* w, double* out_age_s);
void cw_ctl_ops_session_free(cw_ctl_session_t* s);
void cw_ctl_ops_worker_free(cw_ctl_worker_t* w);
// A new connection of session s to worker `index`: a paused session holds there too.
void cw_ctl_ops_link_opened(cw_ctl_session_t* s, uint32_t index, cw_net_conn_t* link);
// False while the worker drains: it gets no new sessions or compiles.
bool cw_ctl_ops_worker_takes_work(const cw_ctl_worker_t* w);
// cw_ctl_launch.c: whether `s` may send LAUNCH straight to worker
// `worker_index` (WorkerInfo.direct_launch) rather than through the controller.
bool cw__session_direct_launch(cw_controller_t* ctl, cw_ctl_session_t* s,
                               uint32_t worker_index);

// --- cw_controller.c, used by the modules ---------------------------------------
void cw__reply_session_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint64_t request_id);
void cw__open_tick(uv_timer_t* t);
// A queue item for `s`'s request (retains client and session; takes msg,
// freed also when this fails and returns NULL).
cw_ctl_item_t* cw__item_new(uint16_t type, cw_net_conn_t* client, uint64_t request_id,
                            cw_ctl_session_t* s, ProtobufCMessage* msg, uint32_t worker);
void cw__item_free(cw_ctl_item_t* it);
void cw__item_fail(cw_controller_t* ctl, cw_ctl_item_t* it, cw_status_t st);
void cw__exe_forget(cw_ctl_session_t* s, uint64_t id);
uint64_t cw__item_exe_id(const cw_ctl_item_t* it);
void cw__relay_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                     const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len);

// --- cw_ctl_sched.c: island queues and gang order ----------------------------------
// A replacement took worker slot `w`: its island's stamps start again at 1.
void cw_ctl_sched_reset(cw_ctl_worker_t* w);
// Queues a request that names an executable on its island (it->worker) and
// relays what can go.
void cw_ctl_sched_push(cw_controller_t* ctl, cw_ctl_item_t* it);
// Relays what can go on island `index`: after a load, a reply, a worker loss.
void cw_ctl_sched_pump(cw_controller_t* ctl, uint32_t index);
// A relayed item is answered: true when it was a stamped launch (the island
// has room again; pump it once the reply is handled).
bool cw_ctl_sched_done(cw_controller_t* ctl, const cw_ctl_item_t* it);
// A stamped launch of island `island` that the scheduler did not relay as an
// item (an island's parts, cw_ctl_island.c) is over: room for the next one.
void cw_ctl_sched_release(cw_controller_t* ctl, uint32_t island);
// Points st->sched_stamps at the record of stamps assigned; returns what the
// caller frees after replying (NULL: nothing).
void* cw_ctl_sched_stats(cw_controller_t* ctl, Causeway__V1__Stats* st);
void cw_ctl_sched_free(cw_controller_t* ctl);

// --- cw_ctl_island.c: islands that span several workers -------------------------
// REGISTER's island fields: a clear error when they do not fit the members
// already registered. `replacing`: the slot a same-name worker takes over
// (a member of an island of several workers only once all of them died).
CW_MUST_USE cw_status_t cw_ctl_island_check(cw_controller_t* ctl,
                                            const Causeway__V1__RegisterRequest* r,
                                            const cw_ctl_worker_t* replacing);
// Sets the new slot w's island from its REGISTER.
void cw_ctl_island_join(cw_controller_t* ctl, cw_ctl_worker_t* w,
                        const Causeway__V1__RegisterRequest* r);
// A replacement took slot `w` (cw_ctl_health_take_over): when w is a member
// of an island of several workers (all of which had died), the island's
// stamps count from 1 again and its programs fail until compiled again.
void cw_ctl_island_restarted(cw_controller_t* ctl, cw_ctl_worker_t* w);
// Whether w belongs to an island of several workers.
bool cw_ctl_island_spans(const cw_ctl_worker_t* w);
// The registered members of island `island` in rank order, into out[max];
// returns how many.
size_t cw_ctl_island_members(cw_controller_t* ctl, uint32_t island, uint32_t* out, size_t max);
// COMPILE placement found devices on several workers. *out_one: whether they
// all belong to one island of several workers; then checks that the program
// can run there (every member, each one's devices together, in rank order)
// and fills parts/part_devices (malloc'd).
CW_MUST_USE cw_status_t cw_ctl_island_place(cw_controller_t* ctl, cw_ctl_session_t* s,
                                            const int64_t* assigned, size_t n, bool* out_one,
                                            uint32_t** out_parts, uint32_t** out_part_devices,
                                            size_t* out_num_parts);
// Starts the parts of an island compile: one child of `cp` per part (cp is
// taken). start(child) runs each through the usual compile path.
void cw_ctl_island_compile(cw_ctl_compile_t* cp, uint32_t* parts, uint32_t* part_devices,
                           size_t num_parts, void (*start)(cw_ctl_compile_t*, void*),
                           void* user);
// A part's compile ended: with an error (st, taken) or loaded (info
// borrowed). Returns true when `cp` was a part (the island's reply is sent
// once every part ended); false: the caller answers as for one worker.
bool cw_ctl_island_compile_done(cw_ctl_compile_t* cp, cw_status_t* st,
                                const Causeway__V1__ExecutableInfo* info);
// Relays a stamped LAUNCH of an island executable to every part, all with
// the stamp `stamp`, in two phases (prepare, then go or cancel; takes `it`).
// Returns 1 when the launch went out (one outstanding stamped launch until
// cw_ctl_sched_release), 0 when it was answered at once (no stamp taken).
uint32_t cw_ctl_island_relay_launch(cw_controller_t* ctl, cw_ctl_item_t* it, cw_ctl_exe_t* e,
                                uint64_t stamp);
// Relays an item of an island (DELETE) to every member (takes `it`).
void cw_ctl_island_relay_all(cw_controller_t* ctl, cw_ctl_item_t* it, uint32_t island);
void cw__multi_done(cw_ctl_multi_t* m, cw_controller_t* ctl, cw_status_t st);
// Answers a client COMPILE with `info` (its exe_id and cache_hit filled
// here), marks `e` (may be NULL) ready, counts it; `where` is for the log.
void cw__compile_answer(cw_controller_t* ctl, cw_net_conn_t* client, uint64_t request_id,
                        cw_ctl_exe_t* e, Causeway__V1__ExecutableInfo* info, uint32_t num_outputs,
                        uint32_t num_devices, const char* name, bool cache_hit, int64_t start_ms,
                        const char* where);
bool cw__printable(const char* s, size_t max);
// An error that arrived on (or because of) a connection to `w`: when that
// connection is gone, says which worker is unavailable. Takes `st`.
cw_status_t cw__worker_error(cw_ctl_worker_t* w, cw_net_conn_t* conn, cw_status_t st);

// --- cw_ctl_alloc.c: sessions' devices ------------------------------------------
// OPEN_SESSION once enough workers registered: a session without num_devices
// is answered at once; otherwise the allocator grants, queues (telling the
// client why) or refuses it.
void cw_ctl_alloc_open(cw_controller_t* ctl, cw_ctl_peer_t* p, uint64_t request_id,
                       const Causeway__V1__OpenSessionRequest* r);
// The queue: grants what fits now in FIFO order, drops waits whose client is
// gone, and (expire) fails those past their timeout.
void cw_ctl_alloc_check(cw_controller_t* ctl, bool expire);
// Fills SessionInfo for an allocated session; false when `p`'s session is
// not allocated (the caller lists every device).
bool cw_ctl_alloc_reply_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint64_t request_id);
void cw_ctl_alloc_session_free(cw_ctl_session_t* s);
// A session's device id: its worker (NULL: no such device) and local id.
cw_ctl_worker_t* cw_ctl_alloc_resolve(cw_controller_t* ctl, cw_ctl_session_t* s, int64_t id,
                                      uint32_t* out_local);
// How many device ids the session has (ids are 0..n-1).
int64_t cw_ctl_alloc_num_ids(cw_controller_t* ctl, cw_ctl_session_t* s);
// The session's id of `worker`'s device `local` (-1: not the session's).
int32_t cw_ctl_alloc_session_id(cw_controller_t* ctl, cw_ctl_session_t* s, uint32_t worker,
                                uint32_t local);
// True when the session's devices on that worker are its alone (allocated,
// not shared): the lead's "shared => through the scheduler" test.
bool cw_ctl_alloc_exclusive_on(cw_controller_t* ctl, cw_ctl_session_t* s, uint32_t worker_index);
size_t cw_ctl_alloc_queue_length(const cw_controller_t* ctl);
// A deep copy (packed and unpacked) the caller frees with
// protobuf_c_message_free_unpacked; NULL when out of memory.
ProtobufCMessage* cw_ctl_msg_copy(const ProtobufCMessage* m);
// SessionInfo's platform from a worker's inventory; a worker's WorkerInfo
// as session `s` sees it (incarnation, direct-launch lease).
void cw_ctl_info_platform(Causeway__V1__SessionInfo* info, const Causeway__V1__Inventory* inv);
void cw_ctl_worker_info_fill(Causeway__V1__WorkerInfo* wi, const cw_ctl_worker_t* w,
                             cw_ctl_session_t* s);

#endif  // CW_CTL_INTERNAL_H_
