// Worker health (cw_ctl_health.c): heartbeats, declaring silent workers dead,
// same-name replacement (the slot, its executables re-LOADed), and clients
// rejoining a replaced worker.
#ifndef CW_CTL_HEALTH_H_
#define CW_CTL_HEALTH_H_

#include "cw_compile_cache.h"
#include "cw_ctl_internal.h"

// The heartbeat check timer (every min(worker-timeout-ms / 4, 250) ms).
void cw_ctl_health_start(cw_controller_t* ctl);
void cw_ctl_health_stop(cw_controller_t* ctl);
// HEALTH_HEARTBEAT from a worker's controller connection (a notice: no reply).
void cw_ctl_handle_heartbeat(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg);
// HEALTH_REJOIN from a client.
void cw_ctl_handle_rejoin(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg);
// Which slot a REGISTER takes: *out_slot = a dead worker's slot it replaces
// (same name, device count and platform), or NULL for a new slot. Refuses a
// name a live worker holds.
CW_MUST_USE cw_status_t cw_ctl_health_slot_for(cw_controller_t* ctl,
                                               const Causeway__V1__RegisterRequest* r,
                                               cw_ctl_worker_t** out_slot);
// The new slot `w` of peer `p` is registered (borrows nothing).
void cw_ctl_health_registered(cw_ctl_peer_t* p, cw_ctl_worker_t* w);
// `p` takes over dead slot `w` with `r` (taken): answers the REGISTER,
// announces WORKER_UP and re-LOADs the sessions' executables there.
void cw_ctl_health_take_over(cw_ctl_peer_t* p, const cw_frame_header_t* h, cw_ctl_worker_t* w,
                             Causeway__V1__RegisterRequest* r);
// `w` was just marked dead: closes its REGISTER connection if still open
// (a silent worker) and detaches it, so a late close cannot touch the slot.
void cw_ctl_health_worker_lost(cw_ctl_worker_t* w);
// UNAVAILABLE when the item's session has not rejoined the worker's current
// incarnation (requests a client sent before it saw WORKER_UP); else OK.
CW_MUST_USE cw_status_t cw_ctl_health_item_check(cw_controller_t* ctl, const cw_ctl_item_t* it);
// A session that is told about the workers now has joined their incarnations.
void cw_ctl_health_session_joined(cw_ctl_session_t* s);
// Keeps what a re-LOAD needs (retains `entry`, copies `options`).
void cw_ctl_health_exe_keep(cw_ctl_exe_t* e, cw_compile_cache_entry_t* entry,
                            const uint8_t* options, size_t options_size);
void cw_ctl_health_exe_free(cw_ctl_exe_t* e);
void cw_ctl_health_session_free(cw_ctl_session_t* s);
void cw_ctl_health_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st);

#endif  // CW_CTL_HEALTH_H_
