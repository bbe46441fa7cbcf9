// causeway-proxy entry point: settings (defaults, environment, flags), then
// the proxy's loop until SIGTERM/SIGINT.
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_proxy.h"
#include "cw_settings.h"

// The plugin beside this executable (bin/../lib), when none is named.
static cw_status_t cw__default_library(cw_settings_t* settings) {
  if (*cw_settings_string(settings, CW_SET_PROXY_PJRT_LIBRARY)) return cw_ok_status();
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return cw_make_status(CW_NOT_FOUND, "cannot find this executable's directory");
  exe[n] = 0;
  char path[PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/../lib/libcauseway_pjrt.so", dirname(exe));
  return cw_settings_set(settings, "pjrt-library", path, false);
}

int main(int argc, char** argv) {
  cw_settings_t settings;
  int code = 0;
  if (!cw_settings_initialize_for_main(
          "causeway-proxy", "[--listen HOST:PORT] [--pjrt-library PATH] [--max-message BYTES]"
          " [--buffer-cache BYTES] [--log-level L]   (CAUSEWAY_CONTROLLER names the cluster, as for a JAX client)",
          "proxy", CW_SCOPE_PROXY, argc, argv, &settings, &code)) {
    return code;
  }
  // Every gRPC message of a transfer is a few allocations of megabytes;
  // glibc's default heap trimming and mapping thresholds gave each of them
  // fresh pages (faulted in and zeroed, a third of the proxy's CPU during
  // uploads). Freed memory stays for the next message instead; buffers above
  // 32 MiB are kept by cw_proxy_bytes.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  cw_proxy_t* proxy = NULL;
  cw_status_t st = cw__default_library(&settings);
  if (!st) st = cw_proxy_create(&settings, &proxy);
  if (!st) st = cw_proxy_run(proxy);
  cw_proxy_release(proxy);
  cw_settings_deinitialize(&settings);
  if (st) {
    fprintf(stderr, "causeway-proxy: fatal: %s\n", cw_status_message(st));
    cw_status_free(st);
    return 1;
  }
  return 0;
}
