// Unit tests of the worker registry (cw_ctl_registry.c) in process: the check
// on the names and addresses a REGISTER carries (a peer's text, printed in
// logs, errors and `causeway status`). What REGISTER does with a worker is
// covered with real daemons (cw_controller_test, cw_ctl_health_test).
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cw_ctl_registry.h"

// 1..max printable ASCII characters; nothing else.
static void test_printable(void** state) {
  (void)state;
  assert_true(cw_ctl_printable("worker-0", 128));
  assert_true(cw_ctl_printable("10.0.0.7:7000", 200));
  assert_true(cw_ctl_printable(" ~", 2));      // the first and last printable characters
  assert_true(cw_ctl_printable("abcd", 4));    // exactly max
  assert_false(cw_ctl_printable("abcde", 4));  // one more
  assert_false(cw_ctl_printable("", 128));
  assert_false(cw_ctl_printable(NULL, 128));
  static const char* const bad[] = {
      "tab\there", "new\nline", "esc\x1b[31m", "del\x7f", "caf\xc3\xa9", "\x80", "\xff",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    assert_false(cw_ctl_printable(bad[i], 128));
  }
  char all[96];
  for (int c = 0x20; c < 0x7f; ++c) all[c - 0x20] = (char)c;
  all[0x7f - 0x20] = 0;
  assert_true(cw_ctl_printable(all, sizeof(all) - 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_printable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
