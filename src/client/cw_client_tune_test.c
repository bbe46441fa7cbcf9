// Unit tests of the reader's parking tuner (cw_client_tune.c): it times
// the intervals between waiters' replies both ways, keeps the faster by median,
// looks again later, and stays on the socket when a probe saw too few replies
// to tell or parking barely wins.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>

#include "cw_client_internal.h"

#define MS (1000 * 1000LL)
#define US (1000LL)

// Reports an interval of `wait_ns` every `every_ns` from *now until `until`;
// returns the tuner's last answer.
static bool feed(cw_client_tune_t* t, int64_t* now, int64_t until, int64_t every_ns,
                 int64_t wait_ns, bool park) {
  for (; *now < until; *now += every_ns) park = cw_client_tune_step(t, *now, wait_ns, park);
  return park;
}

// The same until the tuner's phase changes (the report that changes it is
// the current phase's last).
static bool probe(cw_client_tune_t* t, int64_t* now, int64_t every_ns, int64_t wait_ns,
                  bool park) {
  cw_client_tune_phase_t phase = t->phase;
  while (t->phase == phase) {
    park = cw_client_tune_step(t, *now, wait_ns, park);
    *now += every_ns;
  }
  return park;
}

// Intervals of 40 us with the reader on the socket, 25 us parked: parks, and
// keeps parking through the keep period.
static void test_keeps_the_faster_way(void** state) {
  (void)state;
  cw_client_tune_t t = {0};
  int64_t now = 1 * MS;
  bool park = cw_client_tune_step(&t, now, 30 * US, false);  // the first report starts a look
  assert_false(park);
  assert_int_equal(t.phase, CW_CLIENT_TUNE_READER);
  park = probe(&t, &now, 40 * US, 40 * US, park);
  assert_true(park);  // timing the parked way now
  assert_int_equal(t.phase, CW_CLIENT_TUNE_PARKED);
  park = probe(&t, &now, 25 * US, 25 * US, park);
  assert_true(park);
  assert_int_equal(t.phase, CW_CLIENT_TUNE_KEEP);
  assert_int_equal(t.probes, 1);
  int64_t keep_end = t.phase_end_ns, n0 = t.n[0], n1 = t.n[1];
  park = feed(&t, &now, keep_end - 1, 1 * MS, 90 * US, park);  // no timing while it keeps
  assert_true(park);
  assert_int_equal(t.n[0], n0);
  assert_int_equal(t.n[1], n1);
  // The next look: now the reader's way is the faster.
  now = keep_end;
  park = cw_client_tune_step(&t, now, 30 * US, park);
  assert_false(park);
  assert_int_equal(t.phase, CW_CLIENT_TUNE_READER);
  park = probe(&t, &now, 20 * US, 20 * US, park);
  park = probe(&t, &now, 35 * US, 35 * US, park);
  assert_false(park);
  assert_int_equal(t.probes, 2);
}

// A probe with fewer than 16 replies cannot tell: the reader stays on the
// socket. Medians decide: a few very long intervals while parked do not.
static void test_too_few_waits_and_long_waits(void** state) {
  (void)state;
  cw_client_tune_t t = {0};
  int64_t now = 5 * MS;
  bool park = cw_client_tune_step(&t, now, 10 * US, false);
  park = probe(&t, &now, 10 * MS, 50 * US, park);  // 6 waits
  park = probe(&t, &now, 100 * US, 10 * US, park);
  assert_int_equal(t.phase, CW_CLIENT_TUNE_KEEP);
  assert_false(park);

  cw_client_tune_t u = {0};
  now = 5 * MS;
  park = cw_client_tune_step(&u, now, 10 * US, false);
  park = probe(&u, &now, 100 * US, 30 * US, park);
  // Parked: 20 us waits, and a tenth of them a second long (a stalled peer).
  for (int i = 0; i < 50; ++i) park = cw_client_tune_step(&u, now, 1000 * MS, park);
  park = probe(&u, &now, 100 * US, 20 * US, park);
  assert_true(park);
  assert_int_equal(u.hist[1][CW_CLIENT_TUNE_BUCKETS - 1], 50);
}

// Parking only a little faster (within a twentieth) keeps the reader.
static void test_parking_must_win_clearly(void** state) {
  (void)state;
  cw_client_tune_t t = {0};
  int64_t now = 5 * MS;
  bool park = cw_client_tune_step(&t, now, 10 * US, false);
  park = probe(&t, &now, 40 * US, 40 * US, park);
  park = probe(&t, &now, 39 * US, 39 * US, park);
  assert_int_equal(t.phase, CW_CLIENT_TUNE_KEEP);
  assert_false(park);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keeps_the_faster_way),
      cmocka_unit_test(test_too_few_waits_and_long_waits),
      cmocka_unit_test(test_parking_must_win_clearly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
