"""pytest set-up shared by the suite (``tests/``) and the doctests (``pytest --doctest-modules codesign``).

64-bit floats, as the command line runs the library (``codesign.cli.main``) and as the
examples in the docstrings assume; ``tests/conftest.py`` adds the suite's 4 CPU devices.
``codesign/cli/__main__.py`` runs the command line when imported, so doctest collection
skips it.
"""

import jax

jax.config.update("jax_enable_x64", True)

collect_ignore = ["codesign/cli/__main__.py"]
