// Hostile byte streams: frames cut off by EOF or a close, random garbage,
// frames dribbled byte by byte, valid requests pipelined ahead of a
// violation, slow and silent peers (the HELLO timeout), peers that vanish
// with requests pending, and a flood of idle connections.
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"
#include "cw_time.h"

static void test_truncated_header_then_eof(void** state) {
  (void)state;
  uint8_t h[HDR];
  hdr_t hd = hdr_of(T_PING, 2, 0, 0);
  hdr_encode(&hd, h);
  for (int with_hello = 0; with_hello < 2; ++with_hello) {
    for (size_t cut = 1; cut < HDR; cut += 10) {
      int fd = conn_open(&g_plain);
      if (with_hello) hello(fd);
      assert_true(send_all(fd, h, cut));
      shutdown(fd, SHUT_WR);
      char what[96];
      snprintf(what, sizeof what, "header cut at %zu bytes%s, EOF", cut,
               with_hello ? " after HELLO" : "");
      expect_only_errors_then_closed(fd, what);
      close(fd);
      assert_serving(&g_plain);
    }
  }
}

static void test_truncated_payload_then_eof(void** state) {
  (void)state;
  for (int with_hello = 0; with_hello < 2; ++with_hello) {
    int fd = conn_open(&g_plain);
    if (with_hello) hello(fd);
    uint8_t payload[100];
    memset(payload, 0, sizeof payload);
    hdr_t h = hdr_of(with_hello ? T_PING : T_HELLO, 2, sizeof payload, 0);
    assert_true(send_raw(fd, &h, payload, 10, NULL, 0));  // 10 of 100 bytes
    shutdown(fd, SHUT_WR);
    expect_only_errors_then_closed(fd, with_hello ? "PING payload cut, EOF"
                                                  : "HELLO payload cut, EOF");
    close(fd);
    assert_serving(&g_plain);
  }
}

static void test_truncated_bulk_then_eof(void** state) {
  (void)state;
  // Mid-upload disconnects: shutdown (EOF) and abrupt close (maybe RST), at
  // several points of a 64 KiB upload. The session dies with the connection,
  // so nothing of it may stay behind.
  const int n = 16384;
  float* data = calloc((size_t)n, sizeof(float));
  for (int mode = 0; mode < 2; ++mode) {
    for (size_t sent = 0; sent < (size_t)n * 4; sent += 20000) {
      int fd = open_hello();
      upload_f32(fd, 2, 50, 4);  // a finished buffer in the same session
      int64_t dims[1] = {n};
      Causeway__V1__UploadRequest m = upload_req(51, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
      packed_t p = pack(&m.base);
      hdr_t h = hdr_of(T_UPLOAD, 3, (uint32_t)p.len, (uint64_t)n * 4);
      assert_true(send_raw(fd, &h, p.data, p.len, data, sent));
      free(p.data);
      char what[96];
      snprintf(what, sizeof what, "UPLOAD bulk cut at %zu of %d bytes, %s", sent, n * 4,
               mode ? "close" : "EOF");
      if (mode == 0) {
        shutdown(fd, SHUT_WR);
        expect_only_errors_then_closed(fd, what);
      }
      close(fd);
      assert_serving(&g_plain);
    }
  }
  free(data);
  // Every session above is gone: the worker holds no buffers (poll briefly,
  // closes are processed asynchronously).
  int fd = open_hello();
  uint64_t buffers = 0;
  for (int i = 0; i < 100; ++i) {
    Causeway__V1__Stats* s = stats(fd, 10 + (uint64_t)i);
    buffers = s->buffers;
    causeway__v1__stats__free_unpacked(s, NULL);
    if (buffers == 0) break;
    sleep_ms(20);
  }
  close(fd);
  if (buffers) fail_msg("worker still holds %" PRIu64 " buffers of closed sessions", buffers);
}

static void test_garbage_bytes(void** state) {
  (void)state;
  uint64_t seed = 0x5EEDC0DE12345678ull;  // fixed: failures reproduce
  for (int round = 0; round < 24; ++round) {
    size_t len = 1 + (size_t)(round * 397 % 8192);
    uint8_t* buf = malloc(len);
    for (size_t i = 0; i < len; ++i) {
      seed ^= seed << 13;
      seed ^= seed >> 7;
      seed ^= seed << 17;
      buf[i] = (uint8_t)seed;
    }
    bool with_hello = round % 2;
    // Every other round starts with a valid magic and version, so the
    // garbage reaches the type/flags/length checks.
    if (round % 4 >= 2 && len >= 6) {
      put_le(buf, MAGIC, 4);
      put_le(buf + 4, 1, 2);
    }
    int fd = conn_open(&g_plain);
    if (with_hello) hello(fd);
    send_all(fd, buf, len);
    shutdown(fd, SHUT_WR);
    char what[96];
    snprintf(what, sizeof what, "garbage round %d (%zu bytes%s)", round, len,
             with_hello ? ", after HELLO" : "");
    expect_only_errors_then_closed(fd, what);
    close(fd);
    free(buf);
    assert_serving(&g_plain);
  }
}

static void test_slowloris(void** state) {
  (void)state;
  // 1. Connect and send nothing: closed after the 300 ms HELLO timeout.
  // 2. Half a header, then silence.
  // 3. A HELLO dribbled one byte per 50 ms: never complete within 300 ms.
  for (int mode = 0; mode < 3; ++mode) {
    // From before the connect: the worker's 300 ms start at its accept, which
    // can come before a loaded test gets to read the clock after connect().
    long long t0 = cw_time_now_ms();
    int fd = conn_open(&g_plain);
    uint8_t h[HDR];
    hdr_t hd = hdr_of(T_HELLO, 1, 0, 0);
    hdr_encode(&hd, h);
    bool closed = false;
    if (mode == 1) send_all(fd, h, 16);
    if (mode == 2) {
      for (int i = 0; i < HDR && !closed; ++i) {
        if (!send_all(fd, h + i, 1)) closed = true;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) > 0) break;  // the worker spoke or closed
      }
    }
    static const char* names[] = {"slowloris: silent", "slowloris: half header",
                                  "slowloris: dribbled HELLO"};
    // Any ERROR reply (DEADLINE_EXCEEDED) is fine; then closed.
    expect_only_errors_then_closed(fd, names[mode]);
    long long dt = cw_time_now_ms() - t0;
    fprintf(stderr, "[hostile]   %-46s    closed after %lld ms\n", names[mode], dt);
    if (dt < 250) fail_msg("%s: closed after %lld ms, before the 300 ms timeout", names[mode],
                           dt);
    if (dt > 3000) fail_msg("%s: closed only after %lld ms", names[mode], dt);
    close(fd);
  }
  // A connection that completed HELLO is not subject to the timeout.
  int fd = open_hello();
  sleep_ms(700);
  ping(fd, 90);
  close(fd);
  assert_serving(&g_plain);
}

static void test_vanish_with_pending_await(void** state) {
  (void)state;
  // A client that waits on a pending id and disappears: the reply has no
  // one to go to; the worker must drop it and free the session.
  for (int i = 0; i < 3; ++i) {
    int fd = open_hello();
    Causeway__V1__ExpectRequest em = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
    em.buffer_id = 500;
    assert_true(send_msg(fd, T_EXPECT, 2, &em.base, NULL, 0));
    frame_t f;
    expect_reply(fd, "EXPECT 500", T_EXPECT, 2, &f);
    frame_free(&f);
    Causeway__V1__AwaitRequest am = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
    am.buffer_id = 500;
    assert_true(send_msg(fd, T_AWAIT, 3, &am.base, NULL, 0));
    Causeway__V1__DownloadRequest dm = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    dm.buffer_id = 500;
    assert_true(send_msg(fd, T_DOWNLOAD, 4, &dm.base, NULL, 0));
    sleep_ms(50);
    close(fd);
    assert_serving(&g_plain);
  }
}

static void test_pipelined_then_violation(void** state) {
  (void)state;
  // HELLO, two PINGs, an UPLOAD with bulk and a bad header in one write: the
  // valid requests are answered in order, then the error, then the close.
  uint8_t buf[1024];
  size_t n = 0;
  Causeway__V1__HelloRequest hm = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  hm.min_version = 1;
  hm.max_version = 1;
  hm.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  Causeway__V1__Ping pm = CAUSEWAY__V1__PING__INIT;
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest um = upload_req(3, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  const ProtobufCMessage* msgs[4] = {&hm.base, &pm.base, &pm.base, &um.base};
  const uint16_t types[4] = {T_HELLO, T_PING, T_PING, T_UPLOAD};
  for (int i = 0; i < 4; ++i) {
    size_t len = protobuf_c_message_get_packed_size(msgs[i]);
    hdr_t h = hdr_of(types[i], (uint64_t)i + 1, (uint32_t)len, types[i] == T_UPLOAD ? 16 : 0);
    hdr_encode(&h, buf + n);
    protobuf_c_message_pack(msgs[i], buf + n + HDR);
    n += HDR + len;
    if (types[i] == T_UPLOAD) {
      memset(buf + n, 0, 16);
      n += 16;
    }
  }
  hdr_t bad = hdr_of(T_PING, 5, 0, 0);
  bad.magic = 0xDEADBEEF;
  hdr_encode(&bad, buf + n);
  n += HDR;
  int fd = conn_open(&g_plain);
  assert_true(send_all(fd, buf, n));
  // HELLO and the PINGs are answered at once, in order, before the error.
  // The UPLOAD is acknowledged when its device buffer is ready: replies may
  // come in any order, so its Ack may come before or after the error, or be
  // lost with the closed connection; which one is reported.
  frame_t f;
  const char* upload_ack = "never";
  for (int i = 0; i < 3; ++i) {
    int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
    if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 4) {
      upload_ack = "before the error";
      frame_free(&f);
      --i;
      continue;
    }
    if (r != 1 || f.flags != F_REPLY || f.type != types[i] || f.request_id != (uint64_t)i + 1) {
      fail_msg("pipelined request %d: got %s type %u flags 0x%x rid %" PRIu64, i + 1,
               recv_result_name(r), f.type, f.flags, f.request_id);
    }
    frame_free(&f);
  }
  for (;;) {
    int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
    if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 4) {
      upload_ack = "before the error";
      frame_free(&f);
      continue;
    }
    if (r != 1 || f.flags != (F_REPLY | F_ERROR)) {
      fail_msg("bad magic after pipelined requests: want the ERROR reply, got %s flags 0x%x",
               recv_result_name(r), f.flags);
    }
    fprintf(stderr, "[hostile]   %-46s -> error reply\n", "bad magic after 4 pipelined requests");
    frame_free(&f);
    break;
  }
  int r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
  if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 4) {
    upload_ack = "after the error";
    frame_free(&f);
    r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
  }
  if (r == 1) fail_msg("worker sent type %u flags 0x%x after the error", f.type, f.flags);
  if (r == -2) fail_msg("worker did not close after the error");
  frame_free(&f);
  fprintf(stderr, "[hostile]   %-46s    UPLOAD Ack: %s\n", "pipelined UPLOAD before the violation",
          upload_ack);
  close(fd);
  assert_serving(&g_plain);
}

static void test_fragmented_frames(void** state) {
  (void)state;
  // A valid UPLOAD (1 KiB of bulk) and a PING, written one byte at a time.
  int fd = open_hello();
  const int n = 256;
  int64_t dims[1] = {n};
  Causeway__V1__UploadRequest m = upload_req(4, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  packed_t p = pack(&m.base);
  size_t total = HDR + p.len + (size_t)n * 4 + HDR;
  uint8_t* buf = malloc(total);
  hdr_t h = hdr_of(T_UPLOAD, 2, (uint32_t)p.len, (uint64_t)n * 4);
  hdr_encode(&h, buf);
  memcpy(buf + HDR, p.data, p.len);
  for (int i = 0; i < n; ++i) {
    float v = (float)i * 0.25f;
    memcpy(buf + HDR + p.len + (size_t)i * 4, &v, 4);
  }
  hdr_t hp = hdr_of(T_PING, 3, 0, 0);
  hdr_encode(&hp, buf + HDR + p.len + (size_t)n * 4);
  for (size_t i = 0; i < total; ++i) assert_true(send_all(fd, buf + i, 1));
  frame_t f;
  // Two replies, in any order (the Ack waits for the device buffer).
  bool got_upload = false, got_ping = false;
  for (int i = 0; i < 2; ++i) {
    int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
    if (r == 1 && f.flags == F_REPLY && f.type == T_UPLOAD && f.request_id == 2 && !got_upload) {
      got_upload = true;
    } else if (r == 1 && f.flags == F_REPLY && f.type == T_PING && f.request_id == 3 &&
               !got_ping) {
      got_ping = true;
    } else {
      fail_msg("byte-by-byte UPLOAD + PING: got %s type %u flags 0x%x rid %" PRIu64,
               recv_result_name(r), f.type, f.flags, f.request_id);
    }
    frame_free(&f);
  }
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 4;
  assert_true(send_msg(fd, T_DOWNLOAD, 4, &d.base, NULL, 0));
  expect_reply(fd, "DOWNLOAD of the byte-by-byte upload", T_DOWNLOAD, 4, &f);
  assert_int_equal(f.bulk_len, (uint64_t)n * 4);
  if (memcmp(f.bulk, buf + HDR + p.len, (size_t)n * 4) != 0) {
    fail_msg("byte-by-byte upload came back different");
  }
  frame_free(&f);
  free(buf);
  free(p.data);
  // A zero-element array: no bulk at all, still a buffer.
  int64_t zdims[2] = {0, 5};
  Causeway__V1__UploadRequest z = upload_req(5, CAUSEWAY__V1__DTYPE__DTYPE_F32, zdims, 2);
  assert_true(send_msg(fd, T_UPLOAD, 5, &z.base, NULL, 0));
  expect_reply(fd, "UPLOAD f32[0,5]", T_UPLOAD, 5, &f);
  frame_free(&f);
  d.buffer_id = 5;
  assert_true(send_msg(fd, T_DOWNLOAD, 6, &d.base, NULL, 0));
  expect_reply(fd, "DOWNLOAD f32[0,5]", T_DOWNLOAD, 6, &f);
  assert_int_equal(f.bulk_len, 0);
  frame_free(&f);
  close(fd);
  assert_serving(&g_plain);
}

static void test_connection_flood(void** state) {
  (void)state;
  // 200 connections that never say HELLO: all closed by the HELLO timeout,
  // and the worker serves throughout.
  enum { N = 200 };
  int fds[N];
  for (int i = 0; i < N; ++i) fds[i] = conn_open(&g_plain);
  assert_serving(&g_plain);
  for (int i = 0; i < N; ++i) expect_only_errors_then_closed(fds[i], "flood connection");
  for (int i = 0; i < N; ++i) close(fds[i]);
  assert_serving(&g_plain);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncated_header_then_eof),
      cmocka_unit_test(test_truncated_payload_then_eof),
      cmocka_unit_test(test_truncated_bulk_then_eof),
      cmocka_unit_test(test_garbage_bytes),
      cmocka_unit_test(test_slowloris),
      cmocka_unit_test(test_vanish_with_pending_await),
      cmocka_unit_test(test_pipelined_then_violation),
      cmocka_unit_test(test_fragmented_frames),
      cmocka_unit_test(test_connection_flood),
      // Last: SIGTERM the workers and require exit 0 (ASan: no leaks).
      cmocka_unit_test(hostile_test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_streams", tests, hostile_group_setup,
                                     hostile_group_teardown);
}
