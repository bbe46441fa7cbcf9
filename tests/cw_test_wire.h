// Raw wire helpers for tests that speak the protocol byte by byte (the
// hostile-frame suite): frame headers built and read by hand, whole sends,
// frame reads with deadlines, and expectations on what a peer answers.
// Constants are spelled out here on purpose: these tests check the contract
// (docs/protocol.md), not our own codec. Failed expectations fail the
// current cmocka test.
#ifndef CW_TESTS_TEST_WIRE_H_
#define CW_TESTS_TEST_WIRE_H_

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "proto/causeway.pb-c.h"

#define MAGIC 0x59415743u
#define HDR 32
#define F_REPLY 0x1u
#define F_ERROR 0x2u

enum {
  T_HELLO = 1, T_PING, T_INVENTORY, T_COMPILE, T_SERIALIZE, T_LOAD, T_UPLOAD, T_LAUNCH,
  T_DOWNLOAD, T_COPY, T_SEND, T_PUT, T_EXPECT, T_DELETE, T_STATS, T_AWAIT, T_LAUNCH_GO,
};

// Codes equal PJRT_Error_Code.
enum {
  C_INVALID_ARGUMENT = 3, C_DEADLINE_EXCEEDED = 4, C_NOT_FOUND = 5, C_ALREADY_EXISTS = 6,
  C_PERMISSION_DENIED = 7, C_RESOURCE_EXHAUSTED = 8, C_FAILED_PRECONDITION = 9,
  C_UNIMPLEMENTED = 12, C_INTERNAL_CODE = 13, C_UNAUTHENTICATED = 16,
};

#define PREHELLO_MAX_PAYLOAD 4096u
#define MAX_PAYLOAD (16u << 20)
#define IO_TIMEOUT_MS 20000   // a reply must come within this
#define CLOSE_TIMEOUT_MS 20000 // a violating connection must be closed within this

// Sends everything; false if the peer went away (EPIPE/ECONNRESET), which
// several cases allow once the worker has rejected the frame.
bool send_all(int fd, const void* data, size_t len);

typedef struct frame_s {
  uint32_t magic;
  uint16_t version, type;
  uint32_t flags, payload_len;
  uint64_t request_id, bulk_len;
  uint8_t* payload;  // owned
  uint8_t* bulk;     // owned, only when bulk_len <= 64 MiB
} frame_t;

void frame_free(frame_t* f);

// Little-endian store of the low `n` bytes of `v`.
void put_le(uint8_t* p, uint64_t v, int n);

// "frame", "EOF", "reset", "timeout" or "EOF mid-frame" for a recv_frame result.
const char* recv_result_name(int r);

// Reads one frame as the worker sent it (no validation besides sanity bounds).
// Returns 1 for a frame, else as recv_exact: 0 EOF, -1 reset, -2 timeout,
// -3 EOF mid-frame.
int recv_frame(int fd, frame_t* f, int timeout_ms);

typedef struct hdr_s {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t flags;
  uint32_t payload_len;
  uint64_t request_id;
  uint64_t bulk_len;
} hdr_t;

// A request header: magic, version 1, no flags.
hdr_t hdr_of(uint16_t type, uint64_t rid, uint32_t plen, uint64_t blen);

void hdr_encode(const hdr_t* h, uint8_t out[HDR]);

// Header + payload + bulk in one buffer (so one send), exactly as given.
bool send_raw(int fd, const hdr_t* h, const void* payload, size_t plen, const void* bulk,
              size_t blen);

typedef struct packed_s {
  uint8_t* data;
  size_t len;
} packed_t;

// Packs `m` into a malloc'd buffer the caller frees (p.data).
packed_t pack(const ProtobufCMessage* m);

// A well-formed request: header matches payload (and bulk, if given).
bool send_msg(int fd, uint16_t type, uint64_t rid, const ProtobufCMessage* m,
              const void* bulk, size_t blen);

// The PJRT name of error code `c` ("?" if unknown).
const char* code_name(uint32_t c);

#define ANY_RID UINT64_MAX  // expect_*: any request id

typedef struct error_s {
  uint32_t code;
  char message[1024];
  uint64_t request_id;
  uint16_t type;
} got_error_t;

// Receives one frame (past unsolicited EVENTs) and asserts it is an ERROR
// reply with `code` (or any of the codes in `codes`, zero-terminated) and a
// message mentioning `keywords`.
void expect_error_codes(int fd, const char* what, uint64_t rid, const uint32_t* codes,
                        const char* keywords, got_error_t* out);

// expect_error_codes with the one code `code`.
void expect_error(int fd, const char* what, uint64_t rid, uint32_t code, const char* keywords);

// Asserts the worker closes the connection without sending anything more.
void expect_closed(int fd, const char* what);

// For peers that vanish: the worker may answer with ERROR replies (to a
// half-closed socket) but must close; anything else is wrong.
void expect_only_errors_then_closed(int fd, const char* what);

// Receives one non-error reply of `type` to `rid` into *out (frame_free it),
// past any EVENT frames that come first.
void expect_reply(int fd, const char* what, uint16_t type, uint64_t rid, frame_t* out);

#endif  // CW_TESTS_TEST_WIRE_H_
