// External references to a buffer's bytes (cw_plugin_external.c): DLPack
// export asks for a pointer into this process, and DLPack import for a view
// of this process's memory. Both are zero-copy in an in-process plugin;
// here the bytes live in a worker, so an export reads them into a host copy
// (the buffer's mirror) and an import is refused as a view, which jaxlib
// answers by uploading a copy.
#ifndef CW_PLUGIN_EXTERNAL_H_
#define CW_PLUGIN_EXTERNAL_H_

#include "cw_pjrt_c_api.h"
#include "cw_plugin_buffer.h"

// A reference reads the bytes into the mirror first if there is none
// (blocking until the buffer is ready and read), and counts only once it is
// there: a failure leaves the count as it was. The mirror stays while a
// reference is held, or until the buffer is destroyed.
PJRT_Error* cw_plugin_buffer_increase_external_refs(
    PJRT_Buffer_IncreaseExternalReferenceCount_Args* args);
PJRT_Error* cw_plugin_buffer_decrease_external_refs(
    PJRT_Buffer_DecreaseExternalReferenceCount_Args* args);
// The mirror's address (read now if there is none).
PJRT_Error* cw_plugin_buffer_opaque_pointer(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args* args);
PJRT_Error* cw_plugin_client_create_view(PJRT_Client_CreateViewOfDeviceBuffer_Args* args);
// Frees `b`'s mirror (buffer destroy).
void cw_plugin_external_release(cw_plugin_buffer_t* b);

#endif  // CW_PLUGIN_EXTERNAL_H_
