// Unit tests of cw_net_gate.c: which waiting connection makes room (silent
// before active, oldest first, active ones at most half a budget, the
// newcomer's address at its budget, else the busiest address), the per-address table against a plain count under random
// admits and leaves, and the warning limiter. The pacer is exercised on a
// real loop by cw_net_listen_test.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_net_gate.h"

static cw_net_peer_key_t key_of(uint8_t n) {
  cw_net_peer_key_t k;
  memset(&k, 0, sizeof(k));
  k.bytes[0] = 4;
  k.bytes[1] = 10;
  k.bytes[4] = n;
  return k;
}

static cw_net_gate_entry_t* admit(cw_net_gate_t* g, cw_net_gate_entry_t* e, uint8_t peer) {
  memset(e, 0, sizeof(*e));
  e->peer = key_of(peer);
  return cw_net_gate_admit(g, e);
}

static void test_oldest_silent_first(void** state) {
  cw_net_gate_t g;
  assert_null(cw_net_gate_initialize(&g, 3, 0));
  cw_net_gate_entry_t e[8];
  assert_null(admit(&g, &e[0], 1));
  assert_null(admit(&g, &e[1], 1));
  assert_null(admit(&g, &e[2], 1));
  // Full: the oldest makes room.
  assert_ptr_equal(admit(&g, &e[3], 1), &e[0]);
  cw_net_gate_leave(&g, &e[0]);
  // e[1] has sent bytes: the silent e[2] goes before it although younger.
  cw_net_gate_progress(&g, &e[1]);
  assert_ptr_equal(admit(&g, &e[4], 1), &e[2]);
  cw_net_gate_leave(&g, &e[2]);
  assert_ptr_equal(admit(&g, &e[5], 1), &e[3]);
  cw_net_gate_leave(&g, &e[3]);
  // Only active ones and the newcomer's peers: the oldest active goes.
  cw_net_gate_progress(&g, &e[4]);
  cw_net_gate_progress(&g, &e[5]);
  assert_ptr_equal(admit(&g, &e[6], 1), &e[1]);
  cw_net_gate_leave(&g, &e[1]);
  // An entry that authenticated has left: never a victim, leaving twice is harmless.
  cw_net_gate_leave(&g, &e[4]);
  cw_net_gate_leave(&g, &e[4]);
  assert_int_equal(g.count, 2);
  assert_null(admit(&g, &e[7], 1));
  assert_int_equal(g.evicted, 4);
  cw_net_gate_deinitialize(&g);
}

// Entries part way (active) hold at most half of a budget: beyond that the
// oldest of them goes before any silent one.
static void test_dribblers_hold_half(void** state) {
  cw_net_gate_t g;
  assert_null(cw_net_gate_initialize(&g, 8, 0));
  cw_net_gate_entry_t slow[5], idle[3], e[4];
  for (int i = 0; i < 5; ++i) {
    assert_null(admit(&g, &slow[i], 1));
    cw_net_gate_progress(&g, &slow[i]);
  }
  for (int i = 0; i < 3; ++i) assert_null(admit(&g, &idle[i], 1));
  assert_int_equal(g.active, 5);
  // 5 of 8 active: the oldest active goes.
  assert_ptr_equal(admit(&g, &e[0], 1), &slow[0]);
  cw_net_gate_leave(&g, &slow[0]);
  assert_int_equal(g.active, 4);
  // 4 of 8: no more than half; the oldest silent goes.
  assert_ptr_equal(admit(&g, &e[1], 1), &idle[0]);
  cw_net_gate_leave(&g, &idle[0]);
  // The same per address (budget 4 for address 2).
  cw_net_gate_t h;
  assert_null(cw_net_gate_initialize(&h, 100, 4));
  cw_net_gate_entry_t a[5];
  for (int i = 0; i < 4; ++i) {
    assert_null(admit(&h, &a[i], 2));
    if (i < 3) cw_net_gate_progress(&h, &a[i]);
  }
  assert_ptr_equal(admit(&h, &a[4], 2), &a[0]);  // 3 of 4 active
  cw_net_gate_deinitialize(&h);
  cw_net_gate_deinitialize(&g);
}

static void test_per_peer_budget(void** state) {
  cw_net_gate_t g;
  assert_null(cw_net_gate_initialize(&g, 10, 2));
  cw_net_gate_entry_t a[4], b[2];
  assert_null(admit(&g, &a[0], 1));
  assert_null(admit(&g, &b[0], 2));
  assert_null(admit(&g, &a[1], 1));
  // Address 1 is at its budget: its own oldest goes, not b[0] (older).
  assert_ptr_equal(admit(&g, &a[2], 1), &a[0]);
  cw_net_gate_leave(&g, &a[0]);
  assert_int_equal(cw_net_gate_peer_count(&g, &a[1].peer), 2);
  // Another address has room of its own.
  assert_null(admit(&g, &b[1], 2));
  assert_int_equal(cw_net_gate_peer_count(&g, &b[0].peer), 2);
  assert_int_equal(g.count, 4);
  cw_net_gate_deinitialize(&g);
}

static void test_busiest_address_pays(void** state) {
  cw_net_gate_t g;
  assert_null(cw_net_gate_initialize(&g, 4, 0));
  cw_net_gate_entry_t legit, flood[3], newcomer;
  assert_null(admit(&g, &legit, 9));  // the oldest of all
  for (int i = 0; i < 3; ++i) assert_null(admit(&g, &flood[i], 1));
  // Full: the flooding address gives up its oldest, not the older legit one.
  assert_ptr_equal(admit(&g, &newcomer, 7), &flood[0]);
  cw_net_gate_leave(&g, &flood[0]);
  cw_net_gate_deinitialize(&g);
}

// The per-address table (open addressing, deletion by shifting) agrees with
// a plain count through random admits and leaves over colliding addresses.
static void test_peer_table_random(void** state) {
  enum { N = 200, PEERS = 37 };
  cw_net_gate_t g;
  assert_null(cw_net_gate_initialize(&g, N, 0));
  cw_net_gate_entry_t e[N];
  memset(e, 0, sizeof(e));
  int want[PEERS] = {0};
  srand(7);
  for (int step = 0; step < 20000; ++step) {
    int i = rand() % N;
    if (e[i].in) {
      want[e[i].peer.bytes[4]]--;
      cw_net_gate_leave(&g, &e[i]);
    } else if (g.count < N) {
      uint8_t p = (uint8_t)(rand() % PEERS);
      assert_null(admit(&g, &e[i], p));  // never full: N entries at most
      want[p]++;
      if (rand() % 2) cw_net_gate_progress(&g, &e[i]);
    }
    if (step % 97 == 0) {
      size_t distinct = 0;
      for (int p = 0; p < PEERS; ++p) {
        cw_net_peer_key_t k = key_of((uint8_t)p);
        assert_int_equal(cw_net_gate_peer_count(&g, &k), want[p]);
        distinct += want[p] > 0;
      }
      assert_int_equal(g.distinct, distinct);
      size_t active = 0;
      for (int k = 0; k < N; ++k) active += e[k].in && e[k].active;
      assert_int_equal(g.active, active);
    }
  }
  cw_net_gate_deinitialize(&g);
}

static void test_warn_limit(void** state) {
  cw_net_warn_limit_t l = {0};
  uint64_t more = 99;
  assert_true(cw_net_warn_limit_pass(&l, 1000, 5000, &more));
  assert_int_equal(more, 0);
  assert_false(cw_net_warn_limit_pass(&l, 2000, 5000, &more));
  assert_false(cw_net_warn_limit_pass(&l, 5999, 5000, &more));
  assert_true(cw_net_warn_limit_pass(&l, 6000, 5000, &more));
  assert_int_equal(more, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_oldest_silent_first),
      cmocka_unit_test(test_dribblers_hold_half),
      cmocka_unit_test(test_per_peer_budget),
      cmocka_unit_test(test_busiest_address_pays),
      cmocka_unit_test(test_peer_table_random),
      cmocka_unit_test(test_warn_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
