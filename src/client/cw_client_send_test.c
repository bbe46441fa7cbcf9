// Unit tests of sending, waiting and flushing (cw_client_send.c): ids,
// pipelined requests answered out of order, deferred frames, several
// threads on one client; against the fake peer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client_fake_peer.h"

// Reads n PINGs, then answers them in reverse order.
static void script_reverse(fake_t* f) {
  frame_t fr[8];
  int n = f->count;
  for (int i = 0; i < n; ++i) FCHECK(f, fake_read(f, &fr[i]) && fr[i].h.type == CW_MSG_PING);
  for (int i = n - 1; i >= 0; --i) FCHECK(f, fake_reply(f, &fr[i], fr[i].msg, NULL, 0));
  for (int i = 0; i < n; ++i) frame_free(&fr[i]);
  script_echo(f);
}

static void test_pipelined_out_of_order(void** state) {
  fake_t f = {.count = 5};
  fake_start(&f, script_reverse);
  cw_client_t* c = connect_ok(&f);
  const char* data[4] = {"alpha", "bravo", "charlie", "delta"};
  uint64_t ids[4];
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(send_ping(c, data[0], NULL, NULL, &ids[0]));
  assert_ok(send_ping(c, data[1], NULL, NULL, &ids[1]));
  uint64_t cb_id = 0;
  assert_ok(send_ping(c, "echo", rec_done, &rec, &cb_id));
  assert_ok(send_ping(c, data[2], NULL, NULL, &ids[2]));
  assert_ok(send_ping(c, data[3], NULL, NULL, &ids[3]));
  // HELLO took id 1; the counter continues from there.
  assert_int_equal(ids[0], 2);
  assert_int_equal(ids[3], 6);
  // Wait in send order although replies come in reverse.
  for (int i = 0; i < 4; ++i) {
    ProtobufCMessage* reply = NULL;
    assert_ok(cw_client_wait(c, ids[i], &reply, NULL));
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    assert_int_equal(p->data.len, strlen(data[i]));
    assert_memory_equal(p->data.data, data[i], strlen(data[i]));
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  // A claimed id cannot be waited for twice; a callback id is not waitable.
  expect_status(cw_client_wait(c, ids[0], NULL, NULL), CW_INVALID_ARGUMENT, NULL);
  assert_ok(cw_client_flush(c));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_OK);
  assert_string_equal(rec.data, "echo");
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
}

// A deferred frame goes out ahead of the next frame sent (one write); the
// peer sees both in order and both complete.
static void test_deferred_send(void** state) {
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)"first";
  p.data.len = 5;
  uint64_t deferred_id = 0, id = 0;
  assert_ok(cw_client_send_deferred(c, CW_MSG_PING, &p.base, rec_done, &rec, &deferred_id));
  assert_ok(send_ping(c, "second", NULL, NULL, &id));
  assert_true(id > deferred_id);
  ProtobufCMessage* reply = NULL;
  assert_ok(cw_client_wait(c, id, &reply, NULL));
  protobuf_c_message_free_unpacked(reply, NULL);
  assert_ok(cw_client_flush(c));
  // The echo script answers in arrival order: the deferred one came first.
  assert_int_equal(rec.calls, 1);
  assert_string_equal(rec.data, "first");
  cw_client_release(c);
  fake_join(&f);
}

// Several threads share one client; the peer echoes.
typedef struct stress_s {
  cw_client_t* c;
  int thread;
  int failures;
} stress_t;

static void* stress_main(void* arg) {
  stress_t* s = arg;
  for (int i = 0; i < 200; ++i) {
    char data[32];
    snprintf(data, sizeof(data), "t%d-%d", s->thread, i);
    uint64_t id = 0;
    cw_status_t st = send_ping(s->c, data, NULL, NULL, &id);
    ProtobufCMessage* reply = NULL;
    if (!st) st = cw_client_wait(s->c, id, &reply, NULL);
    if (st) {
      s->failures++;
      cw_status_free(st);
      continue;
    }
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    if (p->data.len != strlen(data) || memcmp(p->data.data, data, p->data.len) != 0) {
      s->failures++;
    }
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  return NULL;
}

static void test_threads(void** state) {
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  pthread_t t[4];
  stress_t s[4];
  for (int i = 0; i < 4; ++i) {
    s[i] = (stress_t){.c = c, .thread = i};
    pthread_create(&t[i], NULL, stress_main, &s[i]);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(t[i], NULL);
    assert_int_equal(s[i].failures, 0);
  }
  assert_ok(cw_client_flush(c));
  cw_client_release(c);
  fake_join(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipelined_out_of_order),
      cmocka_unit_test(test_deferred_send),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
