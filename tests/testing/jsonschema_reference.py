"""Validates JSON texts against JSON Schemas with Python's jsonschema.

  jsonschema_reference.py IN OUT

IN holds one JSON object per line: {"schema": SCHEMA_TEXT, "instance":
TEXT}. OUT gets one line per input line: "" when TEXT is JSON that validates
(the validator the schema's $schema names, draft 2020-12 when none, with
that draft's format checking), else why not, as a JSON string.
"""
import json
import sys

import jsonschema

validators = {}


def check(schema_text, instance_text):
    try:
        instance = json.loads(instance_text)
    except ValueError as e:
        return "not JSON: %s" % e
    validator = validators.get(schema_text)
    if validator is None:
        schema = json.loads(schema_text)
        cls = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator)
#The draft's own format checker: FormatChecker() mixes every
#draft 's, and draft 3' s "time" refuses RFC 3339 times.
        checker = getattr(cls, "FORMAT_CHECKER", None) or \
            jsonschema.FormatChecker()
        validator = cls(schema, format_checker=checker)
        validators[schema_text] = validator
    errors = sorted(validator.iter_errors(instance), key=lambda e: e.path)
    if not errors:
        return ""
    e = errors[0]
    return "%s at %s" % (e.message[:300], "/".join(str(p) for p in e.path))


def main():
    with open(sys.argv[1], encoding="utf-8") as f_in, \
            open(sys.argv[2], "w", encoding="utf-8") as f_out:
        for line in f_in:
            item = json.loads(line)
            try:
                result = check(item["schema"], item["instance"])
            except Exception as e:  # a schema the library cannot use
                result = "the validator failed: %r" % (e,)
            f_out.write(json.dumps(result) + "\n")


main()
