// Session timelines at the worker (cw_worker_trace.c): once a client asked
// (TRACE_START), the worker records its session's uploads, downloads, sends,
// puts and executions in a ring the client fetches (TRACE_FETCH) to draw one
// timeline with its own events (CAUSEWAY_TRACE).
#ifndef CW_WORKER_TRACE_H_
#define CW_WORKER_TRACE_H_

#include "cw_worker_internal.h"

bool cw_worker_trace_enabled(cw_worker_t* w, uint64_t skey);
// Records a complete event [start_ns, now) for session `skey` if it is traced.
void cw_worker_trace_record(cw_worker_t* w, uint64_t skey, const char* cat, const char* name,
                            int device, int64_t start_ns, uint64_t id, uint64_t seq,
                            uint64_t bytes, uint64_t launch_id, const char* peer);
void cw_worker_handle_trace_start(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                  ProtobufCMessage** msg);
void cw_worker_handle_trace_fetch(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                  ProtobufCMessage** msg);
void cw_worker_trace_free(struct cw_wtrace_s* t);

#endif  // CW_WORKER_TRACE_H_
