/*
 * causeway: C11 declarations of the part of the XLA FFI C API a PJRT plugin's
 * custom-call handlers see, pinned at FFI API version 0.4 (the XLA of jaxlib
 * 0.11.2 and its CPU plugin).
 *
 * Written for this project from the published interface (struct layouts,
 * enum values and the function-table order of openxla/xla's
 * xla/ffi/api/c_api.h, as jaxlib ships it under jaxlib/include). Type and
 * field names are the ABI's own; only what causeway's handlers use is here,
 * but every struct that is here has the ABI's full layout up to its last
 * field, and XLA_FFI_Api has every slot up to the ones we call.
 *
 * Rules that matter: a handler is called with a call frame whose
 * extension_start may carry a metadata query (answer it and return NULL);
 * `struct_size` of each struct says which fields the caller knows; a handler
 * returns NULL or an error made with the frame's api (XLA takes it).
 */
#ifndef CW_XLA_FFI_H_
#define CW_XLA_FFI_H_

#include <stddef.h>
#include <stdint.h>

#define CW_XLA_FFI_API_MAJOR 0
#define CW_XLA_FFI_API_MINOR 4

/* Bytes up to and including `last_field` (the ABI's struct_size values). */
#define CW_XLA_FFI_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

typedef struct XLA_FFI_Api XLA_FFI_Api;
typedef struct XLA_FFI_Error XLA_FFI_Error;               /* opaque */
typedef struct XLA_FFI_ExecutionContext XLA_FFI_ExecutionContext; /* opaque */
typedef struct XLA_FFI_Future XLA_FFI_Future;             /* opaque */

typedef enum {
  XLA_FFI_Extension_Metadata = 1,
} XLA_FFI_Extension_Type;

typedef struct XLA_FFI_Extension_Base {
  size_t struct_size;
  XLA_FFI_Extension_Type type;
  struct XLA_FFI_Extension_Base* next;
} XLA_FFI_Extension_Base;

typedef struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int major_version;
  int minor_version;
} XLA_FFI_Api_Version;

/* Codes equal absl's (and PJRT_Error_Code). */
typedef enum {
  XLA_FFI_Error_Code_OK = 0,
  XLA_FFI_Error_Code_CANCELLED = 1,
  XLA_FFI_Error_Code_UNKNOWN = 2,
  XLA_FFI_Error_Code_INVALID_ARGUMENT = 3,
  XLA_FFI_Error_Code_NOT_FOUND = 5,
  XLA_FFI_Error_Code_RESOURCE_EXHAUSTED = 8,
  XLA_FFI_Error_Code_FAILED_PRECONDITION = 9,
  XLA_FFI_Error_Code_UNIMPLEMENTED = 12,
  XLA_FFI_Error_Code_INTERNAL = 13,
  XLA_FFI_Error_Code_UNAVAILABLE = 14,
} XLA_FFI_Error_Code;

typedef struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const char* message; /* copied */
  XLA_FFI_Error_Code errc;
} XLA_FFI_Error_Create_Args;

typedef struct XLA_FFI_Error_Destroy_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Error* error;
} XLA_FFI_Error_Destroy_Args;

/* Element types: the values of XLA's PrimitiveType. */
typedef enum {
  XLA_FFI_DataType_INVALID = 0,
  XLA_FFI_DataType_PRED = 1,
  XLA_FFI_DataType_F32 = 11,
  XLA_FFI_DataType_U64 = 9,
  XLA_FFI_DataType_TOKEN = 17,
} XLA_FFI_DataType;

typedef struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims; /* rank entries */
} XLA_FFI_Buffer;

typedef enum { XLA_FFI_ArgType_BUFFER = 1 } XLA_FFI_ArgType;
typedef enum { XLA_FFI_RetType_BUFFER = 1 } XLA_FFI_RetType;
typedef enum {
  XLA_FFI_AttrType_ARRAY = 1,
  XLA_FFI_AttrType_DICTIONARY = 2,
  XLA_FFI_AttrType_SCALAR = 3,
  XLA_FFI_AttrType_STRING = 4,
} XLA_FFI_AttrType;

typedef struct XLA_FFI_ByteSpan {
  const char* ptr;
  size_t len;
} XLA_FFI_ByteSpan;

typedef struct XLA_FFI_Scalar {
  XLA_FFI_DataType dtype;
  void* value;
} XLA_FFI_Scalar;

typedef struct XLA_FFI_TypeId {
  int64_t type_id;
} XLA_FFI_TypeId;

typedef enum {
  XLA_FFI_ExecutionStage_INSTANTIATE = 0,
  XLA_FFI_ExecutionStage_PREPARE = 1,
  XLA_FFI_ExecutionStage_INITIALIZE = 2,
  XLA_FFI_ExecutionStage_EXECUTE = 3,
} XLA_FFI_ExecutionStage;

typedef struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_ArgType* types;
  void** args; /* XLA_FFI_Buffer* for BUFFER */
} XLA_FFI_Args;

typedef struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_RetType* types;
  void** rets; /* XLA_FFI_Buffer* for BUFFER */
} XLA_FFI_Rets;

typedef struct XLA_FFI_Attrs {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_AttrType* types;
  XLA_FFI_ByteSpan** names;
  void** attrs; /* XLA_FFI_Scalar* for SCALAR */
} XLA_FFI_Attrs;

typedef struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const XLA_FFI_Api* api;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_ExecutionStage stage;
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
  /* out: a handler that finishes later sets a future here; XLA keeps the
   * arguments, results and attributes alive until it completes. struct_size
   * stops at attrs even where this exists: it exists when the api's table
   * has the XLA_FFI_Future_* slots. */
  XLA_FFI_Future* future;
} XLA_FFI_CallFrame;

typedef XLA_FFI_Error* XLA_FFI_Handler(XLA_FFI_CallFrame* call_frame);

/* The metadata query XLA makes when a handler is registered. */
typedef struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  uint32_t traits;
  XLA_FFI_TypeId state_type_id; /* newer; written only when struct_size covers it */
} XLA_FFI_Metadata;

typedef struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata* metadata;
} XLA_FFI_Metadata_Extension;

typedef struct XLA_FFI_InvokeContext_Get_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_TypeId* type_id;
  void* data; /* out: the user data of that type */
} XLA_FFI_InvokeContext_Get_Args;

typedef struct XLA_FFI_Future_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Future* future; /* out */
} XLA_FFI_Future_Create_Args;

typedef struct XLA_FFI_Future_SetAvailable_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Future* future;
} XLA_FFI_Future_SetAvailable_Args;

typedef struct XLA_FFI_Future_SetError_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Future* future;
  XLA_FFI_Error* error; /* taken by XLA */
} XLA_FFI_Future_SetError_Args;

typedef XLA_FFI_Error* XLA_FFI_Error_Create_Fn(XLA_FFI_Error_Create_Args* args);
typedef void XLA_FFI_Error_Destroy_Fn(XLA_FFI_Error_Destroy_Args* args);
typedef XLA_FFI_Error* XLA_FFI_InvokeContext_Get_Fn(XLA_FFI_InvokeContext_Get_Args* args);
typedef XLA_FFI_Error* XLA_FFI_Future_Create_Fn(XLA_FFI_Future_Create_Args* args);
typedef XLA_FFI_Error* XLA_FFI_Future_SetAvailable_Fn(XLA_FFI_Future_SetAvailable_Args* args);
typedef XLA_FFI_Error* XLA_FFI_Future_SetError_Fn(XLA_FFI_Future_SetError_Args* args);
typedef void XLA_FFI_Slot_Fn(void); /* a slot causeway does not call */

/* The table, in the ABI's slot order. */
struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Api_Version api_version;
  const void* internal_api;
  XLA_FFI_Error_Create_Fn* XLA_FFI_Error_Create;
  XLA_FFI_Slot_Fn* XLA_FFI_Error_GetDetails;
  XLA_FFI_Error_Destroy_Fn* XLA_FFI_Error_Destroy;
  XLA_FFI_Slot_Fn* XLA_FFI_Handler_Register;
  XLA_FFI_Slot_Fn* XLA_FFI_Stream_Get;
  XLA_FFI_Slot_Fn* XLA_FFI_Type_Register;
  XLA_FFI_InvokeContext_Get_Fn* XLA_FFI_InvokeContext_Get;
  XLA_FFI_Slot_Fn* XLA_FFI_State_Set;
  XLA_FFI_Slot_Fn* XLA_FFI_State_Get;
  XLA_FFI_Slot_Fn* XLA_FFI_DeviceMemory_Allocate;
  XLA_FFI_Slot_Fn* XLA_FFI_DeviceMemory_Free;
  XLA_FFI_Slot_Fn* XLA_FFI_ThreadPool_Schedule;
  XLA_FFI_Slot_Fn* XLA_FFI_ThreadPool_NumThreads;
  XLA_FFI_Future_Create_Fn* XLA_FFI_Future_Create;
  XLA_FFI_Future_SetAvailable_Fn* XLA_FFI_Future_SetAvailable;
  XLA_FFI_Future_SetError_Fn* XLA_FFI_Future_SetError;
};

/* Layout checks (LP64): the sizes the ABI's struct_size values give. */
_Static_assert(CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_Buffer, dims) == 48, "XLA_FFI_Buffer");
_Static_assert(CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_Args, args) == 40, "XLA_FFI_Args");
_Static_assert(CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_Attrs, attrs) == 48, "XLA_FFI_Attrs");
_Static_assert(CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_CallFrame, attrs) == 168, "XLA_FFI_CallFrame");
_Static_assert(offsetof(XLA_FFI_CallFrame, future) == 168, "XLA_FFI_CallFrame.future");
_Static_assert(CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_Metadata, traits) == 36, "XLA_FFI_Metadata");
_Static_assert(offsetof(XLA_FFI_Api, XLA_FFI_Error_Create) == 48, "XLA_FFI_Api header");
_Static_assert(offsetof(XLA_FFI_Api, XLA_FFI_InvokeContext_Get) == 48 + 6 * 8,
               "XLA_FFI_Api.XLA_FFI_InvokeContext_Get");
_Static_assert(offsetof(XLA_FFI_Api, XLA_FFI_Future_SetError) == 48 + 15 * 8,
               "XLA_FFI_Api.XLA_FFI_Future_SetError");
_Static_assert(sizeof(XLA_FFI_DataType) == 4 && sizeof(XLA_FFI_ExecutionStage) == 4,
               "enums are int-sized");

/* If `frame` is XLA's metadata query (made when a handler is registered),
 * answers it (this API version, `traits`) and returns true: the handler then
 * returns NULL without running. */
static inline int cw_xla_ffi_answer_metadata(XLA_FFI_CallFrame* frame, uint32_t traits) {
  XLA_FFI_Extension_Base* e = frame->extension_start;
  if (!e || e->type != XLA_FFI_Extension_Metadata) return 0;
  XLA_FFI_Metadata* m = ((XLA_FFI_Metadata_Extension*)e)->metadata;
  m->api_version.major_version = CW_XLA_FFI_API_MAJOR;
  m->api_version.minor_version = CW_XLA_FFI_API_MINOR;
  m->traits = traits;
  return 1;
}

/* An error for a handler to return (XLA takes it); `message` is copied. */
static inline XLA_FFI_Error* cw_xla_ffi_error(const XLA_FFI_Api* api, XLA_FFI_Error_Code code,
                                              const char* message) {
  XLA_FFI_Error_Create_Args a = {0};
  a.struct_size = CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_Error_Create_Args, errc);
  a.message = message;
  a.errc = code;
  return api->XLA_FFI_Error_Create(&a);
}

/* The user data of `type_id` in the call's execution context (NULL: none). */
static inline void* cw_xla_ffi_user_data(XLA_FFI_CallFrame* frame, int64_t type_id) {
  XLA_FFI_TypeId id = {type_id};
  XLA_FFI_InvokeContext_Get_Args a = {0};
  a.struct_size = CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_InvokeContext_Get_Args, data);
  a.ctx = frame->ctx;
  a.type_id = &id;
  XLA_FFI_Error* err = frame->api->XLA_FFI_InvokeContext_Get(&a);
  if (err) {
    XLA_FFI_Error_Destroy_Args d = {0};
    d.struct_size = CW_XLA_FFI_STRUCT_SIZE(XLA_FFI_Error_Destroy_Args, error);
    d.error = err;
    frame->api->XLA_FFI_Error_Destroy(&d);
    return NULL;
  }
  return a.data;
}

#endif /* CW_XLA_FFI_H_ */
