// Worker integration: every program of the manifest compiled, run and
// compared bit for bit with stock JAX on worker A (TCP) and B (Unix socket);
// inventory, strided uploads, serialize on A and load on B, and every case
// pipelined without waiting. Fixture: cw_test_integration.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_test_integration.h"

static void test_inventory(void** state) {
  (void)state;
  cw_client_t* clients[2] = {g.ca, g.cb};
  for (int i = 0; i < 2; i++) {
    Causeway__V1__Inventory* inv = NULL;
    ASSERT_OK(cw_client_inventory(clients[i], &inv));
    fprintf(stderr, "  %s: platform %s %s, PJRT %u.%u, %zu devices\n", inv->worker_name,
            inv->platform_name, inv->platform_version, inv->pjrt_major, inv->pjrt_minor,
            inv->n_devices);
    assert_int_equal(inv->n_devices, WORKER_DEVICES);
    assert_string_equal(inv->worker_name, i == 0 ? "worker-a" : "worker-b");
    for (size_t d = 0; d < inv->n_devices; d++) assert_int_equal(inv->devices[d]->local_id, d);
    free_msg(inv);
  }
  ASSERT_OK(cw_client_ping(g.ca));
  ASSERT_OK(cw_client_ping(g.cb));
}

static void test_cases_over_tcp(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_cases; i++) run_case(g.ca, &g.cases[i], "A(tcp)");
}

static void test_cases_over_unix_socket(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_cases; i++) run_case(g.cb, &g.cases[i], "B(unix)");
}

// The matmul case with its first input uploaded from a column-major host
// layout (byte_strides {elem, rows*elem}): the worker must read it as the same
// logical array, and downloads are dense row-major.
static void test_strided_upload(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  const array_t* a = &c->in[0][0];
  assert_int_equal(a->rank, 2);
  size_t rows = (size_t)a->dims[0], cols = (size_t)a->dims[1], es = dtype_size(a->dtype);
  uint8_t* colmajor = malloc(a->size);
  assert_non_null(colmajor);
  for (size_t r = 0; r < rows; r++)
    for (size_t k = 0; k < cols; k++)
      memcpy(colmajor + (k * rows + r) * es, (const uint8_t*)a->data + (r * cols + k) * es, es);
  int64_t strides[2] = {(int64_t)es, (int64_t)(rows * es)};

  uint64_t exe = compile_case(g.ca, c);
  run_ids_t ids;
  make_ids(c, &ids);
  ASSERT_OK(cw_client_upload(g.ca, ids.args[0][0], a->dtype, a->dims, a->rank, strides, 0,
                             colmajor, a->size, NULL, NULL));
  free(colmajor);
  for (size_t i = 1; i < c->num_args; i++) upload(g.ca, ids.args[0][i], &c->in[0][i], 0);
  completion_t launched = {0};
  ASSERT_OK(cw_client_launch(g.ca, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  ASSERT_OK(finish(g.ca, &launched));
  expect_array(g.ca, ids.args[0][0], a, 0, "column-major input read back");
  expect_array(g.ca, ids.outs[0][0], &c->out[0][0], 0, "output from column-major input");
  delete_ids(g.ca, c, &ids);
  ASSERT_OK(cw_client_delete(g.ca, &exe, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

// Compile on A, SERIALIZE there, LOAD on B, run on B: same results.
static void test_serialize_on_a_load_on_b(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_cases; i++) {
    const test_case_t* c = &g.cases[i];
    uint64_t exe_a = compile_case(g.ca, c);
    void* blob = NULL;
    size_t blob_size = 0;
    ASSERT_OK(cw_client_serialize(g.ca, exe_a, &blob, &blob_size));
    assert_true(blob_size > 0);
    uint64_t exe_b = new_id();
    uint32_t num_outputs = 0;
    cw_status_t s = cw_client_load(g.cb, exe_b, blob, blob_size, c->options, c->options_size,
                                   &num_outputs);
    free(blob);
    ASSERT_OK(s);
    assert_int_equal(num_outputs, c->num_outputs);
    run_compiled(g.cb, exe_b, c, "B(loaded from A)");
    ASSERT_OK(cw_client_delete(g.ca, &exe_a, 1, NULL, NULL));
    ASSERT_OK(cw_client_delete(g.cb, &exe_b, 1, NULL, NULL));
    ASSERT_OK(cw_client_flush(g.ca));
    ASSERT_OK(cw_client_flush(g.cb));
    fprintf(stderr, "  ok %-14s serialized %zu bytes on A, loaded and run on B\n", c->name,
            blob_size);
  }
}

// Every case at once, without waiting between requests: uploads, launch and
// DOWNLOAD requests go out back to back; then the downloads are collected.
static void test_pipelining(void** state) {
  (void)state;
  static run_ids_t ids[MAX_CASES];
  uint64_t exes[MAX_CASES];
  static uint64_t req[MAX_CASES][MAX_DEVICES][MAX_OUTS];
  static uint8_t* sinks[MAX_CASES][MAX_DEVICES][MAX_OUTS];
  for (size_t i = 0; i < g.num_cases; i++) exes[i] = compile_case(g.cb, &g.cases[i]);
  int64_t t0 = cw_time_now_ms();
  for (size_t i = 0; i < g.num_cases; i++) {
    const test_case_t* c = &g.cases[i];
    make_ids(c, &ids[i]);
    for (int d = 0; d < c->devices; d++)
      for (size_t k = 0; k < c->num_args; k++) upload(g.cb, ids[i].args[d][k], &c->in[d][k], d);
    ASSERT_OK(cw_client_launch(g.cb, exes[i], (size_t)c->devices, c->num_args, ids[i].arg_rows,
                               c->num_outputs, ids[i].out_rows, NULL, NULL));
    for (int d = 0; d < c->devices; d++)
      for (size_t j = 0; j < c->num_outputs; j++) {
        Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
        dl.buffer_id = ids[i].outs[d][j];
        sinks[i][d][j] = malloc(c->out[d][j].size + 1);
        cw_client_sink_t sink = {.data = sinks[i][d][j], .capacity = c->out[d][j].size};
        ASSERT_OK(cw_client_send(g.cb, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, NULL, NULL,
                                 &req[i][d][j]));
      }
  }
  for (size_t i = 0; i < g.num_cases; i++) {
    const test_case_t* c = &g.cases[i];
    for (int d = 0; d < c->devices; d++)
      for (size_t j = 0; j < c->num_outputs; j++) {
        ProtobufCMessage* reply = NULL;
        uint64_t bulk = 0;
        cw_status_t s = cw_client_wait(g.cb, req[i][d][j], &reply, &bulk);
        if (!cw_status_is_ok(s)) {
          fprintf(stderr, "  pipelined %s: %s\n", c->name, cw_status_message(s));
          cw_status_free(s);
          fail_msg("pipelined download of %s failed", c->name);
        }
        free_msg(reply);
        assert_int_equal(bulk, c->out[d][j].size);
        if (c->out[d][j].size && memcmp(sinks[i][d][j], c->out[d][j].data, bulk) != 0) {
          print_mismatch(c->name, &c->out[d][j], sinks[i][d][j]);
          fail_msg("pipelined %s device %d output %zu differs", c->name, d, j);
        }
        free(sinks[i][d][j]);
      }
  }
  ASSERT_OK(cw_client_flush(g.cb));
  fprintf(stderr, "  ok %zu cases pipelined on B in %lld ms\n", g.num_cases,
          (long long)(cw_time_now_ms() - t0));
  for (size_t i = 0; i < g.num_cases; i++) {
    delete_ids(g.cb, &g.cases[i], &ids[i]);
    ASSERT_OK(cw_client_delete(g.cb, &exes[i], 1, NULL, NULL));
  }
  ASSERT_OK(cw_client_flush(g.cb));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inventory),
      cmocka_unit_test(test_cases_over_tcp),
      cmocka_unit_test(test_cases_over_unix_socket),
      cmocka_unit_test(test_strided_upload),
      cmocka_unit_test(test_serialize_on_a_load_on_b),
      cmocka_unit_test(test_pipelining),
      cmocka_unit_test(itest_test_clean_shutdown),
  };
  return cmocka_run_group_tests_name("worker_programs", tests, itest_group_setup,
                                     itest_group_teardown);
}
