"""The processes of a kernel test: a test cell judged in fresh processes (isolated), the warm zygotes that fork them.
Trust role: trusted, outside the sandbox, but for the runner's zygote; judge and runner are loaded by name only."""
