// Gang order at the worker: launches the controller stamped
// (LaunchRequest.sched_stamp, one total order per island over all sessions)
// are issued to PJRT in stamp order. A launch stamped k waits at the head of
// its connection's queue until k-1 was issued (besides its session's seq
// order, which is applied before a launch reaches the queue). A stamped
// launch refused before its turn (bad request, duplicate seq, dropped with a
// closed connection) passes its turn when the turn comes, so later stamps
// never wait for one that will not be issued. One that waits at its turn
// (for an input, for memory, or while its session is paused) passes its
// turn too, unless it is a part of an island's launch (cw_worker_launch.c).
// Stamps count only on
// connections from the controller (role CONTROLLER); a client's own
// sched_stamp is ignored.
//
// The record of stamps passed (issued or failed in their turn), with their
// sessions, is what STATS reports (Stats.sched_stamps): tests compare it with
// the controller's record of stamps assigned.
//
// Parts of an island's launch (LaunchRequest.prepare) may also be prepared
// ahead of their turn, in stamp order: `frontier` is the next stamp that may
// be, every stamp from `next` up to it being prepared (held for the
// controller's go) or refused early. So a member answers ready for stamp k+1
// while k waits for its go, and the controller's round trip per stamp
// overlaps the next ones' (cw_worker_launch.c says which parts qualify).
//
// Every REGISTER starts the count at 1 again, as the controller does for the
// registration. A stamp that never arrives (its frame lost with a controller
// connection) would hold every later one: when launches have waited CW__STAMP_STALL_MS
// with no progress, the order goes on from the smallest stamp waiting, with a
// warning naming the missing ones.
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_log.h"
#include "cw_worker_conn.h"
#include "cw_worker_launch.h"
#include "cw_worker_sched.h"

#define CW__STAMP_RECORD 4096
// Stamps refused before their turn are kept within this many of `next` (a
// power of two): a bit and a session each, at stamp % CW__STAMP_AHEAD_MAX.
#define CW__STAMP_AHEAD_MAX 65536
#define CW__STAMP_STALL_MS 5000

typedef struct cw_stamp_rec_s {
  uint64_t stamp;
  uint64_t session_id;
} cw_stamp_rec_t;

struct cw_stamp_state_s {
  uint64_t next;  // the stamp issued next
  uint64_t* ahead_bits;      // passed before their turn (NULL until one is)
  uint64_t* ahead_sessions;  // their sessions
  size_t num_ahead;
  uint64_t not_kept;         // refused early beyond the window (logged now and then)
  cw_conn_t* waiters;  // referenced: connections whose head waits for its turn
  bool waking, rewake;
  bool off;            // shutting down: no more waiting
  uint64_t held;       // the turn a launch waiting for memory holds (0: none)
  uint64_t frontier;   // the stamp that may be prepared ahead next (see above)
  uv_timer_t stall;    // runs while connections wait
  bool stall_init;
  uint64_t stall_next;  // `next` when the stall timer last looked
  cw_stamp_rec_t ring[CW__STAMP_RECORD];
  uint64_t count;  // ever recorded
};

static cw_stamp_state_t* cw__stamps(cw_worker_t* w) {
  if (!w->stamps) {
    w->stamps = calloc(1, sizeof(*w->stamps));
    if (w->stamps) w->stamps->next = w->stamps->frontier = 1;
  }
  return w->stamps;
}

uint64_t cw_worker_stamp_of(const cw_conn_t* c, uint16_t type, const ProtobufCMessage* msg) {
  if (type != CW_MSG_LAUNCH || !msg || cw_net_conn_role(c->nc) != CAUSEWAY__V1__ROLE__ROLE_CONTROLLER) return 0;
  return ((const Causeway__V1__LaunchRequest*)msg)->sched_stamp;
}

static void cw__stamp_stall(uv_timer_t* t);

bool cw_worker_stamp_wait(cw_conn_t* c, uint64_t stamp) {
  cw_stamp_state_t* g = cw__stamps(c->w);
  if (!g || g->off || stamp <= g->next) return false;
  c->launch_waiting = true;
  cw_worker_conn_ref(c);
  c->stamp_wait_next = g->waiters;
  g->waiters = c;
  if (!g->stall_init) {
    uv_timer_init(&c->w->loop, &g->stall);
    g->stall.data = c->w;
    g->stall_init = true;
  }
  if (!uv_is_active((uv_handle_t*)&g->stall)) {
    g->stall_next = g->next;
    uv_timer_start(&g->stall, cw__stamp_stall, CW__STAMP_STALL_MS, CW__STAMP_STALL_MS);
  }
  return true;
}

static void cw__stamp_record(cw_stamp_state_t* g, uint64_t stamp, uint64_t session_id) {
  cw_stamp_rec_t* r = &g->ring[g->count % CW__STAMP_RECORD];
  r->stamp = stamp;
  r->session_id = session_id;
  g->count++;
}

// Resumes the connections that wait for their turn; re-entry (a resumed one
// issuing and passing its stamp) only asks the outer loop to go again.
static void cw__stamp_wake(cw_worker_t* w, cw_stamp_state_t* g) {
  if (g->waking) {
    g->rewake = true;
    return;
  }
  g->waking = true;
  do {
    g->rewake = false;
    cw_conn_t* list = g->waiters;
    g->waiters = NULL;
    while (list) {
      cw_conn_t* c = list;
      list = c->stamp_wait_next;
      c->stamp_wait_next = NULL;
      c->launch_waiting = false;
      cw_worker_launch_pump(c);
      cw_worker_conn_unref(c);
    }
  } while (g->rewake);
  g->waking = false;
}

static void cw__stamp_advance(cw_worker_t* w, cw_stamp_state_t* g);

// Deferred as a wake already under way defers: `waking` set, `rewake` asks
// for the round the second call runs.
bool cw_worker_stamp_wake_defer(cw_worker_t* w) {
  cw_stamp_state_t* g = cw__stamps(w);
  if (!g || g->waking) return false;  // none, or the wake under way resumes them
  g->waking = true;
  g->rewake = false;
  return true;
}

void cw_worker_stamp_wake_resume(cw_worker_t* w, bool deferred) {
  cw_stamp_state_t* g = w->stamps;
  if (!deferred || !g) return;
  g->waking = false;
  if (g->rewake) cw__stamp_wake(w, g);
}

static bool cw__ahead_has(const cw_stamp_state_t* g, uint64_t stamp) {
  if (!g->num_ahead || stamp < g->next || stamp - g->next >= CW__STAMP_AHEAD_MAX) return false;
  size_t i = (size_t)(stamp & (CW__STAMP_AHEAD_MAX - 1));
  return (g->ahead_bits[i >> 6] >> (i & 63)) & 1;
}

static void cw__ahead_clear(cw_stamp_state_t* g, uint64_t stamp) {
  if (!cw__ahead_has(g, stamp)) return;
  size_t i = (size_t)(stamp & (CW__STAMP_AHEAD_MAX - 1));
  g->ahead_bits[i >> 6] &= ~(1ull << (i & 63));
  g->num_ahead--;
}

// The smallest stamp kept ahead; 0 if none.
static uint64_t cw__ahead_least(const cw_stamp_state_t* g) {
  for (uint64_t s = g->next; g->num_ahead && s - g->next < CW__STAMP_AHEAD_MAX; ++s) {
    if (cw__ahead_has(g, s)) return s;
  }
  return 0;
}

// Moves `next` on to `to`, dropping what was kept ahead below it.
static void cw__stamp_jump(cw_stamp_state_t* g, uint64_t to) {
  if (to <= g->next) return;
  if (to - g->next >= CW__STAMP_AHEAD_MAX) {  // all of them
    if (g->ahead_bits) memset(g->ahead_bits, 0, CW__STAMP_AHEAD_MAX / 8);
    g->num_ahead = 0;
  }
  for (; g->next < to && g->num_ahead; g->next++) cw__ahead_clear(g, g->next);
  g->next = to;
}

// Moves the frontier past `next` and past the stamps refused early (they
// pass at their turn whatever the parts before them do).
static void cw__stamp_frontier(cw_stamp_state_t* g) {
  if (g->frontier <= g->next) {
    g->frontier = g->next;
    return;
  }
  while (cw__ahead_has(g, g->frontier)) g->frontier++;
}

// No progress for a while with launches waiting: skip the stamps that never came.
static void cw__stamp_stall(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  cw_stamp_state_t* g = w->stamps;
  if (!g->waiters) {
    uv_timer_stop(t);
    return;
  }
  if (g->next != g->stall_next || (g->held && g->held == g->next) || g->frontier > g->next) {
    g->stall_next = g->next;  // progress, or a turn held on purpose
    return;
  }
  uint64_t least = UINT64_MAX;
  for (cw_conn_t* c = g->waiters; c; c = c->stamp_wait_next) {
    uint64_t s = cw_worker_launch_head_stamp(c);
    if (s && s < least) least = s;
  }
  uint64_t first_ahead = cw__ahead_least(g);
  if (first_ahead && first_ahead < least) least = first_ahead;
  if (least == UINT64_MAX || least <= g->next) return;
  CW_LOGW("gang order: stamps %" PRIu64 "..%" PRIu64 " did not arrive within %d ms; going on "
          "with %" PRIu64, g->next, least - 1, CW__STAMP_STALL_MS, least);
  cw__stamp_jump(g, least);
  g->stall_next = least;
  cw__stamp_advance(w, g);
}

void cw_worker_stamp_passed(cw_worker_t* w, uint64_t stamp, uint64_t session_id) {
  cw_stamp_state_t* g = cw__stamps(w);
  if (!g || !stamp) return;
  if (stamp > g->next && !g->off) {
    // Refused before its turn: it passes when the turn comes.
    if (!g->ahead_bits) {
      g->ahead_bits = calloc(CW__STAMP_AHEAD_MAX / 64, sizeof(uint64_t));
      g->ahead_sessions = malloc(CW__STAMP_AHEAD_MAX * sizeof(uint64_t));
      if (!g->ahead_bits || !g->ahead_sessions) {
        free(g->ahead_bits);
        free(g->ahead_sessions);
        g->ahead_bits = g->ahead_sessions = NULL;
      }
    }
    if (!g->ahead_bits || stamp - g->next >= CW__STAMP_AHEAD_MAX) {
      if (g->not_kept++ % 1024 == 0) {  // a peer may send any number
        CW_LOGW("gang order: stamp %" PRIu64 " refused early and not kept (%s; %" PRIu64 " so "
                "far); later stamps may wait", stamp,
                g->ahead_bits ? "too far ahead" : "out of memory", g->not_kept);
      }
      return;
    }
    size_t i = (size_t)(stamp & (CW__STAMP_AHEAD_MAX - 1));
    if (!cw__ahead_has(g, stamp)) {
      g->ahead_bits[i >> 6] |= 1ull << (i & 63);
      g->num_ahead++;
    }
    g->ahead_sessions[i] = session_id;
    cw__stamp_frontier(g);
    return;
  }
  cw__stamp_record(g, stamp, session_id);
  // Past `next` only when off (shutting down).
  if (stamp >= g->next) cw__stamp_jump(g, stamp + 1);
  cw__stamp_advance(w, g);
}

// Passes the stamps refused early whose turn has come; resumes the waiters.
static void cw__stamp_advance(cw_worker_t* w, cw_stamp_state_t* g) {
  while (cw__ahead_has(g, g->next)) {
    cw__stamp_record(g, g->next, g->ahead_sessions[g->next & (CW__STAMP_AHEAD_MAX - 1)]);
    cw__ahead_clear(g, g->next);
    g->next++;
  }
  cw__stamp_frontier(g);
  cw__stamp_wake(w, g);
}

void cw_worker_stamp_drop(cw_conn_t* c, uint16_t type, const ProtobufCMessage* msg) {
  uint64_t stamp = cw_worker_stamp_of(c, type, msg);
  if (stamp) cw_worker_stamp_passed(c->w, stamp, c->session ? c->session->id : 0);
}

void cw_worker_stamp_restart(cw_worker_t* w) {
  cw_stamp_state_t* g = w->stamps;
  if (!g || (g->next == 1 && g->frontier == 1 && !g->num_ahead && !g->held)) return;
  // A registration's island counts from 1 (a new controller, or a slot taken
  // over after this worker was declared dead); stamps of the previous count
  // died with its connections (even a count that had not passed stamp 1).
  CW_LOGI("gang order: stamps count from 1 again (were at %" PRIu64 ")", g->next);
  g->next = 1;
  g->stall_next = 1;
  g->frontier = 1;
  if (g->ahead_bits) memset(g->ahead_bits, 0, CW__STAMP_AHEAD_MAX / 8);
  g->num_ahead = 0;
  g->held = 0;
  cw__stamp_wake(w, g);
}

void cw_worker_stamp_hold(cw_worker_t* w, uint64_t stamp) {
  cw_stamp_state_t* g = cw__stamps(w);
  if (g) g->held = stamp;
}

void cw_worker_stamp_unhold(cw_worker_t* w, uint64_t stamp) {
  cw_stamp_state_t* g = w->stamps;
  if (g && g->held == stamp) g->held = 0;
}

bool cw_worker_stamp_may_prepare(cw_worker_t* w, uint64_t stamp) {
  cw_stamp_state_t* g = w->stamps;
  return g && !g->off && stamp > g->next && stamp == g->frontier;
}

void cw_worker_stamp_prepared(cw_worker_t* w, uint64_t stamp) {
  cw_stamp_state_t* g = cw__stamps(w);
  if (!g || stamp < g->frontier) return;
  g->frontier = stamp + 1;
  cw__stamp_frontier(g);
}

void cw_worker_stamp_stop(cw_worker_t* w) {
  cw_stamp_state_t* g = w->stamps;
  if (!g) return;
  g->off = true;
  if (g->stall_init) uv_close((uv_handle_t*)&g->stall, NULL);
  cw__stamp_wake(w, g);
}

void* cw_worker_stamp_stats(cw_worker_t* w, Causeway__V1__Stats* st) {
  cw_stamp_state_t* g = w->stamps;
  if (!g || !g->count) return NULL;
  size_t n = g->count < CW__STAMP_RECORD ? (size_t)g->count : CW__STAMP_RECORD;
  // One block: the pointer list, then the records (8-byte aligned after it).
  Causeway__V1__SchedStamp** ptrs = malloc(n * (sizeof(*ptrs) + sizeof(Causeway__V1__SchedStamp)));
  if (!ptrs) return NULL;
  Causeway__V1__SchedStamp* recs = (Causeway__V1__SchedStamp*)(ptrs + n);
  uint64_t first = g->count - n;
  for (size_t i = 0; i < n; ++i) {
    const cw_stamp_rec_t* r = &g->ring[(first + i) % CW__STAMP_RECORD];
    causeway__v1__sched_stamp__init(&recs[i]);
    recs[i].stamp = r->stamp;
    recs[i].session_id = r->session_id;
    ptrs[i] = &recs[i];
  }
  st->sched_stamps = ptrs;
  st->n_sched_stamps = n;
  st->sched_stamps_dropped = first;
  return ptrs;
}

void cw_worker_stamp_free(cw_worker_t* w) {
  if (!w->stamps) return;
  free(w->stamps->ahead_bits);
  free(w->stamps->ahead_sessions);
  free(w->stamps);
  w->stamps = NULL;
}
