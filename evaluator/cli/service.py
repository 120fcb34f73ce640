"""`qashift serve`, `worker`, `admin` and `remote`: the submission service (evaluator/service/
and docs/service.md). Thin: parse, call, print."""

from __future__ import annotations

import calendar
import json
from pathlib import Path

import click

from evaluator.cli.base import Group, RunnerChoice, configure, settings_options
from evaluator.cli.evaluate import print_results
from evaluator.core import console
from evaluator.core.errors import UserError

DB_HELP = "the service's database URL (default: $QASHIFT_DB, else service.sqlite in the workspace)"


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--db", default=None, help=DB_HELP)
@settings_options
def serve_command(host, port, db, data_dir, workspace) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /docs) over the service's database and this
    workspace's results store; `qashift worker` runs the jobs."""
    import uvicorn  # lazy: only the server needs it

    from evaluator.service import app  # lazy: sqlalchemy, fastapi
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi
    from evaluator.service.pages import Pages  # lazy: sqlalchemy, fastapi
    from evaluator.store.store import Store  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    engine = database.connect(db)
    store = Store.open_default()
    console.say(f"serving on http://{host}:{port} (database {engine.url.render_as_string()}, "
                f"store {store.workspace})")
    from evaluator.service.background import Every  # lazy: sqlalchemy
    from evaluator.service.boards import withheld  # lazy: sqlalchemy
    from evaluator.service.notices import deliver_due  # lazy: httpx
    from evaluator.service.scoring import score_waiting  # lazy: sqlalchemy

    def hidden_now() -> tuple:
        return tuple(sorted(withheld(engine)))

    pages = Pages(store, store.workspace / "service-pages",
                  lambda folder: _store_site(folder, hidden_now()), also=hidden_now)
    # hidden test sets' runs are scored here, where the gold is; webhooks are sent from here
    Every(1.0, lambda: score_waiting(engine, store), "scorer").start()
    Every(1.0, lambda: deliver_due(engine, store), "notifier").start()
    uvicorn.run(app.create_app(engine, store, pages, _placer(store)), host=host, port=port,
                log_level="warning", lifespan="off")  # no startup hooks: Ctrl-C ends it quietly


PAGES_BOOTSTRAP = 200  # resamples for the fits' bands: pages are rebuilt often, `report` once


def _placer(store):
    """Where a submission's results land on the frozen population's trend, for its page."""
    from analysis.studies import placement  # lazy: pandas, statsmodels, matplotlib

    def place(bundle: str, results: list[dict]) -> dict:
        try:
            return placement.place(store, bundle, results, n_boot=PAGES_BOOTSTRAP)
        except UserError as error:
            return {"rows": [], "figures": {}, "missing": str(error)}
    return place


def _store_site(folder: Path, exclude: tuple[str, ...] = ()) -> None:
    """The results store's site, as `report --source store` writes it, for the served pages,
    less the test sets whose results are withheld now."""
    from analysis import site  # lazy: pandas, matplotlib

    try:
        site.build_from_store(folder, n_boot=PAGES_BOOTSTRAP, exclude=exclude)
    except site.SiteError as error:
        raise UserError(str(error)) from None


@click.command("worker")
@click.option("--db", default=None, help=DB_HELP)
@click.option("--runner", default="auto", show_default=True, type=RunnerChoice(),
              help="how this worker runs the submissions")
@click.option("--lease", "lease_s", type=click.FloatRange(1, 3600), default=60,
              show_default=True, help="seconds a claimed job is held without a heartbeat")
@click.option("--max-jobs", type=click.IntRange(1), default=None,
              help="stop after this many jobs")
@click.option("--exit-when-idle", is_flag=True, help="stop when no job is waiting")
@click.option("--per-user", type=click.IntRange(1), default=None,
              help="run no job of a user who has this many running (on any worker)")
@click.option("--gpus", type=click.IntRange(0), default=None,
              help="claim jobs asking for at most this many GPUs (default: this host's)")
@settings_options
def worker_command(db, runner, lease_s, max_jobs, exit_when_idle, per_user, gpus, data_dir,
                   workspace) -> None:
    """Claim jobs from the service's database and run them, one at a time."""
    from evaluator.runners.docker.host import gpu_info  # lazy: the docker SDK
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi
    from evaluator.service.worker import work  # lazy: sqlalchemy, fastapi
    from evaluator.store.store import Store  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    if gpus is None:
        gpus = len(gpu_info().get("gpu_models", []))
    ended = work(database.connect(db), Store.open_default(), runner=runner, lease_s=lease_s,
                 max_jobs=max_jobs, exit_when_idle=exit_when_idle, per_user=per_user,
                 gpus=gpus, say=console.say)
    console.say(f"{ended} jobs ended")


@click.group("admin", cls=Group)
def admin_group() -> None:
    """Users and tokens of the service."""


@admin_group.command("user")
@click.argument("action", type=click.Choice(["add"]))
@click.argument("name")
@click.option("--tier", default="default", show_default=True,
              help="the user's tier: its limits are the operator's policy's (`tiers:`)")
@click.option("--db", default=None, help=DB_HELP)
@settings_options
def admin_user(action, name, tier, db, data_dir, workspace) -> None:
    """`user add NAME`: a user who may be given tokens."""
    from evaluator.service import accounts  # lazy: sqlalchemy, fastapi
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    accounts.add_user(database.connect(db), name, tier)
    click.echo(f"user {name} added (tier {tier})")


@admin_group.command("token")
@click.argument("action", type=click.Choice(["create"]))
@click.argument("name")
@click.option("--scope", type=click.Choice(["submit", "admin"]), default="submit",
              show_default=True)
@click.option("--db", default=None, help=DB_HELP)
@settings_options
def admin_token(action, name, scope, db, data_dir, workspace) -> None:
    """`token create NAME`: print a new token of user NAME, once (only its SHA-256 is
    kept)."""
    from evaluator.service import accounts  # lazy: sqlalchemy, fastapi
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    click.echo(accounts.create_token(database.connect(db), name, scope))


@admin_group.group("testset", cls=Group)
def admin_testset() -> None:
    """Hidden test sets and each set's rules (visibility, daily limit)."""


@admin_testset.command("add")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--hidden", is_flag=True, required=True,
              help="keep its gold answers in the service: workers get the answer-free input")
@click.option("--inputs-may-leave", is_flag=True,
              help="let endpoint bundles send its inputs to their servers")
@click.option("--db", default=None, help=DB_HELP)
@settings_options
def admin_testset_add(folder, hidden, inputs_may_leave, db, data_dir, workspace) -> None:
    """Add (or replace the data of) a hidden test set from FOLDER (a testset.yaml and its
    data file), copied where only the server's scoring reads it."""
    from evaluator.service import boards  # lazy: sqlalchemy
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi
    from evaluator.store.store import Store  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    found = boards.add_hidden(database.connect(db), folder, Store.open_default().workspace,
                              inputs_may_leave=inputs_may_leave)
    click.echo(f"hidden test set {found.id} added ({found.questions} questions, sha256 "
               f"{found.sha256[:12]})")


@admin_testset.command("rules")
@click.argument("testset")
@click.option("--visibility", type=click.Choice(["public", "after", "admins"]), default=None,
              help="who sees its results: everyone, everyone after --after, its organisers")
@click.option("--after", "after", type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M"]),
              default=None, help="visibility 'after': the date (UTC) its results are shown")
@click.option("--daily-limit", type=click.IntRange(0), default=None,
              help="submissions a user may make to it a day")
@click.option("--inputs-may-leave/--inputs-stay", default=None,
              help="whether endpoint bundles may send a hidden set's inputs out")
@click.option("--db", default=None, help=DB_HELP)
@settings_options
def admin_testset_rules(testset, visibility, after, daily_limit, inputs_may_leave, db,
                        data_dir, workspace) -> None:
    """Set (or show) a test set's rules."""
    from evaluator.service import boards  # lazy: sqlalchemy
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    when = float(calendar.timegm(after.timetuple())) if after else None
    found = boards.set_rules(database.connect(db), testset, visibility=visibility,
                             visible_after=when, daily_limit=daily_limit,
                             inputs_may_leave=inputs_may_leave)
    click.echo(json.dumps({k: v for k, v in vars(found).items() if k != "folder"}))


@admin_group.command("rerun")
@click.option("--stale", is_flag=True, required=True,
              help="the cells whose results are stale: their test set's bytes or their "
                   "scorer changed since")
@click.option("--db", default=None, help=DB_HELP)
@settings_options
def admin_rerun(stale, db, data_dir, workspace) -> None:
    """Queue again, as new jobs of the same submissions, the finished jobs whose results are
    stale; their old results stay in the store."""
    from evaluator.service import cells  # lazy: sqlalchemy, fastapi
    from evaluator.service import db as database  # lazy: sqlalchemy, fastapi
    from evaluator.store.store import Store  # lazy: sqlalchemy, fastapi

    configure(data_dir, workspace)
    queued, found = cells.rerun_stale(database.connect(db), Store.open_default())
    for row, why in found.unplannable:
        console.warn(f"job {row['id']} ({row['bundle']} x {row['testset']}) cannot be planned "
                     f"again: {why}")
    click.echo(f"{len(queued)} stale jobs queued again"
               + (f": {', '.join(map(str, queued))}" if queued else ""))


def _client(server: str | None, token: str | None):
    from evaluator.service.client import Client  # lazy: httpx

    return Client(server, token)


def _connection(fn):
    fn = click.option("--token", default=None, help="a token (default: $QASHIFT_TOKEN)")(fn)
    return click.option("--server", default=None,
                        help="the server's URL (default: $QASHIFT_SERVER)")(fn)


@click.group("remote", cls=Group)
def remote_group() -> None:
    """Submit to a qashift server and follow what it does."""


@remote_group.command("submit")
@click.argument("bundle")
@click.option("--testset", "-t", "testset_names", multiple=True, required=True)
@click.option("--limit", type=click.IntRange(1), default=None)
@click.option("--seed", type=int, default=0)
@click.option("--wait", is_flag=True, help="follow the jobs and print their results")
@click.option("--json", "as_json", is_flag=True)
@_connection
def remote_submit(bundle, testset_names, limit, seed, wait, as_json, server, token) -> None:
    """Submit BUNDLE on the test sets named: an id the server knows, or a bundle folder here,
    uploaded first (the server unpacks it through its gate)."""
    client = _client(server, token)
    upload = None
    if Path(bundle).is_dir():
        sent = client.upload(Path(bundle))
        console.say(f"uploaded {sent['bundle']} (digest {sent['digest'][:12]})")
        bundle, upload = sent["bundle"], sent["upload"]
    made = client.submit(bundle, list(testset_names), limit, seed, upload)
    if not wait:
        click.echo(json.dumps(made) if as_json else f"submission {made['submission']}: "
                   f"jobs {', '.join(map(str, made['jobs']))}")
        return
    console.say(f"submission {made['submission']}: {len(made['jobs'])} jobs")
    _print_submission(client.wait(made["submission"], say=console.say), as_json)


@remote_group.command("status")
@click.argument("submission")
@click.option("--json", "as_json", is_flag=True)
@_connection
def remote_status(submission, as_json, server, token) -> None:
    """A submission's jobs: each one's state, attempts and failure."""
    state = _client(server, token).submission(submission)
    if as_json:
        click.echo(json.dumps(state, indent=2))
        return
    for job in state["jobs"]:
        ended = f" ({job['failure_class']}: {job['message']})" if job["failure_class"] else ""
        click.echo(f"job {job['id']:>6} {job['bundle']} x {job['testset']}: {job['state']}, "
                   f"attempt {job['attempts']}{ended}")


@remote_group.command("results")
@click.argument("submission")
@click.option("--json", "as_json", is_flag=True)
@_connection
def remote_results(submission, as_json, server, token) -> None:
    """A submission's results as `evaluate` prints them (`--json`: its JSON)."""
    _print_submission(_client(server, token).submission(submission), as_json)


@remote_group.command("logs")
@click.argument("job", type=int)
@click.option("--follow", is_flag=True, help="show the log as it is written, until the job ends")
@_connection
def remote_logs(job, follow, server, token) -> None:
    """The log of a job's run, once it has ended (`--follow`: as it is written, until the
    job ends)."""
    client = _client(server, token)
    if not follow:
        click.echo(client.log(job), nl=False)
        return
    ended = client.follow_log(job, lambda text: click.echo(text, nl=False))
    console.say(f"job {job}: {ended['state']}" + (
        f" ({ended['failure_class']}: {ended['message']})" if ended["failure_class"] else ""))


@remote_group.command("cancel")
@click.argument("job", type=int)
@_connection
def remote_cancel(job, server, token) -> None:
    """Cancel a job that has not ended."""
    click.echo(f"job {_client(server, token).cancel(job)['id']} cancelled")


def _print_submission(state: dict, as_json: bool) -> None:
    """As `evaluate` prints its cells: the table (or its JSON), then each failure in a line;
    exit status 1 when a job failed."""
    results = [job["result"] for job in state["jobs"] if job["result"]]
    failed = [{"bundle": j["bundle"], "testset": j["testset"],
               "failure_class": j["failure_class"] or j["state"], "message": j["message"]}
              for j in state["jobs"] if j["state"] in ("failed", "cancelled")]
    if as_json:
        click.echo(json.dumps({"results": results, "failed": failed,
                               "not_applicable": []}, indent=2))
    else:
        print_results(results)
        for j in state["jobs"]:
            if not j["result"] and j["state"] not in ("failed", "cancelled"):
                click.echo(f"{j['bundle']} x {j['testset']}: {j['state']}")
    for f in failed:
        console.error(f"{f['bundle']} x {f['testset']} failed ({f['failure_class']}): "
                      f"{f['message']}")
    if failed:
        raise UserError(f"{len(failed)} of {len(state['jobs'])} jobs failed")
