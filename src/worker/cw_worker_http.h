// The worker's HTTP port (cw_worker_http.c): health probes for
// orchestrators on --metrics-listen (CAUSEWAY_METRICS_LISTEN).
#ifndef CW_WORKER_HTTP_H_
#define CW_WORKER_HTTP_H_

#include "cw_worker_internal.h"

// Starts the HTTP server when --metrics-listen is set; prints
// "causeway-worker http on http://HOST:PORT" to stdout.
CW_MUST_USE cw_status_t cw_worker_http_start(cw_worker_t* w);
// Closes it (shutting down); the loop frees it.
void cw_worker_http_stop(cw_worker_t* w);

#endif  // CW_WORKER_HTTP_H_
