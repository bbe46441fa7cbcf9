// The client's side of each worker of its session (cw_plugin_worker.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_msg.h"
#include "cw_plugin_event.h"
#include "cw_plugin_fill.h"
#include "cw_plugin_health.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_resume.h"
#include "cw_plugin_worker.h"
#include "cw_recycle.h"

// Most ids one batched DELETE carries.
#define CW__DELETE_BATCH 256
// A LAUNCH takes the pending DELETEs along only once this many wait: a chain
// drops a buffer per launch, and a DELETE per launch cost the client and the
// worker as much as the launch itself (docs/performance.md).
#define CW__DELETE_LAUNCH_BATCH 64
// ... or once the buffers they drop hold this much on the worker (memory
// another session may be waiting for).
#define CW__DELETE_BATCH_BYTES ((uint64_t)1 << 20)
// While only our link to the worker is lost the ids wait for the reattach
// (cw_plugin_health.c), past a batch: this many at most (a DELETE of them
// stays well under a frame's payload limit); later ones are dropped.
#define CW__DELETE_HELD_MAX 65536

// Next per-session seq for requests to `w` (the first request gets 1).
static uint64_t cw__worker_next_seq(cw_plugin_worker_t* w) {
  return atomic_fetch_add_explicit(&w->seq, 1, memory_order_relaxed) + 1;
}

cw_status_t cw_plugin_worker_initialize(cw_plugin_worker_t* w, cw_plugin_client_t* c,
                                        const Causeway__V1__WorkerInfo* wi) {
  w->client = c;
  w->index = wi->index;
  w->island = wi->island;
  atomic_store_explicit(&w->direct_launch,
                        wi->direct_launch && !atomic_load(&c->leases_withdrawn),
                        memory_order_relaxed);
  pthread_mutex_init(&w->mu, NULL);
  pthread_mutex_init(&w->send_mu, NULL);
  pthread_mutex_init(&w->relayed_mu, NULL);
  atomic_init(&w->seq, 0);
  atomic_init(&w->dead, false);
  w->name = strdup(wi->name && wi->name[0] ? wi->name : "?");
  atomic_init(&w->address, strdup(wi->address ? wi->address : ""));
  w->incarnation = wi->incarnation;
  atomic_init(&w->epoch, 0);
  if (!w->name || !cw_plugin_worker_address(w)) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  return cw_ok_status();
}

void cw_plugin_worker_deinitialize(cw_plugin_worker_t* w) {
  free(w->name);
  free(atomic_load_explicit(&w->address, memory_order_relaxed));
  free(w->dead_reason);
  free(w->deferred_error);
  free(w->pending_deletes);  // the session's end frees them on the worker
  cw_plugin_health_worker_deinitialize(w);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->send_mu);
  free(w->relayed_seqs);
  pthread_mutex_destroy(&w->relayed_mu);
}

cw_plugin_worker_t* cw_plugin_worker_find(cw_plugin_client_t* c, uint32_t index) {
  for (size_t i = 0; i < c->num_workers; ++i) {
    if (c->workers[i].index == index) return &c->workers[i];
  }
  return NULL;
}

static bool cw__names_worker(const cw_plugin_worker_t* w, const char* msg) {
  char prefix[256];
  snprintf(prefix, sizeof(prefix), "worker %s (", w->name);
  return strncmp(msg, prefix, strlen(prefix)) == 0;
}

void cw_plugin_worker_mark_dead(cw_plugin_worker_t* w, const char* why) {
  pthread_mutex_lock(&w->mu);
  if (!w->dead_reason) w->dead_reason = strdup(why);
  pthread_mutex_unlock(&w->mu);
  atomic_store_explicit(&w->dead, true, memory_order_release);
}

uint32_t cw_plugin_worker_epoch(cw_plugin_worker_t* w) {
  if (atomic_load_explicit(&w->dead, memory_order_acquire)) (void)cw_plugin_health_revive(w);
  return atomic_load_explicit(&w->epoch, memory_order_acquire);
}

// With send_mu held (it orders reconnections): `epoch` is not w's any more.
static bool cw__stale_locked(const cw_plugin_worker_t* w, uint32_t epoch) {
  return epoch != CW_PLUGIN_ANY_EPOCH &&
         epoch != atomic_load_explicit(&w->epoch, memory_order_acquire);
}

// Whether a request numbered in `epoch` is for a worker that is gone: w
// reconnected since, or a replacement was announced that w has not joined
// yet (a resumed session names it so, cw_plugin_resume.c). Either way the
// replacement must not get it, in the lost worker's numbering.
static bool cw__gone_since(cw_plugin_worker_t* w, uint32_t epoch) {
  if (epoch != atomic_load_explicit(&w->epoch, memory_order_acquire)) return true;
  if (!atomic_load_explicit(&w->dead, memory_order_acquire)) return false;
  pthread_mutex_lock(&w->mu);
  bool replaced = w->next_address != NULL;
  pthread_mutex_unlock(&w->mu);
  return replaced;
}

// (w->address changes under send_mu: with it held, or racing a reconnection
// as a buffer's own check does; the old text stays readable, retired.)
static cw_status_t cw__stale_status(const cw_plugin_worker_t* w, uint16_t type) {
  return cw_make_status(CW_UNAVAILABLE,
                        "worker %s (%s) was replaced: the buffers this %s names "
                        "lived on the lost worker and their contents are gone; upload them again",
                        w->name, cw_plugin_worker_address(w), cw_msg_type_name(type));
}

cw_status_t cw_plugin_worker_check(cw_plugin_worker_t* w) {
  if (!atomic_load_explicit(&w->dead, memory_order_acquire)) return cw_ok_status();
  if (cw_plugin_health_revive(w)) return cw_ok_status();
  pthread_mutex_lock(&w->mu);
  const char* why = w->dead_reason ? w->dead_reason : "connection lost";
  cw_status_t s = cw__names_worker(w, why)
                      ? cw_make_status(CW_UNAVAILABLE, "%s", why)
                      : cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: %s", w->name,
                                       cw_plugin_worker_address(w), why);
  pthread_mutex_unlock(&w->mu);
  return s;
}

cw_status_t cw_plugin_worker_map_error(cw_plugin_worker_t* w, cw_status_t status) {
  // A relayed request that reached a later life of our session there: the
  // session's arrays at w went with the life it was numbered in, as with a
  // lost worker (cw_worker_conn.c refuses it unapplied).
  if (status && cw_status_code(status) == CW_ABORTED &&
      strstr(cw_status_message(status), CW_MSG_SEQ_OTHER_LIFE)) {
    cw_status_t out = cw_make_status(CW_UNAVAILABLE, "worker %s (%s) no longer holds this "
                                     "session's arrays: %s", w->name, cw_plugin_worker_address(w),
                                     cw_status_message(status));
    cw_status_free(status);
    return out;
  }
  if (!status || cw_status_code(status) != CW_UNAVAILABLE) return status;
  const char* msg = cw_status_message(status);
  if (cw__names_worker(w, msg)) return status;  // already named
  // The client library reports a lost connection as "... <address> ...": the
  // worker is gone (a peer's failure names the peer's address instead).
  const char* address = cw_plugin_worker_address(w);
  bool own = strstr(msg, address) != NULL;
  // Unless the current link works: the loss was an older connection's,
  // reported after a reattach put this one in its place, or the
  // controller's link to the worker (a relayed request).
  if (own && cw_client_failed(atomic_load_explicit(&w->conn, memory_order_acquire))) {
    // Our link, as far as we know: the controller says so if the worker died.
    atomic_store_explicit(&w->link_lost, true, memory_order_release);
    cw_plugin_worker_mark_dead(w, msg);
  }
  // A SEND the worker could not deliver: the path to its peer failed, not it.
  cw_status_t out = !own && !strncmp(msg, "SEND ", 5)
                        ? cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is up, but its copy to "
                                         "another worker failed: %s", w->name, address, msg)
                        : cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: %s",
                                         w->name, address, msg);
  cw_status_free(status);
  return out;
}

static void cw__ignore_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  cw_status_free(status);
}

// Records the error of a pipelined request nobody waits on (takes `status`;
// OK is ignored); `what` names the request.
static void cw__worker_defer_error(cw_plugin_worker_t* w, const char* what, cw_status_t status) {
  if (!status) return;
  pthread_mutex_lock(&w->mu);
  if (!w->deferred_error) {
    char m[1024];
    snprintf(m, sizeof(m), "worker %s (%s): an earlier pipelined %s failed (%s): %s", w->name,
             cw_plugin_worker_address(w), what, cw_status_code_name(cw_status_code(status)),
             cw_status_message(status));
    w->deferred_error = strdup(m);
    w->deferred_code = (int)cw_status_code(status);
  }
  w->deferred_count++;
  pthread_mutex_unlock(&w->mu);
  cw_status_free(status);
}

cw_status_t cw_plugin_worker_take_deferred(cw_plugin_worker_t* w) {
  pthread_mutex_lock(&w->mu);
  cw_status_t s = cw_ok_status();
  if (w->deferred_count) {
    s = cw_make_status(w->deferred_error ? (cw_status_code_t)w->deferred_code : CW_INTERNAL,
                       "%s (%llu pipelined requests failed in all)",
                       w->deferred_error ? w->deferred_error : "pipelined requests failed",
                       (unsigned long long)w->deferred_count);
    free(w->deferred_error);
    w->deferred_error = NULL;
    w->deferred_count = 0;
  }
  pthread_mutex_unlock(&w->mu);
  return s;
}

// A pipelined DELETE's reply: nobody waits on it, so an error is recorded on
// the worker and surfaced by its next read back (cw_plugin_worker_take_deferred).
// NOT_FOUND is no failure: the objects are gone either way (e.g. the outputs
// of a launch the worker refused).
static void cw__delete_done_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw_plugin_worker_t* w = user;
  // NOT_FOUND, or a worker that is gone (its death is reported by itself).
  if (status && (cw_status_code(status) == CW_NOT_FOUND ||
                 (cw_status_code(status) == CW_UNAVAILABLE &&
                  atomic_load_explicit(&w->dead, memory_order_acquire)))) {
    cw_status_free(status);
    return;
  }
  cw__worker_defer_error(w, "DELETE", status);
}

// Sends an empty DELETE carrying `seq` straight to the worker: a request
// that took a seq and never reached the worker (refused here, or not relayed
// by the controller) leaves a hole in the worker's seq order, and later
// requests would wait for it. A filler for a seq the worker already applied
// is refused as a duplicate. Not when the seq was taken in an older epoch:
// the replacement numbers from 1 again.
bool cw_plugin_worker_fill_seq(cw_plugin_worker_t* w, uint64_t seq, uint32_t epoch,
                               cw_client_done_fn done, void* user) {
  // The connection first, then the epoch: a join bumps the epoch before it
  // swaps the connection in (cw_plugin_health.c), so a filler that sees the
  // new connection sees the new epoch and is dropped. The other way round,
  // an old epoch's filler could take a seq of the replacement's numbering.
  cw_client_t* conn = atomic_load_explicit(&w->conn, memory_order_acquire);
  if (epoch != atomic_load_explicit(&w->epoch, memory_order_acquire)) return false;
  Causeway__V1__DeleteRequest filler = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  filler.seq = seq;
  cw_status_t s = cw_client_send(conn, CW_MSG_DELETE, &filler.base, NULL, 0, NULL,
                                 done ? done : cw__ignore_cb, user, NULL);
  bool sent = !s;
  cw_status_free(s);
  return sent;
}

static void cw__worker_fill_seq(cw_plugin_worker_t* w, uint64_t seq, uint32_t epoch) {
  (void)cw_plugin_worker_fill_seq(w, seq, epoch, NULL, NULL);
}

// After sending the request that took `seq`, with status `s` (taken); with
// send_mu held.
static cw_status_t cw__worker_sent_locked(cw_plugin_worker_t* w, uint64_t seq, cw_status_t s) {
  if (s) {
    cw__worker_fill_seq(w, seq, atomic_load_explicit(&w->epoch, memory_order_acquire));
    return cw_plugin_worker_map_error(w, s);
  }
  return cw_ok_status();
}

// w's relayed launches held in the controller connection's write buffer
// (cw_client_send_batched) go out now: before a request with a later seq
// goes straight to w (w applies its requests in seq order), or for a waiter.
// Not with the controller's send lock held.
static void cw__worker_write_relayed_held(cw_plugin_worker_t* w) {
  if (!atomic_load_explicit(&w->relayed_out, memory_order_relaxed)) return;  // nothing held
  cw_plugin_client_t* c = w->client;
  cw_client_t* ctrl = NULL;
  uint64_t gen = 0;
  cw_plugin_ctrl_send_lock(c);
  cw_status_t s = cw_plugin_ctrl_now(c, &ctrl, &gen);
  // A failed write fails what it held, through the reader (parked or failed).
  if (!s && ctrl) cw_client_write_held_batched(ctrl);
  cw_plugin_ctrl_send_unlock(c);
  cw_status_free(s);
}

// With send_mu held.
static cw_status_t cw__worker_send_locked(cw_plugin_worker_t* w, uint16_t type,
                                          ProtobufCMessage* req, uint64_t* req_seq,
                                          const struct iovec* bulk, int bulk_count,
                                          const cw_client_sink_t* sink, cw_client_done_fn done,
                                          void* user) {
  uint64_t seq = cw__worker_next_seq(w);
  *req_seq = seq;
  cw_status_t s = cw_client_send(w->conn, type, req, bulk, bulk_count, sink, done, user, NULL);
  return cw__worker_sent_locked(w, seq, s);
}

// With send_mu held; `deferred`: see cw__worker_stage_deletes_locked.
static void cw__worker_send_deletes_locked(cw_plugin_worker_t* w, bool deferred) {
  if (!w->n_pending_deletes) return;
  if (!atomic_load_explicit(&w->dead, memory_order_acquire)) {
    // One DELETE, one seq: where the first of them would have gone. Every
    // request since took this path first, so the order is unchanged.
    Causeway__V1__DeleteRequest req = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    req.ids = w->pending_deletes;
    req.n_ids = w->n_pending_deletes;
    if (deferred) {
      req.seq = cw__worker_next_seq(w);
      cw_status_free(cw__worker_sent_locked(
          w, req.seq,
          cw_client_send_deferred(w->conn, CW_MSG_DELETE, &req.base, cw__delete_done_cb, w, NULL)));
    } else {
      cw_status_free(cw__worker_send_locked(w, CW_MSG_DELETE, &req.base, &req.seq, NULL, 0, NULL,
                                            cw__delete_done_cb, w));
    }
  } else if (atomic_load_explicit(&w->link_lost, memory_order_acquire) &&
             !atomic_load_explicit(&w->worker_down, memory_order_acquire)) {
    return;  // only our link was lost: they go once it is back (cw_plugin_health.c)
  }  // else a dead worker already freed everything of this session
  w->n_pending_deletes = 0;
  w->pending_delete_bytes = 0;
}

// Sends the batched DELETEs now, before the caller takes a seq (send_mu held;
// not the controller's send lock). w's relayed launches held on the
// controller's connection go first: the DELETE's seq comes after theirs.
static void cw__worker_flush_deletes_locked(cw_plugin_worker_t* w) {
  if (!w->n_pending_deletes) return;
  cw__worker_write_relayed_held(w);
  cw__worker_send_deletes_locked(w, false);
}

// Like cw__worker_flush_deletes_locked, but the DELETE waits in w->conn's
// write buffer for the request the caller sends next on w->conn (one write
// for both).
static void cw__worker_stage_deletes_locked(cw_plugin_worker_t* w) {
  cw__worker_send_deletes_locked(w, true);
}

void cw_plugin_worker_delete(cw_plugin_worker_t* w, uint32_t epoch, uint64_t id, uint64_t bytes) {
  // A fork()ed child dropping what it inherited: the parent still has it.
  if (cw_client_forked(w->conn)) return;
  pthread_mutex_lock(&w->send_mu);
  if (cw__stale_locked(w, epoch)) {  // a dead worker freed it with everything of ours
    pthread_mutex_unlock(&w->send_mu);
    return;
  }
  if (w->n_pending_deletes == w->cap_pending_deletes) {
    size_t cap = w->cap_pending_deletes ? w->cap_pending_deletes * 2 : 16;
    bool held = atomic_load_explicit(&w->dead, memory_order_acquire) &&
                atomic_load_explicit(&w->link_lost, memory_order_acquire) &&
                !atomic_load_explicit(&w->worker_down, memory_order_acquire);
    size_t most = held ? CW__DELETE_HELD_MAX : CW__DELETE_BATCH;
    if (cap > most) cap = most;
    if (cap < w->cap_pending_deletes) cap = w->cap_pending_deletes;
    uint64_t* ids = realloc(w->pending_deletes, cap * sizeof(*ids));
    if (ids) {
      w->pending_deletes = ids;
      w->cap_pending_deletes = cap;
    }
  }
  if (w->n_pending_deletes == w->cap_pending_deletes) {
    cw__worker_flush_deletes_locked(w);                    // out of memory: send what waits
    if (w->n_pending_deletes == w->cap_pending_deletes) {  // nothing to hold it in: alone
      Causeway__V1__DeleteRequest req = CAUSEWAY__V1__DELETE_REQUEST__INIT;
      req.ids = &id;
      req.n_ids = 1;
      if (!atomic_load_explicit(&w->dead, memory_order_acquire)) {
        cw_status_free(cw__worker_send_locked(w, CW_MSG_DELETE, &req.base, &req.seq, NULL, 0, NULL,
                                              cw__delete_done_cb, w));
      }
      pthread_mutex_unlock(&w->send_mu);
      return;
    }
  }
  w->pending_deletes[w->n_pending_deletes++] = id;
  w->pending_delete_bytes += bytes;
  if (w->n_pending_deletes >= CW__DELETE_BATCH || w->pending_delete_bytes >= CW__DELETE_BATCH_BYTES) {
    cw__worker_flush_deletes_locked(w);
  }
  pthread_mutex_unlock(&w->send_mu);
}

void cw_plugin_worker_flush_deletes(cw_plugin_worker_t* w) {
  if (cw_client_forked(w->conn)) return;
  pthread_mutex_lock(&w->send_mu);
  cw__worker_flush_deletes_locked(w);
  pthread_mutex_unlock(&w->send_mu);
}

cw_status_t cw_plugin_worker_send(cw_plugin_worker_t* w, uint32_t epoch, uint16_t type,
                                  ProtobufCMessage* req, uint64_t* req_seq,
                                  const struct iovec* bulk, int bulk_count,
                                  const cw_client_sink_t* sink, cw_client_done_fn done,
                                  void* user) {
  // A fork()ed child fails before it takes send_mu (a thread of the parent
  // may have held it at the fork: the child would wait for good).
  CW_RETURN_IF_ERROR(cw_client_fork_check(w->conn), "%s", cw_msg_type_name(type));
  CW_RETURN_IF_ERROR(cw_plugin_worker_check(w), "%s", cw_msg_type_name(type));
  pthread_mutex_lock(&w->send_mu);
  if (cw__stale_locked(w, epoch)) {
    cw_status_t stale = cw__stale_status(w, type);
    pthread_mutex_unlock(&w->send_mu);
    return stale;
  }
  cw__worker_write_relayed_held(w);
  cw__worker_stage_deletes_locked(w);  // they come first in seq order, in one write
  cw_status_t s = cw__worker_send_locked(w, type, req, req_seq, bulk, bulk_count, sink, done, user);
  pthread_mutex_unlock(&w->send_mu);
  return s;
}

// With relayed_mu held: where (epoch, seq) is in relayed_seqs, or would go.
static size_t cw__relayed_find_locked(const cw_plugin_worker_t* w, uint32_t epoch, uint64_t seq) {
  size_t lo = 0, hi = w->n_relayed_seqs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const struct cw_plugin_relayed_seq_s* r = &w->relayed_seqs[mid];
    if (r->epoch < epoch || (r->epoch == epoch && r->seq < seq)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

bool cw_plugin_worker_relayed_pending_locked(const cw_plugin_worker_t* w, uint32_t epoch,
                                             uint64_t seq) {
  size_t i = cw__relayed_find_locked(w, epoch, seq);
  return i < w->n_relayed_seqs && w->relayed_seqs[i].epoch == epoch &&
         w->relayed_seqs[i].seq == seq;
}

// With send_mu held (seqs and epochs change in order under it: this
// appends). False when out of memory: that seq is not kept from a
// reattach's fillers.
static bool cw__relayed_add(cw_plugin_worker_t* w, uint32_t epoch, uint64_t seq) {
  pthread_mutex_lock(&w->relayed_mu);
  bool ok = true;
  if (w->n_relayed_seqs == w->cap_relayed_seqs) {
    size_t cap = w->cap_relayed_seqs ? 2 * w->cap_relayed_seqs : 16;
    struct cw_plugin_relayed_seq_s* grown = realloc(w->relayed_seqs, cap * sizeof(*grown));
    if (grown) {
      w->relayed_seqs = grown;
      w->cap_relayed_seqs = cap;
    } else {
      ok = false;
    }
  }
  if (ok) w->relayed_seqs[w->n_relayed_seqs++] = (struct cw_plugin_relayed_seq_s){epoch, seq};
  pthread_mutex_unlock(&w->relayed_mu);
  return ok;
}

static void cw__relayed_remove_locked(cw_plugin_worker_t* w, uint32_t epoch, uint64_t seq) {
  size_t i = cw__relayed_find_locked(w, epoch, seq);
  if (!cw_plugin_worker_relayed_pending_locked(w, epoch, seq)) return;
  memmove(&w->relayed_seqs[i], &w->relayed_seqs[i + 1],
          (w->n_relayed_seqs - i - 1) * sizeof(*w->relayed_seqs));
  w->n_relayed_seqs--;
}

// The completion of a request sent by cw_plugin_worker_send_ordered.
typedef struct cw__ordered_s {
  cw_plugin_parked_t parked;  // first: a relayed request waits here for a new controller
  cw_plugin_worker_t* w;
  uint64_t seq;
  uint32_t epoch;
  cw_client_done_fn done;
  void* user;
  // Relayed requests, with reconnecting on: what to send again (packed: a
  // copy per launch cost a dozen allocations, and it is rarely sent again),
  // and on which controller connection it went last.
  uint16_t type;
  uint8_t* packed;  // owned
  size_t packed_len;
  ProtobufCMessage* copy;  // owned: unpacked from `packed` when sent again
  uint64_t gen;
  bool resent;
  bool relayed;  // counted in w->relayed_out until freed
  bool tracked;  // its seq in w->relayed_seqs
  uint64_t life;  // relayed: w->session_key when it took its seq
  // A LAUNCH the worker had applied before the controller was lost: its
  // outputs are awaited on the worker instead (cw__ordered_await).
  size_t awaiting;
  cw_status_t await_error;
  pthread_mutex_t await_mu;
} cw__ordered_t;

// Made on the sender's thread (JAX's), freed by the reader of the reply.
static cw_recycle_t cw__ordered_records = CW_RECYCLE_INIT(sizeof(cw__ordered_t), 256);

static void cw__ordered_free(cw__ordered_t* o) {
  if (o->relayed) atomic_fetch_sub_explicit(&o->w->relayed_out, 1, memory_order_relaxed);
  if (o->tracked) {
    pthread_mutex_lock(&o->w->relayed_mu);
    cw__relayed_remove_locked(o->w, o->epoch, o->seq);
    pthread_mutex_unlock(&o->w->relayed_mu);
  }
  if (o->copy) protobuf_c_message_free_unpacked(o->copy, NULL);
  free(o->packed);
  cw_status_free(o->await_error);
  if (o->type == CW_MSG_LAUNCH && o->packed) pthread_mutex_destroy(&o->await_mu);
  cw_recycle_free(&cw__ordered_records, o);
}

// Ends the request: its reply (or error: the seq is filled first) to `done`.
static void cw__ordered_finish(cw__ordered_t* o, cw_status_t status,
                               const ProtobufCMessage* reply) {
  // After an error reply the request is over: either the worker had it (the
  // filler is refused as a duplicate) or it never will.
  if (status && o->tracked) {
    // Not while w is dead: the filler would go on the lost link. A reattach
    // fills it instead, now that it is no longer listed (cw_plugin_health.c).
    cw_plugin_worker_t* w = o->w;
    pthread_mutex_lock(&w->relayed_mu);
    cw__relayed_remove_locked(w, o->epoch, o->seq);
    o->tracked = false;
    bool dead = atomic_load_explicit(&w->dead, memory_order_acquire);
    pthread_mutex_unlock(&w->relayed_mu);
    if (!dead) cw_plugin_fill_later(w, o->epoch, o->life, o->seq);
  } else if (status && o->relayed) {
    // Later seqs may have gone straight to w meanwhile, and wait there for
    // this one: not behind them on that connection (cw_plugin_fill.h).
    cw_plugin_fill_later(o->w, o->epoch, o->life, o->seq);
  } else if (status) {
    cw__worker_fill_seq(o->w, o->seq, o->epoch);
  }
  o->done(o->user, status, reply);
  cw__ordered_free(o);
}

// One AWAIT of a re-sent LAUNCH's output answered.
static void cw__ordered_await_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw__ordered_t* o = user;
  // NOT_FOUND: the client dropped that output meanwhile; nobody reads it.
  if (status && cw_status_code(status) == CW_NOT_FOUND) {
    cw_status_free(status);
    status = cw_ok_status();
  }
  pthread_mutex_lock(&o->await_mu);
  if (status && !o->await_error) {
    o->await_error = status;
    status = cw_ok_status();
  }
  bool last = --o->awaiting == 0;
  pthread_mutex_unlock(&o->await_mu);
  cw_status_free(status);
  if (!last) return;
  cw_status_t result = o->await_error;
  o->await_error = cw_ok_status();
  // The launch's seq is the worker's already: no filler.
  o->done(o->user, result, NULL);
  cw__ordered_free(o);
}

// A LAUNCH sent again is a duplicate at the worker: it was applied from the
// lost controller's connection. Its outcome is its outputs' (each AWAITed
// directly on the worker, unordered).
static void cw__ordered_await(cw__ordered_t* o) {
  const Causeway__V1__LaunchRequest* l = (const Causeway__V1__LaunchRequest*)o->copy;
  size_t n = 0;
  for (size_t d = 0; d < l->n_outputs; ++d) n += l->outputs[d]->n_ids;
  if (!n) {
    o->done(o->user, cw_ok_status(), NULL);
    cw__ordered_free(o);
    return;
  }
  // The connection before the epoch's check, as cw__worker_fill_seq does.
  cw_client_t* conn = atomic_load_explicit(&o->w->conn, memory_order_acquire);
  if (cw__gone_since(o->w, o->epoch)) {  // its outputs were on the lost worker
    o->done(o->user, cw__stale_status(o->w, o->type), NULL);
    cw__ordered_free(o);
    return;
  }
  o->awaiting = n + 1;  // +1: held until every AWAIT is out
  for (size_t d = 0; d < l->n_outputs; ++d) {
    for (size_t k = 0; k < l->outputs[d]->n_ids; ++k) {
      Causeway__V1__AwaitRequest req = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
      req.buffer_id = l->outputs[d]->ids[k];
      cw_status_t s = cw_client_send(conn, CW_MSG_AWAIT, &req.base, NULL, 0, NULL,
                                     cw__ordered_await_cb, o, NULL);
      if (s) cw__ordered_await_cb(o, cw_plugin_worker_map_error(o->w, s), NULL);
    }
  }
  cw__ordered_await_cb(o, cw_ok_status(), NULL);
}

static void cw__ordered_resend(cw_plugin_parked_t* p, cw_client_t* ctrl, uint64_t gen,
                               cw_status_t failure);

static void cw__ordered_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  cw__ordered_t* o = user;
  cw_plugin_client_t* c = o->w->client;
  // The controller went away with it: sent again once the session resumed.
  if (status && o->packed && cw_plugin_ctrl_park(c, o->gen, status, &o->parked)) {
    cw_status_free(status);
    return;
  }
  if (status && o->resent && cw_status_code(status) == CW_INVALID_ARGUMENT &&
      strstr(cw_status_message(status), CW_MSG_SEQ_DUPLICATE)) {
    // The worker applied it before the controller was lost.
    cw_status_free(status);
    if (o->type == CW_MSG_LAUNCH) {
      cw__ordered_await(o);
      return;
    }
    o->done(o->user, cw_ok_status(), NULL);
    cw__ordered_free(o);
    return;
  }
  cw__ordered_finish(o, status, reply);
}

static void cw__ordered_resend(cw_plugin_parked_t* p, cw_client_t* ctrl, uint64_t gen,
                               cw_status_t failure) {
  cw__ordered_t* o = (cw__ordered_t*)p;
  if (failure) {
    cw__ordered_finish(o, failure, NULL);
    return;
  }
  if (cw__gone_since(o->w, o->epoch)) {
    cw__ordered_finish(o, cw__stale_status(o->w, o->type), NULL);
    return;
  }
  if (!o->copy) {
    o->copy = protobuf_c_message_unpack(cw_msg_request_descriptor(o->type), NULL, o->packed_len,
                                        o->packed);
    if (!o->copy) {
      cw__ordered_finish(o, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"), NULL);
      return;
    }
  }
  o->gen = gen;
  o->resent = true;
  cw_status_t s = cw_client_send(ctrl, o->type, o->copy, NULL, 0, NULL, cw__ordered_cb, o, NULL);
  if (s && cw_plugin_ctrl_park(o->w->client, gen, s, &o->parked)) {
    cw_status_free(s);
    return;
  }
  if (s) cw__ordered_finish(o, s, NULL);
}

// cw_plugin_worker_send_ordered; `batch`: cw_client_send_batched (see
// cw_plugin_worker_send_batched for when a relayed one may be held).
static cw_status_t cw__send_ordered(cw_plugin_worker_t* w, uint32_t epoch, bool direct, bool batch,
                                    uint16_t type, ProtobufCMessage* req, uint64_t* req_seq,
                                    cw_client_done_fn done, void* user) {
  CW_RETURN_IF_ERROR(cw_client_fork_check(w->conn), "%s", cw_msg_type_name(type));
  cw_plugin_client_t* c = w->client;
  cw__ordered_t* o = cw_recycle_alloc(&cw__ordered_records);
  if (!o) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  o->w = w;
  o->done = done;
  o->user = user;
  o->type = type;
  o->parked.worker = (uint32_t)(w - c->workers);
  o->parked.resend = cw__ordered_resend;
  cw_client_t* via = NULL;
  pthread_mutex_lock(&w->send_mu);  // seq order on the connection
  if (cw__stale_locked(w, epoch)) {
    cw_status_t stale = cw__stale_status(w, type);
    pthread_mutex_unlock(&w->send_mu);
    cw_recycle_free(&cw__ordered_records, o);
    return stale;
  }
  // Batched DELETEs come first; a batched LAUNCH (a chain drops a buffer per
  // launch, and a DELETE per launch cost w a message and the client a
  // request) takes them only once CW__DELETE_LAUNCH_BATCH wait. They take no
  // seq while they wait, so they may come later than dropped: with w's next
  // other request, when they fill a batch, or when a waiter is about to
  // sleep (cw_plugin_worker_flush_deletes: a launch may wait at w for the
  // memory they free; a waiting launch does not hold up later DELETEs).
  bool take_deletes = w->n_pending_deletes &&
                      (type != CW_MSG_LAUNCH || !batch ||
                       w->n_pending_deletes >= CW__DELETE_LAUNCH_BATCH);
  if (!direct) {
    if (take_deletes) cw__worker_flush_deletes_locked(w);  // straight to w
    cw_plugin_ctrl_send_lock(c);
    // Not waiting while the controller is reconnected to: sent on a lost
    // connection it fails at once and waits parked, in seq order.
    cw_status_t s = cw_plugin_ctrl_now(c, &via, &o->gen);
    if (s) {
      cw_plugin_ctrl_send_unlock(c);
      pthread_mutex_unlock(&w->send_mu);
      cw_recycle_free(&cw__ordered_records, o);
      return s;
    }
    batch = batch && atomic_load_explicit(&w->relayed_out, memory_order_relaxed) >= 2;
    o->relayed = true;
    // A launch sent direct just before the lease was withdrawn may wait in
    // w's write buffer, holding up the seqs after it: it goes now.
    cw_client_t* held = atomic_load_explicit(&w->conn, memory_order_acquire);
    if (held && !atomic_load_explicit(&w->dead, memory_order_acquire)) {
      cw_client_write_held_batched(held);
    }
    atomic_fetch_add_explicit(&w->relayed_out, 1, memory_order_relaxed);
  } else {
    // Under send_mu: a replacement worker swaps the connection under it.
    via = w->conn;
    cw__worker_write_relayed_held(w);
  }
  if (direct && take_deletes) cw__worker_stage_deletes_locked(w);  // in the same write
  uint64_t seq = cw__worker_next_seq(w);
  epoch = atomic_load_explicit(&w->epoch, memory_order_acquire);
  *req_seq = seq;
  o->seq = seq;
  o->epoch = epoch;
  o->parked.seq = seq;
  if (o->relayed) o->tracked = cw__relayed_add(w, epoch, seq);
  // The life of our session at w that seq is of: were it to reach a later
  // one (every link of this one closed while it waited at the controller),
  // w refuses it instead of taking it for that life's seq.
  if (!direct) cw_msg_set_session_life(type, req, w->session_key);
  o->life = w->session_key;
  // What a restarted controller is sent again (with its seq).
  if (!direct && c->resume) {
    o->packed = cw_msg_pack(req, &o->packed_len);
    if (o->packed && type == CW_MSG_LAUNCH) pthread_mutex_init(&o->await_mu, NULL);
  }
  cw_status_t s = batch
                      ? cw_client_send_batched(via, type, req, cw__ordered_cb, o, NULL)
                      : cw_client_send(via, type, req, NULL, 0, NULL, cw__ordered_cb, o, NULL);
  if (!direct) cw_plugin_ctrl_send_unlock(c);
  pthread_mutex_unlock(&w->send_mu);
  if (s && o->packed && cw_plugin_ctrl_park(c, o->gen, s, &o->parked)) {
    cw_status_free(s);
    return cw_ok_status();  // sent on the new connection; `done` reports it
  }
  if (s) {
    uint64_t life = o->life;
    cw__ordered_free(o);
    // Keep the worker's seq order free of holes; not behind later seqs.
    if (direct) cw__worker_fill_seq(w, seq, epoch);
    else cw_plugin_fill_later(w, epoch, life, seq);
  }
  return s;
}

cw_status_t cw_plugin_worker_send_ordered(cw_plugin_worker_t* w, uint32_t epoch, bool direct,
                                          uint16_t type, ProtobufCMessage* req, uint64_t* req_seq,
                                          cw_client_done_fn done, void* user) {
  return cw__send_ordered(w, epoch, direct, false, type, req, req_seq, done, user);
}

cw_status_t cw_plugin_worker_send_batched(cw_plugin_worker_t* w, uint32_t epoch, bool direct,
                                          uint16_t type, ProtobufCMessage* req, uint64_t* req_seq,
                                          cw_client_done_fn done, void* user) {
  return cw__send_ordered(w, epoch, direct, true, type, req, req_seq, done, user);
}

// w's own connection, for a thread waiting on it; NULL when its replies are
// relayed (they stay the controller connection's reader's) or w is dead.
static cw_client_t* cw__direct_conn(cw_plugin_worker_t* w) {
  if (!atomic_load_explicit(&w->direct_launch, memory_order_relaxed) ||
      atomic_load_explicit(&w->dead, memory_order_acquire)) {
    return NULL;
  }
  return atomic_load_explicit(&w->conn, memory_order_acquire);
}

static void cw__take_replies(void* arg) { cw_client_take_replies(cw__direct_conn(arg)); }

bool cw_plugin_worker_poll(cw_plugin_worker_t* w, cw_plugin_future_t* f, int64_t budget_us) {
  if (cw_plugin_future_spin(f, budget_us, cw__take_replies, w)) {
    cw_client_waited(cw__direct_conn(w));
    return true;
  }
  cw_client_kick_reader(cw__direct_conn(w));
  return false;
}

void cw_plugin_worker_set_direct(cw_plugin_worker_t* w, bool direct) {
  // Not under send_mu: the controller connection's reader calls this, and a
  // rejoin holds send_mu while it waits for that reader. Launches held on
  // the controller's connection go with the next direct send.
  bool was = atomic_exchange_explicit(&w->direct_launch, direct, memory_order_relaxed);
  if (was && !direct && !atomic_load_explicit(&w->dead, memory_order_acquire)) {
    cw_client_t* conn = atomic_load_explicit(&w->conn, memory_order_acquire);
    if (conn) cw_client_write_held_batched(conn);
  }
}

void cw_plugin_worker_withdraw_leases(cw_plugin_client_t* c) {
  for (size_t i = 0; i < c->num_workers; ++i) cw_plugin_worker_set_direct(&c->workers[i], false);
}

void cw_plugin_worker_write_held(cw_plugin_worker_t* w) {
  if (!atomic_load_explicit(&w->direct_launch, memory_order_relaxed)) {
    cw__worker_write_relayed_held(w);
    return;
  }
  if (atomic_load_explicit(&w->dead, memory_order_acquire)) return;
  // A failed write fails what it held, through the reader. A replaced
  // connection stays valid (retired) until the client is destroyed.
  cw_status_free(cw_client_write_held(atomic_load_explicit(&w->conn, memory_order_acquire)));
}
