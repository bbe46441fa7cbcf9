// UPLOAD and DOWNLOAD at the worker (cw_worker_transfer.c), over raw frames
// against a real worker: a 256 MiB array in and out intact (bulk bytes read
// straight into staging memory, written from the buffer), with its rates.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

// A large array through UPLOAD and DOWNLOAD (bulk read straight into staging).
static void test_big_transfer(void** state) {
  (void)state;
  worker_t w;
  int fd = start_client(&w, NULL);
  int64_t n = 64 << 20;  // 64 Mi floats = 256 MiB
  float* x = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(upload_vector(fd, 1, x, n), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 1;
  reply_t r;
  assert_int_equal(call(fd, CW_MSG_DOWNLOAD, &d.base, NULL, 0, &r), 0);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  assert_int_equal(r.h.bulk_len, (uint64_t)n * 4);
  assert_memory_equal(r.bulk, x, (size_t)n * 4);
  double up = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  double down = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) * 1e-9;
  printf("  256 MiB: upload %.3f s (%.2f GB/s), download %.3f s (%.2f GB/s)\n", up,
         0.268435456 / up, down, 0.268435456 / down);
  reply_free(&r);
  free(x);
  close(fd);
  stop_worker(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_big_transfer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
