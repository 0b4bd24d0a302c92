#include "tests/soak/soak_workload.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace kvserve::soak {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(60);
constexpr absl::Duration kNoServerTimeout = absl::Seconds(90);

v1::GenerateRequest Greedy(int32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  r.set_ignore_eos(true);
  return r;
}

// Everything one Generate showed its client.
struct Streamed {
  absl::Status status;
  std::vector<int32_t> ids;
  absl::Time start;
  absl::Time end;
  std::optional<absl::Duration> ttft;
  std::vector<absl::Duration> gaps;
};

// `cancel_after` > 0: the callback cancels once it has that many tokens.
Streamed Stream(Client& client, const v1::GenerateRequest& request,
                absl::Duration timeout, int cancel_after = 0,
                absl::Duration per_token = absl::ZeroDuration()) {
  Streamed s;
  s.start = absl::Now();
  absl::Time last = s.start;
  CallOptions options;
  options.timeout = timeout;
  absl::StatusOr<v1::GenerateFinal> final_message = client.Generate(
      request,
      [&](const v1::GeneratedToken& token) {
        const absl::Time now = absl::Now();
        if (s.ids.empty()) {
          s.ttft = now - s.start;
        } else {
          s.gaps.push_back(now - last);
        }
        last = now;
        s.ids.push_back(token.token_id());
        if (per_token > absl::ZeroDuration()) absl::SleepFor(per_token);
        last = absl::Now();  // a slow reader's own sleep is not latency
        return cancel_after <= 0 ||
               static_cast<int>(s.ids.size()) < cancel_after;
      },
      options);
  s.end = absl::Now();
  s.status = final_message.status();
  return s;
}

std::string Ids(const std::vector<int32_t>& v, size_t max = 12) {
  std::vector<int32_t> head(
      v.begin(), v.begin() + static_cast<ptrdiff_t>(std::min(max, v.size())));
  return absl::StrCat("[", absl::StrJoin(head, ","),
                      v.size() > max ? ",..." : "", "] (", v.size(), ")");
}

bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

const char* DisruptionName(Disruption d) {
  switch (d) {
    case Disruption::kNone:
      return "none";
    case Disruption::kDiskFull:
      return "disk full";
    case Disruption::kSigterm:
      return "SIGTERM";
    case Disruption::kKill:
      return "kill -9";
  }
  return "?";
}

// How a non-OK call is judged: refused, an expected fault (with `detail`),
// or failed. `own_fault` is the code the call's own fault produces
// (CANCELLED for a client cancel, DEADLINE_EXCEEDED for a deadline).
// `durable_write`: the call makes a session turn durable (turn, create).
// `streamed`: tokens the call received before it ended.
Outcome Judge(const absl::Status& status, absl::StatusCode own_fault,
              Disruption d, bool durable_write, size_t streamed,
              std::string* detail) {
  const absl::StatusCode code = status.code();
  *detail = absl::StatusCodeToString(code);
  if (code == absl::StatusCode::kResourceExhausted) return Outcome::kRefused;
  if (own_fault != absl::StatusCode::kOk && code == own_fault) {
    return Outcome::kFault;
  }
  switch (d) {
    case Disruption::kKill:
      *detail = absl::StrCat(*detail, " (kill -9)");
      return Outcome::kFault;
    case Disruption::kSigterm:
      // Draining refuses new calls; calls already streaming must finish
      // (their replies are far shorter than the grace period). A call
      // that reaches gRPC just as the server shuts down is cancelled by
      // gRPC before any handler of ours sees it: CANCELLED with nothing
      // streamed (seen about once in four 60 s runs, with the drain over
      // in 60 ms, far inside its 8 s grace).
      *detail = absl::StrCat(*detail, " (SIGTERM)");
      return (code == absl::StatusCode::kUnavailable ||
              code == absl::StatusCode::kCancelled) &&
                     streamed == 0
                 ? Outcome::kFault
                 : Outcome::kFailed;
    case Disruption::kDiskFull:
      *detail = absl::StrCat(*detail, " (disk full)");
      return durable_write && code == absl::StatusCode::kUnavailable
                 ? Outcome::kFault
                 : Outcome::kFailed;
    case Disruption::kNone:
      break;
  }
  return Outcome::kFailed;
}

// The prompts. Byte-level vocabulary: about one token per character.
std::vector<Case> ShortCases() {
  const char* prompts[] = {
      "Once upon a time",
      "The quick brown fox jumps over the lazy dog",
      "In a hole in the ground there lived",
      "Call me Ishmael. Some years ago",
      "It was the best of times, it was the worst of times",
      "A",
      "0123456789",
      "kvserve keeps each conversation's KV cache on the server",
      "Sphinx of black quartz, judge my vow",
      "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do",
      "\xc3\xa9t\xc3\xa9 caf\xc3\xa9 na\xc3\xafve",
      "Q: what is two plus two? A:",
  };
  const int32_t lengths[] = {8, 16, 24, 32, 48, 12};
  std::vector<Case> out;
  int i = 0;
  for (const char* p : prompts) {
    out.push_back(Case{p, lengths[i++ % 6], {}});
  }
  return out;
}

// Many distinct long prompts, more tokens than the pool holds, so that most
// prefills really run instead of adopting cached blocks.
std::vector<Case> LongCases() {
  std::vector<Case> out;
  for (int i = 0; i < 12; ++i) {
    const int n = 1000 + 60 * i;
    std::string text = absl::StrCat("Document ", i, ". ");
    for (int k = 0; static_cast<int>(text.size()) < n; ++k) {
      absl::StrAppend(&text, "line ", k * (i + 3), " of document ", i, " has ",
                      n, " characters; ");
    }
    text.resize(static_cast<size_t>(n));
    out.push_back(Case{text, 4, {}});
  }
  return out;
}

std::vector<Script> Scripts() {
  std::vector<Script> out;
  for (int i = 0; i < 8; ++i) {
    Script s;
    s.initial = absl::StrCat("Session ", i, ". ");
    for (int k = 0; k <= i % 4; ++k) {
      absl::StrAppend(&s.initial,
                      "The assistant answers briefly and remembers facts. ");
    }
    for (int j = 0; j < 5; ++j) {
      s.turns.push_back(absl::StrCat(" User ", i, " turn ", j,
                                     ": tell me more about item ", i * 7 + j,
                                     "."));
      s.max_tokens.push_back(6 + (i * 5 + j * 3) % 19);
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> QuietGenerate(
    Client& client, const v1::GenerateRequest& r) {
  Streamed s = Stream(client, r, kCallTimeout);
  if (!s.status.ok()) return s.status;
  return s.ids;
}

absl::StatusOr<std::vector<int32_t>> SessionTokens(Client& client,
                                                   const std::string& id) {
  v1::GetSessionRequest get;
  get.set_session_id(id);
  get.set_include_tokens(true);
  absl::StatusOr<v1::Session> s = client.GetSession(get);
  if (!s.ok()) return s.status();
  return std::vector<int32_t>(s->token_ids().begin(), s->token_ids().end());
}

}  // namespace

absl::StatusOr<Expectations> Precompute(Client& client, Tally* tally) {
  Expectations e;
  e.short_cases = ShortCases();
  e.long_cases = LongCases();
  e.disconnect = Case{"A story that goes on and on", 16, {}};
  e.scripts = Scripts();
  std::vector<Case*> all;
  for (Case& c : e.short_cases) all.push_back(&c);
  for (Case& c : e.long_cases) all.push_back(&c);
  all.push_back(&e.disconnect);
  for (Case* c : all) {
    v1::GenerateRequest r = Greedy(c->max_tokens);
    r.mutable_prompt()->set_text(c->prompt);
    absl::StatusOr<std::vector<int32_t>> ids = QuietGenerate(client, r);
    if (!ids.ok()) return ids.status();
    if (static_cast<int32_t>(ids->size()) != c->max_tokens) {
      return absl::InternalError(
          absl::StrCat("quiet run of \"", c->prompt.substr(0, 40), "\" gave ",
                       ids->size(), " tokens, not ", c->max_tokens));
    }
    c->expect = *std::move(ids);
    // Run twice: a quiet server is deterministic, or nothing below holds.
    absl::StatusOr<std::vector<int32_t>> again = QuietGenerate(client, r);
    if (!again.ok()) return again.status();
    if (*again != c->expect) {
      return absl::InternalError(
          absl::StrCat("two quiet runs of \"", c->prompt.substr(0, 40),
                       "\" differ: ", Ids(c->expect), " vs ", Ids(*again)));
    }
  }
  for (size_t i = 0; i < e.scripts.size(); ++i) {
    Script& s = e.scripts[i];
    v1::CreateSessionRequest create;
    create.mutable_initial()->set_text(s.initial);
    absl::StatusOr<v1::Session> session = client.CreateSession(create);
    if (!session.ok()) return session.status();
    const std::string id = session->session_id();
    absl::StatusOr<std::vector<int32_t>> h = SessionTokens(client, id);
    if (!h.ok()) return h.status();
    s.history.push_back(*h);
    for (size_t j = 0; j < s.turns.size(); ++j) {
      v1::GenerateRequest r = Greedy(s.max_tokens[j]);
      r.set_session_id(id);
      r.mutable_prompt()->set_text(s.turns[j]);
      absl::StatusOr<std::vector<int32_t>> reply = QuietGenerate(client, r);
      if (!reply.ok()) return reply.status();
      h = SessionTokens(client, id);
      if (!h.ok()) return h.status();
      if (h->size() < reply->size() ||
          !std::equal(reply->begin(), reply->end(),
                      h->end() - static_cast<ptrdiff_t>(reply->size())) ||
          !IsPrefix(s.history.back(), *h)) {
        return absl::InternalError(
            absl::StrCat("script ", i, " turn ", j, ": history ", Ids(*h),
                         " does not extend ", Ids(s.history.back()),
                         " by the reply ", Ids(*reply)));
      }
      // Stateless replay: the whole history up to the reply as tokens.
      v1::GenerateRequest replay = Greedy(s.max_tokens[j]);
      replay.mutable_prompt()->mutable_tokens()->mutable_ids()->Assign(
          h->begin(), h->end() - static_cast<ptrdiff_t>(reply->size()));
      absl::StatusOr<std::vector<int32_t>> stateless =
          QuietGenerate(client, replay);
      if (!stateless.ok()) return stateless.status();
      if (*stateless != *reply) {
        tally->Fail("replay",
                    absl::StrCat("script ", i, " turn ", j, ": session reply ",
                                 Ids(*reply), " != stateless replay ",
                                 Ids(*stateless)));
      }
      s.replies.push_back(*reply);
      s.history.push_back(*h);
    }
    v1::DeleteSessionRequest del;
    del.set_session_id(id);
    absl::Status deleted = client.DeleteSession(del);
    if (!deleted.ok()) return deleted;
  }
  return e;
}

// --- Target -----------------------------------------------------------------

void Target::Up(std::shared_ptr<Client> client, std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  client_ = std::move(client);
  address_ = std::move(address);
  ++epoch_;
  if (graceful_pending_) graceful_epoch_ = epoch_;
  graceful_pending_ = false;
}

void Target::Down() {
  std::lock_guard<std::mutex> lock(mu_);
  client_ = nullptr;
}

std::optional<Target::View> Target::Get(const std::atomic<bool>& stop,
                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!stop.load() && absl::Now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (client_ != nullptr) return View{client_, epoch_, address_};
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return std::nullopt;
}

void Target::Begin(Disruption d) {
  std::lock_guard<std::mutex> lock(mu_);
  windows_.push_back(Window{d, absl::Now(), absl::InfiniteFuture()});
  if (d == Disruption::kSigterm) graceful_pending_ = true;
  if (d == Disruption::kKill) graceful_pending_ = false;
}

void Target::End(Disruption d, absl::Duration slack) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Window& w : windows_) {
    if (w.what == d && w.end == absl::InfiniteFuture()) {
      w.end = absl::Now() + slack;
    }
  }
}

Disruption Target::Overlapping(absl::Time start, absl::Time end) const {
  std::lock_guard<std::mutex> lock(mu_);
  Disruption worst = Disruption::kNone;
  for (const Window& w : windows_) {
    if (w.begin <= end && start <= w.end && w.what > worst) worst = w.what;
  }
  return worst;
}

bool Target::RestartedGracefully(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch == graceful_epoch_;
}

// --- Load -------------------------------------------------------------------

Load::Load(const Expectations* expect, Target* target, Tally* tally,
           LoadOptions options)
    : expect_(expect), target_(target), tally_(tally), options_(options) {}

Load::~Load() { Stop(); }

void Load::Start() {
  stop_.store(false);
  calls_.store(0);
  for (int i = 0; i < options_.stateless_clients; ++i) {
    threads_.emplace_back([this, i] { StatelessClient(i); });
  }
  for (int i = 0; i < options_.session_clients; ++i) {
    threads_.emplace_back([this, i] { SessionClient(i); });
  }
  if (options_.faults && !options_.kvctl.empty()) {
    threads_.emplace_back([this] { DisconnectClient(0); });
  }
}

void Load::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void Load::StatelessClient(int index) {
  std::mt19937_64 rng(options_.seed * 1000 + static_cast<uint64_t>(index));
  std::uniform_real_distribution<double> u(0, 1);
  while (!stop_.load()) {
    std::optional<Target::View> view = target_->Get(stop_, kNoServerTimeout);
    if (!view.has_value()) {
      if (!stop_.load()) tally_->Fail("generate", "no server came back");
      return;
    }
    const double r = options_.faults ? u(rng) : 0.0;
    const Case* c = &expect_->short_cases[rng() % expect_->short_cases.size()];
    std::string kind = "generate";
    int cancel_after = 0;
    absl::Duration per_token = absl::ZeroDuration();
    absl::Duration timeout = kCallTimeout;
    absl::StatusCode own_fault = absl::StatusCode::kOk;
    if (r >= 0.55 && r < 0.66) {
      kind = "cancel mid-stream";
      cancel_after = 1 + static_cast<int>(rng() % 4);
      own_fault = absl::StatusCode::kCancelled;
    } else if (r >= 0.66 && r < 0.76) {
      kind = "slow reader";
      per_token = absl::Milliseconds(8 + static_cast<int64_t>(rng() % 17));
    } else if (r >= 0.76 && r < 0.88) {
      kind = "deadline in prefill";
      c = &expect_->long_cases[rng() % expect_->long_cases.size()];
      timeout = absl::Milliseconds(3 + static_cast<int64_t>(rng() % 40));
      own_fault = absl::StatusCode::kDeadlineExceeded;
    } else if (r >= 0.88 && r < 0.94) {
      kind = "long prompt";
      c = &expect_->long_cases[rng() % expect_->long_cases.size()];
    }
    v1::GenerateRequest request = Greedy(c->max_tokens);
    request.mutable_prompt()->set_text(c->prompt);
    Streamed s =
        Stream(*view->client, request, timeout, cancel_after, per_token);
    calls_.fetch_add(1);
    const Disruption d = target_->Overlapping(s.start, s.end);
    if (!IsPrefix(s.ids, c->expect)) {
      tally_->Fail(kind,
                   absl::StrCat("\"", c->prompt.substr(0, 40), "\": streamed ",
                                Ids(s.ids), ", expected ", Ids(c->expect),
                                " (status ", s.status.ToString(), ", fault ",
                                DisruptionName(d), ")"));
      continue;
    }
    if (s.status.ok()) {
      if (s.ids != c->expect) {
        tally_->Fail(kind, absl::StrCat("\"", c->prompt.substr(0, 40),
                                        "\": ", Ids(s.ids), ", expected ",
                                        Ids(c->expect)));
        continue;
      }
      tally_->Count(kind, Outcome::kOk);
      if (per_token == absl::ZeroDuration() && d == Disruption::kNone) {
        if (s.ttft.has_value()) tally_->Ttft(*s.ttft);
        for (absl::Duration g : s.gaps) tally_->Itl(g);
      }
      continue;
    }
    std::string detail;
    const Outcome o =
        Judge(s.status, own_fault, d, false, s.ids.size(), &detail);
    if (o == Outcome::kFailed) {
      tally_->Fail(kind, absl::StrCat("\"", c->prompt.substr(0, 40),
                                      "\": ", s.status.ToString(), " after ",
                                      s.ids.size(), " tokens (fault ",
                                      DisruptionName(d), ")"));
    } else {
      tally_->Count(kind, o, detail);
    }
    if (o != Outcome::kOk) {  // a client backs off before it retries
      absl::SleepFor(absl::Milliseconds(5 + static_cast<int64_t>(rng() % 20)));
    }
  }
}

namespace {

// One session client's conversation: where it is in its script and what the
// server must hold.
struct Conversation {
  const Script* script = nullptr;
  std::string id;
  bool created = false;     // the client saw CreateSession succeed
  bool in_doubt = false;    // the last call's effect is unknown
  bool partial_ok = false;  // ... and it may have left a partial turn
  int next_turn = 0;        // turns the client saw complete
  int64_t epoch = 0;        // the server epoch last checked against
};

}  // namespace

void Load::SessionClient(int index) {
  std::mt19937_64 rng(options_.seed * 2000 + static_cast<uint64_t>(index));
  const std::vector<Script>& scripts = expect_->scripts;
  int conversations = 0;
  Conversation cv;
  auto fresh = [&] {
    cv = Conversation();
    cv.script = &scripts[(static_cast<size_t>(index) +
                          static_cast<size_t>(conversations++)) %
                         scripts.size()];
    cv.id = NewSessionId();
  };
  fresh();
  std::shared_ptr<Client> last_client;
  auto pause = [&] {
    absl::SleepFor(absl::Milliseconds(5 + static_cast<int64_t>(rng() % 20)));
  };

  // Reconciles the client's view with the server's history of the session.
  enum class Synced { kYes, kStartOver, kLater };
  auto resync = [&](Client& client, bool restarted,
                    bool first_after_graceful) -> Synced {
    const Script& s = *cv.script;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    v1::GetSessionRequest get;
    get.set_session_id(cv.id);
    get.set_include_tokens(true);
    absl::StatusOr<v1::Session> got;
    while (true) {
      CallOptions options;
      options.timeout = absl::Seconds(10);
      got = client.GetSession(get, options);
      if (!got.ok() || !got->busy() || absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (!got.ok() && absl::IsNotFound(got.status())) {
      if (cv.created) {
        tally_->SessionsLost(
            1, absl::StrCat(cv.id, ": ", got.status().ToString()));
        if (cv.next_turn > 0) {
          tally_->TurnsLost(cv.next_turn, absl::StrCat("with session ", cv.id));
        }
      }
      fresh();
      return Synced::kStartOver;
    }
    if (!got.ok()) return Synced::kLater;  // the server went away again
    if (got->busy()) {
      tally_->Fail("turn", absl::StrCat(cv.id, " still busy after 30 s"));
      return Synced::kLater;
    }
    if (first_after_graceful && got->tier() != "disk") {
      // After SIGTERM every session's KV must have been snapshotted.
      tally_->CheckFailed(absl::StrCat("session ", cv.id, " is in tier \"",
                                       got->tier(),
                                       "\" after a graceful restart"));
    }
    if (restarted) tally_->Count("session checked after restart", Outcome::kOk);
    std::vector<int32_t> h(got->token_ids().begin(), got->token_ids().end());
    const int done = cv.created ? cv.next_turn : 0;
    const std::vector<int32_t>& before = s.history[done];
    const bool more = done + 1 < static_cast<int>(s.history.size());
    if (h == before) {
      cv.created = true;
    } else if (cv.in_doubt && more && h == s.history[done + 1]) {
      cv.created = true;
      cv.next_turn = done + 1;  // applied, though its reply was not seen
    } else if (cv.in_doubt && cv.partial_ok && more &&
               h.size() > before.size() && IsPrefix(h, s.history[done + 1]) &&
               IsPrefix(before, h)) {
      v1::TruncateSessionRequest t;
      t.set_session_id(cv.id);
      t.set_tokens(static_cast<int64_t>(before.size()));
      absl::StatusOr<v1::Session> cut = client.TruncateSession(t);
      // The server went away again (a restart under load began): as for
      // GetSession above, the session stays in doubt until the next sync.
      if (absl::IsUnavailable(cut.status())) return Synced::kLater;
      if (!cut.ok()) {
        tally_->Fail("truncate",
                     absl::StrCat(cv.id, ": ", cut.status().ToString()));
        return Synced::kLater;
      }
      tally_->Count("truncate after cancel", Outcome::kOk);
    } else {
      int k = done - 1;
      while (k >= 0 && h != s.history[k]) --k;
      if (k >= 0) {
        tally_->TurnsLost(
            done - k, absl::StrCat(cv.id, ": history has ", h.size(),
                                   " tokens, the client saw ", before.size(),
                                   " complete"));
        cv.next_turn = k;
      } else {
        size_t m = 0;
        while (m < h.size() && m < before.size() && h[m] == before[m]) ++m;
        std::error_code ec;
        const std::string log =
            absl::StrCat(options_.session_dir, "/", cv.id, ".log");
        const auto log_bytes = std::filesystem::file_size(log, ec);
        tally_->SessionCorrupt(absl::StrCat(
            cv.id, cv.created ? "" : " (its CreateSession failed)", " after ",
            done, " turns: ", h.size(), " tokens, expected ", before.size(),
            ", first difference at ", m, "; tier ", got->tier(), ", log ",
            ec ? "absent" : absl::StrCat(log_bytes, " bytes"),
            cv.in_doubt ? " (last call in doubt)" : ""));
        v1::DeleteSessionRequest del;
        del.set_session_id(cv.id);
        (void)client.DeleteSession(del);
        fresh();
        return Synced::kStartOver;
      }
    }
    cv.in_doubt = false;
    cv.partial_ok = false;
    return Synced::kYes;
  };

  while (!stop_.load()) {
    std::optional<Target::View> view = target_->Get(stop_, kNoServerTimeout);
    if (!view.has_value()) {
      if (!stop_.load()) tally_->Fail("turn", "no server came back");
      break;
    }
    last_client = view->client;
    Client& client = *view->client;
    const Script& s = *cv.script;
    // After a restart, and after any call of unknown effect: look first.
    if (cv.in_doubt || (cv.created && view->epoch != cv.epoch)) {
      const bool restarted = cv.created && view->epoch != cv.epoch;
      const Synced synced =
          resync(client, restarted,
                 restarted && target_->RestartedGracefully(view->epoch));
      if (synced == Synced::kStartOver) continue;
      if (synced == Synced::kLater) {
        pause();
        continue;
      }
    }
    cv.epoch = view->epoch;
    if (!cv.created) {
      v1::CreateSessionRequest create;
      create.set_session_id(cv.id);
      create.mutable_initial()->set_text(s.initial);
      const absl::Time start = absl::Now();
      CallOptions options;
      options.timeout = kCallTimeout;
      absl::StatusOr<v1::Session> session =
          client.CreateSession(create, options);
      calls_.fetch_add(1);
      if (session.ok()) {
        if (session->num_tokens() !=
            static_cast<int64_t>(s.history[0].size())) {
          tally_->Fail("create",
                       absl::StrCat(cv.id, ": ", session->num_tokens(),
                                    " tokens, expected ", s.history[0].size()));
        } else {
          tally_->Count("create", Outcome::kOk);
        }
        cv.created = true;
        continue;
      }
      std::string detail;
      const Disruption d = target_->Overlapping(start, absl::Now());
      const Outcome o =
          Judge(session.status(), absl::StatusCode::kOk, d, true, 0, &detail);
      if (o == Outcome::kFailed) {
        tally_->Fail("create",
                     absl::StrCat(session.status().ToString(), " (fault ",
                                  DisruptionName(d), ")"));
      } else {
        tally_->Count("create", o, detail);
      }
      if (o != Outcome::kRefused) cv.in_doubt = true;
      pause();
      continue;
    }
    if (cv.next_turn == static_cast<int>(s.turns.size())) {
      // Conversation done: the server's history is exactly the script's.
      absl::StatusOr<std::vector<int32_t>> h = SessionTokens(client, cv.id);
      if (h.ok() && *h != s.history.back()) {
        tally_->SessionCorrupt(absl::StrCat(cv.id, ": final history ", Ids(*h),
                                            " != ", Ids(s.history.back())));
      } else if (!h.ok() && absl::IsNotFound(h.status())) {
        tally_->SessionsLost(1,
                             absl::StrCat(cv.id, ": ", h.status().ToString()));
        tally_->TurnsLost(cv.next_turn, absl::StrCat("with session ", cv.id));
      } else if (!h.ok()) {
        pause();
        continue;  // server away: look again
      }
      v1::DeleteSessionRequest del;
      del.set_session_id(cv.id);
      (void)client.DeleteSession(del);
      fresh();
      continue;
    }
    const int j = cv.next_turn;
    v1::GenerateRequest request = Greedy(s.max_tokens[j]);
    request.set_session_id(cv.id);
    request.mutable_prompt()->set_text(s.turns[j]);
    const bool cancel = options_.faults && rng() % 10 == 0;
    const int cancel_after = cancel ? 1 + static_cast<int>(rng() % 3) : 0;
    Streamed st = Stream(client, request, kCallTimeout, cancel_after);
    calls_.fetch_add(1);
    const char* kind = cancel ? "turn cancelled mid-stream" : "turn";
    const Disruption d = target_->Overlapping(st.start, st.end);
    const std::vector<int32_t>& expect = s.replies[j];
    if (st.status.ok()) {
      if (st.ids != expect) {
        tally_->Fail(kind, absl::StrCat(cv.id, " turn ", j, ": ", Ids(st.ids),
                                        ", expected ", Ids(expect)));
        cv.in_doubt = true;
        cv.partial_ok = false;
        // The history now holds the wrong reply: resync reports it.
        continue;
      }
      tally_->Count(kind, Outcome::kOk);
      if (d == Disruption::kNone) {
        if (st.ttft.has_value()) tally_->Ttft(*st.ttft);
        for (absl::Duration g : st.gaps) tally_->Itl(g);
      }
      cv.next_turn = j + 1;
      continue;
    }
    if (!IsPrefix(st.ids, expect)) {
      tally_->Fail(kind, absl::StrCat(cv.id, " turn ", j, ": streamed ",
                                      Ids(st.ids), ", expected ", Ids(expect)));
    }
    if (absl::IsNotFound(st.status)) {
      tally_->SessionsLost(1, absl::StrCat(cv.id, ": ", st.status.ToString()));
      tally_->TurnsLost(j, absl::StrCat("with session ", cv.id));
      fresh();
      continue;
    }
    std::string detail;
    const Outcome o =
        Judge(st.status,
              cancel ? absl::StatusCode::kCancelled : absl::StatusCode::kOk, d,
              true, st.ids.size(), &detail);
    if (o == Outcome::kFailed) {
      tally_->Fail(kind,
                   absl::StrCat(cv.id, " turn ", j, ": ", st.status.ToString(),
                                " after ", st.ids.size(), " tokens (fault ",
                                DisruptionName(d), ")"));
    } else {
      tally_->Count(kind, o, detail);
    }
    if (o != Outcome::kRefused) {
      cv.in_doubt = true;
      cv.partial_ok = cancel || d == Disruption::kSigterm;
    }
    pause();
  }
  // Stopped: leave nothing behind (an unknown leftover is swept later).
  if (last_client != nullptr && (cv.created || cv.in_doubt)) {
    v1::DeleteSessionRequest del;
    del.set_session_id(cv.id);
    CallOptions options;
    options.timeout = absl::Seconds(10);
    (void)last_client->DeleteSession(del, options);
  }
}

void Load::DisconnectClient(int index) {
  std::mt19937_64 rng(options_.seed * 3000 + static_cast<uint64_t>(index));
  const Case& c = expect_->disconnect;
  bool refused = false;
  while (!stop_.load()) {
    absl::SleepFor(absl::Milliseconds(
        refused ? 10 : 100 + static_cast<int64_t>(rng() % 200)));
    refused = false;
    std::optional<Target::View> view = target_->Get(stop_, kNoServerTimeout);
    if (!view.has_value()) break;
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<KvctlStream>> kvctl = KvctlStream::Start(
        {options_.kvctl, "--addr=" + view->address, "--json", "generate",
         "--max_tokens=2000", "--ignore_eos", "--temperature=0", c.prompt});
    if (!kvctl.ok()) {
      tally_->Fail("disconnect", kvctl.status().ToString());
      return;
    }
    const int want = 1 + static_cast<int>(rng() % 4);
    std::vector<int32_t> ids =
        (*kvctl)->ReadTokens(want, absl::Now() + absl::Seconds(30));
    calls_.fetch_add(1);
    std::vector<int32_t> prefix(
        ids.begin(), ids.begin() + static_cast<ptrdiff_t>(
                                       std::min(ids.size(), c.expect.size())));
    if (!IsPrefix(prefix, c.expect)) {
      tally_->Fail("disconnect", absl::StrCat("kvctl streamed ", Ids(ids),
                                              ", expected ", Ids(c.expect)));
      continue;
    }
    if (static_cast<int>(ids.size()) >= want) {
      (*kvctl)->Kill();
      tally_->Count("disconnect (kvctl kill -9)", Outcome::kFault,
                    "connection dropped");
      continue;
    }
    // It ended (or stalled) before `want` tokens: a refusal, or a fault.
    const int code = (*kvctl)->Wait(absl::Now() + absl::Seconds(5));
    const Disruption d = target_->Overlapping(start, absl::Now());
    if (code == 9) {  // kvctl's exit code for RESOURCE_EXHAUSTED
      tally_->Count("disconnect (kvctl kill -9)", Outcome::kRefused);
      refused = true;
    } else if (d != Disruption::kNone && d != Disruption::kDiskFull) {
      tally_->Count(
          "disconnect (kvctl kill -9)", Outcome::kFault,
          absl::StrCat("kvctl exit ", code, " (", DisruptionName(d), ")"));
    } else {
      tally_->Fail(
          "disconnect",
          absl::StrCat("kvctl ended with ", code, " after ", ids.size(),
                       " tokens: ", (*kvctl)->output().substr(0, 300)));
    }
    (*kvctl)->Kill();
  }
}

}  // namespace kvserve::soak
