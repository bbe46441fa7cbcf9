// The worker registry (see cw_ctl_registry.h).
#include "cw_ctl_registry.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cw_ctl_health.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_resume.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_xla_options.h"

cw_status_t cw_ctl_worker_error(cw_ctl_worker_t* w, cw_net_conn_t* conn, cw_status_t st) {
  if (st && (!w->alive || (conn && !cw_net_conn_is_open(conn)))) {
    cw_status_t out = cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: %s", w->name,
                                     w->address, cw_status_message(st));
    cw_status_free(st);
    return out;
  }
  return st;
}

cw_status_t cw_ctl_worker_unavailable(const cw_ctl_worker_t* w, const char* island) {
  const char* sep = w->lost_why[0] ? ": " : "";
  if (island) {
    return cw_make_status(CW_UNAVAILABLE, "worker %s (%s) of island '%s' is unavailable%s%s",
                          w->name, w->address, island, sep, w->lost_why);
  }
  return cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable%s%s", w->name, w->address,
                        sep, w->lost_why);
}

size_t cw_ctl_alive_workers(const cw_controller_t* ctl) {
  size_t n = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) n += ctl->workers[i]->alive;
  return n;
}

void cw_ctl_worker_lost(cw_ctl_worker_t* w, const char* why) {
  cw_controller_t* ctl = w->ctl;
  if (!w->alive) return;
  w->alive = false;
  snprintf(w->lost_why, sizeof(w->lost_why), "%s", why);
  cw_ctl_health_worker_lost(w);
  CW_LOGW("worker %s (%s) lost: %s", w->name, w->address, why);
  char msg[512];
  snprintf(msg, sizeof(msg), "worker %s (%s) is unavailable: %s", w->name, w->address, why);
  cw_status_t lost = cw_make_status(CW_UNAVAILABLE, "%s", msg);
  cw_ctl_ops_record_error(ctl, w->name, CW_MSG_REGISTER, lost);
  cw_status_free(lost);
  if (!ctl->shutting_down) {
    Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
    ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN;
    ev.worker_index = w->index;
    ev.worker_name = w->name;
    ev.message = msg;
    cw_ctl_broadcast_event(ctl, &ev);
  }
  // Closing the connections fails what is pending on them (UNAVAILABLE naming
  // w, and why: before, a compile heard only "closed").
  cw_ctl_link_lose(&w->private_conn, msg);
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    if (w->index < s->num_links) cw_ctl_link_lose(&s->links[w->index], msg);
  }
  cw_ctl_sched_pump(ctl, w->index);
  if (w->island != w->index) cw_ctl_sched_pump(ctl, w->island);  // its island's launches fail
}

// A new slot's first global device id: the one the worker had before this
// controller (re)started (RegisterRequest.previous) while no slot holds any
// of those ids, so clients that resume their sessions and new ones number
// the devices alike; else after every slot's.
static int32_t cw__first_device(const cw_controller_t* ctl,
                                const Causeway__V1__RegisterRequest* r) {
  int64_t n = (int64_t)r->inventory->n_devices;
  // At most the ids a full fleet could have handed out (CW__MAX_WORKERS slots
  // of the most devices a worker may have), not any up to 2^30: a compile
  // sizes its id map by the largest id it places.
  if (!r->previous || r->previous->first_device_id < 0 ||
      (int64_t)r->previous->first_device_id + n >
          (int64_t)CW__MAX_WORKERS * CW_XLA_MAX_ASSIGNED_DEVICES) {
    return ctl->next_device;
  }
  int64_t lo = r->previous->first_device_id;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    const cw_ctl_worker_t* w = ctl->workers[i];
    if (lo < (int64_t)w->first_device + w->num_devices && w->first_device < lo + n) {
      return ctl->next_device;
    }
  }
  return (int32_t)lo;
}

bool cw_ctl_printable(const char* s, size_t max) {
  size_t n = 0;
  for (; s && *s; ++s, ++n) {
    if (n >= max || *s < 0x20 || *s >= 0x7f) return false;
  }
  return n > 0;
}

void cw_ctl_handle_register(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  Causeway__V1__RegisterRequest* r = (Causeway__V1__RegisterRequest*)*msg;
  cw_status_t st = cw_ok_status();
  if (p->worker) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "this connection already registered");
  } else if (!cw_ctl_printable(r->worker_name, CW__MAX_NAME - 1)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "worker_name must be 1..%d printable characters",
                        CW__MAX_NAME - 1);
  } else if (!cw_ctl_printable(r->address, CW__MAX_ADDRESS)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "address must be 1..%d printable characters",
                        CW__MAX_ADDRESS);
  } else if (!r->inventory || r->inventory->n_devices == 0 ||
             r->inventory->n_devices > CW_XLA_MAX_ASSIGNED_DEVICES) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "inventory must list 1..%d devices",
                        CW_XLA_MAX_ASSIGNED_DEVICES);
  } else if (!r->inventory->platform_name || !r->inventory->platform_name[0]) {
    // protobuf-c decodes an absent string as "", never NULL.
    st = cw_make_status(CW_INVALID_ARGUMENT, "inventory lacks the platform");
  } else if (r->previous && r->previous->n_paused_sessions > CW_MSG_MAX_PREVIOUS_SESSIONS) {
    st = cw_make_status(CW_INVALID_ARGUMENT,
                        "previous.paused_sessions lists %zu sessions (at most %d)",
                        r->previous->n_paused_sessions, CW_MSG_MAX_PREVIOUS_SESSIONS);
  } else if (r->previous && r->previous->n_sessions > CW_MSG_MAX_PREVIOUS_SESSIONS) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "previous.sessions lists %zu sessions (at most %d)",
                        r->previous->n_sessions, CW_MSG_MAX_PREVIOUS_SESSIONS);
  } else if (ctl->num_workers >= CW__MAX_WORKERS ||
             (int64_t)ctl->next_device + (int64_t)r->inventory->n_devices > INT32_MAX / 2) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "too many workers or devices");
  }
  for (size_t d = 0; !st && d < (r->inventory ? r->inventory->n_devices : 0); ++d) {
    if (!r->inventory->devices[d]) st = cw_make_status(CW_INVALID_ARGUMENT, "empty device");
  }
  if (!st && r->revision < CW_PROTOCOL_REVISION) {
    CW_LOGW("worker %s (%s) is an older build (protocol %u, revision %u; this controller's: "
            "revision %u): after a controller restart it does not report its drain, its paused "
            "sessions or the sessions connected to it, which are then lost; upgrade workers "
            "before the controller (docs/deploy.md, \"Upgrading\")", r->worker_name, r->address,
            CW_PROTOCOL_VERSION, r->revision, CW_PROTOCOL_REVISION);
  }
  cw_ctl_worker_t* w = NULL;
  cw_ctl_worker_t** grown = NULL;
  if (!st) st = cw_ctl_health_slot_for(ctl, r, &w);
  if (!st) st = cw_ctl_island_check(ctl, r, w);
  if (!st && w) {
    cw_ctl_health_take_over(p, h, w, r);
    *msg = NULL;
    return;
  }
  if (!st) {
    w = calloc(1, sizeof(*w));
    grown = realloc(ctl->workers, (ctl->num_workers + 1) * sizeof(*grown));
    if (grown) ctl->workers = grown;
    if (!w || !grown) {
      free(w);
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (st) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id, cw_status_annotate(st, "REGISTER"));
    return;
  }
  w->ctl = ctl;
  w->index = (uint32_t)ctl->num_workers;
  snprintf(w->name, sizeof(w->name), "%s", r->worker_name);
  snprintf(w->address, sizeof(w->address), "%s", r->address);
  w->alive = true;
  w->first_device = cw__first_device(ctl, r);
  w->num_devices = (uint32_t)r->inventory->n_devices;
  w->reg = r;
  *msg = NULL;
  ctl->workers[ctl->num_workers++] = w;
  cw_ctl_island_join(ctl, w, r);
  if (w->first_device + (int32_t)w->num_devices > ctl->next_device) {
    ctl->next_device = w->first_device + (int32_t)w->num_devices;
  }
  p->worker = w;
  cw_ctl_health_registered(p, w);
  cw_net_conn_set_name(p->conn, w->name);
  CW_LOGI("worker %u %s (%s) registered: devices %d-%d, platform %s %s", w->index, w->name,
          w->address, w->first_device, w->first_device + (int32_t)w->num_devices - 1,
          r->inventory->platform_name, r->inventory->platform_version);
  Causeway__V1__RegisterReply rep = CAUSEWAY__V1__REGISTER_REPLY__INIT;
  rep.worker_index = w->index;
  rep.first_device_id = w->first_device;
  cw_net_conn_reply(p->conn, h->type, h->request_id, &rep.base);
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP;
  ev.worker_index = w->index;
  ev.worker_name = w->name;
  ev.message = (char*)"registered";
  cw_ctl_broadcast_event(ctl, &ev);
  cw_ctl_ops_worker_registered(w, false);  // its drain before any session gets its devices
  cw_ctl_resume_expect(w);                 // and the sessions still to resume
  cw_ctl_session_open_waits_check(ctl, false);
}
