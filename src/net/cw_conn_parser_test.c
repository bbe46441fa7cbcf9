// Unit tests of the connection parser: frames split at every byte, bulk into
// a destination or discarded, prehello limits, and violations.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_conn_parser.h"

// Builds an UPLOAD frame of a float32[2,3] array into buf; returns its size.
static size_t make_upload(uint8_t* buf, uint64_t bulk_len) {
  Causeway__V1__UploadRequest r = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  int64_t dims[2] = {2, 3};
  r.buffer_id = 5;
  r.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  r.n_dims = 2;
  r.dims = dims;
  size_t plen = causeway__v1__upload_request__get_packed_size(&r);
  cw_frame_header_t h = {CW_FRAME_MAGIC, 1, CW_MSG_UPLOAD, 0, (uint32_t)plen, 9, bulk_len};
  cw_frame_header_encode(&h, buf);
  causeway__v1__upload_request__pack(&r, buf + CW_FRAME_HEADER_SIZE);
  for (uint64_t i = 0; i < bulk_len; ++i) buf[CW_FRAME_HEADER_SIZE + plen + i] = (uint8_t)i;
  return CW_FRAME_HEADER_SIZE + plen + bulk_len;
}

static void test_split_everywhere(void** state) {
  (void)state;
  uint8_t frame[256];
  size_t n = make_upload(frame, 24);
  cw_frame_limits_t lim = {4096, 1 << 20};
  for (size_t split = 0; split <= n; ++split) {
    cw_conn_parser_t p;
    cw_conn_parser_initialize(&p, &lim);
    uint8_t dest[24] = {0};
    int frames = 0, done = 0;
    const uint8_t* parts[2] = {frame, frame + split};
    size_t lens[2] = {split, n - split};
    for (int c = 0; c < 2; ++c) {
      const uint8_t* d = parts[c];
      size_t len = lens[c];
      for (;;) {
        size_t used;
        cw_conn_parser_event_t ev;
        cw_conn_parser_feed(&p, d, len, &used, &ev);
        d += used;
        len -= used;
        if (ev.kind == CW_CONN_PARSER_EVENT_NONE) break;
        assert_int_not_equal(ev.kind, CW_CONN_PARSER_EVENT_ERROR);
        if (ev.kind == CW_CONN_PARSER_EVENT_FRAME) {
          frames++;
          assert_null(cw_msg_check_bulk(&ev.header, ev.msg));
          assert_int_equal(((Causeway__V1__UploadRequest*)ev.msg)->buffer_id, 5);
          protobuf_c_message_free_unpacked(ev.msg, NULL);
          cw_conn_parser_set_bulk_dest(&p, dest);
        } else {
          done++;
        }
      }
    }
    assert_int_equal(frames, 1);
    assert_int_equal(done, 1);
    for (int i = 0; i < 24; ++i) assert_int_equal(dest[i], i);
    cw_conn_parser_deinitialize(&p);
  }
}

static void test_violations(void** state) {
  (void)state;
  uint8_t frame[256];
  size_t n = make_upload(frame, 20);  // wrong extent
  cw_frame_limits_t lim = {4096, 1 << 20};
  cw_conn_parser_t p;
  cw_conn_parser_initialize(&p, &lim);
  size_t used;
  cw_conn_parser_event_t ev;
  cw_conn_parser_feed(&p, frame, n, &used, &ev);
  assert_int_equal(ev.kind, CW_CONN_PARSER_EVENT_FRAME);
  cw_status_t st = cw_msg_check_bulk(&ev.header, ev.msg);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  protobuf_c_message_free_unpacked(ev.msg, NULL);
  cw_conn_parser_deinitialize(&p);

  // No bulk before HELLO (max_bulk 0), and bad magic.
  cw_frame_limits_t pre = {4096, 0};
  cw_conn_parser_initialize(&p, &pre);
  n = make_upload(frame, 24);
  cw_conn_parser_feed(&p, frame, n, &used, &ev);
  assert_int_equal(ev.kind, CW_CONN_PARSER_EVENT_ERROR);
  assert_int_equal(ev.header.request_id, 9);
  cw_status_free(ev.status);
  cw_conn_parser_feed(&p, frame, n, &used, &ev);  // failed parsers consume nothing
  assert_int_equal(used, 0);
  assert_int_equal(ev.kind, CW_CONN_PARSER_EVENT_NONE);
  cw_conn_parser_deinitialize(&p);

  cw_conn_parser_initialize(&p, &lim);
  frame[0] ^= 0xff;
  cw_conn_parser_feed(&p, frame, n, &used, &ev);
  assert_int_equal(ev.kind, CW_CONN_PARSER_EVENT_ERROR);
  cw_status_free(ev.status);
  cw_conn_parser_deinitialize(&p);
}

// Before HELLO, a request of another type is FAILED_PRECONDITION even when
// its lengths also exceed the pre-HELLO limits; HELLO itself passes.
static void test_require_hello(void** state) {
  (void)state;
  uint8_t frame[256];
  size_t n = make_upload(frame, 24);
  cw_frame_limits_t pre = {4096, 0};
  cw_conn_parser_t p;
  size_t used;
  cw_conn_parser_event_t ev;
  cw_conn_parser_initialize(&p, &pre);
  cw_conn_parser_require_hello(&p, true);
  cw_conn_parser_feed(&p, frame, n, &used, &ev);
  assert_int_equal(ev.kind, CW_CONN_PARSER_EVENT_ERROR);
  assert_int_equal(cw_status_code(ev.status), CW_FAILED_PRECONDITION);
  assert_non_null(strstr(cw_status_message(ev.status), "before HELLO"));
  assert_int_equal(ev.header.request_id, 9);
  assert_int_equal(ev.header.type, CW_MSG_UPLOAD);
  cw_status_free(ev.status);
  cw_conn_parser_deinitialize(&p);

  Causeway__V1__HelloRequest hr = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  hr.min_version = hr.max_version = 1;
  size_t plen = causeway__v1__hello_request__get_packed_size(&hr);
  cw_frame_header_t h = {CW_FRAME_MAGIC, 1, CW_MSG_HELLO, 0, (uint32_t)plen, 3, 0};
  cw_frame_header_encode(&h, frame);
  causeway__v1__hello_request__pack(&hr, frame + CW_FRAME_HEADER_SIZE);
  cw_conn_parser_initialize(&p, &pre);
  cw_conn_parser_require_hello(&p, true);
  cw_conn_parser_feed(&p, frame, CW_FRAME_HEADER_SIZE + plen, &used, &ev);
  assert_int_equal(ev.kind, CW_CONN_PARSER_EVENT_FRAME);
  protobuf_c_message_free_unpacked(ev.msg, NULL);
  cw_conn_parser_deinitialize(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_everywhere),
      cmocka_unit_test(test_violations),
      cmocka_unit_test(test_require_hello),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
