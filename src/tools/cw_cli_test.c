// Unit tests of the `causeway` tool's parts: argument parsing, status as a
// table and as JSON (cw_json_test covers the strings themselves).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cw_cli.h"

// A status with a row of every kind and text a peer chose (quotes, a
// newline, a control character, bytes that are not UTF-8).
typedef struct sample_s {
  Causeway__V1__AdminStatus st;
  Causeway__V1__AdminWorker w[2];
  Causeway__V1__AdminWorker* wp[2];
  Causeway__V1__AdminIsland is;
  Causeway__V1__AdminIsland* isp;
  char* is_workers[2];
  Causeway__V1__AdminSession s[2];
  Causeway__V1__AdminSession* sp[2];
  int32_t devs[4];
  Causeway__V1__AdminError e;
  Causeway__V1__AdminError* ep;
} sample_t;

static void sample_fill(sample_t* x) {
  memset(x, 0, sizeof(*x));
  x->st = (Causeway__V1__AdminStatus)CAUSEWAY__V1__ADMIN_STATUS__INIT;
  x->st.controller = (char*)"ctl-1";
  x->st.uptime_ms = 123456;
  x->st.compiles = 3;
  x->st.cache_hits = 4;
  x->st.cache_misses = 1;
  x->st.cache_bytes = 1048576;
  x->st.launches = 42;
  x->st.errors = 2;
  for (int i = 0; i < 2; ++i) {
    Causeway__V1__AdminWorker* w = &x->w[i];
    *w = (Causeway__V1__AdminWorker)CAUSEWAY__V1__ADMIN_WORKER__INIT;
    w->index = (uint32_t)i;
    w->name = i ? (char*)"w\"b\"\n" : (char*)"wa";
    w->address = (char*)"127.0.0.1:7001";
    w->state = i ? (char*)"draining" : (char*)"alive";
    w->platform = (char*)"cpu";
    w->num_devices = i ? 1 : 2;
    w->first_device = i ? 2 : 0;
    w->island = (uint32_t)i;
    w->buffers = 10u + (uint64_t)i;
    w->buffer_bytes = 4096;
    w->executables = 2;
    w->launches = 99;
    w->launches_per_sec = i ? 0.25 : 12.5;
    w->queue_depth = 1;
    w->launches_in_flight = 2;
    w->launches_held = 3;
    w->transfers_pending = 4;
    w->uploads = 5;
    w->downloads = 6;
    w->errors = 7;
    w->stats_fresh = i == 0;
    if (i == 0) {  // a budget, and a request waiting for memory
      w->memory_budget = 512ull << 20;
      w->memory_budget_source = (char*)"--memory-limit";
      w->memory_in_use = 700ull << 20;
      w->memory_in_use_max = 500ull << 20;
      w->memory_waiting = 1;
      w->memory_waiting_bytes = 100ull << 20;
      w->memory_waits = 3;
      w->memory_wait_timeouts = 1;
      w->memory_refused = 2;
    }
    x->wp[i] = w;
  }
  x->st.workers = x->wp;
  x->st.n_workers = 2;
  x->is = (Causeway__V1__AdminIsland)CAUSEWAY__V1__ADMIN_ISLAND__INIT;
  x->is.index = 0;
  x->is_workers[0] = (char*)"wa";
  x->is_workers[1] = (char*)"w\x01z";
  x->is.workers = x->is_workers;
  x->is.n_workers = 2;
  x->is.num_devices = 3;
  x->is.queued = 5;
  x->isp = &x->is;
  x->st.islands = &x->isp;
  x->st.n_islands = 1;
  x->devs[0] = 0;
  x->devs[1] = 1;
  x->devs[2] = 2;
  x->devs[3] = 5;
  for (int i = 0; i < 2; ++i) {
    Causeway__V1__AdminSession* s = &x->s[i];
    *s = (Causeway__V1__AdminSession)CAUSEWAY__V1__ADMIN_SESSION__INIT;
    s->session_id = i ? 9223372036854775807u : 7;
    s->name = i ? (char*)"" : (char*)"train \xff\xc3\xa9";
    s->client_host = (char*)"host";
    s->client_pid = 4321;
    s->devices = i ? NULL : x->devs;
    s->n_devices = i ? 0 : 4;
    s->paused = i == 1;
    s->waiting_for_devices = i == 1;
    s->launches_held = 8;
    s->buffers = 9;
    s->buffer_bytes = 10;
    s->executables = 11;
    s->clients = 1;
    s->memory_waiting = i ? 0 : 1;
    s->memory_waiting_bytes = i ? 0 : 100ull << 20;
    x->sp[i] = s;
  }
  x->st.sessions = x->sp;
  x->st.n_sessions = 2;
  x->e = (Causeway__V1__AdminError)CAUSEWAY__V1__ADMIN_ERROR__INIT;
  x->e.unix_ms = 1700000000123;
  x->e.where = (char*)"LAUNCH from w\\b";
  x->e.code = 14;
  x->e.message = (char*)"worker wb died";
  x->ep = &x->e;
  x->st.recent_errors = &x->ep;
  x->st.n_recent_errors = 1;
}

// What the hand-written writer printed for the sample before the tool moved
// to jansson (with the memory fields added since). Now the text may differ
// only in how a number or a character is spelt (2.5 for 2.500, a raw U+FFFD
// for \ufffd), never in keys, order, values or structure.
static const char kStatusBefore[] =
    "{\n"
    "  \"controller\": \"ctl-1\",\n"
    "  \"uptime_ms\": 123456,\n"
    "  \"launches_relayed\": 42,\n"
    "  \"errors\": 2,\n"
    "  \"compile_cache\": {\n"
    "    \"compiles\": 3,\n"
    "    \"hits\": 4,\n"
    "    \"misses\": 1,\n"
    "    \"bytes\": 1048576\n"
    "  },\n"
    "  \"workers\": [\n"
    "    {\n"
    "      \"index\": 0,\n"
    "      \"name\": \"wa\",\n"
    "      \"address\": \"127.0.0.1:7001\",\n"
    "      \"state\": \"alive\",\n"
    "      \"platform\": \"cpu\",\n"
    "      \"devices\": [\n"
    "        0,\n"
    "        1\n"
    "      ],\n"
    "      \"island\": 0,\n"
    "      \"buffers\": 10,\n"
    "      \"buffer_bytes\": 4096,\n"
    "      \"executables\": 2,\n"
    "      \"launches\": 99,\n"
    "      \"launches_per_sec\": 12.500,\n"
    "      \"queue_depth\": 1,\n"
    "      \"launches_in_flight\": 2,\n"
    "      \"launches_held\": 3,\n"
    "      \"transfers_pending\": 4,\n"
    "      \"uploads\": 5,\n"
    "      \"downloads\": 6,\n"
    "      \"errors\": 7,\n"
    "      \"stats_fresh\": true,\n"
    "      \"memory\": {\n"
    "        \"budget_per_device\": 536870912,\n"
    "        \"budget_source\": \"--memory-limit\",\n"
    "        \"in_use\": 734003200,\n"
    "        \"in_use_max_device\": 524288000,\n"
    "        \"waiting\": 1,\n"
    "        \"waiting_bytes\": 104857600,\n"
    "        \"waits\": 3,\n"
    "        \"wait_timeouts\": 1,\n"
    "        \"refused\": 2\n"
    "      }\n"
    "    },\n"
    "    {\n"
    "      \"index\": 1,\n"
    "      \"name\": \"w\\\"b\\\"\\n\",\n"
    "      \"address\": \"127.0.0.1:7001\",\n"
    "      \"state\": \"draining\",\n"
    "      \"platform\": \"cpu\",\n"
    "      \"devices\": [\n"
    "        2\n"
    "      ],\n"
    "      \"island\": 1,\n"
    "      \"buffers\": 11,\n"
    "      \"buffer_bytes\": 4096,\n"
    "      \"executables\": 2,\n"
    "      \"launches\": 99,\n"
    "      \"launches_per_sec\": 0.250,\n"
    "      \"queue_depth\": 1,\n"
    "      \"launches_in_flight\": 2,\n"
    "      \"launches_held\": 3,\n"
    "      \"transfers_pending\": 4,\n"
    "      \"uploads\": 5,\n"
    "      \"downloads\": 6,\n"
    "      \"errors\": 7,\n"
    "      \"stats_fresh\": false,\n"
    "      \"memory\": {\n"
    "        \"budget_per_device\": 0,\n"
    "        \"budget_source\": \"\",\n"
    "        \"in_use\": 0,\n"
    "        \"in_use_max_device\": 0,\n"
    "        \"waiting\": 0,\n"
    "        \"waiting_bytes\": 0,\n"
    "        \"waits\": 0,\n"
    "        \"wait_timeouts\": 0,\n"
    "        \"refused\": 0\n"
    "      }\n"
    "    }\n"
    "  ],\n"
    "  \"islands\": [\n"
    "    {\n"
    "      \"index\": 0,\n"
    "      \"workers\": [\n"
    "        \"wa\",\n"
    "        \"w\\u0001z\"\n"
    "      ],\n"
    "      \"num_devices\": 3,\n"
    "      \"queued\": 5\n"
    "    }\n"
    "  ],\n"
    "  \"sessions\": [\n"
    "    {\n"
    "      \"id\": 7,\n"
    "      \"name\": \"train \\ufffd\xc3\xa9\",\n"
    "      \"client_host\": \"host\",\n"
    "      \"client_pid\": 4321,\n"
    "      \"devices\": [\n"
    "        0,\n"
    "        1,\n"
    "        2,\n"
    "        5\n"
    "      ],\n"
    "      \"waiting_for_devices\": false,\n"
    "      \"paused\": false,\n"
    "      \"launches_held\": 8,\n"
    "      \"buffers\": 9,\n"
    "      \"buffer_bytes\": 10,\n"
    "      \"executables\": 11,\n"
    "      \"clients\": 1,\n"
    "      \"memory_waiting\": 1,\n"
    "      \"memory_waiting_bytes\": 104857600\n"
    "    },\n"
    "    {\n"
    "      \"id\": 9223372036854775807,\n"
    "      \"name\": \"\",\n"
    "      \"client_host\": \"host\",\n"
    "      \"client_pid\": 4321,\n"
    "      \"devices\": [],\n"
    "      \"waiting_for_devices\": true,\n"
    "      \"paused\": true,\n"
    "      \"launches_held\": 8,\n"
    "      \"buffers\": 9,\n"
    "      \"buffer_bytes\": 10,\n"
    "      \"executables\": 11,\n"
    "      \"clients\": 1,\n"
    "      \"memory_waiting\": 0,\n"
    "      \"memory_waiting_bytes\": 0\n"
    "    }\n"
    "  ],\n"
    "  \"recent_errors\": [\n"
    "    {\n"
    "      \"time\": \"2023-11-14T22:13:20.123Z\",\n"
    "      \"unix_ms\": 1700000000123,\n"
    "      \"where\": \"LAUNCH from w\\\\b\",\n"
    "      \"code\": \"UNAVAILABLE\",\n"
    "      \"message\": \"worker wb died\"\n"
    "    }\n"
    "  ]\n"
    "}\n";

// json_equal ignores the order of members; a reader of the text may not.
static void assert_same_member_order(json_t* a, json_t* b) {
  if (json_is_object(a)) {
    void* it = json_object_iter(b);
    const char* key;
    json_t* v;
    json_object_foreach(a, key, v) {
      assert_non_null(it);
      assert_string_equal(key, json_object_iter_key(it));
      assert_same_member_order(v, json_object_iter_value(it));
      it = json_object_iter_next(b, it);
    }
    assert_null(it);
  } else if (json_is_array(a)) {
    assert_int_equal(json_array_size(a), json_array_size(b));
    for (size_t i = 0; i < json_array_size(a); ++i) {
      assert_same_member_order(json_array_get(a, i), json_array_get(b, i));
    }
  }
}

// `st`'s JSON contains `json` and its text form `line`.
static void expect_status_forms(const Causeway__V1__AdminStatus* st, const char* json,
                                const char* line) {
  char* text = cw_cli_status_json(st);
  assert_non_null(text);
  if (!strstr(text, json)) fail_msg("JSON lacks '%s':\n%s", json, text);
  free(text);
  char buf[4096];
  FILE* f = fmemopen(buf, sizeof(buf), "w");
  assert_non_null(f);
  cw_cli_print_status(f, st);
  fclose(f);
  if (!strstr(buf, line)) fail_msg("text lacks '%s':\n%s", line, buf);
}

// An answer from the controller's last poll says how old its numbers are,
// right after uptime_ms; a fresh one does not (the test above).
static void test_status_json_says_the_poll_age(void** state) {
  sample_t x;
  sample_fill(&x);
  x.st.stats_age_ms = 250;
  expect_status_forms(&x.st, "\"uptime_ms\": 123456,\n  \"stats_age_ms\": 250,\n",
                      "workers' numbers from the controller's poll 250 ms ago\n");
}

// A controller that took over a running cluster says what new requests for
// devices wait for (only then: the test above has no such member).
static void test_status_says_the_resume_hold(void** state) {
  sample_t x;
  sample_fill(&x);
  x.st.resume_hold = (char*)"1 session of an earlier controller still to resume (at most 8.2 s more)";
  expect_status_forms(&x.st,
                      "\"resume_hold\": \"1 session of an earlier controller still to resume (at "
                      "most 8.2 s more)\",\n",
                      "\nafter a controller restart, requests for devices wait: 1 session of an "
                      "earlier controller still to resume (at most 8.2 s more)\n");
}

// A worker of an older build than the controller's is named under the
// workers, and its JSON says its revision (only then: the sample above has
// none such, and its JSON is as before).
static void test_status_names_an_older_worker(void** state) {
  sample_t x;
  sample_fill(&x);
  x.st.revision = 1;
  x.w[0].revision = 1;
  x.w[1].revision = 0;
  char line[256];
  snprintf(line, sizeof(line), "\nworker %s is an older build (revision 0; the controller's: 1): "
           "after a controller restart it does not report its drain or paused sessions; upgrade "
           "it (docs/deploy.md, Upgrading)\n", x.w[1].name);
  expect_status_forms(&x.st, "\"older_build_revision\": 0,\n", line);
  char* text = cw_cli_status_json(&x.st);
  assert_non_null(text);
  assert_int_equal(strstr(strstr(text, "older_build_revision") + 1, "older_build_revision"), NULL);
  free(text);
}

static void test_status_json_matches_before(void** state) {
  sample_t x;
  sample_fill(&x);
  char* text = cw_cli_status_json(&x.st);
  assert_non_null(text);
  json_error_t err;
  json_t* now = json_loads(text, 0, &err);
  json_t* before = json_loads(kStatusBefore, 0, &err);
  assert_non_null(now);
  assert_non_null(before);
  assert_true(json_equal(now, before));
  assert_same_member_order(now, before);
  json_decref(now);
  json_decref(before);
  // Still pretty-printed the same way, ending in a newline.
  assert_non_null(strstr(text, "{\n  \"controller\": \"ctl-1\",\n  \"uptime_ms\": 123456,\n"));
  assert_non_null(strstr(text, "\n  \"workers\": [\n    {\n      \"index\": 0,\n"));
  assert_non_null(strstr(text, "\"devices\": [],\n"));
  assert_non_null(strstr(text, "\"launches_per_sec\": 12.5,\n"));
  assert_non_null(strstr(text, "\"id\": 9223372036854775807,\n"));
  assert_string_equal(text + strlen(text) - 4, "]\n}\n");
  free(text);
}

// The status table of `x` (malloc'd).
static char* status_text(const sample_t* x) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  assert_non_null(f);
  cw_cli_print_status(f, &x->st);
  fclose(f);
  return text;
}

// The table: the MEMORY section (budget, in use, waiting) and the sessions'
// MEMWAIT column.
static void test_status_text_memory(void** state) {
  (void)state;
  sample_t x;
  sample_fill(&x);
  char* text = status_text(&x);
  assert_non_null(strstr(text, "\nMEMORY\nWORKER               BUDGET/DEV   IN USE       "
                                "FULLEST DEV  WAITING WAIT BYTES   TIMEOUTS  TOO BIG  BUDGET FROM\n"
                                "wa                   512 MiB      700 MiB      500 MiB            1 "
                                "100 MiB             1        2  --memory-limit\n"));
  assert_non_null(strstr(text, "none         0 bytes      0 bytes            0 0 bytes"));
  assert_non_null(strstr(text, "EXES MEMWAIT\n"));
  // The session waiting in the allocation queue, and the one holding devices.
  assert_non_null(strstr(text, " queued     yes "));
  assert_non_null(strstr(text, " 0-2,5      no  "));
  free(text);
}

// A long socket path widens the ADDRESS column instead of pushing the
// row's later columns out of line with the header.
static void test_status_text_long_address(void** state) {
  (void)state;
  sample_t x;
  sample_fill(&x);
  x.w[0].address = (char*)"/tmp/causeway-up-of-a-user-with-a-long-home/cluster/worker-0.sock";
  char* text = status_text(&x);
  const char* header = strstr(text, "\nIDX ");
  const char* row = strstr(text, "\n0    wa ");
  assert_non_null(header);
  assert_non_null(row);
  size_t col = (size_t)(strstr(header, " DEVICES ") - header);
  assert_int_equal(strncmp(row + col, " 0-1 ", 5), 0);
  assert_non_null(
      strstr(row, " /tmp/causeway-up-of-a-user-with-a-long-home/cluster/worker-0.sock "));
  free(text);
}

// Bytes a peer sent that are not UTF-8 still make JSON that parses.
static void test_status_json_repairs_invalid_utf8(void** state) {
  sample_t x;
  sample_fill(&x);
  x.w[0].name = (char*)"w\xc3";  // a name cut inside a character
  x.e.message = (char*)"\xff\xfe broke";
  char* text = cw_cli_status_json(&x.st);
  assert_non_null(text);
  json_error_t err;
  json_t* doc = json_loads(text, 0, &err);
  free(text);
  assert_non_null(doc);
  json_t* w = json_array_get(json_object_get(doc, "workers"), 0);
  assert_string_equal(json_string_value(json_object_get(w, "name")), "w\xef\xbf\xbd");
  json_t* s = json_array_get(json_object_get(doc, "sessions"), 0);
  assert_string_equal(json_string_value(json_object_get(s, "name")),
                      "train \xef\xbf\xbd\xc3\xa9");
  json_t* e = json_array_get(json_object_get(doc, "recent_errors"), 0);
  assert_string_equal(json_string_value(json_object_get(e, "message")),
                      "\xef\xbf\xbd\xef\xbf\xbd broke");
  json_decref(doc);
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
  assert_true(a.max_age_s == -1);
  assert_true(parse(&a, err, sizeof(err), "status", "--max-age", "1.5", NULL));
  assert_true(a.max_age_s == 1.5);
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
  // Options anywhere, values after '=', words after "--" are positional.
  assert_true(parse(&a, err, sizeof(err), "--wait", "drain", "--timeout=0", "--", "-w", NULL));
  assert_int_equal(a.command, CW_CLI_DRAIN);
  assert_string_equal(a.target, "-w");
  assert_true(a.wait);
  assert_true(a.timeout_s == 0);
  // Help from the middle of a bundle of short options; getopt's state is
  // reset, so the next list is parsed on its own.
  assert_false(parse(&a, err, sizeof(err), "status", "-hq", NULL));
  assert_string_equal(err, "");
  assert_int_equal(a.command, CW_CLI_HELP);
  assert_true(parse(&a, err, sizeof(err), "status", NULL));
  assert_int_equal(a.command, CW_CLI_STATUS);
  assert_false(a.json);
  assert_null(a.controller);
}

static void test_args_up_down(void** state) {
  cw_cli_args_t a;
  char err[256];
  // Defaults: 2 workers x 4 devices, Unix sockets in the default directory.
  assert_true(parse(&a, err, sizeof(err), "up", NULL));
  assert_int_equal(a.command, CW_CLI_UP);
  assert_int_equal(a.workers, 2);
  assert_int_equal(a.devices, 4);
  assert_null(a.dir);
  assert_null(a.listen);
  assert_null(a.metrics_listen);
  assert_null(a.plugin);
  assert_true(a.timeout_s == 60);
  assert_true(parse(&a, err, sizeof(err), "up", "--workers", "3", "--devices=8", "--dir", "/d",
                    "--listen", "0.0.0.0:7000", "--metrics-listen", "127.0.0.1:0", "--plugin",
                    "/p.so", "--timeout", "90", NULL));
  assert_int_equal(a.workers, 3);
  assert_int_equal(a.devices, 8);
  assert_string_equal(a.dir, "/d");
  assert_string_equal(a.listen, "0.0.0.0:7000");
  assert_string_equal(a.metrics_listen, "127.0.0.1:0");
  assert_string_equal(a.plugin, "/p.so");
  assert_true(a.timeout_s == 90);
  assert_true(parse(&a, err, sizeof(err), "--dir=/d", "down", "--grace", "0.5", NULL));
  assert_int_equal(a.command, CW_CLI_DOWN);
  assert_string_equal(a.dir, "/d");
  assert_true(a.grace_s == 0.5);
  assert_true(parse(&a, err, sizeof(err), "down", NULL));
  assert_true(a.grace_s == 10);
  // The bounds themselves are accepted.
  assert_true(parse(&a, err, sizeof(err), "up", "--workers", "64", "--devices", "4096", NULL));
  assert_true(parse(&a, err, sizeof(err), "up", "--workers", "1", "--devices", "1", NULL));
}

static void test_args_errors(void** state) {
  static const struct {
    const char* args[6];  // after argv[0], up to the first NULL
    const char* err;
  } cases[] = {
      {{NULL}, "no command given (see --help)"},
      {{"stats"}, "unknown command 'stats' (status, pause, resume, drain, undrain, up, down)"},
      {{"pause"}, "pause needs a SESSION id or name"},
      {{"drain"}, "drain needs a WORKER name"},
      {{"status", "--frobnicate"}, "unknown option '--frobnicate' (see --help)"},
      {{"drain", "w", "--timeout", "soon"},
       "--timeout 'soon' is not a number of seconds (0..86400)"},
      {{"status", "--controller"}, "--controller needs an address"},
      {{"pause", "99999999999999999999999"},
       "session id '99999999999999999999999' is out of range"},
      {{"pause", "s", "--json"}, "--json is for status"},
      {{"status", "--wait"}, "--wait is for drain"},
      {{"pause", "s", "--max-age", "1"}, "--max-age is for status"},
      {{"up", "--max-age", "1"}, "--max-age is for status"},
      {{"status", "--max-age", "soon"},
       "--max-age 'soon' is not a number of seconds (0..86400)"},
      {{"status", "--max-age"}, "--max-age needs a number of seconds"},
      {{"status", "--timeout", "1"}, "--timeout is for drain and up"},
      {{"up", "--workers", "0"}, "--workers '0' is not a number in 1..64"},
      {{"up", "--workers", "65"}, "--workers '65' is not a number in 1..64"},
      {{"up", "--devices", "4097"}, "--devices '4097' is not a number in 1..4096"},
      {{"up", "--devices", "2x"}, "--devices '2x' is not a number in 1..4096"},
      {{"up", "--listen", "/tmp/c.sock"}, "--listen '/tmp/c.sock' is not HOST:PORT"},
      {{"up", "--listen", "localhost"}, "--listen 'localhost' is not HOST:PORT"},
      {{"up", "--dir"}, "--dir needs a directory"},
      {{"up", "--timeout", "0"},
       "--timeout 0: up waits for its daemons to start (seconds, more than 0)"},
      {{"up", "--plugin="}, "--plugin needs a path"},
      {{"up", "--grace", "1"}, "--grace is not for up (see --help)"},
      {{"up", "--wait"}, "--wait is not for up (see --help)"},
      {{"up", "--controller", "h:1"}, "--controller is not for up (it uses --dir)"},
      {{"up", "extra"}, "unexpected argument 'extra' (see --help)"},
      {{"down", "--workers", "2"}, "--workers is not for down (see --help)"},
      {{"down", "--timeout", "2"}, "--timeout is not for down (see --help)"},
      {{"down", "--grace", "-1"}, "--grace '-1' is not a number of seconds (0..86400)"},
      {{"status", "--dir", "/d"}, "--dir is for up and down"},
      {{"drain", "w", "--grace", "1"}, "--grace is for down"},
      {{"pause", "s", "--workers", "1"}, "--workers is for up"},
      {{"status", "extra"}, "unexpected argument 'extra' (see --help)"},
      {{"pause", "s", "more"}, "unexpected argument 'more' (see --help)"},
      {{"status", "-x"}, "unknown option '-x' (see --help)"},
      {{"status", "--json=yes"}, "unknown option '--json=yes' (see --help)"},
      {{"--controller=", "status"}, "--controller needs an address"},
      {{"drain", "w", "--timeout"}, "--timeout needs a number of seconds"},
      {{"drain", "w", "--timeout", "-1"},
       "--timeout '-1' is not a number of seconds (0..86400)"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    char* argv[8] = {(char*)"causeway"};
    int argc = 1;
    while (argc < 7 && cases[i].args[argc - 1]) {
      argv[argc] = (char*)cases[i].args[argc - 1];
      argc++;
    }
    cw_cli_args_t a;
    char err[256];
    assert_false(cw_cli_parse(argc, argv, &a, err, sizeof(err)));
    assert_string_equal(err, cases[i].err);
  }
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
      cmocka_unit_test(test_status_json_matches_before),
      cmocka_unit_test(test_status_names_an_older_worker),
      cmocka_unit_test(test_status_json_says_the_poll_age),
      cmocka_unit_test(test_status_says_the_resume_hold),
      cmocka_unit_test(test_status_text_memory),
      cmocka_unit_test(test_status_text_long_address),
      cmocka_unit_test(test_status_json_repairs_invalid_utf8),
      cmocka_unit_test(test_args_commands),
      cmocka_unit_test(test_args_errors),
      cmocka_unit_test(test_args_up_down),
      cmocka_unit_test(test_status_json_escapes_peer_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
