// The cost of a compiled XLA program, from its optimized HLO module, by the
// rules of XLA's HloCostAnalysis with the sizes jaxlib's analysis for the CPU
// uses (a tuple is a table of 4-byte entries): what compiled.cost_analysis()
// gives in a JAX process that holds XLA. Values are summed as floats, as XLA
// sums them; where its order of summation differs, large ones may differ in
// a float's last bits. causeway-proxy answers LoadedExecutableCostAnalysis
// with it when the plugin under it has no cost analysis (XLA's CPU plugin has
// none through the C API), since jaxlib's proxy client cannot compute one.
//
// Every key XLA's analysis gives: flops, transcendentals, bytes accessed,
// optimal_seconds (unknown work, -1 a custom call), and per operand position
// its bytes accessed and utilization, summed over the entry computation as
// XLA sums them (a fusion's bytes at its boundary, a while loop's body once,
// the costlier branch of a conditional).
#ifndef CW_PROTOCOL_HLO_COST_H_
#define CW_PROTOCOL_HLO_COST_H_

#include <stddef.h>

#include "cw_hlo_text.h"

// A key as XLA names it ("flops", "bytes accessed0{}", ...) and its value.
#define CW_HLO_COST_KEY_MAX 64
typedef struct cw_hlo_cost_entry_s {
  char key[CW_HLO_COST_KEY_MAX];
  double value;
} cw_hlo_cost_entry_t;

// The totals, and every key XLA gives: those not zero, as XLA reports them.
typedef struct cw_hlo_cost_s {
  double flops;
  double transcendentals;
  double bytes_accessed;
  cw_hlo_cost_entry_t* entries;  // owned; cw_hlo_cost_free
  size_t n_entries;
} cw_hlo_cost_t;

// Borrows m. On success *out holds the totals and every key (free with
// cw_hlo_cost_free); on error *out is empty (freeing it is harmless). Errors:
// INVALID_ARGUMENT naming the instruction or computation when the module
// names an operand or computation it does not have, calls computations in a
// cycle or deeper than CW_HLO_COST_MAX_DEPTH, numbers a fused parameter past
// its computation, has a convolution window out of range or more kernel
// positions than causeway counts, or shapes whose cost is not finite;
// RESOURCE_EXHAUSTED when memory or the caps on keys run out.
#define CW_HLO_COST_MAX_DEPTH 64
CW_MUST_USE cw_status_t cw_hlo_module_cost(const cw_hlo_module_t* m, cw_hlo_cost_t* out);
void cw_hlo_cost_free(cw_hlo_cost_t* c);

#endif  // CW_PROTOCOL_HLO_COST_H_
