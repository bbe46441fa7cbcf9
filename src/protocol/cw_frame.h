// Frame format of the causeway wire protocol (docs/protocol.md): a fixed
// 32-byte little-endian header, a protobuf-c control payload, then optional
// raw bulk bytes that the receiver streams straight into their destination.
#ifndef CW_PROTOCOL_FRAME_H_
#define CW_PROTOCOL_FRAME_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_msg.h"
#include "cw_status.h"
#include "proto/causeway.pb-c.h"

#define CW_FRAME_MAGIC 0x59415743u  // bytes "CWAY"
#define CW_FRAME_HEADER_SIZE 32
#define CW_PROTOCOL_VERSION 1u      // newest version this build speaks
#define CW_PROTOCOL_MIN_VERSION 1u  // oldest version this build accepts
// What a worker of version 1 reports in REGISTER (RegisterRequest.revision;
// builds before it send 0). Raised when a field an older worker leaves out
// changes what the controller does: 1, the drain, paused sessions and
// connected sessions a restarted controller learns (docs/deploy.md,
// "Upgrading").
#define CW_PROTOCOL_REVISION 1u

// Header flags.
#define CW_FRAME_REPLY 0x1u  // an answer to the request with the same id
#define CW_FRAME_ERROR 0x2u  // payload is an ErrorReply (only with REPLY)
#define CW_FRAME_KNOWN_FLAGS (CW_FRAME_REPLY | CW_FRAME_ERROR)

typedef struct cw_frame_header_s {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t flags;
  uint32_t payload_len;
  uint64_t request_id;
  uint64_t bulk_len;
} cw_frame_header_t;

typedef struct cw_frame_limits_s {
  uint32_t max_payload;
  uint64_t max_bulk;
} cw_frame_limits_t;

// Writes the 32-byte wire form of `header` into `out`.
void cw_frame_header_encode(const cw_frame_header_t* header,
                            uint8_t out[CW_FRAME_HEADER_SIZE]);

// Parses and validates a header from `data` (at least 32 bytes): magic,
// version, known type and flags, lengths within `limits`, and bulk only on
// frames that may carry it. On error `out_header` still holds what was read
// (request id for the error reply).
CW_MUST_USE cw_status_t cw_frame_header_decode(const uint8_t* data, size_t len,
                                               const cw_frame_limits_t* limits,
                                               cw_frame_header_t* out_header);

// True if frames of this type and direction may carry bulk bytes (the
// message table's bulk column).
bool cw_frame_may_carry_bulk(uint16_t type, uint32_t flags);

// Unpacks `len` bytes as `desc`; the caller frees *out_msg with
// protobuf_c_message_free_unpacked(*out_msg, NULL).
CW_MUST_USE cw_status_t cw_msg_decode(const ProtobufCMessageDescriptor* desc,
                                      const uint8_t* data, size_t len,
                                      ProtobufCMessage** out_msg);

// Decodes a frame's payload by header type and flags (ErrorReply for ERROR).
CW_MUST_USE cw_status_t cw_frame_decode_payload(const cw_frame_header_t* header,
                                                const uint8_t* data,
                                                ProtobufCMessage** out_msg);

#endif  // CW_PROTOCOL_FRAME_H_
