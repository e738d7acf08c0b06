"""The processes of a kernel test: a test cell judged in fresh processes (isolated), the warm zygotes that fork them.
Trust role: trusted, outside the sandbox; it starts the judge outside and the runner inside, importing neither."""
