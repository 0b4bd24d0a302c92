// Converting a GGUF model to other tensor types (`kvmodel quantize`), as
// llama.cpp's quantize does for the types kvserve knows:
//
// - every metadata key is copied in file order, except general.file_type,
//   which becomes the mix's (added at the end when the input has none), and
//   general.alignment, which the writer writes first (with the same value);
// - every weight matrix (a tensor named "*.weight" with 2 dimensions, not
//   counting trailing 1s, that is not a "*_norm.weight") gets the type
//   TypeMix::TypeFor(name, <arch>.block_count, row length) chooses: each row
//   is dequantized from its stored type and quantized with the new type's
//   reference quantizer. A matrix already stored in that type is copied
//   byte for byte (no second rounding);
// - every other tensor (norms, rope_freqs, ...) is copied as it is.
//
// Errors name the file and the key or tensor (and its type) that stops the
// conversion; nothing is written then. Output is written to a temporary file
// beside `out` and renamed onto it, so a failed run never leaves a truncated
// model, and `in` == `out` replaces the file safely.
//
// Thread-safety: the functions are reentrant; the row loops run on OpenMP
// threads.
#ifndef KVSERVE_CORE_MODEL_GGUF_QUANTIZE_H_
#define KVSERVE_CORE_MODEL_GGUF_QUANTIZE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/gguf.h"
#include "core/model/gguf_writer.h"
#include "core/model/type_mix.h"

namespace kvserve {

// A writer for the converted copy of `in`. Every check is done here; the
// tensor data is produced while the writer writes, read from in's mapping
// (which the writer keeps alive).
absl::StatusOr<std::unique_ptr<GgufWriter>> QuantizedGguf(const GgufFile& in,
                                                          const TypeMix& mix);

// Reads the GGUF at `in_path` and writes its converted copy to `out_path`.
absl::Status QuantizeGguf(const std::string& in_path,
                          const std::string& out_path, const TypeMix& mix);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_QUANTIZE_H_
