"""The incidents of the operator drills: each module seeds one and checks its fix.

``seed()`` runs once inside the drill's sandbox and returns facts to show the learner
(such as which book is the hot one); ``check()`` returns a ``Verdict``, finding by
finding, after waiting for work the fix set moving to settle.
"""
