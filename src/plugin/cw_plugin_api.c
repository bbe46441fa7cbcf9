// The PJRT_Api table of libcauseway_pjrt.so: which function answers each
// slot, the UNIMPLEMENTED stubs, and GetPjrtApi, the library's only exported
// symbol.
#include <stddef.h>

#include "cw_plugin_attributes.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_client.h"
#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_external.h"
#include "cw_plugin_execute.h"
#include "cw_plugin_hostcb.h"
#include "cw_pjrt_ffi.h"
#include "cw_plugin_h2d.h"
#include "cw_plugin_transfer.h"

// ---- Plugin ------------------------------------------------------------------

static PJRT_Error* cw__plugin_initialize(PJRT_Plugin_Initialize_Args* args) {
  (void)args;
  return NULL;
}

// ---- UNIMPLEMENTED stubs -----------------------------------------------------

static PJRT_Error* cw__unimplemented(const char* name) {
  return cw_plugin_error_from_status(
      cw_make_status(CW_UNIMPLEMENTED, "%s is not implemented by the causeway plugin", name));
}

// A slot that answers UNIMPLEMENTED through `say`, naming the slot.
#define CW__STUB_SAYING(name, say)                       \
  static PJRT_Error* cw__stub_##name(name##_Args* args) { \
    (void)args;                                          \
    return say(#name);                                   \
  }
#define CW__STUB(name) CW__STUB_SAYING(name, cw__unimplemented)

CW__STUB(PJRT_Client_Load)
CW__STUB(PJRT_Client_DmaMap)
CW__STUB(PJRT_Client_DmaUnmap)
CW__STUB(PJRT_Client_CreateUninitializedBuffer)
CW__STUB(PJRT_Client_CreateAliasBuffer)
CW__STUB(PJRT_Client_FulfillAliasBuffer)
CW__STUB(PJRT_Client_TopologyDescription)
CW__STUB(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral)
CW__STUB(PJRT_Device_MemoryStats)
CW__STUB(PJRT_Device_ClearMemoryStats)
CW__STUB(PJRT_Device_PoisonExecution)
CW__STUB(PJRT_AsyncTrackingEvent_Destroy)
CW__STUB(PJRT_Executable_GetCostAnalysis)
CW__STUB(PJRT_Executable_ParameterMemoryKinds)
CW__STUB(PJRT_Buffer_GetMemoryLayout)
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
    // FFI: JAX hands host callbacks to Execute through it (cw_plugin_hostcb.h).
    .extension_start = &cw_plugin_hostcb_ffi.base,
    .pjrt_api_version = {.struct_size = sizeof(PJRT_Api_Version),
                         .extension_start = NULL,
                         .major_version = CW_PJRT_API_MAJOR,
                         .minor_version = CW_PJRT_API_MINOR},

    .PJRT_Error_Destroy = cw_plugin_error_destroy,
    .PJRT_Error_Message = cw_plugin_error_message,
    .PJRT_Error_GetCode = cw_plugin_error_get_code,
    .PJRT_Plugin_Initialize = cw__plugin_initialize,
    .PJRT_Plugin_Attributes = cw_plugin_attributes_get,

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
    .PJRT_Executable_Serialize = cw_plugin_executable_serialize,

    .PJRT_LoadedExecutable_Destroy = cw_plugin_loaded_destroy,
    .PJRT_LoadedExecutable_GetExecutable = cw_plugin_loaded_get_executable,
    .PJRT_LoadedExecutable_AddressableDevices = cw_plugin_loaded_addressable_devices,
    .PJRT_LoadedExecutable_Delete = cw_plugin_loaded_delete,
    .PJRT_LoadedExecutable_IsDeleted = cw_plugin_loaded_is_deleted,
    .PJRT_LoadedExecutable_Execute = cw_plugin_loaded_execute,
    .PJRT_Executable_DeserializeAndLoad = cw_plugin_executable_deserialize_and_load,
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
    .PJRT_Buffer_UnsafePointer = cw_plugin_buffer_unsafe_pointer,
    .PJRT_Buffer_IncreaseExternalReferenceCount = cw_plugin_buffer_increase_external_refs,
    .PJRT_Buffer_DecreaseExternalReferenceCount = cw_plugin_buffer_decrease_external_refs,
    .PJRT_Buffer_OpaqueDeviceMemoryDataPointer = cw_plugin_buffer_opaque_pointer,

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
    .PJRT_Client_CreateViewOfDeviceBuffer = cw_plugin_client_create_view,
    .PJRT_Executable_Fingerprint = cw_plugin_executable_fingerprint,
    // UNIMPLEMENTED on purpose: a topology that works makes every
    // TopologyDescription_* call fatal in the caller.
    .PJRT_Client_TopologyDescription = cw__stub_PJRT_Client_TopologyDescription,
    .PJRT_Executable_GetCompiledMemoryStats = cw_plugin_executable_memory_stats,
    .PJRT_Memory_Kind_Id = cw_plugin_memory_kind_id,
    .PJRT_ExecuteContext_Create = cw_plugin_execute_context_create,
    .PJRT_ExecuteContext_Destroy = cw_plugin_execute_context_destroy,

    .PJRT_Buffer_CopyRawToHost = cw_plugin_buffer_copy_raw_to_host,
    .PJRT_AsyncHostToDeviceTransferManager_Destroy =
        cw_plugin_h2d_destroy,
    .PJRT_AsyncHostToDeviceTransferManager_TransferData =
        cw_plugin_h2d_transfer_data,
    .PJRT_Client_CreateBuffersForAsyncHostToDevice =
        cw_plugin_h2d_create,
    .PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer =
        cw_plugin_h2d_retrieve_buffer,
    .PJRT_AsyncHostToDeviceTransferManager_Device =
        cw_plugin_h2d_device,
    .PJRT_AsyncHostToDeviceTransferManager_BufferCount =
        cw_plugin_h2d_buffer_count,
    .PJRT_AsyncHostToDeviceTransferManager_BufferSize =
        cw_plugin_h2d_buffer_size,
    .PJRT_AsyncHostToDeviceTransferManager_SetBufferError =
        cw_plugin_h2d_set_buffer_error,
    .PJRT_AsyncHostToDeviceTransferManager_AddMetadata =
        cw_plugin_h2d_add_metadata,

    .PJRT_Client_DmaMap = cw__stub_PJRT_Client_DmaMap,
    .PJRT_Client_DmaUnmap = cw__stub_PJRT_Client_DmaUnmap,
    .PJRT_Client_CreateUninitializedBuffer = cw__stub_PJRT_Client_CreateUninitializedBuffer,
    .PJRT_Client_UpdateGlobalProcessInfo = cw_plugin_client_update_global_process_info,
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
