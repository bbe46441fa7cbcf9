// The controller daemon: one libuv loop thread owns the worker registry, the
// client sessions, the compile service and the island queues. This file is
// the loop, its lifecycle and the handler table; each request family has its
// own file (cw_ctl_<family>.c, docs/architecture.md).
//
// Loop phases (one iteration of uv_run):
//   1. timers: HELLO and connect deadlines (src/net), the OPEN_SESSION tick
//      that answers waits whose deadline passed, heartbeat checks.
//   2. poll I/O: accept; frames from workers (REGISTER), clients (HELLO,
//      OPEN_SESSION, COMPILE, LAUNCH, DELETE, EXE_INFO, STATS) and replies on
//      the controller's own connections to workers (one per session and
//      worker, plus one private connection per worker for compiling); the
//      watch-fd pipe; signals.
//   3. idle: connections that hit the per-wakeup frame cap resume (src/net).
//   4. prepare: each connection's gathered small frames go out (src/net).
//   5. close callbacks.
// Nothing blocks: compiling, serializing, loading and launching are requests
// to workers whose replies continue the work.
//
// Islands: with the CPU plugin one island is one worker's devices. Requests
// that name an executable (LAUNCH, DELETE, EXE_INFO) go through the island's
// queue in arrival order; the queue head waits only while its executable is
// still being loaded, and everything after it waits with it, so the island's
// order is the order the controller received them. Launches are relayed
// without waiting for earlier ones to finish.
#include "cw_controller.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_compile.h"
#include "cw_ctl_disk.h"
#include "cw_ctl_health.h"
#include "cw_ctl_internal.h"
#include "cw_ctl_metrics.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_relay.h"
#include "cw_ctl_resume.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_ready.h"

void cw_ctl_reply_error(cw_controller_t* ctl, cw_net_conn_t* c, uint16_t type, uint64_t rid,
                        cw_status_t st) {
  ctl->errors++;
  cw_ctl_ops_record_error(ctl, cw_net_conn_name(c), type, st);
  cw_net_conn_reply_error(c, type, rid, st);
}

// HELLO passed credentials, version and role (src/net): a client's session.
static cw_status_t cw__on_hello(cw_net_conn_t* conn, const Causeway__V1__HelloRequest* r,
                                uint64_t* out_session_id, bool* out_has_session) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  if (r->role != CAUSEWAY__V1__ROLE__ROLE_CLIENT) return cw_ok_status();  // a worker: none
  cw_ctl_session_t* s = r->session_id ? cw_ctl_session_find(ctl, r->session_id) : NULL;
  if (!s) s = cw_ctl_session_create(ctl, r->session_id);
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a session");
  cw_ctl_session_retain(s);
  s->clients++;
  p->session = s;
  *out_session_id = s->id;
  *out_has_session = true;
  return cw_ok_status();
}

static void cw__handle_stats(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  Causeway__V1__Stats st = CAUSEWAY__V1__STATS__INIT;
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    st.sessions++;
    st.executables += s->num_exes;
  }
  st.launches = ctl->launches_relayed;
  st.connections = ctl->net.inbound_connections;
  st.errors = ctl->errors;
  st.workers = cw_ctl_alive_workers(ctl);
  st.workers_dead = ctl->num_workers - st.workers;
  st.alloc_queue = cw_ctl_alloc_queue_length(ctl);
  st.compiles = ctl->compiles;
  st.cache_hits = ctl->cache_hits;
  st.cache_misses = ctl->cache_misses;
  st.cache_bytes = cw_compile_cache_bytes(ctl->cache);
  cw_ctl_disk_stats(ctl, &st);
  cw_ctl_health_stats(ctl, &st);
  void* stamps = cw_ctl_sched_stats(ctl, &st);  // gang order: the stamps assigned
  cw_net_conn_reply(conn, h->type, h->request_id, &st.base);
  free(stamps);
}

// What the controller serves; src/net checks the message table's rules first.
static const cw_net_service_t cw__service = {
    .name = "controller",
    .unserved_hint = "; send it to a worker",
    .hello_roles = CW_ROLE_CLIENT_BIT | CW_ROLE_WORKER_BIT,
    .on_hello = cw__on_hello,
    .handlers =
        {
            [CW_MSG_PING] = cw_net_reply_ping,
            [CW_MSG_STATS] = cw__handle_stats,
            [CW_MSG_REGISTER] = cw_ctl_handle_register,
            [CW_MSG_HEALTH_HEARTBEAT] = cw_ctl_handle_heartbeat,
            [CW_MSG_HEALTH_REJOIN] = cw_ctl_handle_rejoin,
            [CW_MSG_OPEN_SESSION] = cw_ctl_handle_open_session,
            [CW_MSG_SESSION_RESUME] = cw_ctl_handle_session_resume,
            [CW_MSG_COMPILE] = cw_ctl_handle_compile,
            [CW_MSG_LAUNCH] = cw_ctl_handle_launch,
            [CW_MSG_EXE_INFO] = cw_ctl_handle_exe_info,
            [CW_MSG_DELETE] = cw_ctl_handle_delete,
            [CW_MSG_ADMIN_STATUS] = cw_ctl_handle_admin,
            [CW_MSG_ADMIN_PAUSE] = cw_ctl_handle_admin,
            [CW_MSG_ADMIN_RESUME] = cw_ctl_handle_admin,
            [CW_MSG_ADMIN_DRAIN] = cw_ctl_handle_admin,
            [CW_MSG_ADMIN_UNDRAIN] = cw_ctl_handle_admin,
        },
};

static void cw__on_close(cw_net_conn_t* conn, cw_status_t reason) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  cw_ctl_peer_t** pp = &ctl->peers;
  while (*pp && *pp != p) pp = &(*pp)->next;
  if (*pp) *pp = p->next;
  if (p->worker) {
    cw_ctl_worker_lost(p->worker, reason ? cw_status_message(reason)
                                      : "its connection to the controller closed");
  }
  if (p->session) {
    cw_ctl_session_t* s = p->session;
    p->session = NULL;
    if (--s->clients == 0) cw_ctl_session_close(s);
    cw_ctl_session_release(s);
  }
  cw_net_conn_set_callbacks(conn, &(cw_net_conn_callbacks_t){0}, NULL);
  cw_net_conn_release(conn);
  free(p);
  // A parked OPEN_SESSION of this peer is answered (dropped) here.
  cw_ctl_session_open_waits_check(ctl, false);
}

static const cw_net_conn_callbacks_t cw__peer_callbacks = {.on_close = cw__on_close};

static void cw__on_accept(cw_net_t* net, cw_net_conn_t* conn) {
  cw_controller_t* ctl = net->user;
  cw_ctl_peer_t* p = calloc(1, sizeof(*p));
  if (!p || ctl->shutting_down) {
    free(p);
    cw_net_conn_close(conn, NULL);
    return;
  }
  p->ctl = ctl;
  p->conn = conn;
  cw_net_conn_retain(conn);
  p->next = ctl->peers;
  ctl->peers = p;
  cw_net_conn_set_callbacks(conn, &cw__peer_callbacks, p);
}

void cw_controller_stop(cw_controller_t* ctl) {
  if (ctl->shutting_down) return;
  ctl->shutting_down = true;
  CW_LOGI("shutting down");
  uv_close((uv_handle_t*)&ctl->sigterm, NULL);
  uv_close((uv_handle_t*)&ctl->sigint, NULL);
  cw_net_creds_stop(&ctl->creds);
  cw_net_watch_stop(&ctl->watch);
  cw_ctl_metrics_stop(ctl);
  cw_ctl_disk_stop(ctl);
  cw_ctl_health_stop(ctl);
  cw_ctl_ops_stop(ctl);
  cw_ctl_compile_stop(ctl);  // those queued; closing the links fails those sent
  for (size_t i = 0; i < ctl->num_workers; ++i) cw_ctl_link_drop(&ctl->workers[i]->private_conn);
  while (ctl->sessions) cw_ctl_session_close(ctl->sessions);
  // Closing every connection fails what is pending on it.
  cw_net_deinitialize(&ctl->net);
  cw_ctl_session_open_waits_check(ctl, false);  // their clients are gone: dropped
  uv_close((uv_handle_t*)&ctl->open_tick, NULL);
  ctl->handles_open = false;
}

static void cw__on_signal(uv_signal_t* s, int signum) {
  CW_LOGI("signal %d", signum);
  cw_controller_stop(s->data);
}

static void cw__on_watch_eof(void* user) {
  CW_LOGI("watch-fd reached EOF: the parent is gone");
  cw_controller_stop(user);
}

cw_status_t cw_controller_create(const cw_settings_t* settings, cw_controller_t** out) {
  *out = NULL;
  signal(SIGPIPE, SIG_IGN);
  cw_net_creds_ignore_hup();  // until cw_net_creds_start: a reload asked now ends nothing
  cw_controller_t* ctl = calloc(1, sizeof(*ctl));
  if (!ctl) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  *out = ctl;  // released by cw_controller_release even on failure
  ctl->settings = settings;
  ctl->token = cw_settings_string(settings, CW_SET_TOKEN);
  const char* name = cw_settings_string(settings, CW_SET_WORKER_NAME);
  snprintf(ctl->name, sizeof(ctl->name), "%s", name[0] ? name : "controller");
  int rc = uv_loop_init(&ctl->loop);
  if (rc < 0) return cw_make_status(CW_INTERNAL, "uv_loop_init: %s", uv_strerror(rc));
  ctl->loop_initialized = true;
  CW_RETURN_IF_ERROR(cw_net_threadpool_start(&ctl->loop), "controller");
  ctl->worker_compiles = (uint32_t)cw_settings_int(settings, CW_SET_WORKER_COMPILES);
  CW_RETURN_IF_ERROR(cw_compile_cache_create(
                         (uint64_t)cw_settings_int(settings, CW_SET_COMPILE_CACHE_BYTES),
                         &ctl->cache), "controller");
  CW_RETURN_IF_ERROR(cw_ctl_disk_create(ctl), "controller");
  cw_net_options_t no;
  cw_net_options_from_settings(settings, ctl->name, &no);
  cw_net_initialize(&ctl->net, &ctl->loop, &no);
  ctl->net.user = ctl;
  ctl->net_initialized = true;
  uv_signal_init(&ctl->loop, &ctl->sigterm);
  uv_signal_init(&ctl->loop, &ctl->sigint);
  ctl->sigterm.data = ctl->sigint.data = ctl;
  uv_timer_init(&ctl->loop, &ctl->open_tick);
  ctl->open_tick.data = ctl;
  ctl->handles_open = true;
  CW_RETURN_IF_ERROR(cw_ctl_ops_create(ctl), "controller");
  uv_signal_start(&ctl->sigterm, cw__on_signal, SIGTERM);
  uv_signal_start(&ctl->sigint, cw__on_signal, SIGINT);
  cw_ctl_health_start(ctl);
  int64_t fd = cw_settings_int(settings, CW_SET_WATCH_FD);
  if (fd >= 0) {
    CW_RETURN_IF_ERROR(cw_net_watch_start(&ctl->loop, (int)fd, cw__on_watch_eof, ctl,
                                          &ctl->watch), "controller");
  }
  CW_RETURN_IF_ERROR(cw_net_listen(&ctl->net, cw_settings_string(settings, CW_SET_LISTEN),
                                   &cw__service, cw__on_accept), "controller");
  CW_RETURN_IF_ERROR(cw_net_creds_start(&ctl->creds, &ctl->loop, settings, &ctl->net),
                     "controller");
  // Said once everything is up: a metrics port in use ends the start.
  CW_RETURN_IF_ERROR(cw_ctl_metrics_start(ctl), "controller");
  printf("causeway-controller listening on %s\n", ctl->net.listen_address);
  fflush(stdout);
  cw_ready_signal((int)cw_settings_int(settings, CW_SET_READY_FD), "listening on %s",
                  ctl->net.listen_address);
  return cw_ok_status();
}

cw_status_t cw_controller_run(cw_controller_t* ctl) {
  uv_run(&ctl->loop, UV_RUN_DEFAULT);
  return cw_ok_status();
}

void cw_controller_release(cw_controller_t* ctl) {
  if (!ctl) return;
  if (ctl->loop_initialized) {
    if (ctl->handles_open) cw_controller_stop(ctl);
    else if (ctl->net_initialized) cw_net_deinitialize(&ctl->net);
    uv_run(&ctl->loop, UV_RUN_DEFAULT);
    uv_loop_close(&ctl->loop);
  }
  cw_net_creds_free(&ctl->creds);
  cw_ctl_sched_free(ctl);
  cw_ctl_resume_free(ctl);
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    if (w->reg) protobuf_c_message_free_unpacked(&w->reg->base, NULL);
    cw_ctl_ops_worker_free(w);
    free(w);
  }
  free(ctl->workers);
  cw_ctl_metrics_release(ctl);
  cw_ctl_ops_release(ctl);
  cw_compile_cache_release(ctl->cache);
  cw_ctl_disk_release(ctl);
  free(ctl);
}
