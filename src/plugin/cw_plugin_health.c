// Worker loss and replacement on the client side (cw_plugin_health.h), and
// naming a lost controller.
//
// WORKER_DOWN (the controller saw the worker's connection close or its
// heartbeats stop): the worker is marked dead and our direct connection to
// it is shut down, so everything pending there fails at once with
// UNAVAILABLE naming it (a silent worker would otherwise leave it hanging).
//
// WORKER_UP with a new incarnation of a worker this session uses: a
// replacement took its slot (same devices). The next operation on it
// connects there in our session (other threads' calls fail at once
// meanwhile), sends HEALTH_REJOIN to the controller
// (which relays our requests for that worker again from then on), and
// restarts this worker's seq numbering. Buffers made before stay in error
// (their contents died with the worker); executables keep working (the
// controller LOADed them into the replacement under the same ids).
//
// Our link to a worker failed (its watchdog, a reset) and the controller
// said nothing: the worker may be fine, with our session, and the path may
// heal. The next operation on it reconnects in the session, at most once a
// second (cw__reattach); buffers made before work again.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_msg.h"
#include "cw_plugin_client.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_health.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_resume.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

void cw_plugin_health_on_event(cw_plugin_client_t* c, const Causeway__V1__ClusterEvent* ev) {
  cw_plugin_worker_t* w = cw_plugin_worker_find(c, ev->worker_index);
  if (!w) return;  // not a worker of this session
  if (ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN) {
    atomic_store(&w->worker_down, true);  // seq_cst: see cw__reattach
    atomic_fetch_add(&w->downs, 1);       // and cw_plugin_health_revive
    cw_plugin_worker_mark_dead(w, ev->message && ev->message[0] ? ev->message : "worker down");
    cw_client_t* conn = w->conn;
    if (conn) cw_client_shutdown(conn);
    return;
  }
  if (ev->kind != CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP || !ev->worker_address ||
      !ev->worker_address[0]) {
    return;
  }
  pthread_mutex_lock(&w->mu);
  bool newer = ev->incarnation > w->incarnation &&
               (!w->next_address || ev->incarnation > w->next_incarnation);
  if (newer) {
    char* address = strdup(ev->worker_address);
    if (address) {
      free(w->next_address);
      w->next_address = address;
      w->next_incarnation = ev->incarnation;
    }
  }
  pthread_mutex_unlock(&w->mu);
  if (newer) atomic_store(&w->worker_down, true);
  // Missed the WORKER_DOWN? The old connection is no use either way.
  if (newer && !atomic_load(&w->dead)) {
    cw_plugin_worker_mark_dead(w, ev->message && ev->message[0] ? ev->message : "worker replaced");
    cw_client_t* conn = w->conn;
    if (conn) cw_client_shutdown(conn);
  }
}

// A replaced connection and address: other threads may still hold them.
// Those threads load the pointer for one call on it, which fails at once
// since the connection was shut down, so a connection is released (its
// socket, eventfd and two threads) once it has been retired for a grace
// period, at a later reconnection; until session 40 each one stayed until
// the client went: 2 descriptors and a thread per replacement (the soak
// audit). The address text (small, read in error messages) stays.
struct cw_plugin_retired_s {
  cw_client_t* conn;
  char* address;
  int64_t at_ms;  // when it was retired
};

// With send_mu held.
static void cw__retire(cw_plugin_worker_t* w, cw_client_t* conn, char* address) {
  // Shut already when the worker was marked dead by an event, but not when
  // a failed request marked it (cw_plugin_worker_map_error): a call still
  // waiting on it must end before its grace does.
  cw_client_shutdown(conn);
  struct cw_plugin_retired_s* grown = realloc(w->retired, (w->num_retired + 1) * sizeof(*grown));
  if (!grown) return;  // leaked rather than freed under a reader
  w->retired = grown;
  w->retired[w->num_retired].conn = conn;
  w->retired[w->num_retired].address = address;
  w->retired[w->num_retired].at_ms = cw_time_now_ms();
  w->num_retired++;
}

// With send_mu held: takes the retired connections past their grace into
// `out` (room for w->num_retired), to be released once send_mu is let go
// (their reader threads' completions may take it); returns how many.
static size_t cw__take_expired(cw_plugin_worker_t* w, cw_client_t** out) {
  int64_t grace = w->retire_grace_ms > 0 ? w->retire_grace_ms : CW_PLUGIN_RETIRE_GRACE_MS;
  int64_t now = cw_time_now_ms();
  size_t n = 0;
  for (size_t i = 0; i < w->num_retired; ++i) {
    struct cw_plugin_retired_s* r = &w->retired[i];
    if (r->conn && now - r->at_ms >= grace) {
      out[n++] = r->conn;
      r->conn = NULL;
    }
  }
  return n;
}

static void cw__ignore_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  cw_status_free(status);
}

size_t cw_plugin_health_retired_open(cw_plugin_worker_t* w) {
  pthread_mutex_lock(&w->send_mu);
  size_t n = 0;
  for (size_t i = 0; i < w->num_retired; ++i) n += w->retired[i].conn != NULL;
  pthread_mutex_unlock(&w->send_mu);
  return n;
}

// With send_mu held.
static void cw__set_reason(cw_plugin_worker_t* w, const char* fmt, const char* a, const char* b) {
  char why[1024];
  snprintf(why, sizeof(why), fmt, a, b);
  pthread_mutex_lock(&w->mu);
  char* copy = strdup(why);
  if (copy) {
    free(w->dead_reason);
    w->dead_reason = copy;
  }
  pthread_mutex_unlock(&w->mu);
}

// With send_mu: `conn` at `address` (both taken) replaces w's connection,
// which is retired (threads that loaded it may still use it); *out_expired
// gets the retired ones now due, for the caller to release once send_mu is
// free. Same-host copies stay off until a HELLO says otherwise.
static size_t cw__swap_in(cw_plugin_worker_t* w, cw_client_t* conn, char* address,
                          cw_client_t*** out_expired) {
  cw_client_t** expired = malloc((w->num_retired + 1) * sizeof(*expired));
  size_t n = expired ? cw__take_expired(w, expired) : 0;
  cw__retire(w, w->conn, atomic_load_explicit(&w->address, memory_order_relaxed));
  w->conn = conn;
  atomic_store_explicit(&w->address, address, memory_order_release);
  atomic_store_explicit(&w->direct_bulk, false, memory_order_relaxed);
  *out_expired = expired;
  return n;
}

// With send_mu held and w->connecting set by the caller: connects to
// `address` in our session with send_mu let go, then takes it again and
// clears connecting. Not under send_mu: with the address unreachable (the
// path still cut, a replacement not up) the connect waits out its timeout,
// and other threads' calls on w (deletes from JAX's garbage collection too)
// must not wait that long; they find w dead and fail at once meanwhile.
// `controller`: then waits for the controller connection too, if it is
// being resumed (that takes up to CAUSEWAY_CONTROLLER_RECONNECT_MS).
static cw_status_t cw__connect_unlocked(cw_plugin_worker_t* w, const char* address,
                                        uint64_t reattach_key, bool controller,
                                        cw_client_t** out) {
  pthread_mutex_unlock(&w->send_mu);
  cw_client_options_t o;
  cw_plugin_client_worker_options(w->client, &o);
  o.reattach_session_key = reattach_key;
  // A join (no key): a life the worker kept from before it was declared
  // dead holds our old seq order and arrays; we number from 1 again.
  o.fresh_session = reattach_key == 0;
  cw_status_t s = address ? cw_client_connect(address, &o, out)
                          : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!s && controller) {
    cw_client_t* ctrl = NULL;
    uint64_t gen = 0;
    s = cw_plugin_ctrl_get(w->client, &ctrl, &gen);
  }
  pthread_mutex_lock(&w->send_mu);
  w->connecting = false;
  return s;
}

// The path to a worker the controller still counts alive failed (our link's
// watchdog gave it up) and may have healed. The worker's side of the session
// lives on while the controller's link keeps it (cw_worker_conn.c), with our
// arrays and executables; what we sent on the lost link may never have
// arrived, leaving holes in its seq order that hold up every later request
// (relayed ones too). So: a new connection in the session, which must be the
// same life of it (session_key: not a restarted worker's, nor one made
// again), then an empty DELETE for each seq from the worker's next on, before
// anything new (send_mu held). Those it has are refused as duplicates; held
// ones from the lost link pass their turn there. Our HELLO names the life we
// had (reattach_session_key), and the worker closes the lost link before it
// answers: nothing still queued there applies after the fillers (an older
// worker ignores the field). The epoch stays: buffers
// made before the loss work again; those whose requests were lost already
// failed with the link's error. The seqs of relayed requests not answered
// yet are not filled: they may still be on their way through the controller.
static bool cw__reattach(cw_plugin_worker_t* w) {
  if (!atomic_load(&w->link_lost) || atomic_load(&w->worker_down)) return false;
  pthread_mutex_lock(&w->send_mu);
  bool ok = !atomic_load_explicit(&w->dead, memory_order_acquire);  // revived meanwhile
  int64_t now = cw_time_now_ms();
  // no key: an older worker; connecting: another thread is at it, and
  // this call fails at once with the link's error.
  if (ok || w->connecting || now < w->reattach_after_ms || !w->session_key) {
    pthread_mutex_unlock(&w->send_mu);
    return ok;
  }
  w->connecting = true;
  char* address = strdup(cw_plugin_worker_address(w));
  uint32_t epoch = atomic_load_explicit(&w->epoch, memory_order_acquire);
  cw_client_t* conn = NULL;
  // The worker closes the lost link before it answers (our key proves the
  // session's life): session_seq_next then counts all it read from there.
  cw_status_t s = cw__connect_unlocked(w, address, w->session_key, false, &conn);
  // From the attempt's end: after one that waited out the connect timeout
  // (the path still cut) the calls of the next second fail at once.
  w->reattach_after_ms = cw_time_now_ms() + CW_PLUGIN_REATTACH_EVERY_MS;
  // Meanwhile the controller said the worker died or was replaced (a
  // restarted controller names a replacement by next_address alone; one may
  // be joined already: another epoch).
  pthread_mutex_lock(&w->mu);
  bool replaced = w->next_address != NULL;
  pthread_mutex_unlock(&w->mu);
  bool superseded = replaced || atomic_load(&w->worker_down) || !atomic_load(&w->link_lost) ||
                    epoch != atomic_load_explicit(&w->epoch, memory_order_acquire) ||
                    !atomic_load_explicit(&w->dead, memory_order_acquire);
  if (!s && superseded) s = cw_make_status(CW_UNAVAILABLE, "superseded");
  uint64_t last = atomic_load_explicit(&w->seq, memory_order_relaxed);
  uint64_t next = s ? 0 : cw_client_session_seq_next(conn);
  bool other_life = !s && (cw_client_session_key(conn) != w->session_key || next == 0);
  if (!s && (other_life || next > last + 1 || last + 1 - next > CW_PLUGIN_REATTACH_MAX_FILL)) {
    // The worker restarted, or our session there ended: the arrays are gone.
    atomic_store_explicit(&w->link_lost, false, memory_order_release);
    cw__set_reason(w, "worker %s (%s) is reachable again, but this session's arrays there are "
                   "gone (the worker restarted or the session ended there); start the job again",
                   w->name, cw_plugin_worker_address(w));
    s = cw_make_status(CW_UNAVAILABLE, "session gone");
  }
  if (other_life) {
    // A controller that saw it go names its replacement (WORKER_UP), but one
    // that restarted meanwhile, which the worker registered with afresh,
    // never does: the new life at this address is joined as a replacement
    // (the controller refuses an incarnation not its own), and the programs
    // it lacks are sent again. Not the same life with too many holes: its
    // seq order goes on, and a join would number from 1.
    pthread_mutex_lock(&w->mu);
    if (!w->next_address) {
      w->next_address = strdup(address);
      w->next_incarnation = w->incarnation;
    }
    pthread_mutex_unlock(&w->mu);
    atomic_store(&w->worker_down, true);  // no reattach: only a join revives it
  }
  // Held to the swap: a relayed request that fails meanwhile leaves its seq
  // to us (cw_plugin_worker.c), or has it filled after (cw_plugin_fill.c).
  pthread_mutex_lock(&w->relayed_mu);
  for (uint64_t q = next; !s && q <= last; ++q) {
    if (cw_plugin_worker_relayed_pending_locked(w, epoch, q)) continue;  // it fills its own
    Causeway__V1__DeleteRequest filler = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    filler.seq = q;
    s = cw_client_send(conn, CW_MSG_DELETE, &filler.base, NULL, 0, NULL, cw__ignore_cb, NULL,
                       NULL);
  }
  if (s) {
    pthread_mutex_unlock(&w->relayed_mu);
    ok = !atomic_load_explicit(&w->dead, memory_order_acquire);  // a replacement joined
    pthread_mutex_unlock(&w->send_mu);
    if (conn) cw_client_release(conn);
    free(address);
    cw_status_free(s);
    return ok;
  }
  cw_client_t** expired = NULL;
  size_t num_expired = cw__swap_in(w, conn, address, &expired);
  pthread_mutex_lock(&w->mu);
  free(w->dead_reason);
  w->dead_reason = NULL;
  pthread_mutex_unlock(&w->mu);
  atomic_store(&w->link_lost, false);
  atomic_store(&w->dead, false);
  // The controller's reader marks w dead without send_mu: a WORKER_DOWN or
  // WORKER_UP since the check above saw w dead already and left the new
  // connection alone (seq_cst: it stored worker_down first, or sees w alive).
  if (atomic_load(&w->worker_down)) {
    cw_plugin_worker_mark_dead(w, "the controller reported it down while our link to it was "
                                  "restored");
    cw_client_shutdown(conn);
  }
  ok = !atomic_load_explicit(&w->dead, memory_order_acquire);
  pthread_mutex_unlock(&w->relayed_mu);
  pthread_mutex_unlock(&w->send_mu);
  for (size_t i = 0; i < num_expired; ++i) cw_client_release(expired[i]);
  free(expired);
  return ok;
}

// Programs sent again before the first of them is awaited: the worker
// compiles several side by side (--worker-compiles) instead of one round
// trip after another (200 programs took 8.7 s one by one), well below the
// controller's bound on a session's compiles under way (256).
#define CW__RESEND_WINDOW 32

typedef struct {
  cw_plugin_exe_t* exe;  // NULL: deleted meanwhile
  uint64_t request_id;
  cw_status_t sent;  // the send's failure, else OK
} cw__resend_t;

// Sends program `r->exe` again (a COMPILE under its id).
static void cw__resend(cw_client_t* ctrl, cw__resend_t* r) {
  cw_plugin_exe_t* e = r->exe;
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = e->id;
  req.format = e->source_format;
  req.code.data = e->source;
  req.code.len = e->source_size;
  req.compile_options.data = e->compile_options;
  req.compile_options.len = e->compile_options_size;
  r->sent = cw_client_send(ctrl, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, NULL, NULL,
                           &r->request_id);
}

// Waits for r's answer and says it; a controller lost is kept in *lost (the
// first one only) and the rest are not said. Releases the program.
static void cw__resend_answer(cw_plugin_worker_t* w, cw_client_t* ctrl, cw__resend_t* r,
                              cw_status_t* lost) {
  cw_plugin_exe_t* e = r->exe;
  if (!e) return;
  ProtobufCMessage* reply = NULL;
  cw_status_t s = r->sent ? r->sent : cw_client_wait(ctrl, r->request_id, &reply, NULL);
  if (reply) protobuf_c_message_free_unpacked(reply, NULL);
  if (s && cw_plugin_health_controller_lost(w->client, s)) {
    if (!*lost) {
      fprintf(stderr, "causeway: sending %s (executable %" PRIu64 ") again for the replacement "
              "of worker %s: the controller was lost; joining again once the session resumed\n",
              e->name, e->id, w->name);
      *lost = cw_status_annotate(s, "sending %s (executable %" PRIu64 ") again", e->name, e->id);
    } else {
      cw_status_free(s);
    }
  } else if (s) {
    fprintf(stderr, "causeway: sending %s (executable %" PRIu64 ") again for the replacement of "
            "worker %s failed: %s\n", e->name, e->id, w->name, cw_status_message(s));
    cw_status_free(s);
  } else if (!*lost) {
    fprintf(stderr, "causeway: sent %s (executable %" PRIu64 ") again for the replacement of "
            "worker %s: the controller could not load it there\n", e->name, e->id, w->name);
  }
  cw_plugin_exe_release(e);
  r->exe = NULL;
}

// The controller cannot LOAD these programs into the worker by itself (it
// restarted since they were compiled, or the worker has another CPU): each
// is compiled again under its id (a disk cache hit with --compile-cache-dir),
// CW__RESEND_WINDOW at a time. One the controller refuses keeps its
// error, which its launches report; a controller lost meanwhile fails the
// join (returned), which the next call makes again on the restarted one,
// asking again.
static cw_status_t cw__send_programs_again(cw_plugin_worker_t* w, cw_client_t* ctrl,
                                           const Causeway__V1__HealthRejoinReply* rep) {
  size_t n = rep->n_programs_wanted;
  cw__resend_t* rs = calloc(n ? n : 1, sizeof(*rs));
  if (!rs) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory sending %zu programs again for "
                          "the replacement of worker %s", n, w->name);
  }
  cw_status_t lost = cw_ok_status();
  for (size_t i = 0; i < n + CW__RESEND_WINDOW; ++i) {
    if (i < n) {
      rs[i].exe = cw_plugin_resume_exe_find(w->client, rep->programs_wanted[i]);
      if (rs[i].exe) cw__resend(ctrl, &rs[i]);
    }
    if (i >= CW__RESEND_WINDOW && i - CW__RESEND_WINDOW < n) {
      cw__resend_answer(w, ctrl, &rs[i - CW__RESEND_WINDOW], &lost);
    }
  }
  free(rs);
  return lost;
}

bool cw_plugin_health_revive(cw_plugin_worker_t* w) {
  cw_plugin_client_t* c = w->client;
  pthread_mutex_lock(&w->mu);
  char* address = w->next_address ? strdup(w->next_address) : NULL;
  uint32_t incarnation = w->next_incarnation;
  pthread_mutex_unlock(&w->mu);
  if (!address) {
    if (cw__reattach(w)) return true;
    // Another life of the worker answered there: joined in this call.
    pthread_mutex_lock(&w->mu);
    address = w->next_address ? strdup(w->next_address) : NULL;
    incarnation = w->next_incarnation;
    pthread_mutex_unlock(&w->mu);
    if (!address) return false;
  }
  pthread_mutex_lock(&w->send_mu);
  bool ok = !atomic_load_explicit(&w->dead, memory_order_acquire);  // revived meanwhile
  // connecting: another thread is at it, and this call fails at once.
  if (ok || w->connecting) {
    pthread_mutex_unlock(&w->send_mu);
    free(address);
    return ok;
  }
  w->connecting = true;
  uint32_t downs = atomic_load(&w->downs);
  cw_client_t* conn = NULL;
  cw_status_t s = cw__connect_unlocked(w, address, 0, true, &conn);
  if (s) {
    cw__set_reason(w, conn ? "rejoining its replacement at %s failed: %s"
                           : "its replacement at %s cannot be reached: %s",
                   address, cw_status_message(s));
  }
  // Meanwhile a newer replacement was named (the next call joins that one),
  // or the controller reported this one down (events come in order: it came
  // after the WORKER_UP that named it).
  pthread_mutex_lock(&w->mu);
  bool newer = !w->next_address || w->next_incarnation != incarnation ||
               strcmp(w->next_address, address) != 0;
  pthread_mutex_unlock(&w->mu);
  if (!s && (newer || atomic_load(&w->downs) != downs)) {
    s = cw_make_status(CW_UNAVAILABLE, "superseded");
  }
  if (!s) {
    Causeway__V1__HealthRejoinRequest req = CAUSEWAY__V1__HEALTH_REJOIN_REQUEST__INIT;
    req.worker_index = w->index;
    req.incarnation = incarnation;
    // Sent under send_mu, so on the controller connection after every
    // request we sent for the old incarnation (those are refused there),
    // and before any relayed one for the new. Its answer is waited for
    // under send_mu too: a controller that is up and answers, unlike the
    // connect above, which may wait out its timeout. A controller lost
    // again since the wait there fails the join (the next call tries again).
    ProtobufCMessage* reply = NULL;
    cw_client_t* ctrl = NULL;
    uint64_t gen = 0;
    s = cw_plugin_ctrl_up(c, &ctrl, &gen);
    if (!s) s = cw_client_call(ctrl, CW_MSG_HEALTH_REJOIN, &req.base, NULL, 0, NULL, &reply, NULL);
    // Still under send_mu: the programs are back before anything launches.
    if (!s) s = cw__send_programs_again(w, ctrl, (const Causeway__V1__HealthRejoinReply*)reply);
    if (s) (void)cw_plugin_ctrl_retry(c, gen, s);  // the next use tries again
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    if (s) {
      cw__set_reason(w, "rejoining its replacement at %s failed: %s", address,
                     cw_status_message(s));
    }
  }
  if (s) {
    if (conn) cw_client_release(conn);
    pthread_mutex_unlock(&w->send_mu);
    cw_status_free(s);
    free(address);
    return false;
  }
  cw_client_t** expired = NULL;
  // The epoch before the connection: a thread outside send_mu that loads the
  // new connection then sees the new epoch (cw__worker_fill_seq).
  atomic_fetch_add_explicit(&w->epoch, 1, memory_order_acq_rel);
  size_t num_expired = cw__swap_in(w, conn, address, &expired);
  atomic_store_explicit(&w->seq, 0, memory_order_relaxed);
  w->n_pending_deletes = 0;  // ids of the lost worker
  w->pending_delete_bytes = 0;
  w->session_key = cw_client_session_key(conn);
  atomic_store_explicit(&w->link_lost, false, memory_order_relaxed);
  atomic_store_explicit(&w->worker_down, false, memory_order_relaxed);
  pthread_mutex_lock(&w->mu);
  w->incarnation = incarnation;
  free(w->dead_reason);
  w->dead_reason = NULL;
  // Only the address joined: a resumed controller may have named another
  // one under this incarnation meanwhile (cw_plugin_resume.c), for the next call.
  if (w->next_incarnation == incarnation && w->next_address &&
      strcmp(w->next_address, cw_plugin_worker_address(w)) == 0) {
    free(w->next_address);
    w->next_address = NULL;
  }
  pthread_mutex_unlock(&w->mu);
  atomic_store(&w->dead, false);
  // The controller's reader marks w dead without send_mu: a WORKER_DOWN or
  // a newer WORKER_UP since the checks above may have found w dead already
  // and left the new connection alone (seq_cst, and mu: it counted or named
  // first, or it sees w alive and marks it dead itself).
  pthread_mutex_lock(&w->mu);
  bool again = w->next_address != NULL;
  pthread_mutex_unlock(&w->mu);
  if (again || atomic_load(&w->downs) != downs) {
    // Down again (the event's store may have come before ours above): only a
    // replacement revives it, one a resumed controller names included.
    atomic_store(&w->worker_down, true);
    cw_plugin_worker_mark_dead(w, again ? "worker replaced" : "the controller reported it down "
                                                              "while we joined it");
    cw_client_shutdown(conn);
  }
  ok = !atomic_load_explicit(&w->dead, memory_order_acquire);
  pthread_mutex_unlock(&w->send_mu);
  for (size_t i = 0; i < num_expired; ++i) cw_client_release(expired[i]);
  free(expired);
  return ok;
}

bool cw_plugin_health_controller_lost(const cw_plugin_client_t* c, cw_status_t status) {
  // cw_client reports a lost connection as "connection to ADDRESS lost: ...";
  // a worker's loss relayed by the controller starts with "worker ".
  return status && cw_status_code(status) == CW_UNAVAILABLE && c->ctrl_address &&
         strstr(cw_status_message(status), c->ctrl_address) &&
         strncmp(cw_status_message(status), "worker ", 7) != 0;
}

cw_status_t cw_plugin_health_controller_error(cw_plugin_client_t* c, cw_status_t status) {
  if (!cw_plugin_health_controller_lost(c, status)) return status;
  // Named already (reconnecting gave up, cw_plugin_resume.c).
  if (!strncmp(cw_status_message(status), "causeway: the controller at ", 28)) return status;
  cw_status_t out = cw_make_status(CW_UNAVAILABLE, "causeway: the controller at %s is "
                                   "unavailable: %s", c->ctrl_address, cw_status_message(status));
  cw_status_free(status);
  return out;
}

void cw_plugin_health_worker_deinitialize(cw_plugin_worker_t* w) {
  for (size_t i = 0; i < w->num_retired; ++i) {
    if (w->retired[i].conn) cw_client_release(w->retired[i].conn);
    free(w->retired[i].address);
  }
  free(w->retired);
  free(w->next_address);
}
