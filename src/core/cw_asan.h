// AddressSanitizer's hooks, as cw_tsan.h is ThreadSanitizer's: CW_ASAN is
// defined in an ASan build (-DCW_SANITIZE=ON) and the macros are no-ops
// elsewhere.
#ifndef CW_CORE_ASAN_H_
#define CW_CORE_ASAN_H_

#if defined(__SANITIZE_ADDRESS__)
#define CW_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CW_ASAN 1
#endif
#endif

#ifdef CW_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
// Memory this thread allocates meanwhile is not reported as leaked at exit.
#define CW_LSAN_DISABLE() __lsan_disable()
#define CW_LSAN_ENABLE() __lsan_enable()
#else
#define CW_LSAN_DISABLE() ((void)0)
#define CW_LSAN_ENABLE() ((void)0)
#endif

#endif  // CW_CORE_ASAN_H_
