// libcw_test_ffi.so: a user's FFI library as the tests ship it to workers
// (cw_handler_set_test.c, tests/ffi/test_ffi.py). Written against the XLA FFI
// C ABI only (cw_xla_ffi.h), as any C library could be.
//   cw_test_add_one   f32[...] -> f32[...], x + 1
//   cw_test_fail      always fails with INVALID_ARGUMENT, naming itself
// cw_test_ffi_targets is the table (causeway_ffi.h); cw_test_ffi_refuse
// refuses to load (returns NULL); cw_test_add_one is also exported alone
// (PATH:TARGET=SYMBOL).
#include <stddef.h>
#include <stdint.h>

#include "causeway_ffi.h"
#include "cw_xla_ffi.h"

#define CW__EXPORT __attribute__((visibility("default")))

XLA_FFI_Handler cw_test_add_one CW__EXPORT;
causeway_ffi_targets_fn cw_test_ffi_targets CW__EXPORT;
causeway_ffi_targets_fn cw_test_ffi_refuse CW__EXPORT;

XLA_FFI_Error* cw_test_add_one(XLA_FFI_CallFrame* frame) {
  if (cw_xla_ffi_answer_metadata(frame, 0)) return NULL;
  if (frame->args.size != 1 || frame->rets.size != 1 ||
      frame->args.types[0] != XLA_FFI_ArgType_BUFFER ||
      frame->rets.types[0] != XLA_FFI_RetType_BUFFER) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                            "cw_test_add_one: wants one array operand and one result");
  }
  const XLA_FFI_Buffer* in = frame->args.args[0];
  XLA_FFI_Buffer* out = frame->rets.rets[0];
  if (in->dtype != XLA_FFI_DataType_F32 || out->dtype != XLA_FFI_DataType_F32 ||
      in->rank != out->rank) {
    return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                            "cw_test_add_one: wants float32 in and out, of one shape");
  }
  int64_t n = 1;
  for (int64_t i = 0; i < in->rank; ++i) {
    if (in->dims[i] != out->dims[i]) {
      return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                              "cw_test_add_one: operand and result shapes differ");
    }
    n *= in->dims[i];
  }
  const float* x = in->data;
  float* y = out->data;
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] + 1.0f;
  return NULL;
}

static XLA_FFI_Error* cw__fail(XLA_FFI_CallFrame* frame) {
  if (cw_xla_ffi_answer_metadata(frame, 0)) return NULL;
  return cw_xla_ffi_error(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                          "cw_test_fail: this kernel always fails");
}

static const causeway_ffi_target cw__targets[] = {
    {"cw_test_add_one", (void*)cw_test_add_one},
    {"cw_test_fail", (void*)cw__fail},
    {NULL, NULL},
};

const causeway_ffi_target* cw_test_ffi_targets(void) { return cw__targets; }

const causeway_ffi_target* cw_test_ffi_refuse(void) { return NULL; }
