"""Load profiles by name (the data folder) or by path (a user's YAML), and resolve cluster sizes.

Any name argument that is an existing file, or ends with .yaml/.yml, is read as a file; otherwise it is
looked up in `hardware_profiles/data/<kind>/<name>.yaml`. Loading is `yaml.safe_load` (through
`hardware_profiles.reader`, which bounds size and nesting) then `model_validate`; every failure is a one-line `ProfileError` (file, field, bad value, allowed values).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from hardware_profiles.cluster import Cluster, HostGroup
from hardware_profiles.cluster_schema import ClusterSpec
from hardware_profiles.errors import ProfileError, format_validation_error
from hardware_profiles.reader import InputFileError, read_yaml
from hardware_profiles.schema import GPUProfile, LinkProfile
from hardware_profiles.sizing import cluster_size, shared_memory, split_hosts

DATA_DIR = Path(__file__).parent / "data"
M = TypeVar("M", bound=BaseModel)


def _names(kind: str) -> list[str]:
    return sorted(p.stem for p in (DATA_DIR / kind).glob("*.yaml"))


def list_gpus() -> list[str]:
    """Names of the built-in GPU profiles."""
    return _names("gpus")


def list_links() -> list[str]:
    """Names of the built-in link profiles."""
    return _names("links")


def list_clusters() -> list[str]:
    """Names of the built-in cluster profiles."""
    return _names("clusters")


def _is_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or Path(name).is_file()


def _locate(kind: str, name: str, *, base: Path | None = None, where: str | None = None) -> Path:
    """Path of profile `name` of `kind` ('gpus', 'links', 'clusters')."""
    if not isinstance(name, str) or not name:
        raise ProfileError(f"bad {kind[:-1]} name {name!r}", where=where, allowed=", ".join(_names(kind)))
    if _is_path(name):
        path = Path(name)
        if not path.is_absolute() and base is not None and not path.exists():
            path = base / path
        if not path.exists():  # a folder or special file is named by the reader (`hardware_profiles.reader`)
            raise ProfileError(f"file {name!r} not found", where=where, allowed="an existing .yaml file")
        return path
    path = DATA_DIR / kind / f"{name}.yaml"
    if not path.is_file():
        raise ProfileError(
            f"unknown {kind[:-1]} name {name!r}", where=where, allowed=", ".join(_names(kind)) + " or a .yaml path"
        )
    return path


def _read(path: Path, model: type[M]) -> M:
    """The validated profile in `path`; cached per file version (an edited file is read again)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ProfileError(f"cannot read YAML ({exc.strerror})", where=str(path)) from None
    return _read_version(path, stat.st_mtime_ns, stat.st_size, model)


@lru_cache(maxsize=256)
def _read_version(path: Path, mtime_ns: int, size: int, model: type[M]) -> M:
    like = {GPUProfile: "gpus/cpu.yaml", LinkProfile: "links/loopback-gloo.yaml"}.get(model, "clusters/local-cpu.yaml")
    example = f"a UTF-8 YAML mapping of fields like {DATA_DIR / like}"
    try:
        data = read_yaml(path, what="YAML profile")
    except InputFileError as exc:
        raise ProfileError(exc.problem, where=exc.where, allowed=example) from None
    if not isinstance(data, dict):
        raise ProfileError(f"expected a mapping of fields at the top level, found {type(data).__name__}",
                           where=str(path), allowed=example)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(format_validation_error(exc, str(path), model)) from None


def gpu(name: str) -> GPUProfile:
    """The GPU profile `name` (built-in name or YAML path)."""
    return _read(_locate("gpus", name).resolve(), GPUProfile)


def link(name: str) -> LinkProfile:
    """The link profile `name` (built-in name or YAML path)."""
    return _read(_locate("links", name).resolve(), LinkProfile)


def cluster_spec(name: str) -> tuple[ClusterSpec, Path]:
    """The cluster file `name` as written (no sizes resolved), with its path."""
    path = _locate("clusters", name).resolve()
    return _read(path, ClusterSpec), path


def _check_names(spec: ClusterSpec, path: Path) -> tuple[dict[str, GPUProfile], dict[str, LinkProfile]]:
    """Load every profile the spec names; an unknown one is an error naming its field."""
    base = path.parent
    gpus: dict[str, GPUProfile] = {}
    links: dict[str, LinkProfile] = {}
    fields: list[tuple[str, str]] = []
    for i, g in enumerate(spec.node_groups):
        gpus[g.node.gpu] = _read(_locate("gpus", g.node.gpu, base=base, where=f"{path}: field 'node_groups.{i}.node.gpu'").resolve(), GPUProfile)
        for f in ("scaleup_link", "pcie_link", "nic_link"):
            if getattr(g.node, f) is not None:
                fields.append((f"node_groups.{i}.node.{f}", getattr(g.node, f)))
    for i, lvl in enumerate(spec.network.levels if spec.network else []):
        fields.append((f"network.levels.{i}.link", lvl.link))
    if spec.nvlink_domain is not None:
        fields.append(("nvlink_domain.link", spec.nvlink_domain.link))
    for field, name in fields:
        links[name] = _read(_locate("links", name, base=base, where=f"{path}: field '{field}'").resolve(), LinkProfile)
    return gpus, links


def cluster(name_or_path: str | Cluster, *, nodes: int | None = None, gpus: int | None = None) -> Cluster:
    """A concrete cluster: `nodes=N` hosts, or `gpus=N` GPUs on as few hosts as possible (evenly).

    Without either, the profile's `default_nodes`. Heterogeneous profiles split N hosts over their node
    groups by weight (largest remainder; see `NodeGroup.weight`). Given a resolved `Cluster` (the one a plan
    embeds) instead of a name, resizes that one from its own content (`hardware_profiles.resize`).
    """
    if isinstance(name_or_path, Cluster):
        from hardware_profiles.resize import resized

        return resized(name_or_path, nodes=nodes, gpus=gpus)
    spec, path = cluster_spec(name_or_path)
    builtin = path.parent == (DATA_DIR / "clusters").resolve()
    where = f"cluster {spec.name!r}" if builtin else str(path)
    hosts, per_host = cluster_size(spec, where, nodes, gpus)
    gpu_profiles, links = _check_names(spec, path)
    counts = split_hosts(spec.node_groups, hosts)
    groups = [HostGroup(node=g.node, hosts=c, gpus_per_host=per_host) for g, c in zip(spec.node_groups, counts, strict=True) if c]
    for g in groups:
        if g.node.virtual_devices:
            gpu_profiles[g.node.gpu] = shared_memory(gpu_profiles[g.node.gpu], per_host)
    used = {g.node.gpu for g in groups}
    return Cluster(
        name=spec.name,
        description=spec.description,
        origin=f"builtin:{spec.name}" if builtin else str(path),
        host_groups=groups,
        gpus={k: v for k, v in gpu_profiles.items() if k in used},
        links=links,
        network=spec.network,
        nvlink_domain=spec.nvlink_domain,
        sources=spec.sources,
    )
