// Monotonic clock readings (CLOCK_MONOTONIC): deadlines, latencies, traces.
#ifndef CW_CORE_TIME_H_
#define CW_CORE_TIME_H_

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline int64_t cw_time_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t cw_time_now_ms(void) { return cw_time_now_ns() / 1000000; }

// A condition variable whose timed waits take deadlines on this clock.
static inline void cw_time_cond_init(pthread_cond_t* cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

// A reading of this clock (ns) as the deadline pthread_cond_timedwait takes
// on such a condition variable.
static inline struct timespec cw_time_timespec(int64_t ns) {
  return (struct timespec){.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
}

// The deadline `ms` from now, for such a condition variable.
static inline struct timespec cw_time_deadline_ms(int64_t ms) {
  return cw_time_timespec(cw_time_now_ns() + ms * 1000000);
}

#endif  // CW_CORE_TIME_H_
