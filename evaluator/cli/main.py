"""Command line: `evaluate` (the main job) and `qashift` (everything else).

Heavy modules (scipy, pandas, matplotlib, docker) are imported inside commands, so that
start-up stays fast; a cached `evaluate` touches none of them.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import platform
import socket
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import click
import yaml

from evaluator import __version__
from evaluator.bundles import spec as bundles
from evaluator.bundles.leaderboard import complete, import_export, lacks
from evaluator.cli.base import Command, Group, configure, console_options, settings_options
from evaluator.core import console, settings
from evaluator.core.errors import FAILURE_CLASSES, UserError
from evaluator.core.files import write_csv_atomic, write_json_atomic
from evaluator.core.folders import read_yaml, unknown_name
from evaluator.core.provenance import cpu, software
from evaluator.data import stats, testsets
from evaluator.data.fetch import cached_path
from evaluator.pipeline.samples import write_samples
from evaluator.pipeline.status import CellStatus, matrix_status
from evaluator.store.queries import cell_result, is_sample, latest
from evaluator.store.store import Store
from evaluator.store.units import load_units
from evaluator.training import evaluation, systems
from evaluator.training.evaluation import EvaluationConfig
from evaluator.training.run import read_progress

LEVEL_HELP = "confidence level of the intervals (default 0.95)"


def _fmt_interval(iv: dict) -> str:
    return f"{iv['value']:7.3f} [{iv['lo']:6.2f}, {iv['hi']:6.2f}]"


def _print_not_applicable(skipped: list[tuple[str, str, str]]) -> None:
    """Each cell when few; otherwise a count per reason (--json lists every cell)."""
    if len(skipped) <= 12:
        for b, t, r in skipped:
            click.echo(f"not applicable: {b} x {t}: {r}")
        return
    reasons: dict[str, int] = {}
    for _, _, r in skipped:
        reasons[r] = reasons.get(r, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        click.echo(f"not applicable: {count} cells: {reason}")


def _print_table(results: list[dict]) -> None:
    if not results:
        return
    # columns as wide as their longest entry: long system ids stay aligned
    wb = max(len("bundle"), *(len(r["bundle"]) for r in results))
    wt = max(len("testset"), *(len(r["testset"]) for r in results))
    header = (f"{'bundle':<{wb}} {'testset':<{wt}} {'n':>6} {'miss':>5}  "
              f"{'EM [lo, hi]':<25} {'F1 [lo, hi]':<25} cached")
    click.echo(header)
    for r in results:
        click.echo(f"{r['bundle']:<{wb}} {r['testset']:<{wt}} {r['n']:>6} {r['missing']:>5}  "
                   f"{_fmt_interval(r['em']):<25} {_fmt_interval(r['f1']):<25} "
                   f"{'yes' if r['cached'] else 'no'}")
    first = results[0]
    click.echo(f"({first['em']['level']:.0%} intervals: EM {first['em']['method']}, "
               f"F1 {first['f1']['method']})")
    if any("limit" in r for r in results):
        click.echo(f"(--limit {first.get('limit')}: a sample of each test set; not comparable "
                   f"with full runs)")


# A study file (`--config`, `qashift run`) uses the flags' names: key -> parameter.
CONFIG_KEYS = {"bundles": "bundle_names", "testsets": "testset_names", "level": "level",
               "model_args": "model_args",
               "cluster": "cluster", "rerun": "rerun", "runner": "runner",
               "partition": "partition", "account": "account", "device": "device",
               "data_dir": "data_dir", "workspace": "workspace", "jobs": "parallel",
               "json": "as_json", "limit": "limit", "seed": "seed",
               "log_samples": "samples_dir", "output_path": "output_path"}
LISTS = ("bundle_names", "testset_names", "data_dir")


def _read_config(ctx: click.Context, param: click.Parameter, value: str | None):
    """Load a study file into the command's defaults; flags given still win."""
    if value is None:
        return None
    path = Path(value)
    data = read_yaml(path)
    for key in data:
        if key not in CONFIG_KEYS:
            close = difflib.get_close_matches(key, CONFIG_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"{path}: unknown key {key!r}{hint}; allowed: "
                            f"{', '.join(CONFIG_KEYS)}")
    defaults = {}
    for key, value_ in data.items():
        name = CONFIG_KEYS[key]
        if name in LISTS and not isinstance(value_, list):
            value_ = [value_]
        if name in ("data_dir", "workspace", "samples_dir", "output_path") and value_:
            # paths in a study file are relative to the file, not to where it is run from
            value_ = ([str((path.parent / v).resolve()) for v in value_] if name in LISTS
                      else str((path.parent / value_).resolve()))
        defaults[name] = value_
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


@click.command("evaluate", cls=Command)
@click.version_option(__version__, prog_name="qashift")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), is_eager=True,
              expose_value=False, callback=_read_config,
              help="a study file (YAML): the same keys as the flags (bundles, testsets, "
                   "runner, level, limit, log_samples, output_path, ...); flags given win")
@click.option("--bundle", "-b", "bundle_names", multiple=True, required=True,
              help="submission id (repeatable; 'all' for every bundle)")
@click.option("--testset", "-t", "testset_names", multiple=True, required=True,
              help="test-set id (repeatable; 'all' for every test set)")
@click.option("--level", type=float, default=0.95, show_default=True, help=LEVEL_HELP)
@click.option("--cluster", type=click.Choice(["paragraph", "article"]), default=None,
              help="cluster intervals by shared passage or article")
@click.option("--rerun", is_flag=True, help="recompute even if a stored result exists")
@click.option("--runner", default="auto", show_default=True,
              type=click.Choice(["auto", "local", "docker", "slurm"]),
              help="how command bundles run; auto = docker when a daemon answers; slurm = "
                   "one Slurm job per cell (docs/slurm.md)")
@click.option("--partition", default=None, help="Slurm partition (--runner slurm)")
@click.option("--account", default=None, help="Slurm account (--runner slurm)")
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "gpu"]))
@click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
              help="local mirror of the public data files, tried before any URL")
@click.option("--workspace", type=click.Path(file_okay=False),
              help="results store location (default $QASHIFT_WORKSPACE or ./.qashift)")
@click.option("--jobs", "-j", "parallel", type=click.IntRange(1, 64), default=1,
              show_default=True, help="cells to run at once")
@click.option("--json", "as_json", is_flag=True, help="print a machine-readable document")
@click.option("--limit", type=click.IntRange(1), default=None,
              help="score a seeded, article-stratified sample of N questions (a quick look: "
                   "stored apart from, and never comparable with, a full run)")
@click.option("--seed", type=int, default=0, show_default=True, help="the --limit sample's seed")
@click.option("--log-samples", "samples_dir", type=click.Path(file_okay=False), default=None,
              help="write one JSON line per question of every cell (question, gold answers, "
                   "prediction, EM, F1) to this folder")
@click.option("--model-args", "model_args", default=None, metavar="KEY=VALUE,...",
              help="hf-qa run settings for this run: batch_size, max_seq_len, doc_stride, "
                   "max_answer_len, onnx (true|false|int8); they enter the cell key")
@click.option("--output-path", "output_path", type=click.Path(file_okay=False), default=None,
              help="write the study's results.json, per-question logs (samples/) and "
                   "figures (figures/) here")
@console_options
@click.pass_context
def evaluate_cmd(ctx: click.Context, bundle_names, testset_names, level, cluster, rerun,
                 runner, partition, account, device, data_dir, workspace, parallel,
                 as_json, limit, seed, samples_dir, model_args, output_path) -> None:
    """Score submissions on test sets with official SQuAD v1.1 EM/F1 and intervals."""
    configure(data_dir, workspace)
    config = EvaluationConfig(tuple(bundle_names), tuple(testset_names), runner, level, cluster,
                              rerun, device, parallel, limit, seed,
                              _parse_model_args(model_args), partition, account)
    store = Store.open_default()
    done = evaluation.evaluate(config, store, progress=console.say, warn=console.warn)
    report, skipped = done.report, done.not_applicable
    results = [o.result.to_dict() for o in report.outcomes if o.result is not None]
    if output_path and not samples_dir:
        samples_dir = str(Path(output_path) / "samples")
    if samples_dir:
        from analysis import strata  # lazy: only --log-samples reads the strata cache

        for o in report.outcomes:
            if o.result is not None:
                predictions = json.loads(o.result.predictions_path.read_bytes())
                dataset = o.job.dataset()
                for path in write_samples(dataset, predictions, Path(samples_dir),
                                          o.job.bundle.id, o.job.testset.id,
                                          strata.cached(dataset.sha256)):
                    console.say(f"wrote {path}")
    failed = [{"bundle": o.job.bundle.id, "testset": o.job.testset.id,
               "failure_class": o.failure_class, "message": o.message} for o in report.failed]
    not_applicable = [{"bundle": b, "testset": t, "reason": r} for b, t, r in skipped]
    if output_path:
        _write_study(Path(output_path), {
            "config": {**config.as_dict(), "workspace": str(settings.current().workspace)},
            "provenance": {**software(), "host": socket.gethostname(),
                                             "platform": platform.platform(), "cpu": cpu(),
                                             "date": datetime.now(UTC).isoformat()},
            "results": results, "failed": failed, "not_applicable": not_applicable},
            store, level)
    if as_json:
        click.echo(json.dumps({"results": results, "failed": failed,
                               "not_applicable": not_applicable}, indent=2))
    else:
        _print_table(results)
        _print_not_applicable(skipped)
    for f in failed:
        console.error(f"{f['bundle']} x {f['testset']} failed ({f['failure_class']}): "
                      f"{f['message']}")
    ctx.exit(1 if failed else 0)


def _parse_model_args(text: str | None) -> dict:
    """`batch_size=8,onnx=true` -> {"batch_size": 8, "onnx": True} (values read as YAML)."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--model-args: {item!r} is not KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value.strip())
    return out


def _write_study(out: Path, document: dict, store: Store, level: float) -> None:
    """results.json and the figures of exactly these cells (when a reference set is among
    them: the figures plot new-set against reference-set scores)."""
    from analysis import report, tidy  # lazy: pandas, matplotlib; only --output-path
    from analysis.sources import store_records_of  # lazy: as above

    write_json_atomic(out / "results.json", document)
    console.say(f"wrote {out / 'results.json'}")
    cells = {(r["bundle"], r["testset"]) for r in document["results"] if "limit" not in r}
    records = [r for r in store_records_of(store) if (r["bundle"], r["testset"]) in cells]
    try:
        written = report.regenerate(tidy.from_records(records), out / "figures", n_boot=200)
        console.say(f"wrote {len(written)} figures and tables to {out / 'figures'}")
    except (ValueError, KeyError) as exc:
        console.warn(f"no figures for this study: {exc}")


def evaluate_command() -> None:
    """Console-script entry point for `evaluate`."""
    sys.exit(evaluate_cmd.main(args=sys.argv[1:], prog_name="evaluate"))


COMMANDS = {  # the commands of the other cli modules, imported when asked for
    "store": "evaluator.cli.store:store_group",
    "train": "evaluator.cli.train:train_command",
    "systems": "evaluator.cli.train:systems_command",
    "study": "evaluator.cli.study:study_group",
    "validate": "evaluator.cli.validate:validate_command",
    "figures": "evaluator.cli.analysis:figures_command",
    "fit": "evaluator.cli.analysis:fit_command",
    "concurrence": "evaluator.cli.analysis:concurrence_command",
    "population": "evaluator.cli.analysis:population_command",
    "reproduce": "evaluator.cli.analysis:reproduce_command",
    "strata": "evaluator.cli.analysis:strata_command",
    "extra-data": "evaluator.cli.analysis:extra_data_command",
    "report": "evaluator.cli.analysis:report_command",
    "challenge": "evaluator.cli.derive:challenge",
    "compare": "evaluator.cli.compare:compare_command",
    "images": "evaluator.cli.images:images_group",
    "zoo": "evaluator.cli.zoo:zoo_group",
}
SECTIONS = {  # `qashift --help`, by what a user does
    "Evaluate": ("evaluate", "run", "check", "status", "results", "compare"),
    "Test sets and submissions": ("testsets", "bundles", "validate", "images"),
    "Train and study": ("train", "systems", "study", "zoo"),
    "Analyse": ("figures", "fit", "population", "concurrence", "strata", "extra-data",
                "challenge", "reproduce", "report"),
    "Store": ("store",),
}


@click.group(cls=Group, lazy=COMMANDS, sections=SECTIONS)
@click.version_option(__version__, prog_name="qashift")
@console_options
@click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
              help="local mirror of the public data files")
@click.option("--workspace", type=click.Path(file_okay=False), help="results store location")
def main(data_dir, workspace) -> None:
    """qashift: evaluate frozen QA submissions under distribution shift."""
    configure(data_dir, workspace)


main.add_command(evaluate_cmd)


@main.command("status")
@click.option("--bundle", "-b", "bundle_names", multiple=True, default=("all",),
              show_default=True)
@click.option("--testset", "-t", "testset_names", multiple=True, default=("all",),
              show_default=True)
@click.option("--include-waiting", is_flag=True,
              help="also show bundles still waiting for their program files")
@click.option("--wide", is_flag=True, help="the full matrix, however wide")
def status_cmd(bundle_names, testset_names, include_waiting, wide) -> None:
    """The matrix from the store: done (F1), running, failed (class), pending, n/a."""
    store = Store.open_default()
    chosen_bundles = [b for b in bundles.resolve(list(bundle_names))
                      if include_waiting or b.status == "ready" or "all" not in bundle_names]
    chosen_sets = testsets.resolve(list(testset_names))
    cells = matrix_status(store, chosen_bundles, chosen_sets)
    width = min(max([len(b.id) for b in chosen_bundles] + [6]), NAME_WIDTH)
    rows = [cells[k:k + len(chosen_sets)] for k in range(0, len(cells), max(1, len(chosen_sets)))]
    if wide or width + 13 * len(chosen_sets) <= COLUMNS:
        click.echo(" " * width + "".join(f" {_cut(t.id, 12, middle=True):>12}"
                                         for t in chosen_sets))
        for row in rows:
            if row:
                click.echo(f"{_cut(row[0].bundle, width):<{width}}"
                           + "".join(f" {_status_text(c):>12}" for c in row))
    else:  # too many sets for a matrix: one line per bundle, its cells counted
        click.echo(f"{'bundle':<{width}} {'done':>5} {'failed':>6} {'running':>7} "
                   f"{'pending':>7} {'n/a':>5}  best F1")
        for row in rows:
            if not row:
                continue
            tally = Counter(c.state for c in row)
            done = [c for c in row if c.state == "done"]
            best = max(done, key=lambda c: c.row["f1"], default=None)
            click.echo(f"{_cut(row[0].bundle, width):<{width}} {tally['done']:>5} "
                       f"{tally['failed']:>6} {tally['running']:>7} {tally['pending']:>7} "
                       f"{tally['n/a']:>5}  " + (_cut(f"{best.row['f1']:.1f} ({best.testset})",
                                                   COLUMNS - width - 42) if best else "-"))
        console.say(f"{len(chosen_sets)} test sets do not fit {COLUMNS} columns: --wide "
                    f"for the matrix, or -t to choose sets")
    counts = Counter(c.state for c in cells)
    click.echo(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
               "  (done cells show F1)")
    for lease in store.live_leases() if store.exists() else []:
        progress = read_progress(store, lease["key"])  # a train cell, when it has one
        if progress is not None:
            click.echo(f"training {lease['bundle']} on {lease['testset']}: epoch "
                       f"{progress.get('epoch')}/{progress.get('epochs')}, loss "
                       f"{float(progress.get('loss') or 0):.4f}, eta "
                       f"{float(progress.get('eta_s') or 0):.0f} s")


COLUMNS, NAME_WIDTH = 120, 44  # listings fit this many columns unless --wide


def _cut(text: str, width: int, middle: bool = False) -> str:
    """`text` in at most `width` characters, an ellipsis marking a cut (in the middle: ids
    of derived sets differ at their ends)."""
    if len(text) <= width:
        return text
    if middle:
        head = (width - 1) // 2
        return text[:head] + "…" + text[len(text) - (width - 1 - head):]
    return text[:max(0, width - 1)] + "…"


def _status_text(cell: CellStatus) -> str:
    if cell.state == "done":
        return f"{cell.row['f1']:.1f}"
    if cell.state == "failed":
        return (cell.failure_class or "")[:12]
    return {"pending": "."}.get(cell.state, cell.state)


@main.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def run_command(config, flags) -> None:
    """Run a study file: `evaluate --config CONFIG [FLAGS...]` (flags given win over the
    file). The one command that reproduces a study."""
    sys.exit(evaluate_cmd.main(args=["--config", config, *flags], prog_name="qashift run"))


@main.command("check")
@click.option("--bundle", "-b", "bundle_name", required=True, help="bundle or system id")
@click.option("--testset", "-t", "testset_name", default="squad-dev", show_default=True)
@click.option("--questions", "-n", type=click.IntRange(1), default=20, show_default=True)
@click.option("--runner", default="auto", show_default=True,
              type=click.Choice(["auto", "local", "docker", "slurm"]))
@settings_options
def check_command(bundle_name, testset_name, questions, runner, data_dir, workspace) -> None:
    """Run a bundle on a few questions, in its sandbox, and say what would fail before a
    full run (the sample is stored apart, never mixed with full results)."""
    configure(data_dir, workspace)
    config = EvaluationConfig((bundle_name,), (testset_name,), runner, rerun=True,
                              limit=questions, seed=0)
    report = evaluation.evaluate(config, Store.open_default(), warn=console.warn).report
    for o in report.outcomes:
        if o.result is not None:
            r = o.result.to_dict()
            click.echo(f"ok: {bundle_name} answered {r['n'] - r['missing']} of {r['n']} "
                       f"questions of {testset_name} ({r['runner']}, {r['device']}); EM "
                       f"{r['em']['value']:.1f}, F1 {r['f1']['value']:.1f}"
                       + (f"; {r['missing']} missing" if r["missing"] else ""))
        else:
            console.error(f"{bundle_name} would fail on {testset_name}: {o.failure_class} "
                          f"({FAILURE_CLASSES.get(o.failure_class, '')}): {o.message}")
    sys.exit(1 if report.failed else 0)


# test sets -------------------------------------------------------------------
@main.group("testsets", cls=Group, lazy={"derive": "evaluator.cli.derive:testsets_derive"})
def testsets_group() -> None:
    """List, inspect and fetch test sets."""


@testsets_group.command("list")
@click.option("--kind", "kinds", multiple=True, metavar="KIND",
              help="only sets of this kind (repeatable): original, replication, natural-shift, "
                   "adversarial, derived, synthetic, training")
@click.option("--match", "pattern", default=None, metavar="GLOB", help="only ids matching this")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per set")
def testsets_list(kinds, pattern, as_json) -> None:
    """Every test set; a broken folder is listed with its problem, the others still are."""
    good, broken = testsets.scan()
    names = sorted(n for n in [*good, *broken] if not pattern or fnmatch.fnmatch(n, pattern))
    if kinds:
        names = [n for n in names if n in good and good[n].kind in kinds]
    rows = []
    for name in names:
        if name in broken:
            rows.append({"id": name, "broken": broken[name]})
            continue
        ts = good[name]
        if ts.derive is not None:
            local = f"derived ({ts.derive.transform})"
        elif ts.source is not None:
            local = "cached" if cached_path(ts.sha256).exists() else "fetched on first use"
        else:
            local = f"in folder ({ts.data_file})" + (", pinned" if ts.pinned else "")
        rows.append({"id": ts.id, "kind": ts.kind, "questions": ts.questions,
                     "scorer": ts.scorer, "reference": ts.reference, "data": local})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = min(max([len(n) for n in names] + [2]), NAME_WIDTH)
    ref = min(max([len(r.get("reference") or "-") for r in rows] + [9]), 20)
    click.echo(f"{'id':<{width}} {'kind':<13} {'questions':>9} {'scorer':<15} "
               f"{'reference':<{ref}} data")
    for r in rows:
        if "broken" in r:
            click.echo(_cut(f"{_cut(r['id'], width):<{width}} BROKEN: {r['broken']}", COLUMNS))
            continue
        line = (f"{_cut(r['id'], width):<{width}} {r['kind']:<13} {r['questions']:>9} "
                f"{r['scorer']:<15} {_cut(r['reference'] or '-', ref):<{ref}} {r['data']}")
        click.echo(_cut(line, COLUMNS))
    if kinds or pattern:
        console.say(f"{len(rows)} of {len(good) + len(broken)} test sets")


@testsets_group.command("show")
@click.argument("name")
def testsets_show(name: str) -> None:
    ts = testsets.get(name)
    for key in ("id", "name", "version", "kind", "reference", "questions", "scorer",
                "cluster", "license", "citation", "sha256"):
        click.echo(f"{key:>10}: {getattr(ts, key)}")
    if ts.source is not None:
        click.echo(f"{'url':>10}: {ts.source.url}")
        mirrored = [m / ts.source.file for m in settings.mirror_dirs()
                    if (m / ts.source.file).is_file()]
        where = ("cached" if cached_path(ts.sha256).exists() else
                 f"in the mirror {mirrored[0]}" if mirrored else
                 f"not here yet: `qashift testsets fetch {ts.id}` downloads it, or put "
                 f"{ts.source.file} in a mirror directory (--data-dir DIR)")
        click.echo(f"{'data':>10}: {where}")


@testsets_group.command("stats")
@click.argument("names", nargs=-1)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table as CSV.")
def testsets_stats(names, csv_path) -> None:
    """Articles, paragraphs, questions, mean paragraph/question/answer length (words) and
    answers per question of each test set (default: every folder, training splits
    included); a set whose data cannot be had here is listed with the reason."""
    rows, width = [], max((len(n) for n in testsets.available()), default=10)
    click.echo(f"{'id':<{width}} {'articles':>8} {'paragraphs':>10} {'questions':>9} "
               f"{'para_w':>7} {'quest_w':>7} {'answ_w':>6} {'answ/q':>6}")
    for ts in testsets.resolve(list(names) or sorted(testsets.available())):
        try:
            s = stats.of(ts.load().raw)
        except UserError as exc:
            click.echo(f"{ts.id:<{width}} unavailable: {exc}")
            continue
        rows.append({"testset": ts.id, **s.row()})
        click.echo(f"{ts.id:<{width}} {s.articles:>8} {s.paragraphs:>10} {s.questions:>9} "
                   f"{s.paragraph_words:>7.1f} {s.question_words:>7.1f} {s.answer_words:>6.2f} "
                   f"{s.answers_per_question:>6.2f}")
    if csv_path:
        write_csv_atomic(csv_path, ["testset", *stats.COLUMNS], rows)
        click.echo(f"wrote {csv_path}")


@testsets_group.command("fetch")
@click.argument("names", nargs=-1, required=True)
def testsets_fetch(names) -> None:
    """Download (or copy from a mirror), verify and cache test-set files."""
    failed = False
    for ts in testsets.resolve(list(names)):
        try:
            dataset = ts.load()
            click.echo(f"{ts.id}: ok ({len(dataset.questions)} questions, sha256 verified)")
        except UserError as exc:
            failed = True
            console.error(str(exc))
    sys.exit(1 if failed else 0)


# bundles ---------------------------------------------------------------------
@main.group("bundles", cls=Group, lazy={"export-onnx": "evaluator.cli.zoo:export_onnx"})
def bundles_group() -> None:
    """List and inspect submissions."""


@bundles_group.command("list")
@click.option("--runnable", "show", flag_value="runnable", help="only bundles that run here")
@click.option("--awaiting", "show", flag_value="awaiting", help="only bundles still lacking "
              "their program files")
@click.option("--all", "show", flag_value="all", help="every bundle")
def bundles_list(show) -> None:
    """The submissions that run here, those that need something first (an approach's
    training, a model's weights) and what; `--awaiting` lists the leaderboard entries still
    lacking their program files."""
    good, broken = bundles.scan()
    rows, counts = [], {"runnable": 0, "blocked": 0, "awaiting": 0}
    for name in sorted(good):
        b = good[name]
        if b.status != "ready":
            state, what = "awaiting", "lacks " + lacks(b.status, b.command, b.environment)
        elif (why := b.blocked()) is not None:
            state, what = "blocked", why
        else:
            state = "runnable"
            what = ", ".join(sorted(b.predictions)) if b.kind == "predictions" else "any set"
        counts[state] += 1
        shown = {None: ("runnable", "blocked"), "all": ("runnable", "blocked", "awaiting"),
                 "runnable": ("runnable",), "awaiting": ("awaiting",)}[show]
        if state in shown:
            rows.append((b.id, b.kind, state if state != "awaiting" else b.status, what))
    width = max([len(r[0]) for r in rows] + [len("id")])
    click.echo(f"{'id':<{width}} {'kind':<12} {'status':<17} runs on / needs")
    for row in rows:
        click.echo(f"{row[0]:<{width}} {row[1]:<12} {row[2]:<17} {row[3]}")
    for name in sorted(broken):
        click.echo(f"{name:<{width}} BROKEN: {broken[name]}")
    click.echo(f"{counts['runnable']} runnable here, {counts['blocked']} need something first, "
               f"{counts['awaiting']} waiting for program files"
               + (" (--awaiting lists them)" if show is None and counts["awaiting"] else "")
               + (f", {len(broken)} broken (qashift bundles show ID says why)" if broken else ""))


@bundles_group.command("import-leaderboard")
@click.option("--export", "export_path", type=click.Path(dir_okay=False, exists=True),
              help="the leaderboard export (default: squad-leaderboard/out-v1.1.json in the "
                   "data mirror)")
@click.option("--overwrite", is_flag=True, help="rewrite folders that already exist")
def bundles_import_leaderboard(export_path, overwrite) -> None:
    """Create a bundle folder per SQuAD v1.1 leaderboard entry, awaiting its program."""
    if export_path is None:
        candidates = [m / "squad-leaderboard" / "out-v1.1.json" for m in settings.mirror_dirs()]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise UserError("leaderboard export not found: pass --export PATH or --data-dir")
        export_path = found[0]
    written, kept = import_export(Path(export_path), settings.submissions_dir(), overwrite)
    click.echo(f"{written} bundle folders written, {kept} already present, under "
               f"{settings.submissions_dir()}")


@bundles_group.command("complete")
@click.argument("name")
@click.argument("program_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--command", "command", required=True,
              help="how the program runs, with {input} and {output}, e.g. "
                   "'python predict.py {input} {output}'")
@click.option("--image", help="its image, pinned by digest (name@sha256:...)")
@click.option("--dockerfile", help="a Dockerfile among the program files to build instead")
@click.option("--requirements", help="a pinned requirements file among the program files")
def bundles_complete(name, program_dir, command, image, dockerfile, requirements) -> None:
    """Make a waiting leaderboard bundle runnable from its CodaLab bundle's files."""
    folders = bundles.available()
    if name not in folders:
        raise unknown_name("bundle", name, folders)
    complete(folders[name], Path(program_dir), command, image=image, dockerfile=dockerfile,
             requirements=requirements)
    bundle = bundles.get(name)
    click.echo(f"{name} is ready: kind {bundle.kind}, digest {bundle.digest[:12]}")


@bundles_group.command("show")
@click.argument("name")
def bundles_show(name: str) -> None:
    b = bundles.get(name)
    click.echo(f"{'id':>16}: {b.id}\n{'name':>16}: {b.name}\n{'kind':>16}: {b.kind}\n"
               f"{'digest':>16}: {b.digest}")
    if b.command:
        click.echo(f"{'command':>16}: {b.command}")
    click.echo(f"{'resources':>16}: {b.resources}")
    if b.reference_scores:
        click.echo(f"{'reference':>16}: {b.reference_scores}")
    for k, v in b.metadata.items():
        click.echo(f"{k:>16}: {v}")


# results ---------------------------------------------------------------------
@main.group("results")
def results_group() -> None:
    """Inspect and export stored results."""


@results_group.command("list")
@click.option("--bundle", default=None)
@click.option("--testset", default=None)
@click.option("--failures", is_flag=True, help="list failed runs instead")
@click.option("--include-samples", is_flag=True,
              help="also the runs on a sample of questions (--limit, check), labelled")
def results_list(bundle, testset, failures, include_samples) -> None:
    """The result of every stored cell (its newest full run of the bundle as it is today),
    with the test set's digest; samples only when asked, and labelled."""
    store = Store.open_default()
    if not store.exists():
        raise UserError(f"no results store at {store.db_path}; run evaluate first")
    if failures:
        rows = store.failures()
        wb = max([len("bundle"), *(len(r["bundle"]) for r in rows)])
        wt = max([len("testset"), *(len(r["testset"]) for r in rows)])
        for f in rows:
            click.echo(f"{f['bundle']:<{wb}} {f['testset']:<{wt}} {f['failure_class']:<22} "
                       f"{f['message']}")
        return
    stored = store.results(bundle, testset)
    rows = sorted(latest(stored, digest_today=systems.digest_today(store)).values(),
                  key=lambda r: (r["bundle"], r["testset"]))
    if include_samples:
        rows += sorted((r for r in stored if is_sample(r)),
                       key=lambda r: (r["bundle"], r["testset"], r["created_at"]))
    wb = max([len("bundle"), *(len(r["bundle"]) for r in rows)])
    wt = max([len("testset"), *(len(r["testset"]) for r in rows)])
    click.echo(f"{'bundle':<{wb}} {'testset':<{wt}} {'n':>6} {'miss':>5} {'EM':>8} {'F1':>8}  "
               f"{'runner':<7} {'set sha256':<12} {'key':<12} run")
    present = set(testsets.available())
    for r in rows:
        kind = f"sample of {r['n']}" if is_sample(r) else "full"
        kind += "" if r["testset"] in present else ", its test-set folder is gone"
        click.echo(f"{r['bundle']:<{wb}} {r['testset']:<{wt}} {r['n']:>6} {r['missing']:>5} "
                   f"{r['em']:8.3f} {r['f1']:8.3f}  {r['runner']:<7} "
                   f"{r['testset_sha256'][:12]} {r['key'][:12]} {kind}")
    hidden = sum(1 for r in stored if is_sample(r))
    if hidden and not include_samples:
        console.say(f"{hidden} runs on samples of questions not shown (--include-samples)")


@results_group.command("export")
@click.argument("bundle")
@click.argument("testset")
@click.option("--out", type=click.Path(file_okay=False), default=".", show_default=True)
def results_export(bundle, testset, out) -> None:
    """Write a cell's predictions.json and per-question scores.csv to --out."""
    store = Store.open_default()
    row = _cell(store, bundle, testset)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions = store.get_object(row["predictions_sha256"])
    if predictions is None:
        raise UserError("stored predictions are missing or corrupt; re-run with --rerun")
    prefix = f"{bundle}.{testset}"
    (out_dir / f"{prefix}.predictions.json").write_bytes(predictions)
    write_csv_atomic(out_dir / f"{prefix}.scores.csv",
                     ["id", "em", "f1", "paragraph", "article", "missing"],
                     ({"id": u.id, "em": u.em, "f1": u.f1, "paragraph": u.paragraph,
                       "article": u.article, "missing": u.missing}
                      for u in load_units(store, row)))
    click.echo(f"wrote {out_dir / (prefix + '.predictions.json')} and "
               f"{out_dir / (prefix + '.scores.csv')}")


@results_group.command("samples")
@click.option("--bundle", "-b", "bundle_names", multiple=True, help="only these (repeatable)")
@click.option("--testset", "-t", "testset_names", multiple=True, help="only these (repeatable)")
@click.option("--out", type=click.Path(file_okay=False), required=True)
def results_samples(bundle_names, testset_names, out) -> None:
    """Per-question logs (JSONL, and Parquet with pyarrow) of every stored cell selected, as
    `evaluate --log-samples` writes them: the newest full result of each cell."""
    from analysis import strata  # lazy: reads the strata cache only
    from analysis.sources import latest_full_results  # lazy: pandas

    store = Store.open_default()
    if not store.exists():
        raise UserError(f"no results store at {store.db_path}; run evaluate first")
    rows = [r for r in latest_full_results(store)
            if (not bundle_names or r["bundle"] in bundle_names)
            and (not testset_names or r["testset"] in testset_names)]
    if not rows:
        raise UserError("no stored full result matches that selection")
    written = 0
    for r in sorted(rows, key=lambda r: (r["bundle"], r["testset"])):
        try:
            dataset = testsets.get(r["testset"]).load()
        except UserError as exc:
            console.warn(f"skipped {r['bundle']} x {r['testset']}: {exc}")
            continue
        if dataset.sha256 != r["testset_sha256"]:
            console.warn(f"skipped {r['bundle']} x {r['testset']}: the test set's file changed "
                         f"since that run")
            continue
        predictions = json.loads(store.get_object(r["predictions_sha256"]) or b"null")
        if not isinstance(predictions, dict):
            console.warn(f"skipped {r['bundle']} x {r['testset']}: stored predictions missing")
            continue
        for path in write_samples(dataset, predictions, Path(out), r["bundle"], r["testset"],
                                  strata.cached(dataset.sha256)):
            console.say(f"wrote {path}")
        written += 1
    click.echo(f"{written} cells written to {out}")


def _cell(store: Store, bundle: str, testset: str) -> dict:
    """The result of a cell (the one rule of store.queries); a one-line error without one,
    saying when only a sample of it is stored."""
    row = cell_result(store, bundle, testset, digest_today=systems.digest_today(store))
    if row is None:
        sample = cell_result(store, bundle, testset, samples=True)
        if sample is not None:
            raise UserError(f"only a sample of {sample['n']} questions of {bundle} x {testset} "
                            f"is stored (results list --include-samples); run evaluate for "
                            f"its result")
        raise UserError(f"no stored result for {bundle} x {testset}; run evaluate first")
    return row


@results_group.command("show")
@click.argument("bundle")
@click.argument("testset")
def results_show(bundle, testset) -> None:
    """A cell's latest stored result with its provenance (tool, commit, software, host)."""
    store = Store.open_default()
    row = _cell(store, bundle, testset)
    record = json.loads(row["run_record"])
    for key in ("bundle", "testset", "n", "missing", "em", "f1", "scorer_version", "runner",
                "device", "wall_s", "key", "bundle_digest", "testset_sha256"):
        click.echo(f"{key:>16}: {row[key]}")
    prov = record.get("details", {}).get("provenance")
    if not prov:
        click.echo(f"{'provenance':>16}: not recorded (stored by an older version)")
        return
    for key, value in prov.items():
        if key == "packages":
            value = ", ".join(f"{k} {v}" for k, v in value.items() if v)
        click.echo(f"{key:>16}: {value}")


@results_group.command("log")
@click.argument("bundle")
@click.argument("testset")
def results_log(bundle, testset) -> None:
    """Print the captured log of a cell's last run (finished or failed)."""
    store = Store.open_default()
    candidates = [(r["created_at"], r["log_sha256"]) for r in store.results(bundle, testset)]
    candidates += [(f["created_at"], f["log_sha256"]) for f in store.failures()
                   if f["bundle"] == bundle and f["testset"] == testset]
    if not candidates:
        raise UserError(f"no run of {bundle} x {testset} in {store.db_path}")
    _, sha = max(candidates, key=lambda c: c[0])
    data = store.get_object(sha) if sha else b""
    click.echo((data or b"(no output captured)").decode("utf-8", errors="replace"))



if __name__ == "__main__":
    main()
