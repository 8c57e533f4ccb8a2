# SPDX-License-Identifier: Apache-2.0
"""Renders template cases with Python's Jinja2 configured as Hugging Face transformers configures
it for chat templates (the reference for test_chat_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop controls and the
{% generation %} block, tojson as json.dumps(ensure_ascii=False, ...), raise_exception(message)
and strftime_now(format).

    python3 render_jinja.py CASES.json OUT.json

CASES.json: {"cases": [{"name", "template", "context", "now": [y, m, d, H, M, S] | null}]}
OUT.json:   {"<name>": {"output": "..."} | {"error": "..."}}
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


class GenerationBlock(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers marks assistant text with it; the
    render is the block's body, in a call block of its own as transformers compiles it."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body", [])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def environment(now):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, GenerationBlock])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    when = datetime.datetime(*now) if now else None
    env.globals["strftime_now"] = lambda fmt: (when or datetime.datetime.now()).strftime(fmt)
    return env


def main():
    cases_path, out_path = sys.argv[1:3]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    results = {}
    compiled = {}  # (template text, now) -> template: many cases share one
    for case in cases:
        try:
            key = (case["template"], tuple(case.get("now") or ()))
            if key not in compiled:
                compiled[key] = environment(case.get("now")).from_string(case["template"])
            template = compiled[key]
            results[case["name"]] = {"output": template.render(**case["context"])}
        except Exception as e:  # every failure is a result to compare
            results[case["name"]] = {"error": f"{type(e).__name__}: {e}"}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
