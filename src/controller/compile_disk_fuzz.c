// libFuzzer target: arbitrary bytes as a compile cache file and as compile
// options, through the decoders the controller runs on them
// (cw_compile_disk_decode, cw_compile_disk_canonical_options). The key looked
// for is the one the file claims (bytes 8..40), so inputs reach the length
// and checksum checks, and a fixed one, so the foreign-key path runs too.
#include <stdlib.h>
#include <string.h>

#include "cw_compile_disk.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE] = {0};
  size_t len = 0;
  cw_status_free(cw_compile_disk_decode(data, size, key, &len));
  if (size >= 8 + CW_COMPILE_DISK_DIGEST_SIZE) {
    memcpy(key, data + 8, sizeof(key));
    cw_status_t s = cw_compile_disk_decode(data, size, key, &len);
    // A valid file's payload is exactly what follows the header.
    if (!s && len != size - CW_COMPILE_DISK_HEADER_SIZE) abort();
    cw_status_free(s);
  }
  uint8_t* canon = cw_compile_disk_canonical_options(data, size);
  // Canonical options are a permutation of the same bytes.
  if (canon) {
    size_t count[256] = {0};
    for (size_t i = 0; i < size; ++i) count[data[i]]++, count[canon[i]]--;
    for (int b = 0; b < 256; ++b) {
      if (count[b]) abort();
    }
  }
  free(canon);
  return 0;
}
