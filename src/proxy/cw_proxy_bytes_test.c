// Unit tests for the proxy's host-buffer bytes: large released buffers are
// kept up to the configured bytes and handed to the next that fits, small
// ones and those over the limit are not, growing keeps the bytes, trimming
// frees the oldest.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cw_proxy_internal.h"

#define MIB ((size_t)1 << 20)

static int setup(void** state) {
  cw_proxy_bytes_configure(8 * MIB);
  return 0;
}

static int teardown(void** state) {
  cw_proxy_bytes_drain();
  return 0;
}

static void test_large_buffers_come_back(void** state) {
  uint8_t* a = cw_proxy_bytes_alloc(4 * MIB);
  assert_non_null(a);
  assert_int_equal(cw_proxy_bytes_cap(a), 4 * MIB);
  memset(a, 7, 4 * MIB);
  cw_proxy_bytes_free(a);
  uint8_t* b = cw_proxy_bytes_alloc(3 * MIB);  // fits: the kept one
  assert_ptr_equal(b, a);
  assert_int_equal(cw_proxy_bytes_cap(b), 4 * MIB);
  cw_proxy_bytes_free(b);
  uint8_t* c = cw_proxy_bytes_alloc(MIB);  // the kept one is over twice this: a new one
  assert_ptr_not_equal(c, a);
  assert_int_equal(cw_proxy_bytes_cap(c), MIB);
  uint8_t* d = cw_proxy_bytes_alloc(5 * MIB);  // too big for the kept one
  assert_ptr_not_equal(d, a);
  cw_proxy_bytes_free(c);
  cw_proxy_bytes_free(d);
}

static void test_cache_is_bounded(void** state) {
  uint8_t* a = cw_proxy_bytes_alloc(4 * MIB);
  uint8_t* b = cw_proxy_bytes_alloc(4 * MIB);
  uint8_t* c = cw_proxy_bytes_alloc(4 * MIB);
  cw_proxy_bytes_free(a);
  cw_proxy_bytes_free(b);
  cw_proxy_bytes_free(c);  // 12 MiB released, 8 kept: a (the oldest) went
  uint8_t* x = cw_proxy_bytes_alloc(4 * MIB);
  uint8_t* y = cw_proxy_bytes_alloc(4 * MIB);
  uint8_t* z = cw_proxy_bytes_alloc(4 * MIB);
  assert_true((x == b && y == c) || (x == c && y == b));
  assert_ptr_not_equal(z, b);
  assert_ptr_not_equal(z, c);
  cw_proxy_bytes_free(x);
  cw_proxy_bytes_free(y);
  cw_proxy_bytes_free(z);
  uint8_t* big = cw_proxy_bytes_alloc(9 * MIB);  // over the limit: never kept
  cw_proxy_bytes_free(big);
  cw_proxy_bytes_configure(0);  // none kept; what is kept stays until drained
  uint8_t* s = cw_proxy_bytes_alloc(2 * MIB);
  cw_proxy_bytes_free(s);
  cw_proxy_bytes_configure(8 * MIB);
}

// The host-buffer budget trims the cache to what it has left: the oldest go.
static void test_trim(void** state) {
  uint8_t* a = cw_proxy_bytes_alloc(2 * MIB);
  uint8_t* b = cw_proxy_bytes_alloc(3 * MIB);
  cw_proxy_bytes_free(a);
  cw_proxy_bytes_free(b);
  assert_int_equal(cw_proxy_bytes_cached(), 5 * MIB);
  cw_proxy_bytes_trim(4 * MIB);
  assert_int_equal(cw_proxy_bytes_cached(), 3 * MIB);
  cw_proxy_bytes_trim(3 * MIB);  // fits already
  assert_int_equal(cw_proxy_bytes_cached(), 3 * MIB);
  cw_proxy_bytes_trim(0);
  assert_int_equal(cw_proxy_bytes_cached(), 0);
  cw_proxy_bytes_trim(0);  // none kept
}

static void test_small_and_growing(void** state) {
  uint8_t* a = cw_proxy_bytes_alloc(100);
  assert_non_null(a);
  memcpy(a, "causeway", 8);
  uint8_t* b = cw_proxy_bytes_grow(a, 3 * MIB);
  assert_non_null(b);
  assert_memory_equal(b, "causeway", 8);
  assert_int_equal(cw_proxy_bytes_cap(b), 3 * MIB);
  cw_proxy_bytes_free(b);
  uint8_t* c = cw_proxy_bytes_grow(NULL, 16);
  assert_non_null(c);
  cw_proxy_bytes_free(c);
  cw_proxy_bytes_free(NULL);
  assert_null(cw_proxy_bytes_alloc(SIZE_MAX - 8));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_large_buffers_come_back, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cache_is_bounded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trim, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_and_growing, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
