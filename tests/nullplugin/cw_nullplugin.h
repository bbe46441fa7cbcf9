// What the null plugin's files share (cw_nullplugin.c: errors, clients,
// devices and the table; cw_null_event.c; cw_null_buffer.c; cw_null_exe.c).
#ifndef CW_TESTS_NULLPLUGIN_H_
#define CW_TESTS_NULLPLUGIN_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_pjrt_c_api.h"

#define CW_NULL_FORMAT "cwnull"
#define CW_NULL_MAGIC "CWNULL2\n"
#define CW_NULL_MAX_DEVICES 4096
#define CW_NULL_MAX_OUTPUTS 64
#define CW_NULL_MAX_RANK 8

typedef struct cw_null_client_s cw_null_client_t;

#define CW_NULL_USER_DATA 4

// One object is the device, its description and its only memory: the ABI
// types are opaque, so the three pointers may coincide, but for the memory's
// leading function table (client data hung off a memory; JAX keeps one key).
typedef struct cw_null_device_s {
  const PJRT_Memory_FunctionTable* vtable;  // first, as the ABI lays memories out
  pthread_mutex_t user_mu;
  struct {
    const void* key;
    void* data;
    void (*dtor)(void*);
  } user[CW_NULL_USER_DATA];
  cw_null_client_t* client;
  int id;
  char debug[48];
  char memory_debug[48];
  _Atomic int64_t bytes_in_use;
  _Atomic int64_t peak_bytes;
  _Atomic int64_t num_allocs;
  PJRT_Memory* memory;  // this object, as the memory
  PJRT_Device* device;  // this object, as the device
} cw_null_device_t;

struct cw_null_client_s {
  size_t num_devices;
  cw_null_device_t* devs;
  PJRT_Device** devices;  // devs[i] as PJRT_Device*
  PJRT_Memory** memories;
  pthread_mutex_t compiler_mu;
  PJRT_Client* compiler;  // CW_NULL_COMPILER's client, made at the first "mlir" program
};

#define CW_NULL_DEV(p) ((cw_null_device_t*)(p))
#define CW_NULL_CLIENT(p) ((cw_null_client_t*)(p))

// "device": the kind of every memory.
extern const char cw_null_memory_kind[];

// An error the caller owns (PJRT_Error_Destroy frees it).
__attribute__((format(printf, 2, 3))) PJRT_Error* cw_null_err(PJRT_Error_Code code, const char* fmt,
                                                              ...);

// Frees an error of ours (PJRT_Error_Destroy).
void cw_null_error_free(PJRT_Error* e);

// Returned when even an error cannot be allocated; never freed.
extern struct cw_null_error_s cw_null_oom_error;
#define CW_NULL_OOM ((PJRT_Error*)&cw_null_oom_error)

// Events (cw_null_event.c). Most calls finish before they return and hand
// out the static ready event; a buffer made through a transfer manager is
// pending until its last transfer or an error.
typedef struct cw_null_event_s cw_null_event_t;
extern cw_null_event_t cw_null_ready_event;
#define CW_NULL_READY ((PJRT_Event*)&cw_null_ready_event)

// A pending event with one reference, or NULL when out of memory.
cw_null_event_t* cw_null_event_create(void);
cw_null_event_t* cw_null_event_ref(cw_null_event_t* ev);
void cw_null_event_unref(cw_null_event_t* ev);
bool cw_null_event_is_ready(const cw_null_event_t* ev);
// Makes the event ready (code 0: without error) and runs its callbacks;
// false when it was ready already.
bool cw_null_event_set(cw_null_event_t* ev, PJRT_Error_Code code, const char* message);
// The same as cw_null_event_set with `from`'s outcome (`from` is ready).
bool cw_null_event_set_like(cw_null_event_t* ev, const cw_null_event_t* from);
// Waits until the event is ready; its error as a new one the caller owns.
PJRT_Error* cw_null_event_wait(cw_null_event_t* ev);
// Runs fn(error it owns, arg) once the event is ready: now if it is, else on
// the thread that sets it.
PJRT_Error* cw_null_event_on_ready(cw_null_event_t* ev, PJRT_Event_OnReadyCallback fn, void* arg);

typedef struct cw_null_buffer_s {
  cw_null_device_t* dev;
  PJRT_Buffer_Type type;
  size_t rank;
  int64_t dims[CW_NULL_MAX_RANK];
  int64_t minor_to_major[CW_NULL_MAX_RANK];
  uint64_t size;
  _Atomic int refs;      // the buffer itself, external references, a transfer manager's
  _Atomic int external;  // external references (IncreaseExternalReferenceCount)
  _Atomic bool deleted;
  cw_null_event_t* pending;  // NULL: written at creation; else ready once written
  unsigned char* data;
} cw_null_buffer_t;

#define CW_NULL_BUF(p) ((cw_null_buffer_t*)(p))

// Drops one reference; the last frees the bytes and uncharges the device.
void cw_null_buffer_unref(cw_null_buffer_t* b);

// A zero-filled buffer of `type` and `dims` on `dev`, charged to it.
PJRT_Error* cw_null_buffer_create(cw_null_device_t* dev, PJRT_Buffer_Type type, const int64_t* dims,
                                  size_t rank, cw_null_buffer_t** out);

// Waits until the buffer's bytes are written; the error that kept them from it.
PJRT_Error* cw_null_buffer_wait(const cw_null_buffer_t* b);

// The HLO type name of t ("f32"), or NULL for a type programs cannot declare.
const char* cw_null_type_name(PJRT_Buffer_Type t);

// What the compiler plugin told of an "mlir" program (cw_null_compiler.c).
typedef struct cw_null_compiled_s {
  char text[12288];  // the outputs as a cwnull program: "f32[8] s32[] "
  char* hlo;         // the optimized program (malloc), for OptimizedProgram
  size_t hlo_size;
  char hlo_format[32];
} cw_null_compiled_t;

// The table of CW_NULL_COMPILER's plugin, loaded once; NULL if unset or it
// fails to load.
const PJRT_Api* cw_null_compiler_api(void);
// The compiler's attributes (none without it): JAX reads the StableHLO version.
PJRT_Error* cw_null_compiler_attributes(PJRT_Plugin_Attributes_Args* a);
// Compiles a's program with the compiler for c's devices and describes it.
PJRT_Error* cw_null_compiler_compile(cw_null_client_t* c, const PJRT_Client_Compile_Args* a,
                                     cw_null_compiled_t* out);
// Destroys c's compiler client, if it made one.
void cw_null_compiler_release(cw_null_client_t* c);

// Set the table's slots each file serves.
void cw_null_event_fill(PJRT_Api* api);
void cw_null_buffer_fill(PJRT_Api* api);
void cw_null_exe_fill(PJRT_Api* api);
// Every slot the files leave empty answers UNIMPLEMENTED, naming itself
// (cw_null_stubs.c), except PJRT_Device_GetAttributes, which JAX may not see fail.
void cw_null_stubs_fill(PJRT_Api* api);

#endif  // CW_TESTS_NULLPLUGIN_H_
