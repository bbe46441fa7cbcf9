// causeway-worker entry point: settings (defaults, environment, flags), then
// the worker loop until SIGTERM/SIGINT, EOF on --watch-fd, or the loss of the
// controller with --exit-with-controller.
#include <stdio.h>

#include "cw_settings.h"
#include "cw_worker.h"

int main(int argc, char** argv) {
  cw_settings_t settings;
  int code = 0;
  if (!cw_settings_initialize_for_main(
          "causeway-worker",
          "--plugin PATH --listen ADDR [--devices N] [--name NAME] [--controller ADDR"
          " [--exit-with-controller]] [--watch-fd N] [--log-level L]"
          " [--ffi-libraries PATH:SYMBOL,...] [--jaxlib-python PYTHON|off]",
          "worker", CW_SCOPE_WORKER, argc, argv, &settings, &code)) {
    return code;
  }
  cw_worker_t* worker = NULL;
  cw_status_t st = cw_worker_create(&settings, &worker);
  if (!st) st = cw_worker_run(worker);
  cw_worker_release(worker);
  cw_settings_deinitialize(&settings);
  if (st) {
    fprintf(stderr, "causeway-worker: fatal: %s\n", cw_status_message(st));
    cw_status_free(st);
    return 1;
  }
  return 0;
}
