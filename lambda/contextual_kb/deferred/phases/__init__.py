"""The phases of a deferred run, one module each, a function over the run's ``RunState`` and the services
it needs (each module names them as a Protocol; ``contextualize.Contextualizer`` holds them and calls the
phases). A package of its own, below ``contextualize.py`` and ``shards.py``: both sequence these phases, and
neither is imported here. Moved so far (issue 54): ``submit``, ``settle`` (with what follows the
re-ingestion), ``reingest``; plan, follow and store are still ``Contextualizer``'s methods."""
