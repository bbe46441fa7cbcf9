// Order statistics the benches share (cw_bench_stats.h).
#include "cw_bench_stats.h"

#include <stdlib.h>

static int cw__cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

void cw_bench_sort(double* v, size_t n) {
  if (n) qsort(v, n, sizeof(*v), cw__cmp_double);
}
