"""Detect the local machine as a cluster profile: NVIDIA GPUs via `nvidia-smi topo -m`, else CPU processes.

`parse_nvidia_smi_topo(text)` reads the matrix nvidia-smi prints (GPU/NIC rows and columns, connection codes
X, NV#, PIX, PXB, PHB, NODE, SYS, the CPU/NUMA affinity columns and the NIC legend). `spec_from_topo`
turns it into a one-host `ClusterSpec`: NV# between every GPU pair means an NVSwitch fabric; GPUs joined by
PIX/PXB share a PCIe switch; each GPU's NIC is its closest one (PIX < PXB < PHB < NODE < SYS), and NICs no
GPU is closest to (storage ports) are left out. NIC speed comes from /sys/class/infiniband when present,
else from `nic_link` (an assumption recorded in the profile's sources).
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import hardware_profiles as hp
from planner.errors import UserError

# Closeness of a PCIe path, best first (nvidia-smi topo -m legend). SOC is the pre-2017 name of SYS.
PCIE_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "SOC": 4}
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|mlx5_\w+|bnxt\w*|ib\w+)$")
_MULTIWORD = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

# nvidia-smi --query-gpu=name -> profile; first match wins (more specific patterns first).
GPU_NAMES = [
    (r"GB200", "gb200"), (r"B200", "b200"), (r"H200", "h200"), (r"H800", "h800"),
    (r"H100.*PCIe", "h100-pcie"), (r"H100", "h100-sxm"), (r"A100.*40GB", "a100-40gb"), (r"A100", "a100-80gb"),
    (r"L40S", "l40s"), (r"MI300X", "mi300x"),
]
# Fabric defaults by GPU profile when nothing better is known (recorded as assumptions).
SCALEUP = {"a100-40gb": "nvlink3", "a100-80gb": "nvlink3", "h100-sxm": "nvlink4", "h800": "nvlink4", "h200": "nvlink4",
           "b200": "nvlink5", "gb200": "nvlink5"}
PCIE = {"a100-40gb": "pcie-gen4", "a100-80gb": "pcie-gen4", "l40s": "pcie-gen4"}
NIC = {"a100-40gb": "ib-hdr", "a100-80gb": "ib-hdr", "l40s": "ethernet-100g"}
RATE_TO_LINK = {100: "ethernet-100g", 200: "ib-hdr", 400: "ib-ndr", 800: "ib-xdr"}


@dataclass
class TopoMatrix:
    """`nvidia-smi topo -m` as data."""

    devices: list[str]
    matrix: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not d.startswith("GPU")]

    def link(self, a: str, b: str) -> str:
        return self.matrix[a][b]

    def nvlinks(self, a: str, b: str) -> int:
        """Bonded NVLinks between GPUs a and b (0 if they talk over PCIe)."""
        m = re.fullmatch(r"NV(\d+)", self.matrix[a][b])
        return int(m.group(1)) if m else 0


def _bad(msg: str) -> UserError:
    return UserError(msg, where="nvidia-smi topo -m output", fix="pass the unedited output of `nvidia-smi topo -m`")


def parse_nvidia_smi_topo(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` output (tab- or space-separated, with or without a NIC legend)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header on a terminal
    lines = [ln.rstrip() for ln in text.replace("\r", "").split("\n")]
    header_at = next((i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise _bad("no header line starting with GPU0")
    header = lines[header_at]
    for words in _MULTIWORD:
        header = header.replace(words, words.replace(" ", "_"))
    tokens = header.split()
    devices = [t for t in tokens if _DEVICE.match(t)]
    extra = [t.replace("_", " ") for t in tokens[len(devices):]]
    if tokens[: len(devices)] != devices:
        raise _bad(f"unexpected column {tokens[len(devices)]!r} among the device columns")
    matrix: dict[str, dict[str, str]] = {}
    topo = TopoMatrix(devices, matrix)
    for ln in lines[header_at + 1 :]:
        parts = ln.split()
        if not parts or parts[0] not in devices:
            continue
        name, cells = parts[0], parts[1 : 1 + len(devices)]
        if len(cells) != len(devices):
            raise _bad(f"row {name} has {len(cells)} cells; the header names {len(devices)} devices")
        for d, c in zip(devices, cells, strict=True):
            if c != "X" and c not in PCIE_RANK and not re.fullmatch(r"NV\d+", c):
                raise _bad(f"row {name}, column {d}: unknown connection {c!r} (expected X, NV#, PIX, PXB, PHB, NODE, SYS)")
        matrix[name] = dict(zip(devices, cells, strict=True))
        rest = parts[1 + len(devices) :]
        if name.startswith("GPU") and rest:
            if "CPU Affinity" in extra:
                topo.cpu_affinity[name] = rest[0]
            if "NUMA Affinity" in extra and len(rest) > 1:
                topo.numa_affinity[name] = rest[1]
    missing = [d for d in devices if d not in matrix]
    if missing:
        raise _bad(f"no row for {', '.join(missing)}")
    if any(matrix[d][d] != "X" for d in devices):
        raise _bad("the diagonal must be X")
    for ln in lines:
        m = re.fullmatch(r"\s*(NIC\d+)\s*:\s*(\S+)\s*", ln)
        if m:
            topo.nic_names[m.group(1)] = m.group(2)
    return topo


def gpu_profile_name(smi_name: str) -> str:
    """Built-in GPU profile for an `nvidia-smi --query-gpu=name` string."""
    for pattern, name in GPU_NAMES:
        if re.search(pattern, smi_name, re.IGNORECASE):
            return name
    raise UserError(f"GPU {smi_name!r} has no built-in profile", where="meshplan detect",
                    fix=f"pass --gpu with one of {', '.join(hp.list_gpus())} or a GPU profile .yaml")


def nic_link_from_sysfs(device: str, root: Path = Path("/sys/class/infiniband")) -> str | None:
    """Link profile of an RDMA device from its port rate file ('400 Gb/sec (4X NDR)'), if readable."""
    for rate_file in sorted((root / device / "ports").glob("*/rate")) if (root / device).is_dir() else []:
        m = re.match(r"\s*(\d+)", rate_file.read_text())
        if m and int(m.group(1)) in RATE_TO_LINK:
            return RATE_TO_LINK[int(m.group(1))]
    return None


def _switch_groups(topo: TopoMatrix) -> list[list[int]]:
    """GPUs sharing a PCIe switch (PIX/PXB between them), as index lists."""
    gpus = topo.gpus
    parent = list(range(len(gpus)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            if i < j and topo.link(a, b) in ("PIX", "PXB"):
                parent[find(j)] = find(i)
    groups: dict[int, list[int]] = {}
    for i in range(len(gpus)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _nearest_nics(topo: TopoMatrix) -> dict[str, str]:
    """Closest NIC of each GPU; GPUs tied over the same NIC set share it out in order (DGX A100: 2 + 2)."""
    best: dict[str, tuple[str, ...]] = {}
    for g in topo.gpus if topo.nics else []:
        rank = min(PCIE_RANK.get(topo.link(g, x), 9) for x in topo.nics)
        best[g] = tuple(x for x in topo.nics if PCIE_RANK.get(topo.link(g, x), 9) == rank)
    seen: dict[tuple[str, ...], int] = {}
    out = {}
    for g, nics in best.items():
        i = seen.get(nics, 0)
        out[g], seen[nics] = nics[i % len(nics)], i + 1
    return out


def spec_from_topo(topo: TopoMatrix, gpu: str, *, nic_link: str | None = None, name: str = "detected",
                   host: str | None = None, sysfs: Path = Path("/sys/class/infiniband")) -> hp.ClusterSpec:
    """A one-host cluster profile from a parsed topology and the GPU profile name."""
    host = host or platform.node() or "this host"
    tag = f"detected by meshplan detect (nvidia-smi topo -m) on {host} {datetime.date.today().isoformat()}"
    gpus, n = topo.gpus, len(topo.gpus)
    notes: list[str] = []
    sources = {"node_groups.0.count": "one host by definition", "node_groups.0.node.gpus": f"{tag}: {n} GPU rows"}
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    nv = [topo.nvlinks(a, b) for a, b in pairs]
    scaleup = None
    if pairs and all(nv) and len(set(nv)) == 1:
        scaleup = SCALEUP.get(gpu)
        if scaleup is None:
            notes.append(f"all GPU pairs show NV{nv[0]} but {gpu} has no NVLink profile; modelled as PCIe")
    elif any(nv):
        notes.append("NVLink joins only some GPU pairs (bridges); not modelled, traffic taken over PCIe")
    groups = _switch_groups(topo)
    sizes = {len(g) for g in groups}
    contiguous = all(g == list(range(g[0], g[0] + len(g))) for g in groups)
    gpps = sizes.pop() if len(sizes) == 1 and contiguous and n % len(groups[0]) == 0 else 1
    if scaleup is None and gpps == 1 and len(groups) != n:
        notes.append("uneven PCIe switch groups; each GPU modelled on its own switch")
    sources["node_groups.0.node.gpus_per_pcie_switch"] = f"{tag}: GPUs joined by PIX/PXB share a switch ({gpps} per switch)"
    node: dict = {"name": f"{host} ({n}x {gpu})", "gpu": gpu, "gpus": n, "pcie_link": PCIE.get(gpu, "pcie-gen5"),
                  "gpus_per_pcie_switch": gpps}
    if scaleup:
        node["scaleup_link"] = scaleup
    nearest = _nearest_nics(topo)
    compute = list(dict.fromkeys(nearest[g] for g in gpus)) if nearest else []
    if compute:
        order = [compute.index(nearest[g]) for g in gpus]
        node["nics"] = len(compute)
        if all(b >= a for a, b in zip(order, order[1:], strict=False)):
            node["nic_of_gpu"] = order
            sources["node_groups.0.node.nic_of_gpu"] = f"{tag}: closest NIC of each GPU (PIX < PXB < PHB < NODE < SYS)"
        else:
            notes.append("NIC affinity is not in GPU order; GPUs spread evenly over NICs instead")
        devs = [topo.nic_names.get(x, x) for x in compute]
        sysfs_links = {nic_link_from_sysfs(d, sysfs) for d in devs} - {None}
        if len(sysfs_links) == 1:
            node["nic_link"] = sysfs_links.pop()
            how = "port rate read from /sys/class/infiniband"
        else:
            node["nic_link"] = nic_link or NIC.get(gpu, "ib-ndr")
            how = "ASSUMED speed (pass --nic-link to set it)"
        skipped = [x for x in topo.nics if x not in compute]
        sources["node_groups.0.node.nics"] = (f"{tag}: NICs closest to a GPU: {', '.join(devs)}; {how}"
                                              + (f"; not closest to any GPU (left out): {', '.join(skipped)}" if skipped else ""))
    desc = f"Detected host {host}: {n}x {gpu}" + (f", {scaleup}" if scaleup else ", PCIe only")
    return hp.ClusterSpec.model_validate({
        "name": name, "description": desc + ("; " + "; ".join(notes) if notes else ""),
        "node_groups": [{"count": 1, "node": node}], "default_nodes": 1, "sources": sources,
    })


def cpu_spec(devices: int | None = None, name: str = "detected") -> hp.ClusterSpec:
    """The local-cpu profile with `devices` processes (default: os.cpu_count(), at least 2)."""
    base, _ = hp.cluster_spec("local-cpu")
    count = devices or max(2, os.cpu_count() or 2)
    data = base.model_dump(exclude_unset=True)
    data["name"] = name
    data["node_groups"][0]["node"]["gpus"] = count
    data["sources"]["node_groups.0.node.gpus"] = f"detected: os.cpu_count() = {os.cpu_count()} (at least 2 processes)"
    data["description"] = f"Detected host {platform.node() or 'this host'} without GPUs: {count} CPU processes over gloo"
    return hp.ClusterSpec.model_validate(data)


@dataclass
class Detection:
    """What `detect_local` found: the profile and how it was found."""

    spec: hp.ClusterSpec
    method: str
    topo: TopoMatrix | None = None


def _nvml_names() -> list[str] | None:
    try:
        import pynvml  # optional; never a dependency
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
        return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    except Exception:  # NVML present but unusable (no driver): fall back to nvidia-smi
        return None


def detect_local(*, topo_text: str | None = None, gpu: str | None = None, nic_link: str | None = None,
                 devices: int | None = None, name: str = "detected") -> Detection:
    """Profile of this machine. `topo_text`/`gpu` replace what nvidia-smi would print (tests, offline use)."""
    if topo_text is None:
        smi = shutil.which("nvidia-smi")
        names = _nvml_names()
        if smi is None and not names:
            return Detection(cpu_spec(devices, name), "no NVIDIA GPU found (no NVML, no nvidia-smi): CPU processes")
        if smi is None:
            raise UserError("NVML sees GPUs but nvidia-smi is not on PATH", where="meshplan detect",
                            fix="install the NVIDIA driver utilities or pass --topo-file")
        run = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            return Detection(cpu_spec(devices, name), f"nvidia-smi failed ({run.stderr.strip()[:80]}): CPU processes")
        topo_text = run.stdout
        if names is None:
            q = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
            names = [s.strip() for s in q.stdout.splitlines() if s.strip()]
        method = "nvidia-smi topo -m" + (" + NVML" if _nvml_names() else "")
    else:
        names, method = [], "topology text given"
    topo = parse_nvidia_smi_topo(topo_text)
    if gpu is None:
        kinds = {gpu_profile_name(s) for s in names}
        if len(kinds) != 1:
            raise UserError(f"found GPU kinds {sorted(kinds) or 'none'}", where="meshplan detect",
                            fix="pass --gpu NAME (one kind per host)")
        gpu = kinds.pop()
    hp.gpu(gpu)  # an unknown name fails here with the allowed list
    return Detection(spec_from_topo(topo, gpu, nic_link=nic_link, name=name), method, topo)
