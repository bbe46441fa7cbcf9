// Unit tests for host callbacks in the plugin (cw_plugin_hostcb.c): execute
// contexts and the FFI extension as JAX uses them, the id a launch carries
// (JAX's registered type, else the one entry; an id per launch), and a
// worker's HOST_CALLBACK answered through a runner on the launch's caller --
// results, the runner's error, an unknown id, callbacks in a row, a launch
// given up -- against the client library's fake peer playing the worker.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_client_fake_peer.h"
#include "cw_msg.h"
#include "cw_plugin_error.h"
#include "cw_plugin_hostcb.h"

typedef struct {
  void** callbacks;
  uint32_t num_callbacks;
} loaded_t;  // FfiLoadedHostCallbacks, as JAX lays it out

static PJRT_ExecuteContext* context_with(int64_t type, void* data) {
  PJRT_ExecuteContext_Create_Args c = {.struct_size = sizeof(c)};
  assert_null(cw_plugin_execute_context_create(&c));
  if (data) {
    PJRT_FFI_UserData_Add_Args a = {.struct_size = sizeof(a), .context = c.context};
    a.user_data.type_id = type;
    a.user_data.data = data;
    assert_null(cw_plugin_hostcb_ffi.user_data_add(&a));
  }
  return c.context;
}

static void context_destroy(PJRT_ExecuteContext* ctx) {
  PJRT_ExecuteContext_Destroy_Args d = {.struct_size = sizeof(d), .context = ctx};
  assert_null(cw_plugin_execute_context_destroy(&d));
}

static int64_t register_type(const char* name) {
  PJRT_FFI_Type_Register_Args a = {.struct_size = sizeof(a), .type_name = name,
                                   .type_name_size = strlen(name)};
  assert_null(cw_plugin_hostcb_ffi.type_register(&a));
  assert_true(a.type_id != 0);
  return a.type_id;
}

static void test_launch_ids(void** state) {
  (void)state;
  void* fns[2] = {(void*)0x1111, (void*)0x2222};
  loaded_t lc = {fns, 2};
  // No context, an empty one: no callbacks.
  assert_int_equal(cw_plugin_hostcb_for_launch(NULL), 0);
  PJRT_ExecuteContext* empty = context_with(0, NULL);
  assert_int_equal(cw_plugin_hostcb_for_launch(empty), 0);
  context_destroy(empty);
  // The one entry there is; each launch its own id.
  PJRT_ExecuteContext* one = context_with(12345, &lc);
  uint64_t id1 = cw_plugin_hostcb_for_launch(one);
  assert_true(id1 != 0);
  uint64_t id2 = cw_plugin_hostcb_for_launch(one);
  assert_true(id2 != 0 && id2 != id1);
  cw_plugin_hostcb_abandon(id2);
  context_destroy(one);
  // Two entries: the one of JAX's registered type.
  int64_t other = register_type("SomethingElse");
  int64_t jax_type = register_type("xla::FfiLoadedHostCallbacks");
  assert_true(other != jax_type);
  loaded_t bogus = {NULL, 0};
  PJRT_ExecuteContext* two = context_with(other, &bogus);
  PJRT_FFI_UserData_Add_Args a = {.struct_size = sizeof(a), .context = two};
  a.user_data.type_id = jax_type;
  a.user_data.data = &lc;
  assert_null(cw_plugin_hostcb_ffi.user_data_add(&a));
  uint64_t id3 = cw_plugin_hostcb_for_launch(two);
  assert_true(id3 != 0 && id3 != id1);
  cw_plugin_hostcb_abandon(id1);
  cw_plugin_hostcb_abandon(id3);
  // A context holds 8 entries.
  for (int i = 2; i < 8; ++i) assert_null(cw_plugin_hostcb_ffi.user_data_add(&a));
  PJRT_Error* err = cw_plugin_hostcb_ffi.user_data_add(&a);
  assert_non_null(err);
  PJRT_Error_Destroy_Args da = {.struct_size = sizeof(da), .error = err};
  cw_plugin_error_destroy(&da);
  context_destroy(two);
  // Handlers registered in the client would never run: refused.
  PJRT_FFI_Register_Handler_Args r = {.struct_size = sizeof(r)};
  err = cw_plugin_hostcb_ffi.register_handler(&r);
  assert_non_null(err);
  da.error = err;
  cw_plugin_error_destroy(&da);
}

// --- A worker's requests, through a runner -------------------------------------

// The callables' work: result 0 is operand 0 (f32[3]) doubled.
static void double_f32x3(void* const* odata, void* const* rdata) {
  for (int i = 0; i < 3; ++i) ((float*)rdata[0])[i] = ((const float*)odata[0])[i] * 2;
}

static int g_runner_mode;  // 0: doubles its f32 operand; 1: fails
static pthread_t g_ran_on;  // the thread of its last success

static int runner(void* callable, int32_t no, const int32_t* odt, const int32_t* ork,
                  const int64_t* odims, void* const* odata, int32_t nr, const int32_t* rdt,
                  const int32_t* rrk, const int64_t* rdims, void* const* rdata, char* err,
                  int64_t cap) {
  (void)ork;
  (void)rrk;
  (void)rdims;
  if (g_runner_mode == 1 || callable != (void*)0x2222 || no != 1 || nr != 1 || odt[0] != 11 ||
      rdt[0] != 11 || odims[0] != 3) {
    snprintf(err, (size_t)cap, "ValueError: cw-runner-boom");
    return 1;
  }
  double_f32x3(odata, rdata);
  g_ran_on = pthread_self();
  return 0;
}

// Buffer callbacks: result 0 must start as operand 0 (aliased); adds 10 in place.
static int buffer_runner(void* callable, int32_t no, const int32_t* odt, const int32_t* ork,
                         const int64_t* odims, void* const* odata, int32_t nr,
                         const int32_t* rdt, const int32_t* rrk, const int64_t* rdims,
                         void* const* rdata, const int32_t* aliases, char* err, int64_t cap) {
  (void)ork;
  (void)rrk;
  (void)rdims;
  float* out = rdata[0];
  if (callable != (void*)0x2222 || no != 1 || nr != 1 || odt[0] != 11 || rdt[0] != 11 ||
      odims[0] != 3 || aliases[0] != 0 || memcmp(out, odata[0], 3 * sizeof(float)) != 0) {
    snprintf(err, (size_t)cap, "cw-buffer-runner: not as the request said");
    return 1;
  }
  for (int i = 0; i < 3; ++i) out[i] += 10;
  return 0;
}

static uint64_t g_id;

// A new launch with callables 0x1111 and 0x2222 (as JAX's context gives
// them): its id, also in g_id.
static uint64_t new_launch(void) {
  void* fns[2] = {(void*)0x1111, (void*)0x2222};
  loaded_t lc = {fns, 2};
  PJRT_ExecuteContext* ctx = context_with(777, &lc);
  g_id = cw_plugin_hostcb_for_launch(ctx);
  context_destroy(ctx);
  return g_id;
}

// The launch's caller, waiting in Execute: it serves the launch's callbacks
// until the test completes the launch's future.
typedef struct {
  uint64_t id;
  cw_plugin_future_t* f;
  pthread_t t;
  cw_status_t st;
  _Atomic bool returned;  // Execute would return now
} caller_t;

static void* caller_main(void* arg) {
  caller_t* c = arg;
  c->st = cw_plugin_hostcb_serve(c->id, c->f);
  atomic_store(&c->returned, true);
  return NULL;
}

static void caller_start(caller_t* c, uint64_t id) {
  c->id = id;
  atomic_store(&c->returned, false);
  c->f = cw_plugin_future_create();
  assert_non_null(c->f);
  assert_int_equal(pthread_create(&c->t, NULL, caller_main, c), 0);
}

static void caller_end(caller_t* c) {
  cw_plugin_future_complete(c->f, cw_ok_status());
  assert_int_equal(pthread_join(c->t, NULL), 0);
  assert_null(c->st);
  cw_plugin_future_release(c->f);
}

// A connection to a fake worker running `script`, as the plugin makes them.
static cw_client_t* connect_worker(fake_t* f, void (*script)(fake_t*)) {
  memset(f, 0, sizeof(*f));
  fake_start(f, script);
  cw_client_options_t o = {.on_request = cw_plugin_hostcb_on_request,
                           .on_release = cw_plugin_hostcb_released};
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f->path, &o, &c));
  return c;
}

static pthread_t g_caller;  // the thread serving launch g_id (serve_worker)

// Launch g_id served by its caller while a fake worker runs `script` on a
// connection, to the end; returns the caller's thread (also g_caller).
static pthread_t serve_worker(void (*script)(fake_t*)) {
  caller_t caller;
  caller_start(&caller, g_id);
  g_caller = caller.t;
  fake_t f;
  cw_client_t* c = connect_worker(&f, script);
  fake_join(&f);
  cw_client_release(c);
  caller_end(&caller);
  return caller.t;
}

// A HOST_CALLBACK of callable 1 of g_id: f32[3] -> f32[3].
typedef struct {
  int64_t three;
  Causeway__V1__HostCallbackArray a;
  Causeway__V1__HostCallbackArray* arrays[1];
  Causeway__V1__HostCallbackRequest r;
} request_t;

static void request_init(request_t* q) {
  q->three = 3;
  q->a = (Causeway__V1__HostCallbackArray)CAUSEWAY__V1__HOST_CALLBACK_ARRAY__INIT;
  q->a.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  q->a.dims = &q->three;
  q->a.n_dims = 1;
  q->arrays[0] = &q->a;
  q->r = (Causeway__V1__HostCallbackRequest)CAUSEWAY__V1__HOST_CALLBACK_REQUEST__INIT;
  q->r.host_callbacks = g_id;
  q->r.index = 1;
  q->r.operands = q->arrays;
  q->r.n_operands = 1;
  q->r.results = q->arrays;
  q->r.n_results = 1;
}

// The worker's side: four HOST_CALLBACKs, each answer checked.
static void script_worker(fake_t* f) {
  request_t q;
  request_init(&q);
  Causeway__V1__HostCallbackRequest r = q.r;
  const float in[3] = {1, 2, 3};
  // 1: results.
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 41, &r.base, in, sizeof(in)));
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.request_id == 41 && (fr.h.flags & CW_FRAME_REPLY) && !(fr.h.flags & CW_FRAME_ERROR));
  FCHECK(f, fr.h.bulk_len == 12 && ((float*)fr.bulk)[2] == 6.0f);
  frame_free(&fr);
  // 2: the runner's error, as an error reply.
  g_runner_mode = 1;
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 42, &r.base, in, sizeof(in)));
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.request_id == 42 && (fr.h.flags & CW_FRAME_ERROR));
  const Causeway__V1__ErrorReply* er = (const Causeway__V1__ErrorReply*)fr.msg;
  FCHECK(f, er->code == CW_INTERNAL && strstr(er->message, "cw-runner-boom"));
  frame_free(&fr);
  // 3: a buffer callback whose result shares the operand: the buffer runner.
  r.buffer = true;
  uint32_t alias = 1;
  r.aliased_operand = &alias;
  r.n_aliased_operand = 1;
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 44, &r.base, in, sizeof(in)));
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.request_id == 44 && !(fr.h.flags & CW_FRAME_ERROR));
  FCHECK(f, fr.h.bulk_len == 12 && ((float*)fr.bulk)[0] == 11.0f && ((float*)fr.bulk)[2] == 13.0f);
  frame_free(&fr);
  r.buffer = false;
  r.aliased_operand = NULL;
  r.n_aliased_operand = 0;
  // 4: callables nobody knows.
  r.host_callbacks = g_id + 1000;
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 43, &r.base, in, sizeof(in)));
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.request_id == 43 && (fr.h.flags & CW_FRAME_ERROR));
  er = (const Causeway__V1__ErrorReply*)fr.msg;
  FCHECK(f, er->code == CW_NOT_FOUND && strstr(er->message, "not known here"));
  frame_free(&fr);
}

static void test_requests_from_a_worker(void** state) {
  (void)state;
  assert_true(new_launch() != 0);
  CausewayHostCallbackRunner(runner);
  CausewayBufferCallbackRunner(buffer_runner);
  g_runner_mode = 0;
  pthread_t caller = serve_worker(script_worker);
  // One at a time, each ran on the launch's caller, as on stock JAX (its
  // thread-local JAX state is the callable's).
  assert_true(pthread_equal(g_ran_on, caller));
  CausewayHostCallbackRunner(NULL);
  CausewayBufferCallbackRunner(NULL);
}

// --- A callback that outlives its connection ------------------------------------

static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static int g_gate;  // 1: the runner started; 2: it may return; 3: it returned

static void gate_set(int v) {
  pthread_mutex_lock(&g_gate_mu);
  g_gate = v;
  pthread_cond_broadcast(&g_gate_cv);
  pthread_mutex_unlock(&g_gate_mu);
}

static void gate_wait(int v) {
  pthread_mutex_lock(&g_gate_mu);
  while (g_gate < v) pthread_cond_wait(&g_gate_cv, &g_gate_mu);
  pthread_mutex_unlock(&g_gate_mu);
}

// A Python callable still running when the client goes.
static int gated_runner(void* callable, int32_t no, const int32_t* odt, const int32_t* ork,
                        const int64_t* odims, void* const* odata, int32_t nr, const int32_t* rdt,
                        const int32_t* rrk, const int64_t* rdims, void* const* rdata, char* err,
                        int64_t cap) {
  gate_set(1);
  gate_wait(2);
  int rc = runner(callable, no, odt, ork, odims, odata, nr, rdt, rrk, rdims, rdata, err, cap);
  gate_set(3);
  return rc;
}

static void script_one_request(fake_t* f) {
  request_t q;
  request_init(&q);
  Causeway__V1__HostCallbackRequest r = q.r;
  const float in[3] = {1, 2, 3};
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 51, &r.base, in, sizeof(in)));
}

// PJRT_Client_Destroy releases the workers' connections while a callable
// may still run: its answer must not be written to the freed connection (an
// audit: heap-use-after-free in cw_client_reply under ASan).
static void test_callback_outlives_its_connection(void** state) {
  (void)state;
  new_launch();
  CausewayHostCallbackRunner(gated_runner);
  g_runner_mode = 0;
  g_gate = 0;
  caller_t caller;
  caller_start(&caller, g_id);
  fake_t f;
  cw_client_t* c = connect_worker(&f, script_one_request);
  gate_wait(1);
  cw_client_release(c);
  gate_set(2);
  gate_wait(3);
  usleep(200 * 1000);  // its answer would be written now
  fake_join(&f);
  caller_end(&caller);
  CausewayHostCallbackRunner(NULL);
}

// --- Callbacks in a row, and a launch given up ------------------------------------

#define SEQ_N 300
static _Atomic int g_seq_off_caller;
static int seq_runner(void* callable, int32_t no, const int32_t* odt, const int32_t* ork,
                      const int64_t* odims, void* const* odata, int32_t nr, const int32_t* rdt,
                      const int32_t* rrk, const int64_t* rdims, void* const* rdata, char* err,
                      int64_t cap) {
  if (!pthread_equal(pthread_self(), g_caller)) atomic_fetch_add(&g_seq_off_caller, 1);
  double_f32x3(odata, rdata);
  return 0;
}

// A program calling back SEQ_N times one after the other (a scan with an
// io_callback, Pallas' interpret mode): the worker sends each request once
// the previous is answered. Each runs on the caller: the caller was still
// marked busy while its answer went out, and 3-4 of 300 went to the pool (a
// review).
static void script_sequential(fake_t* f) {
  request_t q;
  request_init(&q);
  Causeway__V1__HostCallbackRequest r = q.r;
  const float in[3] = {1, 2, 3};
  for (int i = 0; i < SEQ_N; ++i) {
    FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 1000 + i, &r.base, in, sizeof(in)));
    frame_t fr;
    FCHECK(f, fake_read(f, &fr));
    FCHECK(f, fr.h.request_id == (uint64_t)(1000 + i) && !(fr.h.flags & CW_FRAME_ERROR));
    frame_free(&fr);
  }
}

static void test_sequential_callbacks_all_on_the_caller(void** state) {
  (void)state;
  new_launch();
  CausewayHostCallbackRunner(seq_runner);
  atomic_store(&g_seq_off_caller, 0);
  serve_worker(script_sequential);
  CausewayHostCallbackRunner(NULL);
  assert_int_equal(atomic_load(&g_seq_off_caller), 0);
}

// A launch abandoned (its send failed, yet the worker had it) after a
// callback was handed to its caller: the worker is answered all the same
// (it was never answered, a review).
static void script_one_request_wait_answer(fake_t* f) {
  request_t q;
  request_init(&q);
  Causeway__V1__HostCallbackRequest r = q.r;
  const float in[3] = {1, 2, 3};
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 61, &r.base, in, sizeof(in)));
  frame_t fr;
  bool got = fake_read(f, &fr);  // the client's answer, or EOF at release
  gate_set(got ? 10 : 11);
  if (got) frame_free(&fr);
}

static void test_abandon_after_a_callback_came(void** state) {
  (void)state;
  new_launch();
  CausewayHostCallbackRunner(runner);
  g_runner_mode = 0;
  g_gate = 0;
  fake_t f;
  cw_client_t* c = connect_worker(&f, script_one_request_wait_answer);
  usleep(300 * 1000);              // the request reaches the (not yet serving) caller
  cw_plugin_hostcb_abandon(g_id);  // the send reported failure
  int gate = 0;
  for (int i = 0; i < 1000 && gate == 0; ++i) {  // an answer within 10 s
    usleep(10 * 1000);
    pthread_mutex_lock(&g_gate_mu);
    gate = g_gate;
    pthread_mutex_unlock(&g_gate_mu);
  }
  cw_client_release(c);
  fake_join(&f);
  CausewayHostCallbackRunner(NULL);
  assert_int_equal(gate, 10);
}

// --- A launch that fails while the pool runs one of its callbacks -----------------

static caller_t* g_failing;             // the caller of that launch
static _Atomic bool g_pool_saw_return;  // the pool's callable ran after Execute returned

// The caller's callback returns once the pool's has started; the pool's
// waits for the test (gate 2), as a Python callable still running when the
// worker dies.
static int pool_runner(void* callable, int32_t no, const int32_t* odt, const int32_t* ork,
                       const int64_t* odims, void* const* odata, int32_t nr, const int32_t* rdt,
                       const int32_t* rrk, const int64_t* rdims, void* const* rdata, char* err,
                       int64_t cap) {
  if (pthread_equal(pthread_self(), g_failing->t)) {
    gate_wait(1);
  } else {
    gate_set(1);
    gate_wait(2);
    if (atomic_load(&g_failing->returned)) atomic_store(&g_pool_saw_return, true);
  }
  (void)callable, (void)no, (void)odt, (void)ork, (void)odims, (void)nr, (void)rdt, (void)rrk;
  (void)rdims, (void)err, (void)cap;
  double_f32x3(odata, rdata);
  if (!pthread_equal(pthread_self(), g_failing->t)) gate_set(3);
  return 0;
}

// Two callbacks at once (two shards): one to the caller, one to the pool.
static void script_two_at_once(fake_t* f) {
  request_t q;
  request_init(&q);
  Causeway__V1__HostCallbackRequest r = q.r;
  const float in[3] = {1, 2, 3};
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 71, &r.base, in, sizeof(in)));
  FCHECK(f, fake_write(f, CW_MSG_HOST_CALLBACK, 0, 72, &r.base, in, sizeof(in)));
  for (int i = 0; i < 2; ++i) {
    frame_t fr;
    FCHECK(f, fake_read(f, &fr));
    frame_free(&fr);
  }
}

// The launch fails (its worker died) while a callable runs on the pool:
// Execute returns only once that callable has returned, since JAX drops the
// callables then (before: it returned at once, and the pool went on to use
// a callable JAX may have freed).
static void test_failed_launch_waits_for_its_pool_callbacks(void** state) {
  (void)state;
  new_launch();
  CausewayHostCallbackRunner(pool_runner);
  g_runner_mode = 0;
  g_gate = 0;
  atomic_store(&g_pool_saw_return, false);
  caller_t caller;
  g_failing = &caller;
  caller_start(&caller, g_id);
  fake_t f;
  cw_client_t* c = connect_worker(&f, script_two_at_once);
  gate_wait(1);
  cw_plugin_future_complete(caller.f, cw_make_status(CW_UNAVAILABLE, "worker-0 died"));
  usleep(200 * 1000);  // Execute would have returned by now
  gate_set(2);
  gate_wait(3);
  assert_int_equal(pthread_join(caller.t, NULL), 0);
  assert_non_null(caller.st);
  assert_int_equal(cw_status_code(caller.st), CW_UNAVAILABLE);
  cw_status_free(caller.st);
  cw_plugin_future_release(caller.f);
  fake_join(&f);
  cw_client_release(c);
  CausewayHostCallbackRunner(NULL);
  assert_false(atomic_load(&g_pool_saw_return));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_launch_ids),
      cmocka_unit_test(test_requests_from_a_worker),
      cmocka_unit_test(test_callback_outlives_its_connection),
      cmocka_unit_test(test_sequential_callbacks_all_on_the_caller),
      cmocka_unit_test(test_abandon_after_a_callback_came),
      cmocka_unit_test(test_failed_launch_waits_for_its_pool_callbacks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
