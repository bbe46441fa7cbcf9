// Handler sets (cw_handler_set.c) in process: ffi-libraries specs; a user's
// FFI library (libcw_test_ffi.so, $CW_TEST_FFI_LIB) registered with XLA's
// real CPU plugin ($CAUSEWAY_PJRT_PLUGIN; those cases skip without one),
// compiled and run in both forms; its kernel's own error; libraries that do
// not load; the error a compile gets for a target no set provides; jaxlib
// asked for by name but not loadable; jaxlib's targets loaded through the
// venv's Python ($CW_PYTHON), which then stays for the process (under ASan
// the exit's leak check runs over it). jaxlib's kernels themselves are
// tested with real JAX (tests/ffi/test_ffi.py).
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_handler_set.h"
#include "cw_jaxlib_set.h"
#include "cw_pjrt_test_fixture.h"

#define ASSERT_OK(expr)                                                   \
  do {                                                                    \
    cw_status_t st__ = (expr);                                            \
    if (st__) fail_msg("%s: %s", #expr, cw_status_message(st__));         \
  } while (0)

static cw_pjrt_t* g_pjrt;
static const char* g_lib;

static void test_specs(void** state) {
  (void)state;
  cw_handler_spec_t* specs = NULL;
  size_t n = 0;
  ASSERT_OK(cw_handler_specs_parse(" /a/b.so:tab , /c:d/e.so:t=sym,,", &specs, &n));
  assert_int_equal(n, 2);
  assert_string_equal(specs[0].path, "/a/b.so");
  assert_string_equal(specs[0].symbol, "tab");
  assert_null(specs[0].target);
  assert_string_equal(specs[1].path, "/c:d/e.so");  // the last ':' splits
  assert_string_equal(specs[1].target, "t");
  assert_string_equal(specs[1].symbol, "sym");
  cw_handler_specs_free(specs, n);
  ASSERT_OK(cw_handler_specs_parse("", &specs, &n));
  assert_int_equal(n, 0);
  cw_handler_specs_free(specs, n);
  static const char* bad[] = {"/no/symbol.so", ":sym", "/x.so:", "/x.so:=sym", "/x.so:t="};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    cw_status_t st = cw_handler_specs_parse(bad[i], &specs, &n);
    assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
    assert_non_null(strstr(cw_status_message(st), "PATH:"));
    assert_null(specs);
    cw_status_free(st);
  }
}

// f32[2,3] -> f32[2,3] through custom call `target` (typed FFI).
static cw_status_t compile_call(const char* target, PJRT_LoadedExecutable** exe) {
  char program[1024];
  snprintf(program, sizeof(program), "%s%s%s",
           "module @jit_f {\n"
           "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
           "    %0 = stablehlo.custom_call @",
           target,
           "(%arg0) {api_version = 4 : i32} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
           "    return %0 : tensor<2x3xf32>\n"
           "  }\n"
           "}\n");
  return cw_pjrt_compile(g_pjrt, "mlir", (const uint8_t*)program, strlen(program), NULL, 0,
                         exe);
}

static cw_status_t await(PJRT_Event* ev) {
  if (!ev) return cw_ok_status();
  PJRT_Event_Await_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.event = ev;
  cw_status_t st = cw_pjrt_status(g_pjrt, g_pjrt->api->PJRT_Event_Await(&a));
  cw_pjrt_event_destroy(g_pjrt, ev);
  return st;
}

// Runs the program of `target` on {1..6}; its launch's status, the result in `out`.
static cw_status_t run_call(const char* target, float out[6]) {
  PJRT_LoadedExecutable* exe = NULL;
  cw_status_t st = compile_call(target, &exe);
  if (st) return st;
  static const float in_data[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t dims[2] = {2, 3};
  PJRT_Buffer* in = NULL;
  PJRT_Event* uploaded = NULL;
  ASSERT_OK(cw_pjrt_upload(g_pjrt, in_data, PJRT_Buffer_Type_F32, dims, 2, NULL, 0, 0, NULL, false,
                           &in, &uploaded));
  ASSERT_OK(await(uploaded));
  PJRT_Buffer* args0[1] = {in};
  PJRT_Buffer* const* arg_lists[1] = {args0};
  PJRT_Buffer* outs0[1] = {NULL};
  PJRT_Buffer** out_lists[1] = {outs0};
  PJRT_Event* done[1] = {NULL};
  st = cw_pjrt_execute(g_pjrt, exe, 1, 1, arg_lists, out_lists, done, 1, NULL, NULL);
  if (!st) st = await(done[0]);
  if (!st) {
    PJRT_Event* copied = NULL;
    ASSERT_OK(cw_pjrt_to_host(g_pjrt, outs0[0], 2, out, 6 * sizeof(float), &copied));
    ASSERT_OK(await(copied));
  }
  if (outs0[0]) cw_pjrt_buffer_destroy(g_pjrt, outs0[0]);
  cw_pjrt_buffer_destroy(g_pjrt, in);
  cw_pjrt_executable_destroy(g_pjrt, exe);
  return st;
}

static cw_status_t create(const char* libraries, const char* python, cw_handler_sets_t** out) {
  cw_handler_sets_options_t o = {.ffi_libraries = libraries, .jaxlib_python = python,
                                 .plugin_path = "/nowhere/plugin.so"};
  return cw_handler_sets_create(&o, g_pjrt, out);
}

static void expect_refusal(const char* libraries, const char* python, cw_status_code_t code,
                           const char* words) {
  cw_handler_sets_t* s = NULL;
  cw_status_t st = create(libraries, python, &s);
  assert_null(s);
  assert_int_equal(cw_status_code(st), code);
  if (!strstr(cw_status_message(st), words)) {
    fail_msg("\"%s\" not in: %s", words, cw_status_message(st));
  }
  cw_status_free(st);
}

// A library, a symbol or a Python asked for by name that does not load: the
// error names it (the worker refuses to start).
static void test_refusals(void** state) {
  (void)state;
  char spec[1024];
  expect_refusal("/nonexistent/libnope.so:tab", "off", CW_NOT_FOUND,
                 "cannot load FFI library /nonexistent/libnope.so");
  snprintf(spec, sizeof(spec), "%s:no_such_symbol", g_lib);
  expect_refusal(spec, "off", CW_NOT_FOUND, "has no symbol no_such_symbol");
  snprintf(spec, sizeof(spec), "%s:cw_test_ffi_refuse", g_lib);
  expect_refusal(spec, "off", CW_FAILED_PRECONDITION, "cw_test_ffi_refuse() returned no table");
  expect_refusal(NULL, "/nonexistent/bin/python3", CW_NOT_FOUND,
                 "no Python interpreter at /nonexistent/bin/python3");
  cw_handler_sets_options_t o = {.jaxlib_python = "/bin/sh",
                                 .bridge_path = "/nonexistent/libcauseway_jaxlib.so"};
  cw_handler_sets_t* s = NULL;
  cw_status_t st = cw_handler_sets_create(&o, g_pjrt, &s);
  assert_null(s);
  assert_non_null(strstr(cw_status_message(st), "CAUSEWAY_JAXLIB_PYTHON"));
  cw_status_free(st);
}

// Both forms of a user's library register, compile and run; the kernel's
// own error is the launch's; a target nobody provides fails at compile
// naming it and how to provide it.
static void test_user_library(void** state) {
  (void)state;
  char spec[2048];
  snprintf(spec, sizeof(spec), "%s:cw_test_ffi_targets, %s:cw_other_add_one=cw_test_add_one",
           g_lib, g_lib);
  cw_handler_sets_t* s = NULL;
  ASSERT_OK(create(spec, "off", &s));
  assert_int_equal(cw_handler_sets_count(s), 3);
  assert_true(cw_handler_sets_has(s, "cw_test_add_one"));
  assert_true(cw_handler_sets_has(s, "cw_other_add_one"));
  assert_false(cw_handler_sets_has(s, "lapack_sgetrf_ffi"));
  static const float want[6] = {2, 3, 4, 5, 6, 7};
  float got[6] = {0};
  ASSERT_OK(run_call("cw_test_add_one", got));
  assert_memory_equal(got, want, sizeof(want));
  memset(got, 0, sizeof(got));
  ASSERT_OK(run_call("cw_other_add_one", got));
  assert_memory_equal(got, want, sizeof(want));

  cw_status_t st = run_call("cw_test_fail", got);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_non_null(strstr(cw_status_message(st), "cw_test_fail: this kernel always fails"));
  cw_status_free(st);

  PJRT_LoadedExecutable* exe = NULL;
  st = compile_call("cw_no_such_target", &exe);
  assert_null(exe);
  assert_false(cw_handler_sets_resolve(s, true, &st));  // nothing left to load
  assert_int_equal(cw_status_code(st), CW_NOT_FOUND);
  const char* msg = cw_status_message(st);
  static const char* words[] = {"No FFI handler registered for cw_no_such_target",
                                "custom call target \"cw_no_such_target\" has no handler",
                                ":cw_test_ffi_targets (2 targets)", "--ffi-libraries",
                                "CAUSEWAY_JAXLIB_PYTHON=off", "docs/ffi.md"};
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); ++i) {
    if (!strstr(msg, words[i])) fail_msg("\"%s\" not in: %s", words[i], msg);
  }
  cw_status_free(st);
  // Other errors pass through untouched.
  st = cw_make_status(CW_INTERNAL, "something else");
  assert_false(cw_handler_sets_resolve(s, true, &st));
  assert_string_equal(cw_status_message(st), "something else");
  cw_status_free(st);
  cw_handler_sets_release(s);

  // A second set of the same library (another worker's, in one process):
  // XLA's registry already has the targets with the same handlers.
  ASSERT_OK(create(spec, "off", &s));
  assert_int_equal(cw_handler_sets_count(s), 3);
  cw_handler_sets_release(s);
}

// jaxlib not found beside the plugin: nothing to load, and the error says so.
static void test_no_jaxlib(void** state) {
  (void)state;
  cw_handler_sets_t* s = NULL;
  ASSERT_OK(create(NULL, "", &s));
  assert_int_equal(cw_handler_sets_count(s), 0);
  cw_status_t st = cw_make_status(CW_NOT_FOUND,
                                  "No FFI handler registered for lapack_sgetrf_ffi on a "
                                  "platform Host (canonical host)");
  if (getenv("VIRTUAL_ENV")) {
    cw_status_free(st);
    cw_handler_sets_release(s);
    return;  // would find that venv's jaxlib
  }
  assert_false(cw_handler_sets_resolve(s, true, &st));
  if (!strstr(cw_status_message(st), "no Python environment found beside the PJRT plugin")) {
    fail_msg("%s", cw_status_message(st));
  }
  cw_status_free(st);
  cw_handler_sets_release(s);
}

// jaxlib asked for by name (the venv's Python, as --jaxlib-python): its
// LAPACK targets register. Last: the interpreter stays for the process, and
// a sanitized worker's exit used to fail on it, LeakSanitizer reporting the
// interpreter's objects (8 MiB) as leaked.
static void test_jaxlib_by_name(void** state) {
  (void)state;
  const char* py = getenv("CW_PYTHON");
  if (!py || !*py || !cw_jaxlib_bridge_built()) {
    skip();
    return;
  }
  cw_handler_sets_t* s = NULL;
  ASSERT_OK(create(NULL, py, &s));
  assert_true(cw_handler_sets_count(s) > 0);
  assert_true(cw_handler_sets_has(s, "lapack_sgetrf_ffi"));
  cw_handler_sets_release(s);
}

static int setup(void** state) {
  (void)state;
  return cw_pjrt_fixture_create(1, &g_pjrt);
}

static int teardown(void** state) {
  (void)state;
  return cw_pjrt_fixture_release(&g_pjrt);
}

int main(void) {
  const struct CMUnitTest pure[] = {cmocka_unit_test(test_specs)};
  int failed = cmocka_run_group_tests_name("specs", pure, NULL, NULL);
  const char* plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  g_lib = getenv("CW_TEST_FFI_LIB");
  if (!plugin || !*plugin || !g_lib || !*g_lib) {
    fprintf(stderr, "CAUSEWAY_PJRT_PLUGIN or CW_TEST_FFI_LIB is not set: skipped\n");
    return failed ? failed : 77;
  }
  const struct CMUnitTest with_plugin[] = {
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_user_library),
      cmocka_unit_test(test_no_jaxlib),
      cmocka_unit_test(test_jaxlib_by_name),
  };
  return failed + cmocka_run_group_tests_name("XLA's CPU plugin", with_plugin, setup, teardown);
}
