// A GET-only HTTP/1.x server on a daemon's own libuv loop (no thread): the
// controller's metrics and both daemons' health endpoints (/healthz,
// /readyz) for orchestrators' probes. The daemon answers each request with a
// handler that fills a response; everything else is here.
//
// An HTTP peer cannot stall or crash the loop: the request head is bounded
// (CW_HTTP_SERVER_MAX_REQUEST bytes, else 431; the buffer is allocated at
// the first byte), each connection has a deadline (CW_HTTP_SERVER_TIMEOUT_MS
// from accept to the end of the response, then it is closed), at most
// CW_HTTP_SERVER_MAX_CONNS are open and CW_HTTP_SERVER_MAX_CONNS_PER_PEER
// from one address (a new one closes the longest waiting, those that sent
// nothing first: cw_net_gate.h), accepts are paced, writes are asynchronous,
// and the parser (cw_http.c) is fuzzed. Anything but GET/HEAD gets 405 without reaching the
// handler; a malformed head 400. One request per connection (Connection:
// close).
#ifndef CW_NET_HTTP_SERVER_H_
#define CW_NET_HTTP_SERVER_H_

#include <stdint.h>
#include <uv.h>

#include "cw_http.h"
#include "cw_status.h"

#define CW_HTTP_SERVER_MAX_REQUEST 8192
#define CW_HTTP_SERVER_TIMEOUT_MS 5000
#define CW_HTTP_SERVER_MAX_CONNS 512
#define CW_HTTP_SERVER_MAX_CONNS_PER_PEER 256

typedef struct cw_http_server_s cw_http_server_t;

// What a handler answers: the status code (200 when left alone), a content
// type (static storage; NULL: text/plain) and the body it appends to.
typedef struct cw_http_response_s {
  int code;
  const char* content_type;
  cw_http_text_t body;
} cw_http_response_t;

// Answers a GET or HEAD of request->path (the server drops the body of a
// HEAD). Runs on the loop thread; `user` is create's.
typedef void (*cw_http_handler_fn)(void* user, const cw_http_request_t* request,
                                   cw_http_response_t* out_response);

// Listens on `address` (host:port; port 0 picks one) on `loop`. On failure
// *out_server is NULL and whatever was opened closes as the loop runs.
CW_MUST_USE cw_status_t cw_http_server_create(uv_loop_t* loop, const char* address,
                                              cw_http_handler_fn fn, void* user,
                                              cw_http_server_t** out_server);
// host:port as bound (the port resolved).
const char* cw_http_server_address(const cw_http_server_t* server);
// Closes the listener and every connection; the server frees itself once
// the loop has closed their handles. Takes `server` (NULL: nothing).
void cw_http_server_close(cw_http_server_t* server);

// A response body of `code` and its reason phrase, e.g. "404 Not Found\n".
void cw_http_response_error(cw_http_response_t* response, int code);

#endif  // CW_NET_HTTP_SERVER_H_
