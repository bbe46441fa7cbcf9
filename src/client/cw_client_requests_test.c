// Unit tests of the typed helpers (cw_client_requests.c): what they refuse
// locally and how they encode; against the fake peer.
#include <sys/uio.h>

#include "cw_client_fake_peer.h"

static void script_check_local_refusal(fake_t* f) {
  // The refused upload must not reach the wire: the first frame is the PING.
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  bool is_ping = fr.h.type == CW_MSG_PING;
  fake_reply(f, &fr, fr.msg, NULL, 0);
  frame_free(&fr);
  FCHECK(f, is_ping);
  script_echo(f);
}

static void test_upload_size_mismatch(void** state) {
  fake_t f = {0};
  fake_start(&f, script_check_local_refusal);
  cw_client_t* c = connect_ok(&f);
  int64_t dims[2] = {2, 3};
  float data[6] = {0};
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  expect_status(cw_client_upload(c, 1, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, NULL, 0, data,
                                 20, rec_done, &rec),
                CW_INVALID_ARGUMENT, "24");
  expect_status(cw_client_upload(c, 1, 9999, dims, 2, NULL, 0, data, 24, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  // Bulk on a request type that carries none is refused locally too.
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  struct iovec iov = {data, 4};
  expect_status(cw_client_send(c, CW_MSG_PING, &p.base, &iov, 1, NULL, NULL, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  // So is a request whose message does not match its type, and HELLO.
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  expect_status(cw_client_send(c, CW_MSG_PING, &ack.base, NULL, 0, NULL, NULL, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  expect_status(cw_client_send(c, CW_MSG_HELLO, &p.base, NULL, 0, NULL, NULL, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  assert_ok(cw_client_ping(c));
  // A matching size with explicit strides goes through.
  int64_t strides[2] = {12, 4};
  assert_ok(cw_client_upload(c, 1, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, strides, 0, data, 24,
                             rec_done, &rec));
  assert_ok(cw_client_flush(c));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_OK);
  cw_client_release(c);
  fake_join(&f);
}

static void script_check_launch(fake_t* f) {
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.type == CW_MSG_LAUNCH);
  const Causeway__V1__LaunchRequest* l = (const Causeway__V1__LaunchRequest*)fr.msg;
  bool ok = l->exe_id == 100 && l->n_args == 2 && l->n_outputs == 2 && l->args[0]->n_ids == 2 &&
            l->args[1]->ids[1] == 22 && l->outputs[1]->n_ids == 1 && l->outputs[1]->ids[0] == 31;
  fake_ack(f, &fr);
  frame_free(&fr);
  FCHECK(f, ok);
  script_echo(f);
}

static void test_launch_encoding(void** state) {
  fake_t f = {0};
  fake_start(&f, script_check_launch);
  cw_client_t* c = connect_ok(&f);
  const uint64_t a0[2] = {11, 12}, a1[2] = {21, 22}, o0[1] = {30}, o1[1] = {31};
  const uint64_t* args[2] = {a0, a1};
  const uint64_t* outs[2] = {o0, o1};
  assert_ok(cw_client_launch(c, 100, 2, 2, args, 1, outs, NULL, NULL));
  assert_ok(cw_client_flush(c));
  cw_client_release(c);
  fake_join(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_upload_size_mismatch),
      cmocka_unit_test(test_launch_encoding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
