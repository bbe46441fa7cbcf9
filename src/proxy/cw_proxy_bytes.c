// The bytes of host buffers. An allocation of a megabyte or more is backed by
// fresh pages from the kernel each time (glibc maps it), and faulting in and
// zeroing those pages cost the proxy a third of its CPU while it took 64 MiB
// uploads (perf). Released large buffers are kept, up to
// CAUSEWAY_PROXY_BUFFER_CACHE bytes, and handed to the next that fits.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cw_proxy_internal.h"

#define CW__LARGE ((size_t)1 << 20)
#define CW__SLOTS 8
// Each allocation starts with its capacity; the bytes follow, 64-aligned
// from the start of the block.
#define CW__HEADER 64

typedef struct cw__cached_s {
  uint8_t* block;
  size_t cap;
} cw__cached_t;

static pthread_mutex_t cw__mu = PTHREAD_MUTEX_INITIALIZER;
static cw__cached_t cw__cache[CW__SLOTS];  // the oldest first
static size_t cw__count, cw__bytes, cw__max;

static uint8_t* cw__data(uint8_t* block, size_t cap) {
  *(size_t*)block = cap;
  return block + CW__HEADER;
}

static uint8_t* cw__block(uint8_t* data) { return data - CW__HEADER; }

size_t cw_proxy_bytes_cap(const uint8_t* data) { return *(const size_t*)(data - CW__HEADER); }

void cw_proxy_bytes_configure(size_t max_cached) {
  pthread_mutex_lock(&cw__mu);
  cw__max = max_cached;
  pthread_mutex_unlock(&cw__mu);
}

void cw_proxy_bytes_drain(void) {
  pthread_mutex_lock(&cw__mu);
  for (size_t i = 0; i < cw__count; i++) free(cw__cache[i].block);
  cw__count = cw__bytes = 0;
  pthread_mutex_unlock(&cw__mu);
}

void cw_proxy_bytes_trim(size_t keep) {
  pthread_mutex_lock(&cw__mu);
  while (cw__count && cw__bytes > keep) {
    free(cw__cache[0].block);
    cw__bytes -= cw__cache[0].cap;
    for (size_t i = 1; i < cw__count; i++) cw__cache[i - 1] = cw__cache[i];
    cw__count--;
  }
  pthread_mutex_unlock(&cw__mu);
}

size_t cw_proxy_bytes_cached(void) {
  pthread_mutex_lock(&cw__mu);
  size_t n = cw__bytes;
  pthread_mutex_unlock(&cw__mu);
  return n;
}

// A kept block of at least n bytes and at most twice that (a large one is
// not spent on a small need), or NULL.
static uint8_t* cw__take(size_t n, size_t* cap) {
  uint8_t* block = NULL;
  pthread_mutex_lock(&cw__mu);
  size_t best = cw__count;
  for (size_t i = 0; i < cw__count; i++) {
    size_t c = cw__cache[i].cap;
    if (c >= n && c / 2 <= n && (best == cw__count || c < cw__cache[best].cap)) best = i;
  }
  if (best < cw__count) {
    block = cw__cache[best].block;
    *cap = cw__cache[best].cap;
    cw__bytes -= *cap;
    for (size_t i = best + 1; i < cw__count; i++) cw__cache[i - 1] = cw__cache[i];
    cw__count--;
  }
  pthread_mutex_unlock(&cw__mu);
  return block;
}

uint8_t* cw_proxy_bytes_alloc(size_t n) {
  if (n >= CW__LARGE) {
    size_t cap;
    uint8_t* block = cw__take(n, &cap);
    if (block) return cw__data(block, cap);
  }
  if (n > SIZE_MAX - CW__HEADER) return NULL;
  uint8_t* block = malloc(n + CW__HEADER);
  return block ? cw__data(block, n) : NULL;
}

uint8_t* cw_proxy_bytes_grow(uint8_t* data, size_t n) {
  if (!data) return cw_proxy_bytes_alloc(n);
  if (n > SIZE_MAX - CW__HEADER) return NULL;
  uint8_t* block = realloc(cw__block(data), n + CW__HEADER);
  return block ? cw__data(block, n) : NULL;
}

void cw_proxy_bytes_free(uint8_t* data) {
  if (!data) return;
  uint8_t* block = cw__block(data);
  size_t cap = cw_proxy_bytes_cap(data);
  if (cap >= CW__LARGE) {
    pthread_mutex_lock(&cw__mu);
    if (cap <= cw__max) {
      // Room: the oldest kept go first.
      while (cw__count && (cw__count == CW__SLOTS || cw__bytes + cap > cw__max)) {
        free(cw__cache[0].block);
        cw__bytes -= cw__cache[0].cap;
        for (size_t i = 1; i < cw__count; i++) cw__cache[i - 1] = cw__cache[i];
        cw__count--;
      }
      cw__cache[cw__count++] = (cw__cached_t){.block = block, .cap = cap};
      cw__bytes += cap;
      block = NULL;
    }
    pthread_mutex_unlock(&cw__mu);
  }
  free(block);
}
