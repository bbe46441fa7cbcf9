// Unit tests for array extents: dense and strided sizes, and the overflows,
// negative dims, unknown types and stride counts refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cw_array.h"
#include "proto/causeway.pb-c.h"

static void test_array_extent(void** state) {
  uint64_t bytes;
  int64_t dims[] = {2, 3};
  assert_null(cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, NULL, 0, &bytes));
  assert_int_equal(bytes, 24);
  int64_t col_major[] = {4, 8};
  assert_null(cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, col_major, 2, &bytes));
  assert_int_equal(bytes, 4 + 16 + 4);
  assert_null(cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_PRED, NULL, 0, NULL, 0, &bytes));
  assert_int_equal(bytes, 1);  // scalar
  int64_t zero[] = {0, 5};
  assert_null(cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_C128, zero, 2, NULL, 0, &bytes));
  assert_int_equal(bytes, 0);

  int64_t huge[] = {INT64_MAX, INT64_MAX};
  cw_status_t s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, huge, 2, NULL, 0, &bytes);
  assert_non_null(strstr(cw_status_message(s), "overflows"));
  cw_status_free(s);
  int64_t neg[] = {-1};
  s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, neg, 1, NULL, 0, &bytes);
  assert_non_null(strstr(cw_status_message(s), "negative"));
  cw_status_free(s);
  s = cw_array_extent(99, dims, 2, NULL, 0, &bytes);
  assert_non_null(strstr(cw_status_message(s), "unknown element type 99"));
  cw_status_free(s);
  s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, col_major, 1, &bytes);
  assert_non_null(strstr(cw_status_message(s), "1 byte strides given for rank 2"));
  cw_status_free(s);
  int64_t big_stride[] = {INT64_MAX, 1};
  int64_t big_dims[] = {3, 1};
  s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, big_dims, 2, big_stride, 2, &bytes);
  assert_non_null(strstr(cw_status_message(s), "overflows"));
  cw_status_free(s);
}

// Every wire dtype has its element size and name; others have none.
static void test_dtype_sizes(void** state) {
  static const struct {
    int dtype;
    size_t size;
    const char* name;
  } known[] = {
      {CAUSEWAY__V1__DTYPE__DTYPE_PRED, 1, "bool"},     {CAUSEWAY__V1__DTYPE__DTYPE_S8, 1, "int8"},
      {CAUSEWAY__V1__DTYPE__DTYPE_S16, 2, "int16"},     {CAUSEWAY__V1__DTYPE__DTYPE_S32, 4, "int32"},
      {CAUSEWAY__V1__DTYPE__DTYPE_S64, 8, "int64"},     {CAUSEWAY__V1__DTYPE__DTYPE_U8, 1, "uint8"},
      {CAUSEWAY__V1__DTYPE__DTYPE_U16, 2, "uint16"},    {CAUSEWAY__V1__DTYPE__DTYPE_U32, 4, "uint32"},
      {CAUSEWAY__V1__DTYPE__DTYPE_U64, 8, "uint64"},    {CAUSEWAY__V1__DTYPE__DTYPE_F16, 2, "float16"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F32, 4, "float32"},   {CAUSEWAY__V1__DTYPE__DTYPE_F64, 8, "float64"},
      {CAUSEWAY__V1__DTYPE__DTYPE_BF16, 2, "bfloat16"}, {CAUSEWAY__V1__DTYPE__DTYPE_C64, 8, "complex64"},
      {CAUSEWAY__V1__DTYPE__DTYPE_C128, 16, "complex128"},
  };
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); ++i) {
    assert_int_equal(cw_dtype_size(known[i].dtype), known[i].size);
    assert_string_equal(cw_dtype_name(known[i].dtype), known[i].name);
  }
  static const int unknown[] = {CAUSEWAY__V1__DTYPE__DTYPE_INVALID, -1, 16, 1000};
  for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); ++i) {
    assert_int_equal(cw_dtype_size(unknown[i]), 0);
    assert_string_equal(cw_dtype_name(unknown[i]), "invalid");
  }
}

// Rank beyond CW_MAX_RANK and negative strides are refused; a stride of 0
// (a broadcast) spans one element.
static void test_array_extent_limits(void** state) {
  static int64_t ones[CW_MAX_RANK + 1];
  for (int i = 0; i <= CW_MAX_RANK; ++i) ones[i] = 1;
  uint64_t bytes = 99;
  assert_null(cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_S8, ones, CW_MAX_RANK, NULL, 0, &bytes));
  assert_int_equal(bytes, 1);
  cw_status_t s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_S8, ones, CW_MAX_RANK + 1, NULL, 0,
                                  &bytes);
  assert_non_null(strstr(cw_status_message(s), "rank 65 exceeds the maximum of 64"));
  assert_int_equal(bytes, 0);
  cw_status_free(s);
  int64_t dims[] = {3, 2};
  int64_t neg[] = {8, -4};
  s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, neg, 2, &bytes);
  assert_non_null(strstr(cw_status_message(s), "byte stride 1 is negative"));
  cw_status_free(s);
  int64_t zero[] = {0, 0};
  assert_null(cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F64, dims, 2, zero, 2, &bytes));
  assert_int_equal(bytes, 8);
  // The largest dense size that fits is accepted, one element size more is not.
  int64_t big[] = {INT64_MAX};
  s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_S16, big, 1, NULL, 0, &bytes);
  assert_null(s);
  assert_int_equal(bytes, (uint64_t)INT64_MAX * 2);
  s = cw_array_extent(CAUSEWAY__V1__DTYPE__DTYPE_F32, big, 1, NULL, 0, &bytes);
  assert_non_null(strstr(cw_status_message(s), "overflows"));
  cw_status_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_array_extent),
      cmocka_unit_test(test_dtype_sizes),
      cmocka_unit_test(test_array_extent_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
