// Host callbacks (see cw_worker_hostcb.h).
#include "cw_worker_hostcb.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_hostcb.h"
#include "cw_log.h"
#include "cw_pool.h"
#include "cw_worker_conn.h"
#include "cw_xla_ffi.h"

// Threads for launches that may call back: each blocks while its client
// runs a callable, so they are not libuv's four. Past this many at once,
// launches queue.
#define CW__MAX_THREADS 256

static const char kTarget[] = "xla_ffi_python_cpu_callback";
static const char kPartitioned[] = "xla_ffi_partitioned_python_cpu_callback";
static const char kBuffer[] = "xla_buffer_python_cpu_callback";

// Which of the targets a handler serves.
typedef enum { CW__PLAIN, CW__PARTITIONED, CW__BUFFER } cw__kind_t;

struct cw_worker_hostcb_s {
  cw_pool_t* pool;
  int64_t type_id;  // our user data's FFI type
};

// The handler finds the worker through its launch's user data; the FFI
// registry is process-wide, so is this (one worker per process).
static int64_t g_type_id;

struct cw_hostcb_launch_s {
  cw_worker_t* w;
  uint64_t skey;
  uint64_t host_callbacks;
  uint64_t exe_id;
  PJRT_ExecuteContext* context;
};

// One call of the handler, waiting for its client's answer.
typedef struct cw__call_s {
  cw_hostcb_launch_t* launch;
  Causeway__V1__HostCallbackRequest req;  // arrays point into the call's own storage
  uint8_t* bulk;                          // the operands; the net frees it
  uint64_t bulk_len;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  cw_status_t status;
  uint8_t* reply;  // the results' bytes (malloc'd)
  uint64_t reply_len;
} cw__call_t;

bool cw_worker_hostcb_in_program(const uint8_t* bytes, size_t size) {
  // Both targets end so; XLA finds handlers by this very name in the bytes.
  static const char kTail[] = "python_cpu_callback";
  return bytes && memmem(bytes, size, kTail, sizeof(kTail) - 1) != NULL;
}

// --- On the loop thread -------------------------------------------------------

// The connection the session's client reads: its oldest with role CLIENT
// (the list is newest first). A client opens others only for a moment, to
// fill seqs (a reattach closes the older ones first), and would close one
// with a callback still to answer.
static cw_conn_t* cw__client_conn(cw_worker_t* w, uint64_t skey) {
  cw_conn_t* oldest = NULL;
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    if (!c->closing && !c->outbound && c->session && c->session->key == skey &&
        cw_net_conn_role(c->nc) == CAUSEWAY__V1__ROLE__ROLE_CLIENT && cw_net_conn_is_open(c->nc)) {
      oldest = c;
    }
  }
  return oldest;
}

static void cw__call_finish(cw__call_t* call, cw_status_t status, uint8_t* reply,
                            uint64_t reply_len) {
  pthread_mutex_lock(&call->mu);
  call->status = status;
  call->reply = reply;
  call->reply_len = reply_len;
  call->done = true;
  pthread_cond_signal(&call->cv);
  pthread_mutex_unlock(&call->mu);
}

static void cw__on_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                         const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  (void)conn;
  (void)reply;
  cw__call_t* call = user;
  if (status) {
    free(bulk);
    bulk = NULL;
    bulk_len = 0;
  }
  cw__call_finish(call, status, bulk, bulk_len);
}

// Posted by the handler: sends the request on the client's connection.
static void cw__send(cw_worker_t* w, void* user, cw_status_t status) {
  cw__call_t* call = user;
  uint8_t* bulk = call->bulk;
  call->bulk = NULL;
  cw_conn_t* c = status ? NULL : cw__client_conn(w, call->launch->skey);
  if (!c) {
    free(bulk);
    cw__call_finish(call, status ? status : cw_make_status(CW_UNAVAILABLE,
                                                           "no client connection of the session "
                                                           "to run the host callback on"),
                    NULL, 0);
    return;
  }
  cw_net_conn_request(c->nc, CW_MSG_HOST_CALLBACK, &call->req.base, bulk, call->bulk_len, free,
                      bulk, cw__on_reply, call);
}

// --- The handler (XLA's thread, or a pool thread) ------------------------------

// The status as XLA's error (a callable's traceback whole: XLA copies it).
static XLA_FFI_Error* cw__error(XLA_FFI_CallFrame* frame, cw_status_t st) {
  XLA_FFI_Error_Code code = (XLA_FFI_Error_Code)cw_status_code(st);
  XLA_FFI_Error* err = cw_xla_ffi_error(frame->api, code, cw_status_message(st));
  cw_status_free(st);
  return err;
}

static bool cw__attr_index(const XLA_FFI_CallFrame* frame, uint64_t* out) {
  for (int64_t i = 0; i < frame->attrs.size; ++i) {
    const XLA_FFI_ByteSpan* name = frame->attrs.names[i];
    if (frame->attrs.types[i] != XLA_FFI_AttrType_SCALAR || name->len != 5 ||
        memcmp(name->ptr, "index", 5) != 0) {
      continue;
    }
    const XLA_FFI_Scalar* s = frame->attrs.attrs[i];
    if (s->dtype != XLA_FFI_DataType_U64) return false;  // JAX gives a uint64
    *out = *(const uint64_t*)s->value;
    return true;
  }
  return false;
}

// Describes `b` as a wire array (dims point into b's).
// XLA keeps sub-byte elements (int4, uint2, float4_e2m1fn ...) packed in
// device memory, the first in a byte's low bits; JAX's callbacks and the wire
// take one byte per element holding the element's bits (ml_dtypes' layout,
// no sign extension). `count` elements each way.
static void cw__unpack(int dtype, const uint8_t* packed, uint64_t count, uint8_t* out) {
  unsigned bits = (unsigned)cw_dtype_device_bytes(dtype, 8);  // 8 elements take `bits` bytes
  unsigned per_byte = 8 / bits, mask = (1u << bits) - 1;
  for (uint64_t i = 0; i < count; ++i) {
    out[i] = (uint8_t)((packed[i / per_byte] >> (bits * (i % per_byte))) & mask);
  }
}

static void cw__pack(int dtype, const uint8_t* in, uint64_t count, uint8_t* packed) {
  unsigned bits = (unsigned)cw_dtype_device_bytes(dtype, 8);
  unsigned per_byte = 8 / bits, mask = (1u << bits) - 1;
  memset(packed, 0, (size_t)cw_dtype_device_bytes(dtype, count));
  for (uint64_t i = 0; i < count; ++i) {
    packed[i / per_byte] |= (uint8_t)((in[i] & mask) << (bits * (i % per_byte)));
  }
}

static cw_status_t cw__describe(const XLA_FFI_Buffer* b, Causeway__V1__HostCallbackArray* a) {
  causeway__v1__host_callback_array__init(a);
  if (b->dtype == XLA_FFI_DataType_TOKEN) {
    a->token = true;
    return cw_ok_status();
  }
  int dtype = cw_pjrt_dtype_from_xla((int)b->dtype);
  if (dtype <= 0) {
    return cw_make_status(CW_UNIMPLEMENTED, "element type %d cannot cross to the client",
                          (int)b->dtype);
  }
  a->dtype = (Causeway__V1__DType)dtype;
  a->n_dims = (size_t)b->rank;
  a->dims = b->dims;
  return cw_ok_status();
}

static void cw__call_free(cw__call_t* call) {
  free(call->req.aliased_operand);
  free(call->req.operands);
  free(call->req.results);
  free(call->bulk);
  free(call->reply);
  cw_status_free(call->status);
  pthread_cond_destroy(&call->cv);
  pthread_mutex_destroy(&call->mu);
  free(call);
}

// Fills `call` from the frame: arrays and the operands' bytes.
static cw_status_t cw__call_build(XLA_FFI_CallFrame* frame, cw__call_t* call,
                                  Causeway__V1__HostCallbackArray* arrays, uint64_t* offsets) {
  size_t na = (size_t)frame->args.size, nr = (size_t)frame->rets.size;
  call->req.operands = calloc(na + 1, sizeof(*call->req.operands));
  call->req.results = calloc(nr + 1, sizeof(*call->req.results));
  if (!call->req.operands || !call->req.results) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a host callback");
  }
  for (size_t i = 0; i < na + nr; ++i) {
    bool op = i < na;
    if ((op ? frame->args.types[i] : (int)frame->rets.types[i - na]) != 1) {
      return cw_make_status(CW_INVALID_ARGUMENT, "host callback %s %zu is not a buffer",
                            op ? "operand" : "result", op ? i : i - na);
    }
    const XLA_FFI_Buffer* b = op ? frame->args.args[i] : frame->rets.rets[i - na];
    CW_RETURN_IF_ERROR(cw__describe(b, &arrays[i]), "host callback %s %zu",
                       op ? "operand" : "result", op ? i : i - na);
    if (op) call->req.operands[i] = &arrays[i];
    else call->req.results[i - na] = &arrays[i];
  }
  call->req.n_operands = na;
  call->req.n_results = nr;
  if (call->req.buffer && nr) {
    // input_output_aliases: XLA hands the result the operand's own memory.
    call->req.aliased_operand = calloc(nr, sizeof(*call->req.aliased_operand));
    if (!call->req.aliased_operand) {
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a host callback");
    }
    call->req.n_aliased_operand = nr;
    for (size_t r = 0; r < nr; ++r) {
      const void* data = ((const XLA_FFI_Buffer*)frame->rets.rets[r])->data;
      for (size_t i = 0; data && i < na && !call->req.aliased_operand[r]; ++i) {
        if (((const XLA_FFI_Buffer*)frame->args.args[i])->data == data) {
          call->req.aliased_operand[r] = (uint32_t)i + 1;
        }
      }
    }
  }
  CW_RETURN_IF_ERROR(cw_hostcb_layout(call->req.operands, na, "operand", offsets,
                                      &call->bulk_len), "host callback");
  call->bulk = malloc(call->bulk_len ? (size_t)call->bulk_len : 1);
  if (!call->bulk) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for operands");
  for (size_t i = 0; i < na; ++i) {
    uint64_t n = cw_hostcb_array_bytes(&arrays[i]);
    const uint8_t* data = ((const XLA_FFI_Buffer*)frame->args.args[i])->data;
    if (!n) continue;
    if (cw_dtype_packed((int)arrays[i].dtype)) {
      cw__unpack((int)arrays[i].dtype, data, n, call->bulk + offsets[i]);
    } else {
      memcpy(call->bulk + offsets[i], data, n);
    }
  }
  return cw_ok_status();
}

// Copies the client's results into XLA's result buffers.
static cw_status_t cw__call_results(XLA_FFI_CallFrame* frame, cw__call_t* call,
                                    uint64_t* offsets) {
  uint64_t total = 0;
  CW_RETURN_IF_ERROR(cw_hostcb_layout(call->req.results, call->req.n_results, "result", offsets,
                                      &total), "host callback");
  if (total != call->reply_len) {
    return cw_make_status(CW_INTERNAL,
                          "the client answered with %" PRIu64 " bytes of results; the program "
                          "expects %" PRIu64, call->reply_len, total);
  }
  for (size_t i = 0; i < call->req.n_results; ++i) {
    uint64_t n = cw_hostcb_array_bytes(call->req.results[i]);
    uint8_t* data = ((XLA_FFI_Buffer*)frame->rets.rets[i])->data;
    if (!n) continue;
    if (cw_dtype_packed((int)call->req.results[i]->dtype)) {
      cw__pack((int)call->req.results[i]->dtype, call->reply + offsets[i], n, data);
    } else {
      memcpy(data, call->reply + offsets[i], n);
    }
  }
  return cw_ok_status();
}

static XLA_FFI_Error* cw__handle(XLA_FFI_CallFrame* frame, cw__kind_t kind) {
  if (cw_xla_ffi_answer_metadata(frame, 0)) return NULL;
  cw_hostcb_launch_t* launch = cw_xla_ffi_user_data(frame, g_type_id);
  if (!launch) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                            "host callback: the launch carries no host callbacks");
  }
  if (!launch->host_callbacks) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                            "host callback: the client gave this launch no callables (a "
                            "program with jax callbacks must be launched by JAX's own client)");
  }
  uint64_t index = 0;
  if (!cw__attr_index(frame, &index)) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                            "host callback: no integer attribute `index`");
  }
  size_t n = (size_t)(frame->args.size + frame->rets.size);
  if (frame->args.size < 0 || frame->rets.size < 0 || n > CW_HOSTCB_MAX_ARRAYS) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                            "host callback: too many operands and results");
  }
  cw__call_t* call = calloc(1, sizeof(*call));
  Causeway__V1__HostCallbackArray* arrays = calloc(n + 1, sizeof(*arrays));
  uint64_t* offsets = calloc(n + 1, sizeof(*offsets));
  if (!call || !arrays || !offsets) {
    free(call);
    free(arrays);
    free(offsets);
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                            "host callback: out of memory");
  }
  pthread_mutex_init(&call->mu, NULL);
  pthread_cond_init(&call->cv, NULL);
  call->launch = launch;
  causeway__v1__host_callback_request__init(&call->req);
  call->req.host_callbacks = launch->host_callbacks;
  call->req.index = index;
  call->req.exe_id = launch->exe_id;
  call->req.partitioned = kind == CW__PARTITIONED;
  call->req.buffer = kind == CW__BUFFER;
  cw_status_t st = cw__call_build(frame, call, arrays, offsets);
  if (!st && !cw_worker_post(launch->w, cw__send, call)) {
    st = cw_make_status(CW_UNAVAILABLE, "the worker is shutting down");
  }
  if (!st) {
    pthread_mutex_lock(&call->mu);
    while (!call->done) pthread_cond_wait(&call->cv, &call->mu);
    pthread_mutex_unlock(&call->mu);
    st = call->status;
    call->status = NULL;
    if (!st) st = cw__call_results(frame, call, offsets);
  }
  cw__call_free(call);
  free(arrays);
  free(offsets);
  return st ? cw__error(frame, st) : NULL;
}

// jaxlib's `dce_sink` (lax.dce_sink): an operand XLA must not remove as dead,
// and nothing to do. jaxlib registers it in the JAX process's own XLA only.
static XLA_FFI_Error* cw__dce_sink(XLA_FFI_CallFrame* frame) {
  (void)cw_xla_ffi_answer_metadata(frame, 0);
  return NULL;
}

static XLA_FFI_Error* cw__handler(XLA_FFI_CallFrame* frame) {
  return cw__handle(frame, CW__PLAIN);
}
static XLA_FFI_Error* cw__partitioned_handler(XLA_FFI_CallFrame* frame) {
  return cw__handle(frame, CW__PARTITIONED);
}
static XLA_FFI_Error* cw__buffer_handler(XLA_FFI_CallFrame* frame) {
  return cw__handle(frame, CW__BUFFER);
}

// --- Lifecycle ------------------------------------------------------------------

cw_status_t cw_worker_hostcb_start(cw_worker_t* w) {
  cw_worker_hostcb_t* h = calloc(1, sizeof(*h));
  if (!h) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  w->hostcb = h;
  cw_status_t st = cw_pjrt_ffi_register_type(w->pjrt, "causeway.host_callbacks", &h->type_id);
  if (!st) {
    g_type_id = h->type_id;
    st = cw_pjrt_ffi_register_handler(w->pjrt, kTarget, "Host", (void*)cw__handler, 0);
  }
  if (!st) {
    st = cw_pjrt_ffi_register_handler(w->pjrt, kPartitioned, "Host",
                                      (void*)cw__partitioned_handler, 0);
  }
  if (!st) {
    st = cw_pjrt_ffi_register_handler(w->pjrt, kBuffer, "Host", (void*)cw__buffer_handler, 0);
  }
  if (!st) st = cw_pjrt_ffi_register_handler(w->pjrt, "dce_sink", "Host", (void*)cw__dce_sink, 0);
  if (st && cw_status_code(st) == CW_UNIMPLEMENTED) {
    CW_LOGW("host callbacks unavailable: %s", cw_status_message(st));
    cw_status_free(st);
    st = cw_ok_status();
    h->type_id = 0;
  }
  CW_RETURN_IF_ERROR(st, "host callbacks");
  return cw_pool_create("cw-hostcb", CW__MAX_THREADS, &h->pool);
}

void cw_worker_hostcb_stop(cw_worker_t* w) {
  if (!w->hostcb) return;
  cw_pool_release(w->hostcb->pool);
  free(w->hostcb);
  w->hostcb = NULL;
}

cw_status_t cw_worker_hostcb_launch_create(cw_worker_t* w, uint64_t skey,
                                           uint64_t host_callbacks, uint64_t exe_id,
                                           cw_hostcb_launch_t** out) {
  *out = NULL;
  if (!w->hostcb || !w->hostcb->type_id) {
    return cw_make_status(CW_UNIMPLEMENTED, "the worker's PJRT plugin cannot run host callbacks");
  }
  cw_hostcb_launch_t* l = calloc(1, sizeof(*l));
  if (!l) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  l->w = w;
  l->skey = skey;
  l->host_callbacks = host_callbacks;
  l->exe_id = exe_id;
  cw_status_t st = cw_pjrt_execute_context_create(w->pjrt, w->hostcb->type_id, l, &l->context);
  if (st) {
    free(l);
    return st;
  }
  *out = l;
  return cw_ok_status();
}

void cw_worker_hostcb_launch_free(cw_worker_t* w, cw_hostcb_launch_t* l) {
  if (!l) return;
  cw_pjrt_execute_context_destroy(w->pjrt, l->context);
  free(l);
}

PJRT_ExecuteContext* cw_worker_hostcb_launch_context(const cw_hostcb_launch_t* l) {
  return l->context;
}

cw_status_t cw_worker_hostcb_run(cw_worker_t* w, void (*fn)(void* user), void* user) {
  if (!w->hostcb || !w->hostcb->pool) {
    return cw_make_status(CW_UNAVAILABLE, "no threads for host callbacks");
  }
  return cw_pool_submit(w->hostcb->pool, fn, user);
}
