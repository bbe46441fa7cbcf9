// Directories a program keeps for its own user (compile caches), the
// sockets in them, and files it reads again when they change.
#ifndef CW_CORE_DIRS_H_
#define CW_CORE_DIRS_H_

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cw_status.h"

// Creates `dir` and its missing parents (new ones 0700); OK when it exists
// as a directory. UNAVAILABLE naming the component that could not be made.
CW_MUST_USE cw_status_t cw_dirs_make(const char* dir);

// Whether a process listens on the Unix socket at `path` (a non-blocking
// connect: a listener whose backlog is full counts as live).
bool cw_dirs_socket_live(const char* path);

// What tells that a file changed (files read again while a program runs:
// credentials): its identity, size and time, through links (a Kubernetes
// volume swaps a link to a new directory). All zero when it is absent.
typedef struct cw_file_sig_s {
  bool present;
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns;
} cw_file_sig_t;
cw_file_sig_t cw_file_sig(const char* path);  // "" is absent
bool cw_file_sig_equal(const cw_file_sig_t* a, const cw_file_sig_t* b);

#endif  // CW_CORE_DIRS_H_
