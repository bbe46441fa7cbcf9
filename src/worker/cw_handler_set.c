// Handler sets (cw_handler_set.h): load, register with the plugin, explain.
#include "cw_handler_set.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "causeway_ffi.h"
#include "cw_jaxlib_set.h"
#include "cw_log.h"
#include "cw_time.h"

// XLA's words for a custom call without a handler (compile and load).
#define CW__MISSING "No FFI handler registered for "
#define CW__PLATFORM "Host"  // XLA's CPU plugin's FFI platform
#define CW__HOW                                                                            \
  "a worker gets custom-call handlers from its handler sets: a user's FFI library "    \
  "(--ffi-libraries PATH:SYMBOL or PATH:TARGET=SYMBOL, CAUSEWAY_FFI_LIBRARIES, on every " \
  "worker) and jaxlib's CPU kernels from a Python environment with jaxlib "            \
  "(--jaxlib-python, CAUSEWAY_JAXLIB_PYTHON); see docs/ffi.md"

typedef struct cw__set_s {
  char* label;   // what the set is: "jaxlib (PYTHON)", "PATH:SYMBOL"
  size_t count;  // targets it registered
} cw__set_t;

struct cw_handler_sets_s {
  pthread_mutex_t mu;  // everything below: compiles resolve on pool threads
  const cw_pjrt_t* pjrt;
  char** targets;  // registered target names
  size_t num_targets, cap_targets;
  cw__set_t* sets;
  size_t num_sets;
  // jaxlib: the interpreter found or given, the bridge, and its state.
  char* python;
  char* bridge;
  bool jaxlib_off;      // "off"
  bool jaxlib_pending;  // found by itself, loads on first need
  char* jaxlib_error;   // why it did not load (NULL: loaded, or never tried)
  // A load that failed is tried again on a need from this time on: the
  // cause may pass (out of file descriptors or memory for a moment), and it
  // was given up for the worker's life.
  int64_t jaxlib_retry_ms;
};

// --- Specs -----------------------------------------------------------------------

void cw_handler_specs_free(cw_handler_spec_t* specs, size_t count) {
  for (size_t i = 0; specs && i < count; ++i) {
    free(specs[i].path);
    free(specs[i].symbol);
    free(specs[i].target);
  }
  free(specs);
}

static char* cw__trimmed(const char* s, size_t n) {
  while (n && (*s == ' ' || *s == '\t')) ++s, --n;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) --n;
  return strndup(s, n);
}

// One "PATH:SYMBOL" or "PATH:TARGET=SYMBOL" of `n` bytes at `s`.
static cw_status_t cw__parse_one(const char* s, size_t n, cw_handler_spec_t* out) {
  char* item = cw__trimmed(s, n);
  if (!item) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t st = cw_ok_status();
  char* colon = strrchr(item, ':');  // a symbol has none; a path may
  if (!colon || colon == item || !colon[1]) {
    st = cw_make_status(CW_INVALID_ARGUMENT,
                        "FFI library \"%s\": want PATH:SYMBOL or PATH:TARGET=SYMBOL", item);
    free(item);
    return st;
  }
  *colon = '\0';
  char* rest = colon + 1;
  char* eq = strchr(rest, '=');
  if (eq && (eq == rest || !eq[1])) {
    st = cw_make_status(CW_INVALID_ARGUMENT,
                        "FFI library \"%s:%s\": want PATH:SYMBOL or PATH:TARGET=SYMBOL", item,
                        rest);
    free(item);
    return st;
  }
  out->path = strdup(item);
  if (eq) {
    out->target = strndup(rest, (size_t)(eq - rest));
    out->symbol = strdup(eq + 1);
  } else {
    out->symbol = strdup(rest);
  }
  free(item);
  if (!out->path || !out->symbol || (eq && !out->target)) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  return cw_ok_status();
}

cw_status_t cw_handler_specs_parse(const char* text, cw_handler_spec_t** out, size_t* out_n) {
  *out = NULL;
  *out_n = 0;
  if (!text) return cw_ok_status();
  size_t cap = 1;
  for (const char* p = text; *p; ++p) cap += *p == ',';
  cw_handler_spec_t* specs = calloc(cap, sizeof(*specs));
  if (!specs) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  const char* p = text;
  while (true) {
    size_t len = strcspn(p, ",");
    bool blank = strspn(p, " \t") >= len;
    if (!blank) {
      cw_status_t st = cw__parse_one(p, len, &specs[n]);
      n++;
      if (st) {
        cw_handler_specs_free(specs, n);
        return st;
      }
    }
    if (!p[len]) break;
    p += len + 1;
  }
  *out = specs;
  *out_n = n;
  return cw_ok_status();
}

// --- Registration ----------------------------------------------------------------

static bool cw__has_locked(const cw_handler_sets_t* s, const char* target) {
  for (size_t i = 0; i < s->num_targets; ++i) {
    if (!strcmp(s->targets[i], target)) return true;
  }
  return false;
}

static cw_status_t cw__add_set(cw_handler_sets_t* s, const char* label, cw__set_t** out) {
  cw__set_t* sets = realloc(s->sets, (s->num_sets + 1) * sizeof(*sets));
  if (!sets) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  s->sets = sets;
  cw__set_t* set = &sets[s->num_sets];
  set->label = strdup(label);
  set->count = 0;
  if (!set->label) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  s->num_sets++;
  *out = set;
  return cw_ok_status();
}

// Registers one handler of set `set` (its index: sets may grow meanwhile).
// A target an earlier set registered keeps that handler (a warning).
static cw_status_t cw__register(cw_handler_sets_t* s, size_t set, const char* target,
                                void* handler) {
  if (!target || !*target) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a target without a name");
  }
  if (!handler) {
    return cw_make_status(CW_INVALID_ARGUMENT, "target %s has a NULL handler", target);
  }
  if (cw__has_locked(s, target)) {
    CW_LOGW("custom call target %s: %s repeats it; the handler registered first stays",
            target, s->sets[set].label);
    return cw_ok_status();
  }
  if (s->num_targets == s->cap_targets) {
    size_t cap = s->cap_targets ? 2 * s->cap_targets : 64;
    char** t = realloc(s->targets, cap * sizeof(*t));
    if (!t) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    s->targets = t;
    s->cap_targets = cap;
  }
  char* name = strdup(target);
  if (!name) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw_status_t st = cw_pjrt_ffi_register_handler(s->pjrt, target, CW__PLATFORM, handler, 0);
  if (st) {
    free(name);
    return cw_status_annotate(st, "registering custom call target %s", target);
  }
  s->targets[s->num_targets++] = name;
  s->sets[set].count++;
  return cw_ok_status();
}

static cw_status_t cw__register_table(cw_handler_sets_t* s, const char* label,
                                      const causeway_ffi_target* table) {
  cw__set_t* set = NULL;
  CW_RETURN_IF_ERROR(cw__add_set(s, label, &set), "%s", label);
  size_t index = (size_t)(set - s->sets);
  for (size_t i = 0; table[i].name; ++i) {
    CW_RETURN_IF_ERROR(cw__register(s, index, table[i].name, table[i].handler), "%s", label);
  }
  if (!s->sets[index].count) CW_LOGW("handler set %s registered no targets", label);
  CW_LOGI("handler set %s: %zu custom call targets", label, s->sets[index].count);
  return cw_ok_status();
}

// A user's library. It stays loaded: its handlers are registered for good.
static cw_status_t cw__load_library(cw_handler_sets_t* s, const cw_handler_spec_t* spec) {
  char label[2048];
  snprintf(label, sizeof(label), "%s:%s%s%s", spec->path, spec->target ? spec->target : "",
           spec->target ? "=" : "", spec->symbol);
  void* lib = dlopen(spec->path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    return cw_make_status(CW_NOT_FOUND, "cannot load FFI library %s: %s", spec->path,
                          dlerror());
  }
  void* sym = dlsym(lib, spec->symbol);
  if (!sym) {
    return cw_make_status(CW_NOT_FOUND, "FFI library %s has no symbol %s", spec->path,
                          spec->symbol);
  }
  if (spec->target) {
    causeway_ffi_target one[2] = {{spec->target, sym}, {NULL, NULL}};
    return cw__register_table(s, label, one);
  }
  causeway_ffi_targets_fn* fn = (causeway_ffi_targets_fn*)(uintptr_t)sym;
  const causeway_ffi_target* table = fn();
  if (!table) {
    return cw_make_status(CW_FAILED_PRECONDITION,
                          "FFI library %s: %s() returned no table (the library refused)",
                          spec->path, spec->symbol);
  }
  return cw__register_table(s, label, table);
}

// Loads jaxlib's kernels (mu held or not yet shared); on failure keeps why.
static cw_status_t cw__load_jaxlib(cw_handler_sets_t* s) {
  const causeway_ffi_target* table = NULL;
  cw_status_t st = cw_jaxlib_load(s->python, s->bridge, &table);
  if (!st) {
    char label[2048];
    snprintf(label, sizeof(label), "jaxlib (%s)", s->python);
    st = cw__register_table(s, label, table);
  }
  free(s->jaxlib_error);  // a load that works after one that failed: no stale reason
  s->jaxlib_error = st ? strdup(cw_status_message(st)) : NULL;
  return st;
}

cw_status_t cw_handler_sets_create(const cw_handler_sets_options_t* o, const cw_pjrt_t* pjrt,
                                   cw_handler_sets_t** out) {
  *out = NULL;
  cw_handler_sets_t* s = calloc(1, sizeof(*s));
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&s->mu, NULL);
  s->pjrt = pjrt;
  cw_handler_spec_t* specs = NULL;
  size_t n = 0;
  cw_status_t st = cw_handler_specs_parse(o->ffi_libraries, &specs, &n);
  for (size_t i = 0; !st && i < n; ++i) st = cw__load_library(s, &specs[i]);
  cw_handler_specs_free(specs, n);
  if (st) goto fail;
  const char* py = o->jaxlib_python ? o->jaxlib_python : "";
  s->jaxlib_off = !strcmp(py, "off");
  if (!s->jaxlib_off) {
    st = o->bridge_path ? cw_ok_status() : cw_jaxlib_default_bridge(&s->bridge);
    if (!st && o->bridge_path) {
      s->bridge = strdup(o->bridge_path);
      if (!s->bridge) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (st) goto fail;
    if (py[0]) {
      // Asked for by name: it must load now.
      s->python = strdup(py);
      if (!s->python) {
        st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
        goto fail;
      }
      st = cw__load_jaxlib(s);
      if (st) {
        st = cw_status_annotate(st, "--jaxlib-python (CAUSEWAY_JAXLIB_PYTHON) %s", py);
        goto fail;
      }
    } else {
      st = cw_jaxlib_find_python(o->plugin_path, &s->python);
      if (st) goto fail;
      s->jaxlib_pending = s->python != NULL;
      if (s->python) CW_LOGI("jaxlib's CPU kernels: from %s when first needed", s->python);
    }
  }
  *out = s;
  return cw_ok_status();
fail:
  cw_handler_sets_release(s);
  return st;
}

void cw_handler_sets_release(cw_handler_sets_t* s) {
  if (!s) return;
  for (size_t i = 0; i < s->num_targets; ++i) free(s->targets[i]);
  free(s->targets);
  for (size_t i = 0; i < s->num_sets; ++i) free(s->sets[i].label);
  free(s->sets);
  free(s->python);
  free(s->bridge);
  free(s->jaxlib_error);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

// --- Missing handlers ------------------------------------------------------------

// The target XLA's message says has no handler, into `out`; false if none.
static bool cw__missing_target(const char* message, char* out, size_t size) {
  const char* p = strstr(message, CW__MISSING);
  if (!p) return false;
  p += strlen(CW__MISSING);
  size_t len = strcspn(p, " \t\n,;");
  if (!len || len >= size) return false;
  memcpy(out, p, len);
  out[len] = '\0';
  return true;
}

// What this worker has, for the error: "jaxlib (PY): 62; /x/lib.so:sym: 1".
static void cw__describe_locked(const cw_handler_sets_t* s, char* buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
#define CW__PUT(...)                                                       \
  do {                                                                     \
    int k = snprintf(buf + used, size - used, __VA_ARGS__);                \
    if (k > 0) used = (size_t)k < size - used ? used + (size_t)k : size - 1; \
  } while (0)
  for (size_t i = 0; i < s->num_sets; ++i) {
    CW__PUT("%s%s (%zu targets)", i ? ", " : "", s->sets[i].label, s->sets[i].count);
  }
  if (!s->num_sets) CW__PUT("none");
  if (s->jaxlib_off) {
    CW__PUT("; jaxlib's kernels are off (CAUSEWAY_JAXLIB_PYTHON=off)");
  } else if (s->jaxlib_error) {
    CW__PUT("; jaxlib's kernels did not load: %s", s->jaxlib_error);
  } else if (!s->python) {
    CW__PUT("; jaxlib's kernels: no Python environment found beside the PJRT plugin (set "
            "CAUSEWAY_JAXLIB_PYTHON to a Python with jaxlib)");
  }
#undef CW__PUT
}

#define CW__JAXLIB_RETRY_MS 2000

bool cw_handler_sets_resolve(cw_handler_sets_t* s, bool may_retry, cw_status_t* io) {
  char target[512];
  if (!s || !*io || !cw__missing_target(cw_status_message(*io), target, sizeof(target))) {
    return false;
  }
  pthread_mutex_lock(&s->mu);
  // Registered since that compile began (another compile loaded jaxlib)?
  bool retry = may_retry && cw__has_locked(s, target);
  if (may_retry && !retry && s->jaxlib_pending && cw_time_now_ms() >= s->jaxlib_retry_ms) {
    s->jaxlib_pending = false;
    CW_LOGI("custom call target %s: loading jaxlib's CPU kernels from %s", target, s->python);
    cw_status_t st = cw__load_jaxlib(s);
    if (st) {
      CW_LOGW("jaxlib's CPU kernels did not load (tried again on a need in %d s): %s",
              CW__JAXLIB_RETRY_MS / 1000, cw_status_message(st));
      cw_status_free(st);
      s->jaxlib_pending = true;
      s->jaxlib_retry_ms = cw_time_now_ms() + CW__JAXLIB_RETRY_MS;
    }
    retry = cw__has_locked(s, target);
  }
  if (!retry) {
    char have[4096];
    cw__describe_locked(s, have, sizeof(have));
    cw_status_t st = cw_make_status(cw_status_code(*io),
                                    "%s -- custom call target \"%s\" has no handler on this "
                                    "worker (handler sets: %s); " CW__HOW,
                                    cw_status_message(*io), target, have);
    cw_status_free(*io);
    *io = st;
  }
  pthread_mutex_unlock(&s->mu);
  return retry;
}

size_t cw_handler_sets_count(cw_handler_sets_t* s) {
  pthread_mutex_lock(&s->mu);
  size_t n = s->num_targets;
  pthread_mutex_unlock(&s->mu);
  return n;
}

bool cw_handler_sets_has(cw_handler_sets_t* s, const char* target) {
  pthread_mutex_lock(&s->mu);
  bool has = cw__has_locked(s, target);
  pthread_mutex_unlock(&s->mu);
  return has;
}
