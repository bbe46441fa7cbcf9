// The fixture of the worker integration tests (cw_test_integration.h).
#include "cw_test_integration.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

itest_t g;

uint64_t new_id(void) { return ++g.next_id; }

size_t dtype_size(int dtype) {
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

test_case_t* find_case(const char* name) {
  for (size_t i = 0; i < g.num_cases; i++)
    if (strcmp(g.cases[i].name, name) == 0) return &g.cases[i];
  fail_msg("case %s missing from the manifest", name);
  return NULL;
}

void expect_error(cw_status_t status, const char* needle, const char* what) {
  if (cw_status_is_ok(status)) fail_msg("%s: expected an error, got OK", what);
  fprintf(stderr, "  %s -> %s: %s\n", what, cw_status_code_name(cw_status_code(status)),
          cw_status_message(status));
  bool found = !needle || strstr(cw_status_message(status), needle) != NULL;
  cw_status_free(status);
  if (!found) fail_msg("%s: error message lacks \"%s\"", what, needle);
}

void on_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  (void)reply;
  completion_t* c = user;
  c->status = status;
  c->done = true;
}

cw_status_t finish(cw_client_t* client, completion_t* c) {
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

Causeway__V1__Stats* get_stats(cw_client_t* client) {
  Causeway__V1__Stats* stats = NULL;
  ASSERT_OK(cw_client_stats(client, &stats));
  assert_non_null(stats);
  return stats;
}

void free_msg(void* msg) {
  if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage*)msg, NULL);
}

void upload(cw_client_t* client, uint64_t id, const array_t* arr, int device) {
  ASSERT_OK(cw_client_upload(client, id, arr->dtype, arr->dims, arr->rank, NULL, device,
                             arr->data, arr->size, NULL, NULL));
}

void print_mismatch(const char* what, const array_t* want, const uint8_t* got) {
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

void expect_array(cw_client_t* client, uint64_t id, const array_t* want, int device,
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

void make_ids(const test_case_t* c, run_ids_t* ids) {
  for (int d = 0; d < c->devices; d++) {
    for (size_t i = 0; i < c->num_args; i++) ids->args[d][i] = new_id();
    for (size_t j = 0; j < c->num_outputs; j++) ids->outs[d][j] = new_id();
    ids->arg_rows[d] = ids->args[d];
    ids->out_rows[d] = ids->outs[d];
  }
}

void delete_ids(cw_client_t* client, const test_case_t* c, const run_ids_t* ids) {
  for (int d = 0; d < c->devices; d++) {
    ASSERT_OK(cw_client_delete(client, ids->args[d], c->num_args, NULL, NULL));
    ASSERT_OK(cw_client_delete(client, ids->outs[d], c->num_outputs, NULL, NULL));
  }
  ASSERT_OK(cw_client_flush(client));
}

uint64_t compile_case(cw_client_t* client, const test_case_t* c) {
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

void run_compiled(cw_client_t* client, uint64_t exe, const test_case_t* c,
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

void run_case(cw_client_t* client, const test_case_t* c, const char* where) {
  int64_t t0 = cw_time_now_ms();
  uint64_t exe = compile_case(client, c);
  run_compiled(client, exe, c, where);
  ASSERT_OK(cw_client_delete(client, &exe, 1, NULL, NULL));
  ASSERT_OK(cw_client_flush(client));
  fprintf(stderr, "  ok %-14s %-9s on %s (%lld ms)\n", c->name, c->format, where,
          (long long)(cw_time_now_ms() - t0));
}

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

int itest_group_setup(void** state) {
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

int itest_group_teardown(void** state) {
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

void itest_test_clean_shutdown(void** state) {
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
