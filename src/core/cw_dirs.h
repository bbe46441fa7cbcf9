// Directories a program keeps for its own user (compile caches).
#ifndef CW_CORE_DIRS_H_
#define CW_CORE_DIRS_H_

#include "cw_status.h"

// Creates `dir` and its missing parents (new ones 0700); OK when it exists
// as a directory. UNAVAILABLE naming the component that could not be made.
CW_MUST_USE cw_status_t cw_dirs_make(const char* dir);

#endif  // CW_CORE_DIRS_H_
