// A small JSON writer for the `causeway` tool: pretty-printed, strings
// escaped per RFC 8259 (quote, backslash, control characters as \uXXXX;
// well-formed UTF-8 passes through, any other byte >= 0x80 becomes \ufffd, so
// the output is always valid JSON in UTF-8).
#ifndef CW_TOOLS_JSON_H_
#define CW_TOOLS_JSON_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CW_JSON_MAX_DEPTH 32

typedef struct cw_json_s {
  char* buf;  // NUL-terminated, owned
  size_t len, cap;
  bool failed;  // out of memory or too deep: the text is incomplete
  int depth;
  bool has_items[CW_JSON_MAX_DEPTH];
} cw_json_t;

void cw_json_initialize(cw_json_t* j);
void cw_json_deinitialize(cw_json_t* j);

// `key` names the member inside an object; NULL inside an array or at the top.
void cw_json_begin_object(cw_json_t* j, const char* key);
void cw_json_end_object(cw_json_t* j);
void cw_json_begin_array(cw_json_t* j, const char* key);
void cw_json_end_array(cw_json_t* j);
void cw_json_string(cw_json_t* j, const char* key, const char* value);  // NULL: ""
void cw_json_int(cw_json_t* j, const char* key, int64_t value);
void cw_json_uint(cw_json_t* j, const char* key, uint64_t value);
void cw_json_double(cw_json_t* j, const char* key, double value);  // %.3f; non-finite: null
void cw_json_bool(cw_json_t* j, const char* key, bool value);

#endif  // CW_TOOLS_JSON_H_
