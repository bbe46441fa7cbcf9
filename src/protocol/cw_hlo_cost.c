// XLA's cost analysis rules over a decoded module (see cw_hlo_cost.h). Each
// computation is priced once (memoized: a reduction's computation is shared
// by every reduce that names it); calls are followed to a bounded depth and
// a cycle is an error, so any module gives an answer or an error.
#include "cw_hlo_cost.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cw_hlo_module_internal.h"

// What jaxlib's cost analysis for the CPU counts per element of a tuple
// (its table of buffers), measured against it: 4, not a pointer's 8.
#define CW__TUPLE_ENTRY_BYTES 4.0
// XLA counts a fused multiply-add as two flops.
#define CW__FMA_FLOPS 2.0
// A fused constant with more elements than this is read from memory.
#define CW__IMMEDIATE_CONSTANT_MAX_ELEMENTS 1
// A convolution's valid positions are counted point by point, as XLA does;
// past this many points per spatial dimension the module is refused.
#define CW__MAX_CONV_POINTS (1 << 24)

typedef struct cw__props_s {
  double flops, trans, bytes;
  bool has_flops, has_trans;
} cw__props_t;

typedef struct cw__ctx_s {
  const cw_hlo_module_t* m;
  uint8_t* state;        // per computation: 0 not priced, 1 being priced, 2 priced
  cw__props_t* memo;     // per computation
  double** reads;        // per fusion computation: bytes read of each parameter
  size_t* n_reads;
} cw__ctx_t;

enum { CW__NEW = 0, CW__BUSY = 1, CW__DONE = 2 };

// Errors already name the instruction: passed up as they are.
#define CW__TRY(expr)                  \
  do {                                 \
    cw_status_t cw__st = (expr);       \
    if (cw__st) return cw__st;         \
  } while (0)

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
    case CW_HLO_TUPLE: return CW__TUPLE_ENTRY_BYTES * (double)s->n_tuple_shapes;
    case CW_HLO_TOKEN: return 0;
    case CW_HLO_OPAQUE: return 8;
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

static bool cw__in(const char* op, const char* const* set) {
  for (; *set; set++) {
    if (!strcmp(op, *set)) return true;
  }
  return false;
}

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
                                 cw__props_t* out);

// The cost of the computation `in` calls as its k-th.
static cw_status_t cw__callee_cost(cw__ctx_t* x, const cw_hlo_comp_t* c,
                                   const cw_hlo_instr_t* in, size_t k, int depth,
                                   cw__props_t* out) {
  const cw_hlo_comp_t* callee;
  CW__TRY(cw__callee(x, c, in, k, &callee));
  return cw__comp_cost(x, callee, depth + 1, out);
}

// flops and transcendentals of a computation applied `times` times (a
// reduction's function): bytes are the caller's own.
static void cw__apply(cw__props_t* p, const cw__props_t* sub, double times) {
  if (sub->has_flops) {
    p->flops += sub->flops * times;
    p->has_flops = true;
  }
  if (sub->has_trans) {
    p->trans += sub->trans * times;
    p->has_trans = true;
  }
}

// ---- instructions with rules of their own ----

static double cw__dot_flops(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in) {
  const cw_hlo_shape_t* lhs = cw__operand_shape(c, in, 0);
  const Causeway__Hlo__DotDimensionNumbers* d = in->dot_dimension_numbers;
  double width = 1;
  for (size_t i = 0; lhs && d && i < d->n_lhs_contracting_dimensions; i++) {
    int64_t dim = d->lhs_contracting_dimensions[i];
    if (dim >= 0 && (size_t)dim < lhs->n_dimensions) width *= (double)lhs->dimensions[dim];
  }
  return CW__FMA_FLOPS * cw__elements(in->shape) * width;
}

static int64_t cw__dim(const cw_hlo_shape_t* s, int64_t d) {
  return s && d >= 0 && (size_t)d < s->n_dimensions ? s->dimensions[d] : 0;
}

// Output positions times kernel positions that land on an input element,
// per spatial dimension, as XLA counts them.
static cw_status_t cw__conv_flops(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
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
    if (i_lim == o_lim && k_lim == o_lim && i_lim == bdil && wdil == 1 &&
        (i_lim - 1 > 1 ? i_lim - 1 : 1) == stride && !w->padding_low && !w->padding_high) {
      positions *= (double)i_lim;
      continue;
    }
    if (i_lim == 1 && k_lim == o_lim && wdil == 1 && bdil == 1 && stride == 1 &&
        w->padding_high == o_lim - 1 && w->padding_low == o_lim - 1) {
      positions *= (double)o_lim;
      continue;
    }
    if (k_lim < 0 || o_lim < 0 || (double)k_lim * (double)o_lim > CW__MAX_CONV_POINTS) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "HLO cost: convolution '%s' has %" PRId64 " x %" PRId64
                            " window positions in dimension %zu, more than causeway prices",
                            in->name, k_lim, o_lim, i);
    }
    int64_t valid = 0;
    for (int64_t k = 0; k < k_lim; k++) {
      for (int64_t o = 0; o < o_lim; o++) {
        int64_t undilated = o * stride - w->padding_low + k * wdil;
        int64_t idx = bdil > 1 ? undilated / bdil : undilated;
        if (undilated != idx * bdil) continue;
        if (idx >= 0 && idx < i_lim) valid++;
      }
    }
    positions *= (double)valid;
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
static double cw__reduce_window_count(const cw_hlo_comp_t* c, const cw_hlo_instr_t* in) {
  const cw_hlo_shape_t* outs = cw__first_array(in->shape);
  double out_n = cw__elements(outs);
  size_t nwin = in->window ? in->window->n_dimensions : 0;
  double win = 1;
  size_t reducing = 0, padded = 0;
  for (size_t i = 0; i < nwin; i++) {
    const Causeway__Hlo__WindowDimension* w = in->window->dimensions[i];
    win *= (double)w->size;
    reducing += w->size != 1;
    padded += w->padding_low || w->padding_high;
  }
  (void)c;
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
// get-tuple-elements, each counted as a parameter of its own.
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
      double size = cw__size(o->shape);
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
  cw__props_t sub;
  CW__TRY(cw__comp_cost(x, fc, depth + 1, &sub));
  cw__apply(p, &sub, 1);
  // Intermediate values stay in registers and caches: the fusion's bytes
  // are its outputs, its large constants and its parameters' reads.
  const cw_hlo_instr_t* root = cw_hlo_find_instr(fc, fc->pb->root_id);
  double bytes = 0;
  const cw_hlo_shape_t* s = in->shape;
  if (s && s->element_type == CW_HLO_TUPLE) {
    bool root_tuple = root && !strcmp(root->opcode, "tuple");
    for (size_t i = 0; i < s->n_tuple_shapes; i++) {
      const cw_hlo_instr_t* r = root_tuple && i < root->n_operand_ids
                                    ? cw_hlo_find_instr(fc, root->operand_ids[i])
                                    : NULL;
      if (r && !strcmp(r->opcode, "dynamic-update-slice")) {
        bytes += cw__size(cw__operand_shape(fc, r, 1));
      } else {
        bytes += cw__leaves(s->tuple_shapes[i], true, 1);
      }
    }
  } else if (root && !strcmp(root->opcode, "dynamic-update-slice")) {
    bytes += cw__size(cw__operand_shape(fc, root, 1));
  } else {
    bytes += cw__size(s);
  }
  for (size_t j = 0; j < fc->n; j++) {
    const cw_hlo_instr_t* f = fc->pb->instructions[j];
    if (!strcmp(f->opcode, "constant") &&
        cw__elements(f->shape) > CW__IMMEDIATE_CONSTANT_MAX_ELEMENTS) {
      bytes += cw__size(f->shape);
    }
  }
  const double* reads;
  size_t n;
  CW__TRY(cw__param_reads(x, fc, depth + 1, &reads, &n));
  for (size_t k = 0; k < in->n_operand_ids && k < n; k++) bytes += reads[k];
  p->bytes = bytes;
  return cw_ok_status();
}

// Gather: a copy of its output plus the indices. Scatter: three passes over
// its updates plus the indices, and its function once per update element.
static cw_status_t cw__gather_or_scatter(cw__ctx_t* x, const cw_hlo_comp_t* c,
                                         const cw_hlo_instr_t* in, int depth, cw__props_t* p) {
  if (!strcmp(in->opcode, "gather")) {
    p->bytes = 2 * cw__size(in->shape) + cw__size(cw__operand_shape(c, in, 1));
    return cw_ok_status();
  }
  size_t n = in->n_operand_ids / 2;  // operands, the indices, as many updates
  double updates = 0;
  for (size_t i = 0; i < n; i++) updates += cw__size(cw__operand_shape(c, in, n + 1 + i));
  p->bytes = 3 * updates + cw__size(cw__operand_shape(c, in, n));
  cw__props_t sub;
  CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sub));
  cw__apply(p, &sub, cw__elements(cw__operand_shape(c, in, n + 1)));
  return cw_ok_status();
}

static void cw__max_into(cw__props_t* p, const cw__props_t* b) {
  p->flops = p->has_flops ? fmax(p->flops, b->flops) : b->flops;
  p->trans = p->has_trans ? fmax(p->trans, b->trans) : b->trans;
  p->bytes = fmax(p->bytes, b->bytes);
  p->has_flops |= b->has_flops;
  p->has_trans |= b->has_trans;
}

static cw_status_t cw__instr_cost(cw__ctx_t* x, const cw_hlo_comp_t* c, const cw_hlo_instr_t* in,
                                  int depth, cw__props_t* p) {
  const char* op = in->opcode ? in->opcode : "";
  *p = (cw__props_t){0};
  // By default an instruction reads its operands and writes its output.
  p->bytes = cw__size(in->shape);
  for (size_t k = 0; k < in->n_operand_ids; k++) {
    const cw_hlo_instr_t* o;
    CW__TRY(cw__operand(c, in, k, &o));
    p->bytes += cw__size(o->shape);
  }
  if (cw__in(op, cw__no_bytes)) {
    p->bytes = 0;
  } else if (!strcmp(op, "tuple")) {
    p->bytes = cw__size(in->shape);
  } else if (cw__in(op, cw__transcendental)) {
    p->trans = cw__elements(in->shape);
    p->has_trans = true;
  } else if (cw__in(op, cw__elementwise)) {
    p->flops = cw__elements(in->shape);
    p->has_flops = true;
  } else if (!strcmp(op, "dot")) {
    p->flops = cw__dot_flops(c, in);
    p->has_flops = true;
  } else if (!strcmp(op, "convolution")) {
    CW__TRY(cw__conv_flops(c, in, &p->flops));
    p->has_flops = true;
  } else if (!strcmp(op, "reduce") || !strcmp(op, "reduce-window") || !strcmp(op, "map")) {
    cw__props_t sub;
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sub));
    double times = !strcmp(op, "map") ? cw__elements(in->shape)
                   : !strcmp(op, "reduce")
                       ? cw__elements(cw__operand_shape(c, in, 0)) -
                             cw__elements(cw__first_array(in->shape))
                       : cw__reduce_window_count(c, in);
    cw__apply(p, &sub, times);
  } else if (!strcmp(op, "select-and-scatter")) {
    cw__props_t sel, sct;
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, &sel));
    CW__TRY(cw__callee_cost(x, c, in, 1, depth, &sct));
    double source = cw__elements(cw__operand_shape(c, in, 1)), win = 1;
    for (size_t i = 0; in->window && i < in->window->n_dimensions; i++) {
      win *= (double)in->window->dimensions[i]->size;
    }
    cw__apply(p, &sel, source * (win - 1));
    cw__apply(p, &sct, source);
  } else if (!strcmp(op, "fusion")) {
    CW__TRY(cw__fusion(x, c, in, depth, p));
  } else if (!strcmp(op, "call") || !strcmp(op, "async-start")) {
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, p));
  } else if (!strcmp(op, "while")) {
    // One iteration: the count is not known before the run.
    cw__props_t a, b;
    CW__TRY(cw__callee_cost(x, c, in, 0, depth, &a));
    CW__TRY(cw__callee_cost(x, c, in, 1, depth, &b));
    *p = a;
    cw__apply(p, &b, 1);
    p->bytes += b.bytes;
  } else if (!strcmp(op, "conditional")) {
    for (size_t k = 0; k < in->n_called_computation_ids; k++) {
      cw__props_t b;
      CW__TRY(cw__callee_cost(x, c, in, k, depth, &b));
      if (k) cw__max_into(p, &b);
      else *p = b;
    }
  } else if (!strcmp(op, "custom-call")) {
    // Unknown work: XLA marks flops and bytes -1 and sums them as they are.
    p->flops = -1;
    p->has_flops = true;
    p->bytes = -1;
  } else if (!strcmp(op, "sort")) {
    double n = cw__elements(cw__operand_shape(c, in, 0));
    p->flops = n > 1 ? n * ceil(log2(n)) : 0;
    p->has_flops = true;
  } else if (!strcmp(op, "slice")) {
    p->bytes = 2 * cw__size(in->shape);
  } else if (!strcmp(op, "dynamic-slice")) {
    p->bytes = 2 * cw__size(in->shape) + cw__size(cw__operand_shape(c, in, 1));
  } else if (!strcmp(op, "dynamic-update-slice")) {
    p->bytes = 2 * cw__size(cw__operand_shape(c, in, 1)) + cw__size(cw__operand_shape(c, in, 2));
  } else if (!strcmp(op, "gather") || !strcmp(op, "scatter")) {
    CW__TRY(cw__gather_or_scatter(x, c, in, depth, p));
  } else if (!strcmp(op, "rng") || !strcmp(op, "rng-bit-generator")) {
    p->trans = cw__leaves(in->shape, false, 0);
    p->has_trans = true;
  } else if (!strcmp(op, "all-reduce") || !strcmp(op, "all-reduce-start")) {
    p->flops = cw__leaves(in->shape, false, 0);
    p->has_flops = true;
    p->bytes += cw__leaves(in->shape, true, 0) - cw__size(in->shape);
  } else if (!strcmp(op, "fft")) {
    double logs = 1;
    for (size_t i = 0; i < in->n_fft_length; i++) {
      logs *= in->fft_length[i] > 0 ? floor(log2((double)in->fft_length[i])) : 0;
    }
    p->flops = CW__FMA_FLOPS * 4 * logs * cw__elements(cw__first_array(cw__operand_shape(c, in, 0)));
    p->has_flops = true;
  } else if (!strcmp(op, "triangular-solve")) {
    const cw_hlo_shape_t* a = cw__operand_shape(c, in, 0);
    const cw_hlo_shape_t* b = cw__operand_shape(c, in, 1);
    p->bytes = cw__size(in->shape) + cw__size(a) / 2 + cw__size(b);
    p->flops = CW__FMA_FLOPS * (a && a->n_dimensions ? (double)a->dimensions[a->n_dimensions - 1] : 0) *
               cw__elements(b);
    p->has_flops = true;
  } else if (!strcmp(op, "cholesky")) {
    const cw_hlo_shape_t* a = cw__operand_shape(c, in, 0);
    p->bytes = cw__size(a);
    p->flops = floor((a && a->n_dimensions ? (double)a->dimensions[a->n_dimensions - 1] : 0) *
                     cw__elements(a) / 3);
    p->has_flops = true;
  } else if (!strcmp(op, "transpose") && cw__transpose_is_bitcast(c, in)) {
    p->bytes = 0;
  }
  return cw_ok_status();
}

static cw_status_t cw__comp_cost(cw__ctx_t* x, const cw_hlo_comp_t* c, int depth,
                                 cw__props_t* out) {
  size_t ci = cw__comp_index(x, c);
  if (x->state[ci] == CW__DONE) {
    *out = x->memo[ci];
    return cw_ok_status();
  }
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
  for (size_t j = 0; j < c->n; j++) {
    cw__props_t p;
    cw_status_t st = cw__instr_cost(x, c, c->pb->instructions[j], depth, &p);
    if (st) {
      x->state[ci] = CW__NEW;
      return st;
    }
    sum.flops += p.flops;
    sum.trans += p.trans;
    sum.bytes += p.bytes;
    sum.has_flops |= p.has_flops;
    sum.has_trans |= p.has_trans;
  }
  x->state[ci] = CW__DONE;
  x->memo[ci] = sum;
  *out = sum;
  return cw_ok_status();
}

cw_status_t cw_hlo_module_cost(const cw_hlo_module_t* m, cw_hlo_cost_t* out) {
  *out = (cw_hlo_cost_t){0};
  size_t n = m->n_comps ? m->n_comps : 1;
  cw__ctx_t x = {.m = m,
                 .state = calloc(n, 1),
                 .memo = calloc(n, sizeof(cw__props_t)),
                 .reads = calloc(n, sizeof(double*)),
                 .n_reads = calloc(n, sizeof(size_t))};
  cw_status_t st = x.state && x.memo && x.reads && x.n_reads
                       ? cw_ok_status()
                       : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw__props_t p = {0};
  if (!st) st = cw__comp_cost(&x, m->entry, 0, &p);
  if (!st) {
    *out = (cw_hlo_cost_t){.flops = p.flops, .transcendentals = p.trans, .bytes_accessed = p.bytes};
  }
  for (size_t i = 0; x.reads && i < m->n_comps; i++) free(x.reads[i]);
  free(x.state);
  free(x.memo);
  free(x.reads);
  free(x.n_reads);
  return st;
}
