// The null plugin's slots it does not serve: each answers UNIMPLEMENTED with
// its own name, since JAX's wrapper calls slots without checking for NULL.
#include "cw_nullplugin.h"

#define CW__STUBS(X) \
  X(PJRT_Executable_GetCostAnalysis) \
  X(PJRT_Buffer_OpaqueDeviceMemoryDataPointer) \
  X(PJRT_CopyToDeviceStream_Destroy) \
  X(PJRT_CopyToDeviceStream_AddChunk) \
  X(PJRT_CopyToDeviceStream_TotalBytes) \
  X(PJRT_CopyToDeviceStream_GranuleSize) \
  X(PJRT_CopyToDeviceStream_CurrentBytes) \
  X(PJRT_TopologyDescription_Create) \
  X(PJRT_TopologyDescription_Destroy) \
  X(PJRT_TopologyDescription_PlatformName) \
  X(PJRT_TopologyDescription_PlatformVersion) \
  X(PJRT_TopologyDescription_GetDeviceDescriptions) \
  X(PJRT_TopologyDescription_Serialize) \
  X(PJRT_TopologyDescription_Attributes) \
  X(PJRT_Compile) \
  X(PJRT_Client_CreateViewOfDeviceBuffer) \
  X(PJRT_Client_TopologyDescription) \
  X(PJRT_Executable_GetCompiledMemoryStats) \
  X(PJRT_ExecuteContext_Create) \
  X(PJRT_ExecuteContext_Destroy) \
  X(PJRT_Buffer_CopyRawToHost) \
  X(PJRT_AsyncHostToDeviceTransferManager_AddMetadata) \
  X(PJRT_Client_DmaMap) \
  X(PJRT_Client_DmaUnmap) \
  X(PJRT_Client_CreateUninitializedBuffer) \
  X(PJRT_Client_UpdateGlobalProcessInfo) \
  X(PJRT_TopologyDescription_Deserialize) \
  X(PJRT_Client_CreateAliasBuffer) \
  X(PJRT_Client_FulfillAliasBuffer) \
  X(PJRT_Client_CreateErrorBuffer) \
  X(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral) \
  X(PJRT_Buffer_CopyRawToHostFuture) \
  X(PJRT_Device_PoisonExecution) \
  X(PJRT_Device_CreateAsyncTrackingEvent) \
  X(PJRT_AsyncTrackingEvent_Destroy) \
  X(PJRT_Executable_GetCompileOptions) \
  X(PJRT_Buffer_DonateWithControlDependency) \
  X(PJRT_Event_Create) \
  X(PJRT_Event_Set) \
  X(PJRT_Client_Load) \
  X(PJRT_Buffer_Bitcast) \
  X(PJRT_TopologyDescription_Fingerprint) \
  X(PJRT_Executable_ParameterMemoryKinds) \
  X(PJRT_Device_ClearMemoryStats) \
  X(PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace) \
  X(PJRT_TopologyDescription_GetMemorySpaceKindIds) \

#define CW__STUB(name)                                                                  \
  static PJRT_Error* cw__stub_##name(name##_Args* a) {                                  \
    (void)a;                                                                            \
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED, #name " is not implemented by " \
                                                            "cw_nullplugin");           \
  }
CW__STUBS(CW__STUB)
#undef CW__STUB

void cw_null_stubs_fill(PJRT_Api* api) {
#define CW__SET(name) \
  if (!api->name) api->name = cw__stub_##name;
  CW__STUBS(CW__SET)
#undef CW__SET
}
