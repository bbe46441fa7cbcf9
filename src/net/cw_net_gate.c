// Admission before authentication, accept pacing, rate-limited warnings
// (cw_net_gate.h).
#include "cw_net_gate.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cw_log.h"

void cw_net_peer_key_from_sockaddr(const struct sockaddr* sa, cw_net_peer_key_t* out) {
  memset(out, 0, sizeof(*out));
  if (!sa) return;
  if (sa->sa_family == AF_INET) {
    out->bytes[0] = 4;
    memcpy(out->bytes + 1, &((const struct sockaddr_in*)sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    out->bytes[0] = 6;
    memcpy(out->bytes + 1, &((const struct sockaddr_in6*)sa)->sin6_addr, 16);
  }
}

// --- Entries per address -----------------------------------------------------------

static size_t cw__hash(const cw_net_peer_key_t* k) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < sizeof(k->bytes); ++i) h = (h ^ k->bytes[i]) * 1099511628211ull;
  return (size_t)h;
}

static bool cw__key_eq(const cw_net_peer_key_t* a, const cw_net_peer_key_t* b) {
  return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

// The slot of `key`, or the free slot where it would go.
static size_t cw__slot(const cw_net_gate_t* g, const cw_net_peer_key_t* key) {
  size_t mask = g->peers_cap - 1;
  size_t i = cw__hash(key) & mask;
  while (g->peers[i].count && !cw__key_eq(&g->peers[i].key, key)) i = (i + 1) & mask;
  return i;
}

size_t cw_net_gate_peer_count(const cw_net_gate_t* g, const cw_net_peer_key_t* key) {
  return g->peers[cw__slot(g, key)].count;
}

static void cw__peer_add(cw_net_gate_t* g, const cw_net_peer_key_t* key) {
  cw_net_gate_peer_t* p = &g->peers[cw__slot(g, key)];
  if (p->count++ == 0) {
    p->key = *key;
    p->active = 0;
    g->distinct++;
  }
}

// Linear probing without tombstones: emptying a slot moves later members of
// its run back so that every key stays reachable from its home slot.
static void cw__peer_remove(cw_net_gate_t* g, const cw_net_peer_key_t* key, bool active) {
  size_t mask = g->peers_cap - 1;
  size_t i = cw__slot(g, key);
  assert(g->peers[i].count > 0);
  if (active) g->peers[i].active--;
  if (--g->peers[i].count > 0) return;
  g->distinct--;
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!g->peers[j].count) break;
    size_t home = cw__hash(&g->peers[j].key) & mask;
    // Move j into the hole at i unless its home lies cyclically in (i, j].
    bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    g->peers[i] = g->peers[j];
    g->peers[j].count = 0;
    i = j;
  }
}

// --- The gate ------------------------------------------------------------------------

cw_status_t cw_net_gate_initialize(cw_net_gate_t* g, size_t max_total, size_t max_per_peer) {
  memset(g, 0, sizeof(*g));
  if (max_total < 1) max_total = 1;
  if (max_per_peer == 0 || max_per_peer > max_total) max_per_peer = max_total;
  g->max_total = max_total;
  g->max_per_peer = max_per_peer;
  // Room for max_total + 1 addresses at most half full.
  size_t cap = 16;
  while (cap < 2 * (max_total + 1)) cap *= 2;
  g->peers = calloc(cap, sizeof(*g->peers));
  if (!g->peers) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the peer table");
  g->peers_cap = cap;
  return cw_ok_status();
}

void cw_net_gate_deinitialize(cw_net_gate_t* g) {
  free(g->peers);
  memset(g, 0, sizeof(*g));
}

static void cw__unlink(cw_net_gate_t* g, cw_net_gate_entry_t* e) {
  cw_net_gate_entry_t** head = e->active ? &g->active_head : &g->silent_head;
  cw_net_gate_entry_t** tail = e->active ? &g->active_tail : &g->silent_tail;
  if (e->prev) e->prev->next = e->next;
  else *head = e->next;
  if (e->next) e->next->prev = e->prev;
  else *tail = e->prev;
  e->prev = e->next = NULL;
}

static void cw__append(cw_net_gate_t* g, cw_net_gate_entry_t* e) {
  cw_net_gate_entry_t** head = e->active ? &g->active_head : &g->silent_head;
  cw_net_gate_entry_t** tail = e->active ? &g->active_tail : &g->silent_tail;
  e->next = NULL;
  e->prev = *tail;
  if (*tail) (*tail)->next = e;
  else *head = e;
  *tail = e;
}

// The longest-waiting entry of `key` (any address when NULL): silent
// first, active first when `active_first`.
static cw_net_gate_entry_t* cw__oldest(const cw_net_gate_t* g, const cw_net_peer_key_t* key,
                                       bool active_first) {
  for (int i = 0; i < 2; ++i) {
    bool active = (i == 0) == active_first;
    for (cw_net_gate_entry_t* e = active ? g->active_head : g->silent_head; e; e = e->next) {
      if (!key || cw__key_eq(&e->peer, key)) return e;
    }
  }
  return NULL;
}

static const cw_net_gate_peer_t* cw__heaviest(const cw_net_gate_t* g) {
  const cw_net_gate_peer_t* best = NULL;
  for (size_t i = 0; i < g->peers_cap; ++i) {
    if (g->peers[i].count && (!best || g->peers[i].count > best->count)) best = &g->peers[i];
  }
  return best;
}

cw_net_gate_entry_t* cw_net_gate_admit(cw_net_gate_t* g, cw_net_gate_entry_t* e) {
  assert(!e->in);
  cw_net_gate_entry_t* victim = NULL;
  const cw_net_gate_peer_t* p = &g->peers[cw__slot(g, &e->peer)];
  if (p->count >= g->max_per_peer) {
    victim = cw__oldest(g, &e->peer, 2 * p->active > g->max_per_peer);
  } else if (g->count >= g->max_total) {
    // One address: its oldest is the oldest of all (no table scan).
    const cw_net_gate_peer_t* h = g->distinct == 1 ? NULL : cw__heaviest(g);
    victim = cw__oldest(g, h ? &h->key : NULL, 2 * g->active > g->max_total);
  }
  if (victim) g->evicted++;
  e->in = true;
  e->active = false;
  cw__append(g, e);
  cw__peer_add(g, &e->peer);
  g->count++;
  return victim;
}

void cw_net_gate_progress(cw_net_gate_t* g, cw_net_gate_entry_t* e) {
  if (!e->in || e->active) return;
  cw__unlink(g, e);
  e->active = true;
  cw__append(g, e);
  g->active++;
  g->peers[cw__slot(g, &e->peer)].active++;
}

void cw_net_gate_leave(cw_net_gate_t* g, cw_net_gate_entry_t* e) {
  if (!e->in) return;
  cw__unlink(g, e);
  cw__peer_remove(g, &e->peer, e->active);
  if (e->active) g->active--;
  e->in = false;
  g->count--;
}

// --- Accept pacing -----------------------------------------------------------------

static void cw__pacer_idle(uv_idle_t* h) {
  cw_net_pacer_t* p = h->data;
  uv_idle_stop(&p->idle);
  p->used = 0;
  if (!p->deferred) return;
  p->deferred = false;
  p->used = 1;
  p->accept(p->listener);
}

// A descriptor the listener's duplicate cannot have is one an accept cannot
// have either (the spare libuv keeps aside is already open).
static void cw__pacer_fd_probe(uv_timer_t* t) {
  cw_net_pacer_t* p = t->data;
  uv_os_fd_t fd;
  if (uv_fileno((const uv_handle_t*)p->listener, &fd) != 0) return;
  int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup >= 0) {
    close(dup);
    return;
  }
  if (errno != EMFILE && errno != ENFILE) return;
  bool system = errno == ENFILE;
  p->fds_out++;
  uint64_t more = 0;
  if (!cw_net_warn_limit_pass(&p->warn_fds, (int64_t)uv_now(t->loop), 60 * 1000, &more)) return;
  char limit[96];
  struct rlimit rl;
  if (system) {
    snprintf(limit, sizeof(limit), "the system's, fs.file-max");
  } else if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    snprintf(limit, sizeof(limit), "this process's limit, %llu", (unsigned long long)rl.rlim_cur);
  } else {
    snprintf(limit, sizeof(limit), "this process's limit");
  }
  CW_LOGE("%sout of file descriptors (%s): new connections are accepted and closed at once "
          "until some are freed; raise the limit (ulimit -n, LimitNOFILE=) or lower "
          "--max-connections (%" PRIu64 " more such seconds since the last such line)", p->who,
          limit, more);
}

void cw_net_pacer_initialize(cw_net_pacer_t* p, uv_loop_t* loop, uv_stream_t* listener,
                             unsigned per_pass, void (*accept)(uv_stream_t* listener),
                             const char* who) {
  memset(p, 0, sizeof(*p));
  uv_idle_init(loop, &p->idle);
  p->idle.data = p;
  uv_timer_init(loop, &p->retry);
  p->retry.data = p;
  uv_timer_init(loop, &p->fd_probe);
  p->fd_probe.data = p;
  uv_timer_start(&p->fd_probe, cw__pacer_fd_probe, 1000, 1000);
  uv_unref((uv_handle_t*)&p->fd_probe);  // keeps no loop alive
  p->listener = listener;
  p->accept = accept;
  p->who = who;
  p->per_pass = per_pass ? per_pass : 1;
  p->open = true;
}

bool cw_net_pacer_take(cw_net_pacer_t* p) {
  if (p->used < p->per_pass) {
    // The count starts again at the next idle pass (or the next deferral).
    if (p->used++ == 0) uv_idle_start(&p->idle, cw__pacer_idle);
    return true;
  }
  p->deferred = true;
  uv_idle_start(&p->idle, cw__pacer_idle);
  return false;
}

static void cw__pacer_retry(uv_timer_t* t) {
  cw_net_pacer_t* p = t->data;
  p->used = 1;
  p->accept(p->listener);
}

void cw_net_pacer_retry(cw_net_pacer_t* p) {
  if (!p->open) return;
  uv_timer_start(&p->retry, cw__pacer_retry, 100, 0);
  uint64_t more = 0;
  if (cw_net_warn_limit_pass(&p->warn_retry, (int64_t)uv_now(p->retry.loop), 60 * 1000, &more)) {
    CW_LOGE("%sout of memory accepting a connection; trying again every 100 ms (%" PRIu64
            " more failures since the last such line)", p->who, more);
  }
}

static void cw__pacer_handle_closed(uv_handle_t* h) {
  cw_net_pacer_t* p = h->data;
  if (--p->closing > 0 || !p->done) return;
  p->done((uv_handle_t*)&p->idle);
}

void cw_net_pacer_close(cw_net_pacer_t* p, uv_close_cb done) {
  if (!p->open) return;
  p->open = false;
  p->deferred = false;
  p->done = done;
  p->closing = 3;
  uv_close((uv_handle_t*)&p->idle, cw__pacer_handle_closed);
  uv_close((uv_handle_t*)&p->retry, cw__pacer_handle_closed);
  uv_close((uv_handle_t*)&p->fd_probe, cw__pacer_handle_closed);
}

// --- Rate-limited warnings ---------------------------------------------------------

bool cw_net_warn_limit_pass(cw_net_warn_limit_t* l, int64_t now_ms, int64_t period_ms,
                            uint64_t* out_suppressed) {
  if (l->last_ms && now_ms - l->last_ms < period_ms) {
    l->suppressed++;
    return false;
  }
  l->last_ms = now_ms ? now_ms : 1;
  *out_suppressed = l->suppressed;
  l->suppressed = 0;
  return true;
}
