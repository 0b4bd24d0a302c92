// Whether this build runs under a sanitizer, for the few tests whose
// measure (resident memory, wall time) a sanitizer's own cost makes
// meaningless (they skip, saying so), and for numerics suites that run
// smaller shapes there.
#ifndef KVSERVE_TESTS_TESTING_SANITIZERS_H_
#define KVSERVE_TESTS_TESTING_SANITIZERS_H_

namespace kvserve::testing {

// GCC defines __SANITIZE_ADDRESS__; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Any sanitizer build (ASan comes with UBSan here). Numerics suites run
// smaller shapes there, reaching the same code paths: the sanitizers look
// for memory and threading errors, the release suites check the numbers.
inline constexpr bool kSanitizer = kAddressSanitizer || kThreadSanitizer;

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_SANITIZERS_H_
