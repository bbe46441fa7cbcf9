// Unit tests of sending, waiting and flushing (cw_client_send.c): ids,
// pipelined requests answered out of order, deferred frames, batched frames
// (held while enough are unanswered, written by the reader, on demand, or by
// the flusher), frames queued behind another thread's write, several threads
// on one client; against the fake peer.
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_client_internal.h"

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

// Batched sends: the test thread posts g_sent once it sent them all, the
// script g_peeked once it looked at what the socket holds, and g_read once
// the held frames came (before the test thread flushes, which would write
// them itself).
static sem_t g_sent, g_peeked, g_read;

// Nothing more is in the socket now (a held frame was not written).
static bool socket_empty(fake_t* f) {
  char b;
  return recv(f->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static void send_batched_ping(cw_client_t* c, const char* data, rec_t* rec) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)data;
  p.data.len = strlen(data);
  assert_ok(cw_client_send_batched(c, CW_MSG_PING, &p.base, rec_done, rec, NULL));
}

static void sems_init(void) {
  sem_init(&g_sent, 0, 0);
  sem_init(&g_peeked, 0, 0);
  sem_init(&g_read, 0, 0);
}

static void sems_destroy(void) {
  sem_destroy(&g_sent);
  sem_destroy(&g_peeked);
  sem_destroy(&g_read);
}

// A wide window: enough for a loaded machine.
#define WIDE_WINDOW_US (60 * 1000 * 1000)

// A client with batch window `window_us`, after one batched request
// answered: frames may be held from now on (within the window).
static cw_client_t* connect_batching(fake_t* f, rec_t* rec, int window_us) {
  cw_client_options_t o = {.batch_window_us = window_us};
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f->path, &o, &c));
  send_batched_ping(c, "warm-up", rec);
  assert_ok(cw_client_flush(c));
  return c;
}

// The peer's side of connect_batching.
static bool answer_warm_up(fake_t* f) {
  frame_t fr;
  if (!fake_read(f, &fr)) return false;
  bool ok = fake_reply(f, &fr, fr.msg, NULL, 0);
  frame_free(&fr);
  return ok;
}

// The peer echoes frames [from, n) of `fr`, frees all n, then echoes what comes.
static void reply_rest_and_echo(fake_t* f, frame_t* fr, int from, int n) {
  bool ok = true;
  for (int i = from; i < n; ++i) ok = ok && fake_reply(f, &fr[i], fr[i].msg, NULL, 0);
  for (int i = 0; i < n; ++i) frame_free(&fr[i]);
  FCHECK(f, ok);
  script_echo(f);
}

// The test's end: every request (`calls` with the warm-up) completed OK.
static void finish_batching(cw_client_t* c, fake_t* f, rec_t* rec, int calls) {
  assert_ok(cw_client_flush(c));
  assert_int_equal(rec->calls, calls);
  assert_int_equal(rec->code, CW_OK);
  cw_client_release(c);
  fake_join(f);
  sems_destroy();
}

// Four batched PINGs: the first CW_CLIENT_BATCH_DEPTH go out at once, the
// others are held until the reader takes the first reply, then come together.
static void script_batched_reader(fake_t* f) {
  frame_t fr[4];
  FCHECK(f, answer_warm_up(f));
  for (int i = 0; i < CW_CLIENT_BATCH_DEPTH; ++i) FCHECK(f, fake_read(f, &fr[i]));
  sem_wait(&g_sent);
  bool held = socket_empty(f);
  sem_post(&g_peeked);
  if (!held) sem_post(&g_read);  // the test thread fails instead of waiting
  FCHECK(f, held);
  FCHECK(f, fake_reply(f, &fr[0], fr[0].msg, NULL, 0));
  for (int i = CW_CLIENT_BATCH_DEPTH; i < 4; ++i) FCHECK(f, fake_read(f, &fr[i]));
  sem_post(&g_read);
  reply_rest_and_echo(f, fr, 1, 4);
}

static void test_batched_send_reader(void** state) {
  sems_init();
  fake_t f = {0};
  fake_start(&f, script_batched_reader);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_t* c = connect_batching(&f, &rec, WIDE_WINDOW_US);
  for (int i = 0; i < 4; ++i) send_batched_ping(c, "batched", &rec);
  sem_post(&g_sent);
  sem_wait(&g_peeked);
  sem_wait(&g_read);  // the reader wrote them: nobody else did
  finish_batching(c, &f, &rec, 5);  // and the warm-up
}

// A held frame goes out at cw_client_write_held, no reply needed.
static void script_batched_write_held(fake_t* f) {
  frame_t fr[3];
  FCHECK(f, answer_warm_up(f));
  for (int i = 0; i < CW_CLIENT_BATCH_DEPTH; ++i) FCHECK(f, fake_read(f, &fr[i]));
  sem_wait(&g_sent);
  bool held = socket_empty(f);
  sem_post(&g_peeked);
  FCHECK(f, held);
  FCHECK(f, fake_read(f, &fr[2]));
  reply_rest_and_echo(f, fr, 0, 3);
}

static void test_batched_send_write_held(void** state) {
  sems_init();
  fake_t f = {0};
  fake_start(&f, script_batched_write_held);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_t* c = connect_batching(&f, &rec, WIDE_WINDOW_US);
  for (int i = 0; i < 3; ++i) send_batched_ping(c, "batched", &rec);
  sem_post(&g_sent);
  sem_wait(&g_peeked);
  assert_ok(cw_client_write_held(c));
  finish_batching(c, &f, &rec, 4);  // and the warm-up
}

// Held batched frames fail with the connection like any other request.
static void script_batched_close(fake_t* f) {
  frame_t fr[CW_CLIENT_BATCH_DEPTH];
  FCHECK(f, answer_warm_up(f));
  for (int i = 0; i < CW_CLIENT_BATCH_DEPTH; ++i) FCHECK(f, fake_read(f, &fr[i]));
  sem_wait(&g_sent);
  for (int i = 0; i < CW_CLIENT_BATCH_DEPTH; ++i) frame_free(&fr[i]);
  // Returning closes the connection, unanswered.
}

static void test_batched_send_connection_lost(void** state) {
  sems_init();
  fake_t f = {0};
  fake_start(&f, script_batched_close);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_t* c = connect_batching(&f, &rec, WIDE_WINDOW_US);
  for (int i = 0; i < 4; ++i) send_batched_ping(c, "batched", &rec);
  sem_post(&g_sent);
  fake_join(&f);
  expect_status(cw_client_flush(c), CW_OK, NULL);  // callbacks got the errors
  assert_int_equal(rec.calls, 5);  // and the warm-up
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  cw_client_release(c);
  sems_destroy();
}

// The peer reads f->count batched frames before it answers any, and posts
// g_read once it has them: held frames would wait for its replies forever
// unless something else writes them.
static void script_batched_unanswered(fake_t* f) {
  frame_t fr[8];
  FCHECK(f, f->count <= 8 && answer_warm_up(f));
  for (int i = 0; i < f->count; ++i) FCHECK(f, fake_read(f, &fr[i]));
  sem_post(&g_read);
  reply_rest_and_echo(f, fr, 0, f->count);
}

// Sends `n` batched PINGs on a client with batch window `window_us`; the
// peer gets them all before it answers (and the test waits for the peer
// before anything but the flusher could write them).
static void batched_unanswered(int n, int window_us) {
  sems_init();
  fake_t f = {.count = n};
  fake_start(&f, script_batched_unanswered);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_t* c = connect_batching(&f, &rec, window_us);
  for (int i = 0; i < n; ++i) send_batched_ping(c, "x", &rec);
  sem_wait(&g_read);
  finish_batching(c, &f, &rec, n + 1);  // and the warm-up
}

// Replies that stopped coming hold nothing: a batched frame sent longer than
// the window (300 ms) after the last reply goes out at once, not when the
// flusher would write it.
static void script_batched_not_held(fake_t* f) {
  frame_t fr[3];
  FCHECK(f, answer_warm_up(f));
  for (int i = 0; i < CW_CLIENT_BATCH_DEPTH; ++i) FCHECK(f, fake_read(f, &fr[i]));
  sem_wait(&g_sent);
  bool sent = !socket_empty(f);
  sem_post(&g_peeked);
  FCHECK(f, sent);
  FCHECK(f, fake_read(f, &fr[2]));
  reply_rest_and_echo(f, fr, 0, 3);
}

static void test_batched_send_window(void** state) {
  sems_init();
  fake_t f = {0};
  fake_start(&f, script_batched_not_held);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_t* c = connect_batching(&f, &rec, 300 * 1000);
  usleep(400 * 1000);  // the replies stopped: the window passed
  for (int i = 0; i < 3; ++i) send_batched_ping(c, "x", &rec);
  sem_post(&g_sent);
  sem_wait(&g_peeked);
  finish_batching(c, &f, &rec, 4);  // and the warm-up
}

// Replies that came but wait unread (the reader has not run: here it is
// held in a callback) are replies that flow: a batched frame sent then is
// held for the reader, however long ago it last took one. The peer answers
// P (whose callback holds the reader), then B1 while the reader waits there.
static sem_t g_in_callback, g_release;

static void block_reader_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  sem_post(&g_in_callback);
  sem_wait(&g_release);
  rec_done(user, status, reply);
}

static void script_batched_replies_unread(fake_t* f) {
  frame_t fr[4];  // B1, B2, P, B3
  for (int i = 0; i < 3; ++i) FCHECK(f, fake_read(f, &fr[i]));
  FCHECK(f, fake_reply(f, &fr[2], fr[2].msg, NULL, 0));
  sem_wait(&g_in_callback);
  FCHECK(f, fake_reply(f, &fr[0], fr[0].msg, NULL, 0));
  sem_post(&g_read);
  sem_wait(&g_sent);
  bool held = socket_empty(f);
  sem_post(&g_peeked);
  FCHECK(f, held);
  FCHECK(f, fake_read(f, &fr[3]));  // the reader wrote it, taking B1's reply
  FCHECK(f, fake_reply(f, &fr[1], fr[1].msg, NULL, 0));
  FCHECK(f, fake_reply(f, &fr[3], fr[3].msg, NULL, 0));
  for (int i = 0; i < 4; ++i) frame_free(&fr[i]);
  script_echo(f);
}

static void test_batched_send_replies_unread(void** state) {
  sems_init();
  sem_init(&g_in_callback, 0, 0);
  sem_init(&g_release, 0, 0);
  fake_t f = {0};
  fake_start(&f, script_batched_replies_unread);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  // No batched reply taken yet: the window alone holds nothing.
  cw_client_options_t o = {.batch_window_us = WIDE_WINDOW_US};
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f.path, &o, &c));
  send_batched_ping(c, "B1", &rec);
  send_batched_ping(c, "B2", &rec);
  assert_ok(send_ping(c, "P", block_reader_done, &rec, NULL));
  sem_wait(&g_read);  // B1's reply is in the socket, unread
  send_batched_ping(c, "B3", &rec);
  sem_post(&g_sent);
  sem_wait(&g_peeked);
  sem_post(&g_release);
  finish_batching(c, &f, &rec, 4);
  sem_destroy(&g_in_callback);
  sem_destroy(&g_release);
}

// Held frames whose replies do not come go out by the flusher, one batch
// window (50 ms) after the hold.
static void test_batched_send_flusher(void** state) { batched_unanswered(4, 50 * 1000); }

// Several threads share one client; the peer echoes.

// ---- Behind another thread's write ---------------------------------------------------------

#define BIG_PING (4u << 20)  // more than the socket's buffers hold
static _Atomic bool g_peer_reading;

// Reads nothing until the test says its small sends returned (or 60 s), then
// the big PING and the small ones, in id order.
static void script_behind_writer(fake_t* f) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 60;
  sem_timedwait(&g_sent, &ts);
  atomic_store(&g_peer_reading, true);
  frame_t fr[4];
  for (int i = 0; i < 4; ++i) FCHECK(f, fake_read(f, &fr[i]) && fr[i].h.type == CW_MSG_PING);
  bool ok = ((const Causeway__V1__Ping*)fr[0].msg)->data.len == BIG_PING;
  for (int i = 1; i < 4; ++i) ok = ok && fr[i].h.request_id == fr[0].h.request_id + (uint64_t)i;
  reply_rest_and_echo(f, fr, 0, 4);
  FCHECK(f, ok);
}

static void* big_ping_main(void* arg) {
  cw_client_t* c = arg;
  char* data = malloc(BIG_PING + 1);
  memset(data, 'x', BIG_PING);
  data[BIG_PING] = '\0';
  uint64_t id = 0;
  cw_status_t s = send_ping(c, data, NULL, NULL, &id);
  if (!s) s = cw_client_wait(c, id, NULL, NULL);
  free(data);
  return s;  // NULL when OK
}

// A small frame sent while another thread's write cannot finish (the peer
// reads nothing) joins the write buffer and returns at once; the writer
// sends it after its own frame, in id order.
static void test_send_behind_blocked_writer(void** state) {
  sems_init();
  atomic_store(&g_peer_reading, false);
  fake_t f = {0};
  fake_start(&f, script_behind_writer);
  cw_client_t* c = connect_ok(&f);
  int small = 64 * 1024;  // far below the big frame, whatever the host's default
  assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  pthread_t big;
  assert_int_equal(pthread_create(&big, NULL, big_ping_main, c), 0);
  bool writing = false;
  for (int ms = 0; !writing && ms < 60000; ++ms) {
    pthread_mutex_lock(&c->write_mu);
    writing = c->writing;
    pthread_mutex_unlock(&c->write_mu);
    if (!writing) usleep(1000);
  }
  if (!writing) {
    sem_post(&g_sent);  // lets the peer go on
    fail_msg("the big PING's write never started");
  }
  uint64_t ids[3];
  for (int i = 0; i < 3; ++i) assert_ok(send_ping(c, "small", NULL, NULL, &ids[i]));
  bool early = !atomic_load(&g_peer_reading);
  sem_post(&g_sent);
  assert_true(early);  // returned while the big frame was still unread
  for (int i = 0; i < 3; ++i) assert_ok(cw_client_wait(c, ids[i], NULL, NULL));
  void* st = NULL;
  pthread_join(big, &st);
  assert_ok((cw_status_t)st);
  cw_client_release(c);
  fake_join(&f);
  sems_destroy();
}

// ---- Several threads -----------------------------------------------------------------------

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

// A flush waits for everything outstanding and is woken only once nothing is
// (cw_client_wake); a thread waiting for its own reply meanwhile must still be
// woken by that reply alone. The peer reads three PINGs, answers "mine",
// and answers the other two only after the waiter has returned (g_read), so
// a wake left to the end would never come.
static void script_mine_first(fake_t* f) {
  frame_t fr[3];
  for (int i = 0; i < 3; ++i) FCHECK(f, fake_read(f, &fr[i]) && fr[i].h.type == CW_MSG_PING);
  for (int i = 0; i < 3; ++i) {
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)fr[i].msg;
    if (p->data.len == 4 && !memcmp(p->data.data, "mine", 4)) {
      FCHECK(f, fake_reply(f, &fr[i], fr[i].msg, NULL, 0));
    }
  }
  FCHECK(f, sem_wait(&g_read) == 0);
  for (int i = 0; i < 3; ++i) {
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)fr[i].msg;
    if (p->data.len != 4 || memcmp(p->data.data, "mine", 4)) {
      FCHECK(f, fake_reply(f, &fr[i], fr[i].msg, NULL, 0));
    }
  }
  for (int i = 0; i < 3; ++i) frame_free(&fr[i]);
  script_echo(f);
}

typedef struct {
  cw_client_t* c;
  cw_status_t status;
} flush_run_t;

static void* flush_main(void* arg) {
  flush_run_t* r = arg;
  r->status = cw_client_flush(r->c);
  return NULL;
}

static void test_wait_beside_a_flush(void** state) {
  sems_init();
  fake_t f = {0};
  fake_start(&f, script_mine_first);
  cw_client_t* c = connect_ok(&f);
  assert_ok(send_ping(c, "other-1", NULL, NULL, NULL));
  uint64_t mine = 0;
  assert_ok(send_ping(c, "mine", NULL, NULL, &mine));
  assert_ok(send_ping(c, "other-2", NULL, NULL, NULL));
  flush_run_t run = {.c = c};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, flush_main, &run), 0);
  ProtobufCMessage* reply = NULL;
  assert_ok(cw_client_wait(c, mine, &reply, NULL));  // the others are still unanswered
  const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
  assert_int_equal(p->data.len, 4);
  protobuf_c_message_free_unpacked(reply, NULL);
  sem_post(&g_read);
  pthread_join(t, NULL);
  assert_ok(run.status);  // returned once the other two were answered
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
  sems_destroy();
}

// A LAUNCH packs without being sized first when its bound fits the stack,
// and to the same bytes as protobuf-c's sized pack; one too big for the
// stack is sized and allocated.
static void test_launch_pack_matches_sized(void** state) {
  (void)state;
  uint64_t ids[600];
  for (size_t i = 0; i < 600; ++i) ids[i] = (i % 3) ? UINT64_MAX - i : i;
  Causeway__V1__IdList lists[2];
  Causeway__V1__IdList* ptrs[2] = {&lists[0], &lists[1]};
  for (size_t n = 1; n <= 600; n += 599) {
    for (int i = 0; i < 2; ++i) {
      causeway__v1__id_list__init(&lists[i]);
      lists[i].ids = ids;
      lists[i].n_ids = n;
    }
    uint32_t donate[] = {0, 7};
    Causeway__V1__LaunchRequest r = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
    r.exe_id = 12345;
    r.args = ptrs;
    r.n_args = 1;
    r.outputs = ptrs + 1;
    r.n_outputs = 1;
    r.launch_id = 9;
    r.donate = donate;
    r.n_donate = 2;
    r.seq = UINT64_MAX;
    uint8_t stack[512];
    uint8_t* buf = NULL;
    size_t len = 0;
    assert_null(cw_client_message_pack(&r.base, stack, sizeof(stack), &buf, &len));
    assert_true(n == 1 ? buf == stack : buf != stack);
    size_t want_len = 0;
    uint8_t* want = cw_msg_pack(&r.base, &want_len);
    assert_non_null(want);
    assert_int_equal(len, want_len);
    assert_memory_equal(buf, want, len);
    free(want);
    if (buf != stack) free(buf);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipelined_out_of_order),
      cmocka_unit_test(test_launch_pack_matches_sized),
      cmocka_unit_test(test_deferred_send),
      cmocka_unit_test(test_batched_send_reader),
      cmocka_unit_test(test_batched_send_write_held),
      cmocka_unit_test(test_batched_send_connection_lost),
      cmocka_unit_test(test_batched_send_window),
      cmocka_unit_test(test_batched_send_flusher),
      cmocka_unit_test(test_batched_send_replies_unread),
      cmocka_unit_test(test_send_behind_blocked_writer),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_wait_beside_a_flush),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
