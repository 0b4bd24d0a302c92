#include "tests/testing/builtin_model.h"

#include "core/model/builtin_model.h"
#include "core/util/check.h"

namespace kvserve::testing {

const LoadedModel& BuiltinModel() {
  static const LoadedModel* const model = [] {
    absl::StatusOr<LoadedModel> loaded = LoadRandomModel(BuiltinModelOptions());
    KVSERVE_CHECK(loaded.ok());
    return new LoadedModel(*std::move(loaded));
  }();
  return *model;
}

}  // namespace kvserve::testing
