#include "cw_msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_frame.h"
#include "cw_hostcb.h"

#define CW__PIN(name) \
  _Static_assert((int)CW_MSG_##name == (int)CAUSEWAY__V1__MSG_TYPE__MSG_##name, \
                 "frame type " #name " must equal the proto enum")
CW__PIN(HELLO);
CW__PIN(PING);
CW__PIN(INVENTORY);
CW__PIN(COMPILE);
CW__PIN(SERIALIZE);
CW__PIN(LOAD);
CW__PIN(UPLOAD);
CW__PIN(LAUNCH);
CW__PIN(DOWNLOAD);
CW__PIN(COPY);
CW__PIN(SEND);
CW__PIN(PUT);
CW__PIN(EXPECT);
CW__PIN(DELETE);
CW__PIN(STATS);
CW__PIN(AWAIT);
CW__PIN(LAUNCH_GO);
CW__PIN(HOST_CALLBACK);
CW__PIN(REGISTER);
CW__PIN(OPEN_SESSION);
CW__PIN(EXE_INFO);
CW__PIN(SESSION_RESUME);
CW__PIN(EVENT);
CW__PIN(TRACE_START);
CW__PIN(TRACE_FETCH);
CW__PIN(HEALTH_HEARTBEAT);
CW__PIN(HEALTH_REJOIN);
CW__PIN(ADMIN_STATUS);
CW__PIN(ADMIN_PAUSE);
CW__PIN(ADMIN_RESUME);
CW__PIN(ADMIN_DRAIN);
CW__PIN(ADMIN_UNDRAIN);
CW__PIN(ADMIN_HOLD);
CW__PIN(ADMIN_WORKER_DRAIN);
#undef CW__PIN
_Static_assert(CAUSEWAY__V1__ROLE__ROLE_CLIENT == 1 && CAUSEWAY__V1__ROLE__ROLE_WORKER == 2 &&
                   CAUSEWAY__V1__ROLE__ROLE_CONTROLLER == 3,
               "roles are pinned");

static cw_status_t cw__check_extent(const cw_frame_header_t* h, int dtype, const int64_t* dims,
                                    size_t rank, const int64_t* strides, size_t nstrides) {
  uint64_t extent = 0;
  CW_RETURN_IF_ERROR(cw_array_extent(dtype, dims, rank, strides, nstrides, &extent), "%s",
                     cw_msg_type_name(h->type));
  if (extent != h->bulk_len) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "%s bulk of %llu bytes differs from the array's %llu bytes",
                          cw_msg_type_name(h->type), (unsigned long long)h->bulk_len,
                          (unsigned long long)extent);
  }
  return cw_ok_status();
}

// An UPLOAD carries the array's bytes, exactly; by peer_address (same host:
// the worker copies them from the sender's memory) none, but the array must
// still have an extent.
static cw_status_t cw__upload_bulk(const cw_frame_header_t* h, const ProtobufCMessage* msg) {
  const Causeway__V1__UploadRequest* r = (const Causeway__V1__UploadRequest*)msg;
  if (r->part != CAUSEWAY__V1__UPLOAD_PART__UPLOAD_WHOLE) {
    // In parts: dense, through the socket; the worker checks each part's
    // place in the array it makes.
    if ((unsigned)r->part > CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST) {
      return cw_make_status(CW_INVALID_ARGUMENT, "UPLOAD part kind %d is not one of 0-3",
                            (int)r->part);
    }
    if (r->peer_address || r->n_byte_strides) {
      return cw_make_status(CW_INVALID_ARGUMENT, "an UPLOAD in parts has neither byte_strides "
                            "nor a peer_address");
    }
    if (r->part != CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST) return cw_ok_status();
    uint64_t extent = 0;
    CW_RETURN_IF_ERROR(cw_array_extent(r->dtype, r->dims, r->n_dims, NULL, 0, &extent), "UPLOAD");
    if (h->bulk_len > extent) {
      return cw_make_status(CW_INVALID_ARGUMENT, "UPLOAD's first part of %llu bytes is more than "
                            "the array's %llu bytes", (unsigned long long)h->bulk_len,
                            (unsigned long long)extent);
    }
    return cw_ok_status();
  }
  if (!r->peer_address) {
    return cw__check_extent(h, r->dtype, r->dims, r->n_dims, r->byte_strides, r->n_byte_strides);
  }
  uint64_t extent = 0;
  CW_RETURN_IF_ERROR(
      cw_array_extent(r->dtype, r->dims, r->n_dims, r->byte_strides, r->n_byte_strides, &extent),
      "UPLOAD");
  if (h->bulk_len) {
    return cw_make_status(CW_INVALID_ARGUMENT, "UPLOAD by peer_address carries no bulk (it has "
                          "%llu bytes)", (unsigned long long)h->bulk_len);
  }
  return cw_ok_status();
}

static cw_status_t cw__put_bulk(const cw_frame_header_t* h, const ProtobufCMessage* msg) {
  const Causeway__V1__PutRequest* r = (const Causeway__V1__PutRequest*)msg;
  if (!r->error) return cw__check_extent(h, r->dtype, r->dims, r->n_dims, NULL, 0);
  if (h->bulk_len) return cw_make_status(CW_INVALID_ARGUMENT, "PUT with an error carries no bulk");
  return cw_ok_status();
}

// A HOST_CALLBACK request carries its operands' bytes, exactly.
static cw_status_t cw__host_callback_bulk(const cw_frame_header_t* h, const ProtobufCMessage* msg) {
  const Causeway__V1__HostCallbackRequest* r = (const Causeway__V1__HostCallbackRequest*)msg;
  uint64_t total = 0, results = 0;
  CW_RETURN_IF_ERROR(cw_hostcb_layout(r->results, r->n_results, "result", NULL, &results),
                     "HOST_CALLBACK");
  CW_RETURN_IF_ERROR(cw_hostcb_layout(r->operands, r->n_operands, "operand", NULL, &total),
                     "HOST_CALLBACK");
  CW_RETURN_IF_ERROR(cw_hostcb_check_aliases(r), "HOST_CALLBACK");
  if (total != h->bulk_len) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HOST_CALLBACK bulk of %llu bytes differs from its operands' %llu bytes",
                          (unsigned long long)h->bulk_len, (unsigned long long)total);
  }
  return cw_ok_status();
}

#define CW__SEQ_IS_U64(type) \
  _Static_assert(sizeof(((Causeway__V1__##type*)0)->seq) == 8, #type ".seq is a uint64")
CW__SEQ_IS_U64(UploadRequest);
CW__SEQ_IS_U64(LaunchRequest);
CW__SEQ_IS_U64(DownloadRequest);
CW__SEQ_IS_U64(CopyRequest);
CW__SEQ_IS_U64(SendRequest);
CW__SEQ_IS_U64(ExpectRequest);
CW__SEQ_IS_U64(DeleteRequest);
CW__SEQ_IS_U64(AwaitRequest);
#undef CW__SEQ_IS_U64

#define CW__D(x) &causeway__v1__##x##__descriptor
#define CW__SEQ(type) offsetof(Causeway__V1__##type, seq)
#define C CW_ROLE_CLIENT_BIT
#define W CW_ROLE_WORKER_BIT
#define K CW_ROLE_CONTROLLER_BIT
#define BQ CW_MSG_BULK_REQUEST
#define BR CW_MSG_BULK_REPLY

// clang-format off
static const cw_msg_info_t cw__msgs[CW_MSG_TYPE_MAX + 1] = {
  //  name                   request                         reply                      senders       seq                     bulk check            session drain
  [CW_MSG_HELLO] =        {"HELLO",        CW__D(hello_request),        CW__D(hello_reply),        CW_ROLES_ANY, 0,                      0,  NULL,            false, false},
  [CW_MSG_PING] =         {"PING",         CW__D(ping),                 CW__D(ping),               CW_ROLES_ANY, 0,                      0,  NULL,            false, false},
  [CW_MSG_INVENTORY] =    {"INVENTORY",    CW__D(inventory_request),    CW__D(inventory),          CW_ROLES_ANY, 0,                      0,  NULL,            false, false},
  [CW_MSG_COMPILE] =      {"COMPILE",      CW__D(compile_request),      CW__D(compile_reply),      C | K,        0,                      0,  NULL,            true,  true},
  [CW_MSG_SERIALIZE] =    {"SERIALIZE",    CW__D(serialize_request),    CW__D(serialize_reply),    C | K,        0,                      BR, NULL,            true,  false},
  [CW_MSG_LOAD] =         {"LOAD",         CW__D(load_request),         CW__D(compile_reply),      C | K,        0,                      BQ, NULL,            true,  true},
  [CW_MSG_UPLOAD] =       {"UPLOAD",       CW__D(upload_request),       CW__D(ack),                C,            CW__SEQ(UploadRequest), BQ, cw__upload_bulk, true,  true},
  [CW_MSG_LAUNCH] =       {"LAUNCH",       CW__D(launch_request),       CW__D(ack),                C | K,        CW__SEQ(LaunchRequest), 0,  NULL,            true,  true},
  [CW_MSG_DOWNLOAD] =     {"DOWNLOAD",     CW__D(download_request),     CW__D(array_info),         C,            CW__SEQ(DownloadRequest), BR, NULL,          true,  false},
  [CW_MSG_COPY] =         {"COPY",         CW__D(copy_request),         CW__D(ack),                C,            CW__SEQ(CopyRequest),   0,  NULL,            true,  false},
  [CW_MSG_SEND] =         {"SEND",         CW__D(send_request),         CW__D(ack),                C,            CW__SEQ(SendRequest),   0,  NULL,            true,  false},
  [CW_MSG_PUT] =          {"PUT",          CW__D(put_request),          CW__D(ack),                W,            0,                      BQ, cw__put_bulk,    false, false},
  [CW_MSG_EXPECT] =       {"EXPECT",       CW__D(expect_request),       CW__D(ack),                C,            CW__SEQ(ExpectRequest), 0,  NULL,            true,  false},
  [CW_MSG_DELETE] =       {"DELETE",       CW__D(delete_request),       CW__D(ack),                C | K,        CW__SEQ(DeleteRequest), 0,  NULL,            true,  false},
  [CW_MSG_STATS] =        {"STATS",        CW__D(stats_request),        CW__D(stats),              CW_ROLES_ANY, 0,                      0,  NULL,            false, false},
  [CW_MSG_AWAIT] =        {"AWAIT",        CW__D(await_request),        CW__D(array_info),         C,            CW__SEQ(AwaitRequest),  0,  NULL,            true,  false},
  [CW_MSG_LAUNCH_GO] =    {"LAUNCH_GO",    CW__D(launch_go_request),    CW__D(ack),                K,            0,                      0,  NULL,            true,  false},
  // Host callbacks (18; 19-21 reserved): the worker asks the client to run a callable.
  [CW_MSG_HOST_CALLBACK] = {"HOST_CALLBACK", CW__D(host_callback_request), CW__D(host_callback_reply), W, 0,                  BQ | BR, cw__host_callback_bulk, true, false},
  [CW_MSG_REGISTER] =     {"REGISTER",     CW__D(register_request),     CW__D(register_reply),     W,            0,                      0,  NULL,            false, false},
  [CW_MSG_OPEN_SESSION] = {"OPEN_SESSION", CW__D(open_session_request), CW__D(session_info),       C,            0,                      0,  NULL,            true,  false},
  [CW_MSG_EXE_INFO] =     {"EXE_INFO",     CW__D(exe_info_request),     CW__D(executable_info),    C | K,        0,                      0,  NULL,            true,  false},
  [CW_MSG_SESSION_RESUME] = {"SESSION_RESUME", CW__D(session_resume_request), CW__D(session_info), C,         0,                      0,  NULL,            true,  false},
  // A worker too: KEEPALIVE, to a peer that asked for it in its HELLO.
  [CW_MSG_EVENT] =        {"EVENT",        CW__D(cluster_event),        NULL,                      K | W,        0,                      0,  NULL,            false, false},
  [CW_MSG_HEALTH_HEARTBEAT] = {"HEALTH_HEARTBEAT", CW__D(health_heartbeat), NULL,                  W,            0,                      0,  NULL,            false, false},
  [CW_MSG_HEALTH_REJOIN] = {"HEALTH_REJOIN", CW__D(health_rejoin_request), CW__D(health_rejoin_reply), C,            0,                      0,  NULL,            true,  false},
  [CW_MSG_ADMIN_STATUS] = {"ADMIN_STATUS", CW__D(admin_status_request), CW__D(admin_status),       C,            0,                      0,  NULL,            false, false},
  [CW_MSG_ADMIN_PAUSE] =  {"ADMIN_PAUSE",  CW__D(admin_session_request), CW__D(admin_ack),        C,            0,                      0,  NULL,            false, false},
  [CW_MSG_ADMIN_RESUME] = {"ADMIN_RESUME", CW__D(admin_session_request), CW__D(admin_ack),        C,            0,                      0,  NULL,            false, false},
  [CW_MSG_ADMIN_DRAIN] =  {"ADMIN_DRAIN",  CW__D(admin_drain_request),  CW__D(admin_ack),          C,            0,                      0,  NULL,            false, false},
  [CW_MSG_ADMIN_UNDRAIN] = {"ADMIN_UNDRAIN", CW__D(admin_drain_request), CW__D(admin_ack),        C,            0,                      0,  NULL,            false, false},
  [CW_MSG_ADMIN_HOLD] =   {"ADMIN_HOLD",   CW__D(admin_hold_request),   CW__D(admin_ack),          K,            0,                      0,  NULL,            true,  false},
  [CW_MSG_ADMIN_WORKER_DRAIN] = {"ADMIN_WORKER_DRAIN", CW__D(admin_worker_drain_request), CW__D(admin_ack), K, 0,                      0,  NULL,            false, false},
  [CW_MSG_TRACE_START] =  {"TRACE_START",  CW__D(trace_start_request),  CW__D(trace_clock),        C,            0,                      0,  NULL,            true,  false},
  [CW_MSG_TRACE_FETCH] =  {"TRACE_FETCH",  CW__D(trace_fetch_request),  CW__D(trace_events),       C,            0,                      0,  NULL,            true,  false},
};
// clang-format on
#undef C
#undef W
#undef K
#undef BQ
#undef BR

const cw_msg_info_t* cw_msg_info(uint16_t type) {
  return (type >= 1 && type <= CW_MSG_TYPE_MAX && cw__msgs[type].name) ? &cw__msgs[type] : NULL;
}

const char* cw_msg_type_name(uint16_t type) {
  const cw_msg_info_t* m = cw_msg_info(type);
  return m ? m->name : "UNKNOWN";
}

const ProtobufCMessageDescriptor* cw_msg_request_descriptor(uint16_t type) {
  const cw_msg_info_t* m = cw_msg_info(type);
  return m ? m->request : NULL;
}

const ProtobufCMessageDescriptor* cw_msg_reply_descriptor(uint16_t type) {
  const cw_msg_info_t* m = cw_msg_info(type);
  return m ? m->reply : NULL;
}

uint64_t cw_msg_seq(uint16_t type, const ProtobufCMessage* msg) {
  const cw_msg_info_t* m = cw_msg_info(type);
  if (!m || !m->seq_offset || !msg) return 0;
  uint64_t seq;
  memcpy(&seq, (const char*)msg + m->seq_offset, sizeof(seq));
  return seq;
}

uint64_t cw_msg_session_life(uint16_t type, const ProtobufCMessage* msg) {
  if (!msg) return 0;
  switch (type) {
    case CW_MSG_LAUNCH: return ((const Causeway__V1__LaunchRequest*)msg)->session_life;
    case CW_MSG_DELETE: return ((const Causeway__V1__DeleteRequest*)msg)->session_life;
    default: return 0;
  }
}

void cw_msg_set_session_life(uint16_t type, ProtobufCMessage* msg, uint64_t life) {
  if (!msg) return;
  switch (type) {
    case CW_MSG_LAUNCH: ((Causeway__V1__LaunchRequest*)msg)->session_life = life; break;
    case CW_MSG_DELETE: ((Causeway__V1__DeleteRequest*)msg)->session_life = life; break;
    default: break;
  }
}

cw_status_t cw_msg_check_bulk(const cw_frame_header_t* h, const ProtobufCMessage* msg) {
  if (h->flags & CW_FRAME_REPLY) return cw_ok_status();
  const cw_msg_info_t* m = cw_msg_info(h->type);
  if (m && m->check_bulk) return m->check_bulk(h, msg);
  if (h->bulk_len && !(m && (m->bulk & CW_MSG_BULK_REQUEST))) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s carries no bulk", cw_msg_type_name(h->type));
  }
  return cw_ok_status();
}

void cw_msg_senders_text(uint32_t senders, char* out, size_t capacity) {
  static const struct {
    uint32_t bit;
    const char* text;
  } kinds[] = {{CW_ROLE_CLIENT_BIT, "clients"},
               {CW_ROLE_WORKER_BIT, "workers"},
               {CW_ROLE_CONTROLLER_BIT, "the controller"}};
  size_t used = 0;
  int n = 0;
  if (capacity) out[0] = 0;
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); ++i) {
    if (!(senders & kinds[i].bit) || used >= capacity) continue;
    int k = snprintf(out + used, capacity - used, "%s%s", n++ ? " or " : "", kinds[i].text);
    if (k > 0) used += (size_t)k;
  }
  if (!n && capacity) snprintf(out, capacity, "nobody");
}

const char* cw_role_name(int role) {
  switch (role) {
    case CAUSEWAY__V1__ROLE__ROLE_NONE: return "NONE";
    case CAUSEWAY__V1__ROLE__ROLE_CLIENT: return "CLIENT";
    case CAUSEWAY__V1__ROLE__ROLE_WORKER: return "WORKER";
    case CAUSEWAY__V1__ROLE__ROLE_CONTROLLER: return "CONTROLLER";
    default: return "UNKNOWN";
  }
}

uint8_t* cw_msg_pack(const ProtobufCMessage* m, size_t* out_len) {
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t* buf = malloc(len ? len : 1);
  if (buf) protobuf_c_message_pack(m, buf);
  *out_len = len;
  return buf;
}

// A field's tag (two bytes from field 16 on) and a varint: what any scalar
// of LaunchRequest takes at most; a packed element takes at most a varint.
#define CW__FIELD_MAX 12
#define CW__LIST_MAX ((size_t)1 << 24)

static size_t cw__id_list_bound(const Causeway__V1__IdList* l) {
  // Its own tag and length, then the ids' tag, length and varints (or a tag
  // each, had they not been packed).
  if (!l || l->base.n_unknown_fields || l->n_ids > CW__LIST_MAX) return SIZE_MAX;
  return 2 * CW__FIELD_MAX + 2 + CW__FIELD_MAX * l->n_ids;
}

size_t cw_msg_packed_bound(const ProtobufCMessage* m) {
  // A field added to either message makes the bound unknown until it is
  // counted here (cw_msg_test pins the count).
  if (!m || m->descriptor != &causeway__v1__launch_request__descriptor ||
      m->descriptor->n_fields != 10 || causeway__v1__id_list__descriptor.n_fields != 1 ||
      m->n_unknown_fields) {
    return SIZE_MAX;
  }
  const Causeway__V1__LaunchRequest* r = (const Causeway__V1__LaunchRequest*)m;
  if (r->n_args > CW__LIST_MAX || r->n_outputs > CW__LIST_MAX || r->n_donate > CW__LIST_MAX) {
    return SIZE_MAX;
  }
  // exe_id, launch_id, sched_stamp, prepare, host_callbacks, seq,
  // session_life; donate's tag and length and its elements.
  size_t n = 7 * CW__FIELD_MAX + 2 * CW__FIELD_MAX + CW__FIELD_MAX * r->n_donate;
  for (size_t i = 0; i < r->n_args; ++i) {
    size_t b = cw__id_list_bound(r->args[i]);
    if (b == SIZE_MAX) return SIZE_MAX;
    n += b;
  }
  for (size_t i = 0; i < r->n_outputs; ++i) {
    size_t b = cw__id_list_bound(r->outputs[i]);
    if (b == SIZE_MAX) return SIZE_MAX;
    n += b;
  }
  return n;
}

ProtobufCMessage* cw_msg_copy(const ProtobufCMessage* m) {
  size_t len = 0;
  uint8_t* buf = cw_msg_pack(m, &len);
  if (!buf) return NULL;
  ProtobufCMessage* out = protobuf_c_message_unpack(m->descriptor, NULL, len, buf);
  free(buf);
  return out;
}
