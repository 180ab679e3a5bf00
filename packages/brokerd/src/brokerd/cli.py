"""``brokerd``: the daemon and its offline maintenance (bxctl runs these as subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import load_config
from bxcore.logs import configure_logging
from bxcore.tools import DataClass

from . import sockets, wiring
from .audit import AuditLog, entries, taint_marks, verify
from .errors import JobError
from .grantstore import load_grants, real_path
from .jobs import check_schedule, job_path, job_paths, read_job
from .labels import Label
from .labelstore import LabelStore, held
from .ownerfiles import ToolReach
from .policy._protected import code_paths
from .policy.grants import explain_grant
from .taint import TaintStore, rebuild

CONFIG = click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                      default="/etc/boxmaker/config.toml", show_default=True,
                      help="Boxmaker's config file.")
JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group(cls=cli_errors.Group)
def main() -> None:
    """Decides each tool call against the owner's grants, runs it, and audits it."""


@main.command()
@CONFIG
def serve(config_path: Path) -> None:
    """Serve broker.sock and approve.sock until SIGTERM.

    Example: brokerd serve --config /etc/boxmaker/config.toml
    """
    configure_logging("brokerd", format="%(levelname)s %(name)s: %(message)s")
    config = load_config(config_path)
    wiring.all_descriptors()
    with held(wiring.labels_lock(config)):  # no label is lowered while calls run
        backend = wiring.backend_for(config)
        wiring.remove_leftovers(backend)
        broker, unfinished = wiring.build_serving(config, backend, config_path)
        asyncio.run(sockets.serve(broker, config, config_path, unfinished))


@main.group()
def audit() -> None:
    """The hash-chained audit log."""


@audit.command("verify")
@CONFIG
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="The audit directory (default: <home>/audit from the config).")
@JSON
def audit_verify(config_path: Path, directory: Path | None, as_json: bool) -> None:
    """Re-derive every hash; name each edited, deleted, inserted or reordered record.

    Exit status 1 when any record is bad. Example: brokerd audit verify --json
    """
    bad, head = verify(directory or wiring.audit_dir(load_config(config_path)))
    if as_json:
        click.echo(json.dumps({"ok": not bad, "records": head.count, "head": head.hash,
                               "bad": [vars(b) for b in bad]}, sort_keys=True))
    else:
        for link in bad:
            click.echo(str(link))
        if not bad:
            click.echo(f"ok: {head.count} records, head {head.hash}")
    if bad:
        raise SystemExit(1)


@main.group()
def grants() -> None:
    """The owner's grant files."""


@grants.command("check")
@CONFIG
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="The grants directory (default: [broker] grants from the config).")
@JSON
def grants_check(config_path: Path, directory: Path | None, as_json: bool) -> None:
    """Parse every grant and say in words what it allows; exit 1 if any file is refused.

    Example: brokerd grants check --dir ./grants-examples
    """
    # With a config, the harness's own directories are refused as brokerd serve refuses them;
    # its code (writable mounts of it) always is.
    config = load_config(config_path) if directory is None or config_path.is_file() else None
    directory = directory or config.broker.grants_dir()  # type: ignore[union-attr]
    protected = code_paths(None) if config is None else \
        wiring.harness_paths(config, os.environ, config_path)
    found = load_grants(directory, protected,
                        None if config is None else wiring.recorded_reach(config))
    if as_json:
        click.echo(json.dumps({
            "grants": {g.name: explain_grant(g) for g in found.grants},
            "errors": [str(e) for e in found.errors],
        }, sort_keys=True))
    else:
        for grant in found.grants:
            click.echo(f"{grant.name}: {explain_grant(grant)}")
        for error in found.errors:
            click.echo(f"REFUSED: {error}", err=True)
        if found.errors:
            click.echo("while a file is refused brokerd denies every call (it may have been a "
                       "deny): fix or remove it", err=True)
        elif not found.grants:
            click.echo(f"no valid grant in {directory}: every call would be denied", err=True)
    if found.errors:
        raise SystemExit(1)


@main.group()
def taint() -> None:
    """Sessions' taint files."""


@taint.command("rebuild")
@CONFIG
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write (default: <home>/broker/sessions).")
def taint_rebuild(config_path: Path, out: Path | None) -> None:
    """Rewrite every session's taint file from the audit log (its results, and the mount
    labels its decisions depended on).

    Example: brokerd taint rebuild --out /tmp/taint-check
    """
    config = load_config(config_path)
    store = TaintStore(out or wiring.taint_dir(config))
    written = rebuild(taint_marks(entries(wiring.audit_dir(config))), store)
    click.echo(f"{len(written)} taint file(s) written to {store.directory}")


@main.group()
def labels() -> None:
    """The labels on writable mounts: the highest class, and trust, of what flowed into each."""


@labels.command("show")
@CONFIG
@JSON
def labels_show(config_path: Path, as_json: bool) -> None:
    """Print every writable mount's label (read-only; brokerd may be running).

    Example: brokerd labels show --json
    """
    found = LabelStore(wiring.labels_file(load_config(config_path))).labels()
    if as_json:
        click.echo(json.dumps({path: {"class": label.data_class.value,
                                      "untrusted": label.untrusted}
                               for path, label in found.items()}, sort_keys=True))
    for path, label in ([] if as_json else sorted(found.items())):
        click.echo(f"{path}: {label.describe()}")


def _user() -> str:
    """Who runs this command, for the audit record: the uid, and its name where it has one."""
    uid = os.getuid()
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


@labels.command("lower")
@CONFIG
@click.argument("path")
@click.option("--class", "data_class", required=True,
              type=click.Choice([c.value for c in DataClass]), help="The class it holds now.")
@click.option("--trusted/--untrusted", required=True,
              help="Whether what it holds now is trusted.")
def labels_lower(config_path: Path, path: str, data_class: str, trusted: bool) -> None:
    """Lower a writable mount's label once you have checked what it holds. Audited (a 'label'
    record); brokerd must be stopped, so that no call is running.

    Example: brokerd labels lower ~/work/inbox --class public --trusted
    """
    config = load_config(config_path)
    target = real_path(os.path.expanduser(path))
    to = Label(DataClass(data_class), not trusted)
    by = _user()
    with held(wiring.labels_lock(config)):
        store = LabelStore(wiring.labels_file(config))
        was = store.check_lower(target, to)
        asyncio.run(AuditLog(wiring.audit_dir(config)).label(
            path=target, was_class=was.data_class, was_untrusted=was.untrusted,
            untrusted=to.untrusted, by=by, **{"class": to.data_class}))
        store.lower(target, to, by=by)
    click.echo(f"{target}: {was.describe()} -> {to.describe()} (audited)")


@main.group()
def jobs() -> None:
    """Scheduled jobs."""


@jobs.command("check")
@CONFIG
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="The jobs directory (default: [broker] jobs from the config).")
def jobs_check(config_path: Path, directory: Path | None) -> None:
    """Validate every job file (and its schedule, with systemd-analyze where installed).

    Example: brokerd jobs check --dir /etc/boxmaker/jobs
    """
    config = load_config(config_path) if directory is None or config_path.is_file() else None
    directory = directory or config.broker.jobs_dir()  # type: ignore[union-attr]
    reach = ToolReach() if config is None else wiring.recorded_reach(config)
    failed = False
    for path in job_paths(directory):
        try:
            job = read_job(path, reach)
        except JobError as exc:
            click.echo(f"REFUSED: {exc}", err=True)
            failed = True
            continue
        problem = check_schedule(job)
        if problem:
            click.echo(f"REFUSED: {path}: schedule: {problem}", err=True)
            failed = True
        else:
            click.echo(f"{job.name}: {job.schedule!r}: {job.ask[:60]!r}")
    if failed:
        raise SystemExit(1)


@jobs.command("show")
@CONFIG
@click.argument("name")
def jobs_show(config_path: Path, name: str) -> None:
    """Print one job as JSON (what bxctl job run reads).

    Example: brokerd jobs show morning-notes
    """
    config = load_config(config_path)
    job = read_job(job_path(config.broker.jobs_dir(), name), wiring.recorded_reach(config))
    click.echo(json.dumps(vars(job), sort_keys=True))


if __name__ == "__main__":
    main()
