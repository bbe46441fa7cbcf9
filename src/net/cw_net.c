// Framed connections on a libuv loop (see cw_net.h). Loop phases touched:
//   poll I/O: accept, connect, reads (parsed up to frames-per-wakeup frames;
//     reply bulk is read straight into its buffer), write completions;
//   idle: connections that hit the frame cap resume parsing here, so one busy
//     peer cannot starve the others;
//   close callbacks: memory goes once both handles are closed and no owner
//     holds a reference.
#include "cw_net.h"

#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_messages.h"

#define CW__READAHEAD (64 * 1024)

typedef struct cw_net_outreq_s {
  struct cw_net_outreq_s* next;
  uint64_t request_id;
  uint16_t type;
  cw_net_reply_fn fn;
  void* user;
} cw_net_outreq_t;

struct cw_net_conn_s {
  cw_net_conn_t* prev;
  cw_net_conn_t* next;
  cw_net_t* net;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t timer;  // HELLO or connect deadline
  uv_connect_t connect_req;
  int refs;
  bool closing;
  bool outbound;
  bool connected;
  bool close_after_write;
  bool reading;
  bool paused;
  cw_net_conn_t* resume_next;
  char name[128];
  cw_conn_parser_t parser;
  uint8_t* readahead;
  size_t ra_off, ra_len;
  size_t writes_pending;
  cw_net_conn_callbacks_t cb;
  void* user;
  cw_net_outreq_t* outreqs;
  cw_net_outreq_t* outreqs_tail;  // the last of outreqs: requests append in O(1)
  uint64_t next_request_id;
  // A reply whose bulk bytes are arriving.
  cw_net_outreq_t* recv_req;
  ProtobufCMessage* recv_msg;
  uint8_t* recv_bulk;
  // Bulk of an inbound request the owner asked for.
  bool recv_owner_bulk;
};

static void cw__conn_process(cw_net_conn_t* c);
static void cw__conn_start_reading(cw_net_conn_t* c);

// --- Lifetime -------------------------------------------------------------------

static void cw__conn_free(cw_net_conn_t* c) {
  cw_conn_parser_deinitialize(&c->parser);
  free(c->readahead);
  free(c);
}

void cw_net_conn_retain(cw_net_conn_t* c) { c->refs++; }

void cw_net_conn_release(cw_net_conn_t* c) {
  if (c && --c->refs == 0) cw__conn_free(c);
}

static void cw__handle_closed(uv_handle_t* h) { cw_net_conn_release((cw_net_conn_t*)h->data); }

static void cw__fail_outreqs(cw_net_conn_t* c, cw_status_t reason) {
  if (c->recv_req) {
    cw_net_outreq_t* r = c->recv_req;
    c->recv_req = NULL;
    protobuf_c_message_free_unpacked(c->recv_msg, NULL);
    free(c->recv_bulk);
    c->recv_msg = NULL;
    c->recv_bulk = NULL;
    r->next = c->outreqs;
    c->outreqs = r;
  }
  c->outreqs_tail = NULL;  // every one completes below
  while (c->outreqs) {
    cw_net_outreq_t* r = c->outreqs;
    c->outreqs = r->next;
    r->fn(r->user, c,
          cw_make_status(CW_UNAVAILABLE, "connection to %s closed%s%s", c->name,
                         reason ? ": " : "", reason ? cw_status_message(reason) : ""),
          NULL, NULL, 0);
    free(r);
  }
}

void cw_net_conn_close(cw_net_conn_t* c, cw_status_t reason) {
  if (c->closing) {
    cw_status_free(reason);
    return;
  }
  c->closing = true;
  cw_net_t* net = c->net;
  CW_LOGD("%s: closed%s%s", c->name, reason ? ": " : "", reason ? cw_status_message(reason) : "");
  if (c->reading) uv_read_stop(&c->h.stream);
  c->reading = false;
  if (c->prev) c->prev->next = c->next;
  else if (net->conns == c) net->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  if (!c->outbound) net->inbound_connections--;
  uv_close(&c->h.handle, cw__handle_closed);
  uv_close((uv_handle_t*)&c->timer, cw__handle_closed);
  cw__fail_outreqs(c, reason);
  if (c->cb.on_close) c->cb.on_close(c, reason);
  cw_status_free(reason);
}

static cw_net_conn_t* cw__conn_create(cw_net_t* net, bool outbound, bool pipe) {
  cw_net_conn_t* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->readahead = malloc(CW__READAHEAD);
  if (!c->readahead) {
    free(c);
    return NULL;
  }
  c->net = net;
  c->outbound = outbound;
  c->next_request_id = 1;
  cw_conn_parser_initialize(&c->parser, outbound ? &net->limits : &net->prehello_limits);
  int rc = pipe ? uv_pipe_init(net->loop, &c->h.pipe, 0) : uv_tcp_init(net->loop, &c->h.tcp);
  if (rc < 0) {
    cw__conn_free(c);
    return NULL;
  }
  uv_timer_init(net->loop, &c->timer);
  c->h.handle.data = c;
  c->timer.data = c;
  c->refs = 2;  // one per handle; dropped by the close callbacks
  c->next = net->conns;
  if (net->conns) net->conns->prev = c;
  net->conns = c;
  if (!outbound) net->inbound_connections++;
  return c;
}

void cw_net_conn_set_callbacks(cw_net_conn_t* c, const cw_net_conn_callbacks_t* cb, void* user) {
  c->cb = *cb;
  c->user = user;
}
void* cw_net_conn_user(const cw_net_conn_t* c) { return c->user; }
cw_net_t* cw_net_conn_net(const cw_net_conn_t* c) { return c->net; }
const char* cw_net_conn_name(const cw_net_conn_t* c) { return c->name; }
bool cw_net_conn_is_open(const cw_net_conn_t* c) { return c && !c->closing; }

void cw_net_conn_set_name(cw_net_conn_t* c, const char* name) {
  // Names may be peer-chosen: keep them short and printable.
  size_t n = 0;
  for (const char* p = name; *p && n + 1 < 64; ++p) c->name[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
  c->name[n] = 0;
}

void cw_net_conn_hello_done(cw_net_conn_t* c) {
  uv_timer_stop(&c->timer);
  cw_conn_parser_set_limits(&c->parser, &c->net->limits);
}

void cw_net_conn_set_bulk_dest(cw_net_conn_t* c, uint8_t* dest) {
  cw_conn_parser_set_bulk_dest(&c->parser, dest);
  c->recv_owner_bulk = dest != NULL;
}

// --- Writing --------------------------------------------------------------------

typedef struct cw__write_s {
  uv_write_t req;
  cw_net_conn_t* conn;
  uint8_t header[CW_FRAME_HEADER_SIZE];
  uint8_t* payload;
  cw_net_free_fn bulk_free;
  void* bulk_user;
} cw__write_t;

static void cw__write_done(uv_write_t* req, int status) {
  cw__write_t* wr = (cw__write_t*)req;
  cw_net_conn_t* c = wr->conn;
  free(wr->payload);
  if (wr->bulk_free) wr->bulk_free(wr->bulk_user);
  free(wr);
  c->writes_pending--;
  if (status < 0 && !c->closing) {
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "write failed: %s", uv_strerror(status)));
  } else if (c->close_after_write && c->writes_pending == 0) {
    cw_net_conn_close(c, NULL);
  }
  cw_net_conn_release(c);
}

void cw_net_conn_send(cw_net_conn_t* c, uint16_t type, uint32_t flags, uint64_t request_id,
                      const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len,
                      cw_net_free_fn bulk_free, void* bulk_user) {
  if (c->closing) {
    if (bulk_free) bulk_free(bulk_user);
    return;
  }
  cw__write_t* wr = calloc(1, sizeof(*wr));
  size_t plen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
  uint8_t* payload = malloc(plen ? plen : 1);
  if (!wr || !payload || plen > UINT32_MAX) {
    free(wr);
    free(payload);
    if (bulk_free) bulk_free(bulk_user);
    cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory sending a %s frame",
                                        cw_msg_type_name(type)));
    return;
  }
  if (plen) protobuf_c_message_pack(msg, payload);
  cw_frame_header_t h = {CW_FRAME_MAGIC, CW_PROTOCOL_VERSION, type, flags, (uint32_t)plen,
                         request_id, bulk_len};
  cw_frame_header_encode(&h, wr->header);
  wr->conn = c;
  wr->payload = payload;
  wr->bulk_free = bulk_free;
  wr->bulk_user = bulk_user;
  uv_buf_t bufs[3];
  unsigned n = 0;
  bufs[n++] = uv_buf_init((char*)wr->header, CW_FRAME_HEADER_SIZE);
  if (plen) bufs[n++] = uv_buf_init((char*)payload, (unsigned)plen);
  if (bulk_len) {
    bufs[n].base = (char*)(uintptr_t)bulk;
    bufs[n].len = (size_t)bulk_len;
    n++;
  }
  int rc = uv_write(&wr->req, &c->h.stream, bufs, n, cw__write_done);
  if (rc < 0) {
    free(payload);
    free(wr);
    if (bulk_free) bulk_free(bulk_user);
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "write failed: %s", uv_strerror(rc)));
    return;
  }
  cw_net_conn_retain(c);
  c->writes_pending++;
}

void cw_net_conn_reply(cw_net_conn_t* c, uint16_t type, uint64_t request_id,
                       const ProtobufCMessage* msg) {
  cw_net_conn_send(c, type, CW_FRAME_REPLY, request_id, msg, NULL, 0, NULL, NULL);
}

void cw_net_conn_reply_error(cw_net_conn_t* c, uint16_t type, uint64_t request_id,
                             cw_status_t status) {
  Causeway__V1__ErrorReply er;
  cw_error_reply_fill(&er, status);
  CW_LOGD("%s: %s #%" PRIu64 " -> %s: %s", c->name, cw_msg_type_name(type), request_id,
          cw_status_code_name(cw_status_code(status)), cw_status_message(status));
  cw_net_conn_send(c, type, CW_FRAME_REPLY | CW_FRAME_ERROR, request_id, &er.base, NULL, 0, NULL,
                   NULL);
  cw_status_free(status);
}

void cw_net_conn_violation(cw_net_conn_t* c, uint16_t type, uint64_t request_id,
                           cw_status_t status) {
  CW_LOGW("%s: closing: %s", c->name, cw_status_message(status));
  if (type < 1 || type > CW_MSG_TYPE_MAX) type = CW_MSG_HELLO;
  if (c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  }
  c->close_after_write = true;
  cw_net_conn_reply_error(c, type, request_id, status);
  if (c->writes_pending == 0) cw_net_conn_close(c, NULL);
}

void cw_net_conn_request(cw_net_conn_t* c, uint16_t type, const ProtobufCMessage* msg,
                         const void* bulk, uint64_t bulk_len, cw_net_free_fn bulk_free,
                         void* bulk_user, cw_net_reply_fn fn, void* user) {
  cw_net_outreq_t* r = c->closing ? NULL : calloc(1, sizeof(*r));
  if (!r) {
    if (bulk_free) bulk_free(bulk_user);
    fn(user, c,
       c->closing ? cw_make_status(CW_UNAVAILABLE, "connection to %s is closed", c->name)
                  : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"),
       NULL, NULL, 0);
    return;
  }
  r->request_id = c->next_request_id++;
  r->type = type;
  r->fn = fn;
  r->user = user;
  // Append: replies mostly come in order.
  if (c->outreqs_tail) c->outreqs_tail->next = r;
  else c->outreqs = r;
  c->outreqs_tail = r;
  // A failed write closes the connection, which completes r.
  cw_net_conn_send(c, type, 0, r->request_id, msg, bulk, bulk_len, bulk_free, bulk_user);
}

// --- Reading --------------------------------------------------------------------

static void cw__alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_net_conn_t* c = h->data;
  uint8_t* ptr;
  uint64_t len;
  // Bulk bytes go straight into their destination.
  if (cw_conn_parser_bulk_window(&c->parser, &ptr, &len) && len >= 4096) {
    buf->base = (char*)ptr;
    buf->len = len > (1u << 30) ? (1u << 30) : (size_t)len;
    return;
  }
  buf->base = (char*)c->readahead;
  buf->len = CW__READAHEAD;
}

static void cw__reply_complete(cw_net_conn_t* c, cw_net_outreq_t* r, const cw_frame_header_t* h,
                               const ProtobufCMessage* msg, uint8_t* bulk) {
  cw_status_t st = cw_ok_status();
  if (h->flags & CW_FRAME_ERROR) {
    st = cw_error_reply_to_status((const Causeway__V1__ErrorReply*)msg, NULL);
    free(bulk);
    bulk = NULL;
  }
  r->fn(r->user, c, st, st ? NULL : msg, bulk, bulk ? h->bulk_len : 0);
  free(r);
}

static void cw__bulk_done(cw_net_conn_t* c, const cw_frame_header_t* h) {
  if (c->recv_req) {
    cw_net_outreq_t* r = c->recv_req;
    ProtobufCMessage* msg = c->recv_msg;
    uint8_t* bulk = c->recv_bulk;
    c->recv_req = NULL;
    c->recv_msg = NULL;
    c->recv_bulk = NULL;
    cw__reply_complete(c, r, h, msg, bulk);
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  if (c->recv_owner_bulk) {
    c->recv_owner_bulk = false;
    if (c->cb.on_bulk_done) c->cb.on_bulk_done(c, h);
  }
}

static void cw__on_reply(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  if (h->request_id == 0 && (h->flags & CW_FRAME_ERROR)) {
    // The peer could not read one of our frames and is closing.
    cw_status_t st = cw_error_reply_peer_closing((const Causeway__V1__ErrorReply*)msg);
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_close(c, st);
    return;
  }
  cw_net_outreq_t** pp = &c->outreqs;
  cw_net_outreq_t* prev = NULL;
  while (*pp && (*pp)->request_id != h->request_id) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  cw_net_outreq_t* r = *pp;
  if (!r || r->type != h->type) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "%s reply to unknown request %" PRIu64,
                                        cw_msg_type_name(h->type), h->request_id));
    return;
  }
  *pp = r->next;
  if (c->outreqs_tail == r) c->outreqs_tail = prev;
  r->next = NULL;
  if (h->bulk_len) {
    uint8_t* bulk = malloc((size_t)h->bulk_len);
    if (!bulk) {
      r->next = c->outreqs;  // failed by the close
      c->outreqs = r;
      if (!r->next) c->outreqs_tail = r;
      protobuf_c_message_free_unpacked(msg, NULL);
      cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED,
                                          "cannot allocate %" PRIu64 " bytes for a %s reply",
                                          h->bulk_len, cw_msg_type_name(h->type)));
      return;
    }
    c->recv_req = r;
    c->recv_msg = msg;
    c->recv_bulk = bulk;
    cw_conn_parser_set_bulk_dest(&c->parser, bulk);
    return;
  }
  cw__reply_complete(c, r, h, msg, NULL);
  protobuf_c_message_free_unpacked(msg, NULL);
}

static void cw__on_frame(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  if (h->flags & CW_FRAME_REPLY) {
    cw__on_reply(c, h, msg);
    return;
  }
  cw_status_t st = cw_conn_parser_check_bulk(h, msg);
  if (st) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_violation(c, h->type, h->request_id, st);
    return;
  }
  c->recv_owner_bulk = false;
  if (c->cb.on_frame) {
    c->cb.on_frame(c, h, msg);
  } else {
    protobuf_c_message_free_unpacked(msg, NULL);
  }
}

static void cw__on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  cw_net_conn_t* c = stream->data;
  if (nread == 0) return;
  if (nread < 0) {
    cw_net_conn_close(c, nread == UV_EOF ? cw_make_status(CW_UNAVAILABLE, "connection closed by peer")
                                         : cw_make_status(CW_UNAVAILABLE, "read failed: %s",
                                                          uv_strerror((int)nread)));
    return;
  }
  cw_net_conn_retain(c);
  if ((uint8_t*)buf->base != c->readahead) {
    cw_conn_parser_event_t ev;
    cw_conn_parser_bulk_advance(&c->parser, (uint64_t)nread, &ev);
    if (ev.kind == CW_CONN_PARSER_EVENT_BULK_DONE) cw__bulk_done(c, &ev.header);
  } else {
    c->ra_off = 0;
    c->ra_len = (size_t)nread;
    cw__conn_process(c);
  }
  cw_net_conn_release(c);
}

static void cw__on_idle(uv_idle_t* idle) {
  cw_net_t* net = idle->data;
  cw_net_conn_t* list = net->resume_list;
  net->resume_list = NULL;
  uv_idle_stop(&net->idle);
  while (list) {
    cw_net_conn_t* c = list;
    list = c->resume_next;
    c->resume_next = NULL;
    c->paused = false;
    if (!c->closing) cw__conn_process(c);
    cw_net_conn_release(c);  // the resume list's reference
  }
}

// Parses buffered bytes, at most frames-per-wakeup frames, then yields.
static void cw__conn_process(cw_net_conn_t* c) {
  cw_net_t* net = c->net;
  int64_t frames = 0;
  while (c->ra_off < c->ra_len && !c->closing && !c->close_after_write) {
    if (frames >= net->frames_per_wakeup) {
      if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
      }
      if (!c->paused) {
        c->paused = true;
        cw_net_conn_retain(c);
        c->resume_next = net->resume_list;
        net->resume_list = c;
        uv_idle_start(&net->idle, cw__on_idle);
      }
      return;
    }
    size_t used = 0;
    cw_conn_parser_event_t ev;
    cw_conn_parser_feed(&c->parser, c->readahead + c->ra_off, c->ra_len - c->ra_off, &used, &ev);
    c->ra_off += used;
    switch (ev.kind) {
      case CW_CONN_PARSER_EVENT_NONE:
        break;
      case CW_CONN_PARSER_EVENT_FRAME:
        frames++;
        cw__on_frame(c, &ev.header, ev.msg);
        break;
      case CW_CONN_PARSER_EVENT_BULK_DONE:
        cw__bulk_done(c, &ev.header);
        break;
      case CW_CONN_PARSER_EVENT_ERROR:
        if (c->outbound) {
          cw_net_conn_close(c, cw_status_annotate(ev.status, "protocol violation from peer"));
        } else {
          cw_net_conn_violation(c, ev.header.type, ev.header.request_id, ev.status);
        }
        return;
    }
  }
  c->ra_off = c->ra_len = 0;
  if (!c->closing && !c->close_after_write && !c->reading) cw__conn_start_reading(c);
}

static void cw__conn_start_reading(cw_net_conn_t* c) {
  int rc = uv_read_start(&c->h.stream, cw__alloc, cw__on_read);
  if (rc < 0) {
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "cannot read: %s", uv_strerror(rc)));
    return;
  }
  c->reading = true;
}

// --- Addresses, listening, connecting -------------------------------------------

cw_status_t cw_net_parse_host_port(const char* address, struct sockaddr_storage* out) {
  memset(out, 0, sizeof(*out));
  const char* colon = strrchr(address, ':');
  if (!colon || colon == address || !colon[1]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "address '%s' is not host:port or a socket path",
                          address);
  }
  char host[256];
  size_t hl = (size_t)(colon - address);
  if (hl >= sizeof(host)) return cw_make_status(CW_INVALID_ARGUMENT, "host name too long");
  memcpy(host, address, hl);
  host[hl] = 0;
  char* h = host;
  if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
    h[hl - 1] = 0;
    h++;
  }
  char* end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!end || *end || port < 0 || port > 65535) {
    return cw_make_status(CW_INVALID_ARGUMENT, "bad port in '%s'", address);
  }
  if (uv_ip4_addr(h, (int)port, (struct sockaddr_in*)out) == 0) return cw_ok_status();
  if (uv_ip6_addr(h, (int)port, (struct sockaddr_in6*)out) == 0) return cw_ok_status();
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(h, NULL, &hints, &res);
  if (rc || !res) {
    return cw_make_status(CW_UNAVAILABLE, "cannot resolve '%s': %s", h, gai_strerror(rc));
  }
  memcpy(out, res->ai_addr, res->ai_addrlen);
  if (out->ss_family == AF_INET) ((struct sockaddr_in*)out)->sin_port = htons((uint16_t)port);
  else ((struct sockaddr_in6*)out)->sin6_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return cw_ok_status();
}

static void cw__hello_timeout(uv_timer_t* t) {
  cw_net_conn_t* c = t->data;
  if (c->closing) return;
  CW_LOGW("%s: no HELLO in time; closing", c->name);
  cw_net_conn_close(c, cw_make_status(CW_DEADLINE_EXCEEDED, "no HELLO in time"));
}

static void cw__on_connection(uv_stream_t* server, int status) {
  cw_net_t* net = server->data;
  if (status < 0) {
    CW_LOGW("accept failed: %s", uv_strerror(status));
    return;
  }
  cw_net_conn_t* c = cw__conn_create(net, false, net->is_pipe);
  if (!c) {
    CW_LOGE("out of memory accepting a connection");
    return;
  }
  if (uv_accept(server, &c->h.stream) < 0) {
    cw_net_conn_close(c, NULL);
    return;
  }
  uv_os_fd_t peer_fd = -1;
  if (uv_fileno(&c->h.handle, &peer_fd) != 0) peer_fd = -1;
  cw_net_describe_unix_peer(peer_fd, c->name, sizeof(c->name));
  if (!net->is_pipe) {
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr*)&sa, &len) == 0) {
      char ip[64] = "?";
      int port = 0;
      if (sa.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in*)&sa, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in*)&sa)->sin_port);
      } else if (sa.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6*)&sa, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6*)&sa)->sin6_port);
      }
      snprintf(c->name, sizeof(c->name), "%s:%d", ip, port);
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
  }
  if ((int64_t)net->inbound_connections > net->max_connections) {
    CW_LOGW("%s: too many connections; refusing", c->name);
    cw_net_conn_close(c, NULL);
    return;
  }
  uv_timer_start(&c->timer, cw__hello_timeout, (uint64_t)net->hello_timeout_ms, 0);
  net->on_accept(net, c);
  if (!c->closing) cw__conn_start_reading(c);
}

void cw_net_initialize(cw_net_t* net, uv_loop_t* loop, const cw_frame_limits_t* prehello_limits,
                       const cw_frame_limits_t* limits, int64_t frames_per_wakeup,
                       int64_t max_connections, int64_t hello_timeout_ms) {
  memset(net, 0, sizeof(*net));
  net->loop = loop;
  net->prehello_limits = *prehello_limits;
  net->limits = *limits;
  net->frames_per_wakeup = frames_per_wakeup > 0 ? frames_per_wakeup : 1;
  net->max_connections = max_connections;
  net->hello_timeout_ms = hello_timeout_ms;
  uv_idle_init(loop, &net->idle);
  net->idle.data = net;
}

void cw_net_deinitialize(cw_net_t* net) {
  if (net->listening) {
    uv_close(&net->listener.handle, NULL);
    net->listening = false;
    if (net->unix_path) unlink(net->unix_path);
  }
  free(net->unix_path);
  net->unix_path = NULL;
  while (net->conns) cw_net_conn_close(net->conns, NULL);
  if (!uv_is_closing((uv_handle_t*)&net->idle)) uv_close((uv_handle_t*)&net->idle, NULL);
}

cw_status_t cw_net_listen(cw_net_t* net, const char* address, cw_net_accept_fn on_accept) {
  int rc;
  net->on_accept = on_accept;
  if (strchr(address, '/')) {
    net->is_pipe = true;
    struct stat sb;
    // A stale socket from an earlier run would make bind fail.
    if (stat(address, &sb) == 0 && S_ISSOCK(sb.st_mode)) unlink(address);
    rc = uv_pipe_init(net->loop, &net->listener.pipe, 0);
    if (rc == 0) {
      net->listening = true;
      rc = uv_pipe_bind(&net->listener.pipe, address);
    }
    if (rc == 0) {
      net->unix_path = strdup(address);
      snprintf(net->listen_address, sizeof(net->listen_address), "%s", address);
    }
  } else {
    struct sockaddr_storage sa;
    CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "--listen");
    rc = uv_tcp_init(net->loop, &net->listener.tcp);
    if (rc == 0) {
      net->listening = true;
      rc = uv_tcp_bind(&net->listener.tcp, (const struct sockaddr*)&sa, 0);
    }
    if (rc == 0) {
      struct sockaddr_storage bound;
      int len = sizeof(bound);
      rc = uv_tcp_getsockname(&net->listener.tcp, (struct sockaddr*)&bound, &len);
      int port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&bound)->sin6_port)
                                             : ntohs(((struct sockaddr_in*)&bound)->sin_port);
      const char* colon = strrchr(address, ':');
      snprintf(net->listen_address, sizeof(net->listen_address), "%.*s:%d",
               (int)(colon - address), address, port);
    }
  }
  net->listener.handle.data = net;
  if (rc == 0) rc = uv_listen(&net->listener.stream, 128, cw__on_connection);
  if (rc < 0) {
    return cw_make_status(CW_UNAVAILABLE, "cannot listen on %s: %s", address, uv_strerror(rc));
  }
  return cw_ok_status();
}

static void cw__connected(uv_connect_t* req, int status) {
  cw_net_conn_t* c = req->data;
  if (!c->closing) uv_timer_stop(&c->timer);
  if (status < 0) {
    if (!c->closing) {
      cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: %s", c->name,
                                          uv_strerror(status)));
    }
  } else if (!c->closing) {
    c->connected = true;
    if (c->h.handle.type == UV_TCP) uv_tcp_nodelay(&c->h.tcp, 1);
    cw__conn_start_reading(c);
  }
  cw_net_conn_release(c);
}

static void cw__connect_timeout(uv_timer_t* t) {
  cw_net_conn_t* c = t->data;
  if (c->closing || c->connected) return;
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: timed out", c->name));
}

cw_status_t cw_net_connect(cw_net_t* net, const char* address, const char* name,
                           const cw_net_conn_callbacks_t* callbacks, void* user,
                           int64_t timeout_ms, cw_net_conn_t** out_conn) {
  *out_conn = NULL;
  bool pipe = strchr(address, '/') != NULL;
  struct sockaddr_storage sa;
  if (!pipe) CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "connect %s", address);
  cw_net_conn_t* c = cw__conn_create(net, true, pipe);
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a connection");
  cw_net_conn_set_name(c, name ? name : address);
  c->connect_req.data = c;
  if (pipe) {
    uv_pipe_connect(&c->connect_req, &c->h.pipe, address, cw__connected);
  } else {
    int rc = uv_tcp_connect(&c->connect_req, &c->h.tcp, (const struct sockaddr*)&sa,
                            cw__connected);
    if (rc < 0) {
      cw_net_conn_close(c, NULL);
      return cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: %s", address, uv_strerror(rc));
    }
  }
  cw_net_conn_retain(c);  // held by the connect request
  cw_net_conn_set_callbacks(c, callbacks, user);
  uv_timer_start(&c->timer, cw__connect_timeout, (uint64_t)timeout_ms, 0);
  *out_conn = c;
  return cw_ok_status();
}

// --- Parent watch, tokens ----------------------------------------------------

static void cw__watch_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_net_watch_t* w = h->data;
  buf->base = w->buf;
  buf->len = sizeof(w->buf);
}

static void cw__watch_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
  cw_net_watch_t* w = s->data;
  if (nread >= 0) return;  // the parent wrote something: ignored
  uv_read_stop(s);
  if (w->fn) {
    void (*fn)(void*) = w->fn;
    w->fn = NULL;
    fn(w->user);
  }
}

cw_status_t cw_net_watch_start(uv_loop_t* loop, int fd, void (*fn)(void* user), void* user,
                               cw_net_watch_t* w) {
  memset(w, 0, sizeof(*w));
  int rc = uv_pipe_init(loop, &w->pipe, 0);
  if (rc < 0) return cw_make_status(CW_INTERNAL, "watch-fd: %s", uv_strerror(rc));
  w->started = true;
  w->pipe.data = w;
  w->fn = fn;
  w->user = user;
  rc = uv_pipe_open(&w->pipe, fd);
  if (rc == 0) rc = uv_read_start((uv_stream_t*)&w->pipe, cw__watch_alloc, cw__watch_read);
  if (rc < 0) return cw_make_status(CW_INVALID_ARGUMENT, "--watch-fd %d: %s", fd, uv_strerror(rc));
  return cw_ok_status();
}

void cw_net_watch_stop(cw_net_watch_t* w) {
  if (!w->started) return;
  w->started = false;
  w->fn = NULL;
  uv_close((uv_handle_t*)&w->pipe, NULL);
}

bool cw_net_token_matches(const char* want, const uint8_t* got, size_t got_len) {
  size_t n = strlen(want);
  // Compare every byte regardless of where they differ.
  unsigned diff = (unsigned)(n != got_len);
  for (size_t i = 0; i < n; ++i) diff |= (unsigned)(want[i] ^ (i < got_len ? got[i] : 0));
  return diff == 0;
}
