// libFuzzer target: the state file of `causeway up` (cw_up.c), which
// `causeway down` and `causeway up` read back from a directory another
// process could have written. Whatever the bytes, the parser refuses them
// with a reason or fills a state within its bounds, and a state it accepted
// is written and read back the same.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cw_up.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  static cw_up_state_t st, again;
  char err[256];
  err[0] = 0;
  if (!cw_up_state_parse(text, &st, err, sizeof err)) {
    if (!err[0] || !memchr(err, 0, sizeof err)) __builtin_trap();  // a reason, terminated
    free(text);
    return 0;
  }
  if (st.num_procs > CW_UP_MAX_PROCS || !memchr(st.controller, 0, sizeof st.controller)) {
    __builtin_trap();
  }
  for (size_t i = 0; i < st.num_procs; ++i) {
    if (st.procs[i].pid <= 1 || !memchr(st.procs[i].name, 0, sizeof st.procs[i].name)) {
      __builtin_trap();
    }
  }
  char* written = cw_up_state_format(&st);
  if (!written) __builtin_trap();
  if (!cw_up_state_parse(written, &again, err, sizeof err)) __builtin_trap();
  if (strcmp(again.controller, st.controller) != 0 || again.num_procs != st.num_procs) {
    __builtin_trap();
  }
  for (size_t i = 0; i < st.num_procs; ++i) {
    if (strcmp(again.procs[i].name, st.procs[i].name) != 0 ||
        again.procs[i].pid != st.procs[i].pid ||
        again.procs[i].start_time != st.procs[i].start_time) {
      __builtin_trap();
    }
  }
  free(written);
  free(text);
  return 0;
}
