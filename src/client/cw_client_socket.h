// Blocking socket I/O for the client library (private to src/client): open
// a connection with a deadline, socket timeouts, whole writes and reads.
// Knows nothing of frames or of cw_client_t.
#ifndef CW_CLIENT_SOCKET_H_
#define CW_CLIENT_SOCKET_H_

#include <stddef.h>
#include <sys/uio.h>

#include "cw_status.h"

// Hidden: these are not part of libcauseway_client.so's interface.
#pragma GCC visibility push(hidden)

// Opens a connected, blocking socket to `address` ("host:port", "[v6]:port"
// or a Unix socket path containing '/') within timeout_ms.
CW_MUST_USE cw_status_t cw_client_socket_open(const char* address, int timeout_ms, int* out_fd);

// SO_RCVTIMEO and SO_SNDTIMEO (0: no limit); the second sets SO_SNDTIMEO only.
CW_MUST_USE cw_status_t cw_client_socket_set_timeouts(int fd, int timeout_ms);
CW_MUST_USE cw_status_t cw_client_socket_set_send_timeout(int fd, int timeout_ms);

// Writes the whole iovec array (modified in place) with MSG_NOSIGNAL, so a
// dead peer gives EPIPE instead of SIGPIPE. `address` (borrowed) names the
// peer in errors.
CW_MUST_USE cw_status_t cw_client_socket_write_iov(int fd, const char* address,
                                                   struct iovec* iov, size_t count);

// Reads exactly `len` bytes. Returns 0, or -1 with errno set; a clean EOF
// sets errno to 0 (and *out_got, may be NULL, says how much arrived before it).
int cw_client_socket_read_full(int fd, void* buf, size_t len, size_t* out_got);

// Words for a failed read: errno `err` after `got` bytes of a frame.
const char* cw_client_socket_error_text(int err, size_t got);

#pragma GCC visibility pop

#endif  // CW_CLIENT_SOCKET_H_
