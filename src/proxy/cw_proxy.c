// The gRPC service xla.ifrt.proxy.GrpcIfrtService on the proxy's loop:
// GetVersion answered here; each IfrtSession stream a session with a thread
// (cw_proxy_session.c); the host-buffer methods named and refused until they
// are built.
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_host.h"
#include "cw_time.h"
#include "cw_log.h"
#include "cw_proxy_internal.h"
#include "cw_random.h"

#define CW__SERVICE "/xla.ifrt.proxy.GrpcIfrtService/"
#define CW__SESSION_METADATA "ifrt-proxy-grpc-ifrt-session-metadata-bin"

// The call user of a GetVersion call.
static const cw_proxy_call_kind_t cw__get_version_marker = CW_PROXY_CALL_GET_VERSION;

// The method's kind (0: not this service's); *out_name: after the service.
static cw_proxy_call_kind_t cw__method(const char* path, const char** out_name) {
  if (strncmp(path, CW__SERVICE, strlen(CW__SERVICE))) return 0;
  const char* m = path + strlen(CW__SERVICE);
  *out_name = m;
  if (!strcmp(m, "GetVersion")) return CW_PROXY_CALL_GET_VERSION;
  if (!strcmp(m, "IfrtSession")) return CW_PROXY_CALL_SESSION;
  if (!strncmp(m, "HostBuffer", 10)) return CW_PROXY_CALL_HOST_BUFFER;
  return 0;
}

cw_proxy_session_t* cw_proxy_session_find(cw_proxy_t* p, uint64_t id) {
  for (cw_proxy_session_t* s = p->sessions; s; s = s->next) {
    if (s->id == id) return s;
  }
  return NULL;
}

static cw_proxy_call_kind_t cw__kind(cw_grpc_call_t* call) {
  const cw_proxy_call_kind_t* k = cw_grpc_call_user(call);
  return k ? *k : 0;
}

static cw_status_t cw__range_error(int32_t lo, int32_t hi) {
  return cw_make_status(CW_FAILED_PRECONDITION,
                        "causeway-proxy speaks IFRT proxy protocol versions %d to %d; the client "
                        "offers %d to %d (use jaxlib 0.11.2, whose client offers 16 to 25)",
                        CW_PROXY_PROTOCOL_MIN, CW_PROXY_PROTOCOL_MAX, lo, hi);
}

static void cw__get_version(cw_grpc_call_t* call, const uint8_t* d, size_t n) {
  CwIfrt__GetVersionRequest* req = cw_ifrt__get_version_request__unpack(NULL, n, d);
  if (!req || !req->min_version || !req->max_version) {
    cw_grpc_call_finish(call, cw_make_status(CW_INVALID_ARGUMENT,
                                             "GetVersion: the request does not decode or lacks "
                                             "min_version/max_version"));
    if (req) cw_ifrt__get_version_request__free_unpacked(req, NULL);
    return;
  }
  int32_t lo = req->min_version->protocol_version, hi = req->max_version->protocol_version;
  int32_t serdes = req->max_version->ifrt_serdes_version_number;
  cw_ifrt__get_version_request__free_unpacked(req, NULL);
  int32_t v = hi < CW_PROXY_PROTOCOL_MAX ? hi : CW_PROXY_PROTOCOL_MAX;
  if (lo > hi || v < lo || v < CW_PROXY_PROTOCOL_MIN) {
    cw_grpc_call_finish(call, cw__range_error(lo, hi));
    return;
  }
  CwIfrt__ProxyVersion pv = CW_IFRT__PROXY_VERSION__INIT;
  pv.has_protocol_version = pv.has_ifrt_serdes_version_number = true;
  pv.protocol_version = v;
  pv.ifrt_serdes_version_number = serdes;
  CwIfrt__GetVersionResponse resp = CW_IFRT__GET_VERSION_RESPONSE__INIT;
  resp.version = &pv;
  uint8_t buf[64];
  size_t len = cw_ifrt__get_version_response__pack(&resp, buf);
  cw_status_t st = cw_grpc_call_send(call, buf, len);
  cw_grpc_call_finish(call, st);
}

static cw_status_t cw__session_open(cw_proxy_t* p, cw_grpc_call_t* call) {
  const uint8_t* md;
  size_t md_len;
  if (!cw_grpc_call_metadata(call, CW__SESSION_METADATA, &md, &md_len)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "IfrtSession: metadata %s is missing",
                          CW__SESSION_METADATA);
  }
  CwIfrt__SessionMetadata* m = cw_ifrt__session_metadata__unpack(NULL, md_len, md);
  if (!m || !m->version) {
    if (m) cw_ifrt__session_metadata__free_unpacked(m, NULL);
    return cw_make_status(CW_INVALID_ARGUMENT, "IfrtSession: metadata %s does not decode",
                          CW__SESSION_METADATA);
  }
  int32_t v = m->version->protocol_version;
  cw_ifrt__session_metadata__free_unpacked(m, NULL);
  if (v < CW_PROXY_PROTOCOL_MIN || v > CW_PROXY_PROTOCOL_MAX) return cw__range_error(v, v);
  // Each session holds a thread and a session of the cluster (or a cluster
  // of its own): a client must not open them without bound.
  int64_t max = cw_settings_int(p->settings, CW_SET_PROXY_MAX_SESSIONS), open = 0, left = 0;
  for (cw_proxy_session_t* o = p->sessions; o; o = o->next) {
    open++;
    if (o->thread_started) {
      pthread_mutex_lock(&o->mu);
      left += o->gone;
      pthread_mutex_unlock(&o->mu);
    }
  }
  if (open >= max) {
    // A session whose client left keeps its slot until its PJRT client's
    // create returns (one waiting for devices is cut short: causeway_cancel_fd):
    // say so, here too (the refusal was silent in the proxy's log, an audit).
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED,
                                    "causeway-proxy serves at most %lld sessions at once "
                                    "(CAUSEWAY_PROXY_MAX_SESSIONS); %lld are open, %lld of them "
                                    "still opening after their clients left",
                                    (long long)max, (long long)open, (long long)left);
    uint64_t more = 0;
    if (cw_net_warn_limit_pass(&p->warn_refused, cw_time_now_ms(), 60 * 1000, &more)) {
      CW_LOGW("session refused: %s (%" PRIu64 " more since the last such line)",
              cw_status_message(st), more);
    }
    return st;
  }
  cw_proxy_session_t* s = calloc(1, sizeof(*s));
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  s->proxy = p;
  s->protocol_version = v;
  s->cancel[0] = s->cancel[1] = -1;
  cw_status_t st = cw_random_id(&s->id);
  if (!st) st = cw_proxy_session_start(s);
  if (st) {
    // The client hears it; the operator reads it here (a thread limit),
    // once a minute however often clients retry.
    uint64_t more = 0;
    if (cw_net_warn_limit_pass(&p->warn_refused, cw_time_now_ms(), 60 * 1000, &more)) {
      CW_LOGW("session refused: %s (%" PRIu64 " more since the last such line)",
              cw_status_message(st), more);
    }
    cw_proxy_session_free(s);
    return st;
  }
  cw_grpc_call_retain(call);
  s->call = call;
  cw_grpc_call_set_user(call, s);
  // Credit for request bytes returns as the session thread handles them
  // (cw_proxy_session_drain): a client cannot queue work without bound.
  cw_grpc_call_hold_flow(call);
  s->next = p->sessions;
  p->sessions = s;
  CW_LOGI("session %016llx opened (protocol version %d)", (unsigned long long)s->id, v);
  return cw_ok_status();
}

static cw_status_t cw__on_start(void* user, cw_grpc_call_t* call) {
  cw_proxy_t* p = user;
  if (p->stopping) return cw_make_status(CW_UNAVAILABLE, "causeway-proxy is shutting down");
  const char* path = cw_grpc_call_method(call);
  const char* name = NULL;
  switch (cw__method(path, &name)) {
    case CW_PROXY_CALL_GET_VERSION:
      cw_grpc_call_set_user(call, (void*)&cw__get_version_marker);
      return cw_ok_status();
    case CW_PROXY_CALL_SESSION:
      return cw__session_open(p, call);
    case CW_PROXY_CALL_HOST_BUFFER:
      return cw_proxy_host_buffer_start(p, call, name);
  }
  return cw_make_status(CW_UNIMPLEMENTED, "causeway-proxy has no method %s", path);
}

static void cw__on_message(void* user, cw_grpc_call_t* call, const uint8_t* d, size_t n) {
  switch (cw__kind(call)) {
    case CW_PROXY_CALL_GET_VERSION:
      cw__get_version(call, d, n);
      return;
    case CW_PROXY_CALL_SESSION: {
      cw_status_t st = cw_proxy_session_push(cw_grpc_call_user(call), d, n);
      if (st) cw_grpc_call_finish(call, st);
      return;
    }
    case CW_PROXY_CALL_HOST_BUFFER:
      cw_proxy_host_buffer_message(user, call, d, n);
      return;
  }
}

static void cw__on_half_close(void* user, cw_grpc_call_t* call) {
  switch (cw__kind(call)) {
    case CW_PROXY_CALL_GET_VERSION:
      cw_grpc_call_finish(call, cw_make_status(CW_INVALID_ARGUMENT, "GetVersion: no request"));
      return;
    case CW_PROXY_CALL_SESSION:
      // The session answers what it has, then the call ends (cw__wake).
      cw_proxy_session_end(cw_grpc_call_user(call), true);
      return;
    case CW_PROXY_CALL_HOST_BUFFER:
      cw_proxy_host_buffer_half_close(user, call);
      return;
  }
}

static void cw__on_close(void* user, cw_grpc_call_t* call) {
  switch (cw__kind(call)) {
    case CW_PROXY_CALL_GET_VERSION:
      return;
    case CW_PROXY_CALL_SESSION: {
      cw_proxy_session_t* s = cw_grpc_call_user(call);
      cw_grpc_call_set_user(call, NULL);
      CW_LOGI("session %016llx: stream closed", (unsigned long long)s->id);
      cw_proxy_session_end(s, false);
      return;
    }
    case CW_PROXY_CALL_HOST_BUFFER:
      cw_proxy_host_buffer_close(user, call);
      return;
  }
}

static void cw__on_writable(void* user, cw_grpc_call_t* call) {
  cw_proxy_call_kind_t kind = cw__kind(call);
  if (kind == CW_PROXY_CALL_HOST_BUFFER) cw_proxy_host_buffer_writable(user, call);
  if (kind == CW_PROXY_CALL_SESSION) cw_proxy_session_writable(cw_grpc_call_user(call));
}

static const cw_grpc_handlers_t cw__handlers = {cw__on_start, cw__on_message, cw__on_half_close,
                                                cw__on_close, cw__on_writable};

// Session threads queued responses or exited.
static void cw__wake(uv_async_t* a) {
  cw_proxy_t* p = a->data;
  for (cw_proxy_session_t **pp = &p->sessions, *s; (s = *pp);) {
    if (!cw_proxy_session_drain(s)) {
      pp = &s->next;
      continue;
    }
    *pp = s->next;
    if (s->call) {
      cw_grpc_call_set_user(s->call, NULL);
      // Ended by the operator's signal, not by its client: say so in the
      // trailers (an OK end left the client waiting for its answers).
      cw_grpc_call_finish(s->call, s->ended_by_signal
                                       ? cw_make_status(CW_UNAVAILABLE, "causeway-proxy is "
                                                        "shutting down (signal %d): session "
                                                        "%016llx ended",
                                                        s->ended_by_signal,
                                                        (unsigned long long)s->id)
                                       : cw_ok_status());
    }
    CW_LOGI("session %016llx ended", (unsigned long long)s->id);
    cw_proxy_session_free(s);
  }
  cw_proxy_host_buffer_retry(p);
  if (p->stopping && !p->sessions && !p->closed) {
    p->closed = true;
    cw_grpc_server_close(p->server);
    p->server = NULL;
    uv_close((uv_handle_t*)&p->wake, NULL);
    uv_close((uv_handle_t*)&p->sigterm, NULL);
    uv_close((uv_handle_t*)&p->sigint, NULL);
    cw_net_creds_stop(&p->creds);
  }
}

static void cw__on_signal(uv_signal_t* sig, int signum) {
  cw_proxy_t* p = sig->data;
  if (p->stopping) {
    // A session may wait on its controller (a queue for devices) for long:
    // the operator's second signal does not wait for it.
    fprintf(stderr, "causeway-proxy: signal %d again: exiting without waiting for the open "
            "sessions\n", signum);
    _exit(128 + signum);
  }
  CW_LOGI("signal %d: ending %s sessions", signum, p->sessions ? "open" : "no");
  p->stopping = true;
  for (cw_proxy_session_t* s = p->sessions; s; s = s->next) {
    s->ended_by_signal = signum;
    cw_proxy_session_end(s, false);
  }
  uv_async_send(&p->wake);
}

cw_status_t cw_proxy_create(const cw_settings_t* settings, cw_proxy_t** out) {
  *out = NULL;
  // A client that closes while an answer is written must not end the proxy.
  signal(SIGPIPE, SIG_IGN);
  cw_net_creds_ignore_hup();  // until cw_net_creds_start: a reload asked now ends nothing
  cw_proxy_t* p = calloc(1, sizeof(*p));
  if (!p) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  p->settings = settings;
  pthread_mutex_init(&p->budget_mu, NULL);
  cw_status_t st = cw_proxy_pjrt_load(cw_settings_string(settings, CW_SET_PROXY_PJRT_LIBRARY),
                                      &p->pjrt);
  if (st) {
    pthread_mutex_destroy(&p->budget_mu);
    free(p);
    return st;
  }
  uv_loop_init(&p->loop);
  uv_async_init(&p->loop, &p->wake, cw__wake);
  p->wake.data = p;
  uv_signal_init(&p->loop, &p->sigterm);
  uv_signal_init(&p->loop, &p->sigint);
  p->sigterm.data = p->sigint.data = p;
  uv_signal_start(&p->sigterm, cw__on_signal, SIGTERM);
  uv_signal_start(&p->sigint, cw__on_signal, SIGINT);
  cw_grpc_options_default(&p->server_options.grpc);
  p->server_options.grpc.max_message = (size_t)cw_settings_int(settings, CW_SET_PROXY_MAX_MESSAGE);
  cw_proxy_bytes_configure((size_t)cw_settings_int(settings, CW_SET_PROXY_BUFFER_CACHE));
  p->max_host_buffer = (size_t)cw_settings_int(settings, CW_SET_PROXY_MAX_HOST_BUFFER);
  p->host_buffer_budget = (size_t)cw_settings_int(settings, CW_SET_PROXY_HOST_BUFFER_BUDGET);
  if (!p->host_buffer_budget) {
    // Half: the workers on the same host, and the client, need the rest.
    // (At least 64 MiB: a limit read as 0 or 1 must not refuse every buffer.)
    uint64_t mem = cw_host_memory_bytes();
    p->host_buffer_budget = !mem ? (size_t)16 << 30
                            : mem / 2 < ((uint64_t)64 << 20) ? (size_t)64 << 20
                                                              : (size_t)(mem / 2);
  }
  CW_LOGI("host buffers: a budget of %zu bytes, each session at most half",
          p->host_buffer_budget);
  st = cw_net_creds_start(&p->creds, &p->loop, settings, NULL);
  p->server_options.tokens = &p->creds.tokens;
  if (!st) {
    st = cw_grpc_server_create(&p->loop, cw_settings_string(settings, CW_SET_PROXY_LISTEN),
                               &p->server_options, &cw__handlers, p, &p->server);
  }
  if (st) {
    p->stopping = true;
    cw_proxy_release(p);
    return st;
  }
  const char* address = cw_grpc_server_address(p->server);
  if (p->creds.tokens.count && !strchr(address, '/')) {
    // jaxlib's client retries UNAUTHENTICATED without a word to its user.
    CW_LOGW("clients must send the cluster's token (metadata \"authorization: Bearer <token>\"); "
            "jaxlib's IFRT proxy client cannot, and is refused: for it, listen on a Unix socket "
            "(--listen PATH), where this user's clients need no token");
  }
  printf("causeway-proxy listening on %s\n", address);
  fflush(stdout);
  *out = p;
  return cw_ok_status();
}

cw_status_t cw_proxy_run(cw_proxy_t* p) {
  uv_run(&p->loop, UV_RUN_DEFAULT);
  return cw_ok_status();
}

void cw_proxy_release(cw_proxy_t* p) {
  if (!p) return;
  if (!p->closed) {
    p->stopping = true;
    for (cw_proxy_session_t* s = p->sessions; s; s = s->next) cw_proxy_session_end(s, false);
    uv_async_send(&p->wake);
    uv_run(&p->loop, UV_RUN_DEFAULT);
  }
  uv_loop_close(&p->loop);
  cw_proxy_pjrt_unload(&p->pjrt);
  cw_proxy_bytes_drain();
  // Every host buffer, and every read, is gone by now.
  if (p->host_bytes) {
    CW_LOGE("host buffers: %zu bytes of the budget still charged at exit", p->host_bytes);
  }
  cw_net_creds_free(&p->creds);
  pthread_mutex_destroy(&p->budget_mu);
  free(p);
}
