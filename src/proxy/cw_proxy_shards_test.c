// Unit tests for where a sharding puts its shards: tiles by a device list
// and by an iota, replicated trailing tile dimensions, Shardy's named axes
// (device order, sub-axes), the IFRT sharding kinds, and the refusals
// (uneven tiles, devices named twice or missing, manual, tuples).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_proxy_decode.h"
#include "cw_proxy_shards.h"

static const int32_t kIds[4] = {10, 11, 12, 13};

// Packs `m` into a static buffer (tests are single-threaded).
static const uint8_t* pack(const ProtobufCMessage* m, size_t* len) {
  static uint8_t buf[4096];
  *len = protobuf_c_message_get_packed_size(m);
  assert_true(*len <= sizeof(buf));
  protobuf_c_message_pack(m, buf);
  return buf;
}

static cw_status_t shards_of(const CwIfrt__XlaOpSharding* op, size_t n, const int64_t* dims,
                             size_t rank, cw_proxy_shards_t* out) {
  size_t len;
  const uint8_t* b = pack(&op->base, &len);
  return cw_proxy_op_sharding_shards(b, len, kIds, n, dims, rank, out);
}

static void expect_error(cw_status_t st, cw_status_code_t code, const char* text) {
  assert_non_null(st);
  assert_int_equal(cw_status_code(st), code);
  if (!strstr(cw_status_message(st), text)) {
    fail_msg("\"%s\" not in \"%s\"", text, cw_status_message(st));
  }
  cw_status_free(st);
}

// A tiled (type OTHER) OpSharding of `nt` tile dimensions whose tiles'
// devices are the list `devs` (nd of them).
static CwIfrt__XlaOpSharding by_list(int64_t* tiles, size_t nt, int64_t* devs, size_t nd) {
  CwIfrt__XlaOpSharding op = CW_IFRT__XLA_OP_SHARDING__INIT;
  op.has_type = true;
  op.type = 3;
  op.tile_assignment_dimensions = tiles;
  op.n_tile_assignment_dimensions = nt;
  op.tile_assignment_devices = devs;
  op.n_tile_assignment_devices = nd;
  return op;
}

// The same whose devices are an iota reshaped to `reshape` and permuted by
// `perm` (nr of each).
static CwIfrt__XlaOpSharding by_iota(int64_t* tiles, size_t nt, int64_t* reshape, int32_t* perm,
                                     size_t nr) {
  CwIfrt__XlaOpSharding op = by_list(tiles, nt, NULL, 0);
  op.iota_reshape_dims = reshape;
  op.n_iota_reshape_dims = nr;
  op.iota_transpose_perm = perm;
  op.n_iota_transpose_perm = nr;
  return op;
}

static void test_tiles_by_device_list(void** state) {
  int64_t tiles[] = {2}, devs[] = {1, 0};
  CwIfrt__XlaOpSharding op = by_list(tiles, 1, devs, 2);
  int64_t dims[] = {4};
  cw_proxy_shards_t s;
  assert_null(shards_of(&op, 2, dims, 1, &s));
  assert_int_equal(s.n, 2);
  assert_int_equal(s.ids[0], 10);
  // Tile 0 is on position 1 (device 11), tile 1 on position 0.
  assert_int_equal(s.offsets[0], 2);
  assert_int_equal(s.offsets[1], 0);
  assert_int_equal(s.dims[0], 2);
  assert_int_equal(s.dims[1], 2);
  assert_false(cw_proxy_shards_whole(&s, 0, dims));
  cw_proxy_shards_free(&s);
}

static void test_tiles_by_transposed_iota(void** state) {
  // [[0,1],[2,3]] transposed: positions 0, 2, 1, 3 row-major.
  int64_t tiles[] = {2, 2}, reshape[] = {2, 2};
  int32_t perm[] = {1, 0};
  CwIfrt__XlaOpSharding op = by_iota(tiles, 2, reshape, perm, 2);
  int64_t dims[] = {4, 6};
  cw_proxy_shards_t s;
  assert_null(shards_of(&op, 4, dims, 2, &s));
  int64_t want[4][2] = {{0, 0}, {2, 0}, {0, 3}, {2, 3}};  // by position
  for (size_t k = 0; k < 4; k++) {
    assert_int_equal(s.offsets[k * 2], want[k][0]);
    assert_int_equal(s.offsets[k * 2 + 1], want[k][1]);
    assert_int_equal(s.dims[k * 2], 2);
    assert_int_equal(s.dims[k * 2 + 1], 3);
  }
  cw_proxy_shards_free(&s);
}

static void test_replicated_last_tile_dimension(void** state) {
  int64_t tiles[] = {2, 2}, reshape[] = {4};
  int32_t perm[] = {0};
  CwIfrt__XlaOpSharding op = by_iota(tiles, 2, reshape, perm, 1);
  op.has_replicate_on_last_tile_dim = true;
  op.replicate_on_last_tile_dim = true;
  int64_t dims[] = {8};
  cw_proxy_shards_t s;
  assert_null(shards_of(&op, 4, dims, 1, &s));
  int64_t want[] = {0, 0, 4, 4};
  for (size_t k = 0; k < 4; k++) assert_int_equal(s.offsets[k], want[k]);
  cw_proxy_shards_free(&s);
  // The same with last_tile_dims = {REPLICATED}; MANUAL is refused.
  op.replicate_on_last_tile_dim = false;
  int32_t last[] = {0};
  op.last_tile_dims = last;
  op.n_last_tile_dims = 1;
  assert_null(shards_of(&op, 4, dims, 1, &s));
  assert_int_equal(s.offsets[2], 4);
  cw_proxy_shards_free(&s);
  last[0] = 4;
  expect_error(shards_of(&op, 4, dims, 1, &s), CW_UNIMPLEMENTED, "manual or unreduced");
  last[0] = 0;
  op.replicate_on_last_tile_dim = true;
  expect_error(shards_of(&op, 4, dims, 1, &s), CW_INVALID_ARGUMENT, "both");
}

static void test_tilings_refused(void** state) {
  int64_t tiles[] = {2}, devs[] = {0, 1};
  CwIfrt__XlaOpSharding op = by_list(tiles, 1, devs, 2);
  cw_proxy_shards_t s;
  int64_t odd[] = {5};
  expect_error(shards_of(&op, 2, odd, 1, &s), CW_UNIMPLEMENTED, "does not split evenly");
  int64_t dims[] = {4};
  devs[1] = 0;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_INVALID_ARGUMENT, "each once");
  devs[1] = 2;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_INVALID_ARGUMENT, "each once");
  devs[1] = 1;
  expect_error(shards_of(&op, 3, dims, 1, &s), CW_INVALID_ARGUMENT, "2 tiles for 3 devices");
  tiles[0] = 3;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_INVALID_ARGUMENT, "tile dimension 0 is 3");
  tiles[0] = 2;
  int64_t two[] = {4, 4};
  expect_error(shards_of(&op, 2, two, 2, &s), CW_INVALID_ARGUMENT, "for an array of rank 2");
  op.tile_assignment_devices = NULL;
  op.n_tile_assignment_devices = 0;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_INVALID_ARGUMENT, "names no tile devices");
  // Over 128 tile dimensions (trailing ones of 1, all replicating).
  int64_t ones[130];
  int32_t reps[129];
  ones[0] = 2;
  for (int i = 1; i < 130; i++) ones[i] = 1;
  for (int i = 0; i < 129; i++) reps[i] = 0;
  int64_t two_devs[] = {0, 1};
  op.tile_assignment_dimensions = ones;
  op.n_tile_assignment_dimensions = 130;
  op.tile_assignment_devices = two_devs;
  op.n_tile_assignment_devices = 2;
  op.last_tile_dims = reps;
  op.n_last_tile_dims = 129;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_INVALID_ARGUMENT, "130 tile dimensions");
  op.n_last_tile_dims = 0;
  op.type = 2;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_UNIMPLEMENTED, "tuple");
  op.type = 4;
  expect_error(shards_of(&op, 2, dims, 1, &s), CW_UNIMPLEMENTED, "manual");
  uint8_t junk[] = {0x0a, 0xff};
  expect_error(cw_proxy_op_sharding_shards(junk, sizeof(junk), kIds, 2, dims, 1, &s),
               CW_INVALID_ARGUMENT, "does not decode");
  // Replicated and maximal: every shard is the whole array.
  for (int32_t type = 0; type <= 1; type++) {
    op.type = type;
    assert_null(shards_of(&op, 2, dims, 1, &s));
    assert_true(cw_proxy_shards_whole(&s, 0, dims) && cw_proxy_shards_whole(&s, 1, dims));
    cw_proxy_shards_free(&s);
  }
  // Devices: each once, and not too many.
  int32_t twice[] = {10, 10};
  expect_error(cw_proxy_op_sharding_shards(junk, 0, twice, 2, dims, 1, &s), CW_INVALID_ARGUMENT,
               "device 10 is named twice");
  static int32_t many[CW_PROXY_SHARDS_MAX_DEVICES + 1];
  for (int i = 0; i <= CW_PROXY_SHARDS_MAX_DEVICES; i++) many[i] = i;
  expect_error(cw_proxy_op_sharding_shards(junk, 0, many, CW_PROXY_SHARDS_MAX_DEVICES + 1, dims,
                                           1, &s), CW_INVALID_ARGUMENT, "devices (1 to 4096)");
}

// A mesh x=2, y=2 whose devices are given in reverse; dimension 0 split
// by x, dimension 1 by y.
static void test_named_axes_on_a_mesh(void** state) {
  CwIfrt__XlaNamedSharding__MeshAxis x = CW_IFRT__XLA_NAMED_SHARDING__MESH_AXIS__INIT,
                                      y = CW_IFRT__XLA_NAMED_SHARDING__MESH_AXIS__INIT;
  x.has_size = y.has_size = true;
  x.size = y.size = 2;
  CwIfrt__XlaNamedSharding__MeshAxis* axes[] = {&x, &y};
  int64_t order[] = {3, 2, 1, 0};
  CwIfrt__XlaNamedSharding__Mesh mesh = CW_IFRT__XLA_NAMED_SHARDING__MESH__INIT;
  mesh.axes = axes;
  mesh.n_axes = 2;
  mesh.device_ids = order;
  mesh.n_device_ids = 4;
  CwIfrt__XlaAxisRef rx = CW_IFRT__XLA_AXIS_REF__INIT, ry = CW_IFRT__XLA_AXIS_REF__INIT;
  rx.has_mesh_axis_index = ry.has_mesh_axis_index = true;
  rx.mesh_axis_index = 0;
  ry.mesh_axis_index = 1;
  CwIfrt__XlaAxisRef* d0[] = {&rx};
  CwIfrt__XlaAxisRef* d1[] = {&ry};
  CwIfrt__XlaNamedSharding__DimensionSharding s0 = CW_IFRT__XLA_NAMED_SHARDING__DIMENSION_SHARDING__INIT,
                                              s1 = CW_IFRT__XLA_NAMED_SHARDING__DIMENSION_SHARDING__INIT;
  s0.axes = d0;
  s0.n_axes = 1;
  s1.axes = d1;
  s1.n_axes = 1;
  CwIfrt__XlaNamedSharding__DimensionSharding* ds[] = {&s0, &s1};
  CwIfrt__XlaNamedSharding ns = CW_IFRT__XLA_NAMED_SHARDING__INIT;
  ns.mesh = &mesh;
  ns.dim_shardings = ds;
  ns.n_dim_shardings = 2;
  CwIfrt__XlaOpSharding op = CW_IFRT__XLA_OP_SHARDING__INIT;
  op.named_sharding = &ns;
  int64_t dims[] = {4, 4};
  cw_proxy_shards_t s;
  assert_null(shards_of(&op, 4, dims, 2, &s));
  // Mesh position p = (p / 2, p % 2) holds device position 3 - p.
  int64_t want[4][2] = {{2, 2}, {2, 0}, {0, 2}, {0, 0}};
  for (size_t k = 0; k < 4; k++) {
    assert_int_equal(s.offsets[k * 2], want[k][0]);
    assert_int_equal(s.offsets[k * 2 + 1], want[k][1]);
  }
  cw_proxy_shards_free(&s);
  // Dimension 1 unsplit: y replicates.
  ns.n_dim_shardings = 1;
  assert_null(shards_of(&op, 4, dims, 2, &s));
  assert_int_equal(s.dims[1], 4);
  assert_int_equal(s.offsets[0], 2);
  assert_int_equal(s.offsets[2], 2);
  cw_proxy_shards_free(&s);
  // x for both dimensions: refused.
  ns.n_dim_shardings = 2;
  d1[0] = &rx;
  int64_t big[] = {4, 4};
  mesh.n_device_ids = 0;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_INVALID_ARGUMENT, "mesh axis 0 is used twice");
  x.size = 4;
  mesh.n_axes = 1;
  // Sub-axes of x=4: (1)2 splits dimension 0, (2)2 dimension 1.
  CwIfrt__XlaAxisRef__SubAxis lo = CW_IFRT__XLA_AXIS_REF__SUB_AXIS__INIT,
                              hi = CW_IFRT__XLA_AXIS_REF__SUB_AXIS__INIT;
  lo.has_pre_size = lo.has_size = hi.has_pre_size = hi.has_size = true;
  lo.pre_size = 2;
  lo.size = 2;
  hi.pre_size = 1;
  hi.size = 2;
  CwIfrt__XlaAxisRef sa = CW_IFRT__XLA_AXIS_REF__INIT, sb = CW_IFRT__XLA_AXIS_REF__INIT;
  sa.has_mesh_axis_index = sb.has_mesh_axis_index = true;
  sa.sub_axis_info = &hi;
  sb.sub_axis_info = &lo;
  d0[0] = &sa;
  d1[0] = &sb;
  assert_null(shards_of(&op, 4, big, 2, &s));
  // Position p on x: dimension 0 takes p % 2, dimension 1 takes p / 2.
  for (size_t p = 0; p < 4; p++) {
    assert_int_equal(s.offsets[p * 2], (int64_t)(p % 2) * 2);
    assert_int_equal(s.offsets[p * 2 + 1], (int64_t)(p / 2) * 2);
  }
  cw_proxy_shards_free(&s);
  // The same sub-axis for both dimensions leaves tiles on no device.
  d1[0] = &sa;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_INVALID_ARGUMENT, "on no device");
  d1[0] = &sb;
  // A part of x, then x whole: refused.
  d1[0] = &rx;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_INVALID_ARGUMENT, "mesh axis 0 is used twice");
  d1[0] = &sb;
  // Over 64 axis references.
  CwIfrt__XlaAxisRef* many[65];
  for (int i = 0; i < 65; i++) many[i] = &sa;
  s0.axes = many;
  s0.n_axes = 65;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_INVALID_ARGUMENT, "over 64 axis references");
  s0.axes = d0;
  s0.n_axes = 1;
  hi.pre_size = 3;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_INVALID_ARGUMENT, "sub-axis");
  hi.pre_size = 1;
  CwIfrt__XlaAxisRef* manual[] = {&rx};
  ns.manual_axes = manual;
  ns.n_manual_axes = 1;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_UNIMPLEMENTED, "manual axes");
  ns.n_manual_axes = 0;
  ns.unreduced_axes = manual;
  ns.n_unreduced_axes = 1;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_UNIMPLEMENTED, "unreduced axes");
  ns.n_unreduced_axes = 0;
  // A mesh field this proxy does not read (an iota order, say) is refused.
  uint8_t meshb[256];
  size_t ml = protobuf_c_message_pack(&mesh.base, meshb);
  meshb[ml++] = 3 << 3;  // field 3, varint
  meshb[ml++] = 1;
  CwIfrt__XlaNamedSharding__Mesh* odd = (CwIfrt__XlaNamedSharding__Mesh*)protobuf_c_message_unpack(
      &cw_ifrt__xla_named_sharding__mesh__descriptor, NULL, ml, meshb);
  assert_non_null(odd);
  ns.mesh = odd;
  expect_error(shards_of(&op, 4, big, 2, &s), CW_UNIMPLEMENTED, "fields the proxy does not read");
  protobuf_c_message_free_unpacked(&odd->base, NULL);
}

// An iota that is not square, and one of rank 3: position p holds the tile
// whose place in the transposed iota has value p.
static void test_iota_transposes(void** state) {
  int32_t ids[24];
  for (int i = 0; i < 24; i++) ids[i] = 100 + i;
  int64_t tiles[] = {6}, reshape[] = {2, 3};
  int32_t perm[] = {1, 0};
  CwIfrt__XlaOpSharding op = by_iota(tiles, 1, reshape, perm, 2);
  int64_t dims[] = {6};
  size_t len;
  const uint8_t* b = pack(&op.base, &len);
  cw_proxy_shards_t s;
  assert_null(cw_proxy_op_sharding_shards(b, len, ids, 6, dims, 1, &s));
  // [[0,1,2],[3,4,5]] transposed is 0,3,1,4,2,5: tile i on that position.
  int64_t want[] = {0, 2, 4, 1, 3, 5};
  for (size_t k = 0; k < 6; k++) assert_int_equal(s.offsets[k], want[k]);
  cw_proxy_shards_free(&s);
  // [2,3,4] permuted [1,2,0]: the value at (a,b,c) of the [3,4,2] result is
  // c*12 + a*4 + b, the tile of row-major index a*8 + b*2 + c.
  int64_t t24[] = {24}, r3[] = {2, 3, 4}, d24[] = {24};
  int32_t p3[] = {1, 2, 0};
  op.tile_assignment_dimensions = t24;
  op.iota_reshape_dims = r3;
  op.n_iota_reshape_dims = 3;
  op.iota_transpose_perm = p3;
  op.n_iota_transpose_perm = 3;
  b = pack(&op.base, &len);
  assert_null(cw_proxy_op_sharding_shards(b, len, ids, 24, d24, 1, &s));
  for (int64_t a = 0; a < 3; a++) {
    for (int64_t bb = 0; bb < 4; bb++) {
      for (int64_t c = 0; c < 2; c++) {
        assert_int_equal(s.offsets[c * 12 + a * 4 + bb], a * 8 + bb * 2 + c);
      }
    }
  }
  cw_proxy_shards_free(&s);
  perm[0] = 0;  // not a permutation
  p3[1] = 1;
  expect_error(cw_proxy_op_sharding_shards(pack(&op.base, &len), len, ids, 24, d24, 1, &s),
               CW_INVALID_ARGUMENT, "not one");
}

// An IFRT Sharding of `type_name` over the message `m`.
static cw_status_t ifrt_shards(const char* type_name, const ProtobufCMessage* m,
                               const int64_t* dims, size_t rank, cw_proxy_shards_t* out) {
  static uint8_t data[4096];
  size_t len;
  const uint8_t* b = pack(m, &len);
  memcpy(data, b, len);
  CwIfrt__Serialized ser = CW_IFRT__SERIALIZED__INIT;
  ser.type_name = (char*)type_name;
  ser.has_data = true;
  ser.data.data = data;
  ser.data.len = len;
  CwIfrt__Sharding sh = CW_IFRT__SHARDING__INIT;
  sh.serialized_sharding = &ser;
  return cw_proxy_sharding_shards(&sh, dims, rank, out);
}

static void test_ifrt_sharding_kinds(void** state) {
  int64_t dims[] = {4};
  cw_proxy_shards_t s;
  CwIfrt__SingleDeviceSharding sd = CW_IFRT__SINGLE_DEVICE_SHARDING__INIT;
  sd.has_device_id = true;
  sd.device_id = 7;
  assert_null(ifrt_shards("xla::ifrt::SingleDeviceSharding", &sd.base, dims, 1, &s));
  assert_int_equal(s.n, 1);
  assert_int_equal(s.ids[0], 7);
  assert_true(cw_proxy_shards_whole(&s, 0, dims));
  cw_proxy_shards_free(&s);

  int32_t ids[] = {5, 6};
  CwIfrt__DeviceList dl = CW_IFRT__DEVICE_LIST__INIT;
  dl.device_ids = ids;
  dl.n_device_ids = 2;
  // ConcreteEven split: its shard shape, nowhere said.
  CwIfrt__Shape shard = CW_IFRT__SHAPE__INIT;
  int64_t two[] = {2};
  shard.dims = two;
  shard.n_dims = 1;
  CwIfrt__ConcreteEvenShapes ce = CW_IFRT__CONCRETE_EVEN_SHAPES__INIT;
  ce.shard_shape = &shard;
  // ConcreteEvenShapes has no field 1: the device list goes in by hand.
  uint8_t buf[256];
  size_t n = cw_ifrt__concrete_even_shapes__pack(&ce, buf + 0);
  CwIfrt__ShardingDevices devs = CW_IFRT__SHARDING_DEVICES__INIT;
  devs.devices = &dl;
  uint8_t both[512];
  size_t m = cw_ifrt__sharding_devices__pack(&devs, both);
  memcpy(both + m, buf, n);
  CwIfrt__Serialized ser = CW_IFRT__SERIALIZED__INIT;
  ser.type_name = "xla::ifrt::ConcreteEvenSharding";
  ser.has_data = true;
  ser.data.data = both;
  ser.data.len = m + n;
  CwIfrt__Sharding sh = CW_IFRT__SHARDING__INIT;
  sh.serialized_sharding = &ser;
  assert_null(cw_proxy_sharding_shards(&sh, dims, 1, &s));
  assert_int_equal(s.n, 2);
  assert_int_equal(s.ids[1], 6);
  assert_null(s.offsets);
  assert_int_equal(s.dims[1], 2);
  cw_proxy_shards_free(&s);
  two[0] = 5;  // bigger than the array
  n = cw_ifrt__concrete_even_shapes__pack(&ce, both + m);
  ser.data.len = m + n;
  expect_error(cw_proxy_sharding_shards(&sh, dims, 1, &s), CW_INVALID_ARGUMENT, "not within");
  // Replicated: whole.
  ce.has_is_fully_replicated = true;
  ce.is_fully_replicated = true;
  n = cw_ifrt__concrete_even_shapes__pack(&ce, both + m);
  ser.data.len = m + n;
  assert_null(cw_proxy_sharding_shards(&sh, dims, 1, &s));
  assert_true(cw_proxy_shards_whole(&s, 1, dims));
  cw_proxy_shards_free(&s);

  // HloSharding over two devices: its OpSharding places them.
  int64_t tiles[] = {2}, order[] = {1, 0};
  CwIfrt__XlaOpSharding op = by_list(tiles, 1, order, 2);
  uint8_t opb[256];
  size_t opn = cw_ifrt__xla_op_sharding__pack(&op, opb);
  CwIfrt__HloSharding hs = CW_IFRT__HLO_SHARDING__INIT;
  hs.devices = &dl;
  hs.has_xla_op_sharding = true;
  hs.xla_op_sharding.data = opb;
  hs.xla_op_sharding.len = opn;
  assert_null(ifrt_shards("xla::ifrt::HloSharding", &hs.base, dims, 1, &s));
  assert_int_equal(s.ids[0], 5);
  assert_int_equal(s.offsets[0], 2);  // device 5 holds tile 1
  cw_proxy_shards_free(&s);
  hs.has_xla_op_sharding = false;
  expect_error(ifrt_shards("xla::ifrt::HloSharding", &hs.base, dims, 1, &s),
               CW_INVALID_ARGUMENT, "without its xla.OpSharding");
  // Opaque over two devices says nothing.
  expect_error(ifrt_shards("xla::ifrt::OpaqueSharding", &devs.base, dims, 1, &s),
               CW_UNIMPLEMENTED, "does not say where its shards lie");

  // Moved onto other devices (CopyArrays): the tiling stays, the devices
  // change, a memory kind rides along.
  hs.has_xla_op_sharding = true;
  hs.memory_kind = "pinned_host";
  size_t hl;
  const uint8_t* hb = pack(&hs.base, &hl);
  uint8_t inner[512];
  memcpy(inner, hb, hl);
  CwIfrt__Serialized hser = CW_IFRT__SERIALIZED__INIT;
  hser.type_name = "xla::ifrt::HloSharding";
  hser.has_data = true;
  hser.data.data = inner;
  hser.data.len = hl;
  CwIfrt__Sharding whole = CW_IFRT__SHARDING__INIT;
  whole.serialized_sharding = &hser;
  uint8_t packed[1024];
  size_t plen = cw_ifrt__sharding__pack(&whole, packed);
  int32_t from[] = {6, 5}, to[] = {8, 9};
  uint8_t* moved;
  size_t mlen;
  assert_null(cw_proxy_sharding_move(packed, plen, from, to, 2, &moved, &mlen));
  CwIfrt__Sharding* back = cw_ifrt__sharding__unpack(NULL, mlen, moved);
  assert_non_null(back);
  assert_null(cw_proxy_sharding_shards(back, dims, 1, &s));
  assert_int_equal(s.ids[0], 9);  // was 5
  assert_int_equal(s.ids[1], 8);  // was 6
  assert_int_equal(s.offsets[0], 2);  // the tiling is the same
  cw_proxy_shards_free(&s);
  char* kind = NULL;
  assert_null(cw_proxy_sharding_memory_kind(back, &kind));
  assert_string_equal(kind, "pinned_host");
  free(kind);
  cw_ifrt__sharding__free_unpacked(back, NULL);
  free(moved);
  int32_t other[] = {5, 7};
  expect_error(cw_proxy_sharding_move(packed, plen, other, to, 2, &moved, &mlen),
               CW_INVALID_ARGUMENT, "device 6, which has no shard");
  assert_null(moved);
  // Single-device.
  hb = pack(&sd.base, &hl);
  memcpy(inner, hb, hl);
  hser.type_name = "xla::ifrt::SingleDeviceSharding";
  hser.data.len = hl;
  plen = cw_ifrt__sharding__pack(&whole, packed);
  int32_t seven[] = {7}, three[] = {3};
  assert_null(cw_proxy_sharding_move(packed, plen, seven, three, 1, &moved, &mlen));
  back = cw_ifrt__sharding__unpack(NULL, mlen, moved);
  assert_null(cw_proxy_sharding_shards(back, dims, 1, &s));
  assert_int_equal(s.n, 1);
  assert_int_equal(s.ids[0], 3);
  cw_proxy_shards_free(&s);
  cw_ifrt__sharding__free_unpacked(back, NULL);
  free(moved);
  expect_error(cw_proxy_sharding_move((const uint8_t*)"\xff", 1, seven, three, 1, &moved, &mlen),
               CW_INVALID_ARGUMENT, "does not decode");
  // A field numbered 0 behind an overlong tag (0x81 0x00), which protobuf-c
  // reads once but not once packed again: refused, not a sharding that no
  // reader takes (found by ifrt_request_fuzz).
  static const uint8_t field0[] = {0x81, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x02, 0x08, 0x02};
  hser.type_name = "xla::ifrt::ConcreteEvenSharding";
  memcpy(inner, field0, sizeof(field0));
  hser.data.len = sizeof(field0);
  plen = cw_ifrt__sharding__pack(&whole, packed);
  int32_t dev2[] = {2};
  expect_error(cw_proxy_sharding_move(packed, plen, dev2, three, 1, &moved, &mlen),
               CW_INVALID_ARGUMENT, "xla::ifrt::ConcreteEvenSharding does not decode once its "
                                    "devices move");
  assert_null(moved);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiles_by_device_list),
      cmocka_unit_test(test_tiles_by_transposed_iota),
      cmocka_unit_test(test_iota_transposes),
      cmocka_unit_test(test_replicated_last_tile_dimension),
      cmocka_unit_test(test_tilings_refused),
      cmocka_unit_test(test_named_axes_on_a_mesh),
      cmocka_unit_test(test_ifrt_sharding_kinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
