// The worker's polling windows (cw_worker_spin.h).
#include "cw_worker_spin.h"

void cw_spin_initialize(cw_spin_t* s, int64_t window_ns) {
  *s = (cw_spin_t){.window_ns = window_ns > 0 ? window_ns : 0};
}

bool cw_spin_request(cw_spin_t* s, int64_t now) {
  if (!s->window_ns) return false;
  int64_t last = s->last_request_ns;
  s->last_request_ns = now;
  if (s->polling) {
    s->caught = true;
    s->until_ns = now + s->window_ns;
    return false;  // already polling
  }
  if (!last || now - last > CW_SPIN_RECENT_NS) return false;
  if (s->misses >= CW_SPIN_MAX_MISSES && now < s->retry_ns) return false;
  s->polling = true;
  s->caught = false;
  s->until_ns = now + s->window_ns;
  return true;
}

bool cw_spin_poll(cw_spin_t* s, int64_t now) {
  if (!s->polling) return false;
  if (now < s->until_ns) return true;
  s->polling = false;
  if (s->caught) {
    s->misses = 0;
  } else if (++s->misses >= CW_SPIN_MAX_MISSES) {
    s->retry_ns = now + CW_SPIN_RETRY_NS;
  }
  return false;
}
