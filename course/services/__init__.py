"""Writes of the course app, one module per concern.

- ``labqueue``: asking for a lab run (quotas, single flight, the fair queue);
- ``labwork``: carrying runs out in a lab worker (turns, leases, shared results);
- ``labwake``: the workers' wake-up call over Redis;
- ``learners``: a learner's progress, adopting a visitor's session, deleting an account.
"""
