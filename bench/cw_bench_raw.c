// The raw loopback TCP baseline (cw_bench_raw.h).
//
// Stream of 32-byte headers {u64 kind, u64 len, 16 bytes pad}. kind 0: ping,
// answered with a 32-byte header. kind 1: bulk, `len` bytes follow and are
// read into the preallocated `dst`; answered with 1 byte. kind 2: quit.

#include "cw_bench_raw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { RAW_PING = 0, RAW_BULK = 1, RAW_QUIT = 2 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool fail(cw_raw_t* raw, const char* what) {
  snprintf(raw->error, sizeof(raw->error), "%s: %s", what, errno ? strerror(errno) : "peer closed");
  return false;
}

// `spin`: poll the socket without sleeping (both threads stay on their cores).
static bool read_full(int fd, void* buf, size_t n, bool spin) {
  uint8_t* p = buf;
  while (n > 0) {
    ssize_t r = recv(fd, p, n, spin ? MSG_DONTWAIT : 0);
    if (r < 0 && (errno == EINTR || (spin && (errno == EAGAIN || errno == EWOULDBLOCK)))) {
      errno = 0;  // a close seen next reads as "peer closed", not EAGAIN
      continue;
    }
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

static bool write_full(int fd, const void* buf, size_t n) {
  const uint8_t* p = buf;
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

static bool writev_full(int fd, struct iovec* iov, int cnt) {
  while (cnt > 0) {
    ssize_t r = writev(fd, iov, cnt);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    size_t n = (size_t)r;
    while (cnt > 0 && n >= iov->iov_len) {
      n -= iov->iov_len;
      ++iov;
      --cnt;
    }
    if (cnt > 0) {
      iov->iov_base = (uint8_t*)iov->iov_base + n;
      iov->iov_len -= n;
    }
  }
  return true;
}

static void* raw_peer_main(void* arg) {
  cw_raw_t* raw = arg;
  uint64_t hdr[4];
  for (;;) {
    if (!read_full(raw->peer_fd, hdr, sizeof hdr, raw->spin)) break;
    if (hdr[0] == RAW_PING) {
      if (!write_full(raw->peer_fd, hdr, sizeof hdr)) break;
    } else if (hdr[0] == RAW_BULK) {
      if (hdr[1] > raw->dst_cap) break;
      if (!read_full(raw->peer_fd, raw->dst, hdr[1], raw->spin)) break;
      uint8_t ack = 1;
      if (!write_full(raw->peer_fd, &ack, 1)) break;
    } else {
      return NULL;
    }
  }
  raw->failed = true;
  shutdown(raw->peer_fd, SHUT_RDWR);  // the measuring side sees EOF, not a hang
  return NULL;
}

bool cw_raw_start(cw_raw_t* raw, uint8_t* dst, size_t dst_cap, bool spin) {
  memset(raw, 0, sizeof *raw);
  raw->spin = spin;
  raw->client_fd = raw->peer_fd = -1;
  raw->dst = dst;
  raw->dst_cap = dst_cap;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return fail(raw, "socket");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t slen = sizeof sa;
  if (bind(lfd, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, (struct sockaddr*)&sa, &slen) != 0) {
    fail(raw, "listen");
    close(lfd);
    return false;
  }
  raw->client_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (raw->client_fd < 0 || connect(raw->client_fd, (struct sockaddr*)&sa, sizeof sa) != 0 ||
      (raw->peer_fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) {
    fail(raw, "connect");
    close(lfd);
    if (raw->client_fd >= 0) close(raw->client_fd);
    return false;
  }
  close(lfd);
  int one = 1;
  setsockopt(raw->client_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(raw->peer_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (pthread_create(&raw->thread, NULL, raw_peer_main, raw) != 0) {
    snprintf(raw->error, sizeof(raw->error), "pthread_create failed");
    close(raw->client_fd);
    close(raw->peer_fd);
    return false;
  }
  return true;
}

void cw_raw_stop(cw_raw_t* raw) {
  uint64_t hdr[4] = {RAW_QUIT, 0, 0, 0};
  (void)write_full(raw->client_fd, hdr, sizeof hdr);
  shutdown(raw->client_fd, SHUT_WR);  // EOF for the peer even if QUIT did not go out
  pthread_join(raw->thread, NULL);
  close(raw->client_fd);
  close(raw->peer_fd);
}

bool cw_raw_ping(cw_raw_t* raw, double* out_s) {
  uint64_t hdr[4] = {RAW_PING, 0, 0, 0};
  double t0 = now_s();
  errno = 0;
  if (!write_full(raw->client_fd, hdr, sizeof hdr) || !read_full(raw->client_fd, hdr, sizeof hdr, raw->spin)) {
    return fail(raw, "ping");
  }
  *out_s = now_s() - t0;
  return true;
}

bool cw_raw_bulk(cw_raw_t* raw, const uint8_t* src, size_t n, double* out_s) {
  uint64_t hdr[4] = {RAW_BULK, n, 0, 0};
  struct iovec iov[2] = {{hdr, sizeof hdr}, {(void*)src, n}};
  uint8_t ack = 0;
  double t0 = now_s();
  errno = 0;
  if (!writev_full(raw->client_fd, iov, 2) || !read_full(raw->client_fd, &ack, 1, raw->spin)) {
    return fail(raw, "bulk");
  }
  *out_s = now_s() - t0;
  return true;
}
