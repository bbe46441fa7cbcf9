// Internal to the controller: the state every request family shares -- the
// controller, its workers, sessions, executables and peers. Each family
// (cw_ctl_<family>.c) declares its entry points in its own header.
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
#include "cw_net_creds.h"
#include "cw_settings.h"

#define CW__OPEN_TICK_MS 50
#define CW__MAX_WAIT_MS (10 * 60 * 1000)
#define CW__MAX_NAME 128
#define CW__MAX_ADDRESS 200
#define CW__MAX_WORKERS 4096

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
  char lost_why[256];  // why it was last lost: later refusals say it too
  int32_t first_device;
  uint32_t num_devices;
  Causeway__V1__RegisterRequest* reg;  // owned: the worker's inventory
  cw_net_conn_t* private_conn;         // retained: the controller's compile session
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
  // Compiles (cw_ctl_compile.c): COMPILEs sent on the private link and not
  // answered, and those waiting for one of those places, oldest first.
  uint32_t compiles_out;
  struct cw_ctl_inflight_s* compile_queue;
  struct cw_ctl_inflight_s* compile_queue_tail;
  bool compile_pumping;
  bool compile_prune_pending;  // a session closed during the pump
  // Its REGISTER once listed more sessions than it could (more_sessions):
  // the hold waited for those once, not again (cw_ctl_resume.c).
  bool resume_cut_waited;
  // REGISTERs refused for its name (a worker that came back after its
  // replacement retries for ever): logged once a minute with a count.
  cw_net_warn_limit_t warn_refused;
} cw_ctl_worker_t;

typedef enum cw_ctl_exe_state_e {
  CW__EXE_LOADING = 0,
  CW__EXE_READY,
  CW__EXE_FAILED,
} cw_ctl_exe_state_t;

// An executable of a session: where it lives and whether it is loaded.
typedef struct cw_ctl_exe_s {
  struct cw_ctl_exe_s* next;   // the session's list, newest first
  struct cw_ctl_exe_s* prev;
  struct cw_ctl_exe_s* hnext;  // its bucket of the session's index by id
  uint64_t id;
  uint64_t serial;  // distinguishes a re-created id from a stale one
  uint32_t worker;
  cw_ctl_exe_state_t state;
  cw_status_t error;  // FAILED
  // Kept while the session holds it, to LOAD it into a replacement worker.
  cw_compile_cache_entry_t* entry;  // retained (sticky past cache eviction)
  uint8_t* options;                 // rewritten compile options (owned)
  size_t options_size;
  // FAILED on a replacement that cannot LOAD `entry` (none: resumed after a
  // controller restart; or compiled for another CPU): a rejoining client
  // sends its program again (COMPILE under the same id). Cleared when that
  // compile is answered, not when it LOADs: a LOAD that fails keeps it.
  bool program_wanted;
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
  cw_ctl_exe_t** exe_buckets;  // by id (cw_ctl_exe_find), a power of two of them
  size_t num_exe_buckets, num_exes;
  int compiling;  // its COMPILE records alive (cw_ctl_compile.c)
  uint64_t launches;  // relayed (metrics)
  // Health: the worker incarnation this session's client has rejoined, per
  // worker index (absent: 0, the first).
  uint32_t* joined;
  size_t num_joined;
  // HEALTH_REJOINs waiting for their EXE_INFOs, one per worker at most.
  struct cw_ctl_rejoin_s* rejoins;
  struct cw_ctl_session_ops_s* ops;  // operations (cw_ctl_ops.c): name, devices, paused
  // Allocation (cw_ctl_alloc.c). Not allocated: every device, by global id,
  // nothing reserved (OPEN_SESSION without num_devices).
  bool allocated;
  // Resumed after a controller restart without an allocation (cw_ctl_resume.c):
  // vdevs maps the ids the client numbered with the earlier controller, and
  // nothing is reserved. Holes (worker UINT32_MAX) are ids it did not have.
  bool mapped;
  bool share;
  uint32_t weight;            // gang order: share of shared islands (>= 1)
  // A sharer of another weight came to a one-worker island it shares: its
  // direct-launch lease on shared devices is withdrawn for good (LEASE_CHANGED).
  bool relay_shared;
  cw_alloc_device_t* vdevs;   // [num_vdevs]: session device id -> worker index, local id
  uint32_t num_vdevs;
};

struct cw_ctl_peer_s {
  cw_ctl_peer_t* next;
  cw_controller_t* ctl;
  cw_net_conn_t* conn;  // retained
  cw_ctl_session_t* session;  // clients: retained
  cw_ctl_worker_t* worker;    // a registered worker's connection
};

typedef struct cw_ctl_alloc_wait_s cw_ctl_alloc_wait_t;
typedef struct cw_ctl_resume_wait_s cw_ctl_resume_wait_t;
typedef struct cw_ctl_open_wait_s cw_ctl_open_wait_t;
typedef struct cw_ctl_inflight_s cw_ctl_inflight_t;

typedef struct cw_ctl_disk_s cw_ctl_disk_t;

struct cw_controller_s {
  const cw_settings_t* settings;
  uv_loop_t loop;
  bool loop_initialized;
  cw_net_t net;
  bool net_initialized;
  uv_signal_t sigterm, sigint;
  cw_net_creds_t creds;  // the token and TLS files, read again on SIGHUP
  uv_timer_t open_tick;
  cw_net_watch_t watch;
  bool handles_open;
  bool shutting_down;
  const char* token;
  char name[64];
  cw_net_warn_limit_t warn_link;  // "cannot connect to worker" (each link retries)
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
  uint64_t compiles_dropped;  // queued ones dropped unsent (cw_ctl_compile.c)
  uint64_t compiles_queued;   // waiting at the controller, all workers
  uint32_t worker_compiles;   // CAUSEWAY_WORKER_COMPILES: sent to a worker at once
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
  // SESSION_RESUMEs waiting for their workers to register (cw_ctl_resume.c).
  cw_ctl_resume_wait_t* resume_waits;
  // Sessions of an earlier controller that workers report and that have not
  // resumed yet: new sessions' devices wait for them (cw_ctl_resume.c).
  struct cw_ctl_expect_s* expect;
  // Sessions once expected (resumed, or given up at the hold's end): a later
  // REGISTER that reports them again (a stall, a client that never resumes)
  // holds nothing up. Sorted, at most CW__MAX_EXPECT_PAST.
  uint64_t* expect_past;
  size_t num_expect_past;
  // Gang order: the record of stamps assigned, all islands (cw_ctl_sched.c).
  cw_ctl_stamp_ring_t* stamp_ring;
};

// Answers `c`'s request with an error (takes st), counted and remembered
// for `causeway status` (cw_controller.c).
void cw_ctl_reply_error(cw_controller_t* ctl, cw_net_conn_t* c, uint16_t type, uint64_t rid,
                        cw_status_t st);

#endif  // CW_CTL_INTERNAL_H_
