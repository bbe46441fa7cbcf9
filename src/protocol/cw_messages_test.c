// Unit tests for the messages every peer builds the same way: ErrorReply to
// and from a status, a peer's closing error, the HELLO request.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_frame.h"
#include "cw_messages.h"

static void test_error_reply_status(void** state) {
  cw_status_t st = cw_make_status(CW_NOT_FOUND, "buffer 7 not found");
  Causeway__V1__ErrorReply er;
  cw_error_reply_fill(&er, st);
  assert_int_equal(er.code, CW_NOT_FOUND);
  // Through the wire form and back.
  uint8_t buf[128];
  size_t n = protobuf_c_message_pack(&er.base, buf);
  cw_status_free(st);
  Causeway__V1__ErrorReply* back = causeway__v1__error_reply__unpack(NULL, n, buf);
  assert_non_null(back);
  cw_status_t got = cw_error_reply_to_status(back, NULL);
  assert_int_equal(cw_status_code(got), CW_NOT_FOUND);
  assert_string_equal(cw_status_message(got), "buffer 7 not found");
  cw_status_free(got);
  got = cw_error_reply_to_status(back, "LAUNCH");
  assert_string_equal(cw_status_message(got), "LAUNCH: buffer 7 not found");
  cw_status_free(got);
  // A peer's code outside 1..16 is UNKNOWN; a missing message is said so.
  char* message = back->message;
  back->code = 99;
  back->message = NULL;
  got = cw_error_reply_to_status(back, NULL);
  assert_int_equal(cw_status_code(got), CW_UNKNOWN);
  assert_string_equal(cw_status_message(got), "(no message)");
  cw_status_free(got);
  back->message = message;
  causeway__v1__error_reply__free_unpacked(back, NULL);
}

static void test_hello_request_fill(void** state) {
  Causeway__V1__HelloRequest h;
  cw_hello_request_fill(&h, CAUSEWAY__V1__ROLE__ROLE_WORKER, "s3cret", 42, "w0");
  assert_int_equal(h.min_version, CW_PROTOCOL_MIN_VERSION);
  assert_int_equal(h.max_version, CW_PROTOCOL_VERSION);
  assert_int_equal(h.role, CAUSEWAY__V1__ROLE__ROLE_WORKER);
  assert_int_equal(h.token.len, 6);
  assert_memory_equal(h.token.data, "s3cret", 6);
  assert_int_equal(h.session_id, 42);
  assert_string_equal(h.peer_name, "w0");
  cw_hello_request_fill(&h, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL, 0, NULL);
  assert_int_equal(h.token.len, 0);
  assert_null(h.peer_name);
}

// An error reply with request id 0: the peer is closing; said as UNAVAILABLE
// with the peer's code by name (untrusted codes as UNKNOWN).
static void test_error_reply_peer_closing(void** state) {
  Causeway__V1__ErrorReply er = CAUSEWAY__V1__ERROR_REPLY__INIT;
  er.code = CW_RESOURCE_EXHAUSTED;
  er.message = (char*)"payload too large";
  cw_status_t st = cw_error_reply_peer_closing(&er);
  assert_int_equal(cw_status_code(st), CW_UNAVAILABLE);
  assert_string_equal(cw_status_message(st), "peer reported RESOURCE_EXHAUSTED: payload too large");
  cw_status_free(st);
  er.code = 1234;
  er.message = NULL;
  st = cw_error_reply_peer_closing(&er);
  assert_string_equal(cw_status_message(st), "peer reported UNKNOWN: ");
  cw_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_reply_status),
      cmocka_unit_test(test_error_reply_peer_closing),
      cmocka_unit_test(test_hello_request_fill),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
