// The built-in model, loaded once per test binary and shared by its tests.
#ifndef KVSERVE_TESTS_TESTING_BUILTIN_MODEL_H_
#define KVSERVE_TESTS_TESTING_BUILTIN_MODEL_H_

#include "core/model/loader.h"

namespace kvserve::testing {

// Never destroyed; aborts the test binary if the model does not load.
const LoadedModel& BuiltinModel();

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_BUILTIN_MODEL_H_
