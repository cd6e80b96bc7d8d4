"""The conventional ``setup.py`` beside the package, for tools that still look for one.

Every piece of metadata (name, version, dependencies, entry points, package data) lives in
``pyproject.toml``; setuptools reads it from there, so this file stays empty of it.
"""

from setuptools import setup

setup()
