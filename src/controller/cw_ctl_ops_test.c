// Operations messages against a real causeway-controller and two real
// causeway-worker daemons (XLA's CPU plugin), through the C client library:
// ADMIN_STATUS numbers match what a session did (a direct upload), also when
// answered from the last poll (max_age_ms), a session opened with a name is
// listed under it, errors land in the recent-errors ring, PAUSE/RESUME by
// name and id (and unknown ones refused naming them), ADMIN_HOLD refused
// from a client, DRAIN refusing UPLOAD with the draining
// text while DOWNLOAD works, the refused id reporting the drain, idle in
// STATUS, a new session without the draining worker, UNDRAIN; every daemon
// exits 0 on SIGTERM (ASan: no leaks). The JAX-level checks (held launches,
// order) are in tests/cluster/test_ops.py.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_client.h"
#include "cw_test_util.h"


static struct {
  cw_test_process_t ctl;
  char ctl_address[512];
  cw_test_worker_t w[2];
  cw_client_t* client;  // to the controller, session opened with a name
  uint64_t session;
} g;

#define ASSERT_OK CW_TEST_ASSERT_OK

// Expects `st` to fail with `code` and a message containing `text`; takes st.
static void expect_error(cw_status_t st, cw_status_code_t code, const char* text) {
  assert_non_null(st);
  fprintf(stderr, "  %s: %s\n", cw_status_code_name(cw_status_code(st)), cw_status_message(st));
  assert_int_equal(cw_status_code(st), code);
  assert_non_null(strstr(cw_status_message(st), text));
  cw_status_free(st);
}

static Causeway__V1__AdminStatus* admin_status_aged(uint32_t max_age_ms) {
  Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  req.max_age_ms = max_age_ms;
  ProtobufCMessage* rep = NULL;
  ASSERT_OK(cw_client_call(g.client, CW_MSG_ADMIN_STATUS, &req.base, NULL, 0, NULL, &rep, NULL));
  return (Causeway__V1__AdminStatus*)rep;
}

static Causeway__V1__AdminStatus* admin_status(void) { return admin_status_aged(0); }

static const Causeway__V1__AdminWorker* find_worker(const Causeway__V1__AdminStatus* st,
                                                    const char* name) {
  for (size_t i = 0; i < st->n_workers; ++i) {
    if (!strcmp(st->workers[i]->name, name)) return st->workers[i];
  }
  fail_msg("worker %s not in status", name);
  return NULL;
}

static const Causeway__V1__AdminSession* find_session(const Causeway__V1__AdminStatus* st,
                                                      uint64_t id) {
  for (size_t i = 0; i < st->n_sessions; ++i) {
    if (st->sessions[i]->session_id == id) return st->sessions[i];
  }
  return NULL;
}

static cw_status_t admin_session(uint16_t type, uint64_t id, const char* name,
                                 Causeway__V1__AdminAck** out) {
  Causeway__V1__AdminSessionRequest req = CAUSEWAY__V1__ADMIN_SESSION_REQUEST__INIT;
  req.session_id = id;
  req.name = (char*)(name ? name : "");
  return cw_client_call(g.client, type, &req.base, NULL, 0, NULL, (ProtobufCMessage**)out, NULL);
}

static cw_status_t admin_drain(uint16_t type, const char* worker, Causeway__V1__AdminAck** out) {
  Causeway__V1__AdminDrainRequest req = CAUSEWAY__V1__ADMIN_DRAIN_REQUEST__INIT;
  req.worker = (char*)worker;
  return cw_client_call(g.client, type, &req.base, NULL, 0, NULL, (ProtobufCMessage**)out, NULL);
}

static cw_status_t open_named(cw_client_t* c, const char* name,
                              Causeway__V1__SessionInfo** out) {
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = 2;
  req.wait_ms = 30000;
  req.name = (char*)name;
  req.client_host = (char*)"test-host";
  req.client_pid = 4242;
  return cw_client_call(c, CW_MSG_OPEN_SESSION, &req.base, NULL, 0, NULL,
                        (ProtobufCMessage**)out, NULL);
}

static int group_setup(void** state) {
  signal(SIGPIPE, SIG_IGN);
  // A stopped worker stays alive for the whole of test_a_silent_worker_...
  static const char* const ctl_args[] = {"--worker-timeout-ms", "60000", NULL};
  if (cw_test_controller_start(ctl_args, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    return -1;
  }
  const char* extra[] = {"--controller", g.ctl_address, NULL};
  static const char* const names[2] = {"ops-a", "ops-b"};
  for (int i = 0; i < 2; ++i) {
    cw_test_worker_options_t o = {.devices = 2, .name = names[i], .extra_args = extra};
    if (cw_test_worker_start(&o, &g.w[i]) != 0) return -1;
  }
  cw_client_options_t co = {.peer_name = "ops-test"};
  cw_status_t st = cw_client_connect(g.ctl_address, &co, &g.client);
  Causeway__V1__SessionInfo* info = NULL;
  if (!st) st = open_named(g.client, "ops \"test\"", &info);
  if (st) {
    fprintf(stderr, "setup: %s\n", cw_status_message(st));
    cw_status_free(st);
    return -1;
  }
  g.session = info->session_id;
  if (strcmp(info->name, "ops \"test\"") != 0) return -1;
  protobuf_c_message_free_unpacked(&info->base, NULL);
  return 0;
}

static int group_teardown(void** state) {
  cw_client_release(g.client);
  int rc = 0;
  for (int i = 0; i < 2; ++i) {
    if (g.w[i].process.pid && cw_test_worker_stop(&g.w[i], 30000) != 0) rc = -1;
  }
  if (g.ctl.pid && cw_test_process_stop(&g.ctl, 30000) != 0) rc = -1;
  return rc;
}

static void test_status_counts_a_direct_upload(void** state) {
  Causeway__V1__AdminStatus* st = admin_status();
  assert_int_equal(st->n_workers, 2);
  assert_int_equal(st->n_islands, 2);
  const Causeway__V1__AdminSession* s = find_session(st, g.session);
  assert_non_null(s);
  assert_string_equal(s->name, "ops \"test\"");
  assert_string_equal(s->client_host, "test-host");
  assert_int_equal(s->client_pid, 4242);
  assert_int_equal(s->n_devices, 4);
  assert_int_equal(s->buffers, 0);
  const char* addr = find_worker(st, "ops-b")->address;
  char address[256];
  snprintf(address, sizeof(address), "%s", addr);
  protobuf_c_message_free_unpacked(&st->base, NULL);

  // 3 floats straight to ops-b in the session, as the plugin uploads.
  cw_client_t* direct = NULL;
  cw_client_options_t o = {.peer_name = "ops-direct", .session_id = g.session};
  ASSERT_OK(cw_client_connect(address, &o, &direct));
  float data[3] = {1, 2, 3};
  int64_t dims[1] = {3};
  ASSERT_OK(cw_client_upload(direct, 77, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1, NULL, 0, data,
                             sizeof(data), NULL, NULL));
  ASSERT_OK(cw_client_flush(direct));
  st = admin_status();
  s = find_session(st, g.session);
  assert_int_equal(s->buffers, 1);
  assert_int_equal(s->buffer_bytes, 12);
  const Causeway__V1__AdminWorker* w = find_worker(st, "ops-b");
  assert_int_equal(w->buffers, 1);
  assert_int_equal(w->buffer_bytes, 12);
  assert_true(w->stats_fresh);
  assert_string_equal(w->state, "alive");
  protobuf_c_message_free_unpacked(&st->base, NULL);
  cw_client_release(direct);
}

// max_age_ms: the numbers of the controller's last poll (once a second),
// at once, saying how old they are; the buffer of the test above is in them.
static void test_status_from_the_last_poll(void** state) {
  Causeway__V1__AdminStatus* st = NULL;
  for (int i = 0; i < 200; ++i) {  // until a poll has ended
    st = admin_status_aged(60000);
    if (st->stats_age_ms > 0) break;
    protobuf_c_message_free_unpacked(&st->base, NULL);
    st = NULL;
    cw_test_sleep_ms(50);
  }
  assert_non_null(st);
  assert_true(st->stats_age_ms <= 60000);
  const Causeway__V1__AdminWorker* w = find_worker(st, "ops-b");
  assert_int_equal(w->buffers, 1);
  assert_int_equal(w->buffer_bytes, 12);
  assert_true(w->stats_fresh);
  assert_int_equal(find_session(st, g.session)->buffers, 1);
  protobuf_c_message_free_unpacked(&st->base, NULL);
  st = admin_status();  // a round of its own
  assert_int_equal(st->stats_age_ms, 0);
  assert_int_equal(find_worker(st, "ops-b")->buffers, 1);
  protobuf_c_message_free_unpacked(&st->base, NULL);
}

static void test_pause_resume_and_errors(void** state) {
  Causeway__V1__AdminAck* ack = NULL;
  ASSERT_OK(admin_session(CW_MSG_ADMIN_PAUSE, 0, "ops \"test\"", &ack));
  assert_int_equal(ack->session_id, g.session);
  assert_non_null(strstr(ack->text, "paused"));
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  ASSERT_OK(admin_session(CW_MSG_ADMIN_PAUSE, g.session, NULL, &ack));  // idempotent
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  Causeway__V1__AdminStatus* st = admin_status();
  assert_true(find_session(st, g.session)->paused);
  protobuf_c_message_free_unpacked(&st->base, NULL);
  ASSERT_OK(admin_session(CW_MSG_ADMIN_RESUME, g.session, NULL, &ack));
  assert_non_null(strstr(ack->text, "resumed"));
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  st = admin_status();
  assert_false(find_session(st, g.session)->paused);
  protobuf_c_message_free_unpacked(&st->base, NULL);

  expect_error(admin_session(CW_MSG_ADMIN_PAUSE, 123, NULL, &ack), CW_NOT_FOUND,
               "session 123 not found; open sessions: ");
  expect_error(admin_session(CW_MSG_ADMIN_RESUME, 0, "nobody", &ack), CW_NOT_FOUND,
               "session 'nobody' not found");
  // A name two sessions share names neither: the id is asked for.
  cw_client_t* twin = NULL;
  cw_client_options_t to = {.peer_name = "ops-twin"};
  ASSERT_OK(cw_client_connect(g.ctl_address, &to, &twin));
  Causeway__V1__SessionInfo* twin_info = NULL;
  ASSERT_OK(open_named(twin, "ops \"test\"", &twin_info));
  protobuf_c_message_free_unpacked(&twin_info->base, NULL);
  expect_error(admin_session(CW_MSG_ADMIN_PAUSE, 0, "ops \"test\"", &ack), CW_INVALID_ARGUMENT,
               "names 2 sessions; give its id");
  cw_client_release(twin);
  expect_error(admin_drain(CW_MSG_ADMIN_DRAIN, "ops-z", &ack), CW_NOT_FOUND,
               "worker 'ops-z' not found; workers: ops-a, ops-b");
  // The refusals are recent errors, oldest first.
  st = admin_status();
  assert_true(st->n_recent_errors >= 3);
  const Causeway__V1__AdminError* last = st->recent_errors[st->n_recent_errors - 1];
  assert_non_null(strstr(last->message, "ops-z"));
  assert_non_null(strstr(last->where, "ADMIN_DRAIN"));
  assert_int_equal(last->code, CW_NOT_FOUND);
  protobuf_c_message_free_unpacked(&st->base, NULL);

  // Only the controller may tell a worker to hold.
  st = admin_status();
  char address[256];
  snprintf(address, sizeof(address), "%s", find_worker(st, "ops-a")->address);
  protobuf_c_message_free_unpacked(&st->base, NULL);
  cw_client_t* direct = NULL;
  cw_client_options_t o = {.peer_name = "ops-rogue", .session_id = g.session};
  ASSERT_OK(cw_client_connect(address, &o, &direct));
  Causeway__V1__AdminHoldRequest hold = CAUSEWAY__V1__ADMIN_HOLD_REQUEST__INIT;
  hold.session_id = g.session;
  hold.hold = true;
  expect_error(cw_client_call(direct, CW_MSG_ADMIN_HOLD, &hold.base, NULL, 0, NULL, NULL, NULL),
               CW_PERMISSION_DENIED, "ADMIN_HOLD is for the controller");
  cw_client_release(direct);
}

static void test_drain_refuses_new_work_and_reports_idle(void** state) {
  Causeway__V1__AdminAck* ack = NULL;
  ASSERT_OK(admin_drain(CW_MSG_ADMIN_DRAIN, "ops-b", &ack));
  assert_non_null(strstr(ack->text, "worker ops-b is draining"));
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  Causeway__V1__AdminStatus* st = admin_status();
  const Causeway__V1__AdminWorker* w = find_worker(st, "ops-b");
  assert_string_equal(w->state, "idle");  // it held nothing
  char address[256];
  snprintf(address, sizeof(address), "%s", w->address);
  protobuf_c_message_free_unpacked(&st->base, NULL);

  cw_client_t* direct = NULL;
  cw_client_options_t o = {.peer_name = "ops-direct", .session_id = g.session};
  ASSERT_OK(cw_client_connect(address, &o, &direct));
  float data[2] = {5, 6}, back[3] = {0};
  int64_t dims[1] = {2};
  ASSERT_OK(cw_client_upload(direct, 78, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1, NULL, 0, data,
                             sizeof(data), NULL, NULL));
  expect_error(cw_client_flush(direct), CW_FAILED_PRECONDITION,
               "worker ops-b is draining: it takes no new UPLOAD");
  // What it holds can still be fetched; the refused id says why it is missing.
  size_t size = 0;
  ASSERT_OK(cw_client_download(direct, 77, back, sizeof(back), &size, NULL));
  assert_int_equal(size, 12);
  assert_true(back[2] == 3.0f);
  expect_error(cw_client_download(direct, 78, back, sizeof(back), &size, NULL),
               CW_FAILED_PRECONDITION, "worker ops-b is draining");
  cw_client_release(direct);

  // A new session does not get its devices.
  cw_client_t* other = NULL;
  cw_client_options_t co = {.peer_name = "ops-late"};
  ASSERT_OK(cw_client_connect(g.ctl_address, &co, &other));
  Causeway__V1__SessionInfo* info = NULL;
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = 1;
  ASSERT_OK(cw_client_call(other, CW_MSG_OPEN_SESSION, &req.base, NULL, 0, NULL,
                           (ProtobufCMessage**)&info, NULL));
  assert_int_equal(info->n_workers, 1);
  assert_string_equal(info->workers[0]->name, "ops-a");
  assert_int_equal(info->n_devices, 2);
  assert_true(info->name[0] != 0);  // a default name
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_release(other);

  ASSERT_OK(admin_drain(CW_MSG_ADMIN_UNDRAIN, "ops-b", &ack));
  assert_non_null(strstr(ack->text, "takes work again"));
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  st = admin_status();
  assert_string_equal(find_worker(st, "ops-b")->state, "alive");
  protobuf_c_message_free_unpacked(&st->base, NULL);
}

// A worker that stops answering holds up neither the controller's polls nor
// --max-age: later polls skip it while its STATS is unanswered, and its
// numbers are listed as not fresh (while it is still alive); nor a PAUSE,
// answered DEADLINE_EXCEEDED after 10 s.
static void test_a_silent_worker_does_not_hold_up_max_age(void** state) {
  assert_int_equal(kill(g.w[1].process.pid, SIGSTOP), 0);
  bool seen = false;
  time_t until = time(NULL) + 20;  // polls run every second
  while (!seen && time(NULL) < until) {
    Causeway__V1__AdminStatus* st = admin_status_aged(2000);
    const Causeway__V1__AdminWorker* b = find_worker(st, "ops-b");
    seen = st->stats_age_ms > 0 && !b->stats_fresh && !strcmp(b->state, "alive") &&
           find_worker(st, "ops-a")->stats_fresh;
    protobuf_c_message_free_unpacked(&st->base, NULL);
    if (!seen) cw_test_sleep_ms(50);
  }
  // A pause fanned out while ops-b is silent: answered at the fan-out's
  // deadline, naming how many did not answer; ops-b holds the session once
  // it reads the request, and a resume then reaches both.
  int64_t t0 = cw_time_now_ms();
  Causeway__V1__AdminAck* ack = NULL;
  expect_error(admin_session(CW_MSG_ADMIN_PAUSE, g.session, NULL, &ack), CW_DEADLINE_EXCEEDED,
               "ADMIN_PAUSE: 1 of 2 workers did not answer within 10000 ms");
  int64_t waited = cw_time_now_ms() - t0;
  assert_true(waited >= 9000);  // not before the fan-out's deadline
  assert_int_equal(kill(g.w[1].process.pid, SIGCONT), 0);
  assert_true(seen);
  ASSERT_OK(admin_session(CW_MSG_ADMIN_RESUME, g.session, NULL, &ack));
  assert_non_null(strstr(ack->text, "resumed"));
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  Causeway__V1__AdminStatus* st = admin_status();
  assert_false(find_session(st, g.session)->paused);
  protobuf_c_message_free_unpacked(&st->base, NULL);
}

static void test_worker_loss_is_listed(void** state) {
  assert_int_equal(cw_test_worker_stop(&g.w[1], 30000), 0);
  memset(&g.w[1], 0, sizeof(g.w[1]));
  Causeway__V1__AdminStatus* st = NULL;
  for (int i = 0; i < 200; ++i) {
    st = admin_status();
    if (!strcmp(find_worker(st, "ops-b")->state, "dead")) break;
    protobuf_c_message_free_unpacked(&st->base, NULL);
    st = NULL;
    cw_test_sleep_ms(50);
  }
  assert_non_null(st);
  const Causeway__V1__AdminError* last = st->recent_errors[st->n_recent_errors - 1];
  assert_non_null(strstr(last->message, "worker ops-b"));
  assert_int_equal(last->code, CW_UNAVAILABLE);
  expect_error(admin_drain(CW_MSG_ADMIN_DRAIN, "ops-b", NULL), CW_FAILED_PRECONDITION,
               "worker ops-b");
  protobuf_c_message_free_unpacked(&st->base, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_counts_a_direct_upload),
      cmocka_unit_test(test_status_from_the_last_poll),
      cmocka_unit_test(test_pause_resume_and_errors),
      cmocka_unit_test(test_drain_refuses_new_work_and_reports_idle),
      cmocka_unit_test(test_a_silent_worker_does_not_hold_up_max_age),
      cmocka_unit_test(test_worker_loss_is_listed),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
