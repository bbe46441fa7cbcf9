// Unit tests for random bytes and ids from getrandom(2).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_random.h"
#include "cw_test_util.h"

#define ASSERT_OK CW_TEST_ASSERT_OK

static void test_random_bytes(void** state) {
  uint8_t a[32], b[32];
  memset(a, 0, sizeof(a));
  memset(b, 0, sizeof(b));
  ASSERT_OK(cw_random_bytes(a, sizeof(a)));
  ASSERT_OK(cw_random_bytes(b, sizeof(b)));
  assert_memory_not_equal(a, b, sizeof(a));  // 2^-256 of failing by chance
  ASSERT_OK(cw_random_bytes(NULL, 0));       // nothing asked, nothing read
}

// More than one getrandom call returns (it stops at 32 MiB - 1 bytes): the
// loop goes on to fill all of it.
static void test_random_bytes_large(void** state) {
  size_t n = (40u << 20) + 3;
  uint8_t* buf = calloc(1, n);
  assert_non_null(buf);
  ASSERT_OK(cw_random_bytes(buf, n));
  static const uint8_t zeros[4096];
  assert_memory_not_equal(buf + n - sizeof(zeros), zeros, sizeof(zeros));
  assert_memory_not_equal(buf + (33u << 20), zeros, sizeof(zeros));
  free(buf);
}

// A kernel error is returned, not replaced by a weaker source.
static void test_random_bytes_error(void** state) {
  cw_status_t st = cw_random_bytes((void*)8, 16);  // EFAULT
  assert_int_equal(cw_status_code(st), CW_INTERNAL);
  assert_non_null(strstr(cw_status_message(st), "getrandom: "));
  cw_status_free(st);
}

// Ids are in [1, 2^63): never 0 (0 means "none" on the wire), top bit clear.
static void test_random_ids(void** state) {
  enum { kN = 20000 };
  static uint64_t ids[kN];
  uint64_t ored = 0;
  for (int i = 0; i < kN; ++i) {
    ids[i] = 0;
    ASSERT_OK(cw_random_id(&ids[i]));
    assert_true(ids[i] != 0);
    assert_true(ids[i] < (1ull << 63));
    ored |= ids[i];
  }
  assert_true(ored >> 62);  // the top usable bit does occur
  for (int i = 1; i < kN; ++i) assert_true(ids[i] != ids[i - 1]);
  uint64_t id = 0;
  assert_true(cw_random_id_or_log("test id", &id));
  assert_true(id != 0 && id < (1ull << 63));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_bytes),
      cmocka_unit_test(test_random_bytes_large),
      cmocka_unit_test(test_random_bytes_error),
      cmocka_unit_test(test_random_ids),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
