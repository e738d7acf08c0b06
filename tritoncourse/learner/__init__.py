"""The learner's own path: the ``%%kernel_test`` magic, ``check``, ``reset`` and ``submit``.

It runs on the learner's own machine, unsandboxed, and imports nothing of the instructor's workflow
(``tritoncourse.classroom``): only the test runner (``tritoncourse.grading``) and ``tritoncourse.notebooks``.
"""
