// LAUNCH and LAUNCH_GO (see cw_worker_launch.h).
#include "cw_worker_launch.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_log.h"
#include "cw_pool.h"
#include "cw_time.h"
#include "cw_worker_conn.h"
#include "cw_worker_hostcb.h"
#include "cw_worker_mem.h"
#include "cw_worker_op.h"
#include "cw_worker_pin.h"
#include "cw_worker_sched.h"
#include "cw_worker_trace.h"

// Bound on launches in flight (handed to PJRT, not yet complete) when a
// multi-device launch is issued; until then it waits in its connection's
// queue. XLA's CPU client gives each device a semaphore of 32 in-flight
// computations (max_inflight_computations_per_device) and a multi-device
// Execute acquires it inside tasks on its client thread pool, which has only
// max(cores, devices) threads: exactly enough for one collective. With more
// than 32 launches queued, a dispatch task blocks one pool thread on that
// semaphore while the other devices' threads wait in an all-reduce
// rendezvous for the device that now has no thread to run on; XLA then
// aborts the process after 40 s (rendezvous.cc "only 3 of 4 arrived").
// In-process JAX with 4 CPU devices on 2 cores hits the same deadlock. So a
// multi-device launch is issued only while fewer than this many launches (of
// any kind: all count against the devices' semaphores) are in flight, well
// under 32, and its dispatch never blocks. Single-device launches are not
// held: XLA dispatches them on the calling thread (this loop), not its pool.
#ifndef CW__MAX_LAUNCHES_IN_FLIGHT  // a test build may raise it to show the deadlock
#define CW__MAX_LAUNCHES_IN_FLIGHT 16
#endif
// Launches that may call back to a client stay in flight (holding XLA's
// per-device slots, 32 of them) until the client answers; a launch without
// callbacks is dispatched on this loop, and with every slot held it would
// block the loop that must carry the answers: a deadlock (a helper's audit,
// 32 unanswered callbacks). At most this many callback launches are in
// flight; the rest wait as throttled multi-device launches do.
#define CW__MAX_HOSTCB_LAUNCHES 16
// Execute may block its caller. A multi-device one waits until XLA's pool
// has taken each device's part, and the pool's max(cores, devices) threads
// may all be busy: running a long program's parts (a training step of
// seconds: the loop then missed its heartbeats and the worker was declared
// dead), or waiting in a collective for a part whose host callback needs
// this loop to carry its request (a deadlock; a helper's audit). A
// single-device one blocks on its device's semaphore at 32 in flight. So
// Execute runs on the dispatch thread (one: calls stay in issue order)
// while launches wait there already, for a multi-device launch while any
// launch is running (XLA's pool may be busy), and for a single-device one
// at this many running; otherwise on the loop, which saves a sync call
// two thread hand-offs. (Launches that may call back have threads of their
// own; behind launches waiting here, the dispatch thread hands them on.)
#define CW__INLINE_MAX_IN_FLIGHT 16
// XLA's CPU client also runs a single-device program inline, on the calling
// thread, when it counts under 1,000 flops: data movement counts none, so
// `jnp.ones` of 2.2 GB filled its output on the loop for a second (five on a
// busy machine: the worker was declared dead; JAX's pmap_test
// testSizeOverflow, found by a conformance run). A launch that moves this
// many bytes (inputs and outputs) costs milliseconds anyway: it goes to the
// dispatch thread, whose hand-off is then noise.
#define CW__INLINE_MAX_BYTES (16u << 20)

struct cw_launch_s {
  cw_launch_t* next;
  cw_conn_t* conn;  // referenced
  uint64_t request_id;
  uint64_t skey;
  Causeway__V1__LaunchRequest* req;  // owned
  size_t num_devices, num_args, num_outputs;
  uint64_t* out_serials;  // [num_devices * num_outputs]
  // Retained when the launch is applied, released when it is freed: a DELETE
  // of an id later in program order cannot take them from a waiting launch.
  cw_store_entry_t* exe;
  cw_store_entry_t** inputs;  // [num_devices * num_args]
  cw_status_t apply_error;    // an id missing (or of the wrong kind) when applied
  size_t events_left;
  cw_status_t first_error;
  bool donated_dropped;  // the donated inputs' ids are deleted
  int64_t trace_start_ns;  // when it was issued to PJRT
  // A part of an island's launch (LaunchRequest.prepare): answered ready at
  // its turn or ahead of it, then held at its turn until LAUNCH_GO says go,
  // or failed there with `cancel`.
  bool part;        // counted in w->parts_queued while queued
  bool donating;    // prepared and donates: counted in w->parts_donating
  bool prepared, go;
  cw_status_t cancel;
  bool go_request;  // request_id is the LAUNCH_GO's: the reply answers that
  // Memory (cw_worker_mem.h): its outputs are charged before it is issued;
  // while it waits for that, mem_wait is set. A stamped launch that waits
  // passes its turn (stamp_released), and so do those queued behind it.
  bool mem_admitted;
  struct cw_worker_mem_wait_s* mem_wait;
  bool stamp_released;
  // A program that calls back (cw_worker_hostcb.h): its execute context.
  cw_hostcb_launch_t* hostcb;  // counted in w->hostcb_launches while set
};

// Its stamp in the gang order (cw_worker_sched.c); 0 when unstamped or
// when it passed its turn while it waited for memory.
static uint64_t cw__launch_stamp(const cw_conn_t* c, const cw_launch_t* l) {
  return l->stamp_released ? 0 : cw_worker_stamp_of(c, CW_MSG_LAUNCH, &l->req->base);
}

static void cw__launch_free(cw_launch_t* l) {
  cw_store_t* store = l->conn->w->store;
  cw_worker_mem_cancel(l->conn->w, l->mem_wait);
  cw_store_entry_release(store, l->exe);
  for (size_t i = 0; l->inputs && i < l->num_devices * l->num_args; ++i) {
    cw_store_entry_release(store, l->inputs[i]);
  }
  free(l->inputs);
  cw_status_free(l->apply_error);
  if (l->req) protobuf_c_message_free_unpacked(&l->req->base, NULL);
  free(l->out_serials);
  if (l->hostcb) l->conn->w->hostcb_launches--;
  cw_worker_hostcb_launch_free(l->conn->w, l->hostcb);
  cw_status_free(l->first_error);
  cw_status_free(l->cancel);
  if (l->donating) l->conn->w->parts_donating--;
  cw_worker_conn_unref(l->conn);
  free(l);
}

static cw_status_t cw__launch_check_lists(cw_worker_t* w, const Causeway__V1__LaunchRequest* r);

void cw_worker_launch_drop_donated(cw_worker_t* w, uint64_t skey,
                                   const Causeway__V1__LaunchRequest* r) {
  // Lists that do not check out name nothing to drop (and would cost their
  // product: a refused launch of 20,000 each took 10 s).
  cw_status_t st = cw__launch_check_lists(w, r);
  if (st) {
    cw_status_free(st);
    return;
  }
  // PJRT keeps the storage alive while an execution that took or reads it runs.
  for (size_t k = 0; k < r->n_donate; ++k) {
    for (size_t d = 0; d < r->n_args; ++d) {
      const Causeway__V1__IdList* args = r->args[d];
      if (r->donate[k] >= args->n_ids) continue;
      // Looked up each time: removing runs waiters, which may change the store.
      cw_store_entry_t* e = cw_store_lookup(w->store, skey, args->ids[r->donate[k]]);
      if (e && e->kind == CW_STORE_BUFFER) cw_store_remove(w->store, e);
    }
  }
}

static void cw__drop_donated(cw_worker_t* w, cw_launch_t* l) {
  if (l->donated_dropped) return;
  l->donated_dropped = true;
  cw_worker_launch_drop_donated(w, l->skey, l->req);
}

// Puts every output still owned by this launch in error; replies with
// `status` (taken) and frees the launch.
static void cw__launch_fail(cw_worker_t* w, cw_launch_t* l, cw_status_t status) {
  cw__drop_donated(w, l);
  for (size_t d = 0; d < l->req->n_outputs && d < l->num_devices; ++d) {
    const Causeway__V1__IdList* outs = l->req->outputs[d];
    for (size_t o = 0; o < outs->n_ids; ++o) {
      // Deleted outputs still count while a request that uses them holds them.
      cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, outs->ids[o],
                                                   l->out_serials[d * l->num_outputs + o]);
      if (e && e->state == CW_STORE_PENDING) {
        cw_store_set_error(w->store, e, cw_status_clone(status));
      }
    }
  }
  cw_worker_reply_error(l->conn, l->go_request ? CW_MSG_LAUNCH_GO : CW_MSG_LAUNCH, l->request_id,
                        status);
  cw__launch_free(l);
}

// A launch completed: resumes connections throttled by
// CW__MAX_LAUNCHES_IN_FLIGHT, oldest first, while there is room.
static void cw__launch_unthrottle(cw_worker_t* w) {
  // Each connection throttled now is tried once (one held again goes back
  // to the tail, in order), while there is room of either kind.
  cw_conn_t* last = w->launch_throttled_tail;
  while (w->launch_throttled && (w->launches_in_flight < CW__MAX_LAUNCHES_IN_FLIGHT ||
                                 w->hostcb_launches < CW__MAX_HOSTCB_LAUNCHES)) {
    cw_conn_t* c = w->launch_throttled;
    w->launch_throttled = c->throttle_next;
    if (!w->launch_throttled) w->launch_throttled_tail = NULL;
    c->throttle_next = NULL;
    c->launch_waiting = false;
    cw_worker_launch_pump(c);
    cw_worker_conn_unref(c);
    if (c == last) break;
  }
}

static void cw__launch_prepare_ahead(cw_worker_t* w);

static void cw__launch_device_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_launch_t* l = user;
  if (status && !l->first_error) l->first_error = status;
  else cw_status_free(status);
  assert(l->events_left > 0 && w->launches_in_flight > 0);
  if (--l->events_left > 0) return;
  w->launches_in_flight--;
  if (l->first_error) {
    cw_status_t st = l->first_error;
    l->first_error = NULL;
    cw__launch_fail(w, l, st);
  } else {
    Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
    ack.id = l->req->exe_id;
    cw_worker_reply(l->conn, l->go_request ? CW_MSG_LAUNCH_GO : CW_MSG_LAUNCH, l->request_id,
                    &ack.base);
    cw__launch_free(l);
  }
  cw__launch_unthrottle(w);
  cw__launch_prepare_ahead(w);  // a part that donated is done: those behind may go ahead
}

// One device's completion of a traced launch: recorded, then the launch's
// own completion runs (which may free the launch).
typedef struct cw__traced_device_s {
  cw_launch_t* launch;
  int device;
  char name[96];
} cw__traced_device_t;

static void cw__traced_device_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw__traced_device_t* td = user;
  cw_launch_t* l = td->launch;
  cw_worker_trace_record(w, l->skey, "execute", td->name, td->device, l->trace_start_ns,
                         l->req->exe_id, l->req->seq, 0, l->req->launch_id, NULL);
  free(td);
  cw__launch_device_done(w, l, status);
}

// Waits for device `index`'s completion event, recording it when traced.
static void cw__when_device_done(cw_worker_t* w, cw_launch_t* l, size_t index,
                                 PJRT_Event* event) {
  cw__traced_device_t* td = cw_worker_trace_enabled(w, l->skey) ? malloc(sizeof(*td)) : NULL;
  if (!td) {  // untraced (or no memory to trace it: untraced, not failed)
    cw_worker_when_ready_counted(w, event, &w->launch_events_running, cw__launch_device_done, l);
    return;
  }
  td->launch = l;
  // The local device: where the launch's first output on this position lives.
  td->device = (int)index;
  if (index < l->req->n_outputs && l->num_outputs && l->req->outputs[index]->n_ids) {
    cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, l->req->outputs[index]->ids[0],
                                                 l->out_serials[index * l->num_outputs]);
    if (e && e->device >= 0) td->device = e->device;
  }
  snprintf(td->name, sizeof(td->name), "%s", l->exe && l->exe->name ? l->exe->name : "execute");
  cw_worker_when_ready_counted(w, event, &w->launch_events_running, cw__traced_device_done, td);
}

// "f32[4,8]" into buf.
static void cw__format_shape(int dtype, const int64_t* dims, size_t rank, char* buf, size_t n) {
  size_t used = 0;
  int k = snprintf(buf, n, "%s[", cw_dtype_xla_name(dtype));
  if (k > 0) used = (size_t)k;
  for (size_t i = 0; i < rank && used < n; ++i) {
    k = snprintf(buf + used, n - used, "%s%" PRId64, i ? "," : "", dims[i]);
    if (k > 0) used += (size_t)k;
  }
  if (used < n) snprintf(buf + used, n - used, "]");
}

// Checks each argument's dtype and dims against the executable's parameter
// shapes: XLA's Execute compares only byte sizes, so f32[8,4] would pass for
// f32[4,8]. With an argument count that differs (or no known shapes), XLA's
// own check answers instead.
static cw_status_t cw__launch_check_args(const cw_launch_t* l, const cw_store_entry_t* exe) {
  if (!exe->params_known || exe->num_params != l->num_args) return cw_ok_status();
  for (size_t d = 0; d < l->num_devices; ++d) {
    for (size_t a = 0; a < l->num_args; ++a) {
      const cw_store_shape_t* want = &exe->params[a];
      if (want->dtype < 0) continue;  // a type we cannot name: XLA checks it
      const cw_store_entry_t* e = l->inputs[d * l->num_args + a];
      bool same = e->dtype == want->dtype && e->rank == want->rank &&
                  (!e->rank || !memcmp(e->dims, want->dims, e->rank * sizeof(int64_t)));
      if (same) continue;
      char wbuf[160], gbuf[160], where[48] = "";
      cw__format_shape(want->dtype, want->dims, want->rank, wbuf, sizeof(wbuf));
      cw__format_shape(e->dtype, e->dims, e->rank, gbuf, sizeof(gbuf));
      if (l->num_devices > 1) snprintf(where, sizeof(where), "device %zu ", d);
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "launch of executable %" PRIu64 ": %sargument %zu: expected %s, got "
                            "%s (buffer %" PRIu64 ")",
                            exe->id, where, a, wbuf, gbuf, e->id);
    }
  }
  return cw_ok_status();
}

// PJRT's launch id: the island's stamp when the controller stamped the
// launch, since every worker of an island gets the same stamp and
// multi-process plugins match one execution's parts by launch id.
static int cw__launch_id(const Causeway__V1__LaunchRequest* r) {
  return (int)((r->sched_stamp ? r->sched_stamp : r->launch_id) & 0x7fffffff);
}

// Outputs exist once Execute returned (PJRT tracks their readiness): attach
// them at once so later launches can chain on them.
static void cw__launch_attach_outputs(cw_worker_t* w, cw_launch_t* l, PJRT_Buffer** outs) {
  size_t no = l->num_outputs;
  for (size_t d = 0; d < l->num_devices; ++d) {
    for (size_t o = 0; o < no; ++o) {
      PJRT_Buffer* b = outs[d * no + o];
      // Deleted meanwhile, but held by a request that uses it: filled all the same.
      cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, l->req->outputs[d]->ids[o],
                                                   l->out_serials[d * no + o]);
      if (!e || e->state != CW_STORE_PENDING) {
        cw_pjrt_buffer_destroy(w->pjrt, b);  // deleted meanwhile
        continue;
      }
      int dtype = 0, device = -1;
      int64_t* dims = NULL;
      size_t rank = 0;
      cw_status_t ist = b ? cw_pjrt_buffer_info(w->pjrt, b, &dtype, &dims, &rank, &device)
                          : cw_make_status(CW_INTERNAL, "the plugin returned no output buffer");
      if (!ist) ist = cw_worker_entry_set_array(w, e, dtype, dims, rank, device);
      free(dims);
      if (ist) {
        cw_pjrt_buffer_destroy(w->pjrt, b);
        cw_store_set_error(w->store, e, ist);
      } else {
        // What it holds, where it is: the charge taken before the launch
        // (the executable's output shapes), or the first one when the plugin
        // could not say.
        if (e->charge && (e->charge != e->bytes || e->charge_device != device)) {
          CW_LOGW("launch of executable %" PRIu64 ": output %" PRIu64 " holds %" PRIu64
                  " bytes on device %d; %" PRIu64 " were charged on device %d",
                  l->req->exe_id, e->id, e->bytes, device, e->charge, e->charge_device);
        }
        cw_worker_mem_charge(w, e, device, e->bytes);
        cw_store_set_ready(w->store, e, b);
      }
    }
  }
}

// donate[num_args]: the arguments PJRT takes. It takes a donated argument's
// memory where the program aliases the parameter, unless a reader holds the
// buffer in place (pinned) or the launch names it twice on a device; those
// are only deleted afterwards.
static void cw__launch_donations(cw_worker_t* w, const cw_launch_t* l,
                                 const cw_store_entry_t* exe, bool* donate) {
  size_t nd = l->num_devices, na = l->num_args;
  for (size_t k = 0; exe->params_known && k < l->req->n_donate; ++k) {
    uint32_t a = l->req->donate[k];
    if (a >= na || a >= exe->num_params || !exe->params[a].donated) continue;
    bool ok = true;
    for (size_t d = 0; ok && d < nd; ++d) {
      const cw_store_entry_t* e = l->inputs[d * na + a];
      PJRT_Buffer* b = e ? (PJRT_Buffer*)e->handle : NULL;
      ok = b && !cw_worker_pin_held(w, b);
      for (size_t o = 0; ok && o < na; ++o) {
        ok = o == a || !l->inputs[d * na + o] || l->inputs[d * na + o]->handle != b;
      }
    }
    donate[a] = ok;
  }
}

// What an Execute call needs and gives, kept while it runs off the loop.
typedef struct cw__issue_s {
  cw_launch_t* l;
  PJRT_LoadedExecutable* exe;
  PJRT_Buffer** args;
  PJRT_Buffer*** arg_lists;
  PJRT_Buffer** outs;
  PJRT_Buffer*** out_lists;
  PJRT_Event** events;
  bool* donate;
  cw_status_t status;
  bool via_dispatch;  // counted in w->dispatching until it is back
} cw__issue_t;

static void cw__issue_free(cw__issue_t* is) {
  cw_status_free(is->status);
  free(is);  // its lists are in the same block
}

// An issue record with its lists in one zeroed block (seven allocations and
// frees a launch were a tenth of the worker's time on the null plugin); NULL
// when out of memory. Counts of 2^24 and more (far past what a launch
// decodes) are refused so that no size below can overflow.
static cw__issue_t* cw__issue_new(size_t nd, size_t na, size_t no) {
  if (nd >= (1u << 24) || na >= (1u << 24) || no >= (1u << 24)) return NULL;
  size_t ptrs[5] = {nd * na + 1, nd + 1, nd * no + 1, nd + 1, nd + 1};  // args .. events
  size_t nptrs = ptrs[0] + ptrs[1] + ptrs[2] + ptrs[3] + ptrs[4];
  size_t size = sizeof(cw__issue_t) + nptrs * sizeof(void*) + (na + 1) * sizeof(bool);
  cw__issue_t* is = calloc(1, size);
  if (!is) return NULL;
  void** p = (void**)(is + 1);
  is->args = (PJRT_Buffer**)p;
  is->arg_lists = (PJRT_Buffer***)(p += ptrs[0]);
  is->outs = (PJRT_Buffer**)(p += ptrs[1]);
  is->out_lists = (PJRT_Buffer***)(p += ptrs[2]);
  is->events = (PJRT_Event**)(p += ptrs[3]);
  is->donate = (bool*)(p + ptrs[4]);
  return is;
}

static void cw__issue_execute(cw_worker_t* w, cw__issue_t* is) {
  cw_launch_t* l = is->l;
  is->status = cw_pjrt_execute(w->pjrt, is->exe, l->num_devices, l->num_args,
                               (PJRT_Buffer* const* const*)is->arg_lists,
                               (PJRT_Buffer** const*)is->out_lists, is->events,
                               cw__launch_id(l->req), is->donate,
                               l->hostcb ? cw_worker_hostcb_launch_context(l->hostcb) : NULL);
}

// Execute has returned (its outputs exist, its events will fire): the
// outputs go into the store. Takes `is` and its launch.
static void cw__launch_executed(cw_worker_t* w, cw__issue_t* is) {
  cw_launch_t* l = is->l;
  size_t nd = l->num_devices, na = l->num_args;
  if (is->status) {
    cw_status_t st = is->status;
    is->status = NULL;
    cw__issue_free(is);
    w->launches_in_flight--;
    cw__launch_fail(w, l, st);
    return;
  }
  w->launches++;
  // The donated inputs' memory is the outputs' now.
  for (size_t a = 0; a < na; ++a) {
    for (size_t d = 0; is->donate[a] && d < nd; ++d) {
      if (l->inputs[d * na + a]) cw_worker_mem_uncharge(w, l->inputs[d * na + a]);
    }
  }
  cw__launch_attach_outputs(w, l, is->outs);
  cw__drop_donated(w, l);
  l->events_left = nd;
  for (size_t d = 0; d < nd; ++d) cw__when_device_done(w, l, d, is->events[d]);
  cw__issue_free(is);
}

// Loop thread: an Execute that ran on a host-callback thread or the
// dispatch thread is back.
static void cw__launch_back(cw_worker_t* w, void* user, cw_status_t status) {
  cw_status_free(status);  // always OK
  cw__issue_t* is = user;
  // Launches issued while this one waited there may run on the loop again.
  if (is->via_dispatch) w->dispatching--;
  cw__launch_executed(w, is);
  cw_worker_job_done(w);
  cw__launch_unthrottle(w);  // a failed one ended here, not at its events
  cw__launch_prepare_ahead(w);  // as after an issue on the loop (the pump's)
}

// Host-callback or dispatch thread: Execute may block (see
// CW__INLINE_MAX_IN_FLIGHT), or call back and wait for the client.
static void cw__launch_off_loop(void* user) {
  cw__issue_t* is = user;
  cw_worker_t* w = is->l->conn->w;
  cw__issue_execute(w, is);
  if (!cw_worker_post(w, cw__launch_back, is)) {
    // The loop has gone (shutdown timed out): nobody takes the outputs.
    CW_LOGE("launch of executable %" PRIu64 " finished after the worker's loop closed",
            is->l->req->exe_id);
  }
}

// Dispatch thread: a launch that may call back, issued behind launches that
// waited here, goes to its own thread only now, so its Execute starts after
// theirs (an island's members issue in one order).
static void cw__launch_hand_on(void* user) {
  cw__issue_t* is = user;
  cw_worker_t* w = is->l->conn->w;
  cw_status_t st = cw_worker_hostcb_run(w, cw__launch_off_loop, is);
  if (st) {
    cw_status_free(st);
    cw__launch_off_loop(is);  // no thread for it: here, holding up those behind
  }
}

// The launch's lists against the (ready) executable: devices, outputs and
// each argument's shape.
static cw_status_t cw__launch_check_exe(const cw_launch_t* l, const cw_store_entry_t* exe) {
  if (exe->num_devices != l->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "executable %" PRIu64 " runs on %u devices, "
                          "launch names %zu", exe->id, exe->num_devices, l->num_devices);
  }
  if (exe->num_outputs != l->num_outputs) {
    return cw_make_status(CW_INVALID_ARGUMENT, "executable %" PRIu64 " has %u outputs per "
                          "device, launch names %zu", exe->id, exe->num_outputs, l->num_outputs);
  }
  return cw__launch_check_args(l, exe);
}

// The bytes a launch reads and writes: its inputs', and its outputs' when
// the executable says (unknown: its inputs' alone).
static uint64_t cw__launch_bytes(const cw_launch_t* l, const cw_store_entry_t* exe) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < l->num_devices * l->num_args; ++i) {
    if (l->inputs[i]) bytes += l->inputs[i]->bytes;
  }
  for (size_t o = 0; exe->outputs_known && o < l->num_outputs; ++o) {
    bytes += exe->output_bytes[o] * l->num_devices;
  }
  return bytes;
}

// All inputs and the executable are ready: execute. Takes `l`.
static void cw__launch_issue(cw_worker_t* w, cw_launch_t* l, cw_store_entry_t* exe) {
  size_t nd = l->num_devices, na = l->num_args, no = l->num_outputs;
  cw_status_t st = cw__launch_check_exe(l, exe);
  if (st) {
    cw__launch_fail(w, l, st);
    return;
  }
  cw__issue_t* is = cw__issue_new(nd, na, no);
  if (!is) {
    cw__launch_fail(w, l, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a launch"));
    return;
  }
  is->l = l;
  is->exe = (PJRT_LoadedExecutable*)exe->handle;
  for (size_t d = 0; d < nd; ++d) {
    is->arg_lists[d] = is->args + d * na;
    is->out_lists[d] = is->outs + d * no;
    for (size_t a = 0; a < na; ++a) {
      cw_store_entry_t* e = l->inputs[d * na + a];  // held since the launch was applied
      is->args[d * na + a] = e ? (PJRT_Buffer*)e->handle : NULL;
    }
  }
  cw__launch_donations(w, l, exe, is->donate);
  l->trace_start_ns = cw_time_now_ns();
  // On the loop only where Execute cannot block (CW__INLINE_MAX_IN_FLIGHT,
  // CW__INLINE_MAX_BYTES).
  // Counted by their events still running: launches whose events fired
  // inline (a small program, which XLA runs on the calling thread) block
  // nothing, though in flight until the loop applies them. Counted in
  // flight, a few sessions' launches read in one pass passed the bound, and
  // every later one took two thread hand-offs while any was at the
  // dispatch thread (one context switch a launch on each thread, 4 sessions
  // sharing a device: session 51).
  size_t running = atomic_load_explicit(&w->launch_events_running, memory_order_relaxed);
  bool inline_ok = !w->dispatching &&
                   (nd == 1 ? running < CW__INLINE_MAX_IN_FLIGHT &&
                                  cw__launch_bytes(l, exe) < CW__INLINE_MAX_BYTES
                            : running == 0);
  w->launches_in_flight++;  // until every device's event fires, or it fails
  if (!exe->host_callbacks && (inline_ok || !w->dispatch)) {
    cw__issue_execute(w, is);
    cw__launch_executed(w, is);
    return;
  }
  if (!exe->host_callbacks) {
    is->via_dispatch = true;
    w->dispatching++;  // until it is back (cw__launch_back)
    w->launches_dispatched++;
    cw_worker_job_started(w);
    st = cw_pool_submit(w->dispatch, cw__launch_off_loop, is);
    if (st) {
      w->dispatching--;
      cw_worker_job_done(w);
    }
  } else {
    // It may call back: XLA may run it inline on the calling thread, and
    // its handler waits for the client, whose request this loop must carry.
    st = cw_worker_hostcb_launch_create(w, l->skey, l->req->host_callbacks, l->req->exe_id,
                                        &l->hostcb);
    if (!st) {
      w->hostcb_launches++;  // until it ends (cw__launch_free)
      cw_worker_job_started(w);
      is->via_dispatch = w->dispatching > 0 && w->dispatch;
      if (is->via_dispatch) {
        w->dispatching++;
        st = cw_pool_submit(w->dispatch, cw__launch_hand_on, is);
        if (st) w->dispatching--;
      } else {
        st = cw_worker_hostcb_run(w, cw__launch_off_loop, is);
      }
      if (st) cw_worker_job_done(w);
    }
  }
  if (st) {
    cw__issue_free(is);
    w->launches_in_flight--;
    cw__launch_fail(w, l, st);
  }
}

cw_status_t cw_worker_launch_start(cw_worker_t* w) {
  return cw_pool_create("cw-dispatch", 1, &w->dispatch);
}

void cw_worker_launch_stop(cw_worker_t* w) {
  cw_pool_release(w->dispatch);  // its launches ended with the loop
  w->dispatch = NULL;
}

// Takes the head launch off the connection's queue.
static void cw__launch_pop(cw_conn_t* c) {
  cw_launch_t* l = c->launch_head;
  c->launch_head = l->next;
  if (!c->launch_head) c->launch_tail = NULL;
  if (c->launch_prepared == l) c->launch_prepared = NULL;
  l->next = NULL;
  c->w->launches_queued--;
  if (l->part) c->w->parts_queued--;
}

static void cw__launch_waiter(void* user) {
  cw_conn_t* c = user;
  c->launch_waiting = false;
  cw_worker_launch_pump(c);
  cw_worker_conn_unref(c);
}

// Why the head launch cannot be issued (an error), or what it waits for.
static cw_status_t cw__launch_check_ready(cw_launch_t* l, cw_store_entry_t** out_wait_on) {
  *out_wait_on = NULL;
  cw_store_entry_t* exe = l->exe;  // retained when applied, whatever the id names now
  if (l->apply_error) {
    cw_status_t st = l->apply_error;
    l->apply_error = NULL;
    return st;
  }
  if (!exe) {
    return cw_make_status(CW_NOT_FOUND, "executable %" PRIu64 " not found", l->req->exe_id);
  }
  if (exe->kind != CW_STORE_EXECUTABLE) {
    return cw_make_status(CW_INVALID_ARGUMENT, "object %" PRIu64 " is not an executable",
                          l->req->exe_id);
  }
  if (exe->state == CW_STORE_ERROR) {
    return cw_make_status(cw_status_code(exe->error), "executable %" PRIu64 " failed: %s",
                          l->req->exe_id, cw_status_message(exe->error));
  }
  if (exe->state == CW_STORE_PENDING) {
    *out_wait_on = exe;
    return cw_ok_status();
  }
  for (size_t d = 0; d < l->num_devices; ++d) {
    for (size_t a = 0; a < l->num_args; ++a) {
      uint64_t id = l->req->args[d]->ids[a];
      cw_store_entry_t* e = l->inputs[d * l->num_args + a];
      if (!e) return cw_make_status(CW_NOT_FOUND, "input %" PRIu64 " not found", id);
      if (e->kind != CW_STORE_BUFFER) {
        return cw_make_status(CW_INVALID_ARGUMENT, "input %" PRIu64 " is not a buffer", id);
      }
      if (e->state == CW_STORE_ERROR) {
        // Carried: a chain queued behind a failure keeps one prefix (it
        // grew by one a launch: quadratic bytes and time, an audit).
        return cw_status_carry(e->error, "input ", "input %" PRIu64 " failed", id);
      }
      if (e->state == CW_STORE_PENDING) {
        *out_wait_on = e;
        return cw_ok_status();
      }
    }
  }
  return cw_ok_status();
}

// --- Memory (cw_worker_mem.h) ----------------------------------------------------

// Charges the launch's outputs (pending entries, by serial) what the
// executable says they will hold; attaching them charges what they do hold.
static void cw__launch_charge(cw_worker_t* w, cw_launch_t* l) {
  l->mem_admitted = true;
  const cw_store_entry_t* exe = l->exe;
  if (!exe || !exe->outputs_known || exe->num_outputs != l->num_outputs ||
      exe->num_devices != l->num_devices) {
    return;
  }
  for (size_t d = 0; d < l->num_devices; ++d) {
    for (size_t o = 0; o < l->num_outputs; ++o) {
      cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, l->req->outputs[d]->ids[o],
                                                   l->out_serials[d * l->num_outputs + o]);
      if (e && e->state == CW_STORE_PENDING) {
        cw_worker_mem_charge(w, e, exe->devices[d], exe->output_bytes[o]);
      }
    }
  }
}

// The launch's new memory per device (need[device], zeroed): its outputs,
// less the inputs it donates, whose memory becomes outputs'.
static void cw__launch_need(cw_worker_t* w, const cw_launch_t* l, uint64_t* need) {
  const cw_store_entry_t* exe = l->exe;
  size_t nd = l->num_devices, na = l->num_args;
  if (!exe->outputs_known || exe->num_outputs != l->num_outputs || exe->num_devices != nd) {
    return;  // charged once the outputs exist
  }
  for (size_t d = 0; d < nd; ++d) {
    int dev = exe->devices[d];
    if (dev < 0 || (size_t)dev >= w->pjrt->num_devices) continue;
    for (size_t o = 0; o < l->num_outputs; ++o) need[dev] += exe->output_bytes[o];
  }
  bool* donate = calloc(na + 1, sizeof(*donate));
  if (!donate) return;  // counted without donations: more, never less
  cw__launch_donations(w, l, exe, donate);
  for (size_t a = 0; a < na; ++a) {
    for (size_t d = 0; donate[a] && d < nd; ++d) {
      const cw_store_entry_t* e = l->inputs[d * na + a];
      if (!e || !e->charge || (size_t)e->charge_device >= w->pjrt->num_devices) continue;
      uint64_t* n = &need[e->charge_device];
      *n = *n > e->charge ? *n - e->charge : 0;
    }
  }
  free(donate);
}

// A stamped launch that waits for memory passes its turn, and so do the
// stamped launches queued behind it on this connection (issued after it, in
// their order): the island's other sessions go on meanwhile. Only a worker's
// own island's launches are stamped and not parts (cw_ctl_island.c relays
// programs of one member unstamped), so this changes who goes first, never
// what meets in a collective. Parts of an island's launch keep their turns.
static void cw__launch_release_stamps(cw_conn_t* c, cw_launch_t* from) {
  uint64_t sid = c->session ? c->session->id : 0;
  // A turn passed may resume this connection (its head waited for that
  // turn), which issues these launches and frees those that fail: not
  // while this walks them.
  bool deferred = cw_worker_stamp_wake_defer(c->w);
  for (cw_launch_t* x = from; x; x = x->next) {
    uint64_t s = cw_worker_stamp_of(c, CW_MSG_LAUNCH, &x->req->base);
    if (!s || x->stamp_released || x->req->prepare) continue;
    x->stamp_released = true;
    cw_worker_stamp_passed(c->w, s, sid);
  }
  cw_worker_stamp_wake_resume(c->w, deferred);
}

static void cw__launch_mem_ready(cw_worker_t* w, void* user, cw_status_t status) {
  cw_conn_t* c = user;
  cw_launch_t* l = c->launch_head;  // the one that waited: still the head
  l->mem_wait = NULL;
  if (l->req->prepare) cw_worker_stamp_hold(w, 0);  // a part held its turn while it waited
  if (status) {
    l->apply_error = status;  // failed by the pump, in order
  } else {
    cw__launch_charge(w, l);
  }
  c->launch_waiting = false;
  cw_worker_launch_pump(c);
  cw_worker_conn_unref(c);
}

// Takes the head launch's memory, or parks its connection until it frees
// (true). An error: it can never fit, or nobody is left to wait for it.
static bool cw__launch_reserve(cw_worker_t* w, cw_conn_t* c, cw_launch_t* l, uint64_t stamp,
                               cw_status_t* out_status) {
  *out_status = cw_ok_status();
  if (!cw_worker_mem_limited(w)) {
    cw__launch_charge(w, l);
    return false;
  }
  uint64_t* need = cw_worker_mem_scratch(w);
  cw__launch_need(w, l, need);
  char what[96];
  snprintf(what, sizeof(what), "LAUNCH of executable %" PRIu64, l->req->exe_id);
  cw_worker_mem_wait_t* wait = NULL;
  cw_status_t st = cw_worker_mem_reserve(w, l->skey, need, what, cw__launch_mem_ready, c, &wait);
  if (!st && wait && c->closing) {
    cw_worker_mem_cancel(w, wait);
    st = cw_make_status(CW_CANCELLED, "%s: %s closed while it waited for memory", what,
                        cw_worker_conn_name(c));
  }
  if (st || !wait) {
    if (!st) cw__launch_charge(w, l);
    *out_status = st;
    return false;
  }
  l->mem_wait = wait;
  c->launch_waiting = true;
  cw_worker_conn_ref(c);  // cw__launch_mem_ready's
  if (stamp && l->req->prepare) cw_worker_stamp_hold(w, stamp);  // gang order: it keeps its turn
  else if (stamp) cw__launch_release_stamps(c, l);
  return true;
}

// A part answers ready: its turn (or the frontier, ahead of it) is held
// for the controller's go.
static void cw__launch_prepare(cw_worker_t* w, cw_conn_t* c, cw_launch_t* l, uint64_t stamp) {
  l->prepared = true;
  if (l->req->n_donate && !l->donating) {
    l->donating = true;
    w->parts_donating++;
  }
  cw_worker_stamp_prepared(w, stamp);
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = l->req->exe_id;
  cw_worker_reply(c, CW_MSG_LAUNCH, l->request_id, &ack.base);
}

// Whether part `l` (stamped `stamp`, queued behind prepared parts only) can
// answer ready ahead of its turn. Its answer must still hold at its turn,
// whatever the controller decides for the parts before it: so its
// executable and every input are ready now and match, no prepared part that
// may still run donates (it could take an input), and its memory needs no
// wait. Any other part is prepared at its turn, as before.
static bool cw__launch_ready_ahead(cw_worker_t* w, cw_conn_t* c, cw_launch_t* l,
                                   uint64_t stamp) {
  if (!l->part || l->prepared || l->apply_error || w->parts_donating || c->closing ||
      (c->keeps_session && c->session && c->session->paused) ||
      (!l->mem_admitted && cw_worker_mem_limited(w)) || !cw_worker_stamp_may_prepare(w, stamp)) {
    return false;
  }
  cw_store_entry_t* wait_on = NULL;
  cw_status_t st = cw__launch_check_ready(l, &wait_on);
  if (!st && !wait_on) st = cw__launch_check_exe(l, l->exe);
  bool ok = !st && !wait_on;
  cw_status_free(st);
  return ok;
}

// On `c`, prepares ahead of their turns the parts right behind its prepared
// ones that can be (cw__launch_ready_ahead); whether any was. A ready reply
// may close `c` at once, and its close cancels and frees its launches: then
// *out_closed is set and `c` must not be touched again. Prepared parts stay
// prepared and leave only from the head (cw__launch_pop), so the scan starts
// behind the last one it saw: it ran over up to a window of held parts after
// every device's completion.
#ifndef NDEBUG
// Whether every launch from the head through c->launch_prepared is a
// prepared part, and the cursor is in the queue.
static bool cw__launch_prepared_ok(const cw_conn_t* c) {
  if (!c->launch_prepared) return true;
  for (const cw_launch_t* l = c->launch_head; l; l = l->next) {
    if (!cw__launch_stamp(c, l) || !l->prepared) return false;
    if (l == c->launch_prepared) return true;
  }
  return false;
}
#endif

static bool cw__launch_prepare_ahead_on(cw_worker_t* w, cw_conn_t* c, bool* out_closed) {
  assert(cw__launch_prepared_ok(c));
  bool any = false;
  cw_launch_t* l = c->launch_prepared ? c->launch_prepared->next : c->launch_head;
  for (; l; l = l->next) {
    uint64_t stamp = cw__launch_stamp(c, l);
    if (stamp && l->prepared) {  // held for its go: look behind it
      c->launch_prepared = l;
      continue;
    }
    if (!stamp || !cw__launch_ready_ahead(w, c, l, stamp)) break;
    if (!l->mem_admitted) cw__launch_charge(w, l);
    cw_worker_conn_ref(c);
    c->launch_prepared = l;
    cw__launch_prepare(w, c, l, stamp);
    *out_closed = c->closing;
    cw_worker_conn_unref(c);
    any = true;
    if (*out_closed) break;
  }
  return any;
}

// Prepares ahead of their turns, in stamp order over every connection, the
// parts that can be. Nothing is pumped here.
static void cw__launch_prepare_ahead(cw_worker_t* w) {
  bool more = w->parts_queued > 0;
  while (more) {
    more = false;
    for (cw_conn_t* c = w->conns; c;) {
      bool closed = false;
      more |= cw__launch_prepare_ahead_on(w, c, &closed);
      if (closed) break;  // w->conns changed under the scan: again from its start
      c = c->next;
    }
  }
}

static void cw__launch_pump(cw_conn_t* c);

void cw_worker_launch_pump(cw_conn_t* c) {
  cw_worker_t* w = c->w;
  cw__launch_pump(c);
  cw__launch_prepare_ahead(w);
}

static void cw__launch_pump(cw_conn_t* c) {
  cw_worker_t* w = c->w;
  while (c->launch_head && !c->launch_waiting) {
    cw_launch_t* l = c->launch_head;
    // A paused session's launches stay queued, in order (cw_worker_ops.c
    // resumes). Their turns pass meanwhile, as for a memory wait: else every
    // later stamped launch here, of every session, waited until the stall
    // recovery skipped them as stamps that "did not arrive". Parts keep
    // their turns (what meets in a collective).
    if (c->keeps_session && c->session && c->session->paused) {
      if (!l->req->prepare && cw__launch_stamp(c, l)) cw__launch_release_stamps(c, l);
      return;
    }
    // Gang order: a stamped launch waits for its turn (cw_worker_sched.c),
    // unless it passed it while it waited for memory.
    uint64_t stamp = cw__launch_stamp(c, l);
    if (stamp && cw_worker_stamp_wait(c, stamp)) return;
    cw_store_entry_t* wait_on = NULL;
    cw_status_t st = l->cancel;  // LAUNCH_GO said cancel: it fails in its turn
    l->cancel = NULL;
    if (!st) st = cw__launch_check_ready(l, &wait_on);
    if (!st && wait_on) {
      st = cw_store_add_waiter(w->store, wait_on, cw__launch_waiter, c);
      if (!st) {
        // Its turn passes, as for a memory wait: an input may wait for
        // long (a PUT, another session's launch), and every later stamped
        // launch here, of every session, would wait with it until the
        // stall recovery skipped it as a stamp that "did not arrive".
        // Parts keep their turns (what meets in a collective).
        if (stamp && !l->req->prepare) cw__launch_release_stamps(c, l);
        c->launch_waiting = true;
        cw_worker_conn_ref(c);
        return;
      }
    }
    // Ready: its outputs' memory is taken before PJRT takes it.
    if (!st && !l->mem_admitted && cw__launch_reserve(w, c, l, stamp, &st)) return;
    // A part of an island's launch: ready at its turn (unless it answered so
    // ahead of it); it holds the turn until the controller heard from every
    // part (LAUNCH_GO). Nobody says go on a closed connection: it fails now,
    // before the in-flight bounds could hold it (and its turn) again.
    bool part = stamp && l->req->prepare && !l->go;
    if (!st && part && c->closing) {
      st = cw_make_status(CW_CANCELLED, "%s closed before the controller said go",
                          cw_worker_conn_name(c));
    }
    bool held = l->num_devices > 1 && w->launches_in_flight >= CW__MAX_LAUNCHES_IN_FLIGHT;
    if (!st && l->exe && l->exe->host_callbacks && w->hostcb_launches >= CW__MAX_HOSTCB_LAUNCHES) {
      held = true;  // see CW__MAX_HOSTCB_LAUNCHES
    }
    if (!st && held) {
      // A multi-device launch, ready, but PJRT has its fill (see
      // CW__MAX_LAUNCHES_IN_FLIGHT), or one that may call back while the
      // most that may are in flight: wait for a launch to complete
      // (cw__launch_unthrottle). Other single-device launches are never
      // held: XLA runs their dispatch on the calling thread, not its pool.
      // Its turn is passed or held as for a memory wait: later turns then
      // neither wait on it unseen nor skip a part's turn at the stall timer.
      if (stamp && l->req->prepare) {
        cw_worker_stamp_hold(w, stamp);
      } else if (stamp) {
        cw__launch_release_stamps(c, l);
      }
      c->launch_waiting = true;
      cw_worker_conn_ref(c);
      c->throttle_next = NULL;
      if (w->launch_throttled_tail) w->launch_throttled_tail->throttle_next = c;
      else w->launch_throttled = c;
      w->launch_throttled_tail = c;
      return;
    }
    if (stamp && l->req->prepare) cw_worker_stamp_unhold(w, stamp);  // if the bounds held it
    // Its executable's shapes are checked before it says ready: a part
    // refused after the go would leave the others in their collectives.
    if (!st && part && !l->prepared) st = cw__launch_check_exe(l, l->exe);
    if (!st && part) {
      // Parked first: the ready reply may close the connection at once, and
      // its close then cancels this part (cw_worker_launch_conn_closed).
      c->launch_waiting = true;
      c->go_waiting = true;
      if (!l->prepared) cw__launch_prepare(w, c, l, stamp);
      return;
    }
    cw__launch_pop(c);
    uint64_t sid = c->session ? c->session->id : 0;
    if (st) cw__launch_fail(w, l, st);
    else cw__launch_issue(w, l, l->exe);
    if (stamp) cw_worker_stamp_passed(w, stamp, sid);  // its turn is over
  }
}

void cw_worker_handle_launch_go(cw_net_conn_t* nc, const cw_frame_header_t* h,
                                ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  const Causeway__V1__LaunchGoRequest* r = (const Causeway__V1__LaunchGoRequest*)*msg;
  // Prepared parts are a prefix of the queue (the head at its turn, then
  // those prepared ahead of theirs): the search ends at the first that is
  // not, not at the end of a queue that may hold thousands.
  cw_launch_t* l = c->launch_head;
  while (l && l->prepared && (l->go || l->cancel || l->req->sched_stamp != r->sched_stamp)) {
    l = l->next;
  }
  if (l && !l->prepared) l = NULL;
  if (!l) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_make_status(CW_FAILED_PRECONDITION, "no prepared launch with stamp "
                                         "%" PRIu64 " on this connection", r->sched_stamp));
    return;
  }
  // Its completion (or the cancel) answers this request, in its turn.
  l->request_id = h->request_id;
  l->go_request = true;
  if (r->go) {
    l->go = true;
  } else {
    l->cancel = cw_make_status(CW_CANCELLED, "launch of executable %" PRIu64 " (stamp %" PRIu64
                               ") cancelled: %s", l->req->exe_id, r->sched_stamp,
                               r->reason ? r->reason : "");
    // The client has its error now and may reuse the ids it gave up.
    cw__drop_donated(c->w, l);
  }
  if (l == c->launch_head && c->go_waiting) {  // at its turn: the pump goes on now
    c->go_waiting = false;
    c->launch_waiting = false;
  }
  cw_worker_launch_pump(c);
}

// The argument and output lists' shape: one list per device, equal lengths.
static cw_status_t cw__launch_check_lists(cw_worker_t* w, const Causeway__V1__LaunchRequest* r) {
  size_t nd = r->n_outputs;
  if (nd == 0 || r->n_args != nd) {
    return cw_make_status(CW_INVALID_ARGUMENT, "launch names %zu argument lists and %zu output "
                          "lists", r->n_args, r->n_outputs);
  }
  if (nd > w->pjrt->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "launch names %zu devices; this worker has %zu",
                          nd, w->pjrt->num_devices);
  }
  size_t na = r->args[0]->n_ids, no = r->outputs[0]->n_ids;
  for (size_t d = 0; d < nd; ++d) {
    if (r->args[d]->n_ids != na || r->outputs[d]->n_ids != no) {
      return cw_make_status(CW_INVALID_ARGUMENT, "device %zu has %zu arguments and %zu outputs; "
                            "device 0 has %zu and %zu", d, r->args[d]->n_ids,
                            r->outputs[d]->n_ids, na, no);
    }
  }
  if (r->n_donate > na) {
    return cw_make_status(CW_INVALID_ARGUMENT, "launch donates %zu arguments of %zu",
                          r->n_donate, na);
  }
  for (size_t k = 0; k < r->n_donate; ++k) {
    if (r->donate[k] >= na) {
      return cw_make_status(CW_INVALID_ARGUMENT, "launch donates argument %u of %zu",
                            r->donate[k], na);
    }
  }
  return cw_ok_status();
}

void cw_worker_handle_launch(cw_net_conn_t* nc, const cw_frame_header_t* h,
                             ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  Causeway__V1__LaunchRequest* r = (Causeway__V1__LaunchRequest*)*msg;
  cw_status_t st = cw__launch_check_lists(w, r);
  size_t nd = r->n_outputs;
  size_t na = st ? 0 : r->args[0]->n_ids, no = st ? 0 : r->outputs[0]->n_ids;
  cw_launch_t* l = NULL;
  if (!st) {
    l = calloc(1, sizeof(*l));
    if (l) l->out_serials = calloc(nd * no + 1, sizeof(uint64_t));
    if (!l || !l->out_serials) {
      free(l);
      l = NULL;
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  // Outputs are pending at once, so later requests may name them.
  size_t inserted = 0;
  for (size_t d = 0; !st && d < nd; ++d) {
    for (size_t o = 0; !st && o < no; ++o) {
      cw_store_entry_t* e = NULL;
      st = cw_store_insert(w->store, c->session->key, r->outputs[d]->ids[o], CW_STORE_BUFFER, &e);
      if (!st) {
        l->out_serials[d * no + o] = e->serial;
        inserted++;
      }
    }
  }
  if (st) {
    for (size_t i = 0; l && i < inserted; ++i) {
      cw_store_entry_t* e = cw_store_lookup(w->store, c->session->key,
                                            r->outputs[i / no]->ids[i % no]);
      if (e && e->serial == l->out_serials[i]) cw_store_remove(w->store, e);
    }
    if (l) {
      free(l->out_serials);
      free(l);
    }
    cw_worker_launch_drop_donated(w, c->session->key, r);  // the client already let them go
    cw_worker_stamp_drop(c, h->type, &r->base);  // its turn passes
    cw_worker_reply_error(c, h->type, h->request_id, cw_status_annotate(st, "LAUNCH"));
    return;
  }
  l->conn = c;
  cw_worker_conn_ref(c);
  l->request_id = h->request_id;
  l->skey = c->session->key;
  l->req = r;
  *msg = NULL;
  l->num_devices = nd;
  l->num_args = na;
  l->num_outputs = no;
  // Take the executable and inputs now, as the launch is applied in program
  // order: they stay the launch's while it waits, even if a later DELETE
  // removes their ids. A missing one is reported by the pump, in order.
  l->exe = cw_store_lookup(w->store, l->skey, r->exe_id);
  if (l->exe) cw_store_entry_retain(l->exe);
  l->inputs = calloc(nd * na + 1, sizeof(*l->inputs));
  if (!l->inputs) {
    l->apply_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a launch");
  }
  // This launch's outputs took consecutive serials just above: an input
  // among them is an id the launch both reads and makes, pending until the
  // launch runs, which would wait for it for ever.
  uint64_t out_lo = nd * no ? l->out_serials[0] : 1;
  uint64_t out_hi = nd * no ? l->out_serials[nd * no - 1] : 0;
  for (size_t d = 0; l->inputs && d < nd; ++d) {
    for (size_t a = 0; a < na; ++a) {
      cw_store_entry_t* e = cw_store_lookup(w->store, l->skey, r->args[d]->ids[a]);
      if (e && e->serial >= out_lo && e->serial <= out_hi && !l->apply_error) {
        l->apply_error = cw_make_status(CW_INVALID_ARGUMENT, "buffer %" PRIu64 " is both an "
                                        "argument and an output", r->args[d]->ids[a]);
      }
      if (e) cw_store_entry_retain(e);
      l->inputs[d * na + a] = e;
    }
  }
  l->part = r->prepare && cw_worker_stamp_of(c, h->type, &r->base);
  w->parts_queued += l->part;
  w->launches_queued++;
  cw_launch_t* before = c->launch_tail;
  if (c->launch_tail) c->launch_tail->next = l;
  else c->launch_head = l;
  c->launch_tail = l;
  // Behind a launch that passed its turn waiting for memory: it passes its own.
  // So does one behind a launch stamped after it: an unordered launch (seq 0)
  // applied before this one's seq came. Its turn would come while the one
  // ahead waits for it: every stamped launch here, of every session, waited
  // for the stall recovery ("did not arrive").
  if (before && (before->stamp_released || cw__launch_stamp(c, before) > cw__launch_stamp(c, l))) {
    cw__launch_release_stamps(c, l);
  }
  cw_worker_launch_pump(c);
}

// Takes `c` off the throttled list, if it is there (the list's reference
// goes with it); true if it was.
static bool cw__launch_unthrottle_conn(cw_worker_t* w, cw_conn_t* c) {
  cw_conn_t* prev = NULL;
  for (cw_conn_t* x = w->launch_throttled; x; prev = x, x = x->throttle_next) {
    if (x != c) continue;
    if (prev) prev->throttle_next = c->throttle_next;
    else w->launch_throttled = c->throttle_next;
    if (w->launch_throttled_tail == c) w->launch_throttled_tail = prev;
    c->throttle_next = NULL;
    return true;
  }
  return false;
}

void cw_worker_launch_conn_closed(cw_conn_t* c) {
  // A part held by the in-flight bounds holds its turn; closed, it fails now
  // (the pump), so later turns need not wait for some launch to end.
  cw_launch_t* first = c->launch_head;
  if (first && first->part && cw__launch_unthrottle_conn(c->w, c)) {
    c->launch_waiting = false;
    cw_worker_launch_pump(c);
    cw_worker_conn_unref(c);  // the list's reference
  }
  if (c->go_waiting) {
    c->go_waiting = false;
    c->launch_waiting = false;  // no go can come now: the pump cancels it
    cw_worker_launch_pump(c);
  }
  cw_launch_t* head = c->launch_head;
  if (head && head->mem_wait) {
    // Nobody is left to hear it: it stops waiting for memory (the pump fails
    // it, and any behind it that would wait too).
    cw_worker_mem_cancel(c->w, head->mem_wait);
    head->mem_wait = NULL;
    head->apply_error = cw_make_status(CW_CANCELLED, "%s closed while launch of executable %"
                                       PRIu64 " waited for memory", cw_worker_conn_name(c),
                                       head->req->exe_id);
    if (head->req->prepare) cw_worker_stamp_hold(c->w, 0);  // a part held its turn
    c->launch_waiting = false;
    cw_worker_launch_pump(c);
    cw_worker_conn_unref(c);  // the wait's reference
  }
  // Only a connection that keeps its session knows it is still there (a
  // peer's PUT connection may outlive the session it named).
  cw_session_t* s = c->keeps_session ? c->session : NULL;
  if (!s || !s->paused) return;
  while (c->launch_head && !c->launch_waiting) {
    cw_launch_t* l = c->launch_head;
    uint64_t stamp = cw_worker_launch_head_stamp(c);
    cw__launch_pop(c);
    cw__launch_fail(c->w, l, cw_make_status(CW_CANCELLED, "%s closed while session %" PRIu64
                                            " was paused: launch not run",
                                            cw_worker_conn_name(c), s->id));
    if (stamp) cw_worker_stamp_passed(c->w, stamp, s->id);  // later turns go on
  }
}

size_t cw_worker_launch_queued(const cw_conn_t* c) {
  size_t n = 0;
  for (const cw_launch_t* l = c->launch_head; l; l = l->next) n++;
  return n;
}

uint64_t cw_worker_launch_head_stamp(const cw_conn_t* c) {
  return c->launch_head ? cw__launch_stamp(c, c->launch_head) : 0;
}
