// Host callbacks at the worker (cw_worker_hostcb.c), against a real worker
// through the client library, the test playing JAX's client: a program that
// calls xla_ffi_python_cpu_callback sends HOST_CALLBACK on the client's
// connection and takes the reply's results; an error reply, results of the
// wrong size and a launch without callables fail the launch with a clear
// error; while one client sits on a callback, another session's launches
// run; a client that dies mid-callback fails only its own launch; a
// session's oldest client connection gets its callbacks; launches
// held by the bound on callback launches in flight pass (or, parts of an
// island's launch, hold) their gang-order turn.
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cw_msg.h"
#include "cw_time.h"
#include "cw_worker_test_util.h"

// f32[4] -> the callback's f32[4] + 1, as JAX lowers a pure_callback.
static const char kCallbackProgram[] =
    "module @cw_hostcb {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = stablehlo.custom_call @xla_ffi_python_cpu_callback(%arg0) {api_version = 4 : i32,"
    " backend_config = {index = 0 : ui64}, has_side_effect = true} :"
    " (tensor<4xf32>) -> tensor<4xf32>\n"
    "    %c = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
    "    %1 = stablehlo.add %0, %c : tensor<4xf32>\n"
    "    return %1 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

// The same through jax.experimental.buffer_callback's target, its result
// sharing the operand's memory (input_output_aliases={0: 0}).
static const char kBufferProgram[] =
    "module @cw_hostcb_buffer {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %c = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
    "    %a = stablehlo.add %arg0, %c : tensor<4xf32>\n"
    "    %0 = stablehlo.custom_call @xla_buffer_python_cpu_callback(%a) {api_version = 4 : i32,"
    " backend_config = {index = 0 : ui64}, has_side_effect = true, output_operand_aliases = "
    "[#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, "
    "operand_tuple_indices = []>]} : (tensor<4xf32>) -> tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

// What the test's on_request does with a HOST_CALLBACK.
typedef enum { ANSWER_TIMES_TEN, ANSWER_ERROR, ANSWER_SHORT, ANSWER_NEVER } answer_t;

typedef struct {
  answer_t answer;
  atomic_int requests;
  uint64_t host_callbacks, index;
  size_t n_operands;
  int dtype;
  int64_t dim0;
  bool buffer;
  size_t n_aliases;
  uint32_t alias0;
} peer_t;

static void on_request(void* user, cw_client_t* client, uint16_t type, uint64_t request_id,
                       ProtobufCMessage* request, uint8_t* bulk, uint64_t bulk_len) {
  peer_t* p = user;
  const Causeway__V1__HostCallbackRequest* r = (const Causeway__V1__HostCallbackRequest*)request;
  p->host_callbacks = r->host_callbacks;
  p->index = r->index;
  p->n_operands = r->n_operands;
  p->dtype = r->n_operands ? (int)r->operands[0]->dtype : -1;
  p->dim0 = r->n_operands && r->operands[0]->n_dims ? r->operands[0]->dims[0] : -1;
  p->buffer = r->buffer;
  p->n_aliases = r->n_aliased_operand;
  p->alias0 = r->n_aliased_operand ? r->aliased_operand[0] : 0;
  atomic_fetch_add(&p->requests, 1);
  Causeway__V1__HostCallbackReply rep = CAUSEWAY__V1__HOST_CALLBACK_REPLY__INIT;
  float out[4] = {0};
  for (size_t i = 0; i < 4 && bulk_len == sizeof(out); ++i) out[i] = ((float*)bulk)[i] * 10;
  struct iovec iov = {.iov_base = out, .iov_len = sizeof(out)};
  if (p->answer == ANSWER_TIMES_TEN || p->answer == ANSWER_SHORT) {
    if (p->answer == ANSWER_SHORT) iov.iov_len = 8;
    cw_status_free(cw_client_reply(client, type, request_id, &rep.base, &iov, 1));
  } else if (p->answer == ANSWER_ERROR) {
    cw_status_free(cw_client_reply_error(
        client, type, request_id, cw_make_status(CW_INTERNAL, "cw-test-boom in the callable")));
  }
  protobuf_c_message_free_unpacked(request, NULL);
  free(bulk);
}

static cw_client_t* connect_peer(peer_t* p) {
  cw_client_options_t o = {.peer_name = "hostcb-test",
                           .role = CAUSEWAY__V1__ROLE__ROLE_CLIENT,
                           .on_request = on_request,
                           .request_user = p};
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(g_worker.address, &o, &c));
  return c;
}

static void compile(cw_client_t* c, uint64_t exe, const char* program) {
  ASSERT_OK(cw_client_compile(c, exe, "mlir", program, strlen(program), NULL, 0, NULL));
}

static void upload4(cw_client_t* c, uint64_t id, const float* v) {
  int64_t dims[1] = {4};
  ASSERT_OK(cw_client_upload(c, id, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1, NULL, 0, v,
                             4 * sizeof(float), NULL, NULL));
  ASSERT_OK(cw_client_flush(c));
}

// A client answering as `p` says, with the callback program as exe 1 and
// {1, 2, 3, 4} as 10.
static cw_client_t* callback_client(peer_t* p) {
  cw_client_t* c = connect_peer(p);
  compile(c, 1, kCallbackProgram);
  static const float x[4] = {1, 2, 3, 4};
  upload4(c, 10, x);
  return c;
}

// Sends LAUNCH of `exe` (one device) from `in` into `out`; *out_rid for cw_client_wait.
static void launch(cw_client_t* c, uint64_t exe, uint64_t in, uint64_t out,
                   uint64_t host_callbacks, uint64_t* out_rid) {
  launch1_t l;
  launch1_init(&l, exe, in, out, false);
  l.req.host_callbacks = host_callbacks;
  ASSERT_OK(cw_client_send(c, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, NULL, NULL, out_rid));
}

static void expect_error(cw_status_t st, cw_status_code_t code, const char* part) {
  if (!st || !strstr(cw_status_message(st), part)) {
    fprintf(stderr, "want an error with '%s', got %s\n", part, st ? cw_status_message(st) : "OK");
  }
  assert_non_null(st);
  assert_non_null(strstr(cw_status_message(st), part));
  assert_code(st, code);
}

// Compiles `program` as `exe`, runs it on {1, 2, 3, 4} (buffers exe * 10 and
// exe * 10 + 1) with callables `host_callbacks`, and expects `want` out.
static void run_expect(cw_client_t* c, uint64_t exe, const char* program,
                       uint64_t host_callbacks, const float* want) {
  compile(c, exe, program);
  static const float x[4] = {1, 2, 3, 4};
  upload4(c, exe * 10, x);
  uint64_t rid = 0;
  launch(c, exe, exe * 10, exe * 10 + 1, host_callbacks, &rid);
  ASSERT_OK(cw_client_wait(c, rid, NULL, NULL));
  float got[4] = {0};
  size_t size = 0;
  ASSERT_OK(cw_client_download(c, exe * 10 + 1, got, sizeof(got), &size, NULL));
  assert_memory_equal(got, want, sizeof(got));
}

static void test_round_trip(void** state) {
  (void)state;
  peer_t p = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* c = connect_peer(&p);
  static const float want[4] = {11, 21, 31, 41};
  run_expect(c, 1, kCallbackProgram, 77, want);
  assert_int_equal(atomic_load(&p.requests), 1);
  assert_int_equal(p.host_callbacks, 77);
  assert_int_equal(p.index, 0);
  assert_int_equal(p.n_operands, 1);
  assert_int_equal(p.dtype, CAUSEWAY__V1__DTYPE__DTYPE_F32);
  assert_int_equal(p.dim0, 4);
  cw_client_release(c);
}

// A buffer callback: the request says so and names the operand its result
// shares; the answer becomes the result.
static void test_buffer_callback(void** state) {
  (void)state;
  peer_t p = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* c = connect_peer(&p);
  static const float want[4] = {20, 30, 40, 50};  // (x + 1) * 10
  run_expect(c, 2, kBufferProgram, 78, want);
  assert_int_equal(atomic_load(&p.requests), 1);
  assert_true(p.buffer);
  assert_int_equal(p.n_aliases, 1);
  assert_int_equal(p.alias0, 1);  // operand 0
  cw_client_release(c);
}

static void test_bad_answers(void** state) {
  (void)state;
  peer_t p = {.answer = ANSWER_ERROR};
  cw_client_t* c = callback_client(&p);
  uint64_t rid = 0;
  // The callable's error is the launch's, code and message.
  launch(c, 1, 10, 11, 5, &rid);
  expect_error(cw_client_wait(c, rid, NULL, NULL), CW_INTERNAL, "cw-test-boom in the callable");
  // Results of the wrong size.
  p.answer = ANSWER_SHORT;
  launch(c, 1, 10, 12, 5, &rid);
  expect_error(cw_client_wait(c, rid, NULL, NULL), CW_INTERNAL,
               "the client answered with 8 bytes of results; the program expects 16");
  // A launch that gave no callables: refused by the handler, no request.
  int before = atomic_load(&p.requests);
  launch(c, 1, 10, 13, 0, &rid);
  expect_error(cw_client_wait(c, rid, NULL, NULL), CW_FAILED_PRECONDITION,
               "gave this launch no callables");
  assert_int_equal(atomic_load(&p.requests), before);
  cw_client_release(c);
}

// A client's second connection in its session (one to fill seqs, opened for
// a moment: cw_plugin_fill.c) is not asked: callbacks go to its oldest.
static void test_callbacks_go_to_the_oldest_connection(void** state) {
  (void)state;
  peer_t first = {.answer = ANSWER_TIMES_TEN};
  peer_t second = {.answer = ANSWER_ERROR};
  cw_client_options_t o = {.peer_name = "hostcb-test",
                           .role = CAUSEWAY__V1__ROLE__ROLE_CLIENT,
                           .session_id = 5151,
                           .on_request = on_request,
                           .request_user = &first};
  cw_client_t* c1 = NULL;
  cw_client_t* c2 = NULL;
  ASSERT_OK(cw_client_connect(g_worker.address, &o, &c1));
  o.request_user = &second;
  ASSERT_OK(cw_client_connect(g_worker.address, &o, &c2));
  assert_int_equal(cw_client_session_key(c1), cw_client_session_key(c2));  // one life
  static const float want[4] = {11, 21, 31, 41};
  run_expect(c1, 5, kCallbackProgram, 79, want);
  assert_int_equal(atomic_load(&first.requests), 1);
  assert_int_equal(atomic_load(&second.requests), 0);
  cw_client_release(c2);
  cw_client_release(c1);
}

static void test_slow_then_dead_client(void** state) {
  (void)state;
  peer_t slow = {.answer = ANSWER_NEVER};
  cw_client_t* a = callback_client(&slow);
  uint64_t rid = 0;
  launch(a, 1, 10, 11, 9, &rid);
  for (int i = 0; i < 2000 && atomic_load(&slow.requests) == 0; ++i) cw_test_sleep_ms(5);
  assert_int_equal(atomic_load(&slow.requests), 1);
  // Another session's launches run while A's callable "runs".
  peer_t other = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* b = connect_peer(&other);
  compile(b, 1, kScaleProgram);
  static const float y[6] = {1, 2, 3, 4, 5, 6};
  int64_t dims[2] = {2, 3};
  int64_t t0 = cw_time_now_ms();
  for (int k = 0; k < 3; ++k) {
    ASSERT_OK(cw_client_upload(b, 20, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, NULL, 0, y,
                               sizeof(y), NULL, NULL));
    uint64_t brid = 0;
    launch(b, 1, 20, 21, 0, &brid);
    ASSERT_OK(cw_client_wait(b, brid, NULL, NULL));
    float got[6] = {0};
    ASSERT_OK(cw_client_download(b, 21, got, sizeof(got), NULL, NULL));
    assert_true(got[5] == 13.0f);
    uint64_t ids[2] = {20, 21};
    ASSERT_OK(cw_client_delete(b, ids, 2, NULL, NULL));
  }
  int64_t took = cw_time_now_ms() - t0;
  fprintf(stderr, "  another session's 3 launches took %lld ms beside a pending callback\n",
          (long long)took);
  assert_true(took < 10000);
  // A dies with its callback pending: its launch fails, B goes on.
  cw_client_release(a);
  for (int k = 0; k < 2; ++k) {
    ASSERT_OK(cw_client_upload(b, 30, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, NULL, 0, y,
                               sizeof(y), NULL, NULL));
    ASSERT_OK(cw_client_await(b, 30));
    uint64_t ids[1] = {30};
    ASSERT_OK(cw_client_delete(b, ids, 1, NULL, NULL));
  }
  // And a new client's callbacks still work.
  peer_t again = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* c = callback_client(&again);
  launch(c, 1, 10, 11, 3, &rid);
  ASSERT_OK(cw_client_wait(c, rid, NULL, NULL));
  cw_client_release(c);
  cw_client_release(b);
}

static void on_ignored(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  cw_status_free(status);
}

static void on_launch_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  atomic_store((atomic_int*)user, status ? -1 : 1);
  cw_status_free(status);
}

// Session `b`'s launch of its f32[2,3] doubling program (exe 1) from 20 into
// `out`, sent on `via` (b, or its controller link with `stamp`); its
// completion sets *done (1 OK, -1 error).
static void plain_launch(cw_client_t* b, cw_client_t* via, uint64_t stamp, uint64_t out,
                         atomic_int* done) {
  compile(b, 1, kScaleProgram);
  static const float y[6] = {1, 2, 3, 4, 5, 6};
  int64_t dims[2] = {2, 3};
  ASSERT_OK(cw_client_upload(b, 20, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, NULL, 0, y,
                             sizeof(y), NULL, NULL));
  ASSERT_OK(cw_client_flush(b));
  launch1_t l;
  launch1_init(&l, 1, 20, out, false);
  l.req.sched_stamp = stamp;
  ASSERT_OK(cw_client_send(via, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, on_launch_done, done,
                           NULL));
}

// Sends `n` launches of exe 1 on 10 that call back (outputs 100 on) on `c`,
// stamped from `stamp` on (0: unstamped); 16 of them, the most a worker keeps
// in flight, reach `p`, which never answers.
static void launch_unanswered(cw_client_t* c, peer_t* p, int n, uint64_t stamp) {
  for (int i = 0; i < n; ++i) {
    launch1_t l;
    launch1_init(&l, 1, 10, 100 + (uint64_t)i, false);
    l.req.host_callbacks = 9;
    l.req.sched_stamp = stamp ? stamp + (uint64_t)i : 0;
    ASSERT_OK(cw_client_send(c, CW_MSG_LAUNCH, &l.req.base, NULL, 0, NULL, on_ignored, NULL,
                             NULL));
  }
  for (int i = 0; i < 2000 && atomic_load(&p->requests) < 16; ++i) cw_test_sleep_ms(5);
  cw_test_sleep_ms(200);
  assert_int_equal(atomic_load(&p->requests), 16);
}

// XLA's CPU client lets 32 executions per device be in flight and blocks
// the caller past that. Launches whose callbacks nobody answers stay in
// flight, and a launch without callbacks is dispatched on the worker's
// loop: with 32 of them unanswered it blocked the loop for good, the loop
// that carries every answer (a helper's audit). The worker keeps at most 16
// callback launches in flight; the rest wait their turn.
static void test_many_unanswered_callbacks(void** state) {
  (void)state;
  peer_t silent = {.answer = ANSWER_NEVER};
  cw_client_t* a = callback_client(&silent);
  launch_unanswered(a, &silent, 40, 0);  // the rest wait at the worker
  // Another session's plain launch runs (before: never, nor a PING).
  peer_t other = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* b = connect_peer(&other);
  atomic_int done = 0;
  plain_launch(b, b, 0, 21, &done);
  for (int i = 0; i < 4000 && atomic_load(&done) == 0; ++i) cw_test_sleep_ms(5);
  assert_int_equal(atomic_load(&done), 1);
  ASSERT_OK(cw_client_ping(b));
  // A leaves: its launches end, and callbacks work again for others.
  cw_client_release(a);
  peer_t again = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* c = callback_client(&again);
  uint64_t rid = 0;
  launch(c, 1, 10, 11, 3, &rid);
  ASSERT_OK(cw_client_wait(c, rid, NULL, NULL));
  cw_client_release(c);
  cw_client_release(b);
}

// The controller's link in `c`'s session: stamped launches.
static cw_client_t* link_of(cw_client_t* c) {
  cw_client_t* link = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, cw_client_session_id(c), &link));
  return link;
}

// The worker's next turn: after the last recorded (its record is short here).
static uint64_t next_turn(void) {
  uint64_t stamps[512], sessions[512];
  size_t n = sched_record(stamps, sessions, 512);
  return n ? stamps[n - 1] + 1 : 1;
}

// The index of `stamp` in the worker's record of turns passed; -1 if absent.
static int turn_index(uint64_t stamp) {
  uint64_t stamps[512], sessions[512];
  size_t n = sched_record(stamps, sessions, 512);
  for (size_t i = 0; i < n; ++i) {
    if (stamps[i] == stamp) return (int)i;
  }
  return -1;
}

// A stamped launch that the callback bound holds passes its turn, as one
// waiting for memory does, so another session's later turn runs at once.
// Before, it kept the turn unseen: the later one waited for the 5 s stall
// timer, which skipped the turn with a warning (a review of a347163).
static void test_throttled_launch_passes_its_turn(void** state) {
  (void)state;
  peer_t silent = {.answer = ANSWER_NEVER};
  cw_client_t* a = callback_client(&silent);
  cw_client_t* a_link = link_of(a);
  uint64_t s0 = next_turn();
  launch_unanswered(a_link, &silent, 17, s0);  // 16 in flight; the 17th is held
  peer_t other = {.answer = ANSWER_TIMES_TEN};
  cw_client_t* b = connect_peer(&other);
  cw_client_t* b_link = link_of(b);
  atomic_int done = 0;
  plain_launch(b, b_link, s0 + 17, 21, &done);
  for (int i = 0; i < 4000 && atomic_load(&done) == 0; ++i) cw_test_sleep_ms(5);
  assert_int_equal(atomic_load(&done), 1);
  // The held launch passed its turn before B's ran (not skipped after it).
  int held = turn_index(s0 + 16), later = turn_index(s0 + 17);
  fprintf(stderr, "  turns passed: held launch at %d, the later one at %d\n", held, later);
  assert_true(held >= 0 && later > held);
  float got[6] = {0};
  ASSERT_OK(cw_client_download(b, 21, got, sizeof(got), NULL, NULL));
  assert_true(got[5] == 13.0f);
  cw_client_release(a_link);
  cw_client_release(a);
  cw_client_release(b_link);
  cw_client_release(b);
}

// Sends, as the controller on `fd`, a part of an island's launch stamped
// `stamp` that may call back (exe 1 on 10 into 200), as request `rid`.
static void send_callback_part(int fd, uint64_t rid, uint64_t stamp) {
  launch1_t part;
  launch1_init(&part, 1, 10, 200, false);
  part.req.host_callbacks = 9;
  part.req.sched_stamp = stamp;
  part.req.prepare = true;
  send_frame(fd, CW_MSG_LAUNCH, rid, &part.req.base, NULL, 0);
}

// A part of an island's launch held by the callback bound at its turn: A's
// 16 callback launches in flight, never answered; the part (stamp k, A's
// session, on the raw controller link fd, request 1); B's plain launch at
// k + 1 on its link, whose completion sets done.
typedef struct {
  peer_t silent, other;
  cw_client_t *a, *b, *b_link;
  uint64_t k;
  int fd;
  atomic_int done;
} held_part_t;

static void held_part_start(held_part_t* h) {
  h->silent = (peer_t){.answer = ANSWER_NEVER};
  h->other = (peer_t){.answer = ANSWER_TIMES_TEN};
  h->a = callback_client(&h->silent);
  launch_unanswered(h->a, &h->silent, 16, 0);
  h->k = next_turn();
  h->fd = raw_link(cw_client_session_id(h->a));
  send_callback_part(h->fd, 1, h->k);
  h->b = connect_peer(&h->other);
  h->b_link = link_of(h->b);
  atomic_init(&h->done, 0);
  plain_launch(h->b, h->b_link, h->k + 1, 21, &h->done);
}

// B's launch completes (within 20 s), after the part's turn passed.
static void expect_turns_in_order(held_part_t* h) {
  for (int i = 0; i < 4000 && atomic_load(&h->done) == 0; ++i) cw_test_sleep_ms(5);
  assert_int_equal(atomic_load(&h->done), 1);
  int held = turn_index(h->k), later = turn_index(h->k + 1);
  assert_true(held >= 0 && later > held);
}

// A part of an island's launch held by the callback bound at its turn keeps
// the turn, as a part waiting for memory does: the stall timer must not skip
// it (the other members issue it in this order). Later turns wait for it.
static void test_throttled_part_keeps_its_turn(void** state) {
  (void)state;
  held_part_t h;
  held_part_start(&h);
  // Past the stall timer (5 s): the part's turn was not skipped.
  cw_test_sleep_ms(6000);
  assert_int_equal(atomic_load(&h.done), 0);
  assert_int_equal(turn_index(h.k + 1), -1);
  // A leaves: its callback launches end, the part answers ready at its turn
  // and is cancelled (as its controller would, with no client to call), then
  // B's turn comes.
  cw_client_release(h.a);
  expect_reply(h.fd, 1, 0, "the part ready at its turn");
  raw_go(h.fd, 2, h.k, false);
  expect_reply(h.fd, 2, CW_CANCELLED, "the part cancelled");
  expect_turns_in_order(&h);
  close(h.fd);
  cw_client_release(h.b_link);
  cw_client_release(h.b);
}

// The same part, but its controller link closes while the bound holds it:
// nobody can say go any more, so it fails in its turn at once and later
// turns go on, though the callback launches in flight never end (a review:
// it held every later turn until a launch ended).
static void test_throttled_part_of_a_closed_link_passes(void** state) {
  (void)state;
  held_part_t h;
  held_part_start(&h);
  cw_test_sleep_ms(200);
  assert_int_equal(atomic_load(&h.done), 0);  // waits for the part's turn
  close(h.fd);
  expect_turns_in_order(&h);  // A's callbacks still unanswered
  cw_client_release(h.b_link);
  cw_client_release(h.b);
  cw_client_release(h.a);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_buffer_callback),
      cmocka_unit_test(test_bad_answers),
      cmocka_unit_test(test_callbacks_go_to_the_oldest_connection),
      cmocka_unit_test(test_slow_then_dead_client),
      cmocka_unit_test(test_many_unanswered_callbacks),
      cmocka_unit_test(test_throttled_launch_passes_its_turn),
      cmocka_unit_test(test_throttled_part_keeps_its_turn),
      cmocka_unit_test(test_throttled_part_of_a_closed_link_passes),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
