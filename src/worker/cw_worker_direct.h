// Same-host transfers straight between process memories
// (cw_worker_direct.c): an UPLOAD or DOWNLOAD with peer_address, from a peer
// on a Unix socket, is one kernel copy (process_vm_readv/writev) between the
// peer's memory and the worker's, on the threadpool, instead of bytes through
// the socket. The peer process is the one the kernel names (SO_PEERCRED), so
// a peer can only name its own memory. docs/protocol.md, "Same-host bulk".
#ifndef CW_WORKER_DIRECT_H_
#define CW_WORKER_DIRECT_H_

#include "cw_worker_internal.h"

// At accept: c->peer_pid and c->peer_pidfd for a Unix-socket peer of this
// user (else 0 and -1); at free: closes the pidfd.
void cw_worker_direct_conn_open(cw_conn_t* c);
void cw_worker_direct_conn_close(cw_conn_t* c);

// OK when `c` may move `size` bytes at `address` of its peer: a Unix-socket
// peer of this user, a non-null range that does not wrap, within the bulk
// limit. INVALID_ARGUMENT naming why not.
CW_MUST_USE cw_status_t cw_worker_direct_check(const cw_conn_t* c, uint64_t address,
                                               uint64_t size);

// When the copy ran: op->direct_errno is 0, or the errno the kernel gave
// (ENOMEM: it could not be queued).
typedef void (*cw_worker_direct_fn)(cw_op_t* op);
// Copies op->size bytes between op->direct_address in op->conn's peer and
// `local` (into the peer when `to_peer`), in up to 4 pieces on the
// threadpool, then calls `done` on the loop (always, once). Not started
// (ESRCH) once the connection closes or its peer process has exited: a pid
// is only the peer's while that process lives.
void cw_worker_direct_copy(cw_op_t* op, void* local, bool to_peer, cw_worker_direct_fn done);

// The reason for a copy's errno, for errors and logs.
CW_MUST_USE cw_status_t cw_worker_direct_error(const cw_op_t* op, const char* what);

#endif  // CW_WORKER_DIRECT_H_
