// Index domains of an IFRT sharding's shards (cw_proxy_shards.h). A tiled
// xla.OpSharding names, for each tile, the position of its device in the
// sharding's device list: tile coordinates times the tile's dimensions are
// the shard's offset. Everything a peer sends is checked: counts against
// the device list, each device placed once, products without overflow.
#include <stdlib.h>
#include <string.h>

#include "cw_pb_nesting.h"
#include "cw_proxy_decode.h"
#include "cw_proxy_shards.h"


// xla.OpSharding.Type
enum { CW__REPLICATED = 0, CW__MAXIMAL = 1, CW__TUPLE = 2, CW__OTHER = 3, CW__MANUAL = 4 };

void cw_proxy_shards_free(cw_proxy_shards_t* s) {
  free(s->ids);
  free(s->dims);
  free(s->offsets);
  *s = (cw_proxy_shards_t){0};
}

bool cw_proxy_shards_whole(const cw_proxy_shards_t* s, size_t k, const int64_t* dims) {
  if (!s->offsets) return false;
  for (size_t j = 0; j < s->rank; j++) {
    if (s->offsets[k * s->rank + j] != 0 || s->dims[k * s->rank + j] != dims[j]) return false;
  }
  return true;
}

// Room for n shards of `rank`, every one the whole array (offsets 0 when
// `offsets`).
static cw_status_t cw__alloc(const int32_t* ids, size_t n, const int64_t* dims, size_t rank,
                             bool offsets, cw_proxy_shards_t* out) {
  *out = (cw_proxy_shards_t){.n = n, .rank = rank};
  if (rank > CW_PROXY_DECODE_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "rank %zu is over %d", rank,
                          CW_PROXY_DECODE_MAX_RANK);
  }
  if (!n || n > CW_PROXY_SHARDS_MAX_DEVICES) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a sharding of %zu devices (1 to %d)", n,
                          CW_PROXY_SHARDS_MAX_DEVICES);
  }
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < i; j++) {
      if (ids[i] == ids[j]) {
        return cw_make_status(CW_INVALID_ARGUMENT, "device %d is named twice", ids[i]);
      }
    }
  }
  out->ids = malloc(n * sizeof(*out->ids));
  out->dims = malloc(n * (rank ? rank : 1) * sizeof(*out->dims));
  out->offsets = offsets ? calloc(n * (rank ? rank : 1), sizeof(*out->offsets)) : NULL;
  if (!out->ids || !out->dims || (offsets && !out->offsets)) {
    cw_proxy_shards_free(out);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %zu shards", n);
  }
  memcpy(out->ids, ids, n * sizeof(*ids));
  for (size_t k = 0; k < n; k++) {
    if (rank) memcpy(out->dims + k * rank, dims, rank * sizeof(*dims));
  }
  return cw_ok_status();
}

cw_status_t cw_proxy_shards_replicated(const int32_t* ids, size_t n, const int64_t* dims,
                                       size_t rank, cw_proxy_shards_t* out) {
  return cw__alloc(ids, n, dims, rank, true, out);
}

// Sets shard `k` to the tile at `coord` (per dimension) of `tiles` tiles;
// dimensions that tiles do not split evenly are refused.
static cw_status_t cw__tile(cw_proxy_shards_t* s, size_t k, const int64_t* dims,
                            const int64_t* tiles, const int64_t* coord) {
  for (size_t j = 0; j < s->rank; j++) {
    if (tiles[j] < 1 || dims[j] % tiles[j]) {
      return cw_make_status(CW_UNIMPLEMENTED, "dimension %zu (%lld) does not split evenly into "
                            "%lld tiles", j, (long long)dims[j], (long long)tiles[j]);
    }
    int64_t size = dims[j] / tiles[j];
    s->dims[k * s->rank + j] = size;
    s->offsets[k * s->rank + j] = coord[j] * size;
  }
  return cw_ok_status();
}

// The product of `v` (`what` each is), refused past `limit` devices.
static cw_status_t cw__product(const int64_t* v, size_t n, int64_t limit, const char* what,
                               int64_t* out) {
  int64_t p = 1;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < 1 || v[i] > limit || p > limit / v[i]) {
      return cw_make_status(CW_INVALID_ARGUMENT, "%s %zu is %lld (the product is at most the "
                            "%lld devices)", what, i, (long long)v[i], (long long)limit);
    }
    p *= v[i];
  }
  *out = p;
  return cw_ok_status();
}

// The device list position of each tile (row-major over the tile dimensions),
// from the explicit list or the iota; each position once.
static cw_status_t cw__tile_devices(const CwIfrt__XlaOpSharding* sh, size_t n, int64_t* out) {
  if (sh->n_tile_assignment_devices) {
    if (sh->n_tile_assignment_devices != n) {
      return cw_make_status(CW_INVALID_ARGUMENT, "%zu tile devices for %zu devices",
                            sh->n_tile_assignment_devices, n);
    }
    memcpy(out, sh->tile_assignment_devices, n * sizeof(*out));
  } else if (sh->n_iota_reshape_dims) {
    size_t r = sh->n_iota_reshape_dims;
    int64_t total;
    if (r > CW_PROXY_DECODE_MAX_RANK || sh->n_iota_transpose_perm != r) {
      return cw_make_status(CW_INVALID_ARGUMENT, "an iota of %zu dimensions and %zu permuted", r,
                            sh->n_iota_transpose_perm);
    }
    CW_RETURN_IF_ERROR(
        cw__product(sh->iota_reshape_dims, r, (int64_t)n, "iota dimension", &total), "iota");
    if ((size_t)total != n) {
      return cw_make_status(CW_INVALID_ARGUMENT, "an iota of %lld for %zu devices",
                            (long long)total, n);
    }
    bool seen[CW_PROXY_DECODE_MAX_RANK] = {false};
    int64_t tdims[CW_PROXY_DECODE_MAX_RANK];
    for (size_t j = 0; j < r; j++) {
      int32_t p = sh->iota_transpose_perm[j];
      if (p < 0 || (size_t)p >= r || seen[p]) {
        return cw_make_status(CW_INVALID_ARGUMENT, "the iota's permutation is not one");
      }
      seen[p] = true;
      tdims[j] = sh->iota_reshape_dims[p];
    }
    // Position i of the transposed iota holds the row-major index, in the
    // reshaped dimensions, of its coordinates put back in place.
    for (size_t i = 0; i < n; i++) {
      int64_t o[CW_PROXY_DECODE_MAX_RANK];
      size_t rest = i;
      for (size_t j = r; j-- > 0;) {
        o[sh->iota_transpose_perm[j]] = (int64_t)(rest % (size_t)tdims[j]);
        rest /= (size_t)tdims[j];
      }
      int64_t v = 0;
      for (size_t j = 0; j < r; j++) v = v * sh->iota_reshape_dims[j] + o[j];
      out[i] = v;
    }
  } else {
    return cw_make_status(CW_INVALID_ARGUMENT, "a tiled sharding names no tile devices");
  }
  return cw_ok_status();
}

// A tiled (OTHER) OpSharding's shards.
static cw_status_t cw__tiled(const CwIfrt__XlaOpSharding* sh, const int64_t* dims,
                             cw_proxy_shards_t* s) {
  size_t m = sh->n_tile_assignment_dimensions;
  if (sh->replicate_on_last_tile_dim && sh->n_last_tile_dims) {
    return cw_make_status(CW_INVALID_ARGUMENT, "both replicate_on_last_tile_dim and "
                          "last_tile_dims");
  }
  size_t extra = sh->replicate_on_last_tile_dim ? 1 : sh->n_last_tile_dims;
  if (m > 2 * CW_PROXY_DECODE_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%zu tile dimensions (at most %d)", m,
                          2 * CW_PROXY_DECODE_MAX_RANK);
  }
  for (size_t i = 0; i < sh->n_last_tile_dims; i++) {
    if (sh->last_tile_dims[i] != CW__REPLICATED) {
      return cw_make_status(CW_UNIMPLEMENTED, "tile dimensions of type %d (manual or unreduced) "
                            "are not served", sh->last_tile_dims[i]);
    }
  }
  if (extra > m || m - extra != s->rank) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%zu tile dimensions (%zu replicating) for an "
                          "array of rank %zu", m, extra, s->rank);
  }
  int64_t total;
  CW_RETURN_IF_ERROR(cw__product(sh->tile_assignment_dimensions, m, (int64_t)s->n,
                                 "tile dimension", &total), "tiling");
  if ((size_t)total != s->n) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%lld tiles for %zu devices", (long long)total,
                          s->n);
  }
  int64_t* pos = malloc(s->n * sizeof(*pos));
  bool* placed = calloc(s->n, sizeof(*placed));
  cw_status_t st = pos && placed ? cw__tile_devices(sh, s->n, pos)
                                 : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; !st && i < s->n; i++) {
    if (pos[i] < 0 || (size_t)pos[i] >= s->n || placed[pos[i]]) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "tile %zu names device position %lld (of %zu, "
                          "each once)", i, (long long)pos[i], s->n);
      break;
    }
    placed[pos[i]] = true;
    int64_t coord[CW_PROXY_DECODE_MAX_RANK];
    size_t rest = i;
    for (size_t j = m; j-- > 0;) {
      if (j < s->rank) coord[j] = (int64_t)(rest % (size_t)sh->tile_assignment_dimensions[j]);
      rest /= (size_t)sh->tile_assignment_dimensions[j];
    }
    st = cw__tile(s, (size_t)pos[i], dims, sh->tile_assignment_dimensions, coord);
  }
  free(pos);
  free(placed);
  return st;
}

// Shardy's form: the mesh's axes, its devices row-major, and per array
// dimension the axes (or parts of them) that split it, major first.
static cw_status_t cw__named(const CwIfrt__XlaNamedSharding* ns, const int64_t* dims,
                             cw_proxy_shards_t* s) {
  size_t na = ns->mesh ? ns->mesh->n_axes : 0;
  if (ns->n_manual_axes || ns->n_unreduced_axes || ns->n_tuple_shardings) {
    return cw_make_status(CW_UNIMPLEMENTED, "named shardings with %s are not served",
                          ns->n_manual_axes ? "manual axes"
                          : ns->n_unreduced_axes ? "unreduced axes" : "tuples");
  }
  // A mesh that orders its devices some other way than device_ids (a field
  // this proxy does not read) would place tiles wrongly: refused.
  if (ns->mesh && ns->mesh->base.n_unknown_fields) {
    return cw_make_status(CW_UNIMPLEMENTED, "a mesh with fields the proxy does not read");
  }
  if (ns->n_dim_shardings > s->rank || na > CW_PROXY_DECODE_MAX_RANK) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a named sharding of %zu dimensions and %zu axes "
                          "for an array of rank %zu", ns->n_dim_shardings, na, s->rank);
  }
  int64_t sizes[CW_PROXY_DECODE_MAX_RANK];
  for (size_t a = 0; a < na; a++) sizes[a] = ns->mesh->axes[a]->size;
  int64_t total;
  CW_RETURN_IF_ERROR(cw__product(sizes, na, (int64_t)s->n, "mesh axis", &total), "mesh");
  if ((size_t)total != s->n) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a mesh of %lld devices for %zu",
                          (long long)total, s->n);
  }
  size_t nid = ns->mesh ? ns->mesh->n_device_ids : 0;
  if (nid && nid != s->n) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a mesh of %zu device ids for %zu", nid, s->n);
  }
  // Each dimension's tiles, and each axis reference checked once.
  int64_t tiles[CW_PROXY_DECODE_MAX_RANK];
  // A whole axis splits one dimension once, and none of its parts do too
  // (parts of one axis may split several).
  enum { CW__UNUSED, CW__WHOLE, CW__PARTS } use[CW_PROXY_DECODE_MAX_RANK] = {CW__UNUSED};
  size_t refs = 0;
  for (size_t j = 0; j < s->rank; j++) {
    tiles[j] = 1;
    size_t nr = j < ns->n_dim_shardings ? ns->dim_shardings[j]->n_axes : 0;
    if ((refs += nr) > CW_PROXY_DECODE_MAX_RANK) {
      return cw_make_status(CW_INVALID_ARGUMENT, "a named sharding of over %d axis references",
                            CW_PROXY_DECODE_MAX_RANK);
    }
    for (size_t r = 0; r < nr; r++) {
      const CwIfrt__XlaAxisRef* ax = ns->dim_shardings[j]->axes[r];
      if (ax->mesh_axis_index < 0 || (size_t)ax->mesh_axis_index >= na) {
        return cw_make_status(CW_INVALID_ARGUMENT, "dimension %zu names mesh axis %lld of %zu", j,
                              (long long)ax->mesh_axis_index, na);
      }
      int64_t full = sizes[ax->mesh_axis_index], size = full;
      int u = ax->sub_axis_info ? CW__PARTS : CW__WHOLE;
      if (use[ax->mesh_axis_index] != CW__UNUSED &&
          (u == CW__WHOLE || use[ax->mesh_axis_index] == CW__WHOLE)) {
        return cw_make_status(CW_INVALID_ARGUMENT, "mesh axis %lld is used twice",
                              (long long)ax->mesh_axis_index);
      }
      use[ax->mesh_axis_index] = u;
      if (ax->sub_axis_info) {
        int64_t pre = ax->sub_axis_info->pre_size;
        size = ax->sub_axis_info->size;
        if (pre < 1 || size < 1 || full % pre || (full / pre) % size) {
          return cw_make_status(CW_INVALID_ARGUMENT, "dimension %zu: a sub-axis (%lld)%lld of an "
                                "axis of %lld", j, (long long)pre, (long long)size,
                                (long long)full);
        }
      }
      if (tiles[j] > (int64_t)s->n / size) {
        return cw_make_status(CW_INVALID_ARGUMENT, "dimension %zu is split more ways than there "
                              "are devices", j);
      }
      tiles[j] *= size;
    }
  }
  // Axes named twice could leave tiles on no device: every tile must have one.
  int64_t cells;
  CW_RETURN_IF_ERROR(cw__product(tiles, s->rank, (int64_t)s->n, "tiles of dimension", &cells),
                     "named sharding");
  bool* placed = calloc(s->n, sizeof(*placed));
  bool* covered = calloc((size_t)cells, sizeof(*covered));
  cw_status_t st = placed && covered ? cw_ok_status()
                                     : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t p = 0; !st && p < s->n; p++) {
    int64_t c[CW_PROXY_DECODE_MAX_RANK];  // p's coordinate on each axis
    size_t rest = p;
    for (size_t a = na; a-- > 0;) {
      c[a] = (int64_t)(rest % (size_t)sizes[a]);
      rest /= (size_t)sizes[a];
    }
    int64_t k = nid ? ns->mesh->device_ids[p] : (int64_t)p;
    if (k < 0 || (size_t)k >= s->n || placed[k]) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "mesh position %zu names device position %lld "
                          "(of %zu, each once)", p, (long long)k, s->n);
      break;
    }
    placed[k] = true;
    int64_t coord[CW_PROXY_DECODE_MAX_RANK];
    for (size_t j = 0; j < s->rank; j++) {
      coord[j] = 0;
      size_t nr = j < ns->n_dim_shardings ? ns->dim_shardings[j]->n_axes : 0;
      for (size_t r = 0; r < nr; r++) {
        const CwIfrt__XlaAxisRef* ax = ns->dim_shardings[j]->axes[r];
        int64_t v = c[ax->mesh_axis_index], size = sizes[ax->mesh_axis_index];
        if (ax->sub_axis_info) {
          size = ax->sub_axis_info->size;
          v = (v / ax->sub_axis_info->pre_size) % size;
        }
        coord[j] = coord[j] * size + v;
      }
    }
    st = cw__tile(s, (size_t)k, dims, tiles, coord);
    int64_t cell = 0;
    for (size_t j = 0; j < s->rank; j++) cell = cell * tiles[j] + coord[j];
    covered[cell] = true;
  }
  for (int64_t c = 0; !st && c < cells; c++) {
    if (!covered[c]) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "the named sharding puts tile %lld on no device",
                          (long long)c);
    }
  }
  free(placed);
  free(covered);
  return st;
}

cw_status_t cw_proxy_op_sharding_shards(const uint8_t* op, size_t len, const int32_t* ids,
                                        size_t n, const int64_t* dims, size_t rank,
                                        cw_proxy_shards_t* out) {
  CW_RETURN_IF_ERROR(cw__alloc(ids, n, dims, rank, true, out), "sharding");
  // An OpSharding holds OpShardings (tuples): bounded before protobuf-c recurses.
  CwIfrt__XlaOpSharding* sh =
      cw_pb_nesting_ok(&cw_ifrt__xla_op_sharding__descriptor, op, len, CW_PB_MAX_NESTING)
          ? cw_ifrt__xla_op_sharding__unpack(NULL, len, op)
          : NULL;
  cw_status_t st = cw_ok_status();
  if (!sh) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "an xla.OpSharding does not decode");
  } else if (sh->named_sharding) {
    st = cw__named(sh->named_sharding, dims, out);
  } else if (sh->type == CW__OTHER) {
    st = cw__tiled(sh, dims, out);
  } else if (sh->type != CW__REPLICATED && sh->type != CW__MAXIMAL) {
    st = cw_make_status(CW_UNIMPLEMENTED, "sharding type %d (%s) is not served", sh->type,
                        sh->type == CW__TUPLE    ? "tuple"
                        : sh->type == CW__MANUAL ? "manual"
                                                 : "unreduced or unknown");
  }
  if (sh) cw_ifrt__xla_op_sharding__free_unpacked(sh, NULL);
  if (st) cw_proxy_shards_free(out);
  return st;
}

// ConcreteEven: every shard of its shard shape; where they lie is said only
// when they are the whole array.
static cw_status_t cw__concrete_even(const int32_t* ids, size_t n, const uint8_t* data,
                                     size_t len, const int64_t* dims, size_t rank,
                                     cw_proxy_shards_t* out) {
  CwIfrt__ConcreteEvenShapes* e = cw_ifrt__concrete_even_shapes__unpack(NULL, len, data);
  if (!e) return cw_make_status(CW_INVALID_ARGUMENT, "a ConcreteEvenSharding does not decode");
  bool whole = n == 1 || e->is_fully_replicated;
  cw_status_t st = cw_ok_status();
  const CwIfrt__Shape* shard = e->shard_shape;
  if (!whole && (!shard || shard->n_dims != rank)) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "a ConcreteEvenSharding's shard shape is not of "
                        "rank %zu", rank);
  }
  if (!st) st = cw__alloc(ids, n, dims, rank, whole, out);
  for (size_t k = 0; !st && !whole && k < n; k++) {
    for (size_t j = 0; j < rank; j++) {
      if (shard->dims[j] < 0 || shard->dims[j] > dims[j]) {
        st = cw_make_status(CW_INVALID_ARGUMENT, "shard dimension %zu (%lld) is not within the "
                            "array's (%lld)", j, (long long)shard->dims[j], (long long)dims[j]);
        cw_proxy_shards_free(out);
        break;
      }
      out->dims[k * rank + j] = shard->dims[j];
    }
  }
  cw_ifrt__concrete_even_shapes__free_unpacked(e, NULL);
  return st;
}

cw_status_t cw_proxy_sharding_shards(const CwIfrt__Sharding* sh, const int64_t* dims,
                                     size_t rank, cw_proxy_shards_t* out) {
  *out = (cw_proxy_shards_t){0};
  int32_t* ids;
  size_t n;
  bool whole;
  CW_RETURN_IF_ERROR(cw_proxy_sharding_devices(sh, &ids, &n, &whole), "sharding");
  const CwIfrt__Serialized* ser = sh->serialized_sharding;
  size_t len = ser->has_data ? ser->data.len : 0;
  cw_status_t st = cw_ok_status();
  if (!strcmp(ser->type_name, CW_PROXY_HLO_SHARDING) && n > 1) {
    CwIfrt__HloSharding* h = cw_ifrt__hlo_sharding__unpack(NULL, len, ser->data.data);
    if (!h || !h->has_xla_op_sharding) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "an HloSharding without its xla.OpSharding");
    } else {
      st = cw_proxy_op_sharding_shards(h->xla_op_sharding.data, h->xla_op_sharding.len, ids, n,
                                       dims, rank, out);
    }
    if (h) cw_ifrt__hlo_sharding__free_unpacked(h, NULL);
  } else if (!strcmp(ser->type_name, CW_PROXY_CONCRETE_EVEN)) {
    st = cw__concrete_even(ids, n, ser->data.data, len, dims, rank, out);
  } else if (whole || !strcmp(ser->type_name, CW_PROXY_SINGLE_DEVICE)) {
    st = cw__alloc(ids, n, dims, rank, true, out);
  } else {
    st = cw_make_status(CW_UNIMPLEMENTED, "a %s over %zu devices does not say where its shards "
                        "lie", ser->type_name, n);
  }
  free(ids);
  return st;
}

static cw_status_t cw__moved_id(int32_t id, const int32_t* from, const int32_t* to, size_t n,
                                int32_t* out) {
  for (size_t i = 0; i < n; i++) {
    if (from[i] == id) {
      *out = to[i];
      return cw_ok_status();
    }
  }
  return cw_make_status(CW_INVALID_ARGUMENT, "the sharding names device %d, which has no shard",
                        id);
}

cw_status_t cw_proxy_sharding_move(const uint8_t* packed, size_t len, const int32_t* from,
                                   const int32_t* to, size_t n, uint8_t** out_packed,
                                   size_t* out_len) {
  *out_packed = NULL;
  *out_len = 0;
  CwIfrt__Sharding* sh = cw_ifrt__sharding__unpack(NULL, len, packed);
  CwIfrt__Serialized* ser = sh ? sh->serialized_sharding : NULL;
  if (!ser || !ser->type_name) {
    if (sh) cw_ifrt__sharding__free_unpacked(sh, NULL);
    return cw_make_status(CW_INVALID_ARGUMENT, "a sharding that does not decode");
  }
  // Single-device: its device_id (1); the others: their device list (1).
  // Fields not declared here are kept by protobuf-c and packed again.
  bool single = !strcmp(ser->type_name, CW_PROXY_SINGLE_DEVICE);
  const ProtobufCMessageDescriptor* desc = single ? &cw_ifrt__single_device_sharding__descriptor
                                                  : &cw_ifrt__sharding_devices__descriptor;
  size_t dlen = ser->has_data ? ser->data.len : 0;
  ProtobufCMessage* m = protobuf_c_message_unpack(desc, NULL, dlen, ser->data.data);
  cw_status_t st = m ? cw_ok_status()
                     : cw_make_status(CW_INVALID_ARGUMENT, "%s does not decode", ser->type_name);
  if (!st && single) {
    CwIfrt__SingleDeviceSharding* sd = (CwIfrt__SingleDeviceSharding*)m;
    st = cw__moved_id(sd->device_id, from, to, n, &sd->device_id);
    sd->has_device_id = true;  // an absent id is 0, moved like any other
  } else if (!st) {
    CwIfrt__DeviceList* dl = ((CwIfrt__ShardingDevices*)m)->devices;
    for (size_t i = 0; !st && dl && i < dl->n_device_ids; i++) {
      st = cw__moved_id(dl->device_ids[i], from, to, n, &dl->device_ids[i]);
    }
  }
  uint8_t* data = NULL;
  size_t data_len = 0;
  if (!st) {
    data = malloc(protobuf_c_message_get_packed_size(m) + 1);
    if (!data) st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st) {
    data_len = protobuf_c_message_pack(m, data);
    // protobuf-c keeps unknown fields it would not read back packed anew (a
    // field numbered 0 behind an overlong tag): the moved sharding must
    // read back, as every reader of it reads it.
    ProtobufCMessage* again = protobuf_c_message_unpack(desc, NULL, data_len, data);
    if (!again) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "%s does not decode once its devices move",
                          ser->type_name);
    }
    if (again) protobuf_c_message_free_unpacked(again, NULL);
  }
  if (!st) {
    ProtobufCBinaryData old = ser->data;
    ser->data.data = data;
    ser->data.len = data_len;
    ser->has_data = true;
    *out_len = cw_ifrt__sharding__get_packed_size(sh);
    *out_packed = malloc(*out_len + 1);
    if (*out_packed) {
      cw_ifrt__sharding__pack(sh, *out_packed);
    } else {
      *out_len = 0;
      st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
    ser->data = old;  // the unpacked message frees its own
  }
  free(data);
  if (m) protobuf_c_message_free_unpacked(m, NULL);
  cw_ifrt__sharding__free_unpacked(sh, NULL);
  return st;
}
