"""Maps the design card's top-level folders into the one `npu_console` namespace.

pyproject.toml holds everything else; only the package list lives here, because setuptools'
declarative `packages.find` cannot put a prefix in front of the folders it finds.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = ("engine", "console", "cli", "assets")
packages = ["npu_console"]
package_dir = {"npu_console": "npu_console"}
for top in FOLDERS:
    package_dir[f"npu_console.{top}"] = top
    packages.append(f"npu_console.{top}")
    packages += [f"npu_console.{top}.{sub}"
                 for sub in find_namespace_packages(top, exclude=["*__pycache__*"])]

setup(packages=packages, package_dir=package_dir)
