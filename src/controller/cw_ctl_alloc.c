// Sessions' devices: the controller's side of allocation. A session that asks
// for N devices gets N physical devices (cw_alloc_plan), numbered 0..N-1 in
// the session: SessionInfo lists exactly those, and every place that turns a
// session's device id into a worker and local device (compile placement and
// its island check, EXE_INFO) asks cw_ctl_alloc_resolve. Requests that cannot
// be met now wait here, FIFO; the head is retried when capacity frees (a
// session closes, a worker registers) and the waiting client is told why
// with an ALLOC_WAITING event.
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_health.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_resume.h"
#include "cw_ctl_sched_queue.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_time.h"

#define CW__MAX_SESSION_DEVICES 65536

struct cw_ctl_alloc_wait_s {
  cw_ctl_alloc_wait_t* next;
  cw_net_conn_t* conn;         // retained
  cw_ctl_session_t* session;   // retained
  uint64_t request_id;
  Causeway__V1__OpenSessionRequest* req;  // owned
  int64_t start_ms;
  int64_t deadline_ms;  // 0: none
  char last_message[1024];  // the last ALLOC_WAITING sent
};

// --- Mapping a session's ids --------------------------------------------------------

// Whether the session's ids go through s->vdevs: allocated, or resumed with
// the ids an earlier controller gave (cw_ctl_resume.c).
static bool cw__mapped(const cw_ctl_session_t* s) { return s && (s->allocated || s->mapped); }

cw_ctl_worker_t* cw_ctl_alloc_resolve(cw_controller_t* ctl, cw_ctl_session_t* s, int64_t id,
                                      uint32_t* out_local) {
  *out_local = 0;
  if (cw__mapped(s)) {
    if (id < 0 || id >= s->num_vdevs || s->vdevs[id].worker >= ctl->num_workers) return NULL;
    *out_local = s->vdevs[id].local;
    return ctl->workers[s->vdevs[id].worker];
  }
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    if (id >= w->first_device && id < (int64_t)w->first_device + w->num_devices) {
      *out_local = (uint32_t)(id - w->first_device);
      return w;
    }
  }
  return NULL;
}

int64_t cw_ctl_alloc_num_ids(cw_controller_t* ctl, cw_ctl_session_t* s) {
  return cw__mapped(s) ? (int64_t)s->num_vdevs : (int64_t)ctl->next_device;
}

int64_t cw_ctl_alloc_default_device(cw_controller_t* ctl, cw_ctl_session_t* s) {
  for (size_t i = 0; cw__mapped(s) && i < s->num_vdevs; ++i) {
    if (s->allocated || s->vdevs[i].worker < ctl->num_workers) return (int64_t)i;
  }
  if (cw__mapped(s)) return -1;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    if (ctl->workers[i]->alive && cw_ctl_ops_worker_takes_work(ctl->workers[i])) {
      return ctl->workers[i]->first_device;
    }
  }
  return -1;
}

int32_t cw_ctl_alloc_session_id(cw_controller_t* ctl, cw_ctl_session_t* s, uint32_t worker,
                                uint32_t local) {
  if (!cw__mapped(s)) {
    // A worker's reply names its local ids: one it does not have is no device.
    if (worker >= ctl->num_workers || local >= ctl->workers[worker]->num_devices) return -1;
    return ctl->workers[worker]->first_device + (int32_t)local;
  }
  for (uint32_t i = 0; i < s->num_vdevs; ++i) {
    if (s->vdevs[i].worker == worker && s->vdevs[i].local == local) return (int32_t)i;
  }
  return -1;
}

bool cw_ctl_alloc_exclusive_on(cw_controller_t* ctl, cw_ctl_session_t* s, uint32_t worker_index) {
  if (!s || !s->allocated || s->share) return false;
  for (uint32_t i = 0; i < s->num_vdevs; ++i) {
    if (s->vdevs[i].worker == worker_index) return true;
  }
  return false;
}

uint32_t* cw_ctl_alloc_share_weights(cw_controller_t* ctl) {
  uint32_t* sw = calloc(ctl->num_workers + 1, sizeof(*sw));
  if (!sw) return NULL;
  for (const cw_ctl_session_t* o = ctl->sessions; o; o = o->next) {
    if (!o->allocated || o->closed || !o->share) continue;
    for (uint32_t k = 0; k < o->num_vdevs; ++k) {
      uint32_t wi = o->vdevs[k].worker;
      if (wi >= ctl->num_workers) continue;
      if (!sw[wi]) sw[wi] = o->weight;
      else if (sw[wi] != o->weight) sw[wi] = CW_CTL_WEIGHTS_MIXED;
    }
  }
  return sw;
}

bool cw_ctl_alloc_shared_direct(const cw_ctl_session_t* s, uint32_t worker_index,
                                const uint32_t* share_weights) {
  return s && s->allocated && s->share && !s->relay_shared && share_weights &&
         share_weights[worker_index] == s->weight;
}

// Tells `o`'s clients that its launches go through the controller from now
// on: one LEASE_CHANGED per worker it has devices on. seen[w] == a tag above
// `tag`: sent already to this peer; returns the last tag used.
static uint32_t cw__alloc_withdraw_lease(cw_controller_t* ctl, cw_ctl_session_t* o,
                                         uint32_t* seen, uint32_t tag) {
  o->relay_shared = true;
  CW_LOGI("session %" PRIu64 ": a sharer of another weight came; its launches on shared "
          "devices go through the island's scheduler now", o->id);
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__LEASE_CHANGED;
  ev.direct_launch = false;
  for (cw_ctl_peer_t* p = ctl->peers; p; p = p->next) {
    if (p->session != o || !cw_net_conn_is_open(p->conn)) continue;
    tag++;  // a fresh mark per peer
    for (uint32_t k = 0; k < o->num_vdevs; ++k) {
      uint32_t wi = o->vdevs[k].worker;
      if (wi >= ctl->num_workers || seen[wi] == tag) continue;
      seen[wi] = tag;
      ev.worker_index = wi;
      ev.worker_name = ctl->workers[wi]->name;
      cw_net_conn_send(p->conn, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0, NULL, NULL);
    }
  }
  return tag;
}

void cw_ctl_alloc_check_leases(cw_controller_t* ctl, cw_ctl_session_t* s) {
  if (!s->share || !ctl->num_workers) return;
  // Passes over every session's devices, whatever the number of workers.
  uint32_t* sw = cw_ctl_alloc_share_weights(ctl);
  uint8_t* mixed = calloc(ctl->num_workers, 1);  // one-worker islands s shares with another weight
  uint32_t* seen = calloc(ctl->num_workers, sizeof(*seen));  // events sent, by tag
  bool any = false;
  for (uint32_t k = 0; sw && mixed && seen && k < s->num_vdevs; ++k) {
    uint32_t wi = s->vdevs[k].worker;
    if (wi >= ctl->num_workers || sw[wi] != CW_CTL_WEIGHTS_MIXED) continue;
    if (cw_ctl_island_spans(ctl->workers[wi])) continue;  // always relayed
    mixed[wi] = 1;
    any = true;
  }
  // (Out of memory: the leases stay, and launches go in arrival order.)
  uint32_t tag = 0;
  for (cw_ctl_session_t* o = ctl->sessions; any && o; o = o->next) {
    if (o == s || o->relay_shared || !o->allocated || o->closed || !o->share) continue;
    bool there = false;
    for (uint32_t k = 0; k < o->num_vdevs && !there; ++k) {
      there = o->vdevs[k].worker < ctl->num_workers && mixed[o->vdevs[k].worker];
    }
    if (there) tag = cw__alloc_withdraw_lease(ctl, o, seen, tag);
  }
  free(sw);
  free(mixed);
  free(seen);
}

void cw_ctl_alloc_session_free(cw_ctl_session_t* s) {
  free(s->vdevs);
  s->vdevs = NULL;
  s->num_vdevs = 0;
}

size_t cw_ctl_alloc_queue_length(const cw_controller_t* ctl) {
  size_t n = 0;
  for (const cw_ctl_alloc_wait_t* a = ctl->alloc_queue; a; a = a->next) n++;
  return n;
}

bool cw_ctl_alloc_waiting(const cw_controller_t* ctl, const cw_ctl_session_t* s) {
  for (const cw_ctl_alloc_wait_t* a = ctl->alloc_queue; a; a = a->next) {
    if (a->session == s) return true;
  }
  return false;
}

// --- SessionInfo of an allocated session ----------------------------------------------

void cw_ctl_info_platform(Causeway__V1__SessionInfo* info, const Causeway__V1__Inventory* inv) {
  // The workers' plugin, unchanged.
  info->platform_name = inv->platform_name;
  info->platform_version = inv->platform_version;
  info->pjrt_major = inv->pjrt_major;
  info->pjrt_minor = inv->pjrt_minor;
  info->plugin_attributes = inv->plugin_attributes;
  info->n_plugin_attributes = inv->n_plugin_attributes;
}

void cw_ctl_worker_info_fill(Causeway__V1__WorkerInfo* wi, const cw_ctl_worker_t* w,
                             cw_ctl_session_t* s, const uint32_t* share_weights) {
  causeway__v1__worker_info__init(wi);
  wi->index = w->index;
  wi->name = (char*)w->name;
  wi->address = (char*)w->address;
  wi->alive = w->alive;
  wi->island = w->island;
  wi->incarnation = w->incarnation;
  wi->direct_launch = cw_ctl_session_direct_launch(w->ctl, s, w->index, share_weights);
}

bool cw_ctl_alloc_reply_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint16_t type,
                             uint64_t request_id) {
  cw_ctl_session_t* s = p->session;
  if (!cw__mapped(s)) return false;
  Causeway__V1__SessionInfo info = CAUSEWAY__V1__SESSION_INFO__INIT;
  info.session_id = s->id;
  Causeway__V1__WorkerInfo* wis = calloc(s->num_vdevs + 1, sizeof(*wis));
  Causeway__V1__WorkerInfo** wptrs = calloc(s->num_vdevs + 1, sizeof(*wptrs));
  Causeway__V1__GlobalDevice* gds = calloc(s->num_vdevs + 1, sizeof(*gds));
  Causeway__V1__GlobalDevice** gptrs = calloc(s->num_vdevs + 1, sizeof(*gptrs));
  // (Out of memory for it: a sharer is relayed.)
  uint32_t* sw = s->allocated && s->share ? cw_ctl_alloc_share_weights(ctl) : NULL;
  if (!wis || !wptrs || !gds || !gptrs) {
    cw_ctl_reply_error(ctl, p->conn, type, request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
  } else {
    size_t wn = 0, dn = 0;
    for (uint32_t i = 0; i < s->num_vdevs; ++i) {
      if (s->vdevs[i].worker >= ctl->num_workers) continue;  // a hole of a mapped session
      cw_ctl_worker_t* w = ctl->workers[s->vdevs[i].worker];
      const Causeway__V1__Inventory* inv = w->reg->inventory;
      if (dn == 0) cw_ctl_info_platform(&info, inv);
      size_t k = 0;
      while (k < wn && wis[k].index != w->index) k++;
      if (k == wn) {
        cw_ctl_worker_info_fill(&wis[wn], w, s, sw);
        wptrs[wn] = &wis[wn];
        wn++;
      }
      wis[k].num_devices++;
      causeway__v1__global_device__init(&gds[dn]);
      gds[dn].global_id = (int32_t)i;
      gds[dn].worker_index = w->index;
      gds[dn].island = w->island;
      gds[dn].device = inv->devices[s->vdevs[i].local];
      gptrs[dn] = &gds[dn];
      dn++;
    }
    info.workers = wptrs;
    info.n_workers = wn;
    info.devices = gptrs;
    info.n_devices = dn;
    if (s->mapped) {
      cw_ctl_ops_session_devices(s, gds, dn);  // the ids it numbered with
    } else {
      // `causeway status` shows the cluster's ids of the devices it holds.
      int32_t* ids = calloc(dn + 1, sizeof(*ids));
      for (size_t k = 0; ids && k < dn; ++k) {
        const cw_alloc_device_t* v = &s->vdevs[gds[k].global_id];
        ids[k] = ctl->workers[v->worker]->first_device + (int32_t)v->local;
      }
      if (ids) cw_ctl_ops_session_device_ids(s, ids, dn);  // takes ids
    }
    cw_ctl_health_session_joined(s);  // it knows the workers as they are now
    cw_net_conn_reply(p->conn, type, request_id, &info.base);
    for (size_t k = 0; k < wn; ++k) (void)cw_ctl_session_link(s, wis[k].index);
  }
  free(sw);
  free(wis);
  free(wptrs);
  free(gds);
  free(gptrs);
  return true;
}

// --- Planning -------------------------------------------------------------------------

// Every worker with its devices' use by the open sessions. Returns false on
// out of memory.
static bool cw__alloc_snapshot(cw_controller_t* ctl, cw_alloc_worker_t** out_workers,
                               uint8_t** out_use) {
  size_t nd = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) nd += ctl->workers[i]->num_devices;
  cw_alloc_worker_t* ws = calloc(ctl->num_workers + 1, sizeof(*ws));
  uint8_t* use = calloc(nd + 1, 1);
  if (!ws || !use) {
    free(ws);
    free(use);
    return false;
  }
  size_t off = 0;
  bool hold = cw_ctl_resume_holds(ctl, NULL, 0);
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    ws[i].name = w->name;
    ws[i].platform = w->reg->inventory->platform_name;
    // A drained worker's devices go to no new session (until it is undrained),
    // nor those of a worker that reported sessions still to resume.
    ws[i].held = hold && w->alive && cw_ctl_resume_holds_worker(ctl, w);
    ws[i].alive = w->alive && cw_ctl_ops_worker_takes_work(w) && !ws[i].held;
    ws[i].num_devices = w->num_devices;
    ws[i].use = use + off;
    ws[i].grouped = cw_ctl_island_spans(w);
    ws[i].island = w->island;
    off += w->num_devices;
  }
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    if (!s->allocated || s->closed) continue;
    for (uint32_t k = 0; k < s->num_vdevs; ++k) {
      const cw_alloc_device_t* d = &s->vdevs[k];
      if (d->worker >= ctl->num_workers || d->local >= ws[d->worker].num_devices) continue;
      uint8_t* u = (uint8_t*)&ws[d->worker].use[d->local];
      if (*u != CW_ALLOC_EXCLUSIVE) *u = s->share ? CW_ALLOC_SHARED : CW_ALLOC_EXCLUSIVE;
    }
  }
  *out_workers = ws;
  *out_use = use;
  return true;
}

static void cw__alloc_request(const Causeway__V1__OpenSessionRequest* r, cw_alloc_request_t* out) {
  memset(out, 0, sizeof(*out));
  out->num_devices = r->num_devices;
  out->platform = r->platform;
  out->min_island = r->min_island;
  out->workers = (const char* const*)r->workers;
  out->num_workers = r->n_workers;
  out->share = r->share;
}

// What was asked, for messages: "4 devices (shared, platform cpu, ...)".
static void cw__alloc_describe(const Causeway__V1__OpenSessionRequest* r, char* buf, size_t cap) {
  size_t used = 0;
  int n = snprintf(buf, cap, "%u devices", r->num_devices);
  if (n > 0) used = (size_t)n < cap ? (size_t)n : cap - 1;
  const char* sep = " (";
#define CW__ADD(...)                                                        \
  do {                                                                      \
    if (used < cap - 1) {                                                   \
      int k = snprintf(buf + used, cap - used, __VA_ARGS__);               \
      if (k > 0) used += (size_t)k < cap - used ? (size_t)k : cap - used - 1; \
    }                                                                       \
    sep = ", ";                                                             \
  } while (0)
  if (r->share) CW__ADD("%sshared", sep);
  if (r->platform && r->platform[0]) CW__ADD("%splatform %s", sep, r->platform);
  if (r->min_island > 1) CW__ADD("%sislands of at least %u", sep, r->min_island);
  for (size_t i = 0; i < r->n_workers; ++i) {
    CW__ADD("%s%s%s", sep, i ? "" : "on workers ", r->workers[i]);
    sep = ", ";
  }
  if (sep[0] == ',') CW__ADD(")");
#undef CW__ADD
}

// Gives `s` the planned devices.
static bool cw__alloc_apply(cw_controller_t* ctl, cw_ctl_session_t* s,
                            const Causeway__V1__OpenSessionRequest* r,
                            const cw_alloc_device_t* devs) {
  assert(!s->vdevs);  // only a session without devices gets some
  cw_alloc_device_t* copy = malloc(r->num_devices * sizeof(*copy));
  if (!copy) return false;
  memcpy(copy, devs, r->num_devices * sizeof(*copy));
  s->vdevs = copy;
  s->num_vdevs = r->num_devices;
  s->allocated = true;
  s->share = r->share;
  s->weight = r->weight ? r->weight : 1;
  char text[512];
  size_t used = 0;
  text[0] = '\0';
  for (uint32_t i = 0; i < s->num_vdevs && used < sizeof(text) - 1; ++i) {
    cw_ctl_worker_t* w = ctl->workers[copy[i].worker];
    int n = snprintf(text + used, sizeof(text) - used, "%s%s:%u", i ? " " : "", w->name,
                     copy[i].local);
    if (n > 0) used += (size_t)n < sizeof(text) - used ? (size_t)n : sizeof(text) - used - 1;
  }
  CW_LOGI("session %" PRIu64 ": %u devices%s (weight %u): %s", s->id, s->num_vdevs,
          s->share ? " shared" : "", s->weight, text);
  return true;
}

typedef enum { CW__ALLOC_GRANTED, CW__ALLOC_WAIT, CW__ALLOC_FAILED } cw__alloc_result_t;

// What a waiting request waits for besides sessions' devices, for its
// message and its place in the queue (cw__alloc_try).
typedef struct {
  bool window;  // it would have failed: workers may still register
  bool held;    // matching workers are held back for sessions still to resume
  // It waits for workers that are away (dead, draining, held, not back yet
  // after a restart), not only for sessions to end: the queue behind it
  // goes on meanwhile (cw_alloc_reachable).
  bool away;
} cw__alloc_why_t;

// Request `r`, queued ahead, holds those behind it up: they may go first only
// on workers it could never be given (cw__alloc_try's `avoid`). Those it could
// are flagged in *aside ([ctl->num_workers], made at the first such request),
// so that a check of a long queue costs O(requests x workers), not that times
// the requests ahead. False when out of memory.
static bool cw__alloc_avoid_add(cw_controller_t* ctl, bool** aside,
                                const Causeway__V1__OpenSessionRequest* r) {
  if (!*aside) {
    *aside = calloc(ctl->num_workers + 1, sizeof(**aside));
    if (!*aside) return false;
  }
  cw_alloc_request_t ahead;
  cw__alloc_request(r, &ahead);
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    if ((*aside)[i]) continue;
    const cw_ctl_worker_t* w = ctl->workers[i];
    cw_alloc_worker_t view = {.name = w->name, .platform = w->reg->inventory->platform_name};
    (*aside)[i] = cw_alloc_matches(&ahead, &view);
  }
  return true;
}

// Plans `r` for `s`. At the queue's head (`apply`) a grant gives the session
// its devices. Behind it, with `avoid` (the requests ahead that hold it up),
// it is granted only on workers none of those could be given; without, only
// the answer counts. `st` (set on FAILED) says why; on WAIT *out_usable and
// *out_capacity say what is free and *out_why what else it waits for (after
// a controller restart: cw_ctl_resume.h), all over every worker, for the
// client's message.
static cw__alloc_result_t cw__alloc_try(cw_controller_t* ctl, cw_ctl_session_t* s, bool apply,
                                        const Causeway__V1__OpenSessionRequest* r,
                                        const bool* avoid, cw_status_t* out_st,
                                        uint32_t* out_usable, uint32_t* out_capacity,
                                        cw__alloc_why_t* out_why) {
  *out_st = cw_ok_status();
  *out_why = (cw__alloc_why_t){false, false, false};
  cw_alloc_worker_t* ws = NULL;
  uint8_t* use = NULL;
  cw_alloc_device_t* devs = calloc(r->num_devices + 1, sizeof(*devs));
  if (!devs || !cw__alloc_snapshot(ctl, &ws, &use)) {
    free(devs);
    *out_st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    return CW__ALLOC_FAILED;
  }
  cw_alloc_request_t req;
  cw__alloc_request(r, &req);
  bool wait = false;
  cw_status_t st = cw_alloc_plan(ws, ctl->num_workers, &req, devs, &wait, out_usable,
                                 out_capacity);
  // Taking over a running cluster: workers may still be registering (the
  // devices of those that reported sessions still to resume are held back
  // in the snapshot).
  if (st && cw_ctl_resume_window(ctl)) {
    cw_status_free(st);
    st = cw_ok_status();
    wait = true;
    out_why->window = true;
  }
  for (size_t i = 0; i < ctl->num_workers && !out_why->held; ++i) {
    out_why->held = ws[i].held && cw_alloc_matches(&req, &ws[i]);
  }
  // Possible now, but behind the head: planned again on the workers nobody
  // ahead could be given; it waits behind them (reachable) otherwise.
  bool behind = false;
  if (!st && !wait && avoid) {
    for (size_t i = 0; i < ctl->num_workers; ++i) ws[i].alive = ws[i].alive && !avoid[i];
    uint32_t usable_aside = 0, capacity_aside = 0;
    cw_status_t aside = cw_alloc_plan(ws, ctl->num_workers, &req, devs, &behind, &usable_aside,
                                      &capacity_aside);
    behind = behind || aside;
    cw_status_free(aside);
    apply = !behind;
  }
  cw__alloc_result_t res = CW__ALLOC_FAILED;
  if (!st && !wait && !behind) {
    res = (!apply || cw__alloc_apply(ctl, s, r, devs)) ? CW__ALLOC_GRANTED : CW__ALLOC_FAILED;
    if (res == CW__ALLOC_FAILED) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    if (res == CW__ALLOC_GRANTED && apply) cw_ctl_alloc_check_leases(ctl, s);
  } else if (!st) {
    res = CW__ALLOC_WAIT;
    out_why->away = !behind && !cw_alloc_reachable(ws, ctl->num_workers, &req);
  }
  *out_st = st;
  free(devs);
  free(ws);
  free(use);
  return res;
}

static void cw__alloc_event(cw_net_conn_t* conn, int kind, const char* message) {
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = kind;
  ev.message = (char*)message;
  cw_net_conn_send(conn, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0, NULL, NULL);
}

static void cw__alloc_wait_free(cw_ctl_alloc_wait_t* a) {
  cw_net_conn_release(a->conn);
  // The session's reference is dropped by the caller (cw_controller.c owns release).
  if (a->req) protobuf_c_message_free_unpacked(&a->req->base, NULL);
  free(a);
}

// The reply for a granted wait: SessionInfo through a peer view of it.
static void cw__alloc_reply(cw_controller_t* ctl, cw_net_conn_t* conn, cw_ctl_session_t* s,
                            uint64_t request_id) {
  cw_ctl_peer_t view;
  memset(&view, 0, sizeof(view));
  view.ctl = ctl;
  view.conn = conn;
  view.session = s;
  (void)cw_ctl_alloc_reply_info(ctl, &view, CW_MSG_OPEN_SESSION, request_id);
}

void cw_ctl_alloc_open(cw_controller_t* ctl, cw_ctl_peer_t* p, uint64_t request_id,
                       const Causeway__V1__OpenSessionRequest* r) {
  cw_ctl_session_t* s = p->session;
  if (!r || r->num_devices == 0 || !s || cw__mapped(s)) {
    // Every device (or the devices this session already has: allocated, or
    // resumed by SESSION_RESUME).
    cw_ctl_session_reply_info(ctl, p, CW_MSG_OPEN_SESSION, request_id);
    return;
  }
  char asked[512];
  cw__alloc_describe(r, asked, sizeof(asked));
  // One place in the queue per session: two would both be granted.
  for (cw_ctl_alloc_wait_t* q = ctl->alloc_queue; q; q = q->next) {
    if (q->session != s) continue;
    cw_ctl_reply_error(ctl, p->conn, CW_MSG_OPEN_SESSION, request_id,
                       cw_make_status(CW_FAILED_PRECONDITION, "OPEN_SESSION for %s: session %"
                                      PRIu64 " already waits in the device queue (request %"
                                      PRIu64 ")", asked, s->id, q->request_id));
    return;
  }
  if (r->weight > CW_SCHED_MAX_WEIGHT) {
    cw_ctl_reply_error(ctl, p->conn, CW_MSG_OPEN_SESSION, request_id,
                       cw_make_status(CW_INVALID_ARGUMENT, "OPEN_SESSION for %s: weight %u is "
                                      "outside [1, %d]", asked, r->weight, CW_SCHED_MAX_WEIGHT));
    return;
  }
  if (r->n_workers > CW__MAX_WORKERS || r->num_devices > CW__MAX_SESSION_DEVICES) {
    cw_ctl_reply_error(ctl, p->conn, CW_MSG_OPEN_SESSION, request_id,
                    cw_make_status(CW_INVALID_ARGUMENT, "OPEN_SESSION asks for %s: too many",
                                   asked));
    return;
  }
  // With others queued only "never" is decided here; the queue's check
  // below decides whether it may go first.
  uint32_t usable = 0, capacity = 0;
  cw_status_t st = cw_ok_status();
  bool head = ctl->alloc_queue == NULL;
  cw__alloc_why_t why;
  cw__alloc_result_t res = cw__alloc_try(ctl, s, head, r, NULL, &st, &usable, &capacity, &why);
  if (!head && res == CW__ALLOC_GRANTED) res = CW__ALLOC_WAIT;  // the queue decides (below)
  if (res == CW__ALLOC_GRANTED) {
    cw_ctl_session_reply_info(ctl, p, CW_MSG_OPEN_SESSION, request_id);
    return;
  }
  if (res == CW__ALLOC_FAILED) {
    CW_LOGW("session %" PRIu64 ": OPEN_SESSION for %s refused: %s", s->id, asked,
            cw_status_message(st));
    cw_ctl_reply_error(ctl, p->conn, CW_MSG_OPEN_SESSION, request_id,
                    cw_status_annotate(st, "cannot allocate %s", asked));
    return;
  }
  cw_ctl_alloc_wait_t* a = calloc(1, sizeof(*a));
  if (a) a->req = (Causeway__V1__OpenSessionRequest*)cw_msg_copy(&r->base);
  if (!a || !a->req) {
    free(a);
    cw_ctl_reply_error(ctl, p->conn, CW_MSG_OPEN_SESSION, request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  a->conn = p->conn;
  cw_net_conn_retain(p->conn);
  a->session = s;
  s->refs++;
  a->request_id = request_id;
  a->start_ms = cw_time_now_ms();
  a->deadline_ms = r->queue_timeout_ms ? a->start_ms + r->queue_timeout_ms : 0;
  if (ctl->alloc_queue_tail) ctl->alloc_queue_tail->next = a;
  else ctl->alloc_queue = a;
  ctl->alloc_queue_tail = a;
  CW_LOGI("session %" PRIu64 ": queued for %s (%u of %u free)", s->id, asked, usable, capacity);
  // A tick ends its wait at its deadline, and at the end of a hold's window.
  bool tick = a->deadline_ms || cw_ctl_resume_window(ctl);
  if (tick && !uv_is_active((uv_handle_t*)&ctl->open_tick) && !ctl->shutting_down) {
    uv_timer_start(&ctl->open_tick, cw_ctl_session_open_tick, CW__OPEN_TICK_MS, CW__OPEN_TICK_MS);
  }
  cw_ctl_alloc_check(ctl, false);
}

static void cw__alloc_unlink(cw_controller_t* ctl, cw_ctl_alloc_wait_t** pp) {
  cw_ctl_alloc_wait_t* a = *pp;
  *pp = a->next;
  if (ctl->alloc_queue_tail == a) {
    ctl->alloc_queue_tail = NULL;
    for (cw_ctl_alloc_wait_t* x = ctl->alloc_queue; x; x = x->next) ctl->alloc_queue_tail = x;
  }
  a->next = NULL;
}

void cw_ctl_alloc_check(cw_controller_t* ctl, bool expire) {
  int64_t now = cw_time_now_ms();
  // First come first served: the head is granted when it fits, where
  // requests that wait for workers that are away do not count (the others
  // would otherwise wait as long as a dead worker stays dead, on devices
  // such a head cannot use yet).
  bool head = true;
  size_t ahead = 0;  // requests before this one that wait for sessions to end
  // Those requests: one behind them may still go first on workers none of
  // them could be given (a pool of workers named by CAUSEWAY_WORKERS, or
  // another platform), where it cannot delay them.
  bool* avoid = NULL;
  cw_ctl_alloc_wait_t** pp = &ctl->alloc_queue;
  while (*pp) {
    cw_ctl_alloc_wait_t* a = *pp;
    cw_ctl_session_t* s = a->session;
    if (ctl->shutting_down || !cw_net_conn_is_open(a->conn) || s->closed) {
      cw__alloc_unlink(ctl, pp);
      CW_LOGI("session %" PRIu64 ": left the device queue (client gone)", s->id);
      cw_ctl_session_release(s);
      cw__alloc_wait_free(a);
      continue;
    }
    if (cw__mapped(s)) {
      // Given devices meanwhile (a SESSION_RESUME): answered as a second
      // OPEN_SESSION is.
      cw__alloc_unlink(ctl, pp);
      cw__alloc_reply(ctl, a->conn, s, a->request_id);
      cw_ctl_session_release(s);
      cw__alloc_wait_free(a);
      pp = &ctl->alloc_queue;
      head = true;
      ahead = 0;
      if (avoid) memset(avoid, 0, ctl->num_workers * sizeof(*avoid));
      continue;
    }
    char asked[512];
    cw__alloc_describe(a->req, asked, sizeof(asked));
    uint32_t usable = 0, capacity = 0;
    cw_status_t st = cw_ok_status();
    cw__alloc_why_t why;
    cw__alloc_result_t res = cw__alloc_try(ctl, s, head, a->req, head ? NULL : avoid, &st,
                                           &usable, &capacity, &why);
    bool late = res == CW__ALLOC_WAIT && expire && a->deadline_ms && now >= a->deadline_ms;
    // After a controller restart: what else it waits for.
    char hold[160] = "";
    if (why.window) {
      snprintf(hold, sizeof(hold), "; workers of an earlier controller may still register");
    } else if (why.held) {
      (void)cw_ctl_resume_holds(ctl, hold, sizeof(hold));
    }
    if (res == CW__ALLOC_WAIT && !late) {
      char msg[1024];
      snprintf(msg, sizeof(msg), "causeway: waiting for %s (%u of %u free; %zu session%s ahead "
               "in the queue%s%s)", asked, usable, capacity, ahead, ahead == 1 ? "" : "s", hold,
               why.away && !hold[0] ? "; it needs devices of workers that are down or "
                                      "draining, and sessions queued behind it may go first "
                                      "meanwhile" : "");
      if (strcmp(msg, a->last_message) != 0) {
        snprintf(a->last_message, sizeof(a->last_message), "%s", msg);
        cw__alloc_event(a->conn, CAUSEWAY__V1__CLUSTER_EVENT__KIND__ALLOC_WAITING, msg);
      }
      if (!why.away) {
        head = false;
        ahead++;
        // Out of memory: nobody behind it goes this time.
        if (!cw__alloc_avoid_add(ctl, &avoid, a->req)) break;
      }
      pp = &a->next;
      continue;
    }
    cw__alloc_unlink(ctl, pp);
    if (res == CW__ALLOC_GRANTED) {
      CW_LOGI("session %" PRIu64 ": granted %s after %" PRId64 " ms in the queue", s->id, asked,
              now - a->start_ms);
      cw__alloc_event(a->conn, CAUSEWAY__V1__CLUSTER_EVENT__KIND__ALLOC_GRANTED, "granted");
      cw__alloc_reply(ctl, a->conn, s, a->request_id);
    } else {
      if (late) {
        st = cw_make_status(CW_DEADLINE_EXCEEDED, "waited %.1f s for %s: %u of %u matching "
                            "devices free, %zu session%s ahead in the queue%s",
                            (double)(now - a->start_ms) / 1000.0, asked, usable, capacity, ahead,
                            ahead == 1 ? "" : "s", hold);
      } else {
        st = cw_status_annotate(st, "cannot allocate %s", asked);
      }
      CW_LOGW("session %" PRIu64 ": %s", s->id, cw_status_message(st));
      cw_ctl_reply_error(ctl, a->conn, CW_MSG_OPEN_SESSION, a->request_id, st);
    }
    cw_ctl_session_release(s);
    cw__alloc_wait_free(a);
    // A grant or a removal changes what the rest see: start over.
    pp = &ctl->alloc_queue;
    head = true;
    ahead = 0;
    if (avoid) memset(avoid, 0, ctl->num_workers * sizeof(*avoid));
  }
  free(avoid);
}
