// The plugin's attributes (cw_plugin_attributes.h).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cw_plugin_attributes.h"
#include "cw_plugin_error.h"

// Until a session reports the workers' plugin, answer with the values of the
// pinned CPU plugin (lammps-jax-pjrt-cpu 0.11.2) so a pre-client caller sees
// something sane. Arrays are never freed: the API says process lifetime.
static const int64_t cw__default_shlo_current[3] = {1, 20, 0};
static const int64_t cw__default_shlo_minimum[3] = {0, 9, 0};
static PJRT_NamedValue cw__default_attrs[3] = {
    {.struct_size = sizeof(PJRT_NamedValue),
     .name = "xla_version",
     .name_size = 11,
     .type = PJRT_NamedValue_kInt64,
     .int64_value = 2,
     .value_size = 1},
    {.struct_size = sizeof(PJRT_NamedValue),
     .name = "stablehlo_current_version",
     .name_size = 25,
     .type = PJRT_NamedValue_kInt64List,
     .int64_array_value = cw__default_shlo_current,
     .value_size = 3},
    {.struct_size = sizeof(PJRT_NamedValue),
     .name = "stablehlo_minimum_version",
     .name_size = 25,
     .type = PJRT_NamedValue_kInt64List,
     .int64_array_value = cw__default_shlo_minimum,
     .value_size = 3},
};
static pthread_mutex_t cw__attrs_mu = PTHREAD_MUTEX_INITIALIZER;
static const PJRT_NamedValue* cw__attrs = cw__default_attrs;
static size_t cw__num_attrs = 3;
// Arrays a later session replaced: still valid for their holders, and
// reachable from here (a process that creates many clients is not leaking).
typedef struct cw__retired_s {
  struct cw__retired_s* next;
  const PJRT_NamedValue* attrs;
} cw__retired_t;
static cw__retired_t* cw__retired;

static bool cw__same_value(const PJRT_NamedValue* a, const PJRT_NamedValue* b) {
  if (a->name_size != b->name_size || memcmp(a->name, b->name, a->name_size) != 0 ||
      a->type != b->type || a->value_size != b->value_size) {
    return false;
  }
  switch (a->type) {
    case PJRT_NamedValue_kString:
      return memcmp(a->string_value, b->string_value, a->value_size) == 0;
    case PJRT_NamedValue_kInt64:
      return a->int64_value == b->int64_value;
    case PJRT_NamedValue_kInt64List:
      return a->value_size == 0 ||
             memcmp(a->int64_array_value, b->int64_array_value,
                    a->value_size * sizeof(int64_t)) == 0;
    case PJRT_NamedValue_kFloat:
      return a->float_value == b->float_value;
    case PJRT_NamedValue_kBool:
      return a->bool_value == b->bool_value;
  }
  return false;
}

static void cw__free_values(PJRT_NamedValue* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    free((void*)v[i].name);
    if (v[i].type == PJRT_NamedValue_kString) free((void*)v[i].string_value);
    if (v[i].type == PJRT_NamedValue_kInt64List) free((void*)v[i].int64_array_value);
  }
  free(v);
}

void cw_plugin_attributes_set(Causeway__V1__NamedValue* const* values, size_t count) {
  PJRT_NamedValue* out = calloc(count ? count : 1, sizeof(*out));
  if (!out) return;
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    const Causeway__V1__NamedValue* v = values[i];
    if (!v || !v->name) continue;
    PJRT_NamedValue* o = &out[n];
    o->struct_size = sizeof(*o);
    o->name = strdup(v->name);
    if (!o->name) continue;
    o->name_size = strlen(v->name);
    switch (v->value_case) {
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_S:
        o->type = PJRT_NamedValue_kString;
        o->string_value = strdup(v->s ? v->s : "");
        o->value_size = strlen(v->s ? v->s : "");
        break;
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_I:
        o->type = PJRT_NamedValue_kInt64;
        o->int64_value = v->i;
        o->value_size = 1;
        break;
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST: {
        size_t k = v->list ? v->list->n_values : 0;
        int64_t* a = calloc(k ? k : 1, sizeof(*a));
        if (!a) continue;
        if (k) memcpy(a, v->list->values, k * sizeof(*a));
        o->type = PJRT_NamedValue_kInt64List;
        o->int64_array_value = a;
        o->value_size = k;
        break;
      }
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_F:
        o->type = PJRT_NamedValue_kFloat;
        o->float_value = v->f;
        o->value_size = 1;
        break;
      case CAUSEWAY__V1__NAMED_VALUE__VALUE_B:
        o->type = PJRT_NamedValue_kBool;
        o->bool_value = v->b;
        o->value_size = 1;
        break;
      default:
        continue;
    }
    ++n;
  }
  pthread_mutex_lock(&cw__attrs_mu);
  // Every session of a process usually reports the same list: kept as is
  // (a process that made a client per session, as causeway-proxy does,
  // kept one more list each time).
  bool same = cw__attrs != cw__default_attrs && n == cw__num_attrs;
  for (size_t i = 0; same && i < n; ++i) same = cw__same_value(&out[i], &cw__attrs[i]);
  pthread_mutex_unlock(&cw__attrs_mu);
  if (same) {
    cw__free_values(out, n);
    return;
  }
  cw__retired_t* r = malloc(sizeof(*r));
  pthread_mutex_lock(&cw__attrs_mu);
  if (r && cw__attrs != cw__default_attrs) {
    *r = (cw__retired_t){.next = cw__retired, .attrs = cw__attrs};
    cw__retired = r;
    r = NULL;
  }
  free(r);
  cw__attrs = out;  // the previous array stays valid for its holders
  cw__num_attrs = n;
  pthread_mutex_unlock(&cw__attrs_mu);
}

PJRT_Error* cw_plugin_attributes_get(PJRT_Plugin_Attributes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Plugin_Attributes_Args, num_attributes);
  pthread_mutex_lock(&cw__attrs_mu);
  args->attributes = cw__attrs;
  args->num_attributes = cw__num_attrs;
  pthread_mutex_unlock(&cw__attrs_mu);
  return NULL;
}
