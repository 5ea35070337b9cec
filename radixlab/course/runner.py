"""Run a submission in a fresh kernel for the grader: time limits, errors allowed, verdicts read live.

``execute`` runs every code cell with a per-cell and a total time limit, interrupts a cell that runs
past its limit, survives a dead or stuck kernel, and after every cell reads
``radixlab.course.check.RESULTS`` from the kernel, so a later hang or crash loses no earlier verdict.
Used by ``radixlab.course.grade``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import nbformat

MARK = "@@RADIXLAB-GRADER-RESULTS@@"
COLLECT = ("import sys as _rl_sys, json as _rl_json\n"
           "_rl_m = _rl_sys.modules.get('radixlab.course.check')\n"
           f"print({MARK!r} + _rl_json.dumps([r.to_dict() for r in getattr(_rl_m, 'RESULTS', [])], default=str))")


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return output.get("data", {}).get("text/plain", "")


@dataclass
class Execution:
    seconds: float = 0.0
    cells_run: int = 0
    errors: list[dict] = field(default_factory=list)  # {cell, ename, evalue}
    stopped: str = ""  # why execution stopped early ("" when it ran to the end)
    results: list[dict] = field(default_factory=list)  # RESULTS as dicts, hidden cases included


def execute(nb: nbformat.NotebookNode, cell_timeout: int, total_timeout: int) -> Execution:
    """Run ``nb`` (mutated: outputs replaced) in a fresh kernel; never raises for student errors."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: the command line
        return asyncio.run(_execute(nb, cell_timeout, total_timeout))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from a notebook: its loop is busy
        return pool.submit(asyncio.run, _execute(nb, cell_timeout, total_timeout)).result()


async def _execute(nb: nbformat.NotebookNode, cell_timeout: int, total_timeout: int) -> Execution:
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    ex, index = Execution(), -1
    replies: dict[int, dict] = {}
    workdir = tempfile.mkdtemp(prefix="radixlab-grade-")
    os.environ.setdefault("RADIXLAB_DEVICE", "cpu")
    client = NotebookClient(nb, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                            timeout=cell_timeout, iopub_timeout=2, shutdown_kernel="immediate",
                            error_on_timeout={"ename": "Timeout", "evalue": "", "traceback": []},
                            resources={"metadata": {"path": workdir}},
                            on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(cell_index, execute_reply))
    t0 = time.monotonic()
    try:
        async with client.async_setup_kernel(stderr=subprocess.DEVNULL):  # no kernel warnings per student
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                left = total_timeout - (time.monotonic() - t0)
                if left < 1:
                    ex.stopped = f"total time limit ({total_timeout} s) reached before cell {index}"
                    break
                limit = int(max(1, min(cell_timeout, left)))
                client.timeout = limit
                started = time.monotonic()
                try:
                    await asyncio.wait_for(client.async_execute_cell(cell, index), limit + 30)
                except asyncio.TimeoutError:
                    ex.stopped = f"cell {index} could not be stopped after {limit} s; kernel abandoned"
                    break
                ex.cells_run += 1
                content = (replies.pop(index, None) or {}).get("content", {})
                if content.get("status") == "error":
                    if content.get("ename") == "Timeout" or time.monotonic() - started >= limit:
                        ex.errors.append({"cell": index, "ename": "Timeout", "evalue": f"ran past {limit} s; interrupted"})
                    else:
                        ex.errors.append({"cell": index, "ename": content.get("ename", "Error"),
                                          "evalue": str(content.get("evalue", ""))[:300]})
                if not await _collect(client, ex):
                    ex.stopped = (f"kernel still busy after cell {index} was interrupted "
                                  "(does the code catch KeyboardInterrupt?)")
                    break
    except DeadKernelError:
        ex.stopped = f"the kernel died (at cell {index})"
    except Exception as exc:  # a broken kernel start etc.: still a report, never a crash
        ex.stopped = f"execution failed: {type(exc).__name__}: {exc}"
    ex.seconds = round(time.monotonic() - t0, 2)
    shutil.rmtree(workdir, ignore_errors=True)
    return ex


async def _collect(client, ex: Execution) -> bool:
    """Read RESULTS from the kernel into ``ex.results``; False when the kernel does not answer."""
    probe = nbformat.v4.new_code_cell(COLLECT)
    client.timeout = 15
    client.nb.cells.append(probe)  # nbclient stores the executed cell back at its index
    try:
        await asyncio.wait_for(client.async_execute_cell(probe, len(client.nb.cells) - 1, store_history=False), 45)
    except asyncio.TimeoutError:
        return False
    finally:
        client.nb.cells.pop()
    text = "".join(_text(o) for o in probe.outputs)
    if MARK not in text:  # the probe itself timed out: the kernel is still stuck in the student's cell
        return False
    ex.results = json.loads(text.split(MARK, 1)[1].strip().splitlines()[0])
    return True
