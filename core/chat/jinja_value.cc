#include "core/chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace kvserve::jinja {
namespace {

constexpr size_t kIndexThreshold = 8;

std::string QuoteRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : Decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else if (c <= 0xff) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint32_t>(c));
    } else if (c <= 0xffff) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<uint32_t>(c));
    } else {
      absl::StrAppendFormat(&out, "\\U%08x", static_cast<uint32_t>(c));
    }
  }
  out += quote;
  return out;
}

void ReprInto(const Value& v, int depth, size_t limit, std::string* out);

void ReprItems(const std::vector<Value>& items, int depth, size_t limit,
               std::string* out) {
  for (size_t i = 0; i < items.size() && out->size() <= limit; ++i) {
    if (i > 0) *out += ", ";
    ReprInto(items[i], depth + 1, limit, out);
  }
}

// Python's repr into *out, giving up once *out passes `limit` bytes.
void ReprInto(const Value& v, int depth, size_t limit, std::string* out) {
  if (depth > kMaxValueDepth) {
    *out += "...";
    return;
  }
  if (out->size() > limit) return;
  switch (v.kind()) {
    case Kind::kString:
      if (v.safe()) {
        CatTo(out, "Markup(", QuoteRepr(v.str()), ")");
      } else {
        *out += QuoteRepr(v.str());
      }
      return;
    case Kind::kList: {
      const List& l = v.list();
      switch (l.kind) {
        case SeqKind::kList:
          *out += '[';
          ReprItems(l.items, depth, limit, out);
          *out += ']';
          return;
        case SeqKind::kTuple:
          *out += '(';
          ReprItems(l.items, depth, limit, out);
          if (l.items.size() == 1) *out += ',';
          *out += ')';
          return;
        case SeqKind::kRange:
          CatTo(out, "range(", l.range_start, ", ", l.range_stop);
          if (l.range_step != 1) CatTo(out, ", ", l.range_step);
          *out += ')';
          return;
        case SeqKind::kDictKeys:
        case SeqKind::kDictValues:
        case SeqKind::kDictItems:
          *out += l.kind == SeqKind::kDictKeys     ? "dict_keys(["
                  : l.kind == SeqKind::kDictValues ? "dict_values(["
                                                   : "dict_items([";
          ReprItems(l.items, depth, limit, out);
          *out += "])";
          return;
      }
      return;
    }
    case Kind::kDict: {
      *out += '{';
      bool first = true;
      for (const auto& [key, value] : v.dict().items) {
        if (out->size() > limit) break;
        if (!first) *out += ", ";
        first = false;
        ReprInto(key, depth + 1, limit, out);
        *out += ": ";
        ReprInto(value, depth + 1, limit, out);
      }
      *out += '}';
      return;
    }
    case Kind::kObject:
      *out += v.object()->Repr(limit);
      return;
    case Kind::kUndefined:
      *out += "Undefined";
      return;
    default:
      *out += Str(v);
      return;
  }
}

void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  auto escape16 = [out](uint32_t c) {
    absl::StrAppendFormat(out, "\\u%04x", c);
  };
  for (char32_t c : Decode(s)) {
    switch (c) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
      if (c >= 0x10000) {
        const uint32_t v = static_cast<uint32_t>(c) - 0x10000;
        escape16(0xd800 + (v >> 10));
        escape16(0xdc00 + (v & 0x3ff));
      } else {
        escape16(static_cast<uint32_t>(c));
      }
    } else {
      std::u32string_view one(&c, 1);
      *out += Encode(one);
    }
  }
  *out += '"';
}

absl::Status NotSerializable(const Value& v) {
  return absl::InvalidArgumentError(
      Cat("Object of type ", TypeName(v), " is not JSON serializable"));
}

absl::Status JsonInto(const Value& v, const JsonOptions& o, int level,
                      std::string* out) {
  if (level > kMaxValueDepth) {
    return absl::InvalidArgumentError("tojson: value nested too deeply");
  }
  if (out->size() > o.max_bytes) {
    return absl::InvalidArgumentError(
        Cat("tojson: output exceeds the limit of ", o.max_bytes, " bytes"));
  }
  auto newline = [&](int lvl) {
    if (!o.has_indent) return;
    *out += '\n';
    for (int i = 0; i < lvl; ++i) *out += o.indent;
  };
  const std::string item_sep = o.has_separators ? o.item_separator
                               : o.has_indent   ? ","
                                                : ", ";
  const std::string key_sep = o.has_separators ? o.key_separator : ": ";
  switch (v.kind()) {
    case Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Kind::kInt:
      CatTo(out, v.as_int());
      return absl::OkStatus();
    case Kind::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FloatRepr(d);
      }
      return absl::OkStatus();
    }
    case Kind::kString:
      JsonString(v.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Kind::kList: {
      if (v.seq_kind() != SeqKind::kList && v.seq_kind() != SeqKind::kTuple) {
        return NotSerializable(v);
      }
      const auto& items = v.items();
      if (items.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        if (absl::Status s = JsonInto(items[i], o, level + 1, out); !s.ok()) {
          return s;
        }
      }
      newline(level);
      *out += ']';
      return absl::OkStatus();
    }
    case Kind::kDict: {
      const auto& items = v.dict().items;
      if (items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<size_t> order(items.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (o.sort_keys) {
        absl::Status error;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          absl::StatusOr<int> c = Compare(items[a].first, items[b].first);
          if (!c.ok()) {
            if (error.ok()) error = c.status();
            return a < b;
          }
          return *c < 0;
        });
        if (!error.ok()) return error;
      }
      *out += '{';
      bool first = true;
      for (size_t i : order) {
        const Value& key = items[i].first;
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        switch (key.kind()) {
          case Kind::kString:
            JsonString(key.str(), o.ensure_ascii, out);
            break;
          case Kind::kNone:
          case Kind::kBool:
          case Kind::kInt:
          case Kind::kFloat: {
            std::string k;
            if (absl::Status s = JsonInto(key, o, level + 1, &k); !s.ok()) {
              return s;
            }
            CatTo(out, "\"", k, "\"");
            break;
          }
          default:
            return absl::InvalidArgumentError(
                Cat("keys must be str, int, float, bool or None, not ",
                    TypeName(key)));
        }
        *out += key_sep;
        if (absl::Status s = JsonInto(items[i].second, o, level + 1, out);
            !s.ok()) {
          return s;
        }
      }
      newline(level);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return NotSerializable(v);
  }
}

absl::StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::InvalidArgumentError(
        Cat("JSON nested deeper than ", kMaxValueDepth, " levels"));
  }
  using VT = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case VT::null:
      return Value::None();
    case VT::boolean:
      return Value::Bool(j.get<bool>());
    case VT::number_integer:
      return Value::Int(j.get<int64_t>());
    case VT::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Int(static_cast<int64_t>(u));
      }
      return Value::Float(static_cast<double>(u));
    }
    case VT::number_float:
      return Value::Float(j.get<double>());
    case VT::string:
      return Value::String(j.get<std::string>());
    case VT::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        absl::StatusOr<Value> v = FromJsonAt(e, depth + 1);
        if (!v.ok()) return v.status();
        items.push_back(*std::move(v));
      }
      return Value::Seq(std::move(items));
    }
    case VT::object: {
      DictBuilder b;
      for (const auto& [key, e] : j.items()) {
        absl::StatusOr<Value> v = FromJsonAt(e, depth + 1);
        if (!v.ok()) return v.status();
        b.Set(Value::String(key), *std::move(v));
      }
      return b.Build();
    }
    default:
      return absl::InvalidArgumentError("JSON value of unsupported type");
  }
}

int MaxDepth(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  return d;
}

bool IntEqualsFloat(int64_t i, double f) {
  if (!std::isfinite(f) || f != std::trunc(f)) return false;
  if (f < -9.2233720368547758e18 || f >= 9.2233720368547758e18) return false;
  return static_cast<int64_t>(f) == i;
}

}  // namespace

// ---- Value -----------------------------------------------------------------

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}
Value Value::String(std::string s, bool safe) {
  SpannedText text;
  text.text = std::move(s);
  return Spanned(std::move(text), safe);
}
Value Value::Literal(std::string s) {
  SpannedText text;
  if (!s.empty()) text.literal.push_back({0, s.size()});
  text.text = std::move(s);
  return Spanned(std::move(text));
}
Value Value::Spanned(SpannedText s, bool safe) {
  Value v;
  v.kind_ = Kind::kString;
  v.safe_ = safe;
  v.ptr_ = std::make_shared<SpannedText>(std::move(s));
  return v;
}
Value Value::Seq(std::vector<Value> items, SeqKind kind) {
  auto l = std::make_shared<List>();
  l->depth = MaxDepth(items) + 1;
  l->items = std::move(items);
  l->kind = kind;
  Value v;
  v.kind_ = Kind::kList;
  v.ptr_ = std::move(l);
  return v;
}
Value Value::Range(int64_t start, int64_t stop, int64_t step,
                   std::vector<Value> items) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->kind = SeqKind::kRange;
  l->range_start = start;
  l->range_stop = stop;
  l->range_step = step;
  Value v;
  v.kind_ = Kind::kList;
  v.ptr_ = std::move(l);
  return v;
}
Value Value::MakeDict(std::shared_ptr<const Dict> dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.ptr_ = std::const_pointer_cast<Dict>(std::move(dict));
  return v;
}
Value Value::MakeObject(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::kObject;
  v.ptr_ = std::move(object);
  return v;
}

const std::vector<Value>& Value::items() const { return list().items; }
SeqKind Value::seq_kind() const { return list().kind; }
std::shared_ptr<Object> Value::object_ptr() const {
  return std::static_pointer_cast<Object>(ptr_);
}
std::string_view Value::undefined_hint() const {
  if (kind_ != Kind::kUndefined || ptr_ == nullptr) return {};
  return *static_cast<const std::string*>(ptr_.get());
}
int Value::depth() const {
  switch (kind_) {
    case Kind::kList:
      return list().depth;
    case Kind::kDict:
      return dict().depth;
    case Kind::kObject:
      return object()->depth();
    default:
      return 0;
  }
}

// ---- Dict ------------------------------------------------------------------

const Value* Dict::Find(std::string_view key) const {
  if (!index.empty()) {
    auto it = index.find(absl::string_view(key.data(), key.size()));
    return it == index.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.str()));
  for (const auto& [k, v] : items) {
    if (!k.is_string() && Equal(k, key)) return &v;
  }
  return nullptr;
}

void DictBuilder::Set(Value key, Value value) {
  Dict& d = *dict_;
  if (key.is_string() && !d.index.empty()) {
    auto [it, inserted] = d.index.try_emplace(key.str(), d.items.size());
    if (!inserted) {
      d.items[it->second].second = std::move(value);
      return;
    }
  } else {
    for (auto& [k, v] : d.items) {
      if (Equal(k, key)) {
        v = std::move(value);
        return;
      }
    }
  }
  d.depth = std::max({d.depth, key.depth() + 1, value.depth() + 1});
  d.items.emplace_back(std::move(key), std::move(value));
  if (d.index.empty() && d.items.size() > kIndexThreshold) {
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (d.items[i].first.is_string()) {
        d.index.try_emplace(d.items[i].first.str(), i);
      }
    }
  }
}

Value DictBuilder::Build() {
  Value v = Value::MakeDict(std::move(dict_));
  dict_ = std::make_shared<Dict>();
  return v;
}

std::string Object::Repr(size_t /*limit*/) const {
  return Cat("<", type_name(), " object>");
}

// ---- Python semantics ------------------------------------------------------

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return v.as_int() != 0;
    case Kind::kFloat:
      return v.as_double() != 0;
    case Kind::kString:
      return !v.str().empty();
    case Kind::kList:
      return !v.items().empty();
    case Kind::kDict:
      return !v.dict().items.empty();
    case Kind::kObject:
      return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is [-]D[.DDD]e(+|-)XX.
  std::string_view s(buf);
  std::string out;
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits += c;
  }
  const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_len);
        out += '.';
        out += digits.substr(int_len);
      }
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    absl::StrAppendFormat(&out, "e%c%02d", exp < 0 ? '-' : '+',
                          exp < 0 ? -exp : exp);
  }
  return out;
}

std::string Str(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Kind::kInt:
      return Cat(v.as_int());
    case Kind::kFloat:
      return FloatRepr(v.as_double());
    case Kind::kString:
      return v.str();
    default:
      return StrBounded(v, std::numeric_limits<size_t>::max());
  }
}

std::string StrBounded(const Value& v, size_t limit) {
  if (v.kind() != Kind::kList && v.kind() != Kind::kDict &&
      v.kind() != Kind::kObject) {
    return Str(v);
  }
  std::string out;
  ReprInto(v, 0, limit, &out);
  return out;
}

std::string Repr(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  std::string out;
  ReprInto(v, 0, std::numeric_limits<size_t>::max(), &out);
  return out;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return v.safe() ? "Markup" : "str";
    case Kind::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList:
          return "list";
        case SeqKind::kTuple:
          return "tuple";
        case SeqKind::kRange:
          return "range";
        case SeqKind::kDictKeys:
          return "dict_keys";
        case SeqKind::kDictValues:
          return "dict_values";
        case SeqKind::kDictItems:
          return "dict_items";
      }
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kObject:
      return std::string(v.object()->type_name());
  }
  return "object";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat && b.kind() == Kind::kFloat) {
      return a.as_double() == b.as_double();
    }
    if (a.kind() == Kind::kFloat)
      return IntEqualsFloat(b.as_int(), a.as_double());
    if (b.kind() == Kind::kFloat)
      return IntEqualsFloat(a.as_int(), b.as_double());
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList: {
      const bool a_tuple = a.seq_kind() == SeqKind::kTuple;
      const bool b_tuple = b.seq_kind() == SeqKind::kTuple;
      const bool a_range = a.seq_kind() == SeqKind::kRange;
      const bool b_range = b.seq_kind() == SeqKind::kRange;
      if (a_tuple != b_tuple || a_range != b_range) return false;
      if (a.seq_kind() == SeqKind::kDictValues)
        return a.identity() == b.identity();
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.Find(k);
        if (w == nullptr || !Equal(v, *w)) return false;
      }
      return true;
    }
    case Kind::kObject:
      return a.identity() == b.identity();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) {
    return absl::InvalidArgumentError(a.undefined_hint().empty()
                                          ? "value is undefined"
                                          : std::string(a.undefined_hint()));
  }
  if (b.is_undefined()) {
    return absl::InvalidArgumentError(b.undefined_hint().empty()
                                          ? "value is undefined"
                                          : std::string(b.undefined_hint()));
  }
  return absl::InvalidArgumentError(
      Cat("'<' not supported between instances of '", TypeName(a), "' and '",
          TypeName(b), "'"));
}

absl::StatusOr<size_t> Hash(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return size_t{0x5bd1e995};
    case Kind::kNone:
      return size_t{0x9e3779b9};
    case Kind::kBool:
    case Kind::kInt:
      return std::hash<int64_t>()(v.as_int());
    case Kind::kFloat: {
      const double d = v.as_double();
      if (std::isfinite(d) && d == std::trunc(d) && d >= -9.2e18 &&
          d <= 9.2e18) {
        return std::hash<int64_t>()(static_cast<int64_t>(d));
      }
      return std::hash<double>()(d);
    }
    case Kind::kString:
      return std::hash<std::string_view>()(v.str());
    case Kind::kList:
      if (v.seq_kind() == SeqKind::kTuple) {
        size_t h = 0x345678;
        for (const Value& e : v.items()) {
          absl::StatusOr<size_t> x = Hash(e);
          if (!x.ok()) return x;
          h = h * 1000003 ^ *x;
        }
        return h;
      }
      break;
    case Kind::kObject:
      return std::hash<const void*>()(v.identity());
    default:
      break;
  }
  return absl::InvalidArgumentError(
      Cat("unhashable type: '", TypeName(v), "'"));
}

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j) {
  return FromJsonAt(j, 0);
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  if (absl::Status s = JsonInto(v, options, 0, &out); !s.ok()) return s;
  return out;
}

// ---- UTF-8 -----------------------------------------------------------------

std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      out += static_cast<char32_t>(c);
      ++i;
      continue;
    }
    int len = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
      min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
      min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
      min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (p[i + k] & 0x3f);
      }
    }
    if (ok && (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))) {
      ok = false;
    }
    if (ok) {
      out += cp;
      i += len;
    } else {
      out += static_cast<char32_t>(0xdc00 + c);
      ++i;
    }
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c >= 0xdc80 && c <= 0xdcff) {
    *out += static_cast<char>(c - 0xdc00);
  } else if (c < 0x80) {
    *out += static_cast<char>(c);
  } else if (c < 0x800) {
    *out += static_cast<char>(0xc0 | (c >> 6));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    *out += static_cast<char>(0xe0 | (c >> 12));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (c >> 18));
    *out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

int64_t CodePointCount(std::string_view s) {
  if (IsAscii(s)) return static_cast<int64_t>(s.size());
  return static_cast<int64_t>(Decode(s).size());
}

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
         c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

// Simple one-to-one case pairs: ASCII, Latin-1, Latin Extended-A, Greek,
// Cyrillic and fullwidth Latin.
char32_t ToUpper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c == 0xb5) return 0x39c;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x131) return 'I';
    if (c == 0x17f) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) {
      return (c % 2 == 0) ? c - 1 : c;
    }
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x3ac && c <= 0x3af) {
    static constexpr char32_t kTonos[] = {0x386, 0x388, 0x389, 0x38a};
    return kTonos[c - 0x3ac];
  }
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  if (c >= 0xff41 && c <= 0xff5a) return c - 32;
  return c;
}

char32_t ToLower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x130) return 'i';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) {
      return (c % 2 == 1) ? c + 1 : c;
    }
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17f) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c == 0x386) return 0x3ac;
  if (c >= 0x388 && c <= 0x38a) return c + 37;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  if (c >= 0xff21 && c <= 0xff3a) return c + 32;
  return c;
}

bool IsCased(char32_t c) {
  return ToUpper(c) != c || ToLower(c) != c || c == 0xdf;
}

bool IsPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  if (c <= 0xa0 || c == 0xad) return false;
  if (c >= 0xd800 && c <= 0xdfff) return false;  // incl. escaped raw bytes
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) ||
      (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f) ||
      c == 0x3000 || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb)) {
    return false;
  }
  if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f ||
      c == 0x180e) {
    return false;
  }
  if ((c >= 0xe000 && c <= 0xf8ff) || c >= 0xf0000) return false;
  if (c >= 0xe0000 && c <= 0xe0fff) return false;
  if (c > 0x10ffff) return false;
  return true;
}

}  // namespace kvserve::jinja
