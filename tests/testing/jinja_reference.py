#!/usr/bin/python3
"""Reference renderer for kvserve's Jinja2 interpreter (core/chat/jinja.h).

Renders templates with Python's jinja2 in the environment Hugging Face
transformers renders chat templates with (its _compile_jinja_template):

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
      extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"]          transformers' tojson (no HTML escaping)
  globals["raise_exception"] raises jinja2.exceptions.TemplateError(message)
  globals["strftime_now"]    datetime.now().strftime(format), here with the
                             case's fixed clock so results are reproducible

stdin:  a JSON array of cases {"template": str, "context": object,
        "now": epoch seconds}. The context becomes the render's keyword
        arguments exactly as given (key order kept); a chat-template caller
        passes transformers' variables (messages, tools, documents,
        add_generation_prompt, bos_token, eos_token) itself.
stdout: a JSON array, one result per case: {"ok": rendered text} or
        {"error": message, "raised": bool}; "raised" is true when the
        template called raise_exception, and "error" is then exactly its
        message. A syntax error is its case's result, not the run's.

Exit status 0 when every case was attempted; 2 for unreadable input.
Run with Debian's /usr/bin/python3 (python3-jinja2).
"""

import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedException(jinja2.exceptions.TemplateError):
    """What raise_exception throws: a TemplateError, as in transformers, of
    its own type so the result can say the template raised it."""


class AssistantTracker(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body unchanged,
    as transformers' AssistantTracker does when no tracking is active."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",),
                                       drop_needle=True)
        call = self.call_method("_generation_support")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise RaisedException(message)


class Clock:
    """strftime_now's time: the current case's `now`, in local time."""

    def __init__(self):
        self.now_seconds = 0

    def strftime_now(self, format):
        now = datetime.datetime.fromtimestamp(self.now_seconds)
        return now.strftime(format)


def make_environment(clock):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = clock.strftime_now
    return env


def render_case(env, clock, case):
    clock.now_seconds = case.get("now", 0)
    try:
        template = env.from_string(case["template"])
        return {"ok": template.render(**case.get("context", {}))}
    except RaisedException as e:
        return {"error": e.message, "raised": True}
    except Exception as e:  # any other failure is the case's result
        return {"error": "%s: %s" % (type(e).__name__, e), "raised": False}


def main():
    try:
        cases = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    except ValueError as e:  # includes UnicodeDecodeError
        sys.stderr.write("jinja_reference.py: unreadable input: %s\n" % e)
        return 2
    if not isinstance(cases, list):
        sys.stderr.write("jinja_reference.py: input is not a JSON array\n")
        return 2
    clock = Clock()
    env = make_environment(clock)
    results = [render_case(env, clock, case) for case in cases]
    # ASCII output: every other character (and any lone surrogate a
    # template might produce) travels as a \u escape.
    sys.stdout.write(json.dumps(results, ensure_ascii=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
