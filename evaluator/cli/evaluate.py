"""`evaluate` (the main job), `qashift run` (a config file) and `qashift check` (a bundle on a
few questions): all three assemble an EvaluationConfig and call the one entry, `api.evaluate`.

Only what a cached `evaluate` needs is imported here; the analysis (pandas, matplotlib) only
for --output-path and --log-samples.
"""

from __future__ import annotations

import difflib
import json
import os
import platform
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

import click
import yaml

from evaluator import __version__
from evaluator.api import evaluation
from evaluator.api.evaluation import EvaluationConfig
from evaluator.cli.base import (
    Command,
    RunnerChoice,
    configure,
    console_options,
    settings_options,
)
from evaluator.core import console, settings
from evaluator.core.errors import FAILURE_CLASSES, UserError
from evaluator.core.files import check_output_path, write_json_atomic
from evaluator.core.folders import read_yaml
from evaluator.core.provenance import cpu, software
from evaluator.pipeline.samples import write_samples
from evaluator.stats.intervals import level_text
from evaluator.store.store import Store

LEVEL_HELP = "confidence level of the intervals (default 0.95)"
UNDER_OUTPUT = ":output-path:"  # a bare --log-samples: the samples/ of --output-path


def _fmt_interval(iv: dict) -> str:
    if iv["lo"] is None:  # no interval exists (see the note under the table)
        return f"{iv['value']:7.3f} [{'-':>6}, {'-':>6}]"
    return f"{iv['value']:7.3f} [{iv['lo']:6.2f}, {iv['hi']:6.2f}]"


def _print_not_applicable(skipped: list[tuple[str, str, str]]) -> None:
    """Each cell when few; otherwise a count per bundle and reason (--json lists every
    cell)."""
    if len(skipped) <= 12:
        for b, t, r in skipped:
            click.echo(f"not applicable: {b} x {t}: {r}")
        return
    reasons: dict[tuple[str, str], int] = {}
    for b, _, r in skipped:
        reasons[b, r] = reasons.get((b, r), 0) + 1
    for (bundle, reason), count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        click.echo(f"not applicable: {bundle} on {count} set{'s' * (count != 1)}: {reason}")


def print_results(results: list[dict]) -> None:
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
    click.echo(f"({level_text(first['em']['level'])} intervals: EM {first['em']['method']}, "
               f"F1 {first['f1']['method']})")
    sampled = sorted({r["testset"] for r in results if "limit" in r})
    if sampled:
        limit = next(r["limit"] for r in results if "limit" in r)
        click.echo(f"(--limit {limit}: a sample of {', '.join(sampled)}; not comparable with "
                   f"full runs)")
    lone = sorted({r["testset"] for r in results if r["f1"]["lo"] is None})
    if lone:
        click.echo(f"(-: no interval on {', '.join(lone)}: one question, one cluster where a "
                   f"clustered interval needs two or more, or no spread to estimate one from)")


# A config file (`--config`, `qashift run`) uses the flags' names: key -> parameter.
CONFIG_KEYS = {"bundles": "bundle_names", "testsets": "testset_names", "level": "level",
               "model_args": "model_args",
               "cluster": "cluster", "rerun": "rerun", "runner": "runner",
               "partition": "partition", "account": "account", "device": "device",
               "data_dir": "data_dir", "workspace": "workspace", "jobs": "parallel",
               "json": "as_json", "limit": "limit", "seed": "seed",
               "log_samples": "samples_dir", "output_path": "output_path",
               "templates": "templates"}
LISTS = ("bundle_names", "testset_names", "data_dir", "templates")


def _read_config(ctx: click.Context, param: click.Parameter, value: str | None):
    """Load a config file into the command's defaults; flags given still win."""
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
    params = {p.name: p for p in ctx.command.params}
    for key, value_ in data.items():
        name = CONFIG_KEYS[key]
        if value_ is None:  # `key: null` is the key left out; a required one must be given
            if params[name].required:
                raise UserError(f"{path}: {key}: has no value (give one or more)")
            continue
        if name == "model_args":  # a mapping, or the flag's KEY=VALUE,... text
            if isinstance(value_, dict):
                value_ = _model_args_text(value_, f"{path}: {key}")
            try:
                _parse_model_args(value_ if isinstance(value_, str) else None)
            except UserError as exc:
                raise UserError(f"{path}: {key}: {str(exc).removeprefix('--model-args: ')}"
                                ) from None
        if name in LISTS and not isinstance(value_, list):
            value_ = [value_]
        paths = name in ("data_dir", "workspace", "samples_dir", "output_path")
        try:  # checked here, so that a bad value is said to come from the file
            if paths and not all(isinstance(v, str) for v in
                                 (value_ if name in LISTS else [value_])):
                raise TypeError
            params[name].type_cast_value(ctx, value_)
        except click.BadParameter as exc:
            raise UserError(f"{path}: {key}: {exc.message}") from None
        except (TypeError, ValueError):  # a YAML list or mapping where a scalar belongs
            raise UserError(f"{path}: {key}: {value_!r} is not a valid "
                            f"{params[name].type.name}") from None
        if paths and value_:
            # paths in a config file are relative to the file, not to where it is run from
            value_ = ([str((path.parent / v).resolve()) for v in value_] if name in LISTS
                      else str((path.parent / value_).resolve()))
        defaults[name] = value_
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


@click.command("evaluate", cls=Command)
@click.version_option(__version__, prog_name="qashift")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), is_eager=True,
              expose_value=False, callback=_read_config,
              help="a config file (YAML): the same keys as the flags (bundles, testsets, "
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
              type=RunnerChoice(),
              help="how command and hf-qa bundles run; auto = docker when a daemon answers; "
                   "slurm = one Slurm job per cell (docs/slurm.md)")
@click.option("--partition", default=None, help="Slurm partition (--runner slurm)")
@click.option("--account", default=None, help="Slurm account (--runner slurm)")
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "gpu"]),
              help="auto = a GPU where the bundle asks for one (resources.gpus; hf-qa: where "
                   "CUDA is visible); cpu = none; gpu = at least one")
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
              is_flag=False, flag_value=UNDER_OUTPUT,
              help="write one JSON line per question of every cell (question, gold answers, "
                   "prediction, EM, F1) to this folder; bare, with --output-path: to its "
                   "samples/")
@click.option("--model-args", "model_args", default=None, metavar="KEY=VALUE,...",
              help="hf-qa run settings for this run: batch_size, max_seq_len, doc_stride, "
                   "max_answer_len, onnx (true|false|int8); they enter the cell key")
@click.option("--output-path", "output_path", type=click.Path(file_okay=False), default=None,
              help="write the study's results.json, per-question logs (samples/) and "
                   "figures (figures/) here")
@click.option("--template", "templates", multiple=True,
              help="a prompt template for generative bundles (repeatable): each runs under "
                   "every template given, and the spread of its scores is reported")
@console_options
@click.pass_context
def evaluate_cmd(ctx: click.Context, bundle_names, testset_names, level, cluster, rerun,
                 runner, partition, account, device, data_dir, workspace, parallel,
                 as_json, limit, seed, samples_dir, model_args, output_path,
                 templates) -> None:
    """Score submissions on test sets with official SQuAD v1.1 EM/F1 and intervals."""
    if samples_dir == UNDER_OUTPUT and not output_path:
        raise UserError("--log-samples without a folder writes under --output-path; give one "
                        "of them a folder")
    configure(data_dir, workspace)
    if output_path and samples_dir in (None, UNDER_OUTPUT):
        samples_dir = str(Path(output_path) / "samples")
    _check_outputs(output_path, samples_dir)
    config = EvaluationConfig(
        bundles=tuple(bundle_names), testsets=tuple(testset_names), runner=runner, level=level,
        cluster=cluster, rerun=rerun, device=device, parallel=parallel, limit=limit, seed=seed,
        model_args=_parse_model_args(model_args), partition=partition, account=account,
        templates=tuple(templates))
    store = Store.open_default()
    done = evaluation.evaluate(config, store, progress=console.say, started=console.say,
                               warn=console.warn)
    report, skipped = done.report, done.not_applicable
    results = [o.result.to_dict() for o in report.outcomes if o.result is not None]
    failed = [{"bundle": o.job.bundle.id, "testset": o.job.testset.id,
               "failure_class": o.failure_class, "message": o.message} for o in report.failed]
    not_applicable = [{"bundle": b, "testset": t, "reason": r} for b, t, r in skipped]
    writes = []  # each tried, whatever the other did: the cells are stored either way
    if samples_dir:
        writes.append(lambda: _write_samples(report, Path(samples_dir)))
    if output_path:
        writes.append(lambda: _write_study(Path(output_path), {
            "config": {**config.as_dict(), "workspace": str(settings.current().workspace)},
            "provenance": {**software(), "host": socket.gethostname(),
                           "platform": platform.platform(), "cpu": cpu(),
                           "date": datetime.now(UTC).isoformat()},
            "results": results, "failed": failed, "not_applicable": not_applicable},
            store, level))
    unwritten = []
    for write in writes:
        try:
            write()
        except OSError as exc:
            unwritten.append(f"writing {exc.filename or 'the outputs'} failed: "
                             f"{exc.strerror or exc}")
    spread = done.prompt_spread()
    if as_json:
        click.echo(json.dumps({"results": results, "failed": failed,
                               "not_applicable": not_applicable,
                               **({"prompt_spread": spread} if templates else {})}, indent=2))
    else:
        print_results(results)
        _print_not_applicable(skipped)
        for s in spread:
            f1 = s["f1"]
            click.echo(f"{s['bundle']} on {s['testset']}: F1 {f1['mean']:.2f} across "
                       f"{f1['n']} templates (sd {f1['sd']:.2f}, range {f1['min']:.2f} to "
                       f"{f1['max']:.2f})")
    for f in failed:
        console.error(f"{f['bundle']} x {f['testset']} failed ({f['failure_class']}): "
                      f"{f['message']}")
    for problem in unwritten:
        console.error(f"the results are stored, but {problem}")
    ctx.exit(1 if failed or unwritten else 0)


def _write_samples(report, folder: Path) -> None:
    """--log-samples: one line per question of every scored cell."""
    from analysis.sources import strata  # lazy: only --log-samples reads the strata cache

    for o in report.outcomes:
        if o.result is not None:
            predictions = json.loads(o.result.predictions_path.read_bytes())
            dataset = o.job.dataset()
            for path in write_samples(dataset, predictions, folder, o.job.bundle.id,
                                      o.job.testset.id, strata.cached(dataset.sha256)):
                console.say(f"wrote {path}")


def _check_outputs(output_path: str | None, samples_dir: str | None) -> None:
    """Say now, not after every cell has run, that a folder the outputs go to may not be
    written: each folder written into (the figures/ and samples/ of --output-path too, a
    link there would take the files elsewhere) passes the output rule and can be written."""
    folders = [("--log-samples", samples_dir)] if samples_dir else []
    if output_path:
        folders = [("--output-path", output_path),
                   ("--output-path", str(Path(output_path) / "figures")), *folders]
    for flag, folder in folders:
        _writable_folder(flag, check_output_path(Path(folder), what=flag, folder=True))


def _writable_folder(flag: str, folder: Path) -> None:
    """Say in one line, before anything runs, that `folder` cannot be written to: its
    nearest existing part is a file, or not writable. Nothing is created yet."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{flag} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {folder}: cannot write in {existing} (permission denied)")


def _model_args_text(mapping: dict, where: str) -> str:
    """A config file's `model_args:` mapping as the flag's `KEY=VALUE,...` text, each value
    written as YAML so that it reads back as the same value (1.0e-05, .inf, true)."""
    items = []
    for key, value in mapping.items():
        text = yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]
        if not isinstance(key, str) or "=" in key or "," in key or \
                isinstance(value, (dict, list)) or "," in text:
            raise UserError(f"{where}: {key}: {value!r} is not a single value without commas")
        items.append(f"{key}={text}")
    return ",".join(items)


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
    from analysis import report  # lazy: pandas, matplotlib; only --output-path
    from analysis.sources import store_records_of, tidy  # lazy: as above

    write_json_atomic(out / "results.json", document)
    console.say(f"wrote {out / 'results.json'}")
    cells = {(r["bundle"], r["testset"]) for r in document["results"] if "limit" not in r}
    records = [r for r in store_records_of(store) if (r["bundle"], r["testset"]) in cells]
    try:
        written = report.regenerate(tidy.from_records(records), out / "figures", n_boot=200)
        console.say(f"wrote {len(written)} figures and tables to {out / 'figures'}")
    except (ValueError, KeyError) as exc:
        console.warn(f"no figures for this study: {exc}")


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run_command(ctx: click.Context, config, flags) -> None:
    """Run a config file: `evaluate --config CONFIG [FLAGS...]` (flags given win over the
    file). The one command that reproduces a study."""
    # `evaluate` runs in the group's context, in place of this command, not afresh: it then
    # keeps the group's console settings (`qashift -q/-v/--log-file run ...`, in ctx.meta)
    with evaluate_cmd.make_context(ctx.info_name, ["--config", config, *flags],
                                   parent=ctx.parent) as sub:
        evaluate_cmd.invoke(sub)


@click.command("check")
@click.option("--bundle", "-b", "bundle_name", required=True, help="bundle or system id")
@click.option("--testset", "-t", "testset_name", default="squad-dev", show_default=True)
@click.option("--questions", "-n", type=click.IntRange(1), default=20, show_default=True)
@click.option("--runner", default="auto", show_default=True,
              type=RunnerChoice())
@settings_options
def check_command(bundle_name, testset_name, questions, runner, data_dir, workspace) -> None:
    """Run a bundle on a few questions, in its sandbox, and say what would fail before a
    full run (the sample is stored apart, never mixed with full results)."""
    configure(data_dir, workspace)
    config = EvaluationConfig(bundles=(bundle_name,), testsets=(testset_name,), runner=runner,
                              rerun=True, limit=questions, seed=0, check=True)
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
