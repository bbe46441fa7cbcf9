// PJRT_Client (cw_plugin_client.c): creating one joins a cluster (or starts
// the embedded one), opens the session with the controller and connects to
// every worker; the queries answer from the session's tables.
#ifndef CW_PLUGIN_CLIENT_H_
#define CW_PLUGIN_CLIENT_H_

#include "cw_client.h"
#include "cw_pjrt_c_api.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;

// The options of `c`'s connections to its controller (credentials, events,
// liveness), for connecting again after a restart (cw_plugin_resume.c).
void cw_plugin_client_controller_options(cw_plugin_client_t* c, cw_client_options_t* out);
// The options of a connection to one of the session's workers (first, or a
// replacement): the session's token and TLS, host callbacks served.
void cw_plugin_client_worker_options(cw_plugin_client_t* c, cw_client_options_t* out);

PJRT_Error* cw_plugin_client_create(PJRT_Client_Create_Args* args);
PJRT_Error* cw_plugin_client_destroy(PJRT_Client_Destroy_Args* args);
PJRT_Error* cw_plugin_client_platform_name(PJRT_Client_PlatformName_Args* args);
PJRT_Error* cw_plugin_client_process_index(PJRT_Client_ProcessIndex_Args* args);
PJRT_Error* cw_plugin_client_update_global_process_info(
    PJRT_Client_UpdateGlobalProcessInfo_Args* args);
PJRT_Error* cw_plugin_client_platform_version(PJRT_Client_PlatformVersion_Args* args);
PJRT_Error* cw_plugin_client_devices(PJRT_Client_Devices_Args* args);
PJRT_Error* cw_plugin_client_addressable_devices(PJRT_Client_AddressableDevices_Args* args);
PJRT_Error* cw_plugin_client_lookup_device(PJRT_Client_LookupDevice_Args* args);
PJRT_Error* cw_plugin_client_lookup_addressable_device(
    PJRT_Client_LookupAddressableDevice_Args* args);
PJRT_Error* cw_plugin_client_addressable_memories(PJRT_Client_AddressableMemories_Args* args);
PJRT_Error* cw_plugin_client_default_device_assignment(
    PJRT_Client_DefaultDeviceAssignment_Args* args);

#endif  // CW_PLUGIN_CLIENT_H_
