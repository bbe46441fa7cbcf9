#include "cw_dirs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

cw_status_t cw_dirs_make(const char* dir) {
  if (!dir || !dir[0]) return cw_make_status(CW_INVALID_ARGUMENT, "empty directory name");
  char* path = strdup(dir);
  if (!path) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  // Each missing component, parents first.
  for (char* p = path + 1;; ++p) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
      cw_status_t s = cw_make_status(CW_UNAVAILABLE, "directory %s: mkdir %s: %s", dir, path,
                                     strerror(errno));
      free(path);
      return s;
    }
    *p = saved;
    if (!saved) break;
  }
  free(path);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    return cw_make_status(CW_UNAVAILABLE, "%s is not a directory", dir);
  }
  return cw_ok_status();
}
