#include "cw_settings.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cw_log.h"

#define KIB (1024LL)
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)

static const cw_setting_def_t cw__defs[CW_SET_COUNT] = {
    [CW_SET_LOG_LEVEL] = {"log-level", CW_SETTING_STRING, 0, 0, "warn", "CW_LOG_LEVEL", false,
                          "error, warn, info or debug"},
    [CW_SET_MAX_PAYLOAD] = {"max-payload", CW_SETTING_INT, 4 * KIB, 1 * GIB, "16777216",
                            "CW_MAX_PAYLOAD", false,
                            "largest control payload (bytes) after HELLO"},
    [CW_SET_PREHELLO_MAX_PAYLOAD] = {"prehello-max-payload", CW_SETTING_INT, 256, 64 * KIB,
                                     "4096", "CW_PREHELLO_MAX_PAYLOAD", false,
                                     "largest payload accepted before HELLO"},
    [CW_SET_MAX_BULK] = {"max-bulk", CW_SETTING_INT, 1, 1024 * GIB, "68719476736",
                         "CW_MAX_BULK", false, "largest bulk byte stream of one frame"},
    [CW_SET_TOKEN] = {"token", CW_SETTING_STRING, 0, 0, "", "CW_TOKEN", true,
                      "shared secret presented in HELLO (environment only)"},
    [CW_SET_TOKEN_FILE] = {"token-file", CW_SETTING_STRING, 0, 0, "", "CW_TOKEN_FILE", false,
                           "file whose first line is the shared secret"},
    [CW_SET_HELLO_TIMEOUT_MS] = {"hello-timeout-ms", CW_SETTING_INT, 10, 600000, "10000",
                                 "CW_HELLO_TIMEOUT_MS", false,
                                 "close connections that send no HELLO in this time"},
    [CW_SET_CONNECT_TIMEOUT_MS] = {"connect-timeout-ms", CW_SETTING_INT, 10, 600000, "10000",
                                   "CW_CONNECT_TIMEOUT_MS", false,
                                   "give up connecting to a peer after this time"},
    [CW_SET_MAX_CONNECTIONS] = {"max-connections", CW_SETTING_INT, 1, 65536, "1024",
                                "CW_MAX_CONNECTIONS", false, "accepted connections at once"},
    [CW_SET_FRAMES_PER_WAKEUP] = {"frames-per-wakeup", CW_SETTING_INT, 1, 1 << 20, "64",
                                  "CW_FRAMES_PER_WAKEUP", false,
                                  "frames one connection may have handled per loop wakeup"},
    [CW_SET_PLUGIN] = {"plugin", CW_SETTING_STRING, 0, 0, "", "CW_PJRT_PLUGIN", false,
                       "path of the vendor PJRT plugin library"},
    [CW_SET_DEVICES] = {"devices", CW_SETTING_INT, 1, 4096, "4", "CW_DEVICES", false,
                        "devices the worker's PJRT client creates (CPU plugin)"},
    [CW_SET_LISTEN] = {"listen", CW_SETTING_STRING, 0, 0, "", "CW_LISTEN", false,
                       "host:port or a Unix socket path (contains '/')"},
    [CW_SET_WORKER_NAME] = {"name", CW_SETTING_STRING, 0, 0, "", "CW_WORKER_NAME", false,
                            "worker name for logs and errors (default: listen address)"},
    [CW_SET_CONTROLLER] = {"controller", CW_SETTING_STRING, 0, 0, "", "CW_CONTROLLER", false,
                           "worker: the controller to register with (host:port or socket path)"},
    [CW_SET_EXIT_WITH_CONTROLLER] = {"exit-with-controller", CW_SETTING_BOOL, 0, 1, "0",
                                     "CW_EXIT_WITH_CONTROLLER", false,
                                     "worker: exit when the controller connection is lost"},
    [CW_SET_WATCH_FD] = {"watch-fd", CW_SETTING_INT, -1, 1 << 20, "-1", "CW_WATCH_FD", false,
                         "exit cleanly when this inherited descriptor reaches EOF (-1: none)"},
    [CW_SET_COMPILE_CACHE_BYTES] = {"compile-cache-bytes", CW_SETTING_INT, 0, 1024 * GIB,
                                    "1073741824", "CW_COMPILE_CACHE_BYTES", false,
                                    "controller: memory for serialized executables (LRU)"},
    [CW_SET_MAX_HELD_REQUESTS] = {"max-held-requests", CW_SETTING_INT, 1, 1 << 20, "4096",
                                  "CW_MAX_HELD_REQUESTS", false,
                                  "worker: requests one session may have waiting for their seq"},
    [CW_SET_MAX_HELD_BYTES] = {"max-held-bytes", CW_SETTING_INT, 0, 1024 * GIB, "4294967296",
                               "CW_MAX_HELD_BYTES", false,
                               "worker: upload bytes one session may have waiting for their seq"},
    [CW_SET_STAGING_CACHE_BYTES] = {"staging-cache-bytes", CW_SETTING_INT, 0, 1024 * GIB,
                                    "1073741824", "CW_STAGING_CACHE_BYTES", false,
                                    "worker: freed bulk staging blocks (>= 1 MiB) kept for reuse"},
    [CW_SET_COMPILE_CACHE_DIR] = {"compile-cache-dir", CW_SETTING_STRING, 0, 0, "",
                                  "CW_COMPILE_CACHE_DIR", false,
                                  "controller: directory of the compile cache on disk (\"\": off)"},
    [CW_SET_COMPILE_CACHE_DISK_BYTES] = {"compile-cache-disk-bytes", CW_SETTING_INT, 0,
                                         1024 * 1024 * GIB, "10737418240",
                                         "CW_COMPILE_CACHE_DISK_BYTES", false,
                                         "controller: bound of the disk cache (oldest out first)"},
    [CW_SET_METRICS_LISTEN] = {"metrics-listen", CW_SETTING_STRING, 0, 0, "", "CW_METRICS_LISTEN",
                               false, "controller: serve Prometheus metrics over HTTP on "
                               "host:port (GET /metrics); empty: off"},
    [CW_SET_HEARTBEAT_MS] = {"heartbeat-ms", CW_SETTING_INT, 10, 60000, "1000", "CW_HEARTBEAT_MS",
                             false, "worker: send the controller a heartbeat this often"},
    [CW_SET_WORKER_TIMEOUT_MS] = {"worker-timeout-ms", CW_SETTING_INT, 50, 600000, "5000",
                                  "CW_WORKER_TIMEOUT_MS", false,
                                  "controller: declare a worker dead after this long without a "
                                  "heartbeat"},
    [CW_SET_RECONNECT_MAX_MS] = {"reconnect-max-ms", CW_SETTING_INT, 10, 600000, "2000",
                                 "CW_RECONNECT_MAX_MS", false,
                                 "worker: longest wait between attempts to reach a lost "
                                 "controller (from 100 ms, doubling)"},
    [CW_SET_RELAY_LAUNCHES] = {"relay-launches", CW_SETTING_BOOL, 0, 1, "0", "CW_RELAY_LAUNCHES",
                               false,
                               "controller: sessions send LAUNCH through the controller, never "
                               "straight to the worker"},
    [CW_SET_ISLAND] = {"island", CW_SETTING_STRING, 0, 0, "", "CW_ISLAND", false,
                       "worker: name of the island its plugin's processes form with other "
                       "workers (multi-process plugins); empty: the worker is its own island"},
    [CW_SET_ISLAND_SIZE] = {"island-size", CW_SETTING_INT, 1, 4096, "1", "CW_ISLAND_SIZE", false,
                            "worker: how many workers (plugin processes) form --island"},
};

const cw_setting_def_t* cw_settings_def(cw_setting_id_t id) {
  return ((unsigned)id < CW_SET_COUNT) ? &cw__defs[id] : NULL;
}

static cw_status_t cw__set_one(cw_settings_t* s, cw_setting_id_t id, const char* value) {
  const cw_setting_def_t* d = &cw__defs[id];
  if (d->type == CW_SETTING_BOOL) {
    if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes")) {
      s->ints[id] = 1;
    } else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no")) {
      s->ints[id] = 0;
    } else {
      return cw_make_status(CW_INVALID_ARGUMENT, "setting %s: '%s' is not a boolean", d->name,
                            value);
    }
    return cw_ok_status();
  }
  if (d->type == CW_SETTING_INT) {
    errno = 0;
    char* end = NULL;
    long long v = strtoll(value, &end, 0);
    if (errno || !end || end == value || *end) {
      return cw_make_status(CW_INVALID_ARGUMENT, "setting %s: '%s' is not an integer",
                            d->name, value);
    }
    if (v < d->min || v > d->max) {
      return cw_make_status(CW_OUT_OF_RANGE,
                            "setting %s: %lld is outside [%" PRId64 ", %" PRId64 "]",
                            d->name, v, d->min, d->max);
    }
    s->ints[id] = v;
    return cw_ok_status();
  }
  char* copy = strdup(value);
  if (!copy) return cw_make_status(CW_RESOURCE_EXHAUSTED, "setting %s: out of memory", d->name);
  free(s->strings[id]);
  s->strings[id] = copy;
  return cw_ok_status();
}

cw_status_t cw_settings_initialize(cw_settings_t* out) {
  memset(out, 0, sizeof(*out));
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    CW_RETURN_IF_ERROR(cw__set_one(out, (cw_setting_id_t)i, cw__defs[i].default_value),
                       "default");
    const char* env = getenv(cw__defs[i].env);
    if (env && *env) {
      CW_RETURN_IF_ERROR(cw__set_one(out, (cw_setting_id_t)i, env), "environment %s",
                         cw__defs[i].env);
    }
  }
  return cw_ok_status();
}

void cw_settings_deinitialize(cw_settings_t* settings) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    free(settings->strings[i]);
    settings->strings[i] = NULL;
  }
}

cw_status_t cw_settings_set(cw_settings_t* settings, const char* name, const char* value,
                            bool from_command_line) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    if (strcmp(cw__defs[i].name, name) != 0) continue;
    if (from_command_line && cw__defs[i].secret) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "--%s may not be given on the command line; set %s or use a file",
                            name, cw__defs[i].env);
    }
    return cw__set_one(settings, (cw_setting_id_t)i, value);
  }
  return cw_make_status(CW_INVALID_ARGUMENT, "unknown setting --%s (see --help)", name);
}

cw_status_t cw_settings_parse_args(cw_settings_t* settings, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "unexpected argument '%s'", a);
    }
    char name[64];
    const char* eq = strchr(a + 2, '=');
    const char* value;
    size_t n = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
    if (n == 0 || n >= sizeof(name)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "bad flag '%s'", a);
    }
    memcpy(name, a + 2, n);
    name[n] = 0;
    const cw_setting_def_t* def = NULL;
    for (int k = 0; k < CW_SET_COUNT; ++k) {
      if (!strcmp(cw__defs[k].name, name)) def = &cw__defs[k];
    }
    if (eq) {
      value = eq + 1;
    } else if (def && def->type == CW_SETTING_BOOL) {
      value = "1";  // a bare boolean flag
    } else {
      if (i + 1 >= argc) return cw_make_status(CW_INVALID_ARGUMENT, "--%s needs a value", name);
      value = argv[++i];
    }
    CW_RETURN_IF_ERROR(cw_settings_set(settings, name, value, true), "");
  }
  return cw_ok_status();
}

cw_status_t cw_settings_read_token_file(const char* path, char** out_token) {
  *out_token = NULL;
  FILE* f = fopen(path, "r");
  if (!f) {
    return cw_make_status(CW_NOT_FOUND, "token file %s: %s", path, strerror(errno));
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077)) {
    CW_LOGW("token file %s is readable by group or others (mode %03o); chmod 600 it", path,
            (unsigned)(sb.st_mode & 0777));
  }
  char line[1024];
  if (!fgets(line, sizeof(line), f)) line[0] = 0;
  fclose(f);
  line[strcspn(line, "\r\n")] = 0;
  if (!line[0]) return cw_make_status(CW_INVALID_ARGUMENT, "token file %s is empty", path);
  *out_token = strdup(line);
  explicit_bzero(line, sizeof(line));
  if (!*out_token) return cw_make_status(CW_RESOURCE_EXHAUSTED, "token file %s: out of memory", path);
  return cw_ok_status();
}

cw_status_t cw_settings_load_token(cw_settings_t* settings) {
  if (cw_settings_string(settings, CW_SET_TOKEN)[0]) return cw_ok_status();
  const char* path = cw_settings_string(settings, CW_SET_TOKEN_FILE);
  if (!path[0]) return cw_ok_status();
  char* token = NULL;
  CW_RETURN_IF_ERROR(cw_settings_read_token_file(path, &token), "");
  free(settings->strings[CW_SET_TOKEN]);
  settings->strings[CW_SET_TOKEN] = token;
  return cw_ok_status();
}

void cw_settings_print_help(FILE* out) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* d = &cw__defs[i];
    fprintf(out, "  %s%-22s %-22s %s (default %s)\n", d->secret ? "  " : "--",
            d->secret ? "" : d->name, d->env, d->help,
            d->secret ? "unset" : (d->default_value[0] ? d->default_value : "\"\""));
  }
}

bool cw_settings_initialize_for_main(const char* program, const char* usage,
                                     const char* log_name, int argc, char** argv,
                                     cw_settings_t* settings, int* out_exit_code) {
  *out_exit_code = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: %s %s\n\n", program, usage);
      cw_settings_print_help(stdout);
      memset(settings, 0, sizeof(*settings));
      return false;
    }
  }
  cw_status_t st = cw_settings_initialize(settings);
  if (!st) st = cw_settings_parse_args(settings, argc, argv);
  if (!st) st = cw_settings_load_token(settings);
  if (st) {
    fprintf(stderr, "%s: settings: %s\n", program, cw_status_message(st));
    cw_status_free(st);
    cw_settings_deinitialize(settings);
    *out_exit_code = 1;
    return false;
  }
  cw_log_level_t level = CW_LOG_WARN;
  const char* text = cw_settings_string(settings, CW_SET_LOG_LEVEL);
  if (!cw_log_parse_level(text, &level)) {
    fprintf(stderr, "%s: unknown log level '%s'\n", program, text);
    *out_exit_code = 2;
  } else if (!*cw_settings_string(settings, CW_SET_LISTEN)) {
    fprintf(stderr, "%s: --listen is required (see --help)\n", program);
    *out_exit_code = 2;
  }
  if (*out_exit_code) {
    cw_settings_deinitialize(settings);
    return false;
  }
  cw_log_initialize(log_name, level);
  return true;
}
