// The worker daemon: one libuv loop thread owns every connection, session and
// the object store; PJRT and the threadpool report back to it.
//
// Loop phases (one iteration of uv_run):
//   1. timers: HELLO deadlines of inbound connections, connect deadlines of
//      outbound peer connections.
//   2. pending/poll I/O: accept; reads (HEADER -> PAYLOAD -> BULK through
//      cw_conn_parser; bulk bytes are read straight into staging memory);
//      write completions (free payloads and bulk staging); connects. The
//      async handle wakes this phase too: it drains the completion queue that
//      PJRT event callbacks fill from plugin threads, and threadpool
//      after-work callbacks apply finished compilations.
//   3. idle/check: connections that hit the per-wakeup frame cap
//      (frames-per-wakeup) resume parsing their buffered bytes here, so one
//      busy peer cannot starve the others.
//   3b. prepare (w->flush, before the loop blocks): completions that fired
//      inline on this thread are applied, then each connection's gathered
//      small frames are written with one uv_write (cw__send).
//   4. close callbacks: connection memory is freed once its handles are
//      closed and no operation holds a reference.
// Nothing here blocks on PJRT except calls that only enqueue work; slow
// compilation and deserialization run on the libuv threadpool.
#include "cw_worker.h"

#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "cw_array.h"
#include "cw_xla_options.h"
#include "cw_conn_parser.h"
#include "cw_frame.h"
#include "cw_log.h"
#include "cw_net.h"
#include "cw_random.h"
#include "cw_pjrt.h"
#include "cw_staging.h"
#include "cw_store.h"
#include "cw_worker_cluster.h"
#include "cw_worker_seq.h"

#include "cw_worker_internal.h"
#include "cw_time.h"
#include "cw_messages.h"

static void cw__conn_close(cw_conn_t* c);
static void cw__conn_process(cw_conn_t* c);
static void cw__maybe_finish_shutdown(cw_worker_t* w);
static void cw__op_start_wait(cw_op_t* op);
static void cw__conn_start_reading(cw_conn_t* c);
static void cw__seq_release_conn(void* conn, cw_seq_held_t* held);
static void cw__seq_conn_closed(cw_conn_t* c);

// --- Small helpers ----------------------------------------------------------

// Staging memory for `size` bulk bytes (CW__BULK_ALIGN aligned, reused
// through the worker's staging cache); give it back with cw__staging_free.
static void* cw__staging_alloc(cw_worker_t* w, uint64_t size) {
  _Static_assert(CW__BULK_ALIGN <= 64, "the staging cache aligns to 64 bytes");
  return cw_staging_alloc(w->staging, size);
}

static void cw__staging_free(cw_worker_t* w, void* p, uint64_t size) {
  cw_staging_free(w->staging, p, size);
}

// A staging block handed to a write or a PJRT event, to return on completion
// (w NULL: not the cache's, plain free()).
typedef struct cw_block_ref_s {
  cw_worker_t* w;
  void* ptr;
  uint64_t size;
} cw_block_ref_t;

static void cw__block_ref_free(void* user) {
  cw_block_ref_t* r = user;
  if (r->w) cw__staging_free(r->w, r->ptr, r->size);
  else free(r->ptr);
  free(r);
}

static void cw__free_plain(void* p) { free(p); }

// Takes op->staging: *out_fn(*out_user) returns it on completion.
static void cw__op_staging_ref(cw_op_t* op, void (**out_fn)(void*), void** out_user);

// --- Pins: device memory read in place ----------------------------------------
//
// A DOWNLOAD or SEND of a ready buffer in host memory writes its bytes to the
// socket straight from the buffer. The buffer is pinned from the request
// until the write completes: PJRT's external reference count is raised, and
// a DELETE meanwhile only marks it, the PJRT buffer being destroyed when the
// last pin goes.
typedef struct cw_pin_s {
  struct cw_pin_s* next;
  cw_worker_t* w;
  PJRT_Buffer* buffer;
  int count;
  bool destroy;  // its entry is gone: destroy with the last pin
} cw_pin_t;

static cw_pin_t* cw__pin_find(cw_worker_t* w, PJRT_Buffer* b) {
  for (cw_pin_t* p = w->pins; p; p = p->next) {
    if (p->buffer == b) return p;
  }
  return NULL;
}

// NULL if the buffer cannot be pinned (then copy it out instead).
static cw_pin_t* cw__pin(cw_worker_t* w, PJRT_Buffer* b) {
  cw_pin_t* p = cw__pin_find(w, b);
  bool fresh = !p;
  if (fresh) {
    p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->w = w;
    p->buffer = b;
  }
  if (!cw_pjrt_buffer_hold(w->pjrt, b)) {
    if (fresh) free(p);
    return NULL;
  }
  if (fresh) {
    p->next = w->pins;
    w->pins = p;
  }
  p->count++;
  return p;
}

static void cw__unpin(void* user) {
  cw_pin_t* p = user;
  if (!p) return;
  cw_worker_t* w = p->w;
  cw_pjrt_buffer_unhold(w->pjrt, p->buffer);
  if (--p->count > 0) return;
  cw_pin_t** pp = &w->pins;
  while (*pp && *pp != p) pp = &(*pp)->next;
  if (*pp) *pp = p->next;
  if (p->destroy) cw_pjrt_buffer_destroy(w->pjrt, p->buffer);
  free(p);
}

void cw__conn_ref(cw_conn_t* c) { c->refs++; }

static size_t cw__peer_stat_index(cw_worker_t* w, const char* name) {
  for (size_t i = 0; i < w->num_peer_stats; ++i) {
    if (!strcmp(w->peer_stats[i].name, name)) return i;
  }
  // Bounded: a hostile peer choosing names cannot grow this without limit.
  if (w->num_peer_stats >= CW__MAX_PEER_STATS) {
    return cw__peer_stat_index(w, "(other)") ;
  }
  cw_peer_stat_t* grown = realloc(w->peer_stats, (w->num_peer_stats + 1) * sizeof(*grown));
  char* copy = strdup(name);
  if (!grown || !copy) {
    free(copy);
    if (grown) w->peer_stats = grown;
    return SIZE_MAX;
  }
  w->peer_stats = grown;
  grown[w->num_peer_stats] = (cw_peer_stat_t){copy, 0, 0};
  return w->num_peer_stats++;
}

static void cw__count_bytes(cw_conn_t* c, uint64_t in, uint64_t out) {
  if (c->peer_stat >= c->w->num_peer_stats) {
    // Not named yet (before HELLO): carried until it is.
    c->uncounted_in += in;
    c->uncounted_out += out;
    return;
  }
  in += c->uncounted_in;
  out += c->uncounted_out;
  c->uncounted_in = c->uncounted_out = 0;
  c->w->peer_stats[c->peer_stat].bytes_in += in;
  c->w->peer_stats[c->peer_stat].bytes_out += out;
}

// --- Writing ----------------------------------------------------------------

// Frames without bulk (nearly every reply) are not written one by one: they
// are packed behind each other in the connection's out buffer, and the
// worker's prepare handle (run once per loop iteration, before the loop
// blocks) writes each connection's buffer with one uv_write. A pipelined
// stream of launches so costs one writev per wakeup instead of one per reply.
// A frame with bulk takes the gathered bytes with it: one uv_write of
// [gathered frames + its header and payload, its bulk from caller memory],
// so bulk stays zero-copy and every frame keeps its place on the connection.
#define CW__OUT_INITIAL 4096
#define CW__OUT_FLUSH_AT (256 * 1024)  // write at once past this many gathered bytes

typedef struct cw_write_s {
  uv_write_t req;
  cw_conn_t* conn;
  uint8_t* payload;  // owned: the gathered frames
  size_t payload_cap;
  cw_bulk_free_fn bulk_free;
  void* bulk_user;
} cw_write_t;

static void cw__out_write(cw_conn_t* c, const void* bulk, uint64_t bulk_len,
                          cw_bulk_free_fn bulk_free, void* bulk_user);

static void cw__write_done(uv_write_t* req, int status) {
  cw_write_t* wr = (cw_write_t*)req;
  cw_conn_t* c = wr->conn;
  if (wr->payload && !c->out_spare && wr->payload_cap <= CW__OUT_FLUSH_AT) {
    // Kept for the next frames: no malloc per write in a steady stream.
    c->out_spare = wr->payload;
    c->out_spare_cap = wr->payload_cap;
  } else {
    free(wr->payload);
  }
  if (wr->bulk_free) wr->bulk_free(wr->bulk_user);
  free(wr);
  c->writes_pending--;
  if (status < 0 && !c->closing) {
    CW_LOGI("%s: write failed: %s", c->name, uv_strerror(status));
    c->last_error = status;
    cw__conn_close(c);
  } else if (c->close_after_write && c->writes_pending == 0 && !c->closing) {
    // Frames gathered since go out first; the close follows their write.
    if (c->out_len) cw__out_write(c, NULL, 0, NULL, NULL);
    else cw__conn_close(c);
  }
  cw__conn_unref(c);
}

// Hands the gathered frames (and `bulk`, if any) to libuv as one write.
static void cw__out_write(cw_conn_t* c, const void* bulk, uint64_t bulk_len,
                          cw_bulk_free_fn bulk_free, void* bulk_user) {
  cw_write_t* wr = calloc(1, sizeof(*wr));
  if (!wr) {
    if (bulk_free) bulk_free(bulk_user);
    CW_LOGE("%s: out of memory writing; closing", c->name);
    cw__conn_close(c);
    return;
  }
  wr->conn = c;
  wr->payload = c->out;
  wr->payload_cap = c->out_cap;
  wr->bulk_free = bulk_free;
  wr->bulk_user = bulk_user;
  uv_buf_t bufs[2];
  unsigned n = 0;
  if (c->out_len) {
    bufs[n].base = (char*)c->out;
    bufs[n].len = c->out_len;
    n++;
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
      CW_LOGI("%s: write failed: %s", c->name, uv_strerror(rc));
      c->last_error = rc;
      cw__conn_close(c);
    }
    return;
  }
  cw__conn_ref(c);
  c->writes_pending++;
}

static void cw__on_async(uv_async_t* handle);

// Prepare phase (before the loop blocks): applies completions that fired on
// the loop thread itself, then writes every connection's gathered frames.
// Runs until both are empty: a handle started during this phase would only
// run after the next poll.
static void cw__on_flush(uv_prepare_t* h) {
  cw_worker_t* w = h->data;
  for (;;) {
    if (w->inline_completions) {
      w->inline_completions = false;
      cw__on_async(&w->async);
      continue;
    }
    cw_conn_t* list = w->flush_list;
    if (!list) break;
    w->flush_list = NULL;
    while (list) {
      cw_conn_t* c = list;
      list = c->flush_next;
      c->flush_next = NULL;
      c->flush_queued = false;
      if (!c->closing && c->out_len) cw__out_write(c, NULL, 0, NULL, NULL);
      cw__conn_unref(c);  // the flush list's reference
    }
  }
  uv_prepare_stop(&w->flush);
}

// Room for `need` more bytes in c->out.
static bool cw__out_reserve(cw_conn_t* c, size_t need) {
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

// Sends one frame: header and packed `msg` (NULL: empty payload) are
// gathered (see above); `bulk` goes straight from caller memory, freed by
// bulk_free after the write.
void cw__send(cw_conn_t* c, uint16_t type, uint32_t flags, uint64_t request_id,
              const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len,
              cw_bulk_free_fn bulk_free, void* bulk_user) {
  if (c->closing) {
    if (bulk_free) bulk_free(bulk_user);
    return;
  }
  size_t plen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
  if (plen > UINT32_MAX || !cw__out_reserve(c, CW_FRAME_HEADER_SIZE + plen)) {
    if (bulk_free) bulk_free(bulk_user);
    CW_LOGE("%s: out of memory sending a %s frame; closing", c->name, cw_msg_type_name(type));
    cw__conn_close(c);
    return;
  }
  cw_frame_header_t h = {CW_FRAME_MAGIC, CW_PROTOCOL_VERSION, type, flags, (uint32_t)plen,
                         request_id, bulk_len};
  cw_frame_header_encode(&h, c->out + c->out_len);
  if (plen) protobuf_c_message_pack(msg, c->out + c->out_len + CW_FRAME_HEADER_SIZE);
  c->out_len += CW_FRAME_HEADER_SIZE + plen;
  cw__count_bytes(c, 0, CW_FRAME_HEADER_SIZE + plen + bulk_len);
  if (bulk_len || bulk_free || c->out_len >= CW__OUT_FLUSH_AT) {
    cw__out_write(c, bulk, bulk_len, bulk_free, bulk_user);
  } else if (!c->flush_queued) {
    cw_worker_t* w = c->w;
    c->flush_queued = true;
    cw__conn_ref(c);
    c->flush_next = w->flush_list;
    if (!w->flush_list) uv_prepare_start(&w->flush, cw__on_flush);
    w->flush_list = c;
  }
}

void cw__reply(cw_conn_t* c, uint16_t type, uint64_t request_id, const ProtobufCMessage* msg) {
  cw__send(c, type, CW_FRAME_REPLY, request_id, msg, NULL, 0, NULL, NULL);
}

// Takes `status`.
void cw__reply_error(cw_conn_t* c, uint16_t type, uint64_t request_id, cw_status_t status) {
  c->w->errors++;
  Causeway__V1__ErrorReply er;
  cw_error_reply_fill(&er, status);
  CW_LOGD("%s: %s #%" PRIu64 " -> %s: %s", c->name, cw_msg_type_name(type), request_id,
          cw_status_code_name(cw_status_code(status)), cw_status_message(status));
  cw__send(c, type, CW_FRAME_REPLY | CW_FRAME_ERROR, request_id, &er.base, NULL, 0, NULL, NULL);
  cw_status_free(status);
}

// A protocol violation: error reply, then close once it is written.
static void cw__violation(cw_conn_t* c, uint16_t type, uint64_t request_id,
                          cw_status_t status) {
  CW_LOGW("%s: closing: %s", c->name, cw_status_message(status));
  if (type < 1 || type > CW_MSG_TYPE_MAX) type = CW_MSG_HELLO;
  if (c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  }
  c->close_after_write = true;
  cw__reply_error(c, type, request_id, status);
  if (c->writes_pending == 0 && !c->closing) {
    if (c->out_len) cw__out_write(c, NULL, 0, NULL, NULL);  // closed once written
    else cw__conn_close(c);
  }
}

// --- Completions from PJRT threads -----------------------------------------

// Plugin thread: queue the completion and wake the loop.
static void cw__event_fired(void* user, cw_status_t status) {
  cw_completion_t* cp = user;
  cw_worker_t* w = cp->w;
  cp->status = status;
  pthread_mutex_lock(&w->mu);
  cp->next = w->completions;
  w->completions = cp;
  pthread_mutex_unlock(&w->mu);
  if (w->loop_thread_known && pthread_equal(pthread_self(), w->loop_thread) &&
      w->handles_open) {
    // Fired inline (XLA ran the program on this thread): applied before the
    // loop blocks, without an eventfd write and wakeup.
    w->inline_completions = true;
    uv_prepare_start(&w->flush, cw__on_flush);
    return;
  }
  uv_async_send(&w->async);
}

// Runs fn(w, user, status) on the loop thread once `event` is ready; takes
// `event` (destroyed after fn ran).
static void cw__when_ready(cw_worker_t* w, PJRT_Event* event, cw_done_fn fn, void* user) {
  cw_completion_t* cp = calloc(1, sizeof(*cp));
  if (!cp) {
    // Without memory to wait, block: correctness over latency.
    CW_LOGE("out of memory for a completion; waiting synchronously");
    cw_status_t st = cw_ok_status();
    if (event) {
      PJRT_Event_Await_Args a;
      memset(&a, 0, sizeof(a));
      a.struct_size = sizeof(a);
      a.event = event;
      st = cw_pjrt_status(w->pjrt, w->pjrt->api->PJRT_Event_Await(&a));
      cw_pjrt_event_destroy(w->pjrt, event);
    }
    fn(w, user, st);
    return;
  }
  cp->w = w;
  cp->event = event;
  cp->fn = fn;
  cp->user = user;
  w->outstanding++;
  if (!event) {
    cw__event_fired(cp, cw_ok_status());
    return;
  }
  cw_status_t st = cw_pjrt_event_on_ready(w->pjrt, event, cw__event_fired, cp);
  if (st) cw__event_fired(cp, st);
}

static void cw__on_async(uv_async_t* handle) {
  cw_worker_t* w = handle->data;
  pthread_mutex_lock(&w->mu);
  cw_completion_t* list = w->completions;
  w->completions = NULL;
  pthread_mutex_unlock(&w->mu);
  // Reverse to arrival order.
  cw_completion_t* fifo = NULL;
  while (list) {
    cw_completion_t* next = list->next;
    list->next = fifo;
    fifo = list;
    list = next;
  }
  while (fifo) {
    cw_completion_t* cp = fifo;
    fifo = fifo->next;
    cw_pjrt_event_destroy(w->pjrt, cp->event);
    w->outstanding--;
    cp->fn(w, cp->user, cp->status);
    free(cp);
  }
  cw__maybe_finish_shutdown(w);
}

// --- Operations --------------------------------------------------------------

static cw_op_t* cw__op_create(cw_conn_t* c, uint16_t type, uint64_t request_id) {
  cw_op_t* op = calloc(1, sizeof(*op));
  if (!op) return NULL;
  op->w = c->w;
  op->conn = c;
  cw__conn_ref(c);
  op->type = type;
  op->request_id = request_id;
  op->skey = c->session ? c->session->key : 0;
  op->device = -1;
  op->dst_device = -1;
  op->trace_start_ns = cw_time_now_ns();
  c->w->ops_live++;
  return op;
}

static void cw__op_free(cw_op_t* op) {
  if (!op) return;
  if (op->msg) protobuf_c_message_free_unpacked(op->msg, NULL);
  if (op->staging_foreign) free(op->staging);
  else cw__staging_free(op->w, op->staging, op->size);
  cw__unpin(op->pin);
  cw_store_entry_release(op->w->store, op->src);
  free(op->dims);
  free(op->peer_address);
  free(op->name);
  cw_pjrt_shapes_free(op->params, op->num_params);
  cw_status_free(op->status);
  if (op->exe) cw_pjrt_executable_destroy(op->w->pjrt, op->exe);
  op->w->ops_live--;
  cw__conn_unref(op->conn);
  free(op);
}

// Replies with an error (takes status) and frees the op.
static void cw__op_fail(cw_op_t* op, cw_status_t status) {
  cw__reply_error(op->conn, op->type, op->request_id, status);
  cw__op_free(op);
}

static void cw__op_ack(cw_op_t* op, uint64_t id) {
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = id;
  cw__reply(op->conn, op->type, op->request_id, &ack.base);
  cw__op_free(op);
}

// The entry op->serial names, if it still exists and waits for this op: in
// the table, or deleted but still held by a request that uses it (then it is
// filled all the same). NULL once freed, or failed by its session's close.
static cw_store_entry_t* cw__op_own_entry(cw_op_t* op, uint64_t id) {
  cw_store_entry_t* e = cw_store_lookup_serial(op->w->store, op->skey, id, op->serial);
  return (e && e->state == CW_STORE_PENDING) ? e : NULL;
}

static void cw__op_waiter(void* user) { cw__op_start_wait((cw_op_t*)user); }

// Looks op->id up (once, when the request is applied; the entry is retained
// so a later DELETE of the id cannot take it from the op) and continues with
// op->cont once it is not pending (entry NULL if it did not exist).
static void cw__op_start_wait(cw_op_t* op) {
  if (!op->src_resolved) {
    op->src_resolved = true;
    op->src = op->skey ? cw_store_lookup(op->w->store, op->skey, op->id) : NULL;
    if (op->src) cw_store_entry_retain(op->src);
  }
  cw_store_entry_t* e = op->src;
  if (e && e->state == CW_STORE_PENDING) {
    cw_status_t st = cw_store_add_waiter(op->w->store, e, cw__op_waiter, op);
    if (st) cw__op_fail(op, st);
    return;
  }
  op->cont(op, e);
}

static void cw__fill_array_info(const cw_store_entry_t* e, Causeway__V1__ArrayInfo* info) {
  info->buffer_id = e->id;
  info->dtype = (Causeway__V1__DType)e->dtype;
  info->dims = e->dims;
  info->n_dims = e->rank;
  info->device = e->device;
  info->size = e->bytes;
}

// Records a buffer's metadata on its entry (dims copied).
static cw_status_t cw__entry_set_array(cw_store_entry_t* e, int dtype, const int64_t* dims,
                                       size_t rank, int device) {
  int64_t* copy = malloc((rank ? rank : 1) * sizeof(int64_t));
  if (!copy) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (rank) memcpy(copy, dims, rank * sizeof(int64_t));
  uint64_t bytes = 0;
  cw_status_t st = cw_array_extent(dtype, dims, rank, NULL, 0, &bytes);
  if (st) {
    // Types we cannot transfer (e.g. sub-byte) still get recorded.
    cw_status_free(st);
    bytes = 0;
  }
  free(e->dims);
  e->dims = copy;
  e->rank = rank;
  e->dtype = dtype;
  e->device = device;
  e->bytes = bytes;
  return cw_ok_status();
}

// Releases an entry's PJRT handle (the store's release callback).
static void cw__release_handle(void* user, cw_store_entry_t* e) {
  cw_worker_t* w = user;
  if (e->kind == CW_STORE_BUFFER) {
    cw_pin_t* pin = cw__pin_find(w, (PJRT_Buffer*)e->handle);
    if (pin) {
      pin->destroy = true;  // a write reads it in place: destroyed after it
      return;
    }
    // Safe with work pending: PJRT keeps the storage alive until its users
    // (executions, transfers) are done.
    cw_pjrt_buffer_destroy(w->pjrt, (PJRT_Buffer*)e->handle);
  } else {
    cw_pjrt_executable_destroy(w->pjrt, (PJRT_LoadedExecutable*)e->handle);
  }
}

// --- Sessions ---------------------------------------------------------------

static cw_session_t* cw__session_find(cw_worker_t* w, uint64_t id) {
  for (cw_session_t* s = w->sessions; s; s = s->next) {
    if (s->id == id) return s;
  }
  return NULL;
}

static cw_session_t* cw__session_create(cw_worker_t* w, uint64_t id) {
  cw_session_t* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  while (id == 0 || cw__session_find(w, id)) {
    // Fresh ids come from getrandom: knowing one is what it takes to join a
    // session (docs/protocol.md "Sessions are capabilities").
    if (!cw_random_id_or_log("session id", &id)) {
      free(s);
      return NULL;
    }
  }
  s->id = id;
  s->key = w->next_session_key++;
  cw_seq_initialize(&s->seq);
  s->next = w->sessions;
  w->sessions = s;
  CW_LOGI("session %" PRIu64 " opened", id);
  return s;
}

static void cw__session_drop(cw_worker_t* w, cw_session_t* s) {
  if (--s->connections > 0) return;
  cw_session_t** pp = &w->sessions;
  while (*pp && *pp != s) pp = &(*pp)->next;
  if (*pp) *pp = s->next;
  CW_LOGI("session %" PRIu64 " closed; freeing its objects", s->id);
  uint64_t key = s->key;
  cw_seq_deinitialize(&s->seq, cw__seq_release_conn);
  if (s->trace) w->traced_sessions--;
  cw_worker_trace_free(s->trace);
  free(s);
  cw_store_remove_session(w->store, key);
}

// --- Connections ---------------------------------------------------------------

static void cw__conn_free(cw_conn_t* c) {
  free(c->out);
  free(c->out_spare);
  cw_conn_parser_deinitialize(&c->parser);
  free(c->readahead);
  free(c->peer_address);
  free(c);
}

void cw__conn_unref(cw_conn_t* c) {
  if (--c->refs == 0) cw__conn_free(c);
}

static void cw__handle_closed(uv_handle_t* h) { cw__conn_unref((cw_conn_t*)h->data); }

static void cw__fail_outreqs(cw_conn_t* c, cw_status_t status);

static void cw__conn_close(cw_conn_t* c) {
  if (c->closing) return;
  c->closing = true;
  cw_worker_t* w = c->w;
  CW_LOGD("%s: closed", c->name);
  if (c->reading) uv_read_stop(&c->h.stream);
  c->reading = false;
  // Unlink from the worker's list.
  if (c->prev) c->prev->next = c->next;
  else if (w->conns == c) w->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  if (!c->outbound) w->inbound_connections--;
  // A partial upload: its staging memory goes, its entry fails.
  if (c->recv) {
    cw_op_t* op = c->recv;
    c->recv = NULL;
    cw_store_entry_t* e = cw__op_own_entry(op, op->dst_id);
    if (e) {
      e->filling = false;
      cw_store_set_error(w->store, e,
                         cw_make_status(CW_UNAVAILABLE, "%s closed before the bytes of %" PRIu64
                                        " arrived", c->name, op->dst_id));
    }
    cw__op_free(op);
  }
  cw__fail_outreqs(c, cw_make_status(CW_UNAVAILABLE, "connection to %s closed", c->name));
  cw__seq_conn_closed(c);  // held requests; the controller connection
  if (c->launch_head && c->launch_head->prepared && !c->launch_head->go) {
    c->launch_waiting = false;  // no go can come now: the pump cancels it
    cw__launch_pump(c);
  }
  if (c->out_len && (c->connected || !c->outbound)) {
    // Best effort, as an unqueued uv_write would have: frames gathered
    // before the close (a last error reply) still reach the peer.
    uv_buf_t b = {.base = (char*)c->out, .len = c->out_len};
    (void)uv_try_write(&c->h.stream, &b, 1);
    c->out_len = 0;
  }
  uv_close(&c->h.handle, cw__handle_closed);
  uv_close((uv_handle_t*)&c->timer, cw__handle_closed);
  cw_worker_ops_conn_closing(c);  // launches a paused session held here
  if (c->keeps_session && c->session) {
    cw_session_t* s = c->session;
    c->session = NULL;
    c->keeps_session = false;
    cw__session_drop(w, s);
  }
  c->session = NULL;
}

static cw_conn_t* cw__conn_create(cw_worker_t* w, bool outbound, bool pipe) {
  cw_conn_t* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->readahead = malloc(CW__READAHEAD);
  if (!c->readahead) {
    free(c);
    return NULL;
  }
  c->w = w;
  c->outbound = outbound;
  c->peer_stat = SIZE_MAX;
  c->next_request_id = 1;
  cw_conn_parser_initialize(&c->parser, outbound ? &w->limits : &w->prehello_limits);
  if (!outbound) cw_conn_parser_require_hello(&c->parser, true);
  int rc = pipe ? uv_pipe_init(&w->loop, &c->h.pipe, 0) : uv_tcp_init(&w->loop, &c->h.tcp);
  if (rc < 0) {
    cw__conn_free(c);
    return NULL;
  }
  uv_timer_init(&w->loop, &c->timer);
  c->h.handle.data = c;
  c->timer.data = c;
  c->refs = 2;  // one per handle; dropped by close callbacks
  c->next = w->conns;
  if (w->conns) w->conns->prev = c;
  w->conns = c;
  if (!outbound) w->inbound_connections++;
  return c;
}

// --- Reading -----------------------------------------------------------------

static void cw__alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_conn_t* c = h->data;
  uint8_t* ptr;
  uint64_t len;
  // Bulk bytes go straight into their staging memory.
  if (cw_conn_parser_bulk_window(&c->parser, &ptr, &len) && len >= 4096) {
    buf->base = (char*)ptr;
    buf->len = len > (1u << 30) ? (1u << 30) : (size_t)len;
    return;
  }
  buf->base = (char*)c->readahead;
  buf->len = CW__READAHEAD;
}

static void cw__dispatch(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg);
static void cw__bulk_done(cw_conn_t* c, const cw_frame_header_t* h);

static void cw__on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  cw_conn_t* c = stream->data;
  if (nread == 0) return;
  if (nread < 0) {
    if (nread != UV_EOF) CW_LOGI("%s: read failed: %s", c->name, uv_strerror((int)nread));
    cw__conn_close(c);
    return;
  }
  cw__conn_ref(c);
  if ((uint8_t*)buf->base != c->readahead) {
    cw_conn_parser_event_t ev;
    cw_conn_parser_bulk_advance(&c->parser, (uint64_t)nread, &ev);
    if (ev.kind == CW_CONN_PARSER_EVENT_BULK_DONE) cw__bulk_done(c, &ev.header);
  } else {
    c->ra_off = 0;
    c->ra_len = (size_t)nread;
    cw__conn_process(c);
  }
  // Counted after processing: the peer's name (and so c->peer_stat) is only
  // known once its HELLO, which may be in these very bytes, was handled
  // (bytes of a HELLO split across reads are carried until then).
  cw__count_bytes(c, (uint64_t)nread, 0);
  cw__conn_unref(c);
}

static void cw__on_idle(uv_idle_t* idle) {
  cw_worker_t* w = idle->data;
  cw_conn_t* list = w->resume_list;
  w->resume_list = NULL;
  uv_idle_stop(&w->idle);
  while (list) {
    cw_conn_t* c = list;
    list = c->resume_next;
    c->resume_next = NULL;
    c->paused = false;
    if (!c->closing) cw__conn_process(c);
    cw__conn_unref(c);  // the resume list's reference
  }
}

// Parses buffered bytes, at most frames-per-wakeup frames, then yields.
static void cw__conn_process(cw_conn_t* c) {
  cw_worker_t* w = c->w;
  int64_t cap = cw_settings_int(w->settings, CW_SET_FRAMES_PER_WAKEUP);
  int64_t frames = 0;
  while (c->ra_off < c->ra_len && !c->closing && !c->close_after_write) {
    if (c->seq_blocked) return;  // the rest waits in readahead (cw__seq_unblock)
    if (frames >= cap) {
      // Fairness: stop reading, resume from the idle phase.
      if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
      }
      if (!c->paused) {
        c->paused = true;
        cw__conn_ref(c);
        c->resume_next = w->resume_list;
        w->resume_list = c;
        uv_idle_start(&w->idle, cw__on_idle);
      }
      return;
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
        cw__dispatch(c, &ev.header, ev.msg);
        break;
      case CW_CONN_PARSER_EVENT_BULK_DONE:
        cw__bulk_done(c, &ev.header);
        break;
      case CW_CONN_PARSER_EVENT_ERROR:
        cw__violation(c, ev.header.type, ev.header.request_id, ev.status);
        return;
    }
  }
  c->ra_off = c->ra_len = 0;
  if (!c->closing && !c->close_after_write && !c->reading && !c->seq_blocked) {
    cw__conn_start_reading(c);
  }
}

static void cw__conn_start_reading(cw_conn_t* c) {
  int rc = uv_read_start(&c->h.stream, cw__alloc, cw__on_read);
  if (rc < 0) {
    CW_LOGI("%s: cannot read: %s", c->name, uv_strerror(rc));
    cw__conn_close(c);
    return;
  }
  c->reading = true;
}

// --- HELLO, PING, INVENTORY, STATS -------------------------------------------

static void cw__handle_hello(cw_conn_t* c, const cw_frame_header_t* h,
                             const Causeway__V1__HelloRequest* r) {
  cw_worker_t* w = c->w;
  // Credentials first: an unauthenticated peer learns nothing else.
  cw_status_t auth = cw_net_hello_authenticate(w->token, r->token.data, r->token.len, c->name,
                                               r->role);
  if (auth) {
    cw__violation(c, h->type, h->request_id, auth);
    return;
  }
  if (r->min_version > r->max_version || r->max_version < CW_PROTOCOL_MIN_VERSION ||
      r->min_version > CW_PROTOCOL_VERSION) {
    cw__violation(c, h->type, h->request_id,
                  cw_make_status(CW_UNIMPLEMENTED,
                                 "protocol versions %u..%u not supported (worker speaks %u..%u)",
                                 r->min_version, r->max_version, CW_PROTOCOL_MIN_VERSION,
                                 CW_PROTOCOL_VERSION));
    return;
  }
  c->role = r->role;
  if (r->peer_name && r->peer_name[0]) {
    // The name is peer-chosen: keep it short and printable.
    char clean[64];
    size_t n = 0;
    for (const char* p = r->peer_name; *p && n + 1 < sizeof(clean); ++p) {
      clean[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    }
    clean[n] = 0;
    snprintf(c->name, sizeof(c->name), "%s", clean);
  }
  c->peer_stat = cw__peer_stat_index(w, c->name);
  uint64_t sid = r->session_id;
  if (r->role == CAUSEWAY__V1__ROLE__ROLE_WORKER) {
    // A peer's PUT connection joins the session if it exists but does not
    // keep it alive (PUT names its session anyway).
    c->session = sid ? cw__session_find(w, sid) : NULL;
  } else {
    cw_session_t* s = sid ? cw__session_find(w, sid) : NULL;
    if (!s) s = cw__session_create(w, sid);
    if (!s) {
      cw__violation(c, h->type, h->request_id,
                    cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a session"));
      return;
    }
    s->connections++;
    c->session = s;
    c->keeps_session = true;
    sid = s->id;
  }
  c->hello_done = true;
  uv_timer_stop(&c->timer);
  cw_conn_parser_set_limits(&c->parser, &w->limits);
  cw_conn_parser_require_hello(&c->parser, false);
  Causeway__V1__HelloReply rep = CAUSEWAY__V1__HELLO_REPLY__INIT;
  rep.version = CW_PROTOCOL_VERSION;
  rep.session_id = sid;
  rep.worker_name = (char*)w->name;
  rep.max_payload = w->limits.max_payload;
  rep.max_bulk = w->limits.max_bulk;
  CW_LOGI("%s: HELLO role %d session %" PRIu64, c->name, r->role, sid);
  cw__reply(c, h->type, h->request_id, &rep.base);
}

static void cw__handle_stats(cw_conn_t* c, const cw_frame_header_t* h) {
  cw_worker_t* w = c->w;
  Causeway__V1__Stats st = CAUSEWAY__V1__STATS__INIT;
  cw_store_stats_t all, mine;
  cw_store_stats(w->store, 0, &all);
  memset(&mine, 0, sizeof(mine));
  if (c->session) cw_store_stats(w->store, c->session->key, &mine);
  st.buffers = all.buffers;
  st.buffer_bytes = all.buffer_bytes;
  st.executables = all.executables;
  st.launches = w->launches;
  st.uploads = w->uploads;
  st.downloads = w->downloads;
  st.errors = w->errors;
  st.upload_bytes = w->upload_bytes;
  st.download_bytes = w->download_bytes;
  st.send_bytes = w->send_bytes;
  st.put_bytes = w->put_bytes;
  st.sends = w->sends;
  st.puts = w->puts;
  for (cw_session_t* s = w->sessions; s; s = s->next) st.sessions++;
  st.connections = w->inbound_connections;
  st.session_buffers = mine.buffers;
  cw_worker_ops_scratch_t ops_scratch;
  cw_worker_ops_fill_stats(w, &st, &ops_scratch);
  Causeway__V1__PeerStats* peers = calloc(w->num_peer_stats + 1, sizeof(*peers));
  Causeway__V1__PeerStats** ptrs = calloc(w->num_peer_stats + 1, sizeof(*ptrs));
  if (peers && ptrs) {
    for (size_t i = 0; i < w->num_peer_stats; ++i) {
      causeway__v1__peer_stats__init(&peers[i]);
      peers[i].peer = w->peer_stats[i].name;
      peers[i].bytes_in = w->peer_stats[i].bytes_in;
      peers[i].bytes_out = w->peer_stats[i].bytes_out;
      ptrs[i] = &peers[i];
    }
    st.peers = ptrs;
    st.n_peers = w->num_peer_stats;
  }
  void* stamps = cw_worker_stamp_stats(w, &st);  // gang order: the stamps issued
  cw__reply(c, h->type, h->request_id, &st.base);
  cw_worker_ops_stats_free(&ops_scratch);
  free(stamps);
  free(peers);
  free(ptrs);
}

static void cw__handle_inventory(cw_conn_t* c, const cw_frame_header_t* h) {
  cw_worker_t* w = c->w;
  if (!w->inventory_ready) {
    cw__reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_INTERNAL, "inventory unavailable"));
    return;
  }
  w->inventory.worker_name = (char*)w->name;
  cw__reply(c, h->type, h->request_id, &w->inventory.base);
}

// --- COMPILE, LOAD, SERIALIZE ------------------------------------------------

static void cw__compile_work(uv_work_t* req) {
  cw_op_t* op = req->data;
  const cw_pjrt_t* p = op->w->pjrt;
  // The plugin aborts on some option values: check them first.
  const ProtobufCBinaryData* raw = op->type == CW_MSG_COMPILE
      ? &((const Causeway__V1__CompileRequest*)op->msg)->compile_options
      : &((const Causeway__V1__LoadRequest*)op->msg)->compile_options;
  uint8_t* opts = NULL;
  size_t opts_len = 0;
  if (op->type == CW_MSG_COMPILE || raw->len) {
    op->status = cw_xla_options_normalize(raw->data, raw->len, (int64_t)p->num_devices, &opts,
                                          &opts_len);
  }
  if (op->status) {
    // Reported below.
  } else if (op->type == CW_MSG_COMPILE) {
    const Causeway__V1__CompileRequest* r = (const Causeway__V1__CompileRequest*)op->msg;
    const char* format = (r->format && r->format[0]) ? r->format : "mlir";
    op->status = cw_pjrt_compile(p, format, r->code.data, r->code.len, opts, opts_len, &op->exe);
  } else {
    op->status = cw_pjrt_deserialize(p, op->staging, (size_t)op->size, opts, opts_len, &op->exe);
  }
  free(opts);
  if (!op->status) {
    op->status = cw_pjrt_executable_info(p, op->exe, &op->num_outputs, &op->num_devices,
                                         &op->name);
  }
  if (!op->status) {
    // Parameter shapes, read once here and kept with the executable: XLA's
    // Execute checks only byte sizes. Without them (a plugin that cannot
    // return its optimized program) that size check is all launches get.
    cw_status_t pst = cw_pjrt_executable_params(p, op->exe, &op->params, &op->num_params);
    if (pst) {
      CW_LOGW("executable %" PRIu64 ": no parameter shapes (%s); launches get only XLA's size "
              "check", op->dst_id, cw_status_message(pst));
      cw_status_free(pst);
    } else {
      op->params_known = true;
    }
  }
}

static void cw__compile_done(uv_work_t* req, int status) {
  cw_op_t* op = req->data;
  cw_worker_t* w = op->w;
  w->outstanding--;
  cw_store_entry_t* e = cw__op_own_entry(op, op->dst_id);
  if (!e) {
    cw__op_fail(op, cw_make_status(CW_CANCELLED, "executable %" PRIu64
                                   " was deleted before it was built", op->dst_id));
  } else if (op->status) {
    cw_status_t st = op->status;
    op->status = NULL;
    cw_store_set_error(w->store, e, cw_status_clone(st));
    cw__op_fail(op, st);
  } else {
    e->num_outputs = op->num_outputs;
    e->num_devices = op->num_devices;
    e->name = op->name;
    op->name = NULL;
    if (op->params_known) {
      // cw_pjrt_shape_t and cw_store_shape_t have the same fields.
      e->params = calloc(op->num_params ? op->num_params : 1, sizeof(*e->params));
      if (e->params) {
        for (size_t i = 0; i < op->num_params; ++i) {
          e->params[i] = (cw_store_shape_t){op->params[i].dtype, op->params[i].rank,
                                            op->params[i].dims, op->params[i].donated};
          op->params[i].dims = NULL;
        }
        e->num_params = op->num_params;
        e->params_known = true;
      }
    }
    PJRT_LoadedExecutable* exe = op->exe;
    op->exe = NULL;
    Causeway__V1__CompileReply rep = CAUSEWAY__V1__COMPILE_REPLY__INIT;
    rep.exe_id = op->dst_id;
    rep.num_outputs = e->num_outputs;
    rep.num_devices = e->num_devices;
    rep.name = e->name;
    cw__reply(op->conn, op->type, op->request_id, &rep.base);
    cw_store_set_ready(w->store, e, exe);  // may run waiters that change the store
    cw__op_free(op);
  }
  cw__maybe_finish_shutdown(w);
}

static void cw__queue_compile(cw_op_t* op) {
  op->work.data = op;
  op->w->outstanding++;
  int rc = uv_queue_work(&op->w->loop, &op->work, cw__compile_work, cw__compile_done);
  if (rc < 0) {
    op->w->outstanding--;
    cw_store_entry_t* e = cw__op_own_entry(op, op->dst_id);
    cw_status_t st = cw_make_status(CW_INTERNAL, "cannot queue compilation: %s", uv_strerror(rc));
    if (e) cw_store_set_error(op->w->store, e, cw_status_clone(st));
    cw__op_fail(op, st);
  }
}

// Creates the pending executable entry for COMPILE/LOAD; NULL after replying.
static cw_op_t* cw__begin_exe(cw_conn_t* c, const cw_frame_header_t* h, uint64_t exe_id,
                              ProtobufCMessage** msg) {
  cw_op_t* op = cw__op_create(c, h->type, h->request_id);
  if (!op) {
    cw__reply_error(c, h->type, h->request_id, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return NULL;
  }
  cw_store_entry_t* e = NULL;
  cw_status_t st = cw_store_insert(c->w->store, op->skey, exe_id, CW_STORE_EXECUTABLE, &e);
  if (st) {
    cw__op_fail(op, st);
    return NULL;
  }
  op->dst_id = exe_id;
  op->serial = e->serial;
  op->msg = *msg;
  *msg = NULL;
  return op;
}

static void cw__handle_compile(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  const Causeway__V1__CompileRequest* r = (const Causeway__V1__CompileRequest*)*msg;
  cw_op_t* op = cw__begin_exe(c, h, r->exe_id, msg);
  if (op) cw__queue_compile(op);
}

// Fails `op` unless `e` is a `kind` object (named `what`, `a_what` in
// messages) that did not fail; true if usable.
static bool cw__op_need_kind(cw_op_t* op, const cw_store_entry_t* e, int kind, const char* what,
                             const char* a_what) {
  if (!e) {
    cw__op_fail(op, cw_make_status(CW_NOT_FOUND, "%s %" PRIu64 " not found", what, op->id));
    return false;
  }
  if ((int)e->kind != kind) {
    cw__op_fail(op, cw_make_status(CW_INVALID_ARGUMENT, "object %" PRIu64 " is not %s", op->id,
                                   a_what));
    return false;
  }
  if (e->state == CW_STORE_ERROR) {
    cw__op_fail(op, cw_status_clone(e->error));
    return false;
  }
  return true;
}

static bool cw__op_need_executable(cw_op_t* op, const cw_store_entry_t* e) {
  return cw__op_need_kind(op, e, CW_STORE_EXECUTABLE, "executable", "an executable");
}

static void cw__serialize_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!cw__op_need_executable(op, e)) return;
  const uint8_t* bytes = NULL;
  size_t size = 0;
  void* handle = NULL;
  void (*deleter)(void*) = NULL;
  cw_status_t st = cw_pjrt_serialize(op->w->pjrt, (PJRT_LoadedExecutable*)e->handle, &bytes,
                                     &size, &handle, &deleter);
  if (st) {
    cw__op_fail(op, st);
    return;
  }
  Causeway__V1__SerializeReply rep = CAUSEWAY__V1__SERIALIZE_REPLY__INIT;
  rep.exe_id = op->id;
  rep.size = size;
  // The serialized bytes are written straight from PJRT's memory.
  cw__send(op->conn, op->type, CW_FRAME_REPLY, op->request_id, &rep.base, bytes, size, deleter,
           handle);
  cw__op_free(op);
}

// --- UPLOAD, PUT, LOAD: frames with bulk -----------------------------------------

static void cw__upload_staging_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_status_free(status);
  cw__block_ref_free(user);  // the host memory the buffer was made from
}

static void cw__op_staging_ref(cw_op_t* op, void (**out_fn)(void*), void** out_user) {
  cw_block_ref_t* r = malloc(sizeof(*r));
  if (!r) {
    // No reference to return it to the cache with: freed outright.
    *out_fn = cw__free_plain;
    *out_user = op->staging;
  } else {
    *r = (cw_block_ref_t){op->staging_foreign ? NULL : op->w, op->staging, op->size};
    *out_fn = cw__block_ref_free;
    *out_user = r;
  }
  op->staging = NULL;
}

static void cw__upload_ready(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    cw__op_fail(op, status);
    return;
  }
  cw_worker_trace_record(w, op->skey, op->type == CW_MSG_PUT ? "put" : "upload",
                         op->type == CW_MSG_PUT ? "PUT" : "UPLOAD", op->device,
                         op->trace_start_ns, op->dst_id,
                         op->msg ? cw_seq_of_request(op->type, op->msg) : 0, op->size, 0,
                         op->type == CW_MSG_PUT ? op->conn->name : NULL);
  cw__op_ack(op, op->dst_id);
}

// Bytes of an UPLOAD or PUT are in op->staging: make the device buffer.
static void cw__upload_finish(cw_op_t* op) {
  cw_worker_t* w = op->w;
  cw_store_entry_t* e = cw__op_own_entry(op, op->dst_id);
  if (!e) {
    cw__op_fail(op, cw_make_status(CW_CANCELLED, "buffer %" PRIu64
                                   " was deleted before its bytes arrived", op->dst_id));
    return;
  }
  e->filling = false;
  const int64_t* strides = NULL;
  size_t nstrides = 0;
  if (op->type == CW_MSG_UPLOAD) {
    const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)op->msg;
    strides = r->byte_strides;
    nstrides = r->n_byte_strides;
  }
  PJRT_Buffer* buffer = NULL;
  PJRT_Event* done = NULL;
  cw_status_t st = cw_pjrt_upload(w->pjrt, op->staging, op->dtype, op->dims, op->rank, strides,
                                  nstrides, op->device, true, &buffer, &done);
  if (!st) st = cw__entry_set_array(e, op->dtype, op->dims, op->rank, op->device);
  if (st) {
    cw_pjrt_buffer_destroy(w->pjrt, buffer);
    cw_pjrt_event_destroy(w->pjrt, done);
    cw_store_set_error(w->store, e, cw_status_clone(st));
    cw__op_fail(op, st);
    return;
  }
  if (!w->zero_copy_reported && op->size) {
    // A one-time fact for the log: does this plugin alias our staging memory?
    w->zero_copy_reported = true;
    CW_LOGI("upload: kImmutableZeroCopy %s the staging memory",
            cw_pjrt_buffer_pointer(w->pjrt, buffer) == (uintptr_t)op->staging ? "aliases"
                                                                             : "copies");
  }
  // The staging memory lives until PJRT is done with it (zero-copy: until the
  // buffer is destroyed).
  cw_block_ref_t* ref = malloc(sizeof(*ref));
  if (!ref) {
    cw_pjrt_buffer_destroy(w->pjrt, buffer);
    cw_pjrt_event_destroy(w->pjrt, done);
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    cw_store_set_error(w->store, e, cw_status_clone(st));
    cw__op_fail(op, st);
    return;
  }
  *ref = (cw_block_ref_t){op->staging_foreign ? NULL : w, op->staging, op->size};
  op->staging = NULL;
  cw__when_ready(w, done, cw__upload_staging_done, ref);
  if (op->type == CW_MSG_UPLOAD) {
    w->uploads++;
    w->upload_bytes += op->size;
  } else if (op->type == CW_MSG_PUT) {
    w->puts++;
    w->put_bytes += op->size;
  }
  PJRT_Event* ready = NULL;
  st = cw_pjrt_ready_event(w->pjrt, buffer, &ready);
  cw_store_set_ready(w->store, e, buffer);  // may run waiters
  if (st) {
    cw__op_fail(op, st);
    return;
  }
  cw__when_ready(w, ready, cw__upload_ready, op);
}

static void cw__load_finish(cw_op_t* op) {
  if (!cw__op_own_entry(op, op->dst_id)) {
    cw__op_fail(op, cw_make_status(CW_CANCELLED, "executable %" PRIu64
                                   " was deleted before its bytes arrived", op->dst_id));
    return;
  }
  cw__queue_compile(op);
}

static void cw__seq_bulk_done(cw_conn_t* c);

static void cw__bulk_done(cw_conn_t* c, const cw_frame_header_t* h) {
  if (c->recv_held) {
    cw__seq_bulk_done(c);  // a held UPLOAD's bytes are in
    return;
  }
  cw_op_t* op = c->recv;
  c->recv = NULL;
  if (!op) return;  // discarded bytes of a refused request
  if (op->type == CW_MSG_LOAD) cw__load_finish(op);
  else cw__upload_finish(op);
}

// Hands the frame's bulk bytes to `op` (or finishes at once when there are
// none). Takes `op`.
static void cw__receive_bulk(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op) {
  op->size = h->bulk_len;
  if (c->seq_applying && c->seq_applying->bulk) {
    // A held request: its bytes arrived while it waited for its seq.
    op->staging = c->seq_applying->bulk;
    op->staging_foreign = true;
    c->seq_applying->bulk = NULL;
    if (op->type == CW_MSG_LOAD) cw__load_finish(op);
    else cw__upload_finish(op);
    return;
  }
  op->staging = cw__staging_alloc(c->w, h->bulk_len);
  if (!op->staging) {
    cw_store_entry_t* e = cw__op_own_entry(op, op->dst_id);
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64
                                    " bytes for %s", h->bulk_len, cw_msg_type_name(h->type));
    if (e) cw_store_set_error(c->w->store, e, cw_status_clone(st));
    cw__op_fail(op, st);
    return;  // the bytes are discarded
  }
  if (h->bulk_len == 0) {
    c->recv = op;
    cw__bulk_done(c, h);
    return;
  }
  c->recv = op;
  cw_conn_parser_set_bulk_dest(&c->parser, op->staging);
}

static cw_status_t cw__copy_dims(cw_op_t* op, const int64_t* dims, size_t rank) {
  op->dims = malloc((rank ? rank : 1) * sizeof(int64_t));
  if (!op->dims) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (rank) memcpy(op->dims, dims, rank * sizeof(int64_t));
  op->rank = rank;
  return cw_ok_status();
}

static cw_status_t cw__check_device(cw_worker_t* w, int device) {
  if (device < 0 || (size_t)device >= w->pjrt->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "device %d is not one of this worker's %zu devices",
                          device, w->pjrt->num_devices);
  }
  return cw_ok_status();
}

static void cw__handle_upload(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  cw_worker_t* w = c->w;
  const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)*msg;
  cw_status_t st = cw__check_device(w, r->device);
  if (!st && r->n_byte_strides && r->n_byte_strides != r->n_dims) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "%zu byte strides for %zu dimensions",
                        r->n_byte_strides, r->n_dims);
  }
  cw_op_t* op = NULL;
  if (!st) {
    op = cw__op_create(c, h->type, h->request_id);
    if (!op) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  cw_store_entry_t* e = NULL;
  if (!st) st = cw_store_insert(w->store, op->skey, r->buffer_id, CW_STORE_BUFFER, &e);
  if (!st) st = cw__copy_dims(op, r->dims, r->n_dims);
  if (st) {
    if (e) cw_store_remove(w->store, e);
    cw__op_free(op);
    cw__reply_error(c, h->type, h->request_id, cw_status_annotate(st, "UPLOAD %" PRIu64,
                                                                  r->buffer_id));
    return;  // bulk bytes, if any, are discarded
  }
  e->filling = true;
  op->serial = e->serial;
  op->dst_id = r->buffer_id;
  op->dtype = r->dtype;
  op->device = r->device;
  op->msg = *msg;
  *msg = NULL;
  cw__receive_bulk(c, h, op);
}

static void cw__handle_put(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  cw_worker_t* w = c->w;
  const Causeway__V1__PutRequest* r = (const Causeway__V1__PutRequest*)*msg;
  cw_status_t st = cw_ok_status();
  if (c->role != CAUSEWAY__V1__ROLE__ROLE_WORKER) {
    st = cw_make_status(CW_PERMISSION_DENIED, "PUT is for worker connections (HELLO role WORKER)");
  }
  cw_session_t* s = NULL;
  if (!st) {
    s = cw__session_find(w, r->dst_session);
    if (!s) st = cw_make_status(CW_NOT_FOUND, "session %" PRIu64 " not found", r->dst_session);
  }
  if (!st && !r->error) st = cw__check_device(w, r->dst_device);
  cw_store_entry_t* e = NULL;
  if (!st) {
    // An EXPECT-ed buffer deleted while a request that uses it waits for it
    // is older than any entry now under the id: the PUT fills that first.
    e = cw_store_lookup_detached_put(w->store, s->key, r->dst_id);
    if (!e) e = cw_store_lookup(w->store, s->key, r->dst_id);
    if (e && (e->kind != CW_STORE_BUFFER || e->state != CW_STORE_PENDING || e->filling)) {
      st = cw_make_status(CW_ALREADY_EXISTS, "buffer %" PRIu64 " already exists", r->dst_id);
    } else if (!e) {
      st = cw_store_insert(w->store, s->key, r->dst_id, CW_STORE_BUFFER, &e);
      if (!st) e->from_put = true;
    }
  }
  if (st) {
    cw__reply_error(c, h->type, h->request_id, cw_status_annotate(st, "PUT %" PRIu64, r->dst_id));
    return;
  }
  if (r->error) {
    cw_store_set_error(w->store, e, cw_error_reply_to_status(r->error, NULL));
    Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
    ack.id = r->dst_id;
    cw__reply(c, h->type, h->request_id, &ack.base);
    return;
  }
  cw_op_t* op = cw__op_create(c, h->type, h->request_id);
  if (op) st = cw__copy_dims(op, r->dims, r->n_dims);
  if (!op || st) {
    if (!st) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    cw_store_set_error(w->store, e, cw_status_clone(st));
    cw__op_free(op);
    cw__reply_error(c, h->type, h->request_id, st);
    return;
  }
  e->filling = true;
  op->skey = s->key;
  op->serial = e->serial;
  op->dst_id = r->dst_id;
  op->dtype = r->dtype;
  op->device = r->dst_device;
  op->msg = *msg;
  *msg = NULL;
  cw__receive_bulk(c, h, op);
}

static void cw__handle_load(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  const Causeway__V1__LoadRequest* r = (const Causeway__V1__LoadRequest*)*msg;
  cw_op_t* op = cw__begin_exe(c, h, r->exe_id, msg);
  if (op) cw__receive_bulk(c, h, op);
}

// --- DOWNLOAD, AWAIT, COPY, EXPECT, DELETE -----------------------------------

// Common checks once a waited-on buffer left pending; false after replying.
static bool cw__op_buffer_usable(cw_op_t* op, cw_store_entry_t* e) {
  return cw__op_need_kind(op, e, CW_STORE_BUFFER, "buffer", "a buffer");
}

// op->pin's buffer is ready: its bytes in place when its memory allows (the
// pin moves to *out_pin, for the write to release), else a copy into
// op->staging is started (*out_pin NULL; the copy's event in *out_event).
static cw_status_t cw__fetch_pinned(cw_op_t* op, const void** out_bulk, cw_pin_t** out_pin,
                                    PJRT_Event** out_event) {
  *out_bulk = NULL;
  *out_pin = NULL;
  *out_event = NULL;
  const void* view = cw_pjrt_buffer_host_view(op->w->pjrt, op->pin->buffer, op->rank);
  if (view) {
    *out_bulk = view;
    *out_pin = op->pin;
    op->pin = NULL;
    return cw_ok_status();
  }
  op->staging = cw__staging_alloc(op->w, op->size);
  if (!op->staging) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes", op->size);
  }
  cw_status_t st = cw_pjrt_to_host(op->w->pjrt, op->pin->buffer, op->staging, (size_t)op->size,
                                   out_event);
  cw__unpin(op->pin);  // the copy holds the buffer itself
  op->pin = NULL;
  return st;
}

// Starts waiting for e's bytes: with e pinned (read in place once ready) on
// host-memory plugins, else copied into op->staging. op->size is set.
static cw_status_t cw__fetch_start(cw_op_t* op, cw_store_entry_t* e, PJRT_Event** out_event) {
  *out_event = NULL;
  PJRT_Buffer* b = (PJRT_Buffer*)e->handle;
  if (!op->size) return cw_pjrt_ready_event(op->w->pjrt, b, out_event);
  if (op->w->pjrt->host_memory) op->pin = cw__pin(op->w, b);
  if (op->pin) return cw_pjrt_ready_event(op->w->pjrt, b, out_event);
  op->staging = cw__staging_alloc(op->w, op->size);
  if (!op->staging) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes", op->size);
  }
  return cw_pjrt_to_host(op->w->pjrt, b, op->staging, (size_t)op->size, out_event);
}

static void cw__download_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    cw__op_fail(op, cw_status_annotate(status, "DOWNLOAD %" PRIu64, op->id));
    return;
  }
  const void* bulk = NULL;
  void (*bulk_free)(void*) = NULL;
  void* bulk_user = NULL;
  if (op->pin) {
    cw_pin_t* pin = NULL;
    PJRT_Event* ev = NULL;
    cw_status_t st = cw__fetch_pinned(op, &bulk, &pin, &ev);
    if (st) {
      cw__op_fail(op, cw_status_annotate(st, "DOWNLOAD %" PRIu64, op->id));
      return;
    }
    if (!pin) {
      cw__when_ready(w, ev, cw__download_done, op);  // copied after all
      return;
    }
    bulk_free = cw__unpin;
    bulk_user = pin;
  } else if (op->staging) {
    bulk = op->staging;
    cw__op_staging_ref(op, &bulk_free, &bulk_user);
  }
  Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
  info.buffer_id = op->id;
  info.dtype = (Causeway__V1__DType)op->dtype;
  info.dims = op->dims;
  info.n_dims = op->rank;
  info.device = op->device;
  info.size = op->size;
  w->downloads++;
  w->download_bytes += op->size;
  cw_worker_trace_record(w, op->skey, "download", "DOWNLOAD", op->device, op->trace_start_ns,
                         op->id, op->msg ? cw_seq_of_request(op->type, op->msg) : 0, op->size,
                         0, NULL);
  cw__send(op->conn, op->type, CW_FRAME_REPLY, op->request_id, &info.base, bulk, op->size,
           bulk_free, bulk_user);
  cw__op_free(op);
}

static void cw__download_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!cw__op_buffer_usable(op, e)) return;
  uint64_t size = 0;
  cw_status_t st = cw_array_extent(e->dtype, e->dims, e->rank, NULL, 0, &size);
  if (!st) st = cw__copy_dims(op, e->dims, e->rank);
  if (!st) {
    op->size = size;
    op->dtype = e->dtype;
    op->device = e->device;
  }
  PJRT_Event* ev = NULL;
  if (!st) st = cw__fetch_start(op, e, &ev);
  if (st) {
    cw__op_fail(op, cw_status_annotate(st, "DOWNLOAD %" PRIu64, op->id));
    return;
  }
  cw__when_ready(op->w, ev, cw__download_done, op);
}

static void cw__await_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    cw__op_fail(op, status);
    return;
  }
  cw_store_entry_t* e = op->src;  // held: still there if deleted meanwhile
  Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
  if (e) cw__fill_array_info(e, &info);
  info.buffer_id = op->id;
  cw__reply(op->conn, op->type, op->request_id, &info.base);
  cw__op_free(op);
}

static void cw__await_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (e && e->kind == CW_STORE_EXECUTABLE) {
    if (e->state == CW_STORE_ERROR) {
      cw__op_fail(op, cw_status_clone(e->error));
      return;
    }
    cw__await_done(op->w, op, cw_ok_status());
    return;
  }
  if (!cw__op_buffer_usable(op, e)) return;
  PJRT_Event* ev = NULL;
  cw_status_t st = cw_pjrt_ready_event(op->w->pjrt, (PJRT_Buffer*)e->handle, &ev);
  if (st) {
    cw__op_fail(op, st);
    return;
  }
  cw__when_ready(op->w, ev, cw__await_done, op);
}

static void cw__copy_cont(cw_op_t* op, cw_store_entry_t* src) {
  cw_worker_t* w = op->w;
  cw_store_entry_t* dst = cw__op_own_entry(op, op->dst_id);
  if (!dst) {
    cw__op_fail(op, cw_make_status(CW_CANCELLED, "buffer %" PRIu64 " was deleted", op->dst_id));
    return;
  }
  cw_status_t st = cw_ok_status();
  if (!src) {
    st = cw_make_status(CW_NOT_FOUND, "buffer %" PRIu64 " not found", op->id);
  } else if (src->kind != CW_STORE_BUFFER) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "object %" PRIu64 " is not a buffer", op->id);
  } else if (src->state == CW_STORE_ERROR) {
    st = cw_make_status(cw_status_code(src->error), "input %" PRIu64 " failed: %s", op->id,
                        cw_status_message(src->error));
  }
  PJRT_Buffer* out = NULL;
  if (!st) st = cw_pjrt_copy(w->pjrt, (PJRT_Buffer*)src->handle, op->dst_device, &out);
  if (!st) st = cw__entry_set_array(dst, src->dtype, src->dims, src->rank, op->dst_device);
  PJRT_Event* ev = NULL;
  if (!st) st = cw_pjrt_ready_event(w->pjrt, out, &ev);
  if (st) {
    cw_pjrt_buffer_destroy(w->pjrt, out);
    cw_store_set_error(w->store, dst, cw_status_clone(st));
    cw__op_fail(op, st);
    return;
  }
  cw_store_set_ready(w->store, dst, out);
  cw__when_ready(w, ev, cw__upload_ready, op);  // Ack(dst_id) when ready
}

static cw_op_t* cw__op_for_wait(cw_conn_t* c, const cw_frame_header_t* h, uint64_t id,
                                cw_op_fn cont) {
  cw_op_t* op = cw__op_create(c, h->type, h->request_id);
  if (!op) {
    cw__reply_error(c, h->type, h->request_id, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return NULL;
  }
  op->id = id;
  op->cont = cont;
  return op;
}

static void cw__handle_copy(cw_conn_t* c, const cw_frame_header_t* h,
                            const Causeway__V1__CopyRequest* r) {
  cw_status_t st = cw__check_device(c->w, r->dst_device);
  cw_store_entry_t* dst = NULL;
  if (!st) st = cw_store_insert(c->w->store, c->session->key, r->dst_id, CW_STORE_BUFFER, &dst);
  if (st) {
    cw__reply_error(c, h->type, h->request_id, cw_status_annotate(st, "COPY"));
    return;
  }
  cw_op_t* op = cw__op_for_wait(c, h, r->src_id, cw__copy_cont);
  if (!op) {
    cw_store_remove(c->w->store, dst);
    return;
  }
  op->dst_id = r->dst_id;
  op->serial = dst->serial;
  op->dst_device = r->dst_device;
  cw__op_start_wait(op);
}

static void cw__handle_expect(cw_conn_t* c, const cw_frame_header_t* h,
                              const Causeway__V1__ExpectRequest* r) {
  cw_store_entry_t* e = cw_store_lookup(c->w->store, c->session->key, r->buffer_id);
  cw_status_t st = cw_ok_status();
  if (e && !(e->from_put && e->kind == CW_STORE_BUFFER)) {
    st = cw_make_status(CW_ALREADY_EXISTS, "buffer %" PRIu64 " already exists", r->buffer_id);
  } else if (!e) {
    st = cw_store_insert(c->w->store, c->session->key, r->buffer_id, CW_STORE_BUFFER, &e);
    if (!st) e->awaits_put = true;
  }
  if (st) {
    cw__reply_error(c, h->type, h->request_id, cw_status_annotate(st, "EXPECT"));
    return;
  }
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = r->buffer_id;
  cw__reply(c, h->type, h->request_id, &ack.base);
}

static void cw__handle_delete(cw_conn_t* c, const cw_frame_header_t* h,
                              const Causeway__V1__DeleteRequest* r) {
  char missing[256];
  size_t used = 0;
  size_t num_missing = 0;
  missing[0] = 0;
  for (size_t i = 0; i < r->n_ids; ++i) {
    cw_store_entry_t* e = cw_store_lookup(c->w->store, c->session->key, r->ids[i]);
    if (e) {
      cw_store_remove(c->w->store, e);
      continue;
    }
    if (num_missing++ < 16 && used < sizeof(missing)) {
      int n = snprintf(missing + used, sizeof(missing) - used, "%s%" PRIu64, used ? ", " : "",
                       r->ids[i]);
      if (n > 0) used += (size_t)n;
    }
  }
  if (num_missing) {
    cw__reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_NOT_FOUND, "%zu unknown ids not deleted: %s%s", num_missing,
                                   missing, num_missing > 16 ? ", ..." : ""));
    return;
  }
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = r->n_ids ? r->ids[0] : 0;
  cw__reply(c, h->type, h->request_id, &ack.base);
}

// --- LAUNCH -------------------------------------------------------------------

static void cw__launch_free(cw_launch_t* l) {
  cw_store_t* store = l->conn->w->store;
  cw_store_entry_release(store, l->exe);
  for (size_t i = 0; l->inputs && i < l->num_devices * l->num_args; ++i) {
    cw_store_entry_release(store, l->inputs[i]);
  }
  free(l->inputs);
  cw_status_free(l->apply_error);
  if (l->req) protobuf_c_message_free_unpacked(&l->req->base, NULL);
  free(l->out_serials);
  cw_status_free(l->first_error);
  cw__conn_unref(l->conn);
  free(l);
}

// Deletes the ids of the arguments the client donated, on every device: the
// client treats them as gone from the moment it sent the launch, whether it
// runs or fails. PJRT keeps their storage alive while an execution that took
// or reads it runs.
void cw__drop_donated(cw_worker_t* w, uint64_t skey, const Causeway__V1__LaunchRequest* r) {
  for (size_t k = 0; k < r->n_donate; ++k) {
    for (size_t d = 0; d < r->n_args; ++d) {
      const Causeway__V1__IdList* args = r->args[d];
      if (r->donate[k] >= args->n_ids) continue;
      // Looked up each time: removing runs waiters, which may change the store.
      cw_store_entry_t* e = cw_store_lookup(w->store, skey, args->ids[r->donate[k]]);
      if (e && e->kind == CW_STORE_BUFFER) cw_store_remove(w->store, e);
    }
  }
}

static void cw__launch_drop_donated(cw_worker_t* w, cw_launch_t* l) {
  if (l->donated_dropped) return;
  l->donated_dropped = true;
  cw__drop_donated(w, l->skey, l->req);
}

// Puts every output still owned by this launch in error; replies with
// `status` (taken) and frees the launch.
void cw__launch_fail(cw_worker_t* w, cw_launch_t* l, cw_status_t status) {
  cw__launch_drop_donated(w, l);
  for (size_t d = 0; d < l->req->n_outputs && d < l->num_devices; ++d) {
    const Causeway__V1__IdList* outs = l->req->outputs[d];
    for (size_t o = 0; o < outs->n_ids; ++o) {
      // Deleted outputs still count while a request that uses them holds them.
      cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, outs->ids[o],
                                                   l->out_serials[d * l->num_outputs + o]);
      if (e && e->state == CW_STORE_PENDING) {
        cw_store_set_error(w->store, e, cw_status_clone(status));
      }
    }
  }
  cw__reply_error(l->conn, l->go_request ? CW_MSG_LAUNCH_GO : CW_MSG_LAUNCH, l->request_id,
                  status);
  cw__launch_free(l);
}

// A launch completed: resumes connections throttled by
// CW__MAX_LAUNCHES_IN_FLIGHT, oldest first, while there is room.
static void cw__launch_unthrottle(cw_worker_t* w) {
  while (w->launch_throttled && w->launches_in_flight < CW__MAX_LAUNCHES_IN_FLIGHT) {
    cw_conn_t* c = w->launch_throttled;
    w->launch_throttled = c->throttle_next;
    if (!w->launch_throttled) w->launch_throttled_tail = NULL;
    c->throttle_next = NULL;
    c->launch_waiting = false;
    cw__launch_pump(c);
    cw__conn_unref(c);
  }
}

void cw__launch_device_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_launch_t* l = user;
  if (status && !l->first_error) l->first_error = status;
  else cw_status_free(status);
  if (--l->events_left > 0) return;
  w->launches_in_flight--;
  if (l->first_error) {
    cw_status_t st = l->first_error;
    l->first_error = NULL;
    cw__launch_fail(w, l, st);
  } else {
    Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
    ack.id = l->req->exe_id;
    cw__reply(l->conn, l->go_request ? CW_MSG_LAUNCH_GO : CW_MSG_LAUNCH, l->request_id,
              &ack.base);
    cw__launch_free(l);
  }
  cw__launch_unthrottle(w);
}

// "f32[4,8]" into buf.
static void cw__format_shape(int dtype, const int64_t* dims, size_t rank, char* buf, size_t n) {
  static const char* const names[] = {"invalid", "pred", "s8",  "s16", "s32", "s64",
                                      "u8",      "u16",  "u32", "u64", "f16", "f32",
                                      "f64",     "bf16", "c64", "c128"};
  const char* name = (dtype >= 0 && (size_t)dtype < sizeof(names) / sizeof(names[0]))
                         ? names[dtype] : "?";
  size_t used = 0;
  int k = snprintf(buf, n, "%s[", name);
  if (k > 0) used = (size_t)k;
  for (size_t i = 0; i < rank && used < n; ++i) {
    k = snprintf(buf + used, n - used, "%s%" PRId64, i ? "," : "", dims[i]);
    if (k > 0) used += (size_t)k;
  }
  if (used < n) snprintf(buf + used, n - used, "]");
}

// Checks each argument's dtype and dims against the executable's parameter
// shapes: XLA's Execute compares only byte sizes, so f32[8,4] would pass for
// f32[4,8]. With an argument count that differs (or no known shapes), XLA's
// own check answers instead.
static cw_status_t cw__launch_check_args(cw_worker_t* w, cw_launch_t* l,
                                         const cw_store_entry_t* exe) {
  if (!exe->params_known || exe->num_params != l->num_args) return cw_ok_status();
  for (size_t d = 0; d < l->num_devices; ++d) {
    for (size_t a = 0; a < l->num_args; ++a) {
      const cw_store_shape_t* want = &exe->params[a];
      if (want->dtype < 0) continue;  // a type we cannot name: XLA checks it
      const cw_store_entry_t* e = l->inputs[d * l->num_args + a];
      bool same = e->dtype == want->dtype && e->rank == want->rank &&
                  (!e->rank || !memcmp(e->dims, want->dims, e->rank * sizeof(int64_t)));
      if (same) continue;
      char wbuf[160], gbuf[160], where[48] = "";
      cw__format_shape(want->dtype, want->dims, want->rank, wbuf, sizeof(wbuf));
      cw__format_shape(e->dtype, e->dims, e->rank, gbuf, sizeof(gbuf));
      if (l->num_devices > 1) snprintf(where, sizeof(where), "device %zu ", d);
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "launch of executable %" PRIu64 ": %sargument %zu: expected %s, got "
                            "%s (buffer %" PRIu64 ")",
                            exe->id, where, a, wbuf, gbuf, e->id);
    }
  }
  return cw_ok_status();
}

// All inputs and the executable are ready: execute. Takes `l`.
// PJRT's launch id: the island's stamp when the controller stamped the
// launch, since every worker of an island gets the same stamp and
// multi-process plugins match one execution's parts by launch id.
static int cw__launch_id(const Causeway__V1__LaunchRequest* r) {
  return (int)((r->sched_stamp ? r->sched_stamp : r->launch_id) & 0x7fffffff);
}

static void cw__launch_issue(cw_worker_t* w, cw_launch_t* l, cw_store_entry_t* exe) {
  size_t nd = l->num_devices, na = l->num_args, no = l->num_outputs;
  cw_status_t st = cw_ok_status();
  if (exe->num_devices != nd) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "executable %" PRIu64 " runs on %u devices, launch names %zu",
                        exe->id, exe->num_devices, nd);
  } else if (exe->num_outputs != no) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "executable %" PRIu64 " has %u outputs per device, launch names %zu",
                        exe->id, exe->num_outputs, no);
  } else {
    st = cw__launch_check_args(w, l, exe);
  }
  if (st) {
    cw__launch_fail(w, l, st);
    return;
  }
  PJRT_Buffer** args = calloc(nd * na + 1, sizeof(*args));
  PJRT_Buffer*** arg_lists = calloc(nd, sizeof(*arg_lists));
  PJRT_Buffer** outs = calloc(nd * no + 1, sizeof(*outs));
  PJRT_Buffer*** out_lists = calloc(nd, sizeof(*out_lists));
  PJRT_Event** events = calloc(nd, sizeof(*events));
  bool* donate = calloc(na + 1, sizeof(*donate));
  if (!args || !arg_lists || !outs || !out_lists || !events || !donate) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a launch");
  }
  for (size_t d = 0; !st && d < nd; ++d) {
    arg_lists[d] = args + d * na;
    out_lists[d] = outs + d * no;
    for (size_t a = 0; a < na; ++a) {
      cw_store_entry_t* e = l->inputs[d * na + a];  // held since the launch was applied
      args[d * na + a] = e ? (PJRT_Buffer*)e->handle : NULL;
    }
  }
  // PJRT takes a donated argument's memory where the program aliases the
  // parameter, unless a reader holds the buffer in place (pinned) or the
  // launch names it twice on a device; those are only deleted afterwards.
  for (size_t k = 0; !st && exe->params_known && k < l->req->n_donate; ++k) {
    uint32_t a = l->req->donate[k];
    if (a >= na || a >= exe->num_params || !exe->params[a].donated) continue;
    bool ok = true;
    for (size_t d = 0; ok && d < nd; ++d) {
      PJRT_Buffer* b = args[d * na + a];
      ok = b && !cw__pin_find(w, b);
      for (size_t o = 0; ok && o < na; ++o) ok = o == a || args[d * na + o] != b;
    }
    donate[a] = ok;
  }
  l->trace_start_ns = cw_time_now_ns();
  if (!st) {
    st = cw_pjrt_execute(w->pjrt, (PJRT_LoadedExecutable*)exe->handle, nd, na,
                         (PJRT_Buffer* const* const*)arg_lists, (PJRT_Buffer** const*)out_lists,
                         events, cw__launch_id(l->req), donate);
  }
  free(args);
  free(arg_lists);
  free(out_lists);
  free(donate);
  if (st) {
    free(outs);
    free(events);
    cw__launch_fail(w, l, st);
    return;
  }
  w->launches++;
  w->launches_in_flight++;  // until every device's event fires
  // Outputs exist now (PJRT tracks their readiness): attach them at once so
  // later launches can chain on them.
  for (size_t d = 0; d < nd; ++d) {
    for (size_t o = 0; o < no; ++o) {
      PJRT_Buffer* b = outs[d * no + o];
      // Deleted meanwhile, but held by a request that uses it: filled all the same.
      cw_store_entry_t* e = cw_store_lookup_serial(w->store, l->skey, l->req->outputs[d]->ids[o],
                                                   l->out_serials[d * no + o]);
      if (!e || e->state != CW_STORE_PENDING) {
        cw_pjrt_buffer_destroy(w->pjrt, b);  // deleted meanwhile
        continue;
      }
      int dtype = 0, device = -1;
      int64_t* dims = NULL;
      size_t rank = 0;
      cw_status_t ist = b ? cw_pjrt_buffer_info(w->pjrt, b, &dtype, &dims, &rank, &device)
                          : cw_make_status(CW_INTERNAL, "the plugin returned no output buffer");
      if (!ist) ist = cw__entry_set_array(e, dtype, dims, rank, device);
      free(dims);
      if (ist) {
        cw_pjrt_buffer_destroy(w->pjrt, b);
        cw_store_set_error(w->store, e, ist);
      } else {
        cw_store_set_ready(w->store, e, b);
      }
    }
  }
  free(outs);
  cw__launch_drop_donated(w, l);
  l->events_left = nd;
  for (size_t d = 0; d < nd; ++d) {
    cw_done_fn fn = cw__launch_device_done;
    void* user = l;
    cw_worker_trace_wrap_launch(w, l, d, &fn, &user);  // obs: when the session is traced
    cw__when_ready(w, events[d], fn, user);
  }
  free(events);
}

// Takes the head launch off the connection's queue.
static void cw__launch_pop(cw_conn_t* c) {
  cw_launch_t* l = c->launch_head;
  c->launch_head = l->next;
  if (!c->launch_head) c->launch_tail = NULL;
  l->next = NULL;
}

static void cw__launch_waiter(void* user) {
  cw_conn_t* c = user;
  c->launch_waiting = false;
  cw__launch_pump(c);
  cw__conn_unref(c);
}

// Issues this connection's launches in arrival order as their inputs become
// ready; registers one waiter for the head when it must wait.
void cw__launch_pump(cw_conn_t* c) {
  cw_worker_t* w = c->w;
  // A paused session's launches stay queued, in order (cw_worker_ops.c resumes).
  while (c->launch_head && !c->launch_waiting &&
         !(c->keeps_session && c->session && c->session->paused)) {
    cw_launch_t* l = c->launch_head;
    // Gang order: a stamped launch waits for its turn (cw_worker_sched.c).
    uint64_t stamp = cw_worker_stamp_of(c, CW_MSG_LAUNCH, &l->req->base);
    if (stamp && cw_worker_stamp_wait(c, stamp)) return;
    cw_store_entry_t* wait_on = NULL;
    cw_status_t st = cw_ok_status();
    // The entries retained when the launch was applied, whatever the ids name now.
    cw_store_entry_t* exe = l->exe;
    if (l->apply_error) {
      st = l->apply_error;
      l->apply_error = NULL;
    } else if (!exe) {
      st = cw_make_status(CW_NOT_FOUND, "executable %" PRIu64 " not found", l->req->exe_id);
    } else if (exe->kind != CW_STORE_EXECUTABLE) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "object %" PRIu64 " is not an executable",
                          l->req->exe_id);
    } else if (exe->state == CW_STORE_ERROR) {
      st = cw_make_status(cw_status_code(exe->error), "executable %" PRIu64 " failed: %s",
                          l->req->exe_id, cw_status_message(exe->error));
    } else if (exe->state == CW_STORE_PENDING) {
      wait_on = exe;
    }
    for (size_t d = 0; !st && !wait_on && d < l->num_devices; ++d) {
      for (size_t a = 0; !st && !wait_on && a < l->num_args; ++a) {
        uint64_t id = l->req->args[d]->ids[a];
        cw_store_entry_t* e = l->inputs[d * l->num_args + a];
        if (!e) {
          st = cw_make_status(CW_NOT_FOUND, "input %" PRIu64 " not found", id);
        } else if (e->kind != CW_STORE_BUFFER) {
          st = cw_make_status(CW_INVALID_ARGUMENT, "input %" PRIu64 " is not a buffer", id);
        } else if (e->state == CW_STORE_ERROR) {
          st = cw_make_status(cw_status_code(e->error), "input %" PRIu64 " failed: %s", id,
                              cw_status_message(e->error));
        } else if (e->state == CW_STORE_PENDING) {
          wait_on = e;
        }
      }
    }
    if (!st && wait_on) {
      st = cw_store_add_waiter(w->store, wait_on, cw__launch_waiter, c);
      if (!st) {
        c->launch_waiting = true;
        cw__conn_ref(c);
        return;
      }
    }
    if (!st && l->num_devices > 1 && w->launches_in_flight >= CW__MAX_LAUNCHES_IN_FLIGHT) {
      // A multi-device launch, ready, but PJRT has its fill (see
      // CW__MAX_LAUNCHES_IN_FLIGHT): wait for a launch to complete
      // (cw__launch_unthrottle). Single-device launches are never held: XLA
      // runs their dispatch on the calling thread, not on its pool.
      c->launch_waiting = true;
      cw__conn_ref(c);
      c->throttle_next = NULL;
      if (w->launch_throttled_tail) w->launch_throttled_tail->throttle_next = c;
      else w->launch_throttled = c;
      w->launch_throttled_tail = c;
      return;
    }
    // A part of an island's launch: ready at its turn; it answers so, and
    // holds the turn until the controller heard from every part
    // (cw__handle_launch_go). Nobody says go on a closed connection.
    bool part = stamp && l->req->prepare && !l->go;
    if (!st && part && c->closing) {
      st = cw_make_status(CW_CANCELLED, "%s closed before the controller said go", c->name);
    }
    if (!st && part) {
      if (!l->prepared) {
        l->prepared = true;
        cw_worker_stamp_hold(w, stamp);
        Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
        ack.id = l->req->exe_id;
        cw__reply(c, CW_MSG_LAUNCH, l->request_id, &ack.base);
      }
      c->launch_waiting = true;
      return;
    }
    if (l->prepared) cw_worker_stamp_hold(w, 0);
    cw__launch_pop(c);
    uint64_t sid = c->session ? c->session->id : 0;
    if (st) cw__launch_fail(w, l, st);
    else cw__launch_issue(w, l, exe);
    if (stamp) cw_worker_stamp_passed(w, stamp, sid);  // its turn is over
  }
}

// LAUNCH_GO: the controller's word on the prepared part at the head of this
// connection. Its completion (or the cancel) answers this request.
static void cw__handle_launch_go(cw_conn_t* c, const cw_frame_header_t* h,
                                 const Causeway__V1__LaunchGoRequest* r) {
  cw_worker_t* w = c->w;
  cw_launch_t* l = c->launch_head;
  cw_status_t st = cw_ok_status();
  if (c->role != CAUSEWAY__V1__ROLE__ROLE_CONTROLLER) {
    st = cw_make_status(CW_PERMISSION_DENIED, "LAUNCH_GO is for the controller (HELLO role "
                        "CONTROLLER)");
  } else if (!l || !l->prepared || l->req->sched_stamp != r->sched_stamp) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "no prepared launch with stamp %" PRIu64
                        " on this connection", r->sched_stamp);
  }
  if (st) {
    cw__reply_error(c, h->type, h->request_id, st);
    return;
  }
  l->request_id = h->request_id;
  l->go_request = true;
  c->launch_waiting = false;
  if (r->go) {
    l->go = true;  // the pump issues it now
  } else {
    cw_worker_stamp_hold(w, 0);
    cw__launch_pop(c);
    uint64_t sid = c->session ? c->session->id : 0;
    uint64_t stamp = l->req->sched_stamp;
    cw__launch_fail(w, l, cw_make_status(CW_CANCELLED, "launch of executable %" PRIu64
                                         " (stamp %" PRIu64 ") cancelled: %s",
                                         l->req->exe_id, stamp, r->reason ? r->reason : ""));
    cw_worker_stamp_passed(w, stamp, sid);
  }
  cw__launch_pump(c);
}

static void cw__handle_launch(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  cw_worker_t* w = c->w;
  Causeway__V1__LaunchRequest* r = (Causeway__V1__LaunchRequest*)*msg;
  cw_status_t st = cw_ok_status();
  size_t nd = r->n_outputs;
  if (nd == 0 || r->n_args != nd) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "launch names %zu argument lists and %zu output lists",
                        r->n_args, r->n_outputs);
  } else if (nd > w->pjrt->num_devices) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "launch names %zu devices; this worker has %zu", nd,
                        w->pjrt->num_devices);
  }
  size_t na = nd ? r->args[0]->n_ids : 0, no = nd ? r->outputs[0]->n_ids : 0;
  for (size_t d = 0; !st && d < nd; ++d) {
    if (r->args[d]->n_ids != na || r->outputs[d]->n_ids != no) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "device %zu has %zu arguments and %zu outputs; device 0 has %zu and %zu",
                          d, r->args[d]->n_ids, r->outputs[d]->n_ids, na, no);
    }
  }
  for (size_t k = 0; !st && k < r->n_donate; ++k) {
    if (r->donate[k] >= na) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "launch donates argument %u of %zu", r->donate[k],
                          na);
    }
  }
  cw_launch_t* l = NULL;
  if (!st) {
    l = calloc(1, sizeof(*l));
    if (l) l->out_serials = calloc(nd * no + 1, sizeof(uint64_t));
    if (!l || !l->out_serials) {
      if (l) free(l);
      l = NULL;
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  // Outputs are pending at once, so later requests may name them.
  size_t inserted = 0;
  for (size_t d = 0; !st && d < nd; ++d) {
    for (size_t o = 0; !st && o < no; ++o) {
      cw_store_entry_t* e = NULL;
      st = cw_store_insert(w->store, c->session->key, r->outputs[d]->ids[o], CW_STORE_BUFFER, &e);
      if (!st) {
        l->out_serials[d * no + o] = e->serial;
        inserted++;
      }
    }
  }
  if (st) {
    for (size_t i = 0; l && i < inserted; ++i) {
      cw_store_entry_t* e = cw_store_lookup(w->store, c->session->key, r->outputs[i / no]->ids[i % no]);
      if (e && e->serial == l->out_serials[i]) cw_store_remove(w->store, e);
    }
    if (l) {
      free(l->out_serials);
      free(l);
    }
    cw__drop_donated(w, c->session->key, r);  // the client already let them go
    cw_worker_stamp_drop(c, h->type, &r->base);  // its turn passes
    cw__reply_error(c, h->type, h->request_id, cw_status_annotate(st, "LAUNCH"));
    return;
  }
  l->conn = c;
  cw__conn_ref(c);
  l->request_id = h->request_id;
  l->skey = c->session->key;
  l->req = r;
  *msg = NULL;
  l->num_devices = nd;
  l->num_args = na;
  l->num_outputs = no;
  // Take the executable and inputs now, as the launch is applied in program
  // order: they stay the launch's while it waits, even if a later DELETE
  // removes their ids. A missing one is reported by the pump, in order.
  l->exe = cw_store_lookup(w->store, l->skey, r->exe_id);
  if (l->exe) cw_store_entry_retain(l->exe);
  l->inputs = calloc(nd * na + 1, sizeof(*l->inputs));
  if (!l->inputs) {
    l->apply_error = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a launch");
  }
  for (size_t d = 0; l->inputs && d < nd; ++d) {
    for (size_t a = 0; a < na; ++a) {
      cw_store_entry_t* e = cw_store_lookup(w->store, l->skey, r->args[d]->ids[a]);
      if (e) cw_store_entry_retain(e);
      l->inputs[d * na + a] = e;
    }
  }
  if (c->launch_tail) c->launch_tail->next = l;
  else c->launch_head = l;
  c->launch_tail = l;
  cw__launch_pump(c);
}

// --- Outbound peer connections and SEND --------------------------------------

static void cw__fail_outreqs(cw_conn_t* c, cw_status_t status) {
  while (c->outreqs) {
    cw_outreq_t* r = c->outreqs;
    c->outreqs = r->next;
    r->fn(c, r->op, cw_status_clone(status));
    free(r);
  }
  cw_status_free(status);
}

static cw_status_t cw__outreq_add(cw_conn_t* c, cw_outreq_fn fn, cw_op_t* op,
                                  uint64_t* out_request_id) {
  // A closing connection has already failed its queue: nothing added now
  // would ever be answered.
  if (c->closing) {
    return cw_make_status(CW_UNAVAILABLE, "connection to %s is closed", c->name);
  }
  cw_outreq_t* r = calloc(1, sizeof(*r));
  if (!r) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  r->request_id = c->next_request_id++;
  r->fn = fn;
  r->op = op;
  // Append: replies mostly come in order.
  cw_outreq_t** pp = &c->outreqs;
  while (*pp) pp = &(*pp)->next;
  *pp = r;
  *out_request_id = r->request_id;
  return cw_ok_status();
}

static void cw__outbound_reply(cw_conn_t* c, const cw_frame_header_t* h,
                               const ProtobufCMessage* msg) {
  cw_outreq_t** pp = &c->outreqs;
  while (*pp && (*pp)->request_id != h->request_id) pp = &(*pp)->next;
  cw_outreq_t* r = *pp;
  if (!r) {
    CW_LOGW("%s: reply to unknown request %" PRIu64 "; closing", c->name, h->request_id);
    cw__conn_close(c);
    return;
  }
  *pp = r->next;
  cw_status_t st = cw_ok_status();
  if (h->flags & CW_FRAME_ERROR) {
    st = cw_error_reply_to_status((const Causeway__V1__ErrorReply*)msg, NULL);
  }
  r->fn(c, r->op, st);
  free(r);
}

static void cw__peer_hello_done(cw_conn_t* c, cw_op_t* op, cw_status_t status) {
  if (!status) {
    c->hello_done = true;
    return;
  }
  if (c->closing) {
    cw_status_free(status);
    return;
  }
  // A connected peer that refuses HELLO fails everything queued behind it;
  // a failed connect already names the peer.
  if (c->connected) {
    CW_LOGW("peer %s refused HELLO: %s", c->name, cw_status_message(status));
    status = cw_status_annotate(status, "peer %s refused HELLO", c->name);
  }
  cw__fail_outreqs(c, status);
  cw__conn_close(c);
}

static void cw__peer_connected(uv_connect_t* req, int status) {
  cw_conn_t* c = req->data;
  if (!c->closing) uv_timer_stop(&c->timer);
  if (status < 0) {
    if (!c->closing) {
      cw__fail_outreqs(c, cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s",
                                         c->peer_address, uv_strerror(status)));
      cw__conn_close(c);
    }
  } else if (!c->closing) {
    c->connected = true;
    cw__conn_start_reading(c);
  }
  cw__conn_unref(c);
}

static void cw__peer_connect_timeout(uv_timer_t* t) {
  cw_conn_t* c = t->data;
  if (c->closing || c->connected) return;
  cw__fail_outreqs(c, cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: connect timed out",
                                     c->peer_address));
  cw__conn_close(c);
}

// host:port (numeric, [v6]:port or a resolvable name) -> sockaddr.
static cw_status_t cw__parse_host_port(const char* address, struct sockaddr_storage* out) {
  memset(out, 0, sizeof(*out));
  const char* colon = strrchr(address, ':');
  if (!colon || colon == address || !colon[1]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "address '%s' is not host:port or a socket path",
                          address);
  }
  char host[256];
  size_t hl = (size_t)(colon - address);
  if (hl >= sizeof(host)) return cw_make_status(CW_INVALID_ARGUMENT, "host name too long");
  memcpy(host, address, hl);
  host[hl] = 0;
  char* h = host;
  if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
    h[hl - 1] = 0;
    h++;
  }
  char* end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!end || *end || port < 0 || port > 65535) {
    return cw_make_status(CW_INVALID_ARGUMENT, "bad port in '%s'", address);
  }
  if (uv_ip4_addr(h, (int)port, (struct sockaddr_in*)out) == 0) return cw_ok_status();
  if (uv_ip6_addr(h, (int)port, (struct sockaddr_in6*)out) == 0) return cw_ok_status();
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(h, NULL, &hints, &res);
  if (rc || !res) {
    return cw_make_status(CW_UNAVAILABLE, "cannot resolve '%s': %s", h, gai_strerror(rc));
  }
  memcpy(out, res->ai_addr, res->ai_addrlen);
  if (out->ss_family == AF_INET) ((struct sockaddr_in*)out)->sin_port = htons((uint16_t)port);
  else ((struct sockaddr_in6*)out)->sin6_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return cw_ok_status();
}

// The cached connection to `address` for `dst_session`, connecting (and
// sending HELLO) if there is none.
static cw_status_t cw__peer_get(cw_worker_t* w, const char* address, uint64_t dst_session,
                                cw_conn_t** out) {
  *out = NULL;
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    if (c->outbound && !c->closing && !c->is_controller && c->dst_session == dst_session &&
        !strcmp(c->peer_address, address)) {
      *out = c;
      return cw_ok_status();
    }
  }
  bool pipe = strchr(address, '/') != NULL;
  struct sockaddr_storage sa;
  if (!pipe) CW_RETURN_IF_ERROR(cw__parse_host_port(address, &sa), "peer %s", address);
  cw_conn_t* c = cw__conn_create(w, true, pipe);
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a peer connection");
  c->peer_address = strdup(address);
  c->dst_session = dst_session;
  snprintf(c->name, sizeof(c->name), "%s", address);
  c->peer_stat = cw__peer_stat_index(w, address);
  if (!c->peer_address) {
    cw__conn_close(c);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  c->connect_req.data = c;
  cw__conn_ref(c);  // held by the connect request
  if (pipe) {
    uv_pipe_connect(&c->connect_req, &c->h.pipe, address, cw__peer_connected);
  } else {
    int rc = uv_tcp_connect(&c->connect_req, &c->h.tcp, (const struct sockaddr*)&sa,
                            cw__peer_connected);
    if (rc < 0) {
      cw__conn_unref(c);
      cw__conn_close(c);
      return cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s", address, uv_strerror(rc));
    }
  }
  uv_timer_start(&c->timer, cw__peer_connect_timeout,
                 (uint64_t)cw_settings_int(w->settings, CW_SET_CONNECT_TIMEOUT_MS), 0);
  // HELLO goes out at once; libuv holds writes until the connect completes.
  Causeway__V1__HelloRequest hello;
  cw_hello_request_fill(&hello, CAUSEWAY__V1__ROLE__ROLE_WORKER, w->token, dst_session, w->name);
  uint64_t rid = 0;
  cw_status_t st = cw__outreq_add(c, cw__peer_hello_done, NULL, &rid);
  if (st) {
    cw__conn_close(c);
    return st;
  }
  cw__send(c, CW_MSG_HELLO, 0, rid, &hello.base, NULL, 0, NULL, NULL);
  if (c->closing) {
    // The write failed at once (libuv reports a pipe connect that failed
    // immediately as EPIPE on the first write) and closed the connection.
    return cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s", address,
                          c->last_error ? uv_strerror(c->last_error) : "connection closed");
  }
  *out = c;
  return cw_ok_status();
}

static void cw__send_put_done(cw_conn_t* peer, cw_op_t* op, cw_status_t status) {
  if (status) {
    cw__op_fail(op, cw_status_annotate(status, "SEND %" PRIu64 " to %s", op->id, op->peer_address));
    return;
  }
  if (op->status) {
    // The source had failed: the peer now holds the error too.
    cw_status_t st = op->status;
    op->status = NULL;
    cw__op_fail(op, st);
    return;
  }
  op->w->sends++;
  op->w->send_bytes += op->size;
  cw_worker_trace_record(op->w, op->skey, "send", "SEND", op->device, op->trace_start_ns, op->id,
                         op->msg ? cw_seq_of_request(op->type, op->msg) : 0, op->size, 0,
                         op->peer_address);
  cw__op_ack(op, op->dst_id);
}

// Sends op's bytes (or op->status as a poisoned PUT) to the peer.
static void cw__send_put(cw_op_t* op) {
  cw_conn_t* peer = NULL;
  cw_status_t st = cw__peer_get(op->w, op->peer_address, op->dst_session, &peer);
  uint64_t rid = 0;
  if (!st) st = cw__outreq_add(peer, cw__send_put_done, op, &rid);
  if (st) {
    cw__op_fail(op, cw_status_annotate(st, "SEND %" PRIu64, op->id));
    return;
  }
  Causeway__V1__PutRequest put = CAUSEWAY__V1__PUT_REQUEST__INIT;
  Causeway__V1__ErrorReply er;
  put.dst_id = op->dst_id;
  put.dst_session = op->dst_session;
  put.dst_device = op->dst_device;
  put.dtype = (Causeway__V1__DType)op->dtype;
  put.dims = op->dims;
  put.n_dims = op->rank;
  const void* bulk = NULL;
  uint64_t size = 0;
  void (*bulk_free)(void*) = NULL;
  void* bulk_user = NULL;
  if (op->status) {
    cw_error_reply_fill(&er, op->status);
    put.error = &er;
  } else if (op->pin && op->view) {
    // Straight from the source's device memory, pinned until written.
    bulk = op->view;
    size = op->size;
    bulk_free = cw__unpin;
    bulk_user = op->pin;
    op->pin = NULL;
    op->view = NULL;
  } else if (op->staging) {
    bulk = op->staging;
    size = op->size;
    cw__op_staging_ref(op, &bulk_free, &bulk_user);
  }
  // The outreq owns op from here; the write owns the bytes.
  cw__send(peer, CW_MSG_PUT, 0, rid, &put.base, bulk, size, bulk_free, bulk_user);
}

static void cw__send_fetched(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    op->status = status;  // the source failed: poison the peer's copy
  } else if (op->pin && !op->view) {
    const void* view = NULL;
    cw_pin_t* pin = NULL;
    PJRT_Event* ev = NULL;
    cw_status_t st = cw__fetch_pinned(op, &view, &pin, &ev);
    if (st) {
      cw__op_fail(op, cw_status_annotate(st, "SEND %" PRIu64, op->id));
      return;
    }
    if (!pin) {
      cw__when_ready(w, ev, cw__send_fetched, op);  // copied after all
      return;
    }
    op->pin = pin;
    op->view = view;
  }
  cw__send_put(op);
}

static void cw__send_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!e || e->kind != CW_STORE_BUFFER) {
    cw__op_fail(op, cw_make_status(CW_NOT_FOUND, "buffer %" PRIu64 " not found", op->id));
    return;
  }
  cw_status_t st = cw__copy_dims(op, e->dims, e->rank);
  if (st) {
    cw__op_fail(op, st);
    return;
  }
  op->dtype = e->dtype;
  if (e->state == CW_STORE_ERROR) {
    op->status = cw_status_clone(e->error);
    cw__send_put(op);
    return;
  }
  st = cw_array_extent(e->dtype, e->dims, e->rank, NULL, 0, &op->size);
  PJRT_Event* ev = NULL;
  if (!st) st = cw__fetch_start(op, e, &ev);
  if (st) {
    cw__op_fail(op, cw_status_annotate(st, "SEND %" PRIu64, op->id));
    return;
  }
  cw__when_ready(op->w, ev, cw__send_fetched, op);
}

static void cw__handle_send(cw_conn_t* c, const cw_frame_header_t* h,
                            const Causeway__V1__SendRequest* r) {
  if (!r->peer_address || !r->peer_address[0] || strlen(r->peer_address) > 200 || !r->dst_id) {
    cw__reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_INVALID_ARGUMENT, "SEND needs a peer address and dst_id"));
    return;
  }
  cw_op_t* op = cw__op_for_wait(c, h, r->src_id, cw__send_cont);
  if (!op) return;
  op->peer_address = strdup(r->peer_address);
  if (!op->peer_address) {
    cw__op_fail(op, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  op->dst_id = r->dst_id;
  op->dst_device = r->dst_device;
  op->dst_session = r->dst_session;
  cw__op_start_wait(op);
}

// --- EXE_INFO -------------------------------------------------------------------

static void cw__exe_info_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!cw__op_need_executable(op, e)) return;
  Causeway__V1__ExecutableInfo info;
  cw_status_t st = cw_pjrt_exe_info_initialize(op->w->pjrt, (PJRT_LoadedExecutable*)e->handle,
                                               &info);
  if (st) {
    cw_pjrt_exe_info_deinitialize(&info);
    cw__op_fail(op, cw_status_annotate(st, "EXE_INFO %" PRIu64, op->id));
    return;
  }
  info.exe_id = op->id;
  cw__reply(op->conn, op->type, op->request_id, &info.base);
  cw_pjrt_exe_info_deinitialize(&info);
  cw__op_free(op);
}

// --- Ordering across connections (seq) ---------------------------------------------

static void cw__seq_release_conn(void* conn, cw_seq_held_t* held) {
  cw_conn_t* c = conn;
  c->seq_held--;
  cw_worker_stamp_drop(c, held->header.type, held->msg);  // never applied: its turn passes
  if (c->recv_held == held) {
    // Its bytes still arrive: discard them.
    c->recv_held = NULL;
    cw_conn_parser_set_bulk_dest(&c->parser, NULL);
  }
  cw__conn_unref(c);
}

// Flow control. A session holds at most its caps' worth of requests (plus one
// per connection): a connection that adds a held request while the session is
// at a cap stops being read (cw__seq_block, at a frame boundary: never while
// a held UPLOAD's bytes arrive) until draining makes room, or until none of its
// own requests are held (cw__seq_unblock). Each sender's seq increases per
// connection, so the request whose turn has come is on a connection with none
// held, which is read: no deadlock. cw_seq_admit's hard limits (twice the
// caps) are only reached by a peer that breaks that rule; it is disconnected.
static bool cw__seq_at_cap(cw_worker_t* w, const cw_seq_t* q) {
  int64_t max_bytes = cw_settings_int(w->settings, CW_SET_MAX_HELD_BYTES);
  return (int64_t)q->held_count >= cw_settings_int(w->settings, CW_SET_MAX_HELD_REQUESTS) ||
         (q->held_bytes > 0 && q->held_bytes >= (uint64_t)max_bytes);
}

static void cw__seq_block(cw_conn_t* c) {
  if (c->closing || c->seq_blocked || !c->session || c->seq_held == 0 || c->recv_held ||
      !cw__seq_at_cap(c->w, &c->session->seq)) {
    return;
  }
  c->seq_blocked = true;
  c->session->seq.blocked++;
  if (c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  }
  CW_LOGD("%s: not read: %zu requests (%" PRIu64 " bytes) wait for seq %" PRIu64, c->name,
          c->session->seq.held_count, c->session->seq.held_bytes, c->session->seq.next);
}

static void cw__seq_unblock(cw_worker_t* w, cw_session_t* s) {
  if (!s->seq.blocked) return;
  bool at_cap = cw__seq_at_cap(w, &s->seq);
  for (cw_conn_t* c = w->conns; c; c = c->next) {
    if (!c->seq_blocked || c->session != s || (at_cap && c->seq_held > 0)) continue;
    c->seq_blocked = false;
    s->seq.blocked--;
    if (!c->paused) {  // read again from the idle phase (no re-entry here)
      c->paused = true;
      cw__conn_ref(c);
      c->resume_next = w->resume_list;
      w->resume_list = c;
      uv_idle_start(&w->idle, cw__on_idle);
    }
  }
}

// Applies the held requests of session `key` whose turn has come, in seq order.
static void cw__seq_drain(cw_worker_t* w, uint64_t key) {
  cw_session_t* s = w->sessions;
  while (s && s->key != key) s = s->next;
  if (!s || s->seq.draining) return;
  s->seq.draining = true;
  cw_seq_held_t* hd;
  while ((hd = cw_seq_take_ready(&s->seq)) != NULL) {
    cw_conn_t* c = hd->conn;
    c->seq_held--;
    if (c->closing || c->session != s || hd->bulk_failed) {
      // Nobody is left to answer: its turn passes.
      CW_LOGI("%s: %s with seq %" PRIu64 " dropped: its connection closed", c->name,
              cw_msg_type_name(hd->header.type), hd->seq);
      cw_worker_stamp_drop(c, hd->header.type, hd->msg);
    } else {
      ProtobufCMessage* msg = hd->msg;
      hd->msg = NULL;
      c->seq_applying = hd;
      cw__conn_ref(c);
      cw__dispatch(c, &hd->header, msg);
      c->seq_applying = NULL;
      cw__conn_unref(c);
    }
    cw_seq_held_free(hd);
    cw__conn_unref(c);  // the held request's reference
    // Applying may have closed the session's last connection.
    cw_session_t* again = w->sessions;
    while (again && again != s) again = again->next;
    if (!again) return;
  }
  s->seq.draining = false;
  cw__seq_unblock(w, s);
}

// Orders a request that carries seq. Returns true when it was held or refused
// (msg taken, replied if refused); false to apply it now, with *out_drain_key
// set when held successors may follow it.
static bool cw__seq_gate(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg,
                         uint64_t* out_drain_key) {
  *out_drain_key = 0;
  // Worker (PUT) connections do not keep their session: they are unordered.
  if (c->seq_applying || !c->keeps_session || !c->session) return false;
  uint64_t seq = cw_seq_of_request(h->type, *msg);
  if (!seq) return false;
  cw_worker_t* w = c->w;
  cw_session_t* s = c->session;
  cw_seq_held_t* held = NULL;
  // Hard limits (flow control keeps a well-behaved session under the caps).
  cw_status_t st = cw_seq_admit(&s->seq, seq, h, msg, c,
                                2 * cw_settings_int(w->settings, CW_SET_MAX_HELD_REQUESTS) + 64,
                                2 * cw_settings_int(w->settings, CW_SET_MAX_HELD_BYTES), &held);
  if (st) {
    cw_worker_stamp_drop(c, h->type, *msg);  // refused: its turn passes
    protobuf_c_message_free_unpacked(*msg, NULL);
    *msg = NULL;
    if (cw_status_code(st) == CW_RESOURCE_EXHAUSTED) {
      // Its seq would never be filled: the session's order is broken.
      cw__violation(c, h->type, h->request_id,
                    cw_status_annotate(st, "this connection breaks seq order"));
    } else {
      cw__reply_error(c, h->type, h->request_id, st);
    }
    return true;  // bulk bytes, if any, are discarded
  }
  if (held) {
    CW_LOGD("%s: %s seq %" PRIu64 " held (next %" PRIu64 ")", c->name, cw_msg_type_name(h->type),
            seq, s->seq.next);
    cw__conn_ref(c);
    c->seq_held++;
    if (h->bulk_len) {
      c->recv_held = held;
      cw_conn_parser_set_bulk_dest(&c->parser, held->bulk);
    } else {
      cw__seq_block(c);
    }
    return true;
  }
  *out_drain_key = s->key;
  return false;
}

static void cw__seq_bulk_done(cw_conn_t* c) {
  cw_seq_held_t* hd = c->recv_held;
  c->recv_held = NULL;
  hd->bulk_ready = true;
  cw__seq_block(c);
  if (c->session) cw__seq_drain(c->w, c->session->key);
}

static void cw__controller_closed(cw_conn_t* c);

// A connection is closing (its session is still attached).
static void cw__seq_conn_closed(cw_conn_t* c) {
  if (c->seq_blocked) {
    c->seq_blocked = false;
    if (c->session) c->session->seq.blocked--;
  }
  if (c->recv_held) {
    c->recv_held->bulk_ready = true;
    c->recv_held->bulk_failed = true;
    c->recv_held = NULL;
    if (c->session) cw__seq_drain(c->w, c->session->key);
  }
  if (c->is_controller) cw__controller_closed(c);
}

// --- Controller: REGISTER, --exit-with-controller, --watch-fd ------------------------

static void cw__controller_closed(cw_conn_t* c) {
  cw_worker_t* w = c->w;
  if (w->controller != c) return;
  w->controller = NULL;
  if (w->shutting_down) return;
  if (cw_settings_int(w->settings, CW_SET_EXIT_WITH_CONTROLLER)) {
    CW_LOGW("lost the controller %s; exiting (--exit-with-controller)", c->name);
    cw_worker_stop(w);
    return;
  }
  cw_worker_health_controller_lost(w, c->name);
}

static void cw__register_done(cw_conn_t* c, cw_op_t* op, cw_status_t status) {
  if (status) {
    CW_LOGE("controller %s refused REGISTER: %s", c->name, cw_status_message(status));
    cw_status_free(status);
    if (!c->closing) cw__conn_close(c);  // --exit-with-controller applies
    return;
  }
  CW_LOGI("registered with the controller %s as %s (%s)", c->name, c->w->name,
          c->w->advertised_address);
  cw_worker_health_registered(c->w);
}

static cw_status_t cw__peer_get(cw_worker_t* w, const char* address, uint64_t dst_session,
                                cw_conn_t** out);

// Connects to the controller (HELLO role WORKER, as to a peer) and registers.
cw_status_t cw__controller_connect(cw_worker_t* w, const char* address) {
  cw_conn_t* c = NULL;
  CW_RETURN_IF_ERROR(cw__peer_get(w, address, 0, &c), "--controller %s", address);
  c->is_controller = true;
  w->controller = c;
  cw_worker_advertised_address(w->listen_address, w->advertised_address,
                               sizeof(w->advertised_address));
  w->inventory.worker_name = (char*)w->name;
  Causeway__V1__RegisterRequest req = CAUSEWAY__V1__REGISTER_REQUEST__INIT;
  req.worker_name = (char*)w->name;
  req.address = w->advertised_address;
  req.inventory = &w->inventory;
  req.island_name = (char*)cw_settings_string(w->settings, CW_SET_ISLAND);
  req.island_size = (uint32_t)cw_settings_int(w->settings, CW_SET_ISLAND_SIZE);
  if (req.island_name[0]) {
    int rank = 0;
    CW_RETURN_IF_ERROR(cw_pjrt_process_index(w->pjrt, &rank), "--island %s", req.island_name);
    if (rank < 0 || (uint32_t)rank >= req.island_size) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "--island %s: the plugin reports process index %d, outside "
                            "--island-size %u",
                            req.island_name, rank, req.island_size);
    }
    req.island_rank = (uint32_t)rank;
  }
  uint64_t rid = 0;
  cw_status_t st = cw__outreq_add(c, cw__register_done, NULL, &rid);
  if (st) {
    cw__conn_close(c);
    return st;
  }
  // No stamp of this registration can arrive before the controller has it.
  cw_worker_stamp_restart(w);
  // Queued behind HELLO; a refused HELLO fails it and closes.
  cw__send(c, CW_MSG_REGISTER, 0, rid, &req.base, NULL, 0, NULL, NULL);
  return cw_ok_status();
}

static void cw__on_watch_eof(void* user) {
  cw_worker_t* w = user;
  CW_LOGI("watch-fd reached EOF: the parent is gone");
  cw_worker_stop(w);
}

// --- Dispatch ------------------------------------------------------------------

static void cw__dispatch(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  if (h->flags & CW_FRAME_REPLY) {
    if (c->outbound) {
      cw__outbound_reply(c, h, msg);
    } else {
      cw__violation(c, h->type, h->request_id,
                    cw_make_status(CW_INVALID_ARGUMENT, "unexpected %s reply from a client",
                                   cw_msg_type_name(h->type)));
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  cw_status_t st = cw_ok_status();
  if (c->is_controller && h->type == CW_MSG_EVENT) {
    protobuf_c_message_free_unpacked(msg, NULL);  // cluster news: not for workers
    return;
  }
  if (c->outbound) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "peer sent a %s request on an outbound connection",
                        cw_msg_type_name(h->type));
  } else if (!c->hello_done && h->type != CW_MSG_HELLO) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "%s before HELLO", cw_msg_type_name(h->type));
  } else if (c->hello_done && h->type == CW_MSG_HELLO) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "second HELLO");
  } else {
    st = cw_conn_parser_check_bulk(h, msg);
  }
  if (st) {
    cw__violation(c, h->type, h->request_id, st);
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  bool needs_session = !(h->type == CW_MSG_HELLO || h->type == CW_MSG_PING ||
                         h->type == CW_MSG_INVENTORY || h->type == CW_MSG_STATS ||
                         h->type == CW_MSG_PUT);
  if (needs_session && !c->session) {
    cw__reply_error(c, h->type, h->request_id,
                    cw_make_status(CW_FAILED_PRECONDITION,
                                   "%s needs a session (this is a worker PUT connection)",
                                   cw_msg_type_name(h->type)));
    protobuf_c_message_free_unpacked(msg, NULL);
    return;  // bulk bytes, if any, are discarded
  }
  uint64_t seq_drain_key = 0;
  if (cw__seq_gate(c, h, &msg, &seq_drain_key)) return;  // held, or refused as a duplicate
  if (cw_worker_ops_refuse(c, h, &msg)) {  // draining: applied in order, refused
    if (seq_drain_key) cw__seq_drain(c->w, seq_drain_key);
    return;
  }
  switch (h->type) {
    case CW_MSG_HELLO:
      cw__handle_hello(c, h, (const Causeway__V1__HelloRequest*)msg);
      break;
    case CW_MSG_PING:
      cw__reply(c, h->type, h->request_id, msg);
      break;
    case CW_MSG_INVENTORY:
      cw__handle_inventory(c, h);
      break;
    case CW_MSG_COMPILE:
      cw__handle_compile(c, h, &msg);
      break;
    case CW_MSG_SERIALIZE: {
      cw_op_t* op = cw__op_for_wait(c, h, ((const Causeway__V1__SerializeRequest*)msg)->exe_id,
                                    cw__serialize_cont);
      if (op) cw__op_start_wait(op);
      break;
    }
    case CW_MSG_LOAD:
      cw__handle_load(c, h, &msg);
      break;
    case CW_MSG_UPLOAD:
      cw__handle_upload(c, h, &msg);
      break;
    case CW_MSG_LAUNCH:
      cw__handle_launch(c, h, &msg);
      break;
    case CW_MSG_LAUNCH_GO:
      cw__handle_launch_go(c, h, (const Causeway__V1__LaunchGoRequest*)msg);
      break;
    case CW_MSG_DOWNLOAD: {
      cw_op_t* op = cw__op_for_wait(c, h, ((const Causeway__V1__DownloadRequest*)msg)->buffer_id,
                                    cw__download_cont);
      if (op) cw__op_start_wait(op);
      break;
    }
    case CW_MSG_AWAIT: {
      cw_op_t* op = cw__op_for_wait(c, h, ((const Causeway__V1__AwaitRequest*)msg)->buffer_id,
                                    cw__await_cont);
      if (op) cw__op_start_wait(op);
      break;
    }
    case CW_MSG_COPY:
      cw__handle_copy(c, h, (const Causeway__V1__CopyRequest*)msg);
      break;
    case CW_MSG_SEND:
      cw__handle_send(c, h, (const Causeway__V1__SendRequest*)msg);
      break;
    case CW_MSG_PUT:
      cw__handle_put(c, h, &msg);
      break;
    case CW_MSG_EXPECT:
      cw__handle_expect(c, h, (const Causeway__V1__ExpectRequest*)msg);
      break;
    case CW_MSG_DELETE:
      cw__handle_delete(c, h, (const Causeway__V1__DeleteRequest*)msg);
      break;
    case CW_MSG_STATS:
      cw__handle_stats(c, h);
      break;
    case CW_MSG_TRACE_START:
      cw_worker_trace_handle_start(c, h, (const Causeway__V1__TraceStartRequest*)msg);
      break;
    case CW_MSG_TRACE_FETCH:
      cw_worker_trace_handle_fetch(c, h, (const Causeway__V1__TraceFetchRequest*)msg);
      break;
    case CW_MSG_ADMIN_HOLD:
    case CW_MSG_ADMIN_WORKER_DRAIN:
      cw_worker_ops_handle(c, h, msg);
      break;
    case CW_MSG_EXE_INFO: {
      // Waits for a pending COMPILE or LOAD.
      cw_op_t* op = cw__op_for_wait(c, h, ((const Causeway__V1__ExeInfoRequest*)msg)->exe_id,
                                    cw__exe_info_cont);
      if (op) cw__op_start_wait(op);
      break;
    }
    default:
      cw__violation(c, h->type, h->request_id,
                    cw_make_status(CW_UNIMPLEMENTED, "unknown request type %u", h->type));
      break;
  }
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
  if (seq_drain_key) cw__seq_drain(c->w, seq_drain_key);  // successors that waited for it
}

// --- Listening, signals, lifecycle -----------------------------------------------

static void cw__hello_timeout(uv_timer_t* t) {
  cw_conn_t* c = t->data;
  if (c->hello_done || c->closing) return;
  CW_LOGW("%s: no HELLO in time; closing", c->name);
  cw__conn_close(c);
}

static void cw__on_connection(uv_stream_t* server, int status) {
  cw_worker_t* w = server->data;
  if (status < 0) {
    CW_LOGW("accept failed: %s", uv_strerror(status));
    return;
  }
  cw_conn_t* c = cw__conn_create(w, false, w->is_pipe);
  if (!c) {
    CW_LOGE("out of memory accepting a connection");
    return;
  }
  if (uv_accept(server, &c->h.stream) < 0) {
    cw__conn_close(c);
    return;
  }
  uv_os_fd_t peer_fd = -1;
  if (uv_fileno(&c->h.handle, &peer_fd) != 0) peer_fd = -1;
  cw_net_describe_unix_peer(peer_fd, c->name, sizeof(c->name));
  if (!w->is_pipe) {
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr*)&sa, &len) == 0) {
      char ip[64] = "?";
      int port = 0;
      if (sa.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in*)&sa, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in*)&sa)->sin_port);
      } else if (sa.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6*)&sa, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6*)&sa)->sin6_port);
      }
      snprintf(c->name, sizeof(c->name), "%s:%d", ip, port);
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
  }
  if ((int64_t)w->inbound_connections > cw_settings_int(w->settings, CW_SET_MAX_CONNECTIONS)) {
    CW_LOGW("%s: too many connections; refusing", c->name);
    cw__conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, cw__hello_timeout,
                 (uint64_t)cw_settings_int(w->settings, CW_SET_HELLO_TIMEOUT_MS), 0);
  cw__conn_start_reading(c);
}

static void cw__maybe_finish_shutdown(cw_worker_t* w) {
  if (!w->shutting_down || !w->handles_open || w->outstanding > 0) return;
  w->handles_open = false;
  uv_close((uv_handle_t*)&w->async, NULL);
  uv_close((uv_handle_t*)&w->idle, NULL);
  cw__on_flush(&w->flush);  // drops the list's references
  uv_close((uv_handle_t*)&w->flush, NULL);
  uv_close((uv_handle_t*)&w->shutdown_timer, NULL);
}

static void cw__shutdown_timeout(uv_timer_t* t) {
  cw_worker_t* w = t->data;
  CW_LOGE("%zu PJRT operations still outstanding after %d ms; exiting without them",
          w->outstanding, CW__SHUTDOWN_GRACE_MS);
  w->outstanding = 0;
  w->leak_on_exit = true;
  cw__maybe_finish_shutdown(w);
}

void cw_worker_stop(cw_worker_t* w) {
  if (w->shutting_down) return;
  w->shutting_down = true;
  CW_LOGI("shutting down");
  if (w->listening) {
    uv_close(&w->listener.handle, NULL);
    w->listening = false;
    if (w->unix_path) unlink(w->unix_path);
  }
  uv_close((uv_handle_t*)&w->sigterm, NULL);
  uv_close((uv_handle_t*)&w->sigint, NULL);
  cw_net_watch_stop(&w->watch);
  cw_worker_health_stop(w);
  cw_worker_stamp_stop(w);  // launches waiting for their turn go now
  while (w->conns) cw__conn_close(w->conns);
  // Any session left (none should be) goes with its objects.
  while (w->sessions) {
    cw_session_t* s = w->sessions;
    w->sessions = s->next;
    cw_store_remove_session(w->store, s->key);
    cw_seq_deinitialize(&s->seq, cw__seq_release_conn);
    cw_worker_trace_free(s->trace);
    free(s);
  }
  cw_store_remove_session(w->store, 0);
  uv_timer_start(&w->shutdown_timer, cw__shutdown_timeout, CW__SHUTDOWN_GRACE_MS, 0);
  cw__maybe_finish_shutdown(w);
}

static void cw__on_signal(uv_signal_t* s, int signum) {
  cw_worker_t* w = s->data;
  CW_LOGI("signal %d", signum);
  cw_worker_stop(w);
}

static cw_status_t cw__listen(cw_worker_t* w, const char* address) {
  int rc;
  if (strchr(address, '/')) {
    w->is_pipe = true;
    struct stat sb;
    // A stale socket from an earlier run would make bind fail.
    if (stat(address, &sb) == 0 && S_ISSOCK(sb.st_mode)) unlink(address);
    rc = uv_pipe_init(&w->loop, &w->listener.pipe, 0);
    if (rc == 0) {
      w->listening = true;
      rc = uv_pipe_bind(&w->listener.pipe, address);
    }
    if (rc == 0) {
      w->unix_path = strdup(address);
      snprintf(w->listen_address, sizeof(w->listen_address), "%s", address);
    }
  } else {
    struct sockaddr_storage sa;
    CW_RETURN_IF_ERROR(cw__parse_host_port(address, &sa), "--listen");
    rc = uv_tcp_init(&w->loop, &w->listener.tcp);
    if (rc == 0) {
      w->listening = true;
      rc = uv_tcp_bind(&w->listener.tcp, (const struct sockaddr*)&sa, 0);
    }
    if (rc == 0) {
      struct sockaddr_storage bound;
      int len = sizeof(bound);
      rc = uv_tcp_getsockname(&w->listener.tcp, (struct sockaddr*)&bound, &len);
      int port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&bound)->sin6_port)
                                             : ntohs(((struct sockaddr_in*)&bound)->sin_port);
      const char* colon = strrchr(address, ':');
      snprintf(w->listen_address, sizeof(w->listen_address), "%.*s:%d",
               (int)(colon - address), address, port);
    }
  }
  w->listener.handle.data = w;
  if (rc == 0) rc = uv_listen(&w->listener.stream, 128, cw__on_connection);
  if (rc < 0) return cw_make_status(CW_UNAVAILABLE, "cannot listen on %s: %s", address, uv_strerror(rc));
  return cw_ok_status();
}

cw_status_t cw_worker_create(const cw_settings_t* settings, cw_worker_t** out) {
  *out = NULL;
  signal(SIGPIPE, SIG_IGN);
  cw_worker_t* w = calloc(1, sizeof(*w));
  if (!w) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  *out = w;  // released by cw_worker_release even on failure
  w->settings = settings;
  w->token = cw_settings_string(settings, CW_SET_TOKEN);
  w->prehello_limits.max_payload =
      (uint32_t)cw_settings_int(settings, CW_SET_PREHELLO_MAX_PAYLOAD);
  w->prehello_limits.max_bulk = 0;  // no bulk before HELLO
  w->limits.max_payload = (uint32_t)cw_settings_int(settings, CW_SET_MAX_PAYLOAD);
  w->limits.max_bulk = (uint64_t)cw_settings_int(settings, CW_SET_MAX_BULK);
  w->next_session_key = 1;
  pthread_mutex_init(&w->mu, NULL);
  causeway__v1__inventory__init(&w->inventory);
  int rc = uv_loop_init(&w->loop);
  if (rc < 0) return cw_make_status(CW_INTERNAL, "uv_loop_init: %s", uv_strerror(rc));
  w->loop_initialized = true;
  CW_RETURN_IF_ERROR(cw_pjrt_create(cw_settings_string(settings, CW_SET_PLUGIN),
                                    (int)cw_settings_int(settings, CW_SET_DEVICES), &w->pjrt),
                     "worker");
  CW_RETURN_IF_ERROR(cw_store_create(cw__release_handle, w, &w->store), "worker");
  CW_RETURN_IF_ERROR(cw_staging_create(
                         (uint64_t)cw_settings_int(settings, CW_SET_STAGING_CACHE_BYTES),
                         &w->staging),
                     "worker");
  CW_RETURN_IF_ERROR(cw_pjrt_inventory_initialize(w->pjrt, &w->inventory), "inventory");
  w->inventory_ready = true;
  uv_async_init(&w->loop, &w->async, cw__on_async);
  w->async.data = w;
  uv_idle_init(&w->loop, &w->idle);
  w->idle.data = w;
  uv_prepare_init(&w->loop, &w->flush);
  w->flush.data = w;
  uv_timer_init(&w->loop, &w->shutdown_timer);
  w->shutdown_timer.data = w;
  uv_unref((uv_handle_t*)&w->shutdown_timer);
  uv_signal_init(&w->loop, &w->sigterm);
  uv_signal_init(&w->loop, &w->sigint);
  w->sigterm.data = w->sigint.data = w;
  w->handles_open = true;
  cw_worker_health_start(w);
  uv_signal_start(&w->sigterm, cw__on_signal, SIGTERM);
  uv_signal_start(&w->sigint, cw__on_signal, SIGINT);
  CW_RETURN_IF_ERROR(cw__listen(w, cw_settings_string(settings, CW_SET_LISTEN)), "worker");
  const char* name = cw_settings_string(settings, CW_SET_WORKER_NAME);
  w->name = name[0] ? name : w->listen_address;
  printf("causeway-worker listening on %s\n", w->listen_address);
  fflush(stdout);
  CW_LOGI("worker %s: %zu devices, platform %s %s", w->name, w->pjrt->num_devices,
          w->inventory.platform_name, w->inventory.platform_version);
  int64_t watch_fd = cw_settings_int(settings, CW_SET_WATCH_FD);
  if (watch_fd >= 0) {
    CW_RETURN_IF_ERROR(cw_net_watch_start(&w->loop, (int)watch_fd, cw__on_watch_eof, w,
                                          &w->watch), "worker");
  }
  const char* controller = cw_settings_string(settings, CW_SET_CONTROLLER);
  if (controller[0]) CW_RETURN_IF_ERROR(cw__controller_connect(w, controller), "worker");
  return cw_ok_status();
}

cw_status_t cw_worker_run(cw_worker_t* w) {
  w->loop_thread = pthread_self();
  w->loop_thread_known = true;
  uv_run(&w->loop, UV_RUN_DEFAULT);
  return cw_ok_status();
}

void cw_worker_release(cw_worker_t* w) {
  if (!w) return;
  if (w->loop_initialized) {
    // Close whatever a failed start left open, then let the loop finish.
    if (!w->shutting_down && w->handles_open) cw_worker_stop(w);
    if (w->listening) {
      uv_close(&w->listener.handle, NULL);
      w->listening = false;
    }
    uv_run(&w->loop, UV_RUN_DEFAULT);
  }
  if (w->leak_on_exit) return;  // PJRT may still call into us
  cw_store_release(w->store);
  if (w->staging) {
    cw_staging_stats_t ss;
    cw_staging_stats(w->staging, &ss);
    CW_LOGI("staging cache: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " bytes kept",
            ss.hits, ss.misses, ss.cached_bytes);
  }
  cw_staging_release(w->staging);  // every block came back with its transfer
  if (w->inventory_ready) cw_pjrt_inventory_deinitialize(&w->inventory);
  cw_pjrt_release(w->pjrt);
  if (w->loop_initialized) uv_loop_close(&w->loop);
  for (size_t i = 0; i < w->num_peer_stats; ++i) free(w->peer_stats[i].name);
  free(w->peer_stats);
  cw_worker_stamp_free(w);
  free(w->unix_path);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
