// Unit tests of the memory budget (cw_mem_budget.c): what fits, what can
// never fit, per-session order, other sessions passing a large waiter,
// several devices at once, timeouts, charges over the limit and no limit at all.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_mem_budget.h"

#define MIB (1024ull * 1024ull)

static void init2(cw_mem_budget_t* b, uint64_t limit) {
  uint64_t limits[2] = {limit, limit};
  cw_status_t st = cw_mem_budget_initialize(b, 2, limits);
  assert_null(st);
}

static cw_mem_waiter_t* enqueue(cw_mem_budget_t* b, uint64_t session, uint64_t d0, uint64_t d1,
                                int64_t deadline, void* user) {
  uint64_t need[2] = {d0, d1};
  cw_mem_waiter_t* w = NULL;
  cw_status_t st = cw_mem_budget_enqueue(b, session, need, 0, deadline, user, &w);
  assert_null(st);
  return w;
}

static cw_mem_decision_t decide(cw_mem_budget_t* b, uint64_t session, uint64_t d0, uint64_t d1,
                                size_t* out_device) {
  uint64_t need[2] = {d0, d1};
  return cw_mem_budget_decide(b, session, need, out_device);
}

static void test_fits_waits_never(void** state) {
  (void)state;
  cw_mem_budget_t b;
  init2(&b, 512 * MIB);
  assert_true(cw_mem_budget_limited(&b));
  size_t dev = 99;
  assert_int_equal(decide(&b, 1, 300 * MIB, 0, &dev), CW_MEM_FITS);
  cw_mem_budget_charge(&b, 0, 300 * MIB);
  // 300 + 300 > 512 on device 0, while device 1 is empty.
  assert_int_equal(decide(&b, 2, 300 * MIB, 0, &dev), CW_MEM_WAIT);
  assert_int_equal(dev, 0);
  assert_int_equal(decide(&b, 2, 0, 300 * MIB, &dev), CW_MEM_FITS);
  // Exactly the limit fits an empty device; one byte more never does.
  assert_int_equal(decide(&b, 2, 0, 512 * MIB, &dev), CW_MEM_FITS);
  assert_int_equal(decide(&b, 2, 0, 512 * MIB + 1, &dev), CW_MEM_NEVER);
  assert_int_equal(dev, 1);
  assert_int_equal(b.refused, 1);
  // Nothing needed: fits whatever is in use.
  assert_int_equal(decide(&b, 2, 0, 0, &dev), CW_MEM_FITS);
  assert_int_equal(cw_mem_budget_used_total(&b), 300 * MIB);
  assert_int_equal(cw_mem_budget_used_max(&b), 300 * MIB);
  cw_mem_budget_release(&b, 0, 300 * MIB);
  assert_int_equal(decide(&b, 2, 300 * MIB, 0, &dev), CW_MEM_FITS);
  // Releasing more than is charged stops at zero; unknown devices are ignored.
  cw_mem_budget_release(&b, 0, 1);
  cw_mem_budget_charge(&b, 7, 1);
  assert_int_equal(cw_mem_budget_used_total(&b), 0);
  cw_mem_budget_deinitialize(&b);
}

static void test_session_order_and_others_pass(void** state) {
  (void)state;
  cw_mem_budget_t b;
  init2(&b, 100);
  cw_mem_budget_charge(&b, 0, 80);
  int ua = 1, ub = 2, uc = 3;
  // Session 1 waits for 50 on device 0.
  assert_int_equal(decide(&b, 1, 50, 0, NULL), CW_MEM_WAIT);
  cw_mem_waiter_t* a = enqueue(&b, 1, 50, 0, 1000, &ua);
  assert_int_equal(b.waiting, 1);
  assert_int_equal(b.waiting_bytes, 50);
  // Its later request on the other, empty device waits behind it.
  size_t dev = 99;
  assert_int_equal(decide(&b, 1, 0, 10, &dev), CW_MEM_WAIT);
  assert_int_equal(dev, 1);
  cw_mem_waiter_t* a2 = enqueue(&b, 1, 0, 10, 1000, &ub);
  // Another session's small request fits and is not held back.
  assert_int_equal(decide(&b, 2, 10, 0, NULL), CW_MEM_FITS);
  cw_mem_budget_charge(&b, 0, 10);  // 90 in use
  // Nothing fits yet: a2 fits but waits behind a.
  assert_null(cw_mem_budget_take_ready(&b));
  // A third session's waiter that needs 25 on device 0.
  cw_mem_waiter_t* c = enqueue(&b, 3, 25, 0, 1000, &uc);
  cw_mem_budget_release(&b, 0, 60);  // 30 in use: c (25) fits, a (50) fits too
  cw_mem_waiter_t* got = cw_mem_budget_take_ready(&b);
  assert_ptr_equal(got, a);  // oldest first
  cw_mem_budget_charge(&b, 0, got->need[0]);  // 80
  cw_mem_budget_waiter_free(got);
  got = cw_mem_budget_take_ready(&b);
  assert_ptr_equal(got, a2);  // its session's earlier one is gone
  assert_ptr_equal(got->user, &ub);
  cw_mem_budget_charge(&b, 1, got->need[1]);
  cw_mem_budget_waiter_free(got);
  // c needs 25 with 80 in use: no.
  assert_null(cw_mem_budget_take_ready(&b));
  cw_mem_budget_release(&b, 0, 10);
  got = cw_mem_budget_take_ready(&b);
  assert_ptr_equal(got, c);
  cw_mem_budget_waiter_free(got);
  assert_int_equal(b.waiting, 0);
  assert_int_equal(b.waiting_bytes, 0);
  assert_int_equal(b.waits, 3);
  cw_mem_budget_deinitialize(&b);
}

static void test_large_waiter_passed_by_smaller(void** state) {
  (void)state;
  cw_mem_budget_t b;
  init2(&b, 100);
  cw_mem_budget_charge(&b, 0, 60);
  cw_mem_waiter_t* big = enqueue(&b, 1, 90, 0, 1000, NULL);
  cw_mem_waiter_t* small = enqueue(&b, 2, 30, 0, 1000, NULL);
  cw_mem_waiter_t* got = cw_mem_budget_take_ready(&b);
  assert_ptr_equal(got, small);  // 60 + 30 fits; 60 + 90 does not
  cw_mem_budget_waiter_free(got);
  assert_int_equal(b.head, big);
  cw_mem_budget_remove(&b, big);  // its request went away
  cw_mem_budget_waiter_free(big);
  assert_null(b.head);
  assert_null(b.tail);
  cw_mem_budget_deinitialize(&b);
}

static void test_several_devices(void** state) {
  (void)state;
  cw_mem_budget_t b;
  uint64_t limits[2] = {100, 50};
  assert_null(cw_mem_budget_initialize(&b, 2, limits));
  cw_mem_budget_charge(&b, 1, 40);
  size_t dev = 99;
  // Fits device 0, not device 1: waits, and names device 1.
  assert_int_equal(decide(&b, 1, 50, 20, &dev), CW_MEM_WAIT);
  assert_int_equal(dev, 1);
  cw_mem_waiter_t* w = enqueue(&b, 1, 50, 20, 1000, NULL);
  assert_int_equal(w->total, 70);
  assert_null(cw_mem_budget_take_ready(&b));
  cw_mem_budget_release(&b, 1, 10);
  assert_ptr_equal(cw_mem_budget_take_ready(&b), w);
  cw_mem_budget_waiter_free(w);
  cw_mem_budget_deinitialize(&b);
}

static void test_timeouts(void** state) {
  (void)state;
  cw_mem_budget_t b;
  init2(&b, 100);
  cw_mem_budget_charge(&b, 0, 100);
  assert_int_equal(cw_mem_budget_next_deadline(&b), INT64_MAX);
  cw_mem_waiter_t* late = enqueue(&b, 1, 10, 0, 500, NULL);
  cw_mem_waiter_t* soon = enqueue(&b, 2, 10, 0, 200, NULL);
  assert_int_equal(cw_mem_budget_next_deadline(&b), 200);
  assert_null(cw_mem_budget_take_expired(&b, 199));
  assert_ptr_equal(cw_mem_budget_take_expired(&b, 200), soon);
  cw_mem_budget_waiter_free(soon);
  assert_int_equal(cw_mem_budget_next_deadline(&b), 500);
  assert_int_equal(b.timeouts, 1);
  // Left queued: freed with the budget.
  (void)late;
  cw_mem_budget_deinitialize(&b);
}

static void test_over_limit_and_unlimited(void** state) {
  (void)state;
  cw_mem_budget_t b;
  init2(&b, 100);
  // Charged after the fact: used may go over the limit; then nothing fits.
  cw_mem_budget_charge(&b, 0, 150);
  assert_int_equal(decide(&b, 1, 1, 0, NULL), CW_MEM_WAIT);
  cw_mem_budget_release(&b, 0, 60);  // 90
  assert_int_equal(decide(&b, 1, 10, 0, NULL), CW_MEM_FITS);
  cw_mem_budget_deinitialize(&b);

  // No limits: everything fits, in use is still counted.
  assert_null(cw_mem_budget_initialize(&b, 2, NULL));
  assert_false(cw_mem_budget_limited(&b));
  cw_mem_budget_charge(&b, 1, UINT64_MAX / 2);
  assert_int_equal(decide(&b, 1, UINT64_MAX / 2, UINT64_MAX / 2, NULL), CW_MEM_FITS);
  cw_mem_budget_charge(&b, 1, UINT64_MAX);  // saturates
  assert_int_equal(cw_mem_budget_used_max(&b), UINT64_MAX);
  cw_mem_budget_deinitialize(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fits_waits_never),
      cmocka_unit_test(test_session_order_and_others_pass),
      cmocka_unit_test(test_large_waiter_passed_by_smaller),
      cmocka_unit_test(test_several_devices),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_over_limit_and_unlimited),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
