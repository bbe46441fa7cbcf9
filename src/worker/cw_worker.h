// causeway-worker: one libuv event loop that owns every connection, session
// and the object store, and drives one PJRT plugin (see cw_worker.c for the
// loop's phases).
#ifndef CW_WORKER_WORKER_H_
#define CW_WORKER_WORKER_H_

#include "cw_settings.h"
#include "cw_status.h"

typedef struct cw_worker_s cw_worker_t;

// Loads the plugin, creates the PJRT client and starts listening; prints
// "causeway-worker listening on ADDR" to stdout. `settings` is borrowed for
// the worker's lifetime.
CW_MUST_USE cw_status_t cw_worker_create(const cw_settings_t* settings,
                                         cw_worker_t** out_worker);
// Runs the loop until SIGTERM/SIGINT (or cw_worker_stop) and everything has
// shut down cleanly.
CW_MUST_USE cw_status_t cw_worker_run(cw_worker_t* worker);
// Starts a clean shutdown from the loop thread.
void cw_worker_stop(cw_worker_t* worker);
void cw_worker_release(cw_worker_t* worker);

#endif  // CW_WORKER_WORKER_H_
