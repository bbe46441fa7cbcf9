// Liveness (cw_client_options_t.liveness_ms): one watchdog thread for every
// connection of the process that asks for it (a JAX process holds one per
// worker: a thread each would double the threads of a fleet's client). It
// gives up on a peer that owes answers and stays quiet for the whole period,
// shutting the socket down so that the reader fails everything outstanding
// with the reason in c->hung. Frames and bulk bytes count as life.
//
// A peer asked to keep the link warm (liveness_by_keepalive: a worker, which
// may hold its reading) sends something every quarter period, whatever it is
// doing: silence means the link or the peer is gone. Another peer (the
// controller) is sent PING after half the period of silence, which it
// answers however long its other requests take, proving both ways.
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cw_client_internal.h"
#include "cw_time.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;    // wakes the thread when a connection is added or removed
static pthread_cond_t g_idle;  // a connection's PING went out (watch_busy cleared)
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cw_client_t* g_head;  // the watched connections (watch_next)
static bool g_running;       // the thread is up: it ends when the list empties
// When this thread last ran again after a gap (the process stopped by
// SIGSTOP or Ctrl-Z, or starved): silence over the gap says nothing of the
// peers, whose bytes may wait unread in the sockets, so quiet counts from
// here. Before, a process continued after more than the period gave up on
// live workers before its readers had run.
static int64_t g_ran_again_ms;

static void cw__init(void) {
  cw_time_cond_init(&g_cv);
  pthread_cond_init(&g_idle, NULL);
}

static void cw__ping_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  cw_client_t* c = user;
  cw_status_free(status);
  pthread_mutex_lock(&c->mu);
  c->ping_out = false;
  pthread_mutex_unlock(&c->mu);
}

static void cw__give_up(cw_client_t* c, int64_t quiet) {
  size_t n = strlen(c->address) + 200;
  c->hung = malloc(n);
  if (!c->hung) return;
  snprintf(c->hung, n, "no answer from %s for %lld ms%s: it is hung or unreachable (the client "
           "waits %d ms)", c->address, (long long)quiet,
           c->peer_keepalive_ms ? ", not even its keepalive" : "", c->liveness_ms);
}

// One connection's turn, with g_mu held (so that it stays alive). True when
// it is to be sent a PING (ping_out set), which the caller does without g_mu.
static bool cw__check(cw_client_t* c, int64_t now) {
  pthread_mutex_lock(&c->mu);
  // Quiet is fine while nothing is owed (a PING of ours does not count).
  if (c->closing || c->dead || c->hung || c->outstanding <= (c->ping_out ? 1u : 0u)) {
    pthread_mutex_unlock(&c->mu);
    return false;
  }
  int64_t last = atomic_load_explicit(&c->last_rx_ms, memory_order_relaxed);
  int64_t quiet = now - (last > g_ran_again_ms ? last : g_ran_again_ms);
  if (quiet >= c->liveness_ms) {
    cw__give_up(c, quiet);
    pthread_mutex_unlock(&c->mu);
    cw_client_break(c);  // the reader fails everything outstanding
    return false;
  }
  bool ping = !c->peer_keepalive_ms && !c->ping_out && quiet >= c->liveness_ms / 2;
  // Only into a socket with room: this thread serves every connection, and
  // one whose peer stopped reading must not hold it (its writer's send
  // timeout, liveness_ms, ends that connection).
  struct pollfd p = {.fd = c->fd, .events = POLLOUT};
  if (ping && (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))) ping = false;
  if (ping) c->ping_out = true;
  pthread_mutex_unlock(&c->mu);
  return ping;
}

static void cw__ping(cw_client_t* c) {
  Causeway__V1__Ping req = CAUSEWAY__V1__PING__INIT;
  cw_status_t st = cw_client_send_flags(c, CW_MSG_PING, &req.base, NULL, 0, NULL, 0,
                                        cw__ping_done, c, NULL);
  if (st) {
    pthread_mutex_lock(&c->mu);
    c->ping_out = false;
    pthread_mutex_unlock(&c->mu);
    cw_status_free(st);
  }
}

static void* cw__watchdog_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (g_head) {
    int tick = 1000;
    for (cw_client_t* c = g_head; c; c = c->watch_next) {
      int t = c->liveness_ms >= 8 ? c->liveness_ms / 4 : 2;
      if (t < tick) tick = t;
    }
    struct timespec ts = cw_time_deadline_ms(tick);
    int64_t before = cw_time_now_ms();
    pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    int64_t now = cw_time_now_ms();
    if (now - before > 2 * (int64_t)tick) g_ran_again_ms = now;  // a tick late: it did not run
    // PINGs go out without g_mu: a send may wait behind a long write, and
    // the other connections' watch, connects and releases must not.
    // watch_busy keeps a connection from being released meanwhile.
    cw_client_t* due[16];
    size_t n = 0;
    for (cw_client_t* c = g_head; c; c = c->watch_next) {
      if (n < sizeof(due) / sizeof(due[0]) && cw__check(c, now)) {
        c->watch_busy = true;
        due[n++] = c;
      }
    }
    if (!n) continue;
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < n; ++i) cw__ping(due[i]);
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < n; ++i) due[i]->watch_busy = false;
    pthread_cond_broadcast(&g_idle);
  }
  g_running = false;
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

cw_status_t cw_client_watch_add(cw_client_t* c) {
  pthread_once(&g_once, cw__init);
  pthread_mutex_lock(&g_mu);
  if (!g_running) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, cw__watchdog_main, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
      pthread_mutex_unlock(&g_mu);
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot start the watchdog thread: %s",
                            strerror(err));
    }
    pthread_setname_np(t, "cw-watchdog");  // for top -H, perf and gdb
    g_running = true;
  }
  c->watch_next = g_head;
  g_head = c;
  pthread_cond_signal(&g_cv);  // its period may be the shortest now
  pthread_mutex_unlock(&g_mu);
  return cw_ok_status();
}

void cw_client_watch_remove(cw_client_t* c) {
  if (!c->liveness_ms) return;
  pthread_mutex_lock(&g_mu);
  for (cw_client_t** p = &g_head; *p; p = &(*p)->watch_next) {
    if (*p == c) {
      *p = c->watch_next;
      break;
    }
  }
  c->watch_next = NULL;
  while (c->watch_busy) pthread_cond_wait(&g_idle, &g_mu);  // its PING is being sent
  if (!g_head) pthread_cond_signal(&g_cv);  // the thread ends now, not at its next tick
  pthread_mutex_unlock(&g_mu);
}

void cw_client_watch_forked(void) {
  // Whatever state the parent's thread left the lock in, it is not coming
  // back here; the parent's connections are not this process's to watch.
  pthread_mutex_init(&g_mu, NULL);
  cw_time_cond_init(&g_cv);
  pthread_cond_init(&g_idle, NULL);
  g_head = NULL;
  g_running = false;
}
