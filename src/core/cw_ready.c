#include "cw_ready.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void cw_ready_signal(int fd, const char* fmt, ...) {
  if (fd < 0) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n > sizeof(line) - 2) n = (int)sizeof(line) - 2;  // cut, still one line
  line[n++] = '\n';
  // One write under PIPE_BUF bytes: the reader gets the whole line at once.
  ssize_t w;
  do w = write(fd, line, (size_t)n);
  while (w < 0 && errno == EINTR);
  close(fd);
}
