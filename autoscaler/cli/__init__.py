"""The ``autoscaler`` command line (typer + rich).

Every user error (bad fleet file, bad trace line, unknown controller) prints one line
``error: <what and where>`` on stderr and exits with status 2; no traceback.

The commands live one module per face (``simulation``, ``live``, ``comparison``, ``run``, ``tools``),
the options they share in ``options``, the app and its error handling in ``common``; importing this
package registers them in that order (the order ``--help`` lists them).
"""

# Importing a module registers its commands; --help lists them in this order.
from autoscaler.cli import simulation  # noqa: F401, I001
from autoscaler.cli import live  # noqa: F401
from autoscaler.cli import comparison  # noqa: F401
from autoscaler.cli import run  # noqa: F401
from autoscaler.cli import tools  # noqa: F401
from autoscaler.cli.common import app

__all__ = ["app"]
