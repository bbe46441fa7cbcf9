#include "cw_bytes.h"

#include <inttypes.h>
#include <stdio.h>

char* cw_bytes_format(uint64_t bytes, char* buf, size_t size) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, size, "%" PRIu64 " bytes", bytes);
    return buf;
  }
  double v = (double)bytes / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
    v /= 1024.0;
    u++;
  }
  // Whole numbers print without a fraction ("512 MiB"), others with one digit.
  if (v == (double)(uint64_t)v) snprintf(buf, size, "%" PRIu64 " %s", (uint64_t)v, units[u]);
  else snprintf(buf, size, "%.1f %s", v, units[u]);
  return buf;
}
