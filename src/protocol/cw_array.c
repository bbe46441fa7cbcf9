#include "cw_array.h"

#include <assert.h>
#include <string.h>

#include "proto/causeway.pb-c.h"

_Static_assert(CAUSEWAY__V1__DTYPE__DTYPE_F32 == 11 && CAUSEWAY__V1__DTYPE__DTYPE_BF16 == 13 &&
                   CAUSEWAY__V1__DTYPE__DTYPE_C128 == 15 &&
                   CAUSEWAY__V1__DTYPE__DTYPE_F8E5M2 == 16 && CAUSEWAY__V1__DTYPE__DTYPE_S4 == 21 &&
                   CAUSEWAY__V1__DTYPE__DTYPE_TOKEN == 23 && CAUSEWAY__V1__DTYPE__DTYPE_S2 == 24 &&
                   CAUSEWAY__V1__DTYPE__DTYPE_F4E2M1FN == 29 &&
                   CAUSEWAY__V1__DTYPE__DTYPE_F6E3M2FN == 33,
               "wire dtypes equal PJRT_Buffer_Type");

// size: bytes per element on the host and the wire (sub-byte types one
// byte each, unpacked, as PJRT's host buffers hold them); bits: on the
// device, where the plugin packs the sub-byte ones.
typedef struct {
  const char* name;
  const char* xla;  // XLA's shape syntax (f32[4,8])
  size_t size;
  unsigned bits;
} cw__dtype_info_t;

static const cw__dtype_info_t cw__dtypes[] = {
    [CAUSEWAY__V1__DTYPE__DTYPE_PRED] = {"bool", "pred", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_S8] = {"int8", "s8", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_S16] = {"int16", "s16", 2, 16},
    [CAUSEWAY__V1__DTYPE__DTYPE_S32] = {"int32", "s32", 4, 32},
    [CAUSEWAY__V1__DTYPE__DTYPE_S64] = {"int64", "s64", 8, 64},
    [CAUSEWAY__V1__DTYPE__DTYPE_U8] = {"uint8", "u8", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_U16] = {"uint16", "u16", 2, 16},
    [CAUSEWAY__V1__DTYPE__DTYPE_U32] = {"uint32", "u32", 4, 32},
    [CAUSEWAY__V1__DTYPE__DTYPE_U64] = {"uint64", "u64", 8, 64},
    [CAUSEWAY__V1__DTYPE__DTYPE_F16] = {"float16", "f16", 2, 16},
    [CAUSEWAY__V1__DTYPE__DTYPE_F32] = {"float32", "f32", 4, 32},
    [CAUSEWAY__V1__DTYPE__DTYPE_F64] = {"float64", "f64", 8, 64},
    [CAUSEWAY__V1__DTYPE__DTYPE_BF16] = {"bfloat16", "bf16", 2, 16},
    [CAUSEWAY__V1__DTYPE__DTYPE_C64] = {"complex64", "c64", 8, 64},
    [CAUSEWAY__V1__DTYPE__DTYPE_C128] = {"complex128", "c128", 16, 128},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E5M2] = {"float8_e5m2", "f8e5m2", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3FN] = {"float8_e4m3fn", "f8e4m3fn", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3B11FNUZ] = {"float8_e4m3b11fnuz", "f8e4m3b11fnuz", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E5M2FNUZ] = {"float8_e5m2fnuz", "f8e5m2fnuz", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3FNUZ] = {"float8_e4m3fnuz", "f8e4m3fnuz", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_S4] = {"int4", "s4", 1, 4},
    [CAUSEWAY__V1__DTYPE__DTYPE_U4] = {"uint4", "u4", 1, 4},
    [CAUSEWAY__V1__DTYPE__DTYPE_S2] = {"int2", "s2", 1, 2},
    [CAUSEWAY__V1__DTYPE__DTYPE_U2] = {"uint2", "u2", 1, 2},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E4M3] = {"float8_e4m3", "f8e4m3", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E3M4] = {"float8_e3m4", "f8e3m4", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F8E8M0FNU] = {"float8_e8m0fnu", "f8e8m0fnu", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F4E2M1FN] = {"float4_e2m1fn", "f4e2m1fn", 1, 4},
    [CAUSEWAY__V1__DTYPE__DTYPE_S1] = {"int1", "s1", 1, 1},
    [CAUSEWAY__V1__DTYPE__DTYPE_U1] = {"uint1", "u1", 1, 1},
    [CAUSEWAY__V1__DTYPE__DTYPE_F6E2M3FN] = {"float6_e2m3fn", "f6e2m3fn", 1, 8},
    [CAUSEWAY__V1__DTYPE__DTYPE_F6E3M2FN] = {"float6_e3m2fn", "f6e3m2fn", 1, 8},
};

size_t cw_dtype_size(int dtype) {
  if (dtype <= 0 || (size_t)dtype >= sizeof(cw__dtypes) / sizeof(cw__dtypes[0])) return 0;
  return cw__dtypes[dtype].size;
}

const char* cw_dtype_name(int dtype) {
  if (dtype == CAUSEWAY__V1__DTYPE__DTYPE_TOKEN) return "token";
  return cw_dtype_size(dtype) ? cw__dtypes[dtype].name : "invalid";
}

bool cw_dtype_packed(int dtype) { return cw_dtype_size(dtype) && cw__dtypes[dtype].bits < 8; }

const char* cw_dtype_xla_name(int dtype) {
  if (dtype == CAUSEWAY__V1__DTYPE__DTYPE_TOKEN) return "token";
  return cw_dtype_size(dtype) ? cw__dtypes[dtype].xla : "invalid";
}

uint64_t cw_dtype_device_bytes(int dtype, uint64_t count) {
  if (!cw_dtype_size(dtype)) return 0;
  unsigned bits = cw__dtypes[dtype].bits;
  if (bits >= 8) return count * cw__dtypes[dtype].size;
  return count / (8 / bits) + (count % (8 / bits) != 0);
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

// One row: n elements `step` bytes apart; fixed sizes let memcpy inline.
static uint8_t* cw__gather_row(uint8_t* dst, const uint8_t* src, int64_t n, int64_t step,
                               size_t esize) {
#define CW__ROW(size)                                                   \
  for (int64_t k = 0; k < n; ++k, src += step, dst += (size)) memcpy(dst, src, (size)); \
  return dst
  switch (esize) {
    case 1: CW__ROW(1);
    case 2: CW__ROW(2);
    case 4: CW__ROW(4);
    case 8: CW__ROW(8);
    case 16: CW__ROW(16);
    default: CW__ROW(esize);
  }
#undef CW__ROW
}

void cw_array_gather_dense(const void* base, size_t esize, const int64_t* dims,
                           const int64_t* byte_strides, size_t rank, void* out) {
  assert(rank <= CW_MAX_RANK);
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] <= 0) return;  // no elements
  }
  uint8_t* dst = out;
  if (rank == 0) {
    memcpy(dst, base, esize);
    return;
  }
  // An odometer over all but the last dimension; the last is the inner loop.
  int64_t index[CW_MAX_RANK] = {0};
  const uint8_t* row = base;
  for (;;) {
    dst = cw__gather_row(dst, row, dims[rank - 1], byte_strides[rank - 1], esize);
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      row += byte_strides[d];
      if (++index[d] < dims[d]) break;
      row -= byte_strides[d] * dims[d];
      index[d] = 0;
    }
  }
}
