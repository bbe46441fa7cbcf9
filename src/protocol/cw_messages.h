// Messages every peer builds or reads the same way: ErrorReply <-> status and
// the HELLO request.
#ifndef CW_PROTOCOL_MESSAGES_H_
#define CW_PROTOCOL_MESSAGES_H_

#include <stdint.h>

#include "cw_status.h"
#include "proto/causeway.pb-c.h"

// PJRT_Executable_GetCompiledMemoryStats_Args's fields, named alike in
// CompiledMemoryStats: X(field) for each, in order.
#define CW_COMPILED_MEMORY_STATS(X)                                                           \
  X(generated_code_size_in_bytes)                                                             \
  X(argument_size_in_bytes) X(output_size_in_bytes) X(alias_size_in_bytes)                    \
  X(temp_size_in_bytes) X(host_generated_code_size_in_bytes) X(host_argument_size_in_bytes)   \
  X(host_output_size_in_bytes) X(host_alias_size_in_bytes) X(host_temp_size_in_bytes)         \
  X(peak_memory_in_bytes) X(total_size_in_bytes) X(total_allocation_bytes)                    \
  X(indefinite_allocations) X(peak_unpadded_heap_bytes)

// A status with the reply's code (out-of-range codes become UNKNOWN: a peer's
// code is untrusted) and message ("(no message)" when empty), prefixed by `context` and ": " when
// `context` is not NULL. `er` is borrowed.
CW_MUST_USE cw_status_t cw_error_reply_to_status(const Causeway__V1__ErrorReply* er,
                                                 const char* context);

// An error reply with request id 0: the peer could not read one of our frames
// and is closing. UNAVAILABLE "peer reported CODE: message".
CW_MUST_USE cw_status_t cw_error_reply_peer_closing(const Causeway__V1__ErrorReply* er);

// Fills `out` (initialized here) from an error status; borrows its message,
// so `out` is valid while `status` lives.
void cw_error_reply_fill(Causeway__V1__ErrorReply* out, cw_status_t status);

// Fills `out` (initialized here) with this build's protocol range and the
// given role, token (borrowed, "" or NULL: none), session (0: new) and name
// (borrowed; may be NULL).
// Keepalives (HelloRequest.keepalive_ms), one rule for the client library
// and the daemons' outbound links: a watcher that gives up after `limit_ms`
// of silence asks for a quarter of it; once the peer answered its period, it
// gives up after its own limit, or 4 periods of a peer that keeps a period
// longer than half of it (the peer's floor).
uint32_t cw_keepalive_ask(int64_t limit_ms);
int64_t cw_keepalive_limit(int64_t limit_ms, uint32_t period_ms);

void cw_hello_request_fill(Causeway__V1__HelloRequest* out, int role, const char* token,
                           uint64_t session_id, const char* peer_name);

#endif  // CW_PROTOCOL_MESSAGES_H_
