// The executable a compile reply describes, against a fake controller (the
// client library's fake peer): outputs whose element type or shape no array
// can have, and devices of several workers, are refused with an error naming
// them, and the program is dropped from the workers the controller loaded it
// on. JAX CHECK-fails (aborts the process) on a PJRT_Buffer_Type it does not
// know, so these never reach it (an audit: a controller's output dtype 999
// killed the JAX process).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client_fake_peer.h"
#include "cw_msg.h"
#include "cw_plugin_error.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_internal.h"

// What the fake controller's COMPILE reply says of its one output, and the
// devices it runs on (none: not said).
static Causeway__V1__DType g_dtype;
static int64_t g_dims[2];
static int32_t* g_devices;
static size_t g_num_devices;
// The ids the fake controller was asked to DELETE, and how many.
static uint64_t g_deleted[8];
static size_t g_num_deleted;
static uint64_t g_compiled;  // the COMPILE's exe_id

static void script_compile(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    bool ok;
    if (fr.h.type == CW_MSG_COMPILE) {
      g_compiled = ((const Causeway__V1__CompileRequest*)fr.msg)->exe_id;
      Causeway__V1__Int64List dims = CAUSEWAY__V1__INT64_LIST__INIT;
      dims.values = g_dims;
      dims.n_values = 2;
      Causeway__V1__Int64List* dimp[1] = {&dims};
      Causeway__V1__ExecutableInfo info = CAUSEWAY__V1__EXECUTABLE_INFO__INIT;
      info.name = "jit_f";
      info.num_outputs = 1;
      info.output_dtypes = &g_dtype;
      info.n_output_dtypes = 1;
      info.output_dims = dimp;
      info.n_output_dims = 1;
      info.devices = g_devices;
      info.n_devices = g_num_devices;
      info.num_partitions = (uint32_t)g_num_devices;
      Causeway__V1__CompileReply r = CAUSEWAY__V1__COMPILE_REPLY__INIT;
      r.info = &info;
      ok = fake_reply(f, &fr, &r.base, NULL, 0);
    } else {
      if (fr.h.type == CW_MSG_DELETE) {
        const Causeway__V1__DeleteRequest* d = (const Causeway__V1__DeleteRequest*)fr.msg;
        for (size_t i = 0; d && i < d->n_ids && g_num_deleted < 8; ++i) {
          g_deleted[g_num_deleted++] = d->ids[i];
        }
      }
      ok = fake_ack(f, &fr);
    }
    frame_free(&fr);
    if (!ok) return;
  }
}

// Compiles through client `c` whose controller is the fake; the error's
// text must hold `want`.
static void expect_refused_by(cw_plugin_client_t* cp, int32_t dtype, int64_t d0, int64_t d1,
                              const char* want) {
  g_dtype = (Causeway__V1__DType)dtype;
  g_dims[0] = d0;
  g_dims[1] = d1;
  fake_t f = {0};
  fake_start(&f, script_compile);
  cw_plugin_client_t c = *cp;
  c.ctrl = connect_ok(&f);
  static const char code[] = "module {}";
  PJRT_Program prog = {.struct_size = sizeof(prog), .code = (char*)code,
                       .code_size = sizeof(code) - 1, .format = "mlir", .format_size = 4};
  PJRT_Client_Compile_Args a = {.struct_size = sizeof(a), .client = (PJRT_Client*)&c,
                                .program = &prog};
  PJRT_Error* err = cw_plugin_client_compile(&a);
  assert_non_null(err);
  assert_null(a.executable);
  PJRT_Error_Message_Args m = {.struct_size = sizeof(m), .error = err};
  cw_plugin_error_message(&m);
  char text[512];
  snprintf(text, sizeof(text), "%.*s", (int)m.message_size, m.message);
  if (!strstr(text, want)) fprintf(stderr, "want '%s' in: %s\n", want, text);
  assert_non_null(strstr(text, want));
  PJRT_Error_Destroy_Args d = {.struct_size = sizeof(d), .error = err};
  cw_plugin_error_destroy(&d);
  cw_client_release(c.ctrl);
  fake_join(&f);
  // Compiled and loaded on the workers all the same: dropped there.
  assert_int_equal(g_num_deleted, 1);
  assert_int_equal(g_deleted[0], g_compiled);
  g_num_deleted = 0;
}

static void expect_refused(int32_t dtype, int64_t d0, int64_t d1, const char* want) {
  cw_plugin_client_t c;
  memset(&c, 0, sizeof(c));
  expect_refused_by(&c, dtype, d0, d1, want);
}

static void test_outputs_no_array_can_have(void** state) {
  (void)state;
  expect_refused(999, 2, 3,
                 "output 0 of jit_f, as the controller describes it: unknown element type 999");
  expect_refused(0, 2, 3, "unknown element type 0");
  expect_refused(CAUSEWAY__V1__DTYPE__DTYPE_F32, 2, -1, "output 0 of jit_f");
  expect_refused(CAUSEWAY__V1__DTYPE__DTYPE_F32, INT64_MAX / 2, INT64_MAX / 2,
                 "output 0 of jit_f");
}

// A program the controller placed on an island of several workers (a
// multi-process plugin's): refused by name, not as a program over islands.
static void test_island_of_several_workers(void** state) {
  (void)state;
  cw_plugin_worker_t workers[3];
  cw_plugin_device_t devices[3];
  memset(workers, 0, sizeof(workers));
  memset(devices, 0, sizeof(devices));
  const char* names[3] = {"gang0", "gang1", "solo"};
  for (int i = 0; i < 3; ++i) {
    workers[i].name = (char*)names[i];
    workers[i].island = i < 2 ? 4 : 5;
    devices[i].global_id = i;
    devices[i].worker = &workers[i];
    devices[i].island = workers[i].island;
  }
  cw_plugin_client_t c;
  memset(&c, 0, sizeof(c));
  c.devices = devices;
  c.num_devices = 3;
  int32_t on_island[2] = {0, 1};
  g_devices = on_island;
  g_num_devices = 2;
  expect_refused_by(&c, CAUSEWAY__V1__DTYPE__DTYPE_F32, 2, 3,
                    "executable jit_f runs on island 4, whose devices are on several workers "
                    "(gang0 and gang1)");
  int32_t over_islands[2] = {1, 2};
  g_devices = over_islands;
  expect_refused_by(&c, CAUSEWAY__V1__DTYPE__DTYPE_F32, 2, 3,
                    "executable spans workers gang1 and solo; a program runs within one island");
  g_devices = NULL;
  g_num_devices = 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_outputs_no_array_can_have),
      cmocka_unit_test(test_island_of_several_workers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
