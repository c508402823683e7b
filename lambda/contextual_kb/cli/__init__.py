"""The ``ckb`` command line: ``main`` (the app, ``transform`` and ``demo``), ``kb`` (``upload``, ``sync``,
``query``, ``ask``), ``evaluate`` (``eval``), ``errors`` (the one error boundary), ``render`` and
``terminal`` (what is printed, safely), ``demo`` (the offline demo)."""
