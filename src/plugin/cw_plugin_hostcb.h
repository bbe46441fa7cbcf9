// Host callbacks in the client (cw_plugin_hostcb.c; docs/host_callbacks.md).
// JAX hands a launch's Python callables to Execute as FFI user data of an
// execute context (FfiLoadedHostCallbacks {void** callbacks; uint32_t
// num_callbacks}, through PJRT_ExecuteContext_Create and the FFI extension
// this module answers). The plugin names them with an id in the LAUNCH; the
// worker's HOST_CALLBACK requests name that id and the callable's index, and
// a thread here runs the callable through the Python runner that the
// causeway_jax package installs (CausewayHostCallbackRunner), then answers.
#ifndef CW_PLUGIN_HOSTCB_H_
#define CW_PLUGIN_HOSTCB_H_

#include <stdint.h>

#include "cw_client.h"
#include "cw_pjrt_ffi.h"
#include "cw_plugin_event.h"

// The slots of the PJRT_Api table, and the FFI extension (its first field
// is a PJRT_Extension_Base) for the table's extension chain.
PJRT_Error* cw_plugin_execute_context_create(PJRT_ExecuteContext_Create_Args* args);
PJRT_Error* cw_plugin_execute_context_destroy(PJRT_ExecuteContext_Destroy_Args* args);
extern struct PJRT_FFI_Extension cw_plugin_hostcb_ffi;

// A launch with `context` (may be NULL) that may call back: the id its
// LaunchRequest.host_callbacks carries (0 when JAX gave no callables). Each
// such launch is then either served (cw_plugin_hostcb_serve) or, never
// sent, abandoned.
uint64_t cw_plugin_hostcb_for_launch(PJRT_ExecuteContext* context);
// Waits for launch `id`, whose completion completes `f`, running on this
// thread (JAX's, in Execute) the callbacks that come while it runs none:
// as stock JAX runs such a program, on the calling thread. Returns f's
// status; `id` is over.
CW_MUST_USE cw_status_t cw_plugin_hostcb_serve(uint64_t id, cw_plugin_future_t* f);
void cw_plugin_hostcb_abandon(uint64_t id);

// cw_client_options_t.on_release of the workers' connections: callables
// still running for `client` will not answer on it (it is being freed).
void cw_plugin_hostcb_released(void* user, cw_client_t* client);

// cw_client_options_t.on_request of the workers' connections.
void cw_plugin_hostcb_on_request(void* user, cw_client_t* client, uint16_t type,
                                 uint64_t request_id, ProtobufCMessage* request, uint8_t* bulk,
                                 uint64_t bulk_len);

// What the Python runner is called with: the callable (a borrowed
// PyObject*), the operands (wire dtypes, -1 for a token; ranks; dims one
// after another; data), the results likewise with room to write each into,
// and a buffer for an error's text. Returns 0, or nonzero with the error
// text written.
typedef int (*cw_plugin_hostcb_runner_fn)(void* callable, int32_t num_operands,
                                          const int32_t* operand_dtypes,
                                          const int32_t* operand_ranks,
                                          const int64_t* operand_dims, void* const* operand_data,
                                          int32_t num_results, const int32_t* result_dtypes,
                                          const int32_t* result_ranks, const int64_t* result_dims,
                                          void* const* result_data, char* error,
                                          int64_t error_capacity);
// Exported (exports.map): the causeway_jax package installs its runner.
__attribute__((visibility("default"))) void CausewayHostCallbackRunner(
    cw_plugin_hostcb_runner_fn runner);

// Buffer callbacks (jax.experimental.buffer_callback): the same, and the
// callable gets the results as buffers to write in place, each starting as
// its operand's bytes where `result_aliases` names one (-1: none).
typedef int (*cw_plugin_hostcb_buffer_runner_fn)(
    void* callable, int32_t num_operands, const int32_t* operand_dtypes,
    const int32_t* operand_ranks, const int64_t* operand_dims, void* const* operand_data,
    int32_t num_results, const int32_t* result_dtypes, const int32_t* result_ranks,
    const int64_t* result_dims, void* const* result_data, const int32_t* result_aliases,
    char* error, int64_t error_capacity);
__attribute__((visibility("default"))) void CausewayBufferCallbackRunner(
    cw_plugin_hostcb_buffer_runner_fn runner);

#endif  // CW_PLUGIN_HOSTCB_H_
