// The worker under a controller, against real daemons: seq ordering across
// two connections of one session (held UPLOAD bytes, the empty DELETE that
// fills a hole, duplicates, held requests at shutdown), EXE_INFO (pending,
// ready, unknown), and REGISTER with --exit-with-controller.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_client.h"
#include "cw_test_util.h"

#define ASSERT_OK CW_TEST_ASSERT_OK

static void assert_code(cw_status_t st, cw_status_code_t code) {
  if (cw_status_code(st) != code) {
    fprintf(stderr, "want %s, got %s: %s\n", cw_status_code_name(code),
            cw_status_code_name(cw_status_code(st)), st ? cw_status_message(st) : "OK");
  }
  assert_int_equal(cw_status_code(st), code);
  cw_status_free(st);
}

static const char kProgram[] =
    "module @cw_exe_info {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<i32>) {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>\n"
    "    %1 = stablehlo.constant dense<7> : tensor<i32>\n"
    "    return %0, %1 : tensor<2x3xf32>, tensor<i32>\n"
    "  }\n"
    "}\n";

static cw_test_worker_t g_worker;

static int setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return -1;
  cw_test_worker_options_t o = {.devices = 2, .name = "cluster-test"};
  return cw_test_worker_start(&o, &g_worker);
}

static int teardown(void** state) {
  (void)state;
  // Exit status 0 after SIGTERM (under ASan: no leaks, held requests freed).
  int rc = cw_test_worker_stop(&g_worker, 30000);
  if (rc != 0) fprintf(stderr, "worker exit status %d\n", rc);
  return rc == 0 ? 0 : -1;
}

static cw_status_t connect_as(int role, uint64_t session, cw_client_t** out) {
  cw_client_options_t o = {.session_id = session, .peer_name = "cluster-test", .role = role};
  return cw_client_connect(g_worker.address, &o, out);
}

static cw_status_t send_upload(cw_client_t* c, uint64_t id, uint64_t seq, const float* data,
                               uint64_t* out_rid) {
  int64_t dims[] = {2, 3};
  Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  up.buffer_id = id;
  up.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  up.dims = dims;
  up.n_dims = 2;
  up.seq = seq;
  struct iovec iov = {(void*)data, 6 * sizeof(float)};
  return cw_client_send(c, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, NULL, NULL, out_rid);
}

static cw_status_t send_delete(cw_client_t* c, const uint64_t* ids, size_t n, uint64_t seq,
                               uint64_t* out_rid) {
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.ids = (uint64_t*)ids;
  d.n_ids = n;
  d.seq = seq;
  return cw_client_send(c, CW_MSG_DELETE, &d.base, NULL, 0, NULL, NULL, NULL, out_rid);
}

static void test_seq_across_connections(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &direct));
  uint64_t session = cw_client_session_id(direct);
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, session, &relay));
  assert_int_equal(cw_client_session_id(relay), session);

  // 2 and 3 come first: held (2 with its bytes); 1 is the hole.
  float data[6] = {1, 2, 3, 4, 5, 6};
  uint64_t up_rid = 0, dl_rid = 0, del_rid = 0;
  ASSERT_OK(send_upload(direct, 101, 2, data, &up_rid));
  float got[6] = {0};
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 101;
  dl.seq = 3;
  cw_client_sink_t sink = {got, sizeof(got)};
  ASSERT_OK(cw_client_send(direct, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, NULL, NULL,
                           &dl_rid));
  ASSERT_OK(cw_client_ping(direct));  // both arrived and wait
  // The plugin's hole filler after an error on the relaying path.
  ASSERT_OK(send_delete(relay, NULL, 0, 1, &del_rid));
  ASSERT_OK(cw_client_wait(relay, del_rid, NULL, NULL));
  ASSERT_OK(cw_client_wait(direct, up_rid, NULL, NULL));
  uint64_t n = 0;
  ASSERT_OK(cw_client_wait(direct, dl_rid, NULL, &n));
  assert_int_equal(n, sizeof(data));
  assert_memory_equal(got, data, sizeof(data));

  // Duplicates: below next, and one already waiting. (UPLOAD and AWAIT are
  // for clients: the message table refuses them from a controller link.)
  uint64_t rid = 0;
  ASSERT_OK(send_upload(relay, 102, 2, data, &rid));
  assert_code(cw_client_wait(relay, rid, NULL, NULL), CW_PERMISSION_DENIED);
  ASSERT_OK(send_upload(direct, 102, 2, data, &rid));
  assert_code(cw_client_wait(direct, rid, NULL, NULL), CW_INVALID_ARGUMENT);
  ASSERT_OK(send_delete(direct, (uint64_t[]){101}, 1, 6, &del_rid));  // held
  // Once the PING is answered the DELETE above is held: only then is the one
  // on the other connection surely the duplicate (else the two race, and the
  // loser was the one this test waits for: an intermittent hang).
  ASSERT_OK(cw_client_ping(direct));
  ASSERT_OK(send_delete(relay, (uint64_t[]){101}, 1, 6, &rid));
  assert_code(cw_client_wait(relay, rid, NULL, NULL), CW_INVALID_ARGUMENT);
  // seq 0 is unordered: applies at once, whatever waits.
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 101;
  ASSERT_OK(cw_client_call(direct, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL));
  // 4 and 5 release the held DELETE (6).
  ASSERT_OK(send_delete(relay, NULL, 0, 5, &rid));
  ASSERT_OK(send_delete(direct, NULL, 0, 4, &rid));
  ASSERT_OK(cw_client_wait(direct, del_rid, NULL, NULL));
  assert_code(cw_client_call(direct, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);

  // Held at the end (its predecessor never comes): freed with the session.
  ASSERT_OK(send_upload(direct, 103, 9, data, &rid));
  ASSERT_OK(cw_client_ping(direct));
  cw_client_release(relay);
  cw_client_release(direct);  // the held UPLOAD fails UNAVAILABLE here
}

// More requests wait for their seq than max-held-requests (4 here): the worker
// stops reading that connection instead of refusing one (which would leave a
// hole nobody fills), and reads it again once the late predecessor arrived on
// another connection. Before, the sixth was refused RESOURCE_EXHAUSTED.
static void test_seq_flow_control(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &direct));
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, cw_client_session_id(direct),
                       &relay));
  enum { kN = 300 };
  static uint64_t rids[kN + 1];
  float data[6] = {1, 2, 3, 4, 5, 6};
  // 2..kN on one connection (an UPLOAD among them), 1 late on the other.
  for (uint64_t s = 2; s <= kN; ++s) {
    if (s == 50) ASSERT_OK(send_upload(direct, 201, s, data, &rids[s]));
    else ASSERT_OK(send_delete(direct, NULL, 0, s, &rids[s]));
  }
  usleep(200 * 1000);  // they arrived (or wait in the socket)
  ASSERT_OK(send_delete(relay, NULL, 0, 1, &rids[1]));
  ASSERT_OK(cw_client_wait(relay, rids[1], NULL, NULL));
  for (uint64_t s = 2; s <= kN; ++s) ASSERT_OK(cw_client_wait(direct, rids[s], NULL, NULL));
  // The connection is read again: the next one applies at once.
  uint64_t rid = 0;
  ASSERT_OK(send_delete(direct, (uint64_t[]){201}, 1, kN + 1, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));
  cw_client_release(relay);
  cw_client_release(direct);
}

static void test_exe_info(void** state) {
  (void)state;
  cw_client_t* c = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &c));
  // EXE_INFO right behind COMPILE waits for it.
  Causeway__V1__CompileRequest cr = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  cr.exe_id = 7;
  cr.format = (char*)"mlir";
  cr.code.data = (uint8_t*)kProgram;
  cr.code.len = sizeof(kProgram) - 1;
  uint64_t crid = 0, irid = 0;
  ASSERT_OK(cw_client_send(c, CW_MSG_COMPILE, &cr.base, NULL, 0, NULL, NULL, NULL, &crid));
  Causeway__V1__ExeInfoRequest er = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  er.exe_id = 7;
  ASSERT_OK(cw_client_send(c, CW_MSG_EXE_INFO, &er.base, NULL, 0, NULL, NULL, NULL, &irid));
  ProtobufCMessage* rep = NULL;
  ASSERT_OK(cw_client_wait(c, irid, &rep, NULL));
  ASSERT_OK(cw_client_wait(c, crid, NULL, NULL));
  const Causeway__V1__ExecutableInfo* info = (const Causeway__V1__ExecutableInfo*)rep;
  fprintf(stderr, "  EXE_INFO: name %s, %u replicas, %u partitions, %u outputs, program %zu "
          "bytes (%s), fingerprint '%s', %zu memory kinds\n", info->name, info->num_replicas,
          info->num_partitions, info->num_outputs, info->optimized_program.len,
          info->optimized_program_format, info->fingerprint, info->n_output_memory_kinds);
  assert_int_equal(info->exe_id, 7);
  assert_int_equal(info->num_replicas, 1);
  assert_int_equal(info->num_partitions, 1);
  assert_int_equal(info->num_outputs, 2);
  assert_int_equal(info->n_output_dtypes, 2);
  assert_int_equal(info->output_dtypes[0], CAUSEWAY__V1__DTYPE__DTYPE_F32);
  assert_int_equal(info->output_dtypes[1], CAUSEWAY__V1__DTYPE__DTYPE_S32);
  assert_int_equal(info->n_output_dims, 2);
  assert_int_equal(info->output_dims[0]->n_values, 2);
  assert_int_equal(info->output_dims[0]->values[0], 2);
  assert_int_equal(info->output_dims[0]->values[1], 3);
  assert_int_equal(info->output_dims[1]->n_values, 0);
  assert_int_equal(info->n_devices, 1);
  assert_int_equal(info->devices[0], 0);
  assert_true(info->optimized_program.len > 0);
  assert_true(info->name[0] != 0);
  protobuf_c_message_free_unpacked(rep, NULL);
  er.exe_id = 8;
  assert_code(cw_client_call(c, CW_MSG_EXE_INFO, &er.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);
  cw_client_release(c);
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

// Gang order (cw_worker_sched.c): stamped launches from two sessions'
// controller connections are issued in stamp order whatever order they
// arrive in; a stamp refused before its turn passes its turn; a client's own
// stamp is ignored; a stamp that never comes holds the rest only for the
// stall time. Asserts on replies and on the worker's Stats.sched_stamps.
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
  int64_t dims[] = {2, 3};
  Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  up.buffer_id = 101;
  up.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  up.dims = dims;
  up.n_dims = 2;
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

// The worker's record: n entries of (stamp, session).
static size_t record(uint64_t* stamps, uint64_t* sessions, size_t cap) {
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(g_worker.address, NULL, &c));
  Causeway__V1__Stats* st = NULL;
  ASSERT_OK(cw_client_stats(c, &st));
  size_t n = st->n_sched_stamps < cap ? st->n_sched_stamps : cap;
  for (size_t i = 0; i < n; ++i) {
    stamps[i] = st->sched_stamps[i]->stamp;
    sessions[i] = st->sched_stamps[i]->session_id;
  }
  protobuf_c_message_free_unpacked(&st->base, NULL);
  cw_client_release(c);
  return n;
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
  assert_int_equal(record(stamps, sessions, 16), 0);
  uint64_t r1 = launch(a.link, 1, 201, false);
  ASSERT_OK(cw_client_wait(a.link, r1, NULL, NULL));
  ASSERT_OK(cw_client_wait(b.link, r2, NULL, NULL));
  assert_int_equal(record(stamps, sessions, 16), 2);
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
  assert_int_equal(record(stamps, sessions, 16), 2);
  uint64_t r3 = launch(b.link, 3, 203, false);
  ASSERT_OK(cw_client_wait(b.link, r3, NULL, NULL));
  ASSERT_OK(cw_client_wait(a.link, r5, NULL, NULL));
  assert_int_equal(record(stamps, sessions, 16), 5);
  for (size_t i = 0; i < 5; ++i) assert_int_equal(stamps[i], i + 1);
  assert_int_equal(sessions[3], b.id);

  // A client's own stamp counts for nothing: it runs at once, unrecorded.
  uint64_t rc = launch(a.client, 100, 206, false);
  ASSERT_OK(cw_client_wait(a.client, rc, NULL, NULL));
  assert_int_equal(record(stamps, sessions, 16), 5);

  // 6 never comes: 7 waits the stall time (5 s), then goes.
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t r7 = launch(a.link, 7, 207, false);
  ASSERT_OK(cw_client_wait(a.link, r7, NULL, NULL));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "  stamp 7 went after %.1f s without stamp 6\n", waited);
  assert_true(waited > 3.0);
  assert_int_equal(record(stamps, sessions, 16), 6);
  assert_int_equal(stamps[5], 7);
  session_close(&a);
  session_close(&b);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  setenv("CAUSEWAY_MAX_HELD_REQUESTS", "4", 1);  // inherited by the workers
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_seq_across_connections),
      cmocka_unit_test(test_seq_flow_control),
      cmocka_unit_test(test_exe_info),
      cmocka_unit_test(test_register_and_exit_with_controller),
      cmocka_unit_test(test_stamp_order),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
