// A thin wrapper over one vendor PJRT plugin: load and version check, client
// creation, and the calls the worker makes (compile, upload, download,
// execute, events), each returning cw_status_t with XLA's message and code.
// Every function may be called from any thread unless noted (PJRT is
// thread-safe); the wrapper itself holds no mutable state after creation.
#ifndef CW_WORKER_PJRT_H_
#define CW_WORKER_PJRT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cw_frame.h"
#include "cw_pjrt_c_api.h"
#include "cw_status.h"

#define CW_PJRT_MIN_MINOR 29  // the floor XLA's own loader enforces

typedef struct cw_pjrt_s {
  void* library;  // dlopen handle
  const PJRT_Api* api;
  PJRT_Client* client;
  size_t num_devices;
  PJRT_Device** devices;          // owned array of borrowed handles
  PJRT_Memory** default_memories;  // per device, may hold NULL
  bool host_memory;  // device memory is this process's memory (the CPU plugin)
} cw_pjrt_t;

// Loads `plugin_path`, checks its API version, creates a client with
// `num_devices` CPU devices (create option cpu_device_count).
CW_MUST_USE cw_status_t cw_pjrt_create(const char* plugin_path, int num_devices,
                                       cw_pjrt_t** out_pjrt);
// Destroys the client (all buffers and executables must be gone) and frees.
// The library stays loaded: plugins register process-wide state.
void cw_pjrt_release(cw_pjrt_t* pjrt);

// Takes `error` (NULL is OK) and returns it as a status with XLA's message.
CW_MUST_USE cw_status_t cw_pjrt_status(const cw_pjrt_t* pjrt, PJRT_Error* error);

// Local index of `device`, -1 if unknown.
int cw_pjrt_device_index(const cw_pjrt_t* pjrt, PJRT_Device* device);

// Runs `fn(user, status)` on a plugin thread (or this one if already ready)
// when `event` is ready; fn takes the status. `event` is borrowed: destroy it
// only after fn ran.
typedef void (*cw_pjrt_ready_fn)(void* user, cw_status_t status);
CW_MUST_USE cw_status_t cw_pjrt_event_on_ready(const cw_pjrt_t* pjrt, PJRT_Event* event,
                                               cw_pjrt_ready_fn fn, void* user);
void cw_pjrt_event_destroy(const cw_pjrt_t* pjrt, PJRT_Event* event);

// Compiles; `options` may be empty (then one replica, one partition).
CW_MUST_USE cw_status_t cw_pjrt_compile(const cw_pjrt_t* pjrt, const char* format,
                                        const uint8_t* code, size_t code_size,
                                        const uint8_t* options, size_t options_size,
                                        PJRT_LoadedExecutable** out_exe);
CW_MUST_USE cw_status_t cw_pjrt_deserialize(const cw_pjrt_t* pjrt, const uint8_t* bytes,
                                            size_t size, const uint8_t* options,
                                            size_t options_size,
                                            PJRT_LoadedExecutable** out_exe);
// Outputs per device, addressable devices, name (*out_name malloc'd).
CW_MUST_USE cw_status_t cw_pjrt_executable_info(const cw_pjrt_t* pjrt,
                                                PJRT_LoadedExecutable* exe,
                                                uint32_t* out_num_outputs,
                                                uint32_t* out_num_devices, char** out_name);
// The output element types (t->output_types[t->num_output_types]) and dims
// (d->dims, d->dim_sizes[i] per output) of `e`, PJRT's arrays that live with
// `e`; INTERNAL when their counts differ.
CW_MUST_USE cw_status_t cw_pjrt_output_shapes(const cw_pjrt_t* pjrt, PJRT_Executable* e,
                                              PJRT_Executable_OutputElementTypes_Args* t,
                                              PJRT_Executable_OutputDimensions_Args* d);
// What a launch of the executable needs in device memory: the local index of
// each device it runs on (*out_devices[*out_num_devices], in launch order)
// and the dense bytes of each output on one device (*out_bytes[*out_num_outputs];
// 0 for a type with no byte size). Both malloc'd. An error when the plugin
// cannot say.
CW_MUST_USE cw_status_t cw_pjrt_executable_outputs(const cw_pjrt_t* pjrt,
                                                   PJRT_LoadedExecutable* exe,
                                                   int** out_devices, size_t* out_num_devices,
                                                   uint64_t** out_bytes,
                                                   size_t* out_num_outputs);
// The plugin's memory limit of a device (PJRT_Device_MemoryStats'
// bytes_limit); 0 when it reports none. An error when the plugin does not
// answer (XLA's CPU plugin: UNIMPLEMENTED).
CW_MUST_USE cw_status_t cw_pjrt_device_memory_limit(const cw_pjrt_t* pjrt, size_t device,
                                                    uint64_t* out_limit);
// One array shape: `dtype` a PJRT_Buffer_Type (-1 for an XLA type with no
// PJRT equivalent, a tuple or a token), `dims` owned.
typedef struct cw_pjrt_shape_s {
  int dtype;
  size_t rank;
  int64_t* dims;
  // Parameters only: the program aliases it to an output
  // (input_output_alias), so PJRT takes the buffer unless told not to.
  bool donated;
} cw_pjrt_shape_t;
// The parameter shapes of the executable's optimized entry computation, read
// from PJRT_Executable_OptimizedProgram (an HloModuleProto's
// host_program_shape; `donated` from its input_output_alias). They are per device: an SPMD program's parameters are
// its shards. UNIMPLEMENTED when the plugin cannot say. *out_params is
// malloc'd (free with cw_pjrt_shapes_free).
CW_MUST_USE cw_status_t cw_pjrt_executable_params(const cw_pjrt_t* pjrt,
                                                  PJRT_LoadedExecutable* exe,
                                                  cw_pjrt_shape_t** out_params,
                                                  size_t* out_num_params);
// Decodes a serialized HloModuleProto (format "hlo") or
// HloModuleProtoWithConfig ("hlo_with_config"); exposed for tests.
CW_MUST_USE cw_status_t cw_pjrt_params_from_hlo(const uint8_t* bytes, size_t size,
                                                bool with_config,
                                                cw_pjrt_shape_t** out_params,
                                                size_t* out_num_params);
void cw_pjrt_shapes_free(cw_pjrt_shape_t* shapes, size_t n);
// XLA PrimitiveType -> PJRT_Buffer_Type, -1 if none.
int cw_pjrt_dtype_from_xla(int primitive_type);

// Serialized bytes stay valid until `*out_deleter(*out_handle)`.
CW_MUST_USE cw_status_t cw_pjrt_serialize(const cw_pjrt_t* pjrt, PJRT_LoadedExecutable* exe,
                                          const uint8_t** out_bytes, size_t* out_size,
                                          void** out_handle, void (**out_deleter)(void*));
void cw_pjrt_executable_destroy(const cw_pjrt_t* pjrt, PJRT_LoadedExecutable* exe);

// `device`'s memory of `kind` (memory kinds: "device", "pinned_host", ...):
// NULL for "" (the device's default); INVALID_ARGUMENT naming the kinds it
// has when it has none of that kind.
CW_MUST_USE cw_status_t cw_pjrt_memory_of_kind(const cw_pjrt_t* pjrt, int device,
                                               const char* kind, PJRT_Memory** out_memory);
// Creates a buffer on `device` (in `memory`, one of its memories; NULL: its
// default) from host memory that must stay unchanged until *out_done fires
// (zero-copy when `zero_copy` and the plugin aliases).
CW_MUST_USE cw_status_t cw_pjrt_upload(const cw_pjrt_t* pjrt, const void* data, int dtype,
                                       const int64_t* dims, size_t rank,
                                       const int64_t* byte_strides, size_t num_strides,
                                       int device, PJRT_Memory* memory, bool zero_copy,
                                       PJRT_Buffer** out_buffer, PJRT_Event** out_done);
// Dense row-major copy into `dst`; completion on *out_event.
CW_MUST_USE cw_status_t cw_pjrt_to_host(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer,
                                        size_t rank, void* dst, size_t size,
                                        PJRT_Event** out_event);
CW_MUST_USE cw_status_t cw_pjrt_ready_event(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer,
                                            PJRT_Event** out_event);
// A copy on `device` (in `memory`, one of its memories; NULL: its default).
CW_MUST_USE cw_status_t cw_pjrt_copy(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer, int device,
                                     PJRT_Memory* memory, PJRT_Buffer** out_buffer);
// dtype, dims (*out_dims malloc'd), local device index.
CW_MUST_USE cw_status_t cw_pjrt_buffer_info(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer,
                                            int* out_dtype, int64_t** out_dims,
                                            size_t* out_rank, int* out_device);
// Device address of the buffer's data (CPU: host address), 0 if unknown.
uintptr_t cw_pjrt_buffer_pointer(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer);
// The host address of a ready buffer whose memory this process can read in
// place, dense and row-major (`size` bytes); NULL when that is not so (a
// device that is not host memory, another layout, a packed sub-byte type):
// copy with cw_pjrt_to_host.
const void* cw_pjrt_buffer_host_view(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer,
                                     size_t rank);
// Holds the buffer's device memory for a reader outside PJRT (external
// reference); false if the plugin refuses.
bool cw_pjrt_buffer_hold(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer);
void cw_pjrt_buffer_unhold(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer);
void cw_pjrt_buffer_destroy(const cw_pjrt_t* pjrt, PJRT_Buffer* buffer);

// argument_lists[num_devices][num_args]; output_lists[num_devices][*]
// preallocated; events[num_devices] filled. `donate[num_args]` (NULL: none)
// marks the arguments PJRT may take (it does where the program aliases the
// parameter); every other argument is passed as non-donatable. `context`
// (borrowed, may be NULL) must outlive the execution.
CW_MUST_USE cw_status_t cw_pjrt_execute(const cw_pjrt_t* pjrt, PJRT_LoadedExecutable* exe,
                                        size_t num_devices, size_t num_args,
                                        PJRT_Buffer* const* const* argument_lists,
                                        PJRT_Buffer** const* output_lists,
                                        PJRT_Event** events, int launch_id,
                                        const bool* donate, PJRT_ExecuteContext* context);

// --- The plugin's FFI extension (cw_pjrt_ffi.h) --------------------------------
// Registers `handler` (an XLA_FFI_Handler*, cw_xla_ffi.h; it must answer
// XLA's metadata query) for custom call `target` on `platform` ("Host" for
// XLA's CPU plugin) with XLA_FFI_Handler_Traits `traits` (0: none). The
// registry is the plugin's, process-wide. UNIMPLEMENTED when the plugin has
// no FFI extension.
CW_MUST_USE cw_status_t cw_pjrt_ffi_register_handler(const cw_pjrt_t* pjrt, const char* target,
                                                     const char* platform, void* handler,
                                                     uint32_t traits);
// Registers a user-data type under `name` (process-wide; XLA never frees
// the data); *out_type_id is the id XLA chose, for cw_xla_ffi_user_data.
CW_MUST_USE cw_status_t cw_pjrt_ffi_register_type(const cw_pjrt_t* pjrt, const char* name,
                                                  int64_t* out_type_id);
// An execute context whose handlers find `data` (borrowed; it must outlive
// the context) as user data of `type_id`. Destroy it after the execution.
// A handler that asks for user data crashes XLA when the launch has no
// context at all: launch every program that may call one with a context.
CW_MUST_USE cw_status_t cw_pjrt_execute_context_create(const cw_pjrt_t* pjrt, int64_t type_id,
                                                       void* data,
                                                       PJRT_ExecuteContext** out_context);
void cw_pjrt_execute_context_destroy(const cw_pjrt_t* pjrt, PJRT_ExecuteContext* context);

// Fills `inv` (platform, version, plugin attributes, devices). Strings and
// arrays are malloc'd; free with cw_pjrt_inventory_deinitialize.
// The plugin's PJRT_Client_ProcessIndex: this process's place among the
// processes of a multi-process plugin (0 for single-process plugins).
CW_MUST_USE cw_status_t cw_pjrt_process_index(const cw_pjrt_t* pjrt, int* out_index);
CW_MUST_USE cw_status_t cw_pjrt_inventory_initialize(const cw_pjrt_t* pjrt,
                                                     Causeway__V1__Inventory* inv);
void cw_pjrt_inventory_deinitialize(Causeway__V1__Inventory* inv);

// For files that call the plugin's slots: declares `var` of args type T,
// zeroed, with struct_size set; and calls slot `fn` of `p`, returning its
// error with context.
#define CW_PJRT_ARGS(T, var)      \
  T var;                          \
  memset(&var, 0, sizeof(var));   \
  var.struct_size = sizeof(T)

#define CW_PJRT_CALL(p, fn, args, ...) \
  CW_RETURN_IF_ERROR(cw_pjrt_status((p), (p)->api->fn(&(args))), __VA_ARGS__)

#endif  // CW_WORKER_PJRT_H_
