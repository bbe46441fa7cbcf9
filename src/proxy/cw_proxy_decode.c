// What the proxy reads out of IFRT values before it calls PJRT: dtypes,
// dense sizes and strides, the devices of a sharding. No PJRT here, so the
// fuzz target (ifrt_request_fuzz.c) runs it on a peer's bytes.
#include "cw_proxy_decode.h"

#include <stdlib.h>
#include <string.h>


// XLA's PrimitiveType (IFRT's DType kinds) -> PJRT's buffer type and the
// bytes of one element in a host buffer (sub-byte types take a byte each).

static const cw_proxy_dtype_t cw__dtypes[] = {
    [1] = {PJRT_Buffer_Type_PRED, 1},          [2] = {PJRT_Buffer_Type_S8, 1},
    [3] = {PJRT_Buffer_Type_S16, 2},           [4] = {PJRT_Buffer_Type_S32, 4},
    [5] = {PJRT_Buffer_Type_S64, 8},           [6] = {PJRT_Buffer_Type_U8, 1},
    [7] = {PJRT_Buffer_Type_U16, 2},           [8] = {PJRT_Buffer_Type_U32, 4},
    [9] = {PJRT_Buffer_Type_U64, 8},           [10] = {PJRT_Buffer_Type_F16, 2},
    [11] = {PJRT_Buffer_Type_F32, 4},          [12] = {PJRT_Buffer_Type_F64, 8},
    [15] = {PJRT_Buffer_Type_C64, 8},          [16] = {PJRT_Buffer_Type_BF16, 2},
    [17] = {PJRT_Buffer_Type_TOKEN, 1},  // no host bytes: a token is never transferred
    [18] = {PJRT_Buffer_Type_C128, 16},        [19] = {PJRT_Buffer_Type_F8E5M2, 1},
    [20] = {PJRT_Buffer_Type_F8E4M3FN, 1},     [21] = {PJRT_Buffer_Type_S4, 1},
    [22] = {PJRT_Buffer_Type_U4, 1},           [23] = {PJRT_Buffer_Type_F8E4M3B11FNUZ, 1},
    [24] = {PJRT_Buffer_Type_F8E5M2FNUZ, 1},   [25] = {PJRT_Buffer_Type_F8E4M3FNUZ, 1},
    [26] = {PJRT_Buffer_Type_S2, 1},           [27] = {PJRT_Buffer_Type_U2, 1},
    [28] = {PJRT_Buffer_Type_F8E4M3, 1},       [29] = {PJRT_Buffer_Type_F8E3M4, 1},
    [30] = {PJRT_Buffer_Type_F4E2M1FN, 1},     [31] = {PJRT_Buffer_Type_F8E8M0FNU, 1},
    [32] = {PJRT_Buffer_Type_S1, 1},           [33] = {PJRT_Buffer_Type_U1, 1},
    [34] = {PJRT_Buffer_Type_F6E2M3FN, 1},     [35] = {PJRT_Buffer_Type_F6E3M2FN, 1},
};

cw_status_t cw_proxy_dtype(int32_t kind, cw_proxy_dtype_t* out) {
  if (kind <= 0 || (size_t)kind >= sizeof(cw__dtypes) / sizeof(cw__dtypes[0]) ||
      !cw__dtypes[kind].width) {
    return cw_make_status(CW_UNIMPLEMENTED, "dtype kind %d is not served", kind);
  }
  *out = cw__dtypes[kind];
  return cw_ok_status();
}

cw_status_t cw_proxy_dtype_kind(PJRT_Buffer_Type type, int32_t* out_kind) {
  for (size_t k = 0; k < sizeof(cw__dtypes) / sizeof(cw__dtypes[0]); k++) {
    if (cw__dtypes[k].width && cw__dtypes[k].pjrt == type) {
      *out_kind = (int32_t)k;
      return cw_ok_status();
    }
  }
  return cw_make_status(CW_UNIMPLEMENTED, "PJRT buffer type %d has no IFRT dtype here", (int)type);
}

// The devices of a sharding, and whether each holds the whole array.
// Unknown kinds: UNIMPLEMENTED, named. *out_ids is the caller's to free.
cw_status_t cw_proxy_sharding_devices(const CwIfrt__Sharding* sh, int32_t** out_ids,
                                        size_t* out_n, bool* out_replicated) {
  *out_ids = NULL;
  *out_n = 0;
  const CwIfrt__Serialized* ser = sh ? sh->serialized_sharding : NULL;
  if (!ser || !ser->type_name) return cw_make_status(CW_INVALID_ARGUMENT, "no sharding given");
  size_t len = ser->has_data ? ser->data.len : 0;
  const uint8_t* data = ser->data.data;
  if (!strcmp(ser->type_name, CW_PROXY_SINGLE_DEVICE)) {
    CwIfrt__SingleDeviceSharding* sd = cw_ifrt__single_device_sharding__unpack(NULL, len, data);
    if (!sd) return cw_make_status(CW_INVALID_ARGUMENT, "%s does not decode", ser->type_name);
    *out_ids = malloc(sizeof(int32_t));
    if (*out_ids) (*out_ids)[0] = sd->device_id;
    cw_ifrt__single_device_sharding__free_unpacked(sd, NULL);
    if (!*out_ids) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    *out_n = 1;
    *out_replicated = true;
    return cw_ok_status();
  }
  bool hlo = !strcmp(ser->type_name, CW_PROXY_HLO_SHARDING);
  bool even = !strcmp(ser->type_name, CW_PROXY_CONCRETE_EVEN);
  if (!hlo && !even && strcmp(ser->type_name, CW_PROXY_OPAQUE) &&
      strcmp(ser->type_name, CW_PROXY_CONCRETE)) {
    return cw_make_status(CW_UNIMPLEMENTED, "sharding %s is not served yet", ser->type_name);
  }
  CwIfrt__ShardingDevices* sd = cw_ifrt__sharding_devices__unpack(NULL, len, data);
  if (!sd) return cw_make_status(CW_INVALID_ARGUMENT, "%s does not decode", ser->type_name);
  size_t n = sd->devices ? sd->devices->n_device_ids : 0;
  int32_t* ids = n ? malloc(n * sizeof(*ids)) : NULL;
  if (ids) memcpy(ids, sd->devices->device_ids, n * sizeof(*ids));
  cw_ifrt__sharding_devices__free_unpacked(sd, NULL);
  bool replicated = n == 1;
  if (hlo) {
    CwIfrt__HloShardingType* h = cw_ifrt__hlo_sharding_type__unpack(NULL, len, data);
    replicated = replicated || (h && h->xla_op_sharding && h->xla_op_sharding->type <= 1);
    if (h) cw_ifrt__hlo_sharding_type__free_unpacked(h, NULL);
  } else if (even) {
    CwIfrt__ConcreteEvenReplicated* e = cw_ifrt__concrete_even_replicated__unpack(NULL, len, data);
    replicated = replicated || (e && e->is_fully_replicated);
    if (e) cw_ifrt__concrete_even_replicated__free_unpacked(e, NULL);
  }
  if (!n) return cw_make_status(CW_INVALID_ARGUMENT, "%s names no devices", ser->type_name);
  if (!ids) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  *out_ids = ids;
  *out_n = n;
  *out_replicated = replicated;
  return cw_ok_status();
}

cw_status_t cw_proxy_sharding_memory_kind(const CwIfrt__Sharding* sh, char** out_kind) {
  *out_kind = NULL;
  const CwIfrt__Serialized* ser = sh ? sh->serialized_sharding : NULL;
  if (!ser || !ser->type_name) return cw_make_status(CW_INVALID_ARGUMENT, "no sharding given");
  size_t len = ser->has_data ? ser->data.len : 0;
  const uint8_t* data = ser->data.data;
  const char* t = ser->type_name;
  const char* kind = NULL;
  ProtobufCMessage* m = NULL;
  if (!strcmp(t, CW_PROXY_SINGLE_DEVICE) || !strcmp(t, CW_PROXY_OPAQUE)) {
    CwIfrt__ShardingMemoryKind2* k = cw_ifrt__sharding_memory_kind2__unpack(NULL, len, data);
    m = k ? &k->base : NULL;
    kind = k ? k->memory_kind : NULL;
  } else if (!strcmp(t, CW_PROXY_HLO_SHARDING)) {
    CwIfrt__ShardingMemoryKind3* k = cw_ifrt__sharding_memory_kind3__unpack(NULL, len, data);
    m = k ? &k->base : NULL;
    kind = k ? k->memory_kind : NULL;
  } else if (!strcmp(t, CW_PROXY_CONCRETE) ||
             !strcmp(t, CW_PROXY_CONCRETE_EVEN)) {
    CwIfrt__ShardingMemoryKind4* k = cw_ifrt__sharding_memory_kind4__unpack(NULL, len, data);
    m = k ? &k->base : NULL;
    kind = k ? k->memory_kind : NULL;
  } else {
    return cw_make_status(CW_UNIMPLEMENTED, "sharding %s is not served yet", t);
  }
  if (!m) return cw_make_status(CW_INVALID_ARGUMENT, "%s does not decode", t);
  if (kind && *kind) *out_kind = strdup(kind);
  bool oom = kind && *kind && !*out_kind;
  protobuf_c_message_free_unpacked(m, NULL);
  return oom ? cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory") : cw_ok_status();
}

// Bytes of a dense array; refuses byte strides other than dense
// major-to-minor.
cw_status_t cw_proxy_host_layout(const cw_proxy_dtype_t* dt, const int64_t* dims, size_t rank,
                                  const CwIfrt__ByteStrides* strides, cw_proxy_host_layout_t* out) {
  *out = (cw_proxy_host_layout_t){.dense = true};
  if (strides && strides->n_strides != rank && strides->n_strides != 0) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%zu byte strides for rank %zu",
                          strides->n_strides, rank);
  }
  bool given = strides && strides->n_strides == rank && rank;
  size_t bytes = dt->width;
  size_t last = 0;  // offset of the last element in the host buffer
  bool none = false;  // no elements: strides say nothing
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] < 0) return cw_make_status(CW_INVALID_ARGUMENT, "dimension %zu is negative", i);
    none = none || dims[i] == 0;
  }
  for (size_t i = rank; i-- > 0;) {
    if (given && !none && dims[i] > 1) {
      int64_t st = strides->strides[i];
      if (st < 0) return cw_make_status(CW_INVALID_ARGUMENT, "byte stride %zu is negative", i);
      if (st != (int64_t)bytes) out->dense = false;
      // (dims - 1) * stride, checked: a peer's numbers.
      if ((uint64_t)st > (SIZE_MAX - last) / (uint64_t)(dims[i] - 1)) {
        return cw_make_status(CW_INVALID_ARGUMENT, "byte strides reach past any buffer");
      }
      last += (size_t)(dims[i] - 1) * (size_t)st;
    }
    if (dims[i] && bytes > SIZE_MAX / (size_t)dims[i]) {
      return cw_make_status(CW_INVALID_ARGUMENT, "the array's size overflows");
    }
    bytes *= (size_t)dims[i];
  }
  if (last > SIZE_MAX - dt->width) {
    return cw_make_status(CW_INVALID_ARGUMENT, "byte strides reach past any buffer");
  }
  out->bytes = bytes;
  out->source_bytes = out->dense || none ? bytes : last + dt->width;
  if (none) out->dense = true;
  return cw_ok_status();
}

void cw_proxy_densify(const uint8_t* src, const int64_t* dims, size_t rank,
                      const int64_t* strides, size_t width, uint8_t* dst) {
  // An odometer over every index but the last; the last dimension's run is
  // copied element by element (its stride may differ from the width).
  size_t idx[CW_PROXY_DECODE_MAX_RANK] = {0};
  if (rank == 0) {
    memcpy(dst, src, width);
    return;
  }
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] == 0) return;
  }
  size_t inner = (size_t)dims[rank - 1];
  for (;;) {
    size_t off = 0;
    for (size_t i = 0; i + 1 < rank; i++) off += idx[i] * (size_t)strides[i];
    for (size_t k = 0; k < inner; k++) {
      memcpy(dst, src + off + k * (size_t)strides[rank - 1], width);
      dst += width;
    }
    size_t i = rank - 1;
    while (i-- > 0) {
      if (++idx[i] < (size_t)dims[i]) break;
      idx[i] = 0;
    }
    if (i == (size_t)-1) return;
  }
}

