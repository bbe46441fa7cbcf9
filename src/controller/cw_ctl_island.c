// Islands that span several workers: a plugin with multi-process collectives
// runs one SPMD program as one part per process, and the parts rendezvous.
// Workers started with --island NAME --island-size N form such an island;
// each reports its rank (the plugin's PJRT_Client_ProcessIndex). The island
// has one scheduler, the first member's: a program over devices of several
// members compiles once and is loaded on each of them, and every LAUNCH of it
// gets one stamp and goes to every member with that stamp, so each member's
// stamp gate (cw_worker_sched.c) issues the parts in the same order and the
// collectives meet. Launches of programs confined to one member of such an
// island are not stamped: the island's stamp sequence must reach every
// member whole.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_ctl_alloc.h"
#include "cw_ctl_compile.h"
#include "cw_ctl_island.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_relay.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_xla_options.h"

bool cw_ctl_island_spans(const cw_ctl_worker_t* w) {
  return w->island_name[0] && w->island_size > 1;
}

void cw_ctl_island_note_lives(cw_controller_t* ctl, cw_ctl_item_t* it) {
  if ((it->type != CW_MSG_LAUNCH && it->type != CW_MSG_DELETE) ||
      it->worker >= ctl->num_workers || !cw_ctl_island_spans(ctl->workers[it->worker])) {
    return;
  }
  cw_ctl_session_t* s = it->session;
  uint32_t island = ctl->workers[it->worker]->island;
  size_t max = ctl->workers[island]->island_size;
  uint32_t* members = calloc(max, sizeof(*members));
  it->lives = calloc(max, sizeof(*it->lives));
  size_t n = members && it->lives ? cw_ctl_island_members(ctl, island, members, max) : 0;
  for (size_t k = 0; k < n; ++k) {
    uint32_t wi = members[k];
    // Only an open link: while it is open, the life it joined is the
    // session's life there, which holds the objects the request names.
    cw_net_conn_t* link = wi < s->num_links ? s->links[wi] : NULL;
    uint64_t life = link && cw_net_conn_is_open(link) ? cw_net_conn_hello_session_key(link) : 0;
    if (life) it->lives[it->num_lives++] = (cw_ctl_life_t){wi, life};
  }
  free(members);  // out of memory: no lives, the parts go unchecked as before
}

// The life of `it`'s session at member wi when it came; 0: not known.
static uint64_t cw__item_life(const cw_ctl_item_t* it, uint32_t wi) {
  for (size_t k = 0; k < it->num_lives; ++k) {
    if (it->lives[k].worker == wi) return it->lives[k].life;
  }
  return 0;
}

// A replacement for a member of an island of several workers: the island
// restarts as a whole (its plugin's process group and its stamp count start
// again together), so every member must be dead, and the newcomer must take
// the same place in it.
static cw_status_t cw__island_replace_check(cw_controller_t* ctl, const cw_ctl_worker_t* w,
                                           const Causeway__V1__RegisterRequest* r) {
  const char* name = r->island_name ? r->island_name : "";
  if (strcmp(name, w->island_name) != 0 || (name[0] && (r->island_size != w->island_size ||
                                                        r->island_rank != w->island_rank))) {
    return cw_make_status(CW_INVALID_ARGUMENT, "worker %s was rank %u of %u of island '%s'; "
                          "its replacement says rank %u of %u of island '%s'", w->name,
                          w->island_rank, w->island_size, w->island_name, r->island_rank,
                          r->island_size, name);
  }
  if (!cw_ctl_island_spans(w) || ctl->workers[w->island]->island_restarting) {
    return cw_ok_status();
  }
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    const cw_ctl_worker_t* v = ctl->workers[i];
    if (v->island == w->island && v->alive) {
      return cw_make_status(CW_FAILED_PRECONDITION,
                            "worker %s was a member of island '%s', whose worker %s is still "
                            "alive; replacing one member of an island that spans several "
                            "workers is not supported: stop all its workers and start them "
                            "again (its collectives restart together)",
                            w->name, w->island_name, v->name);
    }
  }
  return cw_ok_status();
}

cw_status_t cw_ctl_island_check(cw_controller_t* ctl, const Causeway__V1__RegisterRequest* r,
                                const cw_ctl_worker_t* replacing) {
  const char* name = r->island_name ? r->island_name : "";
  if (replacing) return cw__island_replace_check(ctl, replacing, r);
  if (!name[0]) return cw_ok_status();
  if (!cw_ctl_printable(name, CW__MAX_NAME - 1)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "island_name must be 1..%d printable characters",
                          CW__MAX_NAME - 1);
  }
  if (r->island_size < 1 || r->island_size > CW__MAX_WORKERS ||
      r->island_rank >= r->island_size) {
    return cw_make_status(CW_INVALID_ARGUMENT, "island '%s': rank %u of size %u is not valid",
                          name, r->island_rank, r->island_size);
  }
  uint32_t members = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    const cw_ctl_worker_t* v = ctl->workers[i];
    if (strcmp(v->island_name, name) != 0) continue;
    members++;
    if (v->island_size != r->island_size) {
      return cw_make_status(CW_INVALID_ARGUMENT, "island '%s' has %u workers (worker %s says so); "
                            "this worker says %u", name, v->island_size, v->name,
                            r->island_size);
    }
    if (v->island_rank == r->island_rank) {
      return cw_make_status(CW_ALREADY_EXISTS, "island '%s' already has rank %u: worker %s", name,
                            r->island_rank, v->name);
    }
    const Causeway__V1__Inventory* a = v->reg->inventory;
    if (strcmp(a->platform_name, r->inventory->platform_name) != 0 ||
        strcmp(a->platform_version, r->inventory->platform_version) != 0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "island '%s' runs %s %s (worker %s); this worker "
                            "has %s %s", name, a->platform_name, a->platform_version, v->name,
                            r->inventory->platform_name, r->inventory->platform_version);
    }
  }
  if (members >= r->island_size) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "island '%s' already has its %u workers", name,
                          r->island_size);
  }
  return cw_ok_status();
}

void cw_ctl_island_join(cw_controller_t* ctl, cw_ctl_worker_t* w,
                        const Causeway__V1__RegisterRequest* r) {
  w->island = w->index;
  snprintf(w->island_name, sizeof(w->island_name), "%s", r->island_name ? r->island_name : "");
  w->island_size = w->island_name[0] ? r->island_size : 1;
  w->island_rank = w->island_name[0] ? r->island_rank : 0;
  if (!cw_ctl_island_spans(w)) return;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* v = ctl->workers[i];
    if (v != w && !strcmp(v->island_name, w->island_name)) {
      w->island = v->island;
      break;
    }
  }
  CW_LOGI("worker %s is rank %u of island '%s' (%u workers, scheduled by worker %u)", w->name,
          w->island_rank, w->island_name, w->island_size, w->island);
}

void cw_ctl_island_restarted(cw_controller_t* ctl, cw_ctl_worker_t* w) {
  if (!cw_ctl_island_spans(w)) return;
  // The restart goes on until every place is taken again: the members that
  // rejoined first are alive meanwhile, and that is no reason to refuse the rest.
  cw_ctl_worker_t* head = ctl->workers[w->island];
  bool whole = true;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    if (ctl->workers[i]->island == w->island && !ctl->workers[i]->alive) whole = false;
  }
  head->island_restarting = !whole;
  // Nothing was stamped while a member was dead; the island counts from 1.
  cw_ctl_sched_reset(ctl->workers[w->island]);
  // Its programs' parts died with the old processes, and a part is not
  // reloaded alone: they fail until compiled again.
  for (cw_ctl_session_t* s = ctl->sessions; s; s = s->next) {
    for (cw_ctl_exe_t* e = s->exes; e; e = e->next) {
      if (!e->num_parts || e->worker != w->island || e->state == CW__EXE_FAILED) continue;
      cw_status_free(e->error);
      e->state = CW__EXE_FAILED;
      e->error = cw_make_status(CW_UNAVAILABLE, "island '%s' restarted (worker %s was "
                                "replaced): compile executable %" PRIu64 " again",
                                w->island_name, w->name, e->id);
    }
  }
  CW_LOGI("worker %s rejoins island '%s' as rank %u", w->name, w->island_name, w->island_rank);
}

size_t cw_ctl_island_members(cw_controller_t* ctl, uint32_t island, uint32_t* out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < ctl->num_workers; ++i) {
    cw_ctl_worker_t* v = ctl->workers[i];
    if (v->island != island || n >= max) continue;
    size_t k = n++;  // insertion by rank
    while (k > 0 && ctl->workers[out[k - 1]]->island_rank > v->island_rank) {
      out[k] = out[k - 1];
      k--;
    }
    out[k] = v->index;
  }
  return n;
}

cw_status_t cw_ctl_island_place(cw_controller_t* ctl, cw_ctl_session_t* s,
                                const int64_t* assigned, size_t n, bool* out_one,
                                uint32_t** out_parts, uint32_t** out_part_devices,
                                size_t* out_num_parts) {
  *out_one = false;
  uint32_t local = 0;
  cw_ctl_worker_t* first = cw_ctl_alloc_resolve(ctl, s, assigned[0], &local);
  if (!first || !cw_ctl_island_spans(first)) return cw_ok_status();
  for (size_t i = 1; i < n; ++i) {
    cw_ctl_worker_t* w = cw_ctl_alloc_resolve(ctl, s, assigned[i], &local);
    if (!w || w->island != first->island) return cw_ok_status();
  }
  *out_one = true;
  uint32_t* parts = calloc(first->island_size, sizeof(uint32_t));
  uint32_t* counts = calloc(first->island_size, sizeof(uint32_t));
  if (!parts || !counts) {
    free(parts);
    free(counts);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  size_t m = cw_ctl_island_members(ctl, first->island, parts, first->island_size);
  cw_status_t st = cw_ok_status();
  if (m < first->island_size) {
    st = cw_make_status(CW_UNAVAILABLE, "island '%s' has %zu of its %u workers registered",
                        first->island_name, m, first->island_size);
  }
  for (size_t k = 0; !st && k < m; ++k) {
    cw_ctl_worker_t* w = ctl->workers[parts[k]];
    if (!w->alive) {
      st = cw_ctl_worker_unavailable(w, first->island_name);
    } else if (!cw_ctl_ops_worker_takes_work(w)) {
      st = cw_make_status(CW_FAILED_PRECONDITION, "worker %s is draining", w->name);
    }
  }
  // Each member runs its part on its own devices: they must come together,
  // members in rank order, so launches can be split by position.
  size_t at = 0;
  for (size_t i = 0; !st && i < n; ++i) {
    cw_ctl_worker_t* w = cw_ctl_alloc_resolve(ctl, s, assigned[i], &local);
    while (at < m && parts[at] != w->index) at++;
    if (at == m) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "a program on island '%s' must list each worker's "
                          "devices together, workers in rank order (device %" PRId64 " of "
                          "worker %s comes too late)", first->island_name, assigned[i], w->name);
    } else {
      counts[at]++;
    }
  }
  for (size_t k = 0; !st && k < m; ++k) {
    if (!counts[k]) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "a program on island '%s' runs on every worker of "
                          "it; it names no device of worker %s (rank %zu)", first->island_name,
                          ctl->workers[parts[k]]->name, k);
    }
  }
  if (st) {
    free(parts);
    free(counts);
    return st;
  }
  *out_parts = parts;
  *out_part_devices = counts;
  *out_num_parts = m;
  return cw_ok_status();
}

// --- Compile: one part per member ------------------------------------------------

typedef struct cw_ctl_gang_compile_s {
  cw_controller_t* ctl;
  int left;
  cw_status_t first_error;
  size_t num_parts;
  Causeway__V1__ExecutableInfo* info;  // owned: part 0's, as its worker said
  bool cache_hit;                      // every part was
  // The client's request.
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  cw_ctl_session_t* session;  // retained
  uint64_t exe_id, exe_serial;
  uint32_t island;
  int64_t start_ms;
} cw_ctl_gang_compile_t;

static void cw__gang_finish(cw_ctl_gang_compile_t* g) {
  cw_controller_t* ctl = g->ctl;
  cw_ctl_exe_t* e = cw_ctl_exe_find(g->session, g->exe_id);
  if (e && e->serial != g->exe_serial) e = NULL;
  if (!g->first_error && (!g->info || !e)) {
    g->first_error = cw_make_status(CW_CANCELLED, "executable %" PRIu64 " was deleted while it "
                                    "compiled", g->exe_id);
  }
  if (g->first_error) {
    if (e) {
      e->state = CW__EXE_FAILED;
      e->error = cw_status_clone(g->first_error);
    }
    cw_ctl_reply_error(ctl, g->client, CW_MSG_COMPILE, g->request_id, g->first_error);
    g->first_error = NULL;  // taken
  } else {
    Causeway__V1__ExecutableInfo info = *g->info;
    info.exe_id = g->exe_id;
    info.devices = e->devices;
    info.n_devices = e->num_devices;
    info.island = g->island;
    info.worker_index = g->island;
    char where[CW__MAX_NAME + 64];
    snprintf(where, sizeof(where), "island '%s' (%zu workers)",
             ctl->workers[g->island]->island_name, g->num_parts);
    cw_ctl_compile_answer(ctl, g->client, g->request_id, e, &info, info.num_outputs,
                       (uint32_t)e->num_devices, info.name, g->cache_hit, g->start_ms, where);
  }
  cw_status_free(g->first_error);
  if (g->info) protobuf_c_message_free_unpacked(&g->info->base, NULL);
  cw_net_conn_release(g->client);
  cw_ctl_session_release(g->session);
  uint32_t island = g->island;
  free(g);
  cw_ctl_sched_pump(ctl, island);
}

static void cw__gang_part_end(cw_ctl_gang_compile_t* g) {
  if (--g->left == 0) cw__gang_finish(g);
}

void cw_ctl_island_compile(cw_ctl_compile_t* cp, uint32_t* parts, uint32_t* part_devices,
                           size_t num_parts, void (*start)(cw_ctl_compile_t*, void*),
                           void* user) {
  cw_controller_t* ctl = cp->ctl;
  cw_ctl_gang_compile_t* g = calloc(1, sizeof(*g));
  if (!g) {
    cw_ctl_reply_error(ctl, cp->client, CW_MSG_COMPILE, cp->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  g->ctl = ctl;
  g->left = 1;  // held until every part has started
  g->num_parts = num_parts;
  g->cache_hit = true;
  g->client = cp->client;
  cw_net_conn_retain(cp->client);
  g->request_id = cp->request_id;
  g->session = cp->session;
  cw_ctl_session_retain(cp->session);
  g->exe_id = cp->exe_id;
  g->exe_serial = cp->exe_serial;
  g->island = cp->worker;
  g->start_ms = cp->start_ms;
  size_t off = 0;
  for (size_t i = 0; i < num_parts; ++i) {
    // Each worker compiles its part: its own devices (worker-local ids), as
    // many partitions or replicas as it runs. Equal parts share a cache key.
    uint8_t* options = NULL;
    size_t options_size = 0;
    cw_status_t st = cw_xla_options_part(cp->options, cp->options_size, off, part_devices[i],
                                         &options, &options_size);
    if (st) {
      if (!g->first_error) g->first_error = st;
      else cw_status_free(st);
      break;
    }
    cw_ctl_compile_t* part = calloc(1, sizeof(*part));
    int32_t* devices = calloc(part_devices[i], sizeof(int32_t));
    if (!part || !devices) {
      free(part);
      free(options);
      free(devices);
      if (!g->first_error) g->first_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    memcpy(devices, cp->devices + off, part_devices[i] * sizeof(int32_t));
    off += part_devices[i];
    part->ctl = ctl;
    part->client = cp->client;
    cw_net_conn_retain(cp->client);
    part->request_id = cp->request_id;
    part->session = cp->session;
    cw_ctl_session_retain(cp->session);
    part->exe_id = cp->exe_id;
    part->exe_serial = cp->exe_serial;
    part->worker = parts[i];
    part->options = options;
    part->options_size = options_size;
    part->devices = devices;
    part->num_devices = part_devices[i];
    part->start_ms = cp->start_ms;
    part->program = cw_ctl_program_retain(cp->program);
    part->gang = g;
    g->left++;
    start(part, user);
  }
  cw__gang_part_end(g);
}

bool cw_ctl_island_compile_done(cw_ctl_compile_t* cp, cw_status_t* st,
                                const Causeway__V1__ExecutableInfo* info) {
  cw_ctl_gang_compile_t* g = cp->gang;
  if (!g) return false;
  cw_ctl_worker_t* w = g->ctl->workers[cp->worker];
  if (st && *st) {
    if (!g->first_error) {
      g->first_error = cw_status_annotate(*st, "part on worker %s of island '%s'", w->name,
                                          w->island_name);
    } else {
      cw_status_free(*st);
    }
    *st = NULL;
  } else if (info && !g->info) {
    g->info = (Causeway__V1__ExecutableInfo*)cw_msg_copy(&info->base);
  }
  if (!cp->cache_hit) g->cache_hit = false;
  cp->gang = NULL;
  cw__gang_part_end(g);
  return true;
}

// --- Relays: one message per member --------------------------------------------

// Sends `msg` (taken) to worker `wi` as a part of `parent`'s request, counted in `m`.
static void cw__relay_part(cw_controller_t* ctl, const cw_ctl_item_t* parent, cw_ctl_multi_t* m,
                           ProtobufCMessage* msg, uint32_t wi) {
  cw_ctl_item_t* it = cw_ctl_item_new(parent->type, parent->client, parent->request_id,
                                   parent->session, msg, wi);
  if (!it) {
    if (!m->first_error) m->first_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  it->multi = m;
  it->received_ns = parent->received_ns;
  m->left++;
  cw_ctl_worker_t* w = ctl->workers[wi];
  cw_net_conn_t* link = cw_ctl_session_link(parent->session, wi);
  if (!link || !cw_net_conn_is_open(link)) {
    cw_ctl_item_fail(ctl, it, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable: no "
                                          "connection", w->name, w->address));
    return;
  }
  cw_net_conn_request(link, it->type, it->msg, NULL, 0, NULL, NULL, cw_ctl_relay_reply, it);
}

static cw_ctl_multi_t* cw__multi_from(cw_ctl_item_t* it, uint64_t first_id) {
  if (it->multi) return it->multi;
  cw_ctl_multi_t* m = calloc(1, sizeof(*m));
  if (!m) return NULL;
  m->type = it->type;
  m->client = it->client;
  cw_net_conn_retain(it->client);
  m->request_id = it->request_id;
  m->first_id = first_id;
  m->left = 1;  // this hold is dropped once every part is sent
  return m;
}

// --- Launch: prepare on every member, then go (or cancel) ------------------------
//
// A part refused by one member (an input missing there, a bad shape) while
// the others issue theirs would leave them waiting in their collectives for
// it. So every part first goes out with `prepare`: at its turn the worker
// checks it and answers ready, holding the turn. Once every member answered,
// the controller sends LAUNCH_GO to each: go when all were ready, else a
// cancel to those that were, and the client gets the first refusal. A member
// that dies fails its part UNAVAILABLE; the others are cancelled.

typedef struct cw_ctl_gang_launch_s cw_ctl_gang_launch_t;

typedef struct cw_ctl_gang_part_s {
  cw_ctl_gang_launch_t* g;
  uint32_t worker;
  bool ready;
  cw_net_conn_t* link;  // retained: the session link its prepare went on; NULL: none
} cw_ctl_gang_part_t;

struct cw_ctl_gang_launch_s {
  cw_controller_t* ctl;
  uint32_t island;
  uint64_t stamp, exe_id;
  cw_net_conn_t* client;  // retained
  uint64_t request_id;
  cw_ctl_session_t* session;  // retained
  int left;                   // replies awaited in this phase
  bool answered;              // the client has its reply
  cw_status_t first_error;
  size_t num_parts;
  cw_ctl_gang_part_t parts[];
};

static void cw__gang_launch_error(cw_ctl_gang_launch_t* g, uint32_t wi, cw_net_conn_t* conn,
                                  cw_status_t st) {
  cw_ctl_worker_t* w = g->ctl->workers[wi];
  st = cw_ctl_worker_error(w, conn, st);
  if (cw_status_code(st) != CW_UNAVAILABLE) {  // that one names the worker already
    st = cw_status_annotate(st, "part on worker %s of island '%s'", w->name, w->island_name);
  }
  if (!g->first_error) g->first_error = st;
  else cw_status_free(st);
}

static void cw__gang_launch_end(cw_ctl_gang_launch_t* g) {
  cw_controller_t* ctl = g->ctl;
  if (!g->answered) {
    if (g->first_error) {
      cw_ctl_reply_error(ctl, g->client, CW_MSG_LAUNCH, g->request_id, g->first_error);
      g->first_error = NULL;  // taken
    } else {
      Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
      ack.id = g->exe_id;
      cw_net_conn_reply(g->client, CW_MSG_LAUNCH, g->request_id, &ack.base);
    }
  }
  cw_status_free(g->first_error);
  for (size_t i = 0; i < g->num_parts; ++i) {
    if (g->parts[i].link) cw_net_conn_release(g->parts[i].link);
  }
  cw_net_conn_release(g->client);
  cw_ctl_session_release(g->session);
  uint32_t island = g->island;
  free(g);
  cw_ctl_sched_release(ctl, island);  // room for the island's next stamped launch
}

static void cw__gang_done(void* user, cw_net_conn_t* conn, cw_status_t status,
                          const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_gang_part_t* p = user;
  cw_ctl_gang_launch_t* g = p->g;
  free(bulk);
  if (status && g->answered) cw_status_free(status);  // a cancel's own answer
  else if (status) cw__gang_launch_error(g, p->worker, conn, status);
  if (--g->left == 0) cw__gang_launch_end(g);
}

// Every part answered its prepare: go, or cancel the ready ones. A ready
// member whose connection is gone cannot be told to go, so the others are
// cancelled too (its own part cancels itself with that connection). That
// is the connection the prepare went on, not the session's link there now:
// one opened again since holds no part, and the others, told to go, ran
// theirs alone in their collectives.
static void cw__gang_decide(cw_ctl_gang_launch_t* g) {
  for (size_t i = 0; i < g->num_parts && !g->first_error; ++i) {
    cw_ctl_gang_part_t* p = &g->parts[i];
    cw_net_conn_t* link = p->ready ? p->link : NULL;
    if (p->ready && (!link || !cw_net_conn_is_open(link))) {
      cw_ctl_worker_t* w = g->ctl->workers[p->worker];
      cw__gang_launch_error(g, p->worker, NULL, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) "
                                                               "is unavailable: no connection",
                                                               w->name, w->address));
    }
  }
  bool go = !g->first_error;
  if (!go) {
    cw_ctl_reply_error(g->ctl, g->client, CW_MSG_LAUNCH, g->request_id,
                    cw_status_clone(g->first_error));
    g->answered = true;
  }
  Causeway__V1__LaunchGoRequest req = CAUSEWAY__V1__LAUNCH_GO_REQUEST__INIT;
  req.sched_stamp = g->stamp;
  req.go = go;
  req.reason = go ? (char*)"" : (char*)cw_status_message(g->first_error);
  g->left = 1;  // held while the words go out
  for (size_t i = 0; i < g->num_parts; ++i) {
    cw_ctl_gang_part_t* p = &g->parts[i];
    cw_net_conn_t* link = p->ready ? p->link : NULL;
    if (!link || !cw_net_conn_is_open(link)) continue;
    g->left++;
    cw_net_conn_request(link, CW_MSG_LAUNCH_GO, &req.base, NULL, 0, NULL, NULL, cw__gang_done, p);
  }
  if (--g->left == 0) cw__gang_launch_end(g);
}

static void cw__gang_prepared(void* user, cw_net_conn_t* conn, cw_status_t status,
                              const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_gang_part_t* p = user;
  cw_ctl_gang_launch_t* g = p->g;
  free(bulk);
  if (status) cw__gang_launch_error(g, p->worker, conn, status);
  else p->ready = true;
  if (--g->left == 0) cw__gang_decide(g);
}

uint32_t cw_ctl_island_relay_launch(cw_controller_t* ctl, cw_ctl_item_t* it, cw_ctl_exe_t* e,
                                    uint64_t stamp) {
  const Causeway__V1__LaunchRequest* r = (const Causeway__V1__LaunchRequest*)it->msg;
  if (r->n_args != e->num_devices || r->n_outputs != e->num_devices) {
    cw_ctl_item_fail(ctl, it, cw_make_status(CW_INVALID_ARGUMENT, "LAUNCH of executable %" PRIu64
                                          " names %zu argument lists and %zu output lists; it "
                                          "runs on %zu devices", r->exe_id, r->n_args,
                                          r->n_outputs, e->num_devices));
    return 0;
  }
  cw_ctl_gang_launch_t* g = calloc(1, sizeof(*g) + e->num_parts * sizeof(g->parts[0]));
  if (!g) {
    cw_ctl_item_fail(ctl, it, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return 0;
  }
  g->ctl = ctl;
  g->island = e->worker;
  g->stamp = stamp;
  g->exe_id = r->exe_id;
  g->client = it->client;
  cw_net_conn_retain(g->client);
  g->request_id = it->request_id;
  g->session = it->session;
  cw_ctl_session_retain(g->session);
  g->num_parts = e->num_parts;
  g->left = 1;  // held while the parts go out
  size_t off = 0, sent = 0;
  for (size_t i = 0; i < e->num_parts; ++i) {
    cw_ctl_gang_part_t* p = &g->parts[i];
    p->g = g;
    p->worker = e->parts[i];
    Causeway__V1__LaunchRequest part = *r;
    part.args = r->args + off;
    part.n_args = e->part_devices[i];
    part.outputs = r->outputs + off;
    part.n_outputs = e->part_devices[i];
    part.sched_stamp = stamp;
    part.prepare = true;
    // The client's seq numbers one worker's requests: the worker of the
    // program's first device (cw_plugin_executable.c), which runs the first
    // part. The other parts go unordered, in stamp order on each session
    // link. Sent with none, the seq was a hole there.
    part.seq = i == 0 ? r->seq : 0;
    // The client's life with its seq; each other part the life its member
    // had when the launch came. Without one, a part that waited here while
    // that life ended was applied in the next, which lacks its executable
    // and inputs (NOT_FOUND, not the lost life's error).
    part.session_life = i == 0 && r->session_life ? r->session_life
                                                  : cw__item_life(it, e->parts[i]);
    off += e->part_devices[i];
    cw_net_conn_t* link = cw_ctl_session_link(g->session, p->worker);
    if (!link || !cw_net_conn_is_open(link)) {
      cw_ctl_worker_t* w = ctl->workers[p->worker];
      cw__gang_launch_error(g, p->worker, NULL, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is "
                                                        "unavailable: no connection", w->name,
                                                        w->address));
      continue;
    }
    g->left++;
    sent++;
    p->link = link;
    cw_net_conn_retain(link);
    cw_net_conn_request(link, CW_MSG_LAUNCH, &part.base, NULL, 0, NULL, NULL, cw__gang_prepared,
                        p);
  }
  cw_ctl_item_free(it);
  if (!sent) {  // nothing went out: the stamp is not taken (the caller sees 0)
    g->left = 0;
    g->island = UINT32_MAX;
    cw__gang_launch_end(g);
    return 0;
  }
  if (--g->left == 0) cw__gang_decide(g);
  return 1;  // one outstanding stamped launch until the last part answers
}

static bool cw__exe_on(const cw_ctl_exe_t* e, uint32_t wi) {
  if (!e->num_parts) return e->worker == wi;
  for (size_t i = 0; i < e->num_parts; ++i) {
    if (e->parts[i] == wi) return true;
  }
  return false;
}

// The worker whose seq a client gives a request naming `e`: that of its
// first device, which runs the first part (see cw_ctl_island_relay_launch).
static uint32_t cw__exe_seq_worker(const cw_ctl_exe_t* e) {
  return e->num_parts ? e->parts[0] : e->worker;
}

void cw_ctl_island_relay_all(cw_controller_t* ctl, cw_ctl_item_t* it, uint32_t island) {
  const Causeway__V1__DeleteRequest* r = (const Causeway__V1__DeleteRequest*)it->msg;
  size_t max = ctl->workers[island]->island_size;
  uint32_t* members = calloc(max, sizeof(uint32_t));
  size_t m_n = members ? cw_ctl_island_members(ctl, island, members, max) : 0;
  cw_ctl_multi_t* m = cw__multi_from(it, r->n_ids ? r->ids[0] : 0);
  uint64_t* ids = calloc(r->n_ids + 1, sizeof(uint64_t));
  if (!m || !ids || !members) {
    free(ids);
    free(members);
    if (m && m != it->multi) {
      cw_net_conn_release(m->client);
      free(m);
    }
    cw_ctl_item_fail(ctl, it, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  // Its seq is one member's (it ordered the DELETE behind the launches it
  // sent there); given to every member, it was a seq of another numbering
  // at the others.
  uint32_t seq_worker = UINT32_MAX;
  for (size_t i = 0; i < r->n_ids && seq_worker == UINT32_MAX; ++i) {
    cw_ctl_exe_t* e = cw_ctl_exe_find(it->session, r->ids[i]);
    if (e) seq_worker = cw__exe_seq_worker(e);
  }
  for (size_t k = 0; k < m_n; ++k) {
    size_t n = 0;
    for (size_t i = 0; i < r->n_ids; ++i) {
      cw_ctl_exe_t* e = cw_ctl_exe_find(it->session, r->ids[i]);
      if (e && cw__exe_on(e, members[k])) ids[n++] = r->ids[i];
    }
    if (!n) continue;
    Causeway__V1__DeleteRequest part = *r;
    part.ids = ids;
    part.n_ids = n;
    if (n != r->n_ids || members[k] != seq_worker) {
      part.seq = 0;
      part.session_life = 0;  // a life of the seq's worker, with its seq
    }
    // This member's life when the DELETE came (as for a launch's parts).
    if (!part.session_life) part.session_life = cw__item_life(it, members[k]);
    cw__relay_part(ctl, it, m, cw_msg_copy(&part.base), members[k]);
  }
  free(ids);
  free(members);
  for (size_t i = 0; i < r->n_ids; ++i) cw_ctl_exe_forget(it->session, r->ids[i]);
  it->multi = NULL;
  cw_ctl_item_free(it);
  // Drops the hold this item stood for (a new multi's, or the DELETE's part).
  cw_ctl_multi_done(m, ctl, cw_ok_status());
}
