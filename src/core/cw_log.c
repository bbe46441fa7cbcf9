#include "cw_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const char* cw__log_name = "causeway";
static _Atomic int cw__log_level = CW_LOG_WARN;

void cw_log_initialize(const char* name, cw_log_level_t level) {
  if (name) cw__log_name = name;
  cw_log_set_level(level);
}

void cw_log_set_level(cw_log_level_t level) { atomic_store(&cw__log_level, (int)level); }

cw_log_level_t cw_log_level(void) { return (cw_log_level_t)atomic_load(&cw__log_level); }

bool cw_log_parse_level(const char* text, cw_log_level_t* out_level) {
  static const char* const names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(text, names[i]) == 0 || (text[0] == '0' + i && text[1] == 0)) {
      *out_level = (cw_log_level_t)i;
      return true;
    }
  }
  return false;
}

void cw_log_write(cw_log_level_t level, const char* file, int line,
                  const char* fmt, ...) {
  static const char tags[] = "EWID";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  const char* base = strrchr(file, '/');
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  // One fprintf per line so lines from threads do not interleave.
  fprintf(stderr, "%c %02d:%02d:%02d.%03ld %s[%d] %s:%d] %s\n",
          tags[level & 3], tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000, cw__log_name, (int)getpid(),
          base ? base + 1 : file, line, msg);
}
