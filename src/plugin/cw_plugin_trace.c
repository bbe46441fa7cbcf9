// Session timeline (obs): with CAUSEWAY_TRACE=/path/trace.json in the
// client's environment, the plugin records its own dispatches (executions,
// transfers, waits), asks every worker to record the session's executions
// and transfers (TRACE_START), and when the client is destroyed or the
// process exits (JAX never destroys its client: an atexit handler) fetches
// the workers' events (TRACE_FETCH) and writes one Chrome Trace Event Format
// file ({"traceEvents": [...]}, for Perfetto or chrome://tracing).
//
// Clocks: every side stamps CLOCK_MONOTONIC. Each worker's offset is
// estimated from round trips (the sample with the shortest round trip wins:
// offset = worker_now - midpoint), so hosts with different clocks line up
// within half that round trip; the estimates are in the file's "otherData".
// Processes: the client and each worker are one pid each (named with "M"
// process_name events); tids are lanes: the client's dispatch, transfer and
// wait lanes, a worker's devices (tid = local device index) and its
// transfer lanes.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_frame.h"
#include "cw_json.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_trace.h"
#include "cw_plugin_trace_file.h"
#include "cw_time.h"

#define CW__TRACE_CLIENT_CAPACITY (1u << 20)
#define CW__TRACE_WORKER_CAPACITY 65536
#define CW__TRACE_CLOCK_SAMPLES 5

enum { CW__WLANE_UPLOAD = 1001, CW__WLANE_DOWNLOAD, CW__WLANE_SEND, CW__WLANE_PUT, CW__WLANE_OTHER };

typedef struct cw__tev_s {
  const char* cat;  // static
  char name[96];
  int lane;
  int64_t start_ns, end_ns;
  int32_t worker;  // index, -1: none
  uint64_t id, seq, bytes;
} cw__tev_t;

typedef struct cw__wclock_s {
  bool started;
  int64_t offset_ns, rtt_ns;  // best estimate so far (rtt_ns < 0: none)
  uint32_t pid;
  uint64_t dropped;
} cw__wclock_t;

// One traced client's recording. Detached from cw__tr before it is written,
// so the (slow) write holds no lock that a reader thread recording a
// completion could wait on.
// A worker's event as fetched (worker clock; mapped when written, with the
// best offset estimate by then).
typedef struct cw__wev_s {
  uint32_t worker;
  char cat[16];
  char name[96];
  char peer[64];
  int32_t device;
  int64_t start_ns, dur_ns;
  uint64_t id, seq, bytes, launch_id;
} cw__wev_t;

#define CW__TRACE_MAX_WORKER_EVENTS (1u << 22)

typedef struct cw__trace_state_s {
  char* path;
  cw_plugin_client_t* client;
  int64_t origin_ns;
  cw__tev_t* ring;  // the client's events (under cw__tr.mu while attached)
  size_t head, count;
  uint64_t dropped;
  cw__wclock_t* clocks;  // [client->num_workers]
  // Fetched so far (under cw__tr.io): every write shows all of them.
  cw__wev_t* wevents;
  size_t num_wevents, cap_wevents;
  uint64_t wdropped;  // beyond CW__TRACE_MAX_WORKER_EVENTS
} cw__trace_state_t;

static struct {
  pthread_mutex_t io;  // serializes fetching and writing (flush, finish)
  pthread_mutex_t mu;  // guards st and its client ring; never held across I/O
  _Atomic bool on;
  cw__trace_state_t* st;  // the traced client's (one per process); NULL: none
  bool atexit_registered;
} cw__tr = {.io = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER};

bool cw_plugin_trace_on(void) { return atomic_load_explicit(&cw__tr.on, memory_order_relaxed); }

void cw_plugin_trace_client_event(const char* cat, const char* name, int lane, int64_t start_ns,
                                  const cw_plugin_worker_t* w, uint64_t id, uint64_t seq,
                                  uint64_t bytes) {
  if (!cw_plugin_trace_on()) return;
  int64_t end = cw_time_now_ns();
  pthread_mutex_lock(&cw__tr.mu);
  cw__trace_state_t* st = cw__tr.st;
  if (st) {
    cw__tev_t* ev;
    if (st->count == CW__TRACE_CLIENT_CAPACITY) {
      ev = &st->ring[st->head];
      st->head = (st->head + 1) % CW__TRACE_CLIENT_CAPACITY;
      st->dropped++;
    } else {
      ev = &st->ring[(st->head + st->count) % CW__TRACE_CLIENT_CAPACITY];
      st->count++;
    }
    ev->cat = cat;
    snprintf(ev->name, sizeof(ev->name), "%s", name ? name : cat);
    ev->lane = lane;
    ev->start_ns = start_ns;
    ev->end_ns = end > start_ns ? end : start_ns;
    ev->worker = w ? (int32_t)w->index : -1;
    ev->id = id;
    ev->seq = seq;
    ev->bytes = bytes;
  }
  pthread_mutex_unlock(&cw__tr.mu);
}

// One clock sample from a reply's worker time and the local send/receive times.
static void cw__clock_sample(cw__wclock_t* k, const Causeway__V1__TraceClock* clk, int64_t t0,
                             int64_t t1) {
  if (!clk) return;
  int64_t rtt = t1 - t0;
  if (k->rtt_ns < 0 || rtt < k->rtt_ns) {
    k->rtt_ns = rtt;
    k->offset_ns = (int64_t)clk->now_ns - (t0 + rtt / 2);
  }
  k->pid = clk->pid;
}

// --- Writing --------------------------------------------------------------------------

static int cw__worker_lane(const char* cat, int device) {
  if (!strcmp(cat, "execute")) return device >= 0 && device < 256 ? device : CW__WLANE_OTHER;
  if (!strcmp(cat, "upload")) return CW__WLANE_UPLOAD;
  if (!strcmp(cat, "download")) return CW__WLANE_DOWNLOAD;
  if (!strcmp(cat, "send")) return CW__WLANE_SEND;
  if (!strcmp(cat, "put")) return CW__WLANE_PUT;
  return CW__WLANE_OTHER;
}

// Fetches worker `i`'s new events into st->wevents (cw__tr.io held).
static void cw__fetch_worker(cw__trace_state_t* st, size_t i) {
  cw_plugin_worker_t* w = &st->client->workers[i];
  cw__wclock_t* k = &st->clocks[i];
  if (!k->started || !w->conn || atomic_load(&w->dead)) return;
  for (int rounds = 0; rounds < 1000; ++rounds) {
    Causeway__V1__TraceFetchRequest req = CAUSEWAY__V1__TRACE_FETCH_REQUEST__INIT;
    ProtobufCMessage* reply = NULL;
    int64_t t0 = cw_time_now_ns();
    cw_status_t s = cw_client_call(w->conn, CW_MSG_TRACE_FETCH, &req.base, NULL, 0, NULL, &reply,
                                   NULL);
    int64_t t1 = cw_time_now_ns();
    if (s) {
      fprintf(stderr, "causeway: trace: events of worker %s not fetched: %s\n", w->name,
              cw_status_message(s));
      cw_status_free(s);
      return;
    }
    const Causeway__V1__TraceEvents* r = (const Causeway__V1__TraceEvents*)reply;
    cw__clock_sample(k, r->clock, t0, t1);
    k->dropped = r->dropped;
    for (size_t e = 0; e < r->n_events; ++e) {
      const Causeway__V1__TraceEvent* ev = r->events[e];
      if (st->num_wevents == st->cap_wevents) {
        size_t cap = st->cap_wevents ? 2 * st->cap_wevents : 1024;
        cw__wev_t* grown = cap <= CW__TRACE_MAX_WORKER_EVENTS
                               ? realloc(st->wevents, cap * sizeof(*grown)) : NULL;
        if (!grown) {
          st->wdropped += r->n_events - e;
          break;
        }
        st->wevents = grown;
        st->cap_wevents = cap;
      }
      cw__wev_t* x = &st->wevents[st->num_wevents++];
      x->worker = (uint32_t)i;
      snprintf(x->cat, sizeof(x->cat), "%s", ev->cat ? ev->cat : "");
      snprintf(x->name, sizeof(x->name), "%s", ev->name && ev->name[0] ? ev->name : x->cat);
      snprintf(x->peer, sizeof(x->peer), "%s", ev->peer ? ev->peer : "");
      x->device = ev->device;
      x->start_ns = (int64_t)ev->start_ns;
      x->dur_ns = (int64_t)ev->dur_ns;
      x->id = ev->id;
      x->seq = ev->seq;
      x->bytes = ev->bytes;
      x->launch_id = ev->launch_id;
    }
    bool more = r->more && r->n_events;
    protobuf_c_message_free_unpacked(reply, NULL);
    if (!more) break;
  }
}

// Sets obj[key] = v, taking v; a NULL v (out of memory) leaves obj NULL, so
// the event is dropped and the file reported as failed.
static json_t* cw__with(json_t* obj, const char* key, json_t* v) {
  if (json_object_set_new(obj, key, v)) {
    json_decref(obj);
    return NULL;
  }
  return obj;
}

// Writes worker `i`'s process: its name, lanes and fetched events.
static void cw__write_worker(cw_plugin_trace_file_t* t, const cw__trace_state_t* st, size_t i) {
  const cw_plugin_worker_t* w = &st->client->workers[i];
  const cw__wclock_t* k = &st->clocks[i];
  if (!k->started) return;
  char pname[256];
  snprintf(pname, sizeof(pname), "causeway worker %s (island %u)", w->name, w->island);
  cw_plugin_trace_file_meta(t, k->pid, 0, "process_name", pname);
  bool lanes[CW__WLANE_OTHER + 1 - CW__WLANE_UPLOAD] = {0};
  bool devices[256] = {0};
  for (size_t e = 0; e < st->num_wevents; ++e) {
    const cw__wev_t* ev = &st->wevents[e];
    if (ev->worker != i) continue;
    int lane = cw__worker_lane(ev->cat, ev->device);
    if (lane < CW__WLANE_UPLOAD && !devices[lane]) {
      char tname[32];
      snprintf(tname, sizeof(tname), "device %d", lane);
      cw_plugin_trace_file_meta(t, k->pid, lane, "thread_name", tname);
      devices[lane] = true;
    }
    if (lane >= CW__WLANE_UPLOAD && !lanes[lane - CW__WLANE_UPLOAD]) {
      static const char* const kNames[] = {"uploads", "downloads", "sends (to peers)",
                                           "puts (from peers)", "other"};
      cw_plugin_trace_file_meta(t, k->pid, lane, "thread_name", kNames[lane - CW__WLANE_UPLOAD]);
      lanes[lane - CW__WLANE_UPLOAD] = true;
    }
    json_t* args = json_object();
    args = cw__with(args, "worker", cw_json_string_create(w->name));
    args = cw__with(args, "id", cw_json_uint_create(ev->id));
    args = cw__with(args, "seq", cw_json_uint_create(ev->seq));
    args = cw__with(args, "bytes", cw_json_uint_create(ev->bytes));
    args = cw__with(args, "launch_id", cw_json_uint_create(ev->launch_id));
    args = cw__with(args, "device", json_integer(ev->device));
    if (ev->peer[0]) args = cw__with(args, "peer", cw_json_string_create(ev->peer));
    if (!args) t->failed = true;
    cw_plugin_trace_file_complete(t, k->pid, lane, ev->cat, ev->name,
                                  ev->start_ns - k->offset_ns - st->origin_ns, ev->dur_ns, args);
  }
}

// otherData: the clock origin, drop counts and each worker's clock estimate.
static json_t* cw__other_data(const cw__trace_state_t* st, uint64_t cdropped) {
  const cw_plugin_client_t* c = st->client;
  json_t* workers = json_array();
  for (size_t i = 0; i < c->num_workers; ++i) {
    const cw__wclock_t* k = &st->clocks[i];
    if (!k->started) continue;
    json_t* w = json_object();
    w = cw__with(w, "name", cw_json_string_create(c->workers[i].name));
    w = cw__with(w, "pid", json_integer(k->pid));
    w = cw__with(w, "clock_offset_ns", json_integer(k->offset_ns));
    w = cw__with(w, "clock_rtt_ns", json_integer(k->rtt_ns));
    w = cw__with(w, "dropped", cw_json_uint_create(k->dropped));
    if (json_array_append_new(workers, w)) {
      json_decref(workers);
      return NULL;
    }
  }
  json_t* o = json_object();
  o = cw__with(o, "clock", json_string("CLOCK_MONOTONIC"));
  o = cw__with(o, "ts_origin_ns", json_integer(st->origin_ns));
  o = cw__with(o, "session", cw_json_uint_create(c->session_id));
  o = cw__with(o, "client_dropped", cw_json_uint_create(cdropped));
  o = cw__with(o, "worker_events_dropped", cw_json_uint_create(st->wdropped));
  return cw__with(o, "workers", workers);
}

// Writes the file: the client's events `cev` (head `chead`, `ccount` of
// them in the ring), and every worker event fetched so far (cw__tr.io held).
static void cw__write(const cw__trace_state_t* st, const cw__tev_t* cev, size_t chead,
                      size_t ccount, uint64_t cdropped) {
  cw_plugin_client_t* c = st->client;
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", st->path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "causeway: trace: cannot write %s\n", tmp);
    return;
  }
  uint32_t pid = (uint32_t)getpid();
  cw_plugin_trace_file_t t;
  cw_plugin_trace_file_begin(&t, f);
  char pname[128];
  snprintf(pname, sizeof(pname), "causeway client (pid %u, session %" PRIu64 ")", pid,
           c->session_id);
  cw_plugin_trace_file_meta(&t, pid, 0, "process_name", pname);
  cw_plugin_trace_file_meta(&t, pid, CW_PLUGIN_TRACE_LANE_DISPATCH, "thread_name", "dispatch");
  cw_plugin_trace_file_meta(&t, pid, CW_PLUGIN_TRACE_LANE_TRANSFER, "thread_name",
                            "transfers (dispatch to ack)");
  cw_plugin_trace_file_meta(&t, pid, CW_PLUGIN_TRACE_LANE_WAIT, "thread_name", "waits");
  for (size_t i = 0; i < ccount; ++i) {
    const cw__tev_t* ev = &cev[(chead + i) % CW__TRACE_CLIENT_CAPACITY];
    json_t* args = json_object();
    if (ev->worker >= 0 && (size_t)ev->worker < c->num_workers) {
      args = cw__with(args, "worker", cw_json_string_create(c->workers[ev->worker].name));
    }
    args = cw__with(args, "id", cw_json_uint_create(ev->id));
    args = cw__with(args, "seq", cw_json_uint_create(ev->seq));
    args = cw__with(args, "bytes", cw_json_uint_create(ev->bytes));
    if (!args) t.failed = true;
    cw_plugin_trace_file_complete(&t, pid, ev->lane, ev->cat, ev->name,
                                  ev->start_ns - st->origin_ns, ev->end_ns - ev->start_ns, args);
  }
  for (size_t i = 0; i < c->num_workers; ++i) cw__write_worker(&t, st, i);
  errno = 0;
  bool ok = cw_plugin_trace_file_end(&t, cw__other_data(st, cdropped));
  int why = errno;  // a write's failure (ENOSPC), if one failed
  if (fclose(f) != 0) {
    ok = false;
    why = errno;
  }
  if (ok && rename(tmp, st->path) != 0) {
    ok = false;
    why = errno;
  }
  if (!ok) {
    fprintf(stderr, "causeway: trace: writing %s failed: %s\n", st->path,
            why ? strerror(why) : "out of memory");
    unlink(tmp);
  }
}

// --- Start and finish -------------------------------------------------------------------

static void cw__state_free(cw__trace_state_t* st) {
  if (!st) return;
  free(st->path);
  free(st->ring);
  free(st->clocks);
  free(st->wevents);
  free(st);
}

static pid_t cw__trace_owner;  // a fork()ed child's exit leaves the trace to the parent

static void cw__trace_atexit(void) {
  if (getpid() != cw__trace_owner) return;
  pthread_mutex_lock(&cw__tr.mu);
  cw_plugin_client_t* c = cw__tr.st ? cw__tr.st->client : NULL;
  pthread_mutex_unlock(&cw__tr.mu);
  if (c) cw_plugin_trace_finish(c);
}

void cw_plugin_trace_start(cw_plugin_client_t* c) {
  const char* path = cw_settings_string(&c->settings, CW_SET_TRACE);
  if (!*path) return;
  cw__trace_state_t* st = calloc(1, sizeof(*st));
  if (st) {
    st->path = strdup(path);
    st->ring = calloc(CW__TRACE_CLIENT_CAPACITY, sizeof(*st->ring));
    st->clocks = calloc(c->num_workers + 1, sizeof(*st->clocks));
  }
  if (!st || !st->path || !st->ring || !st->clocks) {
    cw__state_free(st);
    fprintf(stderr, "causeway: trace: out of memory; not tracing\n");
    return;
  }
  st->client = c;
  st->origin_ns = cw_time_now_ns();
  for (size_t i = 0; i < c->num_workers; ++i) {
    cw_plugin_worker_t* w = &c->workers[i];
    cw__wclock_t* k = &st->clocks[i];
    k->rtt_ns = -1;
    if (!w->conn) continue;
    for (int n = 0; n < CW__TRACE_CLOCK_SAMPLES; ++n) {
      Causeway__V1__TraceStartRequest req = CAUSEWAY__V1__TRACE_START_REQUEST__INIT;
      req.capacity = CW__TRACE_WORKER_CAPACITY;
      ProtobufCMessage* reply = NULL;
      int64_t t0 = cw_time_now_ns();
      cw_status_t s = cw_client_call(w->conn, CW_MSG_TRACE_START, &req.base, NULL, 0, NULL,
                                     &reply, NULL);
      int64_t t1 = cw_time_now_ns();
      if (s) {
        fprintf(stderr, "causeway: trace: worker %s does not trace: %s\n", w->name,
                cw_status_message(s));
        cw_status_free(s);
        break;
      }
      k->started = true;
      cw__clock_sample(k, (const Causeway__V1__TraceClock*)reply, t0, t1);
      protobuf_c_message_free_unpacked(reply, NULL);
    }
  }
  pthread_mutex_lock(&cw__tr.mu);
  bool taken = cw__tr.st != NULL;
  if (!taken) {
    cw__tr.st = st;
    if (!cw__tr.atexit_registered) {
      cw__tr.atexit_registered = true;
      cw__trace_owner = getpid();
      atexit(cw__trace_atexit);
    }
    atomic_store(&cw__tr.on, true);
  }
  pthread_mutex_unlock(&cw__tr.mu);
  if (taken) {
    fprintf(stderr, "causeway: trace: only the first client of a process is traced\n");
    cw__state_free(st);
  }
}

void cw_plugin_trace_finish(cw_plugin_client_t* c) {
  pthread_mutex_lock(&cw__tr.io);
  pthread_mutex_lock(&cw__tr.mu);
  cw__trace_state_t* st = cw__tr.st;
  if (!st || st->client != c) {
    pthread_mutex_unlock(&cw__tr.mu);
    pthread_mutex_unlock(&cw__tr.io);
    return;
  }
  cw__tr.st = NULL;  // detached: recording stops, no one else reaches it
  atomic_store(&cw__tr.on, false);
  pthread_mutex_unlock(&cw__tr.mu);
  for (size_t i = 0; i < c->num_workers; ++i) cw__fetch_worker(st, i);
  cw__write(st, st->ring, st->head, st->count, st->dropped);
  cw__state_free(st);
  pthread_mutex_unlock(&cw__tr.io);
}

// Flush on demand: writes the trace so far and keeps recording (later writes
// rewrite the whole file). For a process that may not exit normally:
// ctypes.CDLL(<libcauseway_pjrt.so>).CausewayTraceFlush(). Returns 0 when a
// trace was written, -1 when this process is not tracing.
__attribute__((visibility("default"))) int CausewayTraceFlush(void);
int CausewayTraceFlush(void) {
  pthread_mutex_lock(&cw__tr.io);
  pthread_mutex_lock(&cw__tr.mu);
  cw__trace_state_t* st = cw__tr.st;
  cw__tev_t* copy = NULL;
  size_t count = 0;
  uint64_t dropped = 0;
  if (st) {
    // A copy of the client's events, so recording goes on while we write.
    count = st->count;
    dropped = st->dropped;
    copy = malloc((count ? count : 1) * sizeof(*copy));
    for (size_t i = 0; copy && i < count; ++i) {
      copy[i] = st->ring[(st->head + i) % CW__TRACE_CLIENT_CAPACITY];
    }
  }
  pthread_mutex_unlock(&cw__tr.mu);
  int rc = -1;
  if (st && copy) {
    // st stays attached (and alive: finishing waits for cw__tr.io).
    for (size_t i = 0; i < st->client->num_workers; ++i) cw__fetch_worker(st, i);
    cw__write(st, copy, 0, count, dropped);
    rc = 0;
  }
  free(copy);
  pthread_mutex_unlock(&cw__tr.io);
  return rc;
}
