// Unit tests of reconnecting to a restarted controller, against fake peers
// (the client library's): a fake controller that "dies" (closes the
// connection) while a relayed LAUNCH is in flight and then accepts the
// client again on the same socket, and a fake worker.
//
// - the LAUNCH is parked and sent again, with its seq, after SESSION_RESUME
//   (which carries the session's device and executable, in its session id);
//   the client takes the new controller's worker numbering;
// - sent again and refused as a duplicate (the worker had applied it), its
//   outcome is read from its output with AWAIT on the worker;
// - a controller that does not come back within
//   CAUSEWAY_CONTROLLER_RECONNECT_MS fails the parked LAUNCH (its seq filled
//   on the worker) and every later call with the same clear error;
// - a replacement still to join is joined under the new controller's
//   incarnation (it numbers them from 0 again).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_msg.h"
#include "cw_plugin_fill.h"
#include "cw_plugin_health.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_resume.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

#define SESSION 77  // what the fake peer's HELLO reply says

// What the fake controller does with the LAUNCH sent again.
// REUSED: no LAUNCH; the controller dies once the test says so, and comes
// back naming the worker at the address it had (a replacement there), in
// its own numbering (incarnation 0); then answers HEALTH_REJOIN as a real
// controller does (cw_ctl_health.c).
// DOWN_AFTER: as REUSED, at the worker's own address, and right behind the
// resume's answer (in the same write) a WORKER_DOWN for it.
typedef enum { AGAIN_ACK, AGAIN_DUPLICATE, NEVER_BACK, AGAIN_MOVED, REUSED, DOWN_AFTER } again_t;

typedef struct fixture_s {
  fake_t ctrl, worker;
  fake_t replacement;  // REUSED: the worker at the address the lost one had
  fake_t side;         // a filler's own connection to the worker
  int stop_pause_ms;   // fixture_stop: after failing the parked requests
  bool go;             // REUSED: the controller dies (atomic: __atomic_*)
  int64_t rejoin_incarnation;  // REUSED: HEALTH_REJOIN's (-1: none came)
  again_t again;
  cw_plugin_client_t client;
  cw_plugin_worker_t w;
  cw_plugin_device_t device;
  // Seen by the fake peers (their threads write, the test reads after joining).
  uint64_t first_seq, again_seq;
  size_t resume_devices, resume_exes;
  uint64_t hello_session;
  uint64_t awaited;       // the buffer the worker was asked to AWAIT
  uint64_t filler_seq;    // an empty DELETE's seq at the worker
} fixture_t;

static fixture_t* g_fx;  // for the fake peers' scripts

// A second connection on the fake's socket, as a restarted controller would
// take it: accept, answer HELLO.
static bool accept_again(fake_t* f) {
  close(f->fd);
  f->fd = accept(f->listen_fd, NULL, NULL);
  if (f->fd < 0) return false;
  frame_t fr;
  if (!fake_read(f, &fr)) return false;
  g_fx->hello_session = ((Causeway__V1__HelloRequest*)fr.msg)->session_id;
  Causeway__V1__HelloReply r = CAUSEWAY__V1__HELLO_REPLY__INIT;
  r.version = 1;
  r.session_id = SESSION;
  r.max_payload = 1u << 24;
  r.max_bulk = 1ull << 32;
  bool ok = fake_reply(f, &fr, &r.base, NULL, 0);
  frame_free(&fr);
  return ok;
}

// Answers PINGs until a frame of `type` arrives (into *out); false on EOF.
static bool read_until(fake_t* f, uint16_t type, frame_t* out) {
  while (fake_read(f, out)) {
    if (out->h.type == type) return true;
    if (out->h.type == CW_MSG_PING) fake_reply(f, out, out->msg, NULL, 0);
    frame_free(out);
  }
  return false;
}

static void script_controller(fake_t* f) {
  fixture_t* fx = g_fx;
  frame_t fr;
  if (fx->again == REUSED || fx->again == DOWN_AFTER) {
    while (!__atomic_load_n(&fx->go, __ATOMIC_ACQUIRE)) usleep(1000);
  } else {
    FCHECK(f, read_until(f, CW_MSG_LAUNCH, &fr));
    fx->first_seq = ((Causeway__V1__LaunchRequest*)fr.msg)->seq;
    frame_free(&fr);
  }
  if (fx->again == NEVER_BACK) {  // dies, and nothing listens there any more
    close(f->listen_fd);
    f->listen_fd = -1;
    unlink(f->path);
    return;
  }
  FCHECK(f, accept_again(f));  // died (the client saw EOF) and came back
  FCHECK(f, read_until(f, CW_MSG_SESSION_RESUME, &fr));
  const Causeway__V1__SessionResumeRequest* r = (const Causeway__V1__SessionResumeRequest*)fr.msg;
  fx->resume_devices = r->n_devices;
  fx->resume_exes = r->n_executables;
  FCHECK(f, r->n_devices == 1 && !strcmp(r->devices[0]->worker_name, "w0"));
  FCHECK(f, r->n_executables == 1 && r->executables[0]->exe_id == 9);
  FCHECK(f, r->open && !strcmp(r->open->name, "resume-test"));
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.index = 5;  // the new controller's numbering
  wi.name = (char*)"w0";
  wi.address = g_fx->again == AGAIN_MOVED ? (char*)"/nonexistent/replacement.sock"
               : g_fx->again == REUSED    ? g_fx->replacement.path
                                          : g_fx->worker.path;
  wi.incarnation = g_fx->again == AGAIN_MOVED ? 1 : 0;
  Causeway__V1__WorkerInfo* wptr = &wi;
  Causeway__V1__Device dev = CAUSEWAY__V1__DEVICE__INIT;
  Causeway__V1__GlobalDevice gd = CAUSEWAY__V1__GLOBAL_DEVICE__INIT;
  gd.global_id = 0;
  gd.worker_index = 5;
  gd.device = &dev;
  Causeway__V1__GlobalDevice* gptr = &gd;
  Causeway__V1__SessionInfo info = CAUSEWAY__V1__SESSION_INFO__INIT;
  info.session_id = SESSION;
  info.workers = &wptr;
  info.n_workers = 1;
  info.devices = &gptr;
  info.n_devices = 1;
  if (fx->again == DOWN_AFTER) {
    // The reply and the event in one write: the event is read right after.
    int pair[2];
    FCHECK(f, socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    int real = f->fd;
    f->fd = pair[0];
    fake_reply(f, &fr, &info.base, NULL, 0);
    Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
    ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN;
    ev.worker_index = 5;
    ev.message = (char*)"w0 missed its heartbeats after the resume";
    fake_write(f, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0);
    f->fd = real;
    close(pair[0]);
    static uint8_t both[1 << 16];
    ssize_t n = read(pair[1], both, sizeof both);
    close(pair[1]);
    FCHECK(f, n > 0 && write_all(f->fd, both, (size_t)n));
    frame_free(&fr);
    while (fake_read(f, &fr)) {  // PINGs until the client goes
      if (fr.h.type == CW_MSG_PING) fake_reply(f, &fr, fr.msg, NULL, 0);
      frame_free(&fr);
    }
    return;
  }
  fake_reply(f, &fr, &info.base, NULL, 0);
  frame_free(&fr);
  if (fx->again == REUSED) {
    FCHECK(f, read_until(f, CW_MSG_HEALTH_REJOIN, &fr));
    const Causeway__V1__HealthRejoinRequest* rj = (const Causeway__V1__HealthRejoinRequest*)fr.msg;
    fx->rejoin_incarnation = rj->incarnation;
    if (rj->incarnation == wi.incarnation) {
      fake_ack(f, &fr);
    } else {
      char text[128];
      snprintf(text, sizeof(text), "worker w0 (%s) is at incarnation %u, not %u", wi.address,
               wi.incarnation, rj->incarnation);
      fake_error(f, CW_MSG_HEALTH_REJOIN, fr.h.request_id, CW_UNAVAILABLE, text);
    }
    frame_free(&fr);
    while (fake_read(f, &fr)) {  // PINGs until the client goes
      if (fr.h.type == CW_MSG_PING) fake_reply(f, &fr, fr.msg, NULL, 0);
      frame_free(&fr);
    }
    return;
  }
  if (fx->again == AGAIN_MOVED) {  // records a LAUNCH sent again, if any
    while (fake_read(f, &fr)) {
      if (fr.h.type == CW_MSG_LAUNCH) {
        fx->again_seq = ((Causeway__V1__LaunchRequest*)fr.msg)->seq;
        fake_ack(f, &fr);
      } else if (fr.h.type == CW_MSG_PING) {
        fake_reply(f, &fr, fr.msg, NULL, 0);
      }
      frame_free(&fr);
    }
    return;
  }
  FCHECK(f, read_until(f, CW_MSG_LAUNCH, &fr));
  fx->again_seq = ((Causeway__V1__LaunchRequest*)fr.msg)->seq;
  if (fx->again == AGAIN_ACK || fx->again == AGAIN_MOVED) {
    fake_ack(f, &fr);
  } else {
    char text[128];
    snprintf(text, sizeof(text), "LAUNCH with seq %llu " CW_MSG_SEQ_DUPLICATE " 2)",
             (unsigned long long)fx->again_seq);
    fake_error(f, CW_MSG_LAUNCH, fr.h.request_id, CW_INVALID_ARGUMENT, text);
  }
  frame_free(&fr);
  while (fake_read(f, &fr)) {  // PINGs until the client goes
    if (fr.h.type == CW_MSG_PING) fake_reply(f, &fr, fr.msg, NULL, 0);
    frame_free(&fr);
  }
}

static void script_worker(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    if (fr.h.type == CW_MSG_AWAIT) {
      g_fx->awaited = ((Causeway__V1__AwaitRequest*)fr.msg)->buffer_id;
    } else if (fr.h.type == CW_MSG_DELETE) {
      g_fx->filler_seq = ((Causeway__V1__DeleteRequest*)fr.msg)->seq;
    }
    fake_ack(f, &fr);
    frame_free(&fr);
  }
}

static fixture_t* fixture(again_t again, const char* bound_ms) {
  fixture_t* fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  g_fx = fx;
  fx->again = again;
  fx->rejoin_incarnation = -1;
  if (again == REUSED) fake_start(&fx->replacement, script_worker);
  setenv("CAUSEWAY_CONTROLLER_RECONNECT_MS", bound_ms, 1);
  cw_plugin_client_t* c = &fx->client;
  assert_null(cw_settings_initialize(&c->settings, CW_SCOPE_PLUGIN));
  fake_start(&fx->ctrl, script_controller);
  fake_start(&fx->worker, script_worker);
  c->ctrl = connect_ok(&fx->ctrl);
  c->ctrl_address = fx->ctrl.path;
  c->session_id = SESSION;
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.index = 2;
  wi.name = (char*)"w0";
  wi.address = fx->worker.path;
  assert_null(cw_plugin_worker_initialize(&fx->w, c, &wi));
  fx->w.conn = connect_ok(&fx->worker);
  c->workers = &fx->w;
  c->num_workers = 1;
  fx->device.worker = &fx->w;
  c->devices = &fx->device;
  c->num_devices = 1;
  assert_null(cw_plugin_resume_create(c));
  assert_non_null(c->resume);
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.name = (char*)"resume-test";
  assert_null(cw_plugin_resume_set_open(c, &open));
  int32_t devs[1] = {0};
  cw_plugin_resume_exe_added(c, 9, devs, 1, NULL);
  assert_null(cw_plugin_resume_start(c));
  return fx;
}

// Stops the client and joins the fake peers (their records may be read then).
static void fixture_stop(fixture_t* fx) {
  cw_plugin_client_t* c = &fx->client;
  cw_plugin_fill_close(c);  // as cw__client_free
  cw_plugin_resume_stop(c);
  usleep((useconds_t)fx->stop_pause_ms * 1000);
  cw_client_release(c->ctrl);
  cw_plugin_resume_release(c);
  cw_plugin_fill_stop(c);
  cw_client_release(fx->w.conn);
  cw_plugin_worker_deinitialize(&fx->w);
  fake_join(&fx->ctrl);
  fake_join(&fx->worker);
  if (fx->again == REUSED) fake_join(&fx->replacement);
  cw_settings_deinitialize(&c->settings);
  unsetenv("CAUSEWAY_CONTROLLER_RECONNECT_MS");
}

// Sends the relayed LAUNCH (exe 9, output 100) and waits for its completion.
static void launch(fixture_t* fx, rec_t* rec, int timeout_ms) {
  uint64_t out_id = 100;
  Causeway__V1__IdList outs = CAUSEWAY__V1__ID_LIST__INIT;
  outs.ids = &out_id;
  outs.n_ids = 1;
  Causeway__V1__IdList* optr = &outs;
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  req.exe_id = 9;
  req.outputs = &optr;
  req.n_outputs = 1;
  assert_null(cw_plugin_worker_send_ordered(&fx->w, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, rec));
  assert_int_equal(req.seq, 1);
  int64_t end = cw_time_now_ms() + timeout_ms;
  for (;;) {
    pthread_mutex_lock(&rec->mu);
    int calls = rec->calls;
    pthread_mutex_unlock(&rec->mu);
    if (calls) break;
    if (cw_time_now_ms() > end) fail_msg("the LAUNCH was not answered");
    usleep(10 * 1000);
  }
}

static void test_parked_launch_sent_again(void** state) {
  (void)state;
  fixture_t* fx = fixture(AGAIN_ACK, "10000");
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  launch(fx, &rec, 10000);
  assert_int_equal(rec.code, CW_OK);
  assert_int_equal(fx->w.index, 5);  // the new controller's numbering
  // The next compile-like call gets the new connection at once.
  cw_client_t* ctrl = NULL;
  uint64_t gen = 0;
  assert_null(cw_plugin_ctrl_get(&fx->client, &ctrl, &gen));
  assert_int_equal(gen, 1);
  assert_ok(cw_client_ping(ctrl));
  fixture_stop(fx);
  assert_int_equal(fx->first_seq, 1);
  assert_int_equal(fx->again_seq, 1);
  free(fx);
}

static void test_duplicate_reads_outputs(void** state) {
  (void)state;
  fixture_t* fx = fixture(AGAIN_DUPLICATE, "10000");
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  launch(fx, &rec, 10000);
  assert_int_equal(rec.code, CW_OK);
  fixture_stop(fx);
  assert_int_equal(fx->first_seq, 1);
  assert_int_equal(fx->again_seq, 1);  // the same seq
  assert_int_equal(fx->hello_session, SESSION);
  assert_int_equal(fx->resume_devices, 1);
  assert_int_equal(fx->resume_exes, 1);
  assert_int_equal(fx->awaited, 100);  // its outcome came from its output
  assert_int_equal(fx->filler_seq, 0);  // and no filler: the seq was the worker's already
  free(fx);
}

static void test_never_back(void** state) {
  (void)state;
  fixture_t* fx = fixture(NEVER_BACK, "1000");
  fake_start_beside(&fx->side, &fx->worker, script_worker);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  int64_t t0 = cw_time_now_ms();
  launch(fx, &rec, 10000);
  int64_t ms = cw_time_now_ms() - t0;
  fprintf(stderr, "  after %lld ms: %s\n", (long long)ms, rec.message);
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  assert_non_null(strstr(rec.message, "did not come back within 1000 ms "
                                      "(CAUSEWAY_CONTROLLER_RECONNECT_MS)"));
  assert_true(ms >= 900 && ms < 5000);
  // Later calls fail at once with the same error.
  cw_client_t* ctrl = NULL;
  uint64_t gen = 0;
  expect_status(cw_plugin_ctrl_get(&fx->client, &ctrl, &gen), CW_UNAVAILABLE,
                "did not come back within");
  fake_join(&fx->side);  // the filler's own connection, closed once answered
  assert_int_equal(fx->filler_seq, 1);  // the worker's order keeps no hole
  fixture_stop(fx);
  free(fx);
}

// The client destroyed while the controller is away (its relayed LAUNCH
// parked): the LAUNCH fails, and its seq's fill is not sent (the session
// ends). It used to be: a connection of its own was made at destroy, which
// waited out the connect timeout (8 s) for a worker address that takes
// connections and never answers, and so did the destroy.
static void test_destroy_while_away_makes_no_fill_connection(void** state) {
  (void)state;
  fixture_t* fx = fixture(NEVER_BACK, "60000");
  fake_silent_t silent;
  fake_silent_start(&silent);
  // The worker's link stays; a new connection to it would hang.
  char* hanging = strdup(silent.path);
  assert_non_null(hanging);
  free(atomic_exchange(&fx->w.address, hanging));
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  req.exe_id = 9;
  assert_null(cw_plugin_worker_send_ordered(&fx->w, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, &rec));
  usleep(300 * 1000);  // the controller read it and died: parked
  assert_int_equal(rec.calls, 0);
  // The rest of the destroy taking a moment (releasing the controller's
  // connection joins its reader): a fill queued meanwhile would be under way.
  fx->stop_pause_ms = 100;
  fixture_stop(fx);
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_CANCELLED);
  // Nothing connected there (it would have waited out its connect timeout).
  bool connected = fake_silent_stop(&silent);
  free(fx);
  if (connected) fail_msg("the destroy connected to the worker to fill the seq");
}

// The controller came back naming the worker replaced at another address
// (cw__apply_info). The parked LAUNCH, numbered and naming ids in the lost
// worker's epoch, was sent again all the same, and a real controller (the
// resumed session joined to the current incarnations) relayed it to the
// replacement (a review). It fails "was replaced" instead, unsent.
static void test_parked_launch_of_a_replaced_worker(void** state) {
  (void)state;
  fixture_t* fx = fixture(AGAIN_MOVED, "10000");
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  launch(fx, &rec, 10000);
  fixture_stop(fx);
  assert_int_equal(fx->again_seq, 0);  // not sent again
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  assert_non_null(strstr(rec.message, "was replaced: the buffers this LAUNCH names"));
  free(fx);
}

// The worker was replaced at the address it had (a restarted worker on the
// same --listen address: WORKER_UP, incarnation 1), and before the client
// joined the replacement the controller restarted: the new one numbers
// incarnations from 0 again, and names the worker at that address. The
// join must name the new controller's incarnation, which HEALTH_REJOIN
// checks; the old controller's number was refused at every try, and the
// worker stayed unusable for the session.
// Lets the fake controller answer, and waits until the resumed session is
// up (the new connection's generation) with the new numbering applied.
static void resume_and_wait(fixture_t* fx) {
  __atomic_store_n(&fx->go, true, __ATOMIC_RELEASE);
  cw_client_t* ctrl = NULL;
  uint64_t gen = 0;
  for (int i = 0; i < 1000 && gen == 0; ++i) {
    assert_null(cw_plugin_ctrl_get(&fx->client, &ctrl, &gen));
    if (!gen) usleep(10000);
  }
  assert_int_equal(gen, 1);
  assert_int_equal(fx->w.index, 5);
}

// `kind`: what the old controller said of the worker before it went.
static void join_after_resume_at_a_reused_address(Causeway__V1__ClusterEvent__Kind kind) {
  fixture_t* fx = fixture(REUSED, "10000");
  cw_plugin_client_t* c = &fx->client;
  cw_plugin_worker_t* w = &fx->w;
  // The lost worker's address is the replacement's (the same socket path).
  free(w->address);
  w->address = strdup(fx->replacement.path);
  assert_non_null(w->address);
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = kind;
  ev.worker_index = 2;
  ev.incarnation = 1;
  ev.worker_address = fx->replacement.path;
  cw_plugin_health_on_event(c, &ev);
  assert_true(atomic_load(&w->dead));
  resume_and_wait(fx);
  bool joined = cw_plugin_health_revive(w);
  if (!joined) fprintf(stderr, "  the join failed: %s\n", w->dead_reason ? w->dead_reason : "");
  assert_true(joined);
  fixture_stop(fx);
  assert_int_equal(fx->rejoin_incarnation, 0);
  free(fx);
}

static void test_join_after_resume_at_a_reused_address(void** state) {
  (void)state;
  join_after_resume_at_a_reused_address(CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_UP);
}

// The old controller reported the worker down and went before it named a
// replacement: the new one names it alive, and it is joined as one. Before,
// no WORKER_UP ever came and the worker stayed dead for the session.
static void test_join_after_resume_of_a_worker_reported_down(void** state) {
  (void)state;
  join_after_resume_at_a_reused_address(CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN);
}

// The new controller reports the worker down right after it answered the
// resume (the worker missed its heartbeats then): the client hears it, and
// calls on the worker fail instead of going to a dead worker. Until h5 the
// event came while the resume still muted events and was dropped: the
// client counted the worker alive, and no later event said otherwise.
static void test_worker_down_right_after_the_resume(void** state) {
  (void)state;
  fixture_t* fx = fixture(DOWN_AFTER, "10000");
  cw_plugin_client_t* c = &fx->client;
  cw_plugin_worker_t* w = &fx->w;
  atomic_store(&c->ready, true);
  resume_and_wait(fx);
  for (int i = 0; i < 200 && !atomic_load(&w->dead); ++i) usleep(10000);
  assert_true(atomic_load(&w->dead));
  assert_true(atomic_load(&w->worker_down));
  fixture_stop(fx);
  free(fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parked_launch_sent_again),
      cmocka_unit_test(test_duplicate_reads_outputs),
      cmocka_unit_test(test_never_back),
      cmocka_unit_test(test_destroy_while_away_makes_no_fill_connection),
      cmocka_unit_test(test_parked_launch_of_a_replaced_worker),
      cmocka_unit_test(test_join_after_resume_at_a_reused_address),
      cmocka_unit_test(test_join_after_resume_of_a_worker_reported_down),
      cmocka_unit_test(test_worker_down_right_after_the_resume),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
