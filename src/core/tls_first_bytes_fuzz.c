// libFuzzer target: causeway's own decoding around TLS (cw_tls.c), apart
// from OpenSSL's: the first-bytes classifier a TLS port uses to tell a
// plaintext causeway peer from a TLS one, and the host of an address (what a
// connecting side checks the certificate against). tls_fuzz drives
// OpenSSL's parsers (key and certificate files, a peer's first flight)
// through our context code; it runs about 10^4 times slower, so the two are
// apart (docs/fuzzing.md).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cw_tls.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static bool cw__terminated(const char* s, size_t cap) { return memchr(s, 0, cap) != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cw_tls_first_bytes_t kind = cw_tls_classify_first_bytes(data, size);
  if (kind == CW_TLS_FIRST_TLS && (size < 2 || data[0] != 0x16 || data[1] != 3)) __builtin_trap();
  if (kind == CW_TLS_FIRST_CAUSEWAY && (size < 4 || memcmp(data, "CWAY", 4))) __builtin_trap();
  if (kind == CW_TLS_FIRST_UNKNOWN && size >= 4) __builtin_trap();

  char* address = malloc(size + 1);
  if (!address) return 0;
  memcpy(address, data, size);
  address[size] = 0;
  char host[64];
  if (cw_tls_address_host(address, host, sizeof host)) {
    if (!cw__terminated(host, sizeof host) || !host[0] || !strstr(address, host)) __builtin_trap();
  }
  free(address);
  return 0;
}
