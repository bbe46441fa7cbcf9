// jaxlib's kernels for a worker (cw_jaxlib_set.h). Nothing here needs
// Python at build time: the bridge does, and is loaded only when needed.
#include "cw_jaxlib_set.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_asan.h"
#include "cw_jaxlib_bridge.h"
#include "cw_log.h"


// "3.12": the Python the bridge was built against; "" when it was not built.
#ifndef CW_JAXLIB_PYTHON_VERSION
#define CW_JAXLIB_PYTHON_VERSION ""
#endif

bool cw_jaxlib_bridge_built(void) { return CW_JAXLIB_PYTHON_VERSION[0] != '\0'; }

static bool cw__exists(const char* path) { return access(path, F_OK) == 0; }

// `dir`/`name` if that exists (malloc'd), else NULL.
static char* cw__join_if(const char* dir, const char* name) {
  char buf[PATH_MAX];
  int n = snprintf(buf, sizeof(buf), "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= sizeof(buf) || !cw__exists(buf)) return NULL;
  return strdup(buf);
}

// The interpreter of the environment at `prefix` (bin/python3, bin/python).
static char* cw__python_of_prefix(const char* prefix) {
  char* p = cw__join_if(prefix, "bin/python3");
  return p ? p : cw__join_if(prefix, "bin/python");
}

cw_status_t cw_jaxlib_find_python(const char* plugin_path, char** out) {
  *out = NULL;
  // A wheel's file lives in PREFIX/lib/python3.N/site-packages/...
  const char* mark = plugin_path ? strstr(plugin_path, "/lib/python3.") : NULL;
  if (mark && strstr(mark, "/site-packages/")) {
    char* prefix = strndup(plugin_path, (size_t)(mark - plugin_path));
    if (!prefix) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    *out = cw__python_of_prefix(prefix);
    free(prefix);
    if (*out) return cw_ok_status();
  }
  const char* venv = getenv("VIRTUAL_ENV");
  if (venv && *venv) *out = cw__python_of_prefix(venv);
  return cw_ok_status();
}

cw_status_t cw_jaxlib_default_bridge(char** out) {
  *out = NULL;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return cw_make_status(CW_NOT_FOUND, "cannot read /proc/self/exe");
  exe[n] = '\0';
  char* slash = strrchr(exe, '/');
  if (slash) *slash = '\0';  // bin/
  char buf[PATH_MAX];
  int m = snprintf(buf, sizeof(buf), "%s/../lib/%s", exe, CW_JAXLIB_BRIDGE_LIBRARY);
  if (m < 0 || (size_t)m >= sizeof(buf)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "path of the jaxlib bridge too long");
  }
  *out = strdup(buf);
  return *out ? cw_ok_status() : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
}

// Reads `key = value` from a venv's pyvenv.cfg into `out` ("" if absent).
static void cw__venv_value(const char* cfg, const char* key, char* out, size_t size) {
  out[0] = '\0';
  FILE* f = fopen(cfg, "r");
  if (!f) return;
  char line[PATH_MAX + 64];
  size_t klen = strlen(key);
  while (fgets(line, sizeof(line), f)) {
    char* p = line;
    while (*p == ' ' || *p == '\t') ++p;
    if (strncmp(p, key, klen) != 0) continue;
    p += klen;
    while (*p == ' ' || *p == '\t') ++p;
    if (*p != '=') continue;
    ++p;
    while (*p == ' ' || *p == '\t') ++p;
    size_t len = strcspn(p, "\r\n");
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) --len;
    snprintf(out, size, "%.*s", (int)len, p);
    break;
  }
  fclose(f);
}

// Loads the shared libpython of `python`'s environment, RTLD_GLOBAL so the
// bridge binds to it. A venv's pyvenv.cfg names its base installation (home)
// and version; without one, the interpreter's own prefix is the base.
static cw_status_t cw__load_libpython(const char* python) {
  const char* want = CW_JAXLIB_PYTHON_VERSION;
  char real[PATH_MAX];
  char prefix[PATH_MAX];
  snprintf(prefix, sizeof(prefix), "%s", python);
  for (int up = 0; up < 2; ++up) {  // PREFIX/bin/python -> PREFIX
    char* s = strrchr(prefix, '/');
    if (s) *s = '\0';
  }
  char cfg[PATH_MAX + 16];
  snprintf(cfg, sizeof(cfg), "%s/pyvenv.cfg", prefix);
  char base[PATH_MAX];
  char version[64];
  if (cw__exists(cfg)) {
    char home[PATH_MAX];
    cw__venv_value(cfg, "home", home, sizeof(home));
    cw__venv_value(cfg, "version", version, sizeof(version));
    if (!version[0]) cw__venv_value(cfg, "version_info", version, sizeof(version));
    snprintf(base, sizeof(base), "%s", home);
    char* s = strrchr(base, '/');  // HOME is BASE/bin
    if (s) *s = '\0';
    size_t wl = strlen(want);
    if (version[0] && (strncmp(version, want, wl) != 0 || (version[wl] && version[wl] != '.'))) {
      return cw_make_status(CW_FAILED_PRECONDITION,
                            "%s is Python %s, but causeway's jaxlib bridge was built for "
                            "Python %s (rebuild causeway with CW_PYTHON set to it)",
                            python, version, want);
    }
  } else if (realpath(python, real)) {
    snprintf(base, sizeof(base), "%s", real);
    for (int up = 0; up < 2; ++up) {
      char* s = strrchr(base, '/');
      if (s) *s = '\0';
    }
  } else {
    return cw_make_status(CW_NOT_FOUND, "no Python interpreter at %s", python);
  }
  char names[3][PATH_MAX];
  snprintf(names[0], sizeof(names[0]), "%s/lib/libpython%s.so.1.0", base, want);
  snprintf(names[1], sizeof(names[1]), "%s/lib/libpython%s.so", base, want);
  snprintf(names[2], sizeof(names[2]), "libpython%s.so.1.0", want);  // the system's
  const char* last = "";
  bool exists = false;  // a file that did not load: not a missing --enable-shared
  for (int i = 0; i < 3; ++i) {
    if (i < 2 && !cw__exists(names[i])) continue;
    exists = exists || i < 2;
    if (dlopen(names[i], RTLD_NOW | RTLD_GLOBAL)) return cw_ok_status();
    last = dlerror();
  }
  if (exists || (last[0] && !strstr(last, "No such file"))) {
    return cw_make_status(CW_UNAVAILABLE, "libpython%s for %s did not load: %s", want, python,
                          last[0] ? last : "(no reason given)");
  }
  return cw_make_status(CW_NOT_FOUND,
                        "no shared libpython%s for %s (looked in %s/lib and the system's "
                        "library path%s%s); jaxlib's kernels need a Python built with "
                        "--enable-shared",
                        want, python, base, last[0] ? ": " : "", last);
}

cw_status_t cw_jaxlib_load(const char* python, const char* bridge_path,
                           const causeway_ffi_target** out) {
  *out = NULL;
  if (!cw_jaxlib_bridge_built()) {
    return cw_make_status(CW_UNIMPLEMENTED,
                          "this causeway was built without the jaxlib bridge (no Python "
                          "headers at configure time: set CW_PYTHON and rebuild)");
  }
  if (!cw__exists(python)) {
    return cw_make_status(CW_NOT_FOUND, "no Python interpreter at %s", python);
  }
  if (!cw__exists(bridge_path)) {
    return cw_make_status(CW_NOT_FOUND, "the jaxlib bridge %s is missing", bridge_path);
  }
  CW_RETURN_IF_ERROR(cw__load_libpython(python), "jaxlib");
  void* lib = dlopen(bridge_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    return cw_make_status(CW_NOT_FOUND, "cannot load the jaxlib bridge %s: %s", bridge_path,
                          dlerror());
  }
  cw_jaxlib_bridge_load_fn* load =
      (cw_jaxlib_bridge_load_fn*)(uintptr_t)dlsym(lib, CW_JAXLIB_BRIDGE_SYMBOL);
  if (!load) {
    return cw_make_status(CW_NOT_FOUND, "%s has no %s", bridge_path, CW_JAXLIB_BRIDGE_SYMBOL);
  }
  char error[1024];
  // The interpreter is never finalized and keeps its objects in pymalloc
  // arenas LeakSanitizer does not scan: each would be reported at exit.
  CW_LSAN_DISABLE();
  int rc = load(python, out, error, sizeof(error));
  CW_LSAN_ENABLE();
  if (rc != 0) {
    return cw_make_status(CW_FAILED_PRECONDITION, "jaxlib of %s: %s", python, error);
  }
  return cw_ok_status();
}
