// PJRT buffers (cw_plugin_buffer.h): local proxies named by client-chosen
// ids. Dropping one sends a batched DELETE to its worker in seq order; the
// requests that fill or read one: cw_plugin_transfer.c.
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_error.h"
#include "cw_plugin_external.h"
#include "cw_plugin_health.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_worker.h"

size_t cw_plugin_buffer_dtype_size(PJRT_Buffer_Type type) { return cw_dtype_size((int)type); }

static uint64_t cw__count(const cw_plugin_buffer_t* b) {
  uint64_t n = 1;
  for (size_t i = 0; i < b->rank; ++i) n *= (uint64_t)(b->dims[i] > 0 ? b->dims[i] : 0);
  return n;
}

uint64_t cw_plugin_buffer_bytes(const cw_plugin_buffer_t* b) {
  return cw__count(b) * cw_plugin_buffer_dtype_size(b->type);
}

uint64_t cw_plugin_buffer_device_bytes(const cw_plugin_buffer_t* b) {
  return cw_dtype_device_bytes((int)b->type, cw__count(b));
}

cw_status_t cw_plugin_buffer_create(cw_plugin_client_t* c, cw_plugin_device_t* d, uint64_t id,
                                    PJRT_Buffer_Type type, const int64_t* dims, size_t rank,
                                    cw_plugin_future_t* ready, cw_plugin_buffer_t** out_buffer) {
  *out_buffer = NULL;
  cw_plugin_buffer_t* b = malloc(sizeof(*b));
  if (!b) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  b->client = c;
  b->device = d;
  b->memory = d->default_memory;
  b->id = id;
  b->type = type;
  b->rank = rank;
  b->dims = b->inline_dims;
  if (rank > CW_PLUGIN_BUFFER_INLINE_DIMS) {
    b->dims = malloc(rank * sizeof(int64_t));
    if (!b->dims) {
      free(b);
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (rank) memcpy(b->dims, dims, rank * sizeof(int64_t));
  cw_plugin_future_retain(ready);
  b->ready = ready;
  atomic_init(&b->deleted, false);
  atomic_init(&b->address, 0);
  atomic_init(&b->external_refs, 0);
  b->mirror = NULL;
  // A new buffer on a replaced worker belongs to the replacement: connect
  // to it first (if it is not there yet, the buffer's request fails anyway).
  b->epoch = cw_plugin_worker_epoch(d->worker);
  *out_buffer = b;
  return cw_ok_status();
}

void cw_plugin_buffer_free(cw_plugin_buffer_t* b) {
  cw_plugin_external_release(b);
  cw_plugin_future_release(b->ready);
  if (b->dims != b->inline_dims) free(b->dims);
  free(b);
}

cw_status_t cw_plugin_buffer_check_epoch(const cw_plugin_buffer_t* b) {
  cw_plugin_worker_t* w = b->device->worker;
  if (b->epoch == atomic_load_explicit(&w->epoch, memory_order_acquire)) return cw_ok_status();
  return cw_plugin_buffer_lost(b);
}

cw_status_t cw_plugin_buffer_lost(const cw_plugin_buffer_t* b) {
  cw_plugin_worker_t* w = b->device->worker;
  return cw_make_status(CW_UNAVAILABLE,
                        "worker %s (%s) was replaced: buffer %llu lived on the "
                        "lost worker and its contents are gone; upload it again",
                        w->name, cw_plugin_worker_address(w), (unsigned long long)b->id);
}

#define CW__BUF(p) ((cw_plugin_buffer_t*)(p))

// Marks the buffer deleted and tells its worker (pipelined, in seq order).
static void cw__buffer_delete(cw_plugin_buffer_t* b) {
  if (atomic_exchange_explicit(&b->deleted, true, memory_order_acq_rel)) return;
  // Batched; a dead worker already freed everything of this session (and
  // one from before a replacement is not on the new worker at all).
  cw_plugin_worker_delete(b->device->worker, b->epoch, b->id, cw_plugin_buffer_device_bytes(b));
}

PJRT_Error* cw_plugin_buffer_destroy(PJRT_Buffer_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_Destroy_Args, buffer);
  if (!args->buffer) return NULL;
  cw__buffer_delete(CW__BUF(args->buffer));
  cw_plugin_buffer_free(CW__BUF(args->buffer));
  return NULL;
}

PJRT_Error* cw_plugin_buffer_delete(PJRT_Buffer_Delete_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_Delete_Args, buffer);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_Delete", "buffer");
  cw__buffer_delete(CW__BUF(args->buffer));
  return NULL;
}

PJRT_Error* cw_plugin_buffer_is_deleted(PJRT_Buffer_IsDeleted_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_IsDeleted_Args, is_deleted);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_IsDeleted", "buffer");
  args->is_deleted = atomic_load_explicit(&CW__BUF(args->buffer)->deleted, memory_order_acquire);
  return NULL;
}

PJRT_Error* cw_plugin_buffer_element_type(PJRT_Buffer_ElementType_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_ElementType_Args, type);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_ElementType", "buffer");
  args->type = CW__BUF(args->buffer)->type;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_dimensions(PJRT_Buffer_Dimensions_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_Dimensions_Args, num_dims);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_Dimensions", "buffer");
  args->dims = CW__BUF(args->buffer)->dims;
  args->num_dims = CW__BUF(args->buffer)->rank;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_unpadded_dimensions(PJRT_Buffer_UnpaddedDimensions_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_UnpaddedDimensions_Args, num_dims);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_UnpaddedDimensions", "buffer");
  args->unpadded_dims = CW__BUF(args->buffer)->dims;
  args->num_dims = CW__BUF(args->buffer)->rank;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_dynamic_dimension_indices(
    PJRT_Buffer_DynamicDimensionIndices_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_DynamicDimensionIndices_Args, num_dynamic_dims);
  args->dynamic_dim_indices = NULL;  // static shapes only
  args->num_dynamic_dims = 0;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_on_device_size(PJRT_Buffer_OnDeviceSizeInBytes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_OnDeviceSizeInBytes", "buffer");
  // Sub-byte types are packed on the device (their host bytes are not).
  const cw_plugin_buffer_t* b = CW__BUF(args->buffer);
  args->on_device_size_in_bytes = (size_t)cw_plugin_buffer_device_bytes(b);
  return NULL;
}

PJRT_Error* cw_plugin_buffer_device(PJRT_Buffer_Device_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_Device_Args, device);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_Device", "buffer");
  args->device = (PJRT_Device*)CW__BUF(args->buffer)->device;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_memory(PJRT_Buffer_Memory_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_Memory_Args, memory);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_Memory", "buffer");
  args->memory = (PJRT_Memory*)CW__BUF(args->buffer)->memory;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_is_on_cpu(PJRT_Buffer_IsOnCpu_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_IsOnCpu_Args, is_on_cpu);
  args->is_on_cpu = false;  // the bytes live in another process
  return NULL;
}

PJRT_Error* cw_plugin_buffer_ready_event(PJRT_Buffer_ReadyEvent_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_ReadyEvent_Args, event);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_ReadyEvent", "buffer");
  cw_plugin_buffer_t* b = CW__BUF(args->buffer);
  // JAX asks at block_until_ready, not per launch: the launch that makes
  // `b` may be held for a shared write (cw_client_send_batched). Its thread
  // sleeps next, and on an idle machine a wakeup costs far more than the
  // round trip (docs/performance.md): it polls briefly first, taking the
  // reply itself if the reader has not woken yet.
  cw_plugin_future_expect_wait(b->ready);
  if (!cw_plugin_future_is_done(b->ready)) {
    cw_plugin_worker_t* w = b->device->worker;
    cw_plugin_worker_write_held(w);
    if (!cw_plugin_worker_poll(w, b->ready, b->client->wait_spin_us)) {
      // JAX sleeps next, and the launch may be waiting at the worker for
      // the memory the batched DELETEs free.
      cw_plugin_worker_flush_deletes(w);
    }
  }
  args->event = cw_plugin_event_from_future(b->ready);
  return NULL;
}

PJRT_Error* cw_plugin_client_create_error_buffer(PJRT_Client_CreateErrorBuffer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_CreateErrorBuffer_Args, buffer);
  cw_plugin_client_t* c = (cw_plugin_client_t*)args->client;
  if (!c || !args->memory) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "PJRT_Client_CreateErrorBuffer: client and memory are required"));
  }
  cw_status_t err = cw_make_status(
      args->error_code == PJRT_Error_Code_OK ? CW_UNKNOWN
                                             : cw_status_code_from_u32((uint32_t)args->error_code),
      "%.*s", (int)args->error_message_size, args->error_message ? args->error_message : "");
  cw_plugin_future_t* f = cw_plugin_future_create_done(err);
  if (!f) return cw_plugin_error_from_status(cw_make_status(CW_RESOURCE_EXHAUSTED, "oom"));
  cw_plugin_buffer_t* b = NULL;
  cw_status_t s = cw_plugin_buffer_create(c, ((cw_plugin_memory_t*)args->memory)->device,
                                          cw_plugin_client_new_id(c), args->shape_element_type,
                                          args->shape_dims, args->shape_num_dims, f, &b);
  cw_plugin_future_release(f);
  if (s) return cw_plugin_error_from_status(s);
  b->memory = (cw_plugin_memory_t*)args->memory;
  args->buffer = (PJRT_Buffer*)b;
  return NULL;
}
