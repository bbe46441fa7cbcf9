// Same-host transfers straight between process memories (cw_worker_direct.h).
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cw_net.h"
#include "cw_worker_direct.h"
#include "cw_worker_op.h"

void cw_worker_direct_conn_open(cw_conn_t* c) {
  c->peer_pid = cw_net_conn_peer_pid(c->nc);
  c->peer_pidfd = -1;
  if (!c->peer_pid) return;
  // The peer is connected, so alive: this pidfd is its process's.
  c->peer_pidfd = (int)syscall(SYS_pidfd_open, (pid_t)c->peer_pid, 0);
  if (c->peer_pidfd < 0) c->peer_pid = 0;  // no way to tell a reused pid: no copies
}

void cw_worker_direct_conn_close(cw_conn_t* c) {
  if (c->peer_pidfd >= 0) close(c->peer_pidfd);
  c->peer_pidfd = -1;
  c->peer_pid = 0;
}

cw_status_t cw_worker_direct_check(const cw_conn_t* c, uint64_t address, uint64_t size) {
  if (!c->peer_pid) {
    return cw_make_status(CW_INVALID_ARGUMENT, "peer_address needs a peer of this user on this "
                          "host's Unix socket");
  }
  if (!address || address + size < address) {
    return cw_make_status(CW_INVALID_ARGUMENT, "peer_address 0x%" PRIx64 " with %" PRIu64
                          " bytes is not a range", address, size);
  }
  uint64_t max = c->w->net.options.limits.max_bulk;
  if (size > max) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%" PRIu64 " bytes by peer_address exceed the "
                          "bulk limit of %" PRIu64 " (--max-bulk)", size, max);
  }
  return cw_ok_status();
}

// The peer process still runs: its pidfd is not readable (it becomes so at exit).
static bool cw__peer_alive(const cw_conn_t* c) {
  if (c->closing || c->peer_pidfd < 0) return false;
  struct pollfd p = {.fd = c->peer_pidfd, .events = POLLIN};
  return poll(&p, 1, 0) == 0;
}

// A copy in up to CW__PARTS pieces on the threadpool: the kernel pins and
// copies 4 KiB pages one at a time, so one thread reaches about half of a
// memcpy; several reach it (docs/performance.md, "Same host").
#define CW__PARTS 4
#define CW__PART_MIN (4u << 20)

typedef struct cw__copy_s cw__copy_t;
typedef struct {
  uv_work_t work;
  cw__copy_t* copy;
  uint64_t offset, len;
  int err;
} cw__part_t;

struct cw__copy_s {
  cw_op_t* op;
  void* local;
  bool to_peer;
  cw_worker_direct_fn done;
  int pending;  // parts not yet finished (read and written on the loop thread)
  cw__part_t parts[CW__PARTS];
};

// Threadpool: the kernel may move less than asked (a fault part way): go on
// from there until done or an error.
static void cw__work(uv_work_t* req) {
  cw__part_t* p = req->data;
  cw__copy_t* c = p->copy;
  int pid = c->op->conn->peer_pid;
  uint64_t moved = 0;
  while (moved < p->len) {
    uint64_t at = p->offset + moved;
    struct iovec local = {(uint8_t*)c->local + at, (size_t)(p->len - moved)};
    struct iovec remote = {(void*)(uintptr_t)(c->op->direct_address + at), local.iov_len};
    ssize_t n = c->to_peer ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
                           : process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      p->err = n < 0 ? errno : EFAULT;
      return;
    }
    moved += (uint64_t)n;
  }
}

static void cw__after(uv_work_t* req, int status) {
  cw__part_t* p = req->data;
  cw__copy_t* c = p->copy;
  if (status == UV_ECANCELED && !p->err) p->err = ECANCELED;
  if (p->err && !c->op->direct_errno) c->op->direct_errno = p->err;
  if (--c->pending > 0) return;
  cw_op_t* op = c->op;
  cw_worker_t* w = op->w;
  cw_worker_direct_fn done = c->done;
  free(c);
  done(op);
  cw_worker_job_done(w);  // counted: shutdown waits for copies as for compiles
}

void cw_worker_direct_copy(cw_op_t* op, void* local, bool to_peer, cw_worker_direct_fn done) {
  op->direct_errno = 0;
  if (!cw__peer_alive(op->conn)) {
    op->direct_errno = ESRCH;
    done(op);
    return;
  }
  cw__copy_t* c = calloc(1, sizeof(*c));
  if (!c) {
    op->direct_errno = ENOMEM;
    done(op);
    return;
  }
  c->op = op;
  c->local = local;
  c->to_peer = to_peer;
  c->done = done;
  uint64_t n = op->size / CW__PART_MIN;
  int parts = n >= CW__PARTS ? CW__PARTS : n ? (int)n : 1;
  // Pieces in whole pages, the last one takes the rest.
  uint64_t piece = op->size / (uint64_t)parts / 4096 * 4096;
  c->pending = parts;
  cw_worker_job_started(op->w);
  for (int i = 0; i < parts; ++i) {
    cw__part_t* p = &c->parts[i];
    p->copy = c;
    p->offset = piece * (uint64_t)i;
    p->len = i + 1 < parts ? piece : op->size - p->offset;
    p->work.data = p;
    if (uv_queue_work(&op->w->loop, &p->work, cw__work, cw__after) != 0) {
      // The parts queued finish first; this one and the rest count as failed.
      op->direct_errno = ENOMEM;
      c->pending -= parts - i;
      if (c->pending == 0) {
        cw_worker_t* w = op->w;
        free(c);
        done(op);
        cw_worker_job_done(w);
      }
      return;
    }
  }
}

cw_status_t cw_worker_direct_error(const cw_op_t* op, const char* what) {
  int e = op->direct_errno;
  cw_status_code_t code = e == EFAULT ? CW_INVALID_ARGUMENT
                          : e == ENOMEM ? CW_RESOURCE_EXHAUSTED
                          : e == EPERM || e == ENOSYS ? CW_FAILED_PRECONDITION
                          : e == ESRCH ? CW_UNAVAILABLE
                                       : CW_INTERNAL;
  return cw_make_status(code, "%s: same-host copy of %" PRIu64 " bytes at 0x%" PRIx64
                        " of peer pid %d failed: %s", what, op->size, op->direct_address,
                        op->conn->peer_pid, strerror(e));
}
