"""Operator drills: incidents of the library to solve through its real admin.

A drill seeds one incident into a sandbox of its own (``course.sandbox``: its own
database copied from the template with the demo library, its own Redis server, its
processes marked), serves the real site from it on a daphne of its own, and lets a
signed-in learner act there as an operator, then checks whether the system is
healthy again and nothing was lost or applied twice.

- ``catalogue``: the drills, their texts, rights and incidents;
- ``incidents/``: one module per incident, its ``seed`` and its ``check``, run inside
  the sandbox;
- ``state``: a drill's record (a ``JobStatus`` of kind ``drill``) and who writes what;
- ``services``, ``selectors``, ``views``, ``urls``: the web side (quotas, start, check,
  stop, the pages);
- ``supervisor``: the process that owns a drill's sandbox and its processes;
- ``agent``: the process inside the sandbox that seeds and checks;
- ``signin``: the one-time sign-in of the drill's operator account on the sandbox;
- ``workload``: the full-queue drill's producer and its job.
"""
