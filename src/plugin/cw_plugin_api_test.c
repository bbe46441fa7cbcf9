// Tests of libcauseway_pjrt.so through dlopen, as JAX loads it: the table,
// errors, events, plugin attributes, symbol visibility and client-creation
// failures that must be errors (never crashes or hangs), among them an
// embedded cluster whose daemons never become ready or exit first.
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_pjrt_c_api.h"
#include "cw_test_util.h"

static const PJRT_Api* api;

#define INIT_ARGS(var)              \
  do {                              \
    memset(&(var), 0, sizeof(var)); \
    (var).struct_size = sizeof(var); \
  } while (0)

static int setup(void** state) {
  (void)state;
  void* h = dlopen(CW_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", CW_PLUGIN_PATH, dlerror());
    return -1;
  }
  CW_PJRT_GetPjrtApi_Fn get = (CW_PJRT_GetPjrtApi_Fn)dlsym(h, CW_PJRT_GET_API_SYMBOL);
  if (!get) return -1;
  api = get();
  return api ? 0 : -1;
}

static char* error_text(PJRT_Error* e) {
  PJRT_Error_Message_Args m;
  INIT_ARGS(m);
  m.error = e;
  api->PJRT_Error_Message(&m);
  return strndup(m.message, m.message_size);
}

static PJRT_Error_Code error_code(PJRT_Error* e) {
  PJRT_Error_GetCode_Args g;
  INIT_ARGS(g);
  g.error = e;
  assert_null(api->PJRT_Error_GetCode(&g));
  return g.code;
}

static void error_free(PJRT_Error* e) {
  PJRT_Error_Destroy_Args d;
  INIT_ARGS(d);
  d.error = e;
  api->PJRT_Error_Destroy(&d);
}

static void test_table(void** state) {
  (void)state;
  assert_int_equal(api->struct_size, sizeof(PJRT_Api));
  assert_int_equal(api->pjrt_api_version.major_version, 0);
  assert_int_equal(api->pjrt_api_version.minor_version, 115);
  for (size_t i = 0; i < CW_PJRT_API_NUM_SLOTS; ++i) {
    void* slot;
    memcpy(&slot, (const char*)api + CW_PJRT_API_SLOT_OFFSET(i), sizeof(slot));
    if (!slot) fail_msg("slot %zu is NULL", i);
  }
  PJRT_Plugin_Initialize_Args init;
  INIT_ARGS(init);
  assert_null(api->PJRT_Plugin_Initialize(&init));
}

static void test_only_get_pjrt_api_is_exported(void** state) {
  (void)state;
  void* h = dlopen(CW_PLUGIN_PATH, RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(h);
  assert_non_null(dlsym(h, "GetPjrtApi"));
  assert_null(dlsym(h, "cw_client_connect"));
  assert_null(dlsym(h, "cw_status_make"));
  assert_null(dlsym(h, "cw_plugin_client_create"));
  dlclose(h);
}

static int payloads_seen;
static void count_payload(const char* k, size_t ks, const char* v, size_t vs, void* u) {
  (void)k, (void)ks, (void)v, (void)vs, (void)u;
  payloads_seen++;
}

static void test_errors(void** state) {
  (void)state;
  PJRT_Client_TopologyDescription_Args t;
  INIT_ARGS(t);
  PJRT_Error* e = api->PJRT_Client_TopologyDescription(&t);
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_UNIMPLEMENTED);
  char* msg = error_text(e);
  assert_non_null(strstr(msg, "PJRT_Client_TopologyDescription"));
  // Callers may use the function table at the start of the error directly.
  const PJRT_Error_FunctionTable* vt = e->vtable;
  assert_non_null(vt);
  assert_true(vt->struct_size >= CW_PJRT_STRUCT_SIZE(PJRT_Error_FunctionTable, for_each_payload));
  assert_int_equal(vt->get_code(e), PJRT_Error_Code_UNIMPLEMENTED);
  const char* m2;
  size_t l2;
  vt->message(e, &m2, &l2);
  assert_int_equal(l2, strlen(msg));
  assert_memory_equal(m2, msg, l2);
  PJRT_Error_ForEachPayload_Args p;
  INIT_ARGS(p);
  p.error = e;
  p.visitor = count_payload;
  payloads_seen = 0;
  assert_null(api->PJRT_Error_ForEachPayload(&p));
  assert_int_equal(payloads_seen, 0);
  free(msg);
  error_free(e);

  // A too-small struct_size is an error, not a read past the caller's struct.
  PJRT_Event_IsReady_Args r;
  INIT_ARGS(r);
  r.struct_size = 8;
  e = api->PJRT_Event_IsReady(&r);
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_INVALID_ARGUMENT);
  error_free(e);
}

static int cb_calls;
static PJRT_Error_Code cb_code;
static void on_ready(PJRT_Error* e, void* user) {
  (void)user;
  cb_calls++;
  cb_code = e ? error_code(e) : PJRT_Error_Code_OK;
  if (e) error_free(e);  // the callback owns it
}

static void test_events(void** state) {
  (void)state;
  PJRT_Event_Create_Args c;
  INIT_ARGS(c);
  assert_null(api->PJRT_Event_Create(&c));
  PJRT_Event* ev = c.event;
  PJRT_Event_IsReady_Args r;
  INIT_ARGS(r);
  r.event = ev;
  assert_null(api->PJRT_Event_IsReady(&r));
  assert_false(r.is_ready);
  PJRT_Event_OnReady_Args o;
  INIT_ARGS(o);
  o.event = ev;
  o.callback = on_ready;
  cb_calls = 0;
  assert_null(api->PJRT_Event_OnReady(&o));
  assert_int_equal(cb_calls, 0);
  PJRT_Event_Set_Args s;
  INIT_ARGS(s);
  s.event = ev;
  s.error_code = PJRT_Error_Code_DATA_LOSS;
  s.error_message = "lost";
  s.error_message_size = 4;
  assert_null(api->PJRT_Event_Set(&s));
  assert_int_equal(cb_calls, 1);
  assert_int_equal(cb_code, PJRT_Error_Code_DATA_LOSS);
  // A second Set changes nothing; a late OnReady fires at once, once.
  s.error_code = PJRT_Error_Code_OK;
  assert_null(api->PJRT_Event_Set(&s));
  assert_null(api->PJRT_Event_OnReady(&o));
  assert_int_equal(cb_calls, 2);
  assert_int_equal(cb_code, PJRT_Error_Code_DATA_LOSS);
  assert_null(api->PJRT_Event_IsReady(&r));
  assert_true(r.is_ready);
  PJRT_Event_Await_Args a;
  INIT_ARGS(a);
  a.event = ev;
  PJRT_Error* e = api->PJRT_Event_Await(&a);
  assert_non_null(e);
  char* msg = error_text(e);
  assert_string_equal(msg, "lost");
  free(msg);
  error_free(e);
  PJRT_Event_Error_Args ee;
  INIT_ARGS(ee);
  ee.event = ev;
  e = api->PJRT_Event_Error(&ee);
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_DATA_LOSS);
  error_free(e);
  PJRT_Event_Destroy_Args d;
  INIT_ARGS(d);
  d.event = ev;
  assert_null(api->PJRT_Event_Destroy(&d));
}

static void test_plugin_attributes(void** state) {
  (void)state;
  PJRT_Plugin_Attributes_Args a;
  INIT_ARGS(a);
  assert_null(api->PJRT_Plugin_Attributes(&a));
  bool found = false;
  for (size_t i = 0; i < a.num_attributes; ++i) {
    const PJRT_NamedValue* v = &a.attributes[i];
    if (v->name_size == 25 && !memcmp(v->name, "stablehlo_current_version", 25)) {
      assert_int_equal(v->type, PJRT_NamedValue_kInt64List);
      assert_int_equal(v->value_size, 3);
      found = true;
    }
  }
  assert_true(found);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static PJRT_Error* create_client(PJRT_Client** out) {
  PJRT_Client_Create_Args c;
  INIT_ARGS(c);
  PJRT_Error* e = api->PJRT_Client_Create(&c);
  *out = c.client;
  return e;
}

// Client creation with stderr captured in `out`; returns its error.
static PJRT_Error* create_client_captured(char* out, size_t cap) {
  cw_test_stderr_capture_t capture;
  assert_int_equal(cw_test_stderr_capture_begin(&capture), 0);
  PJRT_Client* client = NULL;
  PJRT_Error* e = create_client(&client);
  assert_int_equal(cw_test_stderr_capture_end(&capture, out, cap), 0);
  assert_null(client);
  return e;
}

// A bad CAUSEWAY_* value fails client creation at once, naming the variable
// and what it accepts (before any connection: the controller set here would
// fail differently). An old CW_* name is reported once per process.
static void test_bad_settings(void** state) {
  (void)state;
  char err[4096];
  setenv("CAUSEWAY_CONTROLLER", "127.0.0.1:1", 1);
  setenv("CW_TOKEN", "an-old-name", 1);
  setenv("CAUSEWAY_WAIT_MS", "abc", 1);
  PJRT_Error* e = create_client_captured(err, sizeof(err));
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_INVALID_ARGUMENT);
  char* msg = error_text(e);
  assert_string_equal(msg, "causeway: CAUSEWAY_WAIT_MS: 'abc' is not an integer");
  free(msg);
  error_free(e);
  assert_non_null(strstr(err, "CW_TOKEN is set but no longer read: causeway reads "
                              "CAUSEWAY_TOKEN"));

  unsetenv("CAUSEWAY_WAIT_MS");
  unsetenv("CAUSEWAY_CONTROLLER");  // the embedded cluster's settings are checked as well
  setenv("CAUSEWAY_LOCAL_WORKERS", "99", 1);
  e = create_client_captured(err, sizeof(err));
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_OUT_OF_RANGE);
  msg = error_text(e);
  assert_string_equal(msg, "causeway: CAUSEWAY_LOCAL_WORKERS: 99 is outside [1, 64]");
  free(msg);
  error_free(e);
  assert_null(strstr(err, "CW_TOKEN"));  // said once
  unsetenv("CAUSEWAY_LOCAL_WORKERS");
  unsetenv("CW_TOKEN");
}

static void test_unreachable_controller(void** state) {
  (void)state;
  setenv("CAUSEWAY_CONTROLLER", "127.0.0.1:1", 1);  // nothing listens on port 1
  double t0 = now_s();
  PJRT_Client* client = NULL;
  PJRT_Error* e = create_client(&client);
  double dt = now_s() - t0;
  unsetenv("CAUSEWAY_CONTROLLER");
  assert_null(client);
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_UNAVAILABLE);
  char* msg = error_text(e);
  assert_non_null(strstr(msg, "127.0.0.1:1"));
  assert_true(dt < 10.0);
  free(msg);
  error_free(e);
}

static void test_embedded_without_binaries(void** state) {
  (void)state;
  setenv("CAUSEWAY_BIN_DIR", "/nonexistent-causeway-bin", 1);
  setenv("CAUSEWAY_PJRT_PLUGIN", "/nonexistent.so", 1);
  PJRT_Client* client = NULL;
  PJRT_Error* e = create_client(&client);
  unsetenv("CAUSEWAY_BIN_DIR");
  assert_null(client);
  assert_non_null(e);
  assert_int_equal(error_code(e), PJRT_Error_Code_NOT_FOUND);
  char* msg = error_text(e);
  assert_non_null(strstr(msg, "/nonexistent-causeway-bin/causeway-controller"));
  free(msg);
  error_free(e);
}

// A bin directory with the real controller (or `controller_script`) and a
// worker that is `worker_script` (a shell script), in `dir`.
static void fake_bin_dir(char* dir, size_t cap, const char* controller_script,
                         const char* worker_script) {
  assert_int_equal(cw_test_tempdir_create("cw-fakebin", dir, cap), 0);
  char path[600];
  const char* scripts[] = {controller_script, worker_script};
  const char* names[] = {"causeway-controller", "causeway-worker"};
  for (int i = 0; i < 2; ++i) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    if (!scripts[i]) {
      char real[600];
      snprintf(real, sizeof(real), "%s/%s", CW_BIN_DIR, names[i]);
      assert_int_equal(symlink(real, path), 0);
      continue;
    }
    assert_int_equal(cw_test_write_file(path, scripts[i], strlen(scripts[i])), 0);
    assert_int_equal(chmod(path, 0700), 0);
  }
}

// Creates a client on the embedded cluster of `bin_dir` that must fail; its
// message (malloc'd), after checking the code.
static char* embedded_failure(const char* bin_dir, PJRT_Error_Code want, double* out_s) {
  setenv("CAUSEWAY_BIN_DIR", bin_dir, 1);
  setenv("CAUSEWAY_PJRT_PLUGIN", "/not-loaded-by-fake-workers.so", 1);
  setenv("CAUSEWAY_COMPILE_CACHE_DIR", "", 1);
  setenv("CAUSEWAY_START_TIMEOUT_MS", "1500", 1);
  PJRT_Client* client = NULL;
  double t0 = now_s();
  PJRT_Error* e = create_client(&client);
  *out_s = now_s() - t0;
  unsetenv("CAUSEWAY_BIN_DIR");
  unsetenv("CAUSEWAY_COMPILE_CACHE_DIR");
  unsetenv("CAUSEWAY_START_TIMEOUT_MS");
  assert_null(client);
  assert_non_null(e);
  char* msg = error_text(e);
  fprintf(stderr, "  %.1f s: %s\n", *out_s, msg);
  assert_int_equal(error_code(e), want);
  error_free(e);
  return msg;
}

// The log an error names with "(log: PATH)", kept after the failed start:
// its text (malloc'd); the file and its directory are removed.
static char* named_log(const char* msg) {
  const char* at = strstr(msg, "log: ");
  assert_non_null(at);
  at += strlen("log: ");
  char path[600];
  size_t n = strcspn(at, ")");
  assert_true(n < sizeof(path));
  memcpy(path, at, n);
  path[n] = '\0';
  void* text = NULL;
  size_t size = 0;
  assert_int_equal(cw_test_read_file(path, &text, &size), 0);
  char* slash = strrchr(path, '/');
  *slash = '\0';
  assert_int_equal(cw_test_tempdir_remove(path), 0);
  return text;
}

// The embedded cluster waits for each daemon's readiness line: a worker
// that never registers fails the start after CAUSEWAY_START_TIMEOUT_MS,
// naming it, what it did not do and its log; one that exits first fails it
// at once with its exit status; so does a controller that never listens.
static void test_embedded_daemon_not_ready(void** state) {
  (void)state;
  char dir[256];
  double s = 0;
  fake_bin_dir(dir, sizeof(dir), NULL, "#!/bin/sh\necho 'fake worker: asleep'\nexec sleep 30\n");
  char* msg = embedded_failure(dir, PJRT_Error_Code_DEADLINE_EXCEEDED, &s);
  assert_non_null(strstr(msg, "causeway: the embedded cluster failed to start: worker-0 did not "
                              "register within 1500 ms (CAUSEWAY_START_TIMEOUT_MS; log: "));
  assert_non_null(strstr(msg, "fake worker: asleep"));  // the log's tail
  assert_true(s >= 1.4 && s < 10);
  char* log = named_log(msg);
  assert_non_null(strstr(log, "fake worker: asleep"));
  free(log);
  free(msg);
  cw_test_tempdir_remove(dir);

  fake_bin_dir(dir, sizeof(dir), NULL, "#!/bin/sh\necho 'fake worker: giving up'\nexit 3\n");
  msg = embedded_failure(dir, PJRT_Error_Code_UNAVAILABLE, &s);
  assert_non_null(strstr(msg, "causeway: the embedded cluster failed to start: worker-0 exited "
                              "with status 3 before it could register (log: "));
  assert_non_null(strstr(msg, "fake worker: giving up"));
  assert_true(s < 1.4);  // at once, not after the timeout
  free(named_log(msg));
  free(msg);
  cw_test_tempdir_remove(dir);

  fake_bin_dir(dir, sizeof(dir), "#!/bin/sh\nexec sleep 30\n", "#!/bin/sh\nexit 0\n");
  msg = embedded_failure(dir, PJRT_Error_Code_DEADLINE_EXCEEDED, &s);
  assert_non_null(strstr(msg, "controller did not listen within 1500 ms"));
  free(named_log(msg));
  free(msg);
  cw_test_tempdir_remove(dir);
  unsetenv("CAUSEWAY_PJRT_PLUGIN");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_only_get_pjrt_api_is_exported),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_events),
      cmocka_unit_test(test_plugin_attributes),
      cmocka_unit_test(test_bad_settings),
      cmocka_unit_test(test_unreachable_controller),
      cmocka_unit_test(test_embedded_without_binaries),
      cmocka_unit_test(test_embedded_daemon_not_ready),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
