// The arrays of a HOST_CALLBACK request (cw_hostcb.c; docs/protocol.md, "Host
// callbacks"): where each operand's and result's bytes lie in a frame's bulk
// (dense row-major, one after another, no padding; a token has none). Both
// sides read the layout from here: the worker to size the reply it expects,
// the client to find its operands and size its results, the message table to
// check a request's bulk. No I/O.
#ifndef CW_PROTOCOL_HOSTCB_H_
#define CW_PROTOCOL_HOSTCB_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"
#include "proto/causeway.pb-c.h"

// More arrays than any program's custom call has: a request naming more is refused.
#define CW_HOSTCB_MAX_ARRAYS 65536

// Checks `arrays` (borrowed; `what` is "operand" or "result", for messages):
// each is a token (no dtype, no dims) or an array of a known dtype whose
// extent does not overflow. out_offsets (NULL: not wanted; else room for n)
// gets each one's byte offset in the bulk, *out_total the bytes of all.
CW_MUST_USE cw_status_t cw_hostcb_layout(Causeway__V1__HostCallbackArray* const* arrays,
                                         size_t n, const char* what, uint64_t* out_offsets,
                                         uint64_t* out_total);

// Checks a request's aliased_operand (buffer callbacks): none, or one per
// result, each 0 or 1 + an operand of the result's dtype and dims.
CW_MUST_USE cw_status_t cw_hostcb_check_aliases(const Causeway__V1__HostCallbackRequest* r);

// The bytes of one array (0 for a token); the array must have passed
// cw_hostcb_layout.
uint64_t cw_hostcb_array_bytes(const Causeway__V1__HostCallbackArray* a);

#endif  // CW_PROTOCOL_HOSTCB_H_
