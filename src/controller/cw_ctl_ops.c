// Operations at the controller: the ADMIN_* requests of the `causeway` tool
// (docs/operations.md, docs/protocol.md).
//
//   ADMIN_STATUS  asks every live worker for STATS (on its private
//                 connection) and answers once all have replied, or after
//                 CW__STATUS_WAIT_MS with the numbers it last had. Nothing
//                 blocks: the replies continue the request. A 1 s timer polls
//                 the same way (skipping a worker that has not answered the
//                 last), so launches per second and `idle` stay current; with
//                 `max_age_ms` the last poll's numbers answer at once (a round
//                 waits for the slowest of N workers).
//   ADMIN_PAUSE / ADMIN_RESUME
//                 mark the session and send ADMIN_HOLD on its connection to
//                 every worker; the workers hold its launches (cw_worker_ops.c),
//                 whichever path they came by. A connection opened later
//                 holds too (cw_ctl_ops_link_opened).
//   ADMIN_DRAIN / ADMIN_UNDRAIN
//                 mark the worker (no new sessions or compiles get it) and send
//                 ADMIN_WORKER_DRAIN; the worker refuses new work and reports
//                 `idle` in STATS once nothing is in flight.
// A new controller knows neither: a worker's REGISTER reports its drain and
// the sessions it holds paused (RegisterPrevious), taken as the controller's
// own unless this controller's ADMIN_* decided otherwise, which the worker is
// then told (cw_ctl_ops_worker_registered, cw_ctl_ops_session_resumed).
// Every error the controller answers is also kept in a ring of the last
// CW__RECENT_ERRORS for ADMIN_STATUS.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_resume.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"

#define CW__RECENT_ERRORS 32
#define CW__POLL_MS 1000
#define CW__STATUS_WAIT_MS 3000
// A PAUSE/RESUME/DRAIN/UNDRAIN answers by then even if a worker is silent.
#define CW__FANOUT_WAIT_MS 10000
#define CW__RATE_SAMPLES 6  // one a poll: launches per second over the last 5 s

typedef struct cw_ctl_recent_error_s {
  int64_t unix_ms;
  char where[96];
  uint32_t code;
  char text[512];
} cw_ctl_recent_error_t;

// One STATS round over the live workers; client NULL for the timer's polls.
typedef struct cw_ctl_gather_s {
  struct cw_ctl_gather_s* next;
  cw_controller_t* ctl;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  uint64_t serial;
  int left;  // STATS requests outstanding, plus one while sending
  bool replied;
  int64_t deadline_ms;
  int64_t stats_ms;  // when the numbers it answers were polled (0: this round)
  int64_t start_ms;
} cw_ctl_gather_t;

struct cw_ctl_fanout_s;

typedef struct cw_ctl_ops_s {
  uv_timer_t timer;
  struct cw_ctl_fanout_s* fanouts;  // waiting for workers
  bool timer_open;
  int64_t start_ms;
  cw_ctl_recent_error_t errors[CW__RECENT_ERRORS];
  size_t error_next, error_count;
  cw_ctl_gather_t* gathers;
  uint64_t next_serial;
  uint64_t polled_serial;  // the last timer poll every worker it asked answered
  int64_t polled_ms;       // when it began: its numbers are at most this old (0: none yet)
} cw_ctl_ops_t;

typedef struct cw_ctl_session_stat_s {
  uint64_t session_id, buffers, buffer_bytes, launches_held;
  uint64_t memory_waiting, memory_waiting_bytes;
} cw_ctl_session_stat_t;

struct cw_ctl_worker_ops_s {
  bool draining;
  // Sessions its REGISTER reported paused that no session here had then
  // (sorted): a session that resumes with one of these ids is paused.
  uint64_t* paused_reported;
  size_t num_paused_reported;
  uint64_t serial;  // of the last round it answered
  Causeway__V1__Stats last;  // scalar fields only (session_stats below)
  char memory_budget_source[64];  // last.memory_budget_source's text
  cw_ctl_session_stat_t* sessions;
  size_t num_sessions;
  uint64_t rate_launches[CW__RATE_SAMPLES];  // ring, oldest at rate_first
  int64_t rate_ms[CW__RATE_SAMPLES];
  size_t rate_first, rate_count;
  double launches_per_sec;
  int64_t last_ms;  // when `last` arrived (CLOCK_MONOTONIC); 0: never
  bool polled;      // a timer poll's STATS to it is unanswered: the next polls skip it
};

struct cw_ctl_session_ops_s {
  char name[CW__MAX_NAME];
  char host[CW__MAX_NAME];
  uint32_t pid;
  bool opened;
  bool paused;
  bool pause_set;  // by ADMIN_PAUSE/RESUME here: a worker's report does not undo it
  int32_t* devices;
  size_t num_devices;
};

// A request answered once every worker it went to has replied, or at its
// deadline with what is missing (it lives on until the last reply).
typedef struct cw_ctl_fanout_s {
  struct cw_ctl_fanout_s* next;
  struct cw_ctl_fanout_s* prev;
  int64_t deadline_ms;
  bool replied;
  int sent, answered;
  cw_controller_t* ctl;
  cw_net_conn_t* client;  // retained
  uint16_t type;
  uint64_t request_id;
  int left;
  uint64_t session_id;
  uint64_t held;
  cw_status_t first_error;
  char text[512];
} cw_ctl_fanout_t;

static int64_t cw__mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t cw__unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Printable ASCII only, at most n-1 bytes: names come from peers.
static void cw__clean_copy(char* dst, size_t n, const char* src) {
  size_t k = 0;
  for (; src && *src && k + 1 < n; ++src) dst[k++] = (*src >= 0x20 && *src < 0x7f) ? *src : '?';
  dst[k] = 0;
}

static struct cw_ctl_worker_ops_s* cw__wops(cw_ctl_worker_t* w) {
  if (!w->ops) w->ops = calloc(1, sizeof(*w->ops));
  return w->ops;
}

static struct cw_ctl_session_ops_s* cw__sops(cw_ctl_session_t* s) {
  if (!s->ops) s->ops = calloc(1, sizeof(*s->ops));
  return s->ops;
}

const Causeway__V1__Stats* cw_ctl_ops_worker_stats(const cw_ctl_worker_t* w,
                                                   double* out_age_s) {
  if (!w->ops || !w->ops->last_ms) return NULL;
  *out_age_s = (double)(cw__mono_ms() - w->ops->last_ms) / 1e3;
  return &w->ops->last;
}

// --- Hooks called by cw_controller.c -------------------------------------------------

void cw_ctl_ops_record_error(cw_controller_t* ctl, const char* where, uint16_t type,
                             cw_status_t st) {
  cw_ctl_ops_t* ops = ctl->ops;
  if (!ops) return;
  cw_ctl_recent_error_t* e = &ops->errors[ops->error_next];
  ops->error_next = (ops->error_next + 1) % CW__RECENT_ERRORS;
  if (ops->error_count < CW__RECENT_ERRORS) ops->error_count++;
  e->unix_ms = cw__unix_ms();
  char full[160];
  snprintf(full, sizeof(full), "%s %s", cw_msg_type_name(type), where ? where : "");
  cw__clean_copy(e->where, sizeof(e->where), full);
  e->code = (uint32_t)cw_status_code(st);
  cw__clean_copy(e->text, sizeof(e->text), st ? cw_status_message(st) : "");
}

void cw_ctl_ops_session_opened(cw_ctl_session_t* s, const Causeway__V1__OpenSessionRequest* r) {
  struct cw_ctl_session_ops_s* so = cw__sops(s);
  if (!so) return;
  so->opened = true;
  if (r->name && r->name[0]) cw__clean_copy(so->name, sizeof(so->name), r->name);
  else if (!so->name[0]) snprintf(so->name, sizeof(so->name), "session-%" PRIu64, s->id);
  cw__clean_copy(so->host, sizeof(so->host), r->client_host);
  so->pid = r->client_pid;
}

void cw_ctl_ops_session_devices(cw_ctl_session_t* s, const Causeway__V1__GlobalDevice* devs,
                                size_t n) {
  int32_t* ids = calloc(n + 1, sizeof(int32_t));
  if (!ids) return;
  for (size_t i = 0; i < n; ++i) ids[i] = devs[i].global_id;
  cw_ctl_ops_session_device_ids(s, ids, n);
}

void cw_ctl_ops_session_device_ids(cw_ctl_session_t* s, int32_t* ids, size_t n) {
  struct cw_ctl_session_ops_s* so = cw__sops(s);
  if (!so) {
    free(ids);
    return;
  }
  free(so->devices);
  so->devices = ids;
  so->num_devices = n;
}

const char* cw_ctl_ops_session_name(const cw_ctl_session_t* s) {
  return s->ops ? s->ops->name : "";
}

void cw_ctl_ops_session_free(cw_ctl_session_t* s) {
  if (!s->ops) return;
  free(s->ops->devices);
  free(s->ops);
  s->ops = NULL;
}

void cw_ctl_ops_worker_free(cw_ctl_worker_t* w) {
  if (!w->ops) return;
  free(w->ops->sessions);
  free(w->ops->paused_reported);
  free(w->ops);
  w->ops = NULL;
}

void cw_ctl_ops_worker_replaced(cw_ctl_worker_t* w) {
  struct cw_ctl_worker_ops_s* wo = w->ops;
  if (!wo) return;
  bool draining = wo->draining;  // the slot's, as the operator set it
  free(wo->sessions);
  free(wo->paused_reported);
  memset(wo, 0, sizeof(*wo));
  wo->draining = draining;
}

bool cw_ctl_ops_worker_takes_work(const cw_ctl_worker_t* w) {
  return !(w->ops && w->ops->draining);
}

// --- Fan-out replies (PAUSE, RESUME, DRAIN, UNDRAIN) ---------------------------------

static void cw__fanout_free(cw_ctl_fanout_t* f) {
  cw_ctl_ops_t* ops = f->ctl->ops;
  if (f->prev) f->prev->next = f->next;
  else if (ops) ops->fanouts = f->next;
  if (f->next) f->next->prev = f->prev;
  cw_status_free(f->first_error);
  cw_net_conn_release(f->client);
  free(f);
}

static void cw__fanout_done(cw_ctl_fanout_t* f, cw_status_t st) {
  if (st && !f->first_error) f->first_error = st;
  else cw_status_free(st);
  if (--f->left > 0) return;
  if (f->replied) {
    // Answered at the deadline already.
  } else if (f->first_error) {
    cw_ctl_reply_error(f->ctl, f->client, f->type, f->request_id, f->first_error);
    f->first_error = NULL;
  } else {
    Causeway__V1__AdminAck ack = CAUSEWAY__V1__ADMIN_ACK__INIT;
    ack.session_id = f->session_id;
    ack.launches_held = f->held;
    ack.text = f->text;
    cw_net_conn_reply(f->client, f->type, f->request_id, &ack.base);
  }
  cw__fanout_free(f);
}

// The deadline passed with workers silent: the admin hears so now. The
// request stays in effect where it arrived (and where it arrives later).
static void cw__fanout_expire(cw_ctl_fanout_t* f) {
  f->replied = true;
  int silent = f->sent - f->answered;
  cw_ctl_reply_error(f->ctl, f->client, f->type, f->request_id,
                     cw_make_status(CW_DEADLINE_EXCEEDED, "%s: %d of %d workers did not answer "
                                    "within %d ms; it applies on those that did, and on the "
                                    "others when they read it", cw_msg_type_name(f->type),
                                    silent, f->sent, CW__FANOUT_WAIT_MS));
}

static void cw__fanout_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                             const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_fanout_t* f = user;
  free(bulk);
  f->answered++;
  if (!status) {
    const Causeway__V1__AdminAck* a = (const Causeway__V1__AdminAck*)reply;
    f->held += a->launches_held;
    if (f->type == CW_MSG_ADMIN_DRAIN || f->type == CW_MSG_ADMIN_UNDRAIN) {
      snprintf(f->text, sizeof(f->text), "%s", a->text ? a->text : "");
    }
  } else {
    status = cw_status_annotate(status, "%s", cw_net_conn_name(conn));
  }
  cw__fanout_done(f, status);
}

static cw_ctl_fanout_t* cw__fanout_create(cw_ctl_peer_t* p, const cw_frame_header_t* h) {
  cw_ctl_fanout_t* f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  f->ctl = p->ctl;
  f->client = p->conn;
  cw_net_conn_retain(p->conn);
  f->type = h->type;
  f->request_id = h->request_id;
  f->left = 1;  // released by the handler once every request is out
  f->deadline_ms = cw__mono_ms() + CW__FANOUT_WAIT_MS;
  cw_ctl_ops_t* ops = p->ctl->ops;
  f->next = ops->fanouts;
  if (f->next) f->next->prev = f;
  ops->fanouts = f;
  return f;
}

// --- PAUSE, RESUME ----------------------------------------------------------------

// f NULL: nobody waits for the answer.
static void cw__send_hold(cw_ctl_session_t* s, cw_net_conn_t* link, bool hold,
                          cw_ctl_fanout_t* f) {
  Causeway__V1__AdminHoldRequest req = CAUSEWAY__V1__ADMIN_HOLD_REQUEST__INIT;
  req.session_id = s->id;
  req.hold = hold;
  if (f) {
    f->left++;
    f->sent++;
  }
  cw_net_conn_request(link, CW_MSG_ADMIN_HOLD, &req.base, NULL, 0, NULL, NULL,
                      f ? cw__fanout_reply : cw_ctl_ignore_reply, f);
}

void cw_ctl_ops_link_opened(cw_ctl_session_t* s, uint32_t index, cw_net_conn_t* link) {
  if (s->ops && s->ops->paused) cw__send_hold(s, link, true, NULL);
}

// To every live worker; a hold also opens a connection where the session has
// none (the hook holds there): its launches sent straight there are held too.
static void cw__hold_everywhere(cw_controller_t* ctl, cw_ctl_session_t* s, bool hold,
                                cw_ctl_fanout_t* f) {
  for (uint32_t i = 0; i < ctl->num_workers; ++i) {
    if (!ctl->workers[i]->alive) continue;
    bool linked = i < s->num_links && s->links[i] && cw_net_conn_is_open(s->links[i]);
    if (linked) {
      cw__send_hold(s, s->links[i], hold, f);
    } else if (hold) {
      (void)cw_ctl_session_link(s, i);
    }
  }
}

// Worker w reported session s paused (REGISTER): a pause an earlier
// controller set. Taken unless an ADMIN_RESUME here said otherwise; then w,
// which still holds, is told to release.
static void cw__pause_reported(cw_controller_t* ctl, cw_ctl_session_t* s, cw_ctl_worker_t* w) {
  struct cw_ctl_session_ops_s* so = cw__sops(s);
  if (!so) return;
  if (so->pause_set && !so->paused) {
    cw_net_conn_t* link = cw_ctl_session_link(s, w->index);
    if (link) cw__send_hold(s, link, false, NULL);
    return;
  }
  if (so->paused) return;
  so->paused = true;
  CW_LOGI("session %" PRIu64 " paused: worker %s holds it (paused before the controller restarted)",
          s->id, w->name);
  cw__hold_everywhere(ctl, s, true, NULL);
}

static int cw__cmp_id(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

void cw_ctl_ops_session_resumed(cw_ctl_session_t* s) {
  cw_controller_t* ctl = s->ctl;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    struct cw_ctl_worker_ops_s* wo = w->ops;
    if (!w->alive || !wo || !wo->num_paused_reported) continue;
    uint64_t* hit =
        bsearch(&s->id, wo->paused_reported, wo->num_paused_reported, sizeof(uint64_t), cw__cmp_id);
    if (!hit) continue;
    // Taken once: a later resume of the session here must not pause it again.
    size_t k = (size_t)(hit - wo->paused_reported);
    memmove(hit, hit + 1, (wo->num_paused_reported - k - 1) * sizeof(uint64_t));
    wo->num_paused_reported--;
    cw__pause_reported(ctl, s, w);
  }
}

bool cw_ctl_ops_session_is_open(const cw_ctl_session_t* s) {
  return !s->closed && s->ops && s->ops->opened;
}

// The session a PAUSE/RESUME names, or an error naming what was asked for.
static cw_status_t cw__session_lookup(cw_controller_t* ctl,
                                      const Causeway__V1__AdminSessionRequest* r,
                                      cw_ctl_session_t** out) {
  *out = NULL;
  size_t matches = 0;
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    if (!cw_ctl_ops_session_is_open(s)) continue;
    bool hit = r->session_id ? s->id == r->session_id
                             : (r->name && r->name[0] && !strcmp(s->ops->name, r->name));
    if (hit) {
      if (!*out) *out = s;
      matches++;
    }
  }
  if (matches == 1) return cw_ok_status();
  char want[CW__MAX_NAME + 32];
  if (r->session_id) snprintf(want, sizeof(want), "session %" PRIu64, r->session_id);
  else snprintf(want, sizeof(want), "session '%.*s'", CW__MAX_NAME, r->name ? r->name : "");
  if (matches > 1) {
    *out = NULL;
    return cw_make_status(CW_INVALID_ARGUMENT, "%s names %zu sessions; give its id (causeway "
                          "status lists them)", want, matches);
  }
  char names[512];
  size_t used = 0;
  names[0] = 0;
  for (cw_ctl_session_t* s = ctl->sessions; s && used < sizeof(names) - 1; s = s->next) {
    if (!cw_ctl_ops_session_is_open(s)) continue;
    int n = snprintf(names + used, sizeof(names) - used, "%s%" PRIu64 " (%s)", used ? ", " : "",
                     s->id, s->ops->name);
    if (n > 0) used += (size_t)n < sizeof(names) - used ? (size_t)n : sizeof(names) - used - 1;
  }
  return cw_make_status(CW_NOT_FOUND, "%s not found; open sessions: %s", want,
                        used ? names : "none");
}

static void cw__handle_pause(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                             const Causeway__V1__AdminSessionRequest* r) {
  cw_controller_t* ctl = p->ctl;
  bool hold = h->type == CW_MSG_ADMIN_PAUSE;
  cw_ctl_session_t* s = NULL;
  cw_status_t st = cw__session_lookup(ctl, r, &s);
  cw_ctl_fanout_t* f = st ? NULL : cw__fanout_create(p, h);
  if (!st && !f) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (st) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id, st);
    return;
  }
  s->ops->paused = hold;
  s->ops->pause_set = true;
  f->session_id = s->id;
  cw__hold_everywhere(ctl, s, hold, f);
  CW_LOGI("session %" PRIu64 " (%s) %s", s->id, s->ops->name, hold ? "paused" : "resumed");
  snprintf(f->text, sizeof(f->text), "session %" PRIu64 " (%s) %s", s->id, s->ops->name,
           hold ? "paused" : "resumed");
  cw__fanout_done(f, cw_ok_status());
}

// --- DRAIN, UNDRAIN ------------------------------------------------------------------

// f NULL: nobody waits for the answer.
static void cw__send_drain(cw_net_conn_t* link, bool drain, cw_ctl_fanout_t* f) {
  Causeway__V1__AdminWorkerDrainRequest req = CAUSEWAY__V1__ADMIN_WORKER_DRAIN_REQUEST__INIT;
  req.drain = drain;
  cw_net_conn_request(link, CW_MSG_ADMIN_WORKER_DRAIN, &req.base, NULL, 0, NULL, NULL,
                      f ? cw__fanout_reply : cw_ctl_ignore_reply, f);
}

// The worker's private (compile) connection, opened when needed.
static void cw__handle_drain(cw_ctl_peer_t* p, const cw_frame_header_t* h,
                             const Causeway__V1__AdminDrainRequest* r) {
  cw_controller_t* ctl = p->ctl;
  cw_ctl_worker_t* w = NULL;
  // The newest registration of that name (a replacement takes over the name).
  for (size_t i = ctl->num_workers; i-- > 0 && !w;) {
    if (r->worker && !strcmp(ctl->workers[i]->name, r->worker)) w = ctl->workers[i];
  }
  cw_status_t st = cw_ok_status();
  if (!w) {
    char names[512];
    size_t used = 0;
    names[0] = 0;
    for (size_t i = 0; i < ctl->num_workers && used < sizeof(names) - 1; ++i) {
      int n = snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
                       ctl->workers[i]->name);
      if (n > 0) used += (size_t)n < sizeof(names) - used ? (size_t)n : sizeof(names) - used - 1;
    }
    st = cw_make_status(CW_NOT_FOUND, "worker '%.*s' not found; workers: %s", CW__MAX_NAME,
                        r->worker ? r->worker : "", used ? names : "none");
  } else if (!w->alive) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "worker %s (%s) is dead", w->name, w->address);
  }
  struct cw_ctl_worker_ops_s* wo = st ? NULL : cw__wops(w);
  cw_ctl_fanout_t* f = wo ? cw__fanout_create(p, h) : NULL;
  cw_net_conn_t* link = f ? cw_ctl_private_link(ctl, w) : NULL;
  if (!st && !link) {
    st = f ? cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: no connection",
                            w->name, w->address)
           : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    if (f) cw__fanout_free(f);
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id, st);
    return;
  }
  wo->draining = h->type == CW_MSG_ADMIN_DRAIN;
  CW_LOGI("worker %s (%s): %s", w->name, w->address, wo->draining ? "draining" : "undrained");
  f->left++;
  f->sent++;
  cw__send_drain(link, wo->draining, f);
  cw__fanout_done(f, cw_ok_status());
  // An undrained worker's devices may go to sessions waiting for them; a
  // drained one's make requests that need them wait for it, not before
  // others (cw_ctl_alloc_check).
  cw_ctl_alloc_check(ctl, false);
}

void cw_ctl_ops_worker_registered(cw_ctl_worker_t* w, bool took_over) {
  cw_controller_t* ctl = w->ctl;
  const Causeway__V1__RegisterPrevious* prev = w->reg ? w->reg->previous : NULL;
  bool draining = prev && prev->draining;
  struct cw_ctl_worker_ops_s* wo =
      (draining || took_over || (prev && prev->n_paused_sessions)) ? cw__wops(w) : NULL;
  if (!wo) return;
  if (!took_over && draining) {
    wo->draining = true;
    CW_LOGI("worker %s (%s): draining, as it reports (drained before the controller restarted)",
            w->name, w->address);
  } else if (took_over && wo->draining != draining) {
    // The slot's drain, as the operator set it here, goes to its new worker.
    cw_net_conn_t* link = cw_ctl_private_link(ctl, w);
    if (link) cw__send_drain(link, wo->draining, NULL);
  }
  size_t n = prev ? prev->n_paused_sessions : 0;
  uint64_t* later = n ? malloc(n * sizeof(*later)) : NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    cw_ctl_session_t* s = cw_ctl_session_find(ctl, prev->paused_sessions[i]);
    if (s) {
      cw__pause_reported(ctl, s, w);
    } else if (later) {
      later[k++] = prev->paused_sessions[i];
    }
  }
  if (n && !later) CW_LOGW("worker %s: out of memory keeping its paused sessions", w->name);
  if (k) qsort(later, k, sizeof(*later), cw__cmp_id);
  size_t u = 0;  // once each: a duplicate would pause its session again after a resume
  for (size_t i = 0; i < k; ++i) {
    if (!u || later[u - 1] != later[i]) later[u++] = later[i];
  }
  k = u;
  free(wo->paused_reported);
  wo->paused_reported = later;
  wo->num_paused_reported = k;
}

// --- STATUS -------------------------------------------------------------------------

typedef struct cw_ctl_poll_s {
  cw_ctl_gather_t* g;
  uint32_t worker;
  bool timer;
} cw_ctl_poll_t;

static const char* cw__worker_state(const cw_ctl_worker_t* w) {
  if (!w->alive) return "dead";
  if (!w->ops || !w->ops->draining) return "alive";
  // Idle only on word from the worker since the drain began.
  return (w->ops->last.draining && w->ops->last.idle) ? "idle" : "draining";
}

static int cw__by_session_id(const void* a, const void* b) {
  uint64_t x = (*(Causeway__V1__AdminSession* const*)a)->session_id;
  uint64_t y = (*(Causeway__V1__AdminSession* const*)b)->session_id;
  return (x > y) - (x < y);
}

static void cw__reply_status(cw_controller_t* ctl, cw_ctl_gather_t* g) {
  cw_ctl_ops_t* ops = ctl->ops;
  Causeway__V1__AdminStatus rep = CAUSEWAY__V1__ADMIN_STATUS__INIT;
  rep.controller = ctl->name;
  rep.uptime_ms = cw__mono_ms() - ops->start_ms;
  rep.compiles = ctl->compiles;
  rep.cache_hits = ctl->cache_hits;
  rep.cache_misses = ctl->cache_misses;
  rep.cache_bytes = cw_compile_cache_bytes(ctl->cache);
  rep.launches = ctl->launches_relayed;
  rep.errors = ctl->errors;
  // At least 1: 0 means numbers asked for this reply.
  if (g->stats_ms) {
    int64_t age = cw__mono_ms() - g->stats_ms;
    rep.stats_age_ms = age > 0 ? age : 1;
  }
  char hold[192];
  cw_ctl_resume_describe(ctl, hold, sizeof(hold));
  rep.resume_hold = hold;
  rep.revision = CW_PROTOCOL_REVISION;
  size_t nw = ctl->num_workers, ns = 0;
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) ns += cw_ctl_ops_session_is_open(s);
  Causeway__V1__AdminWorker* ws = calloc(nw + 1, sizeof(*ws));
  Causeway__V1__AdminWorker** wp = calloc(nw + 1, sizeof(*wp));
  Causeway__V1__AdminIsland* is = calloc(nw + 1, sizeof(*is));
  Causeway__V1__AdminIsland** ip = calloc(nw + 1, sizeof(*ip));
  char** inames = calloc(nw + 1, sizeof(*inames));
  Causeway__V1__AdminSession* ss = calloc(ns + 1, sizeof(*ss));
  Causeway__V1__AdminSession** sp = calloc(ns + 1, sizeof(*sp));
  Causeway__V1__AdminError* es = calloc(CW__RECENT_ERRORS, sizeof(*es));
  Causeway__V1__AdminError** ep = calloc(CW__RECENT_ERRORS, sizeof(*ep));
  if (!ws || !wp || !is || !ip || !inames || !ss || !sp || !es || !ep) {
    cw_ctl_reply_error(ctl, g->client, CW_MSG_ADMIN_STATUS, g->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    goto done;
  }
  for (size_t i = 0; i < nw; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    const struct cw_ctl_worker_ops_s* wo = w->ops;
    Causeway__V1__AdminWorker* a = &ws[i];
    causeway__v1__admin_worker__init(a);
    a->index = w->index;
    a->name = w->name;
    a->address = w->address;
    a->state = (char*)cw__worker_state(w);
    a->num_devices = w->num_devices;
    a->first_device = w->first_device;
    a->island = w->island;
    a->platform = w->reg && w->reg->inventory ? w->reg->inventory->platform_name : (char*)"";
    a->revision = w->reg ? w->reg->revision : 0;
    uint64_t island_queued = cw_ctl_sched_queued(w, false);
    a->queue_depth = island_queued;
    if (wo && w->alive) {
      a->buffers = wo->last.buffers;
      a->buffer_bytes = wo->last.buffer_bytes;
      a->executables = wo->last.executables;
      a->launches = wo->last.launches;
      a->launches_per_sec = wo->launches_per_sec;
      a->queue_depth += wo->last.launches_queued;
      a->launches_in_flight = wo->last.launches_in_flight;
      a->launches_held = wo->last.launches_held;
      a->uploads = wo->last.uploads;
      a->downloads = wo->last.downloads;
      a->errors = wo->last.errors;
      a->transfers_pending = wo->last.transfers_pending;
      a->stats_fresh = g->serial && wo->serial >= g->serial;
      a->memory_budget = wo->last.memory_budget;
      a->memory_budget_source = (char*)wo->memory_budget_source;
      a->memory_in_use = wo->last.memory_in_use;
      a->memory_in_use_max = wo->last.memory_in_use_max;
      a->memory_waiting = wo->last.memory_waiting;
      a->memory_waiting_bytes = wo->last.memory_waiting_bytes;
      a->memory_waits = wo->last.memory_waits;
      a->memory_wait_timeouts = wo->last.memory_wait_timeouts;
      a->memory_refused = wo->last.memory_refused;
    }
    wp[i] = a;
  }
  // An island is one worker's devices, or those of the workers of one
  // --island (cw_ctl_island.c), listed in rank order.
  size_t ni = 0, nn = 0;
  for (size_t i = 0; i < nw; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    if (w->island != w->index) continue;
    causeway__v1__admin_island__init(&is[ni]);
    is[ni].index = w->index;
    is[ni].workers = &inames[nn];
    is[ni].queued = cw_ctl_sched_queued(w, false);
    // A worker alone is its own island; only --island ones need the scan of
    // every worker for their members (once per such island, not per worker).
    uint32_t* members = calloc(w->island_size ? w->island_size : 1, sizeof(uint32_t));
    size_t m = !members               ? 0
               : w->island_size <= 1 ? (members[0] = w->index, 1)
                                     : cw_ctl_island_members(ctl, w->index, members,
                                                             w->island_size);
    for (size_t k = 0; k < m && nn < nw; ++k) {
      inames[nn++] = ctl->workers[members[k]]->name;
      is[ni].num_devices += ctl->workers[members[k]]->num_devices;
    }
    is[ni].n_workers = m;
    free(members);
    ip[ni] = &is[ni];
    ni++;
  }
  rep.workers = wp;
  rep.n_workers = nw;
  rep.islands = ip;
  rep.n_islands = ni;
  size_t k = 0;
  for (cw_ctl_session_t* s = ctl->sessions; s && k < ns; s = s->next) {
    if (!cw_ctl_ops_session_is_open(s)) continue;
    Causeway__V1__AdminSession* a = &ss[k];
    causeway__v1__admin_session__init(a);
    a->session_id = s->id;
    a->name = s->ops->name;
    a->client_host = s->ops->host;
    a->client_pid = s->ops->pid;
    a->devices = s->ops->devices;
    a->n_devices = s->ops->num_devices;
    a->waiting_for_devices = cw_ctl_alloc_waiting(ctl, s);
    a->paused = s->ops->paused;
    a->clients = (uint32_t)s->clients;
    a->executables = (uint32_t)s->num_exes;
    sp[k++] = a;
  }
  // Each worker's numbers per session, added to the session's row: one pass
  // over the workers, the rows found by id (sorted), not workers x sessions.
  qsort(sp, k, sizeof(*sp), cw__by_session_id);
  for (size_t i = 0; i < nw; ++i) {
    const struct cw_ctl_worker_ops_s* wo = ctl->workers[i]->ops;
    if (!wo || !ctl->workers[i]->alive) continue;
    for (size_t j = 0; j < wo->num_sessions; ++j) {
      const cw_ctl_session_stat_t* x = &wo->sessions[j];
      Causeway__V1__AdminSession key = {.session_id = x->session_id}, *kp = &key;
      Causeway__V1__AdminSession** hit = bsearch(&kp, sp, k, sizeof(*sp), cw__by_session_id);
      if (!hit) continue;
      (*hit)->buffers += x->buffers;
      (*hit)->buffer_bytes += x->buffer_bytes;
      (*hit)->launches_held += x->launches_held;
      (*hit)->memory_waiting += x->memory_waiting;
      (*hit)->memory_waiting_bytes += x->memory_waiting_bytes;
    }
  }
  rep.sessions = sp;
  rep.n_sessions = k;
  size_t first = (ops->error_next + CW__RECENT_ERRORS - ops->error_count) % CW__RECENT_ERRORS;
  for (size_t i = 0; i < ops->error_count; ++i) {
    const cw_ctl_recent_error_t* e = &ops->errors[(first + i) % CW__RECENT_ERRORS];
    causeway__v1__admin_error__init(&es[i]);
    es[i].unix_ms = e->unix_ms;
    es[i].where = (char*)e->where;
    es[i].code = e->code;
    es[i].message = (char*)e->text;
    ep[i] = &es[i];
  }
  rep.recent_errors = ep;
  rep.n_recent_errors = ops->error_count;
  cw_net_conn_reply(g->client, CW_MSG_ADMIN_STATUS, g->request_id, &rep.base);
done:
  free(ws);
  free(wp);
  free(is);
  free(ip);
  free(inames);
  free(ss);
  free(sp);
  free(es);
  free(ep);
}

static void cw__gather_unlink(cw_ctl_ops_t* ops, cw_ctl_gather_t* g) {
  cw_ctl_gather_t** pp = &ops->gathers;
  while (*pp && *pp != g) pp = &(*pp)->next;
  if (*pp) *pp = g->next;
}

// A timer poll is done (every worker it asked answered): --max-age answers
// from its numbers, `stats_fresh` for those that answered it.
static void cw__poll_ended(cw_ctl_ops_t* ops, cw_ctl_gather_t* g) {
  if (g->client || g->serial <= ops->polled_serial) return;
  ops->polled_serial = g->serial;
  ops->polled_ms = g->start_ms;
}

// Answers the status request (once) and frees the round when nothing is outstanding.
static void cw__gather_settle(cw_ctl_gather_t* g, bool answer) {
  cw_controller_t* ctl = g->ctl;
  if (answer && !g->replied) {
    g->replied = true;
    if (g->client) cw__reply_status(ctl, g);
  }
  if (g->left > 0) return;
  cw__poll_ended(ctl->ops, g);
  cw__gather_unlink(ctl->ops, g);
  if (g->client) cw_net_conn_release(g->client);
  free(g);
}

static void cw__keep_stats(cw_ctl_worker_t* w, const Causeway__V1__Stats* st, uint64_t serial) {
  struct cw_ctl_worker_ops_s* wo = cw__wops(w);
  if (!wo) return;
  cw_ctl_session_stat_t* sess = calloc(st->n_session_stats + 1, sizeof(*sess));
  if (sess) {
    for (size_t i = 0; i < st->n_session_stats; ++i) {
      sess[i].session_id = st->session_stats[i]->session_id;
      sess[i].buffers = st->session_stats[i]->buffers;
      sess[i].buffer_bytes = st->session_stats[i]->buffer_bytes;
      sess[i].launches_held = st->session_stats[i]->launches_held;
      sess[i].memory_waiting = st->session_stats[i]->memory_waiting;
      sess[i].memory_waiting_bytes = st->session_stats[i]->memory_waiting_bytes;
    }
    free(wo->sessions);
    wo->sessions = sess;
    wo->num_sessions = st->n_session_stats;
  }
  wo->last = *st;
  wo->last.peers = NULL;
  wo->last.n_peers = 0;
  wo->last.session_stats = NULL;
  wo->last.n_session_stats = 0;
  wo->last.sched_stamps = NULL;  // borrowed from the reply, like the two above
  wo->last.n_sched_stamps = 0;
  cw__clean_copy(wo->memory_budget_source, sizeof(wo->memory_budget_source),
                 st->memory_budget_source);
  wo->last.memory_budget_source = wo->memory_budget_source;
  if (serial > wo->serial) wo->serial = serial;
  // Launches per second over the samples kept (at most one per poll period).
  int64_t now = cw__mono_ms();
  wo->last_ms = now;
  size_t last = (wo->rate_first + wo->rate_count + CW__RATE_SAMPLES - 1) % CW__RATE_SAMPLES;
  if (wo->rate_count && st->launches < wo->rate_launches[last]) wo->rate_count = 0;  // restarted
  if (wo->rate_count && now - wo->rate_ms[last] < CW__POLL_MS) return;
  if (wo->rate_count == CW__RATE_SAMPLES) {
    wo->rate_first = (wo->rate_first + 1) % CW__RATE_SAMPLES;
    wo->rate_count--;
  }
  size_t slot = (wo->rate_first + wo->rate_count++) % CW__RATE_SAMPLES;
  wo->rate_launches[slot] = st->launches;
  wo->rate_ms[slot] = now;
  size_t first = wo->rate_first;
  wo->launches_per_sec =
      wo->rate_count < 2 ? 0.0
                         : (double)(st->launches - wo->rate_launches[first]) * 1000.0 /
                               (double)(now - wo->rate_ms[first]);
}

static void cw__poll_reply(void* user, cw_net_conn_t* conn, cw_status_t status,
                           const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_poll_t* pl = user;
  cw_ctl_gather_t* g = pl->g;
  cw_controller_t* ctl = g->ctl;
  free(bulk);
  if (pl->timer && pl->worker < ctl->num_workers && ctl->workers[pl->worker]->ops) {
    ctl->workers[pl->worker]->ops->polled = false;
  }
  if (!status && pl->worker < ctl->num_workers) {
    cw__keep_stats(ctl->workers[pl->worker], (const Causeway__V1__Stats*)reply, g->serial);
  } else if (status) {
    CW_LOGD("STATS from %s: %s", cw_net_conn_name(conn), cw_status_message(status));
  }
  cw_status_free(status);
  free(pl);
  g->left--;
  cw__gather_settle(g, g->left == 0);
}

// Starts a STATS round; client NULL: the timer's poll. A client's with
// max_age_ms answers from the last poll when it is that recent.
static void cw__gather_start(cw_controller_t* ctl, cw_net_conn_t* client, uint64_t request_id,
                             uint32_t max_age_ms) {
  cw_ctl_ops_t* ops = ctl->ops;
  cw_ctl_gather_t* g = calloc(1, sizeof(*g));
  if (!g) {
    if (client) {
      cw_ctl_reply_error(ctl, client, CW_MSG_ADMIN_STATUS, request_id,
                      cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    }
    return;
  }
  g->ctl = ctl;
  g->client = client;
  if (client) cw_net_conn_retain(client);
  g->request_id = request_id;
  int64_t now = cw__mono_ms();
  g->start_ms = now;
  g->next = ops->gathers;
  ops->gathers = g;
  if (client && max_age_ms && ops->polled_ms && now - ops->polled_ms <= (int64_t)max_age_ms) {
    g->serial = ops->polled_serial;
    g->stats_ms = ops->polled_ms;
    cw__gather_settle(g, true);
    return;
  }
  g->serial = ++ops->next_serial;
  g->deadline_ms = now + CW__STATUS_WAIT_MS;
  g->left = 1;
  for (uint32_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* w = ctl->workers[i];
    if (!w->alive || ctl->shutting_down) continue;
    // A worker still silent since an earlier poll holds up no later one
    // (its numbers are then listed as not fresh).
    struct cw_ctl_worker_ops_s* wo = client ? NULL : cw__wops(w);
    if (wo && wo->polled) continue;
    cw_net_conn_t* link = cw_ctl_private_link(ctl, w);
    cw_ctl_poll_t* pl = link ? calloc(1, sizeof(*pl)) : NULL;
    if (!pl) continue;
    pl->g = g;
    pl->worker = i;
    pl->timer = !client;
    if (wo) wo->polled = true;
    g->left++;
    Causeway__V1__StatsRequest req = CAUSEWAY__V1__STATS_REQUEST__INIT;
    cw_net_conn_request(link, CW_MSG_STATS, &req.base, NULL, 0, NULL, NULL, cw__poll_reply, pl);
  }
  g->left--;
  cw__gather_settle(g, g->left == 0);
}

static void cw__on_timer(uv_timer_t* t) {
  cw_controller_t* ctl = t->data;
  cw_ctl_ops_t* ops = ctl->ops;
  int64_t now = cw__mono_ms();
  for (cw_ctl_gather_t* g = ops->gathers; g;) {
    cw_ctl_gather_t* next = g->next;
    // A worker slow to answer: reply with the numbers last seen.
    if (g->client && !g->replied && now >= g->deadline_ms) cw__gather_settle(g, true);
    g = next;
  }
  for (cw_ctl_fanout_t* f = ops->fanouts; f; f = f->next) {
    if (!f->replied && now >= f->deadline_ms) cw__fanout_expire(f);
  }
  if (ctl->num_workers) cw__gather_start(ctl, NULL, 0, 0);
}

// --- Entry points -------------------------------------------------------------------

void cw_ctl_handle_admin(cw_net_conn_t* conn, const cw_frame_header_t* h,
                         ProtobufCMessage** msgp) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  cw_controller_t* ctl = p->ctl;
  const ProtobufCMessage* msg = *msgp;
  if (!ctl->ops) {
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id,
                    cw_make_status(CW_UNAVAILABLE, "the controller is shutting down"));
  } else if (h->type == CW_MSG_ADMIN_STATUS) {
    cw__gather_start(ctl, p->conn, h->request_id,
                     ((const Causeway__V1__AdminStatusRequest*)msg)->max_age_ms);
  } else if (h->type == CW_MSG_ADMIN_PAUSE || h->type == CW_MSG_ADMIN_RESUME) {
    cw__handle_pause(p, h, (const Causeway__V1__AdminSessionRequest*)msg);
  } else {
    cw__handle_drain(p, h, (const Causeway__V1__AdminDrainRequest*)msg);
  }
}

cw_status_t cw_ctl_ops_create(cw_controller_t* ctl) {
  cw_ctl_ops_t* ops = calloc(1, sizeof(*ops));
  if (!ops) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  ops->start_ms = cw__mono_ms();
  uv_timer_init(&ctl->loop, &ops->timer);
  ops->timer.data = ctl;
  ops->timer_open = true;
  ctl->ops = ops;
  uv_timer_start(&ops->timer, cw__on_timer, CW__POLL_MS, CW__POLL_MS);
  uv_unref((uv_handle_t*)&ops->timer);  // never what keeps the loop alive
  return cw_ok_status();
}

void cw_ctl_ops_stop(cw_controller_t* ctl) {
  cw_ctl_ops_t* ops = ctl->ops;
  if (!ops || !ops->timer_open) return;
  ops->timer_open = false;
  uv_close((uv_handle_t*)&ops->timer, NULL);
}

void cw_ctl_ops_release(cw_controller_t* ctl) {
  cw_ctl_ops_t* ops = ctl->ops;
  if (!ops) return;
  // Rounds still open lost their connections with the net: nothing to answer.
  while (ops->gathers) {
    cw_ctl_gather_t* g = ops->gathers;
    ops->gathers = g->next;
    if (g->client) cw_net_conn_release(g->client);
    free(g);
  }
  while (ops->fanouts) cw__fanout_free(ops->fanouts);
  free(ops);
  ctl->ops = NULL;
}
