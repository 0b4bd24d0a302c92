// The Jinja2 language as kvserve::jinja renders it, case by case against
// Python's jinja2 in transformers' chat-template environment
// (tests/testing/jinja_reference.py): every rendering byte for byte, every
// failure a failure, raise_exception's message exactly.
//
// Each table is rendered by one Python process. A case's kind is checked on
// the reference too, so a mistyped template cannot pass by failing in both.
#include "tests/testing/jinja_reference.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/chat/jinja.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::jinja {
namespace {

using ::kvserve::testing::AgreesWithJinja2;
using ::kvserve::testing::Describe;
using ::kvserve::testing::EscapeForMessage;
using ::kvserve::testing::Jinja2Case;
using ::kvserve::testing::Jinja2Result;
using ::kvserve::testing::Jinja2Unavailable;
using ::kvserve::testing::RenderWithJinja2;

// strftime_now's clock in every case: 2024-07-26 14:30:45 UTC.
constexpr int64_t kNowUnixSeconds = 1722004245;

enum class Outcome {
  kRenders,  // the reference renders it
  kFails,    // the reference fails (syntax, type, sandbox, undefined, ...)
  kRaises,   // the template calls raise_exception
};

struct Case {
  const char* name;
  const char* source;
  const char* context;  // a JSON object; "" for {}
};

// ---------------------------------------------------------------------------
// Whitespace: trim_blocks, lstrip_blocks, -, + and what they leave alone.
const Case kWhitespaceCases[] = {
    {"plain_text", "hello world", ""},
    {"one_trailing_newline_dropped", "a\n", ""},
    {"second_trailing_newline_kept", "a\n\n", ""},
    {"crlf_becomes_lf", "a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\nd", ""},
    {"trim_blocks_after_block_tag", "{% if true %}\nyes\n{% endif %}\nafter",
     ""},
    {"trim_blocks_only_one_newline", "{% if true %}\n\nyes{% endif %}\n\nz",
     ""},
    {"trim_blocks_not_after_expression", "{{ x }}\nnext", R"({"x": 1})"},
    {"lstrip_blocks_indented_tags", "  {% if true %}\n  x\n  {% endif %}\nend",
     ""},
    {"lstrip_blocks_tabs",
     "\t{% for i in [1, 2] %}\n\t{{ i }}\n\t{% endfor %}\n", ""},
    {"lstrip_not_after_text_on_line", "text {% if true %}\nx{% endif %}  \ny",
     ""},
    {"lstrip_not_before_expression", "   {{ 1 }}\n  {{ 2 }}", ""},
    {"inline_blocks_keep_spaces", "a {% if true %}b{% endif %} c\n", ""},
    {"minus_left_block", "a   \n  {%- if true %}b{% endif %}", ""},
    {"minus_right_block", "{% if true -%}   \n  b{% endif %}", ""},
    {"minus_both_expression", "a  \n {{- x -}} \n b", R"({"x": 1})"},
    {"minus_only_left_expression", "a  {{- x }}  b", R"({"x": 1})"},
    {"plus_disables_lstrip", "  {%+ if true %}x{% endif %}", ""},
    {"plus_disables_trim_blocks", "{% if true +%}\nx{% endif %}", ""},
    {"comment_lstrip_and_trim", "  {# c #}\nx", ""},
    {"comment_then_spaces_keeps_newline", "a\n  {# note #}  \nb", ""},
    {"comment_minus", "a {#- c -#} b", ""},
    {"comment_with_tags_inside", "a{# {{ x }} {% if %} #}b", ""},
    {"raw_block", "{% raw %}{{ x }}{% if %}{# c #}{% endraw %}", ""},
    {"raw_with_minus", "a {%- raw -%} {{ y }} {%- endraw -%} b", ""},
    {"raw_trim_blocks", "{% raw %}\n{{x}}\n{% endraw %}\nz", ""},
    {"multiline_tag", "{% if\n  true\n  %}x{% endif %}", ""},
    {"loop_minus_both",
     "{%- for i in [1, 2, 3] -%}\n  {{ i }}\n{%- endfor -%}\n", ""},
    {"lstrip_with_minus", "x\n    {%- if true %}\ny\n    {%- endif %}\n", ""},
    {"set_line_removed", "{% set x = 1 %}\n{{ x }}\n", ""},
    {"minus_eats_blank_lines", "{%- set x = 1 -%}\n\n\n{{ x }}", ""},
    {"indented_template_style",
     "{% for m in messages %}\n  {% if m.role == 'user' %}\nUser: {{ "
     "m.content }}\n  {% else %}\nBot: {{ m.content }}\n  {% endif %}\n{% "
     "endfor %}\n",
     R"({"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}]})"},
    {"hf_minus_style",
     "{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- "
     "'U:' + m.content }}\n    {%- else %}\n        {{- 'A:' + m.content "
     "}}\n    {%- endif %}\n{%- endfor %}\n",
     R"({"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}]})"},
    {"braces_in_text", "a { b } {{ '{' }} }} {{ '}}' }} {{ '{{' }}", ""},
    {"lone_percent_and_hash", "100% {#x#} # {", ""},
    {"empty_template", "", ""},
    {"only_newline", "\n", ""},
    {"macro_lines_trimmed",
     "{% macro m(x) %}\n  [{{ x }}]\n{% endmacro %}\n{{ m(1) }}{{ m(2) }}\n",
     ""},
};

// ---------------------------------------------------------------------------
// Statements: if, for (else, filter, loop.*, break, continue), set (tuple,
// namespace, block), filter blocks, macros, call, with, generation.
const Case kStatementCases[] = {
    {"if_elif_else",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else "
     "%}many{% endif %},{% endfor %}",
     ""},
    {"if_truthiness", "{% for v in vals %}{{ 'T' if v else 'F' }}{% endfor %}",
     R"({"vals": [[], "", 0, 0.0, null, {}, [0], "0", 1, -1, " ", false,
                  true, {"a": 1}]})"},
    {"if_not_and_or",
     "{% if not a and (b or c) %}x{% endif %}{% if a or not b %}y{% endif %}",
     R"({"a": false, "b": "", "c": 1})"},
    {"for_else_empty", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
     ""},
    {"for_else_all_filtered",
     "{% for x in [1, 2] if x > 5 %}{{ x }}{% else %}none{% endfor %}", ""},
    {"for_filter_counts_filtered",
     "{% for x in range(10) if x % 3 == 0 %}{{ loop.index }}:{{ x }}/{{ "
     "loop.length }}{{ '.' if loop.last }} {% endfor %}",
     ""},
    {"loop_indexes",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex "
     "}}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length "
     "}}|{% endfor %}",
     ""},
    {"loop_previtem_nextitem",
     "{% for x in [1, 2, 3] %}[{{ loop.previtem }}-{{ x }}-{{ loop.nextitem "
     "}}]{% endfor %}",
     ""},
    {"loop_previtem_defined",
     "{% for x in [1, 2] %}{{ loop.previtem is defined }},{{ loop.nextitem "
     "is defined }};{% endfor %}",
     ""},
    {"loop_cycle",
     "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}", ""},
    {"loop_changed",
     "{% for x in [1, 1, 2, 2, 1] %}{{ 'c' if loop.changed(x) else '-' "
     "}}{% endfor %}",
     ""},
    {"loop_over_dict_keys", "{% for k in d %}{{ k }};{% endfor %}",
     R"({"d": {"zeta": 1, "alpha": 2, "mid": 3}})"},
    {"loop_over_unicode_string", "{% for c in 'héllo😀' %}{{ c }}|{% endfor %}",
     ""},
    {"loop_range_step",
     "{% for i in range(1, 10, 3) %}{{ i }}{% endfor %} {% for i in range(5, "
     "0, -2) %}{{ i }}{% endfor %} {{ range(3) | list }}",
     ""},
    {"break",
     "{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{{ "
     "x }}{% endfor %}",
     ""},
    {"continue",
     "{% for x in range(6) %}{% if x is odd %}{% continue %}{% endif %}{{ x "
     "}}{% endfor %}",
     ""},
    {"break_inner_loop_only",
     "{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% if b > a %}{% break %}"
     "{% endif %}{{ a }}{{ b }} {% endfor %}|{% endfor %}",
     ""},
    {"loop_last_after_continue",
     "{% for x in [1, 2, 3] %}{% if x == 3 %}{% continue %}{% endif %}{{ x "
     "}}{{ loop.last }}{% endfor %}",
     ""},
    {"nested_loops_outer_loop",
     "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ "
     "outer.index }}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{% endfor %}",
     ""},
    {"loop_variable_restored",
     "{% set x = 'out' %}{% for x in [1, 2] %}{{ x }}{% endfor %}{{ x }}", ""},
    {"set_in_loop_does_not_leak",
     "{% set c = 0 %}{% for i in [1, 2, 3] %}{% set c = c + i %}{{ c }}{% "
     "endfor %}|{{ c }}",
     ""},
    {"for_unpack_items",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     R"({"d": {"b": 1, "a": [2]}})"},
    {"for_unpack_pairs",
     "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% "
     "endfor %}",
     ""},
    {"namespace_counter",
     "{% set ns = namespace(c=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.c "
     "= ns.c + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }} {{ ns.s }}",
     ""},
    {"namespace_new_attribute",
     "{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}{{ ns.b is "
     "defined }}",
     ""},
    {"namespace_flag_in_loop",
     "{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m == 'b' "
     "%}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
     R"({"msgs": ["a", "b", "c"]})"},
    {"set_tuple_unpack", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", ""},
    {"set_tuple_unpack_list", "{% set a, b = [3, 'x'] %}{{ b }}{{ a }}", ""},
    {"set_overrides_context",
     "{{ x }}{% set x = x + 1 %}{{ x }}{% set messages = messages[1:] %}{{ "
     "messages | length }}",
     R"({"x": 1, "messages": [1, 2, 3]})"},
    {"set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]",
     R"({"name": "Ann"})"},
    {"set_block_trim_blocks",
     "{% set body %}\n  line\n{% endset %}\n[{{ body }}]", ""},
    {"set_block_with_filter",
     "{% set body | upper %}abc {{ x }}{% endset %}{{ body }}",
     R"({"x": "d"})"},
    {"filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}",
     R"({"name": "bob"})"},
    {"filter_block_chain",
     "{% filter trim | replace('a', 'o') %}  banana  {% endfilter %}|", ""},
    {"macro_defaults_and_kwargs",
     "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% "
     "endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ "
     "greet(greeting='Yo', name='Cy') }}",
     ""},
    {"macro_varargs_kwargs",
     "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, "
     "2, 3, x=4) }}",
     ""},
    {"macro_default_from_other_arg",
     "{% macro m(a, b=none) %}{{ b if b is not none else a }}{% endmacro %}{{ "
     "m(1) }}{{ m(1, 2) }}",
     ""},
    {"macro_recursion",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int "
     "}}{% endif %}{% endmacro %}{{ fact(5) }}",
     ""},
    {"macro_result_is_string",
     "{% macro m() %}ab{% endmacro %}{{ m() ~ 'c' }} {{ m() | length }} {{ "
     "m() | upper }}",
     ""},
    {"macro_sees_globals",
     "{% macro m() %}{{ bos_token }}{{ x }}{% endmacro %}{{ m() }}",
     R"({"bos_token": "<s>", "x": 7})"},
    {"call_block",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro "
     "%}{% call wrap('b') %}inner {{ x }}{% endcall %}",
     R"({"x": 1})"},
    {"with_block",
     "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", ""},
    {"generation_block",
     "{% generation %}assistant {{ x }}{% endgeneration %}!",
     R"({"x": "reply"})"},
    {"generation_whitespace",
     "A\n{% generation %}\n  text\n{% endgeneration %}\nB\n"
     "{%- generation -%}\n  two\n{%- endgeneration -%}\nC",
     ""},
    {"generation_in_loop",
     "{% for m in msgs %}{% if m.role == 'assistant' %}{% generation %}{{ "
     "m.content }}{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% "
     "endfor %}",
     R"({"msgs": [{"role": "user", "content": "q"},
                  {"role": "assistant", "content": "a"}]})"},
    {"strftime_now",
     "{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}|{{ "
     "strftime_now('%A, %B %d %H:%M:%S') }}|{{ strftime_now('%y %j %I %p %a "
     "%%') }}",
     ""},
    {"strftime_now_in_set",
     "{% set date_string = strftime_now('%d %B %Y') %}Today: {{ date_string "
     "}}",
     ""},
    {"raise_exception_not_called",
     "{% if false %}{{ raise_exception('never') }}{% endif %}ok", ""},
};

// ---------------------------------------------------------------------------
// Expressions: arithmetic, numbers as Python prints them, strings,
// comparisons, membership, concatenation, conditionals, tests, literals.
const Case kExpressionCases[] = {
    {"int_arithmetic",
     "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 "
     "}} {{ 7 % 3 }} {{ 2 ** 10 }}",
     ""},
    {"negative_floor_div_and_mod",
     "{{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -8 % -3 }} {{ "
     "(-8) // 3 }} {{ -1 % 5 }}",
     ""},
    {"float_floor_div_and_mod",
     "{{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % 2 }} {{ 3 // 2.0 }} {{ 7.0 // "
     "-2 }}",
     ""},
    {"power",
     "{{ 2 ** -1 }} {{ (-2) ** 3 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} "
     "{{ 2 ** 0.5 }} {{ 4 ** 0.5 }} {{ 10 ** 18 }} {{ 2.0 ** 2 }}",
     ""},
    {"precedence",
     "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 % 4 }} {{ "
     "-3 + 5 }} {{ not 1 == 2 }} {{ 2 * 3 ~ 4 }} {{ 1 ~ 2 * 3 }}",
     ""},
    {"float_printing_literals",
     "{{ 1.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 1e16 }} {{ 2.5e-07 }} {{ -0.0 }} {{ "
     "1e15 }} {{ 0.0001 }} {{ 3.14159 }} {{ 100.0 }} {{ 1.5e300 }} {{ 1e22 "
     "}} {{ 1.5e-10 }}",
     ""},
    {"float_printing_computed",
     "{{ 10 / 3 }} {{ 2 / 3 }} {{ 1 / 3 * 3 }} {{ 0.1 * 3 }} {{ 0.1 + 0.2 }} "
     "{{ 1 / 7 }} {{ 123456789012345680.0 }} {{ 1 + 1.5 }} {{ 10 / 4 }} {{ "
     "2 ** 60 / 1 }}",
     ""},
    {"float_printing_context",
     "{{ a }} {{ b }} {{ c }} {{ d }} {{ e }} {{ f }} "
     "{{ g }} {{ h }}",
     R"({"a": 1.0, "b": 0.1, "c": 1e-5, "d": 1e16, "e": -0.0, "f": 2.5e-7,
         "g": 2.0, "h": 123.456})"},
    {"big_ints",
     "{{ 9007199254740993 }} {{ 2 ** 62 }} {{ n }} {{ n + 1 }} {{ m * 2 }} "
     "{{ -n }} {{ n // 10 }}",
     R"({"n": 1234567890123456789, "m": -42})"},
    {"int_float_equality",
     "{{ 1 == 1.0 }} {{ 1.0 in [1] }} {{ 2 > 1.5 }} {{ '1' == 1 }} {{ 0.5 + "
     "0.5 == 1 }}",
     ""},
    {"bools_are_ints",
     "{{ true + 1 }} {{ true == 1 }} {{ false == 0 }} {{ true is number }} {{ "
     "true is integer }} {{ 1 is boolean }} {{ true is boolean }}",
     ""},
    {"string_escapes",
     R"({{ 'a\nb\tc\\d\'e' }}|{{ "q\"q" }}|{{ '\u00e9\x41' }}|{{ 'it''s' }})",
     ""},
    {"string_unicode",
     "{{ 'héllo 中文 😀' | length }} {{ 'héllo'[1] }} {{ '😀x'[0] }} {{ s | "
     "upper }} {{ s[::-1] }}",
     R"({"s": "é中😀a"})"},
    {"string_slicing",
     "{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[::2] }} {{ "
     "'abcdef'[-2:] }} {{ 'abcdef'[:-2] }} [{{ 'abc'[5:] }}] {{ "
     "'abc'[-10:2] }} {{ 'abcdef'[4:1:-1] }}",
     ""},
    {"list_slicing",
     "{{ [1, 2, 3, 4, 5][::-2] }} {{ [1, 2, 3, 4, 5][-1:0:-1] }} {{ [1, 2, "
     "3][5:] }} {{ l[1:] }} {{ l[:-1] }} {{ l[-2:][0] }}",
     R"({"l": ["a", "b", "c"]})"},
    {"negative_index", "{{ [1, 2, 3][-1] }} {{ 'abc'[-1] }} {{ l[-3] }}",
     R"({"l": [1, 2, 3]})"},
    {"chained_comparisons",
     "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 < 3 > 2 }} {{ 'a' < 'b' }} {{ [1, "
     "2] == [1, 2] }} {{ 1 != 2 }} {{ 2 >= 2 }} {{ 'B' < 'a' }} {{ [1, 2] < "
     "[1, 3] }}",
     ""},
    {"membership",
     "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} "
     "{{ not 'a' in 'xyz' }} {{ '' in 'abc' }} {{ {'a': 1} in [{'a': 1}] }} "
     "{{ 1 in d.values() }}",
     R"({"d": {"k": 1}})"},
    {"tilde_concatenation",
     "{{ 'a' ~ 1 ~ 2.5 ~ none ~ true ~ [1] ~ {'k': 'v'} }}|{{ 1 ~ 2 }}", ""},
    {"plus_concatenation",
     "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }} [{{ '-' * 0 }}] {{ 2 "
     "* 'x' }} {{ [0] * 3 }}",
     ""},
    {"and_or_return_operands",
     "{{ true and false }} {{ true or false }} {{ not true }} {{ 0 or 'x' }} "
     "{{ 'a' and 'b' }} {{ none or 0 }} {{ [] or [1] }} {{ '' and 'x' }}",
     ""},
    {"inline_if",
     "{{ 'yes' if x else 'no' }} [{{ 'only' if false }}] {{ 'a' if n == 1 "
     "else 'b' if n == 2 else 'c' }}",
     R"({"x": [0], "n": 2})"},
    {"tests_types",
     "{{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ [1] is "
     "iterable }} {{ 'a' is iterable }} {{ {} is mapping }} {{ [] is "
     "sequence }} {{ 'a' is sequence }} {{ 1 is integer }} {{ 1.0 is float "
     "}} {{ none is none }} {{ [] is mapping }} {{ d is mapping }}",
     R"({"d": {"a": 1}})"},
    {"tests_values",
     "{{ 1 is odd }} {{ 2 is even }} {{ 9 is divisibleby 3 }} {{ 9 is "
     "divisibleby(4) }} {{ 'A' is upper }} {{ 'a' is lower }} {{ 2 is eq 2 }} "
     "{{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 "
     "is ne 2 }} {{ 'a' is in 'abc' }} {{ 2 is in [1] }}",
     ""},
    {"tests_equalto_sameas",
     "{{ 'x' is equalto 'x' }} {{ x is sameas x }} {{ none is sameas none }} "
     "{{ 1 is sameas true }} {{ x is defined }} {{ y is undefined }}",
     R"({"x": [1]})"},
    {"tests_negated",
     "{{ 'a' is not string }} {{ 1 is not none }} {{ x is not defined }} {{ "
     "y is not undefined }} {{ not x is none }}",
     R"({"x": null})"},
    {"tests_callable",
     "{{ raise_exception is callable }} {{ 'a' is callable "
     "}} {{ ''.upper is callable }}",
     ""},
    {"print_list_repr",
     "{{ [1, 'a', none, true, 1.5, {'k': [false]}] }} {{ [] }} {{ {} }} {{ "
     "[[]] }}",
     ""},
    {"print_string_repr_quotes",
     R"({{ ["it's", 'say "hi"', 'both \' and "', 'back\\slash', 'nl\n', 'tab\t', 'é中😀', '\x01'] }})",
     ""},
    {"print_constants",
     "{{ none }} {{ true }} {{ false }} {{ None }} {{ True }} {{ False }}", ""},
    {"print_dict_from_context", "{{ d }}",
     R"({"d": {"b": 1, "a": [1, 2.5], "c": null, "é": "ü", "t": true}})"},
    {"print_tuples", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ ('a', [none]) }}",
     ""},
    {"dict_literal_access",
     "{{ {'a': 1, 'b': 'x'}['b'] }} {{ {'a': 1}.a }} {{ {'a': 1, 'b': "
     "2}.keys() | list }} {{ {1: 'one'}[1] }}",
     ""},
    {"attribute_and_item_access",
     "{{ d.k }} {{ d['k'] }} {{ l[0] }} {{ l.1 }} {{ d.n.m }} {{ d['n']['m'] "
     "}} {{ m[0]['role'] }} {{ (m | last).content }}",
     R"({"d": {"k": "v", "n": {"m": 3}}, "l": [10, 20],
         "m": [{"role": "user", "content": "x"},
               {"role": "assistant", "content": "y"}]})"},
    {"item_access_with_variable_key",
     "{% for k in ['a', 'b'] %}{{ d[k] }}{% endfor %} {{ l[i] }} {{ l[i - "
     "1] }}",
     R"({"d": {"a": 1, "b": 2}, "l": [5, 6, 7], "i": 2})"},
    {"dict_equality_and_message_compare",
     "{{ m == {'role': 'user', 'content': 'x'} }} {{ m == {'content': 'x', "
     "'role': 'user'} }} {{ m == l[0] }} {{ m != l[1] }}",
     R"({"m": {"role": "user", "content": "x"},
         "l": [{"role": "user", "content": "x"}, {"role": "user"}]})"},
    {"string_comparisons_unicode",
     "{{ 'é' > 'z' }} {{ 'abc' < 'abd' }} {{ 'a' < 'ab' }} {{ 'Z' < 'a' }}",
     ""},
    {"range_function",
     "{{ range(3) | list }} {{ range(2, 5) | list }} {{ range(0) | list }} {{ "
     "range(10, 0, -3) | list }} {{ range(3) | length }}",
     ""},
    {"namespace_printing_attrs",
     "{% set ns = namespace(a=1, b='s') %}{{ ns.a }}{{ ns.b }}{{ ns.a + 1 }}",
     ""},
};

// ---------------------------------------------------------------------------
// Filters.
const Case kFilterCases[] = {
    {"trim",
     "[{{ '  a b  ' | trim }}] [{{ 'xxaxx' | trim('x') }}] [{{ "
     "'\\n\\t a \\n' | trim }}] [{{ s | trim }}]",
     R"({"s": "\u3000 wide \u00a0"})"},
    {"length_and_count",
     "{{ [1, 2, 3] | length }} {{ 'héllo' | length }} {{ d | length }} {{ l | "
     "count }} {{ '' | length }}",
     R"({"d": {"a": 1, "b": 2}, "l": [1]})"},
    {"items_filter",
     "{% for k, v in d | items %}{{ k }}{{ v }},{% endfor %}{{ d | items | "
     "list }}",
     R"({"d": {"z": 1, "a": "x"}})"},
    {"indent_defaults", "[{{ 'a\\nb\\n\\nc' | indent }}]", ""},
    {"indent_first_and_blank",
     "[{{ 'a\\nb' | indent(2, true) }}] [{{ 'a\\n\\nb\\n' | indent(2, "
     "blank=true) }}] [{{ 'a\\n  \\nb' | indent(3, first=true, blank=false) "
     "}}]",
     ""},
    {"indent_string_width", "[{{ 'a\\nb' | indent(width='> ') }}]", ""},
    {"indent_tojson", "{{ d | tojson(indent=2) | indent(4) }}",
     R"({"d": {"a": [1, 2], "b": {}}})"},
    {"default_filter",
     "{{ x | default('d') }} {{ none | default('d') }} [{{ '' | default('d') "
     "}}] {{ '' | default('d', true) }} {{ false | d('x', boolean=true) }} "
     "{{ 0 | default(5) }} {{ y | default(none) }} {{ d.z | default('dz') }}",
     R"({"y": 1, "d": {}})"},
    {"select_reject",
     "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | "
     "reject('odd') | list }} {{ [1, 2, 3, 4] | select('gt', 2) | list }} {{ "
     "['a', '', none, 'b', 0] | select | list }} {{ [1, 5, 3] | "
     "select('equalto', 5) | list }} {{ ['a', 1, none] | reject('string') | "
     "list }} {{ ['a', 'b'] | select('in', 'ab') | list }}",
     ""},
    {"selectattr_rejectattr",
     "{{ users | selectattr('admin') | map(attribute='name') | join(',') }} "
     "{{ users | rejectattr('admin') | map(attribute='name') | join(',') }} "
     "{{ users | selectattr('admin', 'defined') | list | length }} {{ users "
     "| selectattr('name', 'equalto', 'b') | first }} {{ users | "
     "selectattr('name', 'in', ['a', 'c']) | map(attribute='name') | list }} "
     "{{ users | rejectattr('age', 'gt', 30) | map(attribute='name') | list "
     "}}",
     R"({"users": [{"name": "a", "admin": true, "age": 40},
                   {"name": "b", "admin": false, "age": 30},
                   {"name": "c", "age": 20}]})"},
    {"selectattr_messages",
     "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
     "{{ (messages | selectattr('role', 'ne', 'user') | first).content }}",
     R"({"messages": [{"role": "system", "content": "s"},
                      {"role": "user", "content": "u"},
                      {"role": "user", "content": "v"}]})"},
    {"map_filters_and_attributes",
     "{{ [1, 2] | map('string') | list }} {{ ['a', 'b'] | map('upper') | "
     "join }} {{ users | map(attribute='name') | list }} {{ users | "
     "map(attribute='admin', default=false) | list }} {{ ['  a', 'b  '] | "
     "map('trim') | list }} {{ [[1, 2], [3]] | map('length') | list }} {{ "
     "['x'] | map('replace', 'x', 'y') | list }} {{ ['a', 1] | map('tojson') "
     "| join(',') }}",
     R"({"users": [{"name": "a", "admin": true}, {"name": "b"}]})"},
    {"map_nested_attribute",
     "{{ calls | map(attribute='function.name') | join(', ') }}",
     R"({"calls": [{"function": {"name": "f"}}, {"function": {"name": "g"}}]})"},
    {"unique",
     "{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | "
     "list }} {{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }} {{ "
     "users | unique(attribute='g') | map(attribute='n') | list }}",
     R"({"users": [{"n": 1, "g": "x"}, {"n": 2, "g": "y"},
                   {"n": 3, "g": "x"}]})"},
    {"escape_and_safe",
     "{{ '<b>&\"\\'' | escape }} {{ '<b>' | safe }} {{ '<b>' | e }} {{ ('<' "
     "| e) ~ '<' }} {{ '<' | e | length }} {{ 5 | e }}",
     ""},
    {"tojson_basic",
     "{{ d | tojson }}|{{ 'é😀' | tojson }}|{{ none | tojson }}|{{ [1, 'a', "
     "true] | tojson }}|{{ '<a href=\"x\">&\\'</a>' | tojson }}",
     R"({"d": {"b": [1, 2.5, null, true], "a": {"x": "é\"\n</script>"}}})"},
    {"tojson_key_order_and_nesting", "{{ d | tojson }}",
     R"({"d": {"zeta": {"y": [], "x": {}}, "alpha": [{"k": [1, [2, [3]]]}],
              "mid": "m"}})"},
    {"tojson_indent",
     "{{ d | tojson(indent=2) }}\n{{ [] | tojson(indent=2) }} {{ {} | "
     "tojson(indent=2) }}\n{{ d | tojson(indent=4) }}",
     R"({"d": {"a": [], "b": {}, "c": [{}], "d": [1, {"e": "f"}]}})"},
    {"tojson_sort_keys_and_separators",
     "{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) "
     "}}|{{ d | tojson(indent=1, separators=(',', ': ')) }}",
     R"({"d": {"b": 1, "a": [1, 2], "C": null}})"},
    {"tojson_ensure_ascii",
     "{{ 'é😀\\u2028' | tojson(ensure_ascii=true) }}|{{ 'é😀' | tojson }}", ""},
    {"tojson_escapes", R"({{ 'a\x01\b\f\n\r\t\x7f\u2028"\\/' | tojson }})", ""},
    {"tojson_numbers",
     "{{ 1.0 | tojson }} {{ 1e16 | tojson }} {{ -0.0 | tojson }} {{ 0.1 | "
     "tojson }} {{ 1e-05 | tojson }} {{ 12345678901234 | tojson }} {{ x | "
     "tojson }}",
     R"({"x": [1.0, 2.5e-7, -3, 1e100]})"},
    {"tojson_tool_definition",
     "{% for t in tools %}{{ t | tojson(indent=4) }}\n\n{% endfor %}",
     R"({"tools": [{"type": "function", "function": {"name": "get_weather",
         "description": "Weather — in °C.", "parameters": {"type": "object",
         "properties": {"city": {"type": "string"}, "days": {"type":
         "integer", "minimum": 1}}, "required": ["city"]}}}]})"},
    {"join",
     "{{ [1, 2, 3] | join }} {{ [1, 2, 3] | join(', ') }} {{ users | join(', "
     "', attribute='name') }} {{ 'abc' | join('-') }} {{ [1, 'a', none] | "
     "join(',') }} [{{ [] | join(',') }}]",
     R"({"users": [{"name": "a"}, {"name": "b"}]})"},
    {"first_last",
     "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ "
     "'abc' | last }} [{{ [] | first }}] {{ d | first }}",
     R"({"d": {"k1": 1, "k2": 2}})"},
    {"case_filters",
     "{{ 'hello WORLD' | lower }} {{ 'hello' | upper }} {{ 'hello wORLD "
     "foo-bar (x)' | title }} {{ 'hELLO wORLD' | capitalize }} {{ 1 | lower "
     "}}",
     ""},
    {"title_apostrophes", "{{ \"it's o'neil's\" | title }}", ""},
    {"case_filters_unicode",
     "{{ 'éa' | upper }} {{ 'ÀÉ' | lower }} {{ 'élan "
     "vital' | title }} {{ 'ñu' | capitalize }}",
     ""},
    {"replace_filter",
     "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ "
     "'abc' | replace('', '-') }} {{ 'a.b.c' | replace('.', '') }} {{ 'é' | "
     "replace('é', 'e') }}",
     ""},
    {"int_filter",
     "{{ '42' | int }} {{ '3.7' | int }} {{ 3.7 | int }} {{ 'x' | int }} {{ "
     "'x' | int(7) }} {{ '0x1A' | int(0, 16) }} {{ -3.7 | int }} {{ '  5 ' | "
     "int }} {{ x | int }} {{ true | int }} {{ none | int }}",
     R"({"x": -3.7})"},
    {"float_filter",
     "{{ '12' | float }} {{ 'x' | float }} {{ 3 | float }} {{ '1e3' | float "
     "}} {{ 'x' | float(1.5) }} {{ ' 2.5 ' | float }}",
     ""},
    {"round_filter",
     "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 1.234 | "
     "round(1, 'floor') }} {{ 1.234 | round(1, 'ceil') }} {{ 5 | round }} {{ "
     "x | round }} {{ 1.5 | round | int }} {{ 1234.5678 | round(-2) }}",
     R"({"x": -2.5})"},
    {"abs_filter", "{{ x | abs }} {{ y | abs }} {{ -3 | abs }}",
     R"({"x": -3, "y": -0.5})"},
    {"dictsort",
     "{{ d | dictsort }} {% for k, v in d | dictsort(reverse=true) %}{{ k "
     "}}{% endfor %} {{ d | dictsort(by='value') }} {{ d | "
     "dictsort(case_sensitive=true) }}",
     R"({"d": {"b": 2, "A": 3, "c": 1}})"},
    {"sort",
     "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', "
     "'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} "
     "{{ users | sort(attribute='name', reverse=true) | map(attribute='name') "
     "| join }} {{ users | sort(attribute='age,name') | map(attribute='name') "
     "| join }} {{ [2.5, 1, -1] | sort }}",
     R"({"users": [{"name": "b", "age": 3}, {"name": "a", "age": 3},
                   {"name": "c", "age": 1}]})"},
    {"reverse",
     "{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {% for "
     "x in [1, 2] | reverse %}{{ x }}{% endfor %}",
     ""},
    {"list_filter",
     "{{ 'ab' | list }} {{ d | list }} {{ range(3) | list }} {{ "
     "[1] | list }}",
     R"({"d": {"x": 1, "y": 2}})"},
    {"string_filter",
     "{{ 1 | string }} {{ [1, 'a'] | string }} {{ none | string }} {{ (1 | "
     "string) ~ 'x' }} {{ 1.0 | string }} {{ d | string }} {{ true | string "
     "| length }}",
     R"({"d": {"k": ["v"]}})"},
    {"min_max_sum",
     "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2, 3] | sum }} {{ "
     "[1.5, 2] | sum }} {{ users | sum(attribute='age') }} {{ ['b', 'A'] | "
     "min }} {{ ['b', 'A'] | max(case_sensitive=true) }} {{ [1, 2] | "
     "sum(start=10) }} [{{ [] | max }}] {{ users | max(attribute='age') }}",
     R"({"users": [{"name": "x", "age": 3}, {"name": "y", "age": 5}]})"},
    {"format_filter",
     "{{ '%s-%d' | format('a', 3) }} {{ '%.2f' | format(3.14159) }} {{ "
     "'%5s|' | format('ab') }}",
     ""},
    {"filter_chain_on_expression",
     "{{ (messages | last)['content'] | trim | upper }} {{ messages | "
     "map(attribute='content') | map('trim') | join('|') }}",
     R"({"messages": [{"content": " a "}, {"content": " b "}]})"},
};

// ---------------------------------------------------------------------------
// Methods of strings and dicts (the sandbox allows the non-mutating ones).
const Case kMethodCases[] = {
    {"startswith_endswith",
     "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ "
     "'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('') }} {{ "
     "'hello'.startswith('l', 2) }}",
     ""},
    {"strip_family",
     "[{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '  a  "
     "'.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ 'abcba'.strip('ab') }}] "
     "[{{ '\\n\\ta b\\n'.strip() }}] [{{ 'xya'.lstrip('yx') }}]",
     ""},
    {"split_whitespace",
     "{{ 'a b  c'.split() }} {{ '  a b '.split() }} {{ 'a b c'.split(none, "
     "1) }} {{ ''.split() }} {{ 'a\\tb\\nc'.split() }}",
     ""},
    {"split_separator",
     "{{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ''.split(',') "
     "}} {{ 'a<sep>b'.split('<sep>') }} {{ 'a,b,c'.rsplit(',', 1) }} {{ "
     "'x</think>y'.split('</think>')[-1] }}",
     ""},
    {"case_methods",
     "{{ 'aB'.upper() }} {{ 'aB'.lower() }} {{ 'hello world'.title() }} {{ "
     "'hello'.capitalize() }} {{ 'éa'.upper() }}",
     ""},
    {"title_method_apostrophe", "{{ \"it's\".title() }}", ""},
    {"upper_sharp_s", "{{ 'straße'.upper() }}", ""},
    {"replace_method",
     "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ "
     "'a-b'.replace('-', '') }}",
     ""},
    {"find_count_index",
     "{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') "
     "}} {{ 'hello'.index('e') }} {{ 'hello'.rfind('l') }} {{ "
     "'héllo'.find('l') }} {{ 'aaaa'.count('aa') }}",
     ""},
    {"splitlines",
     "{{ 'a\\nb\\r\\nc\\n'.splitlines() }} {{ ''.splitlines() }} {{ "
     "'x\\n\\ny'.splitlines() }}",
     ""},
    {"join_method", "{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }}", ""},
    {"format_method",
     "{{ '{} and {}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }}", ""},
    {"predicate_methods",
     "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' '.isspace() }} {{ "
     "'Ab'.isupper() }} {{ 'ab'.islower() }} {{ 'a1'.isalnum() }}",
     ""},
    {"string_method_on_context",
     "{{ content.strip().split('\\n')[0] }} {{ content.count('\\n') }}",
     R"({"content": "  first line\nsecond\n  "})"},
    {"dict_get",
     "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} "
     "{{ d.get('n').get('m') }}",
     R"({"d": {"a": 1, "n": {"m": [2]}}})"},
    {"dict_keys_values_items",
     "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ "
     "'a' in d.keys() }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor "
     "%}",
     R"({"d": {"b": 1, "a": null}})"},
    {"dict_views_printed", "{{ d.keys() }} {{ d.values() }} {{ d.items() }}",
     R"({"d": {"b": 1, "a": "x"}})"},
    {"list_methods_non_mutating",
     "{{ [1, 2, 2].count(2) }} {{ [1, 2, 3].index(3) }}", ""},
    {"method_on_literal_in_condition",
     "{% if 'a,b'.split(',') | length == 2 %}two{% endif %}", ""},
};

// ---------------------------------------------------------------------------
// Undefined values: printed as nothing, falsy, iterable as empty, defined
// tests and defaults; missing attributes and items are undefined too.
const Case kUndefinedCases[] = {
    {"print_undefined", "[{{ missing }}]", ""},
    {"defined_tests",
     "{{ missing is defined }} {{ missing is undefined }} {{ d.nokey is "
     "defined }} {{ d.k is defined }} {{ d['nokey'] is defined }}",
     R"({"d": {"k": 0}})"},
    {"undefined_in_if",
     "{% if missing %}y{% else %}n{% endif %}{% if not "
     "missing %}!{% endif %}",
     ""},
    {"undefined_concat", "[{{ missing ~ 'x' }}]", ""},
    {"undefined_iterates_empty",
     "{% for x in missing %}{{ x }}{% else %}none{% endfor %}", ""},
    {"undefined_length", "{{ missing | length }}", ""},
    {"undefined_default", "{{ missing | default('x') }} {{ missing | d }}", ""},
    {"missing_key_and_attribute",
     "[{{ d.nokey }}] [{{ d['nokey'] }}] [{{ l[5] }}] {{ l[5] is defined }} "
     "[{{ n[0] }}]",
     R"({"d": {}, "l": [1, 2], "n": 5})"},
    {"attribute_of_none_and_str",
     "[{{ none.attr }}] [{{ none['a'] }}] [{{ 'abc'.nosuch }}]", ""},
    {"unsafe_attribute_is_undefined",
     "[{{ ''.__class__ }}] [{{ d.__class__ }}] [{{ l.__len__ is defined }}]",
     R"({"d": {}, "l": []})"},
    {"undefined_equality",
     "{{ missing == none }} {{ missing is none }} {{ missing != 1 }}", ""},
    {"loop_outside_loop", "[{{ loop }}] {{ loop is defined }}", ""},
    {"empty_aggregates",
     "[{{ [] | max }}] [{{ {} | first }}] [{{ [] | last }}] {{ [] | sum }}",
     ""},
    {"undefined_items_filter",
     "{% for k, v in missing | items %}{{ k }}{% endfor %}ok", ""},
    {"message_field_presence",
     "{% for m in messages %}{{ m.name is defined }}{{ 'tool_calls' in m "
     "}}{{ m.tool_calls is defined and m.tool_calls is not none }};{% endfor "
     "%}",
     R"({"messages": [{"role": "user", "content": "a"},
                      {"role": "user", "content": "b", "name": "n"},
                      {"role": "assistant", "content": "",
                       "tool_calls": [{"id": "1"}]}]})"},
};

// ---------------------------------------------------------------------------
// Failures: both must fail; for raise_exception, with the same message.
struct ErrorCase {
  const char* name;
  Outcome kind;  // kFails or kRaises
  const char* source;
  const char* context;  // a JSON object; "" for {}
};

const ErrorCase kErrorCases[] = {
    // raise_exception: the message must match exactly.
    {"raise_exception_literal", Outcome::kRaises,
     "{{ raise_exception('Conversation roles must alternate "
     "user/assistant/user/assistant/...') }}",
     ""},
    {"raise_exception_computed", Outcome::kRaises,
     "{{ raise_exception('bad role: ' ~ role ~ ' at ' ~ 3) }}",
     R"({"role": "système 😀"})"},
    {"raise_exception_after_output", Outcome::kRaises,
     "a{% for x in [1, 2] %}{{ x }}{% if x == 2 %}{{ raise_exception('stop "
     "at ' ~ x) }}{% endif %}{% endfor %}",
     ""},
    {"raise_exception_in_macro", Outcome::kRaises,
     "{% macro check(r) %}{% if r != 'user' %}{{ raise_exception(\"Only "
     "'user' here, got \" + r) }}{% endif %}{% endmacro %}{{ check('bot') }}",
     ""},
    {"raise_exception_in_set", Outcome::kRaises,
     "{% set x = raise_exception('from set') %}never", ""},
    {"raise_exception_quotes_newline", Outcome::kRaises,
     R"({{ raise_exception('line1\nline2 "quoted" \'single\'') }})", ""},
    // Undefined used in an operation.
    {"attribute_of_undefined", Outcome::kFails, "{{ missing.attr }}", ""},
    {"item_of_undefined", Outcome::kFails, "{{ missing['k'] }}", ""},
    {"undefined_arithmetic", Outcome::kFails, "{{ missing + 1 }}", ""},
    {"call_undefined", Outcome::kFails, "{{ missing() }}", ""},
    {"nested_undefined_attribute", Outcome::kFails, "{{ d.a.b }}",
     R"({"d": {}})"},
    {"undefined_tojson", Outcome::kFails, "{{ missing | tojson }}", ""},
    // The sandbox: no mutation of lists and dicts, no big ranges.
    {"list_append", Outcome::kFails, "{% set l = [1] %}{{ l.append(2) }}", ""},
    {"list_append_from_context", Outcome::kFails, "{{ l.append(2) }}{{ l }}",
     R"({"l": [1]})"},
    {"dict_update", Outcome::kFails, "{% set d = {} %}{{ d.update({'a': 1}) }}",
     ""},
    {"dict_pop", Outcome::kFails, "{{ d.pop('a') }}", R"({"d": {"a": 1}})"},
    {"dict_clear", Outcome::kFails, "{{ d.clear() }}", R"({"d": {"a": 1}})"},
    {"range_too_big", Outcome::kFails, "{{ range(100001) | length }}", ""},
    {"set_attribute_on_dict", Outcome::kFails,
     "{% set d = {} %}{% set d.x = 1 %}", ""},
    // Types and arithmetic.
    {"int_plus_string", Outcome::kFails, "{{ 1 + 'a' }}", ""},
    {"string_minus_int", Outcome::kFails, "{{ 'a' - 1 }}", ""},
    {"list_plus_int", Outcome::kFails, "{{ [1] + 1 }}", ""},
    {"division_by_zero", Outcome::kFails, "{{ 1 / 0 }}", ""},
    {"floor_division_by_zero", Outcome::kFails, "{{ 1 // 0 }}", ""},
    {"modulo_by_zero", Outcome::kFails, "{{ 5 % 0 }}", ""},
    // ~ binds tighter than +: 1 + (2 ~ 3).
    {"concat_binds_tighter_than_plus", Outcome::kFails, "{{ 1 + 2 ~ 3 }}", ""},
    {"string_times_string", Outcome::kFails, "{{ 'a' * 'b' }}", ""},
    {"compare_int_and_string", Outcome::kFails, "{{ 1 < 'a' }}", ""},
    {"empty_separator", Outcome::kFails, "{{ 'abc'.split('') }}", ""},
    {"unpack_too_many", Outcome::kFails, "{% set a, b = [1, 2, 3] %}", ""},
    {"call_string", Outcome::kFails, "{{ 'a'() }}", ""},
    {"macro_too_many_args", Outcome::kFails,
     "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", ""},
    {"macro_unknown_kwarg", Outcome::kFails,
     "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", ""},
    {"tojson_of_namespace", Outcome::kFails,
     "{% set ns = namespace(a=1) %}{{ ns | tojson }}", ""},
    {"iterate_int", Outcome::kFails, "{% for i in 5 %}{% endfor %}", ""},
    // Syntax: the parse (or its compile step in Python) fails.
    {"unclosed_if", Outcome::kFails, "{% if x %}a", ""},
    {"stray_endfor", Outcome::kFails, "{% endfor %}", ""},
    {"incomplete_expression", Outcome::kFails, "{{ 1 + }}", ""},
    {"for_without_target", Outcome::kFails, "{% for %}{% endfor %}", ""},
    {"unterminated_string", Outcome::kFails, "{{ 'abc }}", ""},
    {"unknown_tag", Outcome::kFails, "{% frobnicate %}", ""},
    {"unknown_filter", Outcome::kFails, "{{ x | nosuchfilter }}", ""},
    {"unknown_test", Outcome::kFails, "{{ x is nosuchtest }}", ""},
    {"break_outside_loop", Outcome::kFails, "{% break %}", ""},
    {"unclosed_expression", Outcome::kFails, "{{ x ", ""},
    {"unclosed_comment", Outcome::kFails, "{# never closed", ""},
    {"mismatched_end", Outcome::kFails, "{% if true %}{% endfor %}", ""},
    {"else_twice", Outcome::kFails,
     "{% if a %}1{% else %}2{% else %}3{% endif %}", ""},
    {"unclosed_raw", Outcome::kFails, "{% raw %}abc", ""},
    {"unclosed_generation", Outcome::kFails, "{% generation %}abc", ""},
};

// ---------------------------------------------------------------------------

nlohmann::ordered_json ParseContext(const char* context) {
  if (*context == '\0') return nlohmann::ordered_json::object();
  return nlohmann::ordered_json::parse(context, nullptr,
                                       /*allow_exceptions=*/false);
}

absl::StatusOr<std::string> RenderOurs(const char* source,
                                       const nlohmann::ordered_json& context) {
  absl::StatusOr<std::unique_ptr<Template>> parsed = Template::Parse(source);
  if (!parsed.ok()) return parsed.status();
  RenderOptions options;
  options.now = absl::FromUnixSeconds(kNowUnixSeconds);
  return (*parsed)->Render(context, options);
}

// The reference results of `sources` x `contexts`, one Python process;
// nullopt after reporting a harness failure.
std::optional<std::vector<Jinja2Result>> RenderReference(
    const std::vector<std::pair<const char*, nlohmann::ordered_json>>& cases) {
  std::vector<Jinja2Case> reference_cases;
  for (const auto& [source, context] : cases) {
    reference_cases.push_back({source, context, kNowUnixSeconds});
  }
  absl::StatusOr<std::vector<Jinja2Result>> results =
      RenderWithJinja2(reference_cases);
  if (!results.ok()) {
    ADD_FAILURE() << "reference renderer: " << results.status();
    return std::nullopt;
  }
  return *std::move(results);
}

// Every case renders in the reference, and ours renders the same bytes.
void ExpectRendersLikeJinja2(absl::Span<const Case> cases) {
  std::vector<std::pair<const char*, nlohmann::ordered_json>> inputs;
  for (const Case& c : cases) {
    inputs.emplace_back(c.source, ParseContext(c.context));
    ASSERT_FALSE(inputs.back().second.is_discarded())
        << c.name << ": the case's context is not JSON";
  }
  const std::optional<std::vector<Jinja2Result>> reference =
      RenderReference(inputs);
  if (!reference) return;
  int agree = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Jinja2Result& ref = (*reference)[i];
    if (!ref.ok) {
      ADD_FAILURE() << c.name
                    << ": the case is broken, jinja2 fails: " << ref.error;
      continue;
    }
    const ::testing::AssertionResult same =
        AgreesWithJinja2(ref, RenderOurs(c.source, inputs[i].second));
    if (same) {
      ++agree;
    } else {
      ADD_FAILURE() << c.name << " (template \"" << EscapeForMessage(c.source)
                    << "\"): " << same.message();
    }
  }
  ::testing::Test::RecordProperty("agree", agree);
  ::testing::Test::RecordProperty("cases", static_cast<int>(cases.size()));
}

class JinjaReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::optional<std::string> reason = Jinja2Unavailable()) {
      GTEST_SKIP() << "no reference renderer: " << *reason;
    }
  }
};

TEST_F(JinjaReferenceTest, Whitespace) {
  ExpectRendersLikeJinja2(kWhitespaceCases);
}

TEST_F(JinjaReferenceTest, Statements) {
  ExpectRendersLikeJinja2(kStatementCases);
}

TEST_F(JinjaReferenceTest, Expressions) {
  ExpectRendersLikeJinja2(kExpressionCases);
}

TEST_F(JinjaReferenceTest, Filters) { ExpectRendersLikeJinja2(kFilterCases); }

TEST_F(JinjaReferenceTest, Methods) { ExpectRendersLikeJinja2(kMethodCases); }

TEST_F(JinjaReferenceTest, Undefined) {
  ExpectRendersLikeJinja2(kUndefinedCases);
}

// Every case fails in the reference and in ours; a raise_exception is
// INVALID_ARGUMENT with exactly the template's message and is reported as
// raised, any other failure is not.
TEST_F(JinjaReferenceTest, Failures) {
  std::vector<std::pair<const char*, nlohmann::ordered_json>> inputs;
  for (const ErrorCase& c : kErrorCases) {
    inputs.emplace_back(c.source, ParseContext(c.context));
    ASSERT_FALSE(inputs.back().second.is_discarded())
        << c.name << ": the case's context is not JSON";
  }
  const std::optional<std::vector<Jinja2Result>> reference =
      RenderReference(inputs);
  if (!reference) return;
  for (size_t i = 0; i < std::size(kErrorCases); ++i) {
    const ErrorCase& c = kErrorCases[i];
    const Jinja2Result& ref = (*reference)[i];
    SCOPED_TRACE(c.name);
    if (ref.ok || ref.raised != (c.kind == Outcome::kRaises)) {
      ADD_FAILURE() << "the case is broken: jinja2 gave " << Describe(ref);
      continue;
    }
    const absl::StatusOr<std::string> ours =
        RenderOurs(c.source, inputs[i].second);
    EXPECT_TRUE(AgreesWithJinja2(ref, ours))
        << "template \"" << EscapeForMessage(c.source) << "\"";
    if (!ours.ok()) {
      EXPECT_EQ(IsRaisedException(ours.status()), ref.raised)
          << "IsRaisedException(" << ours.status() << ")";
      EXPECT_EQ(ours.status().code(), absl::StatusCode::kInvalidArgument)
          << ours.status();
    }
  }
}

}  // namespace
}  // namespace kvserve::jinja
