// SEND: fetch the source, PUT it to the peer, answer when the peer stored it.
#include "cw_worker_send.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_messages.h"
#include "cw_worker_conn.h"
#include "cw_worker_op.h"
#include "cw_worker_pin.h"
#include "cw_worker_trace.h"
#include "cw_worker_transfer.h"

static void cw__put_done(void* user, cw_net_conn_t* peer, cw_status_t status,
                         const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  cw_op_t* op = user;
  free(bulk);
  if (status) {
    cw_worker_op_fail(op, cw_status_annotate(status, "SEND %" PRIu64 " to %s", op->id,
                                             op->peer_address));
    return;
  }
  if (op->status) {
    // The source had failed: the peer now holds the error too.
    cw_status_t st = op->status;
    op->status = NULL;
    cw_worker_op_fail(op, st);
    return;
  }
  op->w->sends++;
  op->w->send_bytes += op->size;
  cw_worker_trace_record(op->w, op->skey, "send", "SEND", op->device, op->trace_start_ns, op->id,
                         op->msg ? cw_msg_seq(op->type, op->msg) : 0, op->size, 0,
                         op->peer_address);
  cw_worker_op_ack(op, op->dst_id);
}

// Sends op's bytes (or op->status as a poisoned PUT) to the peer.
static void cw__put(cw_op_t* op) {
  cw_conn_t* peer = NULL;
  cw_status_t st = cw_worker_conn_peer(op->w, op->peer_address, &peer);
  if (st) {
    cw_worker_op_fail(op, cw_status_annotate(st, "SEND %" PRIu64, op->id));
    return;
  }
  Causeway__V1__PutRequest put = CAUSEWAY__V1__PUT_REQUEST__INIT;
  Causeway__V1__ErrorReply er;
  put.dst_id = op->dst_id;
  put.dst_session = op->dst_session;
  put.dst_device = op->dst_device;
  if (op->memory_kind) put.dst_memory_kind = op->memory_kind;
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
    bulk_free = cw_worker_pin_release;
    bulk_user = op->pin;
    op->pin = NULL;
    op->view = NULL;
  } else if (op->staging) {
    bulk = op->staging;
    size = op->size;
    cw_worker_op_staging_ref(op, &bulk_free, &bulk_user);
  }
  // The request owns op from here; the write owns the bytes.
  cw_net_conn_request(peer->nc, CW_MSG_PUT, &put.base, bulk, size, bulk_free, bulk_user,
                      cw__put_done, op);
}

static void cw__fetched(cw_worker_t* w, void* user, cw_status_t status) {
  cw_op_t* op = user;
  if (status) {
    op->status = status;  // the source failed: poison the peer's copy
  } else if (op->keep) {
    const void* view = NULL;
    cw_pin_t* pin = NULL;
    PJRT_Event* ev = NULL;
    cw_status_t st = cw_worker_fetch_pinned(op, &view, &pin, &ev);
    if (st) {
      cw_worker_op_fail(op, cw_status_annotate(st, "SEND %" PRIu64, op->id));
      return;
    }
    if (!pin) {
      cw_worker_when_ready(w, ev, cw__fetched, op);  // copied after all
      return;
    }
    op->pin = pin;
    op->view = view;
  }
  cw__put(op);
}

static void cw__send_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!e || e->kind != CW_STORE_BUFFER) {
    cw_worker_op_fail(op, cw_make_status(CW_NOT_FOUND, "buffer %" PRIu64 " not found", op->id));
    return;
  }
  cw_status_t st = cw_worker_op_copy_dims(op, e->dims, e->rank);
  if (st) {
    cw_worker_op_fail(op, st);
    return;
  }
  op->dtype = e->dtype;
  if (e->state == CW_STORE_ERROR) {
    op->status = cw_status_clone(e->error);
    cw__put(op);
    return;
  }
  st = cw_array_extent(e->dtype, e->dims, e->rank, NULL, 0, &op->size);
  PJRT_Event* ev = NULL;
  if (!st) st = cw_worker_fetch_start(op, e, &ev);
  if (st) {
    cw_worker_op_fail(op, cw_status_annotate(st, "SEND %" PRIu64, op->id));
    return;
  }
  cw_worker_when_ready(op->w, ev, cw__fetched, op);
}

void cw_worker_handle_send(cw_net_conn_t* nc, const cw_frame_header_t* h,
                           ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  const Causeway__V1__SendRequest* r = (const Causeway__V1__SendRequest*)*msg;
  if (!r->peer_address || !r->peer_address[0] || strlen(r->peer_address) > 200 || !r->dst_id) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_make_status(CW_INVALID_ARGUMENT,
                                         "SEND needs a peer address and dst_id"));
    return;
  }
  cw_op_t* op = cw_worker_op_for_wait(c, h, r->src_id, cw__send_cont);
  if (!op) return;
  op->peer_address = strdup(r->peer_address);
  if (r->dst_memory_kind && r->dst_memory_kind[0]) op->memory_kind = strdup(r->dst_memory_kind);
  if (!op->peer_address || (r->dst_memory_kind && r->dst_memory_kind[0] && !op->memory_kind)) {
    cw_worker_op_fail(op, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  op->dst_id = r->dst_id;
  op->dst_device = r->dst_device;
  op->dst_session = r->dst_session;
  cw_worker_op_start_wait(op);
}
