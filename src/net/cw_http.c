#include "cw_http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The end of the head: the first empty line (CRLF CRLF, or bare LF LF as
// lenient servers accept). Returns the offset just past it, 0 if none.
static size_t cw__head_end(const char* buf, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    if (buf[i] != '\n') continue;
    if (i + 1 < len && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return 0;
}

cw_http_parse_t cw_http_parse_request(const char* buf, size_t len, size_t max,
                                      cw_http_request_t* out) {
  memset(out, 0, sizeof(*out));
  if (len > max) len = max;
  size_t end = cw__head_end(buf, len);
  // Header bytes: printable ASCII, tab, CR, LF only. Without the end of the
  // head every byte so far is head, so a peer that sends something else
  // (a causeway frame, a TLS ClientHello, binary junk) is refused at once
  // rather than holding the connection until its deadline.
  for (size_t i = 0; i < (end ? end : len); ++i) {
    unsigned char ch = (unsigned char)buf[i];
    if (ch >= 0x7f || (ch < 0x20 && ch != '\t' && ch != '\r' && ch != '\n')) return CW_HTTP_BAD;
  }
  if (!end) {
    if (len && (buf[0] < 'A' || buf[0] > 'Z')) return CW_HTTP_BAD;  // no method starts so
    return len >= max ? CW_HTTP_TOO_LARGE : CW_HTTP_NEED_MORE;
  }
  // Request line: METHOD SP target SP HTTP/1.x (CR)LF
  size_t i = 0, n = 0;
  while (i < end && buf[i] >= 'A' && buf[i] <= 'Z') {
    if (n >= CW_HTTP_MAX_METHOD) return CW_HTTP_BAD;
    out->method[n++] = buf[i++];
  }
  if (n == 0 || i >= end || buf[i] != ' ') return CW_HTTP_BAD;
  i++;
  n = 0;
  int in_query = 0;
  while (i < end && buf[i] != ' ' && buf[i] != '\r' && buf[i] != '\n') {
    if (buf[i] == '?' || buf[i] == '#') in_query = 1;
    if (!in_query) {
      if (n >= CW_HTTP_MAX_PATH) return CW_HTTP_BAD;
      out->path[n++] = buf[i];
    }
    i++;
  }
  if (n == 0 || out->path[0] != '/' || i >= end || buf[i] != ' ') return CW_HTTP_BAD;
  i++;
  static const char kVersion[] = "HTTP/1.";
  if (end - i < sizeof(kVersion) || memcmp(buf + i, kVersion, sizeof(kVersion) - 1) != 0) {
    return CW_HTTP_BAD;
  }
  i += sizeof(kVersion) - 1;
  if (buf[i] != '0' && buf[i] != '1') return CW_HTTP_BAD;
  i++;
  if (i < end && buf[i] == '\r') i++;
  if (i >= end || buf[i] != '\n') return CW_HTTP_BAD;
  return CW_HTTP_OK;
}

static int cw__text_reserve(cw_http_text_t* t, size_t more) {
  if (t->failed) return 0;
  if (t->len + more + 1 <= t->cap) return 1;
  size_t cap = t->cap ? t->cap : 4096;
  while (cap < t->len + more + 1) cap *= 2;
  char* grown = realloc(t->data, cap);
  if (!grown) {
    t->failed = 1;
    return 0;
  }
  t->data = grown;
  t->cap = cap;
  return 1;
}

void cw_http_text_printf(cw_http_text_t* t, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n >= 0 && cw__text_reserve(t, (size_t)n)) {
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap2);
    t->len += (size_t)n;
  }
  va_end(ap2);
}

void cw_http_text_label(cw_http_text_t* t, const char* value) {
  size_t n = strlen(value);
  if (!cw__text_reserve(t, 2 * n)) return;
  for (size_t i = 0; i < n; ++i) {
    char ch = value[i];
    if (ch == '\\' || ch == '"') {
      t->data[t->len++] = '\\';
      t->data[t->len++] = ch;
    } else if (ch == '\n') {
      t->data[t->len++] = '\\';
      t->data[t->len++] = 'n';
    } else {
      t->data[t->len++] = ch;
    }
  }
  t->data[t->len] = 0;
}

void cw_http_text_free(cw_http_text_t* t) {
  free(t->data);
  memset(t, 0, sizeof(*t));
}
