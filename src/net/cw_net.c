// Framed connections on a libuv loop (see cw_net.h). Loop phases touched:
//   timers: HELLO deadlines of accepted connections, connect deadlines;
//   poll I/O: accept, connect, reads (up to frames-per-wakeup frames per
//     connection; bulk bytes are read straight into their destination),
//     write completions;
//   idle: connections that hit the frame cap (or whose reading was held and
//     released) resume parsing here, so one busy peer cannot starve others;
//   prepare (before the loop blocks): the prepare hook, then each
//     connection's gathered small frames are written with one uv_write;
//   close callbacks: memory goes once both handles are closed and no owner
//     holds a reference.
#include "cw_net.h"

#include <assert.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_messages.h"
#include "cw_net_internal.h"
#include "cw_time.h"

#define CW__READAHEAD (64 * 1024)
// Before HELLO: a HELLO frame arrives in a few reads of this (the parser
// keeps a frame's payload itself, bounded by the pre-HELLO limit).
#define CW__READAHEAD_PREHELLO 1024
#define CW__OUT_INITIAL 4096
#define CW__HELD_WATCH_MS 1000  // how often a held connection is looked at for a hangup
#define CW__OUT_FLUSH_AT (256 * 1024)  // write at once past this many gathered bytes

static void cw__conn_process(cw_net_conn_t* c);
static void cw__out_write(cw_net_conn_t* c, const void* bulk, uint64_t bulk_len,
                          cw_net_free_fn bulk_free, void* bulk_user);
static void cw__close_when_written(cw_net_conn_t* c);
static void cw__held_drop(cw_net_conn_t* c);

// --- Lifetime -------------------------------------------------------------------

static void cw__conn_free(cw_net_conn_t* c) {
  assert(c->closing && !c->outreqs && !c->flush_queued && !c->paused);
  if (c->cb.on_free) c->cb.on_free(c->user);
  cw_conn_parser_deinitialize(&c->parser);
  if (c->addrs) uv_freeaddrinfo(c->addrs);
  cw_net__tls_free(c);
  free(c->readahead);
  free(c->out);
  free(c->out_spare);
  free(c->outreq_buckets);
  cw_status_free(c->close_reason);
  free(c);
}

// --- Requests sent, awaiting their replies ------------------------------------

// Adds r to the index by id, growing it to a bucket per request.
static void cw__outreq_index(cw_net_conn_t* c, cw_net_outreq_t* r) {
  if (c->num_outreqs + 1 > c->outreq_buckets_len) {
    size_t len = c->outreq_buckets_len ? 2 * c->outreq_buckets_len : 16;
    cw_net_outreq_t** b = calloc(len, sizeof(*b));
    if (b) {  // without memory the chains grow longer, or the list is scanned
      for (cw_net_outreq_t* o = c->outreqs; o; o = o->next) {
        if (o == r) continue;
        cw_net_outreq_t** head = &b[o->request_id & (len - 1)];
        o->hnext = *head;
        *head = o;
      }
      free(c->outreq_buckets);
      c->outreq_buckets = b;
      c->outreq_buckets_len = len;
    }
  }
  // Silence counts only while something is owed: from now, if nothing was.
  // (The clock, not the loop's time: that is stale after a long pass.)
  if (c->num_outreqs++ == 0 && c->link_limit_ms) c->last_rx_ms = (uint64_t)cw_time_now_ms();
  if (!c->outreq_buckets_len) return;
  cw_net_outreq_t** head = &c->outreq_buckets[r->request_id & (c->outreq_buckets_len - 1)];
  r->hnext = *head;
  *head = r;
}

// Puts r on the send-order list (at its head: a request completed first on a
// close) and in the index.
static void cw__outreq_link(cw_net_conn_t* c, cw_net_outreq_t* r, bool at_head) {
  if (at_head) {
    r->prev = NULL;
    r->next = c->outreqs;
    if (c->outreqs) c->outreqs->prev = r;
    else c->outreqs_tail = r;
    c->outreqs = r;
  } else {
    r->next = NULL;
    r->prev = c->outreqs_tail;
    if (c->outreqs_tail) c->outreqs_tail->next = r;
    else c->outreqs = r;
    c->outreqs_tail = r;
  }
  cw__outreq_index(c, r);
}

static cw_net_outreq_t* cw__outreq_find(const cw_net_conn_t* c, uint64_t request_id) {
  cw_net_outreq_t* r = c->outreq_buckets_len
                           ? c->outreq_buckets[request_id & (c->outreq_buckets_len - 1)]
                           : c->outreqs;
  while (r && r->request_id != request_id) r = c->outreq_buckets_len ? r->hnext : r->next;
  return r;
}

static void cw__outreq_unlink(cw_net_conn_t* c, cw_net_outreq_t* r) {
  if (r->prev) r->prev->next = r->next;
  else c->outreqs = r->next;
  if (r->next) r->next->prev = r->prev;
  else c->outreqs_tail = r->prev;
  r->next = r->prev = NULL;
  if (c->outreq_buckets_len) {
    cw_net_outreq_t** pp = &c->outreq_buckets[r->request_id & (c->outreq_buckets_len - 1)];
    while (*pp && *pp != r) pp = &(*pp)->hnext;
    if (*pp) *pp = r->hnext;
  }
  r->hnext = NULL;
  c->num_outreqs--;
}

void cw_net_conn_retain(cw_net_conn_t* c) { c->refs++; }

void cw_net_conn_release(cw_net_conn_t* c) {
  if (!c) return;
  assert(c->refs > 0);
  if (--c->refs == 0) cw__conn_free(c);
}

static void cw__handle_closed(uv_handle_t* h) { cw_net_conn_release((cw_net_conn_t*)h->data); }

// Fails the requests this side sent. When the peer never became usable (an
// outbound one unreachable or whose HELLO was refused) they fail with the
// reason itself: that says what went wrong with the peer. Any other close
// (EOF, the owner's, a violation), even before HELLO was answered, is
// "connection to NAME closed: REASON".
static void cw__fail_outreqs(cw_net_conn_t* c, cw_status_t reason) {
  if (c->recv_req) {
    cw_net_outreq_t* r = c->recv_req;
    c->recv_req = NULL;
    protobuf_c_message_free_unpacked(c->recv_msg, NULL);
    free(c->recv_bulk);
    c->recv_msg = NULL;
    c->recv_bulk = NULL;
    cw__outreq_link(c, r, true);
  }
  bool early = c->unusable && reason;
  while (c->outreqs) {
    cw_net_outreq_t* r = c->outreqs;
    cw__outreq_unlink(c, r);
    cw_status_t st = early ? cw_status_clone(reason)
                           : cw_make_status(CW_UNAVAILABLE, "connection to %s closed%s%s",
                                            c->name, reason ? ": " : "",
                                            reason ? cw_status_message(reason) : "");
    r->fn(r->user, c, st, NULL, NULL, 0);
    free(r);
  }
}

static void cw__resume_later(cw_net_conn_t* c);

void cw_net_conn_close(cw_net_conn_t* c, cw_status_t reason) {
  if (c->closing) {
    cw_status_free(reason);
    return;
  }
  c->closing = true;
  c->close_reason = reason;
  cw_net_t* net = c->net;
  CW_LOGD("%s: closed%s%s", c->name, reason ? ": " : "", reason ? cw_status_message(reason) : "");
  if (c->reading) uv_read_stop(&c->h.stream);
  c->reading = false;
  // A lookup not started yet is dropped (one under way runs out: its
  // callback sees the close).
  if (c->resolving) (void)uv_cancel((uv_req_t*)&c->resolve_req);
  cw__held_drop(c);
  if (c->prev) c->prev->next = c->next;
  else if (net->conns == c) net->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  if (!c->outbound) net->inbound_connections--;
  if (net->gate_on) cw_net_gate_leave(&net->gate, &c->gate);
  if (c->tls) {
    cw_net__tls_close(c);
  } else if (c->out_len && (c->connected || !c->outbound)) {
    // Best effort, as an unqueued uv_write would have: frames gathered
    // before the close (a last error reply) still reach the peer.
    uv_buf_t b = {.base = (char*)c->out, .len = c->out_len};
    (void)uv_try_write(&c->h.stream, &b, 1);
  }
  c->out_len = 0;
  // Closing already for a next address: that close callback sees this one.
  if (!c->redialing) uv_close(&c->h.handle, cw__handle_closed);
  uv_close((uv_handle_t*)&c->timer, cw__handle_closed);
  cw__fail_outreqs(c, reason);
  if (c->cb.on_close) c->cb.on_close(c, reason);
}

int cw_net__test_failing_conn_allocs;

cw_net_conn_t* cw_net__conn_create(cw_net_t* net, bool outbound, bool pipe) {
  if (cw_net__test_failing_conn_allocs > 0) {
    cw_net__test_failing_conn_allocs--;
    return NULL;
  }
  cw_net_conn_t* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->net = net;
  c->outbound = outbound;
  c->next_request_id = 1;
  cw_conn_parser_initialize(&c->parser, outbound ? &net->options.limits
                                                 : &net->options.prehello_limits);
  // Before HELLO nothing else is read, whatever its length (docs/protocol.md rule 2).
  if (!outbound) cw_conn_parser_require_hello(&c->parser, true);
  int rc = pipe ? uv_pipe_init(net->loop, &c->h.pipe, 0) : uv_tcp_init(net->loop, &c->h.tcp);
  if (rc < 0) {
    cw_conn_parser_deinitialize(&c->parser);
    free(c);
    return NULL;
  }
  uv_timer_init(net->loop, &c->timer);
  c->h.handle.data = c;
  c->timer.data = c;
  c->refs = 2;  // one per handle; dropped by the close callbacks
  c->next = net->conns;
  if (net->conns) net->conns->prev = c;
  net->conns = c;
  if (!outbound) net->inbound_connections++;
  return c;
}

void cw_net_conn_set_callbacks(cw_net_conn_t* c, const cw_net_conn_callbacks_t* cb, void* user) {
  c->cb = *cb;
  c->user = user;
}
void* cw_net_conn_user(const cw_net_conn_t* c) { return c->user; }
cw_net_t* cw_net_conn_net(const cw_net_conn_t* c) { return c->net; }
const char* cw_net_conn_name(const cw_net_conn_t* c) { return c->name; }
bool cw_net_conn_is_open(const cw_net_conn_t* c) { return c && !c->closing; }
bool cw_net_conn_is_outbound(const cw_net_conn_t* c) { return c->outbound; }
int cw_net_conn_role(const cw_net_conn_t* c) { return c->role; }
cw_status_t cw_net_conn_close_reason(const cw_net_conn_t* c) { return c->close_reason; }

void cw_net_conn_set_name(cw_net_conn_t* c, const char* name) {
  size_t n = 0;
  for (const char* p = name; *p && n + 1 < 64; ++p) {
    c->name[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
  }
  c->name[n] = 0;
}

void cw_net__hello_accepted(cw_net_conn_t* c, int role, bool has_session) {
  c->hello_done = true;
  c->role = role;
  c->has_session = has_session;
  if (c->net->gate_on) cw_net_gate_leave(&c->net->gate, &c->gate);
  uv_timer_stop(&c->timer);
  cw_conn_parser_set_limits(&c->parser, &c->net->options.limits);
  cw_conn_parser_require_hello(&c->parser, false);
  if (c->ssl) cw_net__tls_hello_accepted(c);
}

// A KEEPALIVE event, unless writes are still under way: those bytes tell the
// peer the link is up as well, and a peer that stopped reading is not sent
// more.
static void cw__keepalive(uv_timer_t* t) {
  cw_net_conn_t* c = t->data;
  if (c->closing || c->close_after_write || c->writes_pending) return;
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__KEEPALIVE;
  cw_net_conn_send(c, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0, NULL, NULL);
}

uint32_t cw_net__keepalive_start(cw_net_conn_t* c, uint32_t asked_ms) {
  uint32_t ms = asked_ms < CW_NET_KEEPALIVE_MIN_MS ? CW_NET_KEEPALIVE_MIN_MS
                : asked_ms > CW_NET_KEEPALIVE_MAX_MS ? CW_NET_KEEPALIVE_MAX_MS
                                                     : asked_ms;
  uv_timer_start(&c->timer, cw__keepalive, ms, ms);
  return ms;
}

void cw_net_conn_set_bulk_dest(cw_net_conn_t* c, uint8_t* dest) {
  cw_conn_parser_set_bulk_dest(&c->parser, dest);
  c->recv_owner_bulk = dest != NULL;
}

// --- Writing --------------------------------------------------------------------
//
// Frames without bulk (nearly every reply) are not written one by one: they
// are packed behind each other in the connection's out buffer, and the net's
// prepare handle (once per loop iteration, before the loop blocks) writes
// each connection's buffer with one uv_write. A pipelined stream of launches
// so costs one writev per wakeup instead of one per reply. A frame with bulk
// takes the gathered bytes with it: one uv_write of [gathered frames + its
// header and payload, its bulk from caller memory], so bulk stays zero-copy
// and every frame keeps its place on the connection.

typedef struct cw__write_s {
  uv_write_t req;
  cw_net_conn_t* conn;
  uint8_t* payload;  // owned: the gathered frames
  size_t payload_cap;
  cw_net_free_fn bulk_free;
  void* bulk_user;
  // Held while the connection's name resolves (c->held): what to write.
  struct cw__write_s* next;
  size_t payload_len;
  const void* bulk;
  uint64_t bulk_len;
} cw__write_t;

static void cw__write_done(uv_write_t* req, int status) {
  cw__write_t* wr = (cw__write_t*)req;
  cw_net_conn_t* c = wr->conn;
  if (wr->payload && !c->out_spare && wr->payload_cap <= CW__OUT_FLUSH_AT) {
    c->out_spare = wr->payload;
    c->out_spare_cap = wr->payload_cap;
  } else {
    free(wr->payload);
  }
  if (wr->bulk_free) wr->bulk_free(wr->bulk_user);
  free(wr);
  cw_net__write_finished(c, status);
  cw_net_conn_release(c);
}

void cw_net__write_finished(cw_net_conn_t* c, int status) {
  c->writes_pending--;
  if (status < 0 && !c->closing) {
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", c->name,
                                        uv_strerror(status)));
  } else {
    cw__close_when_written(c);
  }
}

// A connection closing after its writes (close_after_write), once none is
// pending: frames gathered since go out first, and the close follows them.
static void cw__close_when_written(cw_net_conn_t* c) {
  if (!c->close_after_write || c->writes_pending || c->closing) return;
  if (c->out_len) cw__out_write(c, NULL, 0, NULL, NULL);
  else cw_net_conn_close(c, NULL);
}

// A write record of the gathered frames (c->out, which the caller then
// lets go of) with `bulk_free`; NULL when out of memory (then the bulk is
// freed and the connection closes).
static cw__write_t* cw__write_new(cw_net_conn_t* c, cw_net_free_fn bulk_free, void* bulk_user) {
  cw__write_t* wr = calloc(1, sizeof(*wr));
  if (!wr) {
    if (bulk_free) bulk_free(bulk_user);
    cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory writing"));
    return NULL;
  }
  wr->conn = c;
  wr->payload = c->out;
  wr->payload_cap = c->out_cap;
  wr->bulk_free = bulk_free;
  wr->bulk_user = bulk_user;
  return wr;
}

// Hands the gathered frames (and `bulk`, if any) to libuv as one write.
static void cw__out_write(cw_net_conn_t* c, const void* bulk, uint64_t bulk_len,
                          cw_net_free_fn bulk_free, void* bulk_user) {
  if (c->tls) {
    cw_net__tls_write(c, bulk, bulk_len, bulk_free, bulk_user);
    return;
  }
  if (c->resolving || c->dialing) {
    // No socket until the name resolves: frames wait in c->out; a write
    // with bulk is held, in order, the bulk by reference (not copied: a
    // bulk may be larger than memory allows twice, or than 4 GiB).
    if (!bulk_len && !bulk_free) return;
    cw__write_t* wr = cw__write_new(c, bulk_free, bulk_user);
    if (!wr) return;
    wr->payload_len = c->out_len;
    wr->bulk = bulk;
    wr->bulk_len = bulk_len;
    c->out = NULL;
    c->out_len = c->out_cap = 0;
    if (c->held_tail) c->held_tail->next = wr;
    else c->held = wr;
    c->held_tail = wr;
    cw_net_conn_retain(c);
    c->writes_pending++;
    return;
  }
  size_t done = 0;  // of the gathered frames, written here
  if (!bulk_len && !bulk_free && c->out_len) {
    // Small frames go out now when the socket takes them: a queued uv_write
    // would cost the loop another pass (its callback) and a request.
    uv_buf_t b = uv_buf_init((char*)c->out, (unsigned)c->out_len);
    int rc = uv_try_write(&c->h.stream, &b, 1);
    if (rc >= 0) done = (size_t)rc;
    if (done == c->out_len) {
      c->out_len = 0;
      if (c->out_cap > CW__OUT_FLUSH_AT) {  // a burst's buffer is not kept
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
      }
      cw__close_when_written(c);
      return;
    }
    // UV_EAGAIN or a part: the rest through uv_write, which reports errors.
  }
  cw__write_t* wr = cw__write_new(c, bulk_free, bulk_user);
  if (!wr) return;
  uv_buf_t bufs[2];
  unsigned n = 0;
  if (c->out_len > done) {
    bufs[n++] = uv_buf_init((char*)c->out + done, (unsigned)(c->out_len - done));
  }
  if (bulk_len) {
    bufs[n].base = (char*)(uintptr_t)bulk;
    bufs[n].len = (size_t)bulk_len;
    n++;
  }
  c->out = NULL;
  c->out_len = c->out_cap = 0;
  int rc = n ? uv_write(&wr->req, &c->h.stream, bufs, n, cw__write_done) : 0;
  if (rc < 0 || n == 0) {
    free(wr->payload);
    free(wr);
    if (bulk_free) bulk_free(bulk_user);
    if (rc < 0) {
      cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", c->name,
                                          uv_strerror(rc)));
    }
    return;
  }
  cw_net_conn_retain(c);
  c->writes_pending++;
}

// Drops the writes held for a socket (a close while resolving).
static void cw__held_drop(cw_net_conn_t* c) {
  while (c->held) {
    cw__write_t* wr = c->held;
    c->held = wr->next;
    free(wr->payload);
    if (wr->bulk_free) wr->bulk_free(wr->bulk_user);
    free(wr);
    c->writes_pending--;
    cw_net_conn_release(c);  // never the last: the handles hold theirs
  }
  c->held_tail = NULL;
}

void cw_net__conn_write_waiting(cw_net_conn_t* c) {
  if (c->closing) return;
  if (c->tls) {
    cw_net__tls_write_waiting(c);
    return;
  }
  while (c->held && !c->closing) {
    cw__write_t* wr = c->held;
    c->held = wr->next;
    if (!c->held) c->held_tail = NULL;
    wr->next = NULL;
    uv_buf_t bufs[2];
    unsigned n = 0;
    if (wr->payload_len) {
      bufs[n].base = (char*)wr->payload;
      bufs[n].len = wr->payload_len;
      n++;
    }
    if (wr->bulk_len) {
      bufs[n].base = (char*)(uintptr_t)wr->bulk;
      bufs[n].len = (size_t)wr->bulk_len;
      n++;
    }
    int rc = n ? uv_write(&wr->req, &c->h.stream, bufs, n, cw__write_done) : UV_EINVAL;
    if (rc < 0) {
      // As a write that failed at once: freed here, and the close follows.
      free(wr->payload);
      if (wr->bulk_free) wr->bulk_free(wr->bulk_user);
      free(wr);
      c->writes_pending--;
      if (n && !c->closing) {
        cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "write to %s failed: %s", c->name,
                                            uv_strerror(rc)));
      } else if (!n) {
        cw__close_when_written(c);
      }
      cw_net_conn_release(c);
    }
  }
  if (c->held) cw__held_drop(c);  // closed meanwhile
  if (!c->closing && c->out_len) cw__out_write(c, NULL, 0, NULL, NULL);
}

// Prepare phase: the hook (the worker's inline completions), then every
// connection's gathered frames. Runs until both are empty: a handle started
// during this phase would only run after the next poll.
static void cw__on_flush(uv_prepare_t* h) {
  cw_net_t* net = h->data;
  for (;;) {
    if (net->prepare_hook && net->prepare_hook(net->prepare_user)) continue;
    cw_net_conn_t* list = net->flush_list;
    if (!list) break;
    net->flush_list = net->flush_tail = NULL;
    while (list) {
      cw_net_conn_t* c = list;
      list = c->flush_next;
      c->flush_next = NULL;
      c->flush_queued = false;
      if (!c->closing && c->out_len) cw__out_write(c, NULL, 0, NULL, NULL);
      cw_net_conn_release(c);  // the flush list's reference
    }
  }
  uv_prepare_stop(&net->flush);
}

void cw_net_set_prepare_hook(cw_net_t* net, bool (*hook)(void* user), void* user) {
  net->prepare_hook = hook;
  net->prepare_user = user;
}

void cw_net_wake(cw_net_t* net) {
  if (net->handles_open) uv_prepare_start(&net->flush, cw__on_flush);
}

// Room for `need` more bytes in c->out.
static bool cw__out_reserve(cw_net_conn_t* c, size_t need) {
  if (!c->out && c->out_spare) {
    c->out = c->out_spare;
    c->out_cap = c->out_spare_cap;
    c->out_spare = NULL;
    c->out_spare_cap = 0;
  }
  if (need <= c->out_cap - c->out_len) return true;
  size_t cap = c->out_cap ? c->out_cap : CW__OUT_INITIAL;
  while (cap - c->out_len < need) {
    if (cap > SIZE_MAX / 2) return false;
    cap *= 2;
  }
  uint8_t* grown = realloc(c->out, cap);
  if (!grown) return false;
  c->out = grown;
  c->out_cap = cap;
  return true;
}

void cw_net_conn_send(cw_net_conn_t* c, uint16_t type, uint32_t flags, uint64_t request_id,
                      const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len,
                      cw_net_free_fn bulk_free, void* bulk_user) {
  if (c->closing) {
    if (bulk_free) bulk_free(bulk_user);
    return;
  }
  size_t plen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
  if (plen > c->net->options.limits.max_payload && !(flags & CW_FRAME_ERROR)) {
    // The peer would refuse the frame and drop the connection (a status of
    // many sessions, a huge program's info): a reply says so instead, and
    // anything else ends the connection here with the reason.
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED,
                                    "%s %s of %zu bytes exceeds the payload limit of %u bytes "
                                    "(max_payload)", cw_msg_type_name(type),
                                    (flags & CW_FRAME_REPLY) ? "reply" : "frame", plen,
                                    c->net->options.limits.max_payload);
    if (bulk_free) bulk_free(bulk_user);
    CW_LOGW("%s: %s", c->name, cw_status_message(st));
    if (flags & CW_FRAME_REPLY) cw_net_conn_reply_error(c, type, request_id, st);
    else cw_net_conn_close(c, st);
    return;
  }
  if (plen > UINT32_MAX || !cw__out_reserve(c, CW_FRAME_HEADER_SIZE + plen)) {
    if (bulk_free) bulk_free(bulk_user);
    cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory sending a %s frame",
                                        cw_msg_type_name(type)));
    return;
  }
  cw_frame_header_t h = {CW_FRAME_MAGIC, CW_PROTOCOL_VERSION, type, flags, (uint32_t)plen,
                         request_id, bulk_len};
  cw_frame_header_encode(&h, c->out + c->out_len);
  if (plen) protobuf_c_message_pack(msg, c->out + c->out_len + CW_FRAME_HEADER_SIZE);
  c->out_len += CW_FRAME_HEADER_SIZE + plen;
  if (c->cb.on_bytes) c->cb.on_bytes(c, 0, CW_FRAME_HEADER_SIZE + plen + bulk_len);
  if (bulk_len || bulk_free || c->out_len >= CW__OUT_FLUSH_AT) {
    cw__out_write(c, bulk, bulk_len, bulk_free, bulk_user);
  } else if (!c->flush_queued) {
    cw_net_t* net = c->net;
    c->flush_queued = true;
    cw_net_conn_retain(c);
    c->flush_next = NULL;
    if (net->flush_list) net->flush_tail->flush_next = c;
    else net->flush_list = c;
    net->flush_tail = c;
    cw_net_wake(net);
  }
}

void cw_net_conn_reply(cw_net_conn_t* c, uint16_t type, uint64_t request_id,
                       const ProtobufCMessage* msg) {
  cw_net_conn_send(c, type, CW_FRAME_REPLY, request_id, msg, NULL, 0, NULL, NULL);
}

void cw_net_conn_reply_error(cw_net_conn_t* c, uint16_t type, uint64_t request_id,
                             cw_status_t status) {
  Causeway__V1__ErrorReply er;
  cw_error_reply_fill(&er, status);
  CW_LOGD("%s: %s #%" PRIu64 " -> %s: %s", c->name, cw_msg_type_name(type), request_id,
          cw_status_code_name(cw_status_code(status)), cw_status_message(status));
  cw_net_conn_send(c, type, CW_FRAME_REPLY | CW_FRAME_ERROR, request_id, &er.base, NULL, 0, NULL,
                   NULL);
  cw_status_free(status);
}

void cw_net_conn_violation(cw_net_conn_t* c, uint16_t type, uint64_t request_id,
                           cw_status_t status) {
  CW_LOGW("%s: closing: %s", c->name, cw_status_message(status));
  cw_net__refuse(c, type, request_id, status);
}

void cw_net__refuse(cw_net_conn_t* c, uint16_t type, uint64_t request_id, cw_status_t status) {
  if (!cw_msg_info(type)) type = CW_MSG_HELLO;  // the peer can decode the answer
  if (c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  }
  c->close_after_write = true;
  cw_net_conn_reply_error(c, type, request_id, status);
  cw__close_when_written(c);
}

void cw_net_conn_request(cw_net_conn_t* c, uint16_t type, const ProtobufCMessage* msg,
                         const void* bulk, uint64_t bulk_len, cw_net_free_fn bulk_free,
                         void* bulk_user, cw_net_reply_fn fn, void* user) {
  cw_net_outreq_t* r = c->closing ? NULL : calloc(1, sizeof(*r));
  if (!r) {
    if (bulk_free) bulk_free(bulk_user);
    cw_status_t st;
    if (!c->closing) {
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    } else if (c->unusable && c->close_reason) {
      st = cw_status_clone(c->close_reason);  // what made the peer unusable
    } else {
      st = cw_make_status(CW_UNAVAILABLE, "connection to %s is closed", c->name);
    }
    fn(user, c, st, NULL, NULL, 0);
    return;
  }
  r->request_id = c->next_request_id++;
  r->type = type;
  r->fn = fn;
  r->user = user;
  cw__outreq_link(c, r, false);
  // A failed write closes the connection, which completes r.
  cw_net_conn_send(c, type, 0, r->request_id, msg, bulk, bulk_len, bulk_free, bulk_user);
}

// --- Reading --------------------------------------------------------------------

size_t cw_net__read_size(const cw_net_conn_t* c) {
  return (c->outbound || c->hello_done) ? CW__READAHEAD : CW__READAHEAD_PREHELLO;
}

bool cw_net__buffer_reserve(uint8_t** buf, size_t* cap, size_t want) {
  if (*cap >= want) return true;
  uint8_t* grown = malloc(want);
  if (!grown) return false;
  free(*buf);
  *buf = grown;
  *cap = want;
  return true;
}

static void cw__alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_net_conn_t* c = h->data;
  uint8_t* ptr;
  uint64_t len;
  if (c->tls) {
    // Ciphertext; plaintext is decrypted from it by cw_net__tls_pump_in.
    // Reading stops while the SSL has not taken all of it, so it is empty.
    c->tls_in_off = c->tls_in_len = 0;
    cw_net__buffer_reserve(&c->tls_in, &c->tls_in_cap, cw_net__read_size(c));
    buf->base = (char*)c->tls_in;
    buf->len = c->tls_in ? c->tls_in_cap : 0;
    return;
  }
  // Bulk bytes go straight into their destination.
  if (cw_conn_parser_bulk_window(&c->parser, &ptr, &len) && len >= 4096) {
    buf->base = (char*)ptr;
    buf->len = len > (1u << 30) ? (1u << 30) : (size_t)len;
    return;
  }
  // Reading stops while parsed bytes wait (cw__conn_process), so the buffer
  // is empty here and may be replaced. Out of memory: libuv reports
  // UV_ENOBUFS for an empty buffer (closes).
  cw_net__buffer_reserve(&c->readahead, &c->ra_cap, cw_net__read_size(c));
  buf->base = (char*)c->readahead;
  buf->len = c->readahead ? c->ra_cap : 0;
}

static void cw__reply_complete(cw_net_conn_t* c, cw_net_outreq_t* r, const cw_frame_header_t* h,
                               const ProtobufCMessage* msg, uint8_t* bulk) {
  cw_status_t st = cw_ok_status();
  if (h->flags & CW_FRAME_ERROR) {
    st = cw_error_reply_to_status((const Causeway__V1__ErrorReply*)msg, NULL);
    free(bulk);
    bulk = NULL;
  }
  r->fn(r->user, c, st, st ? NULL : msg, bulk, bulk ? h->bulk_len : 0);
  free(r);
}

void cw_net__bulk_done(cw_net_conn_t* c, const cw_frame_header_t* h) {
  if (c->recv_req) {
    cw_net_outreq_t* r = c->recv_req;
    ProtobufCMessage* msg = c->recv_msg;
    uint8_t* bulk = c->recv_bulk;
    c->recv_req = NULL;
    c->recv_msg = NULL;
    c->recv_bulk = NULL;
    cw__reply_complete(c, r, h, msg, bulk);
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  if (c->recv_owner_bulk) {
    c->recv_owner_bulk = false;
    if (c->cb.on_bulk_done) c->cb.on_bulk_done(c, h);
  }
}

static void cw__on_reply(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  if (h->request_id == 0 && (h->flags & CW_FRAME_ERROR)) {
    // The peer could not read one of our frames and is closing.
    cw_status_t st = cw_error_reply_peer_closing((const Causeway__V1__ErrorReply*)msg);
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_close(c, st);
    return;
  }
  cw_net_outreq_t* r = cw__outreq_find(c, h->request_id);
  if (!r || r->type != h->type) {
    protobuf_c_message_free_unpacked(msg, NULL);
    if (!c->outbound) {
      cw_net_conn_violation(c, h->type, h->request_id,
                            cw_make_status(CW_INVALID_ARGUMENT, "unexpected %s reply",
                                           cw_msg_type_name(h->type)));
    } else {
      cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "%s reply to unknown request %" PRIu64,
                                          cw_msg_type_name(h->type), h->request_id));
    }
    return;
  }
  cw__outreq_unlink(c, r);
  if (h->bulk_len) {
    uint8_t* bulk = malloc((size_t)h->bulk_len);
    if (!bulk) {
      cw__outreq_link(c, r, true);  // failed by the close
      protobuf_c_message_free_unpacked(msg, NULL);
      cw_net_conn_close(c, cw_make_status(CW_RESOURCE_EXHAUSTED,
                                          "cannot allocate %" PRIu64 " bytes for a %s reply",
                                          h->bulk_len, cw_msg_type_name(h->type)));
      return;
    }
    c->recv_req = r;
    c->recv_msg = msg;
    c->recv_bulk = bulk;
    cw_conn_parser_set_bulk_dest(&c->parser, bulk);
    return;
  }
  cw__reply_complete(c, r, h, msg, NULL);
  protobuf_c_message_free_unpacked(msg, NULL);
}

static void cw__on_frame(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  if (h->flags & CW_FRAME_REPLY) {
    cw__on_reply(c, h, msg);
    return;
  }
  c->recv_owner_bulk = false;
  if (c->outbound) {
    // A peer we called sends notices at most (the controller's EVENTs to a
    // worker's REGISTER connection are not for workers).
    protobuf_c_message_free_unpacked(msg, NULL);
    if (!cw_msg_reply_descriptor(h->type)) return;
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "peer sent a %s request on an outbound "
                                        "connection", cw_msg_type_name(h->type)));
    return;
  }
  cw_status_t st = cw_msg_check_bulk(h, msg);
  if (st) {
    protobuf_c_message_free_unpacked(msg, NULL);
    cw_net_conn_violation(c, h->type, h->request_id, st);
    return;
  }
  cw_net__serve(c, h, msg);
}

// A plaintext listener's first bytes: a TLS handshake gets a log line and a
// close (an answer in plaintext would mean nothing to a TLS client).
static bool cw__refuse_tls_handshake(cw_net_conn_t* c, const uint8_t* data, size_t len) {
  if (cw_tls_classify_first_bytes(data, len) != CW_TLS_FIRST_TLS) return false;
  cw_net_t* net = c->net;
  net->tls_failures++;
  uint64_t more = 0;
  if (cw_net_warn_limit_pass(&net->warn_plain, cw_time_now_ms(), 5000, &more)) {
    CW_LOGW("%s: refused: a TLS handshake on a plaintext port (TLS is off here: CAUSEWAY_TLS, "
            "--tls; %" PRIu64 " more such refusals since the last warning)", c->name, more);
  }
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "a TLS handshake on a plaintext port"));
  return true;
}

static void cw__on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  cw_net_conn_t* c = stream->data;
  if (nread == 0) return;
  if (nread < 0) {
    if (c->tls && c->outbound && !c->hello_done) {
      cw_net__tls_lost(c, (int)nread);  // the peer refused the handshake
      return;
    }
    int64_t tcp_ms = cw_net__tcp_peer_timeout_ms(c->net);
    if (nread == UV_ETIMEDOUT && tcp_ms) {
      // The kernel gave up on the peer (cw_net_listen.c, cw__watch_tcp_peer).
      const char* peer = c->outbound ? c->address : c->name;
      CW_LOGW("%s: acknowledged nothing for %lld ms: its host is down or unreachable; closing "
              "the connection", c->name, (long long)tcp_ms);
      cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "%s acknowledged nothing for %lld ms "
                                          "(--worker-link-timeout-ms): its host is down or "
                                          "unreachable", peer, (long long)tcp_ms));
      return;
    }
    if (nread != UV_EOF) CW_LOGI("%s: read failed: %s", c->name, uv_strerror((int)nread));
    cw_net_conn_close(c, nread == UV_EOF
                             ? cw_make_status(CW_UNAVAILABLE, "connection closed by peer")
                             : cw_make_status(CW_UNAVAILABLE, "read failed: %s",
                                              uv_strerror((int)nread)));
    return;
  }
  cw_net_conn_retain(c);
  // Bytes, not frames, on a watched link: a long bulk is progress.
  if (c->link_limit_ms) c->last_rx_ms = uv_now(c->net->loop);
  if (c->gate.in) cw_net_gate_progress(&c->net->gate, &c->gate);
  if (!c->outbound && !c->first_read) {
    c->first_read = true;
    if (!c->tls && cw__refuse_tls_handshake(c, (const uint8_t*)buf->base, (size_t)nread)) {
      cw_net_conn_release(c);
      return;
    }
  }
  if (c->tls) {
    cw_net__tls_on_read(c, (size_t)nread);
  } else if ((uint8_t*)buf->base != c->readahead) {
    cw_conn_parser_event_t ev;
    cw_conn_parser_bulk_advance(&c->parser, (uint64_t)nread, &ev);
    if (ev.kind == CW_CONN_PARSER_EVENT_BULK_DONE) cw_net__bulk_done(c, &ev.header);
  } else {
    c->ra_off = 0;
    c->ra_len = (size_t)nread;
    cw__conn_process(c);
  }
  // TLS counts the plaintext as it is decrypted.
  if (!c->tls && c->cb.on_bytes) c->cb.on_bytes(c, (uint64_t)nread, 0);
  cw_net_conn_release(c);
}

static void cw__on_idle(uv_idle_t* idle) {
  cw_net_t* net = idle->data;
  cw_net_conn_t* list = net->resume_list;
  net->resume_list = NULL;
  uv_idle_stop(&net->idle);
  while (list) {
    cw_net_conn_t* c = list;
    list = c->resume_next;
    c->resume_next = NULL;
    c->paused = false;
    if (!c->closing) cw__conn_process(c);
    cw_net_conn_release(c);  // the resume list's reference
  }
}

// Parsing goes on from the idle phase (never re-entered from a handler).
static void cw__resume_later(cw_net_conn_t* c) {
  if (c->paused || c->closing) return;
  cw_net_t* net = c->net;
  c->paused = true;
  cw_net_conn_retain(c);
  c->resume_next = net->resume_list;
  net->resume_list = c;
  uv_idle_start(&net->idle, cw__on_idle);
}

// Whether the peer of `c` shut its side (FIN), reset, or errored: seen
// without reading, past whatever bytes still wait in the socket.
static bool cw__peer_hung_up(cw_net_conn_t* c) {
  uv_os_fd_t fd;
  if (uv_fileno(&c->h.handle, &fd) != 0) return false;
  struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
  if (poll(&pfd, 1, 0) != 1) return false;
  return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// A held connection is not read, so its peer's close went unseen: a client
// gone while its requests waited for their seq (at the flow control's cap)
// kept its session, and what the session held, at the worker for good.
// Such a close ends it as an EOF would have.
static void cw__held_watch(uv_timer_t* t) {
  cw_net_t* net = t->data;
  for (;;) {
    bool any = false;
    cw_net_conn_t* gone = NULL;
    for (cw_net_conn_t* c = net->conns; c && !gone; c = c->next) {
      if (!c->read_held || c->closing || c->close_after_write) continue;
      any = true;
      if (cw__peer_hung_up(c)) gone = c;
    }
    if (!any) uv_timer_stop(t);
    if (!gone) return;
    // Its close may close others: look again from the start.
    cw_net_conn_close(gone, cw_make_status(CW_UNAVAILABLE, "connection closed by peer (while "
                                           "its requests were not read)"));
  }
}

void cw_net_conn_hold_reading(cw_net_conn_t* c, bool hold) {
  if (c->read_held == hold) return;
  c->read_held = hold;
  if (hold) {
    if (c->reading) {
      uv_read_stop(&c->h.stream);
      c->reading = false;
    }
    cw_net_t* net = c->net;
    if (net->handles_open && !uv_is_active((uv_handle_t*)&net->held_watch)) {
      uv_timer_start(&net->held_watch, cw__held_watch, CW__HELD_WATCH_MS, CW__HELD_WATCH_MS);
    }
  } else {
    cw__resume_later(c);
  }
}

// Parses buffered bytes, at most frames-per-wakeup frames, then yields.
static void cw__conn_process(cw_net_conn_t* c) {
  if (c->tls) {
    cw_net__tls_pump_in(c);
    return;
  }
  if (cw_net__parse_buffered(c)) cw_net__read_on(c);
}

void cw_net__read_on(cw_net_conn_t* c) {
  if (!c->closing && !c->close_after_write && !c->reading && !c->read_held && !c->paused) {
    cw_net__conn_start_reading(c);
  }
}

bool cw_net__parse_buffered(cw_net_conn_t* c) {
  cw_net_t* net = c->net;
  int64_t frames = 0;
  while (c->ra_off < c->ra_len && !c->closing && !c->close_after_write) {
    if (c->read_held) return false;  // the rest waits in readahead
    if (frames >= net->options.frames_per_wakeup) {
      if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
      }
      cw__resume_later(c);
      return false;
    }
    size_t used = 0;
    cw_conn_parser_event_t ev;
    cw_conn_parser_feed(&c->parser, c->readahead + c->ra_off, c->ra_len - c->ra_off, &used, &ev);
    c->ra_off += used;
    switch (ev.kind) {
      case CW_CONN_PARSER_EVENT_NONE:
        break;
      case CW_CONN_PARSER_EVENT_FRAME:
        frames++;
        cw__on_frame(c, &ev.header, ev.msg);
        break;
      case CW_CONN_PARSER_EVENT_BULK_DONE:
        cw_net__bulk_done(c, &ev.header);
        break;
      case CW_CONN_PARSER_EVENT_ERROR:
        if (c->outbound) {
          cw_net_conn_close(c, cw_status_annotate(ev.status, "protocol violation from peer"));
        } else {
          cw_net_conn_violation(c, ev.header.type, ev.header.request_id, ev.status);
        }
        return false;
    }
  }
  c->ra_off = c->ra_len = 0;
  return true;
}

void cw_net__conn_start_reading(cw_net_conn_t* c) {
  int rc = uv_read_start(&c->h.stream, cw__alloc, cw__on_read);
  if (rc < 0) {
    cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "cannot read: %s", uv_strerror(rc)));
    return;
  }
  c->reading = true;
}

// --- The net's lifecycle --------------------------------------------------------

void cw_net_options_from_settings(const cw_settings_t* settings, const char* name,
                                  cw_net_options_t* out) {
  memset(out, 0, sizeof(*out));
  out->prehello_limits.max_payload =
      (uint32_t)cw_settings_int(settings, CW_SET_PREHELLO_MAX_PAYLOAD);
  out->prehello_limits.max_bulk = 0;  // no bulk before HELLO
  out->limits.max_payload = (uint32_t)cw_settings_int(settings, CW_SET_MAX_PAYLOAD);
  out->limits.max_bulk = (uint64_t)cw_settings_int(settings, CW_SET_MAX_BULK);
  out->frames_per_wakeup = cw_settings_int(settings, CW_SET_FRAMES_PER_WAKEUP);
  out->max_connections = cw_settings_int(settings, CW_SET_MAX_CONNECTIONS);
  out->max_unauth_connections = cw_settings_int(settings, CW_SET_MAX_UNAUTH_CONNECTIONS);
  out->max_unauth_per_peer = cw_settings_int(settings, CW_SET_MAX_UNAUTH_PER_PEER);
  out->hello_timeout_ms = cw_settings_int(settings, CW_SET_HELLO_TIMEOUT_MS);
  out->link_timeout_ms = cw_settings_int(settings, CW_SET_WORKER_LINK_TIMEOUT_MS);
  out->token = cw_settings_string(settings, CW_SET_TOKEN);
  out->name = name;
  cw_tls_config_from_settings(settings, &out->tls);
}

void cw_net_initialize(cw_net_t* net, uv_loop_t* loop, const cw_net_options_t* options) {
  memset(net, 0, sizeof(*net));
  net->loop = loop;
  net->options = *options;
  if (net->options.frames_per_wakeup < 1) net->options.frames_per_wakeup = 1;
  if (!net->options.token) net->options.token = "";
  if (!net->options.name) net->options.name = "";
  uv_idle_init(loop, &net->idle);
  net->idle.data = net;
  uv_prepare_init(loop, &net->flush);
  net->flush.data = net;
  uv_timer_init(loop, &net->held_watch);
  net->held_watch.data = net;
  net->handles_open = true;
}

void cw_net_stop(cw_net_t* net) {
  net->stopped = true;
  if (net->listening) {
    uv_close(&net->listener.handle, NULL);
    cw_net_pacer_close(&net->pacer, NULL);
    net->listening = false;
    if (net->unix_path) cw_net_unix_unlink_own(net->unix_path, &net->unix_id);
  }
  free(net->unix_path);
  net->unix_path = NULL;
  while (net->conns) cw_net_conn_close(net->conns, NULL);
}

void cw_net_deinitialize(cw_net_t* net) {
  if (!net->handles_open) return;
  cw_net_stop(net);
  cw__on_flush(&net->flush);  // drops the flush list's references
  net->handles_open = false;
  uv_close((uv_handle_t*)&net->flush, NULL);
  // Connections waiting to resume are closed: their references go.
  cw__on_idle(&net->idle);
  uv_close((uv_handle_t*)&net->idle, NULL);
  uv_close((uv_handle_t*)&net->held_watch, NULL);
  if (net->gate_on) cw_net_gate_deinitialize(&net->gate);
  net->gate_on = false;
  cw_tls_release(net->tls);
  net->tls = NULL;
  while (net->tls_pool_n > 0) free(net->tls_pool[--net->tls_pool_n]);
}
