// The message table: one row per message type saying everything that is true
// of the type everywhere (docs/protocol.md, "Adding a message type"): its
// name, request and reply schema, whether its frames carry bulk bytes and how
// their length is checked, where its `seq` lives, which roles may send it,
// whether it needs a session, and whether a draining worker refuses it.
// src/net enforces the sender and session columns for both daemons; a daemon
// only declares which types it serves (its handler table).
#ifndef CW_PROTOCOL_MSG_H_
#define CW_PROTOCOL_MSG_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"
#include "proto/causeway.pb-c.h"

struct cw_frame_header_s;

// Frame types equal the MsgType enum of proto/causeway.proto (pinned in cw_msg.c).
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
  CW_MSG_HOST_CALLBACK = 18,
  CW_MSG_REGISTER = 32,
  CW_MSG_OPEN_SESSION = 33,
  CW_MSG_EXE_INFO = 34,
  CW_MSG_EVENT = 35,
  CW_MSG_SESSION_RESUME = 36,
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

// Roles a HELLO names (Causeway__V1__Role), as bits of a set.
#define CW_ROLE_BIT(role) (1u << (unsigned)(role))
#define CW_ROLE_CLIENT_BIT CW_ROLE_BIT(CAUSEWAY__V1__ROLE__ROLE_CLIENT)
#define CW_ROLE_WORKER_BIT CW_ROLE_BIT(CAUSEWAY__V1__ROLE__ROLE_WORKER)
#define CW_ROLE_CONTROLLER_BIT CW_ROLE_BIT(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER)
#define CW_ROLES_ANY (CW_ROLE_CLIENT_BIT | CW_ROLE_WORKER_BIT | CW_ROLE_CONTROLLER_BIT)

// Which frames of a type may carry bulk bytes.
#define CW_MSG_BULK_REQUEST 0x1u
#define CW_MSG_BULK_REPLY 0x2u

typedef struct cw_msg_info_s {
  const char* name;
  const ProtobufCMessageDescriptor* request;
  // NULL: a notice (EVENT, HEALTH_HEARTBEAT): sent unsolicited, never answered.
  const ProtobufCMessageDescriptor* reply;
  uint32_t senders;    // CW_ROLE_*_BIT: who may send the request
  size_t seq_offset;   // offsetof the request's uint64 `seq`; 0: unordered
  uint32_t bulk;       // CW_MSG_BULK_*
  // A request's bulk length against its payload (the array's extent); NULL:
  // any length within the limits when bulk is allowed.
  cw_status_t (*check_bulk)(const struct cw_frame_header_s* header, const ProtobufCMessage* msg);
  bool needs_session;     // refused on a connection without one (a worker's PUT link)
  bool refused_draining;  // a draining worker refuses new ones (docs/operations.md)
} cw_msg_info_t;

// The row of `type`; NULL for an unknown type.
const cw_msg_info_t* cw_msg_info(uint16_t type);
// "LAUNCH"; "UNKNOWN" for an unknown type.
const char* cw_msg_type_name(uint16_t type);
// Protobuf descriptors of a type's request and (non-error) reply payloads;
// NULL when unknown (or a notice's reply).
const ProtobufCMessageDescriptor* cw_msg_request_descriptor(uint16_t type);
const ProtobufCMessageDescriptor* cw_msg_reply_descriptor(uint16_t type);
// The request's seq (0: unordered type or none given). `msg` is borrowed.
uint64_t cw_msg_seq(uint16_t type, const ProtobufCMessage* msg);
// The session life its seq was numbered in (`session_life`, 16, of the
// ordered requests a controller relays: LAUNCH, DELETE); 0 for other types
// or none given. The setter does nothing for other types.
uint64_t cw_msg_session_life(uint16_t type, const ProtobufCMessage* msg);
void cw_msg_set_session_life(uint16_t type, ProtobufCMessage* msg, uint64_t life);
// How a worker refuses an ordered request numbered in another life of its
// session there (cw_worker_conn.c): "LAUNCH with seq 7 " CW_MSG_SEQ_OTHER_LIFE
// " 12 at this worker (its objects are gone); not applied".
#define CW_MSG_SEQ_OTHER_LIFE "was numbered for an earlier life of session"
// How a worker refuses an ordered request whose seq it applied before
// (cw_worker_seq.c): "LAUNCH with seq 7 " CW_MSG_SEQ_DUPLICATE " 9)". A client
// that resends its requests after a controller restart reads it as "this one
// was applied" (cw_plugin_resume.c).
#define CW_MSG_SEQ_DUPLICATE "is a duplicate (this session's next is"
// The most session ids one REGISTER may report in each list of
// RegisterPrevious (paused_sessions, sessions): the controller refuses more,
// a worker sends at most these.
#define CW_MSG_MAX_PREVIOUS_SESSIONS 4096
// Checks a request frame's bulk length against its decoded payload: UPLOAD
// and PUT carry exactly the array's extent (a PUT with an error none), LOAD
// any length, every other type none. Replies pass.
CW_MUST_USE cw_status_t cw_msg_check_bulk(const struct cw_frame_header_s* header,
                                          const ProtobufCMessage* msg);
// `m` packed into a new buffer the caller frees (*out_len bytes); NULL when
// out of memory.
uint8_t* cw_msg_pack(const ProtobufCMessage* m, size_t* out_len);
// An upper bound on `m`'s packed size, found without walking it as
// protobuf_c_message_get_packed_size does (twice with nested messages):
// known for a LaunchRequest, the one message sent per launch; SIZE_MAX for
// every other or when unknown fields ride along.
size_t cw_msg_packed_bound(const ProtobufCMessage* m);
// A deep copy of `m` (borrowed), packed and unpacked, that the caller frees
// with protobuf_c_message_free_unpacked; NULL when out of memory.
ProtobufCMessage* cw_msg_copy(const ProtobufCMessage* m);
// "clients", "workers", "the controller", "clients or the controller": who
// may send a type, for refusals. `senders` is a CW_ROLE_*_BIT set.
void cw_msg_senders_text(uint32_t senders, char* out, size_t capacity);
// "CLIENT" / "WORKER" / "CONTROLLER" / "NONE"; "UNKNOWN" otherwise.
const char* cw_role_name(int role);

#endif  // CW_PROTOCOL_MSG_H_
