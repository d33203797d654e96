"""The lessons' experiments: one package per lab, the shared harness, the registry.

Every lab is the package named after its lesson's slug (``-`` becomes ``_``):
``course/labs/hot_key_and_stampede_effect/`` for ``hot-key-and-stampede-effect``.
Its ``__init__`` is the lab's definition: a docstring saying what it measures, and
``LAB = Lab(...)`` with the parameters, the tables and the two runs. The large labs
split the runs out as most packages do: ``model.py`` (the lesson's experiment,
self-contained) and ``live.py`` (the same question asked of the real application),
plus helpers named for what they hold.

The ``__init__`` imports them as modules (``from course.labs.<lab> import live,
model``, then ``model=model.model``), so ``course.labs.<lab>.model`` is always the
submodule, never a function of the same name that shadows it.

- ``harness/``: what every lab is built from and runs on (definitions, the course's
  number semantics, the data set, the live-run sandbox and its helpers). It imports
  no lab.
- ``registry``: the labs keyed by lesson slug, each imported by its name; a lesson
  without its package fails the registry at import. It sits above every lab.

"""
