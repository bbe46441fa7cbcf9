// Byte counts as people read them, for messages and tables: "512 MiB",
// "1.5 GiB", "100 bytes" (binary units; one decimal unless whole).
#ifndef CW_CORE_BYTES_H_
#define CW_CORE_BYTES_H_

#include <stddef.h>
#include <stdint.h>

// Writes the text into buf (size bytes, cut to fit); returns buf.
char* cw_bytes_format(uint64_t bytes, char* buf, size_t size);

#endif  // CW_CORE_BYTES_H_
