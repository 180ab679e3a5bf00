"""Running a role's own command for offline maintenance.

bxctl may not import another role (the brief), so ``bxctl audit verify`` runs
``brokerd audit verify``: the code that owns a file format is the only code that reads it. Role
commands are found beside bxctl's own interpreter (the same environment), then on PATH.

A pass-through command (``role_passthrough``) declares nothing of its own: every argument,
``--help`` included, goes to the role's command, which parses it and answers; bxctl adds only
``--config`` with its default when none is given, so the owner needs no flags.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
from bxcore import cli_errors

from .stack.manifest import DEFAULT_MANIFEST, load_manifest


def host_config() -> Path:
    """Where the NixOS module puts the config: the manifest's config_dir/config_file."""
    return Path(load_manifest(DEFAULT_MANIFEST).config_path())


def default_config() -> Path:
    """$BOXMAKER_CONFIG; else the local stack's config if `bxctl up` wrote one; else the host's
    (/etc/boxmaker/config/boxmaker.toml, as the role manifest places it)."""
    if "BOXMAKER_CONFIG" in os.environ:
        return Path(os.environ["BOXMAKER_CONFIG"])
    state = os.environ.get("BOXMAKER_STATE") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "boxmaker"
    )
    local = Path(state) / "config.toml"
    return local if local.exists() else host_config()


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Boxmaker's config file (default: $BOXMAKER_CONFIG, the local stack's, or "
    "/etc/boxmaker/config/boxmaker.toml).",
)


def role_command(role: str) -> str:
    beside = Path(sys.executable).parent / role
    if beside.exists():
        return str(beside)
    found = shutil.which(role)
    if found is None:
        raise click.ClickException(f"the {role} command is not installed; run scripts/setup")
    return found


def run_role(role: str, args: list[str], config_path: Path | None, *, capture: bool = False
             ) -> subprocess.CompletedProcess[str]:
    """Run ``<role> <args> --config <config>``; its output goes to ours unless captured."""
    argv = [role_command(role), *args, "--config", str(config_path or default_config())]
    return subprocess.run(argv, check=False, text=True, capture_output=capture)


def role_passthrough(name: str, role: str, words: tuple[str, ...]) -> click.Command:
    """``bxctl ... NAME ARGS`` runs ``<role> <words> ARGS`` and exits with its status. ARGS,
    ``--help`` too, are the role command's to parse; ``--config`` is bxctl's default unless
    ARGS name one."""

    def run(args: tuple[str, ...]) -> None:
        config = [] if _names_config(args) else ["--config", str(default_config())]
        argv = [role_command(role), *words, *config, *args]
        raise SystemExit(subprocess.run(argv, check=False).returncode)

    shown = " ".join((role, *words))
    return cli_errors.Command(
        name, callback=run, add_help_option=False,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        short_help=f"Runs `{shown}`; --help gives its options.",
        help=f"Runs `{shown} ARGS`. Its --help gives its options.",
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    )


def _names_config(args: tuple[str, ...]) -> bool:
    options = args[: args.index("--")] if "--" in args else args
    return any(a == "--config" or a.startswith("--config=") for a in options)
