// Memory back-pressure at the worker (docs/architecture.md, "Memory
// back-pressure"): each device's budget (--memory-limit, else the plugin's
// own limit from PJRT_Device_MemoryStats, else none), the bytes the store's
// buffers hold per device, and the requests waiting for memory. The
// decision is cw_mem_budget.c's; this file charges store entries, runs the
// waiters it admits from the loop's idle phase, times them out
// (--memory-wait-ms) and reports the numbers in STATS.
//
// Who charges what, always before the memory is taken: UPLOAD and PUT their
// dense size before their bytes are read (cw_worker_transfer.c), COPY its
// source's size on the destination device, LAUNCH its outputs' sizes (from
// the executable's output shapes) minus what it donates, when it is about to
// be issued (cw_worker_launch.c). The charge sits on the buffer's store entry
// and goes back when the entry's memory goes (failed, deleted, its session
// ended).
#ifndef CW_WORKER_MEM_H_
#define CW_WORKER_MEM_H_

#include "cw_worker_internal.h"

typedef struct cw_worker_mem_wait_s cw_worker_mem_wait_t;

// A wait's end, on the loop thread: OK when the request fits now (the
// callee charges what it takes before returning), RESOURCE_EXHAUSTED when
// it timed out, CANCELLED when the worker shuts down. Takes `status`.
typedef void (*cw_worker_mem_fn)(cw_worker_t* w, void* user, cw_status_t status);

// The budget from the settings and the plugin; logs it.
CW_MUST_USE cw_status_t cw_worker_mem_start(cw_worker_t* w);
// Shutting down: every waiter ends with CANCELLED; the loop handles close.
void cw_worker_mem_stop(cw_worker_t* w);
void cw_worker_mem_free(cw_worker_t* w);

// True when some device has a limit (requests may wait).
bool cw_worker_mem_limited(const cw_worker_t* w);

// A zeroed array of one count per device, owned by the worker, to build a
// request's need in; valid until the next call.
uint64_t* cw_worker_mem_scratch(cw_worker_t* w);

// Asks for need[device] bytes for a request of session `skey` (`what`, e.g.
// "UPLOAD 12", names it in errors; copied):
// - OK, *out_wait NULL: it fits; charge it now (cw_worker_mem_charge).
// - OK, *out_wait set: it waits; fn(w, user, status) ends the wait unless it
//   is cancelled first.
// - RESOURCE_EXHAUSTED: more than a device's whole budget; it never fits.
CW_MUST_USE cw_status_t cw_worker_mem_reserve(cw_worker_t* w, uint64_t skey,
                                              const uint64_t* need, const char* what,
                                              cw_worker_mem_fn fn, void* user,
                                              cw_worker_mem_wait_t** out_wait);
// Ends a wait without calling its fn (its request went away).
void cw_worker_mem_cancel(cw_worker_t* w, cw_worker_mem_wait_t* wait);

// Charges `bytes` on `device` to buffer entry `e`, replacing its charge.
// May go over the budget (a buffer whose size is known only once it exists).
void cw_worker_mem_charge(cw_worker_t* w, cw_store_entry_t* e, int device, uint64_t bytes);
// Gives e's charge back (its memory went, or moved to another buffer).
void cw_worker_mem_uncharge(cw_worker_t* w, cw_store_entry_t* e);

// Fills the memory fields of STATS; and the requests of session key `skey`
// waiting for memory, and the bytes they need.
void cw_worker_mem_stats(cw_worker_t* w, Causeway__V1__Stats* st);
void cw_worker_mem_session_waiting(const cw_worker_t* w, uint64_t skey, uint64_t* out_waiting,
                                   uint64_t* out_waiting_bytes);

#endif  // CW_WORKER_MEM_H_
