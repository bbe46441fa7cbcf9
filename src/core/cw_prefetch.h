// Asking for memory ahead of use. A block one thread frees and another
// takes again (a launch's records: JAX's thread takes, the client's reader
// frees) sits in the freeing core's cache; taking it for writing stalls on
// each of its lines in turn. Asked for a call ahead, the lines come while
// the taker does other work.
#ifndef CW_CORE_PREFETCH_H_
#define CW_CORE_PREFETCH_H_

#include <stddef.h>

#define CW_CACHE_LINE 64

// Brings the `size` bytes at `p` toward this core, for writing. Only a
// hint: `p` may be NULL or freed meanwhile.
static inline void cw_prefetch_write(const void* p, size_t size) {
  if (!p) return;
  for (size_t off = 0; off < size; off += CW_CACHE_LINE) {
    __builtin_prefetch((const char*)p + off, 1, 3);
  }
}

#endif  // CW_CORE_PREFETCH_H_
