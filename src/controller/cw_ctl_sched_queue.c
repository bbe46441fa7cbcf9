// The island scheduler's policy: see cw_ctl_sched_queue.h.
#include "cw_ctl_sched_queue.h"

#include <assert.h>
#include <stdlib.h>

// Where a queue waits, by its head.
enum { CW__NOWHERE = 0, CW__HEAP, CW__URGENT, CW__BLOCKED };

struct cw_sched_queue_s {
  cw_sched_queue_t* next;  // order of arrival
  cw_sched_queue_t* prev;
  cw_sched_queue_t* hnext;  // the island's bucket
  cw_sched_queue_t* lnext;  // the urgent or the blocked list
  cw_sched_queue_t* lprev;
  uint64_t session_id;
  uint64_t arrival;  // ties between equal passes go to the earlier
  cw_sched_item_t* head;
  cw_sched_item_t* tail;
  uint64_t pass;
  size_t heap_at;   // its index while in the heap
  uint64_t ready_in;  // the pick whose judge found its head a launch ready to go
  uint32_t weight;  // counted in weight_counts while in the heap
  int where;
};

uint32_t cw_sched_run_for(int64_t each_ns) {
  if (each_ns <= 0) return CW_SCHED_RUN_MAX;
  int64_t run = CW_SCHED_RUN_NS / each_ns;
  return (uint32_t)(run < 1 ? 1 : run > CW_SCHED_RUN_MAX ? CW_SCHED_RUN_MAX : run);
}

static uint32_t cw__weight(const cw_sched_item_t* it) {
  return it->weight == 0 ? 1 : it->weight > CW_SCHED_MAX_WEIGHT ? CW_SCHED_MAX_WEIGHT
                                                                 : it->weight;
}

void cw_sched_island_initialize(cw_sched_island_t* isl, uint32_t max_outstanding) {
  *isl = (cw_sched_island_t){0};
  isl->max_outstanding = max_outstanding;
  isl->max_run = 1;
  isl->heaviest = 1;
}

void cw_sched_island_deinitialize(cw_sched_island_t* isl) {
  assert(!isl->queues);  // the caller took every item
  free(isl->buckets);
  free(isl->heap);
  free(isl->weight_counts);
  isl->buckets = NULL;
  isl->heap = NULL;
  isl->weight_counts = NULL;
  isl->num_buckets = isl->heap_len = isl->heap_cap = 0;
}

// --- The heap of launch heads, by (pass, arrival) ---------------------------------------

static bool cw__before(const cw_sched_queue_t* a, const cw_sched_queue_t* b) {
  return a->pass < b->pass || (a->pass == b->pass && a->arrival < b->arrival);
}

static void cw__heap_set(cw_sched_island_t* isl, size_t i, cw_sched_queue_t* q) {
  isl->heap[i] = q;
  q->heap_at = i;
}

static void cw__sift_up(cw_sched_island_t* isl, size_t i) {
  cw_sched_queue_t* q = isl->heap[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!cw__before(q, isl->heap[parent])) break;
    cw__heap_set(isl, i, isl->heap[parent]);
    i = parent;
  }
  cw__heap_set(isl, i, q);
}

static void cw__sift_down(cw_sched_island_t* isl, size_t i) {
  cw_sched_queue_t* q = isl->heap[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= isl->heap_len) break;
    if (child + 1 < isl->heap_len && cw__before(isl->heap[child + 1], isl->heap[child])) child++;
    if (!cw__before(isl->heap[child], q)) break;
    cw__heap_set(isl, i, isl->heap[child]);
    i = child;
  }
  cw__heap_set(isl, i, q);
}

static void cw__count_weight(cw_sched_island_t* isl, uint32_t w, bool add) {
  uint64_t bit = 1ull << (w & 63);
  if (add) {
    if (isl->weight_counts[w]++ == 0) isl->weight_seen[w >> 6] |= bit;
    if (w > isl->heaviest) isl->heaviest = w;
    return;
  }
  if (--isl->weight_counts[w] != 0) return;
  isl->weight_seen[w >> 6] &= ~bit;
  if (w != isl->heaviest) return;
  // No weight above w is counted: the highest bit left at or below its word.
  isl->heaviest = 1;
  for (size_t i = (w >> 6) + 1; i-- > 0;) {
    if (isl->weight_seen[i]) {
      isl->heaviest = (uint32_t)(i * 64 + 63 - (size_t)__builtin_clzll(isl->weight_seen[i]));
      break;
    }
  }
  if (isl->heaviest == 0) isl->heaviest = 1;
}

// Room for every queue was made at its push (cw__reserve).
static void cw__heap_insert(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  assert(isl->heap_len < isl->heap_cap);
  q->where = CW__HEAP;
  q->weight = cw__weight(q->head);
  cw__count_weight(isl, q->weight, true);
  cw__heap_set(isl, isl->heap_len++, q);
  cw__sift_up(isl, q->heap_at);
}

static void cw__heap_remove(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  size_t i = q->heap_at;
  cw_sched_queue_t* moved = isl->heap[--isl->heap_len];
  if (moved != q) {
    cw__heap_set(isl, i, moved);
    cw__sift_down(isl, i);
    cw__sift_up(isl, moved->heap_at);
  }
  cw__count_weight(isl, q->weight, false);
  q->where = CW__NOWHERE;
}

// --- The urgent and blocked lists ---------------------------------------------------------

static cw_sched_queue_t** cw__list(cw_sched_island_t* isl, int where) {
  return where == CW__URGENT ? &isl->urgent : &isl->blocked;
}

static void cw__list_add(cw_sched_island_t* isl, cw_sched_queue_t* q, int where) {
  cw_sched_queue_t** list = cw__list(isl, where);
  q->where = where;
  q->lprev = NULL;
  q->lnext = *list;
  if (*list) (*list)->lprev = q;
  *list = q;
}

static void cw__list_remove(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  if (q->lprev) q->lprev->lnext = q->lnext;
  else *cw__list(isl, q->where) = q->lnext;
  if (q->lnext) q->lnext->lprev = q->lprev;
  q->lnext = q->lprev = NULL;
  q->where = CW__NOWHERE;
}

static void cw__unplace(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  if (q->where == CW__HEAP) cw__heap_remove(isl, q);
  else if (q->where != CW__NOWHERE) cw__list_remove(isl, q);
}

// Puts q where its head waits: the heap for a launch (again, at its pass),
// the urgent list otherwise. A blocked launch head stays aside until judged.
static void cw__place(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  if (q->head->launch) {
    if (q->where == CW__HEAP && q->weight == cw__weight(q->head)) {
      cw__sift_down(isl, q->heap_at);  // a pass only grows
      cw__sift_up(isl, q->heap_at);
      return;
    }
    cw__unplace(isl, q);
    cw__heap_insert(isl, q);
    return;
  }
  if (q->where == CW__URGENT) return;
  cw__unplace(isl, q);
  cw__list_add(isl, q, CW__URGENT);
}

// --- Sessions' queues -------------------------------------------------------------------

static size_t cw__bucket(const cw_sched_island_t* isl, uint64_t session_id) {
  uint64_t h = session_id * 0x9E3779B97F4A7C15ull;
  return (size_t)(h ^ (h >> 32)) & (isl->num_buckets - 1);
}

static cw_sched_queue_t* cw__find(const cw_sched_island_t* isl, uint64_t session_id) {
  if (!isl->num_buckets) return NULL;
  for (cw_sched_queue_t* q = isl->buckets[cw__bucket(isl, session_id)]; q; q = q->hnext) {
    if (q->session_id == session_id) return q;
  }
  return NULL;
}

// Room for one more queue in the tables; false without memory.
static bool cw__reserve(cw_sched_island_t* isl) {
  if (!isl->weight_counts) {
    isl->weight_counts = calloc(CW_SCHED_MAX_WEIGHT + 1, sizeof(*isl->weight_counts));
    if (!isl->weight_counts) return false;
  }
  if (isl->num_queues + 1 > isl->heap_cap) {  // any queue may come to the heap
    size_t cap = isl->heap_cap ? 2 * isl->heap_cap : 16;
    cw_sched_queue_t** grown = realloc(isl->heap, cap * sizeof(*grown));
    if (!grown) return false;
    isl->heap = grown;
    isl->heap_cap = cap;
  }
  if (isl->num_queues + 1 > isl->num_buckets) {
    size_t n = isl->num_buckets ? 2 * isl->num_buckets : 16;
    cw_sched_queue_t** grown = calloc(n, sizeof(*grown));
    if (!grown) return isl->num_buckets > 0;  // longer chains
    cw_sched_queue_t** old = isl->buckets;
    size_t old_n = isl->num_buckets;
    isl->buckets = grown;
    isl->num_buckets = n;
    for (size_t i = 0; i < old_n; ++i) {
      for (cw_sched_queue_t *q = old[i], *next; q; q = next) {
        next = q->hnext;
        size_t b = cw__bucket(isl, q->session_id);
        q->hnext = isl->buckets[b];
        isl->buckets[b] = q;
      }
    }
    free(old);
  }
  return true;
}

bool cw_sched_island_push(cw_sched_island_t* isl, cw_sched_item_t* item) {
  item->next = NULL;
  cw_sched_queue_t* q = cw__find(isl, item->session_id);
  if (q) {
    q->tail->next = item;
    q->tail = item;
    return true;
  }
  if (!cw__reserve(isl)) return false;
  q = calloc(1, sizeof(*q));
  if (!q) return false;
  q->session_id = item->session_id;
  q->pass = isl->vtime;  // no credit for the time it had nothing queued
  q->arrival = isl->arrivals++;
  q->head = q->tail = item;
  q->prev = isl->queues_tail;
  if (isl->queues_tail) isl->queues_tail->next = q;
  else isl->queues = q;
  isl->queues_tail = q;
  size_t b = cw__bucket(isl, q->session_id);
  q->hnext = isl->buckets[b];
  isl->buckets[b] = q;
  isl->num_queues++;
  cw__place(isl, q);
  return true;
}

// q's queue emptied: it leaves the island.
static void cw__leave(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  cw__unplace(isl, q);
  if (q->prev) q->prev->next = q->next;
  else isl->queues = q->next;
  if (q->next) q->next->prev = q->prev;
  else isl->queues_tail = q->prev;
  cw_sched_queue_t** pp = &isl->buckets[cw__bucket(isl, q->session_id)];
  while (*pp != q) pp = &(*pp)->hnext;
  *pp = q->hnext;
  isl->num_queues--;
  if (isl->last == q) isl->last = NULL;
  free(q);
}

// Takes q's head off; q then waits by its next head, or leaves.
static cw_sched_item_t* cw__pop(cw_sched_island_t* isl, cw_sched_queue_t* q) {
  cw_sched_item_t* it = q->head;
  q->head = it->next;
  it->next = NULL;
  if (!q->head) {
    q->tail = NULL;
    cw__leave(isl, q);
  } else {
    cw__place(isl, q);
  }
  return it;
}

static bool cw__goes_now(cw_sched_verdict_t v) {
  return v == CW_SCHED_FAILED || v == CW_SCHED_READY;
}

// Judges q's head once a pick: a head judged a launch ready to go earlier in
// this pick (from the urgent or the blocked list, then put in the heap) is
// not judged again when it reaches the heap's top or is the last session's.
static cw_sched_verdict_t cw__judge_once(cw_sched_island_t* isl, cw_sched_queue_t* q,
                                         cw_sched_verdict_t (*judge)(void*, cw_sched_item_t*),
                                         void* user) {
  if (q->ready_in == isl->picks) return CW_SCHED_LAUNCH;
  cw_sched_verdict_t v = judge(user, q->head);
  if (v == CW_SCHED_LAUNCH) q->ready_in = isl->picks;
  return v;
}

cw_sched_item_t* cw_sched_island_pick(cw_sched_island_t* isl,
                                      cw_sched_verdict_t (*judge)(void* user,
                                                                  cw_sched_item_t* head),
                                      void* user, cw_sched_verdict_t* out_verdict) {
  *out_verdict = CW_SCHED_BLOCKED;
  isl->picks++;
  // Heads that are not launches go at once, oldest session first.
  cw_sched_queue_t* first = isl->urgent;
  while (first && first->lnext) first = first->lnext;  // the list is newest first
  for (cw_sched_queue_t *q = first, *prev; q; q = prev) {
    prev = q->lprev;
    cw_sched_verdict_t v = cw__judge_once(isl, q, judge, user);
    if (cw__goes_now(v)) {
      *out_verdict = v;
      return cw__pop(isl, q);
    }
    if (v == CW_SCHED_LAUNCH) {  // judged a launch after all: by its pass
      cw__list_remove(isl, q);
      cw__heap_insert(isl, q);
    }
  }
  // Launch heads that waited (their executable loading): failed, or back in line.
  for (cw_sched_queue_t *q = isl->blocked, *next; q; q = next) {
    next = q->lnext;
    cw_sched_verdict_t v = cw__judge_once(isl, q, judge, user);
    if (cw__goes_now(v)) {
      *out_verdict = v;
      return cw__pop(isl, q);
    }
    if (v == CW_SCHED_LAUNCH) {
      cw__list_remove(isl, q);
      cw__heap_insert(isl, q);
    }
  }
  if (isl->outstanding >= isl->max_outstanding) return NULL;
  cw_sched_queue_t* pick = NULL;
  while (isl->heap_len && !pick) {
    cw_sched_queue_t* q = isl->heap[0];
    cw_sched_verdict_t v = cw__judge_once(isl, q, judge, user);
    if (cw__goes_now(v)) {
      *out_verdict = v;
      return cw__pop(isl, q);
    }
    if (v == CW_SCHED_BLOCKED) {
      cw__heap_remove(isl, q);
      cw__list_add(isl, q, CW__BLOCKED);
      continue;
    }
    pick = q;
  }
  if (!pick) return NULL;
  // The run goes on while the session picked last leads by less than max_run
  // of the heaviest session's strides: that session then catches up in
  // max_run launches, not weight times as many (1,000:1 would have left the
  // light one 32,000 launches behind).
  cw_sched_queue_t* last = isl->last;
  if (last && last != pick && last->where == CW__HEAP && isl->run < isl->max_run) {
    cw_sched_verdict_t v = cw__judge_once(isl, last, judge, user);
    if (cw__goes_now(v)) {
      *out_verdict = v;
      return cw__pop(isl, last);
    }
    if (v == CW_SCHED_BLOCKED) {
      cw__heap_remove(isl, last);
      cw__list_add(isl, last, CW__BLOCKED);
    } else if (last->pass <
               pick->pass + (uint64_t)isl->max_run * (CW_SCHED_STRIDE / isl->heaviest)) {
      pick = last;
    }
  }
  isl->run = pick == isl->last ? isl->run + 1 : 1;
  isl->last = pick;
  *out_verdict = CW_SCHED_LAUNCH;
  isl->vtime = pick->pass;
  pick->pass += CW_SCHED_STRIDE / cw__weight(pick->head);
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
