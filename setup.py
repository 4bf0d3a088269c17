"""Packaging glue pyproject.toml cannot express: the repository's ``bridges/`` folder ships as
``tapegrad.bridges`` (a generic top-level name such as ``bridges`` must not be claimed)."""
from setuptools import find_packages, setup

bridge_packages = ["tapegrad.bridges"] + [f"tapegrad.bridges.{p}" for p in find_packages("bridges")]

setup(
    packages=find_packages(include=["tapegrad", "tapegrad.*", "optim_examples", "optim_examples.*"])
    + bridge_packages,
    package_dir={"tapegrad.bridges": "bridges"},
)
