#include "cw_pb_nesting.h"

static bool cw__varint(const uint8_t** p, const uint8_t* end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; *p < end && shift < 64; shift += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

static bool cw__walk(const ProtobufCMessageDescriptor* desc, const uint8_t* p, const uint8_t* end,
                     int depth) {
  if (depth < 0) return false;
  while (p < end) {
    uint64_t key, len;
    if (!cw__varint(&p, end, &key)) return true;
    switch (key & 7) {
      case 0:
        if (!cw__varint(&p, end, &len)) return true;
        break;
      case 1:
      case 5: {
        size_t skip = (key & 7) == 1 ? 8 : 4;
        if ((size_t)(end - p) < skip) return true;
        p += skip;
        break;
      }
      case 2: {
        if (!cw__varint(&p, end, &len) || len > (uint64_t)(end - p)) return true;
        uint64_t number = key >> 3;
        const ProtobufCFieldDescriptor* f =
            number <= 0x1fffffff ? protobuf_c_message_descriptor_get_field(desc, (unsigned)number)
                                 : NULL;
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
            !cw__walk(f->descriptor, p, p + len, depth - 1)) {
          return false;
        }
        p += len;
        break;
      }
      default:
        return true;  // groups or junk: protobuf-c refuses them
    }
  }
  return true;
}

bool cw_pb_nesting_ok(const ProtobufCMessageDescriptor* desc, const uint8_t* data, size_t size,
                      int max_depth) {
  return !size || cw__walk(desc, data, data + size, max_depth);
}
