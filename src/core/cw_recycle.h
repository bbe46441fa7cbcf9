// Blocks of one size made on one thread and freed on another (cw_recycle.c).
// A launch's records are allocated on JAX's thread and freed by the client's
// reader thread; glibc keeps a freed block in the freeing thread's cache, so
// each allocation took its arena's lock, against the other thread's frees
// (and calloc never uses those caches). Freed blocks wait on a lock-free
// list for the next allocation, from any thread, up to `max` of them.
#ifndef CW_CORE_RECYCLE_H_
#define CW_CORE_RECYCLE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cw_prefetch.h"

typedef struct cw_recycled_s cw_recycled_t;

typedef struct {
  _Atomic(cw_recycled_t*) head;  // pushed by any thread
  atomic_size_t kept;            // about how many are on `head` (frees count up, takes reset)
  size_t size, max;
  // The takers' side, on a line of its own: the freeing thread writes the
  // one above with every free.
  _Alignas(CW_CACHE_LINE) pthread_mutex_t take_mu;
  cw_recycled_t* taken;  // taken off `head` all at once, handed out one by one
} cw_recycle_t;

// A static recycler of blocks of `size` bytes (at least a pointer's),
// keeping about `max` freed blocks on its list (up to twice that, and one
// more per freeing thread, when frees race a take; as many again taken off
// it, not yet handed out); kept blocks stay reachable from it.
#define CW_RECYCLE_INIT(size_, max_)                                                     \
  {.head = NULL, .kept = 0, .size = (size_), .max = (max_),                             \
   .take_mu = PTHREAD_MUTEX_INITIALIZER, .taken = NULL}

// A zeroed block; NULL when out of memory.
void* cw_recycle_alloc(cw_recycle_t* r);
// Keeps `block` (from cw_recycle_alloc of `r`) for the next allocation, or
// frees it once `max` are kept. NULL is a no-op.
void cw_recycle_free(cw_recycle_t* r, void* block);
// Blocks kept now, on the list and taken (for tests).
size_t cw_recycle_kept(cw_recycle_t* r);

#endif  // CW_CORE_RECYCLE_H_
