// Requests the controller relays to the worker that holds their executable
// (cw_ctl_relay.c): LAUNCH and EXE_INFO go through the island's queue
// (cw_ctl_sched.c), DELETE is split over the workers that hold its ids. The
// reply comes back to the client as the worker gave it.
#ifndef CW_CTL_RELAY_H_
#define CW_CTL_RELAY_H_

#include "cw_ctl_internal.h"
#include "cw_ctl_sched_queue.h"

typedef struct cw_ctl_multi_s cw_ctl_multi_t;

// The life of the session at one member of an island (HelloReply.session_key
// of the session's link there).
typedef struct cw_ctl_life_s {
  uint32_t worker;
  uint64_t life;
} cw_ctl_life_t;

// A client request waiting in an island queue.
struct cw_ctl_item_s {
  uint16_t type;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  cw_ctl_session_t* session;  // retained
  ProtobufCMessage* msg;      // owned; relayed as it is
  cw_ctl_multi_t* multi;      // DELETE spanning workers; NULL otherwise
  uint32_t worker;
  int64_t received_ns;  // CLOCK_MONOTONIC at receipt (launch latency)
  uint64_t stamp;       // LAUNCH: the island's stamp once relayed (cw_ctl_sched.c)
  cw_sched_item_t sched;  // its place in the island's queues (cw_ctl_sched.c)
  // A LAUNCH or DELETE for an island of several workers: the session's life
  // at each member when it came (cw_ctl_island_note_lives); malloc'd.
  cw_ctl_life_t* lives;
  size_t num_lives;
};

// A DELETE split over several workers, or a LAUNCH over the workers of one
// island: one reply when all are done.
struct cw_ctl_multi_s {
  uint16_t type;
  int left;
  cw_status_t first_error;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  uint64_t first_id;
};

void cw_ctl_handle_launch(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg);
void cw_ctl_handle_exe_info(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg);
void cw_ctl_handle_delete(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg);

// A queue item for `s`'s request (retains client and session; takes msg,
// freed also when this fails and returns NULL).
cw_ctl_item_t* cw_ctl_item_new(uint16_t type, cw_net_conn_t* client, uint64_t request_id,
                               cw_ctl_session_t* s, ProtobufCMessage* msg, uint32_t worker);
void cw_ctl_item_free(cw_ctl_item_t* it);
// Answers an item with an error (takes st) and frees it.
void cw_ctl_item_fail(cw_controller_t* ctl, cw_ctl_item_t* it, cw_status_t st);
// The executable an item waits for: its id, or 0 when none.
uint64_t cw_ctl_item_exe_id(const cw_ctl_item_t* it);
// The reply to a relayed item (user: the item): answers the client.
void cw_ctl_relay_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                        const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len);
// One part of `m` is done (st taken; the first error wins); the last answers.
void cw_ctl_multi_done(cw_ctl_multi_t* m, cw_controller_t* ctl, cw_status_t st);

#endif  // CW_CTL_RELAY_H_
