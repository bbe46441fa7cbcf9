#include "cw_mem_budget.h"

#include <stdlib.h>
#include <string.h>

cw_status_t cw_mem_budget_initialize(cw_mem_budget_t* b, size_t num_devices,
                                     const uint64_t* limits) {
  memset(b, 0, sizeof(*b));
  b->limit = calloc(num_devices + 1, sizeof(*b->limit));
  b->used = calloc(num_devices + 1, sizeof(*b->used));
  if (!b->limit || !b->used) {
    cw_mem_budget_deinitialize(b);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the memory budget");
  }
  b->num_devices = num_devices;
  if (limits && num_devices) memcpy(b->limit, limits, num_devices * sizeof(*limits));
  return cw_ok_status();
}

void cw_mem_budget_deinitialize(cw_mem_budget_t* b) {
  while (b->head) {
    cw_mem_waiter_t* w = b->head;
    cw_mem_budget_remove(b, w);
    cw_mem_budget_waiter_free(w);
  }
  free(b->limit);
  free(b->used);
  memset(b, 0, sizeof(*b));
}

bool cw_mem_budget_limited(const cw_mem_budget_t* b) {
  for (size_t d = 0; d < b->num_devices; ++d) {
    if (b->limit[d]) return true;
  }
  return false;
}

// The first device `need` does not fit on now; SIZE_MAX when it fits.
static size_t cw__first_over(const cw_mem_budget_t* b, const uint64_t* need) {
  for (size_t d = 0; d < b->num_devices; ++d) {
    if (!b->limit[d] || !need[d]) continue;
    // used may exceed the limit (buffers charged after the fact).
    if (b->used[d] >= b->limit[d] || need[d] > b->limit[d] - b->used[d]) return d;
  }
  return SIZE_MAX;
}

static bool cw__session_waits(const cw_mem_budget_t* b, uint64_t session,
                              const cw_mem_waiter_t* before) {
  for (const cw_mem_waiter_t* w = b->head; w && w != before; w = w->next) {
    if (w->session == session) return true;
  }
  return false;
}

cw_mem_decision_t cw_mem_budget_decide(cw_mem_budget_t* b, uint64_t session,
                                       const uint64_t* need, size_t* out_device) {
  size_t first_needed = SIZE_MAX;
  for (size_t d = 0; d < b->num_devices; ++d) {
    if (!need[d]) continue;
    if (first_needed == SIZE_MAX) first_needed = d;
    if (b->limit[d] && need[d] > b->limit[d]) {
      if (out_device) *out_device = d;
      b->refused++;
      return CW_MEM_NEVER;
    }
  }
  if (first_needed == SIZE_MAX) return CW_MEM_FITS;  // takes nothing
  if (cw__session_waits(b, session, NULL)) {
    if (out_device) *out_device = first_needed;
    return CW_MEM_WAIT;
  }
  size_t over = cw__first_over(b, need);
  if (over == SIZE_MAX) return CW_MEM_FITS;
  if (out_device) *out_device = over;
  return CW_MEM_WAIT;
}

void cw_mem_budget_charge(cw_mem_budget_t* b, size_t device, uint64_t bytes) {
  if (device >= b->num_devices) return;
  b->used[device] = bytes > UINT64_MAX - b->used[device] ? UINT64_MAX : b->used[device] + bytes;
}

void cw_mem_budget_release(cw_mem_budget_t* b, size_t device, uint64_t bytes) {
  if (device >= b->num_devices) return;
  b->used[device] = bytes > b->used[device] ? 0 : b->used[device] - bytes;
}

cw_status_t cw_mem_budget_enqueue(cw_mem_budget_t* b, uint64_t session, const uint64_t* need,
                                  int64_t now_ms, int64_t deadline_ms, void* user,
                                  cw_mem_waiter_t** out_waiter) {
  *out_waiter = NULL;
  cw_mem_waiter_t* w = calloc(1, sizeof(*w));
  uint64_t* copy = calloc(b->num_devices + 1, sizeof(*copy));
  if (!w || !copy) {
    free(w);
    free(copy);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a memory waiter");
  }
  if (b->num_devices) memcpy(copy, need, b->num_devices * sizeof(*need));
  w->session = session;
  w->need = copy;
  for (size_t d = 0; d < b->num_devices; ++d) w->total += need[d];
  w->since_ms = now_ms;
  w->deadline_ms = deadline_ms;
  w->user = user;
  w->prev = b->tail;
  if (b->tail) b->tail->next = w;
  else b->head = w;
  b->tail = w;
  b->waiting++;
  b->waiting_bytes += w->total;
  b->waits++;
  *out_waiter = w;
  return cw_ok_status();
}

void cw_mem_budget_remove(cw_mem_budget_t* b, cw_mem_waiter_t* w) {
  if (w->prev) w->prev->next = w->next;
  else b->head = w->next;
  if (w->next) w->next->prev = w->prev;
  else b->tail = w->prev;
  w->prev = w->next = NULL;
  b->waiting--;
  b->waiting_bytes -= w->total;
}

cw_mem_waiter_t* cw_mem_budget_take_ready(cw_mem_budget_t* b) {
  for (cw_mem_waiter_t* w = b->head; w; w = w->next) {
    if (cw__first_over(b, w->need) != SIZE_MAX) continue;
    if (cw__session_waits(b, w->session, w)) continue;  // an earlier one of its session waits
    cw_mem_budget_remove(b, w);
    return w;
  }
  return NULL;
}

cw_mem_waiter_t* cw_mem_budget_take_expired(cw_mem_budget_t* b, int64_t now_ms) {
  for (cw_mem_waiter_t* w = b->head; w; w = w->next) {
    if (w->deadline_ms > now_ms) continue;
    cw_mem_budget_remove(b, w);
    b->timeouts++;
    return w;
  }
  return NULL;
}

void cw_mem_budget_waiter_free(cw_mem_waiter_t* w) {
  if (!w) return;
  free(w->need);
  free(w);
}

int64_t cw_mem_budget_next_deadline(const cw_mem_budget_t* b) {
  int64_t next = INT64_MAX;
  for (const cw_mem_waiter_t* w = b->head; w; w = w->next) {
    if (w->deadline_ms < next) next = w->deadline_ms;
  }
  return next;
}

uint64_t cw_mem_budget_used_total(const cw_mem_budget_t* b) {
  uint64_t sum = 0;
  for (size_t d = 0; d < b->num_devices; ++d) sum += b->used[d];
  return sum;
}

uint64_t cw_mem_budget_used_max(const cw_mem_budget_t* b) {
  uint64_t most = 0;
  for (size_t d = 0; d < b->num_devices; ++d) {
    if (b->used[d] > most) most = b->used[d];
  }
  return most;
}
