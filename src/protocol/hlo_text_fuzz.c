// libFuzzer target: arbitrary bytes as the optimized program a plugin
// returns, read as a module with and without its config, printed as HLO text
// (at most 1 MiB of it), read for its entry layouts and priced (its cost
// analysis).
#include <stdlib.h>

#include "cw_hlo_cost.h"
#include "cw_hlo_text.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int with_config = 0; with_config < 2; with_config++) {
    cw_hlo_module_t* m = NULL;
    cw_status_t st = cw_hlo_module_parse(data, size, with_config, &m);
    if (st) {
      cw_status_free(st);
      continue;
    }
    char* text = NULL;
    size_t len = 0;
    cw_status_free(cw_hlo_module_text(m, 1 << 20, &text, &len));
    free(text);
    for (int outputs = 0; outputs < 2; outputs++) {
      ProtobufCBinaryData* l = NULL;
      size_t n = 0;
      cw_status_free(cw_hlo_module_layouts(m, outputs, &l, &n));
      cw_hlo_layouts_free(l, n);
    }
    cw_hlo_cost_t cost;
    cw_status_free(cw_hlo_module_cost(m, &cost));
    cw_hlo_cost_free(&cost);
    cw_hlo_module_free(m);
  }
  return 0;
}
