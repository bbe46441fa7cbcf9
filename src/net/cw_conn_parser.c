#include "cw_conn_parser.h"

#include <stdlib.h>
#include <string.h>


void cw_conn_parser_initialize(cw_conn_parser_t* p, const cw_frame_limits_t* limits) {
  memset(p, 0, sizeof(*p));
  p->limits = *limits;
}

void cw_conn_parser_deinitialize(cw_conn_parser_t* p) {
  free(p->payload);
  p->payload = NULL;
  p->bulk_dest = NULL;
}

void cw_conn_parser_set_limits(cw_conn_parser_t* p, const cw_frame_limits_t* limits) {
  p->limits = *limits;
}

void cw_conn_parser_require_hello(cw_conn_parser_t* p, bool require) {
  p->require_hello = require;
}

void cw_conn_parser_set_bulk_dest(cw_conn_parser_t* p, uint8_t* dest) { p->bulk_dest = dest; }

static void cw__fail(cw_conn_parser_t* p, cw_status_t status, cw_conn_parser_event_t* ev) {
  p->state = CW_CONN_PARSER_FAILED;
  free(p->payload);
  p->payload = NULL;
  ev->kind = CW_CONN_PARSER_EVENT_ERROR;
  ev->header = p->header;
  ev->status = status;
}

// The payload is complete: decode it and report the frame.
static void cw__finish_payload(cw_conn_parser_t* p, cw_conn_parser_event_t* ev) {
  ProtobufCMessage* msg = NULL;
  cw_status_t st = cw_frame_decode_payload(&p->header, p->payload, &msg);
  free(p->payload);
  p->payload = NULL;
  if (st) {
    cw__fail(p, st, ev);
    return;
  }
  ev->kind = CW_CONN_PARSER_EVENT_FRAME;
  ev->header = p->header;
  ev->msg = msg;
  p->bulk_dest = NULL;
  p->bulk_have = 0;
  p->state = p->header.bulk_len ? CW_CONN_PARSER_BULK : CW_CONN_PARSER_HEADER;
}

void cw_conn_parser_feed(cw_conn_parser_t* p, const uint8_t* data, size_t len,
                         size_t* out_consumed, cw_conn_parser_event_t* ev) {
  memset(ev, 0, sizeof(*ev));
  size_t pos = 0;
  while (ev->kind == CW_CONN_PARSER_EVENT_NONE) {
    switch (p->state) {
      case CW_CONN_PARSER_FAILED:
        *out_consumed = pos;
        return;
      case CW_CONN_PARSER_HEADER: {
        if (pos == len) goto out;
        size_t n = CW_FRAME_HEADER_SIZE - p->header_have;
        if (n > len - pos) n = len - pos;
        memcpy(p->header_bytes + p->header_have, data + pos, n);
        p->header_have += n;
        pos += n;
        if (p->header_have < CW_FRAME_HEADER_SIZE) goto out;
        p->header_have = 0;
        if (p->require_hello) {
          // "Before HELLO" outranks every length limit: read the header with
          // no limits first, and refuse any other request type.
          const cw_frame_limits_t open = {UINT32_MAX, UINT64_MAX};
          cw_frame_header_t peek;
          cw_status_t pst = cw_frame_header_decode(p->header_bytes, CW_FRAME_HEADER_SIZE, &open,
                                                   &peek);
          if (!pst && !(peek.flags & CW_FRAME_REPLY) && peek.type != CW_MSG_HELLO) {
            p->header = peek;
            cw__fail(p, cw_make_status(CW_FAILED_PRECONDITION, "%s before HELLO",
                                       cw_msg_type_name(peek.type)), ev);
            break;
          }
          cw_status_free(pst);
        }
        cw_status_t st = cw_frame_header_decode(p->header_bytes, CW_FRAME_HEADER_SIZE,
                                                &p->limits, &p->header);
        if (st) {
          cw__fail(p, st, ev);
          break;
        }
        p->payload_have = 0;
        // payload_len is bounded by limits.max_payload (checked above).
        p->payload = malloc(p->header.payload_len ? p->header.payload_len : 1);
        if (!p->payload) {
          cw__fail(p, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a payload"), ev);
          break;
        }
        p->state = CW_CONN_PARSER_PAYLOAD;
        if (p->header.payload_len == 0) cw__finish_payload(p, ev);
        break;
      }
      case CW_CONN_PARSER_PAYLOAD: {
        if (pos == len) goto out;
        size_t n = p->header.payload_len - p->payload_have;
        if (n > len - pos) n = len - pos;
        memcpy(p->payload + p->payload_have, data + pos, n);
        p->payload_have += n;
        pos += n;
        if (p->payload_have == p->header.payload_len) cw__finish_payload(p, ev);
        break;
      }
      case CW_CONN_PARSER_BULK: {
        if (pos == len) goto out;
        uint64_t n = p->header.bulk_len - p->bulk_have;
        if (n > len - pos) n = len - pos;
        if (p->bulk_dest) memcpy(p->bulk_dest + p->bulk_have, data + pos, (size_t)n);
        pos += (size_t)n;
        cw_conn_parser_bulk_advance(p, n, ev);
        break;
      }
    }
  }
out:
  *out_consumed = pos;
}

bool cw_conn_parser_bulk_window(const cw_conn_parser_t* p, uint8_t** out_ptr,
                                uint64_t* out_len) {
  if (p->state != CW_CONN_PARSER_BULK || !p->bulk_dest) return false;
  *out_ptr = p->bulk_dest + p->bulk_have;
  *out_len = p->header.bulk_len - p->bulk_have;
  return true;
}

void cw_conn_parser_bulk_advance(cw_conn_parser_t* p, uint64_t n, cw_conn_parser_event_t* ev) {
  memset(ev, 0, sizeof(*ev));
  if (p->state != CW_CONN_PARSER_BULK) return;
  uint64_t left = p->header.bulk_len - p->bulk_have;
  p->bulk_have += n < left ? n : left;
  if (p->bulk_have == p->header.bulk_len) {
    ev->kind = CW_CONN_PARSER_EVENT_BULK_DONE;
    ev->header = p->header;
    p->bulk_dest = NULL;
    p->bulk_have = 0;
    p->state = CW_CONN_PARSER_HEADER;
  }
}
