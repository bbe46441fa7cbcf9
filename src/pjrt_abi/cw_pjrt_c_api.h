/*
 * causeway: C11 declarations of the PJRT C API ABI, pinned at version 0.115.
 *
 * Written for this project from the published interface definition (struct
 * layouts, enum values and the function-table order of openxla/xla's
 * xla/pjrt/c/pjrt_c_api.h). Type and field names are the ABI's own names so
 * that code reads the same as any other PJRT plugin or client; everything
 * else here (layout of this file, comments, helper macros, checks) is ours.
 *
 * Rules of the ABI that matter when using these declarations:
 *   - Every argument struct starts with `struct_size` and `extension_start`.
 *     A caller sets struct_size to CW_PJRT_STRUCT_SIZE(type, last_field) for
 *     the last field it knows about; an implementation must not read fields
 *     past that size. Newer minors only append fields and table slots.
 *   - Every table slot returns a PJRT_Error* (NULL on success) except
 *     PJRT_Error_Destroy and PJRT_Error_Message, which return nothing. The
 *     caller owns a returned error and frees it with PJRT_Error_Destroy.
 *   - Fields commented "out" are written by the implementation.
 *
 * Only <stdbool.h>, <stddef.h> and <stdint.h> are needed. The layout checks
 * at the end of this file hold on LP64 targets (Linux/macOS x86-64, arm64).
 */
#ifndef CW_PJRT_C_API_H_
#define CW_PJRT_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version and helpers                                                      */
/* ------------------------------------------------------------------------ */

#define CW_PJRT_API_MAJOR 0
#define CW_PJRT_API_MINOR 115

/* Number of function-pointer slots in PJRT_Api at CW_PJRT_API_MINOR. */
#define CW_PJRT_API_NUM_SLOTS 138

/* Bytes up to and including `last_field`: the value a caller puts in
 * `struct_size` when it knows every field through `last_field`. */
#define CW_PJRT_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* ------------------------------------------------------------------------ */
/* Extension chain                                                          */
/* ------------------------------------------------------------------------ */

/* Tags for the optional extension structs chained from PJRT_Api and from
 * argument structs. Values are positional (0, 1, 2, ...). */
typedef enum {
  PJRT_Extension_Type_Gpu_Custom_Call = 0,
  PJRT_Extension_Type_Profiler = 1,
  PJRT_Extension_Type_Custom_Partitioner = 2,
  PJRT_Extension_Type_Stream = 3,
  PJRT_Extension_Type_Layouts = 4,
  PJRT_Extension_Type_FFI = 5,
  PJRT_Extension_Type_MemoryDescriptions = 6,
  PJRT_Extension_Type_Triton = 7,
  PJRT_Extension_Type_RawBuffer = 8,
  PJRT_Extension_Type_PhaseCompile = 9,
  PJRT_Extension_Type_Example = 10,
  PJRT_Extension_Type_Unknown = 11,
  PJRT_Extension_Type_CrossHostTransfers = 12,
  PJRT_Extension_Type_ExecutableMetadata = 13,
  PJRT_Extension_Type_Callback = 14,
  PJRT_Extension_Type_HostAllocator = 15,
  PJRT_Extension_Type_TpuTopology = 16,
  PJRT_Extension_Type_TpuExecutable = 17,
  PJRT_Extension_Type_Megascale = 18,
  PJRT_Extension_Type_Shardings = 19,
  PJRT_Extension_Type_AbiVersion = 20,
  PJRT_Extension_Type_Collectives = 21,
  PJRT_Extension_Type_MultiSlice = 22,
  PJRT_Extension_Type_HostMemoryAllocator = 23,
  PJRT_Extension_Type_XlaTransform = 24
} PJRT_Extension_Type;

/* Header shared by every extension struct; `next` links the chain. */
typedef struct PJRT_Extension_Base {
  size_t struct_size;
  PJRT_Extension_Type type;
  struct PJRT_Extension_Base* next;
} PJRT_Extension_Base;

/* Embedded by value in PJRT_Api; the plugin reports the minor it was built
 * against. */
typedef struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  int major_version; /* out */
  int minor_version; /* out */
} PJRT_Api_Version;

/* ------------------------------------------------------------------------ */
/* Handles                                                                  */
/* ------------------------------------------------------------------------ */

/* PJRT_Error and PJRT_Memory are not fully opaque at this version: both
 * begin with a pointer to a function table (declared below). Everything
 * else is an opaque handle whose layout belongs to the implementation. */
typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Memory PJRT_Memory;

typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_TopologyDescription PJRT_TopologyDescription;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_ExecuteContext PJRT_ExecuteContext;
typedef struct PJRT_CopyToDeviceStream PJRT_CopyToDeviceStream;
typedef struct PJRT_AsyncHostToDeviceTransferManager
    PJRT_AsyncHostToDeviceTransferManager;
typedef struct PJRT_AsyncTrackingEvent PJRT_AsyncTrackingEvent;
typedef struct PJRT_FulfillAliasBufferCallback PJRT_FulfillAliasBufferCallback;
typedef struct PJRT_PhaseCompiler PJRT_PhaseCompiler;
typedef struct PJRT_MultiSlice_Config PJRT_MultiSlice_Config;
typedef struct PJRT_Device_Attributes PJRT_Device_Attributes;
typedef struct PJRT_DeviceAssignmentSerialized PJRT_DeviceAssignmentSerialized;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_SerializedCompileOptions PJRT_SerializedCompileOptions;
typedef struct PJRT_SerializedTopology PJRT_SerializedTopology;

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

/* Same numbering as absl::StatusCode. */
typedef enum {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_CANCELLED = 1,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_DEADLINE_EXCEEDED = 4,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_ALREADY_EXISTS = 6,
  PJRT_Error_Code_PERMISSION_DENIED = 7,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_ABORTED = 10,
  PJRT_Error_Code_OUT_OF_RANGE = 11,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
  PJRT_Error_Code_DATA_LOSS = 15,
  PJRT_Error_Code_UNAUTHENTICATED = 16
} PJRT_Error_Code;

/* Called once per (key, value) payload attached to an error. */
typedef void (*PJRT_Error_PayloadVisitor)(const char* key, size_t key_size,
                                          const char* value, size_t value_size,
                                          void* user_arg);

/* Per-implementation operations on its own errors. `instance_size` is the
 * size of the implementation's PJRT_Error object. */
typedef struct PJRT_Error_FunctionTable {
  size_t struct_size;
  size_t instance_size;
  PJRT_Extension_Base* extension_start;
  void (*destroy)(PJRT_Error* error);
  void (*message)(const PJRT_Error* error, const char** message,
                  size_t* message_size);
  PJRT_Error_Code (*get_code)(const PJRT_Error* error);
  void (*for_each_payload)(const PJRT_Error* error,
                           PJRT_Error_PayloadVisitor visitor, void* user_arg);
} PJRT_Error_FunctionTable;

/* An implementation's error object starts with this member. */
struct PJRT_Error {
  const PJRT_Error_FunctionTable* vtable;
};

typedef struct PJRT_Error_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Error* error; /* may be NULL */
} PJRT_Error_Destroy_Args;
typedef void PJRT_Error_Destroy(PJRT_Error_Destroy_Args* args);

typedef struct PJRT_Error_Message_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  const char* message; /* out; lives as long as `error` */
  size_t message_size; /* out */
} PJRT_Error_Message_Args;
typedef void PJRT_Error_Message(PJRT_Error_Message_Args* args);

typedef struct PJRT_Error_GetCode_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_Code code; /* out */
} PJRT_Error_GetCode_Args;
typedef PJRT_Error* PJRT_Error_GetCode(PJRT_Error_GetCode_Args* args);

typedef struct PJRT_Error_ForEachPayload_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_PayloadVisitor visitor;
  void* user_arg;
} PJRT_Error_ForEachPayload_Args;
typedef PJRT_Error* PJRT_Error_ForEachPayload(
    PJRT_Error_ForEachPayload_Args* args);

/* Handed by an implementation to callbacks it invokes, so that the callback
 * can build an error to return; the message is copied. */
typedef PJRT_Error* (*PJRT_CallbackError)(PJRT_Error_Code code,
                                          const char* message,
                                          size_t message_size);

/* ------------------------------------------------------------------------ */
/* Named values (options and attributes)                                    */
/* ------------------------------------------------------------------------ */

typedef enum {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64 = 1,
  PJRT_NamedValue_kInt64List = 2,
  PJRT_NamedValue_kFloat = 3,
  PJRT_NamedValue_kBool = 4
} PJRT_NamedValue_Type;

typedef struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size; /* element count for strings and lists, 1 for scalars */
} PJRT_NamedValue;

/* ------------------------------------------------------------------------ */
/* Plugin                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_Plugin_Initialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
} PJRT_Plugin_Initialize_Args;
typedef PJRT_Error* PJRT_Plugin_Initialize(PJRT_Plugin_Initialize_Args* args);

typedef struct PJRT_Plugin_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* attributes; /* out; process lifetime */
  size_t num_attributes;             /* out */
} PJRT_Plugin_Attributes_Args;
typedef PJRT_Error* PJRT_Plugin_Attributes(PJRT_Plugin_Attributes_Args* args);

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_Event_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Destroy_Args;
typedef PJRT_Error* PJRT_Event_Destroy(PJRT_Event_Destroy_Args* args);

typedef struct PJRT_Event_IsReady_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  bool is_ready; /* out */
} PJRT_Event_IsReady_Args;
typedef PJRT_Error* PJRT_Event_IsReady(PJRT_Event_IsReady_Args* args);

/* Returns the event's own error (a fresh PJRT_Error the caller frees). */
typedef struct PJRT_Event_Error_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Error_Args;
typedef PJRT_Error* PJRT_Event_Error(PJRT_Event_Error_Args* args);

/* Blocks until ready; returns the event's error. */
typedef struct PJRT_Event_Await_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Await_Args;
typedef PJRT_Error* PJRT_Event_Await(PJRT_Event_Await_Args* args);

/* The callback receives ownership of `error` (NULL when the event succeeded)
 * and may run on any thread. */
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error* error, void* user_arg);

typedef struct PJRT_Event_OnReady_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  PJRT_Event_OnReadyCallback callback;
  void* user_arg;
} PJRT_Event_OnReady_Args;
typedef PJRT_Error* PJRT_Event_OnReady(PJRT_Event_OnReady_Args* args);

/* A caller-completed event (see PJRT_Event_Set). */
typedef struct PJRT_Event_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event; /* out */
} PJRT_Event_Create_Args;
typedef PJRT_Error* PJRT_Event_Create(PJRT_Event_Create_Args* args);

typedef struct PJRT_Event_Set_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event; /* from PJRT_Event_Create */
  PJRT_Error_Code error_code;
  const char* error_message; /* copied */
  size_t error_message_size;
} PJRT_Event_Set_Args;
typedef PJRT_Error* PJRT_Event_Set(PJRT_Event_Set_Args* args);

/* ------------------------------------------------------------------------ */
/* Key-value store callbacks (multi-process clients)                        */
/* ------------------------------------------------------------------------ */

typedef void (*PJRT_KeyValueGetCallback_ValueDeleter)(char* value);

typedef struct PJRT_KeyValueGetCallback_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* key;
  size_t key_size;
  int timeout_in_ms;
  PJRT_CallbackError* callback_error;
  void* user_arg;
  char* value;       /* out */
  size_t value_size; /* out */
  PJRT_KeyValueGetCallback_ValueDeleter value_deleter_callback; /* out */
} PJRT_KeyValueGetCallback_Args;
typedef PJRT_Error* (*PJRT_KeyValueGetCallback)(
    PJRT_KeyValueGetCallback_Args* args);

typedef void (*PJRT_KeyValueTryGetCallback_ValueDeleter)(char* value);

typedef struct PJRT_KeyValueTryGetCallback_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* key;
  size_t key_size;
  PJRT_CallbackError* callback_error;
  void* user_arg;
  char* value;       /* out */
  size_t value_size; /* out */
  PJRT_KeyValueTryGetCallback_ValueDeleter value_deleter_callback; /* out */
} PJRT_KeyValueTryGetCallback_Args;
typedef PJRT_Error* (*PJRT_KeyValueTryGetCallback)(
    PJRT_KeyValueTryGetCallback_Args* args);

typedef struct PJRT_KeyValuePutCallback_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* key;
  size_t key_size;
  const char* value; /* valid during the call only */
  size_t value_size;
  PJRT_CallbackError* callback_error;
  void* user_arg;
} PJRT_KeyValuePutCallback_Args;
typedef PJRT_Error* (*PJRT_KeyValuePutCallback)(
    PJRT_KeyValuePutCallback_Args* args);

/* ------------------------------------------------------------------------ */
/* Element types, host-buffer semantics, layouts                            */
/* ------------------------------------------------------------------------ */

typedef enum {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S16 = 3,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_U16 = 7,
  PJRT_Buffer_Type_U32 = 8,
  PJRT_Buffer_Type_U64 = 9,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
  PJRT_Buffer_Type_C64 = 14,
  PJRT_Buffer_Type_C128 = 15,
  PJRT_Buffer_Type_F8E5M2 = 16,
  PJRT_Buffer_Type_F8E4M3FN = 17,
  PJRT_Buffer_Type_F8E4M3B11FNUZ = 18,
  PJRT_Buffer_Type_F8E5M2FNUZ = 19,
  PJRT_Buffer_Type_F8E4M3FNUZ = 20,
  PJRT_Buffer_Type_S4 = 21,
  PJRT_Buffer_Type_U4 = 22,
  PJRT_Buffer_Type_TOKEN = 23,
  PJRT_Buffer_Type_S2 = 24,
  PJRT_Buffer_Type_U2 = 25,
  PJRT_Buffer_Type_F8E4M3 = 26,
  PJRT_Buffer_Type_F8E3M4 = 27,
  PJRT_Buffer_Type_F8E8M0FNU = 28,
  PJRT_Buffer_Type_F4E2M1FN = 29,
  PJRT_Buffer_Type_S1 = 30,
  PJRT_Buffer_Type_U1 = 31,
  PJRT_Buffer_Type_F6E2M3FN = 32,
  PJRT_Buffer_Type_F6E3M2FN = 33
} PJRT_Buffer_Type;

/* What the runtime may do with the caller's host memory in
 * PJRT_Client_BufferFromHostBuffer. */
typedef enum {
  /* copied before the call returns */
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  /* caller keeps it unchanged until done_with_host_buffer fires */
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
  /* runtime may alias it, read-only, for the buffer's lifetime */
  PJRT_HostBufferSemantics_kImmutableZeroCopy = 2,
  /* runtime may alias it and also write to it */
  PJRT_HostBufferSemantics_kMutableZeroCopy = 3
} PJRT_HostBufferSemantics;

typedef enum {
  PJRT_Buffer_MemoryLayout_Type_Tiled = 0,
  PJRT_Buffer_MemoryLayout_Type_Strides = 1
} PJRT_Buffer_MemoryLayout_Type;

typedef struct PJRT_Buffer_MemoryLayout_Tiled {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const int64_t* minor_to_major; /* logical dim index per physical dim */
  size_t minor_to_major_size;
  const int64_t* tile_dims;     /* all tiles' dims, concatenated */
  const size_t* tile_dim_sizes; /* rank of each tile; num_tiles entries */
  size_t num_tiles;
} PJRT_Buffer_MemoryLayout_Tiled;

typedef struct PJRT_Buffer_MemoryLayout_Strides {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const int64_t* byte_strides; /* one per dim; may be negative */
  size_t num_byte_strides;
} PJRT_Buffer_MemoryLayout_Strides;

typedef struct PJRT_Buffer_MemoryLayout {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  union {
    PJRT_Buffer_MemoryLayout_Tiled tiled;
    PJRT_Buffer_MemoryLayout_Strides strides;
  };
  PJRT_Buffer_MemoryLayout_Type type;
} PJRT_Buffer_MemoryLayout;

/* dims + element type, used when asking for buffers ahead of their data. */
typedef struct PJRT_ShapeSpec {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_Type element_type;
} PJRT_ShapeSpec;

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_Client_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  PJRT_KeyValueGetCallback kv_get_callback;
  void* kv_get_user_arg;
  PJRT_KeyValuePutCallback kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client; /* out */
  PJRT_KeyValueTryGetCallback kv_try_get_callback;
  void* kv_try_get_user_arg;
} PJRT_Client_Create_Args;
typedef PJRT_Error* PJRT_Client_Create(PJRT_Client_Create_Args* args);

typedef struct PJRT_Client_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
} PJRT_Client_Destroy_Args;
typedef PJRT_Error* PJRT_Client_Destroy(PJRT_Client_Destroy_Args* args);

typedef struct PJRT_Client_PlatformName_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* platform_name; /* out; owned by client */
  size_t platform_name_size; /* out */
} PJRT_Client_PlatformName_Args;
typedef PJRT_Error* PJRT_Client_PlatformName(
    PJRT_Client_PlatformName_Args* args);

typedef struct PJRT_Client_ProcessIndex_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int process_index; /* out */
} PJRT_Client_ProcessIndex_Args;
typedef PJRT_Error* PJRT_Client_ProcessIndex(
    PJRT_Client_ProcessIndex_Args* args);

typedef struct PJRT_Client_PlatformVersion_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* platform_version; /* out; owned by client */
  size_t platform_version_size; /* out */
} PJRT_Client_PlatformVersion_Args;
typedef PJRT_Error* PJRT_Client_PlatformVersion(
    PJRT_Client_PlatformVersion_Args* args);

typedef struct PJRT_Client_TopologyDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_TopologyDescription* topology; /* out; owned by client */
} PJRT_Client_TopologyDescription_Args;
typedef PJRT_Error* PJRT_Client_TopologyDescription(
    PJRT_Client_TopologyDescription_Args* args);

typedef struct PJRT_Client_Devices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* devices; /* out; owned by client */
  size_t num_devices;          /* out */
} PJRT_Client_Devices_Args;
typedef PJRT_Error* PJRT_Client_Devices(PJRT_Client_Devices_Args* args);

typedef struct PJRT_Client_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* addressable_devices; /* out */
  size_t num_addressable_devices;          /* out */
} PJRT_Client_AddressableDevices_Args;
typedef PJRT_Error* PJRT_Client_AddressableDevices(
    PJRT_Client_AddressableDevices_Args* args);

typedef struct PJRT_Client_LookupDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int id; /* global device id */
  PJRT_Device* device; /* out */
} PJRT_Client_LookupDevice_Args;
typedef PJRT_Error* PJRT_Client_LookupDevice(
    PJRT_Client_LookupDevice_Args* args);

typedef struct PJRT_Client_LookupAddressableDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int local_hardware_id;
  PJRT_Device* addressable_device; /* out */
} PJRT_Client_LookupAddressableDevice_Args;
typedef PJRT_Error* PJRT_Client_LookupAddressableDevice(
    PJRT_Client_LookupAddressableDevice_Args* args);

typedef enum {
  PJRT_ProcessState_kUnspecified = 0,
  PJRT_ProcessState_kUninitialized = 1,
  PJRT_ProcessState_kDisconnected = 2,
  PJRT_ProcessState_kConnected = 3,
  PJRT_ProcessState_kError = 4
} PJRT_ProcessState;

typedef struct PJRT_ProcessInfo {
  size_t struct_size;
  int task_id;
  uint64_t incarnation_id;
  PJRT_ProcessState state;
  int error_code;
  const char* error_message;
  size_t error_message_size;
} PJRT_ProcessInfo;

typedef struct PJRT_Client_UpdateGlobalProcessInfo_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_ProcessInfo* process_infos;
  size_t num_process_infos;
} PJRT_Client_UpdateGlobalProcessInfo_Args;
typedef PJRT_Error* PJRT_Client_UpdateGlobalProcessInfo(
    PJRT_Client_UpdateGlobalProcessInfo_Args* args);

typedef struct PJRT_Client_AddressableMemories_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Memory* const* addressable_memories; /* out */
  size_t num_addressable_memories;          /* out */
} PJRT_Client_AddressableMemories_Args;
typedef PJRT_Error* PJRT_Client_AddressableMemories(
    PJRT_Client_AddressableMemories_Args* args);

/* A program to compile. `format` is "hlo" (HloModuleProto bytes),
 * "hlo_with_config" (HloModuleProtoWithConfig bytes) or "mlir" (MLIR text
 * or bytecode, StableHLO). Sizes exclude any terminating NUL. When a plugin
 * fills one (Executable_OptimizedProgram), `code` is caller-allocated. */
typedef struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  char* code;
  size_t code_size;
  const char* format;
  size_t format_size;
} PJRT_Program;

/* compile_options: serialized xla.CompileOptionsProto. */
typedef struct PJRT_Client_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options;
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable; /* out */
} PJRT_Client_Compile_Args;
typedef PJRT_Error* PJRT_Client_Compile(PJRT_Client_Compile_Args* args);

/* Loads an unloaded executable (e.g. from PJRT_Compile) onto a client. */
typedef struct PJRT_Client_Load_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Executable* executable;
  const char* compile_options;
  size_t compile_options_size;
  PJRT_LoadedExecutable* loaded_executable; /* out */
} PJRT_Client_Load_Args;
typedef PJRT_Error* PJRT_Client_Load(PJRT_Client_Load_Args* args);

/* Fills a caller-allocated int array of num_replicas*num_partitions device
 * ids (replica-major). */
typedef struct PJRT_Client_DefaultDeviceAssignment_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int num_replicas;
  int num_partitions;
  size_t default_assignment_size;
  int* default_assignment; /* in: storage; out: contents */
} PJRT_Client_DefaultDeviceAssignment_Args;
typedef PJRT_Error* PJRT_Client_DefaultDeviceAssignment(
    PJRT_Client_DefaultDeviceAssignment_Args* args);

typedef struct PJRT_Client_DmaMap_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  void* data;
  size_t size;
} PJRT_Client_DmaMap_Args;
typedef PJRT_Error* PJRT_Client_DmaMap(PJRT_Client_DmaMap_Args* args);

typedef struct PJRT_Client_DmaUnmap_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  void* data;
} PJRT_Client_DmaUnmap_Args;
typedef PJRT_Error* PJRT_Client_DmaUnmap(PJRT_Client_DmaUnmap_Args* args);

typedef struct PJRT_Client_BufferFromHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides; /* NULL/0 entries: dense major-to-minor */
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device* device;                     /* set this or `memory` */
  PJRT_Memory* memory;                     /* preferred over `device` */
  PJRT_Buffer_MemoryLayout* device_layout; /* NULL: default layout */
  PJRT_Event* done_with_host_buffer;       /* out */
  PJRT_Buffer* buffer;                     /* out */
} PJRT_Client_BufferFromHostBuffer_Args;
typedef PJRT_Error* PJRT_Client_BufferFromHostBuffer(
    PJRT_Client_BufferFromHostBuffer_Args* args);

/* Wraps existing device memory without copying. */
typedef struct PJRT_Client_CreateViewOfDeviceBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  void* device_buffer_ptr;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_Type element_type;
  PJRT_Buffer_MemoryLayout* layout;
  PJRT_Device* device; /* superseded by `memory` */
  void (*on_delete_callback)(void* device_buffer_ptr, void* user_arg);
  void* on_delete_callback_arg;
  intptr_t stream;
  PJRT_Buffer* buffer; /* out */
  PJRT_Memory* memory;
} PJRT_Client_CreateViewOfDeviceBuffer_Args;
typedef PJRT_Error* PJRT_Client_CreateViewOfDeviceBuffer(
    PJRT_Client_CreateViewOfDeviceBuffer_Args* args);

typedef struct PJRT_Client_CreateUninitializedBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Device* device;
  PJRT_Memory* memory;
  PJRT_Buffer* buffer; /* out */
} PJRT_Client_CreateUninitializedBuffer_Args;
typedef PJRT_Error* PJRT_Client_CreateUninitializedBuffer(
    PJRT_Client_CreateUninitializedBuffer_Args* args);

/* A buffer that is already failed with the given error. */
typedef struct PJRT_Client_CreateErrorBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Memory* memory;
  PJRT_Buffer* buffer; /* out */
  const PJRT_NamedValue* payload;
  size_t num_payload;
} PJRT_Client_CreateErrorBuffer_Args;
typedef PJRT_Error* PJRT_Client_CreateErrorBuffer(
    PJRT_Client_CreateErrorBuffer_Args* args);

/* A placeholder buffer completed later by PJRT_Client_FulfillAliasBuffer. */
typedef struct PJRT_Client_CreateAliasBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Memory* memory;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Buffer* alias_buffer;                                /* out */
  PJRT_FulfillAliasBufferCallback* fulfill_alias_buffer_cb; /* out */
} PJRT_Client_CreateAliasBuffer_Args;
typedef PJRT_Error* PJRT_Client_CreateAliasBuffer(
    PJRT_Client_CreateAliasBuffer_Args* args);

typedef struct PJRT_Client_FulfillAliasBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Buffer* buffer; /* the real buffer, on success */
  PJRT_Error_Code status_code;
  const char* error_message;
  size_t error_message_size;
  PJRT_FulfillAliasBufferCallback* fulfill_alias_buffer_cb;
} PJRT_Client_FulfillAliasBuffer_Args;
typedef PJRT_Error* PJRT_Client_FulfillAliasBuffer(
    PJRT_Client_FulfillAliasBuffer_Args* args);

typedef struct PJRT_Client_CreateBuffersForAsyncHostToDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_ShapeSpec* shape_specs;
  size_t num_shape_specs;
  PJRT_Buffer_MemoryLayout** device_layouts; /* optional, per shape */
  size_t num_device_layouts;
  PJRT_Memory* memory;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager; /* out */
} PJRT_Client_CreateBuffersForAsyncHostToDevice_Args;
typedef PJRT_Error* PJRT_Client_CreateBuffersForAsyncHostToDevice(
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args* args);

/* ------------------------------------------------------------------------ */
/* Asynchronous host-to-device transfer manager                             */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_AsyncHostToDeviceTransferManager_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
} PJRT_AsyncHostToDeviceTransferManager_Destroy_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_Destroy(
    PJRT_AsyncHostToDeviceTransferManager_Destroy_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_TransferData_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  const void* data;
  int64_t offset;
  int64_t transfer_size;
  bool is_last_transfer;
  PJRT_Event* done_with_h2d_transfer; /* out */
} PJRT_AsyncHostToDeviceTransferManager_TransferData_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_TransferData(
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  PJRT_Buffer* buffer_out; /* out */
} PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_Device_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  PJRT_Device* device_out; /* out */
} PJRT_AsyncHostToDeviceTransferManager_Device_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_Device(
    PJRT_AsyncHostToDeviceTransferManager_Device_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  size_t buffer_count; /* out */
} PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_BufferCount(
    PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  size_t buffer_size; /* out */
} PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_BufferSize(
    PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
} PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_SetBufferError(
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  const PJRT_NamedValue* transfer_metadata;
  size_t num_metadata;
} PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_AddMetadata(
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args* args);

typedef struct PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  const void* data;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Event* done_with_h2d_transfer; /* out */
} PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args;
typedef PJRT_Error* PJRT_AsyncHostToDeviceTransferManager_TransferLiteral(
    PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args* args);

/* ------------------------------------------------------------------------ */
/* Device descriptions and devices                                          */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_DeviceDescription_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int id; /* out; global id */
} PJRT_DeviceDescription_Id_Args;
typedef PJRT_Error* PJRT_DeviceDescription_Id(
    PJRT_DeviceDescription_Id_Args* args);

typedef struct PJRT_DeviceDescription_ProcessIndex_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int process_index; /* out */
} PJRT_DeviceDescription_ProcessIndex_Args;
typedef PJRT_Error* PJRT_DeviceDescription_ProcessIndex(
    PJRT_DeviceDescription_ProcessIndex_Args* args);

/* Note: the count comes before the pointer in this one struct. */
typedef struct PJRT_DeviceDescription_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  size_t num_attributes;             /* out */
  const PJRT_NamedValue* attributes; /* out */
} PJRT_DeviceDescription_Attributes_Args;
typedef PJRT_Error* PJRT_DeviceDescription_Attributes(
    PJRT_DeviceDescription_Attributes_Args* args);

typedef struct PJRT_DeviceDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* device_kind; /* out */
  size_t device_kind_size; /* out */
} PJRT_DeviceDescription_Kind_Args;
typedef PJRT_Error* PJRT_DeviceDescription_Kind(
    PJRT_DeviceDescription_Kind_Args* args);

typedef struct PJRT_DeviceDescription_DebugString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* debug_string; /* out */
  size_t debug_string_size; /* out */
} PJRT_DeviceDescription_DebugString_Args;
typedef PJRT_Error* PJRT_DeviceDescription_DebugString(
    PJRT_DeviceDescription_DebugString_Args* args);

typedef struct PJRT_DeviceDescription_ToString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* to_string; /* out */
  size_t to_string_size; /* out */
} PJRT_DeviceDescription_ToString_Args;
typedef PJRT_Error* PJRT_DeviceDescription_ToString(
    PJRT_DeviceDescription_ToString_Args* args);

typedef struct PJRT_Device_GetDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description; /* out */
} PJRT_Device_GetDescription_Args;
typedef PJRT_Error* PJRT_Device_GetDescription(
    PJRT_Device_GetDescription_Args* args);

typedef struct PJRT_Device_IsAddressable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  bool is_addressable; /* out */
} PJRT_Device_IsAddressable_Args;
typedef PJRT_Error* PJRT_Device_IsAddressable(
    PJRT_Device_IsAddressable_Args* args);

typedef struct PJRT_Device_LocalHardwareId_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int local_hardware_id; /* out; -1 if none */
} PJRT_Device_LocalHardwareId_Args;
typedef PJRT_Error* PJRT_Device_LocalHardwareId(
    PJRT_Device_LocalHardwareId_Args* args);

typedef struct PJRT_Device_AddressableMemories_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_Memory* const* memories; /* out */
  size_t num_memories;          /* out */
} PJRT_Device_AddressableMemories_Args;
typedef PJRT_Error* PJRT_Device_AddressableMemories(
    PJRT_Device_AddressableMemories_Args* args);

typedef struct PJRT_Device_DefaultMemory_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_Memory* memory; /* out */
} PJRT_Device_DefaultMemory_Args;
typedef PJRT_Error* PJRT_Device_DefaultMemory(
    PJRT_Device_DefaultMemory_Args* args);

/* Each optional statistic has a following `_is_set` flag. */
typedef struct PJRT_Device_MemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int64_t bytes_in_use; /* out, always set */
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
} PJRT_Device_MemoryStats_Args;
typedef PJRT_Error* PJRT_Device_MemoryStats(PJRT_Device_MemoryStats_Args* args);

typedef struct PJRT_Device_ClearMemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
} PJRT_Device_ClearMemoryStats_Args;
typedef PJRT_Error* PJRT_Device_ClearMemoryStats(
    PJRT_Device_ClearMemoryStats_Args* args);

/* Fails the pending execution with `launch_id` on this device. */
typedef struct PJRT_Device_PoisonExecution_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int32_t launch_id;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
  bool poisoned; /* out */
  const PJRT_NamedValue* payload;
  size_t num_payload;
} PJRT_Device_PoisonExecution_Args;
typedef PJRT_Error* PJRT_Device_PoisonExecution(
    PJRT_Device_PoisonExecution_Args* args);

/* Attributes with an owner object the caller releases via the deleter. */
typedef struct PJRT_Device_GetAttributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  const PJRT_NamedValue* attributes;          /* out */
  size_t num_attributes;                      /* out */
  PJRT_Device_Attributes* device_attributes;  /* out */
  void (*attributes_deleter)(PJRT_Device_Attributes* device_attributes);
} PJRT_Device_GetAttributes_Args;
typedef PJRT_Error* PJRT_Device_GetAttributes(
    PJRT_Device_GetAttributes_Args* args);

typedef struct PJRT_Device_CreateAsyncTrackingEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  const char* description;
  size_t description_size;
  PJRT_AsyncTrackingEvent* event; /* out */
} PJRT_Device_CreateAsyncTrackingEvent_Args;
typedef PJRT_Error* PJRT_Device_CreateAsyncTrackingEvent(
    PJRT_Device_CreateAsyncTrackingEvent_Args* args);

typedef struct PJRT_AsyncTrackingEvent_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncTrackingEvent* event;
} PJRT_AsyncTrackingEvent_Destroy_Args;
typedef PJRT_Error* PJRT_AsyncTrackingEvent_Destroy(
    PJRT_AsyncTrackingEvent_Destroy_Args* args);

/* ------------------------------------------------------------------------ */
/* Memories                                                                 */
/* ------------------------------------------------------------------------ */

/* Lets a client hang its own data off an implementation's memory object.
 * `instance_struct_size` is the size of the implementation's PJRT_Memory. */
typedef struct PJRT_Memory_FunctionTable {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  size_t instance_struct_size;
  void* (*get_user_data)(PJRT_Memory* memory, const void* key);
  void (*set_user_data)(PJRT_Memory* memory, const void* key, void* data,
                        void (*dtor)(void*));
} PJRT_Memory_FunctionTable;

/* An implementation's memory object starts with this member. */
struct PJRT_Memory {
  const PJRT_Memory_FunctionTable* vtable;
};

typedef struct PJRT_Memory_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  int id; /* out */
} PJRT_Memory_Id_Args;
typedef PJRT_Error* PJRT_Memory_Id(PJRT_Memory_Id_Args* args);

typedef struct PJRT_Memory_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  const char* kind; /* out, e.g. "device", "pinned_host", "unpinned_host" */
  size_t kind_size; /* out */
} PJRT_Memory_Kind_Args;
typedef PJRT_Error* PJRT_Memory_Kind(PJRT_Memory_Kind_Args* args);

typedef struct PJRT_Memory_Kind_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  int kind_id; /* out */
} PJRT_Memory_Kind_Id_Args;
typedef PJRT_Error* PJRT_Memory_Kind_Id(PJRT_Memory_Kind_Id_Args* args);

typedef struct PJRT_Memory_DebugString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  const char* debug_string; /* out */
  size_t debug_string_size; /* out */
} PJRT_Memory_DebugString_Args;
typedef PJRT_Error* PJRT_Memory_DebugString(PJRT_Memory_DebugString_Args* args);

typedef struct PJRT_Memory_ToString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  const char* to_string; /* out */
  size_t to_string_size; /* out */
} PJRT_Memory_ToString_Args;
typedef PJRT_Error* PJRT_Memory_ToString(PJRT_Memory_ToString_Args* args);

typedef struct PJRT_Memory_AddressableByDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  PJRT_Device* const* devices; /* out */
  size_t num_devices;          /* out */
} PJRT_Memory_AddressableByDevices_Args;
typedef PJRT_Error* PJRT_Memory_AddressableByDevices(
    PJRT_Memory_AddressableByDevices_Args* args);

/* ------------------------------------------------------------------------ */
/* Execute context                                                          */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_ExecuteContext_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context; /* out */
} PJRT_ExecuteContext_Create_Args;
typedef PJRT_Error* PJRT_ExecuteContext_Create(
    PJRT_ExecuteContext_Create_Args* args);

typedef struct PJRT_ExecuteContext_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context;
} PJRT_ExecuteContext_Destroy_Args;
typedef PJRT_Error* PJRT_ExecuteContext_Destroy(
    PJRT_ExecuteContext_Destroy_Args* args);

/* ------------------------------------------------------------------------ */
/* Executables                                                              */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_Executable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
} PJRT_Executable_Destroy_Args;
typedef PJRT_Error* PJRT_Executable_Destroy(PJRT_Executable_Destroy_Args* args);

typedef struct PJRT_LoadedExecutable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
} PJRT_LoadedExecutable_Destroy_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_Destroy(
    PJRT_LoadedExecutable_Destroy_Args* args);

/* The returned PJRT_Executable is a new reference: destroy it. */
typedef struct PJRT_LoadedExecutable_GetExecutable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable; /* out */
} PJRT_LoadedExecutable_GetExecutable_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_GetExecutable(
    PJRT_LoadedExecutable_GetExecutable_Args* args);

/* Serialized xla.DeviceAssignmentProto, freed through the deleter. */
typedef struct PJRT_LoadedExecutable_GetDeviceAssignment_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  const char* serialized_bytes;                                  /* out */
  size_t serialized_bytes_size;                                  /* out */
  PJRT_DeviceAssignmentSerialized* serialized_device_assignment; /* out */
  void (*serialized_device_assignment_deleter)(
      PJRT_DeviceAssignmentSerialized* da); /* out */
} PJRT_LoadedExecutable_GetDeviceAssignment_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_GetDeviceAssignment(
    PJRT_LoadedExecutable_GetDeviceAssignment_Args* args);

typedef struct PJRT_Executable_Name_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  const char* executable_name; /* out */
  size_t executable_name_size; /* out */
} PJRT_Executable_Name_Args;
typedef PJRT_Error* PJRT_Executable_Name(PJRT_Executable_Name_Args* args);

typedef struct PJRT_Executable_NumReplicas_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_replicas; /* out */
} PJRT_Executable_NumReplicas_Args;
typedef PJRT_Error* PJRT_Executable_NumReplicas(
    PJRT_Executable_NumReplicas_Args* args);

typedef struct PJRT_Executable_NumPartitions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_partitions; /* out */
} PJRT_Executable_NumPartitions_Args;
typedef PJRT_Error* PJRT_Executable_NumPartitions(
    PJRT_Executable_NumPartitions_Args* args);

typedef struct PJRT_LoadedExecutable_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_Device* const* addressable_devices; /* out */
  size_t num_addressable_devices;          /* out */
} PJRT_LoadedExecutable_AddressableDevices_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_AddressableDevices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args);

typedef struct PJRT_LogicalDeviceIds {
  int replica;
  int partition;
} PJRT_LogicalDeviceIds;

typedef struct PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_LogicalDeviceIds* addressable_device_logical_ids; /* out */
  size_t num_addressable_device_logical_ids;             /* out */
} PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_AddressableDeviceLogicalIds(
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args* args);

/* Two-call protocol: with program->code == NULL the plugin sets
 * program->code_size; the caller then allocates `code` and calls again. */
typedef struct PJRT_Executable_OptimizedProgram_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  PJRT_Program* program; /* in/out */
} PJRT_Executable_OptimizedProgram_Args;
typedef PJRT_Error* PJRT_Executable_OptimizedProgram(
    PJRT_Executable_OptimizedProgram_Args* args);

typedef struct PJRT_LoadedExecutable_Delete_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
} PJRT_LoadedExecutable_Delete_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_Delete(
    PJRT_LoadedExecutable_Delete_Args* args);

typedef struct PJRT_LoadedExecutable_IsDeleted_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  bool is_deleted; /* out */
} PJRT_LoadedExecutable_IsDeleted_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_IsDeleted(
    PJRT_LoadedExecutable_IsDeleted_Args* args);

/* A block of bytes with its own release function (host send/recv). */
typedef struct PJRT_Chunk {
  void* data;
  size_t size;
  void (*deleter)(void* data, void* deleter_arg);
  void* deleter_arg;
} PJRT_Chunk;

typedef PJRT_Error* (*PJRT_SendCallback)(PJRT_Chunk* chunk,
                                         PJRT_CallbackError* callback_error,
                                         size_t total_size_in_bytes, bool done,
                                         void* user_arg);
typedef void (*PJRT_RecvCallback)(PJRT_CopyToDeviceStream* stream,
                                  void* user_arg);

typedef struct PJRT_SendCallbackInfo {
  int64_t channel_id;
  void* user_arg;
  PJRT_SendCallback send_callback;
} PJRT_SendCallbackInfo;

typedef struct PJRT_RecvCallbackInfo {
  int64_t channel_id;
  void* user_arg;
  PJRT_RecvCallback recv_callback;
} PJRT_RecvCallbackInfo;

typedef void (*PJRT_HloOutputCallback)(int64_t replica_id,
                                       int64_t partition_id, const void* data,
                                       const int64_t* shape_dims,
                                       size_t shape_num_dims,
                                       PJRT_Buffer_Type shape_element_type,
                                       int64_t operand_index, void* user_arg);

typedef struct PJRT_HloOutputCallbackInfo {
  void* user_arg;
  PJRT_HloOutputCallback callback;
  int64_t callback_id;
  size_t num_operands;
} PJRT_HloOutputCallbackInfo;

typedef struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  /* send_callbacks[device][op]; recv likewise */
  PJRT_SendCallbackInfo** send_callbacks;
  PJRT_RecvCallbackInfo** recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  PJRT_ExecuteContext* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;            /* num_tasks entries */
  int64_t* incarnation_ids; /* num_tasks entries */
  PJRT_MultiSlice_Config* multi_slice_config;
  bool use_major_to_minor_data_layout_for_callbacks;
  PJRT_HloOutputCallbackInfo* hlo_output_callbacks;
  size_t num_hlo_output_callbacks;
} PJRT_ExecuteOptions;

/* argument_lists[num_devices][num_args]; output_lists is allocated by the
 * caller as [num_devices][NumOutputs] and filled by the plugin;
 * device_complete_events, when non-NULL, gets one event per device.
 * execute_device is only for single-device (portable) executables. */
typedef struct PJRT_LoadedExecutable_Execute_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists;
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists; /* in/out */
  PJRT_Event** device_complete_events; /* in/out */
  PJRT_Device* execute_device;
} PJRT_LoadedExecutable_Execute_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_Execute(
    PJRT_LoadedExecutable_Execute_Args* args);

typedef struct PJRT_Executable_NumOutputs_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs; /* out */
} PJRT_Executable_NumOutputs_Args;
typedef PJRT_Error* PJRT_Executable_NumOutputs(
    PJRT_Executable_NumOutputs_Args* args);

typedef struct PJRT_Executable_SizeOfGeneratedCodeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  int64_t size_in_bytes; /* out */
} PJRT_Executable_SizeOfGeneratedCodeInBytes_Args;
typedef PJRT_Error* PJRT_Executable_SizeOfGeneratedCodeInBytes(
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args* args);

typedef struct PJRT_Executable_Fingerprint_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  const char* executable_fingerprint; /* out */
  size_t executable_fingerprint_size; /* out */
} PJRT_Executable_Fingerprint_Args;
typedef PJRT_Error* PJRT_Executable_Fingerprint(
    PJRT_Executable_Fingerprint_Args* args);

/* Note: count before pointer. */
typedef struct PJRT_Executable_GetCostAnalysis_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_properties;             /* out */
  const PJRT_NamedValue* properties; /* out; owned by executable */
} PJRT_Executable_GetCostAnalysis_Args;
typedef PJRT_Error* PJRT_Executable_GetCostAnalysis(
    PJRT_Executable_GetCostAnalysis_Args* args);

typedef struct PJRT_Executable_GetCompiledMemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  /* all out */
  int64_t generated_code_size_in_bytes;
  int64_t argument_size_in_bytes;
  int64_t output_size_in_bytes;
  int64_t alias_size_in_bytes;
  int64_t temp_size_in_bytes;
  int64_t host_generated_code_size_in_bytes;
  int64_t host_argument_size_in_bytes;
  int64_t host_output_size_in_bytes;
  int64_t host_alias_size_in_bytes;
  int64_t host_temp_size_in_bytes;
  int64_t peak_memory_in_bytes;
  int64_t total_size_in_bytes;
  int64_t total_allocation_bytes;
  int64_t indefinite_allocations;
  int64_t peak_unpadded_heap_bytes;
} PJRT_Executable_GetCompiledMemoryStats_Args;
typedef PJRT_Error* PJRT_Executable_GetCompiledMemoryStats(
    PJRT_Executable_GetCompiledMemoryStats_Args* args);

typedef struct PJRT_Executable_OutputElementTypes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  PJRT_Buffer_Type* output_types; /* out */
  size_t num_output_types;        /* out */
} PJRT_Executable_OutputElementTypes_Args;
typedef PJRT_Error* PJRT_Executable_OutputElementTypes(
    PJRT_Executable_OutputElementTypes_Args* args);

/* dims of all outputs concatenated; dim_sizes[i] is output i's rank. */
typedef struct PJRT_Executable_OutputDimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;      /* out */
  const int64_t* dims;     /* out */
  const size_t* dim_sizes; /* out */
} PJRT_Executable_OutputDimensions_Args;
typedef PJRT_Error* PJRT_Executable_OutputDimensions(
    PJRT_Executable_OutputDimensions_Args* args);

typedef struct PJRT_Executable_ParameterMemoryKinds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_parameters;           /* out */
  const char* const* memory_kinds; /* out */
  const size_t* memory_kind_sizes; /* out */
} PJRT_Executable_ParameterMemoryKinds_Args;
typedef PJRT_Error* PJRT_Executable_ParameterMemoryKinds(
    PJRT_Executable_ParameterMemoryKinds_Args* args);

typedef struct PJRT_Executable_OutputMemoryKinds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;              /* out */
  const char* const* memory_kinds; /* out */
  const size_t* memory_kind_sizes; /* out */
} PJRT_Executable_OutputMemoryKinds_Args;
typedef PJRT_Error* PJRT_Executable_OutputMemoryKinds(
    PJRT_Executable_OutputMemoryKinds_Args* args);

/* The bytes live in `serialized_executable`, released by the deleter. */
typedef struct PJRT_Executable_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Executable* executable;
  const char* serialized_bytes;                     /* out */
  size_t serialized_bytes_size;                     /* out */
  PJRT_SerializedExecutable* serialized_executable; /* out */
  void (*serialized_executable_deleter)(
      PJRT_SerializedExecutable* exec); /* out */
} PJRT_Executable_Serialize_Args;
typedef PJRT_Error* PJRT_Executable_Serialize(
    PJRT_Executable_Serialize_Args* args);

/* Serialized xla.CompileOptionsProto the executable was built with. */
typedef struct PJRT_Executable_GetCompileOptions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  const char* serialized_bytes;                              /* out */
  size_t serialized_bytes_size;                              /* out */
  PJRT_SerializedCompileOptions* serialized_compile_options; /* out */
  void (*serialized_compile_options_deleter)(
      PJRT_SerializedCompileOptions* options); /* out */
} PJRT_Executable_GetCompileOptions_Args;
typedef PJRT_Error* PJRT_Executable_GetCompileOptions(
    PJRT_Executable_GetCompileOptions_Args* args);

/* Note: no extension_start in this struct. */
typedef struct PJRT_LoadOptions {
  size_t struct_size;
  const int32_t* computation_origin;
  size_t computation_origin_size;
  PJRT_MultiSlice_Config* multi_slice_config;
} PJRT_LoadOptions;

typedef struct PJRT_Executable_DeserializeAndLoad_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable; /* out */
  const char* overridden_serialized_compile_options; /* optional */
  size_t overridden_serialized_compile_options_size;
  PJRT_LoadOptions* load_options; /* optional */
} PJRT_Executable_DeserializeAndLoad_Args;
typedef PJRT_Error* PJRT_Executable_DeserializeAndLoad(
    PJRT_Executable_DeserializeAndLoad_Args* args);

/* Superseded by PJRT_Executable_Fingerprint. */
typedef struct PJRT_LoadedExecutable_Fingerprint_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  const char* executable_fingerprint; /* out */
  size_t executable_fingerprint_size; /* out */
} PJRT_LoadedExecutable_Fingerprint_Args;
typedef PJRT_Error* PJRT_LoadedExecutable_Fingerprint(
    PJRT_LoadedExecutable_Fingerprint_Args* args);

/* ------------------------------------------------------------------------ */
/* Buffers                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_Buffer_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_Destroy_Args;
typedef PJRT_Error* PJRT_Buffer_Destroy(PJRT_Buffer_Destroy_Args* args);

typedef struct PJRT_Buffer_ElementType_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_Type type; /* out */
} PJRT_Buffer_ElementType_Args;
typedef PJRT_Error* PJRT_Buffer_ElementType(PJRT_Buffer_ElementType_Args* args);

typedef struct PJRT_Buffer_Dimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const int64_t* dims; /* out; owned by buffer */
  size_t num_dims;     /* out */
} PJRT_Buffer_Dimensions_Args;
typedef PJRT_Error* PJRT_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args* args);

typedef struct PJRT_Buffer_UnpaddedDimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const int64_t* unpadded_dims; /* out */
  size_t num_dims;              /* out */
} PJRT_Buffer_UnpaddedDimensions_Args;
typedef PJRT_Error* PJRT_Buffer_UnpaddedDimensions(
    PJRT_Buffer_UnpaddedDimensions_Args* args);

typedef struct PJRT_Buffer_DynamicDimensionIndices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const size_t* dynamic_dim_indices; /* out */
  size_t num_dynamic_dims;           /* out */
} PJRT_Buffer_DynamicDimensionIndices_Args;
typedef PJRT_Error* PJRT_Buffer_DynamicDimensionIndices(
    PJRT_Buffer_DynamicDimensionIndices_Args* args);

/* Deprecated by the layouts extension; `layout` is held by value. */
typedef struct PJRT_Buffer_GetMemoryLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_MemoryLayout layout; /* out */
} PJRT_Buffer_GetMemoryLayout_Args;
typedef PJRT_Error* PJRT_Buffer_GetMemoryLayout(
    PJRT_Buffer_GetMemoryLayout_Args* args);

/* With dst == NULL only dst_size is reported. */
typedef struct PJRT_Buffer_ToHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* src;
  PJRT_Buffer_MemoryLayout* host_layout; /* NULL: the device buffer's own layout */
  void* dst;
  size_t dst_size;   /* in/out */
  PJRT_Event* event; /* out */
} PJRT_Buffer_ToHostBuffer_Args;
typedef PJRT_Error* PJRT_Buffer_ToHostBuffer(
    PJRT_Buffer_ToHostBuffer_Args* args);

typedef struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  size_t on_device_size_in_bytes; /* out */
} PJRT_Buffer_OnDeviceSizeInBytes_Args;
typedef PJRT_Error* PJRT_Buffer_OnDeviceSizeInBytes(
    PJRT_Buffer_OnDeviceSizeInBytes_Args* args);

typedef struct PJRT_Buffer_Delete_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_Delete_Args;
typedef PJRT_Error* PJRT_Buffer_Delete(PJRT_Buffer_Delete_Args* args);

typedef struct PJRT_Buffer_IsDeleted_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  bool is_deleted; /* out */
} PJRT_Buffer_IsDeleted_Args;
typedef PJRT_Error* PJRT_Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args* args);

typedef struct PJRT_Buffer_CopyRawToHost_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* dst;
  int64_t offset;
  int64_t transfer_size;
  PJRT_Event* event; /* out */
} PJRT_Buffer_CopyRawToHost_Args;
typedef PJRT_Error* PJRT_Buffer_CopyRawToHost(
    PJRT_Buffer_CopyRawToHost_Args* args);

/* Passed to the caller's future_ready_callback; no extension_start. */
typedef struct PJRT_Buffer_CopyRawToHostFuture_Callback_Args {
  size_t struct_size;
  void* callback_data;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
  void* dst;
} PJRT_Buffer_CopyRawToHostFuture_Callback_Args;

typedef struct PJRT_Buffer_CopyRawToHostFuture_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  int64_t offset;
  int64_t transfer_size;
  PJRT_Event* event;   /* out */
  void* callback_data; /* out */
  void (*future_ready_callback)(
      PJRT_Buffer_CopyRawToHostFuture_Callback_Args* args); /* out */
} PJRT_Buffer_CopyRawToHostFuture_Args;
typedef PJRT_Error* PJRT_Buffer_CopyRawToHostFuture(
    PJRT_Buffer_CopyRawToHostFuture_Args* args);

typedef struct PJRT_Buffer_CopyToDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Device* dst_device;
  PJRT_Buffer* dst_buffer; /* out */
} PJRT_Buffer_CopyToDevice_Args;
typedef PJRT_Error* PJRT_Buffer_CopyToDevice(
    PJRT_Buffer_CopyToDevice_Args* args);

typedef struct PJRT_Buffer_CopyToMemory_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Memory* dst_memory;
  PJRT_Buffer* dst_buffer; /* out */
} PJRT_Buffer_CopyToMemory_Args;
typedef PJRT_Error* PJRT_Buffer_CopyToMemory(
    PJRT_Buffer_CopyToMemory_Args* args);

/* Reinterprets the same bytes with another type/shape/layout. */
typedef struct PJRT_Buffer_Bitcast_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_Type element_type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_MemoryLayout* device_layout;
  PJRT_Buffer* out_buffer; /* out */
} PJRT_Buffer_Bitcast_Args;
typedef PJRT_Error* PJRT_Buffer_Bitcast(PJRT_Buffer_Bitcast_Args* args);

typedef struct PJRT_Buffer_IsOnCpu_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  bool is_on_cpu; /* out */
} PJRT_Buffer_IsOnCpu_Args;
typedef PJRT_Error* PJRT_Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args* args);

typedef struct PJRT_Buffer_Device_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Device* device; /* out */
} PJRT_Buffer_Device_Args;
typedef PJRT_Error* PJRT_Buffer_Device(PJRT_Buffer_Device_Args* args);

typedef struct PJRT_Buffer_Memory_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Memory* memory; /* out */
} PJRT_Buffer_Memory_Args;
typedef PJRT_Error* PJRT_Buffer_Memory(PJRT_Buffer_Memory_Args* args);

typedef struct PJRT_Buffer_ReadyEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Event* event; /* out; caller destroys */
} PJRT_Buffer_ReadyEvent_Args;
typedef PJRT_Error* PJRT_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* args);

typedef struct PJRT_Buffer_UnsafePointer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  uintptr_t buffer_pointer; /* out */
} PJRT_Buffer_UnsafePointer_Args;
typedef PJRT_Error* PJRT_Buffer_UnsafePointer(
    PJRT_Buffer_UnsafePointer_Args* args);

typedef struct PJRT_Buffer_IncreaseExternalReferenceCount_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_IncreaseExternalReferenceCount_Args;
typedef PJRT_Error* PJRT_Buffer_IncreaseExternalReferenceCount(
    PJRT_Buffer_IncreaseExternalReferenceCount_Args* args);

typedef struct PJRT_Buffer_DecreaseExternalReferenceCount_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_DecreaseExternalReferenceCount_Args;
typedef PJRT_Error* PJRT_Buffer_DecreaseExternalReferenceCount(
    PJRT_Buffer_DecreaseExternalReferenceCount_Args* args);

typedef struct PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* device_memory_ptr; /* out */
} PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args;
typedef PJRT_Error* PJRT_Buffer_OpaqueDeviceMemoryDataPointer(
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args* args);

/* Passed to the caller's dependency_ready_callback; no extension_start. */
typedef struct PJRT_Buffer_DonateWithControlDependency_Callback_Args {
  size_t struct_size;
  void* callback_data;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
} PJRT_Buffer_DonateWithControlDependency_Callback_Args;

typedef struct PJRT_Buffer_DonateWithControlDependency_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* callback_data; /* out */
  void (*dependency_ready_callback)(
      PJRT_Buffer_DonateWithControlDependency_Callback_Args* args); /* out */
  PJRT_Buffer* out_buffer; /* out */
} PJRT_Buffer_DonateWithControlDependency_Args;
typedef PJRT_Error* PJRT_Buffer_DonateWithControlDependency(
    PJRT_Buffer_DonateWithControlDependency_Args* args);

/* ------------------------------------------------------------------------ */
/* Copy-to-device streams (host recv callbacks)                             */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_CopyToDeviceStream_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
} PJRT_CopyToDeviceStream_Destroy_Args;
typedef PJRT_Error* PJRT_CopyToDeviceStream_Destroy(
    PJRT_CopyToDeviceStream_Destroy_Args* args);

typedef struct PJRT_CopyToDeviceStream_AddChunk_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  PJRT_Chunk* chunk; /* ownership moves to the stream */
  PJRT_Event* transfer_complete; /* out */
} PJRT_CopyToDeviceStream_AddChunk_Args;
typedef PJRT_Error* PJRT_CopyToDeviceStream_AddChunk(
    PJRT_CopyToDeviceStream_AddChunk_Args* args);

typedef struct PJRT_CopyToDeviceStream_TotalBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  int64_t total_bytes; /* out */
} PJRT_CopyToDeviceStream_TotalBytes_Args;
typedef PJRT_Error* PJRT_CopyToDeviceStream_TotalBytes(
    PJRT_CopyToDeviceStream_TotalBytes_Args* args);

typedef struct PJRT_CopyToDeviceStream_GranuleSize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  int64_t granule_size_in_bytes; /* out */
} PJRT_CopyToDeviceStream_GranuleSize_Args;
typedef PJRT_Error* PJRT_CopyToDeviceStream_GranuleSize(
    PJRT_CopyToDeviceStream_GranuleSize_Args* args);

typedef struct PJRT_CopyToDeviceStream_CurrentBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  int64_t current_bytes; /* out */
} PJRT_CopyToDeviceStream_CurrentBytes_Args;
typedef PJRT_Error* PJRT_CopyToDeviceStream_CurrentBytes(
    PJRT_CopyToDeviceStream_CurrentBytes_Args* args);

/* ------------------------------------------------------------------------ */
/* Topology descriptions and ahead-of-time compile                          */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_TopologyDescription_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* topology_name;
  size_t topology_name_size;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  PJRT_TopologyDescription* topology; /* out */
} PJRT_TopologyDescription_Create_Args;
typedef PJRT_Error* PJRT_TopologyDescription_Create(
    PJRT_TopologyDescription_Create_Args* args);

typedef struct PJRT_TopologyDescription_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
} PJRT_TopologyDescription_Destroy_Args;
typedef PJRT_Error* PJRT_TopologyDescription_Destroy(
    PJRT_TopologyDescription_Destroy_Args* args);

typedef struct PJRT_TopologyDescription_PlatformVersion_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
  const char* platform_version; /* out */
  size_t platform_version_size; /* out */
} PJRT_TopologyDescription_PlatformVersion_Args;
typedef PJRT_Error* PJRT_TopologyDescription_PlatformVersion(
    PJRT_TopologyDescription_PlatformVersion_Args* args);

typedef struct PJRT_TopologyDescription_PlatformName_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  const char* platform_name; /* out */
  size_t platform_name_size; /* out */
} PJRT_TopologyDescription_PlatformName_Args;
typedef PJRT_Error* PJRT_TopologyDescription_PlatformName(
    PJRT_TopologyDescription_PlatformName_Args* args);

typedef struct PJRT_TopologyDescription_GetDeviceDescriptions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  PJRT_DeviceDescription* const* descriptions; /* out */
  size_t num_descriptions;                     /* out */
} PJRT_TopologyDescription_GetDeviceDescriptions_Args;
typedef PJRT_Error* PJRT_TopologyDescription_GetDeviceDescriptions(
    PJRT_TopologyDescription_GetDeviceDescriptions_Args* args);

typedef struct PJRT_TopologyDescription_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
  const char* serialized_bytes;                 /* out */
  size_t serialized_bytes_size;                 /* out */
  PJRT_SerializedTopology* serialized_topology; /* out */
  void (*serialized_topology_deleter)(
      PJRT_SerializedTopology* serialized_topology); /* out */
} PJRT_TopologyDescription_Serialize_Args;
typedef PJRT_Error* PJRT_TopologyDescription_Serialize(
    PJRT_TopologyDescription_Serialize_Args* args);

typedef struct PJRT_TopologyDescription_Deserialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* serialized_topology;
  size_t serialized_topology_size;
  PJRT_TopologyDescription* topology; /* out */
} PJRT_TopologyDescription_Deserialize_Args;
typedef PJRT_Error* PJRT_TopologyDescription_Deserialize(
    PJRT_TopologyDescription_Deserialize_Args* args);

typedef struct PJRT_TopologyDescription_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
  const PJRT_NamedValue* attributes; /* out */
  size_t num_attributes;             /* out */
} PJRT_TopologyDescription_Attributes_Args;
typedef PJRT_Error* PJRT_TopologyDescription_Attributes(
    PJRT_TopologyDescription_Attributes_Args* args);

typedef struct PJRT_TopologyDescription_Fingerprint_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  uint64_t fingerprint; /* out */
} PJRT_TopologyDescription_Fingerprint_Args;
typedef PJRT_Error* PJRT_TopologyDescription_Fingerprint(
    PJRT_TopologyDescription_Fingerprint_Args* args);

/* Returns a serialized xla.ShapeProto released through the deleter. */
typedef struct PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  int memory_space_kind_id;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_Type element_type;
  const PJRT_Buffer_MemoryLayout* layout; /* optional */
  const char* serialized_shape;           /* out */
  size_t serialized_shape_size;           /* out */
  void (*serialized_shape_deleter)(const char*); /* out */
} PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace_Args;
typedef PJRT_Error* PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace(
    PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace_Args* args);

typedef struct PJRT_TopologyDescription_GetMemorySpaceKindIds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  const int* memory_space_kind_ids; /* out */
  size_t num_memory_space_kind_ids; /* out */
} PJRT_TopologyDescription_GetMemorySpaceKindIds_Args;
typedef PJRT_Error* PJRT_TopologyDescription_GetMemorySpaceKindIds(
    PJRT_TopologyDescription_GetMemorySpaceKindIds_Args* args);

/* Compiles against a topology without a client (client may be NULL). */
typedef struct PJRT_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  const PJRT_Program* program;
  const char* compile_options;
  size_t compile_options_size;
  PJRT_Client* client;
  PJRT_Executable* executable; /* out */
} PJRT_Compile_Args;
typedef PJRT_Error* PJRT_Compile(PJRT_Compile_Args* args);

/* ------------------------------------------------------------------------ */
/* The function table                                                       */
/* ------------------------------------------------------------------------ */

/* Slot order is the ABI. The comment before each group gives the index of
 * its first slot. */
#define CW_PJRT_SLOT(name) name* name

typedef struct PJRT_Api {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Api_Version pjrt_api_version;

  /* 0 */
  CW_PJRT_SLOT(PJRT_Error_Destroy);
  CW_PJRT_SLOT(PJRT_Error_Message);
  CW_PJRT_SLOT(PJRT_Error_GetCode);
  /* 3 */
  CW_PJRT_SLOT(PJRT_Plugin_Initialize);
  CW_PJRT_SLOT(PJRT_Plugin_Attributes);
  /* 5 */
  CW_PJRT_SLOT(PJRT_Event_Destroy);
  CW_PJRT_SLOT(PJRT_Event_IsReady);
  CW_PJRT_SLOT(PJRT_Event_Error);
  CW_PJRT_SLOT(PJRT_Event_Await);
  CW_PJRT_SLOT(PJRT_Event_OnReady);
  /* 10 */
  CW_PJRT_SLOT(PJRT_Client_Create);
  CW_PJRT_SLOT(PJRT_Client_Destroy);
  CW_PJRT_SLOT(PJRT_Client_PlatformName);
  CW_PJRT_SLOT(PJRT_Client_ProcessIndex);
  CW_PJRT_SLOT(PJRT_Client_PlatformVersion);
  CW_PJRT_SLOT(PJRT_Client_Devices);
  CW_PJRT_SLOT(PJRT_Client_AddressableDevices);
  CW_PJRT_SLOT(PJRT_Client_LookupDevice);
  CW_PJRT_SLOT(PJRT_Client_LookupAddressableDevice);
  CW_PJRT_SLOT(PJRT_Client_AddressableMemories);
  /* 20 */
  CW_PJRT_SLOT(PJRT_Client_Compile);
  CW_PJRT_SLOT(PJRT_Client_DefaultDeviceAssignment);
  CW_PJRT_SLOT(PJRT_Client_BufferFromHostBuffer);
  /* 23 */
  CW_PJRT_SLOT(PJRT_DeviceDescription_Id);
  CW_PJRT_SLOT(PJRT_DeviceDescription_ProcessIndex);
  CW_PJRT_SLOT(PJRT_DeviceDescription_Attributes);
  CW_PJRT_SLOT(PJRT_DeviceDescription_Kind);
  CW_PJRT_SLOT(PJRT_DeviceDescription_DebugString);
  CW_PJRT_SLOT(PJRT_DeviceDescription_ToString);
  /* 29 */
  CW_PJRT_SLOT(PJRT_Device_GetDescription);
  CW_PJRT_SLOT(PJRT_Device_IsAddressable);
  CW_PJRT_SLOT(PJRT_Device_LocalHardwareId);
  CW_PJRT_SLOT(PJRT_Device_AddressableMemories);
  CW_PJRT_SLOT(PJRT_Device_DefaultMemory);
  CW_PJRT_SLOT(PJRT_Device_MemoryStats);
  /* 35 */
  CW_PJRT_SLOT(PJRT_Memory_Id);
  CW_PJRT_SLOT(PJRT_Memory_Kind);
  CW_PJRT_SLOT(PJRT_Memory_DebugString);
  CW_PJRT_SLOT(PJRT_Memory_ToString);
  CW_PJRT_SLOT(PJRT_Memory_AddressableByDevices);
  /* 40 */
  CW_PJRT_SLOT(PJRT_Executable_Destroy);
  CW_PJRT_SLOT(PJRT_Executable_Name);
  CW_PJRT_SLOT(PJRT_Executable_NumReplicas);
  CW_PJRT_SLOT(PJRT_Executable_NumPartitions);
  CW_PJRT_SLOT(PJRT_Executable_NumOutputs);
  CW_PJRT_SLOT(PJRT_Executable_SizeOfGeneratedCodeInBytes);
  CW_PJRT_SLOT(PJRT_Executable_GetCostAnalysis);
  CW_PJRT_SLOT(PJRT_Executable_OutputMemoryKinds);
  CW_PJRT_SLOT(PJRT_Executable_OptimizedProgram);
  CW_PJRT_SLOT(PJRT_Executable_Serialize);
  /* 50 */
  CW_PJRT_SLOT(PJRT_LoadedExecutable_Destroy);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_GetExecutable);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_AddressableDevices);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_Delete);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_IsDeleted);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_Execute);
  CW_PJRT_SLOT(PJRT_Executable_DeserializeAndLoad);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_Fingerprint);
  /* 58 */
  CW_PJRT_SLOT(PJRT_Buffer_Destroy);
  CW_PJRT_SLOT(PJRT_Buffer_ElementType);
  CW_PJRT_SLOT(PJRT_Buffer_Dimensions);
  CW_PJRT_SLOT(PJRT_Buffer_UnpaddedDimensions);
  CW_PJRT_SLOT(PJRT_Buffer_DynamicDimensionIndices);
  CW_PJRT_SLOT(PJRT_Buffer_GetMemoryLayout);
  CW_PJRT_SLOT(PJRT_Buffer_OnDeviceSizeInBytes);
  CW_PJRT_SLOT(PJRT_Buffer_Device);
  CW_PJRT_SLOT(PJRT_Buffer_Memory);
  CW_PJRT_SLOT(PJRT_Buffer_Delete);
  CW_PJRT_SLOT(PJRT_Buffer_IsDeleted);
  CW_PJRT_SLOT(PJRT_Buffer_CopyToDevice);
  CW_PJRT_SLOT(PJRT_Buffer_ToHostBuffer);
  CW_PJRT_SLOT(PJRT_Buffer_IsOnCpu);
  CW_PJRT_SLOT(PJRT_Buffer_ReadyEvent);
  CW_PJRT_SLOT(PJRT_Buffer_UnsafePointer);
  CW_PJRT_SLOT(PJRT_Buffer_IncreaseExternalReferenceCount);
  CW_PJRT_SLOT(PJRT_Buffer_DecreaseExternalReferenceCount);
  CW_PJRT_SLOT(PJRT_Buffer_OpaqueDeviceMemoryDataPointer);
  /* 77 */
  CW_PJRT_SLOT(PJRT_CopyToDeviceStream_Destroy);
  CW_PJRT_SLOT(PJRT_CopyToDeviceStream_AddChunk);
  CW_PJRT_SLOT(PJRT_CopyToDeviceStream_TotalBytes);
  CW_PJRT_SLOT(PJRT_CopyToDeviceStream_GranuleSize);
  CW_PJRT_SLOT(PJRT_CopyToDeviceStream_CurrentBytes);
  /* 82 */
  CW_PJRT_SLOT(PJRT_TopologyDescription_Create);
  CW_PJRT_SLOT(PJRT_TopologyDescription_Destroy);
  CW_PJRT_SLOT(PJRT_TopologyDescription_PlatformName);
  CW_PJRT_SLOT(PJRT_TopologyDescription_PlatformVersion);
  CW_PJRT_SLOT(PJRT_TopologyDescription_GetDeviceDescriptions);
  CW_PJRT_SLOT(PJRT_TopologyDescription_Serialize);
  CW_PJRT_SLOT(PJRT_TopologyDescription_Attributes);
  /* 89 */
  CW_PJRT_SLOT(PJRT_Compile);
  /* 90: slots appended by later minors, in the order they were added */
  CW_PJRT_SLOT(PJRT_Executable_OutputElementTypes);
  CW_PJRT_SLOT(PJRT_Executable_OutputDimensions);
  CW_PJRT_SLOT(PJRT_Buffer_CopyToMemory);
  CW_PJRT_SLOT(PJRT_Client_CreateViewOfDeviceBuffer);
  CW_PJRT_SLOT(PJRT_Executable_Fingerprint);
  CW_PJRT_SLOT(PJRT_Client_TopologyDescription);
  CW_PJRT_SLOT(PJRT_Executable_GetCompiledMemoryStats);
  CW_PJRT_SLOT(PJRT_Memory_Kind_Id);
  CW_PJRT_SLOT(PJRT_ExecuteContext_Create);
  CW_PJRT_SLOT(PJRT_ExecuteContext_Destroy);
  /* 100 */
  CW_PJRT_SLOT(PJRT_Buffer_CopyRawToHost);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_Destroy);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_TransferData);
  CW_PJRT_SLOT(PJRT_Client_CreateBuffersForAsyncHostToDevice);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_Device);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_BufferCount);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_BufferSize);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_SetBufferError);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_AddMetadata);
  /* 110 */
  CW_PJRT_SLOT(PJRT_Client_DmaMap);
  CW_PJRT_SLOT(PJRT_Client_DmaUnmap);
  CW_PJRT_SLOT(PJRT_Client_CreateUninitializedBuffer);
  CW_PJRT_SLOT(PJRT_Client_UpdateGlobalProcessInfo);
  CW_PJRT_SLOT(PJRT_TopologyDescription_Deserialize);
  CW_PJRT_SLOT(PJRT_Client_CreateAliasBuffer);
  CW_PJRT_SLOT(PJRT_Client_FulfillAliasBuffer);
  CW_PJRT_SLOT(PJRT_LoadedExecutable_GetDeviceAssignment);
  CW_PJRT_SLOT(PJRT_Client_CreateErrorBuffer);
  CW_PJRT_SLOT(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral);
  /* 120 */
  CW_PJRT_SLOT(PJRT_Buffer_CopyRawToHostFuture);
  CW_PJRT_SLOT(PJRT_Device_PoisonExecution);
  CW_PJRT_SLOT(PJRT_Device_CreateAsyncTrackingEvent);
  CW_PJRT_SLOT(PJRT_AsyncTrackingEvent_Destroy);
  CW_PJRT_SLOT(PJRT_Executable_GetCompileOptions);
  CW_PJRT_SLOT(PJRT_Buffer_DonateWithControlDependency);
  CW_PJRT_SLOT(PJRT_Event_Create);
  CW_PJRT_SLOT(PJRT_Event_Set);
  CW_PJRT_SLOT(PJRT_Device_GetAttributes);
  CW_PJRT_SLOT(PJRT_Client_Load);
  /* 130 */
  CW_PJRT_SLOT(PJRT_LoadedExecutable_AddressableDeviceLogicalIds);
  CW_PJRT_SLOT(PJRT_Buffer_Bitcast);
  CW_PJRT_SLOT(PJRT_Error_ForEachPayload);
  CW_PJRT_SLOT(PJRT_TopologyDescription_Fingerprint);
  CW_PJRT_SLOT(PJRT_Executable_ParameterMemoryKinds);
  CW_PJRT_SLOT(PJRT_Device_ClearMemoryStats);
  CW_PJRT_SLOT(PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace);
  CW_PJRT_SLOT(PJRT_TopologyDescription_GetMemorySpaceKindIds);
  /* 138 = CW_PJRT_API_NUM_SLOTS */
} PJRT_Api;

#undef CW_PJRT_SLOT

/* Byte offset of the table slot with index `i` (0-based, see above). */
#define CW_PJRT_API_SLOT_OFFSET(i)         \
  (offsetof(PJRT_Api, PJRT_Error_Destroy) + \
   (size_t)(i) * sizeof(void (*)(void)))

/* Signature of the symbol a plugin exports. */
typedef const PJRT_Api* (*CW_PJRT_GetPjrtApi_Fn)(void);
#define CW_PJRT_GET_API_SYMBOL "GetPjrtApi"

/* ------------------------------------------------------------------------ */
/* Layout checks (LP64)                                                     */
/* ------------------------------------------------------------------------ */

#if defined(__cplusplus)
#define CW_PJRT_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define CW_PJRT_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define CW_PJRT_ASSERT_SIZE(type, n) \
  CW_PJRT_ASSERT(sizeof(type) == (n), "size of " #type)
#define CW_PJRT_ASSERT_OFFSET(type, field, n) \
  CW_PJRT_ASSERT(offsetof(type, field) == (n), "offset of " #type "." #field)
#define CW_PJRT_ASSERT_SLOT(name, index)                                  \
  CW_PJRT_ASSERT(offsetof(PJRT_Api, name) == 40 + 8 * (index),           \
                 "slot " #name)

#if (defined(__LP64__) || defined(_LP64)) && !defined(CW_PJRT_NO_LAYOUT_CHECKS)

/* Every enum used in a struct must be int-sized for these layouts. */
CW_PJRT_ASSERT_SIZE(PJRT_Buffer_Type, 4);
CW_PJRT_ASSERT_SIZE(PJRT_Error_Code, 4);
CW_PJRT_ASSERT_SIZE(PJRT_NamedValue_Type, 4);

CW_PJRT_ASSERT_SIZE(PJRT_Extension_Base, 24);
CW_PJRT_ASSERT_SIZE(PJRT_Api_Version, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Api_Version, minor_version, 20);
CW_PJRT_ASSERT_SIZE(PJRT_Error_FunctionTable, 56);
CW_PJRT_ASSERT_SIZE(PJRT_Memory_FunctionTable, 40);

CW_PJRT_ASSERT_SIZE(PJRT_NamedValue, 56);
CW_PJRT_ASSERT_OFFSET(PJRT_NamedValue, name, 16);
CW_PJRT_ASSERT_OFFSET(PJRT_NamedValue, name_size, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_NamedValue, type, 32);
CW_PJRT_ASSERT_OFFSET(PJRT_NamedValue, int64_value, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_NamedValue, value_size, 48);

CW_PJRT_ASSERT_SIZE(PJRT_Plugin_Attributes_Args, 32);

CW_PJRT_ASSERT_SIZE(PJRT_Event_OnReady_Args, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_Event_OnReady_Args, callback, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Event_OnReady_Args, user_arg, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Event_Set_Args, 48);

CW_PJRT_ASSERT_SIZE(PJRT_Client_Create_Args, 88);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Create_Args, create_options, 16);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Create_Args, kv_get_callback, 32);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Create_Args, client, 64);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Create_Args, kv_try_get_user_arg, 80);

CW_PJRT_ASSERT_SIZE(PJRT_Program, 48);
CW_PJRT_ASSERT_OFFSET(PJRT_Program, code, 16);
CW_PJRT_ASSERT_OFFSET(PJRT_Program, format, 32);

CW_PJRT_ASSERT_SIZE(PJRT_Client_Compile_Args, 56);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Compile_Args, program, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Compile_Args, compile_options, 32);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_Compile_Args, executable, 48);

CW_PJRT_ASSERT_SIZE(PJRT_Buffer_MemoryLayout_Tiled, 56);
CW_PJRT_ASSERT_SIZE(PJRT_Buffer_MemoryLayout_Strides, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Buffer_MemoryLayout, 80);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_MemoryLayout, tiled, 16);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_MemoryLayout, type, 72);

CW_PJRT_ASSERT_SIZE(PJRT_Client_BufferFromHostBuffer_Args, 120);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args, data, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args, type, 32);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args, dims, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args,
                      host_buffer_semantics, 72);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args, device, 80);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args, memory, 88);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args,
                      done_with_host_buffer, 104);
CW_PJRT_ASSERT_OFFSET(PJRT_Client_BufferFromHostBuffer_Args, buffer, 112);

CW_PJRT_ASSERT_SIZE(PJRT_DeviceDescription_Id_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_DeviceDescription_Attributes_Args, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_DeviceDescription_Attributes_Args, num_attributes,
                      24);
CW_PJRT_ASSERT_OFFSET(PJRT_DeviceDescription_Attributes_Args, attributes, 32);
CW_PJRT_ASSERT_SIZE(PJRT_DeviceDescription_Kind_Args, 40);
CW_PJRT_ASSERT_SIZE(PJRT_Device_GetDescription_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Device_IsAddressable_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Device_LocalHardwareId_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Device_AddressableMemories_Args, 40);
CW_PJRT_ASSERT_SIZE(PJRT_Device_DefaultMemory_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Device_MemoryStats_Args, 192);
CW_PJRT_ASSERT_OFFSET(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set,
                      184);
CW_PJRT_ASSERT_SIZE(PJRT_Device_GetAttributes_Args, 56);
CW_PJRT_ASSERT_SIZE(PJRT_Device_PoisonExecution_Args, 72);
CW_PJRT_ASSERT_OFFSET(PJRT_Device_PoisonExecution_Args, poisoned, 48);

CW_PJRT_ASSERT_SIZE(PJRT_Memory_Id_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Memory_Kind_Args, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_Memory_Kind_Args, kind, 24);
CW_PJRT_ASSERT_SIZE(PJRT_Memory_Kind_Id_Args, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Memory_DebugString_Args, 40);
CW_PJRT_ASSERT_SIZE(PJRT_Memory_ToString_Args, 40);
CW_PJRT_ASSERT_SIZE(PJRT_Memory_AddressableByDevices_Args, 40);

CW_PJRT_ASSERT_SIZE(PJRT_ExecuteOptions, 144);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions, launch_id, 48);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions, non_donatable_input_indices, 56);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions, context, 72);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions, call_location, 80);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions, multi_slice_config, 112);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions,
                      use_major_to_minor_data_layout_for_callbacks, 120);
CW_PJRT_ASSERT_OFFSET(PJRT_ExecuteOptions, num_hlo_output_callbacks, 136);

CW_PJRT_ASSERT_SIZE(PJRT_LoadedExecutable_Execute_Args, 80);
CW_PJRT_ASSERT_OFFSET(PJRT_LoadedExecutable_Execute_Args, options, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_LoadedExecutable_Execute_Args, argument_lists, 32);
CW_PJRT_ASSERT_OFFSET(PJRT_LoadedExecutable_Execute_Args, output_lists, 56);
CW_PJRT_ASSERT_OFFSET(PJRT_LoadedExecutable_Execute_Args,
                      device_complete_events, 64);
CW_PJRT_ASSERT_OFFSET(PJRT_LoadedExecutable_Execute_Args, execute_device, 72);

CW_PJRT_ASSERT_SIZE(PJRT_Executable_Serialize_Args, 56);
CW_PJRT_ASSERT_OFFSET(PJRT_Executable_Serialize_Args, serialized_bytes, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Executable_Serialize_Args,
                      serialized_executable_deleter, 48);
CW_PJRT_ASSERT_SIZE(PJRT_LoadOptions, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Executable_DeserializeAndLoad_Args, 72);
CW_PJRT_ASSERT_OFFSET(PJRT_Executable_DeserializeAndLoad_Args,
                      loaded_executable, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_Executable_DeserializeAndLoad_Args,
                      overridden_serialized_compile_options, 48);
CW_PJRT_ASSERT_OFFSET(PJRT_Executable_DeserializeAndLoad_Args, load_options,
                      64);
CW_PJRT_ASSERT_SIZE(PJRT_Executable_GetCompiledMemoryStats_Args, 144);

CW_PJRT_ASSERT_SIZE(PJRT_Buffer_ToHostBuffer_Args, 56);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_ToHostBuffer_Args, host_layout, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_ToHostBuffer_Args, dst, 32);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_ToHostBuffer_Args, dst_size, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_ToHostBuffer_Args, event, 48);
CW_PJRT_ASSERT_SIZE(PJRT_Buffer_CopyToMemory_Args, 40);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_CopyToMemory_Args, dst_memory, 24);
CW_PJRT_ASSERT_OFFSET(PJRT_Buffer_CopyToMemory_Args, dst_buffer, 32);
CW_PJRT_ASSERT_SIZE(PJRT_Buffer_GetMemoryLayout_Args, 104);
CW_PJRT_ASSERT_SIZE(PJRT_Chunk, 32);

/* The table: 16 bytes of header, the 24-byte version, 138 slots. */
CW_PJRT_ASSERT_OFFSET(PJRT_Api, pjrt_api_version, 16);
CW_PJRT_ASSERT_SIZE(PJRT_Api, 16 + 24 + 8 * CW_PJRT_API_NUM_SLOTS);
CW_PJRT_ASSERT_SIZE(PJRT_Api, 1144);
CW_PJRT_ASSERT_SLOT(PJRT_Error_Destroy, 0);
CW_PJRT_ASSERT_SLOT(PJRT_Plugin_Initialize, 3);
CW_PJRT_ASSERT_SLOT(PJRT_Event_OnReady, 9);
CW_PJRT_ASSERT_SLOT(PJRT_Client_Create, 10);
CW_PJRT_ASSERT_SLOT(PJRT_Client_Compile, 20);
CW_PJRT_ASSERT_SLOT(PJRT_Client_BufferFromHostBuffer, 22);
CW_PJRT_ASSERT_SLOT(PJRT_DeviceDescription_Id, 23);
CW_PJRT_ASSERT_SLOT(PJRT_Device_GetDescription, 29);
CW_PJRT_ASSERT_SLOT(PJRT_Memory_Id, 35);
CW_PJRT_ASSERT_SLOT(PJRT_Executable_Destroy, 40);
CW_PJRT_ASSERT_SLOT(PJRT_Executable_Serialize, 49);
CW_PJRT_ASSERT_SLOT(PJRT_LoadedExecutable_Execute, 55);
CW_PJRT_ASSERT_SLOT(PJRT_Executable_DeserializeAndLoad, 56);
CW_PJRT_ASSERT_SLOT(PJRT_Buffer_Destroy, 58);
CW_PJRT_ASSERT_SLOT(PJRT_Buffer_ToHostBuffer, 70);
CW_PJRT_ASSERT_SLOT(PJRT_Buffer_ReadyEvent, 72);
CW_PJRT_ASSERT_SLOT(PJRT_CopyToDeviceStream_Destroy, 77);
CW_PJRT_ASSERT_SLOT(PJRT_TopologyDescription_Create, 82);
CW_PJRT_ASSERT_SLOT(PJRT_Compile, 89);
CW_PJRT_ASSERT_SLOT(PJRT_Buffer_CopyToMemory, 92);
CW_PJRT_ASSERT_SLOT(PJRT_Client_TopologyDescription, 95);
CW_PJRT_ASSERT_SLOT(PJRT_Memory_Kind_Id, 97);
CW_PJRT_ASSERT_SLOT(PJRT_Buffer_CopyRawToHost, 100);
CW_PJRT_ASSERT_SLOT(PJRT_Client_DmaMap, 110);
CW_PJRT_ASSERT_SLOT(PJRT_LoadedExecutable_GetDeviceAssignment, 117);
CW_PJRT_ASSERT_SLOT(PJRT_Buffer_CopyRawToHostFuture, 120);
CW_PJRT_ASSERT_SLOT(PJRT_Event_Create, 126);
CW_PJRT_ASSERT_SLOT(PJRT_Device_GetAttributes, 128);
CW_PJRT_ASSERT_SLOT(PJRT_Client_Load, 129);
CW_PJRT_ASSERT_SLOT(PJRT_Error_ForEachPayload, 132);
CW_PJRT_ASSERT_SLOT(PJRT_TopologyDescription_GetMemorySpaceKindIds, 137);

#endif /* LP64 layout checks */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CW_PJRT_C_API_H_ */
