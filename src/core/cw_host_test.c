// Unit test of cw_host.c: the memory this process may use is known, and no
// more than the machine's (a cgroup limit can only lower it).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_host.h"

static void test_memory_bytes(void** state) {
  (void)state;
  uint64_t mem = cw_host_memory_bytes();
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  assert_true(pages > 0 && page > 0);
  assert_true(mem > 0);
  assert_true(mem <= (uint64_t)pages * (uint64_t)page);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_memory_bytes)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
