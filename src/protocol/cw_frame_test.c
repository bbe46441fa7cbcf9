// Unit tests for the frame header codec and payload decoding.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_frame.h"

static const cw_frame_limits_t limits = {.max_payload = 4096, .max_bulk = 1 << 20};

static void encode(cw_frame_header_t h, uint8_t out[CW_FRAME_HEADER_SIZE]) {
  cw_frame_header_encode(&h, out);
}

static cw_frame_header_t good(void) {
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = CW_MSG_UPLOAD,
                         .flags = 0, .payload_len = 10, .request_id = 0x0102030405060708ull,
                         .bulk_len = 1000};
  return h;
}

static void expect_error(cw_frame_header_t h, size_t len, cw_status_code_t code,
                         const char* text) {
  uint8_t buf[CW_FRAME_HEADER_SIZE];
  encode(h, buf);
  cw_frame_header_t out;
  cw_status_t s = cw_frame_header_decode(buf, len, &limits, &out);
  assert_int_equal(cw_status_code(s), code);
  if (!strstr(cw_status_message(s), text)) fail_msg("'%s' lacks '%s'", cw_status_message(s), text);
  cw_status_free(s);
}

static void test_header_roundtrip(void** state) {
  uint8_t buf[CW_FRAME_HEADER_SIZE];
  encode(good(), buf);
  assert_int_equal(buf[0], 'C');
  assert_int_equal(buf[3], 'Y');
  assert_int_equal(buf[16], 0x08);  // little-endian request id
  cw_frame_header_t out;
  assert_null(cw_frame_header_decode(buf, sizeof(buf), &limits, &out));
  assert_int_equal(out.type, CW_MSG_UPLOAD);
  assert_int_equal(out.request_id, 0x0102030405060708ull);
  assert_int_equal(out.bulk_len, 1000);
}

static void test_header_violations(void** state) {
  cw_frame_header_t h = good();
  expect_error(h, 31, CW_INVALID_ARGUMENT, "truncated frame header");
  h.magic = 0xdeadbeef;
  expect_error(h, 32, CW_INVALID_ARGUMENT, "bad frame magic");
  h = good();
  h.version = 9;
  expect_error(h, 32, CW_UNIMPLEMENTED, "frame version 9");
  h = good();
  h.type = 77;
  expect_error(h, 32, CW_UNIMPLEMENTED, "unknown message type 77");
  h.type = 0;
  expect_error(h, 32, CW_UNIMPLEMENTED, "unknown message type 0");
  h = good();
  h.flags = 0x80;
  expect_error(h, 32, CW_INVALID_ARGUMENT, "unknown frame flags");
  h.flags = CW_FRAME_ERROR;
  expect_error(h, 32, CW_INVALID_ARGUMENT, "ERROR flag without REPLY");
  h = good();
  h.payload_len = 4097;
  expect_error(h, 32, CW_RESOURCE_EXHAUSTED, "payload of 4097 bytes");
  h = good();
  h.bulk_len = UINT64_MAX;
  expect_error(h, 32, CW_RESOURCE_EXHAUSTED, "bulk of");
  h = good();
  h.type = CW_MSG_PING;
  expect_error(h, 32, CW_INVALID_ARGUMENT, "PING frames carry no bulk");
  h = good();
  h.flags = CW_FRAME_REPLY;  // an UPLOAD reply carries no bulk
  expect_error(h, 32, CW_INVALID_ARGUMENT, "UPLOAD reply frames carry no bulk");
}

static void test_payload_decode(void** state) {
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  int64_t dims[] = {2, 3};
  req.buffer_id = 42;
  req.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  req.n_dims = 2;
  req.dims = dims;
  uint8_t buf[128];
  size_t n = causeway__v1__upload_request__pack(&req, buf);
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = CW_MSG_UPLOAD,
                         .payload_len = (uint32_t)n};
  ProtobufCMessage* m = NULL;
  assert_null(cw_frame_decode_payload(&h, buf, &m));
  Causeway__V1__UploadRequest* got = (Causeway__V1__UploadRequest*)m;
  assert_int_equal(got->buffer_id, 42);
  assert_int_equal(got->n_dims, 2);
  protobuf_c_message_free_unpacked(m, NULL);

  // A length-delimited field that claims more bytes than remain.
  const uint8_t bad[] = {0x1a, 0x7f, 0x01};
  h.payload_len = sizeof(bad);
  cw_status_t s = cw_frame_decode_payload(&h, bad, &m);
  assert_null(m);
  assert_non_null(strstr(cw_status_message(s), "malformed causeway.v1.UploadRequest"));
  cw_status_free(s);

  // Empty payloads decode as default messages.
  h.type = CW_MSG_STATS;
  h.payload_len = 0;
  assert_null(cw_frame_decode_payload(&h, NULL, &m));
  protobuf_c_message_free_unpacked(m, NULL);
}

// On an error the header still holds what was read: the request id the
// error reply answers.
static void test_header_error_keeps_request_id(void** state) {
  cw_frame_header_t h = good();
  h.payload_len = 5000;
  uint8_t buf[CW_FRAME_HEADER_SIZE];
  encode(h, buf);
  cw_frame_header_t out;
  cw_status_t s = cw_frame_header_decode(buf, sizeof(buf), &limits, &out);
  assert_int_equal(cw_status_code(s), CW_RESOURCE_EXHAUSTED);
  cw_status_free(s);
  assert_int_equal(out.request_id, 0x0102030405060708ull);
  assert_int_equal(out.payload_len, 5000);
  // Bulk exactly at the limit passes; an ERROR reply may answer any type.
  h = good();
  h.bulk_len = limits.max_bulk;
  encode(h, buf);
  assert_null(cw_frame_header_decode(buf, sizeof(buf), &limits, &out));
  h = good();
  h.type = CW_MSG_EVENT;
  h.bulk_len = 0;
  h.flags = CW_FRAME_REPLY | CW_FRAME_ERROR;
  encode(h, buf);
  assert_null(cw_frame_header_decode(buf, sizeof(buf), &limits, &out));
  // An ERROR reply carries no bulk, whatever its type's replies carry.
  h.type = CW_MSG_DOWNLOAD;
  h.bulk_len = 8;
  expect_error(h, 32, CW_INVALID_ARGUMENT, "DOWNLOAD reply frames carry no bulk");
  h.flags = CW_FRAME_REPLY;
  encode(h, buf);
  assert_null(cw_frame_header_decode(buf, sizeof(buf), &limits, &out));
}

// Replies decode as the type's reply schema, errors as ErrorReply.
static void test_payload_decode_replies(void** state) {
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  Causeway__V1__ErrorReply er = CAUSEWAY__V1__ERROR_REPLY__INIT;
  er.code = CW_NOT_FOUND;
  er.message = (char*)"gone";
  uint8_t buf[64];
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = CW_MSG_LAUNCH,
                         .flags = CW_FRAME_REPLY};
  h.payload_len = (uint32_t)causeway__v1__ack__pack(&ack, buf);
  ProtobufCMessage* m = NULL;
  assert_null(cw_frame_decode_payload(&h, buf, &m));
  assert_ptr_equal(m->descriptor, &causeway__v1__ack__descriptor);
  protobuf_c_message_free_unpacked(m, NULL);
  h.flags = CW_FRAME_REPLY | CW_FRAME_ERROR;
  h.payload_len = (uint32_t)causeway__v1__error_reply__pack(&er, buf);
  assert_null(cw_frame_decode_payload(&h, buf, &m));
  assert_ptr_equal(m->descriptor, &causeway__v1__error_reply__descriptor);
  assert_string_equal(((Causeway__V1__ErrorReply*)m)->message, "gone");
  protobuf_c_message_free_unpacked(m, NULL);
  // A notice has no reply schema; an unknown type no schema at all.
  h.type = CW_MSG_EVENT;
  h.flags = CW_FRAME_REPLY;
  h.payload_len = 0;
  m = (ProtobufCMessage*)&ack;
  cw_status_t s = cw_frame_decode_payload(&h, NULL, &m);
  assert_int_equal(cw_status_code(s), CW_UNIMPLEMENTED);
  assert_null(m);
  cw_status_free(s);
  h.type = 99;
  h.flags = 0;
  s = cw_frame_decode_payload(&h, NULL, &m);
  assert_int_equal(cw_status_code(s), CW_UNIMPLEMENTED);
  assert_non_null(strstr(cw_status_message(s), "unknown message type 99"));
  cw_status_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_roundtrip),
      cmocka_unit_test(test_header_violations),
      cmocka_unit_test(test_header_error_keeps_request_id),
      cmocka_unit_test(test_payload_decode),
      cmocka_unit_test(test_payload_decode_replies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
