// libFuzzer target: the parameter shapes of an executable's optimized
// program (cw_pjrt_params_from_hlo), decoded from a serialized
// HloModuleProto or HloModuleProtoWithConfig (first byte, bit 0). The bytes
// come from the PJRT plugin, and from it from whatever program or
// serialized executable a client sent: refused with a reason, or shapes
// whose ranks and dims were copied whole and whose donations name
// parameters that exist.
#include <stdint.h>
#include <stdlib.h>

#include "cw_pjrt.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  cw_pjrt_shape_t* shapes = NULL;
  size_t n = 0;
  cw_status_t st = cw_pjrt_params_from_hlo(data + 1, size - 1, data[0] & 1, &shapes, &n);
  if (st) {
    if (shapes || n) __builtin_trap();
    cw_status_free(st);
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!shapes[i].dims) __builtin_trap();
    // Every dimension was copied (ASan reads them all).
    // Unsigned: dims are the input's, and a signed sum of them may overflow.
    volatile uint64_t sum = 0;
    for (size_t k = 0; k < shapes[i].rank; ++k) sum += (uint64_t)shapes[i].dims[k];
    (void)sum;
  }
  cw_pjrt_shapes_free(shapes, n);
  return 0;
}
