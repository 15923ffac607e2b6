"""Kubernetes quantities ("64Gi", "0.5", "1500m") as the kubernetes client parses them.

Its ``parse_quantity`` is loaded from its own module file: importing ``kubernetes.utils`` runs
the package's ``__init__``, which imports the whole API client, about a second of every run for
one function that needs only ``decimal``.

    parse_quantity("64Gi") -> Decimal('68719476736')
"""

import importlib.util
import os

_package = importlib.util.find_spec("kubernetes")  # finds the package without running it
_spec = importlib.util.spec_from_file_location(
    "gpuop._kubernetes_quantity", os.path.join(os.path.dirname(_package.origin), "utils", "quantity.py")
)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

parse_quantity = _module.parse_quantity
