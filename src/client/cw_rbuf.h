// Buffered reading of a socket for the client's reader thread: one recv
// fills a buffer with as many whole (and part) frames as the peer has sent,
// and the frame parser takes its bytes from there. A read at least as large
// as the buffer (reply bulk) skips it and goes straight into the caller's
// memory, so downloads stay zero-copy.
#ifndef CW_CLIENT_RBUF_H_
#define CW_CLIENT_RBUF_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CW_RBUF_DEFAULT_CAPACITY (64 * 1024)

typedef struct cw_rbuf_s {
  int fd;
  // Reads in place of recv(fd) (TLS): > 0 bytes, 0 at EOF, -1 with errno.
  ssize_t (*read_fn)(void* io, void* buf, size_t len);
  void* read_io;
  uint8_t* data;
  size_t cap;
  size_t off, len;  // data[off..len) is read and not yet consumed
  uint64_t recvs;   // recv calls made (for tests)
  int err;          // an error cw_rbuf_fill_nowait met, for the next read to report
  // Optional: stamped (CLOCK_MONOTONIC ms) after each read straight into a
  // caller's memory, so that a long bulk read shows progress.
  _Atomic int64_t* progress_ms;
} cw_rbuf_t;

// Returns 0, or -1 if the buffer cannot be allocated.
int cw_rbuf_initialize(cw_rbuf_t* rb, int fd, size_t capacity);
// Bytes come from read_fn(io, ...) instead of recv(fd).
void cw_rbuf_set_reader(cw_rbuf_t* rb, ssize_t (*read_fn)(void* io, void* buf, size_t len),
                        void* io);
void cw_rbuf_deinitialize(cw_rbuf_t* rb);

// Reads exactly `len` bytes into `dst`. Returns 0, or -1 with errno set; a
// clean EOF sets errno to 0. *out_got (optional) says how many bytes of the
// `len` arrived.
int cw_rbuf_read(cw_rbuf_t* rb, void* dst, size_t len, size_t* out_got);

// Bytes already buffered (read from the socket, not yet consumed).
static inline size_t cw_rbuf_buffered(const cw_rbuf_t* rb) { return rb->len - rb->off; }
// The first of them.
static inline const uint8_t* cw_rbuf_peek(const cw_rbuf_t* rb) { return rb->data + rb->off; }

// Appends what the socket holds now, without waiting (recv(fd) only, not
// read_fn): > 0 bytes added, 0 if none had arrived or the buffer is full, -1
// with errno at EOF (errno 0) or on an error (which the next read reports
// too: the socket tells it once).
ssize_t cw_rbuf_fill_nowait(cw_rbuf_t* rb);

#endif  // CW_CLIENT_RBUF_H_
