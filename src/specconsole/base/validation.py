"""One translator from typed declarations to the file's words.

Config, eval suite, result files and themes are declared as :mod:`msgspec` structs whose
fields carry their constraints (:func:`num`, :data:`Text`, ``Literal`` choices). msgspec
validates; :func:`convert` turns its first complaint (and an unknown key, a missing key, an
``inf``/``nan`` anywhere) into one ``(key, problem, fix)``: the same one-line wording for every
file, with did-you-mean hints. A new constrained field is one line::

    interval_s: Annotated[float, num(gt=0, why="it is the time between two polls")] = 2.0
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import inspect as mi

from specconsole.base.values import printable

S = TypeVar("S")

#: A string that must hold something other than spaces.
Text = Annotated[str, msgspec.Meta(pattern=r"\S")]


class Table(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Base of a declared file table as a msgspec struct: immutable, and an unknown key is an
    error. A frozen dataclass works as well (the config's tables are, so ``dataclasses.replace``
    keeps working on them): its unknown keys are refused too."""


def num(*, gt: float | None = None, ge: float | None = None, le: float | None = None, why: str = "",
        what: str = "", problem: str = "", fix: str = "", example: float | None = None) -> msgspec.Meta:
    """A number's allowed range: ``gt``/``ge``/``le``; ``why`` says in the error why the bound
    exists; ``what`` names the kind of value (``a TCP port``), or ``problem`` words the whole
    complaint (``must be a positive integer``) and ``fix`` the fix; ``example`` is what the fix
    suggests (default: the field's default). ``inf`` and ``nan`` are refused for every number."""
    extra: dict[str, Any] = {"why": why, "what": what, "problem": problem, "fix": fix}
    if example is not None:
        extra["example"] = example
    if gt is not None and ge is not None:
        raise ValueError("num(): give gt or ge, not both")
    if gt is not None:
        return msgspec.Meta(gt=gt, le=le, extra=extra)
    return msgspec.Meta(ge=ge, le=le, extra=extra)


def text(pattern: str, problem: str, fix: str, allowed: str = "") -> msgspec.Meta:
    """A string matching ``pattern``; otherwise ``problem`` (``must be a simple name``) and ``fix``;
    ``allowed`` is what the config reference's "allowed" column says."""
    return msgspec.Meta(pattern=pattern, extra={"problem": problem, "fix": fix, "allowed": allowed})


#: Not empty and not beginning with "-": a word a command on the host receives as an operand (a
#: unit name, a path), which it would otherwise read as an option (``systemctl cat -Hroot@x``).
#: The commands also put it after ``--``; the config refuses it to begin with.
NOT_AN_OPTION = r"^(?!-)[\s\S]*\S"


def option_type(tp: Any, option: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that reads a command-line number as the config reads a key declared
    ``tp`` (e.g. ``Annotated[float, num(ge=0, ...)]``): the same checks (finite, in range, whole)
    and the same one-line wording, keyed by ``option``. A bad value raises
    :class:`~specconsole.base.errors.UsageError` (exit 2, one line) out of ``parse_args``: it is not a
    ``ValueError`` on purpose, so argparse does not turn it into its usage text."""
    from specconsole.base.errors import UsageError

    def read(raw: str) -> Any:
        try:
            return option_value(raw, tp, option)
        except Invalid as err:
            raise UsageError(str(err)) from None

    read.__name__ = option  # argparse names the type in its own messages
    return read


def option_value(raw: str, tp: Any, option: str) -> Any:
    """``raw`` (a command-line word) as a value of ``tp``; raises :class:`Invalid` keyed ``option``."""
    value: object = raw
    for parse in (int, float):
        try:
            value = parse(raw)
            break
        except ValueError:
            continue
    cls = msgspec.defstruct("Option", [("value", tp)], forbid_unknown_fields=True)
    return getattr(convert({"value": value}, cls, label=lambda _data, _path: option), "value")  # noqa: B009


#: ``(problem, fix)`` for a file whose tables or arrays nest deeper than the parser can follow
#: (500 ``[`` in a row: Python's recursion limit): refused in one line at every file's load
#: (config, eval suite, results file, theme), never a RecursionError traceback.
TOO_DEEP = ("tables or arrays nested too deeply to read (hundreds of levels)",
            "flatten the file: these files nest a few levels at most")


class Invalid(Exception):
    """What :func:`convert` found: ``key`` (dotted, as written in the file), ``problem``, ``fix``."""

    def __init__(self, key: str | None, problem: str, fix: str) -> None:
        super().__init__(f"{key}: {problem} (fix: {fix})")
        self.key, self.problem, self.fix = key, problem, fix


Path = tuple[str | int, ...]


def convert(data: object, cls: type[S], *, label: Callable[[object, Path], str] | None = None,
            top: str = "top-level key", json: bool = False) -> S:
    """``data`` (parsed TOML/JSON) as a ``cls``; raises :class:`Invalid` naming the first problem.

    ``label(data, path)`` spells a path as the file's reader knows it (default :func:`dotted`);
    ``top`` is what an unknown key at the top is called; ``json``: the fixes are written in JSON,
    and a whole number written as ``3.0`` counts as an integer (other tools write them so).
    """
    try:
        return _convert(data, cls, label, top, json)
    except RecursionError:
        raise Invalid(None, *TOO_DEEP) from None


_TYPE_INFO: dict[Any, mi.Type] = {}


def _type_info(cls: Any) -> mi.Type:
    """msgspec's description of ``cls``, made once per process (a walk of every annotation: ~3 ms
    for the config; the declarations do not change while the process runs)."""
    info = _TYPE_INFO.get(cls)
    if info is None:
        info = _TYPE_INFO[cls] = mi.type_info(cls)
    return info


def _convert(data: object, cls: type[S], label: Callable[[object, Path], str] | None, top: str, json: bool) -> S:
    name = label or dotted
    info = _type_info(cls)
    if json:
        data = _whole_floats(data, info)
    stray = _unknown_key(data, info, ())
    if stray is not None:
        raise _translate(f"Object contains unknown field `{stray[-1]}` - at `${_dollar(stray[:-1])}`",
                         data, info, name, top, json)
    bad = _non_finite(data, ())
    if bad is not None:
        at = _info_at(info, bad)
        fix = f"use {_example(at)}" if at is not None else "use a finite number"
        raise Invalid(name(data, bad), f"must be a finite number, got {_at(data, bad)!r}", fix)
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as err:
        raise _translate(str(err), data, info, name, top, json) from None


def dotted(data: object, path: Path) -> str:
    """``a.b[0].c``."""
    out = ""
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else seg)
    return out


def named_items(data: object, path: Path) -> str:
    """Like :func:`dotted`, with a list item's ``name`` beside its index: ``hosts[0] (gpu1).port``."""
    out, node = "", data
    for seg in path:
        node = _child(node, seg)
        if isinstance(seg, int):
            out += f"[{seg}]"
            if isinstance(node, dict) and isinstance(node.get("name"), str) and node["name"]:
                out += f" ({printable(node['name'])})"
        else:
            out += f".{seg}" if out else seg
    return out


# --------------------------------------------------------------------------- internals

_MISSING = object()
_AT = re.compile(r"^(?P<detail>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_SEG = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
#: msgspec names a dict's key as ``[...]``: the first key whose value does not fit stands for it
_ANY_KEY = "..."


def _child(node: object, seg: str | int) -> object:
    if isinstance(seg, int):
        return node[seg] if isinstance(node, list) and seg < len(node) else _MISSING
    return node.get(seg, _MISSING) if isinstance(node, dict) else _MISSING


def _fits(value: object, t: mi.Type) -> bool:
    """A quick look (not a validation) at whether ``value`` is of ``t``'s kind: enough to find
    which of a dict's entries msgspec complained about."""
    s = _strip(t)
    if isinstance(s, mi.StrType):
        return isinstance(value, str) and len(value) >= (s.min_length or 0)
    if isinstance(s, mi.BoolType):
        return isinstance(value, bool)
    if isinstance(s, mi.IntType | mi.FloatType):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(s, mi.StructType | mi.DataclassType | mi.DictType):
        return isinstance(value, dict)
    return True


def _resolve_keys(data: object, root: mi.Type, path: Path) -> Path:
    """``path`` with each ``[...]`` (a dict entry msgspec does not name) replaced by the key of
    the first entry whose value does not fit."""
    out: list[str | int] = []
    node, t = data, root
    for seg in path:
        if seg == _ANY_KEY and isinstance(node, dict):
            step = _step(t, "")
            bad = [k for k, v in node.items() if step is None or not _fits(v, step[0])]
            seg = str(bad[0] if bad else next(iter(node), seg))
        out.append(seg)
        info = _step(t, seg) if t is not None else None
        node = _child(node, seg)
        if info is None:
            return (*out, *path[len(out):])
        t = info[0]
    return tuple(out)


def _at(data: object, path: Path) -> object:
    for seg in path:
        data = _child(data, seg)
    return data


def _dollar(path: Path) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)


def _unknown_key(node: object, t: mi.Type, path: Path) -> Path | None:
    """The first key of a dataclass table that its declaration does not have (msgspec checks
    structs itself, and ignores unknown keys of dataclasses)."""
    s = _strip(t)
    if isinstance(node, dict) and isinstance(s, mi.DataclassType | mi.StructType):
        fields = _fields(s)
        for k, v in node.items():
            if k not in fields:
                if isinstance(s, mi.DataclassType):
                    return (*path, k)
                continue
            found = _unknown_key(v, fields[k].type, (*path, k))
            if found is not None:
                return found
    elif isinstance(node, list) and isinstance(s, mi.VarTupleType | mi.ListType):
        for i, v in enumerate(node):
            found = _unknown_key(v, s.item_type, (*path, i))
            if found is not None:
                return found
    return None


def _non_finite(node: object, path: Path) -> Path | None:
    if isinstance(node, float) and not math.isfinite(node):
        return path
    items: list[tuple[str | int, object]] = (
        list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else [])
    for seg, value in items:
        found = _non_finite(value, (*path, seg))
        if found is not None:
            return found
    return None


def _strip(t: mi.Type) -> mi.Type:
    """The value's own type: without ``| None`` and declaration metadata."""
    if isinstance(t, mi.UnionType):
        rest = [x for x in t.types if not isinstance(x, mi.NoneType)]
        if len(rest) == 1:
            return _strip(rest[0])
    if isinstance(t, mi.Metadata):
        return _strip(t.type)
    return t


def _extra(t: mi.Type) -> dict[str, Any]:
    if isinstance(t, mi.UnionType):
        for x in t.types:
            if isinstance(x, mi.Metadata) and x.extra:
                return dict(x.extra)
    return dict(t.extra or {}) if isinstance(t, mi.Metadata) else {}


_Field = tuple[mi.Type, object]  # (declared type, default)


def _fields(t: mi.Type) -> dict[str, mi.Field]:
    s = _strip(t)
    return {f.encode_name: f for f in s.fields} if isinstance(s, mi.StructType | mi.DataclassType) else {}


def _step(t: mi.Type, seg: str | int) -> _Field | None:
    s = _strip(t)
    if isinstance(seg, str):
        if isinstance(s, mi.StructType | mi.DataclassType):
            f = _fields(s).get(seg)
            return None if f is None else (f.type, f.default)
        if isinstance(s, mi.DictType):
            return s.value_type, msgspec.NODEFAULT
        return None
    if isinstance(s, mi.VarTupleType | mi.ListType):
        return s.item_type, msgspec.NODEFAULT
    return None


def _info_at(t: mi.Type, path: Path) -> _Field | None:
    cur: _Field | None = (t, msgspec.NODEFAULT)
    for seg in path:
        if cur is None:
            return None
        cur = _step(cur[0], seg)
    return cur


def _example(info: _Field) -> str:
    t, default = info
    ex = _extra(t).get("example", default)
    if isinstance(ex, bool) or not isinstance(ex, int | float):
        return "e.g. 1" if isinstance(_strip(t), mi.IntType) else "e.g. 1.0"
    return f"e.g. {ex:g}"


def _whole_floats(node: object, t: mi.Type) -> object:
    s = _strip(t)
    if isinstance(s, mi.IntType) and isinstance(node, float) and node.is_integer():
        return int(node)
    if isinstance(node, dict) and isinstance(s, mi.StructType | mi.DataclassType):
        fields = _fields(s)
        return {k: _whole_floats(v, fields[k].type) if k in fields else v for k, v in node.items()}
    if isinstance(node, list) and isinstance(s, mi.VarTupleType | mi.ListType):
        return [_whole_floats(v, s.item_type) for v in node]
    return node


def _translate(message: str, data: object, root: mi.Type, name: Callable[[object, Path], str],
               top: str, json: bool) -> Invalid:
    m = _AT.match(message)
    detail = m.group("detail") if m else message
    raw: Path = tuple(k or (i if i == _ANY_KEY else int(i)) for k, i in _SEG.findall(m.group("path") or "")) \
        if m else ()
    path = _resolve_keys(data, root, raw)
    unknown = re.match(r"Object contains unknown field `(.+)`", detail)
    if unknown:
        key = unknown.group(1)
        table = _info_at(root, path)
        allowed = sorted(_fields(table[0])) if table is not None else []
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"remove it (allowed: {', '.join(allowed)})"
        return Invalid(name(data, (*path, key)), f"unknown {top if not path else 'key'}", hint)
    missing = re.match(r"Object missing required field `(.+)`", detail)
    if missing:
        key = name(data, (*path, missing.group(1)))
        return Invalid(key, "is missing", f'add "{missing.group(1)}": ...' if json else f"add {key} = ...")
    # an item of a list is reported at the list: "must be a list of strings"
    while path and isinstance(path[-1], int):
        info = _info_at(root, path[:-1])
        if info is None or isinstance(_strip(info[0]), mi.StructType | mi.DataclassType):
            break
        path = path[:-1]
    info = _info_at(root, path)
    key = name(data, path) or None
    if info is None:
        return Invalid(key, detail, "see the documentation for this file")
    problem, fix = explain(_at(data, path), info, key or "")
    return Invalid(key, problem, fix)


def explain(value: object, info: _Field, key: str) -> tuple[str, str]:
    """Why ``value`` does not fit the declared type: ``(problem, fix)`` in the file's words."""
    t, _default = info
    s = _strip(t)
    short = key.rsplit(".", 1)[-1]
    if isinstance(s, mi.LiteralType):
        choices = [str(c) for c in s.values]
        meta = _extra(t)
        if meta.get("problem"):
            return f"{meta['problem']}, got {value!r}", str(meta.get("fix") or f"use one of {', '.join(choices)}")
        return f"must be one of {', '.join(choices)}, got {value!r}", f'set {key} = "{choices[0]}"'
    if isinstance(s, mi.BoolType):
        return f"must be true or false, got {value!r}", "write true or false"
    if isinstance(s, mi.IntType | mi.FloatType):
        return _explain_number(value, s, _extra(t), _example(info))
    if isinstance(s, mi.StrType):
        meta = _extra(t)
        if meta.get("problem") and isinstance(value, str):
            return f"{meta['problem']}, got {value!r}", str(meta.get("fix") or "see the documentation for this file")
        return f"must be a non-empty string, got {value!r}", 'write it in quotes, e.g. "x"'
    if isinstance(s, mi.VarTupleType | mi.ListType) and isinstance(_strip(s.item_type), mi.StrType):
        return "must be a list of strings", f'write {short} = ["..."]'
    if isinstance(s, mi.VarTupleType | mi.ListType):
        return f"must be an array, got {type(value).__name__}", f"write [[{short}]] tables"
    if isinstance(s, mi.StructType | mi.DataclassType | mi.DictType):
        return f"must be a table, got {type(value).__name__}", f"write [{short}]"
    return f"invalid value {value!r}", "see the documentation for this file"


def _bound(b: float) -> str:
    """A range's bound as written: ``1048576``, not ``1.04858e+06``."""
    return str(int(b)) if float(b).is_integer() and abs(b) < 1e15 else f"{b:g}"


def _explain_number(value: object, s: mi.IntType | mi.FloatType, meta: Mapping[str, Any],
                    example: str) -> tuple[str, str]:
    integer = isinstance(s, mi.IntType)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be {'an integer' if integer else 'a number'}, got {value!r}", f"use {example}"
    if integer and not isinstance(value, int):
        return f"must be an integer, got {value!r}", f"use a whole number, {example}"
    gt, ge, le = s.gt, s.ge, s.le
    allowed = " and ".join(f"{op} {_bound(b)}" for op, b in ((">", gt), (">=", ge), ("<=", le)) if b is not None)
    what = meta.get("what")
    problem = (f"not {what}: {value!r}" if what else meta.get("problem") or
               ("must be positive" if gt == 0 and le is None else f"must be {allowed}"))
    if not what:
        problem += f", got {value!r}"
    why = f" ({meta['why']})" if meta.get("why") else ""
    return problem + why, str(meta.get("fix") or f"use a value {allowed}, {example}")


def reference(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """Every key a file of ``cls`` may hold: ``(dotted key, type, default, allowed)`` rows, in
    declaration order (tables nested in tables, arrays of tables as ``hosts.name``). The README's
    config reference is checked against these (``scripts/config_reference.py`` prints them)."""
    rows: list[tuple[str, str, str, str]] = []
    for f in _fields(mi.type_info(cls)).values():
        key = f"{prefix}{f.encode_name}"
        s = _strip(f.type)
        if isinstance(s, mi.VarTupleType | mi.ListType) and isinstance(_strip(s.item_type),
                                                                      mi.StructType | mi.DataclassType):
            s = _strip(s.item_type)
        if isinstance(s, mi.StructType | mi.DataclassType):
            rows.extend(reference(s.cls, f"{key}."))
            continue
        if isinstance(s, mi.DictType):
            rows.append((f"{key}.<name>", _type_name(_strip(s.value_type)), "", _allowed(s.value_type)))
            continue
        default = ("(required)" if f.required else "(computed)" if f.default_factory is not msgspec.NODEFAULT
                   else _toml(f.default))
        rows.append((key, _type_name(s), default, _allowed(f.type)))
    return rows


def _toml(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[]" if not value else repr(list(value))
    return repr(value)


def _type_name(s: mi.Type) -> str:
    names = {mi.BoolType: "bool", mi.IntType: "int", mi.FloatType: "float", mi.StrType: "string",
             mi.LiteralType: "string"}
    if isinstance(s, mi.VarTupleType | mi.ListType):
        return f"list of {_type_name(_strip(s.item_type))}"
    return names.get(type(s), type(s).__name__)


def _allowed(t: mi.Type) -> str:
    s = _strip(t)
    if isinstance(s, mi.LiteralType):
        return ", ".join(str(v) for v in s.values)
    if isinstance(s, mi.IntType | mi.FloatType):
        return " and ".join(f"{op} {_bound(b)}" for op, b in ((">", s.gt), (">=", s.ge), ("<=", s.le))
                            if b is not None)
    if isinstance(s, mi.StrType) and s.pattern == r"\S":
        return "non-empty"
    return str(_extra(t).get("allowed") or "")
