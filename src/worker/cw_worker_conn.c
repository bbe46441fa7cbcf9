// The worker's connections and sessions (see cw_worker_conn.h). src/net
// reads, checks and writes frames; this file is the worker's side of it:
// the handler table, sessions at HELLO, `seq` order and flow control, drain
// refusals in that order, where bulk bytes go, and per-peer byte counts.
#include "cw_worker_conn.h"
#include "cw_worker_direct.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_log.h"
#include "cw_random.h"
#include "cw_worker_compile.h"
#include "cw_worker_launch.h"
#include "cw_worker_link.h"
#include "cw_worker_op.h"
#include "cw_worker_ops.h"
#include "cw_worker_sched.h"
#include "cw_worker_send.h"
#include "cw_worker_trace.h"
#include "cw_worker_transfer.h"

#define CW__MAX_PEER_STATS 1024

struct cw_peer_stat_s {
  char* name;
  uint64_t bytes_in;
  uint64_t bytes_out;
};

static void cw__seq_release_conn(void* conn, cw_seq_held_t* held);
static void cw__seq_conn_closed(cw_conn_t* c);

void cw_worker_conn_ref(cw_conn_t* c) { cw_net_conn_retain(c->nc); }
void cw_worker_conn_unref(cw_conn_t* c) { cw_net_conn_release(c->nc); }

void cw_worker_reply(cw_conn_t* c, uint16_t type, uint64_t request_id,
                     const ProtobufCMessage* msg) {
  cw_net_conn_reply(c->nc, type, request_id, msg);
}

void cw_worker_reply_error(cw_conn_t* c, uint16_t type, uint64_t request_id,
                           cw_status_t status) {
  c->w->errors++;
  cw_net_conn_reply_error(c->nc, type, request_id, status);
}

// --- Per-peer byte counts -------------------------------------------------------

#define CW__OTHER_PEERS "(other)"

static size_t cw__peer_stat_index(cw_worker_t* w, const char* name) {
  for (size_t i = 0; i < w->num_peer_stats; ++i) {
    if (!strcmp(w->peer_stats[i].name, name)) return i;
  }
  // Bounded: a hostile peer choosing names cannot grow this without limit.
  // Past the bound every new name counts as CW__OTHER_PEERS, which takes the
  // one entry past it (so this recurses once at most).
  if (w->num_peer_stats >= CW__MAX_PEER_STATS && strcmp(name, CW__OTHER_PEERS) != 0) {
    return cw__peer_stat_index(w, CW__OTHER_PEERS);
  }
  cw_peer_stat_t* grown = realloc(w->peer_stats, (w->num_peer_stats + 1) * sizeof(*grown));
  char* copy = strdup(name);
  if (!grown || !copy) {
    free(copy);
    if (grown) w->peer_stats = grown;
    return SIZE_MAX;
  }
  w->peer_stats = grown;
  grown[w->num_peer_stats] = (cw_peer_stat_t){copy, 0, 0};
  return w->num_peer_stats++;
}

static void cw__on_bytes(cw_net_conn_t* nc, uint64_t in, uint64_t out) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  if (c->peer_stat >= w->num_peer_stats) {
    // Not named yet (before HELLO): carried until it is.
    c->uncounted_in += in;
    c->uncounted_out += out;
    return;
  }
  in += c->uncounted_in;
  out += c->uncounted_out;
  c->uncounted_in = c->uncounted_out = 0;
  w->peer_stats[c->peer_stat].bytes_in += in;
  w->peer_stats[c->peer_stat].bytes_out += out;
}

void cw_worker_conn_peer_stats(cw_worker_t* w, Causeway__V1__Stats* st,
                               Causeway__V1__PeerStats** out_items,
                               Causeway__V1__PeerStats*** out_ptrs) {
  Causeway__V1__PeerStats* items = calloc(w->num_peer_stats + 1, sizeof(*items));
  Causeway__V1__PeerStats** ptrs = calloc(w->num_peer_stats + 1, sizeof(*ptrs));
  if (items && ptrs) {
    for (size_t i = 0; i < w->num_peer_stats; ++i) {
      causeway__v1__peer_stats__init(&items[i]);
      items[i].peer = w->peer_stats[i].name;
      items[i].bytes_in = w->peer_stats[i].bytes_in;
      items[i].bytes_out = w->peer_stats[i].bytes_out;
      ptrs[i] = &items[i];
    }
    st->peers = ptrs;
    st->n_peers = w->num_peer_stats;
  }
  *out_items = items;
  *out_ptrs = ptrs;
}

void cw_worker_conn_free_peer_stats(cw_worker_t* w) {
  for (size_t i = 0; i < w->num_peer_stats; ++i) free(w->peer_stats[i].name);
  free(w->peer_stats);
  w->peer_stats = NULL;
  w->num_peer_stats = 0;
}

// --- Sessions ----------------------------------------------------------------

cw_session_t* cw_worker_session_find(cw_worker_t* w, uint64_t id) {
  for (cw_session_t* s = w->sessions; s; s = s->next) {
    if (s->id == id) return s;
  }
  return NULL;
}

static cw_session_t* cw__session_create(cw_worker_t* w, uint64_t id) {
  cw_session_t* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  while (id == 0 || cw_worker_session_find(w, id)) {
    // Fresh ids come from getrandom: knowing one is what it takes to join a
    // session (docs/protocol.md "Sessions are capabilities").
    if (!cw_random_id_or_log("session id", &id)) {
      free(s);
      return NULL;
    }
  }
  s->id = id;
  s->key = w->next_session_key++;
  cw_seq_initialize(&s->seq);
  s->next = w->sessions;
  w->sessions = s;
  CW_LOGI("session %" PRIu64 " opened", id);
  return s;
}

static void cw__session_free(cw_worker_t* w, cw_session_t* s) {
  uint64_t key = s->key;
  cw_seq_deinitialize(&s->seq, cw__seq_release_conn);
  if (s->trace) w->traced_sessions--;
  cw_worker_trace_free(s->trace);
  free(s);
  cw_store_remove_session(w->store, key);
}

static void cw__session_drop(cw_worker_t* w, cw_session_t* s) {
  assert(s->connections > 0);
  if (--s->connections > 0) return;
  cw_session_t** pp = &w->sessions;
  while (*pp && *pp != s) pp = &(*pp)->next;
  if (*pp) *pp = s->next;
  CW_LOGI("session %" PRIu64 " closed; freeing its objects", s->id);
  // A peer's PUT connection joined it without keeping it: it has none now.
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    if (c->session == s) c->session = NULL;
  }
  cw__session_free(w, s);
}

void cw_worker_sessions_free(cw_worker_t* w) {
  while (w->sessions) {
    cw_session_t* s = w->sessions;
    w->sessions = s->next;
    cw__session_free(w, s);
  }
}

// --- Connections ----------------------------------------------------------------

static void cw__link(cw_worker_t* w, cw_conn_t* c) {
  c->next = w->conns;
  if (w->conns) w->conns->prev = c;
  w->conns = c;
}

// A transfer whose bytes will not come (its connection closed): its entry
// fails with UNAVAILABLE; frees op (NULL: none). `waited`: it was waiting for
// memory, none of its bytes read.
static void cw__drop_unread(cw_conn_t* c, cw_op_t* op, bool waited) {
  if (!op) return;
  cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
  if (e) {
    e->filling = false;
    cw_store_set_error(c->w->store, e,
                       waited ? cw_make_status(CW_UNAVAILABLE, "%s closed while %" PRIu64
                                               " waited for memory", cw_worker_conn_name(c),
                                               op->dst_id)
                              : cw_make_status(CW_UNAVAILABLE, "%s closed before the bytes of %"
                                               PRIu64 " arrived", cw_worker_conn_name(c),
                                               op->dst_id));
  }
  cw_worker_op_free(op);
}

static void cw__on_close(cw_net_conn_t* nc, cw_status_t reason) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  c->nc = nc;
  c->closing = true;
  if (c->prev) c->prev->next = c->next;
  else if (w->conns == c) w->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  // A partial upload: its staging memory goes, its entry fails. One that
  // waited for memory before its bytes were read: its wait ends too.
  cw_op_t* partial = c->recv;
  cw_op_t* waiting = c->mem_recv;
  c->recv = c->mem_recv = NULL;
  cw__drop_unread(c, partial, false);
  cw__drop_unread(c, waiting, true);
  cw_worker_upload_parts_conn_closed(c);
  cw__seq_conn_closed(c);  // held requests
  if (c->is_controller) cw_worker_link_closed(c);
  // A prepared part nobody can say go to; launches a paused session held here.
  cw_worker_launch_conn_closed(c);
  if (c->keeps_session && c->session) {
    cw_session_t* s = c->session;
    c->session = NULL;
    c->keeps_session = false;
    s->clients -= c->client_role;
    cw__session_drop(w, s);
  }
  c->session = NULL;
}

static void cw__on_free(void* user) {
  cw_conn_t* c = user;
  cw_worker_direct_conn_close(c);
  free(c->peer_address);
  free(c);
}

static void cw__on_bulk_done(cw_net_conn_t* nc, const cw_frame_header_t* h);

static const cw_net_conn_callbacks_t cw__callbacks = {cw__on_bulk_done, cw__on_close,
                                                      cw__on_bytes, cw__on_free};

static cw_conn_t* cw__conn_new(cw_worker_t* w, bool outbound) {
  cw_conn_t* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->w = w;
  c->outbound = outbound;
  c->peer_stat = SIZE_MAX;
  c->peer_pidfd = -1;
  return c;
}

static void cw__on_accept(cw_net_t* net, cw_net_conn_t* nc) {
  cw_worker_t* w = net->user;
  cw_conn_t* c = w->shutting_down ? NULL : cw__conn_new(w, false);
  if (!c) {
    cw_net_conn_close(nc, NULL);
    return;
  }
  c->nc = nc;
  cw_worker_direct_conn_open(c);
  cw__link(w, c);
  cw_net_conn_set_callbacks(nc, &cw__callbacks, c);
}

cw_status_t cw_worker_conn_peer(cw_worker_t* w, const char* address, cw_conn_t** out) {
  *out = NULL;
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    if (c->outbound && !c->closing && !c->is_controller && !strcmp(c->peer_address, address)) {
      *out = c;
      return cw_ok_status();
    }
  }
  cw_conn_t* c = cw__conn_new(w, true);
  if (c) c->peer_address = strdup(address);
  if (!c || !c->peer_address) {
    free(c);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a peer connection");
  }
  c->peer_stat = cw__peer_stat_index(w, address);
  cw_net_conn_t* nc = NULL;
  cw_status_t st = cw_net_connect(&w->net, address, address, CAUSEWAY__V1__ROLE__ROLE_WORKER,
                                  0, &cw__callbacks, c,
                                  cw_settings_int(w->settings, CW_SET_CONNECT_TIMEOUT_MS), &nc);
  if (st) {
    free(c->peer_address);
    free(c);
    return st;
  }
  c->nc = nc;
  if (!cw_net_conn_is_open(nc)) {  // it failed at once (on_close ran)
    cw_status_t why = cw_net_conn_close_reason(nc);
    return why ? cw_status_clone(why)
               : cw_make_status(CW_UNAVAILABLE, "peer %s unreachable", address);
  }
  cw__link(w, c);
  *out = c;
  return cw_ok_status();
}

// --- HELLO: sessions ----------------------------------------------------------------

// Closes session s's connections but `keep` (clients' only, when
// clients_only) with UNAVAILABLE `why`. Closing one may drain held requests
// and close others, or drop s with its last connection: scanned from the
// start each time (closed ones leave w->conns), s found again by id. True
// if s still lives.
static bool cw__close_session_conns(cw_worker_t* w, cw_session_t* s, cw_conn_t* keep,
                                    bool clients_only, const char* why) {
  uint64_t id = s->id;
  for (;;) {
    if (!(s = cw_worker_session_find(w, id))) return false;
    cw_conn_t* c = w->conns;
    while (c && (c == keep || c->closing || c->session != s || !c->keeps_session ||
                 (clients_only && !c->client_role))) {
      c = c->next;
    }
    if (!c) return true;
    CW_LOGI("%s: closed: %s (%s)", cw_worker_conn_name(c), why, cw_worker_conn_name(keep));
    cw_net_conn_close(c->nc, cw_make_status(CW_UNAVAILABLE, "%s", why));
  }
}

// A client reattaching to session s after its link was lost (HelloRequest.
// reattach_session_key): its other connections in s are closed before the
// HELLO is answered, so nothing more is read from the lost link. Requests
// still in that socket would otherwise apply after the fillers the client
// sends on the new one (the seqs it took for lost); its held ones pass their
// turn. Only client connections: the controller's link keeps the session.
static void cw__close_lost_links(cw_worker_t* w, cw_session_t* s, cw_conn_t* keep) {
  char why[96];
  snprintf(why, sizeof(why), "the client reattached to session %" PRIu64
           " on another connection", s->id);
  (void)cw__close_session_conns(w, s, keep, true, why);
}

// A HELLO with fresh_session (a client joining this worker after the
// controller declared it dead, or the controller's reload link then) into a
// life of session s from before this worker's latest REGISTER: that life is
// stale to them (the client dropped its arrays there and numbers its seq
// from 1 again) but lives on while one of its connections is open, e.g. a
// client's that has not heard WORKER_DOWN yet. Its connections, client and
// controller, are closed, which drops it; the caller makes a fresh one.
// True if it still lives.
static bool cw__fence_stale_life(cw_worker_t* w, cw_session_t* s, cw_conn_t* keep) {
  char why[96];
  snprintf(why, sizeof(why), "session %" PRIu64 " was joined afresh after this worker "
           "registered again", s->id);
  return cw__close_session_conns(w, s, keep, false, why);
}

static cw_status_t cw__on_hello(cw_net_conn_t* nc, const Causeway__V1__HelloRequest* r,
                                uint64_t* out_session_id, bool* out_has_session) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  c->peer_stat = cw__peer_stat_index(w, cw_net_conn_name(nc));
  if (r->role == CAUSEWAY__V1__ROLE__ROLE_WORKER) {
    // A peer's PUT connection joins the session if it exists but does not
    // keep it alive (PUT names its session anyway).
    c->session = r->session_id ? cw_worker_session_find(w, r->session_id) : NULL;
    *out_session_id = r->session_id;
  } else {
    cw_session_t* s = r->session_id ? cw_worker_session_find(w, r->session_id) : NULL;
    if (s && r->fresh_session && s->key < w->registered_session_key &&
        !cw__fence_stale_life(w, s, c)) {
      s = cw_worker_session_find(w, r->session_id);  // NULL: dropped, made again below
    }
    bool existed = s != NULL;
    if (!s) s = cw__session_create(w, r->session_id);
    if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a session");
    s->connections++;  // first: closing the lost links must not end the session
    c->client_role = r->role == CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    s->clients += c->client_role;
    c->session = s;
    c->keeps_session = true;
    uint64_t key = s->key ^ w->session_key_salt;
    // Only a client that had this life of the session (its key, which a
    // HELLO into the session tells) closes its client connections; the
    // field from anyone else changes nothing.
    if (r->reattach_session_key && existed && c->client_role) {
      if (r->reattach_session_key == key) {
        cw__close_lost_links(w, s, c);
      } else {
        CW_LOGI("%s: reattach to session %" PRIu64 " with another life's key: nothing closed",
                cw_net_conn_name(nc), s->id);
      }
    }
    // A client reattaching after its link was lost: which life of the
    // session this is, and where its seq order stands (holes to fill),
    // once nothing more is read from the lost link.
    cw_net_conn_set_hello_session(nc, key, existed ? s->seq.next : 0);
    *out_session_id = s->id;
  }
  *out_has_session = c->session != NULL;
  return cw_ok_status();
}

// --- Bulk bytes ----------------------------------------------------------------------

static void cw__received(cw_op_t* op) {
  if (op->type == CW_MSG_LOAD) cw_worker_compile_received(op);
  else cw_worker_transfer_received(op);
}

static void cw__seq_bulk_done(cw_conn_t* c);

static void cw__on_bulk_done(cw_net_conn_t* nc, const cw_frame_header_t* h) {
  cw_conn_t* c = cw_net_conn_user(nc);
  if (c->recv_held) {
    cw__seq_bulk_done(c);  // a held UPLOAD's bytes are in
    return;
  }
  cw_op_t* op = c->recv;
  c->recv = NULL;
  if (op) cw__received(op);
}

// The bytes of op's frame (op->size of them) go into staging memory.
static void cw__receive_into_staging(cw_conn_t* c, cw_op_t* op) {
  op->staging = cw_worker_staging_alloc(c->w, op->size);
  if (!op->staging) {
    cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64
                                    " bytes for %s", op->size, cw_msg_type_name(op->type));
    if (e) cw_store_set_error(c->w->store, e, cw_status_clone(st));
    cw_worker_op_fail(op, st);
    return;  // the bytes are discarded
  }
  if (op->size == 0) {
    cw__received(op);
    return;
  }
  c->recv = op;
  cw_net_conn_set_bulk_dest(c->nc, op->staging);
}

void cw_worker_conn_receive_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op) {
  op->size = h->bulk_len;
  if (cw_worker_conn_bulk_arrived(c)) {
    // A held request: its bytes arrived while it waited for its seq.
    cw_worker_conn_take_held_bulk(c, h, op);
    cw__received(op);
    return;
  }
  cw__receive_into_staging(c, op);
}

void cw_worker_conn_receive_bulk_at(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op,
                                    void* dest) {
  op->size = h->bulk_len;
  if (op->size == 0) {
    cw__received(op);
    return;
  }
  c->recv = op;
  cw_net_conn_set_bulk_dest(c->nc, dest);
}

bool cw_worker_conn_applying_held(const cw_conn_t* c) { return c->seq_applying != NULL; }

bool cw_worker_conn_bulk_arrived(const cw_conn_t* c) {
  return c->seq_applying && c->seq_applying->bulk;
}

void cw_worker_conn_take_held_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op) {
  op->size = h->bulk_len;
  op->staging = c->seq_applying->bulk;
  op->staging_foreign = true;
  c->seq_applying->bulk = NULL;
}

// Memory back-pressure before the bytes are read: they stay in the socket
// (and the sender's buffers: TCP flow control), so the memory they would
// take is not taken until the budget has room. The frame's header is
// handled; the parser waits at its first bulk byte, and nothing more of this
// connection is read, until cw_worker_conn_resume_bulk.
void cw_worker_conn_defer_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op) {
  op->size = h->bulk_len;
  c->mem_recv = op;
  cw_net_conn_hold_reading(c->nc, true);
}

void cw_worker_conn_resume_bulk(cw_conn_t* c, cw_op_t* op, bool keep) {
  if (c->mem_recv != op) return;
  c->mem_recv = NULL;
  // Reading resumes (unless flow control holds it): the bytes go to op, or
  // are discarded.
  if (!c->closing && !c->seq_blocked) cw_net_conn_hold_reading(c->nc, false);
  if (keep && op->size) cw__receive_into_staging(c, op);
  else if (keep) cw__received(op);  // a frame without bytes (an upload's first part)
}

// --- Ordering across connections (seq) ---------------------------------------------

static void cw__seq_release_conn(void* conn, cw_seq_held_t* held) {
  cw_conn_t* c = conn;
  assert(c->seq_held > 0 && c->seq_held_bytes >= held->header.bulk_len);
  c->seq_held--;
  c->seq_held_bytes -= held->header.bulk_len;
  cw_worker_stamp_drop(c, held->header.type, held->msg);  // never applied: its turn passes
  if (c->recv_held == held) {
    // Its bytes still arrive: discard them.
    c->recv_held = NULL;
    cw_net_conn_set_bulk_dest(c->nc, NULL);
  }
  cw_worker_conn_unref(c);
}

// Flow control. A session holds at most its caps' worth of requests (plus one
// per connection): a connection that adds a held request while the session is
// at a cap stops being read (cw__seq_block, at a frame boundary: never while
// a held UPLOAD's bytes arrive) until draining makes room, or until none of its
// own requests are held (cw__seq_unblock). Each sender's seq increases per
// connection, so the request whose turn has come is on a connection with none
// held, which is read: no deadlock. The hard limits (twice the caps) are only
// reached by a peer that breaks that rule; it is disconnected. Bytes count
// per connection there: one held UPLOAD may be bigger than the cap, and a
// well-behaved connection adds a request only while its own held bytes are
// under the cap (else it is not read), whatever the session's others hold.
static bool cw__seq_at_cap(cw_worker_t* w, const cw_seq_t* q) {
  int64_t max_bytes = cw_settings_int(w->settings, CW_SET_MAX_HELD_BYTES);
  return (int64_t)q->held_count >= cw_settings_int(w->settings, CW_SET_MAX_HELD_REQUESTS) ||
         (q->held_bytes > 0 && q->held_bytes >= (uint64_t)max_bytes);
}

static void cw__seq_block(cw_conn_t* c) {
  if (c->closing || c->seq_blocked || !c->session || c->seq_held == 0 || c->recv_held ||
      !cw__seq_at_cap(c->w, &c->session->seq)) {
    return;
  }
  c->seq_blocked = true;
  c->session->seq.blocked++;
  cw_net_conn_hold_reading(c->nc, true);
  CW_LOGD("%s: not read: %zu requests (%" PRIu64 " bytes) wait for seq %" PRIu64,
          cw_worker_conn_name(c), c->session->seq.held_count, c->session->seq.held_bytes,
          c->session->seq.next);
}

static void cw__seq_unblock(cw_worker_t* w, cw_session_t* s) {
  if (!s->seq.blocked) return;
  bool at_cap = cw__seq_at_cap(w, &s->seq);
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    if (!c->seq_blocked || c->session != s || (at_cap && c->seq_held > 0)) continue;
    c->seq_blocked = false;
    s->seq.blocked--;
    // Read again from the idle phase, unless a request waits for memory there.
    if (!c->mem_recv) cw_net_conn_hold_reading(c->nc, false);
  }
}

static void cw__apply(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg);

// Applies the held requests of session `key` whose turn has come, in seq order.
static void cw__seq_drain(cw_worker_t* w, uint64_t key) {
  cw_session_t* s = w->sessions;
  while (s && s->key != key) s = s->next;
  if (!s || s->seq.draining) return;
  s->seq.draining = true;
  cw_seq_held_t* hd;
  while ((hd = cw_seq_take_ready(&s->seq)) != NULL) {
    cw_conn_t* c = hd->conn;
    assert(c->seq_held > 0 && c->seq_held_bytes >= hd->header.bulk_len);
    c->seq_held--;
    c->seq_held_bytes -= hd->header.bulk_len;
    if (c->closing || c->session != s || hd->bulk_failed) {
      // Nobody is left to answer: its turn passes.
      CW_LOGI("%s: %s with seq %" PRIu64 " dropped: its connection closed",
              cw_worker_conn_name(c), cw_msg_type_name(hd->header.type), hd->seq);
      cw_worker_stamp_drop(c, hd->header.type, hd->msg);
    } else {
      ProtobufCMessage* msg = hd->msg;
      hd->msg = NULL;
      c->seq_applying = hd;
      cw_worker_conn_ref(c);
      cw__apply(c, &hd->header, msg);
      c->seq_applying = NULL;
      cw_worker_conn_unref(c);
    }
    cw_seq_held_free(hd);
    cw_worker_conn_unref(c);  // the held request's reference
    // Applying may have closed the session's last connection.
    cw_session_t* again = w->sessions;
    while (again && again != s) again = again->next;
    if (!again) return;
  }
  s->seq.draining = false;
  cw__seq_unblock(w, s);
}

// A seq that a request relayed by the controller holds, sent again on
// another connection: the client gave that request up (its controller
// connection died, or the controller refused it) and fills the seq or sends
// the request again (docs/protocol.md). The newcomer takes the seq. Refused
// as a duplicate instead, it left a hole once the controller's connection
// closed and the held request was forgotten: the worker may see the fill
// before that close, and every later request of the session waited.
static void cw__seq_supersede(cw_conn_t* c, cw_session_t* s, uint64_t seq) {
  cw_seq_held_t* hd = cw_seq_held_find(&s->seq, seq);
  if (!hd || hd->conn == c) return;
  cw_conn_t* held_on = hd->conn;
  if (held_on->closing || cw_net_conn_role(held_on->nc) != CAUSEWAY__V1__ROLE__ROLE_CONTROLLER) {
    return;
  }
  cw_seq_unhold(&s->seq, hd);
  CW_LOGI("%s: %s with seq %" PRIu64 " superseded: sent again on %s", cw_worker_conn_name(held_on),
          cw_msg_type_name(hd->header.type), seq, cw_worker_conn_name(c));
  cw_worker_reply_error(held_on, hd->header.type, hd->header.request_id,
                        cw_make_status(CW_ABORTED, "%s with seq %" PRIu64 " not applied: the "
                                       "client sent seq %" PRIu64 " again on another connection",
                                       cw_msg_type_name(hd->header.type), seq, seq));
  cw__seq_release_conn(held_on, hd);  // its stamp's turn passes
  cw_seq_held_free(hd);
  cw__seq_unblock(c->w, s);
}

// Orders a request that carries seq. Returns true when it was held or refused
// (msg taken, replied if refused); false to apply it now, with *out_drain_key
// set when held successors may follow it.
static bool cw__seq_gate(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg,
                         uint64_t* out_drain_key) {
  *out_drain_key = 0;
  // Worker (PUT) connections do not keep their session: they are unordered.
  if (c->seq_applying || !c->keeps_session || !c->session) return false;
  uint64_t seq = cw_msg_seq(h->type, *msg);
  cw_worker_t* w = c->w;
  cw_session_t* s = c->session;
  cw_status_t st = cw_ok_status();
  // Numbered in an earlier life of the session (relayed, and the links that
  // kept that life all closed while it waited at the controller): its seq is
  // not this life's, so it neither takes nor waits for one here.
  uint64_t life = cw_msg_session_life(h->type, *msg);
  if (life && life != (s->key ^ w->session_key_salt)) {
    // Seq 0: a part of an island's launch or DELETE for another member's seq.
    char which[40] = "without a seq";
    if (seq) snprintf(which, sizeof(which), "with seq %" PRIu64, seq);
    st = cw_make_status(CW_ABORTED, "%s %s " CW_MSG_SEQ_OTHER_LIFE " %" PRIu64
                        " at this worker (its objects are gone); not applied",
                        cw_msg_type_name(h->type), which, s->id);
    CW_LOGI("%s: %s", cw_worker_conn_name(c), cw_status_message(st));
  } else if (!seq) {
    return false;
  }
  cw_seq_held_t* held = NULL;
  int64_t max_requests = 2 * cw_settings_int(w->settings, CW_SET_MAX_HELD_REQUESTS) + 64;
  uint64_t max_bytes = 2 * (uint64_t)cw_settings_int(w->settings, CW_SET_MAX_HELD_BYTES);
  if (!st && seq > s->seq.next) {
    // Hard limits (see cw__seq_at_cap), before a held request is superseded:
    // a newcomer refused after it took the seq would leave it a hole.
    if ((int64_t)s->seq.held_count >= max_requests ||
        (c->seq_held_bytes > 0 && c->seq_held_bytes >= max_bytes)) {
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "%zu requests (%" PRIu64 " bytes, %" PRIu64
                          " of them this connection's) already wait for seq %" PRIu64 "; %s "
                          "with seq %" PRIu64 " (%" PRIu64 " bytes) refused",
                          s->seq.held_count, s->seq.held_bytes, c->seq_held_bytes, s->seq.next,
                          cw_msg_type_name(h->type), seq, h->bulk_len);
    } else {
      cw__seq_supersede(c, s, seq);
    }
  }
  // cw_seq_admit's byte limit is the session's: checked per connection above.
  if (!st) st = cw_seq_admit(&s->seq, seq, h, msg, c, max_requests, INT64_MAX, &held);
  if (st) {
    cw_worker_stamp_drop(c, h->type, *msg);  // refused: its turn passes
    protobuf_c_message_free_unpacked(*msg, NULL);
    *msg = NULL;
    if (cw_status_code(st) == CW_RESOURCE_EXHAUSTED) {
      // Its seq would never be filled: the session's order is broken.
      w->errors++;
      cw_net_conn_violation(c->nc, h->type, h->request_id,
                            cw_status_annotate(st, "over the hard limit on requests waiting for "
                                               "their seq (twice --max-held-requests + 64, "
                                               "--max-held-bytes): this connection is closed"));
    } else {
      cw_worker_reply_error(c, h->type, h->request_id, st);
    }
    return true;  // bulk bytes, if any, are discarded
  }
  if (held) {
    CW_LOGD("%s: %s seq %" PRIu64 " held (next %" PRIu64 ")", cw_worker_conn_name(c),
            cw_msg_type_name(h->type), seq, s->seq.next);
    cw_worker_conn_ref(c);
    c->seq_held++;
    c->seq_held_bytes += h->bulk_len;
    if (h->bulk_len) {
      c->recv_held = held;
      cw_net_conn_set_bulk_dest(c->nc, held->bulk);
    } else {
      cw__seq_block(c);
    }
    return true;
  }
  *out_drain_key = s->key;
  return false;
}

static void cw__seq_bulk_done(cw_conn_t* c) {
  cw_seq_held_t* hd = c->recv_held;
  c->recv_held = NULL;
  hd->bulk_ready = true;
  cw__seq_block(c);
  if (c->session) cw__seq_drain(c->w, c->session->key);
}

// A connection is closing (its session is still attached).
static void cw__seq_conn_closed(cw_conn_t* c) {
  if (c->seq_blocked) {
    c->seq_blocked = false;
    if (c->session) c->session->seq.blocked--;
  }
  if (c->recv_held) {
    c->recv_held->bulk_ready = true;
    c->recv_held->bulk_failed = true;
    c->recv_held = NULL;
    if (c->session) cw__seq_drain(c->w, c->session->key);
  }
  // A controller that died held requests it relayed for a client: their
  // seqs stay unfilled, so the client sends them again through the new
  // controller (or fills them), instead of their turns passing unapplied.
  if (c->session && c->seq_held && cw_net_conn_role(c->nc) == CAUSEWAY__V1__ROLE__ROLE_CONTROLLER) {
    size_t n = cw_seq_forget_conn(&c->session->seq, c, cw__seq_release_conn);
    CW_LOGI("%s: closed with %zu requests waiting for their seq (from %" PRIu64 "); left for "
            "the client to send again", cw_worker_conn_name(c), n, c->session->seq.next);
    cw__seq_unblock(c->w, c->session);
  }
}

// --- The handler table ------------------------------------------------------------

static bool cw__admit(cw_net_conn_t* nc, const cw_frame_header_t* h, ProtobufCMessage** msg);
static void cw__applied(cw_net_conn_t* nc, const cw_frame_header_t* h);

static const cw_net_service_t cw__service = {
    .name = "worker",
    .unserved_hint = "",
    .hello_roles = CW_ROLES_ANY,
    .same_host_copies = true,
    .on_hello = cw__on_hello,
    .admit = cw__admit,
    .applied = cw__applied,
    .handlers =
        {
            [CW_MSG_PING] = cw_net_reply_ping,
            [CW_MSG_INVENTORY] = cw_worker_handle_inventory,
            [CW_MSG_STATS] = cw_worker_handle_stats,
            [CW_MSG_COMPILE] = cw_worker_handle_compile,
            [CW_MSG_LOAD] = cw_worker_handle_load,
            [CW_MSG_SERIALIZE] = cw_worker_handle_serialize,
            [CW_MSG_EXE_INFO] = cw_worker_handle_exe_info,
            [CW_MSG_UPLOAD] = cw_worker_handle_upload,
            [CW_MSG_PUT] = cw_worker_handle_put,
            [CW_MSG_DOWNLOAD] = cw_worker_handle_download,
            [CW_MSG_AWAIT] = cw_worker_handle_await,
            [CW_MSG_COPY] = cw_worker_handle_copy,
            [CW_MSG_EXPECT] = cw_worker_handle_expect,
            [CW_MSG_DELETE] = cw_worker_handle_delete,
            [CW_MSG_SEND] = cw_worker_handle_send,
            [CW_MSG_LAUNCH] = cw_worker_handle_launch,
            [CW_MSG_LAUNCH_GO] = cw_worker_handle_launch_go,
            [CW_MSG_ADMIN_HOLD] = cw_worker_handle_admin,
            [CW_MSG_ADMIN_WORKER_DRAIN] = cw_worker_handle_admin,
            [CW_MSG_TRACE_START] = cw_worker_handle_trace_start,
            [CW_MSG_TRACE_FETCH] = cw_worker_handle_trace_fetch,
        },
};

// A request whose turn came: refused while draining, else handled.
static void cw__apply(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  if (!cw_worker_ops_refuse(c, h, &msg)) cw__service.handlers[h->type](c->nc, h, &msg);
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
}

static bool cw__admit(cw_net_conn_t* nc, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_spin_after_request(c->w);
  uint64_t key = 0;
  if (cw__seq_gate(c, h, msg, &key)) return false;  // held, or refused as a duplicate
  if (cw_worker_ops_refuse(c, h, msg)) {  // draining: applied in order, refused
    if (key) cw__seq_drain(c->w, key);
    return false;
  }
  c->seq_drain_key = key;
  return true;
}

static void cw__applied(cw_net_conn_t* nc, const cw_frame_header_t* h) {
  cw_conn_t* c = cw_net_conn_user(nc);
  uint64_t key = c->seq_drain_key;
  c->seq_drain_key = 0;
  if (key) cw__seq_drain(c->w, key);  // successors that waited for it
}

cw_status_t cw_worker_conn_listen(cw_worker_t* w, const char* address) {
  w->net.user = w;
  return cw_net_listen(&w->net, address, &cw__service, cw__on_accept);
}
