"""Race the grader's kernel-test folders with links (run inside a grading sandbox as its user; see README.md).

    python race_links.py SHARED TARGET_DIR SECONDS

Watches SHARED (the sandbox's writable folder) and, where it is there, the grader's ``private`` folder beside it
(bound read-only inside) with inotify. For every new ``test-*`` folder: the odd ones are renamed away and replaced by a link to
TARGET_DIR/folder (a grader that then chmods/chowns/writes the folder's path changes that folder instead); in the
even ones the names the grader writes (``learner_kernels.py``, ``kernel_names.json``, ``out.txt``) become links to
TARGET_DIR/file, and ``judge.sock`` is replaced by a link to TARGET_DIR/socket_target as fast as can be, while the
folder exists (a chmod of the socket's path then changes that file). Every ``*.out`` in SHARED becomes a link to
TARGET_DIR/file. Prints one JSON line when its watches are set, and
one of what it managed when SHARED/stop-race appears (or SECONDS have passed).
"""
import ctypes
import json
import os
import select
import struct
import sys
import time

shared, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
private = os.path.join(os.path.dirname(shared), "private")
if os.getuid() == 0 or os.path.exists(os.path.join(target, "file")):  # not sandboxed: do nothing
    raise SystemExit("refusing to run outside the sandbox")
IN_CREATE, IN_MOVED_TO, IN_ONLYDIR = 0x100, 0x80, 0x01000000
libc = ctypes.CDLL(None, use_errno=True)
ino = libc.inotify_init1(os.O_NONBLOCK)
watched = {}
for folder in (shared, private):
    wd = libc.inotify_add_watch(ino, folder.encode(), IN_CREATE | IN_MOVED_TO)
    if wd >= 0:
        watched[wd] = folder
done = {"swapped": 0, "planted": 0, "socket_links": 0, "out_links": 0, "folders_seen": 0, "errors": {}}
seen = set()
print(json.dumps({"ready": sorted(watched.values())}), flush=True)


def note(err):
    done["errors"][type(err).__name__] = done["errors"].get(type(err).__name__, 0) + 1


def link_over(path, to):
    """Put a link to ``to`` at ``path`` (atomically over whatever is there)."""
    tmp = f"{path}.{os.getpid()}.lnk"
    try:
        os.symlink(to, tmp)
        os.rename(tmp, path)
        return True
    except OSError as err:
        note(err)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def attack(folder, name):
    path = os.path.join(folder, name)
    done["folders_seen"] += 1
    if done["folders_seen"] % 2 == 1:  # the folder itself: renamed away, a link in its place
        try:
            os.rename(path, path + ".moved")
        except OSError as err:
            note(err)
            return
        if link_over(path, os.path.join(target, "folder")):
            done["swapped"] += 1
        return
    end = time.monotonic() + 0.05
    while time.monotonic() < end:  # until the grader gives the folder to the sandbox's user (or never)
        if all(link_over(os.path.join(path, n), os.path.join(target, "file"))
               for n in ("learner_kernels.py", "kernel_names.json", "out.txt")):
            done["planted"] += 1
            break
    end = time.monotonic() + 3
    while time.monotonic() < end and os.path.isdir(path):
        if link_over(os.path.join(path, "judge.sock"), os.path.join(target, "socket_target")):
            done["socket_links"] += 1
        else:
            time.sleep(0.001)


deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    if not select.select([ino], [], [], 0.2)[0]:
        continue
    data = os.read(ino, 65536)
    while data:
        wd, mask, cookie, size = struct.unpack_from("iIII", data)
        name = data[16:16 + size].split(b"\0", 1)[0].decode()
        data = data[16 + size:]
        folder = watched.get(wd)
        if folder is None or (folder, name) in seen or name.endswith((".lnk", ".moved")):
            continue
        seen.add((folder, name))
        if folder == shared and name == "stop-race":
            deadline = 0
            break
        if name.startswith("test-") and not name.endswith(".out"):
            attack(folder, name)
        elif folder == shared and name.endswith(".out"):
            if link_over(os.path.join(folder, name), os.path.join(target, "file")):
                done["out_links"] += 1
print(json.dumps(done), flush=True)
