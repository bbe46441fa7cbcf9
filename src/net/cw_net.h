// The transport of both daemons: framed wire-protocol connections on a libuv
// loop. Accept or connect; read frames through cw_conn_parser (at most
// frames-per-wakeup per connection per wakeup), with bulk bytes read straight
// into the memory a handler names; write frames whose small ones are gathered
// and written once per loop pass, bulk going straight from caller memory;
// track the requests this side sent so replies (and their bulk) complete by
// request id. Every callback runs on the loop thread.
//
// A daemon describes what it serves with a cw_net_service_t (its handler
// table, indexed by message type). The net enforces, for every daemon alike:
// HELLO first and only once (credentials, protocol version, accepted roles),
// then per request the message table's rules (src/protocol/cw_msg.h): served
// here, sent by a role that may send it, on a connection with a session if
// the type needs one. Only then does a handler run.
//
// Accepted connections before HELLO have a budget of their own and one per
// peer address; a full one closes the connection that waited longest
// (cw_net_gate.h). With options.tls enabled, TCP connections (accepted and
// outbound) are TLS 1.3 and every frame travels inside it (cw_net_tls.c);
// Unix sockets stay plaintext.
//
// Lifetime: a connection is reference counted. The net holds one reference
// while it is open; on_close runs exactly once (EOF, I/O error, violation,
// failed connect or cw_net_conn_close), after the requests it had sent were
// failed. Owners that keep a pointer past on_close take a reference
// (cw_net_conn_retain) and drop it with cw_net_conn_release; on_free runs
// when the last one goes, so a daemon's per-connection state (the user
// data) can live exactly as long as the connection.
#ifndef CW_NET_NET_H_
#define CW_NET_NET_H_

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "cw_conn_parser.h"
#include "cw_frame.h"
#include "cw_net_gate.h"
#include "cw_settings.h"
#include "cw_status.h"
#include "cw_tls.h"

// The KEEPALIVE periods a peer may ask for in HELLO (shorter or longer
// requests are clamped; HelloReply.keepalive_ms says what it got).
#define CW_NET_KEEPALIVE_MIN_MS 100u
#define CW_NET_KEEPALIVE_MAX_MS 600000u

// Listening on a Unix socket path. cw_net_unix_prepare: a path too long for
// sun_path, or one a live process listens on, is an error; a stale socket is
// removed. After the bind, cw_net_unix_remember notes which file is ours;
// cw_net_unix_unlink_own removes the path only if it is still that file.
typedef struct cw_net_unix_id_s {
  bool set;
  dev_t dev;
  ino_t ino;
} cw_net_unix_id_t;
cw_status_t cw_net_unix_prepare(const char* path);
// A Unix stream socket bound at `path` (mode 0600 when owner_only), its fd
// or -errno. libuv gets the fd (uv_pipe_open): a pipe it bound itself, it
// would unlink the path at close, whatever file is there by then.
int cw_net_unix_bind(const char* path, bool owner_only);
void cw_net_unix_remember(const char* path, cw_net_unix_id_t* id);
void cw_net_unix_unlink_own(const char* path, const cw_net_unix_id_t* id);

typedef struct cw_net_s cw_net_t;
typedef struct cw_net_conn_s cw_net_conn_t;

// A request handler. `*msg` is the decoded request: the handler takes it by
// setting *msg = NULL, else the net frees it on return. A handler that wants
// the frame's bulk bytes calls cw_net_conn_set_bulk_dest before returning;
// otherwise they are discarded. One that holds reading
// (cw_net_conn_hold_reading) before returning may name the destination (or
// none) later instead, before it releases the hold: no bulk byte is read
// while reading is held.
typedef void (*cw_net_handler_fn)(cw_net_conn_t* conn, const cw_frame_header_t* header,
                                  ProtobufCMessage** msg);

// What a daemon serves on the connections it accepts.
typedef struct cw_net_service_s {
  const char* name;           // "worker" / "controller", in refusals
  const char* unserved_hint;  // after "the NAME does not serve TYPE" (may be "")
  uint32_t hello_roles;       // CW_ROLE_*_BIT accepted in HELLO
  // HelloReply.same_host_copies on connections whose peer process is known
  // (cw_net_conn_peer_pid): the worker copies arrays from and to it.
  bool same_host_copies;
  // HELLO passed credentials, version and role: attach the connection's
  // session (or none). *out_session_id is answered in HelloReply;
  // *out_has_session says whether requests that need a session may come. An
  // error refuses the HELLO (answered, then the connection closes). May be
  // NULL: no sessions.
  cw_status_t (*on_hello)(cw_net_conn_t* conn, const Causeway__V1__HelloRequest* hello,
                          uint64_t* out_session_id, bool* out_has_session);
  // Optional, after the checks and before the handler: false when it took
  // the request instead (held for later, or refused; it then answered, and
  // *msg is freed unless taken).
  bool (*admit)(cw_net_conn_t* conn, const cw_frame_header_t* header, ProtobufCMessage** msg);
  // Optional, after the handler of an admitted request.
  void (*applied)(cw_net_conn_t* conn, const cw_frame_header_t* header);
  cw_net_handler_fn handlers[CW_MSG_TYPE_MAX + 1];  // NULL: not served here
} cw_net_service_t;

typedef struct cw_net_conn_callbacks_s {
  // The bulk bytes named with cw_net_conn_set_bulk_dest have all arrived.
  void (*on_bulk_done)(cw_net_conn_t* conn, const cw_frame_header_t* header);
  // The connection is closed. `reason` is borrowed (NULL: closed on purpose).
  void (*on_close)(cw_net_conn_t* conn, cw_status_t reason);
  // Bytes read (counted after the frames in them were handled, so a HELLO
  // in them has named the peer) and queued for writing.
  void (*on_bytes)(cw_net_conn_t* conn, uint64_t in, uint64_t out);
  // The connection's memory goes (no reference is left): frees `user`.
  void (*on_free)(void* user);
} cw_net_conn_callbacks_t;

// Completion of a request sent with cw_net_conn_request. Takes `status`;
// `reply` is borrowed for the call (NULL on error); `bulk` (reply bulk
// bytes, NULL if none) is taken: free() it.
typedef void (*cw_net_reply_fn)(void* user, cw_net_conn_t* conn, cw_status_t status,
                                const ProtobufCMessage* reply, uint8_t* bulk,
                                uint64_t bulk_len);

typedef void (*cw_net_free_fn)(void* user);
typedef void (*cw_net_accept_fn)(cw_net_t* net, cw_net_conn_t* conn);

typedef struct cw_net_options_s {
  cw_frame_limits_t prehello_limits;  // accepted connections until HELLO
  cw_frame_limits_t limits;           // after HELLO, and outbound connections
  int64_t frames_per_wakeup;
  int64_t max_connections;  // accepted connections at once
  // Accepted connections before HELLO at once, in all and from one address
  // (0: max_connections); when full the longest-waiting one is closed
  // (cw_net_gate.h).
  int64_t max_unauth_connections;
  int64_t max_unauth_per_peer;
  int64_t hello_timeout_ms;
  // Outbound connections: ask the peer for keepalives (a quarter of this) and
  // close one that owes answers and brings nothing for this long (ms; 0: off).
  int64_t link_timeout_ms;
  const char* token;  // borrowed: presented in outbound HELLOs, required in inbound ones
  const char* name;   // borrowed: this daemon's name (HelloReply, outbound HELLOs)
  // TLS on TCP connections, both ways (strings borrowed); Unix sockets stay
  // plaintext. A TLS listener refuses plaintext peers and vice versa.
  cw_tls_config_t tls;
} cw_net_options_t;

struct cw_net_s {
  uv_loop_t* loop;
  cw_net_options_t options;
  const cw_net_service_t* service;
  uv_idle_t idle;      // connections that hit the frame cap resume here
  uv_prepare_t flush;  // gathered frames go out before the loop blocks
  // Connections whose reading is held are looked at for a peer that hung up
  // (cw_net_conn_hold_reading): libuv reports EOF only to a reader.
  uv_timer_t held_watch;
  bool handles_open;
  bool stopped;
  cw_net_conn_t* resume_list;
  // Connections with gathered frames, in the order their first frame was
  // made: a reply caused by another goes out after it (a worker's REGISTER
  // reply before the session reply that lists the worker).
  cw_net_conn_t* flush_list;
  cw_net_conn_t* flush_tail;
  bool (*prepare_hook)(void* user);
  void* prepare_user;
  cw_net_conn_t* conns;
  size_t inbound_connections;
  cw_net_gate_t gate;  // accepted connections before HELLO (from cw_net_listen)
  bool gate_on;
  cw_net_pacer_t pacer;
  cw_net_warn_limit_t warn_full, warn_evict, warn_hello;
  uint64_t refused;         // accepted connections closed at once: no room
  uint64_t hello_timeouts;  // closed for want of a HELLO in time
  // The tokens accepted, [0] presented (borrowed, cw_net_use_tokens); NULL:
  // options.token alone.
  const cw_token_set_t* tokens;
  cw_tls_t* tls;            // made at first use (cw_net_listen on TCP, a TCP connect)
  bool tls_listener;        // the listener is TCP with TLS on
  uint64_t tls_failures;    // handshakes that failed, and peers that spoke the wrong thing
  // Ciphertext buffers of a whole chunk, kept for reuse across connections
  // (fresh ones would be page-faulted in again and again).
  uint8_t* tls_pool[32];
  int tls_pool_n;
  cw_net_warn_limit_t warn_tls;    // failed handshakes
  cw_net_warn_limit_t warn_plain;  // the wrong protocol: plaintext at TLS, TLS at plaintext
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } listener;
  bool listening;
  bool is_pipe;
  char* unix_path;
  cw_net_unix_id_t unix_id;
  char listen_address[256];
  cw_net_accept_fn on_accept;
  void* user;
};

// The options a daemon's settings give (limits, fairness cap, connection
// budget, HELLO deadline, token); `name` is the daemon's (borrowed).
void cw_net_options_from_settings(const cw_settings_t* settings, const char* name,
                                  cw_net_options_t* out_options);

// `net` is caller storage; `loop` and the option strings are borrowed.
void cw_net_initialize(cw_net_t* net, uv_loop_t* loop, const cw_net_options_t* options);
// Stops listening and closes every connection. The loop handles stay (the
// prepare hook keeps running) until cw_net_deinitialize.
void cw_net_stop(cw_net_t* net);
// cw_net_stop, one last prepare pass, then closes the net's handles; the
// caller then runs the loop until they are closed.
void cw_net_deinitialize(cw_net_t* net);

// `hook(user)` runs in the prepare phase before the gathered frames are
// written, again and again while it returns true (it did work, which may
// have queued frames). For the worker's PJRT completions that fired on the
// loop thread. cw_net_wake makes the next prepare phase run.
void cw_net_set_prepare_hook(cw_net_t* net, bool (*hook)(void* user), void* user);
void cw_net_wake(cw_net_t* net);

// Listens on host:port (port 0: any) or a Unix socket path (contains '/').
// The bound address is in net->listen_address. Accepted connections are
// handed to on_accept (which sets their callbacks and user data) and served
// by `service` (borrowed, static), with pre-HELLO limits and a HELLO deadline.
CW_MUST_USE cw_status_t cw_net_listen(cw_net_t* net, const char* address,
                                      const cw_net_service_t* service,
                                      cw_net_accept_fn on_accept);

// host:port (numeric, [v6]:port or a resolvable name) -> socket address.
CW_MUST_USE cw_status_t cw_net_parse_host_port(const char* address,
                                               struct sockaddr_storage* out_addr);

// Starts libuv's thread pool now (compiles, disk and same-host copies run
// on it). libuv starts it at the first uv_queue_work and aborts the
// process, without a word, when it cannot create its threads (a thread
// limit: ulimit -u, a pids cgroup): started at a daemon's start instead, it
// fails there with RESOURCE_EXHAUSTED naming the limit. Once a process.
CW_MUST_USE cw_status_t cw_net_threadpool_start(uv_loop_t* loop);

// Binds `listener` (the caller's, initialized) to host:port `address` and
// listens with `cb`; the bound host:port, port resolved, goes to
// out_address. For the HTTP listeners (health and metrics, gRPC).
CW_MUST_USE cw_status_t cw_net_tcp_listen(uv_tcp_t* listener, const char* address,
                                          uv_connection_cb cb, char* out_address,
                                          size_t cap);

// Connects to `address` and sends HELLO (role `role`, this net's token and
// name, session `session_id`) at once; frames may be sent behind it at once
// (libuv holds them until the connect completes). A failed connect, or one
// whose TCP connect, TLS handshake and HELLO answer take longer than
// `timeout_ms` together, closes the connection with UNAVAILABLE "peer ADDRESS
// unreachable: WHY", a refused HELLO with the peer's code and "peer NAME
// refused HELLO: WHY"; requests sent on it fail with that same status. *out_conn is
// borrowed from the net (retain it to keep it).
CW_MUST_USE cw_status_t cw_net_connect(cw_net_t* net, const char* address, const char* name,
                                       int role, uint64_t session_id,
                                       const cw_net_conn_callbacks_t* callbacks, void* user,
                                       int64_t timeout_ms, cw_net_conn_t** out_conn);
// cw_net_connect whose HELLO asks for a fresh life of `session_id`
// (HelloRequest.fresh_session: the controller's link into a replaced worker).
CW_MUST_USE cw_status_t cw_net_connect_fresh(cw_net_t* net, const char* address,
                                             const char* name, int role, uint64_t session_id,
                                             const cw_net_conn_callbacks_t* callbacks,
                                             void* user, int64_t timeout_ms,
                                             cw_net_conn_t** out_conn);

void cw_net_conn_set_callbacks(cw_net_conn_t* conn, const cw_net_conn_callbacks_t* callbacks,
                               void* user);
void* cw_net_conn_user(const cw_net_conn_t* conn);
cw_net_t* cw_net_conn_net(const cw_net_conn_t* conn);
const char* cw_net_conn_name(const cw_net_conn_t* conn);
// Names may be peer-chosen: kept short and printable.
void cw_net_conn_set_name(cw_net_conn_t* conn, const char* name);
bool cw_net_conn_is_open(const cw_net_conn_t* conn);
bool cw_net_conn_is_outbound(const cw_net_conn_t* conn);
// The role its HELLO named (accepted connections; 0 before HELLO or outbound).
int cw_net_conn_role(const cw_net_conn_t* conn);
// Why it closed (borrowed, lives with the connection; NULL while open or
// when closed on purpose).
cw_status_t cw_net_conn_close_reason(const cw_net_conn_t* conn);
// Where the bulk bytes of the frame being handled go (borrowed; bulk_len
// bytes that outlive the frame); NULL discards them. on_bulk_done follows.
void cw_net_conn_set_bulk_dest(cw_net_conn_t* conn, uint8_t* dest);
// Flow control: while held, no more frames are read or handled (those
// already read wait); releasing resumes from the idle phase.
void cw_net_conn_hold_reading(cw_net_conn_t* conn, bool hold);
// An outbound connection's peer never holds its reading (a worker's link to
// its controller): bytes it leaves unacknowledged for the link timeout end
// the connection, as on accepted ones (cw_net_listen.c, cw__watch_tcp_peer).
void cw_net_conn_peer_always_reads(cw_net_conn_t* conn);

void cw_net_conn_retain(cw_net_conn_t* conn);
void cw_net_conn_release(cw_net_conn_t* conn);

// Closes the connection (on_close runs now with `reason`, taken; NULL: on
// purpose). Frames gathered and not yet written are tried once.
void cw_net_conn_close(cw_net_conn_t* conn, cw_status_t reason);

// Sends one frame: header and packed `msg` (NULL: empty payload) are
// gathered with the connection's other small frames and written before the
// loop next blocks; a frame with `bulk` (or bulk_free) is written at once,
// taking the gathered frames with it, the bulk straight from caller memory.
// bulk_free(bulk_user) runs once the write is done (or at once if the
// connection is closed). Failures close the connection.
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

// A handler both daemons serve PING with: the payload comes back.
void cw_net_reply_ping(cw_net_conn_t* conn, const cw_frame_header_t* header,
                       ProtobufCMessage** msg);

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

// --- Credentials (cw_net_auth.c; docs/protocol.md "Credentials") -------------

// Whether a presented token is one of `tokens` (an empty set accepts
// anything). Constant time: every token is compared in full.
bool cw_net_tokens_accept(const cw_token_set_t* tokens, const uint8_t* got, size_t got_len);

// Checks a HELLO's token against `tokens` (cw_net_tokens_accept). A refusal
// is logged as a warning naming `peer` and `role` (never a token) and
// returned as UNAUTHENTICATED "credentials refused: ...".
CW_MUST_USE cw_status_t cw_net_hello_authenticate(const cw_token_set_t* tokens,
                                                  const uint8_t* got, size_t got_len,
                                                  const char* peer, int role);

// The net presents tokens->tokens[0] in HELLOs it sends and accepts every
// token of the set (borrowed: its owner changes it in place on the loop
// thread, cw_net_creds.h). Connections already made keep going.
void cw_net_use_tokens(cw_net_t* net, const cw_token_set_t* tokens);

// Reads options.tls's files again: connections made from now on present the
// new certificate and check peers against the new CA; those made before keep
// theirs. On error (the error names the setting and file) nothing changes.
// Nothing to do when TLS is off.
CW_MUST_USE cw_status_t cw_net_reload_tls(cw_net_t* net);

// Names an accepted Unix-socket peer for logs: "unix-peer pid P uid U" from
// SO_PEERCRED, or "unix-peer" when the kernel cannot say.
void cw_net_describe_unix_peer(int fd, char* out, size_t capacity);
// The process at the other end of `c` when it is a Unix socket and that
// process runs as this one's user (SO_PEERCRED: the kernel's word, not the
// peer's), else 0.
int cw_net_conn_peer_pid(const cw_net_conn_t* c);
// From a service's on_hello: what the HelloReply says of the session `c`
// joins (HelloReply.session_key, session_seq_next).
void cw_net_conn_set_hello_session(cw_net_conn_t* c, uint64_t key, uint64_t seq_next);
// HelloReply.session_key: on an accepted connection what its on_hello set, on
// an outbound one what the peer answered (the life of the session the link
// joined there); 0 until then, or when the peer did not say.
uint64_t cw_net_conn_hello_session_key(const cw_net_conn_t* c);
// The same from a Unix socket's descriptor: the peer's pid when it runs as
// this process's user, else 0.
int cw_net_unix_peer_pid_same_user(int fd);

#endif  // CW_NET_NET_H_
