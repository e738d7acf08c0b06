"""The channel between the judge and the runner: one Unix socket, its wire format and the proxies on either side.
Trust role: used by both sides, inside and outside the sandbox; it runs nothing it receives, and the judge bounds it."""

SOCKET_NAME = "judge.sock"
