// Helpers for the cmocka tests that check our PJRT declarations against a
// real plugin (XLA's CPU plugin, $CAUSEWAY_PJRT_PLUGIN): loading it, a client with
// 4 CPU devices, and the calls every check is built from. A failed call
// fails the running test with the plugin's error code and message.
#ifndef CW_PJRT_TEST_UTIL_H_
#define CW_PJRT_TEST_UTIL_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_pjrt_c_api.h"

// Exit status of a test program that finds no plugin (CTest: skipped).
#define CW_PJRT_TEST_SKIP 77

// Zero an args struct and set its struct_size to the full size we know.
#define CW_PJRT_INIT_ARGS(var)       \
  do {                               \
    memset(&(var), 0, sizeof(var));  \
    (var).struct_size = sizeof(var); \
  } while (0)

// Fails the running test (at the caller's line) unless err is NULL; frees err.
#define CW_PJRT_ASSERT_OK(call) cw_pjrt_test_assert_ok((call), #call, __FILE__, __LINE__)
void cw_pjrt_test_assert_ok(PJRT_Error* err, const char* what, const char* file, int line);

// The plugin under test, set by cw_pjrt_test_load.
extern const PJRT_Api* cw_pjrt_test_api;

// What a test group shares: the plugin's client and its first devices.
typedef struct cw_pjrt_test_fixture_s {
  PJRT_Client* client;
  PJRT_Device* devices[8];
  size_t num_devices;  // as the client reported (the first 8 are kept)
  PJRT_Memory* memory0;  // default memories of devices 0 and 1
  PJRT_Memory* memory1;
} cw_pjrt_test_fixture_t;

// $CAUSEWAY_PJRT_PLUGIN, or NULL (print that the test is skipped, exit 77).
const char* cw_pjrt_test_plugin_path(void);

// dlopens the plugin (never closed: XLA's is not built to be unloaded) and
// fetches its table into cw_pjrt_test_api. Returns 0, or -1 after printing why.
int cw_pjrt_test_load(const char* path);

// cmocka group setup: loads $CAUSEWAY_PJRT_PLUGIN, initializes it, creates a client
// with 4 CPU devices (at least 2 needed) into a fixture in *state. Teardown
// destroys the client.
int cw_pjrt_test_setup(void** state);
int cw_pjrt_test_teardown(void** state);

// PJRT_Plugin_Initialize (0, or -1 with the reason printed); a client asking
// for `cpu_devices` devices (NULL and the reason printed when it fails).
int cw_pjrt_test_initialize(void);
PJRT_Client* cw_pjrt_test_create_client(int64_t cpu_devices);

// An error's message (owned by err) and code (UNKNOWN if that call fails).
void cw_pjrt_test_error_text(PJRT_Error* err, const char** out_msg, size_t* out_len);
PJRT_Error_Code cw_pjrt_test_error_code(PJRT_Error* err);
void cw_pjrt_test_error_free(PJRT_Error* err);

// Awaits and destroys ev (taken; NULL fails the test).
void cw_pjrt_test_event_wait(PJRT_Event* ev);
void cw_pjrt_test_event_free(PJRT_Event* ev);  // NULL: no-op
void cw_pjrt_test_buffer_free(PJRT_Buffer* b);  // NULL: no-op
void cw_pjrt_test_loaded_free(PJRT_LoadedExecutable* e);  // NULL: no-op
void cw_pjrt_test_executable_free(PJRT_Executable* e);  // NULL: no-op

// The device's default memory.
PJRT_Memory* cw_pjrt_test_default_memory(PJRT_Device* dev);

// BufferFromHostBuffer into `memory`. out_done NULL: waits for the host
// buffer to be released; else hands that event to the caller.
PJRT_Buffer* cw_pjrt_test_host_to_device(PJRT_Client* client, PJRT_Memory* memory,
                                         const void* data, PJRT_Buffer_Type type,
                                         const int64_t* dims, size_t num_dims,
                                         PJRT_HostBufferSemantics sem, PJRT_Event** out_done);

// ToHostBuffer: checks the size query says `size`, copies and waits.
void cw_pjrt_test_device_to_host(PJRT_Buffer* b, void* dst, size_t size);

// Compiles MLIR text with serialized CompileOptionsProto `opts` (borrowed);
// the plugin's error, if any, in *out_err.
PJRT_LoadedExecutable* cw_pjrt_test_compile(PJRT_Client* client, const char* mlir,
                                            const char* opts, size_t opts_size,
                                            PJRT_Error** out_err);

// Runs a one-input, one-output executable (execute_device may be NULL) and
// waits for it; the output buffer, or NULL with the plugin's error in *out_err.
PJRT_Buffer* cw_pjrt_test_run1(PJRT_LoadedExecutable* exe, PJRT_Buffer* in,
                               PJRT_Device* execute_device, PJRT_Error** out_err);

// Does p lie inside the plugin's loaded image? Checked before following the
// vtable pointers that start PJRT_Error and PJRT_Memory.
int cw_pjrt_test_in_plugin_image(const void* p);

#endif  // CW_PJRT_TEST_UTIL_H_
