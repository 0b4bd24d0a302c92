// Tests of the Jinja interpreter against outputs of Python's jinja2 3.1.2
// in transformers' environment (expected strings produced with
// /usr/bin/python3 and tests/testing/jinja_reference.py), plus its errors
// and bounds.
#include "core/chat/jinja.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> Render(std::string_view source,
                                   const nlohmann::ordered_json& context = {},
                                   const RenderOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return (*t)->Render(context, options);
}

struct Case {
  std::string_view source;
  std::string_view expected;
};

// Rendered with this context by jinja2.
const char kContext[] =
    R"json({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], "n": 3, "x": 2.5, "s": "h\u00e9llo w\u00f6rld", "none": null, "l": [3, 1, 2], "d": {"b": 1, "a": [1, "x"]}, "people": [{"name": "Ann", "age": 31}, {"name": "bob", "age": 25}, {"name": "Cy"}]})json";

constexpr Case kCases[] = {
    {"{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 2.0 }}{{ none }}{{ true }}{{ [1, 'x', "
     "none] }}{{ {'k': 'v'} }}{{ (1,) }}",
     "ab12.0NoneTrue[1, 'x', None]{'k': 'v'}(1,)"},
    {"{{ 1e16 }} {{ 1e-05 }} {{ 0.1 }} {{ 1/3 }} {{ -0.0 }} {{ 2**62 }} {{ 7 "
     "// -2 }} {{ -7 % 3 }} {{ 7.5 % 2 }}",
     "1e+16 1e-05 0.1 0.3333333333333333 -0.0 4611686018427387904 -4 2 1.5"},
    {"{{ \"it's\" }} {{ [\"it's\", 'a\"b', 'tab\\t', 'é', '\\x00'] }}",
     "it's [\"it's\", 'a\"b', 'tab\\t', 'é', '\\x00']"},
    {"{{ 'a' ~ 1 ~ none ~ [2] }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ (1, 2) + "
     "(3,) }}",
     "a1None[2] abab [1, 2] (1, 2, 3)"},
    {"{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 3 not in l }} {{ "
     "'b' in d }} {{ not none }}",
     "True True True False True True"},
    {"{{ x if n > 2 else 'no' }}|{{ 'y' if false }}|{{ none or 'dflt' }}|{{ 0 "
     "and 1 }}",
     "2.5||dflt|0"},
    {"{{ s|length }} {{ s[1] }} {{ s[1:4] }} {{ s[::-1] }} {{ l[-1] }} {{ "
     "l[1:] }} {{ l[::-2] }}",
     "11 é éll dlröw olléh 2 [1, 2] [2, 3]"},
    {"{{ s|upper }} {{ s|title }} {{ 'hello'|capitalize }} {{ '  pad  '|trim "
     "}} {{ 'xxhixx'|trim('x') }}",
     "HÉLLO WÖRLD Héllo Wörld Hello pad hi"},
    {"{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(None, 1) }} "
     "{{ 'a,b,c'.rsplit(',', 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }}",
     "['héllo', 'wörld'] ['a', 'b', '', 'c'] ['a', 'b c'] ['a,b', 'c'] ['l1', "
     "'l2', 'l3']"},
    {"{{ s.startswith('hé') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('w') }} "
     "{{ s.count('l') }} {{ s.replace('l', 'L', 2) }} {{ '-'.join(['a', 'b']) "
     "}}",
     "True True 6 3 héLLo wörld a-b"},
    {"{{ '  x '.strip() }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ "
     "'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'ab cd'.title() }}",
     "x|x |  x|ABC|abc|Ab Cd"},
    {"{{ d.get('b') }} {{ d.get('z', 'none') }} {{ d.keys()|list }} {{ "
     "d.values()|list }} {{ d.items()|list }} {{ l.index(2) }} {{ l.count(3) "
     "}}",
     "1 none ['b', 'a'] [1, [1, 'x']] [('b', 1), ('a', [1, 'x'])] 2 1"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "b=1;a=[1, 'x'];"},
    {"{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}",
     "a=[1, 'x'];b=1;"},
    {"{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ loop.index0 "
     "}} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }} {{ "
     "loop.last }} {{ loop.previtem.role if loop.previtem }} {{ "
     "loop.nextitem.role if loop.nextitem }} {{ loop.cycle('odd', 'even') "
     "}}\n{% endfor %}",
     "1/2 0 2 1 True False  assistant odd\n2/2 1 1 0 False True user  even\n"},
    {"{% for i in l if i > 1 %}{{ i }}:{{ loop.index }}/{{ loop.length }} {% "
     "else %}empty{% endfor %}",
     "3:1/2 2:2/2 "},
    {"{% for i in [] %}x{% else %}empty{% endfor %}", "empty"},
    {"{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if "
     "i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "135"},
    {"{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }},{% endfor %}", "3,7,"},
    {"{% set a, b = 'xy' %}{{ b }}{{ a }}", "yx"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }} "
     "{% endfor %}{{ x }}",
     "110 120 1"},
    {"{% set ns = namespace(total=0, names=[]) %}{% for p in people %}{% set "
     "ns.total = ns.total + (p.age or 0) %}{% set ns.names = ns.names + "
     "[p.name] %}{% endfor %}{{ ns.total }} {{ ns.names }}",
     "56 ['Ann', 'bob', 'Cy']"},
    {"{% set block %}inner {{ n }}{% endset %}[{{ block }}]{% set up | upper "
     "%}shout{% endset %}{{ up }}",
     "[inner 3]SHOUT"},
    {"{% filter upper %}abc {{ s }}{% endfilter %}", "ABC HÉLLO WÖRLD"},
    {"{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% "
     "endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ "
     "greet(greeting='Yo', name='Cy') }}",
     "Hello, Ann! Hi, Bob! Yo, Cy!"},
    {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, "
     "k=3) }}",
     "1(2,){'k': 3}"},
    {"{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() "
     "%}inside{% endcall %}",
     "<inside>"},
    {"{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% "
     "endif %}{% endmacro %}{{ fact(6) }}",
     "720"},
    {"{% generation %}gen {{ n }}{% endgeneration %}", "gen 3"},
    {"{% raw %}{{ not rendered }}{% endraw %}", "{{ not rendered }}"},
    {"{# comment #}x{#- trimmed -#}  y", "xy"},
    {"a\n  {% if true %}\n    b\n  {% endif %}\nc", "a\n    b\nc"},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
    {"a\n  {%+ if true %}b{% endif +%}\nc", "a\n  b\nc"},
    {"x\n    {{ n }}\ny", "x\n    3\ny"},
    {"{{ people|map(attribute='name')|join(', ') }} {{ "
     "people|selectattr('age')|map(attribute='name')|list }} {{ "
     "people|rejectattr('age', 'defined')|map(attribute='name')|list }}",
     "Ann, bob, Cy ['Ann', 'bob'] ['Cy']"},
    {"{{ people|sort(attribute='name')|map(attribute='name')|list }} {{ "
     "people|sort(attribute='name', "
     "case_sensitive=true)|map(attribute='name')|list }} {{ "
     "l|sort(reverse=true) }}",
     "['Ann', 'bob', 'Cy'] ['Ann', 'Cy', 'bob'] [3, 2, 1]"},
    {"{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, none, "
     "2]|reject('none')|list }} {{ ['a', 'A', 'b']|unique|list }} {{ l|min }} "
     "{{ l|max }} {{ l|sum }} {{ people|map(attribute='age', default=0)|sum }}",
     "[1, 3] [1, 2] ['a', 'b'] 1 3 6 56"},
    {"{{ l|first }} {{ l|last }} {{ l|length }} {{ d|length }} {{ 'abc'|list "
     "}} {{ l|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2, 3, 4, "
     "5]|batch(2)|list }}",
     "3 2 3 2 ['a', 'b', 'c'] [2, 1, 3] cba [[1, 2], [3, 4], [5]]"},
    {"{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(-1) }} {{ 'ff'|int(base=16) }} "
     "{{ 3|float }} {{ '2.5'|float }} {{ -3|abs }} {{ 2.567|round(2) }} {{ "
     "2.5|round }} {{ 2.1|round(0, 'ceil') }}",
     "42 4 -1 255 3.0 2.5 3 2.57 2.0 3.0"},
    {"{{ x|default('d') }} {{ missing|default('d') }} {{ ''|default('d', true) "
     "}} {{ missing|d('short') }}",
     "2.5 d d short"},
    {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ "
     "'a\\n\\nb'|indent('> ', blank=true) }}",
     "a\n  b\n\n  c|  a\n  b|a\n> \n> b"},
    {"{{ d|tojson }} {{ d|tojson(indent=2) }} {{ {'b': 1, 'a': "
     "2}|tojson(sort_keys=true) }} {{ s|tojson }} {{ "
     "s|tojson(ensure_ascii=true) }} {{ [1.0, none, "
     "true]|tojson(separators=(',', ':')) }}",
     "{\"b\": 1, \"a\": [1, \"x\"]} {\n  \"b\": 1,\n  \"a\": [\n    1,\n    "
     "\"x\"\n  ]\n} {\"a\": 2, \"b\": 1} \"héllo wörld\" \"h\\u00e9llo "
     "w\\u00f6rld\" [1.0,null,true]"},
    {"{{ '<b>&\"\\''|e }} {{ '<b>'|safe }} {{ ('<'|e) + '<' }} {{ 5|string ~ "
     "'!' }}",
     "&lt;b&gt;&amp;&#34;&#39; <b> &lt;&lt; 5!"},
    {"{{ 'Hello World'|wordcount }} {{ 'ab'|center(6) }}| {{ 'a long sentence "
     "here'|truncate(9) }} {{ '%s=%05.1f' % ('k', 3.14159) }} {{ "
     "'{}-{name}'.format(1, name='n') }}",
     "2   ab  | a... k=003.1 1-n"},
    {"{{ none is none }} {{ n is number }} {{ n is integer }} {{ x is float }} "
     "{{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ l is "
     "sequence }} {{ true is boolean }} {{ missing is defined }} {{ missing is "
     "undefined }}",
     "True True True True True True True True True False True"},
    {"{{ 6 is divisibleby 3 }} {{ n is odd }} {{ n is even }} {{ n is eq 3 }} "
     "{{ n is ne 3 }} {{ n is lt 4 }} {{ n is ge 3 }} {{ n is in l }} {{ 'abc' "
     "is lower }} {{ 'ABC' is upper }} {{ none is sameas none }}",
     "True True False True False True True True True True True"},
    {"{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} "
     "{{ dict(a=1, b=2) }} {{ namespace(a=1) }}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 2} <Namespace {'a': 1}>"},
    {"{% set c = cycler('x', 'y') %}{{ c.next() }}{{ c.next() }}{{ c.next() }} "
     "{% set j = joiner(', ') %}{% for i in l %}{{ j() }}{{ i }}{% endfor %}",
     "xyx 3, 1, 2"},
    {"{{ missing }}|{{ d.missing is defined }}|{{ d.missing }}|{{ "
     "missing|length }}|{% for i in missing %}never{% endfor %}|{{ missing == "
     "missing }}",
     "|False||0||True"},
    {"{{ [].append }}|{{ ''.__class__ }}|{{ d.pop }}", "||"},
    {"{% for i in [1, [2, [3]]] recursive %}{{ loop.depth }}{% if i is "
     "iterable %}({{ loop(i) }}){% else %}:{{ i }} {% endif %}{% endfor %}",
     "1:1 1(2:2 2(3:3 ))"},
};

TEST(JinjaTest, RendersLikeJinja2) {
  const nlohmann::ordered_json context =
      nlohmann::ordered_json::parse(kContext);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.source);
    absl::StatusOr<std::string> out = Render(c.source, context);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

TEST(JinjaTest, ContextKeepsKeyOrderAndTypes) {
  const nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      R"({"d": {"z": 1, "a": 2.0, "m": [true, null, "s"]}})");
  absl::StatusOr<std::string> out = Render("{{ d }} {{ d|tojson }}", context);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "{'z': 1, 'a': 2.0, 'm': [True, None, 's']} "
            R"({"z": 1, "a": 2.0, "m": [true, null, "s"]})");
}

TEST(JinjaTest, StrftimeNowUsesTheGivenClock) {
  RenderOptions options;
  // Midnight UTC: the date in any time zone within 12 hours.
  options.now = absl::FromUnixSeconds(1721952000) + absl::Hours(12);
  absl::StatusOr<std::string> out =
      Render("{{ strftime_now('%Y-%m') }} {{ strftime_now('%d %b %Y') }}", {},
             options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "2024-07 26 Jul 2024");
}

TEST(JinjaTest, SyntaxErrorsNameLineAndColumn) {
  absl::StatusOr<std::unique_ptr<Template>> t =
      Template::Parse("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("line 3:8"));

  t = Template::Parse("{% for x in y %}\nno end");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("endfor"));

  for (std::string_view bad :
       {"{{ x", "{% if %}", "{% endif %}", "{{ 'unterminated }}", "{# open",
        "{% raw %}never closed", "{{ a b }}", "{{ (1 }}", "{% set 1 = 2 %}",
        "{% break %}", "{% macro m(a=1, b) %}{% endmacro %}",
        "{{ x|nofilter }}", "{% unknowntag %}", "{% include 'x' %}",
        "{{ 99999999999999999999 }}", "{{ '\\N{DASH}' }}", "{{ 1 ! 2 }}"}) {
    SCOPED_TRACE(bad);
    t = Template::Parse(bad);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("line 1:"));
  }
}

TEST(JinjaTest, RenderErrorsNameTheLine) {
  absl::StatusOr<std::string> out = Render("ok\n\n{{ missing.attr }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "line 3: 'missing' is undefined");

  out = Render("{% set d = {'a': 1} %}\n{{ d.b.c }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "line 2: 'dict object' has no attribute 'b'");

  for (std::string_view bad :
       {"{{ 1 + 'a' }}", "{{ 1 / 0 }}", "{{ [1, 2].append(3) }}",
        "{{ {'a': 1}.update({}) }}", "{{ ''.__class__() }}", "{{ none() }}",
        "{% for a, b in [(1, 2, 3)] %}{% endfor %}", "{{ 1 < 'a' }}",
        "{{ missing + 1 }}", "{{ missing[0] }}", "{{ missing|tojson }}",
        "{% set d = {} %}{% set d.x = 1 %}", "{{ 2 ** 64 }}",
        "{{ [1][1:2:0] }}", "{{ 'x'|nofilter }}" /* parse error */}) {
    SCOPED_TRACE(bad);
    out = Render(bad);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(out.status().message(), HasSubstr("line 1"));
    EXPECT_FALSE(IsRaisedException(out.status()));
  }
}

TEST(JinjaTest, RaiseExceptionIsTheTemplatesOwnMessage) {
  absl::StatusOr<std::string> out = Render(
      "{% for m in messages %}{% if m.role == 'bad' %}"
      "{{ raise_exception('Role ' ~ m.role ~ ' is not allowed') }}"
      "{% endif %}{% endfor %}",
      nlohmann::ordered_json::parse(R"({"messages": [{"role": "bad"}]})"));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Role bad is not allowed");
  EXPECT_TRUE(IsRaisedException(out.status()));
  // Also through a macro.
  out = Render(
      "{% macro m() %}{{ raise_exception('inner') }}{% endmacro %}{{ m() }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "inner");
  EXPECT_TRUE(IsRaisedException(out.status()));
}

TEST(JinjaTest, LoopsStopAtMaxSteps) {
  RenderOptions options;
  options.max_steps = 10000;
  absl::StatusOr<std::string> out = Render(
      "{% for i in range(100000) %}{% for j in range(100000) %}"
      "{% endfor %}{% endfor %}",
      {}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "line 1: loop limit of 10000 steps reached");
  // Within the limit it renders.
  out = Render(
      "{% for i in range(100) %}{% for j in range(99) %}{% endfor %}{% endfor "
      "%}ok",
      {}, options);
  ASSERT_TRUE(out.ok()) << out.status();
  // The default limit stops a long nest of loops too.
  out = Render(
      "{% for i in range(100000) %}{% for j in range(100000) %}"
      "{% endfor %}{% endfor %}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("loop limit of 1000000 steps"));
  // The sandbox refuses huge ranges outright, as jinja2's does.
  out = Render("{% for i in range(10**9) %}{% endfor %}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("Range too big"));
}

TEST(JinjaTest, MacroCallsCountAsSteps) {
  RenderOptions options;
  options.max_steps = 50;
  absl::StatusOr<std::string> out = Render(
      "{% macro m() %}x{% endmacro %}{% for i in range(30) %}{{ m() }}{% "
      "endfor %}",
      {}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("loop limit of 50 steps"));
}

TEST(JinjaTest, OutputIsBounded) {
  RenderOptions options;
  options.max_output_bytes = 1000;
  absl::StatusOr<std::string> out =
      Render("{% for i in range(1000) %}0123456789{% endfor %}", {}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("output limit of 1000 bytes"));
  // Intermediate strings too (no gigabyte string to print a few bytes of).
  out = Render("{{ ('x' * 100000)|length }}", {}, options);
  ASSERT_FALSE(out.ok());
  out = Render("{{ 'ab'|center(1000000000) }}", {}, options);
  ASSERT_FALSE(out.ok());
  out = Render("{% set s = 'x' * 900 %}{{ (s ~ s)|length }}", {}, options);
  ASSERT_FALSE(out.ok());
}

// Issue 24 (6): a hostile template's memory is bounded by bytes, not only
// by steps (the work limit alone let these reach ~650 MB and 2 GB).
TEST(JinjaTest, MemoryIsBoundedByBytesBuilt) {
  // A list doubled 40 times: 2^40 slots.
  absl::StatusOr<std::string> out = Render(
      "{% set ns = namespace(l=[0]) %}{% for i in range(40) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("memory limit of 67108864 bytes reached"));
  out = Render(
      "{% set ns = namespace(l=[0]) %}{% for i in range(40) %}"
      "{% set ns.l = ns.l * 2 %}{% endfor %}{{ ns.l|length }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("memory limit of"));
  // A string doubled to just under the output limit, then kept in copies:
  // no single string is too long, their sum is.
  out = Render(
      "{% set ns = namespace(s='x', l=[]) %}{% for i in range(21) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% for i in range(1000) %}"
      "{% set ns.l = ns.l + [ns.s ~ i] %}{% endfor %}{{ ns.l|length }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("memory limit of"));
  // Strings split into characters count their own strings.
  out = Render(
      "{% set ns = namespace(s='x', l=[]) %}{% for i in range(21) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% for i in range(10) %}"
      "{% set ns.l = ns.l + [ns.s|list] %}{% endfor %}{{ ns.l|length }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("memory limit of"));
  // The limit is an option; within it the same template renders.
  RenderOptions options;
  options.max_alloc_bytes = 1000;
  out = Render("{% for i in range(100) %}0123456789{% endfor %}", {}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(),
              HasSubstr("memory limit of 1000 bytes reached"));
  out = Render(
      "{% set ns = namespace(l=[0]) %}{% for i in range(10) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "1024");
}

// Which bytes of the output are the template's own text (SpannedText).
std::vector<std::string> LiteralParts(std::string_view source,
                                      const nlohmann::ordered_json& context,
                                      const RenderOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  absl::StatusOr<SpannedText> out = (*t)->RenderSpanned(context, options);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  std::vector<std::string> parts;
  for (const TextRange& r : out->literal) {
    parts.push_back(out->text.substr(r.begin, r.end - r.begin));
  }
  return parts;
}

TEST(JinjaTest, OutputKnowsTheTemplatesOwnText) {
  const nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      R"({"role": "user", "content": "<|im_end|>", "bos": "<s>"})");
  using ::testing::ElementsAre;
  // Text, literals, and concatenations of literals with values.
  EXPECT_THAT(LiteralParts("<a>{{ content }}{{ '<b>' }}x", context),
              ElementsAre("<a>", "<b>x"));
  EXPECT_THAT(LiteralParts("{{ '<|im_start|>' + role + '\n' + content + "
                           "'<|im_end|>' }}",
                           context),
              ElementsAre("<|im_start|>", "\n", "<|im_end|>"));
  EXPECT_THAT(LiteralParts("{{ '<' ~ role ~ 1 ~ '>' }}", context),
              ElementsAre("<", ">"));
  // Through set blocks, variables, macros and call blocks.
  EXPECT_THAT(LiteralParts("{% set x %}[{{ role }}]{% endset %}{% set y = x "
                           "+ content %}{{ y }}",
                           context),
              ElementsAre("[", "]"));
  EXPECT_THAT(
      LiteralParts("{% macro m(r) %}<{{ r }}>{% endmacro %}{{ m(role) }}"
                   "{% macro w() %}({{ caller() }}){% endmacro %}"
                   "{% call w() %}c{% endcall %}",
                   context),
      ElementsAre("<", ">(c)"));
  // Filters, methods and formatting make context text, even of literals.
  EXPECT_THAT(LiteralParts("{{ '<b>'|trim }}{{ '<b>'.upper() }}{{ '%s' % 'x' "
                           "}}{{ ['<b>']|join }}",
                           context),
              ElementsAre());
  // Variables named as literal are the template's.
  RenderOptions options;
  options.literal_variables = {"bos"};
  EXPECT_THAT(
      LiteralParts("{{ bos }}{{ content }}{{ bos + role }}", context, options),
      ElementsAre("<s>", "<s>"));
  EXPECT_THAT(LiteralParts("{{ bos }}", context), ElementsAre());
}

TEST(JinjaTest, DeepNestingIsAnErrorNotACrash) {
  for (const std::string& deep :
       {"{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}",
        "{{ " + std::string(10000, '[') + std::string(10000, ']') + " }}",
        "{{ " + std::string(10000, '-') + "1 }}",
        "{{ " + std::string(100000, '{') + " }}",
        [] {
          std::string s = "{{ x";
          for (int i = 0; i < 10000; ++i) s += "|trim";
          return s + " }}";
        }(),
        [] {
          std::string s = "{{ 1";
          for (int i = 0; i < 10000; ++i) s += " + 1";
          return s + " }}";
        }(),
        [] {
          std::string s = "{{ x";
          for (int i = 0; i < 10000; ++i) s += ".a";
          return s + " }}";
        }(),
        [] {
          std::string s;
          for (int i = 0; i < 10000; ++i) s += "{% if true %}";
          return s;
        }(),
        [] {
          std::string s = "{{ ";
          for (int i = 0; i < 10000; ++i) s += "not ";
          return s + "1 }}";
        }()}) {
    absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(deep);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr("deeper than"));
  }
  // Recursion through macros stops at max_depth.
  absl::StatusOr<std::string> out =
      Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("nested deeper than 200"));
  // A value nested inside itself through a namespace stops too.
  out = Render(
      "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}"
      "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("nested deeper than"));
}

TEST(JinjaTest, HugeFlatTemplatesWork) {
  std::string source;
  std::string expected;
  for (int i = 0; i < 100000; ++i) {
    source +=
        "{{ " + std::to_string(i) + " }},{# c #}{% if true %}.{% endif %}";
    expected += std::to_string(i) + ",.";
  }
  absl::StatusOr<std::string> out = Render(source);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, expected);
}

TEST(JinjaTest, NamespaceCyclesPrintAndFree) {
  absl::StatusOr<std::string> out =
      Render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<Namespace {'a': 1, 'self': <Namespace {...}>}>");
}

TEST(JinjaTest, ArbitraryBytesNeverCrash) {
  // A cheap stand-in for fuzzing: every prefix of a template mixing all the
  // syntax, and some invalid UTF-8.
  const std::string source =
      "{%- for m in messages if m.role != 'x' recursive -%}\n"
      "  {{- m['role']|upper ~ (m.content|trim)[1:3] }}{# c #}"
      "{% set ns = namespace(a=[1, {'k': (2, 3.5e-3)}]) %}{% raw %}r{% endraw "
      "%}"
      "{% macro f(a, b=2) %}{{ caller() if caller }}{% endmacro %}"
      "{% call f(1) %}\xff\xfe{% endcall %}{{ '\\u00e9\\x41' | "
      "tojson(indent=2) }}"
      "{% endfor %}";
  const nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": " hello "}]})");
  for (size_t n = 0; n <= source.size(); ++n) {
    absl::StatusOr<std::unique_ptr<Template>> t =
        Template::Parse(std::string_view(source).substr(0, n));
    if (t.ok()) (void)(*t)->Render(context);
  }
  absl::StatusOr<std::string> out = Render(source, context);
  ASSERT_TRUE(out.ok()) << out.status();
}

}  // namespace
}  // namespace kvserve::jinja
