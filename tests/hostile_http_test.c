// Hostile requests to both daemons' HTTP ports (--metrics-listen: the
// controller's /metrics, /healthz and /readyz, the worker's /healthz and
// /readyz), table-driven and counted. Each case sends raw bytes over TCP and
// asserts the exact outcome src/net/cw_http_server.h documents: a status
// line (400 malformed, 404 unknown path, 405 not GET/HEAD, 431 no head
// within 8 KiB) and then the close, or the close without a word (a peer
// that goes away, or says nothing until the 5 s deadline). After every case
// a fresh GET /healthz gets 200 and the daemon's causeway port still does
// HELLO + PING; at the end both get SIGTERM and must exit 0 (under ASan: no
// leaks).
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"
#include "cw_time.h"

enum { D_WORKER = 0, D_CONTROLLER = 1, D_COUNT };
static const char* const k_daemon[D_COUNT] = {"worker", "controller"};

static worker_t g_ctl = {.label = "http-controller"};
static worker_t g_wrk = {.label = "http-worker"};
static worker_t* const g_daemons[D_COUNT] = {&g_wrk, &g_ctl};

enum { K_LINE, K_BYTES, K_SIZE, K_ROUTE, K_NOT_HTTP, K_PEER, K_COUNT };
static const char* const k_kind[K_COUNT] = {
    "malformed request line", "bytes no head may hold", "oversize head",
    "method or path refused", "not HTTP at all", "slow or vanishing peer"};
static int g_count[K_COUNT][D_COUNT];

#define CLOSED 0  // expected: closed without a response
#define RESET (-2)  // expected: 431, or reset (the rest of what we sent was unread)

// A connection to `d`'s HTTP port (the address is host:port).
static int http_open(int d) {
  worker_t w = *g_daemons[d];
  snprintf(w.addr, sizeof w.addr, "%s", g_daemons[d]->http_addr);
  return conn_open(&w);
}

// Reads until EOF (or a reset) within `timeout_ms`; the bytes into out
// (NUL-terminated, truncated to cap). Returns how many, -1 on timeout.
static ssize_t read_to_eof(int fd, char* out, size_t cap, int timeout_ms, bool* out_reset) {
  size_t n = 0;
  *out_reset = false;
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = deadline - cw_time_now_ms();
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)left) <= 0) continue;
    char buf[4096];
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      *out_reset = true;
      break;
    }
    size_t take = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
    memcpy(out + n, buf, take);
    n += take;
  }
  out[n] = 0;
  return (ssize_t)n;
}

// The status code of a response ("HTTP/1.1 NNN ..."), 0 when none.
static int status_of(const char* resp) {
  int code = 0;
  if (sscanf(resp, "HTTP/1.1 %d ", &code) != 1) return 0;
  return code;
}

// A fresh GET /healthz gets 200 "ok", and the causeway port serves.
static void assert_http_serving(int d) {
  int fd = http_open(d);
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  assert_true(send_all(fd, req, sizeof req - 1));
  char resp[8192];
  bool reset;
  ssize_t n = read_to_eof(fd, resp, sizeof resp, IO_TIMEOUT_MS, &reset);
  close(fd);
  if (n <= 0 || status_of(resp) != 200 || !strstr(resp, "\r\n\r\nok\n")) {
    dump_worker(g_daemons[d]);
    fail_msg("%s: GET /healthz after a hostile case: %s", k_daemon[d], n < 0 ? "timeout" : resp);
  }
  daemon_assert_serving(g_daemons[d], NULL);
}

// A case sent and not yet answered. The silent and slow ones wait out the
// daemons' 5 s deadline, so the tests start those of both daemons first
// and check them last: they run side by side.
typedef struct hpending_s {
  int kind, d, fd, want;
  int64_t start;
  bool gone;  // a send failed: the daemon closed on us
  char label[160];
} hpending_t;

// Opens the case's connection and sends `req` (len bytes), then half-closes
// when `eof`; http_finish asserts the answer `want`: a status code, CLOSED
// or RESET.
static hpending_t http_start(int kind, int d, const char* what, const char* req, size_t len,
                             bool eof, int want) {
  hpending_t p = {.kind = kind, .d = d, .want = want};
  snprintf(p.label, sizeof p.label, "%s (%s)", what, k_daemon[d]);
  p.fd = http_open(d);
  p.start = cw_time_now_ms();
  if (len) (void)send_all(p.fd, req, len);  // the daemon may answer and close before reading it all
  if (eof) shutdown(p.fd, SHUT_WR);
  return p;
}

// Sends `req` to each of `n` cases in pieces of `piece` bytes `gap_ms`
// apart, each until the daemon closes on it.
static void http_dribble(hpending_t* ps, int n, const char* req, size_t len, size_t piece,
                         int gap_ms) {
  for (size_t off = 0; off < len; off += piece) {
    size_t k = len - off < piece ? len - off : piece;
    bool any = false;
    for (int i = 0; i < n; ++i) {
      if (ps[i].gone) continue;
      if (send(ps[i].fd, req + off, k, MSG_NOSIGNAL) != (ssize_t)k) ps[i].gone = true;
      any = true;
    }
    if (!any) break;  // closed on us
    sleep_ms(gap_ms);
  }
}

static void http_finish(hpending_t* p) {
  static char resp[65536];
  bool reset;
  ssize_t n = read_to_eof(p->fd, resp, sizeof resp, CLOSE_TIMEOUT_MS, &reset);
  close(p->fd);
  const char* label = p->label;
  int want = p->want;
  if (n < 0) fail_msg("%s: neither answered nor closed in %d ms", label, CLOSE_TIMEOUT_MS);
  int code = status_of(resp);
  bool ok = want == CLOSED ? n == 0 : want == RESET ? (code == 431 || (n == 0 && reset))
                                                    : code == want;
  if (!ok) {
    fail_msg("%s: got %s%s, want %d", label, n ? resp : "the close",
             reset ? " (reset)" : "", want);
  }
  // The reason phrase and Connection: close come with every status.
  if (code && !strstr(resp, "\r\nConnection: close\r\n")) fail_msg("%s: %s", label, resp);
  fprintf(stderr, "[hostile]   %-58s -> %.*s in %lld ms\n", label,
          code ? (int)strcspn(resp, "\r") : 6, code ? resp : reset ? "reset " : "closed",
          (long long)(cw_time_now_ms() - p->start));
  assert_http_serving(p->d);
  g_count[p->kind][p->d]++;
}

// Sends `req` (len bytes), half-closes when `eof`, and asserts the answer
// `want`: a status code, CLOSED or RESET.
static void http_case(int kind, int d, const char* what, const char* req, size_t len, bool eof,
                      int want) {
  hpending_t p = http_start(kind, d, what, req, len, eof, want);
  http_finish(&p);
}

typedef struct hcase_s {
  int kind;
  const char* what;
  const char* req;  // NUL-terminated unless len
  size_t len;       // 0: strlen(req)
  int want;
  bool eof;         // half-close after sending
} hcase_t;

static const hcase_t k_cases[] = {
    {K_LINE, "lower-case method", "get /healthz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_LINE, "no method", " /healthz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_LINE, "a 16-letter method", "ABCDEFGHIJKLMNOP /healthz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_LINE, "target without a slash", "GET healthz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_LINE, "absolute-form target", "GET http://x/healthz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_LINE, "no version", "GET /healthz\r\n\r\n", 0, 400, false},
    {K_LINE, "HTTP/2.0", "GET /healthz HTTP/2.0\r\n\r\n", 0, 400, false},
    {K_LINE, "not HTTP/", "GET /healthz SPDY/3.1\r\n\r\n", 0, 400, false},
    {K_LINE, "two spaces", "GET  /healthz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_LINE, "an empty request line", "\r\n\r\n", 0, 400, false},
    {K_BYTES, "a control byte in the path", "GET /heal\x01thz HTTP/1.1\r\n\r\n", 0, 400, false},
    {K_BYTES, "a NUL in a header", "GET /healthz HTTP/1.1\r\nX: a\0b\r\n\r\n", 33, 400, false},
    {K_BYTES, "a byte above 0x7e in a header", "GET /healthz HTTP/1.1\r\nX: \xff\r\n\r\n", 0,
     400, false},
    {K_BYTES, "a control byte, head incomplete", "GET /healthz HTTP/1.1\r\nX: \x1b", 0, 400,
     false},
    {K_ROUTE, "POST", "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 0, 405, false},
    {K_ROUTE, "DELETE", "DELETE /healthz HTTP/1.1\r\n\r\n", 0, 405, false},
    {K_ROUTE, "CONNECT", "CONNECT /healthz HTTP/1.1\r\n\r\n", 0, 405, false},
    {K_ROUTE, "an unknown path", "GET /admin HTTP/1.1\r\n\r\n", 0, 404, false},
    {K_ROUTE, "a path with ..", "GET /../../etc/passwd HTTP/1.1\r\n\r\n", 0, 404, false},
    {K_ROUTE, "two requests pipelined: one answer",
     "GET /nope HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n", 0, 404, false},
    {K_NOT_HTTP, "a causeway HELLO frame", "CWAY\x01\x00\x01\x00", 8, 400, false},
    {K_NOT_HTTP, "a TLS ClientHello record", "\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03", 11,
     400, false},
    // Printable, so only the deadline ends it.
    {K_NOT_HTTP, "an SSH banner, then silence", "SSH-2.0-OpenSSH_9.6\r\n", 0, CLOSED, false},
    {K_PEER, "half a head, then EOF", "GET /healthz HTTP/1.1\r\nHost: x", 0, CLOSED, true},
    {K_PEER, "connect, then EOF", "", 0, CLOSED, true},
};

// Only the deadline ends it: started first, checked last.
static bool silent_case(const hcase_t* c) { return c->want == CLOSED && !c->eof; }

static void test_table(void** state) {
  (void)state;
  enum { N = sizeof k_cases / sizeof k_cases[0] };
  hpending_t silent[D_COUNT * N];
  int n = 0;
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < N; ++i) {
      const hcase_t* c = &k_cases[i];
      if (!silent_case(c)) continue;
      silent[n++] = http_start(c->kind, d, c->what, c->req, c->len ? c->len : strlen(c->req),
                               c->eof, c->want);
    }
  }
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < N; ++i) {
      const hcase_t* c = &k_cases[i];
      if (silent_case(c)) continue;
      http_case(c->kind, d, c->what, c->req, c->len ? c->len : strlen(c->req), c->eof, c->want);
    }
  }
  for (int i = 0; i < n; ++i) http_finish(&silent[i]);
}

static void test_oversize(void** state) {
  (void)state;
  // The bound is 8192 bytes (CW_HTTP_SERVER_MAX_REQUEST).
  size_t cap = 256 * 1024;
  char* big = malloc(cap);
  assert_non_null(big);
  memcpy(big, "GET /healthz HTTP/1.1\r\n", 23);
  for (size_t i = 23; i < cap; ++i) big[i] = i % 64 == 63 ? '\n' : 'a';  // header lines, no blank
  for (int d = 0; d < D_COUNT; ++d) {
    http_case(K_SIZE, d, "8192 bytes of headers, no blank line", big, 8192, false, 431);
    http_case(K_SIZE, d, "256 KiB of headers", big, cap, false, RESET);
    // Paths above CW_HTTP_MAX_PATH (255 bytes).
    static const size_t paths[] = {256, 8000};
    for (size_t i = 0; i < 2; ++i) {
      char* line = malloc(paths[i] + 64);
      assert_non_null(line);
      memset(line, 'p', paths[i] + 4);
      memcpy(line, "GET /", 5);
      int n = snprintf(line + 4 + paths[i], 60, " HTTP/1.1\r\n\r\n");
      char what[64];
      snprintf(what, sizeof what, "a %zu-byte path", paths[i]);
      http_case(K_SIZE, d, what, line, 4 + paths[i] + (size_t)n, false, 400);
      free(line);
    }
  }
  free(big);
}

// A peer that says nothing, or a byte at a time: closed at the 5 s deadline.
// Both daemons' peers of both kinds at once.
static void test_slow_peers(void** state) {
  (void)state;
  static const char slow[] = "GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaa";
  hpending_t silent[D_COUNT], dribble[D_COUNT];
  for (int d = 0; d < D_COUNT; ++d) {
    silent[d] = http_start(K_PEER, d, "silent until the deadline", "", 0, false, CLOSED);
    dribble[d] = http_start(K_PEER, d, "a byte every 250 ms (slowloris)", "", 0, false, CLOSED);
  }
  http_dribble(dribble, D_COUNT, slow, sizeof slow - 1, 1, 250);
  for (int d = 0; d < D_COUNT; ++d) {
    http_finish(&silent[d]);
    http_finish(&dribble[d]);
  }
}

static void test_count(void** state) {
  (void)state;
  int per[D_COUNT];
  hostile_print_counts("HTTP cases by kind:", k_kind, K_COUNT, g_count, per);
  size_t want = sizeof k_cases / sizeof k_cases[0] + 6;  // + oversize 4, slow 2
  assert_int_equal(per[D_WORKER], want);
  assert_int_equal(per[D_CONTROLLER], want);
}

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  const char* ctl_args[] = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", NULL};
  daemon_spec_t ctl = {.bin = hostile_controller_bin(), .args = ctl_args,
                       .listen_prefix = "causeway-controller listening on ",
                       .http_prefix = "causeway-controller metrics on "};
  if (!daemon_start(&g_ctl, &ctl)) return -1;
  const char* plugin = hostile_plugin();
  if (!plugin) return -1;
  const char* wrk_args[] = {"--plugin", plugin, "--devices", "1", "--listen", "127.0.0.1:0",
                            "--metrics-listen", "127.0.0.1:0", NULL};
  daemon_spec_t wrk = {.bin = hostile_worker_bin(), .args = wrk_args,
                       .listen_prefix = "causeway-worker listening on ",
                       .http_prefix = "causeway-worker http on "};
  if (!daemon_start(&g_wrk, &wrk)) return -1;
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  daemons_kill(g_daemons, D_COUNT);
  return 0;
}

static void test_sigterm_clean_exit(void** state) {
  (void)state;
  daemons_sigterm_clean_exit(g_daemons, D_COUNT);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_oversize),
      cmocka_unit_test(test_slow_peers),
      cmocka_unit_test(test_count),
      cmocka_unit_test(test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_http", tests, group_setup, group_teardown);
}
