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
#include "cw_net.h"
#include "cw_worker_internal.h"
#include "cw_time.h"

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

// One device's completion of a traced launch: recorded, then the launch's
// own completion runs (which may free the launch).
typedef struct cw_wtrace_dev_s {
  cw_launch_t* launch;
  int device;
  char name[96];
} cw_wtrace_dev_t;

static void cw__trace_device_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_wtrace_dev_t* td = user;
  cw_launch_t* l = td->launch;
  cw_worker_trace_record(w, l->skey, "execute", td->name, td->device, l->trace_start_ns,
                         l->req->exe_id, l->req->seq, 0, l->req->launch_id, NULL);
  free(td);
  cw__launch_device_done(w, l, status);
}

void cw_worker_trace_wrap_launch(cw_worker_t* w, cw_launch_t* l, size_t index, cw_done_fn* fn,
                                 void** user) {
  if (!cw__trace_of(w, l->skey)) return;
  cw_wtrace_dev_t* td = malloc(sizeof(*td));
  if (!td) return;  // untraced, not failed
  td->launch = l;
  // The local device: where the launch's first output on this position lives.
  td->device = (int)index;
  if (index < l->req->n_outputs && l->num_outputs && l->req->outputs[index]->n_ids) {
    cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, l->req->outputs[index]->ids[0],
                                                 l->out_serials[index * l->num_outputs]);
    if (e && e->device >= 0) td->device = e->device;
  }
  snprintf(td->name, sizeof(td->name), "%s",
           l->exe && l->exe->name ? l->exe->name : "execute");
  *fn = cw__trace_device_done;
  *user = td;
}

static void cw__fill_clock(cw_worker_t* w, Causeway__V1__TraceClock* clk) {
  clk->now_ns = (uint64_t)cw_time_now_ns();
  clk->worker_name = (char*)w->name;
  clk->pid = (uint32_t)getpid();
}

void cw_worker_trace_handle_start(cw_conn_t* c, const cw_frame_header_t* h,
                                  const Causeway__V1__TraceStartRequest* r) {
  cw_worker_t* w = c->w;
  cw_session_t* s = c->session;
  if (!s || c->role != CAUSEWAY__V1__ROLE__ROLE_CLIENT) {
    cw__reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_FAILED_PRECONDITION, "TRACE_START needs a client "
                                   "connection in a session"));
    return;
  }
  uint32_t cap = r->capacity ? r->capacity : CW__TRACE_DEFAULT_CAPACITY;
  if (cap > CW__TRACE_MAX_CAPACITY) {
    cw__reply_error(c, h->type, h->request_id,
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
      cw__reply_error(c, h->type, h->request_id,
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
  cw__reply(c, h->type, h->request_id, &clk.base);
}

void cw_worker_trace_handle_fetch(cw_conn_t* c, const cw_frame_header_t* h,
                                  const Causeway__V1__TraceFetchRequest* r) {
  cw_worker_t* w = c->w;
  struct cw_wtrace_s* t = c->session ? c->session->trace : NULL;
  if (!t) {
    cw__reply_error(c, h->type, h->request_id,
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
    cw__reply_error(c, h->type, h->request_id,
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
  cw__reply(c, h->type, h->request_id, &rep.base);
  t->head = (t->head + n) % t->capacity;
  t->count -= n;
  free(evs);
  free(ptrs);
}
