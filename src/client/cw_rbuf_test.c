// Unit tests of the reader's buffered reads (cw_rbuf.h) over a socketpair.
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_rbuf.h"

static void pair(int fds[2]) { assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }

static void put(int fd, const void* data, size_t len) {
  assert_int_equal(send(fd, data, len, 0), (ssize_t)len);
}

// Many small reads out of what one recv brought.
static void test_packed(void** state) {
  (void)state;
  int fds[2];
  pair(fds);
  uint8_t msg[200];
  for (size_t i = 0; i < sizeof(msg); ++i) msg[i] = (uint8_t)i;
  put(fds[1], msg, sizeof(msg));
  cw_rbuf_t rb;
  assert_int_equal(cw_rbuf_initialize(&rb, fds[0], 1024), 0);
  uint8_t got[200];
  for (size_t off = 0; off < sizeof(msg); off += 40) {
    size_t n = 0;
    assert_int_equal(cw_rbuf_read(&rb, got + off, 40, &n), 0);
    assert_int_equal(n, 40);
  }
  assert_memory_equal(got, msg, sizeof(msg));
  assert_int_equal(rb.recvs, 1);  // five reads, one recv
  assert_int_equal(cw_rbuf_buffered(&rb), 0);
  cw_rbuf_deinitialize(&rb);
  close(fds[0]);
  close(fds[1]);
}

// A read split across sends completes; what follows it stays buffered.
static void test_split(void** state) {
  (void)state;
  int fds[2];
  pair(fds);
  cw_rbuf_t rb;
  assert_int_equal(cw_rbuf_initialize(&rb, fds[0], 64), 0);
  put(fds[1], "abc", 3);
  put(fds[1], "defgh", 5);
  char got[8] = {0};
  // Whether the two sends arrive in one recv or two, 6 bytes come back
  // whole and "gh" waits in the buffer or the socket.
  assert_int_equal(cw_rbuf_read(&rb, got, 6, NULL), 0);
  assert_memory_equal(got, "abcdef", 6);
  assert_int_equal(cw_rbuf_read(&rb, got, 2, NULL), 0);
  assert_memory_equal(got, "gh", 2);
  cw_rbuf_deinitialize(&rb);
  close(fds[0]);
  close(fds[1]);
}

// A read as large as the buffer takes the buffered head, then the rest goes
// straight to the destination; the bytes behind it are still read right.
static void test_large_direct(void** state) {
  (void)state;
  int fds[2];
  pair(fds);
  const size_t big = 10000;
  uint8_t* msg = malloc(big + 4);
  for (size_t i = 0; i < big + 4; ++i) msg[i] = (uint8_t)(i * 7);
  cw_rbuf_t rb;
  assert_int_equal(cw_rbuf_initialize(&rb, fds[0], 256), 0);
  put(fds[1], msg, 10);  // buffered by the first read
  uint8_t head[4];
  assert_int_equal(cw_rbuf_read(&rb, head, 4, NULL), 0);
  assert_memory_equal(head, msg, 4);
  put(fds[1], msg + 10, big + 4 - 10);
  uint8_t* out = malloc(big);
  size_t n = 0;
  assert_int_equal(cw_rbuf_read(&rb, out, big, &n), 0);
  assert_int_equal(n, big);
  assert_memory_equal(out, msg + 4, big);
  // Far fewer recvs than big / 256: the large part skipped the buffer.
  assert_true(rb.recvs < 10);
  assert_int_equal(cw_rbuf_read(&rb, head, 0, NULL), 0);
  cw_rbuf_deinitialize(&rb);
  free(out);
  free(msg);
  close(fds[0]);
  close(fds[1]);
}

// EOF: clean at a boundary, and mid-read with the count that arrived.
static void test_eof(void** state) {
  (void)state;
  int fds[2];
  pair(fds);
  cw_rbuf_t rb;
  assert_int_equal(cw_rbuf_initialize(&rb, fds[0], 64), 0);
  put(fds[1], "xyz", 3);
  close(fds[1]);
  char got[8];
  size_t n = 99;
  errno = 5;
  assert_int_equal(cw_rbuf_read(&rb, got, 8, &n), -1);
  assert_int_equal(errno, 0);
  assert_int_equal(n, 3);
  assert_memory_equal(got, "xyz", 3);
  n = 99;
  assert_int_equal(cw_rbuf_read(&rb, got, 1, &n), -1);
  assert_int_equal(n, 0);
  cw_rbuf_deinitialize(&rb);
  close(fds[0]);
}

// Filling without waiting: nothing yet, bytes appended behind what is
// unread (moved to the front), a full buffer, then EOF.
static void test_fill_nowait(void** state) {
  (void)state;
  int fds[2];
  pair(fds);
  cw_rbuf_t rb;
  assert_int_equal(cw_rbuf_initialize(&rb, fds[0], 8), 0);
  assert_int_equal(cw_rbuf_fill_nowait(&rb), 0);
  put(fds[1], "abcdef", 6);
  assert_int_equal(cw_rbuf_fill_nowait(&rb), 6);
  char got[8];
  assert_int_equal(cw_rbuf_read(&rb, got, 4, NULL), 0);
  assert_memory_equal(got, "abcd", 4);
  put(fds[1], "ghijklmn", 8);
  assert_int_equal(cw_rbuf_fill_nowait(&rb), 6);  // "ef" moved up, 6 more fit
  assert_int_equal(cw_rbuf_buffered(&rb), 8);
  assert_memory_equal(cw_rbuf_peek(&rb), "efghijkl", 8);
  assert_int_equal(cw_rbuf_fill_nowait(&rb), 0);  // full
  assert_int_equal(cw_rbuf_read(&rb, got, 8, NULL), 0);
  assert_int_equal(cw_rbuf_fill_nowait(&rb), 2);
  assert_memory_equal(cw_rbuf_peek(&rb), "mn", 2);
  close(fds[1]);
  assert_int_equal(cw_rbuf_read(&rb, got, 2, NULL), 0);
  errno = 5;
  assert_int_equal(cw_rbuf_fill_nowait(&rb), -1);
  assert_int_equal(errno, 0);
  cw_rbuf_deinitialize(&rb);
  close(fds[0]);
}

// An error met while filling is reported by the next read as well (a
// socket reports it once).
static void test_fill_error_kept(void** state) {
  (void)state;
  cw_rbuf_t rb;
  int fd = open("/dev/null", O_RDONLY);  // not a socket: recv fails ENOTSOCK
  assert_true(fd >= 0);
  assert_int_equal(cw_rbuf_initialize(&rb, fd, 16), 0);
  assert_int_equal(cw_rbuf_fill_nowait(&rb), -1);
  assert_int_equal(errno, ENOTSOCK);
  char got[4];
  errno = 0;
  assert_int_equal(cw_rbuf_read(&rb, got, 4, NULL), -1);
  assert_int_equal(errno, ENOTSOCK);
  cw_rbuf_deinitialize(&rb);
  close(fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_packed),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_large_direct),
      cmocka_unit_test(test_eof),
      cmocka_unit_test(test_fill_nowait),
      cmocka_unit_test(test_fill_error_kept),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
