// Unit tests for the layout of a HOST_CALLBACK request's arrays: offsets of
// dense arrays one after another, tokens with no bytes, and the malformed
// arrays (a token with a dtype, an unknown dtype, negative dims, overflow,
// too many arrays) refused with their index; buffer callbacks' aliases.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_hostcb.h"

static Causeway__V1__HostCallbackArray array(int dtype, int64_t* dims, size_t rank, bool token) {
  Causeway__V1__HostCallbackArray a = CAUSEWAY__V1__HOST_CALLBACK_ARRAY__INIT;
  a.dtype = (Causeway__V1__DType)dtype;
  a.dims = dims;
  a.n_dims = rank;
  a.token = token;
  return a;
}

static void expect_error(Causeway__V1__HostCallbackArray* const* arrays, size_t n,
                         const char* text) {
  uint64_t total = 99;
  cw_status_t s = cw_hostcb_layout(arrays, n, "operand", NULL, &total);
  assert_non_null(s);
  if (!strstr(cw_status_message(s), text)) fail_msg("got: %s", cw_status_message(s));
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  assert_int_equal(total, 0);
  cw_status_free(s);
}

static void test_offsets(void** state) {
  (void)state;
  int64_t d23[] = {2, 3}, d5[] = {5};
  Causeway__V1__HostCallbackArray tok = array(0, NULL, 0, true);
  Causeway__V1__HostCallbackArray f32 = array(CAUSEWAY__V1__DTYPE__DTYPE_F32, d23, 2, false);
  Causeway__V1__HostCallbackArray u8 = array(CAUSEWAY__V1__DTYPE__DTYPE_U8, d5, 1, false);
  Causeway__V1__HostCallbackArray c128 = array(CAUSEWAY__V1__DTYPE__DTYPE_C128, NULL, 0, false);
  Causeway__V1__HostCallbackArray* arrays[] = {&tok, &f32, &u8, &c128};
  uint64_t off[4], total = 0;
  assert_null(cw_hostcb_layout(arrays, 4, "operand", off, &total));
  assert_int_equal(off[0], 0);
  assert_int_equal(off[1], 0);   // the token takes no bytes
  assert_int_equal(off[2], 24);  // f32[2,3]
  assert_int_equal(off[3], 29);  // u8[5], no padding
  assert_int_equal(total, 45);   // c128 scalar
  assert_int_equal(cw_hostcb_array_bytes(&f32), 24);
  assert_int_equal(cw_hostcb_array_bytes(&tok), 0);
  // No arrays at all: nothing to carry.
  assert_null(cw_hostcb_layout(NULL, 0, "result", NULL, &total));
  assert_int_equal(total, 0);
}

static void test_refused(void** state) {
  (void)state;
  int64_t d2[] = {2}, neg[] = {3, -1}, huge[] = {INT64_MAX / 2, 4};
  Causeway__V1__HostCallbackArray ok = array(CAUSEWAY__V1__DTYPE__DTYPE_F32, d2, 1, false);
  Causeway__V1__HostCallbackArray typed_token =
      array(CAUSEWAY__V1__DTYPE__DTYPE_F32, NULL, 0, true);
  Causeway__V1__HostCallbackArray shaped_token = array(0, d2, 1, true);
  Causeway__V1__HostCallbackArray unknown = array(77, d2, 1, false);
  Causeway__V1__HostCallbackArray negative =
      array(CAUSEWAY__V1__DTYPE__DTYPE_F32, neg, 2, false);
  Causeway__V1__HostCallbackArray overflow =
      array(CAUSEWAY__V1__DTYPE__DTYPE_F64, huge, 2, false);
  Causeway__V1__HostCallbackArray* a1[] = {&ok, &typed_token};
  expect_error(a1, 2, "operand 1: a token has no element type or dimensions");
  Causeway__V1__HostCallbackArray* a2[] = {&shaped_token};
  expect_error(a2, 1, "operand 0: a token");
  Causeway__V1__HostCallbackArray* a3[] = {&ok, &ok, &unknown};
  expect_error(a3, 3, "operand 2: unknown element type 77");
  Causeway__V1__HostCallbackArray* a4[] = {&negative};
  expect_error(a4, 1, "negative");
  Causeway__V1__HostCallbackArray* a5[] = {&overflow};
  expect_error(a5, 1, "overflows");
  Causeway__V1__HostCallbackArray* a6[] = {&ok, NULL};
  expect_error(a6, 2, "operand 1 is missing");
  // Arrays whose sizes each fit but whose sum does not.
  int64_t big[] = {INT64_MAX / 8};
  Causeway__V1__HostCallbackArray b = array(CAUSEWAY__V1__DTYPE__DTYPE_F64, big, 1, false);
  Causeway__V1__HostCallbackArray* a7[] = {&b, &b, &b};
  expect_error(a7, 3, "overflow 64 bits");
  expect_error(a7, CW_HOSTCB_MAX_ARRAYS + 1, "at most");
}

static void expect_alias_error(const Causeway__V1__HostCallbackRequest* r, const char* text) {
  cw_status_t s = cw_hostcb_check_aliases(r);
  assert_non_null(s);
  if (!strstr(cw_status_message(s), text)) fail_msg("got: %s", cw_status_message(s));
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  cw_status_free(s);
}

// Buffer callbacks: a result may share an operand's memory, one of its own
// dtype and dims; anything else names the result.
static void test_aliases(void** state) {
  (void)state;
  int64_t d23[] = {2, 3}, d32[] = {3, 2};
  Causeway__V1__HostCallbackArray f23 = array(CAUSEWAY__V1__DTYPE__DTYPE_F32, d23, 2, false);
  Causeway__V1__HostCallbackArray f32 = array(CAUSEWAY__V1__DTYPE__DTYPE_F32, d32, 2, false);
  Causeway__V1__HostCallbackArray i23 = array(CAUSEWAY__V1__DTYPE__DTYPE_S32, d23, 2, false);
  Causeway__V1__HostCallbackArray tok = array(0, NULL, 0, true);
  Causeway__V1__HostCallbackArray* ops[] = {&tok, &f23, &i23};
  Causeway__V1__HostCallbackArray* res[] = {&f23, &i23};
  Causeway__V1__HostCallbackRequest r = CAUSEWAY__V1__HOST_CALLBACK_REQUEST__INIT;
  r.operands = ops;
  r.n_operands = 3;
  r.results = res;
  r.n_results = 2;
  assert_null(cw_hostcb_check_aliases(&r));  // none at all
  uint32_t ok[] = {2, 0};
  r.aliased_operand = ok;
  r.n_aliased_operand = 2;
  expect_alias_error(&r, "aliases are for buffer callbacks");
  r.buffer = true;
  assert_null(cw_hostcb_check_aliases(&r));
  uint32_t both[] = {2, 3};
  r.aliased_operand = both;
  assert_null(cw_hostcb_check_aliases(&r));
  r.n_aliased_operand = 1;
  expect_alias_error(&r, "1 aliases for 2 results");
  r.n_aliased_operand = 2;
  uint32_t past[] = {0, 4};
  r.aliased_operand = past;
  expect_alias_error(&r, "result 1 aliases operand 3 of 3");
  uint32_t other_type[] = {3, 0};
  r.aliased_operand = other_type;
  expect_alias_error(&r, "result 0 aliases operand 2 of another type or shape");
  uint32_t token[] = {1, 0};
  r.aliased_operand = token;
  expect_alias_error(&r, "result 0 aliases operand 0 of another");
  res[0] = &f32;  // f32[3,2] against the operand's f32[2,3]
  r.aliased_operand = ok;
  expect_alias_error(&r, "result 0 aliases operand 1 of another type or shape");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_offsets),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_aliases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
