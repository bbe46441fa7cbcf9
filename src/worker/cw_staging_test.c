// Unit tests of the staging cache: reuse by size class, the byte cap, huge
// page alignment, and no caching below 1 MiB.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cw_staging.h"

static void test_reuse_and_cap(void** state) {
  (void)state;
  cw_staging_t* s = NULL;
  assert_null(cw_staging_create(8u << 20, &s));
  cw_staging_stats_t st;
  // Small blocks are never cached.
  void* small = cw_staging_alloc(s, 4096);
  assert_non_null(small);
  assert_int_equal((uintptr_t)small % 64, 0);
  cw_staging_free(s, small, 4096);
  cw_staging_stats(s, &st);
  assert_int_equal(st.cached_blocks, 0);
  // A 3 MiB block is 2 MiB aligned, comes back, and is reused for a size of
  // the same class.
  void* a = cw_staging_alloc(s, 3u << 20);
  assert_non_null(a);
  assert_int_equal((uintptr_t)a % (2u << 20), 0);
  memset(a, 1, 3u << 20);
  cw_staging_free(s, a, 3u << 20);
  cw_staging_stats(s, &st);
  assert_int_equal(st.cached_blocks, 1);
  assert_int_equal(st.cached_bytes, 4u << 20);
  void* b = cw_staging_alloc(s, (3u << 20) + 100);
  assert_ptr_equal(a, b);
  cw_staging_stats(s, &st);
  assert_int_equal(st.hits, 1);
  assert_int_equal(st.cached_blocks, 0);
  // The cap: 8 MiB holds two 4 MiB blocks; a third pushes out the oldest;
  // a block larger than the cap is freed at once.
  void* c = cw_staging_alloc(s, 4u << 20);
  void* d = cw_staging_alloc(s, 4u << 20);
  cw_staging_free(s, b, (3u << 20) + 100);
  cw_staging_free(s, c, 4u << 20);
  cw_staging_free(s, d, 4u << 20);
  cw_staging_stats(s, &st);
  assert_int_equal(st.cached_blocks, 2);
  assert_int_equal(st.cached_bytes, 8u << 20);
  void* big = cw_staging_alloc(s, 16u << 20);
  cw_staging_free(s, big, 16u << 20);
  cw_staging_stats(s, &st);
  assert_int_equal(st.cached_bytes, 8u << 20);
  cw_staging_release(s);
}

static void test_disabled(void** state) {
  (void)state;
  cw_staging_t* s = NULL;
  assert_null(cw_staging_create(0, &s));
  void* a = cw_staging_alloc(s, 2u << 20);
  cw_staging_free(s, a, 2u << 20);
  cw_staging_stats_t st;
  cw_staging_stats(s, &st);
  assert_int_equal(st.cached_blocks, 0);
  cw_staging_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_and_cap),
      cmocka_unit_test(test_disabled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
