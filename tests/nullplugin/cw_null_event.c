// The null plugin's events: one static event that is always ready, and
// pending ones for buffers filled later through a transfer manager.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cw_nullplugin.h"

typedef struct cw__waiter_s {
  PJRT_Event_OnReadyCallback fn;
  void* arg;
  struct cw__waiter_s* next;
} cw__waiter_t;

struct cw_null_event_s {
  bool is_static;  // the ready event: never counted or freed
  _Atomic int refs;
  _Atomic bool ready;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  PJRT_Error_Code code;  // 0: done without error
  char* message;
  cw__waiter_t* waiters;
};

cw_null_event_t cw_null_ready_event = {.is_static = true, .ready = true};

cw_null_event_t* cw_null_event_create(void) {
  cw_null_event_t* ev = calloc(1, sizeof(*ev));
  if (!ev) return NULL;
  ev->refs = 1;
  pthread_mutex_init(&ev->mu, NULL);
  pthread_cond_init(&ev->cv, NULL);
  return ev;
}

cw_null_event_t* cw_null_event_ref(cw_null_event_t* ev) {
  if (!ev->is_static) atomic_fetch_add(&ev->refs, 1);
  return ev;
}

void cw_null_event_unref(cw_null_event_t* ev) {
  if (!ev || ev->is_static || atomic_fetch_sub(&ev->refs, 1) != 1) return;
  for (cw__waiter_t* w = ev->waiters; w;) {  // never set: the callbacks never run
    cw__waiter_t* next = w->next;
    free(w);
    w = next;
  }
  pthread_mutex_destroy(&ev->mu);
  pthread_cond_destroy(&ev->cv);
  free(ev->message);
  free(ev);
}

bool cw_null_event_is_ready(const cw_null_event_t* ev) { return atomic_load(&ev->ready); }

// A new error the caller owns, or NULL when the event holds none.
static PJRT_Error* cw__event_status(const cw_null_event_t* ev) {
  if (!ev->code) return NULL;
  return cw_null_err(ev->code, "%s", ev->message ? ev->message : "");
}

bool cw_null_event_set(cw_null_event_t* ev, PJRT_Error_Code code, const char* message) {
  pthread_mutex_lock(&ev->mu);
  if (atomic_load(&ev->ready)) {
    pthread_mutex_unlock(&ev->mu);
    return false;
  }
  ev->code = code;
  ev->message = code ? strdup(message ? message : "") : NULL;
  cw__waiter_t* w = ev->waiters;
  ev->waiters = NULL;
  atomic_store(&ev->ready, true);
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
  while (w) {  // outside the lock: a callback may use the event
    cw__waiter_t* next = w->next;
    w->fn(cw__event_status(ev), w->arg);
    free(w);
    w = next;
  }
  return true;
}

bool cw_null_event_set_like(cw_null_event_t* ev, const cw_null_event_t* from) {
  return cw_null_event_set(ev, from->code, from->message);
}

PJRT_Error* cw_null_event_wait(cw_null_event_t* ev) {
  if (!atomic_load(&ev->ready)) {
    pthread_mutex_lock(&ev->mu);
    while (!atomic_load(&ev->ready)) pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
  }
  return cw__event_status(ev);
}

#define CW__EV(p) ((cw_null_event_t*)(p))

static PJRT_Error* cw__event_destroy(PJRT_Event_Destroy_Args* a) {
  cw_null_event_unref(CW__EV(a->event));
  return NULL;
}
static PJRT_Error* cw__event_is_ready(PJRT_Event_IsReady_Args* a) {
  a->is_ready = cw_null_event_is_ready(CW__EV(a->event));
  return NULL;
}
static PJRT_Error* cw__event_error(PJRT_Event_Error_Args* a) {
  const cw_null_event_t* ev = CW__EV(a->event);
  if (!cw_null_event_is_ready(ev)) {
    return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION, "cw_nullplugin: the event is not ready");
  }
  return cw__event_status(ev);
}
static PJRT_Error* cw__event_await(PJRT_Event_Await_Args* a) {
  return cw_null_event_wait(CW__EV(a->event));
}
PJRT_Error* cw_null_event_on_ready(cw_null_event_t* ev, PJRT_Event_OnReadyCallback fn, void* arg) {
  if (!cw_null_event_is_ready(ev)) {
    cw__waiter_t* w = malloc(sizeof(*w));
    if (!w) return CW_NULL_OOM;
    *w = (cw__waiter_t){fn, arg, NULL};
    pthread_mutex_lock(&ev->mu);
    bool queued = !atomic_load(&ev->ready);
    if (queued) {
      w->next = ev->waiters;
      ev->waiters = w;
    }
    pthread_mutex_unlock(&ev->mu);
    if (queued) return NULL;
    free(w);
  }
  fn(cw__event_status(ev), arg);
  return NULL;
}

static PJRT_Error* cw__event_on_ready(PJRT_Event_OnReady_Args* a) {
  return cw_null_event_on_ready(CW__EV(a->event), a->callback, a->user_arg);
}

void cw_null_event_fill(PJRT_Api* api) {
  api->PJRT_Event_Destroy = cw__event_destroy;
  api->PJRT_Event_IsReady = cw__event_is_ready;
  api->PJRT_Event_Error = cw__event_error;
  api->PJRT_Event_Await = cw__event_await;
  api->PJRT_Event_OnReady = cw__event_on_ready;
}
