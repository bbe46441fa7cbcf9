/*
 * Checks our PJRT ABI declarations (cw_pjrt_c_api.h) against a real plugin.
 *
 * Usage: pjrt_abi_test [plugin.so]   (or set CAUSEWAY_PJRT_PLUGIN)
 * Exit status: 0 all checks passed, 1 some failed, 77 no plugin given (skip).
 *
 * Written for XLA's CPU plugin: it asks for 4 CPU devices, compiles a small
 * StableHLO module, runs it, serializes and reloads it, and probes the
 * behaviours the causeway plugin and worker depend on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cw_pjrt_c_api.h"

/* ------------------------------------------------------------------------ */
/* Tiny check framework                                                     */
/* ------------------------------------------------------------------------ */

static int g_passed;
static int g_failed;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (cond) {                                           \
      g_passed++;                                         \
    } else {                                              \
      g_failed++;                                         \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                \
      printf("\n");                                       \
    }                                                     \
  } while (0)

static const PJRT_Api* api;
static void* g_plugin_handle;

/* Zero a struct and set its struct_size to the full size we know. */
#define INIT_ARGS(var) \
  do {                 \
    memset(&(var), 0, sizeof(var)); \
    (var).struct_size = sizeof(var); \
  } while (0)

static void error_text(PJRT_Error* err, const char** msg, size_t* len) {
  PJRT_Error_Message_Args m;
  INIT_ARGS(m);
  m.error = err;
  api->PJRT_Error_Message(&m);
  *msg = m.message;
  *len = m.message_size;
}

static PJRT_Error_Code error_code(PJRT_Error* err) {
  PJRT_Error_GetCode_Args g;
  INIT_ARGS(g);
  g.error = err;
  PJRT_Error* e2 = api->PJRT_Error_GetCode(&g);
  if (e2 != NULL) {
    PJRT_Error_Destroy_Args d;
    INIT_ARGS(d);
    d.error = e2;
    api->PJRT_Error_Destroy(&d);
    return PJRT_Error_Code_UNKNOWN;
  }
  return g.code;
}

static void error_free(PJRT_Error* err) {
  PJRT_Error_Destroy_Args d;
  INIT_ARGS(d);
  d.error = err;
  api->PJRT_Error_Destroy(&d);
}

/* True when `err` is NULL; otherwise reports it as a failure and frees it. */
static int ok_at(PJRT_Error* err, const char* what, int line) {
  if (err == NULL) {
    g_passed++;
    return 1;
  }
  const char* msg;
  size_t len;
  error_text(err, &msg, &len);
  g_failed++;
  printf("FAIL line %d: %s returned error %d: %.*s\n", line, what,
         (int)error_code(err), (int)len, msg);
  error_free(err);
  return 0;
}
#define OK(call) ok_at((call), #call, __LINE__)

static void event_free(PJRT_Event* ev) {
  if (ev == NULL) return;
  PJRT_Event_Destroy_Args d;
  INIT_ARGS(d);
  d.event = ev;
  OK(api->PJRT_Event_Destroy(&d));
}

/* Awaits and destroys `ev`; returns 1 when the event succeeded. */
static int event_wait(PJRT_Event* ev, const char* what) {
  if (ev == NULL) {
    printf("FAIL %s: no event\n", what);
    g_failed++;
    return 0;
  }
  PJRT_Event_Await_Args a;
  INIT_ARGS(a);
  a.event = ev;
  int good = ok_at(api->PJRT_Event_Await(&a), what, __LINE__);
  event_free(ev);
  return good;
}

static void buffer_free(PJRT_Buffer* b) {
  if (b == NULL) return;
  PJRT_Buffer_Destroy_Args d;
  INIT_ARGS(d);
  d.buffer = b;
  OK(api->PJRT_Buffer_Destroy(&d));
}

static void loaded_free(PJRT_LoadedExecutable* e) {
  if (e == NULL) return;
  PJRT_LoadedExecutable_Destroy_Args d;
  INIT_ARGS(d);
  d.executable = e;
  OK(api->PJRT_LoadedExecutable_Destroy(&d));
}

static void executable_free(PJRT_Executable* e) {
  if (e == NULL) return;
  PJRT_Executable_Destroy_Args d;
  INIT_ARGS(d);
  d.executable = e;
  OK(api->PJRT_Executable_Destroy(&d));
}

/* Does `p` lie inside the plugin's loaded image? Used before following the
 * vtable pointers of PJRT_Error and PJRT_Memory. */
static int in_plugin_image(const void* p) {
  Dl_info info;
  Dl_info self;
  const void* anchor = (const void*)api; /* the table lives in the plugin */
  if (p == NULL || dladdr(p, &info) == 0 || dladdr(anchor, &self) == 0) {
    return 0;
  }
  return info.dli_fbase == self.dli_fbase;
}

/* ------------------------------------------------------------------------ */
/* Helpers built on the API                                                 */
/* ------------------------------------------------------------------------ */

static PJRT_Buffer* host_to_device(PJRT_Client* client, PJRT_Memory* memory,
                                   const void* data, PJRT_Buffer_Type type,
                                   const int64_t* dims, size_t num_dims,
                                   PJRT_HostBufferSemantics sem,
                                   PJRT_Event** out_done) {
  PJRT_Client_BufferFromHostBuffer_Args a;
  INIT_ARGS(a);
  a.client = client;
  a.data = data;
  a.type = type;
  a.dims = dims;
  a.num_dims = num_dims;
  a.host_buffer_semantics = sem;
  a.device = NULL;
  a.memory = memory;
  if (!OK(api->PJRT_Client_BufferFromHostBuffer(&a))) return NULL;
  CHECK(a.buffer != NULL, "no buffer returned");
  if (out_done != NULL) {
    *out_done = a.done_with_host_buffer;
  } else {
    event_wait(a.done_with_host_buffer, "done_with_host_buffer");
  }
  return a.buffer;
}

static int device_to_host(PJRT_Buffer* b, void* dst, size_t size) {
  PJRT_Buffer_ToHostBuffer_Args q;
  INIT_ARGS(q);
  q.src = b;
  q.dst = NULL; /* size query */
  if (!OK(api->PJRT_Buffer_ToHostBuffer(&q))) return 0;
  CHECK(q.dst_size == size, "ToHostBuffer size query gave %zu, want %zu",
        q.dst_size, size);
  if (q.event != NULL) event_free(q.event);

  PJRT_Buffer_ToHostBuffer_Args a;
  INIT_ARGS(a);
  a.src = b;
  a.dst = dst;
  a.dst_size = size;
  if (!OK(api->PJRT_Buffer_ToHostBuffer(&a))) return 0;
  CHECK(a.event != NULL, "ToHostBuffer returned no event");
  return event_wait(a.event, "ToHostBuffer event");
}

static PJRT_Memory* default_memory(PJRT_Device* dev) {
  PJRT_Device_DefaultMemory_Args a;
  INIT_ARGS(a);
  a.device = dev;
  if (!OK(api->PJRT_Device_DefaultMemory(&a))) return NULL;
  return a.memory;
}

static PJRT_LoadedExecutable* compile(PJRT_Client* client, const char* mlir,
                                      const char* opts, size_t opts_size,
                                      PJRT_Error** out_err) {
  PJRT_Program prog;
  INIT_ARGS(prog);
  prog.code = (char*)mlir; /* the plugin only reads it */
  prog.code_size = strlen(mlir);
  prog.format = "mlir";
  prog.format_size = 4;
  PJRT_Client_Compile_Args a;
  INIT_ARGS(a);
  a.client = client;
  a.program = &prog;
  a.compile_options = opts;
  a.compile_options_size = opts_size;
  *out_err = api->PJRT_Client_Compile(&a);
  return a.executable;
}

/* Runs a one-input, one-output executable; returns the output buffer. */
static PJRT_Buffer* run1(PJRT_LoadedExecutable* exe, PJRT_Buffer* in,
                         PJRT_Device* execute_device, PJRT_Error** out_err) {
  PJRT_ExecuteOptions opts;
  INIT_ARGS(opts);
  opts.launch_id = 7;
  PJRT_Buffer* args0[1] = {in};
  PJRT_Buffer* const* arg_lists[1] = {args0};
  PJRT_Buffer* outs0[1] = {NULL};
  PJRT_Buffer** out_lists[1] = {outs0};
  PJRT_Event* done[1] = {NULL};
  PJRT_LoadedExecutable_Execute_Args a;
  INIT_ARGS(a);
  a.executable = exe;
  a.options = &opts;
  a.argument_lists = arg_lists;
  a.num_devices = 1;
  a.num_args = 1;
  a.output_lists = out_lists;
  a.device_complete_events = done;
  a.execute_device = execute_device;
  *out_err = api->PJRT_LoadedExecutable_Execute(&a);
  if (*out_err != NULL) return NULL;
  CHECK(done[0] != NULL, "no device_complete_event");
  event_wait(done[0], "device_complete_event");
  CHECK(outs0[0] != NULL, "no output buffer");
  return outs0[0];
}

static atomic_int g_on_ready_error;

static void on_ready(PJRT_Error* error, void* user_arg) {
  if (error != NULL) {
    atomic_store(&g_on_ready_error, 1);
    error_free(error);
  }
  atomic_fetch_add((atomic_int*)user_arg, 1);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int g_payloads;
static void count_payload(const char* key, size_t key_size, const char* value,
                          size_t value_size, void* user_arg) {
  (void)value;
  (void)user_arg;
  printf("  error payload: %.*s (%zu bytes)\n", (int)key_size, key, value_size);
  g_payloads++;
}

/* dlopens the plugin and fetches its table into `api`. */
static int load_plugin(const char* path) {
  g_plugin_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (g_plugin_handle == NULL) {
    printf("FAIL dlopen(%s): %s\n", path, dlerror());
    return 0;
  }
  void* sym = dlsym(g_plugin_handle, CW_PJRT_GET_API_SYMBOL);
  if (sym == NULL) {
    printf("FAIL no %s in %s\n", CW_PJRT_GET_API_SYMBOL, path);
    return 0;
  }
  CW_PJRT_GetPjrtApi_Fn get_api;
  memcpy(&get_api, &sym, sizeof get_api);
  api = get_api();
  if (api == NULL) {
    printf("FAIL GetPjrtApi returned NULL\n");
    return 0;
  }
  return 1;
}

static void initialize_plugin(void) {
  PJRT_Plugin_Initialize_Args a;
  INIT_ARGS(a);
  OK(api->PJRT_Plugin_Initialize(&a));
}

static PJRT_Client* create_client(int64_t cpu_devices) {
  PJRT_NamedValue opt;
  INIT_ARGS(opt);
  opt.name = "cpu_device_count";
  opt.name_size = strlen(opt.name);
  opt.type = PJRT_NamedValue_kInt64;
  opt.int64_value = cpu_devices;
  opt.value_size = 1;
  PJRT_Client_Create_Args a;
  INIT_ARGS(a);
  a.create_options = &opt;
  a.num_options = 1;
  if (!OK(api->PJRT_Client_Create(&a))) return NULL;
  return a.client;
}

/* ------------------------------------------------------------------------ */
/* The test                                                                 */
/* ------------------------------------------------------------------------ */

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

/* xla.CompileOptionsProto { executable_build_options (3) {
 *   num_replicas (4): 1, num_partitions (5): 1 } } */
static const char kCompileOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

/* Child mode: compile with empty compile options and report through the
 * exit status (0 compiled, 2 error). XLA's CPU plugin may abort here, which
 * is why this runs in its own process. */
static int probe_empty_options(const char* path) {
  if (!load_plugin(path)) return 3;
  initialize_plugin();
  PJRT_Client* client = create_client(4);
  if (client == NULL) return 3;
  PJRT_Error* e = NULL;
  PJRT_LoadedExecutable* exe = compile(client, kAddModule, NULL, 0, &e);
  if (e != NULL) {
    const char* msg;
    size_t len;
    error_text(e, &msg, &len);
    printf("  [child] empty options: error %d: %.*s\n", (int)error_code(e),
           (int)len, msg);
    return 2;
  }
  loaded_free(exe);
  return 0;
}

/* Runs this binary again in child mode; describes what happened. */
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
    snprintf(buf, sizeof buf, "the plugin ABORTED the process (signal %d)",
             WTERMSIG(status));
    return buf;
  }
  switch (WEXITSTATUS(status)) {
    case 0: return "compiles";
    case 2: return "returns an error";
    default: return "child could not run";
  }
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 3 && strcmp(argv[1], "--probe-empty-options") == 0) {
    return probe_empty_options(argv[2]);
  }
  const char* path = argc > 1 ? argv[1] : getenv("CAUSEWAY_PJRT_PLUGIN");
  if (path == NULL || path[0] == '\0') {
    printf("SKIP: no plugin (pass a path or set CAUSEWAY_PJRT_PLUGIN)\n");
    return 77;
  }

  if (!load_plugin(path)) {
    printf("0 passed, 1 failed\n");
    return 1;
  }
  printf("plugin %s: PJRT_Api struct_size %zu, version %d.%d\n", path,
         api->struct_size, api->pjrt_api_version.major_version,
         api->pjrt_api_version.minor_version);
  CHECK(api->struct_size == sizeof(PJRT_Api), "struct_size %zu vs ours %zu",
        api->struct_size, sizeof(PJRT_Api));
  CHECK(api->pjrt_api_version.major_version == CW_PJRT_API_MAJOR, "major");
  CHECK(api->pjrt_api_version.minor_version == CW_PJRT_API_MINOR, "minor %d",
        api->pjrt_api_version.minor_version);
  CHECK(api->pjrt_api_version.struct_size ==
            CW_PJRT_STRUCT_SIZE(PJRT_Api_Version, minor_version),
        "PJRT_Api_Version.struct_size %zu", api->pjrt_api_version.struct_size);
  {
    /* Every slot the plugin knows about should be filled on XLA's plugin. */
    int nulls = 0;
    size_t n = (api->struct_size - CW_PJRT_API_SLOT_OFFSET(0)) / sizeof(void*);
    for (size_t i = 0; i < n && i < CW_PJRT_API_NUM_SLOTS; i++) {
      void* slot;
      memcpy(&slot, (const char*)api + CW_PJRT_API_SLOT_OFFSET(i), sizeof slot);
      if (slot == NULL) {
        printf("  note: slot %zu is NULL\n", i);
        nulls++;
      }
    }
    printf("  %zu slots, %d NULL\n", n, nulls);
    int ext = 0;
    for (const PJRT_Extension_Base* e = api->extension_start; e && ext < 64;
         e = e->next, ext++) {
      printf("  extension type %d (struct_size %zu)\n", (int)e->type,
             e->struct_size);
    }
  }

  /* --- plugin ---------------------------------------------------------- */
  initialize_plugin();
  {
    PJRT_Plugin_Attributes_Args a;
    INIT_ARGS(a);
    if (OK(api->PJRT_Plugin_Attributes(&a))) {
      int found = 0;
      for (size_t i = 0; i < a.num_attributes; i++) {
        const PJRT_NamedValue* v = &a.attributes[i];
        printf("  plugin attribute %.*s type %d", (int)v->name_size, v->name,
               (int)v->type);
        if (v->type == PJRT_NamedValue_kInt64List) {
          printf(" = [");
          for (size_t k = 0; k < v->value_size; k++) {
            printf("%s%lld", k ? ", " : "", (long long)v->int64_array_value[k]);
          }
          printf("]");
        } else if (v->type == PJRT_NamedValue_kString) {
          printf(" = \"%.*s\"", (int)v->value_size, v->string_value);
        } else if (v->type == PJRT_NamedValue_kInt64) {
          printf(" = %lld", (long long)v->int64_value);
        }
        printf("\n");
        if (v->name_size == strlen("stablehlo_current_version") &&
            memcmp(v->name, "stablehlo_current_version", v->name_size) == 0) {
          found = 1;
          CHECK(v->type == PJRT_NamedValue_kInt64List && v->value_size == 3,
                "stablehlo_current_version type %d size %zu", (int)v->type,
                v->value_size);
        }
      }
      CHECK(found, "no stablehlo_current_version attribute");
    }
  }

  /* --- client ---------------------------------------------------------- */
  PJRT_Client* client = create_client(4);
  if (client == NULL) {
    printf("%d passed, %d failed\n", g_passed, g_failed + 1);
    return 1;
  }
  {
    PJRT_Client_PlatformName_Args a;
    INIT_ARGS(a);
    a.client = client;
    if (OK(api->PJRT_Client_PlatformName(&a))) {
      printf("  platform name \"%.*s\"\n", (int)a.platform_name_size,
             a.platform_name);
      CHECK(a.platform_name_size == 3 && memcmp(a.platform_name, "cpu", 3) == 0,
            "platform name");
    }
    PJRT_Client_PlatformVersion_Args v;
    INIT_ARGS(v);
    v.client = client;
    if (OK(api->PJRT_Client_PlatformVersion(&v))) {
      printf("  platform version \"%.*s\"\n", (int)v.platform_version_size,
             v.platform_version);
    }
    PJRT_Client_ProcessIndex_Args p;
    INIT_ARGS(p);
    p.client = client;
    if (OK(api->PJRT_Client_ProcessIndex(&p))) {
      CHECK(p.process_index == 0, "process index %d", p.process_index);
    }
  }

  /* --- devices and memories ------------------------------------------- */
  PJRT_Device* devices[8] = {NULL};
  size_t num_devices = 0;
  {
    PJRT_Client_Devices_Args a;
    INIT_ARGS(a);
    a.client = client;
    if (OK(api->PJRT_Client_Devices(&a))) {
      num_devices = a.num_devices;
      CHECK(a.num_devices == 4, "num_devices %zu", a.num_devices);
      for (size_t i = 0; i < a.num_devices && i < 8; i++) {
        devices[i] = a.devices[i];
      }
    }
    PJRT_Client_AddressableDevices_Args b;
    INIT_ARGS(b);
    b.client = client;
    if (OK(api->PJRT_Client_AddressableDevices(&b))) {
      CHECK(b.num_addressable_devices == 4, "addressable %zu",
            b.num_addressable_devices);
    }
  }
  if (num_devices < 2) {
    printf("%d passed, %d failed\n", g_passed, g_failed + 1);
    return 1;
  }
  for (size_t i = 0; i < num_devices && i < 8; i++) {
    PJRT_Device_GetDescription_Args g;
    INIT_ARGS(g);
    g.device = devices[i];
    if (!OK(api->PJRT_Device_GetDescription(&g))) continue;
    PJRT_DeviceDescription_Id_Args id;
    INIT_ARGS(id);
    id.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_Id(&id));
    CHECK(id.id == (int)i, "device %zu has id %d", i, id.id);
    PJRT_DeviceDescription_Kind_Args k;
    INIT_ARGS(k);
    k.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_Kind(&k));
    PJRT_DeviceDescription_ProcessIndex_Args pi;
    INIT_ARGS(pi);
    pi.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_ProcessIndex(&pi));
    PJRT_Device_LocalHardwareId_Args hw;
    INIT_ARGS(hw);
    hw.device = devices[i];
    OK(api->PJRT_Device_LocalHardwareId(&hw));
    PJRT_Device_IsAddressable_Args ad;
    INIT_ARGS(ad);
    ad.device = devices[i];
    OK(api->PJRT_Device_IsAddressable(&ad));
    CHECK(ad.is_addressable, "device %zu not addressable", i);
    PJRT_DeviceDescription_ToString_Args ts;
    INIT_ARGS(ts);
    ts.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_ToString(&ts));
    printf("  device %zu: id %d kind \"%.*s\" process %d hw %d \"%.*s\"\n", i,
           id.id, (int)k.device_kind_size, k.device_kind, pi.process_index,
           hw.local_hardware_id, (int)ts.to_string_size, ts.to_string);
    PJRT_DeviceDescription_Attributes_Args at;
    INIT_ARGS(at);
    at.device_description = g.device_description;
    if (OK(api->PJRT_DeviceDescription_Attributes(&at)) && i == 0) {
      for (size_t n = 0; n < at.num_attributes; n++) {
        const PJRT_NamedValue* v = &at.attributes[n];
        printf("    device attribute %.*s type %d\n", (int)v->name_size,
               v->name, (int)v->type);
      }
    }
    PJRT_Device_AddressableMemories_Args am;
    INIT_ARGS(am);
    am.device = devices[i];
    if (OK(api->PJRT_Device_AddressableMemories(&am))) {
      CHECK(am.num_memories >= 1, "device %zu has no memories", i);
      for (size_t n = 0; n < am.num_memories; n++) {
        PJRT_Memory_Kind_Args mk;
        INIT_ARGS(mk);
        mk.memory = am.memories[n];
        OK(api->PJRT_Memory_Kind(&mk));
        PJRT_Memory_Id_Args mi;
        INIT_ARGS(mi);
        mi.memory = am.memories[n];
        OK(api->PJRT_Memory_Id(&mi));
        PJRT_Memory_Kind_Id_Args mki;
        INIT_ARGS(mki);
        mki.memory = am.memories[n];
        OK(api->PJRT_Memory_Kind_Id(&mki));
        if (i < 2) {
          printf("    memory id %d kind \"%.*s\" kind_id %d\n", mi.id,
                 (int)mk.kind_size, mk.kind, mki.kind_id);
        }
      }
    }
    PJRT_Memory* dm = default_memory(devices[i]);
    CHECK(dm != NULL, "no default memory");
    if (dm != NULL) {
      PJRT_Memory_Kind_Args mk;
      INIT_ARGS(mk);
      mk.memory = dm;
      OK(api->PJRT_Memory_Kind(&mk));
      PJRT_Memory_AddressableByDevices_Args by;
      INIT_ARGS(by);
      by.memory = dm;
      OK(api->PJRT_Memory_AddressableByDevices(&by));
      CHECK(by.num_devices >= 1 && by.devices[0] == devices[i],
            "default memory of device %zu not addressable by it", i);
      if (i == 0) {
        printf("    default memory kind \"%.*s\"\n", (int)mk.kind_size,
               mk.kind);
      }
    }
  }
  {
    PJRT_Client_AddressableMemories_Args a;
    INIT_ARGS(a);
    a.client = client;
    if (OK(api->PJRT_Client_AddressableMemories(&a))) {
      printf("  client has %zu addressable memories\n",
             a.num_addressable_memories);
    }
  }
  PJRT_Memory* mem0 = default_memory(devices[0]);
  PJRT_Memory* mem1 = default_memory(devices[1]);

  /* The memory object's function table (user data hooks). */
  if (mem0 != NULL) {
    const PJRT_Memory_FunctionTable* vt = mem0->vtable;
    if (in_plugin_image(vt)) {
      printf("  PJRT_Memory vtable: struct_size %zu instance_struct_size %zu\n",
             vt->struct_size, vt->instance_struct_size);
      CHECK(vt->struct_size ==
                CW_PJRT_STRUCT_SIZE(PJRT_Memory_FunctionTable, set_user_data),
            "memory vtable struct_size %zu", vt->struct_size);
      static const int key = 0;
      int value = 5;
      if (vt->get_user_data != NULL && vt->set_user_data != NULL) {
        CHECK(vt->get_user_data(mem0, &key) == NULL, "fresh user data");
        vt->set_user_data(mem0, &key, &value, NULL);
        CHECK(vt->get_user_data(mem0, &key) == &value, "user data round trip");
      }
    } else {
      printf("  note: PJRT_Memory does not start with a vtable in the plugin "
             "image (%p)\n", (const void*)vt);
    }
  }

  /* --- host -> device -> host ----------------------------------------- */
  const int64_t dims[2] = {2, 3};
  const float x[6] = {1.5f, -2.25f, 3.0f, 0.1f, -0.0f, 1e-30f};
  PJRT_Buffer* xbuf = NULL;
  if (mem0 != NULL) {
    xbuf = host_to_device(client, mem0, x, PJRT_Buffer_Type_F32, dims, 2,
                          PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes,
                          NULL);
  }
  if (xbuf != NULL) {
    PJRT_Buffer_ReadyEvent_Args r;
    INIT_ARGS(r);
    r.buffer = xbuf;
    if (OK(api->PJRT_Buffer_ReadyEvent(&r))) event_wait(r.event, "ready event");

    PJRT_Buffer_Dimensions_Args d;
    INIT_ARGS(d);
    d.buffer = xbuf;
    if (OK(api->PJRT_Buffer_Dimensions(&d))) {
      CHECK(d.num_dims == 2 && d.dims[0] == 2 && d.dims[1] == 3, "dims");
    }
    PJRT_Buffer_ElementType_Args t;
    INIT_ARGS(t);
    t.buffer = xbuf;
    if (OK(api->PJRT_Buffer_ElementType(&t))) {
      CHECK(t.type == PJRT_Buffer_Type_F32, "element type %d", (int)t.type);
    }
    PJRT_Buffer_OnDeviceSizeInBytes_Args sz;
    INIT_ARGS(sz);
    sz.buffer = xbuf;
    if (OK(api->PJRT_Buffer_OnDeviceSizeInBytes(&sz))) {
      CHECK(sz.on_device_size_in_bytes == sizeof x, "size %zu",
            sz.on_device_size_in_bytes);
    }
    PJRT_Buffer_Device_Args bd;
    INIT_ARGS(bd);
    bd.buffer = xbuf;
    if (OK(api->PJRT_Buffer_Device(&bd))) {
      CHECK(bd.device == devices[0], "buffer device");
    }
    PJRT_Buffer_Memory_Args bm;
    INIT_ARGS(bm);
    bm.buffer = xbuf;
    if (OK(api->PJRT_Buffer_Memory(&bm))) {
      CHECK(bm.memory == mem0, "buffer memory");
    }
    PJRT_Buffer_IsOnCpu_Args oc;
    INIT_ARGS(oc);
    oc.buffer = xbuf;
    if (OK(api->PJRT_Buffer_IsOnCpu(&oc))) {
      printf("  Buffer_IsOnCpu = %d\n", (int)oc.is_on_cpu);
    }
    float back[6];
    memset(back, 0xAB, sizeof back);
    if (device_to_host(xbuf, back, sizeof back)) {
      CHECK(memcmp(back, x, sizeof x) == 0, "round trip not bit-exact");
    }

    /* Event_OnReady on a ready event: the callback must fire exactly once. */
    PJRT_Buffer_ReadyEvent_Args r2;
    INIT_ARGS(r2);
    r2.buffer = xbuf;
    if (OK(api->PJRT_Buffer_ReadyEvent(&r2))) {
      atomic_int calls;
      atomic_init(&calls, 0);
      PJRT_Event_OnReady_Args o;
      INIT_ARGS(o);
      o.event = r2.event;
      o.callback = on_ready;
      o.user_arg = &calls;
      OK(api->PJRT_Event_OnReady(&o));
      for (int i = 0; i < 500 && atomic_load(&calls) == 0; i++) sleep_ms(10);
      CHECK(atomic_load(&calls) == 1, "OnReady calls %d", atomic_load(&calls));
      CHECK(atomic_load(&g_on_ready_error) == 0, "OnReady got an error");
      PJRT_Event_IsReady_Args ir;
      INIT_ARGS(ir);
      ir.event = r2.event;
      OK(api->PJRT_Event_IsReady(&ir));
      CHECK(ir.is_ready, "event not ready");
      PJRT_Event_Error_Args ee;
      INIT_ARGS(ee);
      ee.event = r2.event;
      CHECK(api->PJRT_Event_Error(&ee) == NULL, "ready event carries an error");
      event_free(r2.event);
    }

    /* Copy to device 1 through its memory. */
    if (mem1 != NULL) {
      PJRT_Buffer_CopyToMemory_Args c;
      INIT_ARGS(c);
      c.buffer = xbuf;
      c.dst_memory = mem1;
      if (OK(api->PJRT_Buffer_CopyToMemory(&c))) {
        PJRT_Buffer_Device_Args cd;
        INIT_ARGS(cd);
        cd.buffer = c.dst_buffer;
        OK(api->PJRT_Buffer_Device(&cd));
        CHECK(cd.device == devices[1], "copy landed on the wrong device");
        float back1[6];
        if (device_to_host(c.dst_buffer, back1, sizeof back1)) {
          CHECK(memcmp(back1, x, sizeof x) == 0, "copy not bit-exact");
        }
        buffer_free(c.dst_buffer);
      }
    }
  }

  /* --- zero-copy aliasing on CPU --------------------------------------- */
  if (mem0 != NULL) {
    for (int aligned = 1; aligned >= 0; aligned--) {
      float* host = aligned_alloc(64, 128);
      float* data = aligned ? host : host + 1; /* +4 bytes: misaligned */
      for (int i = 0; i < 6; i++) data[i] = (float)i;
      PJRT_Event* done = NULL;
      PJRT_Buffer* b =
          host_to_device(client, mem0, data, PJRT_Buffer_Type_F32, dims, 2,
                         PJRT_HostBufferSemantics_kImmutableZeroCopy, &done);
      if (b != NULL) {
        PJRT_Buffer_ReadyEvent_Args r;
        INIT_ARGS(r);
        r.buffer = b;
        if (OK(api->PJRT_Buffer_ReadyEvent(&r))) event_wait(r.event, "ready");
        PJRT_Buffer_UnsafePointer_Args up;
        INIT_ARGS(up);
        up.buffer = b;
        PJRT_Error* ue = api->PJRT_Buffer_UnsafePointer(&up);
        int same_ptr = ue == NULL && up.buffer_pointer == (uintptr_t)data;
        if (ue != NULL) error_free(ue);
        data[0] = 42.0f; /* breaks the promise on purpose, to observe */
        float back[6];
        int aliased = 0;
        if (device_to_host(b, back, sizeof back)) aliased = back[0] == 42.0f;
        printf("  kImmutableZeroCopy, %s host pointer: buffer %s host memory "
               "(device pointer %s host pointer)\n",
               aligned ? "64-byte aligned" : "4-byte aligned",
               aliased ? "ALIASES" : "copies", same_ptr ? "==" : "!=");
        if (aligned) CHECK(aliased == same_ptr, "pointer vs. content disagree");
        buffer_free(b);
      }
      if (done != NULL) event_wait(done, "zero-copy done_with_host_buffer");
      free(host);
    }
  }

  /* --- compile ------------------------------------------------------- */
  PJRT_LoadedExecutable* exe = NULL;
  {
    PJRT_Error* e = NULL;
    printf("  compile with EMPTY compile options (separate process): %s\n",
           run_empty_options_child("/proc/self/exe", path));
    exe = compile(client, kAddModule, kCompileOptions, sizeof kCompileOptions,
                  &e);
    CHECK(e == NULL && exe != NULL, "compile with num_replicas=1, "
          "num_partitions=1 options failed");
    if (e != NULL) {
      const char* msg;
      size_t len;
      error_text(e, &msg, &len);
      printf("  compile error: %.*s\n", (int)len, msg);
      error_free(e);
    } else {
      printf("  compile with hand-encoded options: ok\n");
    }
  }

  PJRT_Executable* unloaded = NULL;
  if (exe != NULL) {
    PJRT_LoadedExecutable_AddressableDevices_Args ad;
    INIT_ARGS(ad);
    ad.executable = exe;
    if (OK(api->PJRT_LoadedExecutable_AddressableDevices(&ad))) {
      CHECK(ad.num_addressable_devices == 1 &&
                ad.addressable_devices[0] == devices[0],
            "executable devices: %zu", ad.num_addressable_devices);
    }
    PJRT_LoadedExecutable_GetExecutable_Args ge;
    INIT_ARGS(ge);
    ge.loaded_executable = exe;
    if (OK(api->PJRT_LoadedExecutable_GetExecutable(&ge))) {
      unloaded = ge.executable;
      PJRT_Executable_NumOutputs_Args no;
      INIT_ARGS(no);
      no.executable = unloaded;
      OK(api->PJRT_Executable_NumOutputs(&no));
      CHECK(no.num_outputs == 1, "num outputs %zu", no.num_outputs);
      PJRT_Executable_Name_Args nm;
      INIT_ARGS(nm);
      nm.executable = unloaded;
      if (OK(api->PJRT_Executable_Name(&nm))) {
        printf("  executable name \"%.*s\"\n", (int)nm.executable_name_size,
               nm.executable_name);
      }
      PJRT_Executable_NumReplicas_Args nr;
      INIT_ARGS(nr);
      nr.executable = unloaded;
      OK(api->PJRT_Executable_NumReplicas(&nr));
      PJRT_Executable_NumPartitions_Args np;
      INIT_ARGS(np);
      np.executable = unloaded;
      OK(api->PJRT_Executable_NumPartitions(&np));
      CHECK(nr.num_replicas == 1 && np.num_partitions == 1, "replicas %zu "
            "partitions %zu", nr.num_replicas, np.num_partitions);
      PJRT_Executable_OutputElementTypes_Args ot;
      INIT_ARGS(ot);
      ot.executable = unloaded;
      if (OK(api->PJRT_Executable_OutputElementTypes(&ot))) {
        CHECK(ot.num_output_types == 1 &&
                  ot.output_types[0] == PJRT_Buffer_Type_F32,
              "output types");
      }
      PJRT_Executable_OutputDimensions_Args od;
      INIT_ARGS(od);
      od.executable = unloaded;
      if (OK(api->PJRT_Executable_OutputDimensions(&od))) {
        CHECK(od.num_outputs == 1 && od.dim_sizes[0] == 2 && od.dims[0] == 2 &&
                  od.dims[1] == 3,
              "output dims");
      }
      PJRT_Executable_Fingerprint_Args fp;
      INIT_ARGS(fp);
      fp.executable = unloaded;
      PJRT_Error* fe = api->PJRT_Executable_Fingerprint(&fp);
      if (fe == NULL) {
        printf("  fingerprint %zu bytes\n", fp.executable_fingerprint_size);
      } else {
        printf("  fingerprint: error %d\n", (int)error_code(fe));
        error_free(fe);
      }
    }
  }

  /* --- execute ------------------------------------------------------- */
  if (exe != NULL && xbuf != NULL) {
    PJRT_Error* e = NULL;
    PJRT_Buffer* y = run1(exe, xbuf, NULL, &e);
    if (ok_at(e, "execute", __LINE__) && y != NULL) {
      float back[6];
      if (device_to_host(y, back, sizeof back)) {
        int good = 1;
        for (int i = 0; i < 6; i++) good &= back[i] == 2.0f * x[i];
        CHECK(good, "output is not 2*x");
      }
      PJRT_Buffer_Device_Args bd;
      INIT_ARGS(bd);
      bd.buffer = y;
      OK(api->PJRT_Buffer_Device(&bd));
      CHECK(bd.device == devices[0], "output on wrong device");
      buffer_free(y);
    }

    /* Same executable, explicit execute_device (portable execution). */
    y = run1(exe, xbuf, devices[0], &e);
    if (e != NULL) {
      const char* msg;
      size_t len;
      error_text(e, &msg, &len);
      printf("  note: execute with execute_device set: error %d: %.*s\n",
             (int)error_code(e), (int)len, msg);
      error_free(e);
    } else {
      printf("  execute with execute_device = device 0: ok\n");
      buffer_free(y);
    }
  }

  /* --- serialize / deserialize --------------------------------------- */
  if (unloaded != NULL && xbuf != NULL) {
    PJRT_Executable_Serialize_Args s;
    INIT_ARGS(s);
    s.executable = unloaded;
    if (OK(api->PJRT_Executable_Serialize(&s))) {
      printf("  serialized executable: %zu bytes\n", s.serialized_bytes_size);
      CHECK(s.serialized_bytes != NULL && s.serialized_bytes_size > 0,
            "empty serialization");
      CHECK(s.serialized_executable_deleter != NULL, "no deleter");
      PJRT_Executable_DeserializeAndLoad_Args d;
      INIT_ARGS(d);
      d.client = client;
      d.serialized_executable = s.serialized_bytes;
      d.serialized_executable_size = s.serialized_bytes_size;
      if (OK(api->PJRT_Executable_DeserializeAndLoad(&d))) {
        PJRT_Error* e = NULL;
        PJRT_Buffer* y = run1(d.loaded_executable, xbuf, NULL, &e);
        if (ok_at(e, "execute deserialized", __LINE__) && y != NULL) {
          float back[6];
          if (device_to_host(y, back, sizeof back)) {
            int good = 1;
            for (int i = 0; i < 6; i++) good &= back[i] == 2.0f * x[i];
            CHECK(good, "deserialized output is not 2*x");
          }
          buffer_free(y);
        }
        loaded_free(d.loaded_executable);
      }
      if (s.serialized_executable_deleter != NULL) {
        s.serialized_executable_deleter(s.serialized_executable);
      }
    }
  }
  executable_free(unloaded);
  loaded_free(exe);

  /* --- errors ---------------------------------------------------------- */
  {
    PJRT_Error* e = NULL;
    PJRT_LoadedExecutable* bad = compile(client, kBrokenModule, kCompileOptions,
                                         sizeof kCompileOptions, &e);
    CHECK(e != NULL, "broken module compiled");
    loaded_free(bad);
    if (e != NULL) {
      const char* msg;
      size_t len;
      error_text(e, &msg, &len);
      PJRT_Error_Code code = error_code(e);
      printf("  broken module: code %d, message: %.*s\n", (int)code, (int)len,
             msg);
      CHECK(code == PJRT_Error_Code_INVALID_ARGUMENT ||
                code == PJRT_Error_Code_UNKNOWN ||
                code == PJRT_Error_Code_INTERNAL,
            "unexpected code %d", (int)code);
      CHECK(len > 0, "empty message");

      PJRT_Error_ForEachPayload_Args fe;
      INIT_ARGS(fe);
      fe.error = e;
      fe.visitor = count_payload;
      OK(api->PJRT_Error_ForEachPayload(&fe));
      printf("  broken module error carries %d payloads\n", g_payloads);

      /* The error object's own function table must agree with the slots. */
      const PJRT_Error_FunctionTable* vt = e->vtable;
      if (in_plugin_image(vt)) {
        printf("  PJRT_Error vtable: struct_size %zu instance_size %zu\n",
               vt->struct_size, vt->instance_size);
        CHECK(vt->struct_size ==
                  CW_PJRT_STRUCT_SIZE(PJRT_Error_FunctionTable,
                                      for_each_payload),
              "error vtable struct_size %zu", vt->struct_size);
        if (vt->message != NULL && vt->get_code != NULL) {
          const char* m2 = NULL;
          size_t l2 = 0;
          vt->message(e, &m2, &l2);
          CHECK(l2 == len && memcmp(m2, msg, len) == 0, "vtable message");
          CHECK(vt->get_code(e) == code, "vtable code");
        }
      } else {
        printf("  note: PJRT_Error does not start with a vtable in the plugin "
               "image (%p)\n", (const void*)vt);
      }
      error_free(e);
    }
  }

  /* --- teardown ------------------------------------------------------ */
  buffer_free(xbuf);
  {
    PJRT_Client_Destroy_Args a;
    INIT_ARGS(a);
    a.client = client;
    OK(api->PJRT_Client_Destroy(&a));
  }
  /* The plugin is not dlclosed: XLA's plugin is not built to be unloaded. */

  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
