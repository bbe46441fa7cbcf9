// InitRequest: the session's platform, devices and memories, as the PJRT
// client of this session (the causeway plugin) sees them; and the client's
// default device assignment (GetDefaultDeviceAssignment).
#include <stdlib.h>
#include <string.h>

#include "cw_proxy_internal.h"

typedef struct cw__init_s {
  CwIfrt__InitResponse r;
  CwIfrt__InitResponse__Device* devices;
  CwIfrt__InitResponse__Device** device_ptrs;
  CwIfrt__InitResponse__Memory* memories;
  CwIfrt__InitResponse__Memory** memory_ptrs;
  int32_t* ids;
  CwIfrt__AttributeMap* attrs;
  CwIfrt__AttributeMap client_attrs;
  char* platform_name;
  char* platform_version;
} cw__init_t;

static cw_status_t cw__oom(void) {
  return cw_make_status(CW_RESOURCE_EXHAUSTED, "causeway-proxy: out of memory for Init");
}

cw_status_t cw_proxy_attributes(const PJRT_NamedValue* nv, size_t n, CwIfrt__AttributeMap* out) {
  cw_ifrt__attribute_map__init(out);
  if (!n) return cw_ok_status();
  size_t each = sizeof(CwIfrt__AttributeMap__Entry*) + sizeof(CwIfrt__AttributeMap__Entry) +
                sizeof(CwIfrt__AttributeMap__Value) + sizeof(CwIfrt__AttributeMap__Int64List);
  char* block = calloc(n, each);
  if (!block) return cw__oom();
  CwIfrt__AttributeMap__Entry** ents = (CwIfrt__AttributeMap__Entry**)block;
  CwIfrt__AttributeMap__Entry* e = (CwIfrt__AttributeMap__Entry*)(ents + n);
  CwIfrt__AttributeMap__Value* v = (CwIfrt__AttributeMap__Value*)(e + n);
  CwIfrt__AttributeMap__Int64List* l = (CwIfrt__AttributeMap__Int64List*)(v + n);
  out->attributes = ents;
  for (size_t i = 0; i < n; i++) {
    size_t k = out->n_attributes;
    cw_ifrt__attribute_map__entry__init(&e[k]);
    cw_ifrt__attribute_map__value__init(&v[k]);
    cw_ifrt__attribute_map__int64_list__init(&l[k]);
    switch (nv[i].type) {
      case PJRT_NamedValue_kString:
        v[k].value_case = CW_IFRT__ATTRIBUTE_MAP__VALUE__VALUE_STRING_VALUE;
        v[k].string_value.data = (uint8_t*)nv[i].string_value;
        v[k].string_value.len = nv[i].value_size;
        break;
      case PJRT_NamedValue_kInt64:
        v[k].value_case = CW_IFRT__ATTRIBUTE_MAP__VALUE__VALUE_INT64_VALUE;
        v[k].int64_value = nv[i].int64_value;
        break;
      case PJRT_NamedValue_kInt64List:
        v[k].value_case = CW_IFRT__ATTRIBUTE_MAP__VALUE__VALUE_INT64_LIST_VALUE;
        l[k].elements = (int64_t*)nv[i].int64_array_value;
        l[k].n_elements = nv[i].value_size;
        v[k].int64_list_value = &l[k];
        break;
      case PJRT_NamedValue_kFloat:
        v[k].value_case = CW_IFRT__ATTRIBUTE_MAP__VALUE__VALUE_FLOAT_VALUE;
        v[k].float_value = nv[i].float_value;
        break;
      case PJRT_NamedValue_kBool:
        v[k].value_case = CW_IFRT__ATTRIBUTE_MAP__VALUE__VALUE_BOOL_VALUE;
        v[k].bool_value = nv[i].bool_value;
        break;
      default:
        continue;  // a kind IFRT has no value for
    }
    e[k].key = strndup(nv[i].name, nv[i].name_size);
    if (!e[k].key) return cw__oom();
    e[k].value = &v[k];
    ents[k] = &e[k];
    out->n_attributes++;
  }
  return cw_ok_status();
}

void cw_proxy_attributes_free(CwIfrt__AttributeMap* m) {
  for (size_t i = 0; i < m->n_attributes; i++) free(m->attributes[i]->key);
  free(m->attributes);
  m->attributes = NULL;
  m->n_attributes = 0;
}

static cw_status_t cw__device_attributes(const cw_proxy_pjrt_t* p, PJRT_DeviceDescription* dd,
                                         CwIfrt__AttributeMap* out) {
  cw_ifrt__attribute_map__init(out);
  PJRT_DeviceDescription_Attributes_Args a = {
      CW_PROXY_ARGS(PJRT_DeviceDescription_Attributes_Args, attributes), .device_description = dd};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_Attributes, &a), "Init");
  return cw_proxy_attributes(a.attributes, a.num_attributes, out);
}

// The client's attributes as a PJRT-backed IFRT client has them: the
// plugin's own, whether programs are serialized with Shardy (jax.export
// reads it), and the C API version.
static cw_status_t cw__client_attributes(const cw_proxy_pjrt_t* p, CwIfrt__AttributeMap* out) {
  cw_ifrt__attribute_map__init(out);
  PJRT_Plugin_Attributes_Args a = {CW_PROXY_ARGS(PJRT_Plugin_Attributes_Args, num_attributes)};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Plugin_Attributes, &a), "Init");
  PJRT_NamedValue* all = calloc(a.num_attributes + 3, sizeof(*all));
  if (!all) return cw__oom();
  if (a.num_attributes) memcpy(all, a.attributes, a.num_attributes * sizeof(*all));
  size_t n = a.num_attributes;
  all[n++] = (PJRT_NamedValue){.name = "serialize_with_sdy", .name_size = 18,
                               .type = PJRT_NamedValue_kBool, .bool_value = true,
                               .value_size = 1};
  all[n++] = (PJRT_NamedValue){.name = "pjrt_c_api_major_version", .name_size = 24,
                               .type = PJRT_NamedValue_kInt64,
                               .int64_value = p->api->pjrt_api_version.major_version,
                               .value_size = 1};
  all[n++] = (PJRT_NamedValue){.name = "pjrt_c_api_minor_version", .name_size = 24,
                               .type = PJRT_NamedValue_kInt64,
                               .int64_value = p->api->pjrt_api_version.minor_version,
                               .value_size = 1};
  cw_status_t st = cw_proxy_attributes(all, n, out);  // borrows only the plugin's values
  free(all);
  return st;
}

// The memory with PJRT id `id` among those seen so far (NULL: none).
static CwIfrt__InitResponse__Memory* cw__memory_slot(cw__init_t* in, int id) {
  for (size_t i = 0; i < in->r.n_memories; i++) {
    if (in->memories[i].id == id) return &in->memories[i];
  }
  return NULL;
}

cw_status_t cw_proxy_init(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                          CwIfrt__IfrtResponse* resp) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  cw__init_t* in = calloc(1, sizeof(*in));
  if (!in) return cw__oom();
  cw_ifrt__init_response__init(&in->r);
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_INIT_RESPONSE;
  resp->init_response = &in->r;  // freed by cw_proxy_init_free, also on error

  PJRT_Client_PlatformName_Args pn = {CW_PROXY_ARGS(PJRT_Client_PlatformName_Args, platform_name_size),
                                      .client = s->client};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Client_PlatformName, &pn), "Init");
  PJRT_Client_PlatformVersion_Args pv = {
      CW_PROXY_ARGS(PJRT_Client_PlatformVersion_Args, platform_version_size), .client = s->client};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Client_PlatformVersion, &pv), "Init");
  in->platform_name = strndup(pn.platform_name, pn.platform_name_size);
  in->platform_version = strndup(pv.platform_version, pv.platform_version_size);
  if (!in->platform_name || !in->platform_version) return cw__oom();
  in->r.platform_name = in->platform_name;
  in->r.platform_version = in->platform_version;
  in->r.runtime_type = "causeway";
  in->r.has_session_id = in->r.has_process_index = in->r.has_platform_id = true;
  in->r.session_id = s->id;
  CW_RETURN_IF_ERROR(cw__client_attributes(p, &in->client_attrs), "Init");
  in->r.client_attributes = &in->client_attrs;

  PJRT_Client_Devices_Args da = {CW_PROXY_ARGS(PJRT_Client_Devices_Args, num_devices),
                                 .client = s->client};
  CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Client_Devices, &da), "Init");
  size_t nd = da.num_devices;
  // Each device names its memories; the CPU plugin has three per device.
  size_t max_mem = 0;
  in->devices = calloc(nd ? nd : 1, sizeof(*in->devices));
  in->device_ptrs = calloc(nd ? nd : 1, sizeof(*in->device_ptrs));
  in->attrs = calloc(nd ? nd : 1, sizeof(*in->attrs));
  in->ids = calloc(nd ? nd : 1, sizeof(*in->ids));
  if (!in->devices || !in->device_ptrs || !in->attrs || !in->ids) return cw__oom();
  for (size_t i = 0; i < nd; i++) {
    PJRT_Device_AddressableMemories_Args ma = {
        CW_PROXY_ARGS(PJRT_Device_AddressableMemories_Args, num_memories), .device = da.devices[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_AddressableMemories, &ma), "Init");
    max_mem += ma.num_memories;
  }
  in->memories = calloc(max_mem ? max_mem : 1, sizeof(*in->memories));
  in->memory_ptrs = calloc(max_mem ? max_mem : 1, sizeof(*in->memory_ptrs));
  if (!in->memories || !in->memory_ptrs) return cw__oom();
  in->r.all_devices = in->device_ptrs;
  in->r.memories = in->memory_ptrs;
  for (size_t i = 0; i < nd; i++) {
    CwIfrt__InitResponse__Device* d = &in->devices[i];
    cw_ifrt__init_response__device__init(d);
    in->device_ptrs[i] = d;
    cw_ifrt__attribute_map__init(&in->attrs[i]);
    in->r.n_all_devices = i + 1;  // what to free, should a call below fail
    PJRT_Device_GetDescription_Args g = {CW_PROXY_ARGS(PJRT_Device_GetDescription_Args,
                                                  device_description),
                                         .device = da.devices[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_GetDescription, &g), "Init");
    PJRT_DeviceDescription_Id_Args ia = {CW_PROXY_ARGS(PJRT_DeviceDescription_Id_Args, id),
                                         .device_description = g.device_description};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_Id, &ia), "Init");
    PJRT_DeviceDescription_Kind_Args ka = {CW_PROXY_ARGS(PJRT_DeviceDescription_Kind_Args,
                                                    device_kind_size),
                                           .device_description = g.device_description};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_Kind, &ka), "Init");
    PJRT_DeviceDescription_DebugString_Args sa = {
        CW_PROXY_ARGS(PJRT_DeviceDescription_DebugString_Args, debug_string_size),
        .device_description = g.device_description};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_DebugString, &sa), "Init");
    PJRT_DeviceDescription_ToString_Args ta = {
        CW_PROXY_ARGS(PJRT_DeviceDescription_ToString_Args, to_string_size),
        .device_description = g.device_description};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_DeviceDescription_ToString, &ta), "Init");
    PJRT_Device_LocalHardwareId_Args ha = {CW_PROXY_ARGS(PJRT_Device_LocalHardwareId_Args,
                                                    local_hardware_id),
                                           .device = da.devices[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_LocalHardwareId, &ha), "Init");
    d->has_id = d->has_local_hardware_id = d->has_local_device_id = true;
    d->id = ia.id;
    d->local_hardware_id = ha.local_hardware_id;
    d->local_device_id = ha.local_hardware_id;
    d->device_kind = strndup(ka.device_kind, ka.device_kind_size);
    d->debug_string = strndup(sa.debug_string, sa.debug_string_size);
    d->to_string = strndup(ta.to_string, ta.to_string_size);
    d->platform_name = in->platform_name;
    if (!d->device_kind || !d->debug_string || !d->to_string) return cw__oom();
    CW_RETURN_IF_ERROR(cw__device_attributes(p, g.device_description, &in->attrs[i]), "Init");
    d->attributes = &in->attrs[i];
    in->ids[i] = ia.id;

    PJRT_Device_DefaultMemory_Args dm = {CW_PROXY_ARGS(PJRT_Device_DefaultMemory_Args, memory),
                                         .device = da.devices[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_DefaultMemory, &dm), "Init");
    PJRT_Device_AddressableMemories_Args ma = {
        CW_PROXY_ARGS(PJRT_Device_AddressableMemories_Args, num_memories), .device = da.devices[i]};
    CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Device_AddressableMemories, &ma), "Init");
    d->memory_ids = calloc(ma.num_memories ? ma.num_memories : 1, sizeof(int32_t));
    if (!d->memory_ids) return cw__oom();
    for (size_t j = 0; j < ma.num_memories; j++) {
      PJRT_Memory_Id_Args mi = {CW_PROXY_ARGS(PJRT_Memory_Id_Args, id), .memory = ma.memories[j]};
      CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Memory_Id, &mi), "Init");
      d->memory_ids[d->n_memory_ids++] = mi.id;
      if (ma.memories[j] == dm.memory) {
        d->has_default_memory_id = true;
        d->default_memory_id = mi.id;
      }
      CwIfrt__InitResponse__Memory* m = cw__memory_slot(in, mi.id);
      if (!m) {
        m = &in->memories[in->r.n_memories];
        in->memory_ptrs[in->r.n_memories++] = m;
        cw_ifrt__init_response__memory__init(m);
        m->has_id = m->has_kind_id = true;
        m->id = mi.id;
        PJRT_Memory_Kind_Args mk = {CW_PROXY_ARGS(PJRT_Memory_Kind_Args, kind_size),
                                    .memory = ma.memories[j]};
        PJRT_Memory_Kind_Id_Args mki = {CW_PROXY_ARGS(PJRT_Memory_Kind_Id_Args, kind_id),
                                        .memory = ma.memories[j]};
        PJRT_Memory_DebugString_Args mds = {CW_PROXY_ARGS(PJRT_Memory_DebugString_Args,
                                                     debug_string_size),
                                            .memory = ma.memories[j]};
        PJRT_Memory_ToString_Args mts = {CW_PROXY_ARGS(PJRT_Memory_ToString_Args, to_string_size),
                                         .memory = ma.memories[j]};
        CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Memory_Kind, &mk), "Init");
        CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Memory_Kind_Id, &mki), "Init");
        CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Memory_DebugString, &mds), "Init");
        CW_RETURN_IF_ERROR(CW_PROXY_PJRT_CALL(p, PJRT_Memory_ToString, &mts), "Init");
        m->kind_id = mki.kind_id;
        m->memory_space_kind = strndup(mk.kind, mk.kind_size);
        m->debug_string = strndup(mds.debug_string, mds.debug_string_size);
        m->to_string = strndup(mts.to_string, mts.to_string_size);
        m->device_ids = calloc(nd ? nd : 1, sizeof(int32_t));
        if (!m->memory_space_kind || !m->debug_string || !m->to_string || !m->device_ids) {
          return cw__oom();
        }
      }
      m->device_ids[m->n_device_ids++] = ia.id;
    }
  }
  in->r.addressable_device_ids = in->ids;
  in->r.n_addressable_device_ids = nd;
  in->r.primary_device_ids = in->ids;
  in->r.n_primary_device_ids = nd;
  return cw_ok_status();
}

void cw_proxy_init_free(CwIfrt__IfrtResponse* resp) {
  if (resp->response_case != CW_IFRT__IFRT_RESPONSE__RESPONSE_INIT_RESPONSE) return;
  cw__init_t* in = (cw__init_t*)resp->init_response;  // r is its first member
  if (!in) return;
  for (size_t i = 0; in->devices && i < in->r.n_all_devices; i++) {
    CwIfrt__InitResponse__Device* d = &in->devices[i];
    free(d->device_kind);
    free(d->debug_string);
    free(d->to_string);
    free(d->memory_ids);
    cw_proxy_attributes_free(&in->attrs[i]);
  }
  for (size_t i = 0; in->memories && i < in->r.n_memories; i++) {
    free(in->memories[i].memory_space_kind);
    free(in->memories[i].debug_string);
    free(in->memories[i].to_string);
    free(in->memories[i].device_ids);
  }
  free(in->devices);
  free(in->device_ptrs);
  free(in->memories);
  free(in->memory_ptrs);
  free(in->ids);
  free(in->attrs);
  cw_proxy_attributes_free(&in->client_attrs);
  free(in->platform_name);
  free(in->platform_version);
  free(in);
  resp->init_response = NULL;
}

// --- GetDefaultDeviceAssignment --------------------------------------------------------

typedef struct cw__assignment_s {
  CwIfrt__GetDefaultDeviceAssignmentResponse r;  // first: the oneof's pointer
  CwIfrt__DeviceAssignment da;
  CwIfrt__DeviceAssignment__ComputationDevice* computations;
  CwIfrt__DeviceAssignment__ComputationDevice** computation_ptrs;
  int64_t* ids;  // computation-major, each computation's replicas
} cw__assignment_t;

cw_status_t cw_proxy_device_assignment(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                       CwIfrt__IfrtResponse* resp) {
  const CwIfrt__GetDefaultDeviceAssignmentRequest* r =
      req->get_default_device_assignment_request;
  uint64_t replicas = r->num_replicas, partitions = r->num_partitions;
  if (!replicas || !partitions || replicas > CW_PROXY_MAX_DEVICES ||
      partitions > CW_PROXY_MAX_DEVICES / replicas) {
    return cw_make_status(CW_INVALID_ARGUMENT, "GetDefaultDeviceAssignment: %llu replicas x %llu "
                          "partitions (each from 1, %d devices at most)",
                          (unsigned long long)replicas, (unsigned long long)partitions,
                          CW_PROXY_MAX_DEVICES);
  }
  size_t n = (size_t)(replicas * partitions);
  int* flat = malloc(n * sizeof(*flat));
  cw__assignment_t* a = calloc(1, sizeof(*a));
  if (a) {
    a->computations = calloc(partitions, sizeof(*a->computations));
    a->computation_ptrs = calloc(partitions, sizeof(*a->computation_ptrs));
    a->ids = malloc(n * sizeof(*a->ids));
  }
  // Set before any failure: the caller frees what is there.
  resp->response_case = CW_IFRT__IFRT_RESPONSE__RESPONSE_GET_DEFAULT_DEVICE_ASSIGNMENT_RESPONSE;
  resp->get_default_device_assignment_response = a ? &a->r : NULL;
  if (!flat || !a || !a->computations || !a->computation_ptrs || !a->ids) {
    free(flat);
    return cw__oom();
  }
  PJRT_Client_DefaultDeviceAssignment_Args q = {
      .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Client_DefaultDeviceAssignment_Args,
                                         default_assignment),
      .client = s->client, .num_replicas = (int)replicas, .num_partitions = (int)partitions,
      .default_assignment_size = n, .default_assignment = flat};
  cw_status_t st = CW_PROXY_PJRT_CALL(&s->proxy->pjrt, PJRT_Client_DefaultDeviceAssignment, &q);
  if (st) {
    free(flat);
    return cw_status_annotate(st, "GetDefaultDeviceAssignment");
  }
  cw_ifrt__get_default_device_assignment_response__init(&a->r);
  cw_ifrt__device_assignment__init(&a->da);
  a->da.has_replica_count = a->da.has_computation_count = true;
  a->da.replica_count = (int32_t)replicas;
  a->da.computation_count = (int32_t)partitions;
  // PJRT's is replica-major; xla.DeviceAssignmentProto lists each
  // computation's (partition's) replicas.
  for (size_t c = 0; c < partitions; c++) {
    CwIfrt__DeviceAssignment__ComputationDevice* cd = &a->computations[c];
    cw_ifrt__device_assignment__computation_device__init(cd);
    cd->replica_device_ids = &a->ids[c * replicas];
    cd->n_replica_device_ids = replicas;
    for (size_t k = 0; k < replicas; k++) cd->replica_device_ids[k] = flat[k * partitions + c];
    a->computation_ptrs[c] = cd;
  }
  free(flat);
  a->da.computation_devices = a->computation_ptrs;
  a->da.n_computation_devices = partitions;
  a->r.device_assignment = &a->da;
  return cw_ok_status();
}

void cw_proxy_device_assignment_free(CwIfrt__IfrtResponse* resp) {
  if (resp->response_case !=
      CW_IFRT__IFRT_RESPONSE__RESPONSE_GET_DEFAULT_DEVICE_ASSIGNMENT_RESPONSE) {
    return;
  }
  cw__assignment_t* a = (cw__assignment_t*)resp->get_default_device_assignment_response;
  if (!a) return;
  free(a->computations);
  free(a->computation_ptrs);
  free(a->ids);
  free(a);
  resp->get_default_device_assignment_response = NULL;
}
