#include "cw_pjrt_test_util.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

const PJRT_Api* cw_pjrt_test_api;

void cw_pjrt_test_error_text(PJRT_Error* err, const char** out_msg, size_t* out_len) {
  PJRT_Error_Message_Args m;
  CW_PJRT_INIT_ARGS(m);
  m.error = err;
  cw_pjrt_test_api->PJRT_Error_Message(&m);
  *out_msg = m.message;
  *out_len = m.message_size;
}

PJRT_Error_Code cw_pjrt_test_error_code(PJRT_Error* err) {
  PJRT_Error_GetCode_Args g;
  CW_PJRT_INIT_ARGS(g);
  g.error = err;
  PJRT_Error* e2 = cw_pjrt_test_api->PJRT_Error_GetCode(&g);
  if (e2 != NULL) {
    cw_pjrt_test_error_free(e2);
    return PJRT_Error_Code_UNKNOWN;
  }
  return g.code;
}

void cw_pjrt_test_error_free(PJRT_Error* err) {
  PJRT_Error_Destroy_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.error = err;
  cw_pjrt_test_api->PJRT_Error_Destroy(&d);
}

void cw_pjrt_test_assert_ok(PJRT_Error* err, const char* what, const char* file, int line) {
  if (err == NULL) return;
  const char* msg;
  size_t len;
  cw_pjrt_test_error_text(err, &msg, &len);
  print_error("%s returned error %d: %.*s\n", what, (int)cw_pjrt_test_error_code(err), (int)len,
              msg);
  cw_pjrt_test_error_free(err);
  _fail(file, line);
}

const char* cw_pjrt_test_plugin_path(void) {
  const char* path = getenv("CAUSEWAY_PJRT_PLUGIN");
  if (path == NULL || path[0] == '\0') {
    printf("SKIP: no plugin (set CAUSEWAY_PJRT_PLUGIN)\n");
    return NULL;
  }
  return path;
}

int cw_pjrt_test_load(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    printf("dlopen(%s): %s\n", path, dlerror());
    return -1;
  }
  void* sym = dlsym(handle, CW_PJRT_GET_API_SYMBOL);
  if (sym == NULL) {
    printf("no %s in %s\n", CW_PJRT_GET_API_SYMBOL, path);
    return -1;
  }
  CW_PJRT_GetPjrtApi_Fn get_api;
  memcpy(&get_api, &sym, sizeof get_api);
  cw_pjrt_test_api = get_api();
  if (cw_pjrt_test_api == NULL) {
    printf("GetPjrtApi returned NULL\n");
    return -1;
  }
  return 0;
}

// Prints a failed call's error (taken) outside a test; returns -1.
static int cw__report(PJRT_Error* err, const char* what) {
  const char* msg;
  size_t len;
  cw_pjrt_test_error_text(err, &msg, &len);
  printf("%s: error %d: %.*s\n", what, (int)cw_pjrt_test_error_code(err), (int)len, msg);
  cw_pjrt_test_error_free(err);
  return -1;
}

int cw_pjrt_test_initialize(void) {
  PJRT_Plugin_Initialize_Args a;
  CW_PJRT_INIT_ARGS(a);
  PJRT_Error* e = cw_pjrt_test_api->PJRT_Plugin_Initialize(&a);
  return e != NULL ? cw__report(e, "PJRT_Plugin_Initialize") : 0;
}

PJRT_Client* cw_pjrt_test_create_client(int64_t cpu_devices) {
  PJRT_NamedValue opt;
  CW_PJRT_INIT_ARGS(opt);
  opt.name = "cpu_device_count";
  opt.name_size = strlen(opt.name);
  opt.type = PJRT_NamedValue_kInt64;
  opt.int64_value = cpu_devices;
  opt.value_size = 1;
  PJRT_Client_Create_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.create_options = &opt;
  a.num_options = 1;
  PJRT_Error* e = cw_pjrt_test_api->PJRT_Client_Create(&a);
  if (e != NULL) {
    cw__report(e, "PJRT_Client_Create");
    return NULL;
  }
  return a.client;
}

// Without asserts: a group setup reports failure by its return value.
static PJRT_Memory* cw__default_memory_or_null(PJRT_Device* dev) {
  PJRT_Device_DefaultMemory_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.device = dev;
  PJRT_Error* e = cw_pjrt_test_api->PJRT_Device_DefaultMemory(&a);
  if (e != NULL) {
    cw__report(e, "PJRT_Device_DefaultMemory");
    return NULL;
  }
  return a.memory;
}

int cw_pjrt_test_setup(void** state) {
  const char* path = cw_pjrt_test_plugin_path();
  if (path == NULL || cw_pjrt_test_load(path) != 0 || cw_pjrt_test_initialize() != 0) return -1;
  cw_pjrt_test_fixture_t* f = calloc(1, sizeof(*f));
  if (f == NULL) return -1;
  *state = f;
  f->client = cw_pjrt_test_create_client(4);
  if (f->client == NULL) return -1;
  PJRT_Client_Devices_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.client = f->client;
  PJRT_Error* e = cw_pjrt_test_api->PJRT_Client_Devices(&a);
  if (e != NULL) return cw__report(e, "PJRT_Client_Devices");
  f->num_devices = a.num_devices;
  for (size_t i = 0; i < a.num_devices && i < 8; i++) f->devices[i] = a.devices[i];
  if (f->num_devices < 2) {
    printf("the plugin gave %zu devices for 4 asked, 2 needed\n", f->num_devices);
    return -1;
  }
  f->memory0 = cw__default_memory_or_null(f->devices[0]);
  f->memory1 = cw__default_memory_or_null(f->devices[1]);
  return f->memory0 && f->memory1 ? 0 : -1;
}

int cw_pjrt_test_teardown(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  int rc = 0;
  if (f != NULL && f->client != NULL) {
    PJRT_Client_Destroy_Args a;
    CW_PJRT_INIT_ARGS(a);
    a.client = f->client;
    PJRT_Error* e = cw_pjrt_test_api->PJRT_Client_Destroy(&a);
    if (e != NULL) rc = cw__report(e, "PJRT_Client_Destroy");
  }
  free(f);
  return rc;
}

void cw_pjrt_test_event_free(PJRT_Event* ev) {
  if (ev == NULL) return;
  PJRT_Event_Destroy_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.event = ev;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Event_Destroy(&d));
}

void cw_pjrt_test_event_wait(PJRT_Event* ev) {
  assert_non_null(ev);
  PJRT_Event_Await_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.event = ev;
  PJRT_Error* e = cw_pjrt_test_api->PJRT_Event_Await(&a);
  cw_pjrt_test_event_free(ev);
  CW_PJRT_ASSERT_OK(e);
}

void cw_pjrt_test_buffer_free(PJRT_Buffer* b) {
  if (b == NULL) return;
  PJRT_Buffer_Destroy_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.buffer = b;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Buffer_Destroy(&d));
}

void cw_pjrt_test_loaded_free(PJRT_LoadedExecutable* e) {
  if (e == NULL) return;
  PJRT_LoadedExecutable_Destroy_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.executable = e;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_LoadedExecutable_Destroy(&d));
}

void cw_pjrt_test_executable_free(PJRT_Executable* e) {
  if (e == NULL) return;
  PJRT_Executable_Destroy_Args d;
  CW_PJRT_INIT_ARGS(d);
  d.executable = e;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Executable_Destroy(&d));
}

PJRT_Memory* cw_pjrt_test_default_memory(PJRT_Device* dev) {
  PJRT_Device_DefaultMemory_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.device = dev;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Device_DefaultMemory(&a));
  return a.memory;
}

int cw_pjrt_test_in_plugin_image(const void* p) {
  Dl_info info;
  Dl_info self;
  const void* anchor = (const void*)cw_pjrt_test_api;  // the table lives in the plugin
  if (p == NULL || dladdr(p, &info) == 0 || dladdr(anchor, &self) == 0) return 0;
  return info.dli_fbase == self.dli_fbase;
}

PJRT_Buffer* cw_pjrt_test_host_to_device(PJRT_Client* client, PJRT_Memory* memory,
                                         const void* data, PJRT_Buffer_Type type,
                                         const int64_t* dims, size_t num_dims,
                                         PJRT_HostBufferSemantics sem, PJRT_Event** out_done) {
  PJRT_Client_BufferFromHostBuffer_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.client = client;
  a.data = data;
  a.type = type;
  a.dims = dims;
  a.num_dims = num_dims;
  a.host_buffer_semantics = sem;
  a.device = NULL;
  a.memory = memory;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Client_BufferFromHostBuffer(&a));
  assert_non_null(a.buffer);
  if (out_done != NULL) {
    *out_done = a.done_with_host_buffer;
  } else {
    cw_pjrt_test_event_wait(a.done_with_host_buffer);
  }
  return a.buffer;
}

void cw_pjrt_test_device_to_host(PJRT_Buffer* b, void* dst, size_t size) {
  PJRT_Buffer_ToHostBuffer_Args q;
  CW_PJRT_INIT_ARGS(q);
  q.src = b;
  q.dst = NULL;  // a size query
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Buffer_ToHostBuffer(&q));
  cw_pjrt_test_event_free(q.event);
  assert_int_equal(q.dst_size, size);
  PJRT_Buffer_ToHostBuffer_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.src = b;
  a.dst = dst;
  a.dst_size = size;
  CW_PJRT_ASSERT_OK(cw_pjrt_test_api->PJRT_Buffer_ToHostBuffer(&a));
  cw_pjrt_test_event_wait(a.event);  // no event fails
}

PJRT_LoadedExecutable* cw_pjrt_test_compile(PJRT_Client* client, const char* mlir,
                                            const char* opts, size_t opts_size,
                                            PJRT_Error** out_err) {
  PJRT_Program prog;
  CW_PJRT_INIT_ARGS(prog);
  prog.code = (char*)mlir;  // the plugin only reads it
  prog.code_size = strlen(mlir);
  prog.format = "mlir";
  prog.format_size = 4;
  PJRT_Client_Compile_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.client = client;
  a.program = &prog;
  a.compile_options = opts;
  a.compile_options_size = opts_size;
  *out_err = cw_pjrt_test_api->PJRT_Client_Compile(&a);
  return a.executable;
}

PJRT_Buffer* cw_pjrt_test_run1(PJRT_LoadedExecutable* exe, PJRT_Buffer* in,
                               PJRT_Device* execute_device, PJRT_Error** out_err) {
  PJRT_ExecuteOptions opts;
  CW_PJRT_INIT_ARGS(opts);
  opts.launch_id = 7;
  PJRT_Buffer* args0[1] = {in};
  PJRT_Buffer* const* arg_lists[1] = {args0};
  PJRT_Buffer* outs0[1] = {NULL};
  PJRT_Buffer** out_lists[1] = {outs0};
  PJRT_Event* done[1] = {NULL};
  PJRT_LoadedExecutable_Execute_Args a;
  CW_PJRT_INIT_ARGS(a);
  a.executable = exe;
  a.options = &opts;
  a.argument_lists = arg_lists;
  a.num_devices = 1;
  a.num_args = 1;
  a.output_lists = out_lists;
  a.device_complete_events = done;
  a.execute_device = execute_device;
  *out_err = cw_pjrt_test_api->PJRT_LoadedExecutable_Execute(&a);
  if (*out_err != NULL) return NULL;
  cw_pjrt_test_event_wait(done[0]);  // no device_complete_event fails
  assert_non_null(outs0[0]);
  return outs0[0];
}
