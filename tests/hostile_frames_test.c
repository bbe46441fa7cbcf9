// Hostile frames, one at a time: headers and payloads that break the rules
// (size limits before and after HELLO, magic, version, type, flags, bulk where
// none may be, replies sent to the worker, payloads that are not protobuf).
// Each gets the documented ERROR reply and the close, and the worker serves on.
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"
#include "cw_time.h"

static void test_oversize_payload_before_hello(void** state) {
  (void)state;
  // 4096 bytes is the pre-HELLO limit: a HELLO of exactly that size is fine.
  {
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = 1;
    m.max_version = 1;
    m.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
    static char name[PREHELLO_MAX_PAYLOAD];
    size_t name_len = PREHELLO_MAX_PAYLOAD - 64;
    memset(name, 'n', sizeof name - 1);
    name[name_len] = 0;
    m.peer_name = name;
    // Grow the name until the payload is exactly 4096 bytes.
    while (protobuf_c_message_get_packed_size(&m.base) < PREHELLO_MAX_PAYLOAD) {
      name[name_len] = 'n';
      name[++name_len] = 0;
    }
    packed_t p = pack(&m.base);
    assert_int_equal(p.len, PREHELLO_MAX_PAYLOAD);
    int fd = conn_open(&g_plain);
    hdr_t h = hdr_of(T_HELLO, 1, (uint32_t)p.len, 0);
    assert_true(send_raw(fd, &h, p.data, p.len, NULL, 0));
    free(p.data);
    frame_t f;
    expect_reply(fd, "HELLO of exactly 4096 bytes", T_HELLO, 1, &f);
    frame_free(&f);
    ping(fd, 2);
    close(fd);
  }
  // 4097 bytes: refused from the header alone (no payload is sent).
  hdr_t h = hdr_of(T_HELLO, 5, PREHELLO_MAX_PAYLOAD + 1, 0);
  violation("HELLO payload_len 4097 before HELLO", false, &h, NULL, 0, NULL, 0, 5,
            C_RESOURCE_EXHAUSTED, "payload|limit|4096|4097");
  h = hdr_of(T_HELLO, 6, UINT32_MAX, 0);
  violation("HELLO payload_len 2^32-1 before HELLO", false, &h, NULL, 0, NULL, 0, 6,
            C_RESOURCE_EXHAUSTED, "payload|limit");
}

static void test_oversize_payload_after_hello(void** state) {
  (void)state;
  int fd = conn_open(&g_plain);
  Causeway__V1__HelloReply* r = NULL;
  hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &r);
  assert_int_equal(r->max_payload, MAX_PAYLOAD);
  causeway__v1__hello_reply__free_unpacked(r, NULL);
  // After HELLO the limit is 16 MiB: 8 KiB is fine now.
  {
    Causeway__V1__Ping m = CAUSEWAY__V1__PING__INIT;
    uint8_t* data = calloc(8192, 1);
    m.data.data = data;
    m.data.len = 8192;
    assert_true(send_msg(fd, T_PING, 3, &m.base, NULL, 0));
    free(data);
    frame_t f;
    expect_reply(fd, "PING of 8 KiB after HELLO", T_PING, 3, &f);
    frame_free(&f);
  }
  hdr_t h = hdr_of(T_PING, 4, MAX_PAYLOAD + 1, 0);
  send_raw(fd, &h, NULL, 0, NULL, 0);
  expect_error(fd, "PING payload_len 16 MiB + 1 after HELLO", 4, C_RESOURCE_EXHAUSTED,
               "payload|limit");
  expect_closed(fd, "oversize after HELLO");
  close(fd);
  assert_serving(&g_plain);
  h = hdr_of(T_COMPILE, 5, UINT32_MAX, 0);
  violation("COMPILE payload_len 2^32-1 after HELLO", true, &h, NULL, 0, NULL, 0, 5,
            C_RESOURCE_EXHAUSTED, "payload|limit");
}

static void test_wrong_magic(void** state) {
  (void)state;
  static const uint32_t magics[] = {0x59415744u, 0x43574159u /* byte-swapped */, 0};
  for (int i = 0; i < 3; ++i) {
    for (int with_hello = 0; with_hello < 2; ++with_hello) {
      hdr_t h = hdr_of(T_PING, 7, 0, 0);
      h.magic = magics[i];
      int fd = conn_open(&g_plain);
      if (with_hello) hello(fd);
      send_raw(fd, &h, NULL, 0, NULL, 0);
      char what[96];
      snprintf(what, sizeof what, "magic 0x%08x%s", magics[i], with_hello ? " after HELLO" : "");
      // Request id 0 or the sent one: the header is not trusted past the magic.
      expect_error(fd, what, ANY_RID, C_INVALID_ARGUMENT, "magic");
      expect_closed(fd, what);
      close(fd);
      assert_serving(&g_plain);
    }
  }
}

static void test_wrong_version(void** state) {
  (void)state;
  static const uint16_t versions[] = {0, 2, 0xFFFF};
  for (int i = 0; i < 3; ++i) {
    for (int with_hello = 0; with_hello < 2; ++with_hello) {
      hdr_t h = hdr_of(T_PING, 8, 0, 0);
      h.version = versions[i];
      int fd = conn_open(&g_plain);
      if (with_hello) hello(fd);
      send_raw(fd, &h, NULL, 0, NULL, 0);
      char what[96];
      snprintf(what, sizeof what, "frame version %u%s", versions[i],
               with_hello ? " after HELLO" : "");
      expect_error(fd, what, ANY_RID, C_UNIMPLEMENTED, "version");
      expect_closed(fd, what);
      close(fd);
      assert_serving(&g_plain);
    }
  }
}

static void test_unknown_type(void** state) {
  (void)state;
  static const uint16_t types[] = {0, 31, 65535};  // 31: unassigned
  for (int i = 0; i < 3; ++i) {
    for (int with_hello = 0; with_hello < 2; ++with_hello) {
      hdr_t h = hdr_of(types[i], 9, 0, 0);
      char what[96];
      snprintf(what, sizeof what, "message type %u%s", types[i],
               with_hello ? " after HELLO" : "");
      violation(what, with_hello, &h, NULL, 0, NULL, 0, 9, C_UNIMPLEMENTED, "type");
    }
  }
}

static void test_unknown_flags(void** state) {
  (void)state;
  static const uint32_t flags[] = {0x4, 0x80000000u, 0xFFFFFFFFu};
  for (int i = 0; i < 3; ++i) {
    hdr_t h = hdr_of(T_PING, 10, 0, 0);
    h.flags = flags[i];
    char what[96];
    snprintf(what, sizeof what, "flags 0x%x", flags[i]);
    violation(what, true, &h, NULL, 0, NULL, 0, 10, C_INVALID_ARGUMENT, "flag");
  }
}

static void test_error_without_reply(void** state) {
  (void)state;
  Causeway__V1__ErrorReply e = CAUSEWAY__V1__ERROR_REPLY__INIT;
  e.code = 3;
  e.message = "forged";
  packed_t p = pack(&e.base);
  hdr_t h = hdr_of(T_PING, 11, (uint32_t)p.len, 0);
  h.flags = F_ERROR;
  violation("ERROR flag without REPLY", true, &h, p.data, p.len, NULL, 0, 11,
            C_INVALID_ARGUMENT, "ERROR|REPLY|flag");
  free(p.data);
}

static void test_bulk_where_none_may_be(void** state) {
  (void)state;
  static const uint16_t types[] = {T_PING, T_HELLO, T_DOWNLOAD, T_STATS, T_DELETE};
  for (int i = 0; i < 5; ++i) {
    hdr_t h = hdr_of(types[i], 12, 0, 8);
    char what[96];
    snprintf(what, sizeof what, "8 bulk bytes on request type %u", types[i]);
    // Bulk bytes are sent too; a worker that reads them first still answers.
    violation(what, types[i] != T_HELLO, &h, NULL, 0, "bulkbulk", 8, 12, C_INVALID_ARGUMENT,
              "bulk");
  }
}

static void test_bulk_len_max(void** state) {
  (void)state;
  Causeway__V1__UploadRequest m = upload_req(60, CAUSEWAY__V1__DTYPE__DTYPE_U8,
                                             (int64_t[]){4}, 1);
  packed_t p = pack(&m.base);
  hdr_t h = hdr_of(T_UPLOAD, 13, (uint32_t)p.len, UINT64_MAX);
  violation("UPLOAD bulk_len 2^64-1", true, &h, p.data, p.len, "abcd", 4, 13,
            C_RESOURCE_EXHAUSTED, "bulk|limit");
  h.bulk_len = (64ull << 30) + 1;  // max-bulk + 1
  violation("UPLOAD bulk_len 64 GiB + 1", true, &h, p.data, p.len, NULL, 0, 13,
            C_RESOURCE_EXHAUSTED, "bulk|limit");
  free(p.data);
  hdr_t hp = hdr_of(T_PING, 14, 0, UINT64_MAX);
  violation("PING bulk_len 2^64-1", true, &hp, NULL, 0, NULL, 0, 14, C_INVALID_ARGUMENT,
            "bulk");
}

static void test_payload_not_protobuf(void** state) {
  (void)state;
  static const struct {
    uint16_t type;
    bool hello;
    const char* bytes;
    size_t len;
  } cases[] = {
      {T_HELLO, false, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11},  // varint too long
      {T_HELLO, false, "\x22\x7f\x01", 3},           // token longer than the payload
      {T_PING, true, "\x0a\x05\x01", 3},             // data longer than the payload
      {T_DOWNLOAD, true, "\x0f\x01", 2},             // wire type 7
      {T_UPLOAD, true, "\x1a\x80\x80\x80\x80\x10", 6},  // dims length 2^32: past the end
      {T_DELETE, true, "\x08", 1},                   // tag without value
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    hdr_t h = hdr_of(cases[i].type, 15, (uint32_t)cases[i].len, 0);
    char what[96];
    snprintf(what, sizeof what, "type %u payload not protobuf (case %zu)", cases[i].type, i);
    violation(what, cases[i].hello, &h, cases[i].bytes, cases[i].len, NULL, 0, 15,
              C_INVALID_ARGUMENT, "malformed|decode|payload|parse|protobuf");
  }
}

static void test_reply_sent_to_worker(void** state) {
  (void)state;
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  packed_t p = pack(&pm.base);
  hdr_t h = hdr_of(T_PING, 70, (uint32_t)p.len, 0);
  h.flags = F_REPLY;
  violation("PING reply sent to the worker", true, &h, p.data, p.len, NULL, 0, 70,
            C_INVALID_ARGUMENT, "reply");
  violation("PING reply sent before HELLO", false, &h, p.data, p.len, NULL, 0, 70,
            C_INVALID_ARGUMENT, "reply|HELLO");
  free(p.data);
  // A DOWNLOAD reply may carry bulk; the worker must not take it as data.
  Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
  ai.buffer_id = 1;
  ai.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  ai.size = 16;
  p = pack(&ai.base);
  h = hdr_of(T_DOWNLOAD, 71, (uint32_t)p.len, 16);
  h.flags = F_REPLY;
  uint8_t bulk[16] = {0};
  violation("DOWNLOAD reply + bulk sent to the worker", true, &h, p.data, p.len, bulk, 16, 71,
            C_INVALID_ARGUMENT, "reply");
  free(p.data);
  Causeway__V1__ErrorReply e = CAUSEWAY__V1__ERROR_REPLY__INIT;
  e.code = 5;
  e.message = "forged";
  p = pack(&e.base);
  h = hdr_of(T_AWAIT, 72, (uint32_t)p.len, 0);
  h.flags = F_REPLY | F_ERROR;
  violation("ERROR reply sent to the worker", true, &h, p.data, p.len, NULL, 0, 72,
            C_INVALID_ARGUMENT, "reply");
  free(p.data);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_oversize_payload_before_hello),
      cmocka_unit_test(test_oversize_payload_after_hello),
      cmocka_unit_test(test_wrong_magic),
      cmocka_unit_test(test_wrong_version),
      cmocka_unit_test(test_unknown_type),
      cmocka_unit_test(test_unknown_flags),
      cmocka_unit_test(test_error_without_reply),
      cmocka_unit_test(test_bulk_where_none_may_be),
      cmocka_unit_test(test_bulk_len_max),
      cmocka_unit_test(test_payload_not_protobuf),
      cmocka_unit_test(test_reply_sent_to_worker),
      // Last: SIGTERM the workers and require exit 0 (ASan: no leaks).
      cmocka_unit_test(hostile_test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_frames", tests, hostile_group_setup,
                                     hostile_group_teardown);
}
