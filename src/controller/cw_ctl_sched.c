// Gang order: one scheduler per island. Requests that name an executable
// (LAUNCH, EXE_INFO, DELETE) wait in one FIFO per session and island; the
// scheduler picks between sessions' queues and relays each request to the
// island's worker. Every LAUNCH it relays gets the island's next stamp
// (LaunchRequest.sched_stamp), one total order over all sessions, and the
// worker issues stamped launches in that order (cw_worker_sched.c).
//
// The policy -- per-session FIFOs, stride scheduling by weight, the stamp
// counter, at most CAUSEWAY_SCHED_WINDOW stamped launches out, a blocked
// head holding only its own session, no credit for idle sessions -- is
// cw_ctl_sched_queue.c, with no I/O. This file judges each head against the
// controller's state (session closed, worker lost, executable loading or
// failed, a draining island member) and relays what the policy picks.
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_relay.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_sched_queue.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_time.h"

#define CW__STAMP_RECORD 4096

// Runs (cw_ctl_sched_queue.h): the island's answers are timed in windows
// of CW__RUN_SAMPLE, which set the next runs' length.
#define CW__RUN_SAMPLE 64

struct cw_ctl_sched_island_s {
  cw_sched_island_t policy;
  uint32_t answers;    // in the current window
  int64_t window_ns;   // when it began (its first answer)
};

struct cw_ctl_stamp_ring_s {
  Causeway__V1__SchedStamp rec[CW__STAMP_RECORD];
  uint64_t count;  // ever recorded
};

static cw_ctl_item_t* cw__item_of(cw_sched_item_t* si) {
  return (cw_ctl_item_t*)((char*)si - offsetof(cw_ctl_item_t, sched));
}

// Stamped launches relayed to an island's worker and not yet answered are
// at most CAUSEWAY_SCHED_WINDOW; more wait here, ordered by weight.
static cw_ctl_sched_island_t* cw__sched_island(cw_controller_t* ctl, cw_ctl_worker_t* w) {
  if (!w->sched) {
    w->sched = calloc(1, sizeof(*w->sched));
    if (w->sched) {
      cw_sched_island_initialize(&w->sched->policy,
                                 (uint32_t)cw_settings_int(ctl->settings, CW_SET_SCHED_WINDOW));
    }
  }
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
  cw_ctl_sched_island_t* isl = cw__sched_island(ctl, w);
  it->sched.session_id = it->session->id;
  it->sched.weight = it->session->weight;
  it->sched.launch = it->type == CW_MSG_LAUNCH;
  if (!isl || !cw_sched_island_push(&isl->policy, &it->sched)) {
    cw_ctl_item_fail(ctl, it, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
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
      return cw_ctl_worker_unavailable(p, p->island_name);
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

typedef struct cw__judge_s {
  cw_ctl_worker_t* w;
  cw_status_t failed;  // the FAILED head's answer
} cw__judge_t;

// The policy asks what a queue's head may do now.
static cw_sched_verdict_t cw__judge(void* user, cw_sched_item_t* head) {
  cw__judge_t* j = user;
  cw_ctl_item_t* it = cw__item_of(head);
  bool blocked = false;
  cw_ctl_exe_t* e = NULL;
  cw_status_t st = cw__sched_check(j->w, it, &blocked, &e);
  if (st) {
    j->failed = st;
    return CW_SCHED_FAILED;
  }
  if (blocked) return CW_SCHED_BLOCKED;
  if (it->type != CW_MSG_LAUNCH) return CW_SCHED_READY;  // not ordered against other sessions
  head->weight = it->session->weight;
  return CW_SCHED_LAUNCH;
}

void cw_ctl_sched_pump(cw_controller_t* ctl, uint32_t index) {
  if (index >= ctl->num_workers) return;
  cw_ctl_worker_t* w = ctl->workers[index];
  cw_ctl_sched_island_t* isl = w->sched;
  if (!isl) return;
  for (;;) {
    cw__judge_t j = {w, NULL};
    cw_sched_verdict_t verdict;
    cw_sched_item_t* picked = cw_sched_island_pick(&isl->policy, cw__judge, &j, &verdict);
    if (!picked) return;
    cw_ctl_item_t* it = cw__item_of(picked);
    if (verdict == CW_SCHED_FAILED) {
      cw_ctl_item_fail(ctl, it, j.failed);
      continue;
    }
    cw_ctl_session_t* s = it->session;
    bool launch = verdict == CW_SCHED_LAUNCH;
    // The executable a launch names (judged found and not failed just now).
    cw_ctl_exe_t* e = launch ? cw_ctl_exe_find(s, cw_ctl_item_exe_id(it)) : NULL;
    // On an island of several workers only its programs are stamped: the
    // stamp sequence must reach every member whole (cw_ctl_island.c).
    bool stamped = launch && (!cw_ctl_island_spans(w) || e->num_parts);
    if (it->type == CW_MSG_DELETE && cw_ctl_island_spans(w) && w->island == index) {
      cw_ctl_island_relay_all(ctl, it, index);
      continue;
    }
    if (stamped && e->num_parts) {
      // The stamp is taken only when a part went out: a launch refused
      // before that (a bad list) must not leave a gap in every member's
      // stamp sequence.
      uint64_t stamp = cw_sched_island_next_stamp(&isl->policy);
      uint64_t session_id = s->id;
      uint32_t sent = cw_ctl_island_relay_launch(ctl, it, e, stamp);
      if (sent) {
        cw_sched_island_stamped(&isl->policy, sent);
        cw__sched_record(ctl, index, stamp, session_id);
        ctl->launches_relayed++;
        s->launches++;
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
      // Nor is `prepare` the client's: with a stamp it makes the launch a
      // part of an island's launch, which holds the worker's gang order
      // for a LAUNCH_GO this controller never sends.
      r->prepare = false;
      if (stamped) {
        it->stamp = cw_sched_island_next_stamp(&isl->policy);
        cw_sched_island_stamped(&isl->policy, 1);
        r->sched_stamp = it->stamp;
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
  // died with its predecessor; runs start over from the new workers' pace.
  if (w->sched) {
    cw_sched_island_restart(&w->sched->policy);
    w->sched->answers = 0;
  }
}

// One stamped launch answered; sets the run length from the time the last
// CW__RUN_SAMPLE answers took. An island with nothing out starts over
// without runs: what comes next may be long.
static void cw__sched_answered(cw_ctl_sched_island_t* isl) {
  cw_sched_island_answered(&isl->policy);
  if (!isl->policy.outstanding) {
    isl->policy.max_run = 1;
    isl->answers = 0;
    return;
  }
  if (isl->answers++ == 0) {
    isl->window_ns = cw_time_now_ns();
    return;
  }
  if (isl->answers <= CW__RUN_SAMPLE) return;
  int64_t each = (cw_time_now_ns() - isl->window_ns) / CW__RUN_SAMPLE;
  isl->policy.max_run = cw_sched_run_for(each);
  isl->answers = 0;
}

bool cw_ctl_sched_done(cw_controller_t* ctl, const cw_ctl_item_t* it) {
  if (!it->stamp || it->worker >= ctl->num_workers) return false;
  cw_ctl_sched_island_t* isl = ctl->workers[ctl->workers[it->worker]->island]->sched;
  if (isl) cw__sched_answered(isl);
  return true;
}

void cw_ctl_sched_release(cw_controller_t* ctl, uint32_t island) {
  if (island >= ctl->num_workers) return;
  cw_ctl_sched_island_t* isl = ctl->workers[island]->sched;
  if (isl) cw__sched_answered(isl);
  cw_ctl_sched_pump(ctl, island);
}

typedef struct cw__count_s {
  bool launches_only;
  uint64_t n;
} cw__count_t;

static void cw__count(void* user, const cw_sched_item_t* item) {
  cw__count_t* c = user;
  const cw_ctl_item_t* it = cw__item_of((cw_sched_item_t*)item);
  c->n += !c->launches_only || it->type == CW_MSG_LAUNCH;
}

uint64_t cw_ctl_sched_queued(const cw_ctl_worker_t* w, bool launches_only) {
  cw__count_t c = {launches_only, 0};
  if (w->sched) cw_sched_island_visit(&w->sched->policy, cw__count, &c);
  return c.n;
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
    cw_sched_item_t* si;
    while ((si = cw_sched_island_take_any(&isl->policy)) != NULL) {
      cw_ctl_item_free(cw__item_of(si));
    }
    cw_sched_island_deinitialize(&isl->policy);
    free(isl);
    ctl->workers[i]->sched = NULL;
  }
  free(ctl->stamp_ring);
  ctl->stamp_ring = NULL;
}
