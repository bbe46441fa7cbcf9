// C client library for the causeway wire protocol: connect, HELLO, pipelined
// requests whose replies complete by request id, and bulk byte streams that
// go straight from/to caller memory (writev on send; reply bulk is read
// directly into the caller's buffer). Thread-safe: any thread may send; one
// reader thread per connection completes requests.
#ifndef CW_CLIENT_CLIENT_H_
#define CW_CLIENT_CLIENT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cw_frame.h"
#include "cw_status.h"

typedef struct cw_client_s cw_client_t;
typedef struct cw_tls_s cw_tls_t;  // cw_tls.h

typedef struct cw_client_options_s {
  const char* token;       // shared secret for HELLO; NULL: $CAUSEWAY_TOKEN or none
  uint64_t session_id;     // 0: the worker opens a new session
  const char* peer_name;   // for the worker's logs and per-peer stats
  int role;                // Causeway__V1__Role; 0 means ROLE_CLIENT
  int connect_timeout_ms;  // 0: 10000
  // Unsolicited EVENT frames (a controller's ClusterEvent) go here, on the
  // reader thread; `event` is borrowed for the call. NULL: they are dropped.
  void (*on_event)(void* user, const ProtobufCMessage* event);
  void* event_user;
  // Requests the peer sends us (a worker's HOST_CALLBACK), on the reader
  // thread: `request` (payload decoded, bulk checked against it) and `bulk`
  // (malloc'd, NULL when none) are taken. Answer each exactly once with
  // cw_client_reply or cw_client_reply_error, from any thread -- not this
  // one if the answer waits on other replies. NULL: such a request is a
  // protocol violation and ends the connection.
  void (*on_request)(void* user, cw_client_t* client, uint16_t type, uint64_t request_id,
                     ProtobufCMessage* request, uint8_t* bulk, uint64_t bulk_len);
  void* request_user;
  // Called by cw_client_release once no request can reach on_request any
  // more, before `client` is freed: answers still being worked on must give
  // up `client` before this returns (with request_user). NULL: none.
  void (*on_release)(void* user, cw_client_t* client);
  // > 0: a peer that owes answers and says nothing for this long is taken for
  // hung: everything outstanding fails UNAVAILABLE ("no answer from ADDR for
  // N ms"). After half of it the client sends PING, which a live peer
  // answers however long its other requests take; sends that make no
  // progress for this long fail too. 0: wait without limit.
  int liveness_ms;
  // With liveness_ms, for a peer that may hold its reading for longer (a
  // worker's flow control and memory waits, when a PING would wait unread):
  // ask it in HELLO to keep the link warm (a KEEPALIVE every quarter of
  // liveness_ms), send no PING and set no send timeout, and give up when it
  // brings nothing, not even that. A peer that agrees to no keepalives (an
  // older one) is not watched.
  bool liveness_by_keepalive;
  // TLS to a "host:port" address (a Unix socket path stays plaintext): a
  // context of cw_tls.h (borrowed; the connection keeps what it needs).
  // NULL: CAUSEWAY_TLS, CAUSEWAY_TLS_CA, CAUSEWAY_TLS_CERT and
  // CAUSEWAY_TLS_KEY from the environment (TLS off when CAUSEWAY_TLS is).
  cw_tls_t* tls;
  // cw_client_send_batched's window: a frame is held only if the reader took
  // a batched reply this recently. 0: CW_CLIENT_BATCH_WINDOW_US.
  int batch_window_us;
  // Connecting again in session_id after this client's link to the worker
  // was lost: the session_key its earlier HELLO got (HelloRequest.
  // reattach_session_key). The worker closes that session's other client
  // connections first. 0: not a reattach.
  uint64_t reattach_session_key;
  // Joining a worker the controller declared dead or replaced
  // (HelloRequest.fresh_session): a life of session_id the worker kept from
  // before its latest registration is dropped first.
  bool fresh_session;
} cw_client_options_t;

// Connects to `address` ("host:port", or a Unix socket path containing '/'),
// with TLS on TCP when it is on (the handshake first, then everything inside
// it), sends HELLO and waits for its reply. A peer that closes the connection
// before answering (a daemon making room among connections without HELLO)
// is tried again a few times within the connect timeout. `options` may be NULL. On success
// *out_client owns the connection and its reader thread.
// The TLS context CAUSEWAY_TLS and friends describe (what cw_client_connect
// uses when options->tls is NULL), *out NULL when TLS is off; a caller that
// makes it first can tell a local mistake (a missing CA file) from an
// unreachable peer. Release with cw_tls_release.
CW_MUST_USE cw_status_t cw_client_tls_from_environment(cw_tls_t** out);

CW_MUST_USE cw_status_t cw_client_connect(const char* address,
                                          const cw_client_options_t* options,
                                          cw_client_t** out_client);

// Closes the connection, fails requests still outstanding with UNAVAILABLE
// (their callbacks run), joins the reader thread and frees the client.
void cw_client_release(cw_client_t* client);

// Closes the connection now, from any thread (a completion callback too):
// requests still outstanding fail with UNAVAILABLE and later sends are
// refused. The client stays valid until cw_client_release.
void cw_client_shutdown(cw_client_t* client);
// Whether this connection has failed or been shut down (its requests fail,
// or are about to, with "connection to ADDRESS lost..."): set before any of
// those failures is reported, so a caller holding an error that names the
// address can tell this connection's loss from an older one's.
bool cw_client_failed(const cw_client_t* client);

uint64_t cw_client_session_id(const cw_client_t* client);
// The peer said it takes UPLOAD/DOWNLOAD by peer_address (HelloReply
// same_host_copies: a worker on a Unix socket, this process of its user).
bool cw_client_same_host_copies(const cw_client_t* client);
// What a worker's HelloReply said of the session: which life of it this is
// (0: the peer did not say) and, when it was there before this connection,
// the seq it applies next (0: this connection made it).
uint64_t cw_client_session_key(const cw_client_t* client);
uint64_t cw_client_session_seq_next(const cw_client_t* client);
// The worker's name from its HELLO reply (borrowed; lives with the client).
const char* cw_client_peer_name(const cw_client_t* client);

// Completion callback. Runs on the reader thread (or in cw_client_release).
// Takes `status`; `reply` is borrowed for the call (NULL on error).
typedef void (*cw_client_done_fn)(void* user, cw_status_t status,
                                  const ProtobufCMessage* reply);

// Where a reply's bulk bytes go: `data` with room for `capacity` bytes.
// A reply whose bulk exceeds capacity completes with OUT_OF_RANGE (its bytes
// are read and dropped so the stream stays in step).
typedef struct cw_client_sink_s {
  void* data;
  size_t capacity;
  // exact: the reply must fill the sink; other bulk lengths complete with
  // DATA_LOSS (with none_ok, a reply without bulk is accepted: the peer
  // wrote the memory itself, a same-host copy).
  bool exact;
  bool none_ok;
} cw_client_sink_t;

// Sends one request without waiting. `request` is packed now; `bulk` (may be
// NULL/0) is written after it before this returns, so the caller may reuse
// that memory on return. `sink` (may be NULL) receives reply bulk and must
// stay valid until completion. `done` (may be NULL) runs at completion; with
// done == NULL the completion is kept for cw_client_wait. Returns the
// request id in *out_request_id (may be NULL). If this returns an error,
// `done` never runs and nothing is parked; otherwise the result is reported
// exactly once. Callbacks must not send large bulk: they run on the reader
// thread, which then cannot drain replies while it writes.
CW_MUST_USE cw_status_t cw_client_send(cw_client_t* client, uint16_t type,
                                       const ProtobufCMessage* request,
                                       const struct iovec* bulk, int bulk_count,
                                       const cw_client_sink_t* sink,
                                       cw_client_done_fn done, void* user,
                                       uint64_t* out_request_id);

// Waits for a request sent with done == NULL. Returns its status; on success
// and if out_reply is non-NULL, *out_reply is the decoded reply (free with
// protobuf_c_message_free_unpacked(reply, NULL)); *out_bulk_len (may be
// NULL) is the bulk length received into the sink.
CW_MUST_USE cw_status_t cw_client_wait(cw_client_t* client, uint64_t request_id,
                                       ProtobufCMessage** out_reply,
                                       uint64_t* out_bulk_len);

// Like cw_client_send without bulk, except that the frame may wait in the
// client's write buffer until the next cw_client_send or cw_client_call on
// this client, which writes both with one system call. For a request that is
// always followed at once by another (the plugin's batched DELETE before the
// request it precedes); only that and cw_client_write_held write it (or
// whatever writes held batched frames, below).
CW_MUST_USE cw_status_t cw_client_send_deferred(cw_client_t* client, uint16_t type,
                                                const ProtobufCMessage* request,
                                                cw_client_done_fn done, void* user,
                                                uint64_t* out_request_id);

// Requests sent back to back share a write (one system call for many):
// like cw_client_send without bulk, except that while CW_CLIENT_BATCH_DEPTH
// earlier requests sent this way are unanswered and the reader took the
// reply to one within the batch window (options.batch_window_us), or a reply
// waits unread in the socket (a reader that has not had a core), the frame
// waits in the write buffer. It goes out with the next frame written, when the reader
// takes the reply to one of those, at cw_client_write_held, cw_client_wait
// or cw_client_flush, and at the latest one batch window after it was held
// (a flusher thread, started at the first hold). Only for a request the peer
// answers without this client's help (a LAUNCH without host callbacks).
#define CW_CLIENT_BATCH_DEPTH 2
#define CW_CLIENT_BATCH_WINDOW_US 5000
CW_MUST_USE cw_status_t cw_client_send_batched(cw_client_t* client, uint16_t type,
                                               const ProtobufCMessage* request,
                                               cw_client_done_fn done, void* user,
                                               uint64_t* out_request_id);
// Writes the frames waiting in the write buffer now (someone waits for one).
CW_MUST_USE cw_status_t cw_client_write_held(cw_client_t* client);
// The same when a batched frame waits (cw_client_send_batched), and without
// taking the write lock when none does (the common case): the reader after a
// batched reply, a wait, a flush. A failed write fails what it held, through
// the reader.
void cw_client_write_held_batched(cw_client_t* client);
// For a thread about to wait for a reply: takes the replies that have
// arrived on a plaintext connection, as the reader would (their callbacks run
// on this thread), without waiting for more. Nothing if the reader is taking
// frames now, or for TLS. Returns whether it took any. Its caller must hold
// no lock a reply's callback takes.
bool cw_client_take_replies(cw_client_t* client);
// For a thread that took replies itself and stops polling (it will sleep
// until a reply's callback wakes it): the reader, which leaves the socket to
// such waiters for a while once it finds their replies taken, reads again at
// once. Nothing for TLS.
void cw_client_kick_reader(cw_client_t* client);
// A thread that polled for a reply with cw_client_take_replies and got it
// says so: the client times the intervals between such replies (a
// synchronous loop's period) with its reader waiting on the socket and with
// it leaving replies to the waiters, now and then, and keeps the faster way
// (cw_client_tune.c).
void cw_client_waited(cw_client_t* client);

// Send + wait.
CW_MUST_USE cw_status_t cw_client_call(cw_client_t* client, uint16_t type,
                                       const ProtobufCMessage* request,
                                       const struct iovec* bulk, int bulk_count,
                                       const cw_client_sink_t* sink,
                                       ProtobufCMessage** out_reply,
                                       uint64_t* out_bulk_len);

// Waits until every request sent so far has completed. Returns the first
// error among completions that nobody waits for (sent with done == NULL and
// never passed to cw_client_wait are kept; this drains them, also those
// another thread has not yet waited for, whose cw_client_wait then fails),
// or OK.
CW_MUST_USE cw_status_t cw_client_flush(cw_client_t* client);

// True in a child made by fork() after `client` connected: the socket and
// the threads belong to the parent. Every call on it then fails
// FAILED_PRECONDITION without writing (the parent's stream stays intact),
// and cw_client_release only forgets it.
bool cw_client_forked(const cw_client_t* client);
// That error (FAILED_PRECONDITION naming the connection) in a forked child,
// else OK: for callers that must not take their own locks there either.
CW_MUST_USE cw_status_t cw_client_fork_check(const cw_client_t* client);

// Answers the peer's request `request_id` of `type` (options.on_request)
// with `reply` and bulk bytes (borrowed; written before this returns).
CW_MUST_USE cw_status_t cw_client_reply(cw_client_t* client, uint16_t type, uint64_t request_id,
                                        const ProtobufCMessage* reply, const struct iovec* bulk,
                                        int bulk_count);
// The same with an error (status taken).
CW_MUST_USE cw_status_t cw_client_reply_error(cw_client_t* client, uint16_t type,
                                              uint64_t request_id, cw_status_t status);

// ---- Typed helpers (each a thin wrapper over cw_client_send/call) ----------

CW_MUST_USE cw_status_t cw_client_ping(cw_client_t* client);

// *out_inventory: free with protobuf_c_message_free_unpacked.
CW_MUST_USE cw_status_t cw_client_inventory(cw_client_t* client,
                                            Causeway__V1__Inventory** out_inventory);
CW_MUST_USE cw_status_t cw_client_stats(cw_client_t* client, Causeway__V1__Stats** out_stats);

// Compiles `code` (format "mlir": StableHLO text or bytecode) under exe_id.
// compile_options: serialized xla.CompileOptionsProto (may be empty).
// out_num_outputs may be NULL.
CW_MUST_USE cw_status_t cw_client_compile(cw_client_t* client, uint64_t exe_id,
                                          const char* format, const void* code,
                                          size_t code_size, const void* compile_options,
                                          size_t options_size, uint32_t* out_num_outputs);

// Serialized executable into a malloc'd buffer the caller frees.
CW_MUST_USE cw_status_t cw_client_serialize(cw_client_t* client, uint64_t exe_id,
                                            void** out_data, size_t* out_size);
CW_MUST_USE cw_status_t cw_client_load(cw_client_t* client, uint64_t exe_id,
                                       const void* serialized, size_t size,
                                       const void* compile_options, size_t options_size,
                                       uint32_t* out_num_outputs);

// Uploads an array (dense row-major when byte_strides is NULL). Pipelined:
// returns once the bytes are written; `done` (may be NULL) runs when the
// worker has stored it; with done == NULL errors surface in cw_client_flush.
CW_MUST_USE cw_status_t cw_client_upload(cw_client_t* client, uint64_t buffer_id,
                                         int dtype, const int64_t* dims, size_t rank,
                                         const int64_t* byte_strides, int device,
                                         const void* data, size_t size,
                                         cw_client_done_fn done, void* user);

// Launches exe_id on num_devices devices: args[d][0..num_args) and
// outputs[d][0..num_outputs) are ids. Pipelined like upload.
CW_MUST_USE cw_status_t cw_client_launch(cw_client_t* client, uint64_t exe_id,
                                         size_t num_devices, size_t num_args,
                                         const uint64_t* const* args, size_t num_outputs,
                                         const uint64_t* const* outputs,
                                         cw_client_done_fn done, void* user);

// Downloads a buffer into `data` (capacity bytes). Blocks. *out_info (may be
// NULL) gets dtype and dims; free with protobuf_c_message_free_unpacked.
CW_MUST_USE cw_status_t cw_client_download(cw_client_t* client, uint64_t buffer_id,
                                           void* data, size_t capacity, size_t* out_size,
                                           Causeway__V1__ArrayInfo** out_info);
// The same for `length` bytes of the dense bytes from `offset` (length 0:
// to the end); *out_size gets the count, as does (*out_info)->size.
CW_MUST_USE cw_status_t cw_client_download_range(cw_client_t* client, uint64_t buffer_id,
                                                 uint64_t offset, uint64_t length, void* data,
                                                 size_t capacity, size_t* out_size,
                                                 Causeway__V1__ArrayInfo** out_info);

// Blocks until the buffer is ready (or returns its error).
CW_MUST_USE cw_status_t cw_client_await(cw_client_t* client, uint64_t buffer_id);

// Pipelined. copy: to another device of the same worker. expect: declares a
// pending id a peer will fill. send: src_id goes worker-to-worker to the
// worker listening at peer_address, as dst_id of session dst_session there.
CW_MUST_USE cw_status_t cw_client_copy(cw_client_t* client, uint64_t src_id, uint64_t dst_id,
                                       int dst_device, cw_client_done_fn done, void* user);
CW_MUST_USE cw_status_t cw_client_expect(cw_client_t* client, uint64_t buffer_id,
                                         cw_client_done_fn done, void* user);
CW_MUST_USE cw_status_t cw_client_send_to_peer(cw_client_t* client, uint64_t src_id,
                                               const char* peer_address, uint64_t dst_id,
                                               int dst_device, uint64_t dst_session,
                                               cw_client_done_fn done, void* user);
CW_MUST_USE cw_status_t cw_client_delete(cw_client_t* client, const uint64_t* ids,
                                         size_t count, cw_client_done_fn done, void* user);

#endif  // CW_CLIENT_CLIENT_H_
