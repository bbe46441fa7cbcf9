// Arrays made to a spec: MakeErrorArrays (arrays that hold an error), and
// ReshardArrays and BitcastArrays (an array under a new spec). The proxy
// reads of a sharding its devices, whether each holds the whole array, and
// its memory kind (cw_proxy_decode.h), so it moves whole arrays: onto other
// devices and memories, or reinterpreted as another dtype and shape. Arrays
// split over devices, on either side, are refused by name.
#include <stdlib.h>
#include <string.h>

#include "cw_proxy_internal.h"

#define CW__ALWAYS_COPY 1  // xla.ifrt.proto.ArrayCopySemantics

typedef struct cw__spec_s {
  int32_t kind;
  cw_proxy_dtype_t dt;
  const int64_t* dims;  // the request's
  size_t rank;
  int32_t* ids;  // the sharding's devices
  size_t n;
  bool whole;          // each device holds the whole array
  char* memory_kind;   // NULL: the default
} cw__spec_t;

static void cw__spec_free(cw__spec_t* sp) {
  free(sp->ids);
  free(sp->memory_kind);
  *sp = (cw__spec_t){0};
}

static int cw__by_id(const void* a, const void* b) {
  int32_t x = *(const int32_t*)a, y = *(const int32_t*)b;
  return (x > y) - (x < y);
}

// The devices of a spec are the session's, each named once.
static cw_status_t cw__devices_ok(cw_proxy_session_t* s, const int32_t* ids, size_t n) {
  if (n > CW_PROXY_MAX_DEVICES) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%zu devices (at most %d)", n,
                          CW_PROXY_MAX_DEVICES);
  }
  int32_t* sorted = malloc(n * sizeof(*sorted) + 1);
  if (!sorted) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(sorted, ids, n * sizeof(*sorted));
  qsort(sorted, n, sizeof(*sorted), cw__by_id);
  cw_status_t st = cw_ok_status();
  for (size_t i = 1; !st && i < n; i++) {
    if (sorted[i] == sorted[i - 1]) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "device %d is named twice", sorted[i]);
    }
  }
  free(sorted);
  for (size_t i = 0; !st && i < n; i++) {
    PJRT_Device* d;
    st = cw_proxy_device_lookup(s, ids[i], &d);
  }
  return st;
}

static cw_status_t cw__spec(cw_proxy_session_t* s, const CwIfrt__ArraySpec* as,
                            cw__spec_t* out) {
  *out = (cw__spec_t){0};
  if (!as || !as->dtype || !as->shape || !as->sharding) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a spec without dtype, shape or sharding");
  }
  if (as->shape->n_dims > CW_PROXY_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "rank %zu is over %d", as->shape->n_dims,
                          CW_PROXY_MAX_RANK);
  }
  for (size_t i = 0; i < as->shape->n_dims; i++) {
    if (as->shape->dims[i] < 0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "dimension %zu is %lld", i,
                            (long long)as->shape->dims[i]);
    }
  }
  out->kind = as->dtype->kind;
  out->dims = as->shape->dims;
  out->rank = as->shape->n_dims;
  cw_status_t st = cw_proxy_dtype(out->kind, &out->dt);
  if (!st) st = cw_proxy_sharding_devices(as->sharding, &out->ids, &out->n, &out->whole);
  if (!st) st = cw_proxy_sharding_memory_kind(as->sharding, &out->memory_kind);
  if (!st) st = cw__devices_ok(s, out->ids, out->n);
  if (st) cw__spec_free(out);
  return st;
}

// --- MakeErrorArrays ------------------------------------------------------------------------

static cw_status_t cw__make_error(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                  CwIfrt__IfrtResponse* resp) {
  const CwIfrt__MakeErrorArraysRequest* r = req->make_error_arrays_request;
  if (!r->error || !r->error->has_code || r->error->code == 0) {
    return cw_make_status(CW_INVALID_ARGUMENT, "MakeErrorArrays: the error is OK");
  }
  if (r->n_array_handles && r->n_array_handles != r->n_array_specs) {
    return cw_make_status(CW_INVALID_ARGUMENT, "MakeErrorArrays: %zu handles for %zu specs",
                          r->n_array_handles, r->n_array_specs);
  }
  CW_RETURN_IF_ERROR(cw_proxy_respond_handles(
      resp, CW_IFRT__IFRT_RESPONSE__RESPONSE_MAKE_ERROR_ARRAYS_RESPONSE, r->n_array_specs),
      "MakeErrorArrays");
  CwIfrt__MakeErrorArraysResponse* out = resp->make_error_arrays_response;
  // A peer's code: out of range, UNKNOWN.
  cw_status_code_t code = cw_status_code_from_u32((uint32_t)r->error->code);
  const char* message = r->error->message ? r->error->message : "";
  for (size_t i = 0; i < r->n_array_specs; i++) {
    cw__spec_t sp;
    cw_proxy_array_t* a = NULL;
    uint64_t h = cw_proxy_result_handle(s, r->n_array_handles > 0,
                                        r->n_array_handles ? r->array_handles[i] : 0);
    cw_status_t st = cw__spec(s, r->array_specs[i], &sp);
    if (!st) st = cw_proxy_array_new(s, h, sp.kind, sp.dims, sp.rank, 0, &a);
    cw__spec_free(&sp);
    if (!st) {
      a->error = cw_make_status(code, "%s", message);
      cw_proxy_array_keep_sharding(a, r->array_specs[i]->sharding);
    }
    if (st) {
      cw_proxy_arrays_drop(s, out->array_handles, out->n_array_handles);
      return cw_status_annotate(st, "MakeErrorArrays, spec %zu", i);
    }
    out->array_handles[out->n_array_handles++] = h;
  }
  return cw_ok_status();
}

// --- ReshardArrays, BitcastArrays ---------------------------------------------------------

// Whether every shard of `a` holds all of it (its dimensions are the array's).
static cw_status_t cw__whole(cw_proxy_session_t* s, const cw_proxy_array_t* a, bool* out) {
  *out = a->n > 0;
  for (size_t k = 0; *out && k < a->n; k++) {
    PJRT_Buffer_Dimensions_Args d = {
        .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Dimensions_Args, num_dims),
        .buffer = cw_proxy_array_shard_buffer(a, k)};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Buffer_Dimensions, &d), "shard");
    *out = d.num_dims == a->rank && (!a->rank || !memcmp(d.dims, a->dims, a->rank * sizeof(*d.dims)));
  }
  return cw_ok_status();
}

// Whether `buffer` is in the memory `kind` names (NULL: its device's
// default memory), as the plugin says: an array's kept sharding may not
// name its memory (CopyArrays, Execute outputs keep none).
static cw_status_t cw__in_memory(cw_proxy_session_t* s, PJRT_Buffer* buffer, const char* kind,
                                 bool* out) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Buffer_Memory_Args m = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Memory_Args, memory),
                               .buffer = buffer};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Buffer_Memory, &m), "shard memory");
  PJRT_Buffer_Device_Args d = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Device_Args, device),
                               .buffer = buffer};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Buffer_Device, &d), "shard device");
  PJRT_Memory* want = NULL;
  cw_status_t st = cw_proxy_device_memory(s, d.device, kind, &want);
  if (st) return st;  // no such memory: worded as a copy into it would be
  if (!want) {
    PJRT_Device_DefaultMemory_Args dm = {
        .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Device_DefaultMemory_Args, memory),
        .device = d.device};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_DefaultMemory, &dm), "default memory");
    want = dm.memory;
  }
  *out = want == m.memory;
  return cw_ok_status();
}

// Bytes of a dense array of `dims`; sub-byte types are refused (their
// packing is the device's).
static cw_status_t cw__bytes(int32_t kind, const int64_t* dims, size_t rank, size_t* out) {
  cw_proxy_dtype_t dt;
  CW_RETURN_IF_ERROR(cw_proxy_dtype(kind, &dt), "dtype");
  if (kind == 21 || kind == 22 || kind == 26 || kind == 27 || kind == 30 || kind == 32 ||
      kind == 33) {
    return cw_make_status(CW_UNIMPLEMENTED, "sub-byte dtype %d", kind);
  }
  cw_proxy_host_layout_t l;
  CW_RETURN_IF_ERROR(cw_proxy_host_layout(&dt, dims, rank, NULL, &l), "shape");
  *out = l.bytes;
  return cw_ok_status();
}

// Array `a` under spec `sp` as array `c` (made with room for sp->n shards).
static cw_status_t cw__fill(cw_proxy_session_t* s, const cw_proxy_array_t* a,
                            const cw__spec_t* sp, bool bitcast, int32_t semantics,
                            cw_proxy_array_t* c) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  uint8_t* bytes = NULL;  // bitcast: the array's bytes, read once
  size_t len = 0;
  cw_status_t st = cw_ok_status();
  if (bitcast) {
    st = cw__bytes(a->dtype, a->dims, a->rank, &len);
    size_t want = 0;
    if (!st) st = cw__bytes(sp->kind, sp->dims, sp->rank, &want);
    if (!st && want != len) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "the array has %zu bytes, the spec %zu", len,
                          want);
    }
    if (!st && sp->memory_kind && strcmp(sp->memory_kind, "device")) {
      st = cw_make_status(CW_UNIMPLEMENTED, "bitcasting into memory kind %s", sp->memory_kind);
    }
    if (!st) st = cw_proxy_buffer_download(s, cw_proxy_array_shard_buffer(a, 0), len, &bytes);
  }
  for (size_t k = 0; !st && k < sp->n; k++) {
    int32_t dev = sp->ids[k];
    if (bitcast) {
      PJRT_Buffer* b;
      st = cw_proxy_buffer_upload(s, &sp->dt, sp->dims, sp->rank, dev, bytes, &b);
      if (!st && (st = cw_proxy_array_add_shard(c, b, dev))) cw_proxy_pjrt_buffer_destroy(p, b);
      continue;
    }
    // A shard already there, in the memory asked for, is shared unless a
    // copy is asked for.
    size_t j = 0;
    while (j < a->n && cw_proxy_array_shard_device(a, j) != dev) j++;
    bool there = false;
    if (j < a->n && semantics != CW__ALWAYS_COPY) {
      st = cw__in_memory(s, cw_proxy_array_shard_buffer(a, j), sp->memory_kind, &there);
    }
    if (st) break;
    if (there) {
      cw_proxy_array_share_shard(c, a, j);
      continue;
    }
    PJRT_Buffer* b;
    st = cw_proxy_buffer_copy(s, cw_proxy_array_shard_buffer(a, j < a->n ? j : 0), dev,
                              sp->memory_kind, &b);
    if (!st && (st = cw_proxy_array_add_shard(c, b, dev))) cw_proxy_pjrt_buffer_destroy(p, b);
  }
  cw_proxy_bytes_free(bytes);
  return st;
}

static cw_status_t cw__one(cw_proxy_session_t* s, const CwIfrt__ArraysToSpecsRequest* r, size_t i,
                           bool bitcast, uint64_t h) {
  cw_proxy_array_t* a;
  CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->array_handles[i], &a), "array %zu", i);
  cw__spec_t sp;
  CW_RETURN_IF_ERROR(cw__spec(s, r->array_specs[i], &sp), "spec %zu", i);
  bool whole = false;
  cw_status_t st = cw__whole(s, a, &whole);
  if (!st && (!whole || !sp.whole)) {
    st = cw_make_status(CW_UNIMPLEMENTED, "array %llu %s: arrays split over devices are not "
                        "served yet (each device must hold the whole array)",
                        (unsigned long long)r->array_handles[i],
                        whole ? "would be split by its spec" : "is split over its devices");
  }
  if (!st && !bitcast &&
      (sp.kind != a->dtype || sp.rank != a->rank ||
       (a->rank && memcmp(sp.dims, a->dims, a->rank * sizeof(*a->dims))))) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "array %llu: the spec's dtype or shape is not the "
                        "array's (BitcastArrays changes them)",
                        (unsigned long long)r->array_handles[i]);
  }
  cw_proxy_array_t* c = NULL;
  if (!st) st = cw_proxy_array_new(s, h, sp.kind, sp.dims, sp.rank, sp.n, &c);
  if (!st) {
    st = cw__fill(s, a, &sp, bitcast, r->copy_semantics, c);
    if (st) cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, h));
  }
  if (!st) cw_proxy_array_keep_sharding(c, r->array_specs[i]->sharding);
  cw__spec_free(&sp);
  return st;
}

static cw_status_t cw__to_specs(cw_proxy_session_t* s, const CwIfrt__ArraysToSpecsRequest* r,
                                bool bitcast, CwIfrt__IfrtResponse* resp) {
  const char* what = bitcast ? "BitcastArrays" : "ReshardArrays";
  if (r->n_array_specs != r->n_array_handles ||
      (r->n_result_handles && r->n_result_handles != r->n_array_handles)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s: %zu arrays, %zu specs, %zu result handles",
                          what, r->n_array_handles, r->n_array_specs, r->n_result_handles);
  }
  CW_RETURN_IF_ERROR(
      cw_proxy_respond_handles(resp, bitcast ? CW_IFRT__IFRT_RESPONSE__RESPONSE_BITCAST_ARRAYS_RESPONSE
                                             : CW_IFRT__IFRT_RESPONSE__RESPONSE_RESHARD_ARRAYS_RESPONSE,
                               r->n_array_handles),
      "%s", what);
  // Both responses are {repeated fixed64 array_handles = 1}.
  CwIfrt__ReshardArraysResponse* out = resp->reshard_arrays_response;
  for (size_t i = 0; i < r->n_array_handles; i++) {
    uint64_t h = cw_proxy_result_handle(s, r->n_result_handles > 0,
                                        r->n_result_handles ? r->result_handles[i] : 0);
    cw_status_t st = cw__one(s, r, i, bitcast, h);
    if (st) {
      cw_proxy_arrays_drop(s, out->array_handles, out->n_array_handles);
      return cw_status_annotate(st, "%s", what);
    }
    out->array_handles[out->n_array_handles++] = h;
  }
  cw_proxy_arrays_donate_if(s, r->copy_semantics, r->array_handles, r->n_array_handles);
  return cw_ok_status();
}

cw_status_t cw_proxy_respec_handle(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                   CwIfrt__IfrtResponse* resp) {
  switch (req->request_case) {
    case CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ERROR_ARRAYS_REQUEST:
      return cw__make_error(s, req, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_RESHARD_ARRAYS_REQUEST:
      return cw__to_specs(s, req->reshard_arrays_request, false, resp);
    case CW_IFRT__IFRT_REQUEST__REQUEST_BITCAST_ARRAYS_REQUEST:
      return cw__to_specs(s, req->bitcast_arrays_request, true, resp);
    default:
      return cw_make_status(CW_INTERNAL, "not a request of arrays to specs");
  }
}
