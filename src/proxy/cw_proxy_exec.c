// Compile and execute: an IFRT HloProgram is compiled by the session's PJRT
// client (the causeway plugin: the controller's compile service, compile
// once, cache) and run on its devices (the island's scheduler orders it).
// Programs over several devices (SPMD) take their outputs' shardings from
// the optimized program.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_hlo_cost.h"
#include "cw_hlo_text.h"
#include "cw_log.h"
#include "cw_pb_nesting.h"
#include "cw_proxy_decode.h"
#include "cw_proxy_internal.h"

#define CW__HLO_PROGRAM "xla::ifrt::XlaProgram"
#define CW__XLA_OPTIONS "xla::ifrt::XlaCompileOptions"

// How an output of a program over several devices lies on them.
typedef struct cw__out_sharding_s {
  uint8_t* op;  // its xla.OpSharding, as the compiler wrote it
  size_t op_len;
  size_t n_tiles;  // tiles per data dimension (0: replicated)
  int64_t tiles[CW_PROXY_MAX_RANK];
} cw__out_sharding_t;

struct cw_proxy_exe_s {
  PJRT_LoadedExecutable* loaded;
  PJRT_Executable* exe;
  size_t num_outputs;
  size_t n;  // addressable devices, in the program's device order
  PJRT_Device** devices;
  int32_t* device_ids;
  cw__out_sharding_t* outs;  // num_outputs of them when n > 1
  ProtobufCBinaryData* params;  // the parameters' xla.OpSharding when n > 1
  size_t n_params;
  char** out_kinds;  // num_outputs memory kinds ("device", "pinned_host", ...)
  bool deleted;
};

void cw_proxy_exe_free(cw_proxy_session_t* s, cw_proxy_exe_t* e) {
  if (!e) return;
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  if (e->exe) {
    PJRT_Executable_Destroy_Args d = {CW_PROXY_ARGS(PJRT_Executable_Destroy_Args, executable),
                                      .executable = e->exe};
    cw_status_free(CW_PROXY_PJRT_CALL(p, PJRT_Executable_Destroy, &d));
  }
  if (e->loaded) {
    PJRT_LoadedExecutable_Destroy_Args d = {
        CW_PROXY_ARGS(PJRT_LoadedExecutable_Destroy_Args, executable), .executable = e->loaded};
    cw_status_free(CW_PROXY_PJRT_CALL(p, PJRT_LoadedExecutable_Destroy, &d));
  }
  for (size_t i = 0; e->outs && i < e->num_outputs; i++) free(e->outs[i].op);
  free(e->outs);
  for (size_t i = 0; e->out_kinds && i < e->num_outputs; i++) free(e->out_kinds[i]);
  free(e->out_kinds);
  for (size_t i = 0; i < e->n_params; i++) free(e->params[i].data);
  free(e->params);
  free(e->devices);
  free(e->device_ids);
  free(e);
}

static void cw__exe_free_each(void* user, uint64_t key, void* value) {
  cw_proxy_exe_free(user, value);
}

void cw_proxy_exes_free(cw_proxy_session_t* s) {
  cw_proxy_table_each(&s->exes, cw__exe_free_each, s);
  cw_proxy_table_deinitialize(&s->exes);
}

static cw_status_t cw__exe_get(cw_proxy_session_t* s, uint64_t handle, cw_proxy_exe_t** out) {
  cw_proxy_exe_t* e = cw_proxy_table_get(&s->exes, handle);
  if (!e) return cw_make_status(CW_NOT_FOUND, "no executable with handle %llu in this session",
                                (unsigned long long)handle);
  if (e->deleted) return cw_make_status(CW_FAILED_PRECONDITION, "executable %llu was deleted",
                                        (unsigned long long)handle);
  *out = e;
  return cw_ok_status();
}

// The CompileOptionsProto inside the request's XlaCompileOptions (borrowed
// from *out_unpacked, which the caller frees).
static cw_status_t cw__options(const CwIfrt__Serialized* ser, CwIfrt__XlaCompileOptions** out) {
  *out = NULL;
  if (!ser || !ser->type_name || strcmp(ser->type_name, CW__XLA_OPTIONS)) {
    return cw_make_status(CW_UNIMPLEMENTED, "compile options of type %s are not served",
                          ser && ser->type_name ? ser->type_name : "(none)");
  }
  *out = cw_ifrt__xla_compile_options__unpack(NULL, ser->has_data ? ser->data.len : 0,
                                              ser->data.data);
  if (!*out) return cw_make_status(CW_INVALID_ARGUMENT, "%s does not decode", CW__XLA_OPTIONS);
  return cw_ok_status();
}

// One output's sharding from its xla.OpSharding bytes.
static cw_status_t cw__out_sharding(const uint8_t* op, size_t len, cw__out_sharding_t* out) {
  // An OpSharding holds OpShardings (tuples): bounded before protobuf-c recurses.
  CwIfrt__XlaOpSharding* sh =
      cw_pb_nesting_ok(&cw_ifrt__xla_op_sharding__descriptor, op, len, CW_PB_MAX_NESTING)
          ? cw_ifrt__xla_op_sharding__unpack(NULL, len, op)
          : NULL;
  if (!sh) return cw_make_status(CW_INTERNAL, "an output sharding does not decode");
  cw_status_t st = cw_ok_status();
  const CwIfrt__XlaNamedSharding* ns = sh->named_sharding;
  if (ns) {
    // Each dimension is split by the product of its axes' sizes.
    size_t n_axes = ns->mesh ? ns->mesh->n_axes : 0;
    if (ns->n_manual_axes) {
      st = cw_make_status(CW_UNIMPLEMENTED, "outputs with manual axes (shard_map) are not served "
                          "through the proxy yet");
    } else if (ns->n_dim_shardings > CW_PROXY_MAX_RANK) {
      st = cw_make_status(CW_UNIMPLEMENTED, "an output of rank %zu", ns->n_dim_shardings);
    }
    for (size_t j = 0; !st && j < ns->n_dim_shardings; j++) {
      int64_t t = 1;
      for (size_t k = 0; k < ns->dim_shardings[j]->n_axes; k++) {
        const CwIfrt__XlaAxisRef* ax = ns->dim_shardings[j]->axes[k];
        if (ax->sub_axis_info) {
          t *= ax->sub_axis_info->size;
        } else if (ax->mesh_axis_index >= 0 && (size_t)ax->mesh_axis_index < n_axes) {
          t *= ns->mesh->axes[ax->mesh_axis_index]->size;
        } else {
          st = cw_make_status(CW_INTERNAL, "an output sharding names mesh axis %lld of %zu",
                              (long long)ax->mesh_axis_index, n_axes);
        }
      }
      out->tiles[j] = t;
    }
    if (!st) out->n_tiles = ns->n_dim_shardings;
  } else if (sh->type == 3) {  // OTHER: tiled; trailing tile dimensions replicate, not tile
    size_t n = sh->n_tile_assignment_dimensions;
    size_t extra = (sh->replicate_on_last_tile_dim ? 1 : 0) + sh->n_last_tile_dims;
    if (extra > n || n - extra > CW_PROXY_MAX_RANK) {
      st = cw_make_status(CW_UNIMPLEMENTED, "an output tiling of %zu dimensions", n);
    } else {
      out->n_tiles = n - extra;
      memcpy(out->tiles, sh->tile_assignment_dimensions, out->n_tiles * sizeof(int64_t));
    }
  } else if (sh->type != 0 && sh->type != 1) {
    st = cw_make_status(CW_UNIMPLEMENTED, "outputs with sharding type %d (manual or tuple) are "
                        "not served through the proxy yet", sh->type);
  }
  CW_LOGD("output sharding: type %d, %zu tile dimensions (%zu data), %zu bytes", sh->type,
          sh->n_tile_assignment_dimensions, out->n_tiles, len);
  cw_ifrt__xla_op_sharding__free_unpacked(sh, NULL);
  if (st) return st;
  out->op = malloc(len ? len : 1);
  if (!out->op) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (len) memcpy(out->op, op, len);
  out->op_len = len;
  return cw_ok_status();
}

// The executable's optimized program (an XLA HLO module, with its config
// when with_config): *out_code is malloc'd.
static cw_status_t cw__optimized_program(cw_proxy_session_t* s, const cw_proxy_exe_t* e,
                                         char** out_code, size_t* out_size, bool* with_config) {
  *out_code = NULL;
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Program prog = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Program, format_size)};
  PJRT_Executable_OptimizedProgram_Args a = {
      CW_PROXY_ARGS(PJRT_Executable_OptimizedProgram_Args, program), .executable = e->exe,
      .program = &prog};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Executable_OptimizedProgram, &a),
                     "optimized program");
  char* code = malloc(prog.code_size ? prog.code_size : 1);
  if (!code) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  prog.code = code;
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Executable_OptimizedProgram, &a);
  bool hlo = prog.format_size == 3 && !memcmp(prog.format, "hlo", 3);
  *with_config = prog.format_size == 15 && !memcmp(prog.format, "hlo_with_config", 15);
  if (!st && !hlo && !*with_config) {
    st = cw_make_status(CW_UNIMPLEMENTED, "optimized program in format '%.*s'",
                        (int)prog.format_size, prog.format ? prog.format : "");
  }
  if (st) {
    free(code);
    return st;
  }
  *out_code = code;
  *out_size = prog.code_size;
  return cw_ok_status();
}

// The executable's optimized program, decoded; *out is the caller's
// (cw_hlo_module_free).
static cw_status_t cw__program_module(cw_proxy_session_t* s, const cw_proxy_exe_t* e,
                                      cw_hlo_module_t** out) {
  *out = NULL;
  char* code;
  size_t size;
  bool with_config;
  cw_status_t st = cw__optimized_program(s, e, &code, &size, &with_config);
  if (st) return st;
  st = cw_hlo_module_parse((const uint8_t*)code, size, with_config, out);
  free(code);
  return st;
}

// The outputs' shardings of a program over several devices, from its
// optimized program (the SPMD partitioner's output sharding).
static cw_status_t cw__out_shardings(cw_proxy_session_t* s, cw_proxy_exe_t* e) {
  char* code;
  size_t size;
  bool with_config;
  CW_RETURN_IF_ERROR(cw__optimized_program(s, e, &code, &size, &with_config), "shardings");
  cw_status_t st = cw_ok_status();
  CwIfrt__XlaHloModule* m = NULL;
  CwIfrt__XlaHloModuleWithConfig* mc = NULL;
  if (!st) {
    if (with_config) {
      mc = cw_ifrt__xla_hlo_module_with_config__unpack(NULL, size, (uint8_t*)code);
    } else {
      m = cw_ifrt__xla_hlo_module__unpack(NULL, size, (uint8_t*)code);
    }
    if (mc) m = mc->hlo_module;
    if (!m) st = cw_make_status(CW_INTERNAL, "the optimized program does not decode");
  }
  if (!st && !m->has_spmd_output_sharding) {
    st = cw_make_status(CW_UNIMPLEMENTED, "programs over %zu devices without SPMD partitioning "
                        "(pmap) are not served through the proxy yet", e->n);
  }
  CwIfrt__XlaOpShardingTuple* t = NULL;
  if (!st) {
    t = cw_ifrt__xla_op_sharding_tuple__unpack(NULL, m->spmd_output_sharding.len,
                                               m->spmd_output_sharding.data);
    if (!t) st = cw_make_status(CW_INTERNAL, "the output sharding does not decode");
  }
  if (!st) {
    e->outs = calloc(e->num_outputs ? e->num_outputs : 1, sizeof(*e->outs));
    if (!e->outs) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  // XLA gives an empty tuple one sharding of its own: no outputs, nothing to check.
  if (!st && t->type == 2 && e->num_outputs && t->n_tuple_shardings != e->num_outputs) {
    st = cw_make_status(CW_INTERNAL, "%zu output shardings for %zu outputs",
                        t->n_tuple_shardings, e->num_outputs);
  }
  for (size_t i = 0; !st && i < e->num_outputs; i++) {
    st = t->type == 2 ? cw__out_sharding(t->tuple_shardings[i].data, t->tuple_shardings[i].len,
                                         &e->outs[i])
                      : cw__out_sharding(m->spmd_output_sharding.data,
                                         m->spmd_output_sharding.len, &e->outs[i]);
  }
  if (!st && m->n_spmd_parameters_shardings) {
    e->params = calloc(m->n_spmd_parameters_shardings, sizeof(*e->params));
    if (!e->params) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; !st && i < m->n_spmd_parameters_shardings; i++) {
      size_t len = m->spmd_parameters_shardings[i].len;
      e->params[i].data = malloc(len ? len : 1);
      if (!e->params[i].data) {
        st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      if (len) memcpy(e->params[i].data, m->spmd_parameters_shardings[i].data, len);
      e->params[i].len = len;
      e->n_params++;
    }
  }
  if (t) cw_ifrt__xla_op_sharding_tuple__free_unpacked(t, NULL);
  if (mc) cw_ifrt__xla_hlo_module_with_config__free_unpacked(mc, NULL);
  else if (m) cw_ifrt__xla_hlo_module__free_unpacked(m, NULL);
  free(code);
  return st;
}

// What the client needs of a compiled executable.
static cw_status_t cw__describe(cw_proxy_session_t* s, cw_proxy_exe_t* e) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_LoadedExecutable_GetExecutable_Args g = {
      CW_PROXY_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, executable),
      .loaded_executable = e->loaded};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_LoadedExecutable_GetExecutable, &g), "compile");
  e->exe = g.executable;
  PJRT_Executable_NumOutputs_Args no = {CW_PROXY_ARGS(PJRT_Executable_NumOutputs_Args, num_outputs),
                                        .executable = e->exe};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Executable_NumOutputs, &no), "compile");
  e->num_outputs = no.num_outputs;
  // Output memory kinds: optional in PJRT; without them outputs name none
  // (the client's default memory).
  e->out_kinds = calloc(e->num_outputs + 1, sizeof(*e->out_kinds));
  if (!e->out_kinds) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  PJRT_Executable_OutputMemoryKinds_Args mk = {
      CW_PROXY_ARGS(PJRT_Executable_OutputMemoryKinds_Args, memory_kind_sizes), .executable = e->exe};
  cw_status_t kst = CW_PROXY_PJRT_CALL(p, PJRT_Executable_OutputMemoryKinds, &mk);
  for (size_t i = 0; !kst && i < e->num_outputs && i < mk.num_outputs; i++) {
    e->out_kinds[i] = strndup(mk.memory_kinds[i], mk.memory_kind_sizes[i]);
    if (!e->out_kinds[i]) kst = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (kst) CW_LOGW("compile: no output memory kinds: %s", cw_status_message(kst));
  cw_status_free(kst);
  PJRT_LoadedExecutable_AddressableDevices_Args ad = {
      CW_PROXY_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, num_addressable_devices),
      .executable = e->loaded};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_LoadedExecutable_AddressableDevices, &ad),
                     "compile");
  e->n = ad.num_addressable_devices;
  e->devices = calloc(e->n ? e->n : 1, sizeof(*e->devices));
  e->device_ids = calloc(e->n ? e->n : 1, sizeof(*e->device_ids));
  if (!e->devices || !e->device_ids) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < e->n; i++) {
    e->devices[i] = ad.addressable_devices[i];
    PJRT_Device_GetDescription_Args dd = {
        CW_PROXY_ARGS(PJRT_Device_GetDescription_Args, device_description),
        .device = ad.addressable_devices[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_GetDescription, &dd), "compile");
    PJRT_DeviceDescription_Id_Args id = {CW_PROXY_ARGS(PJRT_DeviceDescription_Id_Args, id),
                                         .device_description = dd.device_description};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_Id, &id), "compile");
    e->device_ids[i] = id.id;
  }
  return e->n > 1 ? cw__out_shardings(s, e) : cw_ok_status();
}

typedef struct cw__compiled_s {
  CwIfrt__CompileResponse r;
  char* name;
  uint8_t* fingerprint;
} cw__compiled_t;

static cw_status_t cw__compile(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                               CwIfrt__IfrtResponse* resp) {
  const CwIfrt__CompileRequest* r = req->compile_request;
  const CwIfrt__Serialized* prog = r->program;
  if (!prog || !prog->type_name || strcmp(prog->type_name, CW__HLO_PROGRAM)) {
    return cw_make_status(CW_UNIMPLEMENTED, "Compile: programs of type %s are not served",
                          prog && prog->type_name ? prog->type_name : "(none)");
  }
  if (r->n_host_callbacks) {
    return cw_make_status(CW_UNIMPLEMENTED, "Compile: host callbacks through the proxy are not "
                          "served yet (%zu in this program)", r->n_host_callbacks);
  }
  CwIfrt__XlaCompileOptions* opts;
  CW_RETURN_IF_ERROR(cw__options(r->compile_options, &opts), "Compile");

  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Program program = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Program, format_size),
                          .code = (char*)prog->data.data, .code_size = prog->data.len,
                          .format = "mlir", .format_size = 4};
  PJRT_Client_Compile_Args c = {
      CW_PROXY_ARGS(PJRT_Client_Compile_Args, executable), .client = s->client, .program = &program,
      .compile_options = (const char*)opts->compile_options.data,
      .compile_options_size = opts->has_compile_options ? opts->compile_options.len : 0};
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Client_Compile, &c);
  cw_ifrt__xla_compile_options__free_unpacked(opts, NULL);
  CW_RETURN_IF_ERROR(st, "Compile");
  cw_proxy_exe_t* e = calloc(1, sizeof(*e));
  if (!e) {
    PJRT_LoadedExecutable_Destroy_Args d = {
        CW_PROXY_ARGS(PJRT_LoadedExecutable_Destroy_Args, executable), .executable = c.executable};
    cw_status_free(CW_PROXY_PJRT_CALL(p, PJRT_LoadedExecutable_Destroy, &d));
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  e->loaded = c.executable;
  uint64_t handle = (1ull << 63) | ++s->next_handle;
  st = cw__describe(s, e);
  if (!st) st = cw_proxy_table_put(&s->exes, handle, e);
  if (st) {
    cw_proxy_exe_free(s, e);
    return cw_status_annotate(st, "Compile");
  }
  cw__compiled_t* out = calloc(1, sizeof(*out));
  if (!out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_ifrt__compile_response__init(&out->r);
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_COMPILE_RESPONSE;
  resp->compile_response = &out->r;
  out->r.has_loaded_executable_handle = out->r.has_num_devices = true;
  out->r.loaded_executable_handle = handle;
  out->r.num_devices = (int32_t)e->n;
  out->r.device_ids = out->r.addressable_device_ids = e->device_ids;
  out->r.n_device_ids = out->r.n_addressable_device_ids = e->n;
  PJRT_Executable_Name_Args nm = {CW_PROXY_ARGS(PJRT_Executable_Name_Args, executable_name_size),
                                  .executable = e->exe};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Executable_Name, &nm), "Compile");
  out->name = strndup(nm.executable_name, nm.executable_name_size);
  out->r.name = out->name ? out->name : "";
  PJRT_Executable_Fingerprint_Args fp = {
      CW_PROXY_ARGS(PJRT_Executable_Fingerprint_Args, executable_fingerprint_size),
      .executable = e->exe};
  cw_status_t fst = CW_PROXY_PJRT_CALL(p, PJRT_Executable_Fingerprint, &fp);
  if (!fst && fp.executable_fingerprint) {
    out->fingerprint = malloc(fp.executable_fingerprint_size + 1);
    if (out->fingerprint) {
      memcpy(out->fingerprint, fp.executable_fingerprint, fp.executable_fingerprint_size);
      out->r.fingerprint_case = CW_IFRT__COMPILE_RESPONSE__FINGERPRINT_FINGERPRINT_VALUE;
      out->r.fingerprint_value.data = out->fingerprint;
      out->r.fingerprint_value.len = fp.executable_fingerprint_size;
    }
  }
  cw_status_free(fst);
  uint64_t ready;
  CW_RETURN_IF_ERROR(cw_proxy_future_put(s, cw_ok_status(), 0, &ready), "Compile");
  out->r.has_ready_future_handle = true;
  out->r.ready_future_handle = ready;
  return cw_ok_status();
}

typedef struct cw__metadata_s {
  CwIfrt__LoadedExecutableMetadataResponse r;
  CwIfrt__LoadedExecutableMetadataResponse__ShardingList params;
  CwIfrt__LoadedExecutableMetadataResponse__ShardingList outputs;
  ProtobufCBinaryData* output_ops;
  CwIfrt__LoadedExecutableMetadataResponse__OutputMemoryKind kinds;
  CwIfrt__LoadedExecutableMetadataResponse__MemoryKindList list;
  CwIfrt__LoadedExecutableMetadataResponse__MemoryKindList* lists[1];
  CwIfrt__StatusProto layouts_error;
  char* layouts_message;
  CwIfrt__LoadedExecutableMetadataResponse__LayoutList layout_lists[2];
  ProtobufCBinaryData* layouts[2];  // parameters, outputs
  size_t n_layouts[2];
  CwIfrt__LoadedExecutableMetadataResponse__DonatedInputIndices donatable;
  uint32_t* donatable_indices;
  CwIfrt__StatusProto donatable_error;
  char* donatable_message;
} cw__metadata_t;

// An error where the response has one: `st`'s code and message (taken).
static void cw__error_proto(cw_status_t st, CwIfrt__StatusProto* out, char** message) {
  cw_ifrt__status_proto__init(out);
  out->has_code = true;
  out->code = cw_status_code(st);
  *message = strdup(cw_status_message(st));
  out->message = *message ? *message : "";
  cw_status_free(st);
}

// The entry computation's parameter and output layouts (*layouts_st), and
// the parameters a run may donate, those an output aliases (*donatable_st),
// read from the optimized program as XLA's own PJRT clients do. Knowing the
// donatable ones, jaxlib's client keeps every other argument's state itself
// instead of asking the server whether it was deleted after each run.
static void cw__program_facts(cw_proxy_session_t* s, const cw_proxy_exe_t* e, cw__metadata_t* out,
                              cw_status_t* layouts_st, cw_status_t* donatable_st) {
  cw_hlo_module_t* m;
  cw_status_t st = cw__program_module(s, e, &m);
  if (st) {
    *layouts_st = cw_status_annotate(cw_status_clone(st), "layouts");
    *donatable_st = cw_status_annotate(st, "donatable inputs");
    return;
  }
  *layouts_st = cw_ok_status();
  for (int i = 0; !*layouts_st && i < 2; i++) {
    *layouts_st = cw_hlo_module_layouts(m, i == 1, &out->layouts[i], &out->n_layouts[i]);
  }
  cw_ifrt__loaded_executable_metadata_response__donated_input_indices__init(&out->donatable);
  *donatable_st = cw_hlo_module_aliased_params(m, &out->donatable_indices,
                                               &out->donatable.n_donated_input_indices);
  out->donatable.donated_input_indices = out->donatable_indices;
  cw_hlo_module_free(m);
}

static cw_status_t cw__metadata(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                CwIfrt__IfrtResponse* resp) {
  cw_proxy_exe_t* e;
  CW_RETURN_IF_ERROR(cw__exe_get(s, req->loaded_executable_metadata_request->loaded_executable_handle,
                                 &e), "LoadedExecutableMetadata");
  cw__metadata_t* out = calloc(1, sizeof(*out));
  if (!out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_ifrt__loaded_executable_metadata_response__init(&out->r);
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_METADATA_RESPONSE;
  resp->loaded_executable_metadata_response = &out->r;
  // Either may fail alone. Without layouts the client uses the default ones,
  // as for PJRT clients that do not say; without the donatable inputs it asks
  // after each run.
  cw_status_t lst, dst;
  cw__program_facts(s, e, out, &lst, &dst);
  if (lst) {
    CW_LOGW("LoadedExecutableMetadata: %s", cw_status_message(lst));
    cw__error_proto(lst, &out->layouts_error, &out->layouts_message);
    out->r.parameter_layouts_case =
        CW_IFRT__LOADED_EXECUTABLE_METADATA_RESPONSE__PARAMETER_LAYOUTS_PARAMETER_LAYOUTS_ERROR;
    out->r.parameter_layouts_error = &out->layouts_error;
    out->r.output_layouts_case =
        CW_IFRT__LOADED_EXECUTABLE_METADATA_RESPONSE__OUTPUT_LAYOUTS_OUTPUT_LAYOUTS_ERROR;
    out->r.output_layouts_error = &out->layouts_error;
  } else {
    for (int i = 0; i < 2; i++) {
      cw_ifrt__loaded_executable_metadata_response__layout_list__init(&out->layout_lists[i]);
      out->layout_lists[i].layouts = out->layouts[i];
      out->layout_lists[i].n_layouts = out->n_layouts[i];
    }
    out->r.parameter_layouts_case =
        CW_IFRT__LOADED_EXECUTABLE_METADATA_RESPONSE__PARAMETER_LAYOUTS_PARAMETER_LAYOUTS_LIST;
    out->r.parameter_layouts_list = &out->layout_lists[0];
    out->r.output_layouts_case =
        CW_IFRT__LOADED_EXECUTABLE_METADATA_RESPONSE__OUTPUT_LAYOUTS_OUTPUT_LAYOUTS_LIST;
    out->r.output_layouts_list = &out->layout_lists[1];
  }
  if (dst) {
    CW_LOGW("LoadedExecutableMetadata: %s", cw_status_message(dst));
    cw__error_proto(dst, &out->donatable_error, &out->donatable_message);
    out->r.donated_input_indices_oneof_case =
        CW_IFRT__LOADED_EXECUTABLE_METADATA_RESPONSE__DONATED_INPUT_INDICES_ONEOF_DONATED_INPUT_INDICES_ERROR;
    out->r.donated_input_indices_error = &out->donatable_error;
  } else {
    out->r.donated_input_indices_oneof_case =
        CW_IFRT__LOADED_EXECUTABLE_METADATA_RESPONSE__DONATED_INPUT_INDICES_ONEOF_DONATED_INPUT_INDICES;
    out->r.donated_input_indices = &out->donatable;
  }
  cw_ifrt__loaded_executable_metadata_response__memory_kind_list__init(&out->list);
  out->list.memory_kinds = e->out_kinds;  // borrowed, as the shardings below
  out->list.n_memory_kinds = e->num_outputs;
  for (size_t i = 0; i < e->num_outputs; i++) {
    if (!e->out_kinds[i]) out->list.n_memory_kinds = 0;  // not reported: none at all
  }
  out->lists[0] = &out->list;
  cw_ifrt__loaded_executable_metadata_response__output_memory_kind__init(&out->kinds);
  out->kinds.memory_kind_lists = out->lists;
  out->kinds.n_memory_kind_lists = 1;
  out->r.output_memory_kinds = &out->kinds;
  if (e->n > 1) {
    // The compiler's shardings (borrowed from the executable).
    out->output_ops = calloc(e->num_outputs + 1, sizeof(*out->output_ops));
    if (!out->output_ops) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; i < e->num_outputs; i++) {
      out->output_ops[i].data = e->outs[i].op;
      out->output_ops[i].len = e->outs[i].op_len;
    }
    cw_ifrt__loaded_executable_metadata_response__sharding_list__init(&out->outputs);
    out->outputs.shardings = out->output_ops;
    out->outputs.n_shardings = e->num_outputs;
    out->r.output_shardings = &out->outputs;
    cw_ifrt__loaded_executable_metadata_response__sharding_list__init(&out->params);
    out->params.shardings = e->params;
    out->params.n_shardings = e->n_params;
    out->r.parameter_shardings = &out->params;
  }
  return cw_ok_status();
}

typedef struct cw__executed_s {
  CwIfrt__LoadedExecutableExecuteResponse r;
  CwIfrt__LoadedExecutableExecuteResponse__Output* outs;
  CwIfrt__LoadedExecutableExecuteResponse__Output** out_ptrs;
  CwIfrt__DType* dtypes;
  CwIfrt__Shape* shapes;
  CwIfrt__Sharding* shardings;
  CwIfrt__Serialized* serialized;
  uint8_t** sharding_bytes;
  size_t n;
} cw__executed_t;

// A Serialized sharding as the client reads it: `type` with `data` (taken).
static void cw__sharding_of(const char* type, uint8_t* data, size_t len, CwIfrt__Sharding* sh,
                            CwIfrt__Serialized* ser, uint8_t** keep) {
  *keep = data;
  cw_ifrt__serialized__init(ser);
  ser->type_name = (char*)type;
  ser->has_data = true;
  ser->data.data = data;
  ser->data.len = len;
  cw_ifrt__sharding__init(sh);
  sh->serialized_sharding = ser;
}

// Output `o`'s sharding: a single device's, or an HloSharding over the
// program's devices with the compiler's OpSharding.
static cw_status_t cw__output_sharding(const cw_proxy_exe_t* e, size_t o, CwIfrt__Sharding* sh,
                                       CwIfrt__Serialized* ser, uint8_t** keep) {
  size_t len;
  uint8_t* data;
  if (e->n == 1) {
    CwIfrt__SingleDeviceSharding sd = CW_IFRT__SINGLE_DEVICE_SHARDING__INIT;
    sd.has_device_id = true;
    sd.device_id = e->device_ids[0];
    sd.memory_kind = e->out_kinds[o];
    len = cw_ifrt__single_device_sharding__get_packed_size(&sd);
    data = malloc(len ? len : 1);
    if (!data) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    cw_ifrt__single_device_sharding__pack(&sd, data);
    cw__sharding_of("xla::ifrt::SingleDeviceSharding", data, len, sh, ser, keep);
    return cw_ok_status();
  }
  CwIfrt__DeviceList dl = CW_IFRT__DEVICE_LIST__INIT;
  dl.device_ids = e->device_ids;
  dl.n_device_ids = e->n;
  CwIfrt__HloSharding hs = CW_IFRT__HLO_SHARDING__INIT;
  hs.devices = &dl;
  hs.has_xla_op_sharding = true;
  hs.xla_op_sharding.data = e->outs[o].op;
  hs.xla_op_sharding.len = e->outs[o].op_len;
  hs.memory_kind = e->out_kinds[o];
  len = cw_ifrt__hlo_sharding__get_packed_size(&hs);
  data = malloc(len ? len : 1);
  if (!data) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_ifrt__hlo_sharding__pack(&hs, data);
  cw__sharding_of("xla::ifrt::HloSharding", data, len, sh, ser, keep);
  return cw_ok_status();
}

// The arguments' shards, one list per device of the program.
static cw_status_t cw__arguments(cw_proxy_session_t* s, const cw_proxy_exe_t* e,
                                 const CwIfrt__LoadedExecutableExecuteRequest* r,
                                 PJRT_Buffer** args) {
  size_t na = r->n_args_handles;
  for (size_t i = 0; i < na; i++) {
    cw_proxy_array_t* a = cw_proxy_table_get(&s->arrays, r->args_handles[i]);
    if (!a || a->deleted) {
      return cw_make_status(CW_NOT_FOUND, "argument %zu: no array with handle %llu", i,
                            (unsigned long long)r->args_handles[i]);
    }
    if (a->error) return cw_status_annotate(cw_status_clone(a->error), "argument %zu", i);
    for (size_t d = 0; d < e->n; d++) {
      args[d * na + i] = cw_proxy_array_buffer_on(a, e->device_ids[d]);
      if (!args[d * na + i]) {
        return cw_make_status(CW_INVALID_ARGUMENT, "argument %zu has no shard on device %d", i,
                              e->device_ids[d]);
      }
    }
  }
  return cw_ok_status();
}

static cw_status_t cw__execute(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                               CwIfrt__IfrtResponse* resp) {
  const CwIfrt__LoadedExecutableExecuteRequest* r = req->loaded_executable_execute_request;
  cw_proxy_exe_t* e;
  CW_RETURN_IF_ERROR(cw__exe_get(s, r->loaded_executable_handle, &e), "Execute");
  if (r->n_result_array_handle && r->n_result_array_handle != e->num_outputs) {
    return cw_make_status(CW_INVALID_ARGUMENT, "Execute: %zu result handles for %zu outputs",
                          r->n_result_array_handle, e->num_outputs);
  }
  size_t na = r->n_args_handles, nd = e->n, no = e->num_outputs;
  PJRT_Buffer** args = calloc(nd * na + 1, sizeof(*args));
  PJRT_Buffer** outs = calloc(nd * no + 1, sizeof(*outs));
  PJRT_Buffer** arg_lists[CW_PROXY_MAX_DEVICES];
  PJRT_Buffer** out_lists[CW_PROXY_MAX_DEVICES];
  int64_t* keep = calloc(na + 1, sizeof(*keep));
  cw_status_t st = !args || !outs || !keep
                       ? cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory")
                   : nd > CW_PROXY_MAX_DEVICES
                       ? cw_make_status(CW_UNIMPLEMENTED, "a program over %zu devices", nd)
                       : cw__arguments(s, e, r, args);
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  if (!st) {
    // The program's aliased inputs are donated unless the client says not.
    const CwIfrt__ExecuteOptions* xo = r->execute_options;
    size_t n_keep = xo ? xo->n_non_donatable_input_indices : 0;
    if (n_keep > na) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "%zu non-donatable inputs of %zu arguments",
                          n_keep, na);
    }
    for (size_t i = 0; !st && i < n_keep; i++) {
      int32_t k = xo->non_donatable_input_indices[i];
      if (k < 0 || (size_t)k >= na) {
        st = cw_make_status(CW_INVALID_ARGUMENT, "non-donatable input %d of %zu arguments", k,
                            na);
      }
      keep[i] = k;
    }
    for (size_t d = 0; d < nd; d++) {
      arg_lists[d] = args + d * na;
      out_lists[d] = outs + d * no;
    }
    PJRT_ExecuteOptions o = {.struct_size = sizeof(PJRT_ExecuteOptions),
                             .launch_id = r->execute_options ? r->execute_options->launch_id : 0,
                             .non_donatable_input_indices = keep,
                             .num_non_donatable_input_indices = n_keep};
    PJRT_LoadedExecutable_Execute_Args x = {
        CW_PROXY_ARGS(PJRT_LoadedExecutable_Execute_Args, execute_device), .executable = e->loaded,
        .options = &o, .argument_lists = (PJRT_Buffer* const* const*)arg_lists,
        .num_devices = nd, .num_args = na, .output_lists = out_lists};
    if (!st) st = CW_PROXY_PJRT_CALL(p, PJRT_LoadedExecutable_Execute, &x);
    // Donated arguments are deleted now, as the client expects.
    for (size_t i = 0; !st && i < na; i++) {
      cw_proxy_array_t* a = cw_proxy_table_get(&s->arrays, r->args_handles[i]);
      if (a) (void)cw_proxy_array_check_deleted(s, a);
    }
  }
  free(args);
  free(keep);
  cw__executed_t* out = st ? NULL : calloc(1, sizeof(*out));
  if (!st && !out) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    out->outs = calloc(no + 1, sizeof(*out->outs));
    out->out_ptrs = calloc(no + 1, sizeof(*out->out_ptrs));
    out->dtypes = calloc(no + 1, sizeof(*out->dtypes));
    out->shapes = calloc(no + 1, sizeof(*out->shapes));
    out->shardings = calloc(no + 1, sizeof(*out->shardings));
    out->serialized = calloc(no + 1, sizeof(*out->serialized));
    out->sharding_bytes = calloc(no + 1, sizeof(*out->sharding_bytes));
    if (!out->outs || !out->out_ptrs || !out->dtypes || !out->shapes || !out->shardings ||
        !out->serialized || !out->sharding_bytes) {
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
    cw_ifrt__loaded_executable_execute_response__init(&out->r);
    resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_EXECUTE_RESPONSE;
    resp->loaded_executable_execute_response = &out->r;
  }
  uint64_t* made = st ? NULL : calloc(no + 1, sizeof(*made));
  size_t n_made = 0;
  if (!st && !made) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; !st && i < no; i++) {
    uint64_t h = r->n_result_array_handle ? r->result_array_handle[i]
                                          : (1ull << 63) | ++s->next_handle;
    cw_proxy_array_t* a;
    PJRT_Buffer* shard_bufs[CW_PROXY_MAX_DEVICES];
    for (size_t d = 0; d < nd; d++) shard_bufs[d] = outs[d * no + i];
    st = cw_proxy_array_adopt(s, h, shard_bufs, e->device_ids, nd, &a);
    if (st) break;
    for (size_t d = 0; d < nd; d++) outs[d * no + i] = NULL;  // the array's now
    made[n_made++] = h;
    if (nd > 1) {
      // The global shape: each data dimension times its tiles.
      if (e->outs[i].n_tiles && e->outs[i].n_tiles != a->rank) {
        st = cw_make_status(CW_INTERNAL, "output %zu: %zu tile dimensions for rank %zu", i,
                            e->outs[i].n_tiles, a->rank);
        break;
      }
      for (size_t j = 0; j < e->outs[i].n_tiles; j++) a->dims[j] *= e->outs[i].tiles[j];
    }
    CwIfrt__LoadedExecutableExecuteResponse__Output* o = &out->outs[i];
    cw_ifrt__loaded_executable_execute_response__output__init(o);
    cw_ifrt__dtype__init(&out->dtypes[i]);
    out->dtypes[i].has_kind = true;
    out->dtypes[i].kind = a->dtype;
    cw_ifrt__shape__init(&out->shapes[i]);
    out->shapes[i].dims = a->dims;
    out->shapes[i].n_dims = a->rank;
    out->n = i + 1;
    st = cw__output_sharding(e, i, &out->shardings[i], &out->serialized[i],
                             &out->sharding_bytes[i]);
    // Split outputs keep where their shards lie (ReshardArrays reads it).
    if (!st && nd > 1) cw_proxy_array_keep_sharding(a, &out->shardings[i]);
    o->dtype = &out->dtypes[i];
    o->shape = &out->shapes[i];
    o->sharding = &out->shardings[i];
    o->has_array_handle = true;
    o->array_handle = h;
    out->out_ptrs[i] = o;
  }
  for (size_t k = 0; outs && k < nd * no; k++) cw_proxy_pjrt_buffer_destroy(p, outs[k]);
  free(outs);
  // On failure the outputs made so far go: the client is told none were.
  if (st) cw_proxy_arrays_drop(s, made, n_made);
  free(made);
  if (st) return cw_status_annotate(st, "Execute");
  out->r.outputs = out->out_ptrs;
  out->r.n_outputs = no;
  // A status future only when asked for (fill_status), under the client's
  // handle when it chose one; errors of the launch otherwise reach the
  // outputs (their buffers are poisoned).
  if (r->execute_options && r->execute_options->fill_status) {
    uint64_t status_handle;
    CW_RETURN_IF_ERROR(cw_proxy_future_put(s, cw_ok_status(), r->result_status_handle,
                                           &status_handle), "Execute");
    if (!r->result_status_handle) {
      out->r.has_status_handle = true;
      out->r.status_handle = status_handle;
    }
  }
  return cw_ok_status();
}

typedef struct cw__layout_s {
  CwIfrt__GetDefaultLayoutResponse r;
  uint8_t* bytes;
} cw__layout_t;

// The dense major-to-minor layout, which is what the CPU plugin's arrays
// have (layouts of other plugins are not reported yet), in the text form a
// PJRT layout is serialized as: "{1,0}".
static cw_status_t cw__default_layout(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                      CwIfrt__IfrtResponse* resp) {
  const CwIfrt__GetDefaultLayoutRequest* r = req->get_default_layout_request;
  if (r->n_dims > CW_PROXY_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "GetDefaultLayout: rank %zu is over %d", r->n_dims,
                          CW_PROXY_MAX_RANK);
  }
  cw__layout_t* out = calloc(1, sizeof(*out));
  uint8_t* text = malloc(4 * CW_PROXY_MAX_RANK + 3);
  if (!out || !text) {
    free(out);
    free(text);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  size_t len = 0;
  text[len++] = '{';
  for (size_t i = 0; i < r->n_dims; i++) {
    len += (size_t)sprintf((char*)text + len, i ? ",%zu" : "%zu", r->n_dims - 1 - i);
  }
  text[len++] = '}';
  cw_ifrt__get_default_layout_response__init(&out->r);
  out->bytes = text;
  out->r.has_serialized_pjrt_layout = true;
  out->r.serialized_pjrt_layout.data = text;
  out->r.serialized_pjrt_layout.len = len;
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_GET_DEFAULT_LAYOUT_RESPONSE;
  resp->get_default_layout_response = &out->r;
  return cw_ok_status();
}

// The status of an execution the client asked about (fill_status): its
// future's, answered in order like every request here.
static cw_status_t cw__fetch_result(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                    CwIfrt__IfrtResponse* resp) {
  uint64_t h = req->loaded_executable_fetch_execute_result_request->result_status_handle;
  CW_RETURN_IF_ERROR(cw_proxy_future_take(s, h), "LoadedExecutableFetchExecuteResult");
  return cw_proxy_respond(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_FETCH_EXECUTE_RESULT_RESPONSE,
      false, 0);
}

static cw_status_t cw__exe_delete(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                  CwIfrt__IfrtResponse* resp) {
  uint64_t h = req->loaded_executable_delete_request->loaded_executable_handle;
  cw_proxy_exe_t* e;
  CW_RETURN_IF_ERROR(cw__exe_get(s, h, &e), "LoadedExecutableDelete");
  PJRT_LoadedExecutable_Delete_Args d = {CW_PROXY_ARGS(PJRT_LoadedExecutable_Delete_Args, executable),
                                         .executable = e->loaded};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_LoadedExecutable_Delete, &d),
                     "LoadedExecutableDelete");
  e->deleted = true;
  uint64_t future;
  CW_RETURN_IF_ERROR(cw_proxy_future_put(s, cw_ok_status(), 0, &future), "LoadedExecutableDelete");
  return cw_proxy_respond(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_DELETE_RESPONSE,
                          true, future);
}

static cw_status_t cw__exe_is_deleted(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                      CwIfrt__IfrtResponse* resp) {
  uint64_t h = req->loaded_executable_is_deleted_request->loaded_executable_handle;
  cw_proxy_exe_t* e = cw_proxy_table_get(&s->exes, h);
  if (!e) return cw_make_status(CW_NOT_FOUND, "no executable with handle %llu in this session",
                                (unsigned long long)h);
  CW_RETURN_IF_ERROR(cw_proxy_respond(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_IS_DELETED_RESPONSE, false, 0),
      "LoadedExecutableIsDeleted");
  resp->loaded_executable_is_deleted_response->has_is_deleted = true;
  resp->loaded_executable_is_deleted_response->is_deleted = e->deleted;
  return cw_ok_status();
}

static cw_status_t cw__exe_destruct(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                    CwIfrt__IfrtResponse* resp) {
  uint64_t h = req->loaded_executable_destruct_request->loaded_executable_handle;
  cw_proxy_exe_free(s, cw_proxy_table_remove(&s->exes, h));
  return cw_proxy_respond(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_DESTRUCT_RESPONSE, false, 0);
}

typedef struct cw__cost_s {
  CwIfrt__LoadedExecutableCostAnalysisResponse r;
  CwIfrt__AttributeMap map;
} cw__cost_t;

// XLA's cost analysis priced by causeway from the optimized program
// (cw_hlo_cost.h): every key XLA's analysis gives, as PJRT properties in
// *out (malloc'd; the names point into *cost, which the caller frees).
static cw_status_t cw__own_cost(cw_proxy_session_t* s, const cw_proxy_exe_t* e,
                                cw_hlo_cost_t* cost, PJRT_NamedValue** out) {
  *out = NULL;
  cw_hlo_module_t* m;
  cw_status_t st = cw__program_module(s, e, &m);
  if (st) return st;
  st = cw_hlo_module_cost(m, cost);
  cw_hlo_module_free(m);
  if (st) return st;
  *out = calloc(cost->n_entries ? cost->n_entries : 1, sizeof(**out));
  if (!*out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < cost->n_entries; i++) {
    (*out)[i] = (PJRT_NamedValue){.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_NamedValue, value_size),
                                  .name = cost->entries[i].key,
                                  .name_size = strlen(cost->entries[i].key),
                                  .type = PJRT_NamedValue_kFloat,  // XLA's are floats
                                  .float_value = (float)cost->entries[i].value,
                                  .value_size = 1};
  }
  return cw_ok_status();
}

// XLA's cost analysis of the program (flops, bytes accessed, ...) as the
// plugin reports it (the values are borrowed from the executable), else,
// when the plugin has none (XLA's CPU plugin through the C API), as
// causeway prices the optimized program: jaxlib's proxy client cannot
// compute it itself as it does in front of a PJRT plugin.
static cw_status_t cw__cost_analysis(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                     CwIfrt__IfrtResponse* resp) {
  const char* what = "LoadedExecutableCostAnalysis";
  cw_proxy_exe_t* e;
  CW_RETURN_IF_ERROR(
      cw__exe_get(s, req->loaded_executable_cost_analysis_request->loaded_executable_handle, &e),
      "%s", what);
  PJRT_Executable_GetCostAnalysis_Args a = {
      CW_PROXY_ARGS(PJRT_Executable_GetCostAnalysis_Args, properties), .executable = e->exe};
  cw_status_t st = CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Executable_GetCostAnalysis, &a);
  cw_hlo_cost_t cost = {0};
  PJRT_NamedValue* own = NULL;
  if (st && cw_status_code(st) == CW_UNIMPLEMENTED) {
    cw_status_free(st);
    st = cw__own_cost(s, e, &cost, &own);
    a.properties = own;
    a.num_properties = cost.n_entries;
  }
  cw__cost_t* out = st ? NULL : calloc(1, sizeof(*out));
  if (!st && !out) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    cw_ifrt__loaded_executable_cost_analysis_response__init(&out->r);
    resp->response_case =
        CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_COST_ANALYSIS_RESPONSE;
    resp->loaded_executable_cost_analysis_response = &out->r;
    st = cw_proxy_attributes(a.properties, a.num_properties, &out->map);
  }
  free(own);
  cw_hlo_cost_free(&cost);
  CW_RETURN_IF_ERROR(st, "%s", what);
  out->r.result_case = CW_IFRT__LOADED_EXECUTABLE_COST_ANALYSIS_RESPONSE__RESULT_ATTRIBUTES;
  out->r.attributes = &out->map;
  return cw_ok_status();
}

// MPMD executables run parts of one program on different devices; the
// proxy compiles none (every program is one XLA program), so it answers
// the MPMD requests as XLA's server does for such an executable.
#define CW__NOT_MPMD "LoadedExecutable is not an MPMD executable"

typedef struct cw__mpmd_s {
  CwIfrt__LoadedExecutableMpmdMetadataResponse r;
  CwIfrt__StatusProto error;
} cw__mpmd_t;

// LoadedExecutableMpmdMetadata answers the error in its response,
// LoadedExecutableMpmdCostAnalysis as the request's status.
static cw_status_t cw__mpmd(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                            CwIfrt__IfrtResponse* resp) {
  bool metadata =
      req->request_case == CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_MPMD_METADATA_REQUEST;
  const char* what =
      metadata ? "LoadedExecutableMpmdMetadata" : "LoadedExecutableMpmdCostAnalysis";
  uint64_t handle =
      metadata ? req->loaded_executable_mpmd_metadata_request->mpmd_loaded_executable_handle
               : req->loaded_executable_mpmd_cost_analysis_request->loaded_executable_handle;
  cw_proxy_exe_t* e;
  CW_RETURN_IF_ERROR(cw__exe_get(s, handle, &e), "%s", what);
  if (!metadata) return cw_make_status(CW_INVALID_ARGUMENT, "%s: " CW__NOT_MPMD, what);
  cw__mpmd_t* out = calloc(1, sizeof(*out));
  if (!out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_ifrt__loaded_executable_mpmd_metadata_response__init(&out->r);
  cw_ifrt__status_proto__init(&out->error);
  out->error.has_code = true;
  out->error.code = CW_INVALID_ARGUMENT;
  out->error.message = (char*)CW__NOT_MPMD;
  out->r.mpmd_compiled_memory_stats_oneof_case =
      CW_IFRT__LOADED_EXECUTABLE_MPMD_METADATA_RESPONSE__MPMD_COMPILED_MEMORY_STATS_ONEOF_MPMD_COMPILED_MEMORY_STATS_ERROR;
  out->r.mpmd_compiled_memory_stats_error = &out->error;
  resp->response_case =
      CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_MPMD_METADATA_RESPONSE;
  resp->loaded_executable_mpmd_metadata_response = &out->r;
  return cw_ok_status();
}

typedef struct cw__text_s {
  CwIfrt__LoadedExecutableHumanReadableProgramTextResponse r;
  char* text;
} cw__text_t;

// compiled.as_text(): the optimized program printed as XLA prints HLO.
static cw_status_t cw__program_text(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                    CwIfrt__IfrtResponse* resp) {
  const char* what = "LoadedExecutableHumanReadableProgramText";
  cw_proxy_exe_t* e;
  CW_RETURN_IF_ERROR(cw__exe_get(s,
                                 req->loaded_executable_human_readable_program_text_request
                                     ->loaded_executable_handle,
                                 &e),
                     "%s", what);
  cw_hlo_module_t* m;
  CW_RETURN_IF_ERROR(cw__program_module(s, e, &m), "%s", what);
  char* text;
  cw_status_t st;
  size_t len;
  // Room for the response around the text in one gRPC message.
  size_t max = s->proxy->server_options.grpc.max_message;
  st = cw_hlo_module_text(m, max > 4096 ? max - 4096 : max, &text, &len);
  cw_hlo_module_free(m);
  CW_RETURN_IF_ERROR(st, "%s", what);
  cw__text_t* out = calloc(1, sizeof(*out));
  if (!out) {
    free(text);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  cw_ifrt__loaded_executable_human_readable_program_text_response__init(&out->r);
  out->text = text;
  out->r.result_case =
      CW_IFRT__LOADED_EXECUTABLE_HUMAN_READABLE_PROGRAM_TEXT_RESPONSE__RESULT_HUMAN_READABLE_PROGRAM_TEXT;
  out->r.human_readable_program_text = text;
  resp->response_case =
      CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_HUMAN_READABLE_PROGRAM_TEXT_RESPONSE;
  resp->loaded_executable_human_readable_program_text_response = &out->r;
  return cw_ok_status();
}

cw_status_t cw_proxy_exec_handle(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                 CwIfrt__IfrtResponse* resp) {
  switch (req->request_case) {
    case CW_IFRT__IFRT_REQUEST__REQUEST_COMPILE_REQUEST:
      return cw__compile(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_METADATA_REQUEST:
      return cw__metadata(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_EXECUTE_REQUEST:
      return cw__execute(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_DELETE_REQUEST:
      return cw__exe_delete(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_IS_DELETED_REQUEST:
      return cw__exe_is_deleted(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_DESTRUCT_REQUEST:
      return cw__exe_destruct(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_GET_DEFAULT_LAYOUT_REQUEST:
      return cw__default_layout(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_FETCH_EXECUTE_RESULT_REQUEST:
      return cw__fetch_result(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_COST_ANALYSIS_REQUEST:
      return cw__cost_analysis(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_HUMAN_READABLE_PROGRAM_TEXT_REQUEST:
      return cw__program_text(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_MPMD_METADATA_REQUEST:
    case CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_MPMD_COST_ANALYSIS_REQUEST:
      return cw__mpmd(s, req, resp);
    default:
      return cw_make_status(CW_INTERNAL, "not an executable request");
  }
}

void cw_proxy_exec_response_free(CwIfrt__IfrtResponse* resp) {
  switch (resp->response_case) {
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_COMPILE_RESPONSE: {
      cw__compiled_t* c = (cw__compiled_t*)resp->compile_response;
      if (c) {
        free(c->name);
        free(c->fingerprint);
        free(c);
      }
      break;
    }
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_METADATA_RESPONSE: {
      cw__metadata_t* m = (cw__metadata_t*)resp->loaded_executable_metadata_response;
      if (m) {
        free(m->output_ops);
        free(m->layouts_message);
        free(m->donatable_indices);
        free(m->donatable_message);
        for (int i = 0; i < 2; i++) cw_hlo_layouts_free(m->layouts[i], m->n_layouts[i]);
        free(m);
      }
      break;
    }
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_EXECUTE_RESPONSE: {
      cw__executed_t* x = (cw__executed_t*)resp->loaded_executable_execute_response;
      if (x) {
        for (size_t i = 0; x->sharding_bytes && i < x->n; i++) free(x->sharding_bytes[i]);
        free(x->sharding_bytes);
        free(x->serialized);
        free(x->shardings);
        free(x->shapes);
        free(x->dtypes);
        free(x->out_ptrs);
        free(x->outs);
        free(x);
      }
      break;
    }
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_COST_ANALYSIS_RESPONSE: {
      cw__cost_t* c = (cw__cost_t*)resp->loaded_executable_cost_analysis_response;
      if (c) {
        cw_proxy_attributes_free(&c->map);
        free(c);
      }
      break;
    }
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_HUMAN_READABLE_PROGRAM_TEXT_RESPONSE: {
      cw__text_t* t =
          (cw__text_t*)resp->loaded_executable_human_readable_program_text_response;
      if (t) {
        free(t->text);
        free(t);
      }
      break;
    }
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_MPMD_METADATA_RESPONSE:
      free(resp->loaded_executable_mpmd_metadata_response);  // its error's text is static
      break;
    case CW_IFRT__IFRT_RESPONSE__RESPONSE_GET_DEFAULT_LAYOUT_RESPONSE: {
      cw__layout_t* l = (cw__layout_t*)resp->get_default_layout_response;
      if (l) {
        free(l->bytes);
        free(l);
      }
      break;
    }
    default:
      cw_proxy_array_response_free(resp);  // the flat ones
      return;
  }
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE__NOT_SET;
}
