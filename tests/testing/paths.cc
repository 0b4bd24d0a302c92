#include "tests/testing/paths.h"

#include <string>

namespace kvserve::testing {

// The folders' absolute paths are compiled into this file alone (not every
// test's): a clone in another folder recompiles it, and ccache serves the
// rest of the test sources.
std::string SharedDir() { return KVSERVE_SHARED_DIR; }
std::string BinDir() { return KVSERVE_BIN_DIR; }

}  // namespace kvserve::testing
