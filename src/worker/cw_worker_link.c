// The worker's controller link (see cw_worker_link.h).
//
// The worker connects to the controller as to a peer (HELLO role WORKER) and
// sends REGISTER with its inventory. While registered it sends
// HEALTH_HEARTBEAT (no reply) every --heartbeat-ms; the controller declares
// it dead after --worker-timeout-ms without one.
//
// Start-up: daemons may start in any order. Until its first registration
// the worker keeps trying (100 ms, doubling to --reconnect-max-ms), whatever
// failed: no controller listening yet, a refused REGISTER. If none succeeded
// within --start-timeout-ms it stops with an error naming the controller and
// the last failure (main exits 1). The first registration writes the
// --ready-fd line (the embedded cluster's plugin waits for it).
//
// After that, when the link is lost (the controller died or restarted, or
// declared this worker dead), the worker keeps serving and reconnects with
// the same backoff, then registers again under the same name; with
// --exit-with-controller it exits instead (status 0).
#include "cw_worker_link.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_ready.h"
#include "cw_time.h"
#include "cw_worker_conn.h"
#include "cw_worker_ops.h"
#include "cw_worker_sched.h"

#define CW__RECONNECT_FIRST_MS 100

struct cw_worker_link_s {
  cw_conn_t* conn;  // the REGISTER connection (borrowed: cleared when it closes)
  char address[256];  // this worker's advertised address
  uv_timer_t heartbeat_timer;
  uv_timer_t reconnect_timer;
  uv_timer_t start_timer;  // --start-timeout-ms, until the first registration
  bool registered;  // the controller accepted REGISTER on `conn`
  bool ever_registered;
  // --exit-with-controller: the registered connection was lost and one
  // attempt to register again decides whether the controller is gone.
  bool exit_probe;
  int ready_fd;     // --ready-fd until the first registration, then -1
  uint64_t heartbeat_seq;
  int64_t reconnect_delay_ms;  // next wait before reconnecting
  char last_error[512];        // why the latest attempt failed
  uint64_t attempts;           // failed ones before the first registration
  cw_status_t fatal;           // why the link stopped the worker (cw_worker_run returns it)
  // The global ids of the last registration, asked for again after a
  // controller restart (RegisterRequest.previous).
  bool numbered;
  int32_t first_device_id;
  // After the first registration, "lost the controller" and a refused
  // REGISTER are logged once per CW__RETRY_LOG_MS each: a controller that
  // stays away, or refuses until an operator acts, would log every attempt.
  cw_net_warn_limit_t warn_lost, warn_refused;
};

#define CW__RETRY_LOG_MS 60000

void cw_worker_advertised_address(const char* listen, char* out, size_t out_size) {
  snprintf(out, out_size, "%s", listen);
  if (strchr(listen, '/')) return;  // a Unix socket path
  const char* colon = strrchr(listen, ':');
  if (!colon) return;
  size_t hl = (size_t)(colon - listen);
  bool wildcard = hl == 0 || (hl == 7 && !strncmp(listen, "0.0.0.0", 7)) ||
                  (hl == 4 && !strncmp(listen, "[::]", 4)) || (hl == 2 && !strncmp(listen, "::", 2));
  if (!wildcard) return;
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) return;
  host[sizeof(host) - 1] = 0;
  snprintf(out, out_size, "%s%s", host, colon);
}

static void cw__heartbeat(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  cw_worker_link_t* k = w->link;
  if (!k->conn || !k->registered || w->shutting_down) return;
  Causeway__V1__HealthHeartbeat hb = CAUSEWAY__V1__HEALTH_HEARTBEAT__INIT;
  hb.sequence = ++k->heartbeat_seq;
  cw_net_conn_send(k->conn->nc, CW_MSG_HEALTH_HEARTBEAT, 0, 0, &hb.base, NULL, 0, NULL, NULL);
}

static void cw__reconnect(uv_timer_t* t);

// The link `name` is gone, or an attempt failed (`why`), and the worker keeps
// serving: reconnect after 100 ms, doubling to --reconnect-max-ms, and
// register again.
static void cw__retry(cw_worker_t* w, const char* name, const char* why) {
  cw_worker_link_t* k = w->link;
  k->registered = false;
  if (w->shutting_down) return;
  if (why) snprintf(k->last_error, sizeof(k->last_error), "%s", why);
  int64_t delay = k->reconnect_delay_ms;
  int64_t max = cw_settings_int(w->settings, CW_SET_RECONNECT_MAX_MS);
  if (delay > max) delay = max;
  if (k->ever_registered) {
    uint64_t more = 0;
    if (cw_net_warn_limit_pass(&k->warn_lost, cw_time_now_ms(), CW__RETRY_LOG_MS, &more)) {
      char since[640] = "";
      if (more) {
        snprintf(since, sizeof(since), " (%" PRIu64 " more attempts since the last such line; "
                 "last error: %s)", more, k->last_error[0] ? k->last_error : "none");
      }
      CW_LOGW("lost the controller %s; still serving, reconnecting in %" PRId64 " ms%s", name,
              delay, since);
    }
  } else {
    // Said once at warning level: daemons started in any order wait for each other.
    if (k->attempts++ == 0) {
      CW_LOGW("not registered with the controller %s yet (%s); trying again in %" PRId64
              " ms, for up to %" PRId64 " ms (--start-timeout-ms; 0: no bound)", name,
              k->last_error, delay, cw_settings_int(w->settings, CW_SET_START_TIMEOUT_MS));
    } else {
      CW_LOGI("not registered with the controller %s yet (%s); trying again in %" PRId64 " ms",
              name, k->last_error, delay);
    }
  }
  k->reconnect_delay_ms = delay * 2 > max ? max : delay * 2;
  uv_timer_start(&k->reconnect_timer, cw__reconnect, (uint64_t)delay, 0);
}

// --start-timeout-ms passed without a registration: stop with the reason.
static void cw__start_timeout(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  cw_worker_link_t* k = w->link;
  if (k->ever_registered || w->shutting_down) return;
  const char* address = cw_settings_string(w->settings, CW_SET_CONTROLLER);
  k->fatal = cw_make_status(CW_DEADLINE_EXCEEDED,
                            "worker %s did not register with the controller %s within %" PRId64
                            " ms (--start-timeout-ms); last error: %s",
                            w->name, address,
                            cw_settings_int(w->settings, CW_SET_START_TIMEOUT_MS),
                            k->last_error[0] ? k->last_error : "none");
  cw_worker_stop(w);  // main prints the error and exits 1
}

static void cw__registered(void* user, cw_net_conn_t* nc, cw_status_t status,
                           const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_worker_t* w = user;
  cw_worker_link_t* k = w->link;
  free(bulk);
  if (status) {
    // UNAVAILABLE: nothing answered (not listening yet, say); the retry logs that.
    uint64_t more = 0;
    if (cw_status_code(status) != CW_UNAVAILABLE &&
        cw_net_warn_limit_pass(&k->warn_refused, cw_time_now_ms(), CW__RETRY_LOG_MS, &more)) {
      char since[96] = "";
      if (more) snprintf(since, sizeof(since), " (%" PRIu64 " more since the last such line)", more);
      CW_LOGE("controller %s refused REGISTER: %s%s", cw_net_conn_name(nc),
              cw_status_message(status), since);
    }
    snprintf(k->last_error, sizeof(k->last_error), "%s", cw_status_message(status));
    cw_status_free(status);
    if (cw_net_conn_is_open(nc)) cw_net_conn_close(nc, NULL);  // retried, or exits (see top)
    return;
  }
  CW_LOGI("registered with the controller %s as %s (%s)", cw_net_conn_name(nc), w->name,
          k->address);
  k->registered = true;
  k->exit_probe = false;
  if (!k->ever_registered) {
    k->ever_registered = true;
    uv_timer_stop(&k->start_timer);
    cw_ready_signal(k->ready_fd, "registered with %s as %s", cw_net_conn_name(nc), w->name);
    k->ready_fd = -1;
  }
  k->numbered = true;
  k->warn_lost = (cw_net_warn_limit_t){0};  // the next loss is said at once
  k->warn_refused = (cw_net_warn_limit_t){0};
  k->last_error[0] = '\0';
  k->first_device_id = ((const Causeway__V1__RegisterReply*)reply)->first_device_id;
  k->heartbeat_seq = 0;
  k->reconnect_delay_ms = CW__RECONNECT_FIRST_MS;
  cw__heartbeat(&k->heartbeat_timer);  // at once: the controller's clock starts now
}

// Connects to the controller and registers (asynchronously).
static cw_status_t cw__connect(cw_worker_t* w, const char* address) {
  cw_worker_link_t* k = w->link;
  cw_conn_t* c = NULL;
  CW_RETURN_IF_ERROR(cw_worker_conn_peer(w, address, &c), "--controller %s", address);
  c->is_controller = true;
  cw_net_conn_peer_always_reads(c->nc);  // the controller reads every link at once
  k->conn = c;
  const char* advertise = cw_settings_string(w->settings, CW_SET_ADVERTISE);
  if (advertise[0]) {
    snprintf(k->address, sizeof(k->address), "%s", advertise);
  } else {
    cw_worker_advertised_address(w->net.listen_address, k->address, sizeof(k->address));
  }
  w->inventory.worker_name = (char*)w->name;
  Causeway__V1__RegisterRequest req = CAUSEWAY__V1__REGISTER_REQUEST__INIT;
  req.worker_name = (char*)w->name;
  req.address = k->address;
  req.inventory = &w->inventory;
  req.revision = CW_PROTOCOL_REVISION;
  Causeway__V1__RegisterPrevious previous = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  previous.first_device_id = k->first_device_id;
  // A drain or pause only an earlier registration's controller could set:
  // a new one takes them from here.
  previous.draining = w->draining;
  uint64_t* paused = NULL;
  uint64_t* connected = NULL;
  bool more_paused = false, more = false;
  if (k->numbered) {
    previous.n_paused_sessions =
        cw_worker_ops_session_ids(w, true, CW_MSG_MAX_PREVIOUS_SESSIONS, &paused, &more_paused);
    previous.n_sessions =
        cw_worker_ops_session_ids(w, false, CW_MSG_MAX_PREVIOUS_SESSIONS, &connected, &more);
    previous.more_sessions = more;
  }
  previous.paused_sessions = paused;
  previous.sessions = connected;
  if (k->numbered) req.previous = &previous;
  req.island_name = (char*)cw_settings_string(w->settings, CW_SET_ISLAND);
  req.island_size = (uint32_t)cw_settings_int(w->settings, CW_SET_ISLAND_SIZE);
  if (req.island_name[0]) {
    int rank = 0;
    cw_status_t st = cw_pjrt_process_index(w->pjrt, &rank);
    if (!st && (rank < 0 || (uint32_t)rank >= req.island_size)) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "the plugin reports process index %d, outside "
                          "--island-size %u", rank, req.island_size);
    }
    if (st) {
      free(paused);
      free(connected);
      cw_net_conn_close(c->nc, NULL);
      return cw_status_annotate(st, "--island %s", req.island_name);
    }
    req.island_rank = (uint32_t)rank;
  }
  // No stamp of this registration can arrive before the controller has it.
  cw_worker_stamp_restart(w);
  // A controller that took this worker for dead names it a replacement of
  // itself: clients and the controller join it afresh, and a life of a
  // session from before this point is stale to them (cw_worker_conn.c).
  w->registered_session_key = w->next_session_key;
  // Queued behind HELLO; a refused HELLO fails it and closes.
  cw_net_conn_request(c->nc, CW_MSG_REGISTER, &req.base, NULL, 0, NULL, NULL, cw__registered, w);
  free(paused);
  free(connected);
  return cw_ok_status();
}

static void cw__reconnect(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  cw_worker_link_t* k = w->link;
  if (w->shutting_down || k->conn) return;
  const char* address = cw_settings_string(w->settings, CW_SET_CONTROLLER);
  if (k->ever_registered) CW_LOGI("reconnecting to the controller %s", address);
  cw_status_t st = cw__connect(w, address);
  if (st && k->exit_probe) {
    CW_LOGW("lost the controller %s (%s); exiting (--exit-with-controller)", address,
            cw_status_message(st));
    cw_status_free(st);
    cw_worker_stop(w);
  } else if (st) {
    // Failed before any connection existed: try again later (after the
    // first registration the retry's own line says why, once a minute).
    if (!k->ever_registered) CW_LOGW("%s", cw_status_message(st));
    cw__retry(w, address, cw_status_message(st));
    cw_status_free(st);
  }
}

void cw_worker_link_closed(cw_conn_t* c) {
  cw_worker_t* w = c->w;
  cw_worker_link_t* k = w->link;
  if (!k || k->conn != c) return;
  k->conn = NULL;
  if (w->shutting_down) return;
  if (k->ever_registered && cw_settings_int(w->settings, CW_SET_EXIT_WITH_CONTROLLER)) {
    // A controller that took this worker for dead (a stall past its
    // --worker-timeout-ms) closes the connection but is still there: the
    // worker registers again. One that cannot be reached or refuses is gone.
    if (k->exit_probe) {
      CW_LOGW("lost the controller %s; exiting (--exit-with-controller)", cw_worker_conn_name(c));
      cw_worker_stop(w);
      return;
    }
    k->exit_probe = true;
  }
  cw__retry(w, cw_worker_conn_name(c), NULL);
}

cw_status_t cw_worker_link_start(cw_worker_t* w) {
  const char* address = cw_settings_string(w->settings, CW_SET_CONTROLLER);
  int ready_fd = (int)cw_settings_int(w->settings, CW_SET_READY_FD);
  if (!address[0]) {
    cw_ready_signal(ready_fd, "listening on %s", w->net.listen_address);
    return cw_ok_status();
  }
  cw_worker_link_t* k = calloc(1, sizeof(*k));
  if (!k) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  w->link = k;
  k->ready_fd = ready_fd;
  uv_timer_init(&w->loop, &k->heartbeat_timer);
  uv_timer_init(&w->loop, &k->reconnect_timer);
  uv_timer_init(&w->loop, &k->start_timer);
  k->heartbeat_timer.data = k->reconnect_timer.data = k->start_timer.data = w;
  k->reconnect_delay_ms = CW__RECONNECT_FIRST_MS;
  // From now: the loop's cached time is from before the plugin loaded, which
  // on a busy host can take longer than --start-timeout-ms.
  uv_update_time(&w->loop);
  uint64_t period = (uint64_t)cw_settings_int(w->settings, CW_SET_HEARTBEAT_MS);
  uv_timer_start(&k->heartbeat_timer, cw__heartbeat, period, period);
  int64_t start_timeout = cw_settings_int(w->settings, CW_SET_START_TIMEOUT_MS);
  if (start_timeout > 0) {
    uv_timer_start(&k->start_timer, cw__start_timeout, (uint64_t)start_timeout, 0);
  }
  return cw__connect(w, address);
}

void cw_worker_link_stop(cw_worker_t* w) {
  if (!w->link) return;
  uv_close((uv_handle_t*)&w->link->heartbeat_timer, NULL);
  uv_close((uv_handle_t*)&w->link->reconnect_timer, NULL);
  uv_close((uv_handle_t*)&w->link->start_timer, NULL);
}

cw_status_t cw_worker_link_take_error(cw_worker_t* w) {
  if (!w->link) return cw_ok_status();
  cw_status_t s = w->link->fatal;
  w->link->fatal = NULL;
  return s;
}

bool cw_worker_link_registered(const cw_worker_t* w) {
  return w->link && w->link->conn && w->link->registered;
}

void cw_worker_link_release(cw_worker_t* w) {
  if (w->link) cw_status_free(w->link->fatal);
  free(w->link);
  w->link = NULL;
}
