#include "cw_frame.h"

#include <string.h>

#include "cw_reader.h"

#define CW__PIN(name) \
  _Static_assert((int)CW_MSG_##name == (int)CAUSEWAY__V1__MSG_TYPE__MSG_##name, \
                 "frame type " #name " must equal the proto enum")
CW__PIN(HELLO);
CW__PIN(PING);
CW__PIN(INVENTORY);
CW__PIN(COMPILE);
CW__PIN(SERIALIZE);
CW__PIN(LOAD);
CW__PIN(UPLOAD);
CW__PIN(LAUNCH);
CW__PIN(DOWNLOAD);
CW__PIN(COPY);
CW__PIN(SEND);
CW__PIN(PUT);
CW__PIN(EXPECT);
CW__PIN(DELETE);
CW__PIN(STATS);
CW__PIN(AWAIT);
CW__PIN(REGISTER);
CW__PIN(OPEN_SESSION);
CW__PIN(EXE_INFO);
CW__PIN(EVENT);
CW__PIN(TRACE_START);
CW__PIN(TRACE_FETCH);
CW__PIN(HEALTH_HEARTBEAT);
CW__PIN(HEALTH_REJOIN);
CW__PIN(ADMIN_STATUS);
CW__PIN(ADMIN_PAUSE);
CW__PIN(ADMIN_RESUME);
CW__PIN(ADMIN_DRAIN);
CW__PIN(ADMIN_UNDRAIN);
CW__PIN(ADMIN_HOLD);
CW__PIN(ADMIN_WORKER_DRAIN);
#undef CW__PIN
_Static_assert(CAUSEWAY__V1__ROLE__ROLE_CLIENT == 1 && CAUSEWAY__V1__ROLE__ROLE_WORKER == 2 &&
                   CAUSEWAY__V1__ROLE__ROLE_CONTROLLER == 3,
               "roles are pinned");

typedef struct cw__msg_entry_s {
  const char* name;
  const ProtobufCMessageDescriptor* request;
  const ProtobufCMessageDescriptor* reply;
} cw__msg_entry_t;

static const cw__msg_entry_t cw__msgs[CW_MSG_TYPE_MAX + 1] = {
    [CW_MSG_HELLO] = {"HELLO", &causeway__v1__hello_request__descriptor,
                      &causeway__v1__hello_reply__descriptor},
    [CW_MSG_PING] = {"PING", &causeway__v1__ping__descriptor, &causeway__v1__ping__descriptor},
    [CW_MSG_INVENTORY] = {"INVENTORY", &causeway__v1__inventory_request__descriptor,
                          &causeway__v1__inventory__descriptor},
    [CW_MSG_COMPILE] = {"COMPILE", &causeway__v1__compile_request__descriptor,
                        &causeway__v1__compile_reply__descriptor},
    [CW_MSG_SERIALIZE] = {"SERIALIZE", &causeway__v1__serialize_request__descriptor,
                          &causeway__v1__serialize_reply__descriptor},
    [CW_MSG_LOAD] = {"LOAD", &causeway__v1__load_request__descriptor,
                     &causeway__v1__compile_reply__descriptor},
    [CW_MSG_UPLOAD] = {"UPLOAD", &causeway__v1__upload_request__descriptor,
                       &causeway__v1__ack__descriptor},
    [CW_MSG_LAUNCH] = {"LAUNCH", &causeway__v1__launch_request__descriptor,
                       &causeway__v1__ack__descriptor},
    [CW_MSG_DOWNLOAD] = {"DOWNLOAD", &causeway__v1__download_request__descriptor,
                         &causeway__v1__array_info__descriptor},
    [CW_MSG_COPY] = {"COPY", &causeway__v1__copy_request__descriptor,
                     &causeway__v1__ack__descriptor},
    [CW_MSG_SEND] = {"SEND", &causeway__v1__send_request__descriptor,
                     &causeway__v1__ack__descriptor},
    [CW_MSG_PUT] = {"PUT", &causeway__v1__put_request__descriptor, &causeway__v1__ack__descriptor},
    [CW_MSG_EXPECT] = {"EXPECT", &causeway__v1__expect_request__descriptor,
                       &causeway__v1__ack__descriptor},
    [CW_MSG_DELETE] = {"DELETE", &causeway__v1__delete_request__descriptor,
                       &causeway__v1__ack__descriptor},
    [CW_MSG_STATS] = {"STATS", &causeway__v1__stats_request__descriptor,
                      &causeway__v1__stats__descriptor},
    [CW_MSG_AWAIT] = {"AWAIT", &causeway__v1__await_request__descriptor,
                      &causeway__v1__array_info__descriptor},
    [CW_MSG_LAUNCH_GO] = {"LAUNCH_GO", &causeway__v1__launch_go_request__descriptor,
                          &causeway__v1__ack__descriptor},
    [CW_MSG_REGISTER] = {"REGISTER", &causeway__v1__register_request__descriptor,
                         &causeway__v1__register_reply__descriptor},
    [CW_MSG_OPEN_SESSION] = {"OPEN_SESSION", &causeway__v1__open_session_request__descriptor,
                             &causeway__v1__session_info__descriptor},
    [CW_MSG_EXE_INFO] = {"EXE_INFO", &causeway__v1__exe_info_request__descriptor,
                         &causeway__v1__executable_info__descriptor},
    // Unsolicited notice; the reply descriptor is unused (no reply is sent).
    [CW_MSG_EVENT] = {"EVENT", &causeway__v1__cluster_event__descriptor,
                      &causeway__v1__cluster_event__descriptor},
    [CW_MSG_TRACE_START] = {"TRACE_START", &causeway__v1__trace_start_request__descriptor,
                            &causeway__v1__trace_clock__descriptor},
    [CW_MSG_TRACE_FETCH] = {"TRACE_FETCH", &causeway__v1__trace_fetch_request__descriptor,
                            &causeway__v1__trace_events__descriptor},
    // Unsolicited, like EVENT: no reply.
    [CW_MSG_HEALTH_HEARTBEAT] = {"HEALTH_HEARTBEAT", &causeway__v1__health_heartbeat__descriptor,
                                 &causeway__v1__health_heartbeat__descriptor},
    [CW_MSG_HEALTH_REJOIN] = {"HEALTH_REJOIN", &causeway__v1__health_rejoin_request__descriptor,
                              &causeway__v1__ack__descriptor},
    [CW_MSG_ADMIN_STATUS] = {"ADMIN_STATUS", &causeway__v1__admin_status_request__descriptor,
                             &causeway__v1__admin_status__descriptor},
    [CW_MSG_ADMIN_PAUSE] = {"ADMIN_PAUSE", &causeway__v1__admin_session_request__descriptor,
                            &causeway__v1__admin_ack__descriptor},
    [CW_MSG_ADMIN_RESUME] = {"ADMIN_RESUME", &causeway__v1__admin_session_request__descriptor,
                             &causeway__v1__admin_ack__descriptor},
    [CW_MSG_ADMIN_DRAIN] = {"ADMIN_DRAIN", &causeway__v1__admin_drain_request__descriptor,
                            &causeway__v1__admin_ack__descriptor},
    [CW_MSG_ADMIN_UNDRAIN] = {"ADMIN_UNDRAIN", &causeway__v1__admin_drain_request__descriptor,
                              &causeway__v1__admin_ack__descriptor},
    [CW_MSG_ADMIN_HOLD] = {"ADMIN_HOLD", &causeway__v1__admin_hold_request__descriptor,
                           &causeway__v1__admin_ack__descriptor},
    [CW_MSG_ADMIN_WORKER_DRAIN] = {"ADMIN_WORKER_DRAIN",
                                   &causeway__v1__admin_worker_drain_request__descriptor,
                                   &causeway__v1__admin_ack__descriptor},
};

static bool cw__type_known(uint16_t type) {
  return type >= 1 && type <= CW_MSG_TYPE_MAX && cw__msgs[type].name;
}

const char* cw_msg_type_name(uint16_t type) {
  return cw__type_known(type) ? cw__msgs[type].name : "UNKNOWN";
}

const ProtobufCMessageDescriptor* cw_msg_request_descriptor(uint16_t type) {
  return cw__type_known(type) ? cw__msgs[type].request : NULL;
}

const ProtobufCMessageDescriptor* cw_msg_reply_descriptor(uint16_t type) {
  return cw__type_known(type) ? cw__msgs[type].reply : NULL;
}

bool cw_frame_may_carry_bulk(uint16_t type, uint32_t flags) {
  if (flags & CW_FRAME_ERROR) return false;
  if (flags & CW_FRAME_REPLY) return type == CW_MSG_DOWNLOAD || type == CW_MSG_SERIALIZE;
  return type == CW_MSG_UPLOAD || type == CW_MSG_LOAD || type == CW_MSG_PUT;
}

void cw_frame_header_encode(const cw_frame_header_t* h, uint8_t out[CW_FRAME_HEADER_SIZE]) {
  cw_put_u32le(out + 0, h->magic);
  cw_put_u16le(out + 4, h->version);
  cw_put_u16le(out + 6, h->type);
  cw_put_u32le(out + 8, h->flags);
  cw_put_u32le(out + 12, h->payload_len);
  cw_put_u64le(out + 16, h->request_id);
  cw_put_u64le(out + 24, h->bulk_len);
}

cw_status_t cw_frame_header_decode(const uint8_t* data, size_t len,
                                   const cw_frame_limits_t* limits,
                                   cw_frame_header_t* out) {
  memset(out, 0, sizeof(*out));
  cw_reader_t r;
  cw_reader_initialize(&r, data, len);
  if (!cw_reader_u32le(&r, &out->magic) || !cw_reader_u16le(&r, &out->version) ||
      !cw_reader_u16le(&r, &out->type) || !cw_reader_u32le(&r, &out->flags) ||
      !cw_reader_u32le(&r, &out->payload_len) || !cw_reader_u64le(&r, &out->request_id) ||
      !cw_reader_u64le(&r, &out->bulk_len)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "truncated frame header (%zu of %d bytes)", len,
                          CW_FRAME_HEADER_SIZE);
  }
  if (out->magic != CW_FRAME_MAGIC) {
    return cw_make_status(CW_INVALID_ARGUMENT, "bad frame magic 0x%08x (want 0x%08x)",
                          out->magic, CW_FRAME_MAGIC);
  }
  if (out->version < CW_PROTOCOL_MIN_VERSION || out->version > CW_PROTOCOL_VERSION) {
    return cw_make_status(CW_UNIMPLEMENTED, "frame version %u not supported (supported %u..%u)",
                          out->version, CW_PROTOCOL_MIN_VERSION, CW_PROTOCOL_VERSION);
  }
  if (!cw__type_known(out->type)) {
    return cw_make_status(CW_UNIMPLEMENTED, "unknown message type %u", out->type);
  }
  if (out->flags & ~CW_FRAME_KNOWN_FLAGS) {
    return cw_make_status(CW_INVALID_ARGUMENT, "unknown frame flags 0x%x", out->flags);
  }
  if ((out->flags & CW_FRAME_ERROR) && !(out->flags & CW_FRAME_REPLY)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "ERROR flag without REPLY flag");
  }
  if (out->payload_len > limits->max_payload) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED,
                          "%s payload of %u bytes exceeds the limit of %u bytes",
                          cw_msg_type_name(out->type), out->payload_len, limits->max_payload);
  }
  if (out->bulk_len) {
    if (!cw_frame_may_carry_bulk(out->type, out->flags)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "%s%s frames carry no bulk bytes (got %llu)",
                            cw_msg_type_name(out->type),
                            (out->flags & CW_FRAME_REPLY) ? " reply" : "",
                            (unsigned long long)out->bulk_len);
    }
    if (out->bulk_len > limits->max_bulk) {
      return cw_make_status(CW_RESOURCE_EXHAUSTED,
                            "%s bulk of %llu bytes exceeds the limit of %llu bytes",
                            cw_msg_type_name(out->type), (unsigned long long)out->bulk_len,
                            (unsigned long long)limits->max_bulk);
    }
  }
  return cw_ok_status();
}

cw_status_t cw_msg_decode(const ProtobufCMessageDescriptor* desc, const uint8_t* data,
                          size_t len, ProtobufCMessage** out_msg) {
  *out_msg = NULL;
  // protobuf-c needs a non-NULL pointer even for an empty message.
  static const uint8_t empty[1] = {0};
  ProtobufCMessage* m = protobuf_c_message_unpack(desc, NULL, len, len ? data : empty);
  if (!m) {
    return cw_make_status(CW_INVALID_ARGUMENT, "malformed %s payload (%zu bytes)", desc->name,
                          len);
  }
  *out_msg = m;
  return cw_ok_status();
}

cw_status_t cw_frame_decode_payload(const cw_frame_header_t* header, const uint8_t* data,
                                    ProtobufCMessage** out_msg) {
  *out_msg = NULL;
  const ProtobufCMessageDescriptor* desc;
  if (header->flags & CW_FRAME_ERROR) {
    desc = &causeway__v1__error_reply__descriptor;
  } else if (header->flags & CW_FRAME_REPLY) {
    desc = cw_msg_reply_descriptor(header->type);
  } else {
    desc = cw_msg_request_descriptor(header->type);
  }
  if (!desc) return cw_make_status(CW_UNIMPLEMENTED, "unknown message type %u", header->type);
  return cw_msg_decode(desc, data, header->payload_len, out_msg);
}
