#include "cw_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), 0 if
// none. Stops at the terminating NUL, which is never a continuation byte.
static size_t cw__utf8_len(const unsigned char* p) {
  size_t n;
  unsigned lo = 0x80, hi = 0xBF;
  if (p[0] >= 0xC2 && p[0] <= 0xDF) n = 2;
  else if (p[0] >= 0xE0 && p[0] <= 0xEF) n = 3;
  else if (p[0] >= 0xF0 && p[0] <= 0xF4) n = 4;
  else return 0;
  if (p[0] == 0xE0) lo = 0xA0;  // overlong
  if (p[0] == 0xED) hi = 0x9F;  // surrogates
  if (p[0] == 0xF0) lo = 0x90;  // overlong
  if (p[0] == 0xF4) hi = 0x8F;  // above U+10FFFF
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return n;
}

json_t* cw_json_string_create(const char* text) {
  const unsigned char* s = (const unsigned char*)(text ? text : "");
  size_t len = strlen((const char*)s);
  size_t bad = 0;
  for (size_t i = 0; i < len;) {
    size_t n = s[i] < 0x80 ? 1 : cw__utf8_len(s + i);
    if (!n) bad++;
    i += n ? n : 1;
  }
  if (!bad) return json_stringn((const char*)s, len);
  // Each bad byte (1) becomes U+FFFD (3 bytes: EF BF BD).
  char* fixed = malloc(len + 2 * bad + 1);
  if (!fixed) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    size_t n = s[i] < 0x80 ? 1 : cw__utf8_len(s + i);
    if (n) {
      memcpy(fixed + k, s + i, n);
      k += n;
      i += n;
    } else {
      memcpy(fixed + k, "\xEF\xBF\xBD", 3);
      k += 3;
      i++;
    }
  }
  json_t* v = json_stringn(fixed, k);
  free(fixed);
  return v;
}

json_t* cw_json_uint_create(uint64_t value) {
  if (value <= INT64_MAX) return json_integer((json_int_t)value);
  char digits[24];
  snprintf(digits, sizeof(digits), "%" PRIu64, value);
  return json_string(digits);
}
