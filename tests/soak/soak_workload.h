// The soak suite's workload: the prompts and session scripts whose greedy
// tokens are computed once on a quiet server, the server under test (which
// the controller kills and restarts underneath the clients), and the client
// threads that load it and judge every reply against the expected tokens.
//
// Judging: a reply is right only with exactly the quiet run's tokens (greedy
// decoding on a deterministic model; batching must not change them). A
// RESOURCE_EXHAUSTED is a refusal. Other codes are accepted only as the
// result of a fault the suite injected at that moment (its own cancel or
// deadline, a kill -9, a SIGTERM drain, a full disk); everything else fails.
#ifndef KVSERVE_TESTS_SOAK_SOAK_WORKLOAD_H_
#define KVSERVE_TESTS_SOAK_SOAK_WORKLOAD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "tests/soak/soak_util.h"

namespace kvserve::soak {

// A stateless greedy request and its tokens on a quiet server.
struct Case {
  std::string prompt;
  int32_t max_tokens = 0;
  std::vector<int32_t> expect;
};

// A conversation: a session created with `initial`, then one Generate per
// turn (the turn's text as prompt, `max_tokens[j]` tokens, greedy).
struct Script {
  std::string initial;
  std::vector<std::string> turns;
  std::vector<int32_t> max_tokens;
  // From the quiet run: history[0] after CreateSession, history[j + 1] after
  // turn j; replies[j] the tokens turn j generated.
  std::vector<std::vector<int32_t>> history;
  std::vector<std::vector<int32_t>> replies;
};

struct Expectations {
  std::vector<Case> short_cases;
  std::vector<Case> long_cases;  // prompts of 1000+ tokens (prefill faults)
  Case disconnect;               // the prompt kvctl streams before its kill
  std::vector<Script> scripts;
};

// Runs every case and script alone on `client` and records their tokens;
// checks that each session turn equals a stateless request of the session's
// whole history (a finding goes to `tally`).
absl::StatusOr<Expectations> Precompute(Client& client, Tally* tally);

// Injected faults whose calls are judged leniently while they last.
enum class Disruption { kNone, kDiskFull, kSigterm, kKill };

// The server the clients talk to. The controller swaps it on a restart;
// clients block in Get while there is none.
class Target {
 public:
  struct View {
    std::shared_ptr<Client> client;
    int64_t epoch = 0;  // increases with every Up
    std::string address;
  };

  void Up(std::shared_ptr<Client> client, std::string address);
  void Down();
  // The current server; nullopt when `stop` is set or none came up within
  // `timeout`.
  std::optional<View> Get(const std::atomic<bool>& stop,
                          absl::Duration timeout);

  // A fault from now until End (or `slack` after it).
  void Begin(Disruption d);
  void End(Disruption d, absl::Duration slack = absl::ZeroDuration());
  // The gravest fault that was active at some time in [start, end].
  Disruption Overlapping(absl::Time start, absl::Time end) const;
  // Whether server `epoch` is the first one up after a SIGTERM (so every
  // session's KV must be in a snapshot).
  bool RestartedGracefully(int64_t epoch) const;

 private:
  struct Window {
    Disruption what;
    absl::Time begin;
    absl::Time end;
  };
  mutable std::mutex mu_;
  std::shared_ptr<Client> client_;  // guarded by mu_; null while down
  std::string address_;             // guarded by mu_
  int64_t epoch_ = 0;               // guarded by mu_
  std::vector<Window> windows_;     // guarded by mu_
  bool graceful_pending_ = false;   // guarded by mu_
  int64_t graceful_epoch_ = -1;     // guarded by mu_
};

struct LoadOptions {
  int stateless_clients = 10;
  int session_clients = 6;
  bool faults = true;  // cancels, slow readers, prefill deadlines, kvctl kills
  std::string kvctl;   // path of kvctl (disconnects); empty: none
  uint64_t seed = 1;
  std::string session_dir;  // the server's, for diagnostics only
};

// Client threads, started by Start and stopped (joined) by Stop. The session
// clients delete their sessions when stopped.
class Load {
 public:
  Load(const Expectations* expect, Target* target, Tally* tally,
       LoadOptions options);
  ~Load();
  void Start();
  void Stop();
  // Calls finished since Start (any outcome).
  int64_t calls() const { return calls_.load(); }

 private:
  void StatelessClient(int index);
  void SessionClient(int index);
  void DisconnectClient(int index);

  const Expectations* const expect_;
  Target* const target_;
  Tally* const tally_;
  const LoadOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> calls_{0};
  std::vector<std::thread> threads_;
};

}  // namespace kvserve::soak

#endif  // KVSERVE_TESTS_SOAK_SOAK_WORKLOAD_H_
