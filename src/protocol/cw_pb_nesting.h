// protobuf-c decodes nested messages by recursion, without a bound: bytes
// that nest a recursive message (a Shape of Shapes, a Literal of Literals)
// tens of thousands of levels deep overflow the stack. This walks the wire
// format first, along the fields the descriptor says hold messages, to a
// bounded depth. Anything else malformed is left for protobuf-c to refuse.
#ifndef CW_PROTOCOL_PB_NESTING_H_
#define CW_PROTOCOL_PB_NESTING_H_

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The depth decoders allow: far beyond any real XLA or IFRT message.
#define CW_PB_MAX_NESTING 64

// False when `data`, read as a message of `desc`, nests messages deeper than
// max_depth levels (the walk's own recursion is bounded by it).
bool cw_pb_nesting_ok(const ProtobufCMessageDescriptor* desc, const uint8_t* data, size_t size,
                      int max_depth);

#endif  // CW_PROTOCOL_PB_NESTING_H_
