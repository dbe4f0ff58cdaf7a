"""`meshplan detect`: describe this machine as a cluster profile (GPUs via nvidia-smi, else CPU processes).

meshplan detect                       # print what was found
meshplan detect --out mybox.yaml      # write it as a cluster profile: meshplan topology mybox.yaml
meshplan detect --json mybox.json     # the resolved cluster as JSON
"""

from __future__ import annotations

from pathlib import Path

import typer

from planner.cli.app import abort, app, err, out
from planner.cli.options import emit_json
from planner.errors import UserError


def spec_yaml(spec) -> str:  # noqa: ANN001 - hardware_profiles.ClusterSpec
    """The profile as YAML, fields in reading order (sources last)."""
    import yaml

    data = spec.model_dump(mode="json", exclude_unset=True)
    sources = data.pop("sources")
    data["sources"] = sources
    return "# Written by meshplan detect; edit freely (every number needs a source entry).\n" + yaml.safe_dump(data, sort_keys=False, width=110)


@app.command("detect")
def detect_command(
    out_file: str = typer.Option(None, "--out", metavar="FILE", help="Write the cluster profile YAML here."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the resolved cluster as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
    name: str = typer.Option("detected", "--name", help="Name of the written profile."),
    gpu: str = typer.Option(None, "--gpu", help="GPU profile to use instead of the one nvidia-smi names."),
    nic_link: str = typer.Option(None, "--nic-link", help="Link profile of the NICs when their speed cannot be read."),
    devices: int = typer.Option(None, "--devices", min=1, help="CPU processes when no GPU is found (default: CPU count)."),
    topo_file: str = typer.Option(None, "--topo-file", hidden=True, help="Read `nvidia-smi topo -m` output from a file."),
) -> None:
    """Detect the local machine (GPUs, NVLink, PCIe, NICs) and describe it as a cluster profile."""
    import hardware_profiles as hp
    from planner.io import check_targets, write_text_atomic
    from planner.topology.detect import detect_local

    try:
        check_targets(out_file, json_out, force=force)  # both or neither, before any work
        if nic_link is not None:
            hp.link(nic_link)
        text = None
        if topo_file is not None:
            try:
                text = Path(topo_file).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise UserError(f"cannot read ({exc.strerror})", where=f"--topo-file {topo_file}", fix="give an existing file") from None
        found = detect_local(topo_text=text, gpu=gpu, nic_link=nic_link, devices=devices, name=name)
        yaml_text = spec_yaml(found.spec)
        if out_file is not None:
            write_text_atomic(Path(out_file), yaml_text, force=force)
            err.print(f"wrote {out_file}", markup=False)
        if json_out is not None:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"{name}.yaml"
                path.write_text(yaml_text, encoding="utf-8")
                cluster = hp.cluster(str(path))
            if emit_json(cluster.model_dump_json(indent=2), json_out, force=force):
                return
    except (UserError, hp.ProfileError) as exc:
        abort(str(exc))
    node = found.spec.node_groups[0].node
    out.print(f"method: {found.method}", markup=False)
    out.print(found.spec.description, markup=False)
    parts = [f"{node.gpus} x {node.gpu}", f"scale-up: {node.scaleup_link or 'none (PCIe)'}"]
    if node.pcie_link:
        parts.append(f"PCIe: {node.pcie_link}, {node.gpus_per_pcie_switch} GPU(s) per switch")
    parts.append(f"NICs: {node.nics} x {node.nic_link}" if node.nics else "NICs: none")
    out.print("; ".join(parts), markup=False)
    if out_file is None and json_out is None:
        out.print(yaml_text, markup=False, highlight=False)
