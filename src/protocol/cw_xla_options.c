#include "cw_xla_options.h"

#include <stdlib.h>
#include <string.h>

#include "proto/xla_compile_options.pb-c.h"

typedef Causeway__Xla__CompileOptions cw__opts_t;

static cw_status_t cw__unpack(const uint8_t* data, size_t size, cw__opts_t** out) {
  static const uint8_t empty[1] = {0};
  *out = causeway__xla__compile_options__unpack(NULL, size, size ? data : empty);
  if (!*out) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "compile options: not a valid CompileOptionsProto (%zu bytes)", size);
  }
  return cw_ok_status();
}

static cw_status_t cw__pack(const cw__opts_t* opts, uint8_t** out_data, size_t* out_size) {
  size_t n = causeway__xla__compile_options__get_packed_size(opts);
  uint8_t* buf = malloc(n ? n : 1);
  if (!buf) return cw_make_status(CW_RESOURCE_EXHAUSTED, "compile options: out of memory");
  causeway__xla__compile_options__pack(opts, buf);
  *out_data = buf;
  *out_size = n;
  return cw_ok_status();
}

static cw_status_t cw__check(const cw__opts_t* opts, int64_t num_devices,
                             cw_xla_options_info_t* info) {
  memset(info, 0, offsetof(cw_xla_options_info_t, assigned));
  const Causeway__Xla__ExecutableBuildOptions* b = opts->executable_build_options;
  if (!b) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "compile options: executable_build_options is missing");
  }
  if (b->num_replicas < 1 || b->num_partitions < 1) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "compile options: num_replicas (%lld) and num_partitions (%lld) "
                          "must be at least 1",
                          (long long)b->num_replicas, (long long)b->num_partitions);
  }
  if (b->num_replicas > CW_XLA_MAX_ASSIGNED_DEVICES ||
      b->num_partitions > CW_XLA_MAX_ASSIGNED_DEVICES ||
      b->num_replicas * b->num_partitions > CW_XLA_MAX_ASSIGNED_DEVICES) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "compile options: %lld replicas x %lld partitions exceeds %d devices",
                          (long long)b->num_replicas, (long long)b->num_partitions,
                          CW_XLA_MAX_ASSIGNED_DEVICES);
  }
  if (b->num_replicas * b->num_partitions > num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "compile options: %lld replicas x %lld partitions need more than the "
                          "%lld devices there are",
                          (long long)b->num_replicas, (long long)b->num_partitions,
                          (long long)num_devices);
  }
  info->num_replicas = b->num_replicas;
  info->num_partitions = b->num_partitions;
  const Causeway__Xla__DeviceAssignment* da = b->device_assignment;
  if (!da) return cw_ok_status();
  if (da->replica_count != b->num_replicas || da->computation_count != b->num_partitions ||
      (int64_t)da->n_computation_devices != b->num_partitions) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "compile options: device assignment is %d replicas x %d computations "
                          "(%zu listed) but the program has %lld x %lld",
                          da->replica_count, da->computation_count, da->n_computation_devices,
                          (long long)b->num_replicas, (long long)b->num_partitions);
  }
  for (size_t p = 0; p < da->n_computation_devices; ++p) {
    const Causeway__Xla__ComputationDevice* cd = da->computation_devices[p];
    if ((int64_t)cd->n_replica_device_ids != b->num_replicas) {
      return cw_make_status(CW_INVALID_ARGUMENT,
                            "compile options: computation %zu lists %zu devices, want %lld", p,
                            cd->n_replica_device_ids, (long long)b->num_replicas);
    }
    for (size_t r = 0; r < cd->n_replica_device_ids; ++r) {
      int64_t id = cd->replica_device_ids[r];
      if (id < 0 || id >= num_devices) {
        return cw_make_status(CW_INVALID_ARGUMENT,
                              "compile options: device id %lld is not one of the %lld devices",
                              (long long)id, (long long)num_devices);
      }
      for (size_t k = 0; k < info->num_assigned; ++k) {
        if (info->assigned[k] == id) {
          return cw_make_status(CW_INVALID_ARGUMENT,
                                "compile options: device id %lld is assigned twice",
                                (long long)id);
        }
      }
      info->assigned[info->num_assigned++] = id;
    }
  }
  return cw_ok_status();
}

cw_status_t cw_xla_options_check(const uint8_t* data, size_t size, int64_t num_devices,
                                 cw_xla_options_info_t* out_info) {
  cw__opts_t* opts = NULL;
  CW_RETURN_IF_ERROR(cw__unpack(data, size, &opts), "");
  cw_status_t s = cw__check(opts, num_devices, out_info);
  causeway__xla__compile_options__free_unpacked(opts, NULL);
  return s;
}

cw_status_t cw_xla_options_normalize(const uint8_t* data, size_t size, int64_t num_devices,
                                     uint8_t** out_data, size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  cw__opts_t* opts = NULL;
  CW_RETURN_IF_ERROR(cw__unpack(data, size, &opts), "");
  // Stack storage for build options the peer left out; detached before free.
  Causeway__Xla__ExecutableBuildOptions defaults = CAUSEWAY__XLA__EXECUTABLE_BUILD_OPTIONS__INIT;
  bool borrowed = !opts->executable_build_options;
  if (borrowed) {
    defaults.device_ordinal = -1;
    opts->executable_build_options = &defaults;
  }
  Causeway__Xla__ExecutableBuildOptions* b = opts->executable_build_options;
  if (b->num_replicas == 0) b->num_replicas = 1;
  if (b->num_partitions == 0) b->num_partitions = 1;
  cw_xla_options_info_t* info = malloc(sizeof(*info));
  cw_status_t s = info ? cw__check(opts, num_devices, info)
                       : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  free(info);
  if (!s) s = cw__pack(opts, out_data, out_size);
  if (borrowed) opts->executable_build_options = NULL;
  causeway__xla__compile_options__free_unpacked(opts, NULL);
  return s;
}

cw_status_t cw_xla_options_single_device(int64_t device_id, uint8_t** out_data,
                                         size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  int64_t ids[1] = {device_id};
  Causeway__Xla__ComputationDevice cd = CAUSEWAY__XLA__COMPUTATION_DEVICE__INIT;
  cd.n_replica_device_ids = 1;
  cd.replica_device_ids = ids;
  Causeway__Xla__ComputationDevice* cds[1] = {&cd};
  Causeway__Xla__DeviceAssignment da = CAUSEWAY__XLA__DEVICE_ASSIGNMENT__INIT;
  da.replica_count = 1;
  da.computation_count = 1;
  da.n_computation_devices = 1;
  da.computation_devices = cds;
  Causeway__Xla__ExecutableBuildOptions b = CAUSEWAY__XLA__EXECUTABLE_BUILD_OPTIONS__INIT;
  b.device_ordinal = -1;
  b.num_replicas = 1;
  b.num_partitions = 1;
  b.device_assignment = &da;
  cw__opts_t opts = CAUSEWAY__XLA__COMPILE_OPTIONS__INIT;
  opts.executable_build_options = &b;
  return cw__pack(&opts, out_data, out_size);
}

cw_status_t cw_xla_options_rewrite_devices(const uint8_t* data, size_t size,
                                           const int64_t* map, size_t map_size,
                                           uint8_t** out_data, size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  cw__opts_t* opts = NULL;
  CW_RETURN_IF_ERROR(cw__unpack(data, size, &opts), "");
  cw_xla_options_info_t* info = malloc(sizeof(*info));
  cw_status_t s = info ? cw__check(opts, (int64_t)map_size, info)
                       : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  free(info);
  if (!s && opts->executable_build_options->device_assignment) {
    Causeway__Xla__DeviceAssignment* da = opts->executable_build_options->device_assignment;
    for (size_t p = 0; p < da->n_computation_devices; ++p) {
      Causeway__Xla__ComputationDevice* cd = da->computation_devices[p];
      for (size_t r = 0; r < cd->n_replica_device_ids; ++r) {
        cd->replica_device_ids[r] = map[cd->replica_device_ids[r]];
      }
    }
  }
  if (!s) s = cw__pack(opts, out_data, out_size);
  causeway__xla__compile_options__free_unpacked(opts, NULL);
  return s;
}

cw_status_t cw_xla_options_part(const uint8_t* data, size_t size, size_t first, size_t count,
                                uint8_t** out_data, size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  cw__opts_t* opts = NULL;
  CW_RETURN_IF_ERROR(cw__unpack(data, size, &opts), "");
  Causeway__Xla__ExecutableBuildOptions* bo = opts->executable_build_options;
  Causeway__Xla__DeviceAssignment* da = bo ? bo->device_assignment : NULL;
  cw_status_t s = cw_ok_status();
  if (!da || da->n_computation_devices == 0) {
    s = cw_make_status(CW_INVALID_ARGUMENT, "compile options: no device assignment to split");
  } else if (count == 0) {
    s = cw_make_status(CW_INVALID_ARGUMENT, "compile options: a part of no devices");
  } else if (da->n_computation_devices == 1) {  // replicas: slice the one computation
    Causeway__Xla__ComputationDevice* cd = da->computation_devices[0];
    if (first + count > cd->n_replica_device_ids) {
      s = cw_make_status(CW_OUT_OF_RANGE, "compile options: replicas %zu..%zu of %zu", first,
                         first + count, cd->n_replica_device_ids);
    } else {
      memmove(cd->replica_device_ids, cd->replica_device_ids + first, count * sizeof(int64_t));
      cd->n_replica_device_ids = count;
      da->replica_count = (int32_t)count;
      bo->num_replicas = (int64_t)count;
    }
  } else {
    bool one_replica = true;
    for (size_t p = 0; p < da->n_computation_devices; ++p) {
      if (da->computation_devices[p]->n_replica_device_ids != 1) one_replica = false;
    }
    if (!one_replica) {
      s = cw_make_status(CW_UNIMPLEMENTED, "compile options: a program with both several "
                         "replicas and several partitions cannot be split across workers");
    } else if (first + count > da->n_computation_devices) {
      s = cw_make_status(CW_OUT_OF_RANGE, "compile options: partitions %zu..%zu of %zu", first,
                         first + count, da->n_computation_devices);
    } else {
      // The computations before `first` and after the part are dropped.
      for (size_t p = 0; p < da->n_computation_devices; ++p) {
        if (p < first || p >= first + count) {
          causeway__xla__computation_device__free_unpacked(da->computation_devices[p], NULL);
        }
      }
      memmove(da->computation_devices, da->computation_devices + first,
              count * sizeof(*da->computation_devices));
      da->n_computation_devices = count;
      da->computation_count = (int32_t)count;
      bo->num_partitions = (int64_t)count;
    }
  }
  if (!s) s = cw__pack(opts, out_data, out_size);
  causeway__xla__compile_options__free_unpacked(opts, NULL);
  return s;
}
