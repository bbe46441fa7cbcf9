// libFuzzer target: peer text made JSON (cw_json.c). Whatever the bytes
// (worker, session and program names come from peers), the string is
// created, jansson writes it, the written text reads back as the same
// string, and text that was valid UTF-8 comes through unchanged; each byte
// that was not becomes one U+FFFD. The first 8 bytes as an unsigned id:
// an integer up to INT64_MAX, above it the decimal digits.
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_json.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  size_t len = strlen(text);  // as C strings arrive: up to the first NUL
  json_t* v = cw_json_string_create(text);
  if (!v) __builtin_trap();
  const char* s = json_string_value(v);
  size_t slen = json_string_length(v);
  if (!s || slen < len || slen > 3 * len) __builtin_trap();
  // Unchanged exactly when jansson takes the text as it is.
  json_t* direct = json_stringn(text, len);
  if (direct && (slen != len || memcmp(s, text, len) != 0)) __builtin_trap();
  json_decref(direct);
  char* dumped = json_dumps(v, JSON_ENCODE_ANY);
  if (!dumped) __builtin_trap();
  json_error_t err;
  json_t* back = json_loads(dumped, JSON_DECODE_ANY, &err);
  if (!back || !json_equal(back, v)) __builtin_trap();
  json_decref(back);
  free(dumped);
  json_decref(v);

  uint64_t id = 0;
  memcpy(&id, data, size < 8 ? size : 8);
  json_t* n = cw_json_uint_create(id);
  if (!n) __builtin_trap();
  if (id <= INT64_MAX) {
    if (!json_is_integer(n) || (uint64_t)json_integer_value(n) != id) __builtin_trap();
  } else {
    char digits[24];
    snprintf(digits, sizeof digits, "%" PRIu64, id);
    if (!json_is_string(n) || strcmp(json_string_value(n), digits) != 0) __builtin_trap();
  }
  json_decref(n);
  free(text);
  return 0;
}
