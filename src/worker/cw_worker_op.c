// Requests in progress (see cw_worker_op.h) and their staging memory.
#include "cw_worker_op.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_time.h"
#include "cw_worker_conn.h"
#include "cw_worker_mem.h"
#include "cw_worker_pin.h"
#include "cw_worker_transfer.h"

// A staging block handed to a write or a PJRT event, to give back on
// completion (w NULL: not the cache's, plain free()).
typedef struct cw_block_ref_s {
  cw_worker_t* w;
  void* ptr;
  uint64_t size;
} cw_block_ref_t;

void* cw_worker_staging_alloc(cw_worker_t* w, uint64_t size) {
  return cw_staging_alloc(w->staging, size);
}

void cw_worker_staging_free(cw_worker_t* w, void* p, uint64_t size) {
  cw_staging_free(w->staging, p, size);
}

static void cw__block_ref_free(void* user) {
  cw_block_ref_t* r = user;
  if (r->w) cw_worker_staging_free(r->w, r->ptr, r->size);
  else free(r->ptr);
  free(r);
}

static void cw__free_plain(void* p) { free(p); }

void cw_worker_op_staging_ref(cw_op_t* op, void (**out_fn)(void*), void** out_user) {
  cw_block_ref_t* r = malloc(sizeof(*r));
  if (!r) {
    // No reference to give it back to the cache with: freed outright.
    *out_fn = cw__free_plain;
    *out_user = op->staging;
  } else {
    *r = (cw_block_ref_t){op->staging_foreign ? NULL : op->w, op->staging, op->size};
    *out_fn = cw__block_ref_free;
    *out_user = r;
  }
  op->staging = NULL;
}

cw_op_t* cw_worker_op_create(cw_conn_t* c, uint16_t type, uint64_t request_id) {
  cw_op_t* op = calloc(1, sizeof(*op));
  if (!op) return NULL;
  op->w = c->w;
  op->conn = c;
  cw_worker_conn_ref(c);
  op->type = type;
  op->request_id = request_id;
  op->skey = c->session ? c->session->key : 0;
  op->device = -1;
  op->dst_device = -1;
  op->trace_start_ns = cw_time_now_ns();
  c->w->ops_live++;
  return op;
}

void cw_worker_op_free(cw_op_t* op) {
  if (!op) return;
  if (op->msg) protobuf_c_message_free_unpacked(op->msg, NULL);
  if (op->staging_foreign) free(op->staging);
  else cw_worker_staging_free(op->w, op->staging, op->size);
  if (op->parts) cw_worker_upload_part_abandon(op->w, op->parts);
  cw_worker_pin_release(op->pin);
  cw_worker_pin_unkeep(op->keep);
  cw_store_entry_release(op->w->store, op->src);
  free(op->dims);
  free(op->peer_address);
  free(op->memory_kind);
  free(op->name);
  cw_pjrt_shapes_free(op->params, op->num_params);
  free(op->exe_devices);
  free(op->output_bytes);
  cw_worker_mem_cancel(op->w, op->mem_wait);
  cw_status_free(op->status);
  if (op->exe) cw_pjrt_executable_destroy(op->w->pjrt, op->exe);
  assert(op->w->ops_live > 0);
  op->w->ops_live--;
  cw_worker_conn_unref(op->conn);
  free(op);
}

void cw_worker_op_fail(cw_op_t* op, cw_status_t status) {
  cw_worker_reply_error(op->conn, op->type, op->request_id, status);
  cw_worker_op_free(op);
}

void cw_worker_op_ack(cw_op_t* op, uint64_t id) {
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = id;
  cw_worker_reply(op->conn, op->type, op->request_id, &ack.base);
  cw_worker_op_free(op);
}

cw_store_entry_t* cw_worker_op_own_entry(cw_op_t* op, uint64_t id) {
  cw_store_entry_t* e = cw_store_lookup_serial(op->w->store, op->skey, id, op->serial);
  return (e && e->state == CW_STORE_PENDING) ? e : NULL;
}

static void cw__op_waiter(void* user) { cw_worker_op_start_wait((cw_op_t*)user); }

void cw_worker_op_start_wait(cw_op_t* op) {
  if (!op->src_resolved) {
    op->src_resolved = true;
    op->src = op->skey ? cw_store_lookup(op->w->store, op->skey, op->id) : NULL;
    if (op->src) cw_store_entry_retain(op->src);
  }
  cw_store_entry_t* e = op->src;
  // A read of an executable that names a buffer still being made fails the
  // same once it is made: waiting could be for ever (a PUT that never comes),
  // and the controller's COMPILE whose LOAD met the id waited with it,
  // holding its session's relayed requests (and their seqs) behind it.
  if (e && e->state == CW_STORE_PENDING && (!op->want_kind || (int)e->kind == op->want_kind)) {
    cw_status_t st = cw_store_add_waiter(op->w->store, e, cw__op_waiter, op);
    if (st) cw_worker_op_fail(op, st);
    return;
  }
  op->cont(op, e);
}

cw_op_t* cw_worker_op_for_wait(cw_conn_t* c, const cw_frame_header_t* h, uint64_t id,
                               cw_op_fn cont) {
  cw_op_t* op = cw_worker_op_create(c, h->type, h->request_id);
  if (!op) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return NULL;
  }
  op->id = id;
  op->cont = cont;
  return op;
}

bool cw_worker_op_need_kind(cw_op_t* op, const cw_store_entry_t* e, int kind, const char* what,
                            const char* a_what) {
  if (!e) {
    cw_worker_op_fail(op, cw_make_status(CW_NOT_FOUND, "%s %" PRIu64 " not found", what, op->id));
    return false;
  }
  if ((int)e->kind != kind) {
    cw_worker_op_fail(op, cw_make_status(CW_INVALID_ARGUMENT, "object %" PRIu64 " is not %s",
                                         op->id, a_what));
    return false;
  }
  if (e->state == CW_STORE_ERROR) {
    cw_worker_op_fail(op, cw_status_clone(e->error));
    return false;
  }
  return true;
}

cw_status_t cw_worker_op_copy_dims(cw_op_t* op, const int64_t* dims, size_t rank) {
  op->dims = malloc((rank ? rank : 1) * sizeof(int64_t));
  if (!op->dims) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (rank) memcpy(op->dims, dims, rank * sizeof(int64_t));
  op->rank = rank;
  return cw_ok_status();
}

cw_status_t cw_worker_entry_set_array(cw_worker_t* w, cw_store_entry_t* e, int dtype,
                                      const int64_t* dims, size_t rank, int device) {
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
  cw_store_set_bytes(w->store, e, bytes);
  return cw_ok_status();
}

cw_status_t cw_worker_check_device(cw_worker_t* w, int device) {
  if (device < 0 || (size_t)device >= w->pjrt->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "device %d is not one of this worker's %zu devices",
                          device, w->pjrt->num_devices);
  }
  return cw_ok_status();
}
