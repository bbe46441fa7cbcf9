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
// The ids of the sessions it holds paused, at most `max`, for a REGISTER: a
// new controller learns the pauses from it. *out_ids is malloc'd (NULL when
// none, or out of memory: then 0). Returns how many.
size_t cw_worker_ops_paused_sessions(const cw_worker_t* w, size_t max, uint64_t** out_ids);

#endif  // CW_WORKER_OPS_H_
