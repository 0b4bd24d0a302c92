// Where tests find ../shared and the built binaries, independent of the
// working directory (ctest runs inside build/).
#ifndef KVSERVE_TESTS_TESTING_PATHS_H_
#define KVSERVE_TESTS_TESTING_PATHS_H_

#include <string>

namespace kvserve::testing {

// The shared folder (models, golden outputs) beside the source tree.
std::string SharedDir();
// build/, where kvserve, kvctl and kvmodel are.
std::string BinDir();

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_PATHS_H_
