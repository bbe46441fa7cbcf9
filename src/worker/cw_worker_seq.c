#include "cw_worker_seq.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_msg.h"

#define CW__SEQ_BULK_ALIGN 64

void cw_seq_initialize(cw_seq_t* seq) {
  memset(seq, 0, sizeof(*seq));
  seq->next = 1;
}

void cw_seq_held_free(cw_seq_held_t* held) {
  if (!held) return;
  if (held->msg) protobuf_c_message_free_unpacked(held->msg, NULL);
  free(held->bulk);
  free(held);
}

void cw_seq_deinitialize(cw_seq_t* seq, void (*release_conn)(void* conn, cw_seq_held_t* held)) {
  while (seq->held) {
    cw_seq_held_t* hd = seq->held;
    seq->held = hd->next;
    if (release_conn) release_conn(hd->conn, hd);
    cw_seq_held_free(hd);
  }
  seq->held_tail = NULL;
  seq->held_count = 0;
  seq->held_bytes = 0;
}

uint64_t cw_seq_of_request(uint16_t type, const ProtobufCMessage* msg) {
  if (!msg) return 0;
  switch (type) {
    case CW_MSG_UPLOAD: return ((const Causeway__V1__UploadRequest*)msg)->seq;
    case CW_MSG_LAUNCH: return ((const Causeway__V1__LaunchRequest*)msg)->seq;
    case CW_MSG_DOWNLOAD: return ((const Causeway__V1__DownloadRequest*)msg)->seq;
    case CW_MSG_COPY: return ((const Causeway__V1__CopyRequest*)msg)->seq;
    case CW_MSG_SEND: return ((const Causeway__V1__SendRequest*)msg)->seq;
    case CW_MSG_EXPECT: return ((const Causeway__V1__ExpectRequest*)msg)->seq;
    case CW_MSG_DELETE: return ((const Causeway__V1__DeleteRequest*)msg)->seq;
    case CW_MSG_AWAIT: return ((const Causeway__V1__AwaitRequest*)msg)->seq;
    default: return 0;
  }
}

cw_status_t cw_seq_admit(cw_seq_t* seq, uint64_t request_seq, const cw_frame_header_t* h,
                         ProtobufCMessage** msg, void* conn, int64_t max_requests,
                         int64_t max_bytes, cw_seq_held_t** out_held) {
  *out_held = NULL;
  // The next seq may be held already (its bytes still arriving; drained
  // otherwise): then this one is a duplicate, as behind it. Taken as the
  // next, it left that one at the head for good, and the session stalled.
  if (request_seq == seq->next && !(seq->held && seq->held->seq == request_seq)) {
    seq->next++;
    return cw_ok_status();
  }
  if (request_seq < seq->next) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "%s with seq %" PRIu64 " " CW_MSG_SEQ_DUPLICATE " %" PRIu64 ")",
                          cw_msg_type_name(h->type), request_seq, seq->next);
  }
  cw_seq_held_t** pp = &seq->held;
  if (seq->held_tail && seq->held_tail->seq < request_seq) {
    pp = &seq->held_tail->next;  // the common case: after every held one
  } else {
    while (*pp && (*pp)->seq < request_seq) pp = &(*pp)->next;
  }
  if (*pp && (*pp)->seq == request_seq) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s with seq %" PRIu64 " is a duplicate (one "
                          "already waits)", cw_msg_type_name(h->type), request_seq);
  }
  // The bytes held already, not with this request's: flow control keeps a
  // connection's own held bytes under half the limit before each request it
  // adds, whatever that request's size (docs/protocol.md).
  uint64_t byte_cap = max_bytes > 0 ? (uint64_t)max_bytes : 0;
  bool bytes_over = seq->held_bytes > 0 && seq->held_bytes >= byte_cap;
  if ((int64_t)seq->held_count >= max_requests || bytes_over) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED,
                          "%zu requests (%" PRIu64 " bytes) already wait for seq %" PRIu64
                          "; %s with seq %" PRIu64 " (%" PRIu64 " bytes) refused",
                          seq->held_count, seq->held_bytes, seq->next,
                          cw_msg_type_name(h->type), request_seq, h->bulk_len);
  }
  cw_seq_held_t* hd = calloc(1, sizeof(*hd));
  if (!hd) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory holding a request");
  if (h->type == CW_MSG_UPLOAD || h->bulk_len) {
    void* p = NULL;
    if (h->bulk_len > SIZE_MAX - CW__SEQ_BULK_ALIGN ||
        posix_memalign(&p, CW__SEQ_BULK_ALIGN, h->bulk_len ? (size_t)h->bulk_len : 1)) {
      free(hd);
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64
                            " bytes for a held %s", h->bulk_len, cw_msg_type_name(h->type));
    }
    hd->bulk = p;
  }
  hd->seq = request_seq;
  hd->conn = conn;
  hd->header = *h;
  hd->msg = *msg;
  *msg = NULL;
  hd->bulk_ready = h->bulk_len == 0;
  hd->next = *pp;
  *pp = hd;
  if (!hd->next) seq->held_tail = hd;
  seq->held_count++;
  seq->held_bytes += h->bulk_len;
  *out_held = hd;
  return cw_ok_status();
}

cw_seq_held_t* cw_seq_take_ready(cw_seq_t* seq) {
  cw_seq_held_t* hd = seq->held;
  if (!hd || hd->seq != seq->next || !hd->bulk_ready) return NULL;
  seq->held = hd->next;
  if (seq->held_tail == hd) seq->held_tail = NULL;
  hd->next = NULL;
  assert(seq->held_count > 0 && seq->held_bytes >= hd->header.bulk_len);
  seq->held_count--;
  seq->held_bytes -= hd->header.bulk_len;
  seq->next++;
  return hd;
}

size_t cw_seq_forget_conn(cw_seq_t* seq, const void* conn,
                          void (*release_conn)(void* conn, cw_seq_held_t* held)) {
  size_t n = 0;
  cw_seq_held_t** pp = &seq->held;
  seq->held_tail = NULL;
  while (*pp) {
    cw_seq_held_t* hd = *pp;
    if (hd->conn != conn) {
      seq->held_tail = hd;
      pp = &hd->next;
      continue;
    }
    *pp = hd->next;
    assert(seq->held_count > 0 && seq->held_bytes >= hd->header.bulk_len);
    seq->held_count--;
    seq->held_bytes -= hd->header.bulk_len;
    if (release_conn) release_conn(hd->conn, hd);
    cw_seq_held_free(hd);
    n++;
  }
  return n;
}

cw_seq_held_t* cw_seq_held_find(const cw_seq_t* seq, uint64_t request_seq) {
  if (!seq->held_tail || seq->held_tail->seq < request_seq) return NULL;
  cw_seq_held_t* hd = seq->held;
  while (hd && hd->seq < request_seq) hd = hd->next;
  return hd && hd->seq == request_seq ? hd : NULL;
}

void cw_seq_unhold(cw_seq_t* seq, cw_seq_held_t* held) {
  cw_seq_held_t* prev = NULL;
  cw_seq_held_t** pp = &seq->held;
  while (*pp && *pp != held) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (!*pp) return;
  *pp = held->next;
  if (seq->held_tail == held) seq->held_tail = prev;
  held->next = NULL;
  assert(seq->held_count > 0 && seq->held_bytes >= held->header.bulk_len);
  seq->held_count--;
  seq->held_bytes -= held->header.bulk_len;
}
