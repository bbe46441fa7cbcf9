// The fixture of src/net's tests: see cw_net_test_fixture.h.
#include "cw_net_test_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cw_messages.h"
#include "cw_time.h"

net_fx_t fx;

static void tick_cb(uv_timer_t* t) { (void)t; }
static void check_cb(uv_check_t* c) {
  (void)c;
  fx.turn++;
}

void loop_begin(int timeout_ms) {
  fx.deadline = cw_time_now_ms() + timeout_ms;
  uv_timer_start(&fx.tick, tick_cb, 1, 1);
}
bool loop_step(void) {
  if (cw_time_now_ms() > fx.deadline) return false;
  uv_run(&fx.loop, UV_RUN_ONCE);
  return true;
}
void loop_end(void) { uv_timer_stop(&fx.tick); }

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

// UPLOAD with buffer_id 1 takes its bulk into p->dest; with buffer_id 3 it
// stops reading and leaves naming p->dest to the test; others discard it.
static void h_upload(cw_net_conn_t* conn, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  peer_t* p = cw_net_conn_user(conn);
  note_call(conn, h);
  const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)*msg;
  if (r->buffer_id == 1 || r->buffer_id == 3) {
    free(p->dest);
    p->dest = calloc(1, h->bulk_len ? h->bulk_len : 1);
    p->dest_len = h->bulk_len;
    if (r->buffer_id == 1) cw_net_conn_set_bulk_dest(conn, p->dest);
    else cw_net_conn_hold_reading(conn, true);
  }
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = r->buffer_id;
  cw_net_conn_reply(conn, h->type, h->request_id, &ack.base);
}

static void bulk_free(void* user) {
  fx.bulk_frees++;
  free(user);
}

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
  p->accept_turn = fx.turn;
  p->conn = conn;
  fx.peers[fx.num_peers++] = p;
  cw_net_conn_set_callbacks(conn, &peer_callbacks, p);
  if (fx.retain_accepted) cw_net_conn_retain(conn);
}

void start_server(void) {
  cw_net_initialize(&fx.srv, &fx.loop, &fx.sopts);
  fx.srv_on = true;
  cw_status_t st = cw_net_listen(&fx.srv, fx.path, &svc, on_accept);
  assert_null(st);
  assert_string_equal(fx.srv.listen_address, fx.path);
}

cw_status_t listen_at(cw_net_t* net, const char* address) {
  return cw_net_listen(net, address, &svc, on_accept);
}

void start_server_tcp(void) {
  cw_net_initialize(&fx.srv, &fx.loop, &fx.sopts);
  fx.srv_on = true;
  cw_status_t st = cw_net_listen(&fx.srv, "127.0.0.1:0", &svc, on_accept);
  assert_null(st);
}

void start_client(const char* token) {
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

out_t* new_out(void) {
  assert_true(fx.num_outs < (int)(sizeof(fx.outs) / sizeof(fx.outs[0])));
  return &fx.outs[fx.num_outs++];
}

cw_net_conn_t* connect_client(const char* address, uint64_t session, out_t* o) {
  return connect_client_within(address, session, o, WAIT_MS);
}

cw_net_conn_t* connect_client_within(const char* address, uint64_t session, out_t* o,
                                     int64_t timeout_ms) {
  cw_net_conn_t* conn = NULL;
  cw_status_t st = cw_net_connect(&fx.cli, address, "srvname", ROLE_CLIENT, session,
                                  &out_callbacks, o, timeout_ms, &conn);
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

void expect_failed(const reply_t* r, cw_status_code_t code, const char* msg) {
  assert_true(r->done);
  if (r->code != code || strcmp(r->msg, msg) != 0) {
    fail_msg("got %s \"%s\", want %s \"%s\"", cw_status_code_name(r->code), r->msg,
             cw_status_code_name(code), msg);
  }
}

void request_ping(cw_net_conn_t* conn, const char* data, reply_t* r) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)(uintptr_t)data;
  p.data.len = strlen(data);
  cw_net_conn_request(conn, CW_MSG_PING, &p.base, NULL, 0, NULL, NULL, on_reply, r);
}

// --- Raw peers ----------------------------------------------------------------------

void buf_put(buf_t* b, const void* data, size_t n) {
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

void buf_header(buf_t* b, uint16_t type, uint32_t flags, uint64_t rid, uint32_t plen,
                       uint64_t blen) {
  cw_frame_header_t h = {CW_FRAME_MAGIC, CW_PROTOCOL_VERSION, type, flags, plen, rid, blen};
  uint8_t out[CW_FRAME_HEADER_SIZE];
  cw_frame_header_encode(&h, out);
  buf_put(b, out, sizeof(out));
}

// A frame whose header matches its payload and bulk.
void buf_frame(buf_t* b, uint16_t type, uint32_t flags, uint64_t rid,
                      const ProtobufCMessage* m, const void* bulk, uint64_t blen) {
  size_t plen = m ? protobuf_c_message_get_packed_size(m) : 0;
  buf_header(b, type, flags, rid, (uint32_t)plen, blen);
  uint8_t* payload = malloc(plen + 1);
  if (plen) protobuf_c_message_pack(m, payload);
  buf_put(b, payload, plen);
  free(payload);
  buf_put(b, bulk, (size_t)blen);
}

void buf_ping(buf_t* b, uint64_t rid, const char* data) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)(uintptr_t)data;
  p.data.len = strlen(data);
  buf_frame(b, CW_MSG_PING, 0, rid, &p.base, NULL, 0);
}

void buf_hello(buf_t* b, const char* token, int role, uint64_t session, const char* name) {
  Causeway__V1__HelloRequest h;
  cw_hello_request_fill(&h, role, token, session, name);
  buf_frame(b, CW_MSG_HELLO, 0, 1, &h.base, NULL, 0);
}

// An UPLOAD of a u8[n] array (buffer_id 1: into a destination) with `blen`
// bulk bytes of pattern.
void buf_upload(buf_t* b, uint64_t rid, uint64_t buffer_id, int64_t n, uint64_t blen) {
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

void buf_free(buf_t* b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

raw_t* raw_adopt(int fd) {
  assert_true(fx.num_raws < MAX_RAWS);
  raw_t* r = &fx.raws[fx.num_raws++];
  memset(r, 0, sizeof(*r));
  r->fd = fd;
  assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  return r;
}

int unix_connect(const char* path) {
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

raw_t* raw_connect(void) {
  int fd = unix_connect(fx.path);
  assert_true(fd >= 0);
  return raw_adopt(fd);
}

raw_t* raw_connect_tcp(const char* from_ip) {
  struct sockaddr_storage to;
  assert_null(cw_net_parse_host_port(fx.srv.listen_address, &to));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in from = {.sin_family = AF_INET};
  assert_int_equal(inet_pton(AF_INET, from_ip, &from.sin_addr), 1);
  assert_int_equal(bind(fd, (struct sockaddr*)&from, sizeof(from)), 0);
  assert_int_equal(connect(fd, (struct sockaddr*)&to, sizeof(struct sockaddr_in)), 0);
  return raw_adopt(fd);
}

// EOF for the server, without the reset a close with unread replies gives.
void raw_shutdown(raw_t* r) { assert_int_equal(shutdown(r->fd, SHUT_WR), 0); }

void raw_close(raw_t* r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
}

// Reads what the socket has now.
void raw_fill(raw_t* r) {
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
bool raw_send(raw_t* r, const void* data, size_t len) {
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

void raw_send_buf(raw_t* r, buf_t* b) {
  assert_true(raw_send(r, b->p, b->len));
  buf_free(b);
}

void frame_free(frame_t* f) {
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

bool raw_has_frames(raw_t* r, int count) {
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

bool raw_has_frame(raw_t* r) {
  raw_fill(r);
  return raw_frame_size(r) > 0;
}

void raw_next(raw_t* r, frame_t* f) {
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
void raw_expect_error(raw_t* r, uint16_t type, uint64_t rid, cw_status_code_t code,
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
void raw_expect_pong(raw_t* r, uint64_t rid, const char* data) {
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
void raw_expect_eof(raw_t* r) {
  WAIT((raw_fill(r), r->eof || r->reset));
  assert_int_equal(r->len, 0);
}

void raw_expect_silence(raw_t* r, int ms) {
  RUN_FOR(ms);
  raw_fill(r);
  assert_int_equal(r->len, 0);
  assert_false(r->eof || r->reset);
}

void raw_hello_as(raw_t* r, const char* token, int role, uint64_t session,
                         const char* name) {
  buf_t b = {0};
  buf_hello(&b, token, role, session, name);
  raw_send_buf(r, &b);
}

// HELLO as a client with `session` (0: none), answered OK.
void raw_hello(raw_t* r, uint64_t session) {
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

void raw_ping(raw_t* r, uint64_t rid, const char* data) {
  buf_t b = {0};
  buf_ping(&b, rid, data);
  raw_send_buf(r, &b);
}

// The last accepted connection's server side.
peer_t* last_peer(void) {
  assert_true(fx.num_peers > 0);
  peer_t* p = fx.peers[fx.num_peers - 1];
  assert_non_null(p);
  assert_false(p->freed);
  return p;
}

// A raw peer past HELLO and its server side.
raw_t* raw_ready(uint64_t session, peer_t** out_peer) {
  int before = fx.num_peers;
  raw_t* r = raw_connect();
  raw_hello(r, session);
  assert_int_equal(fx.num_peers, before + 1);
  if (out_peer) *out_peer = last_peer();
  return r;
}

// --- Setup ---------------------------------------------------------------------------

int fx_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
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

int fx_teardown(void** state) {
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
void raw_listen(void) {
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

raw_t* raw_accept(void) {
  int fd = -1;
  RUN_UNTIL((fd = accept(fx.listen_fd, NULL, NULL)) >= 0, WAIT_MS);
  assert_true(fd >= 0);
  return raw_adopt(fd);
}

// A client net connection to the raw listener, and the raw side it
// accepted; a PING "x" follows HELLO when `ping` is given.
raw_t* connect_raw_peer(uint64_t session, out_t* o, reply_t* ping,
                               cw_net_conn_t** out_conn) {
  *out_conn = connect_client(fx.raw_path, session, o);
  if (ping) request_ping(*out_conn, "x", ping);
  return raw_accept();
}

// Reads the HELLO a client net sent and accepts it.
void raw_answer_hello(raw_t* s) {
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

void send_empty(raw_t* r, uint16_t type, uint64_t rid) {
  buf_t b = {0};
  buf_frame(&b, type, 0, rid, NULL, NULL, 0);
  raw_send_buf(r, &b);
}

void expect_reply_type(raw_t* r, uint16_t type, uint64_t rid) {
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

void request_upload(cw_net_conn_t* conn, const ProtobufCMessage* msg, const void* bulk,
                    uint64_t len, cw_net_free_fn bulk_free, void* user, reply_t* r) {
  cw_net_conn_request(conn, CW_MSG_UPLOAD, msg, bulk, len, bulk_free, user, on_reply, r);
}

void request_upload_pattern(cw_net_conn_t* conn, uint64_t n, reply_t* r) {
  uint8_t* up = malloc(n ? n : 1);
  assert_non_null(up);
  for (uint64_t i = 0; i < n; ++i) up[i] = pattern(i);
  Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  int64_t dims = (int64_t)n;
  u.buffer_id = 1;
  u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
  u.n_dims = 1;
  u.dims = &dims;
  request_upload(conn, &u.base, up, n, free, up, r);
}

void expect_pattern_uploaded(uint64_t n) {
  peer_t* p = last_peer();
  WAIT(p->bulk_done == 1);
  assert_int_equal(p->dest_len, n);
  for (uint64_t i = 0; i < n; ++i) {
    if (p->dest[i] != pattern(i)) fail_msg("upload byte %llu differs", (unsigned long long)i);
  }
}

void request_download(cw_net_conn_t* conn, uint64_t size, reply_t* r) {
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = size;
  cw_net_conn_request(conn, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, NULL, NULL, on_reply, r);
}
