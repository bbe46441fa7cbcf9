// Unit tests for status, settings and the bounds-checked reader.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_log.h"
#include "cw_reader.h"
#include "cw_settings.h"
#include "cw_status.h"
#include "cw_time.h"

static cw_status_t fails_deep(int x) {
  return cw_make_status(CW_NOT_FOUND, "buffer %d unknown", x);
}
static cw_status_t fails_middle(void) {
  CW_RETURN_IF_ERROR(fails_deep(7), "launch %s", "exe-1");
  return cw_ok_status();
}

static void test_status_ok(void** state) {
  cw_status_t s = cw_ok_status();
  assert_true(cw_status_is_ok(s));
  assert_int_equal(cw_status_code(s), CW_OK);
  assert_string_equal(cw_status_message(s), "");
  cw_status_free(s);
  assert_null(cw_make_status(CW_OK, "ignored"));
}

static void test_status_clone(void** state) {
  assert_null(cw_status_clone(cw_ok_status()));
  cw_status_t s = cw_make_status(CW_DATA_LOSS, "bytes %d lost", 3);
  cw_status_t c = cw_status_clone(s);
  assert_ptr_not_equal(c, s);
  assert_int_equal(cw_status_code(c), CW_DATA_LOSS);
  assert_string_equal(cw_status_message(c), "bytes 3 lost");
  cw_status_free(s);  // the clone lives on alone
  assert_string_equal(cw_status_message(c), "bytes 3 lost");
  cw_status_free(c);
}

static void test_time_monotonic(void** state) {
  int64_t a = cw_time_now_ns();
  int64_t b = cw_time_now_ns();
  assert_true(a > 0);
  assert_true(b >= a);
  int64_t ms = cw_time_now_ms();
  assert_true(ms >= a / 1000000 && ms <= cw_time_now_ns() / 1000000);
}

static void test_status_context(void** state) {
  cw_status_t s = fails_middle();
  assert_int_equal(cw_status_code(s), CW_NOT_FOUND);
  assert_string_equal(cw_status_message(s), "launch exe-1: buffer 7 unknown");
  assert_non_null(strstr(cw_status_origin(s), "core_test.c:"));
  assert_string_equal(cw_status_code_name(cw_status_code(s)), "NOT_FOUND");
  cw_status_free(s);
}

static void test_status_codes_from_wire(void** state) {
  assert_int_equal(cw_status_code_from_u32(14), CW_UNAVAILABLE);
  assert_int_equal(cw_status_code_from_u32(0), CW_UNKNOWN);
  assert_int_equal(cw_status_code_from_u32(17), CW_UNKNOWN);
  assert_int_equal(cw_status_code_from_u32(0xffffffffu), CW_UNKNOWN);
  assert_string_equal(cw_status_code_name((cw_status_code_t)99), "INVALID_CODE");
}

static void test_settings(void** state) {
  setenv("CW_DEVICES", "8", 1);
  cw_settings_t s;
  cw_status_t st = cw_settings_initialize(&s);
  assert_null(st);
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 8);
  assert_int_equal(cw_settings_int(&s, CW_SET_MAX_PAYLOAD), 16 * 1024 * 1024);
  char* argv[] = {"prog", "--devices=2", "--listen", "127.0.0.1:1"};
  assert_null(cw_settings_parse_args(&s, 4, argv));
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 2);
  assert_string_equal(cw_settings_string(&s, CW_SET_LISTEN), "127.0.0.1:1");

  st = cw_settings_set(&s, "devices", "0", true);
  assert_int_equal(cw_status_code(st), CW_OUT_OF_RANGE);
  assert_non_null(strstr(cw_status_message(st), "outside"));
  cw_status_free(st);
  st = cw_settings_set(&s, "devices", "4x", true);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  st = cw_settings_set(&s, "token", "secret", true);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_non_null(strstr(cw_status_message(st), "CW_TOKEN"));
  cw_status_free(st);
  st = cw_settings_set(&s, "no-such", "1", true);
  assert_non_null(strstr(cw_status_message(st), "unknown setting --no-such"));
  cw_status_free(st);
  cw_settings_deinitialize(&s);
  unsetenv("CW_DEVICES");

  setenv("CW_DEVICES", "-3", 1);
  st = cw_settings_initialize(&s);
  assert_non_null(strstr(cw_status_message(st), "CW_DEVICES"));
  cw_status_free(st);
  cw_settings_deinitialize(&s);
  unsetenv("CW_DEVICES");
}

static void test_reader(void** state) {
  const uint8_t bytes[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09};
  cw_reader_t r;
  cw_reader_initialize(&r, bytes, sizeof(bytes));
  uint16_t a;
  uint64_t b;
  uint32_t c;
  assert_true(cw_reader_u16le(&r, &a));
  assert_int_equal(a, 0x0201);
  assert_false(cw_reader_u64le(&r, &b));  // only 7 left
  assert_int_equal(cw_reader_remaining(&r), 7);
  assert_true(cw_reader_u32le(&r, &c));
  assert_int_equal(c, 0x06050403);
  uint8_t out[8];
  cw_put_u64le(out, 0x1122334455667788ull);
  cw_reader_initialize(&r, out, 8);
  assert_true(cw_reader_u64le(&r, &b));
  assert_int_equal(b, 0x1122334455667788ull);
  cw_reader_initialize(&r, NULL, 5);
  assert_false(cw_reader_u16le(&r, &a));
}

static void test_log_levels(void** state) {
  cw_log_level_t l;
  assert_true(cw_log_parse_level("debug", &l));
  assert_int_equal(l, CW_LOG_DEBUG);
  assert_true(cw_log_parse_level("1", &l));
  assert_int_equal(l, CW_LOG_WARN);
  assert_false(cw_log_parse_level("loud", &l));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_ok),       cmocka_unit_test(test_status_context),
      cmocka_unit_test(test_status_clone), cmocka_unit_test(test_time_monotonic),
      cmocka_unit_test(test_status_codes_from_wire), cmocka_unit_test(test_settings),
      cmocka_unit_test(test_reader),          cmocka_unit_test(test_log_levels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
