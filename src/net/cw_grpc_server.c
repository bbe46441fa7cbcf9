#include "cw_grpc_server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_net.h"
#include "cw_net_gate.h"

#define CW__ACCEPTS_PER_PASS 16
#define CW__READ_BUF 65536
// Output is taken from a session only while less than this waits in the
// socket: a peer that does not read holds at most this much here (plus what
// its calls queued, bounded by max_queued).
#define CW__WRITE_HIGH (4u << 20)
// At the server's close a connection's last output (the trailers of calls
// just finished, then GOAWAY) goes out, and it closes when the peer closes
// its side, or after this.
#define CW__LINGER_MS 1000

typedef struct cw_grpc_conn_s {
  cw_net_gate_entry_t gate;
  cw_grpc_server_t* server;
  struct cw_grpc_conn_s* prev;
  struct cw_grpc_conn_s* next;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } sock;
  uv_timer_t timer;
  int open_handles;
  bool closing;
  bool lingering;  // the server closes: its last output is out, EOF is awaited
  // A Unix-socket peer running as this user (SO_PEERCRED): it needs no
  // token, as nothing the token guards against can reach the socket.
  bool same_user;
  cw_grpc_session_t* session;
  char rbuf[CW__READ_BUF];
} cw_grpc_conn_t;

typedef struct cw__write_s {
  uv_write_t req;
  cw_grpc_conn_t* conn;
  uint8_t* data;  // the session's batch, ours to free
} cw__write_t;

struct cw_grpc_server_s {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } listener;
  bool is_pipe;
  cw_net_unix_id_t unix_id;  // the socket file this server made
  // Runs until the last connection has closed: lingering ones still write
  // (the rest of a large response, a call that ends meanwhile).
  uv_prepare_t flusher;
  bool flusher_closed;
  bool closing;
  size_t live;  // listener, pacer, flusher and connections not yet freed
  char address[256];
  cw_net_gate_t gate;
  cw_net_pacer_t pacer;
  cw_grpc_conn_t* conns;
  const cw_grpc_server_options_t* o;
  const cw_grpc_handlers_t* h;
  void* user;
  cw_grpc_handlers_t wrap;  // the sessions' handlers: admission, then h
};

static void cw__server_unref(cw_grpc_server_t* s) {
  if (--s->live > 0) return;
  cw_net_gate_deinitialize(&s->gate);
  free(s);
}

static void cw__conn_handle_closed(uv_handle_t* h) {
  cw_grpc_conn_t* c = h->data;
  if (--c->open_handles > 0) return;
  cw_grpc_server_t* s = c->server;
  free(c);
  cw__server_unref(s);
}

static void cw__handle_closed(uv_handle_t* h);

// The server has closed and no connection lingers: nothing is left to write.
static void cw__flusher_close(cw_grpc_server_t* s) {
  if (!s->closing || s->conns || s->flusher_closed) return;
  s->flusher_closed = true;
  uv_close((uv_handle_t*)&s->flusher, cw__handle_closed);
}

static void cw__conn_close(cw_grpc_conn_t* c) {
  if (c->closing) return;
  c->closing = true;
  cw_grpc_server_t* s = c->server;
  cw_net_gate_leave(&s->gate, &c->gate);
  if (c->prev) c->prev->next = c->next; else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  cw__flusher_close(s);
  // The owner's on_close runs for every open call here.
  cw_grpc_session_release(c->session);
  c->session = NULL;
  uv_close(&c->sock.handle, cw__conn_handle_closed);
  uv_close((uv_handle_t*)&c->timer, cw__conn_handle_closed);
}

static cw_grpc_conn_t* cw__conn_of_gate(cw_net_gate_entry_t* e) {
  return (cw_grpc_conn_t*)((char*)e - offsetof(cw_grpc_conn_t, gate));
}

static void cw__written(uv_write_t* req, int status) {
  cw__write_t* w = (cw__write_t*)req;
  cw_grpc_conn_t* c = w->conn;
  free(w->data);
  free(w);
  if (status < 0) cw__conn_close(c);
}

// Writes what the session has to say; closes a session that is done.
static void cw__conn_flush(cw_grpc_conn_t* c) {
  if (c->closing) return;
  while (uv_stream_get_write_queue_size(&c->sock.stream) < CW__WRITE_HIGH) {
    uint8_t* d;
    size_t n;
    cw_grpc_session_take_output(c->session, &d, &n);
    if (!n) break;
    cw__write_t* w = malloc(sizeof(*w));
    if (!w) {
      free(d);
      cw__conn_close(c);
      return;
    }
    w->conn = c;
    w->data = d;
    uv_buf_t b = uv_buf_init((char*)d, (unsigned)n);
    if (uv_write(&w->req, &c->sock.stream, &b, 1, cw__written) < 0) {
      free(d);
      free(w);
      cw__conn_close(c);
      return;
    }
  }
  if (!c->lingering && !cw_grpc_session_alive(c->session) &&
      uv_stream_get_write_queue_size(&c->sock.stream) == 0) {
    cw__conn_close(c);
  }
}

static void cw__flush_all(uv_prepare_t* p) {
  cw_grpc_server_t* s = p->data;
  for (cw_grpc_conn_t *c = s->conns, *next; c; c = next) {
    next = c->next;
    cw__conn_flush(c);
  }
}

static void cw__alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_grpc_conn_t* c = h->data;
  *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void cw__read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  cw_grpc_conn_t* c = stream->data;
  if (c->closing) return;
  if (nread < 0) {
    cw__conn_close(c);
    return;
  }
  if (nread == 0 || c->lingering) return;  // read to the peer's EOF, unheard
  cw_net_gate_progress(&c->server->gate, &c->gate);
  cw_status_t st = cw_grpc_session_feed(c->session, (const uint8_t*)c->rbuf, (size_t)nread);
  if (st) {
    CW_LOGD("grpc: closing a connection: %s", cw_status_message(st));
    cw_status_free(st);
    uv_read_stop(stream);
  }
  cw__conn_flush(c);
}

static void cw__timeout(uv_timer_t* t) {
  cw_grpc_conn_t* c = t->data;
  if (c->gate.in) cw__conn_close(c);  // no call accepted in time
}

static void cw__linger_end(uv_timer_t* t) { cw__conn_close(t->data); }

// The server closes: c's last output goes out and the peer closes the
// connection when it has read it (GOAWAY). Closed at once, the trailers of
// calls just finished were lost or cut off by the close: a client saw
// "Socket closed" instead of why its call ended.
static void cw__conn_linger(cw_grpc_conn_t* c) {
  if (c->closing) return;
  c->lingering = true;
  cw_grpc_session_goaway(c->session);
  cw__conn_flush(c);
  if (c->closing) return;
  uv_timer_stop(&c->timer);
  uv_timer_start(&c->timer, cw__linger_end, CW__LINGER_MS, 0);
}

// --- The sessions' handlers: admission first, then the owner's. ---------------------

static cw_status_t cw__on_start(void* user, cw_grpc_call_t* call) {
  cw_grpc_conn_t* c = user;
  cw_grpc_server_t* s = c->server;
  const cw_token_set_t* tokens = s->o->tokens;
  if (tokens && tokens->count && !c->same_user) {
    const uint8_t* got;
    size_t len;
    bool has = cw_grpc_call_metadata(call, "authorization", &got, &len);
    if (!has || len < 7 || memcmp(got, "Bearer ", 7) ||
        !cw_net_tokens_accept(tokens, got + 7, len - 7)) {
      return cw_make_status(CW_UNAUTHENTICATED,
                            "credentials refused: %s (this proxy requires the cluster's token as "
                            "metadata \"authorization: Bearer <token>\")",
                            has ? "wrong token" : "no token presented");
    }
  }
  return s->h->on_start(s->user, call);
}

static void cw__on_message(void* user, cw_grpc_call_t* call, const uint8_t* d, size_t n) {
  cw_grpc_conn_t* c = user;
  // The first message of an accepted call, not its headers alone, takes the
  // connection out of the budget of new ones (and its first-call deadline):
  // streams opened and left silent would otherwise hold connections forever.
  if (c->gate.in) cw_net_gate_leave(&c->server->gate, &c->gate);
  c->server->h->on_message(c->server->user, call, d, n);
}

static void cw__on_half_close(void* user, cw_grpc_call_t* call) {
  cw_grpc_conn_t* c = user;
  if (c->server->h->on_half_close) c->server->h->on_half_close(c->server->user, call);
}

static void cw__on_close(void* user, cw_grpc_call_t* call) {
  cw_grpc_conn_t* c = user;
  if (c->server->h->on_close) c->server->h->on_close(c->server->user, call);
}

static void cw__on_writable(void* user, cw_grpc_call_t* call) {
  cw_grpc_conn_t* c = user;
  if (c->server->h->on_writable) c->server->h->on_writable(c->server->user, call);
}

// --- Accepting ----------------------------------------------------------------------

static void cw__accept_one(uv_stream_t* listener) {
  cw_grpc_server_t* s = listener->data;
  cw_grpc_conn_t* c = calloc(1, sizeof(*c));
  if (!c) {
    cw_net_pacer_retry(&s->pacer);
    return;
  }
  c->server = s;
  if (s->is_pipe) {
    uv_pipe_init(listener->loop, &c->sock.pipe, 0);
  } else {
    uv_tcp_init(listener->loop, &c->sock.tcp);
  }
  uv_timer_init(listener->loop, &c->timer);
  c->sock.handle.data = c->timer.data = c;
  c->open_handles = 2;
  s->live++;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  // Accepted first: a connection libuv holds stops the listener until then.
  if (uv_accept(listener, &c->sock.stream) < 0) {
    cw__conn_close(c);
    return;
  }
  cw_status_t st = cw_grpc_session_create(&s->wrap, c, &s->o->grpc, &c->session);
  if (st) {
    CW_LOGE("refusing a connection: %s", cw_status_message(st));
    cw_status_free(st);
    cw__conn_close(c);
    return;
  }
  struct sockaddr_storage sa;
  int len = sizeof(sa);
  bool named = false;  // a Unix socket's peers share one budget
  if (!s->is_pipe) {
    uv_tcp_nodelay(&c->sock.tcp, 1);
    named = uv_tcp_getpeername(&c->sock.tcp, (struct sockaddr*)&sa, &len) == 0;
  } else {
    uv_os_fd_t fd = -1;
    c->same_user = uv_fileno(&c->sock.handle, &fd) == 0 && cw_net_unix_peer_pid_same_user(fd) > 0;
  }
  cw_net_peer_key_from_sockaddr(named ? (const struct sockaddr*)&sa : NULL, &c->gate.peer);
  cw_net_gate_entry_t* victim = cw_net_gate_admit(&s->gate, &c->gate);
  if (victim) cw__conn_close(cw__conn_of_gate(victim));
  uv_timer_start(&c->timer, cw__timeout, CW_GRPC_SERVER_FIRST_CALL_MS, 0);
  if (uv_read_start(&c->sock.stream, cw__alloc, cw__read) < 0) cw__conn_close(c);
  cw__conn_flush(c);  // the server's SETTINGS
}

static void cw__accept(uv_stream_t* listener, int status) {
  cw_grpc_server_t* s = listener->data;
  if (status < 0 || s->closing) return;
  if (cw_net_pacer_take(&s->pacer)) cw__accept_one(listener);
}

static void cw__handle_closed(uv_handle_t* h) { cw__server_unref(h->data); }
static void cw__pacer_closed(uv_handle_t* h) {
  cw__server_unref(((cw_net_pacer_t*)h->data)->listener->data);
}

// A Unix socket only its owner may connect to: the file's mode is the
// credential (a stale socket of an earlier run is replaced).
static cw_status_t cw__pipe_listen(cw_grpc_server_t* s, const char* path) {
  CW_RETURN_IF_ERROR(cw_net_unix_prepare(path), "--listen");
  int fd = cw_net_unix_bind(path, true);
  int rc = fd < 0 ? fd : uv_pipe_open(&s->listener.pipe, fd);
  if (fd >= 0 && rc < 0) close(fd);
  if (rc >= 0) rc = uv_listen(&s->listener.stream, SOMAXCONN, cw__accept);
  if (rc < 0) return cw_make_status(CW_UNAVAILABLE, "cannot listen on %s: %s", path,
                                    uv_strerror(rc));
  snprintf(s->address, sizeof(s->address), "%s", path);
  cw_net_unix_remember(path, &s->unix_id);
  return cw_ok_status();
}

cw_status_t cw_grpc_server_create(uv_loop_t* loop, const char* address,
                                  const cw_grpc_server_options_t* options,
                                  const cw_grpc_handlers_t* handlers, void* user,
                                  cw_grpc_server_t** out_server) {
  *out_server = NULL;
  bool is_pipe = strchr(address, '/') != NULL;
  if (!is_pipe) {
    struct sockaddr_storage sa;
    CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "grpc");  // before anything opens
  }
  cw_grpc_server_t* s = calloc(1, sizeof(*s));
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t gst = cw_net_gate_initialize(&s->gate, CW_GRPC_SERVER_MAX_CONNS,
                                           CW_GRPC_SERVER_MAX_CONNS_PER_PEER);
  if (gst) {
    free(s);
    return gst;
  }
  s->o = options;
  s->h = handlers;
  s->user = user;
  s->wrap = (cw_grpc_handlers_t){cw__on_start, cw__on_message, cw__on_half_close, cw__on_close,
                                 cw__on_writable};
  s->live = 3;
  s->is_pipe = is_pipe;
  if (is_pipe) {
    uv_pipe_init(loop, &s->listener.pipe, 0);
  } else {
    uv_tcp_init(loop, &s->listener.tcp);
  }
  s->listener.handle.data = s;
  uv_prepare_init(loop, &s->flusher);
  s->flusher.data = s;
  uv_prepare_start(&s->flusher, cw__flush_all);
  cw_net_pacer_initialize(&s->pacer, loop, &s->listener.stream, CW__ACCEPTS_PER_PASS,
                          cw__accept_one, "");
  cw_status_t lst = is_pipe ? cw__pipe_listen(s, address)
                            : cw_net_tcp_listen(&s->listener.tcp, address, cw__accept, s->address,
                                                sizeof(s->address));
  if (lst) {
    cw_grpc_server_close(s);
    return lst;
  }
  *out_server = s;
  return cw_ok_status();
}

const char* cw_grpc_server_address(const cw_grpc_server_t* s) { return s->address; }

void cw_grpc_server_close(cw_grpc_server_t* s) {
  if (!s || s->closing) return;
  s->closing = true;
  for (cw_grpc_conn_t *c = s->conns, *next; c; c = next) {
    next = c->next;
    cw__conn_linger(c);
  }
  if (s->is_pipe && s->address[0]) cw_net_unix_unlink_own(s->address, &s->unix_id);
  uv_close(&s->listener.handle, cw__handle_closed);
  cw__flusher_close(s);  // else at the last connection's close
  cw_net_pacer_close(&s->pacer, cw__pacer_closed);
}
