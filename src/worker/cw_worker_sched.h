// Gang order at the worker (cw_worker_sched.c): launches the controller
// stamped are issued to PJRT in stamp order, one total order per island.
#ifndef CW_WORKER_SCHED_H_
#define CW_WORKER_SCHED_H_

#include "cw_worker_internal.h"

// The stamp of a request from the controller (0: none, or not a stamped LAUNCH).
uint64_t cw_worker_stamp_of(const cw_conn_t* c, uint16_t type, const ProtobufCMessage* msg);
// True when the head launch of `c`, stamped `stamp`, must wait for its turn:
// `c` is parked (launch_waiting) and pumped again when the turn comes.
bool cw_worker_stamp_wait(cw_conn_t* c, uint64_t stamp);
// A stamped launch was issued or failed in its turn, or refused before it:
// records it, advances the order, resumes connections whose turn came.
void cw_worker_stamp_passed(cw_worker_t* w, uint64_t stamp, uint64_t session_id);
// Turns passed between these two calls resume their waiters only at the
// second: a resumed connection issues (and may free) launches the caller
// still walks. The first returns what the second takes; they nest.
bool cw_worker_stamp_wake_defer(cw_worker_t* w);
void cw_worker_stamp_wake_resume(cw_worker_t* w, bool deferred);
// A request dropped or refused before it became a launch: passes its stamp.
void cw_worker_stamp_drop(cw_conn_t* c, uint16_t type, const ProtobufCMessage* msg);
// A REGISTER goes out: the controller counts this worker's island from 1.
void cw_worker_stamp_restart(cw_worker_t* w);
// A part waiting for memory holds the turn of `stamp` (0: none holds it):
// the stall recovery must not go past it.
void cw_worker_stamp_hold(cw_worker_t* w, uint64_t stamp);
// The part stamped `stamp` no longer holds its turn (if it still does: a
// REGISTER since may have started the count again).
void cw_worker_stamp_unhold(cw_worker_t* w, uint64_t stamp);
// Whether a part stamped `stamp` may be prepared now, ahead of its turn: it
// is the frontier (every stamp before it, from the next turn on, is prepared
// or refused).
bool cw_worker_stamp_may_prepare(cw_worker_t* w, uint64_t stamp);
// A part stamped `stamp` answered ready (at its turn or ahead of it): the
// frontier moves past it. Prepared turns are held on purpose: the stall
// recovery waits for the controller's go.
void cw_worker_stamp_prepared(cw_worker_t* w, uint64_t stamp);
// Shutting down: nothing waits for a turn any more.
void cw_worker_stamp_stop(cw_worker_t* w);
// Points st->sched_stamps at the record; returns what the caller frees.
void* cw_worker_stamp_stats(cw_worker_t* w, Causeway__V1__Stats* st);
void cw_worker_stamp_free(cw_worker_t* w);

#endif  // CW_WORKER_SCHED_H_
