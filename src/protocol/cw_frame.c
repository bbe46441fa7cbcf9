#include "cw_frame.h"

#include <string.h>

#include "cw_reader.h"

// `n` bytes little-endian (the compiler makes it one load).
static inline uint64_t cw__le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static bool cw__row_may_carry_bulk(const cw_msg_info_t* m, uint32_t flags) {
  if (!m || (flags & CW_FRAME_ERROR)) return false;
  return (m->bulk & ((flags & CW_FRAME_REPLY) ? CW_MSG_BULK_REPLY : CW_MSG_BULK_REQUEST)) != 0;
}

bool cw_frame_may_carry_bulk(uint16_t type, uint32_t flags) {
  return cw__row_may_carry_bulk(cw_msg_info(type), flags);
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
  if (len >= CW_FRAME_HEADER_SIZE) {
    // Whole (always, but for a caller's short buffer): read without the
    // reader's bounds checks, each field one load.
    out->magic = (uint32_t)cw__le(data + 0, 4);
    out->version = (uint16_t)cw__le(data + 4, 2);
    out->type = (uint16_t)cw__le(data + 6, 2);
    out->flags = (uint32_t)cw__le(data + 8, 4);
    out->payload_len = (uint32_t)cw__le(data + 12, 4);
    out->request_id = cw__le(data + 16, 8);
    out->bulk_len = cw__le(data + 24, 8);
  } else if (!cw_reader_u32le(&r, &out->magic) || !cw_reader_u16le(&r, &out->version) ||
             !cw_reader_u16le(&r, &out->type) || !cw_reader_u32le(&r, &out->flags) ||
             !cw_reader_u32le(&r, &out->payload_len) ||
             !cw_reader_u64le(&r, &out->request_id) || !cw_reader_u64le(&r, &out->bulk_len)) {
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
  const cw_msg_info_t* m = cw_msg_info(out->type);
  if (!m) {
    return cw_make_status(CW_UNIMPLEMENTED, "unknown message type %u", out->type);
  }
  if (out->flags & ~CW_FRAME_KNOWN_FLAGS) {
    return cw_make_status(CW_INVALID_ARGUMENT, "unknown frame flags 0x%x", out->flags);
  }
  if ((out->flags & CW_FRAME_ERROR) && !(out->flags & CW_FRAME_REPLY)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "ERROR flag without REPLY flag");
  }
  // An error may answer any frame, a notice included; a plain reply only a request.
  if ((out->flags & CW_FRAME_REPLY) && !(out->flags & CW_FRAME_ERROR) && !m->reply) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s is a notice: it has no replies",
                          cw_msg_type_name(out->type));
  }
  if (out->payload_len > limits->max_payload) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED,
                          "%s payload of %u bytes exceeds the limit of %u bytes",
                          cw_msg_type_name(out->type), out->payload_len, limits->max_payload);
  }
  if (out->bulk_len) {
    if (!cw__row_may_carry_bulk(m, out->flags)) {
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
