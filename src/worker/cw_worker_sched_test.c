// Gang order at the worker (cw_worker_sched.c), against a real worker through
// the client library: stamped launches from two sessions' controller
// connections are issued in stamp order whatever order they arrive in; a
// stamp refused before its turn passes its turn; a client's own stamp is
// ignored; a stamp that never comes holds the rest only for the stall time;
// stamps refused early in reverse order pass in order once their turn comes.
// Parts of an island's launch (prepare) answer ready ahead of their turn
// when nothing before them can change that answer, and still run in turn.
// Asserts on replies and on the worker's Stats.sched_stamps.
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

static const char kSchedProgram[] =
    "module @cw_sched {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>\n"
    "    return %0 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

typedef struct {
  cw_client_t* client;  // role CLIENT: owns the session
  cw_client_t* link;    // role CONTROLLER, same session: stamped launches
  uint64_t id;
} session_t;

static void session_open(session_t* s) {
  cw_client_options_t o = {.peer_name = "cluster-test", .role = CAUSEWAY__V1__ROLE__ROLE_CLIENT};
  ASSERT_OK(cw_client_connect(g_worker.address, &o, &s->client));
  s->id = cw_client_session_id(s->client);
  cw_client_options_t l = {.session_id = s->id, .peer_name = "sched-test controller",
                           .role = CAUSEWAY__V1__ROLE__ROLE_CONTROLLER};
  ASSERT_OK(cw_client_connect(g_worker.address, &l, &s->link));
  Causeway__V1__CompileRequest cr = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  cr.exe_id = 7;
  cr.format = (char*)"mlir";
  cr.code.data = (uint8_t*)kSchedProgram;
  cr.code.len = sizeof(kSchedProgram) - 1;
  ASSERT_OK(cw_client_call(s->client, CW_MSG_COMPILE, &cr.base, NULL, 0, NULL, NULL, NULL));
  float data[6] = {1, 2, 3, 4, 5, 6};
  Causeway__V1__UploadRequest up;
  upload_request_init(&up, 101);
  struct iovec iov = {data, sizeof(data)};
  ASSERT_OK(cw_client_call(s->client, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, NULL, NULL));
}

static void session_close(session_t* s) {
  cw_client_release(s->link);
  cw_client_release(s->client);
}

// LAUNCH of exe 7 on 101 into `out`, stamped; `bad`: names no argument.
static uint64_t launch(cw_client_t* c, uint64_t stamp, uint64_t out, bool bad) {
  uint64_t in = 101;
  Causeway__V1__IdList args = CAUSEWAY__V1__ID_LIST__INIT;
  args.ids = &in;
  args.n_ids = bad ? 0 : 1;
  Causeway__V1__IdList outs = CAUSEWAY__V1__ID_LIST__INIT;
  outs.ids = &out;
  outs.n_ids = 1;
  Causeway__V1__IdList* ap[] = {&args};
  Causeway__V1__IdList* op[] = {&outs};
  Causeway__V1__LaunchRequest r = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  r.exe_id = 7;
  r.args = ap;
  r.n_args = 1;
  r.outputs = op;
  r.n_outputs = bad ? 2 : 1;  // 1 argument list, 2 output lists: refused at once
  Causeway__V1__IdList* op2[] = {&outs, &outs};
  if (bad) r.outputs = op2;
  r.launch_id = out;
  r.sched_stamp = stamp;
  uint64_t rid = 0;
  ASSERT_OK(cw_client_send(c, CW_MSG_LAUNCH, &r.base, NULL, 0, NULL, NULL, NULL, &rid));
  return rid;
}

static void test_stamp_order(void** state) {
  (void)state;
  session_t a, b;
  session_open(&a);
  session_open(&b);
  uint64_t stamps[16], sessions[16];
  // 2 arrives first (B) and waits for 1 (A).
  uint64_t r2 = launch(b.link, 2, 202, false);
  usleep(300 * 1000);
  ASSERT_OK(cw_client_ping(b.link));  // B's connection is served meanwhile
  assert_int_equal(sched_record(stamps, sessions, 16), 0);
  uint64_t r1 = launch(a.link, 1, 201, false);
  ASSERT_OK(cw_client_wait(a.link, r1, NULL, NULL));
  ASSERT_OK(cw_client_wait(b.link, r2, NULL, NULL));
  assert_int_equal(sched_record(stamps, sessions, 16), 2);
  assert_int_equal(stamps[0], 1);
  assert_int_equal(sessions[0], a.id);
  assert_int_equal(stamps[1], 2);
  assert_int_equal(sessions[1], b.id);

  // 4 (B) is refused before its turn; 5 (A) waits for 3, then both pass.
  uint64_t r4 = launch(b.link, 4, 204, true);
  cw_status_t st = cw_client_wait(b.link, r4, NULL, NULL);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  uint64_t r5 = launch(a.link, 5, 205, false);
  usleep(200 * 1000);
  assert_int_equal(sched_record(stamps, sessions, 16), 2);
  uint64_t r3 = launch(b.link, 3, 203, false);
  ASSERT_OK(cw_client_wait(b.link, r3, NULL, NULL));
  ASSERT_OK(cw_client_wait(a.link, r5, NULL, NULL));
  assert_int_equal(sched_record(stamps, sessions, 16), 5);
  for (size_t i = 0; i < 5; ++i) assert_int_equal(stamps[i], i + 1);
  assert_int_equal(sessions[3], b.id);

  // A client's own stamp counts for nothing: it runs at once, unrecorded.
  uint64_t rc = launch(a.client, 100, 206, false);
  ASSERT_OK(cw_client_wait(a.client, rc, NULL, NULL));
  assert_int_equal(sched_record(stamps, sessions, 16), 5);

  // 6 never comes: 7 waits the stall time (5 s), then goes.
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t r7 = launch(a.link, 7, 207, false);
  ASSERT_OK(cw_client_wait(a.link, r7, NULL, NULL));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "  stamp 7 went after %.1f s without stamp 6\n", waited);
  assert_true(waited > 3.0);
  assert_int_equal(sched_record(stamps, sessions, 16), 6);
  assert_int_equal(stamps[5], 7);

  // 40 down to 9 refused early, last first (kept in a window ahead of the
  // next turn, each in constant time); 8 comes, then they pass in order.
  for (uint64_t s = 40; s >= 9; --s) {
    uint64_t r = launch(b.link, s, 300 + s, true);
    st = cw_client_wait(b.link, r, NULL, NULL);
    assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
    cw_status_free(st);
  }
  assert_int_equal(sched_record(stamps, sessions, 16), 6);
  uint64_t r8 = launch(a.link, 8, 208, false);
  ASSERT_OK(cw_client_wait(a.link, r8, NULL, NULL));
  uint64_t all[64], all_sessions[64];
  assert_int_equal(sched_record(all, all_sessions, 64), 39);
  for (uint64_t s = 8; s <= 40; ++s) {
    assert_int_equal(all[s - 2], s);
    assert_int_equal(all_sessions[s - 2], s == 8 ? a.id : b.id);
  }
  session_close(&a);
  session_close(&b);
}

static uint64_t raw_part_of(int fd, uint64_t rid, uint64_t stamp, uint64_t exe, uint64_t in,
                            uint64_t out, bool donate) {
  launch1_t l;
  launch1_init(&l, exe, in, out, donate);
  l.req.sched_stamp = stamp;
  l.req.prepare = true;
  send_frame(fd, CW_MSG_LAUNCH, rid, &l.req.base, NULL, 0);
  return rid;
}

static uint64_t raw_part(int fd, uint64_t rid, uint64_t stamp, uint64_t in, uint64_t out) {
  return raw_part_of(fd, rid, stamp, 7, in, out, false);
}

static void test_parts_prepared_ahead(void** state) {
  (void)state;
  session_t a;
  session_open(&a);
  uint64_t stamps[128], sessions[128];
  size_t n0 = sched_record(stamps, sessions, 128);
  uint64_t b = n0 ? stamps[n0 - 1] + 1 : 1;  // the worker's next turn
  int fd = raw_link(a.id);
  // b answers ready at its turn; b+1 (its input ready) answers ready ahead
  // of its turn, while b waits for its go.
  expect_reply(fd, raw_part(fd, 1, b, 101, 301), 0, "part b ready");
  expect_reply(fd, raw_part(fd, 2, b + 1, 101, 302), 0, "part b+1 ready ahead of its turn");
  // b+2 reads b+1's output, which exists only once b+1 runs: it is not
  // prepared ahead.
  raw_part(fd, 3, b + 2, 302, 303);
  reply_t r;
  assert_false(reply_within(fd, 300, &r));
  // b+1's go before b's: it still waits for b's turn to pass.
  raw_go(fd, 12, b + 1, true);
  assert_false(reply_within(fd, 300, &r));
  assert_int_equal(sched_record(stamps, sessions, 128), n0);
  // b is cancelled: it fails in its turn, then b+1 runs, then b+2 is ready.
  raw_go(fd, 11, b, false);
  expect_reply(fd, 11, CW_CANCELLED, "part b cancelled");
  // b+1's completion and b+2's ready, in either order (b+2 may read b+1's
  // output once b+1 was issued).
  bool ran = false, ready = false;
  for (int i = 0; i < 2; ++i) {
    if (!reply_within(fd, 30000, &r)) fail_msg("no reply after b was cancelled");
    assert_false(r.h.flags & CW_FRAME_ERROR);
    ran |= r.h.request_id == 12;
    ready |= r.h.request_id == 3;
    reply_free(&r);
  }
  assert_true(ran && ready);
  raw_go(fd, 13, b + 2, true);
  expect_reply(fd, 13, 0, "part b+2 ran");
  float want[6] = {4, 8, 12, 16, 20, 24};  // 101 doubled twice
  float got[6] = {0};
  size_t size = 0;
  ASSERT_OK(cw_client_download(a.client, 303, got, sizeof(got), &size, NULL));
  assert_int_equal(size, sizeof(got));
  assert_memory_equal(got, want, sizeof(got));
  assert_int_equal(sched_record(stamps, sessions, 128), n0 + 3);
  for (size_t i = 0; i < 3; ++i) assert_int_equal(stamps[n0 + i], b + i);
  close(fd);
  session_close(&a);
}

// The frontier across connections, past a stamp refused early, held back by
// a prepared part that donates, and after a connection closes with parts
// prepared ahead: their turns pass and later stamps run (the stall recovery
// never skips a prepared turn, so nothing else would let them).
static void test_parts_ahead_across_connections(void** state) {
  (void)state;
  session_t a;
  session_open(&a);
  Causeway__V1__CompileRequest cr = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  cr.exe_id = 8;  // 2x + 1, its argument aliased to the result (donatable)
  cr.format = (char*)"mlir";
  cr.code.data = (uint8_t*)kAliasedProgram;
  cr.code.len = strlen(kAliasedProgram);
  ASSERT_OK(cw_client_call(a.client, CW_MSG_COMPILE, &cr.base, NULL, 0, NULL, NULL, NULL));
  float data[6] = {1, 2, 3, 4, 5, 6};
  for (uint64_t id = 102; id <= 103; ++id) {
    Causeway__V1__UploadRequest up;
    upload_request_init(&up, id);
    struct iovec iov = {data, sizeof(data)};
    ASSERT_OK(cw_client_call(a.client, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, NULL, NULL));
  }
  uint64_t stamps[128], sessions[128];
  size_t n0 = sched_record(stamps, sessions, 128);
  uint64_t b = n0 ? stamps[n0 - 1] + 1 : 1;
  int fa = raw_link(a.id), fb = raw_link(a.id);
  reply_t r;
  expect_reply(fa, raw_part(fa, 1, b, 101, 401), 0, "b ready at its turn");
  expect_reply(fb, raw_part(fb, 2, b + 1, 101, 402), 0, "b+1 ready ahead, on another connection");
  uint64_t bad = launch(a.link, b + 2, 403, true);  // refused at once: its turn passes
  assert_code(cw_client_wait(a.link, bad, NULL, NULL), CW_INVALID_ARGUMENT);
  expect_reply(fb, raw_part_of(fb, 4, b + 3, 8, 102, 404, true), 0,
               "b+3 (donates 102) ready ahead, past the refused b+2");
  raw_part(fa, 5, b + 4, 103, 405);
  assert_false(reply_within(fa, 300, &r));  // b+3 may still run and donates: b+4 waits
  raw_go(fa, 11, b, true);
  raw_go(fb, 12, b + 1, true);
  raw_go(fb, 14, b + 3, true);
  expect_reply(fa, 11, 0, "b ran");
  expect_reply(fb, 12, 0, "b+1 ran");
  // b+4's ready (fa) comes once b+3 issued; b+3's completion on fb.
  expect_reply(fa, 5, 0, "b+4 ready");
  expect_reply(fb, 14, 0, "b+3 ran");
  expect_reply(fa, raw_part(fa, 6, b + 5, 101, 406), 0, "b+5 ready ahead");
  close(fa);  // b+4 and b+5 prepared, never told go: cancelled in their turns
  expect_reply(fb, raw_part(fb, 7, b + 6, 101, 407), 0, "b+6 ready after the closed ones passed");
  raw_go(fb, 17, b + 6, true);
  expect_reply(fb, 17, 0, "b+6 ran");
  assert_int_equal(sched_record(stamps, sessions, 128), n0 + 7);
  for (size_t i = 0; i < 7; ++i) assert_int_equal(stamps[n0 + i], b + i);
  float got[6], want[6] = {3, 5, 7, 9, 11, 13};  // 102 -> 2x + 1
  size_t size = 0;
  ASSERT_OK(cw_client_download(a.client, 404, got, sizeof(got), &size, NULL));
  assert_memory_equal(got, want, sizeof(got));
  cw_status_t st = cw_client_download(a.client, 405, got, sizeof(got), &size, NULL);
  assert_int_equal(cw_status_code(st), CW_CANCELLED);  // b+4: closed before its go
  cw_status_free(st);
  close(fb);
  session_close(&a);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stamp_order),
      cmocka_unit_test(test_parts_prepared_ahead),
      cmocka_unit_test(test_parts_ahead_across_connections),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
