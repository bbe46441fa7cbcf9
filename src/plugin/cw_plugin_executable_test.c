// The executable a compile reply describes, against a fake controller (the
// client library's fake peer): outputs whose element type or shape no array
// can have are refused with an error naming them. JAX CHECK-fails (aborts
// the process) on a PJRT_Buffer_Type it does not know, so these never reach
// it (an audit: a controller's output dtype 999 killed the JAX process).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client_fake_peer.h"
#include "cw_msg.h"
#include "cw_plugin_error.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_internal.h"

// What the fake controller's COMPILE reply says of its one output.
static Causeway__V1__DType g_dtype;
static int64_t g_dims[2];

static void script_compile(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    bool ok;
    if (fr.h.type == CW_MSG_COMPILE) {
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
      Causeway__V1__CompileReply r = CAUSEWAY__V1__COMPILE_REPLY__INIT;
      r.info = &info;
      ok = fake_reply(f, &fr, &r.base, NULL, 0);
    } else {
      ok = fake_ack(f, &fr);
    }
    frame_free(&fr);
    if (!ok) return;
  }
}

// Compiles through a client whose controller is the fake; the error's text
// must hold `want`.
static void expect_refused(int32_t dtype, int64_t d0, int64_t d1, const char* want) {
  g_dtype = (Causeway__V1__DType)dtype;
  g_dims[0] = d0;
  g_dims[1] = d1;
  fake_t f = {0};
  fake_start(&f, script_compile);
  cw_plugin_client_t c;
  memset(&c, 0, sizeof(c));
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_outputs_no_array_can_have),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
