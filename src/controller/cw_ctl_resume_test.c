// Resuming sessions after a controller restart, against a real
// causeway-controller: workers played by this test (REGISTER frames over the
// C client library) and, last, a real worker (XLA's CPU plugin) and a real
// restart.
//
// - REGISTER with `previous`: the worker gets its old global ids while no
//   slot holds any of them, else ids after every slot's;
// - SESSION_RESUME refusals: no devices, an id twice, an allocation that does
//   not match its device count, a name that is not printable, from a worker;
// - a resume waits for the workers it names to register (then SessionInfo
//   lists exactly its devices under its ids, holes and all), and fails with
//   DEADLINE_EXCEEDED naming the missing one after its wait_ms;
// - allocations come back: exclusive devices another session holds now are
//   refused (FAILED_PRECONDITION naming it), shared ones are shared again;
// - one wait per session: a second OPEN_SESSION while one waits for workers
//   or devices, or a second SESSION_RESUME while one waits, is refused;
// - a resume of 65,536 devices and 200,000 executables is answered at once;
// - a worker's REGISTER reports its drain and its paused sessions (what an
//   earlier controller set): the drain is taken (new sessions do not get
//   its devices, status says draining), a paused session is paused again
//   whether it resumes after the worker registered or joined before; more
//   than CW_MSG_MAX_PREVIOUS_SESSIONS ids are refused;
// - the hold: while sessions a worker's REGISTER reports have not resumed,
//   no new session gets that worker's devices (ALLOC_WAITING says how many
//   are left), so the resumes find their devices free; then it is granted
//   what is free; a request more than the registered workers can meet waits
//   until --resume-grace-ms after the last such REGISTER, then fails; a
//   worker that registered afresh is not held; a session is waited for once
//   (a worker reporting it again after a stall holds nothing up); REGISTERs
//   that report nothing new do not extend the hold; a resume waiting for a
//   late worker gets its devices before a new session waiting for them;
// - a real restart: the worker registers with the new controller under its
//   old ids, reporting the session its client is connected in (a new
//   request for its device waits for that resume); the client joins in its old session id, resumes with its
//   executable, which the worker still holds (EXE_INFO answered, nothing
//   compiled), and compiling an id the worker holds already (a LOAD of the
//   old controller whose reply was lost) succeeds without a second LOAD; a
//   replacement of that worker gets the program compiled here reloaded, and
//   the resumed one fails with "compile it again" until the client, told so
//   by its HEALTH_REJOIN's reply, sends that program again under its id;
// - a HEALTH_REJOIN whose EXE_INFO to the worker is still out when the
//   controller stops (SIGTERM) fails rather than wanting nothing; a second
//   one of that worker while the first's EXE_INFOs are out is refused;
// - SIGTERM: the controller exits 0 (under ASan: no leaks).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_client.h"
#include "cw_frame.h"
#include "cw_msg.h"
#include "cw_test_island.h"
#include "cw_test_util.h"

static struct {
  cw_test_process_t ctl;
  char address[512];
  cw_client_t* workers[64];  // fake workers' REGISTER connections
  size_t num_workers;
  int32_t next_id;  // past every fake worker's ids
} g;

static void expect_error(cw_status_t st, cw_status_code_t code, const char* text) {
  assert_non_null(st);
  fprintf(stderr, "  %s\n", cw_status_message(st));
  assert_int_equal(cw_status_code(st), code);
  if (!strstr(cw_status_message(st), text)) {
    fail_msg("'%s' lacks '%s'", cw_status_message(st), text);
  }
  cw_status_free(st);
}

// REGISTER of a fake worker `name` at `address` (NULL: "fake-NAME:1") with
// `devices` devices and `previous` (borrowed; NULL: none); *out_first (may
// be NULL): its first global id.
static cw_status_t fake_register_at(const char* name, const char* at, size_t devices,
                                    Causeway__V1__RegisterPrevious* previous, int32_t* out_first) {
  cw_client_options_t o = {.peer_name = "fake-worker", .role = CAUSEWAY__V1__ROLE__ROLE_WORKER};
  cw_client_t* c = NULL;
  assert_null(cw_client_connect(g.address, &o, &c));
  assert_true(g.num_workers < 64);
  g.workers[g.num_workers++] = c;
  char address[64];
  snprintf(address, sizeof(address), "%s", at ? at : "");
  if (!at) snprintf(address, sizeof(address), "fake-%s:1", name);
  Causeway__V1__RegisterReply* rep = NULL;
  CW_RETURN_IF_ERROR(cw_test_register_previous(c, name, address, devices, previous, &rep),
                     "worker %s", name);
  int32_t first = rep->first_device_id;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  if (first + (int32_t)devices > g.next_id) g.next_id = first + (int32_t)devices;
  if (out_first) *out_first = first;
  return cw_ok_status();
}

static cw_status_t fake_register(const char* name, size_t devices,
                                 Causeway__V1__RegisterPrevious* previous, int32_t* out_first) {
  return fake_register_at(name, NULL, devices, previous, out_first);
}

// A fake worker `name` with `devices` devices; previous < 0: none. Returns
// its first global device id.
static int32_t fake_worker(const char* name, size_t devices, int32_t previous) {
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = previous;
  int32_t first = 0;
  assert_null(fake_register(name, devices, previous >= 0 ? &prev : NULL, &first));
  return first;
}

static cw_client_t* client(uint64_t session_id) {
  cw_client_options_t o = {.peer_name = "resume-test", .session_id = session_id};
  cw_client_t* c = NULL;
  assert_null(cw_client_connect(g.address, &o, &c));
  if (session_id) assert_int_equal(cw_client_session_id(c), session_id);
  return c;
}

// LEASE_CHANGED events a client got (its reader thread writes them).
typedef struct lease_seen_s {
  atomic_int withdrawn;  // direct_launch false, for worker "c"
} lease_seen_t;

static void on_lease_event(void* user, const ProtobufCMessage* event) {
  const Causeway__V1__ClusterEvent* ev = (const Causeway__V1__ClusterEvent*)event;
  if (ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__LEASE_CHANGED && !ev->direct_launch &&
      ev->worker_name && strcmp(ev->worker_name, "c") == 0) {
    atomic_fetch_add(&((lease_seen_t*)user)->withdrawn, 1);
  }
}

typedef struct dev_s {
  int32_t id;
  const char* worker;
  int32_t local;
} rdev_t;

typedef struct resume_s {
  const rdev_t* devs;
  size_t n;
  uint32_t num_devices;  // allocated: this many (0: none)
  bool share;
  uint32_t weight;  // 0: unset (1)
  uint32_t wait_ms;
  const uint64_t* exes;  // each on devs[0]
  size_t num_exes;
} resume_t;

static void resume_request(const resume_t* r, Causeway__V1__SessionResumeRequest* req,
                           Causeway__V1__OpenSessionRequest* open,
                           Causeway__V1__ResumeDevice* devs, Causeway__V1__ResumeDevice** dptrs,
                           Causeway__V1__ResumeExecutable* exes,
                           Causeway__V1__ResumeExecutable** eptrs, int32_t* exe_dev) {
  causeway__v1__session_resume_request__init(req);
  causeway__v1__open_session_request__init(open);
  open->name = (char*)"resume-test";
  open->num_devices = r->num_devices;
  open->share = r->share;
  open->weight = r->weight;
  open->wait_ms = r->wait_ms;
  req->open = open;
  for (size_t i = 0; i < r->n; ++i) {
    causeway__v1__resume_device__init(&devs[i]);
    devs[i].id = r->devs[i].id;
    devs[i].worker_name = (char*)r->devs[i].worker;
    devs[i].local_id = r->devs[i].local;
    dptrs[i] = &devs[i];
  }
  req->devices = dptrs;
  req->n_devices = r->n;
  *exe_dev = r->n ? r->devs[0].id : 0;
  for (size_t i = 0; i < r->num_exes; ++i) {
    causeway__v1__resume_executable__init(&exes[i]);
    exes[i].exe_id = r->exes[i];
    exes[i].devices = exe_dev;
    exes[i].n_devices = 1;
    eptrs[i] = &exes[i];
  }
  req->executables = eptrs;
  req->n_executables = r->num_exes;
}

// Sends SESSION_RESUME; with out_id, only sends it (the reply is waited for
// with resume_wait).
static cw_status_t resume(cw_client_t* c, const resume_t* r, Causeway__V1__SessionInfo** out,
                          uint64_t* out_id) {
  Causeway__V1__SessionResumeRequest req;
  Causeway__V1__OpenSessionRequest open;
  Causeway__V1__ResumeDevice devs[8];
  Causeway__V1__ResumeDevice* dptrs[8];
  Causeway__V1__ResumeExecutable exes[4];
  Causeway__V1__ResumeExecutable* eptrs[4];
  int32_t exe_dev;
  assert_true(r->n <= 8 && r->num_exes <= 4);
  resume_request(r, &req, &open, devs, dptrs, exes, eptrs, &exe_dev);
  if (out_id) return cw_client_send(c, CW_MSG_SESSION_RESUME, &req.base, NULL, 0, NULL, NULL, NULL,
                                    out_id);
  ProtobufCMessage* reply = NULL;
  cw_status_t st = cw_client_call(c, CW_MSG_SESSION_RESUME, &req.base, NULL, 0, NULL, &reply,
                                  NULL);
  if (out) *out = (Causeway__V1__SessionInfo*)reply;
  else if (reply) protobuf_c_message_free_unpacked(reply, NULL);
  return st;
}

// The device with session id `id` in `info` and its worker's name.
static const Causeway__V1__GlobalDevice* info_device(const Causeway__V1__SessionInfo* info,
                                                     int32_t id, const char** out_worker) {
  for (size_t i = 0; i < info->n_devices; ++i) {
    if (info->devices[i]->global_id != id) continue;
    for (size_t k = 0; k < info->n_workers; ++k) {
      if (info->workers[k]->index == info->devices[i]->worker_index) {
        *out_worker = info->workers[k]->name;
      }
    }
    return info->devices[i];
  }
  return NULL;
}

static void expect_device(const Causeway__V1__SessionInfo* info, int32_t id, const char* worker,
                          int32_t local) {
  const char* name = NULL;
  const Causeway__V1__GlobalDevice* d = info_device(info, id, &name);
  assert_non_null(d);
  assert_non_null(name);
  assert_string_equal(name, worker);
  assert_int_equal(d->device->local_id, local);
}

// REGISTER of a fake worker `name` (2 devices, new ids) with `draining` and
// paused sessions ids[0..n).
static cw_status_t register_reporting(const char* name, bool draining, uint64_t* ids, size_t n) {
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = -1;
  prev.draining = draining;
  prev.paused_sessions = ids;
  prev.n_paused_sessions = n;
  return fake_register(name, 2, &prev, NULL);
}

// A fake worker `name` with 2 devices whose REGISTER reports the sessions
// clients are connected in (RegisterPrevious.sessions). Its address refuses
// at once (a name to resolve would hold the controller's links).
static cw_status_t register_connected(const char* name, uint64_t* ids, size_t n) {
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = -1;
  prev.sessions = ids;
  prev.n_sessions = n;
  return fake_register_at(name, "127.0.0.1:1", 2, &prev, NULL);
}

// The last ALLOC_WAITING message a client was sent, and whether it was
// sent ALLOC_GRANTED (its reader writes them).
typedef struct waiting_s {
  pthread_mutex_t mu;
  char text[512];
  atomic_bool granted;
} waiting_t;

static void on_waiting_event(void* user, const ProtobufCMessage* event) {
  const Causeway__V1__ClusterEvent* ev = (const Causeway__V1__ClusterEvent*)event;
  waiting_t* w = user;
  if (ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__ALLOC_GRANTED) atomic_store(&w->granted, true);
  if (ev->kind != CAUSEWAY__V1__CLUSTER_EVENT__KIND__ALLOC_WAITING || !ev->message) return;
  pthread_mutex_lock(&w->mu);
  snprintf(w->text, sizeof(w->text), "%s", ev->message);
  pthread_mutex_unlock(&w->mu);
}

// A client whose ALLOC_WAITING/ALLOC_GRANTED events land in `w`.
static cw_client_t* watched_client(waiting_t* w) {
  pthread_mutex_init(&w->mu, NULL);
  w->text[0] = '\0';
  atomic_init(&w->granted, false);
  cw_client_options_t o = {.peer_name = "resume-test", .on_event = on_waiting_event,
                           .event_user = w};
  cw_client_t* c = NULL;
  assert_null(cw_client_connect(g.address, &o, &c));
  return c;
}

// Asserts the client was sent no ALLOC_WAITING.
static void expect_no_waiting(waiting_t* w) {
  pthread_mutex_lock(&w->mu);
  if (w->text[0]) fail_msg("the client was told '%s'", w->text);
  pthread_mutex_unlock(&w->mu);
}

// Waits up to 10 s for the client's last ALLOC_WAITING to contain `text`.
static void expect_waiting(waiting_t* w, const char* text) {
  char seen[512];
  for (int i = 0;; ++i) {
    pthread_mutex_lock(&w->mu);
    snprintf(seen, sizeof(seen), "%s", w->text);
    pthread_mutex_unlock(&w->mu);
    if (strstr(seen, text)) break;
    if (i == 1000) fail_msg("waiting message '%s' lacks '%s'", seen, text);
    cw_test_sleep_ms(10);
  }
  fprintf(stderr, "  %s\n", seen);
}

// OPEN_SESSION for `num_devices` of worker `worker`, without waiting.
static uint64_t open_for_devices(cw_client_t* c, const char* worker, uint32_t num_devices,
                                 bool share) {
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.workers = (char*[]){(char*)worker};
  open.n_workers = 1;
  open.num_devices = num_devices;
  open.share = share;
  uint64_t rid = 0;
  assert_null(cw_client_send(c, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, NULL, NULL,
                             &rid));
  return rid;
}

// ADMIN_STATUS: whether session `id` is listed paused; the state of worker `name`.
static bool status_paused(cw_client_t* c, uint64_t id, const char* name, char* state, size_t n) {
  Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  Causeway__V1__AdminStatus* rep = NULL;
  assert_null(cw_client_call(c, CW_MSG_ADMIN_STATUS, &req.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&rep, NULL));
  bool paused = false, listed = false;
  for (size_t i = 0; i < rep->n_sessions; ++i) {
    if (rep->sessions[i]->session_id != id) continue;
    listed = true;
    paused = rep->sessions[i]->paused;
  }
  assert_true(listed);
  state[0] = 0;
  for (size_t i = 0; i < rep->n_workers; ++i) {
    if (!strcmp(rep->workers[i]->name, name)) snprintf(state, n, "%s", rep->workers[i]->state);
  }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return paused;
}

static int setup(void** state) {
  (void)state;
  // Fake workers send no heartbeats: they live as long as the tests need.
  const char* args[] = {"--resume-grace-ms", "3000", "--worker-timeout-ms", "60000", NULL};
  return cw_test_controller_start(args, &g.ctl, g.address, sizeof(g.address)) == 0 ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_workers; ++i) cw_client_release(g.workers[i]);
  g.num_workers = 0;
  return cw_test_process_stop(&g.ctl, 30000) == 0 ? 0 : -1;
}

static void test_register_keeps_ids(void** state) {
  (void)state;
  assert_int_equal(fake_worker("a", 2, 4), 4);  // its old ids, though they come first
  assert_int_equal(fake_worker("b", 2, 0), 0);
  assert_int_equal(fake_worker("c", 2, 5), 6);  // 5 is a's: after every slot's
  assert_int_equal(fake_worker("d", 1, -1), 8);
  // Old ids past what a full fleet could have had are not taken: a compile
  // sizes its map of ids by the largest (a review's COMPILE took a minute).
  assert_int_equal(fake_worker("far", 1, 1 << 29), 9);
  // A new session numbers devices by id whatever the order of registration.
  cw_client_t* c = client(0);
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.min_workers = 4;
  open.wait_ms = 5000;
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_call(c, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&info, NULL));
  assert_int_equal(info->n_devices, 8);
  for (size_t i = 1; i < info->n_devices; ++i) {
    assert_true(info->devices[i - 1]->global_id < info->devices[i]->global_id);
  }
  expect_device(info, 4, "a", 0);
  expect_device(info, 0, "b", 0);
  expect_device(info, 8, "d", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_release(c);
}

static void test_resume_refusals(void** state) {
  (void)state;
  cw_client_t* c = client(0);
  resume_t r = {.wait_ms = 100};
  expect_error(resume(c, &r, NULL, NULL), CW_INVALID_ARGUMENT, "lists 0 devices");
  rdev_t twice[] = {{3, "a", 0}, {3, "a", 1}};
  r = (resume_t){.devs = twice, .n = 2};
  expect_error(resume(c, &r, NULL, NULL), CW_INVALID_ARGUMENT, "names device 3 twice");
  rdev_t one[] = {{0, "a", 0}};
  r = (resume_t){.devs = one, .n = 1, .num_devices = 2};
  expect_error(resume(c, &r, NULL, NULL), CW_INVALID_ARGUMENT, "allocated 2 devices but lists 1");
  rdev_t same[] = {{0, "a", 1}, {5, "b", 0}, {9, "a", 1}};  // one device under two ids
  r = (resume_t){.devs = same, .n = 3};
  expect_error(resume(c, &r, NULL, NULL), CW_INVALID_ARGUMENT,
               "names device 1 of worker a twice (the session's devices 0 and 9)");
  rdev_t bad[] = {{0, "a\x01", 0}};
  r = (resume_t){.devs = bad, .n = 1};
  expect_error(resume(c, &r, NULL, NULL), CW_INVALID_ARGUMENT, "printable");
  rdev_t far[] = {{0, "a", 7}};  // a has 2 devices
  r = (resume_t){.devs = far, .n = 1};
  expect_error(resume(c, &r, NULL, NULL), CW_FAILED_PRECONDITION, "worker a has 2 devices now");
  static const uint64_t no_id[] = {0};  // an executable needs an id
  r = (resume_t){.devs = one, .n = 1, .exes = no_id, .num_exes = 1};
  expect_error(resume(c, &r, NULL, NULL), CW_INVALID_ARGUMENT,
               "SESSION_RESUME executable 0: needs an id and 1..");
  r = (resume_t){.devs = one, .n = 1};
  expect_error(resume(g.workers[0], &r, NULL, NULL), CW_PERMISSION_DENIED, "for clients");
  cw_client_release(c);
}

// A resumed session without an allocation keeps its devices when it then
// asks for an allocation: OPEN_SESSION answers with them (before, it was
// allocated afresh, renumbered, and its resumed map leaked: up to 8 MiB a
// session, which the controller's exit under LeakSanitizer reports).
static void test_resume_then_open(void** state) {
  (void)state;
  for (int round = 0; round < 3; ++round) {
    cw_client_t* c = client(0);
    rdev_t devs[] = {{7, "b", 1}};
    resume_t r = {.devs = devs, .n = 1, .wait_ms = 1000};
    assert_null(resume(c, &r, NULL, NULL));
    Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
    open.num_devices = 1;
    open.queue_timeout_ms = 200;
    Causeway__V1__SessionInfo* info = NULL;
    assert_null(cw_client_call(c, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL,
                               (ProtobufCMessage**)&info, NULL));
    assert_int_equal(info->n_devices, 1);
    expect_device(info, 7, "b", 1);
    protobuf_c_message_free_unpacked(&info->base, NULL);
    cw_client_release(c);
  }
}

static void test_resume_waits_for_workers(void** state) {
  (void)state;
  cw_client_t* c = client(0x5e55);
  // The ids this client numbered with an earlier controller: 10 and 11.
  rdev_t devs[] = {{10, "late", 1}, {11, "late", 0}, {12, "d", 0}};
  resume_t r = {.devs = devs, .n = 3, .wait_ms = 20000};
  uint64_t rid = 0;
  assert_null(resume(c, &r, NULL, &rid));
  cw_test_sleep_ms(300);
  assert_int_equal(fake_worker("late", 2, -1), 10);
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(c, rid, (ProtobufCMessage**)&info, NULL));
  assert_int_equal(info->session_id, 0x5e55);
  assert_int_equal(info->n_devices, 3);  // exactly its devices, under its ids
  expect_device(info, 10, "late", 1);
  expect_device(info, 11, "late", 0);
  expect_device(info, 12, "d", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // Resumed again (a client that lost only its connection): the same answer.
  assert_null(resume(c, &r, &info, NULL));
  assert_int_equal(info->n_devices, 3);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // Other devices than it has: refused.
  rdev_t other[] = {{10, "late", 0}, {11, "late", 1}, {12, "d", 0}};
  r.devs = other;
  expect_error(resume(c, &r, NULL, NULL), CW_FAILED_PRECONDITION, "has other devices");
  cw_client_release(c);

  c = client(0);
  rdev_t gone[] = {{0, "never", 0}, {1, "gone", 0}, {2, "a", 0}};
  r = (resume_t){.devs = gone, .n = 3, .wait_ms = 300};
  int64_t t0 = cw_time_now_ms();
  expect_error(resume(c, &r, NULL, NULL), CW_DEADLINE_EXCEEDED,
               "for worker never (and 1 more) to register again");
  assert_true(cw_time_now_ms() - t0 >= 250);
  cw_client_release(c);
}

static void test_resume_allocations(void** state) {
  (void)state;
  rdev_t mine[] = {{0, "b", 0}, {1, "b", 1}};
  rdev_t theirs[] = {{0, "b", 1}, {1, "c", 0}};
  cw_client_t* p = client(0);
  cw_client_t* q = client(0);
  resume_t r = {.devs = mine, .n = 2, .num_devices = 2, .wait_ms = 1000};
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(resume(p, &r, &info, NULL));
  expect_device(info, 0, "b", 0);
  expect_device(info, 1, "b", 1);
  assert_true(info->workers[0]->direct_launch);  // exclusive again
  protobuf_c_message_free_unpacked(&info->base, NULL);
  r.devs = theirs;
  expect_error(resume(q, &r, NULL, NULL), CW_FAILED_PRECONDITION, "device 1 of worker b");
  // Shared devices are shared again; sharers of one weight on a one-worker
  // island keep the direct lease, one of another weight is relayed.
  lease_seen_t seen1 = {0};
  cw_client_options_t o1 = {.peer_name = "resume-test", .on_event = on_lease_event,
                            .event_user = &seen1};
  cw_client_t* s1 = NULL;
  assert_null(cw_client_connect(g.address, &o1, &s1));
  cw_client_t* s2 = client(0);
  cw_client_t* s3 = client(0);
  rdev_t shared[] = {{0, "c", 0}, {1, "c", 1}};
  r = (resume_t){.devs = shared, .n = 2, .num_devices = 2, .share = true, .wait_ms = 1000};
  assert_null(resume(s1, &r, NULL, NULL));
  assert_null(resume(s2, &r, &info, NULL));
  assert_true(info->workers[0]->direct_launch);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  r.weight = 2;
  assert_null(resume(s3, &r, &info, NULL));
  assert_false(info->workers[0]->direct_launch);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // A weight OPEN_SESSION refuses is refused here too.
  cw_client_t* s4 = client(0);
  r.weight = 5000;
  expect_error(resume(s4, &r, NULL, NULL), CW_INVALID_ARGUMENT,
               "SESSION_RESUME: weight 5000 is outside [1, 1000]");
  cw_client_release(s4);
  r.weight = 0;
  // ...and the lease the first two had is withdrawn: their clients are told.
  for (int i = 0; i < 1000 && !atomic_load(&seen1.withdrawn); ++i) cw_test_sleep_ms(10);
  assert_int_equal(atomic_load(&seen1.withdrawn), 1);
  // A session that asks now gets none of them while they are held.
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.num_devices = 2;
  open.workers = (char*[]){(char*)"b"};
  open.n_workers = 1;
  open.queue_timeout_ms = 200;
  ProtobufCMessage* rep = NULL;
  expect_error(cw_client_call(q, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, &rep, NULL),
               CW_DEADLINE_EXCEEDED, "0 of 2");
  cw_client_release(p);
  cw_client_release(q);
  cw_client_release(s1);
  cw_client_release(s2);
  cw_client_release(s3);
}

// A session has one place in each queue: a second OPEN_SESSION while its
// first waits for devices is refused (both were granted, the first grant's
// record leaked), and so is a second SESSION_RESUME while one waits.
static void test_one_wait_per_session(void** state) {
  (void)state;
  fake_worker("q", 1, -1);
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.num_devices = 1;
  open.workers = (char*[]){(char*)"q"};
  open.n_workers = 1;
  cw_client_t* a = client(0);
  ProtobufCMessage* rep = NULL;
  assert_null(cw_client_call(a, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, &rep, NULL));
  protobuf_c_message_free_unpacked(rep, NULL);
  cw_client_t* b = client(0);
  uint64_t first = 0;
  assert_null(cw_client_send(b, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, NULL, NULL,
                             &first));
  // Queued behind a's grant; the connection's requests are taken in order.
  expect_error(cw_client_call(b, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, &rep, NULL),
               CW_FAILED_PRECONDITION, "already waits in the device queue");
  cw_client_release(a);  // q's device is free: b's first request gets it
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(b, first, (ProtobufCMessage**)&info, NULL));
  assert_int_equal(info->n_devices, 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_t* c = client(0);
  open.queue_timeout_ms = 300;  // b holds it
  expect_error(cw_client_call(c, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, &rep, NULL),
               CW_DEADLINE_EXCEEDED, "0 of 1");
  cw_client_release(b);
  cw_client_release(c);

  // Waiting for workers to register: the same.
  cw_client_t* e = client(0);
  Causeway__V1__OpenSessionRequest many = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  many.min_workers = 100;
  many.wait_ms = 20000;
  assert_null(cw_client_send(e, CW_MSG_OPEN_SESSION, &many.base, NULL, 0, NULL, NULL, NULL,
                             &first));
  expect_error(cw_client_call(e, CW_MSG_OPEN_SESSION, &many.base, NULL, 0, NULL, &rep, NULL),
               CW_FAILED_PRECONDITION, "already waits for workers");
  cw_client_release(e);

  cw_client_t* d = client(0);
  rdev_t later[] = {{0, "not-yet", 0}};
  resume_t r = {.devs = later, .n = 1, .wait_ms = 20000};
  uint64_t rid = 0;
  assert_null(resume(d, &r, NULL, &rid));
  expect_error(resume(d, &r, NULL, NULL), CW_FAILED_PRECONDITION, "already waits to resume");
  cw_client_release(d);
}

// A resume may list 65,536 devices and a million executables: checked by
// sorting, not pairwise (a review measured 7.4 s of a blocked loop for the
// 65,536 names below). Every name is missing: refused at once, counted once.
static void test_resume_large(void** state) {
  (void)state;
  enum { N = 65536, NAMES = 1000, EXES = 200000 };
  Causeway__V1__ResumeDevice* devs = calloc(N, sizeof(*devs));
  Causeway__V1__ResumeDevice** dptrs = calloc(N, sizeof(*dptrs));
  char (*names)[16] = calloc(NAMES, sizeof(*names));
  Causeway__V1__ResumeExecutable* exes = calloc(EXES, sizeof(*exes));
  Causeway__V1__ResumeExecutable** eptrs = calloc(EXES, sizeof(*eptrs));
  assert_true(devs && dptrs && names && exes && eptrs);
  for (int i = 0; i < NAMES; ++i) snprintf(names[i], sizeof(names[i]), "gone-%d", i);
  for (int i = 0; i < N; ++i) {
    causeway__v1__resume_device__init(&devs[i]);
    devs[i].id = i;
    devs[i].worker_name = names[(i * 7) % NAMES];
    dptrs[i] = &devs[i];
  }
  int32_t dev0 = 0;
  for (int i = 0; i < EXES; ++i) {
    causeway__v1__resume_executable__init(&exes[i]);
    exes[i].exe_id = (uint64_t)(i % (EXES / 2)) + 1;  // each id twice
    exes[i].devices = &dev0;
    exes[i].n_devices = 1;
    eptrs[i] = &exes[i];
  }
  Causeway__V1__SessionResumeRequest req = CAUSEWAY__V1__SESSION_RESUME_REQUEST__INIT;
  req.devices = dptrs;
  req.n_devices = N;
  req.executables = eptrs;
  req.n_executables = EXES;
  cw_client_t* c = client(0);
  ProtobufCMessage* rep = NULL;
  expect_error(cw_client_call(c, CW_MSG_SESSION_RESUME, &req.base, NULL, 0, NULL, &rep, NULL),
               CW_DEADLINE_EXCEEDED, "for worker gone-0 (and 999 more) to register again");
  devs[N - 1].id = 5;  // the same id twice, far apart
  expect_error(cw_client_call(c, CW_MSG_SESSION_RESUME, &req.base, NULL, 0, NULL, &rep, NULL),
               CW_INVALID_ARGUMENT, "names device 5 twice");
  // On registered workers (16 of 4,096 devices, the most a worker may
  // have): resumed, its executables recorded.
  devs[N - 1].id = N - 1;
  for (int k = 0; k < N / 4096; ++k) {
    snprintf(names[k], sizeof(names[k]), "many-%d", k);
    fake_worker(names[k], 4096, -1);
  }
  for (int i = 0; i < N; ++i) {
    devs[i].worker_name = names[i / 4096];
    devs[i].local_id = i % 4096;
  }
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_call(c, CW_MSG_SESSION_RESUME, &req.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&info, NULL));
  assert_int_equal(info->n_devices, N);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // DELETE of executables: 65,536 ids at most, each found by id.
  uint64_t* ids = calloc(65537, sizeof(*ids));
  assert_non_null(ids);
  for (int i = 0; i < 65537; ++i) ids[i] = (uint64_t)EXES + 1 + (uint64_t)i;  // none exist
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = ids;
  del.n_ids = 65537;
  expect_error(cw_client_call(c, CW_MSG_DELETE, &del.base, NULL, 0, NULL, &rep, NULL),
               CW_INVALID_ARGUMENT, "DELETE lists 65537 executables (at most 65536)");
  del.n_ids = 65536;
  expect_error(cw_client_call(c, CW_MSG_DELETE, &del.base, NULL, 0, NULL, &rep, NULL),
               CW_NOT_FOUND, "65536 unknown executable ids not deleted");
  free(ids);
  cw_client_release(c);
  free(devs);
  free(dptrs);
  free(names);
  free(exes);
  free(eptrs);
}

static cw_status_t compile(cw_client_t* c, uint64_t exe_id, const void* code, size_t size) {
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = exe_id;
  req.format = (char*)"mlir";
  req.code.data = (uint8_t*)code;
  req.code.len = size;
  ProtobufCMessage* rep = NULL;
  cw_status_t st = cw_client_call(c, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return st;
}

static Causeway__V1__Stats* stats(void) {
  cw_client_t* c = client(0);
  Causeway__V1__Stats* st = NULL;
  assert_null(cw_client_stats(c, &st));
  cw_client_release(c);
  return st;
}

// A new controller (workers register with `previous`): new sessions' devices
// wait for the sessions the workers report to resume, so that a resume finds
// its devices free; and a request the registered workers cannot meet waits
// for the rest of them (the controller runs with --resume-grace-ms 3000).
static void test_new_sessions_wait_for_resumes(void** state) {
  (void)state;
  uint64_t reported[] = {0x5e1, 0x5e2};
  assert_null(register_connected("hw", reported, 2));
  waiting_t seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_options_t o = {.peer_name = "resume-test", .on_event = on_waiting_event,
                           .event_user = &seen};
  cw_client_t* fresh = NULL;
  assert_null(cw_client_connect(g.address, &o, &fresh));
  uint64_t rid = open_for_devices(fresh, "hw", 1, true);
  expect_waiting(&seen, "(shared, on workers hw) (0 of 2 free; 0 sessions ahead in the queue; 2 "
                 "sessions of an earlier controller still to resume)");
  // The first resumes with hw:0 (the fresh session would have had it).
  cw_client_t* a = client(0x5e1);
  rdev_t first[] = {{0, "hw", 0}};
  resume_t r = {.devs = first, .n = 1, .num_devices = 1, .wait_ms = 1000};
  assert_null(resume(a, &r, NULL, NULL));
  expect_waiting(&seen, "; 1 session of an earlier controller still to resume");
  // The second resumes with hw:1, shared: the hold ends, and the fresh
  // session shares hw:1.
  cw_client_t* b = client(0x5e2);
  rdev_t second[] = {{0, "hw", 1}};
  r = (resume_t){.devs = second, .n = 1, .num_devices = 1, .share = true, .wait_ms = 1000};
  assert_null(resume(b, &r, NULL, NULL));
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(fresh, rid, (ProtobufCMessage**)&info, NULL));
  expect_device(info, 0, "hw", 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // Three devices of hw (it has two): waits while workers may still come
  // back, then fails as it would have at once.
  cw_client_t* more = NULL;
  assert_null(cw_client_connect(g.address, &o, &more));
  rid = open_for_devices(more, "hw", 3, false);
  expect_waiting(&seen, "3 devices (on workers hw) (0 of 2 free; 0 sessions ahead in the queue; "
                 "workers of an earlier controller may still register)");
  expect_error(cw_client_wait(more, rid, NULL, NULL), CW_RESOURCE_EXHAUSTED,
               "cannot allocate 3 devices (on workers hw): asks for 3 devices; the matching "
               "workers have 2 in all");
  cw_client_release(more);
  cw_client_release(fresh);
  cw_client_release(b);
  cw_client_release(a);
}

// Only the devices of workers that reported a session still to resume are
// held: a worker that registered afresh gives its devices at once. And a
// session is waited for once: reported again by a worker that registers
// again without a restart (a stall), it holds nothing up (a review: every
// such REGISTER held every request for the whole grace).
static void test_held_workers_only_and_once(void** state) {
  (void)state;
  assert_null(fake_register_at("fa", "127.0.0.1:1", 2, NULL, NULL));
  uint64_t stray[] = {0xbeef};  // a client connected to fb that never resumes
  assert_null(register_connected("fb", stray, 1));
  waiting_t seen_a, seen_b, seen_c;
  cw_client_t* a = watched_client(&seen_a);
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(a, open_for_devices(a, "fa", 1, false), (ProtobufCMessage**)&info,
                             NULL));
  protobuf_c_message_free_unpacked(&info->base, NULL);
  expect_no_waiting(&seen_a);
  // Waiting for fa (not held): its message does not speak of the hold.
  waiting_t seen_a2;
  cw_client_t* a2 = watched_client(&seen_a2);
  (void)open_for_devices(a2, "fa", 2, false);
  expect_waiting(&seen_a2, "(on workers fa) (1 of 2 free; 0 sessions ahead in the queue)");
  cw_client_release(a2);  // leaves the queue
  cw_client_t* b = watched_client(&seen_b);
  uint64_t rid = open_for_devices(b, "fb", 1, false);
  expect_waiting(&seen_b, "(on workers fb) (0 of 2 free; 0 sessions ahead in the queue; 1 session "
                 "of an earlier controller still to resume)");
  assert_null(cw_client_wait(b, rid, (ProtobufCMessage**)&info, NULL));  // after the grace
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // fb's connection drops and it registers again, reporting 0xbeef again.
  cw_client_release(g.workers[--g.num_workers]);
  cw_test_sleep_ms(300);
  assert_null(register_connected("fb", stray, 1));
  cw_client_t* c = watched_client(&seen_c);
  assert_null(cw_client_wait(c, open_for_devices(c, "fb", 1, false), (ProtobufCMessage**)&info,
                             NULL));
  protobuf_c_message_free_unpacked(&info->base, NULL);
  expect_no_waiting(&seen_c);
  cw_client_release(c);
  cw_client_release(b);
  cw_client_release(a);
}

// The hold lasts --resume-grace-ms after the last REGISTER that reported a
// session not waited for yet: REGISTERs that report none (a fleet coming
// back one by one) do not extend it (a review saw 13 s for a grace of 3 s).
static void test_hold_ends_though_workers_keep_registering(void** state) {
  (void)state;
  uint64_t never[] = {0xdead};
  assert_null(register_connected("hd", never, 1));
  waiting_t seen;
  cw_client_t* c = watched_client(&seen);
  uint64_t rid = open_for_devices(c, "hd", 1, false);
  expect_waiting(&seen, "1 session of an earlier controller still to resume");
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = -1;
  int i = 0;
  for (; i < 16 && !atomic_load(&seen.granted); ++i) {  // 8 s, against a grace of 3 s
    char name[16];
    snprintf(name, sizeof(name), "he%d", i);
    assert_null(fake_register_at(name, "127.0.0.1:1", 1, &prev, NULL));
    cw_test_sleep_ms(500);
  }
  fprintf(stderr, "  granted after %d more REGISTERs\n", i);
  assert_true(atomic_load(&seen.granted));
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(c, rid, (ProtobufCMessage**)&info, NULL));
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_release(c);
}

// A resume that waits for a worker registering late (the hold over by then)
// gets that worker's devices before a new session waiting for them.
static void test_late_worker_goes_to_the_resume(void** state) {
  (void)state;
  uint64_t ids[] = {0x1a7e};
  assert_null(register_connected("la", ids, 1));
  cw_client_t* s = client(0x1a7e);
  rdev_t devs[] = {{0, "lb", 0}};
  resume_t r = {.devs = devs, .n = 1, .num_devices = 1, .wait_ms = 20000};
  uint64_t srid = 0;
  assert_null(resume(s, &r, NULL, &srid));
  cw_test_sleep_ms(2000);
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = -1;
  assert_null(fake_register_at("lc", "127.0.0.1:1", 1, &prev, NULL));  // the window goes on
  cw_test_sleep_ms(1500);  // the hold (3 s) is over; the resume still waits for lb
  waiting_t seen;
  cw_client_t* n = watched_client(&seen);
  (void)open_for_devices(n, "lb", 2, false);  // waits until it leaves
  expect_waiting(&seen, "2 devices (on workers lb)");
  assert_null(register_connected("lb", ids, 1));
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(s, srid, (ProtobufCMessage**)&info, NULL));
  expect_device(info, 0, "lb", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // lb has 2 devices and the resume holds one: the new session waits on.
  expect_waiting(&seen, "2 devices (on workers lb) (1 of 2 free; 0 sessions ahead in the queue)");
  cw_client_release(n);
  cw_client_release(s);
}

// A hold that ended while nothing asked for devices (no tick saw its end)
// still counts as waited for: the worker that reports the session again
// after a stall holds nothing up (a review: the REGISTER checked the
// sessions once waited for before the hold's end was taken, and held
// the session a second time).
static void test_hold_that_ended_unseen_is_not_held_again(void** state) {
  (void)state;
  uint64_t stray[] = {0x0dd5};
  assert_null(register_connected("ua", stray, 1));
  cw_test_sleep_ms(3500);  // the hold (3 s) passes; nothing asks for devices
  cw_client_release(g.workers[--g.num_workers]);
  cw_test_sleep_ms(300);
  assert_null(register_connected("ua", stray, 1));  // a stall: reports it again
  waiting_t seen;
  cw_client_t* c = watched_client(&seen);
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(c, open_for_devices(c, "ua", 1, false), (ProtobufCMessage**)&info,
                             NULL));
  protobuf_c_message_free_unpacked(&info->base, NULL);
  expect_no_waiting(&seen);
  cw_client_release(c);
}

// Two resumes wait for a worker that registers after the hold ended: the
// first one's resume must not let a new session queued for that worker
// take the second one's device (a review: the device queue ran between
// the two resumes).
static void test_late_worker_goes_to_every_resume(void** state) {
  (void)state;
  uint64_t ids[] = {0x2a1, 0x2a2};
  assert_null(register_connected("ma", ids, 2));
  cw_client_t* s1 = client(0x2a1);
  cw_client_t* s2 = client(0x2a2);
  rdev_t d1[] = {{0, "mb", 0}};
  rdev_t d2[] = {{0, "mb", 1}};
  resume_t r1 = {.devs = d1, .n = 1, .num_devices = 1, .wait_ms = 20000};
  resume_t r2 = {.devs = d2, .n = 1, .num_devices = 1, .wait_ms = 20000};
  uint64_t rid1 = 0, rid2 = 0;
  assert_null(resume(s1, &r1, NULL, &rid1));
  assert_null(resume(s2, &r2, NULL, &rid2));
  cw_test_sleep_ms(2000);
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = -1;
  assert_null(fake_register_at("mc", "127.0.0.1:1", 1, &prev, NULL));  // the window goes on
  cw_test_sleep_ms(1500);  // the hold (3 s) is over; both resumes still wait for mb
  waiting_t seen;
  cw_client_t* n = watched_client(&seen);
  uint64_t nrid = open_for_devices(n, "mb", 1, false);
  expect_waiting(&seen, "1 devices (on workers mb)");
  assert_null(register_connected("mb", ids, 2));
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(s1, rid1, (ProtobufCMessage**)&info, NULL));
  expect_device(info, 0, "mb", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  info = NULL;
  assert_null(cw_client_wait(s2, rid2, (ProtobufCMessage**)&info, NULL));
  expect_device(info, 0, "mb", 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  expect_waiting(&seen, "1 devices (on workers mb) (0 of 2 free; 0 sessions ahead in the queue)");
  (void)nrid;
  cw_client_release(n);
  cw_client_release(s2);
  cw_client_release(s1);
}

// A worker whose REGISTER cut its list of sessions (more_sessions) is held
// for the hold's time once: cut again after a stall, it holds nothing up (a
// review saw each such REGISTER hold it, and extend the hold, again).
static void test_a_cut_list_is_waited_for_once(void** state) {
  (void)state;
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = -1;
  prev.more_sessions = true;
  assert_null(fake_register_at("yc", "127.0.0.1:1", 2, &prev, NULL));
  waiting_t seen_a, seen_b;
  cw_client_t* a = watched_client(&seen_a);
  uint64_t rid = open_for_devices(a, "yc", 1, false);
  expect_waiting(&seen_a, "(on workers yc) (0 of 2 free; 0 sessions ahead in the queue; sessions "
                 "of an earlier controller still to resume)");
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_wait(a, rid, (ProtobufCMessage**)&info, NULL));  // after the grace
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_release(g.workers[--g.num_workers]);
  cw_test_sleep_ms(300);
  assert_null(fake_register_at("yc", "127.0.0.1:1", 2, &prev, NULL));
  cw_client_t* b = watched_client(&seen_b);
  assert_null(cw_client_wait(b, open_for_devices(b, "yc", 1, false), (ProtobufCMessage**)&info,
                             NULL));
  protobuf_c_message_free_unpacked(&info->base, NULL);
  expect_no_waiting(&seen_b);
  cw_client_release(b);
  cw_client_release(a);
}

// Waits (up to 20 s) until one worker is registered here.
static void wait_one_worker(void) {
  for (int i = 0;; ++i) {
    Causeway__V1__Stats* up = stats();
    bool registered = up->workers == 1;
    protobuf_c_message_free_unpacked(&up->base, NULL);
    if (registered) break;
    assert_true(i < 400);
    cw_test_sleep_ms(50);
  }
}

// A real worker `name` (XLA's CPU plugin, one device) of this controller.
static void start_real_worker(const char* name, cw_test_worker_t* w) {
  const char* extra[] = {"--controller", g.address, "--heartbeat-ms", "100",
                         "--reconnect-max-ms", "200", NULL};
  cw_test_worker_options_t o = {.devices = 1, .name = name, .extra_args = extra};
  assert_int_equal(cw_test_worker_start(&o, w), 0);
}

// A real worker `name` registered here, and a client's session holding its
// one device (*out_c); *code: programs/f64.mlir (the caller frees it).
// Returns the session id.
static uint64_t real_worker_session(const char* name, cw_test_worker_t* w, cw_client_t** out_c,
                                    void** code, size_t* code_size) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/f64.mlir", cw_test_getenv("CW_PROGRAMS_DIR", "programs"));
  assert_int_equal(cw_test_read_file(path, code, code_size), 0);
  start_real_worker(name, w);
  cw_client_t* c = client(0);
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.min_workers = 1;
  open.wait_ms = 30000;
  open.workers = (char*[]){(char*)name};
  open.n_workers = 1;
  open.num_devices = 1;
  ProtobufCMessage* rep = NULL;
  assert_null(cw_client_call(c, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL, &rep, NULL));
  uint64_t session = ((Causeway__V1__SessionInfo*)rep)->session_id;
  protobuf_c_message_free_unpacked(rep, NULL);
  *out_c = c;
  return session;
}

static void test_real_restart(void** state) {
  (void)state;
  // The fake workers go: their slots die with this controller anyway.
  for (size_t i = 0; i < g.num_workers; ++i) cw_client_release(g.workers[i]);
  g.num_workers = 0;
  // The client's session, with executables 77 and 78 compiled there.
  void* code = NULL;
  size_t code_size = 0;
  cw_test_worker_t rw;
  cw_client_t* c = NULL;
  uint64_t session = real_worker_session("rw", &rw, &c, &code, &code_size);
  Causeway__V1__OpenSessionRequest open;
  ProtobufCMessage* rep = NULL;
  assert_null(compile(c, 77, code, code_size));
  assert_null(compile(c, 78, code, code_size));
  // The worker's session lives on while the client is connected to it.
  cw_client_options_t wo = {.peer_name = "resume-test", .session_id = session};
  cw_client_t* direct = NULL;
  assert_null(cw_client_connect(rw.address, &wo, &direct));
  // Its global ids come after every slot the fake workers held.
  const int32_t rw_id = g.next_id;
  cw_client_t* n = client(0);
  open = (Causeway__V1__OpenSessionRequest)CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.wait_ms = 1000;
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_call(n, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&info, NULL));
  expect_device(info, rw_id, "rw", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_release(n);

  // A real restart on the same address.
  assert_int_equal(cw_test_process_stop(&g.ctl, 30000), 0);
  expect_error(cw_client_ping(c), CW_UNAVAILABLE, "");
  cw_client_release(c);
  char address[512];
  snprintf(address, sizeof(address), "%s", g.address);
  const char* args[] = {"--listen", address, NULL};
  assert_int_equal(cw_test_controller_start(args, &g.ctl, g.address, sizeof(g.address)), 0);
  assert_string_equal(g.address, address);
  // The worker registers again and reports the client's session: a new
  // session's request for rw's device waits for it to resume.
  wait_one_worker();
  waiting_t seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_client_options_t eo = {.peer_name = "resume-test", .on_event = on_waiting_event,
                            .event_user = &seen};
  cw_client_t* early = NULL;
  assert_null(cw_client_connect(g.address, &eo, &early));
  (void)open_for_devices(early, "rw", 1, false);
  expect_waiting(&seen, "(0 of 1 free; 0 sessions ahead in the queue; 1 session of an earlier "
                 "controller still to resume)");
  // `causeway status` says it too.
  Causeway__V1__AdminStatusRequest sreq = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  Causeway__V1__AdminStatus* status = NULL;
  assert_null(cw_client_call(early, CW_MSG_ADMIN_STATUS, &sreq.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&status, NULL));
  fprintf(stderr, "  status: %s\n", status->resume_hold);
  assert_non_null(strstr(status->resume_hold,
                         "1 session of an earlier controller still to resume (at most "));
  protobuf_c_message_free_unpacked(&status->base, NULL);

  c = client(session);  // joins in its old session id
  rdev_t devs[] = {{0, "rw", 0}};
  uint64_t exes[] = {77};  // 78 is not announced: its COMPILE's reply "was lost"
  resume_t r = {.devs = devs, .n = 1, .num_devices = 1, .wait_ms = 20000, .exes = exes,
                .num_exes = 1};
  assert_null(resume(c, &r, &info, NULL));
  expect_device(info, 0, "rw", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  expect_waiting(&seen, "waiting for 1 devices (on workers rw) (0 of 1 free; 0 sessions ahead in "
                 "the queue)");
  cw_client_release(early);  // leaves the queue
  Causeway__V1__ExeInfoRequest ereq = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  ereq.exe_id = 77;
  assert_null(cw_client_call(c, CW_MSG_EXE_INFO, &ereq.base, NULL, 0, NULL, &rep, NULL));
  assert_int_equal(((Causeway__V1__ExecutableInfo*)rep)->num_outputs, 1);
  protobuf_c_message_free_unpacked(rep, NULL);
  Causeway__V1__Stats* s = stats();
  assert_int_equal(s->executables, 1);
  assert_int_equal(s->compiles, 0);  // nothing compiled again
  protobuf_c_message_free_unpacked(&s->base, NULL);
  // 78: compiled again under its id, found loaded on the worker.
  assert_null(compile(c, 78, code, code_size));
  ereq.exe_id = 78;
  assert_null(cw_client_call(c, CW_MSG_EXE_INFO, &ereq.base, NULL, 0, NULL, &rep, NULL));
  protobuf_c_message_free_unpacked(rep, NULL);
  // The worker registered again under its old ids (the new controller had
  // no other slot), and a session without an allocation resumes with them.
  n = client(0);
  rdev_t same[] = {{rw_id, "rw", 0}};
  r = (resume_t){.devs = same, .n = 1, .wait_ms = 1000};
  assert_null(resume(n, &r, &info, NULL));
  expect_device(info, rw_id, "rw", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  open = (Causeway__V1__OpenSessionRequest)CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  cw_client_t* fresh = client(0);
  assert_null(cw_client_call(fresh, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&info, NULL));
  assert_int_equal(info->n_devices, 1);
  expect_device(info, rw_id, "rw", 0);
  protobuf_c_message_free_unpacked(&info->base, NULL);
  cw_client_release(fresh);
  cw_client_release(n);
  // Replaced after the restart: 77's bytes were the old controller's, so it
  // is not reloaded but fails with what to do; 78 (compiled here) is.
  cw_client_release(direct);
  assert_true(cw_test_worker_kill(&rw) >= 0);
  cw_test_worker_t rw2;
  start_real_worker("rw", &rw2);
  for (int i = 0;; ++i) {
    s = stats();
    bool replaced = s->workers == 1 && s->workers_replaced == 1;
    protobuf_c_message_free_unpacked(&s->base, NULL);
    if (replaced) break;
    assert_true(i < 400);
    cw_test_sleep_ms(50);
  }
  Causeway__V1__HealthRejoinRequest rj = CAUSEWAY__V1__HEALTH_REJOIN_REQUEST__INIT;
  rj.worker_index = 0;
  rj.incarnation = 1;
  assert_null(cw_client_call(c, CW_MSG_HEALTH_REJOIN, &rj.base, NULL, 0, NULL, &rep, NULL));
  // The rejoin names 77: the client is to send its program again.
  const Causeway__V1__HealthRejoinReply* rjr = (const Causeway__V1__HealthRejoinReply*)rep;
  assert_int_equal(rjr->worker_index, 0);
  assert_int_equal(rjr->n_programs_wanted, 1);
  assert_int_equal(rjr->programs_wanted[0], 77);
  protobuf_c_message_free_unpacked(rep, NULL);
  ereq.exe_id = 77;
  expect_error(cw_client_call(c, CW_MSG_EXE_INFO, &ereq.base, NULL, 0, NULL, &rep, NULL),
               CW_UNAVAILABLE, "compiled before the controller restarted");
  ereq.exe_id = 78;
  assert_null(cw_client_call(c, CW_MSG_EXE_INFO, &ereq.base, NULL, 0, NULL, &rep, NULL));
  protobuf_c_message_free_unpacked(rep, NULL);
  s = stats();
  assert_int_equal(s->exes_reloaded, 1);  // 78 only
  uint64_t compiles = s->compiles;
  protobuf_c_message_free_unpacked(&s->base, NULL);
  // Sent again, 77 compiles into its record and loads into the replacement;
  // 78, loaded there already, is still refused a second program.
  assert_null(compile(c, 77, code, code_size));
  ereq.exe_id = 77;
  assert_null(cw_client_call(c, CW_MSG_EXE_INFO, &ereq.base, NULL, 0, NULL, &rep, NULL));
  assert_int_equal(((Causeway__V1__ExecutableInfo*)rep)->num_outputs, 1);
  protobuf_c_message_free_unpacked(rep, NULL);
  expect_error(compile(c, 78, code, code_size), CW_ALREADY_EXISTS, "executable 78 already exists");
  expect_error(compile(c, 77, code, code_size), CW_ALREADY_EXISTS, "executable 77 already exists");
  s = stats();
  assert_int_equal(s->compiles, compiles + 1);
  assert_int_equal(s->executables, 2);
  protobuf_c_message_free_unpacked(&s->base, NULL);
  // Now the controller holds 77's bytes: a second rejoin wants nothing.
  assert_null(cw_client_call(c, CW_MSG_HEALTH_REJOIN, &rj.base, NULL, 0, NULL, &rep, NULL));
  assert_int_equal(((Causeway__V1__HealthRejoinReply*)rep)->n_programs_wanted, 0);
  protobuf_c_message_free_unpacked(rep, NULL);
  cw_client_release(c);
  free(code);
  assert_int_equal(cw_test_worker_stop(&rw2, 30000), 0);
}

static void test_register_reports_drain_and_pauses(void** state) {
  (void)state;
  uint64_t* many = calloc(CW_MSG_MAX_PREVIOUS_SESSIONS + 1, sizeof(uint64_t));
  assert_non_null(many);
  for (size_t i = 0; i <= CW_MSG_MAX_PREVIOUS_SESSIONS; ++i) many[i] = i + 1;
  expect_error(register_reporting("many", false, many, CW_MSG_MAX_PREVIOUS_SESSIONS + 1),
               CW_INVALID_ARGUMENT, "previous.paused_sessions lists 4097 sessions (at most 4096)");
  expect_error(register_connected("many", many, CW_MSG_MAX_PREVIOUS_SESSIONS + 1),
               CW_INVALID_ARGUMENT, "previous.sessions lists 4097 sessions (at most 4096)");
  free(many);
  // The worker first, then the session resumes.
  uint64_t first[] = {0xd1a1, 0xbad};  // 0xbad: no session ever comes
  assert_null(register_reporting("drained", true, first, 2));
  cw_client_t* c = client(0xd1a1);
  rdev_t devs[] = {{0, "drained", 0}};
  resume_t r = {.devs = devs, .n = 1, .wait_ms = 1000};
  assert_null(resume(c, &r, NULL, NULL));
  char state_text[32];
  assert_true(status_paused(c, 0xd1a1, "drained", state_text, sizeof(state_text)));
  assert_string_equal(state_text, "draining");
  // A new session does not get the draining worker's devices.
  cw_client_t* fresh = client(0);
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  Causeway__V1__SessionInfo* info = NULL;
  assert_null(cw_client_call(fresh, CW_MSG_OPEN_SESSION, &open.base, NULL, 0, NULL,
                             (ProtobufCMessage**)&info, NULL));
  for (size_t i = 0; i < info->n_workers; ++i) {
    assert_string_not_equal(info->workers[i]->name, "drained");
  }
  protobuf_c_message_free_unpacked(&info->base, NULL);
  // The session first (its client joined, the resume waits), then the worker.
  cw_client_t* d = client(0xd1a2);
  rdev_t later[] = {{0, "later", 1}};
  r = (resume_t){.devs = later, .n = 1, .wait_ms = 20000};
  uint64_t rid = 0;
  assert_null(resume(d, &r, NULL, &rid));
  uint64_t second[] = {0xd1a2};
  assert_null(register_reporting("later", false, second, 1));
  assert_null(cw_client_wait(d, rid, (ProtobufCMessage**)&info, NULL));
  protobuf_c_message_free_unpacked(&info->base, NULL);
  assert_true(status_paused(d, 0xd1a2, "later", state_text, sizeof(state_text)));
  assert_string_equal(state_text, "alive");
  // The operator's word here wins: resumed, and resumed again, it stays so.
  Causeway__V1__AdminSessionRequest ar = CAUSEWAY__V1__ADMIN_SESSION_REQUEST__INIT;
  ar.session_id = 0xd1a1;
  assert_null(cw_client_call(c, CW_MSG_ADMIN_RESUME, &ar.base, NULL, 0, NULL, NULL, NULL));
  r = (resume_t){.devs = devs, .n = 1, .wait_ms = 1000};
  assert_null(resume(c, &r, NULL, NULL));
  assert_false(status_paused(c, 0xd1a1, "drained", state_text, sizeof(state_text)));
  cw_client_release(fresh);
  cw_client_release(d);
  cw_client_release(c);
}

// Runs `body` against a controller of its own whose log (stderr) is caught
// into `text`; the controller is stopped before the log is read.
typedef void (*captured_body_fn)(const char* address, cw_status_t* st, size_t n);
static void with_captured_controller(captured_body_fn body, cw_status_t* st, size_t n,
                                     char* text, size_t capacity) {
  cw_test_stderr_capture_t cap;
  assert_int_equal(cw_test_stderr_capture_begin(&cap), 0);
  cw_test_process_t ctl;
  char address[256];
  int rc = cw_test_controller_start(NULL, &ctl, address, sizeof(address));
  if (rc == 0) {
    body(address, st, n);
    (void)cw_test_process_stop(&ctl, 30000);
  }
  assert_int_equal(cw_test_stderr_capture_end(&cap, text, capacity), 0);
  fputs(text, stderr);
  assert_int_equal(rc, 0);
  for (size_t i = 0; i < n; ++i) assert_null(st[i]);
}

static cw_status_t register_as(const char* address, const char* name, uint32_t revision,
                               cw_client_t** out) {
  cw_client_options_t o = {.peer_name = "fake-worker", .role = CAUSEWAY__V1__ROLE__ROLE_WORKER};
  char at[64];
  snprintf(at, sizeof(at), "fake-%s:1", name);
  CW_RETURN_IF_ERROR(cw_client_connect(address, &o, out), "");
  cw_test_register_revision = revision;
  cw_status_t st = cw_test_register_previous(*out, name, at, 1, NULL, NULL);
  cw_test_register_revision = CW_PROTOCOL_REVISION;
  return st;
}

// Registers an older and a current worker; ADMIN_STATUS then gives each
// one's revision and the controller's (`causeway status` names the older).
static void register_old_and_new(const char* address, cw_status_t* st, size_t n) {
  cw_client_t* c[3] = {NULL, NULL, NULL};
  st[0] = register_as(address, "old-w", 0, &c[0]);
  st[1] = register_as(address, "new-w", CW_PROTOCOL_REVISION, &c[1]);
  st[2] = cw_client_connect(address, NULL, &c[2]);
  Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  Causeway__V1__AdminStatus* rep = NULL;
  if (!st[2]) {
    st[2] = cw_client_call(c[2], CW_MSG_ADMIN_STATUS, &req.base, NULL, 0, NULL,
                           (ProtobufCMessage**)&rep, NULL);
  }
  if (!st[2]) {
    char seen[128] = "";
    for (size_t i = 0; i < rep->n_workers; ++i) {
      size_t len = strlen(seen);
      snprintf(seen + len, sizeof(seen) - len, "%s:%u ", rep->workers[i]->name,
               rep->workers[i]->revision);
    }
    char want[128];
    snprintf(want, sizeof(want), "old-w:0 new-w:%u ", CW_PROTOCOL_REVISION);
    if (rep->revision != CW_PROTOCOL_REVISION || strcmp(seen, want) != 0) {
      st[2] = cw_make_status(CW_INTERNAL, "ADMIN_STATUS revision %u, workers %s", rep->revision,
                             seen);
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
  }
  for (size_t i = 0; i < n; ++i) cw_client_release(c[i]);
}

// A worker of a build before RegisterRequest.revision reports no drain,
// pauses or sessions to a restarted controller: the controller says so when
// it registers (docs/deploy.md, "Upgrading"); of one of this build, nothing.
static void test_older_worker_is_named(void** state) {
  (void)state;
  cw_status_t st[3] = {NULL, NULL, NULL};
  static char text[65536];
  with_captured_controller(register_old_and_new, st, 3, text, sizeof(text));
  assert_non_null(strstr(text, "worker old-w (fake-old-w:1) is an older build (protocol 1, "
                               "revision 0; this controller's: revision 1): after a controller "
                               "restart it does not report its drain"));
  assert_null(strstr(text, "worker new-w (fake-new-w:1) is an older build"));
}

// A worker whose name a live one holds retries for ever (one that came
// back after its replacement): each REGISTER is refused, the log says so
// once a minute with a count, not at every retry.
static void register_a_taken_name(const char* address, cw_status_t* st, size_t n) {
  (void)n;
  cw_client_t* live = NULL;
  st[0] = register_as(address, "w", CW_PROTOCOL_REVISION, &live);
  for (int i = 0; i < 5; ++i) {
    cw_client_t* again = NULL;
    cw_status_t r = register_as(address, "w", CW_PROTOCOL_REVISION, &again);
    if (!r || cw_status_code(r) != CW_ALREADY_EXISTS) st[1] = r ? r : cw_make_status(CW_INTERNAL,
                                                                  "a taken name was granted");
    else cw_status_free(r);
    cw_client_release(again);
  }
  cw_client_release(live);
}

static void test_refused_name_logged_once_a_minute(void** state) {
  (void)state;
  cw_status_t st[2] = {NULL, NULL};
  static char text[65536];
  with_captured_controller(register_a_taken_name, st, 2, text, sizeof(text));
  const char* line = "REGISTER of worker w at fake-w:1 refused: the live worker w at fake-w:1 "
                     "holds that name (0 more such refusals since the last line)";
  const char* first = strstr(text, line);
  assert_non_null(first);
  assert_null(strstr(first + 1, "REGISTER of worker w at"));
}

// Kills the controller (if it runs), starts another on its address and
// resumes `session` there with executable 90 on worker sw.
static void restart_and_resume(cw_client_t** c, uint64_t session) {
  assert_true(cw_test_process_kill(&g.ctl) >= 0);
  cw_client_release(*c);
  char address[512];
  snprintf(address, sizeof(address), "%s", g.address);
  const char* args[] = {"--listen", address, "--worker-timeout-ms", "60000", NULL};
  assert_int_equal(cw_test_controller_start(args, &g.ctl, g.address, sizeof(g.address)), 0);
  wait_one_worker();
  *c = client(session);
  rdev_t devs[] = {{0, "sw", 0}};
  uint64_t exes[] = {90};
  resume_t r = {.devs = devs, .n = 1, .num_devices = 1, .wait_ms = 20000, .exes = exes,
                .num_exes = 1};
  assert_null(resume(*c, &r, NULL, NULL));
}

// A rejoin answered while its EXE_INFO was still out: the controller shut
// down meanwhile (SIGTERM), which failed the EXE_INFO on the session's link.
// The worker was not asked, so the rejoin must fail (the client joins again
// on the next controller), not answer that nothing is wanted: the worker
// holds none of the session's programs (the next controller finds so).
static void test_rejoin_when_the_controller_stops_meanwhile(void** state) {
  (void)state;
  void* code = NULL;
  size_t code_size = 0;
  cw_test_worker_t sw;
  cw_client_t* c = NULL;
  uint64_t session = real_worker_session("sw", &sw, &c, &code, &code_size);
  ProtobufCMessage* rep = NULL;
  assert_null(compile(c, 90, code, code_size));
  // The controller dies; no connection of the session is left at the
  // worker, so 90 goes with its session there. The next one resumes 90.
  restart_and_resume(&c, session);
  // The worker stops answering; the rejoin's EXE_INFO waits; SIGTERM.
  kill(sw.process.pid, SIGSTOP);
  Causeway__V1__HealthRejoinRequest rj = CAUSEWAY__V1__HEALTH_REJOIN_REQUEST__INIT;
  rj.worker_index = 0;
  rj.incarnation = 0;
  uint64_t id = 0;
  assert_null(cw_client_send(c, CW_MSG_HEALTH_REJOIN, &rj.base, NULL, 0, NULL, NULL, NULL, &id));
  cw_test_sleep_ms(300);
  assert_int_equal(cw_test_process_stop(&g.ctl, 30000), 0);
  rep = NULL;
  cw_status_t st = cw_client_wait(c, id, &rep, NULL);
  if (!st) {
    size_t n = ((Causeway__V1__HealthRejoinReply*)rep)->n_programs_wanted;
    protobuf_c_message_free_unpacked(rep, NULL);
    kill(sw.process.pid, SIGCONT);
    fail_msg("the rejoin was answered OK (%zu programs wanted) though the worker was not asked",
             n);
  }
  fprintf(stderr, "  %s\n", cw_status_message(st));
  cw_status_free(st);
  kill(sw.process.pid, SIGCONT);
  // The next controller asks the worker, which holds none of them. A second
  // rejoin of that worker while the first one's EXE_INFO is out is refused
  // (each would send one per resumed program: a client sending many would
  // make the controller hold that many).
  restart_and_resume(&c, session);
  kill(sw.process.pid, SIGSTOP);
  uint64_t second = 0;
  assert_null(cw_client_send(c, CW_MSG_HEALTH_REJOIN, &rj.base, NULL, 0, NULL, NULL, NULL, &id));
  assert_null(cw_client_send(c, CW_MSG_HEALTH_REJOIN, &rj.base, NULL, 0, NULL, NULL, NULL,
                             &second));
  cw_test_sleep_ms(300);
  kill(sw.process.pid, SIGCONT);
  rep = NULL;
  assert_null(cw_client_wait(c, id, &rep, NULL));
  assert_int_equal(((Causeway__V1__HealthRejoinReply*)rep)->n_programs_wanted, 1);
  protobuf_c_message_free_unpacked(rep, NULL);
  rep = NULL;
  st = cw_client_wait(c, second, &rep, NULL);
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  expect_error(st, CW_UNAVAILABLE, "this session's rejoin of worker sw (");
  cw_client_release(c);
  free(code);
  assert_int_equal(cw_test_worker_stop(&sw, 30000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_keeps_ids), cmocka_unit_test(test_resume_refusals),
      cmocka_unit_test(test_resume_then_open), cmocka_unit_test(test_resume_waits_for_workers),
      cmocka_unit_test(test_resume_allocations), cmocka_unit_test(test_one_wait_per_session),
      cmocka_unit_test(test_register_reports_drain_and_pauses),
      cmocka_unit_test(test_new_sessions_wait_for_resumes),
      cmocka_unit_test(test_held_workers_only_and_once),
      cmocka_unit_test(test_hold_ends_though_workers_keep_registering),
      cmocka_unit_test(test_late_worker_goes_to_the_resume),
      cmocka_unit_test(test_a_cut_list_is_waited_for_once),
      cmocka_unit_test(test_hold_that_ended_unseen_is_not_held_again),
      cmocka_unit_test(test_late_worker_goes_to_every_resume), cmocka_unit_test(test_real_restart),
      cmocka_unit_test(test_older_worker_is_named),
      cmocka_unit_test(test_refused_name_logged_once_a_minute),
      // Last: its 16 workers of 4,096 devices would move the ids above.
      cmocka_unit_test(test_resume_large)};
  const struct CMUnitTest alone[] = {
      cmocka_unit_test(test_rejoin_when_the_controller_stops_meanwhile)};
  int failed = cmocka_run_group_tests(tests, setup, teardown);
  return failed + cmocka_run_group_tests(alone, setup, teardown);
}
