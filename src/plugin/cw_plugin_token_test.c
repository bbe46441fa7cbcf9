// Unit tests for the plugin's token: CAUSEWAY_TOKEN wins over the first line
// of CAUSEWAY_TOKEN_FILE, no token is "", an unreadable file fails naming
// the variable, and a refusal by a daemon is reworded to say how to set it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_plugin_token.h"

static char g_path[64];

static int clear_env(void** state) {
  (void)state;
  unsetenv("CAUSEWAY_TOKEN");
  unsetenv("CAUSEWAY_TOKEN_FILE");
  return 0;
}

static int remove_file(void** state) {
  (void)state;
  if (g_path[0]) unlink(g_path);
  g_path[0] = '\0';
  return clear_env(state);
}

// A 0600 token file holding `text`; its path in g_path.
static void write_token_file(const char* text) {
  snprintf(g_path, sizeof(g_path), "/tmp/cw_plugin_token_test.XXXXXX");
  int fd = mkstemp(g_path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  setenv("CAUSEWAY_TOKEN_FILE", g_path, 1);
}

// The token the plugin would present (caller frees), or NULL with *out_status
// set when loading fails.
static char* load(cw_status_t* out_status) {
  cw_settings_t settings;
  assert_null(cw_settings_initialize(&settings, CW_SCOPE_PLUGIN));
  cw_plugin_token_t t;
  *out_status = cw_plugin_token_load(&settings, &t);
  cw_settings_deinitialize(&settings);  // the token is the plugin's copy
  char* token = *out_status ? NULL : strdup(cw_plugin_token_now(&t));
  cw_plugin_token_deinitialize(&t);
  return token;
}

// Fails the test unless the plugin would present `want`.
static void expect_token(const char* want) {
  cw_status_t s;
  char* token = load(&s);
  assert_null(s);
  assert_string_equal(token, want);
  free(token);
}

// A file's token is read again when the file changes (the cluster's token
// rotated); a pointer handed out before stays valid; a file that cannot
// be read leaves the last token. CAUSEWAY_TOKEN is never read again.
static void rewrite(const char* text) {
  FILE* f = fopen(g_path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_file_read_again_when_changed(void** state) {
  (void)state;
  write_token_file("first\n");
  cw_settings_t settings;
  assert_null(cw_settings_initialize(&settings, CW_SCOPE_PLUGIN));
  cw_plugin_token_t t;
  assert_null(cw_plugin_token_load(&settings, &t));
  cw_settings_deinitialize(&settings);
  const char* before = cw_plugin_token_now(&t);
  assert_string_equal(before, "first");
  rewrite("second-and-longer\nfirst\n");
  assert_string_equal(cw_plugin_token_now(&t), "second-and-longer");
  assert_string_equal(before, "first");  // still readable
  rewrite("\n");
  assert_string_equal(cw_plugin_token_now(&t), "second-and-longer");
  unlink(g_path);
  assert_string_equal(cw_plugin_token_now(&t), "second-and-longer");
  rewrite("third\n");
  assert_string_equal(cw_plugin_token_now(&t), "third");
  cw_plugin_token_deinitialize(&t);
  cw_plugin_token_deinitialize(&t);  // idempotent

  setenv("CAUSEWAY_TOKEN", "fixed", 1);
  assert_null(cw_settings_initialize(&settings, CW_SCOPE_PLUGIN));
  assert_null(cw_plugin_token_load(&settings, &t));
  cw_settings_deinitialize(&settings);
  rewrite("changed\n");
  assert_string_equal(cw_plugin_token_now(&t), "fixed");
  cw_plugin_token_deinitialize(&t);
}

static void test_none_is_empty(void** state) {
  (void)state;
  expect_token("");
}

static void test_variable(void** state) {
  (void)state;
  setenv("CAUSEWAY_TOKEN", "s3cret", 1);
  expect_token("s3cret");
}

static void test_file_first_line(void** state) {
  (void)state;
  write_token_file("from-file\nsecond line\n");
  expect_token("from-file");
}

static void test_variable_wins_over_file(void** state) {
  (void)state;
  write_token_file("from-file\n");
  setenv("CAUSEWAY_TOKEN", "override", 1);
  expect_token("override");
}

static void test_missing_file_fails(void** state) {
  (void)state;
  setenv("CAUSEWAY_TOKEN_FILE", "/nonexistent/cw_plugin_token_test", 1);
  cw_status_t s;
  char* token = load(&s);
  assert_null(token);
  assert_non_null(s);
  assert_non_null(strstr(cw_status_message(s), "causeway: CAUSEWAY_TOKEN_FILE"));
  cw_status_free(s);
}

static void test_refusal_is_reworded(void** state) {
  (void)state;
  cw_status_t s = cw_plugin_token_refused(
      cw_make_status(CW_UNAUTHENTICATED, "HELLO refused: bad token"), "controller", "/tmp/c.sock");
  assert_int_equal(cw_status_code(s), CW_UNAUTHENTICATED);
  const char* m = cw_status_message(s);
  assert_non_null(strstr(m, "the controller at /tmp/c.sock refused this client's token"));
  assert_non_null(strstr(m, "CAUSEWAY_TOKEN_FILE"));
  assert_non_null(strstr(m, "Detail: HELLO refused: bad token"));
  cw_status_free(s);
}

static void test_other_errors_pass(void** state) {
  (void)state;
  assert_null(cw_plugin_token_refused(cw_ok_status(), "worker", "w:1"));
  cw_status_t in = cw_make_status(CW_UNAVAILABLE, "connection refused");
  cw_status_t out = cw_plugin_token_refused(in, "worker", "w:1");
  assert_ptr_equal(out, in);  // unchanged, not a copy
  assert_string_equal(cw_status_message(out), "connection refused");
  cw_status_free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_none_is_empty, clear_env, remove_file),
      cmocka_unit_test_setup_teardown(test_variable, clear_env, remove_file),
      cmocka_unit_test_setup_teardown(test_file_first_line, clear_env, remove_file),
      cmocka_unit_test_setup_teardown(test_variable_wins_over_file, clear_env, remove_file),
      cmocka_unit_test_setup_teardown(test_missing_file_fails, clear_env, remove_file),
      cmocka_unit_test_setup_teardown(test_file_read_again_when_changed, clear_env, remove_file),
      cmocka_unit_test(test_refusal_is_reworded),
      cmocka_unit_test(test_other_errors_pass),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
