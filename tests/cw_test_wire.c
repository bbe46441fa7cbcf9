// Raw wire helpers for tests (cw_test_wire.h).
#include "cw_test_wire.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "cw_msg.h"
#include "cw_time.h"

bool send_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    len -= (size_t)n;
  }
  return true;
}

// Reads exactly len bytes. 1: done, 0: EOF before any byte, -1: reset/error,
// -2: timeout, -3: EOF mid-way.
static int recv_exact(int fd, void* data, size_t len, long long deadline) {
  uint8_t* p = data;
  size_t have = 0;
  while (have < len) {
    long long left = deadline - cw_time_now_ms();
    if (left <= 0) return -2;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return -2;
    ssize_t n = recv(fd, p + have, len - have, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -1;
    }
    if (n == 0) return have ? -3 : 0;
    have += (size_t)n;
  }
  return 1;
}

void frame_free(frame_t* f) {
  free(f->payload);
  free(f->bulk);
  memset(f, 0, sizeof *f);
}

static uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

const char* recv_result_name(int r) {
  switch (r) {
    case 1: return "frame";
    case 0: return "EOF";
    case -1: return "reset";
    case -2: return "timeout";
    default: return "EOF mid-frame";
  }
}

int recv_frame(int fd, frame_t* f, int timeout_ms) {
  memset(f, 0, sizeof *f);
  int64_t deadline = cw_time_now_ms() + timeout_ms;
  uint8_t h[HDR];
  int r = recv_exact(fd, h, HDR, deadline);
  if (r != 1) return r;
  f->magic = (uint32_t)get_le(h, 4);
  f->version = (uint16_t)get_le(h + 4, 2);
  f->type = (uint16_t)get_le(h + 6, 2);
  f->flags = (uint32_t)get_le(h + 8, 4);
  f->payload_len = (uint32_t)get_le(h + 12, 4);
  f->request_id = get_le(h + 16, 8);
  f->bulk_len = get_le(h + 24, 8);
  if (f->magic != MAGIC || f->version != 1) {
    fail_msg("worker sent a frame with magic 0x%08x version %u", f->magic, f->version);
  }
  if (f->payload_len > MAX_PAYLOAD || f->bulk_len > (64ull << 20)) {
    fail_msg("worker sent a frame with payload_len %u bulk_len %" PRIu64, f->payload_len,
             f->bulk_len);
  }
  f->payload = malloc(f->payload_len + 1);
  if (f->payload_len) {
    r = recv_exact(fd, f->payload, f->payload_len, deadline);
    if (r != 1) return r == 0 ? -3 : r;
  }
  if (f->bulk_len) {
    f->bulk = malloc(f->bulk_len);
    r = recv_exact(fd, f->bulk, f->bulk_len, deadline);
    if (r != 1) return r == 0 ? -3 : r;
  }
  return 1;
}

hdr_t hdr_of(uint16_t type, uint64_t rid, uint32_t plen, uint64_t blen) {
  return (hdr_t){MAGIC, 1, type, 0, plen, rid, blen};
}

void hdr_encode(const hdr_t* h, uint8_t out[HDR]) {
  put_le(out, h->magic, 4);
  put_le(out + 4, h->version, 2);
  put_le(out + 6, h->type, 2);
  put_le(out + 8, h->flags, 4);
  put_le(out + 12, h->payload_len, 4);
  put_le(out + 16, h->request_id, 8);
  put_le(out + 24, h->bulk_len, 8);
}

bool send_raw(int fd, const hdr_t* h, const void* payload, size_t plen, const void* bulk,
              size_t blen) {
  size_t n = HDR + plen + blen;
  uint8_t* buf = malloc(n ? n : 1);
  hdr_encode(h, buf);
  if (plen) memcpy(buf + HDR, payload, plen);
  if (blen) memcpy(buf + HDR + plen, bulk, blen);
  bool ok = send_all(fd, buf, n);
  free(buf);
  return ok;
}

packed_t pack(const ProtobufCMessage* m) {
  packed_t p;
  p.len = protobuf_c_message_get_packed_size(m);
  p.data = malloc(p.len ? p.len : 1);
  protobuf_c_message_pack(m, p.data);
  return p;
}

bool send_msg(int fd, uint16_t type, uint64_t rid, const ProtobufCMessage* m,
              const void* bulk, size_t blen) {
  packed_t p = pack(m);
  hdr_t h = hdr_of(type, rid, (uint32_t)p.len, blen);
  bool ok = send_raw(fd, &h, p.data, p.len, bulk, blen);
  free(p.data);
  return ok;
}

const char* code_name(uint32_t c) {
  static const char* names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                "UNAUTHENTICATED"};
  return c < sizeof names / sizeof names[0] ? names[c] : "?";
}

// Case-insensitive: does `msg` contain any one of the '|'-separated
// alternatives in `keywords` ("magic|CWAY")?
static bool mentions(const char* msg, const char* keywords) {
  if (!keywords || !keywords[0]) return true;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", keywords);
  for (char* save = NULL, *k = strtok_r(buf, "|", &save); k; k = strtok_r(NULL, "|", &save)) {
    if (strcasestr(msg, k)) return true;
  }
  return false;
}

// recv_frame past a controller's EVENTs (a worker registering, say): they
// are unsolicited and may come before any answer.
static int recv_answer(int fd, frame_t* out) {
  int r = recv_frame(fd, out, IO_TIMEOUT_MS);
  while (r == 1 && out->type == CW_MSG_EVENT && !(out->flags & F_REPLY)) {
    frame_free(out);
    r = recv_frame(fd, out, IO_TIMEOUT_MS);
  }
  return r;
}

void expect_error_codes(int fd, const char* what, uint64_t rid, const uint32_t* codes,
                        const char* keywords, got_error_t* out) {
  frame_t f;
  int r = recv_answer(fd, &f);
  if (r != 1) {
    frame_free(&f);
    fail_msg("%s: expected an ERROR reply (%s), got %s", what, code_name(codes[0]),
             recv_result_name(r));
  }
  if (f.flags != (F_REPLY | F_ERROR)) {
    fail_msg("%s: expected flags REPLY|ERROR, got type %u flags 0x%x rid %" PRIu64
             " payload %u bytes",
             what, f.type, f.flags, f.request_id, f.payload_len);
  }
  if (f.bulk_len) fail_msg("%s: ERROR reply carries %" PRIu64 " bulk bytes", what, f.bulk_len);
  Causeway__V1__ErrorReply* e =
      causeway__v1__error_reply__unpack(NULL, f.payload_len, f.payload);
  if (!e) fail_msg("%s: ERROR reply payload does not decode as ErrorReply", what);
  fprintf(stderr, "[hostile]   %-46s -> %s (%u) rid %" PRIu64 " \"%s\"\n", what,
          code_name(e->code), e->code, f.request_id, e->message ? e->message : "");
  bool code_ok = false;
  for (const uint32_t* c = codes; *c; ++c) code_ok |= e->code == *c;
  if (!code_ok) {
    fail_msg("%s: expected code %s (%u), got %s (%u) \"%s\"", what, code_name(codes[0]),
             codes[0], code_name(e->code), e->code, e->message);
  }
  if (!e->message || !e->message[0]) fail_msg("%s: ERROR reply with an empty message", what);
  if (!mentions(e->message, keywords)) {
    fail_msg("%s: error message \"%s\" does not name the problem (%s)", what, e->message,
             keywords);
  }
  if (rid != ANY_RID && f.request_id != rid) {
    fail_msg("%s: reply carries request id %" PRIu64 ", want %" PRIu64, what, f.request_id,
             rid);
  }
  if (out) {
    out->code = e->code;
    snprintf(out->message, sizeof out->message, "%s", e->message);
    out->request_id = f.request_id;
    out->type = f.type;
  }
  causeway__v1__error_reply__free_unpacked(e, NULL);
  frame_free(&f);
}

void expect_error(int fd, const char* what, uint64_t rid, uint32_t code, const char* keywords) {
  const uint32_t codes[] = {code, 0};
  expect_error_codes(fd, what, rid, codes, keywords, NULL);
}

void expect_closed(int fd, const char* what) {
  frame_t f;
  int r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
  if (r == 1) {
    fprintf(stderr, "[hostile]   %s: unexpected frame type %u flags 0x%x rid %" PRIu64 "\n",
            what, f.type, f.flags, f.request_id);
    frame_free(&f);
    fail_msg("%s: worker sent another frame instead of closing", what);
  }
  frame_free(&f);
  if (r == -2) fail_msg("%s: worker did not close the connection within %d ms", what,
                        CLOSE_TIMEOUT_MS);
}

void expect_only_errors_then_closed(int fd, const char* what) {
  for (int i = 0; i < 4; ++i) {
    frame_t f;
    int r = recv_frame(fd, &f, CLOSE_TIMEOUT_MS);
    if (r == -2) {
      frame_free(&f);
      fail_msg("%s: worker did not close the connection", what);
    }
    if (r != 1) {
      frame_free(&f);
      return;
    }
    bool err = f.flags == (F_REPLY | F_ERROR);
    Causeway__V1__ErrorReply* e =
        err ? causeway__v1__error_reply__unpack(NULL, f.payload_len, f.payload) : NULL;
    fprintf(stderr, "[hostile]   %-46s -> frame flags 0x%x %s \"%s\"\n", what, f.flags,
            e ? code_name(e->code) : "", e && e->message ? e->message : "");
    if (e) causeway__v1__error_reply__free_unpacked(e, NULL);
    frame_free(&f);
    if (!err) fail_msg("%s: worker answered a non-error frame", what);
  }
  fail_msg("%s: worker keeps sending frames", what);
}

void expect_reply(int fd, const char* what, uint16_t type, uint64_t rid, frame_t* out) {
  int r = recv_answer(fd, out);
  if (r != 1) fail_msg("%s: expected a %u reply, got %s", what, type, recv_result_name(r));
  if (out->flags & F_ERROR) {
    Causeway__V1__ErrorReply* e =
        causeway__v1__error_reply__unpack(NULL, out->payload_len, out->payload);
    fail_msg("%s: expected success, got error %s \"%s\"", what, e ? code_name(e->code) : "?",
             e && e->message ? e->message : "(undecodable)");
  }
  if (out->flags != F_REPLY || out->type != type || out->request_id != rid) {
    fail_msg("%s: reply has type %u flags 0x%x rid %" PRIu64 ", want type %u REPLY rid %" PRIu64,
             what, out->type, out->flags, out->request_id, type, rid);
  }
}
