// The island scheduler's policy: see cw_ctl_sched_queue.h.
#include "cw_ctl_sched_queue.h"

#include <assert.h>
#include <stdlib.h>

struct cw_sched_queue_s {
  cw_sched_queue_t* next;
  uint64_t session_id;
  cw_sched_item_t* head;
  cw_sched_item_t* tail;
  uint64_t pass;
};

uint32_t cw_sched_run_for(int64_t each_ns) {
  if (each_ns <= 0) return CW_SCHED_RUN_MAX;
  int64_t run = CW_SCHED_RUN_NS / each_ns;
  return (uint32_t)(run < 1 ? 1 : run > CW_SCHED_RUN_MAX ? CW_SCHED_RUN_MAX : run);
}

void cw_sched_island_initialize(cw_sched_island_t* isl, uint32_t max_outstanding) {
  isl->queues = NULL;
  isl->last_stamp = 0;
  isl->vtime = 0;
  isl->outstanding = 0;
  isl->max_outstanding = max_outstanding;
  isl->max_run = 1;
  isl->run = 0;
  isl->last = NULL;
}

bool cw_sched_island_push(cw_sched_island_t* isl, cw_sched_item_t* item) {
  cw_sched_queue_t** pp = &isl->queues;
  while (*pp && (*pp)->session_id != item->session_id) pp = &(*pp)->next;
  cw_sched_queue_t* q = *pp;
  if (!q) {
    q = calloc(1, sizeof(*q));
    if (!q) return false;
    q->session_id = item->session_id;
    q->pass = isl->vtime;  // no credit for the time it had nothing queued
    *pp = q;
  }
  item->next = NULL;
  if (q->tail) q->tail->next = item;
  else q->head = item;
  q->tail = item;
  return true;
}

// Takes q's head off; an emptied queue leaves the island.
static cw_sched_item_t* cw__pop(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  cw_sched_item_t* it = q->head;
  q->head = it->next;
  if (!q->head) {
    q->tail = NULL;
    cw_sched_queue_t** pp = &isl->queues;
    while (*pp != q) pp = &(*pp)->next;
    *pp = q->next;
    if (isl->last == q) isl->last = NULL;
    free(q);
  }
  it->next = NULL;
  return it;
}

cw_sched_item_t* cw_sched_island_pick(cw_sched_island_t* isl,
                                      cw_sched_verdict_t (*judge)(void* user,
                                                                  cw_sched_item_t* head),
                                      void* user, cw_sched_verdict_t* out_verdict) {
  cw_sched_queue_t* pick = NULL;
  bool last_ready = false;
  uint32_t heaviest = 1;  // of the ready sessions
  for (cw_sched_queue_t* q = isl->queues; q; q = q->next) {
    cw_sched_verdict_t v = judge(user, q->head);
    if (v == CW_SCHED_FAILED || v == CW_SCHED_READY) {
      *out_verdict = v;
      return cw__pop(isl, q);
    }
    if (v != CW_SCHED_LAUNCH || isl->outstanding >= isl->max_outstanding) continue;
    if (q == isl->last) last_ready = true;
    if (q->head->weight > heaviest) heaviest = q->head->weight;
    if (!pick || q->pass < pick->pass) pick = q;
  }
  *out_verdict = CW_SCHED_BLOCKED;
  if (!pick) return NULL;
  // The lead a run may take is max_run of the heaviest session's strides:
  // that session then catches up in max_run launches, not weight times as
  // many (1,000:1 would have left the light one 32,000 launches behind).
  if (last_ready && isl->run < isl->max_run &&
      isl->last->pass < pick->pass + (uint64_t)isl->max_run * (CW_SCHED_STRIDE / heaviest)) {
    pick = isl->last;  // the run goes on
  }
  isl->run = pick == isl->last ? isl->run + 1 : 1;
  isl->last = pick;
  *out_verdict = CW_SCHED_LAUNCH;
  uint32_t weight = pick->head->weight ? pick->head->weight : 1;
  isl->vtime = pick->pass;
  pick->pass += CW_SCHED_STRIDE / weight;
  return cw__pop(isl, pick);
}

cw_sched_item_t* cw_sched_island_take_any(cw_sched_island_t* isl) {
  return isl->queues ? cw__pop(isl, isl->queues) : NULL;
}

void cw_sched_island_visit(const cw_sched_island_t* isl,
                           void (*fn)(void* user, const cw_sched_item_t* item), void* user) {
  for (const cw_sched_queue_t* q = isl->queues; q; q = q->next) {
    for (const cw_sched_item_t* it = q->head; it; it = it->next) fn(user, it);
  }
}

uint64_t cw_sched_island_next_stamp(const cw_sched_island_t* isl) { return isl->last_stamp + 1; }

void cw_sched_island_stamped(cw_sched_island_t* isl, uint32_t outstanding) {
  assert(outstanding >= 1);
  isl->last_stamp++;
  isl->outstanding += outstanding;
}

void cw_sched_island_answered(cw_sched_island_t* isl) {
  if (isl->outstanding) isl->outstanding--;
}

void cw_sched_island_restart(cw_sched_island_t* isl) {
  isl->last_stamp = 0;
  isl->outstanding = 0;
  isl->run = 0;
  isl->max_run = 1;  // what the new workers take is not known yet
}
