// One status type for all of causeway. OK is NULL (code 0); an error is a heap
// payload with a code equal to PJRT_Error_Code and a message that gathers
// context as it propagates. Convert to PJRT_Error* only at the plugin edge.
#ifndef CW_CORE_STATUS_H_
#define CW_CORE_STATUS_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CW_MUST_USE __attribute__((warn_unused_result))
#define CW_PRINTF(f, a) __attribute__((format(printf, f, a)))

// Values equal PJRT_Error_Code (pinned in cw_status.c).
typedef enum cw_status_code_e {
  CW_OK = 0,
  CW_CANCELLED = 1,
  CW_UNKNOWN = 2,
  CW_INVALID_ARGUMENT = 3,
  CW_DEADLINE_EXCEEDED = 4,
  CW_NOT_FOUND = 5,
  CW_ALREADY_EXISTS = 6,
  CW_PERMISSION_DENIED = 7,
  CW_RESOURCE_EXHAUSTED = 8,
  CW_FAILED_PRECONDITION = 9,
  CW_ABORTED = 10,
  CW_OUT_OF_RANGE = 11,
  CW_UNIMPLEMENTED = 12,
  CW_INTERNAL = 13,
  CW_UNAVAILABLE = 14,
  CW_DATA_LOSS = 15,
  CW_UNAUTHENTICATED = 16,
} cw_status_code_t;

typedef struct cw_status_payload_s* cw_status_t;

#define cw_ok_status() ((cw_status_t)0)

// Creates an error status; code CW_OK returns OK. The message is formatted.
CW_MUST_USE cw_status_t cw_status_make(cw_status_code_t code, const char* file,
                                       int line, const char* fmt, ...)
    CW_PRINTF(4, 5);
#define cw_make_status(code, ...) \
  cw_status_make((code), __FILE__, __LINE__, __VA_ARGS__)

// Takes `status`; returns it with "context: " prepended (OK stays OK).
CW_MUST_USE cw_status_t cw_status_annotate(cw_status_t status, const char* fmt,
                                           ...) CW_PRINTF(2, 3);

// Borrowed accessors. cw_status_message returns "" for OK.
cw_status_code_t cw_status_code(cw_status_t status);
const char* cw_status_message(cw_status_t status);
// "file:line" where the status was made, "" for OK.
const char* cw_status_origin(cw_status_t status);
const char* cw_status_code_name(cw_status_code_t code);
// Codes outside 1..16 map to CW_UNKNOWN (a peer's code is untrusted).
cw_status_code_t cw_status_code_from_u32(uint32_t code);

// A fresh status with the code and message of `status` (borrowed); OK stays OK.
CW_MUST_USE cw_status_t cw_status_clone(cw_status_t status);

// A failure caused by `cause` (borrowed; OK gives OK), with cause's code:
// "<fmt...>: <cause's message>", or cause's message as it is when that
// already starts with `lead` (the cause was itself carried). So an error
// passed along a chain (a failed input poisoning the next launch's outputs,
// and so on) keeps one prefix instead of growing by one a step.
CW_MUST_USE cw_status_t cw_status_carry(cw_status_t cause, const char* lead, const char* fmt, ...)
    CW_PRINTF(3, 4);

// Takes and frees `status`; NULL is fine.
void cw_status_free(cw_status_t status);

static inline bool cw_status_is_ok(cw_status_t status) { return status == 0; }

// Returns early with context added when `expr` fails.
#define CW_RETURN_IF_ERROR(expr, ...)                \
  do {                                               \
    cw_status_t cw__s = (expr);                      \
    if (cw__s) return cw_status_annotate(cw__s, __VA_ARGS__); \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif  // CW_CORE_STATUS_H_
