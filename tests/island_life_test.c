// An island launch's parts across lives of the session (docs/protocol.md,
// "Ordering across connections" and "Islands of several workers"): a real
// controller (--sched-window 1) and two gang workers forming island "gang"
// (tests/gangplugin); gang1 is reached through a TCP relay in this test, so
// the test can cut every connection to it (the controller's session link and
// the client's) while gang1 stays registered. A LAUNCH that waits at the
// controller meanwhile is relayed after gang1 made a new life of the session:
// its part there was sent for the earlier life, whose objects are gone, and
// must be refused there unapplied, not applied in the new life.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_client.h"
#include "cw_frame.h"
#include "cw_msg.h"
#include "cw_test_island.h"

#define ASSERT_OK CW_TEST_ASSERT_OK

#define N 16    // elements per device
#define DEVS 4  // 2 per gang worker

// ---- A TCP relay that can cut what passes through it --------------------------------

#define RELAY_MAX 64

typedef struct relay_s {
  int listen_fd;
  int target_port;
  int wake[2];  // a byte: look at cut_asked / stop
  pthread_t thread;
  atomic_int cut_asked, cut_done;
  atomic_bool stop;
  int fds[RELAY_MAX][2];  // pairs: accepted, and the connection to the target
  int pairs;
} relay_t;

static int write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void relay_close_pair(relay_t* r, int i) {
  for (int s = 0; s < 2; ++s) {
    shutdown(r->fds[i][s], SHUT_RDWR);
    close(r->fds[i][s]);
  }
  r->fds[i][0] = r->fds[--r->pairs][0];
  r->fds[i][1] = r->fds[r->pairs][1];
}

static int connect_port(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static void* relay_main(void* arg) {
  relay_t* r = arg;
  static char buf[1 << 16];
  for (;;) {
    struct pollfd p[2 + 2 * RELAY_MAX];
    p[0] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
    p[1] = (struct pollfd){.fd = r->listen_fd, .events = r->pairs < RELAY_MAX ? POLLIN : 0};
    for (int i = 0; i < r->pairs; ++i) {
      p[2 + 2 * i] = (struct pollfd){.fd = r->fds[i][0], .events = POLLIN};
      p[3 + 2 * i] = (struct pollfd){.fd = r->fds[i][1], .events = POLLIN};
    }
    int n = 2 + 2 * r->pairs;
    if (poll(p, (nfds_t)n, -1) < 0) continue;
    if (p[0].revents) {
      char b;
      (void)!read(r->wake[0], &b, 1);
      if (atomic_load(&r->stop)) break;
      int asked = atomic_load(&r->cut_asked);
      if (asked != atomic_load(&r->cut_done)) {
        while (r->pairs) relay_close_pair(r, 0);
        atomic_store(&r->cut_done, asked);
        continue;  // p[] no longer matches the pairs
      }
    }
    // Backwards: a closed pair moves the last one into its place.
    for (int i = r->pairs - 1; i >= 0; --i) {
      for (int s = 0; s < 2; ++s) {
        if (!p[2 + 2 * i + s].revents) continue;
        ssize_t k = read(r->fds[i][s], buf, sizeof(buf));
        if (k <= 0 || write_all(r->fds[i][1 - s], buf, (size_t)k) != 0) {
          relay_close_pair(r, i);
          break;
        }
      }
    }
    if (p[1].revents & POLLIN) {
      int a = accept(r->listen_fd, NULL, NULL);
      int t = a >= 0 ? connect_port(r->target_port) : -1;
      if (t < 0) {
        if (a >= 0) close(a);
      } else {
        r->fds[r->pairs][0] = a;
        r->fds[r->pairs][1] = t;
        r->pairs++;
      }
    }
  }
  while (r->pairs) relay_close_pair(r, 0);
  return NULL;
}

static int listen_any(int* out_port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *out_port = ntohs(a.sin_port);
  return fd;
}

static int relay_start(relay_t* r, int target_port, int* out_port) {
  memset(r, 0, sizeof(*r));
  r->target_port = target_port;
  r->listen_fd = listen_any(out_port);
  if (r->listen_fd < 0 || pipe(r->wake) != 0) return -1;
  return pthread_create(&r->thread, NULL, relay_main, r) == 0 ? 0 : -1;
}

// Closes every connection through r (both ends); new ones pass again.
static void relay_cut(relay_t* r) {
  int asked = atomic_fetch_add(&r->cut_asked, 1) + 1;
  (void)!write(r->wake[1], "c", 1);
  while (atomic_load(&r->cut_done) != asked) cw_test_sleep_ms(5);
}

static void relay_stop(relay_t* r) {
  atomic_store(&r->stop, true);
  (void)!write(r->wake[1], "s", 1);
  pthread_join(r->thread, NULL);
  close(r->listen_fd);
  close(r->wake[0]);
  close(r->wake[1]);
}

// ---- Setup --------------------------------------------------------------------------

static struct {
  char dir[256];
  cw_test_process_t ctl;
  char ctl_address[512];
  cw_test_worker_t gang[2];
  relay_t relay;
  char gang1_direct[64];  // gang1's own address, past the relay
} g;

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  if (cw_test_tempdir_create("cw-islife", g.dir, sizeof(g.dir)) != 0) return -1;
  // One stamped launch out at a time: the next waits at the controller.
  const char* cargs[] = {"--sched-window", "1", NULL};
  if (cw_test_controller_start(cargs, &g.ctl, g.ctl_address, sizeof(g.ctl_address)) != 0) {
    return -1;
  }
  // gang1 listens on a port of ours and advertises the relay's.
  int port = 0, relay_port = 0;
  int fd = listen_any(&port);
  if (fd < 0) return -1;
  close(fd);
  if (relay_start(&g.relay, port, &relay_port) != 0) return -1;
  char listen[64], advertise[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
  snprintf(g.gang1_direct, sizeof(g.gang1_direct), "127.0.0.1:%d", port);
  snprintf(advertise, sizeof(advertise), "127.0.0.1:%d", relay_port);
  const char* wargs[] = {"--advertise", advertise, NULL};
  for (int rank = 0; rank < 2; ++rank) {
    cw_test_gang_worker_options_t o = {.controller = g.ctl_address,
                                       .dir = g.dir,
                                       .rank = rank,
                                       .size = 2,
                                       .name = rank ? "gang1" : "gang0",
                                       .island = "gang",
                                       .devices = 2,
                                       .listen = rank ? listen : NULL,
                                       .extra_args = rank ? wargs : NULL};
    if (cw_test_gang_worker_start(&o, &g.gang[rank]) != 0) return -1;
  }
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  int rc = 0;
  for (int r = 0; r < 2; ++r) {
    if (g.gang[r].process.pid && cw_test_worker_stop(&g.gang[r], 30000) != 0) rc = -1;
  }
  if (g.ctl.pid && cw_test_process_stop(&g.ctl, 30000) != 0) rc = -1;
  relay_stop(&g.relay);
  cw_test_tempdir_remove(g.dir);
  return rc;
}

// ---- Tests --------------------------------------------------------------------------

// The status of request `id` on c, its code and (into msg) its message.
static int wait_code(cw_client_t* c, uint64_t id, char* msg, size_t cap) {
  cw_status_t st = cw_client_wait(c, id, NULL, NULL);
  int code = (int)cw_status_code(st);
  snprintf(msg, cap, "%s", st ? cw_status_message(st) : "OK");
  cw_status_free(st);
  return code;
}

// A LAUNCH the controller held in the island's queue while every connection
// of the session at gang1 closed (the controller's link and the client's)
// and gang1 made a new life of it: relayed with no `session_life` on gang1's
// part (only the part that takes the seq had it), that part was applied in
// the new life, and failed there only because that life lacks the
// executable: NOT_FOUND `executable 1 not found`, where the client is to
// hear that gang1 no longer holds its arrays (ABORTED, CW_MSG_SEQ_OTHER_LIFE,
// which the plugin reports as UNAVAILABLE). The same for a DELETE's part
// (`1 unknown ids not deleted`, which the plugin ignores).
static void test_a_part_of_an_earlier_life_is_refused(void** state) {
  (void)state;
  cw_test_session_t s;
  const char* workers[] = {"gang0", "gang1"};
  cw_test_session_options_t so = {.controller = g.ctl_address,
                                  .name = "island-life",
                                  .workers = workers,
                                  .num_workers = 2,
                                  .num_devices = DEVS,
                                  .min_workers = 2};
  ASSERT_OK(cw_test_session_open(&so, &s));
  int64_t ids[DEVS];
  assert_int_equal(cw_test_session_ids(&s, workers, 2, ids, DEVS), DEVS);
  ASSERT_OK(cw_test_gang_compile(&s, 1, N, "life", ids, DEVS));
  uint64_t ins[DEVS], outs_a[DEVS], outs_b[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    float data[N];
    for (int j = 0; j < N; ++j) data[j] = (float)(d + j);
    ins[d] = 300 + (uint64_t)d;
    outs_a[d] = 500 + (uint64_t)d;
    outs_b[d] = 400 + (uint64_t)d;
    ASSERT_OK(cw_test_session_upload_f32(&s, ids[d], ins[d], data, N));
  }
  ASSERT_OK(cw_test_session_flush(&s));
  cw_client_t* link0 = NULL;
  cw_client_t* link1 = NULL;
  int local = 0;
  ASSERT_OK(cw_test_session_locate(&s, ids[0], &link0, &local));
  ASSERT_OK(cw_test_session_locate(&s, ids[DEVS - 1], &link1, &local));
  const Causeway__V1__GlobalDevice* gd1 = cw_test_session_device(&s, (int32_t)ids[DEVS - 1]);
  assert_non_null(gd1);
  uint32_t w1 = gd1->worker_index;
  uint64_t key0 = cw_client_session_key(link0);
  uint64_t key1 = cw_client_session_key(link1);
  assert_int_not_equal(key0, 0);
  assert_int_not_equal(key1, 0);

  Causeway__V1__IdList al[DEVS], ol[DEVS];
  Causeway__V1__IdList* ap[DEVS];
  Causeway__V1__IdList* op[DEVS];
  for (int d = 0; d < DEVS; ++d) {
    causeway__v1__id_list__init(&al[d]);
    causeway__v1__id_list__init(&ol[d]);
    al[d].ids = &ins[d];
    al[d].n_ids = 1;
    ol[d].n_ids = 1;
    ap[d] = &al[d];
    op[d] = &ol[d];
  }
  Causeway__V1__LaunchRequest l = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  l.exe_id = 1;
  l.args = ap;
  l.n_args = DEVS;
  l.outputs = op;
  l.n_outputs = DEVS;
  l.session_life = key0;
  // A: seq 2 at gang0 (the worker of ids[0]), which waits there for seq 1:
  // it holds the island's one place until then.
  for (int d = 0; d < DEVS; ++d) ol[d].ids = &outs_a[d];
  l.seq = 2;
  uint64_t a = 0, b = 0;
  ASSERT_OK(cw_client_send(s.ctl, CW_MSG_LAUNCH, &l.base, NULL, 0, NULL, NULL, NULL, &a));
  // B: seq 3, waits at the controller behind A.
  for (int d = 0; d < DEVS; ++d) ol[d].ids = &outs_b[d];
  l.seq = 3;
  ASSERT_OK(cw_client_send(s.ctl, CW_MSG_LAUNCH, &l.base, NULL, 0, NULL, NULL, NULL, &b));
  // A DELETE of the program, seq 4, waits behind them in the session's queue.
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  uint64_t exe = 1, dl = 0;
  del.ids = &exe;
  del.n_ids = 1;
  del.seq = 4;
  del.session_life = key0;
  ASSERT_OK(cw_client_send(s.ctl, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, NULL, &dl));
  // Answered after the controller took the three in (one connection's
  // requests are handled in order); then a while for A's part on gang1 to
  // answer ready.
  Causeway__V1__Stats* cst = NULL;
  ASSERT_OK(cw_client_stats(s.ctl, &cst));
  protobuf_c_message_free_unpacked(&cst->base, NULL);
  cw_test_sleep_ms(300);

  // Every connection of the session at gang1 closes: that life ends there.
  relay_cut(&g.relay);
  cw_client_release(link1);
  s.links[w1] = NULL;
  // The client joins gang1 again (past the relay) once that life is gone:
  // a new life, which the controller's next link joins too.
  cw_client_t* again = NULL;
  for (int64_t end = cw_time_now_ms() + 20000;; cw_test_sleep_ms(20)) {
    cw_client_options_t o = {.peer_name = "island-life", .session_id = s.info->session_id};
    ASSERT_OK(cw_client_connect(g.gang1_direct, &o, &again));
    if (cw_client_session_key(again) != key1) break;
    cw_client_release(again);
    again = NULL;
    if (cw_time_now_ms() > end) fail_msg("gang1 kept the session's life");
  }
  s.links[w1] = again;

  // Seq 1 at gang0: A goes on, fails (its part on gang1 was lost with the
  // link), and B is relayed.
  Causeway__V1__DeleteRequest fill = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  fill.seq = 1;
  ASSERT_OK(cw_test_call(link0, CW_MSG_DELETE, &fill.base, NULL));
  char msg[1024];
  int code = wait_code(s.ctl, a, msg, sizeof(msg));
  fprintf(stderr, "  A (its part on gang1 lost with the link) -> %d %s\n", code, msg);
  assert_int_equal(code, CW_UNAVAILABLE);
  assert_non_null(strstr(msg, "gang1"));
  // And gang0's part of A was cancelled, not told to go alone into the
  // collective (the controller sent gang1's LAUNCH_GO on a link it had
  // just opened again, which holds no part: FAILED_PRECONDITION `no
  // prepared launch with stamp 1 on this connection`).
  float got[N];
  cw_status_t st0 = cw_test_session_download_f32(&s, ids[0], outs_a[0], got, N);
  code = (int)cw_status_code(st0);
  fprintf(stderr, "  A's output on gang0 -> %d %s\n", code, st0 ? cw_status_message(st0) : "OK");
  cw_status_free(st0);
  assert_int_equal(code, CW_CANCELLED);
  code = wait_code(s.ctl, b, msg, sizeof(msg));
  fprintf(stderr, "  B (relayed after gang1's new life began) -> %d %s\n", code, msg);
  assert_int_equal(code, CW_ABORTED);
  assert_non_null(strstr(msg, "part on worker gang1"));
  assert_non_null(strstr(msg, CW_MSG_SEQ_OTHER_LIFE));
  // The DELETE's part on gang1 too (gang0's took seq 4 and deleted it there).
  code = wait_code(s.ctl, dl, msg, sizeof(msg));
  fprintf(stderr, "  DELETE (relayed after gang1's new life began) -> %d %s\n", code, msg);
  assert_int_equal(code, CW_ABORTED);
  assert_non_null(strstr(msg, CW_MSG_SEQ_OTHER_LIFE));
  // The new life holds nothing of B.
  Causeway__V1__Stats* st = NULL;
  ASSERT_OK(cw_client_stats(again, &st));
  uint64_t held = st->session_buffers;
  protobuf_c_message_free_unpacked(&st->base, NULL);
  assert_int_equal(held, 0);

  // The new life goes on from seq 1 at gang1; gang0's life from seq 5.
  fill.seq = 1;
  ASSERT_OK(cw_test_call(again, CW_MSG_DELETE, &fill.base, NULL));
  fill.seq = 5;
  ASSERT_OK(cw_test_call(link0, CW_MSG_DELETE, &fill.base, NULL));
  cw_test_session_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_part_of_an_earlier_life_is_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
