// Operations and observability at the worker (cw_worker_ops.c): pause and
// drain (`causeway pause | resume | drain`, docs/operations.md), STATS and
// INVENTORY.
#ifndef CW_WORKER_OPS_H_
#define CW_WORKER_OPS_H_

#include "cw_worker_internal.h"

// ADMIN_HOLD and ADMIN_WORKER_DRAIN from the controller.
void cw_worker_handle_admin(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg);
void cw_worker_handle_stats(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg);
void cw_worker_handle_inventory(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                ProtobufCMessage** msg);
// While draining, a request the message table marks refused_draining is
// refused (answered; *msg freed): true. The ids it would have created exist
// in error, so that what the client does with them next says why.
bool cw_worker_ops_refuse(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg);
// For a REGISTER, at most `max` session ids: with `paused`, those it holds
// paused (a new controller learns the pauses from it); else those a client
// is connected in (a new controller expects them to resume). *out_ids is
// malloc'd (NULL when none, or out of memory: then 0); *out_more: some were
// left out. Returns how many.
size_t cw_worker_ops_session_ids(const cw_worker_t* w, bool paused, size_t max, uint64_t** out_ids,
                                 bool* out_more);

#endif  // CW_WORKER_OPS_H_
