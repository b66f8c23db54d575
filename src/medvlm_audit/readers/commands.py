"""`medvlm-audit readers ...`: create a study from a run, serve it, watch its progress, export and analyse it.

Wire into the CLI with one line: ``app.add_typer(readers_app, name="readers")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from medvlm_audit.errors import AuditError

__all__ = ["readers_app"]

readers_app = typer.Typer(no_args_is_help=True, help="Reader study: blinded clinician reads beside the models.")
console = Console(stderr=True)


def _fail(e: Exception) -> None:
    console.print(f"[bold red]error:[/] {e}")
    raise typer.Exit(2)


def _base_url(host: str, port: int, scheme: str = "http") -> str:
    shown = "127.0.0.1" if host in ("127.0.0.1", "localhost", "0.0.0.0", "::") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"{scheme}://{shown}:{port}"


def _parse_axes(axes: list[str] | None) -> list[tuple[str, str]] | None:
    """--axis NAME or --axis 'NAME=question text' (repeatable) for benchmark-profile rubrics."""
    if not axes:
        return None
    out = []
    for a in axes:
        name, _, prompt = a.partition("=")
        name = name.strip()
        if not name.replace("_", "").isalnum():
            raise AuditError(f"--axis {a!r}: the axis name must be letters, digits and underscores")
        out.append((name, prompt.strip() or name.replace("_", " ").capitalize()))
    return out


def _parse_options(pairs: list[str], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """--option NAME=VALUE pairs, each typed like the task's default (bool: true/false, yes/no, 1/0)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, eq, raw = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or not name:
            raise AuditError(f"--option {pair!r}: expected NAME=VALUE")
        if name not in defaults:
            out[name] = raw  # create_study names the unknown option and the known ones
            continue
        default = defaults[name]
        try:
            if isinstance(default, bool):
                low = raw.strip().lower()
                if low not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
                    raise ValueError
                out[name] = low in ("true", "yes", "1", "on")
            elif isinstance(default, (int, float)):
                out[name] = type(default)(raw)
            else:
                out[name] = raw
        except ValueError:
            raise AuditError(f"--option {pair!r}: {name} takes a {type(default).__name__} "
                             f"(default {default!r})") from None
    return out


@readers_app.command("tasks")
def tasks_cmd() -> None:
    """The reader tasks of the registered suites: what n counts, the options and their defaults."""
    from medvlm_audit.readers.catalog import reader_tasks, task_suites

    owners = task_suites()
    for name, t in sorted(reader_tasks().items()):
        opts = ", ".join(f"{k}={v!r}" for k, v in t.options.items()) or "none"
        axes = "; --axis chooses its rubric" if t.axis_choices is not None else ""
        print(f"{name}	{owners[name]}	{t.spec.title}	n: {t.n_means}	options: {opts}{axes}")


@readers_app.command("create")
def create_cmd(
    task: Annotated[str, typer.Option(help="A reading task a suite declares (`readers tasks` lists them).")],
    run_dir: Annotated[Path | None, typer.Argument(help="The run to sample from (results.parquet + run.sqlite).")] = None,
    n: Annotated[int, typer.Option("--n", help="How many to sample; what the task counts is listed by "
                                               "`readers tasks`.")] = 80,
    reader: Annotated[list[str], typer.Option("--reader", help="Reader name (repeat for each reader).")] = [],  # noqa: B006
    seed: Annotated[int, typer.Option(help="Sampling and order seed.")] = 42,
    out: Annotated[Path, typer.Option(help="Study folder to create.")] = Path("study"),
    items: Annotated[Path | None, typer.Option(help="Items file for a task that reads one (CSV, JSONL or "
                                                    "Parquet; its columns: `readers tasks`).")] = None,
    probe_set: Annotated[str | None, typer.Option(help="Probe set of the run (when it holds several).")] = None,
    model: Annotated[list[str], typer.Option("--model", help="Models whose answers the task samples (repeat; "
                                                             "e.g. whose errors).")] = [],  # noqa: B006
    option: Annotated[list[str], typer.Option("--option", help="A task option NAME=VALUE (repeat; the task's "
                                                               "options and defaults: `readers tasks`).")] = [],  # noqa: B006
    axis: Annotated[list[str], typer.Option("--axis", help="Rubric axis NAME[=question] of a task whose axes are "
                                                           "chosen per study (repeat).")] = [],  # noqa: B006
    copy_images: Annotated[bool, typer.Option(help="Copy the rendered images into the study (default: never; "
                                                   "images are rendered from the source files on request).")] = False,
    port: Annotated[int, typer.Option(help="Port used in the printed links.")] = 8765,
) -> None:
    """Create a study: a seeded sample, a study store, invitations.csv and an admin link."""
    from medvlm_audit.readers.catalog import reader_tasks
    from medvlm_audit.readers.study import create_study

    tasks = reader_tasks()
    if task not in tasks:
        _fail(AuditError(f"--task must be one of {', '.join(sorted(tasks))}; got {task!r}"))
    try:
        res = create_study(run_dir, task, n, reader, seed, out, items=items, probe_set=probe_set,
                           models=model or None, axes=_parse_axes(axis), copy_images=copy_images,
                           **_parse_options(option, tasks[task].options))
    except (AuditError, ValueError) as e:
        _fail(e)
    base = _base_url("127.0.0.1", port)
    console.print(f"study: {res['n_items']} items per reader -> {out} (invitations.csv, admin-token.txt)")
    for name, tok in res["tokens"].items():
        print(f"{name}\t{base}/r/{tok}")
    print(f"admin\t{base}/admin/{res['admin_token']}")
    console.print(f"serve it with: medvlm-audit readers serve {out} --port {port}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def plain_http_refusal(host: str, tls: bool, i_know: bool) -> tuple[str | None, str | None]:
    """(error, warning) for serving on ``host``: beyond this machine without TLS the reader tokens, CSRF
    tokens and answers cross the network in clear, so that needs ``--i-know-plain-http`` (then a warning)."""
    if tls or is_loopback(host):
        return None, None
    what = (f"serving on {host} over plain HTTP: reader links (their tokens), answers and images cross the network "
            "unencrypted")
    if not i_know:
        return (f"{what}. Use --ssl-certfile/--ssl-keyfile, or a TLS proxy in front of 127.0.0.1, or pass "
                "--i-know-plain-http on a network you trust"), None
    return None, f"warning: {what} (--i-know-plain-http given)"


@readers_app.command("serve")
def serve_cmd(
    study_dir: Annotated[Path, typer.Argument(help="Study folder.")],
    host: Annotated[str, typer.Option(help="Interface to listen on (default: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8765,
    allow_host: Annotated[list[str], typer.Option("--allow-host", help="Extra Host header value accepted (when "
                                                                       "serving beyond localhost).")] = [],  # noqa: B006
    ssl_certfile: Annotated[Path | None, typer.Option(help="TLS certificate (PEM) to serve HTTPS.")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(help="TLS private key (PEM) of --ssl-certfile.")] = None,
    i_know_plain_http: Annotated[bool, typer.Option("--i-know-plain-http", help="Serve beyond this machine "
                                                    "without TLS (tokens and answers in clear).")] = False,
) -> None:
    """Serve the reading app (Ctrl-C to stop; every answer is already saved)."""
    import uvicorn

    from medvlm_audit.readers.app import create_app

    if (ssl_certfile is None) != (ssl_keyfile is None):
        _fail(AuditError("--ssl-certfile and --ssl-keyfile go together"))
    error, warning = plain_http_refusal(host, ssl_certfile is not None, i_know_plain_http)
    if error:
        _fail(AuditError(error))
    if warning:
        console.print(f"[yellow]{warning}[/]")
    try:
        hosts = ["127.0.0.1", "localhost", "::1", "[::1]"] + list(allow_host)
        if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
            hosts.append(host)
        if host in ("0.0.0.0", "::") and not allow_host:
            console.print("[yellow]listening on all interfaces: pass --allow-host NAME for the name readers use[/]")
        app = create_app(study_dir, allowed_hosts=hosts)
    except AuditError as e:
        _fail(e)
    console.print(f"reader study at {_base_url(host, port, 'https' if ssl_certfile else 'http')} (links: {study_dir}/invitations.csv)")
    tls = {"ssl_certfile": str(ssl_certfile), "ssl_keyfile": str(ssl_keyfile)} if ssl_certfile else {}
    uvicorn.run(app, host=host, port=port, log_level="warning", **tls)


@readers_app.command("status")
def status_cmd(study_dir: Annotated[Path, typer.Argument(help="Study folder.")]) -> None:
    """Progress per reader (items complete / assigned); never an answer."""
    from medvlm_audit.readers.study import Study

    try:
        st = Study(study_dir)
    except AuditError as e:
        _fail(e)
    prog = st.progress()
    print(f"task: {st.task}")
    for r in prog.itertuples(index=False):
        print(f"{r.reader}\t{r.complete}/{r.assigned}\t{r.percent:.0f}%")


@readers_app.command("export")
def export_cmd(
    study_dir: Annotated[Path, typer.Argument(help="Study folder.")],
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("reads"),
) -> None:
    """Every answer as CSV/Parquet, finding-presence reads in the tidy run shape, CoT ratings as JSONL."""
    from medvlm_audit.readers.export import export_study

    try:
        files = export_study(study_dir, out)
    except AuditError as e:
        _fail(e)
    for name, path in files.items():
        print(f"{name}\t{path}")


@readers_app.command("analyse")
def analyse_cmd(
    export_dir: Annotated[list[Path], typer.Argument(help="One or more export folders (readers export).")],
    run_dir: Annotated[Path | None, typer.Option("--run", help="The run whose models the reads are compared "
                                                                "with (default: the study's run).")] = None,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("reader-analysis"),
    b: Annotated[int, typer.Option("--B", help="Bootstrap resamples.")] = 10_000,
) -> None:
    """Reader metrics (long schema), comparisons, item lists and figures; readers-report.html."""
    from medvlm_audit.readers.analysis import analyse_exports, write_analysis

    try:
        res = analyse_exports(export_dir, run_dir=run_dir, B=b)
        files = write_analysis(res, out)
    except AuditError as e:
        _fail(e)
    for name, path in files.items():
        print(f"{name}\t{path}")
