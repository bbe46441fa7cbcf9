// The controller daemon: one libuv loop thread owns the worker registry, the
// client sessions, the compile service and the island queues.
//
// Loop phases (one iteration of uv_run):
//   1. timers: HELLO and connect deadlines (cw_net), the OPEN_SESSION tick
//      that answers waits whose deadline passed.
//   2. poll I/O: accept; frames from workers (REGISTER), clients (HELLO,
//      OPEN_SESSION, COMPILE, LAUNCH, DELETE, EXE_INFO, STATS) and replies on
//      the controller's own connections to workers (one per session and
//      worker, plus one private connection per worker for compiling); the
//      watch-fd pipe; signals.
//   3. idle: connections that hit the per-wakeup frame cap resume (cw_net).
//   4. close callbacks.
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
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "cw_compile_cache.h"
#include "cw_compile_disk.h"
#include "cw_frame.h"
#include "cw_log.h"
#include "cw_net.h"
#include "cw_random.h"
#include "cw_xla_options.h"

#include "cw_ctl_internal.h"
#include "cw_time.h"
#include "cw_messages.h"


// --- Small helpers -----------------------------------------------------------

void cw__reply_error(cw_controller_t* ctl, cw_net_conn_t* c, uint16_t type, uint64_t rid,
                     cw_status_t st) {
  ctl->errors++;
  cw_ctl_ops_record_error(ctl, cw_net_conn_name(c), type, st);
  cw_net_conn_reply_error(c, type, rid, st);
}

// An error that arrived on (or because of) a connection to `w`: when that
// connection is gone, say which worker is unavailable. Takes `st`.
cw_status_t cw__worker_error(cw_ctl_worker_t* w, cw_net_conn_t* conn, cw_status_t st) {
  if (st && (!w->alive || (conn && !cw_net_conn_is_open(conn)))) {
    cw_status_t out = cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: %s", w->name,
                                     w->address, cw_status_message(st));
    cw_status_free(st);
    return out;
  }
  return st;
}

void cw__ignore_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                      const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  if (status) CW_LOGD("%s: %s", cw_net_conn_name(conn), cw_status_message(status));
  cw_status_free(status);
  free(bulk);
}

static void cw__hello_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                            const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  free(bulk);
  if (!status) {
    cw_net_conn_hello_done(conn);
    return;
  }
  if (cw_net_conn_is_open(conn)) {
    CW_LOGW("%s refused HELLO: %s", cw_net_conn_name(conn), cw_status_message(status));
    cw_net_conn_close(conn, status);
    return;
  }
  cw_status_free(status);
}

static void cw__link_closed(cw_net_conn_t* conn, cw_status_t reason) {
  CW_LOGI("%s: closed%s%s", cw_net_conn_name(conn), reason ? ": " : "",
          reason ? cw_status_message(reason) : "");
}

static const cw_net_conn_callbacks_t cw__link_callbacks = {NULL, NULL, cw__link_closed};

// Opens the controller's own connection to worker `w` in `session_id` (0: a
// new private session); HELLO goes out at once. Returns it retained, or NULL.
cw_net_conn_t* cw__link_open(cw_controller_t* ctl, cw_ctl_worker_t* w, uint64_t session_id) {
  if (ctl->shutting_down || !w->alive) return NULL;
  char name[CW__MAX_NAME + 48];
  snprintf(name, sizeof(name), "worker %s%s", w->name, session_id ? "" : " (compile)");
  cw_net_conn_t* c = NULL;
  cw_status_t st = cw_net_connect(&ctl->net, w->address, name, &cw__link_callbacks, w,
                                  cw_settings_int(ctl->settings, CW_SET_CONNECT_TIMEOUT_MS), &c);
  if (st) {
    CW_LOGW("cannot connect to worker %s (%s): %s", w->name, w->address, cw_status_message(st));
    cw_status_free(st);
    return NULL;
  }
  cw_net_conn_retain(c);
  Causeway__V1__HelloRequest hello;
  cw_hello_request_fill(&hello, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, ctl->token, session_id,
                        ctl->name);
  cw_net_conn_request(c, CW_MSG_HELLO, &hello.base, NULL, 0, NULL, NULL, cw__hello_reply, NULL);
  return c;
}

void cw__link_drop(cw_net_conn_t** link) {
  if (!*link) return;
  cw_net_conn_t* c = *link;
  *link = NULL;
  cw_net_conn_close(c, NULL);
  cw_net_conn_release(c);
}

static size_t cw__alive_workers(const cw_controller_t* ctl) {
  size_t n = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) n += ctl->workers[i]->alive;
  return n;
}

// --- Sessions and their executables ----------------------------------------------

static cw_ctl_session_t* cw__session_find(cw_controller_t* ctl, uint64_t id) {
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    if (s->id == id && !s->closed) return s;
  }
  return NULL;
}

static cw_ctl_session_t* cw__session_create(cw_controller_t* ctl, uint64_t id) {
  cw_ctl_session_t* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  while (id == 0 || cw__session_find(ctl, id)) {
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

void cw__session_retain(cw_ctl_session_t* s) { s->refs++; }

static void cw__exe_free(cw_ctl_exe_t* e) {
  cw_ctl_health_exe_free(e);
  cw_status_free(e->error);
  free(e->parts);
  free(e->part_devices);
  free(e->devices);
  free(e);
}

void cw__session_release(cw_ctl_session_t* s) {
  if (!s || --s->refs > 0) return;
  while (s->exes) {
    cw_ctl_exe_t* e = s->exes;
    s->exes = e->next;
    cw__exe_free(e);
  }
  cw_ctl_alloc_session_free(s);
  free(s->links);
  cw_ctl_health_session_free(s);
  cw_ctl_ops_session_free(s);
  free(s);
}

// The client's last connection is gone: close the session's connections to
// the workers (each worker frees the session once the client's direct
// connections are gone too).
static void cw__session_close(cw_ctl_session_t* s) {
  if (s->closed) return;
  s->closed = true;
  cw_controller_t* ctl = s->ctl;
  cw_ctl_session_t** pp = &ctl->sessions;
  while (*pp && *pp != s) pp = &(*pp)->next;
  if (*pp) *pp = s->next;
  s->next = NULL;
  CW_LOGI("session %" PRIu64 " closed", s->id);
  for (size_t i = 0; i < s->num_links; ++i) cw__link_drop(&s->links[i]);
  cw__session_release(s);
}

cw_ctl_exe_t* cw__exe_find(cw_ctl_session_t* s, uint64_t id) {
  for (cw_ctl_exe_t* e = s->exes; e; e = e->next) {
    if (e->id == id) return e;
  }
  return NULL;
}

void cw__exe_forget(cw_ctl_session_t* s, uint64_t id) {
  cw_ctl_exe_t** pp = &s->exes;
  while (*pp && (*pp)->id != id) pp = &(*pp)->next;
  if (!*pp) return;
  cw_ctl_exe_t* e = *pp;
  *pp = e->next;
  cw__exe_free(e);
}

// The connection to worker `index` in session `s`, opened on first use.
cw_net_conn_t* cw__session_link(cw_ctl_session_t* s, uint32_t index) {
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
    cw__link_drop(&s->links[index]);
  }
  if (!s->links[index]) {
    s->links[index] = cw__link_open(ctl, ctl->workers[index], s->id);
    if (s->links[index]) cw_ctl_ops_link_opened(s, index, s->links[index]);
  }
  return s->links[index];
}

// --- Events, worker loss -------------------------------------------------------

void cw__broadcast_event(cw_controller_t* ctl, Causeway__V1__ClusterEvent* ev) {
  for (cw_ctl_peer_t* p = ctl->peers; p; p = p->next) {
    if (p->role == CAUSEWAY__V1__ROLE__ROLE_CLIENT && p->session && cw_net_conn_is_open(p->conn)) {
      cw_net_conn_send(p->conn, CW_MSG_EVENT, 0, 0, &ev->base, NULL, 0, NULL, NULL);
    }
  }
}

void cw__worker_lost(cw_ctl_worker_t* w, const char* why) {
  cw_controller_t* ctl = w->ctl;
  if (!w->alive) return;
  w->alive = false;
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
    cw__broadcast_event(ctl, &ev);
  }
  // Closing the connections fails what is pending on them (UNAVAILABLE naming w).
  cw__link_drop(&w->private_conn);
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    if (w->index < s->num_links) cw__link_drop(&s->links[w->index]);
  }
  cw__island_pump(ctl, w->index);
  if (w->island != w->index) cw__island_pump(ctl, w->island);  // its island's launches fail
}

// --- Island queues: LAUNCH, DELETE, EXE_INFO ---------------------------------------

void cw__multi_done(cw_ctl_multi_t* m, cw_controller_t* ctl, cw_status_t st) {
  if (st && !m->first_error) m->first_error = st;
  else cw_status_free(st);
  if (--m->left > 0) return;
  if (m->first_error) {
    cw__reply_error(ctl, m->client, m->type, m->request_id, m->first_error);
  } else {
    Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
    ack.id = m->first_id;
    cw_net_conn_reply(m->client, m->type, m->request_id, &ack.base);
  }
  cw_net_conn_release(m->client);
  free(m);
}

void cw__item_free(cw_ctl_item_t* it) {
  if (it->msg) protobuf_c_message_free_unpacked(it->msg, NULL);
  cw_net_conn_release(it->client);
  cw__session_release(it->session);
  free(it);
}

// Answers an item with an error (takes st) and frees it.
void cw__item_fail(cw_controller_t* ctl, cw_ctl_item_t* it, cw_status_t st) {
  if (it->multi) {
    cw__multi_done(it->multi, ctl, st);
  } else {
    cw__reply_error(ctl, it->client, it->type, it->request_id, st);
  }
  cw__item_free(it);
}

static void cw__relay_answer(void* user, cw_net_conn_t* conn, cw_status_t status,
                             const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_item_t* it = user;
  cw_controller_t* ctl = it->session->ctl;
  free(bulk);
  if (it->type == CW_MSG_LAUNCH) cw_ctl_metrics_on_launch_reply(ctl, it);
  cw_ctl_worker_t* w = it->worker < ctl->num_workers ? ctl->workers[it->worker] : NULL;
  if (status) {
    if (w) status = cw__worker_error(w, conn, status);
    cw__item_fail(ctl, it, status);
    return;
  }
  if (it->multi) {
    cw__multi_done(it->multi, ctl, cw_ok_status());
  } else if (it->type == CW_MSG_EXE_INFO && w) {
    // Say where it runs, in global device ids.
    Causeway__V1__ExecutableInfo info = *(const Causeway__V1__ExecutableInfo*)reply;
    int32_t* devs = calloc(info.n_devices + 1, sizeof(int32_t));
    if (devs) {
      for (size_t i = 0; i < info.n_devices; ++i) {
        devs[i] = cw_ctl_alloc_session_id(ctl, it->session, w->index, (uint32_t)info.devices[i]);
      }
      info.devices = devs;
    }
    cw_ctl_exe_t* e = cw__exe_find(it->session, cw__item_exe_id(it));
    if (e && e->num_parts) {  // every worker of the island runs a part
      info.devices = e->devices;
      info.n_devices = e->num_devices;
    }
    info.island = w->island;
    info.worker_index = w->island;
    cw_net_conn_reply(it->client, it->type, it->request_id, &info.base);
    free(devs);
  } else {
    cw_net_conn_reply(it->client, it->type, it->request_id, reply);
  }
  cw__item_free(it);
}

// The executable an item waits for: its id, or 0 when none.
uint64_t cw__item_exe_id(const cw_ctl_item_t* it) {
  switch (it->type) {
    case CW_MSG_LAUNCH:
      return ((const Causeway__V1__LaunchRequest*)it->msg)->exe_id;
    case CW_MSG_EXE_INFO:
      return ((const Causeway__V1__ExeInfoRequest*)it->msg)->exe_id;
    default:
      return 0;
  }
}

void cw__relay_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                     const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_item_t* it = user;
  cw_controller_t* ctl = it->session->ctl;
  uint32_t island = it->worker < ctl->num_workers ? ctl->workers[it->worker]->island : it->worker;
  bool stamped = cw_ctl_sched_done(ctl, it);
  cw__relay_answer(user, conn, status, reply, bulk, bulk_len);
  if (stamped) cw__island_pump(ctl, island);  // room for the next stamped launch
}

// Island queues and gang order live in cw_ctl_sched.c.
void cw__island_pump(cw_controller_t* ctl, uint32_t index) {
  cw_ctl_sched_pump(ctl, index);
}

static void cw__island_push(cw_controller_t* ctl, cw_ctl_item_t* it) {
  cw_status_t stale = cw_ctl_health_item_check(ctl, it);
  if (stale) {
    cw__item_fail(ctl, it, stale);
    return;
  }
  cw_ctl_sched_push(ctl, it);
}

cw_ctl_item_t* cw__item_new(uint16_t type, cw_net_conn_t* client, uint64_t request_id,
                            cw_ctl_session_t* s, ProtobufCMessage* msg, uint32_t worker) {
  cw_ctl_item_t* it = msg ? calloc(1, sizeof(*it)) : NULL;
  if (!it) {
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    return NULL;
  }
  it->type = type;
  it->client = client;
  cw_net_conn_retain(client);
  it->request_id = request_id;
  it->session = s;
  cw__session_retain(s);
  it->msg = msg;
  it->worker = worker;
  it->received_ns = cw_time_now_ns();
  return it;
}

static cw_ctl_item_t* cw__item_create(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                                      ProtobufCMessage* msg, uint32_t worker) {
  return cw__item_new(h->type, p->conn, h->request_id, p->session, msg, worker);
}

// LAUNCH and EXE_INFO: relayed to the worker that holds the executable.
static void cw__handle_exe_request(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                                   ProtobufCMessage* msg, uint64_t exe_id) {
  cw_controller_t* ctl = p->ctl;
  cw_ctl_exe_t* e = cw__exe_find(p->session, exe_id);
  if (!e) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw__reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_NOT_FOUND, "executable %" PRIu64 " not found", exe_id));
    return;
  }
  cw_ctl_item_t* it = cw__item_create(p, h, msg, e->worker);
  if (!it) {
    cw__reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  cw__island_push(ctl, it);
}

static void cw__handle_delete(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                              ProtobufCMessage* msg) {
  cw_controller_t* ctl = p->ctl;
  const Causeway__V1__DeleteRequest* r = (const Causeway__V1__DeleteRequest*)msg;
  cw_ctl_multi_t* m = calloc(1, sizeof(*m));
  bool* seen = calloc(ctl->num_workers + 1, sizeof(bool));
  uint64_t* ids = calloc(r->n_ids + 1, sizeof(uint64_t));
  if (!m || !seen || !ids) {
    free(m);
    free(seen);
    free(ids);
    protobuf_c_message_free_unpacked(msg, NULL);
    cw__reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  m->type = CW_MSG_DELETE;
  m->client = p->conn;
  cw_net_conn_retain(p->conn);
  m->request_id = h->request_id;
  m->first_id = r->n_ids ? r->ids[0] : 0;
  m->left = 1;  // held until every part is queued
  size_t unknown = 0;
  uint64_t first_unknown = 0;
  for (size_t i = 0; i < r->n_ids; ++i) {
    cw_ctl_exe_t* e = cw__exe_find(p->session, r->ids[i]);
    if (!e) {
      if (!unknown++) first_unknown = r->ids[i];
      continue;
    }
    seen[e->worker] = true;
  }
  for (uint32_t wi = 0; wi < ctl->num_workers; ++wi) {
    if (!seen[wi]) continue;
    Causeway__V1__DeleteRequest* part = malloc(sizeof(*part));
    uint64_t* part_ids = malloc((r->n_ids + 1) * sizeof(uint64_t));
    if (!part || !part_ids) {
      free(part);
      free(part_ids);
      if (!m->first_error) m->first_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
      continue;
    }
    causeway__v1__delete_request__init(part);
    size_t n = 0;
    for (size_t i = 0; i < r->n_ids; ++i) {
      cw_ctl_exe_t* e = cw__exe_find(p->session, r->ids[i]);
      if (e && e->worker == wi) part_ids[n++] = r->ids[i];
    }
    part->ids = part_ids;
    part->n_ids = n;
    part->seq = r->seq;  // per worker; meaningful when one worker holds them all
    // A hand-built message: a copy, so the item owns a normal one.
    ProtobufCMessage* owned = cw_ctl_msg_copy(&part->base);
    free(part_ids);
    free(part);
    cw_ctl_item_t* it = owned ? cw__item_create(p, h, owned, wi) : NULL;
    if (!it) {
      if (!m->first_error) m->first_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
      continue;
    }
    it->multi = m;
    m->left++;
    cw__island_push(ctl, it);
  }
  if (unknown && !m->first_error) {
    m->first_error = cw_make_status(CW_NOT_FOUND, "%zu unknown executable ids not deleted "
                                    "(first %" PRIu64 ")", unknown, first_unknown);
  }
  free(seen);
  free(ids);
  protobuf_c_message_free_unpacked(msg, NULL);
  cw__multi_done(m, ctl, cw_ok_status());
}

// --- COMPILE -----------------------------------------------------------------

static void cw__compile_free(cw_ctl_compile_t* cp) {
  cw_net_conn_release(cp->client);
  cw__session_release(cp->session);
  free(cp->options);
  free(cp->devices);
  free(cp->parts);
  free(cp->part_devices);
  if (cp->load_reply) protobuf_c_message_free_unpacked(&cp->load_reply->base, NULL);
  free(cp);
}

// The session's record of this compile's executable, if it is still the same one.
static cw_ctl_exe_t* cw__compile_exe(cw_ctl_compile_t* cp) {
  cw_ctl_exe_t* e = cw__exe_find(cp->session, cp->exe_id);
  return (e && e->serial == cp->exe_serial) ? e : NULL;
}

// Fails a client compile (takes st): the executable stays in error.
static void cw__compile_fail(cw_ctl_compile_t* cp, cw_status_t st) {
  cw_controller_t* ctl = cp->ctl;
  if (cw_ctl_island_compile_done(cp, &st, NULL)) {
    cw__compile_free(cp);
    return;
  }
  cw_ctl_exe_t* e = cw__compile_exe(cp);
  if (e) {
    e->state = CW__EXE_FAILED;
    e->error = cw_status_clone(st);
  }
  cw__reply_error(ctl, cp->client, CW_MSG_COMPILE, cp->request_id, st);
  uint32_t worker = cp->worker;
  cw__compile_free(cp);
  cw__island_pump(ctl, worker);
}

void cw__compile_answer(cw_controller_t* ctl, cw_net_conn_t* client, uint64_t request_id,
                        cw_ctl_exe_t* e, Causeway__V1__ExecutableInfo* info, uint32_t num_outputs,
                        uint32_t num_devices, const char* name, bool cache_hit, int64_t start_ms,
                        const char* where) {
  info->cache_hit = cache_hit;
  Causeway__V1__CompileReply rep = CAUSEWAY__V1__COMPILE_REPLY__INIT;
  rep.exe_id = info->exe_id;
  rep.num_outputs = num_outputs;
  rep.num_devices = num_devices;
  rep.name = (char*)name;
  rep.info = info;
  if (e) e->state = CW__EXE_READY;
  ctl->compiles++;
  cw_ctl_metrics_on_compile(ctl, cw_time_now_ms() - start_ms, cache_hit);
  CW_LOGI("compile of executable %" PRIu64 " for %s: %s, %" PRId64 " ms", info->exe_id, where,
          cache_hit ? "cache hit" : "compiled", cw_time_now_ms() - start_ms);
  cw_net_conn_reply(client, CW_MSG_COMPILE, request_id, &rep.base);
}

static void cw__compile_exe_info(void* user, cw_net_conn_t* conn, cw_status_t status,
                                 const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_compile_t* cp = user;
  cw_controller_t* ctl = cp->ctl;
  cw_ctl_worker_t* w = ctl->workers[cp->worker];
  free(bulk);
  if (status) {
    cw__compile_fail(cp, cw_status_annotate(cw__worker_error(w, conn, status), "EXE_INFO"));
    return;
  }
  if (cw_ctl_island_compile_done(cp, NULL, (const Causeway__V1__ExecutableInfo*)reply)) {
    cw__compile_free(cp);
    return;
  }
  Causeway__V1__ExecutableInfo info = *(const Causeway__V1__ExecutableInfo*)reply;
  int32_t* devs = calloc(info.n_devices + cp->num_devices + 1, sizeof(int32_t));
  if (devs) {
    // Global ids: from the worker's addressable devices, else the assignment.
    for (size_t i = 0; i < info.n_devices; ++i) {
      devs[i] = cw_ctl_alloc_session_id(ctl, cp->session, w->index, (uint32_t)info.devices[i]);
    }
    if (!info.n_devices) {
      memcpy(devs, cp->devices, cp->num_devices * sizeof(int32_t));
      info.n_devices = cp->num_devices;
    }
    info.devices = devs;
  }
  info.exe_id = cp->exe_id;
  info.island = w->island;
  info.worker_index = w->index;
  const Causeway__V1__CompileReply* lr = cp->load_reply;
  char where[CW__MAX_NAME + 16];
  snprintf(where, sizeof(where), "worker %s", w->name);
  cw__compile_answer(ctl, cp->client, cp->request_id, cw__compile_exe(cp), &info,
                     lr ? lr->num_outputs : info.num_outputs,
                     lr ? lr->num_devices : (uint32_t)info.n_devices,
                     lr && lr->name ? lr->name : info.name, cp->cache_hit, cp->start_ms, where);
  free(devs);
  uint32_t worker = cp->worker;
  cw__compile_free(cp);
  cw__island_pump(ctl, worker);
}

static void cw__compile_loaded(void* user, cw_net_conn_t* conn, cw_status_t status,
                               const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_compile_t* cp = user;
  cw_ctl_worker_t* w = cp->ctl->workers[cp->worker];
  free(bulk);
  if (status) {
    cw__compile_fail(cp, cw_status_annotate(cw__worker_error(w, conn, status), "LOAD"));
    return;
  }
  // Keep what LOAD said; EXE_INFO follows on the same connection.
  cp->load_reply = (Causeway__V1__CompileReply*)cw_ctl_msg_copy(reply);
  Causeway__V1__ExeInfoRequest req = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  req.exe_id = cp->exe_id;
  cw_net_conn_request(conn, CW_MSG_EXE_INFO, &req.base, NULL, 0, NULL, NULL,
                      cw__compile_exe_info, cp);
}

static void cw__entry_release(void* user) {
  cw_compile_cache_entry_release((cw_compile_cache_entry_t*)user);
}

// LOADs the serialized executable into the client's session on the island's
// worker. Borrows `entry` (the write retains it).
static void cw__compile_load(cw_ctl_compile_t* cp, cw_compile_cache_entry_t* entry) {
  cw_controller_t* ctl = cp->ctl;
  cw_ctl_worker_t* w = ctl->workers[cp->worker];
  if (cp->session->closed) {
    cw__compile_fail(cp, cw_make_status(CW_CANCELLED, "session closed"));
    return;
  }
  cw_net_conn_t* link = cw__session_link(cp->session, cp->worker);
  if (!link || !cw_net_conn_is_open(link)) {
    cw__compile_fail(cp, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: no "
                                        "connection", w->name, w->address));
    return;
  }
  // A part of an island's program is not reloaded alone (cw_ctl_island.c).
  if (!cp->gang) cw_ctl_health_exe_keep(cw__compile_exe(cp), entry, cp->options, cp->options_size);
  Causeway__V1__LoadRequest req = CAUSEWAY__V1__LOAD_REQUEST__INIT;
  req.exe_id = cp->exe_id;
  req.compile_options.data = cp->options;
  req.compile_options.len = cp->options_size;
  cw_compile_cache_entry_retain(entry);
  cw_net_conn_request(link, CW_MSG_LOAD, &req.base, entry->bytes, entry->size, cw__entry_release,
                      entry, cw__compile_loaded, cp);
}

void cw__inflight_finish(cw_ctl_inflight_t* f, cw_compile_cache_entry_t* entry,
                         cw_status_t st) {
  cw_controller_t* ctl = f->ctl;
  cw_ctl_inflight_t** pp = &ctl->inflight;
  while (*pp && *pp != f) pp = &(*pp)->next;
  if (*pp) *pp = f->next;
  while (f->waiters) {
    cw_ctl_compile_t* cp = f->waiters;
    f->waiters = cp->next;
    cp->next = NULL;
    if (st) cw__compile_fail(cp, cw_status_clone(st));
    else cw__compile_load(cp, entry);
  }
  cw_status_free(st);
  cw_compile_cache_entry_release(entry);
  free(f->key);
  free(f);
}

static void cw__inflight_serialized(void* user, cw_net_conn_t* conn, cw_status_t status,
                                    const ProtobufCMessage* reply, uint8_t* bulk,
                                    uint64_t bulk_len) {
  cw_ctl_inflight_t* f = user;
  cw_controller_t* ctl = f->ctl;
  cw_ctl_worker_t* w = ctl->workers[f->worker];
  // The private copy is no longer needed either way.
  if (cw_net_conn_is_open(conn)) {
    Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    del.ids = &f->private_exe_id;
    del.n_ids = 1;
    cw_net_conn_request(conn, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, cw__ignore_reply,
                        NULL);
  }
  if (status) {
    free(bulk);
    cw__inflight_finish(f, NULL, cw_status_annotate(cw__worker_error(w, conn, status),
                                                    "SERIALIZE"));
    return;
  }
  if (!bulk) bulk = malloc(1);
  cw_compile_cache_entry_t* e =
      bulk ? cw_compile_cache_insert(ctl->cache, f->key, f->key_size, bulk, (size_t)bulk_len)
           : NULL;
  if (!e) {
    cw__inflight_finish(f, NULL, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a "
                                                "serialized executable"));
    return;
  }
  cw_ctl_disk_store(ctl, f->key, f->key_size, e);
  cw__inflight_finish(f, e, cw_ok_status());
}

static void cw__inflight_compiled(void* user, cw_net_conn_t* conn, cw_status_t status,
                                  const ProtobufCMessage* reply, uint8_t* bulk,
                                  uint64_t bulk_len) {
  cw_ctl_inflight_t* f = user;
  cw_ctl_worker_t* w = f->ctl->workers[f->worker];
  free(bulk);
  if (status) {
    // XLA's message, unchanged but for where it came from.
    cw__inflight_finish(f, NULL, cw__worker_error(w, conn, status));
    return;
  }
  Causeway__V1__SerializeRequest req = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
  req.exe_id = f->private_exe_id;
  cw_net_conn_request(conn, CW_MSG_SERIALIZE, &req.base, NULL, 0, NULL, NULL,
                      cw__inflight_serialized, f);
}

cw_net_conn_t* cw__private_link(cw_controller_t* ctl, cw_ctl_worker_t* w) {
  if (w->private_conn && !cw_net_conn_is_open(w->private_conn)) cw__link_drop(&w->private_conn);
  if (!w->private_conn) w->private_conn = cw__link_open(ctl, w, 0);
  return w->private_conn;
}

void cw__inflight_send_compile(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                               size_t code_size, const uint8_t* options, size_t options_size) {
  cw_controller_t* ctl = f->ctl;
  cw_ctl_worker_t* w = ctl->workers[f->worker];
  if (!cw__private_link(ctl, w)) {
    cw__inflight_finish(f, NULL, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable "
                                                "for compiling", w->name, w->address));
    return;
  }
  f->private_exe_id = ++ctl->next_private_exe_id;
  ctl->compiles_sent++;
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = f->private_exe_id;
  req.format = (char*)format;
  req.code.data = (uint8_t*)code;
  req.code.len = code_size;
  req.compile_options.data = (uint8_t*)options;
  req.compile_options.len = options_size;
  cw_net_conn_request(w->private_conn, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, NULL,
                      cw__inflight_compiled, f);
}

// Maps the request's global device assignment onto one island and rewrites
// it to worker-local ids. Fills cp->worker, options and devices.
static cw_status_t cw__compile_place(cw_controller_t* ctl, cw_ctl_session_t* s,
                                     const Causeway__V1__CompileRequest* r,
                                     cw_ctl_compile_t* cp) {
  int64_t total = cw_ctl_alloc_num_ids(ctl, s);  // the session's device ids
  cw_xla_options_info_t* info = malloc(sizeof(*info));
  if (!info) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t st = cw_ok_status();
  if (r->compile_options.len) {
    st = cw_xla_options_check(r->compile_options.data, r->compile_options.len, total, info);
    if (st) {
      free(info);
      return cw_status_annotate(st, "compile options");
    }
  } else {
    info->num_assigned = 0;
  }
  if (info->num_assigned == 0) {
    // No assignment: one device, the session's first (or the first live worker's).
    info->num_assigned = 1;
    info->assigned[0] = s->allocated ? 0 : -1;
    for (size_t i = 0; !s->allocated && i < ctl->num_workers; ++i) {
      if (ctl->workers[i]->alive && cw_ctl_ops_worker_takes_work(ctl->workers[i])) {
        info->assigned[0] = ctl->workers[i]->first_device;
        break;
      }
    }
    if (info->assigned[0] < 0) {
      free(info);
      return cw_make_status(CW_UNAVAILABLE, "no live worker to compile for");
    }
  }
  // Which islands do the devices span?
  uint32_t local = 0;
  cw_ctl_worker_t* first = cw_ctl_alloc_resolve(ctl, s, info->assigned[0], &local);
  bool spans = false;
  for (size_t i = 0; i < info->num_assigned; ++i) {
    cw_ctl_worker_t* w = cw_ctl_alloc_resolve(ctl, s, info->assigned[i], &local);
    if (!w) {
      free(info);
      return cw_make_status(CW_INVALID_ARGUMENT, "device %" PRId64 " does not exist",
                            info->assigned[i]);
    }
    if (w != first) spans = true;
  }
  if (spans) {
    bool one = false;  // all on one island of several workers: a part on each
    st = cw_ctl_island_place(ctl, s, info->assigned, info->num_assigned, &one, &cp->parts,
                             &cp->part_devices, &cp->num_parts);
    if (st) {
      free(info);
      return st;
    }
    if (one) {
      spans = false;
      first = ctl->workers[first->island];
    }
  }
  if (spans) {
    char text[1024];
    size_t used = 0;
    size_t islands = 0;
    for (size_t wi = 0; wi < ctl->num_workers && used < sizeof(text) - 1; ++wi) {
      cw_ctl_worker_t* w = ctl->workers[wi];
      int32_t lo = INT32_MAX, hi = -1;
      for (size_t i = 0; i < info->num_assigned; ++i) {
        if (cw_ctl_alloc_resolve(ctl, s, info->assigned[i], &local) != w) continue;
        if (info->assigned[i] < lo) lo = (int32_t)info->assigned[i];
        if (info->assigned[i] > hi) hi = (int32_t)info->assigned[i];
      }
      if (hi < 0) continue;
      int n = snprintf(text + used, sizeof(text) - used, "%s%u (%s: devices %d-%d)",
                       islands ? " and " : "", w->index, w->name, lo, hi);
      if (n > 0) used += (size_t)n < sizeof(text) - used ? (size_t)n : sizeof(text) - used - 1;
      islands++;
    }
    free(info);
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "program spans islands %s; a program may only use devices of one "
                          "island: move its inputs with jax.device_put to one island's devices, "
                          "or use a mesh within one island", text);
  }
  if (!first->alive) {
    free(info);
    return cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable", first->name,
                          first->address);
  }
  if (!cw_ctl_ops_worker_takes_work(first)) {
    free(info);
    return cw_make_status(CW_FAILED_PRECONDITION, "worker %s is draining", first->name);
  }
  cp->worker = first->index;
  cp->devices = calloc(info->num_assigned, sizeof(int32_t));
  int64_t* map = calloc((size_t)total, sizeof(int64_t));
  if (!cp->devices || !map) {
    free(map);
    free(info);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  cp->num_devices = info->num_assigned;
  for (size_t i = 0; i < info->num_assigned; ++i) cp->devices[i] = (int32_t)info->assigned[i];
  for (int64_t g = 0; g < total; ++g) {
    cw_ctl_worker_t* w = cw_ctl_alloc_resolve(ctl, s, g, &local);
    map[g] = w ? (int64_t)local : 0;
  }
  if (r->compile_options.len) {
    st = cw_xla_options_rewrite_devices(r->compile_options.data, r->compile_options.len, map,
                                        (size_t)total, &cp->options, &cp->options_size);
  }
  free(map);
  free(info);
  return st;
}

// The compile service for one worker: memory cache, a compilation already
// running, the disk cache, then the worker. The executable's record exists.
static void cw__compile_start(cw_ctl_compile_t* cp, void* user) {
  const Causeway__V1__CompileRequest* r = user;
  cw_controller_t* ctl = cp->ctl;
  // The cache key: program, format, rewritten options, the worker's plugin
  // (platform name and version, PJRT API version).
  uint8_t* key = NULL;
  size_t key_size = 0;
  const Causeway__V1__Inventory* inv = ctl->workers[cp->worker]->reg->inventory;
  const char* format = (r->format && r->format[0]) ? r->format : "mlir";
  char api[32];
  snprintf(api, sizeof(api), "%u.%u", inv->pjrt_major, inv->pjrt_minor);
  // Options as a key: the same options always give the same bytes.
  uint8_t* canon = cw_compile_disk_canonical_options(cp->options, cp->options_size);
  const void* parts[6] = {r->code.data, format, canon ? canon : cp->options,
                          inv->platform_name, inv->platform_version, api};
  size_t sizes[6] = {r->code.len, strlen(format), cp->options_size,
                     strlen(inv->platform_name), strlen(inv->platform_version), strlen(api)};
  cw_status_t st = cw_compile_cache_key_create(parts, sizes, 6, &key, &key_size);
  free(canon);
  if (st) {
    cw__compile_fail(cp, cw_status_annotate(st, "COMPILE"));
    return;
  }
  cw_compile_cache_entry_t* hit = cw_compile_cache_lookup(ctl->cache, key, key_size);
  if (hit) {
    ctl->cache_hits++;
    cp->cache_hit = true;
    free(key);
    cw__compile_load(cp, hit);
    cw_compile_cache_entry_release(hit);
    return;
  }
  // Identical compilation already running: wait for it.
  for (cw_ctl_inflight_t* f = ctl->inflight; f; f = f->next) {
    if (f->key_size == key_size && !memcmp(f->key, key, key_size)) {
      ctl->cache_hits++;
      cp->cache_hit = true;
      cp->next = f->waiters;
      f->waiters = cp;
      free(key);
      return;
    }
  }
  ctl->cache_misses++;
  cw_ctl_inflight_t* f = calloc(1, sizeof(*f));
  if (!f) {
    free(key);
    cw__compile_fail(cp, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  f->ctl = ctl;
  f->key = key;
  f->key_size = key_size;
  f->worker = cp->worker;
  f->waiters = cp;
  f->next = ctl->inflight;
  ctl->inflight = f;
  // The disk next (asynchronously), then the worker.
  const char* fmt = r->format ? r->format : "";
  if (cw_ctl_disk_lookup(ctl, f, fmt, r->code.data, r->code.len, cp->options,
                         cp->options_size)) {
    return;
  }
  cw__inflight_send_compile(f, fmt, r->code.data, r->code.len, cp->options, cp->options_size);
}

static void cw__handle_compile(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                               const Causeway__V1__CompileRequest* r) {
  cw_controller_t* ctl = p->ctl;
  cw_ctl_session_t* s = p->session;
  cw_status_t st = cw_ok_status();
  if (!r->exe_id) st = cw_make_status(CW_INVALID_ARGUMENT, "COMPILE needs a non-zero exe_id");
  else if (cw__exe_find(s, r->exe_id)) {
    st = cw_make_status(CW_ALREADY_EXISTS, "executable %" PRIu64 " already exists", r->exe_id);
  }
  cw_ctl_compile_t* cp = st ? NULL : calloc(1, sizeof(*cp));
  if (!st && !cp) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    cp->ctl = ctl;
    cp->client = p->conn;
    cw_net_conn_retain(p->conn);
    cp->request_id = h->request_id;
    cp->session = s;
    cw__session_retain(s);
    cp->exe_id = r->exe_id;
    cp->start_ms = cw_time_now_ms();
    st = cw__compile_place(ctl, s, r, cp);
  }
  cw_ctl_exe_t* e = NULL;
  if (!st) {
    e = calloc(1, sizeof(*e));
    if (!e) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st && cp->num_parts) {
    e->devices = calloc(cp->num_devices, sizeof(int32_t));
    if (!e->devices) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    free(e);
    if (cp) cw__compile_free(cp);
    cw__reply_error(ctl, p->conn, h->type, h->request_id, cw_status_annotate(st, "COMPILE"));
    return;
  }
  e->id = r->exe_id;
  e->serial = ++ctl->next_exe_serial;
  e->worker = cp->worker;
  e->state = CW__EXE_LOADING;
  e->next = s->exes;
  s->exes = e;
  cp->exe_serial = e->serial;
  if (!cp->num_parts) {
    cw__compile_start(cp, (void*)r);
    return;
  }
  // An island of several workers: a part on each; the parts share one
  // cache key, so the program compiles once and loads everywhere.
  memcpy(e->devices, cp->devices, cp->num_devices * sizeof(int32_t));
  e->num_devices = cp->num_devices;
  e->parts = cp->parts;
  e->part_devices = cp->part_devices;
  e->num_parts = cp->num_parts;
  cp->parts = cp->part_devices = NULL;
  cw_ctl_island_compile(cp, e->parts, e->part_devices, e->num_parts, cw__compile_start,
                        (void*)r);
  cw__compile_free(cp);
}

// --- OPEN_SESSION ------------------------------------------------------------------

void cw__reply_session_info(cw_controller_t* ctl, cw_ctl_peer_t* p, uint64_t request_id) {
  if (cw_ctl_alloc_reply_info(ctl, p, request_id)) return;  // an allocated session
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
    cw__reply_error(ctl, p->conn, CW_MSG_OPEN_SESSION, request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
  } else {
    size_t wn = 0, dn = 0;
    for (size_t i = 0; i < ctl->num_workers; ++i) {
      cw_ctl_worker_t* w = ctl->workers[i];
      if (!w->alive || !cw_ctl_ops_worker_takes_work(w)) continue;  // draining: none new
      const Causeway__V1__Inventory* inv = w->reg->inventory;
      if (!wn) cw_ctl_info_platform(&info, inv);
      cw_ctl_worker_info_fill(&wis[wn], w, s);
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
    info.workers = wptrs;
    info.n_workers = wn;
    info.devices = gptrs;
    info.n_devices = dn;
    cw_ctl_health_session_joined(s);
    cw_ctl_ops_session_devices(s, gds, dn);
    cw_net_conn_reply(p->conn, CW_MSG_OPEN_SESSION, request_id, &info.base);
    // Relay connections, one per worker, in the client's session.
    for (size_t i = 0; i < ctl->num_workers; ++i) {
      if (ctl->workers[i]->alive) (void)cw__session_link(s, (uint32_t)i);
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

// Answers the waits that can be answered: enough workers, deadline passed,
// or the client gone.
void cw__open_waits_check(cw_controller_t* ctl, bool expire) {
  int64_t now = cw_time_now_ms();
  cw_ctl_open_wait_t** pp = &ctl->open_waits;
  while (*pp) {
    cw_ctl_open_wait_t* ow = *pp;
    size_t alive = cw__alive_workers(ctl);
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
      cw__reply_error(ctl, ow->conn, CW_MSG_OPEN_SESSION, ow->request_id,
                      cw_make_status(CW_DEADLINE_EXCEEDED, "waited for %u workers; %zu "
                                     "registered%s%s", ow->min_workers, alive,
                                     alive ? ": " : "", names));
    }
    cw__open_wait_free(ow);
  }
  cw_ctl_alloc_check(ctl, expire);  // capacity may have freed: the device queue
  if (!ctl->open_waits && !ctl->alloc_queue && !ctl->shutting_down) {
    uv_timer_stop(&ctl->open_tick);
  }
}

void cw__open_tick(uv_timer_t* t) { cw__open_waits_check(t->data, true); }

static void cw__handle_open_session(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                                    const Causeway__V1__OpenSessionRequest* r) {
  cw_controller_t* ctl = p->ctl;
  if (r->min_workers > CW__MAX_WORKERS) {
    cw__reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_INVALID_ARGUMENT, "min_workers %u is above %d",
                                   r->min_workers, CW__MAX_WORKERS));
    return;
  }
  cw_ctl_open_wait_t* ow = calloc(1, sizeof(*ow));
  if (!ow) {
    cw__reply_error(ctl, p->conn, h->type, h->request_id,
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
    ow->req = (Causeway__V1__OpenSessionRequest*)cw_ctl_msg_copy(&r->base);
    if (!ow->req) {
      cw__open_wait_free(ow);
      cw__reply_error(ctl, p->conn, h->type, h->request_id,
                      cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
      return;
    }
  }
  uint32_t wait = r->wait_ms < CW__MAX_WAIT_MS ? r->wait_ms : CW__MAX_WAIT_MS;
  ow->deadline_ms = cw_time_now_ms() + wait;
  ow->next = ctl->open_waits;
  ctl->open_waits = ow;
  if (!uv_is_active((uv_handle_t*)&ctl->open_tick)) {
    uv_timer_start(&ctl->open_tick, cw__open_tick, CW__OPEN_TICK_MS, CW__OPEN_TICK_MS);
  }
  cw__open_waits_check(ctl, wait == 0);
}

// --- REGISTER ----------------------------------------------------------------------

bool cw__printable(const char* s, size_t max) {
  size_t n = 0;
  for (; s && *s; ++s, ++n) {
    if (n >= max || *s < 0x20 || *s >= 0x7f) return false;
  }
  return n > 0;
}

static void cw__handle_register(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                                ProtobufCMessage** msg) {
  cw_controller_t* ctl = p->ctl;
  Causeway__V1__RegisterRequest* r = (Causeway__V1__RegisterRequest*)*msg;
  cw_status_t st = cw_ok_status();
  if (p->role != CAUSEWAY__V1__ROLE__ROLE_WORKER) {
    st = cw_make_status(CW_PERMISSION_DENIED, "REGISTER is for workers (HELLO role WORKER)");
  } else if (p->worker) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "this connection already registered");
  } else if (!cw__printable(r->worker_name, CW__MAX_NAME - 1)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "worker_name must be 1..%d printable characters",
                        CW__MAX_NAME - 1);
  } else if (!cw__printable(r->address, CW__MAX_ADDRESS)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "address must be 1..%d printable characters",
                        CW__MAX_ADDRESS);
  } else if (!r->inventory || r->inventory->n_devices == 0 ||
             r->inventory->n_devices > CW_XLA_MAX_ASSIGNED_DEVICES) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "inventory must list 1..%d devices",
                        CW_XLA_MAX_ASSIGNED_DEVICES);
  } else if (!r->inventory->platform_name || !r->inventory->platform_version) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "inventory lacks the platform");
  } else if (ctl->num_workers >= CW__MAX_WORKERS ||
             (int64_t)ctl->next_device + (int64_t)r->inventory->n_devices > INT32_MAX / 2) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "too many workers or devices");
  }
  for (size_t d = 0; !st && d < (r->inventory ? r->inventory->n_devices : 0); ++d) {
    if (!r->inventory->devices[d]) st = cw_make_status(CW_INVALID_ARGUMENT, "empty device");
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
    cw__reply_error(ctl, p->conn, h->type, h->request_id, cw_status_annotate(st, "REGISTER"));
    return;
  }
  w->ctl = ctl;
  w->index = (uint32_t)ctl->num_workers;
  snprintf(w->name, sizeof(w->name), "%s", r->worker_name);
  snprintf(w->address, sizeof(w->address), "%s", r->address);
  w->alive = true;
  w->first_device = ctl->next_device;
  w->num_devices = (uint32_t)r->inventory->n_devices;
  w->reg = r;
  *msg = NULL;
  ctl->workers[ctl->num_workers++] = w;
  cw_ctl_island_join(ctl, w, r);
  ctl->next_device += (int32_t)w->num_devices;
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
  cw__broadcast_event(ctl, &ev);
  cw__open_waits_check(ctl, false);
}

// --- HELLO, STATS ---------------------------------------------------------------------

static void cw__handle_hello(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                             const Causeway__V1__HelloRequest* r) {
  cw_controller_t* ctl = p->ctl;
  // Credentials first: an unauthenticated peer learns nothing else.
  cw_status_t auth = cw_net_hello_authenticate(ctl->token, r->token.data, r->token.len,
                                               cw_net_conn_name(p->conn), r->role);
  if (auth) {
    cw_net_conn_violation(p->conn, h->type, h->request_id, auth);
    return;
  }
  if (r->min_version > r->max_version || r->max_version < CW_PROTOCOL_MIN_VERSION ||
      r->min_version > CW_PROTOCOL_VERSION) {
    cw_net_conn_violation(p->conn, h->type, h->request_id,
                          cw_make_status(CW_UNIMPLEMENTED, "protocol versions %u..%u not "
                                         "supported (controller speaks %u..%u)", r->min_version,
                                         r->max_version, CW_PROTOCOL_MIN_VERSION,
                                         CW_PROTOCOL_VERSION));
    return;
  }
  if (r->role != CAUSEWAY__V1__ROLE__ROLE_CLIENT && r->role != CAUSEWAY__V1__ROLE__ROLE_WORKER) {
    cw_net_conn_violation(p->conn, h->type, h->request_id,
                          cw_make_status(CW_PERMISSION_DENIED, "the controller accepts HELLO "
                                         "role CLIENT or WORKER, not %d", r->role));
    return;
  }
  p->role = r->role;
  if (r->peer_name && r->peer_name[0]) cw_net_conn_set_name(p->conn, r->peer_name);
  uint64_t sid = 0;
  if (r->role == CAUSEWAY__V1__ROLE__ROLE_CLIENT) {
    cw_ctl_session_t* s = r->session_id ? cw__session_find(ctl, r->session_id) : NULL;
    if (!s) s = cw__session_create(ctl, r->session_id);
    if (!s) {
      cw_net_conn_violation(p->conn, h->type, h->request_id,
                            cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a session"));
      return;
    }
    cw__session_retain(s);
    s->clients++;
    p->session = s;
    sid = s->id;
  }
  p->hello_done = true;
  cw_net_conn_hello_done(p->conn);
  Causeway__V1__HelloReply rep = CAUSEWAY__V1__HELLO_REPLY__INIT;
  rep.version = CW_PROTOCOL_VERSION;
  rep.session_id = sid;
  rep.worker_name = ctl->name;
  rep.max_payload = ctl->net.limits.max_payload;
  rep.max_bulk = ctl->net.limits.max_bulk;
  CW_LOGI("%s: HELLO role %d session %" PRIu64, cw_net_conn_name(p->conn), r->role, sid);
  cw_net_conn_reply(p->conn, h->type, h->request_id, &rep.base);
}

static void cw__handle_stats(cw_ctl_peer_t* p, const cw_frame_header_t* h) {
  cw_controller_t* ctl = p->ctl;
  Causeway__V1__Stats st = CAUSEWAY__V1__STATS__INIT;
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    st.sessions++;
    for (cw_ctl_exe_t* e = s->exes; e; e = e->next) st.executables++;
  }
  st.launches = ctl->launches_relayed;
  st.connections = ctl->net.inbound_connections;
  st.errors = ctl->errors;
  st.workers = cw__alive_workers(ctl);
  st.workers_dead = ctl->num_workers - st.workers;
  st.alloc_queue = cw_ctl_alloc_queue_length(ctl);
  st.compiles = ctl->compiles;
  st.cache_hits = ctl->cache_hits;
  st.cache_misses = ctl->cache_misses;
  st.cache_bytes = cw_compile_cache_bytes(ctl->cache);
  cw_ctl_disk_stats(ctl, &st);
  cw_ctl_health_stats(ctl, &st);
  void* stamps = cw_ctl_sched_stats(ctl, &st);  // gang order: the stamps assigned
  cw_net_conn_reply(p->conn, h->type, h->request_id, &st.base);
  free(stamps);
}

// --- Dispatch -------------------------------------------------------------------------

static void cw__on_frame(cw_net_conn_t* conn, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  if (!p->hello_done && h->type != CW_MSG_HELLO) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_violation(conn, h->type, h->request_id,
                          cw_make_status(CW_FAILED_PRECONDITION, "%s before HELLO",
                                         cw_msg_type_name(h->type)));
    return;
  }
  if (p->hello_done && h->type == CW_MSG_HELLO) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_violation(conn, h->type, h->request_id,
                          cw_make_status(CW_FAILED_PRECONDITION, "second HELLO"));
    return;
  }
  bool client = p->role == CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  switch (h->type) {
    case CW_MSG_HELLO:
      cw__handle_hello(p, h, (const Causeway__V1__HelloRequest*)msg);
      break;
    case CW_MSG_PING:
      cw_net_conn_reply(conn, h->type, h->request_id, msg);
      break;
    case CW_MSG_STATS:
      cw__handle_stats(p, h);
      break;
    case CW_MSG_REGISTER:
      cw__handle_register(p, h, &msg);
      break;
    case CW_MSG_HEALTH_HEARTBEAT:
      cw_ctl_health_heartbeat(p);  // unsolicited: no reply
      break;
    case CW_MSG_HEALTH_REJOIN:
      if (client) {
        cw_ctl_health_rejoin(p, h, (const Causeway__V1__HealthRejoinRequest*)msg);
      } else {
        cw__reply_error(ctl, conn, h->type, h->request_id,
                        cw_make_status(CW_PERMISSION_DENIED, "HEALTH_REJOIN is for clients"));
      }
      break;
    case CW_MSG_OPEN_SESSION:
    case CW_MSG_COMPILE:
    case CW_MSG_LAUNCH:
    case CW_MSG_DELETE:
    case CW_MSG_EXE_INFO:
      if (!client) {
        cw__reply_error(ctl, conn, h->type, h->request_id,
                        cw_make_status(CW_PERMISSION_DENIED, "%s is for clients (HELLO role "
                                       "CLIENT)", cw_msg_type_name(h->type)));
      } else if (h->type == CW_MSG_OPEN_SESSION) {
        cw__handle_open_session(p, h, (const Causeway__V1__OpenSessionRequest*)msg);
      } else if (h->type == CW_MSG_COMPILE) {
        cw__handle_compile(p, h, (const Causeway__V1__CompileRequest*)msg);
      } else if (h->type == CW_MSG_LAUNCH) {
        uint64_t id = ((const Causeway__V1__LaunchRequest*)msg)->exe_id;
        cw__handle_exe_request(p, h, msg, id);
        msg = NULL;
      } else if (h->type == CW_MSG_EXE_INFO) {
        uint64_t id = ((const Causeway__V1__ExeInfoRequest*)msg)->exe_id;
        cw__handle_exe_request(p, h, msg, id);
        msg = NULL;
      } else {
        cw__handle_delete(p, h, msg);
        msg = NULL;
      }
      break;
    case CW_MSG_ADMIN_STATUS:
    case CW_MSG_ADMIN_PAUSE:
    case CW_MSG_ADMIN_RESUME:
    case CW_MSG_ADMIN_DRAIN:
    case CW_MSG_ADMIN_UNDRAIN:
      cw_ctl_ops_handle(p, h, msg);
      msg = NULL;
      break;
    default:
      // Data-path requests go to workers directly; their bulk is discarded.
      cw__reply_error(ctl, conn, h->type, h->request_id,
                      cw_make_status(CW_UNIMPLEMENTED, "the controller does not serve %s; send "
                                     "it to a worker", cw_msg_type_name(h->type)));
      break;
  }
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
}

static void cw__on_close(cw_net_conn_t* conn, cw_status_t reason) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  cw_ctl_peer_t** pp = &ctl->peers;
  while (*pp && *pp != p) pp = &(*pp)->next;
  if (*pp) *pp = p->next;
  if (p->worker) {
    cw__worker_lost(p->worker, reason ? cw_status_message(reason)
                                      : "its connection to the controller closed");
  }
  if (p->session) {
    cw_ctl_session_t* s = p->session;
    p->session = NULL;
    if (--s->clients == 0) cw__session_close(s);
    cw__session_release(s);
  }
  cw_net_conn_set_callbacks(conn, &(cw_net_conn_callbacks_t){NULL, NULL, NULL}, NULL);
  cw_net_conn_release(conn);
  free(p);
  // A parked OPEN_SESSION of this peer is answered (dropped) here.
  cw__open_waits_check(ctl, false);
}

static const cw_net_conn_callbacks_t cw__peer_callbacks = {cw__on_frame, NULL, cw__on_close};

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

// --- Lifecycle ------------------------------------------------------------------------

void cw_controller_stop(cw_controller_t* ctl) {
  if (ctl->shutting_down) return;
  ctl->shutting_down = true;
  CW_LOGI("shutting down");
  uv_close((uv_handle_t*)&ctl->sigterm, NULL);
  uv_close((uv_handle_t*)&ctl->sigint, NULL);
  cw_net_watch_stop(&ctl->watch);
  cw_ctl_metrics_stop(ctl);
  cw_ctl_health_stop(ctl);
  cw_ctl_ops_stop(ctl);
  for (size_t i = 0; i < ctl->num_workers; ++i) cw__link_drop(&ctl->workers[i]->private_conn);
  while (ctl->sessions) cw__session_close(ctl->sessions);
  // Closing every connection fails what is pending on it.
  cw_net_deinitialize(&ctl->net);
  cw__open_waits_check(ctl, false);
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
  CW_RETURN_IF_ERROR(cw_compile_cache_create(
                         (uint64_t)cw_settings_int(settings, CW_SET_COMPILE_CACHE_BYTES),
                         &ctl->cache), "controller");
  CW_RETURN_IF_ERROR(cw_ctl_disk_create(ctl), "controller");
  cw_frame_limits_t pre = {(uint32_t)cw_settings_int(settings, CW_SET_PREHELLO_MAX_PAYLOAD), 0};
  cw_frame_limits_t lim = {(uint32_t)cw_settings_int(settings, CW_SET_MAX_PAYLOAD),
                           (uint64_t)cw_settings_int(settings, CW_SET_MAX_BULK)};
  cw_net_initialize(&ctl->net, &ctl->loop, &pre, &lim,
                    cw_settings_int(settings, CW_SET_FRAMES_PER_WAKEUP),
                    cw_settings_int(settings, CW_SET_MAX_CONNECTIONS),
                    cw_settings_int(settings, CW_SET_HELLO_TIMEOUT_MS));
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
                                   cw__on_accept), "controller");
  printf("causeway-controller listening on %s\n", ctl->net.listen_address);
  fflush(stdout);
  CW_RETURN_IF_ERROR(cw_ctl_metrics_start(ctl), "controller");
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
    else if (ctl->net_initialized && !ctl->shutting_down) cw_net_deinitialize(&ctl->net);
    uv_run(&ctl->loop, UV_RUN_DEFAULT);
    uv_loop_close(&ctl->loop);
  }
  cw_ctl_sched_free(ctl);
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    while (w->queue_head) {
      cw_ctl_item_t* it = w->queue_head;
      w->queue_head = it->next;
      cw__item_free(it);
    }
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
