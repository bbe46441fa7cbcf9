// A minimal HTTP/1.x request-head parser for the daemons' GET-only HTTP
// endpoints (cw_http_server.h: metrics, health). Pure (no I/O): the caller
// buffers bytes up to a bound and asks whether a complete, well-formed
// request head has arrived.
#ifndef CW_NET_HTTP_H_
#define CW_NET_HTTP_H_

#include <stddef.h>

#define CW_HTTP_MAX_METHOD 15
#define CW_HTTP_MAX_PATH 255

typedef enum cw_http_parse_e {
  CW_HTTP_NEED_MORE = 0,  // no blank line yet, still under the bound
  CW_HTTP_OK,             // out_request is filled
  CW_HTTP_BAD,            // malformed request line or header bytes
  CW_HTTP_TOO_LARGE,      // no complete head within `max` bytes
} cw_http_parse_t;

typedef struct cw_http_request_s {
  char method[CW_HTTP_MAX_METHOD + 1];
  char path[CW_HTTP_MAX_PATH + 1];  // the target without its query string
} cw_http_request_t;

// Parses the head in buf[0..len). Only the first `max` bytes are examined.
cw_http_parse_t cw_http_parse_request(const char* buf, size_t len, size_t max,
                                      cw_http_request_t* out_request);

// A growable text buffer for rendering responses.
typedef struct cw_http_text_s {
  char* data;  // owned, NUL-terminated
  size_t len, cap;
  int failed;  // out of memory: the text is incomplete
} cw_http_text_t;

void cw_http_text_printf(cw_http_text_t* t, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Appends `value` escaped as a Prometheus label value (backslash, double
// quote, newline), without the quotes.
void cw_http_text_label(cw_http_text_t* t, const char* value);
void cw_http_text_free(cw_http_text_t* t);

#endif  // CW_NET_HTTP_H_
