// Gang order: one scheduler per island. Requests that name an executable
// (LAUNCH, EXE_INFO, DELETE) wait in one FIFO per session and island; the
// scheduler picks between sessions' queues and relays each request to the
// island's worker. Every LAUNCH it relays gets the island's next stamp
// (LaunchRequest.sched_stamp), one total order over all sessions, and the
// worker issues stamped launches in that order (cw_worker_sched.c).
//
// Weights: among the queues whose head is a launch ready to go, the one with
// the smallest pass goes next, and its pass grows by STRIDE / weight (stride
// scheduling), so backlogged sessions get stamps in proportion to their
// weights. At most CW__SCHED_MAX_OUTSTANDING stamped launches per island are
// relayed and not yet answered; the rest wait here, where the weights decide.
// A queue whose head waits for its executable to load holds only its own
// session. A queue that empties is freed; it rejoins at the island's current
// virtual time, so an idle session gains no credit.
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_relay.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"

#define CW__SCHED_STRIDE (1ull << 20)
#define CW__STAMP_RECORD 4096

typedef struct cw_ctl_sched_q_s {
  struct cw_ctl_sched_q_s* next;
  uint64_t session_id;
  cw_ctl_item_t* head;
  cw_ctl_item_t* tail;
  uint64_t pass;
} cw_ctl_sched_q_t;

struct cw_ctl_sched_island_s {
  cw_ctl_sched_q_t* queues;  // non-empty ones, in order of arrival
  uint64_t last_stamp;
  uint64_t vtime;            // pass of the launch picked last
  uint32_t outstanding;      // stamped launches relayed, not answered
};

struct cw_ctl_stamp_ring_s {
  Causeway__V1__SchedStamp rec[CW__STAMP_RECORD];
  uint64_t count;  // ever recorded
};

static cw_ctl_sched_island_t* cw__sched_island(cw_ctl_worker_t* w) {
  if (!w->sched) w->sched = calloc(1, sizeof(*w->sched));
  return w->sched;
}

static void cw__sched_record(cw_controller_t* ctl, uint32_t island, uint64_t stamp,
                             uint64_t session_id) {
  if (!ctl->stamp_ring) ctl->stamp_ring = calloc(1, sizeof(*ctl->stamp_ring));
  if (!ctl->stamp_ring) return;
  Causeway__V1__SchedStamp* r = &ctl->stamp_ring->rec[ctl->stamp_ring->count % CW__STAMP_RECORD];
  causeway__v1__sched_stamp__init(r);
  r->island = island;
  r->stamp = stamp;
  r->session_id = session_id;
  ctl->stamp_ring->count++;
}

void cw_ctl_sched_push(cw_controller_t* ctl, cw_ctl_item_t* it) {
  cw_ctl_worker_t* w = ctl->workers[it->worker];
  cw_ctl_sched_island_t* isl = cw__sched_island(w);
  if (!isl) {
    cw_ctl_item_fail(ctl, it, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  cw_ctl_sched_q_t** pp = &isl->queues;
  while (*pp && (*pp)->session_id != it->session->id) pp = &(*pp)->next;
  cw_ctl_sched_q_t* q = *pp;
  if (!q) {
    q = calloc(1, sizeof(*q));
    if (!q) {
      cw_ctl_item_fail(ctl, it, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
      return;
    }
    q->session_id = it->session->id;
    q->pass = isl->vtime;
    *pp = q;
  }
  it->next = NULL;
  if (q->tail) q->tail->next = it;
  else q->head = it;
  q->tail = it;
  cw_ctl_sched_pump(ctl, it->worker);
}

// Whether the head can go: an error to answer it with (failed), blocked
// (its executable is loading), or ready; *out_exe: the executable it names
// (NULL for DELETE).
static cw_status_t cw__sched_check(cw_ctl_worker_t* w, cw_ctl_item_t* it, bool* out_blocked,
                                   cw_ctl_exe_t** out_exe) {
  cw_ctl_session_t* s = it->session;
  *out_blocked = false;
  *out_exe = NULL;
  if (s->closed) return cw_make_status(CW_CANCELLED, "session %" PRIu64 " is closed", s->id);
  if (!w->alive) {
    return cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: its connection to the "
                          "controller was lost", w->name, w->address);
  }
  if (it->type == CW_MSG_DELETE) {
    const Causeway__V1__DeleteRequest* r = (const Causeway__V1__DeleteRequest*)it->msg;
    for (size_t i = 0; i < r->n_ids; ++i) {
      cw_ctl_exe_t* e = cw_ctl_exe_find(s, r->ids[i]);
      if (e && e->state == CW__EXE_LOADING) *out_blocked = true;
    }
    return cw_ok_status();
  }
  uint64_t exe_id = cw_ctl_item_exe_id(it);
  cw_ctl_exe_t* e = cw_ctl_exe_find(s, exe_id);
  if (!e) return cw_make_status(CW_NOT_FOUND, "executable %" PRIu64 " not found", exe_id);
  *out_exe = e;
  if (e->state == CW__EXE_LOADING) *out_blocked = true;
  if (e->state == CW__EXE_FAILED) {
    return cw_make_status(cw_status_code(e->error), "executable %" PRIu64 " failed: %s", exe_id,
                          cw_status_message(e->error));
  }
  for (size_t i = 0; i < e->num_parts; ++i) {  // an island's program needs every part
    cw_ctl_worker_t* p = w->ctl->workers[e->parts[i]];
    if (!p->alive) {
      return cw_make_status(CW_UNAVAILABLE, "worker %s (%s) of island '%s' is unavailable",
                            p->name, p->address, p->island_name);
    }
    // A draining member would refuse its part while the others wait for it
    // in their collectives: refuse the launch here, for every part at once.
    if (it->type == CW_MSG_LAUNCH && !cw_ctl_ops_worker_takes_work(p)) {
      return cw_make_status(CW_FAILED_PRECONDITION, "worker %s of island '%s' is draining",
                            p->name, p->island_name);
    }
  }
  return cw_ok_status();
}

static cw_ctl_item_t* cw__sched_pop(cw_ctl_sched_island_t* isl, cw_ctl_sched_q_t* q) {
  cw_ctl_item_t* it = q->head;
  q->head = it->next;
  if (!q->head) {
    q->tail = NULL;
    cw_ctl_sched_q_t** pp = &isl->queues;
    while (*pp != q) pp = &(*pp)->next;
    *pp = q->next;
    free(q);
  }
  it->next = NULL;
  return it;
}

void cw_ctl_sched_pump(cw_controller_t* ctl, uint32_t index) {
  if (index >= ctl->num_workers) return;
  cw_ctl_worker_t* w = ctl->workers[index];
  cw_ctl_sched_island_t* isl = w->sched;
  if (!isl) return;
  for (;;) {
    cw_ctl_sched_q_t* pick = NULL;
    cw_ctl_exe_t* e = NULL;  // the one pick's head names
    bool failed = false;
    for (cw_ctl_sched_q_t* q = isl->queues; q; q = q->next) {
      bool blocked = false;
      cw_ctl_exe_t* exe = NULL;
      cw_status_t st = cw__sched_check(w, q->head, &blocked, &exe);
      if (st) {
        cw_ctl_item_fail(ctl, cw__sched_pop(isl, q), st);
        failed = true;
        break;  // the list changed
      }
      if (blocked) continue;
      if (q->head->type != CW_MSG_LAUNCH) {
        pick = q;  // not ordered against other sessions: at once
        e = exe;
        break;
      }
      if (isl->outstanding >= CW__SCHED_MAX_OUTSTANDING) continue;
      if (!pick || q->pass < pick->pass) {
        pick = q;
        e = exe;
      }
    }
    if (failed) continue;
    if (!pick) return;
    cw_ctl_session_t* s = pick->head->session;
    bool launch = pick->head->type == CW_MSG_LAUNCH;
    // On an island of several workers only its programs are stamped: the
    // stamp sequence must reach every member whole (cw_ctl_island.c).
    bool stamped = launch && (!cw_ctl_island_spans(w) || e->num_parts);
    if (launch) {
      isl->vtime = pick->pass;
      pick->pass += CW__SCHED_STRIDE / (s->weight ? s->weight : 1);
    }
    cw_ctl_item_t* it = cw__sched_pop(isl, pick);
    if (it->type == CW_MSG_DELETE && cw_ctl_island_spans(w) && w->island == index) {
      cw_ctl_island_relay_all(ctl, it, index);
      continue;
    }
    if (stamped && e->num_parts) {
      // The stamp is taken only when a part went out: a launch refused
      // before that (a bad list) must not leave a gap in every member's
      // stamp sequence.
      uint64_t stamp = isl->last_stamp + 1;
      uint64_t session_id = s->id;
      uint32_t sent = cw_ctl_island_relay_launch(ctl, it, e, stamp);
      if (sent) {
        isl->last_stamp = stamp;
        cw__sched_record(ctl, index, stamp, session_id);
        ctl->launches_relayed++;
        s->launches++;
        isl->outstanding += sent;
      }
      continue;
    }
    if (it->type == CW_MSG_DELETE) {
      const Causeway__V1__DeleteRequest* r = (const Causeway__V1__DeleteRequest*)it->msg;
      for (size_t i = 0; i < r->n_ids; ++i) cw_ctl_exe_forget(s, r->ids[i]);
    }
    cw_net_conn_t* link = cw_ctl_session_link(s, index);
    if (!link || !cw_net_conn_is_open(link)) {
      cw_ctl_item_fail(ctl, it, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: "
                                            "no connection", w->name, w->address));
      continue;
    }
    if (launch) {
      Causeway__V1__LaunchRequest* r = (Causeway__V1__LaunchRequest*)it->msg;
      r->sched_stamp = 0;  // whatever the client put there
      if (stamped) {
        it->stamp = ++isl->last_stamp;
        r->sched_stamp = it->stamp;
        isl->outstanding++;
        cw__sched_record(ctl, index, it->stamp, s->id);
      }
      ctl->launches_relayed++;
      s->launches++;  // metrics
    }
    // The message goes out as it came (with the client's seq for this worker).
    cw_net_conn_request(link, it->type, it->msg, NULL, 0, NULL, NULL, cw_ctl_relay_reply, it);
  }
}

void cw_ctl_sched_reset(cw_ctl_worker_t* w) {
  // A replacement worker counts stamps from 1 again; what was outstanding
  // died with its predecessor.
  if (!w->sched) return;
  w->sched->last_stamp = 0;
  w->sched->outstanding = 0;
}

bool cw_ctl_sched_done(cw_controller_t* ctl, const cw_ctl_item_t* it) {
  if (!it->stamp || it->worker >= ctl->num_workers) return false;
  cw_ctl_sched_island_t* isl = ctl->workers[ctl->workers[it->worker]->island]->sched;
  if (isl && isl->outstanding) isl->outstanding--;
  return true;
}

void cw_ctl_sched_release(cw_controller_t* ctl, uint32_t island) {
  if (island >= ctl->num_workers) return;
  cw_ctl_sched_island_t* isl = ctl->workers[island]->sched;
  if (isl && isl->outstanding) isl->outstanding--;
  cw_ctl_sched_pump(ctl, island);
}

void* cw_ctl_sched_stats(cw_controller_t* ctl, Causeway__V1__Stats* st) {
  cw_ctl_stamp_ring_t* ring = ctl->stamp_ring;
  if (!ring || !ring->count) return NULL;
  size_t n = ring->count < CW__STAMP_RECORD ? (size_t)ring->count : CW__STAMP_RECORD;
  Causeway__V1__SchedStamp** ptrs = calloc(n, sizeof(*ptrs));
  if (!ptrs) return NULL;
  uint64_t first = ring->count - n;
  for (size_t i = 0; i < n; ++i) ptrs[i] = &ring->rec[(first + i) % CW__STAMP_RECORD];
  st->sched_stamps = ptrs;
  st->n_sched_stamps = n;
  st->sched_stamps_dropped = first;
  return ptrs;
}

void cw_ctl_sched_free(cw_controller_t* ctl) {
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_sched_island_t* isl = ctl->workers[i]->sched;
    if (!isl) continue;
    while (isl->queues) cw_ctl_item_free(cw__sched_pop(isl, isl->queues));
    free(isl);
    ctl->workers[i]->sched = NULL;
  }
  free(ctl->stamp_ring);
  ctl->stamp_ring = NULL;
}
