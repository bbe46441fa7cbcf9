#include "cw_pjrt_info.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_messages.h"

static char* cw__strndup0(const char* s, size_t n) { return strndup(s ? s : "", s ? n : 0); }

static cw_status_t cw__oom(void) { return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"); }

// The optimized program: once for its size, once to fill (as PJRT asks).
static cw_status_t cw__optimized_program(const cw_pjrt_t* p, PJRT_Executable* e,
                                         Causeway__V1__ExecutableInfo* info) {
  PJRT_Program prog;
  memset(&prog, 0, sizeof(prog));
  prog.struct_size = sizeof(prog);
  CW_PJRT_ARGS(PJRT_Executable_OptimizedProgram_Args, a);
  a.executable = e;
  a.program = &prog;
  CW_PJRT_CALL(p, PJRT_Executable_OptimizedProgram, a, "optimized program size");
  prog.code = malloc(prog.code_size ? prog.code_size : 1);
  if (!prog.code) return cw__oom();
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_OptimizedProgram(&a));
  if (st) {
    free(prog.code);
    return cw_status_annotate(st, "optimized program");
  }
  char* format = cw__strndup0(prog.format, prog.format_size);
  if (!format) {
    free(prog.code);
    return cw__oom();
  }
  info->optimized_program.data = (uint8_t*)prog.code;
  info->optimized_program.len = prog.code_size;
  info->optimized_program_format = format;
  return cw_ok_status();
}

// The parameters the optimized program aliases to outputs (what PJRT
// donates); left empty when the program does not say.
static void cw__donated_params(Causeway__V1__ExecutableInfo* info) {
  const char* f = info->optimized_program_format;
  bool with_config = f && !strcmp(f, "hlo_with_config");
  if (!with_config && !(f && !strcmp(f, "hlo"))) return;
  cw_pjrt_shape_t* params = NULL;
  size_t n = 0;
  cw_status_t st = cw_pjrt_params_from_hlo(info->optimized_program.data,
                                           info->optimized_program.len, with_config, &params, &n);
  if (st) {
    cw_status_free(st);
    return;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) k += params[i].donated;
  uint32_t* out = k ? malloc(k * sizeof(*out)) : NULL;
  if (out) {
    info->donated_params = out;
    for (size_t i = 0; i < n; ++i) {
      if (params[i].donated) out[info->n_donated_params++] = (uint32_t)i;
    }
  }
  cw_pjrt_shapes_free(params, n);
}

static cw_status_t cw__output_shapes(const cw_pjrt_t* p, PJRT_Executable* e,
                                     Causeway__V1__ExecutableInfo* info) {
  PJRT_Executable_OutputElementTypes_Args t;
  PJRT_Executable_OutputDimensions_Args d;
  CW_RETURN_IF_ERROR(cw_pjrt_output_shapes(p, e, &t, &d), "executable info");
  size_t n = t.num_output_types;
  info->output_dtypes = calloc(n + 1, sizeof(*info->output_dtypes));
  info->output_dims = calloc(n + 1, sizeof(*info->output_dims));
  if (!info->output_dtypes || !info->output_dims) return cw__oom();
  for (size_t i = 0; i < n; ++i) info->output_dtypes[i] = (Causeway__V1__DType)t.output_types[i];
  info->n_output_dtypes = n;
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    Causeway__V1__Int64List* l = malloc(sizeof(*l));
    if (!l) return cw__oom();
    causeway__v1__int64_list__init(l);
    info->output_dims[info->n_output_dims++] = l;
    size_t rank = d.dim_sizes[i];
    l->values = malloc((rank + 1) * sizeof(int64_t));
    if (!l->values) return cw__oom();
    if (rank) memcpy(l->values, d.dims + pos, rank * sizeof(int64_t));
    l->n_values = rank;
    pos += rank;
  }
  return cw_ok_status();
}

static void cw__output_memory_kinds(const cw_pjrt_t* p, PJRT_Executable* e,
                                    Causeway__V1__ExecutableInfo* info) {
  CW_PJRT_ARGS(PJRT_Executable_OutputMemoryKinds_Args, mk);
  mk.executable = e;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_OutputMemoryKinds(&mk));
  if (st) {
    cw_status_free(st);  // optional: left empty
    return;
  }
  info->output_memory_kinds = calloc(mk.num_outputs + 1, sizeof(char*));
  if (!info->output_memory_kinds) return;
  for (size_t i = 0; i < mk.num_outputs; ++i) {
    char* kind = cw__strndup0(mk.memory_kinds ? mk.memory_kinds[i] : NULL,
                              mk.memory_kind_sizes ? mk.memory_kind_sizes[i] : 0);
    if (!kind) break;
    info->output_memory_kinds[info->n_output_memory_kinds++] = kind;
  }
}

// Optional in PJRT (and for older plugins a slot past their table's end):
// none leaves the field absent.
static void cw__memory_stats(const cw_pjrt_t* p, PJRT_Executable* e,
                             Causeway__V1__ExecutableInfo* info) {
  if (p->api->struct_size <= offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats) ||
      !p->api->PJRT_Executable_GetCompiledMemoryStats) {
    return;
  }
  CW_PJRT_ARGS(PJRT_Executable_GetCompiledMemoryStats_Args, ms);
  ms.executable = e;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_GetCompiledMemoryStats(&ms));
  if (st) {
    cw_status_free(st);
    return;
  }
  Causeway__V1__CompiledMemoryStats* m = malloc(sizeof(*m));
  if (!m) return;
  causeway__v1__compiled_memory_stats__init(m);
#define CW__COPY(field) m->field = ms.field;
  CW_COMPILED_MEMORY_STATS(CW__COPY)
#undef CW__COPY
  info->memory_stats = m;
}

cw_status_t cw_pjrt_exe_info_initialize(const cw_pjrt_t* p, PJRT_LoadedExecutable* exe,
                                        Causeway__V1__ExecutableInfo* info) {
  causeway__v1__executable_info__init(info);
  CW_PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, ad);
  ad.executable = exe;
  CW_PJRT_CALL(p, PJRT_LoadedExecutable_AddressableDevices, ad, "addressable devices");
  info->devices = calloc(ad.num_addressable_devices + 1, sizeof(int32_t));
  if (!info->devices) return cw__oom();
  for (size_t i = 0; i < ad.num_addressable_devices; ++i) {
    info->devices[i] = cw_pjrt_device_index(p, ad.addressable_devices[i]);
  }
  info->n_devices = ad.num_addressable_devices;
  CW_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, ge);
  ge.loaded_executable = exe;
  CW_PJRT_CALL(p, PJRT_LoadedExecutable_GetExecutable, ge, "executable info");
  PJRT_Executable* e = ge.executable;
  CW_PJRT_ARGS(PJRT_Executable_Name_Args, nm);
  nm.executable = e;
  CW_PJRT_ARGS(PJRT_Executable_NumReplicas_Args, nr);
  nr.executable = e;
  CW_PJRT_ARGS(PJRT_Executable_NumPartitions_Args, np);
  np.executable = e;
  CW_PJRT_ARGS(PJRT_Executable_NumOutputs_Args, no);
  no.executable = e;
  cw_status_t st = cw_pjrt_status(p, p->api->PJRT_Executable_Name(&nm));
  if (!st) st = cw_pjrt_status(p, p->api->PJRT_Executable_NumReplicas(&nr));
  if (!st) st = cw_pjrt_status(p, p->api->PJRT_Executable_NumPartitions(&np));
  if (!st) st = cw_pjrt_status(p, p->api->PJRT_Executable_NumOutputs(&no));
  if (!st) {
    char* name = cw__strndup0(nm.executable_name, nm.executable_name_size);
    if (!name) st = cw__oom();
    else info->name = name;
    info->num_replicas = (uint32_t)nr.num_replicas;
    info->num_partitions = (uint32_t)np.num_partitions;
    info->num_outputs = (uint32_t)no.num_outputs;
  }
  if (!st) st = cw__output_shapes(p, e, info);
  if (!st) {
    // Optional in PJRT: absent answers leave the fields empty.
    CW_PJRT_ARGS(PJRT_Executable_Fingerprint_Args, fp);
    fp.executable = e;
    cw_status_t opt = cw_pjrt_status(p, p->api->PJRT_Executable_Fingerprint(&fp));
    if (!opt && fp.executable_fingerprint) {
      char* f = cw__strndup0(fp.executable_fingerprint, fp.executable_fingerprint_size);
      if (f) info->fingerprint = f;
    }
    cw_status_free(opt);
    cw_status_free(cw__optimized_program(p, e, info));
    cw__donated_params(info);
    cw__output_memory_kinds(p, e, info);
    cw__memory_stats(p, e, info);
  }
  CW_PJRT_ARGS(PJRT_Executable_Destroy_Args, de);
  de.executable = e;
  cw_status_free(cw_pjrt_status(p, p->api->PJRT_Executable_Destroy(&de)));
  return st;
}

void cw_pjrt_exe_info_deinitialize(Causeway__V1__ExecutableInfo* info) {
  free(info->devices);
  if (info->name != protobuf_c_empty_string) free(info->name);
  free(info->output_dtypes);
  for (size_t i = 0; i < info->n_output_dims; ++i) {
    free(info->output_dims[i]->values);
    free(info->output_dims[i]);
  }
  free(info->output_dims);
  if (info->fingerprint != protobuf_c_empty_string) free(info->fingerprint);
  free(info->optimized_program.data);
  if (info->optimized_program_format != protobuf_c_empty_string) {
    free(info->optimized_program_format);
  }
  for (size_t i = 0; i < info->n_output_memory_kinds; ++i) free(info->output_memory_kinds[i]);
  free(info->output_memory_kinds);
  free(info->donated_params);
  free(info->memory_stats);
  causeway__v1__executable_info__init(info);
}
