"""A forked child (``os.fork``, multiprocessing's fork workers) runs CPU kernels and large host
copies after the parent ran OpenMP teams: before, the child's first parallel region waited
forever for the parent's pool threads, which a fork does not copy. Each case runs in a
subprocess with a timeout, so a hang fails the test instead of the suite."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import multiprocessing as mp, os, sys
    import numpy as np
    import tapegrad as tg
    from tapegrad import memory_ops

    @tg.kernel
    def bump(x: tg.array(dtype=tg.float64)):
        i = tg.tid()
        x[i] = x[i] + 1.0

    N = 1 << 20          # an OpenMP team (past TG_OMP_MIN)
    MIB4 = 4 << 20       # a host copy past the team threshold (2 MiB)

    def work(k):
        x = tg.full(N, float(k), dtype=tg.float64, device="cpu")
        tg.launch(bump, N, inputs=[x])
        a = np.full(MIB4, k % 251, np.uint8)
        b = np.zeros_like(a)
        memory_ops.copy_regions([(b.ctypes.data, a.ctypes.data, a.nbytes)])
        return bool((x.numpy() == k + 1).all() and (b == a).all())

    assert work(1)                     # the parent's teams and pool exist now
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0 if work(2) and work(3) else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    else:
        with mp.get_context("fork").Pool(2) as pool:
            assert pool.map(work, range(2, 6)) == [True] * 4
    assert work(7)                     # the parent still runs its teams
    print("ok")
''')


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("how", ["fork", "pool"])
def test_forked_children_run_kernels_and_large_copies(tmp_path, how):
    path = tmp_path / "forked.py"
    path.write_text(SCRIPT)
    # a session of its own: on a hang the whole group (the script and its hung children) is killed
    proc = subprocess.Popen([sys.executable, str(path), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{how}: the forked child hung in its first OpenMP region")
    assert proc.returncode == 0 and out.strip().endswith("ok"), out + err
