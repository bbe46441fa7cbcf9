// Array descriptions that cross the wire: element types and shape checks.
#ifndef CW_PROTOCOL_ARRAY_H_
#define CW_PROTOCOL_ARRAY_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

#define CW_MAX_RANK 64

// Bytes per element of a wire dtype (equal to PJRT_Buffer_Type) on the host
// and the wire, 0 if the dtype is unknown or not supported for transfers
// (TOKEN). Sub-byte types (int4, int2, int1, float4_e2m1fn ...) take one byte
// per element there, unpacked, as PJRT's host buffers hold them.
size_t cw_dtype_size(int dtype);
// Its name as numpy and ml_dtypes spell it ("float8_e4m3fn"), "token", or
// "invalid".
const char* cw_dtype_name(int dtype);
// Its name in XLA's shape syntax ("f32", "s4", "f8e4m3fn"), "token", or
// "invalid".
const char* cw_dtype_xla_name(int dtype);
// True for the sub-byte types the device packs (int4, uint2, float4_e2m1fn ...).
bool cw_dtype_packed(int dtype);
// Bytes `count` elements take on an XLA device, where sub-byte types are
// packed (two int4 per byte); 0 for a dtype cw_dtype_size refuses. `count`
// must not overflow count * cw_dtype_size(dtype).
uint64_t cw_dtype_device_bytes(int dtype, uint64_t count);

// Validates a host array layout and computes the bytes it spans. With no
// strides the array is dense row-major; otherwise one non-negative byte
// stride per dimension. Rejects unknown dtypes, rank > CW_MAX_RANK, negative
// dims and sizes that overflow 64 bits.
CW_MUST_USE cw_status_t cw_array_extent(int dtype, const int64_t* dims, size_t rank,
                                        const int64_t* byte_strides, size_t num_strides,
                                        uint64_t* out_bytes);

// Copies the elements of a strided host array (`byte_strides` any sign, 0
// for a broadcast dimension; `base` points at element [0, ..., 0]) into
// `out`, dense row-major: product(dims) * esize bytes. Borrows everything.
// The caller has checked that the array lies in memory it may read.
void cw_array_gather_dense(const void* base, size_t esize, const int64_t* dims,
                           const int64_t* byte_strides, size_t rank, void* out);

#endif  // CW_PROTOCOL_ARRAY_H_
