// Unit tests for the status type: OK, errors with context and origin, clones,
// codes from the wire.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_status.h"

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

static void test_status_context(void** state) {
  cw_status_t s = fails_middle();
  assert_int_equal(cw_status_code(s), CW_NOT_FOUND);
  assert_string_equal(cw_status_message(s), "launch exe-1: buffer 7 unknown");
  assert_non_null(strstr(cw_status_origin(s), "cw_status_test.c:"));
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

// Context on OK stays OK; freeing OK is a no-op.
static void test_status_annotate_ok(void** state) {
  assert_null(cw_status_annotate(cw_ok_status(), "context %d", 1));
  cw_status_free(cw_ok_status());
  assert_string_equal(cw_status_origin(cw_ok_status()), "");
  assert_int_equal(cw_status_code(cw_ok_status()), CW_OK);
  assert_string_equal(cw_status_code_name(CW_OK), "OK");
  assert_string_equal(cw_status_code_name(CW_UNAUTHENTICATED), "UNAUTHENTICATED");
}

// A chain of carried errors keeps one prefix and the root's code.
static void test_status_carry(void** state) {
  (void)state;
  assert_null(cw_status_carry(cw_ok_status(), "input ", "input %d failed", 1));
  cw_status_t root = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of device memory");
  cw_status_t s = cw_status_carry(root, "input ", "input %d failed", 3);
  assert_int_equal(cw_status_code(s), CW_RESOURCE_EXHAUSTED);
  assert_string_equal(cw_status_message(s), "input 3 failed: out of device memory");
  for (int i = 4; i < 1000; ++i) {
    cw_status_t next = cw_status_carry(s, "input ", "input %d failed", i);
    cw_status_free(s);
    s = next;
  }
  assert_int_equal(cw_status_code(s), CW_RESOURCE_EXHAUSTED);
  assert_string_equal(cw_status_message(s), "input 3 failed: out of device memory");
  cw_status_free(s);
  cw_status_free(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_ok),          cmocka_unit_test(test_status_context),
      cmocka_unit_test(test_status_clone),       cmocka_unit_test(test_status_codes_from_wire),
      cmocka_unit_test(test_status_annotate_ok), cmocka_unit_test(test_status_carry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
