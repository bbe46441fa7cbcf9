// Unit tests for serialized executables: a round trip, and each kind of bytes
// refused with a message that names what was wrong.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_serialized_exe.h"
#include "proto/causeway.pb-c.h"

static const uint8_t kCode[] = "module @f { }";
static const uint8_t kOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x02};

static void test_round_trip(void** state) {
  (void)state;
  cw_serialized_exe_t in = {.format = "mlir",
                            .code = kCode,
                            .code_size = sizeof(kCode),
                            .compile_options = kOptions,
                            .compile_options_size = sizeof(kOptions),
                            .fingerprint = "abc123"};
  uint8_t* bytes = NULL;
  size_t size = 0;
  assert_null(cw_serialized_exe_pack(&in, &bytes, &size));
  cw_serialized_exe_t out;
  void* msg = NULL;
  assert_null(cw_serialized_exe_unpack(bytes, size, &out, &msg));
  assert_string_equal(out.format, "mlir");
  assert_int_equal(out.code_size, sizeof(kCode));
  assert_memory_equal(out.code, kCode, sizeof(kCode));
  assert_int_equal(out.compile_options_size, sizeof(kOptions));
  assert_memory_equal(out.compile_options, kOptions, sizeof(kOptions));
  assert_string_equal(out.fingerprint, "abc123");
  cw_serialized_exe_free(msg);
  free(bytes);

  in.compile_options = NULL;  // no options and no fingerprint are allowed
  in.compile_options_size = 0;
  in.fingerprint = NULL;
  assert_null(cw_serialized_exe_pack(&in, &bytes, &size));
  assert_null(cw_serialized_exe_unpack(bytes, size, &out, &msg));
  assert_int_equal(out.compile_options_size, 0);
  assert_string_equal(out.fingerprint, "");
  cw_serialized_exe_free(msg);
  free(bytes);
}

// Packs `m` and expects it refused with `want` in the message.
static void expect_refused(const Causeway__V1__SerializedExecutable* m, const char* want) {
  size_t n = causeway__v1__serialized_executable__get_packed_size(m);
  uint8_t* bytes = malloc(n ? n : 1);
  assert_non_null(bytes);
  causeway__v1__serialized_executable__pack(m, bytes);
  cw_serialized_exe_t out;
  void* msg = (void*)1;
  cw_status_t s = cw_serialized_exe_unpack(bytes, n, &out, &msg);
  assert_non_null(s);
  assert_null(msg);
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  if (!strstr(cw_status_message(s), want)) fail_msg("\"%s\" lacks \"%s\"", cw_status_message(s), want);
  cw_status_free(s);
  free(bytes);
}

static void test_refused(void** state) {
  (void)state;
  Causeway__V1__SerializedExecutable m = CAUSEWAY__V1__SERIALIZED_EXECUTABLE__INIT;
  m.magic = (char*)CW_SERIALIZED_EXE_MAGIC;
  m.version = CW_SERIALIZED_EXE_VERSION;
  m.format = (char*)"mlir";
  m.code.data = (uint8_t*)kCode;
  m.code.len = sizeof(kCode);

  Causeway__V1__SerializedExecutable bad = m;
  bad.magic = (char*)"xla";
  expect_refused(&bad, "no \"causeway.executable\" mark");
  bad = m;
  bad.version = 2;
  expect_refused(&bad, "version 2; this causeway reads version 1");
  bad = m;
  bad.format = (char*)"";
  expect_refused(&bad, "program format");
  bad.format = (char*)"ml ir";
  expect_refused(&bad, "program format");
  bad.format = (char*)"a-format-name-longer-than-31-chars";
  expect_refused(&bad, "program format");
  bad = m;
  bad.code.len = 0;
  expect_refused(&bad, "no program");

  // Bytes that are no protobuf at all, and none.
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff};
  cw_serialized_exe_t out;
  void* msg = NULL;
  cw_status_t s = cw_serialized_exe_unpack(junk, sizeof(junk), &out, &msg);
  assert_non_null(s);
  assert_non_null(strstr(cw_status_message(s), "do not decode"));
  cw_status_free(s);
  s = cw_serialized_exe_unpack(NULL, 0, &out, &msg);
  assert_non_null(strstr(cw_status_message(s), "mark"));
  cw_status_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
