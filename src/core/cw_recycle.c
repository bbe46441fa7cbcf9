// Recycled blocks (cw_recycle.h): a Treiber stack whose pushes are lock-free
// and which a taker empties with one exchange (no ABA, and one transfer of
// its cache line per batch of frees rather than one per allocation); what
// it took waits on a list of the takers' own, under take_mu.
#include "cw_recycle.h"

#include <stdlib.h>
#include <string.h>

#include "cw_asan.h"
#include "cw_prefetch.h"

// Under AddressSanitizer a kept block is poisoned past its link, so a late
// access to a freed block is still reported.
#ifdef CW_ASAN
#define CW__POISON(b, r) \
  ASAN_POISON_MEMORY_REGION((char*)(b) + sizeof(cw_recycled_t), (r)->size - sizeof(cw_recycled_t))
#define CW__UNPOISON(b, r) ASAN_UNPOISON_MEMORY_REGION((b), (r)->size)
#else
#define CW__POISON(b, r) ((void)(b), (void)(r))
#define CW__UNPOISON(b, r) ((void)(b), (void)(r))
#endif

struct cw_recycled_s {
  cw_recycled_t* next;
};

void* cw_recycle_alloc(cw_recycle_t* r) {
  pthread_mutex_lock(&r->take_mu);
  cw_recycled_t* b = r->taken;
  if (!b && atomic_load_explicit(&r->head, memory_order_relaxed)) {
    // Not counted by walking the list (that would wait for each block in
    // turn): `kept` starts again from 0 once the list is ours, so frees that
    // race the exchange leave it short by as many (a bound on memory, not a
    // tally). Reset before the exchange, frees in between would count blocks
    // the exchange takes: `max` of them and every later free goes to free(),
    // the list stays empty, and nothing resets it again.
    b = atomic_exchange_explicit(&r->head, NULL, memory_order_acquire);
    atomic_store_explicit(&r->kept, 0, memory_order_relaxed);
  }
  if (b) {
    r->taken = b->next;
    cw_prefetch_write(r->taken, r->size);  // the next allocation's block
  }
  pthread_mutex_unlock(&r->take_mu);
  if (!b) return calloc(1, r->size);
  CW__UNPOISON(b, r);
  memset(b, 0, r->size);
  return b;
}

void cw_recycle_free(cw_recycle_t* r, void* block) {
  if (!block) return;
  // Counted in only below the bound: an add undone afterwards could cross a
  // take's reset of `kept` and wrap it.
  size_t kept = atomic_load_explicit(&r->kept, memory_order_relaxed);
  do {
    if (kept >= r->max) {
      free(block);
      return;
    }
  } while (!atomic_compare_exchange_weak_explicit(&r->kept, &kept, kept + 1, memory_order_relaxed,
                                                  memory_order_relaxed));
  cw_recycled_t* b = block;
  CW__POISON(b, r);
  b->next = atomic_load_explicit(&r->head, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&r->head, &b->next, b, memory_order_release,
                                                memory_order_relaxed)) {
  }
}

size_t cw_recycle_kept(cw_recycle_t* r) {
  // Walked, not read from `kept` (a bound, not an exact figure). Under
  // take_mu nobody takes blocks off either list; pushes only add in front.
  pthread_mutex_lock(&r->take_mu);
  size_t n = 0;
  for (cw_recycled_t* t = r->taken; t; t = t->next) ++n;
  cw_recycled_t* b = atomic_load_explicit(&r->head, memory_order_acquire);
  for (; b; b = b->next) ++n;
  pthread_mutex_unlock(&r->take_mu);
  return n;
}
