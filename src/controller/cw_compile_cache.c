#include "cw_compile_cache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cw_reader.h"

struct cw_compile_cache_s {
  uint64_t capacity;
  uint64_t bytes;
  size_t count;
  cw_compile_cache_entry_t* head;  // most recent
  cw_compile_cache_entry_t* tail;
};

static uint64_t cw__hash(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: only a filter, keys compare in full
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

cw_status_t cw_compile_cache_key_create(const void* const* parts, const size_t* sizes,
                                        size_t count, uint8_t** out_key, size_t* out_size) {
  *out_key = NULL;
  *out_size = 0;
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] > SIZE_MAX - total - 8) {
      return cw_make_status(CW_INVALID_ARGUMENT, "compile cache key too large");
    }
    total += 8 + sizes[i];
  }
  uint8_t* key = malloc(total ? total : 1);
  if (!key) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a cache key");
  size_t pos = 0;
  for (size_t i = 0; i < count; ++i) {
    cw_put_u64le(key + pos, (uint64_t)sizes[i]);
    pos += 8;
    if (sizes[i]) memcpy(key + pos, parts[i], sizes[i]);
    pos += sizes[i];
  }
  *out_key = key;
  *out_size = total;
  return cw_ok_status();
}

cw_status_t cw_compile_cache_create(uint64_t capacity, cw_compile_cache_t** out_cache) {
  *out_cache = NULL;
  cw_compile_cache_t* c = calloc(1, sizeof(*c));
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  c->capacity = capacity;
  *out_cache = c;
  return cw_ok_status();
}

void cw_compile_cache_entry_retain(cw_compile_cache_entry_t* e) { e->refs++; }

void cw_compile_cache_entry_release(cw_compile_cache_entry_t* e) {
  if (!e) return;
  assert(e->refs > 0);
  if (--e->refs > 0) return;
  free(e->key);
  free(e->bytes);
  free(e);
}

static void cw__unlink(cw_compile_cache_t* c, cw_compile_cache_entry_t* e) {
  if (e->prev) e->prev->next = e->next;
  else c->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else c->tail = e->prev;
  e->prev = e->next = NULL;
  c->bytes -= e->size + e->key_size;
  c->count--;
}

static void cw__push_front(cw_compile_cache_t* c, cw_compile_cache_entry_t* e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head) c->head->prev = e;
  c->head = e;
  if (!c->tail) c->tail = e;
  c->bytes += e->size + e->key_size;
  c->count++;
}

void cw_compile_cache_release(cw_compile_cache_t* c) {
  if (!c) return;
  while (c->head) {
    cw_compile_cache_entry_t* e = c->head;
    cw__unlink(c, e);
    cw_compile_cache_entry_release(e);
  }
  free(c);
}

static cw_compile_cache_entry_t* cw__find(cw_compile_cache_t* c, uint64_t h, const uint8_t* key,
                                          size_t key_size) {
  for (cw_compile_cache_entry_t* e = c->head; e; e = e->next) {
    if (e->hash == h && e->key_size == key_size && !memcmp(e->key, key, key_size)) return e;
  }
  return NULL;
}

cw_compile_cache_entry_t* cw_compile_cache_lookup(cw_compile_cache_t* c, const uint8_t* key,
                                                  size_t key_size) {
  cw_compile_cache_entry_t* e = cw__find(c, cw__hash(key, key_size), key, key_size);
  if (!e) return NULL;
  cw__unlink(c, e);
  cw__push_front(c, e);
  cw_compile_cache_entry_retain(e);
  return e;
}

cw_compile_cache_entry_t* cw_compile_cache_insert(cw_compile_cache_t* c, const uint8_t* key,
                                                  size_t key_size, uint8_t* bytes, size_t size) {
  cw_compile_cache_entry_t* e = calloc(1, sizeof(*e));
  uint8_t* key_copy = malloc(key_size ? key_size : 1);
  if (!e || !key_copy) {
    free(e);
    free(key_copy);
    free(bytes);
    return NULL;
  }
  if (key_size) memcpy(key_copy, key, key_size);
  e->hash = cw__hash(key, key_size);
  e->key = key_copy;
  e->key_size = key_size;
  e->bytes = bytes;
  e->size = size;
  e->refs = 1;  // the caller's
  cw_compile_cache_entry_t* old = cw__find(c, e->hash, key, key_size);
  if (old) {
    cw__unlink(c, old);
    cw_compile_cache_entry_release(old);
  }
  // The key holds the whole program: it counts as much as the executable.
  if (size + key_size > c->capacity) return e;  // too large to keep
  cw_compile_cache_entry_retain(e);  // the cache's
  cw__push_front(c, e);
  while (c->bytes > c->capacity && c->tail) {
    cw_compile_cache_entry_t* victim = c->tail;
    cw__unlink(c, victim);
    cw_compile_cache_entry_release(victim);
  }
  return e;
}

uint64_t cw_compile_cache_bytes(const cw_compile_cache_t* c) { return c->bytes; }
size_t cw_compile_cache_count(const cw_compile_cache_t* c) { return c->count; }
