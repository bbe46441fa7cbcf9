// The worker's connections and sessions (cw_worker_conn.c): the worker's
// handler table on src/net, HELLO's sessions, per-session `seq` order across
// connections (held requests, flow control), drain refusals in that order,
// bulk bytes received for requests, per-peer byte counts, and outbound
// connections to peers and the controller.
#ifndef CW_WORKER_CONN_H_
#define CW_WORKER_CONN_H_

#include "cw_worker_internal.h"

// Starts serving `address` (the worker's --listen).
CW_MUST_USE cw_status_t cw_worker_conn_listen(cw_worker_t* w, const char* address);

// The cached outbound connection to `address`, connecting (HELLO role
// WORKER, no session: each PUT names its own) when there is none. One per
// peer, whatever the sessions its PUTs go to: the client names the
// destination session, so one per session grew without bound.
// *out_conn is borrowed.
CW_MUST_USE cw_status_t cw_worker_conn_peer(cw_worker_t* w, const char* address,
                                            cw_conn_t** out_conn);

static inline const char* cw_worker_conn_name(const cw_conn_t* c) {
  return cw_net_conn_name(c->nc);
}
void cw_worker_conn_ref(cw_conn_t* c);
void cw_worker_conn_unref(cw_conn_t* c);

// Replies on `c`; errors (status taken) count in STATS.
void cw_worker_reply(cw_conn_t* c, uint16_t type, uint64_t request_id,
                     const ProtobufCMessage* msg);
void cw_worker_reply_error(cw_conn_t* c, uint16_t type, uint64_t request_id,
                           cw_status_t status);

// Hands a frame's bulk bytes to `op` (takes it): into staging memory (or the
// bytes a held request already received), finished by
// cw_worker_compile_received / cw_worker_transfer_received.
void cw_worker_conn_receive_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op);
// The same into `dest` (op->staging stays NULL; the caller keeps `dest`
// alive until op is done), for a frame whose bytes are not in yet.
void cw_worker_conn_receive_bulk_at(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op,
                                    void* dest);
// Whether the frame being applied is a held request whose bytes are in
// already (then cw_worker_conn_take_held_bulk hands them to `op`).
bool cw_worker_conn_bulk_arrived(const cw_conn_t* c);
// Whether the request being applied on `c` was held for its seq turn (not
// just read from the socket).
bool cw_worker_conn_applying_held(const cw_conn_t* c);
void cw_worker_conn_take_held_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op);
// Memory back-pressure (cw_worker_mem.h): `c` stops being read before the
// bytes of op's frame; cw_worker_conn_resume_bulk (`keep`: they go to op as
// cw_worker_conn_receive_bulk says; else they are discarded) reads on. A
// frame without bytes holds reading all the same, and `keep` completes op.
// A close while it waits fails op's entry and frees op.
void cw_worker_conn_defer_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op);
void cw_worker_conn_resume_bulk(cw_conn_t* c, cw_op_t* op, bool keep);

cw_session_t* cw_worker_session_find(cw_worker_t* w, uint64_t id);
// Shutting down: every session goes with its objects.
void cw_worker_sessions_free(cw_worker_t* w);

// STATS' per-peer byte counts; the caller frees *out_items/*out_ptrs.
void cw_worker_conn_peer_stats(cw_worker_t* w, Causeway__V1__Stats* st,
                               Causeway__V1__PeerStats** out_items,
                               Causeway__V1__PeerStats*** out_ptrs);
void cw_worker_conn_free_peer_stats(cw_worker_t* w);

#endif  // CW_WORKER_CONN_H_
