"""The instructor's workflow: collect hand-ins, grade a class, export grades, feedback, solutions, hand-outs.

It drives ``nbgrader`` and uses the trust boundary (``tritoncourse.grading``: sandbox, isolated checks,
nbgrader steps); nothing in the learner's path imports it.
"""
