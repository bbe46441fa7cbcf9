// Frame assembly for one byte stream, with no I/O: feed bytes in, get frame
// events out. The state machine is HEADER -> PAYLOAD -> BULK. After a FRAME
// event whose header declares bulk bytes, the owner names where they go
// (cw_conn_parser_set_bulk_dest; NULL discards them) and may read straight into
// that memory (cw_conn_parser_bulk_window / _bulk_advance) instead of feeding.
// Used by every src/net connection and by the fuzzer; never aborts on input.
#ifndef CW_NET_CONN_PARSER_H_
#define CW_NET_CONN_PARSER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_frame.h"
#include "cw_status.h"

typedef enum cw_conn_parser_state_e {
  CW_CONN_PARSER_HEADER = 0,
  CW_CONN_PARSER_PAYLOAD,
  CW_CONN_PARSER_BULK,
  CW_CONN_PARSER_FAILED,  // a violation was reported; feed consumes nothing
} cw_conn_parser_state_t;

typedef enum cw_conn_parser_event_kind_e {
  CW_CONN_PARSER_EVENT_NONE = 0,  // all input consumed, no event
  CW_CONN_PARSER_EVENT_FRAME,     // header + decoded payload; bulk may follow
  CW_CONN_PARSER_EVENT_BULK_DONE, // the last bulk byte of the frame arrived
  CW_CONN_PARSER_EVENT_ERROR,     // protocol violation: reply and close
} cw_conn_parser_event_kind_t;

typedef struct cw_conn_parser_event_s {
  cw_conn_parser_event_kind_t kind;
  cw_frame_header_t header;  // FRAME, BULK_DONE, and ERROR when readable
  ProtobufCMessage* msg;     // FRAME: taken by the caller (protobuf_c_message_free_unpacked)
  cw_status_t status;        // ERROR: taken by the caller
} cw_conn_parser_event_t;

typedef struct cw_conn_parser_s {
  cw_conn_parser_state_t state;
  cw_frame_limits_t limits;
  uint8_t header_bytes[CW_FRAME_HEADER_SIZE];
  size_t header_have;
  cw_frame_header_t header;
  uint8_t* payload;  // owned; payload_len bytes (bounded by limits)
  size_t payload_have;
  uint8_t* bulk_dest;  // borrowed; NULL: discard
  uint64_t bulk_have;
  // Before HELLO: a request header of any other type is refused with
  // FAILED_PRECONDITION before its lengths are checked against the (tight)
  // pre-HELLO limits, as docs/protocol.md rule 2 says.
  bool require_hello;
} cw_conn_parser_t;

// `limits` is copied; use cw_conn_parser_set_limits after HELLO.
void cw_conn_parser_initialize(cw_conn_parser_t* parser, const cw_frame_limits_t* limits);
void cw_conn_parser_deinitialize(cw_conn_parser_t* parser);
void cw_conn_parser_set_limits(cw_conn_parser_t* parser, const cw_frame_limits_t* limits);
// Whether a request other than HELLO is a FAILED_PRECONDITION violation
// (initially false).
void cw_conn_parser_require_hello(cw_conn_parser_t* parser, bool require);

// Consumes bytes of `data` up to and including the next event. Always sets
// *out_consumed and *out_event; call again with the rest until it returns
// EVENT_NONE. `data` may be NULL when len is 0.
void cw_conn_parser_feed(cw_conn_parser_t* parser, const uint8_t* data, size_t len,
                         size_t* out_consumed, cw_conn_parser_event_t* out_event);

// Where bulk bytes of the current frame go (borrowed; must hold bulk_len
// bytes and outlive the frame). NULL discards them.
void cw_conn_parser_set_bulk_dest(cw_conn_parser_t* parser, uint8_t* dest);

// In BULK state with a destination: the next unfilled part of it. False
// otherwise.
bool cw_conn_parser_bulk_window(const cw_conn_parser_t* parser, uint8_t** out_ptr,
                                uint64_t* out_len);
// Records that `n` bytes were written straight into the bulk window; sets
// *out_event to BULK_DONE when the frame is complete, NONE otherwise.
void cw_conn_parser_bulk_advance(cw_conn_parser_t* parser, uint64_t n,
                                 cw_conn_parser_event_t* out_event);

#endif  // CW_NET_CONN_PARSER_H_
