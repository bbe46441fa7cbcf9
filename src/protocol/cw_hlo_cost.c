// XLA's cost analysis rules over a decoded module (see cw_hlo_cost.h). Each
// computation is priced once (memoized: a reduction's computation is shared
// by every reduce that names it); calls are followed to a bounded depth and
// a cycle is an error, so any module gives an answer or an error.
#include "cw_hlo_cost.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_hlo_module_internal.h"

// The pointer size jaxlib's cost analysis for the CPU assumes, measured
// against it: a tuple costs 4 bytes an element (its table of buffers), an
// opaque value 4.
#define CW__POINTER_BYTES 4.0
// XLA counts a fused multiply-add as two flops.
#define CW__FMA_FLOPS 2.0
// A fused constant with more elements than this is read from memory.
#define CW__IMMEDIATE_CONSTANT_MAX_ELEMENTS 1
// A convolution's valid positions are counted per kernel position; past
// this many kernel positions in a module it is refused (real ones have a
// few per spatial dimension, a long 1-D one thousands).
#define CW__MAX_CONV_POINTS (1 << 22)
// Keys with a tuple index (a fusion's outputs), and operand positions, kept
// per computation; a module past them is refused.
#define CW__MAX_KEYS 4096
#define CW__MAX_OPERANDS (1 << 16)

// What an operand costs an instruction: XLA's "bytes accessed<i>{}" and
// "utilization<i>{}".
typedef struct cw__operand_cost_s {
  float bytes, util;
} cw__operand_cost_t;

// A key with a tuple index ("bytes accessedout{0}"), rare: sorted by name.
typedef struct cw__key_s {
  char name[CW_HLO_COST_KEY_MAX];
  float value;
} cw__key_t;

// XLA's properties of an instruction or a computation; a zero is no key.
// Floats, summed as XLA sums them, so that large values round alike.
typedef struct cw__props_s {
  float flops, trans, bytes, secs;  // secs: "optimal_seconds"
  float out;                        // "bytes accessedout{}"
  cw__operand_cost_t* ops;
  size_t n_ops, cap_ops;
  cw__key_t* keys;
  size_t n_keys, cap_keys;
  bool oom;  // a key could not be kept (memory, the caps below): the answer is refused
} cw__props_t;

typedef struct cw__ctx_s {
  const cw_hlo_module_t* m;
  uint8_t* state;        // per computation: 0 not priced, 1 being priced, 2 priced
  cw__props_t* memo;     // per computation
  double** reads;        // per fusion computation: bytes read of each parameter
  size_t* n_reads;
  double** sizes;        // per computation, by position in by_id: NAN until known
  double conv_points;    // counted so far, against CW__MAX_CONV_POINTS
} cw__ctx_t;

enum { CW__NEW = 0, CW__BUSY = 1, CW__DONE = 2 };

// Errors already name the instruction: passed up as they are.
#define CW__TRY(expr)                  \
  do {                                 \
    cw_status_t cw__st = (expr);       \
    if (cw__st) return cw__st;         \
  } while (0)

// ---- properties ----

static void cw__props_free(cw__props_t* p) {
  free(p->ops);
  free(p->keys);
  *p = (cw__props_t){0};
}

static cw__operand_cost_t* cw__op(cw__props_t* p, size_t i) {
  if (i >= CW__MAX_OPERANDS) {
    p->oom = true;
    return NULL;
  }
  if (i >= p->cap_ops) {
    size_t cap = p->cap_ops ? p->cap_ops : 4;
    while (cap <= i) cap *= 2;
    cw__operand_cost_t* ops = realloc(p->ops, cap * sizeof(*ops));
    if (!ops) {
      p->oom = true;
      return NULL;
    }
    p->ops = ops;
    p->cap_ops = cap;
  }
  if (i >= p->n_ops) {
    memset(p->ops + p->n_ops, 0, (i + 1 - p->n_ops) * sizeof(*p->ops));
    p->n_ops = i + 1;
  }
  return &p->ops[i];
}

static void cw__set_op(cw__props_t* p, size_t i, double bytes, double util) {
  cw__operand_cost_t* o = cw__op(p, i);
  if (o) *o = (cw__operand_cost_t){bytes, util};
}

static void cw__set_op_bytes(cw__props_t* p, size_t i, double bytes) {
  cw__operand_cost_t* o = cw__op(p, i);
  if (o) o->bytes = bytes;
}

static int cw__key_cmp(const void* a, const void* b) {
  return strcmp(((const cw__key_t*)a)->name, ((const cw__key_t*)b)->name);
}

// The value under `name`, made zero if new (kept sorted by name).
static float* cw__key(cw__props_t* p, const char* name) {
  cw__key_t probe;
  snprintf(probe.name, sizeof(probe.name), "%s", name);
  size_t lo = 0, hi = p->n_keys;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = cw__key_cmp(&p->keys[mid], &probe);
    if (!cmp) return &p->keys[mid].value;
    if (cmp < 0) lo = mid + 1;
    else hi = mid;
  }
  if (p->n_keys == p->cap_keys) {
    size_t cap = p->cap_keys ? 2 * p->cap_keys : 4;
    cw__key_t* k = p->n_keys < CW__MAX_KEYS ? realloc(p->keys, cap * sizeof(*k)) : NULL;
    if (!k) {
      p->oom = true;
      return NULL;
    }
    p->keys = k;
    p->cap_keys = cap;
  }
  memmove(&p->keys[lo + 1], &p->keys[lo], (p->n_keys - lo) * sizeof(*p->keys));
  p->n_keys++;
  p->keys[lo] = probe;
  p->keys[lo].value = 0;
  return &p->keys[lo].value;
}

// dst = src, deep.
static void cw__props_copy(cw__props_t* dst, const cw__props_t* src) {
  cw__props_free(dst);
  *dst = *src;
  dst->ops = NULL;
  dst->keys = NULL;
  dst->n_ops = dst->cap_ops = dst->n_keys = dst->cap_keys = 0;
  if (src->n_ops && cw__op(dst, src->n_ops - 1)) {
    memcpy(dst->ops, src->ops, src->n_ops * sizeof(*src->ops));
  }
  if (src->n_keys) {
    dst->keys = malloc(src->n_keys * sizeof(*src->keys));
    if (!dst->keys) {
      dst->oom = true;
      return;
    }
    memcpy(dst->keys, src->keys, src->n_keys * sizeof(*src->keys));
    dst->n_keys = dst->cap_keys = src->n_keys;
  }
}

// dst += src, every key (or, where `max`, the larger of the two where src's
// is not zero: a conditional's costlier branch, as XLA takes it).
static void cw__props_merge(cw__props_t* dst, const cw__props_t* src, bool max) {
#define CW__MERGE(d, v) ((d) = max ? ((v) != 0 ? fmaxf((d), (v)) : (d)) : (d) + (v))
  CW__MERGE(dst->flops, src->flops);
  CW__MERGE(dst->trans, src->trans);
  CW__MERGE(dst->bytes, src->bytes);
  CW__MERGE(dst->secs, src->secs);
  CW__MERGE(dst->out, src->out);
  if (src->n_ops) cw__op(dst, src->n_ops - 1);
  for (size_t i = 0; i < src->n_ops && i < dst->n_ops; i++) {
    CW__MERGE(dst->ops[i].bytes, src->ops[i].bytes);
    CW__MERGE(dst->ops[i].util, src->ops[i].util);
  }
  if (src->n_keys) {
    // Both sorted: the union's size, then one pass into a new array.
    size_t n = 0;
    for (size_t i = 0, j = 0; i < dst->n_keys || j < src->n_keys; n++) {
      int cmp = i == dst->n_keys   ? 1
                : j == src->n_keys ? -1
                                   : cw__key_cmp(&dst->keys[i], &src->keys[j]);
      i += cmp <= 0;
      j += cmp >= 0;
    }
    cw__key_t* keys = n <= CW__MAX_KEYS ? malloc(n * sizeof(*keys)) : NULL;
    if (!keys) {
      dst->oom = true;
      return;
    }
    n = 0;
    for (size_t i = 0, j = 0; i < dst->n_keys || j < src->n_keys; n++) {
      int cmp = i == dst->n_keys   ? 1
                : j == src->n_keys ? -1
                                   : cw__key_cmp(&dst->keys[i], &src->keys[j]);
      keys[n] = cmp <= 0 ? dst->keys[i] : src->keys[j];
      if (cmp > 0) keys[n].value = 0;
      if (cmp >= 0) CW__MERGE(keys[n].value, src->keys[j].value);
      i += cmp <= 0;
      j += cmp >= 0;
    }
    free(dst->keys);
    dst->keys = keys;
    dst->n_keys = dst->cap_keys = n;
  }
#undef CW__MERGE
  dst->oom |= src->oom;
}

// ---- shapes ----

static double cw__type_bytes(int32_t t) {
  switch (t) {
    case 5: case 9: case 12: case 15: return 8;  // s64 u64 f64 c64
    case 4: case 8: case 11: return 4;           // s32 u32 f32
    case 3: case 7: case 10: case 16: return 2;  // s16 u16 f16 bf16
    case 18: return 16;                          // c128
    case 1: case 2: case 6: return 1;            // pred s8 u8
    default:
      // The 8-bit floats and the sub-byte types take a byte each unless
      // the layout packs them (element_size_in_bits).
      return (t >= 19 && t <= 33) || t == 35 || t == 36 ? 1 : 0;
  }
}

static bool cw__has_layout(const cw_hlo_shape_t* s, int depth) {
  if (!s || depth > CW_HLO_COST_MAX_DEPTH) return false;
  if (s->element_type == CW_HLO_TOKEN || s->element_type == CW_HLO_OPAQUE) return true;
  if (s->element_type != CW_HLO_TUPLE) return s->layout != NULL;
  for (size_t i = 0; i < s->n_tuple_shapes; i++) {
    if (!cw__has_layout(s->tuple_shapes[i], depth + 1)) return false;
  }
  return true;
}

static double cw__elements(const cw_hlo_shape_t* s) {
  if (!s) return 0;
  double n = 1;
  for (size_t i = 0; i < s->n_dimensions; i++) n *= s->dimensions[i] > 0 ? s->dimensions[i] : 0;
  return n;
}

// The CPU backend's size: a tuple is its table of buffers, a shape without
// a layout counts nothing.
static double cw__size(const cw_hlo_shape_t* s) {
  if (!cw__has_layout(s, 0)) return 0;
  switch (s->element_type) {
    case CW_HLO_TUPLE: return CW__POINTER_BYTES * (double)s->n_tuple_shapes;
    case CW_HLO_TOKEN: return 0;
    case CW_HLO_OPAQUE: return CW__POINTER_BYTES;
    default: break;
  }
  double n = cw__elements(s);
  if (s->layout->element_size_in_bits > 0) {
    return ceil(n * (double)s->layout->element_size_in_bits / 8.0);
  }
  return n * cw__type_bytes(s->element_type);
}

// Leaves of a (nested) tuple: their elements, or their sizes.
static double cw__leaves(const cw_hlo_shape_t* s, bool sizes, int depth) {
  if (!s || depth > CW_HLO_COST_MAX_DEPTH) return 0;
  if (s->element_type != CW_HLO_TUPLE) {
    if (s->element_type == CW_HLO_TOKEN) return 0;
    return sizes ? cw__size(s) : cw__elements(s);
  }
  double sum = 0;
  for (size_t i = 0; i < s->n_tuple_shapes; i++) sum += cw__leaves(s->tuple_shapes[i], sizes, depth + 1);
  return sum;
}

static const cw_hlo_shape_t* cw__first_array(const cw_hlo_shape_t* s) {
  if (s && s->element_type == CW_HLO_TUPLE) return s->n_tuple_shapes ? s->tuple_shapes[0] : NULL;
  return s;
}

// ---- opcodes ----

static const char* const cw__transcendental[] = {
    "exponential", "log",  "logistic", "power", "sqrt",   "cbrt", "rsqrt",
    "tanh",        "sine", "cosine",   "exponential-minus-one", "log-plus-one", "atan2",
    "erf",         "tan",
    NULL};

static const char* const cw__elementwise[] = {
    "abs", "add", "and", "ceil", "clamp", "count-leading-zeros", "compare", "complex", "convert",
    "divide", "floor", "imag", "is-finite", "maximum", "minimum", "multiply", "negate",
    "not", "or", "popcnt", "real", "reduce-precision", "remainder", "round-nearest-afz",
    "round-nearest-even", "select", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "sign", "subtract", "xor", "stochastic-convert", "bitcast-convert", NULL};

// Instructions that move no bytes of their own.
static const char* const cw__no_bytes[] = {"parameter", "constant", "get-tuple-element", "bitcast",
                                           "domain", "after-all", "add-dependency", NULL};

// ---- lookups ----

static size_t cw__comp_index(const cw__ctx_t* x, const cw_hlo_comp_t* c) {
  return (size_t)(c - x->m->comps);
}

static cw_status_t cw__operand(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in, size_t k,
                               const cw_hlo_instr_t** out) {
  *out = k < in->n_operand_ids ? cw_hlo_find_instr(c, in->operand_ids[k]) : NULL;
  if (!*out) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HLO cost: instruction '%s' (%s) in '%s' has no operand %zu%s", in->name,
                          in->opcode, c->pb->name, k,
                          k < in->n_operand_ids ? " in its computation" : "");
  }
  return cw_ok_status();
}

static const cw_hlo_shape_t* cw__operand_shape(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
                                               size_t k) {
  const cw_hlo_instr_t* o = k < in->n_operand_ids ? cw_hlo_find_instr(c, in->operand_ids[k]) : NULL;
  return o ? o->shape : NULL;
}

// cw__size of instruction o of computation c, computed once: an operand
// used by many instructions may be a tuple of many elements.
static double cw__instr_size(cw__ctx_t* x, const cw_hlo_comp_t* c, const cw_hlo_instr_t* o) {
  size_t ci = cw__comp_index(x, c);
  if (!x->sizes[ci]) {
    x->sizes[ci] = malloc((c->n ? c->n : 1) * sizeof(double));
    if (!x->sizes[ci]) return cw__size(o->shape);
    for (size_t i = 0; i < c->n; i++) x->sizes[ci][i] = NAN;
  }
  size_t i = cw_hlo_instr_index(c, o->id);
  if (i == SIZE_MAX || c->by_id[i].in != o) return cw__size(o->shape);
  if (isnan(x->sizes[ci][i])) x->sizes[ci][i] = cw__size(o->shape);
  return x->sizes[ci][i];
}

static cw_status_t cw__callee(const cw__ctx_t* x, const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
                              size_t k, const cw_hlo_comp_t** out) {
  *out = k < in->n_called_computation_ids
             ? cw_hlo_find_comp(x->m, in->called_computation_ids[k])
             : NULL;
  if (!*out && k < in->n_called_computation_ids) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HLO cost: instruction '%s' (%s) in '%s' calls computation %" PRId64
                          ", which the module does not have",
                          in->name, in->opcode, c->pb->name, in->called_computation_ids[k]);
  }
  if (!*out) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HLO cost: instruction '%s' (%s) in '%s' names no computation %zu",
                          in->name, in->opcode, c->pb->name, k);
  }
  return cw_ok_status();
}

static cw_status_t cw__comp_cost(cw__ctx_t* x, const cw_hlo_comp_t* c, int depth,
                                 const cw__props_t** out);

// The cost of the computation `in` calls as its k-th (the context's).
static cw_status_t cw__callee_cost(cw__ctx_t* x, const cw_hlo_comp_t* c,
                                   const cw_hlo_instr_t* in, size_t k, int depth,
                                   const cw__props_t** out) {
  const cw_hlo_comp_t* callee;
  CW__TRY(cw__callee(x, c, in, k, &callee));
  return cw__comp_cost(x, callee, depth + 1, out);
}

// flops and transcendentals of a computation applied `times` times (a
// reduction's function): bytes are the caller's own.
static void cw__apply(cw__props_t* p, const cw__props_t* sub, double times) {
  p->flops += sub->flops * (float)times;
  p->trans += sub->trans * (float)times;
}

// ---- instructions with rules of their own ----

static int64_t cw__dim(const cw_hlo_shape_t* s, int64_t d);

static double cw__dot_flops(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in) {
  const cw_hlo_shape_t* lhs = cw__operand_shape(c, in, 0);
  const Causeway__Hlo__DotDimensionNumbers* d = in->dot_dimension_numbers;
  double width = 1;
  for (size_t i = 0; lhs && d && i < d->n_lhs_contracting_dimensions; i++) {
    int64_t dim = d->lhs_contracting_dimensions[i];
    width *= (double)cw__dim(lhs, dim);
  }
  return CW__FMA_FLOPS * cw__elements(in->shape) * width;
}

static int64_t cw__dim(const cw_hlo_shape_t* s, int64_t d) {
  return s && d >= 0 && (size_t)d < s->n_dimensions && s->dimensions[d] > 0 ? s->dimensions[d] : 0;
}

static int64_t cw__floor_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// x with a * x = 1 (mod m), for a and m coprime, m >= 1, both below 2^31.
static int64_t cw__inverse(int64_t a, int64_t m) {
  int64_t r0 = m, r1 = a % m, t0 = 0, t1 = 1;
  while (r1) {
    int64_t q = r0 / r1, r = r0 - q * r1, t = t0 - q * t1;
    r0 = r1, r1 = r;
    t0 = t1, t1 = t;
  }
  return ((t0 % m) + m) % m;
}

// Output positions o in [0, o_lim) whose input position o * stride + c
// lands on an input element: a multiple of bdil in [0, (i_lim - 1) * bdil].
// What XLA counts point by point, counted here as a lattice. All arguments
// are below 2^31 in magnitude but c (below 2^54).
static int64_t cw__valid_outputs(int64_t o_lim, int64_t stride, int64_t c, int64_t i_lim,
                                 int64_t bdil) {
  if (o_lim <= 0 || i_lim <= 0) return 0;
  int64_t top = (i_lim - 1) * bdil;
  if (stride == 0) return c >= 0 && c <= top && c % bdil == 0 ? o_lim : 0;
  int64_t lo = -cw__floor_div(c, stride);  // ceil(-c / stride)
  int64_t hi = cw__floor_div(top - c, stride);
  if (lo < 0) lo = 0;
  if (hi > o_lim - 1) hi = o_lim - 1;
  if (lo > hi) return 0;
  if (bdil == 1) return hi - lo + 1;
  // o * stride = -c (mod bdil): solutions repeat every bdil / g.
  int64_t sm = stride % bdil, r = ((-c) % bdil + bdil) % bdil;
  int64_t g = sm, b = bdil;
  while (b) {
    int64_t t = g % b;
    g = b, b = t;
  }
  if (r % g) return 0;
  int64_t period = bdil / g;
  int64_t o0 = period == 1 ? 0 : (r / g) % period * cw__inverse((sm / g) % period, period) % period;
  int64_t first = lo + ((o0 - lo) % period + period) % period;
  return first > hi ? 0 : (hi - first) / period + 1;
}

#define CW__WINDOW_FIELD_MAX (INT64_C(1) << 31)

// Output positions times kernel positions that land on an input element,
// per spatial dimension, as XLA counts them.
static cw_status_t cw__conv_flops(cw__ctx_t* x, const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
                                  double* out) {
  const cw_hlo_shape_t* lhs = cw__operand_shape(c, in, 0);
  const cw_hlo_shape_t* rhs = cw__operand_shape(c, in, 1);
  const Causeway__Hlo__ConvolutionDimensionNumbers* d = in->convolution_dimension_numbers;
  *out = 0;
  if (!lhs || !rhs || !d) return cw_ok_status();
  size_t nwin = in->window ? in->window->n_dimensions : 0;
  double positions = 1;
  for (size_t i = 0; i < nwin; i++) {
    const Causeway__Hlo__WindowDimension* w = in->window->dimensions[i];
    int64_t k_lim = i < d->n_kernel_spatial_dimensions ? cw__dim(rhs, d->kernel_spatial_dimensions[i]) : 0;
    int64_t o_lim = i < d->n_output_spatial_dimensions ? cw__dim(in->shape, d->output_spatial_dimensions[i]) : 0;
    int64_t i_lim = i < d->n_input_spatial_dimensions ? cw__dim(lhs, d->input_spatial_dimensions[i]) : 0;
    int64_t stride = w->stride, wdil = w->window_dilation ? w->window_dilation : 1;
    int64_t bdil = w->base_dilation ? w->base_dilation : 1;
    int64_t fields[] = {k_lim, o_lim, i_lim, stride, wdil, bdil, w->padding_low};
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
      if (fields[f] >= CW__WINDOW_FIELD_MAX || fields[f] <= -CW__WINDOW_FIELD_MAX ||
          (f < 6 && fields[f] < 0)) {
        return cw_make_status(CW_INVALID_ARGUMENT,
                              "HLO cost: convolution '%s': window dimension %zu has a size, "
                              "stride, dilation or padding out of range",
                              in->name, i);
      }
    }
    x->conv_points += (double)k_lim;
    if (x->conv_points > CW__MAX_CONV_POINTS) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "HLO cost: convolution '%s': more than %d kernel positions in the "
                            "module, more than causeway prices",
                            in->name, CW__MAX_CONV_POINTS);
    }
    double valid = 0;
    for (int64_t k = 0; k < k_lim; k++) {
      valid += (double)cw__valid_outputs(o_lim, stride, k * wdil - w->padding_low, i_lim, bdil);
    }
    positions *= valid;
  }
  double fgc = in->feature_group_count > 0 ? (double)in->feature_group_count : 1;
  double bgc = in->batch_group_count > 0 ? (double)in->batch_group_count : 1;
  double in_f = (double)cw__dim(lhs, d->input_feature_dimension);
  double out_f = (double)cw__dim(in->shape, d->output_feature_dimension);
  double batch = (double)cw__dim(lhs, d->input_batch_dimension);
  *out = CW__FMA_FLOPS * floor(in_f / fgc) * out_f * floor(batch / bgc) * positions;
  return cw_ok_status();
}

// Reductions per output element of a reduce-window: window size - 1, except
// a window that reduces one padded dimension and broadcasts it back.
static double cw__reduce_window_count(const cw_hlo_instr_t* in) {
  const cw_hlo_shape_t* outs = cw__first_array(in->shape);
  double out_n = cw__elements(outs);
  size_t nwin = in->window ? in->window->n_dimensions : 0;
  double win = 1;
  size_t reducing = 0, padded = 0;
  for (size_t i = 0; i < nwin; i++) {
    const Causeway__Hlo__WindowDimension* w = in->window->dimensions[i];
    win *= w->size > 0 ? (double)w->size : 0;
    reducing += w->size != 1;
    padded += w->padding_low || w->padding_high;
  }
  if (reducing == 1 && padded == 1 && in->shape && in->shape->element_type != CW_HLO_TUPLE) {
    for (size_t i = 0; i < nwin; i++) {
      const Causeway__Hlo__WindowDimension* w = in->window->dimensions[i];
      if (w->size != 1 && w->padding_low && w->padding_high && w->padding_low == w->padding_high &&
          w->size == 2 * w->padding_low + 1) {
        if (w->padding_low == cw__dim(in->shape, (int64_t)i) - 1) {
          double span = (double)cw__dim(in->shape, (int64_t)i);
          return (span > 0 ? out_n / span : 0) + (span - 1);
        }
        break;
      }
    }
  }
  return (win - 1) * out_n;
}

// A transpose that only renames dimensions (the layouts make it a bitcast).
static bool cw__transpose_is_bitcast(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in) {
  const cw_hlo_shape_t* src = cw__operand_shape(c, in, 0);
  const cw_hlo_shape_t* dst = in->shape;
  if (!src || !dst || !src->layout || !dst->layout) return false;
  size_t n = dst->layout->n_minor_to_major;
  if (n != src->layout->n_minor_to_major || n != in->n_dimensions) return false;
  for (size_t k = 0; k < n; k++) {
    int64_t o = dst->layout->minor_to_major[k];
    if (o < 0 || (size_t)o >= n || in->dimensions[o] != src->layout->minor_to_major[k]) return false;
  }
  return true;
}

// ---- fusions ----

static cw_status_t cw__param_reads(cw__ctx_t* x, const cw_hlo_comp_t* fc, int depth,
                                   const double** out, size_t* out_n);

// What reading fused parameter p costs given one of its users (XLA's
// FusionParameterReadBytes): most users share one read of the whole
// parameter, a slice reads its part, a broadcast or reshape the whole again.
static cw_status_t cw__param_use(cw__ctx_t* x, const cw_hlo_comp_t* fc, const cw_hlo_instr_t* u,
                                 size_t k, double p_size, int depth, bool* seen, double* reads) {
  const char* op = u->opcode;
  if (!strcmp(op, "fusion")) {
    const cw_hlo_comp_t* inner;
    CW__TRY(cw__callee(x, fc, u, 0, &inner));
    const double* r;
    size_t n;
    CW__TRY(cw__param_reads(x, inner, depth + 1, &r, &n));
    if (k < n) *reads += r[k];
  } else if (!strcmp(op, "slice")) {
    *reads += cw__size(u->shape);
  } else if (!strcmp(op, "dynamic-slice")) {
    if (k == 0) {
      *reads += cw__size(u->shape);
    } else if (!*seen) {
      *seen = true;
      *reads += p_size;
    }
  } else if (!strcmp(op, "dynamic-update-slice")) {
    if (k != 0 && !*seen) {
      *seen = true;
      *reads += p_size;
    }
  } else if (!strcmp(op, "broadcast") || !strcmp(op, "reshape")) {
    *reads += p_size;
  } else if (!*seen) {
    *seen = true;
    *reads += p_size;
  }
  return cw_ok_status();
}

// Bytes read of each parameter of fused computation fc, by parameter
// number; memoized. A tuple parameter is read through its
// get-tuple-elements, whose reads add up to the parameter's (XLA counts each
// leaf apart, with a key of its own; XLA's CPU compiler made no tuple fused
// parameter in the programs tested).
static cw_status_t cw__param_reads(cw__ctx_t* x, const cw_hlo_comp_t* fc, int depth,
                                   const double** out, size_t* out_n) {
  size_t ci = cw__comp_index(x, fc);
  if (x->reads[ci]) {
    *out = x->reads[ci];
    *out_n = x->n_reads[ci];
    return cw_ok_status();
  }
  if (depth > CW_HLO_COST_MAX_DEPTH) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HLO cost: fusions nest deeper than %d levels (at '%s')",
                          CW_HLO_COST_MAX_DEPTH, fc->pb->name);
  }
  size_t np = 0;
  for (size_t j = 0; j < fc->n; j++) {
    const cw_hlo_instr_t* in = fc->pb->instructions[j];
    if (strcmp(in->opcode, "parameter")) continue;
    if (in->parameter_number < 0 || (uint64_t)in->parameter_number >= fc->n) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "HLO cost: parameter '%s' of '%s' has number %" PRId64
                            " (the computation has %zu instructions)",
                            in->name, fc->pb->name, in->parameter_number, fc->n);
    }
    if ((size_t)in->parameter_number + 1 > np) np = (size_t)in->parameter_number + 1;
  }
  double* reads = calloc(np ? np : 1, sizeof(double));
  bool* seen = calloc(np ? np : 1, sizeof(bool));
  size_t* last = malloc((np ? np : 1) * sizeof(size_t));
  cw_status_t st = reads && seen && last ? cw_ok_status()
                                         : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t p = 0; !st && p < np; p++) last[p] = SIZE_MAX;
  for (size_t j = 0; !st && j < fc->n; j++) {
    const cw_hlo_instr_t* u = fc->pb->instructions[j];
    for (size_t k = 0; !st && k < u->n_operand_ids; k++) {
      const cw_hlo_instr_t* o;
      st = cw__operand(fc, u, k, &o);
      if (st) break;
      const cw_hlo_instr_t* param = o;
      double size = cw__instr_size(x, fc, o);
      if (!strcmp(o->opcode, "get-tuple-element")) {
        // A leaf of a tuple parameter: its reads count toward the parameter.
        const cw_hlo_instr_t* t = o->n_operand_ids ? cw_hlo_find_instr(fc, o->operand_ids[0]) : NULL;
        if (!t || strcmp(t->opcode, "parameter")) continue;
        param = t;
      } else if (strcmp(o->opcode, "parameter")) {
        continue;
      }
      size_t p = (size_t)param->parameter_number;
      bool fusion = !strcmp(u->opcode, "fusion");
      if (!fusion && last[p] == j) continue;  // one user reads once
      last[p] = j;
      st = cw__param_use(x, fc, u, k, size, depth, &seen[p], &reads[p]);
    }
  }
  free(seen);
  free(last);
  if (st) {
    free(reads);
    return st;
  }
  x->reads[ci] = reads;
  x->n_reads[ci] = np;
  *out = reads;
  *out_n = np;
  return cw_ok_status();
}

static cw_status_t cw__gather_or_scatter(cw__ctx_t* x, const cw_hlo_comp_t* c,
                                         const cw_hlo_instr_t* in, int depth, cw__props_t* p);

// A fusion's output bytes under shape index `idx` (depth `n`): a root that
// updates a slice in place writes only the update.
static double cw__fusion_out(cw__props_t* p, const cw_hlo_comp_t* fc, const cw_hlo_instr_t* root,
                             const cw_hlo_shape_t* s, int64_t* idx, size_t n) {
  if (!s) return 0;
  double bytes;
  if (s->element_type == CW_HLO_TUPLE) {
    bytes = 0;
    for (size_t i = 0; i < s->n_tuple_shapes && n < 8; i++) {
      idx[n] = (int64_t)i;
      bytes += cw__fusion_out(p, fc, root, s->tuple_shapes[i], idx, n + 1);
    }
    if (n == 0) return bytes;  // "out{}" is the caller's
  } else {
    const cw_hlo_instr_t* r = NULL;
    if (n == 0) {
      r = root;
    } else if (n == 1 && root && !strcmp(root->opcode, "tuple") && (size_t)idx[0] < root->n_operand_ids) {
      r = cw_hlo_find_instr(fc, root->operand_ids[idx[0]]);
    }
    bytes = r && !strcmp(r->opcode, "dynamic-update-slice") ? cw__size(cw__operand_shape(fc, r, 1))
                                                             : cw__size(s);
    p->bytes += bytes;
    if (n == 0) return bytes;
  }
  char name[CW_HLO_COST_KEY_MAX];
  int len = snprintf(name, sizeof(name), "bytes accessedout{");
  for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof(name); i++) {
    len += snprintf(name + len, sizeof(name) - (size_t)len, "%s%" PRId64, i ? "," : "", idx[i]);
  }
  if (len > 0 && (size_t)len < sizeof(name)) snprintf(name + len, sizeof(name) - (size_t)len, "}");
  float* v = cw__key(p, name);
  if (v) *v = bytes;
  return bytes;
}

// Intermediate values stay in registers and caches: a fusion costs its
// computation's work, and as bytes its outputs, its large constants and its
// parameters' reads. The per-operand keys of its computation's own
// instructions stay where the fusion has no such operand, as in XLA.
static cw_status_t cw__fusion(cw__ctx_t* x, const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
                              int depth, cw__props_t* p) {
  const cw_hlo_comp_t* fc;
  CW__TRY(cw__callee(x, c, in, 0, &fc));
  if (in->fusion_kind && !strcmp(in->fusion_kind, "kCustom")) {
    for (size_t j = 0; j < fc->n; j++) {
      const cw_hlo_instr_t* f = fc->pb->instructions[j];
      if (!strcmp(f->opcode, "gather") || !strcmp(f->opcode, "scatter")) {
        return cw__gather_or_scatter(x, fc, f, depth + 1, p);
      }
    }
  }
  const cw__props_t* sub;
  CW__TRY(cw__comp_cost(x, fc, depth + 1, &sub));
  cw__props_copy(p, sub);
  p->bytes = 0;
  int64_t idx[8];
  p->out = cw__fusion_out(p, fc, cw_hlo_find_instr(fc, fc->pb->root_id), in->shape, idx, 0);
  for (size_t j = 0; j < fc->n; j++) {
    const cw_hlo_instr_t* f = fc->pb->instructions[j];
    if (!strcmp(f->opcode, "constant") &&
        cw__elements(f->shape) > CW__IMMEDIATE_CONSTANT_MAX_ELEMENTS) {
      p->bytes += cw__size(f->shape);
    }
  }
  const double* reads;
  size_t n;
  CW__TRY(cw__param_reads(x, fc, depth + 1, &reads, &n));
  for (size_t k = 0; k < in->n_operand_ids; k++) {
    double r = k < n ? reads[k] : 0;
    p->bytes += r;
    cw__set_op(p, k, r, 1.0);
  }
  return cw_ok_status();
}

// Gather: a copy of its output plus the indices. Scatter: three passes over
// its updates plus the indices, and its function once per update element.
static cw_status_t cw__gather_or_scatter(cw__ctx_t* x, const cw_hlo_comp_t* c,
                                         const cw_hlo_instr_t* in, int depth, cw__props_t* p) {
  if (!strcmp(in->opcode, "gather")) {
    double out = cw__size(in->shape), idx = cw__size(cw__operand_shape(c, in, 1));
    double elems = cw__elements(cw__operand_shape(c, in, 0));
    p->bytes = 2 * out + idx;
    p->out = out;
    cw__set_op(p, 0, out, elems > 0 ? cw__elements(in->shape) / elems : 0);
    cw__set_op_bytes(p, 1, idx);
    return cw_ok_status();
  }
  size_t n = in->n_operand_ids / 2;  // operands, the indices, as many updates
  double updates = 0;
  for (size_t i = 0; i < n; i++) {
    double u = cw__size(cw__operand_shape(c, in, n + 1 + i));
    cw__set_op_bytes(p, i, u);
    cw__set_op_bytes(p, n + 1 + i, u);
    updates += u;
  }
  double idx = cw__size(cw__operand_shape(c, in, n));
  cw__set_op_bytes(p, n, idx);
  p->bytes = 3 * updates + idx;
  p->out = updates;
  const cw__props_t* sub;
  CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sub));
  cw__apply(p, sub, cw__elements(cw__operand_shape(c, in, n + 1)));
  return cw_ok_status();
}

// An instruction that writes each array of its tuple output whole, not the
// tuple's table.
static void cw__out_as_leaves(cw__props_t* p, const cw_hlo_instr_t* in) {
  double leaves = cw__leaves(in->shape, true, 0);
  p->bytes += leaves - cw__size(in->shape);
  p->out = leaves;
}

// An instruction that moves nothing: no bytes, no time.
static void cw__no_bytes_moved(cw__props_t* p) {
  p->bytes = p->out = 0;
  for (size_t i = 0; i < p->n_ops; i++) p->ops[i].bytes = 0;
}

// *p: the instruction's properties (the caller's to free). *timed: XLA
// computes its optimal seconds (always 0 here, the rates being unknown).
static cw_status_t cw__instr_rules(cw__ctx_t* x, const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
                                   int depth, cw__props_t* p, bool* timed) {
  const char* op = in->opcode ? in->opcode : "";
  *timed = true;
  // By default an instruction reads each operand whole and writes its output.
  p->out = p->bytes = cw__size(in->shape);
  for (size_t k = 0; k < in->n_operand_ids; k++) {
    const cw_hlo_instr_t* o;
    CW__TRY(cw__operand(c, in, k, &o));
    double b = cw__instr_size(x, c, o);
    p->bytes += b;
    cw__set_op(p, k, b, 1.0);
  }
  const cw__props_t* sub;
  if (cw_hlo_opcode_in(op, cw__no_bytes)) {
    cw__no_bytes_moved(p);
  } else if (!strcmp(op, "tuple")) {
    for (size_t k = 0; k < in->n_operand_ids; k++) cw__set_op_bytes(p, k, 0);
    p->bytes = p->out = cw__size(in->shape);
  } else if (cw_hlo_opcode_in(op, cw__transcendental)) {
    p->trans = cw__elements(in->shape);
  } else if (cw_hlo_opcode_in(op, cw__elementwise)) {
    p->flops = cw__elements(in->shape);
  } else if (!strcmp(op, "dot")) {
    p->flops = cw__dot_flops(c, in);
  } else if (!strcmp(op, "convolution")) {
    double flops;
    CW__TRY(cw__conv_flops(x, c, in, &flops));
    p->flops = (float)flops;
  } else if (!strcmp(op, "reduce") || !strcmp(op, "reduce-window") || !strcmp(op, "map")) {
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sub));
    double times = !strcmp(op, "map") ? cw__elements(in->shape)
                   : !strcmp(op, "reduce")
                       ? cw__elements(cw__operand_shape(c, in, 0)) -
                             cw__elements(cw__first_array(in->shape))
                       : cw__reduce_window_count(in);
    cw__apply(p, sub, times);
  } else if (!strcmp(op, "select-and-scatter")) {
    double source = cw__elements(cw__operand_shape(c, in, 1)), win = 1;
    for (size_t i = 0; in->window && i < in->window->n_dimensions; i++) {
      win *= (double)in->window->dimensions[i]->size;
    }
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sub));
    cw__apply(p, sub, source * (win - 1));
    CW__TRY(cw__callee_cost(x, c, in, 1, depth, &sub));
    cw__apply(p, sub, source);
  } else if (!strcmp(op, "fusion")) {
    CW__TRY(cw__fusion(x, c, in, depth, p));
  } else if (!strcmp(op, "call") || !strcmp(op, "async-start")) {
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sub));
    cw__props_copy(p, sub);
    *timed = !strcmp(op, "async-start");
  } else if (!strcmp(op, "while") || !strcmp(op, "conditional")) {
    // A loop costs one iteration (the count is not known before the run);
    // a conditional its costlier branch, key by key.
    bool loop = !strcmp(op, "while");
    cw__props_free(p);
    size_t n = in->n_called_computation_ids;
    for (size_t k = 0; k < n; k++) {
      CW__TRY(cw__callee_cost(x, c, in, k, depth, &sub));
      if (k) cw__props_merge(p, sub, !loop);
      else cw__props_copy(p, sub);
    }
    *timed = false;
  } else if (!strcmp(op, "custom-call")) {
    // Unknown work: XLA marks it -1 and sums it as it is.
    p->flops = p->bytes = p->out = p->secs = -1;
    for (size_t k = 0; k < in->n_operand_ids; k++) cw__set_op_bytes(p, k, -1);
    *timed = false;
  } else if (!strcmp(op, "sort")) {
    double n = cw__elements(cw__operand_shape(c, in, 0));
    p->flops = n > 1 ? n * ceil(log2(n)) : 0;
    // A sort of several arrays writes each (measured against jaxlib: its
    // tuple counts its leaves, not its table).
    if (in->shape && in->shape->element_type == CW_HLO_TUPLE) cw__out_as_leaves(p, in);
  } else if (!strcmp(op, "slice")) {
    double out = cw__size(in->shape), elems = cw__elements(cw__operand_shape(c, in, 0));
    p->bytes = 2 * out;
    cw__set_op(p, 0, out, elems > 0 ? cw__elements(in->shape) / elems : 0);
  } else if (!strcmp(op, "dynamic-slice")) {
    double out = cw__size(in->shape), idx = cw__size(cw__operand_shape(c, in, 1));
    double elems = cw__elements(cw__operand_shape(c, in, 0));
    p->bytes = 2 * out + idx;
    cw__set_op(p, 0, out, elems > 0 ? cw__elements(in->shape) / elems : 0);
    cw__set_op_bytes(p, 1, idx);
  } else if (!strcmp(op, "dynamic-update-slice")) {
    const cw_hlo_shape_t* upd = cw__operand_shape(c, in, 1);
    double u = cw__size(upd), idx = cw__size(cw__operand_shape(c, in, 2));
    double elems = cw__elements(in->shape);
    p->bytes = 2 * u + idx;
    p->out = u;
    // The part the update overwrites is not read.
    cw__set_op(p, 0, 0, elems > 0 ? (elems - cw__elements(upd)) / elems : 0);
    cw__set_op_bytes(p, 1, u);
    cw__set_op_bytes(p, 2, idx);
  } else if (!strcmp(op, "gather") || !strcmp(op, "scatter")) {
    CW__TRY(cw__gather_or_scatter(x, c, in, depth, p));
  } else if (!strcmp(op, "rng") || !strcmp(op, "rng-bit-generator")) {
    p->trans = cw__leaves(in->shape, false, 0);
  } else if (!strcmp(op, "all-reduce") || !strcmp(op, "all-reduce-start")) {
    p->flops = cw__leaves(in->shape, false, 0);
    cw__out_as_leaves(p, in);
  } else if (!strcmp(op, "fft")) {
    double logs = 1;
    for (size_t i = 0; i < in->n_fft_length; i++) {
      logs *= in->fft_length[i] > 0 ? floor(log2((double)in->fft_length[i])) : 0;
    }
    p->flops = CW__FMA_FLOPS * 4 * logs * cw__elements(cw__first_array(cw__operand_shape(c, in, 0)));
  } else if (!strcmp(op, "triangular-solve")) {
    const cw_hlo_shape_t* a = cw__operand_shape(c, in, 0);
    const cw_hlo_shape_t* b = cw__operand_shape(c, in, 1);
    p->bytes = cw__size(in->shape) + cw__size(a) / 2 + cw__size(b);
    cw__set_op_bytes(p, 0, cw__size(b));  // XLA sets operand 0 twice, the second time to b's
    p->flops = CW__FMA_FLOPS * (a && a->n_dimensions ? (double)a->dimensions[a->n_dimensions - 1] : 0) *
               cw__elements(b);
  } else if (!strcmp(op, "cholesky")) {
    const cw_hlo_shape_t* a = cw__operand_shape(c, in, 0);
    p->bytes = cw__size(a);
    p->out = cw__size(a) / 2;
    cw__set_op_bytes(p, 0, cw__size(a) / 2);
    p->flops = floor((a && a->n_dimensions ? (double)a->dimensions[a->n_dimensions - 1] : 0) *
                     cw__elements(a) / 3);
  } else if (!strcmp(op, "transpose") && cw__transpose_is_bitcast(c, in)) {
    cw__no_bytes_moved(p);
  }
  return cw_ok_status();
}

static cw_status_t cw__comp_cost(cw__ctx_t* x, const cw_hlo_comp_t* c, int depth,
                                 const cw__props_t** out) {
  size_t ci = cw__comp_index(x, c);
  *out = &x->memo[ci];
  if (x->state[ci] == CW__DONE) return cw_ok_status();
  if (x->state[ci] == CW__BUSY) {
    return cw_make_status(CW_INVALID_ARGUMENT, "HLO cost: computation '%s' calls itself",
                          c->pb->name);
  }
  if (depth > CW_HLO_COST_MAX_DEPTH) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HLO cost: calls nest deeper than %d levels (at '%s')",
                          CW_HLO_COST_MAX_DEPTH, c->pb->name);
  }
  x->state[ci] = CW__BUSY;
  cw__props_t sum = {0};
  cw_status_t st = cw_ok_status();
  for (size_t j = 0; !st && j < c->n; j++) {
    cw__props_t p = {0};
    bool timed;
    st = cw__instr_rules(x, c, c->pb->instructions[j], depth, &p, &timed);
    if (timed) p.secs = 0;  // each property over an unknown (infinite) rate
    if (!st) cw__props_merge(&sum, &p, false);
    cw__props_free(&p);
  }
  if (!st && sum.oom) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED,
                        "HLO cost: '%s' has more than %d operand positions or %d "
                        "tuple-indexed keys, or memory ran out",
                        c->pb->name, CW__MAX_OPERANDS, CW__MAX_KEYS);
  }
  if (st) {
    cw__props_free(&sum);
    x->state[ci] = CW__NEW;
    return st;
  }
  x->state[ci] = CW__DONE;
  x->memo[ci] = sum;
  return cw_ok_status();
}

static void cw__entry(cw_hlo_cost_t* out, const char* name, double value) {
  if (value == 0) return;  // as XLA: no key for nothing
  cw_hlo_cost_entry_t* e = &out->entries[out->n_entries++];
  snprintf(e->key, sizeof(e->key), "%s", name);
  e->value = value;
}

cw_status_t cw_hlo_module_cost(const cw_hlo_module_t* m, cw_hlo_cost_t* out) {
  *out = (cw_hlo_cost_t){0};
  size_t n = m->n_comps ? m->n_comps : 1;
  cw__ctx_t x = {.m = m,
                 .state = calloc(n, 1),
                 .memo = calloc(n, sizeof(cw__props_t)),
                 .reads = calloc(n, sizeof(double*)),
                 .n_reads = calloc(n, sizeof(size_t)),
                 .sizes = calloc(n, sizeof(double*))};
  cw_status_t st = x.state && x.memo && x.reads && x.n_reads && x.sizes
                       ? cw_ok_status()
                       : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  const cw__props_t* p = NULL;
  if (!st) st = cw__comp_cost(&x, m->entry, 0, &p);
  if (!st) {
    out->flops = p->flops;
    out->transcendentals = p->trans;
    out->bytes_accessed = p->bytes;
    out->entries = calloc(5 + 2 * p->n_ops + p->n_keys, sizeof(*out->entries));
    if (!out->entries) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st) {
    cw__entry(out, "flops", p->flops);
    cw__entry(out, "transcendentals", p->trans);
    cw__entry(out, "bytes accessed", p->bytes);
    cw__entry(out, "optimal_seconds", p->secs);
    cw__entry(out, "bytes accessedout{}", p->out);
    for (size_t i = 0; i < p->n_ops; i++) {
      char key[CW_HLO_COST_KEY_MAX];
      snprintf(key, sizeof(key), "bytes accessed%zu{}", i);
      cw__entry(out, key, p->ops[i].bytes);
      snprintf(key, sizeof(key), "utilization%zu{}", i);
      cw__entry(out, key, p->ops[i].util);
    }
    for (size_t i = 0; i < p->n_keys; i++) cw__entry(out, p->keys[i].name, p->keys[i].value);
    // Sizes past a float's range (a hostile shape) have no answer.
    for (size_t i = 0; !st && i < out->n_entries; i++) {
      if (!isfinite(out->entries[i].value)) {
        st = cw_make_status(CW_INVALID_ARGUMENT,
                            "HLO cost: '%s' is not finite: the program's shapes are too large "
                            "to price",
                            out->entries[i].key);
      }
    }
    if (st) cw_hlo_cost_free(out);
  }
  for (size_t i = 0; x.memo && i < m->n_comps; i++) cw__props_free(&x.memo[i]);
  for (size_t i = 0; x.reads && i < m->n_comps; i++) free(x.reads[i]);
  for (size_t i = 0; x.sizes && i < m->n_comps; i++) free(x.sizes[i]);
  free(x.sizes);
  free(x.state);
  free(x.memo);
  free(x.reads);
  free(x.n_reads);
  return st;
}

void cw_hlo_cost_free(cw_hlo_cost_t* c) {
  free(c->entries);
  *c = (cw_hlo_cost_t){0};
}
