#include "cw_cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_bytes.h"
#include "cw_json.h"
#include "cw_status.h"

const char cw_cli_usage[] =
    "usage: causeway [--controller ADDR] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  status [--json] [--max-age S]    workers, islands, sessions, cache, recent errors;\n"
    "                                   --max-age: the controller's last poll of the\n"
    "                                   workers if at most S old (at once on a large\n"
    "                                   fleet), else ask every worker now (the default)\n"
    "  pause SESSION                    hold the session's launches (they queue, in order)\n"
    "  resume SESSION                   release them in order\n"
    "  drain WORKER [--wait] [--timeout S]\n"
    "                                   finish what it holds, take nothing new;\n"
    "                                   --wait: until it is idle (default 60 s)\n"
    "  undrain WORKER                   take work again\n"
    "  up [--workers N] [--devices D] [--dir DIR] [--listen HOST:PORT]\n"
    "     [--metrics-listen HOST:PORT] [--plugin PATH] [--timeout S]\n"
    "                                   start a local cluster in the background (default\n"
    "                                   2 workers x 4 devices, Unix sockets in DIR, a\n"
    "                                   fresh token) and print the lines to export\n"
    "  down [--dir DIR] [--grace S]     stop it (SIGTERM, SIGKILL after S, default 10)\n"
    "                                   and remove its files\n"
    "  certs ca|daemon|client ...       a cluster's CA and certificates for TLS\n"
    "                                   (causeway certs --help)\n"
    "\n"
    "SESSION is an id or a name (as `causeway status` lists them); WORKER a worker name.\n"
    "The controller: --controller host:port or a Unix socket path, else\n"
    "$CAUSEWAY_CONTROLLER. The token: $CAUSEWAY_TOKEN or the file $CAUSEWAY_TOKEN_FILE\n"
    "names. up/down: DIR defaults to $XDG_RUNTIME_DIR/causeway (if that exists), else\n"
    "/tmp/causeway-UID; the workers' PJRT plugin is --plugin or $CAUSEWAY_PJRT_PLUGIN.\n"
    "\n"
    "exit codes: 0 done; 1 the controller refused or failed it (up: the cluster did not\n"
    "start or one runs in DIR already); 2 bad command line; 3 controller unreachable or\n"
    "token refused; 4 no such session or worker (down: no cluster in DIR);\n"
    "5 drain --wait or up timed out\n";

static bool cw__fail(char* err, size_t n, const char* fmt, const char* what) {
  snprintf(err, n, fmt, what);
  return false;
}

static bool cw__all_digits(const char* s) {
  if (!*s) return false;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return false;
  }
  return true;
}

enum {
  CW__OPT_CONTROLLER = 256,
  CW__OPT_TIMEOUT,
  CW__OPT_JSON,
  CW__OPT_WAIT,
  CW__OPT_MAX_AGE,
  CW__OPT_DIR,
  CW__OPT_WORKERS,
  CW__OPT_DEVICES,
  CW__OPT_LISTEN,
  CW__OPT_METRICS_LISTEN,
  CW__OPT_PLUGIN,
  CW__OPT_GRACE,
};

static const struct option cw__longopts[] = {
    {"help", no_argument, NULL, 'h'},
    {"controller", required_argument, NULL, CW__OPT_CONTROLLER},
    {"timeout", required_argument, NULL, CW__OPT_TIMEOUT},
    {"json", no_argument, NULL, CW__OPT_JSON},
    {"wait", no_argument, NULL, CW__OPT_WAIT},
    {"max-age", required_argument, NULL, CW__OPT_MAX_AGE},
    {"dir", required_argument, NULL, CW__OPT_DIR},
    {"workers", required_argument, NULL, CW__OPT_WORKERS},
    {"devices", required_argument, NULL, CW__OPT_DEVICES},
    {"listen", required_argument, NULL, CW__OPT_LISTEN},
    {"metrics-listen", required_argument, NULL, CW__OPT_METRICS_LISTEN},
    {"plugin", required_argument, NULL, CW__OPT_PLUGIN},
    {"grace", required_argument, NULL, CW__OPT_GRACE},
    {NULL, 0, NULL, 0}};

// "--name" of option code `opt`.
static const char* cw__opt_name(int opt) {
  for (const struct option* o = cw__longopts; o->name; ++o) {
    if (o->val == opt) return o->name;
  }
  return "?";
}

// An option that needs a value was given none (or "").
static bool cw__missing(int opt, char* err, size_t err_size) {
  const char* what = "a value";
  switch (opt) {
    case CW__OPT_CONTROLLER:
    case CW__OPT_LISTEN:
    case CW__OPT_METRICS_LISTEN:
      what = "an address";
      break;
    case CW__OPT_TIMEOUT:
    case CW__OPT_GRACE:
    case CW__OPT_MAX_AGE:
      what = "a number of seconds";
      break;
    case CW__OPT_WORKERS:
    case CW__OPT_DEVICES:
      what = "a number";
      break;
    case CW__OPT_DIR:
      what = "a directory";
      break;
    case CW__OPT_PLUGIN:
      what = "a path";
      break;
  }
  snprintf(err, err_size, "--%s needs %s", cw__opt_name(opt), what);
  return false;
}

// Seconds in [0, 86400] into *out.
static bool cw__seconds(int opt, const char* text, double* out, char* err, size_t err_size) {
  char* end = NULL;
  errno = 0;
  double t = strtod(text, &end);
  if (errno || *end || !isfinite(t) || t < 0 || t > 86400) {
    snprintf(err, err_size, "--%s '%s' is not a number of seconds (0..86400)", cw__opt_name(opt),
             text);
    return false;
  }
  *out = t;
  return true;
}

// A whole number in [1, max] into *out.
static bool cw__count(int opt, const char* text, int max, int* out, char* err, size_t err_size) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || *end || v < 1 || v > max) {
    snprintf(err, err_size, "--%s '%s' is not a number in 1..%d", cw__opt_name(opt), text, max);
    return false;
  }
  *out = (int)v;
  return true;
}

// Adds a command-line word to the positional ones (a command and a target).
static bool cw__positional(const char* a, const char** positional, int* npos, char* err,
                           size_t err_size) {
  if (*npos >= 2) return cw__fail(err, err_size, "unexpected argument '%s' (see --help)", a);
  positional[(*npos)++] = a;
  return true;
}

// The options each command accepts (bits of 1 << (code - CW__OPT_CONTROLLER)).
#define CW__BIT(o) (1u << ((o) - CW__OPT_CONTROLLER))
static const unsigned cw__up_opts = CW__BIT(CW__OPT_DIR) | CW__BIT(CW__OPT_WORKERS) |
                                    CW__BIT(CW__OPT_DEVICES) | CW__BIT(CW__OPT_LISTEN) |
                                    CW__BIT(CW__OPT_METRICS_LISTEN) | CW__BIT(CW__OPT_PLUGIN) |
                                    CW__BIT(CW__OPT_TIMEOUT);
static const unsigned cw__down_opts = CW__BIT(CW__OPT_DIR) | CW__BIT(CW__OPT_GRACE);

bool cw_cli_parse(int argc, char** argv, cw_cli_args_t* out, char* err, size_t err_size) {
  memset(out, 0, sizeof(*out));
  out->timeout_s = 60;
  out->workers = 2;
  out->devices = 4;
  out->grace_s = 10;
  out->max_age_s = -1;
  err[0] = 0;
  const char* positional[3] = {NULL, NULL, NULL};
  int npos = 0;
  unsigned given = 0;  // CW__BIT of each option given
  // "-": words in order (code 1), as options may come after the command;
  // ":": a missing value is ':', not a message of getopt's own. optind = 0
  // is glibc's full reset, so every call (the tests make many) starts afresh.
  opterr = 0;
  optind = 0;
  int c;
  while ((c = getopt_long(argc, argv, "-:h", cw__longopts, NULL)) != -1) {
    if (c >= CW__OPT_CONTROLLER) given |= CW__BIT(c);
    bool has_value = c >= CW__OPT_CONTROLLER && c != CW__OPT_JSON && c != CW__OPT_WAIT;
    if (has_value && !*optarg) return cw__missing(c, err, err_size);
    switch (c) {
      case 'h':
        out->command = CW_CLI_HELP;
        return false;  // err "": usage
      case CW__OPT_CONTROLLER:
        out->controller = optarg;
        break;
      case CW__OPT_TIMEOUT:
        if (!cw__seconds(c, optarg, &out->timeout_s, err, err_size)) return false;
        break;
      case CW__OPT_GRACE:
        if (!cw__seconds(c, optarg, &out->grace_s, err, err_size)) return false;
        break;
      case CW__OPT_MAX_AGE:
        if (!cw__seconds(c, optarg, &out->max_age_s, err, err_size)) return false;
        break;
      case CW__OPT_JSON:
        out->json = true;
        break;
      case CW__OPT_WAIT:
        out->wait = true;
        break;
      case CW__OPT_DIR:
        out->dir = optarg;
        break;
      case CW__OPT_WORKERS:
        if (!cw__count(c, optarg, 64, &out->workers, err, err_size)) return false;
        break;
      case CW__OPT_DEVICES:
        if (!cw__count(c, optarg, 4096, &out->devices, err, err_size)) return false;
        break;
      case CW__OPT_LISTEN:
        if (strchr(optarg, '/') || !strchr(optarg, ':')) {
          return cw__fail(err, err_size, "--listen '%s' is not HOST:PORT", optarg);
        }
        out->listen = optarg;
        break;
      case CW__OPT_METRICS_LISTEN:
        out->metrics_listen = optarg;
        break;
      case CW__OPT_PLUGIN:
        out->plugin = optarg;
        break;
      case 1:
        if (!cw__positional(optarg, positional, &npos, err, err_size)) return false;
        break;
      case ':':
        return cw__missing(optopt, err, err_size);
      default: {  // '?': unknown, or a value given to a flag (--json=x)
        const char* a = argv[optind - 1];
        char opt[3] = {'-', (char)optopt, 0};
        return cw__fail(err, err_size, "unknown option '%s' (see --help)",
                        strncmp(a, "--", 2) ? opt : a);
      }
    }
  }
  // After "--" every word is positional.
  for (int i = optind; i < argc; ++i) {
    if (!cw__positional(argv[i], positional, &npos, err, err_size)) return false;
  }
  if (npos == 0) return cw__fail(err, err_size, "%s", "no command given (see --help)");
  static const struct {
    const char* name;
    cw_cli_command_t cmd;
    bool needs_target;
  } cmds[] = {{"status", CW_CLI_STATUS, false}, {"pause", CW_CLI_PAUSE, true},
              {"resume", CW_CLI_RESUME, true},  {"drain", CW_CLI_DRAIN, true},
              {"undrain", CW_CLI_UNDRAIN, true}, {"up", CW_CLI_UP, false},
              {"down", CW_CLI_DOWN, false}};
  size_t k = 0;
  while (k < sizeof(cmds) / sizeof(cmds[0]) && strcmp(cmds[k].name, positional[0])) k++;
  if (k == sizeof(cmds) / sizeof(cmds[0])) {
    return cw__fail(err, err_size,
                    "unknown command '%s' (status, pause, resume, drain, undrain, up, down)",
                    positional[0]);
  }
  out->command = cmds[k].cmd;
  if (cmds[k].needs_target && npos < 2) {
    snprintf(err, err_size, "%s needs a %s", cmds[k].name,
             out->command >= CW_CLI_DRAIN ? "WORKER name" : "SESSION id or name");
    return false;
  }
  if (!cmds[k].needs_target && npos > 1) {
    return cw__fail(err, err_size, "unexpected argument '%s' (see --help)", positional[1]);
  }
  out->target = positional[1];
  if (out->target && out->command <= CW_CLI_RESUME) {
    if (cw__all_digits(out->target)) {
      errno = 0;
      unsigned long long id = strtoull(out->target, NULL, 10);
      if (errno || id == 0) {
        return cw__fail(err, err_size, "session id '%s' is out of range", out->target);
      }
      out->session_id = id;
    }
  }
  if (out->json && out->command != CW_CLI_STATUS) {
    return cw__fail(err, err_size, "%s", "--json is for status");
  }
  if ((given & CW__BIT(CW__OPT_MAX_AGE)) && out->command != CW_CLI_STATUS) {
    return cw__fail(err, err_size, "%s", "--max-age is for status");
  }
  if (out->command == CW_CLI_UP || out->command == CW_CLI_DOWN) {
    if (out->controller) {
      return cw__fail(err, err_size, "--controller is not for %s (it uses --dir)",
                      cmds[k].name);
    }
    unsigned allowed = out->command == CW_CLI_UP ? cw__up_opts : cw__down_opts;
    for (int o = CW__OPT_TIMEOUT; o <= CW__OPT_GRACE; ++o) {
      if ((given & CW__BIT(o)) && !(allowed & CW__BIT(o))) {
        snprintf(err, err_size, "--%s is not for %s (see --help)", cw__opt_name(o),
                 cmds[k].name);
        return false;
      }
    }
    if (out->command == CW_CLI_UP && out->timeout_s <= 0) {
      return cw__fail(err, err_size, "%s", "--timeout 0: up waits for its daemons to start "
                      "(seconds, more than 0)");
    }
    return true;
  }
  for (int o = CW__OPT_DIR; o <= CW__OPT_GRACE; ++o) {
    if (!(given & CW__BIT(o))) continue;
    bool up = cw__up_opts & CW__BIT(o), down = cw__down_opts & CW__BIT(o);
    snprintf(err, err_size, "--%s is for %s", cw__opt_name(o),
             up && down ? "up and down" : up ? "up" : "down");
    return false;
  }
  if (out->wait && out->command != CW_CLI_DRAIN) {
    return cw__fail(err, err_size, "%s", "--wait is for drain");
  }
  if ((given & CW__BIT(CW__OPT_TIMEOUT)) && out->command != CW_CLI_DRAIN) {
    return cw__fail(err, err_size, "%s", "--timeout is for drain and up");
  }
  return true;
}

// --- Output -----------------------------------------------------------------

static const char* cw__code_name(uint32_t code) {
  return cw_status_code_name((cw_status_code_t)code);
}

static void cw__time_text(int64_t unix_ms, char* buf, size_t n) {
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + k, n - k, ".%03dZ", (int)(unix_ms % 1000));
}

static void cw__devices_text(const int32_t* ids, size_t n, char* buf, size_t size) {
  // Runs of consecutive ids as a-b.
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && used < size; ) {
    size_t j = i;
    while (j + 1 < n && ids[j + 1] == ids[j] + 1) j++;
    int k = j > i ? snprintf(buf + used, size - used, "%s%d-%d", i ? "," : "", ids[i], ids[j])
                  : snprintf(buf + used, size - used, "%s%d", i ? "," : "", ids[i]);
    if (k > 0) used += (size_t)k;
    i = j + 1;
  }
  if (!n) snprintf(buf, size, "-");
}

void cw_cli_print_status(FILE* out, const Causeway__V1__AdminStatus* st) {
  fprintf(out, "controller %s, up %" PRId64 " s, %zu workers, %zu sessions\n", st->controller,
          st->uptime_ms / 1000, st->n_workers, st->n_sessions);
  if (st->stats_age_ms) {
    fprintf(out, "workers' numbers from the controller's poll %" PRId64 " ms ago\n",
            st->stats_age_ms);
  }
  if (st->resume_hold && st->resume_hold[0]) {
    fprintf(out, "after a controller restart, requests for devices wait: %s\n", st->resume_hold);
  }
  fprintf(out, "compile cache: %" PRIu64 " compiles, %" PRIu64 " hits, %" PRIu64 " misses, %"
          PRIu64 " bytes; launches relayed %" PRIu64 "; errors %" PRIu64 "\n\n", st->compiles,
          st->cache_hits, st->cache_misses, st->cache_bytes, st->launches, st->errors);
  // Names and addresses as wide as the longest (socket paths run long), so
  // the columns after them stay in line.
  int name_w = 20, addr_w = 24;
  for (size_t i = 0; i < st->n_workers; ++i) {
    size_t n = strlen(st->workers[i]->name), a = strlen(st->workers[i]->address);
    if (n > (size_t)name_w) name_w = n > 200 ? 200 : (int)n;
    if (a > (size_t)addr_w) addr_w = a > 300 ? 300 : (int)a;
  }
  fprintf(out, "WORKERS\n%-4s %-*s %-9s %-*s %-8s %-6s %8s %12s %5s %9s %8s %6s %6s %5s\n", "IDX",
          name_w, "NAME", "STATE", addr_w, "ADDRESS", "DEVICES", "ISLAND", "BUFFERS", "BYTES",
          "EXES", "LAUNCHES", "LAUNCH/S", "QUEUE", "INFLT", "HELD");
  for (size_t i = 0; i < st->n_workers; ++i) {
    const Causeway__V1__AdminWorker* w = st->workers[i];
    char devs[32];
    if (w->num_devices > 1) {
      snprintf(devs, sizeof(devs), "%d-%d", w->first_device,
               w->first_device + (int32_t)w->num_devices - 1);
    } else {
      snprintf(devs, sizeof(devs), "%d", w->first_device);
    }
    fprintf(out,
            "%-4u %-*s %-9s %-*s %-8s %-6u %8" PRIu64 " %12" PRIu64 " %5" PRIu64 " %9" PRIu64
            " %8.1f %6" PRIu64 " %6" PRIu64 " %5" PRIu64 "\n",
            w->index, name_w, w->name, w->state, addr_w, w->address, devs, w->island, w->buffers,
            w->buffer_bytes, w->executables, w->launches, w->launches_per_sec, w->queue_depth,
            w->launches_in_flight, w->launches_held);
  }
  // Workers of an older build than the controller's: what they lack after a
  // controller restart is in docs/deploy.md (cw_ctl_registry.c logs it too).
  for (size_t i = 0; i < st->n_workers; ++i) {
    const Causeway__V1__AdminWorker* w = st->workers[i];
    if (w->revision >= st->revision) continue;
    fprintf(out, "worker %s is an older build (revision %u; the controller's: %u): after a "
            "controller restart it does not report its drain or paused sessions; upgrade it "
            "(docs/deploy.md, Upgrading)\n", w->name, w->revision, st->revision);
  }
  // Memory back-pressure: each device's budget, what the buffers hold, and
  // what waits for memory (docs/operations.md "Memory").
  fprintf(out, "\nMEMORY\n%-*s %-12s %-12s %-12s %7s %-12s %8s %8s  %s\n", name_w, "WORKER",
          "BUDGET/DEV", "IN USE", "FULLEST DEV", "WAITING", "WAIT BYTES", "TIMEOUTS", "TOO BIG",
          "BUDGET FROM");
  for (size_t i = 0; i < st->n_workers; ++i) {
    const Causeway__V1__AdminWorker* w = st->workers[i];
    char budget[32], used[32], most[32], waiting[32];
    if (w->memory_budget) cw_bytes_format(w->memory_budget, budget, sizeof(budget));
    else snprintf(budget, sizeof(budget), "none");
    cw_bytes_format(w->memory_in_use, used, sizeof(used));
    cw_bytes_format(w->memory_in_use_max, most, sizeof(most));
    cw_bytes_format(w->memory_waiting_bytes, waiting, sizeof(waiting));
    fprintf(out, "%-*s %-12s %-12s %-12s %7" PRIu64 " %-12s %8" PRIu64 " %8" PRIu64 "  %s\n",
            name_w, w->name, budget, used, most, w->memory_waiting, waiting,
            w->memory_wait_timeouts, w->memory_refused,
            w->memory_budget_source[0] ? w->memory_budget_source : "-");
  }
  fprintf(out, "\nISLANDS\n%-6s %-8s %-7s %s\n", "ISLAND", "DEVICES", "QUEUED", "WORKERS");
  for (size_t i = 0; i < st->n_islands; ++i) {
    const Causeway__V1__AdminIsland* is = st->islands[i];
    fprintf(out, "%-6u %-8u %-7" PRIu64 " ", is->index, is->num_devices, is->queued);
    for (size_t k = 0; k < is->n_workers; ++k) fprintf(out, "%s%s", k ? "," : "", is->workers[k]);
    fprintf(out, "\n");
  }
  fprintf(out, "\nSESSIONS\n%-20s %-28s %-24s %-10s %-6s %5s %8s %12s %5s %7s\n", "ID", "NAME",
          "CLIENT", "DEVICES", "PAUSED", "HELD", "BUFFERS", "BYTES", "EXES", "MEMWAIT");
  for (size_t i = 0; i < st->n_sessions; ++i) {
    const Causeway__V1__AdminSession* s = st->sessions[i];
    char client[96], devs[128];
    snprintf(client, sizeof(client), "%s:%u", s->client_host[0] ? s->client_host : "?",
             s->client_pid);
    cw__devices_text(s->devices, s->n_devices, devs, sizeof(devs));
    if (s->waiting_for_devices) snprintf(devs, sizeof(devs), "queued");
    fprintf(out, "%-20" PRIu64 " %-28s %-24s %-10s %-6s %5" PRIu64 " %8" PRIu64 " %12" PRIu64
            " %5" PRIu64 " %7" PRIu64 "\n", s->session_id, s->name, client, devs,
            s->paused ? "yes" : "no", s->launches_held, s->buffers, s->buffer_bytes,
            s->executables, s->memory_waiting);
  }
  if (!st->n_sessions) fprintf(out, "(none)\n");
  fprintf(out, "\nRECENT ERRORS\n");
  for (size_t i = 0; i < st->n_recent_errors; ++i) {
    const Causeway__V1__AdminError* e = st->recent_errors[i];
    char when[40];
    cw__time_text(e->unix_ms, when, sizeof(when));
    fprintf(out, "%s  %-28s %-20s %s\n", when, e->where, cw__code_name(e->code), e->message);
  }
  if (!st->n_recent_errors) fprintf(out, "(none)\n");
}

// obj[key] = v and arr[] = v, taking v; jansson refuses a NULL v (out of
// memory) or a NULL container, releasing v, and then *ok turns false.
static void cw__set(json_t* obj, const char* key, json_t* v, bool* ok) {
  if (json_object_set_new(obj, key, v)) *ok = false;
}

static void cw__append(json_t* arr, json_t* v, bool* ok) {
  if (json_array_append_new(arr, v)) *ok = false;
}

static json_t* cw__worker_json(const Causeway__V1__AdminWorker* w, uint32_t revision, bool* ok) {
  json_t* o = json_object();
  cw__set(o, "index", json_integer(w->index), ok);
  cw__set(o, "name", cw_json_string_create(w->name), ok);
  cw__set(o, "address", cw_json_string_create(w->address), ok);
  cw__set(o, "state", cw_json_string_create(w->state), ok);
  cw__set(o, "platform", cw_json_string_create(w->platform), ok);
  json_t* devices = json_array();
  for (uint32_t d = 0; d < w->num_devices; ++d) {
    cw__append(devices, json_integer((json_int_t)w->first_device + d), ok);
  }
  cw__set(o, "devices", devices, ok);
  cw__set(o, "island", json_integer(w->island), ok);
  cw__set(o, "buffers", cw_json_uint_create(w->buffers), ok);
  cw__set(o, "buffer_bytes", cw_json_uint_create(w->buffer_bytes), ok);
  cw__set(o, "executables", cw_json_uint_create(w->executables), ok);
  cw__set(o, "launches", cw_json_uint_create(w->launches), ok);
  double rate = round(w->launches_per_sec * 1000.0) / 1000.0;  // 3 decimals are plenty
  cw__set(o, "launches_per_sec", isfinite(rate) ? json_real(rate) : json_null(), ok);
  cw__set(o, "queue_depth", cw_json_uint_create(w->queue_depth), ok);
  cw__set(o, "launches_in_flight", cw_json_uint_create(w->launches_in_flight), ok);
  cw__set(o, "launches_held", cw_json_uint_create(w->launches_held), ok);
  cw__set(o, "transfers_pending", cw_json_uint_create(w->transfers_pending), ok);
  cw__set(o, "uploads", cw_json_uint_create(w->uploads), ok);
  cw__set(o, "downloads", cw_json_uint_create(w->downloads), ok);
  cw__set(o, "errors", cw_json_uint_create(w->errors), ok);
  cw__set(o, "stats_fresh", json_boolean(w->stats_fresh), ok);
  // Only for an older build than the controller's: the usual form stays as it was.
  if (w->revision < revision) cw__set(o, "older_build_revision", json_integer(w->revision), ok);
  json_t* mem = json_object();
  cw__set(mem, "budget_per_device", cw_json_uint_create(w->memory_budget), ok);
  cw__set(mem, "budget_source", cw_json_string_create(w->memory_budget_source), ok);
  cw__set(mem, "in_use", cw_json_uint_create(w->memory_in_use), ok);
  cw__set(mem, "in_use_max_device", cw_json_uint_create(w->memory_in_use_max), ok);
  cw__set(mem, "waiting", cw_json_uint_create(w->memory_waiting), ok);
  cw__set(mem, "waiting_bytes", cw_json_uint_create(w->memory_waiting_bytes), ok);
  cw__set(mem, "waits", cw_json_uint_create(w->memory_waits), ok);
  cw__set(mem, "wait_timeouts", cw_json_uint_create(w->memory_wait_timeouts), ok);
  cw__set(mem, "refused", cw_json_uint_create(w->memory_refused), ok);
  cw__set(o, "memory", mem, ok);
  return o;
}

static json_t* cw__island_json(const Causeway__V1__AdminIsland* is, bool* ok) {
  json_t* o = json_object();
  cw__set(o, "index", json_integer(is->index), ok);
  json_t* workers = json_array();
  for (size_t k = 0; k < is->n_workers; ++k) {
    cw__append(workers, cw_json_string_create(is->workers[k]), ok);
  }
  cw__set(o, "workers", workers, ok);
  cw__set(o, "num_devices", json_integer(is->num_devices), ok);
  cw__set(o, "queued", cw_json_uint_create(is->queued), ok);
  return o;
}

static json_t* cw__session_json(const Causeway__V1__AdminSession* s, bool* ok) {
  json_t* o = json_object();
  cw__set(o, "id", cw_json_uint_create(s->session_id), ok);
  cw__set(o, "name", cw_json_string_create(s->name), ok);
  cw__set(o, "client_host", cw_json_string_create(s->client_host), ok);
  cw__set(o, "client_pid", json_integer(s->client_pid), ok);
  json_t* devices = json_array();
  for (size_t d = 0; d < s->n_devices; ++d) cw__append(devices, json_integer(s->devices[d]), ok);
  cw__set(o, "devices", devices, ok);
  cw__set(o, "waiting_for_devices", json_boolean(s->waiting_for_devices), ok);
  cw__set(o, "paused", json_boolean(s->paused), ok);
  cw__set(o, "launches_held", cw_json_uint_create(s->launches_held), ok);
  cw__set(o, "buffers", cw_json_uint_create(s->buffers), ok);
  cw__set(o, "buffer_bytes", cw_json_uint_create(s->buffer_bytes), ok);
  cw__set(o, "executables", cw_json_uint_create(s->executables), ok);
  cw__set(o, "clients", json_integer(s->clients), ok);
  cw__set(o, "memory_waiting", cw_json_uint_create(s->memory_waiting), ok);
  cw__set(o, "memory_waiting_bytes", cw_json_uint_create(s->memory_waiting_bytes), ok);
  return o;
}

static json_t* cw__error_json(const Causeway__V1__AdminError* e, bool* ok) {
  char when[40];
  cw__time_text(e->unix_ms, when, sizeof(when));
  json_t* o = json_object();
  cw__set(o, "time", json_string(when), ok);
  cw__set(o, "unix_ms", json_integer(e->unix_ms), ok);
  cw__set(o, "where", cw_json_string_create(e->where), ok);
  cw__set(o, "code", json_string(cw__code_name(e->code)), ok);
  cw__set(o, "message", cw_json_string_create(e->message), ok);
  return o;
}

char* cw_cli_status_json(const Causeway__V1__AdminStatus* st) {
  bool ok = true;
  json_t* root = json_object();
  cw__set(root, "controller", cw_json_string_create(st->controller), &ok);
  cw__set(root, "uptime_ms", json_integer(st->uptime_ms), &ok);
  // Only in answers from a poll (--max-age): the fresh form stays as it was.
  if (st->stats_age_ms) cw__set(root, "stats_age_ms", json_integer(st->stats_age_ms), &ok);
  if (st->resume_hold && st->resume_hold[0]) {
    cw__set(root, "resume_hold", cw_json_string_create(st->resume_hold), &ok);
  }
  cw__set(root, "launches_relayed", cw_json_uint_create(st->launches), &ok);
  cw__set(root, "errors", cw_json_uint_create(st->errors), &ok);
  json_t* cache = json_object();
  cw__set(cache, "compiles", cw_json_uint_create(st->compiles), &ok);
  cw__set(cache, "hits", cw_json_uint_create(st->cache_hits), &ok);
  cw__set(cache, "misses", cw_json_uint_create(st->cache_misses), &ok);
  cw__set(cache, "bytes", cw_json_uint_create(st->cache_bytes), &ok);
  cw__set(root, "compile_cache", cache, &ok);
  json_t* workers = json_array();
  for (size_t i = 0; i < st->n_workers; ++i) {
    cw__append(workers, cw__worker_json(st->workers[i], st->revision, &ok), &ok);
  }
  cw__set(root, "workers", workers, &ok);
  json_t* islands = json_array();
  for (size_t i = 0; i < st->n_islands; ++i) {
    cw__append(islands, cw__island_json(st->islands[i], &ok), &ok);
  }
  cw__set(root, "islands", islands, &ok);
  json_t* sessions = json_array();
  for (size_t i = 0; i < st->n_sessions; ++i) {
    cw__append(sessions, cw__session_json(st->sessions[i], &ok), &ok);
  }
  cw__set(root, "sessions", sessions, &ok);
  json_t* errors = json_array();
  for (size_t i = 0; i < st->n_recent_errors; ++i) {
    cw__append(errors, cw__error_json(st->recent_errors[i], &ok), &ok);
  }
  cw__set(root, "recent_errors", errors, &ok);
  // Pretty, in insertion order; 15 digits print a rate rounded to 3 decimals as it is.
  char* body = ok ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
  json_decref(root);
  char* text = NULL;
  if (body && asprintf(&text, "%s\n", body) < 0) text = NULL;
  free(body);
  return text;
}
