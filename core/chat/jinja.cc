#include "core/chat/jinja.h"

#include <utility>

#include "core/chat/jinja_ast.h"
#include "core/chat/jinja_eval.h"

namespace kvserve::jinja {

Template::Template() = default;
Template::~Template() = default;

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(
    std::string_view source) {
  absl::StatusOr<std::unique_ptr<Node>> root = ParseTemplate(source);
  if (!root.ok()) return root.status();
  std::unique_ptr<Template> t(new Template());
  t->root_ = *std::move(root);
  return t;
}

absl::StatusOr<std::string> Template::Render(
    const nlohmann::ordered_json& context, const RenderOptions& options) const {
  Interp interp(options);
  return interp.Render(*root_, context);
}

bool IsRaisedException(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

}  // namespace kvserve::jinja
