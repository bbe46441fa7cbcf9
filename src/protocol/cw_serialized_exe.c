// A serialized executable (see cw_serialized_exe.h).
#include "cw_serialized_exe.h"

#include <stdlib.h>
#include <string.h>

#include "proto/causeway.pb-c.h"

cw_status_t cw_serialized_exe_pack(const cw_serialized_exe_t* exe, uint8_t** out,
                                   size_t* out_size) {
  *out = NULL;
  *out_size = 0;
  Causeway__V1__SerializedExecutable m = CAUSEWAY__V1__SERIALIZED_EXECUTABLE__INIT;
  m.magic = (char*)CW_SERIALIZED_EXE_MAGIC;
  m.version = CW_SERIALIZED_EXE_VERSION;
  m.format = (char*)exe->format;
  m.code.data = (uint8_t*)exe->code;
  m.code.len = exe->code_size;
  m.compile_options.data = (uint8_t*)exe->compile_options;
  m.compile_options.len = exe->compile_options_size;
  m.fingerprint = (char*)(exe->fingerprint ? exe->fingerprint : "");
  size_t n = causeway__v1__serialized_executable__get_packed_size(&m);
  uint8_t* buf = malloc(n ? n : 1);
  if (!buf) return cw_make_status(CW_RESOURCE_EXHAUSTED, "serialize executable: out of memory");
  causeway__v1__serialized_executable__pack(&m, buf);
  *out = buf;
  *out_size = n;
  return cw_ok_status();
}

static bool cw__printable(const char* s, size_t max) {
  size_t n = strlen(s);
  if (!n || n > max) return false;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < 0x21 || s[i] > 0x7e) return false;
  }
  return true;
}

cw_status_t cw_serialized_exe_unpack(const uint8_t* data, size_t size,
                                     cw_serialized_exe_t* out_exe, void** out_msg) {
  memset(out_exe, 0, sizeof(*out_exe));
  *out_msg = NULL;
  Causeway__V1__SerializedExecutable* m =
      causeway__v1__serialized_executable__unpack(NULL, size, data);
  if (!m) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "not a causeway serialized executable (%zu bytes that do not decode "
                          "as one)", size);
  }
  cw_status_t s = cw_ok_status();
  if (strcmp(m->magic, CW_SERIALIZED_EXE_MAGIC) != 0) {
    s = cw_make_status(CW_INVALID_ARGUMENT,
                       "not a causeway serialized executable (no \"" CW_SERIALIZED_EXE_MAGIC
                       "\" mark; another plugin's?)");
  } else if (m->version != CW_SERIALIZED_EXE_VERSION) {
    s = cw_make_status(CW_INVALID_ARGUMENT,
                       "serialized executable of version %u; this causeway reads version %d",
                       m->version, CW_SERIALIZED_EXE_VERSION);
  } else if (!cw__printable(m->format, CW_SERIALIZED_EXE_MAX_FORMAT)) {
    s = cw_make_status(CW_INVALID_ARGUMENT,
                       "serialized executable: its program format is not a name of 1 to %d "
                       "printable characters", CW_SERIALIZED_EXE_MAX_FORMAT);
  } else if (!m->code.len) {
    s = cw_make_status(CW_INVALID_ARGUMENT, "serialized executable: no program");
  }
  if (s) {
    causeway__v1__serialized_executable__free_unpacked(m, NULL);
    return s;
  }
  out_exe->format = m->format;
  out_exe->code = m->code.data;
  out_exe->code_size = m->code.len;
  out_exe->compile_options = m->compile_options.data;
  out_exe->compile_options_size = m->compile_options.len;
  out_exe->fingerprint = m->fingerprint;
  *out_msg = m;
  return cw_ok_status();
}

void cw_serialized_exe_free(void* msg) {
  if (msg) causeway__v1__serialized_executable__free_unpacked(msg, NULL);
}
