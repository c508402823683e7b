"""The phases of a deferred run, one module each, functions over the run's ``RunState`` and the services
they need (each module names them as a Protocol; ``contextualize.Contextualizer`` holds them). A package of
its own, below ``sequence.py`` (each phase as a step over the state, and the CLI's sequencer),
``workflow.py`` (the workflow's), ``contextualize.py`` and ``shards.py``: none is imported here. A phase
calls another's work through the services (``work._store``, not ``store.store``): a test, or a sharded
run, replaces it there. The modules: ``plan`` (the listing, the records built, the cut into jobs),
``submit``, ``follow``, ``store``, ``settle`` (with what follows the re-ingestion), ``reingest`` (and
``finish``: a run in one piece done); the order is ``sequence.py``'s."""
