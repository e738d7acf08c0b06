"""A learner's notebook as text: definitions taken as source (never run here), linted against a whitelist, test cells.
Trust role: trusted, in the grader and the learner's own kernel; it parses learner text and executes none of it."""
