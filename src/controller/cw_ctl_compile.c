// The compile service (see cw_ctl_compile.h).
#include "cw_ctl_compile.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_compile_disk.h"
#include "cw_ctl_alloc.h"
#include "cw_ctl_disk.h"
#include "cw_ctl_health.h"
#include "cw_ctl_island.h"
#include "cw_ctl_metrics.h"
#include "cw_ctl_ops.h"
#include "cw_ctl_registry.h"
#include "cw_ctl_sched.h"
#include "cw_ctl_session.h"
#include "cw_log.h"
#include "cw_time.h"
#include "cw_xla_options.h"

// COMPILEs of one session under way at once (a JAX process compiles a few).
#define CW__MAX_SESSION_COMPILES 256

cw_ctl_program_t* cw_ctl_program_retain(cw_ctl_program_t* p) {
  if (p) p->refs++;
  return p;
}

const char* cw_ctl_compile_code_cpu(const Causeway__V1__Inventory* inv) {
  bool host_code = inv->platform_name && strcmp(inv->platform_name, "cpu") == 0;
  return host_code && inv->host_cpu ? inv->host_cpu : "";
}

static void cw__program_release(cw_ctl_program_t* p) {
  if (!p || --p->refs > 0) return;
  protobuf_c_message_free_unpacked(&p->req->base, NULL);
  free(p);
}

static void cw__compile_free(cw_ctl_compile_t* cp) {
  cw__program_release(cp->program);
  cw_net_conn_release(cp->client);
  if (cp->counted) {
    assert(cp->session->compiling > 0);
    cp->session->compiling--;
  }
  cw_ctl_session_release(cp->session);
  free(cp->options);
  free(cp->devices);
  free(cp->parts);
  free(cp->part_devices);
  if (cp->load_reply) protobuf_c_message_free_unpacked(&cp->load_reply->base, NULL);
  free(cp);
}

// The session's record of this compile's executable, if it is still the same one.
static cw_ctl_exe_t* cw__compile_exe(cw_ctl_compile_t* cp) {
  cw_ctl_exe_t* e = cw_ctl_exe_find(cp->session, cp->exe_id);
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
  cw_ctl_reply_error(ctl, cp->client, CW_MSG_COMPILE, cp->request_id, st);
  uint32_t worker = cp->worker;
  cw__compile_free(cp);
  cw_ctl_sched_pump(ctl, worker);
}

void cw_ctl_compile_answer(cw_controller_t* ctl, cw_net_conn_t* client, uint64_t request_id,
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
  if (e) {
    e->state = CW__EXE_READY;
    // Only now: a program sent again whose LOAD failed (its worker lost
    // meanwhile) is asked for again by the next HEALTH_REJOIN.
    e->program_wanted = false;
  }
  ctl->compiles++;
  cw_ctl_metrics_on_compile(ctl, cw_time_now_ms() - start_ms, cache_hit);
  CW_LOGI("compile of executable %" PRIu64 " for %s: %s, %" PRId64 " ms", info->exe_id, where,
          cache_hit ? "cache hit" : "compiled", cw_time_now_ms() - start_ms);
  cw_net_conn_reply(client, CW_MSG_COMPILE, request_id, &rep.base);
}

static void cw__compile_run(cw_ctl_compile_t* cp, const Causeway__V1__CompileRequest* r,
                            bool cached);

// Whether LOAD refused a cached executable's bytes themselves (its worker's
// XLA could not deserialize them: damaged under a valid checksum, or written
// by another build of the plugin that names itself the same), once: such an
// entry would fail its program for good, from memory and from the disk (an
// audit). A worker that went, drains or lacks memory refuses anything.
static bool cw__cached_bytes_refused(const cw_ctl_compile_t* cp, cw_status_t status) {
  // The worker's words for its plugin's refusal (cw_pjrt.c), not another
  // error under the id (the client's own buffer there, say).
  if (!strstr(cw_status_message(status), "deserialize executable: ")) return false;
  switch (cw_status_code(status)) {
    case CW_INVALID_ARGUMENT:
    case CW_INTERNAL:
    case CW_UNKNOWN:
    case CW_DATA_LOSS:
    case CW_UNIMPLEMENTED:
      return cp->cache_hit && cp->program && !cp->recompiled && !cp->loaded_before;
    default:
      return false;
  }
}

// Compiles cp's program again, past the caches; the result replaces the
// refused entry in memory and on the disk. The refused id goes from the
// session's worker first (`conn`, its link: an EXE_INFO finds it in error).
static void cw__compile_again(cw_ctl_compile_t* cp, cw_ctl_worker_t* w, cw_net_conn_t* conn,
                              cw_status_t status) {
  if (cw_net_conn_is_open(conn)) {
    Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    del.ids = &cp->exe_id;
    del.n_ids = 1;
    cw_net_conn_request(conn, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, cw_ctl_ignore_reply,
                        NULL);
  }
  CW_LOGW("compile cache: worker %s could not load the cached executable of executable %" PRIu64
          " (%s): compiling it again",
          w->name, cp->exe_id, cw_status_message(status));
  cw_status_free(status);
  if (cp->disk_hit) cw_ctl_disk_refused(cp->ctl);
  cw_ctl_exe_t* e = cw__compile_exe(cp);
  if (e) cw_ctl_health_exe_free(e);  // it kept the refused entry for reloads
  cp->recompiled = true;
  cp->cache_hit = cp->disk_hit = false;
  cw__compile_run(cp, cp->program->req, false);
}

static void cw__compile_exe_info(void* user, cw_net_conn_t* conn, cw_status_t status,
                                 const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_compile_t* cp = user;
  cw_controller_t* ctl = cp->ctl;
  cw_ctl_worker_t* w = ctl->workers[cp->worker];
  free(bulk);
  if (status && cw__cached_bytes_refused(cp, status)) {
    cw__compile_again(cp, w, conn, status);  // LOAD took the bytes, and failed them after
    return;
  }
  if (status) {
    cw__compile_fail(cp, cw_status_annotate(cw_ctl_worker_error(w, conn, status), "EXE_INFO"));
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
  cw_ctl_compile_answer(ctl, cp->client, cp->request_id, cw__compile_exe(cp), &info,
                     lr ? lr->num_outputs : info.num_outputs,
                     lr ? lr->num_devices : (uint32_t)info.n_devices,
                     lr && lr->name ? lr->name : info.name, cp->cache_hit, cp->start_ms, where);
  free(devs);
  uint32_t worker = cp->worker;
  cw__compile_free(cp);
  cw_ctl_sched_pump(ctl, worker);
}

static void cw__compile_loaded(void* user, cw_net_conn_t* conn, cw_status_t status,
                               const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_ctl_compile_t* cp = user;
  cw_ctl_worker_t* w = cp->ctl->workers[cp->worker];
  free(bulk);
  if (status && cw_status_code(status) == CW_ALREADY_EXISTS) {
    // The session's worker holds the id already: a controller that restarted
    // LOADed it before the client heard back, and the client compiles it
    // again under the same id (ids are never reused for other programs).
    // EXE_INFO says whether it is an executable.
    CW_LOGI("executable %" PRIu64 " is on worker %s already (loaded before a restart)",
            cp->exe_id, w->name);
    cw_status_free(status);
    status = cw_ok_status();
    reply = NULL;
    cp->loaded_before = true;  // these bytes were not what EXE_INFO answers for
  }
  if (status && cw__cached_bytes_refused(cp, status)) {
    cw__compile_again(cp, w, conn, status);
    return;
  }
  if (status) {
    cw__compile_fail(cp, cw_status_annotate(cw_ctl_worker_error(w, conn, status), "LOAD"));
    return;
  }
  // Keep what LOAD said; EXE_INFO follows on the same connection.
  if (reply) {
    // A compile again LOADs twice.
    if (cp->load_reply) protobuf_c_message_free_unpacked(&cp->load_reply->base, NULL);
    cp->load_reply = (Causeway__V1__CompileReply*)cw_msg_copy(reply);
  }
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
  cw_net_conn_t* link = cw_ctl_session_link(cp->session, cp->worker);
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

// --- A worker's compiles: a few sent, the rest queued here -------------------
//
// A worker compiles a few programs at a time; COMPILEs sent beyond that only
// wait in its memory. Queued here, those whose sessions have all closed are
// dropped unsent: a client that sent compiles and left had kept the worker
// compiling them (and both daemons holding the programs) for nothing.

static void cw__queue_unlink(cw_ctl_worker_t* w, cw_ctl_inflight_t* f) {
  if (f->queue_prev) f->queue_prev->queue_next = f->queue_next;
  else w->compile_queue = f->queue_next;
  if (f->queue_next) f->queue_next->queue_prev = f->queue_prev;
  else w->compile_queue_tail = f->queue_prev;
  f->queue_next = f->queue_prev = NULL;
  f->queued = false;
  f->ctl->compiles_queued--;
}

// Whether an open session still waits for `f`.
static bool cw__wanted(const cw_ctl_inflight_t* f) {
  for (const cw_ctl_compile_t* cp = f->waiters; cp; cp = cp->next) {
    if (!cp->session->closed) return true;
  }
  return false;
}

static void cw__drop_unwanted(cw_ctl_inflight_t* f) {
  f->ctl->compiles_dropped++;
  cw_ctl_compile_inflight_finish(f, NULL, cw_make_status(CW_CANCELLED, "compile dropped unsent: "
                                                         "its session closed"));
}

static void cw__send_now(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                         size_t code_size, const uint8_t* options, size_t options_size);
static void cw__prune_worker(cw_controller_t* ctl, cw_ctl_worker_t* w);

// Sends what `f` kept, which it gives up first (sending may finish `f`).
static void cw__send_kept_now(cw_ctl_inflight_t* f) {
  uint8_t* code = f->code;
  uint8_t* options = f->options;
  char* format = f->format;
  f->code = f->options = NULL;
  f->format = NULL;
  cw__send_now(f, format, code, f->code_size, options, f->options_size);
  free(code);
  free(options);
  free(format);
}

// Sends queued compiles while the worker has room; drops those no open
// session waits for (all of them once the controller stops).
static void cw__compile_pump(cw_controller_t* ctl, uint32_t worker) {
  cw_ctl_worker_t* w = ctl->workers[worker];
  if (w->compile_pumping) return;  // a finish below may come back here
  w->compile_pumping = true;
  while (w->compile_queue && (w->compiles_out < ctl->worker_compiles || ctl->shutting_down)) {
    cw_ctl_inflight_t* f = w->compile_queue;
    cw__queue_unlink(w, f);
    if (ctl->shutting_down) {
      cw_ctl_compile_inflight_finish(f, NULL, cw_make_status(CW_CANCELLED, "the controller is "
                                                             "stopping"));
    } else if (!cw__wanted(f)) {
      cw__drop_unwanted(f);
    } else {
      cw__send_kept_now(f);
    }
  }
  w->compile_pumping = false;
  // A session closed while this ran: what the loop did not reach.
  if (w->compile_prune_pending) cw__prune_worker(ctl, w);
}

// `f`'s COMPILE was answered (or failed): its place at the worker is free.
static void cw__compile_returned(cw_ctl_inflight_t* f) {
  if (!f->sent) return;
  f->sent = false;
  cw_ctl_worker_t* w = f->ctl->workers[f->worker];
  assert(w->compiles_out > 0);
  w->compiles_out--;
}

// One pass: the unwanted ones are taken off the queue first, then finished
// (finishing fails waiters, which may close sessions and prune again).
static void cw__prune_worker(cw_controller_t* ctl, cw_ctl_worker_t* w) {
  if (w->compile_pumping) {
    w->compile_prune_pending = true;
    return;
  }
  w->compile_prune_pending = false;
  cw_ctl_inflight_t* drop = NULL;
  for (cw_ctl_inflight_t *f = w->compile_queue, *next; f; f = next) {
    next = f->queue_next;
    if (cw__wanted(f)) continue;
    cw__queue_unlink(w, f);
    f->queue_next = drop;
    drop = f;
  }
  while (drop) {
    cw_ctl_inflight_t* f = drop;
    drop = f->queue_next;
    f->queue_next = NULL;
    cw__drop_unwanted(f);
  }
}

void cw_ctl_compile_prune(cw_controller_t* ctl) {
  for (size_t i = 0; i < ctl->num_workers; ++i) cw__prune_worker(ctl, ctl->workers[i]);
}

void cw_ctl_compile_stop(cw_controller_t* ctl) {
  for (size_t i = 0; i < ctl->num_workers; ++i) cw__compile_pump(ctl, (uint32_t)i);
}

void cw_ctl_compile_inflight_finish(cw_ctl_inflight_t* f, cw_compile_cache_entry_t* entry,
                         cw_status_t st) {
  cw_controller_t* ctl = f->ctl;
  if (f->queued) cw__queue_unlink(ctl->workers[f->worker], f);
  cw__compile_returned(f);  // sent ones are finished from their reply, already returned
  if (f->prev) f->prev->next = f->next;
  else if (ctl->inflight == f) ctl->inflight = f->next;
  if (f->next) f->next->prev = f->prev;
  f->next = f->prev = NULL;
  while (f->waiters) {
    cw_ctl_compile_t* cp = f->waiters;
    f->waiters = cp->next;
    cp->next = NULL;
    if (st) cw__compile_fail(cp, cw_status_clone(st));
    else cw__compile_load(cp, entry);
  }
  cw_status_free(st);
  cw_compile_cache_entry_release(entry);
  free(f->code);
  free(f->format);
  free(f->options);
  free(f->key);
  free(f);
}

// The worker's private copy (or the error a failed compile left under its
// id: kept for as long as the private link lives) is not needed any more.
static void cw__drop_private(cw_net_conn_t* conn, cw_ctl_inflight_t* f) {
  if (!cw_net_conn_is_open(conn)) return;
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &f->private_exe_id;
  del.n_ids = 1;
  cw_net_conn_request(conn, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, cw_ctl_ignore_reply,
                      NULL);
}

static void cw__inflight_serialized(void* user, cw_net_conn_t* conn, cw_status_t status,
                                    const ProtobufCMessage* reply, uint8_t* bulk,
                                    uint64_t bulk_len) {
  cw_ctl_inflight_t* f = user;
  cw_controller_t* ctl = f->ctl;
  cw_ctl_worker_t* w = ctl->workers[f->worker];
  cw__drop_private(conn, f);
  if (status) {
    free(bulk);
    cw_ctl_compile_inflight_finish(f, NULL, cw_status_annotate(cw_ctl_worker_error(w, conn, status),
                                                    "SERIALIZE"));
    return;
  }
  if (!bulk) bulk = malloc(1);
  cw_compile_cache_entry_t* e =
      bulk ? cw_compile_cache_insert(ctl->cache, f->key, f->key_size, bulk, (size_t)bulk_len)
           : NULL;
  if (!e) {
    cw_ctl_compile_inflight_finish(f, NULL, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a "
                                                "serialized executable"));
    return;
  }
  cw_ctl_disk_store(ctl, f->key, f->key_size, e);
  cw_ctl_compile_inflight_finish(f, e, cw_ok_status());
}

static void cw__inflight_compiled(void* user, cw_net_conn_t* conn, cw_status_t status,
                                  const ProtobufCMessage* reply, uint8_t* bulk,
                                  uint64_t bulk_len) {
  cw_ctl_inflight_t* f = user;
  cw_controller_t* ctl = f->ctl;
  uint32_t worker = f->worker;
  cw_ctl_worker_t* w = ctl->workers[worker];
  free(bulk);
  cw__compile_returned(f);
  if (status) {
    // One error entry per failed compile stayed on the worker for good (the
    // soak audit, session 40).
    cw__drop_private(conn, f);
    // XLA's message, unchanged but for where it came from.
    cw_ctl_compile_inflight_finish(f, NULL, cw_ctl_worker_error(w, conn, status));
  } else {
    Causeway__V1__SerializeRequest req = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
    req.exe_id = f->private_exe_id;
    cw_net_conn_request(conn, CW_MSG_SERIALIZE, &req.base, NULL, 0, NULL, NULL,
                        cw__inflight_serialized, f);
  }
  cw__compile_pump(ctl, worker);
}

bool cw_ctl_compile_keep(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                         size_t code_size, const uint8_t* options, size_t options_size) {
  f->code = malloc(code_size ? code_size : 1);
  f->options = malloc(options_size ? options_size : 1);
  f->format = strdup(format);
  if (!f->code || !f->options || !f->format) {
    cw_ctl_compile_drop_kept(f);
    return false;
  }
  if (code_size) memcpy(f->code, code, code_size);  // empty parts may be NULL
  if (options_size) memcpy(f->options, options, options_size);
  f->code_size = code_size;
  f->options_size = options_size;
  return true;
}

void cw_ctl_compile_drop_kept(cw_ctl_inflight_t* f) {
  free(f->code);
  free(f->format);
  free(f->options);
  f->code = f->options = NULL;
  f->format = NULL;
}

static void cw__enqueue(cw_ctl_worker_t* w, cw_ctl_inflight_t* f) {
  f->queued = true;
  f->queue_next = NULL;
  f->queue_prev = w->compile_queue_tail;
  if (w->compile_queue_tail) w->compile_queue_tail->queue_next = f;
  else w->compile_queue = f;
  w->compile_queue_tail = f;
  f->ctl->compiles_queued++;
}

// Whether `f`'s worker has room for it, with nothing queued before it.
static bool cw__has_room(const cw_ctl_inflight_t* f) {
  const cw_ctl_worker_t* w = f->ctl->workers[f->worker];
  return w->compiles_out < f->ctl->worker_compiles && !w->compile_queue;
}

void cw_ctl_compile_send(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                         size_t code_size, const uint8_t* options, size_t options_size) {
  if (!cw__wanted(f)) {
    cw__drop_unwanted(f);
  } else if (cw__has_room(f)) {
    cw__send_now(f, format, code, code_size, options, options_size);
  } else if (!cw_ctl_compile_keep(f, format, code, code_size, options, options_size)) {
    cw_ctl_compile_inflight_finish(f, NULL, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory "
                                                           "queueing a compile"));
  } else {
    cw__enqueue(f->ctl->workers[f->worker], f);
  }
}

void cw_ctl_compile_send_kept(cw_ctl_inflight_t* f) {
  if (!cw__wanted(f)) {  // its sessions closed while the disk cache was read
    cw__drop_unwanted(f);
  } else if (cw__has_room(f)) {
    cw__send_kept_now(f);
  } else {
    cw__enqueue(f->ctl->workers[f->worker], f);
  }
}

static void cw__send_now(cw_ctl_inflight_t* f, const char* format, const uint8_t* code,
                         size_t code_size, const uint8_t* options, size_t options_size) {
  cw_controller_t* ctl = f->ctl;
  cw_ctl_worker_t* w = ctl->workers[f->worker];
  if (!cw_ctl_private_link(ctl, w)) {
    cw_ctl_compile_inflight_finish(f, NULL, cw_make_status(CW_UNAVAILABLE, "worker %s (%s) is unavailable "
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
  f->sent = true;
  w->compiles_out++;
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
  bool had_assignment = info->num_assigned > 0;
  if (info->num_assigned == 0) {
    // No assignment: one device, the session's first (or the first live worker's).
    info->num_assigned = 1;
    info->assigned[0] = cw_ctl_alloc_default_device(ctl, s);
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
    if (!w) {  // a hole of a resumed session's ids; the message reads info first
      st = cw_make_status(CW_INVALID_ARGUMENT, "device %" PRId64 " does not exist",
                          info->assigned[i]);
      free(info);
      return st;
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
    char text[1024] = "";
    size_t used = 0;
    size_t islands = 0;
    // Each device's worker once (a resolve may scan every worker).
    cw_ctl_worker_t** owner = malloc(info->num_assigned * sizeof(*owner));
    for (size_t i = 0; owner && i < info->num_assigned; ++i) {
      owner[i] = cw_ctl_alloc_resolve(ctl, s, info->assigned[i], &local);
    }
    for (size_t wi = 0; owner && wi < ctl->num_workers && used < sizeof(text) - 1; ++wi) {
      cw_ctl_worker_t* w = ctl->workers[wi];
      int32_t lo = INT32_MAX, hi = -1;
      for (size_t i = 0; i < info->num_assigned; ++i) {
        if (owner[i] != w) continue;
        if (info->assigned[i] < lo) lo = (int32_t)info->assigned[i];
        if (info->assigned[i] > hi) hi = (int32_t)info->assigned[i];
      }
      if (hi < 0) continue;
      int n = snprintf(text + used, sizeof(text) - used, "%s%u (%s: devices %d-%d)",
                       islands ? " and " : "", w->index, w->name, lo, hi);
      if (n > 0) used += (size_t)n < sizeof(text) - used ? (size_t)n : sizeof(text) - used - 1;
      islands++;
    }
    free(owner);
    free(info);
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "program spans islands %s; a program may only use devices of one "
                          "island: move its inputs with jax.device_put to one island's devices, "
                          "or use a mesh within one island", text);
  }
  if (!first->alive) {
    free(info);
    return cw_ctl_worker_unavailable(first, NULL);
  }
  if (!cw_ctl_ops_worker_takes_work(first)) {
    free(info);
    return cw_make_status(CW_FAILED_PRECONDITION, "worker %s is draining", first->name);
  }
  cp->worker = first->index;
  cp->devices = calloc(info->num_assigned, sizeof(int32_t));
  // Local ids of the assigned devices only (up to 4,096), by global id: not
  // every id the session could name (a fleet's worth, each resolved).
  int64_t size = 0;
  for (size_t i = 0; i < info->num_assigned; ++i) {
    if (info->assigned[i] + 1 > size) size = info->assigned[i] + 1;
  }
  // Options without an assignment (the default device was put in above)
  // have no ids to map, but are checked against every id the session has.
  int64_t check_size = had_assignment ? size : total;
  int64_t* map = calloc((size_t)size, sizeof(int64_t));
  if (!cp->devices || !map) {
    free(map);
    free(info);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  cp->num_devices = info->num_assigned;
  for (size_t i = 0; i < info->num_assigned; ++i) {
    cp->devices[i] = (int32_t)info->assigned[i];
    (void)cw_ctl_alloc_resolve(ctl, s, info->assigned[i], &local);  // checked above
    map[info->assigned[i]] = (int64_t)local;
  }
  if (r->compile_options.len) {
    st = cw_xla_options_rewrite_devices(r->compile_options.data, r->compile_options.len, map,
                                        (size_t)check_size, &cp->options, &cp->options_size);
  }
  free(map);
  free(info);
  return st;
}

// The compile service for one worker: memory cache, a compilation already
// running, the disk cache, then the worker (without `cached`: a compilation
// already running, then the worker). The executable's record exists.
static void cw__compile_run(cw_ctl_compile_t* cp, const Causeway__V1__CompileRequest* r,
                            bool cached) {
  cw_controller_t* ctl = cp->ctl;
  // The cache key: program, format, rewritten options, the worker's plugin
  // (platform name and version, PJRT API version) and CPU (XLA's CPU code is
  // its host's: loaded on another, it may stop on an illegal instruction).
  uint8_t* key = NULL;
  size_t key_size = 0;
  const Causeway__V1__Inventory* inv = ctl->workers[cp->worker]->reg->inventory;
  const char* format = (r->format && r->format[0]) ? r->format : "mlir";
  char api[32];
  snprintf(api, sizeof(api), "%u.%u", inv->pjrt_major, inv->pjrt_minor);
  // Options as a key: the same options always give the same bytes.
  uint8_t* canon = cw_compile_disk_canonical_options(cp->options, cp->options_size);
  const char* cpu = cw_ctl_compile_code_cpu(inv);
  const void* parts[7] = {
      r->code.data, format, canon ? canon : cp->options, inv->platform_name, inv->platform_version,
      api,          cpu};
  size_t sizes[7] = {r->code.len,
                     strlen(format),
                     cp->options_size,
                     strlen(inv->platform_name),
                     strlen(inv->platform_version),
                     strlen(api),
                     strlen(cpu)};
  cw_status_t st = cw_compile_cache_key_create(parts, sizes, 7, &key, &key_size);
  free(canon);
  if (st) {
    cw__compile_fail(cp, cw_status_annotate(st, "COMPILE"));
    return;
  }
  cw_compile_cache_entry_t* hit =
      cached ? cw_compile_cache_lookup(ctl->cache, key, key_size) : NULL;
  if (hit) {
    ctl->cache_hits++;
    cp->cache_hit = true;
    free(key);
    cw__compile_load(cp, hit);
    cw_compile_cache_entry_release(hit);
    return;
  }
  // Identical compilation already running: wait for it (not a compile
  // again: that one may read the refused bytes from the disk).
  for (cw_ctl_inflight_t* f = cached ? ctl->inflight : NULL; f; f = f->next) {
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
  if (f->next) f->next->prev = f;
  ctl->inflight = f;
  // The disk next (asynchronously), then the worker.
  const char* fmt = r->format ? r->format : "";
  if (cached &&
      cw_ctl_disk_lookup(ctl, f, fmt, r->code.data, r->code.len, cp->options, cp->options_size)) {
    return;
  }
  cw_ctl_compile_send(f, fmt, r->code.data, r->code.len, cp->options, cp->options_size);
}

static void cw__compile_start(cw_ctl_compile_t* cp, void* user) { cw__compile_run(cp, user, true); }

void cw_ctl_handle_compile(cw_net_conn_t* conn, const cw_frame_header_t* h,
                           ProtobufCMessage** msg) {
  cw_ctl_peer_t* p = cw_net_conn_user(conn);
  const Causeway__V1__CompileRequest* r = (const Causeway__V1__CompileRequest*)*msg;
  cw_controller_t* ctl = p->ctl;
  cw_ctl_session_t* s = p->session;
  cw_status_t st = cw_ok_status();
  // A program sent again for a replacement worker (HealthRejoinReply): it
  // compiles into the record the session holds, under its id.
  cw_ctl_exe_t* found = cw_ctl_exe_find(s, r->exe_id);
  cw_ctl_exe_t* again =
      found && found->program_wanted && found->state == CW__EXE_FAILED ? found : NULL;
  if (!r->exe_id) st = cw_make_status(CW_INVALID_ARGUMENT, "COMPILE needs a non-zero exe_id");
  else if (found && !again) {
    st = cw_make_status(CW_ALREADY_EXISTS, "executable %" PRIu64 " already exists", r->exe_id);
  } else if (s->compiling >= CW__MAX_SESSION_COMPILES) {
    // Each holds its program until a worker answers.
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "session %" PRIu64 " has %d compiles under way, "
                        "the most a session may: wait for some", s->id, CW__MAX_SESSION_COMPILES);
  }
  cw_ctl_compile_t* cp = st ? NULL : calloc(1, sizeof(*cp));
  if (!st && !cp) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    cp->ctl = ctl;
    cp->client = p->conn;
    cw_net_conn_retain(p->conn);
    cp->request_id = h->request_id;
    cp->session = s;
    cw_ctl_session_retain(s);
    s->compiling++;  // a client's compile (an island's parts are its own)
    cp->counted = true;
    cp->exe_id = r->exe_id;
    cp->start_ms = cw_time_now_ms();
    // Kept for a compile again (cw__compile_again); r stays valid.
    cp->program = calloc(1, sizeof(*cp->program));
    if (cp->program) {
      cp->program->refs = 1;
      cp->program->req = (Causeway__V1__CompileRequest*)*msg;
      *msg = NULL;
    }
    st = cw__compile_place(ctl, s, r, cp);
  }
  cw_ctl_exe_t* e = NULL;
  if (!st && again && (cp->num_parts || cp->worker != again->worker)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "executable %" PRIu64 " runs on worker %s; this "
                        "program's devices are elsewhere: it is not that executable's program",
                        r->exe_id, ctl->workers[again->worker]->name);
  }
  if (!st && again) {
    cw_status_free(again->error);
    again->error = NULL;
    cw_ctl_health_exe_free(again);  // bytes for another CPU: this compile's replace them
    e = again;
    CW_LOGI("executable %" PRIu64 ": its program came again for the replacement worker %s",
            r->exe_id, ctl->workers[again->worker]->name);
  } else if (!st && s->num_exes >= CW_CTL_MAX_SESSION_EXES) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "session %" PRIu64 " holds %zu executables, the "
                        "most a session may: delete some", s->id, s->num_exes);
  }
  if (!st && !e) {
    e = calloc(1, sizeof(*e));
    if (!e) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st && cp->num_parts) {
    e->devices = calloc(cp->num_devices, sizeof(int32_t));
    if (!e->devices) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st && e != again) {
    e->id = r->exe_id;
    if (!cw_ctl_exe_add(s, e)) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    if (e && e != again) {
      free(e->devices);
      free(e);
    }
    if (cp) cw__compile_free(cp);
    cw_ctl_reply_error(ctl, p->conn, h->type, h->request_id, cw_status_annotate(st, "COMPILE"));
    return;
  }
  e->serial = ++ctl->next_exe_serial;
  e->worker = cp->worker;
  e->state = CW__EXE_LOADING;
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
