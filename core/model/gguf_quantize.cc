#include "core/model/gguf_quantize.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/model/gguf_tensor.h"
#include "core/quant/quant.h"

namespace kvserve {
namespace {

absl::Status GgufError(const GgufFile& g, const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrFormat("GGUF file %s: %s", g.name(), msg));
}

// llama.cpp's rule (llama_model_quantize_impl): a 2-D "*.weight" that is
// not a norm.
bool IsWeightMatrix(const GgufTensorInfo& t) {
  size_t n_dims = t.dims.size();
  while (n_dims > 1 && t.dims[n_dims - 1] == 1) --n_dims;
  return n_dims == 2 && absl::EndsWith(t.name, ".weight") &&
         !absl::EndsWith(t.name, "_norm.weight");
}

// <arch>.block_count, which the mixes need to pick their more-bits layers.
absl::StatusOr<int> LayerCount(const GgufFile& g) {
  if (g.Find("general.architecture") == nullptr) {
    return GgufError(g, "required key 'general.architecture' is missing");
  }
  absl::StatusOr<std::string> arch = g.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  const std::string key = *arch + ".block_count";
  if (g.Find(key) == nullptr) {
    return GgufError(g, absl::StrFormat("required key '%s' is missing", key));
  }
  absl::StatusOr<int64_t> n = g.GetInt(key);
  if (!n.ok()) return n.status();
  if (*n <= 0 || *n > (1 << 14)) {
    return GgufError(g, absl::StrFormat("key '%s' is %d (expected 1..%d)", key,
                                        *n, 1 << 14));
  }
  return static_cast<int>(*n);
}

GgufValue Uint32Value(uint32_t v) {
  GgufValue out;
  out.type = GgufType::kUint32;
  out.value = uint64_t{v};
  return out;
}

// Rows of `cols` elements: dequantized from `from`, quantized to `to`.
GgufWriter::Producer Requantize(std::shared_ptr<const MappedFile> file,
                                const uint8_t* src, quant::Type from,
                                quant::Type to, int64_t cols) {
  return [file = std::move(file), src, from, to, cols](uint8_t* out,
                                                       uint64_t n_bytes) {
    const quant::TypeInfo& in = *quant::Info(from);
    const quant::TypeInfo& q = *quant::Info(to);
    const int64_t src_row_bytes = quant::RowBytes(from, cols);
    const int64_t dst_row_bytes = quant::RowBytes(to, cols);
    const int64_t rows = static_cast<int64_t>(n_bytes) / dst_row_bytes;
#pragma omp parallel if (rows * cols > (1 << 20))
    {
      std::vector<float> row(cols);  // [cols] f32
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        in.dequantize(src + r * src_row_bytes, row.data(), cols);
        q.quantize(row.data(), out + r * dst_row_bytes, cols);
      }
    }
  };
}

GgufWriter::Producer Copy(std::shared_ptr<const MappedFile> file,
                          const uint8_t* src) {
  return [file = std::move(file), src](uint8_t* out, uint64_t n_bytes) {
    std::memcpy(out, src, n_bytes);
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufWriter>> QuantizedGguf(const GgufFile& in,
                                                          const TypeMix& mix) {
  absl::StatusOr<int> n_layers = LayerCount(in);
  if (!n_layers.ok()) return n_layers.status();

  auto w = std::make_unique<GgufWriter>();
  w->SetAlignment(static_cast<uint32_t>(in.alignment()));
  bool has_file_type = false;
  for (const std::string& key : in.keys()) {
    if (key == "general.alignment") continue;  // the writer writes it
    if (key == "general.file_type") {
      w->Add(key, Uint32Value(mix.file_type));
      has_file_type = true;
      continue;
    }
    w->Add(key, *in.Find(key));
  }
  if (!has_file_type) w->Add("general.file_type", Uint32Value(mix.file_type));

  for (const GgufTensorInfo& t : in.tensors()) {
    const GgmlType stored = static_cast<GgmlType>(t.type);
    if (!IsWeightMatrix(t)) {
      w->AddTensor(t.name, t.dims, stored, Copy(in.file(), t.data));
      continue;
    }
    const int64_t cols = t.dims[0];
    const GgmlType target = mix.TypeFor(t.name, *n_layers, cols);
    if (target == stored) {
      w->AddTensor(t.name, t.dims, stored, Copy(in.file(), t.data));
      continue;
    }
    const quant::Type from = static_cast<quant::Type>(t.type);
    if (!quant::IsWeightType(from)) {
      return absl::UnimplementedError(absl::StrFormat(
          "GGUF file %s: tensor '%s' (data at byte offset %d) is %s, which "
          "cannot be converted (supported: %s)",
          in.name(), t.name, t.file_offset, GgmlTypeName(t.type),
          SupportedTypeNames()));
    }
    const quant::Type to = static_cast<quant::Type>(target);
    const quant::TypeInfo* q = quant::Info(to);
    if (q == nullptr || q->quantize == nullptr || cols % q->block_elems != 0) {
      // TypeFor only picks types with a quantizer whose blocks fit the row.
      return absl::InternalError(absl::StrFormat(
          "tensor '%s': no quantizer for %s rows of %d elements", t.name,
          GgmlTypeName(static_cast<uint32_t>(target)), cols));
    }
    w->AddTensor(t.name, t.dims, target,
                 Requantize(in.file(), t.data, from, to, cols));
  }
  return w;
}

absl::Status QuantizeGguf(const std::string& in_path,
                          const std::string& out_path, const TypeMix& mix) {
  absl::StatusOr<GgufFile> in = GgufFile::Open(in_path);
  if (!in.ok()) return in.status();
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = QuantizedGguf(*in, mix);
  if (!w.ok()) return w.status();
  const std::string tmp = absl::StrFormat("%s.tmp.%d", out_path, ::getpid());
  absl::Status s = (*w)->WriteFile(tmp);
  if (s.ok() && std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    s = absl::PermissionDeniedError(absl::StrFormat(
        "cannot rename %s onto %s: %s", tmp, out_path, std::strerror(errno)));
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

}  // namespace kvserve
