// Hostile TLS handshakes against both daemons with mutual TLS on
// (CAUSEWAY_TLS=1, CAUSEWAY_TLS_REQUIRE_CLIENT_CERT=1), table-driven and
// counted: plaintext causeway frames, HTTP and junk at a TLS port, records
// that are no ClientHello, ClientHellos that are garbage, oversized,
// truncated (then EOF, or then silence), tampered with, or offering only TLS
// 1.2, a second ClientHello, client certificates from an unknown CA or none,
// and bytes that are not TLS records after the handshake; and, the other way
// round, a worker dialling a controller that is this test: another CA's or a
// client-only certificate, plaintext, a junk ServerHello, EOF mid-handshake.
// Each case asserts what docs/operations.md ("TLS") documents: a causeway
// frame is answered in plaintext with FAILED_PRECONDITION naming
// CAUSEWAY_TLS, everything else is closed (at most a TLS alert on the way);
// the dialling worker ends the connection and tries again later. After every
// case a good TLS client (the cluster's CA, a client certificate) does HELLO
// + PING; at the end the logs hold the refusals with their reasons and the
// daemons exit 0 on SIGTERM (ASan: no leaks).
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "cw_test_hostile.h"
#include "cw_time.h"
#include "cw_tls_test_pki.h"

enum { D_WORKER = 0, D_CONTROLLER = 1, D_COUNT };
static const char* const k_daemon[D_COUNT] = {"worker", "controller"};

static worker_t g_ctl = {.label = "tls-controller"};
static worker_t g_wrk = {.label = "tls-worker"};
static worker_t* const g_daemons[D_COUNT] = {&g_wrk, &g_ctl};
// A worker whose --controller is this test (test_hostile_controllers).
static worker_t g_lnk = {.label = "tls-linked-worker"};
static int g_fake_ctl = -1;  // the listening socket it dials
static tls_test_pki_t g_pki;
static uint64_t g_rid = 5000;

enum { K_PLAIN, K_RECORDS, K_CLIENT_HELLO, K_CERTS, K_AFTER, K_SERVERS, K_COUNT };
static const char* const k_kind[K_COUNT] = {"not TLS at a TLS port", "records no handshake",
                                            "ClientHello broken", "client certificates",
                                            "after the handshake", "hostile controllers"};
static int g_count[K_COUNT][D_COUNT];

// --- A client over OpenSSL (blocking socket) ----------------------------------------

// A client context trusting the cluster's CA (or `ca`), presenting `cert`
// (TP_COUNT: none); TLS 1.2 at most when `tls12`.
static SSL_CTX* client_ctx(int ca, int cert, bool tls12) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  assert_non_null(ctx);
  assert_int_equal(SSL_CTX_load_verify_locations(ctx, g_pki.path[ca], NULL), 1);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (cert != TP_COUNT) {
    assert_int_equal(SSL_CTX_use_certificate_chain_file(ctx, g_pki.path[cert]), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey_file(ctx, g_pki.path[cert + 1], SSL_FILETYPE_PEM), 1);
  }
  if (tls12) SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  return ctx;
}

// The first flight of a client of `ctx` (its ClientHello), malloc'd into *out.
static size_t client_hello_bytes(SSL_CTX* ctx, uint8_t** out) {
  SSL* ssl = SSL_new(ctx);
  BIO* rb = BIO_new(BIO_s_mem());
  BIO* wb = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rb, wb);
  SSL_set_connect_state(ssl);
  assert_int_equal(SSL_do_handshake(ssl), -1);  // wants the server's answer
  char* data;
  long n = BIO_get_mem_data(wb, &data);
  assert_true(n > 100);
  *out = malloc((size_t)n);
  memcpy(*out, data, (size_t)n);
  SSL_free(ssl);
  return (size_t)n;
}

static bool ssl_write_all(SSL* ssl, const void* data, size_t len) {
  size_t done = 0;
  return SSL_write_ex(ssl, data, len, &done) == 1 && done == len;
}

static bool ssl_read_exact(SSL* ssl, uint8_t* out, size_t len) {
  size_t got = 0;
  while (got < len) {
    size_t n = 0;
    if (SSL_read_ex(ssl, out + got, len - got, &n) != 1) return false;
    got += n;
  }
  return true;
}

static uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// Sends `m` as request `type`/`rid` over `ssl` and reads the reply frame's
// header: true when it is a non-error reply to it.
static bool ssl_request(SSL* ssl, uint16_t type, uint64_t rid, const ProtobufCMessage* m) {
  packed_t p = pack(m);
  hdr_t h = hdr_of(type, rid, (uint32_t)p.len, 0);
  uint8_t buf[HDR + 256];
  hdr_encode(&h, buf);
  assert_true(p.len <= 256);
  memcpy(buf + HDR, p.data, p.len);
  free(p.data);
  if (!ssl_write_all(ssl, buf, HDR + p.len)) return false;
  uint8_t hdr[HDR];
  if (!ssl_read_exact(ssl, hdr, HDR)) return false;
  uint32_t flags = (uint32_t)get_le(hdr + 8, 4), plen = (uint32_t)get_le(hdr + 12, 4);
  uint8_t payload[4096];
  if (plen > sizeof payload || !ssl_read_exact(ssl, payload, plen)) return false;
  return get_le(hdr, 4) == MAGIC && get_le(hdr + 6, 2) == type && get_le(hdr + 16, 8) == rid &&
         flags == F_REPLY;
}

// A TLS connection to `w` with `ctx` that does HELLO + PING; false (with
// OpenSSL's reason in why) when any step fails.
static bool tls_hello_ping(worker_t* w, SSL_CTX* ctx, char* why, size_t cap) {
  int fd = conn_open(w);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set1_host(ssl, "127.0.0.1");
  bool ok = SSL_connect(ssl) == 1;
  snprintf(why, cap, "%s", ok ? "" : "handshake");
  Causeway__V1__HelloRequest hm = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  hm.min_version = hm.max_version = 1;
  hm.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  hm.peer_name = "hostile_tls";
  if (ok && !(ok = ssl_request(ssl, T_HELLO, ++g_rid, &hm.base))) snprintf(why, cap, "HELLO");
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  if (ok && !(ok = ssl_request(ssl, T_PING, ++g_rid, &pm.base))) snprintf(why, cap, "PING");
  if (!ok) {
    unsigned long e = ERR_peek_last_error();
    size_t n = strlen(why);
    snprintf(why + n, cap - n, " failed: %s", e ? ERR_reason_error_string(e) : "closed");
  }
  ERR_clear_error();
  SSL_shutdown(ssl);
  SSL_free(ssl);
  close(fd);
  return ok;
}

// The daemon is up and a good TLS client does HELLO + PING.
static void assert_tls_serving(worker_t* w) {
  SSL_CTX* ctx = client_ctx(TP_CA, TP_CLI, false);
  char why[256];
  bool ok = tls_hello_ping(w, ctx, why, sizeof why);
  SSL_CTX_free(ctx);
  if (!ok || !worker_running(w)) {
    dump_worker(w);
    fail_msg("%s: a good TLS client after a hostile case: %s", w->label, why);
  }
}

// --- Cases -----------------------------------------------------------------------------

// Reads until EOF or a reset within CLOSE_TIMEOUT_MS into out; -1 on timeout.
static ssize_t read_to_eof(int fd, uint8_t* out, size_t cap) {
  size_t n = 0;
  int64_t deadline = cw_time_now_ms() + CLOSE_TIMEOUT_MS;
  for (;;) {
    int64_t left = deadline - cw_time_now_ms();
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)left) <= 0) continue;
    uint8_t buf[4096];
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) break;
    if (r < 0) continue;
    size_t take = (size_t)r < cap - n ? (size_t)r : cap - n;
    memcpy(out + n, buf, take);
    n += take;
  }
  return (ssize_t)n;
}

// What came back before the close is nothing or TLS alert records (type
// 21); with `flight`, any TLS records (the server's answer to a good first
// ClientHello).
static void expect_closed_or_alert(int fd, const char* what, int64_t start, bool flight) {
  uint8_t buf[16384];
  ssize_t n = read_to_eof(fd, buf, sizeof buf);
  if (n < 0) fail_msg("%s: not closed within %d ms", what, CLOSE_TIMEOUT_MS);
  for (ssize_t off = 0; off < n;) {
    if (n - off < 5 || (buf[off] != 21 && !(flight && buf[off] >= 20 && buf[off] <= 23))) {
      fail_msg("%s: the daemon sent %zd bytes (0x%02x at %zd), not only TLS alerts", what, n,
               buf[off], off);
    }
    off += 5 + ((ssize_t)buf[off + 3] << 8 | buf[off + 4]);  // big-endian length
  }
  fprintf(stderr, "[hostile]   %-60s -> %s in %lld ms\n", what,
          n ? flight ? "records, closed" : "alert, closed" : "closed",
          (long long)(cw_time_now_ms() - start));
}

static void done(int kind, int d, int fd) {
  close(fd);
  assert_tls_serving(g_daemons[d]);
  g_count[kind][d]++;
}

// A case sent and not yet seen closed. The silent ones wait out the
// daemons' HELLO deadline (5 s), so each test starts them first and checks
// them last: they run side by side with each other and the other cases.
typedef struct pending_s {
  int kind, d, fd;
  int64_t start;
  bool flight;
  SSL_CTX* ctx;  // after_start's cases: the TLS session to read the close from
  SSL* ssl;
  char label[160];
} pending_t;

// Sends `len` bytes (then EOF when `eof`); bytes_finish expects the close.
static pending_t bytes_start(int kind, int d, const char* what, const void* data, size_t len,
                             bool eof, bool flight) {
  pending_t p = {.kind = kind, .d = d, .flight = flight};
  snprintf(p.label, sizeof p.label, "%s (%s)", what, k_daemon[d]);
  p.fd = conn_open(g_daemons[d]);
  p.start = cw_time_now_ms();
  if (len) (void)send_all(p.fd, data, len);
  if (eof) shutdown(p.fd, SHUT_WR);
  return p;
}

static void bytes_finish(pending_t* p) {
  expect_closed_or_alert(p->fd, p->label, p->start, p->flight);
  done(p->kind, p->d, p->fd);
}

// Sends `len` bytes (then EOF when `eof`) and expects the close.
static void bytes_case_flight(int kind, int d, const char* what, const void* data, size_t len,
                              bool eof, bool flight) {
  pending_t p = bytes_start(kind, d, what, data, len, eof, flight);
  bytes_finish(&p);
}

static void bytes_case(int kind, int d, const char* what, const void* data, size_t len, bool eof) {
  bytes_case_flight(kind, d, what, data, len, eof, false);
}

static void test_not_tls(void** state) {
  (void)state;
  pending_t silent[D_COUNT];
  for (int d = 0; d < D_COUNT; ++d) {
    silent[d] = bytes_start(K_PLAIN, d, "connect, then silence (HELLO deadline)", NULL, 0, false,
                            false);
  }
  for (int d = 0; d < D_COUNT; ++d) {
    // A causeway peer with TLS off is told the cure in plaintext.
    char label[160];
    snprintf(label, sizeof label, "plaintext HELLO (%s)", k_daemon[d]);
    int fd = conn_open(g_daemons[d]);
    uint64_t rid = ++g_rid;
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = m.max_version = 1;
    m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    assert_true(send_msg(fd, T_HELLO, rid, &m.base, NULL, 0));
    expect_error(fd, label, rid, C_FAILED_PRECONDITION,
                 "this daemon requires TLS on TCP connections: set CAUSEWAY_TLS=1");
    expect_closed(fd, label);
    fprintf(stderr, "[hostile]   %-60s -> FAILED_PRECONDITION, closed\n", label);
    done(K_PLAIN, d, fd);
    // A frame header alone, then EOF: still a causeway peer.
    hdr_t h = hdr_of(T_PING, 7, 0, 0);
    uint8_t hb[HDR];
    hdr_encode(&h, hb);
    snprintf(label, sizeof label, "plaintext PING header (%s)", k_daemon[d]);
    fd = conn_open(g_daemons[d]);
    send_all(fd, hb, sizeof hb);
    expect_error(fd, label, 7, C_FAILED_PRECONDITION, "requires TLS");
    expect_closed(fd, label);
    fprintf(stderr, "[hostile]   %-60s -> FAILED_PRECONDITION, closed\n", label);
    done(K_PLAIN, d, fd);
    static const char http[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    bytes_case(K_PLAIN, d, "an HTTP request", http, sizeof http - 1, false);
    static const uint8_t zeros[64] = {0};
    bytes_case(K_PLAIN, d, "64 zero bytes", zeros, sizeof zeros, false);
    // An SSLv2-style hello (high bit set, as old scanners send).
    static const uint8_t v2[] = {0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10};
    bytes_case(K_PLAIN, d, "an SSLv2 ClientHello", v2, sizeof v2, false);
    bytes_case(K_PLAIN, d, "connect, then EOF", NULL, 0, true);
  }
  for (int d = 0; d < D_COUNT; ++d) bytes_finish(&silent[d]);
}

static void test_records(void** state) {
  (void)state;
  // Records of each other content type first (TLS 1.2 framing, 2 bytes of body).
  static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1};
  static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 40};
  static const uint8_t appdata[] = {23, 3, 3, 0, 4, 'a', 'b', 'c', 'd'};
  static const uint8_t heartbeat[] = {24, 3, 3, 0, 3, 1, 0, 0};
  // A handshake record claiming 65535 bytes (the limit is 2^14 + 256).
  static uint8_t huge[5 + 20000] = {22, 3, 1, 0xff, 0xff, 1};
  // A handshake record of length 0, and one that is all junk.
  static const uint8_t empty[] = {22, 3, 1, 0, 0};
  static uint8_t junk[5 + 200] = {22, 3, 1, 0, 200};
  for (size_t i = 5; i < sizeof junk; ++i) junk[i] = (uint8_t)(i * 37 + 11);
  pending_t silent[D_COUNT];  // the daemon waits for the rest of the ClientHello
  for (int d = 0; d < D_COUNT; ++d) {
    silent[d] = bytes_start(K_RECORDS, d, "an empty handshake record", empty, sizeof empty, false,
                            false);
  }
  for (int d = 0; d < D_COUNT; ++d) {
    bytes_case(K_RECORDS, d, "a ChangeCipherSpec record first", ccs, sizeof ccs, false);
    bytes_case(K_RECORDS, d, "an alert record first", alert, sizeof alert, false);
    bytes_case(K_RECORDS, d, "application data before a handshake", appdata, sizeof appdata,
               false);
    bytes_case(K_RECORDS, d, "a heartbeat record", heartbeat, sizeof heartbeat, false);
    bytes_case(K_RECORDS, d, "a handshake record of 65535 bytes", huge, sizeof huge, false);
    bytes_case(K_RECORDS, d, "a handshake record of junk", junk, sizeof junk, false);
  }
  for (int d = 0; d < D_COUNT; ++d) bytes_finish(&silent[d]);
}

static void test_client_hello(void** state) {
  (void)state;
  SSL_CTX* ctx = client_ctx(TP_CA, TP_CLI, false);
  SSL_CTX* ctx12 = client_ctx(TP_CA, TP_CLI, true);
  uint8_t* ch;
  size_t n = client_hello_bytes(ctx, &ch);
  uint8_t* ch12;
  size_t n12 = client_hello_bytes(ctx12, &ch12);
  uint8_t* bad = malloc(n * 2);
  pending_t silent[D_COUNT][3];
  for (int d = 0; d < D_COUNT; ++d) {
    silent[d][0] = bytes_start(K_CLIENT_HELLO, d, "half a ClientHello, then silence", ch, n / 2,
                               false, false);
    silent[d][1] = bytes_start(K_CLIENT_HELLO, d, "a record header alone, then silence", ch, 5,
                               false, false);
    // The handshake message's length one more than the record holds.
    memcpy(bad, ch, n);
    bad[8]++;
    silent[d][2] = bytes_start(K_CLIENT_HELLO, d, "a ClientHello longer than its record", bad, n,
                               false, false);
  }
  for (int d = 0; d < D_COUNT; ++d) {
    bytes_case(K_CLIENT_HELLO, d, "half a ClientHello, then EOF", ch, n / 2, true);
    bytes_case(K_CLIENT_HELLO, d, "a ClientHello offering TLS 1.2 at most", ch12, n12, false);
    // Its body (after the version and random) overwritten with 0xff.
    memcpy(bad, ch, n);
    memset(bad + 43, 0xff, n - 43);
    bytes_case(K_CLIENT_HELLO, d, "a ClientHello with a garbage body", bad, n, false);
    // The record's version byte and the handshake type changed.
    memcpy(bad, ch, n);
    bad[5] = 2;  // ServerHello
    bytes_case(K_CLIENT_HELLO, d, "a ServerHello to a server", bad, n, false);
    // Two ClientHellos back to back.
    memcpy(bad, ch, n);
    memcpy(bad + n, ch, n);
    bytes_case_flight(K_CLIENT_HELLO, d, "two ClientHellos back to back", bad, 2 * n, false,
                      true);
  }
  for (int d = 0; d < D_COUNT; ++d) {
    for (int i = 0; i < 3; ++i) bytes_finish(&silent[d][i]);
  }
  free(bad);
  free(ch);
  free(ch12);
  SSL_CTX_free(ctx);
  SSL_CTX_free(ctx12);
}

// A full client handshake with `ctx`: the daemon must refuse it (the
// handshake fails, or the HELLO gets no answer: in TLS 1.3 the server checks
// the client's certificate after the client thinks it is done).
static void refused_client(int kind, int d, const char* what, SSL_CTX* ctx) {
  char label[160], why[256];
  snprintf(label, sizeof label, "%s (%s)", what, k_daemon[d]);
  int64_t start = cw_time_now_ms();
  if (tls_hello_ping(g_daemons[d], ctx, why, sizeof why)) fail_msg("%s: accepted", label);
  fprintf(stderr, "[hostile]   %-60s -> refused (%s) in %lld ms\n", label, why,
          (long long)(cw_time_now_ms() - start));
  assert_tls_serving(g_daemons[d]);
  g_count[kind][d]++;
}

static void test_certificates(void** state) {
  (void)state;
  SSL_CTX* other = client_ctx(TP_CA, TP_OCLI, false);    // signed by another CA
  SSL_CTX* server_cert = client_ctx(TP_CA, TP_OSRV, false);  // another CA's daemon cert
  SSL_CTX* none = client_ctx(TP_CA, TP_COUNT, false);
  for (int d = 0; d < D_COUNT; ++d) {
    refused_client(K_CERTS, d, "a client certificate of an unknown CA", other);
    refused_client(K_CERTS, d, "another CA's daemon certificate", server_cert);
    refused_client(K_CERTS, d, "no client certificate (mutual TLS)", none);
  }
  SSL_CTX_free(other);
  SSL_CTX_free(server_cert);
  SSL_CTX_free(none);
}

// A good handshake, then `data` straight on the socket (`raw`) or inside
// TLS; after_finish expects the close.
static pending_t after_start(int d, const char* what, const void* data, size_t len, bool raw,
                             bool eof) {
  pending_t p = {.kind = K_AFTER, .d = d};
  snprintf(p.label, sizeof p.label, "%s (%s)", what, k_daemon[d]);
  p.ctx = client_ctx(TP_CA, TP_CLI, false);
  p.fd = conn_open(g_daemons[d]);
  p.ssl = SSL_new(p.ctx);
  SSL_set_fd(p.ssl, p.fd);
  p.start = cw_time_now_ms();
  if (SSL_connect(p.ssl) != 1) fail_msg("%s: the handshake failed", p.label);
  if (len) {
    if (raw) send_all(p.fd, data, len);
    else assert_true(ssl_write_all(p.ssl, data, len));
  }
  if (eof) shutdown(p.fd, SHUT_WR);
  return p;
}

static void after_finish(pending_t* c) {
  // Closed: SSL_read ends (close_notify, EOF or an error), at most a
  // causeway ERROR reply decrypted before that.
  uint8_t buf[4096];
  size_t got = 0, total = 0;
  int64_t deadline = c->start + CLOSE_TIMEOUT_MS;
  for (;;) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (SSL_pending(c->ssl) == 0 && poll(&p, 1, (int)(deadline - cw_time_now_ms())) <= 0) {
      fail_msg("%s: not closed within %d ms", c->label, CLOSE_TIMEOUT_MS);
    }
    int r = SSL_read_ex(c->ssl, buf, sizeof buf, &got);
    if (r != 1) {
      int e = SSL_get_error(c->ssl, r);
      if (e == SSL_ERROR_WANT_READ) continue;
      break;
    }
    if (total == 0 && got >= HDR && (get_le(buf + 8, 4) & F_ERROR) == 0) {
      fail_msg("%s: a reply that is no ERROR", c->label);
    }
    total += got;
  }
  ERR_clear_error();
  fprintf(stderr, "[hostile]   %-60s -> %s in %lld ms\n", c->label,
          total ? "ERROR reply, closed" : "closed", (long long)(cw_time_now_ms() - c->start));
  SSL_free(c->ssl);
  SSL_CTX_free(c->ctx);
  done(K_AFTER, c->d, c->fd);
}

static void after_case(int d, const char* what, const void* data, size_t len, bool raw,
                       bool eof) {
  pending_t p = after_start(d, what, data, len, raw, eof);
  after_finish(&p);
}

static void test_after_handshake(void** state) {
  (void)state;
  static const uint8_t junk[] = "this is no causeway frame at all, just words....";
  static const uint8_t plain_rec[] = {23, 3, 3, 0, 16, 1, 2, 3, 4, 5, 6, 7, 8,
                                      9, 10, 11, 12, 13, 14, 15, 16};
  static const uint8_t not_rec[] = "GET / HTTP/1.1\r\n\r\n";
  hdr_t h = hdr_of(T_PING, 9, 8, 0);
  uint8_t half[HDR + 4];
  hdr_encode(&h, half);
  pending_t silent[D_COUNT];
  for (int d = 0; d < D_COUNT; ++d) {
    silent[d] = after_start(d, "TLS up, then silence (HELLO deadline)", NULL, 0, false, false);
  }
  for (int d = 0; d < D_COUNT; ++d) {
    after_case(d, "TLS up, then junk inside TLS", junk, sizeof junk - 1, false, false);
    after_case(d, "TLS up, then a forged application record", plain_rec, sizeof plain_rec, true,
               false);
    after_case(d, "TLS up, then plaintext on the socket", not_rec, sizeof not_rec - 1, true,
               false);
    after_case(d, "TLS up, then half a frame and EOF", half, sizeof half, false, true);
  }
  for (int d = 0; d < D_COUNT; ++d) after_finish(&silent[d]);
}

// --- The worker as a TLS client ---------------------------------------------------------

// The next connection the linked worker makes to this test, within IO_TIMEOUT_MS.
// Attempts it already gave up (its 10 s TLS handshake deadline passed while
// earlier cases ran) wait in the backlog, closed: they are skipped, or a case
// would take the worker's own hang-up for its refusal.
static int fake_accept(void) {
  int64_t deadline = cw_time_now_ms() + IO_TIMEOUT_MS;
  for (;;) {
    struct pollfd p = {.fd = g_fake_ctl, .events = POLLIN};
    int64_t left = deadline - cw_time_now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) != 1) {
      dump_worker(&g_lnk);
      fail_msg("the linked worker did not try its controller again");
    }
    int fd = accept(g_fake_ctl, NULL, NULL);
    assert_true(fd >= 0);
    struct pollfd q = {.fd = fd, .events = POLLRDHUP};
    if (poll(&q, 1, 0) == 1 && (q.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      close(fd);
      continue;
    }
    return fd;
  }
}

// A TLS server context with `cert` (and its key).
static SSL_CTX* server_ctx(int cert) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  assert_non_null(ctx);
  assert_int_equal(SSL_CTX_use_certificate_chain_file(ctx, g_pki.path[cert]), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey_file(ctx, g_pki.path[cert + 1], SSL_FILETYPE_PEM), 1);
  return ctx;
}

// A controller the worker dials that is not one it may trust: the worker
// ends the connection (and tries again later), still serving its own port.
static void fake_controller_case(const char* what, int cert, const void* answer, size_t len) {
  char label[160];
  snprintf(label, sizeof label, "%s (worker as client)", what);
  int fd = fake_accept();
  int64_t start = cw_time_now_ms();
  if (cert != TP_COUNT) {
    SSL_CTX* ctx = server_ctx(cert);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    // The worker refuses the certificate: it aborts the handshake.
    if (SSL_accept(ssl) == 1) {
      uint8_t b;
      size_t n;
      if (SSL_read_ex(ssl, &b, 1, &n) == 1) fail_msg("%s: the worker sent a frame", label);
    }
    ERR_clear_error();
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  } else {
    uint8_t hello[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, IO_TIMEOUT_MS), 1);
    assert_true(recv(fd, hello, sizeof hello, 0) > 0);  // its ClientHello
    if (len) send_all(fd, answer, len);
    else shutdown(fd, SHUT_WR);
  }
  uint8_t rest[4096];
  if (read_to_eof(fd, rest, sizeof rest) < 0) fail_msg("%s: the worker kept the connection", label);
  close(fd);
  fprintf(stderr, "[hostile]   %-60s -> refused in %lld ms\n", label,
          (long long)(cw_time_now_ms() - start));
  assert_tls_serving(&g_lnk);
  g_count[K_SERVERS][D_WORKER]++;
}

static void test_hostile_controllers(void** state) {
  (void)state;
  fake_controller_case("a controller certificate of another CA", TP_OSRV, NULL, 0);
  fake_controller_case("a client certificate as the controller's", TP_CLI, NULL, 0);
  static const uint8_t plain[HDR] = {'C', 'W', 'A', 'Y', 1, 0, 1, 0, 3};
  fake_controller_case("a plaintext controller (a causeway frame)", TP_COUNT, plain, sizeof plain);
  static const uint8_t junk[] = {22, 3, 3, 0, 8, 2, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef};
  fake_controller_case("a ServerHello of junk", TP_COUNT, junk, sizeof junk);
  fake_controller_case("EOF in the middle of the handshake", TP_COUNT, NULL, 0);
  // Each refusal is logged with the reason (info: after the first).
  FILE* f = fopen(g_lnk.log_path, "r");
  assert_non_null(f);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  static const char* const reasons[] = {"certificate verify failed",
                                        "the peer does not speak TLS"};
  for (size_t i = 0; i < 2; ++i) {
    if (!strstr(text, reasons[i])) fail_msg("linked worker log lacks \"%s\"", reasons[i]);
  }
}

static void test_logs(void** state) {
  (void)state;
  // The refusals are logged (rate-limited: one line per kind in 5 s, which
  // counts the rest; the first here is a plaintext causeway frame).
  static const char* const lines[] = {"refused: plaintext causeway frames on a TLS port",
                                      "TLS handshake failed: "};
  for (int d = 0; d < D_COUNT; ++d) {
    FILE* f = fopen(g_daemons[d]->log_path, "r");
    assert_non_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; ++i) {
      if (!strstr(text, lines[i])) fail_msg("%s log lacks \"%s\"", k_daemon[d], lines[i]);
    }
  }
}

static void test_count(void** state) {
  (void)state;
  int per[D_COUNT];
  hostile_print_counts("TLS cases by kind:", k_kind, K_COUNT, g_count, per);
  assert_int_equal(per[D_WORKER], 7 + 7 + 8 + 3 + 5 + 5);
  assert_int_equal(per[D_CONTROLLER], 7 + 7 + 8 + 3 + 5);
}

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (tls_test_pki_make(&g_pki, "hostile-tls") != 0) return -1;
  static char ca[200], cert[200], key[200];
  snprintf(ca, sizeof ca, "CAUSEWAY_TLS_CA=%s", g_pki.path[TP_CA]);
  snprintf(cert, sizeof cert, "CAUSEWAY_TLS_CERT=%s", g_pki.path[TP_SRV]);
  snprintf(key, sizeof key, "CAUSEWAY_TLS_KEY=%s", g_pki.path[TP_SRV_KEY]);
  // The documented default, not the hostile suites' 300 ms: with TLS the
  // deadline covers the handshake, and a good client's handshake and HELLO
  // (ASan on both ends) took up to 812 ms on two busy cores. The silent
  // cases wait it out (CLOSE_TIMEOUT_MS bounds them).
  static const char hello_timeout[] = "CAUSEWAY_HELLO_TIMEOUT_MS=5000";
  const char* ctl_env[] = {"CAUSEWAY_TLS=1", ca, cert, key, "CAUSEWAY_TLS_REQUIRE_CLIENT_CERT=1",
                           hello_timeout, NULL};
  const char* ctl_args[] = {"--listen", "127.0.0.1:0", NULL};
  daemon_spec_t ctl = {.bin = hostile_controller_bin(), .args = ctl_args, .env = ctl_env,
                       .listen_prefix = "causeway-controller listening on "};
  if (!daemon_start(&g_ctl, &ctl)) return -1;
  const char* plugin = hostile_plugin();
  if (!plugin) return -1;
  const char* wrk_env[] = {"CAUSEWAY_TLS=1", ca, cert, key, "CAUSEWAY_TLS_REQUIRE_CLIENT_CERT=1",
                           hello_timeout, NULL};
  const char* wrk_args[] = {"--plugin", plugin, "--devices", "1", "--listen", "127.0.0.1:0",
                            NULL};
  daemon_spec_t wrk = {.bin = hostile_worker_bin(), .args = wrk_args, .env = wrk_env,
                       .listen_prefix = "causeway-worker listening on "};
  if (!daemon_start(&g_wrk, &wrk)) return -1;
  // The linked worker's controller is a socket of this test.
  g_fake_ctl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(g_fake_ctl, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(g_fake_ctl, 16) != 0 ||
      getsockname(g_fake_ctl, (struct sockaddr*)&sa, &sl) != 0) {
    return -1;
  }
  static char fake[64];
  snprintf(fake, sizeof fake, "127.0.0.1:%d", ntohs(sa.sin_port));
  const char* lnk_env[] = {"CAUSEWAY_TLS=1", ca, cert, key, "CAUSEWAY_LOG_LEVEL=info",
                           hello_timeout, NULL};
  const char* lnk_args[] = {"--plugin", plugin, "--devices", "1", "--listen", "127.0.0.1:0",
                            "--controller", fake, "--start-timeout-ms", "0",
                            "--reconnect-max-ms", "200", NULL};
  daemon_spec_t lnk = {.bin = hostile_worker_bin(), .args = lnk_args, .env = lnk_env,
                       .listen_prefix = "causeway-worker listening on "};
  if (!daemon_start(&g_lnk, &lnk)) return -1;
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  daemons_kill(g_daemons, D_COUNT);
  worker_t* const lnk[] = {&g_lnk};
  daemons_kill(lnk, 1);
  if (g_fake_ctl >= 0) close(g_fake_ctl);
  tls_test_pki_remove(&g_pki);
  return 0;
}

static void test_sigterm_clean_exit(void** state) {
  (void)state;
  worker_t* const all[] = {&g_lnk, &g_wrk, &g_ctl};
  daemons_sigterm_clean_exit(all, 3);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_not_tls),
      cmocka_unit_test(test_records),
      cmocka_unit_test(test_client_hello),
      cmocka_unit_test(test_certificates),
      cmocka_unit_test(test_after_handshake),
      cmocka_unit_test(test_hostile_controllers),
      cmocka_unit_test(test_logs),
      cmocka_unit_test(test_count),
      cmocka_unit_test(test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_tls", tests, group_setup, group_teardown);
}
