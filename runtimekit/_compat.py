"""The versions of the two packages whose internals or bytes the agent depends on, checked at start-up.

- nvidia-ml-py (``pynvml``): the reader takes ctypes struct fields past pynvml's Python accessors
  (``object.__getattribute__`` in runtimekit/gpu/fields.py and processes.py) and names wrappers by
  their versioned symbols; a major version could change both.
- prometheus-client: exporter/render.py writes exactly the bytes ``generate_latest`` writes, and a
  test proves it for the versions we allow; a new minor version may format differently.

pyproject.toml bounds both; an installation that ignored the bounds (``pip install --no-deps``, a
distribution package) is told which package and which range, instead of failing obscurely later.
"""

from __future__ import annotations

from importlib import metadata

# package -> (lowest version allowed, first version not allowed), as in pyproject.toml.
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "nvidia-ml-py": ((12, 535), (14,)),
    "prometheus-client": ((0, 19), (0, 27)),
}


class UnsupportedVersion(RuntimeError):
    """An installed package is outside the range the agent was tested with."""


def _parse(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def _text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def check_versions(installed: dict[str, str] | None = None) -> None:
    """Raise ``UnsupportedVersion`` naming the package, its version and the supported range."""
    for package, (low, high) in SUPPORTED.items():
        version = (installed or {}).get(package) if installed is not None else _installed(package)
        if version is None:
            raise UnsupportedVersion(f"{package} is not installed (need >={_text(low)},<{_text(high)})")
        parsed = _parse(version)
        if not low <= parsed < high:
            raise UnsupportedVersion(
                f"{package} {version} is installed; the agent supports >={_text(low)},<{_text(high)} "
                "(it relies on this package's internals: see runtimekit/_compat.py)"
            )


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
