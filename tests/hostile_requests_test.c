// Well-framed requests with bad meaning: impossible arrays, ids that are
// unknown or taken, executables given garbage and wrong arguments, SENDs to
// peers that are not there or refuse. Each is an error reply on a connection
// that stays usable.
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"
#include "cw_time.h"

static void test_upload_bad_arrays(void** state) {
  (void)state;
  uint8_t bulk[16] = {0};
  struct {
    const char* what;
    int dtype;
    int64_t dims[4];
    size_t rank;
    uint64_t blen;
    const char* keywords;
  } cases[] = {
      {"UPLOAD dims overflow 64 bits", 11, {1ll << 40, 1ll << 40}, 2, 16, "overflow"},
      {"UPLOAD dims overflow via element size", 12, {INT64_MAX}, 1, 16, "overflow"},
      {"UPLOAD negative dim", 11, {-4}, 1, 16, "negative"},
      {"UPLOAD INT64_MIN dim", 11, {2, INT64_MIN}, 2, 16, "negative"},
      {"UPLOAD unknown dtype 99", 99, {4}, 1, 16, "type|dtype"},
      {"UPLOAD dtype 0 (INVALID)", 0, {4}, 1, 16, "type|dtype"},
      {"UPLOAD bulk 12 != extent 16", 11, {4}, 1, 12, "differ|extent|bulk|16"},
      {"UPLOAD bulk 16 != extent 12", 11, {3}, 1, 16, "differ|extent|bulk|12"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    Causeway__V1__UploadRequest m = upload_req(70 + i, cases[i].dtype, cases[i].dims,
                                               cases[i].rank);
    packed_t p = pack(&m.base);
    hdr_t h = hdr_of(T_UPLOAD, 16, (uint32_t)p.len, cases[i].blen);
    violation(cases[i].what, true, &h, p.data, p.len, bulk, (size_t)cases[i].blen, 16,
              C_INVALID_ARGUMENT, cases[i].keywords);
    free(p.data);
  }
  // Not a violation: a well-formed upload to a device that does not exist is
  // a semantic error; its bulk is consumed and the connection stays usable.
  int fd = open_hello();
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest m = upload_req(80, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  m.device = 99;
  assert_true(send_msg(fd, T_UPLOAD, 17, &m.base, bulk, 16));
  const uint32_t dev_codes[] = {C_INVALID_ARGUMENT, C_NOT_FOUND, 11 /* OUT_OF_RANGE */, 0};
  expect_error_codes(fd, "UPLOAD to device 99", 17, dev_codes, "device", NULL);
  ping(fd, 18);
  close(fd);
}

static void expect_not_found_then_ping(int fd, const char* what, uint64_t rid,
                                       const char* id_text) {
  expect_error(fd, what, rid, C_NOT_FOUND, id_text);
  ping(fd, rid + 1000);  // the connection stays open and works
}

static void test_unknown_ids(void** state) {
  (void)state;
  int fd = open_hello();
  {
    Causeway__V1__DownloadRequest m = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    m.buffer_id = 123456789;
    assert_true(send_msg(fd, T_DOWNLOAD, 30, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "DOWNLOAD unknown id", 30, "123456789");
  }
  {
    Causeway__V1__AwaitRequest m = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
    m.buffer_id = 123456790;
    assert_true(send_msg(fd, T_AWAIT, 31, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "AWAIT unknown id", 31, "123456790");
  }
  {
    Causeway__V1__DeleteRequest m = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    uint64_t ids[1] = {123456791};
    m.ids = ids;
    m.n_ids = 1;
    assert_true(send_msg(fd, T_DELETE, 32, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "DELETE unknown id", 32, "123456791");
  }
  {
    Causeway__V1__CopyRequest m = CAUSEWAY__V1__COPY_REQUEST__INIT;
    m.src_id = 123456792;
    m.dst_id = 5;
    m.dst_device = 1;
    assert_true(send_msg(fd, T_COPY, 33, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "COPY unknown src id", 33, "123456792");
  }
  {
    Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
    m.src_id = 123456793;
    m.peer_address = g_plain.addr;  // a live peer: only the id is wrong
    m.dst_id = 6;
    m.dst_device = 0;
    m.dst_session = 4242;
    assert_true(send_msg(fd, T_SEND, 34, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "SEND unknown src id", 34, "123456793");
  }
  {
    Causeway__V1__SerializeRequest m = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
    m.exe_id = 123456794;
    assert_true(send_msg(fd, T_SERIALIZE, 35, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "SERIALIZE unknown exe id", 35, "123456794");
  }
  {
    Causeway__V1__LaunchRequest m = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
    m.exe_id = 123456795;
    uint64_t args[1] = {1}, outs[1] = {7};
    Causeway__V1__IdList a = CAUSEWAY__V1__ID_LIST__INIT, o = CAUSEWAY__V1__ID_LIST__INIT;
    a.ids = args;
    a.n_ids = 1;
    o.ids = outs;
    o.n_ids = 1;
    Causeway__V1__IdList* ap[1] = {&a};
    Causeway__V1__IdList* op[1] = {&o};
    m.args = ap;
    m.n_args = 1;
    m.outputs = op;
    m.n_outputs = 1;
    m.launch_id = 1;
    assert_true(send_msg(fd, T_LAUNCH, 36, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "LAUNCH unknown exe id", 36, "123456795");
  }
  {
    // A known buffer but an unknown one among several DELETE ids: NOT_FOUND
    // names the unknown id, the known one is still deleted.
    upload_f32(fd, 37, 40, 4);
    Causeway__V1__DeleteRequest m = CAUSEWAY__V1__DELETE_REQUEST__INIT;
    uint64_t ids[2] = {40, 123456796};
    m.ids = ids;
    m.n_ids = 2;
    assert_true(send_msg(fd, T_DELETE, 38, &m.base, NULL, 0));
    expect_not_found_then_ping(fd, "DELETE known + unknown id", 38, "123456796");
    Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    d.buffer_id = 40;
    assert_true(send_msg(fd, T_DOWNLOAD, 39, &d.base, NULL, 0));
    expect_not_found_then_ping(fd, "DOWNLOAD of the deleted id", 39, "40");
  }
  {
    // Id 0 is never valid.
    Causeway__V1__DownloadRequest m = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
    m.buffer_id = 0;
    assert_true(send_msg(fd, T_DOWNLOAD, 41, &m.base, NULL, 0));
    const uint32_t codes[] = {C_NOT_FOUND, C_INVALID_ARGUMENT, 0};
    expect_error_codes(fd, "DOWNLOAD id 0", 41, codes, "0", NULL);
    ping(fd, 1041);
  }
  close(fd);
  assert_serving(&g_plain);
}

static void test_duplicate_id(void** state) {
  (void)state;
  int fd = open_hello();
  upload_f32(fd, 50, 9, 4);
  // The same id again: ALREADY_EXISTS; its bulk is consumed, the connection
  // stays open and the first buffer is intact.
  int64_t dims[1] = {4};
  Causeway__V1__UploadRequest m = upload_req(9, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  float other[4] = {-1, -1, -1, -1};
  assert_true(send_msg(fd, T_UPLOAD, 51, &m.base, other, sizeof other));
  expect_error(fd, "UPLOAD duplicate id 9", 51, C_ALREADY_EXISTS, "9");
  ping(fd, 52);
  Causeway__V1__ExpectRequest em = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  em.buffer_id = 9;
  assert_true(send_msg(fd, T_EXPECT, 53, &em.base, NULL, 0));
  expect_error(fd, "EXPECT duplicate id 9", 53, C_ALREADY_EXISTS, "9");
  Causeway__V1__CopyRequest cm = CAUSEWAY__V1__COPY_REQUEST__INIT;
  cm.src_id = 9;
  cm.dst_id = 9;
  cm.dst_device = 1;
  assert_true(send_msg(fd, T_COPY, 54, &cm.base, NULL, 0));
  expect_error(fd, "COPY onto existing id 9", 54, C_ALREADY_EXISTS, "9");
  Causeway__V1__DownloadRequest dm = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dm.buffer_id = 9;
  assert_true(send_msg(fd, T_DOWNLOAD, 55, &dm.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "DOWNLOAD id 9", T_DOWNLOAD, 55, &f);
  assert_int_equal(f.bulk_len, 16);
  float want[4] = {0.5f, 1.5f, 2.5f, 3.5f};
  if (memcmp(f.bulk, want, 16) != 0) fail_msg("duplicate UPLOAD overwrote buffer 9");
  frame_free(&f);
  close(fd);
  assert_serving(&g_plain);
}

static const char k_mlir[] =
    "module @hostile {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static void send_compile(int fd, uint64_t rid, uint64_t exe, const char* format,
                         const void* code, size_t code_len, const void* opts, size_t opts_len) {
  Causeway__V1__CompileRequest m = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  m.exe_id = exe;
  m.format = (char*)format;
  m.code.data = (uint8_t*)code;
  m.code.len = code_len;
  m.compile_options.data = (uint8_t*)opts;
  m.compile_options.len = opts_len;
  assert_true(send_msg(fd, T_COMPILE, rid, &m.base, NULL, 0));
}

// LAUNCH of `exe` on `ndev` devices (at most 2), each with `args` and one
// output (out + d), donating `ndonate` of them.
static void send_launch_donating(int fd, uint64_t rid, uint64_t exe, size_t ndev,
                                 const uint64_t* args, size_t nargs, uint64_t out,
                                 const uint32_t* donate, size_t ndonate) {
  Causeway__V1__LaunchRequest m = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  Causeway__V1__IdList a[2] = {CAUSEWAY__V1__ID_LIST__INIT, CAUSEWAY__V1__ID_LIST__INIT};
  Causeway__V1__IdList o[2] = {CAUSEWAY__V1__ID_LIST__INIT, CAUSEWAY__V1__ID_LIST__INIT};
  Causeway__V1__IdList* ap[2] = {&a[0], &a[1]};
  Causeway__V1__IdList* op[2] = {&o[0], &o[1]};
  uint64_t outs[2] = {out, out + 1};
  for (size_t d = 0; d < ndev && d < 2; ++d) {
    a[d].ids = (uint64_t*)args;
    a[d].n_ids = nargs;
    o[d].ids = &outs[d];
    o[d].n_ids = 1;
  }
  m.exe_id = exe;
  m.args = ap;
  m.n_args = ndev;
  m.outputs = op;
  m.n_outputs = ndev;
  m.donate = (uint32_t*)donate;
  m.n_donate = ndonate;
  m.launch_id = rid;
  assert_true(send_msg(fd, T_LAUNCH, rid, &m.base, NULL, 0));
}

static void send_launch(int fd, uint64_t rid, uint64_t exe, size_t ndev, const uint64_t* args,
                        size_t nargs, uint64_t out) {
  send_launch_donating(fd, rid, exe, ndev, args, nargs, out, NULL, 0);
}

static void test_executables_hostile(void** state) {
  (void)state;
  int fd = open_hello();
  frame_t f;
  send_compile(fd, 2, 500, "mlir", k_mlir, strlen(k_mlir), NULL, 0);
  expect_reply(fd, "COMPILE of a valid module", T_COMPILE, 2, &f);
  frame_free(&f);
  upload_f32(fd, 3, 10, 4);
  // Unknown argument id with a known executable.
  uint64_t unknown[1] = {999};
  send_launch(fd, 4, 500, 1, unknown, 1, 1000);
  expect_error(fd, "LAUNCH with unknown argument id 999", 4, C_NOT_FOUND, "999");
  ping(fd, 5);
  // Wrong number of arguments / device lists.
  uint64_t two[2] = {10, 10};
  send_launch(fd, 6, 500, 1, two, 2, 1010);
  const uint32_t arg_codes[] = {C_INVALID_ARGUMENT, C_FAILED_PRECONDITION, 0};
  expect_error_codes(fd, "LAUNCH with 2 args for 1 parameter", 6, arg_codes, "arg", NULL);
  ping(fd, 7);
  send_launch(fd, 8, 500, 0, NULL, 0, 1020);
  expect_error_codes(fd, "LAUNCH with no device lists", 8, arg_codes, "", NULL);
  ping(fd, 9);
  uint64_t one[1] = {10};
  send_launch(fd, 10, 500, 2, one, 1, 1030);
  expect_error_codes(fd, "LAUNCH with 2 device lists for 1 device", 10, arg_codes, "device",
                     NULL);
  ping(fd, 11);
  // Output id that already exists.
  send_launch(fd, 12, 500, 1, one, 1, 10);
  expect_error(fd, "LAUNCH output onto existing id 10", 12, C_ALREADY_EXISTS, "10");
  ping(fd, 13);
  // Argument of the wrong shape (f32[8] for tensor<4xf32>).
  upload_f32(fd, 14, 11, 8);
  uint64_t wrong[1] = {11};
  send_launch(fd, 15, 500, 1, wrong, 1, 1040);
  const uint32_t shape_codes[] = {C_INVALID_ARGUMENT, C_FAILED_PRECONDITION, 0};
  expect_error_codes(fd, "LAUNCH with an f32[8] argument for f32[4]", 15, shape_codes, "", NULL);
  ping(fd, 16);
  // A valid launch still works afterwards.
  send_launch(fd, 17, 500, 1, one, 1, 1050);
  expect_reply(fd, "valid LAUNCH", T_LAUNCH, 17, &f);
  frame_free(&f);
  // Garbage programs, options and serialized executables: errors, no crash.
  static const char garbage[] = "\x00\x01 this is not MLIR \xff\xfe";
  send_compile(fd, 18, 501, "mlir", garbage, sizeof garbage - 1, NULL, 0);
  expect_error_codes(fd, "COMPILE of garbage bytes", 18,
                     (const uint32_t[]){C_INVALID_ARGUMENT, 2, C_INTERNAL_CODE, 0}, "", NULL);
  ping(fd, 19);
  send_launch(fd, 20, 501, 1, one, 1, 1060);
  {
    frame_t g;
    int r = recv_frame(fd, &g, IO_TIMEOUT_MS);
    if (r != 1 || g.flags != (F_REPLY | F_ERROR)) {
      fail_msg("LAUNCH of the failed executable 501: want an ERROR reply, got %s flags 0x%x",
               recv_result_name(r), g.flags);
    }
    fprintf(stderr, "[hostile]   %-46s -> error reply\n", "LAUNCH of the failed executable");
    frame_free(&g);
  }
  ping(fd, 21);
  send_compile(fd, 22, 502, "mlir", k_mlir, strlen(k_mlir), "\xff\xff\xff\xff", 4);
  expect_error_codes(fd, "COMPILE with garbage compile options", 22,
                     (const uint32_t[]){C_INVALID_ARGUMENT, 2, C_INTERNAL_CODE, 0}, "", NULL);
  ping(fd, 23);
  send_compile(fd, 24, 503, "no-such-format", k_mlir, strlen(k_mlir), NULL, 0);
  expect_error_codes(fd, "COMPILE with format \"no-such-format\"", 24,
                     (const uint32_t[]){C_INVALID_ARGUMENT, C_UNIMPLEMENTED, 0}, "format", NULL);
  ping(fd, 25);
  {
    Causeway__V1__LoadRequest lm = CAUSEWAY__V1__LOAD_REQUEST__INIT;
    lm.exe_id = 504;
    uint8_t junk[512];
    uint64_t seed = 0x10AD;
    for (size_t i = 0; i < sizeof junk; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      junk[i] = (uint8_t)(seed >> 56);
    }
    assert_true(send_msg(fd, T_LOAD, 26, &lm.base, junk, sizeof junk));
    expect_error_codes(fd, "LOAD of 512 random bytes", 26,
                       (const uint32_t[]){C_INVALID_ARGUMENT, 2, C_INTERNAL_CODE, 0}, "", NULL);
    ping(fd, 27);
  }
  close(fd);
  assert_serving(&g_plain);
}

// LAUNCH of `exe` on one device with `args` and `outs`, donating `donate`.
static void send_launch_1dev(int fd, uint64_t rid, uint64_t exe, const uint64_t* args,
                             size_t nargs, const uint64_t* outs, size_t nouts,
                             const uint32_t* donate, size_t ndonate) {
  Causeway__V1__LaunchRequest m = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  Causeway__V1__IdList a = CAUSEWAY__V1__ID_LIST__INIT, o = CAUSEWAY__V1__ID_LIST__INIT;
  Causeway__V1__IdList* ap = &a;
  Causeway__V1__IdList* op = &o;
  a.ids = (uint64_t*)args;
  a.n_ids = nargs;
  o.ids = (uint64_t*)outs;
  o.n_ids = nouts;
  m.exe_id = exe;
  m.args = &ap;
  m.n_args = 1;
  m.outputs = &op;
  m.n_outputs = 1;
  m.donate = (uint32_t*)donate;
  m.n_donate = ndonate;
  m.launch_id = rid;
  assert_true(send_msg(fd, T_LAUNCH, rid, &m.base, NULL, 0));
}

// DOWNLOAD of `id` answers ERROR `code` naming `keywords` (at once: nothing
// of a refused launch is left pending).
static void expect_download_error(int fd, uint64_t rid, uint64_t id, uint32_t code,
                                  const char* keywords) {
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = id;
  assert_true(send_msg(fd, T_DOWNLOAD, rid, &d.base, NULL, 0));
  char what[96];
  snprintf(what, sizeof what, "DOWNLOAD of output %" PRIu64 " after the refusal", id);
  expect_error(fd, what, rid, code, keywords);
}

// Launch lists that name the wrong kind of object, too many outputs, an
// output id taken after others were made, or a donation past the arguments:
// refused, and the outputs they made pending are gone (refused by their
// lists) or carry the refusal (refused when checked against the executable),
// never left pending.
static void test_launch_lists_and_kinds(void** state) {
  (void)state;
  int fd = open_hello();
  frame_t f;
  send_compile(fd, 2, 600, "mlir", k_mlir, strlen(k_mlir), NULL, 0);
  expect_reply(fd, "COMPILE of a valid module", T_COMPILE, 2, &f);
  frame_free(&f);
  upload_f32(fd, 3, 10, 4);
  uint64_t arg[1] = {10};
  // The second output id is taken: the first, already made pending, goes.
  uint64_t taken[2] = {2000, 10};
  send_launch_1dev(fd, 4, 600, arg, 1, taken, 2, NULL, 0);
  expect_error(fd, "LAUNCH whose second output id is taken", 4, C_ALREADY_EXISTS, "10");
  expect_download_error(fd, 5, 2000, C_NOT_FOUND, "2000");
  uint64_t twice[2] = {2001, 2001};
  send_launch_1dev(fd, 6, 600, arg, 1, twice, 2, NULL, 0);
  expect_error(fd, "LAUNCH naming output 2001 twice", 6, C_ALREADY_EXISTS, "2001");
  expect_download_error(fd, 7, 2001, C_NOT_FOUND, "2001");
  // A buffer as the executable, the executable as an argument.
  uint64_t out1[1] = {2002};
  send_launch_1dev(fd, 8, 10, arg, 1, out1, 1, NULL, 0);
  expect_error(fd, "LAUNCH of buffer 10", 8, C_INVALID_ARGUMENT, "not an executable");
  expect_download_error(fd, 9, 2002, C_INVALID_ARGUMENT, "not an executable");
  uint64_t exe_arg[1] = {600};
  uint64_t out2[1] = {2003};
  send_launch_1dev(fd, 10, 600, exe_arg, 1, out2, 1, NULL, 0);
  expect_error(fd, "LAUNCH with executable 600 as argument", 10, C_INVALID_ARGUMENT,
               "not a buffer");
  expect_download_error(fd, 11, 2003, C_INVALID_ARGUMENT, "not a buffer");
  // Two outputs for a program with one.
  uint64_t two_outs[2] = {2004, 2005};
  send_launch_1dev(fd, 12, 600, arg, 1, two_outs, 2, NULL, 0);
  expect_error(fd, "LAUNCH naming 2 outputs of a 1-output program", 12, C_INVALID_ARGUMENT,
               "outputs");
  expect_download_error(fd, 13, 2005, C_INVALID_ARGUMENT, "outputs");
  // Donating argument 5 of 1.
  uint32_t donate[1] = {5};
  uint64_t out3[1] = {2006};
  send_launch_1dev(fd, 14, 600, arg, 1, out3, 1, donate, 1);
  expect_error(fd, "LAUNCH donating argument 5 of 1", 14, C_INVALID_ARGUMENT,
               "donates argument 5");
  expect_download_error(fd, 15, 2006, C_NOT_FOUND, "2006");
  // Buffer 10 and executable 600 still work.
  uint64_t out4[1] = {2007};
  send_launch_1dev(fd, 16, 600, arg, 1, out4, 1, NULL, 0);
  expect_reply(fd, "valid LAUNCH", T_LAUNCH, 16, &f);
  frame_free(&f);
  close(fd);
  assert_serving(&g_plain);
}

// A DELETE of an executable still compiling (pipelined right behind its
// COMPILE): the COMPILE answers CANCELLED naming the delete, the built
// program is dropped (ASan: no leak), and the id can be compiled again.
static void test_delete_while_compiling(void** state) {
  (void)state;
  int fd = open_hello();
  // Both frames in one send: the worker reads the DELETE before the
  // compile (on its thread pool) can be done.
  Causeway__V1__CompileRequest cm = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  cm.exe_id = 900;
  cm.format = "mlir";
  cm.code.data = (uint8_t*)k_mlir;
  cm.code.len = strlen(k_mlir);
  uint64_t id = 900;
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &id;
  del.n_ids = 1;
  packed_t pc = pack(&cm.base), pd = pack(&del.base);
  uint8_t* both = malloc(2 * HDR + pc.len + pd.len);
  hdr_t hc = hdr_of(T_COMPILE, 2, (uint32_t)pc.len, 0);
  hdr_t hd = hdr_of(T_DELETE, 3, (uint32_t)pd.len, 0);
  hdr_encode(&hc, both);
  memcpy(both + HDR, pc.data, pc.len);
  hdr_encode(&hd, both + HDR + pc.len);
  memcpy(both + 2 * HDR + pc.len, pd.data, pd.len);
  assert_true(send_all(fd, both, 2 * HDR + pc.len + pd.len));
  free(both);
  free(pc.data);
  free(pd.data);
  frame_t f;
  expect_reply(fd, "DELETE of the executable compiling", T_DELETE, 3, &f);
  frame_free(&f);
  expect_error(fd, "COMPILE whose executable was deleted", 2, 1 /* CANCELLED */,
               "deleted before it was built");
  send_compile(fd, 4, 900, "mlir", k_mlir, strlen(k_mlir), NULL, 0);
  expect_reply(fd, "COMPILE of the id again", T_COMPILE, 4, &f);
  frame_free(&f);
  close(fd);
  assert_serving(&g_plain);
}

// A launch that donates more arguments than it has is refused by its lists,
// and nothing is looked up for it (a review's 20,000-long lists took 10 s).
static void test_launch_donates_too_many(void** state) {
  (void)state;
  int fd = open_hello();
  upload_f32(fd, 2, 60, 4);
  uint64_t args[1] = {60};
  uint32_t donate[3] = {0, 0, 0};
  send_launch_donating(fd, 3, 123456797, 1, args, 1, 61, donate, 3);
  expect_error(fd, "LAUNCH donating 3 of 1 argument", 3, C_INVALID_ARGUMENT,
               "donates 3 arguments of 1");
  // Buffer 60 was not dropped for it.
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 60;
  assert_true(send_msg(fd, T_DOWNLOAD, 4, &d.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "DOWNLOAD of the argument", T_DOWNLOAD, 4, &f);
  frame_free(&f);
  close(fd);
}

// An AWAIT holds an object the client then DELETEs: when its session closes
// with nothing else left in it, the AWAIT still ends (it was never failed: a
// request and its connection leaked, and at SIGTERM its waiter read the
// freed object).
static void test_await_of_deleted_object_at_close(void** state) {
  (void)state;
  int s = open_hello();
  Causeway__V1__Stats* st = stats(s, 1);
  uint64_t before = st->transfers_pending;
  causeway__v1__stats__free_unpacked(st, NULL);
  int fd = open_hello();
  Causeway__V1__ExpectRequest e = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  e.buffer_id = 70;
  assert_true(send_msg(fd, T_EXPECT, 2, &e.base, NULL, 0));
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 70;
  assert_true(send_msg(fd, T_AWAIT, 3, &aw.base, NULL, 0));
  uint64_t id = 70;
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &id;
  del.n_ids = 1;
  assert_true(send_msg(fd, T_DELETE, 4, &del.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "EXPECT", T_EXPECT, 2, &f);
  frame_free(&f);
  expect_reply(fd, "DELETE of the awaited object", T_DELETE, 4, &f);
  frame_free(&f);
  close(fd);
  uint64_t now = before + 1;
  for (uint64_t rid = 5; now > before && rid < 5 + 500; ++rid) {
    st = stats(s, rid);
    now = st->transfers_pending;
    causeway__v1__stats__free_unpacked(st, NULL);
    if (now > before) sleep_ms(20);
  }
  if (now > before) fail_msg("the AWAIT never ended: %" PRIu64 " requests pending", now);
  close(s);
  assert_serving(&g_plain);
}

static void test_send_to_bad_peers(void** state) {
  (void)state;
  int fd = open_hello();
  upload_f32(fd, 2, 20, 4);
  // "localhost:1": a name, resolved off the worker's loop, then refused.
  static const char* peers[] = {"127.0.0.1:1", "", "not-an-address", "/nonexistent/socket",
                                "localhost:1"};
  for (size_t i = 0; i < sizeof peers / sizeof peers[0]; ++i) {
    Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
    m.src_id = 20;
    m.peer_address = (char*)peers[i];
    m.dst_id = 21;
    m.dst_session = 4243;
    assert_true(send_msg(fd, T_SEND, 3 + i, &m.base, NULL, 0));
    char what[96];
    snprintf(what, sizeof what, "SEND to peer \"%s\"", peers[i]);
    expect_error_codes(fd, what, 3 + i,
                       (const uint32_t[]){14 /* UNAVAILABLE */, C_INVALID_ARGUMENT, 0}, "", NULL);
    ping(fd, 100 + i);
  }
  // A live peer (this worker) but a session that does not exist there: the
  // peer's refusal comes back.
  Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
  m.src_id = 20;
  m.peer_address = g_plain.addr;
  m.dst_id = 22;
  m.dst_session = 0xFEEDFACE;
  assert_true(send_msg(fd, T_SEND, 20, &m.base, NULL, 0));
  expect_error_codes(fd, "SEND into a missing session at the peer", 20,
                     (const uint32_t[]){C_NOT_FOUND, 14, 0}, "session", NULL);
  ping(fd, 21);
  // Token worker as peer: this worker presents no token, must be refused.
  m.peer_address = g_token.addr;
  m.dst_session = 1;
  assert_true(send_msg(fd, T_SEND, 22, &m.base, NULL, 0));
  expect_error_codes(fd, "SEND to a token worker without the token", 22,
                     (const uint32_t[]){C_UNAUTHENTICATED, 14, 0}, "", NULL);
  ping(fd, 23);
  close(fd);
  assert_serving(&g_plain);
  assert_serving(&g_token);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_upload_bad_arrays),
      cmocka_unit_test(test_unknown_ids),
      cmocka_unit_test(test_duplicate_id),
      cmocka_unit_test(test_executables_hostile),
      cmocka_unit_test(test_send_to_bad_peers),
      cmocka_unit_test(test_launch_donates_too_many),
      cmocka_unit_test(test_launch_lists_and_kinds),
      cmocka_unit_test(test_delete_while_compiling),
      cmocka_unit_test(test_await_of_deleted_object_at_close),
      // Last: SIGTERM the workers and require exit 0 (ASan: no leaks).
      cmocka_unit_test(hostile_test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_requests", tests, hostile_group_setup_with_token,
                                     hostile_group_teardown);
}
