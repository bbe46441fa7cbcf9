// Unit tests of EXE_INFO's answer (cw_pjrt_info.c) in process, over XLA's
// real CPU plugin ($CAUSEWAY_PJRT_PLUGIN; skipped without one): outputs
// with their element types and dims, replicas and the devices they run on,
// the optimized program, and the parameters a program donates.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_pjrt_info.h"
#include "cw_pjrt_test_fixture.h"

static cw_pjrt_t* g_pjrt;

static int setup(void** state) {
  (void)state;
  return cw_pjrt_fixture_create(2, &g_pjrt);
}

static int teardown(void** state) {
  (void)state;
  return cw_pjrt_fixture_release(&g_pjrt);
}

// The info of `program` compiled with `options` (may be empty); free with
// cw_pjrt_exe_info_deinitialize.
static void info_of(const char* program, const uint8_t* options, size_t options_size,
                    Causeway__V1__ExecutableInfo* info) {
  PJRT_LoadedExecutable* exe = NULL;
  cw_status_t st = cw_pjrt_compile(g_pjrt, "mlir", (const uint8_t*)program, strlen(program),
                                   options, options_size, &exe);
  if (st) fail_msg("compile: %s", cw_status_message(st));
  st = cw_pjrt_exe_info_initialize(g_pjrt, exe, info);
  cw_pjrt_executable_destroy(g_pjrt, exe);
  if (st) fail_msg("exe info: %s", cw_status_message(st));
}

// Two outputs of different types and ranks; one replica on device 0.
static void test_outputs(void** state) {
  (void)state;
  static const char program[] =
      "module @two_outputs {\n"
      "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<ui32>) {\n"
      "    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
      "    %1 = stablehlo.constant dense<7> : tensor<ui32>\n"
      "    return %0, %1 : tensor<3x2xf32>, tensor<ui32>\n"
      "  }\n"
      "}\n";
  Causeway__V1__ExecutableInfo info;
  info_of(program, NULL, 0, &info);
  assert_non_null(strstr(info.name, "two_outputs"));
  assert_int_equal(info.num_replicas, 1);
  assert_int_equal(info.num_partitions, 1);
  assert_int_equal(info.num_outputs, 2);
  assert_int_equal(info.n_output_dtypes, 2);
  assert_int_equal(info.output_dtypes[0], CAUSEWAY__V1__DTYPE__DTYPE_F32);
  assert_int_equal(info.output_dtypes[1], CAUSEWAY__V1__DTYPE__DTYPE_U32);
  assert_int_equal(info.n_output_dims, 2);
  assert_int_equal(info.output_dims[0]->n_values, 2);
  assert_int_equal(info.output_dims[0]->values[0], 3);
  assert_int_equal(info.output_dims[0]->values[1], 2);
  assert_int_equal(info.output_dims[1]->n_values, 0);
  assert_int_equal(info.n_devices, 1);
  assert_int_equal(info.devices[0], 0);
  assert_int_equal(info.n_output_memory_kinds, 2);
  assert_true(info.fingerprint[0] != 0);
  // The optimized program is an HLO module whose parameters the worker reads.
  assert_true(info.optimized_program.len > 0);
  bool with_config = !strcmp(info.optimized_program_format, "hlo_with_config");
  assert_true(with_config || !strcmp(info.optimized_program_format, "hlo"));
  cw_pjrt_shape_t* params = NULL;
  size_t n = 0;
  cw_status_t st = cw_pjrt_params_from_hlo(info.optimized_program.data,
                                           info.optimized_program.len, with_config, &params, &n);
  assert_null(st);
  assert_int_equal(n, 1);
  assert_int_equal(params[0].rank, 2);
  cw_pjrt_shapes_free(params, n);
  assert_int_equal(info.n_donated_params, 0);
  // XLA's CPU plugin sizes the program's buffers: the argument, 6 f32.
  assert_non_null(info.memory_stats);
  assert_int_equal(info.memory_stats->argument_size_in_bytes, 6 * 4);
  assert_true(info.memory_stats->output_size_in_bytes >= 6 * 4 + 4);  // and XLA's tuple
  cw_pjrt_exe_info_deinitialize(&info);
  assert_null(info.memory_stats);
  assert_int_equal(info.n_output_dims, 0);  // reset: deinitializing again is harmless
  cw_pjrt_exe_info_deinitialize(&info);
}

// Two replicas: one device each, in the worker's local ids.
static void test_replicas_and_devices(void** state) {
  (void)state;
  static const char program[] =
      "module @replicated {\n"
      "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %0 = stablehlo.multiply %arg0, %arg0 : tensor<4xf32>\n"
      "    return %0 : tensor<4xf32>\n"
      "  }\n"
      "}\n";
  static const uint8_t two_replicas[] = {0x1a, 0x04, 0x20, 0x02, 0x28, 0x01};
  Causeway__V1__ExecutableInfo info;
  info_of(program, two_replicas, sizeof(two_replicas), &info);
  assert_int_equal(info.num_replicas, 2);
  assert_int_equal(info.num_partitions, 1);
  assert_int_equal(info.num_outputs, 1);
  assert_int_equal(info.n_devices, 2);
  assert_true((info.devices[0] == 0 && info.devices[1] == 1) ||
              (info.devices[0] == 1 && info.devices[1] == 0));
  assert_int_equal(info.output_dims[0]->values[0], 4);
  cw_pjrt_exe_info_deinitialize(&info);
}

// A parameter aliased to an output (JAX's donate_argnums) is named.
static void test_donated_params(void** state) {
  (void)state;
  static const char program[] =
      "module @donating {\n"
      "  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<2x3xf32> "
      "{tf.aliasing_output = 0 : i32}) -> (tensor<2x3xf32>) {\n"
      "    %0 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>\n"
      "    %1 = stablehlo.add %arg1, %0 : tensor<2x3xf32>\n"
      "    return %1 : tensor<2x3xf32>\n"
      "  }\n"
      "}\n";
  Causeway__V1__ExecutableInfo info;
  info_of(program, NULL, 0, &info);
  assert_int_equal(info.n_donated_params, 1);
  assert_int_equal(info.donated_params[0], 1);
  cw_pjrt_exe_info_deinitialize(&info);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_outputs),
      cmocka_unit_test(test_replicas_and_devices),
      cmocka_unit_test(test_donated_params),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
