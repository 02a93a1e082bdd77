"""Property-based fuzzing of the policy loader (policy/load.py, policy/model.py).

A policy file is written by a person (or handed over by an agent's caller):
whatever its text, loading gives a Policy that resolves on any host, or
PolicyInvalid with one located line. `validate_policy` claims that a policy
it accepts resolves for any absolute workspace, home and tmpdir; the fuzzer
holds it to that.
"""

from __future__ import annotations

import json
import string

from hypothesis import event, example, given
from hypothesis import strategies as st

from policy.floor import meet
from policy.load import PolicyInvalid, load_preset, parse_policy
from policy.model import PolicyError, resolve

TEXT = st.text(max_size=30)
SCALAR = st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.floats() | TEXT
VALUE = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3), max_leaves=6)


def mostly(valid: st.SearchStrategy, junk: st.SearchStrategy = SCALAR) -> st.SearchStrategy:
    """`valid` nine times in ten, so that whole policies load often enough to reach `resolve`."""
    return st.integers(0, 9).flatmap(lambda n: junk if n == 0 else valid)


PATHS = mostly(st.sampled_from(["/", "/tmp", "$WORKSPACE", "$HOME/x", "$TMPDIR", "$NOPE", "rel", "/a/../..",
                                "//x/", "/dev/null", "$WORKSPACE/../..", "", "/a\x00b"]), TEXT)
CIDRS = mostly(st.sampled_from(["127.0.0.1", "10.0.0.0/8", "::1", "::/0", "0.0.0.0/0", "1.2.3.4/33",
                                "fe80::1%eth0", "10.0.0.1/8", "::ffff:1.2.3.4", "x"]), TEXT)
PORTS = mostly(st.integers(-2, 70000)
               | st.sampled_from(["80", "1-1024", "0", "65535", "9-1", "a", "1-", " 80"]))
RULE = st.fixed_dictionaries({"cidr": CIDRS}, optional={
    "ports": PORTS, "protocol": mostly(st.sampled_from(["tcp", "udp", "any", "icmp"])), "junk": SCALAR})
SECTIONS = {
    "filesystem": st.fixed_dictionaries({}, optional={
        "read": mostly(st.lists(PATHS, max_size=4), VALUE),
        "write": mostly(st.lists(PATHS, max_size=4), VALUE)}),
    "network": st.fixed_dictionaries({"default": mostly(st.sampled_from(["allow", "deny", "ask"]))},
                                     optional={"allow": mostly(st.lists(RULE, max_size=3), VALUE)}),
    "tools": st.fixed_dictionaries({"default": mostly(st.sampled_from(["allow", "deny"]))}, optional={
        "allow": mostly(st.lists(TEXT, max_size=3), VALUE),
        "deny": mostly(st.lists(TEXT, max_size=3), VALUE)}),
}
POLICIES = st.fixed_dictionaries({"version": mostly(st.just(1))}, optional={
    "name": mostly(TEXT), "description": mostly(TEXT), "unknown": SCALAR, **SECTIONS})
ABSOLUTE = st.text(alphabet=string.printable, max_size=20).map(lambda s: "/" + s)


def _toml(value: object) -> str:
    """A TOML value: JSON's string escapes are TOML's (non-BMP escapes are not, and are refused)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"


def render(doc: dict) -> str:
    lines = [f"{json.dumps(k)} = {_toml(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{name}]")
            lines += [f"{json.dumps(k)} = {_toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _load(text: str, workspace: str = "/w", home: str = "/h", tmpdir: str = "/t") -> None:
    try:
        policy = parse_policy(text, "fuzz.toml")
    except PolicyInvalid as exc:
        assert str(exc).startswith("fuzz.toml:") and "\n" not in str(exc)
        event("refused")
        return
    event("loaded")
    resolved = resolve(policy, workspace, home, tmpdir)  # validate_policy promised this cannot fail
    for preset in ("read-only", "workspace-write"):
        floor = resolve(load_preset(preset), workspace, home, tmpdir)
        meet(floor, resolved)


@given(doc=POLICIES, workspace=ABSOLUTE, home=ABSOLUTE, tmpdir=ABSOLUTE)
@example(doc={"version": 1, "filesystem": {"write": ["$WORKSPACE/../.."]}}, workspace="/", home="/h",
         tmpdir="/t")
def test_any_policy_document_loads_and_resolves_or_is_refused(doc: dict, workspace: str, home: str,
                                                               tmpdir: str) -> None:
    try:
        _load(render(doc), workspace, home, tmpdir)
    except PolicyError as exc:  # resolve disagreed with validate_policy: a bug, shown with its input
        raise AssertionError(f"accepted by validate_policy but not resolvable: {exc}") from exc


@given(text=st.text(max_size=200))
@example(text='version = 1\n[network]\ndefault = "deny"\nallow = [{cidr = "::/0", ports = "1-"}]\n')
def test_any_text_loads_or_is_refused(text: str) -> None:
    _load(text)
