#include "cw_array.h"

#include "proto/causeway.pb-c.h"

_Static_assert(CAUSEWAY__V1__DTYPE__DTYPE_F32 == 11 && CAUSEWAY__V1__DTYPE__DTYPE_BF16 == 13 &&
                   CAUSEWAY__V1__DTYPE__DTYPE_C128 == 15,
               "wire dtypes equal PJRT_Buffer_Type");

typedef struct {
  const char* name;
  size_t size;
} cw__dtype_info_t;

static const cw__dtype_info_t cw__dtypes[] = {
    [CAUSEWAY__V1__DTYPE__DTYPE_PRED] = {"bool", 1},
    [CAUSEWAY__V1__DTYPE__DTYPE_S8] = {"int8", 1},
    [CAUSEWAY__V1__DTYPE__DTYPE_S16] = {"int16", 2},
    [CAUSEWAY__V1__DTYPE__DTYPE_S32] = {"int32", 4},
    [CAUSEWAY__V1__DTYPE__DTYPE_S64] = {"int64", 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_U8] = {"uint8", 1},
    [CAUSEWAY__V1__DTYPE__DTYPE_U16] = {"uint16", 2},
    [CAUSEWAY__V1__DTYPE__DTYPE_U32] = {"uint32", 4},
    [CAUSEWAY__V1__DTYPE__DTYPE_U64] = {"uint64", 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F16] = {"float16", 2},
    [CAUSEWAY__V1__DTYPE__DTYPE_F32] = {"float32", 4},
    [CAUSEWAY__V1__DTYPE__DTYPE_F64] = {"float64", 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_BF16] = {"bfloat16", 2},
    [CAUSEWAY__V1__DTYPE__DTYPE_C64] = {"complex64", 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_C128] = {"complex128", 16},
};

size_t cw_dtype_size(int dtype) {
  if (dtype <= 0 || (size_t)dtype >= sizeof(cw__dtypes) / sizeof(cw__dtypes[0])) return 0;
  return cw__dtypes[dtype].size;
}

const char* cw_dtype_name(int dtype) {
  return cw_dtype_size(dtype) ? cw__dtypes[dtype].name : "invalid";
}

cw_status_t cw_array_extent(int dtype, const int64_t* dims, size_t rank,
                            const int64_t* byte_strides, size_t num_strides,
                            uint64_t* out_bytes) {
  *out_bytes = 0;
  size_t esize = cw_dtype_size(dtype);
  if (!esize) return cw_make_status(CW_INVALID_ARGUMENT, "unknown element type %d", dtype);
  if (rank > CW_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "rank %zu exceeds the maximum of %d", rank,
                          CW_MAX_RANK);
  }
  if (num_strides && num_strides != rank) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%zu byte strides given for rank %zu",
                          num_strides, rank);
  }
  uint64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "dimension %zu is negative (%lld)", i,
                            (long long)dims[i]);
    }
    if (dims[i] && count > UINT64_MAX / (uint64_t)dims[i]) {
      return cw_make_status(CW_INVALID_ARGUMENT, "array size overflows 64 bits");
    }
    count *= (uint64_t)dims[i];
  }
  if (count == 0) return cw_ok_status();
  if (!num_strides) {
    if (count > UINT64_MAX / esize) {
      return cw_make_status(CW_INVALID_ARGUMENT, "array size overflows 64 bits");
    }
    *out_bytes = count * esize;
    return cw_ok_status();
  }
  // Strided: the extent is the last element's offset plus one element.
  uint64_t last = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (byte_strides[i] < 0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "byte stride %zu is negative (%lld)", i,
                            (long long)byte_strides[i]);
    }
    uint64_t d = (uint64_t)dims[i] - 1;
    uint64_t s = (uint64_t)byte_strides[i];
    if (d && s > (UINT64_MAX - last) / d) {
      return cw_make_status(CW_INVALID_ARGUMENT, "strided extent overflows 64 bits");
    }
    last += d * s;
  }
  if (last > UINT64_MAX - esize) {
    return cw_make_status(CW_INVALID_ARGUMENT, "strided extent overflows 64 bits");
  }
  *out_bytes = last + esize;
  return cw_ok_status();
}
