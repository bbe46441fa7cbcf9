#include "cw_rbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cw_time.h"

int cw_rbuf_initialize(cw_rbuf_t* rb, int fd, size_t capacity) {
  memset(rb, 0, sizeof(*rb));
  rb->fd = fd;
  rb->cap = capacity ? capacity : CW_RBUF_DEFAULT_CAPACITY;
  rb->data = malloc(rb->cap);
  return rb->data ? 0 : -1;
}

void cw_rbuf_set_reader(cw_rbuf_t* rb, ssize_t (*read_fn)(void* io, void* buf, size_t len),
                        void* io) {
  rb->read_fn = read_fn;
  rb->read_io = io;
}

void cw_rbuf_deinitialize(cw_rbuf_t* rb) {
  free(rb->data);
  rb->data = NULL;
  rb->cap = rb->off = rb->len = 0;
}

// One recv into `dst`; >0 bytes, or -1 with errno (0: EOF). Retries EINTR.
static ssize_t cw__recv(cw_rbuf_t* rb, void* dst, size_t len) {
  if (rb->err) {
    errno = rb->err;
    return -1;
  }
  for (;;) {
    ssize_t n = rb->read_fn ? rb->read_fn(rb->read_io, dst, len) : recv(rb->fd, dst, len, 0);
    rb->recvs++;
    if (n > 0) return n;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = 0;
    return -1;
  }
}

int cw_rbuf_read(cw_rbuf_t* rb, void* dst, size_t len, size_t* out_got) {
  uint8_t* out = dst;
  size_t got = 0;
  int rc = 0;
  while (got < len) {
    size_t avail = rb->len - rb->off;
    if (avail) {
      size_t n = avail < len - got ? avail : len - got;
      memcpy(out + got, rb->data + rb->off, n);
      rb->off += n;
      got += n;
      continue;
    }
    rb->off = rb->len = 0;
    ssize_t n;
    if (len - got >= rb->cap) {
      // Large: straight into the destination, no copy.
      n = cw__recv(rb, out + got, len - got);
      if (n < 0) {
        rc = -1;
        break;
      }
      got += (size_t)n;
      if (rb->progress_ms) {
        atomic_store_explicit(rb->progress_ms, cw_time_now_ms(), memory_order_relaxed);
      }
    } else {
      n = cw__recv(rb, rb->data, rb->cap);
      if (n < 0) {
        rc = -1;
        break;
      }
      rb->len = (size_t)n;
    }
  }
  if (out_got) *out_got = got;
  return rc;
}

ssize_t cw_rbuf_fill_nowait(cw_rbuf_t* rb) {
  if (rb->off) {
    memmove(rb->data, rb->data + rb->off, rb->len - rb->off);
    rb->len -= rb->off;
    rb->off = 0;
  }
  if (rb->len == rb->cap) return 0;
  for (;;) {
    ssize_t n = recv(rb->fd, rb->data + rb->len, rb->cap - rb->len, MSG_DONTWAIT);
    rb->recvs++;
    if (n > 0) {
      rb->len += (size_t)n;
      return n;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n == 0) errno = 0;
    else rb->err = errno;
    return -1;
  }
}
