// Threads for work that may block for long (cw_pool.c): running a program
// whose host callback waits on a client, finishing XLA's futures. A task
// never waits for a thread while another task blocks: an idle thread takes
// it, else a new one starts, up to max_threads (past that, tasks queue in
// submission order). Threads stay until the pool is released.
#ifndef CW_CORE_POOL_H_
#define CW_CORE_POOL_H_

#include <stddef.h>

#include "cw_status.h"

typedef struct cw_pool_s cw_pool_t;
typedef void (*cw_pool_fn)(void* user);

// `name` (borrowed for the call; at most 15 bytes are kept) names the
// threads for debuggers. max_threads >= 1.
CW_MUST_USE cw_status_t cw_pool_create(const char* name, size_t max_threads,
                                       cw_pool_t** out_pool);
// Runs fn(user) on a pool thread; never blocks. RESOURCE_EXHAUSTED (and
// fn never runs) only when out of memory, or when no thread exists and
// none can be started.
CW_MUST_USE cw_status_t cw_pool_submit(cw_pool_t* pool, cw_pool_fn fn, void* user);
// Threads started so far (for tests and stats).
size_t cw_pool_threads(cw_pool_t* pool);
// Runs every task submitted before it, joins the threads and frees the
// pool. Must not be called from a pool thread. NULL is a no-op.
void cw_pool_release(cw_pool_t* pool);

#endif  // CW_CORE_POOL_H_
