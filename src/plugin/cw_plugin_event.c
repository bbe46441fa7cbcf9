// Futures and PJRT events (cw_plugin_event.h).
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_trace.h"
#include "cw_prefetch.h"
#include "cw_recycle.h"
#include "cw_time.h"

typedef struct cw__waiter_s {
  struct cw__waiter_s* next;
  PJRT_Event_OnReadyCallback cb;  // gets an owned error
  void* user;
  int64_t trace_t0;  // obs: PJRT OnReady registration (a wait in the timeline); 0: none
} cw__waiter_t;

struct cw_plugin_future_s {
  _Atomic int refs;
  _Atomic bool done;  // set (release) after status is final
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cw_status_t status;
  // Most futures get one OnReady (JAX's, for a launch's event): it lives
  // here, so a launch allocates no waiter on JAX's thread for the reader
  // thread to free.
  cw__waiter_t first;
  bool first_used;
  bool carried;           // created failed with another launch's input error (create_carried)
  cw__waiter_t* waiters;  // LIFO; order among callbacks is unspecified
  void* ctx;              // the completer's (cw_plugin_future_set_ctx)
  _Atomic bool awaited;   // someone waits on it (cw_plugin_future_expect_wait)
  // Handed back (cw_plugin_future_complete_handback): the callbacks taken
  // off at completion, on the hand-back list through `hb_next`.
  struct cw_plugin_future_s* hb_next;
  bool hb_first;
  cw__waiter_t* hb_waiters;
};

// A launch's future is made on JAX's thread and often freed by the client's
// reader, whose reply drops the last reference.
static cw_recycle_t cw__futures = CW_RECYCLE_INIT(sizeof(cw_plugin_future_t), 256);

cw_plugin_future_t* cw_plugin_future_create(void) {
  cw_plugin_future_t* f = cw_recycle_alloc(&cw__futures);
  if (!f) return NULL;
  atomic_init(&f->refs, 1);
  atomic_init(&f->done, false);
  atomic_init(&f->awaited, false);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  return f;
}

cw_plugin_future_t* cw_plugin_future_create_done(cw_status_t status) {
  cw_plugin_future_t* f = cw_plugin_future_create();
  if (!f) {
    cw_status_free(status);
    return NULL;
  }
  f->status = status;
  atomic_store_explicit(&f->done, true, memory_order_release);
  return f;
}

cw_plugin_future_t* cw_plugin_future_create_carried(cw_status_t status) {
  cw_plugin_future_t* f = cw_plugin_future_create_done(status);
  if (f) f->carried = true;
  return f;
}

bool cw_plugin_future_is_carried(const cw_plugin_future_t* f) { return f->carried; }

void cw_plugin_future_retain(cw_plugin_future_t* f) {
  atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

void cw_plugin_future_release(cw_plugin_future_t* f) {
  if (!f) return;
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  // Waiters hold no reference of their own: a future dropped before it
  // completes just loses them (only possible for futures nobody completes).
  cw__waiter_t* w = f->waiters;
  while (w) {
    cw__waiter_t* next = w->next;
    free(w);
    w = next;
  }
  cw_status_free(f->status);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  cw_recycle_free(&cw__futures, f);
}

// Callbacks running on this thread (calls into the plugin from inside one
// are not the caller cw__handback_main looks at), and whether it is the
// runner.
static _Thread_local int cw__in_callback;
static _Thread_local bool cw__is_runner;

static void cw__waiter_call(const cw__waiter_t* w, cw_status_t status) {
  if (w->trace_t0) {
    cw_plugin_trace_client_event("wait", "on_ready", CW_PLUGIN_TRACE_LANE_WAIT, w->trace_t0, NULL,
                                 0, 0, 0);
  }
  // The PJRT callback owns the error it receives.
  cw__in_callback++;
  w->cb(status ? cw_plugin_error_from_status(cw_status_clone(status)) : NULL, w->user);
  cw__in_callback--;
}

void cw_plugin_future_set_ctx(cw_plugin_future_t* f, void* ctx) { f->ctx = ctx; }

void* cw_plugin_future_ctx(const cw_plugin_future_t* f) { return f->ctx; }

// Marks `f` done with `status`; returns its callbacks (*out_first: the
// embedded one) with a reference to `f` for running them, or false when `f`
// was done already (`status` freed).
static bool cw__finish(cw_plugin_future_t* f, cw_status_t status, bool* out_first,
                       cw__waiter_t** out_waiters) {
  pthread_mutex_lock(&f->mu);
  if (atomic_load_explicit(&f->done, memory_order_relaxed)) {
    pthread_mutex_unlock(&f->mu);
    cw_status_free(status);
    return false;
  }
  f->status = status;
  atomic_store_explicit(&f->done, true, memory_order_release);
  *out_waiters = f->waiters;
  f->waiters = NULL;
  *out_first = f->first_used;
  f->first_used = false;
  pthread_cond_broadcast(&f->cv);
  // Callbacks may drop the last outside reference; keep `f` alive for them.
  cw_plugin_future_retain(f);
  pthread_mutex_unlock(&f->mu);
  return true;
}

// Runs the callbacks cw__finish took off `f` and drops its reference. Done:
// nothing writes `first` or the list again.
static void cw__run_callbacks(cw_plugin_future_t* f, bool first, cw__waiter_t* w) {
  if (first) cw__waiter_call(&f->first, f->status);
  while (w) {
    cw__waiter_t* next = w->next;
    cw__waiter_call(w, f->status);
    free(w);
    w = next;
  }
  cw_plugin_future_release(f);
}

void cw_plugin_future_complete(cw_plugin_future_t* f, cw_status_t status) {
  bool first;
  cw__waiter_t* w;
  if (cw__finish(f, status, &first, &w)) cw__run_callbacks(f, first, w);
}

// ---- Handing callbacks back --------------------------------------------------
//
// JAX registers an OnReady callback on every launch's event; it sets a C++
// promise and frees it and its closure, which JAX's thread allocated. Run by
// the client's reader, those frees and JAX's next allocations took glibc's
// arena lock from two threads at once, and each collision put one of them to
// sleep (docs/performance.md, session 28). Handed back, they run on the next
// thread that calls the plugin (JAX's, launching the next program), and its
// own allocator cache takes the memory back. Only Execute, Await and client
// destroy run them (not OnReady or ReadyEvent, whose callers may hold locks
// of their own that another launch's callbacks could want). A future
// someone waits on is never handed back, and the runner thread runs what no
// caller took within CAUSEWAY_HANDBACK_US (up to 16 times that while the
// last caller is runnable, cw__handback_main).

static struct {
  _Atomic int64_t max_ns;             // CAUSEWAY_HANDBACK_US; 0: never hand back
  _Atomic(cw_plugin_future_t*) head;  // LIFO through hb_next
  _Atomic int64_t since_ns;           // when the list last became non-empty
  _Atomic bool idle;                  // the runner waits for a push, not a time
  _Atomic int runner;                 // 0: not started, 1: running, -1: cannot start
  _Alignas(CW_CACHE_LINE) _Atomic int caller;    // the thread that last called in (its tid)
  pthread_once_t once;
  pthread_mutex_t mu;
  pthread_cond_t cv;  // CLOCK_MONOTONIC
} cw__hb = {.max_ns = 1000000, .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

void cw_plugin_future_set_handback_us(int64_t us) {
  atomic_store(&cw__hb.max_ns, us * 1000);
  if (atomic_load(&cw__hb.runner) != 1) return;
  pthread_mutex_lock(&cw__hb.mu);  // a shorter limit: the runner looks again
  pthread_cond_signal(&cw__hb.cv);
  pthread_mutex_unlock(&cw__hb.mu);
}

// Runs every callback handed back so far, in completion order.
static void cw__run_handed_back(void) {
  if (!atomic_load(&cw__hb.head)) return;  // seq_cst: against `awaited` (complete_handback)
  cw_plugin_future_t* f = atomic_exchange_explicit(&cw__hb.head, NULL, memory_order_acquire);
  cw_plugin_future_t* fifo = NULL;  // in completion order
  while (f) {
    cw_plugin_future_t* next = f->hb_next;
    cw_prefetch_write(f, sizeof(*f));  // the reader wrote it: all its lines at once
    f->hb_next = fifo;
    fifo = f;
    f = next;
  }
  while (fifo) {
    cw_plugin_future_t* next = fifo->hb_next;
    cw__run_callbacks(fifo, fifo->hb_first, fifo->hb_waiters);
    fifo = next;
  }
}

static _Thread_local int cw__tid;

void cw_plugin_future_run_handed_back(void) {
  if (!cw__in_callback && !cw__is_runner) {
    if (!cw__tid) cw__tid = (int)syscall(SYS_gettid);
    atomic_store_explicit(&cw__hb.caller, cw__tid, memory_order_relaxed);
  }
  cw__run_handed_back();
}

// Whether thread `tid` of this process is running or waiting for a core
// (state R), i.e. will call into the plugin again, rather than sleeping.
static bool cw__runnable(int tid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* p = strrchr(buf, ')');  // the name may hold anything but ends there
  return p && p[1] == ' ' && p[2] == 'R';
}

// Runs what no caller took within max_ns, unless the thread that last
// called in is runnable, only waiting for a core (then it takes them itself,
// as on a machine with more threads than cores; running them here would
// bring back the cross-thread frees), for up to CW__HANDBACK_RUNNABLE_MAX
// times max_ns. With nothing handed back it sleeps until a push wakes it
// (only the first push after it went idle does); then until the oldest is
// due. So it wakes at most about twice a max_ns, whatever the launch rate.
#define CW__HANDBACK_RUNNABLE_MAX 16
static void* cw__handback_main(void* arg) {
  (void)arg;
  cw__is_runner = true;
  // Nice 19 (this thread's own): with many JAX processes on few cores its
  // wakeups at normal priority preempted their threads and the controller
  // (sessions_bench, 16 sessions relayed: 34k-105k launches/s, against
  // 105k-115k at nice 19 and 107k-132k without the hand-back); SCHED_IDLE
  // starved it instead (a blocked waiter's callback 4 ms late with two busy
  // processes beside it, 1.1-1.8 ms at nice 19).
  (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
  pthread_mutex_lock(&cw__hb.mu);
  for (;;) {
    if (!atomic_load(&cw__hb.head)) {
      atomic_store(&cw__hb.idle, true);
      // A push after this sees `idle` (both seq_cst) and clears it under mu.
      while (atomic_load(&cw__hb.idle) && !atomic_load(&cw__hb.head)) {
        pthread_cond_wait(&cw__hb.cv, &cw__hb.mu);
      }
      atomic_store(&cw__hb.idle, false);
    }
    int64_t max = atomic_load(&cw__hb.max_ns);
    int64_t since = atomic_load(&cw__hb.since_ns);
    int64_t now = cw_time_now_ns();
    int64_t due = since + max;
    if (atomic_load(&cw__hb.head) && now >= due) {
      int caller = atomic_load_explicit(&cw__hb.caller, memory_order_relaxed);
      if (now < since + CW__HANDBACK_RUNNABLE_MAX * max && caller && cw__runnable(caller)) {
        due = now + max;
      } else {
        pthread_mutex_unlock(&cw__hb.mu);
        cw__run_handed_back();
        pthread_mutex_lock(&cw__hb.mu);
        continue;
      }
    }
    struct timespec ts = cw_time_timespec(due);
    pthread_cond_timedwait(&cw__hb.cv, &cw__hb.mu, &ts);
  }
  return NULL;
}

static void cw__handback_start(void) {
  cw_time_cond_init(&cw__hb.cv);
  pthread_t t;
  pthread_attr_t ta;
  pthread_attr_init(&ta);
  pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &ta, cw__handback_main, NULL);
  pthread_attr_destroy(&ta);
  if (!rc) pthread_setname_np(t, "cw-handback");
  atomic_store(&cw__hb.runner, rc ? -1 : 1);
}

void cw_plugin_future_complete_handback(cw_plugin_future_t* f, cw_status_t status) {
  bool first;
  cw__waiter_t* w;
  if (!cw__finish(f, status, &first, &w)) return;
  if ((!first && !w) || atomic_load(&f->awaited) || !atomic_load(&cw__hb.max_ns)) {
    cw__run_callbacks(f, first, w);
    return;
  }
  pthread_once(&cw__hb.once, cw__handback_start);
  if (atomic_load(&cw__hb.runner) != 1) {  // no thread to bound the wait
    cw__run_callbacks(f, first, w);
    return;
  }
  f->hb_first = first;
  f->hb_waiters = w;
  int64_t now = cw_time_now_ns();
  cw_plugin_future_t* head = atomic_load_explicit(&cw__hb.head, memory_order_relaxed);
  do {
    f->hb_next = head;
    // The age of a list this push starts is known before the runner can see it.
    if (!head) atomic_store(&cw__hb.since_ns, now);
  } while (!atomic_compare_exchange_weak(&cw__hb.head, &head, f));  // seq_cst: against `idle`
  // A waiter that came meanwhile may have found the list empty before this
  // push (both seq_cst): then it is ours to run.
  if (atomic_load(&f->awaited)) {
    cw__run_handed_back();
    return;
  }
  if (head) return;
  if (atomic_load(&cw__hb.idle)) {
    pthread_mutex_lock(&cw__hb.mu);
    if (atomic_exchange(&cw__hb.idle, false)) pthread_cond_signal(&cw__hb.cv);
    pthread_mutex_unlock(&cw__hb.mu);
  }
}

void cw_plugin_future_expect_wait(cw_plugin_future_t* f) {
  atomic_store(&f->awaited, true);  // seq_cst: then the waiter looks at the list
}

bool cw_plugin_future_is_done(cw_plugin_future_t* f) {
  return atomic_load_explicit(&f->done, memory_order_acquire);
}

bool cw_plugin_future_spin(cw_plugin_future_t* f, int64_t budget_us, void (*take)(void* arg),
                           void* arg) {
  if (budget_us <= 0 || cw_plugin_future_is_done(f)) return cw_plugin_future_is_done(f);
  int64_t until = cw_time_now_ns() + budget_us * 1000;
  // sched_yield hands the core to any thread that can run (the peer on this
  // core, the reader that completes `f` on a busy machine); on an idle one
  // it returns at once.
  for (;;) {
    if (take) take(arg);
    if (cw_plugin_future_is_done(f) || cw_time_now_ns() >= until) break;
    sched_yield();
  }
  return cw_plugin_future_is_done(f);
}

cw_status_t cw_plugin_future_wait(cw_plugin_future_t* f) {
  if (!atomic_load_explicit(&f->done, memory_order_acquire)) {
    pthread_mutex_lock(&f->mu);
    while (!atomic_load_explicit(&f->done, memory_order_relaxed)) {
      pthread_cond_wait(&f->cv, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
  }
  return f->status ? cw_status_clone(f->status) : cw_ok_status();
}

// Registers `w` (copied) to run at completion, or runs it now if `f` is
// done. false: out of memory (nothing registered).
static bool cw__future_add(cw_plugin_future_t* f, const cw__waiter_t* w) {
  pthread_mutex_lock(&f->mu);
  if (!atomic_load_explicit(&f->done, memory_order_relaxed)) {
    if (!f->first_used) {
      f->first = *w;
      f->first_used = true;
    } else {
      cw__waiter_t* more = malloc(sizeof(*more));
      if (!more) {
        pthread_mutex_unlock(&f->mu);
        return false;
      }
      *more = *w;
      more->next = f->waiters;
      f->waiters = more;
    }
    pthread_mutex_unlock(&f->mu);
    return true;
  }
  pthread_mutex_unlock(&f->mu);
  cw__waiter_call(w, f->status);  // done: status is final
  return true;
}

// ---- PJRT_Event_* ------------------------------------------------------------

#define CW__EVENT(args) ((cw_plugin_future_t*)(args)->event)

PJRT_Error* cw_plugin_event_destroy(PJRT_Event_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_Destroy_Args, event);
  cw_plugin_future_release(CW__EVENT(args));
  return NULL;
}

PJRT_Error* cw_plugin_event_is_ready(PJRT_Event_IsReady_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_IsReady_Args, is_ready);
  CW_PLUGIN_NEED(args->event, "PJRT_Event_IsReady", "event");
  args->is_ready = cw_plugin_future_is_done(CW__EVENT(args));
  return NULL;
}

PJRT_Error* cw_plugin_event_error(PJRT_Event_Error_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_Error_Args, event);
  CW_PLUGIN_NEED(args->event, "PJRT_Event_Error", "event");
  cw_plugin_future_t* f = CW__EVENT(args);
  if (!cw_plugin_future_is_done(f)) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_FAILED_PRECONDITION, "PJRT_Event_Error: event is not ready"));
  }
  return cw_plugin_error_or_null(f->status ? cw_status_clone(f->status) : cw_ok_status());
}

PJRT_Error* cw_plugin_event_await(PJRT_Event_Await_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_Await_Args, event);
  CW_PLUGIN_NEED(args->event, "PJRT_Event_Await", "event");
  cw_plugin_future_expect_wait(CW__EVENT(args));
  cw_plugin_future_run_handed_back();
  int64_t t0 = cw_plugin_trace_on() ? cw_time_now_ns() : 0;
  cw_status_t s = cw_plugin_future_wait(CW__EVENT(args));
  if (t0) {
    cw_plugin_trace_client_event("wait", "await", CW_PLUGIN_TRACE_LANE_WAIT, t0, NULL, 0, 0, 0);
  }
  return cw_plugin_error_or_null(s);
}

PJRT_Error* cw_plugin_event_on_ready(PJRT_Event_OnReady_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_OnReady_Args, user_arg);
  CW_PLUGIN_NEED(args->event, "PJRT_Event_OnReady", "event");
  CW_PLUGIN_NEED(args->callback, "PJRT_Event_OnReady", "callback");
  cw__waiter_t w = {.cb = args->callback,
                   .user = args->user_arg,
                   .trace_t0 = cw_plugin_trace_on() ? cw_time_now_ns() : 0};
  if (!cw__future_add(CW__EVENT(args), &w)) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_RESOURCE_EXHAUSTED, "PJRT_Event_OnReady: out of memory"));
  }
  return NULL;
}

PJRT_Error* cw_plugin_event_create(PJRT_Event_Create_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_Create_Args, event);
  cw_plugin_future_t* f = cw_plugin_future_create();
  if (!f) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_RESOURCE_EXHAUSTED, "PJRT_Event_Create: out of memory"));
  }
  args->event = (PJRT_Event*)f;
  return NULL;
}

PJRT_Error* cw_plugin_event_set(PJRT_Event_Set_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Event_Set_Args, error_message_size);
  CW_PLUGIN_NEED(args->event, "PJRT_Event_Set", "event");
  cw_status_t s = cw_ok_status();
  if (args->error_code != PJRT_Error_Code_OK) {
    s = cw_make_status(cw_status_code_from_u32((uint32_t)args->error_code), "%.*s",
                       (int)args->error_message_size,
                       args->error_message ? args->error_message : "");
  }
  cw_plugin_future_complete(CW__EVENT(args), s);
  return NULL;
}
