// PJRT's async host-to-device transfer manager (cw_plugin_h2d.c): buffers
// made ahead of their bytes, filled in order by UPLOAD parts.
#ifndef CW_PLUGIN_H2D_H_
#define CW_PLUGIN_H2D_H_

#include "cw_pjrt_c_api.h"

PJRT_Error* cw_plugin_h2d_create(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args* args);
PJRT_Error* cw_plugin_h2d_destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args* args);
PJRT_Error* cw_plugin_h2d_transfer_data(
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args* args);
PJRT_Error* cw_plugin_h2d_retrieve_buffer(
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args* args);
PJRT_Error* cw_plugin_h2d_device(PJRT_AsyncHostToDeviceTransferManager_Device_Args* args);
PJRT_Error* cw_plugin_h2d_buffer_count(
    PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args* args);
PJRT_Error* cw_plugin_h2d_buffer_size(
    PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args* args);
PJRT_Error* cw_plugin_h2d_set_buffer_error(
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args* args);
PJRT_Error* cw_plugin_h2d_add_metadata(
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args* args);

#endif  // CW_PLUGIN_H2D_H_
