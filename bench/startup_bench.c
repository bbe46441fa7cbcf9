// startup_bench: start-up of the embedded cluster (PJRT_Client_Create of
// libcauseway_pjrt.so: a controller and its workers as child processes, a
// session, connections to every worker) with an empty and a full compile
// cache, on an idle machine and while CPU burners keep the cores busy.
//
// The full cache is --entries files in one directory, generated once and
// kept (a stamp file says what was generated): nine in ten are real entries
// (random keys, 1-8 KiB payloads, written by cw_compile_disk_write), the rest
// junk of six kinds: files shorter than a header, a foreign magic, a payload
// length that does not match, another key than the name says, stale
// temporary files, and files that are not the cache's. Junk a controller
// removes is written again before each start, so every start sees the same
// directory. The empty cache is a fresh directory per start.
//
// Burners: --burners child processes that spin until the phase ends (at most
// --burn-max-s seconds; they also die with this process).
//
// Every start must succeed: a failure prints its error and the run exits 1.
// Nothing is asserted about speed. --quick (CTest `startup_quick`): 5 starts
// with the full cache under 2 burners.
//
// Usage: startup_bench --pjrt-lib PATH --bin-dir DIR --cache DIR [--plugin PATH]
//          [--entries N] [--starts N] [--burners N] [--burn-max-s S] [--quick]
//          [--label TEXT]
//   --pjrt-lib: the libcauseway_pjrt.so to start (any build: bench/run.sh
//   measures an older one beside the current one); --bin-dir: its daemons;
//   --plugin: the XLA CPU plugin (default $CAUSEWAY_PJRT_PLUGIN).
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cw_bench_stats.h"
#include "cw_compile_disk.h"
#include "cw_pjrt_c_api.h"

#define STAMP_NAME ".startup-bench"
#define STAMP_VERSION 1
#define MAX_BURNERS 64
#define MAX_STARTS 1000

static const PJRT_Api* api;

static struct {
  const char* pjrt_lib;
  const char* bin_dir;
  const char* plugin;
  const char* cache;
  const char* label;
  int entries;
  int starts;
  int burners;
  int burn_max_s;
  bool quick;
} opt = {.label = "current", .entries = 20000, .starts = 30, .burners = 2, .burn_max_s = 600};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "startup_bench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

// ---- The cache directory ----------------------------------------------------------------

static uint64_t mix(uint64_t x) {  // splitmix64: junk and payloads are reproducible
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void fill(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)(mix(seed + i / 8) >> (8 * (i % 8)));
}

static void key_of(int i, const char* what, uint8_t out[CW_COMPILE_DISK_DIGEST_SIZE]) {
  char text[64];
  int n = snprintf(text, sizeof(text), "startup-bench %s %d", what, i);
  cw_status_t s = cw_compile_disk_digest(text, (size_t)n, out);
  if (s) die("digest: %s", cw_status_message(s));
}

static void write_file(const char* path, const void* data, size_t n, time_t mtime) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, data, n) != (ssize_t)n) die("write %s: %s", path, strerror(errno));
  close(fd);
  if (mtime) {
    struct timespec ts[2] = {{.tv_sec = mtime}, {.tv_sec = mtime}};
    utimensat(AT_FDCWD, path, ts, 0);
  }
}

// Junk file i: its path (malloc'd) and, with `write`, its bytes written.
static char* junk(int i, bool write) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE], other[CW_COMPILE_DISK_DIGEST_SIZE];
  key_of(i, "junk", key);
  char* path = NULL;
  cw_status_t s = cw_compile_disk_path(opt.cache, key, &path);
  if (s) die("%s", cw_status_message(s));
  uint8_t buf[CW_COMPILE_DISK_HEADER_SIZE + 512];
  uint8_t* payload = buf + CW_COMPILE_DISK_HEADER_SIZE;
  fill(payload, 512, (uint64_t)i);
  size_t n = sizeof(buf);
  time_t mtime = 0;
  switch (i % 6) {
    case 0:  // shorter than a header
      n = (size_t)(i % CW_COMPILE_DISK_HEADER_SIZE);
      fill(buf, n, (uint64_t)i * 7);
      break;
    case 1:  // not our magic
      fill(buf, n, (uint64_t)i * 7);
      break;
    case 2:  // a payload length that does not match the file
      s = cw_compile_disk_header_encode(key, payload, 512, buf);
      n -= 100;
      break;
    case 3:  // a header for another key
      key_of(i, "other", other);
      s = cw_compile_disk_header_encode(other, payload, 512, buf);
      break;
    case 4: {  // a writer that died two hours ago left its temporary file
      free(path);
      if (asprintf(&path, "%s/.tmp-bench%05d", opt.cache, i) < 0) die("out of memory");
      mtime = time(NULL) - 7200;
      break;
    }
    default: {  // not the cache's at all
      free(path);
      if (asprintf(&path, "%s/notes-%05d.txt", opt.cache, i) < 0) die("out of memory");
      break;
    }
  }
  if (s) die("%s", cw_status_message(s));
  if (write) write_file(path, buf, n, mtime);
  return path;
}

static int num_junk(void) { return opt.entries / 10; }

// Writes the full cache unless the stamp says it is there; then puts back
// junk a controller removed.
static void cache_prepare(void) {
  if (mkdir(opt.cache, 0700) != 0 && errno != EEXIST) die("mkdir %s: %s", opt.cache,
                                                          strerror(errno));
  chmod(opt.cache, 0700);
  char stamp_path[4096], want[128], got[128] = "";
  snprintf(stamp_path, sizeof(stamp_path), "%s/" STAMP_NAME, opt.cache);
  snprintf(want, sizeof(want), "version %d entries %d\n", STAMP_VERSION, opt.entries);
  FILE* f = fopen(stamp_path, "r");
  if (f) {
    if (!fgets(got, sizeof(got), f)) got[0] = '\0';
    fclose(f);
  }
  int junk_n = num_junk();
  if (strcmp(got, want) != 0) {
    double t0 = now_s();
    unlink(stamp_path);
    int real = opt.entries - junk_n;
    uint8_t* payload = malloc(8192);
    if (!payload) die("out of memory");
    for (int i = 0; i < real; ++i) {
      uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
      key_of(i, "entry", key);
      size_t n = 1024 + (size_t)(mix((uint64_t)i) % 7168);
      fill(payload, n, (uint64_t)i);
      cw_status_t s = cw_compile_disk_write(opt.cache, key, payload, n);
      if (s) die("%s", cw_status_message(s));
    }
    free(payload);
    for (int i = 0; i < junk_n; ++i) free(junk(i, true));
    write_file(stamp_path, want, strlen(want), 0);
    printf("startup_bench: wrote %d entries (%d real, %d junk) to %s in %.1f s\n", opt.entries,
           real, junk_n, opt.cache, now_s() - t0);
    fflush(stdout);
    return;
  }
  for (int i = 0; i < junk_n; ++i) {
    char* path = junk(i, false);
    if (access(path, F_OK) != 0) free(junk(i, true));
    free(path);
  }
}

static void remove_tree(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
  rmdir(dir);
}

// ---- Burners ----------------------------------------------------------------------------

static pid_t burners[MAX_BURNERS];

static void burners_start(int n) {
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      double end = now_s() + opt.burn_max_s;
      volatile uint64_t x = (uint64_t)i;
      while (now_s() < end) {
        for (int k = 0; k < 100000; ++k) x = mix(x);
      }
      _exit(0);
    }
    burners[i] = pid;
  }
}

static void burners_stop(int n) {
  for (int i = 0; i < n; ++i) {
    if (burners[i] > 0) kill(burners[i], SIGKILL);
    if (burners[i] > 0) waitpid(burners[i], NULL, 0);
    burners[i] = 0;
  }
}

// ---- Starts -----------------------------------------------------------------------------

#define INIT_ARGS(var)               \
  do {                               \
    memset(&(var), 0, sizeof(var));  \
    (var).struct_size = sizeof(var); \
  } while (0)

static char* error_text_free(PJRT_Error* e) {
  PJRT_Error_Message_Args m;
  INIT_ARGS(m);
  m.error = e;
  api->PJRT_Error_Message(&m);
  char* text = strndup(m.message, m.message_size);
  PJRT_Error_Destroy_Args d;
  INIT_ARGS(d);
  d.error = e;
  api->PJRT_Error_Destroy(&d);
  return text;
}

// One start and stop; the start's seconds in *out_s. False (error printed) on failure.
static bool start_once(double* out_s, int* out_devices) {
  PJRT_Client_Create_Args c;
  INIT_ARGS(c);
  double t0 = now_s();
  PJRT_Error* e = api->PJRT_Client_Create(&c);
  *out_s = now_s() - t0;
  if (e) {
    char* text = error_text_free(e);
    fprintf(stderr, "startup_bench: start failed after %.0f ms: %s\n", *out_s * 1e3, text);
    free(text);
    return false;
  }
  PJRT_Client_Devices_Args d;
  INIT_ARGS(d);
  d.client = c.client;
  e = api->PJRT_Client_Devices(&d);
  *out_devices = e ? -1 : (int)d.num_devices;
  if (e) free(error_text_free(e));
  PJRT_Client_Destroy_Args x;
  INIT_ARGS(x);
  x.client = c.client;
  e = api->PJRT_Client_Destroy(&x);
  if (e) free(error_text_free(e));
  return *out_devices > 0;
}

// `starts` starts with the full or an empty cache, with or without burners.
// Returns the failures.
static int phase(bool full, bool loaded) {
  static double times[MAX_STARTS];
  int ok = 0, failed = 0;
  char empty[] = "/tmp/cw-startup-empty-XXXXXX";
  if (loaded) burners_start(opt.burners);
  for (int i = 0; i < opt.starts; ++i) {
    if (full) {
      cache_prepare();
      setenv("CAUSEWAY_COMPILE_CACHE_DIR", opt.cache, 1);
    } else {
      strcpy(empty, "/tmp/cw-startup-empty-XXXXXX");
      if (!mkdtemp(empty)) die("mkdtemp: %s", strerror(errno));
      setenv("CAUSEWAY_COMPILE_CACHE_DIR", empty, 1);
    }
    double s = 0;
    int devices = 0;
    if (start_once(&s, &devices)) times[ok++] = s;
    else failed++;
    if (!full) remove_tree(empty);
  }
  if (loaded) burners_stop(opt.burners);
  cw_bench_sort(times, (size_t)ok);
  printf("startup %-8s cache %-5s %-6s: %2d/%-2d started", opt.label, full ? "full" : "empty",
         loaded ? "loaded" : "idle", ok, opt.starts);
  if (ok) {
    printf("  ms min %5.0f  median %5.0f  p90 %5.0f  max %5.0f", times[0] * 1e3,
           times[ok / 2] * 1e3, times[(ok * 9) / 10 < ok ? (ok * 9) / 10 : ok - 1] * 1e3,
           times[ok - 1] * 1e3);
  }
  printf("\n");
  fflush(stdout);
  return failed;
}

static void usage(void) {
  fprintf(stderr,
          "usage: startup_bench --pjrt-lib PATH --bin-dir DIR --cache DIR [--plugin PATH]\n"
          "         [--entries N] [--starts N] [--burners N] [--burn-max-s S] [--quick]\n"
          "         [--label TEXT]\n");
  exit(2);
}

int main(int argc, char** argv) {
  opt.plugin = getenv("CAUSEWAY_PJRT_PLUGIN");
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) {
      opt.quick = true;
      continue;
    }
    if (!v) usage();
    if (!strcmp(a, "--pjrt-lib")) opt.pjrt_lib = v;
    else if (!strcmp(a, "--bin-dir")) opt.bin_dir = v;
    else if (!strcmp(a, "--plugin")) opt.plugin = v;
    else if (!strcmp(a, "--cache")) opt.cache = v;
    else if (!strcmp(a, "--label")) opt.label = v;
    else if (!strcmp(a, "--entries")) opt.entries = atoi(v);
    else if (!strcmp(a, "--starts")) opt.starts = atoi(v);
    else if (!strcmp(a, "--burners")) opt.burners = atoi(v);
    else if (!strcmp(a, "--burn-max-s")) opt.burn_max_s = atoi(v);
    else usage();
    ++i;
  }
  if (opt.quick) opt.starts = 5;
  if (!opt.pjrt_lib || !opt.bin_dir || !opt.cache || opt.entries < 10 || opt.starts < 1 ||
      opt.starts > MAX_STARTS || opt.burners < 0 || opt.burners > MAX_BURNERS) {
    usage();
  }
  if (!opt.plugin || !*opt.plugin) {
    printf("startup_bench: skipped: no CPU plugin (--plugin or CAUSEWAY_PJRT_PLUGIN)\n");
    return 77;
  }
  setenv("CAUSEWAY_PJRT_PLUGIN", opt.plugin, 1);
  setenv("CAUSEWAY_BIN_DIR", opt.bin_dir, 1);
  unsetenv("CAUSEWAY_CONTROLLER");
  void* h = dlopen(opt.pjrt_lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen %s: %s", opt.pjrt_lib, dlerror());
  CW_PJRT_GetPjrtApi_Fn get = (CW_PJRT_GetPjrtApi_Fn)dlsym(h, CW_PJRT_GET_API_SYMBOL);
  if (!get) die("%s has no %s", opt.pjrt_lib, CW_PJRT_GET_API_SYMBOL);
  api = get();
  signal(SIGPIPE, SIG_IGN);
  cache_prepare();
  int failed = 0;
  if (opt.quick) {
    failed += phase(true, true);
  } else {
    failed += phase(false, false);
    failed += phase(true, false);
    failed += phase(false, true);
    failed += phase(true, true);
  }
  if (failed) {
    fprintf(stderr, "startup_bench: %d start(s) failed\n", failed);
    return 1;
  }
  return 0;
}
