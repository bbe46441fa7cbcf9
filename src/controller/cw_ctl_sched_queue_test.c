// Unit tests of the island scheduler's policy (cw_sched_island_*): weights
// share a backlogged island, FIFO within a session, stamps without gaps, the
// cap on stamped launches out, a blocked head holding only its session,
// requests that are not launches going at once, no credit for idle sessions,
// a session that leaves, and a restart.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_ctl_sched_queue.h"

typedef struct item_s {
  cw_sched_item_t s;  // first: the policy's item is the test's item
  int seq;            // push order within its session
  bool launch;        // else READY when it may go
  bool blocked, failed;
} item_t;

#define POOL 8192
static item_t pool[POOL];
static int used;
static int judged;  // judge calls

static cw_sched_verdict_t judge(void* user, cw_sched_item_t* head) {
  (void)user;
  judged++;
  const item_t* it = (const item_t*)head;
  if (it->failed) return CW_SCHED_FAILED;
  if (it->blocked) return CW_SCHED_BLOCKED;
  return it->launch ? CW_SCHED_LAUNCH : CW_SCHED_READY;
}

static int next_seq[1100];

static item_t* push(cw_sched_island_t* isl, uint64_t session, uint32_t weight, bool launch) {
  assert_true(used < POOL && session < 1100);
  item_t* it = &pool[used++];
  memset(it, 0, sizeof(*it));
  it->s.session_id = session;
  it->s.weight = weight;
  it->s.launch = launch;
  it->seq = next_seq[session]++;
  it->launch = launch;
  assert_true(cw_sched_island_push(isl, &it->s));
  return it;
}

static item_t* pick(cw_sched_island_t* isl, cw_sched_verdict_t* out_verdict) {
  cw_sched_verdict_t v = CW_SCHED_BLOCKED;
  item_t* it = (item_t*)cw_sched_island_pick(isl, judge, NULL, &v);
  if (out_verdict) *out_verdict = v;
  return it;
}

// Picks a launch and stamps it as the controller does when it goes out.
static item_t* pick_and_stamp(cw_sched_island_t* isl) {
  cw_sched_verdict_t v;
  item_t* it = pick(isl, &v);
  if (it) {
    assert_int_equal(v, CW_SCHED_LAUNCH);
    cw_sched_island_stamped(isl, 1);
  }
  return it;
}

static void drain(cw_sched_island_t* isl) {
  while (cw_sched_island_take_any(isl)) {
  }
  assert_null(isl->queues);  // nothing left, nothing held
  cw_sched_island_deinitialize(isl);
}

static int setup(void** state) {
  (void)state;
  used = 0;
  judged = 0;
  memset(next_seq, 0, sizeof(next_seq));
  return 0;
}

// Weights 1:3 while both are backlogged: stamps in that proportion, and
// never a long run for either.
static void test_weights_share_a_backlogged_island(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  for (int i = 0; i < 400; ++i) {
    push(&isl, 1, 1, true);
    push(&isl, 2, 3, true);
  }
  int count[3] = {0}, run = 0, longest_a = 0, longest_b = 0;
  uint64_t prev = 0;
  for (int i = 0; i < 400; ++i) {
    item_t* it = pick_and_stamp(&isl);
    assert_non_null(it);
    cw_sched_island_answered(&isl);
    count[it->s.session_id]++;
    run = it->s.session_id == prev ? run + 1 : 1;
    prev = it->s.session_id;
    if (prev == 1 && run > longest_a) longest_a = run;
    if (prev == 2 && run > longest_b) longest_b = run;
  }
  // 100:300, give or take the stride's rounding.
  assert_true(count[1] >= 99 && count[1] <= 101);
  assert_int_equal(count[1] + count[2], 400);
  assert_int_equal(longest_a, 1);
  assert_true(longest_b >= 3 && longest_b <= 4);
  drain(&isl);
}

static void test_fifo_within_a_session(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  const uint32_t weights[3] = {1, 2, 5};
  for (int i = 0; i < 60; ++i) {
    for (int s = 0; s < 3; ++s) push(&isl, (uint64_t)s + 1, weights[s], (i % 7) != 3);
  }
  int want[4] = {0};
  for (int i = 0; i < 180; ++i) {
    cw_sched_verdict_t v;
    item_t* it = pick(&isl, &v);
    assert_non_null(it);
    assert_int_equal(v, it->launch ? CW_SCHED_LAUNCH : CW_SCHED_READY);
    assert_int_equal(it->seq, want[it->s.session_id]++);
  }
  assert_null(pick(&isl, NULL));
  assert_null(isl.queues);
  cw_sched_island_deinitialize(&isl);
}

// Stamps count 1, 2, 3... over every session, and a launch that did not go
// out (the caller never calls stamped) leaves no gap.
static void test_stamps_increase_without_gaps(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 8);
  for (int i = 0; i < 50; ++i) {
    push(&isl, 1, 1, true);
    push(&isl, 2, 2, true);
    push(&isl, 3, 1, true);
  }
  uint64_t last = 0;
  int refused = 0;
  for (int i = 0; i < 150; ++i) {
    cw_sched_verdict_t v;
    item_t* it = pick(&isl, &v);
    assert_non_null(it);
    assert_int_equal(v, CW_SCHED_LAUNCH);
    uint64_t stamp = cw_sched_island_next_stamp(&isl);
    assert_int_equal(cw_sched_island_next_stamp(&isl), stamp);  // asking takes nothing
    if (i % 5 == 2) {
      refused++;  // answered before it went out: its stamp stays free
      continue;
    }
    cw_sched_island_stamped(&isl, 1);
    assert_int_equal(stamp, last + 1);
    last = stamp;
    cw_sched_island_answered(&isl);
  }
  assert_int_equal(last, 150 - refused);
  assert_int_equal(isl.last_stamp, last);
  drain(&isl);
}

// At most max_outstanding stamped launches out; an answer makes room for
// one. Requests that are not launches are not held by the cap.
static void test_outstanding_cap(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 4);
  for (int i = 0; i < 10; ++i) push(&isl, 1, 1, true);
  for (int i = 0; i < 4; ++i) assert_non_null(pick_and_stamp(&isl));
  assert_int_equal(isl.outstanding, 4);
  assert_null(pick(&isl, NULL));
  item_t* info = push(&isl, 2, 1, false);
  cw_sched_verdict_t v;
  assert_ptr_equal(pick(&isl, &v), info);
  assert_int_equal(v, CW_SCHED_READY);
  assert_null(pick(&isl, NULL));
  cw_sched_island_answered(&isl);
  item_t* it = pick_and_stamp(&isl);
  assert_non_null(it);
  assert_int_equal(it->seq, 4);
  assert_null(pick(&isl, NULL));
  // A launch going out to an island's several parts counts as they say.
  for (int i = 0; i < 4; ++i) cw_sched_island_answered(&isl);
  assert_int_equal(isl.outstanding, 0);
  assert_non_null(pick(&isl, NULL));
  cw_sched_island_stamped(&isl, 4);
  assert_null(pick(&isl, NULL));
  cw_sched_island_answered(&isl);
  cw_sched_island_answered(&isl);
  cw_sched_island_answered(&isl);
  cw_sched_island_answered(&isl);
  cw_sched_island_answered(&isl);  // one too many: stays at 0
  assert_int_equal(isl.outstanding, 0);
  drain(&isl);
}

// A head that waits (its executable loads) holds its own session only.
static void test_blocked_head_blocks_only_its_session(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 100);
  item_t* a0 = push(&isl, 1, 1, true);
  push(&isl, 1, 1, true);
  push(&isl, 1, 1, false);
  push(&isl, 2, 1, true);
  push(&isl, 2, 1, true);
  a0->blocked = true;
  item_t* it = pick_and_stamp(&isl);
  assert_int_equal(it->s.session_id, 2);
  it = pick_and_stamp(&isl);
  assert_int_equal(it->s.session_id, 2);
  assert_null(pick(&isl, NULL));  // a's later items wait behind its head
  a0->blocked = false;
  for (int i = 0; i < 3; ++i) {
    it = pick(&isl, NULL);
    assert_non_null(it);
    assert_int_equal(it->s.session_id, 1);
    assert_int_equal(it->seq, i);
  }
  assert_null(isl.queues);
  cw_sched_island_deinitialize(&isl);
}

// A head that is not a launch goes at once, judged alone, whatever the
// passes; a launch head judged FAILED is taken off when it comes to the
// front, and moves nobody's pass; each head is judged at most once a pick.
static void test_failed_and_ready_heads_go_first(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 100);
  push(&isl, 1, 1, true);
  push(&isl, 2, 1, true);
  item_t* info = push(&isl, 3, 1, false);
  item_t* bad = push(&isl, 4, 1, true);
  bad->failed = true;
  cw_sched_verdict_t v;
  judged = 0;
  assert_ptr_equal(pick(&isl, &v), info);
  assert_int_equal(v, CW_SCHED_READY);
  assert_int_equal(judged, 1);
  assert_int_equal(isl.vtime, 0);
  judged = 0;
  item_t* it = pick(&isl, &v);
  assert_int_equal(v, CW_SCHED_LAUNCH);
  assert_int_equal(it->s.session_id, 1);  // a tie goes to the first to arrive
  assert_int_equal(judged, 1);
  it = pick(&isl, &v);
  assert_int_equal(it->s.session_id, 2);
  judged = 0;
  assert_ptr_equal(pick(&isl, &v), bad);
  assert_int_equal(v, CW_SCHED_FAILED);
  assert_int_equal(judged, 1);
  assert_int_equal(isl.vtime, 0);
  assert_int_equal(isl.last_stamp, 0);
  assert_null(pick(&isl, &v));
  assert_null(isl.queues);
  cw_sched_island_deinitialize(&isl);
}

// With many sessions backlogged a pick judges the head at the front only
// (and the last session's while a run may go on), not every session's, and
// a full window judges none: judging every head at each pick cost the
// controller 125 us a launch with 1,000 sessions on one island. The order is
// stride scheduling's as before: equal passes in order of arrival.
static void test_a_pick_judges_few_heads(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 64);
  for (int k = 0; k < 3; ++k) {
    for (uint64_t sid = 1; sid <= 1000; ++sid) push(&isl, sid, 1, true);
  }
  int got[1001] = {0};
  int picked = 0;
  while (picked < 3000) {
    judged = 0;
    item_t* it = pick_and_stamp(&isl);
    if (!it) {
      assert_int_equal(judged, 0);  // the window is full: nothing judged
      assert_int_equal(isl.outstanding, 64);
      for (int i = 0; i < 64; ++i) cw_sched_island_answered(&isl);
      continue;
    }
    assert_int_equal(judged, 1);
    assert_int_equal(it->seq, got[it->s.session_id]++);
    // Round after round, each in the sessions' order of arrival.
    assert_int_equal(it->s.session_id, (uint64_t)(picked % 1000) + 1);
    picked++;
  }
  for (int sid = 1; sid <= 1000; ++sid) assert_int_equal(got[sid], 3);
  assert_null(isl.queues);
  // With runs, a pick judges the last session's head too: two at most.
  for (int k = 0; k < 2; ++k) {
    for (uint64_t sid = 1; sid <= 1000; ++sid) push(&isl, sid, 1, true);
  }
  isl.max_run = 4;
  for (int i = 0; i < 2000; ++i) {
    judged = 0;
    item_t* it = pick_and_stamp(&isl);
    assert_non_null(it);
    cw_sched_island_answered(&isl);
    assert_true(judged >= 1 && judged <= 2);
  }
  assert_null(isl.queues);
  cw_sched_island_deinitialize(&isl);
}

// A weight above CW_SCHED_MAX_WEIGHT counts as that: its session's pass
// still grows. Past CW_SCHED_STRIDE its stride was 0, and that session had
// the island to itself for as long as it had launches.
static void test_huge_weight_counts_as_the_largest(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  for (int i = 0; i < 50; ++i) {
    push(&isl, 1, 1u << 30, true);
    push(&isl, 2, CW_SCHED_MAX_WEIGHT, true);
  }
  int count[3] = {0};
  for (int i = 0; i < 40; ++i) {
    item_t* it = pick_and_stamp(&isl);
    cw_sched_island_answered(&isl);
    count[it->s.session_id]++;
  }
  assert_int_equal(count[1], 20);
  assert_int_equal(count[2], 20);
  drain(&isl);
}

// A session that had nothing queued rejoins at the island's virtual time:
// it does not get the island to itself to catch up.
static void test_no_credit_for_idle_sessions(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  for (int i = 0; i < 300; ++i) push(&isl, 1, 1, true);
  for (int i = 0; i < 100; ++i) {
    assert_int_equal(pick_and_stamp(&isl)->s.session_id, 1);
    cw_sched_island_answered(&isl);
  }
  for (int i = 0; i < 100; ++i) push(&isl, 2, 1, true);
  int b = 0;
  for (int i = 0; i < 20; ++i) {
    b += pick_and_stamp(&isl)->s.session_id == 2;
    cw_sched_island_answered(&isl);
  }
  assert_true(b >= 9 && b <= 11);
  drain(&isl);
}

static void count_items(void* user, const cw_sched_item_t* item) {
  int* counts = user;
  counts[item->session_id]++;
}

// A session that leaves (its requests failed, its queue emptied) holds no
// place; when it comes back it starts at the island's virtual time.
static void test_a_session_that_leaves(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  item_t* a[10];
  for (int i = 0; i < 10; ++i) {
    a[i] = push(&isl, 1, 1, true);
    push(&isl, 2, 1, true);
  }
  for (int i = 0; i < 4; ++i) assert_non_null(pick_and_stamp(&isl));
  for (int i = 0; i < 10; ++i) a[i]->failed = true;  // its session closed
  int failed = 0;
  cw_sched_verdict_t v;
  item_t* it;
  while ((it = pick(&isl, &v)) != NULL && v == CW_SCHED_FAILED) {
    assert_int_equal(it->s.session_id, 1);
    failed++;
  }
  assert_int_equal(failed, 8);
  assert_int_equal(it->s.session_id, 2);
  int counts[3] = {0};
  cw_sched_island_visit(&isl, count_items, counts);
  assert_int_equal(counts[1], 0);
  assert_int_equal(counts[2], 7);
  // Back with a backlog: shares from now on, no catching up.
  for (int i = 0; i < 6; ++i) push(&isl, 1, 1, true);
  int got_a = 0;
  for (int i = 0; i < 6; ++i) got_a += pick_and_stamp(&isl)->s.session_id == 1;
  assert_int_equal(got_a, 3);
  drain(&isl);
}

static void record_order(void* user, const cw_sched_item_t* item) {
  int** out = user;
  *(*out)++ = (int)item->session_id * 100 + ((const item_t*)item)->seq;
}

static void test_visit_in_order(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 10);
  push(&isl, 3, 1, true);
  push(&isl, 1, 1, true);
  push(&isl, 3, 1, false);
  push(&isl, 1, 1, true);
  int got[4], *p = got;
  cw_sched_island_visit(&isl, record_order, &p);
  assert_int_equal(p - got, 4);
  assert_int_equal(got[0], 300);
  assert_int_equal(got[1], 301);
  assert_int_equal(got[2], 100);
  assert_int_equal(got[3], 101);
  drain(&isl);
}

// A restart (the island's workers replaced): stamps from 1, nothing out,
// no runs (the new workers' pace is unknown), the queues as they were.
static void test_restart(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 2);
  isl.max_run = 8;
  for (int i = 0; i < 5; ++i) push(&isl, 1, 1, true);
  assert_non_null(pick_and_stamp(&isl));
  assert_non_null(pick_and_stamp(&isl));
  assert_null(pick(&isl, NULL));
  assert_int_equal(cw_sched_island_next_stamp(&isl), 3);
  cw_sched_island_restart(&isl);
  assert_int_equal(cw_sched_island_next_stamp(&isl), 1);
  assert_int_equal(isl.outstanding, 0);
  assert_int_equal(isl.max_run, 1);
  item_t* it = pick_and_stamp(&isl);
  assert_non_null(it);
  assert_int_equal(it->seq, 2);
  assert_int_equal(isl.last_stamp, 1);
  drain(&isl);
}

// Picks n launches (answering each) and counts them per session, with the
// longest run of each of sessions 1 and 2.
static void pick_n(cw_sched_island_t* isl, int n, int count[3], int longest[3]) {
  uint64_t prev = 0;
  int run = 0;
  for (int i = 0; i < n; ++i) {
    item_t* it = pick_and_stamp(isl);
    assert_non_null(it);
    cw_sched_island_answered(isl);
    uint64_t sid = it->s.session_id;
    count[sid]++;
    run = sid == prev ? run + 1 : 1;
    prev = sid;
    if (run > longest[sid]) longest[sid] = run;
  }
}

// Runs of up to max_run launches: the same shares as one at a time, and no
// run longer than max_run.
static void test_runs_keep_the_shares(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  isl.max_run = 8;
  for (int i = 0; i < 400; ++i) {
    push(&isl, 1, 1, true);
    push(&isl, 2, 1, true);
  }
  int count[3] = {0}, longest[3] = {0};
  pick_n(&isl, 400, count, longest);
  assert_true(count[1] >= 192 && count[1] <= 208);  // 200:200 within a run
  assert_int_equal(longest[1], 8);
  assert_int_equal(longest[2], 8);
  drain(&isl);

  // Weights 1:3 keep their 100:300 within a run's worth. A run leads by
  // less than 8 of the heavy session's strides (the light one runs 3), and
  // the heavy one then has the smallest pass until it caught up: at most
  // 2 runs' worth in a row.
  setup(NULL);
  cw_sched_island_initialize(&isl, 1000);
  isl.max_run = 8;
  for (int i = 0; i < 400; ++i) {
    push(&isl, 1, 1, true);
    push(&isl, 2, 3, true);
  }
  memset(count, 0, sizeof(count));
  memset(longest, 0, sizeof(longest));
  pick_n(&isl, 400, count, longest);
  assert_true(count[1] >= 92 && count[1] <= 108);
  assert_true(longest[1] <= 8);
  assert_true(longest[2] <= 16);
  drain(&isl);
}

// Weights 1:32 with runs of 32: the light session's run is cut to what the
// heavy one makes up in a run's worth of launches, so the heavy one goes
// 32 at a time as with no runs. A lead of 32 whole strides had it make up
// 1,024 launches while the light one waited (1,000:1: 32,000).
static void test_runs_lead_by_the_heaviest_stride(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  isl.max_run = 32;
  for (int i = 0; i < 100; ++i) push(&isl, 1, 1, true);
  for (int i = 0; i < 3200; ++i) push(&isl, 2, 32, true);
  int count[3] = {0}, longest[3] = {0};
  pick_n(&isl, 1650, count, longest);
  assert_true(longest[2] <= 64);
  assert_true(longest[1] <= 2);
  assert_true(count[1] >= 48 && count[1] <= 52);  // 1:32 of 1,650
  drain(&isl);
}

// A run ends when its session's head cannot go, and the next session's run
// starts; the run length set later applies from the next pick.
static void test_run_ends_at_a_blocked_head(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1000);
  isl.max_run = 4;
  item_t* a[4];
  for (int i = 0; i < 4; ++i) {
    a[i] = push(&isl, 1, 1, true);
    push(&isl, 2, 1, true);
  }
  a[2]->blocked = true;
  int seq[8], n = 0;
  item_t* it;
  while (n < 8 && (it = pick_and_stamp(&isl)) != NULL) seq[n++] = (int)it->s.session_id;
  // a0 a1 (a2 waits), then b's four, then nothing until a2 may go.
  assert_int_equal(n, 6);
  assert_int_equal(seq[0], 1);
  assert_int_equal(seq[1], 1);
  for (int i = 2; i < 6; ++i) assert_int_equal(seq[i], 2);
  a[2]->blocked = false;
  isl.max_run = 1;
  assert_int_equal(pick_and_stamp(&isl)->s.session_id, 1);
  assert_int_equal(pick_and_stamp(&isl)->s.session_id, 1);
  assert_null(pick(&isl, NULL));
  assert_null(isl.queues);
  cw_sched_island_deinitialize(&isl);
}

// Run lengths: what fits in CW_SCHED_RUN_NS, 1 to CW_SCHED_RUN_MAX.
static void test_run_length(void** state) {
  assert_int_equal(cw_sched_run_for(0), CW_SCHED_RUN_MAX);
  assert_int_equal(cw_sched_run_for(1000), CW_SCHED_RUN_MAX);  // 1 us launches
  assert_int_equal(cw_sched_run_for(CW_SCHED_RUN_NS / 10), 10);
  assert_int_equal(cw_sched_run_for(CW_SCHED_RUN_NS), 1);
  assert_int_equal(cw_sched_run_for(100 * (int64_t)CW_SCHED_RUN_NS), 1);
}

// A launch head that waited aside (blocked) and is ready again goes back in
// line and is not judged a second time in that pick when it is first there
// (the header's promise: each head at most once a pick).
static void test_a_head_back_from_blocked_is_judged_once(void** state) {
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 100);
  item_t* a0 = push(&isl, 1, 1, true);
  push(&isl, 2, 1, true);
  push(&isl, 2, 1, true);
  a0->blocked = true;
  judged = 0;
  assert_int_equal(pick_and_stamp(&isl)->s.session_id, 2);  // a0 judged blocked, set aside
  assert_int_equal(judged, 2);
  a0->blocked = false;
  judged = 0;
  assert_ptr_equal(pick_and_stamp(&isl), a0);  // its pass is the smaller
  assert_int_equal(judged, 1);
  drain(&isl);
}

// --- A randomized comparison with a model ---------------------------------------------
//
// 200 sessions with random weights (0, 1..1,000, and larger), random
// launches and other requests, heads that block, fail and come back, random
// answers, windows and runs. A model keeps each session's FIFO and its pass
// (stride scheduling as documented) and checks every pick against it: the
// item is its session's head, its verdict the judge's, a launch only under
// the cap and the smallest pass among the launch heads not blocked (or the
// last session's while its run goes on), nothing but a blocked head left
// when it picks nothing (launch heads aside with the window full), and
// (strict_judging) each head judged at most once a pick. Items are freed
// once taken, so ASan sees any later touch.

typedef struct sitem_s {
  cw_sched_item_t s;  // first
  bool launch, blocked, failed;
  uint64_t judged_in;  // the pick that judged it last
} sitem_t;

typedef struct model_s {
  sitem_t** items;  // FIFO
  size_t head, len, cap;
  uint64_t pass, arrival;
  bool queued;
} model_t;

#define S_SESSIONS 200

static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static uint32_t rnd_below(uint32_t n) { return (uint32_t)(rnd() % n); }

static model_t models[S_SESSIONS + 1];
static uint64_t model_vtime, model_arrivals, pick_serial, double_judged;

static cw_sched_verdict_t verdict_of(const sitem_t* it) {
  if (it->failed) return CW_SCHED_FAILED;
  if (it->blocked) return CW_SCHED_BLOCKED;
  return it->launch ? CW_SCHED_LAUNCH : CW_SCHED_READY;
}

static cw_sched_verdict_t stress_judge(void* user, cw_sched_item_t* head) {
  (void)user;
  sitem_t* it = (sitem_t*)head;
  if (it->judged_in == pick_serial) double_judged++;
  it->judged_in = pick_serial;
  return verdict_of(it);
}

static uint32_t model_weight(const sitem_t* it) {
  uint32_t w = it->s.weight;
  return w == 0 ? 1 : w > CW_SCHED_MAX_WEIGHT ? CW_SCHED_MAX_WEIGHT : w;
}

static sitem_t* model_head(uint64_t sid) {
  model_t* m = &models[sid];
  return m->len ? m->items[m->head] : NULL;
}

static void stress_push(cw_sched_island_t* isl, uint64_t sid, uint32_t weight) {
  model_t* m = &models[sid];
  sitem_t* it = calloc(1, sizeof(*it));
  assert_non_null(it);
  it->s.session_id = sid;
  it->s.weight = weight;
  it->launch = it->s.launch = rnd_below(10) < 8;
  it->blocked = rnd_below(20) == 0;
  it->failed = rnd_below(50) == 0;
  assert_true(cw_sched_island_push(isl, &it->s));
  if (m->head + m->len == m->cap) {
    if (m->head) {
      memmove(m->items, m->items + m->head, m->len * sizeof(*m->items));
      m->head = 0;
    }
    if (m->len == m->cap) {
      m->cap = m->cap ? 2 * m->cap : 8;
      m->items = realloc(m->items, m->cap * sizeof(*m->items));
      assert_non_null(m->items);
    }
  }
  m->items[m->head + m->len++] = it;
  if (!m->queued) {  // joins at the island's virtual time
    m->queued = true;
    m->pass = model_vtime;
    m->arrival = model_arrivals++;
  }
}

static bool key_before(const model_t* a, const model_t* b) {
  return a->pass < b->pass || (a->pass == b->pass && a->arrival < b->arrival);
}

// Checks one pick's answer against the model, then takes it off there.
static void stress_check(cw_sched_island_t* isl, sitem_t* got, cw_sched_verdict_t v,
                         bool room, uint64_t last_sid, uint32_t run_before) {
  if (!got) {
    for (uint64_t sid = 1; sid <= S_SESSIONS; ++sid) {
      sitem_t* h = model_head(sid);
      if (!h) continue;
      cw_sched_verdict_t hv = verdict_of(h);
      if (!h->launch || room) {
        if (hv != CW_SCHED_BLOCKED) {
          fail_msg("pick %llu: nothing picked, but session %llu's head (%s) would go (%d)",
                   (unsigned long long)pick_serial, (unsigned long long)sid,
                   h->launch ? "launch" : "other", (int)hv);
        }
      }
    }
    return;
  }
  uint64_t sid = got->s.session_id;
  assert_true(sid >= 1 && sid <= S_SESSIONS);
  model_t* m = &models[sid];
  if (model_head(sid) != got) fail_msg("pick %llu: not session %llu's head",
                                       (unsigned long long)pick_serial, (unsigned long long)sid);
  assert_int_equal(v, verdict_of(got));
  if (v == CW_SCHED_LAUNCH) {
    assert_true(room);
    // Nothing that is not a launch could go.
    for (uint64_t o = 1; o <= S_SESSIONS; ++o) {
      sitem_t* h = model_head(o);
      if (h && !h->launch && verdict_of(h) != CW_SCHED_BLOCKED) {
        fail_msg("pick %llu: a launch went while session %llu's other request could",
                 (unsigned long long)pick_serial, (unsigned long long)o);
      }
    }
    // The smallest key among launch heads not blocked.
    model_t* best = NULL;
    uint64_t best_sid = 0;
    for (uint64_t o = 1; o <= S_SESSIONS; ++o) {
      sitem_t* h = model_head(o);
      if (!h || !h->launch || verdict_of(h) == CW_SCHED_BLOCKED) continue;
      if (!best || key_before(&models[o], best)) {
        best = &models[o];
        best_sid = o;
      }
    }
    assert_non_null(best);
    if (best_sid != sid) {
      // Only the last session's run, leading by less than max_run strides.
      bool run_ok = sid == last_sid && run_before < isl->max_run &&
                    m->pass < best->pass + (uint64_t)isl->max_run * CW_SCHED_STRIDE;
      if (!run_ok) {
        fail_msg("pick %llu: launch of session %llu (pass %llu) before session %llu (pass %llu,"
                 " %s)", (unsigned long long)pick_serial, (unsigned long long)sid,
                 (unsigned long long)m->pass, (unsigned long long)best_sid,
                 (unsigned long long)best->pass,
                 verdict_of(model_head(best_sid)) == CW_SCHED_FAILED ? "failed" : "ready");
      }
    }
    model_vtime = m->pass;
    m->pass += CW_SCHED_STRIDE / model_weight(got);
    assert_int_equal(isl->vtime, model_vtime);
  }
  m->head++;
  if (--m->len == 0) {
    m->head = 0;
    m->queued = false;
  }
}

// The heaviest weight the policy keeps is that of its counts (1 when none).
static void check_heaviest(const cw_sched_island_t* isl) {
  uint32_t want = 1;
  for (uint32_t w = CW_SCHED_MAX_WEIGHT; w > 1 && isl->weight_counts; --w) {
    if (isl->weight_counts[w]) {
      want = w;
      break;
    }
  }
  assert_int_equal(isl->heaviest, want);
}

static void stress_round(uint64_t seed, int steps, bool strict_judging) {
  rng_state = seed;
  memset(models, 0, sizeof(models));
  model_vtime = model_arrivals = pick_serial = double_judged = 0;
  cw_sched_island_t isl;
  cw_sched_island_initialize(&isl, 1 + rnd_below(16));
  uint32_t weights[S_SESSIONS + 1];
  for (int i = 1; i <= S_SESSIONS; ++i) {
    uint32_t r = rnd_below(100);
    weights[i] = r < 5 ? 0 : r < 10 ? (uint32_t)(2000 + rnd_below(1u << 20)) : 1 + rnd_below(1000);
  }
  uint64_t last_sid = 0;
  uint32_t run = 0;
  size_t taken = 0, pushed = 0;
  for (int step = 0; step < steps; ++step) {
    uint32_t op = rnd_below(100);
    if (op < 35) {  // pushes, a burst at times
      int n = rnd_below(10) == 0 ? 1 + (int)rnd_below(50) : 1;
      for (int i = 0; i < n; ++i) {
        uint64_t sid = 1 + rnd_below(S_SESSIONS);
        stress_push(&isl, sid, weights[sid]);
        pushed++;
      }
    } else if (op < 45) {  // heads block, unblock, fail
      for (int i = 0; i < 8; ++i) {
        uint64_t sid = 1 + rnd_below(S_SESSIONS);
        model_t* m = &models[sid];
        if (!m->len) continue;
        sitem_t* it = m->items[m->head + rnd_below((uint32_t)m->len)];
        uint32_t k = rnd_below(10);
        if (k < 5) it->blocked = !it->blocked;
        else if (k < 6) it->failed = true;
        else if (k < 7) it->s.weight = 1 + rnd_below(1000);  // the judge may refresh it
      }
    } else if (op < 55) {  // answers
      uint32_t n = rnd_below(4);
      for (uint32_t i = 0; i < n; ++i) cw_sched_island_answered(&isl);
    } else if (op < 57) {
      isl.max_run = rnd_below(3) ? 1 : 1 + rnd_below(CW_SCHED_RUN_MAX);
    } else if (op < 58) {
      cw_sched_island_restart(&isl);
      run = 0;
    } else {  // a pick, stamped when a launch
      pick_serial++;
      bool room = isl.outstanding < isl.max_outstanding;
      cw_sched_verdict_t v = CW_SCHED_BLOCKED;
      uint32_t run_before = run;
      sitem_t* got = (sitem_t*)cw_sched_island_pick(&isl, stress_judge, NULL, &v);
      stress_check(&isl, got, v, room, last_sid, run_before);
      if (got && v == CW_SCHED_LAUNCH) {
        run = got->s.session_id == last_sid ? run + 1 : 1;
        last_sid = got->s.session_id;
        cw_sched_island_stamped(&isl, 1);
      }
      if (pick_serial % 8 == 0) check_heaviest(&isl);
      if (got) {
        // The policy forgets the last session once its queue empties.
        if (last_sid && !models[last_sid].len) last_sid = 0;
        free(got);
        taken++;
      }
    }
    // The model's queues and the policy's agree on what is queued.
    if (step % 1000 == 0) {
      size_t n = 0;
      for (int sid = 1; sid <= S_SESSIONS; ++sid) n += models[sid].len;
      assert_int_equal(n, pushed - taken);
    }
  }
  if (strict_judging) assert_int_equal(double_judged, 0);
  // Empty it: every item comes back once.
  cw_sched_item_t* si;
  while ((si = cw_sched_island_take_any(&isl)) != NULL) {
    sitem_t* it = (sitem_t*)si;
    model_t* m = &models[it->s.session_id];
    assert_ptr_equal(model_head(it->s.session_id), it);
    m->head++;
    m->len--;
    free(it);
    taken++;
  }
  assert_int_equal(taken, pushed);
  assert_null(isl.queues);
  cw_sched_island_deinitialize(&isl);
  for (int sid = 0; sid <= S_SESSIONS; ++sid) free(models[sid].items);
  memset(models, 0, sizeof(models));
}

static void test_random_against_a_model(void** state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    stress_round(seed * 0x9E3779B97F4A7C15ull, 20000, true);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_weights_share_a_backlogged_island, setup),
      cmocka_unit_test_setup(test_fifo_within_a_session, setup),
      cmocka_unit_test_setup(test_stamps_increase_without_gaps, setup),
      cmocka_unit_test_setup(test_outstanding_cap, setup),
      cmocka_unit_test_setup(test_blocked_head_blocks_only_its_session, setup),
      cmocka_unit_test_setup(test_failed_and_ready_heads_go_first, setup),
      cmocka_unit_test_setup(test_a_pick_judges_few_heads, setup),
      cmocka_unit_test_setup(test_huge_weight_counts_as_the_largest, setup),
      cmocka_unit_test_setup(test_no_credit_for_idle_sessions, setup),
      cmocka_unit_test_setup(test_a_session_that_leaves, setup),
      cmocka_unit_test_setup(test_visit_in_order, setup),
      cmocka_unit_test_setup(test_restart, setup),
      cmocka_unit_test_setup(test_runs_keep_the_shares, setup),
      cmocka_unit_test_setup(test_runs_lead_by_the_heaviest_stride, setup),
      cmocka_unit_test_setup(test_run_ends_at_a_blocked_head, setup),
      cmocka_unit_test(test_run_length),
      cmocka_unit_test_setup(test_a_head_back_from_blocked_is_judged_once, setup),
      cmocka_unit_test(test_random_against_a_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
