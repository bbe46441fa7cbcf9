// Unit tests of the worker's object store: keys, states, waiters, growth,
// session removal and references.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_store.h"

static int g_released;
static uint64_t g_uncharged;
static void release_fn(void* user, cw_store_entry_t* e) {
  (void)user;
  if (e->handle) g_released++;
  g_uncharged += e->charge;
}

static cw_store_t* make_store(void) {
  cw_store_t* s = NULL;
  cw_status_t st = cw_store_create(release_fn, NULL, &s);
  assert_null(st);
  g_released = 0;
  g_uncharged = 0;
  return s;
}

static void test_insert_lookup(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  cw_store_entry_t* e = NULL;
  assert_null(cw_store_insert(s, 1, 7, CW_STORE_BUFFER, &e));
  assert_non_null(e);
  assert_int_equal(e->state, CW_STORE_PENDING);
  assert_ptr_equal(cw_store_lookup(s, 1, 7), e);
  assert_null(cw_store_lookup(s, 2, 7));  // ids are per session
  cw_store_entry_t* e2 = NULL;
  cw_status_t st = cw_store_insert(s, 1, 7, CW_STORE_BUFFER, &e2);
  assert_int_equal(cw_status_code(st), CW_ALREADY_EXISTS);
  cw_status_free(st);
  st = cw_store_insert(s, 1, 0, CW_STORE_BUFFER, &e2);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  st = cw_store_find(s, 1, 8, CW_STORE_BUFFER, &e2);
  assert_int_equal(cw_status_code(st), CW_NOT_FOUND);
  cw_status_free(st);
  st = cw_store_find(s, 1, 7, CW_STORE_EXECUTABLE, &e2);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  assert_null(cw_store_insert(s, 2, 7, CW_STORE_EXECUTABLE, &e2));
  assert_int_equal(cw_store_size(s), 2);
  cw_store_release(s);
}

static int g_order[8];
static int g_norder;
static void waiter_fn(void* user) { g_order[g_norder++] = (int)(intptr_t)user; }

static void test_waiters(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  cw_store_entry_t* e = NULL;
  assert_null(cw_store_insert(s, 1, 1, CW_STORE_BUFFER, &e));
  g_norder = 0;
  assert_null(cw_store_add_waiter(s, e, waiter_fn, (void*)1));
  assert_null(cw_store_add_waiter(s, e, waiter_fn, (void*)2));
  static int handle;
  cw_store_set_ready(s, e, &handle);
  assert_int_equal(g_norder, 2);
  assert_int_equal(g_order[0], 1);
  assert_int_equal(g_order[1], 2);
  assert_int_equal(e->state, CW_STORE_READY);
  // Error releases the handle and runs waiters; removal runs them too.
  cw_store_entry_t* e2 = NULL;
  assert_null(cw_store_insert(s, 1, 2, CW_STORE_BUFFER, &e2));
  assert_null(cw_store_add_waiter(s, e2, waiter_fn, (void*)3));
  cw_store_set_error(s, e2, cw_make_status(CW_INTERNAL, "boom"));
  assert_int_equal(g_norder, 3);
  assert_int_equal(e2->state, CW_STORE_ERROR);
  cw_store_entry_t* e3 = NULL;
  assert_null(cw_store_insert(s, 1, 3, CW_STORE_BUFFER, &e3));
  assert_null(cw_store_add_waiter(s, e3, waiter_fn, (void*)4));
  cw_store_remove(s, e3);
  assert_int_equal(g_norder, 4);
  assert_null(cw_store_lookup(s, 1, 3));
  cw_store_release(s);
  assert_int_equal(g_released, 1);
}

static void test_growth_and_sessions(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  static int handle;
  for (uint64_t i = 1; i <= 5000; ++i) {
    cw_store_entry_t* e = NULL;
    assert_null(cw_store_insert(s, 1 + (i % 3), i, CW_STORE_BUFFER, &e));
    cw_store_set_bytes(s, e, 4);
    cw_store_set_ready(s, e, &handle);
  }
  // Delete and re-insert to exercise tombstones.
  for (uint64_t i = 1; i <= 5000; i += 2) cw_store_remove(s, cw_store_lookup(s, 1 + (i % 3), i));
  for (uint64_t i = 1; i <= 5000; i += 2) {
    cw_store_entry_t* e = NULL;
    assert_null(cw_store_insert(s, 1 + (i % 3), i, CW_STORE_BUFFER, &e));
  }
  assert_int_equal(cw_store_size(s), 5000);
  for (uint64_t i = 1; i <= 5000; ++i) assert_non_null(cw_store_lookup(s, 1 + (i % 3), i));
  cw_store_stats_t st;
  cw_store_stats(s, 0, &st);
  assert_int_equal(st.buffers, 5000);
  assert_int_equal(st.buffer_bytes, 2500 * 4);
  cw_store_remove_session(s, 2);
  cw_store_stats(s, 2, &st);
  assert_int_equal(st.buffers, 0);
  cw_store_stats(s, 1, &st);
  assert_true(st.buffers > 1000);
  cw_store_release(s);
  assert_int_equal(g_released, 5000);
}

// Past 64 sessions and 64 detached entries their indexes grow (rehashing
// what they hold): every session's counts, every detached entry and the
// detached entries' session removal still find what they should.
static void test_many_sessions_and_detached(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  static int handle;
  enum { SESSIONS = 200, PER = 3 };
  cw_store_entry_t* held[SESSIONS * PER];
  uint64_t serials[SESSIONS * PER];
  for (uint64_t k = 1; k <= SESSIONS; ++k) {
    for (uint64_t i = 1; i <= PER; ++i) {
      cw_store_entry_t* e = NULL;
      assert_null(cw_store_insert(s, k * 1000003, i, CW_STORE_BUFFER, &e));
      cw_store_set_bytes(s, e, k + i);
      if (i == 1) cw_store_set_ready(s, e, &handle);  // others stay pending
      else e->awaits_put = i == 2;
    }
  }
  for (uint64_t k = 1; k <= SESSIONS; ++k) {
    cw_store_stats_t st;
    cw_store_stats(s, k * 1000003, &st);
    assert_int_equal(st.buffers, PER);  // pending ones count too
    assert_int_equal(st.buffer_bytes, 3 * k + 6);
  }
  // Every entry held, then removed: all detached, found by serial.
  size_t n = 0;
  for (uint64_t k = 1; k <= SESSIONS; ++k) {
    for (uint64_t i = 1; i <= PER; ++i, ++n) {
      held[n] = cw_store_lookup(s, k * 1000003, i);
      assert_non_null(held[n]);
      serials[n] = held[n]->serial;
      cw_store_entry_retain(held[n]);
      cw_store_remove(s, held[n]);
    }
  }
  assert_int_equal(cw_store_size(s), 0);
  assert_int_equal(cw_store_detached_count(s), SESSIONS * PER);
  n = 0;
  for (uint64_t k = 1; k <= SESSIONS; ++k) {
    for (uint64_t i = 1; i <= PER; ++i, ++n) {
      assert_ptr_equal(cw_store_lookup_serial(s, k * 1000003, i, serials[n]), held[n]);
    }
    assert_ptr_equal(cw_store_lookup_detached_put(s, k * 1000003, 2), held[n - 2]);
    assert_null(cw_store_lookup_detached_put(s, k * 1000003, 3));  // no EXPECT
  }
  // The odd sessions end: their detached entries still pending fail.
  for (uint64_t k = 1; k <= SESSIONS; k += 2) cw_store_remove_session(s, k * 1000003);
  n = 0;
  for (uint64_t k = 1; k <= SESSIONS; ++k) {
    for (uint64_t i = 1; i <= PER; ++i, ++n) {
      cw_store_state_t want = i == 1 ? CW_STORE_READY
                                     : (k % 2 ? CW_STORE_ERROR : CW_STORE_PENDING);
      assert_int_equal(held[n]->state, want);
    }
  }
  for (n = 0; n < SESSIONS * PER; ++n) cw_store_entry_release(s, held[n]);
  assert_int_equal(cw_store_detached_count(s), 0);
  assert_int_equal(g_released, SESSIONS);  // the ready ones' handles
  cw_store_release(s);
}

// Many sessions' counts at once equal counting each session here, with keys
// repeated or absent from the store.
static void test_stats_of_many_sessions(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  static int handle;
  cw_store_stats_t want[13], total;  // by session key 1..12, counted here
  memset(want, 0, sizeof(want));
  memset(&total, 0, sizeof(total));
  for (uint64_t i = 1; i <= 3000; ++i) {
    uint64_t key = 1 + (i % 11);
    bool exe = i % 7 == 0, failed = i % 13 == 0;
    cw_store_entry_t* e = NULL;
    assert_null(cw_store_insert(s, key, i, exe ? CW_STORE_EXECUTABLE : CW_STORE_BUFFER, &e));
    cw_store_set_bytes(s, e, i);
    if (failed) cw_store_set_error(s, e, cw_make_status(CW_INTERNAL, "failed"));
    else cw_store_set_ready(s, e, &handle);
    cw_store_stats_t* w[2] = {&want[key], &total};
    for (int k = 0; k < 2; ++k) {
      if (exe) {
        w[k]->executables++;
      } else if (!failed) {  // failed buffers are not counted
        w[k]->buffers++;
        w[k]->buffer_bytes += i;
      }
    }
  }
  const uint64_t keys[] = {3, 1, 11, 5, 99, 2, 7, 3, 12, 4, 6, 8, 9, 10};
  enum { N = sizeof(keys) / sizeof(keys[0]) };
  const size_t counts[] = {0, 2, N};
  for (size_t c = 0; c < 3; ++c) {
    size_t n = counts[c];
    cw_store_stats_t all, per[N];
    cw_store_stats(s, 0, &all);
    for (size_t k = 0; k < n; ++k) cw_store_stats(s, keys[k], &per[k]);
    assert_memory_equal(&all, &total, sizeof(total));
    for (size_t k = 0; k < n; ++k) {
      cw_store_stats_t none = {0, 0, 0};
      assert_memory_equal(&per[k], keys[k] <= 12 ? &want[keys[k]] : &none, sizeof(none));
    }
  }
  cw_store_release(s);
}

// The counts are kept as entries change (STATS reads them each second
// without a pass over the table): after every step of a random mix of
// inserts, sizes, ready, errors, removals held or not, releases and session
// removals, they equal a model counted here.
static void test_stats_follow_every_change(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  static int handle;
  enum { SESSIONS = 5, IDS = 40, STEPS = 20000 };
  typedef struct {
    cw_store_entry_t* e;  // in the table
    cw_store_entry_t* held;  // retained here (maybe detached)
  } slot_t;
  static slot_t model[SESSIONS + 1][IDS + 1];
  memset(model, 0, sizeof(model));
  uint64_t rng = 0x2545F4914F6CDD1Dull;
  for (int step = 0; step < STEPS; ++step) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    uint64_t key = 1 + rng % SESSIONS, id = 1 + (rng >> 8) % IDS;
    slot_t* m = &model[key][id];
    switch ((rng >> 20) % 8) {
      case 0:
      case 1:
        if (!m->e) {
          cw_store_kind_t kind = (rng >> 30) % 4 ? CW_STORE_BUFFER : CW_STORE_EXECUTABLE;
          assert_null(cw_store_insert(s, key, id, kind, &m->e));
        }
        break;
      case 2:
        if (m->e) cw_store_set_bytes(s, m->e, (rng >> 32) % 5000);
        break;
      case 3:
        if (m->e && m->e->state == CW_STORE_PENDING) cw_store_set_ready(s, m->e, &handle);
        break;
      case 4:
        if (m->e && m->e->state == CW_STORE_PENDING) {
          cw_store_set_error(s, m->e, cw_make_status(CW_INTERNAL, "failed"));
        } else if (m->held && m->held->state == CW_STORE_PENDING) {
          cw_store_set_error(s, m->held, cw_make_status(CW_INTERNAL, "failed detached"));
        }
        break;
      case 5:
        if (m->e && !m->held && (rng >> 40) % 2) {
          m->held = m->e;
          cw_store_entry_retain(m->held);
        }
        if (m->e) cw_store_remove(s, m->e);
        m->e = NULL;
        break;
      case 6:
        cw_store_entry_release(s, m->held);
        m->held = NULL;
        break;
      default:
        if ((rng >> 44) % 16 == 0) {
          cw_store_remove_session(s, key);
          for (uint64_t i = 1; i <= IDS; ++i) model[key][i].e = NULL;
        }
        break;
    }
    cw_store_stats_t want[SESSIONS + 1], total;
    memset(want, 0, sizeof(want));
    memset(&total, 0, sizeof(total));
    for (uint64_t k = 1; k <= SESSIONS; ++k) {
      for (uint64_t i = 1; i <= IDS; ++i) {
        const cw_store_entry_t* e = model[k][i].e;
        if (!e) continue;
        assert_ptr_equal(cw_store_lookup(s, k, i), e);
        cw_store_stats_t* w[2] = {&want[k], &total};
        for (int j = 0; j < 2; ++j) {
          if (e->kind == CW_STORE_EXECUTABLE) {
            w[j]->executables++;
          } else if (e->state != CW_STORE_ERROR) {
            w[j]->buffers++;
            w[j]->buffer_bytes += e->bytes;
          }
        }
      }
    }
    cw_store_stats_t got;
    cw_store_stats(s, 0, &got);
    assert_memory_equal(&got, &total, sizeof(got));
    for (uint64_t k = 1; k <= SESSIONS; ++k) {
      cw_store_stats(s, k, &got);
      assert_memory_equal(&got, &want[k], sizeof(got));
    }
  }
  for (uint64_t k = 1; k <= SESSIONS; ++k) {
    for (uint64_t i = 1; i <= IDS; ++i) cw_store_entry_release(s, model[k][i].held);
  }
  cw_store_release(s);
}

// References: removal takes the id out of the table at once; a referenced
// entry lives on detached (handle, state, waiters kept) until its last
// release.
static void test_references(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  static int h1, h2, h3;
  // A ready entry held across its removal.
  cw_store_entry_t* e = NULL;
  assert_null(cw_store_insert(s, 1, 5, CW_STORE_BUFFER, &e));
  cw_store_set_ready(s, e, &h1);
  cw_store_entry_retain(e);
  cw_store_entry_retain(e);
  uint64_t serial = e->serial;
  cw_store_remove(s, e);
  assert_null(cw_store_lookup(s, 1, 5));  // NOT_FOUND at once
  assert_int_equal(cw_store_size(s), 0);
  assert_int_equal(g_released, 0);  // the handle is kept for the holders
  assert_true(e->detached);
  assert_ptr_equal(e->handle, &h1);
  assert_int_equal(cw_store_detached_count(s), 1);
  assert_ptr_equal(cw_store_lookup_serial(s, 1, 5, serial), e);
  cw_store_remove(s, e);  // removing a detached entry does nothing
  assert_int_equal(cw_store_detached_count(s), 1);
  // The id may be created again; it is another entry.
  cw_store_entry_t* again = NULL;
  assert_null(cw_store_insert(s, 1, 5, CW_STORE_BUFFER, &again));
  assert_ptr_not_equal(again, e);
  assert_ptr_equal(cw_store_lookup_serial(s, 1, 5, serial), e);
  assert_ptr_equal(cw_store_lookup_serial(s, 1, 5, again->serial), again);
  cw_store_stats_t st;
  cw_store_stats(s, 0, &st);
  assert_int_equal(st.buffers, 1);  // detached entries are not counted
  cw_store_entry_release(s, e);
  assert_int_equal(g_released, 0);
  cw_store_entry_release(s, e);  // the last one frees it
  assert_int_equal(g_released, 1);
  assert_int_equal(cw_store_detached_count(s), 0);
  assert_null(cw_store_lookup_serial(s, 1, 5, serial));
  // Retain/release without removal leaves the entry in the table.
  cw_store_entry_retain(again);
  cw_store_entry_release(s, again);
  assert_ptr_equal(cw_store_lookup(s, 1, 5), again);
  cw_store_entry_release(s, NULL);

  // A pending entry held across its removal keeps its waiters; filling it
  // (its producer finds it by serial) runs them.
  g_norder = 0;
  cw_store_entry_t* p = NULL;
  assert_null(cw_store_insert(s, 1, 6, CW_STORE_BUFFER, &p));
  cw_store_entry_retain(p);
  assert_null(cw_store_add_waiter(s, p, waiter_fn, (void*)7));
  cw_store_remove(s, p);
  assert_int_equal(g_norder, 0);
  assert_ptr_equal(cw_store_lookup_serial(s, 1, 6, p->serial), p);
  assert_null(cw_store_lookup_detached_put(s, 1, 6));  // not EXPECT-ed
  cw_store_set_ready(s, p, &h2);
  assert_int_equal(g_norder, 1);
  assert_int_equal(g_order[0], 7);
  cw_store_entry_release(s, p);
  assert_int_equal(g_released, 2);

  // An EXPECT-ed entry deleted while held: a PUT finds it, oldest first,
  // before an entry created again under the id.
  cw_store_entry_t* x = NULL;
  assert_null(cw_store_insert(s, 1, 8, CW_STORE_BUFFER, &x));
  x->awaits_put = true;
  cw_store_entry_retain(x);
  cw_store_remove(s, x);
  cw_store_entry_t* x2 = NULL;
  assert_null(cw_store_insert(s, 1, 8, CW_STORE_BUFFER, &x2));
  x2->awaits_put = true;
  cw_store_entry_retain(x2);
  cw_store_remove(s, x2);
  assert_ptr_equal(cw_store_lookup_detached_put(s, 1, 8), x);
  assert_null(cw_store_lookup_detached_put(s, 2, 8));  // per session
  x->filling = true;
  assert_ptr_equal(cw_store_lookup_detached_put(s, 1, 8), x2);
  x->filling = false;
  cw_store_set_ready(s, x, &h3);
  assert_ptr_equal(cw_store_lookup_detached_put(s, 1, 8), x2);
  cw_store_entry_release(s, x);
  assert_int_equal(g_released, 3);

  // Session teardown fails detached pending entries so their holders finish;
  // the holder's release frees them.
  g_norder = 0;
  cw_store_entry_t* q = NULL;
  assert_null(cw_store_insert(s, 2, 9, CW_STORE_BUFFER, &q));
  cw_store_entry_retain(q);
  assert_null(cw_store_add_waiter(s, q, waiter_fn, (void*)9));
  cw_store_remove_session(s, 2);
  assert_int_equal(g_norder, 1);
  assert_int_equal(q->state, CW_STORE_ERROR);
  assert_int_equal(cw_status_code(q->error), CW_CANCELLED);
  assert_true(q->detached);
  cw_store_entry_release(s, q);
  assert_int_equal(cw_store_detached_count(s), 1);  // x2, session 1

  // Releasing the store frees entries still held (no leak under LSan).
  cw_store_release(s);
}

// A charge (memory the worker counts before the buffer exists) goes back
// exactly once when the entry fails or is freed, handle or not, and not
// while a holder keeps a removed entry.
static void test_charges(void** state) {
  (void)state;
  cw_store_t* s = make_store();
  cw_store_entry_t* a = NULL;
  cw_store_entry_t* b = NULL;
  cw_store_entry_t* c = NULL;
  assert_null(cw_store_insert(s, 1, 1, CW_STORE_BUFFER, &a));
  assert_null(cw_store_insert(s, 1, 2, CW_STORE_BUFFER, &b));
  assert_null(cw_store_insert(s, 1, 3, CW_STORE_BUFFER, &c));
  a->charge = 100;
  b->charge = 20;
  c->charge = 3;
  cw_store_set_error(s, a, cw_make_status(CW_CANCELLED, "x"));
  assert_int_equal(g_uncharged, 100);
  assert_int_equal(a->charge, 0);
  cw_store_remove(s, a);
  assert_int_equal(g_uncharged, 100);
  cw_store_entry_retain(b);
  cw_store_remove(s, b);  // detached: its memory is still held
  assert_int_equal(g_uncharged, 100);
  cw_store_entry_release(s, b);
  assert_int_equal(g_uncharged, 120);
  cw_store_remove_session(s, 1);
  assert_int_equal(g_uncharged, 123);
  assert_int_equal(g_released, 0);  // no handles
  cw_store_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_insert_lookup),
      cmocka_unit_test(test_waiters),
      cmocka_unit_test(test_growth_and_sessions),
      cmocka_unit_test(test_many_sessions_and_detached),
      cmocka_unit_test(test_stats_of_many_sessions),
      cmocka_unit_test(test_stats_follow_every_change),
      cmocka_unit_test(test_references),
      cmocka_unit_test(test_charges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
