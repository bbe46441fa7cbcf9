// LAUNCH and LAUNCH_GO at the worker (cw_worker_launch.c). A launch's outputs
// are pending entries at once; each connection's launches are issued to
// PJRT in arrival order as their inputs become ready, stamped ones in the
// island's stamp order (cw_worker_sched.c), a paused session's ones not at
// all until it resumes, multi-device ones only while PJRT has room. Calls
// to Execute that may block go to a dispatch thread, never the loop.
#ifndef CW_WORKER_LAUNCH_H_
#define CW_WORKER_LAUNCH_H_

#include "cw_worker_internal.h"

// The dispatch thread (at start) and its end (after the loop ended).
CW_MUST_USE cw_status_t cw_worker_launch_start(cw_worker_t* w);
void cw_worker_launch_stop(cw_worker_t* w);

void cw_worker_handle_launch(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg);
// The controller's word on a prepared part of an island's launch.
void cw_worker_handle_launch_go(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                ProtobufCMessage** msg);

// Issues the connection's launches that can go (after a turn came, a resume).
void cw_worker_launch_pump(cw_conn_t* c);
// `c` closed: a prepared part nobody can say go to is cancelled, and a
// paused session's launches held here fail (nobody can resume them).
void cw_worker_launch_conn_closed(cw_conn_t* c);
// Launches waiting in the connection's queue.
size_t cw_worker_launch_queued(const cw_conn_t* c);
// The stamp of the launch at the head of the queue (0: none).
uint64_t cw_worker_launch_head_stamp(const cw_conn_t* c);
// Deletes the ids of the arguments a launch donates, on every device: the
// client treats them as gone from the moment it sent the launch.
void cw_worker_launch_drop_donated(cw_worker_t* w, uint64_t skey,
                                   const Causeway__V1__LaunchRequest* r);

#endif  // CW_WORKER_LAUNCH_H_
