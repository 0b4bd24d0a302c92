// OpenMP's wait policy for this process. On a machine with few cores that
// other work shares, spinning OpenMP threads (libgomp's default) steal the
// cores the other threads need: measured here, active or default waiting
// made decode steps 2.8-48x slower than passive. libgomp reads
// OMP_WAIT_POLICY once, before main(), so the only way to default it is to
// start the program again with it set.
#ifndef KVSERVE_CORE_UTIL_OMP_WAIT_H_
#define KVSERVE_CORE_UTIL_OMP_WAIT_H_

namespace kvserve {

// Executes this program again with `argv` under its own name (returns only
// if that fails).
void ExecSelf(char* const* argv);

// When OMP_WAIT_POLICY is unset: sets it to "passive" and re-executes the
// program with `argv` (returns only if that fails). A value the user set is
// kept.
void ExecWithPassiveOmpWaitUnlessSet(char** argv);

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_OMP_WAIT_H_
