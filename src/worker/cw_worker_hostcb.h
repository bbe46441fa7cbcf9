// Host callbacks (cw_worker_hostcb.c; docs/host_callbacks.md): JAX's
// jax.debug.print / debug.callback / pure_callback / io_callback become
// custom calls xla_ffi_python_cpu_callback and
// xla_ffi_partitioned_python_cpu_callback, jax.experimental.buffer_callback
// xla_buffer_python_cpu_callback. The worker registers its own FFI handler
// for each; when a program calls one, the handler sends the operands
// to the session's client (HOST_CALLBACK), which runs the Python callable,
// and waits for the results. Launches of such programs run on threads of
// their own (never the loop, which must stay free to carry the request), and
// each carries an execute context naming its session and callbacks.
#ifndef CW_WORKER_HOSTCB_H_
#define CW_WORKER_HOSTCB_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_worker_internal.h"

typedef struct cw_worker_hostcb_s cw_worker_hostcb_t;
typedef struct cw_hostcb_launch_s cw_hostcb_launch_t;

// Registers the handlers with the worker's plugin and starts the threads'
// pool. A plugin without the FFI extension gets no handlers (programs that
// call back then fail at compile, naming the target): not an error.
CW_MUST_USE cw_status_t cw_worker_hostcb_start(cw_worker_t* w);
// After the loop has ended: joins the threads.
void cw_worker_hostcb_stop(cw_worker_t* w);

// Whether a program's bytes (StableHLO or a serialized executable) name a
// host callback target: its launches need cw_worker_hostcb_execute.
bool cw_worker_hostcb_in_program(const uint8_t* bytes, size_t size);

// What a launch's handler calls need: its session, the client's id for its
// callables (LaunchRequest.host_callbacks; 0: none given) and an execute
// context carrying them. Loop thread. Free with cw_worker_hostcb_launch_free
// once the launch's execution has finished.
CW_MUST_USE cw_status_t cw_worker_hostcb_launch_create(cw_worker_t* w, uint64_t skey,
                                                       uint64_t host_callbacks, uint64_t exe_id,
                                                       cw_hostcb_launch_t** out_launch);
void cw_worker_hostcb_launch_free(cw_worker_t* w, cw_hostcb_launch_t* launch);
PJRT_ExecuteContext* cw_worker_hostcb_launch_context(const cw_hostcb_launch_t* launch);

// Runs fn(user) on a pool thread: a launch's Execute, which may call back and
// wait for a client. Loop thread. An error only when no thread can run it.
CW_MUST_USE cw_status_t cw_worker_hostcb_run(cw_worker_t* w, void (*fn)(void* user), void* user);

#endif  // CW_WORKER_HOSTCB_H_
