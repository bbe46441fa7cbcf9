#include "cw_cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_json.h"
#include "cw_status.h"

const char cw_cli_usage[] =
    "usage: causeway [--controller ADDR] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  status [--json]                  workers, islands, sessions, cache, recent errors\n"
    "  pause SESSION                    hold the session's launches (they queue, in order)\n"
    "  resume SESSION                   release them in order\n"
    "  drain WORKER [--wait] [--timeout S]\n"
    "                                   finish what it holds, take nothing new;\n"
    "                                   --wait: until it is idle (default 60 s)\n"
    "  undrain WORKER                   take work again\n"
    "\n"
    "SESSION is an id or a name (as `causeway status` lists them); WORKER a worker name.\n"
    "The controller: --controller host:port or a Unix socket path, else\n"
    "$CAUSEWAY_CONTROLLER. The token: $CAUSEWAY_TOKEN or the file $CAUSEWAY_TOKEN_FILE\n"
    "names.\n"
    "\n"
    "exit codes: 0 done; 1 the controller refused or failed it; 2 bad command line;\n"
    "3 controller unreachable or token refused; 4 no such session or worker;\n"
    "5 drain --wait timed out\n";

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

bool cw_cli_parse(int argc, char** argv, cw_cli_args_t* out, char* err, size_t err_size) {
  memset(out, 0, sizeof(*out));
  out->timeout_s = 60;
  err[0] = 0;
  const char* positional[3] = {NULL, NULL, NULL};
  int npos = 0;
  bool timeout_given = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      out->command = CW_CLI_HELP;
      return false;  // err "": usage
    }
    if (!strncmp(a, "--controller", 12) && (a[12] == 0 || a[12] == '=')) {
      const char* v = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v || !*v) return cw__fail(err, err_size, "%s needs an address", "--controller");
      out->controller = v;
    } else if (!strncmp(a, "--timeout", 9) && (a[9] == 0 || a[9] == '=')) {
      const char* v = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v || !*v) return cw__fail(err, err_size, "%s needs a number of seconds", "--timeout");
      char* end = NULL;
      errno = 0;
      double s = strtod(v, &end);
      if (errno || *end || !isfinite(s) || s < 0 || s > 86400) {
        return cw__fail(err, err_size, "--timeout '%s' is not a number of seconds (0..86400)", v);
      }
      out->timeout_s = s;
      timeout_given = true;
    } else if (!strcmp(a, "--json")) {
      out->json = true;
    } else if (!strcmp(a, "--wait")) {
      out->wait = true;
    } else if (a[0] == '-' && a[1]) {
      return cw__fail(err, err_size, "unknown option '%s' (see --help)", a);
    } else {
      if (npos >= 2) return cw__fail(err, err_size, "unexpected argument '%s' (see --help)", a);
      positional[npos++] = a;
    }
  }
  if (npos == 0) return cw__fail(err, err_size, "%s", "no command given (see --help)");
  static const struct {
    const char* name;
    cw_cli_command_t cmd;
    bool needs_target;
  } cmds[] = {{"status", CW_CLI_STATUS, false}, {"pause", CW_CLI_PAUSE, true},
              {"resume", CW_CLI_RESUME, true},  {"drain", CW_CLI_DRAIN, true},
              {"undrain", CW_CLI_UNDRAIN, true}};
  size_t k = 0;
  while (k < sizeof(cmds) / sizeof(cmds[0]) && strcmp(cmds[k].name, positional[0])) k++;
  if (k == sizeof(cmds) / sizeof(cmds[0])) {
    return cw__fail(err, err_size, "unknown command '%s' (status, pause, resume, drain, undrain)",
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
  if ((out->wait || timeout_given) && out->command != CW_CLI_DRAIN) {
    return cw__fail(err, err_size, "%s", "--wait and --timeout are for drain");
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
  fprintf(out, "compile cache: %" PRIu64 " compiles, %" PRIu64 " hits, %" PRIu64 " misses, %"
          PRIu64 " bytes; launches relayed %" PRIu64 "; errors %" PRIu64 "\n\n", st->compiles,
          st->cache_hits, st->cache_misses, st->cache_bytes, st->launches, st->errors);
  fprintf(out, "WORKERS\n%-4s %-20s %-9s %-24s %-8s %-6s %8s %12s %5s %9s %8s %6s %6s %5s\n",
          "IDX", "NAME", "STATE", "ADDRESS", "DEVICES", "ISLAND", "BUFFERS", "BYTES", "EXES",
          "LAUNCHES", "LAUNCH/S", "QUEUE", "INFLT", "HELD");
  for (size_t i = 0; i < st->n_workers; ++i) {
    const Causeway__V1__AdminWorker* w = st->workers[i];
    char devs[32];
    if (w->num_devices > 1) {
      snprintf(devs, sizeof(devs), "%d-%d", w->first_device,
               w->first_device + (int32_t)w->num_devices - 1);
    } else {
      snprintf(devs, sizeof(devs), "%d", w->first_device);
    }
    fprintf(out, "%-4u %-20s %-9s %-24s %-8s %-6u %8" PRIu64 " %12" PRIu64 " %5" PRIu64
            " %9" PRIu64 " %8.1f %6" PRIu64 " %6" PRIu64 " %5" PRIu64 "\n",
            w->index, w->name, w->state, w->address, devs, w->island, w->buffers,
            w->buffer_bytes, w->executables, w->launches, w->launches_per_sec, w->queue_depth,
            w->launches_in_flight, w->launches_held);
  }
  fprintf(out, "\nISLANDS\n%-6s %-8s %-7s %s\n", "ISLAND", "DEVICES", "QUEUED", "WORKERS");
  for (size_t i = 0; i < st->n_islands; ++i) {
    const Causeway__V1__AdminIsland* is = st->islands[i];
    fprintf(out, "%-6u %-8u %-7" PRIu64 " ", is->index, is->num_devices, is->queued);
    for (size_t k = 0; k < is->n_workers; ++k) fprintf(out, "%s%s", k ? "," : "", is->workers[k]);
    fprintf(out, "\n");
  }
  fprintf(out, "\nSESSIONS\n%-20s %-28s %-24s %-10s %-6s %5s %8s %12s %5s\n", "ID", "NAME",
          "CLIENT", "DEVICES", "PAUSED", "HELD", "BUFFERS", "BYTES", "EXES");
  for (size_t i = 0; i < st->n_sessions; ++i) {
    const Causeway__V1__AdminSession* s = st->sessions[i];
    char client[96], devs[128];
    snprintf(client, sizeof(client), "%s:%u", s->client_host[0] ? s->client_host : "?",
             s->client_pid);
    cw__devices_text(s->devices, s->n_devices, devs, sizeof(devs));
    fprintf(out, "%-20" PRIu64 " %-28s %-24s %-10s %-6s %5" PRIu64 " %8" PRIu64 " %12" PRIu64
            " %5" PRIu64 "\n", s->session_id, s->name, client, devs, s->paused ? "yes" : "no",
            s->launches_held, s->buffers, s->buffer_bytes, s->executables);
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

char* cw_cli_status_json(const Causeway__V1__AdminStatus* st) {
  cw_json_t j;
  cw_json_initialize(&j);
  cw_json_begin_object(&j, NULL);
  cw_json_string(&j, "controller", st->controller);
  cw_json_int(&j, "uptime_ms", st->uptime_ms);
  cw_json_uint(&j, "launches_relayed", st->launches);
  cw_json_uint(&j, "errors", st->errors);
  cw_json_begin_object(&j, "compile_cache");
  cw_json_uint(&j, "compiles", st->compiles);
  cw_json_uint(&j, "hits", st->cache_hits);
  cw_json_uint(&j, "misses", st->cache_misses);
  cw_json_uint(&j, "bytes", st->cache_bytes);
  cw_json_end_object(&j);
  cw_json_begin_array(&j, "workers");
  for (size_t i = 0; i < st->n_workers; ++i) {
    const Causeway__V1__AdminWorker* w = st->workers[i];
    cw_json_begin_object(&j, NULL);
    cw_json_uint(&j, "index", w->index);
    cw_json_string(&j, "name", w->name);
    cw_json_string(&j, "address", w->address);
    cw_json_string(&j, "state", w->state);
    cw_json_string(&j, "platform", w->platform);
    cw_json_begin_array(&j, "devices");
    for (uint32_t d = 0; d < w->num_devices; ++d) cw_json_int(&j, NULL, w->first_device + d);
    cw_json_end_array(&j);
    cw_json_uint(&j, "island", w->island);
    cw_json_uint(&j, "buffers", w->buffers);
    cw_json_uint(&j, "buffer_bytes", w->buffer_bytes);
    cw_json_uint(&j, "executables", w->executables);
    cw_json_uint(&j, "launches", w->launches);
    cw_json_double(&j, "launches_per_sec", w->launches_per_sec);
    cw_json_uint(&j, "queue_depth", w->queue_depth);
    cw_json_uint(&j, "launches_in_flight", w->launches_in_flight);
    cw_json_uint(&j, "launches_held", w->launches_held);
    cw_json_uint(&j, "transfers_pending", w->transfers_pending);
    cw_json_uint(&j, "uploads", w->uploads);
    cw_json_uint(&j, "downloads", w->downloads);
    cw_json_uint(&j, "errors", w->errors);
    cw_json_bool(&j, "stats_fresh", w->stats_fresh);
    cw_json_end_object(&j);
  }
  cw_json_end_array(&j);
  cw_json_begin_array(&j, "islands");
  for (size_t i = 0; i < st->n_islands; ++i) {
    const Causeway__V1__AdminIsland* is = st->islands[i];
    cw_json_begin_object(&j, NULL);
    cw_json_uint(&j, "index", is->index);
    cw_json_begin_array(&j, "workers");
    for (size_t k = 0; k < is->n_workers; ++k) cw_json_string(&j, NULL, is->workers[k]);
    cw_json_end_array(&j);
    cw_json_uint(&j, "num_devices", is->num_devices);
    cw_json_uint(&j, "queued", is->queued);
    cw_json_end_object(&j);
  }
  cw_json_end_array(&j);
  cw_json_begin_array(&j, "sessions");
  for (size_t i = 0; i < st->n_sessions; ++i) {
    const Causeway__V1__AdminSession* s = st->sessions[i];
    cw_json_begin_object(&j, NULL);
    cw_json_uint(&j, "id", s->session_id);
    cw_json_string(&j, "name", s->name);
    cw_json_string(&j, "client_host", s->client_host);
    cw_json_uint(&j, "client_pid", s->client_pid);
    cw_json_begin_array(&j, "devices");
    for (size_t d = 0; d < s->n_devices; ++d) cw_json_int(&j, NULL, s->devices[d]);
    cw_json_end_array(&j);
    cw_json_bool(&j, "paused", s->paused);
    cw_json_uint(&j, "launches_held", s->launches_held);
    cw_json_uint(&j, "buffers", s->buffers);
    cw_json_uint(&j, "buffer_bytes", s->buffer_bytes);
    cw_json_uint(&j, "executables", s->executables);
    cw_json_uint(&j, "clients", s->clients);
    cw_json_end_object(&j);
  }
  cw_json_end_array(&j);
  cw_json_begin_array(&j, "recent_errors");
  for (size_t i = 0; i < st->n_recent_errors; ++i) {
    const Causeway__V1__AdminError* e = st->recent_errors[i];
    char when[40];
    cw__time_text(e->unix_ms, when, sizeof(when));
    cw_json_begin_object(&j, NULL);
    cw_json_string(&j, "time", when);
    cw_json_int(&j, "unix_ms", e->unix_ms);
    cw_json_string(&j, "where", e->where);
    cw_json_string(&j, "code", cw__code_name(e->code));
    cw_json_string(&j, "message", e->message);
    cw_json_end_object(&j);
  }
  cw_json_end_array(&j);
  cw_json_end_object(&j);
  char* text = j.failed ? NULL : j.buf;
  if (text) j.buf = NULL;
  cw_json_deinitialize(&j);
  return text;
}
