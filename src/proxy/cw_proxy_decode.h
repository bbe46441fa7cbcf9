// The IFRT values the proxy interprets (the rest it keeps as bytes).
#ifndef CW_PROXY_DECODE_H_
#define CW_PROXY_DECODE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_pjrt_c_api.h"
#include "cw_status.h"
#include "proto/ifrt_proxy.pb-c.h"

// The IFRT sharding kinds, as a serialized sharding names them.
#define CW_PROXY_SINGLE_DEVICE "xla::ifrt::SingleDeviceSharding"
#define CW_PROXY_HLO_SHARDING "xla::ifrt::HloSharding"
#define CW_PROXY_OPAQUE "xla::ifrt::OpaqueSharding"
#define CW_PROXY_CONCRETE "xla::ifrt::ConcreteSharding"
#define CW_PROXY_CONCRETE_EVEN "xla::ifrt::ConcreteEvenSharding"

typedef struct cw_proxy_dtype_s {
  PJRT_Buffer_Type pjrt;
  uint8_t width;  // bytes of one element in a host buffer (sub-byte types: 1)
} cw_proxy_dtype_t;

// An IFRT DType kind (XLA's PrimitiveType) as PJRT sees it; UNIMPLEMENTED
// for kinds without a PJRT buffer type (token, opaque, string).
CW_MUST_USE cw_status_t cw_proxy_dtype(int32_t kind, cw_proxy_dtype_t* out_dtype);

// The IFRT DType kind of a PJRT buffer type.
CW_MUST_USE cw_status_t cw_proxy_dtype_kind(PJRT_Buffer_Type type, int32_t* out_kind);

#define CW_PROXY_DECODE_MAX_RANK 64

// An array's host buffer: `bytes` of the dense array, `source_bytes` the
// host buffer must hold with the strides given, and whether they are dense
// major-to-minor (strides of dimensions of 1 and of arrays without elements
// do not count).
typedef struct cw_proxy_host_layout_s {
  size_t bytes;
  size_t source_bytes;
  bool dense;
} cw_proxy_host_layout_t;

// The host layout of `dims` with byte `strides` (NULL or none: dense).
// Negative strides and sizes that overflow are refused. rank <=
// CW_PROXY_DECODE_MAX_RANK.
CW_MUST_USE cw_status_t cw_proxy_host_layout(const cw_proxy_dtype_t* dtype, const int64_t* dims,
                                             size_t rank, const CwIfrt__ByteStrides* strides,
                                             cw_proxy_host_layout_t* out_layout);

// Copies a strided host buffer (`src`, of the layout's source_bytes) into
// the dense `dst` (of its bytes).
void cw_proxy_densify(const uint8_t* src, const int64_t* dims, size_t rank,
                      const int64_t* strides, size_t width, uint8_t* dst);

// The devices of a sharding and whether each holds the whole array; kinds
// other than single-device, HLO, opaque and concrete: UNIMPLEMENTED, named.
// *out_ids is the caller's to free.
CW_MUST_USE cw_status_t cw_proxy_sharding_devices(const CwIfrt__Sharding* sharding,
                                                  int32_t** out_ids, size_t* out_n,
                                                  bool* out_replicated);

// The memory kind a sharding names (*out_kind NULL: none, the default;
// else the caller's to free).
CW_MUST_USE cw_status_t cw_proxy_sharding_memory_kind(const CwIfrt__Sharding* sharding,
                                                      char** out_kind);

#endif  // CW_PROXY_DECODE_H_
