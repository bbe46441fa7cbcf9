// Unit tests for the settings table: environment and flags per program
// (scope), parsing and its refusals, the table's own rules, --help, and the
// warnings for dropped old names.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include "cw_settings.h"
#include "cw_status.h"
#include "cw_test_util.h"

// Settings tests start from an environment without any causeway variable.
static void clear_settings_env(void) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* d = cw_settings_def((cw_setting_id_t)i);
    unsetenv(d->env);
    if (d->old_env) unsetenv(d->old_env);
  }
}

// The message of `st` (taken) equals `want`.
static void expect_error(cw_status_t st, cw_status_code_t code, const char* want) {
  assert_non_null(st);
  assert_int_equal(cw_status_code(st), code);
  assert_string_equal(cw_status_message(st), want);
  cw_status_free(st);
}

static void test_settings(void** state) {
  clear_settings_env();
  setenv("CAUSEWAY_WORKER_DEVICES", "8", 1);
  cw_settings_t s;
  cw_status_t st = cw_settings_initialize(&s, CW_SCOPE_WORKER);
  assert_null(st);
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 8);
  assert_true(cw_settings_given(&s, CW_SET_DEVICES));
  assert_int_equal(cw_settings_int(&s, CW_SET_MAX_PAYLOAD), 16 * 1024 * 1024);
  assert_false(cw_settings_given(&s, CW_SET_MAX_PAYLOAD));
  char* argv[] = {"prog", "--devices=2", "--listen", "127.0.0.1:1", "--exit-with-controller"};
  assert_null(cw_settings_parse_args(&s, 5, argv));
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 2);
  assert_string_equal(cw_settings_string(&s, CW_SET_LISTEN), "127.0.0.1:1");
  assert_int_equal(cw_settings_int(&s, CW_SET_EXIT_WITH_CONTROLLER), 1);

  expect_error(cw_settings_set(&s, "devices", "0", true), CW_OUT_OF_RANGE,
               "--devices: 0 is outside [1, 4096]");
  expect_error(cw_settings_set(&s, "devices", "4x", true), CW_INVALID_ARGUMENT,
               "--devices: '4x' is not an integer");
  expect_error(cw_settings_set(&s, "token", "secret", true), CW_INVALID_ARGUMENT,
               "--token may not be given on the command line; set CAUSEWAY_TOKEN or use a file");
  expect_error(cw_settings_set(&s, "no-such", "1", true), CW_INVALID_ARGUMENT,
               "unknown setting --no-such (see --help)");
  // An unknown or secret flag last on the line is refused by name, not for
  // want of a value.
  char* last_unknown[] = {"prog", "--no-such"};
  expect_error(cw_settings_parse_args(&s, 2, last_unknown), CW_INVALID_ARGUMENT,
               "unknown setting --no-such (see --help)");
  char* last_secret[] = {"prog", "--token"};
  expect_error(cw_settings_parse_args(&s, 2, last_secret), CW_INVALID_ARGUMENT,
               "--token may not be given on the command line; set CAUSEWAY_TOKEN or use a file");
  char* needs[] = {"prog", "--devices"};
  expect_error(cw_settings_parse_args(&s, 2, needs), CW_INVALID_ARGUMENT,
               "--devices needs a value");
  // Decimal, or hexadecimal after 0x; a leading zero is not octal.
  assert_null(cw_settings_set(&s, "devices", "010", true));
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 10);
  assert_null(cw_settings_set(&s, "devices", "0x10", true));
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 16);
  cw_settings_deinitialize(&s);
  cw_settings_deinitialize(&s);  // idempotent

  setenv("CAUSEWAY_WORKER_DEVICES", "-3", 1);
  expect_error(cw_settings_initialize(&s, CW_SCOPE_WORKER), CW_OUT_OF_RANGE,
               "CAUSEWAY_WORKER_DEVICES: -3 is outside [1, 4096]");
  unsetenv("CAUSEWAY_WORKER_DEVICES");
}

// What --help prints for `scope` (malloc'd).
static char* help_text(unsigned scope) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  assert_non_null(f);
  cw_settings_print_help(f, scope);
  fclose(f);
  return text;
}

// Each program reads its own variables and flags only.
static void test_settings_scope(void** state) {
  clear_settings_env();
  cw_settings_t s;
  setenv("CAUSEWAY_WAIT_MS", "abc", 1);      // the plugin's
  setenv("CAUSEWAY_DEVICES", "2", 1);        // the plugin's: devices its session asks for
  setenv("CAUSEWAY_WORKER_DEVICES", "3", 1); // the worker's
  assert_null(cw_settings_initialize(&s, CW_SCOPE_WORKER));
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 3);
  assert_int_equal(cw_settings_int(&s, CW_SET_WAIT_MS), 15000);  // the default, not read
  assert_int_equal(cw_settings_int(&s, CW_SET_SESSION_DEVICES), 0);
  cw_settings_deinitialize(&s);

  expect_error(cw_settings_initialize(&s, CW_SCOPE_PLUGIN), CW_INVALID_ARGUMENT,
               "CAUSEWAY_WAIT_MS: 'abc' is not an integer");
  setenv("CAUSEWAY_WAIT_MS", "5000000", 1);
  expect_error(cw_settings_initialize(&s, CW_SCOPE_PLUGIN), CW_OUT_OF_RANGE,
               "CAUSEWAY_WAIT_MS: 5000000 is outside [0, 3600000]");
  setenv("CAUSEWAY_WAIT_MS", "", 1);  // empty: the default
  assert_null(cw_settings_initialize(&s, CW_SCOPE_PLUGIN));
  assert_int_equal(cw_settings_int(&s, CW_SET_WAIT_MS), 15000);
  assert_false(cw_settings_given(&s, CW_SET_WAIT_MS));
  assert_int_equal(cw_settings_int(&s, CW_SET_SESSION_DEVICES), 2);
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 4);  // the worker's, not read
  // The plugin has no command line.
  expect_error(cw_settings_set(&s, "devices", "1", true), CW_INVALID_ARGUMENT,
               "unknown setting --devices (see --help)");
  cw_settings_deinitialize(&s);
  unsetenv("CAUSEWAY_WAIT_MS");
  unsetenv("CAUSEWAY_DEVICES");
  unsetenv("CAUSEWAY_WORKER_DEVICES");

  assert_null(cw_settings_initialize(&s, CW_SCOPE_CONTROLLER));
  expect_error(cw_settings_set(&s, "devices", "1", true), CW_INVALID_ARGUMENT,
               "unknown setting --devices (see --help)");
  assert_null(cw_settings_set(&s, "compile-cache-dir", "/x", true));
  cw_settings_deinitialize(&s);

  // --help lists the program's own.
  char* text = help_text(CW_SCOPE_CONTROLLER);
  assert_non_null(strstr(text, "--compile-cache-dir"));
  assert_non_null(strstr(text, "CAUSEWAY_WORKER_TIMEOUT_MS"));
  assert_non_null(strstr(text, "CAUSEWAY_TOKEN "));
  assert_null(strstr(text, "--token "));  // a secret has no flag
  assert_null(strstr(text, "--devices"));
  assert_null(strstr(text, "CAUSEWAY_WAIT_MS"));
  free(text);
  text = help_text(CW_SCOPE_WORKER);
  assert_non_null(strstr(text, "CAUSEWAY_WORKER_DEVICES"));
  assert_non_null(strstr(text, "[1, 4096] (default 4)"));
  assert_null(strstr(text, "--compile-cache-bytes"));
  free(text);
}

// Every row: a CAUSEWAY_* name of its own, a reader, and a default that parses.
static void test_settings_table(void** state) {
  clear_settings_env();
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* a = cw_settings_def((cw_setting_id_t)i);
    assert_non_null(a);
    assert_int_equal(strncmp(a->env, "CAUSEWAY_", 9), 0);
    assert_true(a->scope != 0 && (a->scope & ~(unsigned)CW_SCOPE_ALL) == 0);
    assert_true(!a->old_env || !strncmp(a->old_env, "CW_", 3));
    for (int j = 0; j < i; ++j) {
      const cw_setting_def_t* b = cw_settings_def((cw_setting_id_t)j);
      assert_string_not_equal(a->env, b->env);
      if (a->old_env && b->old_env) assert_string_not_equal(a->old_env, b->old_env);
      // One program never has two settings behind one flag.
      if (a->name && b->name && (a->scope & b->scope)) assert_string_not_equal(a->name, b->name);
    }
  }
  assert_null(cw_settings_def(CW_SET_COUNT));
  cw_settings_t s;
  assert_null(cw_settings_initialize(&s, 0));  // defaults only
  cw_settings_deinitialize(&s);
}

static void test_settings_types(void** state) {
  clear_settings_env();
  cw_settings_t s;
  setenv("CAUSEWAY_SHARE", "2", 1);
  expect_error(cw_settings_initialize(&s, CW_SCOPE_PLUGIN), CW_INVALID_ARGUMENT,
               "CAUSEWAY_SHARE: '2' is not a boolean (1, true, yes, 0, false or no)");
  setenv("CAUSEWAY_SHARE", "yes", 1);
  setenv("CAUSEWAY_QUEUE_TIMEOUT", "1.5", 1);
  assert_null(cw_settings_initialize(&s, CW_SCOPE_PLUGIN));
  assert_int_equal(cw_settings_int(&s, CW_SET_SHARE), 1);
  assert_int_equal(cw_settings_int(&s, CW_SET_QUEUE_TIMEOUT), 1500);
  cw_settings_deinitialize(&s);
  setenv("CAUSEWAY_QUEUE_TIMEOUT", "0.0001", 1);  // a positive wait stays positive
  assert_null(cw_settings_initialize(&s, CW_SCOPE_PLUGIN));
  assert_int_equal(cw_settings_int(&s, CW_SET_QUEUE_TIMEOUT), 1);
  cw_settings_deinitialize(&s);
  setenv("CAUSEWAY_QUEUE_TIMEOUT", "-1", 1);
  expect_error(cw_settings_initialize(&s, CW_SCOPE_PLUGIN), CW_OUT_OF_RANGE,
               "CAUSEWAY_QUEUE_TIMEOUT: -1 is outside [0, 86400] seconds");
  setenv("CAUSEWAY_QUEUE_TIMEOUT", "nan", 1);
  expect_error(cw_settings_initialize(&s, CW_SCOPE_PLUGIN), CW_INVALID_ARGUMENT,
               "CAUSEWAY_QUEUE_TIMEOUT: 'nan' is not a number of seconds");
  unsetenv("CAUSEWAY_QUEUE_TIMEOUT");
  unsetenv("CAUSEWAY_SHARE");

  // An empty CAUSEWAY_COMPILE_CACHE_DIR is a value (off), unlike an unset one.
  assert_null(cw_settings_initialize(&s, CW_SCOPE_PLUGIN));
  assert_false(cw_settings_given(&s, CW_SET_COMPILE_CACHE_DIR));
  cw_settings_deinitialize(&s);
  setenv("CAUSEWAY_COMPILE_CACHE_DIR", "", 1);
  assert_null(cw_settings_initialize(&s, CW_SCOPE_PLUGIN));
  assert_true(cw_settings_given(&s, CW_SET_COMPILE_CACHE_DIR));
  assert_string_equal(cw_settings_string(&s, CW_SET_COMPILE_CACHE_DIR), "");
  cw_settings_deinitialize(&s);
  unsetenv("CAUSEWAY_COMPILE_CACHE_DIR");

  setenv("CAUSEWAY_TOKEN", "from-env", 1);
  assert_string_equal(cw_settings_getenv(CW_SET_TOKEN), "from-env");
  setenv("CAUSEWAY_TOKEN", "", 1);
  assert_null(cw_settings_getenv(CW_SET_TOKEN));
  unsetenv("CAUSEWAY_TOKEN");
}

// Runs cw_settings_warn_old_names(scope) with stderr in `out`.
static size_t warn_old_names_captured(unsigned scope, char* out, size_t cap) {
  cw_test_stderr_capture_t capture;
  assert_int_equal(cw_test_stderr_capture_begin(&capture), 0);
  size_t n = cw_settings_warn_old_names(scope);
  assert_int_equal(cw_test_stderr_capture_end(&capture, out, cap), 0);
  return n;
}

// A daemon's start-up refusals all exit 2, as a bad command line does (a
// bad setting exited 1 until session 46, unlike --listen or the log level).
static void test_main_refusals_exit_2(void** state) {
  (void)state;
  clear_settings_env();
  cw_settings_t s;
  int code = -1;
  char* bad_flag[] = {"causeway-worker", "--listen", "x.sock", "--devices", "four", NULL};
  assert_false(cw_settings_initialize_for_main("causeway-worker", "usage", "worker",
                                               CW_SCOPE_WORKER, 5, bad_flag, &s, &code));
  assert_int_equal(code, 2);
  setenv("CAUSEWAY_WORKER_DEVICES", "5000", 1);
  char* listen[] = {"causeway-worker", "--listen", "x.sock", NULL};
  assert_false(cw_settings_initialize_for_main("causeway-worker", "usage", "worker",
                                               CW_SCOPE_WORKER, 3, listen, &s, &code));
  assert_int_equal(code, 2);
  unsetenv("CAUSEWAY_WORKER_DEVICES");
  char* no_listen[] = {"causeway-worker", NULL};
  assert_false(cw_settings_initialize_for_main("causeway-worker", "usage", "worker",
                                               CW_SCOPE_WORKER, 1, no_listen, &s, &code));
  assert_int_equal(code, 2);
  char* good[] = {"causeway-worker", "--listen", "x.sock", "--devices", "2", NULL};
  assert_true(cw_settings_initialize_for_main("causeway-worker", "usage", "worker",
                                              CW_SCOPE_WORKER, 5, good, &s, &code));
  assert_int_equal(code, 0);
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 2);
  cw_settings_deinitialize(&s);
}

static void test_settings_old_names(void** state) {
  clear_settings_env();
  char text[2048];
  assert_int_equal(warn_old_names_captured(CW_SCOPE_ALL, text, sizeof(text)), 0);
  assert_string_equal(text, "");
  setenv("CW_TOKEN", "old", 1);
  setenv("CW_DEVICES", "3", 1);
  assert_int_equal(warn_old_names_captured(CW_SCOPE_CONTROLLER, text, sizeof(text)), 1);
  assert_non_null(strstr(text, "CW_TOKEN is set but no longer read: causeway reads "
                               "CAUSEWAY_TOKEN (docs/operations.md, \"Renamed settings\")"));
  assert_null(strstr(text, "CW_DEVICES"));
  assert_int_equal(warn_old_names_captured(CW_SCOPE_WORKER, text, sizeof(text)), 2);
  assert_non_null(strstr(text, "CW_DEVICES is set but no longer read: causeway reads "
                               "CAUSEWAY_WORKER_DEVICES"));
  // Dropped, not read.
  cw_settings_t s;
  assert_null(cw_settings_initialize(&s, CW_SCOPE_WORKER));
  assert_int_equal(cw_settings_int(&s, CW_SET_DEVICES), 4);
  assert_string_equal(cw_settings_string(&s, CW_SET_TOKEN), "");
  cw_settings_deinitialize(&s);
  unsetenv("CW_TOKEN");
  unsetenv("CW_DEVICES");
}

// A token file's first line is presented; its further lines are accepted
// (a rotation); CAUSEWAY_TOKEN, when set, is the only token.
static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_token_set(void** state) {
  (void)state;
  clear_settings_env();
  char path[] = "/tmp/cw_settings_token_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  write_file(path, "new\r\n\nold\nnew\n");
  setenv("CAUSEWAY_TOKEN_FILE", path, 1);
  cw_settings_t s;
  assert_null(cw_settings_initialize(&s, CW_SCOPE_CONTROLLER));
  assert_null(cw_settings_load_token(&s));
  assert_string_equal(cw_settings_string(&s, CW_SET_TOKEN), "new");
  cw_token_set_t set;
  assert_null(cw_settings_read_tokens(&s, &set));
  assert_int_equal(set.count, 2);  // a repeated line once
  assert_string_equal(set.tokens[0], "new");
  assert_string_equal(set.tokens[1], "old");
  cw_token_set_clear(&set);
  cw_token_set_clear(&set);  // idempotent
  // Read again each time: the file changed.
  write_file(path, "newer");
  assert_null(cw_settings_read_tokens(&s, &set));
  assert_int_equal(set.count, 1);
  assert_string_equal(set.tokens[0], "newer");
  cw_token_set_clear(&set);
  // Refused whole, never cut.
  write_file(path, "\nlate\n");
  char want[256];
  snprintf(want, sizeof(want), "token file %s is empty", path);
  expect_error(cw_settings_read_tokens(&s, &set), CW_INVALID_ARGUMENT, want);
  assert_int_equal(set.count, 0);
  write_file(path, "1\n2\n3\n4\n5\n6\n7\n8\n9\n");
  snprintf(want, sizeof(want), "token file %s: more than 8 tokens (the first line is presented, "
           "each further line accepted too)", path);
  expect_error(cw_settings_read_tokens(&s, &set), CW_INVALID_ARGUMENT, want);
  char long_line[1100];
  memset(long_line, 'x', sizeof(long_line) - 1);
  long_line[sizeof(long_line) - 1] = 0;
  write_file(path, long_line);
  snprintf(want, sizeof(want), "token file %s: line 1 is longer than 1022 bytes", path);
  expect_error(cw_settings_read_tokens(&s, &set), CW_INVALID_ARGUMENT, want);
  unlink(path);
  snprintf(want, sizeof(want), "token file %s: No such file or directory", path);
  expect_error(cw_settings_read_tokens(&s, &set), CW_NOT_FOUND, want);
  cw_settings_deinitialize(&s);
  // The variable wins, and is the only one.
  setenv("CAUSEWAY_TOKEN", "fixed", 1);
  assert_null(cw_settings_initialize(&s, CW_SCOPE_CONTROLLER));
  assert_null(cw_settings_read_tokens(&s, &set));
  assert_int_equal(set.count, 1);
  assert_string_equal(set.tokens[0], "fixed");
  cw_token_set_clear(&set);
  cw_settings_deinitialize(&s);
  unsetenv("CAUSEWAY_TOKEN");
  unsetenv("CAUSEWAY_TOKEN_FILE");
  // Neither: no token.
  assert_null(cw_settings_initialize(&s, CW_SCOPE_CONTROLLER));
  assert_null(cw_settings_read_tokens(&s, &set));
  assert_int_equal(set.count, 0);
  cw_settings_deinitialize(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_settings),         cmocka_unit_test(test_settings_scope),
      cmocka_unit_test(test_settings_table),   cmocka_unit_test(test_settings_types),
      cmocka_unit_test(test_settings_old_names), cmocka_unit_test(test_token_set),
      cmocka_unit_test(test_main_refusals_exit_2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
