#include "cw_pjrt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_log.h"
#include "cw_pb_nesting.h"
#include "cw_pjrt_ffi.h"
#include "cw_tsan.h"
#include "proto/xla_hlo_subset.pb-c.h"

// Status codes equal PJRT_Error_Code: pinned here, where both headers meet.
#define CW__PIN(name) \
  _Static_assert((int)CW_##name == (int)PJRT_Error_Code_##name, #name " must equal PJRT's")
CW__PIN(CANCELLED);
CW__PIN(UNKNOWN);
CW__PIN(INVALID_ARGUMENT);
CW__PIN(DEADLINE_EXCEEDED);
CW__PIN(NOT_FOUND);
CW__PIN(ALREADY_EXISTS);
CW__PIN(PERMISSION_DENIED);
CW__PIN(RESOURCE_EXHAUSTED);
CW__PIN(FAILED_PRECONDITION);
CW__PIN(ABORTED);
CW__PIN(OUT_OF_RANGE);
CW__PIN(UNIMPLEMENTED);
CW__PIN(INTERNAL);
CW__PIN(UNAVAILABLE);
CW__PIN(DATA_LOSS);
CW__PIN(UNAUTHENTICATED);
#undef CW__PIN
// Wire dtypes equal PJRT_Buffer_Type.
_Static_assert((int)CAUSEWAY__V1__DTYPE__DTYPE_F32 == (int)PJRT_Buffer_Type_F32, "dtype pin");
_Static_assert((int)CAUSEWAY__V1__DTYPE__DTYPE_C128 == (int)PJRT_Buffer_Type_C128, "dtype pin");
_Static_assert((int)CAUSEWAY__V1__DTYPE__DTYPE_PRED == (int)PJRT_Buffer_Type_PRED, "dtype pin");
_Static_assert((int)CAUSEWAY__V1__DTYPE__DTYPE_BF16 == (int)PJRT_Buffer_Type_BF16, "dtype pin");

cw_status_t cw_pjrt_status(const cw_pjrt_t* p, PJRT_Error* error) {
  if (!error) return cw_ok_status();
  CW_PJRT_ARGS(PJRT_Error_Message_Args, m);
  m.error = error;
  p->api->PJRT_Error_Message(&m);
  CW_PJRT_ARGS(PJRT_Error_GetCode_Args, c);
  c.error = error;
  cw_status_code_t code = CW_UNKNOWN;
  if (!p->api->PJRT_Error_GetCode(&c)) code = cw_status_code_from_u32((uint32_t)c.code);
  cw_status_t st = cw_make_status(code, "%.*s", (int)m.message_size,
                                  m.message ? m.message : "");
  CW_PJRT_ARGS(PJRT_Error_Destroy_Args, d);
  d.error = error;
  p->api->PJRT_Error_Destroy(&d);
  return st;
}

static cw_status_t cw__load_devices(cw_pjrt_t* p) {
  CW_PJRT_ARGS(PJRT_Client_AddressableDevices_Args, a);
  a.client = p->client;
  CW_PJRT_CALL(p, PJRT_Client_AddressableDevices, a, "addressable devices");
  p->num_devices = a.num_addressable_devices;
  p->devices = calloc(p->num_devices ? p->num_devices : 1, sizeof(*p->devices));
  p->default_memories = calloc(p->num_devices ? p->num_devices : 1, sizeof(PJRT_Memory*));
  if (!p->devices || !p->default_memories) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for devices");
  }
  for (size_t i = 0; i < p->num_devices; ++i) {
    p->devices[i] = a.addressable_devices[i];
    CW_PJRT_ARGS(PJRT_Device_DefaultMemory_Args, m);
    m.device = p->devices[i];
    // Optional: fall back to device placement without a default memory.
    cw_status_free(cw_pjrt_status(p, p->api->PJRT_Device_DefaultMemory(&m)));
    p->default_memories[i] = m.memory;
  }
  return cw_ok_status();
}

cw_status_t cw_pjrt_create(const char* path, int num_devices, cw_pjrt_t** out) {
  *out = NULL;
  if (!path || !*path) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "no PJRT plugin given (--plugin or CAUSEWAY_PJRT_PLUGIN)");
  }
  cw_pjrt_t* p = calloc(1, sizeof(*p));
  if (!p) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  p->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!p->library) {
    cw_status_t st = cw_make_status(CW_NOT_FOUND, "cannot load PJRT plugin %s: %s", path,
                                    dlerror());
    free(p);
    return st;
  }
  typedef const PJRT_Api* (*get_api_fn)(void);
  get_api_fn get_api = (get_api_fn)(uintptr_t)dlsym(p->library, "GetPjrtApi");
  p->api = get_api ? get_api() : NULL;
  cw_status_t st = cw_ok_status();
  if (!p->api) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "%s has no GetPjrtApi", path);
    goto fail;
  }
  int major = p->api->pjrt_api_version.major_version;
  int minor = p->api->pjrt_api_version.minor_version;
  if (major != CW_PJRT_API_MAJOR || minor < CW_PJRT_MIN_MINOR) {
    st = cw_make_status(CW_FAILED_PRECONDITION,
                        "%s speaks PJRT %d.%d; causeway needs %d.%d or newer (major %d)", path,
                        major, minor, CW_PJRT_API_MAJOR, CW_PJRT_MIN_MINOR, CW_PJRT_API_MAJOR);
    goto fail;
  }
  CW_LOGI("PJRT plugin %s: API %d.%d (ours %d.%d)", path, major, minor, CW_PJRT_API_MAJOR,
          CW_PJRT_API_MINOR);
  {
    CW_PJRT_ARGS(PJRT_Plugin_Initialize_Args, init);
    st = cw_pjrt_status(p, p->api->PJRT_Plugin_Initialize(&init));
    if (st) goto fail;
    PJRT_NamedValue opt;
    memset(&opt, 0, sizeof(opt));
    opt.struct_size = sizeof(opt);
    opt.name = "cpu_device_count";
    opt.name_size = strlen(opt.name);
    opt.type = PJRT_NamedValue_kInt64;
    opt.int64_value = num_devices;
    opt.value_size = 1;
    CW_PJRT_ARGS(PJRT_Client_Create_Args, c);
    c.create_options = &opt;
    c.num_options = 1;
    st = cw_pjrt_status(p, p->api->PJRT_Client_Create(&c));
    if (st) goto fail;
    p->client = c.client;
  }
  st = cw__load_devices(p);
  if (st) goto fail;
  {
    // XLA's CPU plugin keeps device buffers in this process's memory, so
    // ready buffers can be written to sockets in place.
    CW_PJRT_ARGS(PJRT_Client_PlatformName_Args, pn);
    pn.client = p->client;
    cw_status_t pst = cw_pjrt_status(p, p->api->PJRT_Client_PlatformName(&pn));
    p->host_memory = !pst && pn.platform_name_size == 3 && !memcmp(pn.platform_name, "cpu", 3);
    cw_status_free(pst);
  }
  *out = p;
  return cw_ok_status();
fail:
  cw_pjrt_release(p);
  return cw_status_annotate(st, "PJRT plugin %s", path);
}

void cw_pjrt_release(cw_pjrt_t* p) {
  if (!p) return;
  if (p->client) {
    CW_PJRT_ARGS(PJRT_Client_Destroy_Args, d);
    d.client = p->client;
    cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Client_Destroy(&d));
    if (st) CW_LOGW("destroying the PJRT client: %s", cw_status_message(st));
    cw_status_free(st);
  }
  free(p->devices);
  free(p->default_memories);
  // The library stays loaded: plugins keep process-wide state (thread pools,
  // registries) that unloading would pull out from under them.
  free(p);
}

int cw_pjrt_device_index(const cw_pjrt_t* p, PJRT_Device* device) {
  for (size_t i = 0; i < p->num_devices; ++i) {
    if (p->devices[i] == device) return (int)i;
  }
  return -1;
}

typedef struct cw__ready_s {
  const cw_pjrt_t* pjrt;
  cw_pjrt_ready_fn fn;
  void* user;
} cw__ready_t;

// Runs on a plugin thread; owns `error`.
static void cw__on_ready(PJRT_Error* error, void* arg) {
  CW_TSAN_ACQUIRE(arg);
  cw__ready_t r = *(cw__ready_t*)arg;
  free(arg);
  r.fn(r.user, cw_pjrt_status(r.pjrt, error));
}

cw_status_t cw_pjrt_event_on_ready(const cw_pjrt_t* p, PJRT_Event* event, cw_pjrt_ready_fn fn,
                                   void* user) {
  cw__ready_t* r = malloc(sizeof(*r));
  if (!r) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for an event");
  *r = (cw__ready_t){p, fn, user};
  CW_PJRT_ARGS(PJRT_Event_OnReady_Args, a);
  a.event = event;
  a.callback = cw__on_ready;
  a.user_arg = r;
  CW_TSAN_RELEASE(r);
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Event_OnReady(&a));
  if (st) free(r);  // the callback will not run
  return st;
}

void cw_pjrt_event_destroy(const cw_pjrt_t* p, PJRT_Event* event) {
  if (!event) return;
  CW_PJRT_ARGS(PJRT_Event_Destroy_Args, a);
  a.event = event;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_Event_Destroy(&a)));
}

// Serialized xla.CompileOptionsProto{executable_build_options{num_replicas: 1,
// num_partitions: 1}}: field 3 (length 4) holding fields 4 and 5 = 1.
static const uint8_t cw__default_options[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

cw_status_t cw_pjrt_compile(const cw_pjrt_t* p, const char* format, const uint8_t* code,
                            size_t code_size, const uint8_t* options, size_t options_size,
                            PJRT_LoadedExecutable** out) {
  *out = NULL;
  CW_PJRT_ARGS(PJRT_Program, prog);
  prog.code = (char*)(uintptr_t)code;
  prog.code_size = code_size;
  prog.format = format;
  prog.format_size = strlen(format);
  if (!options_size) {
    options = cw__default_options;
    options_size = sizeof(cw__default_options);
  }
  CW_PJRT_ARGS(PJRT_Client_Compile_Args, a);
  a.client = p->client;
  a.program = &prog;
  a.compile_options = (const char*)options;
  a.compile_options_size = options_size;
  CW_PJRT_CALL(p, PJRT_Client_Compile, a, "compile");
  *out = a.executable;
  return cw_ok_status();
}

cw_status_t cw_pjrt_deserialize(const cw_pjrt_t* p, const uint8_t* bytes, size_t size,
                                const uint8_t* options, size_t options_size,
                                PJRT_LoadedExecutable** out) {
  *out = NULL;
  CW_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, a);
  a.client = p->client;
  a.serialized_executable = (const char*)bytes;
  a.serialized_executable_size = size;
  if (options_size) {
    a.overridden_serialized_compile_options = (const char*)options;
    a.overridden_serialized_compile_options_size = options_size;
  }
  CW_PJRT_CALL(p, PJRT_Executable_DeserializeAndLoad, a, "deserialize executable");
  *out = a.loaded_executable;
  return cw_ok_status();
}

static cw_status_t cw__get_executable(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                                      PJRT_Executable** out) {
  CW_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, a);
  a.loaded_executable = exe;
  CW_PJRT_CALL(p, PJRT_LoadedExecutable_GetExecutable, a, "get executable");
  *out = a.executable;
  return cw_ok_status();
}

static void cw__executable_free(const cw_pjrt_t* p, PJRT_Executable* e) {
  CW_PJRT_ARGS(PJRT_Executable_Destroy_Args, a);
  a.executable = e;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_Executable_Destroy(&a)));
}

// The loaded executable's addressable devices (*ad, PJRT's array) and its
// PJRT_Executable (*out_exe; free with cw__executable_free).
static cw_status_t cw__devices_and_executable(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                                              PJRT_LoadedExecutable_AddressableDevices_Args* ad,
                                              PJRT_Executable** out_exe) {
  memset(ad, 0, sizeof(*ad));
  ad->struct_size = sizeof(*ad);
  ad->executable = exe;
  CW_PJRT_CALL(p, PJRT_LoadedExecutable_AddressableDevices, *ad, "addressable devices");
  return cw__get_executable(p, exe, out_exe);
}

cw_status_t cw_pjrt_executable_info(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                                    uint32_t* out_num_outputs, uint32_t* out_num_devices,
                                    char** out_name) {
  *out_name = NULL;
  PJRT_LoadedExecutable_AddressableDevices_Args d;
  PJRT_Executable* e = NULL;
  CW_RETURN_IF_ERROR(cw__devices_and_executable(p, exe, &d, &e), "executable info");
  *out_num_devices = (uint32_t)d.num_addressable_devices;
  CW_PJRT_ARGS(PJRT_Executable_NumOutputs_Args, n);
  n.executable = e;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_NumOutputs(&n));
  CW_PJRT_ARGS(PJRT_Executable_Name_Args, nm);
  nm.executable = e;
  if (!st) st = cw_pjrt_status(p, p->api->PJRT_Executable_Name(&nm));
  if (!st) {
    *out_num_outputs = (uint32_t)n.num_outputs;
    *out_name = strndup(nm.executable_name ? nm.executable_name : "", nm.executable_name_size);
  }
  cw__executable_free(p, e);
  return st;
}

cw_status_t cw_pjrt_output_shapes(const cw_pjrt_t* p, PJRT_Executable* e,
                                  PJRT_Executable_OutputElementTypes_Args* t,
                                  PJRT_Executable_OutputDimensions_Args* d) {
  memset(t, 0, sizeof(*t));
  t->struct_size = sizeof(*t);
  t->executable = e;
  memset(d, 0, sizeof(*d));
  d->struct_size = sizeof(*d);
  d->executable = e;
  CW_PJRT_CALL(p, PJRT_Executable_OutputElementTypes, *t, "output element types");
  CW_PJRT_CALL(p, PJRT_Executable_OutputDimensions, *d, "output dimensions");
  if (d->num_outputs != t->num_output_types) {
    return cw_make_status(CW_INTERNAL, "the plugin reports %zu output types but %zu output "
                          "shapes", t->num_output_types, d->num_outputs);
  }
  return cw_ok_status();
}

cw_status_t cw_pjrt_executable_outputs(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                                       int** out_devices, size_t* out_num_devices,
                                       uint64_t** out_bytes, size_t* out_num_outputs) {
  *out_devices = NULL;
  *out_num_devices = 0;
  *out_bytes = NULL;
  *out_num_outputs = 0;
  PJRT_LoadedExecutable_AddressableDevices_Args ad;
  PJRT_Executable* e = NULL;
  CW_RETURN_IF_ERROR(cw__devices_and_executable(p, exe, &ad, &e), "output sizes");
  PJRT_Executable_OutputElementTypes_Args t;
  PJRT_Executable_OutputDimensions_Args d;
  cw_status_t st = cw_pjrt_output_shapes(p, e, &t, &d);
  int* devices = st ? NULL : calloc(ad.num_addressable_devices + 1, sizeof(*devices));
  uint64_t* bytes = st ? NULL : calloc(d.num_outputs + 1, sizeof(*bytes));
  if (!st && (!devices || !bytes)) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    for (size_t i = 0; i < ad.num_addressable_devices; ++i) {
      devices[i] = cw_pjrt_device_index(p, ad.addressable_devices[i]);
    }
    size_t pos = 0;
    for (size_t i = 0; i < d.num_outputs; ++i) {
      // A type with no byte size (sub-byte, token) counts 0: charged once it exists.
      const int64_t* dims = d.dims ? d.dims + pos : NULL;  // NULL: only scalars
      cw_status_t est = cw_array_extent((int)t.output_types[i], dims, d.dim_sizes[i], NULL, 0,
                                        &bytes[i]);
      if (est) bytes[i] = 0;
      cw_status_free(est);
      pos += d.dim_sizes[i];
    }
    *out_devices = devices;
    *out_num_devices = ad.num_addressable_devices;
    *out_bytes = bytes;
    *out_num_outputs = d.num_outputs;
  } else {
    free(devices);
    free(bytes);
  }
  cw__executable_free(p, e);
  return st;
}

cw_status_t cw_pjrt_device_memory_limit(const cw_pjrt_t* p, size_t device,
                                        uint64_t* out_limit) {
  *out_limit = 0;
  if (device >= p->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "device %zu out of range", device);
  }
  CW_PJRT_ARGS(PJRT_Device_MemoryStats_Args, a);
  a.device = p->devices[device];
  CW_PJRT_CALL(p, PJRT_Device_MemoryStats, a, "memory stats of device %zu", device);
  if (a.bytes_limit_is_set && a.bytes_limit > 0) *out_limit = (uint64_t)a.bytes_limit;
  return cw_ok_status();
}

int cw_pjrt_dtype_from_xla(int t) {
  // XLA's PrimitiveType numbers (xla_data.proto; jaxlib 0.11.2's
  // xla_client.PrimitiveType lists them, S2/U2/S1/U1 from XLA's FFI header),
  // checked against modules the CPU plugin compiled; they part from
  // PJRT_Buffer_Type at BF16.
  switch (t) {
    case 1: return PJRT_Buffer_Type_PRED;
    case 2: return PJRT_Buffer_Type_S8;
    case 3: return PJRT_Buffer_Type_S16;
    case 4: return PJRT_Buffer_Type_S32;
    case 5: return PJRT_Buffer_Type_S64;
    case 6: return PJRT_Buffer_Type_U8;
    case 7: return PJRT_Buffer_Type_U16;
    case 8: return PJRT_Buffer_Type_U32;
    case 9: return PJRT_Buffer_Type_U64;
    case 10: return PJRT_Buffer_Type_F16;
    case 11: return PJRT_Buffer_Type_F32;
    case 12: return PJRT_Buffer_Type_F64;
    case 15: return PJRT_Buffer_Type_C64;
    case 16: return PJRT_Buffer_Type_BF16;
    case 18: return PJRT_Buffer_Type_C128;
    case 19: return PJRT_Buffer_Type_F8E5M2;
    case 20: return PJRT_Buffer_Type_F8E4M3FN;
    case 21: return PJRT_Buffer_Type_S4;
    case 22: return PJRT_Buffer_Type_U4;
    case 23: return PJRT_Buffer_Type_F8E4M3B11FNUZ;
    case 24: return PJRT_Buffer_Type_F8E5M2FNUZ;
    case 25: return PJRT_Buffer_Type_F8E4M3FNUZ;
    case 26: return PJRT_Buffer_Type_S2;
    case 27: return PJRT_Buffer_Type_U2;
    case 28: return PJRT_Buffer_Type_F8E4M3;
    case 29: return PJRT_Buffer_Type_F8E3M4;
    case 30: return PJRT_Buffer_Type_S1;
    case 31: return PJRT_Buffer_Type_U1;
    case 32: return PJRT_Buffer_Type_F4E2M1FN;
    case 33: return PJRT_Buffer_Type_F8E8M0FNU;
    case 35: return PJRT_Buffer_Type_F6E3M2FN;
    case 36: return PJRT_Buffer_Type_F6E2M3FN;
    default: return -1;  // TUPLE 13, OPAQUE 14, TOKEN 17, and any newer type
  }
}

void cw_pjrt_shapes_free(cw_pjrt_shape_t* shapes, size_t n) {
  for (size_t i = 0; shapes && i < n; ++i) free(shapes[i].dims);
  free(shapes);
}

cw_status_t cw_pjrt_params_from_hlo(const uint8_t* bytes, size_t size, bool with_config,
                                    cw_pjrt_shape_t** out, size_t* out_n) {
  *out = NULL;
  *out_n = 0;
  // A Shape holds Shapes (found by hlo_params_fuzz: 100000 levels overflowed the stack).
  if (!cw_pb_nesting_ok(with_config ? &causeway__xla__hlo_module_with_config__descriptor
                                    : &causeway__xla__hlo_module__descriptor,
                        bytes, size, CW_PB_MAX_NESTING)) {
    return cw_make_status(CW_UNIMPLEMENTED,
                          "optimized program nests messages deeper than %d levels",
                          CW_PB_MAX_NESTING);
  }
  Causeway__Xla__HloModuleWithConfig* wrap = NULL;
  Causeway__Xla__HloModule* mod = NULL;
  if (with_config) {
    wrap = causeway__xla__hlo_module_with_config__unpack(NULL, size, bytes);
    if (!wrap) return cw_make_status(CW_INTERNAL, "optimized program does not decode");
  } else {
    mod = causeway__xla__hlo_module__unpack(NULL, size, bytes);
    if (!mod) return cw_make_status(CW_INTERNAL, "optimized program does not decode");
  }
  const Causeway__Xla__HloModule* m = with_config ? wrap->hlo_module : mod;
  const Causeway__Xla__ProgramShape* ps = m ? m->host_program_shape : NULL;
  cw_status_t st = cw_ok_status();
  cw_pjrt_shape_t* shapes = NULL;
  size_t n = 0;
  if (!ps) {
    st = cw_make_status(CW_UNIMPLEMENTED, "optimized program has no host program shape");
  } else {
    Causeway__Xla__Shape* const* params = ps->parameters;
    size_t np = ps->n_parameters;
    shapes = calloc(np ? np : 1, sizeof(*shapes));
    if (!shapes) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; !st && i < np; ++i) {
      const Causeway__Xla__Shape* sh = params[i];
      shapes[i].dtype = sh->n_tuple_shapes ? -1 : cw_pjrt_dtype_from_xla(sh->element_type);
      shapes[i].rank = sh->n_dimensions;
      shapes[i].dims = malloc((sh->n_dimensions ? sh->n_dimensions : 1) * sizeof(int64_t));
      if (!shapes[i].dims) {
        st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      if (sh->n_dimensions) memcpy(shapes[i].dims, sh->dimensions, sh->n_dimensions * sizeof(int64_t));
      n++;
    }
    // A parameter any of whose buffers is aliased is donated whole, as
    // XLA's PJRT clients do.
    const Causeway__Xla__InputOutputAlias* io = m->input_output_alias;
    for (size_t i = 0; !st && io && i < io->n_entries; ++i) {
      int64_t pn = io->entries[i]->parameter_number;
      if (pn >= 0 && (uint64_t)pn < n) shapes[pn].donated = true;
    }
  }
  if (wrap) causeway__xla__hlo_module_with_config__free_unpacked(wrap, NULL);
  if (mod) causeway__xla__hlo_module__free_unpacked(mod, NULL);
  if (st) {
    cw_pjrt_shapes_free(shapes, n);
    return st;
  }
  *out = shapes;
  *out_n = n;
  return cw_ok_status();
}

cw_status_t cw_pjrt_executable_params(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                                      cw_pjrt_shape_t** out, size_t* out_n) {
  *out = NULL;
  *out_n = 0;
  if (!p->api->PJRT_Executable_OptimizedProgram) {
    return cw_make_status(CW_UNIMPLEMENTED, "the plugin has no PJRT_Executable_OptimizedProgram");
  }
  PJRT_Executable* e = NULL;
  CW_RETURN_IF_ERROR(cw__get_executable(p, exe, &e), "parameter shapes");
  // Two calls: the size (code NULL), then the bytes.
  CW_PJRT_ARGS(PJRT_Program, prog);
  CW_PJRT_ARGS(PJRT_Executable_OptimizedProgram_Args, a);
  a.executable = e;
  a.program = &prog;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_OptimizedProgram(&a));
  char* code = NULL;
  if (!st) {
    code = malloc(prog.code_size ? prog.code_size : 1);
    if (!code) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st) {
    prog.code = code;
    st = cw_pjrt_status(p, p->api->PJRT_Executable_OptimizedProgram(&a));
  }
  if (!st) {
    size_t fl = prog.format ? prog.format_size : 0;
    bool hlo = fl == 3 && !memcmp(prog.format, "hlo", 3);
    bool with_config = fl == 15 && !memcmp(prog.format, "hlo_with_config", 15);
    if (hlo || with_config) {
      st = cw_pjrt_params_from_hlo((const uint8_t*)code, prog.code_size, with_config, out, out_n);
    } else {
      st = cw_make_status(CW_UNIMPLEMENTED, "optimized program in format '%.*s'", (int)fl,
                          prog.format ? prog.format : "");
    }
  }
  free(code);
  cw__executable_free(p, e);
  return st;
}

cw_status_t cw_pjrt_serialize(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                              const uint8_t** out_bytes, size_t* out_size, void** out_handle,
                              void (**out_deleter)(void*)) {
  PJRT_Executable* e = NULL;
  CW_RETURN_IF_ERROR(cw__get_executable(p, exe, &e), "serialize");
  CW_PJRT_ARGS(PJRT_Executable_Serialize_Args, a);
  a.executable = e;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_Serialize(&a));
  cw__executable_free(p, e);
  CW_RETURN_IF_ERROR(st, "serialize");
  *out_bytes = (const uint8_t*)a.serialized_bytes;
  *out_size = a.serialized_bytes_size;
  *out_handle = a.serialized_executable;
  *out_deleter = (void (*)(void*))a.serialized_executable_deleter;
  return cw_ok_status();
}

void cw_pjrt_executable_destroy(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe) {
  if (!exe) return;
  CW_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, a);
  a.executable = exe;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_LoadedExecutable_Destroy(&a)));
}

static cw_status_t cw__check_device(const cw_pjrt_t* p, int device) {
  if (device < 0 || (size_t)device >= p->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "device %d is not one of this worker's %zu devices",
                          device, p->num_devices);
  }
  return cw_ok_status();
}

cw_status_t cw_pjrt_memory_of_kind(const cw_pjrt_t* p, int device, const char* kind,
                                   PJRT_Memory** out) {
  *out = NULL;
  if (!kind || !kind[0]) return cw_ok_status();
  CW_RETURN_IF_ERROR(cw__check_device(p, device), "memory kind");
  CW_PJRT_ARGS(PJRT_Device_AddressableMemories_Args, ms);
  ms.device = p->devices[device];
  CW_PJRT_CALL(p, PJRT_Device_AddressableMemories, ms, "memories of device %d", device);
  char have[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < ms.num_memories; ++i) {
    CW_PJRT_ARGS(PJRT_Memory_Kind_Args, mk);
    mk.memory = ms.memories[i];
    CW_PJRT_CALL(p, PJRT_Memory_Kind, mk, "memory kind");
    if (mk.kind_size == strlen(kind) && !memcmp(mk.kind, kind, mk.kind_size)) {
      *out = ms.memories[i];
      return cw_ok_status();
    }
    if (used < sizeof(have)) {
      used += (size_t)snprintf(have + used, sizeof(have) - used, "%s%.*s", i ? ", " : "",
                               (int)mk.kind_size, mk.kind);
    }
  }
  return cw_make_status(CW_INVALID_ARGUMENT,
                        "device %d has no memory of kind \"%.64s\" (it has: %s)", device, kind,
                        have[0] ? have : "none");
}

cw_status_t cw_pjrt_upload(const cw_pjrt_t* p, const void* data, int dtype, const int64_t* dims,
                           size_t rank, const int64_t* strides, size_t num_strides, int device,
                           PJRT_Memory* memory, bool zero_copy, PJRT_Buffer** out_buffer,
                           PJRT_Event** out_done) {
  *out_buffer = NULL;
  *out_done = NULL;
  CW_RETURN_IF_ERROR(cw__check_device(p, device), "upload");
  CW_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args, a);
  a.client = p->client;
  a.data = data;
  a.type = (PJRT_Buffer_Type)dtype;
  a.dims = dims;
  a.num_dims = rank;
  a.byte_strides = num_strides ? strides : NULL;
  a.num_byte_strides = num_strides;
  a.host_buffer_semantics = zero_copy ? PJRT_HostBufferSemantics_kImmutableZeroCopy
                                      : PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  // As JAX does: a memory (the device's default unless given), device NULL.
  if (memory || p->default_memories[device]) {
    a.memory = memory ? memory : p->default_memories[device];
  } else {
    a.device = p->devices[device];
  }
  CW_PJRT_CALL(p, PJRT_Client_BufferFromHostBuffer, a, "upload to device %d", device);
  *out_buffer = a.buffer;
  *out_done = a.done_with_host_buffer;
  return cw_ok_status();
}

cw_status_t cw_pjrt_to_host(const cw_pjrt_t* p, PJRT_Buffer* buffer, size_t rank, void* dst,
                            size_t size, PJRT_Event** out_event) {
  *out_event = NULL;
  if (rank > CW_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "download: rank %zu is over %d", rank, CW_MAX_RANK);
  }
  // Asked for by name: without a host layout XLA copies the device's own (a
  // program's column-major output would arrive transposed).
  int64_t minor_to_major[CW_MAX_RANK];
  for (size_t i = 0; i < rank; ++i) minor_to_major[i] = (int64_t)(rank - 1 - i);
  PJRT_Buffer_MemoryLayout host_layout = {.struct_size = sizeof host_layout,
                                          .type = PJRT_Buffer_MemoryLayout_Type_Tiled};
  host_layout.tiled.struct_size = sizeof host_layout.tiled;
  host_layout.tiled.minor_to_major = minor_to_major;
  host_layout.tiled.minor_to_major_size = rank;
  CW_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, a);
  a.src = buffer;
  a.host_layout = &host_layout;
  a.dst = dst;
  a.dst_size = size;
  CW_PJRT_CALL(p, PJRT_Buffer_ToHostBuffer, a, "download");
  *out_event = a.event;
  return cw_ok_status();
}

cw_status_t cw_pjrt_ready_event(const cw_pjrt_t* p, PJRT_Buffer* buffer, PJRT_Event** out) {
  *out = NULL;
  CW_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, a);
  a.buffer = buffer;
  CW_PJRT_CALL(p, PJRT_Buffer_ReadyEvent, a, "ready event");
  *out = a.event;
  return cw_ok_status();
}

cw_status_t cw_pjrt_copy(const cw_pjrt_t* p, PJRT_Buffer* buffer, int device,
                         PJRT_Memory* memory, PJRT_Buffer** out) {
  *out = NULL;
  CW_RETURN_IF_ERROR(cw__check_device(p, device), "copy");
  if (memory || p->default_memories[device]) {
    CW_PJRT_ARGS(PJRT_Buffer_CopyToMemory_Args, a);
    a.buffer = buffer;
    a.dst_memory = memory ? memory : p->default_memories[device];
    CW_PJRT_CALL(p, PJRT_Buffer_CopyToMemory, a, "copy to device %d", device);
    *out = a.dst_buffer;
  } else {
    CW_PJRT_ARGS(PJRT_Buffer_CopyToDevice_Args, a);
    a.buffer = buffer;
    a.dst_device = p->devices[device];
    CW_PJRT_CALL(p, PJRT_Buffer_CopyToDevice, a, "copy to device %d", device);
    *out = a.dst_buffer;
  }
  return cw_ok_status();
}

cw_status_t cw_pjrt_buffer_info(const cw_pjrt_t* p, PJRT_Buffer* buffer, int* out_dtype,
                                int64_t** out_dims, size_t* out_rank, int* out_device) {
  *out_dims = NULL;
  CW_PJRT_ARGS(PJRT_Buffer_ElementType_Args, t);
  t.buffer = buffer;
  CW_PJRT_CALL(p, PJRT_Buffer_ElementType, t, "element type");
  CW_PJRT_ARGS(PJRT_Buffer_Dimensions_Args, d);
  d.buffer = buffer;
  CW_PJRT_CALL(p, PJRT_Buffer_Dimensions, d, "dimensions");
  CW_PJRT_ARGS(PJRT_Buffer_Device_Args, dev);
  dev.buffer = buffer;
  CW_PJRT_CALL(p, PJRT_Buffer_Device, dev, "device");
  int64_t* dims = malloc((d.num_dims ? d.num_dims : 1) * sizeof(int64_t));
  if (!dims) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (d.num_dims) memcpy(dims, d.dims, d.num_dims * sizeof(int64_t));
  *out_dtype = (int)t.type;
  *out_dims = dims;
  *out_rank = d.num_dims;
  *out_device = cw_pjrt_device_index(p, dev.device);
  return cw_ok_status();
}

uintptr_t cw_pjrt_buffer_pointer(const cw_pjrt_t* p, PJRT_Buffer* buffer) {
  if (!p->api->PJRT_Buffer_UnsafePointer) return 0;
  CW_PJRT_ARGS(PJRT_Buffer_UnsafePointer_Args, a);
  a.buffer = buffer;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Buffer_UnsafePointer(&a));
  if (st) {
    cw_status_free(st);
    return 0;
  }
  return a.buffer_pointer;
}

const void* cw_pjrt_buffer_host_view(const cw_pjrt_t* p, PJRT_Buffer* buffer, size_t rank) {
  if (!p->host_memory || !p->api->PJRT_Buffer_UnsafePointer) return NULL;
  // Sub-byte types are packed on the device but one byte each on the host.
  CW_PJRT_ARGS(PJRT_Buffer_ElementType_Args, t);
  t.buffer = buffer;
  cw_status_t tst = cw_pjrt_status(p, p->api->PJRT_Buffer_ElementType(&t));
  if (tst || cw_dtype_packed((int)t.type)) {
    cw_status_free(tst);
    return NULL;
  }
  if (p->api->PJRT_Buffer_GetMemoryLayout) {
    CW_PJRT_ARGS(PJRT_Buffer_GetMemoryLayout_Args, l);
    l.buffer = buffer;
    cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Buffer_GetMemoryLayout(&l));
    if (st) {
      cw_status_free(st);
      return NULL;
    }
    // Dense row-major: tiled with no tiles and minor_to_major = rank-1 .. 0.
    if (l.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || l.layout.tiled.num_tiles ||
        l.layout.tiled.minor_to_major_size != rank) {
      return NULL;
    }
    for (size_t i = 0; i < rank; ++i) {
      if (l.layout.tiled.minor_to_major[i] != (int64_t)(rank - 1 - i)) return NULL;
    }
  } else {
    return NULL;
  }
  uintptr_t ptr = cw_pjrt_buffer_pointer(p, buffer);
  return ptr ? (const void*)ptr : NULL;
}

bool cw_pjrt_buffer_hold(const cw_pjrt_t* p, PJRT_Buffer* buffer) {
  if (!p->api->PJRT_Buffer_IncreaseExternalReferenceCount) return false;
  CW_PJRT_ARGS(PJRT_Buffer_IncreaseExternalReferenceCount_Args, a);
  a.buffer = buffer;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Buffer_IncreaseExternalReferenceCount(&a));
  if (st) {
    cw_status_free(st);
    return false;
  }
  return true;
}

void cw_pjrt_buffer_unhold(const cw_pjrt_t* p, PJRT_Buffer* buffer) {
  CW_PJRT_ARGS(PJRT_Buffer_DecreaseExternalReferenceCount_Args, a);
  a.buffer = buffer;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_Buffer_DecreaseExternalReferenceCount(&a)));
}

void cw_pjrt_buffer_destroy(const cw_pjrt_t* p, PJRT_Buffer* buffer) {
  if (!buffer) return;
  CW_PJRT_ARGS(PJRT_Buffer_Destroy_Args, a);
  a.buffer = buffer;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_Buffer_Destroy(&a)));
}

cw_status_t cw_pjrt_execute(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe, size_t num_devices,
                            size_t num_args, PJRT_Buffer* const* const* argument_lists,
                            PJRT_Buffer** const* output_lists, PJRT_Event** events,
                            int launch_id, const bool* donate, PJRT_ExecuteContext* context) {
  // Inputs stay owned by the store unless the caller donates them.
  int64_t* keep = calloc(num_args ? num_args : 1, sizeof(int64_t));
  if (!keep) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  size_t num_keep = 0;
  for (size_t i = 0; i < num_args; ++i) {
    if (!donate || !donate[i]) keep[num_keep++] = (int64_t)i;
  }
  CW_PJRT_ARGS(PJRT_ExecuteOptions, o);
  o.launch_id = launch_id;
  o.non_donatable_input_indices = keep;
  o.num_non_donatable_input_indices = num_keep;
  o.context = context;
  CW_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, a);
  a.executable = exe;
  a.options = &o;
  a.argument_lists = argument_lists;
  a.num_devices = num_devices;
  a.num_args = num_args;
  a.output_lists = output_lists;
  a.device_complete_events = events;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_LoadedExecutable_Execute(&a));
  free(keep);
  return cw_status_annotate(st, "execute");
}

// --- Inventory ------------------------------------------------------------

static char* cw__strndup(const char* s, size_t n) { return strndup(s ? s : "", s ? n : 0); }

// Converts PJRT named values to wire NamedValues (malloc'd array).
static cw_status_t cw__named_values(const PJRT_NamedValue* in, size_t n,
                                    Causeway__V1__NamedValue*** out, size_t* out_n) {
  *out = calloc(n ? n : 1, sizeof(**out));
  *out_n = 0;
  if (!*out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < n; ++i) {
    Causeway__V1__NamedValue* v = calloc(1, sizeof(*v));
    if (!v) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    causeway__v1__named_value__init(v);
    (*out)[(*out_n)++] = v;
    v->name = cw__strndup(in[i].name, in[i].name_size);
    switch (in[i].type) {
      case PJRT_NamedValue_kString:
        v->value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_S;
        v->s = cw__strndup(in[i].string_value, in[i].value_size);
        break;
      case PJRT_NamedValue_kInt64:
        v->value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_I;
        v->i = in[i].int64_value;
        break;
      case PJRT_NamedValue_kInt64List: {
        v->value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST;
        v->list = calloc(1, sizeof(*v->list));
        if (!v->list) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
        causeway__v1__int64_list__init(v->list);
        v->list->values = calloc(in[i].value_size ? in[i].value_size : 1, sizeof(int64_t));
        if (!v->list->values) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
        if (in[i].value_size) {
          memcpy(v->list->values, in[i].int64_array_value, in[i].value_size * sizeof(int64_t));
        }
        v->list->n_values = in[i].value_size;
        break;
      }
      case PJRT_NamedValue_kFloat:
        v->value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_F;
        v->f = in[i].float_value;
        break;
      case PJRT_NamedValue_kBool:
        v->value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_B;
        v->b = in[i].bool_value;
        break;
      default:
        break;
    }
  }
  return cw_ok_status();
}

static cw_status_t cw__device(const cw_pjrt_t* p, size_t index, Causeway__V1__Device* d) {
  PJRT_Device* dev = p->devices[index];
  d->local_id = (int32_t)index;
  CW_PJRT_ARGS(PJRT_Device_GetDescription_Args, g);
  g.device = dev;
  CW_PJRT_CALL(p, PJRT_Device_GetDescription, g, "device %zu", index);
  CW_PJRT_ARGS(PJRT_DeviceDescription_Id_Args, id);
  id.device_description = g.device_description;
  CW_PJRT_CALL(p, PJRT_DeviceDescription_Id, id, "device id");
  d->id = id.id;
  CW_PJRT_ARGS(PJRT_DeviceDescription_Kind_Args, k);
  k.device_description = g.device_description;
  CW_PJRT_CALL(p, PJRT_DeviceDescription_Kind, k, "device kind");
  d->kind = cw__strndup(k.device_kind, k.device_kind_size);
  CW_PJRT_ARGS(PJRT_DeviceDescription_DebugString_Args, ds);
  ds.device_description = g.device_description;
  CW_PJRT_CALL(p, PJRT_DeviceDescription_DebugString, ds, "device debug string");
  d->debug_string = cw__strndup(ds.debug_string, ds.debug_string_size);
  CW_PJRT_ARGS(PJRT_DeviceDescription_Attributes_Args, at);
  at.device_description = g.device_description;
  CW_PJRT_CALL(p, PJRT_DeviceDescription_Attributes, at, "device attributes");
  CW_RETURN_IF_ERROR(cw__named_values(at.attributes, at.num_attributes, &d->attributes,
                                      &d->n_attributes), "device attributes");
  CW_PJRT_ARGS(PJRT_Device_LocalHardwareId_Args, hw);
  hw.device = dev;
  CW_PJRT_CALL(p, PJRT_Device_LocalHardwareId, hw, "local hardware id");
  d->local_hardware_id = hw.local_hardware_id;
  d->default_memory = -1;
  CW_PJRT_ARGS(PJRT_Device_AddressableMemories_Args, ms);
  ms.device = dev;
  CW_PJRT_CALL(p, PJRT_Device_AddressableMemories, ms, "device memories");
  d->memories = calloc(ms.num_memories ? ms.num_memories : 1, sizeof(*d->memories));
  if (!d->memories) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < ms.num_memories; ++i) {
    Causeway__V1__Memory* m = calloc(1, sizeof(*m));
    if (!m) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    causeway__v1__memory__init(m);
    d->memories[d->n_memories++] = m;
    CW_PJRT_ARGS(PJRT_Memory_Id_Args, mi);
    mi.memory = ms.memories[i];
    CW_PJRT_CALL(p, PJRT_Memory_Id, mi, "memory id");
    m->id = mi.id;
    CW_PJRT_ARGS(PJRT_Memory_Kind_Args, mk);
    mk.memory = ms.memories[i];
    CW_PJRT_CALL(p, PJRT_Memory_Kind, mk, "memory kind");
    m->kind = cw__strndup(mk.kind, mk.kind_size);
    CW_PJRT_ARGS(PJRT_Memory_Kind_Id_Args, mki);
    mki.memory = ms.memories[i];
    CW_PJRT_CALL(p, PJRT_Memory_Kind_Id, mki, "memory kind id");
    m->kind_id = mki.kind_id;
    if (ms.memories[i] == p->default_memories[index]) d->default_memory = mi.id;
  }
  return cw_ok_status();
}

cw_status_t cw_pjrt_process_index(const cw_pjrt_t* p, int* out_index) {
  CW_PJRT_ARGS(PJRT_Client_ProcessIndex_Args, a);
  a.client = p->client;
  CW_PJRT_CALL(p, PJRT_Client_ProcessIndex, a, "process index");
  *out_index = a.process_index;
  return cw_ok_status();
}

cw_status_t cw_pjrt_inventory_initialize(const cw_pjrt_t* p, Causeway__V1__Inventory* inv) {
  causeway__v1__inventory__init(inv);
  CW_PJRT_ARGS(PJRT_Client_PlatformName_Args, pn);
  pn.client = p->client;
  CW_PJRT_CALL(p, PJRT_Client_PlatformName, pn, "platform name");
  inv->platform_name = cw__strndup(pn.platform_name, pn.platform_name_size);
  CW_PJRT_ARGS(PJRT_Client_PlatformVersion_Args, pv);
  pv.client = p->client;
  CW_PJRT_CALL(p, PJRT_Client_PlatformVersion, pv, "platform version");
  inv->platform_version = cw__strndup(pv.platform_version, pv.platform_version_size);
  inv->pjrt_major = (uint32_t)p->api->pjrt_api_version.major_version;
  inv->pjrt_minor = (uint32_t)p->api->pjrt_api_version.minor_version;
  CW_PJRT_ARGS(PJRT_Plugin_Attributes_Args, pa);
  CW_PJRT_CALL(p, PJRT_Plugin_Attributes, pa, "plugin attributes");
  CW_RETURN_IF_ERROR(cw__named_values(pa.attributes, pa.num_attributes, &inv->plugin_attributes,
                                      &inv->n_plugin_attributes), "plugin attributes");
  inv->devices = calloc(p->num_devices ? p->num_devices : 1, sizeof(*inv->devices));
  if (!inv->devices) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < p->num_devices; ++i) {
    Causeway__V1__Device* d = calloc(1, sizeof(*d));
    if (!d) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    causeway__v1__device__init(d);
    inv->devices[inv->n_devices++] = d;
    CW_RETURN_IF_ERROR(cw__device(p, i, d), "inventory");
  }
  return cw_ok_status();
}

static void cw__free_named_values(Causeway__V1__NamedValue** v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!v[i]) continue;
    if (v[i]->name != protobuf_c_empty_string) free(v[i]->name);
    if (v[i]->value_case == CAUSEWAY__V1__NAMED_VALUE__VALUE_S) free(v[i]->s);
    if (v[i]->value_case == CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST && v[i]->list) {
      free(v[i]->list->values);
      free(v[i]->list);
    }
    free(v[i]);
  }
  free(v);
}

static void cw__free_str(char* s) {
  if (s != protobuf_c_empty_string) free(s);
}

void cw_pjrt_inventory_deinitialize(Causeway__V1__Inventory* inv) {
  cw__free_str(inv->platform_name);
  cw__free_str(inv->platform_version);
  cw__free_named_values(inv->plugin_attributes, inv->n_plugin_attributes);
  for (size_t i = 0; i < inv->n_devices; ++i) {
    Causeway__V1__Device* d = inv->devices[i];
    cw__free_str(d->kind);
    cw__free_str(d->debug_string);
    cw__free_named_values(d->attributes, d->n_attributes);
    for (size_t j = 0; j < d->n_memories; ++j) {
      cw__free_str(d->memories[j]->kind);
      free(d->memories[j]);
    }
    free(d->memories);
    free(d);
  }
  free(inv->devices);
  causeway__v1__inventory__init(inv);
}

// --- FFI extension ---------------------------------------------------------------

static const PJRT_FFI_Extension* cw__ffi(const cw_pjrt_t* p) {
  const PJRT_Extension_Base* e = cw_pjrt_find_extension(p->api, PJRT_Extension_Type_FFI);
  if (!e || e->struct_size < sizeof(PJRT_FFI_Extension)) return NULL;
  return (const PJRT_FFI_Extension*)e;
}

static cw_status_t cw__no_ffi(const char* what) {
  return cw_make_status(CW_UNIMPLEMENTED, "%s: the PJRT plugin has no FFI extension", what);
}

cw_status_t cw_pjrt_ffi_register_handler(const cw_pjrt_t* p, const char* target,
                                         const char* platform, void* handler,
                                         uint32_t traits) {
  const PJRT_FFI_Extension* ffi = cw__ffi(p);
  if (!ffi || !ffi->register_handler) return cw__no_ffi("registering an FFI handler");
  PJRT_FFI_Register_Handler_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_FFI_Register_Handler_Args, traits);
  a.target_name = target;
  a.target_name_size = strlen(target);
  a.handler = handler;
  a.platform_name = platform;
  a.platform_name_size = strlen(platform);
  a.traits = traits;
  return cw_status_annotate(cw_pjrt_status(p, ffi->register_handler(&a)),
                            "registering FFI handler %s for %s", target, platform);
}

cw_status_t cw_pjrt_ffi_register_type(const cw_pjrt_t* p, const char* name,
                                      int64_t* out_type_id) {
  *out_type_id = 0;
  const PJRT_FFI_Extension* ffi = cw__ffi(p);
  if (!ffi || !ffi->type_register) return cw__no_ffi("registering an FFI type");
  static const PJRT_FFI_Type_Info info = {NULL, NULL, NULL};  // our data is never XLA's to free
  PJRT_FFI_Type_Register_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_FFI_Type_Register_Args, type_info);
  a.type_name = name;
  a.type_name_size = strlen(name);
  a.type_info = &info;
  CW_RETURN_IF_ERROR(cw_pjrt_status(p, ffi->type_register(&a)), "registering FFI type %s", name);
  *out_type_id = a.type_id;
  return cw_ok_status();
}

cw_status_t cw_pjrt_execute_context_create(const cw_pjrt_t* p, int64_t type_id, void* data,
                                           PJRT_ExecuteContext** out) {
  *out = NULL;
  const PJRT_FFI_Extension* ffi = cw__ffi(p);
  if (!ffi || !ffi->user_data_add) return cw__no_ffi("an execute context");
  CW_PJRT_ARGS(PJRT_ExecuteContext_Create_Args, c);
  CW_PJRT_CALL(p, PJRT_ExecuteContext_Create, c, "creating an execute context");
  PJRT_FFI_UserData_Add_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_FFI_UserData_Add_Args, user_data);
  a.context = c.context;
  a.user_data.type_id = type_id;
  a.user_data.data = data;
  cw_status_t st = cw_pjrt_status(p, ffi->user_data_add(&a));
  if (st) {
    cw_pjrt_execute_context_destroy(p, c.context);
    return cw_status_annotate(st, "adding user data to an execute context");
  }
  *out = c.context;
  return cw_ok_status();
}

void cw_pjrt_execute_context_destroy(const cw_pjrt_t* p, PJRT_ExecuteContext* context) {
  if (!context) return;
  PJRT_ExecuteContext_Destroy_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.context = context;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_ExecuteContext_Destroy(&a)));
}
