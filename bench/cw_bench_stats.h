// Order statistics the benches share.
#ifndef CW_BENCH_STATS_H_
#define CW_BENCH_STATS_H_

#include <stddef.h>

// Sorts v[0..n) in place, ascending.
void cw_bench_sort(double* v, size_t n);

#endif  // CW_BENCH_STATS_H_
