// The worker's link to its controller (cw_worker_link.c): REGISTER with the
// worker's inventory, retried with backoff until it first succeeds (within
// --start-timeout-ms), heartbeats while registered, reconnecting with
// backoff when the link is lost (or exiting, with --exit-with-controller).
#ifndef CW_WORKER_LINK_H_
#define CW_WORKER_LINK_H_

#include <stddef.h>

#include "cw_worker_internal.h"

// Starts the link when --controller is set (connects and registers
// asynchronously); without one, the worker is ready now (--ready-fd).
CW_MUST_USE cw_status_t cw_worker_link_start(cw_worker_t* w);
// Shutting down: timers close.
void cw_worker_link_stop(cw_worker_t* w);
// Why the link stopped the worker (no registration within
// --start-timeout-ms), for the caller; OK otherwise.
CW_MUST_USE cw_status_t cw_worker_link_take_error(cw_worker_t* w);
void cw_worker_link_release(cw_worker_t* w);
// Whether the controller has accepted this worker's REGISTER on the link
// that is up now (false without --controller).
bool cw_worker_link_registered(const cw_worker_t* w);
// The controller connection `c` closed.
void cw_worker_link_closed(cw_conn_t* c);

// The address clients and peers should use for a worker listening on
// `listen_address`: a wildcard host (0.0.0.0, ::, empty) becomes this host's
// name. Writes a NUL-terminated string into out[out_size].
void cw_worker_advertised_address(const char* listen_address, char* out, size_t out_size);

#endif  // CW_WORKER_LINK_H_
