// Internal to causeway-worker: the state every request family shares -- the
// worker, its sessions and the worker side of each connection. Each family
// (cw_worker_<family>.c) keeps its own state private and declares its few
// entry points in its own header; this one holds only what all of them read.
#ifndef CW_WORKER_INTERNAL_H_
#define CW_WORKER_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cw_frame.h"
#include "cw_net.h"
#include "cw_net_creds.h"
#include "cw_pjrt.h"
#include "cw_settings.h"
#include "cw_staging.h"
#include "cw_store.h"
#include "cw_worker.h"
#include "cw_worker_seq.h"
#include "cw_worker_spin.h"

typedef struct cw_conn_s cw_conn_t;
typedef struct cw_op_s cw_op_t;          // cw_worker_op.h
typedef struct cw_launch_s cw_launch_t;  // cw_worker_launch.c
typedef struct cw_completion_s cw_completion_t;  // cw_worker.c
typedef struct cw_worker_link_s cw_worker_link_t;  // cw_worker_link.c
typedef struct cw_stamp_state_s cw_stamp_state_t;  // cw_worker_sched.c
typedef struct cw_pin_s cw_pin_t;  // cw_worker_pin.c
typedef struct cw_peer_stat_s cw_peer_stat_t;  // cw_worker_conn.c
struct cw_wtrace_s;  // cw_worker_trace.c

typedef struct cw_session_s {
  struct cw_session_s* next;
  uint64_t id;   // the wire id
  uint64_t key;  // store key, unique per incarnation (never reused)
  int connections;  // client connections that keep it alive
  int clients;      // of which a client's (not a controller's session link)
  cw_seq_t seq;     // ordering across its connections (cw_worker_seq.h)
  struct cw_wtrace_s* trace;  // recorded events once the client asked; NULL: none
  bool paused;      // `causeway pause`: its launches wait in their queues
} cw_session_t;

// The worker side of a connection: the user data of its cw_net connection,
// alive exactly as long as that connection (freed by its on_free); whoever
// keeps a pointer past a callback holds a reference (cw_worker_conn_ref).
struct cw_conn_s {
  cw_conn_t* prev;  // w->conns while open
  cw_conn_t* next;
  cw_worker_t* w;
  cw_net_conn_t* nc;
  bool closing;
  bool outbound;
  // Accepted on a Unix socket from a process of this user: that process
  // (SO_PEERCRED) and a pidfd that tells when it is gone; else 0 and -1
  // (cw_worker_direct.h).
  int peer_pid;
  int peer_pidfd;
  cw_session_t* session;  // keeps it alive when keeps_session
  bool keeps_session;
  bool client_role;  // HELLO said ROLE_CLIENT (counted in session->clients)
  // Per-peer byte counts (STATS): the peer's slot, and bytes moved before
  // its HELLO named it.
  size_t peer_stat;
  uint64_t uncounted_in, uncounted_out;
  cw_op_t* recv;  // the UPLOAD/PUT/LOAD whose bulk bytes are arriving
  // The UPLOAD/PUT whose bytes are not read until memory for them frees
  // (cw_worker_mem.h): reading stops while it is set.
  cw_op_t* mem_recv;
  // Launches of this connection, issued in arrival order (cw_worker_launch.c).
  cw_launch_t* launch_head;
  cw_launch_t* launch_tail;
  // The last of the queue's leading parts that are prepared, held for their
  // go (NULL: none known): preparing ahead looks only behind it.
  cw_launch_t* launch_prepared;
  bool launch_waiting;
  bool go_waiting;  // the head is a part at its turn, waiting for LAUNCH_GO
  cw_conn_t* throttle_next;    // on the launch module's throttled list
  cw_conn_t* stamp_wait_next;  // gang order: on the list of turns waited for
  // Outbound: the peer's address (SEND's PUT links), or this worker's link
  // to its controller.
  char* peer_address;
  bool is_controller;
  // seq: the held request whose bulk bytes are arriving; the held request
  // being applied now; how many of this connection's requests are held (and
  // their bulk bytes), and whether reading stopped for flow control
  // (cw_worker_conn.c).
  cw_seq_held_t* recv_held;
  cw_seq_held_t* seq_applying;
  size_t seq_held;
  uint64_t seq_held_bytes;
  bool seq_blocked;
  uint64_t seq_drain_key;  // a request applied now whose successors may follow
  // Uploads in parts begun here and not yet whole: they fail when this
  // connection closes, since no later part can come (cw_worker_transfer.c).
  struct cw__parts_s* uploads_in_parts;
};

struct cw_worker_s {
  const cw_settings_t* settings;
  uv_loop_t loop;
  bool loop_initialized;
  cw_net_t net;
  bool net_initialized;
  uv_async_t async;
  // The thread running the loop (set once it runs): a PJRT completion that
  // fires inline there needs no uv_async_send wakeup.
  pthread_t loop_thread;
  bool loop_thread_known;
  bool inline_completions;  // completions queued from the loop thread itself
  uv_signal_t sigterm, sigint;
  cw_net_creds_t creds;  // the token and TLS files, read again on SIGHUP
  uv_timer_t shutdown_timer;
  // Polling after launches (cw_worker_spin.h): while spin_idle is active the
  // loop does not sleep.
  uv_idle_t spin_idle;
  cw_spin_t spin;
  bool handles_open;
  bool shutting_down;
  bool leak_on_exit;
  bool zero_copy_reported;
  bool direct_refusal_logged;  // a same-host copy was refused once (logged once)
  cw_net_watch_t watch;  // --watch-fd
  const char* name;
  const char* token;
  cw_pjrt_t* pjrt;
  struct cw_handler_sets_s* handlers;  // custom-call handlers (cw_handler_set.h)
  cw_store_t* store;
  cw_staging_t* staging;  // bulk staging blocks, reused (staging-cache-bytes)
  Causeway__V1__Inventory inventory;
  bool inventory_ready;
  char host_cpu[128];  // Inventory.host_cpu: --host-cpu, else cw_host_cpu_identity
  cw_conn_t* conns;  // open ones, inbound and outbound
  cw_session_t* sessions;
  uint64_t next_session_key;
  // next_session_key when REGISTER was last sent: lives of sessions with a
  // lower key predate it (a HELLO with fresh_session drops such a life).
  uint64_t registered_session_key;
  // Random per process: HelloReply.session_key is a session's key xor this,
  // so a restarted worker's sessions never match the ones before.
  uint64_t session_key_salt;
  cw_peer_stat_t* peer_stats;  // cw_worker_conn.c
  size_t num_peer_stats;
  // Completions from plugin threads (cw_worker.c).
  pthread_mutex_t mu;
  cw_completion_t* completions;  // LIFO under mu
  size_t outstanding;  // completions and threadpool jobs not yet applied
  // Counters for STATS.
  uint64_t launches, uploads, downloads, errors;
  uint64_t upload_bytes, download_bytes, send_bytes, put_bytes, sends, puts;
  size_t traced_sessions;  // sessions with a trace (0: recording costs nothing)
  // Launches handed to PJRT, not yet complete, and the connections (FIFO,
  // referenced) whose next launch waits for room (cw_worker_launch.c).
  size_t launches_in_flight;
  // Their device events not fired yet (fired on any thread; one that fired
  // inline waits only for the loop to apply it): what decides whether
  // Execute may run on the loop (cw_worker_launch.c).
  _Atomic size_t launch_events_running;
  size_t hostcb_launches;  // launches that may call back, issued and not ended
  // One thread that calls Execute where the call may block (cw_worker_launch.c),
  // and the launches handed to it whose Execute has not returned to the loop.
  struct cw_pool_s* dispatch;
  size_t dispatching;
  uint64_t launches_dispatched;  // since start (Stats.launches_dispatched)
  // Parts of islands' launches queued, and those prepared that donate
  // inputs (cw_worker_launch.c: parts are prepared ahead only while none do).
  size_t parts_queued, parts_donating;
  // Launches queued on every connection, closed ones included (theirs still
  // run): what STATS and a drain's idle read.
  size_t launches_queued;
  cw_conn_t* launch_throttled;
  cw_conn_t* launch_throttled_tail;
  cw_pin_t* pins;  // buffers whose device memory a write reads in place
  cw_worker_link_t* link;  // the controller link (cw_worker_link.c); NULL: none
  struct cw_http_server_s* http;  // health probes (cw_worker_http.c); NULL: none
  // Operations (cw_worker_ops.c): `causeway drain`, and ops alive (for idle).
  bool draining;
  size_t ops_live;
  cw_stamp_state_t* stamps;  // gang order (cw_worker_sched.c)
  struct cw_worker_mem_s* mem;  // memory budget and its waiters (cw_worker_mem.c)
  struct cw_worker_hostcb_s* hostcb;  // host callbacks (cw_worker_hostcb.c)
  bool posts_closed;  // under mu: the loop takes no more cw_worker_post
};

// A PJRT event's completion, applied on the loop thread (cw_worker.c).
// Takes `status`.
typedef void (*cw_done_fn)(cw_worker_t* w, void* user, cw_status_t status);
// Runs fn(w, user, status) on the loop thread once `event` is ready; takes
// `event` (destroyed after fn ran; NULL: ready now).
void cw_worker_when_ready(cw_worker_t* w, PJRT_Event* event, cw_done_fn fn, void* user);
// The same, counting the event in *running until it fires (not until fn runs).
void cw_worker_when_ready_counted(cw_worker_t* w, PJRT_Event* event, _Atomic size_t* running,
                                  cw_done_fn fn, void* user);
// Any thread: runs fn(w, user, OK) on the loop thread soon. False (and fn
// never runs) once the loop is closing.
CW_MUST_USE bool cw_worker_post(cw_worker_t* w, cw_done_fn fn, void* user);
// A threadpool job was queued / applied (shutdown waits for none left).
void cw_worker_job_started(cw_worker_t* w);
void cw_worker_job_done(cw_worker_t* w);
// A request arrived (loop thread): the loop may poll for the next one before
// it sleeps (cw_worker_spin.h).
void cw_worker_spin_after_request(cw_worker_t* w);

#endif  // CW_WORKER_INTERNAL_H_
