"""Parse a child's stderr into stall dumps, faulthandler blocks and markers.

Formats parsed here (written by glm53_offload/stall_dump.py):

  [event-loop-stall] pid=P dump N: event loop stalled for A s (threshold T s);
      loop thread used C s CPU since its last tick; K threads; <UTC ISO time>
  [event-loop-stall] --- thread 0x<16 hex> 'name' (event loop), most recent call last:
  [event-loop-stall]   File "f", line L, in func
  [event-loop-stall]     source line
  [event-loop-stall] pid=P end of dump N
  [event-loop-stall] pid=P event loop recovered after S s (D dumps)

plus faulthandler's blocks (the backstop's SIGALRM dump: thread and frame lines
with no header; faulthandler's own timer would head them ``Timeout (h:mm:ss)!``)
and the child's
``MARK name utc=... value`` lines (stall_dump_child.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Dict, List, Optional

PREFIX = "[event-loop-stall] "
HEADER_RE = re.compile(
    r"pid=(?P<pid>\d+) dump (?P<num>\d+): event loop stalled for "
    r"(?P<age>[\d.]+)s \(threshold (?P<thr>[\d.]+)s\); loop thread used "
    r"(?P<cpu>[\d.]+|unknown)s CPU since its last tick; (?P<threads>\d+) threads; "
    r"(?P<utc>\S+)$"
)
THREAD_RE = re.compile(
    r"--- thread 0x(?P<ident>[0-9a-f]{16}) (?P<name>.+?)(?P<loop> \(event loop\))?, "
    r"most recent call last:$"
)
FRAME_RE = re.compile(r'  File "(?P<file>.*)", line (?P<line>\d+), in (?P<func>.+)$')
SOURCE_RE = re.compile(r"    (?P<src>.*)$")
END_RE = re.compile(r"pid=(?P<pid>\d+) end of dump (?P<num>\d+)$")
RECOVERED_RE = re.compile(
    r"pid=(?P<pid>\d+) event loop recovered after (?P<secs>[\d.]+) s"
)
ARMED_RE = re.compile(
    r"event-loop stall dump armed: stall=(?P<stall>\S+)s repeat=(?P<repeat>\S+)s "
    r"\(pid (?P<pid>\d+), loop thread 0x(?P<ident>[0-9a-f]+)\)"
)
NOT_ARMED_TEXT = "event-loop stall dump not armed"
FAULT_HEADER_RE = re.compile(r"^Timeout \((?P<timeout>[\d:.]+)\)!$")
FAULT_THREAD_RE = re.compile(
    r"^(?:Current thread|Thread) 0x(?P<ident>[0-9a-f]+) \(most recent call first\):$"
)
FAULT_FRAME_RE = re.compile(
    r'^  File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.+)$'
)
MARK_RE = re.compile(r"^MARK (?P<name>\S+) utc=(?P<utc>\S+)(?: (?P<value>.*))?$")


@dataclasses.dataclass
class Frame:
    file: str
    line: int
    func: str
    source: str = ""


@dataclasses.dataclass
class ThreadStack:
    ident: int
    name: str
    is_loop: bool
    frames: List[Frame] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Dump:
    line_no: int
    pid: int
    number: int
    age: float
    threshold: float
    loop_cpu: Optional[float]
    thread_count: int
    utc: datetime.datetime
    threads: List[ThreadStack] = dataclasses.field(default_factory=list)
    end_line_no: Optional[int] = None


@dataclasses.dataclass
class FaultBlock:
    line_no: int
    timeout: Optional[str]  # None: a signal's dump (no Timeout header)
    threads: List[ThreadStack] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Recovery:
    line_no: int
    pid: int
    seconds: float


@dataclasses.dataclass
class Mark:
    line_no: int
    name: str
    utc: datetime.datetime
    value: str


@dataclasses.dataclass
class Report:
    lines: List[str]
    dumps: List[Dump]
    fault_blocks: List[FaultBlock]
    recoveries: List[Recovery]
    armed: List[re.Match]
    not_armed: List[str]
    marks: Dict[str, Mark]
    prefixed: List[int]  # line numbers of every prefixed line

    def mark(self, name: str) -> Optional[Mark]:
        return self.marks.get(name)

    def dump_line_nos(self) -> List[int]:
        """Prefixed lines that belong to dumps (all prefixed but recoveries)."""
        recovery = {r.line_no for r in self.recoveries}
        return [n for n in self.prefixed if n not in recovery]


def parse(text: str) -> Report:
    lines = text.splitlines()
    report = Report(lines, [], [], [], [], [], {}, [])
    dump: Optional[Dump] = None
    fault: Optional[FaultBlock] = None
    for n, raw in enumerate(lines):
        if fault is not None:
            if _extend_fault(fault, raw):
                continue
            fault = None
        if raw.startswith(PREFIX):
            report.prefixed.append(n)
            dump = _parse_prefixed(report, dump, n, raw[len(PREFIX) :])
            continue
        header = FAULT_HEADER_RE.match(raw)
        if header:
            fault = FaultBlock(n, header["timeout"])
            report.fault_blocks.append(fault)
            continue
        if FAULT_THREAD_RE.match(raw):
            fault = FaultBlock(n, None)
            report.fault_blocks.append(fault)
            _extend_fault(fault, raw)
            continue
        mark = MARK_RE.match(raw)
        if mark:
            report.marks[mark["name"]] = Mark(
                n, mark["name"], _utc(mark["utc"]), mark["value"] or ""
            )
            continue
        armed = ARMED_RE.search(raw)
        if armed:
            report.armed.append(armed)
        if NOT_ARMED_TEXT in raw:
            report.not_armed.append(raw)
    return report


def _parse_prefixed(
    report: Report, dump: Optional[Dump], n: int, text: str
) -> Optional[Dump]:
    header = HEADER_RE.match(text)
    if header:
        cpu = header["cpu"]
        dump = Dump(
            line_no=n,
            pid=int(header["pid"]),
            number=int(header["num"]),
            age=float(header["age"]),
            threshold=float(header["thr"]),
            loop_cpu=None if cpu == "unknown" else float(cpu),
            thread_count=int(header["threads"]),
            utc=_utc(header["utc"]),
        )
        report.dumps.append(dump)
        return dump
    recovered = RECOVERED_RE.match(text)
    if recovered:
        report.recoveries.append(
            Recovery(n, int(recovered["pid"]), float(recovered["secs"]))
        )
        return None
    if dump is None:
        return None
    end = END_RE.match(text)
    if end:
        dump.end_line_no = n
        return None
    thread = THREAD_RE.match(text)
    if thread:
        dump.threads.append(
            ThreadStack(int(thread["ident"], 16), thread["name"], bool(thread["loop"]))
        )
        return dump
    frame = FRAME_RE.match(text)
    if frame and dump.threads:
        dump.threads[-1].frames.append(
            Frame(frame["file"], int(frame["line"]), frame["func"])
        )
        return dump
    source = SOURCE_RE.match(text)
    if source and dump.threads and dump.threads[-1].frames:
        dump.threads[-1].frames[-1].source = source["src"]
    return dump


def _extend_fault(fault: FaultBlock, raw: str) -> bool:
    thread = FAULT_THREAD_RE.match(raw)
    if thread:
        fault.threads.append(ThreadStack(int(thread["ident"], 16), "", False))
        return True
    frame = FAULT_FRAME_RE.match(raw)
    if frame and fault.threads:
        fault.threads[-1].frames.append(
            Frame(frame["file"], int(frame["line"]), frame["func"])
        )
        return True
    return raw.strip() == "" or raw.strip() == "..."


def _utc(text: str) -> datetime.datetime:
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value
