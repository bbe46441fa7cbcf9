// The PJRT_Api table of libcauseway_pjrt.so: plugin attributes, the
// UNIMPLEMENTED stubs and GetPjrtApi, the library's only exported symbol.
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_plugin_api.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_client.h"
#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_execute.h"
#include "cw_plugin_transfer.h"

// ---- Plugin ------------------------------------------------------------------

static PJRT_Error* cw__plugin_initialize(PJRT_Plugin_Initialize_Args* args) {
  (void)args;
  return NULL;
}

// Until a session reports the workers' plugin, answer with the values of the
// pinned CPU plugin (lammps-jax-pjrt-cpu 0.11.2) so a pre-client caller sees
// something sane. Arrays are never freed: the API says process lifetime.
static const int64_t cw__default_shlo_current[3] = {1, 20, 0};
static const int64_t cw__default_shlo_minimum[3] = {0, 9, 0};
static PJRT_NamedValue cw__default_attrs[3] = {
    {.struct_size = sizeof(PJRT_NamedValue), .name = "xla_version", .name_size = 11,
     .type = PJRT_NamedValue_kInt64, .int64_value = 2, .value_size = 1},
    {.struct_size = sizeof(PJRT_NamedValue), .name = "stablehlo_current_version",
     .name_size = 25, .type = PJRT_NamedValue_kInt64List,
     .int64_array_value = cw__default_shlo_current, .value_size = 3},
    {.struct_size = sizeof(PJRT_NamedValue), .name = "stablehlo_minimum_version",
     .name_size = 25, .type = PJRT_NamedValue_kInt64List,
     .int64_array_value = cw__default_shlo_minimum, .value_size = 3},
};
static pthread_mutex_t cw__attrs_mu = PTHREAD_MUTEX_INITIALIZER;
static const PJRT_NamedValue* cw__attrs = cw__default_attrs;
static size_t cw__num_attrs = 3;

void cw_plugin_api_attributes_set(Causeway__V1__NamedValue* const* values, size_t count) {
  PJRT_NamedValue* out = calloc(count ? count : 1, sizeof(*out));
  if (!out) return;
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    const Causeway__V1__NamedValue* v = values[i];
    if (!v || !v->name) continue;
    PJRT_NamedValue* o = &out[n];
    o->struct_size = sizeof(*o);
    o->name = strdup(v->name);
    if (!o->name) continue;
    o->name_size = strlen(v->name);
    switch (v->value_case) {
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_S:
        o->type = PJRT_NamedValue_kString;
        o->string_value = strdup(v->s ? v->s : "");
        o->value_size = strlen(v->s ? v->s : "");
        break;
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_I:
        o->type = PJRT_NamedValue_kInt64;
        o->int64_value = v->i;
        o->value_size = 1;
        break;
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST: {
        size_t k = v->list ? v->list->n_values : 0;
        int64_t* a = calloc(k ? k : 1, sizeof(*a));
        if (!a) continue;
        if (k) memcpy(a, v->list->values, k * sizeof(*a));
        o->type = PJRT_NamedValue_kInt64List;
        o->int64_array_value = a;
        o->value_size = k;
        break;
      }
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_F:
        o->type = PJRT_NamedValue_kFloat;
        o->float_value = v->f;
        o->value_size = 1;
        break;
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_B:
        o->type = PJRT_NamedValue_kBool;
        o->bool_value = v->b;
        o->value_size = 1;
        break;
      default:
        continue;
    }
    ++n;
  }
  pthread_mutex_lock(&cw__attrs_mu);
  cw__attrs = out;  // the previous array stays valid for its holders
  cw__num_attrs = n;
  pthread_mutex_unlock(&cw__attrs_mu);
}

static PJRT_Error* cw__plugin_attributes(PJRT_Plugin_Attributes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Plugin_Attributes_Args, num_attributes);
  pthread_mutex_lock(&cw__attrs_mu);
  args->attributes = cw__attrs;
  args->num_attributes = cw__num_attrs;
  pthread_mutex_unlock(&cw__attrs_mu);
  return NULL;
}

// ---- UNIMPLEMENTED stubs -----------------------------------------------------

static PJRT_Error* cw__unimplemented(const char* name) {
  return cw_plugin_error_from_status(
      cw_make_status(CW_UNIMPLEMENTED, "%s is not implemented by the causeway plugin", name));
}

#define CW__STUB(name)                                   \
  static PJRT_Error* cw__stub_##name(name##_Args* args) { \
    (void)args;                                          \
    return cw__unimplemented(#name);                     \
  }

CW__STUB(PJRT_Client_Load)
CW__STUB(PJRT_Client_DmaMap)
CW__STUB(PJRT_Client_DmaUnmap)
CW__STUB(PJRT_Client_CreateViewOfDeviceBuffer)
CW__STUB(PJRT_Client_CreateUninitializedBuffer)
CW__STUB(PJRT_Client_CreateAliasBuffer)
CW__STUB(PJRT_Client_FulfillAliasBuffer)
CW__STUB(PJRT_Client_CreateBuffersForAsyncHostToDevice)
CW__STUB(PJRT_Client_TopologyDescription)
CW__STUB(PJRT_Client_UpdateGlobalProcessInfo)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_Destroy)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_TransferData)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_Device)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_BufferCount)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_BufferSize)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_SetBufferError)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_AddMetadata)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral)
CW__STUB(PJRT_Device_MemoryStats)
CW__STUB(PJRT_Device_ClearMemoryStats)
CW__STUB(PJRT_Device_PoisonExecution)
CW__STUB(PJRT_AsyncTrackingEvent_Destroy)
CW__STUB(PJRT_ExecuteContext_Create)
CW__STUB(PJRT_ExecuteContext_Destroy)
CW__STUB(PJRT_Executable_GetCostAnalysis)
CW__STUB(PJRT_Executable_Serialize)
CW__STUB(PJRT_Executable_GetCompiledMemoryStats)
CW__STUB(PJRT_Executable_ParameterMemoryKinds)
CW__STUB(PJRT_Executable_DeserializeAndLoad)
CW__STUB(PJRT_Buffer_GetMemoryLayout)
CW__STUB(PJRT_Buffer_UnsafePointer)
CW__STUB(PJRT_Buffer_IncreaseExternalReferenceCount)
CW__STUB(PJRT_Buffer_DecreaseExternalReferenceCount)
CW__STUB(PJRT_Buffer_OpaqueDeviceMemoryDataPointer)
CW__STUB(PJRT_Buffer_CopyRawToHost)
CW__STUB(PJRT_Buffer_CopyRawToHostFuture)
CW__STUB(PJRT_Buffer_DonateWithControlDependency)
CW__STUB(PJRT_Buffer_Bitcast)
CW__STUB(PJRT_CopyToDeviceStream_Destroy)
CW__STUB(PJRT_CopyToDeviceStream_AddChunk)
CW__STUB(PJRT_CopyToDeviceStream_TotalBytes)
CW__STUB(PJRT_CopyToDeviceStream_GranuleSize)
CW__STUB(PJRT_CopyToDeviceStream_CurrentBytes)
CW__STUB(PJRT_TopologyDescription_Create)
CW__STUB(PJRT_TopologyDescription_Destroy)
CW__STUB(PJRT_TopologyDescription_PlatformName)
CW__STUB(PJRT_TopologyDescription_PlatformVersion)
CW__STUB(PJRT_TopologyDescription_GetDeviceDescriptions)
CW__STUB(PJRT_TopologyDescription_Serialize)
CW__STUB(PJRT_TopologyDescription_Attributes)
CW__STUB(PJRT_TopologyDescription_Deserialize)
CW__STUB(PJRT_TopologyDescription_Fingerprint)
CW__STUB(PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace)
CW__STUB(PJRT_TopologyDescription_GetMemorySpaceKindIds)
CW__STUB(PJRT_Compile)

// ---- The table ---------------------------------------------------------------

static const PJRT_Api cw__api = {
    .struct_size = sizeof(PJRT_Api),
    .extension_start = NULL,
    .pjrt_api_version = {.struct_size = sizeof(PJRT_Api_Version),
                         .extension_start = NULL,
                         .major_version = CW_PJRT_API_MAJOR,
                         .minor_version = CW_PJRT_API_MINOR},

    .PJRT_Error_Destroy = cw_plugin_error_destroy,
    .PJRT_Error_Message = cw_plugin_error_message,
    .PJRT_Error_GetCode = cw_plugin_error_get_code,
    .PJRT_Plugin_Initialize = cw__plugin_initialize,
    .PJRT_Plugin_Attributes = cw__plugin_attributes,

    .PJRT_Event_Destroy = cw_plugin_event_destroy,
    .PJRT_Event_IsReady = cw_plugin_event_is_ready,
    .PJRT_Event_Error = cw_plugin_event_error,
    .PJRT_Event_Await = cw_plugin_event_await,
    .PJRT_Event_OnReady = cw_plugin_event_on_ready,

    .PJRT_Client_Create = cw_plugin_client_create,
    .PJRT_Client_Destroy = cw_plugin_client_destroy,
    .PJRT_Client_PlatformName = cw_plugin_client_platform_name,
    .PJRT_Client_ProcessIndex = cw_plugin_client_process_index,
    .PJRT_Client_PlatformVersion = cw_plugin_client_platform_version,
    .PJRT_Client_Devices = cw_plugin_client_devices,
    .PJRT_Client_AddressableDevices = cw_plugin_client_addressable_devices,
    .PJRT_Client_LookupDevice = cw_plugin_client_lookup_device,
    .PJRT_Client_LookupAddressableDevice = cw_plugin_client_lookup_addressable_device,
    .PJRT_Client_AddressableMemories = cw_plugin_client_addressable_memories,
    .PJRT_Client_Compile = cw_plugin_client_compile,
    .PJRT_Client_DefaultDeviceAssignment = cw_plugin_client_default_device_assignment,
    .PJRT_Client_BufferFromHostBuffer = cw_plugin_buffer_from_host,

    .PJRT_DeviceDescription_Id = cw_plugin_device_description_id,
    .PJRT_DeviceDescription_ProcessIndex = cw_plugin_device_description_process_index,
    .PJRT_DeviceDescription_Attributes = cw_plugin_device_description_attributes,
    .PJRT_DeviceDescription_Kind = cw_plugin_device_description_kind,
    .PJRT_DeviceDescription_DebugString = cw_plugin_device_description_debug_string,
    .PJRT_DeviceDescription_ToString = cw_plugin_device_description_to_string,

    .PJRT_Device_GetDescription = cw_plugin_device_get_description,
    .PJRT_Device_IsAddressable = cw_plugin_device_is_addressable,
    .PJRT_Device_LocalHardwareId = cw_plugin_device_local_hardware_id,
    .PJRT_Device_AddressableMemories = cw_plugin_device_addressable_memories,
    .PJRT_Device_DefaultMemory = cw_plugin_device_default_memory,
    .PJRT_Device_MemoryStats = cw__stub_PJRT_Device_MemoryStats,

    .PJRT_Memory_Id = cw_plugin_memory_id,
    .PJRT_Memory_Kind = cw_plugin_memory_kind,
    .PJRT_Memory_DebugString = cw_plugin_memory_debug_string,
    .PJRT_Memory_ToString = cw_plugin_memory_to_string,
    .PJRT_Memory_AddressableByDevices = cw_plugin_memory_addressable_by_devices,

    .PJRT_Executable_Destroy = cw_plugin_executable_destroy,
    .PJRT_Executable_Name = cw_plugin_executable_name,
    .PJRT_Executable_NumReplicas = cw_plugin_executable_num_replicas,
    .PJRT_Executable_NumPartitions = cw_plugin_executable_num_partitions,
    .PJRT_Executable_NumOutputs = cw_plugin_executable_num_outputs,
    .PJRT_Executable_SizeOfGeneratedCodeInBytes = cw_plugin_executable_code_size,
    .PJRT_Executable_GetCostAnalysis = cw__stub_PJRT_Executable_GetCostAnalysis,
    .PJRT_Executable_OutputMemoryKinds = cw_plugin_executable_output_memory_kinds,
    .PJRT_Executable_OptimizedProgram = cw_plugin_executable_optimized_program,
    .PJRT_Executable_Serialize = cw__stub_PJRT_Executable_Serialize,

    .PJRT_LoadedExecutable_Destroy = cw_plugin_loaded_destroy,
    .PJRT_LoadedExecutable_GetExecutable = cw_plugin_loaded_get_executable,
    .PJRT_LoadedExecutable_AddressableDevices = cw_plugin_loaded_addressable_devices,
    .PJRT_LoadedExecutable_Delete = cw_plugin_loaded_delete,
    .PJRT_LoadedExecutable_IsDeleted = cw_plugin_loaded_is_deleted,
    .PJRT_LoadedExecutable_Execute = cw_plugin_loaded_execute,
    .PJRT_Executable_DeserializeAndLoad = cw__stub_PJRT_Executable_DeserializeAndLoad,
    .PJRT_LoadedExecutable_Fingerprint = cw_plugin_loaded_fingerprint,

    .PJRT_Buffer_Destroy = cw_plugin_buffer_destroy,
    .PJRT_Buffer_ElementType = cw_plugin_buffer_element_type,
    .PJRT_Buffer_Dimensions = cw_plugin_buffer_dimensions,
    .PJRT_Buffer_UnpaddedDimensions = cw_plugin_buffer_unpadded_dimensions,
    .PJRT_Buffer_DynamicDimensionIndices = cw_plugin_buffer_dynamic_dimension_indices,
    .PJRT_Buffer_GetMemoryLayout = cw__stub_PJRT_Buffer_GetMemoryLayout,
    .PJRT_Buffer_OnDeviceSizeInBytes = cw_plugin_buffer_on_device_size,
    .PJRT_Buffer_Device = cw_plugin_buffer_device,
    .PJRT_Buffer_Memory = cw_plugin_buffer_memory,
    .PJRT_Buffer_Delete = cw_plugin_buffer_delete,
    .PJRT_Buffer_IsDeleted = cw_plugin_buffer_is_deleted,
    .PJRT_Buffer_CopyToDevice = cw_plugin_buffer_copy_to_device,
    .PJRT_Buffer_ToHostBuffer = cw_plugin_buffer_to_host,
    .PJRT_Buffer_IsOnCpu = cw_plugin_buffer_is_on_cpu,
    .PJRT_Buffer_ReadyEvent = cw_plugin_buffer_ready_event,
    .PJRT_Buffer_UnsafePointer = cw__stub_PJRT_Buffer_UnsafePointer,
    .PJRT_Buffer_IncreaseExternalReferenceCount =
        cw__stub_PJRT_Buffer_IncreaseExternalReferenceCount,
    .PJRT_Buffer_DecreaseExternalReferenceCount =
        cw__stub_PJRT_Buffer_DecreaseExternalReferenceCount,
    .PJRT_Buffer_OpaqueDeviceMemoryDataPointer = cw__stub_PJRT_Buffer_OpaqueDeviceMemoryDataPointer,

    .PJRT_CopyToDeviceStream_Destroy = cw__stub_PJRT_CopyToDeviceStream_Destroy,
    .PJRT_CopyToDeviceStream_AddChunk = cw__stub_PJRT_CopyToDeviceStream_AddChunk,
    .PJRT_CopyToDeviceStream_TotalBytes = cw__stub_PJRT_CopyToDeviceStream_TotalBytes,
    .PJRT_CopyToDeviceStream_GranuleSize = cw__stub_PJRT_CopyToDeviceStream_GranuleSize,
    .PJRT_CopyToDeviceStream_CurrentBytes = cw__stub_PJRT_CopyToDeviceStream_CurrentBytes,

    .PJRT_TopologyDescription_Create = cw__stub_PJRT_TopologyDescription_Create,
    .PJRT_TopologyDescription_Destroy = cw__stub_PJRT_TopologyDescription_Destroy,
    .PJRT_TopologyDescription_PlatformName = cw__stub_PJRT_TopologyDescription_PlatformName,
    .PJRT_TopologyDescription_PlatformVersion = cw__stub_PJRT_TopologyDescription_PlatformVersion,
    .PJRT_TopologyDescription_GetDeviceDescriptions =
        cw__stub_PJRT_TopologyDescription_GetDeviceDescriptions,
    .PJRT_TopologyDescription_Serialize = cw__stub_PJRT_TopologyDescription_Serialize,
    .PJRT_TopologyDescription_Attributes = cw__stub_PJRT_TopologyDescription_Attributes,
    .PJRT_Compile = cw__stub_PJRT_Compile,

    .PJRT_Executable_OutputElementTypes = cw_plugin_executable_output_element_types,
    .PJRT_Executable_OutputDimensions = cw_plugin_executable_output_dimensions,
    .PJRT_Buffer_CopyToMemory = cw_plugin_buffer_copy_to_memory,
    .PJRT_Client_CreateViewOfDeviceBuffer = cw__stub_PJRT_Client_CreateViewOfDeviceBuffer,
    .PJRT_Executable_Fingerprint = cw_plugin_executable_fingerprint,
    // UNIMPLEMENTED on purpose: a topology that works makes every
    // TopologyDescription_* call fatal in the caller.
    .PJRT_Client_TopologyDescription = cw__stub_PJRT_Client_TopologyDescription,
    .PJRT_Executable_GetCompiledMemoryStats = cw__stub_PJRT_Executable_GetCompiledMemoryStats,
    .PJRT_Memory_Kind_Id = cw_plugin_memory_kind_id,
    .PJRT_ExecuteContext_Create = cw__stub_PJRT_ExecuteContext_Create,
    .PJRT_ExecuteContext_Destroy = cw__stub_PJRT_ExecuteContext_Destroy,

    .PJRT_Buffer_CopyRawToHost = cw__stub_PJRT_Buffer_CopyRawToHost,
    .PJRT_AsyncHostToDeviceTransferManager_Destroy =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_Destroy,
    .PJRT_AsyncHostToDeviceTransferManager_TransferData =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_TransferData,
    .PJRT_Client_CreateBuffersForAsyncHostToDevice =
        cw__stub_PJRT_Client_CreateBuffersForAsyncHostToDevice,
    .PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer,
    .PJRT_AsyncHostToDeviceTransferManager_Device =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_Device,
    .PJRT_AsyncHostToDeviceTransferManager_BufferCount =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_BufferCount,
    .PJRT_AsyncHostToDeviceTransferManager_BufferSize =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_BufferSize,
    .PJRT_AsyncHostToDeviceTransferManager_SetBufferError =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_SetBufferError,
    .PJRT_AsyncHostToDeviceTransferManager_AddMetadata =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_AddMetadata,

    .PJRT_Client_DmaMap = cw__stub_PJRT_Client_DmaMap,
    .PJRT_Client_DmaUnmap = cw__stub_PJRT_Client_DmaUnmap,
    .PJRT_Client_CreateUninitializedBuffer = cw__stub_PJRT_Client_CreateUninitializedBuffer,
    .PJRT_Client_UpdateGlobalProcessInfo = cw__stub_PJRT_Client_UpdateGlobalProcessInfo,
    .PJRT_TopologyDescription_Deserialize = cw__stub_PJRT_TopologyDescription_Deserialize,
    .PJRT_Client_CreateAliasBuffer = cw__stub_PJRT_Client_CreateAliasBuffer,
    .PJRT_Client_FulfillAliasBuffer = cw__stub_PJRT_Client_FulfillAliasBuffer,
    .PJRT_LoadedExecutable_GetDeviceAssignment = cw_plugin_loaded_get_device_assignment,
    .PJRT_Client_CreateErrorBuffer = cw_plugin_client_create_error_buffer,
    .PJRT_AsyncHostToDeviceTransferManager_TransferLiteral =
        cw__stub_PJRT_AsyncHostToDeviceTransferManager_TransferLiteral,

    .PJRT_Buffer_CopyRawToHostFuture = cw__stub_PJRT_Buffer_CopyRawToHostFuture,
    .PJRT_Device_PoisonExecution = cw__stub_PJRT_Device_PoisonExecution,
    // Must succeed (the caller aborts otherwise); we return no event.
    .PJRT_Device_CreateAsyncTrackingEvent = cw_plugin_device_create_async_tracking_event,
    .PJRT_AsyncTrackingEvent_Destroy = cw__stub_PJRT_AsyncTrackingEvent_Destroy,
    .PJRT_Executable_GetCompileOptions = cw_plugin_executable_get_compile_options,
    .PJRT_Buffer_DonateWithControlDependency = cw__stub_PJRT_Buffer_DonateWithControlDependency,
    .PJRT_Event_Create = cw_plugin_event_create,
    .PJRT_Event_Set = cw_plugin_event_set,
    // Present and always succeeding: the caller aborts if it fails.
    .PJRT_Device_GetAttributes = cw_plugin_device_get_attributes,
    .PJRT_Client_Load = cw__stub_PJRT_Client_Load,

    .PJRT_LoadedExecutable_AddressableDeviceLogicalIds = cw_plugin_loaded_logical_ids,
    .PJRT_Buffer_Bitcast = cw__stub_PJRT_Buffer_Bitcast,
    .PJRT_Error_ForEachPayload = cw_plugin_error_for_each_payload,
    .PJRT_TopologyDescription_Fingerprint = cw__stub_PJRT_TopologyDescription_Fingerprint,
    .PJRT_Executable_ParameterMemoryKinds = cw__stub_PJRT_Executable_ParameterMemoryKinds,
    .PJRT_Device_ClearMemoryStats = cw__stub_PJRT_Device_ClearMemoryStats,
    .PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace =
        cw__stub_PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace,
    .PJRT_TopologyDescription_GetMemorySpaceKindIds =
        cw__stub_PJRT_TopologyDescription_GetMemorySpaceKindIds,
};

__attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi(void);
const PJRT_Api* GetPjrtApi(void) { return &cw__api; }
