// JSON Schema (draft 2020-12, and the draft-04/07 forms real schemas still
// use) compiled to a grammar whose sentences are JSON texts that validate.
//
// The grammar may allow fewer texts than the schema (never more): a schema
// kvserve cannot honour exactly is either narrowed to a part it can (only
// the declared properties are written, in the schema's order; a number
// with bounds is written as an integer or a plain decimal within them; a
// string `format` as its common form, a `date`'s day at most 28; with
// `uniqueItems` an array holds at most one item; minProperties promotes
// the first optional properties to required; a `pattern` or `format`
// with minLength / maxLength re-counts its repetitions to fit,
// regex_gbnf.h; an optional property nothing validates, or one with
// dependencies, is not written, a required one brings its dependencies;
// of properties `not: {required: [...]}` forbids together, one is not
// written) or refused: INVALID_ARGUMENT naming the keyword and its JSON
// pointer (any other `not`, `if`/`then`/`else`, `contains`, `multipleOf`,
// `propertyNames`, a remote `$ref`, a `pattern` the regex subset does not cover
// or whose length bounds no re-counting meets (regex_gbnf.h), a `oneOf` whose
// branches may both match, allOf branches that cannot be combined, a
// schema nothing validates).
//
// Supported: type (and lists of types), properties / required /
// additionalProperties, patternProperties (declared properties must not
// match them), items / prefixItems (and draft-04 items arrays with
// additionalItems), enum / const, anyOf / oneOf / allOf, local $ref into
// $defs / definitions (recursion included), string pattern, format (date,
// time, date-time, uuid, email, hostname, ipv4, uri; others are
// annotations), minLength / maxLength, minItems / maxItems, minimum /
// maximum / exclusiveMinimum / exclusiveMaximum (numbers and draft-04
// booleans), minProperties / maxProperties where the declared properties
// allow them. Unknown keywords are ignored, as the specification says.
#ifndef KVSERVE_CORE_CONSTRAIN_JSON_SCHEMA_H_
#define KVSERVE_CORE_CONSTRAIN_JSON_SCHEMA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/constrain/grammar.h"

namespace kvserve::constrain {

struct JsonSchemaLimits {
  int64_t max_schema_bytes = 1 << 20;
  // Nesting of schemas inside schemas (and of $ref resolutions in allOf).
  int max_depth = 64;
  int64_t max_grammar_bytes = 8 << 20;
  // The largest minLength / maxLength / minItems / maxItems written out.
  int max_count = 10000;
  // Compilation past this is refused.
  absl::Duration max_time = absl::Seconds(2);
};

// The GBNF of the JSON texts that validate against `schema_json` (its rule
// `root`). INVALID_ARGUMENT for a schema that is not JSON, or one refused
// as above.
absl::StatusOr<std::string> JsonSchemaToGbnf(
    std::string_view schema_json, const JsonSchemaLimits& limits = {});

// For a grammar that joins several schemas (tool calls): the rules of
// JsonSchemaToGbnf with every name beginning with `prefix` (non-empty), the
// first `<prefix>root`, and without the shared json-* rules, which the
// caller adds once (JsonGbnfRules(), json_grammar.h).
absl::StatusOr<std::string> JsonSchemaRules(
    std::string_view schema_json, std::string prefix,
    const JsonSchemaLimits& limits = {});

// JsonSchemaToGbnf compiled.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(
    std::string_view schema_json, const JsonSchemaLimits& limits = {});

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_JSON_SCHEMA_H_
