// PJRT_LoadedExecutable_Execute (cw_plugin_execute.h): a launch returns at
// once with output buffers whose ids the plugin chose; one future, completed
// by the worker's reply, stands for all of them.
#include <assert.h>
#include <stdlib.h>

#include "cw_plugin_buffer.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_execute.h"
#include "cw_plugin_health.h"
#include "cw_plugin_hostcb.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_trace.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

static cw_status_t cw__oom(void) { return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"); }

// A launch's error: the controller's connection lost names the controller.
static cw_status_t cw__launch_error(cw_plugin_worker_t* w, cw_status_t status) {
  if (cw_plugin_health_controller_lost(w->client, status)) {
    return cw_plugin_health_controller_error(w->client, status);
  }
  return cw_plugin_worker_map_error(w, status);
}

// `user`: the launch's future, holding a reference for us; its context is
// the worker.
static void cw__launch_cb(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  cw_plugin_future_t* f = user;
  cw_plugin_future_complete_handback(f, cw__launch_error(cw_plugin_future_ctx(f), status));
  cw_plugin_future_release(f);
}

#define CW__STACK_IDS 256
#define CW__STACK_DONATE 32
#define CW__STACK_LISTS 16
#define CW__LOADED(args) ((cw_plugin_loaded_t*)(args)->executable)

// Checks the call and every argument before anything is sent or created.
// *out_poisoned: the error an argument already carries (the outputs then
// carry it and nothing is sent), else OK. *out_epoch: the worker's epoch
// the arguments were checked in.
static cw_status_t cw__execute_check(const PJRT_LoadedExecutable_Execute_Args* args,
                                     cw_status_t* out_poisoned, uint32_t* out_epoch) {
  *out_poisoned = cw_ok_status();
  cw_plugin_loaded_t* l = CW__LOADED(args);
  cw_plugin_exe_t* e = l->exe;
  if (atomic_load(&l->deleted)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "Execute: executable %s was deleted", e->name);
  }
  size_t nd = args->num_devices, na = args->num_args;
  if (args->execute_device &&
      (e->num_devices != 1 || (cw_plugin_device_t*)args->execute_device != e->devices[0])) {
    return cw_make_status(CW_UNIMPLEMENTED,
                          "Execute: %s was compiled for %s; running it on another device "
                          "(portable execution) is not supported by causeway",
                          e->name, e->devices[0]->to_string);
  }
  if (nd != e->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "Execute: %s runs on %zu devices, got argument lists for %zu", e->name,
                          e->num_devices, nd);
  }
  const PJRT_ExecuteOptions* opt = args->options;
  if (opt && opt->struct_size >= CW_PJRT_STRUCT_SIZE(PJRT_ExecuteOptions, num_recv_ops) &&
      (opt->num_send_ops || opt->num_recv_ops)) {
    return cw_make_status(CW_UNIMPLEMENTED,
                          "Execute: %s uses host send/recv callbacks, which causeway does not "
                          "support yet",
                          e->name);
  }
  if (!args->output_lists || (na && !args->argument_lists)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "Execute: argument or output lists missing");
  }
  cw_status_t poisoned = cw_ok_status();
  // A replacement announced while we were idle: reconnected first, so the
  // arguments of the lost worker are named as such (not NOT_FOUND there).
  *out_epoch = cw_plugin_worker_epoch(e->worker);
  for (size_t d = 0; d < nd; ++d) {
    for (size_t a = 0; a < na; ++a) {
      cw_plugin_buffer_t* b = (cw_plugin_buffer_t*)args->argument_lists[d][a];
      cw_status_t s = cw_ok_status();
      if (!b) {
        s = cw_make_status(CW_INVALID_ARGUMENT, "Execute: argument %zu of device %zu is NULL", a,
                           d);
      } else if (atomic_load_explicit(&b->deleted, memory_order_acquire)) {
        s = cw_make_status(CW_INVALID_ARGUMENT,
                           "Execute: argument %zu of %s was deleted or donated", a, e->name);
      } else if (b->device->worker != e->worker) {
        s = cw_make_status(CW_INVALID_ARGUMENT,
                           "Execute: argument %zu of %s lives on %s but the program runs on "
                           "worker %s (island %u); move it with jax.device_put",
                           a, e->name, b->device->to_string, e->worker->name,
                           e->devices[0]->island);
      } else if (b->epoch != *out_epoch) {
        s = cw_status_annotate(cw_plugin_buffer_lost(b), "Execute: argument %zu of %s", a,
                               e->name);
      } else if (!poisoned && cw_plugin_future_is_done(b->ready)) {
        cw_status_t rs = cw_plugin_future_wait(b->ready);  // done: returns at once
        // Carried as it is when it was itself carried: a chain dispatched
        // after a failure keeps one prefix (it grew by one a launch, and
        // Execute's time with it: an audit).
        if (rs && cw_plugin_future_is_carried(b->ready)) {
          poisoned = rs;
        } else if (rs) {
          poisoned = cw_status_annotate(rs, "input %zu of %s", a, e->name);
        }
      }
      if (s) {
        cw_status_free(poisoned);
        return s;
      }
    }
  }
  cw_status_t s = cw_plugin_worker_check(e->worker);
  if (s) {
    cw_status_free(poisoned);
    return s;
  }
  *out_poisoned = poisoned;
  return cw_ok_status();
}

// Donated: the parameters the program aliases to outputs, less those the
// caller lists as non-donatable (as XLA's own clients decide) and those
// with an external reference held on any device (DLPack: XLA's CPU client
// keeps such a buffer too, and the program reads a copy), into `donate`
// (room for every donated parameter); returns how many.
static size_t cw__execute_donated(const cw_plugin_exe_t* e, const PJRT_ExecuteOptions* opt,
                                  const PJRT_LoadedExecutable_Execute_Args* args,
                                  uint32_t* donate) {
  size_t n = 0;
  bool has_keep = opt && opt->struct_size >= CW_PJRT_STRUCT_SIZE(PJRT_ExecuteOptions,
                                                                 num_non_donatable_input_indices);
  for (size_t k = 0; k < e->num_donated_params; ++k) {
    uint32_t p = e->donated_params[k];
    bool keep = p >= args->num_args;
    for (size_t i = 0; !keep && has_keep && i < opt->num_non_donatable_input_indices; ++i) {
      keep = opt->non_donatable_input_indices[i] == (int64_t)p;
    }
    for (size_t d = 0; !keep && d < args->num_devices; ++d) {
      const cw_plugin_buffer_t* b = (const cw_plugin_buffer_t*)args->argument_lists[d][p];
      keep = atomic_load_explicit(&b->external_refs, memory_order_acquire) > 0;
    }
    if (!keep) donate[n++] = p;
  }
  return n;
}

typedef struct {
  uintptr_t buffer;
  size_t index;
} cw__arg_t;

static int cw__arg_cmp(const void* a, const void* b) {
  const cw__arg_t *x = a, *y = b;
  if (x->buffer != y->buffer) return x->buffer < y->buffer ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

// A buffer donated in this call must not also be another of its arguments
// (it would be read after the program took it), as XLA's own clients refuse.
static cw_status_t cw__execute_check_donated(PJRT_LoadedExecutable_Execute_Args* args,
                                             const cw_plugin_exe_t* e, const uint32_t* donate,
                                             size_t ndonate) {
  size_t na = args->num_args;
  if (!ndonate || na < 2) return cw_ok_status();
  cw__arg_t* sorted = malloc(na * sizeof(*sorted));
  bool* donated = calloc(na, sizeof(*donated));
  cw_status_t s = sorted && donated ? cw_ok_status() : cw__oom();
  for (size_t k = 0; !s && k < ndonate; ++k) donated[donate[k]] = true;
  for (size_t d = 0; !s && d < args->num_devices; ++d) {
    for (size_t a = 0; a < na; ++a) {
      sorted[a] = (cw__arg_t){(uintptr_t)args->argument_lists[d][a], a};
    }
    qsort(sorted, na, sizeof(*sorted), cw__arg_cmp);
    for (size_t i = 0; !s && i + 1 < na; ++i) {
      // Runs of one buffer: its first use against each later one.
      size_t first = i;
      while (i + 1 < na && sorted[i + 1].buffer == sorted[first].buffer) {
        size_t a = sorted[first].index, b = sorted[++i].index;
        if (donated[a] || donated[b]) {
          s = cw_make_status(CW_INVALID_ARGUMENT,
                             "Execute: argument %zu of %s on device %zu is the buffer of argument "
                             "%zu, which is donated in the same call: a donated buffer cannot "
                             "be another argument too (f(donate(a), a))",
                             b, e->name, d, a);
          break;
        }
      }
    }
  }
  free(sorted);
  free(donated);
  return s;
}

// The launch's id lists: lists[d] the arguments of device d, lists[nd + d]
// its outputs, new proxies sharing `f` put in args->output_lists (ids in
// `ids`, nd * (na + no) of them). *out_made counts the outputs made, also
// when this fails.
static cw_status_t cw__execute_outputs(PJRT_LoadedExecutable_Execute_Args* args,
                                       cw_plugin_future_t* f, uint64_t* ids,
                                       Causeway__V1__IdList* lists, Causeway__V1__IdList** ptrs,
                                       size_t* out_made) {
  cw_plugin_exe_t* e = CW__LOADED(args)->exe;
  cw_plugin_client_t* c = e->client;
  size_t nd = args->num_devices, na = args->num_args, no = e->num_outputs;
  cw_status_t s = cw_ok_status();
  *out_made = 0;
  for (size_t d = 0; !s && d < nd; ++d) {
    uint64_t* aid = &ids[d * (na + no)];
    uint64_t* oid = aid + na;
    for (size_t a = 0; a < na; ++a) aid[a] = ((cw_plugin_buffer_t*)args->argument_lists[d][a])->id;
    for (size_t o = 0; !s && o < no; ++o) {
      cw_plugin_buffer_t* ob = NULL;
      oid[o] = cw_plugin_client_new_id(c);
      s = cw_plugin_buffer_create(c, e->devices[d], oid[o], e->output_types[o],
                                  &e->output_dims[e->output_dim_offsets[o]], e->output_ranks[o], f,
                                  &ob);
      if (!s) {
        if (e->output_memories) ob->memory = e->output_memories[d * no + o];
        args->output_lists[d][o] = (PJRT_Buffer*)ob;
        ++*out_made;
      }
    }
    causeway__v1__id_list__init(&lists[d]);
    causeway__v1__id_list__init(&lists[nd + d]);
    lists[d].n_ids = na;
    lists[d].ids = aid;
    lists[nd + d].n_ids = no;
    lists[nd + d].ids = oid;
    ptrs[d] = &lists[d];
    ptrs[nd + d] = &lists[nd + d];
  }
  return s;
}

// Sends the LAUNCH whose completion completes `f`: straight to the worker
// when the controller leased it (its devices are ours alone), else relayed
// by the controller; either way the worker applies it in this worker's seq
// order among our other requests. *out_seq: the seq it took.
static cw_status_t cw__execute_launch(cw_plugin_exe_t* e, uint32_t epoch,
                                      const PJRT_ExecuteOptions* opt, Causeway__V1__IdList** ptrs,
                                      size_t nd, uint32_t* donate, size_t ndonate,
                                      uint64_t host_callbacks, cw_plugin_future_t* f,
                                      uint64_t* out_seq) {
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  req.exe_id = e->id;
  req.n_args = nd;
  req.args = ptrs;
  req.n_outputs = nd;
  req.outputs = ptrs + nd;
  req.launch_id = opt ? (uint64_t)(uint32_t)opt->launch_id : 0;
  req.n_donate = ndonate;
  req.donate = donate;
  req.host_callbacks = host_callbacks;
  bool direct = atomic_load_explicit(&e->worker->direct_launch, memory_order_relaxed);
  assert(cw_plugin_future_ctx(f) == e->worker);  // cw__launch_cb maps errors with it
  cw_plugin_future_retain(f);
  // Answered without us (no host callbacks): launches back to back share
  // writes until JAX waits for one.
  cw_status_t s = !host_callbacks
                      ? cw_plugin_worker_send_batched(e->worker, epoch, direct, CW_MSG_LAUNCH,
                                                      &req.base, &req.seq, cw__launch_cb, f)
                      : cw_plugin_worker_send_ordered(e->worker, epoch, direct, CW_MSG_LAUNCH,
                                                      &req.base, &req.seq, cw__launch_cb, f);
  *out_seq = req.seq;
  if (!s) return cw_ok_status();
  cw_plugin_future_release(f);
  return direct ? cw_status_annotate(s, "causeway: launching %s on worker %s (%s)", e->name,
                                     e->worker->name, cw_plugin_worker_address(e->worker))
                : cw_status_annotate(s, "causeway: launching %s through the controller at %s",
                                     e->name, e->client->ctrl_address);
}

PJRT_Error* cw_plugin_loaded_execute(PJRT_LoadedExecutable_Execute_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_LoadedExecutable_Execute_Args, execute_device);
  CW_PLUGIN_NEED(args->executable, "PJRT_LoadedExecutable_Execute", "executable");
  cw_plugin_future_run_handed_back();  // the last launches' callbacks, on JAX's thread
  int64_t trace_t0 = cw_plugin_trace_on() ? cw_time_now_ns() : 0;  // obs: the dispatch event
  uint64_t trace_seq = 0;
  cw_plugin_exe_t* e = CW__LOADED(args)->exe;
  size_t nd = args->num_devices, na = args->num_args, no = e->num_outputs;
  const PJRT_ExecuteOptions* opt = args->options;
  cw_status_t poisoned;
  uint32_t epoch = 0;
  cw_status_t s = cw__execute_check(args, &poisoned, &epoch);
  if (s) return cw_plugin_error_from_status(s);

  uint32_t stack_donate[CW__STACK_DONATE];
  uint32_t* donate = e->num_donated_params <= CW__STACK_DONATE
                         ? stack_donate
                         : malloc(e->num_donated_params * sizeof(*donate));
  if (!donate) {
    cw_status_free(poisoned);
    return cw_plugin_error_from_status(cw__oom());
  }
  size_t ndonate = cw__execute_donated(e, opt, args, donate);
  s = cw__execute_check_donated(args, e, donate, ndonate);
  if (s) {
    if (donate != stack_donate) free(donate);
    cw_status_free(poisoned);
    return cw_plugin_error_from_status(s);
  }

  // One future for the whole launch: every output and completion event
  // shares it.
  cw_plugin_future_t* f =
      poisoned ? cw_plugin_future_create_carried(poisoned) : cw_plugin_future_create();
  if (!f) {
    if (donate != stack_donate) free(donate);
    return cw_plugin_error_from_status(cw__oom());
  }
  cw_plugin_future_set_ctx(f, e->worker);
  size_t nids = nd * (na + no);
  uint64_t stack_ids[CW__STACK_IDS];
  uint64_t* ids = nids <= CW__STACK_IDS ? stack_ids : malloc(nids * sizeof(*ids));
  Causeway__V1__IdList stack_lists[CW__STACK_LISTS];
  Causeway__V1__IdList* lists =
      2 * nd <= CW__STACK_LISTS ? stack_lists : calloc(2 * nd, sizeof(*lists));
  Causeway__V1__IdList* stack_ptrs[CW__STACK_LISTS];
  Causeway__V1__IdList** ptrs =
      2 * nd <= CW__STACK_LISTS ? stack_ptrs : calloc(2 * nd, sizeof(*ptrs));
  size_t made = 0;
  // Host callbacks: a launch that has them is waited for here, as stock JAX
  // runs such programs synchronously, and this thread runs its callbacks
  // (cw_plugin_hostcb_serve). JAX has released the GIL they need meanwhile.
  uint64_t host_callbacks =
      opt && opt->struct_size >= CW_PJRT_STRUCT_SIZE(PJRT_ExecuteOptions, context)
          ? cw_plugin_hostcb_for_launch(opt->context)
          : 0;
  s = (ids && lists && ptrs) ? cw__execute_outputs(args, f, ids, lists, ptrs, &made) : cw__oom();
  if (!s && !poisoned) {
    s = cw__execute_launch(e, epoch, opt, ptrs, nd, donate, ndonate, host_callbacks, f, &trace_seq);
  }
  if (ids != stack_ids) free(ids);
  if (lists != stack_lists) free(lists);
  if (ptrs != stack_ptrs) free(ptrs);
  if (!s) {
    // The launch took the donated arguments: like XLA's own clients', they
    // read as deleted once Execute returns, and the worker deletes their ids
    // (so no DELETE is sent for them). A poisoned launch never reaches it:
    // delete them as PJRT_Buffer_Delete would.
    for (size_t k = 0; k < ndonate; ++k) {
      for (size_t d = 0; d < nd; ++d) {
        cw_plugin_buffer_t* b = (cw_plugin_buffer_t*)args->argument_lists[d][donate[k]];
        if (poisoned) {
          PJRT_Buffer_Delete_Args da = {.struct_size = sizeof(da), .buffer = (PJRT_Buffer*)b};
          (void)cw_plugin_buffer_delete(&da);  // NULL for a non-NULL buffer
        } else {
          atomic_store_explicit(&b->deleted, true, memory_order_release);
        }
      }
    }
  }
  if (donate != stack_donate) free(donate);
  if (s) {
    // Undo the outputs made so far; nothing reached a worker.
    for (size_t k = 0; k < made; ++k) {
      PJRT_Buffer** slot = &args->output_lists[k / (no ? no : 1)][k % (no ? no : 1)];
      atomic_store(&((cw_plugin_buffer_t*)*slot)->deleted, true);
      PJRT_Buffer_Destroy_Args da = {.struct_size = sizeof(da), .buffer = *slot};
      cw_plugin_buffer_destroy(&da);
      *slot = NULL;
    }
    cw_plugin_hostcb_abandon(host_callbacks);
    cw_plugin_future_release(f);
    return cw_plugin_error_from_status(s);
  }
  // A launch with callbacks fails this call, as on stock JAX, which runs it
  // inline: JAX then raises at the call and keeps no failed runtime token
  // (which it would raise again at exit). Its outputs hold the error on the
  // worker: destroying them deletes them there.
  cw_status_t hs = host_callbacks ? cw_plugin_hostcb_serve(host_callbacks, f) : cw_ok_status();
  if (hs) {
    for (size_t k = 0; k < nd * no; ++k) {
      PJRT_Buffer** slot = &args->output_lists[k / no][k % no];
      PJRT_Buffer_Destroy_Args da = {.struct_size = sizeof(da), .buffer = *slot};
      cw_plugin_buffer_destroy(&da);
      *slot = NULL;
    }
    cw_plugin_future_release(f);
    return cw_plugin_error_from_status(hs);
  }
  if (args->device_complete_events) {
    for (size_t d = 0; d < nd; ++d) {
      args->device_complete_events[d] = cw_plugin_event_from_future(f);
    }
  }
  cw_plugin_future_release(f);
  if (trace_t0) {
    cw_plugin_trace_client_event("execute", e->name, CW_PLUGIN_TRACE_LANE_DISPATCH, trace_t0,
                                 e->worker, e->id, trace_seq, 0);
  }
  return NULL;
}
