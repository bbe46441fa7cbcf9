// Whether the reader parks while waiters take their replies themselves
// (cw__await_frame in cw_client_reader.c). On an idle machine the reader's
// wakeup is cheap and it reads a reply while the waiter polls; on a busy one
// each wakeup is a switch from another process, and the waiter reads sooner
// alone (docs/performance.md). No fixed threshold tells the two apart across
// machines, so the client measures: waiters report each reply they polled
// for and got (cw_client_waited), and every CW__TUNE_KEEP_NS it spends
// CW__TUNE_PROBE_NS each way and keeps the way whose median interval between
// such replies was shorter. The interval, not the poll: a reader woken for
// nothing also takes the core from the waiter's next call after the poll.
#include <stdint.h>
#include <string.h>

#include "cw_client_internal.h"
#include "cw_time.h"

#define CW__TUNE_PROBE_NS (50 * 1000 * 1000LL)
#define CW__TUNE_KEEP_NS (1000 * 1000 * 1000LL)
#define CW__TUNE_MIN_REPLIES 16  // fewer in a probe: keep the reader on the socket

// The median of one way's intervals, in microseconds (the last bucket: longer).
static int cw__median_us(const uint32_t* hist, uint32_t n) {
  uint32_t seen = 0;
  for (int us = 0; us < CW_CLIENT_TUNE_BUCKETS; ++us) {
    seen += hist[us];
    if (2 * seen >= n) return us;
  }
  return CW_CLIENT_TUNE_BUCKETS - 1;
}

bool cw_client_tune_step(cw_client_tune_t* t, int64_t now_ns, int64_t interval_ns, bool park) {
  if (t->phase != CW_CLIENT_TUNE_KEEP) {
    int way = t->phase == CW_CLIENT_TUNE_PARKED;
    int64_t us = interval_ns < 0 ? 0 : interval_ns / 1000;
    t->hist[way][us < CW_CLIENT_TUNE_BUCKETS ? us : CW_CLIENT_TUNE_BUCKETS - 1]++;
    t->n[way]++;
  }
  if (now_ns < t->phase_end_ns) return park;
  switch (t->phase) {
    case CW_CLIENT_TUNE_KEEP:  // time to look again: the reader on the socket first
      t->phase = CW_CLIENT_TUNE_READER;
      memset(t->hist, 0, sizeof(t->hist));
      t->n[0] = t->n[1] = 0;
      t->phase_end_ns = now_ns + CW__TUNE_PROBE_NS;
      return false;
    case CW_CLIENT_TUNE_READER:
      t->phase = CW_CLIENT_TUNE_PARKED;
      t->phase_end_ns = now_ns + CW__TUNE_PROBE_NS;
      return true;
    default:  // both timed: keep the faster way until the next look
      t->phase = CW_CLIENT_TUNE_KEEP;
      t->phase_end_ns = now_ns + CW__TUNE_KEEP_NS;
      t->probes++;
      if (t->n[0] < CW__TUNE_MIN_REPLIES || t->n[1] < CW__TUNE_MIN_REPLIES) return false;
      // Medians, not means: a machine's hiccup in one probe must not decide.
      // Intervals past the last bucket (a loop slower than a quarter of a
      // millisecond, or no loop) tie, and tied, the reader stays.
      // Parking must win by a twentieth: the reader on the socket is the
      // default.
      return 20 * cw__median_us(t->hist[1], t->n[1]) < 19 * cw__median_us(t->hist[0], t->n[0]);
  }
}

void cw_client_waited(cw_client_t* c) {
  if (!c || !atomic_load_explicit(&c->shared_reads, memory_order_acquire)) return;
  pthread_mutex_lock(&c->tune_mu);
  int64_t now = cw_time_now_ns();
  int64_t interval = c->tune_last_ns ? now - c->tune_last_ns : INT64_MAX;
  c->tune_last_ns = now;
  bool park = atomic_load_explicit(&c->park_reader, memory_order_relaxed);
  bool next = cw_client_tune_step(&c->tune, now, interval, park);
  if (next != park) atomic_store_explicit(&c->park_reader, next, memory_order_relaxed);
  pthread_mutex_unlock(&c->tune_mu);
}
