// Process, file and directory helpers for multi-process tests (see header).
#include "cw_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

void cw_test_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int cw_test_stderr_capture_begin(cw_test_stderr_capture_t* capture) {
  fflush(stderr);
  capture->file = tmpfile();
  capture->saved_fd = dup(2);
  if (!capture->file || capture->saved_fd < 0 || dup2(fileno(capture->file), 2) < 0) {
    fprintf(stderr, "cw_test: cannot capture stderr: %s\n", strerror(errno));
    if (capture->file) fclose(capture->file);
    if (capture->saved_fd >= 0) close(capture->saved_fd);
    capture->file = NULL;
    capture->saved_fd = -1;
    return -1;
  }
  return 0;
}

int cw_test_stderr_capture_end(cw_test_stderr_capture_t* capture, char* out, size_t capacity) {
  fflush(stderr);
  dup2(capture->saved_fd, 2);
  close(capture->saved_fd);
  rewind(capture->file);
  size_t got = fread(out, 1, capacity - 1, capture->file);
  out[got] = '\0';
  fclose(capture->file);
  capture->file = NULL;
  capture->saved_fd = -1;
  return 0;
}

const char* cw_test_getenv(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return (v && v[0]) ? v : fallback;
}

// ---- Processes --------------------------------------------------------------

static size_t env_key_len(const char* kv) {
  const char* eq = strchr(kv, '=');
  return eq ? (size_t)(eq - kv) : strlen(kv);
}

// Builds environ + overrides into a NULL-terminated array (pointers borrowed).
static char** build_env(const char* const* extra_env) {
  size_t n = 0, extra = 0;
  while (environ[n]) n++;
  while (extra_env && extra_env[extra]) extra++;
  char** env = calloc(n + extra + 1, sizeof(char*));
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool overridden = false;
    for (size_t j = 0; j < extra; j++) {
      size_t len = env_key_len(extra_env[j]);
      if (env_key_len(environ[i]) == len && strncmp(environ[i], extra_env[j], len) == 0) {
        overridden = true;
        break;
      }
    }
    if (!overridden) env[k++] = environ[i];
  }
  for (size_t j = 0; j < extra; j++) env[k++] = (char*)extra_env[j];
  env[k] = NULL;
  return env;
}

int cw_test_process_spawn(const char* const* argv, const char* const* extra_env,
                          const char* label, cw_test_process_t* out_process) {
  memset(out_process, 0, sizeof(*out_process));
  out_process->stdout_fd = -1;
  snprintf(out_process->label, sizeof(out_process->label), "%s", label ? label : argv[0]);
  if (access(argv[0], X_OK) != 0) {
    fprintf(stderr, "cw_test: cannot execute %s: %s\n", argv[0], strerror(errno));
    return -1;
  }
  char** env = build_env(extra_env);
  if (!env) return -1;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "cw_test: pipe: %s\n", strerror(errno));
    free(env);
    return -1;
  }
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "cw_test: fork: %s\n", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    free(env);
    return -1;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here on.
    // Die with the test: a crashed or timed-out test leaves no daemons behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(126);
    close_range(3, ~0u, 0);  // no inherited sockets: a peer's EOF must be real
    execve(argv[0], (char* const*)argv, env);
    static const char msg[] = "cw_test: execve failed\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    _exit(127);
  }
  free(env);
  close(fds[1]);
  out_process->pid = pid;
  out_process->stdout_fd = fds[0];
  return 0;
}

int cw_test_process_read_line(cw_test_process_t* process, const char* prefix,
                              int timeout_ms, char* out_rest, size_t rest_capacity) {
  char line[4096];
  size_t len = 0;
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = deadline - cw_time_now_ms();
    if (left <= 0) {
      fprintf(stderr, "cw_test: %s: no line \"%s...\" within %d ms\n", process->label, prefix,
              timeout_ms);
      return -1;
    }
    struct pollfd pfd = {.fd = process->stdout_fd, .events = POLLIN};
    int r = poll(&pfd, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    // Read one byte at a time: bytes after the line stay in the pipe for the
    // drain thread.
    char c;
    ssize_t n = read(process->stdout_fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fprintf(stderr, "cw_test: %s: stdout closed before \"%s...\" (process exited?)\n",
              process->label, prefix);
      return -1;
    }
    if (c != '\n') {
      if (len + 1 < sizeof(line)) line[len++] = c;
      continue;
    }
    line[len] = '\0';
    len = 0;
    size_t plen = strlen(prefix);
    if (strncmp(line, prefix, plen) == 0) {
      snprintf(out_rest, rest_capacity, "%s", line + plen);
      return 0;
    }
    fprintf(stderr, "[%s stdout] %s\n", process->label, line);
  }
}

static void* drain_main(void* arg) {
  cw_test_process_t* p = arg;
  char buf[4096];
  for (;;) {
    ssize_t n = read(p->stdout_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    fprintf(stderr, "[%s stdout] %.*s", p->label, (int)n, buf);
  }
  return NULL;
}

int cw_test_process_start_drain(cw_test_process_t* process) {
  if (process->drain_started || process->stdout_fd < 0) return 0;
  if (pthread_create(&process->drain_thread, NULL, drain_main, process) != 0) return -1;
  process->drain_started = true;
  return 0;
}

static void finish_process(cw_test_process_t* process) {
  process->pid = 0;
  if (process->drain_started) {
    pthread_join(process->drain_thread, NULL);
    process->drain_started = false;
  }
  if (process->stdout_fd >= 0) {
    close(process->stdout_fd);
    process->stdout_fd = -1;
  }
}

int cw_test_process_wait(cw_test_process_t* process, int timeout_ms) {
  if (process->pid <= 0) return -1;
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(process->pid, &status, WNOHANG);
    if (r == process->pid) {
      finish_process(process);
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0 && errno != EINTR) {
      fprintf(stderr, "cw_test: waitpid(%d): %s\n", (int)process->pid, strerror(errno));
      finish_process(process);
      return -1;
    }
    if (cw_time_now_ms() >= deadline) return -1;
    cw_test_sleep_ms(10);
  }
}

int cw_test_process_stop(cw_test_process_t* process, int timeout_ms) {
  if (process->pid <= 0) return -1;
  if (timeout_ms <= 0) timeout_ms = 30000;
  kill(process->pid, SIGTERM);
  int rc = cw_test_process_wait(process, timeout_ms);
  if (rc == -1 && process->pid > 0) {
    fprintf(stderr, "cw_test: %s did not exit %d ms after SIGTERM; killing it\n",
            process->label, timeout_ms);
    (void)cw_test_process_kill(process);
    return -1;
  }
  return rc;
}

int cw_test_process_kill(cw_test_process_t* process) {
  if (process->pid <= 0) return 0;
  kill(process->pid, SIGKILL);
  return cw_test_process_wait(process, 30000);
}

// ---- Workers ----------------------------------------------------------------

int cw_test_worker_start(const cw_test_worker_options_t* options,
                         cw_test_worker_t* out_worker) {
  memset(out_worker, 0, sizeof(*out_worker));
  out_worker->process.stdout_fd = -1;
  char binary[1024];
  if (options->binary) {
    snprintf(binary, sizeof(binary), "%s", options->binary);
  } else if (cw_test_getenv("CW_WORKER_BIN", NULL)) {
    snprintf(binary, sizeof(binary), "%s", getenv("CW_WORKER_BIN"));
  } else {
    snprintf(binary, sizeof(binary), "%s/bin/causeway-worker",
             cw_test_getenv("CW_BUILD_DIR", "."));
  }
  const char* plugin =
      options->plugin ? options->plugin : cw_test_getenv("CAUSEWAY_PJRT_PLUGIN", NULL);
  if (!plugin) {
    fprintf(stderr, "cw_test: no PJRT plugin (set CAUSEWAY_PJRT_PLUGIN)\n");
    return -1;
  }
  char devices[16];
  snprintf(devices, sizeof(devices), "%d", options->devices > 0 ? options->devices : 1);
  const char* argv[64];
  int argc = 0;
  argv[argc++] = binary;
  argv[argc++] = "--plugin";
  argv[argc++] = plugin;
  argv[argc++] = "--devices";
  argv[argc++] = devices;
  argv[argc++] = "--listen";
  argv[argc++] = options->listen ? options->listen : "127.0.0.1:0";
  if (options->name) {
    argv[argc++] = "--name";
    argv[argc++] = options->name;
  }
  for (int i = 0; options->extra_args && options->extra_args[i]; i++) {
    if (argc >= 62) return -1;
    argv[argc++] = options->extra_args[i];
  }
  argv[argc] = NULL;
  const char* label = options->name ? options->name : "causeway-worker";
  if (cw_test_process_spawn(argv, options->extra_env, label, &out_worker->process) != 0)
    return -1;
  int timeout = options->start_timeout_ms > 0 ? options->start_timeout_ms : 60000;
  if (cw_test_process_read_line(&out_worker->process, CW_TEST_LISTEN_PREFIX, timeout,
                                out_worker->address, sizeof(out_worker->address)) != 0) {
    int rc = cw_test_process_kill(&out_worker->process);
    fprintf(stderr, "cw_test: worker %s failed to start (status %d)\n", label, rc);
    return -1;
  }
  if (cw_test_process_start_drain(&out_worker->process) != 0) {
    (void)cw_test_process_kill(&out_worker->process);
    return -1;
  }
  return 0;
}

int cw_test_worker_stop(cw_test_worker_t* worker, int timeout_ms) {
  return cw_test_process_stop(&worker->process, timeout_ms);
}

int cw_test_worker_kill(cw_test_worker_t* worker) {
  return cw_test_process_kill(&worker->process);
}

// ---- Files and directories -------------------------------------------------

int cw_test_controller_start(const char* const* extra_args, cw_test_process_t* out_process,
                             char* out_address, size_t address_capacity) {
  const char* bin = cw_test_getenv("CW_CONTROLLER_BIN", NULL);
  char fallback[1024];
  if (!bin) {
    snprintf(fallback, sizeof(fallback), "%s/bin/causeway-controller",
             cw_test_getenv("CW_BUILD_DIR", "."));
    bin = fallback;
  }
  const char* argv[32] = {bin, "--listen", "127.0.0.1:0"};
  size_t n = 3;
  for (size_t i = 0; extra_args && extra_args[i] && n < 31; ++i) argv[n++] = extra_args[i];
  argv[n] = NULL;
  if (cw_test_process_spawn(argv, NULL, "controller", out_process) != 0) return -1;
  if (cw_test_process_read_line(out_process, "causeway-controller listening on ", 30000,
                                out_address, address_capacity) != 0) {
    return -1;
  }
  return cw_test_process_start_drain(out_process);
}

int cw_test_tempdir_create(const char* prefix, char* out_path, size_t capacity) {
  const char* base = cw_test_getenv("TMPDIR", "/tmp");
  int n = snprintf(out_path, capacity, "%s/%s.XXXXXX", base, prefix);
  if (n < 0 || (size_t)n >= capacity) return -1;
  if (!mkdtemp(out_path)) {
    fprintf(stderr, "cw_test: mkdtemp(%s): %s\n", out_path, strerror(errno));
    return -1;
  }
  return 0;
}

static int remove_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  (void)remove(path);  // keep going; cw_test_tempdir_remove checks the result
  return 0;
}

int cw_test_tempdir_remove(const char* path) {
  if (!path || !path[0]) return 0;
  nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return access(path, F_OK) == 0 ? -1 : 0;
}

int cw_test_read_file(const char* path, void** out_data, size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cw_test: open %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (fseek(f, 0, SEEK_END) != 0) goto fail;
  long len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0) goto fail;
  char* data = malloc((size_t)len + 1);
  if (!data) goto fail;
  if (len > 0 && fread(data, 1, (size_t)len, f) != (size_t)len) {
    free(data);
    goto fail;
  }
  data[len] = '\0';
  fclose(f);
  *out_data = data;
  *out_size = (size_t)len;
  return 0;
fail:
  fprintf(stderr, "cw_test: read %s failed\n", path);
  fclose(f);
  return -1;
}

int cw_test_write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  size_t n = size ? fwrite(data, 1, size, f) : 0;
  int rc = fclose(f);
  return (n == size && rc == 0) ? 0 : -1;
}

int cw_test_read_program(const char* name, void** out_program, size_t* out_program_size,
                         void** out_options, size_t* out_options_size) {
  const char* dir = cw_test_getenv("CW_PROGRAMS_DIR", "programs");
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.mlir", dir, name);
  if (cw_test_read_file(path, out_program, out_program_size) != 0) return -1;
  snprintf(path, sizeof(path), "%s/%s.opts", dir, name);
  return cw_test_read_file(path, out_options, out_options_size);
}
