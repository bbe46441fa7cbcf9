// Requests relayed to the worker that holds their executable (see
// cw_ctl_relay.h).
#include "cw_ctl_relay.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_health.h"
#include "cw_ctl_island.h"
#include "cw_ctl_metrics.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_time.h"

void cw_ctl_multi_done(cw_ctl_multi_t* m, cw_controller_t* ctl, cw_status_t st) {
  if (st && !m->first_error) m->first_error = st;
  else cw_status_free(st);
  assert(m->left > 0);
  if (--m->left > 0) return;
  if (m->first_error) {
    cw_ctl_reply_error(ctl, m->client, m->type, m->request_id, m->first_error);
  } else {
    Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
    ack.id = m->first_id;
    cw_net_conn_reply(m->client, m->type, m->request_id, &ack.base);
  }
  cw_net_conn_release(m->client);
  free(m);
}

void cw_ctl_item_free(cw_ctl_item_t* it) {
  if (it->msg) protobuf_c_message_free_unpacked(it->msg, NULL);
  free(it->lives);
  cw_net_conn_release(it->client);
  cw_ctl_session_release(it->session);
  free(it);
}

void cw_ctl_item_fail(cw_controller_t* ctl, cw_ctl_item_t* it, cw_status_t st) {
  if (it->multi) {
    cw_ctl_multi_done(it->multi, ctl, st);
  } else {
    cw_ctl_reply_error(ctl, it->client, it->type, it->request_id, st);
  }
  cw_ctl_item_free(it);
}

static void cw__relay_answer(void* user, cw_net_conn_t* conn, cw_status_t status,
                             const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_item_t* it = user;
  cw_controller_t* ctl = it->session->ctl;
  free(bulk);
  if (it->type == CW_MSG_LAUNCH) cw_ctl_metrics_on_launch_reply(ctl, it);
  cw_ctl_worker_t* w = it->worker < ctl->num_workers ? ctl->workers[it->worker] : NULL;
  if (status) {
    if (w) status = cw_ctl_worker_error(w, conn, status);
    cw_ctl_item_fail(ctl, it, status);
    return;
  }
  if (it->multi) {
    cw_ctl_multi_done(it->multi, ctl, cw_ok_status());
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
    cw_ctl_exe_t* e = cw_ctl_exe_find(it->session, cw_ctl_item_exe_id(it));
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
  cw_ctl_item_free(it);
}

uint64_t cw_ctl_item_exe_id(const cw_ctl_item_t* it) {
  switch (it->type) {
    case CW_MSG_LAUNCH:
      return ((const Causeway__V1__LaunchRequest*)it->msg)->exe_id;
    case CW_MSG_EXE_INFO:
      return ((const Causeway__V1__ExeInfoRequest*)it->msg)->exe_id;
    default:
      return 0;
  }
}

void cw_ctl_relay_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                     const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_item_t* it = user;
  cw_controller_t* ctl = it->session->ctl;
  uint32_t island = it->worker < ctl->num_workers ? ctl->workers[it->worker]->island : it->worker;
  bool stamped = cw_ctl_sched_done(ctl, it);
  cw__relay_answer(user, conn, status, reply, bulk, bulk_len);
  if (stamped) cw_ctl_sched_pump(ctl, island);  // room for the next stamped launch
}

static void cw__island_push(cw_controller_t* ctl, cw_ctl_item_t* it) {
  cw_status_t stale = cw_ctl_health_item_check(ctl, it);
  if (stale) {
    cw_ctl_item_fail(ctl, it, stale);
    return;
  }
  cw_ctl_island_note_lives(ctl, it);
  cw_ctl_sched_push(ctl, it);
}

cw_ctl_item_t* cw_ctl_item_new(uint16_t type, cw_net_conn_t* client, uint64_t request_id,
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
  cw_ctl_session_retain(s);
  it->msg = msg;
  it->worker = worker;
  it->received_ns = cw_time_now_ns();
  return it;
}

static cw_ctl_item_t* cw__item_create(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                                      ProtobufCMessage* msg, uint32_t worker) {
  return cw_ctl_item_new(h->type, p->conn, h->request_id, p->session, msg, worker);
}

// LAUNCH and EXE_INFO: relayed to the worker that holds the executable.
// Takes msg.
static void cw__handle_exe_request(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                                   ProtobufCMessage* msg, uint64_t exe_id) {
  cw_controller_t* ctl = p->ctl;
  cw_ctl_exe_t* e = cw_ctl_exe_find(p->session, exe_id);
  if (!e) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_NOT_FOUND, "executable %" PRIu64 " not found", exe_id));
    return;
  }
  cw_ctl_item_t* it = cw__item_create(p, h, msg, e->worker);
  if (!it) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  cw__island_push(ctl, it);
}

void cw_ctl_handle_launch(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg) {
  uint64_t id = ((const Causeway__V1__LaunchRequest*)*msg)->exe_id;
  cw__handle_exe_request(cw_net_conn_user(conn), h, *msg, id);
  *msg = NULL;
}

void cw_ctl_handle_exe_info(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg) {
  uint64_t id = ((const Causeway__V1__ExeInfoRequest*)*msg)->exe_id;
  cw__handle_exe_request(cw_net_conn_user(conn), h, *msg, id);
  *msg = NULL;
}

// A client deletes one executable a request; a batch is bounded all the same.
#define CW__MAX_DELETE_IDS 65536

void cw_ctl_handle_delete(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msgp) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  ProtobufCMessage* msg = *msgp;
  *msgp = NULL;
  const Causeway__V1__DeleteRequest* r = (const Causeway__V1__DeleteRequest*)msg;
  if (r->n_ids > CW__MAX_DELETE_IDS) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                       cw_make_status(CW_INVALID_ARGUMENT, "DELETE lists %zu executables (at "
                                      "most %d)", r->n_ids, CW__MAX_DELETE_IDS));
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  cw_ctl_multi_t* m = calloc(1, sizeof(*m));
  // Per worker: how many of the ids it holds, then where its part starts.
  size_t* count = calloc(ctl->num_workers + 1, sizeof(size_t));
  uint32_t* owner = calloc(r->n_ids + 1, sizeof(uint32_t));
  uint64_t* ids = calloc(r->n_ids + 1, sizeof(uint64_t));
  if (!m || !count || !owner || !ids) {
    free(m);
    free(count);
    free(owner);
    free(ids);
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
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
    cw_ctl_exe_t* e = cw_ctl_exe_find(p->session, r->ids[i]);
    owner[i] = e ? e->worker : UINT32_MAX;
    if (!e) {
      if (!unknown++) first_unknown = r->ids[i];
      continue;
    }
    count[e->worker]++;
  }
  // A seq orders one worker's requests of the session: sent on to none (no
  // id), or to several, it would be a hole at the worker it was numbered
  // for, or take a seq of another's. Refused, the client fills it there.
  size_t holders = 0;
  for (uint32_t wi = 0; wi < ctl->num_workers; ++wi) holders += count[wi] != 0;
  if (r->seq && (r->n_ids == 0 || holders > 1)) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                       r->n_ids ? cw_make_status(CW_INVALID_ARGUMENT, "DELETE with seq %" PRIu64
                                                 " names executables on %zu workers; a seq is "
                                                 "one worker's: one DELETE per worker",
                                                 r->seq, holders)
                                : cw_make_status(CW_INVALID_ARGUMENT, "DELETE with seq %" PRIu64
                                                 " names no executable: its seq would reach "
                                                 "no worker", r->seq));
    cw_net_conn_release(m->client);
    free(m);
    free(count);
    free(owner);
    free(ids);
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  // Each worker's ids, in request order, one after another in `ids`.
  size_t start = 0;
  for (uint32_t wi = 0; wi < ctl->num_workers; ++wi) {
    size_t n = count[wi];
    count[wi] = start;
    start += n;
  }
  for (size_t i = 0; i < r->n_ids; ++i) {
    if (owner[i] != UINT32_MAX) ids[count[owner[i]]++] = r->ids[i];
  }
  start = 0;
  for (uint32_t wi = 0; wi < ctl->num_workers; ++wi) {
    size_t n = count[wi] - start;  // count[wi] is now where its part ends
    const uint64_t* part_ids = ids + start;
    start = count[wi];
    if (!n) continue;
    Causeway__V1__DeleteRequest* part = malloc(sizeof(*part));
    if (!part) {
      if (!m->first_error) m->first_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
      continue;
    }
    causeway__v1__delete_request__init(part);
    part->ids = (uint64_t*)part_ids;
    part->n_ids = n;
    part->seq = r->seq;  // one worker holds them all when there is one (above)
    part->session_life = r->seq ? r->session_life : 0;  // the life there that seq is of
    // A hand-built message: a copy, so the item owns a normal one.
    ProtobufCMessage* owned = cw_msg_copy(&part->base);
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
  free(count);
  free(owner);
  free(ids);
  protobuf_c_message_free_unpacked(msg, NULL);
  cw_ctl_multi_done(m, ctl, cw_ok_status());
}
