"""Start-up check of the packages whose internals we depend on."""

import pytest

from runtimekit._compat import SUPPORTED, UnsupportedVersion, check_versions


def test_the_installed_versions_are_supported() -> None:
    check_versions()


@pytest.mark.parametrize(
    "package,version,message",
    [
        ("nvidia-ml-py", "14.0.1", "nvidia-ml-py 14.0.1 is installed; the agent supports >=12.535,<14"),
        ("prometheus-client", "0.27.0", "prometheus-client 0.27.0 is installed; the agent supports >=0.19,<0.27"),
        ("prometheus-client", "0.18.0", ">=0.19,<0.27"),
    ],
)
def test_a_version_out_of_range_names_the_package_and_the_range(package, version, message) -> None:
    installed = {name: ".".join(map(str, low)) for name, (low, _) in SUPPORTED.items()}
    installed[package] = version
    with pytest.raises(UnsupportedVersion, match=message.replace(".", r"\.")):
        check_versions(installed)


def test_the_bounds_match_pyproject() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    requirements = " ".join(pyproject["project"]["dependencies"])
    for package, (low, high) in SUPPORTED.items():
        spec = f"{package}>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
        assert spec in requirements
