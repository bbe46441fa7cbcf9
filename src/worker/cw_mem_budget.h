// The worker's memory budget as a pure module (no I/O, no store): bytes in
// use per device, each device's limit, and the FIFO of requests waiting for
// memory, with the decision of who may take memory now. The worker
// (cw_worker_mem.c) charges buffers, runs the waiters this module picks and
// times them out; unit-tested in cw_mem_budget_test.c.
//
// The rules (docs/architecture.md, "Memory back-pressure"):
// - A request needs bytes on one or more devices. It fits when every device
//   stays within its limit (a device with limit 0 has none).
// - A request that needs more than a device's whole limit can never fit.
// - A session's requests take memory in their order: while one waits, the
//   session's later ones wait behind it even if they would fit.
// - Other sessions are not held back by a waiter that does not fit: when
//   memory frees, the waiters are tried oldest first and every one that fits
//   (and has no earlier waiter of its session) is admitted. A large request
//   may so wait while smaller ones pass; its timeout bounds that.
#ifndef CW_WORKER_MEM_BUDGET_H_
#define CW_WORKER_MEM_BUDGET_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

typedef struct cw_mem_waiter_s {
  struct cw_mem_waiter_s* prev;
  struct cw_mem_waiter_s* next;
  uint64_t session;   // the order key: a session's requests keep their order
  uint64_t* need;     // [num_devices], owned
  uint64_t total;     // sum of need
  int64_t since_ms;   // when it began to wait
  int64_t deadline_ms;
  void* user;         // the caller's request
} cw_mem_waiter_t;

typedef struct cw_mem_budget_s {
  size_t num_devices;
  uint64_t* limit;  // [num_devices]; 0: no limit on that device
  uint64_t* used;   // [num_devices]: bytes charged
  cw_mem_waiter_t* head;  // oldest first
  cw_mem_waiter_t* tail;
  size_t waiting;
  uint64_t waiting_bytes;
  // Counters (STATS).
  uint64_t waits;     // requests that had to wait
  uint64_t timeouts;  // waits that ended without memory
  uint64_t refused;   // requests bigger than the budget
} cw_mem_budget_t;

typedef enum cw_mem_decision_e {
  CW_MEM_FITS = 0,   // charge it now
  CW_MEM_WAIT = 1,   // enqueue it
  CW_MEM_NEVER = 2,  // more than a device's whole limit
} cw_mem_decision_t;

// `b` is caller storage; `limits[num_devices]` is copied (NULL: no limits).
CW_MUST_USE cw_status_t cw_mem_budget_initialize(cw_mem_budget_t* b, size_t num_devices,
                                                 const uint64_t* limits);
// Frees the arrays and any waiter still queued (their `user` is not touched).
void cw_mem_budget_deinitialize(cw_mem_budget_t* b);

// True when some device has a limit.
bool cw_mem_budget_limited(const cw_mem_budget_t* b);

// Decides on a request of `session` needing `need[num_devices]` bytes.
// *out_device (may be NULL) names the device that decided WAIT or NEVER
// (the first one over its limit; for WAIT behind an earlier waiter of the
// session, the first device it needs). Counts NEVER as refused.
cw_mem_decision_t cw_mem_budget_decide(cw_mem_budget_t* b, uint64_t session,
                                       const uint64_t* need, size_t* out_device);

// Bytes in use: charged (may go over a limit: the worker charges buffers
// whose size it learns only once they exist) and released.
void cw_mem_budget_charge(cw_mem_budget_t* b, size_t device, uint64_t bytes);
void cw_mem_budget_release(cw_mem_budget_t* b, size_t device, uint64_t bytes);

// Queues a waiter at the tail (need copied); counts a wait. *out_waiter is
// owned by the queue until taken or removed.
CW_MUST_USE cw_status_t cw_mem_budget_enqueue(cw_mem_budget_t* b, uint64_t session,
                                              const uint64_t* need, int64_t now_ms,
                                              int64_t deadline_ms, void* user,
                                              cw_mem_waiter_t** out_waiter);
// The oldest waiter that fits now with no earlier waiter of its session
// queued; unlinked (free it with cw_mem_budget_waiter_free), NOT charged:
// the caller charges what it takes before asking again. NULL: none.
cw_mem_waiter_t* cw_mem_budget_take_ready(cw_mem_budget_t* b);
// The oldest waiter whose deadline is at or before `now_ms`, unlinked and
// counted as a timeout; NULL: none.
cw_mem_waiter_t* cw_mem_budget_take_expired(cw_mem_budget_t* b, int64_t now_ms);
// Unlinks a queued waiter (its request went away); does not free it.
void cw_mem_budget_remove(cw_mem_budget_t* b, cw_mem_waiter_t* waiter);
void cw_mem_budget_waiter_free(cw_mem_waiter_t* waiter);
// The earliest deadline queued; INT64_MAX when none waits.
int64_t cw_mem_budget_next_deadline(const cw_mem_budget_t* b);

// Totals over devices.
uint64_t cw_mem_budget_used_total(const cw_mem_budget_t* b);
uint64_t cw_mem_budget_used_max(const cw_mem_budget_t* b);  // the fullest device

#endif  // CW_WORKER_MEM_BUDGET_H_
