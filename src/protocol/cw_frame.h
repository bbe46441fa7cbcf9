// Frame format of the causeway wire protocol (docs/protocol.md): a fixed
// 32-byte little-endian header, a protobuf-c control payload, then optional
// raw bulk bytes that the receiver streams straight into their destination.
#ifndef CW_PROTOCOL_FRAME_H_
#define CW_PROTOCOL_FRAME_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"
#include "proto/causeway.pb-c.h"

#define CW_FRAME_MAGIC 0x59415743u  // bytes "CWAY"
#define CW_FRAME_HEADER_SIZE 32
#define CW_PROTOCOL_VERSION 1u      // newest version this build speaks
#define CW_PROTOCOL_MIN_VERSION 1u  // oldest version this build accepts

// Header flags.
#define CW_FRAME_REPLY 0x1u  // an answer to the request with the same id
#define CW_FRAME_ERROR 0x2u  // payload is an ErrorReply (only with REPLY)
#define CW_FRAME_KNOWN_FLAGS (CW_FRAME_REPLY | CW_FRAME_ERROR)

// Frame types equal the MsgType enum of proto/causeway.proto.
typedef enum cw_msg_type_e {
  CW_MSG_HELLO = 1,
  CW_MSG_PING = 2,
  CW_MSG_INVENTORY = 3,
  CW_MSG_COMPILE = 4,
  CW_MSG_SERIALIZE = 5,
  CW_MSG_LOAD = 6,
  CW_MSG_UPLOAD = 7,
  CW_MSG_LAUNCH = 8,
  CW_MSG_DOWNLOAD = 9,
  CW_MSG_COPY = 10,
  CW_MSG_SEND = 11,
  CW_MSG_PUT = 12,
  CW_MSG_EXPECT = 13,
  CW_MSG_DELETE = 14,
  CW_MSG_STATS = 15,
  CW_MSG_AWAIT = 16,
  CW_MSG_LAUNCH_GO = 17,
  CW_MSG_REGISTER = 32,
  CW_MSG_OPEN_SESSION = 33,
  CW_MSG_EXE_INFO = 34,
  CW_MSG_EVENT = 35,
  CW_MSG_HEALTH_HEARTBEAT = 45,
  CW_MSG_HEALTH_REJOIN = 46,
  CW_MSG_ADMIN_STATUS = 50,
  CW_MSG_ADMIN_PAUSE = 51,
  CW_MSG_ADMIN_RESUME = 52,
  CW_MSG_ADMIN_DRAIN = 53,
  CW_MSG_ADMIN_UNDRAIN = 54,
  CW_MSG_ADMIN_HOLD = 55,
  CW_MSG_ADMIN_WORKER_DRAIN = 56,
  CW_MSG_TRACE_START = 65,
  CW_MSG_TRACE_FETCH = 66,
  CW_MSG_TYPE_MAX = 66,
} cw_msg_type_t;

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

// True if frames of this type and direction may carry bulk bytes.
bool cw_frame_may_carry_bulk(uint16_t type, uint32_t flags);
const char* cw_msg_type_name(uint16_t type);

// Protobuf descriptors of a type's request and (non-error) reply payloads.
const ProtobufCMessageDescriptor* cw_msg_request_descriptor(uint16_t type);
const ProtobufCMessageDescriptor* cw_msg_reply_descriptor(uint16_t type);

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
