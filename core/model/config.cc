#include "core/model/config.h"

#include "absl/strings/str_format.h"

namespace kvserve {

absl::Status ModelConfig::Validate() const {
  auto positive = [](const char* name, int v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("model config: %s must be positive, got %d", name, v));
  };
  for (auto [name, v] : {std::pair{"n_layers", n_layers},
                         {"dim", dim},
                         {"hidden_dim", hidden_dim},
                         {"n_heads", n_heads},
                         {"n_kv_heads", n_kv_heads},
                         {"head_dim", head_dim},
                         {"vocab_size", vocab_size},
                         {"context_length", context_length}}) {
    if (absl::Status s = positive(name, v); !s.ok()) return s;
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model config: n_heads (%d) is not a multiple of n_kv_heads (%d)",
        n_heads, n_kv_heads));
  }
  if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0 ||
      head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model config: rope_dim %d must be even and at most head_dim %d",
        rope_dim, head_dim));
  }
  if (sliding_window < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model config: sliding_window %d must be 0 (none) or positive",
        sliding_window));
  }
  if (!(norm_eps > 0) || !(rope_theta > 0)) {
    return absl::InvalidArgumentError(
        "model config: norm_eps and rope_theta must be positive");
  }
  return absl::OkStatus();
}

}  // namespace kvserve
