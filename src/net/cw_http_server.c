#include "cw_http_server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_net.h"
#include "cw_net_gate.h"

#define CW__ACCEPTS_PER_PASS 16

typedef struct cw_http_conn_s {
  cw_net_gate_entry_t gate;  // every connection is in the server's gate
  cw_http_server_t* server;
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t write;
  int open_handles;
  bool closing;
  bool responding;
  size_t len;
  char* buf;  // CW_HTTP_SERVER_MAX_REQUEST bytes from the first read
  cw_http_text_t out;
} cw_http_conn_t;

struct cw_http_server_s {
  uv_tcp_t listener;
  bool closing;
  size_t live;  // the listener, the pacer and connections not yet freed
  char address[256];
  cw_net_gate_t gate;
  cw_net_pacer_t pacer;
  cw_http_handler_fn fn;
  void* user;
};

static void cw__server_unref(cw_http_server_t* s) {
  if (--s->live > 0) return;
  cw_net_gate_deinitialize(&s->gate);
  free(s);
}

static void cw__conn_handle_closed(uv_handle_t* h) {
  cw_http_conn_t* c = h->data;
  if (--c->open_handles > 0) return;
  cw_http_server_t* s = c->server;
  cw_http_text_free(&c->out);
  free(c->buf);
  free(c);
  cw__server_unref(s);
}

static void cw__conn_close(cw_http_conn_t* c) {
  if (c->closing) return;
  c->closing = true;
  cw_net_gate_leave(&c->server->gate, &c->gate);
  uv_close((uv_handle_t*)&c->tcp, cw__conn_handle_closed);
  uv_close((uv_handle_t*)&c->timer, cw__conn_handle_closed);
}

static void cw__conn_timeout(uv_timer_t* t) { cw__conn_close(t->data); }

static void cw__conn_written(uv_write_t* req, int status) { cw__conn_close(req->data); }

static const char* cw__reason(int code) {
  switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

void cw_http_response_error(cw_http_response_t* r, int code) {
  r->code = code;
  cw_http_text_printf(&r->body, "%d %s\n", code, cw__reason(code));
}

static void cw__respond(cw_http_conn_t* c, const cw_http_response_t* r, const char* extra_headers,
                        bool head) {
  c->responding = true;
  uv_read_stop((uv_stream_t*)&c->tcp);
  cw_http_text_t out = {0};
  cw_http_text_printf(&out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n", r->code, cw__reason(r->code),
                      r->content_type ? r->content_type : "text/plain; charset=utf-8",
                      r->body.len, extra_headers);
  if (!head && r->body.len) cw_http_text_printf(&out, "%.*s", (int)r->body.len, r->body.data);
  cw_http_text_free(&c->out);
  c->out = out;
  if (c->out.failed) {
    cw__conn_close(c);
    return;
  }
  uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t*)&c->tcp, &b, 1, cw__conn_written) < 0) cw__conn_close(c);
}

static void cw__error(cw_http_conn_t* c, int code, const char* extra) {
  cw_http_response_t r = {0};
  cw_http_response_error(&r, code);
  cw__respond(c, &r, extra, false);
  cw_http_text_free(&r.body);
}

static void cw__request(cw_http_conn_t* c, const cw_http_request_t* req) {
  bool head = !strcmp(req->method, "HEAD");
  if (strcmp(req->method, "GET") && !head) {
    cw__error(c, 405, "Allow: GET, HEAD\r\n");
    return;
  }
  cw_http_response_t r = {.code = 200};
  c->server->fn(c->server->user, req, &r);
  if (r.body.failed) {
    cw_http_text_free(&r.body);
    cw__error(c, 500, "");
    return;
  }
  cw__respond(c, &r, "", head);
  cw_http_text_free(&r.body);
}

static void cw__alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_http_conn_t* c = h->data;
  // Connections that send nothing hold no buffer.
  if (!c->buf) c->buf = malloc(CW_HTTP_SERVER_MAX_REQUEST);
  // Never more than the bound: a full buffer without a head is refused (431)
  // before another read is asked for. Out of memory: an empty buffer, which
  // libuv reports as UV_ENOBUFS (closed).
  *buf = uv_buf_init(c->buf ? c->buf + c->len : NULL,
                     c->buf ? (unsigned)(CW_HTTP_SERVER_MAX_REQUEST - c->len) : 0);
}

static void cw__read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  cw_http_conn_t* c = stream->data;
  if (c->closing || c->responding) return;
  if (nread < 0) {
    cw__conn_close(c);
    return;
  }
  if (nread == 0) return;
  cw_net_gate_progress(&c->server->gate, &c->gate);
  c->len += (size_t)nread;
  cw_http_request_t req;
  switch (cw_http_parse_request(c->buf, c->len, CW_HTTP_SERVER_MAX_REQUEST, &req)) {
    case CW_HTTP_NEED_MORE:
      return;
    case CW_HTTP_OK:
      cw__request(c, &req);
      return;
    case CW_HTTP_TOO_LARGE:
      cw__error(c, 431, "");
      return;
    case CW_HTTP_BAD:
      cw__error(c, 400, "");
      return;
  }
}

static void cw__accept_one(uv_stream_t* listener) {
  cw_http_server_t* s = listener->data;
  cw_http_conn_t* c = calloc(1, sizeof(*c));
  if (!c) {
    cw_net_pacer_retry(&s->pacer);
    return;
  }
  c->server = s;
  uv_tcp_init(listener->loop, &c->tcp);
  uv_timer_init(listener->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
  s->live++;
  if (uv_accept(listener, (uv_stream_t*)&c->tcp) < 0) {
    cw__conn_close(c);
    return;
  }
  struct sockaddr_storage sa;
  int len = sizeof(sa);
  bool named = uv_tcp_getpeername(&c->tcp, (struct sockaddr*)&sa, &len) == 0;
  cw_net_peer_key_from_sockaddr(named ? (const struct sockaddr*)&sa : NULL, &c->gate.peer);
  // Full: the longest-waiting connection of the busiest address goes, those
  // that sent nothing first (idle peers cannot lock a prober out).
  cw_net_gate_entry_t* victim = cw_net_gate_admit(&s->gate, &c->gate);
  if (victim) cw__conn_close((cw_http_conn_t*)((char*)victim - offsetof(cw_http_conn_t, gate)));
  uv_timer_start(&c->timer, cw__conn_timeout, CW_HTTP_SERVER_TIMEOUT_MS, 0);
  if (uv_read_start((uv_stream_t*)&c->tcp, cw__alloc, cw__read) < 0) cw__conn_close(c);
}

static void cw__accept(uv_stream_t* listener, int status) {
  cw_http_server_t* s = listener->data;
  if (status < 0 || s->closing) return;
  if (cw_net_pacer_take(&s->pacer)) cw__accept_one(listener);
}

static void cw__listener_closed(uv_handle_t* h) { cw__server_unref(h->data); }
static void cw__pacer_closed(uv_handle_t* h) {
  cw__server_unref(((cw_net_pacer_t*)h->data)->listener->data);
}

cw_status_t cw_http_server_create(uv_loop_t* loop, const char* address, cw_http_handler_fn fn,
                                  void* user, cw_http_server_t** out_server) {
  *out_server = NULL;
  if (strchr(address, '/')) {
    return cw_make_status(CW_INVALID_ARGUMENT, "http: '%s': the HTTP port listens on host:port "
                          "only, not on a Unix socket path", address);
  }
  struct sockaddr_storage sa;
  CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "http");  // before anything opens
  cw_http_server_t* s = calloc(1, sizeof(*s));
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t gst = cw_net_gate_initialize(&s->gate, CW_HTTP_SERVER_MAX_CONNS,
                                           CW_HTTP_SERVER_MAX_CONNS_PER_PEER);
  if (gst) {
    free(s);
    return gst;
  }
  s->fn = fn;
  s->user = user;
  s->live = 2;
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  cw_net_pacer_initialize(&s->pacer, loop, (uv_stream_t*)&s->listener, CW__ACCEPTS_PER_PASS,
                          cw__accept_one, "HTTP port: ");
  cw_status_t lst = cw_net_tcp_listen(&s->listener, address, cw__accept, s->address,
                                      sizeof(s->address));
  if (lst) {
    cw_http_server_close(s);
    return lst;
  }
  *out_server = s;
  return cw_ok_status();
}

const char* cw_http_server_address(const cw_http_server_t* s) { return s->address; }

void cw_http_server_close(cw_http_server_t* s) {
  if (!s || s->closing) return;
  s->closing = true;
  while (s->gate.silent_head || s->gate.active_head) {
    cw_net_gate_entry_t* e = s->gate.silent_head ? s->gate.silent_head : s->gate.active_head;
    cw__conn_close((cw_http_conn_t*)((char*)e - offsetof(cw_http_conn_t, gate)));
  }
  uv_close((uv_handle_t*)&s->listener, cw__listener_closed);
  cw_net_pacer_close(&s->pacer, cw__pacer_closed);
}
