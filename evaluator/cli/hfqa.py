"""`bundles export-onnx`: a Transformers checkpoint's ONNX export, checked against PyTorch.

Loaded lazily by the `bundles` group (evaluator.cli.bundles); heavy modules are imported
inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click

from evaluator.bundles import spec as bundles
from evaluator.core.errors import UserError
from evaluator.data import testsets


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
    from evaluator.runners.onnx_export import export  # lazy: numpy; --help stays fast
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
