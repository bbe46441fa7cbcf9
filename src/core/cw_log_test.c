// Unit tests for leveled logging: level names, the level filter of the CW_LOG
// macros, and the one line each message becomes on stderr.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_log.h"
#include "cw_test_util.h"

static void test_log_levels(void** state) {
  cw_log_level_t l;
  assert_true(cw_log_parse_level("debug", &l));
  assert_int_equal(l, CW_LOG_DEBUG);
  assert_true(cw_log_parse_level("1", &l));
  assert_int_equal(l, CW_LOG_WARN);
  assert_false(cw_log_parse_level("loud", &l));
}

// Names in any case or one digit 0..3; nothing else.
static void test_log_level_names(void** state) {
  static const char* const names[] = {"error", "WARN", "Info", "debug"};
  static const char* const digits[] = {"0", "1", "2", "3"};
  for (int i = 0; i < 4; ++i) {
    cw_log_level_t l = (cw_log_level_t)-1;
    assert_true(cw_log_parse_level(names[i], &l));
    assert_int_equal(l, i);
    l = (cw_log_level_t)-1;
    assert_true(cw_log_parse_level(digits[i], &l));
    assert_int_equal(l, i);
  }
  static const char* const bad[] = {"", "4", "-1", "01", "1 ", "warning", "err", "debug2"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    cw_log_level_t l = CW_LOG_INFO;
    assert_false(cw_log_parse_level(bad[i], &l));
    assert_int_equal(l, CW_LOG_INFO);  // untouched
  }
}

// What the CW_LOG* calls between _begin and _end wrote.
static cw_test_stderr_capture_t g_capture;
static char g_text[8192];

static void capture_begin(void) { assert_int_equal(cw_test_stderr_capture_begin(&g_capture), 0); }
static const char* capture_end(void) {
  assert_int_equal(cw_test_stderr_capture_end(&g_capture, g_text, sizeof(g_text)), 0);
  return g_text;
}

// One line per message: level tag, UTC time, program name and pid, the
// caller's file (base name) and line, the message.
static void test_log_line(void** state) {
  cw_log_initialize("logtest", CW_LOG_INFO);
  assert_int_equal(cw_log_level(), CW_LOG_INFO);
  capture_begin();
  int line = __LINE__ + 1;
  CW_LOGW("disk %s is %d%% full", "cache", 93);
  const char* text = capture_end();
  char want[256];
  snprintf(want, sizeof(want), " logtest[%d] cw_log_test.c:%d] disk cache is 93%% full\n",
           (int)getpid(), line);
  assert_int_equal(text[0], 'W');
  assert_int_equal(text[1], ' ');
  // "HH:MM:SS.mmm"
  for (int i = 2; i < 14; ++i) {
    if (i == 4 || i == 7) assert_int_equal(text[i], ':');
    else if (i == 10) assert_int_equal(text[i], '.');
    else assert_true(text[i] >= '0' && text[i] <= '9');
  }
  assert_string_equal(text + 14, want);
  cw_log_initialize(NULL, CW_LOG_WARN);  // NULL keeps the name
  capture_begin();
  CW_LOGE("x");
  assert_non_null(strstr(capture_end(), " logtest["));
}

// Messages above the level are not written (nor their arguments evaluated).
static int g_evaluated;
static int evaluated(void) { return ++g_evaluated; }

static void test_log_filter(void** state) {
  static const char tags[] = "EWID";
  for (int level = CW_LOG_ERROR; level <= CW_LOG_DEBUG; ++level) {
    cw_log_set_level((cw_log_level_t)level);
    assert_int_equal(cw_log_level(), level);
    g_evaluated = 0;
    capture_begin();
    CW_LOGE("e%d", evaluated());
    CW_LOGW("w%d", evaluated());
    CW_LOGI("i%d", evaluated());
    CW_LOGD("d%d", evaluated());
    const char* text = capture_end();
    assert_int_equal(g_evaluated, level + 1);
    int lines = 0;
    for (const char* p = text; *p; p = strchr(p, '\n') + 1) {
      assert_non_null(strchr(p, '\n'));
      assert_int_equal(*p, tags[lines]);
      lines++;
    }
    assert_int_equal(lines, level + 1);
  }
  cw_log_set_level(CW_LOG_WARN);
}

// A long message is cut, not split: still one line.
static void test_log_long_message(void** state) {
  cw_log_set_level(CW_LOG_WARN);
  char* big = malloc(5000);
  memset(big, 'x', 4999);
  big[4999] = 0;
  capture_begin();
  CW_LOGW("%s", big);
  const char* text = capture_end();
  free(big);
  const char* nl = strchr(text, '\n');
  assert_non_null(nl);
  assert_int_equal(nl[1], 0);
  const char* msg = strstr(text, "] x");
  assert_non_null(msg);
  assert_int_equal(nl - (msg + 2), 2047);  // the message buffer's size, less its NUL
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_log_levels),
      cmocka_unit_test(test_log_level_names),
      cmocka_unit_test(test_log_line),
      cmocka_unit_test(test_log_filter),
      cmocka_unit_test(test_log_long_message),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
