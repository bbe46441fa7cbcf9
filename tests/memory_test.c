// Memory back-pressure (issue 11 item 4) at a real worker (XLA's CPU
// plugin) with --memory-limit 10 MiB per device, driven through the C client
// library by several sessions at once:
// - a request bigger than the budget fails at once, naming sizes and budget
//   (UPLOAD and LAUNCH), and the connection goes on;
// - an UPLOAD that does not fit waits (its connection is not read) until
//   another session deletes; meanwhile STATS shows the waiter and the worker
//   serves other sessions (their launches run, a small upload passes it);
// - a COPY waits for memory on its target device;
// - a LAUNCH that does not fit waits while its session's later requests on
//   the same connection go on; a session's later request waits behind its
//   waiting one; a donating launch needs no new memory;
// - a stamped launch (from a controller connection) that waits passes its
//   turn: a later stamp of another session runs meanwhile;
// - an UPLOAD held for its seq waits for memory with its bytes in hand;
// - an UPLOAD in parts whose first part waits for memory: later parts wait for it;
// - a session that ends frees its memory for the waiters;
// - with --memory-wait-ms 1000, waits end with RESOURCE_EXHAUSTED naming what
//   they waited for, and a worker stopped while a request waits exits 0.
// Results are compared with known values (2x + 1 of what was uploaded);
// every test ends with the worker's memory in use back at 0.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client.h"
#include "cw_frame.h"
#include "cw_test_util.h"
#include "cw_worker_test_util.h"
#define F32 CAUSEWAY__V1__DTYPE__DTYPE_F32
#define MIB (1024 * 1024)
#define BUDGET (10 * MIB)
#define N_BIG (MIB)         // f32[N_BIG]: 4 MiB
#define N_SMALL (MIB / 4)   // f32[N_SMALL]: 1 MiB

static struct {
  cw_test_worker_t worker;
  uint64_t next_id;
  float* big;    // N_BIG values
  float* small;  // N_SMALL values
} g;

static uint64_t new_id(void) { return ++g.next_id; }

// ---- Programs: x -> 2x + 1 on f32[n] (aliased: donating x), and one whose
// output is three times its input (f32[n] -> f32[3,n]).

static char* scale_program(int64_t n, bool aliased) {
  char* p = NULL;
  int k = asprintf(&p,
      "module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  func.func public @main(%%arg0: tensor<%" PRId64 "xf32>%s) -> (tensor<%" PRId64
      "xf32>) {\n"
      "    %%c2 = stablehlo.constant dense<2.000000e+00> : tensor<f32>\n"
      "    %%0 = stablehlo.broadcast_in_dim %%c2, dims = [] : (tensor<f32>) -> tensor<%" PRId64
      "xf32>\n"
      "    %%1 = stablehlo.multiply %%arg0, %%0 : tensor<%" PRId64 "xf32>\n"
      "    %%c1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"
      "    %%2 = stablehlo.broadcast_in_dim %%c1, dims = [] : (tensor<f32>) -> tensor<%" PRId64
      "xf32>\n"
      "    %%3 = stablehlo.add %%1, %%2 : tensor<%" PRId64 "xf32>\n"
      "    return %%3 : tensor<%" PRId64 "xf32>\n"
      "  }\n"
      "}\n",
      n, aliased ? " {tf.aliasing_output = 0 : i32}" : "", n, n, n, n, n, n);
  assert_true(k > 0);
  return p;
}

static char* triple_program(int64_t n) {
  char* p = NULL;
  int k = asprintf(&p,
      "module @jit_t attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  func.func public @main(%%arg0: tensor<%" PRId64 "xf32>) -> (tensor<3x%" PRId64
      "xf32>) {\n"
      "    %%0 = stablehlo.broadcast_in_dim %%arg0, dims = [1] : (tensor<%" PRId64
      "xf32>) -> tensor<3x%" PRId64 "xf32>\n"
      "    return %%0 : tensor<3x%" PRId64 "xf32>\n"
      "  }\n"
      "}\n",
      n, n, n, n, n);
  assert_true(k > 0);
  return p;
}

static uint64_t compile(cw_client_t* c, char* program) {
  uint64_t id = new_id();
  ASSERT_OK(cw_client_compile(c, id, "mlir", program, strlen(program), NULL, 0, NULL));
  free(program);
  return id;
}

// ---- Clients, requests, STATS ------------------------------------------------------

static cw_client_t* connect_session(const char* name, int role, uint64_t session) {
  cw_client_options_t o = {.peer_name = name, .role = role, .session_id = session};
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(g.worker.address, &o, &c));
  return c;
}

typedef struct done_s {
  pthread_mutex_t mu;
  bool done;
  cw_status_t status;
} done_t;

static void on_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  done_t* d = user;
  pthread_mutex_lock(&d->mu);
  d->status = status;
  d->done = true;
  pthread_mutex_unlock(&d->mu);
}

static bool is_done(done_t* d) {
  pthread_mutex_lock(&d->mu);
  bool v = d->done;
  pthread_mutex_unlock(&d->mu);
  return v;
}

// The status a completion recorded, once the client has flushed (taken).
static cw_status_t result_of(cw_client_t* c, done_t* d) {
  cw_status_free(cw_client_flush(c));
  assert_true(is_done(d));
  cw_status_t s = d->status;
  d->status = NULL;
  d->done = false;
  return s;
}

static cw_status_t upload_on(cw_client_t* c, uint64_t id, const float* data, int64_t n,
                             int device, done_t* d) {
  int64_t dims[1] = {n};
  return cw_client_upload(c, id, F32, dims, 1, NULL, device, data, (size_t)n * sizeof(float),
                          d ? on_done : NULL, d);
}

static cw_status_t upload_n(cw_client_t* c, uint64_t id, const float* data, int64_t n,
                            done_t* d) {
  return upload_on(c, id, data, n, 0, d);
}

static void upload_ok(cw_client_t* c, uint64_t id, const float* data, int64_t n) {
  ASSERT_OK(upload_n(c, id, data, n, NULL));
  ASSERT_OK(cw_client_flush(c));
}

static void launch(cw_client_t* c, uint64_t exe, uint64_t in, uint64_t out, done_t* d) {
  const uint64_t* args[1] = {&in};
  const uint64_t* outs[1] = {&out};
  ASSERT_OK(cw_client_launch(c, exe, 1, 1, args, 1, outs, d ? on_done : NULL, d));
}

// out[i] must be scale^k applied to in[i] (x -> 2x + 1, `times` times).
static void expect_scaled(cw_client_t* c, uint64_t id, const float* in, int64_t n, int times) {
  float* got = malloc((size_t)n * sizeof(float));
  assert_non_null(got);
  size_t size = 0;
  ASSERT_OK(cw_client_download(c, id, got, (size_t)n * sizeof(float), &size, NULL));
  assert_int_equal(size, (size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    float want = in[i];
    for (int k = 0; k < times; ++k) want = 2.0f * want + 1.0f;
    if (got[i] != want) fail_msg("buffer %" PRIu64 "[%" PRId64 "] = %g, want %g", id, i, got[i], want);
  }
  free(got);
}

static void delete_ids(cw_client_t* c, const uint64_t* ids, size_t n) {
  ASSERT_OK(cw_client_delete(c, ids, n, NULL, NULL));
  ASSERT_OK(cw_client_flush(c));
}

static Causeway__V1__Stats* stats_of(cw_client_t* c) {
  Causeway__V1__Stats* st = NULL;
  ASSERT_OK(cw_client_stats(c, &st));
  return st;
}

static void free_stats(Causeway__V1__Stats* st) {
  protobuf_c_message_free_unpacked(&st->base, NULL);
}

// Polls STATS (through `c`) until `waiting` requests wait for memory.
static Causeway__V1__Stats* wait_for_waiters(cw_client_t* c, uint64_t waiting) {
  int64_t deadline = cw_time_now_ms() + 20000;
  for (;;) {
    Causeway__V1__Stats* st = stats_of(c);
    if (st->memory_waiting == waiting) return st;
    if (cw_time_now_ms() > deadline) {
      fail_msg("%" PRIu64 " requests wait for memory after 20 s; want %" PRIu64,
               st->memory_waiting, waiting);
    }
    free_stats(st);
    cw_test_sleep_ms(20);
  }
}

static uint64_t session_waiting(const Causeway__V1__Stats* st, uint64_t session) {
  for (size_t i = 0; i < st->n_session_stats; ++i) {
    if (st->session_stats[i]->session_id == session) return st->session_stats[i]->memory_waiting;
  }
  return 0;
}

// Every test leaves the worker's memory as it found it: nothing in use.
static void expect_nothing_in_use(cw_client_t* c) {
  int64_t deadline = cw_time_now_ms() + 10000;
  for (;;) {
    Causeway__V1__Stats* st = stats_of(c);
    uint64_t used = st->memory_in_use, waiting = st->memory_waiting;
    free_stats(st);
    if (!used && !waiting) return;
    if (cw_time_now_ms() > deadline) {
      fail_msg("memory in use %" PRIu64 ", %" PRIu64 " waiting at the end", used, waiting);
    }
    cw_test_sleep_ms(20);
  }
}

// Expects `s` (taken) to be RESOURCE_EXHAUSTED with `text` in its message.
static void expect_exhausted(cw_status_t s, const char* text) {
  if (cw_status_is_ok(s)) fail_msg("succeeded; want RESOURCE_EXHAUSTED with \"%s\"", text);
  fprintf(stderr, "  -> %s: %s\n", cw_status_code_name(cw_status_code(s)), cw_status_message(s));
  bool has = strstr(cw_status_message(s), text) != NULL;
  int code = cw_status_code(s);
  cw_status_free(s);
  assert_int_equal(code, CW_RESOURCE_EXHAUSTED);
  if (!has) fail_msg("the error does not say \"%s\"", text);
}

// An upload on its own thread: it blocks while the worker does not read.
typedef struct bg_upload_s {
  cw_client_t* c;
  uint64_t id;
  const float* data;
  int64_t n;
  done_t d;
  cw_status_t status;
  pthread_t thread;
} bg_upload_t;

static void* bg_upload_main(void* arg) {
  bg_upload_t* u = arg;
  cw_status_t s = upload_n(u->c, u->id, u->data, u->n, &u->d);
  if (cw_status_is_ok(s)) s = cw_client_flush(u->c);
  cw_status_free(s);
  pthread_mutex_lock(&u->d.mu);
  u->status = u->d.status;
  u->d.status = NULL;
  pthread_mutex_unlock(&u->d.mu);
  return NULL;
}

static void bg_upload_start(bg_upload_t* u, cw_client_t* c, uint64_t id, const float* data,
                            int64_t n) {
  memset(u, 0, sizeof(*u));
  pthread_mutex_init(&u->d.mu, NULL);
  u->c = c;
  u->id = id;
  u->data = data;
  u->n = n;
  assert_int_equal(pthread_create(&u->thread, NULL, bg_upload_main, u), 0);
}

static cw_status_t bg_upload_join(bg_upload_t* u) {
  pthread_join(u->thread, NULL);
  pthread_mutex_destroy(&u->d.mu);
  return u->status;
}

// ---- Set-up ---------------------------------------------------------------------

static int start_memory_worker(const char* wait_ms) {
  char budget[32];
  snprintf(budget, sizeof(budget), "%d", BUDGET);
  const char* args[] = {"--memory-limit", budget, "--memory-wait-ms", wait_ms, NULL};
  cw_test_worker_options_t o = {.devices = 2, .name = "memory-test", .extra_args = args};
  return cw_test_worker_start(&o, &g.worker);
}

static int setup(void** state) {
  (void)state;
  g.big = malloc(N_BIG * sizeof(float));
  g.small = malloc(N_SMALL * sizeof(float));
  if (!g.big || !g.small) return -1;
  for (int64_t i = 0; i < N_BIG; ++i) g.big[i] = (float)(i % 1000) - 250.0f;
  for (int64_t i = 0; i < N_SMALL; ++i) g.small[i] = (float)(i % 77) * 0.5f;
  return start_memory_worker("60000");
}

static int teardown(void** state) {
  (void)state;
  cw_test_worker_kill(&g.worker);
  free(g.big);
  free(g.small);
  return 0;
}

// ---- Tests ----------------------------------------------------------------------

static void test_bigger_than_budget_fails_at_once(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  int64_t n = 3 * N_BIG;  // 12 MiB
  float* data = calloc((size_t)n, sizeof(float));
  assert_non_null(data);
  uint64_t id = new_id();
  done_t d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  int64_t t0 = cw_time_now_ms();
  ASSERT_OK(upload_n(a, id, data, n, &d));
  char want[160];
  snprintf(want, sizeof(want), "UPLOAD %" PRIu64 ": needs 12 MiB on device 0; the worker's "
           "budget is 10 MiB per device (--memory-limit)", id);
  expect_exhausted(result_of(a, &d), want);
  assert_true(cw_time_now_ms() - t0 < 5000);
  free(data);
  // The connection goes on; the id holds the error.
  float v = 0;
  cw_status_t s = cw_client_download(a, id, &v, sizeof(v), NULL, NULL);
  expect_exhausted(s, "needs 12 MiB");
  uint64_t x = new_id(), out = new_id();
  upload_ok(a, x, g.big, N_BIG);
  // A launch whose output (f32[3, 1M]) is bigger than the budget.
  uint64_t exe = compile(a, triple_program(N_BIG));
  launch(a, exe, x, out, &d);
  snprintf(want, sizeof(want), "LAUNCH of executable %" PRIu64 ": needs 12 MiB on device 0; "
           "the worker's budget is 10 MiB per device (--memory-limit)", exe);
  expect_exhausted(result_of(a, &d), want);
  Causeway__V1__Stats* st = stats_of(a);
  assert_int_equal(st->memory_budget, BUDGET);
  assert_string_equal(st->memory_budget_source, "--memory-limit");
  assert_int_equal(st->memory_in_use, 4 * MIB);
  assert_int_equal(st->memory_refused, 2);
  free_stats(st);
  delete_ids(a, (uint64_t[]){id, x, out, exe}, 4);
  expect_nothing_in_use(a);
  cw_client_release(a);
}

static void test_upload_waits_for_another_sessions_delete(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  uint64_t a1 = new_id(), a2 = new_id(), b1 = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);  // 8 of 10 MiB
  bg_upload_t up;
  bg_upload_start(&up, b, b1, g.big, N_BIG);  // 4 more: waits
  Causeway__V1__Stats* st = wait_for_waiters(a, 1);
  assert_int_equal(st->memory_waiting_bytes, 4 * MIB);
  assert_int_equal(st->memory_in_use, 8 * MIB);
  assert_int_equal(session_waiting(st, cw_client_session_id(b)), 1);
  assert_int_equal(session_waiting(st, cw_client_session_id(a)), 0);
  uint64_t waits = st->memory_waits;
  free_stats(st);
  // Meanwhile the worker serves others: a small upload and a launch of
  // session a pass the waiter (they fit: 8 + 1 + 1 MiB).
  uint64_t s = new_id(), out = new_id();
  upload_ok(a, s, g.small, N_SMALL);
  uint64_t exe = compile(a, scale_program(N_SMALL, false));
  launch(a, exe, s, out, NULL);
  expect_scaled(a, out, g.small, N_SMALL, 1);
  delete_ids(a, (uint64_t[]){s, out}, 2);
  assert_false(is_done(&up.d));  // still waiting
  delete_ids(a, (uint64_t[]){a1}, 1);  // 4 MiB free: b1 goes in
  ASSERT_OK(bg_upload_join(&up));
  expect_scaled(b, b1, g.big, N_BIG, 0);
  st = stats_of(b);
  assert_int_equal(st->memory_waiting, 0);
  assert_int_equal(st->memory_waits, waits);
  assert_int_equal(st->memory_in_use, 8 * MIB);
  free_stats(st);
  delete_ids(a, (uint64_t[]){a2, exe}, 2);
  delete_ids(b, (uint64_t[]){b1}, 1);
  expect_nothing_in_use(a);
  cw_client_release(a);
  cw_client_release(b);
}

static void test_launch_waits_and_session_order(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  cw_client_t* c = connect_session("c", 0, 0);
  uint64_t a1 = new_id(), a2 = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);  // 8 MiB
  uint64_t exe = compile(b, scale_program(N_SMALL, false));
  uint64_t x = new_id(), y = new_id(), z = new_id(), w = new_id();
  upload_ok(b, x, g.small, N_SMALL);  // 9 MiB
  launch(b, exe, x, y, NULL);         // 10 MiB: fits exactly
  done_t dz = {.mu = PTHREAD_MUTEX_INITIALIZER}, dw = {.mu = PTHREAD_MUTEX_INITIALIZER};
  launch(b, exe, y, z, &dz);          // 1 more: waits
  Causeway__V1__Stats* st = wait_for_waiters(a, 1);
  assert_int_equal(st->memory_waiting_bytes, MIB);
  free_stats(st);
  // The launch waits in its queue; the session's later requests on the same
  // connection go on: y downloads.
  expect_scaled(b, y, g.small, N_SMALL, 1);
  // A later upload of b to device 1, which is empty, would fit: it waits
  // behind the launch all the same (a session takes memory in its order).
  ASSERT_OK(upload_on(b, w, g.small, N_SMALL, 1, &dw));
  st = wait_for_waiters(a, 2);
  assert_int_equal(session_waiting(st, cw_client_session_id(b)), 2);
  free_stats(st);
  assert_false(is_done(&dz));
  assert_false(is_done(&dw));
  // Another session's small upload does not fit on device 0 (10 of 10 MiB):
  // it waits too.
  uint64_t cu = new_id();
  bg_upload_t upc;
  bg_upload_start(&upc, c, cu, g.small, N_SMALL);
  st = wait_for_waiters(a, 3);
  free_stats(st);
  delete_ids(a, (uint64_t[]){a1}, 1);  // 4 MiB: z (1) and cu (1) fit, then w
  ASSERT_OK(result_of(b, &dz));
  ASSERT_OK(result_of(b, &dw));
  ASSERT_OK(bg_upload_join(&upc));
  expect_scaled(b, z, g.small, N_SMALL, 2);
  expect_scaled(b, w, g.small, N_SMALL, 0);
  expect_scaled(c, cu, g.small, N_SMALL, 0);
  delete_ids(a, (uint64_t[]){a2}, 1);
  delete_ids(b, (uint64_t[]){x, y, z, w, exe}, 5);
  delete_ids(c, (uint64_t[]){cu}, 1);
  expect_nothing_in_use(a);
  cw_client_release(a);
  cw_client_release(b);
  cw_client_release(c);
}

// A launch waiting for memory whose connection closes while the session
// goes on (another connection keeps it): its wait ends, its output fails
// CANCELLED naming the close, and nothing is left waiting or charged.
static void test_launch_waiting_for_memory_of_a_closed_connection(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  cw_client_t* b2 = connect_session("b2", 0, cw_client_session_id(b));
  uint64_t a1 = new_id(), a2 = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);  // 8 MiB
  uint64_t exe = compile(b, scale_program(N_SMALL, false));
  uint64_t x = new_id(), y = new_id(), z = new_id();
  upload_ok(b, x, g.small, N_SMALL);  // 9 MiB
  launch(b, exe, x, y, NULL);         // 10 MiB: fits exactly
  launch(b, exe, y, z, NULL);         // 1 more: waits
  free_stats(wait_for_waiters(a, 1));
  cw_client_release(b);
  free_stats(wait_for_waiters(a, 0));
  float v[4];
  cw_status_t s = cw_client_download(b2, z, v, sizeof(v), NULL, NULL);
  assert_non_null(s);
  fprintf(stderr, "  output of the cancelled launch: %s\n", cw_status_message(s));
  assert_int_equal(cw_status_code(s), CW_CANCELLED);
  assert_non_null(strstr(cw_status_message(s), "waited for memory"));
  cw_status_free(s);
  expect_scaled(b2, y, g.small, N_SMALL, 1);
  delete_ids(a, (uint64_t[]){a1, a2}, 2);
  delete_ids(b2, (uint64_t[]){x, y, z, exe}, 4);
  expect_nothing_in_use(a);
  cw_client_release(b2);
  cw_client_release(a);
}

// A COPY to a full device waits there; its source's device has room.
static void test_copy_waits_for_its_device(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  uint64_t a1 = new_id(), a2 = new_id(), x = new_id(), y = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);  // 8 MiB on device 0
  ASSERT_OK(upload_on(b, x, g.big, N_BIG, 1, NULL));
  ASSERT_OK(cw_client_flush(b));  // 4 MiB on device 1
  done_t d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  ASSERT_OK(cw_client_copy(b, x, y, 0, on_done, &d));  // 4 more on device 0: waits
  Causeway__V1__Stats* st = wait_for_waiters(a, 1);
  assert_int_equal(st->memory_waiting_bytes, 4 * MIB);
  assert_int_equal(st->memory_in_use_max, 8 * MIB);
  free_stats(st);
  delete_ids(a, (uint64_t[]){a1}, 1);
  ASSERT_OK(result_of(b, &d));
  expect_scaled(b, y, g.big, N_BIG, 0);
  st = stats_of(b);
  assert_int_equal(st->memory_in_use, 12 * MIB);  // a2 and y on device 0, x on device 1
  free_stats(st);
  delete_ids(a, (uint64_t[]){a2}, 1);
  delete_ids(b, (uint64_t[]){x, y}, 2);
  expect_nothing_in_use(a);
  cw_client_release(a);
  cw_client_release(b);
}

// A donating launch: its output takes its input's memory, so at 8 of 10 MiB
// it runs at once; the same launch without donation needs 4 MiB more.
static void test_donation_needs_no_new_memory(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  uint64_t aliased = compile(a, scale_program(N_BIG, true));
  uint64_t plain = compile(a, scale_program(N_BIG, false));
  uint64_t x = new_id(), y = new_id(), x2 = new_id(), y2 = new_id();
  upload_ok(a, x, g.big, N_BIG);
  upload_ok(a, y, g.big, N_BIG);  // 8 MiB
  launch1_t l;  // cw_worker_test_util.h: for the fields cw_client_launch does not set
  launch1_init(&l, aliased, x, x2, true);
  ASSERT_OK(cw_client_call(a, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, NULL, NULL));
  expect_scaled(a, x2, g.big, N_BIG, 1);
  Causeway__V1__Stats* st = stats_of(a);
  uint64_t waits = st->memory_waits;
  assert_int_equal(st->memory_in_use, 8 * MIB);  // x's memory is x2's
  free_stats(st);
  done_t d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  launch(a, plain, y, y2, &d);  // 12 > 10: waits
  st = wait_for_waiters(a, 1);
  assert_int_equal(st->memory_waits, waits + 1);
  free_stats(st);
  // Its connection is read meanwhile: the session's own DELETE frees x2.
  delete_ids(a, (uint64_t[]){x2}, 1);
  ASSERT_OK(result_of(a, &d));
  expect_scaled(a, y2, g.big, N_BIG, 1);
  delete_ids(a, (uint64_t[]){y, y2, aliased, plain}, 4);
  expect_nothing_in_use(a);
  cw_client_release(a);
}

// Launches the controller stamped: one that waits for memory passes its turn,
// so another session's later stamp runs meanwhile.
static void test_stamped_launch_passes_its_turn(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  cw_client_t* b_ctl = connect_session("controller", CAUSEWAY__V1__ROLE__ROLE_CONTROLLER,
                                       cw_client_session_id(b));
  cw_client_t* a_ctl = connect_session("controller", CAUSEWAY__V1__ROLE__ROLE_CONTROLLER,
                                       cw_client_session_id(a));
  uint64_t big = compile(b, scale_program(N_BIG, false));
  uint64_t small = compile(a, scale_program(N_SMALL, false));
  uint64_t a1 = new_id(), s = new_id(), so = new_id(), x = new_id(), xo = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(b, x, g.big, N_BIG);    // 8 MiB
  upload_ok(a, s, g.small, N_SMALL);  // 9 MiB
  // Stamp 1: b's launch needs 4 MiB and waits. Stamp 2: a's needs 1 and fits.
  launch1_t l;
  launch1_init(&l, big, x, xo, false);
  l.req.sched_stamp = 1;
  uint64_t rid_b = 0;
  ASSERT_OK(cw_client_send(b_ctl, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, NULL, NULL,
                           &rid_b));
  Causeway__V1__Stats* st = wait_for_waiters(a, 1);
  free_stats(st);
  launch1_init(&l, small, s, so, false);
  l.req.sched_stamp = 2;
  // Not after the gang order's 5 s stall recovery: at once.
  int64_t t0 = cw_time_now_ms();
  ASSERT_OK(cw_client_call(a_ctl, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, NULL, NULL));
  int64_t took = cw_time_now_ms() - t0;
  fprintf(stderr, "  stamp 2 ran %lld ms after it was sent, stamp 1 waiting for memory\n",
          (long long)took);
  assert_true(took < 4000);
  expect_scaled(a, so, g.small, N_SMALL, 1);
  delete_ids(a, (uint64_t[]){a1, s, so}, 3);  // b's launch fits now
  ASSERT_OK(cw_client_wait(b_ctl, rid_b, NULL, NULL));
  expect_scaled(b, xo, g.big, N_BIG, 1);
  // Both stamps were recorded, in order.
  st = stats_of(a);
  bool one = false, two = false;
  for (size_t i = 0; i < st->n_sched_stamps; ++i) {
    one |= st->sched_stamps[i]->stamp == 1 && st->sched_stamps[i]->session_id ==
                                                  cw_client_session_id(b);
    two |= st->sched_stamps[i]->stamp == 2;
  }
  free_stats(st);
  assert_true(one && two);
  delete_ids(b, (uint64_t[]){x, xo, big}, 3);
  delete_ids(a, (uint64_t[]){small}, 1);
  expect_nothing_in_use(a);
  cw_client_release(a_ctl);
  cw_client_release(b_ctl);
  cw_client_release(a);
  cw_client_release(b);
}

// Sends the request with seq 1 (an empty DELETE, through the session's
// controller connection) that requests held behind it waited for, then
// waits until one of them waits for memory (STATS through `any`).
static void fill_seq_hole(cw_client_t* ctl, cw_client_t* any) {
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.seq = 1;
  ASSERT_OK(cw_client_call(ctl, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, NULL));
  free_stats(wait_for_waiters(any, 1));
}

// An UPLOAD held for its seq (it came before an earlier request of its
// session) has its bytes already when its turn comes: it waits for memory
// with them, and its connection goes on being read.
static void test_held_upload_waits_with_its_bytes(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  cw_client_t* b_ctl = connect_session("controller", CAUSEWAY__V1__ROLE__ROLE_CONTROLLER,
                                       cw_client_session_id(b));
  uint64_t a1 = new_id(), a2 = new_id(), b1 = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);  // 8 MiB
  Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  int64_t dims[1] = {N_BIG};
  up.buffer_id = b1;
  up.dtype = F32;
  up.dims = dims;
  up.n_dims = 1;
  up.seq = 2;  // held: seq 1 has not come
  struct iovec iov = {g.big, N_BIG * sizeof(float)};
  uint64_t rid = 0;
  ASSERT_OK(cw_client_send(b, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, NULL, NULL, &rid));
  ASSERT_OK(cw_client_ping(b));  // its bytes are in
  fill_seq_hole(b_ctl, a);  // the hole: the UPLOAD's turn comes, and it waits for memory
  ASSERT_OK(cw_client_ping(b));  // its connection is read meanwhile
  delete_ids(a, (uint64_t[]){a1}, 1);
  ASSERT_OK(cw_client_wait(b, rid, NULL, NULL));
  expect_scaled(b, b1, g.big, N_BIG, 0);
  delete_ids(a, (uint64_t[]){a2}, 1);
  cw_client_release(b_ctl);
  cw_client_release(b);  // its session ends: b1 goes
  expect_nothing_in_use(a);
  cw_client_release(a);
}

// g.big as an UPLOAD in three parts (FIRST with no bytes, MORE, LAST) with
// seqs 2-4, held on the worker until seq 1 comes; their request ids to rid.
static void send_held_parts(cw_client_t* b, uint64_t id, uint64_t rid[3]) {
  int64_t dims[1] = {N_BIG};
  const size_t half = N_BIG * sizeof(float) / 2;
  for (int k = 0; k < 3; ++k) {
    Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
    up.buffer_id = id;
    up.dtype = F32;
    up.dims = dims;
    up.n_dims = 1;
    up.part = k + 1;
    up.part_offset = k == 2 ? half : 0;
    up.seq = (uint64_t)k + 2;
    struct iovec iov = {(char*)g.big + (k == 2 ? half : 0), half};
    ASSERT_OK(cw_client_send(b, CW_MSG_UPLOAD, &up.base, &iov, k ? 1 : 0, NULL, NULL, NULL,
                             &rid[k]));
  }
  ASSERT_OK(cw_client_ping(b));  // their bytes are in
}

// Session a holds 8 of the 10 MiB; session b (connections b, its
// controller's b_ctl, and b2) has sent buffer b1 in three parts held for
// seq 1 (send_held_parts).
typedef struct {
  cw_client_t *a, *b, *b_ctl, *b2;
  uint64_t a1, a2, b1;
  uint64_t rid[3];
} held_parts_t;

static void held_parts_start(held_parts_t* hp) {
  hp->a = connect_session("a", 0, 0);
  hp->b = connect_session("b", 0, 0);
  hp->b_ctl = connect_session("controller", CAUSEWAY__V1__ROLE__ROLE_CONTROLLER,
                              cw_client_session_id(hp->b));
  hp->b2 = connect_session("b2", 0, cw_client_session_id(hp->b));
  hp->a1 = new_id();
  hp->a2 = new_id();
  hp->b1 = new_id();
  upload_ok(hp->a, hp->a1, g.big, N_BIG);
  upload_ok(hp->a, hp->a2, g.big, N_BIG);
  send_held_parts(hp->b, hp->b1, hp->rid);
}

// An UPLOAD in parts whose first part waits for memory: the later parts,
// held with it for their seq, are accepted in order and wait for it; once
// memory is free the array is put together whole. With `close_sender`, the
// connection that sent every part closes meanwhile: the array still
// completes (nothing more was to come), read through another connection.
static void parts_behind_their_first(bool close_sender) {
  held_parts_t hp;
  held_parts_start(&hp);
  cw_client_t *a = hp.a, *b = hp.b, *b_ctl = hp.b_ctl, *b2 = hp.b2;
  uint64_t a1 = hp.a1, a2 = hp.a2, b1 = hp.b1;
  uint64_t* rid = hp.rid;
  fill_seq_hole(b_ctl, a);  // the hole: the first part waits for memory, the others for it
  if (close_sender) {
    Causeway__V1__Stats* st = stats_of(b2);
    uint64_t open = st->connections;
    free_stats(st);
    cw_client_release(b);
    b = NULL;
    // The worker has seen it close before memory frees.
    int64_t deadline = cw_time_now_ms() + 20000;
    while ((st = stats_of(b2))->connections != open - 1) {
      if (cw_time_now_ms() > deadline) fail_msg("the sender's close was not seen in 20 s");
      free_stats(st);
      cw_test_sleep_ms(20);
    }
    free_stats(st);
  }
  delete_ids(a, (uint64_t[]){a1}, 1);
  for (int k = 0; b && k < 3; ++k) ASSERT_OK(cw_client_wait(b, rid[k], NULL, NULL));
  expect_scaled(b2, b1, g.big, N_BIG, 0);
  delete_ids(a, (uint64_t[]){a2}, 1);
  cw_client_release(b_ctl);
  cw_client_release(b2);
  if (b) cw_client_release(b);  // its session ends: b1 goes
  expect_nothing_in_use(a);
  cw_client_release(a);
}

static void test_parts_wait_behind_their_first(void** state) {
  (void)state;
  parts_behind_their_first(false);
  parts_behind_their_first(true);
}

// The same, but the buffer is deleted (on another connection of its session)
// while its first part waits for memory and its later parts wait for it:
// the later parts fail CANCELLED at once (their own memory freed), the
// first when its wait ends, and nothing is left in use or waiting.
static void test_parts_behind_their_first_deleted(void** state) {
  (void)state;
  held_parts_t hp;
  held_parts_start(&hp);
  cw_client_t *a = hp.a, *b = hp.b, *b_ctl = hp.b_ctl, *b2 = hp.b2;
  uint64_t a1 = hp.a1, a2 = hp.a2, b1 = hp.b1;
  uint64_t* rid = hp.rid;
  fill_seq_hole(b_ctl, a);  // the first part waits for memory, the others for it
  delete_ids(b2, (uint64_t[]){b1}, 1);
  for (int k = 2; k >= 1; --k) {
    cw_status_t s = cw_client_wait(b, rid[k], NULL, NULL);
    assert_non_null(s);
    fprintf(stderr, "  part %d: %s\n", k + 1, cw_status_message(s));
    assert_int_equal(cw_status_code(s), CW_CANCELLED);
    cw_status_free(s);
  }
  delete_ids(a, (uint64_t[]){a1}, 1);  // the first part's wait ends
  cw_status_t s = cw_client_wait(b, rid[0], NULL, NULL);
  assert_non_null(s);
  fprintf(stderr, "  part 1: %s\n", cw_status_message(s));
  assert_int_equal(cw_status_code(s), CW_CANCELLED);
  assert_non_null(strstr(cw_status_message(s), "deleted"));
  cw_status_free(s);
  ASSERT_OK(cw_client_ping(b));
  delete_ids(a, (uint64_t[]){a2}, 1);
  expect_nothing_in_use(a);
  cw_client_release(b_ctl);
  cw_client_release(b2);
  cw_client_release(b);
  cw_client_release(a);
}

// The later parts of an UPLOAD in parts, sent on the connection of a first
// part (no bytes, no seq) that waits for memory: not read until it has it.
// They were read into memory of their own meanwhile, each part's bytes past
// the budget (a helper's audit: 12 such uploads, 155 MiB more resident).
typedef struct {
  cw_client_t* c;
  uint64_t id;
  atomic_bool sent;
  cw_status_t st;
} parts_sender_t;

static void* send_later_parts(void* arg) {
  parts_sender_t* ps = arg;
  int64_t dims[1] = {N_BIG};
  const size_t quarter = N_BIG * sizeof(float) / 4;
  for (int k = 1; k < 4 && !ps->st; ++k) {
    Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
    up.buffer_id = ps->id;
    up.dtype = F32;
    up.dims = dims;
    up.n_dims = 1;
    up.part = k < 3 ? CAUSEWAY__V1__UPLOAD_PART__UPLOAD_MORE : CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST;
    up.part_offset = (uint64_t)(k - 1) * quarter;
    size_t len = k < 3 ? quarter : 2 * quarter;
    struct iovec iov = {(char*)g.big + (k - 1) * quarter, len};
    ps->st = cw_client_send(ps->c, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, NULL, NULL, NULL);
  }
  atomic_store(&ps->sent, true);
  return NULL;
}

static void test_parts_not_read_while_their_first_waits(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  uint64_t a1 = new_id(), a2 = new_id(), b1 = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);  // 8 of 10 MiB in use
  int64_t dims[1] = {N_BIG};
  Causeway__V1__UploadRequest first = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  first.buffer_id = b1;
  first.dtype = F32;
  first.dims = dims;
  first.n_dims = 1;
  first.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST;
  uint64_t rid = 0;
  ASSERT_OK(cw_client_send(b, CW_MSG_UPLOAD, &first.base, NULL, 0, NULL, NULL, NULL, &rid));
  free_stats(wait_for_waiters(a, 1));
  parts_sender_t ps = {.c = b, .id = b1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, send_later_parts, &ps), 0);
  cw_test_sleep_ms(1000);
  // 4 MiB of parts do not fit in the socket: still sending, as nothing is read.
  assert_false(atomic_load(&ps.sent));
  delete_ids(a, (uint64_t[]){a1}, 1);  // memory for b1: its parts are read now
  assert_int_equal(pthread_join(t, NULL), 0);
  ASSERT_OK(ps.st);
  ASSERT_OK(cw_client_wait(b, rid, NULL, NULL));
  ASSERT_OK(cw_client_flush(b));
  expect_scaled(b, b1, g.big, N_BIG, 0);
  delete_ids(a, (uint64_t[]){a2}, 1);
  delete_ids(b, (uint64_t[]){b1}, 1);
  cw_client_release(b);
  expect_nothing_in_use(a);
  cw_client_release(a);
}

static void test_session_end_frees_memory(void** state) {
  (void)state;
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  upload_ok(a, new_id(), g.big, N_BIG);
  upload_ok(a, new_id(), g.big, N_BIG);
  uint64_t b1 = new_id();
  bg_upload_t up;
  bg_upload_start(&up, b, b1, g.big, N_BIG);
  free_stats(wait_for_waiters(a, 1));
  cw_client_release(a);  // its session ends: its 8 MiB go
  ASSERT_OK(bg_upload_join(&up));
  expect_scaled(b, b1, g.big, N_BIG, 0);
  delete_ids(b, (uint64_t[]){b1}, 1);
  expect_nothing_in_use(b);
  cw_client_release(b);
}

// With --memory-wait-ms 1000: waits end with RESOURCE_EXHAUSTED naming what
// they waited for; the connection goes on; a worker stopped while a request
// waits exits cleanly.
static void test_wait_times_out(void** state) {
  (void)state;
  assert_int_equal(cw_test_worker_stop(&g.worker, 30000), 0);
  assert_int_equal(start_memory_worker("1000"), 0);
  cw_client_t* a = connect_session("a", 0, 0);
  cw_client_t* b = connect_session("b", 0, 0);
  uint64_t a1 = new_id(), a2 = new_id(), b1 = new_id();
  upload_ok(a, a1, g.big, N_BIG);
  upload_ok(a, a2, g.big, N_BIG);
  done_t d = {.mu = PTHREAD_MUTEX_INITIALIZER};
  int64_t t0 = cw_time_now_ms();
  bg_upload_t up;
  bg_upload_start(&up, b, b1, g.big, N_BIG);
  cw_status_t s = bg_upload_join(&up);
  int64_t waited = cw_time_now_ms() - t0;
  char want[200];
  snprintf(want, sizeof(want), "UPLOAD %" PRIu64 ": waited 1000 ms (--memory-wait-ms) for 4 MiB "
           "on device 0, and it did not free: 8 MiB of the worker's budget of 10 MiB per device "
           "(--memory-limit) are in use", b1);
  expect_exhausted(s, want);
  assert_true(waited >= 900 && waited < 10000);
  // Its bytes were discarded; the connection goes on.
  uint64_t small = new_id(), out = new_id();
  upload_ok(b, small, g.small, N_SMALL);  // 9 MiB
  uint64_t exe = compile(b, scale_program(N_SMALL, false));
  launch(b, exe, small, out, NULL);  // 10 MiB
  expect_scaled(b, out, g.small, N_SMALL, 1);
  uint64_t out2 = new_id();
  launch(b, exe, out, out2, &d);  // waits, and times out
  snprintf(want, sizeof(want), "LAUNCH of executable %" PRIu64 ": waited 1000 ms "
           "(--memory-wait-ms) for 1 MiB on device 0", exe);
  expect_exhausted(result_of(b, &d), want);
  float v = 0;
  expect_exhausted(cw_client_download(b, out2, &v, sizeof(v), NULL, NULL), "waited 1000 ms");
  Causeway__V1__Stats* st = stats_of(a);
  assert_int_equal(st->memory_wait_timeouts, 2);
  free_stats(st);
  // Stopped while a request waits: exit 0 (under ASan, without leaks).
  bg_upload_start(&up, b, new_id(), g.big, N_BIG);
  free_stats(wait_for_waiters(a, 1));
  assert_int_equal(cw_test_worker_stop(&g.worker, 30000), 0);
  cw_status_free(bg_upload_join(&up));
  cw_client_release(a);
  cw_client_release(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bigger_than_budget_fails_at_once),
      cmocka_unit_test(test_upload_waits_for_another_sessions_delete),
      cmocka_unit_test(test_launch_waits_and_session_order),
      cmocka_unit_test(test_launch_waiting_for_memory_of_a_closed_connection),
      cmocka_unit_test(test_copy_waits_for_its_device),
      cmocka_unit_test(test_donation_needs_no_new_memory),
      cmocka_unit_test(test_stamped_launch_passes_its_turn),
      cmocka_unit_test(test_held_upload_waits_with_its_bytes),
      cmocka_unit_test(test_parts_wait_behind_their_first),
      cmocka_unit_test(test_parts_behind_their_first_deleted),
      cmocka_unit_test(test_parts_not_read_while_their_first_waits),
      cmocka_unit_test(test_session_end_frees_memory),
      cmocka_unit_test(test_wait_times_out),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
