// TLS under the client library's blocking I/O (private to src/client): an
// SSL over the connection's socket, which is non-blocking underneath so that
// no thread ever sleeps inside OpenSSL.
//
// OpenSSL allows one SSL object to be used by one thread at a time only (no
// SSL_read concurrent with SSL_write). The client has a reader thread and
// any number of writers (one at a time: the writer's turn, cw_client_send.c), so every
// SSL call here runs under the connection's `mu`, and nobody waits for the
// socket while holding it: a reader that needs bytes polls for POLLIN, a
// writer whose records do not fit polls for POLLOUT, each without the lock,
// then calls OpenSSL again. A write retried after WANT_WRITE passes the same
// bytes again (and SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER allows another
// address). A reader and a writer thus interleave their calls, never
// overlap them, and neither blocks the other while it waits.
#ifndef CW_CLIENT_TLS_H_
#define CW_CLIENT_TLS_H_

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "cw_status.h"
#include "cw_tls.h"

#pragma GCC visibility push(hidden)

typedef struct cw_client_tls_conn_s {
  SSL* ssl;
  int fd;
  pthread_mutex_t mu;  // around every SSL call
  int recv_timeout_ms;  // 0: wait without limit
  int send_timeout_ms;
  char error[384];  // why the last read failed (errno EPROTO); reader thread only
} cw_client_tls_conn_t;

// The TLS handshake over connected socket `fd` (made non-blocking) with the
// peer at `address`, whose certificate must name its host, within
// timeout_ms. *out_closed: the peer closed the connection before answering.
CW_MUST_USE cw_status_t cw_client_tls_handshake(cw_tls_t* tls, int fd, const char* address,
                                                int timeout_ms, cw_client_tls_conn_t** out_conn,
                                                bool* out_closed);
void cw_client_tls_free(cw_client_tls_conn_t* conn);

// Writes all of iov[0..count) (modified in place): small pieces gathered
// into one record, large ones straight from caller memory. Times out after
// send_timeout_ms without progress.
CW_MUST_USE cw_status_t cw_client_tls_write_iov(cw_client_tls_conn_t* conn, const char* address,
                                                struct iovec* iov, size_t count);

// Reads up to `len` plaintext bytes: > 0, 0 at the end of the connection,
// or -1 with errno (EAGAIN: recv_timeout_ms passed; EPROTO: a TLS error,
// described in conn->error). `conn` is a void* for cw_rbuf.
ssize_t cw_client_tls_read(void* conn, void* buf, size_t len);

#pragma GCC visibility pop

#endif  // CW_CLIENT_TLS_H_
