// The async host-to-device transfer manager: buffers made ahead of their
// bytes, filled in parts as the caller gets them (an UPLOAD in parts,
// docs/protocol.md). Each buffer's first part goes out when the manager is
// made, so the worker knows it and holds anything that uses it until its
// last part; later parts go in order, each straight into the socket.
#include "cw_plugin_h2d.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_transfer.h"
#include "cw_plugin_worker.h"

typedef struct cw__part_buffer_s {
  cw_plugin_buffer_t* b;  // NULL once retrieved: the caller's then
  uint64_t id;
  uint32_t epoch;  // its worker's, when it was made
  uint64_t bytes;
  uint64_t sent;
  bool done;                  // its last part went out, or it failed
  cw_plugin_future_t* ready;  // ours: the buffer's readiness
} cw__part_buffer_t;

typedef struct cw__h2d_s {
  pthread_mutex_t mu;  // one transfer at a time: the parts go out in order
  cw_plugin_device_t* device;
  size_t n;
  cw__part_buffer_t bufs[];
} cw__h2d_t;

#define CW__MGR(p) ((cw__h2d_t*)(p))

// A buffer whose last part will never come: its users here get `st`
// (taken), and the worker drops its part of it, so that requests already
// sent that wait for it there fail too (CANCELLED, naming the upload).
static void cw__abandon(cw__h2d_t* m, cw__part_buffer_t* p, cw_status_t st) {
  p->done = true;
  cw_plugin_future_complete(p->ready, st);
  if (p->id) {
    cw_plugin_worker_delete(m->device->worker, p->epoch, p->id, p->bytes);
    cw_plugin_worker_flush_deletes(m->device->worker);
  }
}

// Fails the buffers whose last part never went out (the manager's end, or
// one it could not make).
static void cw__fail_unfinished(cw__h2d_t* m, const char* why) {
  for (size_t i = 0; i < m->n; ++i) {
    cw__part_buffer_t* p = &m->bufs[i];
    if (p->done || !p->ready) continue;
    cw__abandon(m, p, cw_make_status(CW_FAILED_PRECONDITION, "buffer %llu: %s",
                                     (unsigned long long)p->id, why));
  }
}

static void cw__free(cw__h2d_t* m) {
  for (size_t i = 0; i < m->n; ++i) {
    cw__part_buffer_t* p = &m->bufs[i];
    if (p->b) {
      // Never retrieved: gone at the worker too.
      PJRT_Buffer_Destroy_Args d = {.struct_size = sizeof(d), .buffer = (PJRT_Buffer*)p->b};
      PJRT_Error* e = cw_plugin_buffer_destroy(&d);
      PJRT_Error_Destroy_Args ed = {.struct_size = sizeof(ed), .error = e};
      if (e) cw_plugin_error_destroy(&ed);
    }
    if (p->ready) cw_plugin_future_release(p->ready);
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

// Sends one part of buffer `p` (the first: its shape too).
static cw_status_t cw__send_part(cw__h2d_t* m, cw__part_buffer_t* p, int kind,
                                 const void* data, uint64_t len) {
  cw_plugin_buffer_t* b = p->b;
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  req.buffer_id = p->id;
  req.part = kind;
  req.part_offset = p->sent;
  if (kind == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST) {
    req.dtype = (Causeway__V1__DType)b->type;
    req.dims = b->dims;
    req.n_dims = b->rank;
    req.device = m->device->local_id;
    if (!b->memory->is_default) req.memory_kind = b->memory->kind;
  }
  struct iovec iov = {.iov_base = (void*)data, .iov_len = (size_t)len};
  // The last part's ack is the buffer's readiness; the others report only
  // failures (which fail the buffer).
  return cw_plugin_transfer_send(m->device->worker, p->epoch, CW_MSG_UPLOAD, &req.base, &req.seq,
                                 &iov, len ? 1 : 0, NULL, p->ready,
                                 kind != CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST);
}

PJRT_Error* cw_plugin_h2d_create(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_CreateBuffersForAsyncHostToDevice_Args,
                       transfer_manager);
  const char* what = "PJRT_Client_CreateBuffersForAsyncHostToDevice";
  cw_plugin_client_t* c = (cw_plugin_client_t*)args->client;
  cw_plugin_memory_t* mem = (cw_plugin_memory_t*)args->memory;
  CW_PLUGIN_NEED(c, what, "client");
  CW_PLUGIN_NEED(mem, what, "memory");
  if (args->num_shape_specs && !args->shape_specs) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "%s: shape_specs is NULL", what));
  }
  cw__h2d_t* m = calloc(1, sizeof(*m) + args->num_shape_specs * sizeof(cw__part_buffer_t));
  if (!m) return cw_plugin_error_from_status(cw_make_status(CW_RESOURCE_EXHAUSTED, "oom"));
  pthread_mutex_init(&m->mu, NULL);
  m->device = mem->device;
  cw_status_t s = cw_ok_status();
  for (size_t i = 0; !s && i < args->num_shape_specs; ++i) {
    const PJRT_ShapeSpec* spec = &args->shape_specs[i];
    size_t esize = cw_plugin_buffer_dtype_size(spec->element_type);
    uint64_t count = 1;
    for (size_t k = 0; k < spec->num_dims; ++k) {
      count *= (uint64_t)(spec->dims[k] > 0 ? spec->dims[k] : 0);
    }
    if (!esize || cw_dtype_device_bytes((int)spec->element_type, count) != count * esize) {
      // Sub-byte types are packed on the device: their raw bytes are not
      // what travels.
      s = cw_make_status(CW_UNIMPLEMENTED, "%s: causeway cannot fill arrays of element type %s "
                         "in parts", what, cw_dtype_name((int)spec->element_type));
      break;
    }
    if (args->device_layouts && i < args->num_device_layouts) {
      s = cw_plugin_transfer_check_layout(args->device_layouts[i], spec->dims, spec->num_dims,
                                          esize, what);
      if (s) break;
    }
    cw__part_buffer_t* p = &m->bufs[i];
    p->ready = cw_plugin_future_create();
    if (!p->ready) {
      s = cw_make_status(CW_RESOURCE_EXHAUSTED, "oom");
      break;
    }
    m->n = i + 1;  // (its future is released with the manager)
    s = cw_plugin_buffer_create(c, m->device, cw_plugin_client_new_id(c), spec->element_type,
                                spec->dims, spec->num_dims, p->ready, &p->b);
    if (s) {
      p->done = true;
      break;
    }
    p->b->memory = mem;
    p->id = p->b->id;
    p->epoch = p->b->epoch;
    p->bytes = count * esize;
    s = cw__send_part(m, p, CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST, NULL, 0);
    if (s) {
      cw_plugin_buffer_free(p->b);  // the worker never heard of it
      p->b = NULL;
      p->done = true;
    }
  }
  if (s) {
    cw__fail_unfinished(m, "its transfer manager could not be made");
    cw__free(m);
    return cw_plugin_error_from_status(s);
  }
  args->transfer_manager = (PJRT_AsyncHostToDeviceTransferManager*)m;
  return NULL;
}

PJRT_Error* cw_plugin_h2d_destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_Destroy_Args,
                       transfer_manager);
  cw__h2d_t* m = CW__MGR(args->transfer_manager);
  if (!m) return NULL;
  cw__fail_unfinished(m, "its transfer manager ended before its last transfer");
  cw__free(m);
  return NULL;
}

// The manager and buffer `index` of a call, or an error naming the call.
static PJRT_Error* cw__buffer_at(void* mgr, int index, const char* what,
                                 cw__part_buffer_t** out) {
  cw__h2d_t* m = CW__MGR(mgr);
  if (!m) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "%s: transfer_manager is NULL", what));
  }
  if (index < 0 || (size_t)index >= m->n) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "%s: buffer index %d of %zu", what, index, m->n));
  }
  *out = &m->bufs[index];
  return NULL;
}

PJRT_Error* cw_plugin_h2d_transfer_data(
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_TransferData_Args,
                       done_with_h2d_transfer);
  const char* what = "PJRT_AsyncHostToDeviceTransferManager_TransferData";
  cw__part_buffer_t* p;
  PJRT_Error* err = cw__buffer_at(args->transfer_manager, args->buffer_index, what, &p);
  if (err) return err;
  cw__h2d_t* m = CW__MGR(args->transfer_manager);
  pthread_mutex_lock(&m->mu);
  cw_status_t s = cw_ok_status();
  uint64_t off = (uint64_t)args->offset, len = (uint64_t)args->transfer_size;
  if (p->done) {
    s = cw_make_status(CW_FAILED_PRECONDITION, "%s: buffer %d had its last transfer", what,
                       args->buffer_index);
  } else if (args->offset < 0 || args->transfer_size < 0 || off != p->sent) {
    // The worker puts parts together in order; so does every caller here.
    s = cw_make_status(CW_UNIMPLEMENTED, "%s: causeway takes a buffer's bytes in order: "
                       "%lld bytes at byte %lld, where %llu are in", what,
                       (long long)args->transfer_size, (long long)args->offset,
                       (unsigned long long)p->sent);
  } else if (len > p->bytes - p->sent ||
             (args->is_last_transfer && p->sent + len != p->bytes)) {
    s = cw_make_status(CW_INVALID_ARGUMENT, "%s: %llu bytes at byte %llu %s buffer %d's %llu",
                       what, (unsigned long long)len, (unsigned long long)off,
                       len > p->bytes - p->sent ? "overrun" : "do not finish",
                       args->buffer_index, (unsigned long long)p->bytes);
  } else if (len && !args->data) {
    s = cw_make_status(CW_INVALID_ARGUMENT, "%s: data is NULL", what);
  }
  if (!s) {
    s = cw__send_part(m, p, args->is_last_transfer ? CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST
                                                   : CAUSEWAY__V1__UPLOAD_PART__UPLOAD_MORE,
                      args->data, len);
    if (s) {
      cw__abandon(m, p, cw_status_clone(s));  // nothing can follow it in order
    } else {
      p->sent += len;
      p->done = args->is_last_transfer;
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (s) return cw_plugin_error_from_status(s);
  // The bytes are in the socket by now: the caller's memory is free.
  args->done_with_h2d_transfer = cw_plugin_transfer_done_event();
  return NULL;
}

PJRT_Error* cw_plugin_h2d_retrieve_buffer(
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args,
                       buffer_out);
  const char* what = "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer";
  cw__part_buffer_t* p;
  PJRT_Error* err = cw__buffer_at(args->transfer_manager, args->buffer_index, what, &p);
  if (err) return err;
  cw__h2d_t* m = CW__MGR(args->transfer_manager);
  pthread_mutex_lock(&m->mu);
  args->buffer_out = (PJRT_Buffer*)p->b;
  p->b = NULL;
  pthread_mutex_unlock(&m->mu);
  if (!args->buffer_out) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_FAILED_PRECONDITION, "%s: buffer %d was retrieved already", what, args->buffer_index));
  }
  return NULL;
}

PJRT_Error* cw_plugin_h2d_device(PJRT_AsyncHostToDeviceTransferManager_Device_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_Device_Args, device_out);
  CW_PLUGIN_NEED(args->transfer_manager, "PJRT_AsyncHostToDeviceTransferManager_Device",
                 "transfer_manager");
  args->device_out = (PJRT_Device*)CW__MGR(args->transfer_manager)->device;
  return NULL;
}

PJRT_Error* cw_plugin_h2d_buffer_count(
    PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args,
                       buffer_count);
  CW_PLUGIN_NEED(args->transfer_manager, "PJRT_AsyncHostToDeviceTransferManager_BufferCount",
                 "transfer_manager");
  args->buffer_count = CW__MGR(args->transfer_manager)->n;
  return NULL;
}

PJRT_Error* cw_plugin_h2d_buffer_size(
    PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args,
                       buffer_size);
  cw__part_buffer_t* p;
  PJRT_Error* err = cw__buffer_at(args->transfer_manager, args->buffer_index,
                                  "PJRT_AsyncHostToDeviceTransferManager_BufferSize", &p);
  if (err) return err;
  args->buffer_size = (size_t)p->bytes;
  return NULL;
}

PJRT_Error* cw_plugin_h2d_set_buffer_error(
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args,
                       error_message_size);
  cw__part_buffer_t* p;
  PJRT_Error* err = cw__buffer_at(args->transfer_manager, args->buffer_index,
                                  "PJRT_AsyncHostToDeviceTransferManager_SetBufferError", &p);
  if (err) return err;
  cw__h2d_t* m = CW__MGR(args->transfer_manager);
  pthread_mutex_lock(&m->mu);
  if (!p->done) {
    cw_status_code_t code = (cw_status_code_t)args->error_code;
    cw__abandon(m, p, cw_make_status(code == CW_OK ? CW_UNKNOWN : code, "%.*s",
                                     (int)args->error_message_size,
                                     args->error_message ? args->error_message : ""));
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

PJRT_Error* cw_plugin_h2d_add_metadata(
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args,
                       num_metadata);
  return NULL;  // nothing here reads transfer metadata
}
