#include "cw_random.h"

#include "cw_log.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

cw_status_t cw_random_bytes(void* buf, size_t n) {
  uint8_t* p = buf;
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return cw_make_status(CW_INTERNAL, "getrandom: %s", strerror(errno));
    }
    p += got;
    n -= (size_t)got;
  }
  return cw_ok_status();
}

cw_status_t cw_random_id(uint64_t* out_id) {
  *out_id = 0;
  uint64_t v = 0;
  while (v == 0) {
    CW_RETURN_IF_ERROR(cw_random_bytes(&v, sizeof(v)), "random id");
    v >>= 1;
  }
  *out_id = v;
  return cw_ok_status();
}

bool cw_random_id_or_log(const char* what, uint64_t* out_id) {
  cw_status_t s = cw_random_id(out_id);
  if (!s) return true;
  CW_LOGE("%s: %s", what, cw_status_message(s));
  cw_status_free(s);
  return false;
}
