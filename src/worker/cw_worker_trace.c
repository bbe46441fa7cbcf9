// Per-session timelines on the worker (obs): once a session's client sends
// TRACE_START, the worker records that session's executions (per device),
// uploads, downloads and worker-to-worker transfers (SEND here, PUT at the
// receiver) in a bounded ring (oldest dropped and counted), stamped with
// CLOCK_MONOTONIC. TRACE_FETCH takes them out; both replies carry the
// worker's clock so the client can estimate the offset between hosts.
// Sessions that never asked cost one integer test per event site.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_time.h"
#include "cw_worker_conn.h"
#include "cw_worker_trace.h"

#define CW__TRACE_DEFAULT_CAPACITY 16384
#define CW__TRACE_MAX_CAPACITY (1u << 20)
#define CW__TRACE_MAX_PER_REPLY 20000  // keeps a TRACE_FETCH reply well under max-payload

typedef struct cw_wtrace_event_s {
  const char* cat;  // static string
  char name[96];
  char peer[64];
  int32_t device;
  int64_t start_ns, dur_ns;
  uint64_t id, seq, bytes, launch_id;
} cw_wtrace_event_t;

struct cw_wtrace_s {
  cw_wtrace_event_t* ring;
  size_t capacity, head, count;  // oldest at head
  uint64_t dropped;
};

void cw_worker_trace_free(struct cw_wtrace_s* t) {
  if (!t) return;
  free(t->ring);
  free(t);
}

static struct cw_wtrace_s* cw__trace_of(cw_worker_t* w, uint64_t skey) {
  if (!w->traced_sessions) return NULL;
  for (cw_session_t* s = w->sessions; s; s = s->next) {
    if (s->key == skey) return s->trace;
  }
  return NULL;
}

bool cw_worker_trace_enabled(cw_worker_t* w, uint64_t skey) { return cw__trace_of(w, skey); }

void cw_worker_trace_record(cw_worker_t* w, uint64_t skey, const char* cat, const char* name,
                            int device, int64_t start_ns, uint64_t id, uint64_t seq,
                            uint64_t bytes, uint64_t launch_id, const char* peer) {
  struct cw_wtrace_s* t = cw__trace_of(w, skey);
  if (!t || !t->capacity) return;
  int64_t now = cw_time_now_ns();
  cw_wtrace_event_t* ev;
  if (t->count == t->capacity) {
    ev = &t->ring[t->head];  // the oldest goes
    t->head = (t->head + 1) % t->capacity;
    t->dropped++;
  } else {
    ev = &t->ring[(t->head + t->count) % t->capacity];
    t->count++;
  }
  ev->cat = cat;
  snprintf(ev->name, sizeof(ev->name), "%s", name ? name : cat);
  snprintf(ev->peer, sizeof(ev->peer), "%s", peer ? peer : "");
  ev->device = device;
  ev->start_ns = start_ns ? start_ns : now;
  ev->dur_ns = now > ev->start_ns ? now - ev->start_ns : 0;
  ev->id = id;
  ev->seq = seq;
  ev->bytes = bytes;
  ev->launch_id = launch_id;
}

static void cw__fill_clock(cw_worker_t* w, Causeway__V1__TraceClock* clk) {
  clk->now_ns = (uint64_t)cw_time_now_ns();
  clk->worker_name = (char*)w->name;
  clk->pid = (uint32_t)getpid();
}

void cw_worker_handle_trace_start(cw_net_conn_t* nc, const cw_frame_header_t* h,
                                  ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  cw_session_t* s = c->session;  // a client's (the message table's senders and session rules)
  const Causeway__V1__TraceStartRequest* r = (const Causeway__V1__TraceStartRequest*)*msg;
  uint32_t cap = r->capacity ? r->capacity : CW__TRACE_DEFAULT_CAPACITY;
  if (cap > CW__TRACE_MAX_CAPACITY) {
    cw_worker_reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_INVALID_ARGUMENT, "TRACE_START capacity %u is above %u",
                                   cap, CW__TRACE_MAX_CAPACITY));
    return;
  }
  if (!s->trace) {
    struct cw_wtrace_s* t = calloc(1, sizeof(*t));
    cw_wtrace_event_t* ring = calloc(cap, sizeof(*ring));
    if (!t || !ring) {
      free(t);
      free(ring);
      cw_worker_reply_error(c, h->type, h->request_id,
                      cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %u trace events",
                                     cap));
      return;
    }
    t->ring = ring;
    t->capacity = cap;
    s->trace = t;
    w->traced_sessions++;
    CW_LOGI("session %" PRIu64 ": tracing (%u events)", s->id, cap);
  }
  Causeway__V1__TraceClock clk = CAUSEWAY__V1__TRACE_CLOCK__INIT;
  cw__fill_clock(w, &clk);
  cw_worker_reply(c, h->type, h->request_id, &clk.base);
}

void cw_worker_handle_trace_fetch(cw_net_conn_t* nc, const cw_frame_header_t* h,
                                  ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  const Causeway__V1__TraceFetchRequest* r = (const Causeway__V1__TraceFetchRequest*)*msg;
  struct cw_wtrace_s* t = c->session ? c->session->trace : NULL;
  if (!t) {
    cw_worker_reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_FAILED_PRECONDITION, "TRACE_FETCH before TRACE_START in "
                                   "this session"));
    return;
  }
  size_t n = t->count;
  if (n > CW__TRACE_MAX_PER_REPLY) n = CW__TRACE_MAX_PER_REPLY;
  if (r->max_events && n > r->max_events) n = r->max_events;
  Causeway__V1__TraceEvent* evs = calloc(n + 1, sizeof(*evs));
  Causeway__V1__TraceEvent** ptrs = calloc(n + 1, sizeof(*ptrs));
  if (!evs || !ptrs) {
    free(evs);
    free(ptrs);
    cw_worker_reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for trace events"));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const cw_wtrace_event_t* e = &t->ring[(t->head + i) % t->capacity];
    causeway__v1__trace_event__init(&evs[i]);
    evs[i].name = (char*)e->name;
    evs[i].cat = (char*)e->cat;
    evs[i].device = e->device;
    evs[i].start_ns = (uint64_t)e->start_ns;
    evs[i].dur_ns = (uint64_t)e->dur_ns;
    evs[i].id = e->id;
    evs[i].seq = e->seq;
    evs[i].bytes = e->bytes;
    evs[i].launch_id = e->launch_id;
    evs[i].peer = (char*)e->peer;
    ptrs[i] = &evs[i];
  }
  Causeway__V1__TraceClock clk = CAUSEWAY__V1__TRACE_CLOCK__INIT;
  cw__fill_clock(w, &clk);
  Causeway__V1__TraceEvents rep = CAUSEWAY__V1__TRACE_EVENTS__INIT;
  rep.clock = &clk;
  rep.events = ptrs;
  rep.n_events = n;
  rep.dropped = t->dropped;
  rep.more = t->count > n;
  // The reply is packed before this returns: the ring's slots may be reused.
  cw_worker_reply(c, h->type, h->request_id, &rep.base);
  t->head = (t->head + n) % t->capacity;
  t->count -= n;
  free(evs);
  free(ptrs);
}
