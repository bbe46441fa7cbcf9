// Worker health: heartbeats to the controller, and reconnecting to it.
//
// While registered, the worker sends HEALTH_HEARTBEAT (no reply) on its
// controller connection every --heartbeat-ms; the controller declares it dead
// after --worker-timeout-ms without one. When that connection is lost (the
// controller died or restarted, or declared this worker dead), the worker
// keeps serving and reconnects after 100 ms, doubling up to
// --reconnect-max-ms, then registers again under the same name.
#include <inttypes.h>

#include "cw_log.h"
#include "cw_settings.h"
#include "cw_worker_internal.h"

#define CW__RECONNECT_FIRST_MS 100

static void cw__heartbeat(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  if (!w->controller || !w->registered || w->shutting_down) return;
  Causeway__V1__HealthHeartbeat hb = CAUSEWAY__V1__HEALTH_HEARTBEAT__INIT;
  hb.sequence = ++w->heartbeat_seq;
  cw__send(w->controller, CW_MSG_HEALTH_HEARTBEAT, 0, 0, &hb.base, NULL, 0, NULL, NULL);
}

static void cw__reconnect(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  if (w->shutting_down || w->controller) return;
  const char* address = cw_settings_string(w->settings, CW_SET_CONTROLLER);
  CW_LOGI("reconnecting to the controller %s", address);
  cw_status_t st = cw__controller_connect(w, address);
  if (st) {
    // Failed before any connection existed: try again later.
    CW_LOGW("%s", cw_status_message(st));
    cw_status_free(st);
    cw_worker_health_controller_lost(w, address);
  }
}

void cw_worker_health_start(cw_worker_t* w) {
  uv_timer_init(&w->loop, &w->heartbeat_timer);
  uv_timer_init(&w->loop, &w->reconnect_timer);
  w->heartbeat_timer.data = w->reconnect_timer.data = w;
  w->reconnect_delay_ms = CW__RECONNECT_FIRST_MS;
  uint64_t period = (uint64_t)cw_settings_int(w->settings, CW_SET_HEARTBEAT_MS);
  uv_timer_start(&w->heartbeat_timer, cw__heartbeat, period, period);
}

void cw_worker_health_stop(cw_worker_t* w) {
  uv_close((uv_handle_t*)&w->heartbeat_timer, NULL);
  uv_close((uv_handle_t*)&w->reconnect_timer, NULL);
}

void cw_worker_health_registered(cw_worker_t* w) {
  w->registered = true;
  w->heartbeat_seq = 0;
  w->reconnect_delay_ms = CW__RECONNECT_FIRST_MS;
  cw__heartbeat(&w->heartbeat_timer);  // at once: the controller's clock starts now
}

void cw_worker_health_controller_lost(cw_worker_t* w, const char* name) {
  w->registered = false;
  if (w->shutting_down) return;
  int64_t delay = w->reconnect_delay_ms;
  int64_t max = cw_settings_int(w->settings, CW_SET_RECONNECT_MAX_MS);
  if (delay > max) delay = max;
  CW_LOGW("lost the controller %s; still serving, reconnecting in %" PRId64 " ms", name, delay);
  w->reconnect_delay_ms = delay * 2 > max ? max : delay * 2;
  uv_timer_start(&w->reconnect_timer, cw__reconnect, (uint64_t)delay, 0);
}
