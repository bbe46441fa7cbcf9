// Unit tests of the PJRT wrapper (cw_pjrt.c) in process, over XLA's real CPU
// plugin ($CAUSEWAY_PJRT_PLUGIN; skipped without one): loading and its
// refusals, devices and inventory, compile (and XLA's errors as statuses),
// parameter shapes, uploads dense and strided, execute, download, copies
// between devices, reading ready buffers in place, serialize and
// deserialize; and, without a plugin, the decoder of optimized programs'
// parameter shapes and XLA's element types.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_pjrt.h"
#include "cw_pjrt_test_fixture.h"
#include "cw_xla_ffi.h"
#include "proto/xla_hlo_subset.pb-c.h"

#define ASSERT_OK(expr)                                                            \
  do {                                                                             \
    cw_status_t st__ = (expr);                                                     \
    if (st__) fail_msg("%s: %s", #expr, cw_status_message(st__));                  \
  } while (0)

static cw_pjrt_t* g_pjrt;

// f32[2,3] -> 2x + 1.
static const char kProgram[] =
    "module @jit_f {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "    %c = stablehlo.constant dense<2.0> : tensor<2x3xf32>\n"
    "    %o = stablehlo.constant dense<1.0> : tensor<2x3xf32>\n"
    "    %0 = stablehlo.multiply %arg0, %c : tensor<2x3xf32>\n"
    "    %1 = stablehlo.add %0, %o : tensor<2x3xf32>\n"
    "    return %1 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

static int setup(void** state) {
  (void)state;
  return cw_pjrt_fixture_create(2, &g_pjrt);
}

static int teardown(void** state) {
  (void)state;
  return cw_pjrt_fixture_release(&g_pjrt);
}

// Waits for `ev` (NULL: nothing to wait for) and destroys it.
static void await_event(PJRT_Event* ev) {
  if (!ev) return;
  PJRT_Event_Await_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.event = ev;
  ASSERT_OK(cw_pjrt_status(g_pjrt, g_pjrt->api->PJRT_Event_Await(&a)));
  cw_pjrt_event_destroy(g_pjrt, ev);
}

static PJRT_LoadedExecutable* compile(const char* program, const uint8_t* options,
                                      size_t options_size) {
  PJRT_LoadedExecutable* exe = NULL;
  ASSERT_OK(cw_pjrt_compile(g_pjrt, "mlir", (const uint8_t*)program, strlen(program), options,
                            options_size, &exe));
  assert_non_null(exe);
  return exe;
}

// f32[2,3] `data` on `device` (strides NULL: dense), ready.
static PJRT_Buffer* upload(const float* data, const int64_t* strides, int device) {
  static const int64_t dims[] = {2, 3};
  PJRT_Buffer* b = NULL;
  PJRT_Event* done = NULL;
  ASSERT_OK(cw_pjrt_upload(g_pjrt, data, PJRT_Buffer_Type_F32, dims, 2, strides,
                           strides ? 2 : 0, device, NULL, false, &b, &done));
  await_event(done);
  PJRT_Event* ready = NULL;
  ASSERT_OK(cw_pjrt_ready_event(g_pjrt, b, &ready));
  await_event(ready);
  return b;
}

// Runs one-device `exe` on `in` (not donated); returns its output, ready.
static PJRT_Buffer* run(PJRT_LoadedExecutable* exe, PJRT_Buffer* in, int launch_id) {
  PJRT_Buffer* args0[1] = {in};
  PJRT_Buffer* const* arg_lists[1] = {args0};
  PJRT_Buffer* outs0[1] = {NULL};
  PJRT_Buffer** out_lists[1] = {outs0};
  PJRT_Event* done[1] = {NULL};
  ASSERT_OK(cw_pjrt_execute(g_pjrt, exe, 1, 1, arg_lists, out_lists, done, launch_id, NULL, NULL));
  await_event(done[0]);
  assert_non_null(outs0[0]);
  return outs0[0];
}

static void expect_contents(PJRT_Buffer* b, const float* want) {
  float got[6] = {0};
  PJRT_Event* ev = NULL;
  ASSERT_OK(cw_pjrt_to_host(g_pjrt, b, 2, got, sizeof(got), &ev));
  await_event(ev);
  assert_memory_equal(got, want, sizeof(got));
}

static void test_create_refusals(void** state) {
  (void)state;
  cw_pjrt_t* p = (cw_pjrt_t*)&p;
  cw_status_t st = cw_pjrt_create(NULL, 1, &p);
  assert_null(p);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_string_equal(cw_status_message(st),
                      "no PJRT plugin given (--plugin or CAUSEWAY_PJRT_PLUGIN)");
  cw_status_free(st);
  st = cw_pjrt_create("/nonexistent/plugin.so", 1, &p);
  assert_int_equal(cw_status_code(st), CW_NOT_FOUND);
  assert_non_null(strstr(cw_status_message(st), "cannot load PJRT plugin /nonexistent/plugin.so"));
  cw_status_free(st);
  // A shared library that is not a PJRT plugin.
  st = cw_pjrt_create("libm.so.6", 1, &p);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_non_null(strstr(cw_status_message(st), "libm.so.6 has no GetPjrtApi"));
  cw_status_free(st);
  assert_null(p);
  cw_pjrt_release(NULL);
}

static void test_devices_and_inventory(void** state) {
  (void)state;
  assert_int_equal(g_pjrt->num_devices, 2);
  assert_true(g_pjrt->host_memory);  // the CPU plugin
  assert_int_equal(g_pjrt->api->pjrt_api_version.major_version, CW_PJRT_API_MAJOR);
  assert_true(g_pjrt->api->pjrt_api_version.minor_version >= CW_PJRT_MIN_MINOR);
  for (size_t i = 0; i < g_pjrt->num_devices; ++i) {
    assert_int_equal(cw_pjrt_device_index(g_pjrt, g_pjrt->devices[i]), (int)i);
    assert_non_null(g_pjrt->default_memories[i]);
  }
  assert_int_equal(cw_pjrt_device_index(g_pjrt, NULL), -1);
  int index = -1;
  ASSERT_OK(cw_pjrt_process_index(g_pjrt, &index));
  assert_int_equal(index, 0);

  Causeway__V1__Inventory inv;
  ASSERT_OK(cw_pjrt_inventory_initialize(g_pjrt, &inv));
  assert_string_equal(inv.platform_name, "cpu");
  assert_true(inv.platform_version[0] != 0);
  assert_int_equal(inv.pjrt_major, CW_PJRT_API_MAJOR);
  assert_int_equal(inv.pjrt_minor, g_pjrt->api->pjrt_api_version.minor_version);
  assert_int_equal(inv.n_devices, 2);
  for (size_t i = 0; i < inv.n_devices; ++i) {
    const Causeway__V1__Device* d = inv.devices[i];
    assert_int_equal(d->local_id, (int32_t)i);
    assert_true(d->kind[0] != 0);
    assert_true(d->n_memories >= 1);
    bool found = false;
    for (size_t j = 0; j < d->n_memories; ++j) found |= d->memories[j]->id == d->default_memory;
    assert_true(found);  // the default memory is one of the device's
  }
  assert_int_not_equal(inv.devices[0]->id, inv.devices[1]->id);
  cw_pjrt_inventory_deinitialize(&inv);
  assert_int_equal(inv.n_devices, 0);  // reset: deinitializing again is harmless
  cw_pjrt_inventory_deinitialize(&inv);
}

static void test_compile_upload_execute_download(void** state) {
  (void)state;
  PJRT_LoadedExecutable* exe = compile(kProgram, NULL, 0);  // default options
  uint32_t outputs = 0, devices = 0;
  char* name = NULL;
  ASSERT_OK(cw_pjrt_executable_info(g_pjrt, exe, &outputs, &devices, &name));
  assert_int_equal(outputs, 1);
  assert_int_equal(devices, 1);
  assert_non_null(strstr(name, "jit_f"));
  free(name);
  cw_pjrt_shape_t* params = NULL;
  size_t num_params = 0;
  ASSERT_OK(cw_pjrt_executable_params(g_pjrt, exe, &params, &num_params));
  assert_int_equal(num_params, 1);
  assert_int_equal(params[0].dtype, PJRT_Buffer_Type_F32);
  assert_int_equal(params[0].rank, 2);
  assert_int_equal(params[0].dims[0], 2);
  assert_int_equal(params[0].dims[1], 3);
  assert_false(params[0].donated);
  cw_pjrt_shapes_free(params, num_params);

  float x[6] = {0, 1, 2, 3, 4, 5}, y[6];
  for (int i = 0; i < 6; ++i) y[i] = 2 * x[i] + 1;
  PJRT_Buffer* in = upload(x, NULL, 0);
  int dtype = 0, device = -1;
  int64_t* dims = NULL;
  size_t rank = 0;
  ASSERT_OK(cw_pjrt_buffer_info(g_pjrt, in, &dtype, &dims, &rank, &device));
  assert_int_equal(dtype, PJRT_Buffer_Type_F32);
  assert_int_equal(rank, 2);
  assert_int_equal(dims[0], 2);
  assert_int_equal(dims[1], 3);
  assert_int_equal(device, 0);
  free(dims);
  // The CPU plugin's buffers are host memory, dense and row-major: readable
  // in place while held.
  assert_true(cw_pjrt_buffer_hold(g_pjrt, in));
  const void* view = cw_pjrt_buffer_host_view(g_pjrt, in, 2);
  assert_non_null(view);
  assert_memory_equal(view, x, sizeof(x));
  assert_int_equal(cw_pjrt_buffer_pointer(g_pjrt, in), (uintptr_t)view);
  cw_pjrt_buffer_unhold(g_pjrt, in);

  PJRT_Buffer* out = run(exe, in, 7);
  expect_contents(out, y);
  expect_contents(in, x);  // not donated: the input lives on

  // A copy to the other device; the wrong device is refused before PJRT.
  PJRT_Buffer* copy = NULL;
  ASSERT_OK(cw_pjrt_copy(g_pjrt, out, 1, NULL, &copy));
  ASSERT_OK(cw_pjrt_buffer_info(g_pjrt, copy, &dtype, &dims, &rank, &device));
  assert_int_equal(device, 1);
  free(dims);
  expect_contents(copy, y);
  PJRT_Buffer* none = copy;
  cw_status_t st = cw_pjrt_copy(g_pjrt, copy, 2, NULL, &none);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_string_equal(cw_status_message(st), "copy: device 2 is not one of this worker's 2 devices");
  assert_null(none);
  cw_status_free(st);
  cw_pjrt_buffer_destroy(g_pjrt, copy);
  cw_pjrt_buffer_destroy(g_pjrt, out);
  cw_pjrt_buffer_destroy(g_pjrt, in);
  cw_pjrt_buffer_destroy(g_pjrt, NULL);
  cw_pjrt_executable_destroy(g_pjrt, exe);
  cw_pjrt_executable_destroy(g_pjrt, NULL);
}

// Column-major bytes with their strides are the same logical array.
static void test_strided_upload_and_refusals(void** state) {
  (void)state;
  float x[6] = {0, 1, 2, 3, 4, 5}, xt[6] = {0, 3, 1, 4, 2, 5};
  int64_t strides[] = {4, 8};
  PJRT_Buffer* b = upload(xt, strides, 1);
  expect_contents(b, x);
  cw_pjrt_buffer_destroy(g_pjrt, b);
  static const int64_t dims[] = {2, 3};
  PJRT_Event* done = (PJRT_Event*)&done;
  cw_status_t st = cw_pjrt_upload(g_pjrt, x, PJRT_Buffer_Type_F32, dims, 2, NULL, 0, -1, NULL, false,
                                  &b, &done);
  assert_string_equal(cw_status_message(st), "upload: device -1 is not one of this worker's 2 devices");
  assert_null(b);
  assert_null(done);
  cw_status_free(st);
}

// The name of the memory `b` is in (PJRT_Buffer_Memory, PJRT_Memory_Kind).
static void expect_memory_kind(PJRT_Buffer* b, const char* kind) {
  PJRT_Buffer_Memory_Args m = {.struct_size = sizeof(m), .buffer = b};
  assert_null(g_pjrt->api->PJRT_Buffer_Memory(&m));
  PJRT_Memory_Kind_Args k = {.struct_size = sizeof(k), .memory = m.memory};
  assert_null(g_pjrt->api->PJRT_Memory_Kind(&k));
  assert_int_equal(k.kind_size, strlen(kind));
  assert_memory_equal(k.kind, kind, k.kind_size);
}

// Memory kinds: uploads and copies land in the memory named; "" is the
// default; an unknown kind is refused naming the kinds there are.
static void test_memory_kinds(void** state) {
  (void)state;
  PJRT_Memory* pinned = NULL;
  PJRT_Memory* dflt = (PJRT_Memory*)&dflt;
  ASSERT_OK(cw_pjrt_memory_of_kind(g_pjrt, 1, "pinned_host", &pinned));
  assert_non_null(pinned);
  ASSERT_OK(cw_pjrt_memory_of_kind(g_pjrt, 1, "", &dflt));
  assert_null(dflt);
  float x[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t dims[] = {2, 3};
  PJRT_Buffer* b = NULL;
  PJRT_Event* done = NULL;
  ASSERT_OK(cw_pjrt_upload(g_pjrt, x, PJRT_Buffer_Type_F32, dims, 2, NULL, 0, 1, pinned, false,
                           &b, &done));
  await_event(done);
  expect_memory_kind(b, "pinned_host");
  expect_contents(b, x);
  PJRT_Memory* unpinned = NULL;
  ASSERT_OK(cw_pjrt_memory_of_kind(g_pjrt, 0, "unpinned_host", &unpinned));
  PJRT_Buffer* c = NULL;
  ASSERT_OK(cw_pjrt_copy(g_pjrt, b, 0, unpinned, &c));
  expect_memory_kind(c, "unpinned_host");
  expect_contents(c, x);
  PJRT_Buffer* d = NULL;
  ASSERT_OK(cw_pjrt_copy(g_pjrt, c, 0, NULL, &d));
  expect_memory_kind(d, "device");
  expect_contents(d, x);
  cw_pjrt_buffer_destroy(g_pjrt, b);
  cw_pjrt_buffer_destroy(g_pjrt, c);
  cw_pjrt_buffer_destroy(g_pjrt, d);
  PJRT_Memory* none = (PJRT_Memory*)&none;
  cw_status_t st = cw_pjrt_memory_of_kind(g_pjrt, 0, "hbm", &none);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_string_equal(cw_status_message(st),
                      "device 0 has no memory of kind \"hbm\" "
                      "(it has: device, pinned_host, unpinned_host)");
  assert_null(none);
  cw_status_free(st);
}

// XLA's message and code come back as the status, with the call named.
static void test_compile_error(void** state) {
  (void)state;
  PJRT_LoadedExecutable* exe = (PJRT_LoadedExecutable*)&exe;
  static const char bad[] = "this is not mlir";
  cw_status_t st = cw_pjrt_compile(g_pjrt, "mlir", (const uint8_t*)bad, strlen(bad), NULL, 0, &exe);
  assert_non_null(st);
  assert_null(exe);
  fprintf(stderr, "  XLA: %s (%s)\n", cw_status_message(st), cw_status_code_name(cw_status_code(st)));
  assert_true(cw_status_code(st) != CW_OK);
  assert_int_equal(strncmp(cw_status_message(st), "compile: ", 9), 0);
  assert_true(strlen(cw_status_message(st)) > 12);  // XLA said something
  cw_status_free(st);
  assert_null(cw_pjrt_status(g_pjrt, NULL));
}

// Serialized and loaded back, an executable runs the same; options may ask
// for two replicas, one device each.
static void test_serialize_deserialize(void** state) {
  (void)state;
  PJRT_LoadedExecutable* exe = compile(kProgram, NULL, 0);
  const uint8_t* bytes = NULL;
  size_t size = 0;
  void* handle = NULL;
  void (*deleter)(void*) = NULL;
  ASSERT_OK(cw_pjrt_serialize(g_pjrt, exe, &bytes, &size, &handle, &deleter));
  assert_true(size > 0);
  assert_non_null(deleter);
  PJRT_LoadedExecutable* back = NULL;
  ASSERT_OK(cw_pjrt_deserialize(g_pjrt, bytes, size, NULL, 0, &back));
  deleter(handle);
  float x[6] = {1, 1, 2, 3, 5, 8}, y[6];
  for (int i = 0; i < 6; ++i) y[i] = 2 * x[i] + 1;
  PJRT_Buffer* in = upload(x, NULL, 0);
  PJRT_Buffer* out = run(back, in, 8);
  expect_contents(out, y);
  cw_pjrt_buffer_destroy(g_pjrt, out);
  cw_pjrt_buffer_destroy(g_pjrt, in);
  cw_pjrt_executable_destroy(g_pjrt, back);
  cw_pjrt_executable_destroy(g_pjrt, exe);
  cw_status_t st = cw_pjrt_deserialize(g_pjrt, (const uint8_t*)"junk", 4, NULL, 0, &back);
  assert_non_null(strstr(cw_status_message(st), "deserialize executable: "));
  assert_null(back);
  cw_status_free(st);

  static const uint8_t two_replicas[] = {0x1a, 0x04, 0x20, 0x02, 0x28, 0x01};
  exe = compile(kProgram, two_replicas, sizeof(two_replicas));
  uint32_t outputs = 0, devices = 0;
  char* name = NULL;
  ASSERT_OK(cw_pjrt_executable_info(g_pjrt, exe, &outputs, &devices, &name));
  assert_int_equal(outputs, 1);
  assert_int_equal(devices, 2);
  free(name);
  cw_pjrt_executable_destroy(g_pjrt, exe);
}

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool fired;
  cw_status_code_t code;
} ready_t;

static void on_ready(void* user, cw_status_t st) {
  ready_t* r = user;
  pthread_mutex_lock(&r->mu);
  r->fired = true;
  r->code = cw_status_code(st);
  cw_status_free(st);
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

// A ready event's callback runs once, with the event's status.
static void test_event_on_ready(void** state) {
  (void)state;
  float x[6] = {0};
  PJRT_Buffer* b = upload(x, NULL, 0);
  PJRT_Event* ev = NULL;
  ASSERT_OK(cw_pjrt_ready_event(g_pjrt, b, &ev));
  ready_t r = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, CW_UNKNOWN};
  ASSERT_OK(cw_pjrt_event_on_ready(g_pjrt, ev, on_ready, &r));
  pthread_mutex_lock(&r.mu);
  while (!r.fired) pthread_cond_wait(&r.cv, &r.mu);
  pthread_mutex_unlock(&r.mu);
  assert_int_equal(r.code, CW_OK);
  cw_pjrt_event_destroy(g_pjrt, ev);
  cw_pjrt_event_destroy(g_pjrt, NULL);
  cw_pjrt_buffer_destroy(g_pjrt, b);
}

// ---- Without a plugin ---------------------------------------------------------

// XLA PrimitiveType numbers; they part from PJRT_Buffer_Type at BF16.
static void test_dtype_from_xla(void** state) {
  (void)state;
  static const int pairs[][2] = {
      {1, PJRT_Buffer_Type_PRED}, {2, PJRT_Buffer_Type_S8},    {3, PJRT_Buffer_Type_S16},
      {4, PJRT_Buffer_Type_S32},  {5, PJRT_Buffer_Type_S64},   {6, PJRT_Buffer_Type_U8},
      {7, PJRT_Buffer_Type_U16},  {8, PJRT_Buffer_Type_U32},   {9, PJRT_Buffer_Type_U64},
      {10, PJRT_Buffer_Type_F16}, {11, PJRT_Buffer_Type_F32},  {12, PJRT_Buffer_Type_F64},
      {15, PJRT_Buffer_Type_C64}, {16, PJRT_Buffer_Type_BF16}, {18, PJRT_Buffer_Type_C128},
      {19, PJRT_Buffer_Type_F8E5M2},        {20, PJRT_Buffer_Type_F8E4M3FN},
      {21, PJRT_Buffer_Type_S4},            {22, PJRT_Buffer_Type_U4},
      {23, PJRT_Buffer_Type_F8E4M3B11FNUZ}, {24, PJRT_Buffer_Type_F8E5M2FNUZ},
      {25, PJRT_Buffer_Type_F8E4M3FNUZ},    {26, PJRT_Buffer_Type_S2},
      {27, PJRT_Buffer_Type_U2},            {28, PJRT_Buffer_Type_F8E4M3},
      {29, PJRT_Buffer_Type_F8E3M4},        {30, PJRT_Buffer_Type_S1},
      {31, PJRT_Buffer_Type_U1},            {32, PJRT_Buffer_Type_F4E2M1FN},
      {33, PJRT_Buffer_Type_F8E8M0FNU},     {35, PJRT_Buffer_Type_F6E3M2FN},
      {36, PJRT_Buffer_Type_F6E2M3FN},
  };
  for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); ++i) {
    assert_int_equal(cw_pjrt_dtype_from_xla(pairs[i][0]), pairs[i][1]);
  }
  static const int none[] = {0, 13, 14, 17, 34, 37, -1, 1000};  // tuple, opaque, token, ...
  for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); ++i) {
    assert_int_equal(cw_pjrt_dtype_from_xla(none[i]), -1);
  }
}

// An HloModule (wrapped in HloModuleWithConfig when `with_config`) whose
// entry takes f32[2,3], a tuple and an s32 scalar, the tuple aliased to an
// output (and an alias naming no parameter); packed into a malloc'd buffer.
static uint8_t* hlo_module(bool with_config, bool with_shape, size_t* out_size) {
  int64_t dims[] = {2, 3};
  Causeway__Xla__Shape p0 = CAUSEWAY__XLA__SHAPE__INIT, p1 = CAUSEWAY__XLA__SHAPE__INIT,
                       p2 = CAUSEWAY__XLA__SHAPE__INIT, inner = CAUSEWAY__XLA__SHAPE__INIT;
  p0.element_type = 11;
  p0.dimensions = dims;
  p0.n_dimensions = 2;
  inner.element_type = 11;
  Causeway__Xla__Shape* inner_p[] = {&inner};
  p1.element_type = 13;
  p1.tuple_shapes = inner_p;
  p1.n_tuple_shapes = 1;
  p2.element_type = 4;
  Causeway__Xla__Shape* params[] = {&p0, &p1, &p2};
  Causeway__Xla__ProgramShape ps = CAUSEWAY__XLA__PROGRAM_SHAPE__INIT;
  ps.parameters = params;
  ps.n_parameters = 3;
  Causeway__Xla__AliasEntry a1 = CAUSEWAY__XLA__ALIAS_ENTRY__INIT, a9 = CAUSEWAY__XLA__ALIAS_ENTRY__INIT;
  a1.parameter_number = 1;
  a9.parameter_number = 9;
  Causeway__Xla__AliasEntry* entries[] = {&a1, &a9};
  Causeway__Xla__InputOutputAlias io = CAUSEWAY__XLA__INPUT_OUTPUT_ALIAS__INIT;
  io.entries = entries;
  io.n_entries = 2;
  Causeway__Xla__HloModule m = CAUSEWAY__XLA__HLO_MODULE__INIT;
  m.host_program_shape = with_shape ? &ps : NULL;
  m.input_output_alias = &io;
  Causeway__Xla__HloModuleWithConfig w = CAUSEWAY__XLA__HLO_MODULE_WITH_CONFIG__INIT;
  w.hlo_module = &m;
  const ProtobufCMessage* top = with_config ? &w.base : &m.base;
  *out_size = protobuf_c_message_get_packed_size(top);
  uint8_t* buf = malloc(*out_size ? *out_size : 1);
  protobuf_c_message_pack(top, buf);
  return buf;
}

static void test_params_from_hlo(void** state) {
  (void)state;
  for (int with_config = 0; with_config < 2; ++with_config) {
    size_t size = 0;
    uint8_t* bytes = hlo_module(with_config, true, &size);
    cw_pjrt_shape_t* shapes = NULL;
    size_t n = 0;
    ASSERT_OK(cw_pjrt_params_from_hlo(bytes, size, with_config, &shapes, &n));
    assert_int_equal(n, 3);
    assert_int_equal(shapes[0].dtype, PJRT_Buffer_Type_F32);
    assert_int_equal(shapes[0].rank, 2);
    assert_int_equal(shapes[0].dims[1], 3);
    assert_false(shapes[0].donated);
    assert_int_equal(shapes[1].dtype, -1);  // a tuple has no PJRT element type
    assert_true(shapes[1].donated);
    assert_int_equal(shapes[2].dtype, PJRT_Buffer_Type_S32);
    assert_int_equal(shapes[2].rank, 0);
    assert_false(shapes[2].donated);
    cw_pjrt_shapes_free(shapes, n);
    free(bytes);

    bytes = hlo_module(with_config, false, &size);
    cw_status_t st = cw_pjrt_params_from_hlo(bytes, size, with_config, &shapes, &n);
    assert_int_equal(cw_status_code(st), CW_UNIMPLEMENTED);
    assert_string_equal(cw_status_message(st), "optimized program has no host program shape");
    assert_null(shapes);
    assert_int_equal(n, 0);
    cw_status_free(st);
    free(bytes);

    static const uint8_t junk[] = {0x22, 0x7f, 0x01};  // field 4 claims 127 bytes
    st = cw_pjrt_params_from_hlo(junk, sizeof(junk), with_config, &shapes, &n);
    assert_int_equal(cw_status_code(st), CW_INTERNAL);
    assert_string_equal(cw_status_message(st), "optimized program does not decode");
    cw_status_free(st);
  }
  // HloModuleWithConfig without its module: no shape either.
  cw_pjrt_shape_t* shapes = NULL;
  size_t n = 0;
  static const uint8_t empty[1] = {0};
  cw_status_t st = cw_pjrt_params_from_hlo(empty, 0, true, &shapes, &n);
  assert_int_equal(cw_status_code(st), CW_UNIMPLEMENTED);
  cw_status_free(st);
  cw_pjrt_shapes_free(NULL, 0);
}

// --- The FFI extension: a handler of our own, its user data -------------------

static int64_t g_scale_type;

// cw_test_scale: out = in * the float the execute context carries.
static XLA_FFI_Error* scale_handler(XLA_FFI_CallFrame* frame) {
  if (cw_xla_ffi_answer_metadata(frame, 0)) return NULL;
  const float* factor = cw_xla_ffi_user_data(frame, g_scale_type);
  if (!factor) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                            "cw_test_scale: no factor in the execute context");
  }
  if (frame->args.size != 1 || frame->rets.size != 1) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "arity");
  }
  const XLA_FFI_Buffer* in = frame->args.args[0];
  XLA_FFI_Buffer* out = frame->rets.rets[0];
  int64_t n = 1;
  for (int64_t i = 0; i < in->rank; ++i) n *= in->dims[i];
  for (int64_t i = 0; i < n; ++i) ((float*)out->data)[i] = ((const float*)in->data)[i] * *factor;
  return NULL;
}

static const char kScaleProgram[] =
    "module @jit_s {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "    %0 = stablehlo.custom_call @cw_test_scale(%arg0) {api_version = 4 : i32} :"
    " (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
    "    return %0 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

// Runs `exe` on `in` with `context`; the status of the launch (its call or its event).
static cw_status_t run_with(PJRT_LoadedExecutable* exe, PJRT_Buffer* in,
                            PJRT_ExecuteContext* context, PJRT_Buffer** out) {
  PJRT_Buffer* args0[1] = {in};
  PJRT_Buffer* const* arg_lists[1] = {args0};
  PJRT_Buffer* outs0[1] = {NULL};
  PJRT_Buffer** out_lists[1] = {outs0};
  PJRT_Event* done[1] = {NULL};
  cw_status_t st = cw_pjrt_execute(g_pjrt, exe, 1, 1, arg_lists, out_lists, done, 7, NULL,
                                   context);
  if (!st && done[0]) {
    PJRT_Event_Await_Args a;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.event = done[0];
    st = cw_pjrt_status(g_pjrt, g_pjrt->api->PJRT_Event_Await(&a));
  }
  cw_pjrt_event_destroy(g_pjrt, done[0]);
  *out = outs0[0];
  return st;
}

static void test_ffi_handler(void** state) {
  (void)state;
  ASSERT_OK(cw_pjrt_ffi_register_type(g_pjrt, "cw_test_scale_factor", &g_scale_type));
  assert_int_not_equal(g_scale_type, 0);
  ASSERT_OK(cw_pjrt_ffi_register_handler(g_pjrt, "cw_test_scale", "Host",
                                         (void*)scale_handler, 0));
  PJRT_LoadedExecutable* exe = compile(kScaleProgram, NULL, 0);
  static const float in_data[6] = {1, 2, 3, 4, 5, 6};
  PJRT_Buffer* in = upload(in_data, NULL, 0);
  // The handler reads its factor from the context's user data.
  float factor = 3.0f;
  PJRT_ExecuteContext* ctx = NULL;
  ASSERT_OK(cw_pjrt_execute_context_create(g_pjrt, g_scale_type, &factor, &ctx));
  PJRT_Buffer* out = NULL;
  ASSERT_OK(run_with(exe, in, ctx, &out));
  static const float want[6] = {3, 6, 9, 12, 15, 18};
  expect_contents(out, want);
  cw_pjrt_buffer_destroy(g_pjrt, out);
  cw_pjrt_execute_context_destroy(g_pjrt, ctx);
  // Without a factor (user data of another type only), its error is the
  // launch's, code and message. (Without any context XLA itself crashes in
  // InvokeContext_Get: callers always give one.)
  int64_t other_type = 0;
  ASSERT_OK(cw_pjrt_ffi_register_type(g_pjrt, "cw_test_other", &other_type));
  assert_int_not_equal(other_type, g_scale_type);
  ASSERT_OK(cw_pjrt_execute_context_create(g_pjrt, other_type, &factor, &ctx));
  out = NULL;
  cw_status_t st = run_with(exe, in, ctx, &out);
  cw_pjrt_execute_context_destroy(g_pjrt, ctx);
  assert_int_equal(cw_status_code(st), CW_FAILED_PRECONDITION);
  assert_non_null(strstr(cw_status_message(st), "cw_test_scale: no factor in the execute context"));
  cw_status_free(st);
  if (out) cw_pjrt_buffer_destroy(g_pjrt, out);
  cw_pjrt_buffer_destroy(g_pjrt, in);
  cw_pjrt_executable_destroy(g_pjrt, exe);
}

// A parameter of tuples nested `depth` deep, wrapped by hand (packing it
// with protobuf-c would recurse as deep). Written back to front, each level's
// header before the bytes it wraps: copying the levels below at each level
// made 100000 levels tens of gigabytes of memcpy, minutes on a busy host.
static uint8_t* nested_tuple_module(int depth, size_t* out_size) {
  size_t cap = 32 + (size_t)depth * 16;
  uint8_t* a = malloc(cap);
  size_t start = cap;
  a[--start] = 11;  // element_type F32
  a[--start] = 0x10;
  // Each level: element_type TUPLE, tuple_shapes = the level below; then
  // ProgramShape.parameters (1), HloModule.host_program_shape (4).
  for (int i = 0; i < depth + 2; ++i) {
    uint8_t h[16];
    size_t k = 0;
    if (i < depth) {
      h[k++] = 0x10;
      h[k++] = 13;
    }
    h[k++] = i == depth ? 0x0a : 0x22;
    for (size_t len = cap - start; ; len >>= 7) {  // the length as a varint
      h[k++] = (uint8_t)((len & 0x7f) | (len >> 7 ? 0x80 : 0));
      if (!(len >> 7)) break;
    }
    start -= k;
    memcpy(a + start, h, k);
  }
  *out_size = cap - start;
  memmove(a, a + start, *out_size);
  return a;
}

static void test_params_from_hlo_nesting(void** state) {
  (void)state;
  size_t size = 0;
  uint8_t* bytes = nested_tuple_module(60, &size);
  cw_pjrt_shape_t* shapes = NULL;
  size_t n = 0;
  ASSERT_OK(cw_pjrt_params_from_hlo(bytes, size, false, &shapes, &n));
  assert_int_equal(n, 1);
  assert_int_equal(shapes[0].dtype, -1);
  cw_pjrt_shapes_free(shapes, n);
  free(bytes);
  // Deeper than 64 levels (with the module and its program shape): refused
  // before protobuf-c recurses; 100000 levels used to overflow the stack.
  static const int deep[] = {63, 100000};
  for (int i = 0; i < 2; ++i) {
    bytes = nested_tuple_module(deep[i], &size);
    cw_status_t st = cw_pjrt_params_from_hlo(bytes, size, false, &shapes, &n);
    assert_int_equal(cw_status_code(st), CW_UNIMPLEMENTED);
    assert_string_equal(cw_status_message(st),
                        "optimized program nests messages deeper than 64 levels");
    assert_null(shapes);
    cw_status_free(st);
    free(bytes);
  }
}

int main(void) {
  const struct CMUnitTest pure[] = {
      cmocka_unit_test(test_dtype_from_xla),
      cmocka_unit_test(test_params_from_hlo),
      cmocka_unit_test(test_params_from_hlo_nesting),
  };
  int failed = cmocka_run_group_tests_name("without a plugin", pure, NULL, NULL);
  const char* plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  if (!plugin || !*plugin) {
    fprintf(stderr, "CAUSEWAY_PJRT_PLUGIN is not set: the plugin's cases are skipped\n");
    return failed ? failed : 77;
  }
  const struct CMUnitTest with_plugin[] = {
      cmocka_unit_test(test_create_refusals),
      cmocka_unit_test(test_devices_and_inventory),
      cmocka_unit_test(test_compile_upload_execute_download),
      cmocka_unit_test(test_strided_upload_and_refusals),
      cmocka_unit_test(test_memory_kinds),
      cmocka_unit_test(test_compile_error),
      cmocka_unit_test(test_serialize_deserialize),
      cmocka_unit_test(test_event_on_ready),
      cmocka_unit_test(test_ffi_handler),
  };
  return failed + cmocka_run_group_tests_name("XLA's CPU plugin", with_plugin, setup, teardown);
}
