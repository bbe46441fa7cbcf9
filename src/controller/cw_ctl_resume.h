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

// The hold. A controller that takes over a running cluster learns from the
// workers' REGISTERs which sessions clients are still connected in; their
// devices are not known until each resumes. Until every such session has
// resumed (or given up), and at most --resume-grace-ms after the last
// REGISTER that reported one not yet waited for, no new session is given a
// device of a worker that reported one of them: a resume never finds its
// devices taken. A session is waited for once (a worker that registers
// again after a stall and reports it holds nothing up). Within the window,
// --resume-grace-ms after the last REGISTER with `previous`, a request that
// more devices than are registered would satisfy waits rather than fails:
// the workers are still coming back.
//
// Takes the sessions w's REGISTER reports (a REGISTER with `previous`).
void cw_ctl_resume_expect(cw_ctl_worker_t* w);
// Whether a hold is on (then *out_text says why, for a waiting client:
// "; 2 sessions of an earlier controller still to resume").
bool cw_ctl_resume_holds(cw_controller_t* ctl, char* out_text, size_t cap);
// Whether w's devices go to no new session now (after cw_ctl_resume_holds).
bool cw_ctl_resume_holds_worker(cw_controller_t* ctl, const cw_ctl_worker_t* w);
// Whether a request that cannot be met now waits instead of failing.
bool cw_ctl_resume_window(cw_controller_t* ctl);
// For `causeway status`: "1 session of an earlier controller still to
// resume (at most 8.2 s more)"; "" when there is no window.
void cw_ctl_resume_describe(cw_controller_t* ctl, char* out, size_t cap);
void cw_ctl_resume_free(cw_controller_t* ctl);

#endif  // CW_CTL_RESUME_H_
