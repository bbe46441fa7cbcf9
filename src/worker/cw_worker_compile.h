// COMPILE, LOAD, SERIALIZE and EXE_INFO at the worker (cw_worker_compile.c):
// executables are built (compiled or deserialized) on the libuv threadpool,
// never on the loop thread, and stored under the client's id.
#ifndef CW_WORKER_COMPILE_H_
#define CW_WORKER_COMPILE_H_

#include "cw_worker_internal.h"

void cw_worker_handle_compile(cw_net_conn_t* conn, const cw_frame_header_t* h,
                              ProtobufCMessage** msg);
void cw_worker_handle_load(cw_net_conn_t* conn, const cw_frame_header_t* h,
                           ProtobufCMessage** msg);
void cw_worker_handle_serialize(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                ProtobufCMessage** msg);
// Waits for a pending COMPILE or LOAD of the id.
void cw_worker_handle_exe_info(cw_net_conn_t* conn, const cw_frame_header_t* h,
                               ProtobufCMessage** msg);
// A LOAD's serialized bytes are in op->staging: deserialize them (takes op).
void cw_worker_compile_received(cw_op_t* op);

#endif  // CW_WORKER_COMPILE_H_
