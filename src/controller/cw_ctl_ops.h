// Operations (cw_ctl_ops.c): `causeway status | pause | resume | drain`
// (ADMIN_* from clients), the workers' STATS polled once a second, and the
// recent-errors ring.
#ifndef CW_CTL_OPS_H_
#define CW_CTL_OPS_H_

#include "cw_ctl_internal.h"

cw_status_t cw_ctl_ops_create(cw_controller_t* ctl);
void cw_ctl_ops_stop(cw_controller_t* ctl);  // closes its timer (the loop runs after)
void cw_ctl_ops_release(cw_controller_t* ctl);
// ADMIN_STATUS, _PAUSE, _RESUME, _DRAIN, _UNDRAIN.
void cw_ctl_handle_admin(cw_net_conn_t* conn, const cw_frame_header_t* h,
                         ProtobufCMessage** msg);
// Remembers an error answered to a peer (the recent-errors ring). Borrows st.
void cw_ctl_ops_record_error(cw_controller_t* ctl, const char* where, uint16_t type,
                             cw_status_t st);
// OPEN_SESSION: the name the client gave; the devices it was given.
void cw_ctl_ops_session_opened(cw_ctl_session_t* s, const Causeway__V1__OpenSessionRequest* r);
// Opened here (OPEN_SESSION or SESSION_RESUME) and not closed.
bool cw_ctl_ops_session_is_open(const cw_ctl_session_t* s);
void cw_ctl_ops_session_devices(cw_ctl_session_t* s, const Causeway__V1__GlobalDevice* devs,
                                size_t n);
// The same from the ids themselves (takes `ids`, n of them).
void cw_ctl_ops_session_device_ids(cw_ctl_session_t* s, int32_t* ids, size_t n);
const char* cw_ctl_ops_session_name(const cw_ctl_session_t* s);
// The worker's last STATS from the once-a-second poll (scalar fields only;
// NULL before the first answer) and its age in seconds. Metrics read it too.
const Causeway__V1__Stats* cw_ctl_ops_worker_stats(const cw_ctl_worker_t* w, double* out_age_s);
void cw_ctl_ops_session_free(cw_ctl_session_t* s);
void cw_ctl_ops_worker_free(cw_ctl_worker_t* w);
// A new worker took the slot over: the lost one's numbers are not its own.
void cw_ctl_ops_worker_replaced(cw_ctl_worker_t* w);
// A new connection of session s to worker `index`: a paused session holds there too.
void cw_ctl_ops_link_opened(cw_ctl_session_t* s, uint32_t index, cw_net_conn_t* link);
// A worker registered (took_over: a lost worker's slot): the drain and the
// paused sessions its REGISTER reports (RegisterPrevious), the state an
// earlier controller set, become this controller's; where this controller
// decided otherwise (the slot's drain, an ADMIN_RESUME here) the worker is
// told. Ids of sessions not here yet are kept for cw_ctl_ops_session_resumed.
void cw_ctl_ops_worker_registered(cw_ctl_worker_t* w, bool took_over);
// Session s resumed (SESSION_RESUME): paused when a worker reported it so.
void cw_ctl_ops_session_resumed(cw_ctl_session_t* s);
// False while the worker drains: it gets no new sessions or compiles.
bool cw_ctl_ops_worker_takes_work(const cw_ctl_worker_t* w);

#endif  // CW_CTL_OPS_H_
