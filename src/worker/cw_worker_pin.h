// Pins (cw_worker_pin.c): device memory read in place. A DOWNLOAD or SEND of
// a ready buffer in host memory writes its bytes to the socket straight from
// the buffer. The buffer is pinned from the request until the write
// completes: PJRT's external reference count is raised, and a DELETE
// meanwhile only marks it, the PJRT buffer being destroyed with the last pin.
#ifndef CW_WORKER_PIN_H_
#define CW_WORKER_PIN_H_

#include <stdbool.h>

#include "cw_worker_internal.h"

// Pins `b`; NULL if it cannot be pinned (then copy it out instead).
cw_pin_t* cw_worker_pin(cw_worker_t* w, PJRT_Buffer* b);
// Drops one pin (NULL is fine). A cw_net_free_fn: `user` is the pin.
void cw_worker_pin_release(void* user);
// Keeps `b` from being destroyed (a DELETE only marks it) without pinning
// its memory: PJRT's external reference, which XLA's CPU plugin makes wait
// until the buffer is ready, is taken with cw_worker_pin once it is. Never
// blocks the loop. NULL on allocation failure.
cw_pin_t* cw_worker_pin_keep(cw_worker_t* w, PJRT_Buffer* b);
// Drops a keep (NULL is fine).
void cw_worker_pin_unkeep(cw_pin_t* pin);
// The PJRT buffer of a pin.
PJRT_Buffer* cw_worker_pin_buffer(const cw_pin_t* pin);
// Whether a write reads `b` in place now.
bool cw_worker_pin_held(cw_worker_t* w, PJRT_Buffer* b);
// A store entry releases its buffer: destroyed now, or with its last pin.
void cw_worker_pin_destroy_buffer(cw_worker_t* w, PJRT_Buffer* b);

#endif  // CW_WORKER_PIN_H_
