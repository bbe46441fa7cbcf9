// Unit tests of src/net on a real libuv loop in this process: a server net
// listening on a Unix socket with a small test service (handler table), and
// peers that are either raw non-blocking sockets (exact bytes on the wire)
// or a second net that connects with cw_net_connect. Every wait runs the loop
// until a condition holds or a deadline passes; nothing sleeps.
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_messages.h"
#include "cw_net.h"
#include "cw_time.h"

#define WAIT_MS 5000
#define MAX_PEERS 32
#define MAX_RAWS 16
#define MAX_CALLS 8192

#define ROLE_CLIENT CAUSEWAY__V1__ROLE__ROLE_CLIENT
#define ROLE_WORKER CAUSEWAY__V1__ROLE__ROLE_WORKER
#define ROLE_CONTROLLER CAUSEWAY__V1__ROLE__ROLE_CONTROLLER

// --- Fixture -----------------------------------------------------------------------

// The server side of one accepted connection (its user data; freed by on_free).
typedef struct peer_s {
  int id;  // accept order
  cw_net_conn_t* conn;
  int calls;  // handler calls
  int closes;
  bool closed_on_purpose;  // on_close got NULL
  cw_status_code_t close_code;
  char close_msg[512];
  int bulk_done;
  uint64_t bulk_done_rid;
  uint8_t* dest;  // UPLOAD with buffer_id 1: where its bulk goes
  uint64_t dest_len;
  ProtobufCMessage* kept;  // a request the handler took
  uint64_t deferred[64];   // PING "defer": answered later by the test
  int num_deferred;
  uint64_t last_turn;
  int turn_calls, max_turn_calls;  // handler calls in one loop turn
  uint64_t bytes_in, max_read;     // on_bytes: all, and the largest single read
  bool freed;                      // on_free ran (the struct stays until teardown)
} peer_t;

typedef struct call_s {
  int peer;
  uint16_t type;
  uint64_t rid;
  uint64_t turn;
  bool probed;  // the probe socket had bytes when the handler began
} call_t;

// An outbound connection's callbacks record here.
typedef struct out_s {
  int closes;
  int completions_at_close;  // requests completed when on_close ran
  bool closed_on_purpose;
  cw_status_code_t close_code;
  char close_msg[512];
  bool freed;
} out_t;

// A request's completion.
typedef struct reply_s {
  bool done;
  int order;  // completions before this one
  cw_status_code_t code;
  char msg[512];
  uint8_t data[64];  // PING reply data / ArrayInfo buffer_id as text
  size_t data_len;
  uint8_t* bulk;  // taken from the net
  uint64_t bulk_len;
} reply_t;

// A raw peer: a non-blocking socket and what it has read, not yet parsed.
typedef struct raw_s {
  int fd;
  uint8_t* in;
  size_t len, cap;
  bool eof, reset;
} raw_t;

static struct {
  uv_loop_t loop;
  uv_timer_t tick;  // keeps UV_RUN_ONCE from blocking past a deadline
  uv_check_t check;
  uint64_t turn;  // loop iterations (counted in the check phase)
  int64_t deadline;
  char dir[64];
  char path[128];
  cw_net_options_t sopts;
  cw_net_t srv;
  bool srv_on;
  cw_net_t cli;
  bool cli_on;
  peer_t* peers[MAX_PEERS];
  int num_peers, freed;
  bool retain_accepted;
  call_t calls[MAX_CALLS];
  int num_calls;
  char log[4096];  // admit / handler / applied, in order
  bool admit_takes;
  ProtobufCMessage* admitted_kept;
  int probe_fd;    // a raw peer's socket the handlers and the hook peek at
  int probe_hits;  // handlers that found bytes there
  bool download_wrote_at_once;  // DOWNLOAD's reply had reached the probe when send returned
  int hook_calls, hook_true_left;
  int hook_first_hit;  // the first hook call that found bytes at the probe
  cw_net_conn_t* hook_conn;
  int bulk_frees;
  int completions;
  raw_t raws[MAX_RAWS];
  int num_raws;
  int listen_fd;  // a raw listener (outbound tests)
  char raw_path[160];
} fx;

static void tick_cb(uv_timer_t* t) { (void)t; }
static void check_cb(uv_check_t* c) {
  (void)c;
  fx.turn++;
}

// Loop runs bounded by a deadline: RUN_UNTIL(cond, ms) stops when cond holds
// or ms pass; WAIT(cond) also asserts cond.
static void loop_begin(int timeout_ms) {
  fx.deadline = cw_time_now_ms() + timeout_ms;
  uv_timer_start(&fx.tick, tick_cb, 1, 1);
}
static bool loop_step(void) {
  if (cw_time_now_ms() > fx.deadline) return false;
  uv_run(&fx.loop, UV_RUN_ONCE);
  return true;
}
static void loop_end(void) { uv_timer_stop(&fx.tick); }
#define RUN_UNTIL(cond, ms)            \
  do {                                 \
    loop_begin(ms);                    \
    while (!(cond) && loop_step()) {   \
    }                                  \
    loop_end();                        \
  } while (0)
#define WAIT(cond)           \
  do {                       \
    RUN_UNTIL(cond, WAIT_MS); \
    assert_true(cond);       \
  } while (0)
// Runs the loop for `ms` whatever happens (to show that something does not).
#define RUN_FOR(ms) RUN_UNTIL(false, ms)

static void copy_status(cw_status_t st, cw_status_code_t* code, char* msg, size_t cap) {
  *code = cw_status_code(st);
  snprintf(msg, cap, "%s", cw_status_message(st));
}

// --- The test service ----------------------------------------------------------------

static void note_call(cw_net_conn_t* conn, const cw_frame_header_t* h) {
  peer_t* p = cw_net_conn_user(conn);
  p->calls++;
  if (p->last_turn != fx.turn || p->turn_calls == 0) {
    p->last_turn = fx.turn;
    p->turn_calls = 0;
  }
  if (++p->turn_calls > p->max_turn_calls) p->max_turn_calls = p->turn_calls;
  bool probed = false;
  if (fx.probe_fd >= 0) {
    char b;
    probed = recv(fx.probe_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
    if (probed) fx.probe_hits++;
  }
  if (fx.num_calls < MAX_CALLS) {
    fx.calls[fx.num_calls++] = (call_t){p->id, h->type, h->request_id, fx.turn, probed};
  }
  size_t n = strlen(fx.log);
  snprintf(fx.log + n, sizeof(fx.log) - n, "handler:%s,", cw_msg_type_name(h->type));
}

static bool data_is(const Causeway__V1__Ping* m, const char* s) {
  return m->data.len == strlen(s) && memcmp(m->data.data, s, m->data.len) == 0;
}

// PING does what its data says: "defer" (answered later), "hold" (stop
// reading, then echo), "close" (echo, then close at once), "violate", "take"
// (the handler keeps the message); anything else is echoed.
static void h_ping(cw_net_conn_t* conn, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  peer_t* p = cw_net_conn_user(conn);
  note_call(conn, h);
  Causeway__V1__Ping* m = (Causeway__V1__Ping*)*msg;
  if (data_is(m, "defer")) {
    if (p->num_deferred < 64) p->deferred[p->num_deferred++] = h->request_id;
    return;
  }
  if (data_is(m, "violate")) {
    cw_net_conn_violation(conn, h->type, h->request_id,
                          cw_make_status(CW_INVALID_ARGUMENT, "the test dislikes this PING"));
    return;
  }
  if (data_is(m, "hold")) cw_net_conn_hold_reading(conn, true);
  if (data_is(m, "take")) {
    p->kept = *msg;
    *msg = NULL;
    cw_net_conn_reply(conn, h->type, h->request_id, p->kept);
    return;
  }
  cw_net_reply_ping(conn, h, msg);
  if (data_is(m, "close")) cw_net_conn_close(conn, NULL);
}

// UPLOAD with buffer_id 1 takes its bulk into p->dest; others discard it.
static void h_upload(cw_net_conn_t* conn, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  peer_t* p = cw_net_conn_user(conn);
  note_call(conn, h);
  const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)*msg;
  if (r->buffer_id == 1) {
    free(p->dest);
    p->dest = calloc(1, h->bulk_len ? h->bulk_len : 1);
    p->dest_len = h->bulk_len;
    cw_net_conn_set_bulk_dest(conn, p->dest);
  }
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = r->buffer_id;
  cw_net_conn_reply(conn, h->type, h->request_id, &ack.base);
}

static void bulk_free(void* user) {
  fx.bulk_frees++;
  free(user);
}

static uint8_t pattern(uint64_t i) { return (uint8_t)(i * 7 + (i >> 8)); }

// DOWNLOAD answers ArrayInfo with buffer_id bytes of pattern as reply bulk.
static void h_download(cw_net_conn_t* conn, const cw_frame_header_t* h,
                       ProtobufCMessage** msg) {
  note_call(conn, h);
  const Causeway__V1__DownloadRequest* r = (const Causeway__V1__DownloadRequest*)*msg;
  Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
  ai.buffer_id = r->buffer_id;
  ai.size = r->buffer_id;
  uint64_t n = r->buffer_id;
  if (!n) {
    cw_net_conn_reply(conn, h->type, h->request_id, &ai.base);
    return;
  }
  uint8_t* bulk = malloc(n);
  for (uint64_t i = 0; i < n; ++i) bulk[i] = pattern(i);
  cw_net_conn_send(conn, h->type, CW_FRAME_REPLY, h->request_id, &ai.base, bulk, n, bulk_free,
                   bulk);
  if (fx.probe_fd >= 0) {
    char b;
    fx.download_wrote_at_once = recv(fx.probe_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
}

// Answers with an empty reply of the request's type.
static void h_empty_reply(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg) {
  note_call(conn, h);
  const ProtobufCMessageDescriptor* d = cw_msg_reply_descriptor(h->type);
  ProtobufCMessage* rep = calloc(1, d->sizeof_message);
  protobuf_c_message_init(d, rep);
  cw_net_conn_reply(conn, h->type, h->request_id, rep);
  free(rep);
}

static cw_status_t t_on_hello(cw_net_conn_t* conn, const Causeway__V1__HelloRequest* hello,
                              uint64_t* out_session_id, bool* out_has_session) {
  if (hello->peer_name && strcmp(hello->peer_name, "refuse-me") == 0) {
    return cw_make_status(CW_PERMISSION_DENIED, "refused by the test service");
  }
  *out_session_id = hello->session_id;
  *out_has_session = hello->session_id != 0;
  return cw_ok_status();
}

// admit: STATS is refused here (answered by admit); with fx.admit_takes it
// is also taken.
static bool t_admit(cw_net_conn_t* conn, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  size_t n = strlen(fx.log);
  snprintf(fx.log + n, sizeof(fx.log) - n, "admit:%s,", cw_msg_type_name(h->type));
  if (h->type != CW_MSG_STATS) return true;
  if (fx.admit_takes) {
    protobuf_c_message_free_unpacked(fx.admitted_kept, NULL);
    fx.admitted_kept = *msg;
    *msg = NULL;
  }
  cw_net_conn_reply_error(conn, h->type, h->request_id,
                          cw_make_status(CW_ABORTED, "admit says not now"));
  return false;
}

static void t_applied(cw_net_conn_t* conn, const cw_frame_header_t* h) {
  size_t n = strlen(fx.log);
  snprintf(fx.log + n, sizeof(fx.log) - n, "applied:%s,", cw_msg_type_name(h->type));
}

static const cw_net_service_t svc = {
    .name = "testsvc",
    .unserved_hint = " (ask elsewhere)",
    .hello_roles = CW_ROLE_CLIENT_BIT | CW_ROLE_WORKER_BIT,
    .on_hello = t_on_hello,
    .admit = t_admit,
    .applied = t_applied,
    .handlers =
        {
            [CW_MSG_PING] = h_ping,
            [CW_MSG_UPLOAD] = h_upload,
            [CW_MSG_DOWNLOAD] = h_download,
            [CW_MSG_COMPILE] = h_empty_reply,
            [CW_MSG_REGISTER] = h_empty_reply,
            [CW_MSG_EXE_INFO] = h_empty_reply,
            [CW_MSG_STATS] = h_empty_reply,  // never reached: admit refuses STATS
        },
};

static void p_on_bulk_done(cw_net_conn_t* conn, const cw_frame_header_t* h) {
  peer_t* p = cw_net_conn_user(conn);
  p->bulk_done++;
  p->bulk_done_rid = h->request_id;
}

static void p_on_close(cw_net_conn_t* conn, cw_status_t reason) {
  peer_t* p = cw_net_conn_user(conn);
  p->closes++;
  p->closed_on_purpose = reason == NULL;
  copy_status(reason, &p->close_code, p->close_msg, sizeof(p->close_msg));
}

static void p_on_bytes(cw_net_conn_t* conn, uint64_t in, uint64_t out) {
  peer_t* p = cw_net_conn_user(conn);
  p->bytes_in += in;
  if (in > p->max_read) p->max_read = in;
}

static void p_on_free(void* user) {
  peer_t* p = user;
  assert_false(p->freed);
  p->freed = true;
  fx.freed++;
  free(p->dest);
  p->dest = NULL;
  if (p->kept) protobuf_c_message_free_unpacked(p->kept, NULL);
  p->kept = NULL;
}

static const cw_net_conn_callbacks_t peer_callbacks = {p_on_bulk_done, p_on_close, p_on_bytes,
                                                       p_on_free};

static void on_accept(cw_net_t* net, cw_net_conn_t* conn) {
  assert_true(fx.num_peers < MAX_PEERS);
  peer_t* p = calloc(1, sizeof(*p));
  p->id = fx.num_peers;
  p->conn = conn;
  fx.peers[fx.num_peers++] = p;
  cw_net_conn_set_callbacks(conn, &peer_callbacks, p);
  if (fx.retain_accepted) cw_net_conn_retain(conn);
}

static void start_server(void) {
  cw_net_initialize(&fx.srv, &fx.loop, &fx.sopts);
  fx.srv_on = true;
  cw_status_t st = cw_net_listen(&fx.srv, fx.path, &svc, on_accept);
  assert_null(st);
  assert_string_equal(fx.srv.listen_address, fx.path);
}

static void start_client(const char* token) {
  cw_net_options_t o = fx.sopts;
  o.token = token;
  o.name = "cli";
  cw_net_initialize(&fx.cli, &fx.loop, &o);
  fx.cli_on = true;
}

// --- Outbound connections ------------------------------------------------------------

static void o_on_close(cw_net_conn_t* conn, cw_status_t reason) {
  out_t* o = cw_net_conn_user(conn);
  o->closes++;
  o->completions_at_close = fx.completions;
  o->closed_on_purpose = reason == NULL;
  copy_status(reason, &o->close_code, o->close_msg, sizeof(o->close_msg));
}

static void o_on_free(void* user) { ((out_t*)user)->freed = true; }

static const cw_net_conn_callbacks_t out_callbacks = {NULL, o_on_close, NULL, o_on_free};

static cw_net_conn_t* connect_client(const char* address, uint64_t session, out_t* o) {
  cw_net_conn_t* conn = NULL;
  cw_status_t st = cw_net_connect(&fx.cli, address, "srvname", ROLE_CLIENT, session,
                                  &out_callbacks, o, WAIT_MS, &conn);
  assert_null(st);
  assert_non_null(conn);
  return conn;
}

static void on_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                     const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  reply_t* r = user;
  assert_false(r->done);  // exactly once
  r->done = true;
  r->order = fx.completions++;
  copy_status(status, &r->code, r->msg, sizeof(r->msg));
  cw_status_free(status);
  if (reply && reply->descriptor == &causeway__v1__ping__descriptor) {
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    r->data_len = p->data.len < sizeof(r->data) ? p->data.len : sizeof(r->data);
    memcpy(r->data, p->data.data, r->data_len);
  }
  if (reply && reply->descriptor == &causeway__v1__array_info__descriptor) {
    r->data_len = (size_t)snprintf((char*)r->data, sizeof(r->data), "%llu",
                                   (unsigned long long)((const Causeway__V1__ArrayInfo*)reply)
                                       ->buffer_id);
  }
  r->bulk = bulk;
  r->bulk_len = bulk_len;
}

static void request_ping(cw_net_conn_t* conn, const char* data, reply_t* r) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)(uintptr_t)data;
  p.data.len = strlen(data);
  cw_net_conn_request(conn, CW_MSG_PING, &p.base, NULL, 0, NULL, NULL, on_reply, r);
}

// --- Raw peers ----------------------------------------------------------------------

typedef struct buf_s {
  uint8_t* p;
  size_t len, cap;
} buf_t;

static void buf_put(buf_t* b, const void* data, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    b->p = realloc(b->p, cap);
    assert_non_null(b->p);
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void buf_header(buf_t* b, uint16_t type, uint32_t flags, uint64_t rid, uint32_t plen,
                       uint64_t blen) {
  cw_frame_header_t h = {CW_FRAME_MAGIC, CW_PROTOCOL_VERSION, type, flags, plen, rid, blen};
  uint8_t out[CW_FRAME_HEADER_SIZE];
  cw_frame_header_encode(&h, out);
  buf_put(b, out, sizeof(out));
}

// A frame whose header matches its payload and bulk.
static void buf_frame(buf_t* b, uint16_t type, uint32_t flags, uint64_t rid,
                      const ProtobufCMessage* m, const void* bulk, uint64_t blen) {
  size_t plen = m ? protobuf_c_message_get_packed_size(m) : 0;
  buf_header(b, type, flags, rid, (uint32_t)plen, blen);
  uint8_t* payload = malloc(plen + 1);
  if (plen) protobuf_c_message_pack(m, payload);
  buf_put(b, payload, plen);
  free(payload);
  buf_put(b, bulk, (size_t)blen);
}

static void buf_ping(buf_t* b, uint64_t rid, const char* data) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)(uintptr_t)data;
  p.data.len = strlen(data);
  buf_frame(b, CW_MSG_PING, 0, rid, &p.base, NULL, 0);
}

static void buf_hello(buf_t* b, const char* token, int role, uint64_t session, const char* name) {
  Causeway__V1__HelloRequest h;
  cw_hello_request_fill(&h, role, token, session, name);
  buf_frame(b, CW_MSG_HELLO, 0, 1, &h.base, NULL, 0);
}

// An UPLOAD of a u8[n] array (buffer_id 1: into a destination) with `blen`
// bulk bytes of pattern.
static void buf_upload(buf_t* b, uint64_t rid, uint64_t buffer_id, int64_t n, uint64_t blen) {
  Causeway__V1__UploadRequest r = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  r.buffer_id = buffer_id;
  r.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
  r.n_dims = 1;
  r.dims = &n;
  uint8_t* bulk = malloc(blen + 1);
  for (uint64_t i = 0; i < blen; ++i) bulk[i] = pattern(i);
  buf_frame(b, CW_MSG_UPLOAD, 0, rid, &r.base, bulk, blen);
  free(bulk);
}

static void buf_free(buf_t* b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

static raw_t* raw_adopt(int fd) {
  assert_true(fx.num_raws < MAX_RAWS);
  raw_t* r = &fx.raws[fx.num_raws++];
  memset(r, 0, sizeof(*r));
  r->fd = fd;
  assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  return r;
}

static int unix_connect(const char* path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static raw_t* raw_connect(void) {
  int fd = unix_connect(fx.path);
  assert_true(fd >= 0);
  return raw_adopt(fd);
}

// EOF for the server, without the reset a close with unread replies gives.
static void raw_shutdown(raw_t* r) { assert_int_equal(shutdown(r->fd, SHUT_WR), 0); }

static void raw_close(raw_t* r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
}

// Reads what the socket has now.
static void raw_fill(raw_t* r) {
  while (r->fd >= 0 && !r->eof && !r->reset) {
    if (r->cap - r->len < 65536) {
      r->cap = r->cap ? r->cap * 2 : 131072;
      r->in = realloc(r->in, r->cap);
      assert_non_null(r->in);
    }
    ssize_t n = recv(r->fd, r->in + r->len, r->cap - r->len, MSG_DONTWAIT);
    if (n > 0) {
      r->len += (size_t)n;
    } else if (n == 0) {
      r->eof = true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      r->reset = true;
    }
  }
}

// Sends everything, running the loop while the socket is full (the server
// must read for it to drain). False if the server went away.
static bool raw_send(raw_t* r, const void* data, size_t len) {
  const uint8_t* p = data;
  size_t off = 0;
  int64_t deadline = cw_time_now_ms() + WAIT_MS;
  while (off < len) {
    ssize_t n = send(r->fd, p + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      assert_true(cw_time_now_ms() < deadline);
      raw_fill(r);  // the server may be writing to us
      uv_run(&fx.loop, UV_RUN_NOWAIT);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

static void raw_send_buf(raw_t* r, buf_t* b) {
  assert_true(raw_send(r, b->p, b->len));
  buf_free(b);
}

typedef struct frame_s {
  cw_frame_header_t h;
  ProtobufCMessage* msg;
  uint8_t* bulk;
} frame_t;

static void frame_free(frame_t* f) {
  if (f->msg) protobuf_c_message_free_unpacked(f->msg, NULL);
  free(f->bulk);
  memset(f, 0, sizeof(*f));
}

// The size of the first whole frame read, 0 if none is whole yet.
static size_t raw_frame_size(raw_t* r) {
  if (r->len < CW_FRAME_HEADER_SIZE) return 0;
  const cw_frame_limits_t open = {UINT32_MAX, UINT64_MAX};
  cw_frame_header_t h;
  cw_status_t st = cw_frame_header_decode(r->in, CW_FRAME_HEADER_SIZE, &open, &h);
  assert_null(st);
  size_t n = CW_FRAME_HEADER_SIZE + h.payload_len + (size_t)h.bulk_len;
  return r->len >= n ? n : 0;
}

static bool raw_has_frames(raw_t* r, int count) {
  raw_fill(r);
  size_t off = 0;
  for (int i = 0; i < count; ++i) {
    if (r->len - off < CW_FRAME_HEADER_SIZE) return false;
    const cw_frame_limits_t open = {UINT32_MAX, UINT64_MAX};
    cw_frame_header_t h;
    cw_status_t st = cw_frame_header_decode(r->in + off, CW_FRAME_HEADER_SIZE, &open, &h);
    assert_null(st);
    size_t n = CW_FRAME_HEADER_SIZE + h.payload_len + (size_t)h.bulk_len;
    if (r->len - off < n) return false;
    off += n;
  }
  return true;
}

static bool raw_has_frame(raw_t* r) {
  raw_fill(r);
  return raw_frame_size(r) > 0;
}

static void raw_next(raw_t* r, frame_t* f) {
  memset(f, 0, sizeof(*f));
  WAIT(raw_has_frame(r));
  size_t n = raw_frame_size(r);
  const cw_frame_limits_t open = {UINT32_MAX, UINT64_MAX};
  cw_status_t st = cw_frame_header_decode(r->in, CW_FRAME_HEADER_SIZE, &open, &f->h);
  assert_null(st);
  st = cw_frame_decode_payload(&f->h, r->in + CW_FRAME_HEADER_SIZE, &f->msg);
  assert_null(st);
  if (f->h.bulk_len) {
    f->bulk = malloc((size_t)f->h.bulk_len);
    memcpy(f->bulk, r->in + CW_FRAME_HEADER_SIZE + f->h.payload_len, (size_t)f->h.bulk_len);
  }
  memmove(r->in, r->in + n, r->len - n);
  r->len -= n;
}

// The next frame is an error reply to `rid` with `code` and `needle` in its message.
static void raw_expect_error(raw_t* r, uint16_t type, uint64_t rid, cw_status_code_t code,
                             const char* needle) {
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY | CW_FRAME_ERROR);
  assert_int_equal(f.h.type, type);
  assert_int_equal(f.h.request_id, rid);
  const Causeway__V1__ErrorReply* er = (const Causeway__V1__ErrorReply*)f.msg;
  if (er->code != (uint32_t)code || !strstr(er->message, needle)) {
    fail_msg("got %s \"%s\", want %s with \"%s\"", cw_status_code_name(er->code), er->message,
             cw_status_code_name(code), needle);
  }
  frame_free(&f);
}

// The next frame is a PING reply to `rid` echoing `data`.
static void raw_expect_pong(raw_t* r, uint64_t rid, const char* data) {
  frame_t f;
  raw_next(r, &f);
  if (f.h.flags & CW_FRAME_ERROR) {
    fail_msg("PING %llu: error %s", (unsigned long long)rid,
             ((const Causeway__V1__ErrorReply*)f.msg)->message);
  }
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.type, CW_MSG_PING);
  assert_int_equal(f.h.request_id, rid);
  const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)f.msg;
  assert_int_equal(p->data.len, strlen(data));
  assert_memory_equal(p->data.data, data, p->data.len);
  frame_free(&f);
}

// The peer closed, with nothing more sent.
static void raw_expect_eof(raw_t* r) {
  WAIT((raw_fill(r), r->eof || r->reset));
  assert_int_equal(r->len, 0);
}

static void raw_expect_silence(raw_t* r, int ms) {
  RUN_FOR(ms);
  raw_fill(r);
  assert_int_equal(r->len, 0);
  assert_false(r->eof || r->reset);
}

static void raw_hello_as(raw_t* r, const char* token, int role, uint64_t session,
                         const char* name) {
  buf_t b = {0};
  buf_hello(&b, token, role, session, name);
  raw_send_buf(r, &b);
}

// HELLO as a client with `session` (0: none), answered OK.
static void raw_hello(raw_t* r, uint64_t session) {
  raw_hello_as(r, "sesame", ROLE_CLIENT, session, "rawpeer");
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  const Causeway__V1__HelloReply* rep = (const Causeway__V1__HelloReply*)f.msg;
  assert_int_equal(rep->session_id, session);
  assert_string_equal(rep->worker_name, "srv");
  assert_int_equal(rep->max_payload, fx.sopts.limits.max_payload);
  assert_int_equal(rep->max_bulk, fx.sopts.limits.max_bulk);
  frame_free(&f);
}

static void raw_ping(raw_t* r, uint64_t rid, const char* data) {
  buf_t b = {0};
  buf_ping(&b, rid, data);
  raw_send_buf(r, &b);
}

// The last accepted connection's server side.
static peer_t* last_peer(void) {
  assert_true(fx.num_peers > 0);
  peer_t* p = fx.peers[fx.num_peers - 1];
  assert_non_null(p);
  assert_false(p->freed);
  return p;
}

// A raw peer past HELLO and its server side.
static raw_t* raw_ready(uint64_t session, peer_t** out_peer) {
  int before = fx.num_peers;
  raw_t* r = raw_connect();
  raw_hello(r, session);
  assert_int_equal(fx.num_peers, before + 1);
  if (out_peer) *out_peer = last_peer();
  return r;
}

// --- Setup ---------------------------------------------------------------------------

static int setup(void** state) {
  (void)state;
  memset(&fx, 0, sizeof(fx));
  fx.probe_fd = -1;
  fx.listen_fd = -1;
  if (uv_loop_init(&fx.loop) != 0) return -1;
  uv_timer_init(&fx.loop, &fx.tick);
  uv_check_init(&fx.loop, &fx.check);
  uv_check_start(&fx.check, check_cb);
  uv_unref((uv_handle_t*)&fx.check);
  snprintf(fx.dir, sizeof(fx.dir), "/tmp/cw_net_test.XXXXXX");
  if (!mkdtemp(fx.dir)) return -1;
  snprintf(fx.path, sizeof(fx.path), "%s/srv.sock", fx.dir);
  fx.sopts.prehello_limits.max_payload = 256;
  fx.sopts.prehello_limits.max_bulk = 0;
  fx.sopts.limits.max_payload = 4096;
  fx.sopts.limits.max_bulk = 8u << 20;
  fx.sopts.frames_per_wakeup = 64;
  fx.sopts.max_connections = 8;
  fx.sopts.hello_timeout_ms = 10000;
  fx.sopts.token = "sesame";
  fx.sopts.name = "srv";
  return 0;
}

static int teardown(void** state) {
  (void)state;
  if (fx.srv_on) {
    cw_net_set_prepare_hook(&fx.srv, NULL, NULL);
    cw_net_deinitialize(&fx.srv);
  }
  if (fx.cli_on) cw_net_deinitialize(&fx.cli);
  uv_close((uv_handle_t*)&fx.tick, NULL);
  uv_close((uv_handle_t*)&fx.check, NULL);
  for (int i = 0; i < 100 && uv_loop_alive(&fx.loop); ++i) uv_run(&fx.loop, UV_RUN_NOWAIT);
  int rc = 0;
  if (uv_loop_close(&fx.loop) != 0) {
    fprintf(stderr, "teardown: loop handles left open\n");
    rc = -1;
  }
  // Every accepted connection's user data went with its last reference.
  if (fx.freed != fx.num_peers) {
    fprintf(stderr, "teardown: %d of %d connections freed\n", fx.freed, fx.num_peers);
    rc = -1;
  }
  for (int i = 0; i < fx.num_raws; ++i) {
    raw_close(&fx.raws[i]);
    free(fx.raws[i].in);
  }
  if (fx.listen_fd >= 0) close(fx.listen_fd);
  for (int i = 0; i < fx.num_peers; ++i) free(fx.peers[i]);
  if (fx.admitted_kept) protobuf_c_message_free_unpacked(fx.admitted_kept, NULL);
  unlink(fx.path);
  if (fx.raw_path[0]) unlink(fx.raw_path);
  rmdir(fx.dir);
  return rc;
}

// A Unix socket the test listens on itself (a peer the client net calls),
// at fx.raw_path.
static void raw_listen(void) {
  snprintf(fx.raw_path, sizeof(fx.raw_path), "%s/raw.sock", fx.dir);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx.raw_path);
  assert_int_equal(bind(fd, (struct sockaddr*)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, 8), 0);
  assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  fx.listen_fd = fd;
}

static raw_t* raw_accept(void) {
  int fd = -1;
  RUN_UNTIL((fd = accept(fx.listen_fd, NULL, NULL)) >= 0, WAIT_MS);
  assert_true(fd >= 0);
  return raw_adopt(fd);
}

// A client net connection to the raw listener, and the raw side it
// accepted; a PING "x" follows HELLO when `ping` is given.
static raw_t* connect_raw_peer(uint64_t session, out_t* o, reply_t* ping,
                               cw_net_conn_t** out_conn) {
  *out_conn = connect_client(fx.raw_path, session, o);
  if (ping) request_ping(*out_conn, "x", ping);
  return raw_accept();
}

// Reads the HELLO a client net sent and accepts it.
static void raw_answer_hello(raw_t* s) {
  frame_t f;
  raw_next(s, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  assert_int_equal(f.h.flags, 0);
  const Causeway__V1__HelloRequest* hello = (const Causeway__V1__HelloRequest*)f.msg;
  assert_int_equal(hello->role, ROLE_CLIENT);
  assert_string_equal(hello->peer_name, "cli");
  Causeway__V1__HelloReply rep = CAUSEWAY__V1__HELLO_REPLY__INIT;
  rep.version = CW_PROTOCOL_VERSION;
  buf_t b = {0};
  buf_frame(&b, CW_MSG_HELLO, CW_FRAME_REPLY, f.h.request_id, &rep.base, NULL, 0);
  raw_send_buf(s, &b);
  frame_free(&f);
}

// --- Framing -------------------------------------------------------------------------

static void test_frames_split_byte_by_byte(void** state) {
  start_server();
  raw_t* r = raw_connect();
  WAIT(fx.num_peers == 1);
  peer_t* p = last_peer();
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "bytewise");
  buf_ping(&b, 11, "one");
  buf_ping(&b, 12, "");
  buf_ping(&b, 13, "three");
  // Every byte its own write, read by the server before the next is sent.
  for (size_t i = 0; i < b.len; ++i) {
    assert_true(raw_send(r, b.p + i, 1));
    WAIT(p->bytes_in == i + 1);
  }
  buf_free(&b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  frame_free(&f);
  raw_expect_pong(r, 11, "one");
  raw_expect_pong(r, 12, "");
  raw_expect_pong(r, 13, "three");
  assert_int_equal(fx.num_calls, 3);
  for (int i = 0; i < 3; ++i) assert_int_equal(fx.calls[i].rid, 11 + i);
}

static void test_many_frames_in_one_write(void** state) {
  start_server();
  raw_t* r = raw_connect();
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "burst");
  char data[16];
  for (int i = 0; i < 150; ++i) {  // more than frames_per_wakeup (64)
    snprintf(data, sizeof(data), "p%d", i);
    buf_ping(&b, 100 + (uint64_t)i, data);
  }
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  frame_free(&f);
  for (int i = 0; i < 150; ++i) {
    snprintf(data, sizeof(data), "p%d", i);
    raw_expect_pong(r, 100 + (uint64_t)i, data);
  }
  assert_int_equal(fx.num_calls, 150);
  for (int i = 0; i < 150; ++i) assert_int_equal(fx.calls[i].rid, 100 + i);
}

// Replies complete the request with their id, whatever order they come in.
static void test_reply_completes_request_by_id(void** state) {
  start_server();
  start_client("sesame");
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 0, &o);
  reply_t rs[4];
  memset(rs, 0, sizeof(rs));
  for (int i = 0; i < 4; ++i) request_ping(conn, "defer", &rs[i]);
  WAIT(fx.num_peers == 1 && last_peer()->num_deferred == 4);
  peer_t* p = last_peer();
  assert_int_equal(cw_net_conn_role(p->conn), ROLE_CLIENT);
  assert_string_equal(cw_net_conn_name(p->conn), "cli");  // named by its HELLO
  // Arrival k is answered "dk", last first.
  for (int k = 3; k >= 0; --k) {
    char data[8];
    snprintf(data, sizeof(data), "d%d", k);
    Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
    ping.data.data = (uint8_t*)data;
    ping.data.len = strlen(data);
    cw_net_conn_reply(p->conn, CW_MSG_PING, p->deferred[k], &ping.base);
  }
  WAIT(rs[0].done && rs[1].done && rs[2].done && rs[3].done);
  for (int k = 0; k < 4; ++k) {
    char want[8];
    snprintf(want, sizeof(want), "d%d", k);
    assert_int_equal(rs[k].code, CW_OK);
    assert_int_equal(rs[k].data_len, strlen(want));
    assert_memory_equal(rs[k].data, want, rs[k].data_len);
    assert_int_equal(rs[k].order, 3 - k);
  }
  assert_int_equal(o.closes, 0);
}

// A reply nobody asked for: an outbound connection closes (its requests
// fail with why); an accepted one gets a violation.
static void test_unknown_reply_id(void** state) {
  start_client("sesame");
  raw_listen();
  for (int wrong_type = 0; wrong_type < 2; ++wrong_type) {
    out_t o = {0};
    reply_t a = {0};
    cw_net_conn_t* conn;
    raw_t* s = connect_raw_peer(0, &o, &a, &conn);
    raw_answer_hello(s);
    frame_t f;
    raw_next(s, &f);
    assert_int_equal(f.h.type, CW_MSG_PING);
    uint64_t rid = f.h.request_id;
    frame_free(&f);
    // Either an id never sent, or the right id with another type.
    Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
    Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
    buf_t b = {0};
    if (wrong_type) buf_frame(&b, CW_MSG_DOWNLOAD, CW_FRAME_REPLY, rid, &ai.base, NULL, 0);
    else buf_frame(&b, CW_MSG_PING, CW_FRAME_REPLY, 999, &ping.base, NULL, 0);
    raw_send_buf(s, &b);
    WAIT(o.closes == 1);
    char want[128];
    snprintf(want, sizeof(want), "%s reply to unknown request %llu",
             wrong_type ? "DOWNLOAD" : "PING", wrong_type ? (unsigned long long)rid : 999ull);
    assert_int_equal(o.close_code, CW_UNAVAILABLE);
    assert_string_equal(o.close_msg, want);
    assert_true(a.done);
    assert_int_equal(a.code, CW_UNAVAILABLE);
    char want_req[200];
    snprintf(want_req, sizeof(want_req), "connection to srvname closed: %s", want);
    assert_string_equal(a.msg, want_req);
    raw_expect_eof(s);
    WAIT(o.freed);  // nobody kept a reference
  }

  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
  buf_t b = {0};
  buf_frame(&b, CW_MSG_PING, CW_FRAME_REPLY, 77, &ping.base, NULL, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 77, CW_INVALID_ARGUMENT, "unexpected PING reply");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 0);
}

// --- Limits --------------------------------------------------------------------------

// A HELLO from `name` whose payload is exactly `size` bytes.
static void buf_hello_sized(buf_t* b, size_t size) {
  char name[512];
  for (size_t n = 0; n < sizeof(name) - 1; ++n) {
    memset(name, 'n', n);
    name[n] = 0;
    Causeway__V1__HelloRequest h;
    cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, name);
    if (protobuf_c_message_get_packed_size(&h.base) == size) {
      buf_frame(b, CW_MSG_HELLO, 0, 1, &h.base, NULL, 0);
      return;
    }
  }
  fail_msg("no HELLO of %zu bytes", size);
}

// A PING whose payload is exactly `size` bytes.
static void buf_ping_sized(buf_t* b, uint64_t rid, size_t size) {
  char* data = malloc(size + 1);
  for (size_t n = 0; n < size; ++n) {
    memset(data, 'q', n);
    data[n] = 0;
    Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
    p.data.data = (uint8_t*)data;
    p.data.len = n;
    if (protobuf_c_message_get_packed_size(&p.base) == size) {
      buf_frame(b, CW_MSG_PING, 0, rid, &p.base, NULL, 0);
      free(data);
      return;
    }
  }
  free(data);
  fail_msg("no PING of %zu bytes", size);
}

static void test_prehello_limits(void** state) {
  start_server();
  // A request before HELLO is refused, then the connection closes...
  raw_t* r = raw_connect();
  raw_ping(r, 5, "early");
  raw_expect_error(r, CW_MSG_PING, 5, CW_FAILED_PRECONDITION, "PING before HELLO");
  raw_expect_eof(r);
  // ...whatever length it declares (refused before its length is checked).
  r = raw_connect();
  buf_t b = {0};
  buf_header(&b, CW_MSG_PING, 0, 6, 100000, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 6, CW_FAILED_PRECONDITION, "PING before HELLO");
  raw_expect_eof(r);
  // A HELLO over the pre-HELLO payload limit (256).
  r = raw_connect();
  buf_hello_sized(&b, 257);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_HELLO, 1, CW_RESOURCE_EXHAUSTED,
                   "HELLO payload of 257 bytes exceeds the limit of 256 bytes");
  raw_expect_eof(r);
  // Exactly at the limit is fine, and after HELLO the limits rise: a
  // 300-byte PING passes.
  r = raw_connect();
  buf_hello_sized(&b, 256);
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  frame_free(&f);
  buf_ping_sized(&b, 8, 300);
  raw_send_buf(r, &b);
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.request_id, 8);
  assert_int_equal(f.h.payload_len, 300);
  frame_free(&f);
  assert_int_equal(fx.num_calls, 1);  // only that PING reached a handler
  assert_int_equal(fx.num_peers, 4);
  for (int i = 0; i < 3; ++i) {
    WAIT(fx.peers[i]->closes == 1);
    assert_int_equal(fx.peers[i]->calls, 0);
  }
}

static void test_post_hello_limits(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  // A payload of exactly max_payload is served; one byte more is a violation.
  buf_t b = {0};
  buf_ping_sized(&b, 9, 4096);
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.payload_len, 4096);
  frame_free(&f);
  buf_header(&b, CW_MSG_PING, 0, 10, 4097, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 10, CW_RESOURCE_EXHAUSTED,
                   "PING payload of 4097 bytes exceeds the limit of 4096 bytes");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 1);
  // Bulk over max_bulk (declared only: refused from the header).
  r = raw_ready(7, &p);
  buf_header(&b, CW_MSG_UPLOAD, 0, 11, 0, (8u << 20) + 1);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_UPLOAD, 11, CW_RESOURCE_EXHAUSTED,
                   "UPLOAD bulk of 8388609 bytes exceeds the limit of 8388608 bytes");
  raw_expect_eof(r);
  // Bulk on a type that carries none.
  r = raw_ready(7, &p);
  buf_header(&b, CW_MSG_PING, 0, 12, 0, 10);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 12, CW_INVALID_ARGUMENT, "PING frames carry no bulk bytes");
  raw_expect_eof(r);
  assert_int_equal(fx.num_calls, 1);
}

static void test_hello_deadline(void** state) {
  fx.sopts.hello_timeout_ms = 150;
  start_server();
  int64_t t0 = cw_time_now_ms();
  raw_t* silent = raw_connect();
  WAIT(fx.num_peers == 1);
  peer_t* pt;
  raw_t* talker = raw_ready(0, &pt);
  peer_t* ps = fx.peers[0];
  assert_ptr_not_equal(ps, pt);
  raw_expect_eof(silent);
  int64_t waited = cw_time_now_ms() - t0;
  assert_true(waited >= 140);
  assert_int_equal(ps->closes, 1);
  assert_int_equal(ps->close_code, CW_DEADLINE_EXCEEDED);
  assert_string_equal(ps->close_msg, "no HELLO in time");
  // A peer past HELLO outlives the deadline.
  RUN_FOR(250);
  raw_ping(talker, 2, "alive");
  raw_expect_pong(talker, 2, "alive");
  assert_int_equal(pt->closes, 0);
}

static void test_max_connections(void** state) {
  fx.sopts.max_connections = 2;
  start_server();
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(0, &pb);
  raw_t* c = raw_connect();
  raw_expect_eof(c);  // refused: closed with nothing said
  assert_int_equal(fx.num_peers, 2);  // and never handed to on_accept
  raw_ping(a, 2, "a");
  raw_expect_pong(a, 2, "a");
  raw_ping(b, 2, "b");
  raw_expect_pong(b, 2, "b");
  // A place is free again once one closes.
  raw_close(a);
  WAIT(pa->closes == 1);
  peer_t* pd;
  raw_t* d = raw_ready(0, &pd);
  raw_ping(d, 2, "d");
  raw_expect_pong(d, 2, "d");
  assert_int_equal(fx.num_peers, 3);
}

// A peer flooding frames does not starve another: with frames_per_wakeup 4,
// each is handled at most 4 frames per loop turn and both progress in the
// same turns.
static void test_frames_per_wakeup_fairness(void** state) {
  fx.sopts.frames_per_wakeup = 4;
  start_server();
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(0, &pb);
  buf_t buf = {0};
  for (int i = 0; i < 400; ++i) buf_ping(&buf, 1000 + (uint64_t)i, "a");
  raw_send_buf(a, &buf);
  WAIT(pa->calls >= 1);  // a's flood is being handled
  int first_b = fx.num_calls;
  for (int i = 0; i < 20; ++i) buf_ping(&buf, 2000 + (uint64_t)i, "b");
  raw_send_buf(b, &buf);
  WAIT(pb->calls == 20);
  assert_true(pa->calls < 400);  // b did not wait for a's backlog
  // In every turn b's frames were handled, a's were too.
  for (int i = first_b; i < fx.num_calls; ++i) {
    if (fx.calls[i].peer != pb->id) continue;
    bool a_too = false;
    for (int j = 0; j < fx.num_calls && !a_too; ++j) {
      a_too = fx.calls[j].peer == pa->id && fx.calls[j].turn == fx.calls[i].turn;
    }
    assert_true(a_too);
  }
  WAIT(pa->calls == 400);
  assert_true(pa->max_turn_calls <= 4);
  assert_true(pb->max_turn_calls <= 4);
  for (int i = 0; i < 20; ++i) raw_expect_pong(b, 2000 + (uint64_t)i, "b");
  for (int i = 0; i < 400; ++i) raw_expect_pong(a, 1000 + (uint64_t)i, "a");
}

// --- HELLO and the message table ----------------------------------------------------

static void hello_refused(Causeway__V1__HelloRequest* h, cw_status_code_t code,
                          const char* needle) {
  raw_t* r = raw_connect();
  buf_t b = {0};
  buf_frame(&b, CW_MSG_HELLO, 0, 1, &h->base, NULL, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_HELLO, 1, code, needle);
  raw_expect_eof(r);
  peer_t* p = last_peer();
  WAIT(p->closes == 1);
  assert_int_equal(cw_net_conn_role(p->conn), 0);
}

static void test_hello_refusals(void** state) {
  start_server();
  Causeway__V1__HelloRequest h;
  cw_hello_request_fill(&h, ROLE_CLIENT, "open", 0, "x");
  hello_refused(&h, CW_UNAUTHENTICATED, "credentials refused: wrong token");
  cw_hello_request_fill(&h, ROLE_CLIENT, "", 0, "x");
  hello_refused(&h, CW_UNAUTHENTICATED, "credentials refused: no token presented");
  cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, "x");
  h.min_version = 7;
  h.max_version = 9;
  hello_refused(&h, CW_UNIMPLEMENTED, "protocol versions 7..9 not supported");
  h.min_version = 1;
  h.max_version = 0;
  hello_refused(&h, CW_UNIMPLEMENTED, "protocol versions 1..0 not supported");
  cw_hello_request_fill(&h, ROLE_CONTROLLER, "sesame", 0, "x");
  hello_refused(&h, CW_PERMISSION_DENIED, "the testsvc accepts HELLO role CLIENT or WORKER, not 3");
  cw_hello_request_fill(&h, 0, "sesame", 0, "x");
  hello_refused(&h, CW_PERMISSION_DENIED, "not 0");
  cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, "refuse-me");
  hello_refused(&h, CW_PERMISSION_DENIED, "refused by the test service");
  // A second HELLO.
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  raw_hello_as(r, "sesame", ROLE_CLIENT, 0, "again");
  raw_expect_error(r, CW_MSG_HELLO, 1, CW_FAILED_PRECONDITION, "second HELLO");
  raw_expect_eof(r);
  assert_int_equal(fx.num_calls, 0);  // no handler ran
}

static void send_empty(raw_t* r, uint16_t type, uint64_t rid) {
  buf_t b = {0};
  buf_frame(&b, type, 0, rid, NULL, NULL, 0);
  raw_send_buf(r, &b);
}

static void expect_reply_type(raw_t* r, uint16_t type, uint64_t rid) {
  frame_t f;
  raw_next(r, &f);
  if (f.h.flags & CW_FRAME_ERROR) {
    fail_msg("%s %llu: %s", cw_msg_type_name(type), (unsigned long long)rid,
             ((const Causeway__V1__ErrorReply*)f.msg)->message);
  }
  assert_int_equal(f.h.type, type);
  assert_int_equal(f.h.request_id, rid);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  frame_free(&f);
}

static void test_message_table_rules(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);  // a client without a session
  // Not served here: UNIMPLEMENTED with the service's hint; the connection stays.
  send_empty(r, CW_MSG_INVENTORY, 21);
  raw_expect_error(r, CW_MSG_INVENTORY, 21, CW_UNIMPLEMENTED,
                   "the testsvc does not serve INVENTORY (ask elsewhere)");
  // A sender the table forbids.
  send_empty(r, CW_MSG_REGISTER, 22);
  raw_expect_error(r, CW_MSG_REGISTER, 22, CW_PERMISSION_DENIED,
                   "REGISTER is for workers (this connection's HELLO role is CLIENT)");
  // A type that needs a session.
  send_empty(r, CW_MSG_COMPILE, 23);
  raw_expect_error(r, CW_MSG_COMPILE, 23, CW_FAILED_PRECONDITION,
                   "COMPILE needs a session (this CLIENT connection has none)");
  raw_ping(r, 24, "still here");
  raw_expect_pong(r, 24, "still here");
  assert_int_equal(p->calls, 1);
  assert_int_equal(p->closes, 0);
  // With a session the same COMPILE is served.
  r = raw_ready(9, &p);
  send_empty(r, CW_MSG_COMPILE, 25);
  expect_reply_type(r, CW_MSG_COMPILE, 25);
  // A worker may REGISTER but not COMPILE.
  r = raw_connect();
  raw_hello_as(r, "sesame", ROLE_WORKER, 0, "w");
  expect_reply_type(r, CW_MSG_HELLO, 1);
  p = last_peer();
  assert_int_equal(cw_net_conn_role(p->conn), ROLE_WORKER);
  send_empty(r, CW_MSG_REGISTER, 26);
  expect_reply_type(r, CW_MSG_REGISTER, 26);
  send_empty(r, CW_MSG_COMPILE, 27);
  raw_expect_error(r, CW_MSG_COMPILE, 27, CW_PERMISSION_DENIED,
                   "COMPILE is for clients or the controller");
  assert_int_equal(p->calls, 1);
}

// admit runs after the table's checks and before the handler, applied after
// it; a refused admission skips both. A handler (or admit) that takes the
// message owns it; otherwise the net frees it (ASan checks both).
static void test_admit_applied_and_ownership(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(3, &p);
  fx.log[0] = 0;
  buf_t b = {0};
  buf_ping(&b, 31, "a");
  buf_frame(&b, CW_MSG_STATS, 0, 32, NULL, NULL, 0);
  buf_frame(&b, CW_MSG_INVENTORY, 0, 33, NULL, NULL, 0);
  buf_ping(&b, 34, "take");
  buf_frame(&b, CW_MSG_EXE_INFO, 0, 35, NULL, NULL, 0);
  raw_send_buf(r, &b);
  raw_expect_pong(r, 31, "a");
  raw_expect_error(r, CW_MSG_STATS, 32, CW_ABORTED, "admit says not now");
  raw_expect_error(r, CW_MSG_INVENTORY, 33, CW_UNIMPLEMENTED, "does not serve INVENTORY");
  raw_expect_pong(r, 34, "take");
  expect_reply_type(r, CW_MSG_EXE_INFO, 35);
  assert_string_equal(fx.log,
                      "admit:PING,handler:PING,applied:PING,"
                      "admit:STATS,"
                      "admit:PING,handler:PING,applied:PING,"
                      "admit:EXE_INFO,handler:EXE_INFO,applied:EXE_INFO,");
  // The taken message is the handler's, intact after the net moved on.
  assert_non_null(p->kept);
  const Causeway__V1__Ping* kept = (const Causeway__V1__Ping*)p->kept;
  assert_int_equal(kept->data.len, 4);
  assert_memory_equal(kept->data.data, "take", 4);
  // admit may take it too.
  fx.admit_takes = true;
  send_empty(r, CW_MSG_STATS, 36);
  raw_expect_error(r, CW_MSG_STATS, 36, CW_ABORTED, "admit says not now");
  assert_non_null(fx.admitted_kept);
  assert_ptr_equal(fx.admitted_kept->descriptor, &causeway__v1__stats_request__descriptor);
}

// --- Batched writes ------------------------------------------------------------------

// Small replies are gathered while handlers run and written together before
// the loop blocks: no handler of a burst sees an earlier reply at the peer.
static void test_small_replies_are_batched(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  fx.probe_fd = r->fd;
  int first = fx.num_calls;
  buf_t b = {0};
  for (int i = 0; i < 20; ++i) buf_ping(&b, 300 + (uint64_t)i, "s");
  raw_send_buf(r, &b);
  WAIT(raw_has_frames(r, 20));
  assert_int_equal(fx.num_calls - first, 20);
  for (int i = first; i < fx.num_calls; ++i) {
    assert_int_equal(fx.calls[i].turn, fx.calls[first].turn);  // one read, one turn
    assert_false(fx.calls[i].probed);
  }
  for (int i = 0; i < 20; ++i) raw_expect_pong(r, 300 + (uint64_t)i, "s");
}

// A frame with bulk is written at once and takes the frames gathered before
// it along, in order.
static void test_bulk_frame_takes_gathered_frames(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  fx.probe_fd = r->fd;
  int first = fx.num_calls;
  buf_t b = {0};
  buf_ping(&b, 41, "one");
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 300000;
  buf_frame(&b, CW_MSG_DOWNLOAD, 0, 42, &dl.base, NULL, 0);
  buf_ping(&b, 43, "two");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 41, "one");
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_DOWNLOAD);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.request_id, 42);
  assert_int_equal(f.h.bulk_len, 300000);
  for (uint64_t i = 0; i < 300000; ++i) {
    if (f.bulk[i] != pattern(i)) fail_msg("bulk byte %llu differs", (unsigned long long)i);
  }
  frame_free(&f);
  raw_expect_pong(r, 43, "two");
  assert_int_equal(fx.num_calls - first, 3);
  assert_false(fx.calls[first].probed);     // PING 41's reply was only gathered...
  assert_true(fx.download_wrote_at_once);   // ...and went out with the DOWNLOAD reply
  assert_true(fx.calls[first + 2].probed);  // before PING 43 was handled
  WAIT(fx.bulk_frees == 1);
  RUN_FOR(20);
  assert_int_equal(fx.bulk_frees, 1);
}

static void send_event(cw_net_conn_t* conn, int i) {
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  char text[16];
  snprintf(text, sizeof(text), "e%d", i);
  ev.message = text;
  cw_net_conn_send(conn, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0, NULL, NULL);
}

static bool hook(void* user) {
  assert_ptr_equal(user, &fx);
  fx.hook_calls++;
  char b;
  if (fx.probe_fd >= 0 && recv(fx.probe_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0 &&
      !fx.hook_first_hit) {
    fx.hook_first_hit = fx.hook_calls;
  }
  if (fx.hook_true_left > 0 && fx.hook_conn) {
    send_event(fx.hook_conn, 3 - fx.hook_true_left);
    fx.hook_true_left--;
    return true;  // did work: run again
  }
  return false;
}

// The prepare hook runs before the gathered frames are written, again while
// it returns true; its frames go out in the same pass. cw_net_wake runs it.
static void test_prepare_hook_and_wake(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  cw_net_set_prepare_hook(&fx.srv, hook, &fx);
  fx.probe_fd = r->fd;
  fx.hook_conn = p->conn;
  fx.hook_true_left = 3;
  raw_ping(r, 51, "x");
  WAIT(raw_has_frames(r, 4));
  // Four calls (three true, one false) before anything was written; the
  // pass may call it again after writing.
  assert_true(fx.hook_calls >= 4);
  assert_true(fx.hook_first_hit == 0 || fx.hook_first_hit > 4);
  raw_expect_pong(r, 51, "x");
  for (int i = 0; i < 3; ++i) {
    frame_t f;
    raw_next(r, &f);
    assert_int_equal(f.h.type, CW_MSG_EVENT);
    assert_int_equal(f.h.flags, 0);
    char want[16];
    snprintf(want, sizeof(want), "e%d", i);
    assert_string_equal(((const Causeway__V1__ClusterEvent*)f.msg)->message, want);
    frame_free(&f);
  }
  // Idle: the hook does not run until something wakes the prepare phase.
  RUN_FOR(30);
  int calls = fx.hook_calls;
  RUN_FOR(30);
  assert_int_equal(fx.hook_calls, calls);
  cw_net_wake(&fx.srv);
  assert_int_equal(fx.hook_calls, calls);
  uv_run(&fx.loop, UV_RUN_NOWAIT);
  assert_int_equal(fx.hook_calls, calls + 1);
  RUN_FOR(30);
  assert_int_equal(fx.hook_calls, calls + 1);
}

// --- Bulk destinations ---------------------------------------------------------------

static void expect_ack(raw_t* r, uint64_t rid, uint64_t id) {
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_UPLOAD);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.request_id, rid);
  assert_int_equal(((const Causeway__V1__Ack*)f.msg)->id, id);
  frame_free(&f);
}

static void expect_dest_pattern(const peer_t* p, uint64_t n) {
  assert_int_equal(p->dest_len, n);
  for (uint64_t i = 0; i < n; ++i) {
    if (p->dest[i] != pattern(i)) fail_msg("bulk byte %llu differs", (unsigned long long)i);
  }
}

static void test_bulk_into_destination(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  // Small bulk arrives with its frame in the read-ahead; the next frame
  // right behind it is parsed right.
  buf_t b = {0};
  buf_upload(&b, 61, 1, 24, 24);
  buf_ping(&b, 62, "after");
  raw_send_buf(r, &b);
  expect_ack(r, 61, 1);
  raw_expect_pong(r, 62, "after");
  assert_int_equal(p->bulk_done, 1);
  assert_int_equal(p->bulk_done_rid, 61);
  expect_dest_pattern(p, 24);
  // Large bulk is read straight into the destination (reads larger than the
  // 64 KiB read-ahead), in pieces.
  uint64_t big = 3u << 20;
  p->max_read = 0;
  buf_upload(&b, 63, 1, (int64_t)big, big);
  buf_ping(&b, 64, "after big");
  assert_true(raw_send(r, b.p, 1000));
  WAIT(p->calls == 3);  // the UPLOAD's handler named the destination
  assert_true(raw_send(r, b.p + 1000, b.len - 1000));
  buf_free(&b);
  expect_ack(r, 63, 1);
  raw_expect_pong(r, 64, "after big");
  assert_int_equal(p->bulk_done, 2);
  assert_int_equal(p->bulk_done_rid, 63);
  expect_dest_pattern(p, big);
  assert_true(p->max_read > 65536);
  RUN_FOR(20);
  assert_int_equal(p->bulk_done, 2);  // once each
}

static void test_bulk_without_destination(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_upload(&b, 71, 2, 10, 10);
  buf_ping(&b, 72, "next");
  buf_upload(&b, 73, 2, 300000, 300000);
  buf_ping(&b, 74, "next again");
  raw_send_buf(r, &b);
  expect_ack(r, 71, 2);
  raw_expect_pong(r, 72, "next");
  expect_ack(r, 73, 2);
  raw_expect_pong(r, 74, "next again");
  assert_int_equal(p->bulk_done, 0);
  assert_true(p->max_read <= 65536);  // discarded through the read-ahead
  assert_int_equal(p->closes, 0);
}

static void test_bulk_check_refused(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_upload(&b, 81, 1, 24, 20);  // a u8[24] with 20 bytes
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_UPLOAD, 81, CW_INVALID_ARGUMENT,
                   "UPLOAD bulk of 20 bytes differs from the array's 24 bytes");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 0);
  WAIT(p->closes == 1);
}

static void request_download(cw_net_conn_t* conn, uint64_t size, reply_t* r) {
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = size;
  cw_net_conn_request(conn, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, NULL, NULL, on_reply, r);
}

// Reply bulk is collected and handed (taken) to the request's completion.
static void test_reply_bulk_collected(void** state) {
  start_server();
  start_client("sesame");
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 7, &o);
  reply_t rs[3];
  memset(rs, 0, sizeof(rs));
  const uint64_t sizes[3] = {0, 100, 300000};
  for (int i = 0; i < 3; ++i) request_download(conn, sizes[i], &rs[i]);
  WAIT(rs[0].done && rs[1].done && rs[2].done);
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(rs[i].code, CW_OK);
    assert_int_equal(rs[i].order, i);
    char want[24];
    snprintf(want, sizeof(want), "%llu", (unsigned long long)sizes[i]);
    assert_int_equal(rs[i].data_len, strlen(want));
    assert_memory_equal(rs[i].data, want, rs[i].data_len);
    assert_int_equal(rs[i].bulk_len, sizes[i]);
    if (!sizes[i]) assert_null(rs[i].bulk);
    for (uint64_t k = 0; k < sizes[i]; ++k) {
      if (rs[i].bulk[k] != pattern(k)) fail_msg("byte %llu differs", (unsigned long long)k);
    }
    free(rs[i].bulk);
  }
  WAIT(fx.bulk_frees == 2);
}

// While reading is held no frame is handled (those read wait); releasing
// resumes from the idle phase, not inside the call.
static void test_hold_reading(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_ping(&b, 91, "hold");
  buf_ping(&b, 92, "a");
  buf_ping(&b, 93, "b");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 91, "hold");
  raw_ping(r, 94, "c");  // not even read
  raw_expect_silence(r, 50);
  assert_int_equal(p->calls, 1);
  cw_net_conn_hold_reading(p->conn, false);
  assert_int_equal(p->calls, 1);
  uv_run(&fx.loop, UV_RUN_NOWAIT);
  assert_true(p->calls >= 3);  // those read already, from the idle phase
  raw_expect_pong(r, 92, "a");
  raw_expect_pong(r, 93, "b");
  raw_expect_pong(r, 94, "c");
  assert_int_equal(p->calls, 4);
}

// --- Close paths ---------------------------------------------------------------------

static void test_peer_eof_mid_payload(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_header(&b, CW_MSG_PING, 0, 101, 10, 0);
  buf_put(&b, "\x0a\x08" "ab", 4);
  size_t sent = b.len;
  raw_send_buf(r, &b);
  uint64_t before = p->bytes_in;
  WAIT(p->bytes_in == before + sent);
  raw_shutdown(r);
  WAIT(p->closes == 1);
  assert_int_equal(p->close_code, CW_UNAVAILABLE);
  assert_string_equal(p->close_msg, "connection closed by peer");
  assert_int_equal(p->calls, 0);
  WAIT(p->freed);
}

static void test_peer_eof_mid_bulk(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_upload(&b, 102, 1, 1 << 20, 1 << 20);
  size_t half = b.len / 2;
  uint64_t before = p->bytes_in;
  assert_true(raw_send(r, b.p, half));
  buf_free(&b);
  WAIT(p->bytes_in == before + half);
  assert_int_equal(p->calls, 1);
  raw_shutdown(r);
  WAIT(p->closes == 1);
  assert_int_equal(p->close_code, CW_UNAVAILABLE);
  assert_string_equal(p->close_msg, "connection closed by peer");
  assert_int_equal(p->bulk_done, 0);
  WAIT(p->freed);
}

// cw_net_conn_close with a reason: the connection's requests fail with it,
// on_close gets it once, and the memory stays while a reference is held.
static void test_close_with_reason(void** state) {
  start_server();
  start_client("sesame");
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 0, &o);
  cw_net_conn_retain(conn);
  reply_t sync = {0}, a = {0}, b = {0};
  request_ping(conn, "sync", &sync);  // answered: HELLO is done
  WAIT(sync.done);
  request_ping(conn, "defer", &a);
  request_ping(conn, "defer", &b);
  WAIT(fx.num_peers == 1 && last_peer()->num_deferred == 2);
  peer_t* p = last_peer();
  assert_true(cw_net_conn_is_open(conn));
  assert_null(cw_net_conn_close_reason(conn));
  cw_net_conn_close(conn, cw_make_status(CW_ABORTED, "the test is done with it"));
  assert_true(a.done && b.done);
  assert_true(a.order < b.order);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  assert_string_equal(a.msg, "connection to srvname closed: the test is done with it");
  assert_string_equal(b.msg, a.msg);
  assert_int_equal(o.closes, 1);
  assert_int_equal(o.completions_at_close, fx.completions);  // requests failed first
  assert_int_equal(o.close_code, CW_ABORTED);
  assert_string_equal(o.close_msg, "the test is done with it");
  assert_false(cw_net_conn_is_open(conn));
  assert_string_equal(cw_status_message(cw_net_conn_close_reason(conn)),
                      "the test is done with it");
  cw_net_conn_close(conn, cw_make_status(CW_INTERNAL, "again"));  // taken, ignored
  assert_int_equal(o.closes, 1);
  reply_t c = {0};
  request_ping(conn, "late", &c);  // fails before it returns
  assert_true(c.done);
  assert_int_equal(c.code, CW_UNAVAILABLE);
  assert_string_equal(c.msg, "connection to srvname is closed");
  WAIT(p->closes == 1);
  assert_string_equal(p->close_msg, "connection closed by peer");
  // on_free waits for the last reference.
  RUN_FOR(20);
  assert_false(o.freed);
  cw_net_conn_release(conn);
  assert_true(o.freed);
}

static void test_connect_to_dead_address(void** state) {
  start_client("sesame");
  // A port nobody listens on.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr*)&sa, sizeof(sa)), 0);
  socklen_t len = sizeof(sa);
  assert_int_equal(getsockname(s, (struct sockaddr*)&sa, &len), 0);
  close(s);
  char address[64];
  snprintf(address, sizeof(address), "127.0.0.1:%d", ntohs(sa.sin_port));
  char want[128];
  snprintf(want, sizeof(want), "peer %s unreachable: connection refused", address);
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(address, 0, &o);
  cw_net_conn_retain(conn);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  assert_string_equal(a.msg, want);
  assert_int_equal(o.closes, 1);
  assert_int_equal(o.close_code, CW_UNAVAILABLE);
  assert_string_equal(o.close_msg, want);
  assert_string_equal(cw_status_message(cw_net_conn_close_reason(conn)), want);
  reply_t b = {0};
  request_ping(conn, "y", &b);  // later requests learn why too
  assert_true(b.done);
  assert_string_equal(b.msg, want);
  cw_net_conn_release(conn);
  WAIT(o.freed);
}

static void test_refused_hello(void** state) {
  start_server();
  start_client("not the token");
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 0, &o);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAUTHENTICATED);
  const char* want = "peer srvname refused HELLO: credentials refused: wrong token";
  if (strncmp(a.msg, want, strlen(want)) != 0) fail_msg("got \"%s\"", a.msg);
  assert_int_equal(o.closes, 1);
  assert_int_equal(o.close_code, CW_UNAUTHENTICATED);
  assert_string_equal(o.close_msg, a.msg);
  assert_int_equal(fx.num_peers, 1);
  peer_t* p = fx.peers[0];
  WAIT(p->closes == 1);
  assert_int_equal(p->calls, 0);  // the PING behind the HELLO was never handled
  WAIT(o.freed);
}

// A violation answers, then closes once the answer (and what was written
// before it, a large bulk here) is out; frames behind it are not handled.
static void test_violation_closes_after_write(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_ping(&b, 111, "first");
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 4u << 20;
  buf_frame(&b, CW_MSG_DOWNLOAD, 0, 112, &dl.base, NULL, 0);
  buf_ping(&b, 113, "violate");
  buf_ping(&b, 114, "never");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 111, "first");
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.request_id, 112);
  assert_int_equal(f.h.bulk_len, 4u << 20);
  assert_int_equal(f.bulk[12345], pattern(12345));
  frame_free(&f);
  raw_expect_error(r, CW_MSG_PING, 113, CW_INVALID_ARGUMENT, "the test dislikes this PING");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 3);
  assert_int_equal(p->closes, 1);
  assert_true(p->closed_on_purpose);
  assert_int_equal(fx.bulk_frees, 1);
}

// Frames gathered and not yet written when a connection closes are tried once.
static void test_close_tries_gathered_frames(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_ping(&b, 121, "a");
  buf_ping(&b, 122, "close");
  buf_ping(&b, 123, "b");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 121, "a");
  raw_expect_pong(r, 122, "close");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 2);
  assert_int_equal(p->closes, 1);
}

static void test_on_free_after_last_reference(void** state) {
  fx.retain_accepted = true;
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  raw_close(r);
  WAIT(p->closes == 1);
  RUN_FOR(30);  // the handles are closed by now
  assert_false(p->freed);
  cw_net_conn_release(p->conn);
  assert_true(p->freed);
}

// A connection that closes after the connect but before the peer answered
// HELLO is no different from a later close: its requests fail UNAVAILABLE
// "connection to NAME closed: REASON" (only an unreachable peer or a refused
// HELLO fail them with the reason itself).
static void test_close_before_hello_answered(void** state) {
  start_client("sesame");
  raw_listen();
  for (int by_owner = 0; by_owner < 2; ++by_owner) {
    out_t o = {0};
    reply_t a = {0};
    cw_net_conn_t* conn;
    raw_t* s = connect_raw_peer(0, &o, &a, &conn);
    WAIT(raw_has_frames(s, 2));  // HELLO and PING, HELLO unanswered
    if (by_owner) {
      cw_net_conn_close(conn, cw_make_status(CW_ABORTED, "given up"));
    } else {
      raw_shutdown(s);
      WAIT(a.done);
    }
    assert_true(a.done);
    assert_int_equal(a.code, CW_UNAVAILABLE);
    assert_string_equal(a.msg, by_owner ? "connection to srvname closed: given up"
                                        : "connection to srvname closed: connection closed "
                                          "by peer");
    assert_int_equal(o.closes, 1);
    assert_int_equal(o.close_code, by_owner ? CW_ABORTED : CW_UNAVAILABLE);
    WAIT(o.freed);
    raw_close(s);
  }
}

// An EOF while a reply's bulk arrives fails that request (and frees what was
// collected).
static void test_outbound_eof_mid_reply_bulk(void** state) {
  start_client("sesame");
  raw_listen();
  out_t o = {0};
  cw_net_conn_t* conn;
  raw_t* s = connect_raw_peer(7, &o, NULL, &conn);
  reply_t a = {0};
  request_download(conn, 1000, &a);
  raw_answer_hello(s);
  frame_t f;
  raw_next(s, &f);
  assert_int_equal(f.h.type, CW_MSG_DOWNLOAD);
  Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
  buf_t b = {0};
  uint8_t bulk[1000] = {0};
  buf_frame(&b, CW_MSG_DOWNLOAD, CW_FRAME_REPLY, f.h.request_id, &ai.base, bulk, sizeof(bulk));
  frame_free(&f);
  assert_true(raw_send(s, b.p, b.len - 990));
  buf_free(&b);
  RUN_FOR(20);
  assert_false(a.done);
  raw_close(s);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  assert_string_equal(a.msg, "connection to srvname closed: connection closed by peer");
  assert_null(a.bulk);
  assert_int_equal(o.closes, 1);
  WAIT(o.freed);
}

// cw_net_stop closes every connection (on_close once each, requests failed,
// gathered frames tried), stops listening; deinitialize then leaves no
// handle open (teardown checks uv_loop_close).
static void test_stop_with_connections_open(void** state) {
  start_server();
  start_client("sesame");
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(7, &pb);
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 0, &o);
  reply_t d = {0};
  request_ping(conn, "defer", &d);
  WAIT(fx.num_peers == 3 && last_peer()->num_deferred == 1);
  peer_t* pc = last_peer();
  // A second client connection, to a peer that never answers.
  raw_listen();
  out_t o2 = {0};
  reply_t e = {0};
  cw_net_conn_t* conn2;
  raw_t* s = connect_raw_peer(0, &o2, &e, &conn2);
  raw_answer_hello(s);
  frame_t f;
  raw_next(s, &f);  // the PING arrived; HELLO is done
  assert_int_equal(f.h.type, CW_MSG_PING);
  frame_free(&f);
  // A reply gathered, not yet written, when the net stops.
  Causeway__V1__Ping bye = CAUSEWAY__V1__PING__INIT;
  bye.data.data = (uint8_t*)"bye";
  bye.data.len = 3;
  cw_net_conn_reply(pa->conn, CW_MSG_PING, 999, &bye.base);
  cw_net_stop(&fx.srv);
  assert_int_equal(pa->closes, 1);
  assert_int_equal(pb->closes, 1);
  assert_int_equal(pc->closes, 1);
  assert_true(pa->closed_on_purpose && pb->closed_on_purpose && pc->closed_on_purpose);
  cw_net_conn_reply(pc->conn, CW_MSG_PING, pc->deferred[0], &bye.base);  // ignored now
  assert_true(unix_connect(fx.path) < 0);  // no longer listening
  raw_expect_pong(a, 999, "bye");
  raw_expect_eof(a);
  raw_expect_eof(b);
  WAIT(d.done);
  assert_int_equal(d.code, CW_UNAVAILABLE);
  assert_string_equal(d.msg, "connection to srvname closed: connection closed by peer");
  assert_int_equal(o.closes, 1);
  assert_false(e.done);
  cw_net_stop(&fx.cli);
  assert_true(e.done);
  assert_int_equal(e.code, CW_UNAVAILABLE);
  assert_string_equal(e.msg, "connection to srvname closed");
  assert_int_equal(o2.closes, 1);
  assert_true(o2.closed_on_purpose);
  cw_net_deinitialize(&fx.srv);
  fx.srv_on = false;
  cw_net_deinitialize(&fx.cli);
  fx.cli_on = false;
  WAIT(fx.freed == 3 && o.freed && o2.freed);
  raw_expect_eof(s);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);  // as the daemons do: a write to a gone peer is an error
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(test_frames_split_byte_by_byte),
      T(test_many_frames_in_one_write),
      T(test_reply_completes_request_by_id),
      T(test_unknown_reply_id),
      T(test_prehello_limits),
      T(test_post_hello_limits),
      T(test_hello_deadline),
      T(test_max_connections),
      T(test_frames_per_wakeup_fairness),
      T(test_hello_refusals),
      T(test_message_table_rules),
      T(test_admit_applied_and_ownership),
      T(test_small_replies_are_batched),
      T(test_bulk_frame_takes_gathered_frames),
      T(test_prepare_hook_and_wake),
      T(test_bulk_into_destination),
      T(test_bulk_without_destination),
      T(test_bulk_check_refused),
      T(test_reply_bulk_collected),
      T(test_hold_reading),
      T(test_peer_eof_mid_payload),
      T(test_peer_eof_mid_bulk),
      T(test_close_with_reason),
      T(test_connect_to_dead_address),
      T(test_refused_hello),
      T(test_violation_closes_after_write),
      T(test_close_tries_gathered_frames),
      T(test_on_free_after_last_reference),
      T(test_close_before_hello_answered),
      T(test_outbound_eof_mid_reply_bulk),
      T(test_stop_with_connections_open),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
