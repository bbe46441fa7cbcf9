// Unit tests for recycled blocks: a freed block comes back zeroed, no more
// than `max` are kept, and blocks freed on some threads while others
// allocate are each handed to one owner at a time (a smoke test of the
// concurrent paths: what it can see of a block given to two owners is the
// other's stamp; run it under ThreadSanitizer to check the orderings).
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_recycle.h"

typedef struct {
  uint64_t owner;
  uint8_t payload[56];
} block_t;

static void test_reuse_zeroed(void** state) {
  (void)state;
  static cw_recycle_t r = CW_RECYCLE_INIT(sizeof(block_t), 4);
  block_t* a = cw_recycle_alloc(&r);
  assert_non_null(a);
  memset(a, 0xab, sizeof(*a));
  cw_recycle_free(&r, a);
  assert_int_equal(cw_recycle_kept(&r), 1);
  block_t* b = cw_recycle_alloc(&r);
  assert_ptr_equal(a, b);  // the kept block, not a new one
  assert_int_equal(cw_recycle_kept(&r), 0);
  for (size_t i = 0; i < sizeof(*b); ++i) assert_int_equal(((uint8_t*)b)[i], 0);
  cw_recycle_free(&r, b);
  cw_recycle_free(&r, NULL);
  assert_int_equal(cw_recycle_kept(&r), 1);
  while (cw_recycle_kept(&r)) free(cw_recycle_alloc(&r));
}

static void test_keeps_at_most_max(void** state) {
  (void)state;
  static cw_recycle_t r = CW_RECYCLE_INIT(sizeof(block_t), 3);
  block_t* b[8];
  for (int i = 0; i < 8; ++i) assert_non_null(b[i] = cw_recycle_alloc(&r));
  for (int i = 0; i < 8; ++i) cw_recycle_free(&r, b[i]);  // five are freed (ASan: no leak)
  assert_int_equal(cw_recycle_kept(&r), 3);
  for (int i = 0; i < 3; ++i) free(cw_recycle_alloc(&r));
  assert_int_equal(cw_recycle_kept(&r), 0);
}

// Takers allocate, stamp the block with their id, check the stamp is still
// theirs, and hand it through a ring to the freers; two of each race for
// 20,000 blocks. Failures are counted, and asserted on the main thread.
#define RING 64
#define PER_TAKER 10000
static cw_recycle_t shared = CW_RECYCLE_INIT(sizeof(block_t), 16);
static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ring_cv = PTHREAD_COND_INITIALIZER;
static block_t* ring[RING];
static size_t ring_len;
static atomic_int takers_left;
static atomic_int clashes;
static atomic_int failed_allocs;

static void* taker(void* arg) {
  uint64_t me = (uint64_t)(uintptr_t)arg;
  for (int i = 0; i < PER_TAKER; ++i) {
    block_t* b = cw_recycle_alloc(&shared);
    if (!b) {
      atomic_fetch_add(&failed_allocs, 1);
      continue;
    }
    if (b->owner != 0) atomic_fetch_add(&clashes, 1);
    b->owner = me;
    for (int k = 0; k < 8; ++k) b->payload[k] = (uint8_t)me;
    if (b->owner != me || b->payload[7] != (uint8_t)me) atomic_fetch_add(&clashes, 1);
    pthread_mutex_lock(&ring_mu);
    while (ring_len == RING) pthread_cond_wait(&ring_cv, &ring_mu);
    ring[ring_len++] = b;
    pthread_cond_broadcast(&ring_cv);
    pthread_mutex_unlock(&ring_mu);
  }
  atomic_fetch_sub(&takers_left, 1);
  pthread_mutex_lock(&ring_mu);
  pthread_cond_broadcast(&ring_cv);
  pthread_mutex_unlock(&ring_mu);
  return NULL;
}

static void* freer(void* arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&ring_mu);
    while (ring_len == 0 && atomic_load(&takers_left) > 0) pthread_cond_wait(&ring_cv, &ring_mu);
    if (ring_len == 0) {
      pthread_mutex_unlock(&ring_mu);
      return NULL;
    }
    block_t* b = ring[--ring_len];
    pthread_cond_broadcast(&ring_cv);
    pthread_mutex_unlock(&ring_mu);
    cw_recycle_free(&shared, b);
  }
}

static void test_threads_one_owner_at_a_time(void** state) {
  (void)state;
  atomic_store(&takers_left, 2);
  pthread_t t[4];
  assert_int_equal(pthread_create(&t[0], NULL, taker, (void*)(uintptr_t)1), 0);
  assert_int_equal(pthread_create(&t[1], NULL, taker, (void*)(uintptr_t)2), 0);
  assert_int_equal(pthread_create(&t[2], NULL, freer, NULL), 0);
  assert_int_equal(pthread_create(&t[3], NULL, freer, NULL), 0);
  for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&failed_allocs), 0);
  assert_int_equal(atomic_load(&clashes), 0);
  assert_int_equal(ring_len, 0);
  // The bound held under the race: on the list `max`, up to `max` more freed
  // between a take's exchange and its reset of the count, and a free per
  // freeing thread (2) that raced it; on the takers' own list as many again.
  assert_true(cw_recycle_kept(&shared) <= 2 * (2 * 16 + 2));
  while (cw_recycle_kept(&shared)) free(cw_recycle_alloc(&shared));
  // Still recycling after the race (a count wrapped by a free crossing a
  // take would send every block back to free()).
  block_t* x = cw_recycle_alloc(&shared);
  cw_recycle_free(&shared, x);
  assert_int_equal(cw_recycle_kept(&shared), 1);
  assert_ptr_equal(cw_recycle_alloc(&shared), x);
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_zeroed),
      cmocka_unit_test(test_keeps_at_most_max),
      cmocka_unit_test(test_threads_one_owner_at_a_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
