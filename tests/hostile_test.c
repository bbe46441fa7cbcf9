// Hostile-frame suite: a real causeway-worker (real XLA CPU plugin) is fed
// malformed, truncated, oversized and out-of-order frames over raw sockets,
// so every byte is under the test's control. Each case asserts the outcome
// docs/protocol.md documents (an ERROR reply with the expected code and a
// message naming the problem, and/or the connection closed by the worker),
// then that the worker still serves a fresh connection (HELLO + PING). At the
// end the workers get SIGTERM and must exit 0 (under ASan: no leaks).
//
// Usage: hostile_test [path/to/causeway-worker]
//   default: $CW_WORKER_BIN, else $CW_BUILD_DIR/bin/causeway-worker.
//   The plugin comes from $CAUSEWAY_PJRT_PLUGIN. Worker logs go to
//   $CW_HOSTILE_LOG_DIR (default: the temp dir) as hostile-worker-*.log and
//   are printed when a worker misbehaves.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/causeway.pb-c.h"
#include "cw_time.h"

// ---------------------------------------------------------------------------
// Wire constants, spelled out here on purpose (the suite checks the contract,
// not our own codec).

#define MAGIC 0x59415743u
#define HDR 32
#define F_REPLY 0x1u
#define F_ERROR 0x2u

enum {
  T_HELLO = 1, T_PING, T_INVENTORY, T_COMPILE, T_SERIALIZE, T_LOAD, T_UPLOAD, T_LAUNCH,
  T_DOWNLOAD, T_COPY, T_SEND, T_PUT, T_EXPECT, T_DELETE, T_STATS, T_AWAIT, T_LAUNCH_GO,
};

// Codes equal PJRT_Error_Code.
enum {
  C_INVALID_ARGUMENT = 3, C_DEADLINE_EXCEEDED = 4, C_NOT_FOUND = 5, C_ALREADY_EXISTS = 6,
  C_PERMISSION_DENIED = 7, C_RESOURCE_EXHAUSTED = 8, C_FAILED_PRECONDITION = 9,
  C_UNIMPLEMENTED = 12, C_INTERNAL_CODE = 13, C_UNAUTHENTICATED = 16,
};

#define PREHELLO_MAX_PAYLOAD 4096u
#define MAX_PAYLOAD (16u << 20)
#define TOKEN "hostile-secret-token"
#define IO_TIMEOUT_MS 20000   // a reply must come within this
#define CLOSE_TIMEOUT_MS 5000 // a violating connection must be closed within this

// ---------------------------------------------------------------------------
// Worker processes.

typedef struct worker_s {
  const char* label;
  pid_t pid;
  char addr[256];
  char log_path[512];
  char out_path[512];
  int exit_status;  // valid once reaped
  bool reaped;
} worker_t;

static worker_t g_plain = {.label = "plain"};
static worker_t g_token = {.label = "token"};
static const char* g_worker_bin;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void dump_file_tail(const char* path, size_t max) {
  FILE* f = fopen(path, "rb");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  long start = size > (long)max ? size - (long)max : 0;
  fseek(f, start, SEEK_SET);
  fprintf(stderr, "----- %s (last %ld bytes) -----\n", path, size - start);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stderr);
  fprintf(stderr, "\n----- end of %s -----\n", path);
  fclose(f);
}

static void dump_worker(const worker_t* w) {
  dump_file_tail(w->out_path, 4096);
  dump_file_tail(w->log_path, 16384);
}

// Reaps the worker if it has exited; true while it runs.
static bool worker_running(worker_t* w) {
  if (w->pid <= 0 || w->reaped) return false;
  int st;
  pid_t r = waitpid(w->pid, &st, WNOHANG);
  if (r == w->pid) {
    w->reaped = true;
    w->exit_status = st;
    return false;
  }
  return true;
}

static void describe_status(int st, char* out, size_t n) {
  if (WIFEXITED(st)) {
    snprintf(out, n, "exit %d", WEXITSTATUS(st));
  } else if (WIFSIGNALED(st)) {
    snprintf(out, n, "killed by signal %d", WTERMSIG(st));
  } else {
    snprintf(out, n, "status 0x%x", st);
  }
}

static bool worker_start(worker_t* w, const char* token) {
  const char* plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  if (!plugin || !plugin[0]) {
    print_error("CAUSEWAY_PJRT_PLUGIN is not set\n");
    return false;
  }
  const char* dir = getenv("CW_HOSTILE_LOG_DIR");
  if (!dir || !dir[0]) dir = getenv("TMPDIR");
  if (!dir || !dir[0]) dir = "/tmp";
  snprintf(w->log_path, sizeof w->log_path, "%s/hostile-worker-%s-%d.log", dir, w->label,
           (int)getpid());
  snprintf(w->out_path, sizeof w->out_path, "%s/hostile-worker-%s-%d.out", dir, w->label,
           (int)getpid());
  int out_fd = open(w->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int log_fd = open(w->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || log_fd < 0) {
    print_error("cannot create %s / %s: %s\n", w->out_path, w->log_path, strerror(errno));
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(log_fd, 2);
    setenv("CAUSEWAY_HELLO_TIMEOUT_MS", "300", 1);
    if (token) {
      setenv("CAUSEWAY_TOKEN", token, 1);
    } else {
      unsetenv("CAUSEWAY_TOKEN");
    }
    unsetenv("CAUSEWAY_TOKEN_FILE");
    execl(g_worker_bin, g_worker_bin, "--plugin", plugin, "--devices", "2", "--listen",
          "127.0.0.1:0", (char*)NULL);
    fprintf(stderr, "exec %s: %s\n", g_worker_bin, strerror(errno));
    _exit(127);
  }
  close(out_fd);
  close(log_fd);
  w->pid = pid;
  w->reaped = false;
  // Wait for "causeway-worker listening on <ADDR>".
  static const char prefix[] = "causeway-worker listening on ";
  int64_t deadline = cw_time_now_ms() + 120000;
  while (cw_time_now_ms() < deadline) {
    FILE* f = fopen(w->out_path, "r");
    char line[512];
    bool found = false;
    while (f && fgets(line, sizeof line, f)) {
      size_t n = strlen(line);
      if (strncmp(line, prefix, sizeof prefix - 1) == 0 && n && line[n - 1] == '\n') {
        line[n - 1] = 0;
        const char* a = line + sizeof prefix - 1;
        size_t alen = strlen(a);
        if (alen >= sizeof w->addr) alen = sizeof w->addr - 1;
        memcpy(w->addr, a, alen);
        w->addr[alen] = 0;
        found = true;
        break;
      }
    }
    if (f) fclose(f);
    if (found) {
      fprintf(stderr, "[hostile] %s worker pid %d listening on %s (log %s)\n", w->label,
              (int)pid, w->addr, w->log_path);
      return true;
    }
    if (!worker_running(w)) {
      char d[64];
      describe_status(w->exit_status, d, sizeof d);
      print_error("%s worker exited before listening (%s)\n", w->label, d);
      dump_worker(w);
      return false;
    }
    sleep_ms(20);
  }
  print_error("%s worker did not print its listen line in time\n", w->label);
  dump_worker(w);
  kill(pid, SIGKILL);
  return false;
}

// SIGTERM, then wait up to 60 s. Returns the wait status, or -1 on timeout.
static int worker_stop(worker_t* w) {
  if (w->pid <= 0) return -1;
  if (w->reaped) return w->exit_status;
  kill(w->pid, SIGTERM);
  int64_t deadline = cw_time_now_ms() + 60000;
  while (cw_time_now_ms() < deadline) {
    if (!worker_running(w)) return w->exit_status;
    sleep_ms(20);
  }
  kill(w->pid, SIGKILL);
  int st;
  waitpid(w->pid, &st, 0);
  w->reaped = true;
  w->exit_status = st;
  return -1;
}

// ---------------------------------------------------------------------------
// Sockets.

static int conn_open(const worker_t* w) {
  int fd = -1;
  if (w->addr[0] == '/' || !strchr(w->addr, ':')) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(w->addr);
    if (n >= sizeof sa.sun_path) fail_msg("socket path too long: %s", w->addr);
    memcpy(sa.sun_path, w->addr, n + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0) {
      close(fd);
      fd = -1;
    }
  } else {
    char host[256];
    snprintf(host, sizeof host, "%s", w->addr);
    char* colon = strrchr(host, ':');
    *colon = 0;
    const char* port = colon + 1;
    if (host[0] == '[') {  // [v6]:port
      memmove(host, host + 1, strlen(host));
      host[strlen(host) - 1] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo* res = NULL;
    if (getaddrinfo(host, port, &hints, &res) == 0) {
      for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          close(fd);
          fd = -1;
        }
      }
      freeaddrinfo(res);
    }
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  }
  if (fd < 0) fail_msg("connect to %s worker at %s: %s", w->label, w->addr, strerror(errno));
  return fd;
}

// Sends everything; false if the peer went away (EPIPE/ECONNRESET), which
// several cases allow once the worker has rejected the frame.
static bool send_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    len -= (size_t)n;
  }
  return true;
}

// Reads exactly len bytes. 1: done, 0: EOF before any byte, -1: reset/error,
// -2: timeout, -3: EOF mid-way.
static int recv_exact(int fd, void* data, size_t len, long long deadline) {
  uint8_t* p = data;
  size_t have = 0;
  while (have < len) {
    long long left = deadline - cw_time_now_ms();
    if (left <= 0) return -2;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return -2;
    ssize_t n = recv(fd, p + have, len - have, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -1;
    }
    if (n == 0) return have ? -3 : 0;
    have += (size_t)n;
  }
  return 1;
}

typedef struct frame_s {
  uint32_t magic;
  uint16_t version, type;
  uint32_t flags, payload_len;
  uint64_t request_id, bulk_len;
  uint8_t* payload;  // owned
  uint8_t* bulk;     // owned, only when bulk_len <= 64 MiB
} frame_t;

static void frame_free(frame_t* f) {
  free(f->payload);
  free(f->bulk);
  memset(f, 0, sizeof *f);
}

static uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

static void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static const char* recv_result_name(int r) {
  switch (r) {
    case 1: return "frame";
    case 0: return "EOF";
    case -1: return "reset";
    case -2: return "timeout";
    default: return "EOF mid-frame";
  }
}

// Reads one frame as the worker sent it (no validation besides sanity bounds).
static int recv_frame(int fd, frame_t* f, int timeout_ms) {
  memset(f, 0, sizeof *f);
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  uint8_t h[HDR];
  int r = recv_exact(fd, h, HDR, deadline);
  if (r != 1) return r;
  f->magic = (uint32_t)get_le(h, 4);
  f->version = (uint16_t)get_le(h + 4, 2);
  f->type = (uint16_t)get_le(h + 6, 2);
  f->flags = (uint32_t)get_le(h + 8, 4);
  f->payload_len = (uint32_t)get_le(h + 12, 4);
  f->request_id = get_le(h + 16, 8);
  f->bulk_len = get_le(h + 24, 8);
  if (f->magic != MAGIC || f->version != 1) {
    fail_msg("worker sent a frame with magic 0x%08x version %u", f->magic, f->version);
  }
  if (f->payload_len > MAX_PAYLOAD || f->bulk_len > (64ull << 20)) {
    fail_msg("worker sent a frame with payload_len %u bulk_len %" PRIu64, f->payload_len,
             f->bulk_len);
  }
  f->payload = malloc(f->payload_len + 1);
  if (f->payload_len) {
    r = recv_exact(fd, f->payload, f->payload_len, deadline);
    if (r != 1) return r == 0 ? -3 : r;
  }
  if (f->bulk_len) {
    f->bulk = malloc(f->bulk_len);
    r = recv_exact(fd, f->bulk, f->bulk_len, deadline);
    if (r != 1) return r == 0 ? -3 : r;
  }
  return 1;
}

// ---------------------------------------------------------------------------
// Frame building.

typedef struct hdr_s {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t flags;
  uint32_t payload_len;
  uint64_t request_id;
  uint64_t bulk_len;
} hdr_t;

static hdr_t hdr_of(uint16_t type, uint64_t rid, uint32_t plen, uint64_t blen) {
  return (hdr_t){MAGIC, 1, type, 0, plen, rid, blen};
}

static void hdr_encode(const hdr_t* h, uint8_t out[HDR]) {
  put_le(out, h->magic, 4);
  put_le(out + 4, h->version, 2);
  put_le(out + 6, h->type, 2);
  put_le(out + 8, h->flags, 4);
  put_le(out + 12, h->payload_len, 4);
  put_le(out + 16, h->request_id, 8);
  put_le(out + 24, h->bulk_len, 8);
}

// Header + payload + bulk in one buffer (so one send), exactly as given.
static bool send_raw(int fd, const hdr_t* h, const void* payload, size_t plen, const void* bulk,
                     size_t blen) {
  size_t n = HDR + plen + blen;
  uint8_t* buf = malloc(n ? n : 1);
  hdr_encode(h, buf);
  if (plen) memcpy(buf + HDR, payload, plen);
  if (blen) memcpy(buf + HDR + plen, bulk, blen);
  bool ok = send_all(fd, buf, n);
  free(buf);
  return ok;
}

typedef struct packed_s {
  uint8_t* data;
  size_t len;
} packed_t;

static packed_t pack(const ProtobufCMessage* m) {
  packed_t p;
  p.len = protobuf_c_message_get_packed_size(m);
  p.data = malloc(p.len ? p.len : 1);
  protobuf_c_message_pack(m, p.data);
  return p;
}

// A well-formed request: header matches payload (and bulk, if given).
static bool send_msg(int fd, uint16_t type, uint64_t rid, const ProtobufCMessage* m,
                     const void* bulk, size_t blen) {
  packed_t p = pack(m);
  hdr_t h = hdr_of(type, rid, (uint32_t)p.len, blen);
  bool ok = send_raw(fd, &h, p.data, p.len, bulk, blen);
  free(p.data);
  return ok;
}

// ---------------------------------------------------------------------------
// Expectations.

static const char* code_name(uint32_t c) {
  static const char* names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                "UNAUTHENTICATED"};
  return c < sizeof names / sizeof names[0] ? names[c] : "?";
}

// Case-insensitive: does `msg` contain any one of the '|'-separated
// alternatives in `keywords` ("magic|CWAY")?
static bool mentions(const char* msg, const char* keywords) {
  if (!keywords || !keywords[0]) return true;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", keywords);
  for (char* save = NULL, *k = strtok_r(buf, "|", &save); k; k = strtok_r(NULL, "|", &save)) {
    if (strcasestr(msg, k)) return true;
  }
  return false;
}

#define ANY_RID UINT64_MAX

typedef struct error_s {
  uint32_t code;
  char message[1024];
  uint64_t request_id;
  uint16_t type;
} got_error_t;

// Receives one frame and asserts it is an ERROR reply with `code` (or any of
// the codes in `codes`, zero-terminated) and a message mentioning `keywords`.
static void expect_error_codes(int fd, const char* what, uint64_t rid, const uint32_t* codes,
                               const char* keywords, got_error_t* out) {
  frame_t f;
  int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
  if (r != 1) {
    frame_free(&f);
    fail_msg("%s: expected an ERROR reply (%s), got %s", what, code_name(codes[0]),
             recv_result_name(r));
  }
  if (f.flags != (F_REPLY | F_ERROR)) {
    fail_msg("%s: expected flags REPLY|ERROR, got type %u flags 0x%x rid %" PRIu64
             " payload %u bytes",
             what, f.type, f.flags, f.request_id, f.payload_len);
  }
  if (f.bulk_len) fail_msg("%s: ERROR reply carries %" PRIu64 " bulk bytes", what, f.bulk_len);
  Causeway__V1__ErrorReply* e =
      causeway__v1__error_reply__unpack(NULL, f.payload_len, f.payload);
  if (!e) fail_msg("%s: ERROR reply payload does not decode as ErrorReply", what);
  fprintf(stderr, "[hostile]   %-46s -> %s (%u) rid %" PRIu64 " \"%s\"\n", what,
          code_name(e->code), e->code, f.request_id, e->message ? e->message : "");
  bool code_ok = false;
  for (const uint32_t* c = codes; *c; ++c) code_ok |= e->code == *c;
  if (!code_ok) {
    fail_msg("%s: expected code %s (%u), got %s (%u) \"%s\"", what, code_name(codes[0]),
             codes[0], code_name(e->code), e->code, e->message);
  }
  if (!e->message || !e->message[0]) fail_msg("%s: ERROR reply with an empty message", what);
  if (!mentions(e->message, keywords)) {
    fail_msg("%s: error message \"%s\" does not name the problem (%s)", what, e->message,
             keywords);
  }
  if (rid != ANY_RID && f.request_id != rid) {
    fail_msg("%s: reply carries request id %" PRIu64 ", want %" PRIu64, what, f.request_id,
             rid);
  }
  if (out) {
    out->code = e->code;
    snprintf(out->message, sizeof out->message, "%s", e->message);
    out->request_id = f.request_id;
    out->type = f.type;
  }
  causeway__v1__error_reply__free_unpacked(e, NULL);
  frame_free(&f);
}

static void expect_error(int fd, const char* what, uint64_t rid, uint32_t code,
                         const char* keywords) {
  const uint32_t codes[] = {code, 0};
  expect_error_codes(fd, what, rid, codes, keywords, NULL);
}

// Asserts the worker closes the connection without sending anything more.
static void expect_closed(int fd, const char* what) {
  frame_t f;
  int r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
  if (r == 1) {
    fprintf(stderr, "[hostile]   %s: unexpected frame type %u flags 0x%x rid %" PRIu64 "\n",
            what, f.type, f.flags, f.request_id);
    frame_free(&f);
    fail_msg("%s: worker sent another frame instead of closing", what);
  }
  frame_free(&f);
  if (r == -2) fail_msg("%s: worker did not close the connection within %d ms", what,
                        CLOSE_TIMEOUT_MS);
}

// For peers that vanish: the worker may answer with ERROR replies (to a
// half-closed socket) but must close; anything else is wrong.
static void expect_only_errors_then_closed(int fd, const char* what) {
  for (int i = 0; i < 4; ++i) {
    frame_t f;
    int r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
    if (r == -2) {
      frame_free(&f);
      fail_msg("%s: worker did not close the connection", what);
    }
    if (r != 1) {
      frame_free(&f);
      return;
    }
    bool err = f.flags == (F_REPLY | F_ERROR);
    Causeway__V1__ErrorReply* e =
        err ? causeway__v1__error_reply__unpack(NULL, f.payload_len, f.payload) : NULL;
    fprintf(stderr, "[hostile]   %-46s -> frame flags 0x%x %s \"%s\"\n", what, f.flags,
            e ? code_name(e->code) : "", e && e->message ? e->message : "");
    if (e) causeway__v1__error_reply__free_unpacked(e, NULL);
    frame_free(&f);
    if (!err) fail_msg("%s: worker answered a non-error frame", what);
  }
  fail_msg("%s: worker keeps sending frames", what);
}

// Receives one non-error reply of `type` to `rid`; returns the frame.
static void expect_reply(int fd, const char* what, uint16_t type, uint64_t rid, frame_t* out) {
  int r = recv_frame(fd, out, IO_TIMEOUT_MS);
  if (r != 1) fail_msg("%s: expected a %u reply, got %s", what, type, recv_result_name(r));
  if (out->flags & F_ERROR) {
    Causeway__V1__ErrorReply* e =
        causeway__v1__error_reply__unpack(NULL, out->payload_len, out->payload);
    fail_msg("%s: expected success, got error %s \"%s\"", what, e ? code_name(e->code) : "?",
             e && e->message ? e->message : "(undecodable)");
  }
  if (out->flags != F_REPLY || out->type != type || out->request_id != rid) {
    fail_msg("%s: reply has type %u flags 0x%x rid %" PRIu64 ", want type %u REPLY rid %" PRIu64,
             what, out->type, out->flags, out->request_id, type, rid);
  }
}

// ---------------------------------------------------------------------------
// Well-formed conversations.

static void hello_as(int fd, const char* token, Causeway__V1__Role role, uint64_t session,
                     Causeway__V1__HelloReply** out_reply) {
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = 1;
  m.max_version = 1;
  m.role = role;
  if (token) {
    m.token.data = (uint8_t*)token;
    m.token.len = strlen(token);
  }
  m.session_id = session;
  m.peer_name = "hostile_test";
  assert_true(send_msg(fd, T_HELLO, 1, &m.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "HELLO", T_HELLO, 1, &f);
  Causeway__V1__HelloReply* r = causeway__v1__hello_reply__unpack(NULL, f.payload_len, f.payload);
  if (!r) fail_msg("HelloReply does not decode");
  assert_int_equal(r->version, 1);
  frame_free(&f);
  if (out_reply) {
    *out_reply = r;
  } else {
    causeway__v1__hello_reply__free_unpacked(r, NULL);
  }
}

static void hello(int fd) { hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, NULL); }

static void ping(int fd, uint64_t rid) {
  Causeway__V1__Ping m = CAUSEWAY__V1__PING__INIT;
  char data[32];
  int n = snprintf(data, sizeof data, "ping-%" PRIu64, rid);
  m.data.data = (uint8_t*)data;
  m.data.len = (size_t)n;
  assert_true(send_msg(fd, T_PING, rid, &m.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "PING", T_PING, rid, &f);
  Causeway__V1__Ping* r = causeway__v1__ping__unpack(NULL, f.payload_len, f.payload);
  if (!r) fail_msg("PING reply does not decode");
  if (r->data.len != (size_t)n || memcmp(r->data.data, data, (size_t)n) != 0) {
    fail_msg("PING reply does not echo the data");
  }
  causeway__v1__ping__free_unpacked(r, NULL);
  frame_free(&f);
}

// The worker is up, and a fresh connection does HELLO + PING.
static void assert_serving(worker_t* w) {
  if (!worker_running(w)) {
    char d[64];
    describe_status(w->exit_status, d, sizeof d);
    dump_worker(w);
    fail_msg("%s worker is gone (%s)", w->label, d);
  }
  int fd = conn_open(w);
  if (w == &g_token) {
    hello_as(fd, TOKEN, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, NULL);
  } else {
    hello(fd);
  }
  ping(fd, 77);
  close(fd);
}

static Causeway__V1__UploadRequest upload_req(uint64_t id, int dtype, int64_t* dims,
                                              size_t rank) {
  Causeway__V1__UploadRequest m = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  m.buffer_id = id;
  m.dtype = (Causeway__V1__DType)dtype;
  m.dims = dims;
  m.n_dims = rank;
  m.device = 0;
  return m;
}

static void upload_f32(int fd, uint64_t rid, uint64_t id, int n) {
  int64_t dims[1] = {n};
  Causeway__V1__UploadRequest m = upload_req(id, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  float* data = malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; ++i) data[i] = (float)i + 0.5f;
  assert_true(send_msg(fd, T_UPLOAD, rid, &m.base, data, sizeof(float) * (size_t)n));
  free(data);
  frame_t f;
  expect_reply(fd, "UPLOAD", T_UPLOAD, rid, &f);
  frame_free(&f);
}

static Causeway__V1__Stats* stats(int fd, uint64_t rid) {
  Causeway__V1__StatsRequest m = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_true(send_msg(fd, T_STATS, rid, &m.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "STATS", T_STATS, rid, &f);
  Causeway__V1__Stats* s = causeway__v1__stats__unpack(NULL, f.payload_len, f.payload);
  frame_free(&f);
  if (!s) fail_msg("Stats does not decode");
  return s;
}

// Opens a connection that has done HELLO.
static int open_hello(void) {
  int fd = conn_open(&g_plain);
  hello(fd);
  return fd;
}

// Sends `h` (+ payload, + bulk) and asserts ERROR `code` naming `keywords`,
// then that the connection is closed and the worker still serves.
static void violation(const char* what, bool do_hello, const hdr_t* h, const void* payload,
                      size_t plen, const void* bulk, size_t blen, uint64_t rid, uint32_t code,
                      const char* keywords) {
  int fd = conn_open(&g_plain);
  if (do_hello) hello(fd);
  send_raw(fd, h, payload, plen, bulk, blen);  // the worker may close early
  expect_error(fd, what, rid, code, keywords);
  expect_closed(fd, what);
  close(fd);
  assert_serving(&g_plain);
}

// ---------------------------------------------------------------------------
// Cases.

static void test_truncated_header_then_eof(void** state) {
  (void)state;
  uint8_t h[HDR];
  hdr_t hd = hdr_of(T_PING, 2, 0, 0);
  hdr_encode(&hd, h);
  for (int with_hello = 0; with_hello < 2; ++with_hello) {
    for (size_t cut = 1; cut < HDR; cut += 10) {
      int fd = conn_open(&g_plain);
      if (with_hello) hello(fd);
      assert_true(send_all(fd, h, cut));
      shutdown(fd, SHUT_WR);
      char what[96];
      snprintf(what, sizeof what, "header cut at %zu bytes%s, EOF", cut,
               with_hello ? " after HELLO" : "");
      expect_only_errors_then_closed(fd, what);
      close(fd);
      assert_serving(&g_plain);
    }
  }
}

static void test_truncated_payload_then_eof(void** state) {
  (void)state;
  for (int with_hello = 0; with_hello < 2; ++with_hello) {
    int fd = conn_open(&g_plain);
    if (with_hello) hello(fd);
    uint8_t payload[100];
    memset(payload, 0, sizeof payload);
    hdr_t h = hdr_of(with_hello ? T_PING : T_HELLO, 2, sizeof payload, 0);
    assert_true(send_raw(fd, &h, payload, 10, NULL, 0));  // 10 of 100 bytes
    shutdown(fd, SHUT_WR);
    expect_only_errors_then_closed(fd, with_hello ? "PING payload cut, EOF"
                                                  : "HELLO payload cut, EOF");
    close(fd);
    assert_serving(&g_plain);
  }
}

static void test_truncated_bulk_then_eof(void** state) {
  (void)state;
  // Mid-upload disconnects: shutdown (EOF) and abrupt close (maybe RST), at
  // several points of a 64 KiB upload. The session dies with the connection,
  // so nothing of it may stay behind.
  const int n = 16384;
  float* data = calloc((size_t)n, sizeof(float));
  for (int mode = 0; mode < 2; ++mode) {
    for (size_t sent = 0; sent < (size_t)n * 4; sent += 20000) {
      int fd = open_hello();
      upload_f32(fd, 2, 50, 4);  // a finished buffer in the same session
      int64_t dims[1] = {n};
      Causeway__V1__UploadRequest m = upload_req(51, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
      packed_t p = pack(&m.base);
      hdr_t h = hdr_of(T_UPLOAD, 3, (uint32_t)p.len, (uint64_t)n * 4);
      assert_true(send_raw(fd, &h, p.data, p.len, data, sent));
      free(p.data);
      char what[96];
      snprintf(what, sizeof what, "UPLOAD bulk cut at %zu of %d bytes, %s", sent, n * 4,
               mode ? "close" : "EOF");
      if (mode == 0) {
        shutdown(fd, SHUT_WR);
        expect_only_errors_then_closed(fd, what);
      }
      close(fd);
      assert_serving(&g_plain);
    }
  }
  free(data);
  // Every session above is gone: the worker holds no buffers (poll briefly,
  // closes are processed asynchronously).
  int fd = open_hello();
  uint64_t buffers = 0;
  for (int i = 0; i < 100; ++i) {
    Causeway__V1__Stats* s = stats(fd, 10 + (uint64_t)i);
    buffers = s->buffers;
    causeway__v1__stats__free_unpacked(s, NULL);
    if (buffers == 0) break;
    sleep_ms(20);
  }
  close(fd);
  if (buffers) fail_msg("worker still holds %" PRIu64 " buffers of closed sessions", buffers);
}

static void test_oversize_payload_before_hello(void** state) {
  (void)state;
  // 4096 bytes is the pre-HELLO limit: a HELLO of exactly that size is fine.
  {
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = 1;
    m.max_version = 1;
    m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    static char name[PREHELLO_MAX_PAYLOAD];
    size_t name_len = PREHELLO_MAX_PAYLOAD - 64;
    memset(name, 'n', sizeof name - 1);
    name[name_len] = 0;
    m.peer_name = name;
    // Grow the name until the payload is exactly 4096 bytes.
    while (protobuf_c_message_get_packed_size(&m.base) < PREHELLO_MAX_PAYLOAD) {
      name[name_len] = 'n';
      name[++name_len] = 0;
    }
    packed_t p = pack(&m.base);
    assert_int_equal(p.len, PREHELLO_MAX_PAYLOAD);
    int fd = conn_open(&g_plain);
    hdr_t h = hdr_of(T_HELLO, 1, (uint32_t)p.len, 0);
    assert_true(send_raw(fd, &h, p.data, p.len, NULL, 0));
    free(p.data);
    frame_t f;
    expect_reply(fd, "HELLO of exactly 4096 bytes", T_HELLO, 1, &f);
    frame_free(&f);
    ping(fd, 2);
    close(fd);
  }
  // 4097 bytes: refused from the header alone (no payload is sent).
  hdr_t h = hdr_of(T_HELLO, 5, PREHELLO_MAX_PAYLOAD + 1, 0);
  violation("HELLO payload_len 4097 before HELLO", false, &h, NULL, 0, NULL, 0, 5,
            C_RESOURCE_EXHAUSTED, "payload|limit|4096|4097");
  h = hdr_of(T_HELLO, 6, UINT32_MAX, 0);
  violation("HELLO payload_len 2^32-1 before HELLO", false, &h, NULL, 0, NULL, 0, 6,
            C_RESOURCE_EXHAUSTED, "payload|limit");
}

static void test_oversize_payload_after_hello(void** state) {
  (void)state;
  int fd = conn_open(&g_plain);
  Causeway__V1__HelloReply* r = NULL;
  hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &r);
  assert_int_equal(r->max_payload, MAX_PAYLOAD);
  causeway__v1__hello_reply__free_unpacked(r, NULL);
  // After HELLO the limit is 16 MiB: 8 KiB is fine now.
  {
    Causeway__V1__Ping m = CAUSEWAY__V1__PING__INIT;
    uint8_t* data = calloc(8192, 1);
    m.data.data = data;
    m.data.len = 8192;
    assert_true(send_msg(fd, T_PING, 3, &m.base, NULL, 0));
    free(data);
    frame_t f;
    expect_reply(fd, "PING of 8 KiB after HELLO", T_PING, 3, &f);
    frame_free(&f);
  }
  hdr_t h = hdr_of(T_PING, 4, MAX_PAYLOAD + 1, 0);
  send_raw(fd, &h, NULL, 0, NULL, 0);
  expect_error(fd, "PING payload_len 16 MiB + 1 after HELLO", 4, C_RESOURCE_EXHAUSTED,
               "payload|limit");
  expect_closed(fd, "oversize after HELLO");
  close(fd);
  assert_serving(&g_plain);
  h = hdr_of(T_COMPILE, 5, UINT32_MAX, 0);
  violation("COMPILE payload_len 2^32-1 after HELLO", true, &h, NULL, 0, NULL, 0, 5,
            C_RESOURCE_EXHAUSTED, "payload|limit");
}

static void test_wrong_magic(void** state) {
  (void)state;
  static const uint32_t magics[] = {0x59415744u, 0x43574159u /* byte-swapped */, 0};
  for (int i = 0; i < 3; ++i) {
    for (int with_hello = 0; with_hello < 2; ++with_hello) {
      hdr_t h = hdr_of(T_PING, 7, 0, 0);
      h.magic = magics[i];
      int fd = conn_open(&g_plain);
      if (with_hello) hello(fd);
      send_raw(fd, &h, NULL, 0, NULL, 0);
      char what[96];
      snprintf(what, sizeof what, "magic 0x%08x%s", magics[i], with_hello ? " after HELLO" : "");
      // Request id 0 or the sent one: the header is not trusted past the magic.
      expect_error(fd, what, ANY_RID, C_INVALID_ARGUMENT, "magic");
      expect_closed(fd, what);
      close(fd);
      assert_serving(&g_plain);
    }
  }
}

static void test_wrong_version(void** state) {
  (void)state;
  static const uint16_t versions[] = {0, 2, 0xFFFF};
  for (int i = 0; i < 3; ++i) {
    for (int with_hello = 0; with_hello < 2; ++with_hello) {
      hdr_t h = hdr_of(T_PING, 8, 0, 0);
      h.version = versions[i];
      int fd = conn_open(&g_plain);
      if (with_hello) hello(fd);
      send_raw(fd, &h, NULL, 0, NULL, 0);
      char what[96];
      snprintf(what, sizeof what, "frame version %u%s", versions[i],
               with_hello ? " after HELLO" : "");
      expect_error(fd, what, ANY_RID, C_UNIMPLEMENTED, "version");
      expect_closed(fd, what);
      close(fd);
      assert_serving(&g_plain);
    }
  }
}

static void test_unknown_type(void** state) {
  (void)state;
  static const uint16_t types[] = {0, 18, 65535};
  for (int i = 0; i < 3; ++i) {
    for (int with_hello = 0; with_hello < 2; ++with_hello) {
      hdr_t h = hdr_of(types[i], 9, 0, 0);
      char what[96];
      snprintf(what, sizeof what, "message type %u%s", types[i],
               with_hello ? " after HELLO" : "");
      violation(what, with_hello, &h, NULL, 0, NULL, 0, 9, C_UNIMPLEMENTED, "type");
    }
  }
}

// LAUNCH_GO is the controller's word on a prepared island part: a client's is
// refused (not a violation), and so is one naming no prepared launch.
static void test_launch_go_from_a_client(void** state) {
  (void)state;
  int fd = open_hello();
  Causeway__V1__LaunchGoRequest m = CAUSEWAY__V1__LAUNCH_GO_REQUEST__INIT;
  m.sched_stamp = 5;
  m.go = true;
  assert_true(send_msg(fd, T_LAUNCH_GO, 21, &m.base, NULL, 0));
  const uint32_t codes[] = {C_PERMISSION_DENIED, 0};
  expect_error_codes(fd, "LAUNCH_GO from a client", 21, codes, "controller", NULL);
  ping(fd, 22);
  close(fd);
}

static void test_unknown_flags(void** state) {
  (void)state;
  static const uint32_t flags[] = {0x4, 0x80000000u, 0xFFFFFFFFu};
  for (int i = 0; i < 3; ++i) {
    hdr_t h = hdr_of(T_PING, 10, 0, 0);
    h.flags = flags[i];
    char what[96];
    snprintf(what, sizeof what, "flags 0x%x", flags[i]);
    violation(what, true, &h, NULL, 0, NULL, 0, 10, C_INVALID_ARGUMENT, "flag");
  }
}

static void test_error_without_reply(void** state) {
  (void)state;
  Causeway__V1__ErrorReply e = CAUSEWAY__V1__ERROR_REPLY__INIT;
  e.code = 3;
  e.message = "forged";
  packed_t p = pack(&e.base);
  hdr_t h = hdr_of(T_PING, 11, (uint32_t)p.len, 0);
  h.flags = F_ERROR;
  violation("ERROR flag without REPLY", true, &h, p.data, p.len, NULL, 0, 11,
            C_INVALID_ARGUMENT, "ERROR|REPLY|flag");
  free(p.data);
}

static void test_bulk_where_none_may_be(void** state) {
  (void)state;
  static const uint16_t types[] = {T_PING, T_HELLO, T_DOWNLOAD, T_STATS, T_DELETE};
  for (int i = 0; i < 5; ++i) {
    hdr_t h = hdr_of(types[i], 12, 0, 8);
    char what[96];
    snprintf(what, sizeof what, "8 bulk bytes on request type %u", types[i]);
    // Bulk bytes are sent too; a worker that reads them first still answers.
    violation(what, types[i] != T_HELLO, &h, NULL, 0, "bulkbulk", 8, 12, C_INVALID_ARGUMENT,
              "bulk");
  }
}

static void test_bulk_len_max(void** state) {
  (void)state;
  Causeway__V1__UploadRequest m = upload_req(60, CAUSEWAY__V1__DTYPE__DTYPE_U8,
                                             (int64_t[]){4}, 1);
  packed_t p = pack(&m.base);
  hdr_t h = hdr_of(T_UPLOAD, 13, (uint32_t)p.len, UINT64_MAX);
  violation("UPLOAD bulk_len 2^64-1", true, &h, p.data, p.len, "abcd", 4, 13,
            C_RESOURCE_EXHAUSTED, "bulk|limit");
  h.bulk_len = (64ull << 30) + 1;  // max-bulk + 1
  violation("UPLOAD bulk_len 64 GiB + 1", true, &h, p.data, p.len, NULL, 0, 13,
            C_RESOURCE_EXHAUSTED, "bulk|limit");
  free(p.data);
  hdr_t hp = hdr_of(T_PING, 14, 0, UINT64_MAX);
  violation("PING bulk_len 2^64-1", true, &hp, NULL, 0, NULL, 0, 14, C_INVALID_ARGUMENT,
            "bulk");
}

static void test_payload_not_protobuf(void** state) {
  (void)state;
  static const struct {
    uint16_t type;
    bool hello;
    const char* bytes;
    size_t len;
  } cases[] = {
      {T_HELLO, false, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11},  // varint too long
      {T_HELLO, false, "\x22\x7f\x01", 3},           // token longer than the payload
      {T_PING, true, "\x0a\x05\x01", 3},             // data longer than the payload
      {T_DOWNLOAD, true, "\x0f\x01", 2},             // wire type 7
      {T_UPLOAD, true, "\x1a\x80\x80\x80\x80\x10", 6},  // dims length 2^32: past the end
      {T_DELETE, true, "\x08", 1},                   // tag without value
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    hdr_t h = hdr_of(cases[i].type, 15, (uint32_t)cases[i].len, 0);
    char what[96];
    snprintf(what, sizeof what, "type %u payload not protobuf (case %zu)", cases[i].type, i);
    violation(what, cases[i].hello, &h, cases[i].bytes, cases[i].len, NULL, 0, 15,
              C_INVALID_ARGUMENT, "malformed|decode|payload|parse|protobuf");
  }
}

static void test_upload_bad_arrays(void** state) {
  (void)state;
  uint8_t bulk[16] = {0};
  struct {
    const char* what;
    int dtype;
    int64_t dims[4];
    size_t rank;
    uint64_t blen;
    const char* keywords;
  } cases[] = {
      {"UPLOAD dims overflow 64 bits", 11, {1ll << 40, 1ll << 40}, 2, 16, "overflow"},
      {"UPLOAD dims overflow via element size", 12, {INT64_MAX}, 1, 16, "overflow"},
      {"UPLOAD negative dim", 11, {-4}, 1, 16, "negative"},
      {"UPLOAD INT64_MIN dim", 11, {2, INT64_MIN}, 2, 16, "negative"},
      {"UPLOAD unknown dtype 99", 99, {4}, 1, 16, "type|dtype"},
      {"UPLOAD dtype 0 (INVALID)", 0, {4}, 1, 16, "type|dtype"},
      {"UPLOAD bulk 12 != extent 16", 11, {4}, 1, 12, "differ|extent|bulk|16"},
      {"UPLOAD bulk 16 != extent 12", 11, {3}, 1, 16, "differ|extent|bulk|12"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    Causeway__V1__UploadRequest m = upload_req(70 + i, cases[i].dtype, cases[i].dims,
                                               cases[i].rank);
    packed_t p = pack(&m.base);
    hdr_t h = hdr_of(T_UPLOAD, 16, (uint32_t)p.len, cases[i].blen);
    violation(cases[i].what, true, &h, p.data, p.len, bulk, (size_t)cases[i].blen, 16,
              C_INVALID_ARGUMENT, cases[i].keywords);
    free(p.data);
  }
  // Not a violation: a well-formed upload to a device that does not exist is
  // a semantic error; its bulk is consumed and the connection stays usable.
  int fd = open_hello();
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest m = upload_req(80, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  m.device = 99;
  assert_true(send_msg(fd, T_UPLOAD, 17, &m.base, bulk, 16));
  const uint32_t dev_codes[] = {C_INVALID_ARGUMENT, C_NOT_FOUND, 11 /* OUT_OF_RANGE */, 0};
  expect_error_codes(fd, "UPLOAD to device 99", 17, dev_codes, "device", NULL);
  ping(fd, 18);
  close(fd);
}

static void test_requests_before_hello(void** state) {
  (void)state;
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  packed_t p = pack(&pm.base);
  hdr_t h = hdr_of(T_PING, 20, (uint32_t)p.len, 0);
  violation("PING before HELLO", false, &h, p.data, p.len, NULL, 0, 20, C_FAILED_PRECONDITION,
            "HELLO");
  free(p.data);
  Causeway__V1__StatsRequest sm = CAUSEWAY__V1__STATS_REQUEST__INIT;
  p = pack(&sm.base);
  h = hdr_of(T_STATS, 21, (uint32_t)p.len, 0);
  violation("STATS before HELLO", false, &h, p.data, p.len, NULL, 0, 21, C_FAILED_PRECONDITION,
            "HELLO");
  free(p.data);
  Causeway__V1__DownloadRequest dm = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dm.buffer_id = 1;
  p = pack(&dm.base);
  h = hdr_of(T_DOWNLOAD, 22, (uint32_t)p.len, 0);
  violation("DOWNLOAD before HELLO", false, &h, p.data, p.len, NULL, 0, 22,
            C_FAILED_PRECONDITION, "HELLO");
  free(p.data);
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest um = upload_req(1, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  p = pack(&um.base);
  h = hdr_of(T_UPLOAD, 23, (uint32_t)p.len, 16);
  uint8_t bulk[16] = {0};
  violation("UPLOAD (with bulk) before HELLO", false, &h, p.data, p.len, bulk, 16, 23,
            C_FAILED_PRECONDITION, "HELLO");
  free(p.data);
}

static void test_second_hello(void** state) {
  (void)state;
  int fd = open_hello();
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = 1;
  m.max_version = 1;
  m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  assert_true(send_msg(fd, T_HELLO, 24, &m.base, NULL, 0));
  expect_error(fd, "second HELLO", 24, C_FAILED_PRECONDITION, "HELLO");
  expect_closed(fd, "second HELLO");
  close(fd);
  assert_serving(&g_plain);
}

static void test_hello_version_range(void** state) {
  (void)state;
  static const struct {
    uint32_t lo, hi;
  } ranges[] = {{2, 5}, {0, 0}, {1, 0}, {7, 1}, {2, UINT32_MAX}};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; ++i) {
    int fd = conn_open(&g_plain);
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = ranges[i].lo;
    m.max_version = ranges[i].hi;
    m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    assert_true(send_msg(fd, T_HELLO, 25, &m.base, NULL, 0));
    char what[96];
    snprintf(what, sizeof what, "HELLO versions [%u, %u]", ranges[i].lo, ranges[i].hi);
    got_error_t e;
    const uint32_t codes[] = {C_UNIMPLEMENTED, 0};
    expect_error_codes(fd, what, 25, codes, "version", &e);
    // The message names both ranges.
    char lo[16], hi[16];
    snprintf(lo, sizeof lo, "%u", ranges[i].lo);
    snprintf(hi, sizeof hi, "%u", ranges[i].hi);
    if (!strstr(e.message, lo) || !strstr(e.message, hi)) {
      fail_msg("%s: message \"%s\" does not name the requested range", what, e.message);
    }
    expect_closed(fd, what);
    close(fd);
    assert_serving(&g_plain);
  }
  // An overlapping wider range is fine.
  int fd = conn_open(&g_plain);
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = 0;
  m.max_version = 9;
  m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  assert_true(send_msg(fd, T_HELLO, 1, &m.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "HELLO versions [0, 9]", T_HELLO, 1, &f);
  frame_free(&f);
  ping(fd, 2);
  close(fd);
}

// Sends HELLO (role CLIENT) with `token` (NULL: none) and a version range.
static void send_hello(int fd, uint64_t rid, const char* token, uint32_t min_v, uint32_t max_v) {
  Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  m.min_version = min_v;
  m.max_version = max_v;
  m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  if (token) {
    m.token.data = (uint8_t*)token;
    m.token.len = strlen(token);
  }
  assert_true(send_msg(fd, T_HELLO, rid, &m.base, NULL, 0));
}

static void test_token(void** state) {
  (void)state;
  static const char* tokens[] = {"wrong-token", NULL, "", TOKEN "x", "hostile-secret-toke"};
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; ++i) {
    int fd = conn_open(&g_token);
    send_hello(fd, 26, tokens[i], 1, 1);
    char what[96];
    snprintf(what, sizeof what, "HELLO token \"%s\"", tokens[i] ? tokens[i] : "(absent)");
    got_error_t e;
    const uint32_t codes[] = {C_UNAUTHENTICATED, 0};
    expect_error_codes(fd, what, 26, codes, "token|auth|credential", &e);
    // The error message must not leak the configured token.
    if (strstr(e.message, TOKEN)) fail_msg("%s: the error message leaks the token", what);
    expect_closed(fd, what);
    close(fd);
    assert_serving(&g_token);
  }
  // Requests pipelined behind a refused HELLO are never looked at: one
  // refusal, then the connection closes (no STATS or PING reply leaks).
  {
    int pfd = conn_open(&g_token);
    send_hello(pfd, 30, "wrong-token", 1, 1);
    Causeway__V1__StatsRequest sm = CAUSEWAY__V1__STATS_REQUEST__INIT;
    Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
    // The worker may already have closed after its refusal: a failed send
    // here is that, not an error.
    (void)send_msg(pfd, T_STATS, 31, &sm.base, NULL, 0);
    (void)send_msg(pfd, T_PING, 32, &pm.base, NULL, 0);
    const uint32_t codes[] = {C_UNAUTHENTICATED, 0};
    got_error_t e;
    expect_error_codes(pfd, "bad-token HELLO with pipelined requests", 30, codes,
                       "credentials refused", &e);
    expect_closed(pfd, "bad-token HELLO with pipelined requests");
    close(pfd);
  }
  // Credentials are checked before anything else in HELLO: a bad token with
  // an unsupported version range is refused for the token, not the version.
  {
    int vfd = conn_open(&g_token);
    send_hello(vfd, 33, NULL, 90, 99);
    const uint32_t codes[] = {C_UNAUTHENTICATED, 0};
    got_error_t e;
    expect_error_codes(vfd, "no-token HELLO with versions 90..99", 33, codes,
                       "credentials refused", &e);
    expect_closed(vfd, "no-token HELLO with versions 90..99");
    close(vfd);
  }
  // Requests before an authenticated HELLO are refused on a token worker too.
  int fd = conn_open(&g_token);
  Causeway__V1__StatsRequest sm = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_true(send_msg(fd, T_STATS, 27, &sm.base, NULL, 0));
  expect_error(fd, "STATS before HELLO (token worker)", 27, C_FAILED_PRECONDITION, "HELLO");
  expect_closed(fd, "STATS before HELLO (token worker)");
  close(fd);
  // The right token works.
  assert_serving(&g_token);
}

static void expect_not_found_then_ping(int fd, const char* what, uint64_t rid,
                                       const char* id_text) {
  expect_error(fd, what, rid, C_NOT_FOUND, id_text);
  ping(fd, rid + 1000);  // the connection stays open and works
}

static void test_unknown_ids(void** state) {
  (void)state;
  int fd = open_hello();
  {
    Causeway__V1__DownloadRequest m = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    m.buffer_id = 123456789;
    assert_true(send_msg(fd, T_DOWNLOAD, 30, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "DOWNLOAD unknown id", 30, "123456789");
  }
  {
    Causeway__V1__AwaitRequest m = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
    m.buffer_id = 123456790;
    assert_true(send_msg(fd, T_AWAIT, 31, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "AWAIT unknown id", 31, "123456790");
  }
  {
    Causeway__V1__DeleteRequest m = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    uint64_t ids[1] = {123456791};
    m.ids = ids;
    m.n_ids = 1;
    assert_true(send_msg(fd, T_DELETE, 32, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "DELETE unknown id", 32, "123456791");
  }
  {
    Causeway__V1__CopyRequest m = CAUSEWAY__V1__COPY_REQUEST__INIT;
    m.src_id = 123456792;
    m.dst_id = 5;
    m.dst_device = 1;
    assert_true(send_msg(fd, T_COPY, 33, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "COPY unknown src id", 33, "123456792");
  }
  {
    Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
    m.src_id = 123456793;
    m.peer_address = g_plain.addr;  // a live peer: only the id is wrong
    m.dst_id = 6;
    m.dst_device = 0;
    m.dst_session = 4242;
    assert_true(send_msg(fd, T_SEND, 34, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "SEND unknown src id", 34, "123456793");
  }
  {
    Causeway__V1__SerializeRequest m = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
    m.exe_id = 123456794;
    assert_true(send_msg(fd, T_SERIALIZE, 35, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "SERIALIZE unknown exe id", 35, "123456794");
  }
  {
    Causeway__V1__LaunchRequest m = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
    m.exe_id = 123456795;
    uint64_t args[1] = {1}, outs[1] = {7};
    Causeway__V1__IdList a = CAUSEWAY__V1__ID_LIST__INIT, o = CAUSEWAY__V1__ID_LIST__INIT;
    a.ids = args;
    a.n_ids = 1;
    o.ids = outs;
    o.n_ids = 1;
    Causeway__V1__IdList* ap[1] = {&a};
    Causeway__V1__IdList* op[1] = {&o};
    m.args = ap;
    m.n_args = 1;
    m.outputs = op;
    m.n_outputs = 1;
    m.launch_id = 1;
    assert_true(send_msg(fd, T_LAUNCH, 36, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "LAUNCH unknown exe id", 36, "123456795");
  }
  {
    // A known buffer but an unknown one among several DELETE ids: NOT_FOUND
    // names the unknown id, the known one is still deleted.
    upload_f32(fd, 37, 40, 4);
    Causeway__V1__DeleteRequest m = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    uint64_t ids[2] = {40, 123456796};
    m.ids = ids;
    m.n_ids = 2;
    assert_true(send_msg(fd, T_DELETE, 38, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "DELETE known + unknown id", 38, "123456796");
    Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    d.buffer_id = 40;
    assert_true(send_msg(fd, T_DOWNLOAD, 39, &d.base, NULL, 0));
    expect_not_found_then_ping(fd, "DOWNLOAD of the deleted id", 39, "40");
  }
  {
    // Id 0 is never valid.
    Causeway__V1__DownloadRequest m = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    m.buffer_id = 0;
    assert_true(send_msg(fd, T_DOWNLOAD, 41, &m.base, NULL, 0));
    const uint32_t codes[] = {C_NOT_FOUND, C_INVALID_ARGUMENT, 0};
    expect_error_codes(fd, "DOWNLOAD id 0", 41, codes, "0", NULL);
    ping(fd, 1041);
  }
  close(fd);
  assert_serving(&g_plain);
}

static void test_duplicate_id(void** state) {
  (void)state;
  int fd = open_hello();
  upload_f32(fd, 50, 9, 4);
  // The same id again: ALREADY_EXISTS; its bulk is consumed, the connection
  // stays open and the first buffer is intact.
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest m = upload_req(9, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  float other[4] = {-1, -1, -1, -1};
  assert_true(send_msg(fd, T_UPLOAD, 51, &m.base, other, sizeof other));
  expect_error(fd, "UPLOAD duplicate id 9", 51, C_ALREADY_EXISTS, "9");
  ping(fd, 52);
  Causeway__V1__ExpectRequest em = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  em.buffer_id = 9;
  assert_true(send_msg(fd, T_EXPECT, 53, &em.base, NULL, 0));
  expect_error(fd, "EXPECT duplicate id 9", 53, C_ALREADY_EXISTS, "9");
  Causeway__V1__CopyRequest cm = CAUSEWAY__V1__COPY_REQUEST__INIT;
  cm.src_id = 9;
  cm.dst_id = 9;
  cm.dst_device = 1;
  assert_true(send_msg(fd, T_COPY, 54, &cm.base, NULL, 0));
  expect_error(fd, "COPY onto existing id 9", 54, C_ALREADY_EXISTS, "9");
  Causeway__V1__DownloadRequest dm = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dm.buffer_id = 9;
  assert_true(send_msg(fd, T_DOWNLOAD, 55, &dm.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "DOWNLOAD id 9", T_DOWNLOAD, 55, &f);
  assert_int_equal(f.bulk_len, 16);
  float want[4] = {0.5f, 1.5f, 2.5f, 3.5f};
  if (memcmp(f.bulk, want, 16) != 0) fail_msg("duplicate UPLOAD overwrote buffer 9");
  frame_free(&f);
  close(fd);
  assert_serving(&g_plain);
}

static void test_put_from_client(void** state) {
  (void)state;
  static const Causeway__V1__Role roles[] = {CAUSEWAY__V1__ROLE__ROLE_CLIENT,
                                             CAUSEWAY__V1__ROLE__ROLE_WORKER};
  for (int i = 0; i < 2; ++i) {
    int fd = conn_open(&g_plain);
    hello_as(fd, NULL, roles[i], 0, NULL);
    Causeway__V1__PutRequest m = CAUSEWAY__V1__PUT_REQUEST__INIT;
    int64_t dims[1] = {4};
    m.dst_id = 5;
    m.dst_session = 0xDEADBEEF0001ull;
    m.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
    m.dims = dims;
    m.n_dims = 1;
    float data[4] = {1, 2, 3, 4};
    assert_true(send_msg(fd, T_PUT, 60, &m.base, data, sizeof data));
    char what[96];
    snprintf(what, sizeof what, "PUT into missing session (%s connection)",
             i ? "WORKER" : "CLIENT");
    const uint32_t codes[] = {C_NOT_FOUND, C_PERMISSION_DENIED, C_FAILED_PRECONDITION, 0};
    expect_error_codes(fd, what, 60, codes, i ? "session" : "", NULL);
    // Either the connection is still usable or the worker closed it: both
    // keep the worker safe; report which.
    Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
    bool sent = send_msg(fd, T_PING, 61, &pm.base, NULL, 0);
    frame_t f;
    int r = sent ? recv_frame(fd, &f, IO_TIMEOUT_MS) : -1;
    if (r == 1) {
      if (f.flags != F_REPLY || f.request_id != 61) {
        fail_msg("%s: after the error, PING got flags 0x%x", what, f.flags);
      }
      fprintf(stderr, "[hostile]   %-46s    connection stays open\n", what);
    } else {
      if (r == -2) fail_msg("%s: PING after the error timed out", what);
      fprintf(stderr, "[hostile]   %-46s    connection closed\n", what);
    }
    frame_free(&f);
    close(fd);
    assert_serving(&g_plain);
  }
  // The PUT created nothing: no session 0xDEADBEEF0001 with buffer 5.
  int fd = conn_open(&g_plain);
  hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0xDEADBEEF0001ull, NULL);
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 5;
  assert_true(send_msg(fd, T_DOWNLOAD, 62, &d.base, NULL, 0));
  expect_error(fd, "DOWNLOAD of the refused PUT's id", 62, C_NOT_FOUND, "5");
  close(fd);
}

static void test_reply_sent_to_worker(void** state) {
  (void)state;
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  packed_t p = pack(&pm.base);
  hdr_t h = hdr_of(T_PING, 70, (uint32_t)p.len, 0);
  h.flags = F_REPLY;
  violation("PING reply sent to the worker", true, &h, p.data, p.len, NULL, 0, 70,
            C_INVALID_ARGUMENT, "reply");
  violation("PING reply sent before HELLO", false, &h, p.data, p.len, NULL, 0, 70,
            C_INVALID_ARGUMENT, "reply|HELLO");
  free(p.data);
  // A DOWNLOAD reply may carry bulk; the worker must not take it as data.
  Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
  ai.buffer_id = 1;
  ai.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  ai.size = 16;
  p = pack(&ai.base);
  h = hdr_of(T_DOWNLOAD, 71, (uint32_t)p.len, 16);
  h.flags = F_REPLY;
  uint8_t bulk[16] = {0};
  violation("DOWNLOAD reply + bulk sent to the worker", true, &h, p.data, p.len, bulk, 16, 71,
            C_INVALID_ARGUMENT, "reply");
  free(p.data);
  Causeway__V1__ErrorReply e = CAUSEWAY__V1__ERROR_REPLY__INIT;
  e.code = 5;
  e.message = "forged";
  p = pack(&e.base);
  h = hdr_of(T_AWAIT, 72, (uint32_t)p.len, 0);
  h.flags = F_REPLY | F_ERROR;
  violation("ERROR reply sent to the worker", true, &h, p.data, p.len, NULL, 0, 72,
            C_INVALID_ARGUMENT, "reply");
  free(p.data);
}

static void test_garbage_bytes(void** state) {
  (void)state;
  uint64_t seed = 0x5EEDC0DE12345678ull;  // fixed: failures reproduce
  for (int round = 0; round < 24; ++round) {
    size_t len = 1 + (size_t)(round * 397 % 8192);
    uint8_t* buf = malloc(len);
    for (size_t i = 0; i < len; ++i) {
      seed ^= seed << 13;
      seed ^= seed >> 7;
      seed ^= seed << 17;
      buf[i] = (uint8_t)seed;
    }
    bool with_hello = round % 2;
    // Every other round starts with a valid magic and version, so the
    // garbage reaches the type/flags/length checks.
    if (round % 4 >= 2 && len >= 6) {
      put_le(buf, MAGIC, 4);
      put_le(buf + 4, 1, 2);
    }
    int fd = conn_open(&g_plain);
    if (with_hello) hello(fd);
    send_all(fd, buf, len);
    shutdown(fd, SHUT_WR);
    char what[96];
    snprintf(what, sizeof what, "garbage round %d (%zu bytes%s)", round, len,
             with_hello ? ", after HELLO" : "");
    expect_only_errors_then_closed(fd, what);
    close(fd);
    free(buf);
    assert_serving(&g_plain);
  }
}

static void test_slowloris(void** state) {
  (void)state;
  // 1. Connect and send nothing: closed after the 300 ms HELLO timeout.
  // 2. Half a header, then silence.
  // 3. A HELLO dribbled one byte per 50 ms: never complete within 300 ms.
  for (int mode = 0; mode < 3; ++mode) {
    int fd = conn_open(&g_plain);
    long long t0 = cw_time_now_ms();
    uint8_t h[HDR];
    hdr_t hd = hdr_of(T_HELLO, 1, 0, 0);
    hdr_encode(&hd, h);
    bool closed = false;
    if (mode == 1) send_all(fd, h, 16);
    if (mode == 2) {
      for (int i = 0; i < HDR && !closed; ++i) {
        if (!send_all(fd, h + i, 1)) closed = true;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) > 0) break;  // the worker spoke or closed
      }
    }
    static const char* names[] = {"slowloris: silent", "slowloris: half header",
                                  "slowloris: dribbled HELLO"};
    // Any ERROR reply (DEADLINE_EXCEEDED) is fine; then closed.
    expect_only_errors_then_closed(fd, names[mode]);
    long long dt = cw_time_now_ms() - t0;
    fprintf(stderr, "[hostile]   %-46s    closed after %lld ms\n", names[mode], dt);
    if (dt < 250) fail_msg("%s: closed after %lld ms, before the 300 ms timeout", names[mode],
                           dt);
    if (dt > 3000) fail_msg("%s: closed only after %lld ms", names[mode], dt);
    close(fd);
  }
  // A connection that completed HELLO is not subject to the timeout.
  int fd = open_hello();
  sleep_ms(700);
  ping(fd, 90);
  close(fd);
  assert_serving(&g_plain);
}

static void test_vanish_with_pending_await(void** state) {
  (void)state;
  // A client that waits on a pending id and disappears: the reply has no
  // one to go to; the worker must drop it and free the session.
  for (int i = 0; i < 3; ++i) {
    int fd = open_hello();
    Causeway__V1__ExpectRequest em = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
    em.buffer_id = 500;
    assert_true(send_msg(fd, T_EXPECT, 2, &em.base, NULL, 0));
    frame_t f;
    expect_reply(fd, "EXPECT 500", T_EXPECT, 2, &f);
    frame_free(&f);
    Causeway__V1__AwaitRequest am = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
    am.buffer_id = 500;
    assert_true(send_msg(fd, T_AWAIT, 3, &am.base, NULL, 0));
    Causeway__V1__DownloadRequest dm = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    dm.buffer_id = 500;
    assert_true(send_msg(fd, T_DOWNLOAD, 4, &dm.base, NULL, 0));
    sleep_ms(50);
    close(fd);
    assert_serving(&g_plain);
  }
}

static void test_pipelined_then_violation(void** state) {
  (void)state;
  // HELLO, two PINGs, an UPLOAD with bulk and a bad header in one write: the
  // valid requests are answered in order, then the error, then the close.
  uint8_t buf[1024];
  size_t n = 0;
  Causeway__V1__HelloRequest hm = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  hm.min_version = 1;
  hm.max_version = 1;
  hm.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest um = upload_req(3, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  const ProtobufCMessage* msgs[4] = {&hm.base, &pm.base, &pm.base, &um.base};
  const uint16_t types[4] = {T_HELLO, T_PING, T_PING, T_UPLOAD};
  for (int i = 0; i < 4; ++i) {
    size_t len = protobuf_c_message_get_packed_size(msgs[i]);
    hdr_t h = hdr_of(types[i], (uint64_t)i + 1, (uint32_t)len, types[i] == T_UPLOAD ? 16 : 0);
    hdr_encode(&h, buf + n);
    protobuf_c_message_pack(msgs[i], buf + n + HDR);
    n += HDR + len;
    if (types[i] == T_UPLOAD) {
      memset(buf + n, 0, 16);
      n += 16;
    }
  }
  hdr_t bad = hdr_of(T_PING, 5, 0, 0);
  bad.magic = 0xDEADBEEF;
  hdr_encode(&bad, buf + n);
  n += HDR;
  int fd = conn_open(&g_plain);
  assert_true(send_all(fd, buf, n));
  // HELLO and the PINGs are answered at once, in order, before the error.
  // The UPLOAD is acknowledged when its device buffer is ready: replies may
  // come in any order, so its Ack may come before or after the error, or be
  // lost with the closed connection; which one is reported.
  frame_t f;
  const char* upload_ack = "never";
  for (int i = 0; i < 3; ++i) {
    int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
    if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 4) {
      upload_ack = "before the error";
      frame_free(&f);
      --i;
      continue;
    }
    if (r != 1 || f.flags != F_REPLY || f.type != types[i] || f.request_id != (uint64_t)i + 1) {
      fail_msg("pipelined request %d: got %s type %u flags 0x%x rid %" PRIu64, i + 1,
               recv_result_name(r), f.type, f.flags, f.request_id);
    }
    frame_free(&f);
  }
  for (;;) {
    int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
    if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 4) {
      upload_ack = "before the error";
      frame_free(&f);
      continue;
    }
    if (r != 1 || f.flags != (F_REPLY | F_ERROR)) {
      fail_msg("bad magic after pipelined requests: want the ERROR reply, got %s flags 0x%x",
               recv_result_name(r), f.flags);
    }
    fprintf(stderr, "[hostile]   %-46s -> error reply\n", "bad magic after 4 pipelined requests");
    frame_free(&f);
    break;
  }
  int r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
  if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 4) {
    upload_ack = "after the error";
    frame_free(&f);
    r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
  }
  if (r == 1) fail_msg("worker sent type %u flags 0x%x after the error", f.type, f.flags);
  if (r == -2) fail_msg("worker did not close after the error");
  frame_free(&f);
  fprintf(stderr, "[hostile]   %-46s    UPLOAD Ack: %s\n", "pipelined UPLOAD before the violation",
          upload_ack);
  close(fd);
  assert_serving(&g_plain);
}

static void test_fragmented_frames(void** state) {
  (void)state;
  // A valid UPLOAD (1 KiB of bulk) and a PING, written one byte at a time.
  int fd = open_hello();
  const int n = 256;
  int64_t dims[1] = {n};
  Causeway__V1__UploadRequest m = upload_req(4, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  packed_t p = pack(&m.base);
  size_t total = HDR + p.len + (size_t)n * 4 + HDR;
  uint8_t* buf = malloc(total);
  hdr_t h = hdr_of(T_UPLOAD, 2, (uint32_t)p.len, (uint64_t)n * 4);
  hdr_encode(&h, buf);
  memcpy(buf + HDR, p.data, p.len);
  for (int i = 0; i < n; ++i) {
    float v = (float)i * 0.25f;
    memcpy(buf + HDR + p.len + (size_t)i * 4, &v, 4);
  }
  hdr_t hp = hdr_of(T_PING, 3, 0, 0);
  hdr_encode(&hp, buf + HDR + p.len + (size_t)n * 4);
  for (size_t i = 0; i < total; ++i) assert_true(send_all(fd, buf + i, 1));
  frame_t f;
  // Two replies, in any order (the Ack waits for the device buffer).
  bool got_upload = false, got_ping = false;
  for (int i = 0; i < 2; ++i) {
    int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
    if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 2 && !got_upload) {
      got_upload = true;
    } else if (r == 1 && f.flags == F_REPLY && f.type == T_PING && f.request_id == 3 &&
               !got_ping) {
      got_ping = true;
    } else {
      fail_msg("byte-by-byte UPLOAD + PING: got %s type %u flags 0x%x rid %" PRIu64,
               recv_result_name(r), f.type, f.flags, f.request_id);
    }
    frame_free(&f);
  }
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 4;
  assert_true(send_msg(fd, T_DOWNLOAD, 4, &d.base, NULL, 0));
  expect_reply(fd, "DOWNLOAD of the byte-by-byte upload", T_DOWNLOAD, 4, &f);
  assert_int_equal(f.bulk_len, (uint64_t)n * 4);
  if (memcmp(f.bulk, buf + HDR + p.len, (size_t)n * 4) != 0) {
    fail_msg("byte-by-byte upload came back different");
  }
  frame_free(&f);
  free(buf);
  free(p.data);
  // A zero-element array: no bulk at all, still a buffer.
  int64_t zdims[2] = {0, 5};
  Causeway__V1__UploadRequest z = upload_req(5, CAUSEWAY__V1__DTYPE__DTYPE_F32, zdims, 2);
  assert_true(send_msg(fd, T_UPLOAD, 5, &z.base, NULL, 0));
  expect_reply(fd, "UPLOAD f32[0,5]", T_UPLOAD, 5, &f);
  frame_free(&f);
  d.buffer_id = 5;
  assert_true(send_msg(fd, T_DOWNLOAD, 6, &d.base, NULL, 0));
  expect_reply(fd, "DOWNLOAD f32[0,5]", T_DOWNLOAD, 6, &f);
  assert_int_equal(f.bulk_len, 0);
  frame_free(&f);
  close(fd);
  assert_serving(&g_plain);
}

static const char k_mlir[] =
    "module @hostile {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static void send_compile(int fd, uint64_t rid, uint64_t exe, const char* format,
                         const void* code, size_t code_len, const void* opts, size_t opts_len) {
  Causeway__V1__CompileRequest m = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  m.exe_id = exe;
  m.format = (char*)format;
  m.code.data = (uint8_t*)code;
  m.code.len = code_len;
  m.compile_options.data = (uint8_t*)opts;
  m.compile_options.len = opts_len;
  assert_true(send_msg(fd, T_COMPILE, rid, &m.base, NULL, 0));
}

static void send_launch(int fd, uint64_t rid, uint64_t exe, size_t ndev, const uint64_t* args,
                        size_t nargs, uint64_t out) {
  Causeway__V1__LaunchRequest m = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  Causeway__V1__IdList a[2] = {CAUSEWAY__V1__ID_LIST__INIT, CAUSEWAY__V1__ID_LIST__INIT};
  Causeway__V1__IdList o[2] = {CAUSEWAY__V1__ID_LIST__INIT, CAUSEWAY__V1__ID_LIST__INIT};
  Causeway__V1__IdList* ap[2] = {&a[0], &a[1]};
  Causeway__V1__IdList* op[2] = {&o[0], &o[1]};
  uint64_t outs[2] = {out, out + 1};
  for (size_t d = 0; d < ndev && d < 2; ++d) {
    a[d].ids = (uint64_t*)args;
    a[d].n_ids = nargs;
    o[d].ids = &outs[d];
    o[d].n_ids = 1;
  }
  m.exe_id = exe;
  m.args = ap;
  m.n_args = ndev;
  m.outputs = op;
  m.n_outputs = ndev;
  m.launch_id = rid;
  assert_true(send_msg(fd, T_LAUNCH, rid, &m.base, NULL, 0));
}

static void test_executables_hostile(void** state) {
  (void)state;
  int fd = open_hello();
  frame_t f;
  send_compile(fd, 2, 500, "mlir", k_mlir, strlen(k_mlir), NULL, 0);
  expect_reply(fd, "COMPILE of a valid module", T_COMPILE, 2, &f);
  frame_free(&f);
  upload_f32(fd, 3, 10, 4);
  // Unknown argument id with a known executable.
  uint64_t unknown[1] = {999};
  send_launch(fd, 4, 500, 1, unknown, 1, 1000);
  expect_error(fd, "LAUNCH with unknown argument id 999", 4, C_NOT_FOUND, "999");
  ping(fd, 5);
  // Wrong number of arguments / device lists.
  uint64_t two[2] = {10, 10};
  send_launch(fd, 6, 500, 1, two, 2, 1010);
  const uint32_t arg_codes[] = {C_INVALID_ARGUMENT, C_FAILED_PRECONDITION, 0};
  expect_error_codes(fd, "LAUNCH with 2 args for 1 parameter", 6, arg_codes, "arg", NULL);
  ping(fd, 7);
  send_launch(fd, 8, 500, 0, NULL, 0, 1020);
  expect_error_codes(fd, "LAUNCH with no device lists", 8, arg_codes, "", NULL);
  ping(fd, 9);
  uint64_t one[1] = {10};
  send_launch(fd, 10, 500, 2, one, 1, 1030);
  expect_error_codes(fd, "LAUNCH with 2 device lists for 1 device", 10, arg_codes, "device",
                     NULL);
  ping(fd, 11);
  // Output id that already exists.
  send_launch(fd, 12, 500, 1, one, 1, 10);
  expect_error(fd, "LAUNCH output onto existing id 10", 12, C_ALREADY_EXISTS, "10");
  ping(fd, 13);
  // Argument of the wrong shape (f32[8] for tensor<4xf32>).
  upload_f32(fd, 14, 11, 8);
  uint64_t wrong[1] = {11};
  send_launch(fd, 15, 500, 1, wrong, 1, 1040);
  const uint32_t shape_codes[] = {C_INVALID_ARGUMENT, C_FAILED_PRECONDITION, 0};
  expect_error_codes(fd, "LAUNCH with an f32[8] argument for f32[4]", 15, shape_codes, "", NULL);
  ping(fd, 16);
  // A valid launch still works afterwards.
  send_launch(fd, 17, 500, 1, one, 1, 1050);
  expect_reply(fd, "valid LAUNCH", T_LAUNCH, 17, &f);
  frame_free(&f);
  // Garbage programs, options and serialized executables: errors, no crash.
  static const char garbage[] = "\x00\x01 this is not MLIR \xff\xfe";
  send_compile(fd, 18, 501, "mlir", garbage, sizeof garbage - 1, NULL, 0);
  expect_error_codes(fd, "COMPILE of garbage bytes", 18,
                     (const uint32_t[]){C_INVALID_ARGUMENT, 2, C_INTERNAL_CODE, 0}, "", NULL);
  ping(fd, 19);
  send_launch(fd, 20, 501, 1, one, 1, 1060);
  {
    frame_t g;
    int r = recv_frame(fd, &g, IO_TIMEOUT_MS);
    if (r != 1 || g.flags != (F_REPLY | F_ERROR)) {
      fail_msg("LAUNCH of the failed executable 501: want an ERROR reply, got %s flags 0x%x",
               recv_result_name(r), g.flags);
    }
    fprintf(stderr, "[hostile]   %-46s -> error reply\n", "LAUNCH of the failed executable");
    frame_free(&g);
  }
  ping(fd, 21);
  send_compile(fd, 22, 502, "mlir", k_mlir, strlen(k_mlir), "\xff\xff\xff\xff", 4);
  expect_error_codes(fd, "COMPILE with garbage compile options", 22,
                     (const uint32_t[]){C_INVALID_ARGUMENT, 2, C_INTERNAL_CODE, 0}, "", NULL);
  ping(fd, 23);
  send_compile(fd, 24, 503, "no-such-format", k_mlir, strlen(k_mlir), NULL, 0);
  expect_error_codes(fd, "COMPILE with format \"no-such-format\"", 24,
                     (const uint32_t[]){C_INVALID_ARGUMENT, C_UNIMPLEMENTED, 0}, "format", NULL);
  ping(fd, 25);
  {
    Causeway__V1__LoadRequest lm = CAUSEWAY__V1__LOAD_REQUEST__INIT;
    lm.exe_id = 504;
    uint8_t junk[512];
    uint64_t seed = 0x10AD;
    for (size_t i = 0; i < sizeof junk; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      junk[i] = (uint8_t)(seed >> 56);
    }
    assert_true(send_msg(fd, T_LOAD, 26, &lm.base, junk, sizeof junk));
    expect_error_codes(fd, "LOAD of 512 random bytes", 26,
                       (const uint32_t[]){C_INVALID_ARGUMENT, 2, C_INTERNAL_CODE, 0}, "", NULL);
    ping(fd, 27);
  }
  close(fd);
  assert_serving(&g_plain);
}

static void test_send_to_bad_peers(void** state) {
  (void)state;
  int fd = open_hello();
  upload_f32(fd, 2, 20, 4);
  static const char* peers[] = {"127.0.0.1:1", "", "not-an-address", "/nonexistent/socket"};
  for (size_t i = 0; i < sizeof peers / sizeof peers[0]; ++i) {
    Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
    m.src_id = 20;
    m.peer_address = (char*)peers[i];
    m.dst_id = 21;
    m.dst_session = 4243;
    assert_true(send_msg(fd, T_SEND, 3 + i, &m.base, NULL, 0));
    char what[96];
    snprintf(what, sizeof what, "SEND to peer \"%s\"", peers[i]);
    expect_error_codes(fd, what, 3 + i,
                       (const uint32_t[]){14 /* UNAVAILABLE */, C_INVALID_ARGUMENT, 0}, "", NULL);
    ping(fd, 100 + i);
  }
  // A live peer (this worker) but a session that does not exist there: the
  // peer's refusal comes back.
  Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
  m.src_id = 20;
  m.peer_address = g_plain.addr;
  m.dst_id = 22;
  m.dst_session = 0xFEEDFACE;
  assert_true(send_msg(fd, T_SEND, 20, &m.base, NULL, 0));
  expect_error_codes(fd, "SEND into a missing session at the peer", 20,
                     (const uint32_t[]){C_NOT_FOUND, 14, 0}, "session", NULL);
  ping(fd, 21);
  // Token worker as peer: this worker presents no token, must be refused.
  m.peer_address = g_token.addr;
  m.dst_session = 1;
  assert_true(send_msg(fd, T_SEND, 22, &m.base, NULL, 0));
  expect_error_codes(fd, "SEND to a token worker without the token", 22,
                     (const uint32_t[]){C_UNAUTHENTICATED, 14, 0}, "", NULL);
  ping(fd, 23);
  close(fd);
  assert_serving(&g_plain);
  assert_serving(&g_token);
}

static void test_connection_flood(void** state) {
  (void)state;
  // 200 connections that never say HELLO: all closed by the HELLO timeout,
  // and the worker serves throughout.
  enum { N = 200 };
  int fds[N];
  for (int i = 0; i < N; ++i) fds[i] = conn_open(&g_plain);
  assert_serving(&g_plain);
  for (int i = 0; i < N; ++i) expect_only_errors_then_closed(fds[i], "flood connection");
  for (int i = 0; i < N; ++i) close(fds[i]);
  assert_serving(&g_plain);
}

static void test_sigterm_clean_exit(void** state) {
  (void)state;
  worker_t* ws[2] = {&g_plain, &g_token};
  for (int i = 0; i < 2; ++i) {
    int st = worker_stop(ws[i]);
    char d[64];
    if (st == -1) {
      dump_worker(ws[i]);
      fail_msg("%s worker did not exit within 60 s of SIGTERM", ws[i]->label);
    }
    describe_status(st, d, sizeof d);
    fprintf(stderr, "[hostile] %s worker after SIGTERM: %s\n", ws[i]->label, d);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      dump_worker(ws[i]);
      fail_msg("%s worker: %s after SIGTERM (want exit 0: no leak, no crash)", ws[i]->label, d);
    }
  }
}

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (!worker_start(&g_plain, NULL)) return -1;
  if (!worker_start(&g_token, TOKEN)) return -1;
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  worker_t* ws[2] = {&g_plain, &g_token};
  for (int i = 0; i < 2; ++i) {
    if (ws[i]->pid > 0 && !ws[i]->reaped) {
      kill(ws[i]->pid, SIGKILL);
      waitpid(ws[i]->pid, NULL, 0);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  static char path[1024];
  if (argc > 1) {
    g_worker_bin = argv[1];
  } else if (getenv("CW_WORKER_BIN")) {
    g_worker_bin = getenv("CW_WORKER_BIN");
  } else {
    const char* b = getenv("CW_BUILD_DIR");
    snprintf(path, sizeof path, "%s/bin/causeway-worker", b ? b : ".");
    g_worker_bin = path;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncated_header_then_eof),
      cmocka_unit_test(test_truncated_payload_then_eof),
      cmocka_unit_test(test_truncated_bulk_then_eof),
      cmocka_unit_test(test_oversize_payload_before_hello),
      cmocka_unit_test(test_oversize_payload_after_hello),
      cmocka_unit_test(test_wrong_magic),
      cmocka_unit_test(test_wrong_version),
      cmocka_unit_test(test_unknown_type),
      cmocka_unit_test(test_launch_go_from_a_client),
      cmocka_unit_test(test_unknown_flags),
      cmocka_unit_test(test_error_without_reply),
      cmocka_unit_test(test_bulk_where_none_may_be),
      cmocka_unit_test(test_bulk_len_max),
      cmocka_unit_test(test_payload_not_protobuf),
      cmocka_unit_test(test_upload_bad_arrays),
      cmocka_unit_test(test_requests_before_hello),
      cmocka_unit_test(test_second_hello),
      cmocka_unit_test(test_hello_version_range),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_unknown_ids),
      cmocka_unit_test(test_duplicate_id),
      cmocka_unit_test(test_put_from_client),
      cmocka_unit_test(test_reply_sent_to_worker),
      cmocka_unit_test(test_garbage_bytes),
      cmocka_unit_test(test_slowloris),
      cmocka_unit_test(test_vanish_with_pending_await),
      cmocka_unit_test(test_pipelined_then_violation),
      cmocka_unit_test(test_fragmented_frames),
      cmocka_unit_test(test_executables_hostile),
      cmocka_unit_test(test_send_to_bad_peers),
      cmocka_unit_test(test_connection_flood),
      // Last: SIGTERM both workers and require exit 0 (ASan: no leaks).
      cmocka_unit_test(test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile", tests, group_setup, group_teardown);
}
