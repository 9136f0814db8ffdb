"""MSUnmerged: clean /store/unmerged at CMS sites with jobs that run at the site."""
import re

from setuptools import Extension, find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', open("src/python/MSUnmerged/__init__.py").read()).group(1)

setup(
    name="msunmerged",
    version=VERSION,
    description="Finds unneeded files in CMS /store/unmerged and deletes them with cleanup jobs at the sites",
    license="Apache-2.0",
    python_requires=">=3.11",
    package_dir={"": "src/python"},
    packages=find_packages("src/python"),
    include_package_data=True,
    # The default configuration: src/python/MSUnmerged/msunmerged.toml links to etc/msunmerged.toml, copied here.
    package_data={"MSUnmerged": ["msunmerged.toml"]},
    install_requires=[line.strip() for line in open("requirements.txt")
                      if line.strip() and not line.startswith("#")],
    # The planner's per-byte loops in C; optional: without a compiler the install still succeeds and
    # the planner uses the same work in Python (MSUnmerged/planlines.py).
    ext_modules=[Extension("MSUnmerged._planfast", ["src/python/MSUnmerged/_planfast.c"], optional=True)],
    entry_points={"console_scripts": ["msunmerged = MSUnmerged.cli:entry"]},
)
