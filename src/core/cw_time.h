// Monotonic clock readings (CLOCK_MONOTONIC): deadlines, latencies, traces.
#ifndef CW_CORE_TIME_H_
#define CW_CORE_TIME_H_

#include <stdint.h>
#include <time.h>

static inline int64_t cw_time_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t cw_time_now_ms(void) { return cw_time_now_ns() / 1000000; }

#endif  // CW_CORE_TIME_H_
