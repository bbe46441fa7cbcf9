// Controller health test: a real causeway-controller (--worker-timeout-ms
// 1000) and workers played by this test over the C client library (HELLO
// role WORKER, REGISTER, HEALTH_HEARTBEAT frames), so every step is exact:
//
// - a second REGISTER of a live worker's name is refused with ALREADY_EXISTS
//   naming both addresses;
// - a worker that sends no heartbeat is declared dead after the timeout: the
//   client's session gets WORKER_DOWN ("no heartbeat ...") and the controller
//   closes that worker's connection; STATS counts workers_timed_out;
// - a worker that heartbeats stays alive past the timeout (STATS heartbeats);
// - a same-name REGISTER with another device count is refused
//   (FAILED_PRECONDITION); a matching one takes the slot: RegisterReply has
//   replaced, incarnation 1 and the old first device id; the session gets
//   WORKER_UP with the new address and incarnation;
// - HEALTH_REJOIN: unknown worker INVALID_ARGUMENT, stale incarnation
//   UNAVAILABLE, the current one OK; from a worker PERMISSION_DENIED; of a
//   dead worker UNAVAILABLE with why it was lost;
// - with a real worker (XLA's CPU plugin): an executable compiled there is
//   LOADed into its replacement under the same id (STATS exes_reloaded,
//   EXE_INFO answered by the new worker), and the session's requests for it
//   are refused ("was replaced") until the client sent HEALTH_REJOIN; a
//   replacement on another CPU (--host-cpu) is not given it ("compiled for
//   the CPU of the lost worker") but the HEALTH_REJOIN's reply asks for its
//   program, which, sent again, compiles for that CPU into the same id; a
//   replacement lost while it LOADs that program leaves it asked for again
//   by the next HEALTH_REJOIN (not failed for good);
// - a worker stopped past the timeout that comes back in the same process
//   while a client connection keeps the session's old life there: the
//   reload and a join (fresh_session) get a fresh life (seq from 1, the
//   program loaded), and the old life's connection is closed;
// - REGISTER's island fields: a bad name or place, another size or platform
//   than the island's members, and a replacement claiming another place are
//   refused, naming the mismatch;
// - SIGTERM: the controller exits 0 (under ASan: no leaks).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "cw_client.h"
#include "cw_test_island.h"
#include "cw_test_launch.h"
#include "cw_test_util.h"

#define TIMEOUT_MS 1000

static struct {
  cw_test_process_t ctl;
  char address[512];
  cw_client_t* client;  // a client with a session
  pthread_mutex_t mu;
  int downs, ups;
  char last[512];
  char up_address[256];
  uint32_t up_incarnation;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_event(void* user, const ProtobufCMessage* msg) {
  const Causeway__V1__ClusterEvent* ev = (const Causeway__V1__ClusterEvent*)msg;
  pthread_mutex_lock(&g.mu);
  if (ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN) g.downs++;
  if (ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP) {
    g.ups++;
    snprintf(g.up_address, sizeof(g.up_address), "%s", ev->worker_address);
    g.up_incarnation = ev->incarnation;
  }
  snprintf(g.last, sizeof(g.last), "%s", ev->message);
  pthread_mutex_unlock(&g.mu);
}

static int events(int* counter) {
  pthread_mutex_lock(&g.mu);
  int n = *counter;
  pthread_mutex_unlock(&g.mu);
  return n;
}

static int wait_events(int* counter, int want, int timeout_ms) {
  int64_t end = cw_time_now_ms() + timeout_ms;
  while (events(counter) < want && cw_time_now_ms() < end) cw_test_sleep_ms(20);
  return events(counter);
}

// A pretend worker: HELLO role WORKER. *out is NULL on failure.
static void worker_connect(cw_client_t** out) {
  cw_client_options_t o = {.peer_name = "fake-worker", .role = CAUSEWAY__V1__ROLE__ROLE_WORKER};
  cw_status_t st = cw_client_connect(g.address, &o, out);
  if (st) fprintf(stderr, "worker connect: %s\n", cw_status_message(st));
  assert_null(st);
}

// REGISTER `name` at `address` with `devices` CPU devices.
static cw_status_t worker_register(cw_client_t* c, const char* name, const char* address,
                                   size_t devices, Causeway__V1__RegisterReply** out) {
  return cw_test_register(c, name, address, devices, -1, out);
}

static void heartbeat(cw_client_t* c) {
  Causeway__V1__HealthHeartbeat hb = CAUSEWAY__V1__HEALTH_HEARTBEAT__INIT;
  hb.sequence = 1;
  // No reply comes: the parked entry is freed with the client.
  assert_null(cw_client_send(c, CW_MSG_HEALTH_HEARTBEAT, &hb.base, NULL, 0, NULL, NULL, NULL,
                             NULL));
}

// *out_wanted (optional): the first program the reply asks for again, or 0.
static cw_status_t rejoin_wanting(cw_client_t* c, uint32_t index, uint32_t incarnation,
                                  uint64_t* out_wanted) {
  Causeway__V1__HealthRejoinRequest req = CAUSEWAY__V1__HEALTH_REJOIN_REQUEST__INIT;
  req.worker_index = index;
  req.incarnation = incarnation;
  ProtobufCMessage* rep = NULL;
  cw_status_t st = cw_client_call(c, CW_MSG_HEALTH_REJOIN, &req.base, NULL, 0, NULL, &rep, NULL);
  const Causeway__V1__HealthRejoinReply* r = (const Causeway__V1__HealthRejoinReply*)rep;
  if (out_wanted) *out_wanted = r && r->n_programs_wanted ? r->programs_wanted[0] : 0;
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return st;
}

static cw_status_t rejoin(cw_client_t* c, uint32_t index, uint32_t incarnation) {
  return rejoin_wanting(c, index, incarnation, NULL);
}

static Causeway__V1__Stats* ctl_stats(void) {
  Causeway__V1__Stats* st = NULL;
  assert_null(cw_client_stats(g.client, &st));
  return st;
}

static void expect_error(cw_status_t st, cw_status_code_t code, const char* text) {
  assert_non_null(st);
  fprintf(stderr, "  %s\n", cw_status_message(st));
  assert_int_equal(cw_status_code(st), code);
  assert_non_null(strstr(cw_status_message(st), text));
  cw_status_free(st);
}

static int setup(void** state) {
  const char* extra[] = {"--worker-timeout-ms", "1000", NULL};
  return cw_test_controller_start(extra, &g.ctl, g.address, sizeof(g.address)) == 0 ? 0 : -1;
}

static int teardown(void** state) {
  cw_client_release(g.client);
  return cw_test_process_stop(&g.ctl, 30000) == 0 ? 0 : -1;
}

static void test_health(void** state) {
  cw_client_t* a = NULL;
  cw_client_t* b = NULL;
  worker_connect(&a);
  worker_connect(&b);
  Causeway__V1__RegisterReply* rep = NULL;
  assert_null(worker_register(a, "w", "fake-a:1", 1, &rep));
  assert_int_equal(rep->worker_index, 0);
  assert_false(rep->replaced);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  heartbeat(a);

  // A client with a session sees the events.
  cw_client_options_t o = {.peer_name = "health-test", .on_event = on_event};
  assert_null(cw_client_connect(g.address, &o, &g.client));
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.min_workers = 1;
  open.wait_ms = 5000;
  ProtobufCMessage* info = NULL;
  assert_null(cw_client_call(g.client, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, &info,
                             NULL));
  protobuf_c_message_free_unpacked(info, NULL);

  // Same name while alive: refused, naming both.
  cw_status_t st = worker_register(b, "w", "fake-b:1", 1, &rep);
  expect_error(st, CW_ALREADY_EXISTS, "taken by the live worker at fake-a:1 (this one is at "
               "fake-b:1)");
  assert_null(rep);

  // HEALTH_REJOIN refusals; a worker may not send it.
  expect_error(rejoin(g.client, 7, 0), CW_INVALID_ARGUMENT, "no worker 7");
  expect_error(rejoin(g.client, 0, 3), CW_UNAVAILABLE, "incarnation 0, not 3");
  expect_error(rejoin(b, 0, 0), CW_PERMISSION_DENIED, "for clients");
  assert_null(rejoin(g.client, 0, 0));

  // A silent worker: dead after the timeout, its connection closed.
  int64_t t0 = cw_time_now_ms();
  assert_int_equal(wait_events(&g.downs, 1, 10 * TIMEOUT_MS), 1);
  int64_t ms = cw_time_now_ms() - t0;
  pthread_mutex_lock(&g.mu);
  fprintf(stderr, "  WORKER_DOWN after %lld ms: %s\n", (long long)ms, g.last);
  assert_non_null(strstr(g.last, "no heartbeat for"));
  assert_non_null(strstr(g.last, "worker w (fake-a:1)"));
  pthread_mutex_unlock(&g.mu);
  assert_true(ms >= TIMEOUT_MS / 2);
  expect_error(cw_client_ping(a), CW_UNAVAILABLE, "");
  // Work asked of it now says why it was lost, as WORKER_DOWN did.
  expect_error(rejoin(g.client, 0, 0), CW_UNAVAILABLE,
               "worker w (fake-a:1) is unavailable: no heartbeat for");
  Causeway__V1__Stats* s = ctl_stats();
  assert_int_equal(s->workers, 0);
  assert_int_equal(s->workers_dead, 1);
  assert_int_equal(s->workers_timed_out, 1);
  protobuf_c_message_free_unpacked(&s->base, NULL);

  // The replacement must match the slot; a matching one takes it over.
  expect_error(worker_register(b, "w", "fake-b:1", 2, &rep), CW_FAILED_PRECONDITION,
               "cannot replace the lost w (fake-a:1): it has 2 devices");
  assert_null(worker_register(b, "w", "fake-b:1", 1, &rep));
  assert_true(rep->replaced);
  assert_int_equal(rep->incarnation, 1);
  assert_int_equal(rep->worker_index, 0);
  assert_int_equal(rep->first_device_id, 0);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  assert_int_equal(wait_events(&g.ups, 1, 5000), 1);
  pthread_mutex_lock(&g.mu);
  assert_string_equal(g.up_address, "fake-b:1");
  assert_int_equal(g.up_incarnation, 1);
  pthread_mutex_unlock(&g.mu);
  expect_error(rejoin(g.client, 0, 0), CW_UNAVAILABLE, "incarnation 1, not 0");
  assert_null(rejoin(g.client, 0, 1));

  // A heartbeating worker outlives the timeout.
  for (int i = 0; i < 3 * TIMEOUT_MS / 100; ++i) {
    heartbeat(b);
    cw_test_sleep_ms(100);
  }
  s = ctl_stats();
  fprintf(stderr, "  stats: workers %llu, heartbeats %llu, replaced %llu\n",
          (unsigned long long)s->workers, (unsigned long long)s->heartbeats,
          (unsigned long long)s->workers_replaced);
  assert_int_equal(s->workers, 1);
  assert_int_equal(s->workers_replaced, 1);
  assert_true(s->heartbeats >= 10);
  protobuf_c_message_free_unpacked(&s->base, NULL);
  assert_int_equal(events(&g.downs), 1);
  cw_client_release(a);
  cw_client_release(b);  // slot 0 is dead from here on
  assert_int_equal(wait_events(&g.downs, 2, 5000), 2);
}

static cw_status_t exe_info(uint64_t exe_id, Causeway__V1__ExecutableInfo** out) {
  Causeway__V1__ExeInfoRequest req = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  req.exe_id = exe_id;
  return cw_client_call(g.client, CW_MSG_EXE_INFO, &req.base, NULL, 0, NULL,
                        (ProtobufCMessage**)out, NULL);
}

static void start_real_worker(cw_test_worker_t* out) {
  const char* extra[] = {"--controller", g.address, "--heartbeat-ms", "100", NULL};
  cw_test_worker_options_t o = {.devices = 1, .name = "rw", .extra_args = extra};
  assert_int_equal(cw_test_worker_start(&o, out), 0);
}

// COMPILE of programs/f64.mlir as `exe_id` on the test's client. No device
// assignment: the first device of the first live worker.
static cw_status_t compile_f64(uint64_t exe_id) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/f64.mlir", cw_test_getenv("CW_PROGRAMS_DIR", "programs"));
  void* code = NULL;
  size_t code_size = 0;
  assert_int_equal(cw_test_read_file(path, &code, &code_size), 0);
  Causeway__V1__CompileRequest creq = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  creq.exe_id = exe_id;
  creq.format = (char*)"mlir";
  creq.code.data = code;
  creq.code.len = code_size;
  ProtobufCMessage* crep = NULL;
  cw_status_t st =
      cw_client_call(g.client, CW_MSG_COMPILE, &creq.base, NULL, 0, NULL, &crep, NULL);
  if (crep) protobuf_c_message_free_unpacked(crep, NULL);
  free(code);
  return st;
}

static void test_replacement_reloads_and_fences(void** state) {
  cw_test_worker_t rw, rw2;
  int ups = events(&g.ups);
  start_real_worker(&rw);
  Causeway__V1__Stats* s = NULL;
  for (int i = 0; i < 200; ++i) {  // registered?
    s = ctl_stats();
    bool up = s->workers == 1;
    protobuf_c_message_free_unpacked(&s->base, NULL);
    if (up) break;
    cw_test_sleep_ms(50);
  }
  assert_null(compile_f64(77));  // on rw, the first live worker

  int downs = events(&g.downs);
  assert_true(cw_test_worker_kill(&rw) >= 0);
  assert_int_equal(wait_events(&g.downs, downs + 1, 10000), downs + 1);
  start_real_worker(&rw2);
  assert_int_equal(wait_events(&g.ups, ups + 2, 30000), ups + 2);  // registered, replaced
  pthread_mutex_lock(&g.mu);
  assert_string_equal(g.up_address, rw2.address);
  uint32_t incarnation = g.up_incarnation;
  pthread_mutex_unlock(&g.mu);
  assert_int_equal(incarnation, 1);

  Causeway__V1__ExecutableInfo* info = NULL;
  expect_error(exe_info(77, &info), CW_UNAVAILABLE, "was replaced (incarnation 1; this "
               "session knows 0)");
  uint64_t wanted = 1;
  assert_null(rejoin_wanting(g.client, 1, incarnation, &wanted));
  assert_int_equal(wanted, 0);  // the controller LOADed it by itself
  assert_null(exe_info(77, &info));  // answered by the replacement: it holds 77 again
  assert_int_equal(info->num_outputs, 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  s = ctl_stats();
  assert_int_equal(s->exes_reloaded, 1);
  assert_int_equal(s->workers_replaced, 2);
  protobuf_c_message_free_unpacked(&s->base, NULL);

  // A replacement on another CPU (as --host-cpu says): 77's code was
  // compiled for the lost worker's, so it is not loaded there (XLA would
  // load it with a logged error, and it may stop on an illegal instruction)
  // but fails with what to do.
  downs = events(&g.downs);
  assert_true(cw_test_worker_kill(&rw2) >= 0);
  assert_int_equal(wait_events(&g.downs, downs + 1, 10000), downs + 1);
  cw_test_worker_t rw3;
  const char* extra[] = {"--controller", g.address, "--heartbeat-ms", "100", NULL};
  const char* env[] = {"CAUSEWAY_HOST_CPU=x86_64 another-cpu", NULL};
  cw_test_worker_options_t o = {.devices = 1, .name = "rw", .extra_args = extra, .extra_env = env};
  assert_int_equal(cw_test_worker_start(&o, &rw3), 0);
  assert_int_equal(wait_events(&g.ups, ups + 3, 30000), ups + 3);
  assert_null(rejoin_wanting(g.client, 1, 2, &wanted));
  assert_int_equal(wanted, 77);  // the client is to send its program again
  expect_error(exe_info(77, &info), CW_UNAVAILABLE, "was compiled for the CPU of the lost worker");
  s = ctl_stats();
  assert_int_equal(s->exes_reloaded, 1);  // not again
  uint64_t compiles = s->compiles, cache_hits = s->cache_hits;
  protobuf_c_message_free_unpacked(&s->base, NULL);
  // Sent again, it compiles for the new CPU (a cache miss: the key carries
  // the CPU) into 77, which the replacement then answers for.
  assert_null(compile_f64(77));
  assert_null(exe_info(77, &info));
  assert_int_equal(info->num_outputs, 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  s = ctl_stats();
  assert_int_equal(s->compiles, compiles + 1);
  assert_int_equal(s->cache_hits, cache_hits);
  protobuf_c_message_free_unpacked(&s->base, NULL);
  assert_null(rejoin_wanting(g.client, 1, 2, &wanted));
  assert_int_equal(wanted, 0);
  assert_int_equal(cw_test_worker_stop(&rw3, 30000), 0);
}

// A replacement on `cpu` (CAUSEWAY_HOST_CPU) for slot "rw"; waits for its
// WORKER_UP and returns its incarnation.
static uint32_t start_replacement_on(const char* cpu, cw_test_worker_t* out) {
  int ups = events(&g.ups);
  const char* extra[] = {"--controller", g.address, "--heartbeat-ms", "100", NULL};
  char var[128];
  snprintf(var, sizeof(var), "CAUSEWAY_HOST_CPU=%s", cpu);
  const char* env[] = {var, NULL};
  cw_test_worker_options_t o = {.devices = 1, .name = "rw", .extra_args = extra, .extra_env = env};
  assert_int_equal(cw_test_worker_start(&o, out), 0);
  assert_int_equal(wait_events(&g.ups, ups + 1, 30000), ups + 1);
  pthread_mutex_lock(&g.mu);
  uint32_t incarnation = g.up_incarnation;
  pthread_mutex_unlock(&g.mu);
  return incarnation;
}

// The replacement a program was sent again for is lost while it LOADs it
// (a cache hit: nothing but the LOAD): like a reload whose worker died, the
// next replacement must get it again (the HEALTH_REJOIN asks for it again),
// not fail it for good. Runs after test_replacement_reloads_and_fences (77
// on slot 1, its current worker stopped).
static void test_replacement_lost_while_its_program_loads(void** state) {
  (void)state;
  cw_test_worker_t rw4, rw5;
  uint32_t incarnation = start_replacement_on("x86_64 third-cpu", &rw4);
  uint64_t wanted = 0;
  assert_null(rejoin_wanting(g.client, 1, incarnation, &wanted));
  assert_int_equal(wanted, 77);
  // The same program under another id puts this CPU's entry in the cache.
  assert_null(compile_f64(79));
  // 77 sent again while its worker hangs: the LOAD never comes back, and
  // the worker is declared dead (--worker-timeout-ms).
  int downs = events(&g.downs);
  assert_int_equal(kill(rw4.process.pid, SIGSTOP), 0);
  cw_status_t st = compile_f64(77);
  fprintf(stderr, "COMPILE 77 while its worker hangs: %s\n", st ? cw_status_message(st) : "OK");
  assert_non_null(st);
  cw_status_free(st);
  assert_int_equal(wait_events(&g.downs, downs + 1, 10000), downs + 1);
  assert_true(cw_test_worker_kill(&rw4) >= 0);
  // The next replacement, on the same CPU: 79 is reloaded, and 77 is asked
  // for again.
  incarnation = start_replacement_on("x86_64 third-cpu", &rw5);
  assert_null(rejoin_wanting(g.client, 1, incarnation, &wanted));
  Causeway__V1__ExecutableInfo* info = NULL;
  st = exe_info(77, &info);
  fprintf(stderr, "after the next replacement: wanted %" PRIu64 ", EXE_INFO 77: %s\n", wanted,
          st ? cw_status_message(st) : "OK");
  if (info) protobuf_c_message_free_unpacked(&info->base, NULL);
  info = NULL;
  cw_status_free(st);
  assert_int_equal(wanted, 77);
  assert_null(compile_f64(77));
  assert_null(exe_info(77, &info));
  assert_int_equal(info->num_outputs, 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  assert_int_equal(cw_test_worker_stop(&rw5, 30000), 0);
}

// A direct connection of the test's session to `address` (as the plugin
// makes one); `fresh`: a join after a replacement (HelloRequest.fresh_session).
static cw_client_t* session_connect(const char* address, bool fresh) {
  cw_client_options_t o = {.peer_name = "session-client",
                           .session_id = cw_client_session_id(g.client),
                           .fresh_session = fresh};
  cw_client_t* c = NULL;
  cw_status_t st = cw_client_connect(address, &o, &c);
  if (st) fprintf(stderr, "session connect: %s\n", cw_status_message(st));
  assert_null(st);
  return c;
}

static void ignore_reply(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  cw_status_free(status);
}

// UPLOAD of an f64[3,5] (f64.mlir's operand) as buffer `id` on local device
// 0, carrying `seq`; `wait`: for its answer, else pipelined as the plugin
// sends it (OK returned).
static cw_status_t upload_seq(cw_client_t* c, uint64_t id, uint64_t seq, bool wait) {
  static const double data[15] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  int64_t dims[2] = {3, 5};
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  req.buffer_id = id;
  req.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F64;
  req.n_dims = 2;
  req.dims = dims;
  req.seq = seq;
  struct iovec iov = {.iov_base = (void*)data, .iov_len = sizeof(data)};
  if (!wait) return cw_client_send(c, CW_MSG_UPLOAD, &req.base, &iov, 1, NULL, ignore_reply, NULL,
                                   NULL);
  ProtobufCMessage* rep = NULL;
  cw_status_t st = cw_client_call(c, CW_MSG_UPLOAD, &req.base, &iov, 1, NULL, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return st;
}

// LAUNCH of `exe` (f64.mlir) on a, b into `out`, carrying `seq`.
static cw_status_t launch_seq(cw_client_t* c, uint64_t exe, uint64_t a, uint64_t b, uint64_t out,
                              uint64_t seq) {
  uint64_t args[2] = {a, b};
  cw_test_launch_t l;
  cw_test_launch_build(&l, exe, args, 2, out, seq);
  ProtobufCMessage* rep = NULL;
  cw_status_t st = cw_client_call(c, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return st;
}

// A worker stopped past the timeout comes back in the same process and
// registers again as its own replacement while a connection of the session
// (a client that has not heard WORKER_DOWN yet) keeps the session's old
// life open there. The controller's reload and the client's join must get a
// fresh life. Before, the reload LOADed into the old life ("object 77
// already exists": the program failed for good) and the join landed in it at
// its old seq, so the client's requests numbered from 1 were refused as
// duplicates, and a launch past the old seq found the inputs whose uploads
// were refused missing: "NOT_FOUND: input 9002 not found" here, as in
// session 48's soak. Runs
// after test_replacement_lost_while_its_program_loads (77 and 79 on slot 1,
// compiled for "x86_64 third-cpu", its worker stopped).
static void test_stopped_worker_keeps_no_stale_life(void** state) {
  (void)state;
  cw_test_worker_t rw6;
  uint32_t incarnation = start_replacement_on("x86_64 third-cpu", &rw6);
  assert_null(rejoin(g.client, 1, incarnation));
  cw_client_t* old = session_connect(rw6.address, true);
  assert_null(upload_seq(old, 9001, 1, true));  // the life's seq is at 2 now

  int downs = events(&g.downs), ups = events(&g.ups);
  assert_int_equal(kill(rw6.process.pid, SIGSTOP), 0);
  assert_int_equal(wait_events(&g.downs, downs + 1, 10000), downs + 1);
  assert_int_equal(kill(rw6.process.pid, SIGCONT), 0);  // `old` stays open
  assert_int_equal(wait_events(&g.ups, ups + 1, 30000), ups + 1);
  pthread_mutex_lock(&g.mu);
  uint32_t again = g.up_incarnation;
  pthread_mutex_unlock(&g.mu);
  assert_int_equal(again, incarnation + 1);

  // The join (as cw_plugin_health_revive): a fresh life, whether the
  // controller's reload link made it (next 1) or this HELLO does (0).
  cw_client_t* joined = session_connect(rw6.address, true);
  fprintf(stderr, "join after the stop: session_seq_next %" PRIu64 "\n",
          cw_client_session_seq_next(joined));
  assert_true(cw_client_session_seq_next(joined) <= 1);
  assert_null(rejoin(g.client, 1, again));
  // One step as the plugin sends it, numbered from 1: two uploads, then
  // the launch, without waiting for the uploads.
  assert_null(upload_seq(joined, 9002, 1, false));
  assert_null(upload_seq(joined, 9003, 2, false));
  cw_status_t st = launch_seq(joined, 77, 9002, 9003, 9004, 3);
  fprintf(stderr, "the first step on the join: %s\n", st ? cw_status_message(st) : "OK");
  assert_null(st);
  Causeway__V1__ExecutableInfo* info = NULL;
  st = exe_info(77, &info);  // reloaded into the fresh life
  fprintf(stderr, "EXE_INFO 77 after the stop: %s\n", st ? cw_status_message(st) : "OK");
  assert_null(st);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // The old life's connection was closed by the worker.
  for (int i = 0; i < 100 && !cw_client_failed(old); ++i) cw_test_sleep_ms(20);
  assert_true(cw_client_failed(old));
  cw_client_release(joined);
  cw_client_release(old);
  assert_int_equal(cw_test_worker_stop(&rw6, 30000), 0);
}

// REGISTER of `name` as rank `rank` of island `island` of `size` workers
// (platform "cpu" `version`), on a fresh worker connection kept in *out.
static cw_status_t register_island(cw_client_t** out, const char* name, const char* island,
                                   uint32_t size, uint32_t rank, const char* version) {
  worker_connect(out);
  Causeway__V1__Device dev = CAUSEWAY__V1__DEVICE__INIT;
  dev.kind = (char*)"cpu";
  Causeway__V1__Device* devs[1] = {&dev};
  Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
  inv.worker_name = (char*)name;
  inv.platform_name = (char*)"cpu";
  inv.platform_version = (char*)version;
  inv.devices = devs;
  inv.n_devices = 1;
  char address[64];
  snprintf(address, sizeof(address), "fake-%s:1", name);
  Causeway__V1__RegisterRequest req = CAUSEWAY__V1__REGISTER_REQUEST__INIT;
  req.worker_name = (char*)name;
  req.address = address;
  req.inventory = &inv;
  req.island_name = (char*)island;
  req.island_size = size;
  req.island_rank = rank;
  req.revision = cw_test_register_revision;
  ProtobufCMessage* rep = NULL;
  cw_status_t st = cw_client_call(*out, CW_MSG_REGISTER, &req.base, NULL, 0, NULL, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return st;
}

// What a worker says of its island when it registers (docs/protocol.md
// "Islands of several workers") is checked against the island's other
// members: a bad name or place, another size, another platform, and a
// replacement that claims another place are refused, naming the mismatch.
static void test_island_registrations(void** state) {
  cw_client_t* c[8] = {NULL};
  expect_error(register_island(&c[0], "i0", "g\x01", 2, 0, "test"), CW_INVALID_ARGUMENT,
               "island_name must be");
  expect_error(register_island(&c[1], "i0", "g", 2, 2, "test"), CW_INVALID_ARGUMENT,
               "island 'g': rank 2 of size 2 is not valid");
  expect_error(register_island(&c[2], "i0", "g", 0, 0, "test"), CW_INVALID_ARGUMENT,
               "rank 0 of size 0 is not valid");
  assert_null(register_island(&c[3], "i0", "g", 2, 0, "test"));
  expect_error(register_island(&c[4], "i1", "g", 3, 1, "test"), CW_INVALID_ARGUMENT,
               "island 'g' has 2 workers (worker i0 says so); this worker says 3");
  expect_error(register_island(&c[5], "i1", "g", 2, 1, "other"), CW_INVALID_ARGUMENT,
               "island 'g' runs cpu test (worker i0); this worker has cpu other");
  assert_null(register_island(&c[6], "i1", "g", 2, 1, "test"));
  // i0 sends no heartbeat: once it is dead, a replacement under its name
  // must take its place (rank 0), not i1's.
  cw_status_t st = NULL;
  for (int i = 0; i < 100; ++i) {
    cw_client_release(c[7]);
    c[7] = NULL;
    st = register_island(&c[7], "i0", "g", 2, 1, "test");
    if (!st || cw_status_code(st) != CW_ALREADY_EXISTS) break;  // still alive
    cw_status_free(st);
    st = NULL;
    cw_test_sleep_ms(100);
  }
  expect_error(st, CW_INVALID_ARGUMENT,
               "worker i0 was rank 0 of 2 of island 'g'; its replacement says rank 1 of 2 of "
               "island 'g'");
  for (size_t i = 0; i < 8; ++i) cw_client_release(c[i]);
}

int main(void) {
  // The island test last: its fake workers would take indexes the others name.
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_health),
                                     cmocka_unit_test(test_replacement_reloads_and_fences),
                                     cmocka_unit_test(test_replacement_lost_while_its_program_loads),
                                     cmocka_unit_test(test_stopped_worker_keeps_no_stale_life),
                                     cmocka_unit_test(test_island_registrations)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
