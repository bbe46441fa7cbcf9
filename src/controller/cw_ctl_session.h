// Sessions at the controller (cw_ctl_session.c): one per client, with its
// executables, its connections to each worker (opened on first use), the
// OPEN_SESSION handshake (waiting for workers, then the allocator), cluster
// events to every client, and the direct-launch lease.
#ifndef CW_CTL_SESSION_H_
#define CW_CTL_SESSION_H_

#include "cw_ctl_internal.h"

// HELLO of a client: the session it names (a new one when 0 or unknown);
// NULL when out of memory.
cw_ctl_session_t* cw_ctl_session_find(cw_controller_t* ctl, uint64_t id);
cw_ctl_session_t* cw_ctl_session_create(cw_controller_t* ctl, uint64_t id);
void cw_ctl_session_retain(cw_ctl_session_t* s);
void cw_ctl_session_release(cw_ctl_session_t* s);
// The client's last connection is gone: closes the session's connections to
// the workers (each worker frees the session once the client's direct
// connections are gone too).
void cw_ctl_session_close(cw_ctl_session_t* s);

// A session's executables by id (a request may name thousands): the newest
// of an id is found and forgotten first. At most CW_CTL_MAX_SESSION_EXES.
#define CW_CTL_MAX_SESSION_EXES (1u << 20)
// Adds `e` (its id set) to the session; false when out of memory.
CW_MUST_USE bool cw_ctl_exe_add(cw_ctl_session_t* s, cw_ctl_exe_t* e);
cw_ctl_exe_t* cw_ctl_exe_find(cw_ctl_session_t* s, uint64_t id);
void cw_ctl_exe_forget(cw_ctl_session_t* s, uint64_t id);

// The controller's own connection to worker `w` in `session_id` (0: a new
// private session); HELLO goes out at once. Returns it retained, or NULL.
cw_net_conn_t* cw_ctl_link_open(cw_controller_t* ctl, cw_ctl_worker_t* w, uint64_t session_id,
                                bool fresh_session);
// Closes and releases *link (NULL is fine); sets it NULL.
void cw_ctl_link_drop(cw_net_conn_t** link);
// The same, for a worker that is lost: what is pending on it fails
// UNAVAILABLE with `why` (the heartbeat's silence, say), not only "closed".
void cw_ctl_link_lose(cw_net_conn_t** link, const char* why);
// The connection to worker `index` in session `s`, opened on first use.
cw_net_conn_t* cw_ctl_session_link(cw_ctl_session_t* s, uint32_t index);
// The same for a worker that just took over a dead slot (its reload LOADs):
// a link opened here asks for a fresh life of the session there
// (HelloRequest.fresh_session), not one the worker kept from before.
cw_net_conn_t* cw_ctl_session_link_fresh(cw_ctl_session_t* s, uint32_t index);
// The controller's own connection to `w` (compiles, STATS polls, ADMIN_*),
// reopened when it was lost; NULL when it cannot be opened.
cw_net_conn_t* cw_ctl_private_link(cw_controller_t* ctl, cw_ctl_worker_t* w);
// A reply nobody waits for (logged at debug level when it is an error).
void cw_ctl_ignore_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                         const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len);

// An EVENT to every client session.
void cw_ctl_broadcast_event(cw_controller_t* ctl, Causeway__V1__ClusterEvent* ev);

void cw_ctl_handle_open_session(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                ProtobufCMessage** msg);
// SessionInfo for `p`'s session (every device, or its allocation), the reply
// to its request `type` (OPEN_SESSION, SESSION_RESUME).
void cw_ctl_session_reply_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint16_t type,
                               uint64_t request_id);
// Answers the OPEN_SESSIONs that can be answered: enough workers, deadline
// passed (`expire`), or the client gone; then the allocator's queue.
void cw_ctl_session_open_waits_check(cw_controller_t* ctl, bool expire);
// The OPEN_SESSION tick (ctl->open_tick).
void cw_ctl_session_open_tick(uv_timer_t* t);

// Whether `s` may send LAUNCH straight to worker `worker_index`
// (WorkerInfo.direct_launch) rather than through the controller.
// share_weights: cw_ctl_alloc_share_weights (NULL: sharers are relayed).
bool cw_ctl_session_direct_launch(cw_controller_t* ctl, cw_ctl_session_t* s,
                                  uint32_t worker_index, const uint32_t* share_weights);

#endif  // CW_CTL_SESSION_H_
