// causeway's contract with an FFI library a worker loads (docs/ffi.md): how a
// user's own jax.ffi kernels reach the workers that run their programs.
//
// A worker given `--ffi-library PATH:SYMBOL` (CAUSEWAY_FFI_LIBRARIES) dlopens
// PATH and calls SYMBOL, a function of type causeway_ffi_targets_fn. It
// returns a table of custom call targets, ended by an entry whose name is
// NULL (NULL instead of a table: the library refuses to load). The worker
// registers each handler with its PJRT plugin under platform "Host" before
// it compiles anything. Names and handlers must stay valid while the process
// lives: the library is never unloaded.
//
// `handler` is an XLA FFI handler (XLA_FFI_Handler*, the C ABI of
// xla/ffi/api/c_api.h), the same pointer a JAX program would register in
// process with jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(fn),
// platform="cpu"); XLA_FFI_DEFINE_HANDLER_SYMBOL makes one.
//
// A library that already exports its handlers needs no table:
// `--ffi-library PATH:TARGET=SYMBOL` registers the handler SYMBOL as TARGET.
#ifndef CAUSEWAY_FFI_H_
#define CAUSEWAY_FFI_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef struct causeway_ffi_target {
  const char* name;  // the custom call target, as jax.ffi.ffi_call names it
  void* handler;     // XLA_FFI_Handler*
} causeway_ffi_target;

typedef const causeway_ffi_target* causeway_ffi_targets_fn(void);

#ifdef __cplusplus
}
#endif

#endif  // CAUSEWAY_FFI_H_
