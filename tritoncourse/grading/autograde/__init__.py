"""The course's steps of ``nbgrader autograde``: execute (the kernel sandboxed), restore, kernel tests, links.
Trust role: trusted, the instructor's grading process; every learner process it starts runs in the sandbox."""
