// UPLOAD, PUT, DOWNLOAD, AWAIT, COPY, EXPECT, DELETE (see cw_worker_transfer.h).
#include "cw_worker_transfer.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_log.h"
#include "cw_messages.h"
#include "cw_worker_conn.h"
#include "cw_worker_direct.h"
#include "cw_worker_mem.h"
#include "cw_worker_op.h"
#include "cw_worker_pin.h"
#include "cw_worker_trace.h"

// --- UPLOAD, PUT: bytes in ------------------------------------------------------

// The host memory a buffer was made from, given back once PJRT is done with it.
typedef struct cw__staging_hold_s {
  void (*give_back)(void*);
  void* user;
} cw__staging_hold_t;

static void cw__upload_staging_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw__staging_hold_t* hold = user;
  cw_status_free(status);
  hold->give_back(hold->user);
  free(hold);
}

// Acks once the buffer a transfer made is ready (UPLOAD, PUT, COPY).
static void cw__upload_ready(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    cw_worker_op_fail(op, status);
    return;
  }
  if (op->type != CW_MSG_COPY) {
    bool put = op->type == CW_MSG_PUT;
    cw_worker_trace_record(w, op->skey, put ? "put" : "upload", put ? "PUT" : "UPLOAD",
                           op->device, op->trace_start_ns, op->dst_id,
                           op->msg ? cw_msg_seq(op->type, op->msg) : 0, op->size, 0,
                           put ? cw_worker_conn_name(op->conn) : NULL);
  }
  cw_worker_op_ack(op, op->dst_id);
}

// Later parts that came before the parts ahead of them, per upload.
#define CW__MAX_QUEUED_PARTS 4096

static void cw__fail_entry(cw_op_t* op, cw_store_entry_t* e, cw_status_t st) {
  cw_store_set_error(op->w->store, e, cw_status_clone(st));
  cw_worker_op_fail(op, st);
}

// An UPLOAD in parts, put together on the entry its first part makes
// (e->parts) in staging memory of the array's extent, which the last part
// hands to PJRT. Parts are checked as they are applied (`claimed`: the
// bytes of parts accepted so far) and read into place once the first
// part's bytes are in; ones whose bytes come before that (the first waits
// for memory) wait in `queue`, in order. The part read into place holds a
// reference, so a delete or failure meanwhile never frees memory the
// socket fills.
typedef struct cw__parts_s {
  int refs;        // the entry's, and the part being read into place
  // The entry, while it holds it; the links on the list of uploads in parts
  // of the connection that began it (conn_prevp NULL once off it).
  cw_store_entry_t* entry;
  struct cw__parts_s* conn_next;
  struct cw__parts_s** conn_prevp;
  bool receiving;  // a part's bytes are being read into place
  uint8_t* staging;  // NULL until the first part's bytes are in
  uint64_t extent;
  uint64_t claimed;
  uint64_t received;
  cw_op_t* queue;  // parts in, waiting for the first (linked by their `next_part`)
  cw_op_t* queue_tail;  // its last (when there is one)
  size_t queued;
  int dtype;
  int64_t* dims;
  size_t rank;
  int device;
  PJRT_Memory* memory;
} cw__parts_t;

static void cw__parts_unref(cw_worker_t* w, cw__parts_t* p) {
  if (--p->refs > 0) return;
  while (p->queue) {
    cw_op_t* op = p->queue;
    p->queue = op->next_part;
    p->queued--;
    cw_worker_op_fail(op, cw_make_status(CW_CANCELLED, "UPLOAD %" PRIu64 ": the upload in "
                                         "parts ended before this part was put in",
                                         op->dst_id));
  }
  if (p->staging) cw_worker_staging_free(w, p->staging, p->extent);
  free(p->dims);
  free(p);
}

// Off its connection's list.
static void cw__parts_unlink(cw__parts_t* p) {
  if (!p->conn_prevp) return;
  *p->conn_prevp = p->conn_next;
  if (p->conn_next) p->conn_next->conn_prevp = p->conn_prevp;
  p->conn_next = NULL;
  p->conn_prevp = NULL;
}

void cw_worker_upload_parts_free(cw_worker_t* w, void* parts) {
  cw__parts_t* p = parts;
  if (!p) return;
  cw__parts_unlink(p);
  p->entry = NULL;
  cw__parts_unref(w, p);
}

void cw_worker_upload_part_abandon(cw_worker_t* w, void* parts) {
  ((cw__parts_t*)parts)->receiving = false;
  cw__parts_unref(w, parts);
}

void cw_worker_upload_parts_conn_closed(cw_conn_t* c) {
  while (c->uploads_in_parts) {
    cw__parts_t* p = c->uploads_in_parts;
    cw_store_entry_t* e = p->entry;
    uint64_t received = p->received, extent = p->extent;
    cw__parts_unlink(p);
    // Every part in (the first may still wait for memory): it completes.
    if (p->claimed == p->extent + 1) continue;
    e->filling = false;
    cw_store_set_error(c->w->store, e, cw_make_status(
        CW_UNAVAILABLE, "buffer %" PRIu64 "'s upload in parts ended with %" PRIu64 " of its %"
        PRIu64 " bytes in: %s closed before its last part", e->id, received, extent,
        cw_worker_conn_name(c)));  // frees the parts (and fails those waiting)
  }
}

void cw_worker_upload_part_refused(cw_conn_t* c, uint64_t id, cw_status_t why) {
  cw_store_entry_t* e = c->keeps_session && c->session
                            ? cw_store_lookup(c->w->store, c->session->key, id)
                            : NULL;
  cw__parts_t* p = e && e->kind == CW_STORE_BUFFER ? e->parts : NULL;
  if (!p || p->claimed == p->extent + 1) {  // none under way, or all its parts are in
    cw_status_free(why);
    return;
  }
  e->filling = false;
  cw_store_set_error(c->w->store, e, why);  // frees the parts (and fails those waiting)
}

// The first part, come in on `c`: the array to put together, before its bytes.
static cw_status_t cw__parts_begin(cw_conn_t* c, cw_op_t* op, cw_store_entry_t* e,
                                   uint64_t first_len) {
  uint64_t extent = 0;
  CW_RETURN_IF_ERROR(cw_array_extent(op->dtype, op->dims, op->rank, NULL, 0, &extent),
                     "UPLOAD");
  assert(!c->closing);  // (held requests of a closed connection are dropped)
  cw__parts_t* p = calloc(1, sizeof(*p));
  if (!p) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  *p = (cw__parts_t){.refs = 1, .extent = extent, .claimed = first_len, .entry = e,
                     .conn_next = c->uploads_in_parts, .conn_prevp = &c->uploads_in_parts};
  if (p->conn_next) p->conn_next->conn_prevp = &p->conn_next;
  c->uploads_in_parts = p;
  e->parts = p;
  return cw_ok_status();
}

// Gives back the bytes one part brought in memory of its own (copied by now).
static void cw__part_bytes_free(cw_op_t* op) {
  if (op->staging_foreign) free(op->staging);
  else if (op->staging) cw_worker_staging_free(op->w, op->staging, op->size);
  op->staging = NULL;
  op->staging_foreign = false;
}

static void cw__transfer_whole(cw_op_t* op, cw_store_entry_t* e);

// Puts a later part's bytes in (in place already, or copied now): acked,
// or for the last part the whole array goes on as one UPLOAD's bytes
// (true; op then holds them).
static bool cw__part_put(cw_op_t* op, cw__parts_t* p, cw_store_entry_t* e) {
  if (!op->parts && op->size) memcpy(p->staging + p->received, op->staging, op->size);
  p->received += op->size;
  if (op->parts) {
    p->receiving = false;
    op->parts = NULL;
    cw__parts_unref(op->w, p);  // the entry still holds it
  }
  cw__part_bytes_free(op);
  if (op->part != CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST) {
    cw_worker_op_ack(op, op->dst_id);  // filling still: its users wait
    return false;
  }
  e->parts = NULL;
  cw__parts_unlink(p);
  p->entry = NULL;
  op->staging = p->staging;
  op->size = p->extent;
  op->dtype = p->dtype;
  free(op->dims);
  op->dims = p->dims;
  op->rank = p->rank;
  op->device = p->device;
  op->memory = p->memory;
  p->staging = NULL;  // op's now
  p->dims = NULL;
  cw__parts_unref(op->w, p);  // the entry's reference
  return true;
}

// Puts in the parts that waited, in order, while none is read into place;
// the last sends the whole array on. The caller holds a reference to p: an
// ack may close the connection, and with it the upload (p->entry then no
// longer e, which may be gone).
static void cw__parts_drain(cw__parts_t* p, cw_store_entry_t* e) {
  while (p->entry == e && p->queue && p->staging && !p->receiving) {
    cw_op_t* next = p->queue;
    p->queue = next->next_part;
    p->queued--;
    next->next_part = NULL;
    if (cw__part_put(next, p, e)) {
      cw__transfer_whole(next, e);  // p is gone
      return;
    }
  }
}

// A part's bytes are in. The first's make the array's memory; a later
// one's go in now if it is their turn (read into place: it is), else wait
// in order. Then those that waited go in.
static void cw__part_received(cw_op_t* op, cw_store_entry_t* e) {
  cw_worker_t* w = op->w;
  cw__parts_t* p = e->parts;
  cw_status_t st = cw_ok_status();
  if (!p) {
    // The buffer failed while this part's bytes came (its memory, say).
    st = e->error ? cw_status_clone(e->error)
                  : cw_make_status(CW_CANCELLED, "buffer %" PRIu64 "'s upload ended", op->dst_id);
  } else if (op->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST) {
    p->staging = cw_worker_staging_alloc(w, p->extent);
    if (!p->staging) {
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes for an "
                          "UPLOAD in parts", p->extent);
    }
  } else if (!op->parts && (!p->staging || p->queue || p->receiving) &&
             p->queued >= CW__MAX_QUEUED_PARTS) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "UPLOAD %" PRIu64 ": %d later parts already "
                        "wait for the ones before them", op->dst_id, CW__MAX_QUEUED_PARTS);
  }
  if (st) {
    e->filling = false;
    cw__fail_entry(op, e, st);  // frees the parts (and fails those waiting)
    return;
  }
  p->refs++;  // held across the acks below (cw__parts_drain)
  if (op->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST) {
    p->dtype = op->dtype;
    p->dims = op->dims;  // the parts' now
    p->rank = op->rank;
    p->device = op->device;
    p->memory = op->memory;
    op->dims = NULL;
    op->rank = 0;
    if (op->size) memcpy(p->staging, op->staging, op->size);
    p->received = op->size;
    cw__part_bytes_free(op);
    cw_worker_op_ack(op, op->dst_id);
  } else if (!op->parts && (!p->staging || p->queue || p->receiving)) {
    op->next_part = NULL;  // not its turn yet: last in line
    if (p->queue) p->queue_tail->next_part = op;
    else p->queue = op;
    p->queue_tail = op;
    p->queued++;
    cw__parts_unref(w, p);
    return;
  } else if (cw__part_put(op, p, e)) {
    cw__parts_unref(w, p);
    cw__transfer_whole(op, e);
    return;
  }
  cw__parts_drain(p, e);
  cw__parts_unref(w, p);
}

void cw_worker_transfer_received(cw_op_t* op) {
  cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
  if (!e) {
    cw_worker_op_fail(op, cw_make_status(CW_CANCELLED, "buffer %" PRIu64
                                         " was deleted before its bytes arrived", op->dst_id));
    return;
  }
  if (op->part) {
    cw__part_received(op, e);
    return;
  }
  cw__transfer_whole(op, e);
}

static void cw__transfer_whole(cw_op_t* op, cw_store_entry_t* e) {
  cw_worker_t* w = op->w;
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
                                  nstrides, op->device, op->memory, true, &buffer, &done);
  if (!st) st = cw_worker_entry_set_array(w, e, op->dtype, op->dims, op->rank, op->device);
  // The staging memory lives until PJRT is done with it (zero-copy: until
  // the buffer is destroyed).
  cw__staging_hold_t* hold = st ? NULL : malloc(sizeof(*hold));
  if (!st && !hold) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (st) {
    cw_pjrt_buffer_destroy(w->pjrt, buffer);
    cw_pjrt_event_destroy(w->pjrt, done);
    cw__fail_entry(op, e, st);
    return;
  }
  if (!w->zero_copy_reported && op->size) {
    // A one-time fact for the log: does this plugin alias our staging memory?
    w->zero_copy_reported = true;
    CW_LOGI("upload: kImmutableZeroCopy %s the staging memory",
            cw_pjrt_buffer_pointer(w->pjrt, buffer) == (uintptr_t)op->staging ? "aliases"
                                                                             : "copies");
  }
  cw_worker_op_staging_ref(op, &hold->give_back, &hold->user);
  cw_worker_when_ready(w, done, cw__upload_staging_done, hold);
  if (op->type == CW_MSG_UPLOAD) {
    w->uploads++;
    w->upload_bytes += op->size;
  } else {
    w->puts++;
    w->put_bytes += op->size;
  }
  PJRT_Event* ready = NULL;
  st = cw_pjrt_ready_event(w->pjrt, buffer, &ready);
  cw_store_set_ready(w->store, e, buffer);  // may run waiters
  if (st) {
    cw_worker_op_fail(op, st);
    return;
  }
  cw_worker_when_ready(w, ready, cw__upload_ready, op);
}

// --- Same-host UPLOAD: the bytes come from the peer's memory (cw_worker_direct.h) ---

static void cw__direct_received(cw_op_t* op) {
  if (!op->direct_errno) {
    cw_worker_transfer_received(op);
    return;
  }
  cw_status_t st = cw_worker_direct_error(op, "UPLOAD");
  cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
  if (!e) {
    cw_worker_op_fail(op, st);
    return;
  }
  e->filling = false;
  cw__fail_entry(op, e, st);
}

static void cw__direct_receive(cw_op_t* op) {
  op->staging = cw_worker_staging_alloc(op->w, op->size);
  if (!op->staging) {
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64
                                    " bytes for UPLOAD", op->size);
    cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
    if (e) cw_store_set_error(op->w->store, e, cw_status_clone(st));
    cw_worker_op_fail(op, st);
    return;
  }
  if (op->size == 0) {
    cw_worker_transfer_received(op);
    return;
  }
  cw_worker_direct_copy(op, op->staging, false, cw__direct_received);
}

// --- Memory for the buffer a transfer makes (cw_worker_mem.h) -------------------

// The bytes the buffer will hold: dense, whatever strides the bytes came in.
static uint64_t cw__transfer_bytes(const cw_op_t* op, uint64_t bulk_len) {
  uint64_t bytes = 0;
  cw_status_t st = cw_array_extent(op->dtype, op->dims, op->rank, NULL, 0, &bytes);
  if (st) bytes = bulk_len;  // a type with no byte size: what arrives
  cw_status_free(st);
  return bytes;
}

// A transfer's wait for memory ended: its bytes are read now (or were in
// already), or it fails and they are discarded.
static void cw__transfer_mem_ready(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  op->mem_wait = NULL;
  cw_conn_t* c = op->conn;
  bool deferred = c->mem_recv == op;
  cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
  if (!status && !e) {
    status = cw_make_status(CW_CANCELLED, "buffer %" PRIu64 " was deleted while it waited for "
                            "memory", op->dst_id);
  }
  if (status) {
    if (deferred) cw_worker_conn_resume_bulk(c, op, false);
    if (!e) {
      cw_worker_op_fail(op, status);
      return;
    }
    e->filling = false;
    cw__fail_entry(op, e, status);
    return;
  }
  cw_worker_mem_charge(w, e, op->device, cw__transfer_bytes(op, op->size));
  if (deferred) cw_worker_conn_resume_bulk(c, op, true);
  else if (op->direct_address) cw__direct_receive(op);
  else cw_worker_transfer_received(op);
}

// UPLOAD, PUT: the new buffer's memory is taken only when it fits the
// budget. A request that must wait stops its connection before its bytes
// are read (a held request's bytes are in already: they wait with it).
static void cw__transfer_admit(cw_conn_t* c, const cw_frame_header_t* h, cw_op_t* op,
                               cw_store_entry_t* e) {
  cw_worker_t* w = c->w;
  uint64_t bytes = cw__transfer_bytes(op, h->bulk_len);
  cw_worker_mem_wait_t* wait = NULL;
  cw_status_t st = cw_ok_status();
  if (cw_worker_mem_limited(w)) {
    uint64_t* need = cw_worker_mem_scratch(w);
    need[op->device] = bytes;
    char what[64];
    snprintf(what, sizeof(what), "%s %" PRIu64, cw_msg_type_name(op->type), op->dst_id);
    st = cw_worker_mem_reserve(w, op->skey, need, what, cw__transfer_mem_ready, op, &wait);
  }
  if (st) {
    e->filling = false;
    cw__fail_entry(op, e, st);
    return;  // its bytes are discarded
  }
  if (!wait) {
    cw_worker_mem_charge(w, e, op->device, bytes);
    if (op->direct_address) cw__direct_receive(op);
    else cw_worker_conn_receive_bulk(c, h, op);
    return;
  }
  op->mem_wait = wait;
  // No bytes on the socket (a same-host copy): nothing to hold. Nor for a
  // part with none applied in its seq turn: what came after it on its
  // connection was read already, within the seq caps.
  if (op->direct_address || (op->part && !h->bulk_len && cw_worker_conn_applying_held(c))) {
    return;
  }
  // A first part with no bytes, read now, holds its connection too: read,
  // its later parts would each be kept in memory of their own meanwhile,
  // past the budget.
  if (cw_worker_conn_bulk_arrived(c)) cw_worker_conn_take_held_bulk(c, h, op);
  else cw_worker_conn_defer_bulk(c, h, op);
}

// A later part of an UPLOAD in parts: checked against the parts accepted
// so far before its bytes are read, then read into place (or, while the
// first part's bytes are not in, into memory of its own, to wait). No
// memory to take: the first part took the array's.
static void cw__upload_part(cw_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)*msg;
  cw_op_t* op = cw_worker_op_create(c, h->type, h->request_id);
  cw_store_entry_t* e = op ? cw_store_lookup(c->w->store, op->skey, r->buffer_id) : NULL;
  cw__parts_t* p = e && e->kind == CW_STORE_BUFFER ? e->parts : NULL;
  cw_status_t st = cw_ok_status();
  if (!op) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  } else if (!p || p->claimed == p->extent + 1) {
    st = cw_make_status(CW_FAILED_PRECONDITION, "buffer %" PRIu64 " has no upload in parts "
                        "under way", r->buffer_id);
  } else if (r->part_offset != p->claimed || h->bulk_len > p->extent - p->claimed ||
             (r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST &&
              p->claimed + h->bulk_len != p->extent)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "part of %" PRIu64 " bytes at byte %" PRIu64
                        " does not follow the %" PRIu64 " bytes in of %" PRIu64,
                        (uint64_t)h->bulk_len, r->part_offset, p->claimed, p->extent);
    // Nothing can follow it: the buffer fails for whoever waits for it.
    e->filling = false;
    cw_store_set_error(c->w->store, e, cw_status_clone(st));
  }
  if (st) {
    cw_worker_op_free(op);
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_status_annotate(st, "UPLOAD %" PRIu64, r->buffer_id));
    return;  // its bytes are discarded
  }
  // After the last part nothing more is accepted (extent + 1: closed).
  p->claimed = r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST ? p->extent + 1
                                                                  : p->claimed + h->bulk_len;
  op->serial = e->serial;
  op->dst_id = r->buffer_id;
  op->part = r->part;
  op->part_offset = r->part_offset;
  op->msg = *msg;
  *msg = NULL;
  if (cw_worker_conn_bulk_arrived(c) || !p->staging || p->queue || p->receiving) {
    cw_worker_conn_receive_bulk(c, h, op);  // memory of its own, copied in its turn
    return;
  }
  p->receiving = true;
  p->refs++;
  op->parts = p;
  cw_worker_conn_receive_bulk_at(c, h, op, p->staging + p->received);
}

void cw_worker_handle_upload(cw_net_conn_t* nc, const cw_frame_header_t* h,
                             ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)*msg;
  if (r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_MORE ||
      r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST) {
    cw__upload_part(c, h, msg);
    return;
  }
  cw_status_t st = cw_worker_check_device(w, r->device);
  PJRT_Memory* memory = NULL;
  if (!st) st = cw_pjrt_memory_of_kind(w->pjrt, r->device, r->memory_kind, &memory);
  if (!st && r->n_byte_strides && r->n_byte_strides != r->n_dims) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "%zu byte strides for %zu dimensions",
                        r->n_byte_strides, r->n_dims);
  }
  uint64_t direct_size = 0;
  if (!st && r->peer_address) {  // no bulk (cw_msg_check_bulk)
    st = cw_array_extent(r->dtype, r->dims, r->n_dims, r->byte_strides, r->n_byte_strides,
                         &direct_size);
    if (!st) st = cw_worker_direct_check(c, r->peer_address, direct_size);
  }
  cw_op_t* op = NULL;
  if (!st) {
    op = cw_worker_op_create(c, h->type, h->request_id);
    if (!op) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  cw_store_entry_t* e = NULL;
  if (!st) st = cw_store_insert(w->store, op->skey, r->buffer_id, CW_STORE_BUFFER, &e);
  if (!st) st = cw_worker_op_copy_dims(op, r->dims, r->n_dims);
  if (st) {
    if (e) cw_store_remove(w->store, e);
    cw_worker_op_free(op);
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_status_annotate(st, "UPLOAD %" PRIu64, r->buffer_id));
    return;  // bulk bytes, if any, are discarded
  }
  e->filling = true;
  op->serial = e->serial;
  op->dst_id = r->buffer_id;
  op->dtype = r->dtype;
  op->device = r->device;
  op->memory = memory;
  op->direct_address = r->peer_address;
  op->size = direct_size;
  op->part = r->part;
  if (r->part == CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST) {
    st = cw__parts_begin(c, op, e, h->bulk_len);
    if (st) {
      cw_store_remove(w->store, e);
      cw_worker_op_free(op);
      cw_worker_reply_error(c, h->type, h->request_id,
                            cw_status_annotate(st, "UPLOAD %" PRIu64, r->buffer_id));
      return;
    }
  }
  op->msg = *msg;
  *msg = NULL;
  cw__transfer_admit(c, h, op, e);
}

void cw_worker_handle_put(cw_net_conn_t* nc, const cw_frame_header_t* h,
                          ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  cw_worker_t* w = c->w;
  const Causeway__V1__PutRequest* r = (const Causeway__V1__PutRequest*)*msg;
  cw_status_t st = cw_ok_status();
  cw_session_t* s = cw_worker_session_find(w, r->dst_session);
  if (!s) st = cw_make_status(CW_NOT_FOUND, "session %" PRIu64 " not found", r->dst_session);
  if (!st && !r->error) st = cw_worker_check_device(w, r->dst_device);
  PJRT_Memory* memory = NULL;
  if (!st && !r->error) {
    st = cw_pjrt_memory_of_kind(w->pjrt, r->dst_device, r->dst_memory_kind, &memory);
  }
  cw_store_entry_t* e = NULL;
  if (!st) {
    // An EXPECT-ed buffer deleted while a request that uses it waits for it
    // is older than any entry now under the id: the PUT fills that first.
    e = cw_store_lookup_detached_put(w->store, s->key, r->dst_id);
    if (!e) e = cw_store_lookup(w->store, s->key, r->dst_id);
    // Only what EXPECT declared waits for a PUT: a launch's output or a
    // copy's destination pending under the id is the program's to fill.
    if (e && (e->kind != CW_STORE_BUFFER || e->state != CW_STORE_PENDING || e->filling ||
              !e->awaits_put)) {
      st = cw_make_status(CW_ALREADY_EXISTS, "buffer %" PRIu64 " already exists", r->dst_id);
    } else if (!e) {
      st = cw_store_insert(w->store, s->key, r->dst_id, CW_STORE_BUFFER, &e);
      if (!st) e->from_put = true;
    }
  }
  if (st) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_status_annotate(st, "PUT %" PRIu64, r->dst_id));
    return;
  }
  if (r->error) {
    cw_store_set_error(w->store, e, cw_error_reply_to_status(r->error, NULL));
    Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
    ack.id = r->dst_id;
    cw_worker_reply(c, h->type, h->request_id, &ack.base);
    return;
  }
  cw_op_t* op = cw_worker_op_create(c, h->type, h->request_id);
  if (op) st = cw_worker_op_copy_dims(op, r->dims, r->n_dims);
  if (!op || st) {
    if (!st) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    cw_store_set_error(w->store, e, cw_status_clone(st));
    cw_worker_op_free(op);
    cw_worker_reply_error(c, h->type, h->request_id, st);
    return;
  }
  e->filling = true;
  op->skey = s->key;
  op->serial = e->serial;
  op->dst_id = r->dst_id;
  op->dtype = r->dtype;
  op->device = r->dst_device;
  op->memory = memory;
  op->msg = *msg;
  *msg = NULL;
  cw__transfer_admit(c, h, op, e);
}

// --- DOWNLOAD, AWAIT: bytes out -------------------------------------------------

static bool cw__buffer_usable(cw_op_t* op, cw_store_entry_t* e) {
  return cw_worker_op_need_kind(op, e, CW_STORE_BUFFER, "buffer", "a buffer");
}

cw_status_t cw_worker_fetch_pinned(cw_op_t* op, const void** out_bulk, cw_pin_t** out_pin,
                                   PJRT_Event** out_event) {
  *out_bulk = NULL;
  *out_pin = NULL;
  *out_event = NULL;
  PJRT_Buffer* b = cw_worker_pin_buffer(op->keep);
  // Ready now: the pin's external reference does not wait.
  cw_pin_t* pin = cw_worker_pin(op->w, b);
  const void* view = pin ? cw_pjrt_buffer_host_view(op->w->pjrt, b, op->rank) : NULL;
  if (view) {
    *out_bulk = view;
    *out_pin = pin;
    cw_worker_pin_unkeep(op->keep);
    op->keep = NULL;
    return cw_ok_status();
  }
  cw_worker_pin_release(pin);
  cw_status_t st = cw_ok_status();
  op->staging = cw_worker_staging_alloc(op->w, op->size);
  if (!op->staging) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes", op->size);
  } else {
    st = cw_pjrt_to_host(op->w->pjrt, b, op->rank, op->staging, (size_t)op->size, out_event);
  }
  cw_worker_pin_unkeep(op->keep);  // the copy holds the buffer itself
  op->keep = NULL;
  return st;
}

cw_status_t cw_worker_fetch_start(cw_op_t* op, cw_store_entry_t* e, PJRT_Event** out_event) {
  *out_event = NULL;
  PJRT_Buffer* b = (PJRT_Buffer*)e->handle;
  if (!op->size) return cw_pjrt_ready_event(op->w->pjrt, b, out_event);
  // Pinned once ready (cw_worker_fetch_pinned): XLA's CPU plugin makes an
  // external reference wait for the buffer, which held the loop (and its
  // heartbeats) for as long as the program computing it ran.
  if (op->w->pjrt->host_memory) op->keep = cw_worker_pin_keep(op->w, b);
  if (op->keep) return cw_pjrt_ready_event(op->w->pjrt, b, out_event);
  op->staging = cw_worker_staging_alloc(op->w, op->size);
  if (!op->staging) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes", op->size);
  }
  return cw_pjrt_to_host(op->w->pjrt, b, op->rank, op->staging, (size_t)op->size, out_event);
}

static void cw__download_reply(cw_op_t* op, const void* bulk, void (*bulk_free)(void*),
                               void* bulk_user);
static void cw__download_direct_done(cw_op_t* op);

// The bytes a DOWNLOAD sends of the op->size fetched (its range, checked).
static uint64_t cw__range_length(const cw_op_t* op) {
  return op->range_length ? op->range_length : op->size - op->range_offset;
}

static void cw__download_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    cw_worker_op_fail(op, cw_status_annotate(status, "DOWNLOAD %" PRIu64, op->id));
    return;
  }
  const void* bulk = NULL;
  void (*bulk_free)(void*) = NULL;
  void* bulk_user = NULL;
  if (op->keep) {
    cw_pin_t* pin = NULL;
    PJRT_Event* ev = NULL;
    cw_status_t st = cw_worker_fetch_pinned(op, &bulk, &pin, &ev);
    if (st) {
      cw_worker_op_fail(op, cw_status_annotate(st, "DOWNLOAD %" PRIu64, op->id));
      return;
    }
    if (!pin) {
      cw_worker_when_ready(w, ev, cw__download_done, op);  // copied after all
      return;
    }
    bulk_free = cw_worker_pin_release;
    bulk_user = pin;
  } else if (op->staging) {
    bulk = op->staging;
    cw_worker_op_staging_ref(op, &bulk_free, &bulk_user);
  }
  if (bulk && op->range_offset) bulk = (const uint8_t*)bulk + op->range_offset;
  op->size = cw__range_length(op);
  if (op->direct_address && op->size) {
    // Same host: into the peer's memory, then a reply without bytes.
    op->direct_src = bulk;
    op->direct_free = bulk_free;
    op->direct_free_user = bulk_user;
    cw_worker_direct_copy(op, (void*)(uintptr_t)bulk, true, cw__download_direct_done);
    return;
  }
  cw__download_reply(op, bulk, bulk_free, bulk_user);
}

static void cw__download_reply(cw_op_t* op, const void* bulk, void (*bulk_free)(void*),
                               void* bulk_user) {
  cw_worker_t* w = op->w;
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
                         op->id, op->msg ? cw_msg_seq(op->type, op->msg) : 0, op->size, 0, NULL);
  cw_net_conn_send(op->conn->nc, op->type, CW_FRAME_REPLY, op->request_id, &info.base, bulk,
                   bulk ? op->size : 0, bulk_free, bulk_user);
  cw_worker_op_free(op);
}

// The same-host copy of a DOWNLOAD ran. The kernel may refuse it (no
// permission to write the peer's memory: Yama, a container's seccomp): then
// the bytes go over the socket after all, as the client also allows.
static void cw__download_direct_done(cw_op_t* op) {
  const void* bulk = op->direct_src;
  void (*bulk_free)(void*) = op->direct_free;
  void* bulk_user = op->direct_free_user;
  int e = op->direct_errno;
  if (!e) {
    if (bulk_free) bulk_free(bulk_user);
    cw__download_reply(op, NULL, NULL, NULL);
    return;
  }
  if (e == EFAULT) {  // the address the client named
    if (bulk_free) bulk_free(bulk_user);
    cw_worker_op_fail(op, cw_worker_direct_error(op, "DOWNLOAD"));
    return;
  }
  if (!op->w->direct_refusal_logged) {
    op->w->direct_refusal_logged = true;
    cw_status_t st = cw_worker_direct_error(op, "DOWNLOAD");
    CW_LOGI("%s; sending the bytes over the socket", cw_status_message(st));
    cw_status_free(st);
  }
  cw__download_reply(op, bulk, bulk_free, bulk_user);
}

static void cw__download_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!cw__buffer_usable(op, e)) return;
  uint64_t size = 0;
  cw_status_t st = cw_array_extent(e->dtype, e->dims, e->rank, NULL, 0, &size);
  if (!st) st = cw_worker_op_copy_dims(op, e->dims, e->rank);
  if (!st) {
    op->size = size;
    op->dtype = e->dtype;
    op->device = e->device;
  }
  if (!st && (op->range_offset > size || op->range_length > size - op->range_offset)) {
    st = op->range_length
             ? cw_make_status(CW_OUT_OF_RANGE, "%" PRIu64 " bytes from byte %" PRIu64 " are "
                              "not within its %" PRIu64, op->range_length, op->range_offset, size)
             : cw_make_status(CW_OUT_OF_RANGE, "byte %" PRIu64 " is past its %" PRIu64
                              " bytes", op->range_offset, size);
  }
  // Same host: only into room the client said it has; else as bulk, which
  // the client's reader checks against its buffer.
  uint64_t sent = st ? 0 : cw__range_length(op);
  if (!st && op->direct_address && sent > op->direct_capacity) op->direct_address = 0;
  if (!st && op->direct_address) st = cw_worker_direct_check(op->conn, op->direct_address, sent);
  PJRT_Event* ev = NULL;
  if (!st) st = cw_worker_fetch_start(op, e, &ev);
  if (st) {
    cw_worker_op_fail(op, cw_status_annotate(st, "DOWNLOAD %" PRIu64, op->id));
    return;
  }
  cw_worker_when_ready(op->w, ev, cw__download_done, op);
}

void cw_worker_handle_download(cw_net_conn_t* nc, const cw_frame_header_t* h,
                               ProtobufCMessage** msg) {
  const Causeway__V1__DownloadRequest* r = (const Causeway__V1__DownloadRequest*)*msg;
  uint64_t peer_address = r->peer_address, peer_capacity = r->peer_capacity;
  uint64_t offset = r->offset, length = r->length;
  cw_op_t* op = cw_worker_op_for_wait(cw_net_conn_user(nc), h, r->buffer_id, cw__download_cont);
  if (!op) return;
  op->direct_address = peer_address;
  op->direct_capacity = peer_capacity;
  op->range_offset = offset;
  op->range_length = length;
  cw_worker_op_start_wait(op);
}

static void cw__await_done(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    cw_worker_op_fail(op, status);
    return;
  }
  cw_store_entry_t* e = op->src;  // held: still there if deleted meanwhile
  Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
  if (e) {
    info.dtype = (Causeway__V1__DType)e->dtype;
    info.dims = e->dims;
    info.n_dims = e->rank;
    info.device = e->device;
    info.size = e->bytes;
    if (e->kind == CW_STORE_BUFFER && e->handle) {
      info.device_address = (uint64_t)cw_pjrt_buffer_pointer(w->pjrt, (PJRT_Buffer*)e->handle);
    }
  }
  info.buffer_id = op->id;
  cw_worker_reply(op->conn, op->type, op->request_id, &info.base);
  cw_worker_op_free(op);
}

static void cw__await_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (e && e->kind == CW_STORE_EXECUTABLE) {
    if (e->state == CW_STORE_ERROR) {
      cw_worker_op_fail(op, cw_status_clone(e->error));
      return;
    }
    cw__await_done(op->w, op, cw_ok_status());
    return;
  }
  if (!cw__buffer_usable(op, e)) return;
  PJRT_Event* ev = NULL;
  cw_status_t st = cw_pjrt_ready_event(op->w->pjrt, (PJRT_Buffer*)e->handle, &ev);
  if (st) {
    cw_worker_op_fail(op, st);
    return;
  }
  cw_worker_when_ready(op->w, ev, cw__await_done, op);
}

void cw_worker_handle_await(cw_net_conn_t* nc, const cw_frame_header_t* h,
                            ProtobufCMessage** msg) {
  uint64_t id = ((const Causeway__V1__AwaitRequest*)*msg)->buffer_id;
  cw_op_t* op = cw_worker_op_for_wait(cw_net_conn_user(nc), h, id, cw__await_cont);
  if (op) cw_worker_op_start_wait(op);
}

// --- COPY, EXPECT, DELETE ---------------------------------------------------------

static void cw__copy_cont(cw_op_t* op, cw_store_entry_t* src);

// A COPY's wait for memory ended: it copies now, or fails.
static void cw__copy_mem_ready(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  op->mem_wait = NULL;
  cw_store_entry_t* dst = cw_worker_op_own_entry(op, op->dst_id);
  if (status) {
    if (dst) cw__fail_entry(op, dst, status);
    else cw_worker_op_fail(op, status);
    return;
  }
  if (dst && op->src) cw_worker_mem_charge(w, dst, op->dst_device, op->src->bytes);
  op->mem_admitted = true;
  cw__copy_cont(op, op->src);
}

static void cw__copy_cont(cw_op_t* op, cw_store_entry_t* src) {
  cw_worker_t* w = op->w;
  cw_store_entry_t* dst = cw_worker_op_own_entry(op, op->dst_id);
  if (!dst) {
    cw_worker_op_fail(op, cw_make_status(CW_CANCELLED, "buffer %" PRIu64 " was deleted",
                                         op->dst_id));
    return;
  }
  cw_status_t st = cw_ok_status();
  if (!src) {
    st = cw_make_status(CW_NOT_FOUND, "buffer %" PRIu64 " not found", op->id);
  } else if (src->kind != CW_STORE_BUFFER) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "object %" PRIu64 " is not a buffer", op->id);
  } else if (src->state == CW_STORE_ERROR) {
    st = cw_status_carry(src->error, "input ", "input %" PRIu64 " failed", op->id);
  }
  if (!st && !op->mem_admitted && cw_worker_mem_limited(w)) {
    // The copy's memory on its device, before PJRT takes it.
    uint64_t* need = cw_worker_mem_scratch(w);
    need[op->dst_device] = src->bytes;
    char what[64];
    snprintf(what, sizeof(what), "COPY %" PRIu64 " to %" PRIu64, op->id, op->dst_id);
    st = cw_worker_mem_reserve(w, op->skey, need, what, cw__copy_mem_ready, op, &op->mem_wait);
    if (!st && op->mem_wait) return;  // cw__copy_mem_ready goes on
  }
  if (!st && !op->mem_admitted) {
    cw_worker_mem_charge(w, dst, op->dst_device, src->bytes);
    op->mem_admitted = true;
  }
  PJRT_Buffer* out = NULL;
  if (!st) st = cw_pjrt_copy(w->pjrt, (PJRT_Buffer*)src->handle, op->dst_device, op->memory,
                                   &out);
  if (!st) st = cw_worker_entry_set_array(w, dst, src->dtype, src->dims, src->rank, op->dst_device);
  PJRT_Event* ev = NULL;
  if (!st) st = cw_pjrt_ready_event(w->pjrt, out, &ev);
  if (st) {
    cw_pjrt_buffer_destroy(w->pjrt, out);
    cw__fail_entry(op, dst, st);
    return;
  }
  cw_store_set_ready(w->store, dst, out);
  cw_worker_when_ready(w, ev, cw__upload_ready, op);  // Ack(dst_id) when ready
}

void cw_worker_handle_copy(cw_net_conn_t* nc, const cw_frame_header_t* h,
                           ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  const Causeway__V1__CopyRequest* r = (const Causeway__V1__CopyRequest*)*msg;
  cw_status_t st = cw_worker_check_device(c->w, r->dst_device);
  PJRT_Memory* memory = NULL;
  if (!st) st = cw_pjrt_memory_of_kind(c->w->pjrt, r->dst_device, r->dst_memory_kind, &memory);
  cw_store_entry_t* dst = NULL;
  if (!st) st = cw_store_insert(c->w->store, c->session->key, r->dst_id, CW_STORE_BUFFER, &dst);
  if (!st && r->src_id == r->dst_id) {
    // A new id (an existing one is ALREADY_EXISTS above): the copy would
    // wait for its own pending destination.
    cw_store_remove(c->w->store, dst);
    st = cw_make_status(CW_INVALID_ARGUMENT, "buffer %" PRIu64 " is both source and destination",
                        r->src_id);
  }
  if (st) {
    cw_worker_reply_error(c, h->type, h->request_id, cw_status_annotate(st, "COPY"));
    return;
  }
  cw_op_t* op = cw_worker_op_for_wait(c, h, r->src_id, cw__copy_cont);
  if (!op) {
    cw_store_remove(c->w->store, dst);
    return;
  }
  op->dst_id = r->dst_id;
  op->serial = dst->serial;
  op->dst_device = r->dst_device;
  op->memory = memory;
  cw_worker_op_start_wait(op);
}

void cw_worker_handle_expect(cw_net_conn_t* nc, const cw_frame_header_t* h,
                             ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  const Causeway__V1__ExpectRequest* r = (const Causeway__V1__ExpectRequest*)*msg;
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = r->buffer_id;
  if (r->error) {
    // The PUT will not come: what waits for the buffer fails (one deleted
    // while requests wait for it first, as a PUT would fill it).
    cw_store_t* store = c->w->store;
    cw_store_entry_t* e = cw_store_lookup_detached_put(store, c->session->key, r->buffer_id);
    if (!e) e = cw_store_lookup(store, c->session->key, r->buffer_id);
    if (e && e->kind == CW_STORE_BUFFER && e->state == CW_STORE_PENDING && e->awaits_put &&
        !e->filling) {
      cw_store_set_error(store, e, cw_error_reply_to_status(r->error, NULL));
    }
    cw_worker_reply(c, h->type, h->request_id, &ack.base);
    return;
  }
  cw_store_entry_t* e = cw_store_lookup(c->w->store, c->session->key, r->buffer_id);
  cw_status_t st = cw_ok_status();
  if (e && !(e->from_put && e->kind == CW_STORE_BUFFER)) {
    st = cw_make_status(CW_ALREADY_EXISTS, "buffer %" PRIu64 " already exists", r->buffer_id);
  } else if (!e) {
    st = cw_store_insert(c->w->store, c->session->key, r->buffer_id, CW_STORE_BUFFER, &e);
    if (!st) e->awaits_put = true;
  }
  if (st) {
    cw_worker_reply_error(c, h->type, h->request_id, cw_status_annotate(st, "EXPECT"));
    return;
  }
  cw_worker_reply(c, h->type, h->request_id, &ack.base);
}

void cw_worker_handle_delete(cw_net_conn_t* nc, const cw_frame_header_t* h,
                             ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  const Causeway__V1__DeleteRequest* r = (const Causeway__V1__DeleteRequest*)*msg;
  char missing[256];
  size_t used = 0;
  size_t num_missing = 0;
  missing[0] = 0;
  for (size_t i = 0; i < r->n_ids; ++i) {
    cw_store_entry_t* e = cw_store_lookup(c->w->store, c->session->key, r->ids[i]);
    if (e) {
      // Failing it runs its waiters now: a launch that donated it drops it
      // and lets it go (freed) before the removal below.
      cw_store_entry_retain(e);
      if (e->parts) {
        // An upload in parts no later part can reach now: what waits for
        // the buffer (and keeps it, detached) hears so.
        e->filling = false;
        cw_store_set_error(c->w->store, e, cw_make_status(CW_CANCELLED, "buffer %" PRIu64
                                                          " was deleted while it was uploaded "
                                                          "in parts", r->ids[i]));
      }
      cw_store_remove(c->w->store, e);
      cw_store_entry_release(c->w->store, e);
      continue;
    }
    if (num_missing++ < 16 && used < sizeof(missing)) {
      int n = snprintf(missing + used, sizeof(missing) - used, "%s%" PRIu64, used ? ", " : "",
                       r->ids[i]);
      if (n > 0) used += (size_t)n;
    }
  }
  if (num_missing) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_make_status(CW_NOT_FOUND, "%zu unknown ids not deleted: %s%s",
                                         num_missing, missing, num_missing > 16 ? ", ..." : ""));
    return;
  }
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = r->n_ids ? r->ids[0] : 0;
  cw_worker_reply(c, h->type, h->request_id, &ack.base);
}
