// Writes a session timeline as a Chrome Trace Event Format file
// ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}, for
// Perfetto or chrome://tracing). Each event is a jansson object dumped as
// soon as it is made: a trace may hold millions of events, which as one
// jansson tree would take gigabytes. Names a peer chose (workers, programs)
// come out as valid UTF-8 (cw_json).
#ifndef CW_PLUGIN_TRACE_FILE_H_
#define CW_PLUGIN_TRACE_FILE_H_

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cw_plugin_trace_file_s {
  FILE* f;      // borrowed
  bool first;   // no event written yet
  bool failed;  // out of memory or a write failed: the file is incomplete
} cw_plugin_trace_file_t;

// Starts the file on f (borrowed until _end).
void cw_plugin_trace_file_begin(cw_plugin_trace_file_t* t, FILE* f);

// A metadata event ("M"): `what` (process_name, thread_name) of pid/tid is `name`.
void cw_plugin_trace_file_meta(cw_plugin_trace_file_t* t, uint32_t pid, int tid,
                               const char* what, const char* name);

// A complete event ("X") from ts_ns for dur_ns (negative: 0), written in
// microseconds; takes args (an object, or NULL for none).
void cw_plugin_trace_file_complete(cw_plugin_trace_file_t* t, uint32_t pid, int tid,
                                   const char* cat, const char* name, int64_t ts_ns,
                                   int64_t dur_ns, json_t* args);

// Ends the event list and the file with other_data (taken). Returns false when
// anything failed on the way (the caller discards the file); f stays open.
bool cw_plugin_trace_file_end(cw_plugin_trace_file_t* t, json_t* other_data);

#endif  // CW_PLUGIN_TRACE_FILE_H_
