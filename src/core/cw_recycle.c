// Recycled blocks (cw_recycle.h): a Treiber stack whose pushes are lock-free
// and whose pops take pop_mu, so a block cannot leave and come back between
// a pop's read of the head and its swap (the ABA case of concurrent pops).
#include "cw_recycle.h"

#include <stdlib.h>
#include <string.h>

// Under AddressSanitizer a kept block is poisoned past its link, so a late
// access to a freed block is still reported.
#if defined(__SANITIZE_ADDRESS__)
#define CW__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CW__ASAN 1
#endif
#endif
#ifdef CW__ASAN
#include <sanitizer/asan_interface.h>
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
  cw_recycled_t* b = NULL;
  if (atomic_load_explicit(&r->head, memory_order_relaxed)) {
    pthread_mutex_lock(&r->pop_mu);
    b = atomic_load_explicit(&r->head, memory_order_acquire);
    // Only pushes race with us: they change the head, never b->next.
    while (b && !atomic_compare_exchange_weak_explicit(&r->head, &b, b->next,
                                                       memory_order_acquire,
                                                       memory_order_acquire)) {
    }
    pthread_mutex_unlock(&r->pop_mu);
  }
  if (!b) return calloc(1, r->size);
  atomic_fetch_sub_explicit(&r->kept, 1, memory_order_relaxed);
  CW__UNPOISON(b, r);
  memset(b, 0, r->size);
  return b;
}

void cw_recycle_free(cw_recycle_t* r, void* block) {
  if (!block) return;
  if (atomic_fetch_add_explicit(&r->kept, 1, memory_order_relaxed) >= r->max) {
    atomic_fetch_sub_explicit(&r->kept, 1, memory_order_relaxed);
    free(block);
    return;
  }
  cw_recycled_t* b = block;
  CW__POISON(b, r);
  b->next = atomic_load_explicit(&r->head, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&r->head, &b->next, b, memory_order_release,
                                                memory_order_relaxed)) {
  }
}

size_t cw_recycle_kept(cw_recycle_t* r) {
  return atomic_load_explicit(&r->kept, memory_order_relaxed);
}
