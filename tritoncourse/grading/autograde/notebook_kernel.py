"""The notebook's kernel under ResilientExecute: started in the grading sandbox, talked to through zmq contexts
of the run's own (every message bounded as it arrives), its stray processes killed after each cell, and everything
the run made ended explicitly (:meth:`SandboxedKernel._release`).

:class:`SandboxedKernel` is a part of :class:`execute.ResilientExecute` (a mixin before nbgrader's Execute): it
uses that class's traits (``message_limit``) and run state (``_box``, ``_keep``, ``_watchdog``, ``_oversized``).

The grader connects to the kernel once, never where the kernel points it (issue 42). The kernel binds its five ipc
sockets in the sandbox's shared folder, which the learner's code can write: a socket file replaced by a link to a
Unix socket outside the sandbox, then a reconnection (a dropped connection, which zmq reconnects by the same path, or
an unanswered heartbeat, whose channel makes a new socket), would have this process (root, outside the sandbox)
connect to that socket. The kernel must bind them (so a folder it cannot write is no option), zmq connects by path,
and Jupyter's kernels listen while the client connects; so, of the ways out (a folder the kernel cannot write; a
descriptor or /proc/self/fd path; TCP in a network namespace the grader enters; no reconnection), the smallest sound
one is taken: each channel is connected exactly once, after the kernel bound its sockets and each file was checked
to be a socket owned by the sandbox's user, before any cell (any learner code) runs; every socket of the run's
contexts has ZMQ_RECONNECT_IVL -1 (never reconnected), no heartbeat runs (nbclient asks the kernel manager, which
watches the process, whether the kernel lives), and the manager's control socket and the client's channels are never
made again. A channel lost later is that notebook's failure: the cell stops with ``KernelConnectionLost``. The
connection file is written in the grader's own folder, bound read-only inside (``Sandbox.private``).
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import stat
import sys
import time

from jupyter_core.utils import run_sync
from nbclient.exceptions import DeadKernelError

from .. import sandbox
from .notebook_bounds import _NotebookExpired

LOST = "the notebook's kernel closed or replaced its connection to the grader"

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")


def _socket_files(conn) -> dict[str, str]:
    """The ipc socket file of each channel of a kernel manager or client (``ip-port``)."""
    return {ch: f"{conn.ip}-{getattr(conn, ch + '_port')}" for ch in CHANNELS}


def _kernel_socket(path: str, uid: int) -> os.stat_result | None:
    """``path``'s status when it is a socket (not a link) owned by ``uid``, else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISSOCK(st.st_mode) and st.st_uid == uid else None


def _wait_for_kernel_sockets(manager, uid: int, timeout: float) -> dict[str, int]:
    """Wait until the kernel bound every channel's socket (each a socket owned by ``uid``); their inodes. Before the
    first cell only the kernel's own start runs in the sandbox, so what is found is the kernel's."""
    deadline = time.monotonic() + timeout
    files = _socket_files(manager)
    while True:
        found = {path: _kernel_socket(path, uid) for path in files.values()}
        if all(found.values()):
            time.sleep(0.05)  # bind() makes the file, listen() follows at once: a connect now is never refused
            return {path: st.st_ino for path, st in found.items()}
        proc = getattr(getattr(manager, "provisioner", None), "process", None)
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            missing = [ch for ch, path in files.items() if not found[path]]
            raise RuntimeError(f"the notebook's kernel did not make its sockets ({', '.join(missing)})")
        time.sleep(0.02)


def _sandboxed_kernel_manager_class(base, uid, run):
    """``base`` (nbclient's AsyncKernelManager) whose connection file the sandbox's user can read, and whose control
    socket is connected once, to the kernel's own socket (``run``: the ResilientExecute, which keeps the inodes)."""

    class SandboxedKernelManager(base):
        _control_made = False

        def write_connection_file(self, **kwargs):
            super().write_connection_file(**kwargs)  # in the grader's own folder: no sandboxed process can link it
            if uid is not None:
                os.chown(self.connection_file, uid, uid)

        def _connect_control_socket(self) -> None:
            if self._control_made:  # closed or lost: never connected again (where it points may be a link now)
                return
            run._socket_inodes = _wait_for_kernel_sockets(self, os.getuid() if uid is None else uid,
                                                          run.startup_timeout)
            self._control_made = True
            super()._connect_control_socket()

        async def _async_interrupt_kernel(self) -> None:
            import zmq

            try:
                await super()._async_interrupt_kernel()
            except zmq.Again:  # the control channel was lost: the interrupt goes nowhere (the cell's time-out acts)
                self.log.warning("The notebook's kernel's control channel is lost: interrupt not sent")

        async def _async_request_shutdown(self, restart: bool = False) -> None:
            import zmq

            try:
                await super()._async_request_shutdown(restart=restart)
            except zmq.Again:  # lost: the kernel is killed once the shutdown's wait has passed
                self.log.warning("The notebook's kernel's control channel is lost: shutdown request not sent")

    return SandboxedKernelManager


def _connect_once(client):
    """``client`` (a kernel client) that starts no heartbeat and makes each channel's socket at most once."""
    made: set[str] = set()
    create = client._create_connected_socket

    def create_once(channel, identity=None):
        if channel in made or channel == "hb":
            raise RuntimeError(f"the grader connects to the notebook's kernel once ({channel} asked again)")
        made.add(channel)
        return create(channel, identity=identity)

    start = client.start_channels
    client._create_connected_socket = create_once
    client.start_channels = lambda *args, **kw: start(*args, **{**kw, "hb": False})
    return client



class SandboxedKernel:
    """ResilientExecute's kernel and client: in the sandbox, bounded, explicitly released."""

    _lost = False  # a channel to the kernel was lost (closed or replaced by the kernel): never reconnected
    _socket_inodes: dict[str, int] = {}  # the kernel's socket files, as checked before the first cell

    def _kernel_process(self):
        """The kernel's process (the sandbox's outer process), once started: the Popen nbclient's provisioner made."""
        if self._kernel_proc is None and self._manager is not None:
            self._kernel_proc = getattr(getattr(self._manager, "provisioner", None), "process", None)
        return self._kernel_proc

    def _stop_kernel(self) -> None:
        """Kill the notebook's kernel (its whole process tree): from the watchdog's thread, so only signals."""
        proc = self._kernel_process()
        if proc is not None and proc.poll() is None:
            sandbox.kill_process_tree(proc.pid)

    def _release(self) -> None:
        """End everything this notebook's run made, explicitly and each step bounded, whatever nbclient's own
        clean-up did: the monitor sockets, the client's channels, the manager's control socket, the kernel's
        process (killed if still there, and reaped), our zmq contexts (destroyed with linger 0, so that
        zmq_ctx_term cannot wait), the event loop's leftover tasks, and the sandbox."""

        def attempt(what, fn):
            try:
                fn()
            except (Exception, _NotebookExpired):
                self.log.warning("Clean-up: %s failed", what, exc_info=True)

        for mon in self._monitors[0::2]:
            attempt("closing a monitor socket", lambda mon=mon: mon.close(linger=0))
        if self._client is not None:
            attempt("stopping the kernel client's channels", self._client.stop_channels)
        if self._manager is not None:
            attempt("closing the kernel manager's control socket", self._manager._close_control_socket)
        proc = self._kernel_process()
        if proc is not None:
            attempt("stopping the kernel's processes", lambda: proc.poll() is None
                    and sandbox.kill_process_tree(proc.pid))
            attempt("reaping the kernel's process", lambda: proc.wait(timeout=10))
        for ctx in self._contexts:
            attempt("destroying a zmq context", lambda ctx=ctx: ctx.destroy(linger=0))
        attempt("cancelling the event loop's leftover tasks", self._cancel_leftover_tasks)
        self._contexts, self._monitors = [], []
        self._client = self._manager = self._kernel_proc = None
        if self._box is not None:
            for why in self._box.killed:
                self.log.warning("Sandbox: %s", why)
            attempt("closing the sandbox", self._box.close)
            self._box = None

    def _cancel_leftover_tasks(self) -> None:
        """An interrupted run leaves nbclient's tasks pending in this thread's event loop: cancel them, so that the
        next notebook's run does not wake them."""
        import asyncio

        from jupyter_core.utils import ensure_event_loop

        loop = ensure_event_loop()
        if loop.is_running():
            return
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=5))

    # ---- the kernel and its client: contexts of our own, bounded messages
    def _context(self, cls):
        """A zmq context of this run's own (destroyed by _release): every socket made in it refuses a message
        frame larger than message_limit as it arrives (the peer is disconnected; libzmq checks the size in the frame
        header, before the frame is read into memory)."""
        import zmq

        ctx = cls()
        self._contexts.append(ctx)
        if self.message_limit > 0:
            ctx.setsockopt(zmq.MAXMSGSIZE, int(self.message_limit))
        if self._box is not None:  # a sandboxed kernel: no socket ever reconnects (see the module's docstring)
            ctx.setsockopt(zmq.RECONNECT_IVL, -1)
        return ctx

    def _manager_context(self):
        """A context for the kernel manager (its control socket) of the class its ``context`` trait asks for."""
        import zmq

        klass = self.kernel_manager_class.class_traits().get("context")
        klass = getattr(klass, "klass", None)
        ctx = self._context(klass if isinstance(klass, type) and issubclass(klass, zmq.Context) else zmq.Context)
        if self._box is not None:  # a control socket whose channel was lost (never reconnected) must not block a send
            ctx.setsockopt(zmq.SNDTIMEO, 1000)
        return ctx

    def create_kernel_manager(self):
        if self._box is None:
            if not self.kernel_name:
                self.kernel_name = self.nb.metadata.get("kernelspec", {}).get("name") or ""
            kw = {"kernel_name": self.kernel_name} if self.kernel_name else {}
            self.km = self.kernel_manager_class(config=self.config, context=self._manager_context(), **kw)
            self._manager = self.km
            return self.km
        from jupyter_client.kernelspec import KernelSpecManager

        box = self._box
        work = box.private_dir("work-")
        self._copy_notebook_folder(work)
        specs = box.root / "kernels"
        (specs / "tritoncourse-sandboxed").mkdir(parents=True)
        # sh stays between the sandbox's init (pid 1) and the kernel, or ipykernel sees its parent gone and quits.
        launch = f"{shlex.quote(sys.executable)} -m ipykernel_launcher -f {{connection_file}}; :"
        spec = {"argv": box.argv(["sh", "-c", launch], cwd=work, extra_env={"NBGRADER_EXECUTION": "autograde"}),
                "display_name": "Python 3 (grading sandbox)", "language": "python", "interrupt_mode": "message",
                "metadata": {}}
        (specs / "tritoncourse-sandboxed" / "kernel.json").write_text(json.dumps(spec))
        manager = _sandboxed_kernel_manager_class(self.kernel_manager_class, box.uid, self)
        self.km = manager(kernel_name="tritoncourse-sandboxed", config=self.config,
                          kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]), transport="ipc",
                          ip=str(box.shared / "kernel"), connection_file=str(box.private / "connection.json"),
                          context=self._manager_context())
        self._manager = self.km
        return self.km

    async def async_start_new_kernel(self, **kwargs):
        await super().async_start_new_kernel(**kwargs)
        self._kernel_proc = getattr(getattr(self.km, "provisioner", None), "process", None)

    async def async_start_new_kernel_client(self):
        """nbclient's, with the client in a context of this run's own (bounded messages, destroyed explicitly) and
        a monitor on each socket that carries the kernel's messages (a disconnection there is a refused message)."""
        import zmq
        import zmq.asyncio

        if self._manager is None or self.km is not self._manager:  # a kernel manager we did not make: as nbclient
            self.kc = await super().async_start_new_kernel_client()
            self._client = self.kc
            return self.kc
        client = self.km.client
        self.km.client = lambda **kw: _connect_once(client(context=self._context(zmq.asyncio.Context), **kw)) \
            if self._box is not None else client(context=self._context(zmq.asyncio.Context), **kw)
        try:
            self.kc = await super().async_start_new_kernel_client()
        finally:
            with contextlib.suppress(AttributeError):
                del self.km.client
        self._client = self.kc
        for channel in ("shell_channel", "iopub_channel", "stdin_channel", "control_channel"):
            sock = getattr(getattr(self.kc, channel), "socket", None)
            if sock is not None:
                monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                # read without the event loop through a shadow; the socket itself is kept (and closed by _release)
                self._monitors += [monitor, zmq.Socket.shadow(monitor.underlying)]
        return self.kc

    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _refused_message(self) -> bool:
        """Whether the kernel sent a message larger than message_limit (refused as it arrived): one of the client's
        sockets was disconnected from the kernel while the kernel lives on. A kernel that died (its own doing, the
        sandbox's, a bound's) takes its sockets with it: that is not a refused message."""
        import zmq

        if self._oversized or self._lost:
            return True
        disconnected = False
        for mon in self._monitors[1::2]:  # the shadows
            while True:
                try:
                    mon.recv_multipart(zmq.NOBLOCK)
                except zmq.ZMQError:  # zmq.Again: nothing more
                    break
                disconnected = True
        if not disconnected or self._expired() or (self._box is not None and self._box.killed):
            return False
        proc, until = self._kernel_proc, time.monotonic() + 0.5
        while proc is not None and proc.poll() is None and time.monotonic() < until:
            time.sleep(0.05)  # a dying kernel's sockets go first: give it the time to be seen dead
        if proc is None or proc.poll() is not None:
            return False
        # The kernel lives: a frame past message_limit was refused, unless a socket file is no longer the kernel's
        # (closed or replaced by the learner's code: the channel is lost, and the grader never connects again).
        self._lost = self._sockets_replaced()
        self._oversized = not self._lost
        return True

    def _sockets_replaced(self) -> bool:
        """Whether a socket file of the kernel is gone or no longer the one checked before the first cell."""
        if self._box is None:
            return False
        uid = os.getuid() if self._box.uid is None else self._box.uid
        now = {path: _kernel_socket(path, uid) for path in self._socket_inodes}
        return any(st is None or st.st_ino != self._socket_inodes[path] for path, st in now.items())

    async def _async_check_alive(self) -> None:
        # nbclient calls this every second while a cell runs: a refused message stops the cell at once (as a dead
        # kernel does), instead of waiting for outputs that were dropped with it.
        await super()._async_check_alive()
        if self._refused_message():
            raise DeadKernelError(LOST if self._lost else "the kernel sent a message larger than the grader accepts")

    def _kernel_pid(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        process = getattr(provisioner, "process", None)
        return getattr(process, "pid", None)

    def _kill_strays(self) -> None:
        """After a cell: every process in the sandbox but the kernel (and its launchers) is killed."""
        outer = self._kernel_pid()
        if self._box is None or outer is None:
            return
        if self._keep is None:
            import psutil

            self._box.watch(outer)  # the memory and disk watchdog guards the kernel and all its cells start
            keep = {outer}
            for proc in self._box.descendants(outer):
                try:
                    if "ipykernel_launcher" in proc.cmdline():  # python -m ipykernel_launcher, not sh -c "..."
                        keep |= {proc.pid} | {p.pid for p in proc.parents()}
                        break
                except psutil.Error:
                    continue
            self._keep = keep
        for what in self._box.kill_strays(outer, self._keep):
            self.log.info("Sandbox: killed %r, left running by a cell", what)
