// The controller connection across controller restarts (cw_plugin_resume.c).
//
// A client that joined a cluster (not an embedded one) watches its
// controller connection (a PING every CW_PLUGIN_RESUME_PING_MS, and every
// request's failure). When it is lost, one thread reconnects to the same
// address (backoff from 100 ms to 0.5 s) and reopens the session there with
// SESSION_RESUME: the same session id, the same devices under the same ids,
// the executables the workers still hold. Meanwhile calls that need an
// answer from the controller (compile) wait (cw_plugin_ctrl_get), for at
// most CAUSEWAY_CONTROLLER_RECONNECT_MS; relayed requests (LAUNCH, DELETE)
// sent meanwhile, and those whose replies the lost controller took with it,
// are parked and sent again on the new connection, in seq order per worker,
// before anything new: their events complete later. Past the bound every waiter
// and parked request fails UNAVAILABLE naming the controller, and later
// calls fail at once with the same error. CAUSEWAY_CONTROLLER_RECONNECT_MS=0
// (or an embedded cluster) keeps the old behaviour: c->resume is NULL and
// calls fail at once.
#ifndef CW_PLUGIN_RESUME_H_
#define CW_PLUGIN_RESUME_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_client.h"
#include "cw_status.h"
#include "proto/causeway.pb-c.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_exe_s cw_plugin_exe_t;
typedef struct cw_plugin_resume_s cw_plugin_resume_t;

#define CW_PLUGIN_RESUME_PING_MS 250

// A request sent on the controller connection whose reply may be lost with
// it; embedded first in the caller's record of the request.
typedef struct cw_plugin_parked_s {
  struct cw_plugin_parked_s* next;
  uint32_t worker;  // its worker's index in the client's table, and
  uint64_t seq;     // its seq there: parked requests are sent again in this order
  // Sends it again on `ctrl` (generation `gen`), or, with `failure` (taken),
  // fails it for good.
  void (*resend)(struct cw_plugin_parked_s* p, cw_client_t* ctrl, uint64_t gen,
                 cw_status_t failure);
} cw_plugin_parked_t;

// Sets up c->resume when reconnecting is on for `c` (its settings read, no
// embedded cluster); else leaves it NULL. Before the session is opened.
CW_MUST_USE cw_status_t cw_plugin_resume_create(cw_plugin_client_t* c);
// Keeps a copy of the OPEN_SESSION request (borrowed) to resume with.
CW_MUST_USE cw_status_t cw_plugin_resume_set_open(cw_plugin_client_t* c,
                                                  const Causeway__V1__OpenSessionRequest* open);
// Starts watching the controller connection (the client is ready).
CW_MUST_USE cw_status_t cw_plugin_resume_start(cw_plugin_client_t* c);
// Stops the thread and fails what is parked; before c->ctrl is released
// (whose failed requests then fail as without reconnecting).
void cw_plugin_resume_stop(cw_plugin_client_t* c);
// After c->ctrl is released: releases the connections it retired and frees
// c->resume.
void cw_plugin_resume_release(cw_plugin_client_t* c);

// The controller connection to send on, and its generation (0 without
// c->resume). Waits while a reconnection is under way; fails with its
// error when reconnecting gave up.
CW_MUST_USE cw_status_t cw_plugin_ctrl_get(cw_plugin_client_t* c, cw_client_t** out_ctrl,
                                           uint64_t* out_gen);
// Like cw_plugin_ctrl_get, but fails UNAVAILABLE at once while a
// reconnection is under way.
CW_MUST_USE cw_status_t cw_plugin_ctrl_up(cw_plugin_client_t* c, cw_client_t** out_ctrl,
                                          uint64_t* out_gen);
// Like cw_plugin_ctrl_get without waiting: the current connection, lost or
// not (a request sent on a lost one fails and can be parked). Call with the
// send lock held.
CW_MUST_USE cw_status_t cw_plugin_ctrl_now(cw_plugin_client_t* c, cw_client_t** out_ctrl,
                                           uint64_t* out_gen);
// `status` (borrowed) came from a request on the connection of generation
// `gen`. True when it says the controller is lost and reconnecting is on:
// a reconnection starts (once per connection) and the caller may try again
// with cw_plugin_ctrl_get.
bool cw_plugin_ctrl_retry(cw_plugin_client_t* c, uint64_t gen, cw_status_t status);
// Ordered sends on the controller connection hold this (for reading) from
// cw_plugin_ctrl_now to the end of cw_client_send, so requests sent again
// after a reconnection go out before any new one.
void cw_plugin_ctrl_send_lock(cw_plugin_client_t* c);
void cw_plugin_ctrl_send_unlock(cw_plugin_client_t* c);
// `status` (borrowed) failed the request `p` sent on generation `gen`. True
// when it says the controller is lost and reconnecting is on: `p` is kept
// and p->resend runs later (on the thread that reconnects, or here when the
// new connection is up already). False: the caller fails it as before.
bool cw_plugin_ctrl_park(cw_plugin_client_t* c, uint64_t gen, cw_status_t status,
                         cw_plugin_parked_t* p);

// Executables to announce when resuming: `id` on the session's devices
// `devices[0..n)` (global ids, launch order), from its compile until its
// DELETE was answered. `exe` (retained until then; may be NULL) is what a
// restarted controller may ask for again (cw_plugin_resume_exe_find).
void cw_plugin_resume_exe_added(cw_plugin_client_t* c, uint64_t id, const int32_t* devices,
                                size_t n, cw_plugin_exe_t* exe);
void cw_plugin_resume_exe_deleted(cw_plugin_client_t* c, uint64_t id);
// Executable `id` as added (a reference the caller releases), or NULL.
cw_plugin_exe_t* cw_plugin_resume_exe_find(cw_plugin_client_t* c, uint64_t id);

// Whether cluster events should be ignored now: the new controller numbers
// workers its own way until the session's table was updated from its reply.
bool cw_plugin_resume_events_muted(cw_plugin_client_t* c);
// While events are muted: true, and an event of the connection a resume is
// answered on is kept for once that answer is applied (cw_plugin_health_on_event
// then); false: handle it now.
bool cw_plugin_resume_hold_event(cw_plugin_client_t* c, const ProtobufCMessage* msg);

#endif  // CW_PLUGIN_RESUME_H_
