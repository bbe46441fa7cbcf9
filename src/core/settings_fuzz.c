// libFuzzer target: the settings table's parsers (cw_settings.c) on what a
// user or a launcher hands a program: command lines (argv split at NUL
// bytes), one environment variable, one flag set by name. Whatever the text,
// a setting that parsed holds a value inside its bounds.
//
// Input: byte 0 picks the path (argv, variable, flag), byte 1 the setting,
// the rest is the text.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cw_log.h"
#include "cw_settings.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Every int-like setting that was given lies in its bounds (an unset one
// without a default reads 0).
static void cw__check_bounds(const cw_settings_t* s) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* d = cw_settings_def((cw_setting_id_t)i);
    if (d->type == CW_SETTING_STRING) {
      if (!s->strings[i] && s->given[i]) __builtin_trap();
      continue;
    }
    if (!s->given[i] && !d->default_value[0]) continue;
    // Seconds are rounded to milliseconds, and a positive wait reads >= 1.
    int64_t slack = d->type == CW_SETTING_SECONDS ? 1 : 0;
    if (s->ints[i] < d->min - slack || s->ints[i] > d->max + slack) __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet;
  if (!quiet) {
    cw_log_set_level(CW_LOG_ERROR);
    quiet = true;
  }
  if (size < 2) return 0;
  int mode = data[0] % 3;
  const cw_setting_def_t* d = cw_settings_def((cw_setting_id_t)(data[1] % CW_SET_COUNT));
  char* text = malloc(size - 1);
  if (!text) return 0;
  memcpy(text, data + 2, size - 2);
  text[size - 2] = 0;
  cw_settings_t s;
  cw_status_t st = NULL;
  if (mode == 1) {
    // One variable of the environment, read as a program starts. putenv
    // with our own string: setenv would keep a copy of every value it was
    // given (glibc never frees them), and RSS would grow without bound.
    size_t nl = strlen(d->env);
    char* var = malloc(nl + 1 + strlen(text) + 1);
    if (!var) {
      free(text);
      return 0;
    }
    memcpy(var, d->env, nl);
    var[nl] = '=';
    strcpy(var + nl + 1, text);
    putenv(var);
    st = cw_settings_initialize(&s, CW_SCOPE_ALL);
    unsetenv(d->env);  // takes `var` out of the environment before it is freed
    free(var);
    if (!st) cw__check_bounds(&s);
    cw_settings_deinitialize(&s);
  } else {
    st = cw_settings_initialize(&s, CW_SCOPE_ALL);
    if (st) {  // the fuzzer's own environment is not the input
      cw_status_free(st);
      free(text);
      return 0;
    }
    if (mode == 0) {
      // argv: the text split at NUL bytes (a program name first).
      char* argv[33] = {"fuzz"};
      int argc = 1;
      for (char* p = text; p < text + (size - 2) && argc < 32; p += strlen(p) + 1) argv[argc++] = p;
      st = cw_settings_parse_args(&s, argc, argv);
    } else if (d->name) {
      st = cw_settings_set(&s, d->name, text, data[0] & 0x80);
    }
    cw__check_bounds(&s);  // a refused flag leaves what was there
    cw_settings_deinitialize(&s);
  }
  cw_status_free(st);
  free(text);
  return 0;
}
