"""Package discovery for the one `forewarn` namespace: each code folder is mapped to
`forewarn.<folder>` and its subpackages are found, so a new subpackage needs no listing
(static configuration cannot add the prefix; everything else is in pyproject.toml)."""

from setuptools import find_packages, setup

FOLDERS = ("protocol", "agent", "providers", "clients", "testing")

setup(
    package_dir={f"forewarn.{folder}": folder for folder in FOLDERS},
    packages=[
        package
        for folder in FOLDERS
        for package in (
            f"forewarn.{folder}",
            *(f"forewarn.{folder}.{name}" for name in find_packages(folder)),
        )
    ],
)
