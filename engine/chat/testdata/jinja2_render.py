"""Renders chat templates with Python's Jinja2 set up as transformers' apply_chat_template
sets it up (the reference the Go renderer is compared with): an immutable sandbox with
trim_blocks, lstrip_blocks and loop controls, tojson as json.dumps without ASCII escaping,
raise_exception and strftime_now as globals. strftime_now reads the case's fixed clock.

stdin: {"cases": [{"template", "messages", "add_generation_prompt", "vars", "now"}]}
stdout: [{"rendered": str} or {"error": str, "raised": bool}] in the cases' order.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox


class Raised(Exception):
    pass


_compiled = {}


def render(case):
    now = datetime.datetime.fromisoformat(case.get("now", "2024-07-26T13:05:09"))

    def raise_exception(message):
        raise Raised(message)

    def strftime_now(fmt):
        return now.strftime(fmt)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    try:
        tmpl = _compiled.get(case["template"])
        if tmpl is None:
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
            env.filters["tojson"] = tojson
            tmpl = _compiled[case["template"]] = env.from_string(case["template"])
        # The globals are the case's: strftime_now reads its clock.
        tmpl.globals["raise_exception"] = raise_exception
        tmpl.globals["strftime_now"] = strftime_now
        out = tmpl.render(messages=case["messages"], tools=None, documents=None,
                          add_generation_prompt=case["add_generation_prompt"], **case.get("vars", {}))
        return {"rendered": out}
    except Raised as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # noqa: BLE001 - any template error is a result here
        return {"error": "%s: %s" % (type(e).__name__, e), "raised": False}


def main():
    req = json.load(sys.stdin)
    json.dump([render(c) for c in req["cases"]], sys.stdout, ensure_ascii=False)


main()
