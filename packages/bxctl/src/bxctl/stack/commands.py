"""``bxctl up``, ``bxctl status`` and ``bxctl down``: the local stack."""

from __future__ import annotations

from pathlib import Path

import click
from bxcore import cli_errors

from .local import DEFAULT_MODEL, StackLayout, default_state, down, status, up

_STATE = click.option(
    "--state",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The local stack's directory (default: $BOXMAKER_STATE or ~/.local/state/boxmaker).",
)


def _layout(state: Path | None) -> StackLayout:
    return StackLayout((state or default_state()).resolve())


@click.command("up", cls=cli_errors.Command)
@_STATE
@click.option(
    "--llama-server",
    "llama_server",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The llama-server binary (scripts/llama-server.sh binary prints it).",
)
@click.option(
    "--models",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The models directory (scripts/llama-server.sh models).",
)
@click.option(
    "--serving",
    "serving_src",
    default="serving",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The directory with presets.ini and templates/ (default: ./serving).",
)
@click.option(
    "--grants",
    default="grants-examples",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The grants directory brokerd reads (default: ./grants-examples).",
)
@click.option(
    "--model", default=DEFAULT_MODEL, show_default=True, help="The router preset loopd talks to."
)
@click.option(
    "--honcho",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Also run the real Honcho from this directory (scripts/honcho-server.sh prints it); "
    "memoryd syncs finished turns to it.",
)
@click.option(
    "--chat/--no-chat",
    default=True,
    show_default=True,
    help="Open a chat once everything is ready, and stop everything when it ends.",
)
def up_command(
    state: Path | None,
    llama_server: Path,
    models: Path,
    serving_src: Path,
    grants: Path,
    model: str,
    honcho: Path | None,
    chat: bool,
) -> None:
    """Start the whole harness locally: llama-server, inferproxy, memoryd, brokerd, loopd.

    Example (what scripts/up runs):

        bxctl up --llama-server "$(scripts/llama-server.sh binary)" \
                 --models "$(scripts/llama-server.sh models)"

    With memory reaching a real Honcho: add --honcho "$(scripts/honcho-server.sh)".
    """
    layout = _layout(state)
    try:
        up(
            layout,
            llama_server=llama_server,
            models=models,
            serving_src=serving_src,
            grants=grants,
            model=model,
            say=lambda line: click.echo(line, err=True),
            honcho=honcho,
        )
    except KeyboardInterrupt:
        raise click.Abort() from None
    if not chat:
        click.echo(
            f"up: running; `bxctl chat --socket {layout.socket('loop')}`, "
            f"`bxctl down --state {layout.state}` to stop",
            err=True,
        )
        return
    from ..chat import run_interactive  # the chat module is bxctl's; imported late, once needed

    try:
        run_interactive(layout.socket("loop"))
    except KeyboardInterrupt:
        pass
    finally:
        killed = down(layout)
        click.echo(
            "down: everything stopped" + (f" (killed: {', '.join(killed)})" if killed else ""),
            err=True,
        )


@click.command("down", cls=cli_errors.Command)
@_STATE
def down_command(state: Path | None) -> None:
    """Stop the local stack started by `bxctl up`, and remove its sockets.

    Example: bxctl down
    """
    layout = _layout(state)
    if not layout.record.exists():
        click.echo(f"down: nothing is running in {layout.state}", err=True)
        return
    killed = down(layout)
    click.echo(
        "down: stopped" + (f" (had to kill: {', '.join(killed)})" if killed else ""), err=True
    )


@click.command("status", cls=cli_errors.Command)
@_STATE
def status_command(state: Path | None) -> None:
    """Show which daemons of the local stack are running. Exit 1 if any is not.

    Example: bxctl status
    """
    rows = status(_layout(state))
    if not rows:
        raise click.ClickException("the local stack is not running; start it with `bxctl up`")
    for name, pid, running in rows:
        click.echo(f"{name:13} pid {pid:<8} {'running' if running else 'STOPPED'}")
    if not all(running for _, _, running in rows):
        raise SystemExit(1)
