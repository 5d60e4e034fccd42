"""The prober's reads of a thread's /proc stat (in_container/prober.py)."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "lab" / "in_container"))

import prober  # noqa: E402


def test_a_threads_stat_counts_the_pages_it_faults_in():
    own = Path("/proc/thread-self/stat")
    before = prober.read_stat(own)
    pages = 2048
    with mmap.mmap(-1, pages * mmap.PAGESIZE) as fresh:
        for page in range(pages):
            fresh[page * mmap.PAGESIZE] = 1  # each first write faults one page in
    after = prober.read_stat(own)

    assert before is not None and after is not None
    assert after[0] - before[0] >= pages, (before, after)
    assert all(b <= a for b, a in zip(before, after))


def test_a_command_name_with_spaces_and_parentheses_is_skipped(tmp_path: Path):
    # Fields 3.. of proc(5): state, ppid, pgrp, session, tty, tpgid, flags, minflt=7, cminflt,
    # majflt=2, cmajflt, utime=30 ticks, stime=12 ticks.
    stat = tmp_path / "stat"
    stat.write_text("4242 (a (weird) name) S 1 1 1 0 -1 0 7 0 2 0 30 12 0 0 20 0 1 0\n")
    ms_per_tick = 1000 // os.sysconf("SC_CLK_TCK")

    assert prober.read_stat(stat) == [7, 2, 30 * ms_per_tick, 12 * ms_per_tick]
    assert prober.read_stat(tmp_path / "gone") is None


def test_steal_is_read_per_cpu_from_proc_stat(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 100 0 0 0 7 0 0\n"
                    "cpu0 5 0 2 50 0 0 0 3 0 0\n"
                    "cpu1 5 0 3 50 0 0 0 4 0 0\n"
                    "intr 12345 0 0\n"
                    "cpufreq 1\n")
    ms = prober._MS_PER_TICK
    assert prober.read_steal(stat) == [3 * ms, 4 * ms]  # the all-CPU line and the rest skipped
    assert prober.read_steal(tmp_path / "missing") is None
    assert all(value >= 0 for value in prober.read_steal())  # this machine's own /proc/stat
