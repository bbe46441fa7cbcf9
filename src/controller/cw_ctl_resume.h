// Resuming sessions after a controller restart (cw_ctl_resume.c). A new
// controller starts empty; a client whose controller restarted joins it in
// its old session id (HELLO) and sends SESSION_RESUME with what it holds: its
// devices by the ids it knows them by (worker name, local device) and the
// executables its workers still hold in the session. Once every named worker
// registered again, the controller rebuilds the session from that: the
// allocation (or, without one, a map of the client's ids), the executables'
// records (no recompile: the workers kept them loaded), the rejoined
// incarnations; the reply is the session's SessionInfo under the same ids.
#ifndef CW_CTL_RESUME_H_
#define CW_CTL_RESUME_H_

#include "cw_ctl_internal.h"

// SESSION_RESUME (takes *msg while it waits for the workers it names).
void cw_ctl_handle_session_resume(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                  ProtobufCMessage** msg);
// Answers the waiting resumes that can be answered: every named worker
// registered, the wait's deadline passed (`expire`), or the client gone.
// Called wherever OPEN_SESSION waits are checked.
void cw_ctl_resume_check(cw_controller_t* ctl, bool expire);

#endif  // CW_CTL_RESUME_H_
