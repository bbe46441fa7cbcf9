// The controller connection across controller restarts (cw_plugin_resume.h).
//
// One thread per client watches the connection (PING) and, once it is lost,
// reconnects and resumes the session; every other thread only waits for it
// (cw_plugin_ctrl_get) or hands it requests to send again (cw_plugin_ctrl_park).
//
// Why requests are sent again rather than failed: a relayed LAUNCH or DELETE
// took a seq at its worker. If the old controller never relayed it, that seq
// is a hole the worker's order waits on (the worker forgets what a closed
// controller connection held, cw_worker_conn.c); sent again it fills the
// hole and runs. If the worker had applied it, the copy is refused as a
// duplicate, and the outcome is read from the worker (cw_plugin_worker.c):
// either way the program runs once, in order, and nothing fails.
#include "cw_plugin_resume.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_msg.h"
#include "cw_plugin_client.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_health.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

#define CW__BACKOFF_FIRST_MS 100
#define CW__BACKOFF_MAX_MS 500
#define CW__CONNECT_TIMEOUT_MS 8000
#define CW__ATTEMPT_MIN_MS 100

typedef struct cw__exe_s {
  uint64_t id;
  int32_t* devices;
  size_t n;
  cw_plugin_exe_t* exe;  // retained; NULL: unknown
} cw__exe_t;

struct cw_plugin_resume_s {
  cw_plugin_client_t* c;
  int64_t bound_ms;  // CAUSEWAY_CONTROLLER_RECONNECT_MS
  pthread_mutex_t mu;
  pthread_cond_t cv;  // up, failure or stopping changed; the thread's wakeups
  // Read-held by ordered sends from cw_plugin_ctrl_get to cw_client_send's
  // return; written while requests are sent again on a new connection.
  pthread_rwlock_t send_lock;
  pthread_t thread;
  bool started;
  // Guarded by mu.
  bool stopping;
  bool up;         // c->ctrl works as far as anyone knows
  bool lost;       // the thread reconnects
  bool ping_out;   // a PING is waiting for its answer
  uint64_t gen;    // c->ctrl's generation
  cw_status_t failure;  // reconnecting gave up: sticky
  cw_plugin_parked_t* parked;
  int64_t lost_ms;      // when the connection was found lost
  cw_client_t* connecting;  // the connection a resume is under way on
  cw_client_t** retired;  // old connections: other threads may still hold them
  size_t num_retired;
  Causeway__V1__OpenSessionRequest* open;  // as first sent (owned)
  cw__exe_t* exes;  // the session's executables
  size_t num_exes, cap_exes;
  _Atomic bool muted;  // events of a connection whose numbering is not ours yet
  // Guarded by mu. From SESSION_RESUME's send on a new connection: its events
  // while muted are kept, in order, for once its answer is applied (the
  // controller sends them after that answer; dropped, a WORKER_DOWN or
  // WORKER_UP then was never heard).
  bool keep_events;
  Causeway__V1__ClusterEvent** kept;
  size_t num_kept, cap_kept;
};

// Drops the kept events (mu held).
static void cw__drop_kept(cw_plugin_resume_t* r) {
  for (size_t i = 0; i < r->num_kept; ++i) {
    protobuf_c_message_free_unpacked(&r->kept[i]->base, NULL);
  }
  r->num_kept = 0;
  r->keep_events = false;
}

static cw_status_t cw__oom(void) { return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"); }

cw_status_t cw_plugin_resume_create(cw_plugin_client_t* c) {
  int64_t bound = cw_settings_int(&c->settings, CW_SET_CONTROLLER_RECONNECT_MS);
  // An embedded controller takes its workers with it: there is nothing to resume.
  if (bound <= 0 || c->cluster) return cw_ok_status();
  cw_plugin_resume_t* r = calloc(1, sizeof(*r));
  if (!r) return cw__oom();
  r->c = c;
  r->bound_ms = bound;
  r->up = true;
  pthread_mutex_init(&r->mu, NULL);
  cw_time_cond_init(&r->cv);
  pthread_rwlock_init(&r->send_lock, NULL);
  atomic_init(&r->muted, false);
  c->resume = r;
  return cw_ok_status();
}

cw_status_t cw_plugin_resume_set_open(cw_plugin_client_t* c,
                                      const Causeway__V1__OpenSessionRequest* open) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return cw_ok_status();
  r->open = (Causeway__V1__OpenSessionRequest*)cw_msg_copy(&open->base);
  return r->open ? cw_ok_status() : cw__oom();
}

// ---- Waiting ------------------------------------------------------------------------

// Waits up to `ms` on r->cv (mu held); false when stopping.
static bool cw__nap(cw_plugin_resume_t* r, int64_t ms) {
  if (r->stopping) return false;
  struct timespec ts = cw_time_deadline_ms(ms);
  pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  return !r->stopping;
}

// Starts a reconnection when connection `gen` is the current one and up
// (mu held).
static void cw__mark_lost(cw_plugin_resume_t* r, uint64_t gen) {
  if (gen != r->gen || !r->up || r->failure || r->stopping) return;
  r->up = false;
  r->lost = true;
  r->lost_ms = cw_time_now_ms();
  atomic_store_explicit(&r->muted, true, memory_order_release);
  pthread_cond_broadcast(&r->cv);
}

// `wait`: while a reconnection is under way; else that fails at once.
static cw_status_t cw__ctrl(cw_plugin_client_t* c, bool wait, cw_client_t** out_ctrl,
                            uint64_t* out_gen) {
  cw_plugin_resume_t* r = c->resume;
  *out_gen = 0;
  *out_ctrl = NULL;
  // Before r->mu, which a thread of the parent may have held at a fork. Read
  // atomically: cw__reconnect swaps it meanwhile (an old one stays, retired).
  CW_RETURN_IF_ERROR(cw_client_fork_check(__atomic_load_n(&c->ctrl, __ATOMIC_ACQUIRE)),
                     "controller");
  if (!r) {
    *out_ctrl = c->ctrl;
    return cw_ok_status();
  }
  pthread_mutex_lock(&r->mu);
  while (wait && !r->up && !r->failure && !r->stopping) pthread_cond_wait(&r->cv, &r->mu);
  cw_status_t s = cw_ok_status();
  if (r->failure) {
    s = cw_status_clone(r->failure);
  } else if (r->stopping) {
    s = cw_make_status(CW_CANCELLED, "causeway: the client is being destroyed");
  } else if (!r->up) {
    s = cw_make_status(CW_UNAVAILABLE, "causeway: the controller at %s is unavailable: "
                       "reconnecting", c->ctrl_address);
  } else {
    *out_ctrl = c->ctrl;
    *out_gen = r->gen;
  }
  pthread_mutex_unlock(&r->mu);
  return s;
}

cw_status_t cw_plugin_ctrl_get(cw_plugin_client_t* c, cw_client_t** out_ctrl, uint64_t* out_gen) {
  return cw__ctrl(c, true, out_ctrl, out_gen);
}

cw_status_t cw_plugin_ctrl_up(cw_plugin_client_t* c, cw_client_t** out_ctrl, uint64_t* out_gen) {
  return cw__ctrl(c, false, out_ctrl, out_gen);
}

cw_status_t cw_plugin_ctrl_now(cw_plugin_client_t* c, cw_client_t** out_ctrl, uint64_t* out_gen) {
  cw_plugin_resume_t* r = c->resume;
  *out_gen = 0;
  *out_ctrl = c->ctrl;
  if (!r) return cw_ok_status();
  pthread_mutex_lock(&r->mu);
  cw_status_t s = r->failure ? cw_status_clone(r->failure) : cw_ok_status();
  *out_ctrl = c->ctrl;
  *out_gen = r->gen;
  pthread_mutex_unlock(&r->mu);
  return s;
}

bool cw_plugin_ctrl_retry(cw_plugin_client_t* c, uint64_t gen, cw_status_t status) {
  cw_plugin_resume_t* r = c->resume;
  if (!r || !cw_plugin_health_controller_lost(c, status)) return false;
  pthread_mutex_lock(&r->mu);
  cw__mark_lost(r, gen);
  bool again = !r->stopping;
  pthread_mutex_unlock(&r->mu);
  return again;
}

void cw_plugin_ctrl_send_lock(cw_plugin_client_t* c) {
  if (c->resume) pthread_rwlock_rdlock(&c->resume->send_lock);
}

void cw_plugin_ctrl_send_unlock(cw_plugin_client_t* c) {
  if (c->resume) pthread_rwlock_unlock(&c->resume->send_lock);
}

bool cw_plugin_ctrl_park(cw_plugin_client_t* c, uint64_t gen, cw_status_t status,
                         cw_plugin_parked_t* p) {
  cw_plugin_resume_t* r = c->resume;
  if (!r || !cw_plugin_health_controller_lost(c, status)) return false;
  pthread_mutex_lock(&r->mu);
  if (r->stopping) {
    pthread_mutex_unlock(&r->mu);
    return false;
  }
  cw__mark_lost(r, gen);
  cw_status_t failure = r->failure ? cw_status_clone(r->failure) : cw_ok_status();
  bool now = !failure && r->up;  // a newer connection is up already
  cw_client_t* ctrl = c->ctrl;
  uint64_t current = r->gen;
  if (!failure && !now) {
    p->next = r->parked;
    r->parked = p;
  }
  pthread_mutex_unlock(&r->mu);
  if (failure) p->resend(p, NULL, 0, failure);
  else if (now) p->resend(p, ctrl, current, cw_ok_status());
  return true;
}

// ---- Executables -----------------------------------------------------------------------

void cw_plugin_resume_exe_added(cw_plugin_client_t* c, uint64_t id, const int32_t* devices,
                                size_t n, cw_plugin_exe_t* exe) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return;
  int32_t* copy = malloc((n ? n : 1) * sizeof(*copy));
  if (!copy) return;  // then it is not announced: its launches fail NOT_FOUND after a restart
  memcpy(copy, devices, n * sizeof(*copy));
  pthread_mutex_lock(&r->mu);
  if (r->num_exes == r->cap_exes) {
    size_t cap = r->cap_exes ? 2 * r->cap_exes : 16;
    cw__exe_t* grown = realloc(r->exes, cap * sizeof(*grown));
    if (grown) {
      r->exes = grown;
      r->cap_exes = cap;
    }
  }
  if (r->num_exes < r->cap_exes) {
    if (exe) atomic_fetch_add_explicit(&exe->refs, 1, memory_order_relaxed);
    r->exes[r->num_exes++] = (cw__exe_t){id, copy, n, exe};
    copy = NULL;
  }
  pthread_mutex_unlock(&r->mu);
  free(copy);
}

void cw_plugin_resume_exe_deleted(cw_plugin_client_t* c, uint64_t id) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return;
  cw_plugin_exe_t* exe = NULL;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->num_exes; ++i) {
    if (r->exes[i].id != id) continue;
    free(r->exes[i].devices);
    exe = r->exes[i].exe;
    r->exes[i] = r->exes[--r->num_exes];
    break;
  }
  pthread_mutex_unlock(&r->mu);
  cw_plugin_exe_release(exe);
}

cw_plugin_exe_t* cw_plugin_resume_exe_find(cw_plugin_client_t* c, uint64_t id) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return NULL;
  cw_plugin_exe_t* exe = NULL;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->num_exes && !exe; ++i) {
    if (r->exes[i].id != id || !r->exes[i].exe) continue;
    exe = r->exes[i].exe;
    atomic_fetch_add_explicit(&exe->refs, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&r->mu);
  return exe;
}

bool cw_plugin_resume_events_muted(cw_plugin_client_t* c) {
  return c->resume && atomic_load_explicit(&c->resume->muted, memory_order_acquire);
}

bool cw_plugin_resume_hold_event(cw_plugin_client_t* c, const ProtobufCMessage* msg) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return false;
  pthread_mutex_lock(&r->mu);
  bool muted = atomic_load_explicit(&r->muted, memory_order_acquire);
  if (muted && r->keep_events && msg) {
    if (r->num_kept == r->cap_kept) {
      size_t cap = r->cap_kept ? 2 * r->cap_kept : 8;
      Causeway__V1__ClusterEvent** grown = realloc(r->kept, cap * sizeof(*grown));
      if (grown) {
        r->kept = grown;
        r->cap_kept = cap;
      }
    }
    ProtobufCMessage* copy = r->num_kept < r->cap_kept ? cw_msg_copy(msg) : NULL;
    if (copy) r->kept[r->num_kept++] = (Causeway__V1__ClusterEvent*)copy;
  }
  pthread_mutex_unlock(&r->mu);
  return muted;
}

// Hands the kept events to health, in order, until none is left (mu held;
// let go meanwhile: the reader keeps what comes then, behind them).
static void cw__replay_kept(cw_plugin_resume_t* r) {
  while (r->num_kept) {
    Causeway__V1__ClusterEvent** list = r->kept;
    size_t n = r->num_kept;
    r->kept = NULL;
    r->num_kept = r->cap_kept = 0;
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < n; ++i) {
      cw_plugin_health_on_event(r->c, list[i]);
      protobuf_c_message_free_unpacked(&list[i]->base, NULL);
    }
    free(list);
    pthread_mutex_lock(&r->mu);
  }
  r->keep_events = false;
}

// ---- Watching: PING ------------------------------------------------------------------

typedef struct cw__ping_s {
  cw_plugin_resume_t* r;
  uint64_t gen;
} cw__ping_t;

static void cw__ping_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw__ping_t* p = user;
  cw_plugin_resume_t* r = p->r;
  pthread_mutex_lock(&r->mu);
  r->ping_out = false;
  if (status && cw_plugin_health_controller_lost(r->c, status)) cw__mark_lost(r, p->gen);
  pthread_mutex_unlock(&r->mu);
  cw_status_free(status);
  free(p);
}

// Sends a PING on `ctrl` (mu not held).
static void cw__ping(cw_plugin_resume_t* r, cw_client_t* ctrl, uint64_t gen) {
  cw__ping_t* p = malloc(sizeof(*p));
  if (p) {
    p->r = r;
    p->gen = gen;
  }
  Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
  cw_status_t s = p ? cw_client_send(ctrl, CW_MSG_PING, &ping.base, NULL, 0, NULL, cw__ping_done,
                                     p, NULL)
                    : cw__oom();
  if (!s) return;
  if (p) {
    cw__ping_done(p, s, NULL);  // a connection that refuses sends is lost
  } else {
    cw_status_free(s);
    pthread_mutex_lock(&r->mu);
    r->ping_out = false;
    pthread_mutex_unlock(&r->mu);
  }
}

// ---- Reconnecting ----------------------------------------------------------------------

// SESSION_RESUME for the session as it stands now, and its storage.
typedef struct cw__request_s {
  Causeway__V1__SessionResumeRequest req;
  Causeway__V1__OpenSessionRequest open;
  Causeway__V1__ResumeDevice* devs;
  Causeway__V1__ResumeDevice** dptrs;
  Causeway__V1__ResumeExecutable* exes;
  Causeway__V1__ResumeExecutable** eptrs;
} cw__request_t;

static void cw__request_free(cw__request_t* q) {
  for (size_t i = 0; q->exes && i < q->req.n_executables; ++i) free(q->exes[i].devices);
  free(q->devs);
  free(q->dptrs);
  free(q->exes);
  free(q->eptrs);
}

static cw_status_t cw__request(cw_plugin_resume_t* r, uint32_t wait_ms, cw__request_t* q) {
  cw_plugin_client_t* c = r->c;
  memset(q, 0, sizeof(*q));
  causeway__v1__session_resume_request__init(&q->req);
  if (r->open) {
    q->open = *r->open;  // shallow: r->open outlives the request
  } else {
    causeway__v1__open_session_request__init(&q->open);
  }
  q->open.wait_ms = wait_ms;
  q->req.open = &q->open;
  q->devs = calloc(c->num_devices + 1, sizeof(*q->devs));
  q->dptrs = calloc(c->num_devices + 1, sizeof(*q->dptrs));
  if (!q->devs || !q->dptrs) return cw__oom();
  for (size_t i = 0; i < c->num_devices; ++i) {
    causeway__v1__resume_device__init(&q->devs[i]);
    q->devs[i].id = c->devices[i].global_id;
    q->devs[i].worker_name = c->devices[i].worker->name;
    q->devs[i].local_id = c->devices[i].local_id;
    q->dptrs[i] = &q->devs[i];
  }
  q->req.devices = q->dptrs;
  q->req.n_devices = c->num_devices;
  pthread_mutex_lock(&r->mu);
  size_t n = r->num_exes;
  q->exes = calloc(n + 1, sizeof(*q->exes));
  q->eptrs = calloc(n + 1, sizeof(*q->eptrs));
  cw_status_t s = (q->exes && q->eptrs) ? cw_ok_status() : cw__oom();
  for (size_t i = 0; !s && i < n; ++i) {
    causeway__v1__resume_executable__init(&q->exes[i]);
    q->exes[i].exe_id = r->exes[i].id;
    q->exes[i].devices = malloc((r->exes[i].n + 1) * sizeof(int32_t));
    if (!q->exes[i].devices) {
      s = cw__oom();
      break;
    }
    memcpy(q->exes[i].devices, r->exes[i].devices, r->exes[i].n * sizeof(int32_t));
    q->exes[i].n_devices = r->exes[i].n;
    q->eptrs[i] = &q->exes[i];
    q->req.n_executables = i + 1;
  }
  pthread_mutex_unlock(&r->mu);
  q->req.executables = q->eptrs;
  return s;
}

static const Causeway__V1__WorkerInfo* cw__info_worker(const Causeway__V1__SessionInfo* info,
                                                       uint32_t index, const char* name) {
  for (size_t i = 0; i < info->n_workers; ++i) {
    const Causeway__V1__WorkerInfo* wi = info->workers[i];
    if (name ? !strcmp(wi->name ? wi->name : "", name) : wi->index == index) return wi;
  }
  return NULL;
}

// Checks that the resumed session has every device of ours under the same id
// on the same worker, then takes the new controller's worker numbering,
// leases and incarnations.
static cw_status_t cw__apply_info(cw_plugin_client_t* c, const Causeway__V1__SessionInfo* info) {
  for (size_t i = 0; i < c->num_devices; ++i) {
    const cw_plugin_device_t* d = &c->devices[i];
    const Causeway__V1__GlobalDevice* gd = NULL;
    for (size_t k = 0; !gd && k < info->n_devices; ++k) {
      if (info->devices[k]->global_id == d->global_id) gd = info->devices[k];
    }
    const Causeway__V1__WorkerInfo* wi = gd ? cw__info_worker(info, gd->worker_index, NULL) : NULL;
    if (!gd || !wi || !gd->device || gd->device->local_id != d->local_id ||
        strcmp(wi->name ? wi->name : "", d->worker->name) != 0) {
      return cw_make_status(CW_FAILED_PRECONDITION, "the resumed session does not have device %d "
                            "(device %d of worker %s) under that id", d->global_id, d->local_id,
                            d->worker->name);
    }
  }
  for (size_t i = 0; i < c->num_workers; ++i) {
    cw_plugin_worker_t* w = &c->workers[i];
    const Causeway__V1__WorkerInfo* wi = cw__info_worker(info, 0, w->name);
    if (!wi) continue;  // none of the session's devices is there
    w->index = wi->index;
    cw_plugin_worker_set_direct(w, wi->direct_launch && !atomic_load(&c->leases_withdrawn));
    bool moved = false;
    pthread_mutex_lock(&w->mu);
    w->incarnation = wi->incarnation;
    if (wi->address && wi->address[0] && strcmp(wi->address, cw_plugin_worker_address(w)) != 0) {
      // Replaced while the controller was away: reconnect there on next use.
      char* address = strdup(wi->address);
      if (address) {
        free(w->next_address);
        w->next_address = address;
        w->next_incarnation = wi->incarnation;
        moved = true;
      }
    } else if (wi->address && wi->address[0] &&
               (w->next_address || atomic_load(&w->worker_down))) {
      // A replacement still to join was named in the old controller's
      // incarnations, which HEALTH_REJOIN would name: this one counts from
      // 0 again. It names the worker where we are (one at the same address).
      // Or the old controller reported the worker down and went before it
      // named a replacement: the one this controller names is joined as one.
      bool same = w->next_address && strcmp(w->next_address, wi->address) == 0;
      char* address = same ? NULL : strdup(wi->address);
      if (address) {
        free(w->next_address);
        w->next_address = address;
      }
      if (same || address) w->next_incarnation = wi->incarnation;
    }
    pthread_mutex_unlock(&w->mu);
    if (moved) {
      char why[512];
      snprintf(why, sizeof(why), "worker %s (%s) is unavailable: it was replaced by one at %s "
               "while the controller restarted", w->name, cw_plugin_worker_address(w), wi->address);
      atomic_store(&w->worker_down, true);  // no reattach to the old one (cw_plugin_health.c)
      cw_plugin_worker_mark_dead(w, why);
      cw_client_t* conn = w->conn;
      if (conn) cw_client_shutdown(conn);
    }
  }
  return cw_ok_status();
}

// One attempt: connect in our session id and resume it there. On success
// *out_conn is the new connection with the session resumed.
static cw_status_t cw__attempt(cw_plugin_resume_t* r, int64_t deadline, cw_client_t** out_conn) {
  cw_plugin_client_t* c = r->c;
  *out_conn = NULL;
  int64_t left = deadline - cw_time_now_ms();
  if (left < 1) left = 1;
  cw_client_options_t o;
  cw_plugin_client_controller_options(c, &o);
  o.session_id = c->session_id;
  o.connect_timeout_ms = left < CW__CONNECT_TIMEOUT_MS ? (int)left : CW__CONNECT_TIMEOUT_MS;
  cw_client_t* conn = NULL;
  cw_status_t s = cw_client_connect(c->ctrl_address, &o, &conn);
  if (s) return s;
  if (cw_client_session_id(conn) != c->session_id) {
    cw_client_release(conn);
    return cw_make_status(CW_FAILED_PRECONDITION, "the controller gave session %" PRIu64
                          " instead of %" PRIu64, cw_client_session_id(conn), c->session_id);
  }
  pthread_mutex_lock(&r->mu);
  bool stopping = r->stopping;
  if (!stopping) r->connecting = conn;  // cw_plugin_resume_stop interrupts the wait below
  cw__drop_kept(r);
  r->keep_events = !stopping;
  pthread_mutex_unlock(&r->mu);
  cw__request_t q;
  left = deadline - cw_time_now_ms();
  s = stopping ? cw_make_status(CW_CANCELLED, "stopping")
               : cw__request(r, (uint32_t)(left > 0 ? left : 0), &q);
  ProtobufCMessage* reply = NULL;
  if (!s) s = cw_client_call(conn, CW_MSG_SESSION_RESUME, &q.req.base, NULL, 0, NULL, &reply, NULL);
  if (!stopping) cw__request_free(&q);
  pthread_mutex_lock(&r->mu);
  r->connecting = NULL;
  pthread_mutex_unlock(&r->mu);
  if (!s) {
    s = cw__apply_info(c, (const Causeway__V1__SessionInfo*)reply);
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  if (s) {
    cw_client_release(conn);
    pthread_mutex_lock(&r->mu);
    cw__drop_kept(r);
    pthread_mutex_unlock(&r->mu);
    return s;
  }
  *out_conn = conn;
  return cw_ok_status();
}

static int cw__by_worker_seq(const void* a, const void* b) {
  const cw_plugin_parked_t* x = *(const cw_plugin_parked_t* const*)a;
  const cw_plugin_parked_t* y = *(const cw_plugin_parked_t* const*)b;
  if (x->worker != y->worker) return x->worker < y->worker ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

// Sends every parked request again on `ctrl`, in seq order per worker.
static void cw__resend(cw_plugin_parked_t* list, cw_client_t* ctrl, uint64_t gen) {
  size_t n = 0;
  for (cw_plugin_parked_t* p = list; p; p = p->next) n++;
  cw_plugin_parked_t** order = malloc((n + 1) * sizeof(*order));
  if (!order) {  // unordered rather than lost
    while (list) {
      cw_plugin_parked_t* p = list;
      list = p->next;
      p->resend(p, ctrl, gen, cw_ok_status());
    }
    return;
  }
  n = 0;
  for (cw_plugin_parked_t* p = list; p; p = p->next) order[n++] = p;
  qsort(order, n, sizeof(*order), cw__by_worker_seq);
  for (size_t i = 0; i < n; ++i) order[i]->resend(order[i], ctrl, gen, cw_ok_status());
  free(order);
}

static void cw__fail_parked(cw_plugin_parked_t* list, cw_status_t failure) {
  while (list) {
    cw_plugin_parked_t* p = list;
    list = p->next;
    p->resend(p, NULL, 0, cw_status_clone(failure));
  }
  cw_status_free(failure);
}

static bool cw__retryable(cw_status_t s) {
  return cw_status_code(s) == CW_UNAVAILABLE || cw_status_code(s) == CW_DEADLINE_EXCEEDED;
}

// The connection was lost: reconnect and resume until the bound (this
// thread, mu not held).
static void cw__reconnect(cw_plugin_resume_t* r) {
  cw_plugin_client_t* c = r->c;
  // Whatever still waits on the old connection fails now, also on a hung
  // controller, so its senders park their requests and let go of send_lock.
  cw_client_shutdown(c->ctrl);
  int64_t start = cw_time_now_ms();
  int64_t deadline = start + r->bound_ms;
  fprintf(stderr, "causeway: lost the controller at %s; reconnecting and resuming session %" PRIu64
          " (for up to %" PRId64 " ms, CAUSEWAY_CONTROLLER_RECONNECT_MS)\n", c->ctrl_address,
          c->session_id, r->bound_ms);
  int64_t delay = CW__BACKOFF_FIRST_MS;
  cw_status_t last = cw_ok_status();
  for (;;) {
    // Too little time left for an attempt to say more than the last one did.
    if (last && deadline - cw_time_now_ms() < CW__ATTEMPT_MIN_MS) break;
    cw_client_t* conn = NULL;
    cw_status_t s = cw__attempt(r, deadline, &conn);
    pthread_mutex_lock(&r->mu);
    bool stopping = r->stopping;
    pthread_mutex_unlock(&r->mu);
    if (stopping) {
      if (conn) cw_client_release(conn);
      cw_status_free(s);
      cw_status_free(last);
      return;
    }
    if (!s) {
      pthread_rwlock_wrlock(&r->send_lock);
      pthread_mutex_lock(&r->mu);
      cw_client_t** grown = realloc(r->retired, (r->num_retired + 1) * sizeof(*grown));
      if (grown) {
        r->retired = grown;
        r->retired[r->num_retired++] = c->ctrl;
      }  // else it is leaked rather than freed under a reader
      __atomic_store_n(&c->ctrl, conn, __ATOMIC_RELEASE);  // cw__ctrl's fork check
      uint64_t gen = ++r->gen;
      cw_plugin_parked_t* list = r->parked;
      r->parked = NULL;
      pthread_mutex_unlock(&r->mu);
      cw__resend(list, conn, gen);  // before anything new: they hold the older seqs
      pthread_mutex_lock(&r->mu);
      bool again = r->parked != NULL;  // the new connection failed them already
      if (again) cw__drop_kept(r);
      else cw__replay_kept(r);  // still muted: what comes meanwhile is kept behind
      if (!again) {
        r->up = true;
        r->ping_out = false;
        atomic_store_explicit(&r->muted, false, memory_order_release);
        // A withdrawal that came while events were muted (cw__on_cluster_event).
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load(&c->leases_withdrawn)) cw_plugin_worker_withdraw_leases(c);
        pthread_cond_broadcast(&r->cv);
      }
      pthread_mutex_unlock(&r->mu);
      pthread_rwlock_unlock(&r->send_lock);
      if (!again) {
        fprintf(stderr, "causeway: resumed session %" PRIu64 " on the controller at %s after "
                "%.2f s\n", c->session_id, c->ctrl_address,
                (double)(cw_time_now_ms() - r->lost_ms) / 1000.0);
        cw_status_free(last);
        return;
      }
      cw_client_shutdown(conn);
      s = cw_make_status(CW_UNAVAILABLE, "connection to %s lost while resuming",
                         c->ctrl_address);
    }
    bool retry = cw__retryable(s) && cw_time_now_ms() < deadline;
    cw_status_free(last);
    last = s;
    if (!retry) break;
    pthread_mutex_lock(&r->mu);
    int64_t left = deadline - cw_time_now_ms();
    bool go_on = cw__nap(r, delay < left ? delay : (left > 0 ? left : 0));
    pthread_mutex_unlock(&r->mu);
    if (!go_on) {
      cw_status_free(last);
      return;
    }
    delay = delay * 2 > CW__BACKOFF_MAX_MS ? CW__BACKOFF_MAX_MS : delay * 2;
  }
  cw_status_t failure =
      cw__retryable(last)
          ? cw_make_status(CW_UNAVAILABLE, "causeway: the controller at %s is unavailable: it "
                           "did not come back within %" PRId64 " ms "
                           "(CAUSEWAY_CONTROLLER_RECONNECT_MS): %s", c->ctrl_address,
                           r->bound_ms, cw_status_message(last))
          : cw_make_status(CW_UNAVAILABLE, "causeway: the controller at %s is unavailable: "
                           "session %" PRIu64 " could not be resumed there: %s",
                           c->ctrl_address, c->session_id, cw_status_message(last));
  cw_status_free(last);
  fprintf(stderr, "%s\n", cw_status_message(failure));
  pthread_mutex_lock(&r->mu);
  r->failure = failure;
  cw_plugin_parked_t* list = r->parked;
  r->parked = NULL;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  cw__fail_parked(list, cw_status_clone(failure));
}

static void* cw__main(void* arg) {
  cw_plugin_resume_t* r = arg;
  pthread_mutex_lock(&r->mu);
  while (!r->stopping) {
    if (r->lost) {
      r->lost = false;
      pthread_mutex_unlock(&r->mu);
      cw__reconnect(r);
      pthread_mutex_lock(&r->mu);
      continue;
    }
    if (r->up && !r->ping_out) {
      r->ping_out = true;
      cw_client_t* ctrl = r->c->ctrl;
      uint64_t gen = r->gen;
      pthread_mutex_unlock(&r->mu);
      cw__ping(r, ctrl, gen);
      pthread_mutex_lock(&r->mu);
      continue;
    }
    (void)cw__nap(r, CW_PLUGIN_RESUME_PING_MS);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

cw_status_t cw_plugin_resume_start(cw_plugin_client_t* c) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return cw_ok_status();
  int rc = pthread_create(&r->thread, NULL, cw__main, r);
  if (rc) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "causeway: cannot start the controller watch "
                          "thread: %s", strerror(rc));
  }
  pthread_setname_np(r->thread, "cw-ctl-watch");
  r->started = true;
  return cw_ok_status();
}

void cw_plugin_resume_stop(cw_plugin_client_t* c) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->stopping = true;
  if (r->connecting) cw_client_shutdown(r->connecting);
  cw_plugin_parked_t* list = r->parked;
  r->parked = NULL;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (r->started) pthread_join(r->thread, NULL);
  r->started = false;
  cw__fail_parked(list, cw_make_status(CW_CANCELLED, "causeway: the client was destroyed "
                                       "while the controller at %s was away",
                                       c->ctrl_address));
}

void cw_plugin_resume_release(cw_plugin_client_t* c) {
  cw_plugin_resume_t* r = c->resume;
  if (!r) return;
  for (size_t i = 0; i < r->num_retired; ++i) cw_client_release(r->retired[i]);
  free(r->retired);
  for (size_t i = 0; i < r->num_exes; ++i) {
    free(r->exes[i].devices);
    cw_plugin_exe_release(r->exes[i].exe);
  }
  free(r->exes);
  if (r->open) protobuf_c_message_free_unpacked(&r->open->base, NULL);
  cw__drop_kept(r);
  free(r->kept);
  cw_status_free(r->failure);
  pthread_rwlock_destroy(&r->send_lock);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r);
  c->resume = NULL;
}
