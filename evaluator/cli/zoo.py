"""Commands for Transformers submissions: `bundles export-onnx` and the `zoo` group.

Registered on the `qashift` group by evaluator.cli.main (`bundles_group.add_command(export_onnx)`,
`main.add_command(zoo_group)`). Heavy modules are imported inside the commands.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import click

from evaluator.bundles import spec as bundles
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.store.store import Store


@click.command("export-onnx")
@click.argument("bundle")
@click.option("--int8", is_flag=True, help="also write a dynamic int8 quantisation")
@click.option("--sample", default=200, show_default=True,
              help="squad-dev questions on which ONNX answers must equal PyTorch's")
@click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
              help="local mirror of public data (for the check sample)")
def export_onnx(bundle: str, int8: bool, sample: int, data_dir: tuple[str, ...]) -> None:
    """Export an hf-qa BUNDLE's checkpoint to ONNX next to its weights, and check it."""
    from evaluator.runners.hfqa import model_spec  # lazy: numpy; --help stays fast
    from evaluator.zoo.onnx_export import export  # lazy: numpy; --help stays fast
    found = bundles.get(bundle)
    if found.kind != "hf-qa":
        raise UserError(f"{bundle} is a {found.kind} bundle; only hf-qa bundles have a "
                        f"checkpoint to export")
    spec = model_spec(found)
    if not (spec.directory / "config.json").is_file():
        raise UserError(f"{bundle}: no checkpoint at {spec.directory}")
    mirrors = [Path(d).resolve() for d in data_dir] or None
    raw = testsets.get("squad-dev").load(mirrors).raw if sample > 0 else None
    report = export(spec.directory, int8=int8, sample=raw, sample_size=sample)
    click.echo(f"wrote {report.onnx}" + (f" and {report.int8}" if report.int8 else ""))
    if report.agreement is not None:
        click.echo(f"answers equal to PyTorch on {report.agreement:.1%} of "
                   f"{report.sample_questions} squad-dev questions (fp32)"
                   + (f", {report.int8_agreement:.1%} (int8)" if report.int8 else ""))


@click.group("zoo")
def zoo_group() -> None:
    """Our own model zoo: MiniLM QA models trained on half of SQuAD dev."""


@zoo_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def zoo_list(as_json: bool) -> None:
    """Recipes, and whether each model is built (weights cached) and has a bundle."""
    from evaluator.zoo import models as zoo  # lazy: numpy; --help stays fast

    rows = []
    for recipe in zoo.RECIPES:
        meta_path = zoo.model_dir(recipe.name) / "training.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        bundle = settings.submissions_dir() / f"zoo-{recipe.name}" / "bundle.yaml"
        rows.append({**asdict(recipe), "built": bool(meta), "bundle": bundle.exists(),
                     "training_seconds": meta.get("training_seconds"),
                     "train_features": meta.get("train_features")})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'model':<16} {'layers':>6} {'questions':>9} {'epochs':>6} {'seq':>4} "
               f"{'seed':>4}  {'built':<5} {'bundle':<6} train_s")
    for r in rows:
        click.echo(f"{r['name']:<16} {r['layers']:>6} {r['questions'] or 'all':>9} "
                   f"{r['epochs']:>6g} {r['max_seq_len']:>4} {r['seed']:>4}  "
                   f"{'yes' if r['built'] else 'no':<5} {'yes' if r['bundle'] else 'no':<6} "
                   f"{r['training_seconds'] or ''}")


@zoo_group.command("build")
@click.argument("name", default="all")
@click.option("--device", default="auto", type=click.Choice(["auto", "cpu", "cuda"]),
              help="cuda when available under auto")
@click.option("--force", is_flag=True, help="retrain even if the weights are cached")
@click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
              help="local mirror of public data (SQuAD dev)")
def zoo_build(name: str, device: str, force: bool, data_dir: tuple[str, ...]) -> None:
    """Train NAME (or all) with its fixed seed into the cache; write submissions/zoo-NAME."""
    from evaluator.zoo import models as zoo  # lazy: numpy; --help stays fast

    if device == "auto":
        import torch  # lazy: heavy, for model code only

        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = zoo.recipes(name)
    mirrors = [Path(d).resolve() for d in data_dir] or None
    raw = testsets.get("squad-dev").load(mirrors).raw
    for recipe in chosen:
        folder = zoo.build(recipe, raw, device=device, force=force,
                           log=console.say)
        click.echo(f"{recipe.name}: {folder / 'bundle.yaml'}")


@zoo_group.command("scores")
@click.option("--out", default=None, help="default: zoo/scores.csv in the repository")
@click.option("--workspace", default=None, help="results store (default $QASHIFT_WORKSPACE)")
def zoo_scores(out: str | None, workspace: str | None) -> None:
    """Write the zoo's stored cells (bundle and test-set digests, EM/F1, intervals, device,
    commit) to a CSV that is committed, so zoo figures need no model runs."""
    from evaluator.zoo import models as zoo  # lazy: numpy; --help stays fast

    store = Store(Path(workspace).resolve() if workspace else settings.workspace_dir())
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=settings.REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    rows = zoo.score_rows(store.results(), commit)
    if not rows:
        raise UserError("no zoo results in the store yet: evaluate -b zoo-... first")
    target = Path(out) if out else settings.REPO_ROOT / "zoo" / "scores.csv"
    zoo.write_scores(rows, target)
    click.echo(f"wrote {len(rows)} cells to {target}")
