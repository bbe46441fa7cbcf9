#include "cw_hlo_text.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cw_hlo_module_internal.h"

typedef cw_hlo_instr_t cw__instr_t;
typedef cw_hlo_shape_t cw__shape_t;
typedef cw_hlo_comp_t cw__comp_t;

// Shapes and shardings nest; text deeper than this is cut ("...").
#define CW__MAX_DEPTH 32
// XLA prints a constant's values only up to this many elements.
#define CW__MAX_CONSTANT_ELEMENTS 10

// ---- shapes and layouts ----

static const char* cw__type_name(int32_t t) {
  static const char* const names[] = {
      [1] = "pred",           [2] = "s8",           [3] = "s16",         [4] = "s32",
      [5] = "s64",            [6] = "u8",           [7] = "u16",         [8] = "u32",
      [9] = "u64",            [10] = "f16",         [11] = "f32",        [12] = "f64",
      [14] = "opaque",        [15] = "c64",         [16] = "bf16",       [17] = "token",
      [18] = "c128",          [19] = "f8e5m2",      [20] = "f8e4m3fn",   [21] = "s4",
      [22] = "u4",            [23] = "f8e4m3b11fnuz", [24] = "f8e5m2fnuz", [25] = "f8e4m3fnuz",
      [26] = "s2",            [27] = "u2",          [28] = "f8e4m3",     [29] = "f8e3m4",
      [30] = "s1",            [31] = "u1",          [32] = "f4e2m1fn",   [33] = "f8e8m0fnu",
      [35] = "f6e3m2fn",      [36] = "f6e2m3fn",
  };
  if (t < 0 || (size_t)t >= sizeof(names) / sizeof(names[0]) || !names[t]) return NULL;
  return names[t];
}

static void cw__print_ints(FILE* f, const int64_t* v, size_t n, const char* sep) {
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? sep : "", v[i]);
}

static void cw__print_layout(FILE* f, const Causeway__Hlo__Layout* l) {
  fputc('{', f);
  cw__print_ints(f, l->minor_to_major, l->n_minor_to_major, ",");
  if (l->n_tiles || l->element_size_in_bits || l->memory_space) {
    fputc(':', f);
    for (size_t i = 0; i < l->n_tiles; i++) {
      fputs(i ? "(" : "T(", f);
      const Causeway__Hlo__Tile* t = l->tiles[i];
      for (size_t j = 0; j < t->n_dimensions; j++) {
        // XLA writes a combined dimension (-1) as '*'.
        if (t->dimensions[j] == -1) {
          fprintf(f, "%s*", j ? "," : "");
        } else {
          fprintf(f, "%s%" PRId64, j ? "," : "", t->dimensions[j]);
        }
      }
      fputc(')', f);
    }
    if (l->element_size_in_bits) fprintf(f, "E(%" PRId64 ")", l->element_size_in_bits);
    if (l->memory_space) fprintf(f, "S(%" PRId64 ")", l->memory_space);
  }
  fputc('}', f);
}

// Between list elements; XLA marks every fifth of a long list.
static void cw__print_separator(FILE* f, size_t i) {
  if (!i) return;
  fputs(", ", f);
  if (i % 5 == 0) fprintf(f, "/*index=%zu*/", i);
}

static void cw__print_shape(FILE* f, const cw__shape_t* s, bool with_layout, int depth) {
  if (!s) {
    fputs("()", f);
    return;
  }
  if (depth > CW__MAX_DEPTH) {
    fputs("(...)", f);
    return;
  }
  if (s->element_type == CW_HLO_TUPLE) {
    fputc('(', f);
    for (size_t i = 0; i < s->n_tuple_shapes; i++) {
      cw__print_separator(f, i);
      cw__print_shape(f, s->tuple_shapes[i], with_layout, depth + 1);
    }
    fputc(')', f);
    return;
  }
  const char* name = cw__type_name(s->element_type);
  if (name) {
    fputs(name, f);
  } else {
    fprintf(f, "type%d", s->element_type);
  }
  fputc('[', f);
  for (size_t i = 0; i < s->n_dimensions; i++) {
    if (i) fputc(',', f);
    bool dynamic = i < s->n_is_dynamic_dimension && s->is_dynamic_dimension[i];
    if (dynamic && s->dimensions[i] == INT64_MIN) {
      fputc('?', f);
    } else {
      fprintf(f, "%s%" PRId64, dynamic ? "<=" : "", s->dimensions[i]);
    }
  }
  fputc(']', f);
  if (with_layout && s->layout && s->element_type != CW_HLO_TOKEN &&
      s->element_type != CW_HLO_OPAQUE &&
      (s->n_dimensions || s->layout->memory_space || s->layout->n_tiles)) {
    cw__print_layout(f, s->layout);
  }
}

// ---- literals ----

// XLA's forms: a float with digits10 digits when that reads back as the
// same value, else max_digits10; a double likewise; a half or bfloat16
// always with its max_digits10 (`digits`).
static void cw__print_fp(FILE* f, double v, bool is_float, int digits) {
  if (isnan(v)) {
    fputs(signbit(v) ? "-nan" : "nan", f);
    return;
  }
  if (isinf(v)) {
    fputs(v < 0 ? "-inf" : "inf", f);
    return;
  }
  char buf[64];
  if (digits) {
    snprintf(buf, sizeof(buf), "%.*g", digits, v);
  } else if (is_float) {
    snprintf(buf, sizeof(buf), "%.6g", v);
    if (strtof(buf, NULL) != (float)v) snprintf(buf, sizeof(buf), "%.9g", v);
  } else {
    snprintf(buf, sizeof(buf), "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof(buf), "%.17g", v);
  }
  fputs(buf, f);
}

static float cw__half_to_float(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = ldexpf((float)man, -24);
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = ldexpf((float)(man | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

static float cw__bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

static uint16_t cw__u16_at(const ProtobufCBinaryData* d, size_t i) {
  return (uint16_t)(d->data[2 * i] | (d->data[2 * i + 1] << 8));
}

// One element, or false when the literal holds too few.
static bool cw__print_element(FILE* f, const Causeway__Hlo__Literal* l, int32_t type, size_t i) {
  switch (type) {
    case 1:
      if (i >= l->n_preds) return false;
      fputs(l->preds[i] ? "true" : "false", f);
      return true;
    case 2:
      if (i >= l->s8s.len) return false;
      fprintf(f, "%d", (int)(int8_t)l->s8s.data[i]);
      return true;
    case 6:
      if (i >= l->u8s.len) return false;
      fprintf(f, "%u", (unsigned)l->u8s.data[i]);
      return true;
    case 3:
      if (i >= l->s16s.len / 2) return false;
      fprintf(f, "%d", (int)(int16_t)cw__u16_at(&l->s16s, i));
      return true;
    case 7:
      if (i >= l->u16s.len / 2) return false;
      fprintf(f, "%u", (unsigned)cw__u16_at(&l->u16s, i));
      return true;
    case 4:
      if (i >= l->n_s32s) return false;
      fprintf(f, "%" PRId32, l->s32s[i]);
      return true;
    case 5:
      if (i >= l->n_s64s) return false;
      fprintf(f, "%" PRId64, l->s64s[i]);
      return true;
    case 8:
      if (i >= l->n_u32s) return false;
      fprintf(f, "%" PRIu32, l->u32s[i]);
      return true;
    case 9:
      if (i >= l->n_u64s) return false;
      fprintf(f, "%" PRIu64, l->u64s[i]);
      return true;
    case 10:
      if (i >= l->f16s.len / 2) return false;
      cw__print_fp(f, cw__half_to_float(cw__u16_at(&l->f16s, i)), true, 5);
      return true;
    case 16:
      if (i >= l->bf16s.len / 2) return false;
      cw__print_fp(f, cw__bf16_to_float(cw__u16_at(&l->bf16s, i)), true, 4);
      return true;
    case 11:
      if (i >= l->n_f32s) return false;
      cw__print_fp(f, l->f32s[i], true, 0);
      return true;
    case 12:
      if (i >= l->n_f64s) return false;
      cw__print_fp(f, l->f64s[i], false, 0);
      return true;
    case 15:
      if (i >= l->n_c64s / 2) return false;
      fputc('(', f);
      cw__print_fp(f, l->c64s[2 * i], true, 0);
      fputs(", ", f);
      cw__print_fp(f, l->c64s[2 * i + 1], true, 0);
      fputc(')', f);
      return true;
    case 18:
      if (i >= l->n_c128s / 2) return false;
      fputc('(', f);
      cw__print_fp(f, l->c128s[2 * i], false, 0);
      fputs(", ", f);
      cw__print_fp(f, l->c128s[2 * i + 1], false, 0);
      fputc(')', f);
      return true;
    default:
      return false;
  }
}

// Elements are stored in the literal's layout order and printed in
// row-major order, nested one brace level per dimension.
static bool cw__print_array(FILE* f, const Causeway__Hlo__Literal* l, const cw__shape_t* s,
                            int64_t* idx, size_t dim) {
  size_t rank = s->n_dimensions;
  if (dim == rank) {
    int64_t phys = 0, stride = 1;
    const Causeway__Hlo__Layout* lay = l->shape ? l->shape->layout : NULL;
    bool use_layout = lay && lay->n_minor_to_major == rank;
    for (size_t k = 0; k < rank; k++) {
      size_t d = use_layout ? (size_t)lay->minor_to_major[k] : rank - 1 - k;
      if (d >= rank) return false;
      phys += idx[d] * stride;
      stride *= s->dimensions[d];
    }
    return cw__print_element(f, l, s->element_type, (size_t)phys);
  }
  bool inner = rank > 1;
  fputs(inner ? "{ " : "{", f);
  for (int64_t i = 0; i < s->dimensions[dim]; i++) {
    if (i) fputs(", ", f);
    idx[dim] = i;
    if (!cw__print_array(f, l, s, idx, dim + 1)) return false;
  }
  fputs(inner ? " }" : "}", f);
  return true;
}

static void cw__print_literal(FILE* f, const cw__instr_t* in) {
  const cw__shape_t* s = in->shape;
  int64_t n = cw_hlo_elements(s);
  // An empty array still prints a brace group per index of the dimensions
  // before its first zero: bounded as its elements are.
  int64_t groups = 1;
  for (size_t i = 0; n == 0 && s && i < s->n_dimensions && s->dimensions[i] && groups >= 0; i++) {
    groups = s->dimensions[i] > CW__MAX_CONSTANT_ELEMENTS ? -1 : groups * s->dimensions[i];
    if (groups > CW__MAX_CONSTANT_ELEMENTS) groups = -1;
  }
  if (!in->literal || n < 0 || n > CW__MAX_CONSTANT_ELEMENTS || groups < 0 ||
      s->n_dimensions > 8) {
    fputs("{...}", f);
    return;
  }
  int64_t idx[8] = {0};
  // Print to a side buffer: a literal short of data prints as "{...}".
  char* buf = NULL;
  size_t len = 0;
  FILE* g = open_memstream(&buf, &len);
  bool ok = g && cw__print_array(g, in->literal, s, idx, 0);
  if (g) fclose(g);
  if (ok) {
    fputs(buf, f);
  } else {
    fputs("{...}", f);
  }
  free(buf);
}

// ---- attributes ----

static void cw__print_escaped(FILE* f, const char* s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      case '"': fputs("\\\"", f); break;
      case '\'': fputs("\\'", f); break;
      case '\\': fputs("\\\\", f); break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          fprintf(f, "\\%03o", c);
        } else {
          fputc(c, f);
        }
    }
  }
}

static void cw__print_axis(FILE* f, const Causeway__Hlo__Mesh* mesh, const Causeway__Hlo__AxisRef* a) {
  if (mesh && a->mesh_axis_index >= 0 && (size_t)a->mesh_axis_index < mesh->n_axes) {
    fprintf(f, "'%s'", mesh->axes[a->mesh_axis_index]->name);
  } else {
    fprintf(f, "%" PRId64, a->mesh_axis_index);
  }
  if (a->sub_axis_info) {
    fprintf(f, ":(%" PRId64 ")%" PRId64, a->sub_axis_info->pre_size, a->sub_axis_info->size);
  }
}

static void cw__print_axes(FILE* f, const Causeway__Hlo__Mesh* mesh, Causeway__Hlo__AxisRef** a,
                           size_t n) {
  fputc('{', f);
  for (size_t i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    cw__print_axis(f, mesh, a[i]);
  }
  fputc('}', f);
}

static void cw__print_mesh(FILE* f, const Causeway__Hlo__Mesh* mesh) {
  fputs("mesh[", f);
  for (size_t i = 0; mesh && i < mesh->n_axes; i++) {
    fprintf(f, "%s'%s'=%" PRId64, i ? "," : "", mesh->axes[i]->name, mesh->axes[i]->size);
  }
  fputc(']', f);
  if (mesh && mesh->n_device_ids) {
    fputs(", device_ids=(", f);
    cw__print_ints(f, mesh->device_ids, mesh->n_device_ids, ",");
    fputc(')', f);
  }
}

// A device list as an iota: "<=[reshape dims]", then "T(perm)" unless the
// permutation is the identity (shardings and replica groups alike).
static void cw__print_iota(FILE* f, const int64_t* dims, size_t n_dims, const int32_t* perm,
                           size_t n_perm) {
  fputs("<=[", f);
  cw__print_ints(f, dims, n_dims, ",");
  fputc(']', f);
  bool identity = true;
  for (size_t i = 0; i < n_perm; i++) identity = identity && perm[i] == (int32_t)i;
  if (identity) return;
  fputs("T(", f);
  for (size_t i = 0; i < n_perm; i++) fprintf(f, "%s%" PRId32, i ? "," : "", perm[i]);
  fputc(')', f);
}

static void cw__print_sharding(FILE* f, const Causeway__Hlo__OpSharding* s, int depth) {
  if (depth > CW__MAX_DEPTH) {
    fputs("{...}", f);
    return;
  }
  if (s->named_sharding) {
    const Causeway__Hlo__NamedSharding* n = s->named_sharding;
    if (n->mesh && !n->mesh->n_axes && n->mesh->n_device_ids == 1) {
      fprintf(f, "{maximal_mesh[device_id=%" PRId64 "]}", n->mesh->device_ids[0]);
      return;
    }
    fputc('{', f);
    cw__print_mesh(f, n->mesh);
    fputs(", [", f);
    for (size_t i = 0; i < n->n_dim_shardings; i++) {
      if (i) fputs(", ", f);
      cw__print_axes(f, n->mesh, n->dim_shardings[i]->axes, n->dim_shardings[i]->n_axes);
    }
    fputc(']', f);
    if (n->n_replicated_axes) {
      fputs(", replicated=", f);
      cw__print_axes(f, n->mesh, n->replicated_axes, n->n_replicated_axes);
    }
    if (n->n_unreduced_axes) {
      fputs(", unreduced=", f);
      cw__print_axes(f, n->mesh, n->unreduced_axes, n->n_unreduced_axes);
    }
    if (n->n_manual_axes) {
      fputs(", manual=", f);
      cw__print_axes(f, n->mesh, n->manual_axes, n->n_manual_axes);
    }
    fputc('}', f);
    return;
  }
  switch (s->type) {
    case 0: fputs("{replicated}", f); return;
    case 4: fputs("{manual}", f); return;
    case 5: fputs("{unknown}", f); return;
    case 6: fputs("{unreduced}", f); return;
    case 1:
      fprintf(f, "{maximal device=%" PRId64 "}",
              s->n_tile_assignment_devices ? s->tile_assignment_devices[0] : 0);
      return;
    case 2:
      fputc('{', f);
      for (size_t i = 0; i < s->n_tuple_shardings; i++) {
        if (i) fputs(", ", f);
        cw__print_sharding(f, s->tuple_shardings[i], depth + 1);
      }
      fputc('}', f);
      return;
    default: break;
  }
  fputs("{devices=[", f);
  cw__print_ints(f, s->tile_assignment_dimensions, s->n_tile_assignment_dimensions, ",");
  fputc(']', f);
  if (s->n_iota_reshape_dims) {
    cw__print_iota(f, s->iota_reshape_dims, s->n_iota_reshape_dims, s->iota_transpose_perm,
                   s->n_iota_transpose_perm);
  } else {
    cw__print_ints(f, s->tile_assignment_devices, s->n_tile_assignment_devices, ",");
  }
  if (s->replicate_on_last_tile_dim) fputs(" last_tile_dim_replicate", f);
  if (s->n_last_tile_dims) {
    static const char* const kinds[] = {"replicated", "maximal", "tuple", "other", "manual",
                                        "unknown", "unreduced"};
    fputs(" last_tile_dims={", f);
    for (size_t i = 0; i < s->n_last_tile_dims; i++) {
      int32_t k = s->last_tile_dims[i];
      fprintf(f, "%s%s", i ? ", " : "", k >= 0 && k <= 6 ? kinds[k] : "other");
    }
    fputc('}', f);
  }
  fputc('}', f);
}

static void cw__print_metadata(FILE* f, const Causeway__Hlo__OpMetadata* md) {
  char* buf = NULL;
  size_t len = 0;
  FILE* g = open_memstream(&buf, &len);
  if (!g) return;
  const char* sep = "";
#define CW__MD_STR(field)                  \
  if (md->field && md->field[0]) {         \
    fprintf(g, "%s" #field "=\"", sep);    \
    cw__print_escaped(g, md->field);       \
    fputc('"', g);                         \
    sep = " ";                             \
  }
#define CW__MD_INT(field)                                       \
  if (md->field) {                                              \
    fprintf(g, "%s" #field "=%" PRId32, sep, (int32_t)md->field); \
    sep = " ";                                                  \
  }
  CW__MD_STR(op_type)
  CW__MD_STR(op_name)
  CW__MD_STR(source_file)
  CW__MD_INT(source_line)
  CW__MD_INT(source_end_line)
  CW__MD_INT(source_column)
  CW__MD_INT(source_end_column)
  CW__MD_STR(deduplicated_name)
  CW__MD_INT(stack_frame_id)
  CW__MD_STR(scheduling_name)
#undef CW__MD_STR
#undef CW__MD_INT
  fclose(g);
  if (len) fprintf(f, ", metadata={%s}", buf);
  free(buf);
}

// A backend config that lexes as a JSON-like dictionary is printed raw, as
// XLA does; anything else quoted.
static bool cw__lexes_as_dict(const uint8_t* s, size_t n) {
  if (n < 2 || s[0] != '{' || s[n - 1] != '}') return false;
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = s[i];
    if (!c) return false;
    if (in_str) {
      if (c == '\\') {
        i++;
      } else if (c == '"') {
        in_str = false;
      }
      continue;
    }
    if (c == '"') in_str = true;
    if (c == '{') depth++;
    if (c == '}' && --depth < 0) return false;
    if (depth == 0 && i != n - 1) return false;
  }
  return depth == 0 && !in_str;
}

static void cw__print_backend_config(FILE* f, const ProtobufCBinaryData* b) {
  if (!b->len) return;
  fputs(", backend_config=", f);
  if (cw__lexes_as_dict(b->data, b->len)) {
    // XLA holds a JSON config as its proto and prints it with the keys in
    // order; any other dictionary (an FFI call's attributes) as it is.
    json_t* j = json_loadb((const char*)b->data, b->len, 0, NULL);
    char* sorted = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))
                     : NULL;
    json_decref(j);
    if (sorted) {
      fputs(sorted, f);
      free(sorted);
    } else {
      fwrite(b->data, 1, b->len, f);
    }
    return;
  }
  char* s = malloc(b->len + 1);
  if (!s) return;
  memcpy(s, b->data, b->len);
  s[b->len] = 0;
  fputc('"', f);
  cw__print_escaped(f, s);
  fputc('"', f);
  free(s);
}

static int cw__cmp_attr(const void* a, const void* b) {
  return strcmp((*(Causeway__Hlo__FrontendAttribute* const*)a)->key,
                (*(Causeway__Hlo__FrontendAttribute* const*)b)->key);
}

static void cw__print_frontend_attributes(FILE* f, const char* prefix,
                                          const Causeway__Hlo__FrontendAttributes* fa) {
  if (!fa || !fa->n_map) return;
  Causeway__Hlo__FrontendAttribute** sorted = malloc(fa->n_map * sizeof(*sorted));
  if (!sorted) return;
  memcpy(sorted, fa->map, fa->n_map * sizeof(*sorted));
  qsort(sorted, fa->n_map, sizeof(*sorted), cw__cmp_attr);
  fprintf(f, "%sfrontend_attributes={", prefix);
  for (size_t i = 0; i < fa->n_map; i++) {
    fprintf(f, "%s%s=\"", i ? "," : "", sorted[i]->key);
    cw__print_escaped(f, sorted[i]->value);
    fputc('"', f);
  }
  fputc('}', f);
  free(sorted);
}

static void cw__print_dims_attr(FILE* f, const char* name, const int64_t* v, size_t n) {
  fprintf(f, ", %s={", name);
  cw__print_ints(f, v, n, ",");
  fputc('}', f);
}

static void cw__print_window(FILE* f, const Causeway__Hlo__Window* w) {
  if (!w || !w->n_dimensions) return;
  size_t n = w->n_dimensions;
  bool pad = false, stride = false, lhs = false, rhs = false, rev = false;
  for (size_t i = 0; i < n; i++) {
    const Causeway__Hlo__WindowDimension* d = w->dimensions[i];
    pad = pad || d->padding_low || d->padding_high;
    stride = stride || d->stride != 1;
    lhs = lhs || d->base_dilation != 1;
    rhs = rhs || d->window_dilation != 1;
    rev = rev || d->window_reversal;
  }
  fputs(", window={size=", f);
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? "x" : "", w->dimensions[i]->size);
  if (stride) {
    fputs(" stride=", f);
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "%s%" PRId64, i ? "x" : "", w->dimensions[i]->stride);
    }
  }
  if (pad) {
    fputs(" pad=", f);
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "%s%" PRId64 "_%" PRId64, i ? "x" : "", w->dimensions[i]->padding_low,
              w->dimensions[i]->padding_high);
    }
  }
  if (lhs) {
    fputs(" lhs_dilate=", f);
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "%s%" PRId64, i ? "x" : "", w->dimensions[i]->base_dilation);
    }
  }
  if (rhs) {
    fputs(" rhs_dilate=", f);
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "%s%" PRId64, i ? "x" : "", w->dimensions[i]->window_dilation);
    }
  }
  if (rev) {
    fputs(" rhs_reversal=", f);
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "%s%d", i ? "x" : "", w->dimensions[i]->window_reversal ? 1 : 0);
    }
  }
  fputc('}', f);
}

// dim_labels: batch 'b', feature 'f' and spatial dimensions numbered, per
// operand, e.g. b01f_01io->b01f.
static void cw__print_dim_labels(FILE* f, const Causeway__Hlo__ConvolutionDimensionNumbers* d,
                                 size_t rank) {
  if (!d || rank < 2 || rank > 16) return;
  char in[17], k[17], out[17];
  memset(in, '?', rank);
  memset(k, '?', rank);
  memset(out, '?', rank);
  in[rank] = k[rank] = out[rank] = 0;
#define CW__SET(arr, i, c) \
  if ((i) >= 0 && (size_t)(i) < rank) arr[(i)] = (c)
  CW__SET(in, d->input_batch_dimension, 'b');
  CW__SET(in, d->input_feature_dimension, 'f');
  CW__SET(k, d->kernel_input_feature_dimension, 'i');
  CW__SET(k, d->kernel_output_feature_dimension, 'o');
  CW__SET(out, d->output_batch_dimension, 'b');
  CW__SET(out, d->output_feature_dimension, 'f');
  for (size_t i = 0; i < d->n_input_spatial_dimensions && i < 10; i++) {
    CW__SET(in, d->input_spatial_dimensions[i], (char)('0' + i));
  }
  for (size_t i = 0; i < d->n_kernel_spatial_dimensions && i < 10; i++) {
    CW__SET(k, d->kernel_spatial_dimensions[i], (char)('0' + i));
  }
  for (size_t i = 0; i < d->n_output_spatial_dimensions && i < 10; i++) {
    CW__SET(out, d->output_spatial_dimensions[i], (char)('0' + i));
  }
#undef CW__SET
  fprintf(f, ", dim_labels=%s_%s->%s", in, k, out);
}

static void cw__print_replica_groups(FILE* f, const cw__instr_t* in) {
  fputs(", replica_groups=", f);
  if (in->mesh_axes_replica_group_list) {
    const Causeway__Hlo__MeshAxesReplicaGroupList* r = in->mesh_axes_replica_group_list;
    cw__print_mesh(f, r->mesh);
    fputc(' ', f);
    cw__print_axes(f, r->mesh, r->axes, r->n_axes);
    return;
  }
  if (in->iota_collective_device_list) {
    const Causeway__Hlo__IotaReplicaGroupList* r = in->iota_collective_device_list;
    fprintf(f, "[%" PRId64 ",%" PRId64 "]", r->num_replica_groups, r->num_devices_per_group);
    cw__print_iota(f, r->iota_reshape_dims, r->n_iota_reshape_dims, r->iota_transpose_perm,
                   r->n_iota_transpose_perm);
    return;
  }
  Causeway__Hlo__ReplicaGroup** g = in->replica_groups;
  size_t n = in->n_replica_groups;
  if (in->collective_device_list) {
    g = in->collective_device_list->replica_groups;
    n = in->collective_device_list->n_replica_groups;
  }
  fputc('{', f);
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",{" : "{", f);
    cw__print_ints(f, g[i]->replica_ids, g[i]->n_replica_ids, ",");
    fputc('}', f);
  }
  fputc('}', f);
}

static void cw__print_shape_index(FILE* f, const int64_t* v, size_t n) {
  fputc('{', f);
  cw__print_ints(f, v, n, ",");
  fputc('}', f);
}

static const char* cw__default_compare_type(int32_t t) {
  switch (t) {
    case 1: case 6: case 7: case 8: case 9: case 22: case 27: case 31: return "UNSIGNED";
    case 2: case 3: case 4: case 5: case 21: case 26: case 30: return "SIGNED";
    default: return "FLOAT";
  }
}

typedef struct cw__printer_s {
  FILE* f;
  const cw_hlo_module_t* m;
  const cw__comp_t* c;
  size_t max_len;
  bool over;  // the text passed max_len: printing stops
} cw__printer_t;

// A module's names are printed once per reference, so text can grow with
// the square of the module: every list that names others checks the room.
static bool cw__room(cw__printer_t* p) {
  if (!p->over) {
    long at = ftell(p->f);
    p->over = at < 0 || (size_t)at > p->max_len;
  }
  return !p->over;
}

static void cw__print_comp_ref(cw__printer_t* p, int64_t id) {
  const cw__comp_t* c = cw_hlo_find_comp(p->m, id);
  if (c) {
    fprintf(p->f, "%%%s", c->pb->name);
  } else {
    fprintf(p->f, "%%<computation %" PRId64 ">", id);
  }
}

// What XLA prints after the operands, before sharding and metadata: the
// attributes of the instruction's kind, then the computations it calls.
static void cw__print_kind_attributes(cw__printer_t* p, const cw__instr_t* in) {
  FILE* f = p->f;
  const char* op = in->opcode;
  static const char* const with_dims[] = {"broadcast", "concatenate", "reduce", "reverse",
                                          "transpose", "sort", "map", NULL};
  static const char* const collectives[] = {"all-reduce", "all-gather", "reduce-scatter",
                                            "all-to-all", "all-reduce-start", "all-gather-start",
                                            "ragged-all-to-all", "collective-broadcast", NULL};
  static const char* const channels[] = {"collective-permute", "collective-permute-start",
                                         "send", "recv", NULL};
  if (!strcmp(op, "fusion")) {
    fprintf(f, ", kind=%s", in->fusion_kind);
  } else if (!strcmp(op, "get-tuple-element")) {
    fprintf(f, ", index=%" PRId64, in->tuple_index);
  } else if (!strcmp(op, "compare")) {
    fprintf(f, ", direction=%s", in->comparison_direction);
    const cw__instr_t* a = in->n_operand_ids ? cw_hlo_find_instr(p->c, in->operand_ids[0]) : NULL;
    if (in->comparison_type[0] && a && a->shape &&
        strcmp(in->comparison_type, cw__default_compare_type(a->shape->element_type))) {
      fprintf(f, ", type=%s", in->comparison_type);
    }
  } else if (cw_hlo_opcode_in(op, with_dims)) {
    cw__print_dims_attr(f, "dimensions", in->dimensions, in->n_dimensions);
    if (!strcmp(op, "sort") && in->is_stable) fputs(", is_stable=true", f);
  } else if (!strcmp(op, "iota")) {
    fprintf(f, ", iota_dimension=%" PRId64, in->n_dimensions ? in->dimensions[0] : 0);
  } else if (!strcmp(op, "slice")) {
    fputs(", slice={", f);
    for (size_t i = 0; i < in->n_slice_dimensions; i++) {
      const Causeway__Hlo__SliceDimensions* s = in->slice_dimensions[i];
      fprintf(f, "%s[%" PRId64 ":%" PRId64, i ? ", " : "", s->start, s->limit);
      if (s->stride != 1) fprintf(f, ":%" PRId64, s->stride);
      fputc(']', f);
    }
    fputc('}', f);
  } else if (!strcmp(op, "dynamic-slice")) {
    cw__print_dims_attr(f, "dynamic_slice_sizes", in->dynamic_slice_sizes,
                        in->n_dynamic_slice_sizes);
  } else if (!strcmp(op, "pad") && in->padding_config) {
    fputs(", padding=", f);
    for (size_t i = 0; i < in->padding_config->n_dimensions; i++) {
      const Causeway__Hlo__PaddingDimension* d = in->padding_config->dimensions[i];
      fprintf(f, "%s%" PRId64 "_%" PRId64, i ? "x" : "", d->edge_padding_low,
              d->edge_padding_high);
      if (d->interior_padding) fprintf(f, "_%" PRId64, d->interior_padding);
    }
  } else if (!strcmp(op, "dot") && in->dot_dimension_numbers) {
    const Causeway__Hlo__DotDimensionNumbers* d = in->dot_dimension_numbers;
    if (d->n_lhs_batch_dimensions) {
      cw__print_dims_attr(f, "lhs_batch_dims", d->lhs_batch_dimensions, d->n_lhs_batch_dimensions);
    }
    cw__print_dims_attr(f, "lhs_contracting_dims", d->lhs_contracting_dimensions,
                        d->n_lhs_contracting_dimensions);
    if (d->n_rhs_batch_dimensions) {
      cw__print_dims_attr(f, "rhs_batch_dims", d->rhs_batch_dimensions, d->n_rhs_batch_dimensions);
    }
    cw__print_dims_attr(f, "rhs_contracting_dims", d->rhs_contracting_dimensions,
                        d->n_rhs_contracting_dimensions);
  } else if (!strcmp(op, "convolution")) {
    cw__print_window(f, in->window);
    size_t rank = in->shape ? in->shape->n_dimensions : 0;
    cw__print_dim_labels(f, in->convolution_dimension_numbers, rank);
    if (in->feature_group_count > 1) {
      fprintf(f, ", feature_group_count=%" PRId64, in->feature_group_count);
    }
    if (in->batch_group_count > 1) {
      fprintf(f, ", batch_group_count=%" PRId64, in->batch_group_count);
    }
  } else if (!strcmp(op, "reduce-window") || !strcmp(op, "select-and-scatter")) {
    cw__print_window(f, in->window);
  } else if (!strcmp(op, "gather") && in->gather_dimension_numbers) {
    const Causeway__Hlo__GatherDimensionNumbers* d = in->gather_dimension_numbers;
    cw__print_dims_attr(f, "offset_dims", d->offset_dims, d->n_offset_dims);
    cw__print_dims_attr(f, "collapsed_slice_dims", d->collapsed_slice_dims,
                        d->n_collapsed_slice_dims);
    cw__print_dims_attr(f, "start_index_map", d->start_index_map, d->n_start_index_map);
    if (d->n_operand_batching_dims || d->n_start_indices_batching_dims) {
      cw__print_dims_attr(f, "operand_batching_dims", d->operand_batching_dims,
                          d->n_operand_batching_dims);
      cw__print_dims_attr(f, "start_indices_batching_dims", d->start_indices_batching_dims,
                          d->n_start_indices_batching_dims);
    }
    fprintf(f, ", index_vector_dim=%" PRId64, d->index_vector_dim);
    cw__print_dims_attr(f, "slice_sizes", in->gather_slice_sizes, in->n_gather_slice_sizes);
    if (in->indices_are_sorted) fputs(", indices_are_sorted=true", f);
  } else if (!strcmp(op, "scatter") && in->scatter_dimension_numbers) {
    const Causeway__Hlo__ScatterDimensionNumbers* d = in->scatter_dimension_numbers;
    cw__print_dims_attr(f, "update_window_dims", d->update_window_dims, d->n_update_window_dims);
    cw__print_dims_attr(f, "inserted_window_dims", d->inserted_window_dims,
                        d->n_inserted_window_dims);
    cw__print_dims_attr(f, "scatter_dims_to_operand_dims", d->scatter_dims_to_operand_dims,
                        d->n_scatter_dims_to_operand_dims);
    if (d->n_input_batching_dims || d->n_scatter_indices_batching_dims) {
      cw__print_dims_attr(f, "input_batching_dims", d->input_batching_dims,
                          d->n_input_batching_dims);
      cw__print_dims_attr(f, "scatter_indices_batching_dims", d->scatter_indices_batching_dims,
                          d->n_scatter_indices_batching_dims);
    }
    fprintf(f, ", index_vector_dim=%" PRId64, d->index_vector_dim);
    if (in->indices_are_sorted) fputs(", indices_are_sorted=true", f);
    if (in->unique_indices) fputs(", unique_indices=true", f);
  } else if (cw_hlo_opcode_in(op, collectives)) {
    if (in->channel_id > 0) fprintf(f, ", channel_id=%" PRId64, in->channel_id);
    cw__print_replica_groups(f, in);
    if (in->constrain_layout) fputs(", constrain_layout=true", f);
    // reduce-scatter is an all-reduce and prints as one before its dimension.
    bool reduce_scatter = !strcmp(op, "reduce-scatter");
    if (reduce_scatter && in->use_global_device_ids) fputs(", use_global_device_ids=true", f);
    if (strcmp(op, "all-reduce") && strcmp(op, "all-reduce-start") && in->n_dimensions) {
      cw__print_dims_attr(f, "dimensions", in->dimensions, in->n_dimensions);
    }
    if (!reduce_scatter && in->use_global_device_ids) fputs(", use_global_device_ids=true", f);
  } else if (cw_hlo_opcode_in(op, channels)) {
    if (in->channel_id > 0) fprintf(f, ", channel_id=%" PRId64, in->channel_id);
    if (in->n_source_target_pairs) {
      fputs(", source_target_pairs={", f);
      for (size_t i = 0; i < in->n_source_target_pairs; i++) {
        fprintf(f, "%s{%" PRId64 ",%" PRId64 "}", i ? "," : "",
                in->source_target_pairs[i]->source, in->source_target_pairs[i]->target);
      }
      fputc('}', f);
    }
    if (in->is_host_transfer) fputs(", is_host_transfer=true", f);
  } else if (!strcmp(op, "custom-call")) {
    fputs(", custom_call_target=\"", f);
    cw__print_escaped(f, in->custom_call_target);
    fputc('"', f);
    cw__print_window(f, in->window);
    if (in->convolution_dimension_numbers) {
      cw__print_dim_labels(f, in->convolution_dimension_numbers,
                           in->shape ? in->shape->n_dimensions : 0);
    }
    if (in->n_operand_shapes_with_layout) {
      fputs(", operand_layout_constraints={", f);
      for (size_t i = 0; i < in->n_operand_shapes_with_layout; i++) {
        if (i) fputs(", ", f);
        cw__print_shape(f, in->operand_shapes_with_layout[i], true, 0);
      }
      fputc('}', f);
    }
    if (in->custom_call_has_side_effect) fputs(", custom_call_has_side_effect=true", f);
    if (in->n_output_operand_aliasing) {
      fputs(", output_to_operand_aliasing={", f);
      for (size_t i = 0; i < in->n_output_operand_aliasing; i++) {
        const Causeway__Hlo__OutputOperandAliasing* a = in->output_operand_aliasing[i];
        if (i) fputs(", ", f);
        cw__print_shape_index(f, a->output_shape_index, a->n_output_shape_index);
        fprintf(f, ": (%" PRId64 ", ", a->operand_index);
        cw__print_shape_index(f, a->operand_shape_index, a->n_operand_shape_index);
        fputc(')', f);
      }
      fputc('}', f);
    }
    static const char* const versions[] = {NULL,
                                           NULL,
                                           "API_VERSION_STATUS_RETURNING",
                                           "API_VERSION_STATUS_RETURNING_UNIFIED",
                                           "API_VERSION_TYPED_FFI"};
    int32_t v = in->custom_call_api_version;
    if (v >= 2 && v <= 4) fprintf(f, ", api_version=%s", versions[v]);
  } else if (!strcmp(op, "reduce-precision")) {
    fprintf(f, ", exponent_bits=%" PRId32 ", mantissa_bits=%" PRId32, in->exponent_bits,
            in->mantissa_bits);
  } else if (!strcmp(op, "rng")) {
    fprintf(f, ", distribution=%s", in->distribution == 2 ? "rng_normal" : "rng_uniform");
  } else if (!strcmp(op, "rng-bit-generator")) {
    static const char* const algs[] = {"rng_default", "rng_three_fry", "rng_philox"};
    int32_t a = in->rng_algorithm;
    fprintf(f, ", algorithm=%s", a >= 0 && a <= 2 ? algs[a] : "rng_default");
  } else if (!strcmp(op, "fft")) {
    static const char* const types[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
    int32_t t = in->fft_type;
    fprintf(f, ", fft_type=%s", t >= 0 && t <= 3 ? types[t] : "FFT");
    cw__print_dims_attr(f, "fft_length", in->fft_length, in->n_fft_length);
  } else if (!strcmp(op, "cholesky") && in->cholesky_options) {
    fprintf(f, ", lower=%s", in->cholesky_options->lower ? "true" : "false");
  } else if (!strcmp(op, "triangular-solve") && in->triangular_solve_options) {
    const Causeway__Hlo__TriangularSolveOptions* o = in->triangular_solve_options;
    static const char* const tr[] = {"TRANSPOSE_INVALID", "NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
    if (o->left_side) fputs(", left_side=true", f);
    if (o->lower) fputs(", lower=true", f);
    if (o->unit_diagonal) fputs(", unit_diagonal=true", f);
    fprintf(f, ", transpose_a=%s",
            o->transpose_a >= 0 && o->transpose_a <= 3 ? tr[o->transpose_a] : tr[0]);
  } else if (!strcmp(op, "topk")) {
    fprintf(f, ", k=%" PRId64 ", largest=%s", in->k, in->largest ? "true" : "false");
  }

  // The computations it calls, named as XLA names them per kind.
  size_t nc = in->n_called_computation_ids;
  const int64_t* cc = in->called_computation_ids;
  if (!nc) return;
  static const char* const to_apply[] = {"call", "map", "reduce-window", "reduce", "all-reduce",
                                         "reduce-scatter", "all-reduce-start", "scatter", "topk",
                                         "sort", NULL};
  if (!strcmp(op, "while") && nc >= 2) {
    // A while calls its body first, its condition second.
    fputs(", condition=", f);
    cw__print_comp_ref(p, cc[1]);
    fputs(", body=", f);
    cw__print_comp_ref(p, cc[0]);
  } else if (!strcmp(op, "select-and-scatter") && nc >= 2) {
    fputs(", select=", f);
    cw__print_comp_ref(p, cc[0]);
    fputs(", scatter=", f);
    cw__print_comp_ref(p, cc[1]);
  } else if (!strcmp(op, "conditional")) {
    const cw__instr_t* b = in->n_operand_ids ? cw_hlo_find_instr(p->c, in->operand_ids[0]) : NULL;
    if (b && b->shape && b->shape->element_type == 1 && nc == 2) {
      fputs(", true_computation=", f);
      cw__print_comp_ref(p, cc[0]);
      fputs(", false_computation=", f);
      cw__print_comp_ref(p, cc[1]);
    } else {
      fputs(", branch_computations={", f);
      for (size_t i = 0; i < nc && cw__room(p); i++) {
        if (i) fputs(", ", f);
        cw__print_comp_ref(p, cc[i]);
      }
      fputc('}', f);
    }
  } else if (cw_hlo_opcode_in(op, to_apply)) {
    fputs(", to_apply=", f);
    cw__print_comp_ref(p, cc[0]);
  } else {
    fputs(!strcmp(op, "custom-call") ? ", called_computations={" : ", calls=", f);
    for (size_t i = 0; i < nc && cw__room(p); i++) {
      if (i) fputs(", ", f);
      cw__print_comp_ref(p, cc[i]);
    }
    if (!strcmp(op, "custom-call")) fputc('}', f);
  }
}

static void cw__print_instruction(cw__printer_t* p, const cw__instr_t* in, bool root) {
  FILE* f = p->f;
  fprintf(f, "  %s%%%s = ", root ? "ROOT " : "", in->name);
  cw__print_shape(f, in->shape, true, 0);
  fprintf(f, " %s(", in->opcode);
  if (!strcmp(in->opcode, "parameter")) {
    fprintf(f, "%" PRId64, in->parameter_number);
  } else if (!strcmp(in->opcode, "constant")) {
    cw__print_literal(f, in);
  } else {
    for (size_t i = 0; i < in->n_operand_ids && cw__room(p); i++) {
      const cw__instr_t* o = cw_hlo_find_instr(p->c, in->operand_ids[i]);
      cw__print_separator(f, i);
      if (o) {
        fprintf(f, "%%%s", o->name);
      } else {
        fprintf(f, "%%<instruction %" PRId64 ">", in->operand_ids[i]);
      }
    }
  }
  fputc(')', f);
  cw__print_kind_attributes(p, in);
  if (in->sharding) {
    fputs(", sharding=", f);
    cw__print_sharding(f, in->sharding, 0);
  }
  cw__print_frontend_attributes(f, ", ", in->frontend_attributes);
  if (in->n_control_predecessor_ids) {
    fputs(", control-predecessors={", f);
    for (size_t i = 0; i < in->n_control_predecessor_ids && cw__room(p); i++) {
      const cw__instr_t* o = cw_hlo_find_instr(p->c, in->control_predecessor_ids[i]);
      fprintf(f, "%s%%%s", i ? ", " : "", o ? o->name : "<unknown>");
    }
    fputc('}', f);
  }
  if (in->metadata) cw__print_metadata(f, in->metadata);
  cw__print_backend_config(f, &in->backend_config);
  fputc('\n', f);
}

static int cw__cmp_param(const void* a, const void* b) {
  int64_t x = (*(cw__instr_t* const*)a)->parameter_number;
  int64_t y = (*(cw__instr_t* const*)b)->parameter_number;
  return (x > y) - (x < y);
}

static void cw__print_computation(cw__printer_t* p, const cw__comp_t* c, bool entry) {
  FILE* f = p->f;
  p->c = c;
  const cw__instr_t* root = cw_hlo_find_instr(c, c->pb->root_id);
  size_t np = 0;
  for (size_t i = 0; i < c->n; i++) np += !strcmp(c->pb->instructions[i]->opcode, "parameter");
  cw__instr_t** params = calloc(np ? np : 1, sizeof(*params));
  if (params) {
    np = 0;
    for (size_t i = 0; i < c->n; i++) {
      if (!strcmp(c->pb->instructions[i]->opcode, "parameter")) {
        params[np++] = c->pb->instructions[i];
      }
    }
    qsort(params, np, sizeof(*params), cw__cmp_param);
  }
  fprintf(f, "%s%%%s (", entry ? "ENTRY " : "", c->pb->name);
  for (size_t i = 0; params && i < np; i++) {
    fprintf(f, "%s%s: ", i ? ", " : "", params[i]->name);
    cw__print_shape(f, params[i]->shape, false, 0);
  }
  free(params);
  fputs(") -> ", f);
  cw__print_shape(f, root ? root->shape : NULL, false, 0);
  fputs(" {\n", f);
  for (size_t i = 0; i < c->n && cw__room(p); i++) {
    const cw__instr_t* in =
        c->order ? cw_hlo_find_instr(c, c->order[i]) : c->pb->instructions[i];
    cw__print_instruction(p, in, in == root);
  }
  fputs("}\n\n", f);
}

static void cw__print_program_shape(FILE* f, const Causeway__Hlo__ProgramShape* ps) {
  fputc('(', f);
  for (size_t i = 0; i < ps->n_parameters; i++) {
    if (i) fputs(", ", f);
    cw__print_shape(f, ps->parameters[i], true, 0);
  }
  fputs(")->", f);
  cw__print_shape(f, ps->result, true, 0);
}

static void cw__print_bools(FILE* f, const char* name, const protobuf_c_boolean* v, size_t n) {
  bool any = false;
  for (size_t i = 0; i < n; i++) any = any || v[i];
  if (!any) return;
  fprintf(f, ", %s={", name);
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%s", i ? "," : "", v[i] ? "true" : "false");
  fputc('}', f);
}

static void cw__print_header(FILE* f, const cw_hlo_module_t* m) {
  const Causeway__Hlo__Module* mod = m->mod;
  const Causeway__Hlo__ModuleConfig* cfg = m->config;
  fprintf(f, "HloModule %s", mod->name);
  if (mod->schedule) fputs(", is_scheduled=true", f);
  const Causeway__Hlo__InputOutputAlias* io = mod->input_output_alias;
  if (io && io->n_entries) {
    fputs(", input_output_alias={ ", f);
    for (size_t i = 0; i < io->n_entries; i++) {
      const Causeway__Hlo__AliasEntry* e = io->entries[i];
      if (i) fputs(", ", f);
      cw__print_shape_index(f, e->output_shape_index, e->n_output_shape_index);
      fprintf(f, ": (%" PRId64 ", ", e->parameter_number);
      cw__print_shape_index(f, e->parameter_shape_index, e->n_parameter_shape_index);
      fprintf(f, ", %s)", e->kind == 2 ? "must-alias" : "may-alias");
    }
    fputs(" }", f);
  }
  const Causeway__Hlo__ProgramShape* layout =
      cfg && cfg->entry_computation_layout ? cfg->entry_computation_layout
                                           : mod->host_program_shape;
  if (layout) {
    fputs(", entry_computation_layout={", f);
    cw__print_program_shape(f, layout);
    fputc('}', f);
  }
  if (cfg) {
    cw__print_bools(f, "allow_spmd_sharding_propagation_to_parameters",
                    cfg->allow_spmd_sharding_propagation_to_parameters,
                    cfg->n_allow_spmd_sharding_propagation_to_parameters);
    cw__print_bools(f, "allow_spmd_sharding_propagation_to_output",
                    cfg->allow_spmd_sharding_propagation_to_output,
                    cfg->n_allow_spmd_sharding_propagation_to_output);
  }
  if (cfg && cfg->replica_count > 1) fprintf(f, ", replica_count=%" PRId64, cfg->replica_count);
  if (cfg && cfg->num_partitions > 1) {
    fprintf(f, ", num_partitions=%" PRId64, cfg->num_partitions);
  }
  cw__print_frontend_attributes(f, ", ", mod->frontend_attributes);
  fputs("\n\n", f);
}

static void cw__print_names(FILE* f, const char* title, char** names, size_t n) {
  if (!n) return;
  fprintf(f, "%s\n", title);
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "%zu \"", i + 1);
    cw__print_escaped(f, names[i]);
    fputs("\"\n", f);
  }
  fputc('\n', f);
}

static void cw__print_stack_frames(FILE* f, const Causeway__Hlo__StackFrameIndex* s) {
  if (!s || (!s->n_file_names && !s->n_function_names && !s->n_file_locations &&
             !s->n_stack_frames)) {
    return;
  }
  cw__print_names(f, "FileNames", s->file_names, s->n_file_names);
  cw__print_names(f, "FunctionNames", s->function_names, s->n_function_names);
  if (s->n_file_locations) {
    fputs("FileLocations\n", f);
    for (size_t i = 0; i < s->n_file_locations; i++) {
      const Causeway__Hlo__FileLocation* l = s->file_locations[i];
      fprintf(f,
              "%zu {file_name_id=%d function_name_id=%d line=%d end_line=%d column=%d "
              "end_column=%d}\n",
              i + 1, l->file_name_id, l->function_name_id, l->line, l->end_line, l->column,
              l->end_column);
    }
    fputc('\n', f);
  }
  if (s->n_stack_frames) {
    fputs("StackFrames\n", f);
    for (size_t i = 0; i < s->n_stack_frames; i++) {
      // XLA stores the parent 0-based and prints it 1-based.
      fprintf(f, "%zu {file_location_id=%d parent_frame_id=%d}\n", i + 1,
              s->stack_frames[i]->file_location_id, s->stack_frames[i]->parent_frame_id + 1);
    }
    fputc('\n', f);
  }
  fputc('\n', f);
}

// XLA prints computations callees first: from each computation no
// instruction calls, depth first through the computations its instructions
// call. Whatever that misses (a cycle, a walk deeper
// than CW__MAX_WALK) follows in the module's order, so each prints once.
#define CW__MAX_WALK 256

typedef struct cw__walk_s {
  const cw_hlo_module_t* m;
  bool* seen;
  size_t* order;
  size_t n;
} cw__walk_t;

static void cw__walk_callees(cw__walk_t* w, size_t ci, int depth);

static void cw__walk_comp(cw__walk_t* w, size_t ci, int depth) {
  if (w->seen[ci] || depth > CW__MAX_WALK) return;
  w->seen[ci] = true;
  cw__walk_callees(w, ci, depth);
  w->order[w->n++] = ci;
}

static void cw__walk_callees(cw__walk_t* w, size_t ci, int depth) {
  // In the order the instructions were made, which their ids keep.
  const cw__comp_t* c = &w->m->comps[ci];
  for (size_t i = 0; i < c->n; i++) {
    const cw__instr_t* in = c->by_id[i].in;
    for (size_t j = 0; j < in->n_called_computation_ids; j++) {
      const cw__comp_t* callee = cw_hlo_find_comp(w->m, in->called_computation_ids[j]);
      if (callee) cw__walk_comp(w, (size_t)(callee - w->m->comps), depth + 1);
    }
  }
}

static cw_status_t cw__computation_order(const cw_hlo_module_t* m, size_t** out) {
  size_t n = m->n_comps;
  cw__walk_t w = {.m = m, .seen = calloc(n ? n : 1, sizeof(bool)),
                  .order = calloc(n ? n : 1, sizeof(size_t))};
  bool* called = calloc(n ? n : 1, sizeof(bool));
  if (!w.seen || !w.order || !called) {
    free(w.seen);
    free(w.order);
    free(called);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t ci = 0; ci < n; ci++) {
    const Causeway__Hlo__Computation* c = m->comps[ci].pb;
    for (size_t i = 0; i < c->n_instructions; i++) {
      const cw__instr_t* in = c->instructions[i];
      for (size_t j = 0; j < in->n_called_computation_ids; j++) {
        const cw__comp_t* callee = cw_hlo_find_comp(m, in->called_computation_ids[j]);
        if (callee) called[callee - m->comps] = true;
      }
    }
  }
  for (size_t ci = 0; ci < n; ci++) {
    if (!called[ci]) cw__walk_comp(&w, ci, 0);
  }
  for (size_t ci = 0; ci < n; ci++) {
    if (!w.seen[ci]) {
      w.seen[ci] = true;
      w.order[w.n++] = ci;
    }
  }
  free(w.seen);
  free(called);
  *out = w.order;
  return cw_ok_status();
}

cw_status_t cw_hlo_module_text(const cw_hlo_module_t* m, size_t max_len, char** out_text,
                               size_t* out_len) {
  *out_text = NULL;
  *out_len = 0;
  size_t* order = NULL;
  CW_RETURN_IF_ERROR(cw__computation_order(m, &order), "HLO text");
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) {
    free(order);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory printing HLO text");
  }
  cw__printer_t p = {.f = f, .m = m, .max_len = max_len};
  cw__print_header(f, m);
  cw__print_stack_frames(f, m->mod->stack_frame_index);
  for (size_t i = 0; i < m->n_comps && cw__room(&p); i++) {
    const cw__comp_t* c = &m->comps[order[i]];
    cw__print_computation(&p, c, c == m->entry);
  }
  free(order);
  bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    free(buf);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory printing HLO text");
  }
  if (p.over || len > max_len) {
    free(buf);
    return cw_make_status(CW_RESOURCE_EXHAUSTED,
                          "the HLO text of module '%s' is longer than %zu bytes", m->mod->name,
                          max_len);
  }
  *out_text = buf;
  *out_len = len;
  return cw_ok_status();
}

// ---- layouts ----

void cw_hlo_layouts_free(ProtobufCBinaryData* items, size_t n) {
  for (size_t i = 0; items && i < n; i++) free(items[i].data);
  free(items);
}

static cw_status_t cw__pack_layout(const cw__shape_t* s, ProtobufCBinaryData* out) {
  Causeway__Hlo__Layout l = CAUSEWAY__HLO__LAYOUT__INIT;
  if (s && s->layout) {
    l = *s->layout;
    l.base.unknown_fields = NULL;
    l.base.n_unknown_fields = 0;
  } else if (s && s->element_type != CW_HLO_TUPLE) {
    // No layout given: the dense major-to-minor one.
    l.n_minor_to_major = s->n_dimensions;
    l.minor_to_major = NULL;
  }
  l.memory_space = 0;
  int64_t dense[64];
  if (s && !s->layout && s->n_dimensions) {
    if (s->n_dimensions > 64) {
      return cw_make_status(CW_INVALID_ARGUMENT, "HLO shape of rank %zu", s->n_dimensions);
    }
    for (size_t i = 0; i < s->n_dimensions; i++) dense[i] = (int64_t)(s->n_dimensions - 1 - i);
    l.minor_to_major = dense;
  }
  size_t n = causeway__hlo__layout__get_packed_size(&l);
  out->data = malloc(n ? n : 1);
  if (!out->data) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  out->len = causeway__hlo__layout__pack(&l, out->data);
  return cw_ok_status();
}

cw_status_t cw_hlo_module_layouts(const cw_hlo_module_t* m, bool outputs,
                                  ProtobufCBinaryData** out, size_t* out_n) {
  *out = NULL;
  *out_n = 0;
  const Causeway__Hlo__ProgramShape* ps = m->config ? m->config->entry_computation_layout : NULL;
  if (!ps) ps = m->mod->host_program_shape;
  if (!ps) {
    return cw_make_status(CW_NOT_FOUND, "HLO module '%s' has no entry computation layout",
                          m->mod->name);
  }
  cw__shape_t* const* shapes = ps->parameters;
  size_t n = ps->n_parameters;
  const cw__shape_t* one = ps->result;
  if (outputs) {
    if (!one) return cw_make_status(CW_NOT_FOUND, "HLO module '%s' has no result shape",
                                    m->mod->name);
    if (one->element_type == CW_HLO_TUPLE) {
      shapes = one->tuple_shapes;
      n = one->n_tuple_shapes;
    } else {
      shapes = (cw__shape_t* const*)&one;
      n = 1;
    }
  }
  ProtobufCBinaryData* items = calloc(n ? n : 1, sizeof(*items));
  if (!items) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < n; i++) {
    cw_status_t st = cw__pack_layout(shapes[i], &items[i]);
    if (st) {
      cw_hlo_layouts_free(items, n);
      return st;
    }
  }
  *out = items;
  *out_n = n;
  return cw_ok_status();
}

static int cw__cmp_u32(const void* a, const void* b) {
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return (x > y) - (x < y);
}

cw_status_t cw_hlo_module_aliased_params(const cw_hlo_module_t* m, uint32_t** out,
                                         size_t* out_n) {
  *out = NULL;
  *out_n = 0;
  const Causeway__Hlo__InputOutputAlias* io = m->mod->input_output_alias;
  if (!io || !io->n_entries) return cw_ok_status();
  // Parameters are the arguments one for one, unless a single tuple holds
  // them all (which JAX does only on TPU): that is refused, not guessed.
  size_t params = 0;
  for (size_t i = 0; i < m->entry->n; i++) {
    params += !strcmp(m->entry->pb->instructions[i]->opcode, "parameter");
  }
  uint32_t* v = malloc(io->n_entries * sizeof(*v));
  if (!v) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  for (size_t i = 0; i < io->n_entries; i++) {
    const Causeway__Hlo__AliasEntry* e = io->entries[i];
    int64_t p = e->parameter_number;
    if (p < 0 || (uint64_t)p >= params || e->n_parameter_shape_index) {
      free(v);
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "HLO module '%s' aliases an output to %sparameter %" PRId64
                            " of %zu",
                            m->mod->name, e->n_parameter_shape_index ? "a part of tupled " : "",
                            p, params);
    }
    v[n++] = (uint32_t)p;
  }
  qsort(v, n, sizeof(*v), cw__cmp_u32);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!k || v[k - 1] != v[i]) v[k++] = v[i];
  }
  *out = v;
  *out_n = k;
  return cw_ok_status();
}
