// End-to-end smoke test of causeway-worker over raw frames (no client
// library): starts real worker processes and drives every request type.
#include <arpa/inet.h>
#include <errno.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_frame.h"

typedef struct {
  pid_t pid;
  int port;
  char addr[64];
} worker_t;

static void start_worker(worker_t* w, const char* token) {
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
    execl(exe, exe, "--plugin", plugin, "--devices", "2", "--listen", "127.0.0.1:0", (char*)NULL);
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
  w->port = atoi(strrchr(w->addr, ':') + 1);
}

static void stop_worker(worker_t* w) {
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

static int dial(int port) {
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

static void write_all(int fd, const void* p, size_t n) {
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

static void send_frame(int fd, uint16_t type, uint64_t rid, const ProtobufCMessage* m,
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

typedef struct {
  cw_frame_header_t h;
  ProtobufCMessage* msg;
  uint8_t* bulk;
} reply_t;

// Reads one frame; false on EOF.
static bool recv_frame(int fd, reply_t* r) {
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

static void reply_free(reply_t* r) {
  if (r->msg) protobuf_c_message_free_unpacked(r->msg, NULL);
  free(r->bulk);
}

static uint64_t g_rid = 100;

// One request, one reply; returns the error code (0 OK).
static uint32_t call(int fd, uint16_t type, const ProtobufCMessage* m, const void* bulk,
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

static uint64_t hello(int fd, uint64_t session, int role, const char* token) {
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

static const char kProgram[] =
    "module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {\n"
    "    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>\n"
    "    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n"
    "    %1 = stablehlo.multiply %arg0, %0 : tensor<2x3xf32>\n"
    "    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"
    "    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n"
    "    %3 = stablehlo.add %1, %2 : tensor<2x3xf32>\n"
    "    return %3 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

static int64_t g_dims[2] = {2, 3};

static uint32_t upload(int fd, uint64_t id, const float* data, const int64_t* strides,
                       size_t bytes, int device) {
  Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  u.buffer_id = id;
  u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  u.dims = g_dims;
  u.n_dims = 2;
  u.device = device;
  if (strides) {
    u.byte_strides = (int64_t*)strides;
    u.n_byte_strides = 2;
  }
  return call(fd, CW_MSG_UPLOAD, &u.base, data, bytes, NULL);
}

static void expect_download(int fd, uint64_t id, const float* want) {
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = id;
  reply_t r;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &d.base, NULL, 0, &r), 0);
  assert_int_equal(r.h.bulk_len, 24);
  assert_memory_equal(r.bulk, want, 24);
  reply_free(&r);
}

static void send_launch(int fd, uint64_t rid, uint64_t exe, uint64_t in, uint64_t out) {
  Causeway__V1__LaunchRequest l = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  Causeway__V1__IdList a = CAUSEWAY__V1__ID_LIST__INIT, o = CAUSEWAY__V1__ID_LIST__INIT;
  Causeway__V1__IdList* ap = &a;
  Causeway__V1__IdList* op = &o;
  a.ids = &in;
  a.n_ids = 1;
  o.ids = &out;
  o.n_ids = 1;
  l.exe_id = exe;
  l.args = &ap;
  l.n_args = 1;
  l.outputs = &op;
  l.n_outputs = 1;
  send_frame(fd, CW_MSG_LAUNCH, rid, &l.base, NULL, 0);
}

static void test_single_worker(void** state) {
  (void)state;
  worker_t w;
  start_worker(&w, NULL);
  int fd = dial(w.port);
  uint64_t sid = hello(fd, 0, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL);
  assert_true(sid != 0);

  Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
  ping.data.data = (uint8_t*)"hi";
  ping.data.len = 2;
  assert_int_equal(call(fd, CW_MSG_PING, &ping.base, NULL, 0, NULL), 0);

  Causeway__V1__InventoryRequest ir = CAUSEWAY__V1__INVENTORY_REQUEST__INIT;
  reply_t r;
  assert_int_equal(call(fd, CW_MSG_INVENTORY, &ir.base, NULL, 0, &r), 0);
  Causeway__V1__Inventory* inv = (Causeway__V1__Inventory*)r.msg;
  assert_int_equal(inv->n_devices, 2);
  printf("  inventory: %s %s PJRT %u.%u, %zu plugin attributes, device0 kind %s, %zu memories\n",
         inv->platform_name, inv->platform_version, inv->pjrt_major, inv->pjrt_minor,
         inv->n_plugin_attributes, inv->devices[0]->kind, inv->devices[0]->n_memories);
  reply_free(&r);

  float x[6] = {0, 1, 2, 3, 4, 5}, y[6], z[6];
  for (int i = 0; i < 6; ++i) y[i] = x[i] * 2 + 1;
  for (int i = 0; i < 6; ++i) z[i] = y[i] * 2 + 1;
  assert_int_equal(upload(fd, 1, x, NULL, 24, 0), 0);
  assert_int_equal(upload(fd, 1, x, NULL, 24, 0), CW_ALREADY_EXISTS);
  expect_download(fd, 1, x);

  // Strided (column-major) upload of the same logical array.
  float xt[6] = {0, 3, 1, 4, 2, 5};
  int64_t strides[2] = {4, 8};
  assert_int_equal(upload(fd, 9, xt, strides, 24, 0), 0);
  expect_download(fd, 9, x);

  Causeway__V1__CompileRequest c = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  c.exe_id = 2;
  c.format = "mlir";
  c.code.data = (uint8_t*)kProgram;
  c.code.len = strlen(kProgram);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, &r), 0);
  assert_int_equal(((Causeway__V1__CompileReply*)r.msg)->num_outputs, 1);
  assert_int_equal(((Causeway__V1__CompileReply*)r.msg)->num_devices, 1);
  reply_free(&r);

  // Two chained launches sent back to back: the second uses the first's
  // output before it exists.
  send_launch(fd, 7001, 2, 1, 3);
  send_launch(fd, 7002, 2, 3, 4);
  for (int i = 0; i < 2; ++i) {
    assert_true(recv_frame(fd, &r));
    assert_int_equal(r.h.flags & CW_FRAME_ERROR, 0);
    reply_free(&r);
  }
  expect_download(fd, 3, y);
  expect_download(fd, 4, z);

  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 4;
  assert_int_equal(call(fd, CW_MSG_AWAIT, &aw.base, NULL, 0, &r), 0);
  assert_int_equal(((Causeway__V1__ArrayInfo*)r.msg)->size, 24);
  reply_free(&r);

  Causeway__V1__CopyRequest cp = CAUSEWAY__V1__COPY_REQUEST__INIT;
  cp.src_id = 4;
  cp.dst_id = 5;
  cp.dst_device = 1;
  assert_int_equal(call(fd, CW_MSG_COPY, &cp.base, NULL, 0, NULL), 0);
  expect_download(fd, 5, z);

  // Two replicas: one launch runs on both devices.
  static const uint8_t two_replicas[] = {0x1a, 0x04, 0x20, 0x02, 0x28, 0x01};
  c.exe_id = 20;
  c.compile_options.data = (uint8_t*)two_replicas;
  c.compile_options.len = sizeof(two_replicas);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, &r), 0);
  assert_int_equal(((Causeway__V1__CompileReply*)r.msg)->num_devices, 2);
  reply_free(&r);
  c.compile_options.len = 0;
  {
    Causeway__V1__LaunchRequest l = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
    uint64_t in0 = 1, in1 = 5, out0 = 21, out1 = 22;
    Causeway__V1__IdList a0 = CAUSEWAY__V1__ID_LIST__INIT, a1 = CAUSEWAY__V1__ID_LIST__INIT;
    Causeway__V1__IdList o0 = CAUSEWAY__V1__ID_LIST__INIT, o1 = CAUSEWAY__V1__ID_LIST__INIT;
    a0.ids = &in0; a0.n_ids = 1; a1.ids = &in1; a1.n_ids = 1;
    o0.ids = &out0; o0.n_ids = 1; o1.ids = &out1; o1.n_ids = 1;
    Causeway__V1__IdList* args[2] = {&a0, &a1};
    Causeway__V1__IdList* outs[2] = {&o0, &o1};
    l.exe_id = 20;
    l.args = args;
    l.n_args = 2;
    l.outputs = outs;
    l.n_outputs = 2;
    assert_int_equal(call(fd, CW_MSG_LAUNCH, &l.base, NULL, 0, NULL), 0);
    float zz[6];
    for (int i = 0; i < 6; ++i) zz[i] = z[i] * 2 + 1;
    expect_download(fd, 21, y);
    expect_download(fd, 22, zz);
  }

  // Serialize and load under a new id; run it.
  Causeway__V1__SerializeRequest sr = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
  sr.exe_id = 2;
  assert_int_equal(call(fd, CW_MSG_SERIALIZE, &sr.base, NULL, 0, &r), 0);
  assert_true(r.h.bulk_len > 0);
  printf("  serialized executable: %llu bytes\n", (unsigned long long)r.h.bulk_len);
  Causeway__V1__LoadRequest lr = CAUSEWAY__V1__LOAD_REQUEST__INIT;
  lr.exe_id = 6;
  assert_int_equal(call(fd, CW_MSG_LOAD, &lr.base, r.bulk, r.h.bulk_len, NULL), 0);
  reply_free(&r);
  send_launch(fd, 7003, 6, 1, 7);
  assert_true(recv_frame(fd, &r));
  assert_int_equal(r.h.flags & CW_FRAME_ERROR, 0);
  reply_free(&r);
  expect_download(fd, 7, y);

  // Compile error: XLA's message; the id is in error and poisons a launch.
  c.exe_id = 10;
  c.code.data = (uint8_t*)"this is not mlir";
  c.code.len = 16;
  assert_int_not_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);
  send_launch(fd, 7004, 10, 1, 11);
  assert_true(recv_frame(fd, &r));
  assert_true(r.h.flags & CW_FRAME_ERROR);
  reply_free(&r);
  Causeway__V1__DownloadRequest dr = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dr.buffer_id = 11;
  assert_int_not_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), 0);
  dr.buffer_id = 12345;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  uint64_t del[3] = {3, 4, 999};
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.ids = del;
  d.n_ids = 3;
  assert_int_equal(call(fd, CW_MSG_DELETE, &d.base, NULL, 0, NULL), CW_NOT_FOUND);
  dr.buffer_id = 3;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // Four launches ran (7001, 7002, the two-replica one, 7003; 7004 was
  // refused). Wait, bounded, for the counter to say so rather than assuming
  // it is updated before the last reply was read.
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  Causeway__V1__Stats* st = NULL;
  for (int tries = 0;; ++tries) {
    assert_int_equal(call(fd, CW_MSG_STATS, &sq.base, NULL, 0, &r), 0);
    st = (Causeway__V1__Stats*)r.msg;
    if (st->launches >= 4 || tries >= 200) break;
    reply_free(&r);
    usleep(10000);
  }
  printf("  stats: buffers %llu bytes %llu exes %llu launches %llu uploads %llu downloads %llu "
         "errors %llu sessions %llu conns %llu\n",
         (unsigned long long)st->buffers, (unsigned long long)st->buffer_bytes,
         (unsigned long long)st->executables, (unsigned long long)st->launches,
         (unsigned long long)st->uploads, (unsigned long long)st->downloads,
         (unsigned long long)st->errors, (unsigned long long)st->sessions,
         (unsigned long long)st->connections);
  assert_int_equal(st->launches, 4);
  assert_int_equal(st->sessions, 1);
  reply_free(&r);

  // A second connection joins the session and sees its objects.
  int fd2 = dial(w.port);
  assert_int_equal(hello(fd2, sid, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL), sid);
  expect_download(fd2, 1, x);
  close(fd2);
  close(fd);
  stop_worker(&w);
}

// y = 2x + 1, with the argument aliased to the result (what JAX emits for
// donate_argnums=0).
static const char kAliasedProgram[] =
    "module @jit_g attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}) -> "
    "(tensor<2x3xf32>) {\n"
    "    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>\n"
    "    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n"
    "    %1 = stablehlo.multiply %arg0, %0 : tensor<2x3xf32>\n"
    "    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"
    "    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n"
    "    %3 = stablehlo.add %1, %2 : tensor<2x3xf32>\n"
    "    return %3 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

static uint32_t launch_donating(int fd, uint64_t exe, uint64_t in, uint64_t out, bool donate) {
  Causeway__V1__LaunchRequest l = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  Causeway__V1__IdList a = CAUSEWAY__V1__ID_LIST__INIT, o = CAUSEWAY__V1__ID_LIST__INIT;
  Causeway__V1__IdList* ap = &a;
  Causeway__V1__IdList* op = &o;
  uint32_t which = 0;
  a.ids = &in;
  a.n_ids = 1;
  o.ids = &out;
  o.n_ids = 1;
  l.exe_id = exe;
  l.args = &ap;
  l.n_args = 1;
  l.outputs = &op;
  l.n_outputs = 1;
  if (donate) {
    l.donate = &which;
    l.n_donate = 1;
  }
  return call(fd, CW_MSG_LAUNCH, &l.base, NULL, 0, NULL);
}

// donate_argnums: EXE_INFO names the aliased parameter; a launch that
// donates it deletes the input id (later use: NOT_FOUND) and computes the
// same result; without donation the input stays.
static void test_donation(void** state) {
  (void)state;
  worker_t w;
  start_worker(&w, NULL);
  int fd = dial(w.port);
  assert_true(hello(fd, 0, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL) != 0);
  float x[6] = {0, 1, 2, 3, 4, 5}, y[6], z[6];
  for (int i = 0; i < 6; ++i) y[i] = x[i] * 2 + 1;
  for (int i = 0; i < 6; ++i) z[i] = y[i] * 2 + 1;

  Causeway__V1__CompileRequest c = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  c.exe_id = 2;
  c.format = "mlir";
  c.code.data = (uint8_t*)kAliasedProgram;
  c.code.len = strlen(kAliasedProgram);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);
  c.exe_id = 3;  // not aliased
  c.code.data = (uint8_t*)kProgram;
  c.code.len = strlen(kProgram);
  assert_int_equal(call(fd, CW_MSG_COMPILE, &c.base, NULL, 0, NULL), 0);

  Causeway__V1__ExeInfoRequest ei = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  reply_t r;
  ei.exe_id = 2;
  assert_int_equal(call(fd, CW_MSG_EXE_INFO, &ei.base, NULL, 0, &r), 0);
  const Causeway__V1__ExecutableInfo* info = (const Causeway__V1__ExecutableInfo*)r.msg;
  assert_int_equal(info->n_donated_params, 1);
  assert_int_equal(info->donated_params[0], 0);
  reply_free(&r);
  ei.exe_id = 3;
  assert_int_equal(call(fd, CW_MSG_EXE_INFO, &ei.base, NULL, 0, &r), 0);
  assert_int_equal(((const Causeway__V1__ExecutableInfo*)r.msg)->n_donated_params, 0);
  reply_free(&r);

  // Not donated: the input stays, the output is correct.
  assert_int_equal(upload(fd, 10, x, NULL, 24, 0), 0);
  assert_int_equal(launch_donating(fd, 2, 10, 11, false), 0);
  expect_download(fd, 10, x);
  expect_download(fd, 11, y);

  // Donated: PJRT takes the buffer; its id is gone, the output correct; a
  // chained donating launch on the output works too.
  assert_int_equal(launch_donating(fd, 2, 10, 12, true), 0);
  Causeway__V1__DownloadRequest dr = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dr.buffer_id = 10;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);
  assert_int_equal(launch_donating(fd, 2, 10, 13, false), CW_NOT_FOUND);
  expect_download(fd, 12, y);
  assert_int_equal(launch_donating(fd, 2, 12, 14, true), 0);
  expect_download(fd, 14, z);
  dr.buffer_id = 12;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // Donating to a program that does not alias the parameter still deletes
  // the id (the client decides); XLA just cannot reuse the memory.
  assert_int_equal(upload(fd, 20, x, NULL, 24, 0), 0);
  assert_int_equal(launch_donating(fd, 3, 20, 21, true), 0);
  expect_download(fd, 21, y);
  dr.buffer_id = 20;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // A failed launch (unknown executable) still deletes the donated input.
  assert_int_equal(upload(fd, 30, x, NULL, 24, 0), 0);
  assert_int_equal(launch_donating(fd, 999, 30, 31, true), CW_NOT_FOUND);
  dr.buffer_id = 30;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &dr.base, NULL, 0, NULL), CW_NOT_FOUND);

  // Only the outputs (and 13's error entry) remain: no donated buffer leaks.
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_int_equal(call(fd, CW_MSG_STATS, &sq.base, NULL, 0, &r), 0);
  printf("  after donation: %llu buffers, %llu bytes\n",
         (unsigned long long)((Causeway__V1__Stats*)r.msg)->buffers,
         (unsigned long long)((Causeway__V1__Stats*)r.msg)->buffer_bytes);
  reply_free(&r);
  close(fd);
  stop_worker(&w);
}

static void test_violations(void** state) {
  (void)state;
  worker_t w;
  start_worker(&w, "sesame");
  reply_t r;
  // Request before HELLO.
  int fd = dial(w.port);
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  assert_int_equal(call(fd, CW_MSG_STATS, &sq.base, NULL, 0, NULL), CW_FAILED_PRECONDITION);
  assert_false(recv_frame(fd, &r));  // closed
  close(fd);
  // Wrong token.
  fd = dial(w.port);
  assert_int_equal(hello(fd, 0, 1, "wrong"), 0);
  assert_false(recv_frame(fd, &r));
  close(fd);
  // Bad magic: error reply with request id 0, then close.
  fd = dial(w.port);
  assert_true(hello(fd, 0, 1, "sesame") != 0);
  uint8_t junk[32];
  memset(junk, 0x41, sizeof(junk));
  write_all(fd, junk, sizeof(junk));
  assert_true(recv_frame(fd, &r));
  assert_true(r.h.flags & CW_FRAME_ERROR);
  reply_free(&r);
  assert_false(recv_frame(fd, &r));
  close(fd);
  // Bulk length that differs from the array; and a peer that leaves mid-bulk.
  fd = dial(w.port);
  assert_true(hello(fd, 0, 1, "sesame") != 0);
  float x[6] = {0};
  Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  u.buffer_id = 1;
  u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  u.dims = g_dims;
  u.n_dims = 2;
  assert_int_equal(call(fd, CW_MSG_UPLOAD, &u.base, x, 20, NULL), CW_INVALID_ARGUMENT);
  close(fd);
  fd = dial(w.port);
  assert_true(hello(fd, 0, 1, "sesame") != 0);
  size_t plen = protobuf_c_message_get_packed_size(&u.base);
  uint8_t buf[128];
  cw_frame_header_t h = {CW_FRAME_MAGIC, 1, CW_MSG_UPLOAD, 0, (uint32_t)plen, 5, 24};
  cw_frame_header_encode(&h, buf);
  protobuf_c_message_pack(&u.base, buf + 32);
  write_all(fd, buf, 32 + plen + 10);  // 10 of 24 bulk bytes
  close(fd);
  usleep(100000);
  stop_worker(&w);
}

static void test_send_put(void** state) {
  (void)state;
  worker_t a, b;
  start_worker(&a, NULL);
  start_worker(&b, NULL);
  int fa = dial(a.port), fb = dial(b.port);
  assert_true(hello(fa, 0, 1, NULL) != 0);
  uint64_t sb = hello(fb, 0, 1, NULL);
  Causeway__V1__ExpectRequest e = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  e.buffer_id = 50;
  assert_int_equal(call(fb, CW_MSG_EXPECT, &e.base, NULL, 0, NULL), 0);
  float x[6] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(upload(fa, 1, x, NULL, 24, 0), 0);
  Causeway__V1__SendRequest s = CAUSEWAY__V1__SEND_REQUEST__INIT;
  s.src_id = 1;
  s.peer_address = b.addr;
  s.dst_id = 50;
  s.dst_device = 1;
  s.dst_session = sb;
  assert_int_equal(call(fa, CW_MSG_SEND, &s.base, NULL, 0, NULL), 0);
  expect_download(fb, 50, x);
  // Into a session that does not exist, and to a dead address.
  s.dst_session = sb + 1;
  s.dst_id = 51;
  assert_int_equal(call(fa, CW_MSG_SEND, &s.base, NULL, 0, NULL), CW_NOT_FOUND);
  s.peer_address = "127.0.0.1:1";
  assert_int_equal(call(fa, CW_MSG_SEND, &s.base, NULL, 0, NULL), CW_UNAVAILABLE);
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  reply_t r;
  assert_int_equal(call(fa, CW_MSG_STATS, &sq.base, NULL, 0, &r), 0);
  Causeway__V1__Stats* st = (Causeway__V1__Stats*)r.msg;
  for (size_t i = 0; i < st->n_peers; ++i) {
    printf("  peer %s: in %llu out %llu\n", st->peers[i]->peer,
           (unsigned long long)st->peers[i]->bytes_in, (unsigned long long)st->peers[i]->bytes_out);
  }
  reply_free(&r);
  close(fa);
  close(fb);
  stop_worker(&a);
  stop_worker(&b);
}

// A large array through UPLOAD and DOWNLOAD (bulk read straight into staging).
static void test_big_transfer(void** state) {
  (void)state;
  worker_t w;
  start_worker(&w, NULL);
  int fd = dial(w.port);
  assert_true(hello(fd, 0, 1, NULL) != 0);
  int64_t n = 64 << 20;  // 64 Mi floats = 256 MiB
  float* x = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
  Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  u.buffer_id = 1;
  u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  u.dims = &n;
  u.n_dims = 1;
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(call(fd, CW_MSG_UPLOAD, &u.base, x, (uint64_t)n * 4, NULL), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 1;
  reply_t r;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &d.base, NULL, 0, &r), 0);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  assert_int_equal(r.h.bulk_len, (uint64_t)n * 4);
  assert_memory_equal(r.bulk, x, (size_t)n * 4);
  double up = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  double down = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) * 1e-9;
  printf("  256 MiB: upload %.3f s (%.2f GB/s), download %.3f s (%.2f GB/s)\n", up,
         0.268435456 / up, down, 0.268435456 / down);
  reply_free(&r);
  free(x);
  close(fd);
  stop_worker(&w);
}

// Thousands of requests written at once: the worker gathers its small
// replies into few writes (cw__send) and writes bulk replies between them;
// every reply arrives once, intact, and the replies it sends at once (PING,
// a refused UPLOAD) keep their requests' order.
static void test_pipelined_replies(void** state) {
  (void)state;
  worker_t w;
  start_worker(&w, NULL);
  int fd = dial(w.port);
  assert_true(hello(fd, 0, 1, NULL) != 0);
  float x[6] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(upload(fd, 1, x, NULL, 24, 0), 0);
  enum { kN = 3000, kFirst = 1000 };
  size_t cap = (size_t)kN * 128, len = 0;
  uint8_t* buf = malloc(cap);
  for (uint64_t rid = kFirst; rid < kFirst + kN; ++rid) {
    char text[32];
    ProtobufCMessage* m;
    uint16_t type;
    const void* bulk = NULL;
    uint64_t bulk_len = 0;
    Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
    Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
    if (rid % 10 == 3) {
      type = CW_MSG_DOWNLOAD;
      d.buffer_id = 1;
      m = &d.base;
    } else if (rid % 37 == 0) {
      type = CW_MSG_UPLOAD;  // id 1 exists: a small error reply
      u.buffer_id = 1;
      u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
      u.dims = g_dims;
      u.n_dims = 2;
      m = &u.base;
      bulk = x;
      bulk_len = 24;
    } else {
      type = CW_MSG_PING;
      snprintf(text, sizeof(text), "p%llu", (unsigned long long)rid);
      ping.data.data = (uint8_t*)text;
      ping.data.len = strlen(text);
      m = &ping.base;
    }
    size_t plen = protobuf_c_message_get_packed_size(m);
    cw_frame_header_t h = {CW_FRAME_MAGIC, 1, type, 0, (uint32_t)plen, rid, bulk_len};
    cw_frame_header_encode(&h, buf + len);
    protobuf_c_message_pack(m, buf + len + CW_FRAME_HEADER_SIZE);
    len += CW_FRAME_HEADER_SIZE + plen;
    if (bulk_len) memcpy(buf + len, bulk, bulk_len);
    len += bulk_len;
  }
  write_all(fd, buf, len);
  free(buf);
  bool* seen = calloc(kN, sizeof(bool));
  uint64_t last_immediate = 0;
  for (int i = 0; i < kN; ++i) {
    reply_t r;
    assert_true(recv_frame(fd, &r));
    uint64_t rid = r.h.request_id;
    assert_true(rid >= kFirst && rid < kFirst + kN);
    assert_false(seen[rid - kFirst]);
    seen[rid - kFirst] = true;
    assert_true(r.h.flags & CW_FRAME_REPLY);
    if (r.h.type == CW_MSG_DOWNLOAD) {
      assert_int_equal(rid % 10, 3);
      assert_false(r.h.flags & CW_FRAME_ERROR);
      assert_int_equal(r.h.bulk_len, 24);
      assert_memory_equal(r.bulk, x, 24);
    } else {
      assert_true(rid > last_immediate);
      last_immediate = rid;
      if (r.h.type == CW_MSG_UPLOAD) {
        assert_true(r.h.flags & CW_FRAME_ERROR);
        assert_int_equal(((Causeway__V1__ErrorReply*)r.msg)->code, CW_ALREADY_EXISTS);
      } else {
        assert_int_equal(r.h.type, CW_MSG_PING);
        char text[32];
        snprintf(text, sizeof(text), "p%llu", (unsigned long long)rid);
        const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)r.msg;
        assert_int_equal(p->data.len, strlen(text));
        assert_memory_equal(p->data.data, text, strlen(text));
      }
    }
    reply_free(&r);
  }
  free(seen);
  close(fd);
  stop_worker(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_worker),
      cmocka_unit_test(test_donation),
      cmocka_unit_test(test_violations),
      cmocka_unit_test(test_send_put),
      cmocka_unit_test(test_big_transfer),
      cmocka_unit_test(test_pipelined_replies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
