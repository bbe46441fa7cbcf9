// Fills of relayed requests' seqs on connections of their own (cw_plugin_fill.h).
#include "cw_plugin_fill.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "cw_log.h"
#include "cw_msg.h"
#include "cw_plugin_client.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

typedef struct cw__fill_s {
  struct cw__fill_s* next;
  cw_plugin_worker_t* w;
  uint32_t epoch;
  uint64_t life;
  uint64_t seq;
} cw__fill_t;

// A connection that carried fills: open until each is answered (one held
// at the worker is answered in its turn; closed first, unread ones are lost).
typedef struct cw__oneshot_s {
  struct cw__oneshot_s* next;
  struct cw_plugin_fills_s* fills;
  cw_client_t* conn;
  size_t waiting;  // guarded by fills->mu
} cw__oneshot_t;

// A thread filling one worker's seqs: a connect to a worker that does not
// answer waits out its timeout (8 s), and the other workers' fills (and so
// their requests after the holes) must not wait behind it.
typedef struct cw__runner_s {
  struct cw__runner_s* next;
  struct cw_plugin_fills_s* fills;
  cw_plugin_worker_t* w;
  cw__fill_t* q;
  pthread_t thread;
  bool done;  // guarded by fills->mu
} cw__runner_t;

// Fills sent on a worker's own link because a connection of their own was
// refused: counted until answered, while the runner tries that connection
// again (cw__fill_behind). Their answers may come after the fills' state is
// gone (the link outlives cw_plugin_fill_stop), so this one stands alone.
typedef struct cw__behind_s {
  struct cw__behind_s* next;  // fills->behind; guarded by fills->mu
  const cw__fill_t* first;    // the group's: its worker, epoch and life
  pthread_mutex_t mu;
  pthread_cond_t cv;  // answered, stop, or more fills queued for the worker
  size_t waiting;     // sent and not answered
  size_t refs;        // the runner's and each waiting fill's
  bool stop;          // the client ends: no more connects
  bool more;          // fills for the worker were queued meanwhile
} cw__behind_t;

struct cw_plugin_fills_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cw__behind_t* behind;  // the runners' waits to connect again
  cw__fill_t* queue;  // newest first; a worker's wait while a runner has it
  cw__oneshot_t* open;
  cw__runner_t* runners;  // at most one per worker
  bool started, stop;
  pthread_t thread;
};

static void cw__fill_answered(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  // A duplicate (the worker had the seq) or a refusal of an earlier life's
  // seq is as good as applied: the seq is no hole there.
  cw_status_free(status);
  cw__oneshot_t* o = user;
  pthread_mutex_lock(&o->fills->mu);
  if (--o->waiting == 0) pthread_cond_signal(&o->fills->cv);
  pthread_mutex_unlock(&o->fills->mu);
}

static int cw__fill_order(const void* a, const void* b) {
  const cw__fill_t* x = *(cw__fill_t* const*)a;
  const cw__fill_t* y = *(cw__fill_t* const*)b;
  if (x->w != y->w) return x->w < y->w ? -1 : 1;
  if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
  if (x->life != y->life) return x->life < y->life ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

// Drops a reference, b->mu held; unlocks it.
static void cw__behind_drop_unlock(cw__behind_t* b) {
  bool last = --b->refs == 0;
  pthread_mutex_unlock(&b->mu);
  if (!last) return;
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

static void cw__behind_answered(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw_status_free(status);  // a duplicate: the fill on a connection of its own came first
  cw__behind_t* b = user;
  pthread_mutex_lock(&b->mu);
  if (--b->waiting == 0) pthread_cond_broadcast(&b->cv);
  cw__behind_drop_unlock(b);
}

// Tells every runner waiting to connect again to stop. With f->mu held.
static void cw__behind_stop_locked(struct cw_plugin_fills_s* f) {
  for (cw__behind_t* b = f->behind; b; b = b->next) {
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
  }
}

static bool cw__worker_gone(const cw__fill_t* first) {
  cw_plugin_worker_t* w = first->w;
  return first->epoch != atomic_load_explicit(&w->epoch, memory_order_acquire) ||
         atomic_load_explicit(&w->dead, memory_order_acquire);
}

static cw_status_t cw__fill_connect(cw_plugin_worker_t* w, cw_client_t** conn) {
  cw_client_options_t o;
  cw_plugin_client_worker_options(w->client, &o);
  return cw_client_connect(cw_plugin_worker_address(w), &o, conn);
}

// Sends the fill of `fill` on its worker's link, counted in b until answered.
static void cw__send_behind(cw__behind_t* b, const cw__fill_t* fill) {
  cw_plugin_worker_t* w = fill->w;
  if (atomic_load_explicit(&w->dead, memory_order_acquire)) return;
  pthread_mutex_lock(&b->mu);
  b->waiting++;
  b->refs++;
  pthread_mutex_unlock(&b->mu);
  if (cw_plugin_worker_fill_seq(w, fill->seq, fill->epoch, cw__behind_answered, b)) {
    atomic_fetch_add_explicit(&w->fills_behind, 1, memory_order_relaxed);
    return;
  }
  pthread_mutex_lock(&b->mu);
  b->waiting--;
  b->refs--;
  pthread_mutex_unlock(&b->mu);
}

// Takes the fills queued for b's worker, epoch and life off f->queue (they
// would wait for this runner) onto *extra, and sends each on the link.
static void cw__take_queued(struct cw_plugin_fills_s* f, cw__behind_t* b, cw__fill_t** extra) {
  cw__fill_t* taken = NULL;
  pthread_mutex_lock(&f->mu);
  for (cw__fill_t** p = &f->queue; *p;) {
    cw__fill_t* q = *p;
    if (q->w == b->first->w && q->epoch == b->first->epoch && q->life == b->first->life) {
      *p = q->next;
      cw__fill_t** at = &taken;  // by seq: a lower one first on the link
      while (*at && (*at)->seq < q->seq) at = &(*at)->next;
      q->next = *at;
      *at = q;
    } else {
      p = &q->next;
    }
  }
  pthread_mutex_unlock(&f->mu);
  while (taken) {
    cw__fill_t* q = taken;
    taken = q->next;
    cw__send_behind(b, q);
    q->next = *extra;  // (*extra's order does not matter: sorted before it is sent)
    *extra = q;
  }
}

// Waits for the fills on the link to be answered, at most until `deadline`
// (CLOCK_MONOTONIC ns); fills queued meanwhile for the worker go on the link
// too (onto *extra). True when a connection of their own is still needed.
static bool cw__wait_behind(struct cw_plugin_fills_s* f, cw__behind_t* b, int64_t deadline,
                            cw__fill_t** extra) {
  for (;;) {
    cw__take_queued(f, b, extra);
    struct timespec until = cw_time_timespec(deadline);
    pthread_mutex_lock(&b->mu);
    int rc = 0;
    while (!b->stop && b->waiting && !b->more && rc != ETIMEDOUT) {
      rc = pthread_cond_timedwait(&b->cv, &b->mu, &until);
    }
    bool more = b->more;
    b->more = false;
    bool needed = !b->stop && b->waiting;
    pthread_mutex_unlock(&b->mu);
    if (!needed || !more || rc == ETIMEDOUT) return needed;
  }
}

// A connection of their own was refused (the worker at --max-connections,
// evicted before HELLO by a flood) or not reached: w's own link may be
// healthy, and taking it for lost failed every request in flight on it. The
// fills go on it, behind what it carries. That stalls with the worker at its
// held cap there (it does not read that link), so until they are answered
// the connection of their own is tried again, at most every 2 s: when room
// comes, the fills go on it as well and the first to arrive applies (the
// other is refused as a duplicate). Fills queued for the worker meanwhile go
// on the link at once, and on that connection with these: waiting for this
// runner, a lower seq refused later would leave these held for it at the
// worker. A lost link is found by its own watchdog, and the reattach fills
// what never arrived. Returns a connection for the fills (g's and *extra's),
// or NULL when none is needed any more.
static cw_client_t* cw__fill_behind(struct cw_plugin_fills_s* f, cw__fill_t** g, size_t n,
                                    cw__fill_t** extra) {
  cw_plugin_worker_t* w = g[0]->w;
  cw__behind_t* b = calloc(1, sizeof(*b));
  if (!b) {  // the fills still go on the link, uncounted
    for (size_t i = 0; i < n; ++i) {
      (void)cw_plugin_worker_fill_seq(w, g[i]->seq, g[i]->epoch, NULL, NULL);
    }
    return NULL;
  }
  pthread_mutex_init(&b->mu, NULL);
  cw_time_cond_init(&b->cv);
  b->first = g[0];
  b->refs = 1;
  pthread_mutex_lock(&f->mu);
  b->stop = f->stop;
  b->next = f->behind;
  f->behind = b;
  pthread_mutex_unlock(&f->mu);
  for (size_t i = 0; i < n; ++i) cw__send_behind(b, g[i]);
  cw_client_t* conn = NULL;
  for (int64_t delay_ms = 50;; delay_ms = delay_ms < 1000 ? delay_ms * 2 : 2000) {
    if (!cw__wait_behind(f, b, cw_time_now_ns() + delay_ms * 1000000, extra) ||
        cw__worker_gone(g[0])) {
      break;
    }
    cw_status_t s = cw__fill_connect(w, &conn);
    if (!s) break;
    cw_status_free(s);
    conn = NULL;
  }
  pthread_mutex_lock(&f->mu);
  for (cw__behind_t** p = &f->behind; *p; p = &(*p)->next) {
    if (*p == b) {
      *p = b->next;
      break;
    }
  }
  pthread_mutex_unlock(&f->mu);
  pthread_mutex_lock(&b->mu);
  cw__behind_drop_unlock(b);
  return conn;
}

static int cw__seq_order(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

// Fills g[0..n) (one worker, epoch and life; seqs increasing) on a new
// connection. Without fills->mu.
static void cw__fill_group(struct cw_plugin_fills_s* f, cw__fill_t** g, size_t n) {
  cw_plugin_worker_t* w = g[0]->w;
  if (cw__worker_gone(g[0])) return;
  cw_client_t* conn = NULL;
  cw__fill_t* extra = NULL;  // fills of the same worker, epoch and life taken meanwhile
  cw_status_t s = cw__fill_connect(w, &conn);
  if (s) {
    CW_LOGW("worker %s (%s): the fill of seq %llu (a request the controller did not relay) "
            "goes on the worker's connection, and one of its own is tried again until it is "
            "answered: one of its own failed: %s", w->name, cw_plugin_worker_address(w),
            (unsigned long long)g[0]->seq, cw_status_message(s));
    cw_status_free(s);
    conn = cw__fill_behind(f, g, n, &extra);
  }
  size_t m = n;
  for (cw__fill_t* q = extra; q; q = q->next) ++m;
  uint64_t* seqs = conn ? malloc(m * sizeof(*seqs)) : NULL;
  if (conn && !seqs) CW_LOGW("out of memory: %zu seq fills dropped", m);
  m = 0;
  for (size_t i = 0; seqs && i < n; ++i) seqs[m++] = g[i]->seq;
  while (extra) {
    cw__fill_t* q = extra;
    extra = q->next;
    if (seqs) seqs[m++] = q->seq;
    free(q);
  }
  // Another life of the session there: the seqs of ours mean nothing now.
  if (!seqs || cw_client_session_key(conn) != g[0]->life) {
    free(seqs);
    if (conn) cw_client_release(conn);
    return;
  }
  qsort(seqs, m, sizeof(*seqs), cw__seq_order);  // increasing on the connection
  cw__oneshot_t* one = calloc(1, sizeof(*one));
  if (!one) {
    free(seqs);
    cw_client_release(conn);
    return;
  }
  one->fills = f;
  one->conn = conn;
  one->waiting = m + 1;  // +1: until every fill is out
  size_t unsent = 1;
  for (size_t i = 0; i < m; ++i) {
    Causeway__V1__DeleteRequest fill = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    fill.seq = seqs[i];
    fill.session_life = g[0]->life;
    cw_status_t st = cw_client_send(conn, CW_MSG_DELETE, &fill.base, NULL, 0, NULL,
                                    cw__fill_answered, one, NULL);
    if (st) ++unsent;  // its callback never runs
    cw_status_free(st);
  }
  free(seqs);
  pthread_mutex_lock(&f->mu);
  one->waiting -= unsent;
  one->next = f->open;
  f->open = one;
  pthread_mutex_unlock(&f->mu);
}

static void cw__fill_all(struct cw_plugin_fills_s* f, cw__fill_t* q) {
  size_t n = 0;
  for (cw__fill_t* p = q; p; p = p->next) ++n;
  cw__fill_t** v = n ? malloc(n * sizeof(*v)) : NULL;
  if (n && !v) CW_LOGW("out of memory: %zu seq fills dropped", n);
  n = 0;
  for (cw__fill_t* p = q; v && p; p = p->next) v[n++] = p;
  if (n) qsort(v, n, sizeof(*v), cw__fill_order);
  for (size_t i = 0; i < n;) {
    size_t k = i + 1;
    while (k < n && v[k]->w == v[i]->w && v[k]->epoch == v[i]->epoch && v[k]->life == v[i]->life) {
      ++k;
    }
    pthread_mutex_lock(&f->mu);
    bool stop = f->stop;
    pthread_mutex_unlock(&f->mu);
    if (!stop) cw__fill_group(f, v + i, k - i);
    i = k;
  }
  free(v);
  while (q) {
    cw__fill_t* next = q->next;
    free(q);
    q = next;
  }
}

// Takes the connections whose fills are all answered off f->open (all of
// them with `everyone`). With f->mu held.
static cw__oneshot_t* cw__take_done_locked(struct cw_plugin_fills_s* f, bool everyone) {
  cw__oneshot_t* done = NULL;
  for (cw__oneshot_t** p = &f->open; *p;) {
    cw__oneshot_t* o = *p;
    if (everyone || o->waiting == 0) {
      *p = o->next;
      o->next = done;
      done = o;
    } else {
      p = &o->next;
    }
  }
  return done;
}

static void cw__release_all(cw__oneshot_t* o) {
  while (o) {
    cw__oneshot_t* next = o->next;
    cw_client_release(o->conn);  // fails what is unanswered: callbacks take f->mu
    free(o);
    o = next;
  }
}

static bool cw__any_done_locked(const struct cw_plugin_fills_s* f) {
  for (const cw__oneshot_t* o = f->open; o; o = o->next) {
    if (o->waiting == 0) return true;
  }
  return false;
}

static bool cw__busy_locked(const struct cw_plugin_fills_s* f, const cw_plugin_worker_t* w) {
  for (const cw__runner_t* r = f->runners; r; r = r->next) {
    if (r->w == w) return true;
  }
  return false;
}

static bool cw__any_ready_locked(const struct cw_plugin_fills_s* f) {
  for (const cw__runner_t* r = f->runners; r; r = r->next) {
    if (r->done) return true;
  }
  for (const cw__fill_t* q = f->queue; q; q = q->next) {
    if (!cw__busy_locked(f, q->w)) return true;
  }
  return cw__any_done_locked(f);
}

static void* cw__runner_main(void* arg) {
  cw__runner_t* r = arg;
  cw__fill_all(r->fills, r->q);
  r->q = NULL;
  pthread_mutex_lock(&r->fills->mu);
  r->done = true;
  pthread_cond_signal(&r->fills->cv);
  pthread_mutex_unlock(&r->fills->mu);
  return NULL;
}

// Takes the runners that are done off f->runners (all of them with
// `everyone`). With f->mu held.
static cw__runner_t* cw__take_runners_locked(struct cw_plugin_fills_s* f, bool everyone) {
  cw__runner_t* done = NULL;
  for (cw__runner_t** p = &f->runners; *p;) {
    cw__runner_t* r = *p;
    if (everyone || r->done) {
      *p = r->next;
      r->next = done;
      done = r;
    } else {
      p = &r->next;
    }
  }
  return done;
}

static void cw__join_runners(cw__runner_t* r) {
  while (r) {
    cw__runner_t* next = r->next;
    pthread_join(r->thread, NULL);
    free(r);
    r = next;
  }
}

// Starts a runner for each worker with queued fills and none running yet.
// With f->mu held; let go while a runner is made inline (no thread).
static void cw__start_runners_locked(struct cw_plugin_fills_s* f) {
  cw__fill_t* q = f->queue;
  f->queue = NULL;
  while (q) {
    cw_plugin_worker_t* w = q->w;
    cw__fill_t *mine = NULL, *rest = NULL;
    for (cw__fill_t* p = q; p;) {
      cw__fill_t* next = p->next;
      cw__fill_t** to = p->w == w ? &mine : &rest;
      p->next = *to;
      *to = p;
      p = next;
    }
    q = rest;
    if (!cw__busy_locked(f, w)) {
      cw__runner_t* r = calloc(1, sizeof(*r));
      if (r) *r = (cw__runner_t){.fills = f, .w = w, .q = mine};
      if (r && pthread_create(&r->thread, NULL, cw__runner_main, r) == 0) {
        r->next = f->runners;
        f->runners = r;
        continue;
      }
      free(r);
      pthread_mutex_unlock(&f->mu);
      cw__fill_all(f, mine);  // no thread: here, the others waiting
      pthread_mutex_lock(&f->mu);
      continue;
    }
    // Its runner is at it: after it.
    while (mine) {
      cw__fill_t* next = mine->next;
      mine->next = f->queue;
      f->queue = mine;
      mine = next;
    }
  }
}

static void* cw__fill_main(void* arg) {
  struct cw_plugin_fills_s* f = arg;
  pthread_mutex_lock(&f->mu);
  while (!f->stop) {
    if (!cw__any_ready_locked(f)) {
      pthread_cond_wait(&f->cv, &f->mu);
      continue;
    }
    cw__runner_t* finished = cw__take_runners_locked(f, false);
    cw__oneshot_t* done = cw__take_done_locked(f, false);
    cw__start_runners_locked(f);
    pthread_mutex_unlock(&f->mu);
    cw__join_runners(finished);
    cw__release_all(done);
    pthread_mutex_lock(&f->mu);
  }
  // Those still at it see stop between groups.
  cw__runner_t* all = cw__take_runners_locked(f, true);
  pthread_mutex_unlock(&f->mu);
  cw__join_runners(all);
  return NULL;
}

static struct cw_plugin_fills_s* cw__fills(cw_plugin_client_t* c) {
  struct cw_plugin_fills_s* f = atomic_load_explicit(&c->fills, memory_order_acquire);
  if (f) return f;
  f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  struct cw_plugin_fills_s* none = NULL;
  if (atomic_compare_exchange_strong(&c->fills, &none, f)) return f;
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
  return none;  // another thread's
}

void cw_plugin_fill_later(cw_plugin_worker_t* w, uint32_t epoch, uint64_t life, uint64_t seq) {
  if (atomic_load_explicit(&w->client->fills_closed, memory_order_acquire)) return;
  struct cw_plugin_fills_s* f = cw__fills(w->client);
  cw__fill_t* fill = f ? calloc(1, sizeof(*fill)) : NULL;
  if (!fill) {
    CW_LOGW("worker %s: out of memory queueing the fill of seq %llu", w->name,
            (unsigned long long)seq);
    return;
  }
  *fill = (cw__fill_t){.w = w, .epoch = epoch, .life = life, .seq = seq};
  pthread_mutex_lock(&f->mu);
  if (f->stop) {
    pthread_mutex_unlock(&f->mu);
    free(fill);
    return;
  }
  if (!f->started) {
    f->started = pthread_create(&f->thread, NULL, cw__fill_main, f) == 0;
    if (!f->started) {
      pthread_mutex_unlock(&f->mu);
      CW_LOGW("worker %s: no thread for the fill of seq %llu", w->name, (unsigned long long)seq);
      free(fill);
      return;
    }
  }
  fill->next = f->queue;
  f->queue = fill;
  pthread_cond_signal(&f->cv);
  for (cw__behind_t* b = f->behind; b; b = b->next) {
    if (b->first->w != w) continue;
    pthread_mutex_lock(&b->mu);
    b->more = true;  // it takes the fill (cw__take_queued)
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
  }
  pthread_mutex_unlock(&f->mu);
}

void cw_plugin_fill_close(cw_plugin_client_t* c) {
  atomic_store_explicit(&c->fills_closed, true, memory_order_release);
  struct cw_plugin_fills_s* f = atomic_load_explicit(&c->fills, memory_order_acquire);
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;  // a runner at a group finishes it; no other group starts
  pthread_cond_signal(&f->cv);
  cw__behind_stop_locked(f);  // nor waits to connect again
  pthread_mutex_unlock(&f->mu);
}

void cw_plugin_fill_stop(cw_plugin_client_t* c) {
  cw_plugin_fill_close(c);
  struct cw_plugin_fills_s* f = atomic_exchange_explicit(&c->fills, NULL, memory_order_acq_rel);
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_signal(&f->cv);
  cw__behind_stop_locked(f);
  bool started = f->started;
  pthread_mutex_unlock(&f->mu);
  if (started) pthread_join(f->thread, NULL);
  pthread_mutex_lock(&f->mu);
  cw__fill_t* q = f->queue;
  f->queue = NULL;
  cw__oneshot_t* open = cw__take_done_locked(f, true);
  pthread_mutex_unlock(&f->mu);
  cw__release_all(open);
  while (q) {
    cw__fill_t* next = q->next;
    free(q);
    q = next;
  }
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}
