"""Graded challenges: goals a learner reaches with a lesson's lab (issue #28).

Each lesson's TOML lists its ``[[challenges]]`` (``course/AUTHORING.md``,
"Challenges"): a goal reached by choosing parameters or by answering with a number,
checked against the lab's model. ``spec`` reads them, ``expr`` is their small
expression language, ``checker`` grades an answer (pure), ``grading`` runs it with the
cached model, ``problems`` is what ``lesson_check`` proves of each, ``services`` and
``selectors`` keep a learner's progress, ``pages`` builds the lesson page's panel.
"""
