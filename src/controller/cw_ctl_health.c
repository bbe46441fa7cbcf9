// Worker health: heartbeats, declaring silent workers dead, and replacement.
//
// A registered worker sends HEALTH_HEARTBEAT every --heartbeat-ms on its
// REGISTER connection; a timer here declares it dead after
// --worker-timeout-ms without one (a closed connection does so at once, in
// cw_controller.c). Death fails everything queued or in flight on it with
// UNAVAILABLE naming it and tells every session (WORKER_DOWN).
//
// A worker that registers with a dead worker's name (and the same device
// count and platform) takes over its slot: the same index and global device
// ids, incarnation + 1. Every session hears WORKER_UP with the new address;
// the executables sessions held there are LOADed again from the bytes kept
// with them (same ids), so programs JAX already compiled run again. A client
// sends HEALTH_REJOIN once it has connected to the replacement and restarted
// its seq numbering there; until then the session's requests for that worker
// are refused, so none sent before the client knew can reach the new worker
// with an old seq.
#include "cw_ctl_health.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_ctl_compile.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_relay.h"
#include "cw_ctl_resume.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_time.h"

#define CW__HEALTH_TICK_MAX_MS 250

// --- Heartbeats ---------------------------------------------------------------------

static void cw__health_tick(uv_timer_t* t) {
  cw_controller_t* ctl = t->data;
  int64_t timeout = cw_settings_int(ctl->settings, CW_SET_WORKER_TIMEOUT_MS);
  int64_t now = cw_time_now_ms();
  // libuv runs timers before polling: after a stall of this loop, heartbeats
  // may be waiting unread in the sockets. Judge only after a poll has run.
  int64_t since = now - ctl->health_last_tick_ms;
  ctl->health_last_tick_ms = now;
  if (since > 2 * (int64_t)uv_timer_get_repeat(t) + 100) return;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    if (!w->alive || !w->reg_conn || now - w->last_heartbeat_ms <= timeout) continue;
    char why[160];
    snprintf(why, sizeof(why), "no heartbeat for %" PRId64 " ms (--worker-timeout-ms %" PRId64
             ")", now - w->last_heartbeat_ms, timeout);
    ctl->workers_timed_out++;
    cw_ctl_worker_lost(w, why);
  }
}

void cw_ctl_health_start(cw_controller_t* ctl) {
  int64_t timeout = cw_settings_int(ctl->settings, CW_SET_WORKER_TIMEOUT_MS);
  int64_t period = timeout / 4 < CW__HEALTH_TICK_MAX_MS ? timeout / 4 : CW__HEALTH_TICK_MAX_MS;
  if (period < 1) period = 1;
  uv_timer_init(&ctl->loop, &ctl->health_tick);
  ctl->health_tick.data = ctl;
  ctl->health_last_tick_ms = cw_time_now_ms();
  uv_timer_start(&ctl->health_tick, cw__health_tick, (uint64_t)period, (uint64_t)period);
}

void cw_ctl_health_stop(cw_controller_t* ctl) {
  uv_close((uv_handle_t*)&ctl->health_tick, NULL);
}

void cw_ctl_handle_heartbeat(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_ctl_worker_t* w = p->worker;
  // A detached (timed-out) connection's late heartbeats do not revive the slot.
  if (!w || !w->alive || w->reg_conn != p->conn) return;
  w->last_heartbeat_ms = cw_time_now_ms();
  p->ctl->heartbeats++;
}

void cw_ctl_health_registered(cw_ctl_peer_t* p, cw_ctl_worker_t* w) {
  w->reg_conn = p->conn;
  w->last_heartbeat_ms = cw_time_now_ms();
}

void cw_ctl_health_worker_lost(cw_ctl_worker_t* w) {
  cw_net_conn_t* conn = w->reg_conn;
  w->reg_conn = NULL;
  if (!conn) return;
  for (cw_ctl_peer_t* p = w->ctl->peers; p; p = p->next) {
    if (p->conn != conn) continue;
    p->worker = NULL;
    // A silent worker's connection is still open: close it, so the worker
    // sees it when it wakes up and registers again (as its own replacement).
    if (cw_net_conn_is_open(conn)) {
      cw_net_conn_close(conn, cw_make_status(CW_UNAVAILABLE, "declared dead"));
    }
    break;
  }
}

// --- Replacement ------------------------------------------------------------------

// A refused REGISTER, logged once a minute per slot with a count: the worker
// it refuses goes on retrying every --reconnect-max-ms.
static bool cw__refusal_logged(cw_ctl_worker_t* w, uint64_t* out_more) {
  return cw_net_warn_limit_pass(&w->warn_refused, cw_time_now_ms(), 60 * 1000, out_more);
}

// The replacement rule, keyed on the worker's name: a dead slot of that name
// with the same device count and platform. Adapt here when sessions map
// virtual devices onto physical ones.
cw_status_t cw_ctl_health_slot_for(cw_controller_t* ctl, const Causeway__V1__RegisterRequest* r,
                                   cw_ctl_worker_t** out_slot) {
  *out_slot = NULL;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    if (strcmp(w->name, r->worker_name) != 0) continue;
    uint64_t more = 0;
    if (w->alive) {
      if (cw__refusal_logged(w, &more)) {
        CW_LOGW("REGISTER of worker %s at %s refused: the live worker %s at %s holds that name "
                "(%" PRIu64 " more such refusals since the last line)", r->worker_name,
                r->address, w->name, w->address, more);
      }
      return cw_make_status(CW_ALREADY_EXISTS, "worker name %s is taken by the live worker at %s "
                            "(this one is at %s); stop that one first or choose another --name",
                            w->name, w->address, r->address);
    }
    const Causeway__V1__Inventory* old = w->reg->inventory;
    const Causeway__V1__Inventory* inv = r->inventory;
    if (inv->n_devices != w->num_devices || strcmp(inv->platform_name, old->platform_name) ||
        strcmp(inv->platform_version, old->platform_version)) {
      if (cw__refusal_logged(w, &more)) {
        CW_LOGW("REGISTER of worker %s at %s refused: it does not match the lost %s (%s) "
                "(%" PRIu64 " more such refusals since the last line)", r->worker_name,
                r->address, w->name, w->address, more);
      }
      return cw_make_status(CW_FAILED_PRECONDITION, "worker %s at %s cannot replace the lost %s "
                            "(%s): it has %zu devices of %s %s, the slot has %u of %s %s",
                            r->worker_name, r->address, w->name, w->address, inv->n_devices,
                            inv->platform_name, inv->platform_version, w->num_devices,
                            old->platform_name, old->platform_version);
    }
    *out_slot = w;
    return cw_ok_status();
  }
  return cw_ok_status();
}

// One executable being LOADed into a replacement.
typedef struct cw__reload_s {
  cw_ctl_session_t* session;  // retained
  uint64_t exe_id;
  uint64_t serial;
  uint32_t incarnation;  // of the worker it was sent to
} cw__reload_t;

static void cw__reload_entry_release(void* user) {
  cw_compile_cache_entry_release((cw_compile_cache_entry_t*)user);
}

static void cw__reload_done(void* user, cw_net_conn_t* conn, cw_status_t status,
                            const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw__reload_t* rl = user;
  cw_controller_t* ctl = rl->session->ctl;
  free(bulk);
  cw_ctl_exe_t* e = cw_ctl_exe_find(rl->session, rl->exe_id);
  if (e && e->serial == rl->serial && e->state == CW__EXE_LOADING) {
    cw_ctl_worker_t* w = ctl->workers[e->worker];
    if (status && (!w->alive || w->incarnation != rl->incarnation)) {
      // The replacement died too: the next one loads it again.
      e->state = CW__EXE_READY;
    } else if (status) {
      CW_LOGW("re-LOAD of executable %" PRIu64 " into worker %s failed: %s", rl->exe_id, w->name,
              cw_status_message(status));
      e->state = CW__EXE_FAILED;
      e->error = cw_make_status(cw_status_code(status), "loading it into the replacement worker "
                                "%s (%s): %s", w->name, w->address, cw_status_message(status));
    } else {
      e->state = CW__EXE_READY;
      ctl->exes_reloaded++;
    }
    cw_ctl_sched_pump(ctl, e->worker);
  }
  cw_status_free(status);
  cw_ctl_session_release(rl->session);
  free(rl);
}

// LOADs every executable sessions held on slot `w` into its new worker;
// `other_cpu`: the lost worker's CPU (`lost_cpu`) is not the new one's, and
// the executables' code was compiled for it.
static void cw__reload_all(cw_controller_t* ctl, cw_ctl_worker_t* w, bool other_cpu,
                           const char* lost_cpu) {
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    for (cw_ctl_exe_t* e = s->exes; e; e = e->next) {
      if (e->worker != w->index || e->state != CW__EXE_READY || e->num_parts) continue;
      if (other_cpu) {
        e->state = CW__EXE_FAILED;
        e->program_wanted = true;  // compiled again for this CPU when the client sends it
        e->error =
            cw_make_status(CW_UNAVAILABLE,
                           "executable %" PRIu64
                           " was compiled for the "
                           "CPU of the lost worker (%s), and the replacement worker %s "
                           "(%s) has another (%s): compile it again",
                           e->id, lost_cpu, w->name, w->address, w->reg->inventory->host_cpu);
        continue;
      }
      if (!e->entry) {
        // Resumed after a controller restart (cw_ctl_resume.c): its bytes
        // were the old controller's. The client's HEALTH_REJOIN hears of it
        // and sends the program again; the text is for a client that does not.
        e->state = CW__EXE_FAILED;
        e->program_wanted = true;
        e->error = cw_make_status(CW_UNAVAILABLE, "executable %" PRIu64 " was compiled before "
                                  "the controller restarted and cannot be loaded into the "
                                  "replacement worker %s (%s): compile it again", e->id, w->name,
                                  w->address);
        continue;
      }
      // A worker that was stopped and came back may still hold the old life
      // of s (a client that has not heard WORKER_DOWN yet keeps its
      // connection open): LOADed there, the program "already exists", and
      // the client's join then numbered from 1 where that life was at its
      // old seq. The link asks for a fresh life.
      cw_net_conn_t* link = cw_ctl_session_link_fresh(s, w->index);
      cw__reload_t* rl = link ? calloc(1, sizeof(*rl)) : NULL;
      if (!rl) {
        e->state = CW__EXE_FAILED;
        e->error = cw_make_status(CW_UNAVAILABLE, "cannot load it into the replacement worker "
                                  "%s (%s)", w->name, w->address);
        continue;
      }
      e->state = CW__EXE_LOADING;  // the island's queue waits for it
      rl->session = s;
      cw_ctl_session_retain(s);
      rl->exe_id = e->id;
      rl->serial = e->serial;
      rl->incarnation = w->incarnation;
      Causeway__V1__LoadRequest req = CAUSEWAY__V1__LOAD_REQUEST__INIT;
      req.exe_id = e->id;
      req.compile_options.data = e->options;
      req.compile_options.len = e->options_size;
      cw_compile_cache_entry_retain(e->entry);
      cw_net_conn_request(link, CW_MSG_LOAD, &req.base, e->entry->bytes, e->entry->size,
                          cw__reload_entry_release, e->entry, cw__reload_done, rl);
    }
  }
}

void cw_ctl_health_take_over(cw_ctl_peer_t* p, const cw_frame_header_t* h, cw_ctl_worker_t* w,
                             Causeway__V1__RegisterRequest* r) {
  cw_controller_t* ctl = p->ctl;
  char old_address[sizeof(w->address)];
  snprintf(old_address, sizeof(old_address), "%s", w->address);
  // A worker that does not say (an older build) is taken for the same CPU.
  char* old_cpu = strdup(cw_ctl_compile_code_cpu(w->reg->inventory));
  const char* new_cpu = cw_ctl_compile_code_cpu(r->inventory);
  bool other_cpu = old_cpu && old_cpu[0] && new_cpu[0] && strcmp(old_cpu, new_cpu) != 0;
  protobuf_c_message_free_unpacked(&w->reg->base, NULL);
  w->reg = r;
  snprintf(w->address, sizeof(w->address), "%s", r->address);
  w->alive = true;
  w->incarnation++;
  cw_ctl_ops_worker_replaced(w);
  cw_ctl_sched_reset(w);
  cw_ctl_island_restarted(ctl, w);
  ctl->workers_replaced++;
  p->worker = w;
  cw_ctl_health_registered(p, w);
  cw_net_conn_set_name(p->conn, w->name);
  CW_LOGI("worker %u %s (%s) replaces the lost worker at %s: devices %d-%d, incarnation %u",
          w->index, w->name, w->address, old_address, w->first_device,
          w->first_device + (int32_t)w->num_devices - 1, w->incarnation);
  Causeway__V1__RegisterReply rep = CAUSEWAY__V1__REGISTER_REPLY__INIT;
  rep.worker_index = w->index;
  rep.first_device_id = w->first_device;
  rep.replaced = true;
  rep.incarnation = w->incarnation;
  cw_net_conn_reply(p->conn, h->type, h->request_id, &rep.base);
  char msg[512];
  snprintf(msg, sizeof(msg), "worker %s replaced: now at %s (was %s), incarnation %u", w->name,
           w->address, old_address, w->incarnation);
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP;
  ev.worker_index = w->index;
  ev.worker_name = w->name;
  ev.message = msg;
  ev.worker_address = w->address;
  ev.incarnation = w->incarnation;
  cw_ctl_broadcast_event(ctl, &ev);
  cw__reload_all(ctl, w, other_cpu, old_cpu);
  free(old_cpu);
  cw_ctl_ops_worker_registered(w, true);
  cw_ctl_resume_expect(w);
  cw_ctl_session_open_waits_check(ctl, false);
}

// --- Sessions ------------------------------------------------------------------------

static uint32_t cw__joined(const cw_ctl_session_t* s, uint32_t index) {
  return index < s->num_joined ? s->joined[index] : 0;
}

static bool cw__set_joined(cw_ctl_session_t* s, uint32_t index, uint32_t incarnation) {
  if (index >= s->num_joined) {
    if (!incarnation) return true;  // absent means 0
    uint32_t* grown = realloc(s->joined, ((size_t)index + 1) * sizeof(*grown));
    if (!grown) return false;
    memset(grown + s->num_joined, 0, ((size_t)index + 1 - s->num_joined) * sizeof(*grown));
    s->joined = grown;
    s->num_joined = (size_t)index + 1;
  }
  s->joined[index] = incarnation;
  return true;
}

void cw_ctl_health_session_joined(cw_ctl_session_t* s) {
  cw_controller_t* ctl = s->ctl;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    (void)cw__set_joined(s, (uint32_t)i, ctl->workers[i]->incarnation);
  }
}

cw_status_t cw_ctl_health_item_check(cw_controller_t* ctl, const cw_ctl_item_t* it) {
  if (it->worker >= ctl->num_workers) return cw_ok_status();
  cw_ctl_worker_t* w = ctl->workers[it->worker];
  uint32_t joined = cw__joined(it->session, it->worker);
  if (!w->alive || joined == w->incarnation) return cw_ok_status();
  return cw_make_status(CW_UNAVAILABLE, "worker %s (%s) was replaced (incarnation %u; this "
                        "session knows %u): requests sent before the client reconnected to it "
                        "are refused", w->name, w->address, w->incarnation, joined);
}

// A HEALTH_REJOIN whose answer waits for EXE_INFOs: programs a resumed
// session holds on the worker that this controller has no bytes of.
typedef struct cw_ctl_rejoin_s {
  struct cw_ctl_rejoin_s* next;  // the session's
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  cw_ctl_session_t* session;  // retained
  uint32_t worker;
  uint32_t incarnation;
  size_t left;  // EXE_INFOs not answered yet
  cw_status_t unasked;  // the first EXE_INFO the link's close failed: the worker did not answer
} cw__rejoin_t;

typedef struct cw__rejoin_check_s {
  cw__rejoin_t* rj;
  uint64_t exe_id;
  uint64_t serial;
} cw__rejoin_check_t;

// The answer: the session's programs on `w` it is to send again.
static void cw__rejoin_answer(cw_controller_t* ctl, cw_net_conn_t* client, uint64_t request_id,
                              cw_ctl_session_t* s, cw_ctl_worker_t* w) {
  size_t n = 0, cap = 0;
  uint64_t* wanted = NULL;
  for (cw_ctl_exe_t* e = s->exes; e; e = e->next) {
    if (!e->program_wanted || e->worker != w->index) continue;
    if (n == cap) {
      size_t grown_cap = cap ? 2 * cap : 16;
      uint64_t* grown = realloc(wanted, grown_cap * sizeof(*grown));
      if (!grown) break;  // those left out fail as for a client that does not send them
      wanted = grown;
      cap = grown_cap;
    }
    wanted[n++] = e->id;
  }
  CW_LOGI("session %" PRIu64 " rejoined worker %s (%s), incarnation %u%s", s->id, w->name,
          w->address, w->incarnation,
          n ? ": it sends programs this controller cannot load there again" : "");
  Causeway__V1__HealthRejoinReply rep = CAUSEWAY__V1__HEALTH_REJOIN_REPLY__INIT;
  rep.worker_index = w->index;
  rep.n_programs_wanted = n;
  rep.programs_wanted = wanted;
  cw_net_conn_reply(client, CW_MSG_HEALTH_REJOIN, request_id, &rep.base);
  free(wanted);
}

// One EXE_INFO answered (or the sentinel of the sends, ck NULL): the last
// answers the HEALTH_REJOIN.
static void cw__rejoin_done(cw__rejoin_t* rj) {
  if (--rj->left > 0) return;
  cw__rejoin_t** pp = &rj->session->rejoins;
  while (*pp != rj) pp = &(*pp)->next;
  *pp = rj->next;
  cw_controller_t* ctl = rj->session->ctl;
  cw_ctl_worker_t* w = ctl->workers[rj->worker];
  if (!w->alive || w->incarnation != rj->incarnation) {
    cw_ctl_reply_error(ctl, rj->client, CW_MSG_HEALTH_REJOIN, rj->request_id,
                       cw_make_status(CW_UNAVAILABLE, "worker %s (%s) went while the session "
                                      "rejoined it", w->name, w->address));
  } else if (rj->unasked) {
    // Not "nothing wanted": the client joins again and this is asked again.
    cw_ctl_reply_error(ctl, rj->client, CW_MSG_HEALTH_REJOIN, rj->request_id,
                       cw_make_status(CW_UNAVAILABLE, "worker %s (%s) could not be asked which "
                                      "programs of the session it holds: %s", w->name,
                                      w->address, cw_status_message(rj->unasked)));
  } else {
    cw__rejoin_answer(ctl, rj->client, rj->request_id, rj->session, w);
  }
  cw_status_free(rj->unasked);
  cw_net_conn_release(rj->client);
  cw_ctl_session_release(rj->session);
  free(rj);
}

static void cw__rejoin_checked(void* user, cw_net_conn_t* conn, cw_status_t status,
                               const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  (void)reply;
  (void)bulk_len;
  free(bulk);
  cw__rejoin_check_t* ck = user;
  cw__rejoin_t* rj = ck->rj;
  cw_ctl_exe_t* e = cw_ctl_exe_find(rj->session, ck->exe_id);
  if (status && cw_status_code(status) == CW_NOT_FOUND && e && e->serial == ck->serial &&
      e->state == CW__EXE_READY) {
    // Gone with the worker's session: a worker that came back, or a
    // replacement the earlier controller had loaded it into.
    cw_ctl_worker_t* w = rj->session->ctl->workers[rj->worker];
    e->state = CW__EXE_FAILED;
    e->program_wanted = true;
    e->error = cw_make_status(CW_UNAVAILABLE, "executable %" PRIu64 " was loaded on worker %s "
                              "(%s) by the earlier controller, and that worker holds it no "
                              "more: compile it again", e->id, w->name, w->address);
  } else if (status && cw_status_code(status) != CW_NOT_FOUND && !rj->unasked &&
             !cw_net_conn_is_open(conn)) {
    // The link closed (the controller stops, a failed connect): unanswered.
    rj->unasked = status;
    status = NULL;
  }
  cw_status_free(status);
  free(ck);
  cw__rejoin_done(rj);
}

void cw_ctl_handle_rejoin(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  const Causeway__V1__HealthRejoinRequest* r = (const Causeway__V1__HealthRejoinRequest*)*msg;
  cw_controller_t* ctl = p->ctl;
  cw_status_t st = cw_ok_status();
  cw_ctl_worker_t* w = r->worker_index < ctl->num_workers ? ctl->workers[r->worker_index] : NULL;
  const cw__rejoin_t* out = p->session->rejoins;
  while (out && out->worker != r->worker_index) out = out->next;
  if (!w) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "HEALTH_REJOIN: no worker %u", r->worker_index);
  } else if (out) {
    // Each would ask the worker for every resumed program again: bounded.
    st = cw_make_status(CW_UNAVAILABLE, "HEALTH_REJOIN: this session's rejoin of worker %s "
                        "(%s) is under way", w->name, w->address);
  } else if (!w->alive) {
    st = cw_ctl_worker_unavailable(w, NULL);
  } else if (r->incarnation != w->incarnation) {
    st = cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is at incarnation %u, not %u",
                        w->name, w->address, w->incarnation, r->incarnation);
  } else if (!cw__set_joined(p->session, r->worker_index, r->incarnation)) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id, st);
    return;
  }
  // Programs resumed from an earlier controller (no bytes here) may be gone
  // from the worker: asked for on the session's link before the answer.
  cw_ctl_session_t* s = p->session;
  cw_net_conn_t* link = NULL;
  cw__rejoin_t* rj = NULL;
  for (cw_ctl_exe_t* e = s->exes; e; e = e->next) {
    // Also those the controller is LOADing into a replacement: the answer
    // comes after them (EXE_INFO follows the LOAD on the link), so a launch
    // the client then sends straight to the worker finds them there.
    bool resumed = !e->entry && e->state == CW__EXE_READY;
    bool loading = e->entry && e->state == CW__EXE_LOADING;
    if (e->worker != w->index || e->num_parts || !(resumed || loading)) continue;
    if (!rj) {
      link = cw_ctl_session_link(s, w->index);
      rj = link ? calloc(1, sizeof(*rj)) : NULL;
      if (!rj) break;  // answered as before: a launch there finds out
      rj->client = p->conn;
      cw_net_conn_retain(p->conn);
      rj->request_id = h->request_id;
      rj->session = s;
      cw_ctl_session_retain(s);
      rj->worker = w->index;
      rj->incarnation = w->incarnation;
      rj->left = 1;  // the sends' own: an answer given at once must not finish it
      rj->next = s->rejoins;
      s->rejoins = rj;
    }
    cw__rejoin_check_t* ck = malloc(sizeof(*ck));
    if (!ck) break;
    *ck = (cw__rejoin_check_t){rj, e->id, e->serial};
    rj->left++;
    Causeway__V1__ExeInfoRequest req = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
    req.exe_id = e->id;
    req.presence_only = true;
    cw_net_conn_request(link, CW_MSG_EXE_INFO, &req.base, NULL, 0, NULL, NULL,
                        cw__rejoin_checked, ck);
  }
  if (rj) cw__rejoin_done(rj);
  else cw__rejoin_answer(ctl, p->conn, h->request_id, s, w);
}

// --- Executables, stats -----------------------------------------------------------------

void cw_ctl_health_exe_keep(cw_ctl_exe_t* e, cw_compile_cache_entry_t* entry,
                            const uint8_t* options, size_t options_size) {
  if (!e || e->entry) return;
  uint8_t* copy = malloc(options_size ? options_size : 1);
  if (!copy) return;  // then it is not reloaded: a replacement fails it
  if (options_size) memcpy(copy, options, options_size);
  cw_compile_cache_entry_retain(entry);
  e->entry = entry;
  e->options = copy;
  e->options_size = options_size;
}

void cw_ctl_health_exe_free(cw_ctl_exe_t* e) {
  if (e->entry) cw_compile_cache_entry_release(e->entry);
  free(e->options);
  e->entry = NULL;
  e->options = NULL;
}

void cw_ctl_health_session_free(cw_ctl_session_t* s) {
  free(s->joined);
  s->joined = NULL;
  s->num_joined = 0;
}

void cw_ctl_health_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st) {
  st->workers_replaced = ctl->workers_replaced;
  st->workers_timed_out = ctl->workers_timed_out;
  st->heartbeats = ctl->heartbeats;
  st->exes_reloaded = ctl->exes_reloaded;
}
