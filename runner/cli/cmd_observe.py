"""`assay-runner observe`: run an agent CLI on a scenario and write black-box DecisionEvents.

Options of the reference observer (rachidje/agent-observability-sdk,
runner/observer_runner.py) keep their names: a positional PROMPT,
`--scenario-id`, `--workspace-source`, `--runs-root`, `--claude-cmd` and
`--verbose` (passed to Claude Code), so its users can switch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from blackbox.catalog import CAPTURE_MODES, ENVIRONMENTS, WORKSPACE_MODES
from blackbox.scenario import SCENARIO_ID, Scenario, ScenarioError, inline_scenario, load_scenario
from ebpf.wire import DEFAULT_RINGBUF_PAGES
from runner.blackbox.observe import ObserveRequest, observe
from runner.capture.inputs import check_run_id
from runner.display import printable_lines
from runner.enforce.identity import named_user
from runner.errors import RunnerError
from runner.host.ci import on_ci

PROMPT_PLACEHOLDER = "{prompt}"
CLAUDE_FLAGS = ("-p", "--output-format", "text", "--permission-mode", "acceptEdits")
"""Claude Code's non-interactive mode: print the final answer as text, allow file edits.
Anything else (other tools, models, budgets) is the user's to pass: give the command after `--`."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "observe",
        help="run an agent CLI on a scenario and write black-box DecisionEvents (events.jsonl)",
        description=(
            "Prepare a workspace (a git repository, empty or copied), run the agent CLI in it under "
            "the kernel monitor, and write RUNS_ROOT/RUN_ID/ with events.jsonl (the 9 catalog events), "
            "artifacts/ (claude_stdout.txt, claude_stderr.txt, fs_diff.patch, command_logs.jsonl from "
            "the kernel's exec records), metadata.json, the workspace and the runner's v0 archive. "
            "Default agent: claude " + " ".join(CLAUDE_FLAGS) + " PROMPT. Any other agent command can "
            "follow '--'; an argument {prompt} in it is replaced by the scenario's raw request. "
            "Exit code: the agent's (128+N for signal N); 125 on a runner error."
        ),
    )
    p.add_argument("--scenario", type=Path, metavar="PATH",
                   help="a scenario directory (scenario.md + parameters.json) or a scenario.md file")
    p.add_argument("--scenario-id", metavar="ID",
                   help="scenario id (overrides parameters.json; default: default)")
    p.add_argument("--workspace-source", type=Path, metavar="DIR",
                   help="copy DIR as the workspace (workspace mode 'existing'); empty workspace if omitted")
    p.add_argument("--workspace-mode", choices=WORKSPACE_MODES, help="override parameters.json")
    p.add_argument("--capture-mode", choices=CAPTURE_MODES, help="override parameters.json (default: full)")
    p.add_argument("--runs-root", type=Path, default=Path("runs"), metavar="DIR",
                   help="where RUN_ID/ is created (default: runs)")
    p.add_argument("--run-id", metavar="ID", help="run identifier (default: run-<time>-<rand>)")
    p.add_argument("--claude-cmd", default="claude", metavar="CMD",
                   help="the Claude Code executable for the default agent command (default: claude)")
    p.add_argument("--verbose", dest="agent_verbose", action="store_true",
                   help="pass --verbose to Claude Code (default agent command only)")
    p.add_argument("--environment", choices=sorted(ENVIRONMENTS),
                   help="session.environment (default: ci when CI is true, else local)")
    p.add_argument("--user", metavar="USER", help="run the agent as this user (it owns the workspace)")
    p.add_argument("--net", choices=("host", "isolated"), default="host",
                   help="'isolated': a loopback-only network namespace (default: host)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="send the agent SIGTERM after SECONDS, kill its process tree 10 s later "
                        "(default: no limit)")
    p.add_argument("--ringbuf-pages", type=int, default=DEFAULT_RINGBUF_PAGES, metavar="N",
                   help=f"ring buffer size in pages, a power of two (default: {DEFAULT_RINGBUF_PAGES})")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="[PROMPT] [-- AGENT [ARGS...]]",
                   help="the raw request when no --scenario is given (the reference observer's usage), "
                        "then the agent command after '--' (default: Claude Code, see above)")
    p.set_defaults(func=main, observe_parser=p)


def split_rest(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """(PROMPT or None, agent command) from the words after the first positional.

    The reference observer takes options after its PROMPT (`PROMPT --scenario-id X`);
    argparse hands everything after a positional to `rest`, so the options among
    those words are parsed here, into the same namespace.
    """
    rest = list(args.rest)
    cut = rest.index("--") if "--" in rest else len(rest)
    before, cmd = rest[:cut], rest[cut + 1:]
    prompt = before.pop(0) if before and not before[0].startswith("-") else None
    if before:
        args.observe_parser.parse_args(before, namespace=args)
        if args.rest:
            raise RunnerError(f"one PROMPT at most (quote it); unexpected {args.rest[0]!r} before '--': "
                              "put the agent command after '--'")
    return prompt, cmd


def scenario_from(args: argparse.Namespace, prompt: str | None) -> Scenario:
    """The scenario file or the bare prompt, with the command-line overrides applied."""
    try:
        if args.scenario is not None:
            if prompt is not None:
                raise RunnerError("give either --scenario or a PROMPT, not both")
            sc = load_scenario(args.scenario)
        elif prompt is not None:
            sc = inline_scenario(prompt, "default")
        else:
            raise RunnerError("nothing to ask the agent: give --scenario PATH or a PROMPT")
    except ScenarioError as exc:
        raise RunnerError(str(exc)) from None
    changes: dict[str, str] = {}
    if args.scenario_id is not None:
        if not SCENARIO_ID.match(args.scenario_id):
            raise RunnerError(f"--scenario-id {args.scenario_id!r}: use 1-128 letters, digits, '.', '_', '-'")
        changes["scenario_id"] = args.scenario_id
    if args.workspace_source is not None:
        changes["workspace_mode"] = "existing"
    if args.workspace_mode is not None:
        changes["workspace_mode"] = args.workspace_mode
    if args.capture_mode is not None:
        changes["capture_mode"] = args.capture_mode
    return Scenario(**{**sc.__dict__, **changes})


def workspace_source(args: argparse.Namespace, sc: Scenario) -> Path | None:
    """The directory an 'existing' workspace copies: --workspace-source, or the scenario's workspace/."""
    if sc.workspace_mode == "empty":
        if args.workspace_source is not None:
            raise RunnerError("--workspace-source needs workspace mode 'existing'")
        return None
    source = args.workspace_source
    if source is None and args.scenario is not None:
        base = args.scenario if args.scenario.is_dir() else args.scenario.parent
        source = base / "workspace" if (base / "workspace").is_dir() else None
    if source is None or not source.is_dir():
        raise RunnerError("workspace mode 'existing' needs --workspace-source DIR (a directory to copy), "
                          "or a workspace/ directory beside scenario.md")
    return source.resolve()


def agent_argv(args: argparse.Namespace, cmd: list[str], prompt: str) -> list[str]:
    """The agent command: after '--' ({prompt} replaced), or Claude Code's non-interactive form."""
    if cmd:
        return [prompt if a == PROMPT_PLACEHOLDER else a for a in cmd]
    verbose = ["--verbose"] if args.agent_verbose else []
    return [args.claude_cmd, *CLAUDE_FLAGS, *verbose, prompt]


def executable(name: str, env: dict[str, str]) -> str:
    """The program execve gets: found on PATH or made absolute, else the name as given.

    A missing agent is not a runner error: its exec fails in the kernel (ENOENT,
    exit 127) and the run is an ordinary observed run of a failing agent.
    """
    if "/" in name:
        return os.path.abspath(name)
    return shutil.which(name, path=env.get("PATH", os.defpath)) or name


def build_request(args: argparse.Namespace) -> ObserveRequest:
    """Check every input before anything is created."""
    from runner.host.checks import require_run_prerequisites

    prompt, cmd = split_rest(args)
    sc = scenario_from(args, prompt)
    source = workspace_source(args, sc)
    argv = agent_argv(args, cmd, sc.user_request)
    env = dict(os.environ)
    pages = args.ringbuf_pages
    if pages < 1 or pages & (pages - 1):
        raise RunnerError(f"--ringbuf-pages must be a power of two, got {pages}")
    if args.timeout is not None and not args.timeout > 0:
        raise RunnerError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    run_id = check_run_id(args.run_id)
    if (args.runs_root / run_id).exists():
        raise RunnerError(f"{args.runs_root / run_id} already exists: choose another --run-id")
    require_run_prerequisites()
    environment = args.environment or ("ci" if on_ci() else "local")
    return ObserveRequest(
        scenario=sc, argv=argv, exe=executable(argv[0], env), runs_root=args.runs_root.resolve(),
        run_id=run_id, environment=environment, workspace_source=source,
        user=named_user(args.user) if args.user else None,
        isolate_net=args.net == "isolated", ringbuf_pages=pages, env=env, timeout=args.timeout,
    )


def main(args: argparse.Namespace) -> int:
    req = build_request(args)
    result = observe(req)
    statuses = " ".join(f"{k}={v}" for k, v in result.statuses.items())
    lines = [f"observe: {result.run_dir}/events.jsonl ({result.events} events) {statuses} "
             f"agent exit {result.exit_code}"]
    lines += [f"  {f['status']:<7} {f['id']}: {f['evidence']}" for f in result.findings]
    print(printable_lines(lines), file=sys.stderr)
    return result.exit_code

