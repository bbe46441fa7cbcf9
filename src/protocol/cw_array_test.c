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
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E5M2, 1, "float8_e5m2"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3FN, 1, "float8_e4m3fn"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3B11FNUZ, 1, "float8_e4m3b11fnuz"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E5M2FNUZ, 1, "float8_e5m2fnuz"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3FNUZ, 1, "float8_e4m3fnuz"},
      {CAUSEWAY__V1__DTYPE__DTYPE_S4, 1, "int4"},
      {CAUSEWAY__V1__DTYPE__DTYPE_U4, 1, "uint4"},
      {CAUSEWAY__V1__DTYPE__DTYPE_S2, 1, "int2"},
      {CAUSEWAY__V1__DTYPE__DTYPE_U2, 1, "uint2"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3, 1, "float8_e4m3"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E3M4, 1, "float8_e3m4"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F8E8M0FNU, 1, "float8_e8m0fnu"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F4E2M1FN, 1, "float4_e2m1fn"},
      {CAUSEWAY__V1__DTYPE__DTYPE_S1, 1, "int1"},
      {CAUSEWAY__V1__DTYPE__DTYPE_U1, 1, "uint1"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F6E2M3FN, 1, "float6_e2m3fn"},
      {CAUSEWAY__V1__DTYPE__DTYPE_F6E3M2FN, 1, "float6_e3m2fn"},
  };
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); ++i) {
    assert_int_equal(cw_dtype_size(known[i].dtype), known[i].size);
    assert_string_equal(cw_dtype_name(known[i].dtype), known[i].name);
  }
  assert_string_equal(cw_dtype_xla_name(CAUSEWAY__V1__DTYPE__DTYPE_F32), "f32");
  assert_string_equal(cw_dtype_xla_name(CAUSEWAY__V1__DTYPE__DTYPE_PRED), "pred");
  assert_string_equal(cw_dtype_xla_name(CAUSEWAY__V1__DTYPE__DTYPE_S4), "s4");
  assert_string_equal(cw_dtype_xla_name(CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3FN), "f8e4m3fn");
  assert_string_equal(cw_dtype_xla_name(CAUSEWAY__V1__DTYPE__DTYPE_TOKEN), "token");
  assert_string_equal(cw_dtype_xla_name(1000), "invalid");
  static const int unknown[] = {CAUSEWAY__V1__DTYPE__DTYPE_INVALID, -1, 34, 1000};
  for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); ++i) {
    assert_int_equal(cw_dtype_size(unknown[i]), 0);
    assert_string_equal(cw_dtype_name(unknown[i]), "invalid");
    assert_int_equal(cw_dtype_device_bytes(unknown[i], 8), 0);
  }
  // A token has a name but no bytes: it never crosses the wire.
  assert_int_equal(cw_dtype_size(CAUSEWAY__V1__DTYPE__DTYPE_TOKEN), 0);
  assert_string_equal(cw_dtype_name(CAUSEWAY__V1__DTYPE__DTYPE_TOKEN), "token");
}

// On the device sub-byte types are packed; everything else is as on the host.
static void test_dtype_device_bytes(void** state) {
  (void)state;
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_F32, 5), 20);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_PRED, 5), 5);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3FN, 5), 5);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_S4, 5), 3);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_U4, 6), 3);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_F4E2M1FN, 1), 1);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_S2, 9), 3);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_U1, 17), 3);
  assert_int_equal(cw_dtype_device_bytes(CAUSEWAY__V1__DTYPE__DTYPE_S4, 0), 0);
  assert_true(cw_dtype_packed(CAUSEWAY__V1__DTYPE__DTYPE_S4));
  assert_true(cw_dtype_packed(CAUSEWAY__V1__DTYPE__DTYPE_U1));
  assert_true(cw_dtype_packed(CAUSEWAY__V1__DTYPE__DTYPE_F4E2M1FN));
  assert_false(cw_dtype_packed(CAUSEWAY__V1__DTYPE__DTYPE_F8E5M2));
  assert_false(cw_dtype_packed(CAUSEWAY__V1__DTYPE__DTYPE_PRED));
  assert_false(cw_dtype_packed(CAUSEWAY__V1__DTYPE__DTYPE_TOKEN));
  assert_false(cw_dtype_packed(-1));
}

// Strided host arrays of every kind come out dense row-major.
static void test_gather_dense(void** state) {
  (void)state;
  // A 3x4 int16 matrix m[i][j] = 10 * i + j, dense.
  int16_t m[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) m[i][j] = (int16_t)(10 * i + j);
  }
  int16_t out[12];
  // Rows reversed (numpy m[::-1]): base at the last row, stride -8.
  int64_t dims[] = {3, 4}, rev_rows[] = {-8, 2};
  cw_array_gather_dense(&m[2][0], 2, dims, rev_rows, 2, out);
  static const int16_t want_rows[] = {20, 21, 22, 23, 10, 11, 12, 13, 0, 1, 2, 3};
  assert_memory_equal(out, want_rows, sizeof(want_rows));
  // Every other column, reversed (m[:, ::-2]): 3x2, base m[0][3], stride -4.
  int64_t dims2[] = {3, 2}, rev_cols[] = {8, -4};
  cw_array_gather_dense(&m[0][3], 2, dims2, rev_cols, 2, out);
  static const int16_t want_cols[] = {3, 1, 13, 11, 23, 21};
  assert_memory_equal(out, want_cols, sizeof(want_cols));
  // Transposed (m.T): 4x3, strides {2, 8}.
  int64_t dims3[] = {4, 3}, trans[] = {2, 8};
  cw_array_gather_dense(&m[0][0], 2, dims3, trans, 2, out);
  static const int16_t want_t[] = {0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23};
  assert_memory_equal(out, want_t, sizeof(want_t));
  // Broadcast (np.broadcast_to(m[1], (3, 4))): stride 0 over the rows.
  int64_t bcast[] = {0, 2};
  cw_array_gather_dense(&m[1][0], 2, dims, bcast, 2, out);
  static const int16_t want_b[] = {10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13};
  assert_memory_equal(out, want_b, sizeof(want_b));
  // Rank 3 (m reshaped 3x2x2, axes reversed by strides), a scalar, an empty array.
  int64_t dims4[] = {2, 2, 3}, s4[] = {2, 4, 8};
  cw_array_gather_dense(&m[0][0], 2, dims4, s4, 3, out);
  static const int16_t want_3[] = {0, 10, 20, 2, 12, 22, 1, 11, 21, 3, 13, 23};
  assert_memory_equal(out, want_3, sizeof(want_3));
  out[0] = -1;
  cw_array_gather_dense(&m[2][3], 2, NULL, NULL, 0, out);
  assert_int_equal(out[0], 23);
  int64_t empty[] = {3, 0}, any[] = {-8, 2};
  out[0] = -1;
  cw_array_gather_dense(&m[0][0], 2, empty, any, 2, out);
  assert_int_equal(out[0], -1);  // nothing written
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
      cmocka_unit_test(test_dtype_device_bytes),
      cmocka_unit_test(test_gather_dense),
      cmocka_unit_test(test_array_extent_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
