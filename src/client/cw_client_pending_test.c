// Unit tests of the pending-request table (cw_client_pending.c): lookups
// across growth, and the spare records kept for the next requests.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_client_internal.h"

static cw_client_pending_t* record(cw_client_table_t* t, uint64_t id) {
  cw_client_pending_t* p = cw_client_table_new_record(t);
  assert_non_null(p);
  p->id = id;
  return p;
}

// 1,000 entries grow the 64 buckets several times; every one is found,
// removed once, and a missing id is not found.
static void test_insert_find_remove_across_growth(void** state) {
  (void)state;
  cw_client_table_t t = {0};
  assert_null(cw_client_table_initialize(&t));
  for (uint64_t id = 1; id <= 1000; ++id) cw_client_table_insert(&t, record(&t, id));
  assert_int_equal(t.count, 1000);
  assert_true(t.num_buckets > 64);
  for (uint64_t id = 1; id <= 1000; ++id) assert_true(cw_client_table_find(&t, id)->id == id);
  assert_null(cw_client_table_find(&t, 1001));
  for (uint64_t id = 2; id <= 1000; id += 2) {
    cw_client_pending_t* p = cw_client_table_remove(&t, id);
    assert_true(p && p->id == id && !p->next);
    cw_client_pending_free(p);
  }
  assert_null(cw_client_table_remove(&t, 2));
  assert_int_equal(t.count, 500);
  cw_client_table_deinitialize(&t);  // frees the 500 left (AddressSanitizer checks)
}

// A recycled record comes back zeroed, last in first out; past the cap the
// rest are freed, and deinitialize frees the spares.
static void test_spares_reused_zeroed_and_capped(void** state) {
  (void)state;
  cw_client_table_t t = {0};
  assert_null(cw_client_table_initialize(&t));
  cw_client_pending_t* a = record(&t, 7);
  a->flags = 0xff;
  a->user = a;
  a->type = 3;
  cw_client_table_recycle(&t, a);
  assert_int_equal(t.num_spare, 1);
  cw_client_pending_t* b = cw_client_table_new_record(&t);
  assert_ptr_equal(b, a);
  assert_int_equal(t.num_spare, 0);
  cw_client_pending_t zero;
  memset(&zero, 0, sizeof(zero));
  assert_memory_equal(b, &zero, sizeof(zero));
  free(b);

  enum { N = 1000 };
  cw_client_pending_t** many = calloc(N, sizeof(*many));
  assert_non_null(many);
  for (size_t i = 0; i < N; ++i) many[i] = record(&t, i + 1);
  for (size_t i = 0; i < N; ++i) cw_client_table_recycle(&t, many[i]);
  assert_true(t.num_spare > 0 && t.num_spare < N);  // capped; the rest were freed
  free(many);
  cw_client_table_deinitialize(&t);
  assert_int_equal(t.num_spare, 0);
  assert_null(t.spare);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_insert_find_remove_across_growth),
      cmocka_unit_test(test_spares_reused_zeroed_and_capped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
