"""firn_client: the Python client of firn, a distributed 64-bit ID service.

    from firn_client import FirnClient
    with FirnClient(["10.0.0.1:7300", "10.0.0.2:7300"]) as c:
        i = c.next()

See client.FirnClient; errors are FirnError (errors.py).
"""

from .client import TLS, FirnClient, Run, SeqRange
from .errors import FirnError
from .fnv import fnv1a64

__all__ = ["FirnClient", "FirnError", "TLS", "Run", "SeqRange", "fnv1a64"]
__version__ = "0.1.0.dev0"
