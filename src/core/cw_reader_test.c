// Unit tests for the bounds-checked little-endian reader and its writers.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cw_reader.h"

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

// A failed read consumes nothing; reads up to the end succeed exactly.
static void test_reader_exact_end(void** state) {
  uint8_t bytes[14];
  cw_put_u16le(bytes, 0xbeef);
  cw_put_u32le(bytes + 2, 0xdeadbeefu);
  cw_put_u64le(bytes + 6, 0x0102030405060708ull);
  assert_int_equal(bytes[0], 0xef);
  assert_int_equal(bytes[5], 0xde);
  assert_int_equal(bytes[13], 0x01);
  cw_reader_t r;
  cw_reader_initialize(&r, bytes, 13);  // one byte short of the u64
  uint16_t a;
  uint32_t b;
  uint64_t c;
  assert_true(cw_reader_u16le(&r, &a));
  assert_int_equal(a, 0xbeef);
  assert_true(cw_reader_u32le(&r, &b));
  assert_int_equal(b, 0xdeadbeefu);
  assert_false(cw_reader_u64le(&r, &c));
  assert_int_equal(cw_reader_remaining(&r), 7);
  const uint8_t* p = NULL;
  assert_false(cw_reader_bytes(&r, 8, &p));
  assert_null(p);
  assert_true(cw_reader_bytes(&r, 7, &p));
  assert_ptr_equal(p, bytes + 6);
  assert_int_equal(cw_reader_remaining(&r), 0);
  assert_true(cw_reader_bytes(&r, 0, &p));  // nothing left, nothing asked
  assert_false(cw_reader_u16le(&r, &a));
  // A length that would wrap the position is refused, not added.
  cw_reader_initialize(&r, bytes, sizeof(bytes));
  assert_true(cw_reader_u16le(&r, &a));
  assert_false(cw_reader_bytes(&r, SIZE_MAX, &p));
  assert_int_equal(cw_reader_remaining(&r), sizeof(bytes) - 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reader),
      cmocka_unit_test(test_reader_exact_end),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
