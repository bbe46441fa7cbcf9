// libFuzzer target: a HOST_CALLBACK request as a client receives it from a
// worker -- header, payload, the message table's bulk check, then the layout
// of its operands and results (cw_hostcb) that the plugin reads them with.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cw_frame.h"
#include "cw_hostcb.h"
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
  h.type = CW_MSG_HOST_CALLBACK;  // every input exercises this decoder
  h.flags &= ~(uint32_t)(CW_FRAME_REPLY | CW_FRAME_ERROR);
  ProtobufCMessage* m = NULL;
  s = cw_frame_decode_payload(&h, data + CW_FRAME_HEADER_SIZE, &m);
  if (s) {
    cw_status_free(s);
    return 0;
  }
  s = cw_msg_check_bulk(&h, m);
  if (!s) {
    const Causeway__V1__HostCallbackRequest* r = (const Causeway__V1__HostCallbackRequest*)m;
    uint64_t* offsets = calloc(r->n_operands + r->n_results + 1, sizeof(uint64_t));
    uint64_t total = 0, bytes = 0;
    if (offsets) {
      s = cw_hostcb_layout(r->operands, r->n_operands, "operand", offsets, &total);
      if (!s) s = cw_hostcb_layout(r->results, r->n_results, "result", offsets, &total);
      for (size_t i = 0; !s && i < r->n_operands; ++i) bytes += cw_hostcb_array_bytes(r->operands[i]);
      if (!s && bytes > h.bulk_len) abort();  // the check let through more than the bulk holds
    }
    free(offsets);
  }
  cw_status_free(s);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
