#include "cw_pb_nesting.h"

#include "cw_reader.h"

static bool cw__walk(const ProtobufCMessageDescriptor* desc, cw_reader_t* r, int depth) {
  if (depth < 0) return false;
  while (cw_reader_remaining(r)) {
    uint64_t key, len;
    const uint8_t* p;
    if (!cw_reader_varint(r, &key)) return true;  // malformed: protobuf-c refuses it
    switch (key & 7) {
      case 0:
        if (!cw_reader_varint(r, &len)) return true;
        break;
      case 1:
      case 5:
        if (!cw_reader_bytes(r, (key & 7) == 1 ? 8 : 4, &p)) return true;
        break;
      case 2: {
        if (!cw_reader_varint(r, &len) || len > cw_reader_remaining(r)) return true;
        cw_reader_bytes(r, (size_t)len, &p);
        uint64_t number = key >> 3;
        const ProtobufCFieldDescriptor* f =
            number <= 0x1fffffff ? protobuf_c_message_descriptor_get_field(desc, (unsigned)number)
                                 : NULL;
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
          cw_reader_t child;
          cw_reader_initialize(&child, p, (size_t)len);
          if (!cw__walk(f->descriptor, &child, depth - 1)) return false;
        }
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
  if (!size) return true;
  cw_reader_t r;
  cw_reader_initialize(&r, data, size);
  return cw__walk(desc, &r, max_depth);
}
