#include "tests/fuzz/fuzz_util.h"

#include <cstdlib>
#include <string>
#include <string_view>

namespace kvserve::fuzz {

// The folder's absolute path is compiled into this file alone, so a clone
// in another folder recompiles it and ccache serves the fuzzers.
std::string SharedPath(std::string_view relative) {
  const char* env = std::getenv("KVSERVE_SHARED_DIR");
  std::string dir = env != nullptr ? env : KVSERVE_SHARED_DIR;
  return dir + "/" + std::string(relative);
}

}  // namespace kvserve::fuzz
