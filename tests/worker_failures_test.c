// Worker integration: failures are events, not crashes. Compile errors,
// launches with wrong arguments, error inputs that poison outputs, and a
// client killed in the middle of a 256 MiB upload; the worker serves on.
// Fixture: cw_test_integration.h.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cw_test_integration.h"

// XLA's compile error comes back with XLA's text; the connection still works.
static void test_compile_error(void** state) {
  (void)state;
  uint64_t exe = new_id();
  cw_status_t s = cw_client_compile(g.ca, exe, "mlir", g.reject.program, g.reject.program_size,
                                    g.reject.options, g.reject.options_size, NULL);
  expect_error(s, g.reject.expect, "compile of a type-incorrect module");
  // The exe id is in error now: launching it fails with that error.
  uint64_t in = new_id(), out = new_id();
  array_t two = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 1, .dims = {2}, .size = 8};
  float vals[2] = {1, 2};
  two.data = vals;
  upload(g.ca, in, &two, 0);
  const uint64_t* args[1] = {&in};
  const uint64_t* outs[1] = {&out};
  completion_t launched = {0};
  ASSERT_OK(cw_client_launch(g.ca, exe, 1, 1, args, 1, outs, on_done, &launched));
  expect_error(finish(g.ca, &launched), g.reject.expect, "launch of the rejected executable");
  ASSERT_OK(cw_client_ping(g.ca));
  run_case(g.ca, find_case("scalar_f32"), "A after a compile error");
  uint64_t all[3] = {exe, in, out};
  ASSERT_OK(cw_client_delete(g.ca, all, 3, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

// Launches with wrong arguments must fail with an error (the protocol lists
// shape mismatches among the semantic errors), and the worker serves on.
typedef struct mismatch_s {
  const char* what;
  const char* needle;  // part of the runtime's message; NULL: any error
  int dtype;         // 0: the expected dtype
  int64_t dims[2];   // argument 0's dims
  size_t num_args;   // arguments passed
} mismatch_t;

static void test_launch_mismatch(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  const array_t* a0 = &c->in[0][0];  // f32[4,8]
  assert_int_equal(a0->rank, 2);
  const mismatch_t checks[] = {
      // XLA's own checks (size-based) catch these two; the needles are its text.
      {"2 of 3 arguments", "compiled program expected 3", 0, {a0->dims[0], a0->dims[1]},
       c->num_args - 1},
      // The worker checks dtype and dims against the executable's parameter
      // shapes before XLA's size check, naming the argument and both shapes.
      {"f32[2,8] (fewer bytes) for f32[4,8]", "argument 0: expected f32[4,8], got f32[2,8]", 0,
       {a0->dims[0] / 2, a0->dims[1]}, c->num_args},
      // Same byte size: XLA's size check passes, so only the worker can refuse.
      {"f32[8,4] (same bytes) for f32[4,8]", "argument 0: expected f32[4,8], got f32[8,4]", 0,
       {a0->dims[1], a0->dims[0]}, c->num_args},
      {"s32[4,8] (same bytes) for f32[4,8]", "argument 0: expected f32[4,8], got s32[4,8]",
       CAUSEWAY__V1__DTYPE__DTYPE_S32, {a0->dims[0], a0->dims[1]}, c->num_args},
  };
  const size_t n = sizeof(checks) / sizeof(checks[0]);
  uint64_t exe = compile_case(g.ca, c);
  char accepted[512] = "";
  for (size_t k = 0; k < n; k++) {
    const mismatch_t* m = &checks[k];
    run_ids_t ids;
    make_ids(c, &ids);
    array_t arg0 = *a0;
    if (m->dtype) arg0.dtype = m->dtype;
    arg0.dims[0] = m->dims[0];
    arg0.dims[1] = m->dims[1];
    arg0.size = dtype_size(arg0.dtype) * (size_t)(m->dims[0] * m->dims[1]);
    upload(g.ca, ids.args[0][0], &arg0, 0);
    for (size_t i = 1; i < c->num_args; i++) upload(g.ca, ids.args[0][i], &c->in[0][i], 0);
    completion_t launched = {0};
    ASSERT_OK(cw_client_launch(g.ca, exe, 1, m->num_args, ids.arg_rows, c->num_outputs,
                               ids.out_rows, on_done, &launched));
    cw_status_t s = finish(g.ca, &launched);
    if (cw_status_is_ok(s)) {
      fprintf(stderr, "  launch with %s -> OK (not rejected)\n", m->what);
      snprintf(accepted + strlen(accepted), sizeof(accepted) - strlen(accepted), "%s%s",
               accepted[0] ? "; " : "", m->what);
    } else {
      expect_error(s, m->needle, m->what);
      expect_error(cw_client_await(g.ca, ids.outs[0][0]), m->needle, "  its output");
    }
    ASSERT_OK(cw_client_ping(g.ca));  // the connection and the worker are still there
    delete_ids(g.ca, c, &ids);
  }
  // The worker keeps serving: the same executable with the right inputs works.
  run_compiled(g.ca, exe, c, "A after launch errors");
  ASSERT_OK(cw_client_delete(g.ca, &exe, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
  if (accepted[0]) fail_msg("launches that should have failed succeeded: %s", accepted);
}

// An id in error: the output of a launch of a rejected executable
// (*bad_exe, on input *bad_in).
static uint64_t new_poisoned_id(uint64_t* bad_exe, uint64_t* bad_in) {
  uint64_t poisoned = new_id();
  *bad_exe = new_id();
  *bad_in = new_id();
  expect_error(cw_client_compile(g.ca, *bad_exe, "mlir", g.reject.program, g.reject.program_size,
                                 g.reject.options, g.reject.options_size, NULL),
               g.reject.expect, "compile rejected");
  array_t two = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 1, .dims = {2}, .size = 8};
  float vals[2] = {1, 2};
  two.data = vals;
  upload(g.ca, *bad_in, &two, 0);
  const uint64_t* bad_args[1] = {bad_in};
  const uint64_t* bad_outs[1] = {&poisoned};
  ASSERT_OK(cw_client_launch(g.ca, *bad_exe, 1, 1, bad_args, 1, bad_outs, NULL, NULL));
  return poisoned;
}

// An input in error state poisons the launch's outputs with that error.
static void test_error_input_poisons_outputs(void** state) {
  (void)state;
  uint64_t bad_exe, bad_in;
  uint64_t poisoned = new_poisoned_id(&bad_exe, &bad_in);
  expect_error(cw_client_await(g.ca, poisoned), g.reject.expect, "await the poisoned id");

  // Use it as argument 0 of a good program.
  const test_case_t* c = find_case("matmul_f32");
  uint64_t exe = compile_case(g.ca, c);
  run_ids_t ids;
  make_ids(c, &ids);
  ids.args[0][0] = poisoned;
  for (size_t i = 1; i < c->num_args; i++) upload(g.ca, ids.args[0][i], &c->in[0][i], 0);
  completion_t launched = {0};
  ASSERT_OK(cw_client_launch(g.ca, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  expect_error(finish(g.ca, &launched), g.reject.expect, "launch on a poisoned input");
  uint8_t sink[256];
  size_t got = 0;
  expect_error(cw_client_download(g.ca, ids.outs[0][0], sink, sizeof(sink), &got, NULL),
               g.reject.expect, "download of an output of that launch");
  uint64_t rest[4] = {bad_exe, bad_in, poisoned, exe};
  ASSERT_OK(cw_client_delete(g.ca, rest, 4, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.ca, &ids.args[0][1], c->num_args - 1, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.ca, ids.outs[0], c->num_outputs, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

// A chain of launches behind a failed input: each output carries the error
// with one prefix, as the first launch put it (each launch added one: 300
// launches made a 20 kB text and quadratic work, an audit).
static void test_error_chain_keeps_one_prefix(void** state) {
  (void)state;
  uint64_t bad_exe, bad_in;
  uint64_t root = new_poisoned_id(&bad_exe, &bad_in);
  // x_{k+1} = x_k * b + 1 (scalar_f32), 300 launches sent at once.
  enum { kSteps = 300 };
  const test_case_t* c = find_case("scalar_f32");
  uint64_t exe = compile_case(g.ca, c);
  uint64_t b = new_id();
  upload(g.ca, b, &c->in[0][1], 0);
  uint64_t chain[kSteps + 1];
  chain[0] = root;
  for (int k = 1; k <= kSteps; ++k) {
    chain[k] = new_id();
    uint64_t in[2] = {chain[k - 1], b};
    const uint64_t* args[1] = {in};
    const uint64_t* outs[1] = {&chain[k]};
    ASSERT_OK(cw_client_launch(g.ca, exe, 1, 2, args, 1, outs, NULL, NULL));
  }
  expect_error(cw_client_flush(g.ca), g.reject.expect, "the chain's launches");
  cw_status_t first = cw_client_await(g.ca, chain[1]);
  cw_status_t last = cw_client_await(g.ca, chain[kSteps]);
  assert_non_null(first);
  assert_non_null(last);
  fprintf(stderr, "  step %d: %s\n", kSteps, cw_status_message(last));
  assert_non_null(strstr(cw_status_message(last), g.reject.expect));
  // Both read "await buffer N: " and the error the chain carries.
  const char* carried_last = strstr(cw_status_message(last), ": ");
  const char* carried_first = strstr(cw_status_message(first), ": ");
  assert_non_null(carried_last);
  assert_non_null(carried_first);
  assert_string_equal(carried_last, carried_first);
  assert_int_equal(cw_status_code(last), cw_status_code(first));
  cw_status_free(first);
  cw_status_free(last);
  ASSERT_OK(cw_client_delete(g.ca, chain, kSteps + 1, NULL, NULL));
  uint64_t rest[4] = {bad_exe, bad_in, exe, b};
  ASSERT_OK(cw_client_delete(g.ca, rest, 4, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

// ---- A client killed in the middle of a 256 MiB upload -----------------------

typedef struct frame_s {
  uint8_t* data;
  size_t size;  // header + payload (bulk follows separately)
} frame_t;

static frame_t build_frame(uint16_t type, uint64_t request_id, const ProtobufCMessage* msg,
                           uint64_t bulk_len) {
  size_t plen = protobuf_c_message_get_packed_size(msg);
  frame_t f = {malloc(CW_FRAME_HEADER_SIZE + plen + 1), CW_FRAME_HEADER_SIZE + plen};
  assert_non_null(f.data);
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = type,
                         .payload_len = (uint32_t)plen, .request_id = request_id,
                         .bulk_len = bulk_len};
  cw_frame_header_encode(&h, f.data);
  protobuf_c_message_pack(msg, f.data + CW_FRAME_HEADER_SIZE);
  return f;
}

static int write_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int read_all(int fd, void* data, size_t len) {
  uint8_t* p = data;
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

// Reads one reply frame; returns 0 unless it is an error reply or I/O fails.
static int read_reply(int fd) {
  uint8_t h[CW_FRAME_HEADER_SIZE], payload[4096];
  if (read_all(fd, h, sizeof(h)) != 0) return -1;
  uint32_t flags = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 |
                   (uint32_t)h[11] << 24;
  uint32_t plen = (uint32_t)h[12] | (uint32_t)h[13] << 8 | (uint32_t)h[14] << 16 |
                  (uint32_t)h[15] << 24;
  if (plen > sizeof(payload) || read_all(fd, payload, plen) != 0) return -1;
  return (flags & CW_FRAME_ERROR) ? -1 : 0;
}

// Child: everything it sends was built by the parent before fork (the child
// of a threaded process sticks to plain system calls). Reports progress on
// `notify`: 'S' once half the bulk is written, 'E' on any failure.
static void stalled_upload_child(const struct sockaddr_in* addr, const frame_t* hello,
                                 const frame_t* small, const void* small_data, size_t small_len,
                                 const frame_t* big, const void* chunk, size_t chunk_len,
                                 size_t chunks, int notify) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (const struct sockaddr*)addr, sizeof(*addr)) != 0) goto fail;
  if (write_all(fd, hello->data, hello->size) != 0 || read_reply(fd) != 0) goto fail;
  if (write_all(fd, small->data, small->size) != 0 || write_all(fd, small_data, small_len) != 0 ||
      read_reply(fd) != 0)
    goto fail;
  if (write_all(fd, big->data, big->size) != 0) goto fail;
  for (size_t i = 0; i < chunks; i++)
    if (write_all(fd, chunk, chunk_len) != 0) goto fail;
  if (write(notify, "S", 1) != 1) _exit(3);
  for (;;) pause();  // stall until SIGKILL
fail:
  if (write(notify, "E", 1) != 1) _exit(2);
  _exit(1);
}

static int parse_tcp_address(const char* address, struct sockaddr_in* out) {
  char host[256];
  const char* colon = strrchr(address, ':');
  if (!colon || (size_t)(colon - address) >= sizeof(host)) return -1;
  memcpy(host, address, (size_t)(colon - address));
  host[colon - address] = '\0';
  memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons((uint16_t)atoi(colon + 1));
  return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

static void test_client_killed_mid_upload(void** state) {
  (void)state;
  struct sockaddr_in addr;
  assert_int_equal(parse_tcp_address(g.a.address, &addr), 0);
  Causeway__V1__Stats* base = get_stats(g.ca);
  fprintf(stderr, "  before: sessions %llu buffers %llu connections %llu\n",
          (unsigned long long)base->sessions, (unsigned long long)base->buffers,
          (unsigned long long)base->connections);

  Causeway__V1__HelloRequest hello = CAUSEWAY__V1__HELLO_REQUEST__INIT;
  hello.min_version = 1;
  hello.max_version = 1;
  hello.role = CAUSEWAY__V1__ROLE__ROLE_CLIENT;
  hello.peer_name = "itest-doomed-client";
  const char* token = getenv("CAUSEWAY_TOKEN");
  if (token) hello.token = (ProtobufCBinaryData){strlen(token), (uint8_t*)token};
  frame_t fh = build_frame(CW_MSG_HELLO, 1, &hello.base, 0);

  int64_t small_dims[1] = {16};
  float small_data[16] = {0};
  Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  up.buffer_id = 1;
  up.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  up.n_dims = 1;
  up.dims = small_dims;
  frame_t fs = build_frame(CW_MSG_UPLOAD, 2, &up.base, sizeof(small_data));

  const size_t big_bytes = (size_t)256 << 20, chunk_len = (size_t)1 << 20;
  int64_t big_dims[2] = {8192, 8192};  // f32: 256 MiB
  up.buffer_id = 2;
  up.n_dims = 2;
  up.dims = big_dims;
  frame_t fb = build_frame(CW_MSG_UPLOAD, 3, &up.base, big_bytes);
  void* chunk = calloc(1, chunk_len);
  assert_non_null(chunk);

  int notify[2];
  assert_int_equal(pipe(notify), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(notify[0]);
    stalled_upload_child(&addr, &fh, &fs, small_data, sizeof(small_data), &fb, chunk,
                         chunk_len, big_bytes / 2 / chunk_len, notify[1]);
  }
  close(notify[1]);
  free(fh.data);
  free(fs.data);
  free(fb.data);
  free(chunk);

  struct pollfd pfd = {.fd = notify[0], .events = POLLIN};
  char flag = 0;
  int ready = poll(&pfd, 1, 60000);
  if (ready != 1 || read(notify[0], &flag, 1) != 1 || flag != 'S') {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(notify[0]);
    fail_msg("doomed client did not get half of its upload out (flag '%c')", flag ? flag : '?');
  }
  close(notify[0]);

  Causeway__V1__Stats* mid = get_stats(g.ca);
  fprintf(stderr, "  stalled: sessions %llu buffers %llu connections %llu\n",
          (unsigned long long)mid->sessions, (unsigned long long)mid->buffers,
          (unsigned long long)mid->connections);
  assert_int_equal(mid->sessions, base->sessions + 1);
  assert_true(mid->buffers >= base->buffers + 1);  // the completed small upload
  free_msg(mid);

  assert_int_equal(kill(pid, SIGKILL), 0);
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  assert_true(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);

  int64_t deadline = cw_time_now_ms() + 5000;
  Causeway__V1__Stats* after = NULL;
  for (;;) {
    free_msg(after);
    after = get_stats(g.ca);
    if (after->sessions == base->sessions && after->buffers == base->buffers &&
        after->buffer_bytes == base->buffer_bytes && after->connections == base->connections)
      break;
    if (cw_time_now_ms() > deadline) {
      fprintf(stderr, "  after kill: sessions %llu buffers %llu bytes %llu connections %llu\n",
              (unsigned long long)after->sessions, (unsigned long long)after->buffers,
              (unsigned long long)after->buffer_bytes, (unsigned long long)after->connections);
      free_msg(after);
      free_msg(base);
      fail_msg("the killed client's session/buffers were not freed within 5 s");
    }
    cw_test_sleep_ms(50);
  }
  fprintf(stderr, "  freed after %lld ms\n", (long long)(cw_time_now_ms() - (deadline - 5000)));
  free_msg(after);
  free_msg(base);
  run_case(g.ca, find_case("mlp_f32"), "A after a client died");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compile_error),
      cmocka_unit_test(test_launch_mismatch),
      cmocka_unit_test(test_error_input_poisons_outputs),
      cmocka_unit_test(test_error_chain_keeps_one_prefix),
      cmocka_unit_test(test_client_killed_mid_upload),
      cmocka_unit_test(itest_test_clean_shutdown),
  };
  return cmocka_run_group_tests_name("worker_failures", tests, itest_group_setup,
                                     itest_group_teardown);
}
