// Unit tests for what the session asks for: CAUSEWAY_DEVICES and friends
// become the OpenSessionRequest's fields, CAUSEWAY_WORKERS is split into
// names, and values that make no sense fail with an error naming the
// variable.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_plugin_alloc.h"

static const char* const kVars[] = {
    "CAUSEWAY_DEVICES", "CAUSEWAY_PLATFORM", "CAUSEWAY_MIN_ISLAND",   "CAUSEWAY_WORKERS",
    "CAUSEWAY_SHARE",   "CAUSEWAY_WEIGHT",   "CAUSEWAY_QUEUE_TIMEOUT"};

static int clear_env(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof(kVars) / sizeof(kVars[0]); ++i) unsetenv(kVars[i]);
  return 0;
}

// Reads the plugin's settings and fills `req` from them; the caller
// deinitializes `alloc` and `settings`.
static cw_status_t fill(cw_settings_t* settings, cw_plugin_alloc_t* alloc,
                        Causeway__V1__OpenSessionRequest* req) {
  causeway__v1__open_session_request__init(req);
  cw_status_t s = cw_settings_initialize(settings, CW_SCOPE_PLUGIN);
  assert_null(s);
  return cw_plugin_alloc_initialize(alloc, settings, req);
}

static void test_nothing_asked(void** state) {
  (void)state;
  cw_settings_t settings;
  cw_plugin_alloc_t alloc;
  Causeway__V1__OpenSessionRequest req;
  assert_null(fill(&settings, &alloc, &req));
  assert_int_equal(req.num_devices, 0);  // every device, none reserved
  assert_string_equal(req.platform, "");
  assert_int_equal(req.n_workers, 0);
  assert_false(req.share);
  assert_int_equal(req.weight, 0);
  assert_int_equal(req.queue_timeout_ms, 0);
  cw_plugin_alloc_deinitialize(&alloc);
  cw_settings_deinitialize(&settings);
}

static void test_everything_asked(void** state) {
  (void)state;
  setenv("CAUSEWAY_DEVICES", "4", 1);
  setenv("CAUSEWAY_PLATFORM", "cpu", 1);
  setenv("CAUSEWAY_MIN_ISLAND", "2", 1);
  setenv("CAUSEWAY_WORKERS", "worker-0,worker-1", 1);
  setenv("CAUSEWAY_SHARE", "1", 1);
  setenv("CAUSEWAY_WEIGHT", "3", 1);
  setenv("CAUSEWAY_QUEUE_TIMEOUT", "2.5", 1);
  cw_settings_t settings;
  cw_plugin_alloc_t alloc;
  Causeway__V1__OpenSessionRequest req;
  assert_null(fill(&settings, &alloc, &req));
  assert_int_equal(req.num_devices, 4);
  assert_string_equal(req.platform, "cpu");
  assert_int_equal(req.min_island, 2);
  assert_int_equal(req.n_workers, 2);
  assert_string_equal(req.workers[0], "worker-0");
  assert_string_equal(req.workers[1], "worker-1");
  assert_true(req.share);
  assert_int_equal(req.weight, 3);
  assert_int_equal(req.queue_timeout_ms, 2500);
  cw_plugin_alloc_deinitialize(&alloc);
  cw_settings_deinitialize(&settings);
}

// Fills with CAUSEWAY_DEVICES=2 and `var`=`value`; returns the refusal's
// message (static), failing the test when there is none.
static const char* refusal(const char* var, const char* value) {
  static char message[512];
  setenv("CAUSEWAY_DEVICES", "2", 1);
  setenv(var, value, 1);
  cw_settings_t settings;
  cw_plugin_alloc_t alloc;
  Causeway__V1__OpenSessionRequest req;
  cw_status_t s = fill(&settings, &alloc, &req);
  assert_non_null(s);
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  snprintf(message, sizeof(message), "%s", cw_status_message(s));
  cw_status_free(s);
  cw_plugin_alloc_deinitialize(&alloc);  // also after a failure
  cw_settings_deinitialize(&settings);
  return message;
}

static void test_bad_platform(void** state) {
  (void)state;
  const char* m = refusal("CAUSEWAY_PLATFORM", "c p u");
  assert_non_null(strstr(m, "CAUSEWAY_PLATFORM: 'c p u' is not a platform name"));
  m = refusal("CAUSEWAY_PLATFORM",
              "an-overly-long-platform-name-that-no-worker-would-ever-report-as-its-own");
  assert_non_null(strstr(m, "CAUSEWAY_PLATFORM"));
}

static void test_bad_workers(void** state) {
  (void)state;
  assert_non_null(strstr(refusal("CAUSEWAY_WORKERS", "a,,b"), "has an empty worker name"));
  assert_non_null(strstr(refusal("CAUSEWAY_WORKERS", "a,b,"), "has an empty worker name"));
  assert_non_null(
      strstr(refusal("CAUSEWAY_WORKERS", "a,b c"), "is not worker names separated by commas"));
}

static void test_options_need_devices(void** state) {
  (void)state;
  const char* options[][2] = {{"CAUSEWAY_PLATFORM", "cpu"}, {"CAUSEWAY_WORKERS", "w"},
                              {"CAUSEWAY_MIN_ISLAND", "2"}, {"CAUSEWAY_SHARE", "1"},
                              {"CAUSEWAY_WEIGHT", "2"},     {"CAUSEWAY_QUEUE_TIMEOUT", "1"}};
  for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); ++i) {
    clear_env(NULL);
    setenv(options[i][0], options[i][1], 1);
    cw_settings_t settings;
    cw_plugin_alloc_t alloc;
    Causeway__V1__OpenSessionRequest req;
    cw_status_t s = fill(&settings, &alloc, &req);
    assert_non_null(s);
    assert_non_null(strstr(cw_status_message(s), "need CAUSEWAY_DEVICES"));
    cw_status_free(s);
    cw_plugin_alloc_deinitialize(&alloc);
    cw_settings_deinitialize(&settings);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_nothing_asked, clear_env),
      cmocka_unit_test_setup(test_everything_asked, clear_env),
      cmocka_unit_test_setup(test_bad_platform, clear_env),
      cmocka_unit_test_setup(test_bad_workers, clear_env),
      cmocka_unit_test_setup(test_options_need_devices, clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
