// Arrays made to a spec: MakeErrorArrays (arrays that hold an error), and
// ReshardArrays and BitcastArrays (an array under a new spec). Where each
// shard of an array or a spec lies comes from its sharding
// (cw_proxy_shards.h); a reshard shares or copies the shards that are
// already where the spec wants them and gathers the others through the
// proxy's memory; a bitcast goes shard by shard.
#include <stdlib.h>
#include <string.h>

#include "cw_proxy_internal.h"
#include "cw_proxy_shards.h"

_Static_assert(CW_PROXY_MAX_RANK == CW_PROXY_DECODE_MAX_RANK &&
                   CW_PROXY_MAX_DEVICES == CW_PROXY_SHARDS_MAX_DEVICES,
               "the shard math and the arrays share their bounds");

#define CW__ALWAYS_COPY 1  // xla.ifrt.proto.ArrayCopySemantics

typedef struct cw__spec_s {
  int32_t kind;
  cw_proxy_dtype_t dt;
  const int64_t* dims;  // the request's
  size_t rank;
  int32_t* ids;  // the sharding's devices
  size_t n;
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
  bool whole;
  if (!st) st = cw_proxy_sharding_devices(as->sharding, &out->ids, &out->n, &whole);
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

// Whether `buffer` is in the memory `kind` names (NULL: its device's
// default memory), as the plugin says: an array's kept sharding may not
// name its memory (Execute outputs on one device keep none; a CopyArrays
// result's names its source's).
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

// Whether `buffer`'s dimensions are `dims`.
static cw_status_t cw__dims_are(const cw_proxy_pjrt_t* p, PJRT_Buffer* buffer, const int64_t* dims,
                                size_t rank, bool* out) {
  PJRT_Buffer_Dimensions_Args d = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Dimensions_Args, num_dims), .buffer = buffer};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Buffer_Dimensions, &d), "shard");
  *out = d.num_dims == rank && (!rank || !memcmp(d.dims, dims, rank * sizeof(*dims)));
  return cw_ok_status();
}

// Where the shards of `a` lie, one entry per shard in `bufs` (n of them,
// the caller's to free with the layout): whole arrays need no sharding;
// split ones are placed by the sharding they were made with (its devices
// matched to theirs), and each buffer must have its shard's dimensions.
static cw_status_t cw__source(cw_proxy_session_t* s, uint64_t handle, const cw_proxy_array_t* a,
                              cw_proxy_shards_t* src, PJRT_Buffer*** out_bufs) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  *out_bufs = NULL;
  size_t n = a->n;
  PJRT_Buffer** bufs = calloc(n ? n : 1, sizeof(*bufs));
  int32_t* ids = malloc((n ? n : 1) * sizeof(*ids));
  cw_status_t st = bufs && ids ? cw_ok_status()
                               : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  bool whole = n > 0;
  for (size_t k = 0; !st && k < n; k++) {
    bufs[k] = cw_proxy_array_shard_buffer(a, k);
    ids[k] = cw_proxy_array_shard_device(a, k);
    bool is = false;
    st = cw__dims_are(p, bufs[k], a->dims, a->rank, &is);
    whole = whole && is;
  }
  if (!st && whole) st = cw_proxy_shards_replicated(ids, n, a->dims, a->rank, src);
  CwIfrt__Sharding* sh = NULL;
  if (!st && !whole) {
    sh = a->sharding ? cw_ifrt__sharding__unpack(NULL, a->sharding_len, a->sharding) : NULL;
    st = sh ? cw_proxy_sharding_shards(sh, a->dims, a->rank, src)
            : cw_make_status(CW_UNIMPLEMENTED, "it was made without a sharding that says where "
                             "its shards lie");
    if (!st && !src->offsets) {
      st = cw_make_status(CW_UNIMPLEMENTED, "its sharding does not say where its shards lie");
    } else if (!st && src->n != n) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "%zu shards for a sharding of %zu devices", n,
                          src->n);
    }
  }
  for (size_t k = 0; !st && !whole && k < src->n; k++) {
    bufs[k] = cw_proxy_array_buffer_on(a, src->ids[k]);
    bool is = false;
    st = bufs[k] ? cw__dims_are(p, bufs[k], src->dims + k * a->rank, a->rank, &is)
                 : cw_make_status(CW_INVALID_ARGUMENT, "no shard on device %d of its sharding",
                                  src->ids[k]);
    if (!st && !is) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "the shard on device %d is not of the shape its "
                          "sharding gives", src->ids[k]);
    }
  }
  if (st) st = cw_status_annotate(st, "array %llu", (unsigned long long)handle);
  if (sh) cw_ifrt__sharding__free_unpacked(sh, NULL);
  free(ids);
  if (st) {
    cw_proxy_shards_free(src);
    free(bufs);
    return st;
  }
  *out_bufs = bufs;
  return cw_ok_status();
}

// The source shards' bytes, each read once (on first use).
typedef struct cw__reads_s {
  cw_proxy_session_t* s;
  const cw_proxy_array_t* a;
  const cw_proxy_shards_t* src;
  PJRT_Buffer** bufs;
  uint8_t** bytes;
  bool* replica;  // of an earlier source shard (the same place): never read
} cw__reads_t;

static cw_status_t cw__read(cw__reads_t* r, size_t j, const uint8_t** out) {
  if (!r->bytes[j]) {
    size_t len;
    CW_RETURN_IF_ERROR(cw__bytes(r->a->dtype, r->src->dims + j * r->src->rank, r->src->rank,
                                 &len), "shard");
    CW_RETURN_IF_ERROR(cw_proxy_buffer_download(r->s, r->bufs[j], len, &r->bytes[j]),
                       "reading the shard on device %d", r->src->ids[j]);
  }
  *out = r->bytes[j];
  return cw_ok_status();
}

// Copies the part of source shard j that lies in target shard k of `tgt`
// into `dst` (target k's dense bytes), `width` bytes an element.
static cw_status_t cw__overlap(cw__reads_t* r, size_t j, const cw_proxy_shards_t* tgt, size_t k,
                               size_t width, uint8_t* dst) {
  size_t rank = tgt->rank;
  const int64_t *so = r->src->offsets + j * rank, *sd = r->src->dims + j * rank;
  const int64_t *to = tgt->offsets + k * rank, *td = tgt->dims + k * rank;
  int64_t lo[CW_PROXY_MAX_RANK], ext[CW_PROXY_MAX_RANK];
  for (size_t d = 0; d < rank; d++) {
    lo[d] = so[d] > to[d] ? so[d] : to[d];
    int64_t hi = so[d] + sd[d] < to[d] + td[d] ? so[d] + sd[d] : to[d] + td[d];
    if (hi <= lo[d]) return cw_ok_status();  // none
    ext[d] = hi - lo[d];
  }
  const uint8_t* src;
  CW_RETURN_IF_ERROR(cw__read(r, j, &src), "gathering");
  if (!rank) {
    memcpy(dst, src, width);
    return cw_ok_status();
  }
  // Row by row: the last dimension's run is contiguous in both.
  size_t run = width * (size_t)ext[rank - 1];
  int64_t idx[CW_PROXY_MAX_RANK] = {0};  // the last stays 0
  for (;;) {
    size_t si = 0, ti = 0;
    for (size_t d = 0; d < rank; d++) {
      si = si * (size_t)sd[d] + (size_t)(lo[d] + idx[d] - so[d]);
      ti = ti * (size_t)td[d] + (size_t)(lo[d] + idx[d] - to[d]);
    }
    memcpy(dst + ti * width, src + si * width, run);
    size_t d = rank - 1;
    while (d > 0 && ++idx[d - 1] == ext[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  return cw_ok_status();
}

static bool cw__same_domain(const cw_proxy_shards_t* a, size_t j, const cw_proxy_shards_t* b,
                            size_t k) {
  size_t r = a->rank;
  return a->offsets && b->offsets && (!r || (!memcmp(a->offsets + j * r, b->offsets + k * r,
                                                     r * sizeof(int64_t)) &&
                                             !memcmp(a->dims + j * r, b->dims + k * r,
                                                     r * sizeof(int64_t))));
}

// Target shard k made from the source shards that overlap it, through the
// proxy's memory, into the memory the spec names.
static cw_status_t cw__gather(cw__reads_t* r, const cw__spec_t* sp, const cw_proxy_shards_t* tgt,
                              size_t k, PJRT_Buffer** out) {
  const int64_t* dims = tgt->dims + k * tgt->rank;
  size_t len;
  CW_RETURN_IF_ERROR(cw__bytes(sp->kind, dims, tgt->rank, &len), "shard");
  uint8_t* bytes = cw_proxy_bytes_alloc(len ? len : 1);
  if (!bytes) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %zu bytes", len);
  cw_status_t st = cw_ok_status();
  for (size_t j = 0; !st && len && j < r->src->n; j++) {
    if (!r->replica[j]) st = cw__overlap(r, j, tgt, k, sp->dt.width, bytes);
  }
  PJRT_Buffer* b = NULL;
  if (!st) st = cw_proxy_buffer_upload(r->s, &sp->dt, dims, tgt->rank, tgt->ids[k], bytes, &b);
  cw_proxy_bytes_free(bytes);
  bool there = true;
  if (!st && sp->memory_kind) st = cw__in_memory(r->s, b, sp->memory_kind, &there);
  if (!st && !there) {
    PJRT_Buffer* moved;
    st = cw_proxy_buffer_copy(r->s, b, tgt->ids[k], sp->memory_kind, &moved);
    cw_proxy_pjrt_buffer_destroy(&r->s->proxy->pjrt, b);
    b = st ? NULL : moved;
  }
  if (st && b) cw_proxy_pjrt_buffer_destroy(&r->s->proxy->pjrt, b);
  *out = st ? NULL : b;
  return st;
}

// Reshard: target shard k is a source shard of the same domain (shared when
// it is on k's device in the memory asked for, else copied worker to
// worker), or is gathered from the shards that overlap it.
static cw_status_t cw__reshard_one(cw__reads_t* r, const cw__spec_t* sp,
                                   const cw_proxy_shards_t* tgt, size_t k, int32_t semantics,
                                   cw_proxy_array_t* c) {
  const cw_proxy_shards_t* src = r->src;
  int32_t dev = tgt->ids[k];
  size_t j = src->n;
  for (size_t i = 0; i < src->n; i++) {
    if (cw__same_domain(src, i, tgt, k) && (j == src->n || src->ids[i] == dev)) j = i;
  }
  PJRT_Buffer* b = NULL;
  cw_status_t st = cw_ok_status();
  if (j == src->n) {
    st = cw__gather(r, sp, tgt, k, &b);
  } else {
    bool there = false;
    if (src->ids[j] == dev && semantics != CW__ALWAYS_COPY) {
      st = cw__in_memory(r->s, r->bufs[j], sp->memory_kind, &there);
    }
    if (!st && there) {
      for (size_t i = 0; i < r->a->n; i++) {
        if (cw_proxy_array_shard_buffer(r->a, i) == r->bufs[j]) {
          cw_proxy_array_share_shard(c, r->a, i);
          return cw_ok_status();
        }
      }
    }
    if (!st) st = cw_proxy_buffer_copy(r->s, r->bufs[j], dev, sp->memory_kind, &b);
  }
  return st ? st : cw_proxy_array_take_shard(r->s, c, b, dev);
}

// Bitcast, shard by shard (as IFRT defines it): target shard k is the
// source's shard on k's device (when every shard is whole, the first, read
// once), its bytes read as the spec's dtype and shard dimensions.
static cw_status_t cw__bitcast_one(cw__reads_t* r, const cw__spec_t* sp,
                                   const cw_proxy_shards_t* tgt, size_t k, bool whole,
                                   cw_proxy_array_t* c) {
  const cw_proxy_shards_t* src = r->src;
  int32_t dev = tgt->ids[k];
  size_t j = whole ? 0 : src->n;  // whole: shard 0's bytes serve every device
  for (size_t i = 0; !whole && i < src->n; i++) {
    if (src->ids[i] == dev) j = i;
  }
  if (j == src->n) {
    return cw_make_status(CW_INVALID_ARGUMENT, "the array has no shard on device %d", dev);
  }
  const int64_t* dims = tgt->dims + k * tgt->rank;
  size_t have, want;
  CW_RETURN_IF_ERROR(cw__bytes(r->a->dtype, src->dims + j * src->rank, src->rank, &have), "shard");
  CW_RETURN_IF_ERROR(cw__bytes(sp->kind, dims, tgt->rank, &want), "spec");
  if (have != want) {
    return cw_make_status(CW_INVALID_ARGUMENT, "the array's shard on device %d has %zu bytes, "
                          "the spec's %zu", src->ids[j], have, want);
  }
  const uint8_t* bytes;
  CW_RETURN_IF_ERROR(cw__read(r, j, &bytes), "bitcasting");
  PJRT_Buffer* b;
  CW_RETURN_IF_ERROR(cw_proxy_buffer_upload(r->s, &sp->dt, dims, tgt->rank, dev, bytes, &b),
                     "bitcasting");
  if (!whole) {  // this shard's bytes serve this target only
    cw_proxy_bytes_free(r->bytes[j]);
    r->bytes[j] = NULL;
  }
  return cw_proxy_array_take_shard(r->s, c, b, dev);
}

static cw_status_t cw__one(cw_proxy_session_t* s, const CwIfrt__ArraysToSpecsRequest* r, size_t i,
                           bool bitcast, uint64_t h) {
  cw_proxy_array_t* a;
  CW_RETURN_IF_ERROR(cw_proxy_array_get(s, r->array_handles[i], &a), "array %zu", i);
  cw__spec_t sp;
  CW_RETURN_IF_ERROR(cw__spec(s, r->array_specs[i], &sp), "spec %zu", i);
  cw_status_t st = cw_ok_status();
  if (!bitcast &&
      (sp.kind != a->dtype || sp.rank != a->rank ||
       (a->rank && memcmp(sp.dims, a->dims, a->rank * sizeof(*a->dims))))) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "array %llu: the spec's dtype or shape is not the "
                        "array's (BitcastArrays changes them)",
                        (unsigned long long)r->array_handles[i]);
  }
  if (!st && bitcast && sp.memory_kind && strcmp(sp.memory_kind, "device")) {
    st = cw_make_status(CW_UNIMPLEMENTED, "bitcasting into memory kind %s", sp.memory_kind);
  }
  cw_proxy_shards_t tgt = {0}, src = {0};
  PJRT_Buffer** bufs = NULL;
  if (!st && (st = cw_proxy_sharding_shards(r->array_specs[i]->sharding, sp.dims, sp.rank,
                                            &tgt))) {
    st = cw_status_annotate(st, "spec %zu", i);
  }
  if (!st && !bitcast && !tgt.offsets) {
    st = cw_make_status(CW_UNIMPLEMENTED, "spec %zu: its sharding does not say where its shards "
                        "lie", i);
  }
  if (!st) st = cw__source(s, r->array_handles[i], a, &src, &bufs);
  cw_proxy_array_t* c = NULL;
  if (!st) st = cw_proxy_array_new(s, h, sp.kind, sp.dims, sp.rank, sp.n, &c);
  uint8_t** bytes = st ? NULL : calloc(src.n ? src.n : 1, sizeof(*bytes));
  bool* replica = st ? NULL : calloc(src.n ? src.n : 1, sizeof(*replica));
  if (!st && (!bytes || !replica)) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t j = 0; !st && j < src.n; j++) {
    for (size_t k = 0; !replica[j] && k < j; k++) replica[j] = cw__same_domain(&src, k, &src, j);
  }
  cw__reads_t reads = {.s = s, .a = a, .src = &src, .bufs = bufs, .bytes = bytes,
                       .replica = replica};
  bool whole = true;
  for (size_t k = 0; !st && k < src.n; k++) whole = whole && cw_proxy_shards_whole(&src, k, a->dims);
  for (size_t k = 0; !st && k < tgt.n; k++) {
    st = bitcast ? cw__bitcast_one(&reads, &sp, &tgt, k, whole, c)
                 : cw__reshard_one(&reads, &sp, &tgt, k, r->copy_semantics, c);
  }
  if (st && c) cw_proxy_array_free(s, cw_proxy_table_remove(&s->arrays, h));
  if (!st) cw_proxy_array_keep_sharding(c, r->array_specs[i]->sharding);
  for (size_t k = 0; bytes && k < src.n; k++) cw_proxy_bytes_free(bytes[k]);
  free(bytes);
  free(replica);
  free(bufs);
  cw_proxy_shards_free(&src);
  cw_proxy_shards_free(&tgt);
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
