// Unit tests for the trace file writer: the file parses back (json_loads) with
// the events in order, times in microseconds, and names a peer sent that are
// not UTF-8 repaired to U+FFFD.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "cw_plugin_trace_file.h"

#define FFFD "\xef\xbf\xbd"

// A trace file written into memory.
typedef struct file_s {
  char* buf;
  size_t len;
  FILE* f;
  cw_plugin_trace_file_t t;
} file_t;

static void file_begin(file_t* o) {
  o->buf = NULL;
  o->len = 0;
  o->f = open_memstream(&o->buf, &o->len);
  assert_non_null(o->f);
  cw_plugin_trace_file_begin(&o->t, o->f);
}

// Parses a finished file; the caller releases the document.
static json_t* parse(char* buf, size_t len) {
  json_error_t err;
  json_t* doc = json_loadb(buf, len, 0, &err);
  if (!doc) fail_msg("line %d: %s in:\n%.*s", err.line, err.text, (int)len, buf);
  return doc;
}

static void test_file_parses_back(void** state) {
  file_t o;
  file_begin(&o);
  // A worker name cut inside a character (as a fixed-size copy cuts it),
  // a lone continuation byte, a program name with quotes and a newline.
  cw_plugin_trace_file_meta(&o.t, 42, 0, "process_name", "causeway worker w\xc3");
  json_t* args = json_object();
  json_object_set_new(args, "peer", json_string("w2"));
  cw_plugin_trace_file_complete(&o.t, 42, 3, "execute", "jit_\"f\"\n\x80", 1500, 2000001, args);
  cw_plugin_trace_file_complete(&o.t, 42, 1001, "upload", NULL, -500, -7, NULL);
  json_t* other = json_pack("{s:s, s:[]}", "clock", "CLOCK_MONOTONIC", "workers");
  assert_true(cw_plugin_trace_file_end(&o.t, other));
  fclose(o.f);

  json_t* doc = parse(o.buf, o.len);
  assert_string_equal(json_string_value(json_object_get(doc, "displayTimeUnit")), "ms");
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(doc, "otherData"), "clock")),
      "CLOCK_MONOTONIC");
  json_t* evs = json_object_get(doc, "traceEvents");
  assert_int_equal(json_array_size(evs), 3);

  json_t* m = json_array_get(evs, 0);
  assert_string_equal(json_string_value(json_object_get(m, "ph")), "M");
  assert_int_equal(json_integer_value(json_object_get(m, "pid")), 42);
  assert_string_equal(json_string_value(json_object_get(m, "name")), "process_name");
  assert_string_equal(json_string_value(json_object_get(json_object_get(m, "args"), "name")),
                      "causeway worker w" FFFD);

  json_t* x = json_array_get(evs, 1);
  assert_string_equal(json_string_value(json_object_get(x, "ph")), "X");
  assert_int_equal(json_integer_value(json_object_get(x, "tid")), 3);
  assert_string_equal(json_string_value(json_object_get(x, "cat")), "execute");
  assert_string_equal(json_string_value(json_object_get(x, "name")), "jit_\"f\"\n" FFFD);
  assert_true(json_real_value(json_object_get(x, "ts")) == 1.5);
  assert_true(json_real_value(json_object_get(x, "dur")) == 2000.001);
  assert_string_equal(json_string_value(json_object_get(json_object_get(x, "args"), "peer")),
                      "w2");

  // No name: "" (the caller names events by their category); a time before
  // the origin stays negative, a negative duration is 0; no args, no member.
  json_t* u = json_array_get(evs, 2);
  assert_string_equal(json_string_value(json_object_get(u, "name")), "");
  assert_true(json_real_value(json_object_get(u, "ts")) == -0.5);
  assert_true(json_real_value(json_object_get(u, "dur")) == 0.0);
  assert_null(json_object_get(u, "args"));
  json_decref(doc);
  // One event per line, microseconds as written before (3 decimals at most).
  assert_non_null(strstr(o.buf, "\n{\"ph\":\"X\",\"pid\":42,\"tid\":3,\"cat\":\"execute\","));
  assert_non_null(strstr(o.buf, "\"ts\":1.5,\"dur\":2000.001,"));
  free(o.buf);
}

static void test_empty_file_parses_back(void** state) {
  file_t o;
  file_begin(&o);
  assert_true(cw_plugin_trace_file_end(&o.t, json_object()));
  fclose(o.f);
  json_t* doc = parse(o.buf, o.len);
  assert_int_equal(json_array_size(json_object_get(doc, "traceEvents")), 0);
  json_decref(doc);
  free(o.buf);
}

static void test_missing_other_data_fails(void** state) {
  file_t o;
  file_begin(&o);
  cw_plugin_trace_file_meta(&o.t, 1, 0, "thread_name", "dispatch");
  assert_false(cw_plugin_trace_file_end(&o.t, NULL));  // as when out of memory
  fclose(o.f);
  free(o.buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_file_parses_back),
      cmocka_unit_test(test_empty_file_parses_back),
      cmocka_unit_test(test_missing_other_data_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
