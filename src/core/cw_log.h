// Leveled logging to stderr. The level comes from the settings table
// (CAUSEWAY_LOG_LEVEL: error, warn, info, debug).
#ifndef CW_CORE_LOG_H_
#define CW_CORE_LOG_H_

#include "cw_status.h"

typedef enum cw_log_level_e {
  CW_LOG_ERROR = 0,
  CW_LOG_WARN = 1,
  CW_LOG_INFO = 2,
  CW_LOG_DEBUG = 3,
} cw_log_level_t;

// `name` is borrowed and must outlive logging (a string literal).
void cw_log_initialize(const char* name, cw_log_level_t level);
void cw_log_set_level(cw_log_level_t level);
cw_log_level_t cw_log_level(void);
// Parses "error|warn|info|debug" or 0..3; returns false if unknown.
bool cw_log_parse_level(const char* text, cw_log_level_t* out_level);
void cw_log_write(cw_log_level_t level, const char* file, int line,
                  const char* fmt, ...) CW_PRINTF(4, 5);

#define CW_LOG(level, ...)                                         \
  do {                                                             \
    if ((level) <= cw_log_level())                                 \
      cw_log_write((level), __FILE__, __LINE__, __VA_ARGS__);      \
  } while (0)
#define CW_LOGE(...) CW_LOG(CW_LOG_ERROR, __VA_ARGS__)
#define CW_LOGW(...) CW_LOG(CW_LOG_WARN, __VA_ARGS__)
#define CW_LOGI(...) CW_LOG(CW_LOG_INFO, __VA_ARGS__)
#define CW_LOGD(...) CW_LOG(CW_LOG_DEBUG, __VA_ARGS__)

#endif  // CW_CORE_LOG_H_
