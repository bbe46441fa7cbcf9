// Every message type against both daemons, table-driven and counted: a real
// causeway-controller and a real causeway-worker (registered with it) get
// each of the 33 request types
//   - before HELLO                        -> FAILED_PRECONDITION "NAME before HELLO", closed
//   - with a payload that is no protobuf  -> INVALID_ARGUMENT "malformed causeway.v1.X payload", closed
//   - with payload_len above the limit    -> RESOURCE_EXHAUSTED "NAME payload of N bytes exceeds ...", closed
//   - truncated (half a payload, then EOF) -> closed without a word
//   - with bulk where none may be, or above the bulk limit -> INVALID_ARGUMENT / RESOURCE_EXHAUSTED, closed
//   - where it is not served              -> UNIMPLEMENTED "the D does not serve NAME", stays open
//   - from a HELLO role that may not send it -> PERMISSION_DENIED "NAME is for WHO (... role is R)", stays open
// and hand-written requests with bad meaning (HELLO roles, unknown or
// out-of-range ids of executables, sessions, workers and devices, REGISTER
// and SESSION_RESUME with impossible contents, ...), each with its exact
// answer. After every case a fresh connection does HELLO + PING (the daemon
// still serves); at the end both get SIGTERM and must exit 0 (under ASan: no
// leaks). The expected names and texts are spelled out here (docs/protocol.md's
// message table), not taken from src/protocol.
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"

enum { D_WORKER = 0, D_CONTROLLER = 1, D_COUNT };
static const char* const k_daemon[D_COUNT] = {"worker", "controller"};

static worker_t g_ctl = {.label = "controller"};
static worker_t g_wrk = {.label = "worker"};
static worker_t* const g_daemons[D_COUNT] = {&g_wrk, &g_ctl};
// From each daemon's HelloReply.
static uint32_t g_max_payload[D_COUNT];
static uint64_t g_max_bulk[D_COUNT];

// Who may send a type (docs/protocol.md, "The message table").
#define S_C 0x1u  // clients
#define S_W 0x2u  // workers
#define S_K 0x4u  // the controller
#define S_ANY (S_C | S_W | S_K)
#define R_CLIENT CAUSEWAY__V1__ROLE__ROLE_CLIENT
#define R_WORKER CAUSEWAY__V1__ROLE__ROLE_WORKER
#define R_CONTROLLER CAUSEWAY__V1__ROLE__ROLE_CONTROLLER

typedef struct mtype_s {
  uint16_t type;
  const char* name;     // the message table's name
  const char* request;  // its request schema in proto/causeway.proto
  uint32_t senders;     // S_*
  bool bulk;            // its requests carry bulk bytes
  bool served[D_COUNT];
} mtype_t;

static const mtype_t k_types[] = {
    {1, "HELLO", "HelloRequest", S_ANY, false, {true, true}},
    {2, "PING", "Ping", S_ANY, false, {true, true}},
    {3, "INVENTORY", "InventoryRequest", S_ANY, false, {true, false}},
    {4, "COMPILE", "CompileRequest", S_C | S_K, false, {true, true}},
    {5, "SERIALIZE", "SerializeRequest", S_C | S_K, false, {true, false}},
    {6, "LOAD", "LoadRequest", S_C | S_K, true, {true, false}},
    {7, "UPLOAD", "UploadRequest", S_C, true, {true, false}},
    {8, "LAUNCH", "LaunchRequest", S_C | S_K, false, {true, true}},
    {9, "DOWNLOAD", "DownloadRequest", S_C, false, {true, false}},
    {10, "COPY", "CopyRequest", S_C, false, {true, false}},
    {11, "SEND", "SendRequest", S_C, false, {true, false}},
    {12, "PUT", "PutRequest", S_W, true, {true, false}},
    {13, "EXPECT", "ExpectRequest", S_C, false, {true, false}},
    {14, "DELETE", "DeleteRequest", S_C | S_K, false, {true, true}},
    {15, "STATS", "StatsRequest", S_ANY, false, {true, true}},
    {16, "AWAIT", "AwaitRequest", S_C, false, {true, false}},
    {17, "LAUNCH_GO", "LaunchGoRequest", S_K, false, {true, false}},
    {32, "REGISTER", "RegisterRequest", S_W, false, {false, true}},
    {33, "OPEN_SESSION", "OpenSessionRequest", S_C, false, {false, true}},
    {34, "EXE_INFO", "ExeInfoRequest", S_C | S_K, false, {true, true}},
    {35, "EVENT", "ClusterEvent", S_K, false, {false, false}},
    {36, "SESSION_RESUME", "SessionResumeRequest", S_C, false, {false, true}},
    {45, "HEALTH_HEARTBEAT", "HealthHeartbeat", S_W, false, {false, true}},
    {46, "HEALTH_REJOIN", "HealthRejoinRequest", S_C, false, {false, true}},
    {50, "ADMIN_STATUS", "AdminStatusRequest", S_C, false, {false, true}},
    {51, "ADMIN_PAUSE", "AdminSessionRequest", S_C, false, {false, true}},
    {52, "ADMIN_RESUME", "AdminSessionRequest", S_C, false, {false, true}},
    {53, "ADMIN_DRAIN", "AdminDrainRequest", S_C, false, {false, true}},
    {54, "ADMIN_UNDRAIN", "AdminDrainRequest", S_C, false, {false, true}},
    {55, "ADMIN_HOLD", "AdminHoldRequest", S_K, false, {true, false}},
    {56, "ADMIN_WORKER_DRAIN", "AdminWorkerDrainRequest", S_K, false, {true, false}},
    {65, "TRACE_START", "TraceStartRequest", S_C, false, {true, false}},
    {66, "TRACE_FETCH", "TraceFetchRequest", S_C, false, {true, false}},
};
#define NUM_TYPES (sizeof k_types / sizeof k_types[0])

// --- Counting ------------------------------------------------------------------------

enum {
  K_BEFORE_HELLO,
  K_MALFORMED,
  K_OVERSIZE,
  K_TRUNCATED,
  K_BULK,
  K_UNSERVED,
  K_WRONG_ROLE,
  K_HELLO,
  K_IDS,
  K_CONTENTS,
  K_COUNT
};
static const char* const k_kind[K_COUNT] = {
    "before HELLO", "malformed payload", "oversize payload", "truncated payload",
    "bad bulk length", "type not served", "wrong HELLO role", "bad HELLO",
    "unknown/out-of-range ids", "impossible contents"};
static int g_count[K_COUNT][D_COUNT];
static uint64_t g_rid = 1000;

static void counted(int kind, int d) { g_count[kind][d]++; }

// --- One case ------------------------------------------------------------------------

enum { A_CLOSED, A_OPEN };  // after an error reply

// Connects to daemon `d`, and when `role` (not 0) does HELLO in that role.
static int open_as(int d, int role) {
  int fd = conn_open(g_daemons[d]);
  if (role) {
    Causeway__V1__HelloReply* r = NULL;
    hello_as(fd, NULL, (Causeway__V1__Role)role, 0, &r);
    g_max_payload[d] = r->max_payload;
    g_max_bulk[d] = r->max_bulk;
    causeway__v1__hello_reply__free_unpacked(r, NULL);
  }
  return fd;
}

// Expects an ERROR reply to (type, rid) with `code` and a message containing
// `text` (case-sensitive), then the connection closed (A_CLOSED) or still
// answering PING (A_OPEN).
static void expect_answer(int fd, const char* what, uint16_t type, uint64_t rid, uint32_t code,
                          const char* text, int after) {
  got_error_t e;
  const uint32_t codes[] = {code, 0};
  expect_error_codes(fd, what, rid, codes, "", &e);
  if (!strstr(e.message, text)) fail_msg("%s: \"%s\" lacks \"%s\"", what, e.message, text);
  if (e.type != type) fail_msg("%s: the ERROR reply has type %u, want %u", what, e.type, type);
  if (after == A_CLOSED) {
    expect_closed(fd, what);
  } else {
    ping(fd, ++g_rid);
  }
}

// A frame of `type` with `payload` (NULL: empty) and `bulk_len` declared, of
// which `sent` (zero) bytes are sent, as `role` (0: before HELLO), answered
// by `code`/`text`.
static void case_frame_bulk(int kind, int d, const char* what, int role, uint16_t type,
                            const ProtobufCMessage* payload, uint64_t bulk_len, size_t sent,
                            uint32_t code, const char* text, int after) {
  int fd = open_as(d, role);
  packed_t p = {NULL, 0};
  if (payload) p = pack(payload);
  uint64_t rid = ++g_rid;
  hdr_t h = hdr_of(type, rid, (uint32_t)p.len, bulk_len);
  uint8_t* bulk = calloc(1, sent + 1);
  send_raw(fd, &h, p.data, p.len, bulk, sent);  // the daemon may close before reading all
  free(bulk);
  free(p.data);
  expect_answer(fd, what, type, rid, code, text, after);
  close(fd);
  daemon_assert_serving(g_daemons[d], NULL);
  counted(kind, d);
}

// case_frame_bulk without bulk bytes sent.
static void case_frame(int kind, int d, const char* what, int role, uint16_t type,
                       const ProtobufCMessage* payload, uint64_t bulk_len, uint32_t code,
                       const char* text, int after) {
  case_frame_bulk(kind, d, what, role, type, payload, bulk_len, 0, code, text, after);
}

// --- The matrix ----------------------------------------------------------------------

static const char* senders_text(uint32_t s) {
  switch (s) {
    case S_C: return "clients";
    case S_W: return "workers";
    case S_K: return "the controller";
    case S_C | S_K: return "clients or the controller";
    default: return "?";
  }
}

static const char* role_name(int role) {
  return role == R_CLIENT ? "CLIENT" : role == R_WORKER ? "WORKER" : "CONTROLLER";
}

// A role daemon `d` accepts in HELLO that may not send `t`; 0 when none.
static int wrong_role(int d, const mtype_t* t) {
  static const int roles[] = {R_CLIENT, R_WORKER, R_CONTROLLER};
  static const uint32_t bits[] = {S_C, S_W, S_K};
  for (int i = 0; i < (d == D_CONTROLLER ? 2 : 3); ++i) {
    if (!(t->senders & bits[i])) return roles[i];
  }
  return 0;
}

static void test_before_hello(void** state) {
  (void)state;
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 1; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      char what[96], text[96];
      snprintf(what, sizeof what, "%s before HELLO (%s)", t->name, k_daemon[d]);
      snprintf(text, sizeof text, "%s before HELLO", t->name);
      case_frame(K_BEFORE_HELLO, d, what, 0, t->type, NULL, 0, C_FAILED_PRECONDITION, text,
                 A_CLOSED);
    }
  }
}

static void test_malformed_payload(void** state) {
  (void)state;
  // Field 1, length-delimited, 127 bytes long, of which 2 follow: no
  // message decodes from it, whatever field 1 is.
  static const uint8_t junk[] = {0x0a, 0x7f, 0x01, 0x02};
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      char what[96], text[96];
      snprintf(what, sizeof what, "%s malformed (%s)", t->name, k_daemon[d]);
      snprintf(text, sizeof text, "malformed causeway.v1.%s payload (4 bytes)", t->request);
      int fd = open_as(d, t->type == T_HELLO ? 0 : R_CLIENT);
      uint64_t rid = ++g_rid;
      hdr_t h = hdr_of(t->type, rid, sizeof junk, 0);
      send_raw(fd, &h, junk, sizeof junk, NULL, 0);
      expect_answer(fd, what, t->type, rid, C_INVALID_ARGUMENT, text, A_CLOSED);
      close(fd);
      daemon_assert_serving(g_daemons[d], NULL);
      counted(K_MALFORMED, d);
    }
  }
}

static void test_oversize_payload(void** state) {
  (void)state;
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      bool hello = t->type == T_HELLO;
      int fd = open_as(d, hello ? 0 : R_CLIENT);
      uint32_t limit = hello ? PREHELLO_MAX_PAYLOAD : g_max_payload[d];
      char what[96], text[128];
      snprintf(what, sizeof what, "%s payload_len %u (%s)", t->name, limit + 1, k_daemon[d]);
      snprintf(text, sizeof text, "%s payload of %u bytes exceeds the limit of %u bytes",
               t->name, limit + 1, limit);
      uint64_t rid = ++g_rid;
      hdr_t h = hdr_of(t->type, rid, limit + 1, 0);
      send_raw(fd, &h, NULL, 0, NULL, 0);
      expect_answer(fd, what, t->type, rid, C_RESOURCE_EXHAUSTED, text, A_CLOSED);
      close(fd);
      daemon_assert_serving(g_daemons[d], NULL);
      counted(K_OVERSIZE, d);
    }
  }
}

static void test_truncated_payload(void** state) {
  (void)state;
  uint8_t part[10];
  memset(part, 0x08, sizeof part);
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      char what[96];
      snprintf(what, sizeof what, "%s 10 of 64 payload bytes, EOF (%s)", t->name, k_daemon[d]);
      int fd = open_as(d, t->type == T_HELLO ? 0 : R_CLIENT);
      hdr_t h = hdr_of(t->type, ++g_rid, 64, 0);
      send_raw(fd, &h, part, sizeof part, NULL, 0);
      shutdown(fd, SHUT_WR);
      expect_closed(fd, what);
      fprintf(stderr, "[hostile]   %-46s -> closed\n", what);
      close(fd);
      daemon_assert_serving(g_daemons[d], NULL);
      counted(K_TRUNCATED, d);
    }
  }
}

static void test_bad_bulk_length(void** state) {
  (void)state;
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      bool hello = t->type == T_HELLO;
      char what[96], text[128];
      if (t->bulk) {
        // Above the limit the daemon's HelloReply announced.
        uint64_t limit = g_max_bulk[d];
        snprintf(what, sizeof what, "%s bulk_len %" PRIu64 " (%s)", t->name, limit + 1,
                 k_daemon[d]);
        snprintf(text, sizeof text, "%s bulk of %" PRIu64 " bytes exceeds the limit of %" PRIu64
                 " bytes", t->name, limit + 1, limit);
        case_frame(K_BULK, d, what, R_CLIENT, t->type, NULL, limit + 1, C_RESOURCE_EXHAUSTED,
                   text, A_CLOSED);
      } else {
        snprintf(what, sizeof what, "%s with 8 bulk bytes (%s)", t->name, k_daemon[d]);
        snprintf(text, sizeof text, "%s frames carry no bulk bytes (got 8)", t->name);
        case_frame(K_BULK, d, what, hello ? 0 : R_CLIENT, t->type, NULL, 8, C_INVALID_ARGUMENT,
                   text, A_CLOSED);
      }
    }
  }
}

// A request of `t` that passes every check before the message table's
// rules: empty, except UPLOAD and PUT, whose bulk length (none) is checked
// against their array first (f32[0]).
static const ProtobufCMessage* plain_request(const mtype_t* t) {
  static int64_t dims[1] = {0};
  static Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  static Causeway__V1__PutRequest put = CAUSEWAY__V1__PUT_REQUEST__INIT;
  up.dtype = put.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  up.dims = put.dims = dims;
  up.n_dims = put.n_dims = 1;
  if (t->type == T_UPLOAD) return &up.base;
  if (t->type == T_PUT) return &put.base;
  return NULL;
}

// PUT's bulk is the array's extent (UPLOAD's: hostile_requests_test).
static void test_put_bulk_mismatch(void** state) {
  (void)state;
  static int64_t dims[1] = {4};
  Causeway__V1__PutRequest m = CAUSEWAY__V1__PUT_REQUEST__INIT;
  m.dst_id = 5;
  m.dst_session = 1;
  m.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  m.dims = dims;
  m.n_dims = 1;
  case_frame_bulk(K_BULK, D_WORKER, "PUT f32[4] with 12 bulk bytes (worker)", R_WORKER, T_PUT,
                  &m.base, 12, 12, C_INVALID_ARGUMENT,
                  "PUT bulk of 12 bytes differs from the array's 16 bytes", A_CLOSED);
}

static void test_not_served(void** state) {
  (void)state;
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      if (t->served[d]) continue;
      char what[96], text[128];
      snprintf(what, sizeof what, "%s where not served (%s)", t->name, k_daemon[d]);
      snprintf(text, sizeof text, "the %s does not serve %s%s", k_daemon[d], t->name,
               d == D_CONTROLLER ? "; send it to a worker" : "");
      case_frame(K_UNSERVED, d, what, R_CLIENT, t->type, plain_request(t), 0, C_UNIMPLEMENTED,
                 text, A_OPEN);
    }
  }
}

static void test_wrong_role(void** state) {
  (void)state;
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < NUM_TYPES; ++i) {
      const mtype_t* t = &k_types[i];
      int role = wrong_role(d, t);
      if (!t->served[d] || !role || t->type == T_HELLO) continue;
      char what[96], text[128];
      snprintf(what, sizeof what, "%s from a %s (%s)", t->name, role_name(role), k_daemon[d]);
      snprintf(text, sizeof text, "%s is for %s (this connection's HELLO role is %s)", t->name,
               senders_text(t->senders), role_name(role));
      case_frame(K_WRONG_ROLE, d, what, role, t->type, plain_request(t), 0, C_PERMISSION_DENIED,
                 text, A_OPEN);
    }
  }
}

// --- Hand-written cases ----------------------------------------------------------------

static void test_bad_hello(void** state) {
  (void)state;
  static const struct {
    int d;
    int role;
    const char* text;
  } cases[] = {
      {D_CONTROLLER, R_CONTROLLER,
       "the controller accepts HELLO role CLIENT or WORKER, not 3"},
      {D_CONTROLLER, 0, "the controller accepts HELLO role CLIENT or WORKER, not 0"},
      {D_WORKER, 0, "the worker accepts HELLO role CLIENT or WORKER or CONTROLLER, not 0"},
      {D_WORKER, 99, "the worker accepts HELLO role CLIENT or WORKER or CONTROLLER, not 99"},
      {D_CONTROLLER, -5, "the controller accepts HELLO role CLIENT or WORKER, not -5"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = m.max_version = 1;
    m.role = (Causeway__V1__Role)cases[i].role;
    char what[96];
    snprintf(what, sizeof what, "HELLO role %d (%s)", cases[i].role, k_daemon[cases[i].d]);
    case_frame(K_HELLO, cases[i].d, what, 0, T_HELLO, &m.base, 0, C_PERMISSION_DENIED,
               cases[i].text, A_CLOSED);
  }
  // A version range above what either speaks, and an inverted one.
  for (int d = 0; d < D_COUNT; ++d) {
    Causeway__V1__HelloRequest m = CAUSEWAY__V1__HELLO_REQUEST__INIT;
    m.min_version = 2;
    m.max_version = 0xFFFFFFFFu;
    m.role = R_CLIENT;
    char what[96], text[128];
    snprintf(what, sizeof what, "HELLO versions 2..4294967295 (%s)", k_daemon[d]);
    snprintf(text, sizeof text, "protocol versions 2..4294967295 not supported (%s speaks 1..1)",
             k_daemon[d]);
    case_frame(K_HELLO, d, what, 0, T_HELLO, &m.base, 0, C_UNIMPLEMENTED, text, A_CLOSED);
  }
}

// The answer to a request that is well framed, from an allowed role, but
// means nothing the daemon holds.
typedef struct semantic_s {
  int kind;
  int d;
  const char* what;
  int role;
  uint16_t type;
  ProtobufCMessage* (*make)(void);  // the request (static storage)
  uint32_t code;                    // 0: no reply at all (a notice), then PING
  const char* text;
  uint32_t bulk;  // bulk bytes sent with it
} semantic_t;

static ProtobufCMessage* m_exe_info_unknown(void) {
  static Causeway__V1__ExeInfoRequest m = CAUSEWAY__V1__EXE_INFO_REQUEST__INIT;
  m.exe_id = 987654321;
  return &m.base;
}

static ProtobufCMessage* m_launch_unknown(void) {
  static Causeway__V1__LaunchRequest m = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  m.exe_id = 987654322;
  m.launch_id = 1;
  return &m.base;
}

static ProtobufCMessage* m_delete_unknown(void) {
  static uint64_t ids[2] = {987654323, 987654324};
  static Causeway__V1__DeleteRequest m = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  m.ids = ids;
  m.n_ids = 2;
  return &m.base;
}

static ProtobufCMessage* m_compile_exe0(void) {
  static Causeway__V1__CompileRequest m = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  m.format = "mlir";
  return &m.base;
}

static ProtobufCMessage* m_open_too_many(void) {
  static Causeway__V1__OpenSessionRequest m = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  m.num_devices = 4000000000u;
  return &m.base;
}

static ProtobufCMessage* m_open_min_workers(void) {
  static Causeway__V1__OpenSessionRequest m = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  m.min_workers = 4000000000u;
  return &m.base;
}

static ProtobufCMessage* m_resume_none(void) {
  static Causeway__V1__SessionResumeRequest m = CAUSEWAY__V1__SESSION_RESUME_REQUEST__INIT;
  return &m.base;
}

static Causeway__V1__ResumeDevice g_rdev[2] = {CAUSEWAY__V1__RESUME_DEVICE__INIT,
                                               CAUSEWAY__V1__RESUME_DEVICE__INIT};
static Causeway__V1__ResumeDevice* g_rdevs[2] = {&g_rdev[0], &g_rdev[1]};

static ProtobufCMessage* m_resume_twice(void) {
  static Causeway__V1__SessionResumeRequest m = CAUSEWAY__V1__SESSION_RESUME_REQUEST__INIT;
  for (int i = 0; i < 2; ++i) {
    g_rdev[i].id = 7;
    g_rdev[i].worker_name = "w";
    g_rdev[i].local_id = i;
  }
  m.devices = g_rdevs;
  m.n_devices = 2;
  return &m.base;
}

static ProtobufCMessage* m_resume_range(void) {
  static Causeway__V1__SessionResumeRequest m = CAUSEWAY__V1__SESSION_RESUME_REQUEST__INIT;
  g_rdev[0].id = -1;
  g_rdev[0].worker_name = "w";
  g_rdev[0].local_id = -1;
  m.devices = g_rdevs;
  m.n_devices = 1;
  return &m.base;
}

static ProtobufCMessage* m_resume_name(void) {
  static Causeway__V1__SessionResumeRequest m = CAUSEWAY__V1__SESSION_RESUME_REQUEST__INIT;
  g_rdev[0].id = 0;
  g_rdev[0].worker_name = "bad\nname";
  g_rdev[0].local_id = 0;
  m.devices = g_rdevs;
  m.n_devices = 1;
  return &m.base;
}

static ProtobufCMessage* m_rejoin_unknown(void) {
  static Causeway__V1__HealthRejoinRequest m = CAUSEWAY__V1__HEALTH_REJOIN_REQUEST__INIT;
  m.worker_index = 9999;
  return &m.base;
}

static ProtobufCMessage* m_heartbeat(void) {
  static Causeway__V1__HealthHeartbeat m = CAUSEWAY__V1__HEALTH_HEARTBEAT__INIT;
  m.sequence = 1;
  return &m.base;
}

static ProtobufCMessage* m_pause_unknown(void) {
  static Causeway__V1__AdminSessionRequest m = CAUSEWAY__V1__ADMIN_SESSION_REQUEST__INIT;
  m.session_id = 424242424242ull;
  return &m.base;
}

static ProtobufCMessage* m_resume_unknown_name(void) {
  static Causeway__V1__AdminSessionRequest m = CAUSEWAY__V1__ADMIN_SESSION_REQUEST__INIT;
  m.name = "no-such-session";
  return &m.base;
}

static ProtobufCMessage* m_drain_unknown(void) {
  static Causeway__V1__AdminDrainRequest m = CAUSEWAY__V1__ADMIN_DRAIN_REQUEST__INIT;
  m.worker = "no-such-worker";
  return &m.base;
}

// A REGISTER from a fake worker: `name`, `address` and `devices` devices
// (with the platform unless `no_platform`).
static ProtobufCMessage* m_register(const char* name, const char* address, size_t devices,
                                    bool no_platform) {
  static Causeway__V1__Device dev[2] = {CAUSEWAY__V1__DEVICE__INIT, CAUSEWAY__V1__DEVICE__INIT};
  static Causeway__V1__Device* devs[2] = {&dev[0], &dev[1]};
  static Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
  static Causeway__V1__RegisterRequest m = CAUSEWAY__V1__REGISTER_REQUEST__INIT;
  for (int i = 0; i < 2; ++i) {
    dev[i].local_id = i;
    dev[i].id = i;
    dev[i].kind = "cpu";
  }
  inv.worker_name = (char*)name;
  inv.platform_name = no_platform ? NULL : "cpu";
  inv.platform_version = no_platform ? NULL : "hostile";
  inv.devices = devs;
  inv.n_devices = devices;
  m.worker_name = (char*)name;
  m.address = (char*)address;
  m.inventory = &inv;
  return &m.base;
}

static ProtobufCMessage* m_register_empty_name(void) {
  return m_register("", "127.0.0.1:1", 1, false);
}
static ProtobufCMessage* m_register_bad_name(void) {
  return m_register("evil\x01name", "127.0.0.1:1", 1, false);
}
static ProtobufCMessage* m_register_no_address(void) {
  return m_register("fake", "", 1, false);
}
static ProtobufCMessage* m_register_no_devices(void) {
  return m_register("fake", "127.0.0.1:1", 0, false);
}
static ProtobufCMessage* m_register_no_platform(void) {
  return m_register("fake", "127.0.0.1:1", 1, true);
}

static ProtobufCMessage* m_copy_device_99(void) {
  static Causeway__V1__CopyRequest m = CAUSEWAY__V1__COPY_REQUEST__INIT;
  m.src_id = 987654325;
  m.dst_id = 987654326;
  m.dst_device = 99;
  return &m.base;
}

static ProtobufCMessage* m_launch_go_unknown(void) {
  static Causeway__V1__LaunchGoRequest m = CAUSEWAY__V1__LAUNCH_GO_REQUEST__INIT;
  m.sched_stamp = 987654327;
  m.go = true;
  return &m.base;
}

static ProtobufCMessage* m_trace_fetch(void) {
  static Causeway__V1__TraceFetchRequest m = CAUSEWAY__V1__TRACE_FETCH_REQUEST__INIT;
  m.max_events = 0xFFFFFFFFu;
  return &m.base;
}

static ProtobufCMessage* m_put_no_session(void) {
  static int64_t dims[1] = {4};
  static Causeway__V1__PutRequest m = CAUSEWAY__V1__PUT_REQUEST__INIT;
  m.dst_id = 5;
  m.dst_session = 0xBADBADBADull;
  m.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  m.dims = dims;
  m.n_dims = 1;
  return &m.base;
}

static ProtobufCMessage* m_upload_rank65(void) {
  static int64_t dims[65];
  static Causeway__V1__UploadRequest m = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  for (int i = 0; i < 65; ++i) dims[i] = 1;
  m.buffer_id = 987654328;
  m.dtype = CAUSEWAY__V1__DTYPE__DTYPE_F32;
  m.dims = dims;
  m.n_dims = 65;
  return &m.base;
}

static ProtobufCMessage* m_await_zero(void) {
  static Causeway__V1__AwaitRequest m = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  return &m.base;
}

static const semantic_t k_semantic[] = {
    // Controller: ids it does not hold.
    {K_IDS, D_CONTROLLER, "EXE_INFO of an unknown executable", R_CLIENT, 34, m_exe_info_unknown,
     C_NOT_FOUND, "executable 987654321 not found", 0},
    {K_IDS, D_CONTROLLER, "LAUNCH of an unknown executable", R_CLIENT, 8, m_launch_unknown,
     C_NOT_FOUND, "executable 987654322 not found", 0},
    {K_IDS, D_CONTROLLER, "DELETE of two unknown executables", R_CLIENT, 14, m_delete_unknown,
     C_NOT_FOUND, "2 unknown executable ids not deleted (first 987654323)", 0},
    {K_IDS, D_CONTROLLER, "HEALTH_REJOIN of worker 9999", R_CLIENT, 46, m_rejoin_unknown,
     C_INVALID_ARGUMENT, "HEALTH_REJOIN: no worker 9999", 0},
    {K_IDS, D_CONTROLLER, "ADMIN_PAUSE of an unknown session id", R_CLIENT, 51, m_pause_unknown,
     C_NOT_FOUND, "session 424242424242 not found; open sessions: none", 0},
    {K_IDS, D_CONTROLLER, "ADMIN_RESUME of an unknown session name", R_CLIENT, 52,
     m_resume_unknown_name, C_NOT_FOUND, "session 'no-such-session' not found; open sessions: none", 0},
    {K_IDS, D_CONTROLLER, "ADMIN_DRAIN of an unknown worker", R_CLIENT, 53, m_drain_unknown,
     C_NOT_FOUND, "worker 'no-such-worker' not found; workers: hostile-w0", 0},
    {K_IDS, D_CONTROLLER, "ADMIN_UNDRAIN of an unknown worker", R_CLIENT, 54, m_drain_unknown,
     C_NOT_FOUND, "worker 'no-such-worker' not found; workers: hostile-w0", 0},
    {K_IDS, D_CONTROLLER, "COMPILE with exe_id 0", R_CLIENT, 4, m_compile_exe0,
     C_INVALID_ARGUMENT, "COMPILE needs a non-zero exe_id", 0},
    // Controller: contents that cannot be.
    {K_CONTENTS, D_CONTROLLER, "OPEN_SESSION for 4e9 devices", R_CLIENT, 33, m_open_too_many,
     C_INVALID_ARGUMENT, "OPEN_SESSION asks for 4000000000 devices: too many", 0},
    {K_CONTENTS, D_CONTROLLER, "OPEN_SESSION waiting for 4e9 workers", R_CLIENT, 33,
     m_open_min_workers, C_INVALID_ARGUMENT, "min_workers 4000000000 is above", 0},
    {K_CONTENTS, D_CONTROLLER, "SESSION_RESUME with no devices", R_CLIENT, 36, m_resume_none,
     C_INVALID_ARGUMENT, "SESSION_RESUME lists 0 devices (1..", 0},
    {K_CONTENTS, D_CONTROLLER, "SESSION_RESUME naming a device twice", R_CLIENT, 36,
     m_resume_twice, C_INVALID_ARGUMENT, "SESSION_RESUME names device 7 twice", 0},
    {K_CONTENTS, D_CONTROLLER, "SESSION_RESUME with device id -1", R_CLIENT, 36, m_resume_range,
     C_INVALID_ARGUMENT, "SESSION_RESUME device 0: id -1, local id -1 out of range", 0},
    {K_CONTENTS, D_CONTROLLER, "SESSION_RESUME with a worker name with LF", R_CLIENT, 36,
     m_resume_name, C_INVALID_ARGUMENT, "SESSION_RESUME device 0: worker_name must be", 0},
    {K_CONTENTS, D_CONTROLLER, "REGISTER with an empty name", R_WORKER, 32, m_register_empty_name,
     C_INVALID_ARGUMENT, "worker_name must be 1..", 0},
    {K_CONTENTS, D_CONTROLLER, "REGISTER with a control character in the name", R_WORKER, 32,
     m_register_bad_name, C_INVALID_ARGUMENT, "worker_name must be 1..", 0},
    {K_CONTENTS, D_CONTROLLER, "REGISTER with no address", R_WORKER, 32, m_register_no_address,
     C_INVALID_ARGUMENT, "address must be 1..", 0},
    {K_CONTENTS, D_CONTROLLER, "REGISTER with no devices", R_WORKER, 32, m_register_no_devices,
     C_INVALID_ARGUMENT, "inventory must list 1..", 0},
    {K_CONTENTS, D_CONTROLLER, "REGISTER without the platform", R_WORKER, 32,
     m_register_no_platform, C_INVALID_ARGUMENT, "inventory lacks the platform", 0},
    {K_CONTENTS, D_CONTROLLER, "HEALTH_HEARTBEAT of a worker never registered", R_WORKER, 45,
     m_heartbeat, 0, "(ignored)", 0},
    // Worker: ids it does not hold, devices it does not have.
    {K_IDS, D_WORKER, "EXE_INFO of an unknown executable", R_CLIENT, 34, m_exe_info_unknown,
     C_NOT_FOUND, "executable 987654321 not found", 0},
    {K_IDS, D_WORKER, "COPY to device 99", R_CLIENT, 10, m_copy_device_99, C_INVALID_ARGUMENT,
     "COPY: device 99 is not one of this worker's 2 devices", 0},
    {K_IDS, D_WORKER, "LAUNCH_GO of an unknown stamp", R_CONTROLLER, 17, m_launch_go_unknown,
     C_FAILED_PRECONDITION, "no prepared launch with stamp 987654327 on this connection", 0},
    {K_IDS, D_WORKER, "PUT into an unknown session", R_WORKER, 12, m_put_no_session,
     C_NOT_FOUND, "PUT 5: session 50159344557 not found", 16},
    {K_IDS, D_WORKER, "AWAIT of id 0", R_CLIENT, 16, m_await_zero, C_NOT_FOUND, "buffer 0 not found", 0},
    {K_CONTENTS, D_WORKER, "TRACE_FETCH before TRACE_START", R_CLIENT, 66, m_trace_fetch,
     C_FAILED_PRECONDITION, "TRACE_FETCH before TRACE_START in this session", 0},
};

// An array the bulk length cannot be checked against is a violation.
static void test_upload_rank65(void** state) {
  (void)state;
  case_frame(K_CONTENTS, D_WORKER, "UPLOAD of rank 65 (worker)", R_CLIENT, T_UPLOAD,
             m_upload_rank65(), 0, C_INVALID_ARGUMENT, "UPLOAD: rank 65 exceeds the maximum of 64",
             A_CLOSED);
}

static void test_bad_meaning(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof k_semantic / sizeof k_semantic[0]; ++i) {
    const semantic_t* c = &k_semantic[i];
    char what[128];
    snprintf(what, sizeof what, "%s (%s)", c->what, k_daemon[c->d]);
    if (c->code) {
      case_frame_bulk(c->kind, c->d, what, c->role, c->type, c->make(), c->bulk, c->bulk, c->code,
                      c->text, A_OPEN);
      continue;
    }
    // A notice nobody answers: the next frame is the PING's reply.
    int fd = open_as(c->d, c->role);
    assert_true(send_msg(fd, c->type, ++g_rid, c->make(), NULL, 0));
    ping(fd, ++g_rid);
    fprintf(stderr, "[hostile]   %-46s -> ignored, PING answered\n", what);
    close(fd);
    daemon_assert_serving(g_daemons[c->d], NULL);
    counted(c->kind, c->d);
  }
}

// Request ids are the requester's: 0 and 2^64-1 are echoed like any other.
static void test_extreme_request_ids(void** state) {
  (void)state;
  static const uint64_t rids[] = {0, UINT64_MAX};
  for (int d = 0; d < D_COUNT; ++d) {
    for (size_t i = 0; i < 2; ++i) {
      int fd = open_as(d, R_CLIENT);
      Causeway__V1__Ping m = CAUSEWAY__V1__PING__INIT;
      assert_true(send_msg(fd, T_PING, rids[i], &m.base, NULL, 0));
      frame_t f;
      char what[96];
      snprintf(what, sizeof what, "PING with request id %" PRIu64 " (%s)", rids[i], k_daemon[d]);
      expect_reply(fd, what, T_PING, rids[i], &f);
      frame_free(&f);
      fprintf(stderr, "[hostile]   %-46s -> echoed\n", what);
      ping(fd, ++g_rid);
      close(fd);
      daemon_assert_serving(g_daemons[d], NULL);
      counted(K_IDS, d);
    }
  }
}

static void test_count(void** state) {
  (void)state;
  int per[D_COUNT];
  hostile_print_counts("cases by kind:", k_kind, K_COUNT, g_count, per);
  // Every type was sent before HELLO, malformed, oversize and truncated to both.
  for (int d = 0; d < D_COUNT; ++d) {
    assert_int_equal(g_count[K_BEFORE_HELLO][d], NUM_TYPES - 1);
    assert_int_equal(g_count[K_MALFORMED][d], NUM_TYPES);
    assert_int_equal(g_count[K_TRUNCATED][d], NUM_TYPES);
  }
}

static int group_setup(void** state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  const char* ctl_args[] = {"--listen", "127.0.0.1:0", NULL};
  daemon_spec_t ctl = {.bin = hostile_controller_bin(), .args = ctl_args,
                       .listen_prefix = "causeway-controller listening on "};
  if (!daemon_start(&g_ctl, &ctl)) return -1;
  const char* plugin = hostile_plugin();
  if (!plugin) return -1;
  const char* wrk_args[] = {"--plugin", plugin, "--devices", "2", "--listen", "127.0.0.1:0",
                            "--name", "hostile-w0", "--controller", g_ctl.addr, NULL};
  daemon_spec_t wrk = {.bin = hostile_worker_bin(), .args = wrk_args,
                       .listen_prefix = "causeway-worker listening on "};
  if (!daemon_start(&g_wrk, &wrk)) return -1;
  // The limits each daemon announces in its HelloReply.
  for (int d = 0; d < D_COUNT; ++d) close(open_as(d, R_CLIENT));
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  daemons_kill(g_daemons, D_COUNT);
  return 0;
}

static void test_sigterm_clean_exit(void** state) {
  (void)state;
  daemons_sigterm_clean_exit(g_daemons, D_COUNT);  // the worker first, then the controller
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_before_hello),
      cmocka_unit_test(test_malformed_payload),
      cmocka_unit_test(test_oversize_payload),
      cmocka_unit_test(test_truncated_payload),
      cmocka_unit_test(test_bad_bulk_length),
      cmocka_unit_test(test_put_bulk_mismatch),
      cmocka_unit_test(test_not_served),
      cmocka_unit_test(test_wrong_role),
      cmocka_unit_test(test_bad_hello),
      cmocka_unit_test(test_bad_meaning),
      cmocka_unit_test(test_upload_rank65),
      cmocka_unit_test(test_extreme_request_ids),
      cmocka_unit_test(test_count),
      // Last: SIGTERM both daemons and require exit 0 (ASan: no leaks).
      cmocka_unit_test(test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_types", tests, group_setup, group_teardown);
}
