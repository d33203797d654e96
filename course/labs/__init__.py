"""The lessons' experiments: one package per lab, the shared harness, the registry.

Every lab is the package named after its lesson's slug (``-`` becomes ``_``):
``course/labs/hot_key_and_stampede_effect/`` for ``hot-key-and-stampede-effect``.
Each has the same shape:

- ``__init__.py``: the definition. A docstring saying what the lab measures, and
  ``LAB = Lab(...)`` with its parameters, charts and two parts.
- ``params.py``: ``PARAMS``, the parameters as the form and ``lab --set`` take them,
  and a frozen dataclass with one typed field per parameter, which both parts read
  (``params.requests``, never a name looked up in a dict). ``Lab`` checks at import
  that the two agree.
- ``model.py``: ``model(params, progress) -> Tables``, the lesson's experiment on
  its own throwaway data.
- ``live.py``: ``LIVE = LivePart(check, measure, tables)``, the same question asked
  of the real application. ``check(params)`` names what only the model can run
  (the form and the request for a run ask it before anything starts),
  ``measure(params, progress)`` starts what it needs through the harness and
  returns the raw figures as a dataclass, and ``tables(params, measurement)``
  builds the ``live_*`` tables from them without touching anything.

plus helpers named for what they hold. The ``__init__`` imports its parts as
modules (``from course.labs.<lab> import live, model``, then ``model=model.model``),
so ``course.labs.<lab>.model`` is always the submodule, never a function of the
same name that shadows it.

- ``harness/``: what every lab is built from and runs on (definitions, the course's
  number semantics, the data set, the live-run helpers). It imports no lab.
- ``registry``: the labs keyed by lesson slug, each imported by its name; a lesson
  without its package fails the registry at import. It sits above every lab.
"""
