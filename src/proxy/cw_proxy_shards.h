// Where the shards of an IFRT array lie: for each device of a sharding, the
// shard's dimensions and, where the sharding says, its offset in the array
// (its index domain). ReshardArrays and BitcastArrays of arrays split over
// devices are built on it (cw_proxy_respec.c).
#ifndef CW_PROXY_SHARDS_H_
#define CW_PROXY_SHARDS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"
#include "proto/ifrt_proxy.pb-c.h"

#define CW_PROXY_SHARDS_MAX_DEVICES 4096

typedef struct cw_proxy_shards_s {
  size_t n;     // devices, in the sharding's device list's order
  size_t rank;  // of the array
  int32_t* ids;      // n device ids
  int64_t* dims;     // n * rank: shard k's dimensions
  int64_t* offsets;  // n * rank, or NULL: the sharding does not say where its shards lie
} cw_proxy_shards_t;

// The shards of an array of `dims` under `sharding`: single-device,
// HloSharding (replicated, maximal, tiled by a device list or an iota, with
// replicated trailing tile dimensions, or Shardy's named axes on a mesh),
// ConcreteEven (shard shapes; offsets only when replicated), and any
// sharding of one device. Tiles that do not split a dimension evenly,
// manual and unreduced axes, tuples, and device lists that do not match the
// tiling are refused by name, as are devices named twice and more than
// CW_PROXY_SHARDS_MAX_DEVICES. rank <= CW_PROXY_DECODE_MAX_RANK.
CW_MUST_USE cw_status_t cw_proxy_sharding_shards(const CwIfrt__Sharding* sharding,
                                                 const int64_t* dims, size_t rank,
                                                 cw_proxy_shards_t* out_shards);

// The same from an xla.OpSharding's bytes over `n` devices (`ids`, copied).
CW_MUST_USE cw_status_t cw_proxy_op_sharding_shards(const uint8_t* op, size_t len,
                                                    const int32_t* ids, size_t n,
                                                    const int64_t* dims, size_t rank,
                                                    cw_proxy_shards_t* out_shards);

// n shards on `ids`, each the whole array of `dims`.
CW_MUST_USE cw_status_t cw_proxy_shards_replicated(const int32_t* ids, size_t n,
                                                   const int64_t* dims, size_t rank,
                                                   cw_proxy_shards_t* out_shards);

void cw_proxy_shards_free(cw_proxy_shards_t* shards);

// A packed ShardingProto (`packed`, `len`) with its devices moved: each id
// from[i] becomes to[i] (n of them; ids not in `from` are refused). The
// sharding's other fields are kept as they are. *out_packed is the
// caller's to free.
CW_MUST_USE cw_status_t cw_proxy_sharding_move(const uint8_t* packed, size_t len,
                                               const int32_t* from, const int32_t* to, size_t n,
                                               uint8_t** out_packed, size_t* out_len);

// Whether shard k is the whole array (known offsets of 0 and its dimensions).
bool cw_proxy_shards_whole(const cw_proxy_shards_t* shards, size_t k, const int64_t* dims);

#endif  // CW_PROXY_SHARDS_H_
