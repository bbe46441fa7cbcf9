// The gang plugin over the real XLA CPU plugin: forked processes (one per
// rank) sum across their devices and across each other, and a gang that runs
// different programs, or misses a rank, fails with the documented errors.
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_pjrt_c_api.h"
#include "cw_test_util.h"

#define N 8
#define DEVICES 2
#define MAX_RUNS 80

#define ARGS(T, var)            \
  T var;                        \
  memset(&var, 0, sizeof(var)); \
  var.struct_size = sizeof(T)

static const PJRT_Api* g_api;

// ---- In the children ------------------------------------------------------------

// Prints and frees `e`; returns its code (0 for NULL).
static int take_error(PJRT_Error* e, const char* what, char* msg_out, size_t cap) {
  if (!e) return 0;
  ARGS(PJRT_Error_Message_Args, m);
  m.error = e;
  g_api->PJRT_Error_Message(&m);
  ARGS(PJRT_Error_GetCode_Args, c);
  c.error = e;
  g_api->PJRT_Error_GetCode(&c);
  if (msg_out) snprintf(msg_out, cap, "%.*s", (int)m.message_size, m.message);
  else fprintf(stderr, "[pid %d] %s: %.*s\n", (int)getpid(), what, (int)m.message_size, m.message);
  ARGS(PJRT_Error_Destroy_Args, d);
  d.error = e;
  g_api->PJRT_Error_Destroy(&d);
  return (int)c.code;
}

#define TRY(expr, what)                            \
  do {                                             \
    if (take_error((expr), (what), NULL, 0)) goto out; \
  } while (0)

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "[pid %d] %s:%d: ", (int)getpid(), __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      goto out;                                            \
    }                                                      \
  } while (0)

// Calls the destroy slot `Slot` with `field` = obj (NULL: nothing), reporting errors.
#define DESTROY(Slot, field, obj)                     \
  do {                                                \
    if (obj) {                                        \
      ARGS(Slot##_Args, d_);                          \
      d_.field = (obj);                               \
      take_error(g_api->Slot(&d_), #Slot, NULL, 0);   \
    }                                                 \
  } while (0)

static void await(PJRT_Event* ev, const char* what) {
  if (!ev) return;
  ARGS(PJRT_Event_Await_Args, w);
  w.event = ev;
  take_error(g_api->PJRT_Event_Await(&w), what, NULL, 0);
  DESTROY(PJRT_Event_Destroy, event, ev);
}

static void buffer_destroy(PJRT_Buffer* b) { DESTROY(PJRT_Buffer_Destroy, buffer, b); }

static void exe_destroy(PJRT_LoadedExecutable* x) {
  DESTROY(PJRT_LoadedExecutable_Destroy, executable, x);
}

static PJRT_Error* client_create(PJRT_Client** out) {
  PJRT_NamedValue opt;
  memset(&opt, 0, sizeof(opt));
  opt.struct_size = sizeof(opt);
  opt.name = "cpu_device_count";
  opt.name_size = strlen(opt.name);
  opt.type = PJRT_NamedValue_kInt64;
  opt.int64_value = DEVICES;
  opt.value_size = 1;
  ARGS(PJRT_Client_Create_Args, c);
  c.create_options = &opt;
  c.num_options = 1;
  PJRT_Error* e = g_api->PJRT_Client_Create(&c);
  *out = c.client;
  return e;
}

static void set_gang_env(const char* dir, int rank, int size, int timeout_ms) {
  char v[32];
  setenv("CW_GANG_DIR", dir, 1);
  snprintf(v, sizeof(v), "%d", rank);
  setenv("CW_GANG_RANK", v, 1);
  snprintf(v, sizeof(v), "%d", size);
  setenv("CW_GANG_SIZE", v, 1);
  snprintf(v, sizeof(v), "%d", timeout_ms);
  setenv("CW_GANG_TIMEOUT_MS", v, 1);
}

// Loads the plugin and initializes it (once per child).
static int load(void) {
  const char* path = getenv("CW_GANGPLUGIN");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    fprintf(stderr, "cannot load CW_GANGPLUGIN=%s: %s\n", path ? path : "(unset)", dlerror());
    return -1;
  }
  CW_PJRT_GetPjrtApi_Fn get = (CW_PJRT_GetPjrtApi_Fn)(uintptr_t)dlsym(lib, "GetPjrtApi");
  g_api = get ? get() : NULL;
  if (!g_api) return -1;
  ARGS(PJRT_Plugin_Initialize_Args, init);
  return take_error(g_api->PJRT_Plugin_Initialize(&init), "initialize", NULL, 0) ? -1 : 0;
}

static PJRT_Error* compile(PJRT_Client* c, const char* format, const char* text,
                           PJRT_LoadedExecutable** out) {
  ARGS(PJRT_Program, prog);
  prog.code = (char*)(uintptr_t)text;
  prog.code_size = strlen(text);
  prog.format = format;
  prog.format_size = strlen(format);
  // num_replicas 1, num_partitions 1 (ignored by cwgang programs).
  static const char opts[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};
  ARGS(PJRT_Client_Compile_Args, a);
  a.client = c;
  a.program = &prog;
  a.compile_options = opts;
  a.compile_options_size = sizeof(opts);
  PJRT_Error* e = g_api->PJRT_Client_Compile(&a);
  *out = a.executable;
  return e;
}

typedef struct rank_spec_s {
  const char* dir;
  int rank, size, timeout_ms;
  const char* tag;
  int runs;
  int expect_code;           // 0: every run succeeds
  const char* expect_in[3];  // substrings the error must contain
} rank_spec_t;

// One rank: uploads rank*100 + device*10 + i to each device and runs the
// program `runs` times (launch ids 1, 2, ...). Returns the exit code.
static int run_rank(const rank_spec_t* s) {
  int rc = 1;
  PJRT_Client* client = NULL;
  PJRT_LoadedExecutable* exe = NULL;
  PJRT_Buffer* in[DEVICES] = {0};
  // Per run (1-based): outputs, their events, and the outcome.
  static PJRT_Buffer* outs[MAX_RUNS + 1][DEVICES];
  static PJRT_Event* events[MAX_RUNS + 1][DEVICES];
  static int codes[MAX_RUNS + 1];
  static char msgs[MAX_RUNS + 1][2048];
  set_gang_env(s->dir, s->rank, s->size, s->timeout_ms);
  if (load()) return 1;
  TRY(client_create(&client), "client create");
  ARGS(PJRT_Client_AddressableDevices_Args, ad);
  ad.client = client;
  TRY(g_api->PJRT_Client_AddressableDevices(&ad), "devices");
  CHECK(ad.num_addressable_devices == DEVICES, "%zu devices", ad.num_addressable_devices);
  char text[128];
  snprintf(text, sizeof(text), "allreduce_sum f32[%d] %s", N, s->tag);
  TRY(compile(client, "cwgang", text, &exe), "compile");
  for (int d = 0; d < DEVICES; ++d) {
    float host[N];
    for (int i = 0; i < N; ++i) host[i] = (float)(s->rank * 100 + d * 10 + i);
    int64_t dims[1] = {N};
    ARGS(PJRT_Client_BufferFromHostBuffer_Args, h);
    h.client = client;
    h.data = host;
    h.type = PJRT_Buffer_Type_F32;
    h.dims = dims;
    h.num_dims = 1;
    h.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
    h.device = ad.addressable_devices[d];
    TRY(g_api->PJRT_Client_BufferFromHostBuffer(&h), "upload");
    await(h.done_with_host_buffer, "upload done");
    in[d] = h.buffer;
  }
  // Every run is launched before any is checked: Execute returns once this
  // rank has posted its part, and the devices' events carry the meeting's
  // outcome. More runs than the plugin's ring of rounds wrap it.
  CHECK(s->runs <= MAX_RUNS, "%d runs", s->runs);
  for (int run = 1; run <= s->runs; ++run) {
    PJRT_Buffer** out_lists[DEVICES] = {&outs[run][0], &outs[run][1]};
    PJRT_Buffer* const arg_lists0[1] = {in[0]};
    PJRT_Buffer* const arg_lists1[1] = {in[1]};
    PJRT_Buffer* const* arg_lists[DEVICES] = {arg_lists0, arg_lists1};
    ARGS(PJRT_ExecuteOptions, o);
    o.launch_id = run;
    ARGS(PJRT_LoadedExecutable_Execute_Args, x);
    x.executable = exe;
    x.options = &o;
    x.argument_lists = arg_lists;
    x.num_devices = DEVICES;
    x.num_args = 1;
    x.output_lists = out_lists;
    x.device_complete_events = events[run];
    codes[run] = take_error(g_api->PJRT_LoadedExecutable_Execute(&x), "execute", msgs[run],
                            sizeof(msgs[run]));
    if (codes[run]) CHECK(!outs[run][0] && !outs[run][1], "outputs after a failed execute");
  }
  for (int run = 1; run <= s->runs; ++run) {
    for (int d = 0; d < DEVICES && !codes[run]; ++d) {
      ARGS(PJRT_Event_Await_Args, w);
      w.event = events[run][d];
      codes[run] = take_error(g_api->PJRT_Event_Await(&w), "await", msgs[run], sizeof(msgs[run]));
      CHECK(!codes[run] || d == 0, "run %d: device 1 failed and device 0 did not: %s", run,
            msgs[run]);
    }
    int code = codes[run];
    const char* msg = msgs[run];
    if (s->expect_code) {
      CHECK(code == s->expect_code, "run %d: code %d, expected %d (%s)", run, code,
            s->expect_code, code ? msg : "ok");
      for (int k = 0; k < 3 && s->expect_in[k]; ++k) {
        CHECK(strstr(msg, s->expect_in[k]), "run %d: '%s' lacks '%s'", run, msg, s->expect_in[k]);
      }
      continue;
    }
    CHECK(code == 0, "run %d: %s", run, msg);
    int bad = 0;
    for (int d = 0; d < DEVICES; ++d) {
      float got[N];
      ARGS(PJRT_Buffer_ToHostBuffer_Args, t);
      t.src = outs[run][d];
      t.dst = got;
      t.dst_size = sizeof(got);
      bad |= take_error(g_api->PJRT_Buffer_ToHostBuffer(&t), "download", NULL, 0);
      await(t.event, "download done");
      for (int i = 0; !bad && i < N; ++i) {
        float want = 0;
        for (int r = 0; r < s->size; ++r) {
          for (int dd = 0; dd < DEVICES; ++dd) want += (float)(r * 100 + dd * 10 + i);
        }
        if (got[i] != want) {
          fprintf(stderr, "rank %d run %d device %d [%d]: %g, want %g\n", s->rank, run, d, i,
                  (double)got[i], (double)want);
          bad = 1;
        }
      }
    }
    CHECK(!bad, "rank %d run %d: wrong results", s->rank, run);
  }
  rc = 0;
out:
  for (int run = 1; run <= MAX_RUNS; ++run) {
    for (int d = 0; d < DEVICES; ++d) {
      DESTROY(PJRT_Event_Destroy, event, events[run][d]);
      buffer_destroy(outs[run][d]);
    }
  }
  for (int d = 0; d < DEVICES; ++d) buffer_destroy(in[d]);
  exe_destroy(exe);
  DESTROY(PJRT_Client_Destroy, client, client);
  return rc;
}

// Metadata, serialization, bad texts and bad settings, in one process.
static int run_checks(const char* dir) {
  int rc = 1;
  PJRT_Client* client = NULL;
  PJRT_LoadedExecutable* exe = NULL;
  PJRT_LoadedExecutable* exe2 = NULL;
  PJRT_LoadedExecutable* hlo = NULL;
  char msg[1024];
  if (load()) return 1;
  unsetenv("CW_GANG_DIR");
  int code = take_error(client_create(&client), "", msg, sizeof(msg));
  CHECK(code == PJRT_Error_Code_INVALID_ARGUMENT && strstr(msg, "CW_GANG_DIR"), "%d %s", code,
        msg);
  set_gang_env(dir, 0, 1, 1000);
  setenv("CW_GANG_RANK", "1", 1);
  code = take_error(client_create(&client), "", msg, sizeof(msg));
  CHECK(code == PJRT_Error_Code_INVALID_ARGUMENT && strstr(msg, "CW_GANG_RANK"), "%d %s", code,
        msg);
  setenv("CW_GANG_RANK", "0", 1);
  TRY(client_create(&client), "client create");

  static const char* const bad[] = {
      "allreduce_sum f32[0] a",  "allreduce_max f32[8] a",   "allreduce_sum f32[8]",
      "allreduce_sum f32[8] a ", "allreduce_sum f32[8] a;b", "allreduce_sum f32[65537] a",
      "allreduce_sum f64[8] a",  "allreduce_sum  f32[8] a",  "",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    code = take_error(compile(client, "cwgang", bad[i], &exe), "", msg, sizeof(msg));
    CHECK(code == PJRT_Error_Code_INVALID_ARGUMENT, "'%s': code %d (%s)", bad[i], code, msg);
    CHECK(strstr(msg, "cwgang program"), "'%s': %s", bad[i], msg);
  }

  TRY(compile(client, "cwgang", "allreduce_sum f32[8] a", &exe), "compile");
  ARGS(PJRT_Client_ProcessIndex_Args, pi);
  pi.client = client;
  TRY(g_api->PJRT_Client_ProcessIndex(&pi), "process index");
  CHECK(pi.process_index == 0, "process index %d", pi.process_index);
  ARGS(PJRT_LoadedExecutable_GetExecutable_Args, ge);
  ge.loaded_executable = exe;
  TRY(g_api->PJRT_LoadedExecutable_GetExecutable(&ge), "get executable");
  PJRT_Executable* e = ge.executable;
  ARGS(PJRT_Executable_Name_Args, nm);
  nm.executable = e;
  ARGS(PJRT_Executable_NumPartitions_Args, np);
  np.executable = e;
  ARGS(PJRT_Executable_OutputDimensions_Args, od);
  od.executable = e;
  ARGS(PJRT_Executable_Fingerprint_Args, fp);
  fp.executable = e;
  ARGS(PJRT_Executable_OutputMemoryKinds_Args, mk);
  mk.executable = e;
  PJRT_Program prog = {.struct_size = sizeof(prog)};
  ARGS(PJRT_Executable_OptimizedProgram_Args, op);
  op.executable = e;
  op.program = &prog;
  ARGS(PJRT_Executable_Serialize_Args, se);
  se.executable = e;
  PJRT_Error* err = g_api->PJRT_Executable_Name(&nm);
  if (!err) err = g_api->PJRT_Executable_NumPartitions(&np);
  if (!err) err = g_api->PJRT_Executable_OutputDimensions(&od);
  if (!err) err = g_api->PJRT_Executable_Fingerprint(&fp);
  if (!err) err = g_api->PJRT_Executable_OutputMemoryKinds(&mk);
  if (!err) err = g_api->PJRT_Executable_Serialize(&se);
  code = take_error(g_api->PJRT_Executable_OptimizedProgram(&op), "", msg, sizeof(msg));
  DESTROY(PJRT_Executable_Destroy, executable, e);
  TRY(err, "metadata");
  CHECK(code == PJRT_Error_Code_UNIMPLEMENTED, "optimized program: %d", code);
  CHECK(nm.executable_name_size == 8 && !memcmp(nm.executable_name, "cwgang_a", 8), "name");
  CHECK(np.num_partitions == DEVICES, "partitions %zu", np.num_partitions);
  CHECK(od.num_outputs == 1 && od.dim_sizes[0] == 1 && od.dims[0] == 8, "output dims");
  CHECK(fp.executable_fingerprint_size == 16, "fingerprint");
  CHECK(mk.num_outputs == 1, "memory kinds");
  const char* expect = "CWGANG1\nallreduce_sum f32[8] a";
  int ser_ok = se.serialized_bytes_size == strlen(expect) &&
               !memcmp(se.serialized_bytes, expect, strlen(expect));
  ARGS(PJRT_Executable_DeserializeAndLoad_Args, dl);
  dl.client = client;
  dl.serialized_executable = se.serialized_bytes;
  dl.serialized_executable_size = se.serialized_bytes_size;
  err = g_api->PJRT_Executable_DeserializeAndLoad(&dl);
  se.serialized_executable_deleter(se.serialized_executable);
  exe2 = dl.loaded_executable;
  TRY(err, "deserialize");
  CHECK(ser_ok, "serialized bytes");

  // A stock program goes to the inner plugin; its output memory kinds are
  // what ours report.
  TRY(compile(client, "mlir",
              "func.func public @main(%a: tensor<8xf32>) -> tensor<8xf32> {\n"
              "  return %a : tensor<8xf32>\n}\n",
              &hlo),
      "compile mlir");
  ge.loaded_executable = hlo;
  TRY(g_api->PJRT_LoadedExecutable_GetExecutable(&ge), "get executable");
  ARGS(PJRT_Executable_OutputMemoryKinds_Args, mk2);
  mk2.executable = ge.executable;
  err = g_api->PJRT_Executable_OutputMemoryKinds(&mk2);
  int same = !err && mk2.num_outputs == 1 && mk2.memory_kind_sizes[0] == mk.memory_kind_sizes[0] &&
             !memcmp(mk2.memory_kinds[0], mk.memory_kinds[0], mk.memory_kind_sizes[0]);
  DESTROY(PJRT_Executable_Destroy, executable, ge.executable);
  TRY(err, "inner memory kinds");
  CHECK(same, "memory kinds: inner '%.*s', ours '%.*s'", (int)mk2.memory_kind_sizes[0],
        mk2.memory_kinds[0], (int)mk.memory_kind_sizes[0], mk.memory_kinds[0]);
  rc = 0;
out:
  exe_destroy(hlo);
  exe_destroy(exe2);
  exe_destroy(exe);
  DESTROY(PJRT_Client_Destroy, client, client);
  return rc;
}

// With no usable inner plugin the table still loads and initialization says
// why (the message must contain `expect`).
static int bad_inner(const char* inner, const char* expect) {
  setenv("CW_GANG_INNER_PLUGIN", inner, 1);
  const char* path = getenv("CW_GANGPLUGIN");
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CW_PJRT_GetPjrtApi_Fn get =
      lib ? (CW_PJRT_GetPjrtApi_Fn)(uintptr_t)dlsym(lib, "GetPjrtApi") : NULL;
  g_api = get ? get() : NULL;
  if (!g_api) return 1;
  char msg[1024];
  ARGS(PJRT_Plugin_Initialize_Args, init);
  int code = take_error(g_api->PJRT_Plugin_Initialize(&init), "", msg, sizeof(msg));
  if (code != PJRT_Error_Code_FAILED_PRECONDITION || !strstr(msg, expect)) {
    fprintf(stderr, "inner plugin %s: code %d: %s\n", inner, code, msg);
    return 1;
  }
  return 0;
}

static int run_no_inner(const char* dir) {
  return bad_inner("/nonexistent/inner.so", "/nonexistent/inner.so");
}

static int run_self_inner(const char* dir) { return bad_inner(getenv("CW_GANGPLUGIN"), "itself"); }

// ---- In the parent ------------------------------------------------------------

// Forks one child per spec and returns how many did not exit 0.
static int run_gang(const rank_spec_t* specs, int n) {
  cw_test_process_t p[4];
  memset(p, 0, sizeof(p));
  for (int i = 0; i < n; ++i) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) exit(run_rank(&specs[i]));
    p[i].pid = pid;
    p[i].stdout_fd = -1;
  }
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    int rc = p[i].pid > 0 ? cw_test_process_wait(&p[i], 60000) : -1;
    if (rc == -1 && p[i].pid > 0) cw_test_process_kill(&p[i]);
    if (rc != 0) fprintf(stderr, "rank %d exited %d\n", specs[i].rank, rc);
    failed += rc != 0;
  }
  return failed;
}

static char* read_log(const char* dir, int rank) {
  char path[512];
  snprintf(path, sizeof(path), "%s/rank%d.log", dir, rank);
  void* data = NULL;
  size_t size = 0;
  return cw_test_read_file(path, &data, &size) ? NULL : data;
}

static void test_allreduce_two_ranks(void** state) {
  char dir[256];
  assert_int_equal(cw_test_tempdir_create("cwgang", dir, sizeof(dir)), 0);
  // 72 runs in flight wrap the plugin's ring of 32 rounds twice.
  rank_spec_t s[2] = {{dir, 0, 2, 10000, "a", 72, 0, {0}}, {dir, 1, 2, 10000, "a", 72, 0, {0}}};
  assert_int_equal(run_gang(s, 2), 0);
  char* l0 = read_log(dir, 0);
  char* l1 = read_log(dir, 1);
  assert_non_null(l0);
  assert_non_null(l1);
  char want[2048] = "";
  for (int r = 1; r <= 72; ++r) {
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "%d %d a ok\n", r, r);
  }
  assert_string_equal(l0, want);
  assert_string_equal(l0, l1);
  free(l0);
  free(l1);
  cw_test_tempdir_remove(dir);
}

static void test_order_violation(void** state) {
  char dir[256];
  assert_int_equal(cw_test_tempdir_create("cwgang", dir, sizeof(dir)), 0);
  rank_spec_t s[2] = {
      {dir, 0, 2, 10000, "a", 1, PJRT_Error_Code_FAILED_PRECONDITION,
       {"gang order violated at rendezvous 1", "f32[8] a (launch 1)", "f32[8] b (launch 1)"}},
      {dir, 1, 2, 10000, "b", 1, PJRT_Error_Code_FAILED_PRECONDITION,
       {"gang order violated at rendezvous 1", "f32[8] a (launch 1)", "f32[8] b (launch 1)"}},
  };
  assert_int_equal(run_gang(s, 2), 0);
  char* l1 = read_log(dir, 1);
  assert_non_null(l1);
  assert_string_equal(l1, "1 1 b error\n");
  free(l1);
  cw_test_tempdir_remove(dir);
}

static void test_missing_rank_times_out(void** state) {
  char dir[256];
  assert_int_equal(cw_test_tempdir_create("cwgang", dir, sizeof(dir)), 0);
  rank_spec_t s[1] = {{dir, 0, 2, 300, "a", 1, PJRT_Error_Code_DEADLINE_EXCEEDED,
                       {"gang rendezvous 1: rank 1 has not arrived after 300 ms"}}};
  assert_int_equal(run_gang(s, 1), 0);
  cw_test_tempdir_remove(dir);
}

// Runs fn(dir) in a child; returns its exit code.
static int in_child(int (*fn)(const char*), const char* dir) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) exit(fn(dir));
  cw_test_process_t p = {.pid = pid, .stdout_fd = -1};
  int rc = cw_test_process_wait(&p, 60000);
  if (rc == -1) cw_test_process_kill(&p);
  return rc;
}

static void test_checks(void** state) {
  char dir[256];
  assert_int_equal(cw_test_tempdir_create("cwgang", dir, sizeof(dir)), 0);
  assert_int_equal(in_child(run_checks, dir), 0);
  assert_int_equal(in_child(run_no_inner, dir), 0);
  assert_int_equal(in_child(run_self_inner, dir), 0);
  cw_test_tempdir_remove(dir);
}

int main(void) {
  if (!getenv("CW_GANGPLUGIN") || !getenv("CAUSEWAY_PJRT_PLUGIN")) {
    fprintf(stderr, "CW_GANGPLUGIN and CAUSEWAY_PJRT_PLUGIN must be set\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_two_ranks),
      cmocka_unit_test(test_order_violation),
      cmocka_unit_test(test_missing_rank_times_out),
      cmocka_unit_test(test_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
