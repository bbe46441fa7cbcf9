// Unit tests for cw_json: peer text always becomes valid JSON in UTF-8 that
// parses back, and unsigned values beyond jansson's integers keep their digits.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_json.h"

// Dumps v (taken) as a JSON text, parses it back and returns the string it holds.
static char* round_trip(json_t* v, size_t flags, char** out_text) {
  assert_non_null(v);
  char* text = json_dumps(v, flags | JSON_ENCODE_ANY);
  json_decref(v);
  assert_non_null(text);
  json_error_t err;
  json_t* back = json_loads(text, JSON_DECODE_ANY, &err);
  assert_non_null(back);
  assert_true(json_is_string(back));
  char* s = strdup(json_string_value(back));
  json_decref(back);
  *out_text = text;
  return s;
}

static void test_string_keeps_valid_utf8(void** state) {
  const char* in = "a\"b\\c\nd\te\x01" "f\x7f"
                   "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf";
  char* text;
  char* back = round_trip(cw_json_string_create(in), 0, &text);
  assert_string_equal(back, in);
  assert_string_equal(text, "\"a\\\"b\\\\c\\nd\\te\\u0001f\x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
                            "\xf4\x8f\xbf\xbf\"");
  free(back);
  free(text);
  back = round_trip(cw_json_string_create(NULL), 0, &text);
  assert_string_equal(back, "");
  assert_string_equal(text, "\"\"");
  free(back);
  free(text);
}

static void test_string_replaces_invalid_utf8(void** state) {
  // Valid: 2-, 3- and 4-byte sequences. Invalid, byte by byte: a lone
  // continuation byte, an overlong '/', a surrogate, 0xFF, a code point above
  // U+10FFFF, a sequence cut short at the end (as a truncated name is).
  const char* in = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\x80|\xc0\xaf|\xed\xa0\x80|\xff|"
                   "\xf4\x90\x80\x80|\xe2\x82";
  char* text;
  char* back = round_trip(cw_json_string_create(in), 0, &text);
#define FFFD "\xef\xbf\xbd"
  assert_string_equal(back, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|" FFFD "|" FFFD FFFD "|"
                            FFFD FFFD FFFD "|" FFFD "|" FFFD FFFD FFFD FFFD "|" FFFD FFFD);
#undef FFFD
  free(back);
  free(text);
  // Escaped to ASCII, the replacement character is \uFFFD.
  back = round_trip(cw_json_string_create("x\xffy"), JSON_ENSURE_ASCII, &text);
  assert_string_equal(text, "\"x\\uFFFDy\"");
  assert_string_equal(back, "x\xef\xbf\xbdy");
  free(back);
  free(text);
}

static void test_string_in_object_parses_back(void** state) {
  json_t* o = json_object();
  assert_int_equal(json_object_set_new(o, "name", cw_json_string_create("w\xc3")), 0);
  char* text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  assert_non_null(text);
  json_error_t err;
  json_t* back = json_loads(text, 0, &err);
  free(text);
  assert_non_null(back);
  assert_string_equal(json_string_value(json_object_get(back, "name")), "w\xef\xbf\xbd");
  json_decref(back);
}

static void test_uint(void** state) {
  json_t* v = cw_json_uint_create(0);
  assert_true(json_is_integer(v));
  assert_int_equal(json_integer_value(v), 0);
  json_decref(v);
  v = cw_json_uint_create(INT64_MAX);
  assert_true(json_is_integer(v));
  assert_true(json_integer_value(v) == INT64_MAX);
  json_decref(v);
  v = cw_json_uint_create((uint64_t)INT64_MAX + 1);
  assert_string_equal(json_string_value(v), "9223372036854775808");
  json_decref(v);
  v = cw_json_uint_create(UINT64_MAX);
  assert_string_equal(json_string_value(v), "18446744073709551615");
  json_decref(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_string_keeps_valid_utf8),
      cmocka_unit_test(test_string_replaces_invalid_utf8),
      cmocka_unit_test(test_string_in_object_parses_back),
      cmocka_unit_test(test_uint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
