// cw_ready: the line arrives whole, then EOF; no descriptor, no write; a
// reader that is gone costs nothing (SIGPIPE is ignored by the daemons).
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_ready.h"

static void test_line_then_eof(void** state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  cw_ready_signal(p[1], "listening on %s", "/tmp/x.sock");
  char buf[128];
  ssize_t n = read(p[0], buf, sizeof(buf));
  assert_int_equal(n, (ssize_t)strlen("listening on /tmp/x.sock\n"));
  assert_memory_equal(buf, "listening on /tmp/x.sock\n", (size_t)n);
  assert_int_equal(read(p[0], buf, sizeof(buf)), 0);  // closed: EOF
  close(p[0]);
}

static void test_long_line_is_cut(void** state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  char big[2000];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  cw_ready_signal(p[1], "%s", big);
  char buf[4096];
  ssize_t n = read(p[0], buf, sizeof(buf));
  assert_true(n > 100 && n < 600);
  assert_int_equal(buf[n - 1], '\n');
  assert_null(memchr(buf, '\n', (size_t)n - 1));  // one line
  close(p[0]);
}

static void test_no_fd_and_gone_reader(void** state) {
  (void)state;
  cw_ready_signal(-1, "nothing");  // no descriptor: nothing happens
  int p[2];
  assert_int_equal(pipe(p), 0);
  close(p[0]);
  signal(SIGPIPE, SIG_IGN);
  cw_ready_signal(p[1], "nobody reads this");  // EPIPE, ignored; the fd is closed
  assert_int_equal(close(p[1]), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_line_then_eof),
      cmocka_unit_test(test_long_line_is_cut),
      cmocka_unit_test(test_no_fd_and_gone_reader),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
