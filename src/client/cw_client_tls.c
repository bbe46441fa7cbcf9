// TLS over the client's socket (cw_client_tls.h).
#include "cw_client_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "cw_time.h"

#define CW__GATHER 16384  // pieces smaller than this share one record

// Waits for `events` on the socket; false after timeout_ms (0: no limit).
static bool cw__wait(int fd, short events, int timeout_ms) {
  int64_t deadline = timeout_ms > 0 ? cw_time_now_ms() + timeout_ms : 0;
  for (;;) {
    int wait = -1;
    if (deadline) {
      int64_t left = deadline - cw_time_now_ms();
      if (left <= 0) return false;
      wait = left > INT_MAX ? INT_MAX : (int)left;
    }
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, wait);
    if (r > 0) return true;  // ready, or an error/hang-up OpenSSL will report
    if (r < 0 && errno != EINTR) return true;
  }
}

cw_status_t cw_client_tls_handshake(cw_tls_t* tls, int fd, const char* address, int timeout_ms,
                                    cw_client_tls_conn_t** out, bool* out_closed) {
  *out = NULL;
  *out_closed = false;
  char host[256];
  if (!cw_tls_address_host(address, host, sizeof(host))) {
    return cw_make_status(CW_INVALID_ARGUMENT, "TLS: no host in '%s'", address);
  }
  cw_client_tls_conn_t* t = calloc(1, sizeof(*t));
  if (!t) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&t->mu, NULL);
  t->fd = fd;
  cw_status_t st = cw_tls_ssl_new(tls, host, &t->ssl);
  int fl = fcntl(fd, F_GETFL, 0);
  if (!st && (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)) {
    st = cw_make_status(CW_INTERNAL, "fcntl(O_NONBLOCK): %s", strerror(errno));
  }
  if (!st && SSL_set_fd(t->ssl, fd) != 1) {
    ERR_clear_error();
    st = cw_make_status(CW_INTERNAL, "TLS: SSL_set_fd failed");
  }
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  while (!st) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_connect(t->ssl);
    if (r == 1) break;
    int e = SSL_get_error(t->ssl, r);
    int left = (int)(deadline - cw_time_now_ms());
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && left > 0) {
      if (cw__wait(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, left)) continue;
    }
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      st = cw_make_status(CW_UNAVAILABLE, "TLS handshake with %s: no answer within %d ms",
                          address, timeout_ms);
      break;
    }
    // EOF before the server said anything: it closed us (evicted, or TLS
    // off there); worth the caller's retry.
    unsigned long last = ERR_peek_last_error();
    *out_closed = (e == SSL_ERROR_SYSCALL && !last) ||
                  (e == SSL_ERROR_SSL &&
                   ERR_GET_REASON(last) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
    char why[512];
    cw_tls_describe_error(t->ssl, r, why, sizeof(why));
    st = cw_make_status(CW_UNAVAILABLE, "TLS handshake with %s failed: %s", address, why);
  }
  if (st) {
    cw_client_tls_free(t);
    return st;
  }
  // From now on a peer that closes without close_notify (a daemon's close)
  // is an ordinary end of the connection.
  SSL_set_options(t->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
  *out = t;
  return cw_ok_status();
}

void cw_client_tls_free(cw_client_tls_conn_t* t) {
  if (!t) return;
  SSL_free(t->ssl);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

// What one SSL call did.
typedef struct cw__io_s {
  int err;      // SSL_get_error's verdict (SSL_ERROR_NONE: done)
  size_t n;     // bytes read or written
  int errno_;   // errno right after the call
  bool described;  // OpenSSL said why: the text is in the caller's `why`
} cw__io_t;

// One SSL_read_ex or SSL_write_ex, under the lock (the only place the SSL
// is touched after the handshake).
static cw__io_t cw__ssl_io(cw_client_tls_conn_t* t, bool write, void* buf, size_t len,
                           char* why, size_t why_cap) {
  cw__io_t o = {0};
  pthread_mutex_lock(&t->mu);
  ERR_clear_error();
  errno = 0;
  int r = write ? SSL_write_ex(t->ssl, buf, len, &o.n) : SSL_read_ex(t->ssl, buf, len, &o.n);
  o.err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, r);
  o.errno_ = errno;
  o.described = o.err == SSL_ERROR_SSL || (o.err == SSL_ERROR_SYSCALL && ERR_peek_error());
  if (o.described) cw_tls_describe_error(t->ssl, r, why, why_cap);
  pthread_mutex_unlock(&t->mu);
  return o;
}

// Writes all of [p, p + n): OpenSSL under the lock, waits without it.
static cw_status_t cw__write_all(cw_client_tls_conn_t* t, const char* address, const uint8_t* p,
                                 size_t n) {
  while (n) {
    char why[384] = "";
    cw__io_t o = cw__ssl_io(t, true, (void*)p, n, why, sizeof(why));
    if (o.err == SSL_ERROR_NONE) {
      p += o.n;
      n -= o.n;
      continue;
    }
    if (o.err == SSL_ERROR_WANT_WRITE || o.err == SSL_ERROR_WANT_READ) {
      if (!cw__wait(t->fd, o.err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN,
                    t->send_timeout_ms)) {
        return cw_make_status(CW_UNAVAILABLE, "timed out writing to %s", address);
      }
      continue;
    }
    return cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", address,
                          o.described ? why
                          : o.errno_  ? strerror(o.errno_)
                                      : "the peer closed the connection");
  }
  return cw_ok_status();
}

cw_status_t cw_client_tls_write_iov(cw_client_tls_conn_t* t, const char* address,
                                    struct iovec* iov, size_t count) {
  uint8_t gather[CW__GATHER];
  size_t held = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = iov[i].iov_base;
    size_t n = iov[i].iov_len;
    if (!n) continue;
    if (n < sizeof(gather) && held + n <= sizeof(gather)) {
      memcpy(gather + held, p, n);
      held += n;
      continue;
    }
    if (held) CW_RETURN_IF_ERROR(cw__write_all(t, address, gather, held), "");
    held = 0;
    if (n < sizeof(gather)) {
      memcpy(gather, p, n);
      held = n;
      continue;
    }
    CW_RETURN_IF_ERROR(cw__write_all(t, address, p, n), "");  // from caller memory
  }
  if (held) CW_RETURN_IF_ERROR(cw__write_all(t, address, gather, held), "");
  return cw_ok_status();
}

ssize_t cw_client_tls_read(void* conn, void* buf, size_t len) {
  cw_client_tls_conn_t* t = conn;
  for (;;) {
    cw__io_t o = cw__ssl_io(t, false, buf, len, t->error, sizeof(t->error));
    int e = o.err;
    switch (e) {
      case SSL_ERROR_NONE:
        return (ssize_t)o.n;
      case SSL_ERROR_ZERO_RETURN:
        return 0;
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        if (!cw__wait(t->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, t->recv_timeout_ms)) {
          errno = EAGAIN;
          return -1;
        }
        continue;
      case SSL_ERROR_SYSCALL:
        if (o.described) {
          errno = EPROTO;
        } else if (o.errno_) {
          errno = o.errno_;
        } else {
          return 0;  // the peer went away
        }
        return -1;
      default:
        errno = EPROTO;
        return -1;
    }
  }
}
