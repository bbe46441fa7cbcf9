// Sessions' devices (cw_ctl_alloc.c): a session that asks for N devices gets
// session device ids 0..N-1 mapped onto workers' devices by the allocator
// (cw_ctl_alloc_plan.c), now, later (a FIFO queue) or never (with why).
#ifndef CW_CTL_ALLOC_H_
#define CW_CTL_ALLOC_H_

#include "cw_ctl_internal.h"

// OPEN_SESSION once enough workers registered: a session without num_devices
// is answered at once; otherwise the allocator grants, queues (telling the
// client why) or refuses it.
void cw_ctl_alloc_open(cw_controller_t* ctl, cw_ctl_peer_t* p, uint64_t request_id,
                       const Causeway__V1__OpenSessionRequest* r);
// The queue: grants what fits now in FIFO order, drops waits whose client is
// gone, and (expire) fails those past their timeout.
void cw_ctl_alloc_check(cw_controller_t* ctl, bool expire);
// Fills SessionInfo for an allocated (or mapped, cw_ctl_resume.c) session;
// false when `p`'s session has neither (the caller lists every device).
bool cw_ctl_alloc_reply_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint16_t type,
                             uint64_t request_id);
void cw_ctl_alloc_session_free(cw_ctl_session_t* s);
// A session's device id: its worker (NULL: no such device) and local id.
cw_ctl_worker_t* cw_ctl_alloc_resolve(cw_controller_t* ctl, cw_ctl_session_t* s, int64_t id,
                                      uint32_t* out_local);
// How many device ids the session has (ids are 0..n-1).
int64_t cw_ctl_alloc_num_ids(cw_controller_t* ctl, cw_ctl_session_t* s);
// The device a program without a device assignment runs on: the session's
// first, or (no allocation) the first live worker's first; -1: none.
int64_t cw_ctl_alloc_default_device(cw_controller_t* ctl, cw_ctl_session_t* s);
// The session's id of `worker`'s device `local` (-1: not the session's).
int32_t cw_ctl_alloc_session_id(cw_controller_t* ctl, cw_ctl_session_t* s, uint32_t worker,
                                uint32_t local);
// True when the session's devices on that worker are its alone (allocated,
// not shared): the lead's "shared => through the scheduler" test.
bool cw_ctl_alloc_exclusive_on(cw_controller_t* ctl, cw_ctl_session_t* s, uint32_t worker_index);
// Per worker (calloc'd, [num_workers]; NULL: out of memory): the weight
// every session sharing devices there has, 0 when none does,
// CW_CTL_WEIGHTS_MIXED when they differ. One pass over every session's devices.
#define CW_CTL_WEIGHTS_MIXED UINT32_MAX
uint32_t* cw_ctl_alloc_share_weights(cw_controller_t* ctl);
// True when the session shares devices and every session sharing devices on
// that worker has its weight (share_weights, above): the worker's own loop
// orders their launches as the island's scheduler would, since no weight
// tells them apart. The caller has checked that the session has devices
// there and that the worker is an island by itself.
bool cw_ctl_alloc_shared_direct(const cw_ctl_session_t* s, uint32_t worker_index,
                                const uint32_t* share_weights);
// `s` was just given shared devices (granted or resumed): where it brings a
// weight the other sharers of a one-worker island do not have, their
// launches must reach the island's scheduler, the only place weights apply,
// and their clients are told (LEASE_CHANGED).
void cw_ctl_alloc_check_leases(cw_controller_t* ctl, cw_ctl_session_t* s);
size_t cw_ctl_alloc_queue_length(const cw_controller_t* ctl);
// Whether session `s` waits in the allocation queue.
bool cw_ctl_alloc_waiting(const cw_controller_t* ctl, const cw_ctl_session_t* s);
// SessionInfo's platform from a worker's inventory; a worker's WorkerInfo
// as session `s` sees it (incarnation, direct-launch lease; share_weights:
// cw_ctl_alloc_share_weights, or NULL when `s` shares nothing).
void cw_ctl_info_platform(Causeway__V1__SessionInfo* info, const Causeway__V1__Inventory* inv);
void cw_ctl_worker_info_fill(Causeway__V1__WorkerInfo* wi, const cw_ctl_worker_t* w,
                             cw_ctl_session_t* s, const uint32_t* share_weights);

#endif  // CW_CTL_ALLOC_H_
