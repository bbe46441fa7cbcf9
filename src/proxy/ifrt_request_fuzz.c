// libFuzzer: what a peer of the IFRT proxy front sends, through what the
// proxy decodes of it before any PJRT call: an IfrtRequest (protobuf-c over
// proto/ifrt_proxy.proto) and, for the array requests, the dtype, dense size
// and strides, and sharding (devices and memory kind) of each array or host
// buffer (cw_proxy_decode.c) and where its shards lie (cw_proxy_shards.c),
// also of the specs of MakeErrorArrays, ReshardArrays and BitcastArrays;
// GetVersion's request, the session metadata and HostBufferReadFromDisk's
// request.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cw_proxy_decode.h"
#include "cw_proxy_shards.h"

static void fz_covered(const cw_proxy_shards_t* sh, const int64_t* dims) {
  if (sh->n > 64) return;  // bounded work per input
  size_t total = 1;
  for (size_t j = 0; j < sh->rank; j++) {
    if (dims[j] > 4096 || (total *= (size_t)dims[j]) > 4096) return;
  }
  bool seen[4096] = {false};
  for (size_t k = 0; k < sh->n; k++) {
    const int64_t *o = sh->offsets + k * sh->rank, *d = sh->dims + k * sh->rank;
    for (size_t e = 0; e < total; e++) {
      size_t rest = e;
      bool in = true;
      for (size_t j = sh->rank; j-- > 0;) {
        int64_t x = (int64_t)(rest % (size_t)dims[j]);
        rest /= (size_t)dims[j];
        in = in && x >= o[j] && x < o[j] + d[j];
      }
      if (in) seen[e] = true;
    }
  }
  for (size_t e = 0; e < total; e++) {
    if (!seen[e]) abort();
  }
}

static void fz_array(const CwIfrt__DType* dtype, const CwIfrt__Shape* shape,
                     const CwIfrt__ByteStrides* strides, const CwIfrt__Sharding* sharding) {
  cw_proxy_dtype_t dt;
  cw_status_t dtst = dtype ? cw_proxy_dtype(dtype->kind, &dt) : cw_ok_status();
  bool known = dtype && !dtst;
  cw_status_free(dtst);
  if (known && shape && shape->n_dims <= CW_PROXY_DECODE_MAX_RANK) {
    cw_proxy_host_layout_t l;
    cw_status_t st = cw_proxy_host_layout(&dt, shape->dims, shape->n_dims, strides, &l);
    if (!st && l.bytes) {
      // A size the proxy accepts is the product it claims to be.
      size_t want = dt.width;
      for (size_t i = 0; i < shape->n_dims; i++) want *= (size_t)shape->dims[i];
      if (want != l.bytes) abort();
    }
    // Gathering a strided buffer of the size the layout asks for stays
    // inside it (ASan checks); small ones only, to keep the fuzzer fast.
    if (!st && !l.dense && l.source_bytes <= 65536 && l.bytes <= 65536) {
      uint8_t* src = calloc(1, l.source_bytes);
      uint8_t* dst = malloc(l.bytes ? l.bytes : 1);
      if (src && dst) cw_proxy_densify(src, shape->dims, shape->n_dims, strides->strides,
                                       dt.width, dst);
      free(src);
      free(dst);
    }
    cw_status_free(st);
  }
  int32_t* ids = NULL;
  size_t n = 0;
  bool replicated = false;
  cw_status_t st = cw_proxy_sharding_devices(sharding, &ids, &n, &replicated);
  if (!st && (!n || !ids)) abort();
  cw_status_free(st);
  free(ids);
  // Where its shards lie: each within the array, as many as its devices.
  if (shape && sharding && shape->n_dims <= CW_PROXY_DECODE_MAX_RANK) {
    bool dims_ok = true;
    for (size_t j = 0; j < shape->n_dims; j++) dims_ok = dims_ok && shape->dims[j] >= 0;
    cw_proxy_shards_t sh;
    st = dims_ok ? cw_proxy_sharding_shards(sharding, shape->dims, shape->n_dims, &sh)
                 : cw_make_status(CW_INVALID_ARGUMENT, "negative dimension");
    for (size_t k = 0; !st && k < sh.n; k++) {
      for (size_t j = 0; j < sh.rank; j++) {
        int64_t o = sh.offsets ? sh.offsets[k * sh.rank + j] : 0, d = sh.dims[k * sh.rank + j];
        if (o < 0 || d < 0 || o > shape->dims[j] || d > shape->dims[j] - o) abort();
      }
    }
    // Placed shards cover the whole array (a gather relies on it); small
    // arrays only, to keep the fuzzer fast.
    if (!st && sh.offsets) fz_covered(&sh, shape->dims);
    // Moved onto other devices (CopyArrays keeps it so), it places the same
    // shards on them.
    if (!st && sh.n <= 64) {
      int32_t to[64];
      for (size_t k = 0; k < sh.n; k++) to[k] = (int32_t)k;  // distinct
      size_t len = cw_ifrt__sharding__get_packed_size(sharding);
      uint8_t* packed = malloc(len + 1);
      uint8_t* moved = NULL;
      size_t mlen = 0;
      if (packed) {
        cw_ifrt__sharding__pack(sharding, packed);
        cw_status_t ms = cw_proxy_sharding_move(packed, len, sh.ids, to, sh.n, &moved, &mlen);
        CwIfrt__Sharding* back = ms ? NULL : cw_ifrt__sharding__unpack(NULL, mlen, moved);
        cw_proxy_shards_t again;
        if (!ms && (!back || cw_proxy_sharding_shards(back, shape->dims, shape->n_dims, &again))) {
          abort();
        }
        if (!ms) {
          size_t cells = sh.n * (sh.rank ? sh.rank : 1);
          if (again.n != sh.n || memcmp(again.ids, to, sh.n * sizeof(*to)) ||
              memcmp(again.dims, sh.dims, cells * sizeof(*sh.dims)) ||
              !again.offsets != !sh.offsets ||
              (sh.offsets && memcmp(again.offsets, sh.offsets, cells * sizeof(*sh.offsets)))) {
            abort();
          }
          cw_proxy_shards_free(&again);
          cw_ifrt__sharding__free_unpacked(back, NULL);
        }
        cw_status_free(ms);
      }
      free(moved);
      free(packed);
    }
    if (!st) cw_proxy_shards_free(&sh);
    cw_status_free(st);
  }
  char* kind = NULL;
  st = cw_proxy_sharding_memory_kind(sharding, &kind);
  if (!st && kind && !kind[0]) abort();  // "" is the default: NULL
  cw_status_free(st);
  free(kind);
}

static void fz_specs(CwIfrt__ArraySpec* const* specs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (specs[i]) fz_array(specs[i]->dtype, specs[i]->shape, NULL, specs[i]->sharding);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CwIfrt__IfrtRequest* r = cw_ifrt__ifrt_request__unpack(NULL, size, data);
  if (r) {
    if (r->request_case == CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ARRAY_FROM_HOST_BUFFER_REQUEST) {
      const CwIfrt__MakeArrayFromHostBufferRequest* m = r->make_array_from_host_buffer_request;
      fz_array(m->dtype, m->shape, m->byte_strides, m->sharding);
    } else if (r->request_case ==
               CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_REQUEST) {
      const CwIfrt__MakeArraysFromHostBufferShardsRequest* m =
          r->make_arrays_from_host_buffer_shards_request;
      for (size_t i = 0; i < m->n_specs; i++) {
        const CwIfrt__ArraySpec* as = m->specs[i]->array_spec;
        if (as) fz_array(as->dtype, as->shape, NULL, as->sharding);
        for (size_t k = 0; k < m->specs[i]->n_host_buffers; k++) {
          const CwIfrt__MakeArraysFromHostBufferShardsRequest__HostBuffer* hb =
              m->specs[i]->host_buffers[k];
          fz_array(hb->dtype, hb->shape, hb->byte_strides, NULL);
        }
      }
    } else if (r->request_case ==
               CW_IFRT__IFRT_REQUEST__REQUEST_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_REQUEST) {
      const CwIfrt__AssembleArrayFromSingleDeviceArraysRequest* m =
          r->assemble_array_from_single_device_arrays_request;
      fz_array(m->dtype, m->shape, NULL, m->sharding);
    } else if (r->request_case == CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ERROR_ARRAYS_REQUEST) {
      fz_specs(r->make_error_arrays_request->array_specs,
               r->make_error_arrays_request->n_array_specs);
    } else if (r->request_case == CW_IFRT__IFRT_REQUEST__REQUEST_RESHARD_ARRAYS_REQUEST) {
      fz_specs(r->reshard_arrays_request->array_specs, r->reshard_arrays_request->n_array_specs);
    } else if (r->request_case == CW_IFRT__IFRT_REQUEST__REQUEST_BITCAST_ARRAYS_REQUEST) {
      fz_specs(r->bitcast_arrays_request->array_specs, r->bitcast_arrays_request->n_array_specs);
    }
    cw_ifrt__ifrt_request__free_unpacked(r, NULL);
  }
  CwIfrt__GetVersionRequest* v = cw_ifrt__get_version_request__unpack(NULL, size, data);
  if (v) cw_ifrt__get_version_request__free_unpacked(v, NULL);
  CwIfrt__SessionMetadata* m = cw_ifrt__session_metadata__unpack(NULL, size, data);
  if (m) cw_ifrt__session_metadata__free_unpacked(m, NULL);
  CwIfrt__HostBufferReadFromDiskRequest* d =
      cw_ifrt__host_buffer_read_from_disk_request__unpack(NULL, size, data);
  if (d) cw_ifrt__host_buffer_read_from_disk_request__free_unpacked(d, NULL);
  return 0;
}
