#include "cw_up.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cw_client.h"
#include "cw_random.h"
#include "cw_time.h"

extern char** environ;

#define CW__STATE_MAGIC "causeway-cluster 1"
#define CW__LOG_TAIL 2000

// --- The state file ---------------------------------------------------------------

char* cw_up_state_format(const cw_up_state_t* st) {
  size_t cap = 128 + strlen(st->controller) + st->num_procs * 96;
  char* text = malloc(cap);
  if (!text) return NULL;
  size_t n = (size_t)snprintf(text, cap, "%s\ncontroller %s\n", CW__STATE_MAGIC, st->controller);
  for (size_t i = 0; i < st->num_procs && n < cap; ++i) {
    n += (size_t)snprintf(text + n, cap - n, "process %s %d %" PRIu64 "\n", st->procs[i].name,
                          (int)st->procs[i].pid, st->procs[i].start_time);
  }
  return text;
}

bool cw_up_state_parse(const char* text, cw_up_state_t* out, char* err, size_t err_size) {
  memset(out, 0, sizeof(*out));
  size_t magic = strlen(CW__STATE_MAGIC);
  if (strncmp(text, CW__STATE_MAGIC, magic) || text[magic] != '\n') {
    snprintf(err, err_size, "not a causeway cluster state file");
    return false;
  }
  bool have_controller = false;
  for (const char* line = text + magic + 1; *line;) {
    const char* end = strchr(line, '\n');
    if (!end) {
      snprintf(err, err_size, "the state file ends without a newline");
      return false;
    }
    size_t len = (size_t)(end - line);
    char buf[640];
    if (len >= sizeof(buf)) {
      snprintf(err, err_size, "a line of the state file is too long");
      return false;
    }
    memcpy(buf, line, len);
    buf[len] = 0;
    if (!strncmp(buf, "controller ", 11) && len > 11 && len - 11 < sizeof(out->controller)) {
      memcpy(out->controller, buf + 11, len - 11 + 1);
      have_controller = true;
    } else {
      cw_up_proc_t p = {0};
      int pid = 0, used = 0;
      if (out->num_procs >= CW_UP_MAX_PROCS ||
          sscanf(buf, "process %31s %d %" SCNu64 "%n", p.name, &pid, &p.start_time, &used) != 3 ||
          (size_t)used != len || pid <= 1) {
        snprintf(err, err_size, "bad line in the state file: '%.200s'", buf);
        return false;
      }
      p.pid = (pid_t)pid;
      out->procs[out->num_procs++] = p;
    }
    line = end + 1;
  }
  if (!have_controller) {
    snprintf(err, err_size, "the state file names no controller");
    return false;
  }
  return true;
}

void cw_up_default_dir(const char* dir, char* out, size_t size) {
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  struct stat sb;
  char cwd[PATH_MAX];
  if (dir && dir[0] != '/' && getcwd(cwd, sizeof(cwd))) snprintf(out, size, "%s/%s", cwd, dir);
  else if (dir) snprintf(out, size, "%s", dir);
  else if (xdg && xdg[0] == '/' && stat(xdg, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(out, size, "%s/causeway", xdg);
  else snprintf(out, size, "/tmp/causeway-%u", (unsigned)geteuid());
}

// --- Processes ----------------------------------------------------------------------

// The start time and state letter of `pid` from /proc/PID/stat; false when
// there is no such process.
static bool cw__proc_stat(pid_t pid, uint64_t* out_start, char* out_state) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "re");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  // pid (comm) state ppid ...: comm may hold spaces and parentheses, so
  // fields are counted from the last ')'. starttime is field 22.
  char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return false;
  *out_state = p[2];
  p += 2;
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (!p) return false;
    p++;
  }
  *out_start = strtoull(p, NULL, 10);
  return true;
}

// Whether the process up started is still running (a zombie is not).
static bool cw__running(const cw_up_proc_t* p) {
  uint64_t start = 0;
  char state = 0;
  return cw__proc_stat(p->pid, &start, &state) && start == p->start_time && state != 'Z';
}

// How `p` ended ("exited with status 1", "was killed by signal 9 ..."), read
// from its zombie (up is its parent); "exited" when it cannot be read.
static void cw__describe_end(const cw_up_proc_t* p, char* out, size_t size) {
  int status = 0;
  pid_t r = 0;
  for (int i = 0; i < 100 && (r = waitpid(p->pid, &status, WNOHANG)) == 0; ++i) {
    usleep(10 * 1000);  // ending: its pipe closed a moment before
  }
  if (r == p->pid && WIFEXITED(status)) {
    snprintf(out, size, "exited with status %d", WEXITSTATUS(status));
  } else if (r == p->pid && WIFSIGNALED(status)) {
    snprintf(out, size, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  } else {
    snprintf(out, size, "exited");
  }
}

static size_t cw__count_running(const cw_up_state_t* st) {
  size_t n = 0;
  for (size_t i = 0; i < st->num_procs; ++i) n += cw__running(&st->procs[i]);
  return n;
}

// SIGTERM to every process still running, then SIGKILL to those left after
// `grace_s`. Returns how many were running.
static size_t cw__stop_procs(const cw_up_state_t* st, double grace_s) {
  // Counted before any signal: a worker exits on its own once its controller
  // is gone (--exit-with-controller), and on a busy machine it may do so
  // before this loop reaches it.
  size_t running = cw__count_running(st);
  for (size_t i = 0; i < st->num_procs; ++i) {
    if (cw__running(&st->procs[i])) kill(st->procs[i].pid, SIGTERM);
  }
  int64_t deadline = cw_time_now_ms() + (int64_t)(grace_s * 1000);
  // Our own children (a failed up) are reaped here; others by their parent.
  while (cw__count_running(st) && cw_time_now_ms() < deadline) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    usleep(20 * 1000);
  }
  for (size_t i = 0; i < st->num_procs; ++i) {
    if (!cw__running(&st->procs[i])) continue;
    fprintf(stderr, "causeway: %s (pid %d) did not stop within %.1f s: SIGKILL\n",
            st->procs[i].name, (int)st->procs[i].pid, grace_s);
    kill(st->procs[i].pid, SIGKILL);
  }
  deadline = cw_time_now_ms() + 5000;
  while (cw__count_running(st) && cw_time_now_ms() < deadline) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    usleep(20 * 1000);
  }
  return running;
}

// The environment of the daemons: ours without what up sets itself (a
// token in the environment would win over the cluster's token file; one
// port or address for every daemon would collide), plus `token_var`.
static char** cw__child_env(const char* token_var) {
  static const char* const strip[] = {"CAUSEWAY_TOKEN=", "CAUSEWAY_TOKEN_FILE=",
                                      "CAUSEWAY_CONTROLLER=", "CAUSEWAY_LISTEN=",
                                      "CAUSEWAY_METRICS_LISTEN=", "CAUSEWAY_NAME=",
                                      "CAUSEWAY_WATCH_FD="};
  size_t n = 0;
  while (environ[n]) n++;
  char** env = calloc(n + 2, sizeof(char*));
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    bool drop = false;
    for (size_t j = 0; j < sizeof(strip) / sizeof(strip[0]); ++j) {
      drop = drop || !strncmp(environ[i], strip[j], strlen(strip[j]));
    }
    if (!drop) env[k++] = environ[i];
  }
  env[k] = (char*)token_var;
  return env;
}

// Starts argv in a session of its own (it outlives our shell), stdin from
// /dev/null, stdout and stderr appended to log_path.
// ready_fd >= 0: the child gets it as descriptor 3 (for --ready-fd 3).
static bool cw__spawn(char* const argv[], char* const envp[], const char* log_path,
                      int ready_fd, cw_up_proc_t* out) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (ready_fd >= 0) posix_spawn_file_actions_adddup2(&fa, ready_fd, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSID);
  int err = posix_spawn(&out->pid, argv[0], &fa, &attr, argv, envp);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (err) {
    fprintf(stderr, "causeway: cannot start %s: %s\n", argv[0], strerror(err));
    return false;
  }
  char state = 0;
  if (!cw__proc_stat(out->pid, &out->start_time, &state)) out->start_time = 0;
  return true;
}

// --- Files ----------------------------------------------------------------------

// The whole file (malloc'd, NUL-terminated), NULL if unreadable.
static char* cw__read_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return NULL;
  size_t cap = 4096, len = 0;
  char* buf = malloc(cap);
  while (buf) {
    if (len + 1 == cap) {
      char* grown = realloc(buf, cap * 2);
      if (!grown) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = grown;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (buf) buf[len] = 0;
  return buf;
}

// Writes `text` to a new file `path` (0600; it must not exist).
static bool cw__write_new(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    fprintf(stderr, "causeway: cannot create %s: %s\n", path, strerror(errno));
    return false;
  }
  size_t n = strlen(text);
  bool ok = write(fd, text, n) == (ssize_t)n;
  int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) fprintf(stderr, "causeway: cannot write %s: %s\n", path, strerror(err));
  return ok;
}

static void cw__path(char* out, size_t size, const char* dir, const char* name, const char* ext) {
  snprintf(out, size, "%s/%s%s", dir, name, ext);
}

// Creates `dir` (0700) when missing; refuses one that another user owns or
// others may write to (the token lives there).
static bool cw__private_dir(const char* dir, bool create) {
  if (create && mkdir(dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "causeway: cannot create %s: %s\n", dir, strerror(errno));
    return false;
  }
  struct stat sb;
  if (lstat(dir, &sb) != 0) {
    fprintf(stderr, "causeway: %s: %s\n", dir, strerror(errno));
    return false;
  }
  if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 022)) {
    fprintf(stderr, "causeway: %s is not a private directory of this user (a directory you "
            "own that others cannot write to); choose another with --dir\n", dir);
    return false;
  }
  return true;
}

// DIR/lock, flock'd; -1 (after saying why) when another up or down holds it.
static int cw__lock(const char* dir) {
  char path[PATH_MAX];
  cw__path(path, sizeof(path), dir, "lock", "");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    fprintf(stderr, "causeway: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    fprintf(stderr, "causeway: another `causeway up` or `causeway down` is working on %s\n",
            dir);
    close(fd);
    return -1;
  }
  return fd;
}

// Removes the files up made for `st` and then DIR itself when it is empty.
static void cw__remove_files(const char* dir, const cw_up_state_t* st) {
  char path[PATH_MAX];
  static const char* const fixed[] = {"cluster", "env", "token", "lock"};
  for (size_t i = 0; i < st->num_procs; ++i) {
    cw__path(path, sizeof(path), dir, st->procs[i].name, ".sock");
    unlink(path);
    cw__path(path, sizeof(path), dir, st->procs[i].name, ".log");
    unlink(path);
  }
  for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); ++i) {
    cw__path(path, sizeof(path), dir, fixed[i], "");
    unlink(path);
  }
  if (rmdir(dir) != 0 && errno != ENOENT) {
    fprintf(stderr, "causeway: left %s in place: %s (files up did not make)\n", dir,
            strerror(errno));
  }
}

// The state in DIR/cluster: 1 read, 0 none there, -1 unreadable (said why).
static int cw__load_state(const char* dir, cw_up_state_t* out) {
  char path[PATH_MAX];
  cw__path(path, sizeof(path), dir, "cluster", "");
  char* text = cw__read_file(path);
  if (!text) {
    if (errno == ENOENT) return 0;
    fprintf(stderr, "causeway: cannot read %s: %s\n", path, strerror(errno));
    return -1;
  }
  char err[256];
  bool ok = cw_up_state_parse(text, out, err, sizeof(err));
  free(text);
  // Neither up nor down can know what ran: say how to recover by hand.
  if (!ok) {
    fprintf(stderr, "causeway: %s: %s. If daemons of that cluster still run (their command "
            "lines name %s: pgrep -af '%s/'), stop them, then remove %s\n", path, err, dir, dir,
            path);
  }
  return ok ? 1 : -1;
}

static bool cw__save_state(const char* dir, const cw_up_state_t* st) {
  char path[PATH_MAX], tmp[PATH_MAX];
  cw__path(path, sizeof(path), dir, "cluster", "");
  cw__path(tmp, sizeof(tmp), dir, "cluster", ".new");
  char* text = cw_up_state_format(st);
  unlink(tmp);
  bool ok = text && cw__write_new(tmp, text) && rename(tmp, path) == 0;
  free(text);
  return ok;
}

// The last CW__LOG_TAIL bytes of a daemon's log, to stderr.
static void cw__print_log_tail(const char* dir, const char* name) {
  char path[PATH_MAX];
  cw__path(path, sizeof(path), dir, name, ".log");
  char* text = cw__read_file(path);
  if (!text) return;
  size_t n = strlen(text);
  fprintf(stderr, "--- %s (last lines) ---\n%s", path, n > CW__LOG_TAIL ? text + n - CW__LOG_TAIL
                                                                         : text);
  if (n && text[n - 1] != '\n') fputc('\n', stderr);
  free(text);
}

// --- up -------------------------------------------------------------------------

// What follows `prefix` on its line of the log at `log_path`, once (no
// waiting): false when the log has no such line.
static bool cw__log_line(const char* log_path, const char* prefix, char* out, size_t size) {
  char* text = cw__read_file(log_path);
  const char* at = text ? strstr(text, prefix) : NULL;
  const char* end = at ? strchr(at, '\n') : NULL;
  bool found = end != NULL;
  if (found) {
    at += strlen(prefix);
    snprintf(out, size, "%.*s", (int)(end - at), at);
  }
  free(text);
  return found;
}

// Reads a daemon's readiness line (--ready-fd) from `fd` until the deadline:
// true with what follows `prefix` in out; false on EOF (it died), timeout,
// or when a process of `st` (NULL: none) is no longer running.
static bool cw__wait_ready(int fd, const char* prefix, int64_t deadline_ms, char* out,
                           size_t size, const cw_up_state_t* st) {
  char line[PATH_MAX + 64];
  size_t got = 0;
  for (;;) {
    int64_t left = deadline_ms - cw_time_now_ms();
    if (left <= 0) return false;
    if (st && cw__count_running(st) < st->num_procs) return false;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, left > 200 ? 200 : (int)left);
    if (rc < 0 && errno != EINTR) return false;
    if (rc <= 0) continue;
    ssize_t n = read(fd, line + got, sizeof(line) - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += (size_t)n;
    line[got] = 0;
    char* end = strchr(line, '\n');
    if (end || got == sizeof(line) - 1) {
      if (end) *end = 0;
      if (strncmp(line, prefix, strlen(prefix)) != 0) return false;
      snprintf(out, size, "%s", line + strlen(prefix));
      return true;
    }
  }
}

// Polls the controller until `want` workers are registered and alive.
static int cw__wait_workers(const char* address, const char* token, int want,
                            int64_t deadline_ms, const cw_up_state_t* st) {
  cw_client_options_t opts = {0};
  opts.token = token;
  opts.peer_name = "causeway-up";
  opts.connect_timeout_ms = 5000;
  // A controller that stops answering after HELLO fails the call (PING is
  // answered by a live one however long the request takes) by the deadline
  // instead of hanging the tool.
  int64_t left = deadline_ms - cw_time_now_ms();
  opts.liveness_ms = left < 100 ? 100 : left > 15000 ? 15000 : (int)left;
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(address, &opts, &c);
  if (s) {
    fprintf(stderr, "causeway: cannot reach the new controller at %s: %s\n", address,
            cw_status_message(s));
    cw_status_free(s);
    return CW_CLI_FAILED;
  }
  int rc = CW_CLI_TIMEOUT;
  size_t alive = 0;
  for (;;) {
    Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
    Causeway__V1__AdminStatus* reply = NULL;
    s = cw_client_call(c, CW_MSG_ADMIN_STATUS, &req.base, NULL, 0, NULL,
                       (ProtobufCMessage**)&reply, NULL);
    if (s) {
      fprintf(stderr, "causeway: status of the new controller: %s\n", cw_status_message(s));
      cw_status_free(s);
      rc = CW_CLI_FAILED;
      break;
    }
    alive = 0;
    for (size_t i = 0; i < reply->n_workers; ++i) {
      alive += strcmp(reply->workers[i]->state, "dead") != 0;
    }
    protobuf_c_message_free_unpacked(&reply->base, NULL);
    if (alive >= (size_t)want) {
      rc = CW_CLI_OK;
      break;
    }
    if (cw__count_running(st) < st->num_procs) {
      fprintf(stderr, "causeway: a daemon of the new cluster exited\n");
      rc = CW_CLI_FAILED;
      break;
    }
    if (cw_time_now_ms() >= deadline_ms) {
      fprintf(stderr, "causeway: %zu of %d workers registered in time\n", alive, want);
      break;
    }
    usleep(50 * 1000);
  }
  cw_client_release(c);
  return rc;
}

// The directory holding the daemons: CAUSEWAY_BIN_DIR, else this program's.
static bool cw__bin_dir(const cw_settings_t* settings, char* out, size_t size) {
  const char* env = cw_settings_string(settings, CW_SET_BIN_DIR);
  if (env[0]) {
    snprintf(out, size, "%s", env);
    return true;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return false;
  exe[n] = 0;
  char* slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = 0;
  snprintf(out, size, "%s", exe);
  return true;
}

// A pipe for a child's --ready-fd 3: [0] to read, [1] for cw__spawn.
static bool cw__ready_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "causeway: up: pipe: %s\n", strerror(errno));
    return false;
  }
  // The write end above the child's 0-3: with stdio closed it could be 1 or
  // 2, which the child's log then replaces before it becomes 3.
  int high = fcntl(fds[1], F_DUPFD_CLOEXEC, 4);
  close(fds[1]);
  fds[1] = high;
  if (high < 0) {
    fprintf(stderr, "causeway: up: fcntl: %s\n", strerror(errno));
    close(fds[0]);
    return false;
  }
  return true;
}

// Starts the daemons and waits for them; fills `st` as it goes (so a
// failure can stop what did start).
static int cw__start_daemons(const cw_cli_args_t* a, const char* dir, const char* bin,
                             const char* plugin, char** envp, cw_up_state_t* st,
                             const char* token, char* metrics, size_t metrics_size) {
  int64_t deadline = cw_time_now_ms() + (int64_t)(a->timeout_s * 1000);
  char ctl_exe[PATH_MAX], wrk_exe[PATH_MAX], listen[PATH_MAX], log_path[PATH_MAX];
  snprintf(ctl_exe, sizeof(ctl_exe), "%s/causeway-controller", bin);
  snprintf(wrk_exe, sizeof(wrk_exe), "%s/causeway-worker", bin);
  if (a->listen) snprintf(listen, sizeof(listen), "%s", a->listen);
  else cw__path(listen, sizeof(listen), dir, "controller", ".sock");
  char* ctl_argv[] = {ctl_exe, "--listen", listen, "--name", "controller", "--ready-fd", "3",
                      NULL, NULL, NULL};
  if (a->metrics_listen) {
    ctl_argv[7] = "--metrics-listen";
    ctl_argv[8] = (char*)a->metrics_listen;
  }
  cw_up_proc_t* p = &st->procs[0];
  snprintf(p->name, sizeof(p->name), "controller");
  cw__path(log_path, sizeof(log_path), dir, p->name, ".log");
  // Its readiness comes on a pipe, not from its log, which a full disk
  // leaves empty (up then waited out --timeout for a controller that ran).
  int ready[2];
  if (!cw__ready_pipe(ready)) return CW_CLI_FAILED;
  bool spawned = cw__spawn(ctl_argv, envp, log_path, ready[1], p);
  close(ready[1]);
  if (!spawned) {
    close(ready[0]);
    return CW_CLI_FAILED;
  }
  st->num_procs = 1;
  bool listening = cw__wait_ready(ready[0], "listening on ", deadline, st->controller,
                                  sizeof(st->controller), NULL);
  close(ready[0]);
  if (!listening) {
    fprintf(stderr, "causeway: the controller did not start listening\n");
    cw__print_log_tail(dir, "controller");
    return CW_CLI_FAILED;
  }
  // The port it took (`:0` asks the kernel for one); the controller logs it
  // before it is ready, so one look (a full disk leaves no line).
  if (a->metrics_listen &&
      !cw__log_line(log_path, "causeway-controller metrics on ", metrics, metrics_size)) {
    snprintf(metrics, metrics_size, "(see %s)", log_path);
  }
  if (!cw__save_state(dir, st)) return CW_CLI_FAILED;
  // Workers listen beside the controller: Unix sockets in DIR, or the
  // controller's TCP host on a port of their own choosing.
  char host[256] = "";
  if (a->listen) snprintf(host, sizeof(host), "%.*s", (int)(strrchr(a->listen, ':') - a->listen),
                          a->listen);
  char devices[16];
  snprintf(devices, sizeof(devices), "%d", a->devices);
  for (int i = 0; i < a->workers; ++i) {
    p = &st->procs[st->num_procs];
    snprintf(p->name, sizeof(p->name), "worker-%d", i);
    char wlisten[PATH_MAX];
    if (a->listen) snprintf(wlisten, sizeof(wlisten), "%s:0", host);
    else cw__path(wlisten, sizeof(wlisten), dir, p->name, ".sock");
    char* argv[] = {wrk_exe, "--plugin", (char*)plugin, "--devices", devices,
                    "--listen", wlisten, "--name", p->name, "--controller", st->controller,
                    "--exit-with-controller", "--ready-fd", "3", NULL};
    cw__path(log_path, sizeof(log_path), dir, p->name, ".log");
    if (!cw__ready_pipe(ready)) return CW_CLI_FAILED;
    spawned = cw__spawn(argv, envp, log_path, ready[1], p);
    close(ready[1]);
    if (!spawned) {
      close(ready[0]);
      return CW_CLI_FAILED;
    }
    st->num_procs++;
    if (!cw__save_state(dir, st)) {
      close(ready[0]);
      return CW_CLI_FAILED;
    }
    // One at a time, as the embedded cluster starts them: the controller
    // numbers devices in registration order, so worker-0's come first on
    // every start (started together, a loaded host decided).
    // Watching the controller and the workers started before it too.
    char line[PATH_MAX + 64];
    bool registered =
        cw__wait_ready(ready[0], "registered with ", deadline, line, sizeof(line), st);
    close(ready[0]);
    if (!registered) {
      const cw_up_proc_t* gone = NULL;
      for (size_t k = 0; k < st->num_procs && !gone; ++k) {
        if (!cw__running(&st->procs[k])) gone = &st->procs[k];
      }
      // Its pipe closed before the deadline: it is exiting (maybe not a
      // zombie yet).
      if (!gone && cw_time_now_ms() < deadline) gone = p;
      char how[96];
      if (gone) {
        cw__describe_end(gone, how, sizeof(how));
        fprintf(stderr, "causeway: %s %s before %s registered with the controller\n",
                gone->name, how, gone == p ? "it" : p->name);
      } else {
        fprintf(stderr, "causeway: %s did not register with the controller within --timeout "
                "(%g s; up starts the workers one after another)\n", p->name, a->timeout_s);
      }
      for (size_t k = 0; k < st->num_procs; ++k) cw__print_log_tail(dir, st->procs[k].name);
      return gone ? CW_CLI_FAILED : CW_CLI_TIMEOUT;
    }
  }
  int rc = cw__wait_workers(st->controller, token, a->workers, deadline, st);
  if (rc) {
    for (size_t i = 0; i < st->num_procs; ++i) cw__print_log_tail(dir, st->procs[i].name);
  }
  return rc;
}

// `up` interrupted while it starts the daemons (Ctrl-C, a SIGTERM from a
// supervisor): nothing has recorded them yet, so they would run on where
// `down` cannot see them. The handler stops what started and exits.
static cw_up_state_t* volatile cw__starting;

static void cw__interrupted(int sig) {
  cw_up_state_t* st = cw__starting;
  // Every slot: one spawned a moment ago may not be counted yet.
  for (size_t i = 0; st && i < CW_UP_MAX_PROCS; ++i) {
    if (st->procs[i].pid > 0) kill(st->procs[i].pid, SIGKILL);
  }
  _exit(128 + sig);
}

static int cw__start_guarded(const cw_cli_args_t* a, const char* dir, const char* bin,
                             const char* plugin, char** envp, cw_up_state_t* st,
                             const char* token, char* metrics, size_t metrics_size) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa = {.sa_handler = cw__interrupted}, old[3];
  sigemptyset(&sa.sa_mask);
  cw__starting = st;
  for (size_t i = 0; i < 3; ++i) sigaction(sigs[i], &sa, &old[i]);
  int rc = cw__start_daemons(a, dir, bin, plugin, envp, st, token, metrics, metrics_size);
  for (size_t i = 0; i < 3; ++i) sigaction(sigs[i], &old[i], NULL);
  cw__starting = NULL;
  return rc;
}

int cw_up_start(const cw_cli_args_t* a, const cw_settings_t* settings) {
  char dir[PATH_MAX - 64];
  cw_up_default_dir(a->dir, dir, sizeof(dir));
  const char* plugin = a->plugin ? a->plugin : cw_settings_string(settings, CW_SET_PLUGIN);
  if (!plugin[0]) {
    fprintf(stderr, "causeway: up: no PJRT plugin for the workers: pass --plugin PATH or set "
            "CAUSEWAY_PJRT_PLUGIN (the wheel's causeway command sets it from the cpu extra)\n");
    return CW_CLI_USAGE;
  }
  if (access(plugin, R_OK) != 0) {
    fprintf(stderr, "causeway: up: the PJRT plugin %s: %s\n", plugin, strerror(errno));
    return CW_CLI_USAGE;
  }
  char bin[PATH_MAX - 64];
  if (!cw__bin_dir(settings, bin, sizeof(bin))) {
    fprintf(stderr, "causeway: up: cannot locate causeway-controller (set CAUSEWAY_BIN_DIR)\n");
    return CW_CLI_FAILED;
  }
  static const char* const exes[] = {"causeway-controller", "causeway-worker"};
  for (size_t i = 0; i < 2; ++i) {
    char exe[PATH_MAX];
    snprintf(exe, sizeof(exe), "%s/%s", bin, exes[i]);
    if (access(exe, X_OK) != 0) {
      fprintf(stderr, "causeway: up: %s not found at %s (set CAUSEWAY_BIN_DIR to the directory "
              "holding causeway-controller and causeway-worker)\n", exes[i], exe);
      return CW_CLI_FAILED;
    }
  }
  if (!cw__private_dir(dir, true)) return CW_CLI_FAILED;
  int lock = cw__lock(dir);
  if (lock < 0) return CW_CLI_FAILED;
  cw_up_state_t* st = calloc(1, sizeof(*st));
  if (!st) {
    close(lock);
    return CW_CLI_FAILED;
  }
  int rc = CW_CLI_FAILED;
  int have = cw__load_state(dir, st);
  if (have < 0) goto out;
  if (have > 0 && cw__count_running(st)) {
    fprintf(stderr, "causeway: up: a cluster is running in %s already (controller %s); stop it "
            "with `causeway down --dir %s`, or choose another --dir\n", dir, st->controller, dir);
    goto out;
  }
  if (have > 0) {
    fprintf(stderr, "causeway: removing the files of a cluster in %s that is no longer "
            "running\n", dir);
    cw__remove_files(dir, st);
    close(lock);
    lock = -1;
    if (!cw__private_dir(dir, true) || (lock = cw__lock(dir)) < 0) goto out;
  }
  memset(st, 0, sizeof(*st));
  // A fresh token: 32 random bytes in hex, in a 0600 file the daemons (and
  // clients, through CAUSEWAY_TOKEN_FILE) read.
  uint8_t raw[32];
  char token[2 * sizeof(raw) + 2];
  cw_status_t s = cw_random_bytes(raw, sizeof(raw));
  if (s) {
    fprintf(stderr, "causeway: up: %s\n", cw_status_message(s));
    cw_status_free(s);
    goto out;
  }
  for (size_t i = 0; i < sizeof(raw); ++i) snprintf(token + 2 * i, 3, "%02x", raw[i]);
  explicit_bzero(raw, sizeof(raw));
  char token_path[PATH_MAX], token_var[PATH_MAX + 32];
  cw__path(token_path, sizeof(token_path), dir, "token", "");
  unlink(token_path);
  strcat(token, "\n");
  bool token_ok = cw__write_new(token_path, token);
  token[2 * sizeof(raw)] = 0;
  if (!token_ok) goto out;
  snprintf(token_var, sizeof(token_var), "CAUSEWAY_TOKEN_FILE=%s", token_path);
  char** envp = cw__child_env(token_var);
  if (!envp) goto out;
  char metrics[PATH_MAX] = "";
  rc = cw__start_guarded(a, dir, bin, plugin, envp, st, token, metrics, sizeof(metrics));
  free(envp);
  explicit_bzero(token, sizeof(token));
  if (rc) {
    fprintf(stderr, "causeway: up failed; stopping what started\n");
    cw__stop_procs(st, 2);
    cw__remove_files(dir, st);
    goto out;
  }
  char env_text[3 * PATH_MAX + 160], env_path[PATH_MAX];
  int used = snprintf(env_text, sizeof(env_text), "export CAUSEWAY_CONTROLLER=%s\nexport "
                      "CAUSEWAY_TOKEN_FILE=%s\n", st->controller, token_path);
  // A TLS cluster's clients need TLS on and the CA too, wherever they run.
  const char* ca = cw_settings_string(settings, CW_SET_TLS_CA);
  if (!strchr(st->controller, '/') && cw_settings_int(settings, CW_SET_TLS) && ca[0] &&
      used > 0 && (size_t)used < sizeof(env_text)) {
    char ca_abs[PATH_MAX];
    snprintf(env_text + used, sizeof(env_text) - (size_t)used,
             "export CAUSEWAY_TLS=1\nexport CAUSEWAY_TLS_CA=%s\n",
             realpath(ca, ca_abs) ? ca_abs : ca);
  }
  cw__path(env_path, sizeof(env_path), dir, "env", "");
  unlink(env_path);
  if (!cw__write_new(env_path, env_text)) {
    rc = CW_CLI_FAILED;
    goto out;
  }
  fprintf(stderr, "causeway: a cluster of %d workers x %d devices is up in %s (controller pid "
          "%d); stop it with `causeway down%s%s`. For clients:\n", a->workers, a->devices, dir,
          (int)st->procs[0].pid, a->dir ? " --dir " : "", a->dir ? a->dir : "");
  if (metrics[0]) fprintf(stderr, "causeway: the controller's metrics: %s\n", metrics);
  // A client certificate is a client's own identity: not something to export.
  if (!strchr(st->controller, '/') && cw_settings_int(settings, CW_SET_TLS) &&
      cw_settings_int(settings, CW_SET_TLS_REQUIRE_CLIENT_CERT)) {
    fprintf(stderr, "causeway: the daemons require client certificates: each client also needs "
            "CAUSEWAY_TLS_CERT and CAUSEWAY_TLS_KEY of its own (`causeway certs client NAME`)\n");
  }
  fputs(env_text, stdout);
  fflush(stdout);
out:
  free(st);
  if (lock >= 0) close(lock);
  return rc;
}

// --- down -----------------------------------------------------------------------

int cw_up_stop(const cw_cli_args_t* a) {
  char dir[PATH_MAX - 64];
  cw_up_default_dir(a->dir, dir, sizeof(dir));
  struct stat sb;
  if (lstat(dir, &sb) != 0) {
    fprintf(stderr, "causeway: down: no cluster in %s (%s)\n", dir, strerror(errno));
    return CW_CLI_NOT_FOUND;
  }
  if (!cw__private_dir(dir, false)) return CW_CLI_FAILED;
  int lock = cw__lock(dir);
  if (lock < 0) return CW_CLI_FAILED;
  cw_up_state_t* st = calloc(1, sizeof(*st));
  int rc = CW_CLI_FAILED;
  int have = st ? cw__load_state(dir, st) : -1;
  if (have == 0) {
    fprintf(stderr, "causeway: down: no cluster in %s (no state file)\n", dir);
    rc = CW_CLI_NOT_FOUND;
    char path[PATH_MAX];
    cw__path(path, sizeof(path), dir, "lock", "");
    unlink(path);
    rmdir(dir);  // only when up left nothing else
  } else if (have > 0) {
    size_t n = cw__stop_procs(st, a->grace_s);
    cw__remove_files(dir, st);
    fprintf(stderr, "causeway: stopped the cluster in %s (%zu processes were running)\n", dir,
            n);
    rc = CW_CLI_OK;
  }
  free(st);
  close(lock);
  return rc;
}
