"""The environment recorded with every GPU result: device, driver, library versions, date."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import re
import subprocess


def package_version(*names):
    """The installed version of the first distribution found among ``names``, else None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def driver_version():
    """The NVIDIA driver version from nvidia-smi (or pynvml); None when neither answers."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        if out.strip():
            return out.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # pynvml absent or no driver: the field is optional
        return None


def git_commit():
    """The commit of the working tree the suite runs from, when it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        return out or None
    except (OSError, subprocess.SubprocessError):
        return None


def slug(name: str) -> str:
    """A folder name for a device: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def environment(torch, device: int = 0) -> dict:
    """GPU name, SM count, L2 and memory sizes, driver, CUDA, torch, triton, fla and seqmix
    versions, and the date (UTC)."""
    import seqmix

    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": torch.cuda.get_device_name(device),
        "sm_count": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_bytes": props.total_memory,
        "driver": driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": package_version("triton", "pytorch-triton"),
        "fla": package_version("flash-linear-attention", "fla-core"),
        "seqmix": seqmix.__version__,
        "seqmix_commit": git_commit(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
