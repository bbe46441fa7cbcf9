// The cost of a compiled XLA program, from its optimized HLO module, by the
// rules of XLA's HloCostAnalysis with the CPU backend's sizes (a tuple is a
// table of 8-byte pointers): what compiled.cost_analysis() gives in a JAX
// process that holds XLA. causeway-proxy answers LoadedExecutableCostAnalysis
// with it when the plugin under it has no cost analysis (XLA's CPU plugin has
// none through the C API), since jaxlib's proxy client cannot compute one.
//
// The three totals only: flops, transcendentals and bytes accessed, summed
// over the entry computation as XLA sums them (a fusion's bytes at its
// boundary, a while loop's body once, the larger branch of a conditional).
// XLA's per-operand utilization keys are not given.
#ifndef CW_PROTOCOL_HLO_COST_H_
#define CW_PROTOCOL_HLO_COST_H_

#include "cw_hlo_text.h"

// XLA reports a value only when it is not zero.
typedef struct cw_hlo_cost_s {
  double flops;
  double transcendentals;
  double bytes_accessed;
} cw_hlo_cost_t;

// INVALID_ARGUMENT naming the instruction when the module names an operand
// or computation it does not have, or calls computations in a cycle or
// deeper than CW_HLO_COST_MAX_DEPTH.
#define CW_HLO_COST_MAX_DEPTH 64
CW_MUST_USE cw_status_t cw_hlo_module_cost(const cw_hlo_module_t* m, cw_hlo_cost_t* out);

#endif  // CW_PROTOCOL_HLO_COST_H_
