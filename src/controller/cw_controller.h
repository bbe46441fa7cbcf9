// causeway-controller: one libuv loop thread that owns the worker registry,
// client sessions, the compile service (compile once, cache serialized
// executables, LOAD into sessions) and the per-island launch relay. See
// cw_controller.c for the loop's phases and docs/protocol.md for the wire.
#ifndef CW_CONTROLLER_CONTROLLER_H_
#define CW_CONTROLLER_CONTROLLER_H_

#include "cw_settings.h"
#include "cw_status.h"

typedef struct cw_controller_s cw_controller_t;

// Starts listening; prints "causeway-controller listening on ADDR" to
// stdout. `settings` is borrowed for the controller's lifetime.
CW_MUST_USE cw_status_t cw_controller_create(const cw_settings_t* settings,
                                             cw_controller_t** out_controller);
// Runs the loop until SIGTERM/SIGINT, EOF on --watch-fd, or cw_controller_stop.
CW_MUST_USE cw_status_t cw_controller_run(cw_controller_t* controller);
// Starts a clean shutdown from the loop thread.
void cw_controller_stop(cw_controller_t* controller);
void cw_controller_release(cw_controller_t* controller);

#endif  // CW_CONTROLLER_CONTROLLER_H_
