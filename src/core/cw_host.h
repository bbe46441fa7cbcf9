// What the host gives this process.
#ifndef CW_CORE_HOST_H_
#define CW_CORE_HOST_H_

#include <stdint.h>

// The memory this process may use: physical memory, or its memory cgroup's
// limit (of its cgroup or one above; v1 or v2) where lower; 0 if unknown.
uint64_t cw_host_memory_bytes(void);

#endif  // CW_CORE_HOST_H_
