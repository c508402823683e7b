"""The phases of a deferred run, one module each, functions over the run's ``RunState`` and the services
they need (each module names them as a Protocol; ``contextualize.Contextualizer`` holds them and calls the
phases). A package of its own, below ``contextualize.py`` and ``shards.py``: both sequence these phases, and
neither is imported here. A phase calls another's work through the services (``work._store``, not
``store.store``): a test, or a sharded run, replaces it there. The modules: ``plan`` (the listing, the
records built, the cut into jobs), ``submit``, ``follow``, ``store``, ``settle`` (with what follows the
re-ingestion), ``reingest`` (and ``finish``: a run in one piece done); the order of a run in one piece is
still ``Contextualizer._run``'s."""
