// Health probes of the worker, GET-only HTTP on its own loop
// (src/net/cw_http_server.h bounds what an HTTP peer can do):
//   /healthz  200 while the loop answers (a wedged loop fails the probe);
//   /readyz   200 once the PJRT plugin is loaded and, with --controller, the
//             controller has accepted REGISTER (standalone: at once); 503
//             before, while the link is lost, and while shutting down.
// A draining worker stays ready: draining is the controller's business, and
// clients reach a worker through the controller's device map, not through an
// orchestrator's load balancer.
#include "cw_worker_http.h"

#include <stdio.h>
#include <string.h>

#include "cw_http_server.h"
#include "cw_worker_link.h"

static void cw__handle(void* user, const cw_http_request_t* r, cw_http_response_t* out) {
  cw_worker_t* w = user;
  if (!strcmp(r->path, "/healthz")) {
    cw_http_text_printf(&out->body, "ok\n");
    return;
  }
  if (strcmp(r->path, "/readyz")) {
    cw_http_response_error(out, 404);
    return;
  }
  const char* why = NULL;
  if (w->shutting_down) why = "shutting down";
  else if (!w->pjrt || !w->inventory_ready) why = "PJRT plugin not loaded";
  else if (w->link && !cw_worker_link_registered(w)) why = "not registered with the controller";
  if (why) {
    out->code = 503;
    cw_http_text_printf(&out->body, "not ready: %s\n", why);
    return;
  }
  cw_http_text_printf(&out->body, "ready: %zu devices%s%s\n", w->pjrt->num_devices,
                      w->link ? ", registered" : ", standalone", w->draining ? ", draining" : "");
}

cw_status_t cw_worker_http_start(cw_worker_t* w) {
  const char* address = cw_settings_string(w->settings, CW_SET_METRICS_LISTEN);
  if (!address[0]) return cw_ok_status();
  CW_RETURN_IF_ERROR(cw_http_server_create(&w->loop, address, cw__handle, w, &w->http),
                     "--metrics-listen");
  printf("causeway-worker http on http://%s (/healthz, /readyz)\n",
         cw_http_server_address(w->http));
  fflush(stdout);
  return cw_ok_status();
}

void cw_worker_http_stop(cw_worker_t* w) {
  cw_http_server_close(w->http);
  w->http = NULL;
}
