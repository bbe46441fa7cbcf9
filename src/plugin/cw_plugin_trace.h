// Session timeline (CAUSEWAY_TRACE, cw_plugin_trace.c): the client's own
// dispatches, transfers and waits, plus every worker's recording of the
// session, written as one Chrome trace file when the client goes.
#ifndef CW_PLUGIN_TRACE_H_
#define CW_PLUGIN_TRACE_H_

#include <stdbool.h>
#include <stdint.h>

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_worker_s cw_plugin_worker_t;

#define CW_PLUGIN_TRACE_LANE_DISPATCH 1  // client tids: API calls that dispatch
#define CW_PLUGIN_TRACE_LANE_TRANSFER 2  // requests from dispatch to the worker's ack
#define CW_PLUGIN_TRACE_LANE_WAIT 3      // blocking waits

// Whether this process records a timeline now (cheap: callers stamp a start
// time only when it does).
bool cw_plugin_trace_on(void);
// Records a client event [start_ns, now) (no-op unless tracing); `w` may be NULL.
void cw_plugin_trace_client_event(const char* cat, const char* name, int lane, int64_t start_ns,
                                  const cw_plugin_worker_t* w, uint64_t id, uint64_t seq,
                                  uint64_t bytes);
// CAUSEWAY_TRACE set: asks every worker to record the session, registers the
// exit-time write. Called once the client is ready.
void cw_plugin_trace_start(cw_plugin_client_t* c);
// Fetches the workers' events and writes the file (client destroy, exit).
void cw_plugin_trace_finish(cw_plugin_client_t* c);

#endif  // CW_PLUGIN_TRACE_H_
