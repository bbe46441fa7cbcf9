/*
 * causeway: C11 declarations of the PJRT C API's FFI extension
 * (PJRT_Extension_Type_FFI) as XLA's CPU plugin of PJRT 0.115 has it: custom
 * call handlers and user data for execute contexts.
 *
 * Written for this project from the published interface
 * (xla/pjrt/c/pjrt_c_api_ffi_extension.h); names are the ABI's own. Sizes
 * were checked against the plugin's own struct_size checks: Type_Register
 * 48 bytes, UserData_Add 40 (user data without a deleter), Register_Handler
 * 52 (no extension_start; execute-stage handlers only), the extension 48.
 */
#ifndef CW_PJRT_FFI_H_
#define CW_PJRT_FFI_H_

#include "cw_pjrt_c_api.h"

/* What a type's user data needs from XLA: only a deleter (NULL: none). */
typedef struct PJRT_FFI_Type_Info {
  void (*deleter)(void* object);
  void (*serialize)(void);   /* unused by causeway; NULL */
  void (*deserialize)(void); /* unused by causeway; NULL */
} PJRT_FFI_Type_Info;

typedef struct PJRT_FFI_Type_Register_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* type_name;
  size_t type_name_size;
  int64_t type_id; /* in/out: 0 asks XLA to choose one */
  const PJRT_FFI_Type_Info* type_info;
} PJRT_FFI_Type_Register_Args;
typedef PJRT_Error* PJRT_FFI_Type_Register(PJRT_FFI_Type_Register_Args* args);

typedef struct PJRT_FFI_UserData {
  int64_t type_id;
  void* data;
} PJRT_FFI_UserData;

typedef struct PJRT_FFI_UserData_Add_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context;
  PJRT_FFI_UserData user_data;
} PJRT_FFI_UserData_Add_Args;
typedef PJRT_Error* PJRT_FFI_UserData_Add(PJRT_FFI_UserData_Add_Args* args);

typedef struct PJRT_FFI_Register_Handler_Args {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler; /* XLA_FFI_Handler* (cw_xla_ffi.h) */
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
} PJRT_FFI_Register_Handler_Args;
typedef PJRT_Error* PJRT_FFI_Register_Handler(PJRT_FFI_Register_Handler_Args* args);

typedef struct PJRT_FFI_Extension {
  PJRT_Extension_Base base;
  PJRT_FFI_Type_Register* type_register;
  PJRT_FFI_UserData_Add* user_data_add;
  PJRT_FFI_Register_Handler* register_handler;
} PJRT_FFI_Extension;

_Static_assert(CW_PJRT_STRUCT_SIZE(PJRT_FFI_Type_Register_Args, type_info) == 48,
               "PJRT_FFI_Type_Register_Args");
_Static_assert(CW_PJRT_STRUCT_SIZE(PJRT_FFI_UserData_Add_Args, user_data) == 40,
               "PJRT_FFI_UserData_Add_Args");
_Static_assert(CW_PJRT_STRUCT_SIZE(PJRT_FFI_Register_Handler_Args, traits) == 52,
               "PJRT_FFI_Register_Handler_Args");
_Static_assert(sizeof(PJRT_FFI_Extension) == 48, "PJRT_FFI_Extension");

/* The extension of `api`'s chain with `type` (NULL: none). */
static inline const PJRT_Extension_Base* cw_pjrt_find_extension(const PJRT_Api* api,
                                                                 PJRT_Extension_Type type) {
  for (const PJRT_Extension_Base* e = api->extension_start; e; e = e->next) {
    if (e->type == type) return e;
  }
  return NULL;
}

#endif /* CW_PJRT_FFI_H_ */
