// What the files of the client library share (private to src/client; the
// API is cw_client.h): the client's state, the pending-request table, and the
// few functions one file calls in another.
//
// Files: cw_client.c (connect, HELLO, release), cw_client_send.c (frames,
// send, wait, call, flush), cw_client_pending.c (the table),
// cw_client_reader.c (the reader thread: replies, completions, failing all),
// cw_client_liveness.c (the watchdog), cw_client_requests.c (typed helpers),
// cw_client_socket.c (socket I/O).
//
// Threading model: any thread sends (one writer at a time, without a lock
// across the system call: frames sent meanwhile queue in wbuf for that
// writer; each pass is one sendmsg loop over [queued frames, header, payload,
// caller's bulk...]); one reader thread per client decodes replies and completes
// requests by request id. Held frames (deferred, batched) wait in wbuf; the
// reader writes batched ones after taking a batched request's reply. Every
// request lives in a pending table from just before its frame is written (or
// as it joins wbuf) until it is claimed (cw_client_wait, cw_client_flush) or
// its callback has run; one with a callback and no reply bulk leaves the table
// when the reader matches its reply, just before the callback runs.
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
#ifndef CW_CLIENT_INTERNAL_H_
#define CW_CLIENT_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cw_client.h"
#include "cw_rbuf.h"

// Hidden: these are not part of libcauseway_client.so's interface.
#pragma GCC visibility push(hidden)

enum {
  CW_CLIENT_PEND_SENDING = 1u << 0,     // the sender has not finished writing the frame
  CW_CLIENT_PEND_DONE = 1u << 1,        // completed; result fields below are valid
  CW_CLIENT_PEND_CLAIMED = 1u << 2,     // a cw_client_wait is blocked on this entry
  CW_CLIENT_PEND_DETACHED = 1u << 3,    // drop success, park errors (typed helpers)
  CW_CLIENT_PEND_ALLOC_SINK = 1u << 4,  // malloc a sink of bulk_len on arrival
  CW_CLIENT_PEND_MATCHED = 1u << 5,     // the reader took a reply; reader-owned until DONE
  // cw_client_send_flags only (never stored): cw_client_send_deferred.
  CW_CLIENT_SEND_DEFER = 1u << 6,
  CW_CLIENT_PEND_BATCHED = 1u << 7,  // cw_client_send_batched: counted in c->batched
};

// The reader's parking tuner (cw_client_tune.c): which way is being timed.
typedef enum {
  CW_CLIENT_TUNE_KEEP,    // keeping the last choice until phase_end_ns
  CW_CLIENT_TUNE_READER,  // timing intervals with the reader on the socket
  CW_CLIENT_TUNE_PARKED,  // timing intervals with the reader parked
} cw_client_tune_phase_t;

#define CW_CLIENT_TUNE_BUCKETS 256  // intervals by whole microseconds, the last for longer

typedef struct {
  cw_client_tune_phase_t phase;
  int64_t phase_end_ns;
  // Intervals between waiters' replies [reader on the socket, parked], by
  // microsecond.
  uint32_t hist[2][CW_CLIENT_TUNE_BUCKETS];
  uint32_t n[2];
  uint64_t probes;  // looks completed
} cw_client_tune_t;

// One waiter's reply at `now_ns`, `interval_ns` after the one before, to tuner
// `t`, whose reader parks now if `park`: returns whether it parks from now on.
bool cw_client_tune_step(cw_client_tune_t* t, int64_t now_ns, int64_t interval_ns, bool park);

typedef struct cw_client_pending_s {
  struct cw_client_pending_s* next;  // hash chain
  uint64_t id;
  uint16_t type;
  unsigned flags;
  cw_client_sink_t sink;  // capacity 0 when the caller gave none
  cw_client_done_fn done;
  void* user;
  // Result, valid with CW_CLIENT_PEND_DONE.
  cw_status_t status;
  ProtobufCMessage* reply;
  uint64_t bulk_len;
  void* alloc_data;  // CW_CLIENT_PEND_ALLOC_SINK: the buffer the reader allocated
} cw_client_pending_t;

// Chained hash map keyed by request id. Ids are a counter, so id & mask
// spreads perfectly. It grows only with requests this client sent, never
// with anything the peer declares.
typedef struct cw_client_table_s {
  cw_client_pending_t** buckets;
  size_t num_buckets;  // power of two
  size_t count;
  // Records of completed callback requests, kept for the next requests:
  // callers allocate them and the reader thread frees them, which glibc's
  // per-thread caches serve slowly (a launch's record would take malloc's
  // slow path every time). Chained through `next`.
  cw_client_pending_t* spare;
  size_t num_spare;
} cw_client_table_t;

struct cw_client_s {
  int fd;
  unsigned fork_gen;  // cw_client_fork_generation() when connected
  struct cw_client_tls_conn_s* tls;  // TLS over fd (cw_client_tls.h); NULL: plaintext
  char* address;
  char* worker_name;
  uint64_t session_id;
  bool same_host_copies;  // HelloReply.same_host_copies
  uint64_t session_key, session_seq_next;  // HelloReply's
  cw_frame_limits_t limits;  // what we accept from the worker, and send to it

  // One thread at a time writes (`writing`), making its system calls without
  // write_mu; a small frame sent meanwhile joins wbuf and the writer sends it
  // before it gives the turn up, so a sender never sleeps behind another's
  // system call (the reader preempted mid-write held JAX's thread so).
  pthread_mutex_t write_mu;  // guards the fields below down to flusher_stop
  pthread_cond_t write_cv;   // the writer gave its turn up
  bool writing;
  // Whole frames not yet written (deferred, held, or queued behind the
  // writer); they go out ahead of the next frame. The writer swaps wbuf with
  // the spare before its system call.
  uint8_t* wbuf;
  size_t wbuf_len, wbuf_cap;
  uint8_t* wspare;
  size_t wspare_cap;
  // wbuf holds frames that go now: queued behind the writer, or asked for by
  // cw_client_write_held; the writer writes them before its turn ends.
  bool wbuf_now;
  // wbuf holds a cw_client_send_batched frame (changed under write_mu; read
  // without it to skip the lock): the reader writes it after taking a
  // batched request's reply, the flusher once it was held for the batch window.
  _Atomic bool wbuf_batched;
  // Guarded by write_mu: when wbuf_batched was set; the flusher thread
  // (started at the first hold) and what it waits on.
  int64_t held_since_ns;
  pthread_cond_t flush_cv;  // CLOCK_MONOTONIC
  pthread_t flusher;
  bool flusher_started, flusher_idle, flusher_stop;

  pthread_mutex_t mu;  // guards everything below
  // Broadcast when a completion can end a wait: while a thread waits for a
  // request of its own (cw__wait), or when nothing is outstanding any more
  // (cw_client_flush). A flush waiting behind thousands of pipelined
  // launches is then woken once, not at each reply (cw_client_wake).
  pthread_cond_t cv;
  size_t one_waiters;  // threads in cw__wait
  cw_client_table_t table;
  uint64_t next_id;
  size_t outstanding;  // sent and not completed (callbacks count until they return)
  size_t batched;      // cw_client_send_batched requests whose reply was not taken
  int64_t batched_reply_ns;  // CLOCK_MONOTONIC when the reader last took one's reply
  int64_t batch_window_ns;   // options.batch_window_us
  char* dead;          // set once the connection is lost: the reason
  _Atomic bool broken;  // cw_client_failed: set before any loss is reported
  bool closing;        // cw_client_release has begun

  pthread_t reader;
  bool reader_started;
  // Whoever reads frames holds read_mu: the reader thread, or on a
  // plaintext connection (shared_reads) a thread waiting for a reply that
  // is already there (cw_client_take_replies). The three below are its.
  pthread_mutex_t read_mu;
  _Atomic bool shared_reads;
  cw_status_t read_err;  // a waiter's read failed: the reader ends the connection
  // Records of callback requests completed by whoever reads, not yet
  // recycled nor counted off `outstanding`: that waits for the next reply's
  // turn with c->mu, or for the last reply buffered (one lock for a batch).
  cw_client_pending_t* finished;
  size_t num_finished;
  bool read_closed;      // the reader ended it: the stream is no longer at a frame
  // The thread running frames' callbacks on behalf of the reader (a waiter
  // in cw_client_take_replies), so that they cannot wait on this client.
  _Atomic(pthread_t) taker;
  _Atomic bool taking;
  // An eventfd the reader waits on beside the socket: a waiter that leaves
  // bytes in rb (a frame it may not take) wakes the reader for them, as does
  // one that stops polling (cw_client_kick_reader).
  int kick_fd;
  // When a waiter last tried cw_client_take_replies while park_reader was
  // set (0: kicked since): the reader leaves the socket to waiters meanwhile.
  _Atomic int64_t last_take_ns;
  uint64_t reader_parks;  // times the reader left the socket to waiters (read_mu)
  // Whether the reader parks while waiters take replies: a wakeup of the
  // reader per reply costs an idle machine little and a busy one much, so
  // the client times the intervals between waiters' replies both ways now
  // and then and keeps the faster (cw_client_waited, cw_client_tune.c).
  _Atomic bool park_reader;
  pthread_mutex_t tune_mu;
  cw_client_tune_t tune;  // tune_mu
  int64_t tune_last_ns;   // the last waiter's reply (tune_mu)
  uint8_t* payload_buf;  // scratch for payloads
  size_t payload_cap;
  cw_rbuf_t rb;          // what the recvs brought (cw_rbuf.h)
  void (*on_event)(void* user, const ProtobufCMessage* event);
  void* event_user;
  void (*on_request)(void* user, cw_client_t* client, uint16_t type, uint64_t request_id,
                     ProtobufCMessage* request, uint8_t* bulk, uint64_t bulk_len);
  void* request_user;
  void (*on_release)(void* user, cw_client_t* client);
  // Liveness (cw_client_options_t.liveness_ms; 0: off): the process's
  // watchdog (cw_client_liveness.c) gives up on a peer that owes answers and
  // stays quiet; it pings one that does not keep the link warm.
  int liveness_ms;
  int peer_keepalive_ms;  // HelloReply.keepalive_ms: the peer's KEEPALIVE period (0: none)
  // CLOCK_MONOTONIC of the last frame read or run of bulk bytes, or of the
  // request that ended a time with nothing owed.
  _Atomic int64_t last_rx_ms;
  cw_client_t* watch_next;  // the watchdog's list (its lock)
  bool watch_busy;          // (its lock) the watchdog sends it a PING without the lock
  bool ping_out;            // guarded by mu
  char* hung;               // guarded by mu: why the watchdog gave up
};

// ---- Pending table (cw_client_pending.c; c->table is guarded by c->mu) -----

// Frees `p` (taken) and whatever result it still holds; NULL is a no-op.
void cw_client_pending_free(cw_client_pending_t* p);
CW_MUST_USE cw_status_t cw_client_table_initialize(cw_client_table_t* t);
// Frees every entry still in the table, and the table's buckets.
void cw_client_table_deinitialize(cw_client_table_t* t);
// Borrowed; NULL when no entry has `id`.
cw_client_pending_t* cw_client_table_find(cw_client_table_t* t, uint64_t id);
// Takes `p`.
void cw_client_table_insert(cw_client_table_t* t, cw_client_pending_t* p);
// Unlinks the entry with `id` and gives it to the caller (NULL when none).
cw_client_pending_t* cw_client_table_remove(cw_client_table_t* t, uint64_t id);
// A zeroed record: a spare, else a new one (NULL when out of memory).
cw_client_pending_t* cw_client_table_new_record(cw_client_table_t* t);
// Takes `p`, off the table and holding no result, as a spare (or frees it).
void cw_client_table_recycle(cw_client_table_t* t, cw_client_pending_t* p);

// ---- Sending (cw_client_send.c) -------------------------------------------------

// Packs `msg` into `stack` when it fits, else into a malloc'd buffer;
// *out_buf != stack means the caller frees it.
CW_MUST_USE cw_status_t cw_client_message_pack(const ProtobufCMessage* msg, uint8_t* stack,
                                               size_t stack_cap, uint8_t** out_buf,
                                               size_t* out_len);
// Writes one request frame, after any deferred frames; `payload` and `bulk`
// are borrowed. The caller holds write_mu, which is released around the
// system calls (after the writer's turn, if another has it).
CW_MUST_USE cw_status_t cw_client_frame_write(cw_client_t* c, uint16_t type, uint64_t request_id,
                                              const uint8_t* payload, size_t payload_len,
                                              const struct iovec* bulk, int bulk_count,
                                              uint64_t bulk_len);
// The same with header flags (CW_FRAME_REPLY, CW_FRAME_ERROR): a reply.
CW_MUST_USE cw_status_t cw_client_frame_write_flags(cw_client_t* c, uint16_t type, uint32_t flags,
                                                    uint64_t request_id,
                                              const uint8_t* payload, size_t payload_len,
                                              const struct iovec* bulk, int bulk_count,
                                              uint64_t bulk_len);
// Writes wbuf's frames now, or leaves them to the thread writing now (which
// writes them before its turn ends); write_mu held (released around the
// system call). An error shuts the socket down (the reader then fails what
// is outstanding).
CW_MUST_USE cw_status_t cw_client_write_held_locked(cw_client_t* c);
// cw_client_send and cw_client_call with CW_CLIENT_PEND_* flags (DETACHED,
// ALLOC_SINK) and CW_CLIENT_SEND_DEFER; *out_alloc takes an ALLOC_SINK buffer.
CW_MUST_USE cw_status_t cw_client_send_flags(cw_client_t* c, uint16_t type,
                                             const ProtobufCMessage* request,
                                             const struct iovec* bulk, int bulk_count,
                                             const cw_client_sink_t* sink, unsigned flags,
                                             cw_client_done_fn done, void* user,
                                             uint64_t* out_request_id);
CW_MUST_USE cw_status_t cw_client_call_flags(cw_client_t* c, uint16_t type,
                                             const ProtobufCMessage* request,
                                             const struct iovec* bulk, int bulk_count,
                                             const cw_client_sink_t* sink, unsigned flags,
                                             ProtobufCMessage** out_reply,
                                             uint64_t* out_bulk_len, void** out_alloc);

// ---- Socket or TLS (cw_client.c) ---------------------------------------------------

// Words for a failed read (errno `err` after `got` bytes of a frame),
// TLS's own when it was TLS that failed.
const char* cw_client_io_error_text(const cw_client_t* c, int err, size_t got);

// ---- fork() ----------------------------------------------------------------------

// Counts the fork()s this process came out of as the child (pthread_atfork,
// registered at the first connect).
unsigned cw_client_fork_generation(void);
// FAILED_PRECONDITION naming the connection, for a forked child that uses it.
cw_status_t cw_client_forked_status(const cw_client_t* c);

// Wakes the threads a completion may concern (c->mu held, after
// `outstanding` or a request's DONE changed): see cw_client_t.cv.
static inline void cw_client_wake(cw_client_t* c) {
  if (c->one_waiters || c->outstanding == 0) pthread_cond_broadcast(&c->cv);
}

// ---- Threads (started and joined by cw_client.c; `arg` is the client) --------

// The reader (cw_client_reader.c): reads until the connection ends, then
// fails everything outstanding.
void* cw_client_reader_main(void* arg);
// Shuts the socket down both ways and wakes the reader, parked or not, which
// then fails everything outstanding.
void cw_client_break(cw_client_t* c);

// cw_client_take_replies with read_mu held (and shared_reads set).
bool cw_client_take_replies_locked(cw_client_t* c);
// The liveness watchdog (cw_client_liveness.c; c->liveness_ms > 0): one
// thread for the process, watching every connection added (it starts with the
// first). After cw_client_watch_remove returns it no longer touches `c`.
cw_status_t cw_client_watch_add(cw_client_t* c);
void cw_client_watch_remove(cw_client_t* c);
// In a fork()ed child: the parent's watchdog thread is not there; forget its list.
void cw_client_watch_forked(void);
// The flusher (cw_client_send.c): writes batched frames held longer than the
// batch window; ends with c->flusher_stop.
void* cw_client_flusher_main(void* arg);

#pragma GCC visibility pop

#endif  // CW_CLIENT_INTERNAL_H_
