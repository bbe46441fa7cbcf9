// Unit tests for the worker's polling windows: requests far apart never open
// one; one soon after another does and later ones extend it; a run of
// windows with no request shuts them for CW_SPIN_RETRY_NS, after which one
// opens again; a window that caught a request clears the misses; 0 is off.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cw_worker_spin.h"

#define US 1000LL
#define WINDOW (50 * US)

// A window opened at `t` that ends with no request: polls until it closes.
static int64_t miss_window(cw_spin_t* s, int64_t t) {
  assert_true(cw_spin_poll(s, t + 1));
  assert_false(cw_spin_poll(s, t + WINDOW));
  return t + WINDOW;
}

static void test_far_apart_never_polls(void** state) {
  (void)state;
  cw_spin_t s;
  cw_spin_initialize(&s, WINDOW);
  int64_t t = 1000 * 1000 * 1000LL;
  for (int i = 0; i < 10; ++i, t += 2 * CW_SPIN_RECENT_NS) assert_false(cw_spin_request(&s, t));
  assert_false(cw_spin_poll(&s, t));
}

static void test_close_requests_poll_and_extend(void** state) {
  (void)state;
  cw_spin_t s;
  cw_spin_initialize(&s, WINDOW);
  int64_t t = 1000 * 1000 * 1000LL;
  assert_false(cw_spin_request(&s, t));          // the first: nothing before it
  assert_true(cw_spin_request(&s, t + 20 * US));  // 20 us later: a window opens
  assert_true(cw_spin_poll(&s, t + 60 * US));
  assert_false(cw_spin_request(&s, t + 60 * US));  // within it: extends, no new window
  assert_true(cw_spin_poll(&s, t + 100 * US));    // past the first end, inside the extension
  assert_false(cw_spin_poll(&s, t + 110 * US));   // ended
  assert_int_equal(s.misses, 0);                  // it caught a request
}

static void test_misses_shut_windows_then_retry(void** state) {
  (void)state;
  cw_spin_t s;
  cw_spin_initialize(&s, WINDOW);
  int64_t t = 1000 * 1000 * 1000LL;
  assert_false(cw_spin_request(&s, t));
  for (int i = 0; i < CW_SPIN_MAX_MISSES; ++i) {
    t += 100 * US;
    assert_true(cw_spin_request(&s, t));
    t = miss_window(&s, t);
  }
  assert_int_equal(s.misses, CW_SPIN_MAX_MISSES);
  t += 100 * US;
  assert_false(cw_spin_request(&s, t));  // shut
  t += CW_SPIN_RETRY_NS;
  assert_false(cw_spin_request(&s, t));  // far from the last request: still none
  t += 100 * US;
  assert_true(cw_spin_request(&s, t));  // after the retry time, one opens
  assert_false(cw_spin_request(&s, t + 10 * US));  // and catches one
  assert_true(cw_spin_poll(&s, t + 20 * US));
  assert_false(cw_spin_poll(&s, t + 10 * US + WINDOW));
  assert_int_equal(s.misses, 0);
}

static void test_zero_window_is_off(void** state) {
  (void)state;
  cw_spin_t s;
  cw_spin_initialize(&s, 0);
  assert_false(cw_spin_request(&s, 1000));
  assert_false(cw_spin_request(&s, 2000));
  assert_false(cw_spin_poll(&s, 2001));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_far_apart_never_polls),
      cmocka_unit_test(test_close_requests_poll_and_extend),
      cmocka_unit_test(test_misses_shut_windows_then_retry),
      cmocka_unit_test(test_zero_window_is_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
