"""Package discovery for the one `forewarn` namespace: each code folder is mapped to
`forewarn.<folder>` and its subpackages are found, so a new subpackage needs no listing
(static configuration cannot add the prefix; everything else is in pyproject.toml)."""

import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# pip checks Requires-Python (pyproject.toml) only once it has resolved and downloaded every
# dependency: on Python 3.9 `pip install .` downloaded for 71 s before it said "requires a
# different Python". Said here, it stops before any dependency is fetched.
if sys.version_info < (3, 10):  # noqa: UP036  (the point: it runs on an older one)
    version = ".".join(map(str, tuple(sys.version_info)[:3]))
    sys.exit(
        f"forewarn needs Python 3.10 or newer; this is Python {version} ({sys.executable}). "
        "Make the virtual environment with a newer one: python3.X -m venv .venv"
    )

FOLDERS = ("protocol", "agent", "providers", "clients", "testing")
# Folders that hold only package data (pyproject.toml's package-data), without an
# __init__.py: setuptools counts each as a package too, and without them listed here every
# build warned "Package would be ignored" for each, saying a later version would leave their
# files out of the wheel.
DATA_PACKAGES = (
    "forewarn.clients.schema",
    "forewarn.clients.c",
    "forewarn.agent.deploy.files",
    "forewarn.agent.deploy.files.systemd",
    "forewarn.agent.deploy.files.examples",
)


class FreshBuildPy(build_py):
    """Copies the packages into an emptied `build/lib/forewarn`. `pip install .` builds in
    the checkout, and setuptools keeps `build/lib` between builds: a module that a `git pull`
    deleted or renamed since the last install was still copied into the next wheel."""

    def run(self) -> None:
        if not self.editable_mode:
            shutil.rmtree(Path(self.build_lib) / "forewarn", ignore_errors=True)
        super().run()


setup(
    cmdclass={"build_py": FreshBuildPy},
    package_dir={f"forewarn.{folder}": folder for folder in FOLDERS},
    packages=[
        package
        for folder in FOLDERS
        for package in (
            f"forewarn.{folder}",
            *(f"forewarn.{folder}.{name}" for name in find_packages(folder)),
        )
    ]
    + list(DATA_PACKAGES),
)
