// Directories a program keeps for its own user (compile caches), and the
// sockets in them.
#ifndef CW_CORE_DIRS_H_
#define CW_CORE_DIRS_H_

#include <stdbool.h>

#include "cw_status.h"

// Creates `dir` and its missing parents (new ones 0700); OK when it exists
// as a directory. UNAVAILABLE naming the component that could not be made.
CW_MUST_USE cw_status_t cw_dirs_make(const char* dir);

// Whether a process listens on the Unix socket at `path` (a non-blocking
// connect: a listener whose backlog is full counts as live).
bool cw_dirs_socket_live(const char* path);

#endif  // CW_CORE_DIRS_H_
