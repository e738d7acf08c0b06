"""The learner's own path: the ``%%kernel_test`` magic, and ``check``, ``reset`` and ``submit`` (dispatched by
``learner.cli``).

It runs on the learner's own machine, unsandboxed, and imports nothing of the instructor's tools
(``tritoncourse.classroom``); of the grader (``tritoncourse.grading``) only the test runner, and only when tests run
(``check``, the magic, ``submit`` before it writes the hand-in). Beside them: ``tritoncourse.notebooks``.
"""
