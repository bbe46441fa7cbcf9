// Memory back-pressure at the worker (see cw_worker_mem.h).
#include "cw_worker_mem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_bytes.h"
#include "cw_log.h"
#include "cw_mem_budget.h"
#include "cw_time.h"

struct cw_worker_mem_wait_s {
  cw_mem_waiter_t* waiter;  // in the budget's queue
  cw_worker_mem_fn fn;
  void* user;
  char what[96];
};

typedef struct cw_worker_mem_s {
  cw_mem_budget_t budget;
  bool limited;
  const char* source;  // where the budget came from, for messages and STATS
  int64_t wait_ms;
  uint64_t* scratch;   // [num_devices]
  uv_idle_t wake;      // admits waiters after memory was given back
  uv_timer_t timer;    // the next deadline
  bool handles_open;
  bool stopped;
} cw_worker_mem_t;

static void cw__mem_settle(cw_worker_t* w, bool wake);

cw_status_t cw_worker_mem_start(cw_worker_t* w) {
  cw_worker_mem_t* m = calloc(1, sizeof(*m));
  size_t nd = w->pjrt->num_devices;
  uint64_t* limits = calloc(nd + 1, sizeof(*limits));
  if (m) m->scratch = calloc(nd + 1, sizeof(*m->scratch));
  if (!m || !limits || !m->scratch) {
    if (m) free(m->scratch);
    free(m);
    free(limits);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the memory budget");
  }
  w->mem = m;
  int64_t flag = cw_settings_int(w->settings, CW_SET_MEMORY_LIMIT);
  m->wait_ms = cw_settings_int(w->settings, CW_SET_MEMORY_WAIT_MS);
  char plugin_says[256] = "";
  if (flag > 0) {
    for (size_t d = 0; d < nd; ++d) limits[d] = (uint64_t)flag;
    m->source = "--memory-limit";
  } else {
    // The plugin's own limits where it reports them (a GPU plugin's
    // allocator); XLA's CPU plugin answers UNIMPLEMENTED.
    size_t reported = 0;
    for (size_t d = 0; d < nd; ++d) {
      cw_status_t st = cw_pjrt_device_memory_limit(w->pjrt, d, &limits[d]);
      if (st && !plugin_says[0]) snprintf(plugin_says, sizeof(plugin_says), "%s",
                                          cw_status_message(st));
      cw_status_free(st);
      reported += limits[d] > 0;
    }
    m->source = reported ? "the plugin's memory limit" : "";
  }
  cw_status_t st = cw_mem_budget_initialize(&m->budget, nd, limits);
  free(limits);
  if (st) return st;
  m->limited = cw_mem_budget_limited(&m->budget);
  uv_idle_init(&w->loop, &m->wake);
  m->wake.data = w;
  uv_timer_init(&w->loop, &m->timer);
  m->timer.data = w;
  uv_unref((uv_handle_t*)&m->timer);
  m->handles_open = true;
  if (m->limited) {
    char b[32];
    cw_bytes_format(m->budget.limit[0], b, sizeof(b));
    CW_LOGI("memory budget: %s per device (%s); a request that does not fit waits up to %" PRId64
            " ms (--memory-wait-ms)", b, m->source, m->wait_ms);
  } else {
    CW_LOGI("memory budget: none (%s%s); set --memory-limit to make requests wait for memory",
            plugin_says[0] ? "the plugin reports no limit: " : "no limit reported",
            plugin_says);
  }
  return cw_ok_status();
}

// Ends waits from the loop (never inside a request's own call stack).
static void cw__end_wait(cw_worker_t* w, cw_worker_mem_wait_t* wt, cw_status_t status) {
  cw_worker_mem_fn fn = wt->fn;
  void* user = wt->user;
  cw_mem_budget_waiter_free(wt->waiter);
  free(wt);
  fn(w, user, status);
}

void cw_worker_mem_stop(cw_worker_t* w) {
  cw_worker_mem_t* m = w->mem;
  if (!m || m->stopped) return;
  m->stopped = true;
  while (m->budget.head) {
    cw_mem_waiter_t* waiter = m->budget.head;
    cw_mem_budget_remove(&m->budget, waiter);
    cw__end_wait(w, waiter->user,
                 cw_make_status(CW_CANCELLED, "%s: the worker is shutting down",
                                ((cw_worker_mem_wait_t*)waiter->user)->what));
  }
  if (m->handles_open) {
    m->handles_open = false;
    uv_close((uv_handle_t*)&m->wake, NULL);
    uv_close((uv_handle_t*)&m->timer, NULL);
  }
}

void cw_worker_mem_free(cw_worker_t* w) {
  cw_worker_mem_t* m = w->mem;
  if (!m) return;
  cw_mem_budget_deinitialize(&m->budget);
  free(m->scratch);
  free(m);
  w->mem = NULL;
}

bool cw_worker_mem_limited(const cw_worker_t* w) { return w->mem && w->mem->limited; }

uint64_t* cw_worker_mem_scratch(cw_worker_t* w) {
  memset(w->mem->scratch, 0, w->pjrt->num_devices * sizeof(*w->mem->scratch));
  return w->mem->scratch;
}

// "600 MiB on device 0": what `need` asks of `device`.
static void cw__need_text(const cw_worker_mem_t* m, const uint64_t* need, size_t device,
                          char* buf, size_t size) {
  char b[32];
  cw_bytes_format(device < m->budget.num_devices ? need[device] : 0, b, sizeof(b));
  snprintf(buf, size, "%s on device %zu", b, device);
}

cw_status_t cw_worker_mem_reserve(cw_worker_t* w, uint64_t skey, const uint64_t* need,
                                  const char* what, cw_worker_mem_fn fn, void* user,
                                  cw_worker_mem_wait_t** out_wait) {
  *out_wait = NULL;
  cw_worker_mem_t* m = w->mem;
  if (!m || !m->limited) return cw_ok_status();
  size_t device = 0;
  cw_mem_decision_t d = cw_mem_budget_decide(&m->budget, skey, need, &device);
  if (d == CW_MEM_FITS) return cw_ok_status();
  char needs[96], limit[32];
  cw__need_text(m, need, device, needs, sizeof(needs));
  cw_bytes_format(m->budget.limit[device], limit, sizeof(limit));
  if (d == CW_MEM_NEVER) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "%s: needs %s; the worker's budget is %s per "
                          "device (%s)", what, needs, limit, m->source);
  }
  if (m->stopped) {
    return cw_make_status(CW_CANCELLED, "%s: the worker is shutting down", what);
  }
  cw_worker_mem_wait_t* wt = calloc(1, sizeof(*wt));
  int64_t now = cw_time_now_ms();
  cw_status_t st = wt ? cw_mem_budget_enqueue(&m->budget, skey, need, now, now + m->wait_ms, wt,
                                              &wt->waiter)
                      : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (st) {
    free(wt);
    return cw_status_annotate(st, "%s", what);
  }
  wt->fn = fn;
  wt->user = user;
  snprintf(wt->what, sizeof(wt->what), "%s", what);
  char used[32];
  cw_bytes_format(m->budget.used[device], used, sizeof(used));
  CW_LOGD("%s waits for memory: needs %s, where %s of %s are in use", what, needs, used, limit);
  cw__mem_settle(w, false);
  *out_wait = wt;
  return cw_ok_status();
}

void cw_worker_mem_cancel(cw_worker_t* w, cw_worker_mem_wait_t* wt) {
  if (!wt) return;
  cw_mem_budget_remove(&w->mem->budget, wt->waiter);
  cw_mem_budget_waiter_free(wt->waiter);
  free(wt);
  cw__mem_settle(w, true);  // a later waiter of its session may go now
}

void cw_worker_mem_charge(cw_worker_t* w, cw_store_entry_t* e, int device, uint64_t bytes) {
  cw_worker_mem_uncharge(w, e);
  if (!w->mem || device < 0 || !bytes) return;
  cw_mem_budget_charge(&w->mem->budget, (size_t)device, bytes);
  e->charge = bytes;
  e->charge_device = device;
}

void cw_worker_mem_uncharge(cw_worker_t* w, cw_store_entry_t* e) {
  if (!e->charge) return;
  uint64_t bytes = e->charge;
  e->charge = 0;
  if (!w->mem) return;
  cw_mem_budget_release(&w->mem->budget, (size_t)e->charge_device, bytes);
  cw__mem_settle(w, true);
}

// --- Waking and timing out -----------------------------------------------------

static void cw__on_wake(uv_idle_t* idle) {
  cw_worker_t* w = idle->data;
  cw_worker_mem_t* m = w->mem;
  uv_idle_stop(idle);
  cw_mem_waiter_t* waiter;
  // Each admitted request charges what it takes before the next is tried.
  while (!m->stopped && (waiter = cw_mem_budget_take_ready(&m->budget)) != NULL) {
    cw_worker_mem_wait_t* wt = waiter->user;
    CW_LOGD("%s: memory freed after %" PRId64 " ms", wt->what,
            cw_time_now_ms() - waiter->since_ms);
    cw__end_wait(w, wt, cw_ok_status());
  }
  cw__mem_settle(w, false);
}

static void cw__on_timer(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  cw_worker_mem_t* m = w->mem;
  int64_t now = cw_time_now_ms();
  cw_mem_waiter_t* waiter;
  bool expired = false;
  while (!m->stopped && (waiter = cw_mem_budget_take_expired(&m->budget, now)) != NULL) {
    expired = true;
    cw_worker_mem_wait_t* wt = waiter->user;
    // The device it waited for: the first one it still does not fit on;
    // none: it fits, and waited behind an earlier request of its session.
    size_t device = SIZE_MAX, first = 0;
    for (size_t d = m->budget.num_devices; d-- > 0;) {
      if (waiter->need[d]) first = d;
    }
    for (size_t d = 0; d < m->budget.num_devices && device == SIZE_MAX; ++d) {
      uint64_t lim = m->budget.limit[d], used = m->budget.used[d];
      if (waiter->need[d] && lim && (used >= lim || waiter->need[d] > lim - used)) device = d;
    }
    bool behind = device == SIZE_MAX;
    if (behind) device = first;
    char needs[96], used[32], limit[32];
    cw__need_text(m, waiter->need, device, needs, sizeof(needs));
    cw_bytes_format(m->budget.used[device], used, sizeof(used));
    cw_bytes_format(m->budget.limit[device], limit, sizeof(limit));
    cw_status_t st =
        behind ? cw_make_status(CW_RESOURCE_EXHAUSTED, "%s: waited %" PRId64 " ms "
                                "(--memory-wait-ms) for %s behind an earlier request of its "
                                "session that waits for memory", wt->what, m->wait_ms, needs)
               : cw_make_status(CW_RESOURCE_EXHAUSTED, "%s: waited %" PRId64 " ms "
                                "(--memory-wait-ms) for %s, and it did not free: %s of the "
                                "worker's budget of %s per device (%s) are in use", wt->what,
                                m->wait_ms, needs, used, limit, m->source);
    CW_LOGW("%s", cw_status_message(st));
    cw__end_wait(w, wt, st);
  }
  cw__mem_settle(w, expired);  // later waiters of their sessions may go now
}

// After the queue or the bytes in use changed: times the next deadline and,
// with `wake` (memory was given back or a waiter left), tries the waiters
// from the idle phase, outside the call stack that freed the memory.
static void cw__mem_settle(cw_worker_t* w, bool wake) {
  cw_worker_mem_t* m = w->mem;
  if (!m || !m->handles_open) return;
  if (!m->budget.head) {
    uv_idle_stop(&m->wake);
    uv_timer_stop(&m->timer);
    return;
  }
  if (wake) uv_idle_start(&m->wake, cw__on_wake);
  int64_t next = cw_mem_budget_next_deadline(&m->budget);
  int64_t delay = next - cw_time_now_ms();
  uv_timer_start(&m->timer, cw__on_timer, delay > 0 ? (uint64_t)delay : 0, 0);
}

// --- STATS ---------------------------------------------------------------------

void cw_worker_mem_stats(cw_worker_t* w, Causeway__V1__Stats* st) {
  cw_worker_mem_t* m = w->mem;
  if (!m) return;
  const cw_mem_budget_t* b = &m->budget;
  uint64_t least = 0;
  for (size_t d = 0; d < b->num_devices; ++d) {
    if (b->limit[d] && (!least || b->limit[d] < least)) least = b->limit[d];
  }
  st->memory_budget = least;
  st->memory_budget_source = (char*)(m->limited ? m->source : "");
  st->memory_in_use = cw_mem_budget_used_total(b);
  st->memory_in_use_max = cw_mem_budget_used_max(b);
  st->memory_waiting = b->waiting;
  st->memory_waiting_bytes = b->waiting_bytes;
  st->memory_waits = b->waits;
  st->memory_wait_timeouts = b->timeouts;
  st->memory_refused = b->refused;
}

void cw_worker_mem_session_waiting(const cw_worker_t* w, uint64_t skey, uint64_t* out_waiting,
                                   uint64_t* out_waiting_bytes) {
  *out_waiting = 0;
  *out_waiting_bytes = 0;
  if (!w->mem) return;
  for (const cw_mem_waiter_t* x = w->mem->budget.head; x; x = x->next) {
    if (x->session != skey) continue;
    (*out_waiting)++;
    *out_waiting_bytes += x->total;
  }
}
