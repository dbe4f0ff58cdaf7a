"""`meshplan profiles`: the built-in GPUs, links, clusters (and model presets) as tables or JSON.

meshplan profiles
meshplan profiles --json profiles.json
"""

from __future__ import annotations

import json

import typer
from rich.table import Table

from planner.cli.app import abort, app, out
from planner.cli.options import emit_json
from planner.errors import UserError


def _model_presets() -> list[str]:
    """Model preset names, if planner.model offers them (it is developed alongside)."""
    try:
        from planner.model import list_presets
    except ImportError:
        return []
    return list(list_presets())


def collect() -> dict:
    """Every built-in profile as plain data (the --json document)."""
    import hardware_profiles as hp

    clusters = {}
    for name in hp.list_clusters():
        spec, _ = hp.cluster_spec(name)
        clusters[name] = spec.model_dump(mode="json")
    return {
        "gpus": {n: hp.gpu(n).model_dump(mode="json") for n in hp.list_gpus()},
        "links": {n: hp.link(n).model_dump(mode="json") for n in hp.list_links()},
        "clusters": clusters,
        "models": _model_presets(),
    }


def _gpu_table(gpus: dict) -> Table:
    t = Table(title="GPUs", title_justify="left")
    for col in ("name", "memory GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "GEMM eff.", "NVLink GB/s/dir", "PCIe GB/s/dir"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for name, g in gpus.items():
        pf = g["peak_flops"]
        t.add_row(name, f"{g['memory_bytes'] / 2**30:.1f}", f"{g['memory_bandwidth_Bps'] / 1e12:.2f}",
                  f"{pf['bf16'] / 1e12:.1f}", f"{pf['fp8'] / 1e12:.0f}" if "fp8" in pf else "-",
                  f"{g['matmul_efficiency']['max_fraction']:.2f}", f"{g['nvlink_bandwidth_Bps'] / 1e9:.0f}",
                  f"{g['pcie_bandwidth_Bps'] / 1e9:.1f}")
    return t


def _link_table(links: dict) -> Table:
    t = Table(title="Links", title_justify="left")
    for col in ("name", "kind", "GB/s per direction", "step latency us"):
        t.add_column(col, justify="left" if col in ("name", "kind") else "right")
    for name, lk in links.items():
        t.add_row(name, lk["kind"], f"{lk['bandwidth_Bps'] / 1e9:.3g}", f"{lk['latency_s'] * 1e6:.3g}")
    return t


def _cluster_table(clusters: dict) -> Table:
    t = Table(title="Clusters", title_justify="left")
    for col in ("name", "default nodes", "node shapes", "network"):
        t.add_column(col)
    for name, c in clusters.items():
        shapes = ", ".join(f"{g['node']['gpus']}x {g['node']['gpu']}" + (f" ({g['node']['scaleup_link']})" if g['node'].get("scaleup_link") else "")
                           for g in c["node_groups"])
        net = c.get("network")
        tiers = " / ".join(f"{lv['name']}" + (f" {lv['oversubscription']:g}:1" if lv["oversubscription"] != 1 else "") for lv in net["levels"]) if net else "-"
        if c.get("nvlink_domain"):
            tiers = f"NVLink domain of {c['nvlink_domain']['hosts']} hosts; " + tiers
        t.add_row(name, str(c["default_nodes"]), shapes, tiers)
    return t


@app.command("profiles")
def profiles_command(
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write every profile as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file if it exists."),
) -> None:
    """List the built-in GPU, link and cluster profiles (and model presets)."""
    import hardware_profiles as hp
    from planner.io import check_targets

    try:
        check_targets(json_out, force=force)
        data = collect()
        if emit_json(json.dumps(data, indent=2), json_out, force=force):
            return
    except (UserError, hp.ProfileError) as exc:
        abort(str(exc))
    out.print(_gpu_table(data["gpus"]))
    out.print(_link_table(data["links"]))
    out.print(_cluster_table(data["clusters"]))
    if data["models"]:
        out.print("Models: " + ", ".join(data["models"]), markup=False)
