// cw_bench: latency and bandwidth of causeway's wire paths, plaintext and
// with TLS, each beside a raw loopback TCP baseline measured in the same run
// on the same machine.
//
// It starts two causeway-worker processes on 127.0.0.1 (port 0) and two more
// with TLS on (a CA and certificates made for the run with cw_tls_pki_*),
// connects a client to each (cw_client.h), and measures, on both transports:
//   - PING round trips over the client library vs raw TCP ping-pong of the
//     same byte count (two threads, TCP_NODELAY);
//   - LAUNCH round trips of a one-op program (f32[4] + itself) on its input,
//     until the launch's reply;
//   - UPLOAD (client -> worker, until the Ack), DOWNLOAD (worker -> caller
//     buffer) and worker-to-worker (EXPECT on B, SEND A -> B, until the SEND's
//     Ack) for float32 1-D arrays, vs raw TCP bulk of the same size (a sender
//     writes N bytes, a receiver reads them into a preallocated buffer and
//     answers with a 1-byte ack);
//   - same host: a fifth worker on a Unix socket, UPLOAD and DOWNLOAD through
//     the socket and by peer_address (the worker copies this process's memory
//     itself, process_vm_readv/writev), vs memcpy between two warm buffers.
// Every path's data is read back and compared with what was sent; a transfer
// error or a mismatch makes the run fail (exit 1). Nothing is asserted about
// speed. --quick: tiny sizes and few repetitions (the CTest `bench_quick`).
//
// Usage: cw_bench [--quick] [--no-tls] [--null] [--plugin PATH] [--worker PATH]
//                 [--pings N] [--max-mib N] [--sizes LIST] [--reps-scale X] [--only LIST]
//   --plugin defaults to $CAUSEWAY_PJRT_PLUGIN; --worker to causeway-worker next to
//   this executable. --only: comma list of ping,launch,upload,download,w2w,samehost.
//   --sizes: comma list of byte counts with k/m suffixes (multiples of 4).
//   --no-tls: plaintext only. --null: --plugin is the null plugin (tests/nullplugin):
//   launches run a "cwnull" program of the same shapes, so the figures are
//   causeway's own cost with no XLA under it.

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cw_bench_raw.h"
#include "cw_bench_stats.h"
#include "cw_client.h"
#include "cw_tls.h"

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)

// ---------------------------------------------------------------------------
// Small utilities

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

// Sorts `v` in place; q in [0,1], nearest-rank.
static double quantile(double* v, size_t n, double q) {
  cw_bench_sort(v, n);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  if (i >= n) i = n - 1;
  return v[i];
}

static const char* human_size(size_t bytes, char* buf, size_t cap) {
  if (bytes >= MIB && bytes % MIB == 0) {
    snprintf(buf, cap, "%zu MiB", bytes / MIB);
  } else if (bytes >= KIB && bytes % KIB == 0) {
    snprintf(buf, cap, "%zu KiB", bytes / KIB);
  } else {
    snprintf(buf, cap, "%zu B", bytes);
  }
  return buf;
}

// ---------------------------------------------------------------------------
// Workers (child processes)

typedef struct worker_s {
  pid_t pid;
  char address[256];
  char log_path[256];
  int out_fd;          // the child's stdout; drained by a thread
  pthread_t drain;
  bool drain_started;
  _Atomic bool drain_stop;  // the drain thread polls it: a grandchild may
                            // hold the pipe open after the worker is gone
} worker_t;

static worker_t g_workers[5];
static int g_num_workers;
static bool g_keep_logs;

static void* drain_main(void* arg) {
  worker_t* w = arg;
  char buf[4096];
  while (!w->drain_stop) {
    struct pollfd pfd = {.fd = w->out_fd, .events = POLLIN};
    int r = poll(&pfd, 1, 100);
    if (r < 0 && errno != EINTR) break;
    if (r > 0 && read(w->out_fd, buf, sizeof buf) <= 0) break;
  }
  return NULL;
}

static void print_worker_log(const worker_t* w) {
  FILE* f = fopen(w->log_path, "r");
  if (!f) return;
  fprintf(stderr, "---- %s ----\n", w->log_path);
  char line[1024];
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

static void stop_workers(bool failed) {
  for (int i = 0; i < g_num_workers; ++i) {
    worker_t* w = &g_workers[i];
    if (w->pid <= 0) continue;
    kill(w->pid, SIGTERM);
    int status = 0;
    bool exited = false;
    for (int t = 0; t < 500; ++t) {  // 5 s
      pid_t r = waitpid(w->pid, &status, WNOHANG);
      if (r == w->pid) {
        exited = true;
        break;
      }
      usleep(10000);
    }
    if (!exited) {
      fprintf(stderr, "cw_bench: worker %d (pid %d) ignored SIGTERM; killing\n", i, (int)w->pid);
      kill(w->pid, SIGKILL);
      waitpid(w->pid, &status, 0);
      failed = true;
    } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      fprintf(stderr, "cw_bench: worker %d exited with status 0x%x after SIGTERM\n", i, status);
    }
    w->pid = 0;
    w->drain_stop = true;
    if (w->drain_started) pthread_join(w->drain, NULL);
    if (w->out_fd >= 0) close(w->out_fd);
    w->out_fd = -1;
  }
  for (int i = 0; i < g_num_workers; ++i) {
    if (failed) print_worker_log(&g_workers[i]);
    if (!g_keep_logs) unlink(g_workers[i].log_path);
  }
  g_num_workers = 0;
}

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cw_bench: FAILED: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  stop_workers(true);
  exit(1);
}

static void die_status(cw_status_t st, const char* what) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s: %s: %s", what, cw_status_code_name(cw_status_code(st)),
           cw_status_message(st));
  cw_status_free(st);
  die("%s", msg);
}

#define CHECK_OK(expr, what)                 \
  do {                                       \
    cw_status_t s__ = (expr);                \
    if (s__) die_status(s__, (what));        \
  } while (0)

// `tls_dir`: the worker speaks TLS with the certificates there (NULL: plaintext).
// `listen`: NULL for 127.0.0.1 port 0, else an address (a Unix socket path).
static void start_worker(int index, const char* worker_path, const char* plugin,
                         const char* tls_dir, const char* listen) {
  worker_t* w = &g_workers[index];
  memset(w, 0, sizeof *w);
  w->out_fd = -1;
  const char* tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  snprintf(w->log_path, sizeof w->log_path, "%s/cw_bench.%d.worker%c.log", tmp, (int)getpid(),
           'A' + index);
  int log_fd = open(w->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) die("open %s: %s", w->log_path, strerror(errno));
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(p[1], STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    if (tls_dir) {
      char f[3][512];
      snprintf(f[0], sizeof f[0], "%s/ca.pem", tls_dir);
      snprintf(f[1], sizeof f[1], "%s/worker.pem", tls_dir);
      snprintf(f[2], sizeof f[2], "%s/worker.key", tls_dir);
      setenv("CAUSEWAY_TLS", "1", 1);
      setenv("CAUSEWAY_TLS_CA", f[0], 1);
      setenv("CAUSEWAY_TLS_CERT", f[1], 1);
      setenv("CAUSEWAY_TLS_KEY", f[2], 1);
    } else {
      unsetenv("CAUSEWAY_TLS");
    }
    char name[8];
    snprintf(name, sizeof name, "%c", 'A' + index);
    execl(worker_path, worker_path, "--plugin", plugin, "--devices", "1", "--listen",
          listen ? listen : "127.0.0.1:0", (char*)NULL);
    dprintf(STDERR_FILENO, "exec %s: %s\n", worker_path, strerror(errno));
    _exit(127);
  }
  close(p[1]);
  close(log_fd);
  w->pid = pid;
  w->out_fd = p[0];
  g_num_workers = index + 1;

  // Read the first stdout line: "causeway-worker listening on <ADDR>".
  char line[512];
  size_t len = 0;
  double deadline = now_s() + 60.0;
  for (;;) {
    double left = deadline - now_s();
    if (left <= 0) die("worker %c did not print its listen line within 60 s", 'A' + index);
    struct pollfd pfd = {.fd = w->out_fd, .events = POLLIN};
    int r = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = read(w->out_fd, line + len, 1);
    if (n <= 0) die("worker %c exited before printing its listen line", 'A' + index);
    if (line[len] == '\n') break;
    if (++len >= sizeof line - 1) die("worker %c: listen line too long", 'A' + index);
  }
  line[len] = '\0';
  const char* prefix = "causeway-worker listening on ";
  if (strncmp(line, prefix, strlen(prefix)) != 0) {
    die("worker %c: unexpected first line: '%s'", 'A' + index, line);
  }
  snprintf(w->address, sizeof w->address, "%s", line + strlen(prefix));
  if (pthread_create(&w->drain, NULL, drain_main, w) != 0) die("pthread_create");
  w->drain_started = true;
}

// ---------------------------------------------------------------------------
// Completion helper for pipelined client calls

typedef struct sync_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  cw_status_t status;
} sync_t;

static void sync_init(sync_t* s) {
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->done = false;
  s->status = cw_ok_status();
}

static void sync_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  sync_t* s = user;
  pthread_mutex_lock(&s->mu);
  s->status = status;
  s->done = true;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static cw_status_t sync_wait(sync_t* s) {
  pthread_mutex_lock(&s->mu);
  while (!s->done) pthread_cond_wait(&s->cv, &s->mu);
  cw_status_t st = s->status;
  s->done = false;
  s->status = cw_ok_status();
  pthread_mutex_unlock(&s->mu);
  return st;
}

static void sync_deinit(sync_t* s) {
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
}

// Raw loopback TCP baseline (cw_bench_raw.h), dying on a failure.
static double raw_ping_once(cw_raw_t* raw) {
  double dt;
  if (!cw_raw_ping(raw, &dt)) die("raw ping failed: %s", raw->error);
  return dt;
}

static double raw_bulk_once(cw_raw_t* raw, const uint8_t* src, size_t n) {
  double dt;
  if (!cw_raw_bulk(raw, src, n, &dt)) die("raw bulk transfer of %zu bytes failed: %s", n, raw->error);
  return dt;
}

// ---------------------------------------------------------------------------
// Bench state

// One transport: a client connected to each of two workers that speak it.
typedef struct transport_s {
  const char* name;  // "plaintext", "TLS"
  cw_client_t* a;    // client connected to worker A
  cw_client_t* b;    // client connected to worker B
  uint64_t session_b;
  const char* addr_b;
  uint64_t exe_id;  // the launch program on A
  uint64_t input_id;
} transport_t;

typedef struct bench_s {
  transport_t t[2];
  int num_t;
  uint64_t next_id;
  uint8_t* src;    // pattern source, max_size bytes
  uint8_t* dst;    // receive buffer, max_size bytes
  size_t max_size;
  cw_raw_t raw;
  sync_t sync;
  bool quick;
  double reps_scale;
  uint64_t transfers;  // causeway transfers verified
} bench_t;

static void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  float* f = (float*)p;
  size_t count = n / sizeof(float);
  for (size_t i = 0; i < count; ++i) f[i] = (float)((uint32_t)i * 2654435761u ^ seed);
}

static void verify(const bench_t* b, size_t n, const char* what, int rep) {
  if (memcmp(b->src, b->dst, n) != 0) {
    size_t i = 0;
    while (i < n && b->src[i] == b->dst[i]) ++i;
    die("%s, %zu bytes, rep %d: data differs from what was sent (first at byte %zu: sent 0x%02x, "
        "got 0x%02x)",
        what, n, rep, i, b->src[i], b->dst[i]);
  }
}

static void upload(bench_t* b, cw_client_t* c, uint64_t id, size_t n) {
  int64_t dims[1] = {(int64_t)(n / sizeof(float))};
  CHECK_OK(cw_client_upload(c, id, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1, NULL, 0, b->src, n,
                            sync_done, &b->sync),
           "upload");
  CHECK_OK(sync_wait(&b->sync), "upload ack");
}

static void delete_id(bench_t* b, cw_client_t* c, uint64_t id) {
  CHECK_OK(cw_client_delete(c, &id, 1, sync_done, &b->sync), "delete");
  CHECK_OK(sync_wait(&b->sync), "delete ack");
}

static void download(bench_t* b, cw_client_t* c, uint64_t id, size_t n, const char* what) {
  size_t got = 0;
  Causeway__V1__ArrayInfo* info = NULL;
  CHECK_OK(cw_client_download(c, id, b->dst, n, &got, &info), what);
  if (got != n) die("%s: got %zu bytes, expected %zu", what, got, n);
  if (info) {
    if (info->dtype != CAUSEWAY__V1__DTYPE__DTYPE_F32 || info->n_dims != 1 ||
        info->dims[0] != (int64_t)(n / sizeof(float))) {
      die("%s: ArrayInfo says dtype %d rank %zu, expected f32[%zu]", what, (int)info->dtype,
          info->n_dims, n / sizeof(float));
    }
    protobuf_c_message_free_unpacked(&info->base, NULL);
  }
}

static int reps_for(const bench_t* b, size_t n) {
  int reps;
  if (b->quick) {
    reps = 3;
  } else if (n <= 4 * KIB) {
    reps = 300;
  } else if (n <= 64 * KIB) {
    reps = 200;
  } else if (n <= MIB) {
    reps = 50;
  } else if (n <= 16 * MIB) {
    reps = 15;
  } else {
    reps = 5;
  }
  reps = (int)((double)reps * b->reps_scale + 0.5);
  return reps < 1 ? 1 : reps;
}

typedef struct result_s {
  double med_s;
  double min_s;
} result_t;

static result_t summarize(double* t, int n) {
  result_t r;
  r.med_s = quantile(t, (size_t)n, 0.5);
  r.min_s = t[0];
  return r;
}

// One size: every repetition runs the raw baseline and then each selected
// causeway path once, so all of them see the same machine conditions (two
// cores, noisy neighbours). Repetition -1 is a warm-up and is not timed. The
// data of repetitions -1 and 0 (every one in --quick) is read back and
// compared. Buffers are deleted after each repetition, so at most two arrays
// of `n` bytes live on a worker at a time.

typedef struct size_results_s {
  result_t raw, path[3][2];  // [path][transport]
} size_results_t;

static double time_upload(bench_t* b, transport_t* tr, size_t n, int r) {
  uint64_t id = b->next_id++;
  double t0 = now_s();
  upload(b, tr->a, id, n);
  double dt = now_s() - t0;
  if (b->quick || r <= 0) {
    memset(b->dst, 0, n);
    download(b, tr->a, id, n, "download after upload");
    verify(b, n, "upload", r);
    ++b->transfers;
  }
  delete_id(b, tr->a, id);
  return dt;
}

static double time_download(bench_t* b, transport_t* tr, size_t n, int r, uint64_t src_id) {
  bool check = b->quick || r <= 0;
  if (check) memset(b->dst, 0, n);
  double t0 = now_s();
  download(b, tr->a, src_id, n, "download");
  double dt = now_s() - t0;
  if (check) {
    verify(b, n, "download", r);
    ++b->transfers;
  }
  return dt;
}

static double time_w2w(bench_t* b, transport_t* tr, size_t n, int r, uint64_t src_id) {
  uint64_t dst_id = b->next_id++;
  CHECK_OK(cw_client_expect(tr->b, dst_id, sync_done, &b->sync), "expect");
  CHECK_OK(sync_wait(&b->sync), "expect ack");
  double t0 = now_s();
  CHECK_OK(cw_client_send_to_peer(tr->a, src_id, tr->addr_b, dst_id, 0, tr->session_b,
                                  sync_done, &b->sync),
           "send");
  CHECK_OK(sync_wait(&b->sync), "send ack");
  double dt = now_s() - t0;
  if (b->quick || r <= 0) {
    memset(b->dst, 0, n);
    download(b, tr->b, dst_id, n, "download from worker B after SEND");
    verify(b, n, "worker-to-worker", r);
    ++b->transfers;
  }
  delete_id(b, tr->b, dst_id);
  return dt;
}

static size_results_t bench_size(bench_t* b, size_t n, int reps, const bool want_path[3]) {
  enum { kSeries = 1 + 3 * 2 };  // raw, then path p of transport k at 1 + 3 * k + p
  double* t[kSeries];
  for (int p = 0; p < kSeries; ++p) t[p] = calloc((size_t)reps, sizeof(double));
  // The source of DOWNLOAD and SEND: one array on each transport's worker A.
  uint64_t src_id[2] = {0, 0};
  for (int k = 0; k < b->num_t && (want_path[1] || want_path[2]); ++k) {
    src_id[k] = b->next_id++;
    upload(b, b->t[k].a, src_id[k], n);
  }
  for (int r = -1; r < reps; ++r) {
    double dt[kSeries] = {0};
    dt[0] = raw_bulk_once(&b->raw, b->src, n);
    if (memcmp(b->src, b->dst, n) != 0) die("raw TCP baseline: data differs (bench bug)");
    for (int k = 0; k < b->num_t; ++k) {
      transport_t* tr = &b->t[k];
      if (want_path[0]) dt[1 + 3 * k] = time_upload(b, tr, n, r);
      if (want_path[1]) dt[2 + 3 * k] = time_download(b, tr, n, r, src_id[k]);
      if (want_path[2]) dt[3 + 3 * k] = time_w2w(b, tr, n, r, src_id[k]);
    }
    if (r >= 0) {
      for (int p = 0; p < kSeries; ++p) t[p][r] = dt[p];
    }
  }
  for (int k = 0; k < b->num_t; ++k) {
    if (src_id[k]) delete_id(b, b->t[k].a, src_id[k]);
  }
  size_results_t res;
  memset(&res, 0, sizeof res);
  res.raw = summarize(t[0], reps);
  for (int k = 0; k < b->num_t; ++k) {
    for (int p = 0; p < 3; ++p) {
      if (want_path[p]) res.path[p][k] = summarize(t[1 + 3 * k + p], reps);
    }
  }
  for (int p = 0; p < kSeries; ++p) free(t[p]);
  return res;
}

// ---------------------------------------------------------------------------
// Launch: a one-op program on worker A of a transport.

static const char kLaunchProgram[] =
    "module @bench {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

// With --null (the null plugin, tests/nullplugin): the same shapes, no
// compute; the output repeats the FNV-1a of the input bytes.
static bool g_null;
static const char kNullProgram[] = "f32[4] checksum";

static uint64_t fnv1a(const void* data, size_t n) {
  const unsigned char* s = data;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

static void launch_setup(bench_t* b, transport_t* tr) {
  tr->exe_id = b->next_id++;
  CHECK_OK(cw_client_compile(tr->a, tr->exe_id, g_null ? "cwnull" : "mlir",
                             g_null ? kNullProgram : kLaunchProgram,
                             g_null ? sizeof(kNullProgram) - 1 : sizeof(kLaunchProgram) - 1,
                             NULL, 0, NULL),
           "compile the launch program");
  tr->input_id = b->next_id++;
  upload(b, tr->a, tr->input_id, 4 * sizeof(float));
}

// LAUNCH until its reply; the output is deleted after (not timed). The
// first one's output is read back and checked.
static double time_launch(bench_t* b, transport_t* tr, bool check) {
  uint64_t out = b->next_id++;
  const uint64_t* args[1] = {&tr->input_id};
  const uint64_t* outs[1] = {&out};
  double t0 = now_s();
  CHECK_OK(cw_client_launch(tr->a, tr->exe_id, 1, 1, args, 1, outs, sync_done, &b->sync),
           "launch");
  CHECK_OK(sync_wait(&b->sync), "launch reply");
  double dt = now_s() - t0;
  if (check) {
    float got[4];
    size_t size = 0;
    CHECK_OK(cw_client_download(tr->a, out, got, sizeof got, &size, NULL), "launch output");
    const float* in = (const float*)b->src;
    uint64_t sum = fnv1a(in, sizeof got), words[2];
    memcpy(words, got, sizeof words);
    if (g_null && (size != sizeof got || words[0] != sum || words[1] != sum)) {
      die("%s launch: the null plugin's checksum is %016" PRIx64 ", want %016" PRIx64, tr->name,
          words[0], sum);
    }
    for (int i = 0; i < 4 && !g_null; ++i) {
      if (size != sizeof got || got[i] != in[i] + in[i]) {
        die("%s launch: output %d is %g, want %g", tr->name, i, got[i], in[i] + in[i]);
      }
    }
  }
  delete_id(b, tr->a, out);
  return dt;
}

// ---------------------------------------------------------------------------
// main

// ---------------------------------------------------------------------------
// Same host: a worker on a Unix socket, bytes through the socket or copied by
// the worker straight from/to this process's memory (peer_address).

// One UPLOAD of b->src[0, n) as `id` until its Ack: bulk on the socket, or by
// peer_address.
static double samehost_upload(bench_t* b, cw_client_t* c, uint64_t id, size_t n, bool direct) {
  int64_t dims[1] = {(int64_t)(n / sizeof(float))};
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  req.buffer_id = id;
  req.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  req.dims = dims;
  req.n_dims = 1;
  struct iovec iov = {b->src, n};
  if (direct) req.peer_address = (uint64_t)(uintptr_t)b->src;
  ProtobufCMessage* rep = NULL;
  double t0 = now_s();
  CHECK_OK(cw_client_call(c, CW_MSG_UPLOAD, &req.base, direct ? NULL : &iov, direct ? 0 : 1,
                          NULL, &rep, NULL),
           direct ? "same-host upload by peer_address" : "same-host upload");
  double dt = now_s() - t0;
  protobuf_c_message_free_unpacked(rep, NULL);
  return dt;
}

// One DOWNLOAD of `id` into b->dst: bulk on the socket, or by peer_address
// (then the reply must carry no bytes).
static double samehost_download(bench_t* b, cw_client_t* c, uint64_t id, size_t n, bool direct) {
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  req.buffer_id = id;
  if (direct) {
    req.peer_address = (uint64_t)(uintptr_t)b->dst;
    req.peer_capacity = n;
  }
  cw_client_sink_t sink = {.data = b->dst, .capacity = n};
  ProtobufCMessage* rep = NULL;
  uint64_t bulk = 0;
  double t0 = now_s();
  CHECK_OK(cw_client_call(c, CW_MSG_DOWNLOAD, &req.base, NULL, 0, &sink, &rep, &bulk),
           direct ? "same-host download by peer_address" : "same-host download");
  double dt = now_s() - t0;
  if (direct && bulk) die("same-host download by peer_address: the reply carried %" PRIu64
                          " bytes (the worker could not copy; see its log)", bulk);
  if (!direct && bulk != n) die("same-host download: %" PRIu64 " bytes, not %zu", bulk, n);
  protobuf_c_message_free_unpacked(rep, NULL);
  return dt;
}

// memcpy, upload and download through the socket and by peer_address, for
// each size; every transfer's bytes are compared on the first rep.
static void samehost_table(bench_t* b, cw_client_t* c, const size_t* sizes, size_t num_sizes) {
  printf("Same host: client <-> worker on a Unix socket, float32 1-D; GB/s = 1e9 B/s of median\n"
         "time; %% = of memcpy between two warm buffers in this process, same run\n");
  printf("  %-9s %5s %9s %9s %6s %9s %6s %9s %6s %9s %6s\n", "size", "reps", "memcpy",
         "up sock", "%", "up same", "%", "down sock", "%", "down same", "%");
  for (size_t s = 0; s < num_sizes; ++s) {
    size_t n = sizes[s];
    int reps = reps_for(b, n);
    double* t[5];
    for (int p = 0; p < 5; ++p) t[p] = calloc((size_t)reps, sizeof(double));
    for (int r = -1; r < reps; ++r) {  // rep -1 warms up
      double dt[5];
      double t0 = now_s();
      memcpy(b->dst, b->src, n);
      dt[0] = now_s() - t0;
      for (int direct = 0; direct < 2; ++direct) {
        uint64_t id = b->next_id++;
        dt[1 + direct] = samehost_upload(b, c, id, n, direct);
        memset(b->dst, 0, n);
        dt[3 + direct] = samehost_download(b, c, id, n, direct);
        if (r <= 0) {
          verify(b, n, direct ? "same-host upload+download by peer_address"
                              : "same-host upload+download", r);
          ++b->transfers;
        }
        delete_id(b, c, id);
      }
      for (int p = 0; r >= 0 && p < 5; ++p) t[p][r] = dt[p];
    }
    double g[5];
    for (int p = 0; p < 5; ++p) {
      g[p] = (double)n / summarize(t[p], reps).med_s / 1e9;
      free(t[p]);
    }
    char hs[32];
    printf("  %-9s %5d %9.2f %9.2f %5.0f%% %9.2f %5.0f%% %9.2f %5.0f%% %9.2f %5.0f%%\n",
           human_size(n, hs, sizeof hs), reps, g[0], g[1], 100 * g[1] / g[0], g[2],
           100 * g[2] / g[0], g[3], 100 * g[3] / g[0], g[4], 100 * g[4] / g[0]);
  }
  printf("\n");
  fflush(stdout);
}

static void usage(void) {
  fprintf(stderr,
          "usage: cw_bench [--quick] [--no-tls] [--null] [--plugin PATH] [--worker PATH] [--pings N]\n"
          "                [--max-mib N] [--sizes 4k,1m,...] [--reps-scale X]\n"
          "                [--only ping,launch,upload,download,w2w,samehost]\n"
          "                [--keep-logs]\n");
  exit(2);
}

static char* default_worker_path(void) {
  static char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
  if (n <= 0) return "causeway-worker";
  path[n] = '\0';
  char* slash = strrchr(path, '/');
  if (!slash) return "causeway-worker";
  strcpy(slash + 1, "causeway-worker");
  return path;
}

static bool want(const char* only, const char* what) {
  if (!only) return true;
  size_t wl = strlen(what);
  for (const char* p = only; *p;) {
    const char* e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == wl && strncmp(p, what, l) == 0) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

int main(int argc, char** argv) {
  bench_t bench;
  memset(&bench, 0, sizeof bench);
  bench_t* b = &bench;
  b->reps_scale = 1.0;
  b->next_id = 1;
  const char* plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  const char* worker_path = NULL;
  const char* only = NULL;
  long pings = -1;
  bool no_tls = false;
  long max_mib = 256;
  size_t custom_sizes[8];
  size_t num_custom = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quick") == 0) {
      b->quick = true;
    } else if (strcmp(a, "--no-tls") == 0) {
      no_tls = true;
    } else if (strcmp(a, "--null") == 0) {
      g_null = true;
    } else if (strcmp(a, "--keep-logs") == 0) {
      g_keep_logs = true;
    } else if (strcmp(a, "--plugin") == 0 && v) {
      plugin = v, ++i;
    } else if (strcmp(a, "--worker") == 0 && v) {
      worker_path = v, ++i;
    } else if (strcmp(a, "--pings") == 0 && v) {
      pings = strtol(v, NULL, 10), ++i;
    } else if (strcmp(a, "--max-mib") == 0 && v) {
      max_mib = strtol(v, NULL, 10), ++i;
    } else if (strcmp(a, "--reps-scale") == 0 && v) {
      b->reps_scale = strtod(v, NULL), ++i;
    } else if (strcmp(a, "--sizes") == 0 && v) {
      // Comma list of sizes with an optional k/m suffix (KiB, MiB).
      ++i;
      for (const char* q = v; *q && num_custom < 8;) {
        char* end = NULL;
        unsigned long long x = strtoull(q, &end, 10);
        if (end == q) usage();
        if (*end == 'k' || *end == 'K') x *= KIB, ++end;
        else if (*end == 'm' || *end == 'M') x *= MIB, ++end;
        if (x == 0 || x % sizeof(float) != 0) usage();
        custom_sizes[num_custom++] = (size_t)x;
        q = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') usage();
      }
    } else if (strcmp(a, "--only") == 0 && v) {
      only = v, ++i;
    } else {
      usage();
    }
  }
  if (!plugin || !*plugin) {
    fprintf(stderr, "cw_bench: no plugin: pass --plugin PATH or set CAUSEWAY_PJRT_PLUGIN\n");
    return 2;
  }
  if (!worker_path) worker_path = default_worker_path();
  if (pings < 0) pings = b->quick ? 200 : 20000;
  signal(SIGPIPE, SIG_IGN);

  size_t full_sizes[] = {4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB};
  // --quick: tiny sizes, one of them not a multiple of a page.
  size_t quick_sizes[] = {4 * KIB, 64 * KIB + 12, MIB};
  size_t* sizes = b->quick ? quick_sizes : full_sizes;
  size_t num_sizes = b->quick ? sizeof quick_sizes / sizeof *quick_sizes
                              : sizeof full_sizes / sizeof *full_sizes;
  if (num_custom) {
    sizes = custom_sizes;
    num_sizes = num_custom;
  }
  while (num_sizes > 0 && sizes[num_sizes - 1] > (size_t)max_mib * MIB) --num_sizes;
  b->max_size = 4 * KIB;
  for (size_t i = 0; i < num_sizes; ++i) {
    if (sizes[i] > b->max_size) b->max_size = sizes[i];
  }

  double t_start = now_s();
  // Buffers, touched up front so no page faults land inside timed regions.
  b->src = aligned_alloc(4096, (b->max_size + 4095) / 4096 * 4096);
  b->dst = aligned_alloc(4096, (b->max_size + 4095) / 4096 * 4096);
  if (!b->src || !b->dst) die("out of memory for %zu-byte buffers", b->max_size);
  memset(b->dst, 0, b->max_size);
  fill_pattern(b->src, b->max_size, 0x5eed);

  // Certificates for the TLS workers, made for this run.
  char tls_dir[64] = "";
  if (!no_tls) {
    const char* tmp = getenv("TMPDIR");
    snprintf(tls_dir, sizeof tls_dir, "%s/cw_bench_tls.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tls_dir)) die("mkdtemp: %s", strerror(errno));
    char f[4][128];
    const char* names[4] = {"ca.pem", "ca.key", "worker.pem", "worker.key"};
    for (int i = 0; i < 4; ++i) snprintf(f[i], sizeof f[i], "%s/%s", tls_dir, names[i]);
    const char* hosts[] = {"127.0.0.1"};
    CHECK_OK(cw_tls_pki_make_ca("cw_bench CA", 1, f[0], f[1], false), "make a CA");
    CHECK_OK(cw_tls_pki_issue(f[0], f[1], "worker", CW_TLS_CERT_DAEMON, hosts, 1, 1, f[2], f[3],
                              false),
             "make a worker certificate");
  }
  b->num_t = no_tls ? 1 : 2;
  cw_tls_t* client_tls = NULL;
  for (int k = 0; k < b->num_t; ++k) {
    transport_t* tr = &b->t[k];
    tr->name = k == 0 ? "plaintext" : "TLS";
    start_worker(2 * k, worker_path, plugin, k ? tls_dir : NULL, NULL);
    start_worker(2 * k + 1, worker_path, plugin, k ? tls_dir : NULL, NULL);
    cw_client_options_t o = {0};
    if (k == 1) {
      char ca[128];
      snprintf(ca, sizeof ca, "%s/ca.pem", tls_dir);
      cw_tls_config_t cfg = {true, ca, NULL, NULL, false};
      CHECK_OK(cw_tls_create(&cfg, false, &client_tls), "client TLS");
      o.tls = client_tls;
    }
    CHECK_OK(cw_client_connect(g_workers[2 * k].address, &o, &tr->a), "connect to worker A");
    CHECK_OK(cw_client_connect(g_workers[2 * k + 1].address, &o, &tr->b), "connect to worker B");
    tr->session_b = cw_client_session_id(tr->b);
    tr->addr_b = g_workers[2 * k + 1].address;
  }
  sync_init(&b->sync);
  if (!cw_raw_start(&b->raw, b->dst, b->max_size, false)) die("raw TCP baseline: %s", b->raw.error);

  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("causeway bench%s: 2 workers per transport, 1 device each, loopback TCP 127.0.0.1\n",
         b->quick ? " (--quick: tiny sizes, few reps; numbers not meaningful)" : "");
  if (g_null) printf("plugin: the null plugin (no compiler, no compute): causeway's own cost\n");
  for (int k = 0; k < b->num_t; ++k) {
    printf("  %-9s A %s, B %s%s\n", b->t[k].name, g_workers[2 * k].address,
           g_workers[2 * k + 1].address,
           k ? " (TLS 1.3 both ways and worker to worker, certificates of a CA made for the run)"
             : "");
  }
  printf("machine: %ld CPU core%s online; the raw TCP baseline and causeway (bench, client reader "
         "thread, workers) share them\n",
         cores, cores == 1 ? "" : "s");
  printf("raw TCP baseline: two threads in the bench process, TCP_NODELAY, default socket "
         "buffers, measured in this run\n\n");
  fflush(stdout);

  if (want(only, "ping") || want(only, "launch")) {
    // PING frames: 32-byte header and an empty Ping payload each way (the
    // raw ping-pong moves 32 bytes each way too). LAUNCH: a one-op program.
    bool do_ping = want(only, "ping"), do_launch = want(only, "launch");
    long warm = pings / 20 + 10;
    long launches = b->quick ? 50 : pings / 4;
    double* tr_raw = calloc((size_t)pings, sizeof(double));
    double* tp[2] = {calloc((size_t)pings, sizeof(double)), calloc((size_t)pings, sizeof(double))};
    double* tl[2] = {calloc((size_t)launches, sizeof(double)),
                     calloc((size_t)launches, sizeof(double))};
    for (int k = 0; k < b->num_t; ++k) {
      if (do_launch) launch_setup(b, &b->t[k]);
      for (long i = 0; i < warm; ++i) {
        if (do_ping) CHECK_OK(cw_client_ping(b->t[k].a), "ping");
        if (do_launch) (void)time_launch(b, &b->t[k], i == 0);
      }
    }
    for (long i = 0; i < warm; ++i) (void)raw_ping_once(&b->raw);
    // Interleave in blocks so all see the same machine conditions.
    const long block = 1000;
    for (long base = 0; base < pings; base += block) {
      long end = base + block < pings ? base + block : pings;
      for (long i = base; i < end; ++i) tr_raw[i] = raw_ping_once(&b->raw);
      for (int k = 0; k < b->num_t && do_ping; ++k) {
        for (long i = base; i < end; ++i) {
          double t0 = now_s();
          CHECK_OK(cw_client_ping(b->t[k].a), "ping");
          tp[k][i] = now_s() - t0;
        }
      }
      for (int k = 0; k < b->num_t && do_launch; ++k) {
        for (long i = base / 4; i < end / 4 && i < launches; ++i) {
          tl[k][i] = time_launch(b, &b->t[k], false);
        }
      }
    }
    double r50 = quantile(tr_raw, (size_t)pings, 0.5), r99 = quantile(tr_raw, (size_t)pings, 0.99);
    printf("Round trips (median and p99 microseconds): PING 32 B each way, %ld each; LAUNCH of\n"
           "%s on worker A until its reply, %ld each; raw TCP ping-pong %ld\n",
           pings, g_null ? "cwnull f32[4] checksum" : "f32[4] + itself", launches, pings);
    printf("  %-34s %10s %10s %10s\n", "path", "median us", "p99 us", "x raw");
    printf("  %-34s %10.1f %10.1f %10.2f\n", "raw TCP ping-pong (2 threads)", r50 * 1e6,
           r99 * 1e6, 1.0);
    double med[2][2] = {{0}};
    for (int k = 0; k < b->num_t; ++k) {
      char label[64];
      if (do_ping) {
        double c50 = quantile(tp[k], (size_t)pings, 0.5), c99 = quantile(tp[k], (size_t)pings, 0.99);
        med[0][k] = c50;
        snprintf(label, sizeof label, "causeway PING, %s", b->t[k].name);
        printf("  %-34s %10.1f %10.1f %10.2f\n", label, c50 * 1e6, c99 * 1e6, c50 / r50);
      }
      if (do_launch) {
        double l50 = quantile(tl[k], (size_t)launches, 0.5);
        double l99 = quantile(tl[k], (size_t)launches, 0.99);
        med[1][k] = l50;
        snprintf(label, sizeof label, "causeway LAUNCH, %s", b->t[k].name);
        printf("  %-34s %10.1f %10.1f %10.2f\n", label, l50 * 1e6, l99 * 1e6, l50 / r50);
      }
    }
    if (b->num_t == 2) {
      if (do_ping) printf("  TLS / plaintext, PING median: %.2f\n", med[0][1] / med[0][0]);
      if (do_launch) printf("  TLS / plaintext, LAUNCH median: %.2f\n", med[1][1] / med[1][0]);
    }
    printf("\n");
    fflush(stdout);
    free(tr_raw);
    for (int k = 0; k < 2; ++k) {
      free(tp[k]);
      free(tl[k]);
    }
  }

  struct {
    const char* key;
    const char* title;
  } paths[3] = {
      {"upload", "Upload: client -> worker A (UPLOAD + Ack)"},
      {"download", "Download: worker A -> caller's buffer (DOWNLOAD)"},
      {"w2w", "Worker-to-worker: A -> B (EXPECT on B, then SEND on A until its Ack)"},
  };
  size_results_t res[8];
  int reps[8];
  bool want_path[3] = {want(only, "upload"), want(only, "download"), want(only, "w2w")};
  if (want_path[0] || want_path[1] || want_path[2]) {
    for (size_t s = 0; s < num_sizes; ++s) {
      size_t n = sizes[s];
      reps[s] = reps_for(b, n);
      char hs[32];
      fprintf(stderr, "cw_bench: %s x %d ...\n", human_size(n, hs, sizeof hs), reps[s]);
      res[s] = bench_size(b, n, reps[s], want_path);
    }
    for (int p = 0; p < 3; ++p) {
      if (!want(only, paths[p].key)) continue;
      printf("%s, float32 1-D; GB/s = 1e9 B/s of median time\n", paths[p].title);
      printf("  %-9s %5s %10s %10s %7s", "size", "reps", "raw GB/s", "plain GB/s", "% raw");
      if (b->num_t == 2) printf(" %10s %7s %9s", "TLS GB/s", "% raw", "TLS/plain");
      printf("\n");
      for (size_t s = 0; s < num_sizes; ++s) {
        size_t n = sizes[s];
        char hs[32];
        double raw = (double)n / res[s].raw.med_s / 1e9;
        double g[2] = {0, 0};
        for (int k = 0; k < b->num_t; ++k) g[k] = (double)n / res[s].path[p][k].med_s / 1e9;
        printf("  %-9s %5d %10.3f %10.3f %6.1f%%", human_size(n, hs, sizeof hs), reps[s], raw,
               g[0], 100.0 * g[0] / raw);
        if (b->num_t == 2) {
          printf(" %10.3f %6.1f%% %8.1f%%", g[1], 100.0 * g[1] / raw, 100.0 * g[1] / g[0]);
        }
        printf("\n");
      }
      printf("\n");
    }
  }

  char unix_dir[64] = "", sock[96];
  if (want(only, "samehost")) {
    char* dir = unix_dir;
    const char* tmp = getenv("TMPDIR");
    snprintf(dir, sizeof unix_dir, "%s/cw_bench_unix.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) die("mkdtemp: %s", strerror(errno));
    snprintf(sock, sizeof sock, "%s/worker.sock", dir);
    start_worker(4, worker_path, plugin, NULL, sock);
    cw_client_t* c = NULL;
    CHECK_OK(cw_client_connect(sock, &(cw_client_options_t){0}, &c), "connect to the Unix worker");
    samehost_table(b, c, sizes, num_sizes);
    cw_client_release(c);
  }
  for (int k = 0; k < b->num_t; ++k) {
    CHECK_OK(cw_client_flush(b->t[k].a), "flush A");
    CHECK_OK(cw_client_flush(b->t[k].b), "flush B");
  }
  cw_raw_stop(&b->raw);
  if (b->raw.failed) die("raw TCP peer failed");
  for (int k = 0; k < b->num_t; ++k) {
    cw_client_release(b->t[k].a);
    cw_client_release(b->t[k].b);
  }
  cw_tls_release(client_tls);
  sync_deinit(&b->sync);
  stop_workers(false);
  if (unix_dir[0]) {
    unlink(sock);  // if the worker left it
    rmdir(unix_dir);
  }
  if (tls_dir[0]) {
    const char* names[4] = {"ca.pem", "ca.key", "worker.pem", "worker.key"};
    for (int i = 0; i < 4; ++i) {
      char f[128];
      snprintf(f, sizeof f, "%s/%s", tls_dir, names[i]);
      unlink(f);
    }
    rmdir(tls_dir);
  }
  free(b->src);
  free(b->dst);
  printf("ok: %" PRIu64 " causeway transfers verified byte for byte; %.1f s\n", b->transfers,
         now_s() - t_start);
  return 0;
}
