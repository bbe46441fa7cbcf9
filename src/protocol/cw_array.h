// Array descriptions that cross the wire: element types and shape checks.
#ifndef CW_PROTOCOL_ARRAY_H_
#define CW_PROTOCOL_ARRAY_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

#define CW_MAX_RANK 64

// Bytes per element of a wire dtype (equal to PJRT_Buffer_Type), 0 if the
// dtype is unknown or not supported for transfers.
size_t cw_dtype_size(int dtype);
const char* cw_dtype_name(int dtype);

// Validates a host array layout and computes the bytes it spans. With no
// strides the array is dense row-major; otherwise one non-negative byte
// stride per dimension. Rejects unknown dtypes, rank > CW_MAX_RANK, negative
// dims and sizes that overflow 64 bits.
CW_MUST_USE cw_status_t cw_array_extent(int dtype, const int64_t* dims, size_t rank,
                                        const int64_t* byte_strides, size_t num_strides,
                                        uint64_t* out_bytes);

#endif  // CW_PROTOCOL_ARRAY_H_
