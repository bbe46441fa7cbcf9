// Unit test of cw_host.c: the memory this process may use is known, and no
// more than the machine's (a cgroup limit can only lower it); the CPU's
// identity follows its feature words.
// clang-format off: cmocka needs the standard headers before it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
// clang-format on

#include "cw_host.h"

static void test_memory_bytes(void** state) {
  (void)state;
  uint64_t mem = cw_host_memory_bytes();
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  assert_true(pages > 0 && page > 0);
  assert_true(mem > 0);
  assert_true(mem <= (uint64_t)pages * (uint64_t)page);
}

// Two CPUs are told apart by their feature words and machines; one whose
// features are not known says so; this host's is the same each time.
static void test_cpu_identity(void** state) {
  (void)state;
  const uint32_t one[] = {0x7ffafbff, 0xbfebfbff, 0xe7};
  const uint32_t other[] = {0x7ffafbff, 0xbfebfbff, 0x2e7};  // AVX-512 state enabled too
  char a[64], b[64], c[64], arm[64], none[64];
  cw_host_cpu_identity_of("x86_64", one, 3, a, sizeof(a));
  cw_host_cpu_identity_of("x86_64", one, 3, b, sizeof(b));
  cw_host_cpu_identity_of("x86_64", other, 3, c, sizeof(c));
  cw_host_cpu_identity_of("aarch64", one, 3, arm, sizeof(arm));
  cw_host_cpu_identity_of("riscv64", NULL, 0, none, sizeof(none));
  assert_string_equal(a, b);
  assert_string_not_equal(a, c);
  assert_string_not_equal(a, arm);
  assert_int_equal(strlen(a), strlen("x86_64 ") + 16);
  assert_string_equal(none, "riscv64 unknown");
  char here[64], again[64];
  cw_host_cpu_identity(here, sizeof(here));
  cw_host_cpu_identity(again, sizeof(again));
  assert_string_equal(here, again);
  assert_non_null(strchr(here, ' '));
#if defined(__x86_64__) || defined(__aarch64__)
  assert_null(strstr(here, "unknown"));  // known there
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_memory_bytes),
                                     cmocka_unit_test(test_cpu_identity)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
