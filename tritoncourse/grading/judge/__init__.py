"""The judge's side: the instructor's checks run against the runner's kernels, hidden cases, and the verdict read back.
Trust role: trusted, outside the sandbox; it never imports, unpickles or runs what the learner wrote."""
