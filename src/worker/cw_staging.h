// Bulk staging memory for one thread (the worker's loop): host blocks that
// bulk bytes are read into (UPLOAD, PUT, LOAD) or written from (DOWNLOAD and
// SEND copies). Freed blocks of at least CW_STAGING_MIN_CACHED bytes are kept,
// by size class, up to a byte cap, so a stream of large transfers reuses
// memory that is already mapped and faulted in instead of paying mmap,
// munmap and a page fault per 4 KiB every time. Cached blocks are whole
// 2 MiB pages, aligned and advised for transparent huge pages. Not thread-safe.
#ifndef CW_WORKER_STAGING_H_
#define CW_WORKER_STAGING_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

#define CW_STAGING_MIN_CACHED (1u << 20)
#define CW_STAGING_HUGE (2u << 20)

typedef struct cw_staging_s cw_staging_t;

// `cap_bytes` 0 disables caching.
CW_MUST_USE cw_status_t cw_staging_create(uint64_t cap_bytes, cw_staging_t** out_staging);
// Frees every cached block. Blocks still out must have been returned first.
void cw_staging_release(cw_staging_t* staging);

// At least `size` bytes (64-byte aligned), NULL without memory. Return it
// with cw_staging_free and the same size.
void* cw_staging_alloc(cw_staging_t* staging, uint64_t size);
void cw_staging_free(cw_staging_t* staging, void* block, uint64_t size);

typedef struct cw_staging_stats_s {
  uint64_t cached_bytes, cached_blocks, hits, misses;
} cw_staging_stats_t;
void cw_staging_stats(const cw_staging_t* staging, cw_staging_stats_t* out_stats);

#endif  // CW_WORKER_STAGING_H_
