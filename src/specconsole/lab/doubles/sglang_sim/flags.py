"""The command line: SGLang 0.5.23's parser, rebuilt from its flags JSON, and the simulated version.

The argparse parser is built from ``data/flags-0.5.23.json`` (every action of SGLang
0.5.23's parser: aliases, types, choices, ``store_true``, ``--x/--no-x`` pairs, nargs), so
the simulator accepts exactly SGLang 0.5.23's flags and refuses unknown ones the way
argparse does (usage on stderr, ``sglang serve: error: unrecognized arguments: ...``,
exit 2). ``--help`` prints the real help text (``data/serve-help-0.5.23.txt``).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from importlib import resources
from typing import Any

from specconsole.lab.doubles import sglang_versions

VERSION = sglang_versions.sim_version()
PROG = "sglang serve"
FLAGS_FILE = "flags-0.5.23.json"
HELP_FILE = "serve-help-0.5.23.txt"


def _data_text(name: str) -> str:
    return resources.files("specconsole.lab").joinpath("data", name).read_text("utf-8")


def load_flags() -> list[dict[str, Any]]:
    return sglang_versions.flags(VERSION, json.loads(_data_text(FLAGS_FILE)))


def _split_help() -> tuple[str, str, str]:
    """(the launch_server UserWarning lines, the usage block, the full help)."""
    text = sglang_versions.help_text(VERSION, _data_text(HELP_FILE))
    start = text.index("usage: ")
    warning, full = text[:start], text[start:]
    usage = full[: full.index("\n\n") + 1]
    return warning, usage, full


def human_readable_int(value: str) -> int:
    """SGLang's integer type with SI (k, M, G, T) and IEC (Ki, Mi, Gi, Ti) suffixes."""
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
        if suffix in iec:
            if "." in number:
                raise ValueError(value)
            return int(number) * iec[suffix]
        return int(float(number) * si[suffix])
    return int(value)


def json_list_type(value: str) -> list[Any]:
    parsed = json.loads(value)
    if not isinstance(parsed, list):
        raise ValueError(value)
    return parsed


def loads(value: str) -> Any:  # named like json.loads: argparse names the type in errors
    return json.loads(value)


def nullable_str(value: str) -> str | None:
    if not value or value == "None":
        return None
    return value


def parse_cuda_graph_backend_arg(value: str) -> str:
    return value


def parse_cuda_graph_config_arg(value: str) -> str:
    return value


_TYPES: dict[str, Any] = {
    "str": str, "int": int, "float": float, "None": None,
    "human_readable_int": human_readable_int, "json_list_type": json_list_type,
    "loads": loads, "nullable_str": nullable_str,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}

#: Flags SGLang marks required (shown without brackets in the usage line).
_REQUIRED = {"model_path"}


class SglangArgumentParser(argparse.ArgumentParser):
    """argparse with SGLang's real help and usage text."""

    def __init__(self, usage_text: str, help_text: str) -> None:
        super().__init__(prog=PROG, add_help=False)
        self._usage_text = usage_text
        self._help_text = help_text

    def format_usage(self) -> str:
        return self._usage_text

    def format_help(self) -> str:
        return self._help_text


def build_parser() -> SglangArgumentParser:
    _, usage, full = _split_help()
    parser = SglangArgumentParser(usage, full)
    for flag in load_flags():
        opts, dest, action = flag["opts"], flag["dest"], flag["action"]
        default = ast.literal_eval(flag["default"])
        if action == "_HelpAction":
            parser.add_argument(*opts, action="help", default=argparse.SUPPRESS)
            continue
        kwargs: dict[str, Any] = {"dest": dest, "default": default}
        if action == "_StoreTrueAction":
            kwargs["action"] = "store_true"
        elif action == "BooleanOptionalAction":
            kwargs["action"] = argparse.BooleanOptionalAction
            opts = [o for o in opts if not o.startswith("--no-")]
        else:  # _StoreAction and SGLang's LoRAPathAction (a store of a list)
            typ = _TYPES.get(flag["type"], str)
            if typ is not None:
                kwargs["type"] = typ
            if flag["choices"] is not None:
                kwargs["choices"] = flag["choices"]
            if flag["nargs"] is not None:
                kwargs["nargs"] = flag["nargs"]
                if flag["nargs"] == "?":
                    kwargs["const"] = ""
            if dest in _REQUIRED:
                kwargs["required"] = True
        parser.add_argument(*opts, **kwargs)
    return parser
