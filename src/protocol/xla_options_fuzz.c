// libFuzzer target: arbitrary bytes as a peer's CompileOptionsProto, through
// every entry point that sees peer options before a plugin does, and the
// cut into one worker's part of an island's program.
#include <stdlib.h>

#include "cw_xla_options.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static cw_xla_options_info_t info;
  uint8_t* out = NULL;
  size_t out_len = 0;
  cw_status_free(cw_xla_options_normalize(data, size, 4, &out, &out_len));
  free(out);
  cw_status_free(cw_xla_options_check(data, size, 8, &info));
  const int64_t map[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  out = NULL;
  cw_status_free(cw_xla_options_rewrite_devices(data, size, map, 8, &out, &out_len));
  free(out);
  // An island's part: positions from the input's last bytes.
  size_t first = size ? data[size - 1] % 8 : 0, count = size > 1 ? data[size - 2] % 8 : 1;
  out = NULL;
  cw_status_free(cw_xla_options_part(data, size, first, count, &out, &out_len));
  free(out);
  return 0;
}
