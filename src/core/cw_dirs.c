#include "cw_dirs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

bool cw_dirs_socket_live(const char* path) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sun.sun_path)) return false;
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  bool live = fd >= 0 && (connect(fd, (struct sockaddr*)&sun, sizeof(sun)) == 0 ||
                          errno == EAGAIN);
  if (fd >= 0) close(fd);
  return live;
}

cw_file_sig_t cw_file_sig(const char* path) {
  cw_file_sig_t g;
  memset(&g, 0, sizeof(g));
  struct stat sb;
  if (!path[0] || stat(path, &sb) != 0) return g;
  g.present = true;
  g.dev = sb.st_dev;
  g.ino = sb.st_ino;
  g.size = sb.st_size;
  g.mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
  return g;
}

bool cw_file_sig_equal(const cw_file_sig_t* a, const cw_file_sig_t* b) {
  return a->present == b->present && a->dev == b->dev && a->ino == b->ino &&
         a->size == b->size && a->mtime_ns == b->mtime_ns;
}
