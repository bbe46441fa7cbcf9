// Checks our PJRT ABI declarations (cw_pjrt_c_api.h) against a real plugin,
// part 2: calls with arguments and results. Buffers (host -> device -> host,
// events, copies, zero-copy aliasing), compile and the executable's metadata,
// execute, serialize and reload, and a compile error with its function table.
// pjrt_abi_table_test.c does the table, client, devices and memories. Skips
// (exit 77) without $CAUSEWAY_PJRT_PLUGIN; written for XLA's CPU plugin.
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_pjrt_c_api.h"
#include "cw_pjrt_test_util.h"

// Short names: these files make a call or two per line.
#define api cw_pjrt_test_api
#define INIT_ARGS CW_PJRT_INIT_ARGS
#define OK CW_PJRT_ASSERT_OK

static const char kAddModule[] =
    "module @m {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>\n"
    "    return %0 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

static const char kBrokenModule[] =
    "module @m {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "    %0 = stablehlo.frobnicate %arg0 : tensor<2x3xf32>\n"
    "    return %0 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

// xla.CompileOptionsProto { executable_build_options (3) {
//   num_replicas (4): 1, num_partitions (5): 1 } }
static const char kCompileOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

static const int64_t kDims[2] = {2, 3};
static const float kX[6] = {1.5f, -2.25f, 3.0f, 0.1f, -0.0f, 1e-30f};

// kX on device 0, its host buffer already released.
static PJRT_Buffer* upload_x(cw_pjrt_test_fixture_t* f) {
  return cw_pjrt_test_host_to_device(f->client, f->memory0, kX, PJRT_Buffer_Type_F32, kDims, 2,
                                     PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes,
                                     NULL);
}

static void wait_ready(PJRT_Buffer* b) {
  PJRT_Buffer_ReadyEvent_Args r;
  INIT_ARGS(r);
  r.buffer = b;
  OK(api->PJRT_Buffer_ReadyEvent(&r));
  cw_pjrt_test_event_wait(r.event);
}

// Fails the test with the plugin's error (taken), if any.
static void assert_no_error(PJRT_Error* e, const char* what) {
  if (e == NULL) return;
  const char* msg;
  size_t len;
  cw_pjrt_test_error_text(e, &msg, &len);
  print_error("%s: error %d: %.*s\n", what, (int)cw_pjrt_test_error_code(e), (int)len, msg);
  cw_pjrt_test_error_free(e);
  fail();
}

// The add module with num_replicas = num_partitions = 1.
static PJRT_LoadedExecutable* compile_add(cw_pjrt_test_fixture_t* f) {
  PJRT_Error* e = NULL;
  PJRT_LoadedExecutable* exe =
      cw_pjrt_test_compile(f->client, kAddModule, kCompileOptions, sizeof kCompileOptions, &e);
  assert_no_error(e, "compile with num_replicas=1, num_partitions=1 options");
  assert_non_null(exe);
  return exe;
}

static void assert_twice_x(PJRT_Buffer* y) {
  float back[6];
  cw_pjrt_test_device_to_host(y, back, sizeof back);
  for (int i = 0; i < 6; i++) assert_true(back[i] == 2.0f * kX[i]);
}

static void test_buffer_round_trip(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_Buffer* xbuf = upload_x(f);
  wait_ready(xbuf);
  PJRT_Buffer_Dimensions_Args d;
  INIT_ARGS(d);
  d.buffer = xbuf;
  OK(api->PJRT_Buffer_Dimensions(&d));
  assert_int_equal(d.num_dims, 2);
  assert_int_equal(d.dims[0], 2);
  assert_int_equal(d.dims[1], 3);
  PJRT_Buffer_ElementType_Args t;
  INIT_ARGS(t);
  t.buffer = xbuf;
  OK(api->PJRT_Buffer_ElementType(&t));
  assert_int_equal(t.type, PJRT_Buffer_Type_F32);
  PJRT_Buffer_OnDeviceSizeInBytes_Args sz;
  INIT_ARGS(sz);
  sz.buffer = xbuf;
  OK(api->PJRT_Buffer_OnDeviceSizeInBytes(&sz));
  assert_int_equal(sz.on_device_size_in_bytes, sizeof kX);
  PJRT_Buffer_Device_Args bd;
  INIT_ARGS(bd);
  bd.buffer = xbuf;
  OK(api->PJRT_Buffer_Device(&bd));
  assert_ptr_equal(bd.device, f->devices[0]);
  PJRT_Buffer_Memory_Args bm;
  INIT_ARGS(bm);
  bm.buffer = xbuf;
  OK(api->PJRT_Buffer_Memory(&bm));
  assert_ptr_equal(bm.memory, f->memory0);
  PJRT_Buffer_IsOnCpu_Args oc;
  INIT_ARGS(oc);
  oc.buffer = xbuf;
  OK(api->PJRT_Buffer_IsOnCpu(&oc));
  print_message("  Buffer_IsOnCpu = %d\n", (int)oc.is_on_cpu);
  float back[6];
  memset(back, 0xAB, sizeof back);
  cw_pjrt_test_device_to_host(xbuf, back, sizeof back);
  assert_memory_equal(back, kX, sizeof kX);  // bit-exact
  cw_pjrt_test_buffer_free(xbuf);
}

static atomic_int g_on_ready_error;

static void on_ready(PJRT_Error* error, void* user_arg) {
  if (error != NULL) {
    atomic_store(&g_on_ready_error, 1);
    cw_pjrt_test_error_free(error);
  }
  atomic_fetch_add((atomic_int*)user_arg, 1);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

// Event_OnReady on a ready event: the callback fires exactly once.
static void test_event_on_ready(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_Buffer* xbuf = upload_x(f);
  PJRT_Buffer_ReadyEvent_Args r;
  INIT_ARGS(r);
  r.buffer = xbuf;
  OK(api->PJRT_Buffer_ReadyEvent(&r));
  atomic_int calls;
  atomic_init(&calls, 0);
  PJRT_Event_OnReady_Args o;
  INIT_ARGS(o);
  o.event = r.event;
  o.callback = on_ready;
  o.user_arg = &calls;
  OK(api->PJRT_Event_OnReady(&o));
  for (int i = 0; i < 500 && atomic_load(&calls) == 0; i++) sleep_ms(10);
  assert_int_equal(atomic_load(&calls), 1);
  assert_int_equal(atomic_load(&g_on_ready_error), 0);
  PJRT_Event_IsReady_Args ir;
  INIT_ARGS(ir);
  ir.event = r.event;
  OK(api->PJRT_Event_IsReady(&ir));
  assert_true(ir.is_ready);
  PJRT_Event_Error_Args ee;
  INIT_ARGS(ee);
  ee.event = r.event;
  assert_null(api->PJRT_Event_Error(&ee));  // a ready event carries no error
  cw_pjrt_test_event_free(r.event);
  cw_pjrt_test_buffer_free(xbuf);
}

// Copy to device 1 through its memory.
static void test_copy_to_memory(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_Buffer* xbuf = upload_x(f);
  PJRT_Buffer_CopyToMemory_Args c;
  INIT_ARGS(c);
  c.buffer = xbuf;
  c.dst_memory = f->memory1;
  OK(api->PJRT_Buffer_CopyToMemory(&c));
  PJRT_Buffer_Device_Args cd;
  INIT_ARGS(cd);
  cd.buffer = c.dst_buffer;
  OK(api->PJRT_Buffer_Device(&cd));
  assert_ptr_equal(cd.device, f->devices[1]);
  float back1[6];
  cw_pjrt_test_device_to_host(c.dst_buffer, back1, sizeof back1);
  assert_memory_equal(back1, kX, sizeof kX);  // bit-exact
  cw_pjrt_test_buffer_free(c.dst_buffer);
  cw_pjrt_test_buffer_free(xbuf);
}

// kImmutableZeroCopy on CPU: does the buffer alias the host memory? With a
// 64-byte aligned pointer, the device pointer and the contents must agree.
static void test_zero_copy_aliasing(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  for (int aligned = 1; aligned >= 0; aligned--) {
    float* host = aligned_alloc(64, 128);
    assert_non_null(host);
    float* data = aligned ? host : host + 1;  // +4 bytes: misaligned
    for (int i = 0; i < 6; i++) data[i] = (float)i;
    PJRT_Event* done = NULL;
    PJRT_Buffer* b = cw_pjrt_test_host_to_device(f->client, f->memory0, data,
                                                 PJRT_Buffer_Type_F32, kDims, 2,
                                                 PJRT_HostBufferSemantics_kImmutableZeroCopy,
                                                 &done);
    wait_ready(b);
    PJRT_Buffer_UnsafePointer_Args up;
    INIT_ARGS(up);
    up.buffer = b;
    PJRT_Error* ue = api->PJRT_Buffer_UnsafePointer(&up);
    int same_ptr = ue == NULL && up.buffer_pointer == (uintptr_t)data;
    if (ue != NULL) cw_pjrt_test_error_free(ue);
    data[0] = 42.0f;  // breaks the promise on purpose, to observe
    float back[6];
    cw_pjrt_test_device_to_host(b, back, sizeof back);
    int aliased = back[0] == 42.0f;
    print_message("  kImmutableZeroCopy, %s host pointer: buffer %s host memory "
                  "(device pointer %s host pointer)\n",
                  aligned ? "64-byte aligned" : "4-byte aligned",
                  aliased ? "ALIASES" : "copies", same_ptr ? "==" : "!=");
    if (aligned) assert_int_equal(aliased, same_ptr);  // pointer and contents agree
    cw_pjrt_test_buffer_free(b);
    if (done != NULL) cw_pjrt_test_event_wait(done);
    free(host);
  }
}

// Child mode: compile with empty compile options and report through the
// exit status (0 compiled, 2 error, 3 no client). XLA's CPU plugin may abort
// here, which is why this runs in its own process.
static int probe_empty_options(const char* path) {
  if (cw_pjrt_test_load(path) != 0 || cw_pjrt_test_initialize() != 0) return 3;
  PJRT_Client* client = cw_pjrt_test_create_client(4);
  if (client == NULL) return 3;
  PJRT_Error* e = NULL;
  cw_pjrt_test_compile(client, kAddModule, NULL, 0, &e);
  if (e != NULL) {
    const char* msg;
    size_t len;
    cw_pjrt_test_error_text(e, &msg, &len);
    printf("  [child] empty options: error %d: %.*s\n", (int)cw_pjrt_test_error_code(e),
           (int)len, msg);
    return 2;
  }
  return 0;  // the process ends: nothing to free
}

// Runs this binary again in child mode; describes what happened.
static const char* run_empty_options_child(const char* self, const char* path) {
  pid_t pid = fork();
  if (pid < 0) return "could not fork";
  if (pid == 0) {
    execl(self, self, "--probe-empty-options", path, (char*)NULL);
    _exit(4);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) {
    static char buf[64];
    snprintf(buf, sizeof buf, "the plugin ABORTED the process (signal %d)", WTERMSIG(status));
    return buf;
  }
  switch (WEXITSTATUS(status)) {
    case 0:
      return "compiles";
    case 2:
      return "returns an error";
    default:
      return "child could not run";
  }
}

// What a compiled executable says about itself.
static void test_compile_and_metadata(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  print_message("  compile with EMPTY compile options (separate process): %s\n",
                run_empty_options_child("/proc/self/exe", cw_pjrt_test_plugin_path()));
  PJRT_LoadedExecutable* exe = compile_add(f);
  PJRT_LoadedExecutable_AddressableDevices_Args ad;
  INIT_ARGS(ad);
  ad.executable = exe;
  OK(api->PJRT_LoadedExecutable_AddressableDevices(&ad));
  assert_int_equal(ad.num_addressable_devices, 1);
  assert_ptr_equal(ad.addressable_devices[0], f->devices[0]);
  PJRT_LoadedExecutable_GetExecutable_Args ge;
  INIT_ARGS(ge);
  ge.loaded_executable = exe;
  OK(api->PJRT_LoadedExecutable_GetExecutable(&ge));
  PJRT_Executable* unloaded = ge.executable;
  PJRT_Executable_NumOutputs_Args no;
  INIT_ARGS(no);
  no.executable = unloaded;
  OK(api->PJRT_Executable_NumOutputs(&no));
  assert_int_equal(no.num_outputs, 1);
  PJRT_Executable_Name_Args nm;
  INIT_ARGS(nm);
  nm.executable = unloaded;
  OK(api->PJRT_Executable_Name(&nm));
  print_message("  executable name \"%.*s\"\n", (int)nm.executable_name_size, nm.executable_name);
  PJRT_Executable_NumReplicas_Args nr;
  INIT_ARGS(nr);
  nr.executable = unloaded;
  OK(api->PJRT_Executable_NumReplicas(&nr));
  PJRT_Executable_NumPartitions_Args np;
  INIT_ARGS(np);
  np.executable = unloaded;
  OK(api->PJRT_Executable_NumPartitions(&np));
  assert_int_equal(nr.num_replicas, 1);
  assert_int_equal(np.num_partitions, 1);
  PJRT_Executable_OutputElementTypes_Args ot;
  INIT_ARGS(ot);
  ot.executable = unloaded;
  OK(api->PJRT_Executable_OutputElementTypes(&ot));
  assert_int_equal(ot.num_output_types, 1);
  assert_int_equal(ot.output_types[0], PJRT_Buffer_Type_F32);
  PJRT_Executable_OutputDimensions_Args od;
  INIT_ARGS(od);
  od.executable = unloaded;
  OK(api->PJRT_Executable_OutputDimensions(&od));
  assert_int_equal(od.num_outputs, 1);
  assert_int_equal(od.dim_sizes[0], 2);
  assert_int_equal(od.dims[0], 2);
  assert_int_equal(od.dims[1], 3);
  PJRT_Executable_Fingerprint_Args fp;
  INIT_ARGS(fp);
  fp.executable = unloaded;
  PJRT_Error* fe = api->PJRT_Executable_Fingerprint(&fp);
  if (fe == NULL) {
    print_message("  fingerprint %zu bytes\n", fp.executable_fingerprint_size);
  } else {
    print_message("  fingerprint: error %d\n", (int)cw_pjrt_test_error_code(fe));
    cw_pjrt_test_error_free(fe);
  }
  cw_pjrt_test_executable_free(unloaded);
  cw_pjrt_test_loaded_free(exe);
}

static void test_execute(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_LoadedExecutable* exe = compile_add(f);
  PJRT_Buffer* xbuf = upload_x(f);
  PJRT_Error* e = NULL;
  PJRT_Buffer* y = cw_pjrt_test_run1(exe, xbuf, NULL, &e);
  assert_no_error(e, "execute");
  assert_twice_x(y);
  PJRT_Buffer_Device_Args bd;
  INIT_ARGS(bd);
  bd.buffer = y;
  OK(api->PJRT_Buffer_Device(&bd));
  assert_ptr_equal(bd.device, f->devices[0]);
  cw_pjrt_test_buffer_free(y);
  // Same executable, explicit execute_device (portable execution): noted.
  y = cw_pjrt_test_run1(exe, xbuf, f->devices[0], &e);
  if (e != NULL) {
    const char* msg;
    size_t len;
    cw_pjrt_test_error_text(e, &msg, &len);
    print_message("  note: execute with execute_device set: error %d: %.*s\n",
                  (int)cw_pjrt_test_error_code(e), (int)len, msg);
    cw_pjrt_test_error_free(e);
  } else {
    print_message("  execute with execute_device = device 0: ok\n");
    cw_pjrt_test_buffer_free(y);
  }
  cw_pjrt_test_buffer_free(xbuf);
  cw_pjrt_test_loaded_free(exe);
}

static void test_serialize_and_reload(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_LoadedExecutable* exe = compile_add(f);
  PJRT_LoadedExecutable_GetExecutable_Args ge;
  INIT_ARGS(ge);
  ge.loaded_executable = exe;
  OK(api->PJRT_LoadedExecutable_GetExecutable(&ge));
  PJRT_Executable_Serialize_Args s;
  INIT_ARGS(s);
  s.executable = ge.executable;
  OK(api->PJRT_Executable_Serialize(&s));
  print_message("  serialized executable: %zu bytes\n", s.serialized_bytes_size);
  assert_non_null(s.serialized_bytes);
  assert_true(s.serialized_bytes_size > 0);
  assert_non_null(s.serialized_executable_deleter);
  PJRT_Executable_DeserializeAndLoad_Args d;
  INIT_ARGS(d);
  d.client = f->client;
  d.serialized_executable = s.serialized_bytes;
  d.serialized_executable_size = s.serialized_bytes_size;
  OK(api->PJRT_Executable_DeserializeAndLoad(&d));
  s.serialized_executable_deleter(s.serialized_executable);
  PJRT_Buffer* xbuf = upload_x(f);
  PJRT_Error* e = NULL;
  PJRT_Buffer* y = cw_pjrt_test_run1(d.loaded_executable, xbuf, NULL, &e);
  assert_no_error(e, "execute deserialized");
  assert_twice_x(y);
  cw_pjrt_test_buffer_free(y);
  cw_pjrt_test_buffer_free(xbuf);
  cw_pjrt_test_loaded_free(d.loaded_executable);
  cw_pjrt_test_executable_free(ge.executable);
  cw_pjrt_test_loaded_free(exe);
}

static int g_payloads;
static void count_payload(const char* key, size_t key_size, const char* value,
                          size_t value_size, void* user_arg) {
  print_message("  error payload: %.*s (%zu bytes)\n", (int)key_size, key, value_size);
  g_payloads++;
}

// A module that does not parse: an error with a code, a message, payloads,
// and a function table that agrees with the API's slots.
static void test_compile_error(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_Error* e = NULL;
  PJRT_LoadedExecutable* bad = cw_pjrt_test_compile(f->client, kBrokenModule, kCompileOptions,
                                                    sizeof kCompileOptions, &e);
  cw_pjrt_test_loaded_free(bad);
  assert_non_null(e);  // the broken module must not compile
  const char* msg;
  size_t len;
  cw_pjrt_test_error_text(e, &msg, &len);
  PJRT_Error_Code code = cw_pjrt_test_error_code(e);
  print_message("  broken module: code %d, message: %.*s\n", (int)code, (int)len, msg);
  assert_true(code == PJRT_Error_Code_INVALID_ARGUMENT || code == PJRT_Error_Code_UNKNOWN ||
              code == PJRT_Error_Code_INTERNAL);
  assert_true(len > 0);
  PJRT_Error_ForEachPayload_Args fe;
  INIT_ARGS(fe);
  fe.error = e;
  fe.visitor = count_payload;
  OK(api->PJRT_Error_ForEachPayload(&fe));
  print_message("  broken module error carries %d payloads\n", g_payloads);
  const PJRT_Error_FunctionTable* vt = e->vtable;
  if (cw_pjrt_test_in_plugin_image(vt)) {
    print_message("  PJRT_Error vtable: struct_size %zu instance_size %zu\n", vt->struct_size,
                  vt->instance_size);
    assert_int_equal(vt->struct_size,
                     CW_PJRT_STRUCT_SIZE(PJRT_Error_FunctionTable, for_each_payload));
    if (vt->message != NULL && vt->get_code != NULL) {
      const char* m2 = NULL;
      size_t l2 = 0;
      vt->message(e, &m2, &l2);
      assert_int_equal(l2, len);
      assert_memory_equal(m2, msg, len);
      assert_int_equal(vt->get_code(e), code);
    }
  } else {
    print_message("  note: PJRT_Error does not start with a vtable in the plugin image (%p)\n",
                  (const void*)vt);
  }
  cw_pjrt_test_error_free(e);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 3 && strcmp(argv[1], "--probe-empty-options") == 0) {
    return probe_empty_options(argv[2]);
  }
  if (cw_pjrt_test_plugin_path() == NULL) return CW_PJRT_TEST_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffer_round_trip),
      cmocka_unit_test(test_event_on_ready),
      cmocka_unit_test(test_copy_to_memory),
      cmocka_unit_test(test_zero_copy_aliasing),
      cmocka_unit_test(test_compile_and_metadata),
      cmocka_unit_test(test_execute),
      cmocka_unit_test(test_serialize_and_reload),
      cmocka_unit_test(test_compile_error),
  };
  return cmocka_run_group_tests(tests, cw_pjrt_test_setup, cw_pjrt_test_teardown);
}
