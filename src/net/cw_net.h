// Framed wire-protocol connections on a libuv loop: accept or connect, read
// frames through cw_conn_parser (fairness-capped per wakeup), write frames
// with optional bulk straight from caller memory, and track the requests this
// side sent so replies (and their bulk) complete by request id. Every
// callback runs on the loop thread. Used by the controller; shaped so other
// daemons can use it too.
//
// Lifetime: a connection is reference counted. The net holds one reference
// while it is open; on_close runs exactly once (EOF, I/O error, violation,
// failed connect or cw_net_conn_close), after pending outbound requests were
// failed. Owners that keep a pointer past on_close take a reference
// (cw_net_conn_retain) and drop it with cw_net_conn_release.
#ifndef CW_NET_NET_H_
#define CW_NET_NET_H_

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "cw_conn_parser.h"
#include "cw_frame.h"
#include "cw_status.h"

typedef struct cw_net_s cw_net_t;
typedef struct cw_net_conn_s cw_net_conn_t;

typedef struct cw_net_conn_callbacks_s {
  // A request (or an unsolicited frame) arrived. Takes `msg`. A handler that
  // wants the frame's bulk bytes calls cw_net_conn_set_bulk_dest before
  // returning; otherwise they are discarded. Replies to requests sent with
  // cw_net_conn_request never come here.
  void (*on_frame)(cw_net_conn_t* conn, const cw_frame_header_t* header, ProtobufCMessage* msg);
  // The bulk bytes named with cw_net_conn_set_bulk_dest have all arrived. May be NULL.
  void (*on_bulk_done)(cw_net_conn_t* conn, const cw_frame_header_t* header);
  // The connection is closed. `reason` is borrowed (why it closed). May be NULL.
  void (*on_close)(cw_net_conn_t* conn, cw_status_t reason);
} cw_net_conn_callbacks_t;

// Completion of a request sent with cw_net_conn_request. Takes `status`;
// `reply` is borrowed for the call (NULL on error); `bulk` (reply bulk
// bytes, NULL if none) is taken: free() it.
typedef void (*cw_net_reply_fn)(void* user, cw_net_conn_t* conn, cw_status_t status,
                                const ProtobufCMessage* reply, uint8_t* bulk,
                                uint64_t bulk_len);

typedef void (*cw_net_free_fn)(void* user);
typedef void (*cw_net_accept_fn)(cw_net_t* net, cw_net_conn_t* conn);

struct cw_net_s {
  uv_loop_t* loop;
  cw_frame_limits_t prehello_limits;
  cw_frame_limits_t limits;
  int64_t frames_per_wakeup;
  int64_t max_connections;
  int64_t hello_timeout_ms;
  uv_idle_t idle;
  cw_net_conn_t* resume_list;
  cw_net_conn_t* conns;
  size_t inbound_connections;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } listener;
  bool listening;
  bool is_pipe;
  char* unix_path;
  char listen_address[256];
  cw_net_accept_fn on_accept;
  void* user;
};

// `net` is caller storage; `loop` is borrowed. Accepted connections start
// with prehello limits and must HELLO within hello_timeout_ms.
void cw_net_initialize(cw_net_t* net, uv_loop_t* loop, const cw_frame_limits_t* prehello_limits,
                       const cw_frame_limits_t* limits, int64_t frames_per_wakeup,
                       int64_t max_connections, int64_t hello_timeout_ms);
// Stops listening and closes every connection; the caller then runs the loop
// until its handles are closed.
void cw_net_deinitialize(cw_net_t* net);

// Listens on host:port (port 0: any) or a Unix socket path (contains '/').
// The bound address is in net->listen_address. New connections are handed to
// on_accept (which sets their callbacks with cw_net_conn_set_callbacks).
CW_MUST_USE cw_status_t cw_net_listen(cw_net_t* net, const char* address,
                                      cw_net_accept_fn on_accept);

// host:port (numeric, [v6]:port or a resolvable name) -> socket address.
CW_MUST_USE cw_status_t cw_net_parse_host_port(const char* address,
                                               struct sockaddr_storage* out_addr);

// Starts connecting to `address`. Frames may be sent at once (libuv holds
// them until the connect completes). A failed or timed-out connect closes
// the connection (on_close, UNAVAILABLE). *out_conn is borrowed from the net.
CW_MUST_USE cw_status_t cw_net_connect(cw_net_t* net, const char* address, const char* name,
                                       const cw_net_conn_callbacks_t* callbacks, void* user,
                                       int64_t timeout_ms, cw_net_conn_t** out_conn);

void cw_net_conn_set_callbacks(cw_net_conn_t* conn, const cw_net_conn_callbacks_t* callbacks,
                               void* user);
void* cw_net_conn_user(const cw_net_conn_t* conn);
cw_net_t* cw_net_conn_net(const cw_net_conn_t* conn);
const char* cw_net_conn_name(const cw_net_conn_t* conn);
void cw_net_conn_set_name(cw_net_conn_t* conn, const char* name);
bool cw_net_conn_is_open(const cw_net_conn_t* conn);
// After a successful HELLO: stops the HELLO deadline, raises the limits.
void cw_net_conn_hello_done(cw_net_conn_t* conn);
void cw_net_conn_set_bulk_dest(cw_net_conn_t* conn, uint8_t* dest);

void cw_net_conn_retain(cw_net_conn_t* conn);
void cw_net_conn_release(cw_net_conn_t* conn);

// Closes the connection (on_close runs now with `reason`, taken; NULL: OK).
void cw_net_conn_close(cw_net_conn_t* conn, cw_status_t reason);

// Sends one frame: header, packed `msg` (NULL: empty payload), then `bulk`
// straight from caller memory; bulk_free(bulk_user) runs once the write is
// done (or at once if the connection is closed). Failures close the connection.
void cw_net_conn_send(cw_net_conn_t* conn, uint16_t type, uint32_t flags, uint64_t request_id,
                      const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len,
                      cw_net_free_fn bulk_free, void* bulk_user);
void cw_net_conn_reply(cw_net_conn_t* conn, uint16_t type, uint64_t request_id,
                       const ProtobufCMessage* msg);
// Takes `status`.
void cw_net_conn_reply_error(cw_net_conn_t* conn, uint16_t type, uint64_t request_id,
                             cw_status_t status);
// A protocol violation: error reply, then close once it is written. Takes `status`.
void cw_net_conn_violation(cw_net_conn_t* conn, uint16_t type, uint64_t request_id,
                           cw_status_t status);

// Sends a request and completes `fn` with its reply (reply bulk is collected
// into a malloc'd buffer, bounded by the net's limits). If the connection
// closes first, fn gets UNAVAILABLE. fn always runs exactly once, possibly
// before this returns when the connection is already closed.
void cw_net_conn_request(cw_net_conn_t* conn, uint16_t type, const ProtobufCMessage* msg,
                         const void* bulk, uint64_t bulk_len, cw_net_free_fn bulk_free,
                         void* bulk_user, cw_net_reply_fn fn, void* user);

// Watches an inherited descriptor (the read end of a pipe whose write end a
// parent holds): `fn(user)` runs once when it reaches EOF or fails, i.e. when
// the parent is gone, however it died. `watch` is caller storage that must
// stay put until cw_net_watch_stop's close completes (the loop runs).
typedef struct cw_net_watch_s {
  uv_pipe_t pipe;
  void (*fn)(void* user);
  void* user;
  bool started;
  char buf[64];
} cw_net_watch_t;

CW_MUST_USE cw_status_t cw_net_watch_start(uv_loop_t* loop, int fd, void (*fn)(void* user),
                                           void* user, cw_net_watch_t* watch);
void cw_net_watch_stop(cw_net_watch_t* watch);

// Compares a presented HELLO token with the configured one in constant time.
bool cw_net_token_matches(const char* want, const uint8_t* got, size_t got_len);

// --- Credentials (cw_net_auth.c; docs/protocol.md "Credentials") -------------

// Checks a HELLO's token against `want` ("" accepts anything) in constant
// time. A refusal is logged as a warning naming `peer` and `role` (never
// either token) and returned as UNAUTHENTICATED "credentials refused: ...".
CW_MUST_USE cw_status_t cw_net_hello_authenticate(const char* want, const uint8_t* got,
                                                  size_t got_len, const char* peer, int role);

// Names an accepted Unix-socket peer for logs: "unix-peer pid P uid U" from
// SO_PEERCRED, or "unix-peer" when the kernel cannot say.
void cw_net_describe_unix_peer(int fd, char* out, size_t capacity);

#endif  // CW_NET_NET_H_
