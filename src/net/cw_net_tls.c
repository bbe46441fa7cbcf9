// TLS under libuv for src/net's connections (cw_net_internal.h). The SSL of
// a connection has a BIO of ours (no socket under it): reading takes the
// ciphertext libuv read into c->tls_in, writing appends ciphertext to
// c->tls_out, which is then handed to libuv as it is (memory BIOs would copy
// both ways, and grow by reallocating and wiping). Plaintext goes into the
// parser's readahead, or straight into a bulk destination (SSL_read_ex into
// the handler's memory). Writes are queued as plaintext items (gathered
// frames, then bulk straight from caller memory) and encrypted as libuv
// drains the ciphertext, at most CW__TLS_INFLIGHT bytes ahead, so a 1 GiB
// bulk never has a 1 GiB ciphertext copy.
//
// An accepted connection on a TLS listener that starts with a causeway frame
// (a peer with TLS off) is answered in plaintext with an error that says TLS
// is required, and closed; anything else that is not a TLS handshake is
// closed. The HELLO deadline covers the handshake.
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "cw_log.h"
#include "cw_net_internal.h"
#include "cw_time.h"

#define CW__TLS_CHUNK (256 * 1024)       // plaintext handed to SSL_write at once
#define CW__TLS_INFLIGHT (4 * 1024 * 1024)  // ciphertext handed to libuv, not yet written
// Ciphertext of a chunk's records fits a buffer of this size (the net keeps
// some for reuse).
#define CW__TLS_OUT_CHUNK (CW__TLS_CHUNK + 16 * 1024)

static void cw__pump_out(cw_net_conn_t* c);
static void cw__flush(cw_net_conn_t* c);

// --- The connection's BIO ------------------------------------------------------------

static int cw__bio_read(BIO* b, char* out, size_t len, size_t* out_read) {
  cw_net_conn_t* c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  size_t avail = c->tls_in_len - c->tls_in_off;
  if (!avail) {
    BIO_set_retry_read(b);  // more when libuv reads it
    *out_read = 0;
    return 0;
  }
  size_t n = avail < len ? avail : len;
  memcpy(out, c->tls_in + c->tls_in_off, n);
  c->tls_in_off += n;
  *out_read = n;
  return 1;
}

static int cw__bio_write(BIO* b, const char* data, size_t len, size_t* out_written) {
  cw_net_conn_t* c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  cw_net_t* net = c->net;
  if (!c->tls_out && c->tls_up && net->tls_pool_n > 0) {
    c->tls_out = net->tls_pool[--net->tls_pool_n];
    c->tls_out_cap = CW__TLS_OUT_CHUNK;
  }
  if (len > c->tls_out_cap - c->tls_out_len) {
    // A whole chunk's records at once after the handshake (growing by
    // doubling would copy them again and again); small before it.
    size_t cap = c->tls_out_cap ? c->tls_out_cap : c->tls_up ? CW__TLS_OUT_CHUNK : 16 * 1024;
    while (cap - c->tls_out_len < len) cap *= 2;
    uint8_t* grown = realloc(c->tls_out, cap);
    if (!grown) return 0;  // OpenSSL reports the failed write
    c->tls_out = grown;
    c->tls_out_cap = cap;
  }
  memcpy(c->tls_out + c->tls_out_len, data, len);
  c->tls_out_len += len;
  *out_written = len;
  return 1;
}

static long cw__bio_ctrl(BIO* b, int cmd, long num, void* ptr) {
  cw_net_conn_t* c = BIO_get_data(b);
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // cw__flush hands tls_out to libuv
    case BIO_CTRL_PENDING:
      return c ? (long)(c->tls_in_len - c->tls_in_off) : 0;
    case BIO_CTRL_WPENDING:
      return c ? (long)c->tls_out_len : 0;
    default:
      return 0;
  }
}

static BIO_METHOD* g_bio_method;

static void cw__bio_method_make(void) {
  BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "causeway-net");
  if (m && BIO_meth_set_read_ex(m, cw__bio_read) && BIO_meth_set_write_ex(m, cw__bio_write) &&
      BIO_meth_set_ctrl(m, cw__bio_ctrl)) {
    g_bio_method = m;
  } else {
    BIO_meth_free(m);
  }
}

cw_status_t cw_net__tls_context(cw_net_t* net, bool server, cw_tls_t** out) {
  *out = NULL;
  if (!net->tls) {
    CW_RETURN_IF_ERROR(cw_tls_create(&net->options.tls, server, &net->tls), "TLS");
  }
  *out = net->tls;
  return cw_ok_status();
}

cw_status_t cw_net_reload_tls(cw_net_t* net) {
  if (!net->options.tls.enabled) return cw_ok_status();
  // Made now also when no connection made it yet (a worker on a Unix socket
  // before its first link out): broken files are said at the reload.
  cw_tls_t* fresh = NULL;
  CW_RETURN_IF_ERROR(cw_tls_create(&net->options.tls, net->tls_listener, &fresh), "TLS");
  // Each connection's SSL holds its own reference to the old context.
  cw_tls_release(net->tls);
  net->tls = fresh;
  return cw_ok_status();
}

// The SSL with its two memory BIOs. `peer_host` NULL: accepting.
static cw_status_t cw__ssl_attach(cw_net_conn_t* c, const char* peer_host) {
  cw_tls_t* tls = NULL;
  CW_RETURN_IF_ERROR(cw_net__tls_context(c->net, peer_host == NULL, &tls), "");
  SSL* ssl = NULL;
  CW_RETURN_IF_ERROR(cw_tls_ssl_new(tls, peer_host, &ssl), "");
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cw__bio_method_make);
  BIO* bio = g_bio_method ? BIO_new(g_bio_method) : NULL;
  if (!bio) {
    SSL_free(ssl);
    ERR_clear_error();
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for TLS");
  }
  BIO_set_data(bio, c);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);  // one reference, both ways
  // Before HELLO an idle connection holds no record buffers.
  if (!peer_host) SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
  c->ssl = ssl;
  return cw_ok_status();
}

cw_status_t cw_net__tls_start_outbound(cw_net_conn_t* c, const char* address) {
  char host[256];
  if (!cw_tls_address_host(address, host, sizeof(host))) {
    return cw_make_status(CW_INVALID_ARGUMENT, "TLS: no host in '%s'", address);
  }
  CW_RETURN_IF_ERROR(cw__ssl_attach(c, host), "peer %s", address);
  c->tls = true;
  return cw_ok_status();
}

void cw_net__tls_write_waiting(cw_net_conn_t* c) {
  if (c->ssl && !c->closing) cw__flush(c);
}

void cw_net__tls_hello_accepted(cw_net_conn_t* c) {
  SSL_clear_mode(c->ssl, SSL_MODE_RELEASE_BUFFERS);
}

void cw_net__tls_free(cw_net_conn_t* c) {
  SSL_free(c->ssl);  // and its BIO
  c->ssl = NULL;
  free(c->tls_in);
  free(c->tls_out);
  c->tls_in = c->tls_out = NULL;
}

static bool cw__warn_pass(cw_net_t* net, uint64_t* more) {
  return cw_net_warn_limit_pass(&net->warn_tls, cw_time_now_ms(), 5000, more);
}

// A handshake (or a later TLS error) ends the connection with `why`.
static void cw__fail(cw_net_conn_t* c, int ret) {
  char why[512];
  cw_tls_describe_error(c->ssl, ret, why, sizeof(why));
  cw_net_t* net = c->net;
  if (c->outbound) {
    // Before our HELLO was answered this is the peer refusing us (TLS 1.3:
    // a server checks the client's certificate after the client is done).
    bool handshake = !c->hello_done;
    CW_LOGW("TLS %s %s failed: %s", handshake ? "handshake with" : "connection to", c->address,
            why);
    if (handshake) c->unusable = true;  // requests fail with the reason itself
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "TLS %s %s failed: %s",
                                        handshake ? "handshake with" : "connection to",
                                        c->address, why));
    return;
  }
  net->tls_failures++;
  uint64_t more = 0;
  if (cw__warn_pass(net, &more)) {
    CW_LOGW("%s: TLS %s failed: %s (%" PRIu64 " more TLS failures since the last warning)",
            c->name, c->tls_up ? "connection" : "handshake", why, more);
  }
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "TLS %s failed: %s",
                                      c->tls_up ? "connection" : "handshake", why));
}

void cw_net__tls_lost(cw_net_conn_t* c, int uv_err) {
  char why[256];
  snprintf(why, sizeof(why), "%s", uv_err == UV_EOF
                                       ? "the peer closed the connection during the TLS "
                                         "handshake: a daemon with TLS off closes one"
                                       : uv_strerror(uv_err));
  CW_LOGW("TLS handshake with %s failed: %s", c->address, why);
  c->unusable = true;
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "TLS handshake with %s failed: %s",
                                      c->address, why));
}

// --- Writing ciphertext -------------------------------------------------------------

typedef struct cw__cipher_write_s {
  uv_write_t req;
  cw_net_conn_t* conn;
  uint8_t* data;  // owned: the connection's tls_out when it was handed over
  size_t len, cap;
} cw__cipher_write_t;

static void cw__cipher_written(uv_write_t* req, int status) {
  cw__cipher_write_t* w = (cw__cipher_write_t*)req;
  cw_net_conn_t* c = w->conn;
  c->tls_inflight -= w->len;
  cw_net_t* net = c->net;
  int pool_cap = (int)(sizeof(net->tls_pool) / sizeof(net->tls_pool[0]));
  if (w->cap == CW__TLS_OUT_CHUNK && net->handles_open && net->tls_pool_n < pool_cap) {
    net->tls_pool[net->tls_pool_n++] = w->data;
  } else {
    free(w->data);
  }
  free(w);
  cw_net__write_finished(c, status);
  if (!c->closing) cw__pump_out(c);
  cw_net_conn_release(c);
}

// Hands what the SSL wrote to libuv (the buffer itself: no copy).
static void cw__flush(cw_net_conn_t* c) {
  if (!c->tls_out_len || c->closing || c->resolving || c->dialing) return;  // no socket yet: it waits
  cw__cipher_write_t* w = malloc(sizeof(*w));
  if (!w) {
    cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory writing"));
    return;
  }
  w->conn = c;
  w->data = c->tls_out;
  w->len = c->tls_out_len;
  w->cap = c->tls_out_cap;
  c->tls_out = NULL;
  c->tls_out_len = c->tls_out_cap = 0;
  uv_buf_t b = uv_buf_init((char*)w->data, (unsigned)w->len);
  int rc = uv_write(&w->req, &c->h.stream, &b, 1, cw__cipher_written);
  if (rc < 0) {
    free(w->data);
    free(w);
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", c->name,
                                        uv_strerror(rc)));
    return;
  }
  cw_net_conn_retain(c);
  c->writes_pending++;
  c->tls_inflight += w->len;
}

static void cw__item_free(cw_net_tls_item_t* it) {
  free(it->payload);
  if (it->bulk_free) it->bulk_free(it->bulk_user);
  free(it);
}

// Encrypts queued plaintext while libuv has room for more ciphertext.
static void cw__pump_out(cw_net_conn_t* c) {
  while (c->tls_q && !c->closing && c->tls_inflight < CW__TLS_INFLIGHT) {
    cw_net_tls_item_t* it = c->tls_q;
    const uint8_t* p;
    size_t n;
    if (it->payload_off < it->payload_len) {
      p = it->payload + it->payload_off;
      n = it->payload_len - it->payload_off;
    } else {
      p = it->bulk + it->bulk_off;
      uint64_t left = it->bulk_len - it->bulk_off;
      n = left < CW__TLS_CHUNK ? (size_t)left : CW__TLS_CHUNK;
    }
    if (n) {
      size_t written = 0;
      int r = SSL_write_ex(c->ssl, p, n, &written);
      cw__flush(c);  // ClientHello, or the records just made
      if (r != 1) {
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;  // the handshake first
        cw__fail(c, r);
        return;
      }
      if (it->payload_off < it->payload_len) it->payload_off += written;
      else it->bulk_off += written;
    }
    if (it->payload_off == it->payload_len && it->bulk_off == it->bulk_len) {
      c->tls_q = it->next;
      if (!c->tls_q) c->tls_q_tail = NULL;
      cw__item_free(it);  // the plaintext is no longer needed
      cw_net__write_finished(c, 0);
    }
  }
}

void cw_net__tls_write(cw_net_conn_t* c, const void* bulk, uint64_t bulk_len,
                       cw_net_free_fn bulk_free, void* bulk_user) {
  cw_net_tls_item_t* it = calloc(1, sizeof(*it));
  if (!it) {
    if (bulk_free) bulk_free(bulk_user);
    cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory writing"));
    return;
  }
  it->payload = c->out;
  it->payload_len = c->out_len;
  it->bulk = bulk;
  it->bulk_len = bulk ? bulk_len : 0;
  it->bulk_free = bulk_free;
  it->bulk_user = bulk_user;
  c->out = NULL;
  c->out_len = c->out_cap = 0;
  if (it->payload_len == 0 && it->bulk_len == 0) {
    cw__item_free(it);
    return;
  }
  if (c->tls_q_tail) c->tls_q_tail->next = it;
  else c->tls_q = it;
  c->tls_q_tail = it;
  c->writes_pending++;  // until its plaintext is encrypted
  cw_net_conn_retain(c);
  if (c->ssl) cw__pump_out(c);
  cw_net_conn_release(c);
}

void cw_net__tls_close(cw_net_conn_t* c) {
  // Frames gathered before the close (a last error reply) are tried once
  // when nothing else is waiting, as the plaintext path does.
  if (c->ssl && c->tls_up && c->out_len && !c->tls_q && !c->tls_inflight) {
    size_t written = 0;
    if (SSL_write_ex(c->ssl, c->out, c->out_len, &written) == 1 && c->tls_out_len) {
      uv_buf_t b = uv_buf_init((char*)c->tls_out, (unsigned)c->tls_out_len);
      (void)uv_try_write(&c->h.stream, &b, 1);
    }
    c->tls_out_len = 0;
    ERR_clear_error();
  }
  while (c->tls_q) {
    cw_net_tls_item_t* it = c->tls_q;
    c->tls_q = it->next;
    cw__item_free(it);
    c->writes_pending--;
  }
  c->tls_q_tail = NULL;
}

// --- Reading ---------------------------------------------------------------------------

// The first bytes on a TLS listener: a TLS handshake goes on; a causeway
// frame (a peer with TLS off) is told in plaintext that TLS is required;
// anything else is closed. False when the connection is done for.
static bool cw__check_first_bytes(cw_net_conn_t* c, const uint8_t* data, size_t len) {
  cw_tls_first_bytes_t kind = cw_tls_classify_first_bytes(data, len);
  if (kind == CW_TLS_FIRST_TLS || kind == CW_TLS_FIRST_UNKNOWN) return true;
  cw_net_t* net = c->net;
  net->tls_failures++;
  uint64_t more = 0;
  bool say = cw_net_warn_limit_pass(&net->warn_plain, cw_time_now_ms(), 5000, &more);
  if (kind == CW_TLS_FIRST_OTHER) {
    if (say) {
      CW_LOGW("%s: refused: not a TLS handshake on a TLS port (%" PRIu64 " more such "
              "refusals since the last warning)", c->name, more);
    }
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "not a TLS handshake"));
    return false;
  }
  if (say) {
    CW_LOGW("%s: refused: plaintext causeway frames on a TLS port (the peer has TLS off; this "
            "daemon requires TLS: CAUSEWAY_TLS; %" PRIu64 " more such refusals since the last "
            "warning)", c->name, more);
  }
  // Answered as a plaintext connection would be: the error names the cure.
  uint64_t rid = 0;
  cw_frame_header_t h;
  const cw_frame_limits_t open = {UINT32_MAX, UINT64_MAX};
  if (len >= CW_FRAME_HEADER_SIZE) {
    cw_status_t st = cw_frame_header_decode(data, CW_FRAME_HEADER_SIZE, &open, &h);
    if (!st) rid = h.request_id;
    cw_status_free(st);
  }
  c->tls = false;
  cw_net__refuse(c, CW_MSG_HELLO, rid,
                        cw_make_status(CW_FAILED_PRECONDITION,
                                       "this daemon requires TLS on TCP connections: set "
                                       "CAUSEWAY_TLS=1 and CAUSEWAY_TLS_CA (the cluster's CA "
                                       "certificate) on this client"));
  return false;
}

void cw_net__tls_on_read(cw_net_conn_t* c, size_t len) {
  c->tls_in_off = 0;
  c->tls_in_len = len;
  if (!c->ssl) {
    if (!cw__check_first_bytes(c, c->tls_in, len)) return;
    cw_status_t st = cw__ssl_attach(c, NULL);
    if (st) {
      CW_LOGE("%s: %s", c->name, cw_status_message(st));
      cw_net_conn_close(c, st);
      return;
    }
  }
  cw_net__tls_pump_in(c);
}

void cw_net__tls_pump_in(cw_net_conn_t* c) {
  cw_net_conn_retain(c);
  while (c->ssl && !c->closing && !c->close_after_write) {
    if (!c->tls_up) {
      int r = SSL_do_handshake(c->ssl);
      cw__flush(c);
      if (r != 1) {
        if (SSL_get_error(c->ssl, r) != SSL_ERROR_WANT_READ) cw__fail(c, r);
        break;
      }
      c->tls_up = true;
      CW_LOGD("%s: TLS up (%s, %s)", c->name, SSL_get_version(c->ssl),
              SSL_get_cipher_name(c->ssl));
      cw__pump_out(c);  // what waited for the handshake (an outbound HELLO)
      continue;
    }
    if (c->ra_off < c->ra_len && !cw_net__parse_buffered(c)) goto out;  // held or yielding
    if (c->closing || c->close_after_write || c->read_held || c->paused) goto out;
    uint8_t* dest;
    uint64_t want;
    // Bulk bytes are decrypted straight into their destination.
    bool bulk = cw_conn_parser_bulk_window(&c->parser, &dest, &want);
    if (!bulk) {
      if (!cw_net__buffer_reserve(&c->readahead, &c->ra_cap, cw_net__read_size(c))) {
        cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory reading"));
        goto out;
      }
      dest = c->readahead;
      want = c->ra_cap;
    }
    size_t n = 0;
    int r = SSL_read_ex(c->ssl, dest, want > (1u << 30) ? (1u << 30) : (size_t)want, &n);
    if (r != 1) {
      int e = SSL_get_error(c->ssl, r);
      if (e == SSL_ERROR_WANT_READ) break;
      if (e == SSL_ERROR_ZERO_RETURN) {
        cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "connection closed by peer"));
      } else {
        cw__fail(c, r);
      }
      break;
    }
    if (bulk) {
      cw_conn_parser_event_t ev;
      cw_conn_parser_bulk_advance(&c->parser, n, &ev);
      if (ev.kind == CW_CONN_PARSER_EVENT_BULK_DONE) cw_net__bulk_done(c, &ev.header);
    } else {
      c->ra_off = 0;
      c->ra_len = n;
      if (!cw_net__parse_buffered(c)) {
        if (c->cb.on_bytes && !c->closing) c->cb.on_bytes(c, n, 0);
        goto out;
      }
    }
    if (c->cb.on_bytes && !c->closing) c->cb.on_bytes(c, n, 0);
  }
  if (c->ssl && !c->closing) cw__flush(c);  // alerts, key updates
  cw_net__read_on(c);
out:
  cw_net_conn_release(c);
}
