// Unit tests of the client's connect, HELLO and release (cw_client.c,
// cw_client_socket.c) against a scripted fake peer on a Unix socket (the real
// worker is exercised by the integration tests in tests/).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_time.h"

static void test_hello(void** state) {
  fake_t f = {0};
  fake_start(&f, NULL);
  cw_client_options_t o = {.token = "s3cret", .session_id = 5, .peer_name = "unit"};
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f.path, &o, &c));
  assert_int_equal(cw_client_session_id(c), 77);
  assert_string_equal(cw_client_peer_name(c), "fake-worker");
  cw_client_release(c);
  fake_join(&f);
  assert_int_equal(f.hello_min, 1);
  assert_int_equal(f.hello_max, 1);
  assert_int_equal(f.hello_role, CAUSEWAY__V1__ROLE__ROLE_CLIENT);
  assert_string_equal(f.hello_token, "s3cret");
  assert_int_equal(f.hello_session, 5);
  assert_string_equal(f.hello_peer_name, "unit");

  // Token from the environment, role passed through.
  fake_t g = {0};
  fake_start(&g, NULL);
  setenv("CAUSEWAY_TOKEN", "from-env", 1);
  cw_client_options_t o2 = {.role = CAUSEWAY__V1__ROLE__ROLE_WORKER};
  cw_status_t s = cw_client_connect(g.path, &o2, &c);
  unsetenv("CAUSEWAY_TOKEN");
  assert_ok(s);
  cw_client_release(c);
  fake_join(&g);
  assert_string_equal(g.hello_token, "from-env");
  assert_int_equal(g.hello_role, CAUSEWAY__V1__ROLE__ROLE_WORKER);
}

static void test_hello_refused(void** state) {
  fake_t f = {.hello_error_code = CW_UNAUTHENTICATED, .hello_error_message = "token mismatch"};
  fake_start(&f, NULL);
  cw_client_t* c = (cw_client_t*)&f;  // must be reset to NULL
  expect_status(cw_client_connect(f.path, NULL, &c), CW_UNAUTHENTICATED, "token mismatch");
  assert_null(c);
  fake_join(&f);
}

static void test_hello_timeout(void** state) {
  fake_t f = {.hello_silent = true};
  fake_start(&f, NULL);
  cw_client_options_t o = {.connect_timeout_ms = 300};
  cw_client_t* c = NULL;
  int64_t t0 = cw_time_now_ms();
  expect_status(cw_client_connect(f.path, &o, &c), CW_UNAVAILABLE, f.path);
  assert_true(cw_time_now_ms() - t0 < 3000);
  assert_null(c);
  fake_join(&f);
}

// A peer that closes connections before answering HELLO (a daemon making
// room among connections without HELLO) is tried again a few times.
static void test_hello_closed_is_retried(void** state) {
  fake_t f = {.close_first = 2};
  fake_start(&f, NULL);
  cw_client_t* c = connect_ok(&f);
  cw_client_release(c);
  fake_join(&f);

  fake_t g = {.close_first = 4, .close_only = true};
  fake_start(&g, NULL);
  c = NULL;
  int64_t t0 = cw_time_now_ms();
  cw_status_t s = cw_client_connect(g.path, NULL, &c);
  assert_true(cw_time_now_ms() - t0 < 3000);
  expect_status(s, CW_UNAVAILABLE, "4 attempts, each closed before HELLO was answered");
  assert_null(c);
  fake_join(&g);
}

static void test_connect_refused(void** state) {
  // A port that was just free: nobody listens there.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr*)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  assert_int_equal(getsockname(s, (struct sockaddr*)&a, &len), 0);
  close(s);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
  cw_client_options_t o = {.connect_timeout_ms = 2000};
  cw_client_t* c = NULL;
  int64_t t0 = cw_time_now_ms();
  expect_status(cw_client_connect(addr, &o, &c), CW_UNAVAILABLE, addr);
  assert_true(cw_time_now_ms() - t0 < 2500);
  assert_null(c);

  expect_status(cw_client_connect("/nonexistent/cw.sock", &o, &c), CW_UNAVAILABLE,
                "/nonexistent/cw.sock");
  expect_status(cw_client_connect("no-port-here", &o, &c), CW_INVALID_ARGUMENT, "no-port-here");
}

// Reads requests but never answers until the client hangs up.
static void script_mute(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) frame_free(&fr);
}

static void test_release_fails_outstanding(void** state) {
  fake_t f = {0};
  fake_start(&f, script_mute);
  cw_client_t* c = connect_ok(&f);
  rec_t r1 = {.mu = PTHREAD_MUTEX_INITIALIZER}, r2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(send_ping(c, "a", rec_done, &r1, NULL));
  assert_ok(cw_client_expect(c, 1, rec_done, &r2));
  uint64_t parked = 0;
  assert_ok(send_ping(c, "never claimed", NULL, NULL, &parked));
  assert_ok(cw_client_expect(c, 2, NULL, NULL));
  cw_client_release(c);
  assert_int_equal(r1.calls, 1);
  assert_int_equal(r1.code, CW_UNAVAILABLE);
  assert_non_null(strstr(r1.message, "cw_client_release"));
  assert_int_equal(r2.calls, 1);
  fake_join(&f);
}

// Answers one request, then hangs up.
static void script_one_then_close(fake_t* f) {
  frame_t fr;
  if (!fake_read(f, &fr)) return;
  fake_ack(f, &fr);
  frame_free(&fr);
}

// cw_client_failed tells a connection that failed from one that works, as
// soon as a failure can be reported: the peer's hang-up, or a shutdown.
static void test_failed_is_set_before_the_loss_is_reported(void** state) {
  (void)state;
  fake_t f = {0}, g = {0};
  fake_start(&f, script_one_then_close);
  fake_start(&g, script_echo);
  cw_client_t* c = connect_ok(&f);
  cw_client_t* d = connect_ok(&g);
  assert_false(cw_client_failed(c));
  assert_ok(cw_client_ping(c));
  // The next request fails with the hang-up (a lost write, or the reader's
  // EOF): by then the connection says so.
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, f.path);
  assert_true(cw_client_failed(c));
  assert_false(cw_client_failed(d));  // another connection is untouched
  cw_client_shutdown(d);
  assert_true(cw_client_failed(d));
  assert_true(cw_client_failed(NULL));
  cw_client_release(c);
  cw_client_release(d);
  fake_join(&f);
  fake_join(&g);
}

// A child made by fork() inherits the connection: it must never write on
// it, read from it or shut it down (the parent's stream), and its release
// only forgets it. The child reports through its exit status.
static void test_forked_child_leaves_the_connection(void** state) {
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  assert_ok(cw_client_ping(c));
  assert_false(cw_client_forked(c));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int bad = 0;
    bad |= !cw_client_forked(c) << 0;
    cw_status_t s = cw_client_ping(c);
    bad |= (cw_status_code(s) != CW_FAILED_PRECONDITION ||
            !strstr(cw_status_message(s), "a child made by fork() cannot use it")) << 1;
    cw_status_free(s);
    s = cw_client_flush(c);
    bad |= (cw_status_code(s) != CW_FAILED_PRECONDITION) << 2;
    cw_status_free(s);
    cw_client_shutdown(c);
    cw_client_release(c);
    _exit(bad);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  for (int i = 0; i < 3; ++i) assert_ok(cw_client_ping(c));  // the stream is intact
  cw_client_release(c);
  fake_join(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello),
      cmocka_unit_test(test_hello_refused),
      cmocka_unit_test(test_hello_timeout),
      cmocka_unit_test(test_hello_closed_is_retried),
      cmocka_unit_test(test_connect_refused),
      cmocka_unit_test(test_release_fails_outstanding),
      cmocka_unit_test(test_forked_child_leaves_the_connection),
      cmocka_unit_test(test_failed_is_set_before_the_loss_is_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
