// C client of the causeway wire protocol (docs/protocol.md).
//
// Threading model: any thread sends (one mutex serialises writers, each frame
// goes out with one sendmsg loop over [header, payload, caller's bulk...]);
// one reader thread per client decodes replies and completes requests by
// request id. Every request lives in a pending table from just before its
// frame is written until it is claimed (cw_client_wait, cw_client_flush) or
// its callback has run.
//
// Completion rules:
//  - cw_client_send returns an error => the callback never runs and nothing
//    is parked; returns OK => the callback runs exactly once (or the result
//    is parked exactly once).
//  - The typed pipelined helpers (upload, launch, copy, ...) called with
//    done == NULL send "detached" requests: a success is dropped at once, an
//    error is parked for cw_client_flush. That keeps memory bounded for a
//    caller who streams millions of uploads and flushes rarely.
//  - cw_client_serialize cannot know the reply's size in advance, so its
//    request carries an internal "allocate on arrival" sink: the reader
//    mallocs exactly bulk_len bytes (bounded by the max-bulk limit from the
//    HELLO reply) and reads the bytes straight into it.
#include "cw_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cw_array.h"
#include "cw_rbuf.h"
#include "cw_settings.h"
#include "cw_time.h"
#include "cw_messages.h"

#define CW__DEFAULT_CONNECT_TIMEOUT_MS 10000
#define CW__DEFAULT_MAX_PAYLOAD (16u * 1024 * 1024)
#define CW__DEFAULT_MAX_BULK (64ull * 1024 * 1024 * 1024)
// A worker may announce a larger payload limit; we never buffer more.
#define CW__MAX_PAYLOAD_CAP (1u << 30)
#define CW__DISCARD_CHUNK (64 * 1024)
#define CW__INITIAL_BUCKETS 64
#define CW__STACK_IOVS 8

// ---- Pending requests ------------------------------------------------------

enum {
  CW__PEND_SENDING = 1u << 0,   // the sender has not finished writing the frame
  CW__PEND_DONE = 1u << 1,      // completed; result fields below are valid
  CW__PEND_CLAIMED = 1u << 2,   // a cw_client_wait is blocked on this entry
  CW__PEND_DETACHED = 1u << 3,  // drop success, park errors (typed helpers)
  CW__PEND_ALLOC_SINK = 1u << 4,  // malloc a sink of bulk_len on arrival
  CW__PEND_MATCHED = 1u << 5,   // the reader took a reply for it; reader-owned until DONE
  CW__SEND_DEFER = 1u << 6,     // cw__send only (never stored): cw_client_send_deferred
};

// Deferred frames beyond this many bytes are written at once.
#define CW__DEFER_MAX (64 * 1024)

typedef struct cw__pending_s {
  struct cw__pending_s* next;  // hash chain
  uint64_t id;
  uint16_t type;
  unsigned flags;
  cw_client_sink_t sink;  // capacity 0 when the caller gave none
  cw_client_done_fn done;
  void* user;
  // Result, valid with CW__PEND_DONE.
  cw_status_t status;
  ProtobufCMessage* reply;
  uint64_t bulk_len;
  void* alloc_data;  // CW__PEND_ALLOC_SINK: the buffer the reader allocated
} cw__pending_t;

// Chained hash map keyed by request id. Ids are a counter, so id & mask
// spreads perfectly. It grows only with requests this client sent, never
// with anything the peer declares.
typedef struct cw__table_s {
  cw__pending_t** buckets;
  size_t num_buckets;  // power of two
  size_t count;
} cw__table_t;

struct cw_client_s {
  int fd;
  char* address;
  char* worker_name;
  uint64_t session_id;
  cw_frame_limits_t limits;  // what we accept from the worker, and send to it

  pthread_mutex_t write_mu;  // serialises whole frames on the socket
  // Guarded by write_mu: whole frames of cw_client_send_deferred not yet
  // written; they go out ahead of the next frame.
  uint8_t* wbuf;
  size_t wbuf_len, wbuf_cap;

  pthread_mutex_t mu;  // guards everything below
  pthread_cond_t cv;   // broadcast on every completion
  cw__table_t table;
  uint64_t next_id;
  size_t outstanding;  // sent and not completed (callbacks count until they return)
  char* dead;          // set once the connection is lost: the reason
  bool closing;        // cw_client_release has begun

  pthread_t reader;
  bool reader_started;
  uint8_t* payload_buf;  // reader-owned scratch for payloads
  size_t payload_cap;
  cw_rbuf_t rb;          // reader-owned: what one recv brought (cw_rbuf.h)
  void (*on_event)(void* user, const ProtobufCMessage* event);
  void* event_user;
  // Liveness (cw_client_options_t.liveness_ms; 0: off): the watchdog thread
  // pings a peer that owes answers and has been quiet, and gives up on one
  // that stays quiet.
  int liveness_ms;
  // CLOCK_MONOTONIC of the last frame read, or of the request that ended a
  // time with nothing owed.
  _Atomic int64_t last_rx_ms;
  pthread_t watchdog;
  bool watchdog_started;
  pthread_cond_t watchdog_cv;  // with mu: wakes the watchdog at release
  bool ping_out;               // guarded by mu
  char* hung;                  // guarded by mu: why the watchdog gave up
};

static void cw__pending_free(cw__pending_t* p) {
  if (!p) return;
  cw_status_free(p->status);
  if (p->reply) protobuf_c_message_free_unpacked(p->reply, NULL);
  free(p->alloc_data);
  free(p);
}

static cw_status_t cw__table_initialize(cw__table_t* t) {
  t->buckets = calloc(CW__INITIAL_BUCKETS, sizeof(*t->buckets));
  if (!t->buckets) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  t->num_buckets = CW__INITIAL_BUCKETS;
  t->count = 0;
  return cw_ok_status();
}

static cw__pending_t** cw__table_slot(cw__table_t* t, uint64_t id) {
  cw__pending_t** slot = &t->buckets[id & (t->num_buckets - 1)];
  while (*slot && (*slot)->id != id) slot = &(*slot)->next;
  return slot;
}

static cw__pending_t* cw__table_find(cw__table_t* t, uint64_t id) {
  return *cw__table_slot(t, id);
}

// Growth failure is harmless: chains just get longer.
static void cw__table_grow(cw__table_t* t) {
  size_t n = t->num_buckets * 2;
  cw__pending_t** b = calloc(n, sizeof(*b));
  if (!b) return;
  for (size_t i = 0; i < t->num_buckets; ++i) {
    cw__pending_t* p = t->buckets[i];
    while (p) {
      cw__pending_t* next = p->next;
      p->next = b[p->id & (n - 1)];
      b[p->id & (n - 1)] = p;
      p = next;
    }
  }
  free(t->buckets);
  t->buckets = b;
  t->num_buckets = n;
}

static void cw__table_insert(cw__table_t* t, cw__pending_t* p) {
  if (t->count >= t->num_buckets * 2) cw__table_grow(t);
  cw__pending_t** head = &t->buckets[p->id & (t->num_buckets - 1)];
  p->next = *head;
  *head = p;
  t->count++;
}

static cw__pending_t* cw__table_remove(cw__table_t* t, uint64_t id) {
  cw__pending_t** slot = cw__table_slot(t, id);
  cw__pending_t* p = *slot;
  if (p) {
    *slot = p->next;
    p->next = NULL;
    t->count--;
  }
  return p;
}

// ---- Socket helpers --------------------------------------------------------

// Writes the whole iovec array (modified in place) with MSG_NOSIGNAL, so a
// dead peer gives EPIPE instead of SIGPIPE.
static cw_status_t cw__write_iov(cw_client_t* c, struct iovec* iov, size_t count) {
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
    ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return cw_make_status(CW_UNAVAILABLE, "timed out writing to %s", c->address);
      }
      return cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", c->address,
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

// Reads exactly `len` bytes. Returns 0, or -1 with errno set; a clean EOF
// sets errno to 0 (and *out_got says how much arrived before it).
static int cw__read_full(int fd, void* buf, size_t len, size_t* out_got) {
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

static const char* cw__read_error_text(int err, size_t got) {
  if (err == EAGAIN || err == EWOULDBLOCK) return "timed out";
  if (err == 0) return got ? "peer closed the connection mid-frame" : "peer closed the connection";
  return strerror(err);
}

static cw_status_t cw__set_timeouts(int fd, int timeout_ms) {
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return cw_make_status(CW_INTERNAL, "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO): %s",
                          strerror(errno));
  }
  return cw_ok_status();
}

static cw_status_t cw__set_send_timeout(int fd, int timeout_ms) {
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

// Opens a connected, blocking socket to `address`.
static cw_status_t cw__open_socket(const char* address, int timeout_ms, int* out_fd) {
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

// Encodes a request frame's header into out[CW_FRAME_HEADER_SIZE].
static void cw__encode_request_header(uint16_t type, uint64_t request_id, size_t payload_len,
                                      uint64_t bulk_len, uint8_t* out) {
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC,
                         .version = CW_PROTOCOL_VERSION,
                         .type = type,
                         .flags = 0,
                         .payload_len = (uint32_t)payload_len,
                         .request_id = request_id,
                         .bulk_len = bulk_len};
  cw_frame_header_encode(&h, out);
}

// Packs and writes one frame; `bulk` is borrowed and not copied. Caller holds
// write_mu (or is the only thread, during HELLO).
static cw_status_t cw__write_frame(cw_client_t* c, uint16_t type, uint64_t request_id,
                                   const uint8_t* payload, size_t payload_len,
                                   const struct iovec* bulk, int bulk_count,
                                   uint64_t bulk_len) {
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  cw__encode_request_header(type, request_id, payload_len, bulk_len, hdr);
  struct iovec stack_iov[CW__STACK_IOVS];
  size_t n = 3 + (size_t)bulk_count;
  struct iovec* iov = stack_iov;
  if (n > CW__STACK_IOVS) {
    iov = malloc(n * sizeof(*iov));
    if (!iov) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  // Deferred frames first: one system call for all.
  iov[0] = (struct iovec){.iov_base = c->wbuf, .iov_len = c->wbuf_len};
  iov[1] = (struct iovec){.iov_base = hdr, .iov_len = sizeof(hdr)};
  iov[2] = (struct iovec){.iov_base = (void*)payload, .iov_len = payload_len};
  for (int i = 0; i < bulk_count; ++i) iov[3 + i] = bulk[i];
  cw_status_t s = cw__write_iov(c, iov, n);
  c->wbuf_len = 0;  // written, or the connection is being shut down
  if (iov != stack_iov) free(iov);
  return s;
}

// cw_client_send_deferred: appends the frame to c->wbuf (write_mu held);
// written at once when the buffer is full or cannot grow.
static cw_status_t cw__defer_frame(cw_client_t* c, uint16_t type, uint64_t request_id,
                                   const uint8_t* payload, size_t payload_len) {
  size_t need = CW_FRAME_HEADER_SIZE + payload_len;
  if (c->wbuf_len + need > c->wbuf_cap && c->wbuf_len + need <= CW__DEFER_MAX) {
    size_t cap = c->wbuf_cap ? c->wbuf_cap : 1024;
    while (cap < c->wbuf_len + need) cap *= 2;
    uint8_t* grown = realloc(c->wbuf, cap);
    if (grown) {
      c->wbuf = grown;
      c->wbuf_cap = cap;
    }
  }
  if (c->wbuf_len + need > c->wbuf_cap) {
    return cw__write_frame(c, type, request_id, payload, payload_len, NULL, 0, 0);
  }
  cw__encode_request_header(type, request_id, payload_len, 0, c->wbuf + c->wbuf_len);
  memcpy(c->wbuf + c->wbuf_len + CW_FRAME_HEADER_SIZE, payload, payload_len);
  c->wbuf_len += need;
  return cw_ok_status();
}

static cw_status_t cw__pack(const ProtobufCMessage* msg, uint8_t* stack, size_t stack_cap,
                            uint8_t** out_buf, size_t* out_len) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t* buf = stack;
  if (len > stack_cap) {
    buf = malloc(len);
    if (!buf) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory packing %zu bytes", len);
  }
  protobuf_c_message_pack(msg, buf);
  *out_buf = buf;
  *out_len = len;
  return cw_ok_status();
}

static bool cw__on_reader_thread(const cw_client_t* c) {
  return c->reader_started && pthread_equal(pthread_self(), c->reader);
}

static cw_status_t cw__dead_status(const cw_client_t* c) {
  return cw_make_status(CW_UNAVAILABLE, "%s", c->dead);
}

// The core of cw_client_send, with internal pending flags.
static cw_status_t cw__send(cw_client_t* c, uint16_t type, const ProtobufCMessage* request,
                            const struct iovec* bulk, int bulk_count,
                            const cw_client_sink_t* sink, unsigned flags,
                            cw_client_done_fn done, void* user, uint64_t* out_request_id) {
  if (out_request_id) *out_request_id = 0;
  if (!c || !request) return cw_make_status(CW_INVALID_ARGUMENT, "client and request are required");
  bool defer = (flags & CW__SEND_DEFER) != 0;
  flags &= ~(unsigned)CW__SEND_DEFER;
  const ProtobufCMessageDescriptor* desc = cw_msg_request_descriptor(type);
  if (!desc || type == CW_MSG_HELLO) {
    return cw_make_status(CW_INVALID_ARGUMENT, "cannot send message type %u (%s)", type,
                          cw_msg_type_name(type));
  }
  if (request->descriptor != desc) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s request must be a %s, not a %s",
                          cw_msg_type_name(type), desc->name, request->descriptor->name);
  }
  if (bulk_count < 0 || (bulk_count > 0 && !bulk)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "bad bulk iovec array (%d entries)", bulk_count);
  }
  uint64_t bulk_len = 0;
  for (int i = 0; i < bulk_count; ++i) {
    if (bulk[i].iov_len > UINT64_MAX - bulk_len) {
      return cw_make_status(CW_INVALID_ARGUMENT, "bulk length overflows 64 bits");
    }
    bulk_len += bulk[i].iov_len;
  }
  if (bulk_len && !cw_frame_may_carry_bulk(type, 0)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s requests carry no bulk bytes (got %llu)",
                          cw_msg_type_name(type), (unsigned long long)bulk_len);
  }
  // Refuse locally what the worker would answer by closing the connection.
  if (bulk_len > c->limits.max_bulk) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED,
                          "%s bulk of %llu bytes exceeds the worker's limit of %llu bytes",
                          cw_msg_type_name(type), (unsigned long long)bulk_len,
                          (unsigned long long)c->limits.max_bulk);
  }

  uint8_t stack[512];
  uint8_t* payload = NULL;
  size_t payload_len = 0;
  CW_RETURN_IF_ERROR(cw__pack(request, stack, sizeof(stack), &payload, &payload_len),
                     "%s request", cw_msg_type_name(type));
  cw_status_t s = cw_ok_status();
  if (payload_len > c->limits.max_payload) {
    s = cw_make_status(CW_RESOURCE_EXHAUSTED,
                       "%s payload of %zu bytes exceeds the worker's limit of %u bytes",
                       cw_msg_type_name(type), payload_len, c->limits.max_payload);
    goto out;
  }

  cw__pending_t* p = calloc(1, sizeof(*p));
  if (!p) {
    s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  p->type = type;
  p->flags = flags | CW__PEND_SENDING;
  if (sink) p->sink = *sink;
  p->done = done;
  p->user = user;

  // The writer lock is taken before registering so that ids go out in order.
  pthread_mutex_lock(&c->write_mu);
  pthread_mutex_lock(&c->mu);
  if (c->dead) {
    s = cw__dead_status(c);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->write_mu);
    free(p);
    goto out;
  }
  uint64_t id = p->id = c->next_id++;
  cw__table_insert(&c->table, p);
  // Liveness counts silence only while something is owed: from now, if
  // nothing was.
  if (c->outstanding++ == 0) {
    atomic_store_explicit(&c->last_rx_ms, cw_time_now_ms(), memory_order_relaxed);
  }
  pthread_mutex_unlock(&c->mu);
  // From here on the reader may complete (and free) `p`; use `id` only.

  cw_status_t ws = defer && !bulk_len
                       ? cw__defer_frame(c, type, id, payload, payload_len)
                       : cw__write_frame(c, type, id, payload, payload_len, bulk, bulk_count,
                                         bulk_len);
  if (ws) {
    // A partial frame desynchronises the stream: close it so the reader
    // fails everything else outstanding.
    shutdown(c->fd, SHUT_RDWR);
  }
  pthread_mutex_unlock(&c->write_mu);

  // The reader fails no entry that is still SENDING and unanswered, so here
  // the entry is untouched, or the reader owns it (MATCHED: a reply came),
  // or it is DONE, or it completed through its callback and is gone.
  pthread_mutex_lock(&c->mu);
  cw__pending_t* q = cw__table_find(&c->table, id);
  if (q && !(q->flags & (CW__PEND_DONE | CW__PEND_MATCHED)) && (ws || c->dead)) {
    // Lost before any reply: report it here, not through the callback.
    cw__table_remove(&c->table, id);
    c->outstanding--;
    pthread_cond_broadcast(&c->cv);
    s = ws ? ws : cw__dead_status(c);
    cw__pending_free(q);
  } else {
    cw_status_free(ws);
    if (q && (q->flags & CW__PEND_DONE) && (q->flags & CW__PEND_DETACHED) && !q->status) {
      // A detached success that beat us here: nobody will claim it.
      cw__table_remove(&c->table, id);
      cw__pending_free(q);
    } else if (q) {
      q->flags &= ~(unsigned)CW__PEND_SENDING;
    }
    if (out_request_id) *out_request_id = id;
  }
  pthread_mutex_unlock(&c->mu);

out:
  if (payload != stack) free(payload);
  return s;
}

cw_status_t cw_client_send(cw_client_t* client, uint16_t type, const ProtobufCMessage* request,
                           const struct iovec* bulk, int bulk_count,
                           const cw_client_sink_t* sink, cw_client_done_fn done, void* user,
                           uint64_t* out_request_id) {
  return cw__send(client, type, request, bulk, bulk_count, sink, 0, done, user, out_request_id);
}

cw_status_t cw_client_send_deferred(cw_client_t* client, uint16_t type,
                                    const ProtobufCMessage* request, cw_client_done_fn done,
                                    void* user, uint64_t* out_request_id) {
  return cw__send(client, type, request, NULL, 0, NULL, CW__SEND_DEFER, done, user,
                  out_request_id);
}

// ---- Waiting ---------------------------------------------------------------

static cw_status_t cw__wait(cw_client_t* c, uint64_t id, ProtobufCMessage** out_reply,
                            uint64_t* out_bulk_len, void** out_alloc) {
  if (out_reply) *out_reply = NULL;
  if (out_bulk_len) *out_bulk_len = 0;
  if (out_alloc) *out_alloc = NULL;
  if (!c) return cw_make_status(CW_INVALID_ARGUMENT, "client is required");
  if (cw__on_reader_thread(c)) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "cannot wait inside a completion callback (it runs on the reader)");
  }
  pthread_mutex_lock(&c->mu);
  cw__pending_t* p = cw__table_find(&c->table, id);
  cw_status_t s = cw_ok_status();
  if (!p || p->done || (p->flags & (CW__PEND_DETACHED | CW__PEND_SENDING))) {
    s = cw_make_status(CW_INVALID_ARGUMENT,
                       "request %llu is not waitable (unknown, already claimed, or has a callback)",
                       (unsigned long long)id);
  } else if (p->flags & CW__PEND_CLAIMED) {
    s = cw_make_status(CW_FAILED_PRECONDITION, "request %llu is already being waited for",
                       (unsigned long long)id);
  }
  if (s) {
    pthread_mutex_unlock(&c->mu);
    return s;
  }
  p->flags |= CW__PEND_CLAIMED;
  while (!(p->flags & CW__PEND_DONE)) pthread_cond_wait(&c->cv, &c->mu);
  cw__table_remove(&c->table, id);
  pthread_mutex_unlock(&c->mu);

  s = p->status;
  p->status = cw_ok_status();
  if (!s) {
    if (out_reply) {
      *out_reply = p->reply;
      p->reply = NULL;
    }
    if (out_bulk_len) *out_bulk_len = p->bulk_len;
    if (out_alloc) {
      *out_alloc = p->alloc_data;
      p->alloc_data = NULL;
    }
  }
  cw__pending_free(p);
  return s;
}

cw_status_t cw_client_wait(cw_client_t* client, uint64_t request_id,
                           ProtobufCMessage** out_reply, uint64_t* out_bulk_len) {
  return cw__wait(client, request_id, out_reply, out_bulk_len, NULL);
}

static cw_status_t cw__call(cw_client_t* c, uint16_t type, const ProtobufCMessage* request,
                            const struct iovec* bulk, int bulk_count,
                            const cw_client_sink_t* sink, unsigned flags,
                            ProtobufCMessage** out_reply, uint64_t* out_bulk_len,
                            void** out_alloc) {
  if (out_reply) *out_reply = NULL;
  if (out_bulk_len) *out_bulk_len = 0;
  if (out_alloc) *out_alloc = NULL;
  if (c && cw__on_reader_thread(c)) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "cannot make a blocking call inside a completion callback");
  }
  uint64_t id = 0;
  CW_RETURN_IF_ERROR(cw__send(c, type, request, bulk, bulk_count, sink, flags, NULL, NULL, &id),
                     "%s", cw_msg_type_name(type));
  return cw__wait(c, id, out_reply, out_bulk_len, out_alloc);
}

cw_status_t cw_client_call(cw_client_t* client, uint16_t type, const ProtobufCMessage* request,
                           const struct iovec* bulk, int bulk_count,
                           const cw_client_sink_t* sink, ProtobufCMessage** out_reply,
                           uint64_t* out_bulk_len) {
  return cw__call(client, type, request, bulk, bulk_count, sink, 0, out_reply, out_bulk_len,
                  NULL);
}

cw_status_t cw_client_flush(cw_client_t* client) {
  if (!client) return cw_make_status(CW_INVALID_ARGUMENT, "client is required");
  cw_client_t* c = client;
  if (cw__on_reader_thread(c)) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "cannot flush inside a completion callback (it runs on the reader)");
  }
  pthread_mutex_lock(&c->mu);
  while (c->outstanding > 0) pthread_cond_wait(&c->cv, &c->mu);
  // Drain parked completions nobody waits for; keep the lowest-id error.
  cw__pending_t* first = NULL;
  for (size_t i = 0; i < c->table.num_buckets; ++i) {
    cw__pending_t** slot = &c->table.buckets[i];
    while (*slot) {
      cw__pending_t* p = *slot;
      if ((p->flags & CW__PEND_DONE) && !(p->flags & CW__PEND_CLAIMED)) {
        *slot = p->next;
        c->table.count--;
        if (p->status && (!first || p->id < first->id)) {
          cw__pending_free(first);
          first = p;
        } else {
          cw__pending_free(p);
        }
      } else {
        slot = &p->next;
      }
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (!first) return cw_ok_status();
  cw_status_t s = first->status;
  first->status = cw_ok_status();
  cw__pending_free(first);
  return s;
}

// ---- Reader thread -------------------------------------------------------

// Completes `p` (already detached from the reader's view of the stream) with
// `status`, `reply` and `bulk_len`, all taken. Called without c->mu.
static void cw__complete(cw_client_t* c, cw__pending_t* p, cw_status_t status,
                         ProtobufCMessage* reply, uint64_t bulk_len, void* alloc) {
  if (status) {
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    reply = NULL;
    free(alloc);
    alloc = NULL;
  }
  // p->done, p->user and p->id never change after registration.
  if (p->done) {
    pthread_mutex_lock(&c->mu);
    cw__table_remove(&c->table, p->id);
    pthread_mutex_unlock(&c->mu);
    p->done(p->user, status, reply);  // takes status
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    free(alloc);
    free(p);
    pthread_mutex_lock(&c->mu);
    c->outstanding--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  pthread_mutex_lock(&c->mu);
  if ((p->flags & CW__PEND_DETACHED) && !status && !(p->flags & CW__PEND_SENDING)) {
    // Nobody can wait for a detached request; drop its success now.
    cw__table_remove(&c->table, p->id);
    cw__pending_free(p);
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    free(alloc);
  } else {
    p->status = status;
    p->reply = reply;
    p->bulk_len = status ? 0 : bulk_len;
    p->alloc_data = alloc;
    p->flags |= CW__PEND_DONE;
  }
  c->outstanding--;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

// Marks the connection dead with `reason` (taken) and fails every request not
// still being written (their senders report those themselves).
static void cw__fail_all(cw_client_t* c, cw_status_t reason) {
  pthread_mutex_lock(&c->mu);
  if (!c->dead) {
    const char* why = cw_status_message(reason);
    size_t n = strlen(c->address) + strlen(why) + (c->hung ? strlen(c->hung) : 0) + 64;
    c->dead = malloc(n);
    if (c->dead) {
      if (c->closing) {
        snprintf(c->dead, n, "connection to %s closed by cw_client_release", c->address);
      } else if (c->hung) {
        snprintf(c->dead, n, "%s", c->hung);
      } else {
        snprintf(c->dead, n, "connection to %s lost: %s", c->address, why);
      }
    } else {
      c->dead = strdup("connection lost");
    }
  }
  cw_status_free(reason);
  // Collect first: callbacks run without the lock.
  cw__pending_t* victims = NULL;
  for (size_t i = 0; i < c->table.num_buckets; ++i) {
    cw__pending_t** slot = &c->table.buckets[i];
    while (*slot) {
      cw__pending_t* p = *slot;
      // SENDING and unanswered: its sender reports the loss itself.
      bool senders = (p->flags & CW__PEND_SENDING) && !(p->flags & CW__PEND_MATCHED);
      if (!(p->flags & CW__PEND_DONE) && !senders) {
        if (p->done) {
          // Off the table: the callback path owns it now.
          *slot = p->next;
          c->table.count--;
          p->next = victims;
          victims = p;
          continue;
        }
        p->status = cw_make_status(CW_UNAVAILABLE, "%s", c->dead ? c->dead : "connection lost");
        p->flags |= CW__PEND_DONE;
        c->outstanding--;
      }
      slot = &p->next;
    }
  }
  pthread_cond_broadcast(&c->cv);
  char* msg = c->dead ? strdup(c->dead) : NULL;
  pthread_mutex_unlock(&c->mu);

  while (victims) {
    cw__pending_t* p = victims;
    victims = p->next;
    p->done(p->user, cw_make_status(CW_UNAVAILABLE, "%s", msg ? msg : "connection lost"), NULL);
    free(p->alloc_data);
    free(p);
    pthread_mutex_lock(&c->mu);
    c->outstanding--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  free(msg);
}

// Reads and drops `len` bulk bytes so the stream stays in step.
static cw_status_t cw__discard(cw_client_t* c, uint64_t len) {
  uint8_t buf[CW__DISCARD_CHUNK];
  while (len > 0) {
    size_t n = len < sizeof(buf) ? (size_t)len : sizeof(buf);
    size_t got = 0;
    if (cw_rbuf_read(&c->rb, buf, n, &got) != 0) {
      return cw_make_status(CW_UNAVAILABLE, "reading reply bulk: %s",
                            cw__read_error_text(errno, 1));
    }
    len -= n;
  }
  return cw_ok_status();
}

// Handles one frame. Returns an error only for conditions that end the
// connection (I/O errors, protocol violations).
static cw_status_t cw__read_one(cw_client_t* c) {
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  size_t got = 0;
  if (cw_rbuf_read(&c->rb, hdr, sizeof(hdr), &got) != 0) {
    return cw_make_status(CW_UNAVAILABLE, "%s", cw__read_error_text(errno, got));
  }
  atomic_store_explicit(&c->last_rx_ms, cw_time_now_ms(), memory_order_relaxed);
  cw_frame_header_t h;
  CW_RETURN_IF_ERROR(cw_frame_header_decode(hdr, sizeof(hdr), &c->limits, &h),
                     "protocol violation from peer");
  if (!(h.flags & CW_FRAME_REPLY) && h.type != CW_MSG_EVENT) {
    return cw_make_status(CW_UNAVAILABLE, "protocol violation from peer: unexpected %s request",
                          cw_msg_type_name(h.type));
  }
  if (h.payload_len > c->payload_cap) {
    uint8_t* b = realloc(c->payload_buf, h.payload_len);
    if (!b) {
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a %u-byte payload",
                            h.payload_len);
    }
    c->payload_buf = b;
    c->payload_cap = h.payload_len;
  }
  if (h.payload_len && cw_rbuf_read(&c->rb, c->payload_buf, h.payload_len, &got) != 0) {
    return cw_make_status(CW_UNAVAILABLE, "reading payload: %s", cw__read_error_text(errno, 1));
  }
  ProtobufCMessage* msg = NULL;
  CW_RETURN_IF_ERROR(cw_frame_decode_payload(&h, c->payload_buf, &msg),
                     "protocol violation from peer: %s reply", cw_msg_type_name(h.type));

  if (!(h.flags & CW_FRAME_REPLY)) {
    // An unsolicited EVENT (no bulk: the header check refuses it).
    if (c->on_event) c->on_event(c->event_user, msg);
    protobuf_c_message_free_unpacked(msg, NULL);
    return cw_ok_status();
  }
  if (h.request_id == 0 && (h.flags & CW_FRAME_ERROR)) {
    // The peer could not read one of our frames and is closing.
    cw_status_t s = cw_error_reply_peer_closing((const Causeway__V1__ErrorReply*)msg);
    protobuf_c_message_free_unpacked(msg, NULL);
    return s;
  }

  pthread_mutex_lock(&c->mu);
  cw__pending_t* p = cw__table_find(&c->table, h.request_id);
  bool ok = p && !(p->flags & (CW__PEND_DONE | CW__PEND_MATCHED)) && p->type == h.type;
  // MATCHED keeps `p` alive for us: its sender no longer removes it, and
  // only this thread completes entries. Its other fields stay under c->mu;
  // copy what we need.
  unsigned pflags = 0;
  cw_client_sink_t sink = {0};
  if (ok) {
    p->flags |= CW__PEND_MATCHED;
    pflags = p->flags;
    sink = p->sink;
  }
  pthread_mutex_unlock(&c->mu);
  if (!ok) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return cw_make_status(CW_UNAVAILABLE,
                          "protocol violation from peer: %s reply for unknown request id %llu",
                          cw_msg_type_name(h.type), (unsigned long long)h.request_id);
  }

  cw_status_t status = cw_ok_status();
  void* alloc = NULL;
  if (h.flags & CW_FRAME_ERROR) {
    status = cw_error_reply_to_status((const Causeway__V1__ErrorReply*)msg, NULL);
    protobuf_c_message_free_unpacked(msg, NULL);
    msg = NULL;
  } else if (h.bulk_len) {
    void* dest = NULL;
    if (pflags & CW__PEND_ALLOC_SINK) {
      // h.bulk_len is already within limits.max_bulk.
      dest = alloc = h.bulk_len <= SIZE_MAX ? malloc((size_t)h.bulk_len) : NULL;
      if (!dest) {
        status = cw_make_status(CW_RESOURCE_EXHAUSTED,
                                "cannot allocate %llu bytes for the %s reply",
                                (unsigned long long)h.bulk_len, cw_msg_type_name(h.type));
      }
    } else if (h.bulk_len <= sink.capacity && sink.data) {
      dest = sink.data;
    } else {
      status = cw_make_status(CW_OUT_OF_RANGE,
                              "%s reply carries %llu bulk bytes but the sink holds %zu",
                              cw_msg_type_name(h.type), (unsigned long long)h.bulk_len,
                              sink.data ? sink.capacity : (size_t)0);
    }
    cw_status_t rs;
    if (dest) {
      rs = cw_rbuf_read(&c->rb, dest, (size_t)h.bulk_len, &got) == 0
               ? cw_ok_status()
               : cw_make_status(CW_UNAVAILABLE, "reading reply bulk: %s",
                                cw__read_error_text(errno, 1));
    } else {
      rs = cw__discard(c, h.bulk_len);
    }
    if (rs) {
      // The entry stays incomplete; cw__fail_all completes it.
      cw_status_free(status);
      protobuf_c_message_free_unpacked(msg, NULL);
      free(alloc);
      return rs;
    }
  }
  cw__complete(c, p, status, msg, h.bulk_len, alloc);
  return cw_ok_status();
}

static void* cw__reader_main(void* arg) {
  cw_client_t* c = arg;
  if (cw_rbuf_initialize(&c->rb, c->fd, CW_RBUF_DEFAULT_CAPACITY) != 0) {
    cw__fail_all(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the read buffer"));
    shutdown(c->fd, SHUT_RDWR);
    return NULL;
  }
  for (;;) {
    cw_status_t s = cw__read_one(c);
    if (s) {
      cw__fail_all(c, s);
      // Unblock a sender stuck on a peer that stopped reading.
      shutdown(c->fd, SHUT_RDWR);
      return NULL;
    }
  }
}

// ---- Liveness ----------------------------------------------------------------

static void cw__ping_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  cw_client_t* c = user;
  cw_status_free(status);
  pthread_mutex_lock(&c->mu);
  c->ping_out = false;
  pthread_mutex_unlock(&c->mu);
}

static void* cw__watchdog_main(void* arg) {
  cw_client_t* c = arg;
  int tick = c->liveness_ms >= 8 ? c->liveness_ms / 4 : 2;
  pthread_mutex_lock(&c->mu);
  while (!c->closing && !c->dead) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (int64_t)tick * 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&c->watchdog_cv, &c->mu, &ts);
    if (c->closing || c->dead) break;
    // Quiet is fine while nothing is owed (the PING itself does not count).
    if (c->outstanding <= (c->ping_out ? 1u : 0u)) continue;
    int64_t quiet = cw_time_now_ms() - atomic_load_explicit(&c->last_rx_ms, memory_order_relaxed);
    if (quiet >= c->liveness_ms) {
      size_t n = strlen(c->address) + 160;
      c->hung = malloc(n);
      if (c->hung) {
        snprintf(c->hung, n, "no answer from %s for %lld ms: it is hung or unreachable (the "
                 "client waits %d ms)", c->address, (long long)quiet, c->liveness_ms);
      }
      pthread_mutex_unlock(&c->mu);
      shutdown(c->fd, SHUT_RDWR);  // the reader fails everything outstanding
      return NULL;
    }
    if (quiet >= c->liveness_ms / 2 && !c->ping_out) {
      c->ping_out = true;
      pthread_mutex_unlock(&c->mu);
      Causeway__V1__Ping req = CAUSEWAY__V1__PING__INIT;
      // Blocks at most liveness_ms (SO_SNDTIMEO) on a peer that stopped reading.
      cw_status_t st = cw__send(c, CW_MSG_PING, &req.base, NULL, 0, NULL, 0, cw__ping_done, c,
                                NULL);
      pthread_mutex_lock(&c->mu);
      if (st) c->ping_out = false;
      cw_status_free(st);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

// ---- Connect / release -----------------------------------------------------

// Synchronous HELLO before the reader starts: the socket has send/receive
// timeouts of the connect timeout for the duration.
static cw_status_t cw__hello(cw_client_t* c, const cw_client_options_t* o, int timeout_ms) {
  char name[64];
  const char* peer_name = o ? o->peer_name : NULL;
  if (!peer_name) {
    snprintf(name, sizeof(name), "cw_client:%ld", (long)getpid());
    peer_name = name;
  }
  const char* token = (o && o->token) ? o->token : cw_settings_getenv(CW_SET_TOKEN);
  Causeway__V1__HelloRequest req;
  cw_hello_request_fill(&req, (o && o->role) ? o->role : CAUSEWAY__V1__ROLE__ROLE_CLIENT, token,
                        o ? o->session_id : 0, peer_name);

  uint8_t stack[512];
  uint8_t* payload = NULL;
  size_t payload_len = 0;
  CW_RETURN_IF_ERROR(cw__pack(&req.base, stack, sizeof(stack), &payload, &payload_len), "HELLO");
  uint64_t id = c->next_id++;
  cw_status_t s = cw__write_frame(c, CW_MSG_HELLO, id, payload, payload_len, NULL, 0, 0);
  if (payload != stack) free(payload);
  if (s) return cw_status_annotate(s, "HELLO");

  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  size_t got = 0;
  if (cw__read_full(c->fd, hdr, sizeof(hdr), &got) != 0) {
    int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      return cw_make_status(CW_UNAVAILABLE, "no HELLO reply from %s within %d ms", c->address,
                            timeout_ms);
    }
    return cw_make_status(CW_UNAVAILABLE, "HELLO to %s: %s", c->address,
                          cw__read_error_text(err, got));
  }
  cw_frame_header_t h;
  cw_status_t hs = cw_frame_header_decode(hdr, sizeof(hdr), &c->limits, &h);
  if (hs) {
    cw_status_t u = cw_make_status(CW_UNAVAILABLE, "bad HELLO reply from %s: %s", c->address,
                                   cw_status_message(hs));
    cw_status_free(hs);
    return u;
  }
  if (h.type != CW_MSG_HELLO || !(h.flags & CW_FRAME_REPLY) || h.request_id != id) {
    return cw_make_status(CW_UNAVAILABLE,
                          "bad HELLO reply from %s: got %s%s for request %llu", c->address,
                          cw_msg_type_name(h.type), (h.flags & CW_FRAME_REPLY) ? " reply" : "",
                          (unsigned long long)h.request_id);
  }
  uint8_t* buf = malloc(h.payload_len ? h.payload_len : 1);
  if (!buf) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (h.payload_len && cw__read_full(c->fd, buf, h.payload_len, &got) != 0) {
    int err = errno;
    free(buf);
    return cw_make_status(CW_UNAVAILABLE, "HELLO to %s: %s", c->address,
                          cw__read_error_text(err, 1));
  }
  ProtobufCMessage* msg = NULL;
  s = cw_frame_decode_payload(&h, buf, &msg);
  free(buf);
  if (s) {
    cw_status_t u = cw_make_status(CW_UNAVAILABLE, "bad HELLO reply from %s: %s", c->address,
                                   cw_status_message(s));
    cw_status_free(s);
    return u;
  }
  if (h.flags & CW_FRAME_ERROR) {
    // Keep the worker's code and words: they say what to fix (token, version).
    char context[300];
    snprintf(context, sizeof(context), "%s refused HELLO", c->address);
    s = cw_error_reply_to_status((const Causeway__V1__ErrorReply*)msg, context);
    protobuf_c_message_free_unpacked(msg, NULL);
    return s;
  }
  const Causeway__V1__HelloReply* r = (const Causeway__V1__HelloReply*)msg;
  if (r->version < CW_PROTOCOL_MIN_VERSION || r->version > CW_PROTOCOL_VERSION) {
    s = cw_make_status(CW_UNIMPLEMENTED, "%s chose protocol version %u; this client speaks %u..%u",
                       c->address, r->version, CW_PROTOCOL_MIN_VERSION, CW_PROTOCOL_VERSION);
    protobuf_c_message_free_unpacked(msg, NULL);
    return s;
  }
  c->session_id = r->session_id;
  c->worker_name = strdup(r->worker_name ? r->worker_name : "");
  if (r->max_payload) {
    c->limits.max_payload =
        r->max_payload < CW__MAX_PAYLOAD_CAP ? r->max_payload : CW__MAX_PAYLOAD_CAP;
  }
  if (r->max_bulk) c->limits.max_bulk = r->max_bulk;
  protobuf_c_message_free_unpacked(msg, NULL);
  if (!c->worker_name) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  return cw_ok_status();
}

static void cw__client_free(cw_client_t* c) {
  if (!c) return;
  if (c->fd >= 0) close(c->fd);
  if (c->table.buckets) {
    for (size_t i = 0; i < c->table.num_buckets; ++i) {
      cw__pending_t* p = c->table.buckets[i];
      while (p) {
        cw__pending_t* next = p->next;
        cw__pending_free(p);
        p = next;
      }
    }
    free(c->table.buckets);
  }
  pthread_cond_destroy(&c->cv);
  pthread_cond_destroy(&c->watchdog_cv);
  free(c->hung);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->write_mu);
  free(c->payload_buf);
  free(c->wbuf);
  cw_rbuf_deinitialize(&c->rb);
  free(c->dead);
  free(c->worker_name);
  free(c->address);
  free(c);
}

cw_status_t cw_client_connect(const char* address, const cw_client_options_t* options,
                              cw_client_t** out_client) {
  if (out_client) *out_client = NULL;
  if (!address || !address[0] || !out_client) {
    return cw_make_status(CW_INVALID_ARGUMENT, "an address and out_client are required");
  }
  int timeout_ms = (options && options->connect_timeout_ms > 0) ? options->connect_timeout_ms
                                                                : CW__DEFAULT_CONNECT_TIMEOUT_MS;
  cw_client_t* c = calloc(1, sizeof(*c));
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  c->fd = -1;
  pthread_mutex_init(&c->write_mu, NULL);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->next_id = 1;
  c->limits.max_payload = CW__DEFAULT_MAX_PAYLOAD;
  c->limits.max_bulk = CW__DEFAULT_MAX_BULK;
  c->address = strdup(address);
  pthread_cond_init(&c->watchdog_cv, NULL);
  if (options) {
    c->on_event = options->on_event;
    c->event_user = options->event_user;
    c->liveness_ms = options->liveness_ms > 0 ? options->liveness_ms : 0;
  }
  atomic_store_explicit(&c->last_rx_ms, cw_time_now_ms(), memory_order_relaxed);
  cw_status_t s = c->address ? cw__table_initialize(&c->table)
                             : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = cw__open_socket(address, timeout_ms, &c->fd);
  if (!s) s = cw__set_timeouts(c->fd, timeout_ms);
  if (!s) s = cw__hello(c, options, timeout_ms);
  // From now on reads block without limit; sends too, or for liveness_ms.
  if (!s) s = cw__set_timeouts(c->fd, 0);
  if (!s && c->liveness_ms) s = cw__set_send_timeout(c->fd, c->liveness_ms);
  if (!s) {
    int err = pthread_create(&c->reader, NULL, cw__reader_main, c);
    if (err) {
      s = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot start the reader thread: %s",
                         strerror(err));
    } else {
      c->reader_started = true;
    }
  }
  if (!s && c->liveness_ms) {
    int err = pthread_create(&c->watchdog, NULL, cw__watchdog_main, c);
    if (err) {
      s = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot start the watchdog thread: %s",
                         strerror(err));
      shutdown(c->fd, SHUT_RDWR);
      pthread_join(c->reader, NULL);
      c->reader_started = false;
    } else {
      c->watchdog_started = true;
    }
  }
  if (s) {
    cw__client_free(c);
    return s;
  }
  *out_client = c;
  return cw_ok_status();
}

void cw_client_release(cw_client_t* client) {
  if (!client) return;
  cw_client_t* c = client;
  pthread_mutex_lock(&c->mu);
  c->closing = true;
  pthread_cond_broadcast(&c->watchdog_cv);
  pthread_mutex_unlock(&c->mu);
  // Wakes the reader (EOF/error), which fails everything still outstanding.
  shutdown(c->fd, SHUT_RDWR);
  if (c->watchdog_started) pthread_join(c->watchdog, NULL);
  if (c->reader_started) pthread_join(c->reader, NULL);
  // Parked, unclaimed completions are freed with the table.
  cw__client_free(c);
}

void cw_client_shutdown(cw_client_t* client) {
  // The reader sees EOF and fails everything outstanding (cw__fail_all).
  if (client) shutdown(client->fd, SHUT_RDWR);
}

uint64_t cw_client_session_id(const cw_client_t* client) {
  return client ? client->session_id : 0;
}

const char* cw_client_peer_name(const cw_client_t* client) {
  return client && client->worker_name ? client->worker_name : "";
}

// ---- Typed helpers ---------------------------------------------------------

// Pipelined helpers: with no callback, the request is detached (success
// dropped, error parked for cw_client_flush).
static cw_status_t cw__send_pipelined(cw_client_t* c, uint16_t type,
                                      const ProtobufCMessage* request, const struct iovec* bulk,
                                      int bulk_count, cw_client_done_fn done, void* user) {
  return cw__send(c, type, request, bulk, bulk_count, NULL, done ? 0 : CW__PEND_DETACHED, done,
                  user, NULL);
}

cw_status_t cw_client_ping(cw_client_t* client) {
  Causeway__V1__Ping req = CAUSEWAY__V1__PING__INIT;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(cw_client_call(client, CW_MSG_PING, &req.base, NULL, 0, NULL, &reply, NULL),
                     "ping");
  protobuf_c_message_free_unpacked(reply, NULL);
  return cw_ok_status();
}

cw_status_t cw_client_inventory(cw_client_t* client, Causeway__V1__Inventory** out_inventory) {
  if (out_inventory) *out_inventory = NULL;
  if (!out_inventory) return cw_make_status(CW_INVALID_ARGUMENT, "out_inventory is required");
  Causeway__V1__InventoryRequest req = CAUSEWAY__V1__INVENTORY_REQUEST__INIT;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_INVENTORY, &req.base, NULL, 0, NULL, &reply, NULL),
      "inventory");
  *out_inventory = (Causeway__V1__Inventory*)reply;
  return cw_ok_status();
}

cw_status_t cw_client_stats(cw_client_t* client, Causeway__V1__Stats** out_stats) {
  if (out_stats) *out_stats = NULL;
  if (!out_stats) return cw_make_status(CW_INVALID_ARGUMENT, "out_stats is required");
  Causeway__V1__StatsRequest req = CAUSEWAY__V1__STATS_REQUEST__INIT;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(cw_client_call(client, CW_MSG_STATS, &req.base, NULL, 0, NULL, &reply, NULL),
                     "stats");
  *out_stats = (Causeway__V1__Stats*)reply;
  return cw_ok_status();
}

static cw_status_t cw__compile_reply(ProtobufCMessage* reply, uint32_t* out_num_outputs) {
  if (out_num_outputs) *out_num_outputs = ((Causeway__V1__CompileReply*)reply)->num_outputs;
  protobuf_c_message_free_unpacked(reply, NULL);
  return cw_ok_status();
}

cw_status_t cw_client_compile(cw_client_t* client, uint64_t exe_id, const char* format,
                              const void* code, size_t code_size, const void* compile_options,
                              size_t options_size, uint32_t* out_num_outputs) {
  if (out_num_outputs) *out_num_outputs = 0;
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = exe_id;
  req.format = (char*)(format ? format : "mlir");
  req.code.data = (uint8_t*)code;
  req.code.len = code ? code_size : 0;
  req.compile_options.data = (uint8_t*)compile_options;
  req.compile_options.len = compile_options ? options_size : 0;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, &reply, NULL),
      "compile exe %llu", (unsigned long long)exe_id);
  return cw__compile_reply(reply, out_num_outputs);
}

cw_status_t cw_client_serialize(cw_client_t* client, uint64_t exe_id, void** out_data,
                                size_t* out_size) {
  if (out_data) *out_data = NULL;
  if (out_size) *out_size = 0;
  if (!out_data || !out_size) {
    return cw_make_status(CW_INVALID_ARGUMENT, "out_data and out_size are required");
  }
  Causeway__V1__SerializeRequest req = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
  req.exe_id = exe_id;
  ProtobufCMessage* reply = NULL;
  uint64_t len = 0;
  void* data = NULL;
  CW_RETURN_IF_ERROR(cw__call(client, CW_MSG_SERIALIZE, &req.base, NULL, 0, NULL,
                              CW__PEND_ALLOC_SINK, &reply, &len, &data),
                     "serialize exe %llu", (unsigned long long)exe_id);
  uint64_t declared = ((Causeway__V1__SerializeReply*)reply)->size;
  protobuf_c_message_free_unpacked(reply, NULL);
  if (declared && declared != len) {
    free(data);
    return cw_make_status(CW_DATA_LOSS,
                          "serialize exe %llu: reply declares %llu bytes but carried %llu",
                          (unsigned long long)exe_id, (unsigned long long)declared,
                          (unsigned long long)len);
  }
  *out_data = data;
  *out_size = (size_t)len;
  return cw_ok_status();
}

cw_status_t cw_client_load(cw_client_t* client, uint64_t exe_id, const void* serialized,
                           size_t size, const void* compile_options, size_t options_size,
                           uint32_t* out_num_outputs) {
  if (out_num_outputs) *out_num_outputs = 0;
  if (!serialized && size) return cw_make_status(CW_INVALID_ARGUMENT, "serialized is NULL");
  Causeway__V1__LoadRequest req = CAUSEWAY__V1__LOAD_REQUEST__INIT;
  req.exe_id = exe_id;
  req.compile_options.data = (uint8_t*)compile_options;
  req.compile_options.len = compile_options ? options_size : 0;
  struct iovec iov = {.iov_base = (void*)serialized, .iov_len = size};
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_LOAD, &req.base, &iov, 1, NULL, &reply, NULL),
      "load exe %llu", (unsigned long long)exe_id);
  return cw__compile_reply(reply, out_num_outputs);
}

cw_status_t cw_client_upload(cw_client_t* client, uint64_t buffer_id, int dtype,
                             const int64_t* dims, size_t rank, const int64_t* byte_strides,
                             int device, const void* data, size_t size, cw_client_done_fn done,
                             void* user) {
  if (rank && !dims) return cw_make_status(CW_INVALID_ARGUMENT, "upload: dims is NULL");
  if (size && !data) return cw_make_status(CW_INVALID_ARGUMENT, "upload: data is NULL");
  uint64_t extent = 0;
  CW_RETURN_IF_ERROR(
      cw_array_extent(dtype, dims, rank, byte_strides, byte_strides ? rank : 0, &extent),
      "upload buffer %llu", (unsigned long long)buffer_id);
  // The worker would close the connection over this; refuse it here instead.
  if (extent != size) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "upload buffer %llu: %s array of rank %zu spans %llu bytes, got %zu",
                          (unsigned long long)buffer_id, cw_dtype_name(dtype), rank,
                          (unsigned long long)extent, size);
  }
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  req.buffer_id = buffer_id;
  req.dtype = (Causeway__V1__DType)dtype;
  req.n_dims = rank;
  req.dims = (int64_t*)dims;
  req.n_byte_strides = byte_strides ? rank : 0;
  req.byte_strides = (int64_t*)byte_strides;
  req.device = device;
  struct iovec iov = {.iov_base = (void*)data, .iov_len = size};
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_UPLOAD, &req.base, &iov, size ? 1 : 0,
                                        done, user),
                     "upload buffer %llu", (unsigned long long)buffer_id);
  return cw_ok_status();
}

cw_status_t cw_client_launch(cw_client_t* client, uint64_t exe_id, size_t num_devices,
                             size_t num_args, const uint64_t* const* args, size_t num_outputs,
                             const uint64_t* const* outputs, cw_client_done_fn done,
                             void* user) {
  if ((num_args && !args) || (num_outputs && !outputs)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "launch exe %llu: args/outputs missing",
                          (unsigned long long)exe_id);
  }
  Causeway__V1__IdList* lists = calloc(2 * num_devices + 1, sizeof(*lists));
  Causeway__V1__IdList** ptrs = calloc(2 * num_devices + 1, sizeof(*ptrs));
  if (!lists || !ptrs) {
    free(lists);
    free(ptrs);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t d = 0; d < num_devices; ++d) {
    Causeway__V1__IdList* a = &lists[d];
    Causeway__V1__IdList* o = &lists[num_devices + d];
    causeway__v1__id_list__init(a);
    causeway__v1__id_list__init(o);
    a->n_ids = num_args;
    a->ids = num_args ? (uint64_t*)args[d] : NULL;
    o->n_ids = num_outputs;
    o->ids = num_outputs ? (uint64_t*)outputs[d] : NULL;
    ptrs[d] = a;
    ptrs[num_devices + d] = o;
  }
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  req.exe_id = exe_id;
  req.n_args = num_devices;
  req.args = ptrs;
  req.n_outputs = num_devices;
  req.outputs = ptrs + num_devices;
  cw_status_t s = cw__send_pipelined(client, CW_MSG_LAUNCH, &req.base, NULL, 0, done, user);
  free(lists);
  free(ptrs);
  CW_RETURN_IF_ERROR(s, "launch exe %llu", (unsigned long long)exe_id);
  return cw_ok_status();
}

cw_status_t cw_client_download(cw_client_t* client, uint64_t buffer_id, void* data,
                               size_t capacity, size_t* out_size,
                               Causeway__V1__ArrayInfo** out_info) {
  if (out_size) *out_size = 0;
  if (out_info) *out_info = NULL;
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  req.buffer_id = buffer_id;
  cw_client_sink_t sink = {.data = data, .capacity = data ? capacity : 0};
  ProtobufCMessage* reply = NULL;
  uint64_t len = 0;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_DOWNLOAD, &req.base, NULL, 0, &sink, &reply, &len),
      "download buffer %llu", (unsigned long long)buffer_id);
  if (out_size) *out_size = (size_t)len;
  if (out_info) {
    *out_info = (Causeway__V1__ArrayInfo*)reply;
  } else {
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  return cw_ok_status();
}

cw_status_t cw_client_await(cw_client_t* client, uint64_t buffer_id) {
  Causeway__V1__AwaitRequest req = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  req.buffer_id = buffer_id;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(cw_client_call(client, CW_MSG_AWAIT, &req.base, NULL, 0, NULL, &reply, NULL),
                     "await buffer %llu", (unsigned long long)buffer_id);
  protobuf_c_message_free_unpacked(reply, NULL);
  return cw_ok_status();
}

cw_status_t cw_client_copy(cw_client_t* client, uint64_t src_id, uint64_t dst_id,
                           int dst_device, cw_client_done_fn done, void* user) {
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  req.src_id = src_id;
  req.dst_id = dst_id;
  req.dst_device = dst_device;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_COPY, &req.base, NULL, 0, done, user),
                     "copy %llu to %llu", (unsigned long long)src_id,
                     (unsigned long long)dst_id);
  return cw_ok_status();
}

cw_status_t cw_client_expect(cw_client_t* client, uint64_t buffer_id, cw_client_done_fn done,
                             void* user) {
  Causeway__V1__ExpectRequest req = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  req.buffer_id = buffer_id;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_EXPECT, &req.base, NULL, 0, done, user),
                     "expect buffer %llu", (unsigned long long)buffer_id);
  return cw_ok_status();
}

cw_status_t cw_client_send_to_peer(cw_client_t* client, uint64_t src_id,
                                   const char* peer_address, uint64_t dst_id, int dst_device,
                                   uint64_t dst_session, cw_client_done_fn done, void* user) {
  if (!peer_address || !peer_address[0]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "send: peer_address is required");
  }
  Causeway__V1__SendRequest req = CAUSEWAY__V1__SEND_REQUEST__INIT;
  req.src_id = src_id;
  req.peer_address = (char*)peer_address;
  req.dst_id = dst_id;
  req.dst_device = dst_device;
  req.dst_session = dst_session;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_SEND, &req.base, NULL, 0, done, user),
                     "send %llu to %s", (unsigned long long)src_id, peer_address);
  return cw_ok_status();
}

cw_status_t cw_client_delete(cw_client_t* client, const uint64_t* ids, size_t count,
                             cw_client_done_fn done, void* user) {
  if (count && !ids) return cw_make_status(CW_INVALID_ARGUMENT, "delete: ids is NULL");
  Causeway__V1__DeleteRequest req = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  req.n_ids = count;
  req.ids = (uint64_t*)ids;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_DELETE, &req.base, NULL, 0, done, user),
                     "delete %zu ids", count);
  return cw_ok_status();
}
