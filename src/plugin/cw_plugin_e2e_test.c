// End-to-end test of libcauseway_pjrt.so against a real cluster: the
// embedded one (controller + 2 workers as children), or the one at
// CAUSEWAY_CONTROLLER. Drives the plugin as JAX does: devices, uploads,
// downloads, copies within and across workers, compile, execute, errors,
// and clean-up of the embedded cluster's directory and processes.
// Exits 77 (skipped) when CAUSEWAY_PJRT_PLUGIN is not set.
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_pjrt_c_api.h"
#include "cw_pjrt_test_util.h"

static const PJRT_Api* api;
static PJRT_Client* client;

#define INIT_ARGS(var)              \
  do {                              \
    memset(&(var), 0, sizeof(var)); \
    (var).struct_size = sizeof(var); \
  } while (0)

static char* error_text(PJRT_Error* e) {
  PJRT_Error_Message_Args m;
  INIT_ARGS(m);
  m.error = e;
  api->PJRT_Error_Message(&m);
  return strndup(m.message, m.message_size);
}

static void error_free(PJRT_Error* e) {
  PJRT_Error_Destroy_Args d;
  INIT_ARGS(d);
  d.error = e;
  api->PJRT_Error_Destroy(&d);
}

#define OK(call)                                                  \
  do {                                                            \
    PJRT_Error* e_ = (call);                                      \
    if (e_) {                                                     \
      char* m_ = error_text(e_);                                  \
      fail_msg("%s failed: %s", #call, m_);                      \
    }                                                             \
  } while (0)

static void await_event(PJRT_Event* ev) {
  PJRT_Event_Await_Args a;
  INIT_ARGS(a);
  a.event = ev;
  OK(api->PJRT_Event_Await(&a));
  PJRT_Event_Destroy_Args d;
  INIT_ARGS(d);
  d.event = ev;
  OK(api->PJRT_Event_Destroy(&d));
}

static int setup(void** state) {
  (void)state;
  void* h = dlopen(CW_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  api = ((CW_PJRT_GetPjrtApi_Fn)dlsym(h, CW_PJRT_GET_API_SYMBOL))();
  cw_pjrt_test_api = api;  // (the shared helpers call the plugin under test)
  PJRT_Client_Create_Args c;
  INIT_ARGS(c);
  PJRT_Error* e = api->PJRT_Client_Create(&c);
  if (e) {
    char* m = error_text(e);
    fprintf(stderr, "PJRT_Client_Create: %s\n", m);
    free(m);
    error_free(e);
    return -1;
  }
  client = c.client;
  return 0;
}

static void get_devices(PJRT_Device* const** out, size_t* n) {
  PJRT_Client_Devices_Args d;
  INIT_ARGS(d);
  d.client = client;
  OK(api->PJRT_Client_Devices(&d));
  *out = d.devices;
  *n = d.num_devices;
}

static int device_id(PJRT_Device* dev) {
  PJRT_Device_GetDescription_Args g;
  INIT_ARGS(g);
  g.device = dev;
  OK(api->PJRT_Device_GetDescription(&g));
  PJRT_DeviceDescription_Id_Args i;
  INIT_ARGS(i);
  i.device_description = g.device_description;
  OK(api->PJRT_DeviceDescription_Id(&i));
  return i.id;
}

static const char* device_worker(PJRT_Device* dev) {
  PJRT_DeviceDescription_Attributes_Args a;
  INIT_ARGS(a);
  a.device_description = (PJRT_DeviceDescription*)dev;
  OK(api->PJRT_DeviceDescription_Attributes(&a));
  for (size_t k = 0; k < a.num_attributes; ++k) {
    if (!strcmp(a.attributes[k].name, "worker")) return a.attributes[k].string_value;
  }
  return "";
}

// Any element type, shape and byte strides (NULL: dense); the error if
// BufferFromHostBuffer refuses it.
static PJRT_Error* upload_try(PJRT_Device* dev, PJRT_Buffer_Type type, const void* data,
                              const int64_t* dims, size_t rank, const int64_t* strides,
                              PJRT_Buffer** out) {
  PJRT_Client_BufferFromHostBuffer_Args b;
  INIT_ARGS(b);
  b.client = client;
  b.data = data;
  b.type = type;
  b.dims = dims;
  b.num_dims = rank;
  b.byte_strides = strides;
  b.num_byte_strides = strides ? rank : 0;
  b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  b.memory = cw_pjrt_test_default_memory(dev);
  PJRT_Error* e = api->PJRT_Client_BufferFromHostBuffer(&b);
  if (e) return e;
  await_event(b.done_with_host_buffer);
  *out = b.buffer;
  return NULL;
}

static PJRT_Buffer* upload_raw(PJRT_Device* dev, PJRT_Buffer_Type type, const void* data,
                               const int64_t* dims, size_t rank, const int64_t* strides) {
  PJRT_Buffer* buf = NULL;
  OK(upload_try(dev, type, data, dims, rank, strides, &buf));
  return buf;
}

static PJRT_Buffer* upload(PJRT_Device* dev, const float* data, int64_t n) {
  return upload_raw(dev, PJRT_Buffer_Type_F32, data, &n, 1, NULL);
}

static void download(PJRT_Buffer* buf, float* out, size_t n) {
  PJRT_Buffer_ToHostBuffer_Args t;
  INIT_ARGS(t);
  t.src = buf;
  OK(api->PJRT_Buffer_ToHostBuffer(&t));
  assert_int_equal(t.dst_size, n * sizeof(float));
  t.dst = out;
  OK(api->PJRT_Buffer_ToHostBuffer(&t));
  assert_non_null(t.event);
  await_event(t.event);
}

// A copy of `b` in `dev`'s default memory.
static PJRT_Buffer* copy_to(PJRT_Buffer* b, PJRT_Device* dev) {
  PJRT_Buffer_CopyToMemory_Args c;
  INIT_ARGS(c);
  c.buffer = b;
  c.dst_memory = cw_pjrt_test_default_memory(dev);
  OK(api->PJRT_Buffer_CopyToMemory(&c));
  return c.dst_buffer;
}

static void destroy_buffer(PJRT_Buffer* b) {
  PJRT_Buffer_Destroy_Args d;
  INIT_ARGS(d);
  d.buffer = b;
  OK(api->PJRT_Buffer_Destroy(&d));
}

static void test_devices(void** state) {
  (void)state;
  PJRT_Device* const* devs;
  size_t n;
  get_devices(&devs, &n);
  assert_true(n >= 2);
  PJRT_Client_PlatformName_Args p;
  INIT_ARGS(p);
  p.client = client;
  OK(api->PJRT_Client_PlatformName(&p));
  assert_int_equal(p.platform_name_size, 3);
  assert_memory_equal(p.platform_name, "cpu", 3);
  for (size_t i = 0; i < n; ++i) {
    PJRT_Client_LookupDevice_Args l;
    INIT_ARGS(l);
    l.client = client;
    l.id = device_id(devs[i]);
    OK(api->PJRT_Client_LookupDevice(&l));
    assert_ptr_equal(l.device, devs[i]);
    assert_true(device_worker(devs[i])[0] != '\0');
  }
}

static void test_upload_download_copy(void** state) {
  (void)state;
  PJRT_Device* const* devs;
  size_t n;
  get_devices(&devs, &n);
  float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
  PJRT_Buffer* a = upload(devs[0], in, 6);
  download(a, out, 6);
  assert_memory_equal(in, out, sizeof(in));
  // To every other device: same worker (COPY) and other workers (SEND).
  for (size_t i = 1; i < n; ++i) {
    PJRT_Buffer* copy = copy_to(a, devs[i]);
    PJRT_Buffer_ReadyEvent_Args r;
    INIT_ARGS(r);
    r.buffer = copy;
    OK(api->PJRT_Buffer_ReadyEvent(&r));
    await_event(r.event);
    memset(out, 0, sizeof(out));
    download(copy, out, 6);
    assert_memory_equal(in, out, sizeof(in));
    destroy_buffer(copy);
  }
  destroy_buffer(a);
}

// PJRT_Buffer_CopyRawToHost, awaited when it starts.
static PJRT_Error* copy_raw(PJRT_Buffer* b, void* dst, int64_t offset, int64_t size) {
  PJRT_Buffer_CopyRawToHost_Args r;
  INIT_ARGS(r);
  r.buffer = b;
  r.dst = dst;
  r.offset = offset;
  r.transfer_size = size;
  PJRT_Error* e = api->PJRT_Buffer_CopyRawToHost(&r);
  if (!e) await_event(r.event);
  return e;
}

// Negative strides are made dense on the client; sub-byte types travel one
// byte per element (as PJRT's host buffers hold them) and come back so, also
// after a copy to another worker. Ranges of the raw bytes (CopyRawToHost),
// in and past the end.
static void test_strides_and_packed_types(void** state) {
  (void)state;
  PJRT_Device* const* devs;
  size_t n;
  get_devices(&devs, &n);
  float m[2][3] = {{1, 2, 3}, {4, 5, 6}}, out[6] = {0};
  int64_t dims[] = {2, 3}, reversed[] = {-12, -4};  // m[::-1, ::-1]
  PJRT_Buffer* a = upload_raw(devs[0], PJRT_Buffer_Type_F32, &m[1][2], dims, 2, reversed);
  download(a, out, 6);
  static const float want[] = {6, 5, 4, 3, 2, 1};
  assert_memory_equal(out, want, sizeof(want));
  // Its address on the worker: non-zero, the same when asked again,
  // another buffer's differs.
  uintptr_t addr[2] = {0, 0};
  PJRT_Buffer* other = upload(devs[0], want, 6);
  PJRT_Buffer* both[] = {a, a, other};
  for (size_t i = 0; i < 3; ++i) {
    PJRT_Buffer_UnsafePointer_Args up;
    INIT_ARGS(up);
    up.buffer = both[i];
    OK(api->PJRT_Buffer_UnsafePointer(&up));
    assert_true(up.buffer_pointer != 0);
    if (i == 1) assert_true(up.buffer_pointer == addr[0]);
    if (i == 2) assert_true(up.buffer_pointer != addr[0]);
    addr[i ? 1 : 0] = up.buffer_pointer;
  }
  destroy_buffer(other);

  // A range of the raw (dense) bytes; one past the end is refused, named.
  float part[3] = {0};
  OK(copy_raw(a, part, 4, sizeof(part)));
  static const float mid[] = {5, 4, 3};
  assert_memory_equal(part, mid, sizeof(mid));
  OK(copy_raw(a, NULL, 24, 0));
  PJRT_Error* err = copy_raw(a, part, 16, 12);
  assert_non_null(err);
  char* text = error_text(err);
  assert_non_null(strstr(text, "12 bytes from byte 16 are not within buffer"));
  free(text);
  error_free(err);
  destroy_buffer(a);
  // Ranges of 1 MiB: big enough for a same-host worker to write them into
  // our memory (CW_PLUGIN_DIRECT_MIN_BYTES), where it may.
  enum { kBig = 1 << 20 };
  float* big = malloc(kBig * sizeof(float));
  float* back = calloc(kBig, sizeof(float));
  assert_non_null(big);
  assert_non_null(back);
  for (int i = 0; i < kBig; ++i) big[i] = (float)i * 0.5f;
  PJRT_Buffer* wide = upload(devs[0], big, kBig);
  const size_t piece = kBig * sizeof(float) / 4;
  for (size_t off = 0; off < kBig * sizeof(float); off += piece) {
    OK(copy_raw(wide, (char*)back + off, (int64_t)off, (int64_t)piece));
  }
  assert_memory_equal(back, big, kBig * sizeof(float));
  destroy_buffer(wide);
  free(big);
  free(back);

  // A type that never crosses is refused, named.
  PJRT_Buffer* none = NULL;
  err = upload_try(devs[0], PJRT_Buffer_Type_TOKEN, m, dims, 1, NULL, &none);
  assert_non_null(err);
  text = error_text(err);
  assert_non_null(strstr(text, "element type token"));
  free(text);
  error_free(err);
  assert_null(none);

  int8_t s4[7] = {-8, -3, -1, 0, 1, 5, 7}, got[7] = {0};
  int64_t n7 = 7;
  PJRT_Buffer* b = upload_raw(devs[0], PJRT_Buffer_Type_S4, s4, &n7, 1, NULL);
  PJRT_Buffer_OnDeviceSizeInBytes_Args sz;
  INIT_ARGS(sz);
  sz.buffer = b;
  OK(api->PJRT_Buffer_OnDeviceSizeInBytes(&sz));
  assert_int_equal(sz.on_device_size_in_bytes, 4);  // packed there
  err = copy_raw(b, got, 0, 4);  // the raw form is not what the wire carries
  assert_non_null(err);
  text = error_text(err);
  assert_non_null(strstr(text, "packed on the device"));
  free(text);
  error_free(err);
  PJRT_Buffer* bufs[] = {b, copy_to(b, devs[n - 1])};  // to another worker
  for (size_t i = 0; i < 2; ++i) {
    PJRT_Buffer_ToHostBuffer_Args t;
    INIT_ARGS(t);
    t.src = bufs[i];
    OK(api->PJRT_Buffer_ToHostBuffer(&t));
    assert_int_equal(t.dst_size, sizeof(got));
    memset(got, 0, sizeof(got));
    t.dst = got;
    OK(api->PJRT_Buffer_ToHostBuffer(&t));
    await_event(t.event);
    // XLA's plugin hands back the low four bits, as stock JAX gets them.
    for (size_t k = 0; k < 7; ++k) assert_int_equal(got[k] & 0xf, s4[k] & 0xf);
    destroy_buffer(bufs[i]);
  }
}

// --- The async host-to-device transfer manager ----------------------------------

static PJRT_AsyncHostToDeviceTransferManager* h2d_create(PJRT_Device* dev, PJRT_ShapeSpec* specs,
                                                        size_t n, PJRT_Error** out_err) {
  PJRT_Client_CreateBuffersForAsyncHostToDevice_Args c;
  INIT_ARGS(c);
  c.client = client;
  c.shape_specs = specs;
  c.num_shape_specs = n;
  c.memory = cw_pjrt_test_default_memory(dev);
  *out_err = api->PJRT_Client_CreateBuffersForAsyncHostToDevice(&c);
  return c.transfer_manager;
}

static PJRT_Error* h2d_send(PJRT_AsyncHostToDeviceTransferManager* t, int index, const void* data,
                            int64_t offset, int64_t size, bool last) {
  PJRT_AsyncHostToDeviceTransferManager_TransferData_Args a;
  INIT_ARGS(a);
  a.transfer_manager = t;
  a.buffer_index = index;
  a.data = data;
  a.offset = offset;
  a.transfer_size = size;
  a.is_last_transfer = last;
  PJRT_Error* e = api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&a);
  if (!e) await_event(a.done_with_h2d_transfer);
  return e;
}

static PJRT_Error* h2d_retrieve(PJRT_AsyncHostToDeviceTransferManager* t, int index,
                                PJRT_Buffer** out) {
  PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args a;
  INIT_ARGS(a);
  a.transfer_manager = t;
  a.buffer_index = index;
  PJRT_Error* e = api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&a);
  *out = a.buffer_out;
  return e;
}

static void h2d_destroy(PJRT_AsyncHostToDeviceTransferManager* t) {
  PJRT_AsyncHostToDeviceTransferManager_Destroy_Args a;
  INIT_ARGS(a);
  a.transfer_manager = t;
  OK(api->PJRT_AsyncHostToDeviceTransferManager_Destroy(&a));
}

static void expect_error(PJRT_Error* e, const char* text) {
  assert_non_null(e);
  char* msg = error_text(e);
  if (!strstr(msg, text)) fail_msg("\"%s\" does not say \"%s\"", msg, text);
  free(msg);
  error_free(e);
}

// Buffers made ahead of their bytes: usable at once (a read waits for the
// last part), filled in order in parts; what is out of order, past the end,
// retrieved twice, failed by the caller or never finished fails by name.
static void test_async_host_to_device(void** state) {
  (void)state;
  PJRT_Device* const* devs;
  size_t n;
  get_devices(&devs, &n);
  enum { kN = 4096 };
  int64_t big = kN, small = 3, s4dims = 8;
  PJRT_ShapeSpec specs[2];
  INIT_ARGS(specs[0]);
  INIT_ARGS(specs[1]);
  specs[0].dims = &big;
  specs[0].num_dims = 1;
  specs[0].element_type = PJRT_Buffer_Type_F32;
  specs[1].dims = &small;
  specs[1].num_dims = 1;
  specs[1].element_type = PJRT_Buffer_Type_F32;
  PJRT_Error* err = NULL;
  PJRT_AsyncHostToDeviceTransferManager* t = h2d_create(devs[0], specs, 2, &err);
  OK(err);
  PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args bc;
  INIT_ARGS(bc);
  bc.transfer_manager = t;
  OK(api->PJRT_AsyncHostToDeviceTransferManager_BufferCount(&bc));
  assert_int_equal(bc.buffer_count, 2);
  PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args bs;
  INIT_ARGS(bs);
  bs.transfer_manager = t;
  OK(api->PJRT_AsyncHostToDeviceTransferManager_BufferSize(&bs));
  assert_int_equal(bs.buffer_size, kN * sizeof(float));
  PJRT_AsyncHostToDeviceTransferManager_Device_Args dv;
  INIT_ARGS(dv);
  dv.transfer_manager = t;
  OK(api->PJRT_AsyncHostToDeviceTransferManager_Device(&dv));
  assert_ptr_equal(dv.device_out, devs[0]);

  // Read before any byte is sent: the read waits for the last part.
  float* want = malloc(kN * sizeof(float));
  float* got = calloc(kN, sizeof(float));
  assert_non_null(want);
  assert_non_null(got);
  for (int i = 0; i < kN; ++i) want[i] = (float)i - 7.25f;
  PJRT_Buffer* b0 = NULL;
  OK(h2d_retrieve(t, 0, &b0));
  PJRT_Buffer_ToHostBuffer_Args th;
  INIT_ARGS(th);
  th.src = b0;
  th.dst = got;
  th.dst_size = kN * sizeof(float);
  OK(api->PJRT_Buffer_ToHostBuffer(&th));
  const int64_t third = kN * sizeof(float) / 3;
  OK(h2d_send(t, 0, want, 0, third, false));
  expect_error(h2d_send(t, 0, (char*)want + 2 * third, 2 * third, 8, false),
               "causeway takes a buffer's bytes in order");
  OK(h2d_send(t, 0, (char*)want + third, third, third, false));
  expect_error(h2d_send(t, 0, (char*)want + 2 * third, 2 * third, 4, true), "do not finish");
  OK(h2d_send(t, 0, (char*)want + 2 * third, 2 * third, kN * sizeof(float) - 2 * third, true));
  await_event(th.event);
  assert_memory_equal(got, want, kN * sizeof(float));
  expect_error(h2d_send(t, 0, want, kN * sizeof(float), 0, true), "had its last transfer");
  PJRT_Buffer* again = NULL;
  expect_error(h2d_retrieve(t, 0, &again), "buffer 0 was retrieved already");
  expect_error(h2d_send(t, 1, want, 0, 16, false), "overrun");
  OK(h2d_send(t, 1, want, 0, 12, true));  // all at once
  PJRT_Buffer* b1 = NULL;
  OK(h2d_retrieve(t, 1, &b1));
  float three[3] = {0};
  download(b1, three, 3);
  assert_memory_equal(three, want, sizeof(three));
  expect_error(h2d_retrieve(t, 2, &again), "buffer index 2 of 2");
  h2d_destroy(t);
  destroy_buffer(b0);
  destroy_buffer(b1);

  // The caller's error, and a manager that ends early: the buffer's users
  // hear why.
  t = h2d_create(devs[0], specs + 1, 1, &err);
  OK(err);
  PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args se;
  INIT_ARGS(se);
  se.transfer_manager = t;
  se.error_code = PJRT_Error_Code_DATA_LOSS;
  se.error_message = "the source went away";
  se.error_message_size = strlen(se.error_message);
  OK(api->PJRT_AsyncHostToDeviceTransferManager_SetBufferError(&se));
  OK(h2d_retrieve(t, 0, &b1));
  INIT_ARGS(th);
  th.src = b1;
  th.dst = three;
  th.dst_size = sizeof(three);
  expect_error(api->PJRT_Buffer_ToHostBuffer(&th), "the source went away");
  h2d_destroy(t);
  destroy_buffer(b1);
  t = h2d_create(devs[0], specs + 1, 1, &err);
  OK(err);
  OK(h2d_send(t, 0, want, 0, 4, false));
  OK(h2d_retrieve(t, 0, &b1));
  INIT_ARGS(th);
  th.src = b1;
  th.dst = three;
  th.dst_size = sizeof(three);
  OK(api->PJRT_Buffer_ToHostBuffer(&th));  // sent: it waits at the worker
  h2d_destroy(t);
  PJRT_Event_Await_Args aw;
  INIT_ARGS(aw);
  aw.event = th.event;
  // The worker fails the read ("was deleted while it was uploaded in
  // parts"); the buffer's own error, set first, is what the read reports.
  expect_error(api->PJRT_Event_Await(&aw), "its transfer manager ended before its last transfer");
  PJRT_Event_Destroy_Args ed;
  INIT_ARGS(ed);
  ed.event = th.event;
  OK(api->PJRT_Event_Destroy(&ed));
  INIT_ARGS(th);
  th.src = b1;
  th.dst = three;
  th.dst_size = sizeof(three);
  expect_error(api->PJRT_Buffer_ToHostBuffer(&th), "ended before its last transfer");
  destroy_buffer(b1);
  // Never retrieved: destroyed with the manager, the worker told.
  t = h2d_create(devs[0], specs, 1, &err);
  OK(err);
  h2d_destroy(t);
  // Packed sub-byte types do not travel as their raw bytes.
  specs[1].dims = &s4dims;
  specs[1].element_type = PJRT_Buffer_Type_S4;
  t = h2d_create(devs[0], specs + 1, 1, &err);
  expect_error(err, "cannot fill arrays of element type");
  free(want);
  free(got);
}

static const char kAddModule[] =
    "module @add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<6xf32>, %arg1: tensor<6xf32>) -> (tensor<6xf32>) {\n"
    "    %0 = stablehlo.add %arg0, %arg1 : tensor<6xf32>\n"
    "    return %0 : tensor<6xf32>\n"
    "  }\n"
    "}\n";

// kAddModule's executable and its one device.
static PJRT_LoadedExecutable* compile_add(PJRT_Device** out_dev) {
  PJRT_Error* err = NULL;
  PJRT_LoadedExecutable* exe = cw_pjrt_test_compile(client, kAddModule, NULL, 0, &err);
  OK(err);
  PJRT_LoadedExecutable_AddressableDevices_Args ad;
  INIT_ARGS(ad);
  ad.executable = exe;
  OK(api->PJRT_LoadedExecutable_AddressableDevices(&ad));
  assert_int_equal(ad.num_addressable_devices, 1);
  *out_dev = ad.addressable_devices[0];
  return exe;
}

// x + y through kAddModule's `exe`: its output and completion event.
static PJRT_Error* execute_add(PJRT_LoadedExecutable* exe, PJRT_Buffer* x, PJRT_Buffer* y,
                               PJRT_Buffer** out, PJRT_Event** done) {
  PJRT_Buffer* argv[2] = {x, y};
  PJRT_Buffer* const* arg_lists[1] = {argv};
  PJRT_Buffer** out_lists[1] = {out};
  PJRT_ExecuteOptions opt;
  INIT_ARGS(opt);
  PJRT_LoadedExecutable_Execute_Args e;
  INIT_ARGS(e);
  e.executable = exe;
  e.options = &opt;
  e.argument_lists = arg_lists;
  e.num_devices = 1;
  e.num_args = 2;
  e.output_lists = out_lists;
  e.device_complete_events = done;
  *out = NULL;
  return api->PJRT_LoadedExecutable_Execute(&e);
}

static void test_compile_execute(void** state) {
  (void)state;
  PJRT_Device* dev;
  PJRT_LoadedExecutable* exe = compile_add(&dev);
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60}, out[6];
  PJRT_Buffer* bx = upload(dev, x, 6);
  PJRT_Buffer* by = upload(dev, y, 6);
  // Launch many times back to back: nothing waits on the network.
  for (int iter = 0; iter < 50; ++iter) {
    PJRT_Buffer* res;
    PJRT_Event* done;
    OK(execute_add(exe, bx, by, &res, &done));
    assert_non_null(res);
    if (iter == 49) {
      await_event(done);
      download(res, out, 6);
      for (int i = 0; i < 6; ++i) assert_true(out[i] == x[i] + y[i]);
    } else {
      cw_pjrt_test_event_free(done);
    }
    destroy_buffer(res);
  }
  destroy_buffer(bx);
  destroy_buffer(by);
  cw_pjrt_test_loaded_free(exe);
}

// Two threads each run a chain x = x + y of CHAIN launches as JAX dispatches
// one: the completion event's OnReady callback destroys the event (JAX's
// futures do), the input is destroyed once used, and every 256th output is
// awaited through its ready event (block_until_ready). Under the sanitizers
// this is the launch path's threads at full stretch: the callers, the
// client's reader and flusher, the plugin's hand-back of callbacks and its
// recycled futures. cmocka cannot fail from a thread: errors are counted.
#define CHAIN 3000
typedef struct {
  PJRT_LoadedExecutable* exe;
  PJRT_Buffer* x;  // uploaded by the test; the chain's last output when it ends
  PJRT_Buffer* y;
  float first, step;
  atomic_int fired;  // OnReady callbacks run
  atomic_int errors;
  pthread_mutex_t mu;  // the first error's text, written from any thread
  char error[256];
} chain_t;

// Static: a failed assert leaves the test while callbacks may still come.
static chain_t chains[2];

static void chain_fail(chain_t* c, const char* what, const char* why) {
  pthread_mutex_lock(&c->mu);
  if (!c->error[0]) snprintf(c->error, sizeof(c->error), "%s: %s", what, why);
  pthread_mutex_unlock(&c->mu);
  atomic_fetch_add(&c->errors, 1);
}

static void chain_error(chain_t* c, const char* what, PJRT_Error* e) {
  char* m = error_text(e);
  chain_fail(c, what, m);
  free(m);
  error_free(e);
}

static void destroy_event(chain_t* c, PJRT_Event* ev) {
  PJRT_Event_Destroy_Args d;
  INIT_ARGS(d);
  d.event = ev;
  PJRT_Error* e = api->PJRT_Event_Destroy(&d);
  if (e) chain_error(c, "PJRT_Event_Destroy", e);
}

static void chain_on_ready(PJRT_Error* error, void* user) {
  void** arg = user;
  chain_t* c = arg[0];
  if (error) chain_error(c, "completion", error);
  destroy_event(c, arg[1]);
  free(arg);
  atomic_fetch_add(&c->fired, 1);
}

static void* chain_main(void* user) {
  chain_t* c = user;
  PJRT_Buffer *bx = c->x, *by = c->y;
  for (int iter = 0; iter < CHAIN && !atomic_load(&c->errors); ++iter) {
    PJRT_Buffer* res;
    PJRT_Event* done;
    PJRT_Error* err = execute_add(c->exe, bx, by, &res, &done);
    if (err) {
      chain_error(c, "PJRT_LoadedExecutable_Execute", err);
      break;
    }
    void** arg = malloc(2 * sizeof(void*));
    if (arg) {
      arg[0] = c;
      arg[1] = done;
      PJRT_Event_OnReady_Args r;
      INIT_ARGS(r);
      r.event = done;
      r.callback = chain_on_ready;
      r.user_arg = arg;
      err = api->PJRT_Event_OnReady(&r);
      if (err) chain_error(c, "PJRT_Event_OnReady", err);
    } else {
      chain_fail(c, "malloc", "out of memory");
    }
    if (!arg || err) {  // no callback to destroy it
      free(arg);
      destroy_event(c, done);
    }
    PJRT_Buffer_Destroy_Args d;
    INIT_ARGS(d);
    d.buffer = bx;
    err = api->PJRT_Buffer_Destroy(&d);
    if (err) chain_error(c, "PJRT_Buffer_Destroy", err);
    bx = res;
    if (iter % 256 == 255 || iter == CHAIN - 1) {
      PJRT_Buffer_ReadyEvent_Args re;
      INIT_ARGS(re);
      re.buffer = bx;
      err = api->PJRT_Buffer_ReadyEvent(&re);
      if (err) {
        chain_error(c, "PJRT_Buffer_ReadyEvent", err);
        break;
      }
      PJRT_Event_Await_Args a;
      INIT_ARGS(a);
      a.event = re.event;
      err = api->PJRT_Event_Await(&a);
      if (err) chain_error(c, "PJRT_Event_Await", err);
      destroy_event(c, re.event);
    }
  }
  c->x = bx;
  return NULL;
}

static void test_chains_on_two_threads(void** state) {
  (void)state;
  PJRT_Device* dev;
  PJRT_LoadedExecutable* exe = compile_add(&dev);
  chain_t* c = chains;
  for (int k = 0; k < 2; ++k) {  // cmocka's asserts only on this thread
    memset(&c[k], 0, sizeof(c[k]));
    pthread_mutex_init(&c[k].mu, NULL);
    c[k].exe = exe;
    c[k].first = k ? 100 : 1;
    c[k].step = k ? 2 : 1;
    float x[6], y[6];
    for (int i = 0; i < 6; ++i) x[i] = c[k].first + (float)i, y[i] = c[k].step;
    c[k].x = upload(dev, x, 6);
    c[k].y = upload(dev, y, 6);
  }
  pthread_t t[2];
  for (int k = 0; k < 2; ++k) assert_int_equal(pthread_create(&t[k], NULL, chain_main, &c[k]), 0);
  for (int k = 0; k < 2; ++k) pthread_join(t[k], NULL);
  // Every callback runs, on a later caller or on the hand-back's runner.
  for (int ms = 0; ms < 30000; ms += 10) {
    if (atomic_load(&c[0].fired) == CHAIN && atomic_load(&c[1].fired) == CHAIN) break;
    if (atomic_load(&c[0].errors) || atomic_load(&c[1].errors)) break;
    usleep(10 * 1000);
  }
  for (int k = 0; k < 2; ++k) {
    if (atomic_load(&c[k].errors)) {
      char why[sizeof(c[k].error)];
      pthread_mutex_lock(&c[k].mu);
      memcpy(why, c[k].error, sizeof(why));
      pthread_mutex_unlock(&c[k].mu);
      fail_msg("chain %d: %s", k, why);
    }
    float last[6];
    download(c[k].x, last, 6);
    for (int i = 0; i < 6; ++i) assert_true(last[i] == c[k].first + (float)i + CHAIN * c[k].step);
    destroy_buffer(c[k].x);
    destroy_buffer(c[k].y);
    assert_int_equal(atomic_load(&c[k].fired), CHAIN);
    pthread_mutex_destroy(&c[k].mu);
  }
  cw_pjrt_test_loaded_free(exe);
}

static void test_compile_error_reaches_caller(void** state) {
  (void)state;
  PJRT_Error* e = NULL;
  PJRT_LoadedExecutable* exe =
      cw_pjrt_test_compile(client, "module { func.func @main() { stablehlo.frobnicate } }", NULL,
                           0, &e);
  assert_non_null(e);
  assert_null(exe);
  char* m = error_text(e);
  assert_non_null(strstr(m, "frobnicate"));
  free(m);
  error_free(e);
}

// The loaded executable's PJRT_Executable (one reference:
// cw_pjrt_test_executable_free).
static PJRT_Executable* executable_of(PJRT_LoadedExecutable* exe) {
  PJRT_LoadedExecutable_GetExecutable_Args g;
  INIT_ARGS(g);
  g.loaded_executable = exe;
  OK(api->PJRT_LoadedExecutable_GetExecutable(&g));
  return g.executable;
}

static char* fingerprint_of(PJRT_LoadedExecutable* exe) {
  PJRT_Executable_Fingerprint_Args f;
  INIT_ARGS(f);
  f.executable = executable_of(exe);
  OK(api->PJRT_Executable_Fingerprint(&f));
  char* out = strndup(f.executable_fingerprint, f.executable_fingerprint_size);
  cw_pjrt_test_executable_free(f.executable);
  return out;
}

static PJRT_Error* deserialize(const char* bytes, size_t size, PJRT_LoadedExecutable** out) {
  PJRT_Executable_DeserializeAndLoad_Args a;
  INIT_ARGS(a);
  a.client = client;
  a.serialized_executable = bytes;
  a.serialized_executable_size = size;
  PJRT_Error* e = api->PJRT_Executable_DeserializeAndLoad(&a);
  *out = a.loaded_executable;
  return e;
}

// PJRT_Executable_Serialize gives the program and its options; loading them
// compiles again through the controller: the same executable (fingerprint),
// which computes the same sums. Bytes that are not one are refused by name.
static void test_serialize_and_load(void** state) {
  (void)state;
  PJRT_Device* dev;
  PJRT_LoadedExecutable* exe = compile_add(&dev);
  PJRT_Executable_Serialize_Args ser;
  INIT_ARGS(ser);
  ser.executable = executable_of(exe);
  OK(api->PJRT_Executable_Serialize(&ser));
  assert_true(ser.serialized_bytes_size > 0);
  assert_non_null(ser.serialized_executable_deleter);
  PJRT_LoadedExecutable* again = NULL;
  OK(deserialize(ser.serialized_bytes, ser.serialized_bytes_size, &again));
  assert_non_null(again);
  char* f1 = fingerprint_of(exe);
  char* f2 = fingerprint_of(again);
  assert_string_equal(f1, f2);
  free(f1);
  free(f2);

  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0.5f, 1, 2, 4, 8, 16}, out[6];
  PJRT_Buffer* bx = upload(dev, x, 6);
  PJRT_Buffer* by = upload(dev, y, 6);
  PJRT_Buffer* res;
  PJRT_Event* done;
  OK(execute_add(again, bx, by, &res, &done));
  await_event(done);
  download(res, out, 6);
  for (int i = 0; i < 6; ++i) assert_true(out[i] == x[i] + y[i]);
  destroy_buffer(res);
  destroy_buffer(bx);
  destroy_buffer(by);

  PJRT_LoadedExecutable* none = NULL;
  expect_error(deserialize("junk", 4, &none), "not a causeway serialized executable");
  assert_null(none);
  // Cut short: no longer the whole message.
  expect_error(deserialize(ser.serialized_bytes, ser.serialized_bytes_size / 2, &none),
               "serialized executable");
  ser.serialized_executable_deleter(ser.serialized_executable);
  cw_pjrt_test_executable_free((PJRT_Executable*)ser.executable);
  cw_pjrt_test_loaded_free(again);
  cw_pjrt_test_loaded_free(exe);
}

// DLPack's slots: an external reference reads the bytes into a host copy
// once, kept while referenced (and freed with the buffer: LeakSanitizer
// checks that); a view of host memory is refused as INVALID_ARGUMENT, the
// code jaxlib answers by copying.
static PJRT_Error* ext_ref(PJRT_Buffer* b, int delta) {
  if (delta > 0) {
    PJRT_Buffer_IncreaseExternalReferenceCount_Args a;
    INIT_ARGS(a);
    a.buffer = b;
    return api->PJRT_Buffer_IncreaseExternalReferenceCount(&a);
  }
  PJRT_Buffer_DecreaseExternalReferenceCount_Args a;
  INIT_ARGS(a);
  a.buffer = b;
  return api->PJRT_Buffer_DecreaseExternalReferenceCount(&a);
}

static PJRT_Error* ext_pointer(PJRT_Buffer* b, void** out) {
  PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args a;
  INIT_ARGS(a);
  a.buffer = b;
  PJRT_Error* e = api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&a);
  *out = a.device_memory_ptr;
  return e;
}

static int view_deleted;
static void view_on_delete(void* ptr, void* arg) {
  (void)ptr;
  (void)arg;
  view_deleted++;
}

static void test_external_references(void** state) {
  (void)state;
  PJRT_Device* const* devs;
  size_t n;
  get_devices(&devs, &n);
  float in[6] = {1.5f, -2, 3, 4, 5, 6};
  PJRT_Buffer* a = upload(devs[n - 1], in, 6);  // on the last worker
  OK(ext_ref(a, +1));
  void *p1 = NULL, *p2 = NULL;
  OK(ext_pointer(a, &p1));
  assert_non_null(p1);
  assert_memory_equal(p1, in, sizeof(in));
  OK(ext_ref(a, +1));
  OK(ext_pointer(a, &p2));
  assert_ptr_equal(p1, p2);  // one copy while referenced
  OK(ext_ref(a, -1));
  OK(ext_ref(a, -1));
  expect_error(ext_ref(a, -1), "holds no external reference");
  OK(ext_ref(a, +1));
  OK(ext_pointer(a, &p2));  // read again after the last release
  assert_memory_equal(p2, in, sizeof(in));
  // Deleted with a reference held: the copy stays readable.
  PJRT_Buffer_Delete_Args del;
  INIT_ARGS(del);
  del.buffer = a;
  OK(api->PJRT_Buffer_Delete(&del));
  OK(ext_pointer(a, &p1));
  assert_ptr_equal(p1, p2);
  assert_memory_equal(p1, in, sizeof(in));
  destroy_buffer(a);  // with a reference and a copy: both go with it

  PJRT_Buffer* d = upload(devs[0], in, 6);
  OK(api->PJRT_Buffer_Delete(&(PJRT_Buffer_Delete_Args){.struct_size =
                                                            sizeof(PJRT_Buffer_Delete_Args),
                                                        .buffer = d}));
  expect_error(ext_ref(d, +1), "deleted");
  expect_error(ext_pointer(d, &p1), "deleted");
  destroy_buffer(d);

  // A reference that cannot be served is not counted (jaxlib gives nothing
  // back when it fails, and a counted one kept the array from donation).
  int8_t s4[4] = {-8, -1, 0, 7};
  int64_t n4 = 4;
  PJRT_Buffer* packed = upload_raw(devs[0], PJRT_Buffer_Type_S4, s4, &n4, 1, NULL);
  expect_error(ext_ref(packed, +1), "packed there");
  expect_error(ext_ref(packed, -1), "holds no external reference");
  expect_error(ext_pointer(packed, &p1), "packed there");
  destroy_buffer(packed);

  int64_t dims[1] = {6};
  PJRT_Client_CreateViewOfDeviceBuffer_Args v;
  INIT_ARGS(v);
  v.client = client;
  v.device_buffer_ptr = in;
  v.dims = dims;
  v.num_dims = 1;
  v.element_type = PJRT_Buffer_Type_F32;
  v.device = devs[0];
  v.on_delete_callback = view_on_delete;
  PJRT_Error* e = api->PJRT_Client_CreateViewOfDeviceBuffer(&v);
  assert_non_null(e);
  PJRT_Error_GetCode_Args gc;
  INIT_ARGS(gc);
  gc.error = e;
  OK(api->PJRT_Error_GetCode(&gc));
  assert_int_equal(gc.code, PJRT_Error_Code_INVALID_ARGUMENT);
  expect_error(e, "cannot be a view of this process's memory");
  assert_null(v.buffer);
  assert_int_equal(view_deleted, 0);  // the caller's memory was never taken
}

static int teardown(void** state) {
  (void)state;
  PJRT_Client_Destroy_Args d;
  INIT_ARGS(d);
  d.client = client;
  PJRT_Error* e = api->PJRT_Client_Destroy(&d);
  return e ? -1 : 0;
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  if (!getenv("CAUSEWAY_BIN_DIR")) setenv("CAUSEWAY_BIN_DIR", CW_BIN_DIR, 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_upload_download_copy),
      cmocka_unit_test(test_strides_and_packed_types),
      cmocka_unit_test(test_async_host_to_device),
      cmocka_unit_test(test_compile_execute),
      cmocka_unit_test(test_chains_on_two_threads),
      cmocka_unit_test(test_compile_error_reaches_caller),
      cmocka_unit_test(test_serialize_and_load),
      cmocka_unit_test(test_external_references),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
