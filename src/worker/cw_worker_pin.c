#include "cw_worker_pin.h"

#include <stdlib.h>

struct cw_pin_s {
  cw_pin_t* next;
  cw_worker_t* w;
  PJRT_Buffer* buffer;
  int count;
  bool destroy;  // its entry is gone: destroy with the last pin
};

static cw_pin_t* cw__pin_find(cw_worker_t* w, PJRT_Buffer* b) {
  for (cw_pin_t* p = w->pins; p; p = p->next) {
    if (p->buffer == b) return p;
  }
  return NULL;
}

// One reference to `b`'s record, with PJRT's external reference when `hold`.
static cw_pin_t* cw__pin_ref(cw_worker_t* w, PJRT_Buffer* b, bool hold) {
  cw_pin_t* p = cw__pin_find(w, b);
  bool fresh = !p;
  if (fresh) {
    p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->w = w;
    p->buffer = b;
  }
  if (hold && !cw_pjrt_buffer_hold(w->pjrt, b)) {
    if (fresh) free(p);
    return NULL;
  }
  if (fresh) {
    p->next = w->pins;
    w->pins = p;
  }
  p->count++;
  return p;
}

static void cw__pin_unref(cw_pin_t* p, bool held) {
  if (!p) return;
  cw_worker_t* w = p->w;
  if (held) cw_pjrt_buffer_unhold(w->pjrt, p->buffer);
  if (--p->count > 0) return;
  cw_pin_t** pp = &w->pins;
  while (*pp && *pp != p) pp = &(*pp)->next;
  if (*pp) *pp = p->next;
  if (p->destroy) cw_pjrt_buffer_destroy(w->pjrt, p->buffer);
  free(p);
}

cw_pin_t* cw_worker_pin(cw_worker_t* w, PJRT_Buffer* b) { return cw__pin_ref(w, b, true); }
void cw_worker_pin_release(void* user) { cw__pin_unref(user, true); }
cw_pin_t* cw_worker_pin_keep(cw_worker_t* w, PJRT_Buffer* b) { return cw__pin_ref(w, b, false); }
void cw_worker_pin_unkeep(cw_pin_t* pin) { cw__pin_unref(pin, false); }

PJRT_Buffer* cw_worker_pin_buffer(const cw_pin_t* pin) { return pin->buffer; }

bool cw_worker_pin_held(cw_worker_t* w, PJRT_Buffer* b) { return cw__pin_find(w, b) != NULL; }

void cw_worker_pin_destroy_buffer(cw_worker_t* w, PJRT_Buffer* b) {
  cw_pin_t* pin = cw__pin_find(w, b);
  if (pin) {
    pin->destroy = true;  // a write reads it in place: destroyed after it
    return;
  }
  // Safe with work pending: PJRT keeps the storage alive until its users
  // (executions, transfers) are done.
  cw_pjrt_buffer_destroy(w->pjrt, b);
}
