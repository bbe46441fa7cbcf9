#include "cw_plugin_trace_file.h"

#include "cw_json.h"

// Microseconds with 3 decimals need at most 15 significant digits for
// traces under 11 days, so ns/1e3 prints exactly as it was.
#define CW__TRACE_DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

static void cw__put(cw_plugin_trace_file_t* t, const char* s) {
  if (fputs(s, t->f) < 0) t->failed = true;
}

// Writes one event (taken), each on its own line.
static void cw__event(cw_plugin_trace_file_t* t, json_t* ev) {
  if (!ev || t->failed) {
    t->failed = true;
    json_decref(ev);
    return;
  }
  cw__put(t, t->first ? "\n" : ",\n");
  t->first = false;
  if (json_dumpf(ev, t->f, CW__TRACE_DUMP_FLAGS)) t->failed = true;
  json_decref(ev);
}

void cw_plugin_trace_file_begin(cw_plugin_trace_file_t* t, FILE* f) {
  t->f = f;
  t->first = true;
  t->failed = false;
  cw__put(t, "{\"traceEvents\":[");
}

void cw_plugin_trace_file_meta(cw_plugin_trace_file_t* t, uint32_t pid, int tid,
                               const char* what, const char* name) {
  // "o" takes the string; json_pack fails on a NULL one.
  cw__event(t, json_pack("{s:s, s:I, s:i, s:s, s:{s:o}}", "ph", "M", "pid", (json_int_t)pid,
                         "tid", tid, "name", what, "args", "name",
                         cw_json_string_create(name)));
}

void cw_plugin_trace_file_complete(cw_plugin_trace_file_t* t, uint32_t pid, int tid,
                                   const char* cat, const char* name, int64_t ts_ns,
                                   int64_t dur_ns, json_t* args) {
  json_t* ev = json_pack("{s:s, s:I, s:i, s:o, s:o, s:f, s:f}", "ph", "X", "pid",
                         (json_int_t)pid, "tid", tid, "cat", cw_json_string_create(cat),
                         "name", cw_json_string_create(name), "ts", (double)ts_ns / 1e3,
                         "dur", (double)(dur_ns < 0 ? 0 : dur_ns) / 1e3);
  if (ev && args && json_object_set_new(ev, "args", args)) {
    json_decref(ev);
    ev = NULL;
  } else if (!ev) {
    json_decref(args);
  }
  cw__event(t, ev);
}

bool cw_plugin_trace_file_end(cw_plugin_trace_file_t* t, json_t* other_data) {
  cw__put(t, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":");
  if (!other_data || json_dumpf(other_data, t->f, CW__TRACE_DUMP_FLAGS)) t->failed = true;
  json_decref(other_data);
  cw__put(t, "}\n");
  return !t->failed && !ferror(t->f);
}
