// The reader thread of the client library: reads every frame from the
// peer, completes requests by id (reply bulk straight into the caller's
// sink), hands EVENT frames to on_event, and fails everything outstanding
// once the connection ends. A thread waiting for a reply may take replies
// that have arrived itself (cw_client_take_replies): on an idle machine the
// reader's wakeup costs more than the round trip.
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "cw_client_internal.h"
#include "cw_client_socket.h"
#include "cw_client_tls.h"
#include "cw_messages.h"
#include "cw_time.h"

#define CW__DISCARD_CHUNK (64 * 1024)
// A parked reader leaves the socket to waiters this long at a time, while one
// tried within it (cw__await_frame).
#define CW__READER_PARK_NS (1000 * 1000)

// Most finished records kept before they are settled regardless.
#define CW__MAX_FINISHED 64

// Recycles the finished records and counts them off (c->mu and read_mu held).
static void cw__settle_locked(cw_client_t* c) {
  if (!c->num_finished) return;
  while (c->finished) {
    cw_client_pending_t* p = c->finished;
    c->finished = p->next;
    cw_client_table_recycle(&c->table, p);
  }
  c->outstanding -= c->num_finished;
  c->num_finished = 0;
  cw_client_wake(c);
}

// With read_mu held.
static void cw__settle(cw_client_t* c) {
  if (!c->num_finished) return;
  pthread_mutex_lock(&c->mu);
  cw__settle_locked(c);
  pthread_mutex_unlock(&c->mu);
}

static bool cw__reply_buffered(cw_client_t* c);

// Completes `p` (already detached from the reader's view of the stream) with
// `status`, `reply` and `bulk_len`, all taken. Called without c->mu, with
// read_mu. A callback request left the table when its reply was matched
// (`removed`).
static void cw__complete(cw_client_t* c, cw_client_pending_t* p, cw_status_t status,
                         ProtobufCMessage* reply, uint64_t bulk_len, void* alloc, bool removed) {
  if (status) {
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    reply = NULL;
    free(alloc);
    alloc = NULL;
  }
  // p->done, p->user and p->id never change after registration.
  if (p->done) {
    if (!removed) {
      pthread_mutex_lock(&c->mu);
      cw_client_table_remove(&c->table, p->id);
      pthread_mutex_unlock(&c->mu);
    }
    p->done(p->user, status, reply);  // takes status
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    free(alloc);
    // Counted off once the replies read in one go are done (the next one's
    // match settles it under the same lock), so that a flush waiting for
    // outstanding replies sees them all.
    p->next = c->finished;
    c->finished = p;
    if (++c->num_finished >= CW__MAX_FINISHED || !cw__reply_buffered(c)) cw__settle(c);
    return;
  }
  pthread_mutex_lock(&c->mu);
  if ((p->flags & CW_CLIENT_PEND_DETACHED) && !status && !(p->flags & CW_CLIENT_PEND_SENDING)) {
    // Nobody can wait for a detached request; drop its success now.
    cw_client_table_remove(&c->table, p->id);
    cw_client_pending_free(p);
    if (reply) protobuf_c_message_free_unpacked(reply, NULL);
    free(alloc);
  } else {
    p->status = status;
    p->reply = reply;
    p->bulk_len = status ? 0 : bulk_len;
    p->alloc_data = alloc;
    p->flags |= CW_CLIENT_PEND_DONE;
  }
  c->outstanding--;
  cw_client_wake(c);
  pthread_mutex_unlock(&c->mu);
}

// Marks the connection dead with `reason` (taken) and fails every request not
// still being written (their senders report those themselves).
static void cw__fail_all(cw_client_t* c, cw_status_t reason) {
  atomic_store_explicit(&c->broken, true, memory_order_release);
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
  cw_client_pending_t* victims = NULL;
  for (size_t i = 0; i < c->table.num_buckets; ++i) {
    cw_client_pending_t** slot = &c->table.buckets[i];
    while (*slot) {
      cw_client_pending_t* p = *slot;
      // SENDING and unanswered: its sender reports the loss itself.
      bool senders = (p->flags & CW_CLIENT_PEND_SENDING) && !(p->flags & CW_CLIENT_PEND_MATCHED);
      if (!(p->flags & CW_CLIENT_PEND_DONE) && !senders) {
        if (p->done) {
          // Off the table: the callback path owns it now.
          *slot = p->next;
          c->table.count--;
          p->next = victims;
          victims = p;
          continue;
        }
        p->status = cw_make_status(CW_UNAVAILABLE, "%s", c->dead ? c->dead : "connection lost");
        p->flags |= CW_CLIENT_PEND_DONE;
        c->outstanding--;
      }
      slot = &p->next;
    }
  }
  pthread_cond_broadcast(&c->cv);
  char* msg = c->dead ? strdup(c->dead) : NULL;
  pthread_mutex_unlock(&c->mu);

  while (victims) {
    cw_client_pending_t* p = victims;
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
                            cw_client_io_error_text(c, errno, 1));
    }
    len -= n;
  }
  return cw_ok_status();
}

// A request from the peer (options.on_request): its bulk, checked against
// the payload, into memory of its own; both go to the callback.
static cw_status_t cw__peer_request(cw_client_t* c, const cw_frame_header_t* h,
                                    ProtobufCMessage* msg) {
  cw_status_t s = cw_msg_check_bulk(h, msg);
  if (s) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return cw_status_annotate(s, "protocol violation from peer");
  }
  uint8_t* bulk = NULL;
  if (h->bulk_len) {
    bulk = h->bulk_len <= SIZE_MAX ? malloc((size_t)h->bulk_len) : NULL;
    size_t got = 0;
    if (!bulk) {
      s = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %llu bytes for a %s request",
                         (unsigned long long)h->bulk_len, cw_msg_type_name(h->type));
    } else if (cw_rbuf_read(&c->rb, bulk, (size_t)h->bulk_len, &got) != 0) {
      s = cw_make_status(CW_UNAVAILABLE, "reading request bulk: %s",
                         cw_client_io_error_text(c, errno, 1));
    }
    if (s) {
      free(bulk);
      protobuf_c_message_free_unpacked(msg, NULL);
      return s;
    }
  }
  c->on_request(c->request_user, c, h->type, h->request_id, msg, bulk, h->bulk_len);
  return cw_ok_status();
}

// Handles one frame. Returns an error only for conditions that end the
// connection (I/O errors, protocol violations).
static cw_status_t cw__read_one(cw_client_t* c) {
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  size_t got = 0;
  if (cw_rbuf_read(&c->rb, hdr, sizeof(hdr), &got) != 0) {
    return cw_make_status(CW_UNAVAILABLE, "%s", cw_client_io_error_text(c, errno, got));
  }
  int64_t now_ns = cw_time_now_ns();
  atomic_store_explicit(&c->last_rx_ms, now_ns / 1000000, memory_order_relaxed);
  cw_frame_header_t h;
  CW_RETURN_IF_ERROR(cw_frame_header_decode(hdr, sizeof(hdr), &c->limits, &h),
                     "protocol violation from peer");
  bool peer_request = !(h.flags & CW_FRAME_REPLY) && h.type == CW_MSG_HOST_CALLBACK &&
                      c->on_request;
  if (!(h.flags & CW_FRAME_REPLY) && h.type != CW_MSG_EVENT && !peer_request) {
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
    return cw_make_status(CW_UNAVAILABLE, "reading payload: %s",
                          cw_client_io_error_text(c, errno, 1));
  }
  ProtobufCMessage* msg = NULL;
  CW_RETURN_IF_ERROR(cw_frame_decode_payload(&h, c->payload_buf, &msg),
                     "protocol violation from peer: %s reply", cw_msg_type_name(h.type));

  if (peer_request) return cw__peer_request(c, &h, msg);
  if (!(h.flags & CW_FRAME_REPLY)) {
    // An unsolicited EVENT (no bulk: the header check refuses it). A
    // KEEPALIVE has done its work already (last_rx_ms).
    const Causeway__V1__ClusterEvent* ev = (const Causeway__V1__ClusterEvent*)msg;
    if (c->on_event && ev->kind != CAUSEWAY__V1__CLUSTER_EVENT__KIND__KEEPALIVE) {
      c->on_event(c->event_user, msg);
    }
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
  cw__settle_locked(c);
  cw_client_pending_t* p = cw_client_table_find(&c->table, h.request_id);
  bool ok = p && !(p->flags & (CW_CLIENT_PEND_DONE | CW_CLIENT_PEND_MATCHED)) && p->type == h.type;
  // A callback request without bulk to read leaves the table now: nothing
  // can fail it between here and its callback.
  bool removed = ok && p->done && !h.bulk_len;
  if (removed) cw_client_table_remove(&c->table, h.request_id);
  // MATCHED keeps `p` alive for us: its sender no longer removes it, and
  // only this thread completes entries. Its other fields stay under c->mu;
  // copy what we need.
  unsigned pflags = 0;
  cw_client_sink_t sink = {0};
  if (ok) {
    p->flags |= CW_CLIENT_PEND_MATCHED;
    pflags = p->flags;
    sink = p->sink;
    if (pflags & CW_CLIENT_PEND_BATCHED) {
      c->batched--;
      c->batched_reply_ns = now_ns;
    }
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
    if (pflags & CW_CLIENT_PEND_ALLOC_SINK) {
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
                                cw_client_io_error_text(c, errno, 1));
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
  if (!status && !(h.flags & CW_FRAME_ERROR) && sink.exact && h.bulk_len != sink.capacity &&
      !(h.bulk_len == 0 && sink.none_ok)) {
    status = cw_make_status(CW_DATA_LOSS, "%s reply carries %llu bulk bytes; %zu were asked for",
                            cw_msg_type_name(h.type), (unsigned long long)h.bulk_len,
                            sink.capacity);
  }
  // Frames held behind this one go out now (cw_client_send_batched), before
  // its callback runs. One held after this check waits for the reply to
  // another request it counted, still unanswered, or the flusher.
  if (pflags & CW_CLIENT_PEND_BATCHED) cw_client_write_held_batched(c);
  cw__complete(c, p, status, msg, h.bulk_len, alloc, removed);
  return cw_ok_status();
}

// A whole REPLY frame (header, payload, bulk) is buffered: taking it reads
// nothing more from the socket.
static bool cw__reply_buffered(cw_client_t* c) {
  size_t have = cw_rbuf_buffered(&c->rb);
  cw_frame_header_t h;
  if (have < CW_FRAME_HEADER_SIZE) return false;
  cw_status_t s = cw_frame_header_decode(cw_rbuf_peek(&c->rb), CW_FRAME_HEADER_SIZE, &c->limits,
                                         &h);
  if (s) {
    cw_status_free(s);  // a bad header is the reader's to report
    return false;
  }
  return (h.flags & CW_FRAME_REPLY) &&
         (uint64_t)have - CW_FRAME_HEADER_SIZE >= (uint64_t)h.payload_len + h.bulk_len;
}

bool cw_client_take_replies_locked(cw_client_t* c) {
  bool took = false;
  if (c->read_err || c->read_closed) return false;
  if (cw__reply_buffered(c) || cw_rbuf_fill_nowait(&c->rb) > 0) {
    atomic_store_explicit(&c->taker, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&c->taking, true, memory_order_release);
    // Replies only: a peer's request or EVENT may block or call back into
    // the caller, who is inside a wait of its own; the reader takes those.
    while (cw__reply_buffered(c)) {
      cw_status_t s = cw__read_one(c);
      if (s) {
        c->read_err = s;
        cw_client_break(c);  // wakes the reader, which ends the connection
        break;
      }
      took = true;
    }
    cw__settle(c);  // after a failed read too
    atomic_store_explicit(&c->taking, false, memory_order_release);
    // What is left (a frame for the reader, or part of one) came off the
    // socket: the reader, waiting on the socket, must hear of it.
    if (cw_rbuf_buffered(&c->rb)) {
      while (eventfd_write(c->kick_fd, 1) < 0 && errno == EINTR) {
      }
    }
  }
  return took;
}

bool cw_client_take_replies(cw_client_t* c) {
  if (!c || !atomic_load_explicit(&c->shared_reads, memory_order_acquire)) return false;
  if (cw_client_forked(c)) return false;  // the parent's replies
  // Only a reader that may park reads it: no clock per poll otherwise.
  if (atomic_load_explicit(&c->park_reader, memory_order_relaxed)) {
    atomic_store_explicit(&c->last_take_ns, cw_time_now_ns(), memory_order_relaxed);
  }
  if (pthread_mutex_trylock(&c->read_mu)) return false;  // someone reads already
  bool took = cw_client_take_replies_locked(c);
  pthread_mutex_unlock(&c->read_mu);
  return took;
}

// With read_mu held, returns with it held: once the next frame has begun to
// arrive (or a waiter's read failed). Waits without the lock, so that a
// waiter may take the replies that come meanwhile.
//
// While waiters take replies themselves (one tried within the last
// CW__READER_PARK_NS) and the client found that faster (cw_client_waited),
// the reader parks: it waits on kick_fd alone, a millisecond at a time, so
// that the replies of a synchronous loop stop waking it. A waiter that stops
// polling without its reply kicks it (cw_client_kick_reader), as do frames a
// waiter may not take.
static void cw__await_frame(cw_client_t* c) {
  while (!c->read_err && cw_rbuf_buffered(&c->rb) == 0) {
    if (cw_rbuf_fill_nowait(&c->rb) != 0) return;  // bytes, or EOF/error for read_one
    int64_t took = atomic_load_explicit(&c->last_take_ns, memory_order_relaxed);
    bool park = took && atomic_load_explicit(&c->park_reader, memory_order_relaxed) &&
                cw_time_now_ns() - took < CW__READER_PARK_NS;
    if (park) c->reader_parks++;
    pthread_mutex_unlock(&c->read_mu);
    struct pollfd p[2] = {{.fd = c->kick_fd, .events = POLLIN}, {.fd = c->fd, .events = POLLIN}};
    int rc;
    while ((rc = poll(p, park ? 1 : 2, park ? CW__READER_PARK_NS / 1000000 : -1)) < 0 &&
           errno == EINTR) {
    }
    pthread_mutex_lock(&c->read_mu);
    if (rc < 0) {
      if (!c->read_err) {
        c->read_err = cw_make_status(CW_UNAVAILABLE, "waiting for the socket: %s",
                                     strerror(errno));
      }
      return;
    }
    eventfd_t drop;
    if (p[0].revents) (void)eventfd_read(c->kick_fd, &drop);
  }
}

// Wakes the reader; `always`: even if no waiter took replies since the last
// kick (the reader parks only after one did, and the last kick woke it).
static void cw__kick(cw_client_t* c, bool always) {
  if (!c || !atomic_load_explicit(&c->shared_reads, memory_order_acquire)) return;
  if (!atomic_exchange_explicit(&c->last_take_ns, 0, memory_order_relaxed) && !always) return;
  while (eventfd_write(c->kick_fd, 1) < 0 && errno == EINTR) {
  }
}

void cw_client_kick_reader(cw_client_t* c) { cw__kick(c, false); }

void cw_client_break(cw_client_t* c) {
  if (cw_client_forked(c)) return;  // the socket is the parent's too
  atomic_store_explicit(&c->broken, true, memory_order_release);
  shutdown(c->fd, SHUT_RDWR);
  cw__kick(c, true);  // a parked reader is not watching the socket
}

void* cw_client_reader_main(void* arg) {
  cw_client_t* c = arg;
  if (cw_rbuf_initialize(&c->rb, c->fd, CW_RBUF_DEFAULT_CAPACITY) != 0) {
    cw__fail_all(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the read buffer"));
    shutdown(c->fd, SHUT_RDWR);
    return NULL;
  }
  if (c->liveness_ms) c->rb.progress_ms = &c->last_rx_ms;  // bulk counts as life
  if (c->tls) {
    cw_rbuf_set_reader(&c->rb, cw_client_tls_read, c->tls);  // plaintext out of TLS
  } else {
    c->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    // Without one, the reader alone reads (cw_client_take_replies: nothing).
    if (c->kick_fd >= 0) atomic_store_explicit(&c->shared_reads, true, memory_order_release);
  }
  for (;;) {
    pthread_mutex_lock(&c->read_mu);
    if (c->kick_fd >= 0) cw__await_frame(c);
    cw_status_t s = c->read_err;
    c->read_err = NULL;
    if (!s) s = cw__read_one(c);
    // Waiters stop reading before fail_all completes what is outstanding:
    // the stream may stop mid-frame, and a reply they took would be
    // completed twice.
    if (s) {
      c->read_closed = true;
      cw__settle(c);
    }
    pthread_mutex_unlock(&c->read_mu);
    if (s) {
      cw__fail_all(c, s);
      // Unblock a sender stuck on a peer that stopped reading.
      shutdown(c->fd, SHUT_RDWR);
      return NULL;
    }
  }
}
