// EXE_INFO at the worker (cw_worker_compile.c), against a real worker through
// the client library: asked right behind its COMPILE it waits for it, and
// answers with the executable's replicas, outputs, dtypes, dims, devices and
// optimized program, or with its id alone when asked for presence only; an
// unknown id is NOT_FOUND either way.
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

static const char kProgram[] =
    "module @cw_exe_info {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<i32>) {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>\n"
    "    %1 = stablehlo.constant dense<7> : tensor<i32>\n"
    "    return %0, %1 : tensor<2x3xf32>, tensor<i32>\n"
    "  }\n"
    "}\n";

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
  // presence_only: the id alone, no program text.
  er.presence_only = true;
  rep = NULL;
  ASSERT_OK(cw_client_call(c, CW_MSG_EXE_INFO, &er.base, NULL, 0, NULL, &rep, NULL));
  info = (const Causeway__V1__ExecutableInfo*)rep;
  assert_int_equal(info->exe_id, 7);
  assert_int_equal(info->optimized_program.len, 0);
  assert_int_equal(info->num_outputs, 0);
  assert_string_equal(info->name, "");
  protobuf_c_message_free_unpacked(rep, NULL);
  er.exe_id = 8;
  assert_code(cw_client_call(c, CW_MSG_EXE_INFO, &er.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);
  cw_client_release(c);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exe_info),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
