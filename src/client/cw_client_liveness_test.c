// Unit tests of the liveness watchdog (cw_client_liveness.c): a slow but
// live peer, a hung one and an idle one; a peer that keeps the link warm
// while it reads nothing, then falls silent; a download trickling in over
// several periods; one watchdog thread for many connections. Against the
// fake peer.
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_time.h"

// A slow but live peer: it answers INVENTORY only after 4 liveness periods,
// and every PING at once.
static void script_slow_but_alive(fake_t* f) {
  frame_t req, fr;
  FCHECK(f, fake_read(f, &req));
  FCHECK(f, req.h.type == CW_MSG_INVENTORY);
  int64_t until = cw_time_now_ms() + 4 * f->count;
  int pings = 0;
  for (int64_t left; (left = until - cw_time_now_ms()) > 0;) {
    struct pollfd pfd = {.fd = f->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)left) <= 0) continue;
    if (!fake_read(f, &fr)) break;
    if (fr.h.type == CW_MSG_PING) {
      pings++;
      fake_reply(f, &fr, fr.msg, NULL, 0);
    }
    frame_free(&fr);
  }
  FCHECK(f, pings >= 2);
  Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
  inv.worker_name = "slow";
  inv.platform_name = "cpu";
  inv.platform_version = "0";
  fake_reply(f, &req, &inv.base, NULL, 0);
  frame_free(&req);
  while (fake_read(f, &fr)) frame_free(&fr);  // until the client closes
}

// Answers every PING until the client closes.
static void script_pong(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    if (fr.h.type == CW_MSG_PING) fake_reply(f, &fr, fr.msg, NULL, 0);
    frame_free(&fr);
  }
}

// A hung peer: it reads everything and never answers.
static void script_hung(fake_t* f) {
  uint8_t buf[4096];
  while (read(f->fd, buf, sizeof(buf)) > 0) {
  }
}

// The slow peer's INVENTORY (4 periods), on a thread while the hung peer
// is checked: cmocka's assertions stay on the test's thread.
typedef struct slow_call_s {
  cw_client_t* c;
  cw_status_t status;
  Causeway__V1__Inventory* inv;
} slow_call_t;

static void* slow_inventory(void* arg) {
  slow_call_t* call = arg;
  call->status = cw_client_inventory(call->c, &call->inv);
  return NULL;
}

static void test_liveness(void** state) {
  (void)state;
  // Roomy: the peer answers a PING sent half a period into a silence within
  // the other half. 400 ms left 200 ms, which a TSan build on a loaded 2-core
  // machine missed (the CI run of session 41: answered after 226 ms).
  const int period = 1500;
  // The three peers are independent connections under one watchdog: the
  // slow and the idle one share their quiet time, and the hung one is
  // checked while the slow one's call waits (each wait is several periods).
  // Slow: pings keep the call alive past the period, and it succeeds, also
  // after a quiet time longer than the period with nothing owed.
  fake_t f = {.count = period};
  fake_start(&f, script_slow_but_alive);
  cw_client_options_t o = {.liveness_ms = period};
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  // Quiet with nothing owed is not hung: the connection stays up.
  fake_t idle = {0};
  fake_start(&idle, script_pong);
  cw_client_t* ic = NULL;
  s = cw_client_connect(idle.path, &o, &ic);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  // (3 periods: tv_nsec past a second made nanosleep fail at once, a review.)
  struct timespec quiet = {.tv_sec = 3 * period / 1000, .tv_nsec = 3L * period % 1000 * 1000000L};
  nanosleep(&quiet, NULL);
  s = cw_client_ping(ic);
  if (s) fail_msg("after an idle while: %s", cw_status_message(s));
  cw_client_release(ic);
  fake_join(&idle);
  slow_call_t call = {.c = c};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, slow_inventory, &call), 0);
  // Hung: the call fails UNAVAILABLE saying so, and so does what follows.
  fake_t h = {0};
  fake_start(&h, script_hung);
  cw_client_t* hc = NULL;
  s = cw_client_connect(h.path, &o, &hc);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  expect_status(cw_client_ping(hc), CW_UNAVAILABLE, "no answer from");
  expect_status(cw_client_ping(hc), CW_UNAVAILABLE, "no answer from");
  cw_client_release(hc);
  fake_join(&h);
  assert_int_equal(pthread_join(th, NULL), 0);
  if (call.status) fail_msg("a slow live peer: %s", cw_status_message(call.status));
  assert_string_equal(call.inv->worker_name, "slow");
  protobuf_c_message_free_unpacked(&call.inv->base, NULL);
  cw_client_release(c);
  fake_join(&f);
}

static void sleep_ms(int ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static bool send_keepalive(fake_t* f) {
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__KEEPALIVE;
  return fake_write(f, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0);
}

// Reads the next request, an INVENTORY, and answers it as worker `name`.
static bool answer_inventory(fake_t* f, const char* name) {
  frame_t req;
  if (!fake_read(f, &req)) return false;
  bool ok = req.h.type == CW_MSG_INVENTORY;
  if (ok) {
    Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
    inv.worker_name = (char*)name;
    inv.platform_name = "cpu";
    inv.platform_version = "0";
    ok = fake_reply(f, &req, &inv.base, NULL, 0);
  }
  frame_free(&req);
  return ok;
}

// A peer that holds its reading (as a worker's flow control does) for 4
// periods, keeping the link warm meanwhile; then it reads the request,
// answers it, and counts the PINGs that came (none should: a PING would
// wait unread).
static void script_warm_but_not_reading(fake_t* f) {
  int64_t until = cw_time_now_ms() + 4 * f->count;
  while (cw_time_now_ms() < until) {
    FCHECK(f, send_keepalive(f));
    sleep_ms((int)f->hello_keepalive);
  }
  FCHECK(f, answer_inventory(f, "held"));
  frame_t fr;
  int pings = 0;
  while (fake_read(f, &fr)) {  // until the client closes
    pings += fr.h.type == CW_MSG_PING;
    frame_free(&fr);
  }
  FCHECK(f, pings == 0);
}

// An older peer: no keepalives; it holds its reading for 4 periods, then
// answers the INVENTORY.
static void script_not_reading_then_answering(fake_t* f) {
  sleep_ms(4 * f->count);
  FCHECK(f, answer_inventory(f, "old"));
  frame_t fr;
  while (fake_read(f, &fr)) frame_free(&fr);
}

// Warm for one period, then silent (a lost link): it reads on, answers
// nothing and sends nothing.
static void script_warm_then_silent(fake_t* f) {
  int64_t until = cw_time_now_ms() + f->count;
  while (cw_time_now_ms() < until) {
    FCHECK(f, send_keepalive(f));
    sleep_ms((int)f->hello_keepalive);
  }
  script_hung(f);
}

// Answers a DOWNLOAD with f->pattern trickled in 16 pieces over 4 periods:
// no frame, no keepalive meanwhile, only bulk bytes.
static void script_trickle(fake_t* f) {
  frame_t req;
  FCHECK(f, fake_read(f, &req));
  FCHECK(f, req.h.type == CW_MSG_DOWNLOAD);
  Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
  info.buffer_id = ((Causeway__V1__DownloadRequest*)req.msg)->buffer_id;
  info.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
  info.size = f->pattern_len;
  FCHECK(f, fake_write_head(f, CW_MSG_DOWNLOAD, CW_FRAME_REPLY, req.h.request_id, &info.base,
                            f->pattern_len));
  size_t piece = f->pattern_len / 16;
  for (size_t off = 0; off < f->pattern_len; off += piece) {
    sleep_ms(f->count / 4);  // 4 pieces a period: room for a slow machine
    size_t n = f->pattern_len - off < piece ? f->pattern_len - off : piece;
    FCHECK(f, fake_write_all(f, f->pattern + off, n));
  }
  frame_free(&req);
  script_pong(f);
}

static void test_warm_link(void** state) {
  (void)state;
  const int period = 400;
  cw_client_options_t o = {.liveness_ms = period, .liveness_by_keepalive = true};
  // Held but warm: the request waits 4 periods unread and succeeds; the
  // client asked for a keepalive every quarter period and sent no PING.
  fake_t f = {.count = period, .keepalive_reply_ms = period / 4};
  fake_start(&f, script_warm_but_not_reading);
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  assert_int_equal(f.hello_keepalive, period / 4);
  Causeway__V1__Inventory* inv = NULL;
  s = cw_client_inventory(c, &inv);
  if (s) fail_msg("a peer that keeps the link warm: %s", cw_status_message(s));
  assert_string_equal(inv->worker_name, "held");
  protobuf_c_message_free_unpacked(&inv->base, NULL);
  cw_client_release(c);
  fake_join(&f);
  // Warm, then silent: the call fails saying not even the keepalive came.
  fake_t h = {.count = period, .keepalive_reply_ms = period / 4};
  fake_start(&h, script_warm_then_silent);
  s = cw_client_connect(h.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  int64_t t0 = cw_time_now_ms();
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "not even its keepalive: it is hung");
  assert_true(cw_time_now_ms() - t0 >= period);
  cw_client_release(c);
  fake_join(&h);
  // A peer that agrees to no keepalives (an older worker) is not watched:
  // holding its reading for 4 periods, it is waited for (a PING would have
  // gone unanswered, and the link been taken for lost).
  fake_t old = {.count = period, .keepalive_reply_ms = 0};
  fake_start(&old, script_not_reading_then_answering);
  s = cw_client_connect(old.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  assert_int_equal(old.hello_keepalive, period / 4);
  Causeway__V1__Inventory* inv2 = NULL;
  s = cw_client_inventory(c, &inv2);
  if (s) fail_msg("an older peer holding its reading: %s", cw_status_message(s));
  protobuf_c_message_free_unpacked(&inv2->base, NULL);
  cw_client_release(c);
  fake_join(&old);
}

static void test_bulk_bytes_are_progress(void** state) {
  (void)state;
  const int period = 400;
  const size_t len = 8u << 20;  // pieces of 512 KiB: each goes straight into the sink
  uint8_t* pattern = make_pattern(len);
  uint8_t* got = malloc(len);
  // Both kinds of peer: one that keeps the link warm (but sends no
  // keepalive while its reply is being written) and one that does not.
  for (int warm = 0; warm < 2; ++warm) {
    fake_t f = {.count = period, .pattern = pattern, .pattern_len = len,
                .keepalive_reply_ms = warm ? period / 4 : 0};
    fake_start(&f, script_trickle);
    cw_client_options_t o = {.liveness_ms = period, .liveness_by_keepalive = warm};
    cw_client_t* c = NULL;
    cw_status_t s = cw_client_connect(f.path, &o, &c);
    if (s) fail_msg("connect: %s", cw_status_message(s));
    size_t size = 0;
    int64_t t0 = cw_time_now_ms();
    s = cw_client_download(c, 5, got, len, &size, NULL);
    if (s) fail_msg("a download trickling in (warm %d): %s", warm, cw_status_message(s));
    assert_true(cw_time_now_ms() - t0 >= 3 * period);  // longer than the period: it was tested
    assert_int_equal(size, len);
    assert_memory_equal(got, pattern, len);
    cw_client_release(c);
    fake_join(&f);
  }
  free(got);
  free(pattern);
}

// Threads of this process named `name`.
static int threads_named(const char* name) {
  DIR* d = opendir("/proc/self/task");
  assert_non_null(d);
  int n = 0;
  for (struct dirent* e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[64], comm[32] = {0};
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* fp = fopen(path, "r");
    if (!fp) continue;  // it ended meanwhile
    if (fgets(comm, sizeof(comm), fp)) comm[strcspn(comm, "\n")] = 0;
    fclose(fp);
    n += strcmp(comm, name) == 0;
  }
  closedir(d);
  return n;
}

// One watchdog for all connections: 4 connections, 1 thread; it ends with
// the last of them, and a new connection starts it again.
static void test_one_watchdog_for_all(void** state) {
  (void)state;
  enum { N = 4 };
  fake_t f[N];
  cw_client_t* c[N];
  cw_client_options_t o = {.liveness_ms = 400};
  for (int i = 0; i < N; ++i) {
    f[i] = (fake_t){0};
    fake_start(&f[i], script_pong);
    cw_status_t s = cw_client_connect(f[i].path, &o, &c[i]);
    if (s) fail_msg("connect: %s", cw_status_message(s));
  }
  assert_int_equal(threads_named("cw-watchdog"), 1);
  for (int i = 0; i < N; ++i) assert_ok(cw_client_ping(c[i]));
  for (int i = 0; i < N; ++i) {
    cw_client_release(c[i]);
    fake_join(&f[i]);
  }
  int64_t until = cw_time_now_ms() + 5000;
  while (threads_named("cw-watchdog") && cw_time_now_ms() < until) sleep_ms(10);
  assert_int_equal(threads_named("cw-watchdog"), 0);
  fake_t g = {0};
  fake_start(&g, script_pong);
  cw_client_t* d = NULL;
  cw_status_t s = cw_client_connect(g.path, &o, &d);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  assert_int_equal(threads_named("cw-watchdog"), 1);
  assert_ok(cw_client_ping(d));
  cw_client_release(d);
  fake_join(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_liveness),
      cmocka_unit_test(test_warm_link),
      cmocka_unit_test(test_bulk_bytes_are_progress),
      cmocka_unit_test(test_one_watchdog_for_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
