// Unit tests of the liveness watchdog (cw_client_liveness.c): a slow but
// live peer, a hung one and an idle one; against the fake peer.
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_time.h"

// A slow but live peer: it answers INVENTORY only after 4 liveness periods,
// and every PING at once.
static void script_slow_but_alive(fake_t* f) {
  frame_t req, fr;
  FCHECK(f, fake_read(f, &req));
  FCHECK(f, req.h.type == CW_MSG_INVENTORY);
  int64_t until = cw_time_now_ms() + 4 * f->count;
  int pings = 0;
  for (int64_t left; (left = until - cw_time_now_ms()) > 0;) {
    struct pollfd pfd = {.fd = f->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)left) <= 0) continue;
    if (!fake_read(f, &fr)) break;
    if (fr.h.type == CW_MSG_PING) {
      pings++;
      fake_reply(f, &fr, fr.msg, NULL, 0);
    }
    frame_free(&fr);
  }
  FCHECK(f, pings >= 2);
  Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
  inv.worker_name = "slow";
  inv.platform_name = "cpu";
  inv.platform_version = "0";
  fake_reply(f, &req, &inv.base, NULL, 0);
  frame_free(&req);
  while (fake_read(f, &fr)) frame_free(&fr);  // until the client closes
}

// Answers every PING until the client closes.
static void script_pong(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    if (fr.h.type == CW_MSG_PING) fake_reply(f, &fr, fr.msg, NULL, 0);
    frame_free(&fr);
  }
}

// A hung peer: it reads everything and never answers.
static void script_hung(fake_t* f) {
  uint8_t buf[4096];
  while (read(f->fd, buf, sizeof(buf)) > 0) {
  }
}

static void test_liveness(void** state) {
  (void)state;
  const int period = 400;  // roomy: a loaded machine may be slow to answer a PING
  // Slow: pings keep the call alive past the period, and it succeeds, also
  // after a quiet time longer than the period with nothing owed.
  fake_t f = {.count = period};
  fake_start(&f, script_slow_but_alive);
  cw_client_options_t o = {.liveness_ms = period};
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  struct timespec quiet = {.tv_sec = 0, .tv_nsec = 3L * period * 1000000L};
  nanosleep(&quiet, NULL);
  Causeway__V1__Inventory* inv = NULL;
  s = cw_client_inventory(c, &inv);
  if (s) fail_msg("a slow live peer: %s", cw_status_message(s));
  assert_string_equal(inv->worker_name, "slow");
  protobuf_c_message_free_unpacked(&inv->base, NULL);
  cw_client_release(c);
  fake_join(&f);
  // Hung: the call fails UNAVAILABLE saying so, and so does what follows.
  fake_t h = {0};
  fake_start(&h, script_hung);
  s = cw_client_connect(h.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "no answer from");
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "no answer from");
  cw_client_release(c);
  fake_join(&h);
  // Quiet with nothing owed is not hung: the connection stays up.
  fake_t idle = {0};
  fake_start(&idle, script_pong);
  s = cw_client_connect(idle.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  nanosleep(&quiet, NULL);
  s = cw_client_ping(c);
  if (s) fail_msg("after an idle while: %s", cw_status_message(s));
  cw_client_release(c);
  fake_join(&idle);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_liveness),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
