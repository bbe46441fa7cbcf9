// Prometheus metrics of the controller: a GET-only HTTP/1.x endpoint on the
// controller's own libuv loop (no thread). Per-worker figures are the
// workers' last STATS from the operations module's once-a-second poll
// (cw_ctl_ops_worker_stats), so scrapes cause no worker traffic.
//
// An HTTP peer cannot stall or crash the loop: the request head is bounded
// (CW__HTTP_MAX_REQUEST bytes, else 431), each connection has a deadline
// (CW__HTTP_TIMEOUT_MS from accept to the end of the response, then it is
// closed), at most CW__HTTP_MAX_CONNS are open (a new one closes the oldest),
// writes are asynchronous, and the parser (cw_http.c) is fuzzed. Anything
// other than GET/HEAD gets 405, any path but /metrics 404.
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
#include "cw_http.h"
#include "cw_log.h"
#include "cw_time.h"

#define CW__HTTP_MAX_REQUEST 8192
#define CW__HTTP_TIMEOUT_MS 10000
#define CW__HTTP_MAX_CONNS 32

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

typedef struct cw_ctl_http_s {
  struct cw_ctl_http_s* next;
  struct cw_ctl_metrics_s* m;
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t write;
  int open_handles;
  bool closing;
  bool responding;
  size_t len;
  char buf[CW__HTTP_MAX_REQUEST];
  cw_http_text_t out;
} cw_ctl_http_t;

typedef struct cw_ctl_metrics_s {
  cw_controller_t* ctl;
  uv_tcp_t listener;
  bool listener_open;
  bool stopped;
  char address[256];
  cw_ctl_http_t* conns;
  size_t num_conns;
  cw_ctl_wmetrics_t* workers;
  size_t num_workers;
  cw_ctl_hist_t launch_latency;
  cw_ctl_hist_t compile_latency;
  uint64_t http_requests, http_refused;
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

// name{worker="..",island="N"} value
static void cw__worker_sample(cw_http_text_t* t, const char* name, const cw_ctl_worker_t* w,
                              uint64_t value) {
  cw_http_text_printf(t, "%s{worker=\"", name);
  cw_http_text_label(t, w->name);
  cw_http_text_printf(t, "\",island=\"%u\"} %" PRIu64 "\n", w->index, value);
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
    CW__SF("causeway_buffers", "gauge", "Live buffers on the worker", buffers),
    CW__SF("causeway_buffer_bytes", "gauge", "Bytes of live buffers on the worker", buffer_bytes),
    CW__SF("causeway_worker_executables", "gauge", "Loaded executables on the worker",
           executables),
    CW__SF("causeway_worker_sessions", "gauge", "Sessions open on the worker", sessions),
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
  cw__family(t, "causeway_sessions", "gauge", "Live client sessions");
  cw_http_text_printf(t, "causeway_sessions %zu\n", sessions);
  size_t alive = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) alive += ctl->workers[i]->alive;
  cw__family(t, "causeway_workers", "gauge", "Registered workers by state");
  cw_http_text_printf(t, "causeway_workers{state=\"alive\"} %zu\ncauseway_workers{state=\"dead\"} "
                      "%zu\n", alive, ctl->num_workers - alive);
  cw__family(t, "causeway_worker_up", "gauge", "1 while the worker is alive, 0 once lost");
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw__worker_sample(t, "causeway_worker_up", ctl->workers[i], ctl->workers[i]->alive);
  }

  cw__family(t, "causeway_compiles_total", "counter", "Client COMPILE requests answered");
  cw_http_text_printf(t, "causeway_compiles_total %" PRIu64 "\n", ctl->compiles);
  cw__family(t, "causeway_compile_cache_hits_total", "counter",
             "Compiles served from the compile cache (or an identical compile in flight)");
  cw_http_text_printf(t, "causeway_compile_cache_hits_total %" PRIu64 "\n", ctl->cache_hits);
  cw__family(t, "causeway_compile_cache_misses_total", "counter",
             "Compiles that ran XLA on a worker");
  cw_http_text_printf(t, "causeway_compile_cache_misses_total %" PRIu64 "\n", ctl->cache_misses);
  cw__family(t, "causeway_compile_cache_bytes", "gauge", "Serialized executables held");
  cw_http_text_printf(t, "causeway_compile_cache_bytes %" PRIu64 "\n",
                      cw_compile_cache_bytes(ctl->cache));
  cw__family(t, "causeway_errors_total", "counter",
             "Error replies the controller sent to clients and workers");
  cw_http_text_printf(t, "causeway_errors_total %" PRIu64 "\n", ctl->errors);

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
  cw__family(t, "causeway_worker_stats_age_seconds", "gauge",
             "Age of the worker's last STATS answer the figures above come from");
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    double age_s = 0;
    if (!cw_ctl_ops_worker_stats(ctl->workers[i], &age_s)) continue;
    cw_http_text_printf(t, "causeway_worker_stats_age_seconds{worker=\"");
    cw_http_text_label(t, ctl->workers[i]->name);
    cw_http_text_printf(t, "\",island=\"%zu\"} %.3f\n", i, age_s);
  }
}

// --- HTTP ------------------------------------------------------------------------------

static void cw__http_handle_closed(uv_handle_t* h) {
  cw_ctl_http_t* c = h->data;
  if (--c->open_handles > 0) return;
  cw_http_text_free(&c->out);
  free(c);
}

static void cw__http_close(cw_ctl_http_t* c) {
  if (c->closing) return;
  c->closing = true;
  cw_ctl_metrics_t* m = c->m;
  cw_ctl_http_t** pp = &m->conns;
  while (*pp && *pp != c) pp = &(*pp)->next;
  if (*pp) *pp = c->next;
  m->num_conns--;
  uv_close((uv_handle_t*)&c->tcp, cw__http_handle_closed);
  uv_close((uv_handle_t*)&c->timer, cw__http_handle_closed);
}

static void cw__http_timeout(uv_timer_t* t) { cw__http_close(t->data); }

static void cw__http_written(uv_write_t* req, int status) {
  cw__http_close(req->data);
}

static void cw__http_respond(cw_ctl_http_t* c, int code, const char* reason,
                             const char* content_type, const char* extra_headers,
                             const char* body, size_t body_len, bool head) {
  c->responding = true;
  uv_read_stop((uv_stream_t*)&c->tcp);
  cw_http_text_t hdr = {0};
  cw_http_text_printf(&hdr, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n", code, reason, content_type, body_len,
                      extra_headers);
  if (hdr.failed) {
    cw_http_text_free(&hdr);
    cw__http_close(c);
    return;
  }
  if (!head && body_len) cw_http_text_printf(&hdr, "%.*s", (int)body_len, body);
  cw_http_text_free(&c->out);
  c->out = hdr;
  if (c->out.failed) {
    cw__http_close(c);
    return;
  }
  uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t*)&c->tcp, &b, 1, cw__http_written) < 0) {
    cw__http_close(c);
  }
}

static void cw__http_error(cw_ctl_http_t* c, int code, const char* reason, const char* extra) {
  char body[128];
  int n = snprintf(body, sizeof(body), "%d %s\n", code, reason);
  cw__http_respond(c, code, reason, "text/plain; charset=utf-8", extra, body, (size_t)n, false);
}

static void cw__http_request(cw_ctl_http_t* c, const cw_http_request_t* r) {
  cw_ctl_metrics_t* m = c->m;
  bool head = !strcmp(r->method, "HEAD");
  if (strcmp(r->method, "GET") && !head) {
    cw__http_error(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n");
    return;
  }
  if (strcmp(r->path, "/metrics")) {
    cw__http_error(c, 404, "Not Found", "");
    return;
  }
  m->http_requests++;
  cw_http_text_t body = {0};
  cw__render(m, &body);
  if (body.failed) {
    cw_http_text_free(&body);
    cw__http_error(c, 500, "Internal Server Error", "");
    return;
  }
  cw__http_respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", "", body.data,
                   body.len, head);
  cw_http_text_free(&body);
}

static void cw__http_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_ctl_http_t* c = h->data;
  // Never more than the bound: a full buffer without a head is refused (431)
  // before another read is asked for.
  *buf = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void cw__http_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
  cw_ctl_http_t* c = s->data;
  if (c->closing || c->responding) return;
  if (nread < 0) {
    cw__http_close(c);
    return;
  }
  c->len += (size_t)nread;
  cw_http_request_t r;
  switch (cw_http_parse_request(c->buf, c->len, sizeof(c->buf), &r)) {
    case CW_HTTP_NEED_MORE:
      return;
    case CW_HTTP_OK:
      cw__http_request(c, &r);
      return;
    case CW_HTTP_TOO_LARGE:
      cw__http_error(c, 431, "Request Header Fields Too Large", "");
      return;
    case CW_HTTP_BAD:
      cw__http_error(c, 400, "Bad Request", "");
      return;
  }
}

static void cw__http_accept(uv_stream_t* server, int status) {
  cw_controller_t* ctl = server->data;
  cw_ctl_metrics_t* m = ctl->metrics;
  if (status < 0 || !m || m->stopped) return;
  cw_ctl_http_t* c = calloc(1, sizeof(*c));
  if (!c) return;
  c->m = m;
  uv_tcp_init(&ctl->loop, &c->tcp);
  uv_timer_init(&ctl->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
  c->next = m->conns;
  m->conns = c;
  m->num_conns++;
  if (uv_accept(server, (uv_stream_t*)&c->tcp) < 0) {
    cw__http_close(c);
    return;
  }
  if (m->num_conns > CW__HTTP_MAX_CONNS) {
    // Full: the oldest goes (idle peers cannot lock a scraper out).
    cw_ctl_http_t* oldest = m->conns;
    while (oldest->next) oldest = oldest->next;
    m->http_refused++;
    cw__http_close(oldest);
  }
  uv_timer_start(&c->timer, cw__http_timeout, CW__HTTP_TIMEOUT_MS, 0);
  if (uv_read_start((uv_stream_t*)&c->tcp, cw__http_alloc, cw__http_read) < 0) cw__http_close(c);
}

// --- Lifecycle -------------------------------------------------------------------------

cw_status_t cw_ctl_metrics_start(cw_controller_t* ctl) {
  const char* address = cw_settings_string(ctl->settings, CW_SET_METRICS_LISTEN);
  if (!address[0]) return cw_ok_status();
  struct sockaddr_storage sa;
  CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "--metrics-listen");
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
  uv_tcp_init(&ctl->loop, &m->listener);
  m->listener.data = ctl;
  m->listener_open = true;
  int rc = uv_tcp_bind(&m->listener, (const struct sockaddr*)&sa, 0);
  if (rc >= 0) rc = uv_listen((uv_stream_t*)&m->listener, 64, cw__http_accept);
  if (rc < 0) {
    return cw_make_status(CW_UNAVAILABLE, "--metrics-listen: cannot listen on %s: %s", address,
                          uv_strerror(rc));
  }
  struct sockaddr_storage bound;
  int len = sizeof(bound);
  uv_tcp_getsockname(&m->listener, (struct sockaddr*)&bound, &len);
  int port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&bound)->sin6_port)
                                         : ntohs(((struct sockaddr_in*)&bound)->sin_port);
  const char* colon = strrchr(address, ':');
  snprintf(m->address, sizeof(m->address), "%.*s:%d", (int)(colon - address), address, port);
  printf("causeway-controller metrics on http://%s/metrics\n", m->address);
  fflush(stdout);
  return cw_ok_status();
}

void cw_ctl_metrics_stop(cw_controller_t* ctl) {
  cw_ctl_metrics_t* m = ctl->metrics;
  if (!m || m->stopped) return;
  m->stopped = true;
  if (m->listener_open) uv_close((uv_handle_t*)&m->listener, NULL);
  while (m->conns) cw__http_close(m->conns);
}

void cw_ctl_metrics_release(cw_controller_t* ctl) {
  cw_ctl_metrics_t* m = ctl->metrics;
  if (!m) return;
  free(m->workers);
  free(m);
  ctl->metrics = NULL;
}
