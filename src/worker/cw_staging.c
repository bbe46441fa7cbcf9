#include "cw_staging.h"

#include <stdlib.h>
#include <sys/mman.h>

#define CW__SMALL_ALIGN 64

typedef struct cw__block_s {
  struct cw__block_s* next;  // newest first
  void* ptr;
  uint64_t class_size;
} cw__block_t;

struct cw_staging_s {
  uint64_t cap;
  uint64_t cached;
  uint64_t blocks;
  uint64_t hits, misses;
  cw__block_t* list;
};

// The size a block of `size` bytes really has: whole huge pages from 1 MiB
// (so near sizes share a class), else exact. Measured on the XLA CPU plugin:
// cached 1 MiB blocks of 4 KiB pages made 1 MiB uploads about 2x slower than
// glibc's own reuse, while huge-page blocks are faster than both.
static uint64_t cw__class(uint64_t size) {
  if (size >= CW_STAGING_MIN_CACHED) {
    return (size + CW_STAGING_HUGE - 1) & ~(uint64_t)(CW_STAGING_HUGE - 1);
  }
  return size;
}

cw_status_t cw_staging_create(uint64_t cap, cw_staging_t** out) {
  *out = calloc(1, sizeof(**out));
  if (!*out) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  (*out)->cap = cap;
  return cw_ok_status();
}

static void cw__drop_all(cw_staging_t* s) {
  while (s->list) {
    cw__block_t* b = s->list;
    s->list = b->next;
    free(b->ptr);
    free(b);
  }
  s->cached = 0;
  s->blocks = 0;
}

void cw_staging_release(cw_staging_t* s) {
  if (!s) return;
  cw__drop_all(s);
  free(s);
}

void* cw_staging_alloc(cw_staging_t* s, uint64_t size) {
  uint64_t cls = cw__class(size);
  if (size > SIZE_MAX - CW_STAGING_HUGE) return NULL;
  if (cls >= CW_STAGING_MIN_CACHED) {
    for (cw__block_t** pp = &s->list; *pp; pp = &(*pp)->next) {
      if ((*pp)->class_size != cls) continue;
      cw__block_t* b = *pp;
      *pp = b->next;
      void* p = b->ptr;
      s->cached -= cls;
      s->blocks--;
      s->hits++;
      free(b);
      return p;
    }
    s->misses++;
  }
  void* p = NULL;
  size_t align = cls >= CW_STAGING_HUGE ? CW_STAGING_HUGE : CW__SMALL_ALIGN;
  if (posix_memalign(&p, align, cls ? (size_t)cls : 1)) {
    // Memory the cache keeps idle goes first.
    if (!s->list) return NULL;
    cw__drop_all(s);
    if (posix_memalign(&p, align, cls ? (size_t)cls : 1)) return NULL;
  }
#ifdef MADV_HUGEPAGE
  // Fewer TLB misses and page faults for large arrays; advice only.
  if (cls >= CW_STAGING_HUGE) (void)madvise(p, (size_t)cls, MADV_HUGEPAGE);
#endif
  return p;
}

void cw_staging_free(cw_staging_t* s, void* block, uint64_t size) {
  if (!block) return;
  uint64_t cls = cw__class(size);
  if (cls < CW_STAGING_MIN_CACHED || cls > s->cap) {
    free(block);
    return;
  }
  cw__block_t* b = malloc(sizeof(*b));
  if (!b) {
    free(block);
    return;
  }
  // Make room: drop the oldest blocks (the list's tail).
  while (s->cached + cls > s->cap && s->list) {
    cw__block_t** pp = &s->list;
    while ((*pp)->next) pp = &(*pp)->next;
    cw__block_t* old = *pp;
    *pp = NULL;
    s->cached -= old->class_size;
    s->blocks--;
    free(old->ptr);
    free(old);
  }
  b->ptr = block;
  b->class_size = cls;
  b->next = s->list;
  s->list = b;
  s->cached += cls;
  s->blocks++;
}

void cw_staging_stats(const cw_staging_t* s, cw_staging_stats_t* out) {
  out->cached_bytes = s->cached;
  out->cached_blocks = s->blocks;
  out->hits = s->hits;
  out->misses = s->misses;
}
