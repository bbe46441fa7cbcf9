// The embedded cluster (cw_plugin_cluster.c): with no CAUSEWAY_CONTROLLER,
// a private controller and workers as child processes on Unix sockets, with
// a random token, that die with this process.
#ifndef CW_PLUGIN_CLUSTER_H_
#define CW_PLUGIN_CLUSTER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_settings.h"
#include "cw_status.h"

typedef struct cw_plugin_cluster_s cw_plugin_cluster_t;

// The embedded cluster's shape: *out_workers workers (islands) of
// *out_devices CPU devices each. CAUSEWAY_LOCAL_WORKERS (default 1: one
// island, as one machine has) and CAUSEWAY_LOCAL_DEVICES when given; else
// the device count JAX asks for, split evenly over the workers: `jax_devices`
// (jax_num_cpu_devices, passed as the create option cpu_device_count; 0:
// not asked), else --xla_force_host_platform_device_count=N in `xla_flags`
// (NULL: none), else 8. A count that does not split, or a bad flag, is an
// error naming it. `settings` is borrowed.
CW_MUST_USE cw_status_t cw_plugin_cluster_layout(const cw_settings_t* settings,
                                                 int64_t jax_devices, const char* xla_flags,
                                                 int64_t* out_workers, int64_t* out_devices);

// Starts a private controller and workers as child processes, shaped by
// cw_plugin_cluster_layout (`jax_devices` as there; XLA_FLAGS from the
// environment), as `settings` (borrowed) say; *out_num_workers is how many.
// *out_controller_address is borrowed from the cluster.
CW_MUST_USE cw_status_t cw_plugin_cluster_start(const cw_settings_t* settings, int64_t jax_devices,
                                                cw_plugin_cluster_t** out_cluster,
                                                const char** out_controller_address,
                                                uint32_t* out_num_workers);
// Takes `status`: appends the tail of the children's logs (for error
// messages). `cluster` may be NULL.
CW_MUST_USE cw_status_t cw_plugin_cluster_annotate(cw_plugin_cluster_t* cluster,
                                                   cw_status_t status);
// True if a child has exited (with a description in buf).
bool cw_plugin_cluster_child_exited(cw_plugin_cluster_t* cluster, char* buf, size_t cap);
// Stops the children, removes the directory and frees `cluster` (NULL: no-op).
void cw_plugin_cluster_stop(cw_plugin_cluster_t* cluster);
// The embedded cluster's random token (borrowed; lives with the cluster).
const char* cw_plugin_cluster_token(const cw_plugin_cluster_t* cluster);

#endif  // CW_PLUGIN_CLUSTER_H_
