// Internal to src/net: a connection's state, shared by cw_net.c (I/O and
// lifetime), cw_net_listen.c (accepting and connecting) and cw_net_service.c
// (HELLO and the message table's rules).
#ifndef CW_NET_INTERNAL_H_
#define CW_NET_INTERNAL_H_

#include "cw_net.h"
#include "cw_tls.h"

// Plaintext waiting for SSL_write (cw_net_tls.c): gathered frames, then a
// frame's bulk straight from caller memory.
typedef struct cw_net_tls_item_s {
  struct cw_net_tls_item_s* next;
  uint8_t* payload;  // owned
  size_t payload_len, payload_off;
  const uint8_t* bulk;  // borrowed until bulk_free
  uint64_t bulk_len, bulk_off;
  cw_net_free_fn bulk_free;
  void* bulk_user;
} cw_net_tls_item_t;

typedef struct cw_net_outreq_s {
  struct cw_net_outreq_s* next;   // in send order
  struct cw_net_outreq_s* prev;
  struct cw_net_outreq_s* hnext;  // in its bucket of the index by id
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
  uv_timer_t timer;  // HELLO or connect deadline; then KEEPALIVE (HelloRequest.keepalive_ms)
  uv_connect_t connect_req;
  // Outbound to a host name: resolved off the loop (uv_getaddrinfo), and
  // connected once known. Meanwhile what is sent waits in `out` (or, with
  // TLS, in tls_out): there is no socket to write to yet.
  uv_getaddrinfo_t resolve_req;
  bool resolving;
  // Then its addresses, tried in turn (localhost: ::1 refused where the
  // peer listens on 127.0.0.1 only, then 127.0.0.1): what is sent waits,
  // as while resolving, until one connects; a failed try's socket is
  // closed (the next may be of the other family) and the handle made anew.
  struct addrinfo* addrs;
  struct addrinfo* addr_next;
  bool dialing;
  bool redialing;  // the handle closing, to be made again for the next address
  // Writes with bulk made while resolving, in order (bulk by reference, as
  // any write's: its owner's bulk_free says when it may go). Each counts in
  // writes_pending and holds a reference.
  struct cw__write_s* held;
  struct cw__write_s* held_tail;
  int refs;
  bool closing;
  bool outbound;
  bool connected;  // outbound: the connect completed
  bool hello_done;  // inbound: HELLO accepted; outbound: the peer accepted ours
  bool unusable;    // outbound: closed because the peer was unreachable or refused HELLO
  bool has_session;
  // HelloReply.session_key and session_seq_next: the ones we send
  // (cw_net_conn_set_hello_session), or on an outbound link the key we got.
  uint64_t hello_session_key, hello_seq_next;
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
  // The same requests by id (request_id & (outreq_buckets_len - 1)): replies
  // may overtake earlier requests by hundreds (an island's ready answers
  // overtake the go requests still running), and a list scan per reply was
  // a tenth of a controller's CPU there. No buckets (out of memory): scan.
  cw_net_outreq_t** outreq_buckets;
  size_t outreq_buckets_len, num_outreqs;
  // A watched outbound link (link_limit_ms > 0, cw_net_listen.c): the
  // CLOCK_MONOTONIC ms of the last bytes read, or of a request after none
  // was owed. Unwatched connections keep no time.
  uint64_t last_rx_ms;
  int64_t link_limit_ms;
  uint64_t next_request_id;
  // A reply whose bulk bytes are arriving.
  cw_net_outreq_t* recv_req;
  ProtobufCMessage* recv_msg;
  uint8_t* recv_bulk;
  bool recv_owner_bulk;  // an inbound request's bulk goes where its handler said
  cw_status_t close_reason;  // owned, once closed
  bool first_read;           // inbound: the first bytes were looked at
  // TLS (cw_net_tls.c). `tls`: this connection speaks it (accepted on a TCP
  // listener with TLS on, or outbound to host:port with TLS on); `ssl` is
  // made at the first byte (accepted) or at connect. Its BIO reads the
  // ciphertext libuv read into tls_in[tls_in_off..tls_in_len) and writes
  // ciphertext into tls_out, which goes to libuv as it is; plaintext is
  // read into readahead (or a bulk destination).
  bool tls;
  bool peer_always_reads;  // cw_net_conn_peer_always_reads
  bool tls_up;  // the handshake finished
  SSL* ssl;
  uint8_t* tls_in;
  size_t tls_in_cap, tls_in_off, tls_in_len;
  uint8_t* tls_out;
  size_t tls_out_len, tls_out_cap;
  cw_net_tls_item_t* tls_q;
  cw_net_tls_item_t* tls_q_tail;
  size_t tls_inflight;  // ciphertext handed to libuv, not yet written
};

// cw_net_service.c: a request (not a reply) on an accepted connection, its
// bulk already checked against its payload. Takes `msg`.
void cw_net__serve(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg);
// cw_net.c: the HELLO deadline stops, limits rise, other requests may come.
void cw_net__hello_accepted(cw_net_conn_t* c, int role, bool has_session);
// cw_net.c: sends the peer a KEEPALIVE event every `asked_ms` (clamped to
// CW_NET_KEEPALIVE_MIN_MS..MAX_MS, which it returns) on the connection's
// timer, free once HELLO is accepted.
uint32_t cw_net__keepalive_start(cw_net_conn_t* c, uint32_t asked_ms);
// cw_net.c, for cw_net_listen.c: a connection in the net's list (NULL
// without memory); reading starts.
cw_net_conn_t* cw_net__conn_create(cw_net_t* net, bool outbound, bool pipe);
// How long a TCP peer may leave bytes or keepalive probes unacknowledged before
// the kernel ends the connection (ETIMEDOUT): the link timeout, at least 1 s;
// 0: no limit (cw_net_listen.c).
int64_t cw_net__tcp_peer_timeout_ms(const cw_net_t* net);
// Tests: the next this many cw_net__conn_create calls fail as out of memory
// (loop thread only).
extern int cw_net__test_failing_conn_allocs;
void cw_net__conn_start_reading(cw_net_conn_t* c);
// An outbound connection's name was resolved and its connect started: what
// waited for a socket goes out (libuv holds it until the connect completes).
void cw_net__conn_write_waiting(cw_net_conn_t* c);

// cw_net.c, for cw_net_tls.c: parses the plaintext in readahead (at most
// frames-per-wakeup frames, then it yields); true when all of it was
// consumed. Reading goes on unless closing, held or paused. A frame whose
// bulk bytes just arrived. A write finished (status < 0: failed).
bool cw_net__parse_buffered(cw_net_conn_t* c);
// cw_net_conn_violation without its log line (the caller logged, rate-limited).
void cw_net__refuse(cw_net_conn_t* c, uint16_t type, uint64_t request_id, cw_status_t status);
void cw_net__read_on(cw_net_conn_t* c);
void cw_net__bulk_done(cw_net_conn_t* c, const cw_frame_header_t* h);
void cw_net__write_finished(cw_net_conn_t* c, int status);
// A buffer of at least `want` bytes in *buf (replaced only when smaller).
bool cw_net__buffer_reserve(uint8_t** buf, size_t* cap, size_t want);
size_t cw_net__read_size(const cw_net_conn_t* c);

// cw_net_tls.c: the TLS side of a connection.
// The net's TLS context, made at first use (`server`: a listener's, which
// needs the daemon's certificate).
CW_MUST_USE cw_status_t cw_net__tls_context(cw_net_t* net, bool server, cw_tls_t** out);
// An outbound connection to `address` speaks TLS from now on.
CW_MUST_USE cw_status_t cw_net__tls_start_outbound(cw_net_conn_t* c, const char* address);
// `len` bytes of ciphertext arrived in c->tls_in.
void cw_net__tls_on_read(cw_net_conn_t* c, size_t len);
// An outbound connection ended (EOF or a read error `uv_err`) before its
// HELLO was answered: the peer refused the handshake.
void cw_net__tls_lost(cw_net_conn_t* c, int uv_err);
// Decrypts and handles what the SSL holds; reads on when it wants more.
void cw_net__tls_pump_in(cw_net_conn_t* c);
// Queues the gathered frames (c->out, taken) and `bulk` for SSL_write.
void cw_net__tls_write(cw_net_conn_t* c, const void* bulk, uint64_t bulk_len,
                       cw_net_free_fn bulk_free, void* bulk_user);
// The connection closes: gathered frames tried once, queued plaintext dropped.
void cw_net__tls_close(cw_net_conn_t* c);
// HELLO passed: buffers are kept from now on.
void cw_net__tls_hello_accepted(cw_net_conn_t* c);
// Hands libuv the ciphertext that waited for a socket (a name to resolve).
void cw_net__tls_write_waiting(cw_net_conn_t* c);
void cw_net__tls_free(cw_net_conn_t* c);

#endif  // CW_NET_INTERNAL_H_
