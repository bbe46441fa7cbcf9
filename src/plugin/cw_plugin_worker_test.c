// Unit tests for the client's side of a worker, against fake peers (the
// client library's): dropped buffers' DELETEs are batched into one request
// that takes its seq before the next request (a launch's once 64 wait), a
// full batch goes alone, a
// refused DELETE is surfaced by the next read back (NOT_FOUND is not), a
// request that fails after taking a seq has the seq filled on the worker's
// connection (on one of its own when the controller relayed it), relayed launches share
// writes without holding up the worker's order, and a lost connection
// marks the worker dead with errors that name it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_msg.h"
#include "cw_plugin_client.h"
#include "cw_plugin_fill.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_worker.h"
#include "cw_test_util.h"

#define MAX_SEEN 1024

// A fake worker (or controller) that records every request and acks it,
// but refuses requests of `refuse_type` with `refuse_code`.
typedef struct peer_s {
  fake_t f;  // first: the script gets &peer->f
  pthread_mutex_t mu;
  int n;
  struct {
    uint16_t type;
    uint64_t seq;
    uint64_t life;  // session_life (LAUNCH, DELETE)
    size_t n_ids;  // a DELETE's
    uint64_t first_id;
  } seen[MAX_SEEN];
  uint16_t refuse_type;
  uint32_t refuse_code;
} peer_t;

static void record_frame(peer_t* p, const frame_t* fr) {
  pthread_mutex_lock(&p->mu);
  if (p->n < MAX_SEEN) {
    p->seen[p->n].type = fr->h.type;
    p->seen[p->n].seq = cw_msg_seq(fr->h.type, fr->msg);
    p->seen[p->n].life = cw_msg_session_life(fr->h.type, fr->msg);
    if (fr->h.type == CW_MSG_DELETE) {
      const Causeway__V1__DeleteRequest* d = (const Causeway__V1__DeleteRequest*)fr->msg;
      p->seen[p->n].n_ids = d->n_ids;
      p->seen[p->n].first_id = d->n_ids ? d->ids[0] : 0;
    }
    p->n++;
  }
  pthread_mutex_unlock(&p->mu);
}

static void script_record(fake_t* f) {
  peer_t* p = (peer_t*)f;
  frame_t fr;
  while (fake_read(f, &fr)) {
    record_frame(p, &fr);
    bool ok = fr.h.type == p->refuse_type
                  ? fake_error(f, fr.h.type, fr.h.request_id, p->refuse_code, "refused by the test")
                  : fake_ack(f, &fr);
    frame_free(&fr);
    if (!ok) return;
  }
}

// Waits (up to 5 s) until the peer has seen `n` requests.
static void wait_seen(peer_t* p, int n) {
  for (int i = 0; i < 5000; ++i) {
    pthread_mutex_lock(&p->mu);
    int seen = p->n;
    pthread_mutex_unlock(&p->mu);
    if (seen >= n) return;
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fail_msg("the peer saw fewer than %d requests", n);
}

static void expect_seen(peer_t* p, int i, uint16_t type, uint64_t seq) {
  assert_true(i < p->n);
  assert_string_equal(cw_msg_type_name(p->seen[i].type), cw_msg_type_name(type));
  assert_int_equal(p->seen[i].seq, seq);
}

// A client whose one worker ("worker-0") is connected to the fake `peer`.
typedef struct fixture_s {
  peer_t peer;
  cw_plugin_client_t client;
  cw_plugin_worker_t worker;
} fixture_t;

static int setup(void** state) {
  fixture_t* fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  pthread_mutex_init(&fx->peer.mu, NULL);
  *state = fx;
  return 0;
}

// Starts the fake worker and connects the client's worker to it.
static void connect_worker(fixture_t* fx) {
  fake_start(&fx->peer.f, script_record);
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.name = "worker-0";
  wi.address = fx->peer.f.path;
  assert_null(cw_plugin_worker_initialize(&fx->worker, &fx->client, &wi));
  fx->client.workers = &fx->worker;
  fx->client.num_workers = 1;
  fx->worker.conn = connect_ok(&fx->peer.f);
}

static int teardown(void** state) {
  fixture_t* fx = *state;
  if (fx->worker.conn) cw_client_release(fx->worker.conn);
  if (fx->peer.f.dir[0]) fake_join(&fx->peer.f);  // started
  cw_plugin_worker_deinitialize(&fx->worker);
  pthread_mutex_destroy(&fx->peer.mu);
  free(fx);
  return 0;
}

// Sends a COPY (any ordered request) to the worker and waits for its reply.
static void send_copy(fixture_t* fx, cw_status_code_t expect) {
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  assert_null(cw_plugin_worker_send(&fx->worker, CW_PLUGIN_ANY_EPOCH, CW_MSG_COPY, &req.base,
                                    &req.seq, NULL, 0, NULL, rec_done, &rec));
  assert_ok(cw_client_flush(fx->worker.conn));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, expect);
}

static void test_deletes_go_first_in_one_request(void** state) {
  fixture_t* fx = *state;
  connect_worker(fx);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 11, 0);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 12, 0);
  send_copy(fx, CW_OK);
  wait_seen(&fx->peer, 2);
  expect_seen(&fx->peer, 0, CW_MSG_DELETE, 1);
  assert_int_equal(fx->peer.seen[0].n_ids, 2);
  assert_int_equal(fx->peer.seen[0].first_id, 11);
  expect_seen(&fx->peer, 1, CW_MSG_COPY, 2);
  send_copy(fx, CW_OK);  // nothing batched: no DELETE
  wait_seen(&fx->peer, 3);
  expect_seen(&fx->peer, 2, CW_MSG_COPY, 3);
  assert_int_equal(fx->peer.n, 3);
  assert_null(cw_plugin_worker_take_deferred(&fx->worker));
}

static void test_full_batch_goes_alone(void** state) {
  fixture_t* fx = *state;
  connect_worker(fx);
  for (uint64_t id = 1; id <= 256; ++id)
    cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, id, 0);
  wait_seen(&fx->peer, 1);  // no other request needed
  expect_seen(&fx->peer, 0, CW_MSG_DELETE, 1);
  assert_int_equal(fx->peer.seen[0].n_ids, 256);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 1000, 0);
  send_copy(fx, CW_OK);
  wait_seen(&fx->peer, 3);
  expect_seen(&fx->peer, 1, CW_MSG_DELETE, 2);
  assert_int_equal(fx->peer.seen[1].first_id, 1000);
  expect_seen(&fx->peer, 2, CW_MSG_COPY, 3);
}

// Sends a LAUNCH straight to the worker (batched, as the plugin's launches).
static void send_direct_launch(fixture_t* fx, rec_t* rec) {
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(cw_plugin_worker_send_batched(&fx->worker, CW_PLUGIN_ANY_EPOCH, true, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, rec));
  assert_ok(cw_client_flush(fx->worker.conn));
}

// A chain drops a buffer per launch: batched launches leave the DELETEs
// waiting until 64 do (then the next launch takes them along), and buffers
// holding 1 MiB or more go at once.
static void test_launches_take_deletes_in_batches(void** state) {
  fixture_t* fx = *state;
  connect_worker(fx);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  uint64_t id = 1;
  for (int i = 0; i < 63; ++i) {
    cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, id++, 32);
    send_direct_launch(fx, &rec);
  }
  wait_seen(&fx->peer, 63);
  for (int i = 0; i < 63; ++i) expect_seen(&fx->peer, i, CW_MSG_LAUNCH, (uint64_t)i + 1);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, id++, 32);  // the 64th
  send_direct_launch(fx, &rec);
  wait_seen(&fx->peer, 65);
  expect_seen(&fx->peer, 63, CW_MSG_DELETE, 64);
  assert_int_equal(fx->peer.seen[63].n_ids, 64);
  assert_int_equal(fx->peer.seen[63].first_id, 1);
  expect_seen(&fx->peer, 64, CW_MSG_LAUNCH, 65);
  // Large buffers: no launch needed.
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, id++, 512 << 10);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, id++, 512 << 10);
  wait_seen(&fx->peer, 66);
  expect_seen(&fx->peer, 65, CW_MSG_DELETE, 66);
  assert_int_equal(fx->peer.seen[65].n_ids, 2);
  // One left waiting goes when a waiter is about to sleep.
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, id++, 32);
  cw_plugin_worker_flush_deletes(&fx->worker);
  wait_seen(&fx->peer, 67);
  expect_seen(&fx->peer, 66, CW_MSG_DELETE, 67);
  assert_int_equal(rec.calls, 64);
  assert_int_equal(rec.code, CW_OK);
}

static void test_refused_delete_surfaces_later(void** state) {
  fixture_t* fx = *state;
  fx->peer.refuse_type = CW_MSG_DELETE;
  fx->peer.refuse_code = CW_INTERNAL;
  connect_worker(fx);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 7, 0);
  send_copy(fx, CW_OK);  // nobody waits on the DELETE itself
  cw_status_t s = cw_plugin_worker_take_deferred(&fx->worker);
  expect_status(s, CW_INTERNAL, "worker worker-0");
  s = cw_plugin_worker_take_deferred(&fx->worker);
  assert_null(s);  // surfaced once
}

static void test_not_found_delete_is_no_failure(void** state) {
  fixture_t* fx = *state;
  fx->peer.refuse_type = CW_MSG_DELETE;
  fx->peer.refuse_code = CW_NOT_FOUND;  // gone either way
  connect_worker(fx);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 7, 0);
  send_copy(fx, CW_OK);
  assert_null(cw_plugin_worker_take_deferred(&fx->worker));
}

// A LAUNCH refused on the worker's connection: its seq is filled there.
static void test_refused_ordered_request_is_filled(void** state) {
  fixture_t* fx = *state;
  fx->peer.refuse_type = CW_MSG_LAUNCH;
  fx->peer.refuse_code = CW_INVALID_ARGUMENT;
  connect_worker(fx);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 3, 0);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, true, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, &rec));
  assert_int_equal(req.seq, 2);  // after the batched DELETE's: not a batched launch
  wait_seen(&fx->peer, 3);
  expect_seen(&fx->peer, 0, CW_MSG_DELETE, 1);
  expect_seen(&fx->peer, 1, CW_MSG_LAUNCH, 2);
  expect_seen(&fx->peer, 2, CW_MSG_DELETE, 2);  // the filler
  assert_int_equal(fx->peer.seen[2].n_ids, 0);
  assert_ok(cw_client_flush(fx->worker.conn));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_INVALID_ARGUMENT);
  send_copy(fx, CW_OK);
  wait_seen(&fx->peer, 4);
  expect_seen(&fx->peer, 3, CW_MSG_COPY, 3);
}

// Relayed by the controller, which refuses it: the batched DELETEs went to
// the worker first (not a batched launch), the LAUNCH to the controller, its
// seq filled at the worker on a connection of its own (later seqs sent on
// the first may be held there, which the worker may then not read), in the
// life the LAUNCH was numbered in; that connection closes once answered.
static void test_refused_relayed_request_is_filled(void** state) {
  fixture_t* fx = *state;
  peer_t* ctrl = calloc(1, sizeof(*ctrl));
  peer_t* side = calloc(1, sizeof(*side));
  assert_non_null(ctrl);
  assert_non_null(side);
  pthread_mutex_init(&ctrl->mu, NULL);
  pthread_mutex_init(&side->mu, NULL);
  ctrl->refuse_type = CW_MSG_LAUNCH;
  ctrl->refuse_code = CW_UNAVAILABLE;
  fake_start(&ctrl->f, script_record);
  fx->client.ctrl = connect_ok(&ctrl->f);
  connect_worker(fx);
  fx->client.session_id = 77;
  fx->worker.session_key = 41;
  side->f.session_key_reply = 41;
  fake_start_beside(&side->f, &fx->peer.f, script_record);
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 3, 0);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, &rec));
  wait_seen(ctrl, 1);
  expect_seen(ctrl, 0, CW_MSG_LAUNCH, 2);
  wait_seen(side, 1);
  expect_seen(side, 0, CW_MSG_DELETE, 2);  // the filler
  assert_int_equal(side->seen[0].n_ids, 0);
  assert_int_equal(side->seen[0].life, 41);
  assert_int_equal(side->f.hello_session, fx->client.session_id);
  fake_join(&side->f);  // the client closed it
  assert_ok(cw_client_flush(fx->client.ctrl));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  send_copy(fx, CW_OK);  // the first connection: the DELETEs, then this
  wait_seen(&fx->peer, 2);
  expect_seen(&fx->peer, 0, CW_MSG_DELETE, 1);
  assert_int_equal(fx->peer.seen[0].first_id, 3);
  expect_seen(&fx->peer, 1, CW_MSG_COPY, 3);
  cw_plugin_fill_stop(&fx->client);
  cw_client_release(fx->client.ctrl);
  fake_join(&ctrl->f);
  pthread_mutex_destroy(&ctrl->mu);
  pthread_mutex_destroy(&side->mu);
  free(ctrl);
  free(side);
}

// Joins the client's one worker to the real worker at `address` in session
// `session`, as the plugin does (its options; the life its HELLO gave).
static void join_real_worker(fixture_t* fx, const char* name, const char* address,
                             uint64_t session) {
  fx->client.session_id = session;
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.name = (char*)name;
  wi.address = (char*)address;
  assert_null(cw_plugin_worker_initialize(&fx->worker, &fx->client, &wi));
  fx->client.workers = &fx->worker;
  fx->client.num_workers = 1;
  cw_client_options_t o;
  cw_plugin_client_worker_options(&fx->client, &o);
  cw_client_t* conn = NULL;
  assert_ok(cw_client_connect(address, &o, &conn));
  fx->worker.conn = conn;
  fx->worker.session_key = cw_client_session_key(conn);
}

// Sends DELETE of *id straight to the worker or through the controller,
// expecting it to take `seq`; its answer goes to *rec (initialized here).
static void send_delete_taking(fixture_t* fx, uint64_t* id, bool direct, rec_t* rec,
                               uint64_t seq) {
  *rec = (rec_t){.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = id;
  del.n_ids = 1;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, direct,
                                            CW_MSG_DELETE, &del.base, &del.seq, rec_done, rec));
  assert_int_equal(del.seq, seq);
}

// Sends DELETE of *id through the controller (relayed; it takes seq 1).
static void send_relayed_delete(fixture_t* fx, uint64_t* id, rec_t* rec) {
  send_delete_taking(fx, id, false, rec, 1);
}

// A fake controller that holds the relayed request it reads until `go`,
// then refuses it.
typedef struct {
  peer_t p;  // first: the script gets &peer->p.f
  atomic_bool go;
  atomic_bool go2;  // script_refuse_two_reversed: the first request's refusal
} holding_t;

static void script_refuse_later(fake_t* f) {
  holding_t* h = (holding_t*)f;
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  record_frame(&h->p, &fr);
  while (!atomic_load(&h->go)) usleep(1000);
  bool ok = fake_error(f, fr.h.type, fr.h.request_id, CW_FAILED_PRECONDITION,
                       "refused by the test");
  frame_free(&fr);
  while (ok && fake_read(f, &fr)) frame_free(&fr);
}

// Reads two relayed requests; at `go` refuses the second, at `go2` the first.
static void script_refuse_two_reversed(fake_t* f) {
  holding_t* h = (holding_t*)f;
  frame_t fr[2];
  FCHECK(f, fake_read(f, &fr[0]));
  record_frame(&h->p, &fr[0]);
  FCHECK(f, fake_read(f, &fr[1]));
  record_frame(&h->p, &fr[1]);
  while (!atomic_load(&h->go)) usleep(1000);
  bool ok = fake_error(f, fr[1].h.type, fr[1].h.request_id, CW_FAILED_PRECONDITION,
                       "refused by the test");
  while (ok && !atomic_load(&h->go2)) usleep(1000);
  ok = ok && fake_error(f, fr[0].h.type, fr[0].h.request_id, CW_FAILED_PRECONDITION,
                        "refused by the test");
  frame_free(&fr[0]);
  frame_free(&fr[1]);
  frame_t more;
  while (ok && fake_read(f, &more)) frame_free(&more);
}

// Waits up to 10 s for the client to have sent `n` fills on w's link after
// their own connection was refused.
static void wait_fills_behind(cw_plugin_worker_t* w, uint64_t n) {
  for (int t = 0; t < 1000 && atomic_load(&w->fills_behind) < n; ++t) usleep(10 * 1000);
  uint64_t got = atomic_load(&w->fills_behind);
  if (got < n) fail_msg("%llu fills went on the link in 10 s, not %llu", (unsigned long long)got,
                        (unsigned long long)n);
}

// A real worker over the null plugin, started with `args` (NULL-ended).
static void start_null_worker(const char* name, const char** args, cw_test_worker_t* worker) {
  cw_test_worker_options_t wo = {.plugin = getenv("CW_NULLPLUGIN"), .name = name,
                                 .extra_args = args};
  assert_non_null(wo.plugin);
  assert_int_equal(cw_test_worker_start(&wo, worker), 0);
}

// A fake controller running `script` (script_refuse_later, ...), and the
// client joined to the real worker at `address` in `session`.
static holding_t* join_with_controller(fixture_t* fx, const char* name, const char* address,
                                       uint64_t session, void (*script)(fake_t*)) {
  holding_t* ctrl = calloc(1, sizeof(*ctrl));
  assert_non_null(ctrl);
  pthread_mutex_init(&ctrl->p.mu, NULL);
  fake_start(&ctrl->p.f, script);
  fx->client.ctrl = connect_ok(&ctrl->p.f);
  join_real_worker(fx, name, address, session);
  return ctrl;
}

// A DELETE relayed through ctrl (seq 1), then 8 DELETEs of the same id
// straight to the worker (seqs 2..9), which wait there for seq 1; then ctrl
// refuses the relayed one, whose seq the client must fill.
static void refuse_one_before_8(fixture_t* fx, holding_t* ctrl, rec_t* relayed, rec_t* direct) {
  uint64_t id = 7;  // packed as each request goes out
  send_relayed_delete(fx, &id, relayed);
  wait_seen(&ctrl->p, 1);
  for (int i = 0; i < 8; ++i) send_delete_taking(fx, &id, true, &direct[i], 2 + (uint64_t)i);
  atomic_store(&ctrl->go, true);
}

// How many of direct[0..n) are answered, waiting up to `ms` for all.
static int answered_within(rec_t* direct, int n, int ms) {
  int answered = 0;
  for (int t = 0; t < ms / 10 && answered < n; ++t) {
    usleep(10 * 1000);
    answered = 0;
    for (int i = 0; i < n; ++i) {
      pthread_mutex_lock(&direct[i].mu);
      answered += direct[i].calls;
      pthread_mutex_unlock(&direct[i].mu);
    }
  }
  return answered;
}

static void expect_refused_relayed(rec_t* relayed) {
  pthread_mutex_lock(&relayed->mu);
  assert_int_equal(relayed->calls, 1);
  assert_int_equal(relayed->code, CW_FAILED_PRECONDITION);
  pthread_mutex_unlock(&relayed->mu);
}

// Every direct DELETE applied (no array there), the link alive; then stops
// the fills, the fake controller and the worker.
static void end_capped(fixture_t* fx, holding_t* ctrl, rec_t* direct, int n,
                       cw_test_worker_t* worker) {
  for (int i = 0; i < n; ++i) {
    if (direct[i].code != CW_NOT_FOUND) fprintf(stderr, "request %d: %s\n", i, direct[i].message);
    assert_int_equal(direct[i].code, CW_NOT_FOUND);  // no array 7 there
  }
  assert_ok(cw_client_ping(fx->worker.conn));
  cw_plugin_fill_stop(&fx->client);
  cw_client_release(fx->client.ctrl);
  fake_join(&ctrl->p.f);
  pthread_mutex_destroy(&ctrl->p.mu);
  free(ctrl);
  cw_client_release(fx->worker.conn);
  fx->worker.conn = NULL;
  assert_int_equal(cw_test_worker_stop(worker, 10000), 0);
}

// A real worker that holds at most 4 requests waiting for their seq
// (--max-held-requests 4). The controller refuses a relayed DELETE late,
// after 8 requests with later seqs went straight to the worker: they wait
// there for its seq, and at 4 the worker stops reading that connection. The
// seq's filler used to go behind them on it and was never read, and the 8
// were never answered; on a connection of its own it is read at once.
static void test_filler_reaches_a_worker_at_its_cap(void** state) {
  fixture_t* fx = *state;
  const char* args[] = {"--max-held-requests", "4", NULL};
  cw_test_worker_t worker;
  start_null_worker("capped", args, &worker);
  holding_t* ctrl = join_with_controller(fx, "capped", worker.address, 4242, script_refuse_later);
  rec_t relayed, direct[8];
  refuse_one_before_8(fx, ctrl, &relayed, direct);
  int answered = answered_within(direct, 8, 10000);
  expect_refused_relayed(&relayed);
  if (answered < 8) {
    fail_msg("%d of the 8 requests after the refused one answered in 10 s: the worker never "
             "read its filler", answered);
  }
  end_capped(fx, ctrl, direct, 8, &worker);
}

// A connection of the client's to `address` in another session, `session`:
// it takes one of the worker's --max-connections.
static cw_client_t* connect_other_session(fixture_t* fx, const char* address, uint64_t session) {
  cw_client_options_t o;
  cw_plugin_client_worker_options(&fx->client, &o);
  o.session_id = session;
  cw_client_t* other = NULL;
  assert_ok(cw_client_connect(address, &o, &other));
  return other;
}

// A worker at --max-held-requests 4 and --max-connections 2, the client's
// link and `*other` (another session's connection) taking both; the stall
// of test_filler_reaches_a_worker_at_its_cap there, the fill's connection
// of its own refused.
static holding_t* stall_at_both_caps(fixture_t* fx, const char* name, uint64_t session,
                                     cw_test_worker_t* worker, cw_client_t** other,
                                     rec_t* direct) {
  const char* args[] = {"--max-held-requests", "4", "--max-connections", "2", NULL};
  start_null_worker(name, args, worker);
  holding_t* ctrl = join_with_controller(fx, name, worker->address, session, script_refuse_later);
  *other = connect_other_session(fx, worker->address, session + 1);
  rec_t relayed;
  refuse_one_before_8(fx, ctrl, &relayed, direct);
  assert_int_equal(answered_within(&relayed, 1, 10000), 1);
  expect_refused_relayed(&relayed);
  wait_fills_behind(&fx->worker, 1);
  int early = answered_within(direct, 8, 300);
  if (early) fail_msg("%d of the 8 answered with the fill's connection refused", early);
  return ctrl;
}

// As above, with the worker also at its --max-connections (2: the client's
// link and another session's connection), so the fill's connection of its
// own is refused and the fill goes on the link, behind the held requests,
// where the worker does not read it. The client tries that connection
// again: once the other session's leaves, the fill gets through and the 8
// are answered. Before, it never tried again and they waited for ever.
static void test_fill_retries_its_connection_at_both_caps(void** state) {
  fixture_t* fx = *state;
  cw_test_worker_t worker;
  cw_client_t* other = NULL;
  rec_t direct[8];
  holding_t* ctrl = stall_at_both_caps(fx, "full-capped", 4444, &worker, &other, direct);
  cw_client_release(other);
  int answered = answered_within(direct, 8, 10000);
  if (answered < 8) {
    fail_msg("%d of the 8 requests after the refused one answered in 10 s after the worker "
             "had room for a connection: the fill was not tried again", answered);
  }
  end_capped(fx, ctrl, direct, 8, &worker);
}

// The worker at --max-connections only (2: the client's link and another
// session's connection). Two relayed DELETEs (seqs 1 and 2) and one straight
// to the worker (3, held there for 1); the controller refuses 2 first: its
// fill's own connection is refused, and the fill goes on the link, where the
// worker holds it for seq 1 while the runner waits to connect again. Then
// it refuses 1: that fill, queued for the same worker, must not wait for
// that runner (which waits for the fill of 2, which waits for it). It goes
// on the link too, and 1, 2 and 3 apply.
static void test_fill_refused_later_for_a_lower_seq_is_not_held(void** state) {
  fixture_t* fx = *state;
  const char* args[] = {"--max-connections", "2", NULL};
  cw_test_worker_t worker;
  start_null_worker("full", args, &worker);
  holding_t* ctrl = join_with_controller(fx, "full", worker.address, 4848,
                                         script_refuse_two_reversed);
  cw_client_t* other = connect_other_session(fx, worker.address, 4949);
  uint64_t id = 7;
  rec_t relayed[2], direct[1];
  for (int i = 0; i < 2; ++i) send_delete_taking(fx, &id, false, &relayed[i], 1 + (uint64_t)i);
  wait_seen(&ctrl->p, 2);
  send_delete_taking(fx, &id, true, &direct[0], 3);
  atomic_store(&ctrl->go, true);
  assert_int_equal(answered_within(&relayed[1], 1, 10000), 1);
  wait_fills_behind(&fx->worker, 1);
  atomic_store(&ctrl->go2, true);
  assert_int_equal(answered_within(&relayed[0], 1, 10000), 1);
  int answered = answered_within(direct, 1, 10000);
  if (!answered) {
    fail_msg("the request after the two refused ones was not answered in 10 s: the lower "
             "seq's fill waited behind the other's");
  }
  wait_fills_behind(&fx->worker, 2);
  for (int i = 0; i < 2; ++i) expect_refused_relayed(&relayed[i]);
  cw_client_release(other);
  end_capped(fx, ctrl, direct, 1, &worker);
}

// The stall of test_fill_retries_its_connection_at_both_caps, never
// relieved: the client ends while its runner waits to connect again and the
// fills on the link are unanswered. The fills' state
// goes first (cw_plugin_fill_stop, which must not wait for the fills), then
// the link, whose release answers them: their answers must not touch what
// is gone. (The first form of the retry locked the freed state's mutex
// there; neither sanitizer sees an access made inside pthread_mutex_lock,
// so this runs the path rather than catching that form.)
static void test_client_ends_with_fills_behind_on_the_link(void** state) {
  fixture_t* fx = *state;
  cw_test_worker_t worker;
  cw_client_t* other = NULL;
  rec_t direct[8];
  holding_t* ctrl = stall_at_both_caps(fx, "full-capped-end", 4646, &worker, &other, direct);
  cw_plugin_fill_stop(&fx->client);
  cw_client_release(fx->client.ctrl);
  fake_join(&ctrl->p.f);
  pthread_mutex_destroy(&ctrl->p.mu);
  free(ctrl);
  cw_client_release(fx->worker.conn);  // fails the 8 and the fill on it
  fx->worker.conn = NULL;
  assert_int_equal(answered_within(direct, 8, 10000), 8);
  for (int i = 0; i < 8; ++i) assert_int_not_equal(direct[i].code, CW_OK);
  cw_client_release(other);
  assert_int_equal(cw_test_worker_stop(&worker, 10000), 0);
}

// A worker at its --max-connections (1: the client's link fills it) refuses
// the connection of its own that a refused relayed request's fill goes on.
// The client's link is healthy: the fill goes on it (nothing is held there
// behind it here), and the worker is not taken for lost, which failed every
// request in flight on that link and closed it at the reattach (a flood of
// connections before HELLO, which evicts the oldest one, did the same).
static void test_fill_refused_connection_keeps_the_link(void** state) {
  fixture_t* fx = *state;
  const char* args[] = {"--max-connections", "1", NULL};
  cw_test_worker_t worker;
  start_null_worker("full", args, &worker);
  peer_t* ctrl = calloc(1, sizeof(*ctrl));
  assert_non_null(ctrl);
  pthread_mutex_init(&ctrl->mu, NULL);
  ctrl->refuse_type = CW_MSG_DELETE;
  ctrl->refuse_code = CW_FAILED_PRECONDITION;
  fake_start(&ctrl->f, script_record);
  fx->client.ctrl = connect_ok(&ctrl->f);
  join_real_worker(fx, "full", worker.address, 4343);
  rec_t relayed = {.mu = PTHREAD_MUTEX_INITIALIZER};
  uint64_t id = 7;
  send_relayed_delete(fx, &id, &relayed);
  assert_ok(cw_client_flush(fx->client.ctrl));
  assert_int_equal(relayed.calls, 1);
  assert_int_equal(relayed.code, CW_FAILED_PRECONDITION);
  // The fill's connection tried and refused (it took the link for lost).
  for (int t = 0; t < 100 && !atomic_load(&fx->worker.dead); ++t) usleep(10 * 1000);
  assert_false(atomic_load(&fx->worker.dead));
  rec_t direct = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.ids = &id;
  d.n_ids = 1;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, true, CW_MSG_DELETE,
                                            &d.base, &d.seq, rec_done, &direct));
  assert_int_equal(d.seq, 2);
  int calls = 0;
  for (int t = 0; t < 1000 && !calls; ++t) {  // 10 s
    usleep(10 * 1000);
    pthread_mutex_lock(&direct.mu);
    calls = direct.calls;
    pthread_mutex_unlock(&direct.mu);
  }
  if (!calls) fail_msg("the request after the refused one was not answered in 10 s");
  assert_int_equal(direct.code, CW_NOT_FOUND);  // applied: no array 7 there
  assert_false(atomic_load(&fx->worker.dead));
  assert_ok(cw_client_ping(fx->worker.conn));
  cw_plugin_fill_stop(&fx->client);
  cw_client_release(fx->client.ctrl);
  fake_join(&ctrl->f);
  pthread_mutex_destroy(&ctrl->mu);
  free(ctrl);
  cw_client_release(fx->worker.conn);
  fx->worker.conn = NULL;
  assert_int_equal(cw_test_worker_stop(&worker, 10000), 0);
}

// Two workers whose relayed LAUNCHes the controller refused. The first one's
// address takes connections but never answers a HELLO (a path going bad, a
// stalled worker): the fill thread's connection there waits out its connect
// timeout (8 s). The second worker's fill must not wait behind it, which
// held that worker's later requests (every seq after the hole) that long.
static void test_fill_not_behind_another_workers_connect(void** state) {
  (void)state;
  peer_t* ctrl = calloc(1, sizeof(*ctrl));
  peer_t* p = calloc(3, sizeof(*p));  // w0's link, w1's link, w1's fill connection
  assert_non_null(ctrl);
  assert_non_null(p);
  pthread_mutex_init(&ctrl->mu, NULL);
  for (int i = 0; i < 3; ++i) pthread_mutex_init(&p[i].mu, NULL);
  ctrl->refuse_type = CW_MSG_LAUNCH;
  ctrl->refuse_code = CW_UNAVAILABLE;
  fake_start(&ctrl->f, script_record);
  cw_plugin_client_t* client = calloc(1, sizeof(*client));
  cw_plugin_worker_t* ws = calloc(2, sizeof(*ws));
  assert_non_null(client);
  assert_non_null(ws);
  client->ctrl = connect_ok(&ctrl->f);
  client->session_id = 78;
  fake_silent_t silent;  // w0's address for new connections: never answers
  fake_silent_start(&silent);
  fake_start(&p[0].f, script_record);
  p[1].f.session_key_reply = 52;
  fake_start(&p[1].f, script_record);
  const char* addr[2] = {silent.path, p[1].f.path};
  for (int i = 0; i < 2; ++i) {
    Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
    wi.name = i ? "worker-1" : "worker-0";
    wi.address = (char*)addr[i];
    assert_null(cw_plugin_worker_initialize(&ws[i], client, &wi));
  }
  client->workers = ws;
  client->num_workers = 2;
  ws[0].conn = connect_ok(&p[0].f);
  ws[1].conn = connect_ok(&p[1].f);
  p[2].f.session_key_reply = 52;
  fake_start_beside(&p[2].f, &p[1].f, script_record);  // once p[1] took its connection
  ws[0].session_key = 51;
  ws[1].session_key = 52;
  rec_t rec[2] = {{.mu = PTHREAD_MUTEX_INITIALIZER}, {.mu = PTHREAD_MUTEX_INITIALIZER}};
  for (int i = 0; i < 2; ++i) {
    Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
    assert_null(cw_plugin_worker_send_ordered(&ws[i], CW_PLUGIN_ANY_EPOCH, false, CW_MSG_LAUNCH,
                                              &req.base, &req.seq, rec_done, &rec[i]));
    assert_ok(cw_client_flush(client->ctrl));  // refused: w0's fill is under way first
    assert_int_equal(rec[i].calls, 1);
    usleep(50 * 1000);
  }
  int seen = 0;
  for (int t = 0; t < 2000 && !seen; ++t) {  // 20 s: past worker-0's connect timeout
    usleep(10 * 1000);
    pthread_mutex_lock(&p[2].mu);
    seen = p[2].n;
    pthread_mutex_unlock(&p[2].mu);
  }
  pthread_mutex_lock(&p[0].mu);
  int w0_link = p[0].n;
  pthread_mutex_unlock(&p[0].mu);
  assert_true(seen);
  expect_seen(&p[2], 0, CW_MSG_DELETE, 1);
  // Worker-0's connect is still under way: once it fails (8 s), its fill
  // goes on its link. Behind it, worker-1's came only after that.
  if (w0_link) fail_msg("worker-1's fill came after worker-0's connect gave up: it waited for it");
  cw_plugin_fill_stop(client);
  cw_client_release(client->ctrl);
  for (int i = 0; i < 2; ++i) {
    cw_client_release(ws[i].conn);
    cw_plugin_worker_deinitialize(&ws[i]);
  }
  fake_join(&p[2].f);
  for (int i = 0; i < 2; ++i) fake_join(&p[i].f);
  fake_join(&ctrl->f);
  (void)fake_silent_stop(&silent);
  for (int i = 0; i < 3; ++i) pthread_mutex_destroy(&p[i].mu);
  pthread_mutex_destroy(&ctrl->mu);
  free(ws);
  free(client);
  free(p);
  free(ctrl);
}

// The controller's side of test_relayed_launches_share_writes: the replies
// to launches 1-4 wait, launch 5 is answered at once (a batched reply just
// taken: the client may hold frames from now on), then the next three
// launches must come without any reply to bring them; then everything is
// answered.
static void script_relay_gated(fake_t* f) {
  peer_t* p = (peer_t*)f;
  frame_t fr[8];
  int got = 0;
  bool ok = true;
  for (; ok && got < 5; ++got) {
    ok = fake_read(f, &fr[got]);
    if (ok) record_frame(p, &fr[got]);
  }
  ok = ok && fake_ack(f, &fr[4]);
  for (; ok && got < 8; ++got) {
    ok = fake_read(f, &fr[got]);
    if (ok) record_frame(p, &fr[got]);
  }
  for (int i = 0; i < got; ++i) {
    if (ok && i != 4) ok = fake_ack(f, &fr[i]);
  }
  for (int i = 0; i < got; ++i) frame_free(&fr[i]);
  FCHECK(f, ok);
  script_record(f);
}

static int rec_calls(rec_t* rec) {
  pthread_mutex_lock(&rec->mu);
  int n = rec->calls;
  pthread_mutex_unlock(&rec->mu);
  return n;
}

// What goes through the controller names the life of the session at the
// worker its seq was numbered in (HelloReply.session_key), so that a worker
// whose session there was made again refuses it; what goes straight to the
// worker needs none. That refusal reads as the loss of the session's arrays
// there, naming the worker, without marking it dead (our link may be fine).
static void test_relayed_requests_name_their_life(void** state) {
  fixture_t* fx = *state;
  peer_t* ctrl = calloc(1, sizeof(*ctrl));
  assert_non_null(ctrl);
  pthread_mutex_init(&ctrl->mu, NULL);
  fake_start(&ctrl->f, script_record);
  fx->client.ctrl = connect_ok(&ctrl->f);
  connect_worker(fx);
  fx->worker.session_key = 0x5eed;
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, &rec));
  uint64_t exe = 9;
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &exe;
  del.n_ids = 1;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_DELETE,
                                            &del.base, &del.seq, rec_done, &rec));
  Causeway__V1__LaunchRequest direct = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(cw_plugin_worker_send_ordered(&fx->worker, CW_PLUGIN_ANY_EPOCH, true, CW_MSG_LAUNCH,
                                            &direct.base, &direct.seq, rec_done, &rec));
  wait_seen(ctrl, 2);
  expect_seen(ctrl, 0, CW_MSG_LAUNCH, 1);
  assert_int_equal(ctrl->seen[0].life, 0x5eed);
  expect_seen(ctrl, 1, CW_MSG_DELETE, 2);
  assert_int_equal(ctrl->seen[1].life, 0x5eed);
  wait_seen(&fx->peer, 1);
  expect_seen(&fx->peer, 0, CW_MSG_LAUNCH, 3);
  assert_int_equal(fx->peer.seen[0].life, 0);
  assert_ok(cw_client_flush(fx->client.ctrl));
  assert_ok(cw_client_flush(fx->worker.conn));
  assert_int_equal(rec_calls(&rec), 3);
  assert_int_equal(rec.code, CW_OK);

  cw_status_t st = cw_plugin_worker_map_error(
      &fx->worker, cw_make_status(CW_ABORTED, "LAUNCH with seq 7 " CW_MSG_SEQ_OTHER_LIFE " 12 at "
                                  "this worker (its objects are gone); not applied"));
  assert_int_equal(cw_status_code(st), CW_UNAVAILABLE);
  char want[512];
  snprintf(want, sizeof(want), "worker worker-0 (%s) no longer holds this session's arrays: "
           "LAUNCH with seq 7 " CW_MSG_SEQ_OTHER_LIFE " 12 at this worker (its objects are "
           "gone); not applied", fx->peer.f.path);
  assert_string_equal(cw_status_message(st), want);
  cw_status_free(st);
  assert_false(atomic_load(&fx->worker.dead));
  cw_client_release(fx->client.ctrl);
  fake_join(&ctrl->f);
  pthread_mutex_destroy(&ctrl->mu);
  free(ctrl);
}

static void send_relayed_launch(fixture_t* fx, rec_t* rec) {
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(cw_plugin_worker_send_batched(&fx->worker, CW_PLUGIN_ANY_EPOCH, false, CW_MSG_LAUNCH,
                                            &req.base, &req.seq, rec_done, rec));
}

// Relayed launches back to back share writes on the controller's connection
// once two of the worker's are unanswered, and one held there goes out
// before a request or a DELETE that takes a later seq goes straight to the
// worker (the worker would wait for it), and when someone waits for the
// worker.
static void test_relayed_launches_share_writes(void** state) {
  fixture_t* fx = *state;
  peer_t* ctrl = calloc(1, sizeof(*ctrl));
  assert_non_null(ctrl);
  pthread_mutex_init(&ctrl->mu, NULL);
  fake_start(&ctrl->f, script_relay_gated);
  // A wide window: only a reply, a direct request or a waiter writes what is held.
  cw_client_options_t o = {.batch_window_us = 60 * 1000 * 1000};
  assert_ok(cw_client_connect(ctrl->f.path, &o, &fx->client.ctrl));
  connect_worker(fx);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  for (int i = 0; i < 5; ++i) send_relayed_launch(fx, &rec);
  wait_seen(ctrl, 5);  // nothing held before a batched reply came
  for (int i = 0; i < 5000 && rec_calls(&rec) < 1; ++i) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(rec_calls(&rec), 1);
  send_relayed_launch(fx, &rec);  // seq 6: held
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL);
  pthread_mutex_lock(&ctrl->mu);
  int seen = ctrl->n;
  pthread_mutex_unlock(&ctrl->mu);
  assert_int_equal(seen, 5);
  send_copy(fx, CW_OK);  // seq 7, straight to the worker
  wait_seen(ctrl, 6);
  expect_seen(ctrl, 5, CW_MSG_LAUNCH, 6);
  expect_seen(&fx->peer, 0, CW_MSG_COPY, 7);
  send_relayed_launch(fx, &rec);  // seq 8: held, until someone waits
  cw_plugin_worker_write_held(&fx->worker);
  wait_seen(ctrl, 7);
  expect_seen(ctrl, 6, CW_MSG_LAUNCH, 8);
  // A dropped buffer's DELETE sent on its own takes the next seq: the held
  // launch before it goes first, or the worker would hold the DELETE.
  cw_plugin_worker_delete(&fx->worker, CW_PLUGIN_ANY_EPOCH, 77, 0);
  send_relayed_launch(fx, &rec);  // seq 9: held
  cw_plugin_worker_flush_deletes(&fx->worker);
  wait_seen(ctrl, 8);
  expect_seen(ctrl, 7, CW_MSG_LAUNCH, 9);
  wait_seen(&fx->peer, 2);
  expect_seen(&fx->peer, 1, CW_MSG_DELETE, 10);
  assert_int_equal(fx->peer.seen[1].first_id, 77);
  assert_ok(cw_client_flush(fx->client.ctrl));
  assert_int_equal(rec.calls, 8);
  assert_int_equal(rec.code, CW_OK);
  assert_int_equal(atomic_load(&fx->worker.relayed_out), 0);
  cw_client_release(fx->client.ctrl);
  fake_join(&ctrl->f);
  pthread_mutex_destroy(&ctrl->mu);
  free(ctrl);
}

static void test_lost_connection_marks_dead(void** state) {
  fixture_t* fx = *state;
  connect_worker(fx);
  // Not about the connection: passes unchanged.
  cw_status_t in = cw_make_status(CW_INVALID_ARGUMENT, "bad shape");
  assert_ptr_equal(cw_plugin_worker_map_error(&fx->worker, in), in);
  cw_status_free(in);
  assert_null(cw_plugin_worker_check(&fx->worker));
  char lost[256];
  snprintf(lost, sizeof(lost), "connection to %s lost: EOF", fx->peer.f.path);
  cw_client_shutdown(fx->worker.conn);  // the loss the error reports
  cw_status_t s =
      cw_plugin_worker_map_error(&fx->worker, cw_make_status(CW_UNAVAILABLE, "%s", lost));
  expect_status(s, CW_UNAVAILABLE, "worker worker-0 (");
  // Dead from now on (no replacement was announced): every request fails
  // naming it, before anything is sent.
  s = cw_plugin_worker_check(&fx->worker);
  expect_status(s, CW_UNAVAILABLE, lost);
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  s = cw_plugin_worker_send(&fx->worker, CW_PLUGIN_ANY_EPOCH, CW_MSG_COPY, &req.base, &req.seq,
                            NULL, 0, NULL, NULL, NULL);
  expect_status(s, CW_UNAVAILABLE, "worker worker-0");
  assert_int_equal(fx->peer.n, 0);
}

// A SEND the worker could not deliver to its peer names the path, not the
// worker, which stays usable.
static void test_failed_send_names_the_path(void** state) {
  fixture_t* fx = *state;
  connect_worker(fx);
  cw_status_t s = cw_plugin_worker_map_error(
      &fx->worker, cw_make_status(CW_UNAVAILABLE, "SEND 38 to 10.9.9.9:7100: peer 10.9.9.9:7100 "
                                  "unreachable: connect timed out"));
  expect_status(s, CW_UNAVAILABLE, "is up, but its copy to another worker failed: SEND 38 to "
                "10.9.9.9:7100: peer 10.9.9.9:7100 unreachable");
  assert_null(cw_plugin_worker_check(&fx->worker));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_deletes_go_first_in_one_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_send_names_the_path, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_batch_goes_alone, setup, teardown),
      cmocka_unit_test_setup_teardown(test_launches_take_deletes_in_batches, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused_delete_surfaces_later, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_found_delete_is_no_failure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused_ordered_request_is_filled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused_relayed_request_is_filled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_filler_reaches_a_worker_at_its_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fill_retries_its_connection_at_both_caps, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_client_ends_with_fills_behind_on_the_link, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fill_refused_later_for_a_lower_seq_is_not_held, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fill_refused_connection_keeps_the_link, setup,
                                      teardown),
      cmocka_unit_test(test_fill_not_behind_another_workers_connect),
      cmocka_unit_test_setup_teardown(test_relayed_launches_share_writes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_relayed_requests_name_their_life, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lost_connection_marks_dead, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
