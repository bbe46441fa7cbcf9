// The null plugin's buffers: bytes in host memory, charged to their device.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_nullplugin.h"

void cw_null_buffer_unref(cw_null_buffer_t* b) {
  if (atomic_fetch_sub(&b->refs, 1) != 1) return;
  atomic_fetch_sub(&b->dev->bytes_in_use, (int64_t)b->size);
  cw_null_event_unref(b->pending);
  free(b->data);
  free(b);
}

PJRT_Error* cw_null_buffer_create(cw_null_device_t* dev, PJRT_Buffer_Type type, const int64_t* dims,
                                  size_t rank, cw_null_buffer_t** out) {
  *out = NULL;
  if (rank > CW_NULL_MAX_RANK) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED, "cw_nullplugin: rank %zu is above %d", rank,
                       CW_NULL_MAX_RANK);
  }
  if (!cw_dtype_size((int)type)) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                       "cw_nullplugin: element type %d is not supported", (int)type);
  }
  uint64_t size = 0;
  cw_status_t st = cw_array_extent((int)type, dims, rank, NULL, 0, &size);
  if (st) {
    PJRT_Error* e =
        cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_nullplugin: %s", cw_status_message(st));
    cw_status_free(st);
    return e;
  }
  cw_null_buffer_t* b = calloc(1, sizeof(*b));
  if (!b || !(b->data = calloc(size ? size : 1, 1))) {
    free(b);
    return cw_null_err(PJRT_Error_Code_RESOURCE_EXHAUSTED,
                       "cw_nullplugin: out of memory for a buffer of %" PRIu64 " bytes", size);
  }
  b->dev = dev;
  b->type = type;
  b->rank = rank;
  for (size_t i = 0; i < rank; ++i) {
    b->dims[i] = dims[i];
    b->minor_to_major[i] = (int64_t)(rank - 1 - i);
  }
  b->size = size;
  b->refs = 1;
  int64_t now = atomic_fetch_add(&dev->bytes_in_use, (int64_t)size) + (int64_t)size;
  int64_t peak = atomic_load(&dev->peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&dev->peak_bytes, &peak, now)) {
  }
  atomic_fetch_add(&dev->num_allocs, 1);
  *out = b;
  return NULL;
}

PJRT_Error* cw_null_buffer_wait(const cw_null_buffer_t* b) {
  return b->pending ? cw_null_event_wait(b->pending) : NULL;
}

// Copies a host array laid out with `strides` (bytes per step of each dim,
// none negative) into dense row-major `dst`.
static void cw__gather(unsigned char* dst, const unsigned char* src, const int64_t* dims,
                       const int64_t* strides, size_t rank, size_t elem, size_t* pos) {
  if (rank == 0) {
    memcpy(dst + *pos, src, elem);
    *pos += elem;
    return;
  }
  for (int64_t i = 0; i < dims[0]; ++i) {
    cw__gather(dst, src + i * strides[0], dims + 1, strides + 1, rank - 1, elem, pos);
  }
}

static PJRT_Error* cw__from_host(PJRT_Client_BufferFromHostBuffer_Args* a) {
  cw_null_device_t* dev = a->memory ? CW_NULL_DEV(a->memory) : CW_NULL_DEV(a->device);
  if (!dev) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: no device or memory given");
  }
  if (a->device_layout) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                       "cw_nullplugin: device layouts other than the default");
  }
  bool strided = false;
  for (size_t i = 0; i < a->num_byte_strides; ++i) {
    if (a->byte_strides[i] < 0) {
      return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                         "cw_nullplugin: byte stride %" PRId64 " of dimension %zu is negative",
                         a->byte_strides[i], i);
    }
    strided = strided || a->byte_strides[i] != 0;
  }
  if (strided && a->num_byte_strides != a->num_dims) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: %zu byte strides for %zu dimensions", a->num_byte_strides,
                       a->num_dims);
  }
  cw_null_buffer_t* b = NULL;
  PJRT_Error* e = cw_null_buffer_create(dev, a->type, a->dims, a->num_dims, &b);
  if (e) return e;
  if (b->size && strided) {
    size_t pos = 0;
    cw__gather(b->data, a->data, a->dims, a->byte_strides, a->num_dims, cw_dtype_size(a->type),
               &pos);
  } else if (b->size) {
    memcpy(b->data, a->data, b->size);
  }
  a->done_with_host_buffer = CW_NULL_READY;
  a->buffer = (PJRT_Buffer*)b;
  return NULL;
}

// Whether b's bytes are final (written, or failed): nothing to wait for.
static bool cw__written(const cw_null_buffer_t* b) {
  return !b->pending || cw_null_event_is_ready(b->pending);
}

// A copy out of a buffer still being written, made once it is: into host
// memory `dst` or into buffer `to`, then `done` (taken) is set with the
// source's outcome.
typedef struct cw__later_s {
  cw_null_buffer_t* src;  // a reference
  void* dst;
  cw_null_buffer_t* to;  // a reference, or NULL
  cw_null_event_t* done;
} cw__later_t;

static void cw__copy_now(PJRT_Error* error, void* arg) {
  cw__later_t* l = arg;
  if (error) {
    cw_null_event_set_like(l->done, l->src->pending);
    cw_null_error_free(error);
  } else {
    memcpy(l->to ? l->to->data : l->dst, l->src->data, l->src->size);
    cw_null_event_set(l->done, 0, NULL);
  }
  cw_null_event_unref(l->done);
  cw_null_buffer_unref(l->src);
  if (l->to) cw_null_buffer_unref(l->to);
  free(l);
}

static PJRT_Error* cw__copy_later(cw_null_buffer_t* src, void* dst, cw_null_buffer_t* to,
                                  cw_null_event_t* done) {
  cw__later_t* l = malloc(sizeof(*l));
  if (!l) return CW_NULL_OOM;
  atomic_fetch_add(&src->refs, 1);
  if (to) atomic_fetch_add(&to->refs, 1);
  *l = (cw__later_t){src, dst, to, done};
  PJRT_Error* e = cw_null_event_on_ready(src->pending, cw__copy_now, l);
  if (e) {
    cw_null_buffer_unref(src);
    if (to) cw_null_buffer_unref(to);
    free(l);
  }
  return e;
}

// A layout that is dense row-major (JAX names it as tiled, without tiles).
static bool cw__row_major(const PJRT_Buffer_MemoryLayout* l, size_t rank) {
  if (l->type != PJRT_Buffer_MemoryLayout_Type_Tiled || l->tiled.num_tiles ||
      l->tiled.minor_to_major_size != rank) {
    return false;
  }
  for (size_t i = 0; i < rank; ++i) {
    if (l->tiled.minor_to_major[i] != (int64_t)(rank - 1 - i)) return false;
  }
  return true;
}

static PJRT_Error* cw__to_host(PJRT_Buffer_ToHostBuffer_Args* a) {
  const cw_null_buffer_t* b = CW_NULL_BUF(a->src);
  if (a->host_layout && !cw__row_major(a->host_layout, b->rank)) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                       "cw_nullplugin: host layouts other than dense row-major");
  }
  if (atomic_load(&b->deleted)) {
    return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION,
                       "cw_nullplugin: the buffer was deleted");
  }
  if (!a->dst) {
    a->dst_size = b->size;
    return NULL;
  }
  if (a->dst_size < b->size) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: destination of %zu bytes for a buffer of %" PRIu64,
                       a->dst_size, b->size);
  }
  if (cw__written(b)) {
    PJRT_Error* e = cw_null_buffer_wait(b);
    if (e) return e;
    memcpy(a->dst, b->data, b->size);
    a->event = CW_NULL_READY;
    return NULL;
  }
  cw_null_event_t* done = cw_null_event_create();
  if (!done) return CW_NULL_OOM;
  PJRT_Error* e = cw__copy_later(CW_NULL_BUF(a->src), a->dst, NULL, cw_null_event_ref(done));
  if (e) {
    cw_null_event_unref(done);
    cw_null_event_unref(done);
    return e;
  }
  a->event = (PJRT_Event*)done;
  return NULL;
}

static PJRT_Error* cw__copy_to(cw_null_buffer_t* src, cw_null_device_t* dev, PJRT_Buffer** out) {
  cw_null_buffer_t* b = NULL;
  PJRT_Error* e = cw_null_buffer_create(dev, src->type, src->dims, src->rank, &b);
  if (e) return e;
  if (cw__written(src)) {
    e = cw_null_buffer_wait(src);
    if (e) {
      cw_null_buffer_unref(b);
      return e;
    }
    memcpy(b->data, src->data, src->size);
  } else if (!(b->pending = cw_null_event_create()) ||
             (e = cw__copy_later(src, NULL, b, cw_null_event_ref(b->pending)))) {
    if (b->pending) cw_null_event_unref(b->pending);  // the copy's reference
    cw_null_buffer_unref(b);
    return e ? e : CW_NULL_OOM;
  }
  *out = (PJRT_Buffer*)b;
  return NULL;
}
static PJRT_Error* cw__copy_to_device(PJRT_Buffer_CopyToDevice_Args* a) {
  return cw__copy_to(CW_NULL_BUF(a->buffer), CW_NULL_DEV(a->dst_device), &a->dst_buffer);
}
static PJRT_Error* cw__copy_to_memory(PJRT_Buffer_CopyToMemory_Args* a) {
  return cw__copy_to(CW_NULL_BUF(a->buffer), CW_NULL_DEV(a->dst_memory), &a->dst_buffer);
}

static PJRT_Error* cw__buffer_destroy(PJRT_Buffer_Destroy_Args* a) {
  if (a->buffer) cw_null_buffer_unref(CW_NULL_BUF(a->buffer));
  return NULL;
}
static PJRT_Error* cw__buffer_delete(PJRT_Buffer_Delete_Args* a) {
  atomic_store(&CW_NULL_BUF(a->buffer)->deleted, true);
  return NULL;
}
static PJRT_Error* cw__buffer_is_deleted(PJRT_Buffer_IsDeleted_Args* a) {
  a->is_deleted = atomic_load(&CW_NULL_BUF(a->buffer)->deleted);
  return NULL;
}
static PJRT_Error* cw__buffer_type(PJRT_Buffer_ElementType_Args* a) {
  a->type = CW_NULL_BUF(a->buffer)->type;
  return NULL;
}
static PJRT_Error* cw__buffer_dims(PJRT_Buffer_Dimensions_Args* a) {
  a->dims = CW_NULL_BUF(a->buffer)->dims;
  a->num_dims = CW_NULL_BUF(a->buffer)->rank;
  return NULL;
}
static PJRT_Error* cw__buffer_unpadded(PJRT_Buffer_UnpaddedDimensions_Args* a) {
  a->unpadded_dims = CW_NULL_BUF(a->buffer)->dims;  // never padded
  a->num_dims = CW_NULL_BUF(a->buffer)->rank;
  return NULL;
}
static PJRT_Error* cw__buffer_dynamic(PJRT_Buffer_DynamicDimensionIndices_Args* a) {
  a->dynamic_dim_indices = NULL;
  a->num_dynamic_dims = 0;
  return NULL;
}
// False, though the bytes are in host memory: JAX would read them in place.
static PJRT_Error* cw__buffer_on_cpu(PJRT_Buffer_IsOnCpu_Args* a) {
  a->is_on_cpu = false;
  return NULL;
}
static PJRT_Error* cw__buffer_layout(PJRT_Buffer_GetMemoryLayout_Args* a) {
  const cw_null_buffer_t* b = CW_NULL_BUF(a->buffer);
  memset(&a->layout, 0, sizeof(a->layout));
  a->layout.struct_size = sizeof(a->layout);
  a->layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  a->layout.tiled.struct_size = sizeof(a->layout.tiled);
  a->layout.tiled.minor_to_major = b->minor_to_major;
  a->layout.tiled.minor_to_major_size = b->rank;
  return NULL;
}
static PJRT_Error* cw__buffer_size(PJRT_Buffer_OnDeviceSizeInBytes_Args* a) {
  a->on_device_size_in_bytes = CW_NULL_BUF(a->buffer)->size;
  return NULL;
}
static PJRT_Error* cw__buffer_device(PJRT_Buffer_Device_Args* a) {
  a->device = CW_NULL_BUF(a->buffer)->dev->device;
  return NULL;
}
static PJRT_Error* cw__buffer_memory(PJRT_Buffer_Memory_Args* a) {
  a->memory = CW_NULL_BUF(a->buffer)->dev->memory;
  return NULL;
}
static PJRT_Error* cw__buffer_ready(PJRT_Buffer_ReadyEvent_Args* a) {
  cw_null_event_t* pending = CW_NULL_BUF(a->buffer)->pending;
  a->event = pending ? (PJRT_Event*)cw_null_event_ref(pending) : CW_NULL_READY;
  return NULL;
}
static PJRT_Error* cw__unsafe_pointer(PJRT_Buffer_UnsafePointer_Args* a) {
  a->buffer_pointer = (uintptr_t)CW_NULL_BUF(a->buffer)->data;
  return NULL;
}
static PJRT_Error* cw__ref_up(PJRT_Buffer_IncreaseExternalReferenceCount_Args* a) {
  atomic_fetch_add(&CW_NULL_BUF(a->buffer)->external, 1);
  atomic_fetch_add(&CW_NULL_BUF(a->buffer)->refs, 1);
  return NULL;
}
static PJRT_Error* cw__ref_down(PJRT_Buffer_DecreaseExternalReferenceCount_Args* a) {
  cw_null_buffer_t* b = CW_NULL_BUF(a->buffer);
  int n = atomic_load(&b->external);
  do {
    if (n < 1) {
      return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION,
                         "cw_nullplugin: no external reference to drop");
    }
  } while (!atomic_compare_exchange_weak(&b->external, &n, n - 1));
  cw_null_buffer_unref(b);
  return NULL;
}

// ---- Transfer managers: buffers now, bytes later ---------------------------------------------

// Holds a reference to each of its buffers until it is destroyed; a buffer
// not written by then is ready with an error.
typedef struct cw__manager_s {
  cw_null_device_t* dev;
  size_t count;
  cw_null_buffer_t** bufs;
  bool* retrieved;
} cw__manager_t;

#define CW__MANAGER(p) ((cw__manager_t*)(p))

static void cw__manager_free(cw__manager_t* m) {
  for (size_t i = 0; i < m->count; ++i) {
    cw_null_buffer_t* b = m->bufs[i];
    if (!b) continue;
    char msg[128];
    snprintf(msg, sizeof(msg),
             "cw_nullplugin: transfer manager destroyed before buffer %zu was written", i);
    cw_null_event_set(b->pending, PJRT_Error_Code_CANCELLED, msg);
    cw_null_buffer_unref(b);
  }
  free(m->bufs);
  free(m->retrieved);
  free(m);
}

static PJRT_Error* cw__create_for_h2d(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args* a) {
  if (!a->memory) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_nullplugin: no memory given");
  }
  for (size_t i = 0; i < a->num_device_layouts; ++i) {
    if (a->device_layouts && a->device_layouts[i]) {
      return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                         "cw_nullplugin: device layouts other than the default");
    }
  }
  cw__manager_t* m = calloc(1, sizeof(*m));
  size_t n = a->num_shape_specs;
  if (!m || !(m->bufs = calloc(n ? n : 1, sizeof(*m->bufs))) ||
      !(m->retrieved = calloc(n ? n : 1, sizeof(*m->retrieved)))) {
    if (m) free(m->bufs);
    free(m);
    return CW_NULL_OOM;
  }
  m->dev = CW_NULL_DEV(a->memory);
  for (; m->count < n; ++m->count) {
    const PJRT_ShapeSpec* spec = &a->shape_specs[m->count];
    cw_null_buffer_t* b = NULL;
    PJRT_Error* e = cw_null_buffer_create(m->dev, spec->element_type, spec->dims, spec->num_dims, &b);
    if (!e && !(b->pending = cw_null_event_create())) {
      cw_null_buffer_unref(b);
      e = CW_NULL_OOM;
    }
    if (e) {
      cw__manager_free(m);
      return e;
    }
    m->bufs[m->count] = b;
  }
  a->transfer_manager = (PJRT_AsyncHostToDeviceTransferManager*)m;
  return NULL;
}

// The manager's buffer `index`, or an error naming the index.
static PJRT_Error* cw__manager_buffer(const cw__manager_t* m, int index, cw_null_buffer_t** out) {
  if (index < 0 || (size_t)index >= m->count) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: buffer index %d of a transfer manager of %zu", index,
                       m->count);
  }
  *out = m->bufs[index];
  return NULL;
}

static PJRT_Error* cw__manager_destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args* a) {
  if (a->transfer_manager) cw__manager_free(CW__MANAGER(a->transfer_manager));
  return NULL;
}

static PJRT_Error* cw__manager_transfer(
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args* a) {
  cw_null_buffer_t* b = NULL;
  PJRT_Error* e = cw__manager_buffer(CW__MANAGER(a->transfer_manager), a->buffer_index, &b);
  if (e) return e;
  if (cw_null_event_is_ready(b->pending)) {
    return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION,
                       "cw_nullplugin: buffer %d was already written or failed", a->buffer_index);
  }
  if (a->offset < 0 || a->transfer_size < 0 || (uint64_t)a->offset > b->size ||
      (uint64_t)a->transfer_size > b->size - (uint64_t)a->offset) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: transfer of %" PRId64 " bytes at %" PRId64
                       " into a buffer of %" PRIu64,
                       a->transfer_size, a->offset, b->size);
  }
  if (a->transfer_size) memcpy(b->data + a->offset, a->data, (size_t)a->transfer_size);
  if (a->is_last_transfer) cw_null_event_set(b->pending, 0, NULL);
  a->done_with_h2d_transfer = CW_NULL_READY;
  return NULL;
}

static PJRT_Error* cw__manager_retrieve(
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args* a) {
  cw__manager_t* m = CW__MANAGER(a->transfer_manager);
  cw_null_buffer_t* b = NULL;
  PJRT_Error* e = cw__manager_buffer(m, a->buffer_index, &b);
  if (e) return e;
  if (m->retrieved[a->buffer_index]) {
    return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION,
                       "cw_nullplugin: buffer %d was already retrieved", a->buffer_index);
  }
  m->retrieved[a->buffer_index] = true;
  atomic_fetch_add(&b->refs, 1);
  a->buffer_out = (PJRT_Buffer*)b;
  return NULL;
}

static PJRT_Error* cw__manager_device(PJRT_AsyncHostToDeviceTransferManager_Device_Args* a) {
  a->device_out = CW__MANAGER(a->transfer_manager)->dev->device;
  return NULL;
}

static PJRT_Error* cw__manager_count(PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args* a) {
  a->buffer_count = CW__MANAGER(a->transfer_manager)->count;
  return NULL;
}

static PJRT_Error* cw__manager_size(PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args* a) {
  cw_null_buffer_t* b = NULL;
  PJRT_Error* e = cw__manager_buffer(CW__MANAGER(a->transfer_manager), a->buffer_index, &b);
  if (!e) a->buffer_size = b->size;
  return e;
}

static PJRT_Error* cw__manager_set_error(
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args* a) {
  cw_null_buffer_t* b = NULL;
  PJRT_Error* e = cw__manager_buffer(CW__MANAGER(a->transfer_manager), a->buffer_index, &b);
  if (e) return e;
  char* msg = strndup(a->error_message ? a->error_message : "", a->error_message_size);
  if (!msg) return CW_NULL_OOM;
  bool set = cw_null_event_set(b->pending, a->error_code ? a->error_code : PJRT_Error_Code_UNKNOWN,
                               msg);
  free(msg);
  if (!set) {
    return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION,
                       "cw_nullplugin: buffer %d was already written or failed", a->buffer_index);
  }
  return NULL;
}

void cw_null_buffer_fill(PJRT_Api* api) {
  api->PJRT_Client_CreateBuffersForAsyncHostToDevice = cw__create_for_h2d;
  api->PJRT_AsyncHostToDeviceTransferManager_Destroy = cw__manager_destroy;
  api->PJRT_AsyncHostToDeviceTransferManager_TransferData = cw__manager_transfer;
  api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer = cw__manager_retrieve;
  api->PJRT_AsyncHostToDeviceTransferManager_Device = cw__manager_device;
  api->PJRT_AsyncHostToDeviceTransferManager_BufferCount = cw__manager_count;
  api->PJRT_AsyncHostToDeviceTransferManager_BufferSize = cw__manager_size;
  api->PJRT_AsyncHostToDeviceTransferManager_SetBufferError = cw__manager_set_error;
  api->PJRT_Client_BufferFromHostBuffer = cw__from_host;
  api->PJRT_Buffer_Destroy = cw__buffer_destroy;
  api->PJRT_Buffer_ElementType = cw__buffer_type;
  api->PJRT_Buffer_Dimensions = cw__buffer_dims;
  api->PJRT_Buffer_UnpaddedDimensions = cw__buffer_unpadded;
  api->PJRT_Buffer_DynamicDimensionIndices = cw__buffer_dynamic;
  api->PJRT_Buffer_IsOnCpu = cw__buffer_on_cpu;
  api->PJRT_Buffer_GetMemoryLayout = cw__buffer_layout;
  api->PJRT_Buffer_OnDeviceSizeInBytes = cw__buffer_size;
  api->PJRT_Buffer_Device = cw__buffer_device;
  api->PJRT_Buffer_Memory = cw__buffer_memory;
  api->PJRT_Buffer_Delete = cw__buffer_delete;
  api->PJRT_Buffer_IsDeleted = cw__buffer_is_deleted;
  api->PJRT_Buffer_CopyToDevice = cw__copy_to_device;
  api->PJRT_Buffer_CopyToMemory = cw__copy_to_memory;
  api->PJRT_Buffer_ToHostBuffer = cw__to_host;
  api->PJRT_Buffer_ReadyEvent = cw__buffer_ready;
  api->PJRT_Buffer_UnsafePointer = cw__unsafe_pointer;
  api->PJRT_Buffer_IncreaseExternalReferenceCount = cw__ref_up;
  api->PJRT_Buffer_DecreaseExternalReferenceCount = cw__ref_down;
}
