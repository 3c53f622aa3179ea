"""Every Lua script amber ships names every key it touches in ``KEYS[]``.

Redis Cluster routes a script by its ``KEYS[]``; a key built inside the script (from
``ARGV`` or by ``..``) may lie in another slot, and the script then fails there. This
is a static check over the source of every script: the key argument of each
``redis.call`` / ``redis.pcall`` must be ``KEYS[...]``, ``unpack(KEYS, ...)``, or a
local that is only ever bound to ``KEYS[...]`` (``local key = KEYS[i + 4]``,
``for _, key in ipairs(KEYS)``, a function parameter every caller passes such a key).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import amber

KEYLESS = frozenset({"TIME", "SCRIPT", "PING", "INFO"})
"""Commands whose first argument is not a key."""

CALL = re.compile(r"\bpcall\(\s*redis\.p?call\s*,|\bredis\.p?call\(")
KEY = re.compile(r"KEYS\[[^\[\]]*\]|unpack\(KEYS\s*,.*\)")
"""A key from KEYS: one (``KEYS[i]``) or a run of them (``unpack(KEYS, a, b)``)."""
ASSIGN = re.compile(r"^\s*(?:local\s+)?([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=(?!=)\s*(.+)$")
APPEND = re.compile(r"^\s*(\w+)\[#\1\s*\+\s*1\]\s*=\s*(.+?)\s*$", re.M)
"""``t[#t + 1] = value``: one element appended to a table."""
PAIRED = frozenset({"MSET", "MSETNX"})
"""Commands taking key, value, key, value, ...: their keys may come from a pair table."""
FOR_KEYS = re.compile(r"\bfor\s+\w+\s*,\s*(\w+)\s+in\s+ipairs\(KEYS\)")
FUNCTION = re.compile(r"\blocal\s+function\s+(\w+)\s*\(([^)]*)\)")


def scripts() -> dict[str, str]:
    """Every public module-level Lua string in amber that calls Redis, by ``module.NAME``
    (fragments, named with ``_``, are checked inside the scripts that use them)."""
    found: dict[str, str] = {}
    root = Path(amber.__file__).parent
    for info in pkgutil.walk_packages(amber.__path__, "amber."):
        path = root.joinpath(*info.name.split(".")[1:])
        source = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
        if "redis.call" not in source.read_text() and "redis.pcall" not in source.read_text():
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, str) and not name.startswith("_") and CALL.search(value):
                found[f"{info.name}.{name}"] = value
    return found


def _args(lua: str, start: int) -> list[str]:
    """The top-level comma-separated arguments from ``start`` to the closing parenthesis."""
    args, depth, quote, current = [], 0, "", ""
    for ch in lua[start:]:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        current += ch
    return [*args, current.strip()]


def _key_locals(lua: str) -> set[str]:
    """Names only ever bound to a ``KEYS[...]`` (or to another such name)."""
    bindings: dict[str, list[str]] = {}
    for line in lua.splitlines():
        if m := ASSIGN.match(line):
            names = [n.strip() for n in m.group(1).split(",")]
            values = _args(m.group(2) + ")", 0)
            for i, name in enumerate(names):
                bindings.setdefault(name, []).append(values[i] if i < len(values) else "nil")
    for m in FOR_KEYS.finditer(lua):
        bindings.setdefault(m.group(1), []).append("KEYS[i]")
    for m in FUNCTION.finditer(lua):
        params = [p.strip() for p in m.group(2).split(",")]
        for call in re.finditer(rf"(?<!function )\b{m.group(1)}\(", lua):
            args = _args(lua, call.end())
            for i, param in enumerate(params):
                bindings.setdefault(param, []).append(args[i] if i < len(args) else "nil")
    keys = set(bindings)  # the largest set that is closed: names bound to themselves stay
    while True:
        bad = {n for n in keys if not all(KEY.fullmatch(v) or v in keys for v in bindings[n])}
        if not bad:
            return keys
        keys -= bad


def _pair_tables(lua: str, locals_: set[str]) -> set[str]:
    """Tables filled only in pairs, a key then its value, on two adjacent lines (``t[#t +
    1] = key`` then ``t[#t + 1] = value``), made empty (``{}``) and never written any
    other way: ``unpack`` of one from an odd index is key, value, ... for MSET."""
    lines = [line.strip() for line in lua.splitlines() if line.strip()]
    appended: dict[str, list[tuple[int, str]]] = {}
    for i, line in enumerate(lines):
        if m := APPEND.fullmatch(line):
            appended.setdefault(m.group(1), []).append((i, m.group(2)))
    tables = set()
    for t, rows in appended.items():
        keys_, values = rows[::2], rows[1::2]
        paired = len(rows) % 2 == 0 and all(
            v[0] == k[0] + 1 and (KEY.fullmatch(k[1]) or k[1] in locals_)
            for k, v in zip(keys_, values, strict=True)
        )
        made = [m.group(2) for line in lines if (m := ASSIGN.match(line)) and t in
                [n.strip() for n in m.group(1).split(",")]]  # fmt: skip
        empty = all(re.fullmatch(r"\{\s*\}(\s*,\s*\{\s*\})*", v.strip()) for v in made)
        other = re.search(rf"\b{t}\[(?!#{t}\s*\+\s*1\])[^\]]*\]\s*=(?!=)|\w+\.\w+\(\s*{t}\b", lua)
        if paired and made and empty and not other:
            tables.add(t)
    return tables


def _odd_start(lua: str, start: str) -> bool:
    """Whether ``unpack(t, start, ...)`` starts at an odd index: 1, or a loop variable
    counting from 1 by an even step."""
    if start == "1":
        return True
    loop = re.search(rf"\bfor\s+{re.escape(start)}\s*=\s*1\s*,[^,]+,\s*(\d+)\s+do\b", lua)
    return bool(loop) and int(loop.group(1)) % 2 == 0


def undeclared_keys(lua: str) -> list[str]:
    """Each ``redis.call``/``redis.pcall`` of ``lua`` whose key is not from ``KEYS[]``."""
    lua = re.sub(r"--[^\n]*", "", lua)
    locals_ = _key_locals(lua)
    pairs = _pair_tables(lua, locals_)
    bad = []
    for call in CALL.finditer(lua):
        args = _args(lua, call.end())
        command = args[0].strip("'\"").upper() if args[0][:1] in "'\"" else None
        if command in KEYLESS:
            continue
        key = args[1] if len(args) > 1 else ""
        paired = re.fullmatch(r"unpack\((\w+)\s*,\s*(\w+)\s*,.*\)", key)
        if (
            command in PAIRED
            and len(args) == 2  # nothing after: unpack's every value is an argument
            and paired
            and paired.group(1) in pairs
            and _odd_start(lua, paired.group(2))
        ):
            continue
        if not (KEY.fullmatch(key) or key in locals_):
            bad.append(f"redis.call({', '.join(args[:2])}, ...)")
    return bad


SCRIPTS = scripts()


def test_the_scripts_are_found() -> None:
    modules = {name.rsplit(".", 1)[0] for name in SCRIPTS}
    assert {"amber.memory.scripts", "amber.persistence.scripts", "amber.langgraph.scripts"} <= (
        modules
    )
    assert len(SCRIPTS) >= 25


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_key_a_script_touches_is_in_keys(name: str) -> None:
    assert undeclared_keys(SCRIPTS[name]) == []


@pytest.mark.parametrize(
    "lua",
    [
        "return redis.call('GET', ARGV[1] .. id)",
        "return redis.call('GET', KEYS[1] .. ':x')",
        "local k = ARGV[1]\nreturn redis.call('DEL', k)",
        "local k = KEYS[1]\nk = ARGV[1]\nreturn redis.call('DEL', k)",
        "local ok, v = pcall(redis.call, 'GET', 'amber:' .. ARGV[1])",
        "local function get(key) return redis.call('GET', key) end\nreturn get(ARGV[1])",
        "return redis.call('FLUSHALL')",
        "return redis.call('MGET', unpack(ARGV, 1, 3))",
        "local t = {}\nt[#t + 1] = ARGV[1]\nt[#t + 1] = ARGV[2]\n"
        "redis.call('MSET', unpack(t, 1, 2))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = KEYS[2]\nt[#t + 1] = ARGV[1]\n"
        "redis.call('MSET', unpack(t, 1, 3))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\nt[1] = ARGV[2]\n"
        "redis.call('MSET', unpack(t, 1, 2))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\n"
        "redis.call('DEL', unpack(t, 1, 2))",
        "local t = {}\nfor i = 1, 2 do\nt[#t + 1] = KEYS[i]\nend\nfor i = 1, 2 do\n"
        "t[#t + 1] = ARGV[i]\nend\nredis.call('MSET', unpack(t, 1, 4))",
        "local t = {ARGV[1]}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[2]\n"
        "redis.call('MSET', unpack(t, 1, 3))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\ntable.insert(t, 1, ARGV[2])\n"
        "redis.call('MSET', unpack(t, 1, 3))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\nt = ARGV\n"
        "redis.call('MSET', unpack(t, 1, 2))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\nt[#t + 1] = KEYS[2]\n"
        "t[#t + 1] = ARGV[2]\nredis.call('MSET', unpack(t, 2, 3))",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\n"
        "redis.call('MSET', unpack(t, 1, 2), ARGV[3], ARGV[4])",
        "local t = {}\nt[#t + 1] = KEYS[1]\nt[#t + 1] = ARGV[1]\n"
        "for j = 2, #t, 2 do redis.call('MSET', unpack(t, j, j + 1)) end",
    ],
)
def test_the_check_finds_a_key_built_in_the_script(lua: str) -> None:
    assert undeclared_keys(lua) != []


@pytest.mark.parametrize(
    "lua",
    [
        "local t = redis.call('TIME')\nreturn redis.call('GET', KEYS[1])",
        "for i, key in ipairs(KEYS) do redis.call('DEL', key) end",
        "local key, item = KEYS[i + 4], data[i]\nredis.call('SET', key, item)",
        "local function get(key) return redis.call('GET', key) end\nreturn get(KEYS[2])",
        "return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))  -- redis.call('GET', ARGV[1])",
        "return redis.call('MGET', unpack(KEYS, first + j - 1, first + k - 1))",
        "local key = KEYS[i + 4]\nlocal t = {}\nt[#t + 1] = key\nt[#t + 1] = ARGV[i]\n"
        "redis.call('MSET', unpack(t, 1, 2))",
        "local a, t = {}, {}\nfor i = 1, n do\n  local key = KEYS[i]\n  if x then\n"
        "    t[#t + 1] = key\n    t[#t + 1] = ARGV[i]\n  end\nend\n"
        "for j = 1, #t, 1000 do\n  redis.call('MSET', unpack(t, j, math.min(j + 999, #t)))\nend",
    ],
)
def test_the_check_accepts_declared_keys(lua: str) -> None:
    assert undeclared_keys(lua) == []
