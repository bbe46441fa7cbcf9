// Unit tests for the monotonic clock readings.
#include <errno.h>
#include <pthread.h>
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

// A deadline on a monotonic condition variable: a timed wait with nothing to
// wake it returns ETIMEDOUT at it, not before (and not on another clock).
static void test_deadline_ms_waits_on_this_clock(void** state) {
  struct timespec ts = cw_time_timespec(1500000001);
  assert_int_equal(ts.tv_sec, 1);
  assert_int_equal(ts.tv_nsec, 500000001);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv;
  cw_time_cond_init(&cv);
  int64_t t0 = cw_time_now_ns();
  struct timespec until = cw_time_deadline_ms(20);
  int64_t want = t0 + 20 * 1000000;
  int64_t got = (int64_t)until.tv_sec * 1000000000 + until.tv_nsec;
  assert_true(got >= want && got <= cw_time_now_ns() + 20 * 1000000);
  pthread_mutex_lock(&mu);
  int rc;
  do {
    rc = pthread_cond_timedwait(&cv, &mu, &until);
  } while (rc == 0);  // a spurious wakeup: wait again
  pthread_mutex_unlock(&mu);
  assert_int_equal(rc, ETIMEDOUT);
  assert_true(cw_time_now_ns() >= want);
  pthread_cond_destroy(&cv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_time_monotonic),
      cmocka_unit_test(test_deadline_ms_waits_on_this_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
