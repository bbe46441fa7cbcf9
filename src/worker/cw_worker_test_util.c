// Helpers of the worker's multi-process tests (cw_worker_test_util.h).
#include "cw_worker_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---- Raw frames ----------------------------------------------------------------

void start_worker(worker_t* w, const char* token) { start_worker_at(w, token, "127.0.0.1:0"); }

void start_worker_at(worker_t* w, const char* token, const char* listen) {
  const char* plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  const char* build = getenv("CW_BUILD_DIR");
  assert_non_null(plugin);
  assert_non_null(build);
  char exe[1024];
  snprintf(exe, sizeof(exe), "%s/bin/causeway-worker", build);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  w->pid = fork();
  assert_true(w->pid >= 0);
  if (w->pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (token) setenv("CAUSEWAY_TOKEN", token, 1);
    else unsetenv("CAUSEWAY_TOKEN");
    execl(exe, exe, "--plugin", plugin, "--devices", "2", "--listen", listen, (char*)NULL);
    _exit(127);
  }
  close(fds[1]);
  char line[256];
  size_t n = 0;
  while (n + 1 < sizeof(line)) {
    ssize_t r = read(fds[0], line + n, 1);
    if (r <= 0 || line[n] == '\n') break;
    n++;
  }
  line[n] = 0;
  close(fds[0]);
  const char* prefix = "causeway-worker listening on ";
  assert_true(strncmp(line, prefix, strlen(prefix)) == 0);
  snprintf(w->addr, sizeof(w->addr), "%s", line + strlen(prefix));
  w->port = w->addr[0] == '/' ? 0 : atoi(strrchr(w->addr, ':') + 1);
}

void stop_worker(worker_t* w) {
  kill(w->pid, SIGTERM);
  int status = 0;
  // Bounded: a worker that does not exit is a failure, not a hung test.
  pid_t got = 0;
  for (int i = 0; i < 600 && got == 0; ++i) {
    got = waitpid(w->pid, &status, WNOHANG);
    if (got == 0) usleep(50000);
  }
  if (got == 0) {
    kill(w->pid, SIGKILL);
    waitpid(w->pid, &status, 0);
    fail_msg("worker %d did not exit within 30 s of SIGTERM", (int)w->pid);
  }
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);  // includes LeakSanitizer's verdict
}

int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr*)&sa, sizeof(sa)), 0);
  // A reply that never comes fails the test in 60 s instead of hanging it.
  struct timeval tv = {60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

int dial_unix(const char* path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {0};
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  assert_int_equal(connect(fd, (struct sockaddr*)&sa, sizeof(sa)), 0);
  struct timeval tv = {60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void write_all(int fd, const void* p, size_t n) {
  const uint8_t* b = p;
  while (n) {
    ssize_t r = write(fd, b, n);
    assert_true(r > 0);
    b += r;
    n -= (size_t)r;
  }
}

static bool read_all(int fd, void* p, size_t n) {
  uint8_t* b = p;
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= (size_t)r;
  }
  return true;
}

void send_frame(int fd, uint16_t type, uint64_t rid, const ProtobufCMessage* m,
                const void* bulk, uint64_t bulk_len) {
  size_t plen = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t* buf = malloc(CW_FRAME_HEADER_SIZE + plen);
  cw_frame_header_t h = {CW_FRAME_MAGIC, 1, type, 0, (uint32_t)plen, rid, bulk_len};
  cw_frame_header_encode(&h, buf);
  if (plen) protobuf_c_message_pack(m, buf + CW_FRAME_HEADER_SIZE);
  write_all(fd, buf, CW_FRAME_HEADER_SIZE + plen);
  if (bulk_len) write_all(fd, bulk, bulk_len);
  free(buf);
}

// Reads one frame; false on EOF.
bool recv_frame(int fd, reply_t* r) {
  memset(r, 0, sizeof(*r));
  uint8_t hb[CW_FRAME_HEADER_SIZE];
  if (!read_all(fd, hb, sizeof(hb))) return false;
  cw_frame_limits_t lim = {1u << 30, 1ull << 40};
  cw_status_t st = cw_frame_header_decode(hb, sizeof(hb), &lim, &r->h);
  assert_null(st);
  uint8_t* p = malloc(r->h.payload_len + 1);
  assert_true(read_all(fd, p, r->h.payload_len));
  assert_null(cw_frame_decode_payload(&r->h, p, &r->msg));
  free(p);
  if (r->h.bulk_len) {
    r->bulk = malloc(r->h.bulk_len);
    assert_true(read_all(fd, r->bulk, r->h.bulk_len));
  }
  return true;
}

void reply_free(reply_t* r) {
  if (r->msg) protobuf_c_message_free_unpacked(r->msg, NULL);
  free(r->bulk);
}

static uint64_t g_rid = 100;

// One request, one reply; returns the error code (0 OK).
uint32_t call(int fd, uint16_t type, const ProtobufCMessage* m, const void* bulk,
              uint64_t bulk_len, reply_t* out) {
  uint64_t rid = ++g_rid;
  send_frame(fd, type, rid, m, bulk, bulk_len);
  reply_t r;
  assert_true(recv_frame(fd, &r));
  assert_int_equal(r.h.request_id, rid);
  assert_int_equal(r.h.type, type);
  uint32_t code = 0;
  if (r.h.flags & CW_FRAME_ERROR) {
    const Causeway__V1__ErrorReply* e = (const Causeway__V1__ErrorReply*)r.msg;
    code = e->code;
    printf("  %s -> error %u: %s\n", cw_msg_type_name(type), e->code, e->message);
  }
  if (out) *out = r;
  else reply_free(&r);
  return code;
}

uint64_t hello(int fd, uint64_t session, int role, const char* token) {
  Causeway__V1__HelloRequest h = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  h.min_version = 1;
  h.max_version = 1;
  h.role = role;
  h.session_id = session;
  h.peer_name = "smoke";
  if (token) {
    h.token.data = (uint8_t*)token;
    h.token.len = strlen(token);
  }
  reply_t r;
  uint32_t code = call(fd, CW_MSG_HELLO, &h.base, NULL, 0, &r);
  uint64_t sid = code ? 0 : ((Causeway__V1__HelloReply*)r.msg)->session_id;
  reply_free(&r);
  return sid;
}

// The body both programs share.
#define CW__SCALE_BODY                                                                        \
  "    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>\n"                         \
  "    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n"  \
  "    %1 = stablehlo.multiply %arg0, %0 : tensor<2x3xf32>\n"                                 \
  "    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"                       \
  "    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n" \
  "    %3 = stablehlo.add %1, %2 : tensor<2x3xf32>\n"                                         \
  "    return %3 : tensor<2x3xf32>\n"                                                         \
  "  }\n"                                                                                     \
  "}\n"

const char kScaleProgram[] =
    "module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {\n" CW__SCALE_BODY;

const char kAliasedProgram[] =
    "module @jit_g attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}) -> "
    "(tensor<2x3xf32>) {\n" CW__SCALE_BODY;

int64_t g_dims[2] = {2, 3};

int start_client(worker_t* w, uint64_t* out_session) {
  start_worker(w, NULL);
  int fd = dial(w->port);
  uint64_t sid = hello(fd, 0, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL);
  assert_true(sid != 0);
  if (out_session) *out_session = sid;
  return fd;
}

void upload_request_init(Causeway__V1__UploadRequest* u, uint64_t id) {
  causeway__v1__upload_request__init(u);
  u->buffer_id = id;
  u->dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  u->dims = g_dims;
  u->n_dims = 2;
}

uint32_t upload(int fd, uint64_t id, const float* data, const int64_t* strides, size_t bytes,
                int device) {
  Causeway__V1__UploadRequest u;
  upload_request_init(&u, id);
  u.device = device;
  if (strides) {
    u.byte_strides = (int64_t*)strides;
    u.n_byte_strides = 2;
  }
  return call(fd, CW_MSG_UPLOAD, &u.base, data, bytes, NULL);
}

uint32_t upload_vector(int fd, uint64_t id, const float* data, int64_t n) {
  Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  u.buffer_id = id;
  u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  u.dims = &n;
  u.n_dims = 1;
  return call(fd, CW_MSG_UPLOAD, &u.base, data, (uint64_t)n * sizeof(float), NULL);
}

void launch1_init(launch1_t* l, uint64_t exe, uint64_t in, uint64_t out, bool donate) {
  cw_test_launch_build(l, exe, &in, 1, out, 0);
  if (donate) {
    l->req.donate = &l->donated;  // argument 0
    l->req.n_donate = 1;
  }
}

void expect_download(int fd, uint64_t id, const float* want) {
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = id;
  reply_t r;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &d.base, NULL, 0, &r), 0);
  assert_int_equal(r.h.bulk_len, 24);
  assert_memory_equal(r.bulk, want, 24);
  reply_free(&r);
}

// ---- Through the client library -------------------------------------------------

cw_test_worker_t g_worker;

int suite_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return -1;
  cw_test_worker_options_t o = {.devices = 2, .name = "cluster-test"};
  return cw_test_worker_start(&o, &g_worker);
}

int suite_teardown(void** state) {
  (void)state;
  // Exit status 0 after SIGTERM (under ASan: no leaks, held requests freed).
  int rc = cw_test_worker_stop(&g_worker, 30000);
  if (rc != 0) fprintf(stderr, "worker exit status %d\n", rc);
  return rc == 0 ? 0 : -1;
}

cw_status_t connect_as(int role, uint64_t session, cw_client_t** out) {
  cw_client_options_t o = {.session_id = session, .peer_name = "cluster-test", .role = role};
  return cw_client_connect(g_worker.address, &o, out);
}

void assert_code(cw_status_t st, cw_status_code_t code) {
  if (cw_status_code(st) != code) {
    fprintf(stderr, "want %s, got %s: %s\n", cw_status_code_name(code),
            cw_status_code_name(cw_status_code(st)), st ? cw_status_message(st) : "OK");
  }
  assert_int_equal(cw_status_code(st), code);
  cw_status_free(st);
}

size_t sched_record(uint64_t* stamps, uint64_t* sessions, size_t cap) {
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(g_worker.address, NULL, &c));
  Causeway__V1__Stats* st = NULL;
  ASSERT_OK(cw_client_stats(c, &st));
  size_t n = st->n_sched_stamps < cap ? st->n_sched_stamps : cap;
  for (size_t i = 0; i < n; ++i) {
    stamps[i] = st->sched_stamps[i]->stamp;
    sessions[i] = st->sched_stamps[i]->session_id;
  }
  protobuf_c_message_free_unpacked(&st->base, NULL);
  cw_client_release(c);
  return n;
}

int raw_link(uint64_t id) {
  int fd = dial(atoi(strrchr(g_worker.address, ':') + 1));
  assert_true(hello(fd, id, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, NULL) == id);
  return fd;
}

bool reply_within(int fd, int ms, reply_t* r) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, ms) != 1) return false;
  assert_true(recv_frame(fd, r));
  return true;
}

void expect_reply(int fd, uint64_t rid, uint32_t code, const char* what) {
  reply_t r;
  if (!reply_within(fd, 30000, &r)) fail_msg("no reply: %s", what);
  uint32_t got = (r.h.flags & CW_FRAME_ERROR)
                     ? ((const Causeway__V1__ErrorReply*)r.msg)->code : 0;
  if (r.h.request_id != rid || got != code) {
    fail_msg("%s: reply to %llu with code %u (want %llu, %u)", what,
             (unsigned long long)r.h.request_id, got, (unsigned long long)rid, code);
  }
  reply_free(&r);
}

void raw_go(int fd, uint64_t rid, uint64_t stamp, bool go) {
  Causeway__V1__LaunchGoRequest r = CAUSEWAY__V1__LAUNCH_GO_REQUEST__INIT;
  r.sched_stamp = stamp;
  r.go = go;
  r.reason = (char*)(go ? "" : "a member refused");
  send_frame(fd, CW_MSG_LAUNCH_GO, rid, &r.base, NULL, 0);
}
