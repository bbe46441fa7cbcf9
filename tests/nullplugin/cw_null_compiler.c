// JAX's programs on the null plugin: with CW_NULL_COMPILER naming a PJRT
// plugin that compiles StableHLO (XLA's CPU plugin), an "mlir" program is
// compiled there only to learn its outputs and its optimized HLO, which JAX
// reads for shardings and layouts. The compiled code is dropped: executions
// stay null (zeros of the outputs' shapes), so JAX's own dispatch can be
// measured with a device that costs nothing, in-process and behind causeway.
#include <dlfcn.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_nullplugin.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const PJRT_Api* _Atomic g_api;  // NULL: g_why says why; set once
static char g_why[512];

// Tries again on every call until it loads, so a fixed CW_NULL_COMPILER is
// taken without a restart.
static void cw__load(void) {
  const char* path = getenv("CW_NULL_COMPILER");
  if (!path || !*path) {
    snprintf(g_why, sizeof g_why, "CW_NULL_COMPILER is not set");
    return;
  }
  // Never closed: the compiler's threads live as long as the process.
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CW_PJRT_GetPjrtApi_Fn get =
      h ? (CW_PJRT_GetPjrtApi_Fn)(uintptr_t)dlsym(h, CW_PJRT_GET_API_SYMBOL) : NULL;
  const PJRT_Api* api = get ? get() : NULL;
  if (!api) {
    const char* why = dlerror();
    if (h) dlclose(h);
    snprintf(g_why, sizeof g_why, "CW_NULL_COMPILER=%s: %s", path,
             why ? why : "GetPjrtApi returned no table");
    return;
  }
  PJRT_Plugin_Initialize_Args a = {.struct_size = sizeof a};
  PJRT_Error* e = api->PJRT_Plugin_Initialize ? api->PJRT_Plugin_Initialize(&a) : NULL;
  if (e) {
    PJRT_Error_Destroy_Args d = {.struct_size = sizeof d, .error = e};
    api->PJRT_Error_Destroy(&d);
    snprintf(g_why, sizeof g_why, "CW_NULL_COMPILER=%s: PJRT_Plugin_Initialize failed", path);
    return;
  }
  g_api = api;
}

const PJRT_Api* cw_null_compiler_api(void) {
  if (g_api) return g_api;
  pthread_mutex_lock(&g_mu);
  if (!g_api) cw__load();
  pthread_mutex_unlock(&g_mu);
  return g_api;
}

// The compiler's error as one of ours, prefixed with what was being done.
static PJRT_Error* cw__adopt(PJRT_Error* theirs, const char* doing) {
  PJRT_Error_Message_Args m = {.struct_size = sizeof m, .error = theirs};
  g_api->PJRT_Error_Message(&m);
  PJRT_Error_GetCode_Args c = {.struct_size = sizeof c, .error = theirs};
  PJRT_Error_Code code = g_api->PJRT_Error_GetCode(&c) ? PJRT_Error_Code_INTERNAL : c.code;
  PJRT_Error* ours = cw_null_err(code, "cw_nullplugin: the compiler (CW_NULL_COMPILER) %s: %.*s",
                                 doing, (int)(m.message_size > 2000 ? 2000 : m.message_size),
                                 m.message);
  PJRT_Error_Destroy_Args d = {.struct_size = sizeof d, .error = theirs};
  g_api->PJRT_Error_Destroy(&d);
  return ours;
}

PJRT_Error* cw_null_compiler_attributes(PJRT_Plugin_Attributes_Args* a) {
  a->attributes = NULL;
  a->num_attributes = 0;
  if (!cw_null_compiler_api()) return NULL;
  // JAX serializes StableHLO for the version the compiler reports.
  PJRT_Plugin_Attributes_Args t = {.struct_size = sizeof t};
  PJRT_Error* e = g_api->PJRT_Plugin_Attributes(&t);
  if (e) return cw__adopt(e, "gave no attributes");
  a->attributes = t.attributes;
  a->num_attributes = t.num_attributes;
  return NULL;
}

void cw_null_compiler_release(cw_null_client_t* c) {
  if (!c->compiler) return;
  PJRT_Client_Destroy_Args d = {.struct_size = sizeof d, .client = c->compiler};
  PJRT_Error* e = g_api->PJRT_Client_Destroy(&d);
  if (e) cw_null_error_free(cw__adopt(e, "failed to destroy its client"));
  c->compiler = NULL;
}

// The compiler's client, with as many devices as c: the compile options'
// device ids are c's, 0 to n-1, as the CPU plugin numbers its own.
static PJRT_Error* cw__client(cw_null_client_t* c, PJRT_Client** out) {
  pthread_mutex_lock(&c->compiler_mu);
  PJRT_Error* e = NULL;
  if (!c->compiler) {
    PJRT_NamedValue n = {.struct_size = sizeof n,
                         .name = "cpu_device_count",
                         .name_size = strlen("cpu_device_count"),
                         .type = PJRT_NamedValue_kInt64,
                         .int64_value = (int64_t)c->num_devices,
                         .value_size = 1};
    PJRT_Client_Create_Args a = {.struct_size = sizeof a, .create_options = &n, .num_options = 1};
    e = g_api->PJRT_Client_Create(&a);
    if (e) e = cw__adopt(e, "could not make a client");
    else c->compiler = a.client;
  }
  *out = c->compiler;
  pthread_mutex_unlock(&c->compiler_mu);
  return e;
}

// Appends "TYPE[d,d] " for each output of x to text.
static PJRT_Error* cw__outputs(PJRT_Executable* x, char* text, size_t cap) {
  PJRT_Executable_OutputElementTypes_Args t = {.struct_size = sizeof t, .executable = x};
  PJRT_Executable_OutputDimensions_Args d = {.struct_size = sizeof d, .executable = x};
  PJRT_Error* e = g_api->PJRT_Executable_OutputElementTypes(&t);
  if (!e) e = g_api->PJRT_Executable_OutputDimensions(&d);
  if (e) return cw__adopt(e, "gave no output shapes");
  if (t.num_output_types != d.num_outputs || d.num_outputs > CW_NULL_MAX_OUTPUTS) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                       "cw_nullplugin: a program of %zu outputs (at most %d)", d.num_outputs,
                       CW_NULL_MAX_OUTPUTS);
  }
  size_t n = 0;
  const int64_t* dims = d.dims;
  for (size_t o = 0; o < d.num_outputs; dims += d.dim_sizes[o++]) {
    const char* name = cw_null_type_name(t.output_types[o]);
    if (!name) {
      return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                         "cw_nullplugin: output %zu has element type %d, which null "
                         "programs cannot declare",
                         o, (int)t.output_types[o]);
    }
    n += (size_t)snprintf(text + n, n < cap ? cap - n : 0, "%s[", name);
    for (size_t k = 0; k < d.dim_sizes[o]; ++k) {
      n += (size_t)snprintf(text + n, n < cap ? cap - n : 0, "%s%" PRId64, k ? "," : "", dims[k]);
    }
    n += (size_t)snprintf(text + n, n < cap ? cap - n : 0, "] ");
  }
  if (n >= cap) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED, "cw_nullplugin: outputs too many to name");
  }
  return NULL;
}

static PJRT_Error* cw__optimized(PJRT_Executable* x, cw_null_compiled_t* out) {
  PJRT_Program p = {.struct_size = sizeof p};
  PJRT_Executable_OptimizedProgram_Args a = {.struct_size = sizeof a, .executable = x,
                                             .program = &p};
  PJRT_Error* e = g_api->PJRT_Executable_OptimizedProgram(&a);  // the size
  if (!e && !(p.code = malloc(p.code_size ? p.code_size : 1))) return CW_NULL_OOM;
  if (!e) e = g_api->PJRT_Executable_OptimizedProgram(&a);
  if (e) {
    free(p.code);
    return cw__adopt(e, "gave no optimized program");
  }
  out->hlo = p.code;
  out->hlo_size = p.code_size;
  snprintf(out->hlo_format, sizeof out->hlo_format, "%.*s",
           (int)(p.format_size < sizeof out->hlo_format ? p.format_size : 0), p.format);
  return NULL;
}

PJRT_Error* cw_null_compiler_compile(cw_null_client_t* c, const PJRT_Client_Compile_Args* a,
                                     cw_null_compiled_t* out) {
  memset(out, 0, sizeof *out);
  if (!cw_null_compiler_api()) {
    pthread_mutex_lock(&g_mu);
    PJRT_Error* e = cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION,
                                "cw_nullplugin compiles 'mlir' programs only through a compiler "
                                "plugin named by CW_NULL_COMPILER: %s",
                                g_why);
    pthread_mutex_unlock(&g_mu);
    return e;
  }
  PJRT_Client* client = NULL;
  PJRT_Error* e = cw__client(c, &client);
  if (e) return e;
  PJRT_Client_Compile_Args ca = *a;
  ca.struct_size = sizeof ca;
  ca.client = client;
  ca.executable = NULL;
  e = g_api->PJRT_Client_Compile(&ca);
  if (e) return cw__adopt(e, "refused the program");
  PJRT_LoadedExecutable_GetExecutable_Args g = {.struct_size = sizeof g,
                                                .loaded_executable = ca.executable};
  e = g_api->PJRT_LoadedExecutable_GetExecutable(&g);
  if (e) e = cw__adopt(e, "gave no executable");
  if (!e) e = cw__outputs(g.executable, out->text, sizeof out->text);
  if (!e) e = cw__optimized(g.executable, out);
  if (g.executable) {
    PJRT_Executable_Destroy_Args d = {.struct_size = sizeof d, .executable = g.executable};
    PJRT_Error* de = g_api->PJRT_Executable_Destroy(&d);
    if (de) cw_null_error_free(cw__adopt(de, "failed to destroy an executable"));
  }
  PJRT_LoadedExecutable_Destroy_Args d = {.struct_size = sizeof d, .executable = ca.executable};
  PJRT_Error* de = g_api->PJRT_LoadedExecutable_Destroy(&d);
  if (de) cw_null_error_free(cw__adopt(de, "failed to destroy an executable"));
  if (e) {
    free(out->hlo);
    out->hlo = NULL;
  }
  return e;
}
