#include "cw_grpc.h"

#include <nghttp2/nghttp2.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_log.h"

#define CW__MAX_MD 64

typedef struct cw__md_s {
  char* key;
  uint8_t* value;
  size_t len;
  bool valid;  // false: a "-bin" value that is not base64
} cw__md_t;

struct cw_grpc_call_s {
  int refs;  // the stream's (until it closes) and owners'
  cw_grpc_session_t* s;  // NULL once the stream is gone
  cw_grpc_call_t* prev;
  cw_grpc_call_t* next;
  int32_t stream_id;
  char* path;
  bool post;
  bool grpc_type;
  bool started;  // on_start accepted it
  bool finished;
  bool headers_sent;
  size_t md_bytes;
  size_t n_md;
  cw__md_t md[CW__MAX_MD];
  cw_grpc_deframer_t in;
  uint8_t* out;
  size_t out_off;
  size_t out_len;
  size_t out_cap;
  size_t reserved;        // bytes of a message cw_grpc_call_reserve made room for
  bool reserving;         // a reservation waits for cw_grpc_call_commit
  size_t writable_below;  // nonzero: on_writable wanted below this many queued bytes
  bool hold_flow;         // credit for arriving bytes waits for cw_grpc_call_consume
  size_t held;            // bytes received and not yet credited back
  int code;
  char message[1024];  // percent-encoded
  void* user;
};

struct cw_grpc_session_s {
  nghttp2_session* h2;
  const cw_grpc_handlers_t* h;
  void* user;
  const cw_grpc_options_t* o;
  cw_grpc_call_t* calls;  // every call whose stream is open
  size_t started;
  bool releasing;       // cw_grpc_session_release: calls close, no one reset them
  size_t want_writable;  // calls with writable_below set (take_output scans only then)
  double reset_tokens;  // resets the client may still send now
  struct timespec reset_at;  // when the tokens were last refilled
  uint8_t* out;  // frames gathered by take_output (kept, about out_batch at most)
  size_t out_len;
  size_t out_cap;
  size_t out_hint;  // the capacity the next batch starts with (that of the last)
  bool broken;  // nghttp2 failed to send: nothing more goes out
};

void cw_grpc_options_default(cw_grpc_options_t* o) {
  *o = (cw_grpc_options_t){.max_message = 64u << 20,
                           .max_queued = 256u << 20,
                           .max_streams = 100,
                           .window = 16u << 20,
                           .reset_burst = 1000,
                           .resets_per_second = 33,
                           .out_batch = 1u << 20};
}

// --- Framing -------------------------------------------------------------------

void cw_grpc_deframer_initialize(cw_grpc_deframer_t* d, size_t max_message) {
  *d = (cw_grpc_deframer_t){.max = max_message};
}

void cw_grpc_deframer_deinitialize(cw_grpc_deframer_t* d) {
  free(d->buf);
  d->buf = NULL;
  d->cap = 0;
}

cw_status_t cw_grpc_deframer_feed(cw_grpc_deframer_t* d, const uint8_t* data, size_t len,
                                  cw_grpc_message_fn fn, void* user) {
  while (len > 0 || (d->head_len == 5 && d->len == d->want)) {
    if (d->head_len < 5) {
      size_t n = 5 - d->head_len < len ? 5 - d->head_len : len;
      memcpy(d->head + d->head_len, data, n);
      d->head_len += n;
      data += n;
      len -= n;
      if (d->head_len < 5) return cw_ok_status();
      if (d->head[0] != 0) {
        return cw_make_status(CW_UNIMPLEMENTED,
                              d->head[0] == 1 ? "compressed messages are not accepted"
                                              : "bad message flag %u", d->head[0]);
      }
      d->want = (size_t)d->head[1] << 24 | (size_t)d->head[2] << 16 | (size_t)d->head[3] << 8 |
                d->head[4];
      d->len = 0;
      if (d->want > d->max) {
        return cw_make_status(CW_RESOURCE_EXHAUSTED, "message of %zu bytes is over the limit %zu",
                              d->want, d->max);
      }
    }
    size_t n = d->want - d->len < len ? d->want - d->len : len;
    if (d->len + n > d->cap) {
      // Grown as bytes arrive, at most to the declared length.
      size_t cap = d->cap ? d->cap : 4096;
      while (cap < d->len + n) cap *= 2;
      if (cap > d->want) cap = d->want;
      uint8_t* b = realloc(d->buf, cap);
      if (!b) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a message");
      d->buf = b;
      d->cap = cap;
    }
    if (n) memcpy(d->buf + d->len, data, n);
    d->len += n;
    data += n;
    len -= n;
    if (d->len < d->want) return cw_ok_status();
    d->head_len = 0;
    fn(user, d->buf ? d->buf : (const uint8_t*)"", d->want);
    // Large buffers are not kept between messages.
    if (d->cap > (1u << 20)) cw_grpc_deframer_deinitialize(d);
  }
  return cw_ok_status();
}

void cw_grpc_percent_encode(const char* text, char* out, size_t cap) {
  size_t o = 0;
  for (const unsigned char* p = (const unsigned char*)text; *p && o + 4 < cap; p++) {
    if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
      out[o++] = (char)*p;
    } else {
      o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p);
    }
  }
  if (cap) out[o < cap ? o : cap - 1] = '\0';
}

// --- Calls ---------------------------------------------------------------------

static bool cw__b64_decode(const uint8_t* in, size_t len, uint8_t** out, size_t* out_len) {
  *out = NULL;
  *out_len = 0;
  while (len && in[len - 1] == '=') len--;
  if (len % 4 == 1) return false;
  size_t padded = (len + 3) / 4 * 4;
  uint8_t* tmp = malloc(padded + 1);
  uint8_t* dec = malloc(padded / 4 * 3 + 1);
  bool ok = tmp && dec;
  if (ok) {
    memcpy(tmp, in, len);
    memset(tmp + len, '=', padded - len);
    int n = padded ? EVP_DecodeBlock(dec, tmp, (int)padded) : 0;
    ok = n >= 0;
    if (ok) *out_len = (size_t)n - (padded - len);
  }
  free(tmp);
  if (!ok) {
    free(dec);
    return false;
  }
  *out = dec;
  return true;
}

static void cw__call_free(cw_grpc_call_t* c) {
  for (size_t i = 0; i < c->n_md; i++) {
    free(c->md[i].key);
    free(c->md[i].value);
  }
  cw_grpc_deframer_deinitialize(&c->in);
  free(c->out);
  free(c->path);
  free(c);
}

void cw_grpc_call_retain(cw_grpc_call_t* c) { c->refs++; }

void cw_grpc_call_release(cw_grpc_call_t* c) {
  if (c && --c->refs == 0) cw__call_free(c);
}

const char* cw_grpc_call_method(const cw_grpc_call_t* c) { return c->path ? c->path : ""; }
void cw_grpc_call_set_user(cw_grpc_call_t* c, void* user) { c->user = user; }
void* cw_grpc_call_user(const cw_grpc_call_t* c) { return c->user; }
bool cw_grpc_call_open(const cw_grpc_call_t* c) { return c->s != NULL; }

size_t cw_grpc_call_queued(const cw_grpc_call_t* c) { return c->out_len - c->out_off; }

bool cw_grpc_call_finished(const cw_grpc_call_t* c) { return c->finished; }

void cw_grpc_call_hold_flow(cw_grpc_call_t* c) { c->hold_flow = true; }

void cw_grpc_call_consume(cw_grpc_call_t* c, size_t n) {
  if (!c->s) return;
  if (n > c->held) n = c->held;
  c->held -= n;
  if (n) nghttp2_session_consume_stream(c->s->h2, c->stream_id, n);
}

void cw_grpc_call_when_writable(cw_grpc_call_t* c, size_t below) {
  if (!c->s) return;
  if (!c->writable_below) c->s->want_writable++;
  c->writable_below = below ? below : 1;
}

bool cw_grpc_call_metadata(const cw_grpc_call_t* c, const char* key, const uint8_t** out_data,
                           size_t* out_len) {
  for (size_t i = 0; i < c->n_md; i++) {
    if (strcmp(c->md[i].key, key) || !c->md[i].valid) continue;
    *out_data = c->md[i].value ? c->md[i].value : (const uint8_t*)"";
    *out_len = c->md[i].len;
    return true;
  }
  return false;
}

// The stream is gone: the call leaves its session.
static void cw__client_reset(cw_grpc_session_t* s);

static void cw__call_detach(cw_grpc_session_t* s, cw_grpc_call_t* c) {
  if (c->prev) c->prev->next = c->next; else s->calls = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->writable_below) s->want_writable--;
  c->writable_below = 0;
  c->s = NULL;
  // A started call that ends before the server finished it was reset, by
  // the client or by nghttp2 for the client's fault: either spends a token.
  if (c->started && !c->finished && !s->releasing) cw__client_reset(s);
  if (c->started) {
    s->started--;
    if (s->h->on_close) s->h->on_close(s->user, c);
  }
  cw_grpc_call_release(c);
}

static nghttp2_nv cw__nv(const char* name, const char* value) {
  return (nghttp2_nv){(uint8_t*)name, (uint8_t*)value, strlen(name), strlen(value),
                      NGHTTP2_NV_FLAG_NONE};
}

static void cw__trailer_fields(const cw_grpc_call_t* c, char code[16], nghttp2_nv nv[2]) {
  snprintf(code, 16, "%d", c->code);
  nv[0] = cw__nv("grpc-status", code);
  nv[1] = cw__nv("grpc-message", c->message);
}

// The largest DATA frame either way, where the peer allows it: a client's
// cost per frame is paid per 16 KiB otherwise (HTTP/2's default), and a
// frame this size holds another stream's answer back by little.
#define CW__MAX_FRAME (256u << 10)

// Frames nghttp2 hands over are gathered up to options->out_batch (a
// larger frame still goes alone), so the transport writes many in one go.
// 1: room for `n` more bytes; 0: the batch is full; -1: out of memory.
static int cw__out_room(cw_grpc_session_t* s, size_t n) {
  if (s->out_len > 0 && s->out_len + n > s->o->out_batch) return 0;
  if (s->out_len + n <= s->out_cap) return 1;
  // Grown as used, from what the last batch needed: a connection of small
  // calls has small batches, a streaming one is not regrown per batch.
  size_t cap = s->out_cap ? s->out_cap : s->out_hint > 4096 ? s->out_hint : 4096;
  while (cap < s->out_len + n) cap *= 2;
  uint8_t* b = realloc(s->out, cap);
  if (!b) return -1;
  s->out = b;
  s->out_cap = cap;
  return 1;
}

static ssize_t cw__send_frame(nghttp2_session* h2, const uint8_t* data, size_t len, int flags,
                              void* user) {
  cw_grpc_session_t* s = user;
  int room = cw__out_room(s, len);
  if (room <= 0) return room ? NGHTTP2_ERR_CALLBACK_FAILURE : NGHTTP2_ERR_WOULDBLOCK;
  memcpy(s->out + s->out_len, data, len);
  s->out_len += len;
  return (ssize_t)len;
}

// A DATA frame's payload goes from the call's queue straight into the
// batch (cw__read_data only sizes it): one copy fewer than nghttp2's own.
static int cw__send_data(nghttp2_session* h2, nghttp2_frame* frame, const uint8_t* framehd,
                         size_t length, nghttp2_data_source* source, void* user) {
  cw_grpc_session_t* s = user;
  cw_grpc_call_t* c = source->ptr;
  int room = cw__out_room(s, 9 + length);
  if (room <= 0) return room ? NGHTTP2_ERR_CALLBACK_FAILURE : NGHTTP2_ERR_WOULDBLOCK;
  memcpy(s->out + s->out_len, framehd, 9);
  // No padding: no padding callback is set. The queue may have been
  // compacted since cw__read_data, but its unsent bytes still lead it.
  memcpy(s->out + s->out_len + 9, c->out + c->out_off, length);
  s->out_len += 9 + length;
  c->out_off += length;
  // Drained: back to the front, unless a reservation is written past it.
  if (c->out_off == c->out_len && !c->reserving) c->out_off = c->out_len = 0;
  return 0;
}

static ssize_t cw__read_length(nghttp2_session* h2, uint8_t frame_type, int32_t stream_id,
                               int32_t session_window, int32_t stream_window,
                               uint32_t max_frame, void* user) {
  ssize_t n = session_window < stream_window ? session_window : stream_window;
  if ((uint32_t)n > max_frame) n = max_frame;
  return n > (ssize_t)CW__MAX_FRAME ? (ssize_t)CW__MAX_FRAME : n;
}

static ssize_t cw__read_data(nghttp2_session* h2, int32_t stream_id, uint8_t* buf, size_t length,
                             uint32_t* flags, nghttp2_data_source* source, void* user) {
  cw_grpc_call_t* c = source->ptr;
  size_t unsent = c->out_len - c->out_off;
  size_t n = unsent < length ? unsent : length;
  if (n == 0 && !c->finished) return NGHTTP2_ERR_DEFERRED;
  *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == unsent && c->finished) {
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    char code[16];
    nghttp2_nv nv[2];
    cw__trailer_fields(c, code, nv);
    if (nghttp2_submit_trailer(h2, stream_id, nv, 2) != 0) {
      nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_INTERNAL_ERROR);
    }
  }
  return (ssize_t)n;
}

static int cw__send_headers(cw_grpc_call_t* c, bool trailers_only) {
  c->headers_sent = true;
  nghttp2_nv nv[4] = {cw__nv(":status", "200"), cw__nv("content-type", "application/grpc")};
  char code[16];
  if (trailers_only) {
    cw__trailer_fields(c, code, nv + 2);
    return nghttp2_submit_response(c->s->h2, c->stream_id, nv, 4, NULL);
  }
  nghttp2_data_provider p = {.source.ptr = c, .read_callback = cw__read_data};
  return nghttp2_submit_response(c->s->h2, c->stream_id, nv, 2, &p);
}

// grpc-status is the status's code as it is: gRPC's codes (doc/statuscodes.md)
// are the same numbers.
_Static_assert(CW_CANCELLED == 1 && CW_UNKNOWN == 2 && CW_INVALID_ARGUMENT == 3 &&
                   CW_DEADLINE_EXCEEDED == 4 && CW_NOT_FOUND == 5 && CW_ALREADY_EXISTS == 6 &&
                   CW_PERMISSION_DENIED == 7 && CW_RESOURCE_EXHAUSTED == 8 &&
                   CW_FAILED_PRECONDITION == 9 && CW_ABORTED == 10 && CW_OUT_OF_RANGE == 11 &&
                   CW_UNIMPLEMENTED == 12 && CW_INTERNAL == 13 && CW_UNAVAILABLE == 14 &&
                   CW_DATA_LOSS == 15 && CW_UNAUTHENTICATED == 16,
               "cw_status_code_t is gRPC's status code");

static void cw__set_final(cw_grpc_call_t* c, cw_status_t st) {
  c->code = (int)cw_status_code(st);
  cw_grpc_percent_encode(st ? cw_status_message(st) : "", c->message, sizeof(c->message));
  cw_status_free(st);
}

void cw_grpc_call_finish(cw_grpc_call_t* c, cw_status_t status) {
  if (!c->s || c->finished) {
    cw_status_free(status);
    return;
  }
  c->finished = true;
  cw__set_final(c, status);
  int rc = c->headers_sent ? nghttp2_session_resume_data(c->s->h2, c->stream_id)
                           : cw__send_headers(c, c->out_len == 0);
  if (rc != 0 && rc != NGHTTP2_ERR_INVALID_ARGUMENT) {
    nghttp2_submit_rst_stream(c->s->h2, NGHTTP2_FLAG_NONE, c->stream_id, NGHTTP2_INTERNAL_ERROR);
  }
}

cw_status_t cw_grpc_call_reserve(cw_grpc_call_t* c, size_t len, uint8_t** out_data) {
  *out_data = NULL;
  if (!c->s) return cw_make_status(CW_CANCELLED, "the call is gone");
  if (c->finished) return cw_make_status(CW_FAILED_PRECONDITION, "the call has finished");
  if (len > c->s->o->max_message || len > UINT32_MAX) {
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED,
                                    "response of %zu bytes is over the limit %zu", len,
                                    c->s->o->max_message);
    cw_grpc_call_finish(c, cw_status_clone(st));
    return st;
  }
  size_t unsent = c->out_len - c->out_off;
  size_t need = unsent + 5 + len;
  if (need > c->s->o->max_queued) {
    cw_status_t st = cw_make_status(CW_RESOURCE_EXHAUSTED,
                                    "%zu response bytes wait for the peer (limit %zu)", need,
                                    c->s->o->max_queued);
    cw_grpc_call_finish(c, cw_status_clone(st));
    return st;
  }
  if (c->out_off > 0 && (unsent <= c->out_off || c->out_len + 5 + len > c->out_cap)) {
    // Sent bytes go when fewer bytes move than are freed, or the buffer is
    // full: never more bytes moved in all than sent.
    memmove(c->out, c->out + c->out_off, unsent);
    c->out_len = unsent;
    c->out_off = 0;
  }
  if (need > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap : 256;
    while (cap < need) cap *= 2;
    uint8_t* b = realloc(c->out, cap);
    if (!b) {
      cw_grpc_call_finish(c, cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a response");
    }
    c->out = b;
    c->out_cap = cap;
  }
  uint8_t* p = c->out + c->out_len;
  p[0] = 0;
  p[1] = (uint8_t)(len >> 24);
  p[2] = (uint8_t)(len >> 16);
  p[3] = (uint8_t)(len >> 8);
  p[4] = (uint8_t)len;
  c->reserved = len;
  c->reserving = true;
  *out_data = p + 5;
  return cw_ok_status();
}

cw_status_t cw_grpc_call_commit(cw_grpc_call_t* c) {
  if (!c->s) return cw_make_status(CW_CANCELLED, "the call is gone");
  if (c->finished) return cw_make_status(CW_FAILED_PRECONDITION, "the call has finished");
  if (!c->reserving) return cw_make_status(CW_FAILED_PRECONDITION, "nothing was reserved");
  c->out_len += 5 + c->reserved;
  c->reserved = 0;
  c->reserving = false;
  int rc = c->headers_sent ? nghttp2_session_resume_data(c->s->h2, c->stream_id)
                           : cw__send_headers(c, false);
  if (rc != 0 && rc != NGHTTP2_ERR_INVALID_ARGUMENT) {
    return cw_make_status(CW_INTERNAL, "http/2: %s", nghttp2_strerror(rc));
  }
  return cw_ok_status();
}

cw_status_t cw_grpc_call_send(cw_grpc_call_t* c, const uint8_t* data, size_t len) {
  uint8_t* p;
  cw_status_t st = cw_grpc_call_reserve(c, len, &p);
  if (st) return st;
  if (len) memcpy(p, data, len);
  return cw_grpc_call_commit(c);
}

// --- nghttp2 callbacks --------------------------------------------------------

static int cw__on_begin_headers(nghttp2_session* h2, const nghttp2_frame* frame, void* user) {
  cw_grpc_session_t* s = user;
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  cw_grpc_call_t* c = calloc(1, sizeof(*c));
  if (!c) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  c->refs = 1;
  c->s = s;
  c->stream_id = frame->hd.stream_id;
  cw_grpc_deframer_initialize(&c->in, s->o->max_message);
  c->next = s->calls;
  if (s->calls) s->calls->prev = c;
  s->calls = c;
  nghttp2_session_set_stream_user_data(h2, c->stream_id, c);
  return 0;
}

static int cw__on_header(nghttp2_session* h2, const nghttp2_frame* frame, const uint8_t* name,
                         size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                         void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  cw_grpc_call_t* c = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
  if (!c || c->started) return 0;  // request trailers carry nothing we use
  c->md_bytes += namelen + valuelen + 32;
  if (c->md_bytes > CW_GRPC_MAX_METADATA) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (namelen == 5 && !memcmp(name, ":path", 5)) {
    free(c->path);
    c->path = strndup((const char*)value, valuelen);
    return c->path ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (namelen == 7 && !memcmp(name, ":method", 7)) {
    c->post = valuelen == 4 && !memcmp(value, "POST", 4);
    return 0;
  }
  if (namelen == 12 && !memcmp(name, "content-type", 12)) {
    c->grpc_type = valuelen >= 16 && !memcmp(value, "application/grpc", 16);
    return 0;
  }
  if (namelen && name[0] == ':') return 0;
  if (c->n_md == CW__MAX_MD) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  cw__md_t* m = &c->md[c->n_md];
  m->key = strndup((const char*)name, namelen);
  if (!m->key) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  c->n_md++;
  if (namelen > 4 && !memcmp(name + namelen - 4, "-bin", 4)) {
    m->valid = cw__b64_decode(value, valuelen, &m->value, &m->len);
  } else {
    m->value = malloc(valuelen + 1);
    if (!m->value) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(m->value, value, valuelen);
    m->value[valuelen] = 0;
    m->len = valuelen;
    m->valid = true;
  }
  return 0;
}

static void cw__on_msg(void* user, const uint8_t* data, size_t len) {
  cw_grpc_call_t* c = user;
  if (c->started && !c->finished && c->s) c->s->h->on_message(c->s->user, c, data, len);
}

static int cw__on_data(nghttp2_session* h2, uint8_t flags, int32_t stream_id, const uint8_t* data,
                       size_t len, void* user) {
  cw_grpc_call_t* c = nghttp2_session_get_stream_user_data(h2, stream_id);
  // The connection's credit goes back at once, so one stream's backlog never
  // stalls another; the stream's waits if its owner holds it.
  nghttp2_session_consume_connection(h2, len);
  if (c && c->hold_flow && c->started && !c->finished) {
    c->held += len;
  } else {
    nghttp2_session_consume_stream(h2, stream_id, len);
  }
  if (!c || !c->started || c->finished) return 0;
  cw_grpc_call_retain(c);  // a handler may end the stream
  cw_status_t st = cw_grpc_deframer_feed(&c->in, data, len, cw__on_msg, c);
  if (st) cw_grpc_call_finish(c, st);
  cw_grpc_call_release(c);
  return 0;
}

static void cw__start(cw_grpc_session_t* s, cw_grpc_call_t* c) {
  cw_status_t st = cw_ok_status();
  if (!c->post || !c->path) {
    st = cw_make_status(CW_UNIMPLEMENTED, "only gRPC POST requests are served");
  } else if (!c->grpc_type) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "content-type is not application/grpc");
  } else {
    st = s->h->on_start(s->user, c);
  }
  if (st) {
    cw_grpc_call_finish(c, st);
    return;
  }
  c->started = true;
  s->started++;
}

// A reset spends a token; none left ends the session.
static void cw__client_reset(cw_grpc_session_t* s) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double dt = (double)(now.tv_sec - s->reset_at.tv_sec) +
              (double)(now.tv_nsec - s->reset_at.tv_nsec) / 1e9;
  s->reset_at = now;
  s->reset_tokens += dt * s->o->resets_per_second;
  if (s->reset_tokens > s->o->reset_burst) s->reset_tokens = s->o->reset_burst;
  if (s->reset_tokens >= 1) {
    s->reset_tokens -= 1;
    return;
  }
  nghttp2_session_terminate_session(s->h2, NGHTTP2_ENHANCE_YOUR_CALM);
}

static int cw__on_frame(nghttp2_session* h2, const nghttp2_frame* frame, void* user) {
  cw_grpc_session_t* s = user;
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  cw_grpc_call_t* c = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
  if (!c) return 0;
  cw_grpc_call_retain(c);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    cw__start(s, c);
  }
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && c->s && c->started && !c->finished) {
    if (c->in.head_len != 0) {
      cw_grpc_call_finish(c, cw_make_status(CW_INVALID_ARGUMENT,
                                            "the request stream ended inside a message"));
    } else if (s->h->on_half_close) {
      s->h->on_half_close(s->user, c);
    }
  }
  cw_grpc_call_release(c);
  return 0;
}

static int cw__on_stream_close(nghttp2_session* h2, int32_t stream_id, uint32_t error_code,
                               void* user) {
  cw_grpc_call_t* c = nghttp2_session_get_stream_user_data(h2, stream_id);
  if (c && c->s) cw__call_detach(user, c);
  return 0;
}

// --- Sessions --------------------------------------------------------------------

cw_status_t cw_grpc_session_create(const cw_grpc_handlers_t* handlers, void* user,
                                   const cw_grpc_options_t* options,
                                   cw_grpc_session_t** out_session) {
  *out_session = NULL;
  cw_grpc_session_t* s = calloc(1, sizeof(*s));
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  s->h = handlers;
  s->user = user;
  s->o = options;
  s->reset_tokens = options->reset_burst;
  clock_gettime(CLOCK_MONOTONIC, &s->reset_at);
  nghttp2_session_callbacks* cb;
  if (nghttp2_session_callbacks_new(&cb) != 0) {
    free(s);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, cw__on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, cw__on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cw__on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cw__on_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, cw__on_stream_close);
  nghttp2_session_callbacks_set_send_callback(cb, cw__send_frame);
  nghttp2_session_callbacks_set_send_data_callback(cb, cw__send_data);
  nghttp2_session_callbacks_set_data_source_read_length_callback(cb, cw__read_length);
  nghttp2_option* opt;
  int rc = nghttp2_option_new(&opt);
  if (rc == 0) {
    // Bounded control-frame replies (PING/SETTINGS floods) and header tables.
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
    // Credit is returned by cw__on_data or, for a call that holds it, by
    // its owner once a request is handled: a busy session slows its client.
    nghttp2_option_set_no_auto_window_update(opt, 1);
    rc = nghttp2_session_server_new2(&s->h2, cb, s, opt);
    nghttp2_option_del(opt);
  }
  nghttp2_session_callbacks_del(cb);
  if (rc != 0) {
    free(s);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "http/2 session: %s", nghttp2_strerror(rc));
  }
  // A stream's window is at least twice its largest message: nghttp2
  // returns credit once half a window is consumed, so a held stream whose
  // requests are all handled always has room for one more whole message.
  uint64_t window = options->window;
  uint64_t need = 2 * ((uint64_t)options->max_message + 5);
  if (window < need) window = need;
  if (window > INT32_MAX) {
    nghttp2_session_del(s->h2);
    free(s);
    return cw_make_status(CW_INVALID_ARGUMENT, "gRPC messages of %zu bytes need a window over "
                          "2 GiB", options->max_message);
  }
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options->max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, CW_GRPC_MAX_METADATA},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, CW__MAX_FRAME},
  };
  rc = nghttp2_submit_settings(s->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0]));
  if (rc == 0) rc = nghttp2_session_set_local_window_size(s->h2, NGHTTP2_FLAG_NONE, 0,
                                                          (int32_t)options->window);
  if (rc != 0) {
    nghttp2_session_del(s->h2);
    free(s);
    return cw_make_status(CW_INTERNAL, "http/2 settings: %s", nghttp2_strerror(rc));
  }
  *out_session = s;
  return cw_ok_status();
}

void cw_grpc_session_release(cw_grpc_session_t* s) {
  if (!s) return;
  s->releasing = true;
  while (s->calls) cw__call_detach(s, s->calls);
  nghttp2_session_del(s->h2);
  free(s->out);
  free(s);
}

cw_status_t cw_grpc_session_feed(cw_grpc_session_t* s, const uint8_t* data, size_t len) {
  ssize_t rc = nghttp2_session_mem_recv(s->h2, data, len);
  if (rc < 0) return cw_make_status(CW_INVALID_ARGUMENT, "http/2: %s", nghttp2_strerror((int)rc));
  return cw_ok_status();
}

void cw_grpc_session_take_output(cw_grpc_session_t* s, uint8_t** out_data, size_t* out_len) {
  if (s->h->on_writable && s->want_writable) {
    // Outside nghttp2's callbacks, so the handler may queue and finish.
    for (cw_grpc_call_t *c = s->calls, *next; c; c = next) {
      next = c->next;
      // A call finished meanwhile is told too, so its owner can let go.
      if (!c->writable_below || (!c->finished && cw_grpc_call_queued(c) >= c->writable_below)) {
        continue;
      }
      c->writable_below = 0;
      s->want_writable--;
      cw_grpc_call_retain(c);
      s->h->on_writable(s->user, c);
      next = c->s ? c->next : NULL;  // the list may have changed under a closed call
      cw_grpc_call_release(c);
    }
  }
  s->out_len = 0;
  int rv = s->broken ? 0 : nghttp2_session_send(s->h2);
  if (rv != 0) {
    // Nothing more can go out; the connection ends when its owner sees it.
    CW_LOGW("gRPC: HTTP/2 send failed (%s): the connection is closed", nghttp2_strerror(rv));
    s->broken = true;
  }
  *out_data = NULL;
  *out_len = s->out_len;
  if (!s->out_len) return;
  // Handed over, so the transport writes it without a copy and an idle
  // connection keeps no batch. The next starts as big, or half as big
  // when this one used less than a quarter.
  *out_data = s->out;
  s->out_hint = s->out_len < s->out_cap / 4 ? s->out_cap / 2 : s->out_cap;
  s->out = NULL;
  s->out_cap = 0;
  s->out_len = 0;
}

bool cw_grpc_session_alive(const cw_grpc_session_t* s) {
  if (s->broken) return false;
  return nghttp2_session_want_read(s->h2) || nghttp2_session_want_write(s->h2);
}

void cw_grpc_session_shutdown(cw_grpc_session_t* s) {
  nghttp2_submit_shutdown_notice(s->h2);
}

void cw_grpc_session_goaway(cw_grpc_session_t* s) {
  if (s->broken) return;
  (void)nghttp2_submit_goaway(s->h2, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(s->h2), NGHTTP2_NO_ERROR,
                              NULL, 0);
}

size_t cw_grpc_session_calls(const cw_grpc_session_t* s) { return s->started; }
