// The hostile-frame suite's harness (cw_test_hostile.h).
#include "cw_test_hostile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cw_time.h"

worker_t g_plain = {.label = "worker-plain"};
worker_t g_token = {.label = "worker-token"};
static const char* g_worker_bin;

void sleep_ms(int ms) {
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

void dump_worker(const worker_t* w) {
  dump_file_tail(w->out_path, 4096);
  dump_file_tail(w->log_path, 16384);
}

bool worker_running(worker_t* w) {
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

void describe_status(int st, char* out, size_t n) {
  if (WIFEXITED(st)) {
    snprintf(out, n, "exit %d", WEXITSTATUS(st));
  } else if (WIFSIGNALED(st)) {
    snprintf(out, n, "killed by signal %d", WTERMSIG(st));
  } else {
    snprintf(out, n, "status 0x%x", st);
  }
}

// The rest of the first line of `path` that starts with `prefix`, into out
// (without the newline); false while there is none (or it is incomplete).
static bool find_line(const char* path, const char* prefix, char* out, size_t cap) {
  FILE* f = fopen(path, "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  size_t plen = strlen(prefix);
  while (!found && fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    if (strncmp(line, prefix, plen) != 0 || !n || line[n - 1] != '\n') continue;
    line[n - 1] = 0;
    snprintf(out, cap, "%s", line + plen);
    found = true;
  }
  fclose(f);
  return found;
}

bool daemon_start(worker_t* w, const daemon_spec_t* spec) {
  const char* dir = getenv("CW_HOSTILE_LOG_DIR");
  if (!dir || !dir[0]) dir = getenv("TMPDIR");
  if (!dir || !dir[0]) dir = "/tmp";
  snprintf(w->log_path, sizeof w->log_path, "%s/hostile-%s-%d.log", dir, w->label,
           (int)getpid());
  snprintf(w->out_path, sizeof w->out_path, "%s/hostile-%s-%d.out", dir, w->label,
           (int)getpid());
  w->addr[0] = w->http_addr[0] = 0;
  int out_fd = open(w->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int log_fd = open(w->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || log_fd < 0) {
    print_error("cannot create %s / %s: %s\n", w->out_path, w->log_path, strerror(errno));
    return false;
  }
  const char* argv[32] = {spec->bin};
  size_t argc = 1;
  for (const char* const* a = spec->args; a && *a && argc < 31; ++a) argv[argc++] = *a;
  argv[argc] = NULL;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(log_fd, 2);
    setenv("CAUSEWAY_HELLO_TIMEOUT_MS", "300", 1);
    unsetenv("CAUSEWAY_TOKEN");
    unsetenv("CAUSEWAY_TOKEN_FILE");
    for (const char* const* e = spec->env; e && *e; ++e) putenv((char*)*e);
    execv(spec->bin, (char* const*)argv);
    fprintf(stderr, "exec %s: %s\n", spec->bin, strerror(errno));
    _exit(127);
  }
  close(out_fd);
  close(log_fd);
  w->pid = pid;
  w->reaped = false;
  int64_t deadline = cw_time_now_ms() + 120000;
  while (cw_time_now_ms() < deadline) {
    if (!w->addr[0]) find_line(w->out_path, spec->listen_prefix, w->addr, sizeof w->addr);
    if (spec->http_prefix && !w->http_addr[0]) {
      char url[256];
      if (find_line(w->out_path, spec->http_prefix, url, sizeof url)) {
        // "http://HOST:PORT/metrics" or "http://HOST:PORT (...)": HOST:PORT.
        const char* hp = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
        size_t n = strcspn(hp, "/ ");
        snprintf(w->http_addr, sizeof w->http_addr, "%.*s", (int)n, hp);
      }
    }
    if (w->addr[0] && (!spec->http_prefix || w->http_addr[0])) {
      fprintf(stderr, "[hostile] %s pid %d listening on %s%s%s (log %s)\n", w->label, (int)pid,
              w->addr, w->http_addr[0] ? ", http " : "", w->http_addr, w->log_path);
      return true;
    }
    if (!worker_running(w)) {
      char d[64];
      describe_status(w->exit_status, d, sizeof d);
      print_error("%s exited before listening (%s)\n", w->label, d);
      dump_worker(w);
      return false;
    }
    sleep_ms(20);
  }
  print_error("%s did not print its listen line in time\n", w->label);
  dump_worker(w);
  kill(pid, SIGKILL);
  return false;
}

static bool worker_start(worker_t* w, const char* token) {
  const char* plugin = hostile_plugin();
  if (!plugin) return false;
  static char token_env[128];
  snprintf(token_env, sizeof token_env, "CAUSEWAY_TOKEN=%s", token ? token : "");
  const char* args[] = {"--plugin", plugin, "--devices", "2", "--listen", "127.0.0.1:0", NULL};
  const char* env[] = {token ? token_env : NULL, NULL};
  daemon_spec_t spec = {.bin = g_worker_bin, .args = args, .env = env,
                        .listen_prefix = "causeway-worker listening on "};
  return daemon_start(w, &spec);
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

int conn_open(const worker_t* w) {
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
  if (fd < 0) fail_msg("connect to %s at %s: %s", w->label, w->addr, strerror(errno));
  return fd;
}

void hello_as(int fd, const char* token, Causeway__V1__Role role, uint64_t session,
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

void hello(int fd) { hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, NULL); }

void ping(int fd, uint64_t rid) {
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

void daemon_assert_serving(worker_t* w, const char* token) {
  if (!worker_running(w)) {
    char d[64];
    describe_status(w->exit_status, d, sizeof d);
    dump_worker(w);
    fail_msg("%s is gone (%s)", w->label, d);
  }
  int fd = conn_open(w);
  hello_as(fd, token, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, NULL);
  ping(fd, 77);
  close(fd);
}

void assert_serving(worker_t* w) { daemon_assert_serving(w, w == &g_token ? TOKEN : NULL); }

Causeway__V1__UploadRequest upload_req(uint64_t id, int dtype, int64_t* dims, size_t rank) {
  Causeway__V1__UploadRequest m = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  m.buffer_id = id;
  m.dtype = (Causeway__V1__DType)dtype;
  m.dims = dims;
  m.n_dims = rank;
  m.device = 0;
  return m;
}

void upload_f32(int fd, uint64_t rid, uint64_t id, int n) {
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

Causeway__V1__Stats* stats(int fd, uint64_t rid) {
  Causeway__V1__StatsRequest m = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_true(send_msg(fd, T_STATS, rid, &m.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "STATS", T_STATS, rid, &f);
  Causeway__V1__Stats* s = causeway__v1__stats__unpack(NULL, f.payload_len, f.payload);
  frame_free(&f);
  if (!s) fail_msg("Stats does not decode");
  return s;
}

int open_hello(void) {
  int fd = conn_open(&g_plain);
  hello(fd);
  return fd;
}

void violation(const char* what, bool do_hello, const hdr_t* h, const void* payload,
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

void hostile_init(int argc, char** argv) {
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
}

const char* hostile_worker_bin(void) { return g_worker_bin; }

const char* hostile_controller_bin(void) {
  static char path[1024];
  const char* bin = getenv("CW_CONTROLLER_BIN");
  if (bin && bin[0]) return bin;
  const char* b = getenv("CW_BUILD_DIR");
  snprintf(path, sizeof path, "%s/bin/causeway-controller", b ? b : ".");
  return path;
}

int hostile_group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (!worker_start(&g_plain, NULL)) return -1;
  return 0;
}

int hostile_group_setup_with_token(void** state) {
  if (hostile_group_setup(state) != 0) return -1;
  if (!worker_start(&g_token, TOKEN)) return -1;
  return 0;
}

void daemons_kill(worker_t* const* ws, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (ws[i]->pid > 0 && !ws[i]->reaped) {
      kill(ws[i]->pid, SIGKILL);
      waitpid(ws[i]->pid, NULL, 0);
      ws[i]->reaped = true;
    }
  }
}

int hostile_group_teardown(void** state) {
  (void)state;
  worker_t* const ws[2] = {&g_plain, &g_token};
  daemons_kill(ws, 2);
  return 0;
}

void daemons_sigterm_clean_exit(worker_t* const* ws, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (ws[i]->pid <= 0) continue;  // not started by this suite
    int st = worker_stop(ws[i]);
    char d[64];
    if (st == -1) {
      dump_worker(ws[i]);
      fail_msg("%s did not exit within 60 s of SIGTERM", ws[i]->label);
    }
    describe_status(st, d, sizeof d);
    fprintf(stderr, "[hostile] %s after SIGTERM: %s\n", ws[i]->label, d);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      dump_worker(ws[i]);
      fail_msg("%s: %s after SIGTERM (want exit 0: no leak, no crash)", ws[i]->label, d);
    }
  }
}

void hostile_test_sigterm_clean_exit(void** state) {
  (void)state;
  worker_t* const ws[2] = {&g_plain, &g_token};
  daemons_sigterm_clean_exit(ws, 2);
}

const char* hostile_plugin(void) {
  const char* plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  if (plugin && plugin[0]) return plugin;
  print_error("CAUSEWAY_PJRT_PLUGIN is not set\n");
  return NULL;
}

int hostile_print_counts(const char* title, const char* const* kinds, int num_kinds,
                         const int (*counts)[2], int out_per[2]) {
  out_per[0] = out_per[1] = 0;
  fprintf(stderr, "[hostile] %-24s   worker  controller\n", title);
  for (int k = 0; k < num_kinds; ++k) {
    fprintf(stderr, "[hostile]   %-24s %6d  %10d\n", kinds[k], counts[k][0], counts[k][1]);
    out_per[0] += counts[k][0];
    out_per[1] += counts[k][1];
  }
  fprintf(stderr, "[hostile]   %-24s %6d  %10d   total %d\n", "all", out_per[0], out_per[1],
          out_per[0] + out_per[1]);
  return out_per[0] + out_per[1];
}
