// What the host gives this process.
#ifndef CW_CORE_HOST_H_
#define CW_CORE_HOST_H_

#include <stddef.h>
#include <stdint.h>

// The memory this process may use: physical memory, or its memory cgroup's
// limit (of its cgroup or one above; v1 or v2) where lower; 0 if unknown.
uint64_t cw_host_memory_bytes(void);

// The host's CPU as compiled code depends on it, into `out`: "<machine>
// <16 hex digits>", the digits a hash of the CPU's features as the CPU
// reports them (x86: CPUID's feature words and the vector state the OS
// enables, less the hypervisor bit; Arm: the kernel's hardware
// capabilities; elsewhere "unknown"), not of /proc/cpuinfo's flags, which
// the kernel adds to (mitigations, hypervisor hints). XLA's CPU plugin
// compiles for the features of its host and loads code compiled on another
// with only a logged error, after which the code may stop on an illegal
// instruction: the compile cache keys on this (docs/operations.md).
void cw_host_cpu_identity(char* out, size_t out_size);
// The identity of feature words `words` on `machine` (for tests).
void cw_host_cpu_identity_of(const char* machine, const uint32_t* words, size_t n, char* out,
                             size_t out_size);

#endif  // CW_CORE_HOST_H_
