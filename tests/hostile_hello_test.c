// HELLO, credentials and roles: requests before HELLO, a second HELLO,
// version ranges, tokens (against a worker that requires one), requests a
// client's role may not send (LAUNCH_GO, PUT), and a WORKER connection that
// outlives the session it joined.
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"
#include "cw_time.h"

// LAUNCH_GO is the controller's word on a prepared island part: a client's is
// refused (not a violation), and so is one naming no prepared launch.
static void test_launch_go_from_a_client(void** state) {
  (void)state;
  int fd = open_hello();
  Causeway__V1__LaunchGoRequest m = CAUSEWAY__V1__LAUNCH_GO_REQUEST__INIT;
  m.sched_stamp = 5;
  m.go = true;
  assert_true(send_msg(fd, T_LAUNCH_GO, 21, &m.base, NULL, 0));
  const uint32_t codes[] = {C_PERMISSION_DENIED, 0};
  expect_error_codes(fd, "LAUNCH_GO from a client", 21, codes, "controller", NULL);
  ping(fd, 22);
  close(fd);
}

static void test_requests_before_hello(void** state) {
  (void)state;
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  packed_t p = pack(&pm.base);
  hdr_t h = hdr_of(T_PING, 20, (uint32_t)p.len, 0);
  violation("PING before HELLO", false, &h, p.data, p.len, NULL, 0, 20, C_FAILED_PRECONDITION,
            "HELLO");
  free(p.data);
  Causeway__V1__StatsRequest sm = CAUSEWAY__V1__STATS_REQUEST__INIT;
  p = pack(&sm.base);
  h = hdr_of(T_STATS, 21, (uint32_t)p.len, 0);
  violation("STATS before HELLO", false, &h, p.data, p.len, NULL, 0, 21, C_FAILED_PRECONDITION,
            "HELLO");
  free(p.data);
  Causeway__V1__DownloadRequest dm = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dm.buffer_id = 1;
  p = pack(&dm.base);
  h = hdr_of(T_DOWNLOAD, 22, (uint32_t)p.len, 0);
  violation("DOWNLOAD before HELLO", false, &h, p.data, p.len, NULL, 0, 22,
            C_FAILED_PRECONDITION, "HELLO");
  free(p.data);
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest um = upload_req(1, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  p = pack(&um.base);
  h = hdr_of(T_UPLOAD, 23, (uint32_t)p.len, 16);
  uint8_t bulk[16] = {0};
  violation("UPLOAD (with bulk) before HELLO", false, &h, p.data, p.len, bulk, 16, 23,
            C_FAILED_PRECONDITION, "HELLO");
  free(p.data);
}

static void test_second_hello(void** state) {
  (void)state;
  int fd = open_hello();
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = 1;
  m.max_version = 1;
  m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  assert_true(send_msg(fd, T_HELLO, 24, &m.base, NULL, 0));
  expect_error(fd, "second HELLO", 24, C_FAILED_PRECONDITION, "HELLO");
  expect_closed(fd, "second HELLO");
  close(fd);
  assert_serving(&g_plain);
}

static void test_hello_version_range(void** state) {
  (void)state;
  static const struct {
    uint32_t lo, hi;
  } ranges[] = {{2, 5}, {0, 0}, {1, 0}, {7, 1}, {2, UINT32_MAX}};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; ++i) {
    int fd = conn_open(&g_plain);
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = ranges[i].lo;
    m.max_version = ranges[i].hi;
    m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    assert_true(send_msg(fd, T_HELLO, 25, &m.base, NULL, 0));
    char what[96];
    snprintf(what, sizeof what, "HELLO versions [%u, %u]", ranges[i].lo, ranges[i].hi);
    got_error_t e;
    const uint32_t codes[] = {C_UNIMPLEMENTED, 0};
    expect_error_codes(fd, what, 25, codes, "version", &e);
    // The message names both ranges.
    char lo[16], hi[16];
    snprintf(lo, sizeof lo, "%u", ranges[i].lo);
    snprintf(hi, sizeof hi, "%u", ranges[i].hi);
    if (!strstr(e.message, lo) || !strstr(e.message, hi)) {
      fail_msg("%s: message \"%s\" does not name the requested range", what, e.message);
    }
    expect_closed(fd, what);
    close(fd);
    assert_serving(&g_plain);
  }
  // An overlapping wider range is fine.
  int fd = conn_open(&g_plain);
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = 0;
  m.max_version = 9;
  m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  assert_true(send_msg(fd, T_HELLO, 1, &m.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "HELLO versions [0, 9]", T_HELLO, 1, &f);
  frame_free(&f);
  ping(fd, 2);
  close(fd);
}

// Sends HELLO (role CLIENT) with `token` (NULL: none) and a version range.
static void send_hello(int fd, uint64_t rid, const char* token, uint32_t min_v, uint32_t max_v) {
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = min_v;
  m.max_version = max_v;
  m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  if (token) {
    m.token.data = (uint8_t*)token;
    m.token.len = strlen(token);
  }
  assert_true(send_msg(fd, T_HELLO, rid, &m.base, NULL, 0));
}

static void test_token(void** state) {
  (void)state;
  static const char* tokens[] = {"wrong-token", NULL, "", TOKEN "x", "hostile-secret-toke"};
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; ++i) {
    int fd = conn_open(&g_token);
    send_hello(fd, 26, tokens[i], 1, 1);
    char what[96];
    snprintf(what, sizeof what, "HELLO token \"%s\"", tokens[i] ? tokens[i] : "(absent)");
    got_error_t e;
    const uint32_t codes[] = {C_UNAUTHENTICATED, 0};
    expect_error_codes(fd, what, 26, codes, "token|auth|credential", &e);
    // The error message must not leak the configured token.
    if (strstr(e.message, TOKEN)) fail_msg("%s: the error message leaks the token", what);
    expect_closed(fd, what);
    close(fd);
    assert_serving(&g_token);
  }
  // Requests pipelined behind a refused HELLO are never looked at: one
  // refusal, then the connection closes (no STATS or PING reply leaks).
  {
    int pfd = conn_open(&g_token);
    send_hello(pfd, 30, "wrong-token", 1, 1);
    Causeway__V1__StatsRequest sm = CAUSEWAY__V1__STATS_REQUEST__INIT;
    Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
    // The worker may already have closed after its refusal: a failed send
    // here is that, not an error.
    (void)send_msg(pfd, T_STATS, 31, &sm.base, NULL, 0);
    (void)send_msg(pfd, T_PING, 32, &pm.base, NULL, 0);
    const uint32_t codes[] = {C_UNAUTHENTICATED, 0};
    got_error_t e;
    expect_error_codes(pfd, "bad-token HELLO with pipelined requests", 30, codes,
                       "credentials refused", &e);
    expect_closed(pfd, "bad-token HELLO with pipelined requests");
    close(pfd);
  }
  // Credentials are checked before anything else in HELLO: a bad token with
  // an unsupported version range is refused for the token, not the version.
  {
    int vfd = conn_open(&g_token);
    send_hello(vfd, 33, NULL, 90, 99);
    const uint32_t codes[] = {C_UNAUTHENTICATED, 0};
    got_error_t e;
    expect_error_codes(vfd, "no-token HELLO with versions 90..99", 33, codes,
                       "credentials refused", &e);
    expect_closed(vfd, "no-token HELLO with versions 90..99");
    close(vfd);
  }
  // Requests before an authenticated HELLO are refused on a token worker too.
  int fd = conn_open(&g_token);
  Causeway__V1__StatsRequest sm = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_true(send_msg(fd, T_STATS, 27, &sm.base, NULL, 0));
  expect_error(fd, "STATS before HELLO (token worker)", 27, C_FAILED_PRECONDITION, "HELLO");
  expect_closed(fd, "STATS before HELLO (token worker)");
  close(fd);
  // The right token works.
  assert_serving(&g_token);
}

static void test_put_from_client(void** state) {
  (void)state;
  static const Causeway__V1__Role roles[] = {CAUSEWAY__V1__ROLE__ROLE_CLIENT,
                                             CAUSEWAY__V1__ROLE__ROLE_WORKER};
  for (int i = 0; i < 2; ++i) {
    int fd = conn_open(&g_plain);
    hello_as(fd, NULL, roles[i], 0, NULL);
    Causeway__V1__PutRequest m = CAUSEWAY__V1__PUT_REQUEST__INIT;
    int64_t dims[1] = {4};
    m.dst_id = 5;
    m.dst_session = 0xDEADBEEF0001ull;
    m.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
    m.dims = dims;
    m.n_dims = 1;
    float data[4] = {1, 2, 3, 4};
    assert_true(send_msg(fd, T_PUT, 60, &m.base, data, sizeof data));
    char what[96];
    snprintf(what, sizeof what, "PUT into missing session (%s connection)",
             i ? "WORKER" : "CLIENT");
    const uint32_t codes[] = {C_NOT_FOUND, C_PERMISSION_DENIED, C_FAILED_PRECONDITION, 0};
    expect_error_codes(fd, what, 60, codes, i ? "session" : "", NULL);
    // Either the connection is still usable or the worker closed it: both
    // keep the worker safe; report which.
    Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
    bool sent = send_msg(fd, T_PING, 61, &pm.base, NULL, 0);
    frame_t f;
    int r = sent ? recv_frame(fd, &f, IO_TIMEOUT_MS) : -1;
    if (r == 1) {
      if (f.flags != F_REPLY || f.request_id != 61) {
        fail_msg("%s: after the error, PING got flags 0x%x", what, f.flags);
      }
      fprintf(stderr, "[hostile]   %-46s    connection stays open\n", what);
    } else {
      if (r == -2) fail_msg("%s: PING after the error timed out", what);
      fprintf(stderr, "[hostile]   %-46s    connection closed\n", what);
    }
    frame_free(&f);
    close(fd);
    assert_serving(&g_plain);
  }
  // The PUT created nothing: no session 0xDEADBEEF0001 with buffer 5.
  int fd = conn_open(&g_plain);
  hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0xDEADBEEF0001ull, NULL);
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 5;
  assert_true(send_msg(fd, T_DOWNLOAD, 62, &d.base, NULL, 0));
  expect_error(fd, "DOWNLOAD of the refused PUT's id", 62, C_NOT_FOUND, "5");
  close(fd);
}

// A peer's WORKER connection joins a session without keeping it alive: when
// the session's last client goes, the worker frees it, and the WORKER
// connection must not keep pointing at it (ASan: a use after free in STATS).
// Peers are counted by name in a table of at most 1,024 names; later names
// count as "(other)". A 1,025th name made the worker recurse for good
// (stack overflow under ASan, a hung worker without), and a peer without a
// name is named by its address and port, so 1,025 connections over a
// worker's life were enough.
static void test_many_peer_names(void** state) {
  (void)state;
  for (int i = 0; i < 1100; ++i) {
    int fd = conn_open(&g_plain);
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = 1;
    m.max_version = 1;
    m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    char name[32];
    snprintf(name, sizeof(name), "peer-%d", i);
    m.peer_name = name;
    assert_true(send_msg(fd, T_HELLO, 1, &m.base, NULL, 0));
    frame_t f;
    expect_reply(fd, "HELLO", T_HELLO, 1, &f);
    frame_free(&f);
    close(fd);
  }
  assert_serving(&g_plain);
  int fd = open_hello();
  Causeway__V1__Stats* st = stats(fd, 5);
  bool other = false;
  for (size_t i = 0; i < st->n_peers; ++i) other = other || !strcmp(st->peers[i]->peer, "(other)");
  assert_true(other);
  assert_true(st->n_peers <= 1025);
  causeway__v1__stats__free_unpacked(st, NULL);
  close(fd);
}

static void test_worker_role_outlives_session(void** state) {
  (void)state;
  int a = conn_open(&g_plain);
  Causeway__V1__HelloReply* rep = NULL;
  hello_as(a, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &rep);
  uint64_t sid = rep->session_id;
  causeway__v1__hello_reply__free_unpacked(rep, NULL);
  int b = conn_open(&g_plain);
  hello_as(b, NULL, CAUSEWAY__V1__ROLE__ROLE_WORKER, sid, NULL);
  Causeway__V1__Stats* st = stats(b, 70);
  assert_non_null(st);
  uint64_t before = st->sessions;
  causeway__v1__stats__free_unpacked(st, NULL);
  close(a);  // the session's last client connection: the worker frees it
  uint64_t now = before;
  for (uint64_t rid = 71; now >= before && rid < 71 + 500; ++rid) {
    st = stats(b, rid);  // each one after the free reads the WORKER connection's session
    assert_non_null(st);
    now = st->sessions;
    causeway__v1__stats__free_unpacked(st, NULL);
    if (now >= before) sleep_ms(20);
  }
  if (now >= before) fail_msg("session %" PRIu64 " was never freed", sid);
  ping(b, 600);
  close(b);
  assert_serving(&g_plain);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_launch_go_from_a_client),
      cmocka_unit_test(test_requests_before_hello),
      cmocka_unit_test(test_second_hello),
      cmocka_unit_test(test_hello_version_range),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_put_from_client),
      cmocka_unit_test(test_many_peer_names),
      cmocka_unit_test(test_worker_role_outlives_session),
      // Last: SIGTERM the workers and require exit 0 (ASan: no leaks).
      cmocka_unit_test(hostile_test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_hello", tests, hostile_group_setup_with_token,
                                     hostile_group_teardown);
}
