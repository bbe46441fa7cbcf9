// Ordering across connections at the worker (cw_worker_conn.c, with
// cw_worker_seq.c), against a real worker through the client library: seq
// order across two connections of one session (held UPLOAD bytes, the empty
// DELETE that fills a hole, duplicates, held requests at shutdown), and flow
// control when more requests wait for their turn than the worker holds.
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cw_worker_test_util.h"

static cw_status_t send_upload(cw_client_t* c, uint64_t id, uint64_t seq, const float* data,
                               uint64_t* out_rid) {
  Causeway__V1__UploadRequest up;
  upload_request_init(&up, id);
  up.seq = seq;
  struct iovec iov = {(void*)data, 6 * sizeof(float)};
  return cw_client_send(c, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, NULL, NULL, out_rid);
}

static cw_status_t send_delete(cw_client_t* c, const uint64_t* ids, size_t n, uint64_t seq,
                               uint64_t* out_rid) {
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.ids = (uint64_t*)ids;
  d.n_ids = n;
  d.seq = seq;
  return cw_client_send(c, CW_MSG_DELETE, &d.base, NULL, 0, NULL, NULL, NULL, out_rid);
}

static void test_seq_across_connections(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &direct));
  uint64_t session = cw_client_session_id(direct);
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, session, &relay));
  assert_int_equal(cw_client_session_id(relay), session);

  // 2 and 3 come first: held (2 with its bytes); 1 is the hole.
  float data[6] = {1, 2, 3, 4, 5, 6};
  uint64_t up_rid = 0, dl_rid = 0, del_rid = 0;
  ASSERT_OK(send_upload(direct, 101, 2, data, &up_rid));
  float got[6] = {0};
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 101;
  dl.seq = 3;
  cw_client_sink_t sink = {.data = got, .capacity = sizeof(got)};
  ASSERT_OK(cw_client_send(direct, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, NULL, NULL,
                           &dl_rid));
  ASSERT_OK(cw_client_ping(direct));  // both arrived and wait
  // The plugin's hole filler after an error on the relaying path.
  ASSERT_OK(send_delete(relay, NULL, 0, 1, &del_rid));
  ASSERT_OK(cw_client_wait(relay, del_rid, NULL, NULL));
  ASSERT_OK(cw_client_wait(direct, up_rid, NULL, NULL));
  uint64_t n = 0;
  ASSERT_OK(cw_client_wait(direct, dl_rid, NULL, &n));
  assert_int_equal(n, sizeof(data));
  assert_memory_equal(got, data, sizeof(data));

  // Duplicates: below next, and one already waiting. (UPLOAD and AWAIT are
  // for clients: the message table refuses them from a controller link.)
  uint64_t rid = 0;
  ASSERT_OK(send_upload(relay, 102, 2, data, &rid));
  assert_code(cw_client_wait(relay, rid, NULL, NULL), CW_PERMISSION_DENIED);
  ASSERT_OK(send_upload(direct, 102, 2, data, &rid));
  assert_code(cw_client_wait(direct, rid, NULL, NULL), CW_INVALID_ARGUMENT);
  ASSERT_OK(send_delete(direct, (uint64_t[]){101}, 1, 6, &del_rid));  // held
  // Once the PING is answered the DELETE above is held: only then is the one
  // on the other connection surely the duplicate (else the two race, and the
  // loser was the one this test waits for: an intermittent hang).
  ASSERT_OK(cw_client_ping(direct));
  ASSERT_OK(send_delete(relay, (uint64_t[]){101}, 1, 6, &rid));
  assert_code(cw_client_wait(relay, rid, NULL, NULL), CW_INVALID_ARGUMENT);
  // seq 0 is unordered: applies at once, whatever waits.
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 101;
  ASSERT_OK(cw_client_call(direct, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL));
  // 4 and 5 release the held DELETE (6).
  ASSERT_OK(send_delete(relay, NULL, 0, 5, &rid));
  ASSERT_OK(send_delete(direct, NULL, 0, 4, &rid));
  ASSERT_OK(cw_client_wait(direct, del_rid, NULL, NULL));
  assert_code(cw_client_call(direct, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);

  // Held at the end (its predecessor never comes): freed with the session.
  ASSERT_OK(send_upload(direct, 103, 9, data, &rid));
  ASSERT_OK(cw_client_ping(direct));
  cw_client_release(relay);
  cw_client_release(direct);  // the held UPLOAD fails UNAVAILABLE here
}

// More requests wait for their seq than max-held-requests (4 here): the worker
// stops reading that connection instead of refusing one (which would leave a
// hole nobody fills), and reads it again once the late predecessor arrived on
// another connection. Before, the sixth was refused RESOURCE_EXHAUSTED.
static void test_seq_flow_control(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &direct));
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, cw_client_session_id(direct),
                       &relay));
  enum { kN = 300 };
  static uint64_t rids[kN + 1];
  float data[6] = {1, 2, 3, 4, 5, 6};
  // 2..kN on one connection (an UPLOAD among them), 1 late on the other.
  for (uint64_t s = 2; s <= kN; ++s) {
    if (s == 50) ASSERT_OK(send_upload(direct, 201, s, data, &rids[s]));
    else ASSERT_OK(send_delete(direct, NULL, 0, s, &rids[s]));
  }
  usleep(200 * 1000);  // they arrived (or wait in the socket)
  ASSERT_OK(send_delete(relay, NULL, 0, 1, &rids[1]));
  ASSERT_OK(cw_client_wait(relay, rids[1], NULL, NULL));
  for (uint64_t s = 2; s <= kN; ++s) ASSERT_OK(cw_client_wait(direct, rids[s], NULL, NULL));
  // The connection is read again: the next one applies at once.
  uint64_t rid = 0;
  ASSERT_OK(send_delete(direct, (uint64_t[]){201}, 1, kN + 1, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));
  cw_client_release(relay);
  cw_client_release(direct);
}

// A client's connection making a session, and the controller's link into it
// (which keeps the session when the client's link goes); the session's id
// and key (its life, HelloReply.session_key).
static void open_with_relay(cw_client_t** direct, cw_client_t** relay, uint64_t* session,
                            uint64_t* key) {
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, direct));
  *session = cw_client_session_id(*direct);
  *key = cw_client_session_key(*direct);
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, *session, relay));
}

// A client's link lost while the controller's link keeps the session: a new
// connection in it hears the same life of the session (HelloReply.session_key)
// and the seq it applies next, fills the holes the lost link left (a held
// request from the lost link passes its turn; its filler is a duplicate), and
// the session's arrays are still there.
static void test_session_outlives_a_lost_client_link(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  uint64_t session = 0, key = 0;
  open_with_relay(&direct, &relay, &session, &key);
  assert_int_not_equal(key, 0);
  assert_int_equal(cw_client_session_seq_next(direct), 0);  // made by this HELLO
  assert_int_equal(cw_client_session_key(relay), key);
  assert_int_equal(cw_client_session_seq_next(relay), 1);

  float data[6] = {1, 2, 3, 4, 5, 6};
  uint64_t rid = 0;
  ASSERT_OK(send_upload(direct, 201, 1, data, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));
  ASSERT_OK(send_upload(direct, 203, 3, data, &rid));  // 2 never arrives: held
  ASSERT_OK(cw_client_ping(direct));
  cw_client_release(direct);  // the link is lost; the relay keeps the session

  cw_client_t* again = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, &again));
  assert_int_equal(cw_client_session_id(again), session);
  assert_int_equal(cw_client_session_key(again), key);
  assert_int_equal(cw_client_session_seq_next(again), 2);
  ASSERT_OK(send_delete(again, NULL, 0, 2, &rid));
  ASSERT_OK(cw_client_wait(again, rid, NULL, NULL));
  ASSERT_OK(send_delete(again, NULL, 0, 3, &rid));
  assert_code(cw_client_wait(again, rid, NULL, NULL), CW_INVALID_ARGUMENT);
  ASSERT_OK(send_upload(again, 204, 4, data, &rid));  // the order moved on
  ASSERT_OK(cw_client_wait(again, rid, NULL, NULL));
  float got[6] = {0};
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 201;  // made before the link was lost
  dl.seq = 5;
  cw_client_sink_t sink = {.data = got, .capacity = sizeof(got)};
  uint64_t n = 0;
  ASSERT_OK(cw_client_send(again, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, NULL, NULL, &rid));
  ASSERT_OK(cw_client_wait(again, rid, NULL, &n));
  assert_int_equal(n, sizeof(data));
  assert_memory_equal(got, data, sizeof(data));
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 203;  // the lost link's held upload never applied
  assert_code(cw_client_call(again, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);

  // Another session is another life.
  cw_client_t* other = NULL;
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &other));
  assert_int_not_equal(cw_client_session_key(other), key);
  cw_client_release(other);
  cw_client_release(again);
  cw_client_release(relay);
}

// A client connection in `session` that reattaches (HelloRequest.
// reattach_session_key `key`).
static cw_status_t reattach_as(int role, uint64_t session, uint64_t key, cw_client_t** out) {
  cw_client_options_t o = {.session_id = session, .peer_name = "cluster-test", .role = role,
                           .reattach_session_key = key};
  return cw_client_connect(g_worker.address, &o, out);
}

// A client whose link the worker still holds open (a partition it never saw
// fail) reattaches: the worker closes that link before it answers, so a
// request still on its way there never applies after the fillers the client
// sends on the new connection, and session_seq_next counts what was read.
// The controller's link stays. Until h1 the old link stayed open: its UPLOAD
// below applied, and the filler of its seq was refused as a duplicate.
static void test_reattach_closes_the_lost_link(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  uint64_t session = 0, key = 0;
  open_with_relay(&direct, &relay, &session, &key);
  float data[6] = {1, 2, 3, 4, 5, 6};
  uint64_t rid = 0;
  ASSERT_OK(send_upload(direct, 301, 1, data, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));

  cw_client_t* again = NULL;
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, key, &again));
  assert_int_equal(cw_client_session_key(again), key);
  assert_int_equal(cw_client_session_seq_next(again), 2);
  // Sent on the lost link after the heal: never read (the send itself may
  // fail or not, as the client has noticed the close or not).
  cw_status_free(send_upload(direct, 302, 2, data, &rid));
  assert_code(cw_client_ping(direct), CW_UNAVAILABLE);
  ASSERT_OK(send_delete(again, NULL, 0, 2, &rid));  // the filler applies
  ASSERT_OK(cw_client_wait(again, rid, NULL, NULL));
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 302;
  assert_code(cw_client_call(again, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);
  aw.buffer_id = 301;  // made before: the session is the same
  ASSERT_OK(cw_client_call(again, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL));
  ASSERT_OK(cw_client_ping(relay));
  cw_client_release(direct);
  cw_client_release(again);
  cw_client_release(relay);
}

// The field from a peer that did not have that life of the session closes
// nothing, and never ends the worker: another session's key, a session the
// worker does not know (a new one is made, as without the field), a
// controller's HELLO, a worker's (PUT) HELLO. A real reattach closes the
// client connections of its own session only.
static void test_reattach_closes_only_its_own_session(void** state) {
  (void)state;
  cw_client_t* a = NULL;
  cw_client_t* a_relay = NULL;
  cw_client_t* b = NULL;
  uint64_t sa = 0, ka = 0;
  open_with_relay(&a, &a_relay, &sa, &ka);
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &b));
  uint64_t sb = cw_client_session_id(b);
  uint64_t kb = cw_client_session_key(b);
  assert_int_not_equal(ka, kb);

  cw_client_t* c = NULL;
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, sa, kb, &c));  // B's key, A's id
  assert_int_equal(cw_client_session_id(c), sa);
  cw_client_release(c);
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, sb, ka, &c));  // A's key, B's id
  cw_client_release(c);
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, sa ^ 0x5a5a5a5a5a5aull, ka, &c));
  assert_int_not_equal(cw_client_session_key(c), ka);  // not A: a session of its own
  assert_int_equal(cw_client_session_seq_next(c), 0);
  cw_client_release(c);
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, ka, &c));
  cw_client_release(c);
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, sa, ka, &c));
  cw_client_release(c);
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_WORKER, sa, ka, &c));
  cw_client_release(c);
  ASSERT_OK(cw_client_ping(a));
  ASSERT_OK(cw_client_ping(b));

  // A's own reattach: A's lost link goes; B and A's controller link stay.
  ASSERT_OK(reattach_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, sa, ka, &c));
  assert_code(cw_client_ping(a), CW_UNAVAILABLE);
  ASSERT_OK(cw_client_ping(b));
  ASSERT_OK(cw_client_ping(a_relay));
  ASSERT_OK(cw_client_ping(c));
  cw_client_release(c);
  cw_client_release(a);
  cw_client_release(b);
  cw_client_release(a_relay);
}

// Every link of a session's life closed (the client's, the controller's)
// while a relayed request numbered in that life waited at the controller;
// the controller's new link makes a new life (seq from 1) and sends it on.
// The worker refuses it ABORTED (LaunchRequest/DeleteRequest.session_life
// names the earlier life) without taking or holding a seq of the new life,
// whose own requests go on from 1; the new life's key is accepted. Before
// h3 the DELETE below took the new life's seq 1 (the client's UPLOAD with
// seq 1 was then a duplicate) and the LAUNCH was held for seq 3.
static void test_relayed_request_of_an_earlier_life_is_refused(void** state) {
  (void)state;
  cw_client_t* direct = NULL;
  cw_client_t* relay = NULL;
  uint64_t session = 0, k1 = 0;
  open_with_relay(&direct, &relay, &session, &k1);
  float data[6] = {1, 2, 3, 4, 5, 6};
  uint64_t rid = 0;
  ASSERT_OK(send_upload(direct, 401, 1, data, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));
  cw_client_release(direct);
  cw_client_release(relay);  // the life ends with its last connection

  // The controller's new link: a new life once the worker saw both close.
  cw_client_t* relay2 = NULL;
  for (int i = 0; i < 500; ++i) {
    ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, session, &relay2));
    if (cw_client_session_key(relay2) != k1) break;
    cw_client_release(relay2);
    relay2 = NULL;
    usleep(10 * 1000);
  }
  assert_non_null(relay2);
  uint64_t k2 = cw_client_session_key(relay2);
  assert_int_not_equal(k2, 0);
  assert_int_equal(cw_client_session_seq_next(relay2), 0);  // made by this HELLO

  // Life 1's seq 1 (an empty DELETE, a filler) would be life 2's seq 1.
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.seq = 1;
  d.session_life = k1;
  ASSERT_OK(cw_client_send(relay2, CW_MSG_DELETE, &d.base, NULL, 0, NULL, NULL, NULL, &rid));
  cw_status_t st = cw_client_wait(relay2, rid, NULL, NULL);
  char want[160];
  snprintf(want, sizeof(want), "DELETE with seq 1 " CW_MSG_SEQ_OTHER_LIFE " %" PRIu64
           " at this worker (its objects are gone); not applied", session);
  assert_non_null(st);
  assert_string_equal(cw_status_message(st), want);
  assert_code(st, CW_ABORTED);

  // Life 1's LAUNCH with seq 3 (ahead of life 2's next): refused at once,
  // not held for seq 3 (a raw link: the old worker never answered).
  int fd = raw_link(session);
  cw_test_launch_t l;
  cw_test_launch_build(&l, 999, (uint64_t[]){401}, 1, 404, 3);
  l.req.session_life = k1;
  send_frame(fd, CW_MSG_LAUNCH, 7, &l.req.base, NULL, 0);
  reply_t r;
  if (!reply_within(fd, 10000, &r)) fail_msg("the earlier life's LAUNCH was held, not refused");
  assert_int_equal(r.h.request_id, 7);
  assert_true(r.h.flags & CW_FRAME_ERROR);
  const Causeway__V1__ErrorReply* er = (const Causeway__V1__ErrorReply*)r.msg;
  assert_int_equal(er->code, CW_ABORTED);
  assert_non_null(strstr(er->message, "LAUNCH with seq 3 " CW_MSG_SEQ_OTHER_LIFE));
  reply_free(&r);

  // Life 2 goes on from 1: the client's direct link (seq 1, 3), the
  // controller's with life 2's key (seq 2).
  ASSERT_OK(connect_as(CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, &direct));
  assert_int_equal(cw_client_session_key(direct), k2);
  assert_int_equal(cw_client_session_seq_next(direct), 1);
  ASSERT_OK(send_upload(direct, 402, 1, data, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));
  d.seq = 2;
  d.session_life = k2;
  ASSERT_OK(cw_client_send(relay2, CW_MSG_DELETE, &d.base, NULL, 0, NULL, NULL, NULL, &rid));
  ASSERT_OK(cw_client_wait(relay2, rid, NULL, NULL));
  ASSERT_OK(send_upload(direct, 403, 3, data, &rid));
  ASSERT_OK(cw_client_wait(direct, rid, NULL, NULL));
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 403;
  ASSERT_OK(cw_client_call(direct, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL));
  aw.buffer_id = 401;  // life 1's array went with it
  assert_code(cw_client_call(direct, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, NULL, NULL),
              CW_NOT_FOUND);
  close(fd);
  cw_client_release(direct);
  cw_client_release(relay2);
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  setenv("CAUSEWAY_MAX_HELD_REQUESTS", "4", 1);  // inherited by the workers
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_seq_across_connections),
      cmocka_unit_test(test_seq_flow_control),
      cmocka_unit_test(test_session_outlives_a_lost_client_link),
      cmocka_unit_test(test_reattach_closes_the_lost_link),
      cmocka_unit_test(test_reattach_closes_only_its_own_session),
      cmocka_unit_test(test_relayed_request_of_an_earlier_life_is_refused),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
