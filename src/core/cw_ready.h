// A daemon's readiness, told to whoever started it (--ready-fd): one line
// written to an inherited descriptor, which is then closed. The reader sees
// the line, then EOF; a daemon that dies before it is ready gives EOF alone.
// The embedded cluster (src/plugin/cw_plugin_cluster.c) waits on these
// instead of polling sockets.
#ifndef CW_CORE_READY_H_
#define CW_CORE_READY_H_

#include "cw_status.h"

// Writes the formatted text and "\n" to `fd` and closes it; fd < 0: does
// nothing. Call it once per descriptor. Write errors (the reader is gone)
// are ignored: readiness is news for a parent, not a duty.
void cw_ready_signal(int fd, const char* fmt, ...) CW_PRINTF(2, 3);

#endif  // CW_CORE_READY_H_
