// The worker registry (cw_ctl_registry.c): REGISTER gives a worker an index
// and global device ids (or a dead worker's slot back, cw_ctl_health.c), and
// a worker's loss fails its work and tells every session.
#ifndef CW_CTL_REGISTRY_H_
#define CW_CTL_REGISTRY_H_

#include "cw_ctl_internal.h"

void cw_ctl_handle_register(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg);
// Marks `w` dead (why: for its error texts): its connections close (what is
// in flight there fails UNAVAILABLE naming it), its queue fails, every
// session hears WORKER_DOWN.
void cw_ctl_worker_lost(cw_ctl_worker_t* w, const char* why);
// An error that arrived on (or because of) a connection to `w`: when that
// connection is gone, says which worker is unavailable. Takes `st`.
CW_MUST_USE cw_status_t cw_ctl_worker_error(cw_ctl_worker_t* w, cw_net_conn_t* conn,
                                            cw_status_t st);
// UNAVAILABLE for work on the dead `w` (of `island`, when not NULL), with why
// it was lost.
CW_MUST_USE cw_status_t cw_ctl_worker_unavailable(const cw_ctl_worker_t* w, const char* island);
size_t cw_ctl_alive_workers(const cw_controller_t* ctl);
// 1..max printable characters.
bool cw_ctl_printable(const char* s, size_t max);

#endif  // CW_CTL_REGISTRY_H_
