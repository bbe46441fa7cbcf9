// What the host gives this process (cw_host.h).
#include "cw_host.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

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

void cw_host_cpu_identity_from(const char* cpuinfo_path, const char* machine, char* out,
                               size_t out_size) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a
  bool found = false;
  char line[16384];
  FILE* f = fopen(cpuinfo_path, "r");
  while (f && !found && fgets(line, sizeof(line), f)) {
    if (strncmp(line, "flags", 5) != 0 && strncmp(line, "Features", 8) != 0) continue;
    const char* v = strchr(line, ':');
    if (!v) continue;
    for (const unsigned char* c = (const unsigned char*)v + 1; *c && *c != '\n'; ++c) {
      h = (h ^ *c) * 1099511628211ull;
    }
    found = true;
  }
  if (f) fclose(f);
  if (found) {
    snprintf(out, out_size, "%s %016llx", machine, (unsigned long long)h);
  } else {
    snprintf(out, out_size, "%s unknown", machine);
  }
}

void cw_host_cpu_identity(char* out, size_t out_size) {
  struct utsname u;
  cw_host_cpu_identity_from("/proc/cpuinfo", uname(&u) == 0 ? u.machine : "unknown", out, out_size);
}
