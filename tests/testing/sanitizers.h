// Whether this build runs under a sanitizer, for the few tests whose
// measure (resident memory, wall time) a sanitizer's own cost makes
// meaningless: they skip, saying so.
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

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_SANITIZERS_H_
