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

#endif  // CW_WORKER_OPS_H_
