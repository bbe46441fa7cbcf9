// Gang order on an island that spans several workers (issue 4 item 2): a
// real controller, two real workers that form island "gang" (--island gang
// --island-size 2) through our test plugin with multi-process collectives
// (tests/gangplugin: XLA's CPU plugin underneath, a cross-process all-reduce
// on top), and a third worker with XLA's CPU plugin alone. Several client
// sessions share the island and launch the all-reduce program at once,
// pipelined. Every result must be the sum over all four devices of both
// processes; every worker's record of stamps, and the plugin's own record of
// the order its processes met in, must equal the controller's stamps.
// Then: bad placements and launches get clear errors, and killing one
// member fails the island's launches with UNAVAILABLE naming it while the
// other island keeps serving.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client.h"
#include "cw_frame.h"
#include "cw_test_island.h"

#define F32 CAUSEWAY__V1__DTYPE__DTYPE_F32
#define ASSERT_OK CW_TEST_ASSERT_OK

#define NUM_CLIENTS 3
#define LAUNCHES 25
#define N 16      // elements per device
#define DEVS 4    // 2 per gang worker
#define KEPT 3    // launches of the session resumed after the controller restart

static struct {
  char dir[256];
  cw_test_process_t ctl;
  char ctl_address[512];
  cw_test_worker_t gang[2];
  cw_test_worker_t solo;
  void* program;  // scalar_f32 (x * y + 1) for the solo worker
  size_t program_size;
  void* options;
  size_t options_size;
  // The session of the member-loss test, kept with its island program 4
  // until the whole island restarts.
  cw_test_session_t loss;
} g;

// ---- Helpers (the rest are cw_test_island's) ----------------------------------------

// A shared session of this test's controller; it waits for all 3 workers.
static cw_status_t session_open(cw_test_session_t* s, const char* name,
                                const char* const* workers, size_t num_workers,
                                uint32_t num_devices, uint32_t min_island) {
  cw_test_session_options_t o = {.controller = g.ctl_address,
                                 .name = name,
                                 .workers = workers,
                                 .num_workers = num_workers,
                                 .num_devices = num_devices,
                                 .min_island = min_island,
                                 .min_workers = 3};
  return cw_test_session_open(&o, s);
}

// Compiles the all-reduce program `tag` over session devices `ids`.
static cw_status_t compile_gang(cw_test_session_t* s, uint64_t exe, const char* tag,
                                const int64_t* ids, size_t n) {
  return cw_test_gang_compile(s, exe, N, tag, ids, n);
}

// The session's ids of the island's devices, rank 0's worker first: a
// program on the island lists each member's devices together, in rank order.
static void gang_ids(const cw_test_session_t* s, bool backwards, int64_t* ids) {
  const char* ranks[2] = {"gang0", "gang1"};
  const char* reversed[2] = {"gang1", "gang0"};
  assert_int_equal(cw_test_session_ids(s, backwards ? reversed : ranks, 2, ids, DEVS), DEVS);
}

static float input_value(int k, int i, int d, int j) {
  return (float)(k * 1000 + i * 10 + d) + 0.5f * (float)j;
}

// ---- The clients --------------------------------------------------------------------

typedef struct client_s {
  int k;
  char tag[16];
  uint64_t session_id;
  int island;
  char error[512];  // first failure, for the main thread to report
  int wrong;        // output elements that differ from the expected sum
} client_t;

static void client_fail(client_t* c, cw_status_t st, const char* what) {
  if (!c->error[0]) {
    snprintf(c->error, sizeof(c->error), "client %d: %s: %s", c->k, what,
             st ? cw_status_message(st) : "failed");
  }
  cw_status_free(st);
}

static void* client_main(void* arg) {
  client_t* c = arg;
  cw_test_session_t s;
  char name[32];
  snprintf(name, sizeof(name), "island-client-%d", c->k);
  const char* workers[] = {"gang0", "gang1"};
  cw_status_t st = session_open(&s, name, workers, 2, DEVS, 0);
  if (st) {
    client_fail(c, st, "open");
    cw_test_session_close(&s);
    return NULL;
  }
  c->session_id = s.info->session_id;
  int64_t ids[DEVS];
  gang_ids(&s, false, ids);
  st = compile_gang(&s, 1, c->tag, ids, DEVS);
  if (st) {
    client_fail(c, st, "compile");
    cw_test_session_close(&s);
    return NULL;
  }
  // Inputs for every launch, stored before the launches go out: the
  // island's parts are relayed by the controller, not ordered behind this
  // session's direct uploads.
  const Causeway__V1__GlobalDevice* gd0 = cw_test_session_device(&s, (int32_t)ids[0]);
  c->island = gd0 ? (int)gd0->island : -1;
  for (int i = 0; i < LAUNCHES && !st; ++i) {
    for (int d = 0; d < DEVS && !st; ++d) {
      float data[N];
      for (int j = 0; j < N; ++j) data[j] = input_value(c->k, i, d, j);
      st = cw_test_session_upload_f32(&s, ids[d], 1000 + (uint64_t)(i * DEVS + d), data, N);
    }
  }
  if (!st) st = cw_test_session_flush(&s);
  if (st) {
    client_fail(c, st, "upload");
    cw_test_session_close(&s);
    return NULL;
  }
  // All launches pipelined through the controller.
  for (int i = 0; i < LAUNCHES && !st; ++i) {
    uint64_t in[DEVS], out[DEVS];
    for (int d = 0; d < DEVS; ++d) {
      in[d] = 1000 + (uint64_t)(i * DEVS + d);
      out[d] = 5000 + (uint64_t)(i * DEVS + d);
    }
    st = cw_test_gang_launch(&s, 1, in, out, DEVS);
  }
  if (!st) st = cw_client_flush(s.ctl);
  if (st) {
    client_fail(c, st, "launch");
    cw_test_session_close(&s);
    return NULL;
  }
  for (int i = 0; i < LAUNCHES && !st; ++i) {
    for (int d = 0; d < DEVS && !st; ++d) {
      float got[N];
      st = cw_test_session_download_f32(&s, ids[d], 5000 + (uint64_t)(i * DEVS + d), got, N);
      for (int j = 0; !st && j < N; ++j) {
        float want = 0;
        for (int e = 0; e < DEVS; ++e) want += input_value(c->k, i, e, j);
        if (got[j] != want) {
          if (!c->wrong++) {
            snprintf(c->error, sizeof(c->error), "client %d launch %d device %d [%d]: %g, want %g",
                     c->k, i, d, j, (double)got[j], (double)want);
          }
        }
      }
    }
  }
  if (st) client_fail(c, st, "download");
  cw_test_session_close(&s);
  return NULL;
}

// ---- Records ------------------------------------------------------------------------

typedef struct stamp_s {
  uint64_t stamp, session;
} stamp_t;

// The (stamp, session) records of `island` in STATS from `address`.
static size_t stamps_of(const char* address, int island, bool filter, stamp_t* out, size_t max) {
  cw_client_options_t o = {.peer_name = "island-stats"};
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(address, &o, &c));
  Causeway__V1__Stats* st = NULL;
  ASSERT_OK(cw_client_stats(c, &st));
  assert_int_equal(st->sched_stamps_dropped, 0);
  size_t n = 0;
  for (size_t i = 0; i < st->n_sched_stamps && n < max; ++i) {
    if (filter && st->sched_stamps[i]->island != (uint32_t)island) continue;
    out[n].stamp = st->sched_stamps[i]->stamp;
    out[n].session = st->sched_stamps[i]->session_id;
    n++;
  }
  protobuf_c_message_free_unpacked(&st->base, NULL);
  cw_client_release(c);
  return n;
}

// The controller's record of the island's stamps (into want[max]) is 1..n
// with no gap, and both workers' records, after the `before` entries they
// kept from an earlier controller, equal it. Returns n.
static size_t records_agree(int island, size_t before, stamp_t* want, size_t max) {
  size_t n = stamps_of(g.ctl_address, island, true, want, max);
  // An island restarted under this controller counts from 1 again: judge
  // its last count only.
  size_t from = 0;
  for (size_t i = 1; i < n; ++i) {
    if (want[i].stamp == 1) from = i;
  }
  memmove(want, want + from, (n - from) * sizeof(*want));
  n -= from;
  for (size_t i = 0; i < n; ++i) assert_int_equal(want[i].stamp, i + 1);
  stamp_t* got = calloc(before + max, sizeof(*got));
  assert_non_null(got);
  for (int r = 0; r < 2; ++r) {
    size_t m = stamps_of(g.gang[r].address, 0, false, got, before + max);
    assert_int_equal(m, before + n);
    for (size_t i = 0; i < n; ++i) {
      const stamp_t* o = &got[before + i];
      if (o->stamp != want[i].stamp || o->session != want[i].session) {
        fail_msg("gang%d record %zu: stamp %" PRIu64 " of session %" PRIx64 ", the controller "
                 "stamped %" PRIu64 " for session %" PRIx64, r, before + i, o->stamp, o->session,
                 want[i].stamp, want[i].session);
      }
    }
  }
  free(got);
  return n;
}

// Both plugin processes' rendezvous logs, after `skip` earlier rounds, hold
// n rounds that ran stamps want[0..n) (PJRT launch id) in order, each the
// program of the client whose session the stamp belongs to.
static void logs_agree(size_t skip, const stamp_t* want, size_t n, const client_t* clients,
                       int num_clients) {
  for (int r = 0; r < 2; ++r) {
    char path[512];
    snprintf(path, sizeof(path), "%s/rank%d.log", g.dir, r);
    void* text = NULL;
    size_t size = 0;
    assert_int_equal(cw_test_read_file(path, &text, &size), 0);
    char* save = NULL;
    size_t lines = 0;
    for (char* line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      if (lines++ < skip) continue;
      size_t i = lines - skip - 1;
      unsigned long long round = 0, launch = 0;
      char tag[64] = "", result[16] = "";
      assert_int_equal(sscanf(line, "%llu %llu %63s %15s", &round, &launch, tag, result), 4);
      assert_true(i < n);
      assert_int_equal(round, lines);
      assert_int_equal(launch, want[i].stamp);
      assert_string_equal(result, "ok");
      int k = -1;
      for (int c = 0; c < num_clients; ++c) {
        if (clients[c].session_id == want[i].session) k = c;
      }
      assert_true(k >= 0);
      assert_string_equal(tag, clients[k].tag);
    }
    free(text);
    assert_int_equal(lines, skip + n);
  }
}

// Runs num clients at once (client_main), tags PREFIX<k>, and checks them.
static void run_clients(client_t* clients, int first_k, int num, const char* prefix) {
  pthread_t threads[NUM_CLIENTS];
  assert_true(num <= NUM_CLIENTS);
  memset(clients, 0, (size_t)num * sizeof(*clients));
  for (int k = 0; k < num; ++k) {
    clients[k].k = first_k + k;
    snprintf(clients[k].tag, sizeof(clients[k].tag), "%s%d", prefix, first_k + k);
    assert_int_equal(pthread_create(&threads[k], NULL, client_main, &clients[k]), 0);
  }
  for (int k = 0; k < num; ++k) pthread_join(threads[k], NULL);
  for (int k = 0; k < num; ++k) {
    if (clients[k].error[0]) fail_msg("%s (%d wrong elements)", clients[k].error, clients[k].wrong);
  }
}

// ---- Setup --------------------------------------------------------------------------

static int start_gang_worker_as(int rank, const char* name, cw_test_worker_t* out) {
  cw_test_gang_worker_options_t o = {.controller = g.ctl_address,
                                     .dir = g.dir,
                                     .rank = rank,
                                     .size = 2,
                                     .name = name,
                                     .island = "gang",
                                     .devices = 2};
  return cw_test_gang_worker_start(&o, out);
}

static int start_gang_worker(int rank) {
  return start_gang_worker_as(rank, rank ? "gang1" : "gang0", &g.gang[rank]);
}

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (cw_test_read_program("scalar_f32", &g.program, &g.program_size, &g.options,
                           &g.options_size) != 0) {
    return -1;
  }
  if (cw_test_tempdir_create("cw-island", g.dir, sizeof(g.dir)) != 0) return -1;
  if (cw_test_controller_start(NULL, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    return -1;
  }
  if (start_gang_worker(0) || start_gang_worker(1)) return -1;
  const char* extra[] = {"--controller", g.ctl_address, NULL};
  cw_test_worker_options_t o = {.devices = 1, .name = "solo", .extra_args = extra};
  return cw_test_worker_start(&o, &g.solo) ? -1 : 0;
}

static int group_teardown(void** state) {
  (void)state;
  if (g.loss.ctl) cw_test_session_close(&g.loss);
  int rc = 0;
  for (int r = 0; r < 2; ++r) {
    if (g.gang[r].process.pid && cw_test_worker_stop(&g.gang[r], 30000) != 0) rc = -1;
  }
  if (g.solo.process.pid && cw_test_worker_stop(&g.solo, 30000) != 0) rc = -1;
  if (g.ctl.pid && cw_test_process_stop(&g.ctl, 30000) != 0) rc = -1;
  cw_test_tempdir_remove(g.dir);
  free(g.program);
  free(g.options);
  return rc;
}

// ---- Tests --------------------------------------------------------------------------

static void test_sessions_share_the_island_in_one_order(void** state) {
  (void)state;
  client_t clients[NUM_CLIENTS];
  run_clients(clients, 0, NUM_CLIENTS, "c");
  // The controller's stamps for the island: 1..T, T = every launch; each
  // worker of the island issued exactly those, in that order, and the
  // plugin's processes met in that order too.
  enum { T = NUM_CLIENTS * LAUNCHES };
  static stamp_t want[T + 8];
  int island = clients[0].island;
  size_t n = records_agree(island, 0, want, T + 8);
  assert_int_equal(n, T);
  int switches = 0;
  for (size_t i = 1; i < n; ++i) switches += want[i].session != want[i - 1].session;
  logs_agree(0, want, n, clients, NUM_CLIENTS);
  fprintf(stderr, "island %d: %zu stamps from %d sessions, %d session switches; both workers and "
          "both plugin processes followed them\n", island, n, NUM_CLIENTS, switches);
  assert_true(switches > 0);  // the sessions really were interleaved
}

// A restarted controller: the workers register again by themselves, the
// island forms again, and its stamps count from 1 on both sides, so new
// sessions' launches are ordered again from the first one (a worker that
// kept its old count would issue them unordered).
// A session of the first controller resumes on the restarted one
// (SESSION_RESUME) and launches the island program it compiled before, in
// the new order after the new sessions' launches.
static void test_controller_restart_keeps_the_island_in_order(void** state) {
  (void)state;
  enum { BEFORE = NUM_CLIENTS * LAUNCHES + 1 };  // stamps the first controller gave
  client_t clients[3];
  memset(clients, 0, sizeof(clients));
  client_t* kept = &clients[2];
  kept->k = 20;
  snprintf(kept->tag, sizeof(kept->tag), "k20");
  cw_test_session_t s;
  const char* workers[] = {"gang0", "gang1"};
  ASSERT_OK(session_open(&s, "island-kept", workers, 2, DEVS, 0));
  kept->session_id = s.info->session_id;
  int64_t ids[DEVS];
  gang_ids(&s, false, ids);
  ASSERT_OK(compile_gang(&s, 1, kept->tag, ids, DEVS));
  for (int i = 0; i < KEPT; ++i) {
    for (int d = 0; d < DEVS; ++d) {
      float data[N];
      for (int j = 0; j < N; ++j) data[j] = input_value(kept->k, i, d, j);
      ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], 1000 + (uint64_t)(i * DEVS + d), data, N));
    }
  }
  ASSERT_OK(cw_test_session_flush(&s));

  assert_int_equal(cw_test_process_stop(&g.ctl, 30000), 0);
  char address[512];
  snprintf(address, sizeof(address), "%s", g.ctl_address);
  const char* args[] = {"--listen", address, NULL};
  assert_int_equal(cw_test_controller_start(args, &g.ctl, g.ctl_address, sizeof(g.ctl_address)),
                   0);
  assert_string_equal(g.ctl_address, address);
  // Waits (<= 60 s) for gang0 and gang1 to register again.
  ASSERT_OK(cw_test_session_resume(&s, g.ctl_address, DEVS, 1, ids, DEVS));
  run_clients(clients, 10, 2, "r");  // sessions wait (<= 60 s) for the 3 workers
  for (int i = 0; i < KEPT; ++i) {
    uint64_t in[DEVS], out[DEVS];
    for (int d = 0; d < DEVS; ++d) {
      in[d] = 1000 + (uint64_t)(i * DEVS + d);
      out[d] = 5000 + (uint64_t)(i * DEVS + d);
    }
    ASSERT_OK(cw_test_gang_launch(&s, 1, in, out, DEVS));
  }
  ASSERT_OK(cw_client_flush(s.ctl));
  for (int i = 0; i < KEPT; ++i) {
    for (int d = 0; d < DEVS; ++d) {
      float got[N];
      ASSERT_OK(cw_test_session_download_f32(&s, ids[d], 5000 + (uint64_t)(i * DEVS + d), got, N));
      for (int j = 0; j < N; ++j) {
        float want = 0;
        for (int e = 0; e < DEVS; ++e) want += input_value(kept->k, i, e, j);
        assert_true(got[j] == want);
      }
    }
  }
  cw_test_session_close(&s);
  static stamp_t want[2 * LAUNCHES + KEPT + 8];
  size_t n = records_agree(clients[0].island, BEFORE, want, 2 * LAUNCHES + KEPT + 8);
  assert_int_equal(n, 2 * LAUNCHES + KEPT);
  for (size_t i = 2 * LAUNCHES; i < n; ++i) assert_int_equal(want[i].session, kept->session_id);
  logs_agree(BEFORE, want, n, clients, 3);
  fprintf(stderr, "after the restart: %zu stamps from 1 (%d of the resumed session), both workers "
          "and both plugin processes followed them\n", n, KEPT);
}

static void expect_error(cw_status_t st, int code, const char* needle, const char* what) {
  if (cw_status_is_ok(st)) fail_msg("%s: succeeded", what);
  const char* msg = cw_status_message(st);
  fprintf(stderr, "  %s -> %s\n", what, msg);
  int got = cw_status_code(st);
  bool names = strstr(msg, needle) != NULL;
  char copy[512];
  snprintf(copy, sizeof(copy), "%s", msg);
  cw_status_free(st);
  assert_int_equal(got, code);
  if (!names) fail_msg("%s: '%s' does not say '%s'", what, copy, needle);
}

static void test_bad_placements_and_launches(void** state) {
  (void)state;
  // Islands of at least 4 devices: only the island of gang0 and gang1 is
  // one (solo has 1), so no worker needs naming.
  cw_test_session_t s;
  ASSERT_OK(session_open(&s, "island-bad", NULL, 0, DEVS, DEVS));
  for (size_t i = 0; i < s.info->n_devices; ++i) {
    assert_int_equal(s.info->devices[i]->island, s.info->devices[0]->island);
  }
  int64_t backwards[DEVS], ids[DEVS];
  gang_ids(&s, true, backwards);
  gang_ids(&s, false, ids);
  expect_error(compile_gang(&s, 2, "bad", backwards, DEVS), CW_INVALID_ARGUMENT, "together",
               "devices of rank 1 before rank 0");
  ASSERT_OK(compile_gang(&s, 3, "ok", ids, DEVS));
  uint64_t in = 1, out = 2;
  const uint64_t* a[1] = {&in};
  const uint64_t* o[1] = {&out};
  cw_status_t st = cw_client_launch(s.ctl, 3, 1, 1, a, 1, o, NULL, NULL);
  if (!st) st = cw_client_flush(s.ctl);
  expect_error(st, CW_INVALID_ARGUMENT, "runs on 4 devices", "a launch with one argument list");
  // A draining member would refuse its part while the other waits for it:
  // the controller refuses the whole launch, and takes it again after.
  uint64_t ins[DEVS], outs[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    float data[N];
    for (int j = 0; j < N; ++j) data[j] = (float)(d + j);
    ins[d] = 100 + (uint64_t)d;
    outs[d] = 200 + (uint64_t)d;
    ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], ins[d], data, N));
  }
  ASSERT_OK(cw_test_session_flush(&s));
  Causeway__V1__AdminDrainRequest dr = CAUSEWAY__V1__ADMIN_DRAIN_REQUEST__INIT;
  dr.worker = (char*)"gang1";
  ASSERT_OK(cw_test_call(s.ctl, CW_MSG_ADMIN_DRAIN, &dr.base, NULL));
  st = cw_test_gang_launch(&s, 3, ins, outs, DEVS);
  if (!st) st = cw_client_flush(s.ctl);
  expect_error(st, CW_FAILED_PRECONDITION, "worker gang1 of island 'gang' is draining",
               "a launch while gang1 drains");
  ASSERT_OK(cw_test_call(s.ctl, CW_MSG_ADMIN_UNDRAIN, &dr.base, NULL));
  ASSERT_OK(cw_test_gang_launch(&s, 3, ins, outs, DEVS));
  ASSERT_OK(cw_client_flush(s.ctl));
  for (int d = 0; d < DEVS; ++d) {
    float got[N];
    ASSERT_OK(cw_test_session_download_f32(&s, ids[d], outs[d], got, N));
    for (int j = 0; j < N; ++j) assert_true(got[j] == (float)(0 + 1 + 2 + 3 + 4 * j));
  }
  Causeway__V1__ExeInfoRequest ei = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  ei.exe_id = 3;
  ProtobufCMessage* rep = NULL;
  ASSERT_OK(cw_test_call(s.ctl, CW_MSG_EXE_INFO, &ei.base, &rep));
  const Causeway__V1__ExecutableInfo* info = (const Causeway__V1__ExecutableInfo*)rep;
  assert_int_equal(info->n_devices, DEVS);  // every part's devices, in launch order
  for (size_t i = 0; i < info->n_devices; ++i) assert_int_equal(info->devices[i], ids[i]);
  protobuf_c_message_free_unpacked(rep, NULL);
  // Refused launches took no stamp: the records still agree, gap-free
  // (a gap would have held the next launch for the workers' 5 s recovery).
  static stamp_t rec[NUM_CLIENTS * LAUNCHES + 16];
  assert_int_equal(records_agree(s.info->devices[0]->island, 0, rec, NUM_CLIENTS * LAUNCHES + 16),
                   NUM_CLIENTS * LAUNCHES + 1);
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  uint64_t ex = 3;
  del.ids = &ex;
  del.n_ids = 1;
  ASSERT_OK(cw_test_call(s.ctl, CW_MSG_DELETE, &del.base, NULL));
  expect_error(cw_test_call(s.ctl, CW_MSG_EXE_INFO, &ei.base, NULL), CW_NOT_FOUND, "3",
               "EXE_INFO after DELETE");
  cw_test_session_close(&s);
}

static void test_losing_a_member_fails_the_island_only(void** state) {
  (void)state;
  cw_test_session_t s, solo;
  const char* workers[] = {"gang0", "gang1"};
  ASSERT_OK(session_open(&s, "island-loss", workers, 2, DEVS, 0));
  const char* solo_workers[] = {"solo"};
  ASSERT_OK(session_open(&solo, "island-solo", solo_workers, 1, 1, 0));
  int64_t ids[DEVS];
  gang_ids(&s, false, ids);
  ASSERT_OK(compile_gang(&s, 4, "loss", ids, DEVS));
  ASSERT_OK(cw_client_compile(solo.ctl, 9, "mlir", g.program, g.program_size, g.options,
                              g.options_size, NULL));
  assert_int_equal(cw_test_worker_kill(&g.gang[1]), 128 + SIGKILL);
  cw_test_sleep_ms(500);  // the controller sees the connection close (no timing asserted)
  uint64_t in[DEVS] = {1, 2, 3, 4}, out[DEVS] = {5, 6, 7, 8};
  // Within the heartbeat timeout the loss shows as the closed connection.
  cw_status_t st = cw_test_gang_launch(&s, 4, in, out, DEVS);
  if (!st) st = cw_client_flush(s.ctl);
  expect_error(st, CW_UNAVAILABLE, "gang1", "a launch on the island after gang1 died");
  // The other island serves on: x * y + 1 on the solo worker.
  const Causeway__V1__GlobalDevice* gd = cw_test_session_device(&solo, 0);
  assert_non_null(gd);
  cw_client_t* w = solo.links[gd->worker_index];
  float x = 3, y = 4, r = 0;
  ASSERT_OK(cw_client_upload(w, 1, F32, NULL, 0, NULL, gd->device->local_id, &x, 4, NULL, NULL));
  ASSERT_OK(cw_client_upload(w, 2, F32, NULL, 0, NULL, gd->device->local_id, &y, 4, NULL, NULL));
  ASSERT_OK(cw_client_flush(w));
  uint64_t sa[2] = {1, 2}, so = 3;
  const uint64_t* sap[1] = {sa};
  const uint64_t* sop[1] = {&so};
  ASSERT_OK(cw_client_launch(solo.ctl, 9, 1, 2, sap, 1, sop, NULL, NULL));
  ASSERT_OK(cw_client_flush(solo.ctl));
  size_t size = 0;
  ASSERT_OK(cw_client_download(w, 3, &r, sizeof(r), &size, NULL));
  assert_true(r == 13.0f);
  cw_test_session_close(&solo);
  g.loss = s;  // kept: test_the_whole_island_restarts asks after its program
}

// ADMIN_STATUS of the controller (free with protobuf_c_message_free_unpacked).
static Causeway__V1__AdminStatus* admin_status(void) {
  cw_client_options_t o = {.peer_name = "island-admin"};
  cw_client_t* c = NULL;
  ASSERT_OK(cw_client_connect(g.ctl_address, &o, &c));
  Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  ProtobufCMessage* rep = NULL;
  ASSERT_OK(cw_test_call(c, CW_MSG_ADMIN_STATUS, &req.base, &rep));
  cw_client_release(c);
  return (Causeway__V1__AdminStatus*)rep;
}

// Waits (<= 20 s) until the controller's recent errors hold one with `needle`.
static void expect_recent_error(const char* needle) {
  for (int64_t end = cw_time_now_ms() + 20000; cw_time_now_ms() < end; cw_test_sleep_ms(100)) {
    Causeway__V1__AdminStatus* st = admin_status();
    bool found = false;
    for (size_t i = 0; i < st->n_recent_errors && !found; ++i) {
      if (strstr(st->recent_errors[i]->message, needle)) {
        fprintf(stderr, "  recent error: %s\n", st->recent_errors[i]->message);
        found = true;
      }
    }
    protobuf_c_message_free_unpacked(&st->base, NULL);
    if (found) return;
  }
  fail_msg("no recent error says '%s'", needle);
}

static void test_status_lists_the_island_and_refuses_misfits(void** state) {
  (void)state;
  // gang1 is dead (the previous test); the island is still one entry.
  Causeway__V1__AdminStatus* st = admin_status();
  bool listed = false;
  for (size_t i = 0; i < st->n_islands; ++i) {
    const Causeway__V1__AdminIsland* is = st->islands[i];
    if (is->n_workers == 2) {
      assert_string_equal(is->workers[0], "gang0");  // rank order
      assert_string_equal(is->workers[1], "gang1");
      assert_int_equal(is->num_devices, DEVS);
      listed = true;
    }
  }
  assert_int_equal(st->n_islands, 2);  // the gang and the solo worker
  protobuf_c_message_free_unpacked(&st->base, NULL);
  assert_true(listed);
  // A replacement for gang1 is refused (not supported for such islands);
  // so is a second rank 0. Both workers keep serving on their own and keep
  // trying; the controller says why.
  cw_test_worker_t again, twin;
  memset(&again, 0, sizeof(again));
  memset(&twin, 0, sizeof(twin));
  assert_int_equal(start_gang_worker_as(1, "gang1", &again), 0);
  expect_recent_error("whose worker gang0 is still alive; replacing one member of an island that "
                      "spans several workers is not supported");
  assert_int_equal(start_gang_worker_as(0, "gang-twin", &twin), 0);
  expect_recent_error("island 'gang' already has rank 0: worker gang0");
  assert_int_equal(cw_test_worker_stop(&twin, 30000), 0);
  assert_int_equal(cw_test_worker_stop(&again, 30000), 0);
}

// Lines in plugin process `rank`'s rendezvous log.
static size_t log_lines(int rank) {
  char path[512];
  snprintf(path, sizeof(path), "%s/rank%d.log", g.dir, rank);
  void* text = NULL;
  size_t size = 0, n = 0;
  assert_int_equal(cw_test_read_file(path, &text, &size), 0);
  for (size_t i = 0; i < size; ++i) n += ((char*)text)[i] == '\n';
  free(text);
  return n;
}

// A part one member refuses (its input was never uploaded there) while the
// other member could run its own: the controller cancels the ready part
// before it is issued, so no plugin process enters the collective alone.
// Without the prepare/go exchange gang0 would run its part and wait in the
// rendezvous for one that never comes (the test plugin gives up after 3 s
// and logs an error round; a real plugin may wait much longer).
static void test_a_part_refused_on_one_member_cancels_the_others(void** state) {
  (void)state;
  cw_test_session_t s;
  const char* workers[] = {"gang0", "gang1"};
  ASSERT_OK(session_open(&s, "island-refused", workers, 2, DEVS, 0));
  int64_t ids[DEVS];
  gang_ids(&s, false, ids);
  ASSERT_OK(compile_gang(&s, 6, "refused", ids, DEVS));
  size_t lines0 = log_lines(0), lines1 = log_lines(1);
  uint64_t in[DEVS], out[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    in[d] = 300 + (uint64_t)d;
    out[d] = 400 + (uint64_t)d;
  }
  float data[N], got[N];
  for (int j = 0; j < N; ++j) data[j] = (float)j;
  for (int d = 0; d < DEVS / 2; ++d) {  // gang0's devices only
    ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], in[d], data, N));
  }
  ASSERT_OK(cw_test_session_flush(&s));
  cw_status_t st = cw_test_gang_launch(&s, 6, in, out, DEVS);
  if (!st) st = cw_client_flush(s.ctl);
  expect_error(st, CW_NOT_FOUND, "part on worker gang1 of island 'gang'",
               "a launch whose input is missing on gang1");
  // gang0's part was cancelled, not run: its outputs carry the reason.
  expect_error(cw_test_session_download_f32(&s, ids[0], out[0], got, N), CW_CANCELLED,
               "cancelled", "gang0's output of the cancelled launch");
  assert_int_equal(log_lines(0), lines0);  // neither process entered the collective
  assert_int_equal(log_lines(1), lines1);
  // With the inputs there too, the island runs it at once.
  for (int d = DEVS / 2; d < DEVS; ++d) {
    ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], in[d], data, N));
  }
  ASSERT_OK(cw_test_session_flush(&s));
  for (int d = 0; d < DEVS; ++d) out[d] = 500 + (uint64_t)d;
  ASSERT_OK(cw_test_gang_launch(&s, 6, in, out, DEVS));
  ASSERT_OK(cw_client_flush(s.ctl));
  for (int d = 0; d < DEVS; ++d) {
    ASSERT_OK(cw_test_session_download_f32(&s, ids[d], out[d], got, N));
    for (int j = 0; j < N; ++j) assert_true(got[j] == (float)(DEVS * j));
  }
  assert_int_equal(log_lines(0), lines0 + 1);
  assert_int_equal(log_lines(1), lines1 + 1);
  // Pipelined: a good launch, one refused on gang1, a good one. Parts are
  // answered ready ahead of their turns (cw_worker_launch.c), so gang0 may
  // have said ready for all three before the controller heard gang1 refuse
  // the second: that one is cancelled in its turn, and the third still runs.
  uint64_t half[DEVS];
  for (int d = 0; d < DEVS; ++d) half[d] = 700 + (uint64_t)d;
  for (int d = 0; d < DEVS / 2; ++d) {  // gang0's devices only
    ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], half[d], data, N));
  }
  ASSERT_OK(cw_test_session_flush(&s));
  uint64_t outs[3][DEVS];
  for (int k = 0; k < 3; ++k) {
    for (int d = 0; d < DEVS; ++d) outs[k][d] = 800 + 10 * (uint64_t)k + (uint64_t)d;
    ASSERT_OK(cw_test_gang_launch(&s, 6, k == 1 ? half : in, outs[k], DEVS));
  }
  expect_error(cw_client_flush(s.ctl), CW_NOT_FOUND, "part on worker gang1 of island 'gang'",
               "the middle one of three pipelined launches");
  expect_error(cw_test_session_download_f32(&s, ids[0], outs[1][0], got, N), CW_CANCELLED,
               "cancelled", "gang0's output of the cancelled middle launch");
  for (int k = 0; k < 3; k += 2) {
    for (int d = 0; d < DEVS; ++d) {
      ASSERT_OK(cw_test_session_download_f32(&s, ids[d], outs[k][d], got, N));
      for (int j = 0; j < N; ++j) assert_true(got[j] == (float)(DEVS * j));
    }
  }
  assert_int_equal(log_lines(0), lines0 + 3);
  assert_int_equal(log_lines(1), lines1 + 3);
  // Both workers passed the cancelled stamps in their turns, as the controller gave them.
  static stamp_t rec[2 * LAUNCHES + KEPT + 16];
  assert_int_equal(records_agree(s.info->devices[0]->island, NUM_CLIENTS * LAUNCHES + 1, rec,
                                 2 * LAUNCHES + KEPT + 16),
                   2 * LAUNCHES + KEPT + 5);
  cw_test_session_close(&s);
}

// The whole island restarts: once every member is dead, same-name workers
// (fresh plugin processes, a fresh gang directory) take their places. The
// island counts its stamps from 1 again, its old programs ask to be
// compiled again, and new sessions run on it as before.
static void test_the_whole_island_restarts(void** state) {
  (void)state;
  cw_test_session_t* old = &g.loss;  // its program 4 ran on the island before gang1 died
  assert_non_null(old->ctl);
  Causeway__V1__ExeInfoRequest ei = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  ei.exe_id = 4;
  expect_error(cw_test_call(old->ctl, CW_MSG_EXE_INFO, &ei.base, NULL), CW_UNAVAILABLE,
               "gang1", "EXE_INFO of an island program while gang1 is dead");
  assert_int_equal(cw_test_worker_kill(&g.gang[0]), 128 + SIGKILL);  // now every member
  static stamp_t before[8 * LAUNCHES];
  size_t ctl_before = stamps_of(g.ctl_address, old->info->devices[0]->island, true, before,
                                8 * LAUNCHES);
  char fresh[256];
  assert_int_equal(cw_test_tempdir_create("cw-island2", fresh, sizeof(fresh)), 0);
  char first[256];
  snprintf(first, sizeof(first), "%s", g.dir);
  snprintf(g.dir, sizeof(g.dir), "%s", fresh);  // the new process group's
  assert_int_equal(start_gang_worker(1), 0);  // either order works
  assert_int_equal(start_gang_worker(0), 0);
  cw_test_tempdir_remove(first);
  // Both took their slots back.
  for (int64_t end = cw_time_now_ms() + 20000;; cw_test_sleep_ms(100)) {
    Causeway__V1__AdminStatus* st = admin_status();
    size_t alive = 0;
    for (size_t i = 0; i < st->n_workers; ++i) {
      alive += !strncmp(st->workers[i]->name, "gang", 4) && !strcmp(st->workers[i]->state,
                                                                    "alive");
    }
    size_t n_workers = st->n_workers;
    protobuf_c_message_free_unpacked(&st->base, NULL);
    assert_int_equal(n_workers, 3);  // no new slots
    if (alive == 2) break;
    if (cw_time_now_ms() > end) fail_msg("the island's workers did not take their places back");
  }
  // The old session, once it rejoined the new workers (as a client does on
  // WORKER_UP), hears that its program must be compiled again.
  for (size_t i = 0; i < old->info->n_workers; ++i) {
    const Causeway__V1__WorkerInfo* w = old->info->workers[i];
    if (strncmp(w->name, "gang", 4) != 0) continue;
    Causeway__V1__HealthRejoinRequest rj = CAUSEWAY__V1__HEALTH_REJOIN_REQUEST__INIT;
    rj.worker_index = w->index;
    rj.incarnation = w->incarnation + 1;
    ASSERT_OK(cw_test_call(old->ctl, CW_MSG_HEALTH_REJOIN, &rj.base, NULL));
  }
  expect_error(cw_test_call(old->ctl, CW_MSG_EXE_INFO, &ei.base, NULL), CW_UNAVAILABLE,
               "restarted", "EXE_INFO of a program of the restarted island");
  cw_test_session_close(old);
  // New sessions run on it, in one order again from stamp 1.
  client_t clients[2];
  run_clients(clients, 20, 2, "n");
  // The controller's record holds the island's earlier count too.
  static stamp_t want[8 * LAUNCHES];
  size_t n = records_agree(clients[0].island, 0, want, 8 * LAUNCHES);
  assert_int_equal(n, 2 * LAUNCHES);
  logs_agree(0, want, n, clients, 2);
  fprintf(stderr, "restarted island: %zu stamps from 1 (the controller had %zu before), both "
          "new workers and both new plugin processes followed them\n", n, ctl_before);
}

// The client (cw_plugin_execute.c, cw_plugin_executable.c) numbers an
// island program's LAUNCH and DELETE, as every request to a worker, with the
// seq of the worker of the program's first device, and the controller
// relays them. It relayed the LAUNCH's parts with seq 0: that worker never
// saw the seq, and the session's later ordered requests there waited for it
// for ever. It relayed the DELETE to every member with that seq: another
// numbering at the others. The same for `session_life`, which goes with
// the seq (h3 of session 50).
static atomic_int g_seq_code = -1;  // the status code of send_wait's request

static void seq_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  atomic_store(&g_seq_code, (int)cw_status_code(status));
  cw_status_free(status);
}

// Sends m on c; its reply's status code, or -1 when none came within 10 s.
static int send_wait(cw_client_t* c, uint16_t type, const ProtobufCMessage* m) {
  atomic_store(&g_seq_code, -1);
  ASSERT_OK(cw_client_send(c, type, m, NULL, 0, NULL, seq_done, NULL, NULL));
  for (int64_t end = cw_time_now_ms() + 10000; atomic_load(&g_seq_code) < 0;
       cw_test_sleep_ms(20)) {
    if (cw_time_now_ms() > end) return -1;
  }
  return atomic_load(&g_seq_code);
}

static void test_an_island_program_keeps_its_seqs(void** state) {
  (void)state;
  cw_test_session_t s;
  const char* workers[] = {"gang0", "gang1"};
  ASSERT_OK(session_open(&s, "island-seq", workers, 2, DEVS, 0));
  int64_t ids[DEVS];
  gang_ids(&s, false, ids);
  ASSERT_OK(compile_gang(&s, 7, "seq", ids, DEVS));
  uint64_t ins[DEVS], outs[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    float data[N];
    for (int j = 0; j < N; ++j) data[j] = (float)(d + j);
    ins[d] = 300 + (uint64_t)d;
    outs[d] = 400 + (uint64_t)d;
    ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], ins[d], data, N));
  }
  ASSERT_OK(cw_test_session_flush(&s));  // unordered: seq 1 comes next at each worker
  Causeway__V1__IdList al[DEVS], ol[DEVS];
  Causeway__V1__IdList* ap[DEVS];
  Causeway__V1__IdList* op[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    causeway__v1__id_list__init(&al[d]);
    causeway__v1__id_list__init(&ol[d]);
    al[d].ids = &ins[d];
    al[d].n_ids = 1;
    ol[d].ids = &outs[d];
    ol[d].n_ids = 1;
    ap[d] = &al[d];
    op[d] = &ol[d];
  }
  Causeway__V1__LaunchRequest l = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  l.exe_id = 7;
  l.args = ap;
  l.n_args = DEVS;
  l.outputs = op;
  l.n_outputs = DEVS;
  l.seq = 1;  // gang0's: the worker of ids[0]
  ASSERT_OK(cw_test_call(s.ctl, CW_MSG_LAUNCH, &l.base, NULL));
  cw_client_t* link[2] = {NULL, NULL};
  int local = 0;
  ASSERT_OK(cw_test_session_locate(&s, ids[0], &link[0], &local));
  ASSERT_OK(cw_test_session_locate(&s, ids[DEVS - 1], &link[1], &local));
  Causeway__V1__DeleteRequest fill = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  fill.seq = 2;
  if (send_wait(link[0], CW_MSG_DELETE, &fill.base) != 0) {
    fail_msg("the DELETE with seq 2 on gang0 was not answered, or failed");
  }
  for (int d = 0; d < DEVS; ++d) {
    float got[N];
    ASSERT_OK(cw_test_session_download_f32(&s, ids[d], outs[d], got, N));
    for (int j = 0; j < N; ++j) assert_true(got[j] == (float)(0 + 1 + 2 + 3 + 4 * j));
  }
  // The life of the session at gang0 its seq is of (session_life) goes with
  // the seq to gang0's part alone: a wrong one fails the launch there and
  // takes no seq; gang0's own passes gang1 (another life, another key).
  uint64_t key0 = cw_client_session_key(link[0]);
  assert_int_not_equal(key0, 0);
  uint64_t outs2[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    outs2[d] = 500 + (uint64_t)d;
    ol[d].ids = &outs2[d];
  }
  l.seq = 3;
  l.session_life = key0 ^ 1;
  int code = send_wait(s.ctl, CW_MSG_LAUNCH, &l.base);
  if (code <= 0) fail_msg("a LAUNCH of another life was answered %d", code);
  for (int d = 0; d < DEVS; ++d) outs2[d] = 700 + (uint64_t)d;
  l.session_life = key0;
  if (send_wait(s.ctl, CW_MSG_LAUNCH, &l.base) != 0) {
    fail_msg("the LAUNCH with gang0's life and seq 3 was not answered, or failed");
  }
  // gang1's seqs behind gang0's: the DELETE's seq 4 is gang0's alone.
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  uint64_t exe = 7;
  del.ids = &exe;
  del.n_ids = 1;
  del.seq = 4;
  del.session_life = key0;
  if (send_wait(s.ctl, CW_MSG_DELETE, &del.base) != 0) {
    fail_msg("the DELETE of the island program was not answered, or failed");
  }
  // Its life goes with the seq: one of another life is refused at gang0 and
  // takes no seq there (at gang1, unordered, its part deletes the program).
  exe = 8;
  ASSERT_OK(compile_gang(&s, exe, "seq2", ids, DEVS));
  del.seq = 5;
  del.session_life = key0 ^ 1;
  code = send_wait(s.ctl, CW_MSG_DELETE, &del.base);
  if (code <= 0) fail_msg("a DELETE of another life was answered %d", code);
  fill.seq = 1;
  if (send_wait(link[1], CW_MSG_DELETE, &fill.base) != 0) {
    fail_msg("the DELETE with seq 1 on gang1 was not answered, or failed");
  }
  fill.seq = 5;
  if (send_wait(link[0], CW_MSG_DELETE, &fill.base) != 0) {
    fail_msg("the DELETE with seq 4 on gang0 was not answered, or failed");
  }
  cw_test_session_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sessions_share_the_island_in_one_order),
      cmocka_unit_test(test_bad_placements_and_launches),
      cmocka_unit_test(test_controller_restart_keeps_the_island_in_order),
      cmocka_unit_test(test_a_part_refused_on_one_member_cancels_the_others),
      cmocka_unit_test(test_losing_a_member_fails_the_island_only),
      cmocka_unit_test(test_status_lists_the_island_and_refuses_misfits),
      cmocka_unit_test(test_the_whole_island_restarts),
      cmocka_unit_test(test_an_island_program_keeps_its_seqs),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
