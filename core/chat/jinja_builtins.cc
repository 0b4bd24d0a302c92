// Python's operators and the environment's globals, filters, tests and
// methods (jinja2/filters.py, tests.py, defaults.py, sandbox.py), each
// following the jinja2 3.1 source it is named after.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/chat/jinja_eval.h"
#include "core/chat/jinja_strings.h"

namespace kvserve::jinja {
namespace {

absl::Status UndefinedError(const Value& v) {
  return TypeError(v.undefined_hint().empty() ? "value is undefined"
                                              : v.undefined_hint());
}

absl::Status Unsupported(std::string_view what) {
  return TypeError(Cat(what, " is not supported"));
}

// ---- argument binding ------------------------------------------------------

// Python-style binding of a call's arguments to named parameters.
class Params {
 public:
  static absl::StatusOr<Params> Bind(
      std::string_view fn, const CallArgs& call,
      std::initializer_list<std::string_view> names, size_t required = 0) {
    Params p;
    p.values_.resize(names.size());
    const std::vector<std::string_view> n(names);
    if (call.pos.size() > n.size()) {
      return TypeError(Cat(fn, "() takes at most ", n.size(), " argument(s) (",
                           call.pos.size(), " given)"));
    }
    for (size_t i = 0; i < call.pos.size(); ++i) p.values_[i] = call.pos[i];
    for (const auto& [key, value] : call.kw) {
      const auto it = std::find(n.begin(), n.end(), key);
      if (it == n.end()) {
        return TypeError(
            Cat(fn, "() got an unexpected keyword argument '", key, "'"));
      }
      const size_t i = static_cast<size_t>(it - n.begin());
      if (p.values_[i].has_value()) {
        return TypeError(
            Cat(fn, "() got multiple values for argument '", key, "'"));
      }
      p.values_[i] = value;
    }
    for (size_t i = 0; i < required; ++i) {
      if (!p.values_[i].has_value()) {
        return TypeError(Cat(fn, "() missing required argument '", n[i], "'"));
      }
    }
    return p;
  }
  bool has(size_t i) const { return values_[i].has_value(); }
  Value get(size_t i, Value def = Value::None()) const {
    return values_[i].has_value() ? *values_[i] : def;
  }

 private:
  std::vector<std::optional<Value>> values_;
};

absl::StatusOr<int64_t> ToInt(const Value& v, std::string_view what) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) return UndefinedError(v);
  return TypeError(Cat("'", TypeName(v),
                       "' object cannot be interpreted as an integer (", what,
                       ")"));
}

absl::StatusOr<std::string> ToStringArg(const Value& v, std::string_view what) {
  if (v.is_string()) return v.str();
  return TypeError(Cat(what, " must be str, not ", TypeName(v)));
}

// A code-point slice helper: cps[b, e).
std::string Sub(const std::u32string& cps, size_t b, size_t e) {
  return Encode(std::u32string_view(cps).substr(b, e - b));
}

absl::StatusOr<std::string> Pad(Interp& in, const std::string& s, int64_t width,
                                const std::string& fill, int align) {
  const int64_t len = CodePointCount(s);
  if (width <= len) return s;
  const std::u32string f = Decode(fill);
  if (f.size() != 1) {
    return TypeError("The fill character must be exactly one character long");
  }
  const int64_t marg = width - len;
  if (absl::Status st = in.CheckStringSize(
          s.size() + static_cast<size_t>(marg) * fill.size());
      !st.ok()) {
    return st;
  }
  int64_t left = 0;
  if (align < 0) {
    left = 0;
  } else if (align > 0) {
    left = marg;
  } else {
    left = marg / 2 + (marg & width & 1);
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < marg; ++i) out += fill;
  return out;
}

}  // namespace

// ---- operators -------------------------------------------------------------

namespace {

absl::Status Overflow() {
  return TypeError("integer overflow (this interpreter's integers are 64-bit)");
}

double PyFloatMod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

double PyFloatFloorDiv(double x, double y) {
  const double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div != 0) {
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  return std::copysign(0.0, x / y);
}

absl::StatusOr<Value> NumberOp(Tok op, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    switch (op) {
      case Tok::kAdd:
        if (__builtin_add_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      case Tok::kSub:
        if (__builtin_sub_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      case Tok::kMul:
        if (__builtin_mul_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      case Tok::kDiv:
        if (y == 0) return TypeError("division by zero");
        return Value::Float(static_cast<double>(x) / static_cast<double>(y));
      case Tok::kFloorDiv:
      case Tok::kMod: {
        if (y == 0) return TypeError("integer division or modulo by zero");
        if (y == -1) {
          if (op == Tok::kMod) return Value::Int(0);
          if (x == std::numeric_limits<int64_t>::min()) return Overflow();
          return Value::Int(-x);
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::Int(op == Tok::kMod ? m : q);
      }
      case Tok::kPow: {
        if (y < 0) {
          if (x == 0) {
            return TypeError("0.0 cannot be raised to a negative power");
          }
          return Value::Float(
              std::pow(static_cast<double>(x), static_cast<double>(y)));
        }
        int64_t result = 1, base = x, e = y;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(result, base, &result))
              return Overflow();
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) {
            return Overflow();
          }
        }
        return Value::Int(result);
      }
      default:
        break;
    }
    return TypeError("unsupported operand");
  }
  const double x = a.as_double(), y = b.as_double();
  switch (op) {
    case Tok::kAdd:
      return Value::Float(x + y);
    case Tok::kSub:
      return Value::Float(x - y);
    case Tok::kMul:
      return Value::Float(x * y);
    case Tok::kDiv:
      if (y == 0) return TypeError("float division by zero");
      return Value::Float(x / y);
    case Tok::kFloorDiv:
      if (y == 0) return TypeError("float floor division by zero");
      return Value::Float(PyFloatFloorDiv(x, y));
    case Tok::kMod:
      if (y == 0) return TypeError("float modulo");
      return Value::Float(PyFloatMod(x, y));
    case Tok::kPow: {
      if (x == 0 && y < 0) {
        return TypeError("0.0 cannot be raised to a negative power");
      }
      if (x < 0 && y != std::floor(y) && std::isfinite(y)) {
        return TypeError("complex results are not supported");
      }
      const double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
        return TypeError("(34, 'Numerical result out of range')");
      }
      return Value::Float(r);
    }
    default:
      break;
  }
  return TypeError("unsupported operand");
}

std::string_view OpSymbol(Tok op) { return DescribeTok(op); }

// printf-style `fmt % args` (Python's str.__mod__).
absl::StatusOr<std::string> PercentFormat(Interp& in, std::string_view fmt,
                                          const Value& args) {
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  // Python treats any non-tuple with __getitem__ (a list too) as a mapping:
  // such an argument is never "not all converted".
  bool mapping_like = false;
  if (args.is_list() && args.seq_kind() == SeqKind::kTuple) {
    positional = args.items();
  } else {
    if (args.is_dict()) mapping = &args.dict();
    mapping_like = args.is_dict() || args.is_list();
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) return TypeError("incomplete format");
    const Value* arg = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string_view::npos)
        return TypeError("incomplete format key");
      if (mapping == nullptr) return TypeError("format requires a mapping");
      const Value* v = mapping->Find(fmt.substr(i + 1, close - i - 1));
      if (v == nullptr) {
        return TypeError(
            Cat("KeyError: '", fmt.substr(i + 1, close - i - 1), "'"));
      }
      keyed = *v;
      arg = &keyed;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() &&
           std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) {
      flags += fmt[i++];
    }
    auto take = [&]() -> const Value* {
      if (arg != nullptr) return arg;
      if (next >= positional.size()) return nullptr;
      return &positional[next++];
    };
    int64_t width = -1, precision = -1;
    if (i < fmt.size() && fmt[i] == '*') {
      const Value* w = take();
      if (w == nullptr || !w->is_integral()) return TypeError("* wants int");
      width = w->as_int();
      ++i;
    } else {
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        width = std::max<int64_t>(width, 0) * 10 + (fmt[i++] - '0');
        if (width > 1'000'000'000) return TypeError("width too big");
      }
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = 0;
      if (i < fmt.size() && fmt[i] == '*') {
        const Value* p = take();
        if (p == nullptr || !p->is_integral()) return TypeError("* wants int");
        precision = p->as_int();
        ++i;
      } else {
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
          precision = precision * 10 + (fmt[i++] - '0');
          if (precision > 1'000'000'000) return TypeError("precision too big");
        }
      }
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L'))
      ++i;
    if (i >= fmt.size()) return TypeError("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    const Value* v = take();
    if (v == nullptr)
      return TypeError("not enough arguments for format string");
    if (absl::Status st = in.CheckStringSize(
            static_cast<size_t>(std::max<int64_t>(width, 0)) +
            static_cast<size_t>(std::max<int64_t>(precision, 0)));
        !st.ok()) {
      return st;
    }
    std::string piece;
    const bool left = flags.find('-') != std::string::npos;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(
            std::string s,
            conv == 's' ? in.ToStr(*v) : absl::StatusOr<std::string>(Repr(*v)));
        if (precision >= 0) {
          const std::u32string cps = Decode(s);
          if (static_cast<size_t>(precision) < cps.size()) {
            s = Sub(cps, 0, static_cast<size_t>(precision));
          }
        }
        piece = std::move(s);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        int64_t n = 0;
        if (v->is_integral()) {
          n = v->as_int();
        } else if (v->kind() == Kind::kFloat && conv != 'o' && conv != 'x' &&
                   conv != 'X') {
          const double d = std::trunc(v->as_double());
          if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return Overflow();
          n = static_cast<int64_t>(d);
        } else {
          return TypeError(Cat("%", std::string(1, conv),
                               " format: a real number is required, not ",
                               TypeName(*v)));
        }
        std::string spec = "%" + flags;
        if (width >= 0) CatTo(&spec, width);
        if (precision >= 0) CatTo(&spec, ".", precision);
        const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        char buf[64];
        if (c == 'd') {
          CatTo(&spec, "lld");
          piece.resize(static_cast<size_t>(std::snprintf(
              nullptr, 0, spec.c_str(), static_cast<long long>(n))));
          std::snprintf(piece.data(), piece.size() + 1, spec.c_str(),
                        static_cast<long long>(n));
        } else {
          // Python prints the sign of negative hex/octal numbers.
          CatTo(&spec, "ll", std::string(1, c));
          const unsigned long long mag =
              n < 0 ? 0ULL - static_cast<unsigned long long>(n)
                    : static_cast<unsigned long long>(n);
          std::snprintf(buf, sizeof(buf), spec.c_str(), mag);
          piece = buf;
          if (n < 0) piece = "-" + piece;
        }
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!v->is_number()) {
          return TypeError(Cat("must be real number, not ", TypeName(*v)));
        }
        std::string spec = "%" + flags;
        if (width >= 0) CatTo(&spec, width);
        CatTo(&spec, ".", precision >= 0 ? precision : 6, std::string(1, conv));
        const double d = v->as_double();
        piece.resize(
            static_cast<size_t>(std::snprintf(nullptr, 0, spec.c_str(), d)));
        std::snprintf(piece.data(), piece.size() + 1, spec.c_str(), d);
        break;
      }
      case 'c':
        if (v->is_integral() && v->as_int() >= 0 && v->as_int() <= 0x10ffff) {
          AppendUtf8(static_cast<char32_t>(v->as_int()), &piece);
        } else if (v->is_string() && CodePointCount(v->str()) == 1) {
          piece = v->str();
        } else {
          return TypeError("%c requires int or char");
        }
        break;
      default:
        return TypeError(
            Cat("unsupported format character '", std::string(1, conv), "'"));
    }
    if (conv == 's' || conv == 'r' || conv == 'a' || conv == 'c') {
      const int64_t len = CodePointCount(piece);
      if (width > len) {
        const std::string pad(static_cast<size_t>(width - len), ' ');
        piece = left ? piece + pad : pad + piece;
      }
    }
    out += piece;
    if (absl::Status st = in.CheckStringSize(out.size()); !st.ok()) return st;
  }
  if (!used_mapping && !mapping_like && next < positional.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> Arith(Interp& in, Tok op, const Value& a,
                            const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return NumberOp(op, a, b);
  if (op == Tok::kAdd && a.is_string() && b.is_string()) {
    if (absl::Status s = in.CheckStringSize(a.str().size() + b.str().size());
        !s.ok()) {
      return s;
    }
    // Markup + str escapes the str (markupsafe); its provenance is not
    // kept (SpannedText).
    if (a.safe() || b.safe()) {
      return in.MakeString((a.safe() ? a.str() : HtmlEscape(a.str())) +
                               (b.safe() ? b.str() : HtmlEscape(b.str())),
                           true);
    }
    SpannedText sum = a.spanned();
    sum.Append(b.spanned());
    return in.MakeSpanned(std::move(sum));
  }
  if (op == Tok::kAdd && a.is_list() && b.is_list()) {
    const bool a_tuple = a.seq_kind() == SeqKind::kTuple;
    const bool b_tuple = b.seq_kind() == SeqKind::kTuple;
    if (a_tuple == b_tuple && (a_tuple || a.seq_kind() == SeqKind::kList) &&
        (b_tuple || b.seq_kind() == SeqKind::kList)) {
      const auto size =
          static_cast<int64_t>(a.items().size() + b.items().size());
      if (absl::Status s = in.Charge(size); !s.ok()) return s;
      if (absl::Status s = in.AllocateValues(size); !s.ok()) return s;
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::Seq(std::move(items), a.seq_kind());
    }
  }
  if (op == Tok::kMul) {
    const Value* seq = a.is_integral() ? &b : &a;
    const Value* count = a.is_integral() ? &a : &b;
    if (count->is_integral() && (seq->is_string() || seq->is_list())) {
      const int64_t n = std::max<int64_t>(count->as_int(), 0);
      if (seq->is_string()) {
        const double size =
            static_cast<double>(seq->str().size()) * static_cast<double>(n);
        if (size > static_cast<double>(in.max_string_bytes())) {
          return in.CheckStringSize(static_cast<size_t>(std::min(size, 1e18)));
        }
        std::string s;
        s.reserve(static_cast<size_t>(size));
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        return in.MakeString(std::move(s), seq->safe());
      }
      if (seq->seq_kind() == SeqKind::kList ||
          seq->seq_kind() == SeqKind::kTuple) {
        const double size =
            static_cast<double>(seq->items().size()) * static_cast<double>(n);
        const auto clamped = static_cast<int64_t>(std::min(size, 1e15));
        if (absl::Status s = in.Charge(clamped); !s.ok()) return s;
        if (absl::Status s = in.AllocateValues(clamped); !s.ok()) return s;
        std::vector<Value> items;
        items.reserve(static_cast<size_t>(size));
        for (int64_t i = 0; i < n; ++i) {
          items.insert(items.end(), seq->items().begin(), seq->items().end());
        }
        return Value::Seq(std::move(items), seq->seq_kind());
      }
    }
  }
  if (op == Tok::kMod && a.is_string()) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string s,
                                   PercentFormat(in, a.str(), b));
    return in.MakeString(std::move(s));
  }
  if (op == Tok::kAdd && a.is_string()) {
    return TypeError(
        Cat("can only concatenate str (not \"", TypeName(b), "\") to str"));
  }
  return TypeError(Cat("unsupported operand type(s) for ", OpSymbol(op), ": '",
                       TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string()) {
        return TypeError(
            Cat("'in <string>' requires string as left operand, not ",
                TypeName(item)));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.items()) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Kind::kDict: {
      if (absl::StatusOr<size_t> h = Hash(item); !h.ok()) return h.status();
      return container.dict().Find(item) != nullptr;
    }
    default:
      return TypeError(
          Cat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

absl::StatusOr<Value> Negate(const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) return Overflow();
    return Value::Int(-v.as_int());
  }
  if (v.kind() == Kind::kFloat) return Value::Float(-v.as_double());
  return TypeError(Cat("bad operand type for unary -: '", TypeName(v), "'"));
}

absl::StatusOr<Value> SliceValue(Interp& in, const Value& obj,
                                 const Value& start_v, const Value& stop_v,
                                 const Value& step_v) {
  if (obj.is_undefined()) return UndefinedError(obj);
  for (const Value* p : {&start_v, &stop_v, &step_v}) {
    if (!p->is_none() && !p->is_integral()) {
      return TypeError(
          "slice indices must be integers or None or have an __index__ "
          "method");
    }
  }
  const bool is_seq = obj.is_list() && (obj.seq_kind() == SeqKind::kList ||
                                        obj.seq_kind() == SeqKind::kTuple ||
                                        obj.seq_kind() == SeqKind::kRange);
  if (!obj.is_string() && !is_seq) {
    // Slices are plain Python subscripts (not the sandbox's getitem).
    return TypeError(Cat("'", TypeName(obj), "' object is not subscriptable"));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) return TypeError("slice step cannot be zero");
  if (step < -kMax) step = -kMax;
  int64_t start = start_v.is_none() ? (step < 0 ? kMax : 0) : start_v.as_int();
  int64_t stop =
      stop_v.is_none() ? (step < 0 ? -kMax - 1 : kMax) : stop_v.as_int();
  std::u32string cps;
  int64_t length = 0;
  if (obj.is_string()) {
    cps = Decode(obj.str());
    length = static_cast<int64_t>(cps.size());
  } else {
    length = static_cast<int64_t>(obj.items().size());
  }
  auto adjust = [&](int64_t* x) {
    if (*x < 0) {
      *x += length;
      if (*x < 0) *x = step < 0 ? -1 : 0;
    } else if (*x >= length) {
      *x = step < 0 ? length - 1 : length;
    }
  };
  adjust(&start);
  adjust(&stop);
  int64_t count = 0;
  if (step < 0) {
    if (stop < start) count = (start - stop - 1) / (-step) + 1;
  } else if (start < stop) {
    count = (stop - start - 1) / step + 1;
  }
  if (absl::Status s = in.Charge(count); !s.ok()) return s;
  if (obj.is_string()) {
    std::u32string out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0, i = start; k < count; ++k, i += step) {
      out += cps[static_cast<size_t>(i)];
    }
    return Value::String(Encode(out));
  }
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t k = 0, i = start; k < count; ++k, i += step) {
    items.push_back(obj.items()[static_cast<size_t>(i)]);
  }
  return in.MakeList(std::move(items), obj.seq_kind() == SeqKind::kTuple
                                           ? SeqKind::kTuple
                                           : SeqKind::kList);
}

// ---- globals ---------------------------------------------------------------

namespace {

using BuiltinFn = absl::StatusOr<Value> (*)(Interp&, const CallArgs&);

class BuiltinFunction : public Callable {
 public:
  BuiltinFunction(std::string_view name, BuiltinFn fn) : name_(name), fn_(fn) {}
  std::string_view type_name() const override {
    return "builtin_function_or_method";
  }
  std::string Repr(size_t /*limit*/) const override {
    return Cat("<built-in function ", name_, ">");
  }
  absl::StatusOr<Value> Call(Interp& in, CallArgs args) override {
    return fn_(in, args);
  }

 private:
  std::string_view name_;
  BuiltinFn fn_;
};

// Python's dict(*args, **kwargs) into a builder.
absl::Status DictArgs(Interp& in, const CallArgs& args, DictBuilder* b) {
  if (args.pos.size() > 1) {
    return TypeError(
        Cat("dict expected at most 1 argument, got ", args.pos.size()));
  }
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items) b->Set(k, v);
    } else {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items,
                                     in.Iterate(src));
      for (const Value& item : items) {
        if (!item.is_list() || item.items().size() != 2) {
          return TypeError(
              "dictionary update sequence element has wrong length");
        }
        if (absl::StatusOr<size_t> h = Hash(item.items()[0]); !h.ok()) {
          return h.status();
        }
        b->Set(item.items()[0], item.items()[1]);
      }
    }
  }
  for (const auto& [k, v] : args.kw) b->Set(Value::String(k), v);
  return absl::OkStatus();
}

absl::StatusOr<Value> GlobalDict(Interp& in, const CallArgs& args) {
  DictBuilder b;
  if (absl::Status s = DictArgs(in, args, &b); !s.ok()) return s;
  return b.Build();
}

absl::StatusOr<Value> GlobalNamespace(Interp& in, const CallArgs& args) {
  DictBuilder b;
  if (absl::Status s = DictArgs(in, args, &b); !s.ok()) return s;
  const Value attrs = b.Build();
  auto ns = std::make_shared<Namespace>();
  for (const auto& [k, v] : attrs.dict().items) {
    if (!k.is_string()) return TypeError("namespace keys must be strings");
    ns->Set(k.str(), v);
  }
  in.RegisterNamespace(ns);
  return Value::MakeObject(std::move(ns));
}

// The sandbox's range: at most 100000 items (jinja2.sandbox.MAX_RANGE).
absl::StatusOr<Value> GlobalRange(Interp& in, const CallArgs& args) {
  if (!args.kw.empty()) return TypeError("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3) {
    return TypeError(
        Cat("range expected at most 3 arguments, got ", args.pos.size()));
  }
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (!args.pos[i].is_integral()) {
      if (args.pos[i].is_undefined()) return UndefinedError(args.pos[i]);
      return TypeError(Cat("'", TypeName(args.pos[i]),
                           "' object cannot be interpreted as an "
                           "integer"));
    }
    v[i] = args.pos[i].as_int();
  }
  int64_t start = 0, stop = 0, step = 1;
  if (args.pos.size() == 1) {
    stop = v[0];
  } else {
    start = v[0];
    stop = v[1];
    step = args.pos.size() == 3 ? v[2] : 1;
  }
  if (step == 0) return TypeError("range() arg 3 must not be zero");
  // Length without overflow (as long double: the ranges allowed are tiny).
  const long double span = static_cast<long double>(stop) - start;
  long double n = 0;
  if ((step > 0 && span > 0) || (step < 0 && span < 0)) {
    n = std::floor((span - (step > 0 ? 1 : -1)) / step) + 1;
  }
  constexpr int64_t kMaxRange = 100000;
  if (n > kMaxRange) {
    return TypeError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE "
        "(100000).");
  }
  const auto count = static_cast<int64_t>(n);
  if (absl::Status s = in.Charge(count); !s.ok()) return s;
  if (absl::Status s = in.AllocateValues(count); !s.ok()) return s;
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    items.push_back(Value::Int(start + i * step));
  return Value::Range(start, stop, step, std::move(items));
}

absl::StatusOr<Value> GlobalRaise(Interp& in, const CallArgs& args) {
  if (args.pos.size() != 1 || !args.kw.empty()) {
    return TypeError("raise_exception() takes exactly one argument");
  }
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string message,
                                 in.ToStr(args.pos[0]));
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kRaisedPayload, absl::Cord("1"));
  return s;
}

// datetime.now().strftime(format): %f, %z and %Z as Python's naive
// datetime prints them, the rest by the C library.
absl::StatusOr<Value> GlobalStrftimeNow(Interp& in, const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p, Params::Bind("strftime_now", args, {"format"}, 1));
  const Value f = p.get(0);
  if (!f.is_string()) {
    return TypeError(
        Cat("strftime() argument 1 must be str, not ", TypeName(f)));
  }
  const std::string& format = f.str();
  if (format.find('\0') != std::string::npos) {
    return TypeError("embedded null character");
  }
  const absl::Time now = in.now().value_or(absl::Now());
  const int64_t seconds = absl::ToUnixSeconds(now);
  const int64_t micros =
      absl::ToInt64Microseconds(now - absl::FromUnixSeconds(seconds));
  std::string fmt;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[++i];
      if (c == 'f') {
        absl::StrAppendFormat(&fmt, "%06d", micros);
      } else if (c == 'z' || c == 'Z') {
        // naive datetime: empty
      } else {
        fmt += '%';
        fmt += c;
      }
    } else {
      fmt += format[i];
    }
  }
  const time_t t = static_cast<time_t>(seconds);
  struct tm tm;
  if (localtime_r(&t, &tm) == nullptr) return TypeError("time out of range");
  if (fmt.empty()) return Value::String("");
  std::string out;
  for (size_t size = 256 + fmt.size() * 4;; size *= 4) {
    if (absl::Status s = in.CheckStringSize(size / 4); !s.ok()) return s;
    out.resize(size);
    const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    if (n > 0 || size > 65536 + fmt.size() * 256) {
      out.resize(n);
      break;
    }
  }
  return in.MakeString(std::move(out));
}

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "Cycler"; }
  int depth() const override {
    int d = 0;
    for (const Value& v : items_) d = std::max(d, v.depth());
    return d + 1;
  }
  Value current() const { return items_[pos_]; }
  Value Next() {
    Value v = items_[pos_];
    pos_ = (pos_ + 1) % items_.size();
    return v;
  }
  void Reset() { pos_ = 0; }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

absl::StatusOr<Value> GlobalCycler(Interp& /*in*/, const CallArgs& args) {
  if (args.pos.empty())
    return TypeError("at least one item has to be provided");
  if (!args.kw.empty()) return TypeError("cycler() takes no keyword arguments");
  return Value::MakeObject(std::make_shared<Cycler>(args.pos));
}

class Joiner : public Callable {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string_view type_name() const override { return "Joiner"; }
  absl::StatusOr<Value> Call(Interp& /*in*/, CallArgs args) override {
    if (!args.pos.empty() || !args.kw.empty()) {
      return TypeError("joiner() takes no arguments");
    }
    if (!used_) {
      used_ = true;
      return Value::String("");
    }
    return Value::String(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

absl::StatusOr<Value> GlobalJoiner(Interp& in, const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                 Params::Bind("joiner", args, {"sep"}));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string sep,
                                 in.ToStr(p.get(0, Value::String(", "))));
  return Value::MakeObject(std::make_shared<Joiner>(sep));
}

}  // namespace

Value Global(std::string_view name) {
  static constexpr std::pair<std::string_view, BuiltinFn> kGlobals[] = {
      {"range", GlobalRange},
      {"dict", GlobalDict},
      {"namespace", GlobalNamespace},
      {"cycler", GlobalCycler},
      {"joiner", GlobalJoiner},
      {"raise_exception", GlobalRaise},
      {"strftime_now", GlobalStrftimeNow},
  };
  for (const auto& [n, fn] : kGlobals) {
    if (n == name) {
      return Value::MakeObject(std::make_shared<BuiltinFunction>(n, fn));
    }
  }
  return Value();
}

// ---- methods ---------------------------------------------------------------

namespace {

// Python's str methods (all: a name not implemented here still exists).
constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",     "center",    "count",     "encode",
    "endswith",     "expandtabs",   "find",      "format",    "format_map",
    "index",        "isalnum",      "isalpha",   "isascii",   "isdecimal",
    "isdigit",      "isidentifier", "islower",   "isnumeric", "isprintable",
    "isspace",      "istitle",      "isupper",   "join",      "ljust",
    "lower",        "lstrip",       "maketrans", "partition", "removeprefix",
    "removesuffix", "replace",      "rfind",     "rindex",    "rjust",
    "rpartition",   "rsplit",       "rstrip",    "split",     "splitlines",
    "startswith",   "strip",        "swapcase",  "title",     "translate",
    "upper",        "zfill"};
constexpr std::string_view kDictMethods[] = {"copy",  "fromkeys", "get",
                                             "items", "keys",     "values"};
constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem",
                                            "setdefault", "update"};
constexpr std::string_view kListMethods[] = {"copy", "count", "index"};
constexpr std::string_view kTupleMethods[] = {"count", "index"};
constexpr std::string_view kListUnsafe[] = {
    "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

class MethodObject : public Callable {
 public:
  MethodObject(Value self, std::string_view name)
      : self_(std::move(self)), name_(name) {}
  std::string_view type_name() const override {
    return "builtin_function_or_method";
  }
  std::string Repr(size_t /*limit*/) const override {
    return Cat("<built-in method ", name_, " of ", TypeName(self_), " object>");
  }
  int depth() const override { return self_.depth() + 1; }
  absl::StatusOr<Value> Call(Interp& in, CallArgs args) override;

 private:
  absl::StatusOr<Value> CallStr(Interp& in, const CallArgs& args);
  absl::StatusOr<Value> CallDict(Interp& in, const CallArgs& args);
  absl::StatusOr<Value> CallSeq(Interp& in, const CallArgs& args);

  Value self_;
  std::string name_;
};

bool IsLoop(const Value& v) {
  return v.kind() == Kind::kObject &&
         v.object()->type_name() == std::string_view("LoopContext");
}

absl::StatusOr<Value> MethodObject::Call(Interp& in, CallArgs args) {
  switch (self_.kind()) {
    case Kind::kString:
      return CallStr(in, args);
    case Kind::kDict:
      return CallDict(in, args);
    case Kind::kList:
      return CallSeq(in, args);
    case Kind::kObject:
      if (IsLoop(self_)) {
        if (!args.kw.empty()) {
          return TypeError(Cat(name_, "() takes no keyword arguments"));
        }
        if (name_ == "cycle") return LoopCycle(self_, args);
        return LoopChanged(self_, args);
      }
      if (auto* c = dynamic_cast<Cycler*>(self_.object())) {
        if (name_ == "next") return c->Next();
        c->Reset();
        return Value::None();
      }
      break;
    default:
      break;
  }
  return Unsupported(Cat(TypeName(self_), ".", name_));
}

absl::StatusOr<Value> MethodObject::CallDict(Interp& in, const CallArgs& args) {
  const Dict& d = self_.dict();
  if (name_ == "get") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p, Params::Bind("get", args, {"key", "default"}, 1));
    const Value key = p.get(0);
    if (absl::StatusOr<size_t> h = Hash(key); !h.ok()) return h.status();
    if (const Value* v = d.Find(key)) return *v;
    return p.get(1);
  }
  if (!args.pos.empty() || !args.kw.empty()) {
    return TypeError(Cat(name_, "() takes no arguments"));
  }
  if (name_ == "copy") return self_;
  if (absl::Status s = in.Charge(static_cast<int64_t>(d.items.size()));
      !s.ok()) {
    return s;
  }
  std::vector<Value> items;
  items.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (name_ == "keys") {
      items.push_back(k);
    } else if (name_ == "values") {
      items.push_back(v);
    } else {
      items.push_back(Value::Seq({k, v}, SeqKind::kTuple));
    }
  }
  if (name_ == "keys") return in.MakeList(std::move(items), SeqKind::kDictKeys);
  if (name_ == "values")
    return in.MakeList(std::move(items), SeqKind::kDictValues);
  if (name_ == "items")
    return in.MakeList(std::move(items), SeqKind::kDictItems);
  return Unsupported(Cat("dict.", name_));
}

absl::StatusOr<Value> MethodObject::CallSeq(Interp& in, const CallArgs& args) {
  const auto& items = self_.items();
  if (absl::Status s = in.Charge(static_cast<int64_t>(items.size())); !s.ok()) {
    return s;
  }
  if (name_ == "copy") {
    if (!args.pos.empty() || !args.kw.empty()) {
      return TypeError("copy() takes no arguments");
    }
    return in.MakeList(items, SeqKind::kList);
  }
  if (!args.kw.empty()) {
    return TypeError(Cat(name_, "() takes no keyword arguments"));
  }
  if (name_ == "count") {
    if (args.pos.size() != 1)
      return TypeError("count() takes exactly one argument");
    int64_t n = 0;
    for (const Value& v : items) n += Equal(v, args.pos[0]) ? 1 : 0;
    return Value::Int(n);
  }
  // index(x[, start[, end]])
  if (args.pos.empty() || args.pos.size() > 3) {
    return TypeError("index expected 1 to 3 arguments");
  }
  const auto n = static_cast<int64_t>(items.size());
  int64_t start = 0, end = n;
  if (args.pos.size() > 1) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(start, ToInt(args.pos[1], "index"));
  }
  if (args.pos.size() > 2) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(end, ToInt(args.pos[2], "index"));
  }
  if (start < 0) start = std::max<int64_t>(start + n, 0);
  if (end < 0) end = std::max<int64_t>(end + n, 0);
  for (int64_t i = start; i < std::min(end, n); ++i) {
    if (Equal(items[static_cast<size_t>(i)], args.pos[0])) return Value::Int(i);
  }
  return TypeError(
      Cat(jinja::Repr(args.pos[0]), " is not in ", TypeName(self_)));
}

// str.format: {}, {0}, {name}, with .attr / [key] lookups (sandboxed),
// !r/!s/!a, and a format spec for str, int and float.
absl::StatusOr<std::string> FormatSpec(Interp& in, const Value& v,
                                       std::string_view spec) {
  if (spec.empty()) return in.ToStr(v);
  // [[fill]align][sign][#][0][width][,|_][.precision][type]
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  const std::u32string cps = Decode(spec);
  auto is_align = [](char32_t c) {
    return c == '<' || c == '>' || c == '^' || c == '=';
  };
  if (cps.size() >= 2 && is_align(cps[1])) {
    fill.clear();
    AppendUtf8(cps[0], &fill);
    align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    align = static_cast<char>(cps[0]);
    i = 1;
  }
  std::string rest = Encode(std::u32string_view(cps).substr(i));
  std::string_view r(rest);
  std::string sign;
  if (!r.empty() && (r[0] == '+' || r[0] == '-' || r[0] == ' ')) {
    sign = std::string(1, r[0]);
    r.remove_prefix(1);
  }
  bool alt = false, zero = false;
  if (!r.empty() && r[0] == '#') {
    alt = true;
    r.remove_prefix(1);
  }
  if (!r.empty() && r[0] == '0') {
    zero = true;
    r.remove_prefix(1);
  }
  int64_t width = 0;
  while (!r.empty() && r[0] >= '0' && r[0] <= '9') {
    width = width * 10 + (r[0] - '0');
    if (width > 1'000'000'000)
      return TypeError("Too many decimal digits in format string");
    r.remove_prefix(1);
  }
  if (!r.empty() && (r[0] == ',' || r[0] == '_')) {
    return Unsupported("a thousands separator in str.format");
  }
  int64_t precision = -1;
  if (!r.empty() && r[0] == '.') {
    r.remove_prefix(1);
    precision = 0;
    while (!r.empty() && r[0] >= '0' && r[0] <= '9') {
      precision = precision * 10 + (r[0] - '0');
      if (precision > 1'000'000'000)
        return TypeError("Too many decimal digits in format string");
      r.remove_prefix(1);
    }
  }
  if (r.size() > 1) return TypeError("Invalid format specifier");
  const char type = r.empty() ? 0 : r[0];
  if (absl::Status s = in.CheckStringSize(
          static_cast<size_t>(width + std::max<int64_t>(precision, 0)));
      !s.ok()) {
    return s;
  }
  std::string body;
  bool numeric = false;
  if (v.is_string()) {
    if (type != 0 && type != 's')
      return TypeError("Unknown format code for str");
    body = v.str();
    if (precision >= 0) {
      const std::u32string b = Decode(body);
      if (static_cast<size_t>(precision) < b.size()) {
        body = Sub(b, 0, static_cast<size_t>(precision));
      }
    }
  } else if (v.is_number()) {
    numeric = true;
    std::string c = "%";
    if (!sign.empty() && sign != "-") c += sign;
    if (alt) c += '#';
    if (v.is_integral() && (type == 0 || type == 'd' || type == 'x' ||
                            type == 'X' || type == 'o' || type == 'b')) {
      if (type == 'b') return Unsupported("format type 'b'");
      CatTo(&c, "ll", std::string(1, type == 0 ? 'd' : type));
      const long long n = static_cast<long long>(v.as_int());
      if (type == 'x' || type == 'X' || type == 'o') {
        const unsigned long long mag =
            n < 0 ? 0ULL - static_cast<unsigned long long>(n)
                  : static_cast<unsigned long long>(n);
        body = absl::StrFormat("%s", n < 0 ? "-" : "");
        char buf[64];
        std::snprintf(buf, sizeof(buf), c.c_str(), mag);
        body += buf;
      } else {
        char buf[64];
        std::snprintf(buf, sizeof(buf), c.c_str(), n);
        body = buf;
      }
    } else {
      const char t = type == 0 ? 'r' : type;
      if (t == 'r') {
        if (precision >= 0) {
          CatTo(&c, ".", precision, "g");
        } else {
          body = v.is_integral() ? Cat(v.as_int()) : FloatRepr(v.as_double());
          if (!sign.empty() && sign != "-" && v.as_double() >= 0)
            body = sign + body;
        }
      } else if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' ||
                 t == 'G' || t == '%') {
        CatTo(&c, ".", precision >= 0 ? precision : 6,
              std::string(1, t == '%' ? 'f' : t));
      } else {
        return TypeError("Unknown format code for a number");
      }
      if (body.empty()) {
        const double d = v.as_double() * (t == '%' ? 100 : 1);
        body.resize(
            static_cast<size_t>(std::snprintf(nullptr, 0, c.c_str(), d)));
        std::snprintf(body.data(), body.size() + 1, c.c_str(), d);
        if (t == '%') body += '%';
      }
    }
  } else {
    return TypeError(Cat("unsupported format string passed to ", TypeName(v),
                         ".__format__"));
  }
  if (align == 0) {
    align = numeric ? '>' : '<';
    if (zero) {
      fill = "0";
      align = numeric ? '=' : '<';
    }
  }
  const int64_t len = CodePointCount(body);
  if (width <= len) return body;
  const auto pad = static_cast<size_t>(width - len);
  auto repeat = [&](size_t n) {
    std::string s;
    for (size_t k = 0; k < n; ++k) s += fill;
    return s;
  };
  switch (align) {
    case '<':
      return body + repeat(pad);
    case '^':
      return repeat(pad / 2) + body + repeat(pad - pad / 2);
    case '=': {
      size_t sign_len = (!body.empty() &&
                         (body[0] == '-' || body[0] == '+' || body[0] == ' '))
                            ? 1
                            : 0;
      return body.substr(0, sign_len) + repeat(pad) + body.substr(sign_len);
    }
    default:
      return repeat(pad) + body;
  }
}

absl::StatusOr<std::string> StrFormat(Interp& in, std::string_view fmt,
                                      const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return TypeError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) {
      return TypeError("Single '{' encountered in format string");
    }
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return TypeError("invalid conversion");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = field.find_first_of(".[");
    if (name_end == std::string_view::npos) name_end = field.size();
    const std::string_view head = field.substr(0, name_end);
    Value v;
    if (head.empty() ||
        (head.find_first_not_of("0123456789") == std::string_view::npos)) {
      const size_t index =
          head.empty()
              ? auto_index++
              : static_cast<size_t>(std::stoul(std::string(head.substr(0, 9))));
      if (index >= args.pos.size()) {
        return TypeError(Cat("Replacement index ", index,
                             " out of range for positional args tuple"));
      }
      v = args.pos[index];
    } else {
      bool found = false;
      for (const auto& [k, value] : args.kw) {
        if (k == head) {
          v = value;
          found = true;
        }
      }
      if (!found) return TypeError(Cat("KeyError: '", head, "'"));
    }
    std::string_view rest = field.substr(name_end);
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t e = rest.find_first_of(".[", 1);
        if (e == std::string_view::npos) e = rest.size();
        KVSERVE_JINJA_ASSIGN_OR_RETURN(v, in.GetAttr(v, rest.substr(1, e - 1)));
        rest.remove_prefix(e);
      } else {
        const size_t e = rest.find(']');
        if (e == std::string_view::npos)
          return TypeError("Missing ']' in format string");
        const std::string_view key = rest.substr(1, e - 1);
        Value k =
            key.find_first_not_of("0123456789") == std::string_view::npos &&
                    !key.empty()
                ? Value::Int(std::stoll(std::string(key.substr(0, 18))))
                : Value::String(std::string(key));
        KVSERVE_JINJA_ASSIGN_OR_RETURN(v, in.GetItem(v, k));
        rest.remove_prefix(e + 1);
      }
    }
    if (v.is_undefined()) {
      return TypeError(v.undefined_hint().empty() ? "value is undefined"
                                                  : v.undefined_hint());
    }
    if (conversion == 'r' || conversion == 'a') {
      v = Value::String(Repr(v));
    } else if (conversion == 's') {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
      v = Value::String(std::move(s));
    } else if (conversion != 0) {
      return TypeError("Unknown conversion specifier");
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string piece,
                                   FormatSpec(in, v, spec));
    out += piece;
    if (absl::Status s = in.CheckStringSize(out.size()); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> OptionalChars(const Params& p,
                                                         size_t i,
                                                         std::string_view fn) {
  const Value v = p.get(i);
  if (v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) {
    return TypeError(Cat(fn, " arg must be None or str"));
  }
  return std::optional<std::string>(v.str());
}

// start/end arguments of find, count, startswith...
absl::Status Bounds(const Params& p, size_t i, int64_t* start, int64_t* end) {
  *start = 0;
  *end = std::numeric_limits<int64_t>::max();
  const Value s = p.get(i), e = p.get(i + 1);
  if (!s.is_none()) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(*start, ToInt(s, "start"));
  }
  if (!e.is_none()) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(*end, ToInt(e, "end"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> StrList(Interp& in, std::vector<std::string> parts) {
  if (absl::Status s = in.Charge(static_cast<int64_t>(parts.size())); !s.ok()) {
    return s;
  }
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& part : parts)
    items.push_back(Value::String(std::move(part)));
  return in.MakeList(std::move(items));
}

absl::StatusOr<Value> MethodObject::CallStr(Interp& in, const CallArgs& args) {
  const std::string& s = self_.str();
  const std::string_view n = name_;
  if (absl::Status st = in.Charge(static_cast<int64_t>(s.size() / 64));
      !st.ok()) {
    return st;
  }
  auto no_args = [&]() -> absl::Status {
    if (!args.pos.empty() || !args.kw.empty()) {
      return TypeError(Cat(n, "() takes no arguments"));
    }
    return absl::OkStatus();
  };
  if (n == "upper" || n == "lower" || n == "title" || n == "capitalize" ||
      n == "swapcase" || n == "casefold") {
    if (absl::Status st = no_args(); !st.ok()) return st;
    if (n == "upper") return Value::String(PyUpper(s));
    if (n == "lower" || n == "casefold") return Value::String(PyLower(s));
    if (n == "title") return Value::String(PyTitle(s));
    if (n == "capitalize") return Value::String(PyCapitalize(s));
    return Value::String(PySwapCase(s));
  }
  if (n == "strip" || n == "lstrip" || n == "rstrip") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind(n, args, {"chars"}));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::optional<std::string> chars,
                                   OptionalChars(p, 0, n));
    return Value::String(PyStrip(s, chars, n != "rstrip", n != "lstrip"));
  }
  if (n == "split" || n == "rsplit") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind(n, args, {"sep", "maxsplit"}));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::optional<std::string> sep,
                                   OptionalChars(p, 0, n));
    if (sep.has_value() && sep->empty()) return TypeError("empty separator");
    int64_t maxsplit = -1;
    if (p.has(1)) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(maxsplit, ToInt(p.get(1), "maxsplit"));
    }
    return StrList(in, PySplit(s, sep, maxsplit, n == "rsplit"));
  }
  if (n == "splitlines") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind(n, args, {"keepends"}));
    return StrList(in, PySplitLines(s, Truthy(p.get(0, Value::Bool(false)))));
  }
  if (n == "startswith" || n == "endswith") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p, Params::Bind(n, args, {"prefix", "start", "end"}, 1));
    int64_t start = 0, end = 0;
    if (absl::Status st = Bounds(p, 1, &start, &end); !st.ok()) return st;
    const std::u32string cps = Decode(s);
    const auto len = static_cast<int64_t>(cps.size());
    if (end > len) end = len;
    if (end < 0) end = std::max<int64_t>(end + len, 0);
    if (start < 0) start = std::max<int64_t>(start + len, 0);
    std::vector<Value> candidates;
    const Value prefix = p.get(0);
    if (prefix.is_list() && prefix.seq_kind() == SeqKind::kTuple) {
      candidates = prefix.items();
    } else {
      candidates.push_back(prefix);
    }
    for (const Value& c : candidates) {
      if (!c.is_string()) {
        return TypeError(Cat(
            n, " first arg must be str or a tuple of str, not ", TypeName(c)));
      }
      if (start > len) continue;
      const std::u32string sub = Decode(c.str());
      if (static_cast<int64_t>(sub.size()) > end - start) continue;
      const std::u32string_view window = std::u32string_view(cps).substr(
          static_cast<size_t>(start), static_cast<size_t>(end - start));
      const bool match = n == "startswith"
                             ? window.substr(0, sub.size()) == sub
                             : window.substr(window.size() - sub.size()) == sub;
      if (match) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (n == "find" || n == "rfind" || n == "index" || n == "rindex" ||
      n == "count") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p, Params::Bind(n, args, {"sub", "start", "end"}, 1));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string sub,
                                   ToStringArg(p.get(0), "substring"));
    int64_t start = 0, end = 0;
    if (absl::Status st = Bounds(p, 1, &start, &end); !st.ok()) return st;
    if (n == "count") return Value::Int(PyCount(s, sub, start, end));
    const int64_t r = PyFind(s, sub, start, end, n[0] == 'r');
    if (r < 0 && (n == "index" || n == "rindex")) {
      return TypeError("substring not found");
    }
    return Value::Int(r);
  }
  if (n == "replace") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p, Params::Bind(n, args, {"old", "new", "count"}, 2));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const std::string old, ToStringArg(p.get(0), "replace() argument 1"));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const std::string rep, ToStringArg(p.get(1), "replace() argument 2"));
    int64_t count = -1;
    if (p.has(2)) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(count, ToInt(p.get(2), "count"));
    }
    std::optional<std::string> r =
        PyReplace(s, old, rep, count, in.max_string_bytes());
    if (!r.has_value()) return in.CheckStringSize(in.max_string_bytes() + 1);
    return in.MakeString(*std::move(r));
  }
  if (n == "join") {
    if (args.pos.size() != 1 || !args.kw.empty()) {
      return TypeError("join() takes exactly one argument");
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items,
                                   in.Iterate(args.pos[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(Cat("sequence item ", i, ": expected str instance, ",
                             TypeName(items[i]), " found"));
      }
      if (i > 0) out += s;
      out += items[i].str();
      if (absl::Status st = in.CheckStringSize(out.size()); !st.ok()) return st;
    }
    return in.MakeString(std::move(out));
  }
  if (n == "center" || n == "ljust" || n == "rjust") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p, Params::Bind(n, args, {"width", "fillchar"}, 1));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t width,
                                   ToInt(p.get(0), "width"));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const std::string fill,
        ToStringArg(p.get(1, Value::String(" ")), "fillchar"));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string r, Pad(in, s, width, fill,
                                                      n == "center"  ? 0
                                                      : n == "ljust" ? -1
                                                                     : 1));
    return Value::String(std::move(r));
  }
  if (n == "zfill") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind(n, args, {"width"}, 1));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t width,
                                   ToInt(p.get(0), "width"));
    const int64_t len = CodePointCount(s);
    if (width <= len) return self_;
    if (absl::Status st = in.CheckStringSize(static_cast<size_t>(width));
        !st.ok()) {
      return st;
    }
    const std::string zeros(static_cast<size_t>(width - len), '0');
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      return Value::String(s.substr(0, 1) + zeros + s.substr(1));
    }
    return Value::String(zeros + s);
  }
  if (n == "partition" || n == "rpartition") {
    if (args.pos.size() != 1 || !args.kw.empty()) {
      return TypeError(Cat(n, "() takes exactly one argument"));
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string sep,
                                   ToStringArg(args.pos[0], "sep"));
    if (sep.empty()) return TypeError("empty separator");
    const size_t p = n == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> parts;
    if (p == std::string::npos) {
      if (n == "partition") {
        parts = {Value::String(s), Value::String(""), Value::String("")};
      } else {
        parts = {Value::String(""), Value::String(""), Value::String(s)};
      }
    } else {
      parts = {Value::String(s.substr(0, p)), Value::String(sep),
               Value::String(s.substr(p + sep.size()))};
    }
    return in.MakeList(std::move(parts), SeqKind::kTuple);
  }
  if (n == "removeprefix" || n == "removesuffix") {
    if (args.pos.size() != 1 || !args.kw.empty()) {
      return TypeError(Cat(n, "() takes exactly one argument"));
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string a,
                                   ToStringArg(args.pos[0], n));
    if (n == "removeprefix" && s.compare(0, a.size(), a) == 0) {
      return Value::String(s.substr(a.size()));
    }
    if (n == "removesuffix" && !a.empty() && s.size() >= a.size() &&
        s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value::String(s.substr(0, s.size() - a.size()));
    }
    return self_;
  }
  if (n == "format") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string r, StrFormat(in, s, args));
    return in.MakeString(std::move(r));
  }
  if (n.substr(0, 2) == "is") {
    if (absl::Status st = no_args(); !st.ok()) return st;
    const std::u32string cps = Decode(s);
    if (n == "islower") return Value::Bool(PyIsLower(s));
    if (n == "isupper") return Value::Bool(PyIsUpper(s));
    if (n == "isascii") return Value::Bool(IsAscii(s));
    if (cps.empty()) return Value::Bool(false);
    bool all = true;
    for (char32_t c : cps) {
      const bool digit = c >= '0' && c <= '9';
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= 0x80 && IsCased(c));
      bool ok = false;
      if (n == "isdigit" || n == "isdecimal" || n == "isnumeric") {
        ok = digit;
      } else if (n == "isalpha") {
        ok = alpha;
      } else if (n == "isalnum") {
        ok = alpha || digit;
      } else if (n == "isspace") {
        ok = IsSpace(c);
      } else {
        return Unsupported(Cat("str.", n));
      }
      all = all && ok;
    }
    return Value::Bool(all);
  }
  return Unsupported(Cat("str.", n));
}

}  // namespace

std::optional<Value> BoundMethod(const Value& obj, std::string_view name) {
  bool found = false;
  switch (obj.kind()) {
    case Kind::kString:
      found = In(kStrMethods, name);
      break;
    case Kind::kDict:
      found = In(kDictMethods, name) && name != "fromkeys";
      break;
    case Kind::kList:
      found = obj.seq_kind() == SeqKind::kList ? In(kListMethods, name)
              : obj.seq_kind() == SeqKind::kTuple ||
                      obj.seq_kind() == SeqKind::kRange
                  ? In(kTupleMethods, name)
                  : false;
      break;
    case Kind::kObject:
      if (IsLoop(obj)) {
        found = name == "cycle" || name == "changed";
      } else if (dynamic_cast<Cycler*>(obj.object()) != nullptr) {
        if (name == "current") {
          return static_cast<Cycler*>(obj.object())->current();
        }
        found = name == "next" || name == "reset";
      }
      break;
    default:
      break;
  }
  if (!found) return std::nullopt;
  return Value::MakeObject(std::make_shared<MethodObject>(obj, name));
}

bool IsUnsafeMethod(const Value& obj, std::string_view name) {
  if (obj.is_dict()) return In(kDictUnsafe, name);
  if (obj.is_list() && obj.seq_kind() == SeqKind::kList) {
    return In(kListUnsafe, name);
  }
  return false;
}

// ---- filters ---------------------------------------------------------------

namespace {

std::vector<std::string_view> SplitOn(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (true) {
    const size_t j = s.find(sep, i);
    parts.push_back(s.substr(i, j == std::string_view::npos ? j : j - i));
    if (j == std::string_view::npos) return parts;
    i = j + 1;
  }
}

Value IgnoreCase(const Value& v) {
  if (v.is_string()) return Value::String(PyLower(v.str()));
  return v;
}

// jinja2's _prepare_attribute_parts: "a.0.b" -> "a", 0, "b".
std::vector<Value> AttributeParts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none()) return parts;
  if (!attribute.is_string()) {
    parts.push_back(attribute);
    return parts;
  }
  for (std::string_view part : SplitOn(attribute.str(), '.')) {
    if (!part.empty() &&
        part.find_first_not_of("0123456789") == std::string_view::npos &&
        part.size() < 19) {
      parts.push_back(Value::Int(std::stoll(std::string(part))));
    } else {
      parts.push_back(Value::String(std::string(part)));
    }
  }
  return parts;
}

// make_attrgetter: item[part][part]..., then default, then postprocess.
absl::StatusOr<Value> GetPath(Interp& in, Value item,
                              const std::vector<Value>& parts,
                              const Value* default_value, bool ignore_case) {
  for (const Value& part : parts) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(item, in.GetItem(item, part));
    if (default_value != nullptr && !default_value->is_none() &&
        item.is_undefined()) {
      item = *default_value;
    }
  }
  return ignore_case ? IgnoreCase(item) : item;
}

// A stable sort by `key` that records the first comparison error.
absl::Status SortBy(std::vector<size_t>* order, const std::vector<Value>& keys,
                    bool reverse) {
  absl::Status error;
  std::stable_sort(order->begin(), order->end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    absl::StatusOr<int> c =
        reverse ? Compare(keys[b], keys[a]) : Compare(keys[a], keys[b]);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return *c < 0;
  });
  return error;
}

absl::StatusOr<Value> Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return Value::Int(0);
    case Kind::kString:
      return Value::Int(CodePointCount(v.str()));
    case Kind::kList:
      return Value::Int(static_cast<int64_t>(v.items().size()));
    case Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.dict().items.size()));
    default:
      return TypeError(Cat("object of type '", TypeName(v), "' has no len()"));
  }
}

absl::StatusOr<Value> FilterTojson(Interp& in, const Value& v,
                                   const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("tojson", args,
                   {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions o;
  o.max_bytes = in.max_string_bytes();
  o.ensure_ascii = Truthy(p.get(0, Value::Bool(false)));
  o.sort_keys = Truthy(p.get(3, Value::Bool(false)));
  const Value indent = p.get(1);
  if (!indent.is_none()) {
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.str();
    } else if (indent.is_integral()) {
      if (absl::Status s = in.CheckStringSize(
              static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)));
          !s.ok()) {
        return s;
      }
      o.indent = std::string(
          static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
    } else {
      return TypeError(Cat("can't multiply sequence by non-int of type '",
                           TypeName(indent), "'"));
    }
  }
  const Value separators = p.get(2);
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.items().size() != 2 ||
        !separators.items()[0].is_string() ||
        !separators.items()[1].is_string()) {
      return TypeError("separators must be a pair of strings");
    }
    o.has_separators = true;
    o.item_separator = separators.items()[0].str();
    o.key_separator = separators.items()[1].str();
  }
  KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string s, ToJson(v, o));
  return in.MakeString(std::move(s));
}

absl::StatusOr<Value> FilterIndent(Interp& in, const Value& v,
                                   const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("indent", args, {"width", "first", "blank"}));
  if (!v.is_string()) {
    if (v.is_undefined()) return UndefinedError(v);
    return TypeError(Cat("unsupported operand type(s) for +=: '", TypeName(v),
                         "' and 'str'"));
  }
  const Value width = p.get(0, Value::Int(4));
  std::string indention;
  if (width.is_string()) {
    indention = width.str();
  } else if (width.is_integral()) {
    const int64_t w = std::max<int64_t>(width.as_int(), 0);
    if (absl::Status s = in.CheckStringSize(static_cast<size_t>(w)); !s.ok()) {
      return s;
    }
    indention = std::string(static_cast<size_t>(w), ' ');
  } else {
    return TypeError(Cat("can't multiply sequence by non-int of type '",
                         TypeName(width), "'"));
  }
  const bool first = Truthy(p.get(1, Value::Bool(false)));
  const bool blank = Truthy(p.get(2, Value::Bool(false)));
  const std::vector<std::string> lines = PySplitLines(v.str() + "\n", false);
  if (absl::Status s = in.CheckStringSize(
          v.str().size() + lines.size() * (indention.size() + 1) +
          indention.size());
      !s.ok()) {
    return s;
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += indention;
        rv += lines[i];
      }
    }
  }
  if (first) rv = indention + rv;
  return in.MakeString(std::move(rv), v.safe());
}

absl::StatusOr<Value> FilterInt(Interp& in, const Value& v,
                                const CallArgs& args) {
  (void)in;
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p, Params::Bind("int", args, {"default", "base"}));
  const Value def = p.get(0, Value::Int(0));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t base,
                                 ToInt(p.get(1, Value::Int(10)), "base"));
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_integral()) return Value::Int(v.as_int());
  auto from_double = [&](double d) -> absl::StatusOr<Value> {
    if (std::isnan(d)) return def;
    if (!std::isfinite(d))
      return TypeError("cannot convert float infinity to integer");
    const double t = std::trunc(d);
    if (t < -9.2233720368547758e18 || t >= 9.2233720368547758e18)
      return Overflow();
    return Value::Int(static_cast<int64_t>(t));
  };
  if (v.kind() == Kind::kFloat) return from_double(v.as_double());
  if (v.is_string()) {
    if (std::optional<int64_t> i =
            PyParseInt(v.str(), static_cast<int>(base))) {
      return Value::Int(*i);
    }
    if (std::optional<double> d = PyParseFloat(v.str())) return from_double(*d);
  }
  return def;
}

absl::StatusOr<Value> FilterRound(const Value& v, const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p, Params::Bind("round", args, {"precision", "method"}));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t precision,
                                 ToInt(p.get(0, Value::Int(0)), "precision"));
  const Value method = p.get(1, Value::String("common"));
  if (!method.is_string() ||
      (method.str() != "common" && method.str() != "ceil" &&
       method.str() != "floor")) {
    return TypeError("method must be common, ceil or floor");
  }
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number()) {
    return TypeError(
        Cat("type ", TypeName(v), " doesn't define __round__ method"));
  }
  if (method.str() != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    double r = method.str() == "ceil" ? std::ceil(x) : std::floor(x);
    if (r == 0) r = 0.0;  // Python's math.ceil/floor return ints: no -0.0
    return Value::Float(r / scale);
  }
  if (v.is_integral()) {
    if (precision >= 0) return Value::Int(v.as_int());
    if (precision < -18) return Value::Int(0);
    int64_t pow10 = 1;
    for (int64_t i = 0; i < -precision; ++i) pow10 *= 10;
    const int64_t x = v.as_int();
    int64_t q = x / pow10, r = x % pow10;
    if (r < 0) {
      --q;
      r += pow10;
    }
    if (2 * r > pow10 || (2 * r == pow10 && (q % 2 != 0))) ++q;
    int64_t out = 0;
    if (__builtin_mul_overflow(q, pow10, &out)) return Overflow();
    return Value::Int(out);
  }
  const double x = v.as_double();
  if (!std::isfinite(x)) return Value::Float(x);
  if (precision > 300) return Value::Float(x);
  if (precision >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
    return Value::Float(std::strtod(buf, nullptr));
  }
  if (precision < -308) return Value::Float(std::copysign(0.0, x));
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return Value::Float(std::nearbyint(x / scale) * scale);
}

// select/reject/selectattr/rejectattr.
absl::StatusOr<Value> SelectOrReject(Interp& in, const Value& v,
                                     const CallArgs& args, bool select,
                                     bool lookup_attr) {
  if (!Truthy(v)) return Value::Seq({});
  size_t off = 0;
  std::vector<Value> parts;
  if (lookup_attr) {
    if (args.pos.empty())
      return TypeError("Missing parameter for attribute name");
    parts = AttributeParts(args.pos[0]);
    off = 1;
  }
  const bool has_test = args.pos.size() > off;
  std::string test;
  CallArgs test_args;
  if (has_test) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(test, in.ToStr(args.pos[off]));
    test_args.pos.assign(
        args.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1,
        args.pos.end());
    test_args.kw = args.kw;
  }
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out;
  for (const Value& item : items) {
    Value x = item;
    if (lookup_attr) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(x,
                                     GetPath(in, item, parts, nullptr, false));
    }
    bool r = false;
    if (has_test) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(r, in.ApplyTest(test, x, test_args));
    } else {
      r = Truthy(x);
    }
    if (r == select) out.push_back(item);
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterMap(Interp& in, const Value& v,
                                const CallArgs& args) {
  if (!Truthy(v)) return Value::Seq({});
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out;
  out.reserve(items.size());
  const auto attr_it =
      std::find_if(args.kw.begin(), args.kw.end(),
                   [](const auto& kv) { return kv.first == "attribute"; });
  if (args.pos.empty() && attr_it != args.kw.end()) {
    std::optional<Value> def;
    for (const auto& [k, value] : args.kw) {
      if (k == "default") {
        def = value;
      } else if (k != "attribute") {
        return TypeError(Cat("Unexpected keyword argument '", k, "'"));
      }
    }
    const std::vector<Value> parts = AttributeParts(attr_it->second);
    for (const Value& item : items) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(
          Value x,
          GetPath(in, item, parts, def.has_value() ? &*def : nullptr, false));
      out.push_back(std::move(x));
    }
    return in.MakeList(std::move(out));
  }
  if (args.pos.empty()) return TypeError("map requires a filter argument");
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string name, in.ToStr(args.pos[0]));
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value& item : items) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(Value x, in.ApplyFilter(name, item, rest));
    out.push_back(std::move(x));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterJoin(Interp& in, const Value& v,
                                 const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p, Params::Bind("join", args, {"d", "attribute"}));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string d,
                                 in.ToStr(p.get(0, Value::String(""))));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  const std::vector<Value> parts = AttributeParts(p.get(1));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value x = items[i];
    if (p.has(1) && !p.get(1).is_none()) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(x, GetPath(in, x, parts, nullptr, false));
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(x));
    if (i > 0) out += d;
    out += s;
    if (absl::Status st = in.CheckStringSize(out.size()); !st.ok()) return st;
  }
  return in.MakeString(std::move(out));
}

absl::StatusOr<Value> FilterSort(Interp& in, const Value& v,
                                 const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  const bool reverse = Truthy(p.get(0, Value::Bool(false)));
  const bool ignore_case = !Truthy(p.get(1, Value::Bool(false)));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  // make_multi_attrgetter: the key is a list of one value per attribute.
  std::vector<std::vector<Value>> paths;
  const Value attribute = p.get(2);
  if (attribute.is_string()) {
    for (std::string_view a : SplitOn(attribute.str(), ',')) {
      paths.push_back(AttributeParts(Value::String(std::string(a))));
    }
  } else {
    paths.push_back(AttributeParts(attribute));
  }
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    std::vector<Value> key;
    for (const auto& path : paths) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(
          Value k, GetPath(in, item, path, nullptr, ignore_case));
      key.push_back(std::move(k));
    }
    keys.push_back(Value::Seq(std::move(key)));
  }
  if (absl::Status s = in.Charge(static_cast<int64_t>(items.size()) * 16);
      !s.ok()) {
    return s;
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (absl::Status s = SortBy(&order, keys, reverse); !s.ok()) return s;
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(items[i]);
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterDictsort(Interp& in, const Value& v,
                                     const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  const bool ignore_case = !Truthy(p.get(0, Value::Bool(false)));
  const Value by = p.get(1, Value::String("key"));
  if (!by.is_string() || (by.str() != "key" && by.str() != "value")) {
    return TypeError("You can only sort by either \"key\" or \"value\"");
  }
  const bool reverse = Truthy(p.get(2, Value::Bool(false)));
  if (!v.is_dict()) {
    return TypeError(
        Cat("'", TypeName(v), "' object has no attribute 'items'"));
  }
  const auto& items = v.dict().items;
  std::vector<Value> keys;
  for (const auto& [k, val] : items) {
    const Value& x = by.str() == "key" ? k : val;
    keys.push_back(ignore_case ? IgnoreCase(x) : x);
  }
  if (absl::Status s = in.Charge(static_cast<int64_t>(items.size()) * 16);
      !s.ok()) {
    return s;
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (absl::Status s = SortBy(&order, keys, reverse); !s.ok()) return s;
  std::vector<Value> out;
  for (size_t i : order) {
    out.push_back(
        Value::Seq({items[i].first, items[i].second}, SeqKind::kTuple));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterUnique(Interp& in, const Value& v,
                                   const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("unique", args, {"case_sensitive", "attribute"}));
  const bool ignore_case = !Truthy(p.get(0, Value::Bool(false)));
  const std::vector<Value> parts = AttributeParts(p.get(1));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  absl::flat_hash_map<size_t, std::vector<Value>> seen;
  std::vector<Value> out;
  for (const Value& item : items) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Value key, GetPath(in, item, parts, nullptr, ignore_case));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const size_t h, Hash(key));
    std::vector<Value>& bucket = seen[h];
    if (std::any_of(bucket.begin(), bucket.end(),
                    [&](const Value& k) { return Equal(k, key); })) {
      continue;
    }
    if (absl::Status s = in.Charge(static_cast<int64_t>(bucket.size()));
        !s.ok()) {
      return s;
    }
    bucket.push_back(key);
    out.push_back(item);
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterMinMax(Interp& in, const Value& v,
                                   const CallArgs& args, bool max) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  const bool ignore_case = !Truthy(p.get(0, Value::Bool(false)));
  const std::vector<Value> parts = AttributeParts(p.get(1));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  if (items.empty()) {
    return Value::Undefined("No aggregated item, sequence was empty.");
  }
  size_t best = 0;
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      Value best_key, GetPath(in, items[0], parts, nullptr, ignore_case));
  for (size_t i = 1; i < items.size(); ++i) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        Value key, GetPath(in, items[i], parts, nullptr, ignore_case));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const int c, Compare(key, best_key));
    if (max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

absl::StatusOr<Value> FilterSum(Interp& in, const Value& v,
                                const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p, Params::Bind("sum", args, {"attribute", "start"}));
  Value acc = p.get(1, Value::Int(0));
  if (acc.is_string()) {
    return TypeError("sum() can't sum strings [use ''.join(seq) instead]");
  }
  const std::vector<Value> parts = AttributeParts(p.get(0));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  for (const Value& item : items) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value x,
                                   GetPath(in, item, parts, nullptr, false));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(acc, Arith(in, Tok::kAdd, acc, x));
  }
  return acc;
}

absl::StatusOr<Value> FilterBatch(Interp& in, const Value& v,
                                  const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("batch", args, {"linecount", "fill_with"}, 1));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t n, ToInt(p.get(0), "linecount"));
  const Value fill = p.get(1);
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out;
  std::vector<Value> tmp;
  for (const Value& item : items) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::Seq(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!fill.is_none() && static_cast<int64_t>(tmp.size()) < n) {
      if (absl::Status s = in.Charge(n); !s.ok()) return s;
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(fill);
    }
    out.push_back(Value::Seq(std::move(tmp)));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterSlice(Interp& in, const Value& v,
                                  const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p, Params::Bind("slice", args, {"slices", "fill_with"}, 1));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t slices,
                                 ToInt(p.get(0), "slices"));
  if (slices <= 0) return TypeError("integer division or modulo by zero");
  const Value fill = p.get(1);
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> seq, in.Iterate(v));
  const auto length = static_cast<int64_t>(seq.size());
  const int64_t items_per_slice = length / slices;
  const int64_t slices_with_extra = length % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  if (absl::Status s = in.Charge(slices); !s.ok()) return s;
  for (int64_t i = 0; i < slices; ++i) {
    const int64_t start = offset + i * items_per_slice;
    if (i < slices_with_extra) ++offset;
    const int64_t end = offset + (i + 1) * items_per_slice;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && i >= slices_with_extra) tmp.push_back(fill);
    out.push_back(Value::Seq(std::move(tmp)));
  }
  return in.MakeList(std::move(out));
}

absl::StatusOr<Value> FilterTruncate(Interp& in, const Value& v,
                                     const CallArgs& args) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(
      const Params p,
      Params::Bind("truncate", args, {"length", "killwords", "end", "leeway"}));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t length,
                                 ToInt(p.get(0, Value::Int(255)), "length"));
  const bool killwords = Truthy(p.get(1, Value::Bool(false)));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string end,
                                 in.ToStr(p.get(2, Value::String("..."))));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t leeway,
                                 ToInt(p.get(3, Value::Int(5)), "leeway"));
  const int64_t end_len = CodePointCount(end);
  if (length < end_len) {
    return TypeError(Cat("expected length >= ", end_len, ", got ", length));
  }
  if (leeway < 0) return TypeError(Cat("expected leeway >= 0, got ", leeway));
  // jinja2 measures and slices the value itself, without str().
  if (!v.is_string()) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value len, Length(v));
    if (len.as_int() <= length + leeway) return v;
    return Unsupported(Cat("truncate of a long ", TypeName(v)));
  }
  const std::string& s = v.str();
  const std::u32string cps = Decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return v;
  std::string head = Sub(cps, 0, static_cast<size_t>(length - end_len));
  if (!killwords) {
    const size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head = head.substr(0, sp);
  }
  return Value::String(head + end);
}

absl::StatusOr<Value> ToList(Interp& in, const Value& v) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  return in.MakeList(std::move(items));
}

absl::StatusOr<Value> FirstOrLast(Interp& in, const Value& v, bool last) {
  if (!v.is_undefined() && !v.is_list() && !v.is_dict() && !v.is_string()) {
    return TypeError(Cat("'", TypeName(v), "' object is not iterable"));
  }
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items, in.Iterate(v));
  if (items.empty()) {
    return Value::Undefined(last ? "No last item, sequence was empty."
                                 : "No first item, sequence was empty.");
  }
  return last ? items.back() : items.front();
}

absl::StatusOr<Value> FilterReverse(Interp& in, const Value& v) {
  if (v.is_string()) {
    std::u32string cps = Decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::String(Encode(cps));
  }
  KVSERVE_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::reverse(items.begin(), items.end());
  return in.MakeList(std::move(items));
}

}  // namespace

absl::StatusOr<Value> CallFilter(Interp& in, std::string_view name, Value v,
                                 CallArgs args) {
  auto no_args = [&]() -> absl::Status {
    if (!args.pos.empty() || !args.kw.empty()) {
      return TypeError(Cat(name, "() takes no arguments"));
    }
    return absl::OkStatus();
  };
  if (name == "tojson") return FilterTojson(in, v, args);
  if (name == "trim") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind("trim", args, {"chars"}));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::optional<std::string> chars,
                                   OptionalChars(p, 0, "strip"));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(v));
    return Value::String(PyStrip(s, chars, true, true), v.safe());
  }
  if (name == "length" || name == "count") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    if (v.is_string()) {
      if (absl::Status s = in.Charge(static_cast<int64_t>(v.str().size() / 64));
          !s.ok()) {
        return s;
      }
    }
    return Length(v);
  }
  if (name == "items") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    if (v.is_undefined()) return Value::Seq({});
    if (!v.is_dict())
      return TypeError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict().items) {
      out.push_back(Value::Seq({k, val}, SeqKind::kTuple));
    }
    return in.MakeList(std::move(out));
  }
  if (name == "default" || name == "d") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p,
        Params::Bind("default", args, {"default_value", "boolean"}));
    const bool boolean = Truthy(p.get(1, Value::Bool(false)));
    if (v.is_undefined() || (boolean && !Truthy(v))) {
      return p.get(0, Value::String(""));
    }
    return v;
  }
  if (name == "indent") return FilterIndent(in, v, args);
  if (name == "select" || name == "reject") {
    return SelectOrReject(in, v, args, name == "select", false);
  }
  if (name == "selectattr" || name == "rejectattr") {
    return SelectOrReject(in, v, args, name == "selectattr", true);
  }
  if (name == "map") return FilterMap(in, v, args);
  if (name == "unique") return FilterUnique(in, v, args);
  if (name == "join") return FilterJoin(in, v, args);
  if (name == "sort") return FilterSort(in, v, args);
  if (name == "dictsort") return FilterDictsort(in, v, args);
  if (name == "min" || name == "max")
    return FilterMinMax(in, v, args, name == "max");
  if (name == "sum") return FilterSum(in, v, args);
  if (name == "batch") return FilterBatch(in, v, args);
  if (name == "slice") return FilterSlice(in, v, args);
  if (name == "truncate") return FilterTruncate(in, v, args);
  if (name == "int") return FilterInt(in, v, args);
  if (name == "round") return FilterRound(v, args);
  if (name == "safe" || name == "string" || name == "e" || name == "escape" ||
      name == "forceescape") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    if (name == "string" && v.is_string()) return v;
    if ((name == "e" || name == "escape") && v.is_string() && v.safe())
      return v;
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
    if (name == "string") return Value::String(std::move(s));
    if (name == "safe") return Value::String(std::move(s), true);
    return in.MakeString(HtmlEscape(s), true);
  }
  if (name == "list") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    return ToList(in, v);
  }
  if (name == "first" || name == "last") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    return FirstOrLast(in, v, name == "last");
  }
  if (name == "reverse") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    return FilterReverse(in, v);
  }
  if (name == "lower" || name == "upper" || name == "title" ||
      name == "capitalize" || name == "wordcount") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(v));
    if (name == "lower") return Value::String(PyLower(s));
    if (name == "upper") return Value::String(PyUpper(s));
    if (name == "title") return Value::String(JinjaTitle(s));
    if (name == "capitalize") return Value::String(PyCapitalize(s));
    return Value::Int(WordCount(s));
  }
  if (name == "replace") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        const Params p,
        Params::Bind("replace", args, {"old", "new", "count"}, 2));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(v));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string old, in.ToStr(p.get(0)));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string rep, in.ToStr(p.get(1)));
    int64_t count = -1;
    if (!p.get(2).is_none()) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(count, ToInt(p.get(2), "count"));
    }
    std::optional<std::string> r =
        PyReplace(s, old, rep, count, in.max_string_bytes());
    if (!r.has_value()) return in.CheckStringSize(in.max_string_bytes() + 1);
    return in.MakeString(*std::move(r));
  }
  if (name == "center") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind("center", args, {"width"}));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t width,
                                   ToInt(p.get(0, Value::Int(80)), "width"));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(v));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string r, Pad(in, s, width, " ", 0));
    return Value::String(std::move(r));
  }
  if (name == "format") {
    if (!args.pos.empty() && !args.kw.empty()) {
      return TypeError(
          "can't handle positional and keyword arguments at the same time");
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(v));
    Value operand;
    if (!args.kw.empty()) {
      DictBuilder b;
      for (const auto& [k, val] : args.kw) b.Set(Value::String(k), val);
      operand = b.Build();
    } else {
      operand = Value::Seq(args.pos, SeqKind::kTuple);
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::string r,
                                   PercentFormat(in, s, operand));
    return in.MakeString(std::move(r));
  }
  if (name == "abs") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    if (v.is_integral()) {
      if (v.as_int() == std::numeric_limits<int64_t>::min()) return Overflow();
      return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (v.kind() == Kind::kFloat) return Value::Float(std::fabs(v.as_double()));
    if (v.is_undefined()) return UndefinedError(v);
    return TypeError(Cat("bad operand type for abs(): '", TypeName(v), "'"));
  }
  if (name == "float") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind("float", args, {"default"}));
    if (v.is_undefined()) return UndefinedError(v);
    if (v.is_number()) return Value::Float(v.as_double());
    if (v.is_string()) {
      if (std::optional<double> d = PyParseFloat(v.str()))
        return Value::Float(*d);
    }
    return p.get(0, Value::Float(0.0));
  }
  if (name == "attr") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind("attr", args, {"name"}, 1));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string attr, in.ToStr(p.get(0)));
    // Python's getattr only: a dict's keys are not attributes here.
    if (v.kind() == Kind::kObject || v.is_undefined())
      return in.GetAttr(v, attr);
    if (std::optional<Value> m = BoundMethod(v, attr)) return *std::move(m);
    return Value::Undefined(
        Cat("'", TypeName(v), " object' has no attribute '", attr, "'"));
  }
  static constexpr std::string_view kUnsupported[] = {
      "filesizeformat", "groupby", "pprint",   "random", "striptags",
      "urlencode",      "urlize",  "wordwrap", "xmlattr"};
  if (In(kUnsupported, name)) return Unsupported(Cat("filter '", name, "'"));
  return TypeError(Cat("no filter named '", name, "'"));
}

// ---- tests -----------------------------------------------------------------

absl::StatusOr<bool> CallTest(Interp& in, std::string_view name, const Value& v,
                              CallArgs args) {
  auto arg = [&](std::string_view param) -> absl::StatusOr<Value> {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Params p,
                                   Params::Bind(name, args, {param}, 1));
    return p.get(0);
  };
  auto no_args = [&]() -> absl::Status {
    if (!args.pos.empty() || !args.kw.empty()) {
      return TypeError(Cat("test '", name, "' takes no arguments"));
    }
    return absl::OkStatus();
  };
  if (name == "defined" || name == "undefined") {
    if (absl::Status s = no_args(); !s.ok()) return s;
    return v.is_undefined() == (name == "undefined");
  }
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.as_bool();
  if (name == "false") return v.kind() == Kind::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  }
  if (name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_dict() ||
           (v.is_list() && v.seq_kind() != SeqKind::kDictKeys &&
            v.seq_kind() != SeqKind::kDictValues &&
            v.seq_kind() != SeqKind::kDictItems);
  }
  if (name == "callable") {
    return v.is_undefined() ||
           (v.kind() == Kind::kObject && v.object()->callable());
  }
  if (name == "escaped") return v.is_string() && v.safe();
  if (name == "lower" || name == "upper") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string s, in.ToStr(v));
    return name == "lower" ? PyIsLower(s) : PyIsUpper(s);
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    Value divisor = Value::Int(2);
    if (name == "divisibleby") {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(divisor, arg("num"));
    }
    if (!v.is_number() || !divisor.is_number()) {
      if (v.is_undefined()) return UndefinedError(v);
      return TypeError(Cat("unsupported operand type(s) for %: '", TypeName(v),
                           "' and '", TypeName(divisor), "'"));
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value m,
                                   Arith(in, Tok::kMod, v, divisor));
    return Equal(m, Value::Int(name == "odd" ? 1 : 0));
  }
  if (name == "sameas") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value other, arg("other"));
    if (v.kind() != other.kind()) return false;
    switch (v.kind()) {
      case Kind::kNone:
        return true;
      case Kind::kBool:
      case Kind::kInt:
        return v.as_int() == other.as_int();
      case Kind::kFloat:
        return v.as_double() == other.as_double();
      case Kind::kUndefined:
        return false;
      default:
        return v.identity() == other.identity();
    }
  }
  if (name == "in") {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value seq, arg("seq"));
    return Contains(seq, v);
  }
  if (name == "filter" || name == "test") {
    // Whether the name is one of the environment's filters or tests.
    return v.is_string() &&
           (name == "filter" ? IsFilterName(v.str()) : IsTestName(v.str()));
  }
  static constexpr std::pair<std::string_view, CmpOp> kCompare[] = {
      {"==", CmpOp::kEq},       {"eq", CmpOp::kEq},
      {"equalto", CmpOp::kEq},  {"!=", CmpOp::kNe},
      {"ne", CmpOp::kNe},       {">", CmpOp::kGt},
      {"gt", CmpOp::kGt},       {"greaterthan", CmpOp::kGt},
      {">=", CmpOp::kGe},       {"ge", CmpOp::kGe},
      {"<", CmpOp::kLt},        {"lt", CmpOp::kLt},
      {"lessthan", CmpOp::kLt}, {"<=", CmpOp::kLe},
      {"le", CmpOp::kLe}};
  for (const auto& [n, op] : kCompare) {
    if (n != name) continue;
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value other, arg("b"));
    if (op == CmpOp::kEq) return Equal(v, other);
    if (op == CmpOp::kNe) return !Equal(v, other);
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const int c, Compare(v, other));
    if ((v.kind() == Kind::kFloat && std::isnan(v.as_double())) ||
        (other.kind() == Kind::kFloat && std::isnan(other.as_double()))) {
      return false;
    }
    switch (op) {
      case CmpOp::kLt:
        return c < 0;
      case CmpOp::kLe:
        return c <= 0;
      case CmpOp::kGt:
        return c > 0;
      default:
        return c >= 0;
    }
  }
  return TypeError(Cat("No test named '", name, "' found."));
}

}  // namespace kvserve::jinja
