"""NPU Console: one import namespace for the whole application.

The repository keeps the design card's folders at its top (engine/, console/, cli/, assets/); the
wheel installs them as npu_console.engine, npu_console.console, npu_console.cli and
npu_console.assets (setup.py maps them), so nothing in site-packages carries a generic top-level
name that another distribution could also use.
"""

import os as _os

# In a source checkout those folders sit beside this one, not inside it: let the package's
# search path include the checkout's root, so `npu_console.engine` resolves to ./engine whether
# or not the checkout was pip-installed. An installed wheel has them inside and skips this.
_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if (not _os.path.isdir(_os.path.join(_here, "engine"))
        and _os.path.isfile(_os.path.join(_root, "engine", "__init__.py"))):
    __path__.append(_root)
