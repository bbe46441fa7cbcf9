// LAUNCH at the worker (cw_worker_launch.c), over raw frames against a real
// worker: donated arguments (donate_argnums) -- what EXE_INFO says a program
// aliases, the donated id gone after the launch whether or not the program
// aliases it and whether or not the launch ran, the result the same; and
// where Execute runs (the loop, or the dispatch thread).
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

static uint32_t launch_donating(int fd, uint64_t exe, uint64_t in, uint64_t out, bool donate) {
  launch1_t l;
  launch1_init(&l, exe, in, out, donate);
  return call(fd, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL);
}

// donate_argnums: EXE_INFO names the aliased parameter; a launch that
// donates it deletes the input id (later use: NOT_FOUND) and computes the
// same result; without donation the input stays.
static void test_donation(void** state) {
  (void)state;
  worker_t w;
  int fd = start_client(&w, NULL);
  float x[6] = {0, 1, 2, 3, 4, 5}, y[6], z[6];
  for (int i = 0; i < 6; ++i) y[i] = x[i] * 2 + 1;
  for (int i = 0; i < 6; ++i) z[i] = y[i] * 2 + 1;

  Causeway__V1__CompileRequest c = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  c.exe_id = 2;
  c.format = "mlir";
  c.code.data = (uint8_t*)kAliasedProgram;
  c.code.len = strlen(kAliasedProgram);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);
  c.exe_id = 3;  // not aliased
  c.code.data = (uint8_t*)kScaleProgram;
  c.code.len = strlen(kScaleProgram);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);

  Causeway__V1__ExeInfoRequest ei = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  reply_t r;
  ei.exe_id = 2;
  assert_int_equal(call(fd, CW_MSG_EXE_INFO, &ei.base, NULL, 0, &r), 0);
  const Causeway__V1__ExecutableInfo* info = (const Causeway__V1__ExecutableInfo*)r.msg;
  assert_int_equal(info->n_donated_params, 1);
  assert_int_equal(info->donated_params[0], 0);
  reply_free(&r);
  ei.exe_id = 3;
  assert_int_equal(call(fd, CW_MSG_EXE_INFO, &ei.base, NULL, 0, &r), 0);
  assert_int_equal(((const Causeway__V1__ExecutableInfo*)r.msg)->n_donated_params, 0);
  reply_free(&r);

  // Not donated: the input stays, the output is correct.
  assert_int_equal(upload(fd, 10, x, NULL, 24, 0), 0);
  assert_int_equal(launch_donating(fd, 2, 10, 11, false), 0);
  expect_download(fd, 10, x);
  expect_download(fd, 11, y);

  // Donated: PJRT takes the buffer; its id is gone, the output correct; a
  // chained donating launch on the output works too.
  assert_int_equal(launch_donating(fd, 2, 10, 12, true), 0);
  Causeway__V1__DownloadRequest dr = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dr.buffer_id = 10;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);
  assert_int_equal(launch_donating(fd, 2, 10, 13, false), CW_NOT_FOUND);
  expect_download(fd, 12, y);
  assert_int_equal(launch_donating(fd, 2, 12, 14, true), 0);
  expect_download(fd, 14, z);
  dr.buffer_id = 12;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // Donating to a program that does not alias the parameter still deletes
  // the id (the client decides); XLA just cannot reuse the memory.
  assert_int_equal(upload(fd, 20, x, NULL, 24, 0), 0);
  assert_int_equal(launch_donating(fd, 3, 20, 21, true), 0);
  expect_download(fd, 21, y);
  dr.buffer_id = 20;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // A failed launch (unknown executable) still deletes the donated input.
  assert_int_equal(upload(fd, 30, x, NULL, 24, 0), 0);
  assert_int_equal(launch_donating(fd, 999, 30, 31, true), CW_NOT_FOUND);
  dr.buffer_id = 30;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // Only the outputs (and 13's error entry) remain: no donated buffer leaks.
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_int_equal(call(fd, CW_MSG_STATS, &sq.base, NULL, 0, &r), 0);
  printf("  after donation: %llu buffers, %llu bytes\n",
         (unsigned long long)((Causeway__V1__Stats*)r.msg)->buffers,
         (unsigned long long)((Causeway__V1__Stats*)r.msg)->buffer_bytes);
  reply_free(&r);
  close(fd);
  stop_worker(&w);
}

// Four sessions pipeline 64 launches each of a program XLA runs on the
// calling thread (under 1,000 flops): each is done when Execute returns, so
// none blocks the next and every Execute runs on the loop. They used to
// count in flight until the loop applied their completions, after the
// pass that read them: a pass reading more than 16 sent the rest to the
// dispatch thread, two thread hand-offs each (session 51).
static void test_launches_done_at_once_stay_on_the_loop(void** state) {
  (void)state;
  worker_t w;
  start_worker(&w, NULL);
  enum { kSessions = 4, kLaunches = 64 };
  int fds[kSessions];
  float x[6] = {0, 1, 2, 3, 4, 5}, y[6];
  for (int i = 0; i < 6; ++i) y[i] = x[i] * 2 + 1;
  for (int k = 0; k < kSessions; ++k) {
    fds[k] = dial(w.port);
    assert_true(hello(fds[k], 0, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL) != 0);
    Causeway__V1__CompileRequest c = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
    c.exe_id = 3;
    c.format = "mlir";
    c.code.data = (uint8_t*)kScaleProgram;
    c.code.len = strlen(kScaleProgram);
    assert_int_equal(call(fds[k], CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);
    assert_int_equal(upload(fds[k], 10, x, NULL, 24, 0), 0);
  }
  for (int i = 0; i < kLaunches; ++i) {
    for (int k = 0; k < kSessions; ++k) {
      launch1_t l;
      launch1_init(&l, 3, 10, 100 + (uint64_t)i, false);
      send_frame(fds[k], CW_MSG_LAUNCH, 1000 + (uint64_t)i, &l.req.base, NULL, 0);
    }
  }
  for (int k = 0; k < kSessions; ++k) {
    for (int i = 0; i < kLaunches; ++i) {
      reply_t r;
      assert_true(recv_frame(fds[k], &r));
      assert_false(r.h.flags & CW_FRAME_ERROR);
      reply_free(&r);
    }
    expect_download(fds[k], 100 + kLaunches - 1, y);
  }
  reply_t r;
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_int_equal(call(fds[0], CW_MSG_STATS, &sq.base, NULL, 0, &r), 0);
  const Causeway__V1__Stats* st = (const Causeway__V1__Stats*)r.msg;
  printf("  %llu launches, %llu on the dispatch thread\n", (unsigned long long)st->launches,
         (unsigned long long)st->launches_dispatched);
  assert_int_equal(st->launches, kSessions * kLaunches);
  assert_int_equal(st->launches_dispatched, 0);
  reply_free(&r);
  for (int k = 0; k < kSessions; ++k) close(fds[k]);
  stop_worker(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_donation),
      cmocka_unit_test(test_launches_done_at_once_stay_on_the_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
