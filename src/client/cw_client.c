// C client of the causeway wire protocol (docs/protocol.md): connect, HELLO
// and release. The rest of the library is described in cw_client_internal.h.
#include "cw_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_client_internal.h"
#include "cw_client_socket.h"
#include "cw_client_tls.h"
#include "cw_settings.h"
#include "cw_messages.h"
#include "cw_time.h"

#define CW__DEFAULT_CONNECT_TIMEOUT_MS 10000
#define CW__HELLO_ATTEMPTS 4
#define CW__DEFAULT_MAX_PAYLOAD (16u * 1024 * 1024)
#define CW__DEFAULT_MAX_BULK (64ull * 1024 * 1024 * 1024)
// A worker may announce a larger payload limit; we never buffer more.
#define CW__MAX_PAYLOAD_CAP (1u << 30)

const char* cw_client_io_error_text(const cw_client_t* c, int err, size_t got) {
  if (err == EPROTO && c->tls && c->tls->error[0]) return c->tls->error;
  return cw_client_socket_error_text(err, got);
}

// Reads exactly `len` bytes (before the reader starts); as
// cw_client_socket_read_full.
static int cw__read_full(cw_client_t* c, void* buf, size_t len, size_t* out_got) {
  if (!c->tls) return cw_client_socket_read_full(c->fd, buf, len, out_got);
  size_t got = 0;
  int rc = 0;
  while (got < len) {
    ssize_t n = cw_client_tls_read(c->tls, (uint8_t*)buf + got, len - got);
    if (n > 0) {
      got += (size_t)n;
      continue;
    }
    if (n == 0) errno = 0;
    rc = -1;
    break;
  }
  if (out_got) *out_got = got;
  return rc;
}

// Socket timeouts, and the same for TLS's waits (0: none).
static cw_status_t cw__set_timeouts(cw_client_t* c, int recv_ms, int send_ms) {
  if (c->tls) {
    c->tls->recv_timeout_ms = recv_ms;
    c->tls->send_timeout_ms = send_ms;
  }
  CW_RETURN_IF_ERROR(cw_client_socket_set_timeouts(c->fd, recv_ms), "");
  return send_ms == recv_ms ? cw_ok_status() : cw_client_socket_set_send_timeout(c->fd, send_ms);
}

// Synchronous HELLO before the reader starts: the socket has send/receive
// timeouts of the connect timeout for the duration. *out_closed: the peer
// closed the connection before answering anything (a daemon making room
// among connections without HELLO closes them so: worth another try).
static cw_status_t cw__hello(cw_client_t* c, const cw_client_options_t* o, int timeout_ms,
                             bool* out_closed) {
  *out_closed = false;
  char name[64];
  const char* peer_name = o ? o->peer_name : NULL;
  if (!peer_name) {
    snprintf(name, sizeof(name), "cw_client:%ld", (long)getpid());
    peer_name = name;
  }
  const char* token = (o && o->token) ? o->token : cw_settings_getenv(CW_SET_TOKEN);
  Causeway__V1__HelloRequest req;
  cw_hello_request_fill(&req, (o && o->role) ? o->role : CAUSEWAY__V1__ROLE__ROLE_CLIENT, token,
                        o ? o->session_id : 0, peer_name);
  if (o) req.reattach_session_key = o->reattach_session_key;
  if (o) req.fresh_session = o->fresh_session;
  // A peer that keeps the link warm lets silence mean a lost link even while
  // it holds its reading (flow control), when a PING would go unanswered.
  if (c->liveness_ms && o && o->liveness_by_keepalive) {
    req.keepalive_ms = cw_keepalive_ask(c->liveness_ms);
  }

  uint8_t stack[512];
  uint8_t* payload = NULL;
  size_t payload_len = 0;
  CW_RETURN_IF_ERROR(
      cw_client_message_pack(&req.base, stack, sizeof(stack), &payload, &payload_len), "HELLO");
  uint64_t id = c->next_id++;
  pthread_mutex_lock(&c->write_mu);
  cw_status_t s = cw_client_frame_write(c, CW_MSG_HELLO, id, payload, payload_len, NULL, 0, 0);
  pthread_mutex_unlock(&c->write_mu);
  if (payload != stack) free(payload);
  // A write into a connection the peer already closed fails; the read below
  // says how (EOF or reset).
  cw_status_t ws = s;
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  size_t got = 0;
  if (cw__read_full(c, hdr, sizeof(hdr), &got) != 0) {
    int err = errno;
    *out_closed = got == 0 && (err == 0 || err == ECONNRESET || err == EPIPE);
    if (ws) return cw_status_annotate(ws, "HELLO");
    if (err == EAGAIN || err == EWOULDBLOCK) {
      return cw_make_status(CW_UNAVAILABLE, "no HELLO reply from %s within %d ms", c->address,
                            timeout_ms);
    }
    if (c->tls && err == EPROTO) {
      // TLS 1.3: a server that refuses this side's certificate says so
      // after the client finished, in place of the HELLO reply.
      return cw_make_status(CW_UNAVAILABLE, "TLS handshake with %s failed: %s", c->address,
                            cw_client_io_error_text(c, err, got));
    }
    return cw_make_status(CW_UNAVAILABLE, "HELLO to %s: %s", c->address,
                          cw_client_io_error_text(c, err, got));
  }
  if (ws) return cw_status_annotate(ws, "HELLO");
  cw_frame_header_t h;
  cw_status_t hs = cw_frame_header_decode(hdr, sizeof(hdr), &c->limits, &h);
  if (hs) {
    cw_status_t u = cw_make_status(CW_UNAVAILABLE, "bad HELLO reply from %s: %s", c->address,
                                   cw_status_message(hs));
    cw_status_free(hs);
    return u;
  }
  if (h.type != CW_MSG_HELLO || !(h.flags & CW_FRAME_REPLY) || h.request_id != id) {
    return cw_make_status(CW_UNAVAILABLE,
                          "bad HELLO reply from %s: got %s%s for request %llu", c->address,
                          cw_msg_type_name(h.type), (h.flags & CW_FRAME_REPLY) ? " reply" : "",
                          (unsigned long long)h.request_id);
  }
  uint8_t* buf = malloc(h.payload_len ? h.payload_len : 1);
  if (!buf) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (h.payload_len && cw__read_full(c, buf, h.payload_len, &got) != 0) {
    int err = errno;
    free(buf);
    return cw_make_status(CW_UNAVAILABLE, "HELLO to %s: %s", c->address,
                          cw_client_io_error_text(c, err, 1));
  }
  ProtobufCMessage* msg = NULL;
  s = cw_frame_decode_payload(&h, buf, &msg);
  free(buf);
  if (s) {
    cw_status_t u = cw_make_status(CW_UNAVAILABLE, "bad HELLO reply from %s: %s", c->address,
                                   cw_status_message(s));
    cw_status_free(s);
    return u;
  }
  if (h.flags & CW_FRAME_ERROR) {
    // Keep the worker's code and words: they say what to fix (token, version).
    char context[300];
    snprintf(context, sizeof(context), "%s refused HELLO", c->address);
    s = cw_error_reply_to_status((const Causeway__V1__ErrorReply*)msg, context);
    protobuf_c_message_free_unpacked(msg, NULL);
    return s;
  }
  const Causeway__V1__HelloReply* r = (const Causeway__V1__HelloReply*)msg;
  if (r->version < CW_PROTOCOL_MIN_VERSION || r->version > CW_PROTOCOL_VERSION) {
    s = cw_make_status(CW_UNIMPLEMENTED, "%s chose protocol version %u; this client speaks %u..%u",
                       c->address, r->version, CW_PROTOCOL_MIN_VERSION, CW_PROTOCOL_VERSION);
    protobuf_c_message_free_unpacked(msg, NULL);
    return s;
  }
  c->session_id = r->session_id;
  c->worker_name = strdup(r->worker_name ? r->worker_name : "");
  if (r->max_payload) {
    c->limits.max_payload =
        r->max_payload < CW__MAX_PAYLOAD_CAP ? r->max_payload : CW__MAX_PAYLOAD_CAP;
  }
  if (r->max_bulk) c->limits.max_bulk = r->max_bulk;
  c->same_host_copies = r->same_host_copies;
  c->session_key = r->session_key;
  c->session_seq_next = r->session_seq_next;
  c->peer_keepalive_ms = (int)r->keepalive_ms;
  // Watched by its keepalives only: a peer that sends none is not watched.
  if (o && o->liveness_by_keepalive && !r->keepalive_ms) c->liveness_ms = 0;
  if (c->liveness_ms && r->keepalive_ms) {
    int64_t limit = cw_keepalive_limit(c->liveness_ms, r->keepalive_ms);
    c->liveness_ms = limit > INT32_MAX ? INT32_MAX : (int)limit;
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  if (!c->worker_name) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  return cw_ok_status();
}

static atomic_uint cw__fork_gen;
static pthread_once_t cw__fork_once = PTHREAD_ONCE_INIT;

static void cw__fork_child(void) {
  atomic_fetch_add(&cw__fork_gen, 1);
  cw_client_watch_forked();
}

static void cw__fork_watch(void) { pthread_atfork(NULL, NULL, cw__fork_child); }

unsigned cw_client_fork_generation(void) {
  return atomic_load_explicit(&cw__fork_gen, memory_order_relaxed);
}

bool cw_client_forked(const cw_client_t* client) {
  return client && client->fork_gen != cw_client_fork_generation();
}

cw_status_t cw_client_fork_check(const cw_client_t* client) {
  return cw_client_forked(client) ? cw_client_forked_status(client) : cw_ok_status();
}

cw_status_t cw_client_forked_status(const cw_client_t* c) {
  return cw_make_status(CW_FAILED_PRECONDITION,
                        "the connection to %s belongs to the process that made it: a child made "
                        "by fork() cannot use it (start child processes with multiprocessing's "
                        "'spawn' or 'forkserver' method)", c->address);
}

static void cw__client_free(cw_client_t* c) {
  if (!c) return;
  cw_client_tls_free(c->tls);
  if (c->fd >= 0) close(c->fd);
  if (c->kick_fd >= 0) close(c->kick_fd);
  cw_client_table_deinitialize(&c->table);
  pthread_cond_destroy(&c->cv);
  free(c->hung);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->read_mu);
  pthread_mutex_destroy(&c->tune_mu);
  cw_status_free(c->read_err);
  pthread_mutex_destroy(&c->write_mu);
  pthread_cond_destroy(&c->write_cv);
  pthread_cond_destroy(&c->flush_cv);
  free(c->payload_buf);
  free(c->wbuf);
  free(c->wspare);
  cw_rbuf_deinitialize(&c->rb);
  free(c->dead);
  free(c->worker_name);
  free(c->address);
  free(c);
}

// Starts `body(c)` on *out_thread and sets *out_started.
static cw_status_t cw__thread_start(cw_client_t* c, const char* what, void* (*body)(void*),
                                    pthread_t* out_thread, bool* out_started) {
  int err = pthread_create(out_thread, NULL, body, c);
  if (err) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot start the %s thread: %s", what,
                          strerror(err));
  }
  *out_started = true;
  char name[16];  // the kernel's limit, with its NUL
  snprintf(name, sizeof(name), "cw-%s", what);
  pthread_setname_np(*out_thread, name);  // for top -H, perf and gdb
  return cw_ok_status();
}

// Connect and HELLO, again (a few times within the connect timeout) when
// the peer closes the connection before answering: a daemon flooded by
// connections without HELLO closes the longest-waiting ones to make room, and
// a connection it closed that way says nothing about the next one.
static cw_status_t cw__open_and_hello(cw_client_t* c, const cw_client_options_t* o,
                                      cw_tls_t* tls, int timeout_ms) {
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  int delay_ms = 10;
  for (int attempt = 1;; ++attempt) {
    int left = (int)(deadline - cw_time_now_ms());
    if (left < 1) left = 1;
    cw_status_t s = cw_client_socket_open(c->address, left, &c->fd);
    bool closed = false;
    if (!s && tls) s = cw_client_tls_handshake(tls, c->fd, c->address, left, &c->tls, &closed);
    if (!s) s = cw__set_timeouts(c, left, left);
    if (!s) s = cw__hello(c, o, left, &closed);
    if (!s || !closed || attempt >= CW__HELLO_ATTEMPTS ||
        cw_time_now_ms() + delay_ms >= deadline) {
      if (s && closed && attempt > 1) {
        s = cw_status_annotate(s, "%d attempts, each closed before HELLO was answered",
                               attempt);
      }
      return s;
    }
    cw_status_free(s);
    cw_client_tls_free(c->tls);
    c->tls = NULL;
    close(c->fd);
    c->fd = -1;
    c->next_id = 1;
    usleep((useconds_t)delay_ms * 1000);
    delay_ms *= 4;
  }
}

// The TLS context of the environment (CAUSEWAY_TLS and friends, the client
// library's scope): NULL when TLS is off there.
cw_status_t cw_client_tls_from_environment(cw_tls_t** out) {
  *out = NULL;
  if (!cw_settings_getenv(CW_SET_TLS)) return cw_ok_status();
  cw_settings_t settings;
  CW_RETURN_IF_ERROR(cw_settings_initialize(&settings, CW_SCOPE_CLIENT), "");
  cw_tls_config_t config;
  cw_tls_config_from_settings(&settings, &config);
  cw_status_t s = config.enabled ? cw_tls_create(&config, false, out) : cw_ok_status();
  cw_settings_deinitialize(&settings);
  return s;
}

cw_status_t cw_client_connect(const char* address, const cw_client_options_t* options,
                              cw_client_t** out_client) {
  if (out_client) *out_client = NULL;
  if (!address || !address[0] || !out_client) {
    return cw_make_status(CW_INVALID_ARGUMENT, "an address and out_client are required");
  }
  int timeout_ms = (options && options->connect_timeout_ms > 0) ? options->connect_timeout_ms
                                                                : CW__DEFAULT_CONNECT_TIMEOUT_MS;
  cw_client_t* c = calloc(1, sizeof(*c));
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  c->fd = -1;
  c->kick_fd = -1;
  pthread_once(&cw__fork_once, cw__fork_watch);
  c->fork_gen = cw_client_fork_generation();
  // The locks JAX's thread and the reader both take per launch (write_mu,
  // mu; read_mu with a polling waiter) are mostly held for well under a
  // microsecond: a contender spins briefly before it sleeps, so that neither
  // pays a futex wake, which costs several microseconds on a virtual
  // machine (docs/performance.md, session 28).
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
#ifdef __GLIBC__  // a glibc extension (an enum, not a macro)
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_mutex_init(&c->write_mu, &ma);
  pthread_cond_init(&c->write_cv, NULL);
  cw_time_cond_init(&c->flush_cv);
  pthread_mutex_init(&c->mu, &ma);
  pthread_mutex_init(&c->read_mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_mutex_init(&c->tune_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->next_id = 1;
  c->limits.max_payload = CW__DEFAULT_MAX_PAYLOAD;
  c->limits.max_bulk = CW__DEFAULT_MAX_BULK;
  c->address = strdup(address);
  c->batch_window_ns = (int64_t)CW_CLIENT_BATCH_WINDOW_US * 1000;
  c->batched_reply_ns = INT64_MIN / 2;  // none taken yet: holds nothing by the window
  if (options) {
    if (options->batch_window_us > 0) c->batch_window_ns = (int64_t)options->batch_window_us * 1000;
    c->on_event = options->on_event;
    c->event_user = options->event_user;
    c->on_request = options->on_request;
    c->request_user = options->request_user;
    c->on_release = options->on_release;
    c->liveness_ms = options->liveness_ms > 0 ? options->liveness_ms : 0;
  }
  atomic_store_explicit(&c->last_rx_ms, cw_time_now_ms(), memory_order_relaxed);
  cw_status_t s = c->address ? cw_client_table_initialize(&c->table)
                             : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  // TLS on TCP only: whoever reaches a Unix socket is on this host already.
  bool tcp = !strchr(address, '/');
  cw_tls_t* tls = tcp && options ? options->tls : NULL;
  cw_tls_t* env_tls = NULL;
  if (!s && tcp && !tls) {
    s = cw_client_tls_from_environment(&env_tls);
    if (s) s = cw_status_annotate(s, "connecting to %s", address);
    tls = env_tls;
  }
  if (!s) s = cw__open_and_hello(c, options, tls, timeout_ms);
  cw_tls_release(env_tls);  // the connection's SSL keeps what it needs
  // From now on reads block without limit; sends too, or for liveness_ms
  // unless the peer keeps the link warm: such a peer may hold its reading
  // (flow control) for longer, and the watchdog hears its silence instead.
  if (!s) s = cw__set_timeouts(c, 0, c->peer_keepalive_ms ? 0 : c->liveness_ms);
  if (!s) {
    s = cw__thread_start(c, "reader", cw_client_reader_main, &c->reader, &c->reader_started);
  }
  if (!s && c->liveness_ms) {
    s = cw_client_watch_add(c);
    if (s) {
      cw_client_break(c);
      pthread_join(c->reader, NULL);
      c->reader_started = false;
      // The reader may have handed on_request something: as a release does.
      if (c->on_release) c->on_release(c->request_user, c);
    }
  }
  if (s) {
    cw__client_free(c);
    return s;
  }
  *out_client = c;
  return cw_ok_status();
}

void cw_client_release(cw_client_t* client) {
  // A forked child has no threads to join, and shutting the shared socket
  // down would cut the parent's connection: it only forgets the copy.
  if (!client || cw_client_forked(client)) return;
  cw_client_t* c = client;
  cw_client_watch_remove(c);  // the watchdog no longer looks at c
  pthread_mutex_lock(&c->mu);
  c->closing = true;
  pthread_mutex_unlock(&c->mu);
  // Wakes the reader (EOF/error), which fails everything still outstanding.
  cw_client_break(c);
  pthread_mutex_lock(&c->write_mu);
  c->flusher_stop = true;
  pthread_cond_signal(&c->flush_cv);
  bool flusher = c->flusher_started;
  pthread_mutex_unlock(&c->write_mu);
  if (flusher) pthread_join(c->flusher, NULL);
  if (c->reader_started) pthread_join(c->reader, NULL);
  if (c->on_release) c->on_release(c->request_user, c);
  // Parked, unclaimed completions are freed with the table.
  cw__client_free(c);
}

void cw_client_shutdown(cw_client_t* client) {
  // The reader sees EOF and fails everything outstanding (cw_client_reader.c).
  if (client && !cw_client_forked(client)) cw_client_break(client);
}

bool cw_client_failed(const cw_client_t* client) {
  return !client || atomic_load_explicit(&client->broken, memory_order_acquire);
}

uint64_t cw_client_session_id(const cw_client_t* client) {
  return client ? client->session_id : 0;
}

bool cw_client_same_host_copies(const cw_client_t* client) {
  return client && client->same_host_copies;
}

uint64_t cw_client_session_key(const cw_client_t* client) {
  return client ? client->session_key : 0;
}

uint64_t cw_client_session_seq_next(const cw_client_t* client) {
  return client ? client->session_seq_next : 0;
}

const char* cw_client_peer_name(const cw_client_t* client) {
  return client && client->worker_name ? client->worker_name : "";
}
