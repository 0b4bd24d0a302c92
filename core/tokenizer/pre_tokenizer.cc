#include "core/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/text/utf8_stream_decoder.h"

namespace kvserve {
namespace {

// GPT-2's regex, as the ByteLevel pre-tokenizer of tokenizer.json has it
// (llama.cpp's copy drops the final \s+, which changes nothing for valid
// UTF-8: the one character it would match is left between matches anyway).
constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
    "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|"
    "\\s+";
// Llama 3's, from its tokenizer.json. llama.cpp spells (?i:'s|...) as
// '[sS]|...; PCRE2 takes the original (Unicode case folding, so "'ſ" is
// "'s" as for the Hugging Face tokenizer).
constexpr std::string_view kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 2's: Llama 3's with single digits.
constexpr std::string_view kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The letters deepseek-llm keeps together with one leading space: its
// tokenizer.json lists cased letters as ranges (kept verbatim).
// clang-format off
constexpr std::string_view kDeepSeekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ"
    "-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯ"
    "Ա-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ"
    "-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ"
    "-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝ"
    "ℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮ"
    "ⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚ"
    "ａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
// clang-format on
// The CJK runs both DeepSeek pre-tokenizers keep together.
constexpr std::string_view kDeepSeekCjk = "[一-龥ࠀ-一가-퟿]+";

}  // namespace

const std::vector<PreTokenizerSpec>& PreTokenizerTable() {
  // Regexes from llama.cpp's llm_tokenizer_bpe (src/llama-vocab.cpp), which
  // copies them from each model's tokenizer.json; names as its
  // llama_vocab::impl::load maps tokenizer.ggml.pre.
  static const std::vector<PreTokenizerSpec>* const table =
      new std::vector<PreTokenizerSpec>{
          {.names = {"default"},
           .regexes = {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+",
                       "[0-9][0-9][0-9]"}},
          {.names = {"gpt-2", "mpt", "phi-2", "olmo"}, .regexes = {kGpt2}},
          {.names = {"llama-bpe", "llama3", "llama-v3", "falcon3"},
           .regexes = {kLlama3},
           .ignore_merges = true},
          {.names = {"dbrx", "smaug-bpe"}, .regexes = {kLlama3}},
          {.names = {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"},
           .regexes = {kQwen2}},
          {.names = {"deepseek-llm"},
           .regexes = {"[\\r\\n]", kDeepSeekLlmLetters,
                       "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                       // Upstream \s+$; the lookbehind tries only the
                       // start of a run of white space: the same matches,
                       // but linear in the run's length, not quadratic.
                       "(?<!\\s)\\s+$", kDeepSeekCjk, "\\p{N}+"}},
          {.names = {"deepseek-coder"},
           .regexes = {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepSeekCjk,
                       "\\p{N}"}},
          {.names = {"deepseek-v3"},
           .regexes =
               {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                "[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
                "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
          {.names = {"falcon"},
           .regexes = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}},
          {.names = {"starcoder", "refact", "command-r", "smollm", "codeshell",
                     "exaone", "minerva-7b"},
           .regexes = {"\\p{N}", kGpt2}},
          // Mistral's Tekken, from its tokenizer.json (llama.cpp rewrites the
          // case classes with lookaheads for std::regex).
          {.names = {"tekken"},
           .regexes =
               {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*"
                "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
                "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}"
                "\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
                "\\s+(?!\\S)|\\s+"},
           .ignore_merges = true},
      };
  return *table;
}

namespace {

// Unicode's White_Space as the body of a character class: U+0009..U+000D,
// U+0085 and the separators (Zs, Zl, Zp).
constexpr std::string_view kWhiteSpaceClass = "\\t-\\r\\x{85}\\p{Z}";

// `regex` with \s and \S spelled as White_Space classes. REQUIRES: no \Q..\E.
absl::StatusOr<std::string> SpellWhiteSpace(std::string_view regex) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char e = regex[++i];
      if (e == 's') {
        if (!in_class) out += '[';
        out += kWhiteSpaceClass;
        if (!in_class) out += ']';
      } else if (e == 'S' && !in_class) {
        out += "[^";
        out += kWhiteSpaceClass;
        out += ']';
      } else if (e == 'S') {
        return absl::InvalidArgumentError(absl::StrFormat(
            "regex \"%s\": \\S inside a character class (offset %d) is not "
            "supported",
            regex, i - 1));
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' first in the class (after an optional '^') is a literal.
      if (i + 1 < regex.size() && regex[i + 1] == '^') out += regex[++i];
      if (i + 1 < regex.size() && regex[i + 1] == ']') out += regex[++i];
    } else if (in_class && c == '[' && i + 1 < regex.size() &&
               regex[i + 1] == ':') {
      const size_t end = regex.find(":]", i + 2);  // [:alpha:]
      if (end != std::string_view::npos) {
        out.append(regex.substr(i + 1, end + 2 - (i + 1)));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

}  // namespace

// One regex compiled twice: for well-formed UTF-8 (matched with
// NO_UTF_CHECK once the whole text is known to be valid, so no call checks
// the subject again) and for any bytes (MATCH_INVALID_UTF, whose interpreter
// re-scans the subject on each call: quadratic, where the text's pieces are
// many, for the rare text that is not UTF-8 and only without JIT).
struct PreTokenizer::Regex {
  std::string source;  // as the spec has it
  pcre2_code* utf = nullptr;
  pcre2_code* any_bytes = nullptr;
  bool jit = false;

  ~Regex() {
    pcre2_code_free(utf);
    pcre2_code_free(any_bytes);
  }
};

absl::StatusOr<PreTokenizer> PreTokenizer::FromSpec(
    std::string name, const PreTokenizerSpec& spec, const Options& options) {
  std::vector<std::unique_ptr<Regex>> regexes;
  for (std::string_view source : spec.regexes) {
    absl::StatusOr<std::string> pattern = SpellWhiteSpace(source);
    if (!pattern.ok()) return pattern.status();
    auto regex = std::make_unique<Regex>();
    regex->source = std::string(source);
    // UCP: \p, \w, \d and caseless matching by Unicode properties.
    // DOLLAR_ENDONLY: $ is the end of the piece only (std::regex's and the
    // Hugging Face tokenizers' $). MATCH_INVALID_UTF: ill-formed bytes in
    // the subject match nothing instead of failing the match.
    constexpr uint32_t kOptions = PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY;
    regex->jit = options.jit;
    for (auto [code, extra] : {std::pair{&regex->utf, 0u},
                               {&regex->any_bytes, PCRE2_MATCH_INVALID_UTF}}) {
      int error = 0;
      PCRE2_SIZE error_offset = 0;
      *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern->data()),
                            pattern->size(), kOptions | extra, &error,
                            &error_offset, nullptr);
      if (*code == nullptr) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof(message));
        return absl::InvalidArgumentError(absl::StrFormat(
            "pre-tokenizer \"%s\": regex \"%s\" does not compile (PCRE2, "
            "offset %d of \"%s\"): %s",
            name, source, error_offset, *pattern,
            reinterpret_cast<const char*>(message)));
      }
      regex->jit =
          regex->jit && pcre2_jit_compile(*code, PCRE2_JIT_COMPLETE) == 0;
    }
    regexes.push_back(std::move(regex));
  }
  return PreTokenizer(std::move(name), spec.ignore_merges, std::move(regexes));
}

absl::StatusOr<PreTokenizer> PreTokenizer::ForName(std::string_view name,
                                                   const Options& options) {
  for (const PreTokenizerSpec& spec : PreTokenizerTable()) {
    for (std::string_view n : spec.names) {
      if (n == name) return FromSpec(std::string(name), spec, options);
    }
  }
  return absl::UnimplementedError(absl::StrFormat(
      "byte-level BPE pre-tokenizer \"%s\" (key tokenizer.ggml.pre) is not "
      "supported; supported: %s",
      name, absl::StrJoin(SupportedNames(), ", ")));
}

std::vector<std::string> PreTokenizer::SupportedNames() {
  std::vector<std::string> out;
  for (const PreTokenizerSpec& spec : PreTokenizerTable()) {
    for (std::string_view n : spec.names) out.emplace_back(n);
  }
  return out;
}

PreTokenizer::PreTokenizer(std::string name, bool ignore_merges,
                           std::vector<std::unique_ptr<Regex>> regexes)
    : name_(std::move(name)),
      ignore_merges_(ignore_merges),
      regexes_(std::move(regexes)) {}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

bool PreTokenizer::jit() const {
  for (const std::unique_ptr<Regex>& r : regexes_) {
    if (!r->jit) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string_view>> PreTokenizer::Split(
    std::string_view text) const {
  std::vector<std::string_view> pieces, next;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
  if (match == nullptr) {
    return absl::ResourceExhaustedError("PCRE2 match data: out of memory");
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
  const bool utf = IsValidUtf8(text);
  // NOTEMPTY: an empty match would be no piece.
  const uint32_t match_options =
      PCRE2_NOTEMPTY | (utf ? PCRE2_NO_UTF_CHECK : 0u);
  for (const std::unique_ptr<Regex>& regex : regexes_) {
    const pcre2_code* code = utf ? regex->utf : regex->any_bytes;
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t last = 0;  // end of the last match
      while (last < piece.size()) {
        const int rc = pcre2_match(code, subject, piece.size(), last,
                                   match_options, match.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          return absl::ResourceExhaustedError(absl::StrFormat(
              "pre-tokenizer \"%s\": regex \"%s\" failed at byte %d: %s", name_,
              regex->source, piece.data() - text.data() + last,
              reinterpret_cast<const char*>(message)));
        }
        // rc == 0: the ovector has room for the whole match only; enough.
        const size_t begin = ovector[0], end = ovector[1];
        if (begin > last) next.push_back(piece.substr(last, begin - last));
        next.push_back(piece.substr(begin, end - begin));
        last = end;
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace kvserve
