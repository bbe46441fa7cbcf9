// Worker integration: bytes between workers and devices (SEND worker to
// worker, COPY to another device) and DELETE while requests that use the id
// still wait for it. Fixture: cw_test_integration.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_test_integration.h"

static const Causeway__V1__PeerStats* find_peer(const Causeway__V1__Stats* st, const char* a,
                                                const char* b) {
  for (size_t i = 0; i < st->n_peers; i++) {
    const char* p = st->peers[i]->peer;
    if (p && ((a && strstr(p, a)) || (b && strstr(p, b)))) return st->peers[i];
  }
  return NULL;
}

static void print_peers(const char* who, const Causeway__V1__Stats* st) {
  for (size_t i = 0; i < st->n_peers; i++)
    fprintf(stderr, "  %s peer \"%s\": in %llu out %llu\n", who, st->peers[i]->peer,
            (unsigned long long)st->peers[i]->bytes_in,
            (unsigned long long)st->peers[i]->bytes_out);
}

// Client on B declares an id (EXPECT); client on A asks A to SEND its buffer
// to B's address for B's session. The bytes go A -> B directly: the client
// never downloads from A, and both workers count them under the peer.
static void test_worker_to_worker_send(void** state) {
  (void)state;
  array_t arr = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 2, .dims = {512, 256}};
  arr.size = 512 * 256 * 4;
  arr.data = malloc(arr.size);
  assert_non_null(arr.data);
  for (size_t i = 0; i < arr.size / 4; i++) ((float*)arr.data)[i] = (float)i * 0.5f - 7.0f;

  uint64_t src = new_id(), dst = new_id();
  upload(g.ca, src, &arr, 0);
  ASSERT_OK(cw_client_flush(g.ca));
  Causeway__V1__Stats* a0 = get_stats(g.ca);
  Causeway__V1__Stats* b0 = get_stats(g.cb);

  completion_t expected = {0}, sent = {0};
  ASSERT_OK(cw_client_expect(g.cb, dst, on_done, &expected));
  ASSERT_OK(finish(g.cb, &expected));
  ASSERT_OK(cw_client_send_to_peer(g.ca, src, g.b.address, dst, 1,
                                   cw_client_session_id(g.cb), on_done, &sent));
  ASSERT_OK(finish(g.ca, &sent));
  expect_array(g.cb, dst, &arr, 1, "B's copy of A's buffer");

  Causeway__V1__Stats* a1 = get_stats(g.ca);
  Causeway__V1__Stats* b1 = get_stats(g.cb);
  print_peers("A", a1);
  print_peers("B", b1);
  // A names its outgoing peer by address, B names the incoming one by the
  // HELLO peer name; accept either on both sides.
  const Causeway__V1__PeerStats* pa = find_peer(a1, "worker-b", g.b.address);
  const Causeway__V1__PeerStats* pb = find_peer(b1, "worker-a", g.a.address);
  const Causeway__V1__PeerStats* pa0 = find_peer(a0, "worker-b", g.b.address);
  const Causeway__V1__PeerStats* pb0 = find_peer(b0, "worker-a", g.a.address);
  uint64_t a_out = pa ? pa->bytes_out - (pa0 ? pa0->bytes_out : 0) : 0;
  uint64_t b_in = pb ? pb->bytes_in - (pb0 ? pb0->bytes_in : 0) : 0;
  uint64_t a_in = pa ? pa->bytes_in - (pa0 ? pa0->bytes_in : 0) : 0;
  uint64_t b_out = pb ? pb->bytes_out - (pb0 ? pb0->bytes_out : 0) : 0;
  bool no_download_from_a = a1->downloads == a0->downloads;
  free_msg(a0);
  free_msg(b0);
  free_msg(a1);
  free_msg(b1);
  free(arr.data);
  fprintf(stderr, "  A counted %llu bytes out to B, B counted %llu bytes in from A (array: %zu)\n",
          (unsigned long long)a_out, (unsigned long long)b_in, arr.size);
  assert_true(no_download_from_a);  // the client never read from A
  if (!pa) fail_msg("A's STATS has no peer entry for worker-b / %s", g.b.address);
  if (!pb) fail_msg("B's STATS has no peer entry for worker-a / %s", g.a.address);
  assert_true(a_out >= arr.size);
  assert_true(b_in >= arr.size);
  // Every byte A wrote to B (HELLO, PUT) was read by B before B acked the
  // PUT, and B's replies were read by A before A acked the SEND: both ends
  // must agree exactly (B once lost the bytes that arrived with the HELLO).
  fprintf(stderr, "  A counted %llu bytes in from B, B counted %llu bytes out to A\n",
          (unsigned long long)a_in, (unsigned long long)b_out);
  assert_int_equal(b_in, a_out);
  assert_int_equal(a_in, b_out);

  // SENDs naming 200 other sessions at B (none exist: each fails) reuse
  // A's one connection to B. One connection per destination session, never
  // closed, once filled B's --max-connections for every client.
  Causeway__V1__Stats* c0 = get_stats(g.cb);
  for (uint64_t k = 0; k < 200; ++k) {
    completion_t other = {0};
    ASSERT_OK(cw_client_send_to_peer(g.ca, src, g.b.address, new_id(), 1, 0x5e550000 + k,
                                     on_done, &other));
    expect_error(finish(g.ca, &other), "not found", "SEND to a session B does not have");
  }
  Causeway__V1__Stats* c1 = get_stats(g.cb);
  fprintf(stderr, "  B's connections before / after 200 SENDs to other sessions: %llu / %llu\n",
          (unsigned long long)c0->connections, (unsigned long long)c1->connections);
  assert_true(c1->connections <= c0->connections);
  free_msg(c0);
  free_msg(c1);

  ASSERT_OK(cw_client_delete(g.ca, &src, 1, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.cb, &dst, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
  ASSERT_OK(cw_client_flush(g.cb));
}

// COPY to another device of the same worker, then use the copy there.
static void test_copy_to_other_device(void** state) {
  (void)state;
  const test_case_t* c = find_case("scalar_f32");
  uint64_t src = new_id(), dst = new_id();
  upload(g.ca, src, &c->in[0][0], 0);
  completion_t copied = {0};
  ASSERT_OK(cw_client_copy(g.ca, src, dst, 3, on_done, &copied));
  ASSERT_OK(finish(g.ca, &copied));
  expect_array(g.ca, dst, &c->in[0][0], 3, "copy on device 3");
  expect_array(g.ca, src, &c->in[0][0], 0, "copy source on device 0");
  // A pending source: copy an id whose upload was only just sent.
  uint64_t src2 = new_id(), dst2 = new_id();
  const array_t* big = &find_case("mlp_f32")->in[0][1];
  upload(g.ca, src2, big, 1);
  ASSERT_OK(cw_client_copy(g.ca, src2, dst2, 2, NULL, NULL));
  expect_array(g.ca, dst2, big, 2, "copy of a just-uploaded buffer on device 2");
  uint64_t all[4] = {src, dst, src2, dst2};
  ASSERT_OK(cw_client_delete(g.ca, all, 4, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

// Requests applied in program order keep what they use: a LAUNCH, DOWNLOAD,
// AWAIT, COPY and SEND applied while their input X is pending (EXPECT-ed on B,
// filled by A's SEND) all succeed with X's value although a DELETE of X, later
// in program order, removed the id before the bytes came; meanwhile X is
// NOT_FOUND and may be created anew. (Stock PJRT lets a client destroy a
// buffer once an execution using it is enqueued; JAX's DELETE of a dropped
// array arrives exactly so.)
// A DOWNLOAD of `id` into `sink`, answered into `done` (it may wait).
static void send_download(cw_client_t* client, uint64_t id, cw_client_sink_t* sink,
                          completion_t* done) {
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = id;
  ASSERT_OK(cw_client_send(client, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, sink, on_done, done,
                           NULL));
}

static void test_delete_while_requests_wait(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  assert_int_equal(c->devices, 1);
  uint64_t exe = compile_case(g.cb, c);
  run_ids_t ids;
  make_ids(c, &ids);
  uint64_t x = ids.args[0][0], y = new_id(), z = new_id(), src = new_id();
  for (size_t i = 1; i < c->num_args; i++) upload(g.cb, ids.args[0][i], &c->in[0][i], 0);
  completion_t expected = {0}, expected_z = {0};
  ASSERT_OK(cw_client_expect(g.cb, x, on_done, &expected));
  ASSERT_OK(finish(g.cb, &expected));
  ASSERT_OK(cw_client_expect(g.ca, z, on_done, &expected_z));  // B sends X on to A as z
  ASSERT_OK(finish(g.ca, &expected_z));

  // All applied while X is pending: they wait.
  completion_t launched = {0}, awaited = {0}, copied = {0}, sent_on = {0};
  ASSERT_OK(cw_client_launch(g.cb, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  const array_t* want_x = &c->in[0][0];
  uint8_t* got_x = malloc(want_x->size + 1);
  assert_non_null(got_x);
  cw_client_sink_t sink = {.data = got_x, .capacity = want_x->size};
  completion_t downloaded = {0};
  send_download(g.cb, x, &sink, &downloaded);
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = x;
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, on_done, &awaited, NULL));
  ASSERT_OK(cw_client_copy(g.cb, x, y, 1, on_done, &copied));
  ASSERT_OK(cw_client_send_to_peer(g.cb, x, g.a.address, z, 0, cw_client_session_id(g.ca),
                                   on_done, &sent_on));
  // Later in program order: the client drops X. (Waited for alone: a flush
  // would wait for the launch too.)
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &x;
  del.n_ids = 1;
  uint64_t del_req = 0;
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, NULL, &del_req));
  ASSERT_OK(cw_client_wait(g.cb, del_req, NULL, NULL));  // B applied everything above
  assert_false(launched.done);
  assert_false(copied.done);
  // The id is gone at once, and may be used again.
  uint8_t sink1[16];
  size_t got1 = 0;
  expect_error(cw_client_download(g.cb, x, sink1, sizeof(sink1), &got1, NULL), "not found",
               "download of the deleted id");
  float other_vals[1] = {42.0f};
  array_t other = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 0, .size = 4};
  other.data = other_vals;
  upload(g.cb, x, &other, 0);
  // A PUT fills only what EXPECT declared: not the launch's pending output,
  // nor the copy's destination (a PUT into the output was acked, and the
  // launch then acked with the PUT's bytes in its output).
  uint64_t src2 = new_id();
  upload(g.ca, src2, want_x, 0);
  uint64_t not_expected[2] = {ids.outs[0][0], y};
  for (int k = 0; k < 2; ++k) {
    completion_t into = {0};
    ASSERT_OK(cw_client_send_to_peer(g.ca, src2, g.b.address, not_expected[k], 0,
                                     cw_client_session_id(g.cb), on_done, &into));
    expect_error(finish(g.ca, &into), "already exists", "PUT into a pending launch output or copy");
  }

  // Now A fills the X the waiting requests hold.
  upload(g.ca, src, want_x, 0);
  completion_t sent = {0};
  ASSERT_OK(cw_client_send_to_peer(g.ca, src, g.b.address, x, 0, cw_client_session_id(g.cb),
                                   on_done, &sent));
  ASSERT_OK(finish(g.ca, &sent));
  ASSERT_OK(finish(g.cb, &launched));
  ASSERT_OK(finish(g.cb, &awaited));
  ASSERT_OK(finish(g.cb, &copied));
  ASSERT_OK(finish(g.cb, &sent_on));
  ASSERT_OK(finish(g.cb, &downloaded));
  assert_memory_equal(got_x, want_x->data, want_x->size);
  free(got_x);
  for (size_t j = 0; j < c->num_outputs; j++) {
    expect_array(g.cb, ids.outs[0][j], &c->out[0][j], 0, "launch on the deleted input");
  }
  expect_array(g.cb, y, want_x, 1, "copy of the deleted input");
  expect_array(g.ca, z, want_x, 0, "send of the deleted input");
  expect_array(g.cb, x, &other, 0, "the id created again");

  ASSERT_OK(cw_client_delete(g.cb, &ids.args[0][0], c->num_args, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.cb, ids.outs[0], c->num_outputs, NULL, NULL));
  uint64_t rest_b[2] = {y, exe}, rest_a[3] = {z, src, src2};
  ASSERT_OK(cw_client_delete(g.cb, rest_b, 2, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.ca, rest_a, 3, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.cb));
  ASSERT_OK(cw_client_flush(g.ca));
  Causeway__V1__Stats* sb = get_stats(g.cb);
  Causeway__V1__Stats* sa = get_stats(g.ca);
  fprintf(stderr, "  left: B %llu buffers, A %llu buffers\n", (unsigned long long)sb->buffers,
          (unsigned long long)sa->buffers);
  free_msg(sb);
  free_msg(sa);
}

// COMPILE is asynchronous: UPLOAD x, LAUNCH e(x), DELETE x and e sent back to
// back make the launch wait for the compile while its executable and inputs
// are deleted. It runs all the same, with the values it was applied with.
static void test_delete_while_launch_waits_for_compile(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  uint64_t exe = new_id();
  run_ids_t ids;
  make_ids(c, &ids);
  Causeway__V1__CompileRequest creq = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  creq.exe_id = exe;
  creq.format = (char*)"mlir";
  creq.code.data = (uint8_t*)c->program;
  creq.code.len = c->program_size;
  creq.compile_options.data = (uint8_t*)c->options;
  creq.compile_options.len = c->options_size;
  completion_t compiled = {0}, launched = {0}, deleted = {0}, deleted_exe = {0};
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_COMPILE, &creq.base, NULL, 0, NULL, on_done, &compiled,
                           NULL));
  for (size_t i = 0; i < c->num_args; i++) upload(g.cb, ids.args[0][i], &c->in[0][i], 0);
  ASSERT_OK(cw_client_launch(g.cb, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  ASSERT_OK(cw_client_delete(g.cb, ids.args[0], c->num_args, on_done, &deleted));
  ASSERT_OK(cw_client_delete(g.cb, &exe, 1, on_done, &deleted_exe));
  ASSERT_OK(finish(g.cb, &compiled));
  ASSERT_OK(finish(g.cb, &deleted));
  ASSERT_OK(finish(g.cb, &deleted_exe));
  ASSERT_OK(finish(g.cb, &launched));
  for (size_t j = 0; j < c->num_outputs; j++) {
    expect_array(g.cb, ids.outs[0][j], &c->out[0][j], 0, "launch after its inputs' DELETE");
  }
  ASSERT_OK(cw_client_delete(g.cb, ids.outs[0], c->num_outputs, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.cb));
}

// The client's word that an EXPECT-ed buffer's PUT will not come (its
// SEND failed at the source): a read waiting for it fails with that error
// instead of waiting for good; a buffer filled or unknown is left alone.
static void test_expect_failed(void** state) {
  (void)state;
  uint64_t x = new_id(), y = new_id();
  completion_t expected = {0};
  ASSERT_OK(cw_client_expect(g.cb, x, on_done, &expected));
  ASSERT_OK(finish(g.cb, &expected));
  uint8_t sink_bytes[16];
  cw_client_sink_t sink = {.data = sink_bytes, .capacity = sizeof(sink_bytes)};
  completion_t downloaded = {0};
  send_download(g.cb, x, &sink, &downloaded);
  Causeway__V1__ErrorReply er = CAUSEWAY__V1__ERROR_REPLY__INIT;
  er.code = CW_ABORTED;
  er.message = "the copy failed at its source";
  uint64_t ids[2] = {x, y};  // y: never expected
  for (int i = 0; i < 2; ++i) {
    Causeway__V1__ExpectRequest ex = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
    ex.buffer_id = ids[i];
    ex.error = &er;
    uint64_t req = 0;
    ASSERT_OK(cw_client_send(g.cb, CW_MSG_EXPECT, &ex.base, NULL, 0, NULL, NULL, NULL, &req));
    ASSERT_OK(cw_client_wait(g.cb, req, NULL, NULL));
  }
  expect_error(finish(g.cb, &downloaded), "the copy failed at its source", "the waiting read");
  uint8_t sink1[16];
  size_t got = 0;
  expect_error(cw_client_download(g.cb, y, sink1, sizeof(sink1), &got, NULL), "not found",
               "the id never expected");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worker_to_worker_send),
      cmocka_unit_test(test_copy_to_other_device),
      cmocka_unit_test(test_delete_while_requests_wait),
      cmocka_unit_test(test_expect_failed),
      cmocka_unit_test(test_delete_while_launch_waits_for_compile),
      cmocka_unit_test(itest_test_clean_shutdown),
  };
  return cmocka_run_group_tests_name("worker_transfers", tests, itest_group_setup,
                                     itest_group_teardown);
}
