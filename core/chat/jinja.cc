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
  absl::StatusOr<SpannedText> out = RenderSpanned(context, options);
  if (!out.ok()) return out.status();
  return std::move(out->text);
}

absl::StatusOr<SpannedText> Template::RenderSpanned(
    const nlohmann::ordered_json& context, const RenderOptions& options) const {
  Interp interp(options);
  return interp.Render(*root_, context);
}

void SpannedText::Append(std::string_view s, bool is_literal) {
  if (s.empty()) return;
  const size_t begin = text.size();
  text.append(s);
  if (!is_literal) return;
  if (!literal.empty() && literal.back().end == begin) {
    literal.back().end = text.size();
  } else {
    literal.push_back({begin, text.size()});
  }
}

void SpannedText::Append(const SpannedText& other) {
  const size_t offset = text.size();
  text.append(other.text);
  for (const TextRange& r : other.literal) {
    if (!literal.empty() && literal.back().end == r.begin + offset) {
      literal.back().end = r.end + offset;
    } else {
      literal.push_back({r.begin + offset, r.end + offset});
    }
  }
}

bool IsRaisedException(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

}  // namespace kvserve::jinja
