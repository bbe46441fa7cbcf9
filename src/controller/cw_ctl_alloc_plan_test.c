// Unit tests of the device allocator (cw_ctl_alloc_plan.c): packing onto the fewest
// islands, exclusivity, sharing, named workers, platform, minimum island
// size, and requests that can never be met.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_ctl_alloc_plan.h"

#define NW 3
#define ND 4

typedef struct {
  uint8_t use[NW][ND];
  cw_alloc_worker_t w[NW];
} cluster_t;

// Three workers of 4 devices: w0, w1 (cpu), w2 (gpu unless all_cpu).
static void cluster_init(cluster_t* c, bool all_cpu) {
  static const char* names[NW] = {"w0", "w1", "w2"};
  memset(c, 0, sizeof(*c));
  for (int i = 0; i < NW; ++i) {
    c->w[i].name = names[i];
    c->w[i].platform = (i == 2 && !all_cpu) ? "gpu" : "cpu";
    c->w[i].alive = true;
    c->w[i].num_devices = ND;
    c->w[i].use = c->use[i];
  }
}

static cw_alloc_request_t req(uint32_t n) {
  cw_alloc_request_t r = {0};
  r.num_devices = n;
  return r;
}

// Plans and marks what it got as used.
static bool plan(cluster_t* c, const cw_alloc_request_t* r, cw_alloc_device_t* out,
                 uint32_t* usable) {
  bool wait = false;
  uint32_t cap = 0;
  cw_status_t st = cw_alloc_plan(c->w, NW, r, out, &wait, usable, &cap);
  assert_null(st);
  if (wait) return false;
  for (uint32_t i = 0; i < r->num_devices; ++i) {
    assert_int_equal(c->use[out[i].worker][out[i].local], r->share ? c->use[out[i].worker][out[i].local] : CW_ALLOC_FREE);
    c->use[out[i].worker][out[i].local] = r->share ? CW_ALLOC_SHARED : CW_ALLOC_EXCLUSIVE;
  }
  return true;
}

static void test_packs_one_island_and_is_exclusive(void** state) {
  cluster_t c;
  cluster_init(&c, true);
  cw_alloc_device_t out[12];
  uint32_t usable = 0;
  cw_alloc_request_t r = req(3);
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(out[i].worker, 0);
    assert_int_equal(out[i].local, i);
  }
  // 4 more: w0 has 1 left; best fit is a whole other island, not a split.
  r = req(4);
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 4; ++i) assert_int_equal(out[i].worker, 1);
  // 2 more: only w2 has 2+ on one island (best fit among w0:1, w2:4).
  r = req(2);
  assert_true(plan(&c, &r, out, &usable));
  assert_int_equal(out[0].worker, 2);
  assert_int_equal(out[1].worker, 2);
  // 4 more: 1 (w0) + 2 (w2) free: must wait, 3 usable.
  r = req(4);
  assert_false(plan(&c, &r, out, &usable));
  assert_int_equal(usable, 3);
  // 3: spans two islands (w0:1 + w2:2), grouped in worker order.
  r = req(3);
  assert_true(plan(&c, &r, out, &usable));
  assert_int_equal(out[0].worker, 0);
  assert_int_equal(out[0].local, 3);
  assert_int_equal(out[1].worker, 2);
  assert_int_equal(out[2].worker, 2);
}

static void test_spans_fewest_islands(void** state) {
  cluster_t c;
  cluster_init(&c, true);
  c.use[0][0] = CW_ALLOC_EXCLUSIVE;  // w0: 3 free, w1: 4, w2: 4
  cw_alloc_device_t out[12];
  uint32_t usable = 0;
  cw_alloc_request_t r = req(8);
  assert_true(plan(&c, &r, out, &usable));
  // Two whole islands (w1, w2), not three.
  for (int i = 0; i < 8; ++i) assert_int_not_equal(out[i].worker, 0);
}

static void test_sharing(void** state) {
  cluster_t c;
  cluster_init(&c, true);
  cw_alloc_device_t out[12];
  uint32_t usable = 0;
  cw_alloc_request_t r = req(4);
  r.share = true;
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 4; ++i) assert_int_equal(out[i].worker, 0);
  // A second sharer packs onto the shared island, leaving free ones free.
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 4; ++i) assert_int_equal(out[i].worker, 0);
  // Exclusive requests never get shared devices.
  r = req(8);
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 8; ++i) assert_int_not_equal(out[i].worker, 0);
  r = req(1);
  assert_false(plan(&c, &r, out, &usable));
  assert_int_equal(usable, 0);
  // Sharers never get exclusive devices: only w0's 4 are usable.
  r = req(5);
  r.share = true;
  assert_false(plan(&c, &r, out, &usable));
  assert_int_equal(usable, 4);
}

static void test_named_workers_platform_and_min_island(void** state) {
  cluster_t c;
  cluster_init(&c, false);
  cw_alloc_device_t out[12];
  uint32_t usable = 0;
  const char* names[] = {"w1"};
  cw_alloc_request_t r = req(2);
  r.workers = names;
  r.num_workers = 1;
  assert_true(plan(&c, &r, out, &usable));
  assert_int_equal(out[0].worker, 1);
  r = req(2);
  r.platform = "GPU";  // case-insensitive
  assert_true(plan(&c, &r, out, &usable));
  assert_int_equal(out[0].worker, 2);
  // Islands of at least 3: w0 (4 free) and w1 (2 free) -> only w0 qualifies.
  r = req(6);
  r.platform = "cpu";
  r.min_island = 3;
  assert_false(plan(&c, &r, out, &usable));
  assert_int_equal(usable, 4);
  r.min_island = 2;
  assert_true(plan(&c, &r, out, &usable));
}

static void test_impossible(void** state) {
  cluster_t c;
  cluster_init(&c, false);
  cw_alloc_device_t out[16];
  bool wait = false;
  uint32_t usable = 0, cap = 0;
  cw_alloc_request_t r = req(9);
  r.platform = "cpu";
  cw_status_t st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_non_null(st);
  assert_int_equal(cw_status_code(st), CW_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(cw_status_message(st), "asks for 9 devices; the matching workers have 8"));
  cw_status_free(st);
  const char* names[] = {"nope"};
  r = req(1);
  r.workers = names;
  r.num_workers = 1;
  st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_non_null(st);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_non_null(strstr(cw_status_message(st), "unknown worker 'nope' (workers: w0, w1, w2)"));
  cw_status_free(st);
  r = req(1);
  r.platform = "tpu";
  st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_non_null(st);
  assert_non_null(strstr(cw_status_message(st), "no worker has platform 'tpu' (platforms: cpu, gpu)"));
  cw_status_free(st);
  r = req(5);
  r.min_island = 5;
  st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_non_null(st);
  assert_non_null(strstr(cw_status_message(st), "largest matching island has 4"));
  cw_status_free(st);
  // A dead (or draining) worker's devices are not given now, but its slot
  // still counts toward what the request can ever get: it waits for the
  // replacement (before, a worker's death failed every queued request that
  // needed its devices, an audit).
  c.w[0].alive = false;
  c.w[1].alive = false;
  r = req(5);
  st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_null(st);
  assert_true(wait);
  assert_int_equal(cap, 3 * ND);
  r = req(1);  // the live worker's free device is given at once
  st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_null(st);
  assert_false(wait);
  assert_int_equal(out[0].worker, 2);
  r = req(3 * ND + 1);  // more than every slot has is still impossible
  st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_non_null(st);
  assert_non_null(strstr(cw_status_message(st), "the matching workers have 12"));
  cw_status_free(st);
}

// w1 and w2 form one island of several workers (--island): one island of 8
// for packing and min_island.
static void test_island_of_several_workers(void** state) {
  cluster_t c;
  cluster_init(&c, true);
  c.w[1].grouped = c.w[2].grouped = true;
  c.w[1].island = c.w[2].island = 1;
  cw_alloc_device_t out[12];
  uint32_t usable = 0;
  cw_alloc_request_t r = req(6);
  r.min_island = 5;  // only the island of w1 and w2 has 5
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 6; ++i) assert_int_equal(out[i].worker, i < 4 ? 1 : 2);
  r = req(3);  // w0 is the best fit now (4 free; the island has 2 left)
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 3; ++i) assert_int_equal(out[i].worker, 0);
  r = req(4);
  r.min_island = 3;  // w0 has 1 left, the island 2: neither qualifies now
  assert_false(plan(&c, &r, out, &usable));
  assert_int_equal(usable, 0);
  r = req(9);
  r.min_island = 9;
  bool wait = false;
  uint32_t cap = 0;
  cw_status_t st = cw_alloc_plan(c.w, NW, &r, out, &wait, &usable, &cap);
  assert_non_null(st);
  assert_non_null(strstr(cw_status_message(st), "largest matching island has 8"));
  cw_status_free(st);
  // Named workers: only w2's part of the island matches.
  const char* names[] = {"w2"};
  r = req(2);
  r.workers = names;
  r.num_workers = 1;
  assert_true(plan(&c, &r, out, &usable));
  for (int i = 0; i < 2; ++i) assert_int_equal(out[i].worker, 2);
}

// Reachable: a request that would fit once every session ended, counting
// only workers that take sessions now; one that needs an away worker's
// devices (dead, draining, held) is not, however free the others are.
static void test_reachable_counts_only_workers_that_are_there(void** state) {
  (void)state;
  cluster_t c;
  cluster_init(&c, true);
  for (int d = 0; d < ND; ++d) c.use[0][d] = CW_ALLOC_EXCLUSIVE;  // a session holds w0
  cw_alloc_request_t r = req(12);
  assert_true(cw_alloc_reachable(c.w, NW, &r));  // all three, once w0's session ends
  c.w[1].alive = false;  // w1 died (or drains)
  assert_false(cw_alloc_reachable(c.w, NW, &r));
  r = req(8);
  assert_true(cw_alloc_reachable(c.w, NW, &r));  // w0 and w2
  const char* only_w1[] = {"w1"};
  r = req(2);
  r.workers = only_w1;
  r.num_workers = 1;
  assert_false(cw_alloc_reachable(c.w, NW, &r));
  r = req(4);
  r.min_island = 4;
  assert_true(cw_alloc_reachable(c.w, NW, &r));
  // What was used is left as it was.
  for (int d = 0; d < ND; ++d) assert_int_equal(c.use[0][d], CW_ALLOC_EXCLUSIVE);
  assert_int_equal(c.use[2][0], CW_ALLOC_FREE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_packs_one_island_and_is_exclusive),
      cmocka_unit_test(test_spans_fewest_islands),
      cmocka_unit_test(test_sharing),
      cmocka_unit_test(test_named_workers_platform_and_min_island),
      cmocka_unit_test(test_impossible),
      cmocka_unit_test(test_island_of_several_workers),
      cmocka_unit_test(test_reachable_counts_only_workers_that_are_there),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
