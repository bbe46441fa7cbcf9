// Worker integration test: real causeway-worker daemons with XLA's real CPU
// PJRT plugin, driven through the C client library. Programs, inputs and
// stock JAX's outputs come from tests/gen_programs.py (the gen_programs CTest
// fixture writes them to $CW_PROGRAMS_DIR); every case is compiled, run and
// compared bit for bit on a worker reached over TCP (A, 127.0.0.1:0) and on
// one reached over a Unix socket (B). Then: strided uploads, serialize on A
// and load on B, worker-to-worker SEND, on-worker COPY, compile errors,
// launch errors, error propagation, pipelining, a client killed mid-upload,
// and a clean SIGTERM shutdown (exit 0: under ASan that means no leaks).
//
// Comparisons are exact. Worker and stock JAX run the same XLA build on the
// same machine, and the SPMD case uses integer-valued floats so its
// all-reduce is exact in any order; a tolerance would only hide bugs.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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

#include "cw_client.h"
#include "cw_test_util.h"

#define MAX_CASES 32
#define MAX_DEVICES 8
#define MAX_ARGS 8
#define MAX_OUTS 4
#define MAX_RANK 8
#define WORKER_DEVICES 4

// ---- The manifest written by gen_programs.py --------------------------------

typedef struct array_s {
  int dtype;  // proto DType wire number
  size_t rank;
  int64_t dims[MAX_RANK];
  void* data;
  size_t size;
} array_t;

typedef struct test_case_s {
  char name[64];
  char format[16];  // text, bytecode or portable: all sent as "mlir"
  int devices;
  void* program;
  size_t program_size;
  void* options;
  size_t options_size;
  size_t num_args;     // per device
  size_t num_outputs;  // per device
  array_t in[MAX_DEVICES][MAX_ARGS];
  array_t out[MAX_DEVICES][MAX_OUTS];
} test_case_t;

typedef struct reject_case_s {
  void* program;
  size_t program_size;
  void* options;
  size_t options_size;
  char expect[256];  // a substring of XLA's error text
} reject_case_t;

static struct {
  char programs_dir[1024];
  char tmpdir[256];
  test_case_t cases[MAX_CASES];
  size_t num_cases;
  reject_case_t reject;
  cw_test_worker_t a;  // TCP
  cw_test_worker_t b;  // Unix socket
  cw_client_t* ca;
  cw_client_t* cb;
  uint64_t next_id;
} g;

static uint64_t new_id(void) { return ++g.next_id; }

static size_t dtype_size(int dtype) {
  switch (dtype) {
    case CAUSEWAY__V1__DTYPE__DTYPE_PRED:
    case CAUSEWAY__V1__DTYPE__DTYPE_S8:
    case CAUSEWAY__V1__DTYPE__DTYPE_U8: return 1;
    case CAUSEWAY__V1__DTYPE__DTYPE_S16:
    case CAUSEWAY__V1__DTYPE__DTYPE_U16:
    case CAUSEWAY__V1__DTYPE__DTYPE_F16:
    case CAUSEWAY__V1__DTYPE__DTYPE_BF16: return 2;
    case CAUSEWAY__V1__DTYPE__DTYPE_S32:
    case CAUSEWAY__V1__DTYPE__DTYPE_U32:
    case CAUSEWAY__V1__DTYPE__DTYPE_F32: return 4;
    case CAUSEWAY__V1__DTYPE__DTYPE_S64:
    case CAUSEWAY__V1__DTYPE__DTYPE_U64:
    case CAUSEWAY__V1__DTYPE__DTYPE_F64:
    case CAUSEWAY__V1__DTYPE__DTYPE_C64: return 8;
    case CAUSEWAY__V1__DTYPE__DTYPE_C128: return 16;
    default: return 0;
  }
}

static int load_blob(const char* file, void** out_data, size_t* out_size) {
  char path[2048];
  snprintf(path, sizeof(path), "%s/%s", g.programs_dir, file);
  return cw_test_read_file(path, out_data, out_size);
}

// "4,8" -> rank 2; "-" -> scalar.
static int parse_dims(const char* text, array_t* arr) {
  arr->rank = 0;
  if (strcmp(text, "-") == 0) return 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", text);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (arr->rank >= MAX_RANK) return -1;
    arr->dims[arr->rank++] = strtoll(tok, NULL, 10);
  }
  return 0;
}

static int parse_array_line(const char* line, int* out_device, array_t* arr) {
  char kind[8], dims[256], file[256];
  if (sscanf(line, "%7s %d %d %255s %255s", kind, out_device, &arr->dtype, dims, file) != 5)
    return -1;
  if (*out_device < 0 || *out_device >= MAX_DEVICES) return -1;
  if (parse_dims(dims, arr) != 0) return -1;
  if (load_blob(file, &arr->data, &arr->size) != 0) return -1;
  size_t expect = dtype_size(arr->dtype);
  for (size_t i = 0; i < arr->rank; i++) expect *= (size_t)arr->dims[i];
  if (expect != arr->size) {
    fprintf(stderr, "manifest: %s holds %zu bytes, dims say %zu\n", file, arr->size, expect);
    return -1;
  }
  return 0;
}

static int load_manifest(void) {
  char path[2048];
  snprintf(path, sizeof(path), "%s/manifest.txt", g.programs_dir);
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot open %s (run the gen_programs fixture): %s\n", path,
            strerror(errno));
    return -1;
  }
  char line[4096];
  test_case_t* c = NULL;
  size_t n_in[MAX_DEVICES] = {0}, n_out[MAX_DEVICES] = {0};
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char prog[256], opts[256];
    if (strncmp(line, "case ", 5) == 0) {
      if (g.num_cases >= MAX_CASES) { rc = -1; break; }
      c = &g.cases[g.num_cases++];
      memset(n_in, 0, sizeof(n_in));
      memset(n_out, 0, sizeof(n_out));
      if (sscanf(line, "case %63s devices %d format %15s program %255s options %255s", c->name,
                 &c->devices, c->format, prog, opts) != 5 ||
          c->devices < 1 || c->devices > MAX_DEVICES ||
          load_blob(prog, &c->program, &c->program_size) != 0 ||
          load_blob(opts, &c->options, &c->options_size) != 0)
        rc = -1;
    } else if (c && (strncmp(line, "in ", 3) == 0 || strncmp(line, "out ", 4) == 0)) {
      bool is_in = line[0] == 'i';
      int dev = 0;
      array_t arr = {0};
      if (parse_array_line(line, &dev, &arr) != 0 || dev >= c->devices) { rc = -1; break; }
      size_t* count = is_in ? &n_in[dev] : &n_out[dev];
      if (*count >= (is_in ? MAX_ARGS : MAX_OUTS)) { free(arr.data); rc = -1; break; }
      if (is_in) c->in[dev][(*count)++] = arr;
      else c->out[dev][(*count)++] = arr;
    } else if (c && strcmp(line, "end") == 0) {
      c->num_args = n_in[0];
      c->num_outputs = n_out[0];
      for (int d = 1; d < c->devices; d++)
        if (n_in[d] != c->num_args || n_out[d] != c->num_outputs) rc = -1;
      c = NULL;
    } else if (strncmp(line, "reject ", 7) == 0) {
      int used = 0;
      if (sscanf(line, "reject %*s program %255s options %255s expect %n", prog, opts, &used) !=
              2 || used == 0 ||
          load_blob(prog, &g.reject.program, &g.reject.program_size) != 0 ||
          load_blob(opts, &g.reject.options, &g.reject.options_size) != 0)
        rc = -1;
      else
        snprintf(g.reject.expect, sizeof(g.reject.expect), "%s", line + used);
    } else if (line[0] != '\0') {
      fprintf(stderr, "manifest: unexpected line: %s\n", line);
      rc = -1;
    }
  }
  fclose(f);
  if (rc != 0) fprintf(stderr, "manifest: failed at: %s\n", line);
  if (g.num_cases == 0 || !g.reject.program) rc = -1;
  return rc;
}

static void free_manifest(void) {
  for (size_t i = 0; i < g.num_cases; i++) {
    test_case_t* c = &g.cases[i];
    free(c->program);
    free(c->options);
    for (int d = 0; d < MAX_DEVICES; d++) {
      for (int j = 0; j < MAX_ARGS; j++) free(c->in[d][j].data);
      for (int j = 0; j < MAX_OUTS; j++) free(c->out[d][j].data);
    }
  }
  free(g.reject.program);
  free(g.reject.options);
  memset(g.cases, 0, sizeof(g.cases));
  g.num_cases = 0;
}

static test_case_t* find_case(const char* name) {
  for (size_t i = 0; i < g.num_cases; i++)
    if (strcmp(g.cases[i].name, name) == 0) return &g.cases[i];
  fail_msg("case %s missing from the manifest", name);
  return NULL;
}

// ---- Status helpers ----------------------------------------------------------

// Fails the test with the status's code and message unless it is OK.
#define ASSERT_OK CW_TEST_ASSERT_OK

// Asserts `status` is an error whose message contains `needle` (if non-NULL),
// prints it, and frees it.
static void expect_error(cw_status_t status, const char* needle, const char* what) {
  if (cw_status_is_ok(status)) fail_msg("%s: expected an error, got OK", what);
  fprintf(stderr, "  %s -> %s: %s\n", what, cw_status_code_name(cw_status_code(status)),
          cw_status_message(status));
  bool found = !needle || strstr(cw_status_message(status), needle) != NULL;
  cw_status_free(status);
  if (!found) fail_msg("%s: error message lacks \"%s\"", what, needle);
}

// Completion recorder for pipelined requests whose status we want to see.
typedef struct completion_s {
  cw_status_t status;
  bool done;
} completion_t;

static void on_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  completion_t* c = user;
  c->status = status;
  c->done = true;
}

// Flushes `client` and returns the completion's status (taken).
static cw_status_t finish(cw_client_t* client, completion_t* c) {
  cw_status_t flushed = cw_client_flush(client);
  if (!cw_status_is_ok(flushed)) {
    fprintf(stderr, "  (flush reported: %s)\n", cw_status_message(flushed));
    cw_status_free(flushed);
  }
  if (!c->done) return cw_make_status(CW_INTERNAL, "completion did not run after flush");
  cw_status_t s = c->status;
  c->status = cw_ok_status();
  return s;
}

static Causeway__V1__Stats* get_stats(cw_client_t* client) {
  Causeway__V1__Stats* stats = NULL;
  ASSERT_OK(cw_client_stats(client, &stats));
  assert_non_null(stats);
  return stats;
}

static void free_msg(void* msg) {
  if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage*)msg, NULL);
}

// ---- Array helpers -----------------------------------------------------------

static void upload(cw_client_t* client, uint64_t id, const array_t* arr, int device) {
  ASSERT_OK(cw_client_upload(client, id, arr->dtype, arr->dims, arr->rank, NULL, device,
                             arr->data, arr->size, NULL, NULL));
}

static void print_mismatch(const char* what, const array_t* want, const uint8_t* got) {
  const uint8_t* w = want->data;
  size_t es = dtype_size(want->dtype);
  for (size_t i = 0; i < want->size; i++) {
    if (w[i] == got[i]) continue;
    size_t e = i / es;
    fprintf(stderr, "  %s: first difference at element %zu (byte %zu): want", what, e, i);
    for (size_t k = 0; k < es; k++) fprintf(stderr, " %02x", w[e * es + k]);
    fprintf(stderr, ", got");
    for (size_t k = 0; k < es; k++) fprintf(stderr, " %02x", got[e * es + k]);
    fprintf(stderr, "\n");
    return;
  }
}

// Downloads `id` and asserts dtype, dims, device and bytes equal `want`.
static void expect_array(cw_client_t* client, uint64_t id, const array_t* want, int device,
                         const char* what) {
  uint8_t* got = malloc(want->size + 1);  // +1: zero-size arrays still get a real pointer
  assert_non_null(got);
  size_t got_size = (size_t)-1;
  Causeway__V1__ArrayInfo* info = NULL;
  cw_status_t s = cw_client_download(client, id, got, want->size, &got_size, &info);
  if (!cw_status_is_ok(s)) {
    fprintf(stderr, "  %s: download of %llu failed: %s: %s\n", what, (unsigned long long)id,
            cw_status_code_name(cw_status_code(s)), cw_status_message(s));
    cw_status_free(s);
    free(got);
    fail_msg("%s: download failed", what);
  }
  bool ok = got_size == want->size;
  if (!ok) fprintf(stderr, "  %s: %zu bytes, want %zu\n", what, got_size, want->size);
  if (info) {
    if ((int)info->dtype != want->dtype || info->n_dims != want->rank ||
        info->device != device) {
      fprintf(stderr, "  %s: info dtype %d rank %zu device %d, want %d %zu %d\n", what,
              (int)info->dtype, info->n_dims, info->device, want->dtype, want->rank, device);
      ok = false;
    }
    for (size_t i = 0; ok && i < want->rank; i++)
      if (info->dims[i] != want->dims[i]) {
        fprintf(stderr, "  %s: dim %zu is %lld, want %lld\n", what, i,
                (long long)info->dims[i], (long long)want->dims[i]);
        ok = false;
      }
  } else {
    fprintf(stderr, "  %s: no ArrayInfo\n", what);
    ok = false;
  }
  if (ok && want->size && memcmp(got, want->data, want->size) != 0) {
    print_mismatch(what, want, got);
    ok = false;
  }
  free_msg(info);
  free(got);
  if (!ok) fail_msg("%s: result differs from stock JAX", what);
}

// Ids of one run of a case: inputs and outputs per device.
typedef struct run_ids_s {
  uint64_t args[MAX_DEVICES][MAX_ARGS];
  uint64_t outs[MAX_DEVICES][MAX_OUTS];
  const uint64_t* arg_rows[MAX_DEVICES];
  const uint64_t* out_rows[MAX_DEVICES];
} run_ids_t;

static void make_ids(const test_case_t* c, run_ids_t* ids) {
  for (int d = 0; d < c->devices; d++) {
    for (size_t i = 0; i < c->num_args; i++) ids->args[d][i] = new_id();
    for (size_t j = 0; j < c->num_outputs; j++) ids->outs[d][j] = new_id();
    ids->arg_rows[d] = ids->args[d];
    ids->out_rows[d] = ids->outs[d];
  }
}

static void delete_ids(cw_client_t* client, const test_case_t* c, const run_ids_t* ids) {
  for (int d = 0; d < c->devices; d++) {
    ASSERT_OK(cw_client_delete(client, ids->args[d], c->num_args, NULL, NULL));
    ASSERT_OK(cw_client_delete(client, ids->outs[d], c->num_outputs, NULL, NULL));
  }
  ASSERT_OK(cw_client_flush(client));
}

static uint64_t compile_case(cw_client_t* client, const test_case_t* c) {
  uint64_t exe = new_id();
  uint32_t num_outputs = 0;
  cw_status_t s = cw_client_compile(client, exe, "mlir", c->program, c->program_size,
                                    c->options, c->options_size, &num_outputs);
  if (!cw_status_is_ok(s)) {
    fprintf(stderr, "  compile %s (%s) failed: %s\n", c->name, c->format, cw_status_message(s));
    cw_status_free(s);
    fail_msg("compile %s failed", c->name);
  }
  assert_int_equal(num_outputs, c->num_outputs);
  return exe;
}

// Uploads the inputs, launches `exe`, compares every output with stock JAX's.
static void run_compiled(cw_client_t* client, uint64_t exe, const test_case_t* c,
                         const char* where) {
  run_ids_t ids;
  make_ids(c, &ids);
  for (int d = 0; d < c->devices; d++)
    for (size_t i = 0; i < c->num_args; i++) upload(client, ids.args[d][i], &c->in[d][i], d);
  completion_t launched = {0};
  ASSERT_OK(cw_client_launch(client, exe, (size_t)c->devices, c->num_args, ids.arg_rows,
                             c->num_outputs, ids.out_rows, on_done, &launched));
  ASSERT_OK(finish(client, &launched));
  char what[160];
  for (int d = 0; d < c->devices; d++)
    for (size_t j = 0; j < c->num_outputs; j++) {
      snprintf(what, sizeof(what), "%s %s device %d output %zu", where, c->name, d, j);
      expect_array(client, ids.outs[d][j], &c->out[d][j], d, what);
    }
  delete_ids(client, c, &ids);
}

static void run_case(cw_client_t* client, const test_case_t* c, const char* where) {
  int64_t t0 = cw_time_now_ms();
  uint64_t exe = compile_case(client, c);
  run_compiled(client, exe, c, where);
  ASSERT_OK(cw_client_delete(client, &exe, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(client));
  fprintf(stderr, "  ok %-14s %-9s on %s (%lld ms)\n", c->name, c->format, where,
          (long long)(cw_time_now_ms() - t0));
}

// ---- Setup and teardown ------------------------------------------------------

static int connect_client(const char* address, const char* name, uint64_t session,
                          cw_client_t** out) {
  cw_client_options_t opts = {.peer_name = name, .session_id = session};
  cw_status_t s = cw_client_connect(address, &opts, out);
  if (!cw_status_is_ok(s)) {
    fprintf(stderr, "connect %s: %s\n", address, cw_status_message(s));
    cw_status_free(s);
    return -1;
  }
  return 0;
}

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  const char* dir = getenv("CW_PROGRAMS_DIR");
  if (dir && dir[0])
    snprintf(g.programs_dir, sizeof(g.programs_dir), "%s", dir);
  else
    snprintf(g.programs_dir, sizeof(g.programs_dir), "%s/programs",
             cw_test_getenv("CW_BUILD_DIR", "."));
  g.next_id = 1000;
  if (load_manifest() != 0) return -1;
  if (cw_test_tempdir_create("cw-integ", g.tmpdir, sizeof(g.tmpdir)) != 0) return -1;
  char sock[512];
  snprintf(sock, sizeof(sock), "%s/worker-b.sock", g.tmpdir);
  cw_test_worker_options_t oa = {.devices = WORKER_DEVICES, .listen = "127.0.0.1:0",
                                 .name = "worker-a"};
  cw_test_worker_options_t ob = {.devices = WORKER_DEVICES, .listen = sock, .name = "worker-b"};
  int64_t t0 = cw_time_now_ms();
  if (cw_test_worker_start(&oa, &g.a) != 0) return -1;
  if (cw_test_worker_start(&ob, &g.b) != 0) return -1;
  fprintf(stderr, "workers up in %lld ms: A at %s, B at %s\n",
          (long long)(cw_time_now_ms() - t0), g.a.address, g.b.address);
  if (connect_client(g.a.address, "itest-client-a", 0, &g.ca) != 0) return -1;
  if (connect_client(g.b.address, "itest-client-b", 0, &g.cb) != 0) return -1;
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  if (g.ca) cw_client_release(g.ca);
  if (g.cb) cw_client_release(g.cb);
  g.ca = g.cb = NULL;
  (void)cw_test_worker_kill(&g.a);
  (void)cw_test_worker_kill(&g.b);
  if (g.tmpdir[0]) (void)cw_test_tempdir_remove(g.tmpdir);
  free_manifest();
  return 0;
}

// ---- Tests -------------------------------------------------------------------

static void test_inventory(void** state) {
  (void)state;
  cw_client_t* clients[2] = {g.ca, g.cb};
  for (int i = 0; i < 2; i++) {
    Causeway__V1__Inventory* inv = NULL;
    ASSERT_OK(cw_client_inventory(clients[i], &inv));
    fprintf(stderr, "  %s: platform %s %s, PJRT %u.%u, %zu devices\n", inv->worker_name,
            inv->platform_name, inv->platform_version, inv->pjrt_major, inv->pjrt_minor,
            inv->n_devices);
    assert_int_equal(inv->n_devices, WORKER_DEVICES);
    assert_string_equal(inv->worker_name, i == 0 ? "worker-a" : "worker-b");
    for (size_t d = 0; d < inv->n_devices; d++) assert_int_equal(inv->devices[d]->local_id, d);
    free_msg(inv);
  }
  ASSERT_OK(cw_client_ping(g.ca));
  ASSERT_OK(cw_client_ping(g.cb));
}

static void test_cases_over_tcp(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_cases; i++) run_case(g.ca, &g.cases[i], "A(tcp)");
}

static void test_cases_over_unix_socket(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_cases; i++) run_case(g.cb, &g.cases[i], "B(unix)");
}

// The matmul case with its first input uploaded from a column-major host
// layout (byte_strides {elem, rows*elem}): the worker must read it as the same
// logical array, and downloads are dense row-major.
static void test_strided_upload(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  const array_t* a = &c->in[0][0];
  assert_int_equal(a->rank, 2);
  size_t rows = (size_t)a->dims[0], cols = (size_t)a->dims[1], es = dtype_size(a->dtype);
  uint8_t* colmajor = malloc(a->size);
  assert_non_null(colmajor);
  for (size_t r = 0; r < rows; r++)
    for (size_t k = 0; k < cols; k++)
      memcpy(colmajor + (k * rows + r) * es, (const uint8_t*)a->data + (r * cols + k) * es, es);
  int64_t strides[2] = {(int64_t)es, (int64_t)(rows * es)};

  uint64_t exe = compile_case(g.ca, c);
  run_ids_t ids;
  make_ids(c, &ids);
  ASSERT_OK(cw_client_upload(g.ca, ids.args[0][0], a->dtype, a->dims, a->rank, strides, 0,
                             colmajor, a->size, NULL, NULL));
  free(colmajor);
  for (size_t i = 1; i < c->num_args; i++) upload(g.ca, ids.args[0][i], &c->in[0][i], 0);
  completion_t launched = {0};
  ASSERT_OK(cw_client_launch(g.ca, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  ASSERT_OK(finish(g.ca, &launched));
  expect_array(g.ca, ids.args[0][0], a, 0, "column-major input read back");
  expect_array(g.ca, ids.outs[0][0], &c->out[0][0], 0, "output from column-major input");
  delete_ids(g.ca, c, &ids);
  ASSERT_OK(cw_client_delete(g.ca, &exe, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

// Compile on A, SERIALIZE there, LOAD on B, run on B: same results.
static void test_serialize_on_a_load_on_b(void** state) {
  (void)state;
  for (size_t i = 0; i < g.num_cases; i++) {
    const test_case_t* c = &g.cases[i];
    uint64_t exe_a = compile_case(g.ca, c);
    void* blob = NULL;
    size_t blob_size = 0;
    ASSERT_OK(cw_client_serialize(g.ca, exe_a, &blob, &blob_size));
    assert_true(blob_size > 0);
    uint64_t exe_b = new_id();
    uint32_t num_outputs = 0;
    cw_status_t s = cw_client_load(g.cb, exe_b, blob, blob_size, c->options, c->options_size,
                                   &num_outputs);
    free(blob);
    ASSERT_OK(s);
    assert_int_equal(num_outputs, c->num_outputs);
    run_compiled(g.cb, exe_b, c, "B(loaded from A)");
    ASSERT_OK(cw_client_delete(g.ca, &exe_a, 1, NULL, NULL));
    ASSERT_OK(cw_client_delete(g.cb, &exe_b, 1, NULL, NULL));
    ASSERT_OK(cw_client_flush(g.ca));
    ASSERT_OK(cw_client_flush(g.cb));
    fprintf(stderr, "  ok %-14s serialized %zu bytes on A, loaded and run on B\n", c->name,
            blob_size);
  }
}

static const Causeway__V1__PeerStats* find_peer(const Causeway__V1__Stats* st, const char* a,
                                                const char* b) {
  for (size_t i = 0; i < st->n_peers; i++) {
    const char* p = st->peers[i]->peer;
    if (p && ((a && strstr(p, a)) || (b && strstr(p, b)))) return st->peers[i];
  }
  return NULL;
}

static void print_peers(const char* who, const Causeway__V1__Stats* st) {
  for (size_t i = 0; i < st->n_peers; i++)
    fprintf(stderr, "  %s peer \"%s\": in %llu out %llu\n", who, st->peers[i]->peer,
            (unsigned long long)st->peers[i]->bytes_in,
            (unsigned long long)st->peers[i]->bytes_out);
}

// Client on B declares an id (EXPECT); client on A asks A to SEND its buffer
// to B's address for B's session. The bytes go A -> B directly: the client
// never downloads from A, and both workers count them under the peer.
static void test_worker_to_worker_send(void** state) {
  (void)state;
  array_t arr = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 2, .dims = {512, 256}};
  arr.size = 512 * 256 * 4;
  arr.data = malloc(arr.size);
  assert_non_null(arr.data);
  for (size_t i = 0; i < arr.size / 4; i++) ((float*)arr.data)[i] = (float)i * 0.5f - 7.0f;

  uint64_t src = new_id(), dst = new_id();
  upload(g.ca, src, &arr, 0);
  ASSERT_OK(cw_client_flush(g.ca));
  Causeway__V1__Stats* a0 = get_stats(g.ca);
  Causeway__V1__Stats* b0 = get_stats(g.cb);

  completion_t expected = {0}, sent = {0};
  ASSERT_OK(cw_client_expect(g.cb, dst, on_done, &expected));
  ASSERT_OK(finish(g.cb, &expected));
  ASSERT_OK(cw_client_send_to_peer(g.ca, src, g.b.address, dst, 1,
                                   cw_client_session_id(g.cb), on_done, &sent));
  ASSERT_OK(finish(g.ca, &sent));
  expect_array(g.cb, dst, &arr, 1, "B's copy of A's buffer");

  Causeway__V1__Stats* a1 = get_stats(g.ca);
  Causeway__V1__Stats* b1 = get_stats(g.cb);
  print_peers("A", a1);
  print_peers("B", b1);
  // A names its outgoing peer by address, B names the incoming one by the
  // HELLO peer name; accept either on both sides.
  const Causeway__V1__PeerStats* pa = find_peer(a1, "worker-b", g.b.address);
  const Causeway__V1__PeerStats* pb = find_peer(b1, "worker-a", g.a.address);
  const Causeway__V1__PeerStats* pa0 = find_peer(a0, "worker-b", g.b.address);
  const Causeway__V1__PeerStats* pb0 = find_peer(b0, "worker-a", g.a.address);
  uint64_t a_out = pa ? pa->bytes_out - (pa0 ? pa0->bytes_out : 0) : 0;
  uint64_t b_in = pb ? pb->bytes_in - (pb0 ? pb0->bytes_in : 0) : 0;
  uint64_t a_in = pa ? pa->bytes_in - (pa0 ? pa0->bytes_in : 0) : 0;
  uint64_t b_out = pb ? pb->bytes_out - (pb0 ? pb0->bytes_out : 0) : 0;
  bool no_download_from_a = a1->downloads == a0->downloads;
  free_msg(a0);
  free_msg(b0);
  free_msg(a1);
  free_msg(b1);
  free(arr.data);
  fprintf(stderr, "  A counted %llu bytes out to B, B counted %llu bytes in from A (array: %zu)\n",
          (unsigned long long)a_out, (unsigned long long)b_in, arr.size);
  assert_true(no_download_from_a);  // the client never read from A
  if (!pa) fail_msg("A's STATS has no peer entry for worker-b / %s", g.b.address);
  if (!pb) fail_msg("B's STATS has no peer entry for worker-a / %s", g.a.address);
  assert_true(a_out >= arr.size);
  assert_true(b_in >= arr.size);
  // Every byte A wrote to B (HELLO, PUT) was read by B before B acked the
  // PUT, and B's replies were read by A before A acked the SEND: both ends
  // must agree exactly (B once lost the bytes that arrived with the HELLO).
  fprintf(stderr, "  A counted %llu bytes in from B, B counted %llu bytes out to A\n",
          (unsigned long long)a_in, (unsigned long long)b_out);
  assert_int_equal(b_in, a_out);
  assert_int_equal(a_in, b_out);

  ASSERT_OK(cw_client_delete(g.ca, &src, 1, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.cb, &dst, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
  ASSERT_OK(cw_client_flush(g.cb));
}

// COPY to another device of the same worker, then use the copy there.
static void test_copy_to_other_device(void** state) {
  (void)state;
  const test_case_t* c = find_case("scalar_f32");
  uint64_t src = new_id(), dst = new_id();
  upload(g.ca, src, &c->in[0][0], 0);
  completion_t copied = {0};
  ASSERT_OK(cw_client_copy(g.ca, src, dst, 3, on_done, &copied));
  ASSERT_OK(finish(g.ca, &copied));
  expect_array(g.ca, dst, &c->in[0][0], 3, "copy on device 3");
  expect_array(g.ca, src, &c->in[0][0], 0, "copy source on device 0");
  // A pending source: copy an id whose upload was only just sent.
  uint64_t src2 = new_id(), dst2 = new_id();
  const array_t* big = &find_case("mlp_f32")->in[0][1];
  upload(g.ca, src2, big, 1);
  ASSERT_OK(cw_client_copy(g.ca, src2, dst2, 2, NULL, NULL));
  expect_array(g.ca, dst2, big, 2, "copy of a just-uploaded buffer on device 2");
  uint64_t all[4] = {src, dst, src2, dst2};
  ASSERT_OK(cw_client_delete(g.ca, all, 4, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.ca));
}

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

// An input in error state poisons the launch's outputs with that error.
static void test_error_input_poisons_outputs(void** state) {
  (void)state;
  // Make an id in error: the output of a launch of a rejected executable.
  uint64_t bad_exe = new_id(), bad_in = new_id(), poisoned = new_id();
  expect_error(cw_client_compile(g.ca, bad_exe, "mlir", g.reject.program, g.reject.program_size,
                                 g.reject.options, g.reject.options_size, NULL),
               g.reject.expect, "compile rejected");
  array_t two = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 1, .dims = {2}, .size = 8};
  float vals[2] = {1, 2};
  two.data = vals;
  upload(g.ca, bad_in, &two, 0);
  const uint64_t* bad_args[1] = {&bad_in};
  const uint64_t* bad_outs[1] = {&poisoned};
  ASSERT_OK(cw_client_launch(g.ca, bad_exe, 1, 1, bad_args, 1, bad_outs, NULL, NULL));
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

// Requests applied in program order keep what they use: a LAUNCH, DOWNLOAD,
// AWAIT, COPY and SEND applied while their input X is pending (EXPECT-ed on B,
// filled by A's SEND) all succeed with X's value although a DELETE of X, later
// in program order, removed the id before the bytes came; meanwhile X is
// NOT_FOUND and may be created anew. (Stock PJRT lets a client destroy a
// buffer once an execution using it is enqueued; JAX's DELETE of a dropped
// array arrives exactly so.)
static void test_delete_while_requests_wait(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  assert_int_equal(c->devices, 1);
  uint64_t exe = compile_case(g.cb, c);
  run_ids_t ids;
  make_ids(c, &ids);
  uint64_t x = ids.args[0][0], y = new_id(), z = new_id(), src = new_id();
  for (size_t i = 1; i < c->num_args; i++) upload(g.cb, ids.args[0][i], &c->in[0][i], 0);
  completion_t expected = {0}, expected_z = {0};
  ASSERT_OK(cw_client_expect(g.cb, x, on_done, &expected));
  ASSERT_OK(finish(g.cb, &expected));
  ASSERT_OK(cw_client_expect(g.ca, z, on_done, &expected_z));  // B sends X on to A as z
  ASSERT_OK(finish(g.ca, &expected_z));

  // All applied while X is pending: they wait.
  completion_t launched = {0}, awaited = {0}, copied = {0}, sent_on = {0};
  ASSERT_OK(cw_client_launch(g.cb, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  const array_t* want_x = &c->in[0][0];
  uint8_t* got_x = malloc(want_x->size + 1);
  assert_non_null(got_x);
  cw_client_sink_t sink = {got_x, want_x->size};
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = x;
  completion_t downloaded = {0};
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, on_done, &downloaded,
                           NULL));
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = x;
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL, on_done, &awaited, NULL));
  ASSERT_OK(cw_client_copy(g.cb, x, y, 1, on_done, &copied));
  ASSERT_OK(cw_client_send_to_peer(g.cb, x, g.a.address, z, 0, cw_client_session_id(g.ca),
                                   on_done, &sent_on));
  // Later in program order: the client drops X. (Waited for alone: a flush
  // would wait for the launch too.)
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &x;
  del.n_ids = 1;
  uint64_t del_req = 0;
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_DELETE, &del.base, NULL, 0, NULL, NULL, NULL, &del_req));
  ASSERT_OK(cw_client_wait(g.cb, del_req, NULL, NULL));  // B applied everything above
  assert_false(launched.done);
  assert_false(copied.done);
  // The id is gone at once, and may be used again.
  uint8_t sink1[16];
  size_t got1 = 0;
  expect_error(cw_client_download(g.cb, x, sink1, sizeof(sink1), &got1, NULL), "not found",
               "download of the deleted id");
  float other_vals[1] = {42.0f};
  array_t other = {.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32, .rank = 0, .size = 4};
  other.data = other_vals;
  upload(g.cb, x, &other, 0);

  // Now A fills the X the waiting requests hold.
  upload(g.ca, src, want_x, 0);
  completion_t sent = {0};
  ASSERT_OK(cw_client_send_to_peer(g.ca, src, g.b.address, x, 0, cw_client_session_id(g.cb),
                                   on_done, &sent));
  ASSERT_OK(finish(g.ca, &sent));
  ASSERT_OK(finish(g.cb, &launched));
  ASSERT_OK(finish(g.cb, &awaited));
  ASSERT_OK(finish(g.cb, &copied));
  ASSERT_OK(finish(g.cb, &sent_on));
  ASSERT_OK(finish(g.cb, &downloaded));
  assert_memory_equal(got_x, want_x->data, want_x->size);
  free(got_x);
  for (size_t j = 0; j < c->num_outputs; j++) {
    expect_array(g.cb, ids.outs[0][j], &c->out[0][j], 0, "launch on the deleted input");
  }
  expect_array(g.cb, y, want_x, 1, "copy of the deleted input");
  expect_array(g.ca, z, want_x, 0, "send of the deleted input");
  expect_array(g.cb, x, &other, 0, "the id created again");

  ASSERT_OK(cw_client_delete(g.cb, &ids.args[0][0], c->num_args, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.cb, ids.outs[0], c->num_outputs, NULL, NULL));
  uint64_t rest_b[2] = {y, exe}, rest_a[2] = {z, src};
  ASSERT_OK(cw_client_delete(g.cb, rest_b, 2, NULL, NULL));
  ASSERT_OK(cw_client_delete(g.ca, rest_a, 2, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.cb));
  ASSERT_OK(cw_client_flush(g.ca));
  Causeway__V1__Stats* sb = get_stats(g.cb);
  Causeway__V1__Stats* sa = get_stats(g.ca);
  fprintf(stderr, "  left: B %llu buffers, A %llu buffers\n", (unsigned long long)sb->buffers,
          (unsigned long long)sa->buffers);
  free_msg(sb);
  free_msg(sa);
}

// COMPILE is asynchronous: UPLOAD x, LAUNCH e(x), DELETE x and e sent back to
// back make the launch wait for the compile while its executable and inputs
// are deleted. It runs all the same, with the values it was applied with.
static void test_delete_while_launch_waits_for_compile(void** state) {
  (void)state;
  const test_case_t* c = find_case("matmul_f32");
  uint64_t exe = new_id();
  run_ids_t ids;
  make_ids(c, &ids);
  Causeway__V1__CompileRequest creq = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  creq.exe_id = exe;
  creq.format = (char*)"mlir";
  creq.code.data = (uint8_t*)c->program;
  creq.code.len = c->program_size;
  creq.compile_options.data = (uint8_t*)c->options;
  creq.compile_options.len = c->options_size;
  completion_t compiled = {0}, launched = {0}, deleted = {0}, deleted_exe = {0};
  ASSERT_OK(cw_client_send(g.cb, CW_MSG_COMPILE, &creq.base, NULL, 0, NULL, on_done, &compiled,
                           NULL));
  for (size_t i = 0; i < c->num_args; i++) upload(g.cb, ids.args[0][i], &c->in[0][i], 0);
  ASSERT_OK(cw_client_launch(g.cb, exe, 1, c->num_args, ids.arg_rows, c->num_outputs,
                             ids.out_rows, on_done, &launched));
  ASSERT_OK(cw_client_delete(g.cb, ids.args[0], c->num_args, on_done, &deleted));
  ASSERT_OK(cw_client_delete(g.cb, &exe, 1, on_done, &deleted_exe));
  ASSERT_OK(finish(g.cb, &compiled));
  ASSERT_OK(finish(g.cb, &deleted));
  ASSERT_OK(finish(g.cb, &deleted_exe));
  ASSERT_OK(finish(g.cb, &launched));
  for (size_t j = 0; j < c->num_outputs; j++) {
    expect_array(g.cb, ids.outs[0][j], &c->out[0][j], 0, "launch after its inputs' DELETE");
  }
  ASSERT_OK(cw_client_delete(g.cb, ids.outs[0], c->num_outputs, NULL, NULL));
  ASSERT_OK(cw_client_flush(g.cb));
}

// Every case at once, without waiting between requests: uploads, launch and
// DOWNLOAD requests go out back to back; then the downloads are collected.
static void test_pipelining(void** state) {
  (void)state;
  static run_ids_t ids[MAX_CASES];
  uint64_t exes[MAX_CASES];
  static uint64_t req[MAX_CASES][MAX_DEVICES][MAX_OUTS];
  static uint8_t* sinks[MAX_CASES][MAX_DEVICES][MAX_OUTS];
  for (size_t i = 0; i < g.num_cases; i++) exes[i] = compile_case(g.cb, &g.cases[i]);
  int64_t t0 = cw_time_now_ms();
  for (size_t i = 0; i < g.num_cases; i++) {
    const test_case_t* c = &g.cases[i];
    make_ids(c, &ids[i]);
    for (int d = 0; d < c->devices; d++)
      for (size_t k = 0; k < c->num_args; k++) upload(g.cb, ids[i].args[d][k], &c->in[d][k], d);
    ASSERT_OK(cw_client_launch(g.cb, exes[i], (size_t)c->devices, c->num_args, ids[i].arg_rows,
                               c->num_outputs, ids[i].out_rows, NULL, NULL));
    for (int d = 0; d < c->devices; d++)
      for (size_t j = 0; j < c->num_outputs; j++) {
        Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
        dl.buffer_id = ids[i].outs[d][j];
        sinks[i][d][j] = malloc(c->out[d][j].size + 1);
        cw_client_sink_t sink = {sinks[i][d][j], c->out[d][j].size};
        ASSERT_OK(cw_client_send(g.cb, CW_MSG_DOWNLOAD, &dl.base, NULL, 0, &sink, NULL, NULL,
                                 &req[i][d][j]));
      }
  }
  for (size_t i = 0; i < g.num_cases; i++) {
    const test_case_t* c = &g.cases[i];
    for (int d = 0; d < c->devices; d++)
      for (size_t j = 0; j < c->num_outputs; j++) {
        ProtobufCMessage* reply = NULL;
        uint64_t bulk = 0;
        cw_status_t s = cw_client_wait(g.cb, req[i][d][j], &reply, &bulk);
        if (!cw_status_is_ok(s)) {
          fprintf(stderr, "  pipelined %s: %s\n", c->name, cw_status_message(s));
          cw_status_free(s);
          fail_msg("pipelined download of %s failed", c->name);
        }
        free_msg(reply);
        assert_int_equal(bulk, c->out[d][j].size);
        if (c->out[d][j].size && memcmp(sinks[i][d][j], c->out[d][j].data, bulk) != 0) {
          print_mismatch(c->name, &c->out[d][j], sinks[i][d][j]);
          fail_msg("pipelined %s device %d output %zu differs", c->name, d, j);
        }
        free(sinks[i][d][j]);
      }
  }
  ASSERT_OK(cw_client_flush(g.cb));
  fprintf(stderr, "  ok %zu cases pipelined on B in %lld ms\n", g.num_cases,
          (long long)(cw_time_now_ms() - t0));
  for (size_t i = 0; i < g.num_cases; i++) {
    delete_ids(g.cb, &g.cases[i], &ids[i]);
    ASSERT_OK(cw_client_delete(g.cb, &exes[i], 1, NULL, NULL));
  }
  ASSERT_OK(cw_client_flush(g.cb));
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

// SIGTERM every worker: exit status 0 (under ASan, also: no leaks).
static void test_clean_shutdown(void** state) {
  (void)state;
  cw_client_release(g.ca);
  cw_client_release(g.cb);
  g.ca = g.cb = NULL;
  int64_t t0 = cw_time_now_ms();
  int ra = cw_test_worker_stop(&g.a, 60000);
  int rb = cw_test_worker_stop(&g.b, 60000);
  fprintf(stderr, "  worker-a exit %d, worker-b exit %d (%lld ms)\n", ra, rb,
          (long long)(cw_time_now_ms() - t0));
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inventory),
      cmocka_unit_test(test_cases_over_tcp),
      cmocka_unit_test(test_cases_over_unix_socket),
      cmocka_unit_test(test_strided_upload),
      cmocka_unit_test(test_serialize_on_a_load_on_b),
      cmocka_unit_test(test_worker_to_worker_send),
      cmocka_unit_test(test_copy_to_other_device),
      cmocka_unit_test(test_compile_error),
      cmocka_unit_test(test_launch_mismatch),
      cmocka_unit_test(test_error_input_poisons_outputs),
      cmocka_unit_test(test_pipelining),
      cmocka_unit_test(test_delete_while_requests_wait),
      cmocka_unit_test(test_delete_while_launch_waits_for_compile),
      cmocka_unit_test(test_client_killed_mid_upload),
      cmocka_unit_test(test_clean_shutdown),
  };
  return cmocka_run_group_tests_name("worker_integration", tests, group_setup, group_teardown);
}
