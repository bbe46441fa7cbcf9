// Internal to src/net: a connection's state, shared by cw_net.c (I/O and
// lifetime), cw_net_listen.c (accepting and connecting) and cw_net_service.c
// (HELLO and the message table's rules).
#ifndef CW_NET_INTERNAL_H_
#define CW_NET_INTERNAL_H_

#include "cw_net.h"

typedef struct cw_net_outreq_s {
  struct cw_net_outreq_s* next;
  uint64_t request_id;
  uint16_t type;
  cw_net_reply_fn fn;
  void* user;
} cw_net_outreq_t;

struct cw_net_conn_s {
  cw_net_conn_t* prev;
  cw_net_conn_t* next;
  cw_net_t* net;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t timer;  // HELLO or connect deadline
  uv_connect_t connect_req;
  int refs;
  bool closing;
  bool outbound;
  bool connected;  // outbound: the connect completed
  bool hello_done;  // inbound: HELLO accepted; outbound: the peer accepted ours
  bool unusable;    // outbound: closed because the peer was unreachable or refused HELLO
  bool has_session;
  bool close_after_write;
  bool reading;
  bool paused;     // on the net's resume list
  bool read_held;  // cw_net_conn_hold_reading
  int role;
  cw_net_conn_t* resume_next;
  char name[128];
  char address[256];  // outbound: what it connects to
  cw_net_gate_entry_t gate;  // accepted, before HELLO
  cw_conn_parser_t parser;
  // Allocated at the first read: small before HELLO (a flood of idle or
  // dribbling peers holds little memory), full size after.
  uint8_t* readahead;
  size_t ra_cap;
  size_t ra_off, ra_len;  // bytes read, not yet parsed
  size_t writes_pending;
  // Small frames gathered for one write: out[0..out_len) are whole frames
  // not yet handed to libuv. out_spare: a written buffer kept for reuse, so
  // that a steady stream mallocs none.
  uint8_t* out;
  size_t out_len, out_cap;
  uint8_t* out_spare;
  size_t out_spare_cap;
  bool flush_queued;  // on the net's flush list
  cw_net_conn_t* flush_next;
  cw_net_conn_callbacks_t cb;
  void* user;
  cw_net_outreq_t* outreqs;
  cw_net_outreq_t* outreqs_tail;  // requests append in O(1)
  uint64_t next_request_id;
  // A reply whose bulk bytes are arriving.
  cw_net_outreq_t* recv_req;
  ProtobufCMessage* recv_msg;
  uint8_t* recv_bulk;
  bool recv_owner_bulk;  // an inbound request's bulk goes where its handler said
  cw_status_t close_reason;  // owned, once closed
};

// cw_net_service.c: a request (not a reply) on an accepted connection, its
// bulk already checked against its payload. Takes `msg`.
void cw_net__serve(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg);
// cw_net.c: the HELLO deadline stops, limits rise, other requests may come.
void cw_net__hello_accepted(cw_net_conn_t* c, int role, bool has_session);
// cw_net.c, for cw_net_listen.c: a connection in the net's list (NULL
// without memory); reading starts.
cw_net_conn_t* cw_net__conn_create(cw_net_t* net, bool outbound, bool pipe);
void cw_net__conn_start_reading(cw_net_conn_t* c);

#endif  // CW_NET_INTERNAL_H_
