// Host buffers: the bytes of arrays in flight between the IFRT client and
// the proxy, named by (session id, handle). HostBufferStore streams them in
// (loop thread) for MakeArrayFromHostBuffer, which may arrive first and
// waits; CopyToHostBuffer reads them from a worker (session thread) for
// HostBufferLookup, which usually arrives first (CopyToHostBuffer is
// answered once its read begins) and is parked until they are there.
// HostBufferReadFromDisk takes them from a file the client wrote.
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_proxy_internal.h"
#include "cw_time.h"

#define CW__STORE_METADATA "ifrt-proxy-grpc-host-buffer-store-metadata-bin"
#define CW__CHUNK (1u << 20)  // bytes per HostBufferLookup response message
// A lookup queues this much ahead of the socket, then waits for room: a
// buffer of any size goes out without a second copy of it in memory.
#define CW__AHEAD (8u << 20)
// Lookups waiting for buffers not there yet, all sessions together: each
// wake tries every one.
#define CW__MAX_PARKED_LOOKUPS 4096

typedef enum cw__op_e { CW__STORE = 1, CW__LOOKUP, CW__DELETE, CW__DISK } cw__op_t;

// The user of a host-buffer call.
typedef struct cw_proxy_lookup_s {
  cw_proxy_call_kind_t kind;  // CW_PROXY_CALL_HOST_BUFFER
  cw__op_t op;
  uint64_t session_id;
  uint64_t handle;
  bool have_request;
  cw_grpc_call_t* call;  // retained while parked
  struct cw_proxy_lookup_s* next;  // the proxy's parked lookups
  struct cw_proxy_lookup_s* prev;
  bool parked;
  cw_proxy_host_buffer_t* hb;  // the buffer a lookup under way reads (one of its readers)
  size_t off;                  // bytes of it sent so far
  struct cw_proxy_lookup_s* rnext;  // the proxy's lookups reading a buffer (hb set)
  struct cw_proxy_lookup_s* rprev;
} cw__hb_call_t;

// --- The budget ----------------------------------------------------------------------------
// Host-buffer bytes the proxy holds, all sessions together, are bounded by
// CAUSEWAY_PROXY_HOST_BUFFER_BUDGET, and each session's by half of it, so
// that one session cannot leave the others nothing. A read (a file, a
// worker's bytes) is charged its whole size before it begins: a sparse file
// costs its writer nothing. A store is charged as its bytes arrive, so one
// that never sends them holds nothing of the budget (two idle stores of half
// of it each had locked every other session out). A charge goes with the
// bytes: a host buffer, a read that will fill one, or the session thread
// that took one, until its request ends. The buffer cache is the proxy's
// own, not a client's: it is trimmed to what the budget has left instead.

// Charges `n` bytes to session `s` (any thread), or refuses.
static cw_status_t cw__charge(cw_proxy_t* p, cw_proxy_session_t* s, size_t n) {
  size_t budget = p->host_buffer_budget, share = budget / 2;
  pthread_mutex_lock(&p->budget_mu);
  size_t total = p->host_bytes, mine = s->host_bytes;
  bool share_fits = mine <= share && n <= share - mine;
  bool fits = total <= budget && n <= budget - total;
  if (share_fits && fits) {
    p->host_bytes += n;
    s->host_bytes += n;
    total += n;
  }
  pthread_mutex_unlock(&p->budget_mu);
  if (!share_fits) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "session %016llx holds %zu bytes of host "
                          "buffers; %zu more would pass its share, half of this proxy's budget "
                          "of %zu bytes (CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)",
                          (unsigned long long)s->id, mine, n, budget);
  }
  if (!fits) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "this proxy holds %zu bytes of host buffers "
                          "for all sessions; %zu more would pass its budget of %zu bytes "
                          "(CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)", total, n, budget);
  }
  cw_proxy_bytes_trim(budget - total);
  return cw_ok_status();
}

// Releases `n` bytes charged to session `s` (NULL: it has ended).
static void cw__release(cw_proxy_t* p, cw_proxy_session_t* s, size_t n) {
  if (!n) return;
  pthread_mutex_lock(&p->budget_mu);
  assert(p->host_bytes >= n && (!s || s->host_bytes >= n));
  p->host_bytes -= n;
  if (s) s->host_bytes -= n;
  pthread_mutex_unlock(&p->budget_mu);
}

void cw_proxy_host_buffer_release_taken(cw_proxy_session_t* s) {
  cw__release(s->proxy, s, s->taken);
  s->taken = 0;
}

// --- Host buffers ------------------------------------------------------------------------

// Frees `hb` of session `s` (NULL: ended) and its charge.
static void cw__hb_free(cw_proxy_t* p, cw_proxy_session_t* s, cw_proxy_host_buffer_t* hb) {
  if (!hb) return;
  cw__release(p, s, hb->charged);
  cw_status_free(hb->error);
  cw_proxy_bytes_free(hb->data);
  free(hb);
}

// Frees `hb`, or leaves it to its last reader (loop thread; the caller
// holds the session's lock or the session is gone).
static void cw__hb_drop(cw_proxy_t* p, cw_proxy_session_t* s, cw_proxy_host_buffer_t* hb) {
  if (!hb) return;
  if (hb->readers > 0) {
    hb->orphan = true;
    return;
  }
  cw__hb_free(p, s, hb);
}

static void cw__hb_free_each(void* user, uint64_t key, void* value) {
  cw_proxy_session_t* s = user;
  cw__hb_drop(s->proxy, s, value);
}

// One reader of `hb` is done (under s->mu, or `s` is gone): the last frees
// an orphan.
static void cw__hb_unread(cw_proxy_t* p, cw_proxy_session_t* s, cw_proxy_host_buffer_t* hb) {
  if (--hb->readers == 0 && hb->orphan) {
    cw__hb_free(p, s, hb);
    return;
  }
  if (s) pthread_cond_broadcast(&s->host_buffer_cv);
}

// Any thread: `hb` under `handle` in the session (taken on success).
static cw_status_t cw__hb_insert(cw_proxy_session_t* s, uint64_t handle,
                                 cw_proxy_host_buffer_t* hb) {
  pthread_mutex_lock(&s->mu);
  cw_status_t st = cw_proxy_table_put(&s->host_buffers, handle, hb);
  if (!st) pthread_cond_broadcast(&s->host_buffer_cv);  // a MakeArray that came first
  pthread_mutex_unlock(&s->mu);
  return st;
}

// Completes the host buffer under `handle` that `filler` fills, under s->mu:
// with *data (taken) and `len`, or failed with *st, which a kept buffer
// takes for its readers and one not kept is removed for. A kept buffer
// takes *charge too. False when the buffer is no longer that filler's
// (deleted meanwhile).
static bool cw__hb_fill(cw_proxy_session_t* s, uint64_t handle, const void* filler,
                        uint8_t** data, size_t len, size_t* charge, cw_status_t* st,
                        bool keep_failed) {
  cw_proxy_host_buffer_t* hb = cw_proxy_table_get(&s->host_buffers, handle);
  if (!hb || hb->filler != filler) return false;
  hb->filler = NULL;
  if (*st && !keep_failed) {
    cw_proxy_table_remove(&s->host_buffers, handle);
    cw__hb_drop(s->proxy, s, hb);  // (a reader frees it)
  } else {
    hb->charged += *charge;
    *charge = 0;
    if (*st) {
      hb->error = *st;
      *st = cw_ok_status();
    }
    // Failed too, the bytes go with the buffer: a lookup may still be
    // sending the ranges that landed, until it sees the error.
    hb->data = *data;
    *data = NULL;
    hb->len = hb->error ? 0 : len;
    hb->cap = hb->data ? len : 0;
    hb->partial = NULL;
    hb->complete = true;
  }
  pthread_cond_broadcast(&s->host_buffer_cv);
  return true;
}

// Loop thread: ends a call answered by one empty message, or by `st` (taken).
static void cw__finish_empty(cw_grpc_call_t* call, cw_status_t st) {
  uint8_t empty[1];
  if (!st) st = cw_grpc_call_send(call, empty, 0);
  cw_grpc_call_finish(call, st);
}

void cw_proxy_host_buffers_free(cw_proxy_session_t* s) {
  cw_proxy_table_each(&s->host_buffers, cw__hb_free_each, s);
  cw_proxy_table_deinitialize(&s->host_buffers);
}

// --- Session thread ------------------------------------------------------------------------

cw_status_t cw_proxy_host_buffer_take(cw_proxy_session_t* s, uint64_t handle, int timeout_ms,
                                      uint8_t** out_data, size_t* out_len) {
  struct timespec until = cw_time_deadline_ms(timeout_ms);
  pthread_mutex_lock(&s->mu);
  cw_proxy_host_buffer_t* hb;
  int rc = 0;
  // Complete and not being sent by a lookup: then it is this thread's.
  while (!(hb = cw_proxy_table_get(&s->host_buffers, handle)) || !hb->complete ||
         hb->readers > 0) {
    if (s->gone || rc == ETIMEDOUT) break;
    if (hb) {
      // Being stored (or read): it is coming, however long the upload takes;
      // a store that breaks off removes it and wakes this wait.
      pthread_cond_wait(&s->host_buffer_cv, &s->mu);
    } else {
      rc = pthread_cond_timedwait(&s->host_buffer_cv, &s->mu, &until);
    }
  }
  bool mine = hb && hb->complete && hb->readers == 0;
  if (mine) cw_proxy_table_remove(&s->host_buffers, handle);
  pthread_mutex_unlock(&s->mu);
  if (!mine) {
    return cw_make_status(CW_NOT_FOUND, "host buffer %llu %s", (unsigned long long)handle,
                          hb ? "was not stored in full in time" : "was never stored");
  }
  cw_status_t st = hb->error;  // a read back that failed
  hb->error = NULL;
  *out_data = st ? NULL : hb->data;
  *out_len = st ? 0 : hb->len;
  if (!st) {
    hb->data = NULL;
    s->taken += hb->charged;  // the bytes are the request's now
    hb->charged = 0;
  }
  cw__hb_free(s->proxy, s, hb);
  return st;
}

cw_status_t cw_proxy_host_buffer_expect(cw_proxy_session_t* s, uint64_t handle, size_t len) {
  assert(!s->download.pending);  // settled after every request
  CW_RETURN_IF_ERROR(cw__charge(s->proxy, s, len), "host buffer %llu",
                     (unsigned long long)handle);
  cw_proxy_host_buffer_t* hb = calloc(1, sizeof(*hb));
  // Only this session's thread downloads, one read at a time: the session
  // marks the buffer it fills.
  if (hb) *hb = (cw_proxy_host_buffer_t){.declared = len, .filler = s};
  cw_status_t st = hb ? cw__hb_insert(s, handle, hb)
                      : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (st) {
    free(hb);
    cw__release(s->proxy, s, len);
    return cw_status_annotate(st, "host buffer");
  }
  memset(&s->download, 0, sizeof(s->download));
  s->download.pending = true;
  s->download.handle = handle;
  s->download.len = len;
  s->download.charge = len;  // the host buffer's once it has the bytes
  return cw_ok_status();
}

// Asks for the next range; its event joins those in flight.
static cw_status_t cw__read_range(cw_proxy_session_t* s) {
  size_t n = s->download.len - s->download.issued;
  if (n > CW_PROXY_READ_RANGE) n = CW_PROXY_READ_RANGE;
  PJRT_Buffer_CopyRawToHost_Args a = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_CopyRawToHost_Args, event),
      .buffer = s->download.buffer,
      .dst = s->download.data + s->download.issued,
      .offset = (int64_t)s->download.issued,
      .transfer_size = (int64_t)n};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Buffer_CopyRawToHost, &a),
                     "bytes %zu to %zu", s->download.issued, s->download.issued + n);
  s->download.events[(s->download.head + s->download.ahead) % CW_PROXY_READS_AHEAD] = a.event;
  s->download.ahead++;
  s->download.issued += n;
  return cw_ok_status();
}

// Keeps CW_PROXY_READS_AHEAD ranges in flight until all are asked for; the
// first that cannot be is the download's error.
static void cw__read_ahead(cw_proxy_session_t* s) {
  while (!s->download.error && s->download.ahead < CW_PROXY_READS_AHEAD &&
         s->download.issued < s->download.len) {
    s->download.error = cw__read_range(s);
  }
}

cw_status_t cw_proxy_host_buffer_read(cw_proxy_session_t* s, PJRT_Buffer* buffer, bool ranged) {
  size_t len = s->download.len;
  if (!ranged || len <= CW_PROXY_READ_RANGE) {
    PJRT_Event* ev = NULL;
    CW_RETURN_IF_ERROR(cw_proxy_buffer_download_start(s, buffer, len, &s->download.data, &ev),
                       "download");
    s->download.events[0] = ev;
    s->download.ahead = 1;
    s->download.issued = len;
    s->download.started = true;
    return cw_ok_status();
  }
  s->download.data = cw_proxy_bytes_alloc(len);
  if (!s->download.data) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %zu bytes", len);
  }
  s->download.ranged = true;
  s->download.buffer = buffer;
  cw__read_ahead(s);
  if (!s->download.ahead) {  // not even the first range
    cw_status_t st = s->download.error;
    s->download.error = NULL;
    return st;
  }
  s->download.started = true;
  // Lookups may send what lands before the whole is in.
  pthread_mutex_lock(&s->mu);
  cw_proxy_host_buffer_t* hb = cw_proxy_table_get(&s->host_buffers, s->download.handle);
  if (hb && hb->filler == s) hb->partial = s->download.data;
  pthread_mutex_unlock(&s->mu);
  return cw_ok_status();
}

// Waits for the oldest read in flight: its bytes are in, or *st (if still
// OK) gets its error.
static void cw__read_landed(cw_proxy_session_t* s, cw_status_t* st) {
  PJRT_Event* ev = s->download.events[s->download.head];
  size_t n = s->download.len - s->download.landed;
  if (s->download.ranged && n > CW_PROXY_READ_RANGE) n = CW_PROXY_READ_RANGE;
  s->download.head = (s->download.head + 1) % CW_PROXY_READS_AHEAD;
  s->download.ahead--;
  cw_status_t est = cw_proxy_pjrt_await(&s->proxy->pjrt, ev, "the download");
  if (*st || est) {
    if (!*st) {
      *st = s->download.ranged
                ? cw_status_annotate(est, "bytes %zu to %zu", s->download.landed,
                                     s->download.landed + n)
                : est;
    } else {
      cw_status_free(est);
    }
    return;
  }
  s->download.landed += n;
  if (!s->download.ranged || s->download.landed == s->download.len) return;  // the fill tells
  pthread_mutex_lock(&s->mu);
  cw_proxy_host_buffer_t* hb = cw_proxy_table_get(&s->host_buffers, s->download.handle);
  if (hb && hb->filler == s) hb->filled = s->download.landed;
  pthread_mutex_unlock(&s->mu);
  uv_async_send(&s->proxy->wake);  // its lookup sends them
}

void cw_proxy_host_buffer_settle(cw_proxy_session_t* s) {
  if (!s->download.pending) return;
  // A read that never began leaves nothing to wait for, and no buffer.
  cw_status_t st = s->download.started
                       ? cw_ok_status()
                       : cw_make_status(CW_CANCELLED, "the read did not begin");
  // Every read in flight is waited for, failed or not: until then the
  // bytes are PJRT's to write.
  while (s->download.ahead) {
    cw__read_landed(s, &st);
    if (!st && s->download.ranged) {
      cw__read_ahead(s);
      if (s->download.error) {
        st = s->download.error;
        s->download.error = NULL;
      }
    }
  }
  cw_status_free(s->download.error);  // (one that came after the first failure)
  s->download.error = NULL;
  if (st && s->download.started) {
    st = cw_status_annotate(st, "reading host buffer %llu",
                            (unsigned long long)s->download.handle);
  }
  uint8_t* data = s->download.data;
  size_t charge = s->download.charge;
  pthread_mutex_lock(&s->mu);
  (void)cw__hb_fill(s, s->download.handle, s, &data, s->download.len, &charge, &st,
                    s->download.started);  // false: deleted meanwhile
  pthread_mutex_unlock(&s->mu);
  cw_status_free(st);
  cw_proxy_bytes_free(data);
  cw__release(s->proxy, s, charge);  // not the host buffer's: freed
  memset(&s->download, 0, sizeof(s->download));
  uv_async_send(&s->proxy->wake);  // its parked lookup
}

// One transfer manager per device a streamed upload goes to.
typedef struct cw__stream_s {
  const cw_proxy_pjrt_t* p;
  size_t n;
  PJRT_AsyncHostToDeviceTransferManager** managers;
  PJRT_Buffer** buffers;
  PJRT_Event** done;
} cw__stream_t;

static cw_status_t cw__stream_open(cw_proxy_session_t* s, cw__stream_t* t,
                                   PJRT_Memory* const* memories, size_t n, PJRT_Buffer_Type type,
                                   const int64_t* dims, size_t rank) {
  *t = (cw__stream_t){.p = &s->proxy->pjrt, .n = n,
                      .managers = calloc(n, sizeof(*t->managers)),
                      .buffers = calloc(n, sizeof(*t->buffers)),
                      .done = calloc(n, sizeof(*t->done))};
  if (!t->managers || !t->buffers || !t->done) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  PJRT_ShapeSpec spec = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_ShapeSpec, element_type),
                         .dims = dims, .num_dims = rank, .element_type = type};
  for (size_t i = 0; i < n; i++) {
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args c = {
        .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args,
                                           transfer_manager),
        .client = s->client, .shape_specs = &spec, .num_shape_specs = 1, .memory = memories[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(t->p, PJRT_Client_CreateBuffersForAsyncHostToDevice, &c),
                       "upload");
    t->managers[i] = c.transfer_manager;
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args rb = {
        .struct_size = CW_PJRT_STRUCT_SIZE(
            PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_out),
        .transfer_manager = c.transfer_manager};
    CW_RETURN_IF_ERROR(
        CW_PROXY_PJRT_CALL(t->p, PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer, &rb),
        "upload");
    t->buffers[i] = rb.buffer_out;
  }
  return cw_ok_status();
}

// Sends `len` bytes at `offset` to every device at once, then waits until
// each is done with them.
static cw_status_t cw__stream_send(cw__stream_t* t, const uint8_t* data, size_t offset,
                                   size_t len, bool last) {
  cw_status_t st = cw_ok_status();
  for (size_t i = 0; i < t->n && !st; i++) {
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args d = {
        .struct_size = CW_PJRT_STRUCT_SIZE(
            PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, done_with_h2d_transfer),
        .transfer_manager = t->managers[i], .buffer_index = 0, .data = data + offset,
        .offset = (int64_t)offset, .transfer_size = (int64_t)len, .is_last_transfer = last};
    st = CW_PROXY_PJRT_CALL(t->p, PJRT_AsyncHostToDeviceTransferManager_TransferData, &d);
    t->done[i] = d.done_with_h2d_transfer;
  }
  for (size_t i = 0; i < t->n; i++) {  // each sent one is waited for, whatever failed
    if (!t->done[i]) continue;
    cw_status_t w = cw_proxy_pjrt_await(t->p, t->done[i], "done with the host buffer");
    t->done[i] = NULL;
    if (st) cw_status_free(w);
    else st = w;
  }
  return st;
}

// Ends the transfers; the buffers go too unless `keep` (then out[] has them).
static void cw__stream_close(cw__stream_t* t, bool keep, PJRT_Buffer** out) {
  for (size_t i = 0; t->managers && i < t->n; i++) {
    if (!t->managers[i]) continue;
    PJRT_AsyncHostToDeviceTransferManager_Destroy_Args d = {
        .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args,
                                           transfer_manager),
        .transfer_manager = t->managers[i]};
    cw_status_t st = CW_PROXY_PJRT_CALL(t->p, PJRT_AsyncHostToDeviceTransferManager_Destroy, &d);
    if (st) CW_LOGW("%s", cw_status_message(st));
    cw_status_free(st);
  }
  for (size_t i = 0; t->buffers && i < t->n; i++) {
    if (keep) out[i] = t->buffers[i];
    else cw_proxy_pjrt_buffer_destroy(t->p, t->buffers[i]);
  }
  free(t->managers);
  free(t->buffers);
  free(t->done);
}

// Streams host buffer `handle` on to a new buffer on each of the `n`
// memories as its store brings it: UPLOADs in parts through PJRT's transfer
// manager. Each wait sends what came since the last. The host buffer is
// consumed as by take(). out[0] stays NULL, with OK, where it cannot stream
// (the buffer is complete, small, read by others, not `bytes` long, or not
// there within `timeout_ms`): take() then.
cw_status_t cw_proxy_host_buffer_stream(cw_proxy_session_t* s, uint64_t handle, size_t bytes,
                                        int timeout_ms, PJRT_Memory* const* memories, size_t n,
                                        PJRT_Buffer_Type type, const int64_t* dims, size_t rank,
                                        PJRT_Buffer** out) {
  out[0] = NULL;
  if (bytes < CW_PROXY_STREAM_MIN) return cw_ok_status();
  // The client starts the store and sends the MakeArray at once: the store
  // may not have begun yet.
  struct timespec until = cw_time_deadline_ms(timeout_ms);
  pthread_mutex_lock(&s->mu);
  cw_proxy_host_buffer_t* hb;
  int rc = 0;
  while (!(hb = cw_proxy_table_get(&s->host_buffers, handle)) && !s->gone && rc != ETIMEDOUT) {
    rc = pthread_cond_timedwait(&s->host_buffer_cv, &s->mu, &until);
  }
  // Only a store's bytes come bit by bit (a disk read's come at once).
  bool mine = hb && hb->storing && !hb->complete && !hb->readers && hb->declared == bytes;
  if (mine) hb->readers++;  // deleted meanwhile, it stays until this is done
  bool gone = s->gone;
  pthread_mutex_unlock(&s->mu);
  if (!hb && !gone) {
    return cw_make_status(CW_NOT_FOUND, "host buffer %llu was never stored",
                          (unsigned long long)handle);
  }
  if (!mine) return cw_ok_status();

  cw__stream_t t;
  cw_status_t st = cw__stream_open(s, &t, memories, n, type, dims, rank);
  size_t sent = 0;
  bool last = false;
  while (!st && !last) {
    // What the store has brought since, or its end.
    pthread_mutex_lock(&s->mu);
    while (!hb->orphan && !s->gone && !hb->complete &&
           !(hb->len - sent >= CW_PROXY_STREAM_PART && hb->cap == hb->declared)) {
      pthread_cond_wait(&s->host_buffer_cv, &s->mu);
    }
    bool ended = s->gone;
    bool cut = hb->orphan || ended || (hb->complete && hb->len != bytes);
    size_t have = hb->len;
    last = hb->complete;
    const uint8_t* data = hb->data;  // allocated whole: it never moves
    pthread_mutex_unlock(&s->mu);
    if (cut) {
      st = ended ? cw_make_status(CW_CANCELLED, "the session ended while host buffer %llu was "
                                  "stored", (unsigned long long)handle)
                 : cw_make_status(CW_NOT_FOUND, "host buffer %llu was not stored in full",
                                  (unsigned long long)handle);
      break;
    }
    st = cw__stream_send(&t, data, sent, have - sent, last);
    sent = have;
  }
  cw__stream_close(&t, !st, out);
  // Consumed, as take() would (unless deleted meanwhile): once no lookup
  // reads it, out of the table, freed by its last reader.
  pthread_mutex_lock(&s->mu);
  while (!st && !hb->orphan && hb->readers > 1 && !s->gone) {
    pthread_cond_wait(&s->host_buffer_cv, &s->mu);
  }
  if (!st && !hb->orphan) {
    cw_proxy_table_remove(&s->host_buffers, handle);
    hb->orphan = true;
  }
  cw__hb_unread(s->proxy, s, hb);
  pthread_mutex_unlock(&s->mu);
  return st;
}

// --- Loop thread: the gRPC methods --------------------------------------------------------

static cw_status_t cw__session_of(cw_proxy_t* p, uint64_t id, cw_proxy_session_t** out) {
  *out = cw_proxy_session_find(p, id);
  if (*out) return cw_ok_status();
  return cw_make_status(CW_NOT_FOUND, "no IFRT session %016llx on this proxy",
                        (unsigned long long)id);
}

cw_status_t cw_proxy_host_buffer_start(cw_proxy_t* p, cw_grpc_call_t* call, const char* method) {
  CW_LOGD("%s", method);
  cw__hb_call_t* c = calloc(1, sizeof(*c));
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  c->kind = CW_PROXY_CALL_HOST_BUFFER;
  if (!strcmp(method, "HostBufferLookup")) {
    c->op = CW__LOOKUP;
  } else if (!strcmp(method, "HostBufferDelete")) {
    c->op = CW__DELETE;
  } else if (!strcmp(method, "HostBufferStore")) {
    c->op = CW__STORE;
  } else if (!strcmp(method, "HostBufferReadFromDisk")) {
    c->op = CW__DISK;
  } else {
    free(c);
    return cw_make_status(CW_UNIMPLEMENTED, "causeway-proxy does not serve %s yet", method);
  }
  if (c->op == CW__STORE) {
    const uint8_t* md;
    size_t md_len;
    CwIfrt__HostBufferStoreMetadata* m =
        cw_grpc_call_metadata(call, CW__STORE_METADATA, &md, &md_len)
            ? cw_ifrt__host_buffer_store_metadata__unpack(NULL, md_len, md)
            : NULL;
    if (!m || m->buffer_size < 0) {
      if (m) cw_ifrt__host_buffer_store_metadata__free_unpacked(m, NULL);
      free(c);
      return cw_make_status(CW_INVALID_ARGUMENT, "HostBufferStore: metadata %s is missing or "
                            "does not decode", CW__STORE_METADATA);
    }
    c->session_id = m->session_id;
    c->handle = m->handle;
    size_t declared = (size_t)m->buffer_size;
    cw_ifrt__host_buffer_store_metadata__free_unpacked(m, NULL);
    // Over the largest host buffer, or more than a session's share of the
    // budget: it could never be kept.
    bool too_big = declared > p->max_host_buffer;
    if (too_big || declared > p->host_buffer_budget / 2) {
      cw_status_t st = cw_make_status(
          CW_RESOURCE_EXHAUSTED, "HostBufferStore %llu: %zu bytes is %s %zu bytes (%s)",
          (unsigned long long)c->handle, declared,
          too_big ? "over this proxy's largest host buffer,"
                  : "more than a session's share, half of this proxy's budget of",
          too_big ? p->max_host_buffer : p->host_buffer_budget,
          too_big ? "CAUSEWAY_PROXY_MAX_HOST_BUFFER" : "CAUSEWAY_PROXY_HOST_BUFFER_BUDGET");
      free(c);
      return st;
    }
    cw_proxy_session_t* s;
    cw_proxy_host_buffer_t* hb = calloc(1, sizeof(*hb));
    cw_status_t st = hb ? cw__session_of(p, c->session_id, &s)
                        : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    if (!st) {
      hb->declared = declared;
      hb->filler = c;
      hb->storing = true;
      st = cw__hb_insert(s, c->handle, hb);
    }
    if (st) {
      st = cw_status_annotate(st, "HostBufferStore %llu", (unsigned long long)c->handle);
      free(hb);
      free(c);
      return st;
    }
    c->have_request = true;
  }
  cw_grpc_call_set_user(call, c);
  return cw_ok_status();
}

// Removes (session, handle) if this call is still storing it.
static void cw__abandon_store(cw_proxy_t* p, cw__hb_call_t* c) {
  cw_proxy_session_t* s = cw_proxy_session_find(p, c->session_id);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  cw_proxy_host_buffer_t* hb = cw_proxy_table_get(&s->host_buffers, c->handle);
  if (hb && !hb->complete && hb->filler == c) {
    cw_proxy_table_remove(&s->host_buffers, c->handle);
    cw__hb_drop(p, s, hb);  // an upload streaming it sees it orphaned
    pthread_cond_broadcast(&s->host_buffer_cv);
  }
  pthread_mutex_unlock(&s->mu);
}

static void cw__store_data(cw_proxy_t* p, cw_grpc_call_t* call, cw__hb_call_t* c,
                           const uint8_t* d, size_t n) {
  CwIfrt__HostBufferStoreRequest* r = cw_ifrt__host_buffer_store_request__unpack(NULL, n, d);
  cw_proxy_session_t* s = cw_proxy_session_find(p, c->session_id);
  // Only this call writes the buffer it fills, and only the loop frees a
  // session: no lock is needed for the bytes. (Deleted, its handle may hold
  // another's buffer now.)
  cw_proxy_host_buffer_t* hb = NULL;
  if (s) {
    pthread_mutex_lock(&s->mu);
    hb = cw_proxy_table_get(&s->host_buffers, c->handle);
    // Checked under the lock: another's buffer under a reused handle (a
    // download's) may be taken and freed by the session thread at any time.
    if (hb && (hb->complete || hb->filler != c)) hb = NULL;
    pthread_mutex_unlock(&s->mu);
  }
  cw_status_t st = cw_ok_status();
  if (!r) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "HostBufferStore: a request does not decode");
  } else if (!hb) {
    st = cw_make_status(CW_NOT_FOUND, "HostBufferStore: host buffer %llu is gone",
                        (unsigned long long)c->handle);
  } else if (r->data.len > hb->declared - hb->len) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "HostBufferStore: more than the %zu bytes declared",
                        hb->declared);
  } else if (r->data.len) {
    st = cw__charge(p, s, r->data.len);
    if (st) {
      st = cw_status_annotate(st, "HostBufferStore %llu", (unsigned long long)c->handle);
    } else {
      pthread_mutex_lock(&s->mu);  // (released by whichever thread frees it)
      hb->charged += r->data.len;
      pthread_mutex_unlock(&s->mu);
    }
  }
  if (!st && hb->len + r->data.len > hb->cap) {
    // A kept buffer that holds all that is declared, else room as the bytes come.
    uint8_t* b = NULL;
    size_t cap = hb->declared;
    if (!hb->data && hb->declared >= ((size_t)1 << 20)) b = cw_proxy_bytes_alloc(cap);
    if (!b) {
      cap = hb->cap ? hb->cap : 65536;
      while (cap < hb->len + r->data.len) cap *= 2;
      if (cap > hb->declared) cap = hb->declared;
      b = cw_proxy_bytes_grow(hb->data, cap);
    }
    if (!b) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a host buffer");
    else {
      pthread_mutex_lock(&s->mu);  // (read by a streaming upload)
      hb->data = b;
      hb->cap = cap;
      pthread_mutex_unlock(&s->mu);
    }
  }
  if (!st && r->data.len) {
    memcpy(hb->data + hb->len, r->data.data, r->data.len);
    // The count is read by an upload that streams the buffer on as it
    // comes (the session thread, one of its readers).
    pthread_mutex_lock(&s->mu);
    hb->len += r->data.len;
    if (hb->readers) pthread_cond_broadcast(&s->host_buffer_cv);
    pthread_mutex_unlock(&s->mu);
  }
  if (r) cw_ifrt__host_buffer_store_request__free_unpacked(r, NULL);
  if (st) {
    cw__abandon_store(p, c);
    cw_grpc_call_finish(call, st);
  }
}

// Queues the next chunks of `data` (its first `avail` bytes there) up to
// CW__AHEAD: true once all are queued. Each is encoded straight into the
// call's queue.
static bool cw__send_chunks(cw__hb_call_t* c, const uint8_t* data, size_t avail,
                            cw_status_t* out_status) {
  // An empty buffer is one empty message.
  bool first = c->off == 0 && avail == 0;
  while ((first || c->off < avail) && cw_grpc_call_queued(c->call) < CW__AHEAD) {
    first = false;
    size_t n = avail - c->off < CW__CHUNK ? avail - c->off : CW__CHUNK;
    CwIfrt__HostBufferLookupResponse r = CW_IFRT__HOST_BUFFER_LOOKUP_RESPONSE__INIT;
    r.has_data = true;
    r.data.data = (uint8_t*)data + c->off;
    r.data.len = n;
    uint8_t* msg;
    *out_status = cw_grpc_call_reserve(
        c->call, cw_ifrt__host_buffer_lookup_response__get_packed_size(&r), &msg);
    if (*out_status) break;
    (void)cw_ifrt__host_buffer_lookup_response__pack(&r, msg);
    *out_status = cw_grpc_call_commit(c->call);
    c->off += n;
    if (*out_status) break;
  }
  return *out_status || c->off >= avail;
}

// Ends a lookup's read of its buffer (if it began one). An orphan is out
// of every table, so only lookups on this thread still see it.
static void cw__end_read(cw_proxy_t* p, cw__hb_call_t* c) {
  cw_proxy_host_buffer_t* hb = c->hb;
  if (!hb) return;
  c->hb = NULL;
  if (c->rprev) c->rprev->rnext = c->rnext;
  else p->reading = c->rnext;
  if (c->rnext) c->rnext->rprev = c->rprev;
  c->rnext = c->rprev = NULL;
  // Under the session's lock while there is one: its thread may read the
  // buffer too (an upload streaming it). Once it is gone, only this thread.
  cw_proxy_session_t* s = cw_proxy_session_find(p, c->session_id);
  if (s) pthread_mutex_lock(&s->mu);
  cw__hb_unread(p, s, hb);
  if (s) pthread_mutex_unlock(&s->mu);
}

// Ends a lookup call with `st` (taken), its read too.
static void cw__lookup_finish(cw_proxy_t* p, cw__hb_call_t* c, cw_status_t st) {
  cw__end_read(p, c);
  cw_grpc_call_finish(c->call, st);
}

// Answers a lookup if it can: true when the call is done or under way (it
// then goes on from on_writable); false while the buffer, or the next of
// its bytes, is not there yet.
static bool cw__lookup_try(cw_proxy_t* p, cw__hb_call_t* c) {
  if (c->hb && c->hb->orphan) {  // out of every table: only this thread sees it
    cw__lookup_finish(p, c, cw_make_status(CW_NOT_FOUND, "host buffer %llu was deleted while it "
                                           "was read", (unsigned long long)c->handle));
    return true;
  }
  // (A session's end orphans what is read: a lookup under way finds it.)
  cw_proxy_session_t* s = cw_proxy_session_find(p, c->session_id);
  if (!s) {
    cw__lookup_finish(p, c, cw_make_status(CW_NOT_FOUND, "no IFRT session %016llx on this proxy",
                                           (unsigned long long)c->session_id));
    return true;
  }
  // Complete, or being read back in ranges: what is there so far. While it
  // is read here, MakeArray on the session thread waits to take it;
  // HostBufferDelete and the session's end (this thread) orphan it.
  pthread_mutex_lock(&s->mu);
  cw_proxy_host_buffer_t* hb = c->hb;
  if (!hb) {
    hb = cw_proxy_table_get(&s->host_buffers, c->handle);
    if (hb && (hb->complete || hb->partial)) {
      hb->readers++;
      c->hb = hb;
      c->rprev = NULL;
      c->rnext = p->reading;
      if (p->reading) p->reading->rprev = c;
      p->reading = c;
    } else {
      hb = NULL;
    }
  }
  bool complete = hb && hb->complete;
  cw_status_t error = complete && hb->error ? cw_status_clone(hb->error) : NULL;
  const uint8_t* data = !hb ? NULL : complete ? hb->data : hb->partial;
  size_t avail = !hb ? 0 : complete ? hb->len : hb->filled;
  pthread_mutex_unlock(&s->mu);
  if (!hb) return false;
  if (error) {
    cw__lookup_finish(p, c, error);
    return true;
  }
  if (!complete && c->off >= avail) return false;  // more to come
  cw_status_t st = cw_ok_status();
  if (!cw__send_chunks(c, data, avail, &st)) {
    // Topped up once nearly drained: the queue then moves little when it
    // makes room at its front.
    cw_grpc_call_when_writable(c->call, CW__CHUNK);
    return true;
  }
  if (!st && !complete) return false;  // all that is there is queued
  cw__lookup_finish(p, c, st);
  return true;
}

static void cw__park(cw_proxy_t* p, cw__hb_call_t* c) {
  c->parked = true;
  cw_grpc_call_retain(c->call);
  c->prev = NULL;
  c->next = p->lookups;
  if (p->lookups) p->lookups->prev = c;
  p->lookups = c;
  p->num_lookups++;
}

// Off the parked list; releases the call it retained (after which a closed
// call's user, c, is ours to free).
static void cw__unpark(cw_proxy_t* p, cw__hb_call_t* c) {
  if (c->prev) c->prev->next = c->next;
  else p->lookups = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
  c->parked = false;
  p->num_lookups--;
  cw_grpc_call_release(c->call);
}

void cw_proxy_host_buffer_writable(cw_proxy_t* p, cw_grpc_call_t* call) {
  cw__hb_call_t* c = cw_grpc_call_user(call);
  if (!c || c->op != CW__LOOKUP || !c->hb) return;
  if (cw_grpc_call_finished(call)) {
    cw__end_read(p, c);  // ended by an error of its own (a second request, say)
    return;
  }
  if (!cw__lookup_try(p, c) && !c->parked) cw__park(p, c);  // sent all that is there
}

// Ends the lookups reading a buffer that was deleted or whose session ended
// (orphaned): one whose client stopped reading would otherwise keep it, and
// its charge, until its connection closed. Its bytes already queued stay
// queued (copies).
static void cw__finish_orphan_reads(cw_proxy_t* p) {
  for (cw__hb_call_t *c = p->reading, *next; c; c = next) {
    next = c->rnext;
    if (!c->hb->orphan) continue;
    if (cw_grpc_call_finished(c->call)) {  // by an error of its own: only the read is left
      cw__end_read(p, c);
      continue;
    }
    cw__lookup_finish(p, c, cw_make_status(CW_NOT_FOUND, "host buffer %llu was deleted while it "
                                           "was read", (unsigned long long)c->handle));
  }
}

void cw_proxy_host_buffer_retry(cw_proxy_t* p) {
  cw__finish_orphan_reads(p);
  for (cw__hb_call_t *c = p->lookups, *next; c; c = next) {
    next = c->next;
    // (One finished meanwhile, by a second request say, waits for its close.)
    if (!cw_grpc_call_open(c->call) || cw_grpc_call_finished(c->call) || cw__lookup_try(p, c)) {
      bool closed = !cw_grpc_call_open(c->call);
      cw__unpark(p, c);
      if (closed) free(c);  // on_close ran before: the call's user is ours
    }
  }
}

// --- HostBufferReadFromDisk ---------------------------------------------------------------

// The client wrote the bytes to <transfer dir>/lt_<handle as a 32-bit int>
// (as jaxlib names it). The loop opens, checks and removes the file; a
// libuv worker reads it (the loop never waits on a file) into a buffer that
// completes the host buffer, as a store would. Read, not mapped: a client
// that shortens a mapped file would fault the proxy.
typedef struct cw__disk_s {
  uv_work_t req;
  cw_proxy_t* proxy;
  cw_grpc_call_t* call;  // retained until answered
  uint64_t session_id;
  uint64_t handle;
  int fd;
  size_t len;
  size_t charge;  // budget held for the bytes until the host buffer has them
  uint8_t* data;
  cw_status_t st;  // of the read
} cw__disk_t;

static void cw__disk_read(uv_work_t* req) {
  cw__disk_t* w = req->data;
  w->data = cw_proxy_bytes_alloc(w->len ? w->len : 1);
  if (!w->data) {
    w->st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %zu bytes", w->len);
  }
  for (size_t off = 0; !w->st && off < w->len;) {
    ssize_t got = pread(w->fd, w->data + off, w->len - off, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      w->st = cw_make_status(CW_DATA_LOSS, "the file ended after %zu of its %zu bytes (%s)", off,
                             w->len, got < 0 ? strerror(errno) : "shortened meanwhile");
    }
    off += got > 0 ? (size_t)got : 0;
  }
  close(w->fd);
  w->fd = -1;
}

// Loop thread: the read is done; completes the host buffer if it is still
// the one this read fills, and answers the call.
static void cw__disk_done(uv_work_t* req, int status) {
  cw__disk_t* w = req->data;
  cw_proxy_t* p = w->proxy;
  cw_status_t st = w->st;
  if (!st && status) st = cw_make_status(CW_CANCELLED, "the read was cancelled");
  if (w->fd >= 0) close(w->fd);  // cancelled before it ran
  cw_proxy_session_t* s = cw_proxy_session_find(p, w->session_id);
  if (s) {
    pthread_mutex_lock(&s->mu);
    // A failed read is the disk call's to answer (st stays ours): its buffer goes.
    if (!cw__hb_fill(s, w->handle, w, &w->data, w->len, &w->charge, &st, false) && !st) {
      st = cw_make_status(CW_NOT_FOUND, "host buffer %llu was deleted while it was read",
                          (unsigned long long)w->handle);
    }
    pthread_mutex_unlock(&s->mu);
  } else if (!st) {
    st = cw_make_status(CW_NOT_FOUND, "the session ended while its host buffer was read");
  }
  CW_LOGD("HostBufferReadFromDisk %llu: %zu bytes %s", (unsigned long long)w->handle, w->len,
          st ? cw_status_message(st) : "read");
  cw_proxy_bytes_free(w->data);
  cw__release(p, s, w->charge);  // not the host buffer's: freed
  if (st) st = cw_status_annotate(st, "HostBufferReadFromDisk %llu", (unsigned long long)w->handle);
  if (cw_grpc_call_open(w->call)) {
    cw__finish_empty(w->call, st);
  } else {
    cw_status_free(st);
  }
  cw_grpc_call_release(w->call);
  free(w);
  cw_proxy_host_buffer_retry(p);  // lookups parked for it
}

// Opens, checks and removes the file of `handle` (its size declared as
// `declared`, or -1: any); the caller reads it from *out_fd.
static cw_status_t cw__disk_open(cw_proxy_t* p, uint64_t handle, int64_t declared, int* out_fd,
                                 size_t* out_len) {
  const char* dir = cw_settings_string(p->settings, CW_SET_PROXY_TRANSFER_DIR);
  if (!dir[0]) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "this proxy has no transfer directory: start it with "
                          "CAUSEWAY_PROXY_TRANSFER_DIR set to the directory the client's "
                          "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY names");
  }
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/lt_%" PRId32, dir,
                   (int32_t)(uint32_t)(handle & 0xffffffffu));
  if (n < 0 || (size_t)n >= sizeof(path)) {
    return cw_make_status(CW_FAILED_PRECONDITION, "the transfer directory's name is too long");
  }
  // Not a link, and a FIFO must not stall the loop.
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return cw_make_status(CW_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
    close(fd);
    return cw_make_status(CW_INVALID_ARGUMENT, "%s is not a regular file", path);
  }
  // The bytes are the proxy's (or refused) from here.
  if (unlink(path)) CW_LOGW("HostBufferReadFromDisk: cannot remove %s: %s", path, strerror(errno));
  if (declared >= 0 && (int64_t)sb.st_size != declared) {
    close(fd);
    return cw_make_status(CW_INVALID_ARGUMENT, "%s holds %lld bytes; the request declares %lld",
                          path, (long long)sb.st_size, (long long)declared);
  }
  // Checked before any byte is read: a sparse file costs its writer nothing.
  if ((uint64_t)sb.st_size > p->max_host_buffer) {
    close(fd);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "%s holds %lld bytes, over this proxy's "
                          "largest host buffer, %zu bytes (CAUSEWAY_PROXY_MAX_HOST_BUFFER)", path,
                          (long long)sb.st_size, p->max_host_buffer);
  }
  *out_fd = fd;
  *out_len = (size_t)sb.st_size;
  return cw_ok_status();
}

static void cw__read_from_disk(cw_proxy_t* p, cw_grpc_call_t* call, const uint8_t* d, size_t n) {
  CwIfrt__HostBufferReadFromDiskRequest* r =
      cw_ifrt__host_buffer_read_from_disk_request__unpack(NULL, n, d);
  if (!r || !r->metadata || !r->metadata->has_handle || !r->metadata->handle ||
      (r->metadata->has_buffer_size && r->metadata->buffer_size < 0)) {
    if (r) cw_ifrt__host_buffer_read_from_disk_request__free_unpacked(r, NULL);
    cw_grpc_call_finish(call, cw_make_status(CW_INVALID_ARGUMENT, "HostBufferReadFromDisk: the "
                                             "request does not decode, names no handle (or "
                                             "0), or declares a negative size"));
    return;
  }
  cw__disk_t* w = calloc(1, sizeof(*w));
  cw_proxy_host_buffer_t* hb = calloc(1, sizeof(*hb));
  uint64_t handle = r->metadata->handle;
  int64_t declared = r->metadata->has_buffer_size ? r->metadata->buffer_size : -1;
  cw_proxy_session_t* s = NULL;
  cw_status_t st = w && hb ? cw__session_of(p, r->metadata->session_id, &s)
                           : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (w) *w = (cw__disk_t){.proxy = p, .call = call, .handle = handle, .fd = -1};
  // jaxlib names its files by handle alone: a second client's would land on
  // the first's. The first session to use the directory has it while open.
  if (!st && p->disk_session && p->disk_session != s->id &&
      cw_proxy_session_find(p, p->disk_session)) {
    CW_LOGW("HostBufferReadFromDisk: session %016llx uses the transfer directory of session "
            "%016llx; their files may have overwritten each other's",
            (unsigned long long)s->id, (unsigned long long)p->disk_session);
    st = cw_make_status(CW_FAILED_PRECONDITION, "session %016llx takes files from this proxy's "
                        "transfer directory, and jaxlib names them by handle alone, so another "
                        "client's would overwrite them: give each client a proxy of its own (or "
                        "unset IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY)",
                        (unsigned long long)p->disk_session);
  }
  if (!st) {
    w->session_id = s->id;
    st = cw__disk_open(p, handle, declared, &w->fd, &w->len);
    if (!st) {
      p->disk_session = s->id;  // a file of its was there: the directory is its
      // Before any byte is read (a sparse file costs its writer nothing).
      st = cw__charge(p, s, w->len);
      if (!st) w->charge = w->len;
    }
  }
  cw_ifrt__host_buffer_read_from_disk_request__free_unpacked(r, NULL);
  if (!st) {
    hb->declared = w->len;
    hb->filler = w;
    st = cw__hb_insert(s, handle, hb);
  }
  if (!st) {
    w->req.data = w;
    cw_grpc_call_retain(call);
    int rc = uv_queue_work(&p->loop, &w->req, cw__disk_read, cw__disk_done);
    if (!rc) return;
    cw_grpc_call_release(call);
    pthread_mutex_lock(&s->mu);
    cw_proxy_table_remove(&s->host_buffers, handle);
    pthread_cond_broadcast(&s->host_buffer_cv);
    pthread_mutex_unlock(&s->mu);
    st = cw_make_status(CW_INTERNAL, "no worker thread for the read: %s", uv_strerror(rc));
  }
  if (w && w->fd >= 0) close(w->fd);
  if (w) cw__release(p, s, w->charge);
  free(w);
  free(hb);
  cw_grpc_call_finish(call, cw_status_annotate(st, "HostBufferReadFromDisk %llu",
                                               (unsigned long long)handle));
}

void cw_proxy_host_buffer_message(cw_proxy_t* p, cw_grpc_call_t* call, const uint8_t* d,
                                  size_t n) {
  cw__hb_call_t* c = cw_grpc_call_user(call);
  if (c->op == CW__STORE) {
    cw__store_data(p, call, c, d, n);
    return;
  }
  if (c->have_request) {
    cw__lookup_finish(p, c, cw_make_status(CW_INVALID_ARGUMENT, "one request expected"));
    return;
  }
  c->have_request = true;
  c->call = call;
  if (c->op == CW__DISK) {
    cw__read_from_disk(p, call, d, n);
    return;
  }
  if (c->op == CW__LOOKUP) {
    CwIfrt__HostBufferLookupRequest* r = cw_ifrt__host_buffer_lookup_request__unpack(NULL, n, d);
    if (!r) {
      cw_grpc_call_finish(call, cw_make_status(CW_INVALID_ARGUMENT,
                                               "HostBufferLookup: the request does not decode"));
      return;
    }
    c->session_id = r->session_id;
    c->handle = r->handle;
    cw_ifrt__host_buffer_lookup_request__free_unpacked(r, NULL);
    if (cw__lookup_try(p, c)) return;
    if (p->num_lookups >= CW__MAX_PARKED_LOOKUPS) {
      cw_grpc_call_finish(call, cw_make_status(CW_RESOURCE_EXHAUSTED, "HostBufferLookup: %d "
                                               "lookups already wait for their buffers",
                                               CW__MAX_PARKED_LOOKUPS));
      return;
    }
    cw__park(p, c);
    return;
  }
  CwIfrt__HostBufferDeleteRequest* r = cw_ifrt__host_buffer_delete_request__unpack(NULL, n, d);
  if (!r) {
    cw_grpc_call_finish(call, cw_make_status(CW_INVALID_ARGUMENT,
                                             "HostBufferDelete: the request does not decode"));
    return;
  }
  cw_proxy_session_t* s;
  cw_status_t st = cw__session_of(p, r->session_id, &s);
  if (!st) {
    pthread_mutex_lock(&s->mu);
    cw_proxy_host_buffer_t* hb = cw_proxy_table_remove(&s->host_buffers, r->handle);
    cw__hb_drop(p, s, hb);  // a lookup reading it sees it orphaned
    pthread_cond_broadcast(&s->host_buffer_cv);
    pthread_mutex_unlock(&s->mu);
    if (!hb) {
      st = cw_make_status(CW_NOT_FOUND, "HostBufferDelete: no host buffer %llu",
                          (unsigned long long)r->handle);
    }
  }
  cw_ifrt__host_buffer_delete_request__free_unpacked(r, NULL);
  cw__finish_empty(call, st);
  cw__finish_orphan_reads(p);
}

void cw_proxy_host_buffer_half_close(cw_proxy_t* p, cw_grpc_call_t* call) {
  cw__hb_call_t* c = cw_grpc_call_user(call);
  if (c->op != CW__STORE) {
    if (!c->have_request) {
      cw_grpc_call_finish(call, cw_make_status(CW_INVALID_ARGUMENT, "no request"));
    }
    return;
  }
  cw_proxy_session_t* s = cw_proxy_session_find(p, c->session_id);
  cw_status_t st = cw_ok_status();
  if (!s) {
    st = cw_make_status(CW_NOT_FOUND, "HostBufferStore: the session is gone");
  } else {
    pthread_mutex_lock(&s->mu);
    cw_proxy_host_buffer_t* hb = cw_proxy_table_get(&s->host_buffers, c->handle);
    if (!hb || hb->complete || hb->filler != c) {
      st = cw_make_status(CW_NOT_FOUND, "HostBufferStore: host buffer %llu is gone",
                          (unsigned long long)c->handle);
    } else if (hb->len != hb->declared) {
      st = cw_make_status(CW_INVALID_ARGUMENT,
                          "HostBufferStore: %zu bytes arrived of the %zu declared", hb->len,
                          hb->declared);
    } else {
      hb->complete = true;
      hb->filler = NULL;
      pthread_cond_broadcast(&s->host_buffer_cv);
    }
    pthread_mutex_unlock(&s->mu);
  }
  if (st) {
    cw__abandon_store(p, c);
    cw_grpc_call_finish(call, st);
    return;
  }
  cw__finish_empty(call, st);
  uv_async_send(&p->wake);  // a parked lookup of the same handle
}

void cw_proxy_host_buffer_close(cw_proxy_t* p, cw_grpc_call_t* call) {
  cw__hb_call_t* c = cw_grpc_call_user(call);
  cw_grpc_call_set_user(call, NULL);
  if (c->op == CW__STORE) cw__abandon_store(p, c);
  cw__end_read(p, c);  // a lookup cut short
  // Only this one: each close retrying every parked lookup made closing many
  // of them quadratic (25,600 closes blocked the loop 26 s).
  if (c->parked) cw__unpark(p, c);
  free(c);
}
