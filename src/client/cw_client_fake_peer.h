// A scripted fake peer for the client library's unit tests: it listens on a
// Unix socket, answers HELLO as a worker would, then runs a script (one per
// test) on its own thread. Also the checks and recorders the tests share.
#ifndef CW_CLIENT_FAKE_PEER_H_
#define CW_CLIENT_FAKE_PEER_H_

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cw_client.h"
#include "cw_tls.h"

typedef struct fake_s fake_t;
typedef void (*fake_script_fn)(fake_t* f);

struct fake_s {
  char dir[64];
  char path[100];  // the address clients connect to
  // TLS: a server context (borrowed) makes the peer listen on TCP
  // 127.0.0.1 and speak TLS; tls_error says why a handshake failed.
  cw_tls_t* tls;
  SSL* ssl;
  char tls_error[512];
  bool plain_tcp;  // TCP without TLS
  bool beside;     // fake_start_beside: the listening socket is another's
  int listen_fd;
  int fd;
  pthread_t thread;
  fake_script_fn script;
  char failure[512];  // first failed check on the peer thread
  // HELLO behaviour.
  uint32_t hello_error_code;
  const char* hello_error_message;
  bool hello_silent;  // never answer HELLO
  _Atomic bool hello_hold;  // answer HELLO only once this is false again
  int close_first;    // accept and close this many connections first, HELLO unread
  bool close_only;    // then accept nothing more
  int serve_again;    // once a connection closes, serve this many more in turn
  uint32_t keepalive_reply_ms;  // HelloReply.keepalive_ms (0: an older peer)
  uint64_t session_key_reply, seq_next_reply;  // HelloReply.session_key, session_seq_next
  // What the client's HELLO said.
  uint32_t hello_min, hello_max;
  int hello_role;
  char hello_token[64];
  uint64_t hello_session;
  char hello_peer_name[64];
  uint32_t hello_keepalive;
  uint64_t hello_reattach_key;  // HelloRequest.reattach_session_key
  // script_echo calls this (when set: __atomic_store_n) with each request
  // it is about to ack, before the ack, on the peer's thread.
  void (*before_ack)(void* user, uint32_t type);
  void* before_ack_user;
  // Script parameters.
  const uint8_t* pattern;
  size_t pattern_len;
  int count;
};

// Records the first failed check on the peer thread (fake_join fails the test).
void fake_fail(fake_t* f, int line, const char* what);
#define FCHECK(f, cond)                 \
  do {                                  \
    if (!(cond)) {                      \
      fake_fail((f), __LINE__, #cond);  \
      return;                           \
    }                                   \
  } while (0)

// Sends all of `data` (false on error).
bool write_all(int fd, const void* data, size_t len);
// The same on the fake's connection (TLS when it speaks it).
bool fake_write_all(fake_t* f, const void* data, size_t len);

// A frame the fake peer received: header, decoded payload, bulk (malloc'd).
typedef struct frame_s {
  cw_frame_header_t h;
  ProtobufCMessage* msg;
  uint8_t* bulk;
} frame_t;

void frame_free(frame_t* fr);

// False on EOF or any error.
bool fake_read(fake_t* f, frame_t* fr);

bool fake_write(fake_t* f, uint16_t type, uint32_t flags, uint64_t id,
                const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len);

// Header and payload only: the caller writes the bulk_len bytes after.
bool fake_write_head(fake_t* f, uint16_t type, uint32_t flags, uint64_t id,
                     const ProtobufCMessage* msg, uint64_t bulk_len);

bool fake_reply(fake_t* f, const frame_t* req, const ProtobufCMessage* msg,
                const void* bulk, uint64_t bulk_len);

bool fake_ack(fake_t* f, const frame_t* req);

bool fake_error(fake_t* f, uint16_t type, uint64_t id, uint32_t code, const char* text);

// Starts the peer on a fresh socket path (f->path); `script` (may be NULL)
// runs after HELLO.
void fake_start(fake_t* f, fake_script_fn script);

// Starts `f` on the socket of `main` (started): it takes the next connection
// made there that `main` does not (a client's second connection while
// `main` serves the first). Joined before `main`.
void fake_start_beside(fake_t* f, const fake_t* main, fake_script_fn script);

// Joins the peer, removes its socket and fails the test on a failed check.
void fake_join(fake_t* f);

// A Unix socket in a fresh directory that listens and never accepts: a
// connect there succeeds and its HELLO is never answered (a stalled peer).
typedef struct fake_silent_s {
  char dir[64];
  char path[100];
  int fd;
} fake_silent_t;
void fake_silent_start(fake_silent_t* s);
// Whether anyone connected to it (without waiting), then closes and removes it.
bool fake_silent_stop(fake_silent_t* s);

// Connects with default options; fails the test on error.
cw_client_t* connect_ok(fake_t* f);

// Takes `s`: fails the test unless it has `code` and mentions `needle`
// (NULL: any message).
void expect_status(cw_status_t s, cw_status_code_t code, const char* needle);

// Takes `s`: fails the test unless it is OK.
void assert_ok(cw_status_t s);

// Callback recorder.
typedef struct rec_s {
  pthread_mutex_t mu;
  int calls;
  cw_status_code_t code;
  char message[256];
  char data[32];  // PING echo data
} rec_t;

void rec_done(void* user, cw_status_t status, const ProtobufCMessage* reply);

// Sends a PING carrying `data`.
cw_status_t send_ping(cw_client_t* c, const char* data, cw_client_done_fn done,
                      void* user, uint64_t* out_id);

// Echoes PINGs, acks everything else, serves DOWNLOAD/SERIALIZE from
// f->pattern, until EOF.
void script_echo(fake_t* f);

// A malloc'd pseudo-random byte pattern of `len` bytes.
uint8_t* make_pattern(size_t len);

#endif  // CW_CLIENT_FAKE_PEER_H_
