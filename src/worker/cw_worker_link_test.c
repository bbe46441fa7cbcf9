// The worker's link to its controller (cw_worker_link.c): the address it
// advertises (in process), and against real daemons REGISTER (the session
// the controller opens lists the worker under its name and address) and
// --exit-with-controller (the controller killed, the worker exits 0).
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

static void test_register_and_exit_with_controller(void** state) {
  (void)state;
  assert_non_null(cw_test_getenv("CW_CONTROLLER_BIN", NULL));
  cw_test_process_t ctl;
  char address[256];
  assert_int_equal(cw_test_controller_start(NULL, &ctl, address, sizeof(address)), 0);
  const char* extra[] = {"--controller", address, "--exit-with-controller", NULL};
  cw_test_worker_options_t o = {.devices = 2, .name = "registered", .extra_args = extra};
  cw_test_worker_t w;
  assert_int_equal(cw_test_worker_start(&o, &w), 0);
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(address, NULL, &c));
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = 1;
  req.wait_ms = 30000;
  ProtobufCMessage* rep = NULL;
  ASSERT_OK(cw_client_call(c, CW_MSG_OPEN_SESSION, &req.base, NULL, 0, NULL, &rep, NULL));
  const Causeway__V1__SessionInfo* si = (const Causeway__V1__SessionInfo*)rep;
  assert_int_equal(si->n_workers, 1);
  assert_string_equal(si->workers[0]->name, "registered");
  assert_string_equal(si->workers[0]->address, w.address);
  assert_int_equal(si->n_devices, 2);
  protobuf_c_message_free_unpacked(rep, NULL);
  cw_client_release(c);
  // The controller goes (even by SIGKILL): the worker exits cleanly.
  cw_test_process_kill(&ctl);
  int rc = cw_test_process_wait(&w.process, 30000);
  fprintf(stderr, "  controller killed: worker exit status %d\n", rc);
  assert_int_equal(rc, 0);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_advertised_address),
      cmocka_unit_test(test_register_and_exit_with_controller),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
