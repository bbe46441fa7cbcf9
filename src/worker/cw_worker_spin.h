// When the worker's loop polls instead of sleeping (CAUSEWAY_WORKER_SPIN_US).
// A synchronous loop sends its next request (a launch, a download) a few
// microseconds after the reply; a worker asleep by then is woken by the
// kernel, which on some hosts (virtual machines waking an idle core) costs
// more than the round trip. After a request that came soon after the one
// before, the loop keeps polling for a window; a window that ends with no
// request is a miss, and after a run of misses windows open only once in a
// while. No I/O here: cw_worker.c drives the loop, this module decides.
#ifndef CW_WORKER_SPIN_H_
#define CW_WORKER_SPIN_H_

#include <stdbool.h>
#include <stdint.h>

// A window opens only after a request that came this soon after the one
// before: requests far apart (a worker of a large fleet) never spin.
#define CW_SPIN_RECENT_NS (1000 * 1000LL)
// Windows in a row that ended with no request before windows stop, and how
// long they then stay shut (one may open after that, to look again).
#define CW_SPIN_MAX_MISSES 8
#define CW_SPIN_RETRY_NS (1000 * 1000 * 1000LL)

typedef struct {
  int64_t window_ns;  // 0: never poll
  int64_t until_ns;   // while polling: when the window ends
  int64_t last_request_ns;
  int64_t retry_ns;   // after CW_SPIN_MAX_MISSES: no window before this
  unsigned misses;    // windows in a row that ended with no request
  bool polling;
  bool caught;        // a request came within the current window
} cw_spin_t;

void cw_spin_initialize(cw_spin_t* s, int64_t window_ns);
// A request arrived at `now` (CLOCK_MONOTONIC ns): true when a window opens,
// and the caller starts polling. A request within a window extends it.
bool cw_spin_request(cw_spin_t* s, int64_t now);
// A loop pass while polling: false once the window has ended, and the
// caller stops polling.
bool cw_spin_poll(cw_spin_t* s, int64_t now);

#endif  // CW_WORKER_SPIN_H_
