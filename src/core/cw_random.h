// Random bytes from the kernel (getrandom): session ids, which double as
// capabilities for joining a session, and the embedded cluster's token.
#ifndef CW_CORE_RANDOM_H_
#define CW_CORE_RANDOM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

// Fills buf[0..n) from getrandom(2); blocks only until the kernel pool is
// initialised at boot. Errors (ENOSYS, EFAULT) are returned, never papered
// over with a weaker source.
CW_MUST_USE cw_status_t cw_random_bytes(void* buf, size_t n);

// A random id in [1, 2^63): hard to guess and never 0.
CW_MUST_USE cw_status_t cw_random_id(uint64_t* out_id);

// cw_random_id for daemons: false after logging the error (`what` names the id).
bool cw_random_id_or_log(const char* what, uint64_t* out_id);

#endif  // CW_CORE_RANDOM_H_
