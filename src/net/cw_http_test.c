// Unit tests of the daemons' HTTP request parser and label escaping.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cw_http.h"

static cw_http_parse_t parse(const char* s, cw_http_request_t* r) {
  return cw_http_parse_request(s, strlen(s), 8192, r);
}

static void test_get_with_headers(void** state) {
  cw_http_request_t r;
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n", &r),
                   CW_HTTP_OK);
  assert_string_equal(r.method, "GET");
  assert_string_equal(r.path, "/metrics");
  assert_int_equal(parse("HEAD /metrics?x=1&y HTTP/1.0\n\n", &r), CW_HTTP_OK);
  assert_string_equal(r.method, "HEAD");
  assert_string_equal(r.path, "/metrics");
}

static void test_incomplete_and_oversized(void** state) {
  cw_http_request_t r;
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", &r), CW_HTTP_NEED_MORE);
  assert_int_equal(parse("", &r), CW_HTTP_NEED_MORE);
  char big[100];
  memset(big, 'A', sizeof(big));
  assert_int_equal(cw_http_parse_request(big, sizeof(big), 64, &r), CW_HTTP_TOO_LARGE);
  assert_int_equal(cw_http_parse_request(big, 63, 64, &r), CW_HTTP_NEED_MORE);
}

// Bytes no head can hold are refused before the head is complete.
static void test_refused_before_the_end(void** state) {
  (void)state;
  cw_http_request_t r;
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nX: \x01", &r), CW_HTTP_BAD);
  assert_int_equal(parse("CWAY\x01", &r), CW_HTTP_BAD);          // a causeway frame
  assert_int_equal(parse("\x16\x03\x01\x02", &r), CW_HTTP_BAD);  // a TLS ClientHello
  assert_int_equal(parse("get /", &r), CW_HTTP_BAD);
  assert_int_equal(parse("GET /metr", &r), CW_HTTP_NEED_MORE);
}

static void test_malformed(void** state) {
  cw_http_request_t r;
  const char* bad[] = {
      "get /metrics HTTP/1.1\r\n\r\n",        // lower-case method
      "GET metrics HTTP/1.1\r\n\r\n",         // not an absolute path
      "GET /metrics HTTP/2.0\r\n\r\n",        // version
      "GET /metrics\r\n\r\n",                 // no version
      "GET  /metrics HTTP/1.1\r\n\r\n",       // empty target
      "GET /met\x01rics HTTP/1.1\r\n\r\n",    // control byte
      "GET /metrics HTTP/1.1x\r\n\r\n",       // junk after the version
      "ABCDEFGHIJKLMNOPQ /metrics HTTP/1.1\r\n\r\n",  // method too long
      "\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    assert_int_equal(parse(bad[i], &r), CW_HTTP_BAD);
  }
  char longpath[400] = "GET /";
  memset(longpath + 5, 'a', 300);
  strcpy(longpath + 305, " HTTP/1.1\r\n\r\n");
  assert_int_equal(parse(longpath, &r), CW_HTTP_BAD);
}

static void test_label_escaping(void** state) {
  cw_http_text_t t = {0};
  cw_http_text_printf(&t, "m{l=\"");
  cw_http_text_label(&t, "a\\b\"c\nd");
  cw_http_text_printf(&t, "\"} %d", 1);
  assert_false(t.failed);
  assert_string_equal(t.data, "m{l=\"a\\\\b\\\"c\\nd\"} 1");
  cw_http_text_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get_with_headers),
      cmocka_unit_test(test_incomplete_and_oversized),
      cmocka_unit_test(test_refused_before_the_end),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_label_escaping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
