// The fake peer of the client library's unit tests (cw_client_fake_peer.h).
#include "cw_client_fake_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void fake_fail(fake_t* f, int line, const char* what) {
  if (!f->failure[0]) {
    snprintf(f->failure, sizeof(f->failure), "fake peer, line %d: %s", line, what);
    fprintf(stderr, "%s\n", f->failure);
  }
}

bool write_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

bool fake_write_all(fake_t* f, const void* data, size_t len) {
  if (!f->ssl) return write_all(f->fd, data, len);
  const uint8_t* p = data;
  while (len) {  // partial writes: the context allows them
    size_t w = 0;
    if (SSL_write_ex(f->ssl, p, len, &w) != 1) return false;
    p += w;
    len -= w;
  }
  return true;
}

static bool read_all(fake_t* f, void* data, size_t len) {
  uint8_t* p = data;
  while (len) {
    size_t got = 0;
    if (f->ssl) {
      if (SSL_read_ex(f->ssl, p, len, &got) != 1) return false;
      p += got;
      len -= got;
      continue;
    }
    ssize_t n = recv(f->fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

void frame_free(frame_t* fr) {
  if (fr->msg) protobuf_c_message_free_unpacked(fr->msg, NULL);
  free(fr->bulk);
  memset(fr, 0, sizeof(*fr));
}

bool fake_read(fake_t* f, frame_t* fr) {
  memset(fr, 0, sizeof(*fr));
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  if (!read_all(f, hdr, sizeof(hdr))) return false;
  cw_frame_limits_t lim = {.max_payload = 1u << 24, .max_bulk = 1ull << 32};
  cw_status_t s = cw_frame_header_decode(hdr, sizeof(hdr), &lim, &fr->h);
  if (s) {
    fake_fail(f, __LINE__, cw_status_message(s));
    cw_status_free(s);
    return false;
  }
  uint8_t* payload = malloc(fr->h.payload_len + 1);
  if (!read_all(f, payload, fr->h.payload_len)) {
    free(payload);
    return false;
  }
  s = cw_frame_decode_payload(&fr->h, payload, &fr->msg);
  free(payload);
  if (s) {
    fake_fail(f, __LINE__, cw_status_message(s));
    cw_status_free(s);
    return false;
  }
  if (fr->h.bulk_len) {
    fr->bulk = malloc(fr->h.bulk_len);
    if (!read_all(f, fr->bulk, fr->h.bulk_len)) {
      frame_free(fr);
      return false;
    }
  }
  return true;
}

bool fake_write(fake_t* f, uint16_t type, uint32_t flags, uint64_t id,
                const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len) {
  return fake_write_head(f, type, flags, id, msg, bulk_len) &&
         (!bulk_len || fake_write_all(f, bulk, bulk_len));
}

bool fake_write_head(fake_t* f, uint16_t type, uint32_t flags, uint64_t id,
                     const ProtobufCMessage* msg, uint64_t bulk_len) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t* buf = malloc(len + 1);
  protobuf_c_message_pack(msg, buf);
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC,
                         .version = 1,
                         .type = type,
                         .flags = flags,
                         .payload_len = (uint32_t)len,
                         .request_id = id,
                         .bulk_len = bulk_len};
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  cw_frame_header_encode(&h, hdr);
  bool ok = fake_write_all(f, hdr, sizeof(hdr)) && fake_write_all(f, buf, len);
  free(buf);
  return ok;
}

bool fake_reply(fake_t* f, const frame_t* req, const ProtobufCMessage* msg,
                const void* bulk, uint64_t bulk_len) {
  return fake_write(f, req->h.type, CW_FRAME_REPLY, req->h.request_id, msg, bulk, bulk_len);
}

bool fake_ack(fake_t* f, const frame_t* req) {
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  return fake_reply(f, req, &ack.base, NULL, 0);
}

bool fake_error(fake_t* f, uint16_t type, uint64_t id, uint32_t code, const char* text) {
  Causeway__V1__ErrorReply e = CAUSEWAY__V1__ERROR_REPLY__INIT;
  e.code = code;
  e.message = (char*)text;
  return fake_write(f, type, CW_FRAME_REPLY | CW_FRAME_ERROR, id, &e.base, NULL, 0);
}

static void fake_hello(fake_t* f) {
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.type == CW_MSG_HELLO && fr.h.flags == 0);
  const Causeway__V1__HelloRequest* h = (const Causeway__V1__HelloRequest*)fr.msg;
  f->hello_min = h->min_version;
  f->hello_max = h->max_version;
  f->hello_role = h->role;
  snprintf(f->hello_token, sizeof(f->hello_token), "%.*s", (int)h->token.len,
           (const char*)h->token.data);
  // Atomic: a test may poll it from its own thread to see the HELLO came.
  __atomic_store_n(&f->hello_session, h->session_id, __ATOMIC_RELEASE);
  f->hello_keepalive = h->keepalive_ms;
  f->hello_reattach_key = h->reattach_session_key;
  snprintf(f->hello_peer_name, sizeof(f->hello_peer_name), "%s", h->peer_name);
  if (f->hello_silent) {
    // Hold the connection until the client gives up.
    char c;
    while (f->ssl ? SSL_read(f->ssl, &c, 1) > 0 : recv(f->fd, &c, 1, 0) > 0) {
    }
    frame_free(&fr);
    return;
  }
  while (atomic_load(&f->hello_hold)) usleep(1000);
  if (f->hello_error_code) {
    fake_error(f, CW_MSG_HELLO, fr.h.request_id, f->hello_error_code, f->hello_error_message);
  } else {
    Causeway__V1__HelloReply r = CAUSEWAY__V1__HELLO_REPLY__INIT;
    r.version = 1;
    r.session_id = 77;
    r.worker_name = "fake-worker";
    r.max_payload = 1u << 24;
    r.max_bulk = 1ull << 32;
    r.keepalive_ms = f->keepalive_reply_ms;
    r.session_key = f->session_key_reply;
    r.session_seq_next = f->seq_next_reply;
    fake_reply(f, &fr, &r.base, NULL, 0);
  }
  frame_free(&fr);
}

static bool fake_serve_one(fake_t* f);

static void* fake_main(void* arg) {
  fake_t* f = arg;
  for (int i = 0; i < f->close_first; ++i) {
    int fd = accept(f->listen_fd, NULL, NULL);
    if (fd >= 0) close(fd);
  }
  if (f->close_only) return NULL;
  for (int round = 0; round <= f->serve_again; ++round) {
    if (!fake_serve_one(f)) break;
  }
  return NULL;
}

static bool fake_serve_one(fake_t* f) {
  // Atomic: a test may shut it down from its own thread.
  __atomic_store_n(&f->fd, accept(f->listen_fd, NULL, NULL), __ATOMIC_RELEASE);
  if (f->fd < 0) {
    fake_fail(f, __LINE__, "accept failed");
    return false;
  }
  if (f->tls) {
    cw_status_t st = cw_tls_ssl_new(f->tls, NULL, &f->ssl);
    if (!st && SSL_set_fd(f->ssl, f->fd) == 1) {
      int r = SSL_accept(f->ssl);
      if (r != 1) cw_tls_describe_error(f->ssl, r, f->tls_error, sizeof(f->tls_error));
    } else {
      snprintf(f->tls_error, sizeof(f->tls_error), "setting up TLS failed");
    }
    cw_status_free(st);
    if (f->tls_error[0]) {
      SSL_free(f->ssl);
      f->ssl = NULL;
      close(f->fd);
      return false;
    }
  }
  fake_hello(f);
  if (!f->failure[0] && !f->hello_silent && !f->hello_error_code && f->script) f->script(f);
  SSL_free(f->ssl);
  f->ssl = NULL;
  close(f->fd);
  return !f->failure[0];
}

// A Unix socket listening at `path`.
static int listen_unix(const char* path, int backlog) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
  assert_int_equal(bind(fd, (struct sockaddr*)&sun, sizeof(sun)), 0);
  assert_int_equal(listen(fd, backlog), 0);
  return fd;
}

void fake_start(fake_t* f, fake_script_fn script) {
  f->script = script;
  snprintf(f->dir, sizeof(f->dir), "/tmp/cw_client_test.XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  if (f->tls || f->plain_tcp) {
    f->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->listen_fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(f->listen_fd, (struct sockaddr*)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(f->listen_fd, (struct sockaddr*)&sa, &len), 0);
    snprintf(f->path, sizeof(f->path), "127.0.0.1:%u", ntohs(sa.sin_port));
    assert_int_equal(listen(f->listen_fd, 4), 0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
    return;
  }
  snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
  f->listen_fd = listen_unix(f->path, 4);
  assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

void fake_start_beside(fake_t* f, const fake_t* main, fake_script_fn script) {
  f->script = script;
  f->beside = true;
  f->tls = main->tls;
  f->plain_tcp = main->plain_tcp;
  f->listen_fd = main->listen_fd;
  snprintf(f->path, sizeof(f->path), "%s", main->path);
  assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

void fake_join(fake_t* f) {
  pthread_join(f->thread, NULL);
  if (f->beside) {
    if (f->failure[0]) fail_msg("%s", f->failure);
    return;
  }
  close(f->listen_fd);
  if (!f->tls && !f->plain_tcp) unlink(f->path);
  rmdir(f->dir);
  if (f->failure[0]) fail_msg("%s", f->failure);
}

void fake_silent_start(fake_silent_t* s) {
  snprintf(s->dir, sizeof(s->dir), "/tmp/cw_silent.XXXXXX");
  assert_non_null(mkdtemp(s->dir));
  snprintf(s->path, sizeof(s->path), "%s/sock", s->dir);
  s->fd = listen_unix(s->path, 16);
}

bool fake_silent_stop(fake_silent_t* s) {
  int got = fcntl(s->fd, F_SETFL, O_NONBLOCK) == 0 ? accept(s->fd, NULL, NULL) : -1;
  if (got >= 0) close(got);
  close(s->fd);
  unlink(s->path);
  rmdir(s->dir);
  return got >= 0;
}

cw_client_t* connect_ok(fake_t* f) {
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f->path, NULL, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  return c;
}

void expect_status(cw_status_t s, cw_status_code_t code, const char* needle) {
  if (cw_status_code(s) != code || (needle && !strstr(cw_status_message(s), needle))) {
    char buf[512];
    snprintf(buf, sizeof(buf), "want %s containing \"%s\", got %s: %s",
             cw_status_code_name(code), needle ? needle : "", cw_status_code_name(cw_status_code(s)),
             cw_status_message(s));
    cw_status_free(s);
    fail_msg("%s", buf);
  }
  cw_status_free(s);
}

void assert_ok(cw_status_t s) {
  if (s) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s: %s", cw_status_code_name(cw_status_code(s)),
             cw_status_message(s));
    cw_status_free(s);
    fail_msg("%s", buf);
  }
}

void rec_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  rec_t* r = user;
  pthread_mutex_lock(&r->mu);
  r->calls++;
  r->code = cw_status_code(status);
  snprintf(r->message, sizeof(r->message), "%s", cw_status_message(status));
  if (reply && reply->descriptor == &causeway__v1__ping__descriptor) {
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    snprintf(r->data, sizeof(r->data), "%.*s", (int)p->data.len, (const char*)p->data.data);
  }
  pthread_mutex_unlock(&r->mu);
  cw_status_free(status);
}

cw_status_t send_ping(cw_client_t* c, const char* data, cw_client_done_fn done,
                      void* user, uint64_t* out_id) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)data;
  p.data.len = strlen(data);
  return cw_client_send(c, CW_MSG_PING, &p.base, NULL, 0, NULL, done, user, out_id);
}

void script_echo(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    bool ok;
    if (fr.h.type == CW_MSG_PING) {
      ok = fake_reply(f, &fr, fr.msg, NULL, 0);
    } else if (fr.h.type == CW_MSG_DOWNLOAD) {
      Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
      info.buffer_id = ((Causeway__V1__DownloadRequest*)fr.msg)->buffer_id;
      info.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
      info.size = f->pattern_len;
      ok = fake_reply(f, &fr, &info.base, f->pattern, f->pattern_len);
    } else if (fr.h.type == CW_MSG_SERIALIZE) {
      Causeway__V1__SerializeReply r = CAUSEWAY__V1__SERIALIZE_REPLY__INIT;
      r.exe_id = ((Causeway__V1__SerializeRequest*)fr.msg)->exe_id;
      r.size = f->pattern_len;
      ok = fake_reply(f, &fr, &r.base, f->pattern, f->pattern_len);
    } else if (fr.h.type == CW_MSG_UPLOAD) {
      // Check the bytes arrived intact, then ack.
      if (f->pattern &&
          (fr.h.bulk_len != f->pattern_len || memcmp(fr.bulk, f->pattern, f->pattern_len) != 0)) {
        fake_fail(f, __LINE__, "upload bulk differs from the pattern");
      }
      ok = fake_ack(f, &fr);
    } else {
      void (*hook)(void*, uint32_t) = __atomic_load_n(&f->before_ack, __ATOMIC_ACQUIRE);
      if (hook) hook(__atomic_load_n(&f->before_ack_user, __ATOMIC_ACQUIRE), fr.h.type);
      ok = fake_ack(f, &fr);
    }
    frame_free(&fr);
    if (!ok) return;
  }
}

uint8_t* make_pattern(size_t len) {
  uint8_t* p = malloc(len);
  uint32_t x = 12345;
  for (size_t i = 0; i < len; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = (uint8_t)(x >> 16);
  }
  return p;
}
