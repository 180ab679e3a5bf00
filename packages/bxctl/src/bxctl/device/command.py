"""``bxctl verify-device``: measure and check the inference contract on the deployed router,
write docs/inference-contract.md, print a verdict per contract item; exit 1 on a broken one."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import load_config

from ..roles import config_option, default_config

DEFAULT_OUT = Path("docs/inference-contract.md")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What to measure, and how much: the command's options and their defaults."""

    depths: tuple[int, ...] = (0, 8192, 32768)
    new_tokens: int = 512
    generate: int = 128
    tool_trials: int = 20
    turns: int = 10
    rewind_tokens: int = 4096
    reasoning_tokens: int = 256
    queued_tokens: int = 64


def _depths(text: str) -> tuple[int, ...]:
    try:
        depths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter(f"expected token counts such as 0,8192,32768, not {text!r}",
                                 param_hint="--depths") from None
    if any(depth < 0 for depth in depths):
        raise click.BadParameter("a depth is 0 or more tokens", param_hint="--depths")
    return depths


def _count(name: str, default: int, what: str) -> click.Option:
    return click.Option([f"--{name}"], type=click.IntRange(min=1), default=default,
                        show_default=True, help=what)


@click.command("verify-device", cls=cli_errors.Command, params=[
    _count("new-tokens", Plan.new_tokens, "Tokens read at each depth."),
    _count("generate", Plan.generate, "Tokens generated per session for the generation speed."),
    _count("tool-trials", Plan.tool_trials, "Tool-call parsing trials."),
    _count("turns", Plan.turns, "Tool turns of the cache-reuse conversation."),
    _count("rewind-tokens", Plan.rewind_tokens, "Prompt tokens of the rewind probe."),
    _count("reasoning-tokens", Plan.reasoning_tokens, "max_tokens of the reasoning probe."),
    _count("queued-tokens", Plan.queued_tokens, "Tokens the request ahead of the queued one "
                                                "generates."),
])
@config_option
@click.option("--depths", default="0,8192,32768", show_default=True,
              help="Depths (cached tokens) to measure prompt processing at; capped at the slot.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_OUT,
              show_default=True, help="Where to write the document.")
def verify_device_command(config_path: Path | None, depths: str, out: Path,
                          **counts: int) -> None:
    """Measure the inference contract on the router of the deployed config and check it: the M0
    figures, the serving settings against [inference.serving], the slot switch, the baseline
    budget, and a four-turn conversation through a scratch loopd (its own session, state and
    workspace: nothing of the owner's is touched). Writes the document, prints a verdict per
    item, exits 1 if any is broken.

    Example: bxctl verify-device --config /etc/boxmaker/config/boxmaker.toml
    """
    # Imported here: the measuring modules bring the HTTP client, which bxctl's other
    # commands (chat, approvals, the scheduler's job runs) would otherwise load at every start.
    from .document import Outcome, render
    from .run import machine, verify
    from .verdicts import broken

    path = config_path or default_config()
    config = load_config(path)
    plan = Plan(depths=_depths(depths), **{key.replace("-", "_"): value
                                          for key, value in counts.items()})
    found, facts = verify(config, path, plan)
    outcome = Outcome(
        command=shlex.join(["bxctl", "verify-device", *sys.argv[2:]]) if len(sys.argv) > 1
        else "bxctl verify-device",
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), machine=machine(), server=facts,
        verdicts=found.verdicts, figures=found.figures, reports=found.reports,
        conversation=found.conversation)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(outcome))
    for verdict in found.verdicts:
        click.echo(verdict.line())
    failed = broken(found.verdicts)
    click.echo(f"verify-device: {len(found.verdicts)} items, {len(failed)} broken; wrote {out}")
    if failed:
        raise SystemExit(1)


COMMANDS = [verify_device_command]
