// Whether this build runs under a sanitizer, for the few tests whose
// measure (resident memory, wall time) a sanitizer's own cost makes
// meaningless (they skip, saying so), and for numerics suites that run
// smaller shapes there.
#ifndef KVSERVE_TESTS_TESTING_SANITIZERS_H_
#define KVSERVE_TESTS_TESTING_SANITIZERS_H_

namespace kvserve::testing {

// GCC defines __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__; clang answers
// __has_feature.
#ifdef __has_feature
#define KVSERVE_HAS_FEATURE(feature) __has_feature(feature)
#else
#define KVSERVE_HAS_FEATURE(feature) 0
#endif
inline constexpr bool kAddressSanitizer =
#if defined(__SANITIZE_ADDRESS__) || KVSERVE_HAS_FEATURE(address_sanitizer)
    true;
#else
    false;
#endif
inline constexpr bool kThreadSanitizer =
#if defined(__SANITIZE_THREAD__) || KVSERVE_HAS_FEATURE(thread_sanitizer)
    true;
#else
    false;
#endif

// Any sanitizer build (ASan comes with UBSan here). Numerics suites run
// smaller shapes there, reaching the same code paths: the sanitizers look
// for memory and threading errors, the release suites check the numbers.
inline constexpr bool kSanitizer = kAddressSanitizer || kThreadSanitizer;

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_SANITIZERS_H_
