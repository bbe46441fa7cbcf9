// Executables (cw_plugin_executable.h): compile through the controller (the
// one blocking round trip of a jit), metadata from the returned
// ExecutableInfo, and the executable's DELETE when JAX drops it.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_health.h"
#include "cw_plugin_hostcb.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_resume.h"
#include "cw_plugin_worker.h"
#include "cw_messages.h"
#include "cw_serialized_exe.h"
#include "proto/xla_compile_options.pb-c.h"

// Compiles tried when the controller is lost during one (each after the
// session resumed on a restarted controller).
#define CW__COMPILE_ATTEMPTS 4

void cw_plugin_exe_release(cw_plugin_exe_t* e) {
  if (!e || atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
  free(e->name);
  free(e->output_types);
  free(e->output_dims);
  free(e->output_ranks);
  free(e->output_dim_offsets);
  for (size_t i = 0; e->output_kinds && i < e->num_outputs; ++i) free(e->output_kinds[i]);
  free(e->output_kinds);
  free(e->output_kind_sizes);
  free(e->output_memories);
  free(e->fingerprint);
  free(e->program);
  free(e->program_format);
  free(e->source);
  free(e->source_format);
  free(e->devices);
  free(e->device_ptrs);
  free(e->compile_options);
  free(e->logical_ids);
  free(e->device_assignment);
  free(e->donated_params);
  free(e);
}

static cw_status_t cw__oom(void) { return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"); }

// Serialized xla.DeviceAssignmentProto: [partition][replica] of global ids,
// from launch order (replica-major: index = replica * partitions + partition).
static cw_status_t cw__exe_device_assignment(cw_plugin_exe_t* e) {
  size_t r = e->num_replicas, p = e->num_partitions;
  if (r == 0 || p == 0 || r * p != e->num_devices) return cw_ok_status();  // portable: size 0
  Causeway__Xla__ComputationDevice* cds = calloc(p, sizeof(*cds));
  Causeway__Xla__ComputationDevice** cdp = calloc(p, sizeof(*cdp));
  int64_t* ids = calloc(r * p, sizeof(*ids));
  cw_status_t s = (cds && cdp && ids) ? cw_ok_status() : cw__oom();
  if (!s) {
    for (size_t pi = 0; pi < p; ++pi) {
      causeway__xla__computation_device__init(&cds[pi]);
      cds[pi].n_replica_device_ids = r;
      cds[pi].replica_device_ids = &ids[pi * r];
      for (size_t ri = 0; ri < r; ++ri) ids[pi * r + ri] = e->devices[ri * p + pi]->global_id;
      cdp[pi] = &cds[pi];
    }
    Causeway__Xla__DeviceAssignment da = CAUSEWAY__XLA__DEVICE_ASSIGNMENT__INIT;
    da.replica_count = (int32_t)r;
    da.computation_count = (int32_t)p;
    da.n_computation_devices = p;
    da.computation_devices = cdp;
    size_t n = causeway__xla__device_assignment__get_packed_size(&da);
    e->device_assignment = malloc(n ? n : 1);
    if (!e->device_assignment) {
      s = cw__oom();
    } else {
      e->device_assignment_size = causeway__xla__device_assignment__pack(&da, e->device_assignment);
    }
  }
  free(cds);
  free(cdp);
  free(ids);
  return s;
}

// Each output's memory on each device, once: a launch then names it without
// looking the kind up. Left NULL when every output is in its device's default.
static cw_status_t cw__exe_output_memories(cw_plugin_exe_t* e) {
  bool all_default = true;
  for (size_t d = 0; d < e->num_devices; ++d) {
    for (size_t o = 0; o < e->num_outputs; ++o) {
      all_default &= !strcmp(e->output_kinds[o], e->devices[d]->default_memory->kind);
    }
  }
  if (all_default) return cw_ok_status();
  e->output_memories = calloc(e->num_devices * e->num_outputs, sizeof(*e->output_memories));
  if (!e->output_memories) return cw__oom();
  for (size_t d = 0; d < e->num_devices; ++d) {
    for (size_t o = 0; o < e->num_outputs; ++o) {
      cw_plugin_memory_t* m = cw_plugin_device_memory_of_kind(e->devices[d], e->output_kinds[o]);
      e->output_memories[d * e->num_outputs + o] = m ? m : e->devices[d]->default_memory;
    }
  }
  return cw_ok_status();
}

static cw_status_t cw__exe_from_info(cw_plugin_client_t* c, uint64_t id,
                                     const Causeway__V1__ExecutableInfo* info, const char* options,
                                     size_t options_size, cw_plugin_exe_t** out) {
  *out = NULL;
  cw_plugin_exe_t* e = calloc(1, sizeof(*e));
  if (!e) return cw__oom();
  atomic_init(&e->refs, 1);
  e->client = c;
  e->id = id;
  e->name = strdup(info->name && info->name[0] ? info->name : "causeway_program");
  e->num_replicas = info->num_replicas ? info->num_replicas : 1;
  e->num_partitions = info->num_partitions ? info->num_partitions : 1;
  e->num_outputs = info->num_outputs;
  size_t no = e->num_outputs;
  cw_status_t s = e->name ? cw_ok_status() : cw__oom();
  if (!s && (info->n_output_dtypes != no || info->n_output_dims != no)) {
    s = cw_make_status(CW_INTERNAL,
                       "controller sent %zu output dtypes and %zu output shapes for %zu outputs",
                       info->n_output_dtypes, info->n_output_dims, no);
  }
  size_t total_dims = 0;
  for (size_t i = 0; !s && i < no; ++i) {
    total_dims += info->output_dims[i] ? info->output_dims[i]->n_values : 0;
  }
  if (!s) {
    e->output_types = calloc(no + 1, sizeof(*e->output_types));
    e->output_dims = calloc(total_dims + 1, sizeof(*e->output_dims));
    e->output_ranks = calloc(no + 1, sizeof(*e->output_ranks));
    e->output_dim_offsets = calloc(no + 1, sizeof(*e->output_dim_offsets));
    e->output_kinds = calloc(no + 1, sizeof(*e->output_kinds));
    e->output_kind_sizes = calloc(no + 1, sizeof(*e->output_kind_sizes));
    if (!e->output_types || !e->output_dims || !e->output_ranks || !e->output_dim_offsets ||
        !e->output_kinds || !e->output_kind_sizes) {
      s = cw__oom();
    }
  }
  size_t off = 0;
  for (size_t i = 0; !s && i < no; ++i) {
    e->output_types[i] = (PJRT_Buffer_Type)info->output_dtypes[i];
    size_t rank = info->output_dims[i] ? info->output_dims[i]->n_values : 0;
    // Peer input: JAX CHECK-fails (aborts the process) on a PJRT_Buffer_Type
    // it does not know. A token has no bytes and no shape to check.
    int dtype = (int)info->output_dtypes[i];
    uint64_t extent = 0;
    cw_status_t es = dtype == CAUSEWAY__V1__DTYPE__DTYPE_TOKEN
                         ? cw_ok_status()
                         : cw_array_extent(dtype, rank ? info->output_dims[i]->values : NULL,
                                           rank, NULL, 0, &extent);
    if (es) {
      s = cw_status_annotate(es, "output %zu of %s, as the controller describes it", i, e->name);
      break;
    }
    e->output_ranks[i] = rank;
    e->output_dim_offsets[i] = off;
    if (rank) memcpy(&e->output_dims[off], info->output_dims[i]->values, rank * sizeof(int64_t));
    off += rank;
    // Older workers name no kinds: their outputs are in device memory.
    const char* kind = info->n_output_memory_kinds == no && info->output_memory_kinds[i] &&
                               info->output_memory_kinds[i][0]
                           ? info->output_memory_kinds[i]
                           : "device";
    e->output_kinds[i] = strdup(kind);
    if (!e->output_kinds[i]) s = cw__oom();
    e->output_kind_sizes[i] = strlen(kind);
  }
  if (!s && info->fingerprint && info->fingerprint[0]) {
    e->fingerprint = strdup(info->fingerprint);
    if (!e->fingerprint) s = cw__oom();
  }
  if (!s && info->optimized_program.len) {
    e->program = malloc(info->optimized_program.len);
    e->program_format = strdup(info->optimized_program_format && info->optimized_program_format[0]
                                   ? info->optimized_program_format
                                   : "hlo_with_config");
    if (!e->program || !e->program_format) {
      s = cw__oom();
    } else {
      memcpy(e->program, info->optimized_program.data, info->optimized_program.len);
      e->program_size = info->optimized_program.len;
    }
  }
  if (!s && info->n_devices == 0) {
    s = cw_make_status(CW_INTERNAL, "controller sent an executable with no devices");
  }
  if (!s) {
    e->num_devices = info->n_devices;
    e->devices = calloc(e->num_devices, sizeof(*e->devices));
    e->device_ptrs = calloc(e->num_devices, sizeof(*e->device_ptrs));
    e->logical_ids = calloc(e->num_devices, sizeof(*e->logical_ids));
    if (!e->devices || !e->device_ptrs || !e->logical_ids) s = cw__oom();
  }
  for (size_t i = 0; !s && i < e->num_devices; ++i) {
    cw_plugin_device_t* d = cw_plugin_device_find(c, info->devices[i]);
    if (!d) {
      s = cw_make_status(CW_INTERNAL, "executable names unknown device %d", info->devices[i]);
      break;
    }
    e->devices[i] = d;
    e->device_ptrs[i] = (PJRT_Device*)d;
    e->logical_ids[i].replica = (int)(i / e->num_partitions);
    e->logical_ids[i].partition = (int)(i % e->num_partitions);
    const cw_plugin_device_t* d0 = e->devices[0];
    if (i > 0 && d->worker != d0->worker && d->island == d0->island) {
      // The controller placed it on an island of several workers (a
      // multi-process plugin): its launches are parts the controller gangs,
      // which this plugin's launch path does not make.
      s = cw_make_status(CW_UNIMPLEMENTED,
                         "executable %s runs on island %u, whose devices are on several workers "
                         "(%s and %s): through JAX, causeway runs a program on one worker's "
                         "devices; an island of several workers takes programs from causeway's "
                         "client library (docs/jax.md)",
                         e->name, d0->island, d0->worker->name, d->worker->name);
    } else if (i > 0 && d->worker != d0->worker) {
      s = cw_make_status(CW_INVALID_ARGUMENT,
                         "executable spans workers %s and %s; a program runs within one island",
                         d0->worker->name, d->worker->name);
    }
  }
  if (!s) e->worker = e->devices[0]->worker;
  if (!s) s = cw__exe_output_memories(e);
  if (!s && options_size) {
    e->compile_options = malloc(options_size);
    if (!e->compile_options) {
      s = cw__oom();
    } else {
      memcpy(e->compile_options, options, options_size);
      e->compile_options_size = options_size;
    }
  }
  if (!s) s = cw__exe_device_assignment(e);
  if (!s && info->memory_stats) {
    e->has_memory_stats = true;
    e->memory_stats = *info->memory_stats;  // scalars only
  }
  if (!s && info->n_donated_params) {
    e->donated_params = malloc(info->n_donated_params * sizeof(*e->donated_params));
    if (!e->donated_params) {
      s = cw__oom();
    } else {
      memcpy(e->donated_params, info->donated_params,
             info->n_donated_params * sizeof(*e->donated_params));
      e->num_donated_params = info->n_donated_params;
    }
  }
  if (s) {
    cw_plugin_exe_release(e);
    return s;
  }
  *out = e;
  return cw_ok_status();
}

static void cw__refused_deleted(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  cw_status_free(status);  // a controller lost meanwhile forgets it with the session
}

// A compiled program this client refused (its description is one no
// executable here can have): DELETE through the controller, which drops it
// from every worker it loaded it on.
static void cw__forget_refused(cw_plugin_client_t* c, uint64_t exe_id) {
  cw_client_t* ctrl = NULL;
  uint64_t gen = 0;
  cw_status_free(cw_plugin_ctrl_now(c, &ctrl, &gen));
  if (!ctrl) return;
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.n_ids = 1;
  del.ids = &exe_id;
  cw_status_free(cw_client_send(ctrl, CW_MSG_DELETE, &del.base, NULL, 0, NULL,
                                cw__refused_deleted, NULL, NULL));
}

// Compiles `code` through the controller into a loaded executable that keeps
// the program and options for PJRT_Executable_Serialize.
static cw_status_t cw__compile(cw_plugin_client_t* c, const char* format, const uint8_t* code,
                               size_t code_size, const uint8_t* options, size_t options_size,
                               PJRT_LoadedExecutable** out) {
  *out = NULL;
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = cw_plugin_client_new_id(c);
  req.format = (char*)format;
  req.code.data = (uint8_t*)code;
  req.code.len = code_size;
  req.compile_options.data = (uint8_t*)options;
  req.compile_options.len = options ? options_size : 0;
  ProtobufCMessage* reply = NULL;
  cw_status_t s = cw_ok_status();
  // A controller lost meanwhile: waits for the session to resume on its
  // restarted one and compiles again under the same id (a LOAD the old one
  // made is found on the worker, cw_ctl_compile.c).
  for (int attempt = 0;; ++attempt) {
    cw_client_t* ctrl = NULL;
    uint64_t gen = 0;
    s = cw_plugin_ctrl_get(c, &ctrl, &gen);
    if (!s) s = cw_client_call(ctrl, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, &reply, NULL);
    if (!s || attempt >= CW__COMPILE_ATTEMPTS || !cw_plugin_ctrl_retry(c, gen, s)) break;
    cw_status_free(s);
  }
  // XLA's message, unchanged; a lost controller is named.
  if (s) return cw_plugin_health_controller_error(c, s);
  const Causeway__V1__CompileReply* r = (const Causeway__V1__CompileReply*)reply;
  cw_plugin_exe_t* e = NULL;
  if (!r->info) {
    s = cw_make_status(CW_INTERNAL, "the controller's compile reply carries no ExecutableInfo");
  } else {
    s = cw__exe_from_info(c, r->exe_id ? r->exe_id : req.exe_id, r->info, (const char*)options,
                          req.compile_options.len, &e);
  }
  uint64_t exe_id = r->exe_id ? r->exe_id : req.exe_id;
  protobuf_c_message_free_unpacked(reply, NULL);
  if (s) {
    // Loaded on its workers all the same: dropped now, not at the session's end.
    cw__forget_refused(c, exe_id);
    return s;
  }
  e->source_format = strdup(format);
  e->source = malloc(code_size ? code_size : 1);
  if (!e->source_format || !e->source) {
    cw_plugin_exe_release(e);
    return cw__oom();
  }
  if (code_size) memcpy(e->source, code, code_size);
  e->source_size = code_size;
  if (c->resume) {  // announced to a restarted controller until its DELETE is answered
    int32_t stack[64];
    int32_t* ids = e->num_devices <= 64 ? stack : malloc(e->num_devices * sizeof(*ids));
    for (size_t i = 0; ids && i < e->num_devices; ++i) ids[i] = e->devices[i]->global_id;
    if (ids) cw_plugin_resume_exe_added(c, e->id, ids, e->num_devices, e);
    if (ids != stack) free(ids);
  }
  cw_plugin_loaded_t* l = calloc(1, sizeof(*l));
  if (!l) {
    cw_plugin_exe_release(e);
    return cw__oom();
  }
  l->exe = e;
  atomic_init(&l->deleted, false);
  *out = (PJRT_LoadedExecutable*)l;
  return cw_ok_status();
}

PJRT_Error* cw_plugin_client_compile(PJRT_Client_Compile_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_Compile_Args, executable);
  cw_plugin_client_t* c = (cw_plugin_client_t*)args->client;
  const PJRT_Program* prog = args->program;
  if (!c || !prog || (!prog->code && prog->code_size)) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "PJRT_Client_Compile: client and program required"));
  }
  char format[CW_SERIALIZED_EXE_MAX_FORMAT + 1];
  snprintf(format, sizeof(format), "%.*s", (int)(prog->format ? prog->format_size : 0),
           prog->format ? prog->format : "");
  return cw_plugin_error_or_null(cw__compile(
      c, format, (const uint8_t*)prog->code, prog->code_size,
      (const uint8_t*)args->compile_options, args->compile_options_size, &args->executable));
}

static void cw__serialized_free(PJRT_SerializedExecutable* exec) { free(exec); }

// The program and options the executable was compiled from (proto
// SerializedExecutable): loading compiles them again through the controller,
// whose compile cache makes that a lookup.
PJRT_Error* cw_plugin_executable_serialize(PJRT_Executable_Serialize_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_Serialize_Args, serialized_executable_deleter);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_Serialize", "executable");
  const cw_plugin_exe_t* e = (const cw_plugin_exe_t*)args->executable;
  cw_serialized_exe_t blob = {.format = e->source_format,
                              .code = e->source,
                              .code_size = e->source_size,
                              .compile_options = e->compile_options,
                              .compile_options_size = e->compile_options_size,
                              .fingerprint = e->fingerprint};
  uint8_t* bytes = NULL;
  size_t size = 0;
  cw_status_t s = cw_serialized_exe_pack(&blob, &bytes, &size);
  if (s) return cw_plugin_error_from_status(s);
  args->serialized_bytes = (const char*)bytes;
  args->serialized_bytes_size = size;
  args->serialized_executable = (PJRT_SerializedExecutable*)bytes;
  args->serialized_executable_deleter = cw__serialized_free;
  return NULL;
}

PJRT_Error* cw_plugin_executable_deserialize_and_load(
    PJRT_Executable_DeserializeAndLoad_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_DeserializeAndLoad_Args, loaded_executable);
  cw_plugin_client_t* c = (cw_plugin_client_t*)args->client;
  if (!c || (!args->serialized_executable && args->serialized_executable_size)) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "PJRT_Executable_DeserializeAndLoad: client and bytes required"));
  }
  cw_serialized_exe_t blob;
  void* msg = NULL;
  cw_status_t s = cw_serialized_exe_unpack((const uint8_t*)args->serialized_executable,
                                           args->serialized_executable_size, &blob, &msg);
  if (s) return cw_plugin_error_from_status(cw_status_annotate(s, "DeserializeAndLoad"));
  // Options given now (JAX's, for this process's devices) win.
  const uint8_t* options = blob.compile_options;
  size_t options_size = blob.compile_options_size;
  if (args->overridden_serialized_compile_options) {
    options = (const uint8_t*)args->overridden_serialized_compile_options;
    options_size = args->overridden_serialized_compile_options_size;
  }
  s = cw__compile(c, blob.format, blob.code, blob.code_size, options, options_size,
                  &args->loaded_executable);
  cw_serialized_exe_free(msg);
  return cw_plugin_error_or_null(s);
}

// ---- Executable queries ---------------------------------------------------------------

#define CW__EXE(args) ((cw_plugin_exe_t*)(args)->executable)
#define CW__LOADED(args) ((cw_plugin_loaded_t*)(args)->executable)

PJRT_Error* cw_plugin_executable_destroy(PJRT_Executable_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_Destroy_Args, executable);
  cw_plugin_exe_release(CW__EXE(args));
  return NULL;
}

PJRT_Error* cw_plugin_executable_name(PJRT_Executable_Name_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_Name_Args, executable_name_size);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_Name", "executable");
  args->executable_name = CW__EXE(args)->name;
  args->executable_name_size = strlen(CW__EXE(args)->name);
  return NULL;
}

PJRT_Error* cw_plugin_executable_num_replicas(PJRT_Executable_NumReplicas_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_NumReplicas_Args, num_replicas);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_NumReplicas", "executable");
  args->num_replicas = CW__EXE(args)->num_replicas;
  return NULL;
}

PJRT_Error* cw_plugin_executable_num_partitions(PJRT_Executable_NumPartitions_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_NumPartitions_Args, num_partitions);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_NumPartitions", "executable");
  args->num_partitions = CW__EXE(args)->num_partitions;
  return NULL;
}

PJRT_Error* cw_plugin_executable_num_outputs(PJRT_Executable_NumOutputs_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_NumOutputs_Args, num_outputs);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_NumOutputs", "executable");
  args->num_outputs = CW__EXE(args)->num_outputs;
  return NULL;
}

PJRT_Error* cw_plugin_executable_code_size(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_SizeOfGeneratedCodeInBytes_Args, size_in_bytes);
  args->size_in_bytes = 0;  // unknown here; failing would abort the caller
  return NULL;
}

PJRT_Error* cw_plugin_executable_output_memory_kinds(PJRT_Executable_OutputMemoryKinds_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_OutputMemoryKinds_Args, memory_kind_sizes);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_OutputMemoryKinds", "executable");
  args->num_outputs = CW__EXE(args)->num_outputs;
  args->memory_kinds = (const char* const*)CW__EXE(args)->output_kinds;
  args->memory_kind_sizes = CW__EXE(args)->output_kind_sizes;
  return NULL;
}

PJRT_Error* cw_plugin_executable_optimized_program(PJRT_Executable_OptimizedProgram_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_OptimizedProgram_Args, program);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_OptimizedProgram", "executable");
  cw_plugin_exe_t* e = CW__EXE(args);
  PJRT_Program* p = args->program;
  CW_PLUGIN_NEED(p, "OptimizedProgram", "program");
  if (!e->program) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_UNIMPLEMENTED, "the controller did not provide the optimized program of %s", e->name));
  }
  // Two calls: code == NULL asks for the size; then the caller's buffer.
  if (p->code) {
    if (p->code_size < e->program_size) {
      return cw_plugin_error_from_status(
          cw_make_status(CW_INVALID_ARGUMENT, "OptimizedProgram: buffer of %zu bytes, need %zu",
                         p->code_size, e->program_size));
    }
    memcpy(p->code, e->program, e->program_size);
  }
  p->code_size = e->program_size;
  p->format = e->program_format;
  p->format_size = strlen(e->program_format);
  return NULL;
}

PJRT_Error* cw_plugin_executable_output_element_types(
    PJRT_Executable_OutputElementTypes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_OutputElementTypes_Args, num_output_types);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_OutputElementTypes", "executable");
  args->output_types = CW__EXE(args)->output_types;
  args->num_output_types = CW__EXE(args)->num_outputs;
  return NULL;
}

PJRT_Error* cw_plugin_executable_output_dimensions(PJRT_Executable_OutputDimensions_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_OutputDimensions_Args, dim_sizes);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_OutputDimensions", "executable");
  args->num_outputs = CW__EXE(args)->num_outputs;
  args->dims = CW__EXE(args)->output_dims;
  args->dim_sizes = CW__EXE(args)->output_ranks;
  return NULL;
}

// The fingerprint slots of both executable kinds.
static PJRT_Error* cw__exe_fingerprint(const cw_plugin_exe_t* e, const char** out,
                                       size_t* out_size) {
  if (!e->fingerprint) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_UNIMPLEMENTED, "no fingerprint for %s", e->name));
  }
  *out = e->fingerprint;
  *out_size = strlen(e->fingerprint);
  return NULL;
}

PJRT_Error* cw_plugin_executable_fingerprint(PJRT_Executable_Fingerprint_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_Fingerprint_Args, executable_fingerprint_size);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_Fingerprint", "executable");
  return cw__exe_fingerprint(CW__EXE(args), &args->executable_fingerprint,
                             &args->executable_fingerprint_size);
}

PJRT_Error* cw_plugin_executable_memory_stats(PJRT_Executable_GetCompiledMemoryStats_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_GetCompiledMemoryStats_Args, host_temp_size_in_bytes);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_GetCompiledMemoryStats", "executable");
  const cw_plugin_exe_t* e = CW__EXE(args);
  if (!e->has_memory_stats) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_UNIMPLEMENTED,
        "PJRT_Executable_GetCompiledMemoryStats: worker %s's plugin gave no memory stats for %s",
        e->worker->name, e->name ? e->name : "the executable"));
  }
  // The caller's struct may end before the later fields.
#define CW__SET(field)                                                            \
  if (args->struct_size >= offsetof(PJRT_Executable_GetCompiledMemoryStats_Args, field) + \
                               sizeof(args->field)) {                             \
    args->field = e->memory_stats.field;                                          \
  }
  CW_COMPILED_MEMORY_STATS(CW__SET)
#undef CW__SET
  return NULL;
}

static void cw__no_options_deleter(PJRT_SerializedCompileOptions* options) {
  (void)options;  // owned by the executable
}

PJRT_Error* cw_plugin_executable_get_compile_options(PJRT_Executable_GetCompileOptions_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Executable_GetCompileOptions_Args,
                       serialized_compile_options_deleter);
  CW_PLUGIN_NEED(args->executable, "PJRT_Executable_GetCompileOptions", "executable");
  cw_plugin_exe_t* e = CW__EXE(args);
  args->serialized_bytes = (const char*)e->compile_options;
  args->serialized_bytes_size = e->compile_options_size;
  args->serialized_compile_options = NULL;
  args->serialized_compile_options_deleter = cw__no_options_deleter;
  return NULL;
}

// The executable's DELETE was answered (or failed for good): a restarted
// controller need not hear of it any more.
typedef struct cw__exe_deleted_s {
  cw_plugin_client_t* c;
  uint64_t id;
} cw__exe_deleted_t;

static void cw__deleted_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw__exe_deleted_t* d = user;
  cw_plugin_resume_exe_deleted(d->c, d->id);
  cw_status_free(status);
  free(d);
}

PJRT_Error* cw_plugin_loaded_destroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_Destroy_Args, executable);
  cw_plugin_loaded_t* l = CW__LOADED(args);
  if (!l) return NULL;
  cw_plugin_exe_t* e = l->exe;
  // The controller forgets it and the worker frees it, after every launch
  // sent before (the worker's seq keeps the order).
  cw__exe_deleted_t* d = malloc(sizeof(*d));
  if (d && !atomic_load_explicit(&e->worker->dead, memory_order_acquire)) {
    Causeway__V1__DeleteRequest req = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    uint64_t id = e->id;
    req.n_ids = 1;
    req.ids = &id;
    *d = (cw__exe_deleted_t){e->client, e->id};
    cw_status_t s =
        cw_plugin_worker_send_ordered(e->worker, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_DELETE,
                                      &req.base, &req.seq, cw__deleted_cb, d);
    if (s) cw__deleted_cb(d, s, NULL);
  } else {
    free(d);
    cw_plugin_resume_exe_deleted(e->client, e->id);
  }
  cw_plugin_exe_release(e);
  free(l);
  return NULL;
}

PJRT_Error* cw_plugin_loaded_get_executable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_GetExecutable_Args, executable);
  CW_PLUGIN_NEED(args->loaded_executable, "GetExecutable", "loaded_executable");
  cw_plugin_exe_t* e = ((cw_plugin_loaded_t*)args->loaded_executable)->exe;
  atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);  // the caller destroys it
  args->executable = (PJRT_Executable*)e;
  return NULL;
}

PJRT_Error* cw_plugin_loaded_addressable_devices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_AddressableDevices_Args,
                       num_addressable_devices);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_AddressableDevices", "executable");
  cw_plugin_exe_t* e = CW__LOADED(args)->exe;
  args->addressable_devices = e->device_ptrs;
  args->num_addressable_devices = e->num_devices;
  return NULL;
}

PJRT_Error* cw_plugin_loaded_delete(PJRT_LoadedExecutable_Delete_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_Delete_Args, executable);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_Delete", "executable");
  atomic_store(&CW__LOADED(args)->deleted, true);
  return NULL;
}

PJRT_Error* cw_plugin_loaded_is_deleted(PJRT_LoadedExecutable_IsDeleted_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_IsDeleted_Args, is_deleted);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_IsDeleted", "executable");
  args->is_deleted = atomic_load(&CW__LOADED(args)->deleted);
  return NULL;
}

PJRT_Error* cw_plugin_loaded_fingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_Fingerprint_Args, executable_fingerprint_size);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_Fingerprint", "executable");
  return cw__exe_fingerprint(CW__LOADED(args)->exe, &args->executable_fingerprint,
                             &args->executable_fingerprint_size);
}

static void cw__no_da_deleter(PJRT_DeviceAssignmentSerialized* da) {
  (void)da;  // owned by the executable
}

PJRT_Error* cw_plugin_loaded_get_device_assignment(
    PJRT_LoadedExecutable_GetDeviceAssignment_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_GetDeviceAssignment_Args,
                       serialized_device_assignment_deleter);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_GetDeviceAssignment", "executable");
  cw_plugin_exe_t* e = CW__LOADED(args)->exe;
  args->serialized_bytes = (const char*)e->device_assignment;
  args->serialized_bytes_size = e->device_assignment_size;
  args->serialized_device_assignment = NULL;
  args->serialized_device_assignment_deleter = cw__no_da_deleter;  // called unconditionally
  return NULL;
}

PJRT_Error* cw_plugin_loaded_logical_ids(
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args,
                       num_addressable_device_logical_ids);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_AddressableDeviceLogicalIds",
                 "executable");
  cw_plugin_exe_t* e = CW__LOADED(args)->exe;
  args->addressable_device_logical_ids = e->logical_ids;
  args->num_addressable_device_logical_ids = e->num_devices;
  return NULL;
}
