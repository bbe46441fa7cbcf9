// The embedded cluster: with no CAUSEWAY_CONTROLLER, the plugin starts a
// private controller and CAUSEWAY_LOCAL_WORKERS workers as child processes on
// Unix sockets in a private temporary directory.
//
// Start-up, in order: the controller, then each worker, one at a time, each
// started only once the one before is ready. A child is ready when it writes
// its line on its own readiness pipe (--ready-fd, src/core/cw_ready.h): the
// controller when it listens, a worker when it has registered. So no worker
// races the controller's socket, and workers register in name order (their
// devices get global ids in that order). A child that exits first gives EOF
// on its pipe; one that stays silent for CAUSEWAY_START_TIMEOUT_MS fails the
// start with an error that names it, what it did not do and its log, and
// the logs of a failed start are kept (the token and sockets are not).
//
// Lifetime: the children get the read end of a pipe (--watch-fd) whose only
// write end stays in this process, close-on-exec. When this process exits,
// even by SIGKILL, the kernel closes the write end and every child sees EOF
// and exits. Client destruction also stops them (SIGTERM, then SIGKILL) and
// removes the directory.
//
// Credentials: each cluster gets a random token (getrandom), written to a
// 0600 file in the 0700 private directory; the children find it through
// CAUSEWAY_TOKEN_FILE in their environment, never in argv (which `ps` shows
// to every user). The plugin presents the same token in its own HELLOs.
// The controller also gets its compile cache directory through the
// environment (cw__compile_cache_setting).
//
// JAX never destroys its client, so at a normal exit an atexit handler
// removes the private directories of clusters still running (their
// children, already connected, need no socket file; they exit on EOF). A
// process killed outright leaves its directory (its logs and its dead
// token): the next embedded cluster of the same user in the same TMPDIR
// removes those (cw__sweep_dead_dirs).
#include <assert.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cw_dirs.h"
#include "cw_plugin_cluster.h"
#include "cw_random.h"
#include "cw_time.h"

extern char** environ;

#define CW__MAX_LOCAL_WORKERS 64
#define CW__LOG_TAIL 1500

typedef struct cw__child_s {
  pid_t pid;
  char* name;
  char* log_path;
  int exit_status;  // valid when reaped
  bool reaped;
  int ready_fd;     // read end of its readiness pipe until it answered; -1 after
} cw__child_t;

struct cw_plugin_cluster_s {
  char* dir;
  char token[65];  // 32 random bytes in hex
  char** envp;     // the children's environment (owned strings)
  char* controller_address;
  int watch_write_fd;
  bool keep_dir;       // CAUSEWAY_KEEP_TMP
  bool keep_logs;      // a failed start: the directory keeps its logs
  bool inherit_logs;   // CAUSEWAY_CHILD_LOGS=inherit
  cw__child_t children[CW__MAX_LOCAL_WORKERS + 1];
  size_t num_children;
  pid_t owner;  // the process that started it (a fork()ed child does not stop it)
};

static char* cw__printf(const char* fmt, ...) CW_PRINTF(1, 2);
static char* cw__printf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* out = NULL;
  if (vasprintf(&out, fmt, ap) < 0) out = NULL;
  va_end(ap);
  return out;
}

// The bin/ directory beside this library's lib/ directory.
static char* cw__default_bin_dir(void) {
  Dl_info info;
  if (!dladdr((void*)cw__default_bin_dir, &info) || !info.dli_fname) return NULL;
  char* path = realpath(info.dli_fname, NULL);
  if (!path) return NULL;
  char* slash = strrchr(path, '/');
  if (slash) *slash = '\0';  // .../lib
  slash = strrchr(path, '/');
  if (slash) *slash = '\0';  // ...
  char* bin = cw__printf("%s/bin", path);
  free(path);
  return bin;
}

// The watch pipes' write ends (fd + 1; 0: free). A fork()ed child closes
// its copies at once (pthread_atfork): the daemons end with the process that
// started them, not with the last of its children. No lock: the child
// handler must not wait for one a thread of the parent held at fork.
static _Atomic int cw__watch_fds[8];
static pthread_once_t cw__watch_once = PTHREAD_ONCE_INIT;

static void cw__watch_fds_close_in_child(void) {
  for (size_t i = 0; i < sizeof(cw__watch_fds) / sizeof(cw__watch_fds[0]); ++i) {
    int v = atomic_exchange(&cw__watch_fds[i], 0);
    if (v > 0) close(v - 1);
  }
}

static void cw__watch_fds_register(void) {
  pthread_atfork(NULL, NULL, cw__watch_fds_close_in_child);
}

// Tracks (add) or forgets the write end `fd`; beyond the table a child keeps it.
static void cw__watch_fd_track(int fd, bool add) {
  pthread_once(&cw__watch_once, cw__watch_fds_register);
  for (size_t i = 0; i < sizeof(cw__watch_fds) / sizeof(cw__watch_fds[0]); ++i) {
    int want = add ? 0 : fd + 1;
    if (atomic_compare_exchange_strong(&cw__watch_fds[i], &want, add ? fd + 1 : 0)) return;
  }
}

// A pipe whose ends are above the standard descriptors: a process started
// with stdout or stderr closed gets them from pipe(), and the children's
// file actions (the log on 1 and 2) would replace them. Close-on-exec.
static int cw__pipe_above_stdio(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  for (int i = 0; i < 2; ++i) {
    if (fds[i] > STDERR_FILENO) continue;
    int moved = fcntl(fds[i], F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    int err = errno;
    close(fds[i]);
    fds[i] = moved;
    if (moved < 0) {
      if (fds[1 - i] >= 0) close(fds[1 - i]);
      errno = err;
      return -1;
    }
  }
  return 0;
}

// Spawns argv with stdout and stderr to log_path (or inherited when
// CAUSEWAY_CHILD_LOGS=inherit), the watch fd inherited, and "--ready-fd N"
// added: the write end of a fresh pipe whose read end the child's record
// keeps. argv must leave two NULL slots before its terminating NULL.
static cw_status_t cw__spawn(cw_plugin_cluster_t* cl, const char* name, char* argv[],
                             int watch_fd) {
  cw__child_t* ch = &cl->children[cl->num_children];
  memset(ch, 0, sizeof(*ch));
  ch->ready_fd = -1;
  ch->name = strdup(name);
  ch->log_path = cw__printf("%s/%s.log", cl->dir, name);
  if (!ch->name || !ch->log_path) {
    free(ch->name);
    free(ch->log_path);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  // Both ends close-on-exec here; the child gets the write end by dup2 onto
  // a number of its own (above every descriptor it must keep), so no other
  // process this one starts meanwhile holds it and EOF means the child.
  int ready[2];
  if (cw__pipe_above_stdio(ready) != 0) {
    free(ch->name);
    free(ch->log_path);
    return cw_make_status(CW_UNAVAILABLE, "causeway: pipe: %s", strerror(errno));
  }
  int child_fd = (ready[1] > watch_fd ? ready[1] : watch_fd) + 1;
  char fdbuf[16];
  snprintf(fdbuf, sizeof(fdbuf), "%d", child_fd);
  size_t argc = 0;
  while (argv[argc]) ++argc;
  argv[argc] = "--ready-fd";
  argv[argc + 1] = fdbuf;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!cl->inherit_logs) {
    posix_spawn_file_actions_addopen(&fa, 1, ch->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  posix_spawn_file_actions_adddup2(&fa, ready[1], child_fd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Children must not inherit the caller's signal mask or handlers.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  // A process group of their own: a terminal's Ctrl-C (or Jupyter's
  // interrupt, which signals the kernel's whole group) is for the JAX
  // process, which may catch KeyboardInterrupt and go on; the children end
  // with it through --watch-fd.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  int err = posix_spawn(&ch->pid, argv[0], &fa, &attr, argv, cl->envp);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  argv[argc] = NULL;
  close(ready[1]);  // the child's alone now
  if (err) {
    close(ready[0]);
    free(ch->name);
    free(ch->log_path);
    return cw_make_status(CW_UNAVAILABLE, "causeway: cannot start %s (%s): %s", name, argv[0],
                          strerror(err));
  }
  ch->ready_fd = ready[0];
  cl->num_children++;
  return cw_ok_status();
}

// Reaps `ch` if it exits within `ms`; true when it has.
static bool cw__reap_within(cw__child_t* ch, int ms) {
  for (int64_t end = cw_time_now_ms() + ms;;) {
    int st = 0;
    pid_t r = waitpid(ch->pid, &st, WNOHANG);
    if (r == ch->pid || (r < 0 && errno == ECHILD)) {
      ch->reaped = true;
      ch->exit_status = st;
      return true;
    }
    if (cw_time_now_ms() >= end) return false;
    usleep(5 * 1000);  // only after its pipe said it is going
  }
}

// "exited with status N" / "was killed by signal N" for a reaped child.
static void cw__describe_exit(const cw__child_t* ch, char* buf, size_t cap) {
  if (WIFSIGNALED(ch->exit_status)) {
    snprintf(buf, cap, "%s was killed by signal %d", ch->name, WTERMSIG(ch->exit_status));
  } else {
    snprintf(buf, cap, "%s exited with status %d", ch->name, WEXITSTATUS(ch->exit_status));
  }
}

// Waits for `ch`'s readiness line (`what` it does to be ready: "listen",
// "register"); timeout_ms 0: no bound. The error names the child, what it
// did not do and its log.
static cw_status_t cw__wait_ready(const cw_plugin_cluster_t* cl, cw__child_t* ch,
                                  const char* what, int64_t timeout_ms) {
  const char* log = cl->inherit_logs ? "this process's stderr" : ch->log_path;
  int64_t start = cw_time_now_ms();
  char line[256];
  size_t got = 0;
  cw_status_t s = cw_ok_status();
  for (;;) {
    int wait = -1;
    if (timeout_ms > 0) {
      int64_t left = start + timeout_ms - cw_time_now_ms();
      if (left <= 0) {
        s = cw_make_status(CW_DEADLINE_EXCEEDED,
                           "causeway: the embedded cluster failed to start: %s did not %s "
                           "within %" PRId64 " ms (CAUSEWAY_START_TIMEOUT_MS; log: %s)",
                           ch->name, what, timeout_ms, log);
        break;
      }
      wait = left > INT_MAX ? INT_MAX : (int)left;
    }
    struct pollfd p = {.fd = ch->ready_fd, .events = POLLIN};
    int rc = poll(&p, 1, wait);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      s = cw_make_status(CW_UNAVAILABLE, "causeway: poll: %s", strerror(errno));
      break;
    }
    if (rc == 0) continue;  // the deadline, checked above
    ssize_t n = read(ch->ready_fd, line + got, sizeof(line) - 1 - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n > 0) {
      got += (size_t)n;
      if (memchr(line, '\n', got) || got == sizeof(line) - 1) break;  // ready
      continue;
    }
    // EOF (or an error): it closed its end without a word, so it is going.
    char why[300];
    if (cw__reap_within(ch, 2000)) cw__describe_exit(ch, why, sizeof(why));
    else snprintf(why, sizeof(why), "%s closed its readiness pipe", ch->name);
    s = cw_make_status(CW_UNAVAILABLE,
                       "causeway: the embedded cluster failed to start: %s before it could %s "
                       "(log: %s)", why, what, log);
    break;
  }
  close(ch->ready_fd);
  ch->ready_fd = -1;
  return s;
}

// Makes the cluster's token and its file `dir`/token (0600, created fresh).
static cw_status_t cw__make_token(cw_plugin_cluster_t* cl, char** out_path) {
  *out_path = NULL;
  uint8_t raw[32];
  CW_RETURN_IF_ERROR(cw_random_bytes(raw, sizeof(raw)), "causeway: the embedded cluster's token");
  for (size_t i = 0; i < sizeof(raw); ++i) snprintf(cl->token + 2 * i, 3, "%02x", raw[i]);
  explicit_bzero(raw, sizeof(raw));
  char* path = cw__printf("%s/token", cl->dir);
  if (!path) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  size_t n = strlen(cl->token);
  bool ok = fd >= 0 && write(fd, cl->token, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
  int err = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    cw_status_t s = cw_make_status(CW_UNAVAILABLE, "causeway: cannot write %s: %s", path,
                                   strerror(err));
    free(path);
    return s;
  }
  *out_path = path;
  return cw_ok_status();
}

// "NAME=" of the variable of setting `id`, in `buf`.
static const char* cw__env_prefix(cw_setting_id_t id, char* buf, size_t cap) {
  snprintf(buf, cap, "%s=", cw_settings_def(id)->env);
  return buf;
}

// The children's environment: ours without any token settings of the
// caller's, plus CAUSEWAY_TOKEN_FILE=token_path and `extra` ("K=V", may be
// NULL).
static cw_status_t cw__make_child_env(cw_plugin_cluster_t* cl, const char* token_path,
                                      const char* const* extra) {
  size_t n = 0, n_extra = 0;
  while (environ[n]) ++n;
  while (extra && extra[n_extra]) ++n_extra;
  cl->envp = calloc(n + n_extra + 2, sizeof(char*));
  if (!cl->envp) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  char token_var[64], file_var[64];
  cw__env_prefix(CW_SET_TOKEN, token_var, sizeof(token_var));
  cw__env_prefix(CW_SET_TOKEN_FILE, file_var, sizeof(file_var));
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    // The caller's token would win over the file in the daemons.
    if (!strncmp(environ[i], token_var, strlen(token_var)) ||
        !strncmp(environ[i], file_var, strlen(file_var))) {
      continue;
    }
    bool overridden = false;
    for (size_t j = 0; j < n_extra; ++j) {
      size_t name_len = strcspn(extra[j], "=") + 1;
      overridden = overridden || !strncmp(environ[i], extra[j], name_len);
    }
    if (!overridden && !(cl->envp[k++] = strdup(environ[i]))) goto oom;
  }
  if (!(cl->envp[k++] = cw__printf("%s%s", file_var, token_path))) goto oom;
  for (size_t j = 0; j < n_extra; ++j) {
    if (!(cl->envp[k++] = strdup(extra[j]))) goto oom;
  }
  return cw_ok_status();
oom:
  return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
}

const char* cw_plugin_cluster_token(const cw_plugin_cluster_t* cl) { return cl->token; }

// "CAUSEWAY_COMPILE_CACHE_DIR=..." for the embedded controller: the compile
// cache on disk is on by default, per user. CAUSEWAY_COMPILE_CACHE_DIR
// overrides (empty: off); else $XDG_CACHE_HOME/causeway/compile, else
// ~/.cache/causeway/compile, if it can be made (a read-only HOME turns the
// default off with a warning; a directory the user named stops the
// controller). Malloc'd.
static char* cw__compile_cache_setting(const cw_settings_t* settings) {
  const char* var = cw_settings_def(CW_SET_COMPILE_CACHE_DIR)->env;
  if (cw_settings_given(settings, CW_SET_COMPILE_CACHE_DIR)) {
    return cw__printf("%s=%s", var, cw_settings_string(settings, CW_SET_COMPILE_CACHE_DIR));
  }
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  char* dir = NULL;
  if (xdg && xdg[0] == '/') dir = cw__printf("%s/causeway/compile", xdg);
  else if (home && home[0] == '/') dir = cw__printf("%s/.cache/causeway/compile", home);
  if (!dir) return cw__printf("%s=", var);
  cw_status_t s = cw_dirs_make(dir);
  if (s) {
    fprintf(stderr, "causeway: the compile cache on disk is off: %s (set %s to a writable "
            "directory)\n", cw_status_message(s), var);
    cw_status_free(s);
    dir[0] = 0;
  }
  char* out = cw__printf("%s=%s", var, dir);
  free(dir);
  return out;
}

static cw_status_t cw__check_exe(const char* path, const char* what) {
  if (access(path, X_OK) == 0) return cw_ok_status();
  return cw_make_status(CW_NOT_FOUND,
                        "causeway: %s not found at %s (set CAUSEWAY_BIN_DIR to the directory "
                        "holding causeway-controller and causeway-worker)", what, path);
}

static void cw__track_dir(const char* dir, bool add);

#define CW__DEFAULT_LOCAL_DEVICES 8
#define CW__XLA_DEVICE_FLAG "xla_force_host_platform_device_count"

// The last --xla_force_host_platform_device_count=N in `flags` (XLA's own
// flag parser lets the last one win) into *out (0: absent).
static cw_status_t cw__xla_flag_devices(const char* flags, int64_t* out) {
  *out = 0;
  const size_t name_len = strlen(CW__XLA_DEVICE_FLAG);
  for (const char* p = flags; p && *p;) {
    p += strspn(p, " \t\n");
    size_t len = strcspn(p, " \t\n");
    const char* name = p;
    while (name < p + len && *name == '-') ++name;
    if (name > p && (size_t)(p + len - name) > name_len &&
        !strncmp(name, CW__XLA_DEVICE_FLAG, name_len) && name[name_len] == '=') {
      const char* v = name + name_len + 1;
      int vlen = (int)(p + len - v);
      char buf[32];
      char* end = NULL;
      long long n = -1;
      if (vlen > 0 && vlen < (int)sizeof(buf)) {
        memcpy(buf, v, (size_t)vlen);
        buf[vlen] = '\0';
        errno = 0;
        n = strtoll(buf, &end, 10);
        if (errno || *end) n = -1;
      }
      if (n < 1 || n > cw_settings_def(CW_SET_LOCAL_DEVICES)->max) {
        return cw_make_status(CW_INVALID_ARGUMENT,
                              "causeway: XLA_FLAGS: --%s=%.*s is not a device count in [1, %" PRId64
                              "]", CW__XLA_DEVICE_FLAG, vlen, v,
                              cw_settings_def(CW_SET_LOCAL_DEVICES)->max);
      }
      *out = n;
    }
    p += len;
  }
  return cw_ok_status();
}

static void cw__remove_dir(const char* dir, bool keep_logs);

// Dead clusters' directories in `tmp`: this user's causeway-XXXXXX
// directories that still hold a token (an exit, and a failed cluster's
// clean-up, remove it) and no KEEP mark (CAUSEWAY_KEEP_TMP), whose controller
// socket nobody answers on, untouched for 10 minutes (a cluster still
// starting has not yet listened).
// The liveness test is the socket, not a pid: a pid may be of another
// namespace, or reused.
static void cw__sweep_dead_dirs(const char* tmp) {
  DIR* d = opendir(tmp);
  if (!d) return;
  time_t now = time(NULL);
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, "causeway-", 9) != 0 || strlen(e->d_name) != 15) continue;
    char* dir = cw__printf("%s/%s", tmp, e->d_name);
    char* token = dir ? cw__printf("%s/token", dir) : NULL;
    char* sock = dir ? cw__printf("%s/controller.sock", dir) : NULL;
    char* keep = dir ? cw__printf("%s/KEEP", dir) : NULL;
    struct stat sb, tb;
    if (token && sock && keep && lstat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) &&
        sb.st_uid == getuid() && now - sb.st_mtime >= 600 && lstat(token, &tb) == 0 &&
        S_ISREG(tb.st_mode) && lstat(keep, &tb) != 0 && !cw_dirs_socket_live(sock)) {
      cw__remove_dir(dir, false);
    }
    free(keep);
    free(sock);
    free(token);
    free(dir);
  }
  closedir(d);
}


cw_status_t cw_plugin_cluster_layout(const cw_settings_t* settings, int64_t jax_devices,
                                     const char* xla_flags, int64_t* out_workers,
                                     int64_t* out_devices) {
  // The table bounds both (CAUSEWAY_LOCAL_WORKERS to the children array).
  int64_t workers = cw_settings_int(settings, CW_SET_LOCAL_WORKERS);
  assert(workers >= 1 && workers <= CW__MAX_LOCAL_WORKERS);
  *out_workers = workers;
  *out_devices = 0;
  if (cw_settings_given(settings, CW_SET_LOCAL_DEVICES)) {
    *out_devices = cw_settings_int(settings, CW_SET_LOCAL_DEVICES);
    return cw_ok_status();
  }
  int64_t total = CW__DEFAULT_LOCAL_DEVICES;
  const char* from = "the default";
  int64_t flag = 0;
  if (jax_devices > 0) {
    total = jax_devices;
    from = "jax_num_cpu_devices";
  } else {
    CW_RETURN_IF_ERROR(cw__xla_flag_devices(xla_flags, &flag), "");
    if (flag) {
      total = flag;
      from = "XLA_FLAGS";
    }
  }
  if (total % workers || total / workers > cw_settings_def(CW_SET_LOCAL_DEVICES)->max) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "causeway: %" PRId64 " CPU devices (%s) do not split evenly over "
                          "CAUSEWAY_LOCAL_WORKERS=%" PRId64 " workers; set "
                          "CAUSEWAY_LOCAL_DEVICES (devices of each worker)",
                          total, from, workers);
  }
  *out_devices = total / workers;
  return cw_ok_status();
}

cw_status_t cw_plugin_cluster_start(const cw_settings_t* settings, int64_t jax_devices,
                                    cw_plugin_cluster_t** out_cluster,
                                    const char** out_controller_address,
                                    uint32_t* out_num_workers) {
  *out_cluster = NULL;
  *out_controller_address = NULL;
  int64_t workers = 0, devices = 0;
  CW_RETURN_IF_ERROR(
      cw_plugin_cluster_layout(settings, jax_devices, getenv("XLA_FLAGS"), &workers, &devices),
      "");
  const char* logs = cw_settings_string(settings, CW_SET_CHILD_LOGS);
  if (logs[0] && strcmp(logs, "inherit") != 0) {
    return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_CHILD_LOGS=%s: the one value "
                          "is 'inherit' (unset: the daemons log to files in the cluster's "
                          "directory)", logs);
  }
  const char* plugin = cw_settings_string(settings, CW_SET_PLUGIN);
  if (!*plugin) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "causeway: CAUSEWAY_PJRT_PLUGIN is not set (the XLA PJRT plugin the "
                          "local workers load; causeway_jax sets it from lammps_jax_pjrt_cpu), "
                          "or set CAUSEWAY_CONTROLLER to join a running cluster");
  }
  const char* env_bin = cw_settings_string(settings, CW_SET_BIN_DIR);
  char* bin = *env_bin ? strdup(env_bin) : cw__default_bin_dir();
  if (!bin) return cw_make_status(CW_NOT_FOUND, "causeway: cannot locate the binary directory");
  char* ctl_exe = cw__printf("%s/causeway-controller", bin);
  char* wrk_exe = cw__printf("%s/causeway-worker", bin);
  free(bin);
  cw_plugin_cluster_t* cl = calloc(1, sizeof(*cl));
  if (cl) {
    cl->watch_write_fd = -1;
    cl->owner = getpid();
    cl->keep_dir = cw_settings_int(settings, CW_SET_KEEP_TMP) != 0;
    cl->inherit_logs = !strcmp(cw_settings_string(settings, CW_SET_CHILD_LOGS), "inherit");
  }
  cw_status_t s = (!ctl_exe || !wrk_exe || !cl)
                      ? cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory")
                      : cw_ok_status();
  if (!s) s = cw__check_exe(ctl_exe, "causeway-controller");
  if (!s) s = cw__check_exe(wrk_exe, "causeway-worker");
  int pipefd[2] = {-1, -1};
  if (!s) {
    const char* tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    cw__sweep_dead_dirs(tmp);
    char* templ = cw__printf("%s/causeway-XXXXXX", tmp);
    if (!templ || !mkdtemp(templ)) {
      s = cw_make_status(CW_UNAVAILABLE, "causeway: cannot create a temporary directory in %s "
                         "(TMPDIR): %s", tmp, templ ? strerror(errno) : "out of memory");
      free(templ);
    } else {
      cl->dir = templ;
      if (cl->keep_dir) {  // kept on purpose: never swept (cw__sweep_dead_dirs)
        char* keep = cw__printf("%s/KEEP", templ);
        int fd = keep ? open(keep, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) : -1;
        if (fd >= 0) close(fd);
        free(keep);
      }
    }
  }
  if (!s) {
    char* token_path = NULL;
    s = cw__make_token(cl, &token_path);
    char* cache = cw__compile_cache_setting(settings);
    const char* extra[] = {cache, NULL};
    if (!s && !cache) s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    if (!s) s = cw__make_child_env(cl, token_path, extra);
    free(cache);
    free(token_path);
  }
  // The read end is inheritable only while we spawn; the write end never is.
  if (!s && cw__pipe_above_stdio(pipefd) != 0) {
    s = cw_make_status(CW_UNAVAILABLE, "causeway: pipe: %s", strerror(errno));
  }
  if (!s) {
    cl->watch_write_fd = pipefd[1];
    cw__watch_fd_track(pipefd[1], true);
    if (fcntl(pipefd[0], F_SETFD, 0) != 0) {
      s = cw_make_status(CW_UNAVAILABLE, "causeway: fcntl: %s", strerror(errno));
    }
  }
  if (!s) {
    cl->controller_address = cw__printf("%s/controller.sock", cl->dir);
    if (!cl->controller_address) s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  char fdbuf[16];
  snprintf(fdbuf, sizeof(fdbuf), "%d", pipefd[0]);
  // Each child in turn, once the one before is ready (see the top).
  int64_t timeout_ms = cw_settings_int(settings, CW_SET_START_TIMEOUT_MS);
  if (!s) {
    char* argv[] = {ctl_exe, "--listen", cl->controller_address, "--watch-fd", fdbuf,
                    NULL, NULL, NULL};
    s = cw__spawn(cl, "controller", argv, pipefd[0]);
    if (!s) s = cw__wait_ready(cl, &cl->children[0], "listen", timeout_ms);
  }
  char devbuf[16];
  snprintf(devbuf, sizeof(devbuf), "%" PRId64, devices);
  for (int64_t i = 0; !s && i < workers; ++i) {
    char name[32];
    snprintf(name, sizeof(name), "worker-%" PRId64, i);
    char* listen = cw__printf("%s/%s.sock", cl->dir, name);
    if (!listen) {
      s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    // --metrics-listen= : a CAUSEWAY_METRICS_LISTEN the user set is the
    // controller's port; workers inheriting it would all try to bind it.
    char* argv[] = {wrk_exe, "--plugin", (char*)plugin, "--devices", devbuf, "--listen", listen,
                    "--name", name, "--controller", cl->controller_address,
                    "--exit-with-controller", "--watch-fd", fdbuf, "--metrics-listen=", NULL,
                    NULL, NULL};
    s = cw__spawn(cl, name, argv, pipefd[0]);
    if (!s) s = cw__wait_ready(cl, &cl->children[cl->num_children - 1], "register",
                                timeout_ms);
    free(listen);
  }
  if (pipefd[0] >= 0) close(pipefd[0]);  // only the children hold it now
  free(ctl_exe);
  free(wrk_exe);
  if (s) {
    if (cl->num_children) {
      s = cw_plugin_cluster_annotate(cl, s);
      cl->keep_logs = !cl->keep_dir;  // the error names them
    }
    cw_plugin_cluster_stop(cl);
    return s;
  }
  if (!cl->keep_dir) cw__track_dir(cl->dir, true);
  *out_cluster = cl;
  *out_controller_address = cl->controller_address;
  *out_num_workers = (uint32_t)workers;
  return cw_ok_status();
}

static void cw__reap(cw_plugin_cluster_t* cl, bool block) {
  for (size_t i = 0; i < cl->num_children; ++i) {
    cw__child_t* ch = &cl->children[i];
    if (ch->reaped || ch->pid <= 0) continue;
    int st = 0;
    pid_t r = waitpid(ch->pid, &st, block ? 0 : WNOHANG);
    if (r == ch->pid || (r < 0 && errno == ECHILD)) {
      ch->reaped = true;
      ch->exit_status = st;
    }
  }
}

bool cw_plugin_cluster_child_exited(cw_plugin_cluster_t* cl, char* buf, size_t cap) {
  cw__reap(cl, false);
  for (size_t i = 0; i < cl->num_children; ++i) {
    cw__child_t* ch = &cl->children[i];
    if (!ch->reaped) continue;
    cw__describe_exit(ch, buf, cap);
    return true;
  }
  return false;
}

// Appends the last bytes of every child's log to `status`.
cw_status_t cw_plugin_cluster_annotate(cw_plugin_cluster_t* cl, cw_status_t status) {
  if (!status || !cl) return status;
  char* all = NULL;
  for (size_t i = 0; i < cl->num_children; ++i) {
    FILE* f = fopen(cl->children[i].log_path, "r");
    if (!f) continue;
    char tail[CW__LOG_TAIL + 1];
    size_t n = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
      long size = ftell(f);
      if (size > CW__LOG_TAIL) fseek(f, size - CW__LOG_TAIL, SEEK_SET);
      else fseek(f, 0, SEEK_SET);
      n = fread(tail, 1, CW__LOG_TAIL, f);
    }
    fclose(f);
    tail[n] = '\0';
    if (!n) continue;
    char* next = cw__printf("%s\n--- %s log (%s) ---\n%s", all ? all : "", cl->children[i].name,
                            cl->children[i].log_path, tail);
    free(all);
    all = next;
  }
  if (!all) return status;
  cw_status_t out = cw_make_status(cw_status_code(status), "%s%s", cw_status_message(status), all);
  free(all);
  cw_status_free(status);
  return out;
}

// Removes `dir` and its files; with `keep_logs`, its *.log files and so the
// directory stay.
static void cw__remove_dir(const char* dir, bool keep_logs) {
  DIR* d = opendir(dir);
  if (d) {
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      size_t len = strlen(e->d_name);
      if (keep_logs && len > 4 && !strcmp(e->d_name + len - 4, ".log")) continue;
      char* p = cw__printf("%s/%s", dir, e->d_name);
      if (p) unlink(p);
      free(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

// Directories of running clusters, removed at exit (see the top).
static pthread_mutex_t cw__dirs_mu = PTHREAD_MUTEX_INITIALIZER;
static char* cw__dirs[8];
static pid_t cw__dirs_owner;  // a fork()ed child that exits leaves them to the parent

static void cw__remove_dirs_at_exit(void) {
  if (getpid() != cw__dirs_owner) return;
  pthread_mutex_lock(&cw__dirs_mu);
  for (size_t i = 0; i < sizeof(cw__dirs) / sizeof(cw__dirs[0]); ++i) {
    if (cw__dirs[i]) cw__remove_dir(cw__dirs[i], false);
    free(cw__dirs[i]);
    cw__dirs[i] = NULL;
  }
  pthread_mutex_unlock(&cw__dirs_mu);
}

// Tracks `dir` for removal at exit (add) or stops tracking it. Beyond the
// table's size a directory is only removed by client destruction.
static void cw__track_dir(const char* dir, bool add) {
  static bool registered;
  pthread_mutex_lock(&cw__dirs_mu);
  if (add && !registered) {
    cw__dirs_owner = getpid();
    registered = atexit(cw__remove_dirs_at_exit) == 0;
  }
  for (size_t i = 0; i < sizeof(cw__dirs) / sizeof(cw__dirs[0]); ++i) {
    if (add && !cw__dirs[i]) {
      cw__dirs[i] = strdup(dir);
      break;
    }
    if (!add && cw__dirs[i] && !strcmp(cw__dirs[i], dir)) {
      free(cw__dirs[i]);
      cw__dirs[i] = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&cw__dirs_mu);
}

void cw_plugin_cluster_stop(cw_plugin_cluster_t* cl) {
  // A fork()ed child's copy: the daemons and the directory are the parent's.
  if (!cl || cl->owner != getpid()) return;
  if (cl->watch_write_fd >= 0) {
    cw__watch_fd_track(cl->watch_write_fd, false);
    close(cl->watch_write_fd);  // children see EOF
  }
  for (size_t i = 0; i < cl->num_children; ++i) {
    if (!cl->children[i].reaped && cl->children[i].pid > 0) kill(cl->children[i].pid, SIGTERM);
  }
  // Give them 2 s to exit cleanly, then kill what is left.
  for (int t = 0; t < 200; ++t) {
    cw__reap(cl, false);
    bool all = true;
    for (size_t i = 0; i < cl->num_children; ++i) all = all && cl->children[i].reaped;
    if (all) break;
    usleep(10 * 1000);
  }
  for (size_t i = 0; i < cl->num_children; ++i) {
    if (!cl->children[i].reaped && cl->children[i].pid > 0) kill(cl->children[i].pid, SIGKILL);
  }
  cw__reap(cl, true);
  if (cl->dir && !cl->keep_dir) {
    cw__track_dir(cl->dir, false);
    cw__remove_dir(cl->dir, cl->keep_logs);
  }
  for (size_t i = 0; i < cl->num_children; ++i) {
    if (cl->children[i].ready_fd >= 0) close(cl->children[i].ready_fd);
    free(cl->children[i].name);
    free(cl->children[i].log_path);
  }
  free(cl->controller_address);
  free(cl->dir);
  for (size_t i = 0; cl->envp && cl->envp[i]; ++i) free(cl->envp[i]);
  free(cl->envp);
  explicit_bzero(cl->token, sizeof(cl->token));
  free(cl);
}
