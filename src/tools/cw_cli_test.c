// Unit tests of the `causeway` tool's parts: JSON escaping and nesting,
// argument parsing, status rendering.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_cli.h"
#include "cw_json.h"

static void test_json_escapes_strings(void** state) {
  cw_json_t j;
  cw_json_initialize(&j);
  cw_json_begin_object(&j, NULL);
  cw_json_string(&j, "k\"ey", "a\"b\\c\nd\te\x01" "f\x7f" "g\xc3\xa9");
  cw_json_string(&j, "null", NULL);
  cw_json_end_object(&j);
  assert_false(j.failed);
  assert_string_equal(j.buf, "{\n  \"k\\\"ey\": \"a\\\"b\\\\c\\nd\\te\\u0001f\\u007fg\xc3\xa9\",\n"
                             "  \"null\": \"\"\n}\n");
  cw_json_deinitialize(&j);
}

static void test_json_replaces_invalid_utf8(void** state) {
  cw_json_t j;
  cw_json_initialize(&j);
  // Valid: 2-, 3- and 4-byte sequences. Invalid: a lone continuation byte, a
  // truncated sequence at the end, an overlong '/', a surrogate, 0xFF.
  cw_json_string(&j, NULL, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\x80|\xc0\xaf|\xed\xa0\x80|\xff|\xe2\x82");
  assert_false(j.failed);
  assert_string_equal(j.buf, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\\ufffd|\\ufffd\\ufffd|"
                             "\\ufffd\\ufffd\\ufffd|\\ufffd|\\ufffd\\ufffd\"");
  cw_json_deinitialize(&j);
}

static void test_json_nesting_and_numbers(void** state) {
  cw_json_t j;
  cw_json_initialize(&j);
  cw_json_begin_object(&j, NULL);
  cw_json_begin_array(&j, "empty");
  cw_json_end_array(&j);
  cw_json_begin_array(&j, "xs");
  cw_json_int(&j, NULL, -3);
  cw_json_uint(&j, NULL, UINT64_MAX);
  cw_json_double(&j, NULL, 2.5);
  cw_json_double(&j, NULL, 0.0 / 0.0);
  cw_json_bool(&j, NULL, true);
  cw_json_end_array(&j);
  cw_json_end_object(&j);
  assert_false(j.failed);
  assert_string_equal(j.buf, "{\n  \"empty\": [],\n  \"xs\": [\n    -3,\n"
                             "    18446744073709551615,\n    2.500,\n    null,\n    true\n  ]\n}\n");
  cw_json_deinitialize(&j);
}

static void test_json_unbalanced_fails(void** state) {
  cw_json_t j;
  cw_json_initialize(&j);
  cw_json_end_object(&j);
  assert_true(j.failed);
  cw_json_deinitialize(&j);
  cw_json_initialize(&j);
  for (int i = 0; i < CW_JSON_MAX_DEPTH + 1; ++i) cw_json_begin_array(&j, NULL);
  assert_true(j.failed);
  cw_json_deinitialize(&j);
}

static bool parse(cw_cli_args_t* a, char* err, size_t n, ...) {
  char* argv[16] = {(char*)"causeway"};
  int argc = 1;
  va_list ap;
  va_start(ap, n);
  for (const char* s; (s = va_arg(ap, const char*)) != NULL && argc < 15;) argv[argc++] = (char*)s;
  va_end(ap);
  return cw_cli_parse(argc, argv, a, err, n);
}

static void test_args_commands(void** state) {
  cw_cli_args_t a;
  char err[256];
  assert_true(parse(&a, err, sizeof(err), "status", "--json", "--controller", "h:1", NULL));
  assert_int_equal(a.command, CW_CLI_STATUS);
  assert_true(a.json);
  assert_string_equal(a.controller, "h:1");
  assert_true(parse(&a, err, sizeof(err), "--controller=/tmp/s", "pause", "1234", NULL));
  assert_int_equal(a.command, CW_CLI_PAUSE);
  assert_int_equal(a.session_id, 1234);
  assert_string_equal(a.controller, "/tmp/s");
  assert_true(parse(&a, err, sizeof(err), "resume", "train@host:7", NULL));
  assert_int_equal(a.command, CW_CLI_RESUME);
  assert_int_equal(a.session_id, 0);
  assert_string_equal(a.target, "train@host:7");
  assert_true(parse(&a, err, sizeof(err), "drain", "w1", "--wait", "--timeout", "2.5", NULL));
  assert_int_equal(a.command, CW_CLI_DRAIN);
  assert_true(a.wait);
  assert_true(a.timeout_s == 2.5);
  assert_true(parse(&a, err, sizeof(err), "undrain", "w1", NULL));
  assert_int_equal(a.command, CW_CLI_UNDRAIN);
  assert_false(parse(&a, err, sizeof(err), "--help", NULL));
  assert_string_equal(err, "");
}

static void test_args_errors(void** state) {
  cw_cli_args_t a;
  char err[256];
  assert_false(parse(&a, err, sizeof(err), NULL));
  assert_string_equal(err, "no command given (see --help)");
  assert_false(parse(&a, err, sizeof(err), "stats", NULL));
  assert_string_equal(err, "unknown command 'stats' (status, pause, resume, drain, undrain)");
  assert_false(parse(&a, err, sizeof(err), "pause", NULL));
  assert_string_equal(err, "pause needs a SESSION id or name");
  assert_false(parse(&a, err, sizeof(err), "drain", NULL));
  assert_string_equal(err, "drain needs a WORKER name");
  assert_false(parse(&a, err, sizeof(err), "status", "--frobnicate", NULL));
  assert_string_equal(err, "unknown option '--frobnicate' (see --help)");
  assert_false(parse(&a, err, sizeof(err), "drain", "w", "--timeout", "soon", NULL));
  assert_string_equal(err, "--timeout 'soon' is not a number of seconds (0..86400)");
  assert_false(parse(&a, err, sizeof(err), "status", "--controller", NULL));
  assert_string_equal(err, "--controller needs an address");
  assert_false(parse(&a, err, sizeof(err), "pause", "99999999999999999999999", NULL));
  assert_string_equal(err, "session id '99999999999999999999999' is out of range");
  assert_false(parse(&a, err, sizeof(err), "pause", "s", "--json", NULL));
  assert_string_equal(err, "--json is for status");
  assert_false(parse(&a, err, sizeof(err), "status", "--wait", NULL));
  assert_string_equal(err, "--wait and --timeout are for drain");
  assert_false(parse(&a, err, sizeof(err), "status", "extra", NULL));
  assert_string_equal(err, "unexpected argument 'extra' (see --help)");
}

static void test_status_json_escapes_peer_text(void** state) {
  Causeway__V1__AdminStatus st = CAUSEWAY__V1__ADMIN_STATUS__INIT;
  st.controller = (char*)"ctl";
  Causeway__V1__AdminSession s = CAUSEWAY__V1__ADMIN_SESSION__INIT;
  s.session_id = 7;
  s.name = (char*)"a \"quoted\"\nname";
  s.client_host = (char*)"h";
  int32_t devs[] = {0, 1, 2, 5};
  s.devices = devs;
  s.n_devices = 4;
  Causeway__V1__AdminSession* sp = &s;
  st.sessions = &sp;
  st.n_sessions = 1;
  char* text = cw_cli_status_json(&st);
  assert_non_null(text);
  assert_non_null(strstr(text, "\"name\": \"a \\\"quoted\\\"\\nname\""));
  assert_non_null(strstr(text, "\"id\": 7"));
  free(text);
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  cw_cli_print_status(f, &st);
  fclose(f);
  assert_non_null(strstr(buf, "0-2,5"));  // device runs
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_escapes_strings),
      cmocka_unit_test(test_json_replaces_invalid_utf8),
      cmocka_unit_test(test_json_nesting_and_numbers),
      cmocka_unit_test(test_json_unbalanced_fails),
      cmocka_unit_test(test_args_commands),
      cmocka_unit_test(test_args_errors),
      cmocka_unit_test(test_status_json_escapes_peer_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
