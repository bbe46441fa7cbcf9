// Transfers (cw_plugin_transfer.h): BufferFromHostBuffer, CopyToDevice and
// CopyToMemory send one pipelined request to the owning worker(s) and return
// at once, the new buffer's ready future resolving on the reply;
// ToHostBuffer reads bytes back, straight into the caller's memory.
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_log.h"
#include "cw_messages.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_trace.h"
#include "cw_plugin_transfer.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

// The wire dtypes are PJRT_Buffer_Type values (an upload casts one to the
// other).
_Static_assert((int)PJRT_Buffer_Type_C128 == (int)CAUSEWAY__V1__DTYPE__DTYPE_C128 &&
                   (int)PJRT_Buffer_Type_F4E2M1FN == (int)CAUSEWAY__V1__DTYPE__DTYPE_F4E2M1FN &&
                   (int)PJRT_Buffer_Type_F6E3M2FN == (int)CAUSEWAY__V1__DTYPE__DTYPE_F6E3M2FN,
               "dtypes");

#define CW__BUF(p) ((cw_plugin_buffer_t*)(p))

// One request's completion: maps a lost connection to "worker X is
// unavailable" and completes the future (first completion wins).
typedef struct cw__op_s {
  cw_plugin_future_t* f;
  cw_plugin_worker_t* w;
  // obs: the transfer event (trace_t0 0: not traced).
  int64_t trace_t0;
  uint16_t type;
  uint64_t seq, bytes;
  bool errors_only;  // success is reported by a sibling request
  // A SEND: on its failure the destination worker's EXPECT-ed buffer is
  // failed too (else what waits for it there, a read, waits for good).
  cw_plugin_worker_t* expect_at;
  uint64_t expect_id;
  uint32_t expect_epoch;
  // A read: if it fails and the buffer's own future has failed, the
  // buffer's error is the read's (a read that waited for a copy whose SEND
  // failed hears the SEND's error, not the destination's echo of it).
  cw_plugin_future_t* prefer;
} cw__op_t;

// Tells `w` that the PUT filling `id` will not come (a SEND's failure; on
// the source worker's reader thread). Not while the client is released: w's
// connection may be gone, and nothing waits there any more. ABORTED, not the
// SEND's UNAVAILABLE: an error from `w` that names w's address would read as
// w's own loss (cw_plugin_worker_map_error).
static void cw__expect_failed(cw_plugin_worker_t* w, uint32_t epoch, uint64_t id,
                              cw_status_t send_error) {
  Causeway__V1__ExpectRequest ex = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  Causeway__V1__ErrorReply er;
  cw_status_t why = cw_make_status(CW_ABORTED, "the copy into buffer %llu failed at its source: "
                                   "%s", (unsigned long long)id, cw_status_message(send_error));
  cw_error_reply_fill(&er, why);
  ex.buffer_id = id;
  ex.error = &er;
  cw_plugin_client_t* c = w->client;
  pthread_mutex_lock(&c->teardown_mu);
  if (!c->closing) {
    // A lost destination fails what waits there itself.
    cw_status_free(cw_plugin_worker_send(w, epoch, CW_MSG_EXPECT, &ex.base, &ex.seq, NULL, 0, NULL,
                                         NULL, NULL));
  }
  pthread_mutex_unlock(&c->teardown_mu);
  cw_status_free(why);
}

static void cw__op_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw__op_t* op = user;
  if (op->trace_t0) {
    cw_plugin_trace_client_event("transfer", cw_msg_type_name(op->type),
                                 CW_PLUGIN_TRACE_LANE_TRANSFER, op->trace_t0, op->w, 0, op->seq,
                                 op->bytes);
  }
  status = cw_plugin_worker_map_error(op->w, status);
  if (status && op->prefer && cw_plugin_future_is_done(op->prefer)) {
    cw_status_t own = cw_plugin_future_wait(op->prefer);
    if (own) {
      cw_status_free(status);
      status = own;
    }
  }
  // The buffer's own future fails first: a read the poisoned buffer fails
  // then finds it done (above).
  cw_status_t poison = status && op->expect_at ? cw_status_clone(status) : NULL;
  if (status || !op->errors_only) {
    cw_plugin_future_complete(op->f, status);
  }
  if (poison) cw__expect_failed(op->expect_at, op->expect_epoch, op->expect_id, poison);
  cw_status_free(poison);
  cw_plugin_future_release(op->f);
  if (op->prefer) cw_plugin_future_release(op->prefer);
  free(op);
}

static cw__op_t* cw__op_new(cw_plugin_future_t* f, cw_plugin_worker_t* w, bool errors_only) {
  cw__op_t* op = malloc(sizeof(*op));
  if (!op) return NULL;
  cw_plugin_future_retain(f);
  op->f = f;
  op->w = w;
  op->errors_only = errors_only;
  op->trace_t0 = 0;
  op->type = 0;
  op->seq = op->bytes = 0;
  op->expect_at = NULL;
  op->expect_id = 0;
  op->expect_epoch = CW_PLUGIN_ANY_EPOCH;
  op->prefer = NULL;
  return op;
}

static void cw__op_abandon(cw__op_t* op) {
  cw_plugin_future_release(op->f);
  if (op->prefer) cw_plugin_future_release(op->prefer);
  free(op);
}

// cw_plugin_transfer_send with a SEND's destination buffer (expect: NULL
// when none) or a read's buffer future (prefer: NULL when none).
static cw_status_t cw__send(cw_plugin_worker_t* w, uint32_t epoch, uint16_t type,
                            ProtobufCMessage* req, uint64_t* seq, const struct iovec* bulk,
                            int bulk_count, const cw_client_sink_t* sink, cw_plugin_future_t* f,
                            bool errors_only, const cw_plugin_buffer_t* expect,
                            cw_plugin_future_t* prefer) {
  cw__op_t* op = cw__op_new(f, w, errors_only);
  if (!op) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (expect) {
    op->expect_at = expect->device->worker;
    op->expect_id = expect->id;
    op->expect_epoch = expect->epoch;
  }
  if (prefer) {
    cw_plugin_future_retain(prefer);
    op->prefer = prefer;
  }
  op->trace_t0 = cw_plugin_trace_on() ? cw_time_now_ns() : 0;
  op->type = type;
  for (int i = 0; op->trace_t0 && i < bulk_count; ++i) op->bytes += bulk[i].iov_len;
  if (op->trace_t0 && sink) op->bytes += sink->capacity;
  // (op->seq stays 0: the seq is taken inside the send, and the completion
  // may free op before it returns.)
  cw_status_t s =
      cw_plugin_worker_send(w, epoch, type, req, seq, bulk, bulk_count, sink, cw__op_cb, op);
  if (s) cw__op_abandon(op);
  return s;
}

cw_status_t cw_plugin_transfer_send(cw_plugin_worker_t* w, uint32_t epoch, uint16_t type,
                                    ProtobufCMessage* req, uint64_t* seq, const struct iovec* bulk,
                                    int bulk_count, const cw_client_sink_t* sink,
                                    cw_plugin_future_t* f, bool errors_only) {
  return cw__send(w, epoch, type, req, seq, bulk, bulk_count, sink, f, errors_only, NULL, NULL);
}

// A process-lifetime completed future for done_with_host_buffer: the bytes
// are in the socket before BufferFromHostBuffer returns.
static cw_plugin_future_t* cw__done_singleton;
static pthread_once_t cw__done_once = PTHREAD_ONCE_INIT;
static void cw__done_init(void) {
  cw__done_singleton = cw_plugin_future_create_done(cw_ok_status());
}

PJRT_Event* cw_plugin_transfer_done_event(void) {
  pthread_once(&cw__done_once, cw__done_init);
  if (cw__done_singleton) return cw_plugin_event_from_future(cw__done_singleton);
  return (PJRT_Event*)cw_plugin_future_create_done(cw_ok_status());
}

static bool cw__is_dense(const int64_t* dims, size_t rank, const int64_t* strides, size_t esize) {
  int64_t expect = (int64_t)esize;
  for (size_t i = rank; i-- > 0;) {
    if (dims[i] > 1 && strides[i] != expect) return false;
    expect *= dims[i] > 0 ? dims[i] : 1;
  }
  return true;
}

cw_status_t cw_plugin_transfer_check_layout(const PJRT_Buffer_MemoryLayout* l,
                                            const int64_t* dims, size_t rank, size_t esize,
                                            const char* what) {
  if (!l) return cw_ok_status();
  if (l->type == PJRT_Buffer_MemoryLayout_Type_Tiled) {
    bool ok = l->tiled.num_tiles == 0 && l->tiled.minor_to_major_size == rank;
    for (size_t i = 0; ok && i < rank; ++i) {
      ok = l->tiled.minor_to_major[i] == (int64_t)(rank - 1 - i);
    }
    if (ok) return cw_ok_status();
  } else if (l->type == PJRT_Buffer_MemoryLayout_Type_Strides) {
    if (l->strides.num_byte_strides == rank &&
        cw__is_dense(dims, rank, l->strides.byte_strides, esize)) {
      return cw_ok_status();
    }
  }
  return cw_make_status(CW_UNIMPLEMENTED,
                        "%s: causeway supports only the default dense major-to-minor layout", what);
}

PJRT_Error* cw_plugin_buffer_from_host(PJRT_Client_BufferFromHostBuffer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_BufferFromHostBuffer_Args, buffer);
  cw_plugin_client_t* c = (cw_plugin_client_t*)args->client;
  cw_plugin_memory_t* m = (cw_plugin_memory_t*)args->memory;
  cw_plugin_device_t* d = m ? m->device : (cw_plugin_device_t*)args->device;
  if (!c || !d) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "PJRT_Client_BufferFromHostBuffer: client and memory are required"));
  }
  size_t esize = cw_plugin_buffer_dtype_size(args->type);
  if (!esize) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_UNIMPLEMENTED,
                       "causeway cannot transfer arrays of element type %s (PJRT element type %d)",
                       cw_dtype_name((int)args->type), (int)args->type));
  }
  if (args->num_dims && !args->dims) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "PJRT_Client_BufferFromHostBuffer: dims is NULL"));
  }
  cw_status_t s = cw_plugin_transfer_check_layout(args->device_layout, args->dims, args->num_dims,
                                                  esize, "BufferFromHostBuffer device_layout");
  if (s) return cw_plugin_error_from_status(s);
  const int64_t* strides = NULL;
  bool gather = false;  // made dense here: the wire carries no negative stride
  if (args->byte_strides && args->num_byte_strides) {
    if (args->num_byte_strides != args->num_dims) {
      return cw_plugin_error_from_status(cw_make_status(CW_INVALID_ARGUMENT,
                                                        "%zu byte strides for a rank-%zu array",
                                                        args->num_byte_strides, args->num_dims));
    }
    if (!cw__is_dense(args->dims, args->num_dims, args->byte_strides, esize)) {
      strides = args->byte_strides;
      for (size_t i = 0; i < args->num_dims; ++i) gather |= strides[i] < 0;
    }
  }
  uint64_t bytes = 0;
  s = cw_array_extent((int)args->type, args->dims, args->num_dims, gather ? NULL : strides,
                      strides && !gather ? args->num_dims : 0, &bytes);
  if (s) return cw_plugin_error_from_status(cw_status_annotate(s, "BufferFromHostBuffer"));
  if (bytes && !args->data) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "PJRT_Client_BufferFromHostBuffer: data is NULL"));
  }
  const void* data = args->data;
  void* dense = NULL;
  if (gather) {
    strides = NULL;
    dense = bytes ? malloc((size_t)bytes) : NULL;
    if (bytes && !dense) {
      return cw_plugin_error_from_status(cw_make_status(
          CW_RESOURCE_EXHAUSTED, "BufferFromHostBuffer: cannot allocate %llu bytes to make a "
                                 "negatively strided array dense",
          (unsigned long long)bytes));
    }
    if (dense) {
      cw_array_gather_dense(args->data, esize, args->dims, args->byte_strides, args->num_dims,
                            dense);
    }
    data = dense;
  }

  cw_plugin_future_t* ready = cw_plugin_future_create();
  if (!ready) return cw_plugin_error_from_status(cw_make_status(CW_RESOURCE_EXHAUSTED, "oom"));
  // Same host: the worker copies the caller's memory itself; it must stay
  // until the buffer is ready (done_with_host_buffer is that event).
  // Not when the caller may reuse its memory once the call returns.
  bool direct = !dense && bytes >= CW_PLUGIN_DIRECT_MIN_BYTES &&
                args->host_buffer_semantics != PJRT_HostBufferSemantics_kImmutableOnlyDuringCall &&
                atomic_load_explicit(&d->worker->direct_bulk, memory_order_relaxed);
  cw_plugin_buffer_t* b = NULL;
  s = cw_plugin_buffer_create(c, d, cw_plugin_client_new_id(c), args->type, args->dims,
                              args->num_dims, ready, &b);
  if (!s) {
    if (m) b->memory = m;
    Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
    req.buffer_id = b->id;
    if (!b->memory->is_default) req.memory_kind = b->memory->kind;
    req.dtype = (Causeway__V1__DType)args->type;
    req.n_dims = args->num_dims;
    req.dims = (int64_t*)args->dims;
    req.n_byte_strides = strides ? args->num_dims : 0;
    req.byte_strides = (int64_t*)strides;
    req.device = d->local_id;
    // Otherwise bytes go from the caller's memory straight into the socket
    // (writev): when this returns, the host buffer is no longer needed.
    struct iovec iov = {.iov_base = (void*)data, .iov_len = (size_t)bytes};
    req.peer_address = direct ? (uint64_t)(uintptr_t)data : 0;
    s = cw_plugin_transfer_send(d->worker, b->epoch, CW_MSG_UPLOAD, &req.base, &req.seq, &iov,
                                bytes && !direct ? 1 : 0, NULL, ready, false);
  }
  free(dense);
  if (s) {
    cw_plugin_future_release(ready);
    if (b) cw_plugin_buffer_free(b);
    return cw_plugin_error_from_status(s);
  }
  args->done_with_host_buffer =
      direct ? cw_plugin_event_from_future(ready) : cw_plugin_transfer_done_event();
  cw_plugin_future_release(ready);
  args->buffer = (PJRT_Buffer*)b;
  return NULL;
}

static cw_status_t cw__live(const cw_plugin_buffer_t* b, const char* what) {
  // A replacement announced while we were idle: reconnected first, so a
  // buffer of the lost worker is named as such (not NOT_FOUND there).
  (void)cw_plugin_worker_epoch(b->device->worker);
  if (atomic_load_explicit(&b->deleted, memory_order_acquire)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s: buffer %llu was deleted or donated", what,
                          (unsigned long long)b->id);
  }
  return cw_plugin_buffer_check_epoch(b);
}

// Read backs up to this size poll for their reply before returning (larger
// ones take longer than the polling budget anyway).
#define CW__SPIN_DOWNLOAD_MAX_BYTES (64 * 1024)

// Reads `length` of the buffer's dense bytes from `offset` into `dst`
// (within range) after its own error, if it has one; *out_event completes
// when they are there.
static cw_status_t cw__download(cw_plugin_buffer_t* b, void* dst, uint64_t offset,
                                uint64_t length, const char* what, PJRT_Event** out_event) {
  cw_status_t s = cw__live(b, what);
  // An error the buffer already has (its launch failed, or the controller
  // relaying it was lost) wins over whatever the worker may hold.
  if (!s && cw_plugin_future_is_done(b->ready)) s = cw_plugin_future_wait(b->ready);
  if (!s) s = cw_plugin_worker_take_deferred(b->device->worker);
  if (s) return s;
  if (length == 0) {
    // Nothing to move, but the buffer's own error must still surface.
    *out_event = cw_plugin_event_from_future(b->ready);
    return cw_ok_status();
  }
  cw_plugin_future_t* f = cw_plugin_future_create();
  if (!f) return cw_make_status(CW_RESOURCE_EXHAUSTED, "oom");
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  req.buffer_id = b->id;
  if (length != cw_plugin_buffer_bytes(b)) {
    req.offset = offset;
    req.length = length;
  }
  // Same host: the worker writes the caller's memory itself (or, refused by
  // the kernel, sends the bytes as usual).
  if (length >= CW_PLUGIN_DIRECT_MIN_BYTES &&
      atomic_load_explicit(&b->device->worker->direct_bulk, memory_order_relaxed)) {
    req.peer_address = (uint64_t)(uintptr_t)dst;
    req.peer_capacity = length;
  }
  // The reply's bytes are read straight into the caller's memory.
  cw_client_sink_t sink = {.data = dst, .capacity = (size_t)length, .exact = true,
                           .none_ok = req.peer_address != 0};
  cw_plugin_worker_t* w = b->device->worker;
  s = cw__send(w, b->epoch, CW_MSG_DOWNLOAD, &req.base, &req.seq, NULL, 0, &sink, f, false, NULL,
               b->ready);
  if (s) {
    cw_plugin_future_release(f);
    return s;
  }
  // JAX waits for a small read back at once (np.asarray, float(x)): like
  // PJRT_Buffer_ReadyEvent, poll briefly, so its thread finds the event done
  // instead of sleeping until the reader wakes it.
  if (length <= CW__SPIN_DOWNLOAD_MAX_BYTES) {
    (void)cw_plugin_worker_poll(w, f, b->client->wait_spin_us);
  }
  *out_event = (PJRT_Event*)f;  // our reference moves to the caller
  return cw_ok_status();
}

cw_status_t cw_plugin_transfer_read(cw_plugin_buffer_t* b, void* dst, const char* what) {
  PJRT_Event* ev = NULL;
  cw_status_t s = cw__download(b, dst, 0, cw_plugin_buffer_bytes(b), what, &ev);
  if (s) return s;
  cw_plugin_future_t* f = (cw_plugin_future_t*)ev;
  s = cw_plugin_future_wait(f);
  cw_plugin_future_release(f);
  return s;
}

PJRT_Error* cw_plugin_buffer_to_host(PJRT_Buffer_ToHostBuffer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_ToHostBuffer_Args, event);
  CW_PLUGIN_NEED(args->src, "PJRT_Buffer_ToHostBuffer", "buffer");
  cw_plugin_buffer_t* b = CW__BUF(args->src);
  uint64_t need = cw_plugin_buffer_bytes(b);
  cw_status_t s =
      cw_plugin_transfer_check_layout(args->host_layout, b->dims, b->rank,
                                      cw_plugin_buffer_dtype_size(b->type),
                                      "ToHostBuffer host_layout");
  if (s) return cw_plugin_error_from_status(s);
  if (!args->dst) {
    args->dst_size = (size_t)need;  // size query
    args->event = NULL;
    return NULL;
  }
  if (args->dst_size < need) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "ToHostBuffer: destination holds %zu bytes, the array needs %llu",
        args->dst_size, (unsigned long long)need));
  }
  args->event = NULL;
  return cw_plugin_error_or_null(
      cw__download(b, args->dst, 0, need, "ToHostBuffer", &args->event));
}

PJRT_Error* cw_plugin_buffer_copy_raw_to_host(PJRT_Buffer_CopyRawToHost_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_CopyRawToHost_Args, event);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_CopyRawToHost", "buffer");
  cw_plugin_buffer_t* b = CW__BUF(args->buffer);
  args->event = NULL;
  // The raw bytes are the dense row-major ones the worker sends, except for
  // sub-byte types: packed on the device, one byte an element on the wire.
  uint64_t total = cw_plugin_buffer_bytes(b);
  if (cw_plugin_buffer_device_bytes(b) != total) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_UNIMPLEMENTED, "CopyRawToHost: buffer %llu's type is packed on the device; "
        "use ToHostBuffer", (unsigned long long)b->id));
  }
  if (args->offset < 0 || args->transfer_size < 0 || (uint64_t)args->offset > total ||
      (uint64_t)args->transfer_size > total - (uint64_t)args->offset) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "CopyRawToHost: %lld bytes from byte %lld are not within buffer "
        "%llu's %llu", (long long)args->transfer_size, (long long)args->offset,
        (unsigned long long)b->id, (unsigned long long)total));
  }
  if (args->transfer_size && !args->dst) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "CopyRawToHost: no destination"));
  }
  return cw_plugin_error_or_null(cw__download(b, args->dst, (uint64_t)args->offset,
                                              (uint64_t)args->transfer_size, "CopyRawToHost",
                                              &args->event));
}

// The AWAIT of an unsafe-pointer query: records the address, then
// completes the future the caller waits on (so `b` outlives this).
typedef struct {
  cw_plugin_buffer_t* b;
  cw_plugin_future_t* f;
  cw_plugin_worker_t* w;
} cw__pointer_op_t;

static void cw__pointer_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  cw__pointer_op_t* op = user;
  status = cw_plugin_worker_map_error(op->w, status);
  if (!status) {
    uint64_t addr = reply ? ((const Causeway__V1__ArrayInfo*)reply)->device_address : 0;
    if (addr) {
      atomic_store_explicit(&op->b->address, addr, memory_order_release);
    } else {
      status = cw_make_status(CW_UNIMPLEMENTED,
                              "unsafe_buffer_pointer: worker %s's plugin gives no address for "
                              "buffer %llu",
                              op->w->name, (unsigned long long)op->b->id);
    }
  }
  cw_plugin_future_complete(op->f, status);
  cw_plugin_future_release(op->f);
  free(op);
}

PJRT_Error* cw_plugin_buffer_unsafe_pointer(PJRT_Buffer_UnsafePointer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_UnsafePointer_Args, buffer_pointer);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_UnsafePointer", "buffer");
  cw_plugin_buffer_t* b = CW__BUF(args->buffer);
  cw_status_t s = cw__live(b, "unsafe_buffer_pointer");
  if (s) return cw_plugin_error_from_status(s);
  uint64_t addr = atomic_load_explicit(&b->address, memory_order_acquire);
  if (!addr) {
    cw_plugin_future_t* f = cw_plugin_future_create();
    cw__pointer_op_t* op = malloc(sizeof(*op));
    if (!f || !op) {
      free(op);
      if (f) cw_plugin_future_release(f);
      return cw_plugin_error_from_status(cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    }
    cw_plugin_future_retain(f);
    *op = (cw__pointer_op_t){.b = b, .f = f, .w = b->device->worker};
    Causeway__V1__AwaitRequest req = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
    req.buffer_id = b->id;
    s = cw_plugin_worker_send(op->w, b->epoch, CW_MSG_AWAIT, &req.base, &req.seq, NULL, 0, NULL,
                              cw__pointer_cb, op);
    if (s) {
      cw_plugin_future_release(f);
      free(op);
    } else {
      s = cw_plugin_future_wait(f);
    }
    cw_plugin_future_release(f);
    if (s) {
      return cw_plugin_error_from_status(cw_status_annotate(s, "unsafe_buffer_pointer"));
    }
    addr = atomic_load_explicit(&b->address, memory_order_acquire);
  }
  args->buffer_pointer = (uintptr_t)addr;
  return NULL;
}

// Copies `b` to memory `dm` (of device `dst`): COPY on one worker, EXPECT +
// SEND across workers (bytes go worker to worker; the client never carries
// them).
static cw_status_t cw__buffer_copy(cw_plugin_buffer_t* b, cw_plugin_memory_t* dm,
                                   cw_plugin_buffer_t** out) {
  *out = NULL;
  cw_plugin_device_t* dst = dm->device;
  char* kind = dm->is_default ? "" : dm->kind;
  CW_RETURN_IF_ERROR(cw__live(b, "copy"), "copy");
  cw_plugin_client_t* c = b->client;
  cw_plugin_future_t* ready = cw_plugin_future_create();
  if (!ready) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_plugin_buffer_t* nb = NULL;
  cw_status_t s = cw_plugin_buffer_create(c, dst, cw_plugin_client_new_id(c), b->type, b->dims,
                                          b->rank, ready, &nb);
  if (nb) nb->memory = dm;
  cw_plugin_worker_t* from = b->device->worker;
  cw_plugin_worker_t* to = dst->worker;
  if (!s && from == to) {
    Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
    req.src_id = b->id;
    req.dst_id = nb->id;
    req.dst_device = dst->local_id;
    req.dst_memory_kind = kind;
    s = cw_plugin_transfer_send(from, b->epoch, CW_MSG_COPY, &req.base, &req.seq, NULL, 0, NULL,
                                ready, false);
  } else if (!s) {
    Causeway__V1__ExpectRequest ex = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
    ex.buffer_id = nb->id;
    s = cw_plugin_transfer_send(to, nb->epoch, CW_MSG_EXPECT, &ex.base, &ex.seq, NULL, 0, NULL,
                                ready, true);
    if (!s) {
      Causeway__V1__SendRequest req = CAUSEWAY__V1__SEND_REQUEST__INIT;
      req.src_id = b->id;
      req.peer_address = to->address;
      req.dst_id = nb->id;
      req.dst_device = dst->local_id;
      req.dst_session = c->session_id;
      req.dst_memory_kind = kind;
      s = cw__send(from, b->epoch, CW_MSG_SEND, &req.base, &req.seq, NULL, 0, NULL, ready, false,
                   nb, NULL);
      // The destination already expects the id: it is dropped there (the
      // buffer is freed below, which sends nothing) rather than left pending.
      if (s) {
        cw_plugin_future_complete(ready, cw_status_clone(s));
        cw_plugin_worker_delete(to, nb->epoch, nb->id, 0);
      }
    }
  }
  cw_plugin_future_release(ready);
  if (s) {
    if (nb) cw_plugin_buffer_free(nb);
    return s;
  }
  *out = nb;
  return cw_ok_status();
}

// The copy slots' end: `buffer` to `dst`, the new buffer in *out_buffer.
static PJRT_Error* cw__copy_slot(PJRT_Buffer* buffer, cw_plugin_memory_t* dst,
                                 PJRT_Buffer** out_buffer) {
  cw_plugin_buffer_t* nb = NULL;
  cw_status_t s = cw__buffer_copy(CW__BUF(buffer), dst, &nb);
  if (s) return cw_plugin_error_from_status(s);
  *out_buffer = (PJRT_Buffer*)nb;
  return NULL;
}

PJRT_Error* cw_plugin_buffer_copy_to_device(PJRT_Buffer_CopyToDevice_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_CopyToDevice_Args, dst_buffer);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_CopyToDevice", "buffer");
  CW_PLUGIN_NEED(args->dst_device, "PJRT_Buffer_CopyToDevice", "dst_device");
  return cw__copy_slot(args->buffer, ((cw_plugin_device_t*)args->dst_device)->default_memory,
                       &args->dst_buffer);
}

PJRT_Error* cw_plugin_buffer_copy_to_memory(PJRT_Buffer_CopyToMemory_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_CopyToMemory_Args, dst_buffer);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_CopyToMemory", "buffer");
  CW_PLUGIN_NEED(args->dst_memory, "PJRT_Buffer_CopyToMemory", "dst_memory");
  return cw__copy_slot(args->buffer, (cw_plugin_memory_t*)args->dst_memory, &args->dst_buffer);
}

// One small UPLOAD by peer_address: the worker on a Unix socket answers it
// when the kernel lets it read our memory (no Yama or seccomp refusal); the
// probe buffer is dropped after.
void cw_plugin_transfer_probe_direct(cw_plugin_worker_t* w) {
  if (atomic_load(&w->dead) || !cw_client_same_host_copies(w->conn)) return;
  static const float probe[CW_PLUGIN_DIRECT_PROBE_FLOATS] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t dims[1] = {CW_PLUGIN_DIRECT_PROBE_FLOATS};
  cw_plugin_future_t* f = cw_plugin_future_create();
  if (!f) return;
  uint32_t epoch = atomic_load_explicit(&w->epoch, memory_order_acquire);
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  req.buffer_id = cw_plugin_client_new_id(w->client);
  req.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  req.n_dims = 1;
  req.dims = dims;
  req.peer_address = (uint64_t)(uintptr_t)probe;
  for (size_t i = 0; i < w->client->num_devices; ++i) {
    if (w->client->devices[i].worker == w) {
      req.device = w->client->devices[i].local_id;
      break;
    }
  }
  cw_status_t s = cw_plugin_transfer_send(w, epoch, CW_MSG_UPLOAD, &req.base, &req.seq, NULL, 0,
                                          NULL, f, false);
  if (!s) s = cw_plugin_future_wait(f);
  cw_plugin_future_release(f);
  if (!s) {
    atomic_store_explicit(&w->direct_bulk, true, memory_order_relaxed);
    CW_LOGI("worker %s: arrays of %d bytes or more move by same-host copies", w->name,
            CW_PLUGIN_DIRECT_MIN_BYTES);
  } else {
    CW_LOGI("worker %s: arrays move through the socket (same-host copy refused: %s)", w->name,
            cw_status_message(s));
    cw_status_free(s);
  }
  cw_plugin_worker_delete(w, epoch, req.buffer_id, 0);
}
