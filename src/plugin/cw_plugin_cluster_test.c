// Unit tests for the embedded cluster's shape (cw_plugin_cluster_layout):
// one island of every device by default, the device count JAX asks for
// (jax_num_cpu_devices, then XLA_FLAGS), CAUSEWAY_LOCAL_* over both, and
// counts that make no sense failing with an error that names them; a
// CAUSEWAY_CHILD_LOGS value that means nothing, the same.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_plugin_cluster.h"

static int clear_env(void** state) {
  (void)state;
  unsetenv("CAUSEWAY_LOCAL_WORKERS");
  unsetenv("CAUSEWAY_LOCAL_DEVICES");
  return 0;
}

// The layout with the current environment; the error (or NULL) returned.
static cw_status_t layout(int64_t jax_devices, const char* xla_flags, int64_t* workers,
                          int64_t* devices) {
  cw_settings_t s;
  cw_status_t st = cw_settings_initialize(&s, CW_SCOPE_PLUGIN);
  assert_null(st);
  st = cw_plugin_cluster_layout(&s, jax_devices, xla_flags, workers, devices);
  cw_settings_deinitialize(&s);
  return st;
}

#define ASSERT_LAYOUT(jax, flags, want_workers, want_devices)       \
  do {                                                               \
    int64_t w_ = -1, d_ = -1;                                        \
    cw_status_t st_ = layout((jax), (flags), &w_, &d_);              \
    if (st_) fail_msg("layout failed: %s", cw_status_message(st_)); \
    assert_int_equal(w_, (want_workers));                            \
    assert_int_equal(d_, (want_devices));                            \
  } while (0)

// The error message of a layout that must fail (the caller frees it).
static char* layout_error(int64_t jax_devices, const char* xla_flags) {
  int64_t w = -1, d = -1;
  cw_status_t st = layout(jax_devices, xla_flags, &w, &d);
  assert_non_null(st);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  char* msg = strdup(cw_status_message(st));
  cw_status_free(st);
  return msg;
}

static void test_one_island_by_default(void** state) {
  (void)state;
  ASSERT_LAYOUT(0, NULL, 1, 8);
  ASSERT_LAYOUT(0, "", 1, 8);
  ASSERT_LAYOUT(0, "--xla_cpu_use_thunk_runtime=true", 1, 8);  // other flags: not ours
}

static void test_the_count_jax_asks_for(void** state) {
  (void)state;
  ASSERT_LAYOUT(4, NULL, 1, 4);  // jax_num_cpu_devices
  ASSERT_LAYOUT(0, "--xla_force_host_platform_device_count=2", 1, 2);
  ASSERT_LAYOUT(0, " --a=1\t--xla_force_host_platform_device_count=16 --b ", 1, 16);
  ASSERT_LAYOUT(0, "-xla_force_host_platform_device_count=3", 1, 3);  // one dash, as XLA takes
  // The last flag wins, as in XLA's parser; jax_num_cpu_devices wins over it.
  ASSERT_LAYOUT(0,
                "--xla_force_host_platform_device_count=2 "
                "--xla_force_host_platform_device_count=6",
                1, 6);
  ASSERT_LAYOUT(5, "--xla_force_host_platform_device_count=2", 1, 5);
  // A longer flag with the same start is another flag.
  ASSERT_LAYOUT(0, "--xla_force_host_platform_device_count_x=2", 1, 8);
}

static void test_settings_win(void** state) {
  (void)state;
  setenv("CAUSEWAY_LOCAL_DEVICES", "3", 1);
  ASSERT_LAYOUT(4, "--xla_force_host_platform_device_count=2", 1, 3);
  setenv("CAUSEWAY_LOCAL_WORKERS", "3", 1);
  ASSERT_LAYOUT(0, NULL, 3, 3);  // per worker
  unsetenv("CAUSEWAY_LOCAL_DEVICES");
  setenv("CAUSEWAY_LOCAL_WORKERS", "2", 1);
  ASSERT_LAYOUT(0, NULL, 2, 4);  // the 8 default devices, split: today's two islands
  ASSERT_LAYOUT(4, NULL, 2, 2);
  ASSERT_LAYOUT(0, "--xla_force_host_platform_device_count=8", 2, 4);
}

static void test_counts_that_make_no_sense(void** state) {
  (void)state;
  setenv("CAUSEWAY_LOCAL_WORKERS", "3", 1);
  char* msg = layout_error(0, NULL);
  assert_string_equal(msg,
                      "causeway: 8 CPU devices (the default) do not split evenly over "
                      "CAUSEWAY_LOCAL_WORKERS=3 workers; set CAUSEWAY_LOCAL_DEVICES (devices "
                      "of each worker)");
  free(msg);
  msg = layout_error(4, NULL);
  assert_non_null(strstr(msg, "4 CPU devices (jax_num_cpu_devices) do not split"));
  free(msg);
  msg = layout_error(0, "--xla_force_host_platform_device_count=7");
  assert_non_null(strstr(msg, "7 CPU devices (XLA_FLAGS) do not split"));
  free(msg);
  unsetenv("CAUSEWAY_LOCAL_WORKERS");
  static const char* const bad[] = {"=abc", "=0", "=-2", "=", "=9999999", "=3x",
                                    "=123456789012345678901234567890123"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    char flags[96];
    snprintf(flags, sizeof(flags), "--xla_force_host_platform_device_count%s", bad[i]);
    msg = layout_error(0, flags);
    char want[160];
    snprintf(want, sizeof(want), "causeway: XLA_FLAGS: --xla_force_host_platform_device_count%s "
             "is not a device count in [1, 4096]", bad[i]);
    assert_string_equal(msg, want);
    free(msg);
  }
}

// A CAUSEWAY_CHILD_LOGS value other than 'inherit' was ignored in silence (an
// audit); the start fails naming it, before anything is spawned.
static void test_child_logs_value(void** state) {
  (void)state;
  setenv("CAUSEWAY_CHILD_LOGS", "files", 1);
  cw_settings_t s;
  assert_null(cw_settings_initialize(&s, CW_SCOPE_PLUGIN));
  cw_plugin_cluster_t* cl = NULL;
  const char* address = NULL;
  uint32_t workers = 0;
  cw_status_t st = cw_plugin_cluster_start(&s, 0, &cl, &address, &workers);
  unsetenv("CAUSEWAY_CHILD_LOGS");
  cw_settings_deinitialize(&s);
  assert_non_null(st);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_string_equal(cw_status_message(st),
                      "causeway: CAUSEWAY_CHILD_LOGS=files: the one value is 'inherit' (unset: "
                      "the daemons log to files in the cluster's directory)");
  assert_null(cl);
  cw_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_one_island_by_default, clear_env),
      cmocka_unit_test_setup(test_the_count_jax_asks_for, clear_env),
      cmocka_unit_test_setup(test_settings_win, clear_env),
      cmocka_unit_test_setup(test_counts_that_make_no_sense, clear_env),
      cmocka_unit_test_setup(test_child_logs_value, clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
