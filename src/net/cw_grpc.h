// gRPC over HTTP/2 on the server side, without I/O: nghttp2 does HTTP/2
// (frames, HPACK, flow control, stream limits); this file does gRPC's part
// (method, metadata, the 5-byte length prefix of each message, status
// trailers) and hands whole messages to a service's callbacks.
// cw_grpc_server.c puts a session on a libuv socket; the fuzz target
// (grpc_fuzz.c) feeds one bytes directly.
//
// Limits, each a clear gRPC status to the peer and never an abort: a
// message over max_message (RESOURCE_EXHAUSTED, the call ended); a
// compressed message (UNIMPLEMENTED: no compression is offered); a header
// block over CW_GRPC_MAX_METADATA bytes (the stream reset); more than
// max_streams open streams (HTTP/2 REFUSED_STREAM); responses queued past
// max_queued bytes (RESOURCE_EXHAUSTED). A message buffer grows as its bytes
// arrive, never from the length a peer declared. An HTTP/2 protocol error
// ends the session (GOAWAY), which the owner closes.
//
// Lifetime: every call belongs to its session; on_close runs once per call
// that on_start saw (stream finished, reset, or session ended), after which
// the call pointer is gone unless the owner took a reference
// (cw_grpc_call_retain); on a call whose stream is gone, send and finish do
// nothing. All functions run on the owner's thread.
#ifndef CW_NET_GRPC_H_
#define CW_NET_GRPC_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

#define CW_GRPC_MAX_METADATA 16384

typedef struct cw_grpc_session_s cw_grpc_session_t;
typedef struct cw_grpc_call_s cw_grpc_call_t;

typedef struct cw_grpc_handlers_s {
  // A call's request headers arrived (method and metadata readable). OK:
  // served; otherwise the call ends at once with that status (taken).
  cw_status_t (*on_start)(void* user, cw_grpc_call_t* call);
  // One whole request message (borrowed for the call).
  void (*on_message)(void* user, cw_grpc_call_t* call, const uint8_t* data, size_t len);
  // The client sent its last message (may be NULL).
  void (*on_half_close)(void* user, cw_grpc_call_t* call);
  // The call is over (may be NULL).
  void (*on_close)(void* user, cw_grpc_call_t* call);
  // A call that asked (cw_grpc_call_when_writable) has room to queue more;
  // called before output is taken (may be NULL).
  void (*on_writable)(void* user, cw_grpc_call_t* call);
} cw_grpc_handlers_t;

typedef struct cw_grpc_options_s {
  size_t max_message;  // bytes of one message, either way
  size_t max_queued;   // response bytes waiting to be written, per call
  uint32_t max_streams;
  uint32_t window;  // HTTP/2 receive window, per stream (at least 2 (max_message + 5)) and session
  // Calls that may end reset (by the client, or by nghttp2 for the
  // client's fault) before the server finished them: a burst, refilled at a
  // rate per second; past it the session ends with ENHANCE_YOUR_CALM (rapid
  // reset, CVE-2023-44487, which nghttp2 1.52 does not limit itself).
  uint32_t reset_burst;
  uint32_t resets_per_second;
  // Bytes of frames one cw_grpc_session_take_output gathers (a larger frame
  // still goes alone).
  size_t out_batch;
} cw_grpc_options_t;

// The defaults: 64 MiB messages, 256 MiB queued, 100 streams, 16 MiB windows,
// 1000 resets then 33 a second (nghttp2's own later defaults), 1 MiB
// output batches.
void cw_grpc_options_default(cw_grpc_options_t* out_options);

// `handlers` and `options` are borrowed for the session's life. Queues the
// server's SETTINGS (read them with cw_grpc_session_take_output).
CW_MUST_USE cw_status_t cw_grpc_session_create(const cw_grpc_handlers_t* handlers, void* user,
                                               const cw_grpc_options_t* options,
                                               cw_grpc_session_t** out_session);
// Ends every call (on_close) and frees the session. Takes `session`.
void cw_grpc_session_release(cw_grpc_session_t* session);
// Bytes from the peer. Non-OK: the session is broken (a GOAWAY may still be
// queued); write what take_output gives, then close.
CW_MUST_USE cw_status_t cw_grpc_session_feed(cw_grpc_session_t* session, const uint8_t* data,
                                             size_t len);
// The next bytes to write to the peer, handed over: free(*out_data) once
// written. *out_len 0 (*out_data NULL) when there are none.
void cw_grpc_session_take_output(cw_grpc_session_t* session, uint8_t** out_data,
                                 size_t* out_len);
// True while the session still reads or writes (false: close it).
bool cw_grpc_session_alive(const cw_grpc_session_t* session);
// Asks the peer to open no new streams (GOAWAY); open calls carry on.
void cw_grpc_session_shutdown(cw_grpc_session_t* session);
// The connection is closing: GOAWAY naming the last stream processed, after
// what was already queued (the trailers of calls just finished). A peer
// then closes the connection once its calls have ended.
void cw_grpc_session_goaway(cw_grpc_session_t* session);
// A call that on_start accepted and that has not closed.
size_t cw_grpc_session_calls(const cw_grpc_session_t* session);

// ":path", e.g. "/pkg.Service/Method" (borrowed, for the call's life).
const char* cw_grpc_call_method(const cw_grpc_call_t* call);
// The value of metadata `key` (lowercase); a "-bin" key's value is decoded
// from base64. False when absent or undecodable. Borrowed for the call's
// life.
bool cw_grpc_call_metadata(const cw_grpc_call_t* call, const char* key, const uint8_t** out_data,
                           size_t* out_len);
void cw_grpc_call_set_user(cw_grpc_call_t* call, void* user);
void* cw_grpc_call_user(const cw_grpc_call_t* call);
// False once the call's stream is gone.
bool cw_grpc_call_open(const cw_grpc_call_t* call);
// True once the call's status is set (cw_grpc_call_finish, or an error of
// the call's own, such as a malformed request).
bool cw_grpc_call_finished(const cw_grpc_call_t* call);
// Response bytes queued and not yet taken by the transport.
size_t cw_grpc_call_queued(const cw_grpc_call_t* call);
// Asks for one on_writable once fewer than `below` bytes are queued, or
// once the call is finished: a large response is sent a window at a time
// instead of queued whole.
void cw_grpc_call_when_writable(cw_grpc_call_t* call, size_t below);
// Holds the stream's flow-control credit for bytes that arrive on `call`
// until cw_grpc_call_consume gives it back, so a client cannot send more
// than one window ahead of what its owner has handled. The window is at
// least twice the largest message with its prefix, so a held stream whose
// requests are all handled always has room for the next one.
void cw_grpc_call_hold_flow(cw_grpc_call_t* call);
// Gives back credit for `bytes` handled (a message's length plus its 5-byte
// prefix); at most what is held.
void cw_grpc_call_consume(cw_grpc_call_t* call, size_t bytes);
void cw_grpc_call_retain(cw_grpc_call_t* call);
void cw_grpc_call_release(cw_grpc_call_t* call);
// Queues one response message (copied). Non-OK when the call is gone,
// finished, or over its limits (then the call is finished with that error).
CW_MUST_USE cw_status_t cw_grpc_call_send(cw_grpc_call_t* call, const uint8_t* data, size_t len);
// cw_grpc_call_send in two steps, for a message encoded in place: room for
// `len` bytes at *out_data, then cw_grpc_call_commit queues them. Commit
// before any other call on `call` or its session; a reservation not
// committed is dropped by the next. Errors are cw_grpc_call_send's, and
// commit without a reservation is FAILED_PRECONDITION.
CW_MUST_USE cw_status_t cw_grpc_call_reserve(cw_grpc_call_t* call, size_t len,
                                             uint8_t** out_data);
CW_MUST_USE cw_status_t cw_grpc_call_commit(cw_grpc_call_t* call);
// Ends the call after the queued messages: trailers with status's code and
// message (grpc-status, grpc-message). Takes `status`.
void cw_grpc_call_finish(cw_grpc_call_t* call, cw_status_t status);

// --- The message framing (exposed for tests and fuzzing) --------------------

typedef void (*cw_grpc_message_fn)(void* user, const uint8_t* data, size_t len);

typedef struct cw_grpc_deframer_s {
  uint8_t head[5];
  size_t head_len;
  uint8_t* buf;
  size_t cap;
  size_t len;   // bytes of the current message so far
  size_t want;  // its declared length
  size_t max;
} cw_grpc_deframer_t;

void cw_grpc_deframer_initialize(cw_grpc_deframer_t* d, size_t max_message);
void cw_grpc_deframer_deinitialize(cw_grpc_deframer_t* d);
// Splits `data` into messages, calling `fn` for each whole one. Non-OK (a
// compressed message, one over the limit, out of memory): the stream is
// broken; the deframer must not be fed again.
CW_MUST_USE cw_status_t cw_grpc_deframer_feed(cw_grpc_deframer_t* d, const uint8_t* data,
                                              size_t len, cw_grpc_message_fn fn, void* user);

// grpc-message's percent-encoding of `text` into `out` (NUL-terminated,
// truncated to cap).
void cw_grpc_percent_encode(const char* text, char* out, size_t cap);

#endif  // CW_NET_GRPC_H_
