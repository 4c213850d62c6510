"""The one check of a result file against harness/results/schema/result.schema.json, in plain Python.

The GPU image has no jsonschema, and `report` and `regress` must refuse there exactly what they refuse
elsewhere: so no file is ever checked by jsonschema, but by this interpreter of the keywords the schema
uses (type, const, enum, required, properties, additionalProperties, propertyNames, items, minimum,
maximum, minLength, maxLength, maxItems, pattern, format date-time, anyOf, if/then, $ref). Each error is one
line naming the field. A keyword it does not know is an error in the schema, not a pass.
"""
from __future__ import annotations

import datetime as _dt
import re
from typing import Any

# Free-form by nature: a JSON Schema node ({"type", "properties", "$ref", ...}), the JSON Schema vocabulary's keys
Schema = dict[str, Any]

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
_KNOWN = {"$schema", "$id", "$defs", "title", "description", "type", "const", "enum", "required", "properties",
          "additionalProperties", "propertyNames", "items", "maxItems", "minimum", "maximum", "minLength", "maxLength",
          "pattern", "format", "anyOf", "if", "then", "$ref"}


class SchemaError(ValueError):
    """str(self): where (scenarios.x.rows[3].timing) and what is wrong."""


_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,60}")


def where(path: list[Any]) -> str:
    """scenarios.x.rows[3].timing; a key that is not a plain name is quoted, so the line stays one line."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{_short(part)}]"
    return out or "the top level"


def _is_type(x: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool)
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return isinstance(x, _TYPES[t])


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


class Checker:
    def __init__(self, schema: Schema) -> None:
        self.root = schema
        self.patterns: dict[str, re.Pattern[str]] = {}
        self.known: set[int] = set()  # ids of the schema's nodes already vetted (they live as long as root)

    def check(self, x: Any) -> None:
        self._check(x, self.root, [])

    def _resolve(self, ref: str) -> Schema:
        assert ref.startswith("#/$defs/"), ref
        return self.root["$defs"][ref[len("#/$defs/"):]]

    def ok(self, x: Any, s: Schema, path: list[Any]) -> bool:
        try:
            self._check(x, s, path)
        except SchemaError:
            return False
        return True

    def _check(self, x: Any, s: Schema, path: list[Any]) -> None:  # noqa: C901 - one keyword a branch
        if id(s) not in self.known:  # each schema node is looked at once; where() only for an error
            unknown = set(s) - _KNOWN
            if unknown:
                raise AssertionError(f"schema keyword(s) {sorted(unknown)} not known to harness/results/schema_check.py")
            self.known.add(id(s))
        if "$ref" in s:
            self._check(x, self._resolve(s["$ref"]), path)
        if "anyOf" in s and not any(self.ok(x, sub, path) for sub in s["anyOf"]):
            raise SchemaError(f"{where(path)}: {_short(x)} is not valid here")
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_is_type(x, t) for t in types):
                raise SchemaError(f"{where(path)}: {_short(x)} is not of type {', '.join(map(repr, types))}")
        if "const" in s and (x != s["const"] or type(x) is not type(s["const"])):
            raise SchemaError(f"{where(path)}: {_short(x)} is not {s['const']!r}")
        if "enum" in s and not any(x == e and type(x) is type(e) for e in s["enum"]):
            raise SchemaError(f"{where(path)}: {_short(x)} is not one of {list(s['enum'])!r}")
        if _is_type(x, "number"):
            if "minimum" in s and x < s["minimum"]:
                raise SchemaError(f"{where(path)}: {_short(x)} is less than the minimum of {s['minimum']}")
            if "maximum" in s and x > s["maximum"]:
                raise SchemaError(f"{where(path)}: {_short(x)} is greater than the maximum of {s['maximum']}")
        if isinstance(x, str):
            if len(x) < s.get("minLength", 0):
                raise SchemaError(f"{where(path)}: {_short(x)} is too short")
            if "maxLength" in s and len(x) > s["maxLength"]:
                raise SchemaError(f"{where(path)}: a string of {len(x)} characters, more than {s['maxLength']}")
            if "pattern" in s:
                p = self.patterns.setdefault(s["pattern"], re.compile(s["pattern"]))
                # JSON Schema's '$' ends the string; Python's also matches before a final newline
                if not p.search(x) or (s["pattern"].endswith("$") and x.endswith("\n")):
                    raise SchemaError(f"{where(path)}: {_short(x)} does not match {s['pattern']}")
            if s.get("format") == "date-time":
                try:
                    _dt.datetime.fromisoformat(x)
                except ValueError:
                    raise SchemaError(f"{where(path)}: {_short(x)} is not a date and time (ISO 8601)") from None
        if isinstance(x, dict):
            for k in s.get("required", []):
                if k not in x:
                    raise SchemaError(f"{where(path)}: {k!r} is a required property")
            props = s.get("properties", {})
            extra = s.get("additionalProperties", True)
            for k, v in x.items():
                if "propertyNames" in s:  # a bad name is the object's fault, said where the object is
                    self._check(k, s["propertyNames"], path)
                if k in props:
                    self._check(v, props[k], [*path, k])
                elif extra is False:
                    raise SchemaError(f"{where(path)}: unexpected property {_short(k)}")
                elif isinstance(extra, dict):
                    self._check(v, extra, [*path, k])
        if isinstance(x, list) and "maxItems" in s and len(x) > s["maxItems"]:
            raise SchemaError(f"{where(path)}: {len(x)} items, more than {s['maxItems']}")
        if isinstance(x, list) and isinstance(s.get("items"), dict):
            for i, v in enumerate(x):
                self._check(v, s["items"], [*path, i])
        if "if" in s and self.ok(x, s["if"], path) and "then" in s:
            self._check(x, s["then"], path)
