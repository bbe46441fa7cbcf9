// Executables (cw_plugin_executable.c): what compiling through the controller
// returns, their metadata slots, and dropping them. A PJRT_Executable is a
// cw_plugin_exe_t (reference-counted: the loaded executable and every
// GetExecutable caller hold one); a PJRT_LoadedExecutable is a
// cw_plugin_loaded_t. Launching one: cw_plugin_execute.h.
#ifndef CW_PLUGIN_EXECUTABLE_H_
#define CW_PLUGIN_EXECUTABLE_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_pjrt_c_api.h"
#include "proto/causeway.pb-c.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_device_s cw_plugin_device_t;
typedef struct cw_plugin_worker_s cw_plugin_worker_t;

// Set when compiled and read-only after (refs aside); the launch
// (cw_plugin_execute.c) reads it too.
typedef struct cw_plugin_exe_s {
  _Atomic int refs;
  cw_plugin_client_t* client;
  uint64_t id;
  char* name;
  size_t num_replicas;
  size_t num_partitions;
  size_t num_outputs;
  PJRT_Buffer_Type* output_types;
  int64_t* output_dims;  // concatenated
  size_t* output_ranks;
  size_t* output_dim_offsets;
  char** output_kinds;  // memory kind of each output (the worker's compile says)
  size_t* output_kind_sizes;
  // Output o on device d lives in output_memories[d * num_outputs + o]; NULL
  // when every output is in its device's default memory (the common case).
  struct cw_plugin_memory_s** output_memories;
  char* fingerprint;
  uint8_t* program;
  size_t program_size;
  char* program_format;
  size_t num_devices;
  cw_plugin_device_t** devices;  // in launch order
  PJRT_Device** device_ptrs;
  cw_plugin_worker_t* worker;  // where it runs
  uint8_t* compile_options;
  size_t compile_options_size;
  char* source_format;  // what it was compiled from (PJRT_Executable_Serialize)
  uint8_t* source;
  size_t source_size;
  PJRT_LogicalDeviceIds* logical_ids;
  uint8_t* device_assignment;  // serialized DeviceAssignmentProto
  size_t device_assignment_size;
  uint32_t* donated_params;  // parameters aliased to outputs (taken unless non-donatable)
  size_t num_donated_params;
  // The worker's plugin's compiled memory stats (has_memory_stats: it gave them).
  bool has_memory_stats;
  Causeway__V1__CompiledMemoryStats memory_stats;
} cw_plugin_exe_t;

typedef struct cw_plugin_loaded_s {
  cw_plugin_exe_t* exe;
  _Atomic bool deleted;
} cw_plugin_loaded_t;

// Drops one reference to `e` (NULL is ignored).
void cw_plugin_exe_release(cw_plugin_exe_t* e);

// PJRT_Client_Compile and the PJRT_Executable_* / PJRT_LoadedExecutable_*
// slots but Execute.
PJRT_Error* cw_plugin_client_compile(PJRT_Client_Compile_Args* args);
PJRT_Error* cw_plugin_executable_destroy(PJRT_Executable_Destroy_Args* args);
PJRT_Error* cw_plugin_executable_name(PJRT_Executable_Name_Args* args);
PJRT_Error* cw_plugin_executable_num_replicas(PJRT_Executable_NumReplicas_Args* args);
PJRT_Error* cw_plugin_executable_num_partitions(PJRT_Executable_NumPartitions_Args* args);
PJRT_Error* cw_plugin_executable_num_outputs(PJRT_Executable_NumOutputs_Args* args);
PJRT_Error* cw_plugin_executable_code_size(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args* args);
PJRT_Error* cw_plugin_executable_output_memory_kinds(PJRT_Executable_OutputMemoryKinds_Args* args);
PJRT_Error* cw_plugin_executable_optimized_program(PJRT_Executable_OptimizedProgram_Args* args);
PJRT_Error* cw_plugin_executable_output_element_types(
    PJRT_Executable_OutputElementTypes_Args* args);
PJRT_Error* cw_plugin_executable_output_dimensions(PJRT_Executable_OutputDimensions_Args* args);
PJRT_Error* cw_plugin_executable_fingerprint(PJRT_Executable_Fingerprint_Args* args);
// The worker's answer, kept from the compile (compiled.memory_analysis()).
PJRT_Error* cw_plugin_executable_memory_stats(PJRT_Executable_GetCompiledMemoryStats_Args* args);
PJRT_Error* cw_plugin_executable_get_compile_options(PJRT_Executable_GetCompileOptions_Args* args);
PJRT_Error* cw_plugin_executable_serialize(PJRT_Executable_Serialize_Args* args);
PJRT_Error* cw_plugin_executable_deserialize_and_load(
    PJRT_Executable_DeserializeAndLoad_Args* args);
PJRT_Error* cw_plugin_loaded_destroy(PJRT_LoadedExecutable_Destroy_Args* args);
PJRT_Error* cw_plugin_loaded_get_executable(PJRT_LoadedExecutable_GetExecutable_Args* args);
PJRT_Error* cw_plugin_loaded_addressable_devices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args);
PJRT_Error* cw_plugin_loaded_delete(PJRT_LoadedExecutable_Delete_Args* args);
PJRT_Error* cw_plugin_loaded_is_deleted(PJRT_LoadedExecutable_IsDeleted_Args* args);
PJRT_Error* cw_plugin_loaded_fingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args);
PJRT_Error* cw_plugin_loaded_get_device_assignment(
    PJRT_LoadedExecutable_GetDeviceAssignment_Args* args);
PJRT_Error* cw_plugin_loaded_logical_ids(
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args* args);

#endif  // CW_PLUGIN_EXECUTABLE_H_
