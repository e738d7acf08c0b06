"""The grader, one package per trust role, so that the tree says where a learner's code runs.

    runner/     the learner's side: the one process that runs a learner's kernels, INSIDE the sandbox
    channel/    the socket between runner and judge, spoken by both sides; it runs nothing it receives
    judge/      the instructor's checks against the runner's kernels, hidden cases, verdicts: outside the sandbox
    processes/  a test cell in fresh judge and runner processes (isolated), the warm zygotes that fork them
    lint/       the learner's notebook as text: definitions taken as source and linted, never run
    autograde/  the course's steps of ``nbgrader autograde`` (the instructor's grading process)
    sandbox/    bubblewrap, cgroups, limits and host clean-up around every learner process

Which package imports which (tests/units/test_layout.py enforces these rules and checks this table against the code):

    autograde  -> processes, lint, sandbox
    processes  -> judge, lint
    judge      -> channel, sandbox
    runner     -> channel
    channel    -> sandbox
    lint       -> (nothing)
    sandbox    -> (nothing)

    trusted, outside the sandbox                                   | inside the sandbox
    autograde --> processes --> judge --> channel <----------------|--- runner
       |   |          |           |          |                     |
       |   +-> lint <-+           +--> sandbox <-+ (the judge's limits)
       +-------------------------------> sandbox

The runner imports only the channel (and, through it, the checking library's fences); the judge never imports the
runner; the zygotes load judge and runner by name only, in the processes they fork.
"""
