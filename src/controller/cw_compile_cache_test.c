// Unit tests of the compile cache in memory: keys, hits, LRU eviction by
// bytes, entries that outlive eviction while retained (the cache on disk:
// cw_compile_disk_test.c).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_compile_cache.h"

static uint8_t* make_key(const char* a, const char* b, size_t* out_size) {
  const void* parts[2] = {a, b};
  size_t sizes[2] = {strlen(a), strlen(b)};
  uint8_t* key = NULL;
  cw_status_t st = cw_compile_cache_key_create(parts, sizes, 2, &key, out_size);
  assert_null(st);
  return key;
}

static uint8_t* bytes_of(size_t n) {
  uint8_t* b = malloc(n);
  memset(b, 7, n);
  return b;
}

static void test_keys_do_not_collide(void** state) {
  size_t s1, s2;
  uint8_t* k1 = make_key("ab", "c", &s1);
  uint8_t* k2 = make_key("a", "bc", &s2);
  assert_true(s1 == s2 && memcmp(k1, k2, s1) != 0);
  free(k1);
  free(k2);
}

static void test_hit_miss_and_lru(void** state) {
  size_t sa, sb, sc;
  uint8_t* ka = make_key("prog-a", "opts", &sa);
  uint8_t* kb = make_key("prog-b", "opts", &sb);
  uint8_t* kc = make_key("prog-c", "opts", &sc);
  // Room for two entries of 40 bytes, each charged its key too (a key holds
  // the whole program), not for three.
  cw_compile_cache_t* c = NULL;
  assert_null(cw_compile_cache_create(2 * (40 + sa) + 20, &c));
  assert_null(cw_compile_cache_lookup(c, ka, sa));
  cw_compile_cache_entry_release(cw_compile_cache_insert(c, ka, sa, bytes_of(40), 40));
  cw_compile_cache_entry_release(cw_compile_cache_insert(c, kb, sb, bytes_of(40), 40));
  cw_compile_cache_entry_t* e = cw_compile_cache_lookup(c, ka, sa);  // a is now most recent
  assert_non_null(e);
  assert_int_equal(e->size, 40);
  // c evicts b (least recent), and the retained a survives.
  cw_compile_cache_entry_t* ec = cw_compile_cache_insert(c, kc, sc, bytes_of(40), 40);
  assert_null(cw_compile_cache_lookup(c, kb, sb));
  assert_int_equal(cw_compile_cache_count(c), 2);
  assert_int_equal(cw_compile_cache_bytes(c), 80 + sa + sc);
  // Too large to keep: returned, not cached.
  cw_compile_cache_entry_t* big = cw_compile_cache_insert(c, kb, sb, bytes_of(200), 200);
  assert_non_null(big);
  assert_null(cw_compile_cache_lookup(c, kb, sb));
  cw_compile_cache_entry_release(big);
  cw_compile_cache_release(c);
  // Entries retained by callers outlive the cache.
  assert_int_equal(e->bytes[39], 7);
  cw_compile_cache_entry_release(e);
  cw_compile_cache_entry_release(ec);
  free(ka);
  free(kb);
  free(kc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keys_do_not_collide),
      cmocka_unit_test(test_hit_miss_and_lru),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
