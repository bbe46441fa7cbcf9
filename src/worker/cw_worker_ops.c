// Operations and observability at the worker (`causeway pause | resume |
// drain`, docs/operations.md; STATS, INVENTORY):
//
//   ADMIN_HOLD (from the controller, on a session's connection): the session's
//   launches stay in their connections' queues (cw_worker_launch_pump stops at a
//   paused session) in arrival order; nothing is refused and other requests
//   go on. Their outputs are pending entries already, so a DOWNLOAD of one
//   simply waits. Release pumps every queue of the session again.
//   Holding here, not at the controller, covers every path a launch takes.
//
//   ADMIN_WORKER_DRAIN: new LAUNCH, UPLOAD, COMPILE and LOAD are refused with
//   FAILED_PRECONDITION (after seq ordering, so a session's order still
//   advances); downloads, deletes and everything already accepted go on.
//   STATS says `idle` once nothing is queued or in flight.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_log.h"
#include "cw_worker_conn.h"
#include "cw_worker_launch.h"
#include "cw_worker_mem.h"
#include "cw_worker_ops.h"
#include "cw_worker_sched.h"
#include "cw_worker_transfer.h"

// Launches of session `s` (NULL: all) waiting in connection queues.
// A session's launches queued on its open connections (those of a closed one
// are in w->launches_queued only: a closed connection names no session).
static uint64_t cw__queued(const cw_worker_t* w, const cw_session_t* s) {
  uint64_t n = 0;
  for (const cw_conn_t* c = w->conns; c; c = c->next) {
    if (c->keeps_session && c->session == s) n += cw_worker_launch_queued(c);
  }
  return n;
}

static void cw__release_held(cw_worker_t* w, cw_session_t* s) {
  // Referenced first: pumping replies, and a failed write may close connections.
  size_t n = 0;
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    n += c->keeps_session && c->session == s && c->launch_head;
  }
  cw_conn_t** list = calloc(n + 1, sizeof(*list));
  if (!list) {
    CW_LOGE("out of memory resuming session %" PRIu64 "; its launches stay queued (resume "
            "again)", s->id);
    return;
  }
  size_t k = 0;
  for (cw_conn_t* c = w->conns; c && k < n; c = c->next) {
    if (!c->keeps_session || c->session != s || !c->launch_head) continue;
    cw_worker_conn_ref(c);
    list[k++] = c;
  }
  for (size_t i = 0; i < k; ++i) {
    if (!list[i]->closing) cw_worker_launch_pump(list[i]);
    cw_worker_conn_unref(list[i]);
  }
  free(list);
}

void cw_worker_handle_admin(cw_net_conn_t* nc, const cw_frame_header_t* h,
                            ProtobufCMessage** msgp) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  const ProtobufCMessage* msg = *msgp;
  Causeway__V1__AdminAck ack = CAUSEWAY__V1__ADMIN_ACK__INIT;
  char text[256];
  if (h->type == CW_MSG_ADMIN_HOLD) {
    const Causeway__V1__AdminHoldRequest* r = (const Causeway__V1__AdminHoldRequest*)msg;
    cw_session_t* s = c->session;
    if (!s || s->id != r->session_id) {
      cw_worker_reply_error(c, h->type, h->request_id,
                      cw_make_status(CW_INVALID_ARGUMENT, "ADMIN_HOLD names session %" PRIu64
                                     "; this connection is in session %" PRIu64,
                                     r->session_id, s ? s->id : 0));
      return;
    }
    s->paused = r->hold;
    if (!s->paused) cw__release_held(w, s);  // idempotent
    ack.session_id = s->id;
    ack.launches_held = s->paused ? cw__queued(w, s) : 0;
    snprintf(text, sizeof(text), "session %" PRIu64 " %s at worker %s: %" PRIu64
             " launches held", s->id, s->paused ? "paused" : "resumed", w->name,
             ack.launches_held);
    CW_LOGI("%s", text);
  } else {
    const Causeway__V1__AdminWorkerDrainRequest* r =
        (const Causeway__V1__AdminWorkerDrainRequest*)msg;
    w->draining = r->drain;
    snprintf(text, sizeof(text), "worker %s %s: %" PRIu64 " launches queued, %zu in flight",
             w->name, w->draining ? "is draining" : "takes work again", (uint64_t)w->launches_queued,
             w->launches_in_flight);
    CW_LOGI("%s", text);
  }
  ack.text = text;
  cw_worker_reply(c, h->type, h->request_id, &ack.base);
}

// The ids a refused request would have created exist, in error, so that what
// the client does with them next says why (not "not found").
static void cw__poison(cw_worker_t* w, cw_conn_t* c, uint64_t id, cw_store_kind_t kind,
                       const char* why) {
  cw_store_entry_t* e = NULL;
  if (!c->keeps_session || !c->session || !id) return;
  cw_status_t st = cw_store_insert(w->store, c->session->key, id, kind, &e);
  if (st) {
    cw_status_free(st);  // the id is taken: the client gets that entry's state
    return;
  }
  cw_store_set_error(w->store, e, cw_make_status(CW_FAILED_PRECONDITION, "%s", why));
}

bool cw_worker_ops_refuse(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  cw_worker_t* w = c->w;
  if (!w->draining || !cw_msg_info(h->type)->refused_draining) return false;
  char why[256];
  snprintf(why, sizeof(why), "worker %s is draining: it takes no new %s (downloads and deletes "
           "still work)", w->name, cw_msg_type_name(h->type));
  switch (h->type) {
    case CW_MSG_LAUNCH: {
      const Causeway__V1__LaunchRequest* r = (const Causeway__V1__LaunchRequest*)*msg;
      for (size_t d = 0; d < r->n_outputs; ++d) {
        for (size_t o = 0; o < r->outputs[d]->n_ids; ++o) {
          cw__poison(w, c, r->outputs[d]->ids[o], CW_STORE_BUFFER, why);
        }
      }
      // The client let its donated inputs go when it sent the launch.
      if (c->keeps_session && c->session) cw_worker_launch_drop_donated(w, c->session->key, r);
      break;
    }
    case CW_MSG_UPLOAD: {
      const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)*msg;
      // A later part: its buffer exists (filling); with this part refused
      // nothing can finish it, so it fails as the id of a refused request.
      if (r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_MORE ||
          r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST) {
        cw_worker_upload_part_refused(c, r->buffer_id,
                                      cw_make_status(CW_FAILED_PRECONDITION, "%s", why));
      } else {
        cw__poison(w, c, r->buffer_id, CW_STORE_BUFFER, why);
      }
      break;
    }
    case CW_MSG_COMPILE:
      cw__poison(w, c, ((const Causeway__V1__CompileRequest*)*msg)->exe_id, CW_STORE_EXECUTABLE,
                 why);
      break;
    case CW_MSG_LOAD:
      cw__poison(w, c, ((const Causeway__V1__LoadRequest*)*msg)->exe_id, CW_STORE_EXECUTABLE,
                 why);
      break;
    default:
      break;
  }
  // A relayed launch's stamp passes, else every later stamp here waits for
  // the stall recovery.
  cw_worker_stamp_drop(c, h->type, *msg);
  protobuf_c_message_free_unpacked(*msg, NULL);
  *msg = NULL;
  cw_worker_reply_error(c, h->type, h->request_id, cw_make_status(CW_FAILED_PRECONDITION, "%s", why));
  return true;  // bulk bytes, if any, are discarded
}

static bool cw__listed(const cw_session_t* s, bool paused) {
  return paused ? s->paused : s->clients > 0;
}

size_t cw_worker_ops_session_ids(const cw_worker_t* w, bool paused, size_t max, uint64_t** out_ids,
                                 bool* out_more) {
  *out_ids = NULL;
  *out_more = false;
  size_t n = 0;
  for (const cw_session_t* s = w->sessions; s; s = s->next) n += cw__listed(s, paused);
  if (n > max) {
    CW_LOGW("%zu sessions are %s here; REGISTER reports the first %zu", n,
            paused ? "paused" : "connected", max);
    n = max;
    *out_more = true;
  }
  uint64_t* ids = n ? malloc(n * sizeof(*ids)) : NULL;
  if (!ids) return 0;
  size_t k = 0;
  for (const cw_session_t* s = w->sessions; s && k < n; s = s->next) {
    if (cw__listed(s, paused)) ids[k++] = s->id;
  }
  *out_ids = ids;
  return k;
}

// The operations fields of STATS; free the scratch with cw__stats_scratch_free.
typedef struct cw__stats_scratch_s {
  Causeway__V1__AdminSessionStats* items;
  Causeway__V1__AdminSessionStats** ptrs;
} cw__stats_scratch_t;

static void cw__fill_ops_stats(cw_worker_t* w, Causeway__V1__Stats* st,
                               cw__stats_scratch_t* scratch) {
  scratch->items = NULL;
  scratch->ptrs = NULL;
  uint64_t held = 0, seq_held = 0;
  size_t n = 0;
  for (cw_session_t* s = w->sessions; s; s = s->next) {
    n++;
    seq_held += s->seq.held_count;
  }
  scratch->items = calloc(n + 1, sizeof(*scratch->items));
  scratch->ptrs = calloc(n + 1, sizeof(*scratch->ptrs));
  size_t k = 0;
  for (cw_session_t* s = w->sessions; s; s = s->next) {
    uint64_t queued = cw__queued(w, s);
    if (s->paused) held += queued;
    if (!scratch->items || !scratch->ptrs) continue;  // out of memory: totals only
    cw_store_stats_t ss;
    cw_store_stats(w->store, s->key, &ss);
    Causeway__V1__AdminSessionStats* it = &scratch->items[k];
    causeway__v1__admin_session_stats__init(it);
    it->session_id = s->id;
    it->buffers = ss.buffers;
    it->buffer_bytes = ss.buffer_bytes;
    it->launches_queued = queued;
    it->launches_held = s->paused ? queued : 0;
    it->paused = s->paused;
    cw_worker_mem_session_waiting(w, s->key, &it->memory_waiting, &it->memory_waiting_bytes);
    scratch->ptrs[k++] = it;
  }
  st->session_stats = scratch->ptrs;
  st->n_session_stats = scratch->ptrs ? k : 0;
  st->draining = w->draining;
  st->launches_queued = w->launches_queued;
  st->launches_in_flight = w->launches_in_flight;
  st->launches_held = held;
  st->transfers_pending = w->ops_live;
  st->launches_dispatched = w->launches_dispatched;
  // Not w->outstanding: a zero-copy upload's staging release waits on its
  // buffer's whole life.
  st->idle = w->draining && st->launches_queued == 0 && w->launches_in_flight == 0 &&
             w->ops_live == 0 && seq_held == 0;
}

static void cw__stats_scratch_free(cw__stats_scratch_t* scratch) {
  free(scratch->items);
  free(scratch->ptrs);
}

void cw_worker_handle_stats(cw_net_conn_t* nc, const cw_frame_header_t* h,
                            ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  Causeway__V1__Stats st = CAUSEWAY__V1__STATS__INIT;
  cw_store_stats_t all, mine;
  cw_store_stats(w->store, 0, &all);
  if (c->session) cw_store_stats(w->store, c->session->key, &mine);
  else memset(&mine, 0, sizeof(mine));
  st.buffers = all.buffers;
  st.buffer_bytes = all.buffer_bytes;
  st.executables = all.executables;
  st.launches = w->launches;
  st.uploads = w->uploads;
  st.downloads = w->downloads;
  st.errors = w->errors;
  st.upload_bytes = w->upload_bytes;
  st.download_bytes = w->download_bytes;
  st.send_bytes = w->send_bytes;
  st.put_bytes = w->put_bytes;
  st.sends = w->sends;
  st.puts = w->puts;
  for (cw_session_t* s = w->sessions; s; s = s->next) st.sessions++;
  st.connections = w->net.inbound_connections;
  st.session_buffers = mine.buffers;
  cw_worker_mem_stats(w, &st);
  st.tls_cert_not_after = w->creds.not_after > 0 ? (uint64_t)w->creds.not_after : 0;
  st.credential_reloads = w->creds.reloads;
  st.credential_reload_failures = w->creds.failures;
  cw__stats_scratch_t scratch;
  cw__fill_ops_stats(w, &st, &scratch);
  Causeway__V1__PeerStats* peers = NULL;
  Causeway__V1__PeerStats** peer_ptrs = NULL;
  cw_worker_conn_peer_stats(w, &st, &peers, &peer_ptrs);
  void* stamps = cw_worker_stamp_stats(w, &st);  // gang order: the stamps issued
  cw_worker_reply(c, h->type, h->request_id, &st.base);
  cw__stats_scratch_free(&scratch);
  free(stamps);
  free(peers);
  free(peer_ptrs);
}

void cw_worker_handle_inventory(cw_net_conn_t* nc, const cw_frame_header_t* h,
                                ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  if (!w->inventory_ready) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_make_status(CW_INTERNAL, "inventory unavailable"));
    return;
  }
  w->inventory.worker_name = (char*)w->name;
  cw_worker_reply(c, h->type, h->request_id, &w->inventory.base);
}
