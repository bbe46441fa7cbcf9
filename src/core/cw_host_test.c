// Unit test of cw_host.c: the memory this process may use is known, and no
// more than the machine's (a cgroup limit can only lower it); the CPU's
// identity follows its feature list.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void write_text(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

// Two CPUs are told apart by their feature lists, not by anything else in
// cpuinfo; one without a list says so.
static void test_cpu_identity(void** state) {
  (void)state;
  char dir[] = "/tmp/cw-host-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char a[512], b[512], c[512], none[512];
  snprintf(a, sizeof(a), "%s/a", dir);
  snprintf(b, sizeof(b), "%s/b", dir);
  snprintf(c, sizeof(c), "%s/c", dir);
  snprintf(none, sizeof(none), "%s/none", dir);
  write_text(a,
             "processor\t: 0\nmodel name\t: One\nflags\t\t: fpu sse2 avx2\n\n"
             "processor\t: 1\nflags\t\t: fpu sse2 avx2\n");
  write_text(b, "processor\t: 0\nmodel name\t: Two\nflags\t\t: fpu sse2 avx2\n");
  write_text(c, "processor\t: 0\nmodel name\t: One\nflags\t\t: fpu sse2 avx2 avx512f\n");
  write_text(none, "processor\t: 0\n");
  char ia[64], ib[64], ic[64], in[64], arm[64];
  cw_host_cpu_identity_from(a, "x86_64", ia, sizeof(ia));
  cw_host_cpu_identity_from(b, "x86_64", ib, sizeof(ib));
  cw_host_cpu_identity_from(c, "x86_64", ic, sizeof(ic));
  cw_host_cpu_identity_from(none, "x86_64", in, sizeof(in));
  cw_host_cpu_identity_from(a, "aarch64", arm, sizeof(arm));
  assert_string_equal(ia, ib);  // the same features
  assert_string_not_equal(ia, ic);
  assert_string_not_equal(ia, arm);
  assert_int_equal(strlen(ia), strlen("x86_64 ") + 16);
  assert_string_equal(in, "x86_64 unknown");
  cw_host_cpu_identity_from("/nonexistent/cpuinfo", "x86_64", in, sizeof(in));
  assert_string_equal(in, "x86_64 unknown");
  // This host's.
  char here[64];
  cw_host_cpu_identity(here, sizeof(here));
  assert_true(strlen(here) > 0 && strchr(here, ' '));
  unlink(a);
  unlink(b);
  unlink(c);
  unlink(none);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_memory_bytes),
                                     cmocka_unit_test(test_cpu_identity)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
