// Unit tests for the message table (cw_msg.c): what each row says must hold
// everywhere the row is used -- schemas, notices, where `seq` lives, senders,
// bulk -- and the texts refusals are built from.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_frame.h"
#include "cw_msg.h"

static const cw_frame_limits_t limits = {.max_payload = 4096, .max_bulk = 1 << 20};

// Every type the proto's MsgType names (but MSG_NONE) has a row, under the
// same name and number, and no row names a type the proto lacks: the
// _Static_asserts in cw_msg.c pin the C enum, this pins the table.
static void test_msg_table_matches_proto_enum(void** state) {
  const ProtobufCEnumDescriptor* e = &causeway__v1__msg_type__descriptor;
  size_t rows = 0;
  for (unsigned t = 0; t <= 0xffff; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    const ProtobufCEnumValue* v = protobuf_c_enum_descriptor_get_value(e, (int)t);
    if (!m) {
      assert_true(!v || t == CAUSEWAY__V1__MSG_TYPE__MSG_NONE);
      assert_string_equal(cw_msg_type_name((uint16_t)t), "UNKNOWN");
      assert_null(cw_msg_request_descriptor((uint16_t)t));
      assert_null(cw_msg_reply_descriptor((uint16_t)t));
      continue;
    }
    rows++;
    assert_true(t >= 1 && t <= CW_MSG_TYPE_MAX);
    assert_non_null(v);
    assert_int_equal(strncmp(v->name, "MSG_", 4), 0);
    assert_string_equal(v->name + 4, m->name);
    assert_string_equal(cw_msg_type_name((uint16_t)t), m->name);
  }
  assert_int_equal(rows, e->n_values - 1);
  assert_null(cw_msg_info(CW_MSG_TYPE_MAX + 1));
}

// Every known type has a request schema; the accessors hand out the row's.
static void test_msg_request_schemas(void** state) {
  for (unsigned t = 1; t <= CW_MSG_TYPE_MAX; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    if (!m) continue;
    assert_non_null(m->request);
    assert_int_equal(m->request->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
    assert_ptr_equal(cw_msg_request_descriptor((uint16_t)t), m->request);
    assert_ptr_equal(cw_msg_reply_descriptor((uint16_t)t), m->reply);
  }
}

// The header of a frame of type `t` with `flags` and `bulk` bytes.
static cw_status_t decode_header(unsigned t, uint32_t flags, uint64_t bulk) {
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = (uint16_t)t,
                         .flags = flags, .request_id = 5, .bulk_len = bulk};
  uint8_t buf[CW_FRAME_HEADER_SIZE];
  cw_frame_header_encode(&h, buf);
  cw_frame_header_t out;
  return cw_frame_header_decode(buf, sizeof(buf), &limits, &out);
}

// Notices (EVENT, HEALTH_HEARTBEAT), and only they, have no reply schema: a
// plain reply to one is refused at the header, an error reply is not.
static void test_msg_notices(void** state) {
  size_t notices = 0;
  for (unsigned t = 1; t <= CW_MSG_TYPE_MAX; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    if (!m) continue;
    bool notice = t == CW_MSG_EVENT || t == CW_MSG_HEALTH_HEARTBEAT;
    assert_int_equal(m->reply == NULL, notice);
    assert_null(decode_header(t, 0, 0));
    assert_null(decode_header(t, CW_FRAME_REPLY | CW_FRAME_ERROR, 0));
    cw_status_t s = decode_header(t, CW_FRAME_REPLY, 0);
    if (!notice) {
      assert_null(s);
      continue;
    }
    notices++;
    assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof(want), "%s is a notice: it has no replies", m->name);
    assert_string_equal(cw_status_message(s), want);
    cw_status_free(s);
  }
  assert_int_equal(notices, 2);
}

// A fresh request of type t (free with protobuf_c_message_free_unpacked).
static ProtobufCMessage* new_request(unsigned t) {
  const ProtobufCMessageDescriptor* d = cw_msg_request_descriptor((uint16_t)t);
  ProtobufCMessage* m = calloc(1, d->sizeof_message);
  assert_non_null(m);
  protobuf_c_message_init(d, m);
  return m;
}

// A request has a uint64 field `seq` exactly when its row says where it is,
// and cw_msg_seq reads that field; types without one read 0.
static void test_msg_seq(void** state) {
  size_t ordered = 0;
  for (unsigned t = 1; t <= CW_MSG_TYPE_MAX; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    if (!m) continue;
    const ProtobufCFieldDescriptor* f =
        protobuf_c_message_descriptor_get_field_by_name(m->request, "seq");
    ProtobufCMessage* req = new_request(t);
    assert_int_equal(cw_msg_seq((uint16_t)t, req), 0);  // as sent without one
    if (!m->seq_offset) {
      assert_null(f);
      assert_int_equal(cw_msg_seq((uint16_t)t, req), 0);
      protobuf_c_message_free_unpacked(req, NULL);
      continue;
    }
    ordered++;
    assert_non_null(f);
    assert_int_equal(f->type, PROTOBUF_C_TYPE_UINT64);
    assert_int_equal(f->offset, m->seq_offset);
    uint64_t seq = 0x8000000000000000ull + t;  // every byte of the field counts
    memcpy((char*)req + f->offset, &seq, sizeof(seq));
    assert_int_equal(cw_msg_seq((uint16_t)t, req), seq);
    // Through the wire and back: the field the peer set is the one read.
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t* buf = malloc(n ? n : 1);
    protobuf_c_message_pack(req, buf);
    ProtobufCMessage* back = NULL;
    assert_null(cw_msg_decode(m->request, buf, n, &back));
    assert_int_equal(cw_msg_seq((uint16_t)t, back), seq);
    protobuf_c_message_free_unpacked(back, NULL);
    free(buf);
    protobuf_c_message_free_unpacked(req, NULL);
  }
  assert_int_equal(ordered, 8);
  Causeway__V1__DeleteRequest d = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  d.seq = 3;
  assert_int_equal(cw_msg_seq(CW_MSG_DELETE, NULL), 0);
  assert_int_equal(cw_msg_seq(99, &d.base), 0);
  assert_int_equal(cw_msg_seq(CW_MSG_DELETE, &d.base), 3);
}

// The ordered requests a controller may relay (seq, and the controller among
// the senders) carry `session_life` (16), which cw_msg_session_life reads and
// cw_msg_set_session_life writes; no other request has it.
static void test_msg_session_life(void** state) {
  (void)state;
  size_t relayed = 0;
  for (unsigned t = 1; t <= CW_MSG_TYPE_MAX; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    if (!m) continue;
    const ProtobufCFieldDescriptor* f =
        protobuf_c_message_descriptor_get_field_by_name(m->request, "session_life");
    ProtobufCMessage* req = new_request(t);
    cw_msg_set_session_life((uint16_t)t, req, 77);
    if (!m->seq_offset || !(m->senders & CW_ROLE_CONTROLLER_BIT)) {
      assert_null(f);
      assert_int_equal(cw_msg_session_life((uint16_t)t, req), 0);
      protobuf_c_message_free_unpacked(req, NULL);
      continue;
    }
    relayed++;
    assert_non_null(f);
    assert_int_equal(f->id, 16);
    assert_int_equal(f->type, PROTOBUF_C_TYPE_UINT64);
    uint64_t got = 0;
    memcpy(&got, (const char*)req + f->offset, sizeof(got));
    assert_int_equal(got, 77);
    assert_int_equal(cw_msg_session_life((uint16_t)t, req), 77);
    protobuf_c_message_free_unpacked(req, NULL);
  }
  assert_int_equal(relayed, 2);  // LAUNCH, DELETE
  assert_int_equal(cw_msg_session_life(CW_MSG_LAUNCH, NULL), 0);
}

// Every row has a sender, and only roles that exist.
static void test_msg_senders(void** state) {
  for (unsigned t = 1; t <= CW_MSG_TYPE_MAX; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    if (!m) continue;
    assert_true(m->senders != 0);
    assert_int_equal(m->senders & ~(uint32_t)CW_ROLES_ANY, 0);
  }
  assert_int_equal(cw_msg_info(CW_MSG_PUT)->senders, CW_ROLE_WORKER_BIT);
  assert_int_equal(cw_msg_info(CW_MSG_LAUNCH_GO)->senders, CW_ROLE_CONTROLLER_BIT);
  assert_int_equal(cw_msg_info(CW_MSG_HOST_CALLBACK)->senders, CW_ROLE_WORKER_BIT);
  // cw_net's keepalive is sent by either daemon.
  assert_int_equal(cw_msg_info(CW_MSG_EVENT)->senders,
                   CW_ROLE_CONTROLLER_BIT | CW_ROLE_WORKER_BIT);
}

// The bulk column is what the frame layer allows: requests and replies
// separately, never on an ERROR reply.
static void test_msg_bulk_columns(void** state) {
  size_t carriers = 0;
  for (unsigned t = 1; t <= CW_MSG_TYPE_MAX; ++t) {
    const cw_msg_info_t* m = cw_msg_info((uint16_t)t);
    if (!m) continue;
    assert_int_equal(m->bulk & ~(CW_MSG_BULK_REQUEST | CW_MSG_BULK_REPLY), 0);
    bool req = (m->bulk & CW_MSG_BULK_REQUEST) != 0;
    bool rep = (m->bulk & CW_MSG_BULK_REPLY) != 0;
    carriers += req || rep;
    assert_int_equal(cw_frame_may_carry_bulk((uint16_t)t, 0), req);
    assert_int_equal(cw_frame_may_carry_bulk((uint16_t)t, CW_FRAME_REPLY), rep);
    assert_false(cw_frame_may_carry_bulk((uint16_t)t, CW_FRAME_REPLY | CW_FRAME_ERROR));
    // A length check only where requests carry bulk.
    if (m->check_bulk) assert_true(req);
    // The header enforces the same.
    cw_status_t s = decode_header(t, 0, 24);
    assert_int_equal(s == NULL, req);
    cw_status_free(s);
    if (m->reply) {
      s = decode_header(t, CW_FRAME_REPLY, 24);
      assert_int_equal(s == NULL, rep);
      cw_status_free(s);
    }
  }
  assert_int_equal(carriers, 6);  // SERIALIZE, LOAD, UPLOAD, DOWNLOAD, PUT, HOST_CALLBACK
  assert_false(cw_frame_may_carry_bulk(99, 0));
}

static cw_status_t check_bulk(uint16_t type, uint32_t flags, uint64_t bulk,
                              const ProtobufCMessage* msg) {
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = type, .flags = flags,
                         .bulk_len = bulk};
  return cw_msg_check_bulk(&h, msg);
}

static void expect_refused(cw_status_t s, const char* text) {
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  if (!strstr(cw_status_message(s), text)) fail_msg("'%s' lacks '%s'", cw_status_message(s), text);
  cw_status_free(s);
}

// UPLOAD and PUT carry exactly their array's extent (a PUT with an error
// none), LOAD any length, every other request none; replies are not checked.
static void test_msg_check_bulk(void** state) {
  int64_t dims[] = {2, 3};
  int64_t strides[] = {4, 8};  // column-major f32[2,3]: 4 + 2 * 8 + 4 = 24 bytes too
  Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  up.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  up.dims = dims;
  up.n_dims = 2;
  assert_null(check_bulk(CW_MSG_UPLOAD, 0, 24, &up.base));
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 20, &up.base),
                 "UPLOAD bulk of 20 bytes differs from the array's 24 bytes");
  up.byte_strides = strides;
  up.n_byte_strides = 2;
  assert_null(check_bulk(CW_MSG_UPLOAD, 0, 24, &up.base));
  strides[1] = 12;  // 4 + 2 * 12 + 4
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 24, &up.base), "the array's 32 bytes");
  // By peer_address (same host): no bulk at all, but still an array with an extent.
  up.peer_address = 0x1000;
  assert_null(check_bulk(CW_MSG_UPLOAD, 0, 0, &up.base));
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 32, &up.base),
                 "UPLOAD by peer_address carries no bulk (it has 32 bytes)");
  dims[0] = -1;
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 0, &up.base), "UPLOAD");
  dims[0] = 2;
  up.peer_address = 0;
  up.dtype = 77;
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 24, &up.base), "UPLOAD: unknown element type 77");
  // In parts: the first no more than the array, later ones checked by the worker.
  up.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  up.byte_strides = NULL;
  up.n_byte_strides = 0;
  up.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST;
  assert_null(check_bulk(CW_MSG_UPLOAD, 0, 0, &up.base));
  assert_null(check_bulk(CW_MSG_UPLOAD, 0, 24, &up.base));
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 28, &up.base),
                 "UPLOAD's first part of 28 bytes is more than the array's 24 bytes");
  up.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_MORE;
  assert_null(check_bulk(CW_MSG_UPLOAD, 0, 1000, &up.base));
  up.peer_address = 0x1000;
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 0, &up.base),
                 "an UPLOAD in parts has neither byte_strides nor a peer_address");
  up.peer_address = 0;
  up.part = 9;
  expect_refused(check_bulk(CW_MSG_UPLOAD, 0, 0, &up.base), "UPLOAD part kind 9 is not one of 0-3");
  up.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_WHOLE;

  Causeway__V1__PutRequest put = CAUSEWAY__V1__PUT_REQUEST__INIT;
  put.dtype = CAUSEWAY__V1__DTYPE__DTYPE_S64;
  put.dims = dims;
  put.n_dims = 2;
  assert_null(check_bulk(CW_MSG_PUT, 0, 48, &put.base));
  expect_refused(check_bulk(CW_MSG_PUT, 0, 24, &put.base), "PUT bulk of 24 bytes");
  Causeway__V1__ErrorReply err = CAUSEWAY__V1__ERROR_REPLY__INIT;
  put.error = &err;
  assert_null(check_bulk(CW_MSG_PUT, 0, 0, &put.base));
  expect_refused(check_bulk(CW_MSG_PUT, 0, 48, &put.base), "PUT with an error carries no bulk");

  Causeway__V1__LoadRequest load = CAUSEWAY__V1__LOAD_REQUEST__INIT;
  assert_null(check_bulk(CW_MSG_LOAD, 0, 0, &load.base));
  assert_null(check_bulk(CW_MSG_LOAD, 0, 12345, &load.base));

  Causeway__V1__LaunchRequest launch = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  assert_null(check_bulk(CW_MSG_LAUNCH, 0, 0, &launch.base));
  expect_refused(check_bulk(CW_MSG_LAUNCH, 0, 1, &launch.base), "LAUNCH carries no bulk");
  Causeway__V1__SerializeRequest ser = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
  expect_refused(check_bulk(CW_MSG_SERIALIZE, 0, 8, &ser.base), "SERIALIZE carries no bulk");
  expect_refused(check_bulk(99, 0, 8, NULL), "UNKNOWN carries no bulk");
  // HOST_CALLBACK carries exactly its operands' bytes (a token none); its
  // results travel in the reply.
  int64_t four[] = {4};
  Causeway__V1__HostCallbackArray tok = CAUSEWAY__V1__HOST_CALLBACK_ARRAY__INIT;
  tok.token = true;
  Causeway__V1__HostCallbackArray f32 = CAUSEWAY__V1__HOST_CALLBACK_ARRAY__INIT;
  f32.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  f32.dims = four;
  f32.n_dims = 1;
  Causeway__V1__HostCallbackArray* ops[] = {&tok, &f32};
  Causeway__V1__HostCallbackArray* res[] = {&f32, &f32};
  Causeway__V1__HostCallbackRequest cb = CAUSEWAY__V1__HOST_CALLBACK_REQUEST__INIT;
  cb.operands = ops;
  cb.n_operands = 2;
  cb.results = res;
  cb.n_results = 2;
  assert_null(check_bulk(CW_MSG_HOST_CALLBACK, 0, 16, &cb.base));
  expect_refused(check_bulk(CW_MSG_HOST_CALLBACK, 0, 32, &cb.base),
                 "HOST_CALLBACK bulk of 32 bytes differs from its operands' 16 bytes");
  f32.dtype = 99;
  expect_refused(check_bulk(CW_MSG_HOST_CALLBACK, 0, 16, &cb.base),
                 "HOST_CALLBACK: host callback result 0: unknown element type 99");
  f32.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  tok.dtype = CAUSEWAY__V1__DTYPE__DTYPE_S8;
  expect_refused(check_bulk(CW_MSG_HOST_CALLBACK, 0, 16, &cb.base),
                 "host callback operand 0: a token has no element type or dimensions");
  tok.dtype = CAUSEWAY__V1__DTYPE__DTYPE_INVALID;
  // A buffer callback's result may share an operand's memory: one like it.
  uint32_t aliases[] = {2, 1};
  cb.buffer = true;
  cb.aliased_operand = aliases;
  cb.n_aliased_operand = 2;
  expect_refused(check_bulk(CW_MSG_HOST_CALLBACK, 0, 16, &cb.base),
                 "HOST_CALLBACK: host callback result 1 aliases operand 0 of another type");
  aliases[1] = 0;
  assert_null(check_bulk(CW_MSG_HOST_CALLBACK, 0, 16, &cb.base));
  // Replies pass, whatever they carry (the header checked the direction).
  assert_null(check_bulk(CW_MSG_DOWNLOAD, CW_FRAME_REPLY, 1 << 20, NULL));
  assert_null(check_bulk(CW_MSG_UPLOAD, CW_FRAME_REPLY, 7, NULL));
}

static void senders_text(uint32_t senders, size_t capacity, const char* want) {
  char out[128];
  memset(out, 'z', sizeof(out));
  cw_msg_senders_text(senders, out, capacity);
  assert_string_equal(out, want);
}

static void test_msg_texts(void** state) {
  senders_text(CW_ROLE_CLIENT_BIT, 128, "clients");
  senders_text(CW_ROLE_WORKER_BIT, 128, "workers");
  senders_text(CW_ROLE_CONTROLLER_BIT, 128, "the controller");
  senders_text(CW_ROLE_CLIENT_BIT | CW_ROLE_CONTROLLER_BIT, 128, "clients or the controller");
  senders_text(CW_ROLES_ANY, 128, "clients or workers or the controller");
  senders_text(0, 128, "nobody");
  senders_text(CW_ROLE_BIT(CAUSEWAY__V1__ROLE__ROLE_NONE), 128, "nobody");
  senders_text(CW_ROLE_CLIENT_BIT | CW_ROLE_CONTROLLER_BIT, 12, "clients or ");  // cut, terminated
  char one = 'z';
  cw_msg_senders_text(CW_ROLE_CLIENT_BIT, &one, 1);
  assert_int_equal(one, 0);
  cw_msg_senders_text(CW_ROLE_CLIENT_BIT, &one, 0);  // writes nothing

  assert_string_equal(cw_role_name(CAUSEWAY__V1__ROLE__ROLE_NONE), "NONE");
  assert_string_equal(cw_role_name(CAUSEWAY__V1__ROLE__ROLE_CLIENT), "CLIENT");
  assert_string_equal(cw_role_name(CAUSEWAY__V1__ROLE__ROLE_WORKER), "WORKER");
  assert_string_equal(cw_role_name(CAUSEWAY__V1__ROLE__ROLE_CONTROLLER), "CONTROLLER");
  assert_string_equal(cw_role_name(4), "UNKNOWN");
  assert_string_equal(cw_role_name(-1), "UNKNOWN");
  // Role names are the proto's, without ROLE_.
  const ProtobufCEnumDescriptor* e = &causeway__v1__role__descriptor;
  for (unsigned i = 0; i < e->n_values; ++i) {
    assert_string_equal(cw_role_name(e->values[i].value), e->values[i].name + 5);
  }
}

// The proto enums the wire numbers come from, pinned at run time too (the
// C enum by _Static_assert in cw_msg.c).
static void test_msg_proto_pins(void** state) {
  assert_int_equal(CW_MSG_HELLO, CAUSEWAY__V1__MSG_TYPE__MSG_HELLO);
  assert_int_equal(CW_MSG_LAUNCH_GO, CAUSEWAY__V1__MSG_TYPE__MSG_LAUNCH_GO);
  assert_int_equal(CW_MSG_REGISTER, CAUSEWAY__V1__MSG_TYPE__MSG_REGISTER);
  assert_int_equal(CW_MSG_TRACE_FETCH, CAUSEWAY__V1__MSG_TYPE__MSG_TRACE_FETCH);
  assert_int_equal(CW_MSG_TYPE_MAX, CW_MSG_TRACE_FETCH);
  int max = 0;
  const ProtobufCEnumDescriptor* e = &causeway__v1__msg_type__descriptor;
  for (unsigned i = 0; i < e->n_values; ++i) {
    if (e->values[i].value > max) max = e->values[i].value;
  }
  assert_int_equal(max, CW_MSG_TYPE_MAX);
  assert_int_equal(CW_ROLE_CLIENT_BIT, 1u << 1);
  assert_int_equal(CW_ROLE_WORKER_BIT, 1u << 2);
  assert_int_equal(CW_ROLE_CONTROLLER_BIT, 1u << 3);
}

// cw_msg_packed_bound: never below what protobuf-c packs, for every field at
// its widest (so a LaunchRequest may be packed without sizing it first).
static void test_msg_packed_bound(void** state) {
  (void)state;
  assert_int_equal(causeway__v1__launch_request__descriptor.n_fields, 10);  // counted in the bound
  assert_int_equal(causeway__v1__id_list__descriptor.n_fields, 1);
  uint64_t ids[64];
  uint32_t donate[16];
  for (size_t i = 0; i < 64; ++i) ids[i] = UINT64_MAX - i;
  for (size_t i = 0; i < 16; ++i) donate[i] = UINT32_MAX - (uint32_t)i;
  Causeway__V1__IdList lists[8];
  Causeway__V1__IdList* ptrs[8];
  for (size_t nd = 0; nd <= 4; ++nd) {
    for (size_t n = 0; n <= 64; n += 7) {
      for (size_t i = 0; i < 2 * nd; ++i) {
        causeway__v1__id_list__init(&lists[i]);
        lists[i].ids = ids;
        lists[i].n_ids = n;
        ptrs[i] = &lists[i];
      }
      Causeway__V1__LaunchRequest r = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
      r.exe_id = r.launch_id = r.sched_stamp = r.host_callbacks = r.seq = r.session_life =
          UINT64_MAX;
      r.prepare = true;
      r.args = ptrs;
      r.n_args = nd;
      r.outputs = ptrs + nd;
      r.n_outputs = nd;
      r.donate = donate;
      r.n_donate = n % 17;
      size_t bound = cw_msg_packed_bound(&r.base);
      assert_true(bound != SIZE_MAX);
      assert_true(protobuf_c_message_get_packed_size(&r.base) <= bound);
    }
  }
  // Anything else: unknown.
  Causeway__V1__LaunchRequest r = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  Causeway__V1__IdList* none[] = {NULL};
  r.args = none;
  r.n_args = 1;
  assert_true(cw_msg_packed_bound(&r.base) == SIZE_MAX);
  r.n_args = 0;
  ProtobufCMessageUnknownField unknown = {.tag = 99, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT};
  r.base.unknown_fields = &unknown;
  r.base.n_unknown_fields = 1;
  assert_true(cw_msg_packed_bound(&r.base) == SIZE_MAX);
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  assert_true(cw_msg_packed_bound(&del.base) == SIZE_MAX);
  assert_true(cw_msg_packed_bound(NULL) == SIZE_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_msg_table_matches_proto_enum),
      cmocka_unit_test(test_msg_request_schemas),
      cmocka_unit_test(test_msg_notices),
      cmocka_unit_test(test_msg_seq),
      cmocka_unit_test(test_msg_session_life),
      cmocka_unit_test(test_msg_senders),
      cmocka_unit_test(test_msg_bulk_columns),
      cmocka_unit_test(test_msg_check_bulk),
      cmocka_unit_test(test_msg_texts),
      cmocka_unit_test(test_msg_proto_pins),
      cmocka_unit_test(test_msg_packed_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
