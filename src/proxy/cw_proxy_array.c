// Arrays: an IFRT array is a set of shards, each a PJRT buffer of the
// session's client (a causeway buffer on a worker), under the handle the
// IFRT client chose. Shards are reference counted so that the arrays
// assembled from, or disassembled into, single-device arrays share them.
#include <stdlib.h>
#include <string.h>

#include "cw_log.h"
#include "cw_proxy_decode.h"
#include "cw_proxy_internal.h"
#include "cw_proxy_shards.h"

#define CW__HOST_BUFFER_WAIT_MS 60000

struct cw_proxy_shard_s {
  int refs;
  PJRT_Buffer* buffer;
  int32_t device_id;
};

// --- Shards and arrays -------------------------------------------------------------------

static cw_proxy_shard_t* cw__shard_retain(cw_proxy_shard_t* sh) {
  sh->refs++;
  return sh;
}

static void cw__shard_release(cw_proxy_session_t* s, cw_proxy_shard_t* sh) {
  if (!sh || --sh->refs > 0) return;
  cw_proxy_pjrt_buffer_destroy(&s->proxy->pjrt, sh->buffer);
  free(sh);
}

// A shard holding `buffer` (not taken: NULL when memory is short).
static cw_proxy_shard_t* cw__shard_new(PJRT_Buffer* buffer, int32_t device_id) {
  cw_proxy_shard_t* sh = malloc(sizeof(*sh));
  if (sh) *sh = (cw_proxy_shard_t){.refs = 1, .buffer = buffer, .device_id = device_id};
  return sh;
}

cw_status_t cw_proxy_array_add_shard(cw_proxy_array_t* a, PJRT_Buffer* buffer, int32_t device_id) {
  cw_proxy_shard_t* sh = cw__shard_new(buffer, device_id);
  if (!sh) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  a->shards[a->n++] = sh;
  return cw_ok_status();
}

cw_status_t cw_proxy_array_take_shard(cw_proxy_session_t* s, cw_proxy_array_t* a,
                                      PJRT_Buffer* buffer, int32_t device_id) {
  cw_status_t st = cw_proxy_array_add_shard(a, buffer, device_id);
  if (st) cw_proxy_pjrt_buffer_destroy(&s->proxy->pjrt, buffer);
  return st;
}

void cw_proxy_array_share_shard(cw_proxy_array_t* out, const cw_proxy_array_t* in, size_t k) {
  out->shards[out->n++] = cw__shard_retain(in->shards[k]);
}

int32_t cw_proxy_array_shard_device(const cw_proxy_array_t* a, size_t k) {
  return a->shards[k]->device_id;
}

PJRT_Buffer* cw_proxy_array_shard_buffer(const cw_proxy_array_t* a, size_t k) {
  return a->shards[k]->buffer;
}

// Drops the shards (Delete): the array stays, deleted, until Destruct.
static void cw__array_drop(cw_proxy_session_t* s, cw_proxy_array_t* a) {
  for (size_t i = 0; i < a->n; i++) cw__shard_release(s, a->shards[i]);  // NULL: none
  free(a->shards);
  a->shards = NULL;
  a->n = 0;
  a->deleted = true;
}

void cw_proxy_array_free(cw_proxy_session_t* s, cw_proxy_array_t* a) {
  if (!a) return;
  cw__array_drop(s, a);
  cw_status_free(a->error);
  free(a->sharding);
  free(a);
}

static void cw__free_each(void* user, uint64_t key, void* value) {
  cw_proxy_array_free(user, value);
}

void cw_proxy_arrays_free(cw_proxy_session_t* s) {
  cw_proxy_table_each(&s->arrays, cw__free_each, s);
  cw_proxy_table_deinitialize(&s->arrays);
}

void cw_proxy_arrays_drop(cw_proxy_session_t* s, const uint64_t* handles, size_t n) {
  for (size_t i = 0; i < n; i++) cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, handles[i]));
}

cw_status_t cw_proxy_array_get(cw_proxy_session_t* s, uint64_t handle, cw_proxy_array_t** out) {
  cw_proxy_array_t* a = cw_proxy_table_get(&s->arrays, handle);
  if (!a) return cw_make_status(CW_NOT_FOUND, "no array with handle %llu in this session",
                                (unsigned long long)handle);
  if (a->deleted) return cw_make_status(CW_FAILED_PRECONDITION, "array %llu was deleted",
                                        (unsigned long long)handle);
  if (a->error) return cw_status_clone(a->error);
  *out = a;
  return cw_ok_status();
}

uint64_t cw_proxy_result_handle(cw_proxy_session_t* s, bool has, uint64_t chosen) {
  return has && chosen ? chosen : (1ull << 63) | ++s->next_handle;
}

cw_status_t cw_proxy_array_new(cw_proxy_session_t* s, uint64_t handle, int32_t dtype,
                               const int64_t* dims, size_t rank, size_t n,
                               cw_proxy_array_t** out) {
  *out = NULL;
  if (rank > CW_PROXY_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "rank %zu is over %d", rank, CW_PROXY_MAX_RANK);
  }
  cw_proxy_array_t* a = calloc(1, sizeof(*a));
  cw_proxy_shard_t** shards = calloc(n ? n : 1, sizeof(*shards));
  if (!a || !shards) {
    free(a);
    free(shards);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for an array");
  }
  a->dtype = dtype;
  a->rank = rank;
  if (rank) memcpy(a->dims, dims, rank * sizeof(*dims));
  a->shards = shards;
  cw_status_t st = cw_proxy_table_put(&s->arrays, handle, a);
  if (st) {
    free(shards);
    free(a);
    return cw_status_annotate(st, "array");
  }
  *out = a;
  return cw_ok_status();
}

void cw_proxy_array_keep_sharding(cw_proxy_array_t* a, const CwIfrt__Sharding* sharding) {
  size_t len = cw_ifrt__sharding__get_packed_size(sharding);
  a->sharding = malloc(len ? len : 1);
  if (a->sharding) a->sharding_len = cw_ifrt__sharding__pack(sharding, a->sharding);
}

// --- Requests ------------------------------------------------------------------------------


void cw_proxy_arrays_donate_if(cw_proxy_session_t* s, int32_t semantics, const uint64_t* handles,
                               size_t n) {
  if (semantics != CW_PROXY_DONATE_INPUT) return;
  for (size_t i = 0; i < n; i++) {
    cw_proxy_array_t* a = cw_proxy_table_get(&s->arrays, handles[i]);
    if (a) cw__array_drop(s, a);
  }
}

// Sets the response to kind `kase`, a message of that kind whose field 1,
// when `with_handle`, is the fixed64 `handle` (most of this family's
// responses are that or empty). Freed by cw_proxy_array_response_free.
cw_status_t cw_proxy_respond(CwIfrt__IfrtResponse* resp, int kase, bool with_handle,
                             uint64_t handle) {
  const ProtobufCFieldDescriptor* f =
      protobuf_c_message_descriptor_get_field(&cw_ifrt__ifrt_response__descriptor, kase);
  const ProtobufCMessageDescriptor* md = f->descriptor;
  ProtobufCMessage* m = calloc(1, md->sizeof_message);
  if (!m) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  protobuf_c_message_init(md, m);
  if (with_handle) {
    const ProtobufCFieldDescriptor* hf = protobuf_c_message_descriptor_get_field(md, 1);
    *(uint64_t*)((char*)m + hf->offset) = handle;
    *(protobuf_c_boolean*)((char*)m + hf->quantifier_offset) = 1;
  }
  resp->response_case = kase;
  resp->init_response = (CwIfrt__InitResponse*)m;  // the oneof's one pointer
  return cw_ok_status();
}

cw_status_t cw_proxy_respond_handles(CwIfrt__IfrtResponse* resp, int kase, size_t n) {
  CW_RETURN_IF_ERROR(cw_proxy_respond(resp, kase, false, 0), "response");
  // Field 1 of these responses: repeated fixed64 handles (count, then array).
  ProtobufCMessage* m = (ProtobufCMessage*)resp->init_response;
  const ProtobufCFieldDescriptor* f = protobuf_c_message_descriptor_get_field(m->descriptor, 1);
  uint64_t* handles = calloc(n + 1, sizeof(*handles));
  if (!handles) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  *(uint64_t**)((char*)m + f->offset) = handles;
  return cw_ok_status();
}

static cw_status_t cw__respond_handle(CwIfrt__IfrtResponse* resp, int kase, uint64_t handle) {
  return cw_proxy_respond(resp, kase, true, handle);
}

PJRT_Buffer* cw_proxy_array_buffer_on(const cw_proxy_array_t* a, int32_t device_id) {
  for (size_t i = 0; i < a->n; i++) {
    if (a->shards[i] && a->shards[i]->device_id == device_id) return a->shards[i]->buffer;
  }
  return NULL;
}

bool cw_proxy_array_check_deleted(cw_proxy_session_t* s, cw_proxy_array_t* a) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  for (size_t i = 0; !a->deleted && i < a->n; i++) {
    if (!a->shards[i]) continue;
    PJRT_Buffer_IsDeleted_Args x = {CW_PROXY_ARGS(PJRT_Buffer_IsDeleted_Args, is_deleted),
                                    .buffer = a->shards[i]->buffer};
    cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_IsDeleted, &x);
    if (st) {
      cw_status_free(st);
      continue;
    }
    a->deleted = x.is_deleted;
  }
  return a->deleted;
}

cw_status_t cw_proxy_array_adopt(cw_proxy_session_t* s, uint64_t handle,
                                 PJRT_Buffer* const* buffers, const int32_t* device_ids, size_t n,
                                 cw_proxy_array_t** out) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Buffer_ElementType_Args et = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_ElementType_Args, type),
      .buffer = buffers[0]};
  PJRT_Buffer_Dimensions_Args d = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Dimensions_Args, num_dims),
      .buffer = buffers[0]};
  int32_t kind;
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Buffer_ElementType, &et), "output");
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Buffer_Dimensions, &d), "output");
  CW_RETURN_IF_ERROR(cw_proxy_dtype_kind(et.type, &kind), "output");
  CW_RETURN_IF_ERROR(cw_proxy_array_new(s, handle, kind, d.dims, d.num_dims, n, out), "output");
  for (size_t i = 0; i < n; i++) {
    cw_status_t st = cw_proxy_array_add_shard(*out, buffers[i], device_ids[i]);
    if (st) {
      // The buffers stay the caller's, those of the shards made so far too.
      for (size_t k = 0; k < (*out)->n; k++) (*out)->shards[k]->buffer = NULL;
      cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, handle));
      *out = NULL;
      return st;
    }
  }
  return cw_ok_status();
}

cw_status_t cw_proxy_device_lookup(cw_proxy_session_t* s, int32_t id, PJRT_Device** out) {
  PJRT_Client_LookupDevice_Args a = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Client_LookupDevice_Args, device),
      .client = s->client, .id = id};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Client_LookupDevice, &a),
                     "device %d", id);
  *out = a.device;
  return cw_ok_status();
}

cw_status_t cw_proxy_buffer_upload(cw_proxy_session_t* s, const cw_proxy_dtype_t* dt,
                                   const int64_t* dims, size_t rank, int32_t device_id,
                                   const uint8_t* data, PJRT_Buffer** out) {
  *out = NULL;
  PJRT_Device* device;
  CW_RETURN_IF_ERROR(cw_proxy_device_lookup(s, device_id, &device), "upload");
  PJRT_Client_BufferFromHostBuffer_Args a = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer),
      .client = s->client, .data = data, .type = dt->pjrt, .dims = dims, .num_dims = rank,
      .host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
      .device = device};
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Client_BufferFromHostBuffer, &a);
  if (!st) st = cw_proxy_pjrt_await(p, a.done_with_host_buffer, "done with the host buffer");
  if (st) {
    cw_proxy_pjrt_buffer_destroy(p, a.buffer);
    return st;
  }
  *out = a.buffer;
  return cw_ok_status();
}

// One shard on `device_id` holding `data`.
static cw_status_t cw__upload(cw_proxy_session_t* s, const cw_proxy_dtype_t* dt, const int64_t* dims,
                              size_t rank, int32_t device_id, const uint8_t* data,
                              cw_proxy_shard_t** out) {
  PJRT_Buffer* b;
  cw_status_t st = cw_proxy_buffer_upload(s, dt, dims, rank, device_id, data, &b);
  if (st) return st;
  *out = cw__shard_new(b, device_id);
  if (*out) return cw_ok_status();
  cw_proxy_pjrt_buffer_destroy(&s->proxy->pjrt, b);
  return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
}

// Host buffer `handle` as the dense bytes of an array of `dims` (strided
// buffers are gathered); *out_data is the caller's.
static cw_status_t cw__host_array(cw_proxy_session_t* s, uint64_t handle,
                                  const cw_proxy_dtype_t* dt, const int64_t* dims, size_t rank,
                                  const CwIfrt__ByteStrides* strides, uint8_t** out_data) {
  *out_data = NULL;
  cw_proxy_host_layout_t l;
  CW_RETURN_IF_ERROR(cw_proxy_host_layout(dt, dims, rank, strides, &l), "host buffer");
  uint8_t* data = NULL;
  size_t len = 0;
  CW_RETURN_IF_ERROR(cw_proxy_host_buffer_take(s, handle, CW__HOST_BUFFER_WAIT_MS, &data, &len),
                     "host buffer");
  if (l.dense ? len != l.bytes : len < l.source_bytes) {
    cw_proxy_bytes_free(data);
    return cw_make_status(CW_INVALID_ARGUMENT, "host buffer %llu has %zu bytes; the array needs "
                          "%zu", (unsigned long long)handle, len,
                          l.dense ? l.bytes : l.source_bytes);
  }
  if (!l.dense) {
    uint8_t* dense = cw_proxy_bytes_alloc(l.bytes ? l.bytes : 1);
    if (!dense) {
      cw_proxy_bytes_free(data);
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %zu bytes", l.bytes);
    }
    cw_proxy_densify(data, dims, rank, strides->strides, dt->width, dense);
    cw_proxy_bytes_free(data);
    data = dense;
  }
  *out_data = data;
  return cw_ok_status();
}

// Host buffer `handle` streamed on to each of the `n` devices `device_ids`
// while its store is under way (cw_proxy_host_buffer_stream); out[0] NULL
// where it cannot be: strided, small, complete already, or a type the
// plugin cannot fill in parts. Then the caller takes the host buffer whole.
static cw_status_t cw__stream(cw_proxy_session_t* s, uint64_t handle, const cw_proxy_dtype_t* dt,
                              const int64_t* dims, size_t rank,
                              const CwIfrt__ByteStrides* strides, const int32_t* device_ids,
                              size_t n, PJRT_Buffer** out) {
  out[0] = NULL;
  cw_proxy_host_layout_t l;
  CW_RETURN_IF_ERROR(cw_proxy_host_layout(dt, dims, rank, strides, &l), "host buffer");
  if (!l.dense || l.bytes < CW_PROXY_STREAM_MIN || n == 0) return cw_ok_status();
  PJRT_Memory** memories = calloc(n, sizeof(*memories));
  if (!memories) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t st = cw_ok_status();
  for (size_t i = 0; i < n && !st; i++) {
    PJRT_Device* device = NULL;
    st = cw_proxy_device_lookup(s, device_ids[i], &device);
    PJRT_Device_DefaultMemory_Args m = {
        .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Device_DefaultMemory_Args, memory),
        .device = device};
    if (!st) st = CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Device_DefaultMemory, &m);
    memories[i] = m.memory;
  }
  if (!st) {
    st = cw_proxy_host_buffer_stream(s, handle, l.bytes, CW__HOST_BUFFER_WAIT_MS, memories, n,
                                     dt->pjrt, dims, rank, out);
  }
  free(memories);
  if (st && cw_status_code(st) == CW_UNIMPLEMENTED && !out[0]) {
    cw_status_free(st);  // packed sub-byte types: whole, as before
    return cw_ok_status();
  }
  return st;
}

static cw_status_t cw__make_from_host(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                      CwIfrt__IfrtResponse* resp) {
  const CwIfrt__MakeArrayFromHostBufferRequest* r = req->make_array_from_host_buffer_request;
  if (!r->dtype || !r->shape) return cw_make_status(CW_INVALID_ARGUMENT, "dtype and shape needed");
  cw_proxy_dtype_t dt;
  size_t n;
  int32_t* ids;
  bool replicated;
  if (r->shape->n_dims > CW_PROXY_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "rank %zu is over %d", r->shape->n_dims,
                          CW_PROXY_MAX_RANK);
  }
  CW_RETURN_IF_ERROR(cw_proxy_dtype(r->dtype->kind, &dt), "MakeArrayFromHostBuffer");
  CW_RETURN_IF_ERROR(cw_proxy_sharding_devices(r->sharding, &ids, &n, &replicated),
                     "MakeArrayFromHostBuffer");
  if (!replicated) {
    free(ids);
    return cw_make_status(CW_INVALID_ARGUMENT, "MakeArrayFromHostBuffer: the sharding splits "
                          "the array over %zu devices; one host buffer makes a single-device or "
                          "fully replicated array", n);
  }
  uint8_t* data = NULL;
  // Sent on to its devices as it is stored, or taken whole first.
  PJRT_Buffer** streamed = calloc(n ? n : 1, sizeof(*streamed));
  cw_status_t st = streamed ? cw__stream(s, r->host_buffer_handle, &dt, r->shape->dims,
                                         r->shape->n_dims, r->byte_strides, ids, n, streamed)
                            : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  bool whole = !st && !streamed[0];
  if (whole) {
    st = cw__host_array(s, r->host_buffer_handle, &dt, r->shape->dims, r->shape->n_dims,
                        r->byte_strides, &data);
  }
  uint64_t handle = cw_proxy_result_handle(s, r->has_array_handle, r->array_handle);
  cw_proxy_array_t* arr = NULL;
  if (!st) {
    st = cw_proxy_array_new(s, handle, r->dtype->kind, r->shape->dims, r->shape->n_dims, n, &arr);
  }
  for (size_t i = 0; !whole && streamed && i < n && streamed[0]; i++) {
    if (!st) st = cw_proxy_array_take_shard(s, arr, streamed[i], ids[i]);
    else cw_proxy_pjrt_buffer_destroy(&s->proxy->pjrt, streamed[i]);
  }
  for (size_t i = 0; !st && whole && i < n; i++) {
    st = cw__upload(s, &dt, r->shape->dims, r->shape->n_dims, ids[i], data, &arr->shards[i]);
    if (!st) arr->n++;
  }
  free(streamed);
  if (!st && r->sharding) cw_proxy_array_keep_sharding(arr, r->sharding);
  if (!st) st = cw__respond_handle(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_MAKE_ARRAY_FROM_HOST_BUFFER_RESPONSE, handle);
  if (st && arr) cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, handle));
  cw_proxy_bytes_free(data);
  free(ids);
  return st ? cw_status_annotate(st, "MakeArrayFromHostBuffer") : st;
}

// One array of MakeArraysFromHostBufferShards: host buffer k goes to the
// shards (indices into the sharding's devices) spec->addressable_shard_indices[k].
static cw_status_t cw__make_one_from_shards(
    cw_proxy_session_t* s, const CwIfrt__MakeArraysFromHostBufferShardsRequest__Spec* spec,
    uint64_t handle) {
  const CwIfrt__ArraySpec* as = spec->array_spec;
  if (!as || !as->dtype || !as->shape || !as->sharding) {
    return cw_make_status(CW_INVALID_ARGUMENT, "an array spec needs dtype, shape and sharding");
  }
  if (spec->n_host_buffers != spec->n_addressable_shard_indices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%zu host buffers for %zu shard index lists",
                          spec->n_host_buffers, spec->n_addressable_shard_indices);
  }
  int32_t* ids;
  size_t n;
  bool replicated;
  CW_RETURN_IF_ERROR(cw_proxy_sharding_devices(as->sharding, &ids, &n, &replicated), "spec");
  cw_proxy_array_t* arr;
  cw_status_t st = cw_proxy_array_new(s, handle, as->dtype->kind, as->shape->dims,
                                      as->shape->n_dims, n, &arr);
  if (st) {
    free(ids);
    return st;
  }
  for (size_t k = 0; !st && k < spec->n_host_buffers; k++) {
    const CwIfrt__MakeArraysFromHostBufferShardsRequest__HostBuffer* hb = spec->host_buffers[k];
    const CwIfrt__MakeArraysFromHostBufferShardsRequest__ShardIndices* idx =
        spec->addressable_shard_indices[k];
    cw_proxy_dtype_t dt;
    uint8_t* data = NULL;
    if (!hb->dtype || !hb->shape || hb->shape->n_dims > CW_PROXY_MAX_RANK) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "host buffer %zu needs a dtype and a shape of "
                          "rank at most %d", k, CW_PROXY_MAX_RANK);
    }
    if (!st) st = cw_proxy_dtype(hb->dtype->kind, &dt);
    // Its shards' devices; each shard given once.
    size_t m = idx->n_indices;
    int32_t* to = st ? NULL : calloc(m ? m : 1, sizeof(*to));
    PJRT_Buffer** streamed = st ? NULL : calloc(m ? m : 1, sizeof(*streamed));
    if (!st && (!to || !streamed)) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t j = 0; !st && j < m; j++) {
      int64_t i = idx->indices[j];
      bool twice = false;
      for (size_t q = 0; i >= 0 && (size_t)i < n && q < j; q++) twice |= idx->indices[q] == i;
      if (i < 0 || (size_t)i >= n || arr->shards[i] || twice) {
        st = cw_make_status(CW_INVALID_ARGUMENT, "shard index %lld is out of range or given twice",
                            (long long)i);
        break;
      }
      to[j] = ids[i];
    }
    // Sent on to its devices as it is stored, or taken whole first.
    if (!st) {
      st = cw__stream(s, hb->host_buffer_handle, &dt, hb->shape->dims, hb->shape->n_dims,
                      hb->byte_strides, to, m, streamed);
    }
    bool whole = !st && !streamed[0];
    if (whole) {
      st = cw__host_array(s, hb->host_buffer_handle, &dt, hb->shape->dims, hb->shape->n_dims,
                          hb->byte_strides, &data);
    }
    for (size_t j = 0; !st && j < m; j++) {
      int64_t i = idx->indices[j];
      if (whole) {
        st = cw__upload(s, &dt, hb->shape->dims, hb->shape->n_dims, ids[i], data,
                        &arr->shards[i]);
      } else if (!(arr->shards[i] = cw__shard_new(streamed[j], ids[i]))) {
        st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
      } else {
        streamed[j] = NULL;  // the shard's now
      }
    }
    for (size_t j = 0; streamed && j < m; j++) {
      cw_proxy_pjrt_buffer_destroy(&s->proxy->pjrt, streamed[j]);  // those not taken
    }
    free(streamed);
    free(to);
    cw_proxy_bytes_free(data);
  }
  // Every shard must have been given (addressable shards are all shards here).
  for (size_t i = 0; !st && i < n; i++) {
    if (!arr->shards[i]) st = cw_make_status(CW_INVALID_ARGUMENT, "shard %zu has no host buffer", i);
  }
  arr->n = n;  // cw_proxy_array_free skips the NULL ones of a failure
  free(ids);
  if (!st) cw_proxy_array_keep_sharding(arr, as->sharding);
  if (st) cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, handle));
  return st;
}

static cw_status_t cw__make_from_shards(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                        CwIfrt__IfrtResponse* resp) {
  const CwIfrt__MakeArraysFromHostBufferShardsRequest* r =
      req->make_arrays_from_host_buffer_shards_request;
  if (r->n_array_handles && r->n_array_handles != r->n_specs) {
    return cw_make_status(CW_INVALID_ARGUMENT, "MakeArraysFromHostBufferShards: %zu handles for "
                          "%zu specs", r->n_array_handles, r->n_specs);
  }
  CW_RETURN_IF_ERROR(cw_proxy_respond_handles(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_RESPONSE,
      r->n_specs), "MakeArraysFromHostBufferShards");
  CwIfrt__MakeArraysFromHostBufferShardsResponse* out =
      resp->make_arrays_from_host_buffer_shards_response;
  uint64_t* handles = out->array_handles;
  for (size_t i = 0; i < r->n_specs; i++) {
    uint64_t h = cw_proxy_result_handle(s, r->n_array_handles > 0,
                                        r->n_array_handles ? r->array_handles[i] : 0);
    cw_status_t st = cw__make_one_from_shards(s, r->specs[i], h);
    if (st) {
      cw_proxy_arrays_drop(s, handles, out->n_array_handles);
      return cw_status_annotate(st, "MakeArraysFromHostBufferShards, array %zu", i);
    }
    handles[out->n_array_handles++] = h;
  }
  return cw_ok_status();
}

// The memory of kind `kind` on `device` (NULL kind: the device's default).
cw_status_t cw_proxy_device_memory(cw_proxy_session_t* s, PJRT_Device* device, const char* kind,
                                   PJRT_Memory** out) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  *out = NULL;
  if (!kind || !*kind) return cw_ok_status();
  PJRT_Device_AddressableMemories_Args m = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Device_AddressableMemories_Args, num_memories),
      .device = device};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_AddressableMemories, &m), "memory");
  for (size_t i = 0; i < m.num_memories; i++) {
    PJRT_Memory_Kind_Args k = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Memory_Kind_Args,
                                                                  kind_size),
                               .memory = m.memories[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Memory_Kind, &k), "memory");
    if (k.kind_size == strlen(kind) && !memcmp(k.kind, kind, k.kind_size)) {
      *out = m.memories[i];
      return cw_ok_status();
    }
  }
  return cw_make_status(CW_INVALID_ARGUMENT, "the device has no memory of kind %s", kind);
}

cw_status_t cw_proxy_buffer_copy(cw_proxy_session_t* s, PJRT_Buffer* buffer, int32_t device_id,
                                 const char* memory_kind, PJRT_Buffer** out) {
  *out = NULL;
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Device* dev;
  PJRT_Memory* mem = NULL;
  cw_status_t st = cw_proxy_device_lookup(s, device_id, &dev);
  if (!st) st = cw_proxy_device_memory(s, dev, memory_kind, &mem);
  if (st) return st;
  if (mem) {
    PJRT_Buffer_CopyToMemory_Args m = {
        .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_CopyToMemory_Args, dst_buffer),
        .buffer = buffer, .dst_memory = mem};
    st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_CopyToMemory, &m);
    *out = m.dst_buffer;
    return st;
  }
  PJRT_Buffer_CopyToDevice_Args d = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_CopyToDevice_Args, dst_buffer),
      .buffer = buffer, .dst_device = dev};
  st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_CopyToDevice, &d);
  *out = d.dst_buffer;
  return st;
}

// Copies of arrays onto other devices (and memory kinds), shard k onto
// device k: the plugin copies worker to worker.
static cw_status_t cw__copy_arrays(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                   CwIfrt__IfrtResponse* resp) {
  const CwIfrt__CopyArraysRequest* r = req->copy_arrays_request;
  if (r->n_result_handles && r->n_result_handles != r->n_array_handles) {
    return cw_make_status(CW_INVALID_ARGUMENT, "CopyArrays: %zu result handles for %zu arrays",
                          r->n_result_handles, r->n_array_handles);
  }
  CW_RETURN_IF_ERROR(cw_proxy_respond_handles(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_COPY_ARRAYS_RESPONSE, r->n_array_handles),
      "CopyArrays");
  CwIfrt__CopyArraysResponse* out = resp->copy_arrays_response;
  for (size_t i = 0; i < r->n_array_handles; i++) {
    cw_proxy_array_t* a;
    cw_proxy_array_t* c = NULL;
    uint64_t h = cw_proxy_result_handle(s, r->n_result_handles > 0,
                                        r->n_result_handles ? r->result_handles[i] : 0);
    cw_status_t st = cw_proxy_array_get(s, r->array_handles[i], &a);
    if (!st && r->n_device_ids != a->n) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "%zu devices for an array of %zu shards",
                          r->n_device_ids, a->n);
    }
    if (!st) st = cw_proxy_array_new(s, h, a->dtype, a->dims, a->rank, a->n, &c);
    if (st) {
      cw_proxy_arrays_drop(s, out->array_handles, out->n_array_handles);
      return cw_status_annotate(st, "CopyArrays");
    }
    int32_t* from = malloc((a->n ? a->n : 1) * sizeof(*from));
    for (size_t k = 0; !st && k < a->n; k++) {
      PJRT_Buffer* b = NULL;
      if (from) from[k] = a->shards[k]->device_id;
      st = cw_proxy_buffer_copy(s, a->shards[k]->buffer, r->device_ids[k], r->memory_kind, &b);
      if (!st) st = cw_proxy_array_take_shard(s, c, b, r->device_ids[k]);
    }
    // The copy lies as the array did, on the new devices (ReshardArrays reads
    // it); kept when it can be, as for any array.
    if (!st && from && a->sharding) {
      cw_status_t moved = cw_proxy_sharding_move(a->sharding, a->sharding_len, from,
                                                 r->device_ids, a->n, &c->sharding,
                                                 &c->sharding_len);
      if (moved) CW_LOGD("CopyArrays: the copy keeps no sharding: %s", cw_status_message(moved));
      cw_status_free(moved);
    }
    free(from);
    if (st) {
      cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, h));
      cw_proxy_arrays_drop(s, out->array_handles, out->n_array_handles);
      return cw_status_annotate(st, "CopyArrays");
    }
    out->array_handles[out->n_array_handles++] = h;
  }
  cw_proxy_arrays_donate_if(s, r->copy_semantics, r->array_handles, r->n_array_handles);
  return cw_ok_status();
}

// Puts `sh` as shard `j` of `out`, which its sharding puts on out_ids[j].
static cw_status_t cw__remap_put(cw_proxy_shard_t* sh, cw_proxy_array_t* out,
                                 const int32_t* out_ids, size_t j) {
  if (!sh) return cw_make_status(CW_FAILED_PRECONDITION, "an input shard is gone");
  if (out->shards[j]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "output shard %zu is mapped twice", j);
  }
  if (sh->device_id != out_ids[j]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "output shard %zu is on device %d, its input "
                          "shard on device %d", j, out_ids[j], sh->device_id);
  }
  out->shards[j] = cw__shard_retain(sh);
  return cw_ok_status();
}

// One interval pair of a remap mapping: shards from[k] of `in` become
// shards to[k] of `out`.
static cw_status_t cw__remap_interval(const CwIfrt__RemapPlan__Mapping* m, size_t k,
                                      const cw_proxy_array_t* in, cw_proxy_array_t* out,
                                      const int32_t* out_ids) {
  int64_t fs = m->from_start[k], fe = m->from_end[k], fst = m->from_step[k];
  int64_t ts = m->to_start[k], te = m->to_end[k], tst = m->to_step[k];
  if (fst <= 0 || tst <= 0 || fs < 0 || ts < 0 || fs > fe || ts > te ||
      (uint64_t)fe > in->n || (uint64_t)te > out->n) {
    return cw_make_status(CW_INVALID_ARGUMENT, "interval %zu: shards %lld:%lld:%lld of %zu to "
                          "%lld:%lld:%lld of %zu", k, (long long)fs, (long long)fe, (long long)fst,
                          in->n, (long long)ts, (long long)te, (long long)tst, out->n);
  }
  // Counts first: c * step then stays within the interval (no overflow).
  int64_t count = fe > fs ? (fe - fs - 1) / fst + 1 : 0;
  if (count != (te > ts ? (te - ts - 1) / tst + 1 : 0)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "interval %zu maps a different number of shards "
                          "from than to", k);
  }
  for (int64_t c = 0; c < count; c++) {
    CW_RETURN_IF_ERROR(cw__remap_put(in->shards[fs + c * fst], out, out_ids,
                                     (size_t)(ts + c * tst)), "interval %zu", k);
  }
  return cw_ok_status();
}

// The compact form: output shards on `devices` are `in`'s shards there.
static cw_status_t cw__remap_devices(const CwIfrt__DeviceList* devices, const cw_proxy_array_t* in,
                                     cw_proxy_array_t* out, const int32_t* out_ids) {
  for (size_t k = 0; devices && k < devices->n_device_ids; k++) {
    int32_t d = devices->device_ids[k];
    size_t j = 0, i = 0;
    while (j < out->n && out_ids[j] != d) j++;
    while (i < in->n && !(in->shards[i] && in->shards[i]->device_id == d)) i++;
    if (j == out->n || i == in->n) {
      return cw_make_status(CW_INVALID_ARGUMENT, "device %d is not among the %s's", d,
                            j == out->n ? "output" : "input");
    }
    CW_RETURN_IF_ERROR(cw__remap_put(in->shards[i], out, out_ids, j), "device %d", d);
  }
  return cw_ok_status();
}

// Output arrays made of the inputs' shards, as the plan maps them (no byte
// moves: shards are shared).
static cw_status_t cw__remap_outputs(cw_proxy_session_t* s, const CwIfrt__RemapArraysRequest* r,
                                     cw_proxy_array_t** in, int32_t** out_ids,
                                     CwIfrt__RemapArraysResponse* out) {
  const CwIfrt__RemapPlan* plan = r->plan;
  size_t n_in = r->n_array_handles, n_out = plan->n_output_specs;
  cw_proxy_array_t** outs = calloc(n_out + 1, sizeof(*outs));
  if (!outs) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t st = cw_ok_status();
  for (size_t o = 0; !st && o < n_out; o++) {
    const CwIfrt__ArraySpec* spec = plan->output_specs[o];
    if (!spec->dtype || !spec->shape || !spec->sharding) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "output %zu: dtype, shape and sharding needed", o);
      break;
    }
    size_t nd = 0;
    bool replicated;
    st = cw_proxy_sharding_devices(spec->sharding, &out_ids[o], &nd, &replicated);
    uint64_t h = cw_proxy_result_handle(s, r->n_result_handles > 0,
                                        r->n_result_handles ? r->result_handles[o] : 0);
    if (!st) {
      st = cw_proxy_array_new(s, h, spec->dtype->kind, spec->shape->dims, spec->shape->n_dims, nd,
                              &outs[o]);
    }
    if (st) break;
    outs[o]->n = nd;  // shards filled below
    out->array_handles[out->n_array_handles++] = h;
    cw_proxy_array_keep_sharding(outs[o], spec->sharding);
  }
  // A plan may carry both forms; the compact one, when given, is the
  // plan's whole (as XLA's own clients read it).
  size_t n_mappings = plan->n_input_devices_for_output ? 0 : plan->n_mappings;
  for (size_t i = 0; !st && i < n_mappings; i++) {
    const CwIfrt__RemapPlan__Mapping* m = plan->mappings[i];
    size_t n = m->n_from_start;
    if (m->in_array < 0 || (size_t)m->in_array >= n_in || m->out_array < 0 ||
        (size_t)m->out_array >= n_out) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "arrays %d to %d", m->in_array, m->out_array);
    } else if (m->n_from_end != n || m->n_from_step != n || m->n_to_start != n ||
               m->n_to_end != n || m->n_to_step != n) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "intervals of unequal counts");
    }
    for (size_t k = 0; !st && k < n; k++) {
      st = cw__remap_interval(m, k, in[m->in_array], outs[m->out_array], out_ids[m->out_array]);
    }
    if (st) st = cw_status_annotate(st, "mapping %zu", i);
  }
  for (size_t i = 0; !st && i < plan->n_input_devices_for_output; i++) {
    const CwIfrt__RemapPlan__InputDevicesForOutput* f = plan->input_devices_for_output[i];
    if (f->out_array < 0 || (size_t)f->out_array >= n_out) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "output %d of %zu", f->out_array, n_out);
    }
    for (size_t k = 0; !st && k < f->n_input_devices; k++) {
      const CwIfrt__RemapPlan__InputDevices* d = f->input_devices[k];
      st = d->in_array < 0 || (size_t)d->in_array >= n_in
               ? cw_make_status(CW_INVALID_ARGUMENT, "input %d of %zu", d->in_array, n_in)
               : cw__remap_devices(d->device_list, in[d->in_array], outs[f->out_array],
                                   out_ids[f->out_array]);
    }
    if (st) st = cw_status_annotate(st, "output %zu's input devices", i);
  }
  for (size_t o = 0; !st && o < n_out; o++) {
    for (size_t j = 0; !st && j < outs[o]->n; j++) {
      if (!outs[o]->shards[j]) {
        st = cw_make_status(CW_INVALID_ARGUMENT, "shard %zu of output %zu is not mapped", j, o);
      }
    }
  }
  free(outs);
  return st;
}

static cw_status_t cw__remap(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                             CwIfrt__IfrtResponse* resp) {
  const CwIfrt__RemapArraysRequest* r = req->remap_arrays_request;
  const CwIfrt__RemapPlan* plan = r->plan;
  if (!plan) return cw_make_status(CW_INVALID_ARGUMENT, "RemapArrays: no plan");
  if (r->n_array_handles != plan->n_input_specs ||
      (r->n_result_handles && r->n_result_handles != plan->n_output_specs)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "RemapArrays: %zu arrays and %zu result handles "
                          "for a plan of %zu inputs and %zu outputs", r->n_array_handles,
                          r->n_result_handles, plan->n_input_specs, plan->n_output_specs);
  }
  // Outputs share the inputs' buffers: a copy is not what they would get.
  if (r->copy_semantics != CW_PROXY_REUSE_INPUT && r->copy_semantics != CW_PROXY_DONATE_INPUT) {
    return cw_make_status(CW_INVALID_ARGUMENT, "RemapArrays: copy semantics %d; shards are "
                          "shared, so only REUSE_INPUT (%d) or DONATE_INPUT (%d)",
                          r->copy_semantics, CW_PROXY_REUSE_INPUT, CW_PROXY_DONATE_INPUT);
  }
  cw_proxy_array_t** in = calloc(r->n_array_handles + 1, sizeof(*in));
  int32_t** out_ids = calloc(plan->n_output_specs + 1, sizeof(*out_ids));
  cw_status_t st = !in || !out_ids ? cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory")
                                   : cw_ok_status();
  for (size_t i = 0; !st && i < r->n_array_handles; i++) {
    st = cw_proxy_array_get(s, r->array_handles[i], &in[i]);
    const CwIfrt__ArraySpec* spec = plan->input_specs[i];
    bool same = !st && spec->dtype && spec->shape && spec->dtype->kind == in[i]->dtype &&
                spec->shape->n_dims == in[i]->rank &&
                (!in[i]->rank ||
                 !memcmp(spec->shape->dims, in[i]->dims, in[i]->rank * sizeof(int64_t)));
    if (!st && !same) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "input %zu is not the array its spec describes "
                          "(dtype and shape)", i);
    }
  }
  if (!st) {
    st = cw_proxy_respond_handles(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_REMAP_ARRAYS_RESPONSE,
                                  plan->n_output_specs);
  }
  CwIfrt__RemapArraysResponse* out = st ? NULL : resp->remap_arrays_response;
  if (!st) st = cw__remap_outputs(s, r, in, out_ids, out);
  if (st && out) cw_proxy_arrays_drop(s, out->array_handles, out->n_array_handles);
  if (!st) cw_proxy_arrays_donate_if(s, r->copy_semantics, r->array_handles, r->n_array_handles);
  for (size_t o = 0; out_ids && o < plan->n_output_specs; o++) free(out_ids[o]);
  free(out_ids);
  free(in);
  return st ? cw_status_annotate(st, "RemapArrays") : cw_ok_status();
}

static cw_status_t cw__assemble(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                CwIfrt__IfrtResponse* resp) {
  const CwIfrt__AssembleArrayFromSingleDeviceArraysRequest* r =
      req->assemble_array_from_single_device_arrays_request;
  if (!r->shape || !r->sharding || !r->n_single_device_array_handles) {
    return cw_make_status(CW_INVALID_ARGUMENT, "Assemble: shape, sharding and arrays needed");
  }
  size_t n = r->n_single_device_array_handles;
  cw_proxy_array_t* first;
  CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->single_device_array_handles[0], &first), "Assemble");
  for (size_t i = 0; i < n; i++) {
    cw_proxy_array_t* part;
    CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->single_device_array_handles[i], &part), "Assemble");
    if (part->n != 1) {
      return cw_make_status(CW_INVALID_ARGUMENT, "Assemble: array %llu has %zu shards, not one",
                            (unsigned long long)r->single_device_array_handles[i], part->n);
    }
  }
  uint64_t handle = cw_proxy_result_handle(s, r->has_result_handle, r->result_handle);
  int32_t dtype = r->dtype ? r->dtype->kind : first->dtype;
  cw_proxy_array_t* a;
  CW_RETURN_IF_ERROR(
      cw_proxy_array_new(s, handle, dtype, r->shape->dims, r->shape->n_dims, n, &a), "Assemble");
  for (size_t i = 0; i < n; i++) {
    cw_proxy_array_share_shard(
        a, cw_proxy_table_get(&s->arrays, r->single_device_array_handles[i]), 0);
  }
  cw_proxy_array_keep_sharding(a, r->sharding);
  return cw__respond_handle(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_RESPONSE, handle);
}

// A new single-device array over shard `i` of `a`, shaped as that shard's
// buffer (the whole array when replicated, a tile when split).
static cw_status_t cw__shard_array(cw_proxy_session_t* s, cw_proxy_array_t* a, size_t i,
                                   uint64_t handle) {
  PJRT_Buffer_Dimensions_Args d = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Dimensions_Args, num_dims),
      .buffer = a->shards[i]->buffer};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Buffer_Dimensions, &d), "shard");
  cw_proxy_array_t* one;
  CW_RETURN_IF_ERROR(cw_proxy_array_new(s, handle, a->dtype, d.dims, d.num_dims, 1, &one), "shard");
  cw_proxy_array_share_shard(one, a, i);
  return cw_ok_status();
}

static cw_status_t cw__disassemble(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                   CwIfrt__IfrtResponse* resp) {
  const CwIfrt__DisassembleIntoSingleDeviceArraysRequest* r =
      req->disassemble_into_single_device_arrays_request;
  cw_proxy_array_t* a;
  CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->array_handle, &a), "Disassemble");
  if (r->n_result_handles && r->n_result_handles != a->n) {
    return cw_make_status(CW_INVALID_ARGUMENT, "Disassemble: %zu result handles for %zu shards",
                          r->n_result_handles, a->n);
  }
  CW_RETURN_IF_ERROR(cw_proxy_respond_handles(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_RESPONSE, a->n),
      "Disassemble");
  CwIfrt__DisassembleIntoSingleDeviceArraysResponse* out =
      resp->disassemble_into_single_device_arrays_response;
  uint64_t* handles = out->array_handles;
  for (size_t i = 0; i < a->n; i++) {
    uint64_t h = cw_proxy_result_handle(s, r->n_result_handles > 0,
                                        r->n_result_handles ? r->result_handles[i] : 0);
    cw_status_t st = cw__shard_array(s, a, i, h);
    if (st) {
      cw_proxy_arrays_drop(s, handles, out->n_array_handles);
      return cw_status_annotate(st, "Disassemble");
    }
    handles[out->n_array_handles++] = h;
  }
  return cw_ok_status();
}

static cw_status_t cw__replicated_shard(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                        CwIfrt__IfrtResponse* resp) {
  const CwIfrt__FullyReplicatedShardRequest* r = req->fully_replicated_shard_request;
  cw_proxy_array_t* a;
  CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->array_handle, &a), "FullyReplicatedShard");
  if (!a->n) return cw_make_status(CW_FAILED_PRECONDITION, "FullyReplicatedShard: no shards");
  uint64_t h = cw_proxy_result_handle(s, r->has_result_handle, r->result_handle);
  CW_RETURN_IF_ERROR(cw__shard_array(s, a, 0, h), "FullyReplicatedShard");
  return cw__respond_handle(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_FULLY_REPLICATED_SHARD_RESPONSE, h);
}

cw_status_t cw_proxy_buffer_download_start(cw_proxy_session_t* s, PJRT_Buffer* buffer,
                                           size_t bytes, uint8_t** out_data,
                                           PJRT_Event** out_event) {
  *out_data = NULL;
  *out_event = NULL;
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Buffer_ToHostBuffer_Args q = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_ToHostBuffer_Args, event), .src = buffer};
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_ToHostBuffer, &q);
  if (st) return st;
  if (q.dst_size != bytes) {
    return cw_make_status(CW_INTERNAL, "the buffer holds %zu bytes, not %zu", q.dst_size, bytes);
  }
  uint8_t* data = cw_proxy_bytes_alloc(bytes ? bytes : 1);
  if (!data) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %zu bytes", bytes);
  q.dst = data;
  q.event = NULL;
  st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_ToHostBuffer, &q);
  if (st) {
    cw_proxy_bytes_free(data);
    return st;
  }
  *out_data = data;
  *out_event = q.event;
  return cw_ok_status();
}

cw_status_t cw_proxy_buffer_download(cw_proxy_session_t* s, PJRT_Buffer* buffer, size_t bytes,
                                     uint8_t** out) {
  PJRT_Event* ev;
  cw_status_t st = cw_proxy_buffer_download_start(s, buffer, bytes, out, &ev);
  if (st) return st;
  st = cw_proxy_pjrt_await(&s->proxy->pjrt, ev, "the download");
  if (st) {
    cw_proxy_bytes_free(*out);
    *out = NULL;
  }
  return st;
}

// Whether reading `b` in ranges is cheap: its device is a CPU, so the
// worker sends each range from the buffer's own memory. Elsewhere each
// range would copy the whole array off the device first.
static bool cw__ranges_cheap(cw_proxy_session_t* s, PJRT_Buffer* b) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Buffer_Device_Args d = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Device_Args, device),
                               .buffer = b};
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_Device, &d);
  PJRT_Device_GetDescription_Args g = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Device_GetDescription_Args, device_description),
      .device = d.device};
  if (!st) st = CW_PROXY_PJRT_CALL(p, PJRT_Device_GetDescription, &g);
  PJRT_DeviceDescription_Kind_Args k = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_DeviceDescription_Kind_Args, device_kind_size),
      .device_description = g.device_description};
  if (!st) st = CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_Kind, &k);
  bool cpu = !st && k.device_kind_size == 3 && !memcmp(k.device_kind, "cpu", 3);
  cw_status_free(st);
  return cpu;
}

static cw_status_t cw__copy_to_host(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                    CwIfrt__IfrtResponse* resp) {
  const CwIfrt__CopyToHostBufferRequest* r = req->copy_to_host_buffer_request;
  cw_proxy_array_t* a;
  CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->array_handle, &a), "CopyToHostBuffer");
  if (a->n != 1) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "CopyToHostBuffer: array %llu has %zu shards (copy a single-device "
                          "array)", (unsigned long long)r->array_handle, a->n);
  }
  cw_proxy_dtype_t dt;
  cw_proxy_host_layout_t l;
  CW_RETURN_IF_ERROR(cw_proxy_dtype(a->dtype, &dt), "CopyToHostBuffer");
  CW_RETURN_IF_ERROR(cw_proxy_host_layout(&dt, a->dims, a->rank, r->byte_strides, &l),
                     "CopyToHostBuffer");
  if (!l.dense) {
    return cw_make_status(CW_UNIMPLEMENTED, "CopyToHostBuffer: byte strides other than dense "
                          "major-to-minor are not served yet");
  }
  // Answered as soon as the read is under way: the client's lookup then
  // crosses the network while the bytes come from the worker, and waits
  // for them (or for the read's error) at the proxy.
  CW_RETURN_IF_ERROR(cw_proxy_respond(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_COPY_TO_HOST_BUFFER_RESPONSE, false, 0),
      "CopyToHostBuffer");
  CW_RETURN_IF_ERROR(cw_proxy_host_buffer_expect(s, r->host_buffer_handle, l.bytes),
                     "CopyToHostBuffer");
  // In ranges where that is cheap; packed on the device, sub-byte types have
  // other raw bytes than these.
  PJRT_Buffer_OnDeviceSizeInBytes_Args sz = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_OnDeviceSizeInBytes_Args,
                                         on_device_size_in_bytes),
      .buffer = a->shards[0]->buffer};
  cw_status_t st = CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Buffer_OnDeviceSizeInBytes, &sz);
  if (!st) {
    st = cw_proxy_host_buffer_read(s, a->shards[0]->buffer,
                                   sz.on_device_size_in_bytes == l.bytes &&
                                       cw__ranges_cheap(s, a->shards[0]->buffer));
  }
  if (st) {
    cw_proxy_host_buffer_settle(s);  // no read began: the buffer goes
    return cw_status_annotate(st, "CopyToHostBuffer");
  }
  return cw_ok_status();
}

static cw_status_t cw__value_ready(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                   CwIfrt__IfrtResponse* resp) {
  const CwIfrt__CheckValueReadyRequest* r = req->check_value_ready_request;
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  for (size_t i = 0; i < r->n_value_handles; i++) {
    cw_proxy_array_t* a;
    CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->value_handles[i], &a), "CheckValueReady");
    for (size_t j = 0; j < a->n; j++) {
      PJRT_Buffer_ReadyEvent_Args e = {
          .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_ReadyEvent_Args, event),
          .buffer = a->shards[j]->buffer};
      CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Buffer_ReadyEvent, &e), "CheckValueReady");
      CW_RETURN_IF_ERROR(cw_proxy_pjrt_await(p, e.event, "array"), "CheckValueReady %llu",
                         (unsigned long long)r->value_handles[i]);
    }
  }
  return cw_proxy_respond(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_CHECK_VALUE_READY_RESPONSE, false, 0);
}

static cw_status_t cw__delete(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                              CwIfrt__IfrtResponse* resp) {
  const CwIfrt__DeleteArrayRequest* r = req->delete_array_request;
  for (size_t i = 0; i < r->n_array_handle; i++) {
    cw_proxy_array_t* a = cw_proxy_table_get(&s->arrays, r->array_handle[i]);
    if (!a) return cw_make_status(CW_NOT_FOUND, "DeleteArray: no array with handle %llu",
                                  (unsigned long long)r->array_handle[i]);
    cw__array_drop(s, a);
  }
  uint64_t future;
  CW_RETURN_IF_ERROR(cw_proxy_future_put(s, cw_ok_status(), 0, &future), "DeleteArray");
  return cw__respond_handle(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_DELETE_ARRAY_RESPONSE, future);
}

static cw_status_t cw__is_deleted(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                  CwIfrt__IfrtResponse* resp) {
  uint64_t h = req->is_array_deleted_request->array_handle;
  cw_proxy_array_t* a = cw_proxy_table_get(&s->arrays, h);
  if (!a) return cw_make_status(CW_NOT_FOUND, "IsArrayDeleted: no array with handle %llu",
                                (unsigned long long)h);
  CwIfrt__IsArrayDeletedResponse* out = malloc(sizeof(*out));
  if (!out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_ifrt__is_array_deleted_response__init(out);
  out->has_deleted = true;
  out->deleted = cw_proxy_array_check_deleted(s, a);
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_IS_ARRAY_DELETED_RESPONSE;
  resp->is_array_deleted_response = out;
  return cw_ok_status();
}

static cw_status_t cw__destruct(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                CwIfrt__IfrtResponse* resp) {
  const CwIfrt__DestructArrayRequest* r = req->destruct_array_request;
  // Unknown handles are no error: a destructor may follow a failed creation.
  for (size_t i = 0; i < r->n_array_handle; i++) {
    cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, r->array_handle[i]));
  }
  return cw_proxy_respond(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_DESTRUCT_ARRAY_RESPONSE, false, 0);
}

static cw_status_t cw__check_future(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                    CwIfrt__IfrtResponse* resp) {
  CW_RETURN_IF_ERROR(cw_proxy_future_take(s, req->check_future_request->future_handle),
                     "CheckFuture");
  return cw_proxy_respond(resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_CHECK_FUTURE_RESPONSE, false, 0);
}

cw_status_t cw_proxy_array_handle(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                  CwIfrt__IfrtResponse* resp) {
  switch (req->request_case) {
    case CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ARRAY_FROM_HOST_BUFFER_REQUEST:
      return cw__make_from_host(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_COPY_ARRAYS_REQUEST:
      return cw__copy_arrays(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_REQUEST:
      return cw__make_from_shards(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_REQUEST:
      return cw__assemble(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_REMAP_ARRAYS_REQUEST:
      return cw__remap(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_REQUEST:
      return cw__disassemble(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_FULLY_REPLICATED_SHARD_REQUEST:
      return cw__replicated_shard(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_COPY_TO_HOST_BUFFER_REQUEST:
      return cw__copy_to_host(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_CHECK_VALUE_READY_REQUEST:
      return cw__value_ready(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_DELETE_ARRAY_REQUEST:
      return cw__delete(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_IS_ARRAY_DELETED_REQUEST:
      return cw__is_deleted(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_DESTRUCT_ARRAY_REQUEST:
      return cw__destruct(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_CHECK_FUTURE_REQUEST:
      return cw__check_future(s, req, resp);
    default:
      return cw_make_status(CW_INTERNAL, "not an array request");
  }
}

// Every response of this family is one flat message: its pointer is the
// oneof's, freed as such.
void cw_proxy_array_response_free(CwIfrt__IfrtResponse* resp) {
  ProtobufCMessage* m = (ProtobufCMessage*)resp->init_response;
  if (resp->response_case != CW_IFRT__IFRT_RESPONSE__RESPONSE__NOT_SET && m) {
    // A repeated field 1 (the handle lists) is ours to free.
    const ProtobufCFieldDescriptor* f = protobuf_c_message_descriptor_get_field(m->descriptor, 1);
    if (f && f->label == PROTOBUF_C_LABEL_REPEATED) free(*(void**)((char*)m + f->offset));
  }
  if (resp->response_case != CW_IFRT__IFRT_RESPONSE__RESPONSE__NOT_SET) {
    // All oneof members share storage: any member's pointer is the message.
    free(resp->init_response);
  }
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE__NOT_SET;
}
