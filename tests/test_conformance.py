"""Archives Assay accepts: vendored upstream files, redaction, the fail-closed sweep, real runs.

Real archives are checked twice: by the project's conformance
(runner/evidence/conformance/, through `validate_members`) and by the
independent `../shared/tools/assay-compat/assay_compat.py`, which must report
0 problems. Kernel tests run the real runner (root).
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from normalizer import layer_digest, redact
from normalizer.artifacts import CapabilitySurface, CorrelationReport
from normalizer.build import normalize
from normalizer.kernel_lines import KernelLayer
from normalizer.redact import Redactor, find_unredacted, rules
from runner.capture.inputs import check_run_id
from runner.errors import EXIT_RUNNER_ERROR, RunnerError
from runner.evidence.archive import read_archive
from runner.evidence.conformance.base import UPSTREAM
from runner.evidence.conformance.capdiff import capability_diff_problems
from runner.evidence.conformance.upstream import PINNED, UPSTREAM_DIR, git_blob_id
from runner.evidence.publish import publish
from spool.format import SdkMessage, SpoolHeader, encode_frame, iter_frames, read_spool
from tests.support import ROOT, Archive, assay, assert_assay_accepts, run_observed

sys.path.insert(0, str(ROOT / "tests" / "programs" / "conformance"))
from secret_names import SECRETS

PY = sys.executable
PROGRAMS = ROOT / "tests" / "programs"
AGENT = ROOT / "fixtures" / "agent"
DATA = ROOT / "tests" / "data"


# --- vendored upstream files ------------------------------------------------


def test_git_blob_id_is_what_git_hash_object_prints() -> None:
    assert git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_vendored_file_is_the_pinned_upstream_blob(name: str) -> None:
    """An edited copy changes its blob id; the README records the same id and commit."""
    upstream_path, blob = PINNED[name]
    data = (UPSTREAM_DIR / name).read_bytes()
    assert git_blob_id(data) == blob, f"normalizer/upstream/{name} is not upstream's {upstream_path}"
    assert git_blob_id(data + b" ") != blob
    readme = (UPSTREAM_DIR / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}` "))
    assert f"`{upstream_path}`" in row and f"`{blob}`" in row
    assert f"`{UPSTREAM}`" in readme


def test_the_redactor_uses_the_vendored_table_in_order() -> None:
    table = msgspec.json.decode((UPSTREAM_DIR / "secret-rules.v1.json").read_bytes())
    assert [name for name, _ in rules()] == [r["name"] for r in table["rules"]]
    # verbatim, except that the EMBEDDED rules lose their leading word boundary (and nothing else)
    assert [p.pattern for _, p in rules()] == [
        r["pattern"][2:] if r["name"] in redact.EMBEDDED else r["pattern"] for r in table["rules"]]
    assert all(r["pattern"].startswith("\\b") for r in table["rules"] if r["name"] in redact.EMBEDDED)


@pytest.mark.parametrize("text", ["x_ghp_" + "a1B2" * 9, "xAKIA" + "Q" * 16, "tok_" + SECRETS["jwt"],
                                  "id_xoxb-" + "1" * 12, "keyAIza" + "z" * 35, "my_sk_live_" + "0" * 16])
def test_secret_shapes_after_a_word_character_are_redacted_and_refused_as_run_ids(text: str) -> None:
    r = Redactor()
    out = r.redact(f"/work/{text}.txt")
    assert r.count == 1 and find_unredacted(out) is None and text not in out
    if "." not in text:  # a JWT is no run id anyway (dots); the others would be, but for their secret
        with pytest.raises(RunnerError, match="looks like a secret"):
            check_run_id(text)


@pytest.mark.parametrize("text", ["task-" + "a" * 24, "risk-assessment-report-2024", "bearerish"])
def test_the_boundary_rules_keep_their_boundary(text: str) -> None:
    assert Redactor().redact(text) == text


def test_golden_archives_are_accepted() -> None:
    assert_assay_accepts(ROOT / "golden" / "archive-minimal", ROOT / "golden" / "archive-sdk-policy")


# --- redaction --------------------------------------------------------------


@pytest.mark.parametrize(("kind", "rule"), [("aws", "aws-access-key-id"), ("github", "github-token"),
                                            ("jwt", "jwt"), ("bearer", "bearer-token")])
def test_each_secret_shape_is_redacted_deterministically(kind: str, rule: str) -> None:
    text = f"/work/{kind}-{SECRETS[kind]}.txt"
    first, second = Redactor(), Redactor()
    out = first.redact(text)
    assert SECRETS[kind] not in out and find_unredacted(out) is None
    assert re.search(rf"<redacted:{rule}:[0-9a-f]{{8}}>", out)
    assert second.redact(text) == out  # same key, same placeholder: runs stay byte-identical
    assert first.redact(out) == out  # idempotent: placeholders are copied through
    assert first.by_rule == {rule: 1}
    assert first.note() == f"redaction: mode=shape_only redacted_count=1 by_rule={rule}(1)"
    assert find_unredacted(first.note()) is None  # the tally itself never trips the sweep


def test_clean_text_is_returned_untouched_and_counted_as_nothing() -> None:
    r = Redactor()
    text = "/usr/lib/python3/token.py sha256:" + "ab" * 32
    assert r.redact(text) is text
    assert r.note() == "redaction: mode=shape_only redacted_count=0"


def test_earliest_match_wins_then_the_longest() -> None:
    """A bearer header holding a JWT is one bearer-token span (it starts first), as upstream scans."""
    r = Redactor()
    out = r.redact(f"Bearer {SECRETS['jwt']}")
    assert re.fullmatch(r"<redacted:bearer-token:[0-9a-f]{8}>", out)
    assert r.by_rule == {"bearer-token": 1}


def test_every_rule_has_its_prefilter() -> None:
    """A refreshed table with a changed pattern must get its literals re-derived (else it runs unfiltered)."""
    assert [(name, p.pattern) for name, p in rules()] == list(redact.NEEDLES)


def _corpus() -> list[str]:
    rng = random.Random(11)
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.=:/ \"'&#~+"
                "\u0131\u0130\u017f\u212a")  # dotless i, dotted I, long s, Kelvin sign
    pieces = ["AKIA", "ASIA", "ghp_", "gho_", "sk-", "sk-proj-", "xoxb-", "AIza", "sk_live_", "pk_test_",
              "-----BEGIN RSA PRIVATE KEY-----", "eyJ", ".eyJ", "Bearer ", "BEARER\t", "access_token=",
              "refresh-token=", "sig=", "Signature=", "api_key=", "API-KEY: ", "secret:", "toKen=",
              "pa\u017fsword = ", "passwd:", "client_secret=", "<redacted:jwt:0123abcd>"]
    out = [f"x {piece}{'A1b2C3d4' * 6} y" for piece in pieces]
    for _ in range(3000):
        out.append("".join(rng.choice(pieces) if rng.random() < 0.15 else rng.choice(alphabet)
                           for _ in range(rng.randint(1, 90))))
    return out


def test_the_prefilter_never_changes_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus()
    filtered = [(Redactor().redact(t), find_unredacted(t)) for t in corpus]
    monkeypatch.setattr(redact, "NEEDLES", {})
    monkeypatch.setattr(redact, "_literals", lambda: None)
    assert [(Redactor().redact(t), find_unredacted(t)) for t in corpus] == filtered
    assert sum(1 for _, rule in filtered if rule) > 100  # the corpus does hit the rules


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 20])
def test_the_streamed_sweep_gives_the_per_line_answer(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Blocks cleared whole never hide a line's match, and the first matching line's rule is the
    answer, however the kernel layer's writer cuts its blocks and the worker its chunks."""
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", chunk)
    corpus = [t.replace("\n", " ") for t in _corpus()]
    clean = [t for t in corpus if find_unredacted(t) is None]
    rng = random.Random(chunk)
    for stream in (clean, clean[:500] + corpus, corpus[::-1]):
        lines = [f"{t}\n".encode() for t in stream]
        expected = next((r for r in map(find_unredacted, (line.decode() for line in lines)) if r), None)
        layer, at = KernelLayer(), 0
        while at < len(lines):
            n = rng.randint(1, 40)
            layer.write_block(b"".join(lines[at:at + n]), len(lines[at:at + n]))
            at += n
        assert layer.unredacted == expected
        assert b"".join(lines) == layer.read_bytes()
    assert redact.unredacted_in_block(b"".join(f"{t}\n".encode() for t in clean)) is None


# --- publishing fails closed -----------------------------------------------


def _spool_with_secret_tool():
    """The recorded example spool plus one tool call whose name holds a GitHub token."""
    spool = read_spool(DATA / "example.spool")
    ts = spool.phases[0].ts + 1
    messages = [SdkMessage(ts=ts, event="tool_call_started", tool=f"deploy-{SECRETS['github']}",
                           tool_call_id="tc_1", decision="allow", rule="tools.default"),
                SdkMessage(ts=ts + 1, event="tool_call_finished", tool=f"deploy-{SECRETS['github']}",
                           tool_call_id="tc_1", status="ok")]
    return msgspec.structs.replace(spool, sdk=messages)


def test_publish_writes_a_redacted_archive(tmp_path: Path) -> None:
    archive = tmp_path / "ok.tar.gz"
    publish(normalize(_spool_with_secret_tool(), "secret_ok"), archive)
    members = read_archive(archive)
    assert all(SECRETS["github"].encode() not in data for data in members.values())
    assert b"deploy-<redacted:github-token:" in members["layers/sdk.ndjson"]


def test_a_string_past_the_redactor_makes_publication_fail_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact.Redactor, "redact", lambda self, text: text)
    run = normalize(_spool_with_secret_tool(), "secret_leak")
    archive = tmp_path / "leak.tar.gz"
    with pytest.raises(RunnerError) as err:
        publish(run, archive)
    assert err.value.exit_code == EXIT_RUNNER_ERROR
    assert str(err.value) == (
        "refusing to publish leak.tar.gz: capability-surface.json still holds an unredacted "
        "github-token-shaped value after redaction (a runner bug); nothing was written and the raw "
        "spool is kept")
    assert list(tmp_path.iterdir()) == []


def _spool_with_run_id(path: Path, run_id: str) -> Path:
    """The recorded example spool with another recorded run id (an older runner allowed '.')."""
    frames = []
    with (DATA / "example.spool").open("rb") as f:
        for frame in iter_frames(f):
            if isinstance(frame, SpoolHeader):
                frame = msgspec.structs.replace(frame, run_id=run_id)
            frames.append(encode_frame(frame))
    path.write_bytes(b"".join(frames))
    return path


def test_normalize_refuses_a_recorded_run_id_assay_would_refuse(tmp_path: Path) -> None:
    spool = _spool_with_run_id(tmp_path / "old.spool", "run.old")
    proc = assay("normalize", spool)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "assay-runner: error: the spool's run id 'run.old' is not one Assay accepts: give a new one "
        "with --run-id (1-128 ASCII letters, digits, '_' or '-')")
    assert not spool.with_suffix(".tar.gz").exists()
    proc = assay("normalize", "--run-id", "run_old", spool)
    assert proc.returncode == 0, proc.stderr
    assert_assay_accepts(Archive(spool.with_suffix(".tar.gz")).path)


def test_the_cli_refuses_to_publish_past_a_disabled_redactor_and_keeps_the_spool(tmp_path: Path) -> None:
    """`assay-runner normalize` with the redactor switched off (in the process, as a bug would):
    exit 125, one line, no archive, the spool untouched."""
    spool = tmp_path / "leak.spool"
    frames = []
    with (DATA / "example.spool").open("rb") as f:
        for frame in iter_frames(f):
            frames.append(encode_frame(frame))
    tool = SdkMessage(ts=1, event="tool_call_started", tool=f"deploy-{SECRETS['aws']}", tool_call_id="tc_1")
    spool.write_bytes(b"".join(frames[:1]) + encode_frame(tool) + b"".join(frames[1:]))
    before = spool.read_bytes()
    code = ("import sys, normalizer.redact as r\n"
            "r.Redactor.redact = lambda self, text: text\n"
            "from runner.cli.main import main\n"
            "sys.exit(main(['normalize', sys.argv[1]]))\n")
    proc = subprocess.run([PY, "-c", code, str(spool)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, check=False)
    assert proc.returncode == EXIT_RUNNER_ERROR, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "assay-runner: error: refusing to publish leak.tar.gz: layers/sdk.ndjson still holds an "
        "unredacted aws-access-key-id-shaped value after redaction (a runner bug); nothing was written "
        "and the raw spool is kept")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leak.spool"]
    assert spool.read_bytes() == before
    proc = assay("normalize", spool)  # the same spool with the real redactor: published, redacted
    assert proc.returncode == 0, proc.stderr
    assert SECRETS["aws"].encode() not in (tmp_path / "leak.tar.gz").read_bytes()


# --- the capability-diff rule ----------------------------------------------


def _pair(decisions: tuple[str, str], surface: tuple[list[str], list[str]]):
    def side(decision: str, policy: list[str]):
        s = CapabilitySurface(schema="assay.runner.capability_surface.v0", run_id="r",
                              filesystem_paths=[], network_endpoints=[], process_execs=[],
                              mcp_tools=["t"], policy_decisions=policy)
        c = msgspec.json.decode(
            b'{"schema":"assay.runner.correlation_report.v0","run_id":"r","status":"clean","ambiguities":[],'
            b'"bindings":[{"tool_call_id":"tc_1","policy_decision":"' + decision.encode()
            + b'","kernel_event_count":0,"window":{"start":"a","end":"b"}}]}', type=CorrelationReport)
        return s, c
    return side(decisions[0], surface[0]), side(decisions[1], surface[1])


def test_capability_diff_refuses_a_policy_change_no_binding_shows() -> None:
    """What our old archives did: a deny only in policy_decisions, the binding still `allow`."""
    base, head = _pair(("allow", "allow"), (["allow:t"], ["allow:t", "deny:t"]))
    assert capability_diff_problems(base, head) == [
        "policy surface changed for stable binding ids without policy_outcomes.changed"]
    base, head = _pair(("allow", "deny"), (["allow:t"], ["deny:t"]))
    assert capability_diff_problems(base, head) == []


# --- real runs ----------------------------------------------------------------

@pytest.mark.kernel
def test_plain_run_is_accepted(tmp_path: Path) -> None:
    proc = run_observed(tmp_path, "conf_plain", "sh", "-c", "cat /etc/hostname > out.txt; ls >/dev/null",
                        workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_assay_accepts(Archive(tmp_path / "conf_plain.tar.gz").path)


@pytest.mark.kernel
def test_read_only_sandbox_with_a_file_block_and_a_connect_block_is_accepted(tmp_path: Path) -> None:
    script = ("import socket, contextlib\n"
              "with contextlib.suppress(OSError): open('blocked.txt', 'w')\n"
              "with socket.socket() as s, contextlib.suppress(OSError): s.connect(('127.0.0.1', 9))\n")
    proc = run_observed(tmp_path, "conf_readonly", "/usr/bin/python3", "-c", script, workdir=tmp_path,
                        extra=("--sandbox", "read-only"))
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "conf_readonly.tar.gz")
    assert f"{tmp_path}/blocked.txt" in archive.values("file_blocked")
    assert archive.values("connect_blocked") == ["127.0.0.1:9"]
    assert (archive.health["policy_layer"], archive.members["layers/policy.ndjson"]) == ("absent", b"")
    assert_assay_accepts(archive.path)


@pytest.mark.kernel
def test_each_determinism_archive_is_accepted(tmp_path: Path) -> None:
    proc = assay("determinism", "--runs", "3", "--out", tmp_path, "--run-id", "conf_det", "--workdir",
                 tmp_path, "--", "sh", "-c", "echo hi > a.txt; cat a.txt")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archives = [Archive(tmp_path / f"run-{i}" / "conf_det.tar.gz").path for i in (1, 2, 3)]
    assert len({a.read_bytes() for a in archives}) == 1
    assert_assay_accepts(*archives)


@pytest.mark.kernel
def test_demo_archive_is_accepted(tmp_path: Path) -> None:
    """`make demo`'s command (the OpenAI Agents SDK fixture under its policy) in a copy of its workspace."""
    pytest.importorskip("agents", reason="the SDK fixture needs pip install -e '.[sdk]'")
    agent = tmp_path / "agent"
    shutil.copytree(AGENT, agent, ignore=shutil.ignore_patterns("notes", "__pycache__"))
    proc = assay("run", "--out", tmp_path, "--run-id", "demo", "--force", "--policy", AGENT / "policy.toml",
                 "--workdir", agent / "workspace", "--", PY, "-B", "../openai_agent.py",
                 cwd=agent / "workspace")
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "demo.tar.gz")
    assert [b["policy_decision"] for b in archive.json("correlation-report.json")["bindings"]] == [
        "allow", "allow", "deny", "deny", "deny"]
    assert_assay_accepts(archive.path)


@pytest.mark.kernel
def test_secret_shaped_paths_endpoints_and_tools_never_reach_the_archive(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = run_observed(tmp_path, "conf_secrets", PY, "-B", PROGRAMS / "conformance" / "secret_names.py",
                        workdir=work, extra=("--sandbox", "danger-full-access"))
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "conf_secrets.tar.gz")
    for name, data in archive.members.items():
        for secret in SECRETS.values():
            assert secret.encode() not in data, (name, secret)
        assert find_unredacted(data.decode()) is None, name
    # each secret was really captured, as its placeholder
    kernel = archive.members["layers/kernel.ndjson"].decode()
    for rule in ("aws-access-key-id", "github-token", "jwt", "bearer-token"):
        assert f"-<redacted:{rule}:" in kernel
    assert "unix:sock-<redacted:github-token:" in kernel and "unix:@<redacted:jwt:" in kernel
    tools = archive.surface["mcp_tools"]
    assert [re.sub(r"[0-9a-f]{8}>", "H8>", t) for t in tools] == [
        "auth <redacted:bearer-token:H8>", "deploy-<redacted:github-token:H8>"]
    # the tally counts every replaced span: each kernel line value and each SDK string as it came in
    spool = read_spool(tmp_path / "conf_secrets.spool")
    expected = {rule: kernel.count(f"<redacted:{rule}:") for rule, _ in rules()}
    for m in spool.sdk:
        for text in (m.tool, m.tool_call_id, m.sdk_name, m.sdk_version):
            for rule, pattern in rules():
                expected[rule] += len(pattern.findall(text or ""))
    by_rule = ",".join(f"{k}({v})" for k, v in sorted(expected.items()) if v)
    note = f"redaction: mode=shape_only redacted_count={sum(expected.values())} by_rule={by_rule}"
    assert note in archive.health["notes"]
    assert all(expected[r] >= 1 for r in ("aws-access-key-id", "github-token", "jwt", "bearer-token"))
    assert_assay_accepts(archive.path)


@pytest.mark.kernel
def test_redacted_runs_stay_byte_identical(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = assay("determinism", "--runs", "3", "--out", tmp_path / "out", "--run-id", "conf_secret_det",
                 "--workdir", work, "--sandbox", "danger-full-access", "--",
                 PY, "-B", PROGRAMS / "conformance" / "secret_names.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archives = [tmp_path / "out" / f"run-{i}" / "conf_secret_det.tar.gz" for i in (1, 2, 3)]
    assert len({a.read_bytes() for a in archives}) == 1
    assert "redacted_count=0" not in str(Archive(archives[0]).health["notes"])
    assert_assay_accepts(*archives)


def _policy(path: Path, deny: list[str]) -> Path:
    text = (AGENT / "policy.toml").read_text()
    path.write_text(re.sub(r'^deny = \["shell"\]$', f"deny = {deny!r}".replace("'", '"'), text, flags=re.M))
    return path


@pytest.mark.kernel
def test_two_policies_differing_in_one_tool_decision_pass_the_capability_diff(tmp_path: Path) -> None:
    """The fixture agent under its policy, and with `read_file` denied too: tc_001 flips to deny."""
    runs = []
    for name, deny in (("base", ["shell"]), ("head", ["shell", "read_file"])):
        agent = tmp_path / name
        shutil.copytree(AGENT, agent, ignore=shutil.ignore_patterns("notes", "__pycache__"))
        proc = assay("run", "--out", tmp_path, "--run-id", f"capdiff_{name}", "--force", "--policy",
                     _policy(tmp_path / f"{name}.toml", deny), "--workdir", agent / "workspace",
                     "--", PY, "-B", "../sdk_agent.py", cwd=agent / "workspace")
        assert proc.returncode == 0, proc.stderr
        runs.append(Archive(tmp_path / f"capdiff_{name}.tar.gz"))
    sides = [(msgspec.json.decode(a.members["capability-surface.json"], type=CapabilitySurface),
              msgspec.json.decode(a.members["correlation-report.json"], type=CorrelationReport))
             for a in runs]
    assert capability_diff_problems(sides[0], sides[1]) == []
    decisions = [{b.tool_call_id: b.policy_decision for b in c.bindings} for _, c in sides]
    assert [k for k in decisions[0] if decisions[0][k] != decisions[1][k]] == ["tc_001"]
    assert set(sides[1][0].policy_decisions) - set(sides[0][0].policy_decisions) == {"deny:read_file"}
    assert_assay_accepts(*(a.path for a in runs))
