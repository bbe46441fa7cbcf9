// Sending, waiting and flushing (cw_client.h): frames go out whole, one
// writer at a time (the writer's turn, cw__write_turn), each request
// registered in the pending table just before its frame is written or
// queued; see cw_client_internal.h for the completion rules.
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cw_client_internal.h"
#include "cw_client_socket.h"
#include "cw_client_tls.h"
#include "cw_messages.h"
#include "cw_time.h"

#define CW__STACK_IOVS 8
// Deferred frames beyond this many bytes are written at once.
#define CW__DEFER_MAX (64 * 1024)

// ---- Frames ----------------------------------------------------------------

// Encodes a request frame's header into out[CW_FRAME_HEADER_SIZE].
static void cw__encode_header(uint16_t type, uint32_t flags, uint64_t request_id,
                              size_t payload_len, uint64_t bulk_len, uint8_t* out) {
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC,
                         .version = CW_PROTOCOL_VERSION,
                         .type = type,
                         .flags = flags,
                         .payload_len = (uint32_t)payload_len,
                         .request_id = request_id,
                         .bulk_len = bulk_len};
  cw_frame_header_encode(&h, out);
}

static void cw__encode_request_header(uint16_t type, uint64_t request_id, size_t payload_len,
                                      uint64_t bulk_len, uint8_t* out) {
  cw__encode_header(type, 0, request_id, payload_len, bulk_len, out);
}

// Packs and writes one frame; `bulk` is borrowed and not copied.
cw_status_t cw_client_frame_write(cw_client_t* c, uint16_t type, uint64_t request_id,
                                  const uint8_t* payload, size_t payload_len,
                                  const struct iovec* bulk, int bulk_count, uint64_t bulk_len) {
  return cw_client_frame_write_flags(c, type, 0, request_id, payload, payload_len, bulk,
                                     bulk_count, bulk_len);
}

// Writes wbuf's frames, then iov[1..n) (iov[0] is set here), as the
// connection's one writer: write_mu held on entry and return, released
// around each system call. Waits for the turn if another thread has it.
// Before giving it up, writes what was queued meanwhile to go now
// (wbuf_now); frames only held stay held, as they would have without this
// turn, for the next batch. After a failure wbuf holds nothing (the
// connection is being shut down).
static cw_status_t cw__write_turn(cw_client_t* c, struct iovec* iov, size_t n) {
  if (cw_client_forked(c)) return cw_client_forked_status(c);  // the parent's stream
  while (c->writing) pthread_cond_wait(&c->write_cv, &c->write_mu);
  c->writing = true;
  cw_status_t s = cw_ok_status();
  bool own = n > 1;  // the caller's frame goes out in the first pass
  for (int pass = 0; !s && (n > 1 || (c->wbuf_now && c->wbuf_len)); ++pass) {
    if (pass == 1) own = false;
    uint8_t* buf = c->wbuf;
    size_t len = c->wbuf_len, cap = c->wbuf_cap;
    c->wbuf = c->wspare;
    c->wbuf_cap = c->wspare_cap;
    c->wbuf_len = 0;
    c->wbuf_now = false;
    c->wspare = NULL;
    c->wspare_cap = 0;
    atomic_store_explicit(&c->wbuf_batched, false, memory_order_relaxed);
    pthread_mutex_unlock(&c->write_mu);
    iov[0] = (struct iovec){.iov_base = buf, .iov_len = len};
    s = c->tls ? cw_client_tls_write_iov(c->tls, c->address, iov, n)
               : cw_client_socket_write_iov(c->fd, c->address, iov, n);
    pthread_mutex_lock(&c->write_mu);
    c->wspare = buf;
    c->wspare_cap = cap;
    n = 1;
  }
  if (s) {
    // Frames others queued are lost with the stream: close it, so the reader
    // fails their requests. A caller whose frame went out in an earlier pass
    // hears of it the same way.
    cw_client_break(c);
    c->wbuf_len = 0;
    c->wbuf_now = false;
    atomic_store_explicit(&c->wbuf_batched, false, memory_order_relaxed);
    if (!own) {
      cw_status_free(s);
      s = cw_ok_status();
    }
  }
  c->writing = false;
  // Frames held during the turn: the flusher, idle while a writer wrote,
  // times them from now.
  if (atomic_load_explicit(&c->wbuf_batched, memory_order_relaxed) && c->flusher_idle) {
    pthread_cond_signal(&c->flush_cv);
  }
  pthread_cond_broadcast(&c->write_cv);
  return s;
}

cw_status_t cw_client_frame_write_flags(cw_client_t* c, uint16_t type, uint32_t flags,
                                        uint64_t request_id, const uint8_t* payload,
                                        size_t payload_len, const struct iovec* bulk,
                                        int bulk_count, uint64_t bulk_len) {
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  cw__encode_header(type, flags, request_id, payload_len, bulk_len, hdr);
  struct iovec stack_iov[CW__STACK_IOVS];
  size_t n = 3 + (size_t)bulk_count;
  struct iovec* iov = stack_iov;
  if (n > CW__STACK_IOVS) {
    iov = malloc(n * sizeof(*iov));
    if (!iov) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  // Deferred frames first (iov[0]): one system call for all.
  iov[1] = (struct iovec){.iov_base = hdr, .iov_len = sizeof(hdr)};
  iov[2] = (struct iovec){.iov_base = (void*)payload, .iov_len = payload_len};
  for (int i = 0; i < bulk_count; ++i) iov[3 + i] = bulk[i];
  cw_status_t s = cw__write_turn(c, iov, n);
  if (iov != stack_iov) free(iov);
  return s;
}

cw_status_t cw_client_write_held_locked(cw_client_t* c) {
  if (!c->wbuf_len) return cw_ok_status();
  c->wbuf_now = true;
  if (c->writing) return cw_ok_status();  // the writer takes wbuf before its turn ends
  struct iovec iov;
  cw_status_t s = cw__write_turn(c, &iov, 1);
  if (s) cw_client_break(c);  // a partial frame: the reader fails the rest
  return s;
}

void cw_client_write_held_batched(cw_client_t* c) {
  if (!atomic_load_explicit(&c->wbuf_batched, memory_order_relaxed)) return;  // the common case
  if (cw_client_forked(c)) return;
  pthread_mutex_lock(&c->write_mu);
  // A failed write fails what it held, through the reader.
  if (atomic_load_explicit(&c->wbuf_batched, memory_order_relaxed)) {
    cw_status_free(cw_client_write_held_locked(c));
  }
  pthread_mutex_unlock(&c->write_mu);
}

// A batched frame was just held, at about `now_ns` (write_mu held): the
// flusher writes it if nothing else has within the batch window (a paused
// session's worker, a long program: replies that stopped). Without a
// flusher it goes now.
static void cw__held_batched(cw_client_t* c, int64_t now_ns) {
  if (atomic_load_explicit(&c->wbuf_batched, memory_order_relaxed)) return;
  c->held_since_ns = now_ns;
  atomic_store_explicit(&c->wbuf_batched, true, memory_order_relaxed);
  if (!c->flusher_started) {
    c->flusher_started = pthread_create(&c->flusher, NULL, cw_client_flusher_main, c) == 0;
    if (c->flusher_started) pthread_setname_np(c->flusher, "cw-flusher");
    if (!c->flusher_started) cw_status_free(cw_client_write_held_locked(c));
  } else if (c->flusher_idle) {
    pthread_cond_signal(&c->flush_cv);
  }
}

void* cw_client_flusher_main(void* arg) {
  cw_client_t* c = arg;
  pthread_mutex_lock(&c->write_mu);
  while (!c->flusher_stop) {
    // Nothing held, or a writer who takes wbuf before its turn ends (and so
    // clears wbuf_batched; the next hold signals flush_cv).
    if (!atomic_load_explicit(&c->wbuf_batched, memory_order_relaxed) || c->writing) {
      c->flusher_idle = true;
      pthread_cond_wait(&c->flush_cv, &c->write_mu);
      c->flusher_idle = false;
      continue;
    }
    int64_t due = c->held_since_ns + c->batch_window_ns;
    if (cw_time_now_ns() >= due) {
      cw_status_free(cw_client_write_held_locked(c));
      continue;
    }
    struct timespec ts = cw_time_timespec(due);
    pthread_cond_timedwait(&c->flush_cv, &c->write_mu, &ts);
  }
  pthread_mutex_unlock(&c->write_mu);
  return NULL;
}

cw_status_t cw_client_write_held(cw_client_t* client) {
  if (!client) return cw_make_status(CW_INVALID_ARGUMENT, "client is required");
  if (cw_client_forked(client)) return cw_client_forked_status(client);
  pthread_mutex_lock(&client->write_mu);
  cw_status_t s = cw_client_write_held_locked(client);
  pthread_mutex_unlock(&client->write_mu);
  return s;
}

// Room in wbuf for `need` more bytes (write_mu held): false past
// CW__DEFER_MAX or out of memory.
static bool cw__wbuf_reserve(cw_client_t* c, size_t need) {
  if (c->wbuf_len + need > CW__DEFER_MAX) return false;
  if (c->wbuf_len + need <= c->wbuf_cap) return true;
  size_t cap = c->wbuf_cap ? c->wbuf_cap : 1024;
  while (cap < c->wbuf_len + need) cap *= 2;
  uint8_t* grown = realloc(c->wbuf, cap);
  if (!grown) return false;
  c->wbuf = grown;
  c->wbuf_cap = cap;
  return true;
}

// Appends a frame to wbuf, which has room for it (write_mu held).
static void cw__append_frame(cw_client_t* c, uint16_t type, uint64_t request_id,
                             const uint8_t* payload, size_t payload_len) {
  cw__encode_request_header(type, request_id, payload_len, 0, c->wbuf + c->wbuf_len);
  memcpy(c->wbuf + c->wbuf_len + CW_FRAME_HEADER_SIZE, payload, payload_len);
  c->wbuf_len += CW_FRAME_HEADER_SIZE + payload_len;
}

// Batched requests are unanswered, and the reader took no reply within the
// window: are replies waiting unread? Then they flow, and it is the reader
// that has not run (many processes on few cores): the frame waits for it as
// it would for a reply taken just now. Without this look, a sender back from
// the scheduler wrote each launch alone, every write waking its peer
// (sessions_bench, 16 sessions: 0.63 writes a launch). c->mu held.
static bool cw__replies_arrived(cw_client_t* c, int64_t now_ns) {
  uint8_t b;
  if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1) return false;
  c->batched_reply_ns = now_ns;  // one look per window
  return true;
}

// cw_client_send_deferred: appends the frame to c->wbuf (write_mu held);
// written at once when the buffer is full or cannot grow.
static cw_status_t cw__defer_frame(cw_client_t* c, uint16_t type, uint64_t request_id,
                                   const uint8_t* payload, size_t payload_len) {
  if (!cw__wbuf_reserve(c, CW_FRAME_HEADER_SIZE + payload_len)) {
    return cw_client_frame_write(c, type, request_id, payload, payload_len, NULL, 0, 0);
  }
  cw__append_frame(c, type, request_id, payload, payload_len);
  return cw_ok_status();
}

cw_status_t cw_client_message_pack(const ProtobufCMessage* msg, uint8_t* stack, size_t stack_cap,
                                   uint8_t** out_buf, size_t* out_len) {
  // A launch fits the stack: packed without sizing it first.
  if (cw_msg_packed_bound(msg) <= stack_cap) {
    *out_len = protobuf_c_message_pack(msg, stack);
    *out_buf = stack;
    return cw_ok_status();
  }
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

// On the reader, or on a waiter taking frames in its place (callbacks of
// both must not wait on this client: nobody else would read the reply).
static bool cw__on_reader_thread(cw_client_t* c) {
  if (c->reader_started && pthread_equal(pthread_self(), c->reader)) return true;
  return atomic_load_explicit(&c->taking, memory_order_acquire) &&
         pthread_equal(pthread_self(), atomic_load_explicit(&c->taker, memory_order_relaxed));
}

static cw_status_t cw__dead_status(const cw_client_t* c) {
  return cw_make_status(CW_UNAVAILABLE, "%s", c->dead);
}

// The core of cw_client_send, with internal pending flags.
cw_status_t cw_client_send_flags(cw_client_t* c, uint16_t type, const ProtobufCMessage* request,
                                 const struct iovec* bulk, int bulk_count,
                                 const cw_client_sink_t* sink, unsigned flags,
                                 cw_client_done_fn done, void* user, uint64_t* out_request_id) {
  if (out_request_id) *out_request_id = 0;
  if (!c || !request) return cw_make_status(CW_INVALID_ARGUMENT, "client and request are required");
  bool defer = (flags & CW_CLIENT_SEND_DEFER) != 0;
  flags &= ~(unsigned)CW_CLIENT_SEND_DEFER;
  bool batch = (flags & CW_CLIENT_PEND_BATCHED) != 0;
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
  if (cw_client_forked(c)) return cw_client_forked_status(c);
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
  CW_RETURN_IF_ERROR(cw_client_message_pack(request, stack, sizeof(stack), &payload, &payload_len),
                     "%s request", cw_msg_type_name(type));
  cw_status_t s = cw_ok_status();
  if (payload_len > c->limits.max_payload) {
    s = cw_make_status(CW_RESOURCE_EXHAUSTED,
                       "%s payload of %zu bytes exceeds the worker's limit of %u bytes",
                       cw_msg_type_name(type), payload_len, c->limits.max_payload);
    goto out;
  }

  // Read before the locks: the reader contends for c->mu with every reply.
  int64_t now_ns = batch ? cw_time_now_ns() : 0;
  // The writer lock is taken before registering so that ids go out in order:
  // a frame that cannot join wbuf behind another thread's write (bulk, or
  // wbuf full) waits for the turn first.
  pthread_mutex_lock(&c->write_mu);
  while (c->writing && (bulk_len || !cw__wbuf_reserve(c, CW_FRAME_HEADER_SIZE + payload_len))) {
    pthread_cond_wait(&c->write_cv, &c->write_mu);
    if (batch) now_ns = cw_time_now_ns();  // waited: the hold decision needs the time now
  }
  pthread_mutex_lock(&c->mu);
  if (c->dead) {
    s = cw__dead_status(c);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->write_mu);
    goto out;
  }
  // Held while enough earlier ones are unanswered and their replies flow:
  // the reader writes it when it takes one of them (it takes write_mu
  // after, so it cannot miss a frame held meanwhile). Replies that stopped
  // coming (a paused session, a long program) hold nothing: the peer sees
  // the request at once. Behind another thread's write, with one
  // unanswered, it is held too: it goes with that reply's batch, as it
  // would have had this thread waited for the write (sent at once, the
  // writer would write it alone, one more system call per batch).
  bool hold = batch && ((c->batched >= CW_CLIENT_BATCH_DEPTH &&
                         (now_ns - c->batched_reply_ns < c->batch_window_ns ||
                          cw__replies_arrived(c, now_ns))) ||
                        (c->writing && c->batched > 0));
  // Behind another thread's write, a small frame joins wbuf: that writer
  // sends it before its turn ends.
  bool queue = c->writing && !defer && !hold;
  // A frame that only joins wbuf goes there under write_mu, which every
  // writer of wbuf holds: it is never SENDING, and this thread need not take
  // c->mu again (the reader contends for it with every reply).
  bool joined = (defer || hold || queue) && !bulk_len &&
                cw__wbuf_reserve(c, CW_FRAME_HEADER_SIZE + payload_len);
  cw_client_pending_t* p = cw_client_table_new_record(&c->table);
  if (!p) {
    s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->write_mu);
    goto out;
  }
  p->type = type;
  p->flags = flags | (joined ? 0u : (unsigned)CW_CLIENT_PEND_SENDING);
  if (sink) p->sink = *sink;
  p->done = done;
  p->user = user;
  uint64_t id = p->id = c->next_id++;
  cw_client_table_insert(&c->table, p);
  if (batch) c->batched++;
  // Liveness counts silence only while something is owed: from now, if
  // nothing was.
  if (c->outstanding++ == 0) {
    atomic_store_explicit(&c->last_rx_ms, cw_time_now_ms(), memory_order_relaxed);
  }
  pthread_mutex_unlock(&c->mu);
  // From here on the reader may complete (and free) `p`; use `id` only.
  if (joined) cw__append_frame(c, type, id, payload, payload_len);

  cw_status_t ws = cw_ok_status();
  if (!joined) {
    ws = (defer || hold || queue) && !bulk_len
             ? cw__defer_frame(c, type, id, payload, payload_len)
             : cw_client_frame_write(c, type, id, payload, payload_len, bulk, bulk_count,
                                     bulk_len);
  }
  if (queue && !ws) c->wbuf_now = true;
  if (hold && !ws && c->wbuf_len) cw__held_batched(c, now_ns);
  if (ws) {
    // A partial frame desynchronises the stream: close it so the reader
    // fails everything else outstanding.
    cw_client_break(c);
  }
  pthread_mutex_unlock(&c->write_mu);
  if (joined) {
    if (out_request_id) *out_request_id = id;
    goto out;
  }

  // The reader fails no entry that is still SENDING and unanswered, so here
  // the entry is untouched, or the reader owns it (MATCHED: a reply came),
  // or it is DONE, or it completed through its callback and is gone.
  pthread_mutex_lock(&c->mu);
  cw_client_pending_t* q = cw_client_table_find(&c->table, id);
  if (q && !(q->flags & (CW_CLIENT_PEND_DONE | CW_CLIENT_PEND_MATCHED)) && (ws || c->dead)) {
    // Lost before any reply: report it here, not through the callback.
    cw_client_table_remove(&c->table, id);
    c->outstanding--;
    if (q->flags & CW_CLIENT_PEND_BATCHED) c->batched--;
    cw_client_wake(c);
    if (ws && c->hung) {
      // The watchdog broke the stream under this write: say why, not EPIPE.
      cw_status_free(ws);
      ws = cw_make_status(CW_UNAVAILABLE, "%s", c->hung);
    }
    s = ws ? ws : cw__dead_status(c);
    cw_client_pending_free(q);
  } else {
    cw_status_free(ws);
    if (q && (q->flags & CW_CLIENT_PEND_DONE) && (q->flags & CW_CLIENT_PEND_DETACHED) &&
        !q->status) {
      // A detached success that beat us here: nobody will claim it.
      cw_client_table_remove(&c->table, id);
      cw_client_pending_free(q);
    } else if (q) {
      q->flags &= ~(unsigned)CW_CLIENT_PEND_SENDING;
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
  return cw_client_send_flags(client, type, request, bulk, bulk_count, sink, 0, done, user,
                              out_request_id);
}

cw_status_t cw_client_send_batched(cw_client_t* client, uint16_t type,
                                   const ProtobufCMessage* request, cw_client_done_fn done,
                                   void* user, uint64_t* out_request_id) {
  return cw_client_send_flags(client, type, request, NULL, 0, NULL, CW_CLIENT_PEND_BATCHED, done,
                              user, out_request_id);
}

cw_status_t cw_client_send_deferred(cw_client_t* client, uint16_t type,
                                    const ProtobufCMessage* request, cw_client_done_fn done,
                                    void* user, uint64_t* out_request_id) {
  return cw_client_send_flags(client, type, request, NULL, 0, NULL, CW_CLIENT_SEND_DEFER, done,
                              user, out_request_id);
}

// ---- Waiting ---------------------------------------------------------------

static cw_status_t cw__wait(cw_client_t* c, uint64_t id, ProtobufCMessage** out_reply,
                            uint64_t* out_bulk_len, void** out_alloc) {
  if (out_reply) *out_reply = NULL;
  if (out_bulk_len) *out_bulk_len = 0;
  if (out_alloc) *out_alloc = NULL;
  if (!c) return cw_make_status(CW_INVALID_ARGUMENT, "client is required");
  // A forked child has no reader: nothing it waits for would ever come.
  if (cw_client_forked(c)) return cw_client_forked_status(c);
  if (cw__on_reader_thread(c)) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "cannot wait inside a completion callback (it runs on the reader)");
  }
  cw_client_write_held_batched(c);  // what we wait for may be held
  pthread_mutex_lock(&c->mu);
  cw_client_pending_t* p = cw_client_table_find(&c->table, id);
  cw_status_t s = cw_ok_status();
  if (!p || p->done || (p->flags & (CW_CLIENT_PEND_DETACHED | CW_CLIENT_PEND_SENDING))) {
    s = cw_make_status(CW_INVALID_ARGUMENT,
                       "request %llu is not waitable (unknown, already claimed, or has a callback)",
                       (unsigned long long)id);
  } else if (p->flags & CW_CLIENT_PEND_CLAIMED) {
    s = cw_make_status(CW_FAILED_PRECONDITION, "request %llu is already being waited for",
                       (unsigned long long)id);
  }
  if (s) {
    pthread_mutex_unlock(&c->mu);
    return s;
  }
  p->flags |= CW_CLIENT_PEND_CLAIMED;
  c->one_waiters++;
  while (!(p->flags & CW_CLIENT_PEND_DONE)) pthread_cond_wait(&c->cv, &c->mu);
  c->one_waiters--;
  cw_client_table_remove(&c->table, id);
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
  cw_client_pending_free(p);
  return s;
}

cw_status_t cw_client_wait(cw_client_t* client, uint64_t request_id,
                           ProtobufCMessage** out_reply, uint64_t* out_bulk_len) {
  return cw__wait(client, request_id, out_reply, out_bulk_len, NULL);
}

cw_status_t cw_client_call_flags(cw_client_t* c, uint16_t type, const ProtobufCMessage* request,
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
  CW_RETURN_IF_ERROR(
      cw_client_send_flags(c, type, request, bulk, bulk_count, sink, flags, NULL, NULL, &id),
      "%s", cw_msg_type_name(type));
  return cw__wait(c, id, out_reply, out_bulk_len, out_alloc);
}

cw_status_t cw_client_call(cw_client_t* client, uint16_t type, const ProtobufCMessage* request,
                           const struct iovec* bulk, int bulk_count,
                           const cw_client_sink_t* sink, ProtobufCMessage** out_reply,
                           uint64_t* out_bulk_len) {
  return cw_client_call_flags(client, type, request, bulk, bulk_count, sink, 0, out_reply,
                              out_bulk_len, NULL);
}

cw_status_t cw_client_flush(cw_client_t* client) {
  if (!client) return cw_make_status(CW_INVALID_ARGUMENT, "client is required");
  cw_client_t* c = client;
  if (cw_client_forked(c)) return cw_client_forked_status(c);
  if (cw__on_reader_thread(c)) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "cannot flush inside a completion callback (it runs on the reader)");
  }
  cw_client_write_held_batched(c);
  pthread_mutex_lock(&c->mu);
  while (c->outstanding > 0) pthread_cond_wait(&c->cv, &c->mu);
  // Drain parked completions nobody waits for; keep the lowest-id error.
  cw_client_pending_t* first = NULL;
  for (size_t i = 0; i < c->table.num_buckets; ++i) {
    cw_client_pending_t** slot = &c->table.buckets[i];
    while (*slot) {
      cw_client_pending_t* p = *slot;
      if ((p->flags & CW_CLIENT_PEND_DONE) && !(p->flags & CW_CLIENT_PEND_CLAIMED)) {
        *slot = p->next;
        c->table.count--;
        if (p->status && (!first || p->id < first->id)) {
          cw_client_pending_free(first);
          first = p;
        } else {
          cw_client_pending_free(p);
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
  cw_client_pending_free(first);
  return s;
}

// ---- Replies to the peer's requests ------------------------------------------

static cw_status_t cw__reply(cw_client_t* c, uint16_t type, uint32_t flags, uint64_t request_id,
                             const ProtobufCMessage* msg, const struct iovec* bulk,
                             int bulk_count) {
  uint64_t bulk_len = 0;
  for (int i = 0; i < bulk_count; ++i) bulk_len += bulk[i].iov_len;
  uint8_t stack[256];
  uint8_t* payload = stack;
  size_t payload_len = 0;
  if (msg) CW_RETURN_IF_ERROR(cw_client_message_pack(msg, stack, sizeof(stack), &payload,
                                                     &payload_len), "reply");
  pthread_mutex_lock(&c->mu);
  cw_status_t s = c->dead ? cw__dead_status(c) : cw_ok_status();
  pthread_mutex_unlock(&c->mu);
  if (!s) {
    pthread_mutex_lock(&c->write_mu);
    s = cw_client_frame_write_flags(c, type, CW_FRAME_REPLY | flags, request_id, payload,
                                    payload_len, bulk, bulk_count, bulk_len);
    pthread_mutex_unlock(&c->write_mu);
  }
  if (payload != stack) free(payload);
  return s;
}

cw_status_t cw_client_reply(cw_client_t* c, uint16_t type, uint64_t request_id,
                            const ProtobufCMessage* reply, const struct iovec* bulk,
                            int bulk_count) {
  return cw__reply(c, type, 0, request_id, reply, bulk, bulk_count);
}

cw_status_t cw_client_reply_error(cw_client_t* c, uint16_t type, uint64_t request_id,
                                  cw_status_t status) {
  Causeway__V1__ErrorReply er;
  cw_error_reply_fill(&er, status);
  cw_status_t s = cw__reply(c, type, CW_FRAME_ERROR, request_id, &er.base, NULL, 0);
  cw_status_free(status);
  return s;
}
