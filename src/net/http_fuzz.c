// libFuzzer target: the daemons' HTTP request-head parser, fed as
// cw_http_server feeds it (every prefix a read could deliver, then the whole
// input), and the label escaper on the same bytes.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cw_http.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t max = 8192;
  cw_http_request_t r;
  size_t step = size / 8 + 1;
  int refused = 0;
  for (size_t n = 0; n <= size; n += step) {
    cw_http_parse_t v = cw_http_parse_request((const char*)data, n, max, &r);
    // A prefix refused stays refused: more bytes never make a bad head good.
    if (refused && v != CW_HTTP_BAD) __builtin_trap();
    refused = v == CW_HTTP_BAD;
    if (v == CW_HTTP_OK) {
      // A parsed request names a NUL-terminated method and path.
      if (strlen(r.method) > CW_HTTP_MAX_METHOD || strlen(r.path) > CW_HTTP_MAX_PATH ||
          r.path[0] != '/') {
        __builtin_trap();
      }
    }
  }
  if (cw_http_parse_request((const char*)data, size, max, &r) != CW_HTTP_BAD && refused) {
    __builtin_trap();
  }
  char label[256];
  size_t n = size < sizeof(label) - 1 ? size : sizeof(label) - 1;
  memcpy(label, data, n);
  label[n] = 0;
  cw_http_text_t t = {0};
  cw_http_text_label(&t, label);
  cw_http_text_free(&t);
  return 0;
}
