// The null plugin (issue 12 item 1): directly through its PJRT table, and
// end to end as the plugin of a real causeway-worker behind a real
// controller, where a "checksum" program proves the argument bytes reached
// the worker and the outputs came back.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client.h"
#include "cw_pjrt_test_util.h"
#include "cw_test_island.h"

#define F32 PJRT_Buffer_Type_F32

static const PJRT_Api* api;

static uint64_t fnv1a(const void* data, size_t n) {
  const unsigned char* s = data;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

// The error's code; its message into msg (may be NULL). Frees err.
static PJRT_Error_Code take(PJRT_Error* err, char* msg, size_t cap) {
  assert_non_null(err);
  const char* m = NULL;
  size_t n = 0;
  cw_pjrt_test_error_text(err, &m, &n);
  if (msg) snprintf(msg, cap, "%.*s", (int)n, m);
  PJRT_Error_Code code = cw_pjrt_test_error_code(err);
  cw_pjrt_test_error_free(err);
  return code;
}

static PJRT_Error* compile(PJRT_Client* c, const char* format, const char* code, const int64_t* ids,
                           size_t n, PJRT_LoadedExecutable** out) {
  size_t osize = 0;
  uint8_t* opts = cw_test_compile_options(ids, n, &osize);
  assert_non_null(opts);
  PJRT_Program p;
  CW_PJRT_INIT_ARGS(p);
  p.code = (char*)code;
  p.code_size = strlen(code);
  p.format = format;
  p.format_size = strlen(format);
  PJRT_Client_Compile_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.client = c;
  a.program = &p;
  a.compile_options = (const char*)opts;
  a.compile_options_size = osize;
  PJRT_Error* e = api->PJRT_Client_Compile(&a);
  free(opts);
  *out = a.executable;
  return e;
}

static int64_t bytes_in_use(PJRT_Device* d) {
  PJRT_Device_MemoryStats_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.device = d;
  CW_PJRT_ASSERT_OK(api->PJRT_Device_MemoryStats(&a));
  return a.bytes_in_use;
}

static PJRT_Client_AddressableDevices_Args devices_of(PJRT_Client* c) {
  PJRT_Client_AddressableDevices_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.client = c;
  CW_PJRT_ASSERT_OK(api->PJRT_Client_AddressableDevices(&d));
  return d;
}

static void client_free(PJRT_Client* c) {
  PJRT_Client_Destroy_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.client = c;
  CW_PJRT_ASSERT_OK(api->PJRT_Client_Destroy(&a));
}

// ---- Through the PJRT table ------------------------------------------------------------------

static void test_devices_and_strided_upload(void** state) {
  PJRT_Client* c = cw_pjrt_test_create_client(3);
  assert_non_null(c);
  PJRT_Client_AddressableDevices_Args d = devices_of(c);
  assert_int_equal(d.num_addressable_devices, 3);
  PJRT_Client_PlatformName_Args pn;
  CW_PJRT_INIT_ARGS(pn);
  pn.client = c;
  CW_PJRT_ASSERT_OK(api->PJRT_Client_PlatformName(&pn));
  assert_memory_equal(pn.platform_name, "null", 4);

  // A 3x2 transposed view of a row-major 2x3 matrix: strides (4, 12).
  float m[6] = {1, 2, 3, 4, 5, 6};
  int64_t dims[2] = {3, 2}, strides[2] = {4, 12};
  PJRT_Client_BufferFromHostBuffer_Args u;
  CW_PJRT_INIT_ARGS(u);
  u.client = c;
  u.data = m;
  u.type = F32;
  u.dims = dims;
  u.num_dims = 2;
  u.byte_strides = strides;
  u.num_byte_strides = 2;
  u.device = d.addressable_devices[1];
  CW_PJRT_ASSERT_OK(api->PJRT_Client_BufferFromHostBuffer(&u));
  assert_int_equal(bytes_in_use(d.addressable_devices[1]), 24);
  float t[6];
  cw_pjrt_test_device_to_host(u.buffer, t, sizeof(t));
  const float want[6] = {1, 4, 2, 5, 3, 6};
  assert_memory_equal(t, want, sizeof(t));
  cw_pjrt_test_buffer_free(u.buffer);
  assert_int_equal(bytes_in_use(d.addressable_devices[1]), 0);

  strides[0] = -4;
  u.buffer = NULL;
  char msg[256];
  assert_int_equal(take(api->PJRT_Client_BufferFromHostBuffer(&u), msg, sizeof(msg)),
                   PJRT_Error_Code_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "negative"));

  client_free(c);
}

static void on_ready(PJRT_Error* error, void* arg) {
  int* code = arg;
  *code = error ? (int)cw_pjrt_test_error_code(error) : 0;
  if (error) cw_pjrt_test_error_free(error);
}

static PJRT_AsyncHostToDeviceTransferManager* manager_create(PJRT_Client* c, PJRT_Device* dev,
                                                             int64_t n) {
  int64_t dims[1] = {n};
  PJRT_ShapeSpec spec;
  CW_PJRT_INIT_ARGS(spec);
  spec.dims = dims;
  spec.num_dims = 1;
  spec.element_type = F32;
  PJRT_Client_CreateBuffersForAsyncHostToDevice_Args h;
  CW_PJRT_INIT_ARGS(h);
  h.client = c;
  h.shape_specs = &spec;
  h.num_shape_specs = 1;
  h.memory = cw_pjrt_test_default_memory(dev);
  CW_PJRT_ASSERT_OK(api->PJRT_Client_CreateBuffersForAsyncHostToDevice(&h));
  return h.transfer_manager;
}

static PJRT_Buffer* manager_retrieve(PJRT_AsyncHostToDeviceTransferManager* m) {
  PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args r;
  CW_PJRT_INIT_ARGS(r);
  r.transfer_manager = m;
  CW_PJRT_ASSERT_OK(api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&r));
  return r.buffer_out;
}

static void manager_destroy(PJRT_AsyncHostToDeviceTransferManager* m) {
  PJRT_AsyncHostToDeviceTransferManager_Destroy_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.transfer_manager = m;
  CW_PJRT_ASSERT_OK(api->PJRT_AsyncHostToDeviceTransferManager_Destroy(&d));
}

static bool event_is_ready(PJRT_Event* ev) {
  PJRT_Event_IsReady_Args r;
  CW_PJRT_INIT_ARGS(r);
  r.event = ev;
  CW_PJRT_ASSERT_OK(api->PJRT_Event_IsReady(&r));
  return r.is_ready;
}

// Buffers made now and written later (the gang test plugin makes its
// outputs so): pending until the last transfer, their events' callbacks run
// then, and a manager destroyed before that fails them.
static void test_transfer_manager(void** state) {
  PJRT_Client* c = cw_pjrt_test_create_client(1);
  assert_non_null(c);
  PJRT_Client_AddressableDevices_Args d = devices_of(c);
  PJRT_Device* dev = d.addressable_devices[0];

  PJRT_AsyncHostToDeviceTransferManager* m = manager_create(c, dev, 4);
  PJRT_Buffer* b = manager_retrieve(m);
  assert_int_equal(bytes_in_use(dev), 16);
  PJRT_Buffer_ReadyEvent_Args re;
  CW_PJRT_INIT_ARGS(re);
  re.buffer = b;
  CW_PJRT_ASSERT_OK(api->PJRT_Buffer_ReadyEvent(&re));
  assert_false(event_is_ready(re.event));
  int seen = -1;  // the callback's code, once it ran
  PJRT_Event_OnReady_Args on;
  CW_PJRT_INIT_ARGS(on);
  on.event = re.event;
  on.callback = on_ready;
  on.user_arg = &seen;
  CW_PJRT_ASSERT_OK(api->PJRT_Event_OnReady(&on));
  assert_int_equal(seen, -1);

  // Reads of a pending buffer return at once and finish when it is written.
  float early[4] = {0};
  PJRT_Buffer_ToHostBuffer_Args eh;
  CW_PJRT_INIT_ARGS(eh);
  eh.src = b;
  eh.dst = early;
  eh.dst_size = sizeof(early);
  CW_PJRT_ASSERT_OK(api->PJRT_Buffer_ToHostBuffer(&eh));
  assert_false(event_is_ready(eh.event));
  PJRT_Buffer_CopyToDevice_Args cp;
  CW_PJRT_INIT_ARGS(cp);
  cp.buffer = b;
  cp.dst_device = dev;
  CW_PJRT_ASSERT_OK(api->PJRT_Buffer_CopyToDevice(&cp));
  // The manager's reference is not an external one.
  PJRT_Buffer_DecreaseExternalReferenceCount_Args dr;
  CW_PJRT_INIT_ARGS(dr);
  dr.buffer = b;
  assert_int_equal(take(api->PJRT_Buffer_DecreaseExternalReferenceCount(&dr), NULL, 0),
                   PJRT_Error_Code_FAILED_PRECONDITION);

  const float v[4] = {1, 2, 3, 4};
  PJRT_AsyncHostToDeviceTransferManager_TransferData_Args t;
  CW_PJRT_INIT_ARGS(t);
  t.transfer_manager = m;
  t.data = v;
  t.transfer_size = 8;
  CW_PJRT_ASSERT_OK(api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&t));
  assert_false(event_is_ready(re.event));  // not the last transfer
  t.data = v + 2;
  t.offset = 12;  // 8 bytes at 12 run past the buffer's 16
  char msg[256];
  assert_int_equal(
      take(api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&t), msg, sizeof(msg)),
      PJRT_Error_Code_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "8 bytes at 12"));
  t.offset = 8;
  t.is_last_transfer = true;
  CW_PJRT_ASSERT_OK(api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&t));
  assert_true(event_is_ready(re.event));
  assert_int_equal(seen, 0);
  assert_true(event_is_ready(eh.event));
  assert_memory_equal(early, v, sizeof(v));
  cw_pjrt_test_event_free(eh.event);
  float copied[4];
  cw_pjrt_test_device_to_host(cp.dst_buffer, copied, sizeof(copied));
  assert_memory_equal(copied, v, sizeof(v));
  cw_pjrt_test_buffer_free(cp.dst_buffer);
  assert_int_equal(take(api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&t), NULL, 0),
                   PJRT_Error_Code_FAILED_PRECONDITION);
  manager_destroy(m);
  float got[4];
  cw_pjrt_test_device_to_host(b, got, sizeof(got));
  assert_memory_equal(got, v, sizeof(v));
  cw_pjrt_test_event_free(re.event);
  cw_pjrt_test_buffer_free(b);
  assert_int_equal(bytes_in_use(dev), 0);

  // Destroyed before its last transfer: the buffer fails, and so do reads.
  m = manager_create(c, dev, 4);
  b = manager_retrieve(m);
  CW_PJRT_INIT_ARGS(re);
  re.buffer = b;
  CW_PJRT_ASSERT_OK(api->PJRT_Buffer_ReadyEvent(&re));
  manager_destroy(m);
  assert_true(event_is_ready(re.event));
  PJRT_Event_Error_Args ee;
  CW_PJRT_INIT_ARGS(ee);
  ee.event = re.event;
  assert_int_equal(take(api->PJRT_Event_Error(&ee), msg, sizeof(msg)), PJRT_Error_Code_CANCELLED);
  assert_non_null(strstr(msg, "destroyed before buffer 0 was written"));
  PJRT_Buffer_ToHostBuffer_Args th;
  CW_PJRT_INIT_ARGS(th);
  th.src = b;
  th.dst = got;
  th.dst_size = sizeof(got);
  assert_int_equal(take(api->PJRT_Buffer_ToHostBuffer(&th), NULL, 0), PJRT_Error_Code_CANCELLED);
  cw_pjrt_test_event_free(re.event);
  cw_pjrt_test_buffer_free(b);

  // An error set by the writer reaches the buffer's readers with its code and text.
  m = manager_create(c, dev, 4);
  b = manager_retrieve(m);
  PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args se;
  CW_PJRT_INIT_ARGS(se);
  se.transfer_manager = m;
  se.error_code = PJRT_Error_Code_DEADLINE_EXCEEDED;
  se.error_message = "rank 1 has not arrived";
  se.error_message_size = strlen(se.error_message);
  CW_PJRT_ASSERT_OK(api->PJRT_AsyncHostToDeviceTransferManager_SetBufferError(&se));
  th.src = b;
  assert_int_equal(take(api->PJRT_Buffer_ToHostBuffer(&th), msg, sizeof(msg)),
                   PJRT_Error_Code_DEADLINE_EXCEEDED);
  assert_string_equal(msg, "rank 1 has not arrived");
  PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args r;
  CW_PJRT_INIT_ARGS(r);
  r.transfer_manager = m;
  r.buffer_index = 1;
  assert_int_equal(take(api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&r), NULL, 0),
                   PJRT_Error_Code_INVALID_ARGUMENT);
  manager_destroy(m);
  cw_pjrt_test_buffer_free(b);
  client_free(c);
}

static PJRT_Buffer* upload(PJRT_Client* c, PJRT_Device* dev, const float* data, int64_t n) {
  return cw_pjrt_test_host_to_device(c, cw_pjrt_test_default_memory(dev), data, F32, &n, 1,
                                     PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes,
                                     NULL);
}

// The executable of a loaded one (the caller frees it).
static PJRT_Executable* executable_of(PJRT_LoadedExecutable* exe) {
  PJRT_LoadedExecutable_GetExecutable_Args g;
  CW_PJRT_INIT_ARGS(g);
  g.loaded_executable = exe;
  CW_PJRT_ASSERT_OK(api->PJRT_LoadedExecutable_GetExecutable(&g));
  return g.executable;
}

// e serialized; the caller runs its deleter.
static PJRT_Executable_Serialize_Args serialize(PJRT_Executable* e) {
  PJRT_Executable_Serialize_Args s;
  CW_PJRT_INIT_ARGS(s);
  s.executable = e;
  CW_PJRT_ASSERT_OK(api->PJRT_Executable_Serialize(&s));
  return s;
}

// Loads the first `size` bytes of s on c.
static PJRT_Error* load_serialized(PJRT_Client* c, const PJRT_Executable_Serialize_Args* s,
                                   size_t size, PJRT_LoadedExecutable** out) {
  PJRT_Executable_DeserializeAndLoad_Args l;
  CW_PJRT_INIT_ARGS(l);
  l.client = c;
  l.serialized_executable = s->serialized_bytes;
  l.serialized_executable_size = size;
  PJRT_Error* e = api->PJRT_Executable_DeserializeAndLoad(&l);
  *out = l.loaded_executable;
  return e;
}

// Executes exe with one argument per device (args[k]) into outs[k][...] and
// waits for every device.
static void execute(PJRT_LoadedExecutable* exe, size_t num_devices, PJRT_Buffer** args,
                    PJRT_Buffer*** outs) {
  PJRT_Buffer* const* arg_lists[4];
  PJRT_Event* done[4] = {NULL};
  assert_true(num_devices <= 4);
  for (size_t k = 0; k < num_devices; ++k) arg_lists[k] = &args[k];
  PJRT_ExecuteOptions o;
  CW_PJRT_INIT_ARGS(o);
  PJRT_LoadedExecutable_Execute_Args x;
  CW_PJRT_INIT_ARGS(x);
  x.executable = exe;
  x.options = &o;
  x.argument_lists = arg_lists;
  x.num_devices = num_devices;
  x.num_args = 1;
  x.output_lists = outs;
  x.device_complete_events = done;
  CW_PJRT_ASSERT_OK(api->PJRT_LoadedExecutable_Execute(&x));
  for (size_t k = 0; k < num_devices; ++k) cw_pjrt_test_event_wait(done[k]);
}

static void test_checksum_program_on_assigned_devices(void** state) {
  PJRT_Client* c = cw_pjrt_test_create_client(4);
  assert_non_null(c);
  PJRT_Client_AddressableDevices_Args d = devices_of(c);

  const int64_t ids[2] = {2, 0};
  PJRT_LoadedExecutable* exe = NULL;
  CW_PJRT_ASSERT_OK(compile(c, "cwnull", "f32[4] s32[2,3] checksum", ids, 2, &exe));
  PJRT_LoadedExecutable_AddressableDevices_Args ad;
  CW_PJRT_INIT_ARGS(ad);
  ad.executable = exe;
  CW_PJRT_ASSERT_OK(api->PJRT_LoadedExecutable_AddressableDevices(&ad));
  assert_int_equal(ad.num_addressable_devices, 2);
  assert_ptr_equal(ad.addressable_devices[0], d.addressable_devices[2]);
  assert_ptr_equal(ad.addressable_devices[1], d.addressable_devices[0]);

  float in[2][3] = {{1, 2, 3}, {7, 8, 9}};
  PJRT_Buffer* args[2] = {upload(c, ad.addressable_devices[0], in[0], 3),
                          upload(c, ad.addressable_devices[1], in[1], 3)};
  PJRT_Buffer* outs[2][2] = {{NULL}};
  PJRT_Buffer** out_lists[2] = {outs[0], outs[1]};
  execute(exe, 2, args, out_lists);
  for (int k = 0; k < 2; ++k) {
    uint64_t sum = fnv1a(in[k], sizeof(in[k]));
    uint64_t got[2];
    cw_pjrt_test_device_to_host(outs[k][0], got, sizeof(got));
    assert_int_equal(got[0], sum);
    assert_int_equal(got[1], sum);
    int32_t words[6];
    cw_pjrt_test_device_to_host(outs[k][1], words, sizeof(words));
    uint64_t w01;
    memcpy(&w01, words, 8);
    assert_int_equal(w01, sum);
    PJRT_Buffer_Device_Args bd;
    CW_PJRT_INIT_ARGS(bd);
    bd.buffer = outs[k][0];
    CW_PJRT_ASSERT_OK(api->PJRT_Buffer_Device(&bd));
    assert_ptr_equal(bd.device, ad.addressable_devices[k]);
  }

  // Serialized and loaded again: same devices, same fingerprint.
  PJRT_Executable* e = executable_of(exe);
  PJRT_Executable_Serialize_Args s = serialize(e);
  PJRT_LoadedExecutable* loaded = NULL;
  CW_PJRT_ASSERT_OK(load_serialized(c, &s, s.serialized_bytes_size, &loaded));
  s.serialized_executable_deleter(s.serialized_executable);
  PJRT_LoadedExecutable_AddressableDevices_Args ad2;
  CW_PJRT_INIT_ARGS(ad2);
  ad2.executable = loaded;
  CW_PJRT_ASSERT_OK(api->PJRT_LoadedExecutable_AddressableDevices(&ad2));
  assert_int_equal(ad2.num_addressable_devices, 2);
  assert_ptr_equal(ad2.addressable_devices[0], d.addressable_devices[2]);
  cw_pjrt_test_loaded_free(loaded);
  cw_pjrt_test_executable_free(e);

  for (int k = 0; k < 2; ++k) {
    cw_pjrt_test_buffer_free(args[k]);
    cw_pjrt_test_buffer_free(outs[k][0]);
    cw_pjrt_test_buffer_free(outs[k][1]);
  }
  cw_pjrt_test_loaded_free(exe);
  for (size_t i = 0; i < d.num_addressable_devices; ++i) {
    assert_int_equal(bytes_in_use(d.addressable_devices[i]), 0);
  }
  client_free(c);
}

static void test_bad_programs_are_named(void** state) {
  PJRT_Client* c = cw_pjrt_test_create_client(2);
  assert_non_null(c);
  const int64_t ids[1] = {0};
  static const struct {
    const char* format;
    const char* code;
    PJRT_Error_Code code_want;
    const char* needle;
  } bad[] = {
      {"hlo", "HloModule m", PJRT_Error_Code_UNIMPLEMENTED, "not 'hlo'"},
      {"cwnull", "f33[4]", PJRT_Error_Code_INVALID_ARGUMENT, "unknown element type 'f33'"},
      {"cwnull", "f32[4", PJRT_Error_Code_INVALID_ARGUMENT, "lacks ']'"},
      {"cwnull", "f32[4,x]", PJRT_Error_Code_INVALID_ARGUMENT, "bad dimension of output 0"},
      {"cwnull", "f32[4] bogus", PJRT_Error_Code_INVALID_ARGUMENT, "'bogus'"},
      {"cwnull", "f32[1000000,1000000]", PJRT_Error_Code_INVALID_ARGUMENT, "above 16 GiB"},
      {"cwnull", "f32[1,1,1,1,1,1,1,1,1]", PJRT_Error_Code_INVALID_ARGUMENT, "more than 8"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    PJRT_LoadedExecutable* exe = NULL;
    char msg[512];
    PJRT_Error_Code code =
        take(compile(c, bad[i].format, bad[i].code, ids, 1, &exe), msg, sizeof(msg));
    if (code != bad[i].code_want || !strstr(msg, bad[i].needle)) {
      fail_msg("'%s': code %d, message '%s'; want %d and '%s'", bad[i].code, (int)code, msg,
               (int)bad[i].code_want, bad[i].needle);
    }
  }
  const int64_t far[1] = {5};
  PJRT_LoadedExecutable* exe = NULL;
  char msg[512];
  assert_int_equal(take(compile(c, "cwnull", "f32[1]", far, 1, &exe), msg, sizeof(msg)),
                   PJRT_Error_Code_INVALID_ARGUMENT);
  client_free(c);
}

// ---- JAX's programs through CW_NULL_COMPILER -------------------------------------------------

static const char kTwiceModule[] =
    "module @m {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<i32>) {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>\n"
    "    %1 = stablehlo.constant dense<7> : tensor<i32>\n"
    "    return %0, %1 : tensor<2x3xf32>, tensor<i32>\n"
    "  }\n"
    "}\n";

// The optimized program into buf (size query first); its size.
static size_t optimized(PJRT_LoadedExecutable* exe, char* buf, size_t cap, char* format) {
  PJRT_Executable* e = executable_of(exe);
  PJRT_Program p;
  CW_PJRT_INIT_ARGS(p);
  PJRT_Executable_OptimizedProgram_Args o;
  CW_PJRT_INIT_ARGS(o);
  o.executable = e;
  o.program = &p;
  CW_PJRT_ASSERT_OK(api->PJRT_Executable_OptimizedProgram(&o));
  assert_true(p.code_size > 0 && p.code_size <= cap);
  p.code = buf;
  CW_PJRT_ASSERT_OK(api->PJRT_Executable_OptimizedProgram(&o));
  snprintf(format, 32, "%.*s", (int)p.format_size, p.format);
  cw_pjrt_test_executable_free(e);
  return p.code_size;
}

// The fingerprint of a loaded executable, into out[0..cap); its size.
static size_t fingerprint(PJRT_LoadedExecutable* exe, char* out, size_t cap) {
  PJRT_Executable* e = executable_of(exe);
  PJRT_Executable_Fingerprint_Args f;
  CW_PJRT_INIT_ARGS(f);
  f.executable = e;
  CW_PJRT_ASSERT_OK(api->PJRT_Executable_Fingerprint(&f));
  assert_true(f.executable_fingerprint_size <= cap);
  memcpy(out, f.executable_fingerprint, f.executable_fingerprint_size);
  cw_pjrt_test_executable_free(e);
  return f.executable_fingerprint_size;
}

// Without a compiler the error names the variable, and a wrong path; with
// XLA's plugin the program's outputs come out as declared (zeros), with the
// compiler's optimized HLO, kept across serialization.
static void test_mlir_through_compiler(void** state) {
  PJRT_Client* c = cw_pjrt_test_create_client(2);
  assert_non_null(c);
  PJRT_Client_AddressableDevices_Args d = devices_of(c);
  const int64_t ids[1] = {1};
  PJRT_LoadedExecutable* exe = NULL;
  char msg[1024];
  unsetenv("CW_NULL_COMPILER");
  assert_int_equal(take(compile(c, "mlir", kTwiceModule, ids, 1, &exe), msg, sizeof(msg)),
                   PJRT_Error_Code_FAILED_PRECONDITION);
  assert_non_null(strstr(msg, "CW_NULL_COMPILER is not set"));
  setenv("CW_NULL_COMPILER", "/nonexistent/compiler.so", 1);
  assert_int_equal(take(compile(c, "mlir", kTwiceModule, ids, 1, &exe), msg, sizeof(msg)),
                   PJRT_Error_Code_FAILED_PRECONDITION);
  assert_non_null(strstr(msg, "/nonexistent/compiler.so"));

  const char* xla = getenv("CW_NULL_XLA");
  if (!xla || !*xla) {
    print_message("CW_NULL_XLA (XLA's CPU plugin) is not set: the compiled half is skipped\n");
    client_free(c);
    return;
  }
  setenv("CW_NULL_COMPILER", xla, 1);
  PJRT_Plugin_Attributes_Args at;
  CW_PJRT_INIT_ARGS(at);
  CW_PJRT_ASSERT_OK(api->PJRT_Plugin_Attributes(&at));
  bool version = false;
  for (size_t i = 0; i < at.num_attributes; ++i) {
    version |= at.attributes[i].name_size == strlen("stablehlo_current_version") &&
               !memcmp(at.attributes[i].name, "stablehlo_current_version",
                       at.attributes[i].name_size);
  }
  assert_true(version);

  take(compile(c, "mlir", "module {", ids, 1, &exe), msg, sizeof(msg));  // XLA's code
  assert_non_null(strstr(msg, "refused the program"));

  CW_PJRT_ASSERT_OK(compile(c, "mlir", kTwiceModule, ids, 1, &exe));
  PJRT_Executable* e = executable_of(exe);
  PJRT_Executable_OutputElementTypes_Args ot;
  CW_PJRT_INIT_ARGS(ot);
  ot.executable = e;
  CW_PJRT_ASSERT_OK(api->PJRT_Executable_OutputElementTypes(&ot));
  assert_int_equal(ot.num_output_types, 2);
  assert_int_equal(ot.output_types[0], F32);
  assert_int_equal(ot.output_types[1], PJRT_Buffer_Type_S32);
  PJRT_Executable_OutputDimensions_Args od;
  CW_PJRT_INIT_ARGS(od);
  od.executable = e;
  CW_PJRT_ASSERT_OK(api->PJRT_Executable_OutputDimensions(&od));
  assert_int_equal(od.dim_sizes[0], 2);
  assert_int_equal(od.dim_sizes[1], 0);
  assert_int_equal(od.dims[0], 2);
  assert_int_equal(od.dims[1], 3);
  PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args li;
  CW_PJRT_INIT_ARGS(li);
  li.executable = exe;
  CW_PJRT_ASSERT_OK(api->PJRT_LoadedExecutable_AddressableDeviceLogicalIds(&li));
  assert_int_equal(li.num_addressable_device_logical_ids, 1);
  assert_int_equal(li.addressable_device_logical_ids[0].replica, 0);

  static char hlo[1 << 16], hlo2[1 << 16];
  char format[32], format2[32];
  size_t n = optimized(exe, hlo, sizeof(hlo), format);
  assert_string_equal(format, "hlo_with_config");

  float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {1};
  PJRT_Buffer* args[1] = {upload(c, d.addressable_devices[1], in, 6)};
  PJRT_Buffer* outs[2] = {NULL};
  PJRT_Buffer** out_lists[1] = {outs};
  execute(exe, 1, args, out_lists);
  cw_pjrt_test_device_to_host(outs[0], out, sizeof(out));
  const float zeros[6] = {0};
  assert_memory_equal(out, zeros, sizeof(out));
  int32_t seven = 7;
  cw_pjrt_test_device_to_host(outs[1], &seven, sizeof(seven));
  assert_int_equal(seven, 0);
  for (int k = 0; k < 2; ++k) cw_pjrt_test_buffer_free(outs[k]);
  cw_pjrt_test_buffer_free(args[0]);

  // Serialized and loaded: the same optimized program and fingerprint.
  PJRT_Executable_Serialize_Args s = serialize(e);
  PJRT_LoadedExecutable* keep = NULL;
  CW_PJRT_ASSERT_OK(load_serialized(c, &s, s.serialized_bytes_size, &keep));
  // Cut short: refused, naming the header.
  PJRT_LoadedExecutable* cut = NULL;
  assert_int_equal(take(load_serialized(c, &s, s.serialized_bytes_size - 1, &cut), msg,
                        sizeof(msg)),
                   PJRT_Error_Code_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "bad header"));
  s.serialized_executable_deleter(s.serialized_executable);
  assert_int_equal(optimized(keep, hlo2, sizeof(hlo2), format2), n);
  assert_memory_equal(hlo, hlo2, n);
  assert_string_equal(format, format2);
  char fp1[64], fp2[64];
  size_t n1 = fingerprint(exe, fp1, sizeof(fp1));
  assert_int_equal(fingerprint(keep, fp2, sizeof(fp2)), n1);
  assert_memory_equal(fp1, fp2, n1);
  cw_pjrt_test_executable_free(e);
  cw_pjrt_test_loaded_free(keep);
  cw_pjrt_test_loaded_free(exe);
  client_free(c);
}

// ---- As a worker's plugin --------------------------------------------------------------------

static void test_worker_runs_null_programs(void** state) {
  char dir[256];
  assert_int_equal(cw_test_tempdir_create("cwnull", dir, sizeof(dir)), 0);
  cw_test_process_t ctl;
  char address[512];
  assert_int_equal(cw_test_controller_start(NULL, &ctl, address, sizeof(address)), 0);
  const char* wargs[] = {"--controller", address, NULL};
  cw_test_worker_options_t wo = {
      .plugin = getenv("CW_NULLPLUGIN"), .devices = 4, .name = "null0", .extra_args = wargs};
  cw_test_worker_t w;
  assert_int_equal(cw_test_worker_start(&wo, &w), 0);

  cw_test_session_t s;
  cw_test_session_options_t so = {
      .controller = address, .name = "null-client", .num_devices = 2, .min_workers = 1};
  CW_TEST_ASSERT_OK(cw_test_session_open(&so, &s));
  const char* workers[] = {"null0"};
  int64_t ids[2];
  assert_int_equal(cw_test_session_ids(&s, workers, 1, ids, 2), 2);
  size_t osize = 0;
  uint8_t* opts = cw_test_compile_options(ids, 2, &osize);
  assert_non_null(opts);
  const char* code = "f32[6] checksum";
  CW_TEST_ASSERT_OK(cw_client_compile(s.ctl, 1, "cwnull", code, strlen(code), opts, osize, NULL));
  cw_status_t st = cw_client_compile(s.ctl, 2, "cwnull", "c99[1]", 6, opts, osize, NULL);
  assert_non_null(st);
  assert_non_null(strstr(cw_status_message(st), "unknown element type 'c99'"));
  cw_status_free(st);
  free(opts);

  float in[2][5] = {{1, 2, 3, 4, 5}, {-1, -2, -3, -4, -5}};
  for (int k = 0; k < 2; ++k) {
    CW_TEST_ASSERT_OK(cw_test_session_upload_f32(&s, ids[k], 100 + (uint64_t)k, in[k], 5));
  }
  CW_TEST_ASSERT_OK(cw_test_session_flush(&s));
  const uint64_t args[2] = {100, 101}, outs[2] = {200, 201};
  CW_TEST_ASSERT_OK(cw_test_gang_launch(&s, 1, args, outs, 2));
  CW_TEST_ASSERT_OK(cw_client_flush(s.ctl));
  for (int k = 0; k < 2; ++k) {
    float got[6];
    CW_TEST_ASSERT_OK(cw_test_session_download_f32(&s, ids[k], outs[k], got, 6));
    uint64_t words[3];
    memcpy(words, got, sizeof(words));
    uint64_t sum = fnv1a(in[k], sizeof(in[k]));
    for (int j = 0; j < 3; ++j)
      assert_int_equal(words[j], sum);
  }
  cw_test_session_close(&s);
  assert_int_equal(cw_test_worker_stop(&w, 20000), 0);
  assert_int_equal(cw_test_process_stop(&ctl, 20000), 0);
  cw_test_tempdir_remove(dir);
}

int main(void) {
  const char* path = getenv("CW_NULLPLUGIN");
  if (!path || !*path) {
    printf("CW_NULLPLUGIN is not set: skipped\n");
    return CW_PJRT_TEST_SKIP;
  }
  if (cw_pjrt_test_load(path) || cw_pjrt_test_initialize()) return 1;
  api = cw_pjrt_test_api;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_devices_and_strided_upload),
      cmocka_unit_test(test_transfer_manager),
      cmocka_unit_test(test_checksum_program_on_assigned_devices),
      cmocka_unit_test(test_bad_programs_are_named),
      cmocka_unit_test(test_mlir_through_compiler),
      cmocka_unit_test(test_worker_runs_null_programs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
