// Reading, checking and rewriting XLA's serialized CompileOptionsProto.
// Vendor plugins abort the process on some malformed options (the CPU plugin
// asserts replica_count > 0), so every peer-supplied message passes
// cw_xla_options_check before it reaches a plugin.
#ifndef CW_PROTOCOL_XLA_OPTIONS_H_
#define CW_PROTOCOL_XLA_OPTIONS_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

// Upper bound on devices named by one program's device assignment.
#define CW_XLA_MAX_ASSIGNED_DEVICES 4096

typedef struct cw_xla_options_info_s {
  int64_t num_replicas;
  int64_t num_partitions;
  // Device ids in [partition][replica] order (partition-major), count =
  // num_replicas * num_partitions; 0 when the options carry no assignment.
  size_t num_assigned;
  int64_t assigned[CW_XLA_MAX_ASSIGNED_DEVICES];
} cw_xla_options_info_t;

// Decodes and checks `data`: num_replicas and num_partitions >= 1 (0 or absent
// means 1 only when no assignment is given and the caller allows defaults),
// assignment shape equal to replicas x partitions, ids >= 0 and below
// `num_devices`, no id twice. Fills `out_info` (caller storage).
CW_MUST_USE cw_status_t cw_xla_options_check(const uint8_t* data, size_t size,
                                             int64_t num_devices,
                                             cw_xla_options_info_t* out_info);

// The options to hand a plugin for a peer's `data`: absent or zero
// num_replicas / num_partitions become 1 (empty input means one device), then
// the result must pass cw_xla_options_check against `num_devices`. Fields
// causeway does not declare are kept. *out_data is malloc'd; the caller frees it.
CW_MUST_USE cw_status_t cw_xla_options_normalize(const uint8_t* data, size_t size,
                                                 int64_t num_devices, uint8_t** out_data,
                                                 size_t* out_size);

// Serialized options for one replica and one partition on `device_id`.
// *out_data is malloc'd; the caller frees it.
CW_MUST_USE cw_status_t cw_xla_options_single_device(int64_t device_id, uint8_t** out_data,
                                                     size_t* out_size);

// Rewrites every device id of the assignment through `map` (map[old] = new,
// old in [0, map_size)). Fields causeway does not declare are kept as they
// were. *out_data is malloc'd; the caller frees it.
CW_MUST_USE cw_status_t cw_xla_options_rewrite_devices(const uint8_t* data, size_t size,
                                                       const int64_t* map, size_t map_size,
                                                       uint8_t** out_data, size_t* out_size);

// One worker's part of a program on an island of several workers: keeps the
// `count` assigned devices from position `first` (in cw_xla_options_info_t
// order) and sets the replica or partition count to match. Needs one
// replica or one partition; otherwise UNIMPLEMENTED. *out_data is malloc'd.
CW_MUST_USE cw_status_t cw_xla_options_part(const uint8_t* data, size_t size, size_t first,
                                            size_t count, uint8_t** out_data, size_t* out_size);

#endif  // CW_PROTOCOL_XLA_OPTIONS_H_
