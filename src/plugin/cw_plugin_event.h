// Futures and PJRT events. A future is a reference-counted one-shot
// completion; every PJRT_Event handed to JAX is one reference to a future,
// so a launch's outputs, its completion events and their ready events share
// one allocation.
#ifndef CW_PLUGIN_EVENT_H_
#define CW_PLUGIN_EVENT_H_

#include <stdbool.h>

#include "cw_pjrt_c_api.h"
#include "cw_status.h"

typedef struct cw_plugin_future_s cw_plugin_future_t;

// New pending future with one reference (NULL when out of memory).
cw_plugin_future_t* cw_plugin_future_create(void);
// New completed future (takes `status`; OK for success).
cw_plugin_future_t* cw_plugin_future_create_done(cw_status_t status);
// The same, failed with the error of a launch's input, which a launch that
// takes its buffers as inputs passes on as it is (cw_plugin_execute.c).
cw_plugin_future_t* cw_plugin_future_create_carried(cw_status_t status);
bool cw_plugin_future_is_carried(const cw_plugin_future_t* f);
void cw_plugin_future_retain(cw_plugin_future_t* f);
// Drops one reference; NULL is ignored.
void cw_plugin_future_release(cw_plugin_future_t* f);
// Completes `f` with `status` (taken). Only the first completion counts;
// OnReady callbacks run here, on the completing thread.
void cw_plugin_future_complete(cw_plugin_future_t* f, cw_status_t status);
// The same, for a launch's future completed off JAX's thread: its OnReady
// callbacks are handed back to the next caller of
// cw_plugin_future_run_handed_back (JAX's thread, at its next launch), or
// run by a runner thread after CAUSEWAY_HANDBACK_US (up to 16 times that
// while the last caller is runnable); at once if someone waits on `f`
// (cw_plugin_future_expect_wait).
void cw_plugin_future_complete_handback(cw_plugin_future_t* f, cw_status_t status);
// Runs the callbacks handed back so far, here: PJRT_LoadedExecutable_Execute
// and PJRT_Event_Await call it first, holding no lock, and client destroy
// last. A call from outside a callback also names this thread the plugin's
// last caller (while it is runnable, the runner leaves it the callbacks).
void cw_plugin_future_run_handed_back(void);
// Someone is about to wait on `f` (its callbacks then run at completion).
void cw_plugin_future_expect_wait(cw_plugin_future_t* f);
// CAUSEWAY_HANDBACK_US, process-wide: the longest a handed-back callback
// waits for a caller; 0: none is handed back.
void cw_plugin_future_set_handback_us(int64_t us);
bool cw_plugin_future_is_done(cw_plugin_future_t* f);
// One pointer for whoever completes `f` (a launch's worker), so that its
// completion needs no context of its own. Set before `f` is shared.
void cw_plugin_future_set_ctx(cw_plugin_future_t* f, void* ctx);
void* cw_plugin_future_ctx(const cw_plugin_future_t* f);
// Blocks until done; returns a copy of its error (OK on success).
CW_MUST_USE cw_status_t cw_plugin_future_wait(cw_plugin_future_t* f);
// Polls for up to budget_us microseconds (yielding between polls) for `f`
// to complete; whether it has. For a caller about to sleep on it. `take`
// (may be NULL) runs before each poll: it may complete `f` itself.
bool cw_plugin_future_spin(cw_plugin_future_t* f, int64_t budget_us, void (*take)(void* arg),
                           void* arg);
// A new PJRT_Event holding its own reference to `f`.
static inline PJRT_Event* cw_plugin_event_from_future(cw_plugin_future_t* f) {
  cw_plugin_future_retain(f);
  return (PJRT_Event*)f;
}

// The PJRT_Event_* slots.
PJRT_Error* cw_plugin_event_destroy(PJRT_Event_Destroy_Args* args);
PJRT_Error* cw_plugin_event_is_ready(PJRT_Event_IsReady_Args* args);
PJRT_Error* cw_plugin_event_error(PJRT_Event_Error_Args* args);
PJRT_Error* cw_plugin_event_await(PJRT_Event_Await_Args* args);
PJRT_Error* cw_plugin_event_on_ready(PJRT_Event_OnReady_Args* args);
PJRT_Error* cw_plugin_event_create(PJRT_Event_Create_Args* args);
PJRT_Error* cw_plugin_event_set(PJRT_Event_Set_Args* args);

#endif  // CW_PLUGIN_EVENT_H_
