// Helpers of the decode and serving benchmarks: the made model they run on,
// the bytes one decode step must read (their roofline), a scratch folder,
// a kvserve child process on free loopback ports, and percentiles.
#ifndef KVSERVE_BENCH_UTIL_SERVE_UTIL_H_
#define KVSERVE_BENCH_UTIL_SERVE_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/model/config.h"
#include "core/model/gguf_random_model.h"
#include "core/model/weights.h"
#include "core/util/omp_wait.h"

namespace kvserve::bench {

// The benchmarks' model: 16 query heads / 4 KV heads, dim 1024, SwiGLU
// 2816, 6 layers: 67.6M matrix parameters, 270 MB in f32 and 135 MB in bf16,
// far past the L3 cache, so a decode step is dominated by weight reads.
RandomModelOptions BenchModelOptions(int context_length);

// Writes the model's GGUF (f32 matrices) to `path`.
absl::Status WriteBenchModel(const RandomModelOptions& options,
                             const std::string& path);

// Bytes of the weights one decode token reads: every matrix and norm but
// the embedding table, of which it reads one row.
int64_t DecodeWeightBytes(const ModelWeights& weights);

// A fresh folder under $TMPDIR (or /tmp), removed with its files on
// destruction.
class ScratchDir {
 public:
  static absl::StatusOr<ScratchDir> Create(const std::string& prefix);
  ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// A running kvserve (binary `KVSERVE_BIN_DIR/kvserve` unless given) on
// 127.0.0.1 with kernel-chosen ports: Start() appends
// --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 and waits (bounded) for
// the ready line on stderr. Stop() sends SIGTERM and waits (bounded), then
// SIGKILL; the destructor stops it too, and the server dies with this
// process (PR_SET_PDEATHSIG). stderr lines are forwarded when `verbose`.
class KvserveProcess {
 public:
  static absl::StatusOr<std::unique_ptr<KvserveProcess>> Start(
      const std::vector<std::string>& flags,
      absl::Duration ready_timeout = absl::Seconds(60), bool verbose = false,
      std::string binary = "");
  ~KvserveProcess();
  KvserveProcess(const KvserveProcess&) = delete;
  KvserveProcess& operator=(const KvserveProcess&) = delete;

  std::string grpc_address() const;
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // SIGTERM, then SIGKILL after `grace`. Returns whether it exited with 0.
  bool Stop(absl::Duration grace = absl::Seconds(10));
  // What the server wrote to stderr so far.
  std::string stderr_text() const;

 private:
  KvserveProcess() = default;
  void ReadStderr();

  pid_t pid_ = -1;
  int stderr_fd_ = -1;
  bool verbose_ = false;
  bool exited_ = false;
  int wait_status_ = 0;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::thread reader_;
  mutable std::mutex mu_;
  std::string stderr_text_;  // guarded by mu_
};

// The q-quantile (0..1, nearest rank) of `values` (copied); 0 when empty.
double Quantile(std::vector<double> values, double q);
double Mean(const std::vector<double>& values);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_UTIL_SERVE_UTIL_H_
