// kvserve_soak: the load and fault suite. Runs the real kvserve on loopback
// at twice its configured capacity for --duration and injects faults:
// client cancels and slow readers, deadlines that expire during prefill,
// clients killed mid-stream (kvctl, kill -9), a full session directory (a
// tmpfs), kill -9 of the server and a restart, SIGTERM and a restart. Every
// reply is checked against the tokens of a quiet run, every session's
// history against the turns its client saw complete. Prints a summary
// table; exit status 0 only when nothing failed.
//
//   kvserve_soak [--duration=60s] [--max_running=4 --max_queued_requests=4]
//
// Timeline (fractions of --duration): warm-up 8%, then the baseline (RSS,
// KV blocks); main load with client faults 42%, then RSS and blocks are
// compared with the baseline; full disk 16% (filled a quarter in, freed
// three quarters in); kill -9, restart, 14%; SIGTERM, restart, 12%; then
// the blocks again and a final SIGTERM.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"
#include "tests/soak/soak_util.h"
#include "tests/soak/soak_workload.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

ABSL_FLAG(absl::Duration, duration, absl::Seconds(60),
          "length of the loaded part of the run (make soak: 10m)");
ABSL_FLAG(int32_t, max_running, 4, "the server's --max_running");
ABSL_FLAG(int32_t, max_queued_requests, 4,
          "the server's --max_queued_requests");
ABSL_FLAG(int64_t, kv_cache_bytes, 8 << 20,
          "the server's --kv_cache_bytes (small: spills and preemption)");
ABSL_FLAG(int32_t, threads, 1, "the server's --threads");
ABSL_FLAG(double, load_factor, 2.0,
          "concurrent clients per request the server admits "
          "(max_running + max_queued_requests)");
ABSL_FLAG(int64_t, rss_tolerance_bytes, 16 << 20,
          "how far above its post-warm-up baseline the server's RSS may be "
          "after the load");
ABSL_FLAG(bool, check_rss, true,
          "compare the server's RSS after the load with its baseline (off "
          "for sanitizer builds, whose allocators keep freed memory)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the clients' choices");
ABSL_FLAG(bool, client_faults, true,
          "cancels, slow readers, prefill deadlines and kvctl kills in the "
          "load (false: only to tell what a finding depends on)");

namespace kvserve::soak {
namespace {

using testing::HttpGet;
using testing::MetricSum;
using testing::ServerProcess;

// Set by the controller, read by the watchdog and the memory sampler.
std::atomic<pid_t> g_server_pid{-1};
std::string* g_tmpfs_path = new std::string();
std::mutex g_phase_mu;
std::string* g_phase = new std::string("start");

void SetPhase(const std::string& phase) {
  {
    std::lock_guard<std::mutex> lock(g_phase_mu);
    *g_phase = phase;
  }
  std::cerr << "soak: "
            << absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone())
            << " phase: " << phase << std::endl;
}

// Ends the run when it exceeds its budget, whatever is hanging.
void Watchdog(absl::Time deadline, const std::atomic<bool>* done) {
  while (!done->load()) {
    if (absl::Now() > deadline) {
      std::string phase;
      {
        std::lock_guard<std::mutex> lock(g_phase_mu);
        phase = *g_phase;
      }
      std::cerr << "soak: FAILED: over its time budget in phase \"" << phase
                << "\" (the server or a client hangs)" << std::endl;
      const pid_t pid = g_server_pid.load();
      if (pid > 0) kill(pid, SIGKILL);
      if (!g_tmpfs_path->empty()) umount2(g_tmpfs_path->c_str(), MNT_DETACH);
      _exit(1);
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

// The KV pool as the metrics show it.
struct Pool {
  double used = -1, cached = -1, free = -1, shared = -1;
  double used_bytes = -1, sessions = -1, in_flight = -1;
  double total() const { return used + cached + free; }
  std::string ToString() const {
    return absl::StrFormat(
        "blocks used=%.0f cached=%.0f free=%.0f shared=%.0f, "
        "kv_cache_used_bytes=%.0f, sessions=%.0f, requests_in_flight=%.0f",
        used, cached, free, shared, used_bytes, sessions, in_flight);
  }
};

absl::StatusOr<std::string> Scrape(const ServerProcess& server) {
  return HttpGet(server.metrics_port(), "/metrics", absl::Seconds(10));
}

absl::StatusOr<Pool> ReadPool(const ServerProcess& server) {
  absl::StatusOr<std::string> text = Scrape(server);
  if (!text.ok()) return text.status();
  auto v = [&](const char* name, std::vector<std::string> labels = {}) {
    return MetricSum(*text, name, labels).value_or(-1);
  };
  Pool p;
  p.used = v("kvserve_kv_cache_blocks", {"state=\"used\""});
  p.cached = v("kvserve_kv_cache_blocks", {"state=\"cached\""});
  p.free = v("kvserve_kv_cache_blocks", {"state=\"free\""});
  p.shared = v("kvserve_kv_cache_blocks", {"state=\"shared\""});
  p.used_bytes = v("kvserve_kv_cache_used_bytes");
  p.sessions = v("kvserve_sessions");
  p.in_flight = v("kvserve_requests_in_flight");
  return p;
}

struct Started {
  std::unique_ptr<ServerProcess> process;
  std::shared_ptr<Client> client;
};

class Soak {
 public:
  Soak() : target_(), tally_() {}

  int Run() {
    const absl::Duration d = absl::GetFlag(FLAGS_duration);
    const int capacity = absl::GetFlag(FLAGS_max_running) +
                         absl::GetFlag(FLAGS_max_queued_requests);
    const int clients = std::max(
        2, static_cast<int>(absl::GetFlag(FLAGS_load_factor) * capacity));
    load_options_.session_clients = std::max(1, clients * 3 / 8);
    load_options_.stateless_clients = clients - load_options_.session_clients;
    load_options_.kvctl = testing::BinDir() + "/kvctl";
    load_options_.seed = absl::GetFlag(FLAGS_seed);
    load_options_.faults = absl::GetFlag(FLAGS_client_faults);
    setup_ = absl::StrFormat(
        "%s of load at %.0fx capacity: %d clients (%d stateless, %d session, "
        "+1 kvctl disconnector) against --max_running=%d "
        "--max_queued_requests=%d (capacity %d), --kv_cache_bytes=%d, "
        "--threads=%d, built-in model, greedy",
        absl::FormatDuration(d), absl::GetFlag(FLAGS_load_factor), clients,
        load_options_.stateless_clients, load_options_.session_clients,
        absl::GetFlag(FLAGS_max_running),
        absl::GetFlag(FLAGS_max_queued_requests), capacity,
        absl::GetFlag(FLAGS_kv_cache_bytes), absl::GetFlag(FLAGS_threads));
    std::cerr << "soak: " << setup_ << std::endl;

    // The session directory: a tmpfs (for the full-disk fault) if allowed.
    absl::StatusOr<std::unique_ptr<Tmpfs>> tmpfs = Tmpfs::Mount(32 << 20);
    std::string session_dir;
    if (tmpfs.ok()) {
      tmpfs_ = *std::move(tmpfs);
      *g_tmpfs_path = tmpfs_->path();
      session_dir = tmpfs_->path() + "/sessions";
    } else {
      disk_skip_ = tmpfs.status().ToString();
      session_dir = scratch_.File("sessions");
    }
    load_options_.session_dir = session_dir;

    SetPhase("start and quiet run");
    if (!StartServer(session_dir)) return Report();
    absl::StatusOr<Expectations> expect = Precompute(*server_.client, &tally_);
    if (!expect.ok()) {
      tally_.CheckFailed(
          absl::StrCat("quiet run: ", expect.status().ToString()));
      return Report();
    }
    expect_ = *std::move(expect);
    rss_start_ = Rss();

    SetPhase("warm-up");
    RunLoadFor(std::max(absl::Seconds(4), d * 0.08));
    const std::optional<Pool> baseline = Quiesce("warm-up");
    rss_baseline_ = Rss();

    SetPhase(
        "main load: cancels, slow readers, prefill deadlines, kvctl kills");
    RunLoadFor(d * 0.42);
    const std::optional<Pool> after = Quiesce("main load");
    rss_after_ = Rss();
    CheckBaseline(baseline, after);

    Load load(&expect_, &target_, &tally_, load_options_);
    load.Start();
    DiskFull(d * 0.16);
    SetPhase("kill -9 under load, restart");
    Restart(session_dir, SIGKILL);
    absl::SleepFor(d * 0.14);
    SetPhase("SIGTERM under load, restart");
    Restart(session_dir, SIGTERM);
    absl::SleepFor(d * 0.12);
    SetPhase("stop the load");
    load.Stop();
    const std::optional<Pool> end = Quiesce("the end");
    if (end.has_value() && baseline.has_value()) {
      CheckPool("after the restarts", *baseline, *end);
    }
    SetPhase("final SIGTERM (idle)");
    Stop(SIGTERM, "final SIGTERM");
    return Report();
  }

 private:
  bool StartServer(const std::string& session_dir) {
    ServerProcess::Options options;
    options.extra_flags = {
        absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
        absl::StrCat("--max_running=", absl::GetFlag(FLAGS_max_running)),
        absl::StrCat("--max_queued_requests=",
                     absl::GetFlag(FLAGS_max_queued_requests)),
        absl::StrCat("--kv_cache_bytes=", absl::GetFlag(FLAGS_kv_cache_bytes)),
        "--kv_block_tokens=16",
        "--session_dir=" + session_dir,
        "--shutdown_grace_seconds=8",
    };
    options.env = {"OMP_WAIT_POLICY=passive"};
    absl::StatusOr<std::unique_ptr<ServerProcess>> process =
        ServerProcess::Start(options);
    if (!process.ok()) {
      tally_.CheckFailed(absl::StrCat("start: ", process.status().ToString()));
      return false;
    }
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect((*process)->grpc_address());
    if (!client.ok()) {
      tally_.CheckFailed(absl::StrCat("connect: ", client.status().ToString()));
      return false;
    }
    server_.process = *std::move(process);
    server_.client = *std::move(client);
    g_server_pid.store(server_.process->pid());
    ++servers_started_;
    target_.Up(server_.client, server_.process->grpc_address());
    return true;
  }

  int64_t Rss() {
    std::optional<Memory> m = ReadMemory(server_.process->pid());
    return m.has_value() ? m->rss : -1;
  }

  // Samples the server's peak RSS (VmHWM) until stopped.
  // Samples the server's peak RSS (VmHWM) until stopped, and logs its RSS
  // every 10 s (a leak shows as a trend across the run).
  void SampleMemory() {
    absl::Time next_log = absl::Now();
    while (!done_.load()) {
      const pid_t pid = g_server_pid.load();
      std::optional<Memory> m;
      if (pid > 0) m = ReadMemory(pid);
      if (m.has_value()) {
        peak_rss_.store(std::max(peak_rss_.load(), m->hwm));
        if (absl::Now() >= next_log) {
          std::cerr << "soak: server " << pid << " RSS " << Mib(m->rss)
                    << ", peak " << Mib(m->hwm) << std::endl;
          next_log = absl::Now() + absl::Seconds(5);
        }
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  void RunLoadFor(absl::Duration d) {
    Load load(&expect_, &target_, &tally_, load_options_);
    load.Start();
    absl::SleepFor(d);
    load.Stop();
  }

  // After a load stopped: no request in flight, every session deleted (the
  // clients delete theirs; leftovers of calls cut by a fault are swept and
  // counted), then the pool as the metrics show it.
  std::optional<Pool> Quiesce(const std::string& when) {
    SetPhase("quiesce after " + when);
    const ServerProcess& server = *server_.process;
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    absl::StatusOr<Pool> pool = ReadPool(server);
    while (absl::Now() < deadline && (!pool.ok() || pool->in_flight != 0)) {
      absl::SleepFor(absl::Milliseconds(50));
      pool = ReadPool(server);
    }
    if (!pool.ok() || pool->in_flight != 0) {
      tally_.CheckFailed(absl::StrCat(
          "requests still in flight 30 s after the load stopped (", when,
          "): ", pool.ok() ? pool->ToString() : pool.status().ToString()));
    }
    int64_t swept = 0;
    for (int round = 0; round < 20; ++round) {
      v1::ListSessionsRequest list;
      list.set_page_size(1000);
      absl::StatusOr<v1::ListSessionsResponse> sessions =
          server_.client->ListSessions(list);
      if (!sessions.ok()) {
        tally_.CheckFailed(
            absl::StrCat("ListSessions: ", sessions.status().ToString()));
        break;
      }
      if (sessions->sessions_size() == 0) break;
      for (const v1::Session& s : sessions->sessions()) {
        v1::DeleteSessionRequest del;
        del.set_session_id(s.session_id());
        if (server_.client->DeleteSession(del).ok()) ++swept;
      }
    }
    if (swept > 0) {
      leftovers_ += swept;
      std::cerr << "soak: swept " << swept << " leftover session(s) after "
                << when << std::endl;
    }
    // The engine publishes its gauges shortly after a change.
    deadline = absl::Now() + absl::Seconds(5);
    pool = ReadPool(server);
    while (absl::Now() < deadline &&
           (!pool.ok() || pool->used != 0 || pool->sessions != 0)) {
      absl::SleepFor(absl::Milliseconds(50));
      pool = ReadPool(server);
    }
    if (!pool.ok()) {
      tally_.CheckFailed(
          absl::StrCat("metrics after ", when, ": ", pool.status().ToString()));
      return std::nullopt;
    }
    std::cerr << "soak: pool after " << when << ": " << pool->ToString()
              << std::endl;
    return *pool;
  }

  void CheckPool(const std::string& when, const Pool& baseline,
                 const Pool& now) {
    std::string bad;
    if (now.used != 0) absl::StrAppend(&bad, " used blocks ", now.used, ";");
    if (now.shared != 0) absl::StrAppend(&bad, " shared ", now.shared, ";");
    if (now.total() != baseline.total()) {
      absl::StrAppend(&bad, " used+cached+free ", now.total(),
                      " != ", baseline.total(), ";");
    }
    if (now.used_bytes != baseline.used_bytes) {
      absl::StrAppend(&bad, " kv_cache_used_bytes ", now.used_bytes,
                      " != baseline ", baseline.used_bytes, ";");
    }
    if (now.sessions != 0)
      absl::StrAppend(&bad, " sessions ", now.sessions, ";");
    if (now.in_flight != 0) {
      absl::StrAppend(&bad, " in flight ", now.in_flight, ";");
    }
    checks_.push_back({absl::StrCat("pool accounting ", when),
                       bad.empty()
                           ? "PASS (" + now.ToString() + ")"
                           : "FAIL:" + bad + " (" + now.ToString() + ")"});
    if (!bad.empty()) tally_.CheckFailed("pool accounting " + when + ":" + bad);
  }

  void CheckBaseline(const std::optional<Pool>& baseline,
                     const std::optional<Pool>& after) {
    if (baseline.has_value() && after.has_value()) {
      CheckPool("after the main load", *baseline, *after);
    }
    const int64_t tolerance = absl::GetFlag(FLAGS_rss_tolerance_bytes);
    const bool ok = rss_after_ >= 0 && rss_baseline_ >= 0 &&
                    rss_after_ <= rss_baseline_ + tolerance;
    const std::string detail =
        absl::StrCat("start ", Mib(rss_start_), ", after warm-up ",
                     Mib(rss_baseline_), ", after the main load ",
                     Mib(rss_after_), ", tolerance ", Mib(tolerance));
    if (!absl::GetFlag(FLAGS_check_rss)) {
      checks_.push_back({"RSS back to baseline",
                         "SKIPPED: --check_rss=false (" + detail + ")"});
      return;
    }
    checks_.push_back(
        {"RSS back to baseline", (ok ? "PASS (" : "FAIL (") + detail + ")"});
    if (!ok) tally_.CheckFailed("RSS not back to baseline: " + detail);
  }

  int64_t FaultsMatching(const Tally::Snapshot& s, absl::string_view what) {
    int64_t n = 0;
    for (const auto& [key, count] : s.faults) {
      if (absl::StrContains(key, what)) n += count;
    }
    return n;
  }

  void DiskFull(absl::Duration d) {
    if (tmpfs_ == nullptr) {
      SetPhase("full disk: SKIPPED");
      checks_.push_back({"full disk", "SKIPPED: " + disk_skip_});
      absl::SleepFor(d);
      return;
    }
    SetPhase("load before the full disk");
    // A session whose log grows by whole pages of the tmpfs, so that its
    // turns need new space while the disk is full.
    v1::CreateSessionRequest create;
    create.mutable_initial()->set_text(std::string(300, 'p'));
    // A prefilled create waits in the request queue like any request: under
    // 2x load it may be refused for a while.
    absl::StatusOr<v1::Session> created = server_.client->CreateSession(create);
    for (int i = 0; i < 200 && absl::IsResourceExhausted(created.status());
         ++i) {
      absl::SleepFor(absl::Milliseconds(20));
      created = server_.client->CreateSession(create);
    }
    if (!created.ok()) {
      tally_.CheckFailed("full disk probe: CreateSession: " +
                         created.status().ToString());
    }
    const std::string probe_id = created.ok() ? created->session_id() : "";
    absl::SleepFor(d / 4);
    SetPhase("full disk");
    const Tally::Snapshot before = tally_.Take();
    target_.Begin(Disruption::kDiskFull);
    // Deleted sessions give pages back: keep taking them while full.
    std::atomic<bool> full{true};
    std::atomic<int64_t> filled{0};
    std::thread filler([&] {
      while (full.load()) {
        filled.fetch_add(tmpfs_->Fill());
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
    const absl::Time full_until = absl::Now() + d / 2;
    const std::string probe = DiskProbe(probe_id, full_until);
    absl::SleepFor(full_until - absl::Now());
    full.store(false);
    filler.join();
    const Tally::Snapshot during = tally_.Take();
    tmpfs_->Unfill();
    // Writes queued while full may fail a little after the space is back.
    target_.End(Disruption::kDiskFull, absl::Seconds(2));
    SetPhase("disk freed");
    const std::string recovered = ProbeTurn(probe_id, nullptr);
    if (!probe_id.empty()) {
      v1::DeleteSessionRequest del;
      del.set_session_id(probe_id);
      absl::Status deleted = server_.client->DeleteSession(del);
      if (!deleted.ok()) {
        tally_.CheckFailed("full disk probe: DeleteSession: " +
                           deleted.ToString());
      }
    }
    absl::SleepFor(d / 4);
    const bool alive = server_.process->running();
    const int64_t refused_writes = FaultsMatching(during, "(disk full)") -
                                   FaultsMatching(before, "(disk full)");
    const int64_t ok_calls = during.ok - before.ok;
    const std::string detail = absl::StrCat(
        "filled ", Mib(filled.load()), "; probe: ", probe,
        "; after freeing: ", recovered.empty() ? "turn ok" : recovered, "; ",
        refused_writes, " client writes answered UNAVAILABLE, ", ok_calls,
        " calls ok while full", alive ? "" : "; the server died");
    const bool pass = alive && probe == "UNAVAILABLE, turn not applied" &&
                      recovered.empty() && ok_calls > 0;
    checks_.push_back(
        {"full disk", (pass ? "PASS (" : "FAIL (") + detail + ")"});
    if (!pass) tally_.CheckFailed("full disk: " + detail);
  }

  // One greedy turn of the probe session, checked against its history:
  // "" when it completed and the history grew by exactly it, "UNAVAILABLE,
  // turn not applied" when refused with the history unchanged, otherwise
  // what went wrong. `unavailable` (may be null) tells which of the first
  // two.
  std::string ProbeTurn(const std::string& id, bool* unavailable) {
    if (unavailable != nullptr) *unavailable = false;
    if (id.empty()) return "no probe session";
    Client& client = *server_.client;
    v1::GetSessionRequest get;
    get.set_session_id(id);
    get.set_include_tokens(true);
    absl::StatusOr<v1::Session> before = client.GetSession(get);
    if (!before.ok()) return "GetSession: " + before.status().ToString();
    v1::GenerateRequest r;
    r.set_session_id(id);
    r.set_max_tokens(40);
    r.set_ignore_eos(true);
    r.mutable_sampling()->set_temperature(0);
    r.mutable_prompt()->set_text(" and a probe turn");
    std::vector<int32_t> ids;
    CallOptions options;
    options.timeout = absl::Seconds(30);
    absl::StatusOr<v1::GenerateFinal> done;
    // At twice the capacity it may have to queue like everyone else.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    do {
      ids.clear();
      done = client.Generate(
          r,
          [&](const v1::GeneratedToken& t) {
            ids.push_back(t.token_id());
            return true;
          },
          options);
      if (!absl::IsResourceExhausted(done.status())) break;
      absl::SleepFor(absl::Milliseconds(10));
    } while (absl::Now() < deadline);
    absl::StatusOr<v1::Session> after = client.GetSession(get);
    if (!after.ok()) return "GetSession: " + after.status().ToString();
    const std::vector<int32_t> h0(before->token_ids().begin(),
                                  before->token_ids().end());
    const std::vector<int32_t> h1(after->token_ids().begin(),
                                  after->token_ids().end());
    if (absl::IsUnavailable(done.status())) {
      if (h1 != h0) {
        return absl::StrCat("UNAVAILABLE but the history went from ", h0.size(),
                            " to ", h1.size(), " tokens");
      }
      if (unavailable != nullptr) *unavailable = true;
      return "UNAVAILABLE, turn not applied";
    }
    if (!done.ok()) return "Generate: " + done.status().ToString();
    const bool extends =
        h1.size() > h0.size() + ids.size() &&
        std::equal(h0.begin(), h0.end(), h1.begin()) &&
        std::equal(ids.begin(), ids.end(),
                   h1.end() - static_cast<ptrdiff_t>(ids.size()));
    if (!extends || ids.size() != 40) {
      return absl::StrCat("turn of ", ids.size(), " tokens: history ",
                          h0.size(), " -> ", h1.size(), " tokens");
    }
    return "";
  }

  // Probe turns until one is refused as not durable (or `until`).
  std::string DiskProbe(const std::string& id, absl::Time until) {
    int turns = 0;
    while (absl::Now() < until) {
      bool unavailable = false;
      const std::string result = ProbeTurn(id, &unavailable);
      ++turns;
      if (unavailable) return result;
      if (!result.empty()) return absl::StrCat("turn ", turns, ": ", result);
    }
    return absl::StrCat(turns, " turns, none refused while the disk was full");
  }

  // Stops the server with `signal` while the clients run, and starts it
  // again on the same session directory.
  void Restart(const std::string& session_dir, int signal) {
    const bool graceful = signal == SIGTERM;
    const Disruption d = graceful ? Disruption::kSigterm : Disruption::kKill;
    if (absl::StatusOr<std::string> m = Scrape(*server_.process); m.ok()) {
      last_metrics_ = *m;
    }
    target_.Begin(d);
    if (!graceful) target_.Down();
    Stop(signal, graceful ? "SIGTERM under load" : "kill -9 under load");
    target_.Down();
    if (!StartServer(session_dir)) return;
    target_.End(d);
  }

  void Stop(int signal, const std::string& what) {
    const absl::Time start = absl::Now();
    absl::Status sent = server_.process->SendSignal(signal);
    const absl::Duration bound =
        signal == SIGKILL ? absl::Seconds(10) : absl::Seconds(8 + 20);
    absl::StatusOr<testing::ExitStatus> exit =
        sent.ok() ? server_.process->WaitExit(bound) : sent;
    const absl::Duration took = absl::Now() - start;
    std::string result;
    bool pass;
    if (!exit.ok()) {
      pass = false;
      result = absl::StrCat("FAIL: ", exit.status().ToString());
      server_.process->SendSignal(SIGKILL).IgnoreError();
      (void)server_.process->WaitExit(absl::Seconds(10));
    } else if (signal == SIGKILL) {
      pass = exit->signal == SIGKILL;
      result =
          absl::StrCat(pass ? "PASS" : "FAIL", " (", exit->ToString(), ")");
    } else {
      pass = exit->success();
      result = absl::StrCat(pass ? "PASS" : "FAIL", " (", exit->ToString(),
                            " after ", absl::FormatDuration(took), ")");
    }
    checks_.push_back({what, result});
    if (!pass) tally_.CheckFailed(what + ": " + result);
  }

  int Report() {
    done_.store(true);
    const Tally::Snapshot s = tally_.Take();
    auto row = [](const std::string& a, const std::string& b) {
      std::cout << "| " << a << " | " << b << " |\n";
    };
    std::cout << "\nkvserve soak: " << setup_ << "\n\n";
    row("outcome", "count");
    row("---", "---");
    row("ok (exact greedy tokens)", absl::StrCat(s.ok));
    row("refused (RESOURCE_EXHAUSTED)", absl::StrCat(s.refused));
    row("ended by an injected fault, with the expected code",
        absl::StrCat(s.fault));
    row("failed", absl::StrCat(s.failed));
    row("sessions lost", absl::StrCat(s.sessions_lost));
    row("turns lost", absl::StrCat(s.turns_lost));
    row("sessions corrupt", absl::StrCat(s.sessions_corrupt));
    row("peak RSS (VmHWM, any server)", Mib(peak_rss_.load()));
    row("RSS start / after warm-up / after main load",
        absl::StrCat(Mib(rss_start_), " / ", Mib(rss_baseline_), " / ",
                     Mib(rss_after_)));
    row("TTFT p50 / p99 (client side)",
        absl::StrFormat("%.1f ms / %.1f ms (%d samples)", s.ttft_p50_ms,
                        s.ttft_p99_ms, s.ttft_samples));
    row("ITL p50 / p99 (client side)",
        absl::StrFormat("%.2f ms / %.2f ms (%d samples)", s.itl_p50_ms,
                        s.itl_p99_ms, s.itl_samples));
    row("servers started", absl::StrCat(servers_started_));
    row("leftover sessions swept", absl::StrCat(leftovers_));
    std::cout << "\n";
    row("check", "result");
    row("---", "---");
    for (const auto& [name, result] : checks_) row(name, result);
    const bool refusals = s.refused > 0;
    row("refusals at 2x capacity", refusals ? "PASS" : "FAIL: none");
    const int64_t deadlines = FaultsMatching(s, "DEADLINE_EXCEEDED");
    row("deadlines expiring in prefill",
        deadlines > 0 ? absl::StrCat("PASS (", deadlines, ")")
                      : "FAIL: none expired");
    const int64_t drops = FaultsMatching(s, "connection dropped");
    row("clients killed mid-stream (kvctl)",
        drops > 0 ? absl::StrCat("PASS (", drops, ")") : "FAIL: none");
    std::cout << "\nby operation (ok/refused/fault/failed):\n";
    for (const auto& entry : s.by_kind) {
      const auto& counts = entry.second;  // (a lambda cannot capture a
                                          // structured binding in C++17)
      auto get = [&](const char* k) {
        auto it = counts.find(k);
        return it == counts.end() ? int64_t{0} : it->second;
      };
      std::cout << absl::StrFormat("  %-30s %6d %6d %6d %6d\n", entry.first,
                                   get("ok"), get("refused"), get("fault"),
                                   get("failed"));
    }
    std::cout << "faults by how they ended:\n";
    for (const auto& [key, count] : s.faults) {
      std::cout << absl::StrFormat("  %-50s %6d\n", key, count);
    }
    if (!last_metrics_.empty()) {
      auto v = [&](const char* name) {
        return MetricSum(last_metrics_, name).value_or(-1);
      };
      std::cout << absl::StrFormat(
          "server counters before the last restart: rejected %.0f, "
          "preemptions %.0f, evictions %.0f\n",
          v("kvserve_requests_rejected_total"), v("kvserve_preemptions_total"),
          v("kvserve_session_evictions_total"));
    }
    if (!s.messages.empty()) {
      std::cout << "\nfailures:\n";
      for (const std::string& m : s.messages) std::cout << "  " << m << "\n";
    }
    const bool pass = s.failed == 0 && s.sessions_lost == 0 &&
                      s.turns_lost == 0 && s.sessions_corrupt == 0 &&
                      s.checks_failed == 0 && refusals && deadlines > 0 &&
                      drops > 0;
    std::cout << "\nsoak: " << (pass ? "PASS" : "FAIL") << std::endl;
    return pass ? 0 : 1;
  }

 public:
  std::atomic<bool> done_{false};
  void StartSampler() {
    sampler_ = std::thread([this] { SampleMemory(); });
  }
  ~Soak() {
    done_.store(true);
    if (sampler_.joinable()) sampler_.join();
    target_.Down();
  }

 private:
  Target target_;
  Tally tally_;
  Expectations expect_;
  LoadOptions load_options_;
  std::string setup_;
  testing::ScratchDir scratch_;
  std::unique_ptr<Tmpfs> tmpfs_;
  std::string disk_skip_;
  Started server_;
  int servers_started_ = 0;
  int64_t leftovers_ = 0;
  int64_t rss_start_ = -1, rss_baseline_ = -1, rss_after_ = -1;
  std::atomic<int64_t> peak_rss_{0};
  std::vector<std::pair<std::string, std::string>> checks_;
  std::string last_metrics_;
  std::thread sampler_;
};

}  // namespace
}  // namespace kvserve::soak

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  const absl::Duration budget =
      absl::GetFlag(FLAGS_duration) * 1.1 + absl::Seconds(180);
  std::atomic<bool> watchdog_done{false};
  std::thread watchdog(kvserve::soak::Watchdog, absl::Now() + budget,
                       &watchdog_done);
  int code;
  {
    kvserve::soak::Soak soak;
    soak.StartSampler();
    code = soak.Run();
  }
  watchdog_done.store(true);
  watchdog.join();
  return code;
}
