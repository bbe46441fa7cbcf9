// Sessions at the controller (see cw_ctl_session.h).
#include "cw_ctl_session.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_compile.h"
#include "cw_ctl_health.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_resume.h"
#include "cw_log.h"
#include "cw_random.h"
#include "cw_time.h"

// An OPEN_SESSION waiting for enough workers.
struct cw_ctl_open_wait_s {
  cw_ctl_open_wait_t* next;
  cw_ctl_peer_t* peer;
  cw_net_conn_t* conn;  // retained
  uint64_t request_id;
  uint32_t min_workers;
  int64_t deadline_ms;
  Causeway__V1__OpenSessionRequest* req;  // owned copy: the allocation asked for
};

void cw_ctl_ignore_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                      const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  if (status) CW_LOGD("%s: %s", cw_net_conn_name(conn), cw_status_message(status));
  cw_status_free(status);
  free(bulk);
}

static void cw__link_closed(cw_net_conn_t* conn, cw_status_t reason) {
  CW_LOGI("%s: closed%s%s", cw_net_conn_name(conn), reason ? ": " : "",
          reason ? cw_status_message(reason) : "");
}

static const cw_net_conn_callbacks_t cw__link_callbacks = {.on_close = cw__link_closed};

cw_net_conn_t* cw_ctl_link_open(cw_controller_t* ctl, cw_ctl_worker_t* w, uint64_t session_id,
                                bool fresh_session) {
  if (ctl->shutting_down || !w->alive) return NULL;
  char name[CW__MAX_NAME + 48];
  snprintf(name, sizeof(name), "worker %s%s", w->name, session_id ? "" : " (compile)");
  cw_net_conn_t* c = NULL;
  int64_t timeout = cw_settings_int(ctl->settings, CW_SET_CONNECT_TIMEOUT_MS);
  cw_status_t st =
      fresh_session
          ? cw_net_connect_fresh(&ctl->net, w->address, name, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER,
                                 session_id, &cw__link_callbacks, w, timeout, &c)
          : cw_net_connect(&ctl->net, w->address, name, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER,
                           session_id, &cw__link_callbacks, w, timeout, &c);
  if (st) {
    // Once per 10 s: every session's link retries each second (94 lines in
    // 12 s with the controller out of file descriptors, a helper's audit).
    uint64_t more = 0;
    if (cw_net_warn_limit_pass(&ctl->warn_link, cw_time_now_ms(), 10000, &more)) {
      CW_LOGW("cannot connect to worker %s (%s): %s (%" PRIu64 " more such failures since the "
              "last such line)", w->name, w->address, cw_status_message(st), more);
    }
    cw_status_free(st);
    return NULL;
  }
  cw_net_conn_retain(c);
  return c;
}

void cw_ctl_link_lose(cw_net_conn_t** link, const char* why) {
  if (!*link) return;
  cw_net_conn_t* c = *link;
  *link = NULL;
  cw_net_conn_close(c, why ? cw_make_status(CW_UNAVAILABLE, "%s", why) : NULL);
  cw_net_conn_release(c);
}

void cw_ctl_link_drop(cw_net_conn_t** link) { cw_ctl_link_lose(link, NULL); }

cw_ctl_session_t* cw_ctl_session_find(cw_controller_t* ctl, uint64_t id) {
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    if (s->id == id && !s->closed) return s;
  }
  return NULL;
}

cw_ctl_session_t* cw_ctl_session_create(cw_controller_t* ctl, uint64_t id) {
  cw_ctl_session_t* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  while (id == 0 || cw_ctl_session_find(ctl, id)) {
    // Fresh ids come from getrandom: knowing one is what it takes to join a
    // session (docs/protocol.md "Sessions are capabilities").
    if (!cw_random_id_or_log("session id", &id)) {
      free(s);
      return NULL;
    }
  }
  s->ctl = ctl;
  s->id = id;
  s->refs = 1;  // the session list's, dropped when closed
  s->next = ctl->sessions;
  ctl->sessions = s;
  CW_LOGI("session %" PRIu64 " opened", id);
  return s;
}

void cw_ctl_session_retain(cw_ctl_session_t* s) { s->refs++; }

static void cw__exe_free(cw_ctl_exe_t* e) {
  cw_ctl_health_exe_free(e);
  cw_status_free(e->error);
  free(e->parts);
  free(e->part_devices);
  free(e->devices);
  free(e);
}

void cw_ctl_session_release(cw_ctl_session_t* s) {
  if (!s) return;
  assert(s->refs > 0);
  if (--s->refs > 0) return;
  while (s->exes) {
    cw_ctl_exe_t* e = s->exes;
    s->exes = e->next;
    cw__exe_free(e);
  }
  free(s->exe_buckets);
  cw_ctl_alloc_session_free(s);
  free(s->links);
  cw_ctl_health_session_free(s);
  cw_ctl_ops_session_free(s);
  free(s);
}

void cw_ctl_session_close(cw_ctl_session_t* s) {
  if (s->closed) return;
  s->closed = true;
  cw_controller_t* ctl = s->ctl;
  cw_ctl_session_t** pp = &ctl->sessions;
  while (*pp && *pp != s) pp = &(*pp)->next;
  if (*pp) *pp = s->next;
  s->next = NULL;
  CW_LOGI("session %" PRIu64 " closed", s->id);
  for (size_t i = 0; i < s->num_links; ++i) cw_ctl_link_drop(&s->links[i]);
  cw_ctl_compile_prune(ctl);  // its compiles still queued, if no other session waits
  cw_ctl_session_release(s);
}

static size_t cw__exe_bucket(uint64_t id, size_t n) {
  id ^= id >> 33;  // ids are the client's: spread them
  id *= 0xff51afd7ed558ccdull;
  id ^= id >> 33;
  return (size_t)id & (n - 1);
}

bool cw_ctl_exe_add(cw_ctl_session_t* s, cw_ctl_exe_t* e) {
  if (s->num_exes >= s->num_exe_buckets) {
    size_t n = s->num_exe_buckets ? 2 * s->num_exe_buckets : 64;
    cw_ctl_exe_t** grown = calloc(n, sizeof(*grown));
    if (!grown) return false;
    // From the oldest, each pushed in front: the newest of an id stays first.
    cw_ctl_exe_t* last = s->exes;
    while (last && last->next) last = last->next;
    for (cw_ctl_exe_t* x = last; x; x = x->prev) {
      size_t b = cw__exe_bucket(x->id, n);
      x->hnext = grown[b];
      grown[b] = x;
    }
    free(s->exe_buckets);
    s->exe_buckets = grown;
    s->num_exe_buckets = n;
  }
  e->prev = NULL;
  e->next = s->exes;
  if (s->exes) s->exes->prev = e;
  s->exes = e;
  size_t b = cw__exe_bucket(e->id, s->num_exe_buckets);
  e->hnext = s->exe_buckets[b];
  s->exe_buckets[b] = e;
  s->num_exes++;
  return true;
}

cw_ctl_exe_t* cw_ctl_exe_find(cw_ctl_session_t* s, uint64_t id) {
  if (!s->num_exe_buckets) return NULL;
  for (cw_ctl_exe_t* e = s->exe_buckets[cw__exe_bucket(id, s->num_exe_buckets)]; e;
       e = e->hnext) {
    if (e->id == id) return e;
  }
  return NULL;
}

void cw_ctl_exe_forget(cw_ctl_session_t* s, uint64_t id) {
  if (!s->num_exe_buckets) return;
  cw_ctl_exe_t** pp = &s->exe_buckets[cw__exe_bucket(id, s->num_exe_buckets)];
  while (*pp && (*pp)->id != id) pp = &(*pp)->hnext;
  if (!*pp) return;
  cw_ctl_exe_t* e = *pp;
  *pp = e->hnext;
  if (e->prev) e->prev->next = e->next;
  else s->exes = e->next;
  if (e->next) e->next->prev = e->prev;
  s->num_exes--;
  cw__exe_free(e);
}

static cw_net_conn_t* cw__session_link(cw_ctl_session_t* s, uint32_t index, bool fresh) {
  cw_controller_t* ctl = s->ctl;
  if (s->closed || index >= ctl->num_workers) return NULL;
  if (index >= s->num_links) {
    cw_net_conn_t** grown = realloc(s->links, ctl->num_workers * sizeof(*grown));
    if (!grown) return NULL;
    for (size_t i = s->num_links; i < ctl->num_workers; ++i) grown[i] = NULL;
    s->links = grown;
    s->num_links = ctl->num_workers;
  }
  // A link the worker closed is opened again while the worker lives: the
  // session outlives one connection there (the client's are still open).
  if (s->links[index] && !cw_net_conn_is_open(s->links[index]) && ctl->workers[index]->alive) {
    cw_ctl_link_drop(&s->links[index]);
  }
  if (!s->links[index]) {
    s->links[index] = cw_ctl_link_open(ctl, ctl->workers[index], s->id, fresh);
    if (s->links[index]) cw_ctl_ops_link_opened(s, index, s->links[index]);
  }
  return s->links[index];
}

cw_net_conn_t* cw_ctl_session_link(cw_ctl_session_t* s, uint32_t index) {
  return cw__session_link(s, index, false);
}

cw_net_conn_t* cw_ctl_session_link_fresh(cw_ctl_session_t* s, uint32_t index) {
  return cw__session_link(s, index, true);
}

void cw_ctl_broadcast_event(cw_controller_t* ctl, Causeway__V1__ClusterEvent* ev) {
  for (cw_ctl_peer_t* p = ctl->peers; p; p = p->next) {
    if (p->session && cw_net_conn_is_open(p->conn)) {  // a client's
      cw_net_conn_send(p->conn, CW_MSG_EVENT, 0, 0, &ev->base, NULL, 0, NULL, NULL);
    }
  }
}

cw_net_conn_t* cw_ctl_private_link(cw_controller_t* ctl, cw_ctl_worker_t* w) {
  if (w->private_conn && !cw_net_conn_is_open(w->private_conn)) cw_ctl_link_drop(&w->private_conn);
  if (!w->private_conn) w->private_conn = cw_ctl_link_open(ctl, w, 0, false);
  return w->private_conn;
}

static int cw__by_global_id(const void* a, const void* b) {
  int32_t x = (*(const Causeway__V1__GlobalDevice* const*)a)->global_id;
  int32_t y = (*(const Causeway__V1__GlobalDevice* const*)b)->global_id;
  return (x > y) - (x < y);
}

void cw_ctl_session_reply_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint16_t type,
                               uint64_t request_id) {
  if (cw_ctl_alloc_reply_info(ctl, p, type, request_id)) return;  // an allocated session
  cw_ctl_session_t* s = p->session;
  Causeway__V1__SessionInfo info = CAUSEWAY__V1__SESSION_INFO__INIT;
  info.session_id = s->id;
  info.name = (char*)cw_ctl_ops_session_name(s);
  size_t nw = 0, nd = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    if (!ctl->workers[i]->alive || !cw_ctl_ops_worker_takes_work(ctl->workers[i])) continue;
    nw++;
    nd += ctl->workers[i]->num_devices;
  }
  Causeway__V1__WorkerInfo* wis = calloc(nw + 1, sizeof(*wis));
  Causeway__V1__WorkerInfo** wptrs = calloc(nw + 1, sizeof(*wptrs));
  Causeway__V1__GlobalDevice* gds = calloc(nd + 1, sizeof(*gds));
  Causeway__V1__GlobalDevice** gptrs = calloc(nd + 1, sizeof(*gptrs));
  if (!wis || !wptrs || !gds || !gptrs) {
    cw_ctl_reply_error(ctl, p->conn, type, request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
  } else {
    size_t wn = 0, dn = 0;
    for (size_t i = 0; i < ctl->num_workers; ++i) {
      cw_ctl_worker_t* w = ctl->workers[i];
      if (!w->alive || !cw_ctl_ops_worker_takes_work(w)) continue;  // draining: none new
      const Causeway__V1__Inventory* inv = w->reg->inventory;
      if (!wn) cw_ctl_info_platform(&info, inv);
      cw_ctl_worker_info_fill(&wis[wn], w, s, NULL);
      wis[wn].num_devices = w->num_devices;
      wptrs[wn] = &wis[wn];
      wn++;
      for (uint32_t d = 0; d < w->num_devices; ++d) {
        causeway__v1__global_device__init(&gds[dn]);
        gds[dn].global_id = w->first_device + (int32_t)d;
        gds[dn].worker_index = w->index;
        gds[dn].island = w->island;
        gds[dn].device = inv->devices[d];
        gptrs[dn] = &gds[dn];
        dn++;
      }
    }
    // In id order: workers that registered again after a restart keep their
    // ids (cw_ctl_registry.c) but may have come back in another order.
    qsort(gptrs, dn, sizeof(*gptrs), cw__by_global_id);
    info.workers = wptrs;
    info.n_workers = wn;
    info.devices = gptrs;
    info.n_devices = dn;
    cw_ctl_health_session_joined(s);
    cw_ctl_ops_session_devices(s, gds, dn);
    cw_net_conn_reply(p->conn, type, request_id, &info.base);
    // Relay connections, one per worker, in the client's session.
    for (size_t i = 0; i < ctl->num_workers; ++i) {
      if (ctl->workers[i]->alive) (void)cw_ctl_session_link(s, (uint32_t)i);
    }
  }
  free(wis);
  free(wptrs);
  free(gds);
  free(gptrs);
}

static void cw__open_wait_free(cw_ctl_open_wait_t* ow) {
  cw_net_conn_release(ow->conn);
  if (ow->req) protobuf_c_message_free_unpacked(&ow->req->base, NULL);
  free(ow);
}

void cw_ctl_session_open_waits_check(cw_controller_t* ctl, bool expire) {
  // Sessions waiting for their workers to come back first: a worker that
  // just registered again gives its devices to the resumes that named it
  // before a new session's request may take them (the hold may have ended).
  cw_ctl_resume_check(ctl, expire);
  int64_t now = cw_time_now_ms();
  cw_ctl_open_wait_t** pp = &ctl->open_waits;
  while (*pp) {
    cw_ctl_open_wait_t* ow = *pp;
    size_t alive = cw_ctl_alive_workers(ctl);
    bool gone = !cw_net_conn_is_open(ow->conn);
    bool ready = !gone && alive >= ow->min_workers;
    bool late = !gone && !ready && expire && now >= ow->deadline_ms;
    if (!gone && !ready && !late) {
      pp = &ow->next;
      continue;
    }
    *pp = ow->next;
    if (ready) {
      cw_ctl_alloc_open(ctl, ow->peer, ow->request_id, ow->req);
    } else if (late) {
      char names[1024];
      size_t used = 0;
      names[0] = 0;
      for (size_t i = 0; i < ctl->num_workers && used < sizeof(names) - 1; ++i) {
        if (!ctl->workers[i]->alive) continue;
        int n = snprintf(names + used, sizeof(names) - used, "%s%s (%s)", used ? ", " : "",
                         ctl->workers[i]->name, ctl->workers[i]->address);
        if (n > 0) used += (size_t)n < sizeof(names) - used ? (size_t)n : sizeof(names) - used - 1;
      }
      cw_ctl_reply_error(ctl, ow->conn, CW_MSG_OPEN_SESSION, ow->request_id,
                      cw_make_status(CW_DEADLINE_EXCEEDED, "waited for %u workers; %zu "
                                     "registered%s%s", ow->min_workers, alive,
                                     alive ? ": " : "", names));
    }
    cw__open_wait_free(ow);
  }
  cw_ctl_alloc_check(ctl, expire);  // capacity may have freed: the device queue
  if (!ctl->open_waits && !ctl->alloc_queue && !ctl->resume_waits && !ctl->shutting_down) {
    uv_timer_stop(&ctl->open_tick);
  }
}

void cw_ctl_session_open_tick(uv_timer_t* t) { cw_ctl_session_open_waits_check(t->data, true); }

void cw_ctl_handle_open_session(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  const Causeway__V1__OpenSessionRequest* r = (const Causeway__V1__OpenSessionRequest*)*msg;
  if (r->min_workers > CW__MAX_WORKERS) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_INVALID_ARGUMENT, "min_workers %u is above %d",
                                   r->min_workers, CW__MAX_WORKERS));
    return;
  }
  // One wait per session: each holds its request and is checked every tick.
  for (cw_ctl_open_wait_t* o = ctl->open_waits; o; o = o->next) {
    if (o->peer->session != p->session) continue;
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                       cw_make_status(CW_FAILED_PRECONDITION, "OPEN_SESSION: session %" PRIu64
                                      " already waits for workers (request %" PRIu64 ")",
                                      p->session->id, o->request_id));
    return;
  }
  cw_ctl_open_wait_t* ow = calloc(1, sizeof(*ow));
  if (!ow) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  cw_ctl_ops_session_opened(p->session, r);
  ow->peer = p;
  ow->conn = p->conn;
  cw_net_conn_retain(p->conn);
  ow->request_id = h->request_id;
  ow->min_workers = r->min_workers ? r->min_workers : 1;
  if (r->num_devices) {
    // Kept for the allocation once enough workers are there.
    ow->req = (Causeway__V1__OpenSessionRequest*)cw_msg_copy(&r->base);
    if (!ow->req) {
      cw__open_wait_free(ow);
      cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                      cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
      return;
    }
  }
  uint32_t wait = r->wait_ms < CW__MAX_WAIT_MS ? r->wait_ms : CW__MAX_WAIT_MS;
  ow->deadline_ms = cw_time_now_ms() + wait;
  ow->next = ctl->open_waits;
  ctl->open_waits = ow;
  if (!uv_is_active((uv_handle_t*)&ctl->open_tick)) {
    uv_timer_start(&ctl->open_tick, cw_ctl_session_open_tick, CW__OPEN_TICK_MS, CW__OPEN_TICK_MS);
  }
  cw_ctl_session_open_waits_check(ctl, wait == 0);
}

// The direct-launch lease: whether a session may send LAUNCH straight to a
// worker instead of through this controller's island queue.
//
// A session whose devices on a worker are its own needs no total order
// across sessions there: its seq numbers (docs/protocol.md, "Ordering across
// connections") already order its launches among its other requests, so the
// relay hop only adds latency. Nor do sessions sharing a one-worker island
// with one weight: that worker's single loop issues every launch in one
// order. Where sharers' weights differ the island's scheduler must pick
// (cw_ctl_sched.c), so they are relayed (cw_ctl_alloc.c withdraws leases
// already given).
bool cw_ctl_session_direct_launch(cw_controller_t* ctl, cw_ctl_session_t* s,
                                  uint32_t worker_index, const uint32_t* share_weights) {
  if (cw_settings_int(ctl->settings, CW_SET_RELAY_LAUNCHES) != 0) return false;
  // An island of several workers: its programs' parts go out from the
  // island's scheduler, one stamp for all of them (cw_ctl_island.c).
  if (worker_index < ctl->num_workers && cw_ctl_island_spans(ctl->workers[worker_index])) {
    return false;
  }
  // A session that asked for no devices sees every device and reserves none
  // (the embedded cluster's one client): its launches on a one-worker island
  // are issued by that worker's single loop in arrival order. A session that
  // asked for devices goes direct where they are its alone, or shared only
  // with sessions of its weight.
  return !s->allocated || cw_ctl_alloc_exclusive_on(ctl, s, worker_index) ||
         cw_ctl_alloc_shared_direct(s, worker_index, share_weights);
}
