// Losing workers and the controller (cw_plugin_health.c).
//
// WORKER_DOWN: the worker is marked dead and our connection to it shut, so
// what is pending there fails at once with UNAVAILABLE naming it. WORKER_UP
// with a new incarnation: a replacement took its slot; the next operation
// on it reconnects (cw_plugin_health_revive, from cw_plugin_worker_check).
// A lost controller connection is named in the errors it causes.
#ifndef CW_PLUGIN_HEALTH_H_
#define CW_PLUGIN_HEALTH_H_

#include <stdbool.h>
#include <stddef.h>

#include "cw_status.h"
#include "proto/causeway.pb-c.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_worker_s cw_plugin_worker_t;

// A ClusterEvent from the controller (reader thread). WORKER_DOWN marks the
// worker dead and closes our connection to it (what is pending there fails);
// WORKER_UP for a worker of this session with a new incarnation records
// its replacement, which the next operation on it connects to.
void cw_plugin_health_on_event(cw_plugin_client_t* c, const Causeway__V1__ClusterEvent* ev);
// On a dead worker: if a replacement was announced, connects to it in this
// session, tells the controller (HEALTH_REJOIN), restarts seq numbering,
// moves to a new epoch and returns true. Else, if only our link to it was
// lost (the controller never said it died), connects to it again: when the
// session there is the same life (HelloReply.session_key) it fills the seqs
// the worker never got (from HelloReply.session_seq_next on) and goes on in
// the same epoch, its arrays and executables alive; returns true. The
// connect is not under w's send lock: while one thread connects, the calls
// of others on w fail at once (false).
bool cw_plugin_health_revive(cw_plugin_worker_t* w);
// Reattaching after a lost link is tried at most this often per worker (a
// path still cut makes that call wait up to the connect timeout).
#define CW_PLUGIN_REATTACH_EVERY_MS 1000
// A reattach fills at most this many seqs; more means the session's order
// there is not ours (it is treated as gone).
#define CW_PLUGIN_REATTACH_MAX_FILL 65536
// Frees the worker's health state (retired connections and addresses).
void cw_plugin_health_worker_deinitialize(cw_plugin_worker_t* w);
// A replaced connection is released this long after it was retired, at a
// later reconnection of its worker (or with the client).
#define CW_PLUGIN_RETIRE_GRACE_MS 10000
// Retired connections not released yet (for tests).
size_t cw_plugin_health_retired_open(cw_plugin_worker_t* w);

// Whether `status` (borrowed) says the controller connection is lost.
bool cw_plugin_health_controller_lost(const cw_plugin_client_t* c, cw_status_t status);
// Takes `status`: when the controller connection is lost, UNAVAILABLE
// "causeway: the controller at ADDRESS is unavailable: ..."; else unchanged.
CW_MUST_USE cw_status_t cw_plugin_health_controller_error(cw_plugin_client_t* c,
                                                          cw_status_t status);

#endif  // CW_PLUGIN_HEALTH_H_
