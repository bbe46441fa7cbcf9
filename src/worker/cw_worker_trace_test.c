// Session timelines at the worker (cw_worker_trace.c), over raw frames
// against a real worker: TRACE_START's bounds and clock, what is recorded
// (uploads, executions, downloads of the traced session only), the ring that
// drops the oldest and counts them, and TRACE_FETCH taking events out a
// window at a time with `more`.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

// TRACE_FETCH of at most `max` events (0: all); free with reply_free.
static const Causeway__V1__TraceEvents* fetch(int fd, uint32_t max, reply_t* r) {
  Causeway__V1__TraceFetchRequest f = CAUSEWAY__V1__TRACE_FETCH_REQUEST__INIT;
  f.max_events = max;
  assert_int_equal(call(fd, CW_MSG_TRACE_FETCH, &f.base, NULL, 0, r), 0);
  return (const Causeway__V1__TraceEvents*)r->msg;
}

static void expect_event(const Causeway__V1__TraceEvent* e, const char* cat, const char* name,
                         uint64_t id, uint64_t bytes, uint64_t not_before,
                         const Causeway__V1__TraceClock* clock) {
  assert_string_equal(e->cat, cat);
  assert_string_equal(e->name, name);
  assert_int_equal(e->id, id);
  assert_int_equal(e->bytes, bytes);
  assert_int_equal(e->device, 0);
  assert_true(e->start_ns >= not_before);
  assert_true(e->start_ns + e->dur_ns <= clock->now_ns);
}

static void test_trace_ring(void** state) {
  (void)state;
  worker_t w;
  uint64_t sid = 0;
  int fd = start_client(&w, &sid);
  float x[6] = {1, 2, 3, 4, 5, 6};
  // Before TRACE_START nothing is recorded.
  assert_int_equal(upload(fd, 100, x, NULL, 24, 0), 0);
  Causeway__V1__TraceStartRequest ts = CAUSEWAY__V1__TRACE_START_REQUEST__INIT;
  ts.capacity = (1u << 20) + 1;
  assert_int_equal(call(fd, CW_MSG_TRACE_START, &ts.base, NULL, 0, NULL), CW_INVALID_ARGUMENT);
  ts.capacity = 4;
  reply_t r;
  assert_int_equal(call(fd, CW_MSG_TRACE_START, &ts.base, NULL, 0, &r), 0);
  const Causeway__V1__TraceClock* clk = (const Causeway__V1__TraceClock*)r.msg;
  assert_int_equal(clk->pid, (uint32_t)w.pid);
  assert_true(clk->now_ns > 0);
  uint64_t t0 = clk->now_ns;
  reply_free(&r);

  // Six uploads into a ring of four: the two oldest are dropped.
  for (uint64_t id = 1; id <= 6; ++id) assert_int_equal(upload(fd, id, x, NULL, 24, 0), 0);
  // Another session's work is not recorded in this one's timeline.
  int fd2 = dial(w.port);
  assert_true(hello(fd2, 0, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL) != sid);
  assert_int_equal(upload(fd2, 1, x, NULL, 24, 0), 0);
  close(fd2);

  const Causeway__V1__TraceEvents* evs = fetch(fd, 3, &r);
  assert_int_equal(evs->n_events, 3);
  for (size_t i = 0; i < 3; ++i) {
    expect_event(evs->events[i], "upload", "UPLOAD", 3 + i, 24, t0, evs->clock);
  }
  assert_int_equal(evs->dropped, 2);
  assert_true(evs->more);
  reply_free(&r);

  // An execution (named after the executable, with its launch id) and a
  // download join the one event left.
  Causeway__V1__CompileRequest c = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  c.exe_id = 50;
  c.format = "mlir";
  c.code.data = (uint8_t*)kScaleProgram;
  c.code.len = strlen(kScaleProgram);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);
  launch1_t l;
  launch1_init(&l, 50, 6, 60, false);
  l.req.launch_id = 4242;
  assert_int_equal(call(fd, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL), 0);
  float y[6];
  for (int i = 0; i < 6; ++i) y[i] = 2 * x[i] + 1;
  expect_download(fd, 60, y);
  // Three in a ring of four: nothing more dropped.
  evs = fetch(fd, 0, &r);
  assert_int_equal(evs->n_events, 3);
  expect_event(evs->events[0], "upload", "UPLOAD", 6, 24, t0, evs->clock);
  assert_string_equal(evs->events[1]->cat, "execute");
  assert_non_null(strstr(evs->events[1]->name, "jit_f"));
  assert_int_equal(evs->events[1]->id, 50);
  assert_int_equal(evs->events[1]->launch_id, 4242);
  expect_event(evs->events[2], "download", "DOWNLOAD", 60, 24, evs->events[1]->start_ns,
               evs->clock);
  assert_int_equal(evs->dropped, 2);
  assert_false(evs->more);
  reply_free(&r);
  evs = fetch(fd, 0, &r);
  assert_int_equal(evs->n_events, 0);
  assert_false(evs->more);
  reply_free(&r);

  // A second TRACE_START keeps the ring (and its capacity and count).
  ts.capacity = 100;
  assert_int_equal(call(fd, CW_MSG_TRACE_START, &ts.base, NULL, 0, NULL), 0);
  for (uint64_t id = 7; id <= 11; ++id) assert_int_equal(upload(fd, id, x, NULL, 24, 0), 0);
  evs = fetch(fd, 0, &r);
  assert_int_equal(evs->n_events, 4);
  assert_int_equal(evs->events[0]->id, 8);
  assert_int_equal(evs->dropped, 3);
  reply_free(&r);
  close(fd);
  stop_worker(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_ring),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
