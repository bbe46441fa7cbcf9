// libFuzzer target: arbitrary bytes as a serialized executable (what
// PJRT_Executable_DeserializeAndLoad reads, e.g. from JAX's compilation cache
// on disk). What is accepted must pack again and read back the same.
#include <stdlib.h>
#include <string.h>

#include "cw_serialized_exe.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void cw__same(const cw_serialized_exe_t* a, const cw_serialized_exe_t* b) {
  if (strcmp(a->format, b->format) != 0 || a->code_size != b->code_size ||
      memcmp(a->code, b->code, a->code_size) != 0 ||
      a->compile_options_size != b->compile_options_size ||
      (a->compile_options_size &&
       memcmp(a->compile_options, b->compile_options, a->compile_options_size) != 0) ||
      strcmp(a->fingerprint, b->fingerprint) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cw_serialized_exe_t exe;
  void* msg = NULL;
  cw_status_t s = cw_serialized_exe_unpack(data, size, &exe, &msg);
  if (s) {
    if (msg || !cw_status_message(s)[0]) abort();  // refused: nothing kept, a reason given
    cw_status_free(s);
    return 0;
  }
  size_t n = strlen(exe.format);
  if (!n || n > CW_SERIALIZED_EXE_MAX_FORMAT || !exe.code_size) abort();
  uint8_t* packed = NULL;
  size_t packed_size = 0;
  if (cw_serialized_exe_pack(&exe, &packed, &packed_size)) abort();
  cw_serialized_exe_t again;
  void* msg2 = NULL;
  if (cw_serialized_exe_unpack(packed, packed_size, &again, &msg2)) abort();
  cw__same(&exe, &again);
  cw_serialized_exe_free(msg2);
  free(packed);
  cw_serialized_exe_free(msg);
  return 0;
}
