// SEND at the worker (cw_worker_send.c), over raw frames against two real
// workers: a buffer goes worker to worker into an EXPECTed id of another
// session; a session that does not exist and a dead peer are refused.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

static void test_send_put(void** state) {
  (void)state;
  worker_t a, b;
  start_worker(&a, NULL);
  start_worker(&b, NULL);
  int fa = dial(a.port), fb = dial(b.port);
  assert_true(hello(fa, 0, 1, NULL) != 0);
  uint64_t sb = hello(fb, 0, 1, NULL);
  Causeway__V1__ExpectRequest e = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  e.buffer_id = 50;
  assert_int_equal(call(fb, CW_MSG_EXPECT, &e.base, NULL, 0, NULL), 0);
  float x[6] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(upload(fa, 1, x, NULL, 24, 0), 0);
  Causeway__V1__SendRequest s = CAUSEWAY__V1__SEND_REQUEST__INIT;
  s.src_id = 1;
  s.peer_address = b.addr;
  s.dst_id = 50;
  s.dst_device = 1;
  s.dst_session = sb;
  assert_int_equal(call(fa, CW_MSG_SEND, &s.base, NULL, 0, NULL), 0);
  expect_download(fb, 50, x);
  // Into a session that does not exist, and to a dead address.
  s.dst_session = sb + 1;
  s.dst_id = 51;
  assert_int_equal(call(fa, CW_MSG_SEND, &s.base, NULL, 0, NULL), CW_NOT_FOUND);
  s.peer_address = "127.0.0.1:1";
  assert_int_equal(call(fa, CW_MSG_SEND, &s.base, NULL, 0, NULL), CW_UNAVAILABLE);
  Causeway__V1__StatsRequest sq = CAUSEWAY__V1__STATS_REQUEST__INIT;
  reply_t r;
  assert_int_equal(call(fa, CW_MSG_STATS, &sq.base, NULL, 0, &r), 0);
  Causeway__V1__Stats* st = (Causeway__V1__Stats*)r.msg;
  for (size_t i = 0; i < st->n_peers; ++i) {
    printf("  peer %s: in %llu out %llu\n", st->peers[i]->peer,
           (unsigned long long)st->peers[i]->bytes_in, (unsigned long long)st->peers[i]->bytes_out);
  }
  reply_free(&r);
  close(fa);
  close(fb);
  stop_worker(&a);
  stop_worker(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_send_put),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
