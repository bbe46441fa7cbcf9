// Unit tests of per-session seq ordering: apply, hold, duplicates, limits,
// held bulk bytes and release.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_worker_seq.h"

static ProtobufCMessage* delete_msg(uint64_t seq) {
  Causeway__V1__DeleteRequest* r = calloc(1, sizeof(*r));
  causeway__v1__delete_request__init(r);
  r->seq = seq;
  return &r->base;
}

static cw_frame_header_t header(uint16_t type, uint64_t bulk_len) {
  cw_frame_header_t h;
  memset(&h, 0, sizeof(h));
  h.type = type;
  h.bulk_len = bulk_len;
  return h;
}

static cw_status_t admit_on(cw_seq_t* s, void* conn, uint64_t seq, uint64_t bulk_len,
                            cw_seq_held_t** held) {
  cw_frame_header_t h = header(bulk_len ? CW_MSG_UPLOAD : CW_MSG_DELETE, bulk_len);
  ProtobufCMessage* m = delete_msg(seq);
  cw_status_t st = cw_seq_admit(s, seq, &h, &m, conn, 3, 100, held);
  if (m) protobuf_c_message_free_unpacked(m, NULL);
  return st;
}

static cw_status_t admit(cw_seq_t* s, uint64_t seq, uint64_t bulk_len, cw_seq_held_t** held) {
  return admit_on(s, (void*)0x1, seq, bulk_len, held);
}

// The next request ready to apply is `want`; taken and freed.
static void take_expect(cw_seq_t* s, cw_seq_held_t* want) {
  cw_seq_held_t* got = cw_seq_take_ready(s);
  assert_ptr_equal(got, want);
  cw_seq_held_free(got);
}

static void test_in_order(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* held = NULL;
  for (uint64_t i = 1; i <= 3; ++i) {
    assert_null(admit(&s, i, 0, &held));
    assert_null(held);
  }
  assert_int_equal(s.next, 4);
  assert_null(cw_seq_take_ready(&s));
  cw_seq_deinitialize(&s, NULL);
}

static void test_hold_and_drain(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* h3 = NULL;
  cw_seq_held_t* h2 = NULL;
  cw_seq_held_t* none = NULL;
  assert_null(admit(&s, 3, 0, &h3));
  assert_non_null(h3);
  assert_null(admit(&s, 2, 8, &h2));  // an UPLOAD whose bytes still arrive
  assert_non_null(h2);
  assert_non_null(h2->bulk);
  assert_false(h2->bulk_ready);
  assert_int_equal(s.held_count, 2);
  assert_int_equal(s.held_bytes, 8);
  assert_null(cw_seq_take_ready(&s));  // 1 has not come
  assert_null(admit(&s, 1, 0, &none));
  assert_null(none);
  assert_null(cw_seq_take_ready(&s));  // 2's bytes are not in
  h2->bulk_ready = true;
  take_expect(&s, h2);
  take_expect(&s, h3);
  assert_int_equal(s.next, 4);
  assert_int_equal(s.held_count, 0);
  assert_int_equal(s.held_bytes, 0);
  cw_seq_deinitialize(&s, NULL);
}

static void test_duplicates(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* held = NULL;
  assert_null(admit(&s, 1, 0, &held));
  cw_status_t st = admit(&s, 1, 0, &held);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  assert_null(admit(&s, 5, 0, &held));
  st = admit(&s, 5, 0, &held);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  cw_seq_deinitialize(&s, NULL);
}

// A request whose seq is the next while a held one of that seq still waits
// for its bytes (an UPLOAD cut with its connection, whose close the worker
// has not seen yet, and the client's fill of its seq on another connection)
// is a duplicate. Taken as the next, it left the held one at the head for
// good: every later request of the session waited behind it (the random
// sequences, seed 12280 with CW_SEQFUZZ_MAX_HELD_REQUESTS=2).
static void test_next_seq_while_a_held_one_waits_for_its_bytes(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* h2 = NULL;
  cw_seq_held_t* h3 = NULL;
  cw_seq_held_t* none = NULL;
  assert_null(admit(&s, 2, 8, &h2));  // its bytes still arrive
  assert_non_null(h2);
  assert_null(admit(&s, 3, 0, &h3));
  assert_null(admit(&s, 1, 0, &none));
  assert_int_equal(s.next, 2);
  cw_status_t st = admit_on(&s, (void*)0x2, 2, 0, &none);  // the fill, on another connection
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  assert_null(none);
  assert_int_equal(s.next, 2);
  h2->bulk_ready = true;  // its connection closed: its turn passes when taken
  take_expect(&s, h2);
  take_expect(&s, h3);
  assert_int_equal(s.next, 4);
  assert_int_equal(s.held_count, 0);
  cw_seq_deinitialize(&s, NULL);
}

static int g_released;
static void release(void* conn, cw_seq_held_t* held) {
  assert_ptr_equal(conn, (void*)0x1);
  assert_non_null(held);
  g_released++;
}

static void test_limits(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* held = NULL;
  assert_null(admit(&s, 10, 60, &held));
  // 60 held, under 100: admitted whatever its own size (a connection of the
  // session adds it in order; flow control pauses it after).
  assert_null(admit(&s, 11, 180, &held));
  for (uint64_t bytes = 0; bytes <= 1; ++bytes) {  // 240 held already >= 100
    cw_status_t st = admit(&s, 12, bytes, &held);
    assert_int_equal(cw_status_code(st), CW_RESOURCE_EXHAUSTED);
    cw_status_free(st);
  }
  g_released = 0;
  cw_seq_deinitialize(&s, release);
  assert_int_equal(g_released, 2);
  assert_int_equal(s.held_count, 0);
  cw_seq_initialize(&s);
  for (uint64_t q = 10; q <= 12; ++q) assert_null(admit(&s, q, 0, &held));
  cw_status_t st = admit(&s, 13, 0, &held);  // a fourth held request > 3
  assert_int_equal(cw_status_code(st), CW_RESOURCE_EXHAUSTED);
  cw_status_free(st);
  cw_seq_deinitialize(&s, release);
  assert_int_equal(g_released, 5);
  assert_int_equal(s.held_count, 0);
}

// Appends after the tail (the common case), inserts before it, drains in
// order, and appends again once the list emptied (the tail was reset).
static void test_tail_order(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* held = NULL;
  assert_null(admit(&s, 3, 0, &held));
  assert_null(admit(&s, 5, 0, &held));
  assert_null(admit(&s, 4, 0, &held));  // before the tail
  assert_int_equal(s.held_tail->seq, 5);
  cw_status_t st = admit(&s, 5, 0, &held);  // the tail again: a duplicate
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  cw_status_free(st);
  assert_null(admit(&s, 1, 0, &held));  // applies (the helper holds at most 3)
  assert_null(held);
  assert_null(admit(&s, 2, 0, &held));  // applies; 3..5 are ready
  assert_null(held);
  for (uint64_t want = 3; want <= 5; ++want) {
    cw_seq_held_t* hd = cw_seq_take_ready(&s);
    assert_non_null(hd);
    assert_int_equal(hd->seq, want);
    cw_seq_held_free(hd);
  }
  assert_null(cw_seq_take_ready(&s));
  assert_null(s.held_tail);
  assert_null(admit(&s, 8, 0, &held));
  assert_null(admit(&s, 7, 0, &held));
  assert_int_equal(s.held->seq, 7);
  assert_int_equal(s.held_tail->seq, 8);
  cw_seq_deinitialize(&s, NULL);
  assert_null(s.held_tail);
}

// A closed connection's held requests leave their seqs unfilled: the same
// seqs sent again (on another connection) apply, in order with the rest.
static void test_forget_conn(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* held = NULL;
  void* gone = (void*)0x2;
  assert_null(admit(&s, 4, 0, &held));  // conn 1
  assert_null(admit_on(&s, gone, 2, 20, &held));
  assert_null(admit_on(&s, gone, 5, 0, &held));  // the tail
  assert_int_equal(s.held_count, 3);
  assert_int_equal(s.held_bytes, 20);
  assert_int_equal(cw_seq_forget_conn(&s, gone, NULL), 2);
  assert_int_equal(s.held_count, 1);
  assert_int_equal(s.held_bytes, 0);
  assert_int_equal(s.next, 1);
  assert_int_equal(s.held_tail->seq, 4);
  assert_null(admit(&s, 1, 0, &held));
  assert_null(held);
  assert_null(cw_seq_take_ready(&s));  // 2 is unfilled again
  assert_null(admit(&s, 2, 0, &held));  // sent again: applies
  assert_null(held);
  assert_null(admit(&s, 5, 0, &held));  // held again, after 4
  assert_non_null(held);
  assert_int_equal(s.held_tail->seq, 5);
  assert_null(admit(&s, 3, 0, &held));
  cw_seq_held_t* four = cw_seq_take_ready(&s);
  assert_non_null(four);
  assert_int_equal(four->seq, 4);
  cw_seq_held_free(four);
  cw_seq_held_t* five = cw_seq_take_ready(&s);
  assert_non_null(five);
  assert_int_equal(five->seq, 5);
  cw_seq_held_free(five);
  assert_int_equal(s.next, 6);
  g_released = 0;
  assert_int_equal(cw_seq_forget_conn(&s, (void*)0x1, release), 0);
  assert_int_equal(g_released, 0);
  cw_seq_deinitialize(&s, NULL);
}

// A held request taken out again (superseded): its seq is unfilled, the
// tail and the counts follow, and the seq can be held again.
static void test_unhold(void** state) {
  (void)state;
  cw_seq_t s;
  cw_seq_initialize(&s);
  cw_seq_held_t* held = NULL;
  assert_null(admit(&s, 2, 10, &held));
  assert_null(admit(&s, 3, 0, &held));
  assert_null(admit(&s, 5, 0, &held));
  assert_null(cw_seq_held_find(&s, 1));
  assert_null(cw_seq_held_find(&s, 4));
  assert_null(cw_seq_held_find(&s, 6));
  cw_seq_held_t* five = cw_seq_held_find(&s, 5);
  assert_non_null(five);
  cw_seq_unhold(&s, five);  // the tail
  cw_seq_held_free(five);
  assert_int_equal(s.held_tail->seq, 3);
  cw_seq_held_t* two = cw_seq_held_find(&s, 2);
  assert_non_null(two);
  cw_seq_unhold(&s, two);  // the head, with bytes
  cw_seq_held_free(two);
  assert_int_equal(s.held_count, 1);
  assert_int_equal(s.held_bytes, 0);
  assert_int_equal(s.held->seq, 3);
  assert_null(admit(&s, 2, 0, &held));  // held again
  assert_non_null(held);
  assert_null(admit(&s, 5, 0, &held));
  assert_int_equal(s.held_tail->seq, 5);
  assert_null(admit(&s, 1, 0, &held));
  assert_null(held);
  for (uint64_t k = 2; k <= 3; ++k) {
    cw_seq_held_t* r = cw_seq_take_ready(&s);
    assert_non_null(r);
    assert_int_equal(r->seq, k);
    cw_seq_held_free(r);
  }
  assert_null(cw_seq_take_ready(&s));  // 4 has not come
  cw_seq_deinitialize(&s, NULL);
}

static void test_seq_of_request(void** state) {
  (void)state;
  ProtobufCMessage* m = delete_msg(7);
  assert_int_equal(cw_seq_of_request(CW_MSG_DELETE, m), 7);
  assert_int_equal(cw_seq_of_request(CW_MSG_PING, m), 0);
  assert_int_equal(cw_seq_of_request(CW_MSG_DELETE, NULL), 0);
  protobuf_c_message_free_unpacked(m, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_in_order),     cmocka_unit_test(test_hold_and_drain),
      cmocka_unit_test(test_next_seq_while_a_held_one_waits_for_its_bytes),
      cmocka_unit_test(test_duplicates),   cmocka_unit_test(test_limits),
      cmocka_unit_test(test_tail_order),   cmocka_unit_test(test_seq_of_request),
      cmocka_unit_test(test_forget_conn),  cmocka_unit_test(test_unhold),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
