// causeway-controller entry point: settings (defaults, environment, flags),
// then the controller loop until SIGTERM/SIGINT or EOF on --watch-fd.
#include <stdio.h>

#include "cw_controller.h"
#include "cw_settings.h"

int main(int argc, char** argv) {
  cw_settings_t settings;
  int code = 0;
  if (!cw_settings_initialize_for_main("causeway-controller",
                                       "--listen ADDR [--watch-fd N] [--log-level L]",
                                       "controller", CW_SCOPE_CONTROLLER, argc, argv, &settings,
                                       &code)) {
    return code;
  }
  cw_controller_t* controller = NULL;
  cw_status_t st = cw_controller_create(&settings, &controller);
  if (!st) st = cw_controller_run(controller);
  cw_controller_release(controller);
  cw_settings_deinitialize(&settings);
  if (st) {
    fprintf(stderr, "causeway-controller: %s\n", cw_status_message(st));
    cw_status_free(st);
    return 1;
  }
  return 0;
}
