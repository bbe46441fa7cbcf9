// libFuzzer target: the frame header decoder, then the payload decoder and
// the array checks on whatever the header declares, as a receiver would.
#include <stddef.h>
#include <stdint.h>

#include "cw_array.h"
#include "cw_frame.h"
#include "cw_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const cw_frame_limits_t limits = {.max_payload = 1 << 16, .max_bulk = 1ull << 40};
  cw_frame_header_t h;
  cw_status_t s = cw_frame_header_decode(data, size, &limits, &h);
  if (s) {
    cw_status_free(s);
    return 0;
  }
  if (h.payload_len > size - CW_FRAME_HEADER_SIZE) return 0;
  ProtobufCMessage* m = NULL;
  s = cw_frame_decode_payload(&h, data + CW_FRAME_HEADER_SIZE, &m);
  if (s) {
    cw_status_free(s);
    return 0;
  }
  cw_status_free(cw_msg_check_bulk(&h, m));  // UPLOAD's extent, whole or in parts
  if (h.type == CW_MSG_UPLOAD && !(h.flags & CW_FRAME_REPLY)) {
    const Causeway__V1__UploadRequest* u = (const Causeway__V1__UploadRequest*)m;
    uint64_t bytes;
    cw_status_free(cw_array_extent(u->dtype, u->dims, u->n_dims, u->byte_strides,
                                   u->n_byte_strides, &bytes));
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
