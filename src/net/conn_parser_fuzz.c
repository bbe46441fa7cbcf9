// libFuzzer target: arbitrary byte streams through the connection parser,
// split at a fuzzer-chosen point, with bulk bytes read into real memory.
#include <stdlib.h>
#include <string.h>

#include "cw_conn_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t split = data[0] % (size);
  data++;
  size--;
  cw_frame_limits_t limits = {4096, 1u << 20};
  cw_conn_parser_t p;
  cw_conn_parser_initialize(&p, &limits);
  uint8_t* bulk = NULL;
  const uint8_t* chunks[2] = {data, data + split};
  size_t lens[2] = {split, size - split};
  bool hello = false;
  for (int c = 0; c < 2; ++c) {
    const uint8_t* d = chunks[c];
    size_t len = lens[c];
    for (;;) {
      size_t used = 0;
      cw_conn_parser_event_t ev;
      cw_conn_parser_feed(&p, d, len, &used, &ev);
      d += used;
      len -= used;
      if (ev.kind == CW_CONN_PARSER_EVENT_NONE) break;
      if (ev.kind == CW_CONN_PARSER_EVENT_ERROR) {
        cw_status_free(ev.status);
        goto done;
      }
      if (ev.kind == CW_CONN_PARSER_EVENT_FRAME) {
        if (!hello) {
          hello = true;
          cw_frame_limits_t after = {1u << 16, 1u << 20};
          cw_conn_parser_set_limits(&p, &after);
        }
        cw_status_t st = cw_msg_check_bulk(&ev.header, ev.msg);
        protobuf_c_message_free_unpacked(ev.msg, NULL);
        if (ev.header.bulk_len) {
          free(bulk);
          bulk = st ? NULL : malloc((size_t)ev.header.bulk_len);
          cw_conn_parser_set_bulk_dest(&p, bulk);
        }
        cw_status_free(st);
      }
    }
  }
done:
  free(bulk);
  cw_conn_parser_deinitialize(&p);
  return 0;
}
