// Resuming sessions after a controller restart (see cw_ctl_resume.h).
//
// Workers outlive their controller and keep every session a client still
// has a connection to: its buffers, its loaded executables, its seq order.
// What died is the controller's view of the session, and that is what the
// client reports here. Nothing is recompiled: the executables' records say
// where they are loaded (a replacement worker later gets no reload of them:
// their serialized bytes died with the old controller's cache).
#include "cw_ctl_resume.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_health.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_sched_queue.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_settings.h"
#include "cw_time.h"
#include "cw_xla_options.h"

// Bounds on what a client may report (it held at most this much).
#define CW__MAX_RESUME_DEVICES 65536
#define CW__MAX_RESUME_EXES (1u << 20)

struct cw_ctl_resume_wait_s {
  cw_ctl_resume_wait_t* next;
  cw_net_conn_t* conn;         // retained
  cw_ctl_session_t* session;   // retained
  uint64_t request_id;
  Causeway__V1__SessionResumeRequest* req;  // owned
  int64_t start_ms;
  int64_t deadline_ms;
  // The workers it names, each once, in the request's order (pointing into
  // req): checked at every tick, so not recounted from its devices.
  const char** names;
  size_t num_names;
};

static void cw__wait_free(cw_ctl_resume_wait_t* rw) {
  free(rw->names);
  cw_net_conn_release(rw->conn);
  cw_ctl_session_release(rw->session);
  protobuf_c_message_free_unpacked(&rw->req->base, NULL);
  free(rw);
}

// Lookups by name in the workers sorted by name: a request may name tens of
// thousands of devices, and the loop must not compare each with every worker
// (nor every device with every other).
typedef struct {
  cw_ctl_worker_t** by_name;
  size_t n;
} cw__names_t;

static int cw__cmp_worker(const void* a, const void* b) {
  return strcmp((*(cw_ctl_worker_t* const*)a)->name, (*(cw_ctl_worker_t* const*)b)->name);
}

static int cw__cmp_name_worker(const void* key, const void* elem) {
  return strcmp(key, (*(cw_ctl_worker_t* const*)elem)->name);
}

static bool cw__names_init(cw_controller_t* ctl, cw__names_t* out) {
  out->n = ctl->num_workers;
  out->by_name = malloc((out->n ? out->n : 1) * sizeof(*out->by_name));
  if (!out->by_name) return false;
  if (out->n) memcpy(out->by_name, ctl->workers, out->n * sizeof(*out->by_name));
  qsort(out->by_name, out->n, sizeof(*out->by_name), cw__cmp_worker);
  return true;
}

static cw_ctl_worker_t* cw__names_find(const cw__names_t* names, const char* name) {
  cw_ctl_worker_t** w = bsearch(name, names->by_name, names->n, sizeof(*names->by_name),
                                cw__cmp_name_worker);
  return w ? *w : NULL;
}

typedef struct {
  const char* name;
  size_t first;  // its first device in the request
} cw__named_t;

static int cw__cmp_named(const void* a, const void* b) {
  const cw__named_t *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->first < y->first ? -1 : x->first > y->first;
}

static int cw__cmp_first(const void* a, const void* b) {
  const cw__named_t *x = a, *y = b;
  return x->first < y->first ? -1 : x->first > y->first;
}

// Fills rw->names from its request's devices; false when out of memory.
static bool cw__wait_names(cw_ctl_resume_wait_t* rw) {
  const Causeway__V1__SessionResumeRequest* r = rw->req;
  cw__named_t* v = malloc(r->n_devices * sizeof(*v));
  if (!v) return false;
  for (size_t i = 0; i < r->n_devices; ++i) v[i] = (cw__named_t){r->devices[i]->worker_name, i};
  qsort(v, r->n_devices, sizeof(*v), cw__cmp_named);
  size_t n = 0;
  for (size_t i = 0; i < r->n_devices; ++i) {
    if (n == 0 || strcmp(v[n - 1].name, v[i].name) != 0) v[n++] = v[i];
  }
  qsort(v, n, sizeof(*v), cw__cmp_first);
  rw->names = malloc(n * sizeof(*rw->names));
  if (rw->names) {
    for (size_t i = 0; i < n; ++i) rw->names[i] = v[i].name;
    rw->num_names = n;
  }
  free(v);
  return rw->names != NULL;
}

// The first worker `rw` names that is not registered and alive; NULL when
// all are. *out_missing counts them. Without the index (out of memory) every
// name is missing, so the resume waits and tries again.
static const char* cw__missing_worker(const cw__names_t* workers, const cw_ctl_resume_wait_t* rw,
                                      size_t* out_missing) {
  const char* first = NULL;
  *out_missing = 0;
  for (size_t i = 0; i < rw->num_names; ++i) {
    cw_ctl_worker_t* w = workers->by_name ? cw__names_find(workers, rw->names[i]) : NULL;
    if (w && w->alive) continue;
    if (!first) first = rw->names[i];
    (*out_missing)++;
  }
  return first;
}

// Checks what a peer sent before anything is waited for.
static cw_status_t cw__validate(const Causeway__V1__SessionResumeRequest* r) {
  if (r->n_devices == 0 || r->n_devices > CW__MAX_RESUME_DEVICES) {
    return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME lists %zu devices (1..%d)",
                          r->n_devices, CW__MAX_RESUME_DEVICES);
  }
  if (r->n_executables > CW__MAX_RESUME_EXES) {
    return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME lists %zu executables (at most "
                          "%u)", r->n_executables, CW__MAX_RESUME_EXES);
  }
  if (r->open && r->open->num_devices && r->open->num_devices != r->n_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME: the session was allocated %u "
                          "devices but lists %zu", r->open->num_devices, r->n_devices);
  }
  for (size_t i = 0; i < r->n_devices; ++i) {
    const Causeway__V1__ResumeDevice* d = r->devices[i];
    if (!cw_ctl_printable(d->worker_name, CW__MAX_NAME - 1)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME device %zu: worker_name must "
                            "be 1..%d printable characters", i, CW__MAX_NAME - 1);
    }
    if (d->id < 0 || d->id >= CW__MAX_RESUME_DEVICES * 16 || d->local_id < 0 ||
        d->local_id >= CW_XLA_MAX_ASSIGNED_DEVICES) {
      return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME device %zu: id %d, local id %d "
                            "out of range", i, d->id, d->local_id);
    }
  }
  // Ids are below CW__MAX_RESUME_DEVICES * 16: one bit each.
  uint8_t* seen = calloc(CW__MAX_RESUME_DEVICES * 16 / 8, 1);
  if (!seen) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < r->n_devices; ++i) {
    int32_t id = r->devices[i]->id;
    if (seen[id / 8] & (1u << (id % 8))) {
      free(seen);
      return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME names device %d twice", id);
    }
    seen[id / 8] |= (uint8_t)(1u << (id % 8));
  }
  free(seen);
  for (size_t i = 0; i < r->n_executables; ++i) {
    const Causeway__V1__ResumeExecutable* e = r->executables[i];
    if (!e->exe_id || e->n_devices == 0 || e->n_devices > CW_XLA_MAX_ASSIGNED_DEVICES) {
      return cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME executable %zu: needs an id and "
                            "1..%d devices", i, CW_XLA_MAX_ASSIGNED_DEVICES);
    }
  }
  return cw_ok_status();
}

typedef struct {
  uint64_t place;  // worker index << 32 | local id
  uint32_t id;     // the session's
} cw__placed_t;

static int cw__cmp_placed(const void* a, const void* b) {
  const cw__placed_t *x = a, *y = b;
  if (x->place != y->place) return x->place < y->place ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

// No device of a worker under two of the session's ids: the session would
// count one device twice (and hold it twice in the status).
static cw_status_t cw__check_distinct(cw_controller_t* ctl, const cw_alloc_device_t* devs,
                                      uint32_t n) {
  cw__placed_t* v = malloc((n ? n : 1) * sizeof(*v));
  if (!v) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  size_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (devs[i].worker == UINT32_MAX) continue;  // a hole
    v[k++] = (cw__placed_t){(uint64_t)devs[i].worker << 32 | devs[i].local, i};
  }
  qsort(v, k, sizeof(*v), cw__cmp_placed);
  cw_status_t st = cw_ok_status();
  for (size_t i = 1; i < k && !st; ++i) {
    if (v[i].place != v[i - 1].place) continue;
    st = cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME names device %u of worker %s twice "
                        "(the session's devices %u and %u)", (uint32_t)v[i].place,
                        ctl->workers[v[i].place >> 32]->name, v[i - 1].id, v[i].id);
  }
  free(v);
  return st;
}

// The client's devices as this controller's (worker index, local id), by the
// client's id: devs[id] (holes: worker UINT32_MAX), *out_n = largest id + 1.
static cw_status_t cw__place_devices(cw_controller_t* ctl,
                                     const Causeway__V1__SessionResumeRequest* r,
                                     cw_alloc_device_t** out_devs, uint32_t* out_n) {
  *out_devs = NULL;
  uint32_t n = 0;
  for (size_t i = 0; i < r->n_devices; ++i) {
    if ((uint32_t)r->devices[i]->id + 1 > n) n = (uint32_t)r->devices[i]->id + 1;
  }
  cw__names_t names = {0};
  cw_alloc_device_t* devs = malloc(n * sizeof(*devs));
  if (!devs || !cw__names_init(ctl, &names)) {
    free(devs);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < n; ++i) devs[i] = (cw_alloc_device_t){UINT32_MAX, 0};
  for (size_t i = 0; i < r->n_devices; ++i) {
    const Causeway__V1__ResumeDevice* d = r->devices[i];
    cw_ctl_worker_t* w = cw__names_find(&names, d->worker_name);
    if (!w || !w->alive) {
      free(devs);
      free(names.by_name);
      return cw_make_status(CW_UNAVAILABLE, "worker %s is not registered", d->worker_name);
    }
    if ((uint32_t)d->local_id >= w->num_devices) {
      free(devs);
      free(names.by_name);
      return cw_make_status(CW_FAILED_PRECONDITION, "worker %s has %u devices now, not device "
                            "%d (the session's device %d)", w->name, w->num_devices, d->local_id,
                            d->id);
    }
    devs[d->id] = (cw_alloc_device_t){w->index, (uint32_t)d->local_id};
  }
  free(names.by_name);
  cw_status_t st = cw__check_distinct(ctl, devs, n);
  if (st) {
    free(devs);
    return st;
  }
  *out_devs = devs;
  *out_n = n;
  return cw_ok_status();
}

// An allocated session's devices must not be another session's now (a new
// client may have been granted them while this one was away).
static cw_status_t cw__check_free(cw_controller_t* ctl, cw_ctl_session_t* s, bool share,
                                  const cw_alloc_device_t* devs, uint32_t n) {
  for (cw_ctl_session_t* o = ctl->sessions; o; o = o->next) {
    if (o == s || !o->allocated || o->closed) continue;
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t k = 0; k < o->num_vdevs; ++k) {
        if (o->vdevs[k].worker != devs[i].worker || o->vdevs[k].local != devs[i].local) continue;
        if (share && o->share) continue;
        const cw_ctl_worker_t* w = ctl->workers[devs[i].worker];
        return cw_make_status(CW_FAILED_PRECONDITION, "device %u of worker %s (the session's "
                              "device %u) is held by session %" PRIu64 " (%s) now", devs[i].local,
                              w->name, i, o->id, cw_ctl_ops_session_name(o));
      }
    }
  }
  return cw_ok_status();
}

// The same devices as the session already has (a client that reconnected to
// a controller that did not restart, or resumed twice).
static cw_status_t cw__check_same(const cw_ctl_session_t* s, const cw_alloc_device_t* devs,
                                  uint32_t n) {
  bool same = s->num_vdevs == n;
  for (uint32_t i = 0; same && i < n; ++i) {
    same = s->vdevs[i].worker == devs[i].worker && s->vdevs[i].local == devs[i].local;
  }
  return same ? cw_ok_status()
              : cw_make_status(CW_FAILED_PRECONDITION, "session %" PRIu64 " has other devices "
                               "here than the client reports", s->id);
}

// Gives `s` the devices the client reports (takes devs).
static cw_status_t cw__set_devices(cw_controller_t* ctl, cw_ctl_session_t* s,
                                   const Causeway__V1__OpenSessionRequest* open,
                                   cw_alloc_device_t* devs, uint32_t n) {
  bool allocated = open && open->num_devices;
  cw_status_t st = cw_ok_status();
  if (s->allocated || s->mapped) {
    st = cw__check_same(s, devs, n);
    free(devs);
    return st;
  }
  if (allocated && open->weight > CW_SCHED_MAX_WEIGHT) {  // as OPEN_SESSION refuses it
    st = cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME: weight %u is outside [1, %d]",
                        open->weight, CW_SCHED_MAX_WEIGHT);
  }
  if (allocated) {
    for (uint32_t i = 0; !st && i < n; ++i) {
      if (devs[i].worker == UINT32_MAX) {
        st = cw_make_status(CW_INVALID_ARGUMENT, "SESSION_RESUME: allocated device %u missing", i);
      }
    }
    if (!st) st = cw__check_free(ctl, s, open->share, devs, n);
    if (st) {
      free(devs);
      return st;
    }
    s->allocated = true;
    s->share = open->share;
    s->weight = open->weight ? open->weight : 1;
  } else {
    s->mapped = true;
  }
  s->vdevs = devs;
  s->num_vdevs = n;
  if (allocated) cw_ctl_alloc_check_leases(ctl, s);
  return cw_ok_status();
}

// Records the executables the client holds, where they are loaded; one the
// devices do not place (it could not have been compiled so) is left out.
typedef struct {
  uint64_t id;
  size_t index;
} cw__exe_ref_t;

static int cw__cmp_exe_ref(const void* a, const void* b) {
  const cw__exe_ref_t *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int cw__cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

// For each executable of the request, the index of the first that has its
// id (sorted, not compared pairwise: a request may list a million). NULL
// when out of memory.
static size_t* cw__exe_first_index(const Causeway__V1__SessionResumeRequest* r) {
  size_t n = r->n_executables;
  cw__exe_ref_t* refs = malloc((n ? n : 1) * sizeof(*refs));
  size_t* first = malloc((n ? n : 1) * sizeof(*first));
  if (!refs || !first) {
    free(refs);
    free(first);
    return NULL;
  }
  for (size_t i = 0; i < n; ++i) refs[i] = (cw__exe_ref_t){r->executables[i]->exe_id, i};
  qsort(refs, n, sizeof(*refs), cw__cmp_exe_ref);
  for (size_t k = 0, run = 0; k < n; ++k) {
    if (refs[k].id != refs[run].id) run = k;
    first[refs[k].index] = refs[run].index;
  }
  free(refs);
  return first;
}

static size_t cw__set_exes(cw_controller_t* ctl, cw_ctl_session_t* s,
                           const Causeway__V1__SessionResumeRequest* r) {
  size_t known = 0, left_out = 0, num_had = s->num_exes;
  int64_t* ids = malloc(CW_XLA_MAX_ASSIGNED_DEVICES * sizeof(*ids));
  uint64_t* had = malloc((num_had ? num_had : 1) * sizeof(*had));
  size_t* first_of = cw__exe_first_index(r);
  bool* added = calloc(r->n_executables ? r->n_executables : 1, sizeof(*added));
  bool ok = ids && had && first_of && added;
  if (!ok) CW_LOGW("session %" PRIu64 ": out of memory recording its executables", s->id);
  num_had = 0;
  for (cw_ctl_exe_t* e = s->exes; ok && e; e = e->next) had[num_had++] = e->id;
  if (ok) qsort(had, num_had, sizeof(*had), cw__cmp_u64);
  for (size_t i = 0; ok && i < r->n_executables; ++i) {
    const Causeway__V1__ResumeExecutable* x = r->executables[i];
    // Known: the session had it, or an earlier entry with its id was added.
    if (added[first_of[i]] || bsearch(&x->exe_id, had, num_had, sizeof(*had), cw__cmp_u64)) {
      known++;
      continue;
    }
    uint32_t local = 0;
    cw_ctl_worker_t* first = NULL;
    bool spans = false;
    for (size_t k = 0; k < x->n_devices; ++k) {
      ids[k] = x->devices[k];
      cw_ctl_worker_t* w = cw_ctl_alloc_resolve(ctl, s, ids[k], &local);
      if (!w) {
        first = NULL;
        break;
      }
      if (!first) first = w;
      if (w != first) spans = true;
    }
    cw_ctl_exe_t* e = first ? calloc(1, sizeof(*e)) : NULL;
    uint32_t* parts = NULL;
    uint32_t* part_devices = NULL;
    size_t num_parts = 0;
    if (e && spans) {
      bool one = false;
      cw_status_t st = cw_ctl_island_place(ctl, s, ids, x->n_devices, &one, &parts, &part_devices,
                                           &num_parts);
      if (!st && one) first = ctl->workers[first->island];
      if (!st && one) e->devices = malloc(x->n_devices * sizeof(int32_t));
      if (st || !one || !e->devices) {
        cw_status_free(st);
        free(parts);
        free(part_devices);
        free(e->devices);
        free(e);
        e = NULL;
      }
    }
    if (!e) {
      if (left_out++ == 0) {
        CW_LOGW("session %" PRIu64 ": executable %" PRIu64 " left out of the resumed session: "
                "its devices do not place it", s->id, x->exe_id);
      }
      continue;
    }
    if (num_parts) {
      memcpy(e->devices, x->devices, x->n_devices * sizeof(int32_t));
      e->num_devices = x->n_devices;
      e->parts = parts;
      e->part_devices = part_devices;
      e->num_parts = num_parts;
    }
    e->id = x->exe_id;
    e->serial = ++ctl->next_exe_serial;
    e->worker = first->index;
    e->state = CW__EXE_READY;  // loaded on its workers by the earlier controller
    if (s->num_exes >= CW_CTL_MAX_SESSION_EXES || !cw_ctl_exe_add(s, e)) {
      free(e->parts);
      free(e->part_devices);
      free(e->devices);
      free(e);
      if (left_out++ == 0) {
        CW_LOGW("session %" PRIu64 ": executable %" PRIu64 " left out of the resumed session: "
                "the session holds %zu", s->id, x->exe_id, s->num_exes);
      }
      continue;
    }
    added[first_of[i]] = true;
    known++;
  }
  if (left_out > 1) {
    CW_LOGW("session %" PRIu64 ": %zu executables left out in all", s->id, left_out);
  }
  free(ids);
  free(had);
  free(first_of);
  free(added);
  return known;
}

// --- The hold (cw_ctl_resume.h) ---------------------------------------------------------

struct cw_ctl_expect_s {
  uint64_t* ids;  // sorted, distinct
  bool* left;     // [num]: still to resume
  size_t num, num_left;
  // A REGISTER's list was cut (more_sessions): that worker is held for the
  // hold's whole time; out of memory for the list: every reporting worker.
  bool cut, cut_all;
  int64_t start_ms;       // the first REGISTER that reported sessions to wait for
  int64_t until_ms;       // the window: the last REGISTER with `previous`, + grace
  int64_t hold_until_ms;  // the hold: the last REGISTER that reported new ones, + grace
};

#define CW__MAX_EXPECT_PAST 65536

static bool cw__past(const cw_controller_t* ctl, uint64_t id) {
  return ctl->num_expect_past &&
         bsearch(&id, ctl->expect_past, ctl->num_expect_past, sizeof(id), cw__cmp_u64);
}

// Remembers the sorted distinct `ids` as once expected (best effort).
static void cw__past_add(cw_controller_t* ctl, const uint64_t* ids, size_t n) {
  size_t have = ctl->num_expect_past;
  if (!n || have + n > CW__MAX_EXPECT_PAST) return;
  uint64_t* all = malloc((have + n) * sizeof(*all));
  if (!all) return;
  size_t i = 0, k = 0, m = 0;
  while (i < have || k < n) {
    if (k == n || (i < have && ctl->expect_past[i] < ids[k])) {
      all[m++] = ctl->expect_past[i++];
    } else {
      if (i < have && ids[k] == ctl->expect_past[i]) i++;  // in both: once
      all[m++] = ids[k++];
    }
  }
  free(ctl->expect_past);
  ctl->expect_past = all;
  ctl->num_expect_past = m;
}

static void cw__expect_clear(cw_controller_t* ctl) {
  if (!ctl->expect) return;
  free(ctl->expect->ids);
  free(ctl->expect->left);
  free(ctl->expect);
  ctl->expect = NULL;
}

// Ends the hold once nothing is left to wait for or its time passed, and the
// window once it passed.
static void cw__expect_settle(cw_controller_t* ctl, int64_t now) {
  struct cw_ctl_expect_s* x = ctl->expect;
  if (!x) return;
  if (x->num || x->cut) {
    bool held = (x->num_left || x->cut) && now < x->hold_until_ms;
    if (held) return;
    if (x->num_left) {
      CW_LOGW("%zu session%s of an earlier controller did not resume within %" PRId64 " ms "
              "(--resume-grace-ms): new sessions get their devices", x->num_left,
              x->num_left == 1 ? "" : "s", now - x->start_ms);
    } else if (x->num) {
      CW_LOGI("the %zu session%s of an earlier controller resumed or left after %" PRId64 " ms",
              x->num, x->num == 1 ? "" : "s", now - x->start_ms);
    }
    cw__past_add(ctl, x->ids, x->num);
    free(x->ids);
    free(x->left);
    x->ids = NULL;
    x->left = NULL;
    x->num = x->num_left = 0;
    x->cut = x->cut_all = false;
  }
  // The window still covers workers that have not registered again (a
  // request for more devices waits) until it passes.
  if (now >= x->until_ms) cw__expect_clear(ctl);
}

static void cw__expect_done(cw_controller_t* ctl, uint64_t id) {
  struct cw_ctl_expect_s* x = ctl->expect;
  if (!x || !x->num) return;
  uint64_t* hit = bsearch(&id, x->ids, x->num, sizeof(*x->ids), cw__cmp_u64);
  if (!hit || !x->left[hit - x->ids]) return;
  x->left[hit - x->ids] = false;
  x->num_left--;
  cw__expect_settle(ctl, cw_time_now_ms());
  // The queue goes on once cw_ctl_resume_check has answered every resume
  // it can (a hold that ended lets it go on).
}

// Merges the sorted distinct `fresh` into the hold; false when out of memory.
static bool cw__expect_merge(struct cw_ctl_expect_s* x, const uint64_t* fresh, size_t n) {
  size_t cap = x->num + n;
  uint64_t* ids = malloc((cap ? cap : 1) * sizeof(*ids));
  bool* left = malloc((cap ? cap : 1) * sizeof(*left));
  if (!ids || !left) {
    free(ids);
    free(left);
    return false;
  }
  size_t i = 0, k = 0, m = 0;
  while (i < x->num || k < n) {
    if (k == n || (i < x->num && x->ids[i] < fresh[k])) {
      ids[m] = x->ids[i];
      left[m++] = x->left[i++];
    } else if (i == x->num || fresh[k] < x->ids[i]) {
      ids[m] = fresh[k++];
      left[m++] = true;
      x->num_left++;
    } else {  // already listed: as it was
      ids[m] = x->ids[i];
      left[m++] = x->left[i++];
      k++;
    }
  }
  free(x->ids);
  free(x->left);
  x->ids = ids;
  x->left = left;
  x->num = m;
  return true;
}

void cw_ctl_resume_expect(cw_ctl_worker_t* w) {
  cw_controller_t* ctl = w->ctl;
  const Causeway__V1__RegisterPrevious* prev = w->reg ? w->reg->previous : NULL;
  int64_t grace = cw_settings_int(ctl->settings, CW_SET_RESUME_GRACE_MS);
  if (!prev || grace <= 0) return;
  int64_t now = cw_time_now_ms();
  // A hold that passed unseen (nothing asked for devices meanwhile) ends
  // first: its sessions count as waited for below.
  cw__expect_settle(ctl, now);
  // Those this controller serves already are not waited for (a worker that
  // registers again after a stall lists them too).
  uint64_t* fresh = malloc((prev->n_sessions ? prev->n_sessions : 1) * sizeof(*fresh));
  size_t n = 0;
  for (size_t i = 0; fresh && i < prev->n_sessions; ++i) {
    cw_ctl_session_t* s = cw_ctl_session_find(ctl, prev->sessions[i]);
    if (s && (s->allocated || s->mapped || cw_ctl_ops_session_is_open(s))) continue;
    if (cw__past(ctl, prev->sessions[i])) continue;  // expected once already
    fresh[n++] = prev->sessions[i];
  }
  if (fresh) qsort(fresh, n, sizeof(*fresh), cw__cmp_u64);
  size_t distinct = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!distinct || fresh[distinct - 1] != fresh[i]) fresh[distinct++] = fresh[i];
  }
  struct cw_ctl_expect_s* x = ctl->expect;
  bool started = false;
  if (!x) {
    x = calloc(1, sizeof(*x));
    if (!x) {
      free(fresh);
      CW_LOGW("out of memory for the sessions worker %s reports", w->name);
      return;
    }
    x->start_ms = now;
    ctl->expect = x;
    started = true;
  }
  x->until_ms = now + grace;  // the window: from the last REGISTER with `previous`
  size_t before = x->num_left;
  bool had = x->num_left || x->cut;
  // Out of memory: the list is lost, the hold lasts its time. A cut list
  // (more_sessions) holds its worker for the hold's time, once.
  bool lost = !fresh || !cw__expect_merge(x, fresh, distinct);
  bool cut = prev->more_sessions && !w->resume_cut_waited;
  if (cut) w->resume_cut_waited = true;
  if (lost) x->cut_all = true;
  if (lost || cut) x->cut = true;
  free(fresh);
  // The hold: only a REGISTER that reports sessions not yet waited for
  // extends it (docs/protocol.md: "after the last REGISTER that reported any").
  if (x->num_left > before || lost || cut) {
    x->hold_until_ms = now + grace;
    if (!had) x->start_ms = now;
  }
  if (x->num_left > before && before == 0) {
    CW_LOGI("worker %s reports %zu session%s of an earlier controller: new sessions get no "
            "devices of the workers that report them for up to %" PRId64 " ms "
            "(--resume-grace-ms), until they resume", w->name, x->num_left,
            x->num_left == 1 ? "" : "s", grace);
  } else if (started) {
    CW_LOGI("worker %s registers again: requests for devices wait up to %" PRId64 " ms "
            "(--resume-grace-ms) for the rest of an earlier controller's workers", w->name, grace);
  }
  cw__expect_settle(ctl, now);
}

bool cw_ctl_resume_holds(cw_controller_t* ctl, char* out_text, size_t cap) {
  if (cap) out_text[0] = '\0';
  cw__expect_settle(ctl, cw_time_now_ms());
  struct cw_ctl_expect_s* x = ctl->expect;
  if (!x || !(x->num_left || x->cut)) return false;
  // No countdown in the text: the client prints each new one.
  if (x->num_left) {
    snprintf(out_text, cap, "; %zu session%s of an earlier controller still to resume",
             x->num_left, x->num_left == 1 ? "" : "s");
  } else {
    snprintf(out_text, cap, "; sessions of an earlier controller still to resume");
  }
  return true;
}

bool cw_ctl_resume_holds_worker(cw_controller_t* ctl, const cw_ctl_worker_t* w) {
  const struct cw_ctl_expect_s* x = ctl->expect;
  if (!x || !(x->num_left || x->cut)) return false;
  const Causeway__V1__RegisterPrevious* prev = w->reg ? w->reg->previous : NULL;
  if (!prev) return false;  // registered afresh: it holds no earlier session
  if (x->cut_all || prev->more_sessions) return true;
  for (size_t i = 0; i < prev->n_sessions && x->num_left; ++i) {
    const uint64_t* hit =
        bsearch(&prev->sessions[i], x->ids, x->num, sizeof(*x->ids), cw__cmp_u64);
    if (hit && x->left[hit - x->ids]) return true;
  }
  return false;
}

bool cw_ctl_resume_window(cw_controller_t* ctl) {
  cw__expect_settle(ctl, cw_time_now_ms());
  return ctl->expect != NULL;
}

void cw_ctl_resume_describe(cw_controller_t* ctl, char* out, size_t cap) {
  char text[160];
  bool hold = cw_ctl_resume_holds(ctl, text, sizeof(text));
  const struct cw_ctl_expect_s* x = ctl->expect;
  if (!x) {
    snprintf(out, cap, "%s", "");
    return;
  }
  int64_t until = hold ? x->hold_until_ms : x->until_ms;
  double left = (double)(until - cw_time_now_ms()) / 1000.0;
  snprintf(out, cap, "%s (at most %.1f s more)",
           hold ? text + 2 : "workers of an earlier controller may still register",
           left > 0 ? left : 0.0);
}

void cw_ctl_resume_free(cw_controller_t* ctl) {
  cw__expect_clear(ctl);
  free(ctl->expect_past);
  ctl->expect_past = NULL;
  ctl->num_expect_past = 0;
}

// Rebuilds the session and answers with its SessionInfo (or an error).
static void cw__resume(cw_controller_t* ctl, cw_ctl_resume_wait_t* rw) {
  cw_ctl_session_t* s = rw->session;
  const Causeway__V1__SessionResumeRequest* r = rw->req;
  cw_alloc_device_t* devs = NULL;
  uint32_t n = 0;
  cw_status_t st = cw__place_devices(ctl, r, &devs, &n);
  if (!st) st = cw__set_devices(ctl, s, r->open, devs, n);
  if (st) {
    CW_LOGW("session %" PRIu64 " cannot resume: %s", s->id, cw_status_message(st));
    cw_ctl_reply_error(ctl, rw->conn, CW_MSG_SESSION_RESUME, rw->request_id,
                       cw_status_annotate(st, "cannot resume session %" PRIu64, s->id));
    return;
  }
  size_t exes = cw__set_exes(ctl, s, r);
  if (r->open) cw_ctl_ops_session_opened(s, r->open);
  cw_ctl_ops_session_resumed(s);  // a pause the workers still apply
  // An OPEN_SESSION of this session waiting in the device queue is answered
  // by cw_ctl_resume_check's run of the queue, after every resume it can.
  CW_LOGI("session %" PRIu64 " resumed after %" PRId64 " ms: %zu devices%s, %zu of %zu "
          "executables", s->id, cw_time_now_ms() - rw->start_ms, r->n_devices,
          s->allocated ? " (allocated)" : "", exes, r->n_executables);
  // The reply and the session's connections to its workers, as OPEN_SESSION.
  cw_ctl_peer_t view;
  memset(&view, 0, sizeof(view));
  view.ctl = ctl;
  view.conn = rw->conn;
  view.session = s;
  cw_ctl_session_reply_info(ctl, &view, CW_MSG_SESSION_RESUME, rw->request_id);
}

void cw_ctl_resume_check(cw_controller_t* ctl, bool expire) {
  if (!ctl->resume_waits) return;
  int64_t now = cw_time_now_ms();
  // One index of the workers for every wait (a worker a resume registers
  // comes after it: the next check sees it).
  cw__names_t workers = {0};
  if (!cw__names_init(ctl, &workers)) workers.by_name = NULL;
  cw_ctl_resume_wait_t** pp = &ctl->resume_waits;
  bool answered = false;
  while (*pp) {
    cw_ctl_resume_wait_t* rw = *pp;
    bool gone = ctl->shutting_down || !cw_net_conn_is_open(rw->conn) || rw->session->closed;
    size_t missing = 0;
    const char* name = gone ? NULL : cw__missing_worker(&workers, rw, &missing);
    bool late = name && expire && now >= rw->deadline_ms;
    if (!gone && name && !late) {
      pp = &rw->next;
      continue;
    }
    *pp = rw->next;
    if (late) {
      char more[48] = "";
      if (missing > 1) snprintf(more, sizeof(more), " (and %zu more)", missing - 1);
      cw_ctl_reply_error(ctl, rw->conn, CW_MSG_SESSION_RESUME, rw->request_id,
                         cw_make_status(CW_DEADLINE_EXCEEDED, "session %" PRIu64 " waited %" PRId64
                                        " ms for worker %s%s to register again",
                                        rw->session->id, now - rw->start_ms, name, more));
    } else if (!gone) {
      cw__resume(ctl, rw);
    }
    // Resumed or not, it no longer holds new sessions back (after it has
    // its devices: the queue may go on now).
    cw__expect_done(ctl, rw->session->id);
    cw__wait_free(rw);
    answered = true;
  }
  free(workers.by_name);
  // The device queue runs once every resume that can be answered was: a
  // new session must not take a device of a resume later in the list (a
  // review: the queue ran after the first of two resumes naming one worker).
  if (answered) cw_ctl_alloc_check(ctl, false);
}

void cw_ctl_handle_session_resume(cw_net_conn_t* conn, const cw_frame_header_t* h,
                                  ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  Causeway__V1__SessionResumeRequest* r = (Causeway__V1__SessionResumeRequest*)*msg;
  cw_status_t st = cw__validate(r);
  // One wait per session: each holds its request and is checked every tick.
  for (cw_ctl_resume_wait_t* o = ctl->resume_waits; !st && o; o = o->next) {
    if (o->session != p->session) continue;
    st = cw_make_status(CW_FAILED_PRECONDITION, "SESSION_RESUME: session %" PRIu64 " already "
                        "waits to resume (request %" PRIu64 ")", o->session->id, o->request_id);
  }
  cw_ctl_resume_wait_t* rw = st ? NULL : calloc(1, sizeof(*rw));
  if (rw) rw->req = r;
  if (!st && (!rw || !cw__wait_names(rw))) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    if (rw) free(rw->names);
    free(rw);
    cw_ctl_reply_error(ctl, conn, h->type, h->request_id, st);
    return;
  }
  *msg = NULL;
  rw->conn = conn;
  cw_net_conn_retain(conn);
  rw->session = p->session;
  cw_ctl_session_retain(p->session);
  rw->request_id = h->request_id;
  rw->start_ms = cw_time_now_ms();
  uint32_t wait = r->open ? r->open->wait_ms : 0;
  rw->deadline_ms = rw->start_ms + (wait < CW__MAX_WAIT_MS ? wait : CW__MAX_WAIT_MS);
  cw_ctl_resume_wait_t** tail = &ctl->resume_waits;
  while (*tail) tail = &(*tail)->next;
  *tail = rw;
  if (!uv_is_active((uv_handle_t*)&ctl->open_tick) && !ctl->shutting_down) {
    uv_timer_start(&ctl->open_tick, cw_ctl_session_open_tick, CW__OPEN_TICK_MS, CW__OPEN_TICK_MS);
  }
  cw_ctl_resume_check(ctl, wait == 0);
}
