#include "cw_json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cw_json_initialize(cw_json_t* j) { memset(j, 0, sizeof(*j)); }

void cw_json_deinitialize(cw_json_t* j) {
  free(j->buf);
  memset(j, 0, sizeof(*j));
}

static void cw__put(cw_json_t* j, const char* s, size_t n) {
  if (j->failed) return;
  if (j->len + n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 256;
    while (cap < j->len + n + 1) cap *= 2;
    char* grown = realloc(j->buf, cap);
    if (!grown) {
      j->failed = true;
      return;
    }
    j->buf = grown;
    j->cap = cap;
  }
  memcpy(j->buf + j->len, s, n);
  j->len += n;
  j->buf[j->len] = 0;
}

static void cw__putf(cw_json_t* j, const char* fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0) cw__put(j, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

// Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), 0 if none
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
static size_t cw__utf8_len(const unsigned char* p) {
  size_t n;
  unsigned lo = 0x80, hi = 0xBF;
  if (p[0] >= 0xC2 && p[0] <= 0xDF) n = 2;
  else if (p[0] >= 0xE0 && p[0] <= 0xEF) n = 3;
  else if (p[0] >= 0xF0 && p[0] <= 0xF4) n = 4;
  else return 0;
  if (p[0] == 0xE0) lo = 0xA0;
  if (p[0] == 0xED) hi = 0x9F;
  if (p[0] == 0xF0) lo = 0x90;
  if (p[0] == 0xF4) hi = 0x8F;
  if (p[1] < lo || p[1] > hi) return 0;  // also stops at the terminating NUL
  for (size_t i = 2; i < n; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return n;
}

static void cw__quoted(cw_json_t* j, const char* s) {
  cw__put(j, "\"", 1);
  for (const unsigned char* p = (const unsigned char*)(s ? s : ""); *p; ++p) {
    switch (*p) {
      case '"': cw__put(j, "\\\"", 2); break;
      case '\\': cw__put(j, "\\\\", 2); break;
      case '\n': cw__put(j, "\\n", 2); break;
      case '\r': cw__put(j, "\\r", 2); break;
      case '\t': cw__put(j, "\\t", 2); break;
      case '\b': cw__put(j, "\\b", 2); break;
      case '\f': cw__put(j, "\\f", 2); break;
      default:
        if (*p < 0x20 || *p == 0x7f) {
          cw__putf(j, "\\u%04x", *p);
        } else if (*p < 0x80) {
          cw__put(j, (const char*)p, 1);
        } else {
          size_t n = cw__utf8_len(p);
          if (n) {
            cw__put(j, (const char*)p, n);
            p += n - 1;
          } else {
            cw__put(j, "\\ufffd", 6);  // not UTF-8: the replacement character
          }
        }
    }
  }
  cw__put(j, "\"", 1);
}

// Separator, newline and indentation before a value, then its key.
static void cw__item(cw_json_t* j, const char* key) {
  if (j->depth > 0) {
    if (j->has_items[j->depth - 1]) cw__put(j, ",", 1);
    j->has_items[j->depth - 1] = true;
    cw__put(j, "\n", 1);
    for (int i = 0; i < j->depth; ++i) cw__put(j, "  ", 2);
  }
  if (key) {
    cw__quoted(j, key);
    cw__put(j, ": ", 2);
  }
}

static void cw__open(cw_json_t* j, const char* key, const char* bracket) {
  cw__item(j, key);
  cw__put(j, bracket, 1);
  if (j->depth >= CW_JSON_MAX_DEPTH) {
    j->failed = true;
    return;
  }
  j->has_items[j->depth++] = false;
}

static void cw__close(cw_json_t* j, const char* bracket) {
  if (j->depth <= 0) {
    j->failed = true;
    return;
  }
  bool had = j->has_items[--j->depth];
  if (had) {
    cw__put(j, "\n", 1);
    for (int i = 0; i < j->depth; ++i) cw__put(j, "  ", 2);
  }
  cw__put(j, bracket, 1);
  if (j->depth == 0) cw__put(j, "\n", 1);
}

void cw_json_begin_object(cw_json_t* j, const char* key) { cw__open(j, key, "{"); }
void cw_json_end_object(cw_json_t* j) { cw__close(j, "}"); }
void cw_json_begin_array(cw_json_t* j, const char* key) { cw__open(j, key, "["); }
void cw_json_end_array(cw_json_t* j) { cw__close(j, "]"); }

void cw_json_string(cw_json_t* j, const char* key, const char* value) {
  cw__item(j, key);
  cw__quoted(j, value);
}

void cw_json_int(cw_json_t* j, const char* key, int64_t value) {
  cw__item(j, key);
  cw__putf(j, "%" PRId64, value);
}

void cw_json_uint(cw_json_t* j, const char* key, uint64_t value) {
  cw__item(j, key);
  cw__putf(j, "%" PRIu64, value);
}

void cw_json_double(cw_json_t* j, const char* key, double value) {
  cw__item(j, key);
  if (isfinite(value)) cw__putf(j, "%.3f", value);  // rates: 3 decimals are plenty
  else cw__put(j, "null", 4);
}

void cw_json_bool(cw_json_t* j, const char* key, bool value) {
  cw__item(j, key);
  if (value) cw__put(j, "true", 4);
  else cw__put(j, "false", 5);
}
