// Cross-session isolation (issue 4 item 6): two real sessions on one real
// controller and worker (XLA's CPU plugin), driven through the C client
// library. Object ids are per session: both sessions use the SAME numbers
// (buffers 5 and 7, executable 9) for their own objects, and a session that
// names an id only the other one holds -- in DOWNLOAD, DELETE, a LAUNCH
// argument or executable, COPY, SEND, AWAIT on the worker; LAUNCH, DELETE,
// EXE_INFO on the controller -- gets NOT_FOUND naming that id, while the
// owner's object is untouched (its bytes still download intact, its
// executable still runs). Session ids are random: joining a neighbouring id
// reaches a new, empty session.
//
// Program: scalar_f32 of tests/gen_programs.py (x * y + 1), the `programs`
// fixture; its options name device 0, which is global and local device 0.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client.h"
#include "cw_frame.h"
#include "cw_test_launch.h"
#include "cw_test_util.h"

#define F32 CAUSEWAY__V1__DTYPE__DTYPE_F32

#define ASSERT_OK CW_TEST_ASSERT_OK

static struct {
  cw_test_process_t ctl;
  char ctl_address[512];
  cw_test_worker_t worker;
  void* program;
  size_t program_size;
  void* options;
  size_t options_size;
} g;

// Expects `s` to be NOT_FOUND with `id` in its message (takes `s`).
static void expect_not_found(cw_status_t s, uint64_t id, const char* what) {
  if (cw_status_is_ok(s)) fail_msg("%s: succeeded, expected NOT_FOUND naming %" PRIu64, what, id);
  char idtext[32];
  snprintf(idtext, sizeof(idtext), "%" PRIu64, id);
  const char* msg = cw_status_message(s);
  fprintf(stderr, "  %s -> %s\n", what, msg);
  int code = cw_status_code(s);
  bool names = strstr(msg, idtext) != NULL;
  cw_status_free(s);
  assert_int_equal(code, CW_NOT_FOUND);
  if (!names) fail_msg("%s: the error does not name id %s", what, idtext);
}

static cw_client_t* connect_to(const char* address, const char* name, uint64_t session) {
  cw_client_options_t o = {.peer_name = name, .session_id = session};
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(address, &o, &c));
  return c;
}

static void upload_scalar(cw_client_t* c, uint64_t id, float v) {
  ASSERT_OK(cw_client_upload(c, id, F32, NULL, 0, NULL, 0, &v, sizeof(v), NULL, NULL));
  ASSERT_OK(cw_client_flush(c));
}

static cw_status_t download_scalar(cw_client_t* c, uint64_t id, float* out) {
  size_t size = 0;
  cw_status_t s = cw_client_download(c, id, out, sizeof(*out), &size, NULL);
  if (cw_status_is_ok(s) && size != sizeof(*out)) {
    return cw_make_status(CW_INTERNAL, "downloaded %zu bytes", size);
  }
  return s;
}

static float scalar_of(cw_client_t* c, uint64_t id) {
  float v = -1;
  ASSERT_OK(download_scalar(c, id, &v));
  return v;
}

// LAUNCH of `exe` on one device with args {a0, a1} -> {out}, waited for.
static cw_status_t launch1(cw_client_t* c, uint64_t exe, uint64_t a0, uint64_t a1,
                           uint64_t out) {
  uint64_t args[2] = {a0, a1};
  cw_test_launch_t l;
  cw_test_launch_build(&l, exe, args, 2, out, 0);
  ProtobufCMessage* rep = NULL;
  cw_status_t s = cw_client_call(c, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return s;
}

static cw_status_t call_simple(cw_client_t* c, uint16_t type, const ProtobufCMessage* m) {
  ProtobufCMessage* rep = NULL;
  cw_status_t s = cw_client_call(c, type, m, NULL, 0, NULL, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return s;
}

static cw_status_t delete1(cw_client_t* c, uint64_t id) {
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.ids = &id;
  d.n_ids = 1;
  return call_simple(c, CW_MSG_DELETE, &d.base);
}

static cw_status_t compile_exe(cw_client_t* c, uint64_t exe) {
  return cw_client_compile(c, exe, "mlir", g.program, g.program_size, g.options, g.options_size,
                           NULL);
}

// ---- Setup ---------------------------------------------------------------------

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (cw_test_read_program("scalar_f32", &g.program, &g.program_size, &g.options,
                           &g.options_size) != 0) {
    return -1;
  }
  if (cw_test_controller_start(NULL, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    return -1;
  }
  const char* extra[] = {"--controller", g.ctl_address, NULL};
  cw_test_worker_options_t o = {.devices = 1, .name = "iso-worker", .extra_args = extra};
  return cw_test_worker_start(&o, &g.worker) ? -1 : 0;
}

static int group_teardown(void** state) {
  (void)state;
  int rc = 0;
  if (g.worker.process.pid && cw_test_worker_stop(&g.worker, 30000) != 0) rc = -1;
  if (g.ctl.pid && cw_test_process_stop(&g.ctl, 30000) != 0) rc = -1;
  free(g.program);
  free(g.options);
  return rc;
}

// ---- Worker objects --------------------------------------------------------------

static void test_worker_objects_are_per_session(void** state) {
  (void)state;
  cw_client_t* a = connect_to(g.worker.address, "iso-a", 0);
  cw_client_t* b = connect_to(g.worker.address, "iso-b", 0);
  uint64_t sa = cw_client_session_id(a), sb = cw_client_session_id(b);
  assert_true(sa != 0 && sb != 0 && sa != sb);

  // Same ids, different objects: A's 5 and B's 5; 7 and executable 9 only in A.
  upload_scalar(a, 5, 2.0f);
  upload_scalar(a, 6, 10.0f);
  upload_scalar(a, 7, 3.0f);
  upload_scalar(b, 5, 100.0f);
  upload_scalar(b, 6, 1000.0f);
  ASSERT_OK(compile_exe(a, 9));
  assert_true(scalar_of(b, 5) == 100.0f);
  assert_true(scalar_of(a, 5) == 2.0f);

  float v = 0;
  expect_not_found(download_scalar(b, 7, &v), 7, "B downloads A's buffer 7");
  expect_not_found(cw_client_await(b, 7), 7, "B awaits A's buffer 7");
  expect_not_found(delete1(b, 7), 7, "B deletes A's buffer 7");
  Causeway__V1__CopyRequest cp = CAUSEWAY__V1__COPY_REQUEST__INIT;
  cp.src_id = 7;
  cp.dst_id = 70;
  expect_not_found(call_simple(b, CW_MSG_COPY, &cp.base), 7, "B copies A's buffer 7");
  // B's copy target 70 is a future that carries the copy's error.
  expect_not_found(download_scalar(b, 70, &v), 7, "B downloads its copy target 70");
  Causeway__V1__SendRequest sr = CAUSEWAY__V1__SEND_REQUEST__INIT;
  sr.src_id = 7;
  sr.peer_address = g.worker.address;
  sr.dst_id = 71;
  sr.dst_session = sb;
  expect_not_found(call_simple(b, CW_MSG_SEND, &sr.base), 7, "B sends A's buffer 7");
  // A's executable 9 from B; then A's buffer as an argument of B's own 9.
  expect_not_found(launch1(b, 9, 5, 6, 72), 9, "B launches A's executable 9");
  ASSERT_OK(compile_exe(b, 9));  // B's own executable 9
  expect_not_found(launch1(b, 9, 7, 6, 73), 7, "B launches with A's buffer 7 as an argument");

  // Each session's 9 runs on its own 5 and 6: x * y + 1.
  ASSERT_OK(launch1(b, 9, 5, 6, 8));
  ASSERT_OK(launch1(a, 9, 5, 6, 8));
  assert_true(scalar_of(b, 8) == 100.0f * 1000.0f + 1.0f);
  assert_true(scalar_of(a, 8) == 2.0f * 10.0f + 1.0f);
  // B deleting its own 5 leaves A's 5; A's 7 is intact after all of B's tries.
  ASSERT_OK(delete1(b, 5));
  assert_true(scalar_of(a, 5) == 2.0f);
  assert_true(scalar_of(a, 7) == 3.0f);
  expect_not_found(download_scalar(b, 5, &v), 5, "B's deleted 5");

  // A neighbouring session id is another, empty session, not A's.
  cw_client_t* guess = connect_to(g.worker.address, "iso-guess", sa + 1);
  assert_true(cw_client_session_id(guess) != sa);
  expect_not_found(download_scalar(guess, 7, &v), 7, "a guessed session downloads 7");
  cw_client_release(guess);

  cw_client_release(b);
  assert_true(scalar_of(a, 7) == 3.0f);  // B's end freed only B's objects
  cw_client_release(a);
}

// ---- Controller executables ----------------------------------------------------------

static cw_client_t* controller_session(const char* name) {
  cw_client_t* c = connect_to(g.ctl_address, name, 0);
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = 1;
  req.wait_ms = 30000;
  ASSERT_OK(call_simple(c, CW_MSG_OPEN_SESSION, &req.base));
  return c;
}

static cw_status_t exe_info(cw_client_t* c, uint64_t exe) {
  Causeway__V1__ExeInfoRequest r = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  r.exe_id = exe;
  return call_simple(c, CW_MSG_EXE_INFO, &r.base);
}

static void test_controller_executables_are_per_session(void** state) {
  (void)state;
  cw_client_t* a = controller_session("iso-ctl-a");
  cw_client_t* b = controller_session("iso-ctl-b");
  assert_true(cw_client_session_id(a) != cw_client_session_id(b));
  // A's buffers on the worker, in A's controller session.
  cw_client_t* aw = connect_to(g.worker.address, "iso-ctl-a-direct", cw_client_session_id(a));
  upload_scalar(aw, 5, 4.0f);
  upload_scalar(aw, 6, 5.0f);
  ASSERT_OK(compile_exe(a, 9));
  ASSERT_OK(compile_exe(a, 11));

  expect_not_found(exe_info(b, 9), 9, "B asks EXE_INFO of A's executable 9");
  expect_not_found(launch1(b, 9, 5, 6, 8), 9, "B launches A's executable 9 via the controller");
  expect_not_found(delete1(b, 11), 11, "B deletes A's executable 11 via the controller");

  // B's own 9 is B's; A's 9 and 11 still work.
  ASSERT_OK(compile_exe(b, 9));
  ASSERT_OK(exe_info(b, 9));
  ASSERT_OK(exe_info(a, 9));
  ASSERT_OK(exe_info(a, 11));
  ASSERT_OK(launch1(a, 11, 5, 6, 8));
  assert_true(scalar_of(aw, 8) == 4.0f * 5.0f + 1.0f);
  cw_client_release(aw);
  cw_client_release(b);
  cw_client_release(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worker_objects_are_per_session),
      cmocka_unit_test(test_controller_executables_are_per_session),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
