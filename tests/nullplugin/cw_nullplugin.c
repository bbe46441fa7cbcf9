// cw_nullplugin: a PJRT plugin with no compiler and no device, so that
// benchmarks can show causeway's own cost apart from XLA's and tests can run
// fleets of workers without XLA's threads.
//
// Buffers live in host memory. Programs are in format "cwnull": the shapes of
// their outputs, then an optional fill, e.g. "f32[4,4] s32[] checksum". An
// execution returns at once: zeros, or with "checksum" every output repeats
// the 64-bit FNV-1a of that device's argument bytes (little-endian), so a
// test can check that data flowed. Devices: create option cpu_device_count,
// else CW_NULL_DEVICES, else 8. With CW_NULL_COMPILER, JAX's "mlir" programs
// too (cw_null_compiler.c). See docs/nullplugin.md.
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_nullplugin.h"

const PJRT_Api* GetPjrtApi(void);

// ---- Errors ----------------------------------------------------------------------------------

struct cw_null_error_s {
  const PJRT_Error_FunctionTable* vtable;  // first, as the ABI lays errors out
  PJRT_Error_Code code;
  size_t size;
  char message[];
};
typedef struct cw_null_error_s cw__error_t;

static void cw__vt_destroy(PJRT_Error* e);
static void cw__vt_message(const PJRT_Error* e, const char** msg, size_t* size) {
  *msg = ((const cw__error_t*)e)->message;
  *size = ((const cw__error_t*)e)->size;
}
static PJRT_Error_Code cw__vt_code(const PJRT_Error* e) {
  return ((const cw__error_t*)e)->code;
}
static void cw__vt_payloads(const PJRT_Error* e, PJRT_Error_PayloadVisitor v, void* arg) {}

static const PJRT_Error_FunctionTable cw__error_vtable = {
    .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_FunctionTable, for_each_payload),
    .instance_size = sizeof(cw__error_t),
    .destroy = cw__vt_destroy,
    .message = cw__vt_message,
    .get_code = cw__vt_code,
    .for_each_payload = cw__vt_payloads,
};

cw__error_t cw_null_oom_error = {&cw__error_vtable, PJRT_Error_Code_RESOURCE_EXHAUSTED, 0};

static void cw__vt_destroy(PJRT_Error* e) {
  if (e != CW_NULL_OOM) free(e);
}

PJRT_Error* cw_null_err(PJRT_Error_Code code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  size_t size = n < 0 ? 0 : (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
  cw__error_t* e = malloc(sizeof(*e) + size + 1);
  if (!e) return CW_NULL_OOM;
  *e = (cw__error_t){&cw__error_vtable, code, size};
  memcpy(e->message, buf, size);
  e->message[size] = '\0';
  return (PJRT_Error*)e;
}

void cw_null_error_free(PJRT_Error* e) {
  if (e) cw__vt_destroy(e);
}

static void cw__error_destroy(PJRT_Error_Destroy_Args* a) { cw_null_error_free(a->error); }
static void cw__error_message(PJRT_Error_Message_Args* a) {
  cw__vt_message(a->error, &a->message, &a->message_size);
}
static PJRT_Error* cw__error_get_code(PJRT_Error_GetCode_Args* a) {
  a->code = cw__vt_code(a->error);
  return NULL;
}

// ---- Clients, devices, memories --------------------------------------------------------------

const char cw_null_memory_kind[] = "device";
static const char g_platform[] = "null";
// Part of the compile cache's key: a new serialized form needs a new version.
static const char g_version[] = "cw_nullplugin 2";

static PJRT_Error* cw__initialize(PJRT_Plugin_Initialize_Args* a) {
  return NULL;
}
static PJRT_Error* cw__plugin_attributes(PJRT_Plugin_Attributes_Args* a) {
  return cw_null_compiler_attributes(a);
}
static PJRT_Error* cw__error_payloads(PJRT_Error_ForEachPayload_Args* a) {
  return NULL;  // our errors carry none
}

// Strict decimal integer in [1, CW_NULL_MAX_DEVICES].
static PJRT_Error* cw__device_count(const char* what, const char* s, int64_t v, size_t* out) {
  if (s) {
    char* end = NULL;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) x = -1;
    v = x;
  }
  if (v < 1 || v > CW_NULL_MAX_DEVICES) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: %s must be an integer in [1, %d], not %s", what,
                       CW_NULL_MAX_DEVICES, s ? s : "out of range");
  }
  *out = (size_t)v;
  return NULL;
}

// ---- Memories' client data (PJRT_Memory_FunctionTable) -----------------------------------------

static void* cw__user_get(PJRT_Memory* memory, const void* key) {
  cw_null_device_t* d = CW_NULL_DEV(memory);
  void* out = NULL;
  pthread_mutex_lock(&d->user_mu);
  for (int i = 0; i < CW_NULL_USER_DATA && !out; ++i) {
    if (d->user[i].key == key) out = d->user[i].data;
  }
  pthread_mutex_unlock(&d->user_mu);
  return out;
}

// The slot of `key`, else an empty one; with none left the data is dropped
// (its destructor run), as the table has no way to fail.
static void cw__user_set(PJRT_Memory* memory, const void* key, void* data, void (*dtor)(void*)) {
  cw_null_device_t* d = CW_NULL_DEV(memory);
  void* old = data;
  void (*old_dtor)(void*) = dtor;
  pthread_mutex_lock(&d->user_mu);
  int at = -1;
  for (int i = 0; i < CW_NULL_USER_DATA && at < 0; ++i) {
    if (d->user[i].key == key) at = i;
  }
  for (int i = 0; i < CW_NULL_USER_DATA && at < 0; ++i) {
    if (!d->user[i].key) at = i;
  }
  if (at >= 0) {
    old = d->user[at].data;
    old_dtor = d->user[at].dtor;
    d->user[at].key = key;
    d->user[at].data = data;
    d->user[at].dtor = dtor;
  }
  pthread_mutex_unlock(&d->user_mu);
  if (old && old_dtor && old != data) old_dtor(old);
}

static const PJRT_Memory_FunctionTable cw__memory_vtable = {
    .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Memory_FunctionTable, set_user_data),
    .instance_struct_size = sizeof(cw_null_device_t),
    .get_user_data = cw__user_get,
    .set_user_data = cw__user_set,
};

static void cw__client_free(cw_null_client_t* c) {
  if (!c) return;
  for (size_t i = 0; c->devs && i < c->num_devices; ++i) {
    cw_null_device_t* d = &c->devs[i];
    for (int k = 0; k < CW_NULL_USER_DATA; ++k) {
      if (d->user[k].data && d->user[k].dtor) d->user[k].dtor(d->user[k].data);
    }
    pthread_mutex_destroy(&d->user_mu);
  }
  cw_null_compiler_release(c);
  pthread_mutex_destroy(&c->compiler_mu);
  free(c->devs);
  free(c->devices);
  free(c->memories);
  free(c);
}

static PJRT_Error* cw__client_create(PJRT_Client_Create_Args* a) {
  size_t n = 8;
  PJRT_Error* e = NULL;
  const char* env = getenv("CW_NULL_DEVICES");
  if (env && *env) e = cw__device_count("CW_NULL_DEVICES", env, 0, &n);
  for (size_t i = 0; !e && i < a->num_options; ++i) {
    const PJRT_NamedValue* o = &a->create_options[i];
    if (o->name_size == 16 && !memcmp(o->name, "cpu_device_count", 16)) {
      if (o->type != PJRT_NamedValue_kInt64) {
        e = cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                        "cw_nullplugin: create option cpu_device_count must be an int64");
      } else {
        e = cw__device_count("cpu_device_count", NULL, o->int64_value, &n);
      }
    }
  }
  if (e) return e;
  cw_null_client_t* c = calloc(1, sizeof(*c));
  if (c) {
    pthread_mutex_init(&c->compiler_mu, NULL);
    c->devs = calloc(n, sizeof(*c->devs));
    c->devices = calloc(n, sizeof(*c->devices));
    c->memories = calloc(n, sizeof(*c->memories));
  }
  if (!c || !c->devs || !c->devices || !c->memories) {
    cw__client_free(c);
    return CW_NULL_OOM;
  }
  c->num_devices = n;
  for (size_t i = 0; i < n; ++i) {
    cw_null_device_t* d = &c->devs[i];
    d->vtable = &cw__memory_vtable;
    pthread_mutex_init(&d->user_mu, NULL);
    d->client = c;
    d->id = (int)i;
    snprintf(d->debug, sizeof(d->debug), "NullDevice(id=%zu)", i);
    snprintf(d->memory_debug, sizeof(d->memory_debug), "NullMemory(device=%zu)", i);
    d->device = c->devices[i] = (PJRT_Device*)d;
    d->memory = c->memories[i] = (PJRT_Memory*)d;
  }
  a->client = (PJRT_Client*)c;
  return NULL;
}

static PJRT_Error* cw__client_destroy(PJRT_Client_Destroy_Args* a) {
  cw__client_free((cw_null_client_t*)a->client);
  return NULL;
}

static PJRT_Error* cw__platform_name(PJRT_Client_PlatformName_Args* a) {
  a->platform_name = g_platform;
  a->platform_name_size = strlen(g_platform);
  return NULL;
}
static PJRT_Error* cw__platform_version(PJRT_Client_PlatformVersion_Args* a) {
  a->platform_version = g_version;
  a->platform_version_size = strlen(g_version);
  return NULL;
}
static PJRT_Error* cw__process_index(PJRT_Client_ProcessIndex_Args* a) {
  a->process_index = 0;
  return NULL;
}
static PJRT_Error* cw__client_devices(PJRT_Client_Devices_Args* a) {
  a->devices = CW_NULL_CLIENT(a->client)->devices;
  a->num_devices = CW_NULL_CLIENT(a->client)->num_devices;
  return NULL;
}
static PJRT_Error* cw__addressable_devices(PJRT_Client_AddressableDevices_Args* a) {
  a->addressable_devices = CW_NULL_CLIENT(a->client)->devices;
  a->num_addressable_devices = CW_NULL_CLIENT(a->client)->num_devices;
  return NULL;
}
static PJRT_Error* cw__lookup_device(PJRT_Client_LookupDevice_Args* a) {
  const cw_null_client_t* c = CW_NULL_CLIENT(a->client);
  if (a->id < 0 || (size_t)a->id >= c->num_devices) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_nullplugin: no device with id %d",
                       a->id);
  }
  a->device = c->devices[a->id];
  return NULL;
}
static PJRT_Error* cw__lookup_addressable(PJRT_Client_LookupAddressableDevice_Args* a) {
  const cw_null_client_t* c = CW_NULL_CLIENT(a->client);
  if (a->local_hardware_id < 0 || (size_t)a->local_hardware_id >= c->num_devices) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: no device with local hardware id %d", a->local_hardware_id);
  }
  a->addressable_device = c->devices[a->local_hardware_id];
  return NULL;
}
// Replica-major; partition p of replica r on device p * replicas + r.
static PJRT_Error* cw__default_assignment(PJRT_Client_DefaultDeviceAssignment_Args* a) {
  const cw_null_client_t* c = CW_NULL_CLIENT(a->client);
  size_t nr = a->num_replicas > 0 ? (size_t)a->num_replicas : 0;
  size_t np = a->num_partitions > 0 ? (size_t)a->num_partitions : 0;
  if (!nr || !np || nr * np > c->num_devices || nr * np > a->default_assignment_size) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: no default assignment of %d replicas x %d partitions on "
                       "%zu devices into %zu entries",
                       a->num_replicas, a->num_partitions, c->num_devices,
                       a->default_assignment_size);
  }
  for (size_t r = 0; r < nr; ++r) {
    for (size_t p = 0; p < np; ++p) a->default_assignment[r * np + p] = (int)(p * nr + r);
  }
  return NULL;
}
static PJRT_Error* cw__client_memories(PJRT_Client_AddressableMemories_Args* a) {
  a->addressable_memories = CW_NULL_CLIENT(a->client)->memories;
  a->num_addressable_memories = CW_NULL_CLIENT(a->client)->num_devices;
  return NULL;
}

static PJRT_Error* cw__get_description(PJRT_Device_GetDescription_Args* a) {
  a->device_description = (PJRT_DeviceDescription*)a->device;
  return NULL;
}
static PJRT_Error* cw__desc_id(PJRT_DeviceDescription_Id_Args* a) {
  a->id = CW_NULL_DEV(a->device_description)->id;
  return NULL;
}
static PJRT_Error* cw__desc_process_index(PJRT_DeviceDescription_ProcessIndex_Args* a) {
  a->process_index = 0;
  return NULL;
}
static PJRT_Error* cw__desc_attributes(PJRT_DeviceDescription_Attributes_Args* a) {
  a->attributes = NULL;
  a->num_attributes = 0;
  return NULL;
}
static PJRT_Error* cw__desc_kind(PJRT_DeviceDescription_Kind_Args* a) {
  a->device_kind = g_platform;
  a->device_kind_size = strlen(g_platform);
  return NULL;
}
static PJRT_Error* cw__desc_debug(PJRT_DeviceDescription_DebugString_Args* a) {
  a->debug_string = CW_NULL_DEV(a->device_description)->debug;
  a->debug_string_size = strlen(a->debug_string);
  return NULL;
}
static PJRT_Error* cw__desc_to_string(PJRT_DeviceDescription_ToString_Args* a) {
  a->to_string = CW_NULL_DEV(a->device_description)->debug;
  a->to_string_size = strlen(a->to_string);
  return NULL;
}
static PJRT_Error* cw__is_addressable(PJRT_Device_IsAddressable_Args* a) {
  a->is_addressable = true;
  return NULL;
}
static PJRT_Error* cw__hardware_id(PJRT_Device_LocalHardwareId_Args* a) {
  a->local_hardware_id = CW_NULL_DEV(a->device)->id;
  return NULL;
}
static PJRT_Error* cw__device_memories(PJRT_Device_AddressableMemories_Args* a) {
  a->memories = &CW_NULL_DEV(a->device)->memory;
  a->num_memories = 1;
  return NULL;
}
static PJRT_Error* cw__default_memory(PJRT_Device_DefaultMemory_Args* a) {
  a->memory = CW_NULL_DEV(a->device)->memory;
  return NULL;
}
static PJRT_Error* cw__memory_stats(PJRT_Device_MemoryStats_Args* a) {
  const cw_null_device_t* d = CW_NULL_DEV(a->device);
  a->bytes_in_use = atomic_load(&d->bytes_in_use);
  a->peak_bytes_in_use = atomic_load(&d->peak_bytes);
  a->peak_bytes_in_use_is_set = true;
  a->num_allocs = atomic_load(&d->num_allocs);
  a->num_allocs_is_set = true;
  return NULL;
}
static PJRT_Error* cw__memory_id(PJRT_Memory_Id_Args* a) {
  a->id = CW_NULL_DEV(a->memory)->id;
  return NULL;
}
static PJRT_Error* cw__memory_debug(PJRT_Memory_DebugString_Args* a) {
  a->debug_string = CW_NULL_DEV(a->memory)->memory_debug;
  a->debug_string_size = strlen(a->debug_string);
  return NULL;
}
static PJRT_Error* cw__memory_to_string(PJRT_Memory_ToString_Args* a) {
  a->to_string = CW_NULL_DEV(a->memory)->memory_debug;
  a->to_string_size = strlen(a->to_string);
  return NULL;
}
static PJRT_Error* cw__memory_kind(PJRT_Memory_Kind_Args* a) {
  a->kind = cw_null_memory_kind;
  a->kind_size = strlen(cw_null_memory_kind);
  return NULL;
}
static PJRT_Error* cw__memory_kind_id(PJRT_Memory_Kind_Id_Args* a) {
  a->kind_id = 0;  // the only kind
  return NULL;
}
static PJRT_Error* cw__memory_devices(PJRT_Memory_AddressableByDevices_Args* a) {
  a->devices = &CW_NULL_DEV(a->memory)->device;
  a->num_devices = 1;
  return NULL;
}

// ---- The table -------------------------------------------------------------------------------

static PJRT_Api g_api;

static void cw__load(void) {
  g_api.struct_size = sizeof(g_api);
  g_api.pjrt_api_version.struct_size = sizeof(g_api.pjrt_api_version);
  g_api.pjrt_api_version.major_version = CW_PJRT_API_MAJOR;
  g_api.pjrt_api_version.minor_version = CW_PJRT_API_MINOR;
  cw_null_event_fill(&g_api);
  cw_null_buffer_fill(&g_api);
  cw_null_exe_fill(&g_api);
  g_api.PJRT_Error_Destroy = cw__error_destroy;
  g_api.PJRT_Error_Message = cw__error_message;
  g_api.PJRT_Error_GetCode = cw__error_get_code;
  g_api.PJRT_Error_ForEachPayload = cw__error_payloads;
  g_api.PJRT_Plugin_Initialize = cw__initialize;
  g_api.PJRT_Plugin_Attributes = cw__plugin_attributes;
  g_api.PJRT_Client_Create = cw__client_create;
  g_api.PJRT_Client_Destroy = cw__client_destroy;
  g_api.PJRT_Client_PlatformName = cw__platform_name;
  g_api.PJRT_Client_ProcessIndex = cw__process_index;
  g_api.PJRT_Client_PlatformVersion = cw__platform_version;
  g_api.PJRT_Client_Devices = cw__client_devices;
  g_api.PJRT_Client_AddressableDevices = cw__addressable_devices;
  g_api.PJRT_Client_LookupDevice = cw__lookup_device;
  g_api.PJRT_Client_LookupAddressableDevice = cw__lookup_addressable;
  g_api.PJRT_Client_DefaultDeviceAssignment = cw__default_assignment;
  g_api.PJRT_Client_AddressableMemories = cw__client_memories;
  g_api.PJRT_DeviceDescription_Id = cw__desc_id;
  g_api.PJRT_DeviceDescription_ProcessIndex = cw__desc_process_index;
  g_api.PJRT_DeviceDescription_Attributes = cw__desc_attributes;
  g_api.PJRT_DeviceDescription_Kind = cw__desc_kind;
  g_api.PJRT_DeviceDescription_DebugString = cw__desc_debug;
  g_api.PJRT_DeviceDescription_ToString = cw__desc_to_string;
  g_api.PJRT_Device_GetDescription = cw__get_description;
  g_api.PJRT_Device_IsAddressable = cw__is_addressable;
  g_api.PJRT_Device_LocalHardwareId = cw__hardware_id;
  g_api.PJRT_Device_AddressableMemories = cw__device_memories;
  g_api.PJRT_Device_DefaultMemory = cw__default_memory;
  g_api.PJRT_Device_MemoryStats = cw__memory_stats;
  g_api.PJRT_Memory_Id = cw__memory_id;
  g_api.PJRT_Memory_DebugString = cw__memory_debug;
  g_api.PJRT_Memory_ToString = cw__memory_to_string;
  g_api.PJRT_Memory_Kind = cw__memory_kind;
  g_api.PJRT_Memory_Kind_Id = cw__memory_kind_id;
  g_api.PJRT_Memory_AddressableByDevices = cw__memory_devices;
  cw_null_stubs_fill(&g_api);
}

__attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cw__load);
  return &g_api;
}
