// The values a Jinja template computes with, as Python holds them: None,
// bool, int, float, str (with markupsafe's "safe" flag), list/tuple, dict
// (insertion-ordered) and a few opaque objects (namespace, loop, macro,
// bound method). Undefined is a value too, carrying the message to fail
// with when it is used for more than printing or testing.
//
// Lists and dicts are immutable and shared (std::shared_ptr); only a
// namespace's attributes change. Every container records its nesting depth
// so that the recursive algorithms here (repr, equality, JSON) are bounded.
//
// Strings are UTF-8 bytes; operations that count characters work on code
// points, and a byte that is not valid UTF-8 counts as one character
// (U+DC80 + byte, as Python's surrogateescape), so nothing is lost.
#ifndef KVSERVE_CORE_CHAT_JINJA_VALUE_H_
#define KVSERVE_CORE_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/chat/jinja.h"
#include "nlohmann/json.hpp"

namespace kvserve::jinja {

// absl::StrCat for std::string_view (Debian's Abseil has its own
// string_view): strings, characters' text and integers.
inline void CatPiece(std::string* out, std::string_view s) { out->append(s); }
inline void CatPiece(std::string* out, const char* s) { out->append(s); }
inline void CatPiece(std::string* out, const std::string& s) { out->append(s); }
#if !defined(ABSL_USES_STD_STRING_VIEW)
inline void CatPiece(std::string* out, absl::string_view s) {
  out->append(s.data(), s.size());
}
#endif
template <typename T, typename = std::enable_if_t<std::is_integral_v<T> &&
                                                  !std::is_same_v<T, char> &&
                                                  !std::is_same_v<T, bool>>>
void CatPiece(std::string* out, T n) {
  out->append(std::to_string(n));
}
template <typename... Args>
void CatTo(std::string* out, const Args&... args) {
  (CatPiece(out, args), ...);
}
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  CatTo(&out, args...);
  return out;
}

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // list, tuple, range and the dict views (SeqKind)
  kDict,
  kObject,  // namespace, loop, macro, function (Object)
};

enum class SeqKind : uint8_t {
  kList,
  kTuple,
  kRange,
  kDictKeys,
  kDictValues,
  kDictItems,
};

struct List;
struct Dict;
class Object;

class Value {
 public:
  Value() = default;  // undefined, no message
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  // Text from the context (or from an untracked operation: SpannedText).
  static Value String(std::string s, bool safe = false);
  // The template's own text.
  static Value Literal(std::string s);
  // Text with its provenance.
  static Value Spanned(SpannedText s, bool safe = false);
  static Value Seq(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value Range(int64_t start, int64_t stop, int64_t step,
                     std::vector<Value> items);
  static Value MakeDict(std::shared_ptr<const Dict> dict);
  static Value MakeObject(std::shared_ptr<Object> object);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // bool, int or float (Python's numbers.Number).
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  // bool or int (bool is an int subtype in Python).
  bool is_integral() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt;
  }

  bool as_bool() const { return int_ != 0; }
  // REQUIRES: is_integral().
  int64_t as_int() const { return int_; }
  // REQUIRES: is_number().
  double as_double() const {
    return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_);
  }
  // REQUIRES: is_string().
  const std::string& str() const { return spanned().text; }
  // REQUIRES: is_string(). The text and where the template's own text lies.
  const SpannedText& spanned() const {
    return *static_cast<const SpannedText*>(ptr_.get());
  }
  bool safe() const { return safe_; }
  // REQUIRES: is_list().
  const List& list() const { return *static_cast<const List*>(ptr_.get()); }
  const std::vector<Value>& items() const;
  SeqKind seq_kind() const;
  // REQUIRES: is_dict().
  const Dict& dict() const { return *static_cast<const Dict*>(ptr_.get()); }
  // REQUIRES: kind() == kObject.
  Object* object() const { return static_cast<Object*>(ptr_.get()); }
  std::shared_ptr<Object> object_ptr() const;
  // The undefined's message ("'x' is undefined"); empty for none.
  std::string_view undefined_hint() const;
  // Identity, for `is sameas` and namespaces.
  const void* identity() const { return ptr_.get(); }

  // Containers nested inside this value (0 for scalars).
  int depth() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  int64_t int_ = 0;  // bool, int
  double float_ = 0;
  // SpannedText (string), std::string (undefined hint), List, Dict or
  // Object.
  std::shared_ptr<void> ptr_;
};

struct List {
  std::vector<Value> items;
  SeqKind kind = SeqKind::kList;
  int depth = 1;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // kRange
};

// Insertion-ordered; keys unique under Python equality (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;
  // String keys -> position, built when there are many of them.
  absl::flat_hash_map<std::string, size_t> index;

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
};

// Builds a Dict, replacing the value of a repeated key in place (as a
// Python dict literal does).
class DictBuilder {
 public:
  void Set(Value key, Value value);
  Value Build();
  size_t size() const { return dict_->items.size(); }

 private:
  std::shared_ptr<Dict> dict_ = std::make_shared<Dict>();
};

// Opaque objects. Callable ones are called by the interpreter (Callable in
// jinja_eval.h); everything here is what printing and attributes need.
class Object {
 public:
  virtual ~Object() = default;
  // Python's type name, for messages ("namespace", "LoopContext").
  virtual std::string_view type_name() const = 0;
  virtual bool callable() const { return false; }
  // Python's repr(), giving up once past `limit` bytes.
  virtual std::string Repr(size_t limit) const;
  // Containers nested inside (1 for an object holding only scalars).
  virtual int depth() const { return 1; }
};

// ---- Python semantics over values ------------------------------------------

// Python's bool(x).
bool Truthy(const Value& v);
// Python's str(x): what {{ x }} prints (undefined prints '').
std::string Str(const Value& v);
// Python's repr(x).
std::string Repr(const Value& v);
// Str(v), stopping once the text passes `limit` bytes (a caller checks).
std::string StrBounded(const Value& v, size_t limit);
// Python's float.__repr__ (shortest round-trip: 1.0, 0.1, 1e-05, 1e+16).
std::string FloatRepr(double d);
// Python's ==.
bool Equal(const Value& a, const Value& b);
// Python's <: -1, 0, 1; an error for types Python cannot order.
absl::StatusOr<int> Compare(const Value& a, const Value& b);
// Python's type(x).__name__ ("str", "dict", "NoneType").
std::string TypeName(const Value& v);
// Python's hash(x) consistent with Equal; an error for lists and dicts.
absl::StatusOr<size_t> Hash(const Value& v);

// JSON (nlohmann) -> Value: null None, arrays lists, objects dicts, integers
// ints, other numbers floats. Fails beyond kMaxValueDepth levels.
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators,
// sort_keys). `indent` empty: none; otherwise the string each level adds.
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  bool has_separators = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  // Fails once the text passes this size.
  size_t max_bytes = static_cast<size_t>(-1);
};
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options);

// Deepest container nesting a template may build or receive.
inline constexpr int kMaxValueDepth = 512;

// ---- UTF-8 code points -----------------------------------------------------

// Decodes `s` leniently: an invalid byte b becomes U+DC00 + b.
std::u32string Decode(std::string_view s);
// The inverse of Decode (U+DC80..U+DCFF back to raw bytes).
std::string Encode(std::u32string_view s);
void AppendUtf8(char32_t c, std::string* out);
// Number of code points (Python's len()).
int64_t CodePointCount(std::string_view s);
bool IsAscii(std::string_view s);
// Python's str.isspace() for one character.
bool IsSpace(char32_t c);
char32_t ToUpper(char32_t c);
char32_t ToLower(char32_t c);
bool IsCased(char32_t c);
// Python's str.isprintable() for one character (approximate outside ASCII
// and Latin-1: control, format, separator and private-use characters).
bool IsPrintable(char32_t c);

}  // namespace kvserve::jinja

#endif  // KVSERVE_CORE_CHAT_JINJA_VALUE_H_
