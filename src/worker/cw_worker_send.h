// SEND (cw_worker_send.c): a buffer goes worker to worker. The source
// worker reads its bytes (in place when it can) and PUTs them, or the
// source's error, to the peer on a connection cached per peer and session.
#ifndef CW_WORKER_SEND_H_
#define CW_WORKER_SEND_H_

#include "cw_worker_internal.h"

void cw_worker_handle_send(cw_net_conn_t* conn, const cw_frame_header_t* h,
                           ProtobufCMessage** msg);

#endif  // CW_WORKER_SEND_H_
