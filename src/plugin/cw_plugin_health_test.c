// Unit tests for losing workers and the controller, against fake peers (the
// client library's): WORKER_DOWN marks the worker dead and shuts its
// connection; WORKER_UP of a newer incarnation makes the next check
// reconnect to the replacement in this session with its token (HEALTH_REJOIN to the
// controller, seq numbering from 1, a new epoch in which older buffers are
// gone); an older incarnation or another session's worker is ignored; a lost
// controller connection is named; LEASE_CHANGED withdraws the direct-launch
// lease, also when it comes before the workers are set up.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_msg.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_client.h"
#include "cw_plugin_health.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_resume.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

// A client (session 5) with a fake controller and one worker ("worker-0",
// controller index 2, incarnation 1) connected to a fake worker.
typedef struct fixture_s {
  fake_t ctrl, first, replacement;
  cw_plugin_client_t client;
  cw_plugin_worker_t worker;
  cw_plugin_device_t device;  // only its worker is set (for buffers)
} fixture_t;

static int setup(void** state) {
  fixture_t* fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  fake_start(&fx->ctrl, script_echo);
  fake_start(&fx->first, script_echo);
  fx->client.ctrl = connect_ok(&fx->ctrl);
  fx->client.ctrl_address = fx->ctrl.path;
  fx->client.session_id = 5;
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.index = 2;
  wi.incarnation = 1;
  wi.name = "worker-0";
  wi.address = fx->first.path;
  assert_null(cw_plugin_worker_initialize(&fx->worker, &fx->client, &wi));
  fx->client.workers = &fx->worker;
  fx->client.num_workers = 1;
  fx->worker.conn = connect_ok(&fx->first);
  fx->device.worker = &fx->worker;
  *state = fx;
  return 0;
}

static int teardown(void** state) {
  fixture_t* fx = *state;
  cw_client_release(fx->client.ctrl);
  cw_client_release(fx->worker.conn);
  cw_plugin_worker_deinitialize(&fx->worker);  // and the retired connection
  // A connection it waits for that never came: its accept fails (the test failed already).
  if (fx->replacement.serve_again) shutdown(fx->replacement.listen_fd, SHUT_RDWR);
  fake_join(&fx->ctrl);
  fake_join(&fx->first);
  if (fx->replacement.path[0]) fake_join(&fx->replacement);
  free(fx);
  return 0;
}

static void on_event(fixture_t* fx, Causeway__V1__ClusterEvent__Kind kind, uint32_t index,
                     uint32_t incarnation, const char* address, const char* message) {
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = kind;
  ev.worker_index = index;
  ev.incarnation = incarnation;
  ev.worker_address = (char*)(address ? address : "");
  ev.message = (char*)(message ? message : "");
  cw_plugin_health_on_event(&fx->client, &ev);
}

static bool is_dead(const cw_plugin_worker_t* w) {
  return atomic_load_explicit(&w->dead, memory_order_acquire);
}

// Sends a COPY to the worker and waits until it is answered (an error
// would surface in the flush); returns the seq it took.
static uint64_t send_copy(fixture_t* fx) {
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  assert_null(cw_plugin_worker_send(&fx->worker, CW_PLUGIN_ANY_EPOCH, CW_MSG_COPY, &req.base,
                                    &req.seq, NULL, 0, NULL, NULL, NULL));
  assert_ok(cw_client_flush(fx->worker.conn));
  return req.seq;
}

static void test_worker_down(void** state) {
  fixture_t* fx = *state;
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 9, 0, NULL, "not ours");
  assert_false(is_dead(&fx->worker));
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 2, 0, NULL,
           "worker-0 missed its heartbeats");
  assert_true(is_dead(&fx->worker));
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE,
                "is unavailable: worker-0 missed its heartbeats");
  // Its connection was shut: what is sent there fails too.
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  cw_status_t s =
      cw_client_send(fx->worker.conn, CW_MSG_COPY, &req.base, NULL, 0, NULL, NULL, NULL, NULL);
  expect_status(s, CW_UNAVAILABLE, NULL);
}

static void test_replacement_is_rejoined(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;  // the lost worker's: not for its replacement
  assert_int_equal(send_copy(fx), 1);
  assert_int_equal(send_copy(fx), 2);
  cw_plugin_future_t* ready = cw_plugin_future_create_done(cw_ok_status());
  cw_plugin_buffer_t* old = NULL;
  assert_null(cw_plugin_buffer_create(&fx->client, &fx->device, 41, PJRT_Buffer_Type_F32, NULL, 0,
                                      ready, &old));
  assert_null(cw_plugin_buffer_check_epoch(old));

  fake_start(&fx->replacement, script_echo);
  // The session's token, as the first connection's: a replacement with
  // tokens on refused a rejoin that presented none (an audit).
  char token[] = "cw-health-test-token";
  assert_null(cw_plugin_token_fixed(token, &fx->client.token));
  // Announced without a WORKER_DOWN first: the old connection is given up.
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  assert_true(is_dead(&fx->worker));
  // The next check reconnects in this session and tells the controller.
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_false(is_dead(&fx->worker));
  assert_string_equal(fx->worker.address, fx->replacement.path);
  assert_int_equal(fx->replacement.hello_session, 5);
  assert_int_equal(fx->replacement.hello_reattach_key, 0);  // a new worker: not a reattach
  assert_string_equal(fx->replacement.hello_token, token);
  cw_plugin_token_deinitialize(&fx->client.token);
  assert_int_equal(atomic_load(&fx->worker.epoch), 1);
  assert_int_equal(send_copy(fx), 1);  // the replacement numbers from 1
  // A buffer of the lost worker is gone; a new one is fine.
  expect_status(cw_plugin_buffer_check_epoch(old), CW_UNAVAILABLE, "was replaced: buffer 41");
  cw_plugin_buffer_t* fresh = NULL;
  assert_null(cw_plugin_buffer_create(&fx->client, &fx->device, 42, PJRT_Buffer_Type_F32, NULL, 0,
                                      ready, &fresh));
  assert_null(cw_plugin_buffer_check_epoch(fresh));
  cw_plugin_buffer_free(old);
  cw_plugin_buffer_free(fresh);
  cw_plugin_future_release(ready);

  // The same or an older incarnation again changes nothing.
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, "/nowhere", NULL);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 1, "/nowhere", NULL);
  assert_false(is_dead(&fx->worker));
  assert_int_equal(send_copy(fx), 2);
}

// A request checked in the lost worker's epoch never reaches the
// replacement, which never had the ids it names (NOT_FOUND there): refused
// under send_mu, so also when another thread reconnected between the check
// and the send.
static void test_request_of_the_lost_epoch_is_refused(void** state) {
  fixture_t* fx = *state;
  cw_plugin_future_t* ready = cw_plugin_future_create_done(cw_ok_status());
  cw_plugin_buffer_t* old = NULL;
  assert_null(cw_plugin_buffer_create(&fx->client, &fx->device, 41, PJRT_Buffer_Type_F32, NULL, 0,
                                      ready, &old));
  fake_start(&fx->replacement, script_echo);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  assert_true(is_dead(&fx->worker));
  // Another thread's next request reconnects.
  assert_int_equal(cw_plugin_worker_epoch(&fx->worker), 1);
  assert_false(is_dead(&fx->worker));
  Causeway__V1__CopyRequest copy = CAUSEWAY__V1__COPY_REQUEST__INIT;
  expect_status(cw_plugin_worker_send(&fx->worker, old->epoch, CW_MSG_COPY, &copy.base, &copy.seq,
                                      NULL, 0, NULL, NULL, NULL),
                CW_UNAVAILABLE, "was replaced: the buffers this COPY names lived on the lost");
  Causeway__V1__LaunchRequest launch = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  expect_status(cw_plugin_worker_send_batched(&fx->worker, old->epoch, true, CW_MSG_LAUNCH,
                                              &launch.base, &launch.seq, NULL, NULL),
                CW_UNAVAILABLE, "was replaced: the buffers this LAUNCH names");
  cw_plugin_worker_delete(&fx->worker, old->epoch, old->id, 0);
  // None of them took a seq: the replacement's numbering starts at 1.
  assert_int_equal(send_copy(fx), 1);
  cw_plugin_buffer_free(old);
  cw_plugin_future_release(ready);
}

// A replaced connection is released (socket, eventfd, threads) once it has
// been retired for the grace period, at a later reconnection: it used to
// stay until the client went, 2 descriptors and a thread per replacement.
static void test_retired_connections_are_released(void** state) {
  fixture_t* fx = *state;
  fx->worker.retire_grace_ms = 1;
  fake_start(&fx->replacement, script_echo);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_int_equal(cw_plugin_health_retired_open(&fx->worker), 1);  // the first connection
  usleep(5000);
  fake_t second;
  memset(&second, 0, sizeof(second));
  fake_start(&second, script_echo);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 3, second.path, NULL);
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_string_equal(fx->worker.address, second.path);
  // The first one was past its grace: released; the replacement's is retired.
  assert_int_equal(cw_plugin_health_retired_open(&fx->worker), 1);
  assert_int_equal(send_copy(fx), 1);
  cw_client_release(fx->worker.conn);
  fx->worker.conn = NULL;
  fake_join(&second);
}

static void test_unreachable_replacement(void** state) {
  fixture_t* fx = *state;
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 2, 0, NULL, "gone");
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, "/nonexistent/w.sock", NULL);
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE,
                "its replacement at /nonexistent/w.sock cannot be reached");
  assert_true(is_dead(&fx->worker));
}

// The seqs of the empty DELETEs (fillers) a reattached worker got, in order.
static pthread_mutex_t filled_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t filled[16];
static size_t num_filled;

static void script_record_fillers(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    if (fr.h.type == CW_MSG_DELETE && !((Causeway__V1__DeleteRequest*)fr.msg)->n_ids) {
      pthread_mutex_lock(&filled_mu);
      if (num_filled < 16) filled[num_filled++] = ((Causeway__V1__DeleteRequest*)fr.msg)->seq;
      pthread_mutex_unlock(&filled_mu);
    }
    bool ok = fake_ack(f, &fr);
    frame_free(&fr);
    if (!ok) break;
  }
}

// Our link to the worker fails as the watchdog reports it (the worker's
// address named), the controller says nothing: the worker may be fine.
static void lose_link(fixture_t* fx) {
  cw_client_shutdown(fx->worker.conn);  // as the watchdog breaks it
  char msg[256];
  snprintf(msg, sizeof(msg), "no answer from %s for 3001 ms, not even its keepalive: it is hung "
           "or unreachable (the client waits 3000 ms)", fx->worker.address);
  cw_status_free(cw_plugin_worker_map_error(&fx->worker,
                                            cw_make_status(CW_UNAVAILABLE, "%s", msg)));
  assert_true(is_dead(&fx->worker));
}

// The worker "moves" to `path` (the same worker once the path heals: a fake
// peer cannot listen twice on one socket).
static void same_worker_at(fixture_t* fx, const char* path) {
  free(fx->worker.address);  // the first connection, retired later, names its own
  fx->worker.address = strdup(path);
  assert_non_null(fx->worker.address);
}

// A lost link, the worker's session alive (the same life, session_key): the
// next use after the path heals connects again in the session, fills the
// seqs the worker never got before anything new (not a relayed request's
// still unanswered), and goes on in the same epoch (buffers made before
// still work); tried at most once a second.
static void test_lost_link_is_reattached(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;
  for (int i = 0; i < 4; ++i) send_copy(fx);  // seqs 1..4; the worker got 1 only
  // 3 went through the controller, unanswered yet: it may still come.
  fx->worker.relayed_seqs = malloc(sizeof(*fx->worker.relayed_seqs));
  assert_non_null(fx->worker.relayed_seqs);
  fx->worker.relayed_seqs[0].epoch = 0;
  fx->worker.relayed_seqs[0].seq = 3;
  fx->worker.n_relayed_seqs = fx->worker.cap_relayed_seqs = 1;
  cw_plugin_future_t* ready = cw_plugin_future_create_done(cw_ok_status());
  cw_plugin_buffer_t* old = NULL;
  assert_null(cw_plugin_buffer_create(&fx->client, &fx->device, 41, PJRT_Buffer_Type_F32, NULL, 0,
                                      ready, &old));
  lose_link(fx);
  // Still cut: the attempt fails, the link's error stays the reason.
  same_worker_at(fx, "/nonexistent/w.sock");
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE, "not even its keepalive");
  assert_true(is_dead(&fx->worker));
  fx->replacement.session_key_reply = 9;
  fx->replacement.seq_next_reply = 2;
  pthread_mutex_lock(&filled_mu);
  num_filled = 0;
  pthread_mutex_unlock(&filled_mu);
  fake_start(&fx->replacement, script_record_fillers);
  same_worker_at(fx, fx->replacement.path);
  // Healed, but within a second of the last attempt: not tried yet.
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE, "not even its keepalive");
  fx->worker.reattach_after_ms = 0;  // a second later
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_false(is_dead(&fx->worker));
  assert_int_equal(fx->replacement.hello_session, 5);
  // The HELLO named the life it had: the worker closes the lost link first.
  assert_int_equal(fx->replacement.hello_reattach_key, 9);
  assert_int_equal(atomic_load(&fx->worker.epoch), 0);
  assert_null(cw_plugin_buffer_check_epoch(old));
  assert_int_equal(send_copy(fx), 5);  // numbering goes on
  pthread_mutex_lock(&filled_mu);
  assert_int_equal(num_filled, 2);  // not 3: the relayed one fills its own
  assert_int_equal(filled[0], 2);
  assert_int_equal(filled[1], 4);
  pthread_mutex_unlock(&filled_mu);
  cw_plugin_buffer_free(old);
  cw_plugin_future_release(ready);
}

// The path heals: the same worker (the same life of the session, which
// applies seq 2 next) answers at the replacement's path running `script`, and
// a reattach may be tried now.
static void heal_same_life(fixture_t* fx, void (*script)(fake_t*)) {
  fx->replacement.session_key_reply = 9;
  fx->replacement.seq_next_reply = 2;
  fake_start(&fx->replacement, script);
  same_worker_at(fx, fx->replacement.path);
  fx->worker.reattach_after_ms = 0;
}

// An error of the lost connection reported after the reattach (a reset is
// reported by its reader a little later; a request on it failing last) names
// the same address: it fails that request only, and the healed link stays.
static void test_old_links_late_error_keeps_the_new_link(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;
  send_copy(fx);
  cw_client_t* old = fx->worker.conn;
  lose_link(fx);
  heal_same_life(fx, script_echo);
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_ptr_not_equal(fx->worker.conn, old);
  char msg[512];
  snprintf(msg, sizeof(msg), "connection to %s lost: Connection reset by peer", fx->worker.address);
  cw_status_t s = cw_plugin_worker_map_error(&fx->worker, cw_make_status(CW_UNAVAILABLE, "%s", msg));
  expect_status(s, CW_UNAVAILABLE, "worker worker-0 (");
  assert_false(is_dead(&fx->worker));
  assert_false(atomic_load(&fx->worker.link_lost));
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_int_equal(send_copy(fx), 2);
  // The new link's own loss still counts.
  cw_client_shutdown(fx->worker.conn);
  cw_status_free(cw_plugin_worker_map_error(&fx->worker, cw_make_status(CW_UNAVAILABLE, "%s", msg)));
  assert_true(is_dead(&fx->worker));
  assert_true(atomic_load(&fx->worker.link_lost));
}

// Reachable again, but the session there is another life (the worker
// restarted at its address, or the session ended and was made again): the
// arrays are gone. A controller that restarted meanwhile, which the worker
// registered with afresh, never names it a replacement (WORKER_UP), so the
// same call joins it as one: a new connection in the session (no reattach
// key), HEALTH_REJOIN, a new epoch and seqs from 1. Until session 48 the
// worker stayed dead for the session ("start the job again"), and a JAX step
// compiled before never ran again (the soak: controller and worker killed
// together, the worker restarted at its address).
static void test_another_life_at_the_address_is_joined(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;
  send_copy(fx);
  cw_plugin_future_t* ready = cw_plugin_future_create_done(cw_ok_status());
  cw_plugin_buffer_t* old = NULL;
  assert_null(cw_plugin_buffer_create(&fx->client, &fx->device, 41, PJRT_Buffer_Type_F32, NULL, 0,
                                      ready, &old));
  lose_link(fx);
  fx->replacement.session_key_reply = 10;
  fx->replacement.seq_next_reply = 1;
  fx->replacement.serve_again = 1;  // the reattach's connection, then the join's
  fake_start(&fx->replacement, script_echo);
  same_worker_at(fx, fx->replacement.path);
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_false(is_dead(&fx->worker));
  assert_string_equal(fx->worker.address, fx->replacement.path);
  assert_null(fx->worker.next_address);
  assert_int_equal(fx->replacement.hello_reattach_key, 0);  // the join's HELLO
  assert_int_equal(fx->worker.session_key, 10);
  assert_int_equal(atomic_load(&fx->worker.epoch), 1);
  assert_int_equal(send_copy(fx), 1);
  expect_status(cw_plugin_buffer_check_epoch(old), CW_UNAVAILABLE, "buffer 41");
  cw_plugin_buffer_free(old);
  cw_plugin_future_release(ready);
}

// A worker the controller declared down is not reattached, even if its
// connection failed first (only a replacement revives it).
static void test_worker_down_is_not_reattached(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;
  lose_link(fx);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 2, 0, NULL, "missed heartbeats");
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE, "not even its keepalive");
  assert_int_equal(fx->worker.reattach_after_ms, 0);  // never tried
}

typedef struct attempt_s {
  fixture_t* fx;
  cw_status_t status;
  bool done;  // atomic (__atomic_*): the check returned
} attempt_t;

static void* attempt_main(void* arg) {
  attempt_t* a = arg;
  a->status = cw_plugin_worker_check(&a->fx->worker);
  __atomic_store_n(&a->done, true, __ATOMIC_RELEASE);
  return NULL;
}

// Waits (bounded) until f has read a HELLO.
static void wait_for_hello(fake_t* f) {
  for (int i = 0; i < 3000 && !__atomic_load_n(&f->hello_session, __ATOMIC_ACQUIRE); ++i) {
    usleep(10000);
  }
  assert_int_equal(__atomic_load_n(&f->hello_session, __ATOMIC_ACQUIRE), 5);
}

// A replacement announced (incarnation 2) and a join of it on thread *t
// waiting for its HELLO reply (held until hello_hold goes false).
static void start_held_revive(fixture_t* fx, attempt_t* a, pthread_t* t) {
  atomic_store(&fx->replacement.hello_hold, true);
  fake_start(&fx->replacement, script_echo);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  *a = (attempt_t){fx, NULL, false};
  assert_int_equal(pthread_create(t, NULL, attempt_main, a), 0);
  wait_for_hello(&fx->replacement);
}

// The calls other threads make on a worker being joined (a check, a delete
// from JAX's garbage collection, a send): each fails at once, UNAVAILABLE
// (its message containing `want`, when given).
static void expect_other_calls_fail(cw_plugin_worker_t* w, const char* want) {
  expect_status(cw_plugin_worker_check(w), CW_UNAVAILABLE, want);
  cw_plugin_worker_delete(w, 0, 77, 16);
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  expect_status(cw_plugin_worker_send(w, CW_PLUGIN_ANY_EPOCH, CW_MSG_COPY, &req.base, &req.seq,
                                      NULL, 0, NULL, NULL, NULL),
                CW_UNAVAILABLE, want);
}

// Joining a replacement whose HELLO is not answered yet (an outage of its
// address) holds up no other call on the worker: they fail at once, deletes
// from JAX's garbage collection included, and the join completes once it is
// answered. Until h1 the connect was under send_mu: the calls waited out its
// timeout (8 s), and came back only after the attempt.
static void test_revive_does_not_hold_up_other_calls(void** state) {
  fixture_t* fx = *state;
  send_copy(fx);
  attempt_t a;
  pthread_t t;
  start_held_revive(fx, &a, &t);
  expect_other_calls_fail(&fx->worker, NULL);
  // They returned while the attempt still waits for its HELLO reply (held
  // until just below): calls that waited for it would come back after it.
  bool first = !__atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
  atomic_store(&fx->replacement.hello_hold, false);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_true(first);
  assert_null(a.status);
  assert_false(is_dead(&fx->worker));
  assert_false(fx->worker.connecting);
  assert_string_equal(fx->worker.address, fx->replacement.path);
  assert_int_equal(atomic_load(&fx->worker.epoch), 1);
  assert_int_equal(send_copy(fx), 1);  // the replacement numbers from 1
}

typedef struct other_calls_s {
  fixture_t* fx;
  bool done;  // atomic (__atomic_*)
} other_calls_t;

// Calls on the worker that must fail at once while it is being joined.
static void* other_calls_main(void* arg) {
  other_calls_t* o = arg;
  expect_other_calls_fail(&o->fx->worker, NULL);
  __atomic_store_n(&o->done, true, __ATOMIC_RELEASE);
  return NULL;
}

// A join whose HELLO was answered waits for a controller being reconnected
// (up to CAUSEWAY_CONTROLLER_RECONNECT_MS) before it can send HEALTH_REJOIN.
// It waits with send_mu let go: other calls on the worker fail at once
// meanwhile. Until session 46 it waited under send_mu, and they waited too.
static void test_revive_waits_for_the_controller_off_the_send_lock(void** state) {
  fixture_t* fx = *state;
  cw_plugin_client_t* c = &fx->client;
  setenv("CAUSEWAY_CONTROLLER_RECONNECT_MS", "60000", 1);
  setenv("CAUSEWAY_WORKER_LINK_TIMEOUT_MS", "0", 1);  // as the other tests' (zeroed) settings
  assert_null(cw_settings_initialize(&c->settings, CW_SCOPE_PLUGIN));
  assert_null(cw_plugin_resume_create(c));
  assert_non_null(c->resume);
  // The controller connection is lost, and nobody reconnects it (the
  // resume thread is not started).
  cw_status_t lost = cw_make_status(CW_UNAVAILABLE, "connection to %s lost: test", fx->ctrl.path);
  assert_true(cw_plugin_ctrl_retry(c, 0, lost));
  cw_status_free(lost);
  fake_start(&fx->replacement, script_echo);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  attempt_t a = {fx, NULL, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, attempt_main, &a), 0);
  wait_for_hello(&fx->replacement);
  other_calls_t o = {fx, false};
  pthread_t ot;
  assert_int_equal(pthread_create(&ot, NULL, other_calls_main, &o), 0);
  for (int i = 0; i < 1000 && !__atomic_load_n(&o.done, __ATOMIC_ACQUIRE); ++i) usleep(10000);
  bool first = __atomic_load_n(&o.done, __ATOMIC_ACQUIRE);
  bool joining = !__atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
  cw_plugin_resume_stop(c);  // the join's wait ends: the client is going
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(pthread_join(ot, NULL), 0);
  assert_true(first);
  assert_true(joining);
  expect_status(a.status, CW_UNAVAILABLE, NULL);
  assert_true(is_dead(&fx->worker));
  assert_false(fx->worker.connecting);
  // (Read, not checked: a check would try to join again.)
  assert_non_null(strstr(fx->worker.dead_reason, "rejoining its replacement at"));
  assert_non_null(strstr(fx->worker.dead_reason, "the client is being destroyed"));
  cw_plugin_resume_release(c);
  cw_settings_deinitialize(&c->settings);
  unsetenv("CAUSEWAY_CONTROLLER_RECONNECT_MS");
  unsetenv("CAUSEWAY_WORKER_LINK_TIMEOUT_MS");
}

// Plays a resumed controller naming another address for the worker under
// the incarnation being joined (cw_plugin_resume.c's cw__apply_info), while
// the join waits for HEALTH_REJOIN's answer.
static void rename_during_rejoin(void* user, uint32_t type) {
  fixture_t* fx = user;
  if (type != CW_MSG_HEALTH_REJOIN) return;
  cw_plugin_worker_t* w = &fx->worker;
  pthread_mutex_lock(&w->mu);
  free(w->next_address);
  w->next_address = strdup("/elsewhere/w.sock");
  w->next_incarnation = 2;
  pthread_mutex_unlock(&w->mu);
}

// The join completes, but the worker was named at another address under the
// same incarnation meanwhile: that address is kept for the next call, and
// the worker is dead until it is joined. Until session 46 the join forgot
// it (it cleared whatever address that incarnation named) and counted the
// worker alive at the old one.
static void test_address_named_during_rejoin_is_kept(void** state) {
  fixture_t* fx = *state;
  fake_start(&fx->replacement, script_echo);
  __atomic_store_n(&fx->ctrl.before_ack_user, fx, __ATOMIC_RELEASE);
  __atomic_store_n(&fx->ctrl.before_ack, rename_during_rejoin, __ATOMIC_RELEASE);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE, "worker replaced");
  __atomic_store_n(&fx->ctrl.before_ack, NULL, __ATOMIC_RELEASE);
  assert_true(is_dead(&fx->worker));
  pthread_mutex_lock(&fx->worker.mu);
  assert_non_null(fx->worker.next_address);
  assert_string_equal(fx->worker.next_address, "/elsewhere/w.sock");
  pthread_mutex_unlock(&fx->worker.mu);
}

// The controller reports the replacement down while we wait for its HELLO
// reply (it died at once): the join gives up and the worker stays dead
// (until h1 the DOWN was overwritten and the dead replacement joined).
static void test_worker_down_during_revive(void** state) {
  fixture_t* fx = *state;
  cw_client_t* old = fx->worker.conn;
  attempt_t a;
  pthread_t t;
  start_held_revive(fx, &a, &t);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 2, 0, NULL, "missed heartbeats");
  atomic_store(&fx->replacement.hello_hold, false);
  assert_int_equal(pthread_join(t, NULL), 0);
  expect_status(a.status, CW_UNAVAILABLE, NULL);
  assert_true(is_dead(&fx->worker));
  assert_ptr_equal(fx->worker.conn, old);
  assert_int_equal(atomic_load(&fx->worker.epoch), 0);
}

// Plays the controller's WORKER_DOWN for the worker being joined, handled by
// the reader right after HEALTH_REJOIN's answer and before the joining thread
// goes on.
static void down_during_rejoin(void* user, uint32_t type) {
  fixture_t* fx = user;
  if (type != CW_MSG_HEALTH_REJOIN) return;
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 2, 0, NULL, "missed heartbeats");
}

// The replacement is reported down while HEALTH_REJOIN is answered: the join
// gives up, and the worker stays down (worker_down), so that a resumed
// controller naming it alive has it joined again (cw_plugin_resume.c). Until
// h5 the join cleared worker_down after the event had set it: the worker was
// dead with neither worker_down nor link_lost, which a resume never revives.
static void test_worker_down_during_rejoin_stays_down(void** state) {
  fixture_t* fx = *state;
  fake_start(&fx->replacement, script_echo);
  __atomic_store_n(&fx->ctrl.before_ack_user, fx, __ATOMIC_RELEASE);
  __atomic_store_n(&fx->ctrl.before_ack, down_during_rejoin, __ATOMIC_RELEASE);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 2, fx->replacement.path, NULL);
  expect_status(cw_plugin_worker_check(&fx->worker), CW_UNAVAILABLE,
                "reported it down while we joined it");
  __atomic_store_n(&fx->ctrl.before_ack, NULL, __ATOMIC_RELEASE);
  assert_true(is_dead(&fx->worker));
  assert_true(atomic_load(&fx->worker.worker_down));
}

// A reattach whose connect hangs (the path still drops packets: HELLO never
// answered) holds up no other call on the worker: they fail at once with the
// link's error (until h3 they waited on send_mu out the connect timeout,
// 8 s), deletes from JAX's garbage collection included.
static void test_reattach_does_not_hold_up_other_calls(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;
  send_copy(fx);
  lose_link(fx);
  fx->replacement.hello_silent = true;
  fake_start(&fx->replacement, NULL);
  same_worker_at(fx, fx->replacement.path);
  attempt_t a = {fx, NULL, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, attempt_main, &a), 0);
  for (int i = 0; i < 3000 && !__atomic_load_n(&fx->replacement.hello_session, __ATOMIC_ACQUIRE);
       ++i) {
    usleep(10000);
  }
  assert_int_equal(__atomic_load_n(&fx->replacement.hello_session, __ATOMIC_ACQUIRE), 5);
  expect_other_calls_fail(&fx->worker, "not even its keepalive");
  // They returned while the attempt still waits for its HELLO (it ends only
  // below, or at the connect timeout): calls that waited for it would have
  // come back only after it.
  pthread_mutex_lock(&fx->worker.send_mu);
  bool still = fx->worker.connecting;  // guarded by send_mu
  pthread_mutex_unlock(&fx->worker.send_mu);
  assert_true(still);
  // The path stays cut: the attempt fails (its retry finds no socket), the
  // worker stays dead.
  unlink(fx->replacement.path);
  shutdown(__atomic_load_n(&fx->replacement.fd, __ATOMIC_ACQUIRE), SHUT_RDWR);
  assert_int_equal(pthread_join(t, NULL), 0);
  expect_status(a.status, CW_UNAVAILABLE, "not even its keepalive");
  assert_true(is_dead(&fx->worker));
  assert_false(fx->worker.connecting);
  assert_true(atomic_load(&fx->worker.link_lost));
}

// A newer replacement is named while we wait for the first one's HELLO
// reply: the join gives up (no HEALTH_REJOIN for a superseded incarnation);
// the next call joins the newer one (until h1 the first one was joined and
// the worker counted alive, the newer one left for no call to join).
static void test_newer_replacement_during_revive(void** state) {
  fixture_t* fx = *state;
  cw_client_t* old = fx->worker.conn;
  attempt_t a;
  pthread_t t;
  start_held_revive(fx, &a, &t);
  fake_t newer;
  memset(&newer, 0, sizeof(newer));
  fake_start(&newer, script_echo);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP, 2, 3, newer.path, NULL);
  atomic_store(&fx->replacement.hello_hold, false);
  assert_int_equal(pthread_join(t, NULL), 0);
  expect_status(a.status, CW_UNAVAILABLE, NULL);
  assert_true(is_dead(&fx->worker));
  assert_ptr_equal(fx->worker.conn, old);
  assert_null(cw_plugin_worker_check(&fx->worker));
  assert_string_equal(fx->worker.address, newer.path);
  assert_int_equal(atomic_load(&fx->worker.epoch), 1);
  assert_int_equal(send_copy(fx), 1);
  cw_client_release(fx->worker.conn);
  fx->worker.conn = NULL;
  fake_join(&newer);
}

// The link lost, the same life of the session at the same address, and a
// reattach on thread *t waiting for that worker's HELLO reply (held until
// hello_hold goes false); returns the connection the link had.
static cw_client_t* start_held_reattach(fixture_t* fx, attempt_t* a, pthread_t* t) {
  fx->worker.session_key = 9;
  send_copy(fx);
  lose_link(fx);
  cw_client_t* old = fx->worker.conn;
  fx->replacement.session_key_reply = 9;
  fx->replacement.seq_next_reply = 2;
  atomic_store(&fx->replacement.hello_hold, true);
  fake_start(&fx->replacement, script_echo);
  same_worker_at(fx, fx->replacement.path);
  *a = (attempt_t){fx, NULL, false};
  assert_int_equal(pthread_create(t, NULL, attempt_main, a), 0);
  for (int i = 0; i < 3000 && !__atomic_load_n(&fx->replacement.hello_session, __ATOMIC_ACQUIRE);
       ++i) {
    usleep(10000);
  }
  return old;
}

// The controller declares the worker down while a reattach waits for its
// HELLO reply (the same life answers late): the reattach gives up and the
// worker stays dead (until h3 it swapped the connection in and revived it).
static void test_worker_down_during_reattach(void** state) {
  fixture_t* fx = *state;
  attempt_t a;
  pthread_t t;
  cw_client_t* old = start_held_reattach(fx, &a, &t);
  on_event(fx, CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN, 2, 0, NULL, "missed heartbeats");
  atomic_store(&fx->replacement.hello_hold, false);
  assert_int_equal(pthread_join(t, NULL), 0);
  expect_status(a.status, CW_UNAVAILABLE, NULL);
  assert_true(is_dead(&fx->worker));
  assert_ptr_equal(fx->worker.conn, old);
  assert_false(fx->worker.connecting);
}

// A restarted controller names a replacement at another address while a
// reattach waits for its HELLO reply (cw_plugin_resume.c sets next_address
// and marks the worker dead): the reattach gives up; the next use joins the
// replacement (until h3 the old worker's connection was swapped in).
static void test_replacement_named_during_reattach(void** state) {
  fixture_t* fx = *state;
  attempt_t a;
  pthread_t t;
  cw_client_t* old = start_held_reattach(fx, &a, &t);
  pthread_mutex_lock(&fx->worker.mu);
  fx->worker.next_address = strdup("/nonexistent/replacement.sock");
  fx->worker.next_incarnation = 2;
  pthread_mutex_unlock(&fx->worker.mu);
  atomic_store(&fx->replacement.hello_hold, false);
  assert_int_equal(pthread_join(t, NULL), 0);
  expect_status(a.status, CW_UNAVAILABLE, NULL);
  assert_true(is_dead(&fx->worker));
  assert_ptr_equal(fx->worker.conn, old);
}

// The ids the worker was told to delete (DELETE.ids), in all.
static _Atomic size_t deleted_ids;

static void script_count_deletes(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    if (fr.h.type == CW_MSG_DELETE) {
      atomic_fetch_add(&deleted_ids, ((Causeway__V1__DeleteRequest*)fr.msg)->n_ids);
    }
    bool ok = fake_ack(f, &fr);
    frame_free(&fr);
    if (!ok) break;
  }
}

// Buffers JAX drops while only the link is lost (more than a batch) are
// deleted on the worker once it is reattached (until h3 those past the
// first 256 were dropped: their arrays stayed on the worker).
static void test_deletes_during_a_lost_link_go_after_the_reattach(void** state) {
  fixture_t* fx = *state;
  fx->worker.session_key = 9;
  send_copy(fx);
  lose_link(fx);
  for (uint64_t id = 1; id <= 600; ++id) cw_plugin_worker_delete(&fx->worker, 0, id, 16);
  atomic_store(&deleted_ids, 0);
  heal_same_life(fx, script_count_deletes);
  assert_null(cw_plugin_worker_check(&fx->worker));
  send_copy(fx);
  assert_int_equal(atomic_load(&deleted_ids), 600);
}

static bool is_direct(const cw_plugin_worker_t* w) {
  return atomic_load_explicit(&w->direct_launch, memory_order_relaxed);
}

// The event as the controller connection's reader delivers it.
static void deliver_lease_event(fixture_t* fx, bool direct) {
  cw_client_options_t o;
  cw_plugin_client_controller_options(&fx->client, &o);
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__LEASE_CHANGED;
  ev.worker_index = 2;
  ev.worker_name = "worker-0";
  ev.direct_launch = direct;
  o.on_event(o.event_user, &ev.base);
}

static void test_lease_withdrawn(void** state) {
  fixture_t* fx = *state;
  atomic_store(&fx->worker.direct_launch, true);
  atomic_store(&fx->client.ready, true);
  deliver_lease_event(fx, true);  // the controller only withdraws: ignored
  assert_true(is_direct(&fx->worker));
  assert_false(atomic_load(&fx->client.leases_withdrawn));
  deliver_lease_event(fx, false);
  assert_false(is_direct(&fx->worker));
  assert_true(atomic_load(&fx->client.leases_withdrawn));
}

static void test_lease_withdrawn_before_ready(void** state) {
  fixture_t* fx = *state;
  // Before the workers are set up the event cannot reach them; it is kept.
  atomic_store(&fx->worker.direct_launch, true);
  deliver_lease_event(fx, false);
  assert_true(is_direct(&fx->worker));
  assert_true(atomic_load(&fx->client.leases_withdrawn));
  // A worker set up after it never takes the lease its WorkerInfo offers...
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.index = 3;
  wi.name = "worker-1";
  wi.address = fx->first.path;
  wi.direct_launch = true;
  cw_plugin_worker_t later;
  memset(&later, 0, sizeof(later));
  assert_null(cw_plugin_worker_initialize(&later, &fx->client, &wi));
  assert_false(is_direct(&later));
  cw_plugin_worker_deinitialize(&later);
  // ...and the ones set up before lose it once set-up is over (what client
  // creation and a resume do after their own step).
  cw_plugin_worker_withdraw_leases(&fx->client);
  assert_false(is_direct(&fx->worker));
}

static void test_controller_lost_is_named(void** state) {
  fixture_t* fx = *state;
  char lost[256];
  snprintf(lost, sizeof(lost), "connection to %s lost: EOF", fx->ctrl.path);
  cw_status_t s = cw_make_status(CW_UNAVAILABLE, "%s", lost);
  assert_true(cw_plugin_health_controller_lost(&fx->client, s));
  s = cw_plugin_health_controller_error(&fx->client, s);
  expect_status(s, CW_UNAVAILABLE, "causeway: the controller at ");
  // A worker's loss the controller relayed names the worker, not it.
  s = cw_make_status(CW_UNAVAILABLE, "worker w (%s) is unavailable", fx->ctrl.path);
  assert_false(cw_plugin_health_controller_lost(&fx->client, s));
  cw_status_t same = cw_plugin_health_controller_error(&fx->client, s);
  assert_ptr_equal(same, s);
  cw_status_free(same);
  assert_false(cw_plugin_health_controller_lost(&fx->client, cw_ok_status()));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_worker_down, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replacement_is_rejoined, setup, teardown),
      cmocka_unit_test_setup_teardown(test_request_of_the_lost_epoch_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_retired_connections_are_released, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreachable_replacement, setup, teardown),
      cmocka_unit_test_setup_teardown(test_revive_does_not_hold_up_other_calls, setup, teardown),
      cmocka_unit_test_setup_teardown(test_revive_waits_for_the_controller_off_the_send_lock, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_address_named_during_rejoin_is_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_down_during_revive, setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_down_during_rejoin_stays_down, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_newer_replacement_during_revive, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lost_link_is_reattached, setup, teardown),
      cmocka_unit_test_setup_teardown(test_old_links_late_error_keeps_the_new_link, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_another_life_at_the_address_is_joined, setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_down_is_not_reattached, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reattach_does_not_hold_up_other_calls, setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_down_during_reattach, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replacement_named_during_reattach, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deletes_during_a_lost_link_go_after_the_reattach, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_controller_lost_is_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lease_withdrawn, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lease_withdrawn_before_ready, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
