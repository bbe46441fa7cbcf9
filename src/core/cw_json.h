// JSON values for what causeway writes (the `causeway` tool's --json, the
// plugin's trace file), built with jansson. Text a peer chose (worker,
// session and program names) is not trusted to be UTF-8; these make every
// value jansson can write, so the output is always valid JSON in UTF-8.
#ifndef CW_CORE_JSON_H_
#define CW_CORE_JSON_H_

#include <jansson.h>
#include <stdint.h>

// A new string of `text` (NULL: ""). Every byte that is not part of a
// well-formed UTF-8 sequence (RFC 3629: no overlongs, surrogates or code
// points above U+10FFFF) becomes U+FFFD, as jansson refuses invalid UTF-8.
// Borrows text; returns a new reference, NULL only when out of memory.
json_t* cw_json_string_create(const char* text);

// A new integer for an unsigned value. jansson's integers are signed 64-bit:
// a value above INT64_MAX (a session id a client chose, never a counter in
// practice) becomes a string of its decimal digits rather than a wrapped or
// rounded number. NULL only when out of memory.
json_t* cw_json_uint_create(uint64_t value);

#endif  // CW_CORE_JSON_H_
