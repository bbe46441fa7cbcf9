// What the host gives this process (cw_host.h).
#include "cw_host.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) || defined(__arm__)
#include <sys/auxv.h>
#endif

uint64_t cw_host_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  char line[4096], cg[4096] = "";
  const char* dir = NULL;  // where the memory controller is mounted
  const char* file = NULL;
  FILE* f = fopen("/proc/self/cgroup", "r");
  while (f && fgets(line, sizeof(line), f)) {
    const char* c = strchr(line, ':');
    bool v1 = c && !strncmp(c + 1, "memory:", 7);
    if (!v1 && (dir || strncmp(line, "0::", 3))) continue;  // (a v1 memory line wins)
    snprintf(cg, sizeof(cg), "%s", strchr(c + 1, ':') + 1);
    dir = v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
    file = v1 ? "memory.limit_in_bytes" : "memory.max";
    if (v1) break;
  }
  if (f) fclose(f);
  if (!dir) return mem;
  size_t len = strcspn(cg, "\n");
  for (;;) {
    char path[8300];
    snprintf(path, sizeof(path), "%s%.*s/%s", dir, (int)len, cg, file);
    FILE* m = fopen(path, "r");
    unsigned long long v;
    // ("max", or v1's huge figure: no limit.)
    if (m && fscanf(m, "%llu", &v) == 1 && (!mem || v < mem)) mem = v;
    if (m) fclose(m);
    if (len == 0) break;
    while (len > 0 && cg[len - 1] != '/') len--;  // its parent
    if (len > 0) len--;
  }
  return mem;
}

void cw_host_cpu_identity_of(const char* machine, const uint32_t* words, size_t n, char* out,
                             size_t out_size) {
  if (!n) {
    snprintf(out, out_size, "%s unknown", machine);
    return;
  }
  uint64_t h = 14695981039346656037ull;  // FNV-1a over the words' bytes
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < 4; ++b) h = (h ^ ((words[i] >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  snprintf(out, out_size, "%s %016llx", machine, (unsigned long long)h);
}

// The features as words (0 on a platform this does not know); at most 16.
static size_t cw__cpu_words(uint32_t* w) {
  size_t n = 0;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d, max = 0, ext = 0;
  if (__get_cpuid(0, &max, &b, &c, &d) && max >= 1) {
    __get_cpuid(1, &a, &b, &c, &d);
    w[n++] = c & ~(1u << 31);  // less "a hypervisor runs us"
    w[n++] = d;
    if (c & (1u << 27)) {  // OSXSAVE: the vector state the OS saves (XCR0)
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      w[n++] = lo;
    }
  }
  if (max >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    w[n++] = b;
    w[n++] = c;
    // Of EDX only instruction sets (AVX-512 parts, AMX, FP16, SERIALIZE):
    // the rest are mitigations that microcode updates change.
    w[n++] = d & ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 14) | (1u << 22) | (1u << 23) |
                  (1u << 24) | (1u << 25));
    __cpuid_count(7, 1, a, b, c, d);
    w[n++] = a;
  }
  if (__get_cpuid(0x80000000u, &ext, &b, &c, &d) && ext >= 0x80000001u) {
    __get_cpuid(0x80000001u, &a, &b, &c, &d);
    w[n++] = c;
    w[n++] = d;
  }
#elif defined(__aarch64__) || defined(__arm__)
  w[n++] = (uint32_t)getauxval(AT_HWCAP);
  w[n++] = (uint32_t)((uint64_t)getauxval(AT_HWCAP) >> 32);
#ifdef AT_HWCAP2
  w[n++] = (uint32_t)getauxval(AT_HWCAP2);
  w[n++] = (uint32_t)((uint64_t)getauxval(AT_HWCAP2) >> 32);
#endif
#else
  (void)w;
#endif
  return n;
}

void cw_host_cpu_identity(char* out, size_t out_size) {
  struct utsname u;
  uint32_t words[16];
  size_t n = cw__cpu_words(words);
  cw_host_cpu_identity_of(uname(&u) == 0 ? u.machine : "unknown", words, n, out, out_size);
}
