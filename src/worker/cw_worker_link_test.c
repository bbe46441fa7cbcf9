// The worker's link to its controller (cw_worker_link.c): the address it
// advertises (in process), and against real daemons REGISTER (the session
// the controller opens lists the worker under its name and address),
// --exit-with-controller (the controller killed, the worker exits 0), a
// controller that starts seconds after its worker (the worker keeps trying
// and registers; --exit-with-controller applies only after that), and one
// that never comes (the worker exits 1 after --start-timeout-ms, saying so).
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_worker_link.h"
#include "cw_worker_test_util.h"

// A wildcard host becomes this host's name; anything else is kept as given.
static void test_advertised_address(void** state) {
  (void)state;
  char host[256];
  assert_int_equal(gethostname(host, sizeof(host)), 0);
  host[sizeof(host) - 1] = 0;
  static const char* const wildcards[] = {"0.0.0.0:7000", ":7000", "[::]:7000", ":::7000"};
  for (size_t i = 0; i < sizeof(wildcards) / sizeof(wildcards[0]); ++i) {
    char out[300], want[300];
    cw_worker_advertised_address(wildcards[i], out, sizeof(out));
    snprintf(want, sizeof(want), "%s:7000", host);
    assert_string_equal(out, want);
  }
  static const char* const kept[] = {
      "127.0.0.1:7000", "10.1.2.3:0", "[::1]:7000", "worker-3.example:7000",
      "/tmp/cw.sock",   "/tmp/0.0.0.0:7000",  // a Unix socket path, whatever it looks like
      "no-port",        "0.0.0.1:7000",
  };
  for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); ++i) {
    char out[300];
    cw_worker_advertised_address(kept[i], out, sizeof(out));
    assert_string_equal(out, kept[i]);
  }
  // Cut to the room given, always terminated.
  char small[8];
  cw_worker_advertised_address("127.0.0.1:7000", small, sizeof(small));
  assert_string_equal(small, "127.0.0");
}

// One session on the controller at `address` sees `name` (with 2 devices),
// at `worker_address` unless NULL.
static void expect_registered(const char* address, const char* name,
                              const char* worker_address) {
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(address, NULL, &c));
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = 1;
  req.wait_ms = 30000;
  ProtobufCMessage* rep = NULL;
  ASSERT_OK(cw_client_call(c, CW_MSG_OPEN_SESSION, &req.base, NULL, 0, NULL, &rep, NULL));
  const Causeway__V1__SessionInfo* si = (const Causeway__V1__SessionInfo*)rep;
  assert_int_equal(si->n_workers, 1);
  assert_string_equal(si->workers[0]->name, name);
  if (worker_address) assert_string_equal(si->workers[0]->address, worker_address);
  assert_int_equal(si->n_devices, 2);
  protobuf_c_message_free_unpacked(rep, NULL);
  cw_client_release(c);
}

// A controller (with `ctl_args`) at address[256], and a worker `name` with
// --exit-with-controller registered with it.
static void start_registered(const char** ctl_args, const char* name, cw_test_process_t* ctl,
                             char* address, cw_test_worker_t* w) {
  assert_non_null(cw_test_getenv("CW_CONTROLLER_BIN", NULL));
  assert_int_equal(cw_test_controller_start(ctl_args, ctl, address, 256), 0);
  const char* extra[] = {"--controller", address, "--exit-with-controller", NULL};
  cw_test_worker_options_t o = {.devices = 2, .name = name, .extra_args = extra};
  assert_int_equal(cw_test_worker_start(&o, w), 0);
  expect_registered(address, name, w->address);
}

static void test_register_and_exit_with_controller(void** state) {
  (void)state;
  cw_test_process_t ctl;
  char address[256];
  cw_test_worker_t w;
  start_registered(NULL, "registered", &ctl, address, &w);
  // The controller goes (even by SIGKILL): the worker exits cleanly.
  cw_test_process_kill(&ctl);
  int rc = cw_test_process_wait(&w.process, 30000);
  fprintf(stderr, "  controller killed: worker exit status %d\n", rc);
  assert_int_equal(rc, 0);
}

// A worker that stalls past the controller's --worker-timeout-ms is taken
// for dead and its connection closed, but the controller is still there:
// with --exit-with-controller the worker registers again instead of exiting
// (an audit: a worker of 'causeway up' stopped for 7 s was gone for good).
static void test_stalled_worker_registers_again(void** state) {
  (void)state;
  cw_test_process_t ctl;
  char address[256];
  cw_test_worker_t w;
  const char* ctl_args[] = {"--worker-timeout-ms", "500", NULL};
  start_registered(ctl_args, "stalls", &ctl, address, &w);
  kill(w.process.pid, SIGSTOP);
  // Declared dead after 500 ms without heartbeats: polled (STATS), not slept.
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(address, NULL, &c));
  uint64_t timed_out = 0;
  for (int i = 0; i < 3000 && timed_out == 0; ++i) {
    Causeway__V1__Stats* st = NULL;
    ASSERT_OK(cw_client_stats(c, &st));
    timed_out = st->workers_timed_out;
    protobuf_c_message_free_unpacked(&st->base, NULL);
    if (timed_out == 0) cw_test_sleep_ms(10);
  }
  cw_client_release(c);
  assert_int_equal(timed_out, 1);
  kill(w.process.pid, SIGCONT);
  // It registers again (the session waits for it) and keeps running.
  expect_registered(address, "stalls", w.address);
  assert_int_equal(cw_test_process_wait(&w.process, 0), -1);  // still running
  // The controller gone: the worker still exits.
  cw_test_process_kill(&ctl);
  assert_int_equal(cw_test_process_wait(&w.process, 30000), 0);
}

// Workers first, the controller 1.5 s later: the worker (embedded-style,
// --exit-with-controller) keeps trying and registers; losing the controller
// after that still makes it exit.
static void test_controller_starts_later(void** state) {
  (void)state;
  char dir[256], sock[320];
  assert_int_equal(cw_test_tempdir_create("cw-link", dir, sizeof(dir)), 0);
  snprintf(sock, sizeof(sock), "%s/ctl.sock", dir);
  const char* extra[] = {"--controller", sock, "--exit-with-controller", "--start-timeout-ms",
                         "60000", "--reconnect-max-ms", "300", NULL};
  cw_test_worker_options_t o = {.devices = 2, .name = "early", .extra_args = extra};
  cw_test_worker_t w;
  assert_int_equal(cw_test_worker_start(&o, &w), 0);
  cw_test_sleep_ms(1500);
  assert_int_equal(cw_test_process_wait(&w.process, 0), -1);  // still there, still trying
  cw_test_process_t ctl;
  char address[256];
  const char* ctl_args[] = {"--listen", sock, NULL};
  assert_int_equal(cw_test_controller_start(ctl_args, &ctl, address, sizeof(address)), 0);
  assert_string_equal(address, sock);
  expect_registered(address, "early", NULL);
  cw_test_process_kill(&ctl);
  assert_int_equal(cw_test_process_wait(&w.process, 30000), 0);
  cw_test_tempdir_remove(dir);
}

// No controller ever: the worker gives up after --start-timeout-ms with an
// error that names the controller, the timeout and the last failure.
static void test_start_timeout(void** state) {
  (void)state;
  char dir[256], sock[320];
  assert_int_equal(cw_test_tempdir_create("cw-link", dir, sizeof(dir)), 0);
  snprintf(sock, sizeof(sock), "%s/never.sock", dir);
  const char* extra[] = {"--controller", sock, "--exit-with-controller", "--start-timeout-ms",
                         "1500", "--reconnect-max-ms", "200", NULL};
  cw_test_worker_options_t o = {.devices = 2, .name = "lonely", .extra_args = extra};
  cw_test_stderr_capture_t cap;
  assert_int_equal(cw_test_stderr_capture_begin(&cap), 0);
  cw_test_worker_t w;
  // From before the spawn: the worker's own 1500 ms start later, so it
  // cannot have given up sooner however slowly a loaded machine starts it.
  int64_t t0 = cw_time_now_ms();
  int started = cw_test_worker_start(&o, &w);
  int rc = started == 0 ? cw_test_process_wait(&w.process, 30000) : -2;
  int64_t waited = cw_time_now_ms() - t0;
  char text[16384];
  assert_int_equal(cw_test_stderr_capture_end(&cap, text, sizeof(text)), 0);
  fprintf(stderr, "%s", text);
  assert_int_equal(started, 0);
  assert_int_equal(rc, 1);
  assert_true(waited >= 1500 && waited < 30000);
  char want[512];
  snprintf(want, sizeof(want),
           "worker lonely did not register with the controller %s within 1500 ms "
           "(--start-timeout-ms); last error: ", sock);
  assert_non_null(strstr(text, want));
  assert_non_null(strstr(text, "no such file or directory"));
  cw_test_tempdir_remove(dir);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_advertised_address),
      cmocka_unit_test(test_register_and_exit_with_controller),
      cmocka_unit_test(test_stalled_worker_registers_again),
      cmocka_unit_test(test_controller_starts_later),
      cmocka_unit_test(test_start_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
