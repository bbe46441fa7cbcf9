// Blocking socket I/O of the client library (cw_client_socket.h).
#include "cw_client_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cw_time.h"

cw_status_t cw_client_socket_write_iov(int fd, const char* address, struct iovec* iov,
                                       size_t count) {
  while (count > 0) {
    if (iov->iov_len == 0) {
      ++iov;
      --count;
      continue;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = count < IOV_MAX ? count : IOV_MAX;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return cw_make_status(CW_UNAVAILABLE, "timed out writing to %s", address);
      }
      return cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", address,
                            strerror(errno));
    }
    size_t left = (size_t)n;
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (left) {
      iov->iov_base = (uint8_t*)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return cw_ok_status();
}

int cw_client_socket_read_full(int fd, void* buf, size_t len, size_t* out_got) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = recv(fd, (uint8_t*)buf + got, len - got, 0);
    if (n > 0) {
      got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = 0;
    if (out_got) *out_got = got;
    return -1;
  }
  if (out_got) *out_got = got;
  return 0;
}

const char* cw_client_socket_error_text(int err, size_t got) {
  if (err == EAGAIN || err == EWOULDBLOCK) return "timed out";
  if (err == 0) return got ? "peer closed the connection mid-frame" : "peer closed the connection";
  return strerror(err);
}

cw_status_t cw_client_socket_set_timeouts(int fd, int timeout_ms) {
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return cw_make_status(CW_INTERNAL, "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO): %s",
                          strerror(errno));
  }
  return cw_ok_status();
}

cw_status_t cw_client_socket_set_send_timeout(int fd, int timeout_ms) {
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return cw_make_status(CW_INTERNAL, "setsockopt(SO_SNDTIMEO): %s", strerror(errno));
  }
  return cw_ok_status();
}

// Non-blocking connect bounded by the deadline, then back to blocking mode.
// Returns 0, or an errno (ETIMEDOUT when the deadline passed).
static int cw__connect_fd(int fd, const struct sockaddr* sa, socklen_t len, int64_t deadline) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return errno;
  int err = 0;
  if (connect(fd, sa, len) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EINTR || err == EAGAIN) {
      err = 0;
      for (;;) {
        int64_t left = deadline - cw_time_now_ms();
        if (left <= 0) {
          err = ETIMEDOUT;
          break;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int r = poll(&pfd, 1, (int)(left > INT_MAX ? INT_MAX : left));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          err = errno;
          break;
        }
        if (r == 0) continue;  // the deadline check above ends the loop
        socklen_t elen = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
        break;
      }
    }
  }
  if (err == 0 && fcntl(fd, F_SETFL, fl) != 0) err = errno;
  return err;
}

cw_status_t cw_client_socket_open(const char* address, int timeout_ms, int* out_fd) {
  *out_fd = -1;
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  if (strchr(address, '/')) {
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(address) >= sizeof(sun.sun_path)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "Unix socket path too long (%zu > %zu): %s",
                            strlen(address), sizeof(sun.sun_path) - 1, address);
    }
    memcpy(sun.sun_path, address, strlen(address) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: socket: %s", address,
                            strerror(errno));
    }
    int err = cw__connect_fd(fd, (const struct sockaddr*)&sun, sizeof(sun), deadline);
    if (err) {
      close(fd);
      if (err == ETIMEDOUT) {
        return cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: timed out after %d ms",
                              address, timeout_ms);
      }
      return cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: %s", address, strerror(err));
    }
    *out_fd = fd;
    return cw_ok_status();
  }

  // "host:port", "[v6]:port".
  const char* colon = strrchr(address, ':');
  if (!colon || colon == address || !colon[1]) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "bad address \"%s\" (want host:port or a Unix socket path)", address);
  }
  size_t host_len = (size_t)(colon - address);
  const char* host_start = address;
  if (address[0] == '[' && host_len >= 2 && address[host_len - 1] == ']') {
    host_start++;
    host_len -= 2;
  }
  char* host = strndup(host_start, host_len);
  if (!host) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = NULL;
  int gai = getaddrinfo(host, colon + 1, &hints, &res);
  free(host);
  if (gai != 0) {
    return cw_make_status(CW_UNAVAILABLE, "cannot resolve %s: %s", address, gai_strerror(gai));
  }
  int err = ENOENT;
  int fd = -1;
  for (struct addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    err = cw__connect_fd(fd, ai->ai_addr, ai->ai_addrlen, deadline);
    if (err == 0) break;
    close(fd);
    fd = -1;
    if (err == ETIMEDOUT) break;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (err == ETIMEDOUT) {
      return cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: timed out after %d ms",
                            address, timeout_ms);
    }
    return cw_make_status(CW_UNAVAILABLE, "cannot connect to %s: %s", address, strerror(err));
  }
  // Control frames are small and latency-bound.
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *out_fd = fd;
  return cw_ok_status();
}

// ---- Sending ---------------------------------------------------------------
