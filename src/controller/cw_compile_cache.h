// The controller's in-memory cache of serialized executables, keyed by the
// exact bytes that determine a compilation (program, rewritten compile
// options, plugin platform and version), bounded by total bytes with LRU
// eviction. Entries are reference counted so a LOAD being written keeps its
// bytes alive after eviction.
#ifndef CW_CONTROLLER_COMPILE_CACHE_H_
#define CW_CONTROLLER_COMPILE_CACHE_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

typedef struct cw_compile_cache_s cw_compile_cache_t;

typedef struct cw_compile_cache_entry_s {
  struct cw_compile_cache_entry_s* prev;  // LRU list, most recent first
  struct cw_compile_cache_entry_s* next;
  int refs;
  uint64_t hash;
  uint8_t* key;
  size_t key_size;
  uint8_t* bytes;  // the serialized executable
  size_t size;
} cw_compile_cache_entry_t;

// Builds a cache key from its parts into a malloc'd buffer (*out_key; the
// caller frees it). Parts are length-prefixed so no two lists collide.
CW_MUST_USE cw_status_t cw_compile_cache_key_create(const void* const* parts,
                                                    const size_t* sizes, size_t count,
                                                    uint8_t** out_key, size_t* out_size);

// capacity: total bytes of serialized executables kept (0 keeps none).
CW_MUST_USE cw_status_t cw_compile_cache_create(uint64_t capacity,
                                                cw_compile_cache_t** out_cache);
// Drops the cache's references; entries still retained live on.
void cw_compile_cache_release(cw_compile_cache_t* cache);

// The entry for `key`, retained for the caller (and made most recent), or NULL.
cw_compile_cache_entry_t* cw_compile_cache_lookup(cw_compile_cache_t* cache, const uint8_t* key,
                                                  size_t key_size);

// Inserts (or replaces) the entry for `key`; takes `bytes` (malloc'd). Returns
// the entry retained for the caller (never NULL unless out of memory, in
// which case `bytes` is freed). Evicts least recently used entries beyond
// the capacity; an entry larger than the capacity is returned but not kept.
cw_compile_cache_entry_t* cw_compile_cache_insert(cw_compile_cache_t* cache, const uint8_t* key,
                                                  size_t key_size, uint8_t* bytes, size_t size);

void cw_compile_cache_entry_retain(cw_compile_cache_entry_t* entry);
void cw_compile_cache_entry_release(cw_compile_cache_entry_t* entry);

uint64_t cw_compile_cache_bytes(const cw_compile_cache_t* cache);
size_t cw_compile_cache_count(const cw_compile_cache_t* cache);

#endif  // CW_CONTROLLER_COMPILE_CACHE_H_
