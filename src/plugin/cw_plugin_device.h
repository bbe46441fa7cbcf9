// PJRT devices and memories (cw_plugin_device.c): the session's global
// device table as JAX sees it, each device's memories as its worker's plugin
// has them (memory kinds), and their PJRT slots. A device is also its own PJRT_DeviceDescription.
#ifndef CW_PLUGIN_DEVICE_H_
#define CW_PLUGIN_DEVICE_H_

#include <stddef.h>

#include "cw_pjrt_c_api.h"
#include "cw_status.h"
#include "proto/causeway.pb-c.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_device_s cw_plugin_device_t;
typedef struct cw_plugin_memory_s cw_plugin_memory_t;

// Fills `d` (zeroed storage: c->devices[index]) from the session's device
// `g` (borrowed): names, attributes and its memories (ids from
// c->num_memories on). Needs the client's workers. On failure `d` still needs deinitializing.
CW_MUST_USE cw_status_t cw_plugin_device_initialize(cw_plugin_device_t* d, cw_plugin_client_t* c,
                                                    size_t index,
                                                    const Causeway__V1__GlobalDevice* g);
// Frees what `d` holds, the memory's user data included.
void cw_plugin_device_deinitialize(cw_plugin_device_t* d);
// `d`'s memory of `kind` (NULL if it has none).
cw_plugin_memory_t* cw_plugin_device_memory_of_kind(cw_plugin_device_t* d, const char* kind);
// The client's device with global id `global_id` (NULL if none).
cw_plugin_device_t* cw_plugin_device_find(cw_plugin_client_t* c, int global_id);

// The PJRT_DeviceDescription_*, PJRT_Device_* and PJRT_Memory_* slots.
PJRT_Error* cw_plugin_device_description_id(PJRT_DeviceDescription_Id_Args* args);
PJRT_Error* cw_plugin_device_description_process_index(
    PJRT_DeviceDescription_ProcessIndex_Args* args);
PJRT_Error* cw_plugin_device_description_attributes(PJRT_DeviceDescription_Attributes_Args* args);
PJRT_Error* cw_plugin_device_description_kind(PJRT_DeviceDescription_Kind_Args* args);
PJRT_Error* cw_plugin_device_description_debug_string(
    PJRT_DeviceDescription_DebugString_Args* args);
PJRT_Error* cw_plugin_device_description_to_string(PJRT_DeviceDescription_ToString_Args* args);
PJRT_Error* cw_plugin_device_get_description(PJRT_Device_GetDescription_Args* args);
PJRT_Error* cw_plugin_device_is_addressable(PJRT_Device_IsAddressable_Args* args);
PJRT_Error* cw_plugin_device_local_hardware_id(PJRT_Device_LocalHardwareId_Args* args);
PJRT_Error* cw_plugin_device_addressable_memories(PJRT_Device_AddressableMemories_Args* args);
PJRT_Error* cw_plugin_device_default_memory(PJRT_Device_DefaultMemory_Args* args);
PJRT_Error* cw_plugin_device_get_attributes(PJRT_Device_GetAttributes_Args* args);
PJRT_Error* cw_plugin_device_create_async_tracking_event(
    PJRT_Device_CreateAsyncTrackingEvent_Args* args);

PJRT_Error* cw_plugin_memory_id(PJRT_Memory_Id_Args* args);
PJRT_Error* cw_plugin_memory_kind(PJRT_Memory_Kind_Args* args);
PJRT_Error* cw_plugin_memory_kind_id(PJRT_Memory_Kind_Id_Args* args);
PJRT_Error* cw_plugin_memory_debug_string(PJRT_Memory_DebugString_Args* args);
PJRT_Error* cw_plugin_memory_to_string(PJRT_Memory_ToString_Args* args);
PJRT_Error* cw_plugin_memory_addressable_by_devices(PJRT_Memory_AddressableByDevices_Args* args);

#endif  // CW_PLUGIN_DEVICE_H_
