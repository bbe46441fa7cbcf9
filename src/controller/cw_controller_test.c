// Controller integration test: a real causeway-controller and two real
// causeway-worker daemons (XLA's CPU plugin, 4 devices each) that register
// with it (--controller), driven through the C client library like the PJRT
// plugin drives them. Programs come from tests/gen_programs.py (the
// `programs` fixture); the 4-device SPMD case is re-addressed to global
// device ids with cw_xla_options_rewrite_devices.
//
// Checked: OPEN_SESSION lists 8 global devices on 2 islands; a compile for
// global devices 4..7 lands on worker B with local ids; an identical compile
// is a cache hit; a program spanning islands is refused naming both; upload
// (direct, seq 1..8), launch (via the controller, seq 9) and download
// (direct, seq 10..17) sent back to back give stock JAX's numbers; killing a
// worker fails its pending relayed launch with UNAVAILABLE naming it and
// sends an EVENT; a client's disconnect frees its session on the workers;
// --watch-fd makes both daemons exit 0; launches past the island's cap on
// outstanding ones are counted in ADMIN_STATUS's island queue; a session that
// sends 40 distinct COMPILEs and leaves has most of them dropped unsent, and
// compiles go on for others; SIGTERM exits 0 (ASan: no leaks).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cw_client.h"
#include "cw_test_util.h"
#include "cw_xla_options.h"

#define DEVS 4     // per worker
#define NARGS 2
#define NOUTS 2

#define ASSERT_OK CW_TEST_ASSERT_OK

typedef struct blob_s {
  void* data;
  size_t size;
} blob_t;

typedef struct array_s {
  int dtype;
  size_t rank;
  int64_t dims[4];
  blob_t bytes;
} array_t;

static struct {
  char programs_dir[512];
  char tmpdir[512];
  cw_test_process_t ctl;
  char ctl_address[512];
  cw_test_worker_t a, b;
  blob_t program;       // spmd4_f32: 4 devices, local ids 0..3
  blob_t options;
  array_t in[DEVS][NARGS];
  array_t out[DEVS][NOUTS];
  cw_client_t* client;  // to the controller
  uint64_t session;
  pthread_mutex_t mu;
  int events_down;
  char last_event[512];
  uint64_t next_id;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t new_id(void) { return ++g.next_id; }

static void free_msg(void* msg) {
  if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage*)msg, NULL);
}

// ---- Programs ------------------------------------------------------------------

static int load_blob(const char* file, blob_t* out) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", g.programs_dir, file);
  return cw_test_read_file(path, &out->data, &out->size);
}

// Reads the spmd4_f32 case of the manifest.
static int load_case(void) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/manifest.txt", g.programs_dir);
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot open %s (run the gen_programs fixture)\n", path);
    return -1;
  }
  char line[1024];
  bool in_case = false;
  int nin[DEVS] = {0}, nout[DEVS] = {0};
  int rc = -1;
  while (fgets(line, sizeof(line), f)) {
    char prog[256], opts[256], dims[128], file[256];
    int dev, dtype;
    if (sscanf(line, "case spmd4_f32 devices 4 format text program %255s options %255s", prog,
               opts) == 2) {
      in_case = true;
      if (load_blob(prog, &g.program) || load_blob(opts, &g.options)) break;
      continue;
    }
    if (!in_case) continue;
    if (!strncmp(line, "end", 3)) {
      rc = 0;
      break;
    }
    bool is_in = !strncmp(line, "in ", 3);
    if (sscanf(line + (is_in ? 3 : 4), "%d %d %127s %255s", &dev, &dtype, dims, file) != 4 ||
        dev < 0 || dev >= DEVS) {
      break;
    }
    array_t* a = is_in ? &g.in[dev][nin[dev]++] : &g.out[dev][nout[dev]++];
    if (nin[dev] > NARGS || nout[dev] > NOUTS) break;
    a->dtype = dtype;
    a->rank = 0;
    for (char* tok = strtok(dims, ","); tok && strcmp(tok, "-") && a->rank < 4;
         tok = strtok(NULL, ",")) {
      a->dims[a->rank++] = atoll(tok);
    }
    if (load_blob(file, &a->bytes)) break;
  }
  fclose(f);
  if (rc) fprintf(stderr, "spmd4_f32 not found or malformed in %s\n", path);
  return rc;
}

// The case's options with local device d renamed to first + d.
static void options_for(int64_t first, blob_t* out) {
  int64_t map[DEVS];
  for (int d = 0; d < DEVS; ++d) map[d] = first + d;
  uint8_t* data = NULL;
  size_t size = 0;
  ASSERT_OK(cw_xla_options_rewrite_devices(g.options.data, g.options.size, map, DEVS, &data,
                                           &size));
  out->data = data;
  out->size = size;
}

// ---- Processes -------------------------------------------------------------------

static void on_event(void* user, const ProtobufCMessage* msg) {
  const Causeway__V1__ClusterEvent* ev = (const Causeway__V1__ClusterEvent*)msg;
  pthread_mutex_lock(&g.mu);
  if (ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__WORKER_DOWN) g.events_down++;
  snprintf(g.last_event, sizeof(g.last_event), "kind %d worker %u %s: %s", ev->kind,
           ev->worker_index, ev->worker_name, ev->message);
  pthread_mutex_unlock(&g.mu);
}

// The island window test_island_queue_is_counted fills (not the default).
#define SCHED_WINDOW 32

static int start_controller(void) {
  static const char* const args[] = {"--sched-window", "32", NULL};  // SCHED_WINDOW
  return cw_test_controller_start(args, &g.ctl, g.ctl_address, sizeof(g.ctl_address));
}

static int start_worker(const char* name, const char* listen, cw_test_worker_t* out) {
  const char* extra[] = {"--controller", g.ctl_address, NULL};
  cw_test_worker_options_t o = {.devices = DEVS, .listen = listen, .name = name,
                                .extra_args = extra};
  return cw_test_worker_start(&o, out) ? -1 : 0;
}

static cw_status_t connect_to(const char* address, const char* name, uint64_t session,
                              cw_client_t** out) {
  cw_client_options_t o = {.peer_name = name, .session_id = session, .on_event = on_event};
  return cw_client_connect(address, &o, out);
}

static Causeway__V1__SessionInfo* open_session(cw_client_t* c, uint32_t min_workers,
                                               uint32_t wait_ms, cw_status_t* out_status) {
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = min_workers;
  req.wait_ms = wait_ms;
  ProtobufCMessage* rep = NULL;
  *out_status = cw_client_call(c, CW_MSG_OPEN_SESSION, &req.base, NULL, 0, NULL, &rep, NULL);
  return (Causeway__V1__SessionInfo*)rep;
}

static cw_status_t compile(cw_client_t* c, uint64_t exe_id, const blob_t* options,
                           Causeway__V1__CompileReply** out_reply) {
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = exe_id;
  req.format = (char*)"mlir";
  req.code.data = g.program.data;
  req.code.len = g.program.size;
  req.compile_options.data = options->data;
  req.compile_options.len = options->size;
  return cw_client_call(c, CW_MSG_COMPILE, &req.base, NULL, 0, NULL,
                        (ProtobufCMessage**)out_reply, NULL);
}

static Causeway__V1__Stats* stats_of(cw_client_t* c) {
  Causeway__V1__Stats* st = NULL;
  ASSERT_OK(cw_client_stats(c, &st));
  return st;
}

// ---- Setup ---------------------------------------------------------------------

static int group_setup(void** state) {
  signal(SIGPIPE, SIG_IGN);
  const char* dir = getenv("CW_PROGRAMS_DIR");
  snprintf(g.programs_dir, sizeof(g.programs_dir), "%s",
           dir && dir[0] ? dir : "programs");
  g.next_id = 5000;
  if (load_case() != 0) return -1;
  if (cw_test_tempdir_create("cw-ctl", g.tmpdir, sizeof(g.tmpdir)) != 0) return -1;
  int64_t t0 = cw_time_now_ms();
  if (start_controller() != 0) return -1;
  char sock[600];
  snprintf(sock, sizeof(sock), "%s/b.sock", g.tmpdir);
  // A registers first, so it is worker 0 (devices 0-3) and B worker 1 (4-7).
  if (start_worker("worker-a", "127.0.0.1:0", &g.a) != 0) return -1;
  cw_client_t* probe = NULL;
  cw_status_t st = connect_to(g.ctl_address, "probe", 0, &probe);
  if (!st) {
    Causeway__V1__SessionInfo* info = open_session(probe, 1, 30000, &st);
    free_msg(info);
  }
  cw_client_release(probe);
  if (st) {
    fprintf(stderr, "worker-a did not register: %s\n", cw_status_message(st));
    cw_status_free(st);
    return -1;
  }
  if (start_worker("worker-b", sock, &g.b) != 0) return -1;
  fprintf(stderr, "controller %s, workers %s and %s up in %lld ms\n", g.ctl_address,
          g.a.address, g.b.address, (long long)(cw_time_now_ms() - t0));
  st = connect_to(g.ctl_address, "ctl-test", 0, &g.client);
  if (st) {
    fprintf(stderr, "connect: %s\n", cw_status_message(st));
    cw_status_free(st);
    return -1;
  }
  g.session = cw_client_session_id(g.client);
  return 0;
}

static int group_teardown(void** state) {
  cw_client_release(g.client);
  int rc = 0;
  // SIGTERM must give exit 0 (under ASan: no leaks).
  if (g.b.process.pid && cw_test_worker_stop(&g.b, 30000) != 0) rc = -1;
  if (g.a.process.pid && cw_test_worker_stop(&g.a, 30000) != 0) rc = -1;
  if (g.ctl.pid) {
    int code = cw_test_process_stop(&g.ctl, 30000);
    if (code != 0) {
      fprintf(stderr, "controller exited with %d\n", code);
      rc = -1;
    }
  }
  free(g.program.data);
  free(g.options.data);
  for (int d = 0; d < DEVS; ++d) {
    for (int i = 0; i < NARGS; ++i) free(g.in[d][i].bytes.data);
    for (int i = 0; i < NOUTS; ++i) free(g.out[d][i].bytes.data);
  }
  cw_test_tempdir_remove(g.tmpdir);
  return rc;
}

// ---- Tests -----------------------------------------------------------------------

static void test_open_session(void** state) {
  cw_status_t st;
  Causeway__V1__SessionInfo* info = open_session(g.client, 2, 30000, &st);
  ASSERT_OK(st);
  assert_int_equal(info->session_id, g.session);
  assert_int_equal(info->n_workers, 2);
  assert_int_equal(info->n_devices, 2 * DEVS);
  assert_non_null(info->platform_name);
  assert_true(info->n_plugin_attributes > 0);
  for (size_t i = 0; i < info->n_devices; ++i) {
    const Causeway__V1__GlobalDevice* d = info->devices[i];
    assert_int_equal(d->global_id, (int)i);
    assert_int_equal(d->worker_index, i / DEVS);
    assert_int_equal(d->island, i / DEVS);
    assert_int_equal(d->device->local_id, (int)(i % DEVS));
  }
  assert_string_equal(info->workers[0]->name, "worker-a");
  assert_string_equal(info->workers[1]->name, "worker-b");
  assert_string_equal(info->workers[1]->address, g.b.address);
  fprintf(stderr, "  session %llu: %s %s, %zu devices on %zu islands\n",
          (unsigned long long)info->session_id, info->platform_name, info->platform_version,
          info->n_devices, info->n_workers);
  free_msg(info);

  // Waiting for more workers than there are ends with who is there.
  cw_client_t* other = NULL;
  ASSERT_OK(connect_to(g.ctl_address, "impatient", 0, &other));
  info = open_session(other, 3, 200, &st);
  assert_null(info);
  assert_int_equal(cw_status_code(st), CW_DEADLINE_EXCEEDED);
  fprintf(stderr, "  3 workers: %s\n", cw_status_message(st));
  assert_non_null(strstr(cw_status_message(st), "worker-b"));
  cw_status_free(st);
  // A weight past CW_SCHED_MAX_WEIGHT is refused, naming it (the scheduler
  // counts one as the largest; past 2^20 its stride was 0).
  Causeway__V1__OpenSessionRequest heavy = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  heavy.num_devices = 1;
  heavy.share = true;
  heavy.weight = 5000;
  ProtobufCMessage* rep = NULL;
  st = cw_client_call(other, CW_MSG_OPEN_SESSION, &heavy.base, NULL, 0, NULL, &rep, NULL);
  assert_null(rep);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_non_null(strstr(cw_status_message(st), "weight 5000 is outside [1, 1000]"));
  cw_status_free(st);
  cw_client_release(other);
}

static uint64_t g_exe_b;  // compiled for global devices 4..7

static void test_compile_on_island_and_cache(void** state) {
  blob_t opts;
  options_for(4, &opts);
  Causeway__V1__CompileReply* rep = NULL;
  int64_t t0 = cw_time_now_ms();
  g_exe_b = new_id();
  ASSERT_OK(compile(g.client, g_exe_b, &opts, &rep));
  int64_t miss_ms = cw_time_now_ms() - t0;
  assert_non_null(rep->info);
  assert_int_equal(rep->num_outputs, NOUTS);
  assert_int_equal(rep->info->worker_index, 1);
  assert_int_equal(rep->info->island, 1);
  assert_false(rep->info->cache_hit);
  assert_int_equal(rep->info->n_devices, DEVS);
  for (int d = 0; d < DEVS; ++d) assert_int_equal(rep->info->devices[d], 4 + d);
  assert_int_equal(rep->info->n_output_dtypes, NOUTS);
  free_msg(rep);

  // The same program and devices again: served from the cache.
  t0 = cw_time_now_ms();
  uint64_t again = new_id();
  ASSERT_OK(compile(g.client, again, &opts, &rep));
  int64_t hit_ms = cw_time_now_ms() - t0;
  assert_true(rep->info->cache_hit);
  assert_int_equal(rep->info->worker_index, 1);
  free_msg(rep);
  fprintf(stderr, "  compile: miss %lld ms, hit %lld ms\n", (long long)miss_ms,
          (long long)hit_ms);

  // DELETE through the controller.
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &again;
  del.n_ids = 1;
  ASSERT_OK(cw_client_call(g.client, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, NULL));
  cw_status_t st = cw_client_call(g.client, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, NULL);
  assert_int_equal(cw_status_code(st), CW_NOT_FOUND);
  cw_status_free(st);

  Causeway__V1__Stats* s = stats_of(g.client);
  assert_int_equal(s->workers, 2);
  assert_int_equal(s->cache_hits, 1);
  assert_int_equal(s->cache_misses, 1);
  assert_true(s->cache_bytes > 0);
  free_msg(s);
  free(opts.data);
}

// The controller sends a worker 8 COMPILEs at a time (CAUSEWAY_WORKER_COMPILES'
// default) and keeps the rest. A session that sends 40 distinct
// programs and leaves at once has those still kept dropped unsent; before,
// all 40 went to the worker, which compiled each for nobody. Compiles go on
// for the sessions still there.
static void on_compile_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)user;
  (void)reply;
  cw_status_free(status);
}

// A COMPILE of the case's program with `tag` as a comment at its end, in
// `code` (room for the program and 64 bytes): distinct programs, so no cache
// hit and no shared compile.
static void variant_request(Causeway__V1__CompileRequest* req, char* code, const char* tag,
                            const blob_t* opts) {
  memcpy(code, g.program.data, g.program.size);
  int n = snprintf(code + g.program.size, 64, "\n// %s\n", tag);
  causeway__v1__compile_request__init(req);
  req->exe_id = new_id();
  req->format = (char*)"mlir";
  req->code.data = (uint8_t*)code;
  req->code.len = g.program.size + (size_t)n;
  req->compile_options.data = opts->data;
  req->compile_options.len = opts->size;
}

static void test_compiles_of_a_leaving_session_dropped(void** state) {
  enum { N = 40, AT_ONCE = 8 };
  Causeway__V1__Stats* s0 = stats_of(g.client);
  uint64_t sent0 = s0->compiles_sent, dropped0 = s0->compiles_dropped;
  free_msg(s0);
  blob_t opts;
  options_for(0, &opts);  // worker A's devices
  size_t room = g.program.size + 64;
  char* code = malloc(room);
  assert_non_null(code);
  cw_client_t* leaver = NULL;
  ASSERT_OK(connect_to(g.ctl_address, "leaver", 0, &leaver));
  for (int i = 0; i < N; ++i) {
    char tag[48];
    snprintf(tag, sizeof(tag), "variant %d of a leaving session", i);
    Causeway__V1__CompileRequest req;
    variant_request(&req, code, tag, &opts);
    ASSERT_OK(cw_client_send(leaver, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, on_compile_done,
                             NULL, NULL));
  }
  cw_client_release(leaver);  // its session closes
  Causeway__V1__Stats* s = NULL;
  for (int i = 0; i < 200; ++i) {
    free_msg(s);
    s = stats_of(g.client);
    if (s->compiles_queued == 0 && s->compiles_dropped > dropped0) break;
    cw_test_sleep_ms(50);
  }
  uint64_t sent = s->compiles_sent - sent0, dropped = s->compiles_dropped - dropped0;
  fprintf(stderr, "  leaving session: %d COMPILEs, %llu sent to the worker, %llu dropped\n", N,
          (unsigned long long)sent, (unsigned long long)dropped);
  assert_int_equal(s->compiles_queued, 0);
  assert_int_equal(sent + dropped, N);
  // The session closed long before its first 8 compiled; a busy machine may
  // finish a few first, and each frees a place for another.
  assert_true(sent >= AT_ONCE && sent <= 2 * AT_ONCE);
  free_msg(s);

  // Others still compile: a program of their own, compiled by the worker.
  Causeway__V1__CompileRequest req;
  variant_request(&req, code, "after the leaving session", &opts);
  Causeway__V1__CompileReply* rep = NULL;
  ASSERT_OK(cw_client_call(g.client, CW_MSG_COMPILE, &req.base, NULL, 0, NULL,
                           (ProtobufCMessage**)&rep, NULL));
  assert_false(rep->info->cache_hit);
  assert_int_equal(rep->info->worker_index, 0);
  free_msg(rep);
  free(code);
  free(opts.data);
}

static void test_spanning_islands_refused(void** state) {
  blob_t opts;
  options_for(2, &opts);  // devices 2,3 on A and 4,5 on B
  Causeway__V1__CompileReply* rep = NULL;
  cw_status_t st = compile(g.client, new_id(), &opts, &rep);
  assert_null(rep);
  fprintf(stderr, "  spanning: %s\n", cw_status_message(st));
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  const char* m = cw_status_message(st);
  assert_non_null(strstr(m, "islands 0 (worker-a: devices 2-3) and 1 (worker-b: devices 4-5)"));
  assert_non_null(strstr(m, "jax.device_put"));
  cw_status_free(st);
  free(opts.data);
}

typedef struct done_s {
  pthread_mutex_t mu;
  int count;
  cw_status_t first_error;
} done_t;

static void on_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  done_t* d = user;
  pthread_mutex_lock(&d->mu);
  d->count++;
  if (status && !d->first_error) d->first_error = status;
  else cw_status_free(status);
  pthread_mutex_unlock(&d->mu);
}

// A LaunchRequest over DEVS devices; `l` points into `lb`.
typedef struct launch_buf_s {
  Causeway__V1__IdList args[DEVS], outs[DEVS];
  Causeway__V1__IdList* argp[DEVS];
  Causeway__V1__IdList* outp[DEVS];
  Causeway__V1__LaunchRequest l;
} launch_buf_t;

static void make_launch(launch_buf_t* lb, uint64_t exe, uint64_t in_ids[DEVS][NARGS],
                        uint64_t out_ids[DEVS][NOUTS], uint64_t seq) {
  for (int d = 0; d < DEVS; ++d) {
    causeway__v1__id_list__init(&lb->args[d]);
    causeway__v1__id_list__init(&lb->outs[d]);
    lb->args[d].ids = in_ids[d];
    lb->args[d].n_ids = NARGS;
    lb->outs[d].ids = out_ids[d];
    lb->outs[d].n_ids = NOUTS;
    lb->argp[d] = &lb->args[d];
    lb->outp[d] = &lb->outs[d];
  }
  causeway__v1__launch_request__init(&lb->l);
  lb->l.exe_id = exe;
  lb->l.args = lb->argp;
  lb->l.n_args = DEVS;
  lb->l.outputs = lb->outp;
  lb->l.n_outputs = DEVS;
  lb->l.seq = seq;
}

// upload (direct, seq 1..8) -> launch (controller, seq 9) -> download
// (direct, seq 10..17), all sent before any reply is read.
static void test_launch_relay_with_seq(void** state) {
  cw_client_t* wb = NULL;
  ASSERT_OK(connect_to(g.b.address, "ctl-test-direct", g.session, &wb));
  assert_int_equal(cw_client_session_id(wb), g.session);
  uint64_t seq = 0;
  uint64_t in_ids[DEVS][NARGS], out_ids[DEVS][NOUTS];
  done_t done = {.mu = PTHREAD_MUTEX_INITIALIZER};
  int64_t t0 = cw_time_now_ms();
  for (int d = 0; d < DEVS; ++d) {
    for (int i = 0; i < NARGS; ++i) {
      const array_t* a = &g.in[d][i];
      in_ids[d][i] = new_id();
      Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
      up.buffer_id = in_ids[d][i];
      up.dtype = a->dtype;
      up.dims = (int64_t*)a->dims;
      up.n_dims = a->rank;
      up.device = d;
      up.seq = ++seq;
      struct iovec iov = {a->bytes.data, a->bytes.size};
      ASSERT_OK(cw_client_send(wb, CW_MSG_UPLOAD, &up.base, &iov, 1, NULL, on_done, &done,
                               NULL));
    }
  }
  for (int d = 0; d < DEVS; ++d) {
    for (int o = 0; o < NOUTS; ++o) out_ids[d][o] = new_id();
  }
  launch_buf_t lb;
  make_launch(&lb, g_exe_b, in_ids, out_ids, ++seq);
  uint64_t launch_rid = 0;
  ASSERT_OK(cw_client_send(g.client, CW_MSG_LAUNCH, &lb.l.base, NULL, 0, NULL, NULL, NULL,
                           &launch_rid));
  uint8_t got[DEVS][NOUTS][256];
  uint64_t dl_rid[DEVS][NOUTS];
  for (int d = 0; d < DEVS; ++d) {
    for (int o = 0; o < NOUTS; ++o) {
      Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
      dl.buffer_id = out_ids[d][o];
      dl.seq = ++seq;
      cw_client_sink_t sink = {.data = got[d][o], .capacity = sizeof(got[d][o])};
      ASSERT_OK(cw_client_send(wb, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, NULL, NULL,
                               &dl_rid[d][o]));
    }
  }
  ASSERT_OK(cw_client_wait(g.client, launch_rid, NULL, NULL));
  int64_t launched_ms = cw_time_now_ms() - t0;
  for (int d = 0; d < DEVS; ++d) {
    for (int o = 0; o < NOUTS; ++o) {
      uint64_t n = 0;
      ASSERT_OK(cw_client_wait(wb, dl_rid[d][o], NULL, &n));
      const array_t* want = &g.out[d][o];
      assert_int_equal(n, want->bytes.size);
      assert_memory_equal(got[d][o], want->bytes.data, want->bytes.size);
    }
  }
  fprintf(stderr, "  8 uploads + relayed launch + 8 downloads: %lld ms (launch acked at %lld)\n",
          (long long)(cw_time_now_ms() - t0), (long long)launched_ms);
  ASSERT_OK(cw_client_flush(wb));
  assert_int_equal(done.count, DEVS * NARGS);
  assert_null(done.first_error);

  // Relay latency: one-device launches chained through the controller.
  Causeway__V1__Stats* s = stats_of(g.client);
  assert_true(s->launches >= 1);
  free_msg(s);
  cw_client_release(wb);
}

// Stamped launches past the island's window (--sched-window) wait in
// the controller's island queue: ADMIN_STATUS counts them there. Runs last:
// it ends by killing worker B.
static void test_island_queue_is_counted(void** state) {
  cw_client_t* c = NULL;
  ASSERT_OK(connect_to(g.ctl_address, "queue-depth", 0, &c));
  uint64_t session = cw_client_session_id(c);
  blob_t opts;
  options_for(4, &opts);
  uint64_t exe = new_id();
  Causeway__V1__CompileReply* rep = NULL;
  ASSERT_OK(compile(c, exe, &opts, &rep));
  assert_int_equal(rep->info->worker_index, 1);
  free_msg(rep);
  free(opts.data);
  // Launches whose input never arrives: relayed, unanswered, outstanding.
  cw_client_t* wb = NULL;
  ASSERT_OK(connect_to(g.b.address, "queue-depth-b", session, &wb));
  uint64_t pending = new_id();
  ASSERT_OK(cw_client_expect(wb, pending, NULL, NULL));
  ASSERT_OK(cw_client_flush(wb));
  enum { LAUNCHES = SCHED_WINDOW + 8, CAP = SCHED_WINDOW };
  uint64_t rids[LAUNCHES];
  for (int i = 0; i < LAUNCHES; ++i) {
    uint64_t in_ids[DEVS][NARGS], out_ids[DEVS][NOUTS];
    for (int d = 0; d < DEVS; ++d) {
      for (int a = 0; a < NARGS; ++a) in_ids[d][a] = pending;
      for (int o = 0; o < NOUTS; ++o) out_ids[d][o] = new_id();
    }
    launch_buf_t lb;
    make_launch(&lb, exe, in_ids, out_ids, 0);
    ASSERT_OK(cw_client_send(c, CW_MSG_LAUNCH, &lb.l.base, NULL, 0, NULL, NULL, NULL, &rids[i]));
  }
  // Read after the launches on the same connection: all of them are queued
  // or relayed by then.
  Causeway__V1__AdminStatusRequest sreq = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  Causeway__V1__AdminStatus* st = NULL;
  ASSERT_OK(cw_client_call(c, CW_MSG_ADMIN_STATUS, &sreq.base, NULL, 0, NULL,
                           (ProtobufCMessage**)&st, NULL));
  const Causeway__V1__AdminIsland* island = NULL;
  for (size_t i = 0; i < st->n_islands; ++i) {
    if (st->islands[i]->index == 1) island = st->islands[i];
  }
  assert_non_null(island);
  fprintf(stderr, "  %d launches, island 1 queue: %llu, worker-b queue depth %llu\n", LAUNCHES,
          (unsigned long long)island->queued, (unsigned long long)st->workers[1]->queue_depth);
  assert_int_equal(island->queued, LAUNCHES - CAP);
  assert_true(st->workers[1]->queue_depth >= LAUNCHES - CAP);
  free_msg(st);
  // The worker goes (the last test): every launch fails, relayed or queued.
  assert_true(cw_test_worker_kill(&g.b) >= 0);
  for (int i = 0; i < LAUNCHES; ++i) {
    cw_status_t ls = cw_client_wait(c, rids[i], NULL, NULL);
    assert_int_equal(cw_status_code(ls), CW_UNAVAILABLE);
    cw_status_free(ls);
  }
  cw_client_release(wb);
  cw_client_release(c);
}

static void test_worker_loss(void** state) {
  // A program on A whose input never arrives: the relayed launch stays pending.
  blob_t opts;
  options_for(0, &opts);
  uint64_t exe = new_id();
  Causeway__V1__CompileReply* rep = NULL;
  ASSERT_OK(compile(g.client, exe, &opts, &rep));
  assert_int_equal(rep->info->worker_index, 0);
  free_msg(rep);
  free(opts.data);
  cw_client_t* wa = NULL;
  ASSERT_OK(connect_to(g.a.address, "ctl-test-a", g.session, &wa));
  uint64_t pending = new_id();
  ASSERT_OK(cw_client_expect(wa, pending, NULL, NULL));
  ASSERT_OK(cw_client_flush(wa));
  uint64_t in_ids[DEVS][NARGS], out_ids[DEVS][NOUTS];
  for (int d = 0; d < DEVS; ++d) {
    for (int i = 0; i < NARGS; ++i) in_ids[d][i] = pending;
    for (int o = 0; o < NOUTS; ++o) out_ids[d][o] = new_id();
  }
  launch_buf_t lb;
  make_launch(&lb, exe, in_ids, out_ids, 0);
  uint64_t rid = 0;
  ASSERT_OK(cw_client_send(g.client, CW_MSG_LAUNCH, &lb.l.base, NULL, 0, NULL, NULL, NULL, &rid));
  ASSERT_OK(cw_client_ping(g.client));  // the launch has reached the controller
  cw_test_sleep_ms(200);
  int64_t t0 = cw_time_now_ms();
  assert_true(cw_test_worker_kill(&g.a) >= 0);
  cw_status_t st = cw_client_wait(g.client, rid, NULL, NULL);
  int64_t ms = cw_time_now_ms() - t0;
  fprintf(stderr, "  after kill -9 (%lld ms): %s\n", (long long)ms, cw_status_message(st));
  assert_int_equal(cw_status_code(st), CW_UNAVAILABLE);
  assert_non_null(strstr(cw_status_message(st), "worker-a"));
  assert_true(ms < 10000);
  cw_status_free(st);
  for (int i = 0; i < 100; ++i) {
    pthread_mutex_lock(&g.mu);
    int n = g.events_down;
    pthread_mutex_unlock(&g.mu);
    if (n > 0) break;
    cw_test_sleep_ms(50);
  }
  pthread_mutex_lock(&g.mu);
  fprintf(stderr, "  event: %s\n", g.last_event);
  assert_true(g.events_down >= 1);
  assert_non_null(strstr(g.last_event, "worker-a"));
  pthread_mutex_unlock(&g.mu);
  cw_client_release(wa);
  // Later launches on A fail the same way; B carries on.
  Causeway__V1__Stats* s = stats_of(g.client);
  assert_int_equal(s->workers, 1);
  assert_int_equal(s->workers_dead, 1);
  free_msg(s);
}

static void test_disconnect_frees_session(void** state) {
  cw_client_t* probe = NULL;
  ASSERT_OK(connect_to(g.b.address, "stats-probe", 0, &probe));
  Causeway__V1__Stats* before = stats_of(probe);
  fprintf(stderr, "  worker B before: %llu sessions, %llu buffers, %llu executables\n",
          (unsigned long long)before->sessions, (unsigned long long)before->buffers,
          (unsigned long long)before->executables);
  assert_true(before->buffers > 0);
  uint64_t sessions_before = before->sessions;
  free_msg(before);
  cw_client_release(g.client);
  g.client = NULL;
  Causeway__V1__Stats* after = NULL;
  for (int i = 0; i < 100; ++i) {
    free_msg(after);
    after = stats_of(probe);
    if (after->buffers == 0 && after->sessions < sessions_before) break;
    cw_test_sleep_ms(50);
  }
  fprintf(stderr, "  worker B after: %llu sessions, %llu buffers, %llu executables\n",
          (unsigned long long)after->sessions, (unsigned long long)after->buffers,
          (unsigned long long)after->executables);
  assert_int_equal(after->buffers, 0);
  assert_true(after->sessions < sessions_before);
  free_msg(after);
  cw_client_release(probe);
}

// Starts `argv` with the read end of a pipe as descriptor 3; returns the
// write end in *out_fd.
static pid_t spawn_watched(const char* const* argv, int* out_fd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[0], 3);
    if (fds[0] != 3) close(fds[0]);
    close(fds[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);  // the listen line is not needed
    execv(argv[0], (char* const*)argv);
    _exit(127);
  }
  close(fds[0]);
  *out_fd = fds[1];
  return pid;
}

static int wait_exit(pid_t pid, int timeout_ms) {
  int64_t end = cw_time_now_ms() + timeout_ms;
  while (cw_time_now_ms() < end) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    cw_test_sleep_ms(20);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static void test_watch_fd(void** state) {
  const char* ctl_bin = cw_test_getenv("CW_CONTROLLER_BIN", "causeway-controller");
  const char* worker_bin = cw_test_getenv("CW_WORKER_BIN", "causeway-worker");
  char sock[600];
  snprintf(sock, sizeof(sock), "%s/watched-ctl.sock", g.tmpdir);
  const char* cargv[] = {ctl_bin, "--listen", sock, "--watch-fd", "3", NULL};
  int cfd = -1;
  pid_t cpid = spawn_watched(cargv, &cfd);
  assert_true(cpid > 0);
  const char* plugin = cw_test_getenv("CAUSEWAY_PJRT_PLUGIN", "");
  const char* wargv[] = {worker_bin, "--listen", "127.0.0.1:0", "--plugin", plugin,
                         "--devices", "1", "--controller", sock, "--exit-with-controller",
                         "--watch-fd", "3", NULL};
  int wfd = -1;
  pid_t wpid = spawn_watched(wargv, &wfd);
  assert_true(wpid > 0);
  // Both going: the worker registered with the controller (a session sees it).
  cw_client_t* c = NULL;
  cw_status_t st;
  int64_t until = cw_time_now_ms() + 30000;
  while ((st = connect_to(sock, "watch-fd", 0, &c)) != NULL && cw_time_now_ms() < until) {
    cw_status_free(st);
    cw_test_sleep_ms(20);
  }
  ASSERT_OK(st);
  free_msg(open_session(c, 1, 30000, &st));
  ASSERT_OK(st);
  cw_client_release(c);
  close(wfd);  // as if the parent died
  close(cfd);
  int wcode = wait_exit(wpid, 20000);
  int ccode = wait_exit(cpid, 20000);
  fprintf(stderr, "  watch-fd EOF: worker exit %d, controller exit %d\n", wcode, ccode);
  assert_int_equal(wcode, 0);
  assert_int_equal(ccode, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_session),
      cmocka_unit_test(test_compile_on_island_and_cache),
      cmocka_unit_test(test_spanning_islands_refused),
      cmocka_unit_test(test_compiles_of_a_leaving_session_dropped),
      cmocka_unit_test(test_launch_relay_with_seq),
      cmocka_unit_test(test_worker_loss),
      cmocka_unit_test(test_disconnect_frees_session),
      cmocka_unit_test(test_watch_fd),
      cmocka_unit_test(test_island_queue_is_counted),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
