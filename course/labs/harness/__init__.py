"""The labs' shared harness: what every lab is built from and runs on.

- ``base``: a lab's definition (``Lab``, ``Param``, ``LabParams``, ``LivePart``,
  ``Table``, ``Chart``), its errors;
- ``jsnum``: the course's JavaScript number semantics (``Math.round``, ``toFixed``,
  the generator);
- ``dataset``: the course's data set, loaded into a lab's own database, and
  ``dataset_shape``: its numbers (counts and rules), which the models read too;
- ``live``: the rq side of a live part (its run id, real worker processes started
  and stopped with ``config.processes``, a sweeper, probes, waits that end in a
  one-line ``LabError``);
- ``live_http``, ``live_jobs``, ``live_store``, ``live_streams``: the live parts'
  helpers for real HTTP servers, rq jobs, the real cache and the message streams;
- ``live_loans``: what the loan child (``labchild loans``) and the rationale lab that
  starts it share: a loan's side jobs and how long the in-memory hand-off waits.

The harness imports no lab; the labs and ``course.labs.registry`` import the harness.
"""
