// Unit tests of cw_bytes_format: units, fractions, the largest count, and
// a buffer too small.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cw_bytes.h"

static void test_format(void** state) {
  (void)state;
  char buf[32];
  assert_string_equal(cw_bytes_format(0, buf, sizeof(buf)), "0 bytes");
  assert_string_equal(cw_bytes_format(1023, buf, sizeof(buf)), "1023 bytes");
  assert_string_equal(cw_bytes_format(1024, buf, sizeof(buf)), "1 KiB");
  assert_string_equal(cw_bytes_format(12 * 1024, buf, sizeof(buf)), "12 KiB");
  assert_string_equal(cw_bytes_format(600ull << 20, buf, sizeof(buf)), "600 MiB");
  assert_string_equal(cw_bytes_format(1536ull << 20, buf, sizeof(buf)), "1.5 GiB");
  assert_string_equal(cw_bytes_format((1ull << 20) + 1, buf, sizeof(buf)), "1.0 MiB");
  assert_string_equal(cw_bytes_format(UINT64_MAX, buf, sizeof(buf)), "16 EiB");
  char small[4];
  assert_string_equal(cw_bytes_format(600ull << 20, small, sizeof(small)), "600");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
