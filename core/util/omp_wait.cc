#include "core/util/omp_wait.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>

namespace kvserve {

void ExecSelf(char* const* argv) {
  // The kernel names a process (comm: ps, top, pgrep, pidof) after the
  // file it executes: exec of /proc/self/exe named kvserve "exe". So the
  // link's target, which keeps the program's own name.
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) {
    path[n] = '\0';
    execv(path, argv);
  }
  // The file was moved or deleted since it started ("... (deleted)"): its
  // image still runs through the link.
  execv("/proc/self/exe", argv);
}

void ExecWithPassiveOmpWaitUnlessSet(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  ExecSelf(argv);
}

}  // namespace kvserve
