// fleet_bench: one controller in front of a simulated fleet (issue 12 item 2).
//
// For each fleet size N (default 10, 100, 1000) it starts a controller and N
// real causeway-worker processes over the null plugin (tests/nullplugin: 8
// devices each, no XLA; a worker so takes ~4 MiB, so 1,000 of them fit in
// this machine's memory as separate processes) and measures, each beside its
// target:
//   - registration: from the first worker's spawn until ADMIN_STATUS lists
//     all N alive, with the time forking them took (on 2 cores, starting
//     1,000 processes is most of it); then the controller is SIGKILLed and
//     restarted on its address, and the N running workers register again:
//     the controller's own share (target < 10 s at 1,000);
//   - `causeway status --json` wall time, the CLI run as a user runs it
//     (target < 200 ms), and the ADMIN_STATUS round trip alone with the
//     controller CPU it cost (the rest is waiting for every worker's STATS
//     reply: on 2 cores, for 1,000 processes to be scheduled); and the CLI
//     with --max-age 2, answered from the controller's last poll;
//   - controller CPU with nothing but heartbeats (target < 5% of a core);
//   - controller memory per worker: RSS growth over the idle controller / N
//     (target < 64 KiB);
//   - compile at the client: a first compile (the worker compiles), the same
//     program after the controller restart (its disk cache), then from its
//     memory cache (target < 5 ms); the S sessions' COMPILE requests for that
//     program and how many of them compiled (target: once);
//   - launches/s through the controller (relayed) from S sessions (threads,
//     S = min(100, N)) each on its own worker (distinct islands; target
//     >= 20,000/s), then from S sessions sharing worker w0's island;
//   - a worker's death: SIGKILL of w0 until every session got WORKER_DOWN
//     naming it; SIGSTOP of w1 until its sessions were told, beside the
//     --worker-timeout-ms the controller runs with (target: told < 1 s after
//     the timeout).
// A table per size, then the curve of each figure over N. Every launch must
// succeed and every event name the right worker, or the run fails (exit 1);
// nothing is asserted about speed. --quick: sizes 10 and 30, 10 sessions, a
// few launches (CTest `fleet_bench_quick`).
//
// Usage: fleet_bench [--quick] [--sizes 10,100,1000] [--sessions S] [--launches L]
//                    [--nullplugin PATH] [--shared-curve 10,100,1000 [--total T]]
//   --shared-curve: instead, S sessions on one worker's island for each S, T
//   launches in all (default 200,000) through the island's scheduler: launches/s
//   and the controller's CPU per launch over S.
//   --nullplugin: default $CW_NULLPLUGIN, else ../lib/libcw_nullplugin.so beside this
//   executable; causeway-worker, causeway-controller and causeway from $CW_WORKER_BIN,
//   $CW_CONTROLLER_BIN, $CW_CLI_BIN, else beside this executable.
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cw_bench_stats.h"
#include "cw_client.h"
#include "cw_test_island.h"

#define MAX_SIZES 8
#define MAX_SESSIONS 1024
#define EXE 1
#define OUT_BASE 1000

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct {
  char bin_dir[512];
  const char* worker_bin;
  const char* ctl_bin;
  const char* cli_bin;
  const char* plugin;
  char dir[256];
  cw_test_process_t ctl;
  char ctl_address[512];
  pid_t* workers;  // N of them; 0 once reaped
  int num_workers;
  int watch[2];  // workers exit when the write end closes (this process gone)
  bool stopped_w1;
  int timeout_ms;  // the controller's --worker-timeout-ms
} g;

// Stops the fleet and the controller; the number of processes that did not
// exit cleanly (under the sanitizers a leak is an unclean exit), the stopped
// w1 aside (it is killed).
static int stop_fleet(void) {
  // Closing the watch pipe stops every worker cleanly (a signal on top of it
  // could land after a worker restored the default handlers).
  if (g.stopped_w1 && g.workers[1] > 0) kill(g.workers[1], SIGKILL);
  if (g.watch[1] > 0) close(g.watch[1]);
  if (g.watch[0] > 0) close(g.watch[0]);
  g.watch[0] = g.watch[1] = 0;
  int unclean = 0, left = 0;
  for (int i = 0; i < g.num_workers; ++i) left += g.workers[i] > 0;
  double deadline = now_s() + 60;
  while (left > 0 && now_s() < deadline) {
    int reaped = 0;
    for (int i = 0; i < g.num_workers; ++i) {
      int st = 0;
      if (g.workers[i] <= 0 || waitpid(g.workers[i], &st, WNOHANG) != g.workers[i]) continue;
      g.workers[i] = 0;
      left--, reaped++;
      if (!(i == 1 && g.stopped_w1) && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "fleet_bench: worker w%d exited with status %d\n", i, st);
        unclean++;
      }
    }
    if (!reaped) cw_test_sleep_ms(5);
  }
  for (int i = 0; i < g.num_workers; ++i) {
    if (g.workers[i] <= 0) continue;
    fprintf(stderr, "fleet_bench: worker w%d did not exit in 60 s; killed\n", i);
    kill(g.workers[i], SIGKILL);
    waitpid(g.workers[i], NULL, 0);
    unclean++;
  }
  free(g.workers);
  g.workers = NULL;
  g.num_workers = 0;
  g.stopped_w1 = false;
  if (g.ctl.pid) {
    int rc = cw_test_process_stop(&g.ctl, 30000);
    if (rc != 0) {
      fprintf(stderr, "fleet_bench: the controller exited with status %d\n", rc);
      unclean++;
    }
  }
  return unclean;
}

static void die(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fleet_bench: FAILED: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  (void)stop_fleet();
  if (g.dir[0]) fprintf(stderr, "fleet_bench: the workers' output is in %s/workers.log\n", g.dir);
  exit(1);
}

#define CHECK_OK(expr, ...)                                              \
  do {                                                                   \
    cw_status_t st_ = (expr);                                            \
    if (st_) {                                                           \
      char what_[256];                                                   \
      snprintf(what_, sizeof(what_), __VA_ARGS__);                       \
      die("%s: %s", what_, cw_status_message(st_));                      \
    }                                                                    \
  } while (0)

// ---- Processes --------------------------------------------------------------------------------

static const char* beside(const char* env, const char* name, char* buf, size_t cap) {
  const char* v = cw_test_getenv(env, NULL);
  if (!v) {
    snprintf(buf, cap, "%s/%s", g.bin_dir, name);
    v = buf;
  }
  if (access(v, R_OK) != 0) die("%s: %s does not exist (build it)", env, v);
  return v;
}

static long proc_rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE* f = fopen(path, "r");
  long kib = -1;
  while (f && fgets(line, sizeof(line), f)) {
    if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
  }
  if (f) fclose(f);
  return kib;
}

// utime + stime of pid, in seconds.
static double proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');  // the command may hold spaces
  unsigned long ut = 0, stime = 0;
  static const char fields[] = "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu";
  if (!p || sscanf(p + 2, fields, &ut, &stime) != 2) {
    die("reading %s", path);
  }
  return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

static int g_files;
static int count_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  if (flag == FTW_F) g_files++;
  return 0;
}

// Regular files below dir (0 when it does not exist).
static int count_files(const char* dir) {
  g_files = 0;
  nftw(dir, count_one, 16, FTW_PHYS);
  return g_files;
}

static pid_t spawn_worker(int i, int log_fd) {
  char name[16];
  snprintf(name, sizeof(name), "w%d", i);
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    dup2(g.watch[0], 3);
    execl(g.worker_bin, g.worker_bin, "--plugin", g.plugin, "--devices", "8", "--controller",
          g.ctl_address, "--listen", "127.0.0.1:0", "--name", name, "--watch-fd", "3",
          (char*)NULL);
    _exit(127);
  }
  return pid;
}

// ---- Controller calls -------------------------------------------------------------------------

static cw_client_t* g_admin;

// The admin connection, every worker and the controller, then the fleet's
// directory; dies if a process did not exit cleanly.
static void end_fleet(void) {
  cw_client_release(g_admin);
  g_admin = NULL;
  int unclean = stop_fleet();
  if (unclean) die("%d processes did not exit cleanly", unclean);
  cw_test_tempdir_remove(g.dir);
  g.dir[0] = '\0';
}

static Causeway__V1__AdminStatus* admin_status(void) {
  Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  ProtobufCMessage* rep = NULL;
  CHECK_OK(cw_test_call(g_admin, CW_MSG_ADMIN_STATUS, &req.base, &rep), "ADMIN_STATUS");
  return (Causeway__V1__AdminStatus*)rep;
}

static size_t alive_workers(void) {
  Causeway__V1__AdminStatus* st = admin_status();
  size_t n = 0;
  for (size_t i = 0; i < st->n_workers; ++i) n += !strcmp(st->workers[i]->state, "alive");
  protobuf_c_message_free_unpacked(&st->base, NULL);
  return n;
}

static double median(double* v, int n) {
  cw_bench_sort(v, n > 0 ? (size_t)n : 0);
  return n ? v[n / 2] : 0;
}

// `causeway status --json` as a user runs it (with `--max-age max_age`, when
// given: the controller's last poll, and *from_poll says whether the answer
// came from it, i.e. has "stats_age_ms"): wall seconds.
static double cli_status_s(const char* max_age, bool* from_poll) {
  char out_path[] = "/tmp/fleet-status-XXXXXX";
  int out_fd = mkstemp(out_path);
  if (out_fd < 0) die("mkstemp: %s", strerror(errno));
  unlink(out_path);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(out_fd, 1);
    if (max_age) {
      execl(g.cli_bin, g.cli_bin, "--controller", g.ctl_address, "status", "--json", "--max-age",
            max_age, (char*)NULL);
    } else {
      execl(g.cli_bin, g.cli_bin, "--controller", g.ctl_address, "status", "--json", (char*)NULL);
    }
    _exit(127);
  }
  int wst = 0;
  waitpid(pid, &wst, 0);
  double t = now_s() - t0;
  if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) die("causeway status --json failed (%d)", wst);
  // The top of the JSON: "stats_age_ms" comes right after "uptime_ms".
  char head[256] = {0};
  ssize_t n = pread(out_fd, head, sizeof(head) - 1, 0);
  close(out_fd);
  if (from_poll) *from_poll = n > 0 && strstr(head, "\"stats_age_ms\"") != NULL;
  return t;
}

// ---- Sessions ---------------------------------------------------------------------------------

typedef struct session_s {
  cw_client_t* ctl;
  Causeway__V1__SessionInfo* info;
  char worker[16];  // where it is placed
  _Atomic double down_at;  // when WORKER_DOWN for its worker arrived (0: not yet)
  _Atomic int wrong_events;  // WORKER_DOWN naming a worker that did not go down
  // Set before a death (the reader thread reads it): the worker expected to go down.
  _Atomic(const char*) expect_down;
  uint64_t launches;
  pthread_barrier_t* start;
  double compile_s;  // its COMPILE round trip
  char error[256];
} session_t;

// Workers this run has taken down (w0 killed, w1 stopped): the controller
// tells every client of each, and of no other.
static _Atomic bool g_down[2];

static void on_event(void* user, const ProtobufCMessage* m) {
  session_t* s = user;
  const Causeway__V1__ClusterEvent* ev = (const Causeway__V1__ClusterEvent*)m;
  if (ev->kind != CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN) return;
  bool real = (!strcmp(ev->worker_name, "w0") && atomic_load(&g_down[0])) ||
              (!strcmp(ev->worker_name, "w1") && atomic_load(&g_down[1]));
  if (!real) atomic_fetch_add(&s->wrong_events, 1);
  const char* expect = atomic_load(&s->expect_down);
  if (expect && !strcmp(ev->worker_name, expect)) {
    double zero = 0;
    atomic_compare_exchange_strong(&s->down_at, &zero, now_s());
  }
}

static void session_open(session_t* s, const char* name, const char* worker) {
  snprintf(s->worker, sizeof(s->worker), "%s", worker);
  cw_client_options_t o = {.peer_name = name, .on_event = on_event, .event_user = s};
  CHECK_OK(cw_client_connect(g.ctl_address, &o, &s->ctl), "%s: connect", name);
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.wait_ms = 60000;
  req.name = (char*)name;
  req.num_devices = 1;
  req.share = true;
  char* workers[1] = {s->worker};
  req.workers = workers;
  req.n_workers = 1;
  ProtobufCMessage* rep = NULL;
  CHECK_OK(cw_test_call(s->ctl, CW_MSG_OPEN_SESSION, &req.base, &rep), "%s: OPEN_SESSION", name);
  s->info = (Causeway__V1__SessionInfo*)rep;
  if (s->info->n_devices != 1) die("%s: %zu devices, asked for 1", name, s->info->n_devices);
  int64_t id = s->info->devices[0]->global_id;
  size_t osize = 0;
  uint8_t* opts = cw_test_compile_options(&id, 1, &osize);
  if (!opts) die("compile options");
  static const char code[] = "f32[1]";
  double t0 = now_s();
  CHECK_OK(cw_client_compile(s->ctl, EXE, "cwnull", code, sizeof(code) - 1, opts, osize, NULL),
           "%s: compile", name);
  s->compile_s = now_s() - t0;
  free(opts);
}

static void session_close(session_t* s) {
  if (s->ctl) cw_client_release(s->ctl);
  if (s->info) protobuf_c_message_free_unpacked(&s->info->base, NULL);
  memset(s, 0, sizeof(*s));
}

static void* launcher(void* arg) {
  session_t* s = arg;
  pthread_barrier_wait(s->start);
  cw_status_t st = cw_ok_status();
  for (uint64_t i = 0; i < s->launches && !st; ++i) {
    uint64_t out = OUT_BASE + i;
    const uint64_t* outs[1] = {&out};
    st = cw_client_launch(s->ctl, EXE, 1, 0, NULL, 1, outs, NULL, NULL);
  }
  if (!st) st = cw_client_flush(s->ctl);
  if (st) snprintf(s->error, sizeof(s->error), "%s", cw_status_message(st));
  cw_status_free(st);
  return NULL;
}

// Launches s[0..n) at once, `launches` each; returns launches per second.
static double launch_all(session_t* s, int n, uint64_t launches) {
  pthread_t t[MAX_SESSIONS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n + 1);
  for (int k = 0; k < n; ++k) {
    s[k].start = &start;
    s[k].launches = launches;
    s[k].error[0] = '\0';
    if (pthread_create(&t[k], NULL, launcher, &s[k]) != 0) die("pthread_create");
  }
  pthread_barrier_wait(&start);
  double t0 = now_s();
  for (int k = 0; k < n; ++k) pthread_join(t[k], NULL);
  double dt = now_s() - t0;
  pthread_barrier_destroy(&start);
  for (int k = 0; k < n; ++k) {
    if (s[k].error[0]) die("session on %s: launches: %s", s[k].worker, s[k].error);
  }
  return (double)n * (double)launches / dt;
}

// Waits until every session of s[0..n) got WORKER_DOWN for its expected
// worker; returns the latest arrival. Dies after `limit_s`.
static double wait_told(session_t* const* s, int n, double limit_s) {
  double deadline = now_s() + limit_s, last = 0;
  for (int k = 0; k < n; ++k) {
    double at;
    while (!(at = atomic_load(&s[k]->down_at))) {
      if (now_s() > deadline) die("session on %s was not told %s went down", s[k]->worker,
                                  atomic_load(&s[k]->expect_down));
      cw_test_sleep_ms(1);
    }
    if (at > last) last = at;
  }
  return last;
}

// ---- One fleet --------------------------------------------------------------------------------

typedef struct result_s {
  int n, sessions;
  double compile_miss_ms, compile_disk_ms, compile_hit_ms, compiles_run, compile_requests;
  double spawn_s, register_cpu_s, register_s, reregister_s;
  double status_cli_ms, status_cached_ms, status_polled, status_cpu_ms, status_rpc_ms, hb_cpu_pct, kib_per_worker, rss_mib;
  double distinct_lps, shared_lps, kill_told_ms, stop_told_ms;  // < 0: not measured
  long ctl_rss_idle_kib, ctl_rss_fleet_kib;
} result_t;

static session_t g_distinct[MAX_SESSIONS], g_shared[MAX_SESSIONS];

static result_t run_fleet(int n, int sessions, uint64_t launches, double hb_window_s) {
  result_t r = {.n = n, .sessions = sessions};
  if (cw_test_tempdir_create("cw-fleet", g.dir, sizeof(g.dir)) != 0) die("temporary directory");
  char max_conn[16], timeout[16];
  snprintf(max_conn, sizeof(max_conn), "%d", n + 4 * sessions + 64);
  snprintf(timeout, sizeof(timeout), "%d", g.timeout_ms);
  char cache_dir[300];
  snprintf(cache_dir, sizeof(cache_dir), "%s/compile-cache", g.dir);
  const char* args[] = {"--max-connections", max_conn, "--worker-timeout-ms", timeout,
                        "--compile-cache-dir", cache_dir, NULL};
  if (cw_test_controller_start(args, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    die("controller did not start");
  }
  cw_client_options_t ao = {.peer_name = "fleet-admin"};
  CHECK_OK(cw_client_connect(g.ctl_address, &ao, &g_admin), "admin connect");
  cw_test_sleep_ms(200);
  r.ctl_rss_idle_kib = proc_rss_kib(g.ctl.pid);

  char log_path[300];
  snprintf(log_path, sizeof(log_path), "%s/workers.log", g.dir);
  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) die("%s: %s", log_path, strerror(errno));
  g.workers = calloc((size_t)n, sizeof(pid_t));
  g.num_workers = n;
  if (pipe(g.watch) != 0 || fcntl(g.watch[1], F_SETFD, FD_CLOEXEC) != 0) die("pipe");
  double t0 = now_s(), cpu0 = proc_cpu_s(g.ctl.pid);
  for (int i = 0; i < n; ++i) g.workers[i] = spawn_worker(i, log_fd);
  close(log_fd);
  r.spawn_s = now_s() - t0;
  size_t alive = 0;
  while ((alive = alive_workers()) < (size_t)n) {
    if (now_s() - t0 > 120) die("%zu of %d workers registered after 120 s (see %s)", alive, n,
                                log_path);
    cw_test_sleep_ms(20);
  }
  r.register_s = now_s() - t0;
  r.register_cpu_s = proc_cpu_s(g.ctl.pid) - cpu0;

  // Idle: heartbeats only.
  double c0 = proc_cpu_s(g.ctl.pid), w0 = now_s();
  cw_test_sleep_ms((int)(hb_window_s * 1000));
  r.hb_cpu_pct = 100.0 * (proc_cpu_s(g.ctl.pid) - c0) / (now_s() - w0);
  r.ctl_rss_fleet_kib = proc_rss_kib(g.ctl.pid);
  r.kib_per_worker = (double)(r.ctl_rss_fleet_kib - r.ctl_rss_idle_kib) / n;
  r.rss_mib = (double)r.ctl_rss_fleet_kib / 1024.0;

  // CPU in clock ticks (10 ms): the controller's share is averaged over 20 calls.
  double cli[5], cached[5], rpc[20], rpc_cpu = 0;
  for (int i = 0; i < 20; ++i) {
    bool polled = false;
    if (i < 5) cli[i] = cli_status_s(NULL, NULL);
    if (i < 5) cached[i] = cli_status_s("2", &polled);
    r.status_polled += polled;
    double t = now_s(), c = proc_cpu_s(g.ctl.pid);
    Causeway__V1__AdminStatus* st = admin_status();
    rpc[i] = now_s() - t;
    rpc_cpu += proc_cpu_s(g.ctl.pid) - c;
    if (st->n_workers != (size_t)n) die("status lists %zu workers, want %d", st->n_workers, n);
    protobuf_c_message_free_unpacked(&st->base, NULL);
  }
  r.status_cli_ms = median(cli, 5) * 1e3;
  r.status_cached_ms = median(cached, 5) * 1e3;
  r.status_rpc_ms = median(rpc, 20) * 1e3;
  r.status_cpu_ms = rpc_cpu / 20 * 1e3;

  // A first compile of the sessions' program (a miss: the worker compiles),
  // kept in the disk cache before the controller dies.
  {
    session_t probe;
    memset(&probe, 0, sizeof(probe));
    session_open(&probe, "probe", "w0");
    r.compile_miss_ms = probe.compile_s * 1e3;
    session_close(&probe);
    double t = now_s();
    while (count_files(cache_dir) < 1) {
      if (now_s() - t > 30) die("no compile cache entry in %s after 30 s", cache_dir);
      cw_test_sleep_ms(10);
    }
  }

  // The controller dies (SIGKILL) and a new one listens on its address: the
  // running workers register again by themselves.
  cw_client_release(g_admin);
  g_admin = NULL;
  cw_test_process_kill(&g.ctl);
  char address[512];
  snprintf(address, sizeof(address), "%s", g.ctl_address);
  const char* again[] = {"--max-connections", max_conn, "--worker-timeout-ms", timeout,
                         "--compile-cache-dir", cache_dir, "--listen", address, NULL};
  double t1 = now_s();
  if (cw_test_controller_start(again, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    die("the restarted controller did not start");
  }
  CHECK_OK(cw_client_connect(g.ctl_address, &ao, &g_admin), "admin connect");
  while ((alive = alive_workers()) < (size_t)n) {
    if (now_s() - t1 > 120) die("%zu of %d workers registered again after 120 s", alive, n);
    cw_test_sleep_ms(20);
  }
  r.reregister_s = now_s() - t1;

  // Sessions: one per worker w0..w(S-1), then S sharing w0's island.
  for (int k = 0; k < sessions; ++k) {
    char name[32], worker[16];
    snprintf(name, sizeof(name), "distinct-%d", k);
    snprintf(worker, sizeof(worker), "w%d", k);
    session_open(&g_distinct[k], name, worker);
  }
  // distinct-0 found the program on disk; the others in memory.
  r.compile_disk_ms = g_distinct[0].compile_s * 1e3;
  double hits[MAX_SESSIONS];
  for (int k = 1; k < sessions; ++k) hits[k - 1] = g_distinct[k].compile_s;
  r.compile_hit_ms = sessions > 1 ? median(hits, sessions - 1) * 1e3 : -1;
  {
    Causeway__V1__AdminStatus* st = admin_status();
    r.compiles_run = (double)st->cache_misses;
    r.compile_requests = (double)st->compiles;
    protobuf_c_message_free_unpacked(&st->base, NULL);
  }
  r.distinct_lps = launch_all(g_distinct, sessions, launches);
  for (int k = 0; k < sessions; ++k) {
    char name[32];
    snprintf(name, sizeof(name), "shared-%d", k);
    session_open(&g_shared[k], name, "w0");
  }
  r.shared_lps = launch_all(g_shared, sessions, launches);

  // SIGKILL w0: every session on it is told (the shared ones and distinct-0).
  session_t* told[2 * MAX_SESSIONS];
  int num_told = 0;
  for (int k = 0; k < sessions; ++k) {
    atomic_store(&g_shared[k].expect_down, "w0");
    told[num_told++] = &g_shared[k];
  }
  atomic_store(&g_distinct[0].expect_down, "w0");
  told[num_told++] = &g_distinct[0];
  atomic_store(&g_down[0], true);
  double t_kill = now_s();
  kill(g.workers[0], SIGKILL);
  waitpid(g.workers[0], NULL, 0);
  g.workers[0] = 0;
  r.kill_told_ms = (wait_told(told, num_told, 10) - t_kill) * 1e3;
  // SIGSTOP w1 (when there is a session on it): the timeout decides.
  r.stop_told_ms = -1;
  if (sessions > 1) {
    atomic_store(&g_distinct[1].expect_down, "w1");
    session_t* one[1] = {&g_distinct[1]};
    atomic_store(&g_down[1], true);
    double t_stop = now_s();
    kill(g.workers[1], SIGSTOP);
    g.stopped_w1 = true;
    r.stop_told_ms = (wait_told(one, 1, 10 + g.timeout_ms / 1000.0) - t_stop) * 1e3;
  }
  for (int k = 0; k < sessions; ++k) {
    if (atomic_load(&g_distinct[k].wrong_events) || atomic_load(&g_shared[k].wrong_events)) {
      die("a session was told of a worker that did not go down");
    }
  }
  for (int k = 0; k < sessions; ++k) {
    session_close(&g_distinct[k]);
    session_close(&g_shared[k]);
  }
  end_fleet();
  atomic_store(&g_down[0], false);
  atomic_store(&g_down[1], false);
  return r;
}

// ---- Sessions on one shared island ------------------------------------------------------------

// S sessions (each a thread with its own connection) share worker w0's
// island and launch `total` launches among them through the controller's
// island scheduler: its cost per launch should not grow with S.
typedef struct curve_s {
  int sessions;
  double lps, ctl_us_per_launch, open_s;
} curve_t;

static curve_t run_shared(int sessions, uint64_t total) {
  curve_t c = {.sessions = sessions};
  double t0 = now_s();
  for (int k = 0; k < sessions; ++k) {
    char name[32];
    snprintf(name, sizeof(name), "shared-%d", k);
    session_open(&g_shared[k], name, "w0");
  }
  c.open_s = now_s() - t0;
  uint64_t each = total / (uint64_t)sessions;
  if (each < 1) each = 1;
  double cpu0 = proc_cpu_s(g.ctl.pid);
  c.lps = launch_all(g_shared, sessions, each);
  double cpu = proc_cpu_s(g.ctl.pid) - cpu0;
  c.ctl_us_per_launch = cpu * 1e6 / ((double)each * sessions);
  for (int k = 0; k < sessions; ++k) session_close(&g_shared[k]);
  return c;
}

static void shared_curve(const int* counts, int num, uint64_t total) {
  if (cw_test_tempdir_create("cw-fleet", g.dir, sizeof(g.dir)) != 0) die("temporary directory");
  int most = 1;
  for (int i = 0; i < num; ++i) most = counts[i] > most ? counts[i] : most;
  char max_conn[16];
  snprintf(max_conn, sizeof(max_conn), "%d", 4 * most + 64);
  const char* args[] = {"--max-connections", max_conn, NULL};
  if (cw_test_controller_start(args, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    die("controller did not start");
  }
  cw_client_options_t ao = {.peer_name = "fleet-admin"};
  CHECK_OK(cw_client_connect(g.ctl_address, &ao, &g_admin), "admin connect");
  char log_path[300];
  snprintf(log_path, sizeof(log_path), "%s/workers.log", g.dir);
  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) die("%s: %s", log_path, strerror(errno));
  g.workers = calloc(1, sizeof(pid_t));
  g.num_workers = 1;
  if (pipe(g.watch) != 0 || fcntl(g.watch[1], F_SETFD, FD_CLOEXEC) != 0) die("pipe");
  g.workers[0] = spawn_worker(0, log_fd);
  close(log_fd);
  double t0 = now_s();
  while (alive_workers() < 1) {
    if (now_s() - t0 > 60) die("the worker did not register (see %s)", log_path);
    cw_test_sleep_ms(20);
  }
  curve_t res[MAX_SIZES];
  for (int i = 0; i < num; ++i) {
    fprintf(stderr, "fleet_bench: %d sessions on one shared island ...\n", counts[i]);
    res[i] = run_shared(counts[i], total);
  }
  end_fleet();
  printf("sessions on one shared island: one controller, one worker of 8 null devices; %llu "
         "launches in all through the island's scheduler, split among the sessions; %ld CPU "
         "cores\n\n", (unsigned long long)total, sysconf(_SC_NPROCESSORS_ONLN));
  printf("  %-10s %14s %16s %16s\n", "sessions", "launches/s", "controller us/l", "opening (s)");
  for (int i = 0; i < num; ++i) {
    printf("  %-10d %14.0f %16.2f %16.2f\n", res[i].sessions, res[i].lps,
           res[i].ctl_us_per_launch, res[i].open_s);
  }
  printf("\nok: every launch succeeded\n");
}

// ---- main -------------------------------------------------------------------------------------

static void usage(void) {
  fprintf(stderr,
          "usage: fleet_bench [--quick] [--sizes 10,100,1000] [--sessions S] [--launches L]\n"
          "                   [--nullplugin PATH] [--shared-curve 10,100,1000 [--total T]]\n");
  exit(2);
}

// One row of the table: a figure of every fleet (a double of result_t).
typedef struct row_s {
  const char* what;
  const char* target;
  size_t field;  // offsetof(result_t, ...)
  const char* fmt;
} row_t;

#define ROW(what, target, field, fmt) {what, target, offsetof(result_t, field), fmt}

static const row_t g_rows[] = {
    ROW("registration of all N (s)", "< 10 s", register_s, "%.2f"),
    ROW("  of which forking the N workers (s)", "", spawn_s, "%.2f"),
    ROW("  controller CPU meanwhile (s)", "", register_cpu_s, "%.2f"),
    ROW("re-registration, controller restarted (s)", "< 10 s", reregister_s, "%.2f"),
    ROW("causeway status --json (ms, CLI wall)", "< 200 ms", status_cli_ms, "%.1f"),
    ROW("  with --max-age 2: the last poll's (ms)", "< 200 ms", status_cached_ms, "%.1f"),
    ROW("    of which from the poll (of 5)", "", status_polled, "%.0f"),
    ROW("ADMIN_STATUS round trip (ms)", "", status_rpc_ms, "%.1f"),
    ROW("  controller CPU per ADMIN_STATUS (ms)", "", status_cpu_ms, "%.1f"),
    ROW("controller CPU, heartbeats only (% core)", "< 5%", hb_cpu_pct, "%.2f"),
    ROW("controller RSS with the fleet (MiB)", "", rss_mib, "%.1f"),
    ROW("controller memory per worker (KiB)", "< 64 KiB", kib_per_worker, "%.1f"),
    ROW("compile at the client, first (ms; worker)", "", compile_miss_ms, "%.2f"),
    ROW("  after a restart, from the disk cache (ms)", "< 5 ms", compile_disk_ms, "%.2f"),
    ROW("  from the memory cache (ms, median)", "< 5 ms", compile_hit_ms, "%.2f"),
    ROW("S sessions' same program: COMPILE requests", "", compile_requests, "%.0f"),
    ROW("  of which compiled (memory cache misses)", "1", compiles_run, "%.0f"),
    ROW("launches/s, S sessions on distinct islands", ">= 20000", distinct_lps, "%.0f"),
    ROW("launches/s, S sessions on one shared island", "", shared_lps, "%.0f"),
    ROW("SIGKILL of w0 -> all sessions told (ms)", "", kill_told_ms, "%.1f"),
    // Target NULL: the timeout + 1 s, known at run time.
    ROW("SIGSTOP of w1 -> its session told (ms)", NULL, stop_told_ms, "%.0f"),
};

static void print_row(const row_t* row, const char* target, const result_t* r, int n) {
  printf("  %-44s %-12s", row->what, target);
  for (int i = 0; i < n; ++i) {
    char cell[32];
    double v = *(const double*)((const char*)&r[i] + row->field);
    if (v < 0) snprintf(cell, sizeof(cell), "-");
    else snprintf(cell, sizeof(cell), row->fmt, v);
    printf(" %12s", cell);
  }
  printf("\n");
}

int main(int argc, char** argv) {
  bool quick = false;
  int sizes[MAX_SIZES] = {10, 100, 1000}, num_sizes = 3, sessions = 100;
  long launches = 2000;
  const char* plugin = NULL;
  bool sizes_given = false, sessions_given = false, launches_given = false;
  int curve[MAX_SIZES], num_curve = 0;
  long total = 200000;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) {
      quick = true;
    } else if (!strcmp(a, "--sizes") && v) {
      num_sizes = 0;
      for (const char* p = v; *p && num_sizes < MAX_SIZES;) {
        char* end = NULL;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 5000) usage();
        sizes[num_sizes++] = (int)x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') usage();
      }
      sizes_given = true, ++i;
    } else if (!strcmp(a, "--sessions") && v) {
      sessions = atoi(v), sessions_given = true, ++i;
      if (sessions < 1 || sessions > MAX_SESSIONS) usage();
    } else if (!strcmp(a, "--launches") && v) {
      launches = atol(v), launches_given = true, ++i;
      if (launches < 1) usage();
    } else if (!strcmp(a, "--shared-curve") && v) {
      for (const char* p = v; *p && num_curve < MAX_SIZES;) {
        char* end = NULL;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > MAX_SESSIONS) usage();
        curve[num_curve++] = (int)x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') usage();
      }
      ++i;
    } else if (!strcmp(a, "--total") && v) {
      total = atol(v), ++i;
      if (total < 1) usage();
    } else if (!strcmp(a, "--nullplugin") && v) {
      plugin = v, ++i;
    } else {
      usage();
    }
  }
  // Short in the full run, so the SIGSTOP figure comes soon; the default in
  // the quick one, so a slow CI machine does not see workers die that live.
  g.timeout_ms = quick ? 5000 : 2000;
  if (quick) {
    if (!sizes_given) sizes[0] = 10, sizes[1] = 30, num_sizes = 2;
    if (!sessions_given) sessions = 10;
    if (!launches_given) launches = 20;
  }
  signal(SIGPIPE, SIG_IGN);
  ssize_t len = readlink("/proc/self/exe", g.bin_dir, sizeof(g.bin_dir) - 1);
  g.bin_dir[len > 0 ? len : 0] = '\0';
  char* slash = strrchr(g.bin_dir, '/');
  if (slash) *slash = '\0';
  static char wb[600], cb[600], lb[600], pb[600];
  g.worker_bin = beside("CW_WORKER_BIN", "causeway-worker", wb, sizeof(wb));
  g.ctl_bin = beside("CW_CONTROLLER_BIN", "causeway-controller", cb, sizeof(cb));
  setenv("CW_CONTROLLER_BIN", g.ctl_bin, 1);
  g.cli_bin = beside("CW_CLI_BIN", "causeway", lb, sizeof(lb));
  g.plugin = plugin ? plugin : beside("CW_NULLPLUGIN", "../lib/libcw_nullplugin.so", pb,
                                      sizeof(pb));
  // 1,000 workers' connections and the sessions': the controller inherits this.
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  if (num_curve) {
    shared_curve(curve, num_curve, (uint64_t)total);
    return 0;
  }
  result_t res[MAX_SIZES];
  double hb_window = quick ? 1.0 : 5.0;
  for (int i = 0; i < num_sizes; ++i) {
    int s = sessions < sizes[i] ? sessions : sizes[i];
    fprintf(stderr, "fleet_bench: %d workers x 8 null devices, %d sessions ...\n", sizes[i], s);
    res[i] = run_fleet(sizes[i], s, (uint64_t)launches, hb_window);
  }

  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("fleet bench%s: one controller, N causeway-worker processes of 8 null-plugin devices "
         "each, loopback TCP; %ld CPU cores\n",
         quick ? " (--quick: small fleets, few launches; numbers not meaningful)" : "", cores);
  printf("launches: cwnull f32[1] through the controller (relayed), %ld per session, pipelined; "
         "sessions: min(%d, N)\n",
         launches, sessions);
  printf("heartbeats: every 1000 ms per worker; controller --worker-timeout-ms %d; CPU over %.0f s "
         "idle\n\n",
         g.timeout_ms, hb_window);
  printf("  %-44s %-12s", "N workers", "target");
  for (int i = 0; i < num_sizes; ++i) printf(" %12d", res[i].n);
  printf("\n");
  char stop_target[32];
  snprintf(stop_target, sizeof(stop_target), "< %d ms", g.timeout_ms + 1000);
  for (size_t k = 0; k < sizeof(g_rows) / sizeof(g_rows[0]); ++k) {
    print_row(&g_rows[k], g_rows[k].target ? g_rows[k].target : stop_target, res, num_sizes);
  }
  printf("\nok: %d fleets; every launch succeeded, every session was told of the right worker\n",
         num_sizes);
  return 0;
}
