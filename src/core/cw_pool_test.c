// Unit tests for the pool of blocking threads: tasks run; a task that blocks
// does not hold back the next one (a new thread takes it); idle threads are
// reused; at max_threads tasks queue in order; release runs what is queued.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "cw_pool.h"

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open;
  int ran;
  int order[16];
} gate_t;

static gate_t g;

static void gate_reset(void) {
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  g.open = false;
  g.ran = 0;
}

// Blocks until the gate opens, then counts.
static void blocker(void* user) {
  (void)user;
  pthread_mutex_lock(&g.mu);
  while (!g.open) pthread_cond_wait(&g.cv, &g.mu);
  g.ran++;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

// Records its place and counts.
static void counter(void* user) {
  pthread_mutex_lock(&g.mu);
  if (g.ran < 16) g.order[g.ran] = (int)(intptr_t)user;
  g.ran++;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

// Waits up to 10 s for `n` tasks to have run.
static bool wait_ran(int n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&g.mu);
  int rc = 0;
  while (g.ran < n && rc == 0) rc = pthread_cond_timedwait(&g.cv, &g.mu, &until);
  bool ok = g.ran >= n;
  pthread_mutex_unlock(&g.mu);
  return ok;
}

static void open_gate(void) {
  pthread_mutex_lock(&g.mu);
  g.open = true;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

static void test_blocked_task_does_not_hold_others(void** state) {
  (void)state;
  gate_reset();
  cw_pool_t* p = NULL;
  assert_null(cw_pool_create("cw-test", 8, &p));
  assert_null(cw_pool_submit(p, blocker, NULL));
  assert_null(cw_pool_submit(p, counter, (void*)1));
  assert_true(wait_ran(1));  // ran while the blocker still waits
  assert_int_equal(cw_pool_threads(p), 2);
  open_gate();
  assert_true(wait_ran(2));
  // Both threads idle now: more tasks reuse them.
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  assert_null(cw_pool_submit(p, counter, (void*)2));
  assert_true(wait_ran(3));
  assert_int_equal(cw_pool_threads(p), 2);
  cw_pool_release(p);
}

static void test_queue_at_max_threads(void** state) {
  (void)state;
  gate_reset();
  cw_pool_t* p = NULL;
  assert_null(cw_pool_create("cw-test-one", 1, &p));
  assert_null(cw_pool_submit(p, blocker, NULL));
  for (intptr_t i = 1; i <= 5; ++i) assert_null(cw_pool_submit(p, counter, (void*)i));
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL);
  pthread_mutex_lock(&g.mu);
  assert_int_equal(g.ran, 0);  // one thread, and it is blocked
  pthread_mutex_unlock(&g.mu);
  assert_int_equal(cw_pool_threads(p), 1);
  open_gate();
  assert_true(wait_ran(6));
  for (int i = 1; i <= 5; ++i) assert_int_equal(g.order[i], i);  // in submission order
  cw_pool_release(p);
}

static void test_release_runs_queued(void** state) {
  (void)state;
  gate_reset();
  cw_pool_t* p = NULL;
  assert_null(cw_pool_create(NULL, 2, &p));
  for (intptr_t i = 0; i < 10; ++i) assert_null(cw_pool_submit(p, counter, (void*)i));
  cw_pool_release(p);  // joins after every task ran
  assert_int_equal(g.ran, 10);
  cw_pool_release(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocked_task_does_not_hold_others),
      cmocka_unit_test(test_queue_at_max_threads),
      cmocka_unit_test(test_release_runs_queued),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
