"""The runner: the learner's side, the one process that runs a learner's kernels while a test is judged.
Trust role: untrusted, inside the sandbox at grading; imports only the channel, never the judge's checks or verdicts."""
