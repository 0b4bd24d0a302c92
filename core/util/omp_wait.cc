#include "core/util/omp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace kvserve {

void ExecWithPassiveOmpWaitUnlessSet(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
}

}  // namespace kvserve
