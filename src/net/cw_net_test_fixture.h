// The fixture of src/net's tests (cw_net_test.c, cw_net_listen_test.c,
// cw_net_service_test.c): a real libuv loop in the test process, a server net
// listening on a Unix socket with a small test service (handler table), and
// peers that are either raw non-blocking sockets (exact bytes on the wire)
// or a second net that connects with cw_net_connect. Every wait runs the loop
// until a condition holds or a deadline passes; nothing sleeps. Failed
// expectations fail the current cmocka test.
//
// The service (name "testsvc", roles CLIENT and WORKER, token "sesame"):
// PING does what its data says ("defer": answered later by the test; "hold":
// stops reading, then echoes; "close": echoes, then closes at once;
// "violate"; "take": the handler keeps the message; anything else is
// echoed); UPLOAD with buffer_id 1 takes its bulk into the peer's `dest`
// (buffer_id 3: stops reading first, and the test names `dest` later),
// others discard it; DOWNLOAD answers buffer_id bytes of pattern() as reply
// bulk; COMPILE, REGISTER and EXE_INFO answer an empty reply; INVENTORY is
// not served; admit refuses STATS (and takes it with fx.admit_takes); HELLO
// from peer "refuse-me" is refused by on_hello; a HELLO with a session id
// attaches that session.
#ifndef CW_NET_TEST_FIXTURE_H_
#define CW_NET_TEST_FIXTURE_H_

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cw_net.h"

#define WAIT_MS 5000
#define MAX_PEERS 64
#define MAX_RAWS 64
#define MAX_CALLS 8192

#define ROLE_CLIENT CAUSEWAY__V1__ROLE__ROLE_CLIENT
#define ROLE_WORKER CAUSEWAY__V1__ROLE__ROLE_WORKER
#define ROLE_CONTROLLER CAUSEWAY__V1__ROLE__ROLE_CONTROLLER

// The server side of one accepted connection (its user data; freed by on_free).
typedef struct peer_s {
  int id;  // accept order
  uint64_t accept_turn;  // the loop turn it was accepted in
  cw_net_conn_t* conn;
  int calls;  // handler calls
  int closes;
  bool closed_on_purpose;  // on_close got NULL
  cw_status_code_t close_code;
  char close_msg[512];
  int bulk_done;
  uint64_t bulk_done_rid;
  uint8_t* dest;  // UPLOAD with buffer_id 1 (or 3): where its bulk goes
  uint64_t dest_len;
  ProtobufCMessage* kept;  // a request the handler took
  uint64_t deferred[64];   // PING "defer": answered later by the test
  int num_deferred;
  uint64_t last_turn;
  int turn_calls, max_turn_calls;  // handler calls in one loop turn
  uint64_t bytes_in, max_read;     // on_bytes: all, and the largest single read
  bool freed;                      // on_free ran (the struct stays until teardown)
} peer_t;

// A handler call, in order.
typedef struct call_s {
  int peer;
  uint16_t type;
  uint64_t rid;
  uint64_t turn;
  bool probed;  // the probe socket had bytes when the handler began
} call_t;

// An outbound connection's callbacks record here.
typedef struct out_s {
  int closes;
  int completions_at_close;  // requests completed when on_close ran
  bool closed_on_purpose;
  cw_status_code_t close_code;
  char close_msg[512];
  bool freed;
} out_t;

// A request's completion.
typedef struct reply_s {
  bool done;
  int order;  // completions before this one
  cw_status_code_t code;
  char msg[512];
  uint8_t data[64];  // PING reply data / ArrayInfo buffer_id as text
  size_t data_len;
  uint8_t* bulk;  // taken from the net
  uint64_t bulk_len;
} reply_t;

// A raw peer: a non-blocking socket and what it has read, not yet parsed.
typedef struct raw_s {
  int fd;
  uint8_t* in;
  size_t len, cap;
  bool eof, reset;
} raw_t;

// Bytes a raw peer is about to send.
typedef struct buf_s {
  uint8_t* p;
  size_t len, cap;
} buf_t;

// A frame a raw peer read.
typedef struct frame_s {
  cw_frame_header_t h;
  ProtobufCMessage* msg;
  uint8_t* bulk;
} frame_t;

// Everything a test sees, reset by fx_setup.
typedef struct net_fx_s {
  uv_loop_t loop;
  uv_timer_t tick;  // keeps UV_RUN_ONCE from blocking past a deadline
  uv_check_t check;
  uint64_t turn;  // loop iterations (counted in the check phase)
  int64_t deadline;
  char dir[64];
  char path[128];
  cw_net_options_t sopts;
  cw_net_t srv;
  bool srv_on;
  cw_net_t cli;
  bool cli_on;
  peer_t* peers[MAX_PEERS];
  int num_peers, freed;
  bool retain_accepted;
  call_t calls[MAX_CALLS];
  int num_calls;
  char log[4096];  // admit / handler / applied, in order
  bool admit_takes;
  ProtobufCMessage* admitted_kept;
  int probe_fd;    // a raw peer's socket the handlers and the hook peek at
  int probe_hits;  // handlers that found bytes there
  bool download_wrote_at_once;  // DOWNLOAD's reply had reached the probe when send returned
  int hook_calls, hook_true_left;
  int hook_first_hit;  // the first hook call that found bytes at the probe
  cw_net_conn_t* hook_conn;
  int bulk_frees;
  int completions;
  raw_t raws[MAX_RAWS];
  int num_raws;
  out_t outs[16];  // client connections' records (new_out)
  int num_outs;
  int listen_fd;  // a raw listener (outbound tests)
  char raw_path[160];
} net_fx_t;

extern net_fx_t fx;

// The bytes of test bulk: byte i of any bulk the tests send or expect.
static inline uint8_t pattern(uint64_t i) { return (uint8_t)(i * 7 + (i >> 8)); }

// --- The loop ---------------------------------------------------------------------------

// Loop runs bounded by a deadline: RUN_UNTIL(cond, ms) stops when cond holds
// or ms pass; WAIT(cond) also asserts cond.
void loop_begin(int timeout_ms);
bool loop_step(void);
void loop_end(void);
#define RUN_UNTIL(cond, ms)            \
  do {                                 \
    loop_begin(ms);                    \
    while (!(cond) && loop_step()) {   \
    }                                  \
    loop_end();                        \
  } while (0)
#define WAIT(cond)           \
  do {                       \
    RUN_UNTIL(cond, WAIT_MS); \
    assert_true(cond);       \
  } while (0)
// Runs the loop for `ms` whatever happens (to show that something does not).
#define RUN_FOR(ms) RUN_UNTIL(false, ms)

// A test of the fixture, for main's table.
#define NET_TEST(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)

// cmocka setup and teardown of every test (SIGPIPE ignored, as the daemons
// do: a write to a gone peer is an error): a fresh loop and temp dir, the
// server's options (fx.sopts: pre-HELLO payload 256, payload 4096, bulk
// 8 MiB, 64 frames per wakeup, 8 connections, HELLO within 10 s). Teardown
// closes the nets and fails unless every handle closed and every accepted
// connection's user data was freed.
int fx_setup(void** state);
int fx_teardown(void** state);

// --- Nets ---------------------------------------------------------------------------------

// Starts the server net ("srv", fx.sopts) listening on fx.path.
void start_server(void);
// The same on 127.0.0.1 (a port of its own), at fx.srv.listen_address.
void start_server_tcp(void);
// Starts the client net ("cli", fx.sopts but for `token`, borrowed).
void start_client(const char* token);
// cw_net_listen of `net` (initialized) at `address` with the test service.
cw_status_t listen_at(cw_net_t* net, const char* address);
// A zeroed client connection record owned by the fixture: connections left
// open are closed by teardown, after the test's own frame is gone.
out_t* new_out(void);
// A client net connection as a CLIENT named "srvname" with `session`; its
// callbacks record into `o` (borrowed while the connection lives).
cw_net_conn_t* connect_client(const char* address, uint64_t session, out_t* o);
// The same with a connect deadline of `timeout_ms` (connect_client: WAIT_MS).
cw_net_conn_t* connect_client_within(const char* address, uint64_t session, out_t* o,
                                     int64_t timeout_ms);
// Requests whose completion lands in `r`.
void request_ping(cw_net_conn_t* conn, const char* data, reply_t* r);
void request_download(cw_net_conn_t* conn, uint64_t size, reply_t* r);
// A request `msg` of type UPLOAD with `bulk` (bulk_free(user) when written).
void request_upload(cw_net_conn_t* conn, const ProtobufCMessage* msg, const void* bulk,
                    uint64_t len, cw_net_free_fn bulk_free, void* user, reply_t* r);
// UPLOAD of a u8[n] array of pattern bytes into the peer's dest (buffer_id 1).
void request_upload_pattern(cw_net_conn_t* conn, uint64_t n, reply_t* r);
// Waits for the last peer to have taken n pattern bytes into its dest.
void expect_pattern_uploaded(uint64_t n);
// The request completed (now) with `code` and exactly `msg`.
void expect_failed(const reply_t* r, cw_status_code_t code, const char* msg);
// The last accepted connection's server side.
peer_t* last_peer(void);

// --- Raw peers ------------------------------------------------------------------------

void buf_put(buf_t* b, const void* data, size_t n);
// A header that declares what it is told, true or not.
void buf_header(buf_t* b, uint16_t type, uint32_t flags, uint64_t rid, uint32_t plen,
                uint64_t blen);
// A frame whose header matches its payload and bulk.
void buf_frame(buf_t* b, uint16_t type, uint32_t flags, uint64_t rid, const ProtobufCMessage* m,
               const void* bulk, uint64_t blen);
void buf_ping(buf_t* b, uint64_t rid, const char* data);
void buf_hello(buf_t* b, const char* token, int role, uint64_t session, const char* name);
// An UPLOAD of a u8[n] array (buffer_id 1: into a destination) with `blen`
// bulk bytes of pattern.
void buf_upload(buf_t* b, uint64_t rid, uint64_t buffer_id, int64_t n, uint64_t blen);
void buf_free(buf_t* b);

// A raw peer of `fd` (made non-blocking); closed by teardown.
raw_t* raw_adopt(int fd);
// A connected Unix socket, -1 if nobody listens at `path`.
int unix_connect(const char* path);
// A raw peer connected to the server.
raw_t* raw_connect(void);
// A raw peer connected to the TCP server from the address `from_ip` (a
// loopback address: 127.0.0.2 is another peer than 127.0.0.1).
raw_t* raw_connect_tcp(const char* from_ip);
// EOF for the server, without the reset a close with unread replies gives.
void raw_shutdown(raw_t* r);
void raw_close(raw_t* r);
// Reads what the socket has now.
void raw_fill(raw_t* r);
// Sends everything, running the loop while the socket is full (the server
// must read for it to drain). False if the server went away.
bool raw_send(raw_t* r, const void* data, size_t len);
// raw_send, asserted; frees b.
void raw_send_buf(raw_t* r, buf_t* b);
void frame_free(frame_t* f);
// Whether `count` whole frames (or one) have been read.
bool raw_has_frames(raw_t* r, int count);
bool raw_has_frame(raw_t* r);
// The next frame, waited for.
void raw_next(raw_t* r, frame_t* f);
// The next frame is an error reply to `rid` with `code` and `needle` in its message.
void raw_expect_error(raw_t* r, uint16_t type, uint64_t rid, cw_status_code_t code,
                      const char* needle);
// The next frame is a PING reply to `rid` echoing `data`.
void raw_expect_pong(raw_t* r, uint64_t rid, const char* data);
// The next frame is a plain reply of `type` to `rid`.
void expect_reply_type(raw_t* r, uint16_t type, uint64_t rid);
// The peer closed, with nothing more sent.
void raw_expect_eof(raw_t* r);
// Nothing arrives for `ms` and the peer stays open.
void raw_expect_silence(raw_t* r, int ms);
void raw_hello_as(raw_t* r, const char* token, int role, uint64_t session, const char* name);
// HELLO as a client with `session` (0: none), answered OK.
void raw_hello(raw_t* r, uint64_t session);
void raw_ping(raw_t* r, uint64_t rid, const char* data);
// A request of `type` with an empty payload.
void send_empty(raw_t* r, uint16_t type, uint64_t rid);
// A raw peer past HELLO and its server side.
raw_t* raw_ready(uint64_t session, peer_t** out_peer);

// A Unix socket the test listens on itself (a peer the client net calls),
// at fx.raw_path.
void raw_listen(void);
raw_t* raw_accept(void);
// A client net connection to the raw listener, and the raw side it
// accepted; a PING "x" follows HELLO when `ping` is given.
raw_t* connect_raw_peer(uint64_t session, out_t* o, reply_t* ping, cw_net_conn_t** out_conn);
// Reads the HELLO a client net sent and accepts it.
void raw_answer_hello(raw_t* s);

#endif  // CW_NET_TEST_FIXTURE_H_
