// Layout of a HOST_CALLBACK request's arrays (see cw_hostcb.h).
#include "cw_hostcb.h"

#include <inttypes.h>
#include <string.h>

#include "cw_array.h"

static cw_status_t cw__array_bytes(const Causeway__V1__HostCallbackArray* a, uint64_t* out) {
  *out = 0;
  if (a->token) {
    if (a->dtype != CAUSEWAY__V1__DTYPE__DTYPE_INVALID || a->n_dims) {
      return cw_make_status(CW_INVALID_ARGUMENT, "a token has no element type or dimensions");
    }
    return cw_ok_status();
  }
  return cw_array_extent((int)a->dtype, a->dims, a->n_dims, NULL, 0, out);
}

cw_status_t cw_hostcb_layout(Causeway__V1__HostCallbackArray* const* arrays, size_t n,
                             const char* what, uint64_t* out_offsets, uint64_t* out_total) {
  *out_total = 0;
  if (n > CW_HOSTCB_MAX_ARRAYS) {
    return cw_make_status(CW_INVALID_ARGUMENT, "host callback with %zu %ss (at most %d)", n, what,
                          CW_HOSTCB_MAX_ARRAYS);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t bytes = 0;
    if (!arrays[i]) {
      return cw_make_status(CW_INVALID_ARGUMENT, "host callback %s %zu is missing", what, i);
    }
    CW_RETURN_IF_ERROR(cw__array_bytes(arrays[i], &bytes), "host callback %s %zu", what, i);
    if (bytes > UINT64_MAX - total) {
      return cw_make_status(CW_INVALID_ARGUMENT, "host callback %ss overflow 64 bits", what);
    }
    if (out_offsets) out_offsets[i] = total;
    total += bytes;
  }
  *out_total = total;
  return cw_ok_status();
}

uint64_t cw_hostcb_array_bytes(const Causeway__V1__HostCallbackArray* a) {
  uint64_t bytes = 0;
  cw_status_t s = cw__array_bytes(a, &bytes);
  if (!s) return bytes;
  cw_status_free(s);
  return 0;
}

cw_status_t cw_hostcb_check_aliases(const Causeway__V1__HostCallbackRequest* r) {
  if (!r->n_aliased_operand) return cw_ok_status();
  if (!r->buffer) {
    return cw_make_status(CW_INVALID_ARGUMENT, "host callback: aliases are for buffer callbacks");
  }
  if (r->n_aliased_operand != r->n_results) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "host callback: %zu aliases for %zu results", r->n_aliased_operand,
                          r->n_results);
  }
  for (size_t i = 0; i < r->n_results; ++i) {
    uint32_t v = r->aliased_operand[i];
    if (!v) continue;
    if (v > r->n_operands) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "host callback result %zu aliases operand %" PRIu32 " of %zu", i,
                            v - 1, r->n_operands);
    }
    const Causeway__V1__HostCallbackArray* o = r->operands[v - 1];
    const Causeway__V1__HostCallbackArray* a = r->results[i];
    if (!o || !a || o->token || a->token || o->dtype != a->dtype || o->n_dims != a->n_dims ||
        (a->n_dims && memcmp(o->dims, a->dims, a->n_dims * sizeof(*a->dims)) != 0)) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "host callback result %zu aliases operand %" PRIu32 " of another "
                            "type or shape", i, v - 1);
    }
  }
  return cw_ok_status();
}
