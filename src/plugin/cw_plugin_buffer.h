// PJRT buffers (cw_plugin_buffer.c): local proxies for worker-side objects
// named by ids the client chose, their queries, and dropping them. Filling
// and reading them: cw_plugin_transfer.h; a launch's outputs:
// cw_plugin_execute.c.
#ifndef CW_PLUGIN_BUFFER_H_
#define CW_PLUGIN_BUFFER_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_pjrt_c_api.h"
#include "cw_plugin_event.h"
#include "cw_status.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_device_s cw_plugin_device_t;
typedef struct cw_plugin_memory_s cw_plugin_memory_t;

#define CW_PLUGIN_BUFFER_INLINE_DIMS 6

// Transfers and launches read the fields; only `deleted` changes after
// creation.
typedef struct cw_plugin_buffer_s {
  cw_plugin_client_t* client;
  cw_plugin_device_t* device;
  cw_plugin_memory_t* memory;  // one of device's (its kind: where the worker keeps it)
  uint64_t id;
  PJRT_Buffer_Type type;
  size_t rank;
  int64_t* dims;  // points at inline_dims or heap
  int64_t inline_dims[CW_PLUGIN_BUFFER_INLINE_DIMS];
  cw_plugin_future_t* ready;  // the value exists on the worker (or failed)
  _Atomic bool deleted;       // deleted, donated to a launch, or destroyed
  uint32_t epoch;             // the worker's epoch when it was made
  _Atomic uint64_t address;   // on the worker, once asked (0: not yet)
  // DLPack's references, and the host copy they read (cw_plugin_external.c).
  _Atomic uint32_t external_refs;
  void* mirror;
} cw_plugin_buffer_t;

// Creates a proxy (no message sent) in `d`'s default memory; set `memory`
// after for another of d's memories. Takes a reference to `ready`.
CW_MUST_USE cw_status_t cw_plugin_buffer_create(cw_plugin_client_t* c, cw_plugin_device_t* d,
                                                uint64_t id, PJRT_Buffer_Type type,
                                                const int64_t* dims, size_t rank,
                                                cw_plugin_future_t* ready,
                                                cw_plugin_buffer_t** out_buffer);
// Frees a proxy that no worker knows of (its request was never sent).
void cw_plugin_buffer_free(cw_plugin_buffer_t* b);
// UNAVAILABLE when `b` lived on a worker that has since been replaced.
CW_MUST_USE cw_status_t cw_plugin_buffer_check_epoch(const cw_plugin_buffer_t* b);
// UNAVAILABLE: b lived on a worker that was replaced ("was replaced: buffer N ...").
CW_MUST_USE cw_status_t cw_plugin_buffer_lost(const cw_plugin_buffer_t* b);
// Bytes of one element of `type` (0: not a type causeway transfers).
size_t cw_plugin_buffer_dtype_size(PJRT_Buffer_Type type);
// Bytes of `b` in the dense default layout.
uint64_t cw_plugin_buffer_bytes(const cw_plugin_buffer_t* b);
// On the device: sub-byte types packed (PJRT_Buffer_OnDeviceSizeInBytes).
uint64_t cw_plugin_buffer_device_bytes(const cw_plugin_buffer_t* b);

// The PJRT_Buffer_* query and delete slots, and PJRT_Client_CreateErrorBuffer.
PJRT_Error* cw_plugin_buffer_destroy(PJRT_Buffer_Destroy_Args* args);
PJRT_Error* cw_plugin_buffer_delete(PJRT_Buffer_Delete_Args* args);
PJRT_Error* cw_plugin_buffer_is_deleted(PJRT_Buffer_IsDeleted_Args* args);
PJRT_Error* cw_plugin_buffer_element_type(PJRT_Buffer_ElementType_Args* args);
PJRT_Error* cw_plugin_buffer_dimensions(PJRT_Buffer_Dimensions_Args* args);
PJRT_Error* cw_plugin_buffer_unpadded_dimensions(PJRT_Buffer_UnpaddedDimensions_Args* args);
PJRT_Error* cw_plugin_buffer_dynamic_dimension_indices(
    PJRT_Buffer_DynamicDimensionIndices_Args* args);
PJRT_Error* cw_plugin_buffer_on_device_size(PJRT_Buffer_OnDeviceSizeInBytes_Args* args);
PJRT_Error* cw_plugin_buffer_device(PJRT_Buffer_Device_Args* args);
PJRT_Error* cw_plugin_buffer_memory(PJRT_Buffer_Memory_Args* args);
PJRT_Error* cw_plugin_buffer_is_on_cpu(PJRT_Buffer_IsOnCpu_Args* args);
PJRT_Error* cw_plugin_buffer_ready_event(PJRT_Buffer_ReadyEvent_Args* args);
PJRT_Error* cw_plugin_client_create_error_buffer(PJRT_Client_CreateErrorBuffer_Args* args);

#endif  // CW_PLUGIN_BUFFER_H_
