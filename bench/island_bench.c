// island_bench: launch throughput through the controller on an island that
// spans two worker processes, beside a one-worker island of the same plugin
// measured in the same run.
//
// It starts a controller and four workers over the gang test plugin
// (tests/gangplugin, docs/gangplugin.md): gang0 and gang1 form island "gang"
// (--island gang --island-size 2, CW_GANG_SIZE=2, 2 devices each); "base"
// (2 devices, the baseline) and "base4" (4 devices, the island's count) are
// islands of one (CW_GANG_SIZE=1, each its own CW_GANG_DIR). For S in
// {1, 4} concurrent sessions (threads, each its own shared controller session
// naming its workers) on each island, every session compiles
// "allreduce_sum f32[16] sK" over its devices, uploads its inputs once, and
// pipelines L launches through the controller (then one flush).
// The launch phase is timed from the moment all sessions start (a barrier)
// until the last one's flush returns.
//
// Every launch gets fresh output ids: the worker refuses a launch whose
// output id exists (ALREADY_EXISTS), which on an island cancels the whole
// launch. As JAX drops a chain's old arrays, each 1,024 launches' outputs are
// deleted (straight on the worker links) once a later 1,024 went out and they
// are answered: a worker holds a few thousand outputs, not every launch's
// (until session 53 they all lived until the session closed, 160,000 a worker
// at 40,000 launches, and the store's lookups then cost more per launch).
//
// At the end of each run one output of the last launch is downloaded from
// each device and compared with the sum; a mismatch or any error exits 1.
// Nothing is asserted about speed. --quick: a few launches (CTest
// `island_bench_quick`).
//
// A second table says where the CPU went: each process's user + system time
// (/proc/PID/stat; this process's for the sessions) over each run, per launch.
// On two cores an island whose launch costs more than twice the baseline's
// CPU cannot reach half the baseline's rate. The workers' gang-plugin threads
// (cw-gang) are also counted apart: they are the test plugin's stand-in for a
// device and its interconnect, whose rendezvous costs an island's members host
// CPU that a real device's collectives would not.
//
// --core-per-worker pins each worker process to one core, as if each had a
// host of one core to itself: gang1 to the second core, the others to the
// first (the controller and the sessions stay free). Without it the island's
// two workers share the cores that the baseline's one worker has alone, so on
// a 2-core machine the island does twice the device work on the same cores.
//
// Usage: island_bench [--quick] [--launches N] [--plugin PATH] [--gangplugin PATH]
//                     [--core-per-worker]
//   --plugin: the plugin under the gang plugin (default $CAUSEWAY_PJRT_PLUGIN);
//   --gangplugin: default $CW_GANGPLUGIN, else ../lib/libcw_gangplugin.so
//   beside this executable. causeway-worker and causeway-controller come
//   from $CW_WORKER_BIN / $CW_CONTROLLER_BIN, else beside this executable.

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cw_test_island.h"

#define ELEMS 16
#define MAX_DEVS 4
#define MAX_SESSIONS 4
// A session's executables and buffers share one id space on a worker.
#define EXE 1
#define IN_BASE 100    // input of device d: IN_BASE + d
#define OUT_BASE 1000  // output of launch i on device d: OUT_BASE + i * devices + d

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// ---- Processes ------------------------------------------------------------------------

static struct {
  char dir[256];
  cw_test_process_t ctl;
  char ctl_address[512];
  cw_test_worker_t workers[4];  // gang0, gang1, base, base4
  bool core_per_worker;
  int chunk;  // launches whose outputs are deleted together (launch_range)
  cpu_set_t all_cores;  // this process's own affinity, restored after each worker's start
} g;

// Stops what was started; false when a process did not exit cleanly.
static bool stop_all(void) {
  bool ok = true;
  for (int i = 0; i < 4; ++i) {
    if (g.workers[i].process.pid && cw_test_worker_stop(&g.workers[i], 30000) != 0) ok = false;
  }
  if (g.ctl.pid && cw_test_process_stop(&g.ctl, 30000) != 0) ok = false;
  if (g.dir[0]) cw_test_tempdir_remove(g.dir);
  g.dir[0] = '\0';
  return ok;
}

static void die(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "island_bench: FAILED: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  stop_all();
  exit(1);
}

// The directory of this executable (for the binaries built beside it).
static void exe_dir(char* out, size_t capacity) {
  ssize_t n = readlink("/proc/self/exe", out, capacity - 1);
  if (n <= 0) n = 0;
  out[n] = '\0';
  char* slash = strrchr(out, '/');
  if (slash) *slash = '\0';
  else snprintf(out, capacity, ".");
}

// Sets `var` to `path` unless it is set already; the path must exist.
static void default_env(const char* var, const char* path) {
  if (!cw_test_getenv(var, NULL)) setenv(var, path, 1);
  if (access(getenv(var), R_OK) != 0) die("%s: %s does not exist (build it)", var, getenv(var));
}

// Pins this thread to the k-th core this process may run on (modulo their
// number: with one core, every worker shares it).
static void pin_to_core(int k) {
  int n = CPU_COUNT(&g.all_cores);
  if (n < 1) die("no core in this process's affinity");
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &g.all_cores) || seen++ != k % n) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) die("sched_setaffinity to core %d", cpu);
    return;
  }
}

// Gives every thread of this process its first affinity back, those a start
// created while this thread was pinned included.
static void unpin_all_threads(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) die("opendir /proc/self/task");
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);
    // A thread that exited meanwhile (ESRCH) needs nothing.
    if (tid > 0 && sched_setaffinity(tid, sizeof(g.all_cores), &g.all_cores) != 0 &&
        errno != ESRCH) {
      die("restoring the affinity of thread %d: %s", (int)tid, strerror(errno));
    }
  }
  closedir(d);
}

static void start_processes(void) {
  if (cw_test_tempdir_create("cw-ibench", g.dir, sizeof(g.dir)) != 0) die("temporary directory");
  char gang_dir[300], base_dir[300], base4_dir[300];
  snprintf(gang_dir, sizeof(gang_dir), "%s/gang", g.dir);
  snprintf(base_dir, sizeof(base_dir), "%s/base", g.dir);
  snprintf(base4_dir, sizeof(base4_dir), "%s/base4", g.dir);
  if (mkdir(gang_dir, 0700) != 0 || mkdir(base_dir, 0700) != 0 || mkdir(base4_dir, 0700) != 0) {
    die("mkdir in %s", g.dir);
  }
  if (cw_test_controller_start(NULL, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    die("controller did not start");
  }
  cw_test_gang_worker_options_t o[4] = {
      {.dir = gang_dir, .rank = 0, .size = 2, .name = "gang0", .island = "gang"},
      {.dir = gang_dir, .rank = 1, .size = 2, .name = "gang1", .island = "gang"},
      {.dir = base_dir, .rank = 0, .size = 1, .name = "base"},
      {.dir = base4_dir, .rank = 0, .size = 1, .name = "base4"},
  };
  for (int i = 0; i < 4; ++i) {
    o[i].controller = g.ctl_address;
    o[i].devices = i == 3 ? 4 : 2;
    // A worker inherits this thread's affinity at fork, and its threads the
    // worker's: set it around the start.
    if (g.core_per_worker) pin_to_core(i == 1 ? 1 : 0);
    int rc = cw_test_gang_worker_start(&o[i], &g.workers[i]);
    if (g.core_per_worker) unpin_all_threads();
    if (rc != 0) die("worker %s", o[i].name);
  }
}

// ---- Sessions -------------------------------------------------------------------------

typedef struct island_s {
  const char* label;
  const char* const* workers;  // in rank order
  size_t num_workers;
  uint32_t devices;
} island_t;

typedef struct session_run_s {
  const island_t* island;
  int k, num_sessions, launches, warmup;
  pthread_barrier_t* start;
  double t0, t1;
  char error[512];  // first failure
} session_run_t;

static void run_fail(session_run_t* r, cw_status_t st, const char* what) {
  if (!r->error[0]) {
    snprintf(r->error, sizeof(r->error), "%s session %d of %d: %s: %s", r->island->label, r->k,
             r->num_sessions, what, st ? cw_status_message(st) : "failed");
  }
  cw_status_free(st);
}

#define MAX_CHUNK 1024

static float input_value(int k, int d, int j) { return (float)(k * 100 + d * 10 + j); }

// Deletes the outputs of launches [first, first + count) on each device's
// worker, as JAX drops a chain's old arrays (pipelined on the worker links).
static cw_status_t free_range(cw_test_session_t* s, const int64_t* ids, uint32_t n, int first,
                              int count) {
  uint64_t del[MAX_CHUNK];
  cw_status_t st = cw_ok_status();
  for (uint32_t d = 0; d < n && !st; ++d) {
    cw_client_t* link = NULL;
    int local = 0;
    st = cw_test_session_locate(s, ids[d], &link, &local);
    for (int i = 0; i < count && !st; ++i) del[i] = OUT_BASE + (uint64_t)(first + i) * n + d;
    if (!st) st = cw_client_delete(link, del, (size_t)count, NULL, NULL);
  }
  return st;
}

typedef struct answers_s {
  atomic_int count;
  atomic_int want;  // the count a waiter waits for; 0: none waits
  atomic_bool failed;  // first_error is set: the sender stops
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cw_status_t first_error;  // guarded by mu
} answers_t;

static void launch_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  answers_t* a = user;
  if (status) {
    pthread_mutex_lock(&a->mu);
    if (!a->first_error) a->first_error = status;
    else cw_status_free(status);
    pthread_mutex_unlock(&a->mu);
    atomic_store(&a->failed, true);
  }
  int count = atomic_fetch_add(&a->count, 1) + 1;
  int want = atomic_load(&a->want);  // after the count: see answers_wait
  if (want && count >= want) {
    pthread_mutex_lock(&a->mu);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
  }
}

// Waits until `n` launches are answered (a failed one is answered too: its
// error). The want is stored before the count is read, and launch_done reads
// the want after it counts (both sequentially consistent): either this sees
// the count or launch_done sees the want and signals under the lock.
static void answers_wait(answers_t* a, int n) {
  pthread_mutex_lock(&a->mu);
  atomic_store(&a->want, n);
  while (atomic_load(&a->count) < n) {
    pthread_cond_wait(&a->cv, &a->mu);
  }
  atomic_store(&a->want, 0);
  pthread_mutex_unlock(&a->mu);
}

// Pipelines launches [first, first + count) of EXE and waits for them. Once a
// chunk's launches are answered and another chunk went out after them, that
// chunk's outputs are deleted, so a worker holds a few chunks' outputs, not
// every launch's (the last chunk's stay for verify()).
static cw_status_t launch_range(cw_test_session_t* s, const int64_t* ids, uint32_t n, int first,
                                int count) {
  uint64_t in[MAX_DEVS], out[MAX_DEVS];
  answers_t answers = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  cw_status_t st = cw_ok_status();
  int freed = first;  // launches before it have their outputs deleted
  for (int i = first; i < first + count && !st; ++i) {
    for (uint32_t d = 0; d < n; ++d) {
      in[d] = IN_BASE + d;
      out[d] = OUT_BASE + (uint64_t)i * n + d;
    }
    st = cw_test_gang_launch_cb(s, EXE, in, out, n, launch_done, &answers);
    if (st || atomic_load(&answers.failed)) break;
    if (i + 1 - freed < 2 * g.chunk) continue;
    // Once launches [freed, freed + chunk) are answered, their outputs are
    // on every member and a DELETE on a worker link cannot overtake them.
    // At least a chunk of launches stays in flight while this waits.
    answers_wait(&answers, freed + g.chunk - first);
    st = free_range(s, ids, n, freed, g.chunk);
    freed += g.chunk;
  }
  // Every launch answered (their callbacks use `answers`), whatever failed.
  cw_status_t flushed = cw_client_flush(s->ctl);
  if (!st) st = flushed;
  else cw_status_free(flushed);
  if (!st) st = answers.first_error;
  else cw_status_free(answers.first_error);
  if (!st) st = cw_test_session_flush(s);
  pthread_cond_destroy(&answers.cv);
  pthread_mutex_destroy(&answers.mu);
  return st;
}

// Every device's output of launch `last` is the sum over the devices, and
// the outputs of launch `first` were deleted if launch_range deleted any.
static void verify(session_run_t* r, cw_test_session_t* s, const int64_t* ids, int first,
                   int last) {
  uint32_t n = r->island->devices;
  if (last + 1 - first >= 2 * g.chunk) {
    for (uint32_t d = 0; d < n && !r->error[0]; ++d) {
      float got[ELEMS];
      uint64_t id = OUT_BASE + (uint64_t)first * n + d;
      cw_status_t st = cw_test_session_download_f32(s, ids[d], id, got, ELEMS);
      if (cw_status_code(st) != CW_NOT_FOUND) {
        snprintf(r->error, sizeof(r->error), "%s session %d: output %llu of launch %d was not "
                 "deleted: %s", r->island->label, r->k, (unsigned long long)id, first,
                 st ? cw_status_message(st) : "its download worked");
      }
      cw_status_free(st);
    }
  }
  for (uint32_t d = 0; d < n && !r->error[0]; ++d) {
    float got[ELEMS];
    uint64_t id = OUT_BASE + (uint64_t)last * n + d;
    cw_status_t st = cw_test_session_download_f32(s, ids[d], id, got, ELEMS);
    if (st) {
      run_fail(r, st, "download");
      return;
    }
    for (int j = 0; j < ELEMS; ++j) {
      float want = 0;
      for (uint32_t e = 0; e < n; ++e) want += input_value(r->k, (int)e, j);
      if (got[j] != want) {
        snprintf(r->error, sizeof(r->error), "%s session %d: device %u [%d] = %g, want %g",
                 r->island->label, r->k, d, j, (double)got[j], (double)want);
        return;
      }
    }
  }
}

// Open, compile, upload and warm up; false (r->error set) on failure.
static bool prepare(session_run_t* r, cw_test_session_t* s, int64_t* ids) {
  const island_t* is = r->island;
  char name[64], tag[16];
  snprintf(name, sizeof(name), "ibench-%s-%d-%d", is->label, r->num_sessions, r->k);
  snprintf(tag, sizeof(tag), "s%d", r->k);
  cw_test_session_options_t o = {.controller = g.ctl_address,
                                 .name = name,
                                 .workers = is->workers,
                                 .num_workers = is->num_workers,
                                 .num_devices = is->devices,
                                 .min_workers = 4};
  cw_status_t st = cw_test_session_open(&o, s);
  if (st) {
    run_fail(r, st, "open");
    return false;
  }
  if (cw_test_session_ids(s, is->workers, is->num_workers, ids, MAX_DEVS) != is->devices) {
    run_fail(r, NULL, "the session's devices are not on the named workers");
    return false;
  }
  st = cw_test_gang_compile(s, EXE, ELEMS, tag, ids, is->devices);
  if (st) {
    run_fail(r, st, "compile");
    return false;
  }
  for (uint32_t d = 0; d < is->devices && !st; ++d) {
    float data[ELEMS];
    for (int j = 0; j < ELEMS; ++j) data[j] = input_value(r->k, (int)d, j);
    st = cw_test_session_upload_f32(s, ids[d], IN_BASE + d, data, ELEMS);
  }
  if (!st) st = cw_test_session_flush(s);
  if (st) {
    run_fail(r, st, "upload");
    return false;
  }
  // Warm-up: the first launches load the executable's parts on the workers.
  st = launch_range(s, ids, is->devices, 0, r->warmup);
  if (st) {
    run_fail(r, st, "warm-up launch");
    return false;
  }
  return true;
}

static void* session_main(void* arg) {
  session_run_t* r = arg;
  cw_test_session_t s;
  int64_t ids[MAX_DEVS];
  bool ready = prepare(r, &s, ids);
  pthread_barrier_wait(r->start);  // every thread gets here, ready or not
  r->t0 = now_s();
  if (ready) {
    cw_status_t st = launch_range(&s, ids, r->island->devices, r->warmup, r->launches);
    r->t1 = now_s();
    if (st) run_fail(r, st, "launch");
    else verify(r, &s, ids, r->warmup, r->warmup + r->launches - 1);
  }
  cw_test_session_close(&s);
  return NULL;
}

// Runs `num` sessions on `island` at once; returns the launch phase's wall
// time (first start to last flush), or dies on any error.
static double run_sessions(const island_t* island, int num, int launches, int warmup) {
  session_run_t runs[MAX_SESSIONS];
  pthread_t threads[MAX_SESSIONS];
  pthread_barrier_t start;
  if (pthread_barrier_init(&start, NULL, (unsigned)num) != 0) die("pthread_barrier_init");
  memset(runs, 0, sizeof(runs));
  for (int k = 0; k < num; ++k) {
    runs[k] = (session_run_t){.island = island, .k = k, .num_sessions = num,
                              .launches = launches, .warmup = warmup, .start = &start};
    if (pthread_create(&threads[k], NULL, session_main, &runs[k]) != 0) die("pthread_create");
  }
  for (int k = 0; k < num; ++k) pthread_join(threads[k], NULL);
  pthread_barrier_destroy(&start);
  double t0 = runs[0].t0, t1 = runs[0].t1;
  for (int k = 0; k < num; ++k) {
    if (runs[k].error[0]) die("%s", runs[k].error);
    if (runs[k].t0 < t0) t0 = runs[k].t0;
    if (runs[k].t1 > t1) t1 = runs[k].t1;
  }
  return t1 - t0;
}

// ---- CPU by process -------------------------------------------------------------------

// CPU seconds (user + system) a process or thread has used, from
// /proc/WHAT/stat, and its name (comm, up to `cap` bytes) when `comm` is
// given; 0 and "" when it cannot be read (the table then shows what could be).
static double proc_cpu_s_at(const char* what, char* comm, size_t cap) {
  char path[160], buf[1024];
  if (comm) comm[0] = '\0';
  snprintf(path, sizeof(path), "/proc/%s/stat", what);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char* open = strchr(buf, '(');
  char* p = strrchr(buf, ')');  // the name may hold spaces
  unsigned long utime = 0, stime = 0;
  // After ") ": state, then fields 4..13, then utime (14) and stime (15).
  if (!open || !p || p < open ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) {
    return 0;
  }
  if (comm) snprintf(comm, cap, "%.*s", (int)(p - open - 1), open + 1);
  return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static double proc_cpu_s(pid_t pid) {
  char what[32];
  snprintf(what, sizeof(what), "%d", (int)pid);
  return proc_cpu_s_at(what, NULL, 0);
}

// The same for those threads of process `pid` named `name` (/proc/PID/task).
static double threads_cpu_s(pid_t pid, const char* name) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR* d = opendir(path);
  if (!d) return 0;
  double sum = 0;
  for (struct dirent* e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char what[96], comm[64];
    snprintf(what, sizeof(what), "%d/task/%s", (int)pid, e->d_name);
    double cpu = proc_cpu_s_at(what, comm, sizeof(comm));
    if (!strcmp(comm, name)) sum += cpu;
  }
  closedir(d);
  return sum;
}

static double self_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

// CPU of the controller, the four workers and the sessions (this process),
// then of each worker's gang-plugin executor threads (cw-gang: the test
// plugin's rendezvous and its inner plugin's execution, which stand in for a
// device and its interconnect).
#define CPU_SLOTS 10
#define CPU_GANG 6  // out[CPU_GANG + i]: worker i's cw-gang threads
static void cpu_sample(double out[CPU_SLOTS]) {
  out[0] = proc_cpu_s(g.ctl.pid);
  for (int i = 0; i < 4; ++i) out[1 + i] = proc_cpu_s(g.workers[i].process.pid);
  out[5] = self_cpu_s();
  for (int i = 0; i < 4; ++i) {
    out[CPU_GANG + i] = threads_cpu_s(g.workers[i].process.pid, "cw-gang");
  }
}

// ---- main -----------------------------------------------------------------------------

static void usage(void) {
  fprintf(stderr, "usage: island_bench [--quick] [--launches N] [--plugin PATH] "
                  "[--gangplugin PATH] [--core-per-worker]\n");
  exit(2);
}

int main(int argc, char** argv) {
  bool quick = false;
  long launches = 0;
  const char* plugin = NULL;
  const char* gangplugin = NULL;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) {
      quick = true;
    } else if (!strcmp(a, "--launches") && v) {
      launches = strtol(v, NULL, 10), ++i;
      if (launches < 1 || launches > 1000000) usage();
    } else if (!strcmp(a, "--plugin") && v) {
      plugin = v, ++i;
    } else if (!strcmp(a, "--gangplugin") && v) {
      gangplugin = v, ++i;
    } else if (!strcmp(a, "--core-per-worker")) {
      g.core_per_worker = true;
    } else {
      usage();
    }
  }
  if (!launches) launches = quick ? 20 : 5000;  // full run: ~15 s on 2 cores
  g.chunk = quick ? 4 : MAX_CHUNK;              // --quick deletes outputs too
  int warmup = quick ? 2 : 20;
  signal(SIGPIPE, SIG_IGN);

  char dir[PATH_MAX - 64], path[PATH_MAX];
  exe_dir(dir, sizeof(dir));
  if (plugin) setenv("CAUSEWAY_PJRT_PLUGIN", plugin, 1);
  if (!cw_test_getenv("CAUSEWAY_PJRT_PLUGIN", NULL)) {
    fprintf(stderr, "island_bench: no plugin: pass --plugin PATH or set CAUSEWAY_PJRT_PLUGIN\n");
    return 2;
  }
  if (gangplugin) setenv("CW_GANGPLUGIN", gangplugin, 1);
  snprintf(path, sizeof(path), "%s/../lib/libcw_gangplugin.so", dir);
  default_env("CW_GANGPLUGIN", path);
  snprintf(path, sizeof(path), "%s/causeway-worker", dir);
  default_env("CW_WORKER_BIN", path);
  snprintf(path, sizeof(path), "%s/causeway-controller", dir);
  default_env("CW_CONTROLLER_BIN", path);

  if (g.core_per_worker && sched_getaffinity(0, sizeof(g.all_cores), &g.all_cores) != 0) {
    die("sched_getaffinity: %s", strerror(errno));
  }
  start_processes();
  static const char* const gang_workers[] = {"gang0", "gang1"};
  static const char* const base_workers[] = {"base"};
  static const char* const base4_workers[] = {"base4"};
  // The target compares the island with one worker of 2 devices (the island's
  // worker); "1 worker x 4" runs the island's device count in one process.
  const island_t islands[3] = {
      {.label = "gang", .workers = gang_workers, .num_workers = 2, .devices = 4},
      {.label = "base", .workers = base_workers, .num_workers = 1, .devices = 2},
      {.label = "base4", .workers = base4_workers, .num_workers = 1, .devices = 4},
  };
  static const char* const row_names[3] = {"gang (2 workers x 2)", "1 worker x 2", "1 worker x 4"};
  const int sessions[2] = {1, 4};
  double wall[2][3];  // [sessions][island]
  double cpu[2][3][CPU_SLOTS];  // CPU seconds each process used in that run
  for (int si = 0; si < 2; ++si) {
    for (int ii = 0; ii < 3; ++ii) {
      double before[CPU_SLOTS], after[CPU_SLOTS];
      cpu_sample(before);
      wall[si][ii] = run_sessions(&islands[ii], sessions[si], (int)launches, warmup);
      cpu_sample(after);
      for (int c = 0; c < CPU_SLOTS; ++c) cpu[si][ii][c] = after[c] - before[c];
      fprintf(stderr, "island_bench: %s, %d session(s): %ld launches each in %.3f s\n",
              islands[ii].label, sessions[si], launches, wall[si][ii]);
    }
  }
  if (!stop_all()) {
    fprintf(stderr, "island_bench: FAILED: a worker or the controller did not exit cleanly\n");
    return 1;
  }

  printf("\nisland_bench: all-reduce f32[%d], %ld pipelined launches per session through the "
         "controller\n", ELEMS, launches);
  printf("  gang = island of 2 workers x 2 devices; 1 worker x 2 = the baseline; 1 worker x 4 = "
         "the island's\n  device count in one process; same plugin under the gang plugin: %s\n\n",
         cw_test_getenv("CAUSEWAY_PJRT_PLUGIN", ""));
  if (g.core_per_worker) {
    printf("  --core-per-worker: each worker pinned to one core as to a host of its own (gang1 "
           "to the second,\n  the others to the first); the controller and the sessions "
           "unpinned\n\n");
  }
  printf("%-20s %8s %12s %12s %11s %14s %14s\n", "island", "sessions", "launches/s",
         "per session", "us/launch", "vs 1 worker x2", "vs 1 worker x4");
  for (int si = 0; si < 2; ++si) {
    double base_rate = (double)sessions[si] * (double)launches / wall[si][1];
    double base4_rate = (double)sessions[si] * (double)launches / wall[si][2];
    for (int ii = 0; ii < 3; ++ii) {
      double total = (double)sessions[si] * (double)launches / wall[si][ii];
      printf("%-20s %8d %12.0f %12.0f %11.1f %13.2fx %13.2fx\n", row_names[ii], sessions[si],
             total, total / sessions[si], 1e6 / total, total / base_rate, total / base4_rate);
    }
  }
  printf("\n  us/launch = wall time / all sessions' launches; vs 1 worker x2 (the target's "
         "baseline) and x4 =\n  launches/s over that worker's at the same sessions\n");

  // Where the CPU went: each process's CPU over the run (opening the sessions,
  // the launches, the check) per launch. The island's launch costs its
  // controller hops and both members; on 2 cores a launch that costs more than
  // twice the baseline's CPU cannot reach half its rate.
  printf("\nCPU per launch (us, user + system, whole run per session count)\n");
  printf("%-20s %8s %11s %11s %13s %11s %11s %14s %15s\n", "island", "sessions", "controller",
         "its workers", "of it cw-gang", "sessions", "total", "vs 1 worker x2", "without cw-gang");
  for (int si = 0; si < 2; ++si) {
    double n = (double)sessions[si] * (double)(launches + warmup);
    double workers[3], gang[3], total[3];
    for (int ii = 0; ii < 3; ++ii) {
      const double* c = cpu[si][ii];
      workers[ii] = ii == 0 ? c[1] + c[2] : ii == 1 ? c[3] : c[4];
      gang[ii] = ii == 0 ? c[CPU_GANG] + c[CPU_GANG + 1] : c[CPU_GANG + 1 + ii];
      total[ii] = c[0] + workers[ii] + c[5];
    }
    for (int ii = 0; ii < 3; ++ii) {
      const double* c = cpu[si][ii];
      double own = total[ii] - gang[ii], base_own = total[1] - gang[1];
      printf("%-20s %8d %11.1f %11.1f %13.1f %11.1f %11.1f %13.2fx %14.2fx\n", row_names[ii],
             sessions[si], 1e6 * c[0] / n, 1e6 * workers[ii] / n, 1e6 * gang[ii] / n,
             1e6 * c[5] / n, 1e6 * total[ii] / n, total[1] > 0 ? total[ii] / total[1] : 0.0,
             base_own > 0 ? own / base_own : 0.0);
    }
  }
  printf("  (the sessions' CPU is this process's; the clock ticks are %ld per second; cw-gang:\n"
         "  the gang test plugin's executor threads, its cross-process rendezvous and the inner\n"
         "  plugin's execution, which stand in for a device and its interconnect; the last\n"
         "  column compares the totals without them)\n",
         sysconf(_SC_CLK_TCK));
  return 0;
}
