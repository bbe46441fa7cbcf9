// The worker daemon: one libuv loop thread owns every connection, session and
// the object store; PJRT and the threadpool report back to it. This file is
// the loop and its lifecycle; each request family has its own file
// (cw_worker_<family>.c, docs/architecture.md).
//
// Loop phases (one iteration of uv_run):
//   1. timers: HELLO and connect deadlines (src/net), heartbeats and
//      reconnecting (cw_worker_link.c), the gang order's stall check, the
//      deadline of requests waiting for memory (cw_worker_mem.c).
//   2. pending/poll I/O: accept; reads (src/net: bulk bytes straight into
//      staging memory); write completions (free payloads and bulk staging);
//      connects. The async handle wakes this phase too: it drains the
//      completion queue that PJRT event callbacks fill from plugin threads,
//      and threadpool after-work callbacks apply finished compilations.
//   3. idle: connections that hit the per-wakeup frame cap (or whose reading
//      flow control released) resume parsing here (src/net); requests waiting
//      for memory are admitted here once memory was given back.
//   4. prepare, before the loop blocks: completions that fired inline on this
//      thread are applied (the net's prepare hook), then each connection's
//      gathered small frames are written with one uv_write (src/net).
//   5. close callbacks: connection memory is freed once its handles are
//      closed and no request holds a reference.
// Nothing here blocks on PJRT except calls that only enqueue work; slow
// compilation and deserialization run on the libuv threadpool.
#include "cw_worker.h"

#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_handler_set.h"
#include "cw_host.h"
#include "cw_log.h"
#include "cw_random.h"
#include "cw_time.h"
#include "cw_worker_conn.h"
#include "cw_worker_hostcb.h"
#include "cw_worker_http.h"
#include "cw_worker_internal.h"
#include "cw_worker_launch.h"
#include "cw_worker_link.h"
#include "cw_worker_mem.h"
#include "cw_worker_pin.h"
#include "cw_worker_sched.h"
#include "cw_worker_transfer.h"

#define CW__SHUTDOWN_GRACE_MS 10000

struct cw_completion_s {
  cw_completion_t* next;
  cw_worker_t* w;
  PJRT_Event* event;
  cw_status_t status;
  cw_done_fn fn;
  void* user;
  bool uncounted;  // cw_worker_post: not in w->outstanding
  _Atomic size_t* running;  // cw_worker_when_ready_counted's; NULL: none
};

static void cw__maybe_finish_shutdown(cw_worker_t* w);

// --- Completions from PJRT threads -----------------------------------------

static void cw__on_async(uv_async_t* handle) {
  cw_worker_t* w = handle->data;
  pthread_mutex_lock(&w->mu);
  cw_completion_t* list = w->completions;
  w->completions = NULL;
  pthread_mutex_unlock(&w->mu);
  // Reverse to arrival order.
  cw_completion_t* fifo = NULL;
  while (list) {
    cw_completion_t* next = list->next;
    list->next = fifo;
    fifo = list;
    list = next;
  }
  while (fifo) {
    cw_completion_t* cp = fifo;
    fifo = fifo->next;
    cw_pjrt_event_destroy(w->pjrt, cp->event);
    if (!cp->uncounted) w->outstanding--;
    cp->fn(w, cp->user, cp->status);
    free(cp);
  }
  cw__maybe_finish_shutdown(w);
}

// The net's prepare hook: completions that fired on this very thread.
static bool cw__apply_inline(void* user) {
  cw_worker_t* w = user;
  if (!w->inline_completions) return false;
  w->inline_completions = false;
  cw__on_async(&w->async);
  return true;
}

// Plugin thread: queue the completion and wake the loop.
static void cw__event_fired(void* user, cw_status_t status) {
  cw_completion_t* cp = user;
  cw_worker_t* w = cp->w;
  cp->status = status;
  if (cp->running) atomic_fetch_sub_explicit(cp->running, 1, memory_order_relaxed);
  pthread_mutex_lock(&w->mu);
  cp->next = w->completions;
  w->completions = cp;
  pthread_mutex_unlock(&w->mu);
  if (w->loop_thread_known && pthread_equal(pthread_self(), w->loop_thread) &&
      w->handles_open) {
    // Fired inline (XLA ran the program on this thread): applied before the
    // loop blocks, without an eventfd write and wakeup.
    w->inline_completions = true;
    cw_net_wake(&w->net);
    return;
  }
  uv_async_send(&w->async);
}

void cw_worker_when_ready(cw_worker_t* w, PJRT_Event* event, cw_done_fn fn, void* user) {
  cw_worker_when_ready_counted(w, event, NULL, fn, user);
}

void cw_worker_when_ready_counted(cw_worker_t* w, PJRT_Event* event, _Atomic size_t* running,
                                  cw_done_fn fn, void* user) {
  cw_completion_t* cp = calloc(1, sizeof(*cp));
  if (!cp) {
    // Without memory to wait, block: correctness over latency.
    CW_LOGE("out of memory for a completion; waiting synchronously");
    cw_status_t st = cw_ok_status();
    if (event) {
      PJRT_Event_Await_Args a;
      memset(&a, 0, sizeof(a));
      a.struct_size = sizeof(a);
      a.event = event;
      st = cw_pjrt_status(w->pjrt, w->pjrt->api->PJRT_Event_Await(&a));
      cw_pjrt_event_destroy(w->pjrt, event);
    }
    fn(w, user, st);
    return;
  }
  cp->w = w;
  cp->event = event;
  cp->fn = fn;
  cp->user = user;
  cp->running = running;
  if (running) atomic_fetch_add_explicit(running, 1, memory_order_relaxed);
  w->outstanding++;
  if (!event) {
    cw__event_fired(cp, cw_ok_status());
    return;
  }
  cw_status_t st = cw_pjrt_event_on_ready(w->pjrt, event, cw__event_fired, cp);
  if (st) cw__event_fired(cp, st);
}

bool cw_worker_post(cw_worker_t* w, cw_done_fn fn, void* user) {
  cw_completion_t* cp = calloc(1, sizeof(*cp));
  if (!cp) return false;
  cp->w = w;
  cp->fn = fn;
  cp->user = user;
  cp->uncounted = true;
  pthread_mutex_lock(&w->mu);
  bool open = !w->posts_closed;
  if (open) {
    cp->next = w->completions;
    w->completions = cp;
    uv_async_send(&w->async);  // under mu: the handle is not closed meanwhile
  }
  pthread_mutex_unlock(&w->mu);
  if (!open) free(cp);
  return open;
}

void cw_worker_job_started(cw_worker_t* w) { w->outstanding++; }

void cw_worker_job_done(cw_worker_t* w) {
  w->outstanding--;
  cw__maybe_finish_shutdown(w);
}

// Releases an entry's PJRT handle and memory charge (the store's release callback).
static void cw__release_handle(void* user, cw_store_entry_t* e) {
  cw_worker_t* w = user;
  cw_worker_mem_uncharge(w, e);  // its memory goes
  cw_worker_upload_parts_free(w, e->parts);
  e->parts = NULL;
  if (!e->handle) return;
  if (e->kind == CW_STORE_BUFFER) {
    cw_worker_pin_destroy_buffer(w, (PJRT_Buffer*)e->handle);
  } else {
    cw_pjrt_executable_destroy(w->pjrt, (PJRT_LoadedExecutable*)e->handle);
  }
}

// --- Polling after launches ------------------------------------------------------

// Each loop pass while a window lasts (the loop polls, never sleeps): the
// core goes to any other thread that wants it.
static void cw__on_spin(uv_idle_t* idle) {
  cw_worker_t* w = idle->data;
  if (!w->shutting_down && cw_spin_poll(&w->spin, cw_time_now_ns())) {
    sched_yield();
    return;
  }
  w->spin.polling = false;
  uv_idle_stop(idle);
}

void cw_worker_spin_after_request(cw_worker_t* w) {
  if (w->spin.window_ns && w->handles_open && cw_spin_request(&w->spin, cw_time_now_ns())) {
    uv_idle_start(&w->spin_idle, cw__on_spin);
  }
}

// --- Signals, shutdown -----------------------------------------------------------

static void cw__maybe_finish_shutdown(cw_worker_t* w) {
  if (!w->shutting_down || !w->handles_open || w->outstanding > 0) return;
  w->handles_open = false;
  pthread_mutex_lock(&w->mu);
  w->posts_closed = true;
  pthread_mutex_unlock(&w->mu);
  uv_close((uv_handle_t*)&w->async, NULL);
  cw_net_deinitialize(&w->net);  // a last prepare pass applies what fired inline
  uv_close((uv_handle_t*)&w->shutdown_timer, NULL);
  uv_close((uv_handle_t*)&w->spin_idle, NULL);
}

static void cw__shutdown_timeout(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  CW_LOGE("%zu PJRT operations still outstanding after %d ms; exiting without them",
          w->outstanding, CW__SHUTDOWN_GRACE_MS);
  w->outstanding = 0;
  w->leak_on_exit = true;
  cw__maybe_finish_shutdown(w);
}

void cw_worker_stop(cw_worker_t* w) {
  if (w->shutting_down) return;
  w->shutting_down = true;
  CW_LOGI("shutting down");
  uv_close((uv_handle_t*)&w->sigterm, NULL);
  uv_close((uv_handle_t*)&w->sigint, NULL);
  cw_net_creds_stop(&w->creds);
  cw_net_watch_stop(&w->watch);
  cw_worker_link_stop(w);
  cw_worker_http_stop(w);
  cw_worker_stamp_stop(w);  // launches waiting for their turn go now
  cw_net_stop(&w->net);     // the listener, every connection
  // Any session left (none should be) goes with its objects.
  cw_worker_sessions_free(w);
  cw_store_remove_session(w->store, 0);
  cw_worker_mem_stop(w);  // requests still waiting for memory end
  uv_timer_start(&w->shutdown_timer, cw__shutdown_timeout, CW__SHUTDOWN_GRACE_MS, 0);
  cw__maybe_finish_shutdown(w);
}

static void cw__on_signal(uv_signal_t* s, int signum) {
  cw_worker_t* w = s->data;
  CW_LOGI("signal %d", signum);
  cw_worker_stop(w);
}

static void cw__on_watch_eof(void* user) {
  cw_worker_t* w = user;
  CW_LOGI("watch-fd reached EOF: the parent is gone");
  cw_worker_stop(w);
}

// --- Lifecycle ------------------------------------------------------------------

// Freed staging blocks kept for reuse: CAUSEWAY_STAGING_CACHE_BYTES, and
// by default at most a sixteenth of the memory this process may use (a
// 1 GiB cache kept idle in a 1.7 GB memory cgroup got the worker killed at
// the next session's upload: a helper's audit).
static uint64_t cw__staging_cache_bytes(const cw_settings_t* settings) {
  uint64_t cap = (uint64_t)cw_settings_int(settings, CW_SET_STAGING_CACHE_BYTES);
  if (cw_settings_given(settings, CW_SET_STAGING_CACHE_BYTES)) return cap;
  uint64_t mem = cw_host_memory_bytes();
  return mem && mem / 16 < cap ? mem / 16 : cap;
}

cw_status_t cw_worker_create(const cw_settings_t* settings, cw_worker_t** out) {
  *out = NULL;
  signal(SIGPIPE, SIG_IGN);
  cw_net_creds_ignore_hup();  // until cw_net_creds_start: a reload asked now ends nothing
  cw_worker_t* w = calloc(1, sizeof(*w));
  if (!w) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  *out = w;  // released by cw_worker_release even on failure
  w->settings = settings;
  w->token = cw_settings_string(settings, CW_SET_TOKEN);
  w->next_session_key = 1;
  cw_status_free(cw_random_id(&w->session_key_salt));  // 0 if the kernel says no
  pthread_mutex_init(&w->mu, NULL);
  causeway__v1__inventory__init(&w->inventory);
  int rc = uv_loop_init(&w->loop);
  if (rc < 0) return cw_make_status(CW_INTERNAL, "uv_loop_init: %s", uv_strerror(rc));
  w->loop_initialized = true;
  // Before the plugin's threads: libuv's get their place first.
  CW_RETURN_IF_ERROR(cw_net_threadpool_start(&w->loop), "worker");
  CW_RETURN_IF_ERROR(cw_pjrt_create(cw_settings_string(settings, CW_SET_PLUGIN),
                                    (int)cw_settings_int(settings, CW_SET_DEVICES), &w->pjrt),
                     "worker");
  cw_handler_sets_options_t ho = {
      .ffi_libraries = cw_settings_string(settings, CW_SET_FFI_LIBRARIES),
      .jaxlib_python = cw_settings_string(settings, CW_SET_JAXLIB_PYTHON),
      .plugin_path = cw_settings_string(settings, CW_SET_PLUGIN),
  };
  CW_RETURN_IF_ERROR(cw_handler_sets_create(&ho, w->pjrt, &w->handlers), "worker");
  CW_RETURN_IF_ERROR(cw_store_create(cw__release_handle, w, &w->store), "worker");
  CW_RETURN_IF_ERROR(cw_staging_create(cw__staging_cache_bytes(settings), &w->staging),
                     "worker");
  CW_RETURN_IF_ERROR(cw_worker_mem_start(w), "worker");
  CW_RETURN_IF_ERROR(cw_worker_hostcb_start(w), "worker");
  CW_RETURN_IF_ERROR(cw_worker_launch_start(w), "worker");
  CW_RETURN_IF_ERROR(cw_pjrt_inventory_initialize(w->pjrt, &w->inventory), "inventory");
  w->inventory_ready = true;
  const char* cpu = cw_settings_string(w->settings, CW_SET_HOST_CPU);
  if (cpu[0])
    snprintf(w->host_cpu, sizeof(w->host_cpu), "%s", cpu);
  else
    cw_host_cpu_identity(w->host_cpu, sizeof(w->host_cpu));
  w->inventory.host_cpu = w->host_cpu;  // borrowed: deinitialize leaves it
  uv_async_init(&w->loop, &w->async, cw__on_async);
  w->async.data = w;
  uv_idle_init(&w->loop, &w->spin_idle);
  w->spin_idle.data = w;
  cw_spin_initialize(&w->spin, cw_settings_int(settings, CW_SET_WORKER_SPIN_US) * 1000);
  uv_timer_init(&w->loop, &w->shutdown_timer);
  w->shutdown_timer.data = w;
  uv_unref((uv_handle_t*)&w->shutdown_timer);
  uv_signal_init(&w->loop, &w->sigterm);
  uv_signal_init(&w->loop, &w->sigint);
  w->sigterm.data = w->sigint.data = w;
  w->handles_open = true;
  uv_signal_start(&w->sigterm, cw__on_signal, SIGTERM);
  uv_signal_start(&w->sigint, cw__on_signal, SIGINT);
  cw_net_options_t no;
  cw_net_options_from_settings(settings, NULL, &no);
  cw_net_initialize(&w->net, &w->loop, &no);
  w->net_initialized = true;
  cw_net_set_prepare_hook(&w->net, cw__apply_inline, w);
  CW_RETURN_IF_ERROR(cw_worker_conn_listen(w, cw_settings_string(settings, CW_SET_LISTEN)),
                     "worker");
  const char* name = cw_settings_string(settings, CW_SET_WORKER_NAME);
  // The name defaults to the listen address; HELLOs read it only from now on.
  w->name = name[0] ? name : w->net.listen_address;
  w->net.options.name = w->name;
  printf("causeway-worker listening on %s\n", w->net.listen_address);
  fflush(stdout);
  CW_LOGI("worker %s: %zu devices, platform %s %s", w->name, w->pjrt->num_devices,
          w->inventory.platform_name, w->inventory.platform_version);
  int64_t watch_fd = cw_settings_int(settings, CW_SET_WATCH_FD);
  if (watch_fd >= 0) {
    CW_RETURN_IF_ERROR(cw_net_watch_start(&w->loop, (int)watch_fd, cw__on_watch_eof, w,
                                          &w->watch), "worker");
  }
  CW_RETURN_IF_ERROR(cw_net_creds_start(&w->creds, &w->loop, settings, &w->net), "worker");
  CW_RETURN_IF_ERROR(cw_worker_link_start(w), "worker");
  CW_RETURN_IF_ERROR(cw_worker_http_start(w), "worker");
  return cw_ok_status();
}

cw_status_t cw_worker_run(cw_worker_t* w) {
  w->loop_thread = pthread_self();
  w->loop_thread_known = true;
  uv_run(&w->loop, UV_RUN_DEFAULT);
  return cw_worker_link_take_error(w);  // the loop ends with OK unless the link gave up
}

void cw_worker_release(cw_worker_t* w) {
  if (!w) return;
  if (w->loop_initialized) {
    // Close whatever a failed start left open, then let the loop finish.
    if (!w->shutting_down && w->handles_open) cw_worker_stop(w);
    if (w->net_initialized) cw_net_deinitialize(&w->net);
    uv_run(&w->loop, UV_RUN_DEFAULT);
  }
  if (w->leak_on_exit) return;  // PJRT may still call into us
  cw_net_creds_free(&w->creds);
  cw_worker_hostcb_stop(w);  // its threads' launches have ended with the loop
  cw_worker_launch_stop(w);  // and the dispatch thread's
  cw_store_release(w->store);
  cw_worker_mem_free(w);
  if (w->staging) {
    cw_staging_stats_t ss;
    cw_staging_stats(w->staging, &ss);
    CW_LOGI("staging cache: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " bytes kept",
            ss.hits, ss.misses, ss.cached_bytes);
  }
  cw_staging_release(w->staging);  // every block came back with its transfer
  if (w->inventory_ready) cw_pjrt_inventory_deinitialize(&w->inventory);
  cw_handler_sets_release(w->handlers);
  cw_pjrt_release(w->pjrt);
  if (w->loop_initialized) uv_loop_close(&w->loop);
  cw_worker_conn_free_peer_stats(w);
  cw_worker_stamp_free(w);
  cw_worker_link_release(w);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
