// Unit tests for the monotonic clock readings.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cw_time.h"

static void test_time_monotonic(void** state) {
  int64_t a = cw_time_now_ns();
  int64_t b = cw_time_now_ns();
  assert_true(a > 0);
  assert_true(b >= a);
  int64_t ms = cw_time_now_ms();
  assert_true(ms >= a / 1000000 && ms <= cw_time_now_ns() / 1000000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_time_monotonic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
