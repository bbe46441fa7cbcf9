// Bounds-checked little-endian reader over (ptr, len), and matching writers.
// Every read either succeeds completely or returns false and reads nothing.
#ifndef CW_CORE_READER_H_
#define CW_CORE_READER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct cw_reader_s {
  const uint8_t* data;
  size_t len;
  size_t pos;
} cw_reader_t;

static inline void cw_reader_initialize(cw_reader_t* r, const uint8_t* data, size_t len) {
  r->data = data;
  r->len = data ? len : 0;
  r->pos = 0;
}

static inline size_t cw_reader_remaining(const cw_reader_t* r) { return r->len - r->pos; }

static inline bool cw_reader_bytes(cw_reader_t* r, size_t n, const uint8_t** out) {
  if (n > cw_reader_remaining(r)) return false;
  *out = r->data + r->pos;
  r->pos += n;
  return true;
}

// A protobuf base-128 varint: false when cut short or over 10 bytes.
static inline bool cw_reader_varint(cw_reader_t* r, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t* p = NULL;
    if (!cw_reader_bytes(r, 1, &p)) return false;
    v |= (uint64_t)(*p & 0x7f) << shift;
    if (!(*p & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

#define CW__READER_LE(bits)                                               \
  static inline bool cw_reader_u##bits##le(cw_reader_t* r, uint##bits##_t* out) { \
    const uint8_t* p;                                                     \
    if (!cw_reader_bytes(r, bits / 8, &p)) return false;                  \
    uint##bits##_t v = 0;                                                 \
    for (int i = bits / 8 - 1; i >= 0; --i) v = (uint##bits##_t)((v << 8) | p[i]); \
    *out = v;                                                             \
    return true;                                                          \
  }                                                                       \
  static inline void cw_put_u##bits##le(uint8_t* p, uint##bits##_t v) {   \
    for (int i = 0; i < bits / 8; ++i) p[i] = (uint8_t)(v >> (8 * i));    \
  }
CW__READER_LE(16)
CW__READER_LE(32)
CW__READER_LE(64)
#undef CW__READER_LE

#endif  // CW_CORE_READER_H_
