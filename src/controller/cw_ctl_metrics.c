// Prometheus metrics of the controller and its health probes: GET-only HTTP
// on the controller's own libuv loop (src/net/cw_http_server.h bounds what
// an HTTP peer can do). Per-worker figures are the workers' last STATS from
// the operations module's once-a-second poll (cw_ctl_ops_worker_stats), so
// scrapes cause no worker traffic. Paths: /metrics, /healthz, /readyz; any
// other 404.
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_ctl_metrics.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_relay.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_http_server.h"
#include "cw_log.h"
#include "cw_time.h"

static const double cw__launch_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                           0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                           5,      10,      30};
static const double cw__compile_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                            1,     2.5,   5,    10,    30,   60,  120};
#define CW__NUM(a) (sizeof(a) / sizeof((a)[0]))
#define CW__MAX_BUCKETS 20

typedef struct cw_ctl_hist_s {
  const double* bounds;
  size_t num_bounds;
  uint64_t counts[CW__MAX_BUCKETS];  // per bucket (not cumulative); last: above every bound
  uint64_t count;
  double sum;
} cw_ctl_hist_t;

// What the metrics keep per worker index.
typedef struct cw_ctl_wmetrics_s {
  uint64_t launches;  // relayed to this worker and answered
} cw_ctl_wmetrics_t;

typedef struct cw_ctl_metrics_s {
  cw_controller_t* ctl;
  cw_http_server_t* server;  // NULL once stopped
  cw_ctl_wmetrics_t* workers;
  size_t num_workers;
  cw_ctl_hist_t launch_latency;
  cw_ctl_hist_t compile_latency;
} cw_ctl_metrics_t;

static void cw__hist_observe(cw_ctl_hist_t* h, double v) {
  size_t i = 0;
  while (i < h->num_bounds && v > h->bounds[i]) i++;
  h->counts[i]++;
  h->count++;
  h->sum += v;
}

// The per-worker record, grown to cover `index`; NULL when out of memory.
static cw_ctl_wmetrics_t* cw__wm(cw_ctl_metrics_t* m, uint32_t index) {
  if (index >= m->num_workers) {
    size_t n = (size_t)index + 1;
    cw_ctl_wmetrics_t* grown = realloc(m->workers, n * sizeof(*grown));
    if (!grown) return NULL;
    memset(grown + m->num_workers, 0, (n - m->num_workers) * sizeof(*grown));
    m->workers = grown;
    m->num_workers = n;
  }
  return &m->workers[index];
}

void cw_ctl_metrics_on_launch_reply(cw_controller_t* ctl, const cw_ctl_item_t* it) {
  cw_ctl_metrics_t* m = ctl->metrics;
  if (!m) return;
  cw__hist_observe(&m->launch_latency,
                   (double)(cw_time_now_ns() - it->received_ns) / 1e9);
  cw_ctl_wmetrics_t* wm = cw__wm(m, it->worker);
  if (wm) wm->launches++;
}

void cw_ctl_metrics_on_compile(cw_controller_t* ctl, int64_t elapsed_ms, bool cache_hit) {
  if (ctl->metrics) cw__hist_observe(&ctl->metrics->compile_latency, (double)elapsed_ms / 1e3);
}

// --- Rendering --------------------------------------------------------------------------

static void cw__family(cw_http_text_t* t, const char* name, const char* type, const char* help) {
  cw_http_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

// A family of one unlabelled sample.
static void cw__scalar(cw_http_text_t* t, const char* name, const char* type, const char* help,
                       uint64_t value) {
  cw__family(t, name, type, help);
  cw_http_text_printf(t, "%s %" PRIu64 "\n", name, value);
}

// name{worker="..",island="N"} value
static void cw__worker_sample(cw_http_text_t* t, const char* name, const cw_ctl_worker_t* w,
                              uint64_t value) {
  cw_http_text_printf(t, "%s{worker=\"", name);
  cw_http_text_label(t, w->name);
  cw_http_text_printf(t, "\",island=\"%u\"} %" PRIu64 "\n", w->island, value);
}

static void cw__hist_render(cw_http_text_t* t, const char* name, const char* help,
                            const cw_ctl_hist_t* h) {
  cw__family(t, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < h->num_bounds; ++i) {
    cum += h->counts[i];
    cw_http_text_printf(t, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, h->bounds[i], cum);
  }
  cum += h->counts[h->num_bounds];
  cw_http_text_printf(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.9g\n%s_count %" PRIu64
                      "\n", name, cum, name, h->sum, name, h->count);
}

// A per-worker family from the workers' last STATS (offset of a uint64 field).
static void cw__stats_family(cw_http_text_t* t, cw_ctl_metrics_t* m, const char* name,
                             const char* type, const char* help, size_t offset) {
  cw_controller_t* ctl = m->ctl;
  cw__family(t, name, type, help);
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    double age_s = 0;
    const Causeway__V1__Stats* st = cw_ctl_ops_worker_stats(ctl->workers[i], &age_s);
    if (!st) continue;
    cw__worker_sample(t, name, ctl->workers[i], *(const uint64_t*)((const char*)st + offset));
  }
}

// Per-worker families taken from the workers' last STATS.
typedef struct cw_ctl_stats_family_s {
  const char* name;
  const char* type;
  const char* help;
  size_t offset;  // of a uint64_t field of Causeway__V1__Stats
} cw_ctl_stats_family_t;

#define CW__SF(name, type, help, field) {name, type, help, offsetof(Causeway__V1__Stats, field)}
static const cw_ctl_stats_family_t cw__stats_families[] = {
    CW__SF("causeway_worker_launches_total", "counter", "Launches the worker issued (all sessions)",
           launches),
    CW__SF("causeway_worker_uploads_total", "counter", "Uploads the worker stored", uploads),
    CW__SF("causeway_worker_downloads_total", "counter", "Downloads the worker answered",
           downloads),
    CW__SF("causeway_upload_bytes_total", "counter", "Bytes uploaded by clients to the worker",
           upload_bytes),
    CW__SF("causeway_download_bytes_total", "counter",
           "Bytes downloaded by clients from the worker", download_bytes),
    CW__SF("causeway_transfer_sent_bytes_total", "counter",
           "Worker-to-worker bytes this worker sent (SEND)", send_bytes),
    CW__SF("causeway_transfer_received_bytes_total", "counter",
           "Worker-to-worker bytes this worker received (PUT)", put_bytes),
    CW__SF("causeway_transfers_sent_total", "counter",
           "Worker-to-worker transfers this worker sent", sends),
    CW__SF("causeway_worker_errors_total", "counter", "Error replies the worker sent", errors),
    CW__SF("causeway_worker_launches_dispatched_total", "counter",
           "Launches whose Execute ran on the worker's dispatch thread (may block), not its loop",
           launches_dispatched),
    CW__SF("causeway_buffers", "gauge", "Live buffers on the worker", buffers),
    CW__SF("causeway_buffer_bytes", "gauge", "Bytes of live buffers on the worker", buffer_bytes),
    CW__SF("causeway_worker_executables", "gauge", "Loaded executables on the worker",
           executables),
    CW__SF("causeway_worker_sessions", "gauge", "Sessions open on the worker", sessions),
    CW__SF("causeway_worker_memory_budget_bytes", "gauge",
           "Bytes of buffers each device of the worker may hold (0: no limit)", memory_budget),
    CW__SF("causeway_worker_memory_in_use_bytes", "gauge",
           "Bytes the worker's buffers hold against its budget, all devices", memory_in_use),
    CW__SF("causeway_worker_memory_in_use_max_bytes", "gauge",
           "Bytes the worker's buffers hold on its fullest device", memory_in_use_max),
    CW__SF("causeway_worker_memory_waiting_requests", "gauge",
           "Uploads, copies and launches waiting for memory on the worker", memory_waiting),
    CW__SF("causeway_worker_memory_waiting_bytes", "gauge",
           "Bytes the requests waiting for memory need", memory_waiting_bytes),
    CW__SF("causeway_worker_memory_waits_total", "counter",
           "Requests that had to wait for memory", memory_waits),
    CW__SF("causeway_worker_memory_wait_timeouts_total", "counter",
           "Waits for memory that timed out (RESOURCE_EXHAUSTED)", memory_wait_timeouts),
    CW__SF("causeway_worker_memory_refused_total", "counter",
           "Requests bigger than the memory budget, refused at once (RESOURCE_EXHAUSTED)",
           memory_refused),
    CW__SF("causeway_worker_credential_reloads_total", "counter",
           "SIGHUPs and credential file changes the worker reloaded", credential_reloads),
    CW__SF("causeway_worker_credential_reload_failures_total", "counter",
           "Credential reloads the worker refused (the ones in use kept)",
           credential_reload_failures),
};

static void cw__render(cw_ctl_metrics_t* m, cw_http_text_t* t) {
  cw_controller_t* ctl = m->ctl;
  (void)cw__wm(m, ctl->num_workers ? (uint32_t)ctl->num_workers - 1 : 0);

  cw__family(t, "causeway_launches_total", "counter",
             "Launches the controller relayed to each island's worker and got an answer for "
             "(sessions with a direct lease send theirs to the worker: see "
             "causeway_worker_launches_total)");
  for (size_t i = 0; i < ctl->num_workers && i < m->num_workers; ++i) {
    cw__worker_sample(t, "causeway_launches_total", ctl->workers[i], m->workers[i].launches);
  }
  cw__family(t, "causeway_session_launches_total", "counter",
             "Launches relayed per live session");
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    cw_http_text_printf(t, "causeway_session_launches_total{session=\"%" PRIu64 "\"} %" PRIu64
                        "\n", s->id, s->launches);
  }
  cw__family(t, "causeway_launch_queue_depth", "gauge",
             "Launches waiting in each island's queue (not yet relayed)");
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw__worker_sample(t, "causeway_launch_queue_depth", ctl->workers[i],
                      cw_ctl_sched_queued(ctl->workers[i], true));
  }
  size_t sessions = 0;
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) sessions++;
  cw__scalar(t, "causeway_sessions", "gauge", "Live client sessions", sessions);
  size_t alive = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) alive += ctl->workers[i]->alive;
  cw__family(t, "causeway_workers", "gauge", "Registered workers by state");
  cw_http_text_printf(t, "causeway_workers{state=\"alive\"} %zu\ncauseway_workers{state=\"dead\"} "
                      "%zu\n", alive, ctl->num_workers - alive);
  cw__family(t, "causeway_worker_up", "gauge", "1 while the worker is alive, 0 once lost");
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw__worker_sample(t, "causeway_worker_up", ctl->workers[i], ctl->workers[i]->alive);
  }

  cw__scalar(t, "causeway_compiles_total", "counter", "Client COMPILE requests answered",
             ctl->compiles);
  cw__scalar(t, "causeway_compile_cache_hits_total", "counter",
             "Compiles served from the compile cache (or an identical compile in flight)",
             ctl->cache_hits);
  cw__scalar(t, "causeway_compile_cache_misses_total", "counter",
             "Compiles that ran XLA on a worker", ctl->cache_misses);
  cw__scalar(t, "causeway_compile_cache_bytes", "gauge",
             "Serialized executables held, with their keys", cw_compile_cache_bytes(ctl->cache));
  cw__scalar(t, "causeway_compiles_queued", "gauge",
             "COMPILEs waiting at the controller for a place at their worker",
             ctl->compiles_queued);
  cw__scalar(t, "causeway_compiles_dropped_total", "counter",
             "Queued COMPILEs dropped unsent: every session waiting for them closed",
             ctl->compiles_dropped);
  cw__scalar(t, "causeway_errors_total", "counter",
             "Error replies the controller sent to clients and workers", ctl->errors);
  cw__scalar(t, "causeway_credential_reloads_total", "counter",
             "SIGHUPs and credential file changes the controller reloaded", ctl->creds.reloads);
  cw__scalar(t, "causeway_credential_reload_failures_total", "counter",
             "Credential reloads the controller refused (the ones in use kept)",
             ctl->creds.failures);
  // Only where a certificate is known: a 0 would read as long expired.
  cw__family(t, "causeway_tls_certificate_expiry_timestamp_seconds", "gauge",
             "End of the controller's TLS certificate (Unix seconds)");
  if (ctl->creds.not_after > 0) {
    cw_http_text_printf(t, "causeway_tls_certificate_expiry_timestamp_seconds %" PRId64 "\n",
                        ctl->creds.not_after);
  }

  cw__hist_render(t, "causeway_launch_latency_seconds",
                  "Relayed launches: from the controller's receipt to the worker's reply",
                  &m->launch_latency);
  cw__hist_render(t, "causeway_compile_latency_seconds",
                  "Client compiles: from receipt to the reply (cache hits included)",
                  &m->compile_latency);

  // From the workers' last STATS (polled every second).
  for (size_t i = 0; i < CW__NUM(cw__stats_families); ++i) {
    const cw_ctl_stats_family_t* f = &cw__stats_families[i];
    cw__stats_family(t, m, f->name, f->type, f->help, f->offset);
  }
  cw__family(t, "causeway_worker_tls_certificate_expiry_timestamp_seconds", "gauge",
             "End of the worker's TLS certificate (Unix seconds), from its last STATS");
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    double age_s = 0;
    const Causeway__V1__Stats* st = cw_ctl_ops_worker_stats(ctl->workers[i], &age_s);
    if (st && st->tls_cert_not_after) {
      cw__worker_sample(t, "causeway_worker_tls_certificate_expiry_timestamp_seconds",
                        ctl->workers[i], st->tls_cert_not_after);
    }
  }
  cw__family(t, "causeway_worker_stats_age_seconds", "gauge",
             "Age of the worker's last STATS answer the figures above come from");
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    double age_s = 0;
    if (!cw_ctl_ops_worker_stats(ctl->workers[i], &age_s)) continue;
    cw_http_text_printf(t, "causeway_worker_stats_age_seconds{worker=\"");
    cw_http_text_label(t, ctl->workers[i]->name);
    cw_http_text_printf(t, "\",island=\"%u\"} %.3f\n", ctl->workers[i]->island, age_s);
  }
}

// --- HTTP ------------------------------------------------------------------------------

// GET /metrics, and the probes: /healthz answers while the loop runs;
// /readyz once the controller listens for sessions and workers (which is
// before this server starts) until it shuts down. Readiness does not wait
// for workers: workers reach the controller through the same address
// (a Kubernetes Service routes only to ready pods), and a session waits for
// the workers it needs itself (CAUSEWAY_MIN_WORKERS).
static void cw__http_handle(void* user, const cw_http_request_t* r, cw_http_response_t* out) {
  cw_ctl_metrics_t* m = user;
  cw_controller_t* ctl = m->ctl;
  if (!strcmp(r->path, "/metrics")) {
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
    cw__render(m, &out->body);
  } else if (!strcmp(r->path, "/healthz")) {
    cw_http_text_printf(&out->body, "ok\n");
  } else if (!strcmp(r->path, "/readyz")) {
    size_t alive = 0;
    for (size_t i = 0; i < ctl->num_workers; ++i) alive += ctl->workers[i]->alive;
    if (ctl->shutting_down) {
      out->code = 503;
      cw_http_text_printf(&out->body, "not ready: shutting down\n");
    } else {
      cw_http_text_printf(&out->body, "ready: listening on %s; %zu of %zu workers alive\n",
                          ctl->net.listen_address, alive, ctl->num_workers);
    }
  } else {
    cw_http_response_error(out, 404);
  }
}

// --- Lifecycle -------------------------------------------------------------------------

cw_status_t cw_ctl_metrics_start(cw_controller_t* ctl) {
  const char* address = cw_settings_string(ctl->settings, CW_SET_METRICS_LISTEN);
  if (!address[0]) return cw_ok_status();
  cw_ctl_metrics_t* m = calloc(1, sizeof(*m));
  if (!m) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  ctl->metrics = m;
  m->ctl = ctl;
  m->launch_latency.bounds = cw__launch_bounds;
  m->launch_latency.num_bounds = CW__NUM(cw__launch_bounds);
  m->compile_latency.bounds = cw__compile_bounds;
  m->compile_latency.num_bounds = CW__NUM(cw__compile_bounds);
  _Static_assert(CW__NUM(cw__launch_bounds) < CW__MAX_BUCKETS, "buckets");
  _Static_assert(CW__NUM(cw__compile_bounds) < CW__MAX_BUCKETS, "buckets");
  CW_RETURN_IF_ERROR(cw_http_server_create(&ctl->loop, address, cw__http_handle, m, &m->server),
                     "--metrics-listen");
  printf("causeway-controller metrics on http://%s/metrics\n", cw_http_server_address(m->server));
  fflush(stdout);
  return cw_ok_status();
}

void cw_ctl_metrics_stop(cw_controller_t* ctl) {
  cw_ctl_metrics_t* m = ctl->metrics;
  if (!m) return;
  cw_http_server_close(m->server);
  m->server = NULL;
}

void cw_ctl_metrics_release(cw_controller_t* ctl) {
  cw_ctl_metrics_t* m = ctl->metrics;
  if (!m) return;
  free(m->workers);
  free(m);
  ctl->metrics = NULL;
}
