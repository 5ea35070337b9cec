"""Writes notebooks/08_overlap_scheduling.ipynb (unexecuted); then run radixlab.course.execute on it."""

import nbformat as nbf

SG = "https://github.com/sgl-project/sglang/blob/v0.5.17/python/sglang/"
SCHED = SG + "srt/managers/scheduler.py"
OVU = SG + "srt/managers/overlap_utils.py"
BRP = SG + "srt/managers/scheduler_components/batch_result_processor.py"
CG = SG + "srt/model_executor/runner/decode_cuda_graph_runner.py"

cells = []


def md(s, **meta):
    c = nbf.v4.new_markdown_cell(s.strip("\n"))
    c.metadata.update(meta)
    cells.append(c)


def code(s):
    cells.append(nbf.v4.new_code_cell(s.strip("\n")))


md(f"""
# 08 · Overlap scheduling: the CPU runs ahead, the write-after-read barrier keeps it honest

**Learning goals.** After this notebook you can

- explain SGLang's two event loops, `event_loop_normal` and `event_loop_overlap`, and *see* on a timeline
  the device idle gaps that overlap removes;
- explain how batch N+1 can be scheduled before batch N's tokens exist (future token ids, SGLang's `FutureMap`);
- predict the speed-up from two numbers (CPU time and device time per step) and say when overlap does not help;
- explain, and demonstrate, the write-after-read (WAR) hazard and the barrier that prevents it (lesson 4, Q3);
- place the barrier yourself (exercise 08.1).

**Prerequisites:** 05 (request lifecycle), 07 (the KV pool and the engine). About 20 minutes.

Everything below is measured live on *this* machine. There is no GPU needed: the "device" is a worker
process that owns the model, the way a CUDA stream owns the kernels you launch on it. With a GPU, the same
code runs on CUDA streams (`device_backend="cuda"`).
""")

md(f"""
## 1. The seed's picture, and the real loop

Lesson 4's figure 4-2 draws overlap as two parallel pipelines: a "CPU scheduling thread" preparing batch N+1
on "Stream 0" while the GPU runs batch N on "Stream 1". That is a fine *intuition*, but it is not how SGLang
is built. SGLang v0.5.17 has **one thread and one loop**; the only difference between its two loops is
**when results are processed**:

- [`event_loop_normal`]({SCHED}#L1682): schedule batch N → launch it → **wait** for its tokens → process them → schedule N+1.
  While the CPU processes results and schedules, the device has nothing to do.
- [`event_loop_overlap`]({SCHED}#L1716): schedule batch N → launch it → *then* process batch **N−1**'s results
  (they sit in a `result_queue`) while N runs → schedule N+1. Launches return immediately, because the device
  executes them asynchronously, in order.

The loops below are radixlab's, written for this course over the same three scheduler steps SGLang uses
(`get_next_batch_to_run`, `run_batch`, `process_batch_result`).
""")

code("""
import inspect
from radixlab.engine.overlap import event_loop_normal, event_loop_overlap

print(inspect.getsource(event_loop_normal))
""")

code("""
print(inspect.getsource(event_loop_overlap))
""")

md(f"""
**How can batch N+1 be built before batch N's tokens are known?** A decode step's input is the token the
previous step sampled. In the overlap loop the CPU has not seen that token yet when it schedules N+1. SGLang's
answer is [`FutureMap`]({OVU}#L232): a device-side buffer `output_tokens_buf` indexed by the request's row
(`req_pool_idx`). Each forward *stashes* its sampled ids there ([`stash`]({OVU}#L501)), and the next forward's
inputs are *resolved* on the device ([`resolve_forward_inputs`]({OVU}#L84): `input_ids = output_tokens_buf[req_pool_indices]`).
The CPU only needs to know *which rows* decode, and how long they are: lengths it knows without the tokens.
radixlab's device backends do the same (`radixlab/engine/device_backend.py`).
""")

md("""
## 2. Two loops, one device: the timelines

A synthetic decode workload makes the proportion between the two sides a dial: the scheduler spends `cpu_ms`
of real Python per step, and the device runs `ToyDecodeModel` (a small, seeded network: embedding, `layers` ×
matmul+tanh, greedy argmax). Both loops use the **same** worker process.

*Predict first:* the CPU needs about 3 ms per step and the device about 6 ms. How much faster can the overlap
loop be, at best?
""")

code("""
import matplotlib.pyplot as plt
from radixlab.engine.synthetic import toy_backend, compare_loops
from radixlab.engine.timeline import ideal_overlap_ratio
from radixlab.viz.timeline import draw_timelines, step_frames
from radixlab.benchmarks.overlap import calibrate_layers

plt.rcParams["svg.hashsalt"] = "radixlab"
CPU_MS, BATCH = 3.0, 8
layers = 2 * calibrate_layers("cpu-process", CPU_MS, BATCH, hidden=256)   # device ≈ 2 × CPU
with toy_backend("cpu-process", layers=layers, hidden=256) as device:
    normal, overlap = compare_loops(device, repeats=2, num_reqs=BATCH, max_new_tokens=24, cpu_ms=CPU_MS)
""")

code("""
# stable facts: what the two loops computed
print("same tokens from both loops:", normal.outputs == overlap.outputs)
print("steps per run:", len(normal.timeline.records), "| requests:", len(normal.outputs),
      "| tokens each:", {len(o) for o in normal.outputs})
print("corrupted steps (the barrier is on):", normal.timeline.corrupted_steps() + overlap.timeline.corrupted_steps())
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (timings differ on every run and every machine)
fig = draw_timelines([normal.timeline, overlap.timeline])
plt.show()
c, d = normal.timeline.cpu_time_per_step(), normal.timeline.device_time_per_step()
print(f"measured per step: CPU {c*1e3:.1f} ms, device {d*1e3:.1f} ms (device/CPU = {d/c:.2f})")
print(f"throughput overlap/normal: {overlap.timeline.throughput() / normal.timeline.throughput():.2f}x; "
      f"ideal (c+d)/max(c,d) = {ideal_overlap_ratio(c, d):.2f}x")
print(f"device idle: normal {normal.timeline.device_idle_fraction():.0%}, overlap {overlap.timeline.device_idle_fraction():.0%}")
""")

md("""
**Reading the chart.** Top lane: the CPU (blue = schedule and launch, green = process results, hatched grey =
blocked). Middle: the device (orange = a forward, purple = reading the inputs, batch numbers on the bars). Red
shading = **device idle**: the bubbles. In the normal loop every step leaves a bubble as long as the CPU's work;
in the overlap loop the CPU's work hides under the next forward, and the bubbles shrink to the hand-off latency.

The **ideal ratio** follows from two numbers: the normal loop pays `c + d` per step, the overlap loop
`max(c, d)`. With `d = 2c` that is `3c / 2c = 1.5×`; the best case, `d = c`, gives 2×. On a busy laptop the
measured ratio falls short of the ideal by the cost of waking the worker process and passing messages.

### Step through it

The stepper walks the recorded overlap timeline event by event (its output is not compared by nbval: times vary).
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (a widget over recorded times)
from radixlab.viz import frame_slider
frame_slider(step_frames(overlap.timeline), description="event")
""")

code("""
print(step_frames(overlap.timeline)[-1].split("\\n")[0])   # how many events the stepper shows
""")

md("""
## 3. A thread is not a device

Why a worker *process*? Try the same workload with the device on a *thread* of the notebook's process. Predict:
does the overlap loop still help?
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (timings)
for kind in ("cpu-process", "cpu-thread"):
    with toy_backend(kind, layers=layers, hidden=256) as device:
        n, o = compare_loops(device, repeats=2, num_reqs=BATCH, max_new_tokens=24, cpu_ms=CPU_MS)
    print(f"{kind:<12} overlap/normal {o.timeline.throughput() / n.timeline.throughput():.2f}x, "
          f"device idle {n.timeline.device_idle_fraction():.0%} -> {o.timeline.device_idle_fraction():.0%}")
""")

md("""
Compare the two lines. With a thread, the device's Python (the model's layer loop, the dispatch of every op)
runs under the same GIL as the scheduler's Python, so the two take turns; only the inside of ops that release the
GIL (the matmul kernels) can run beside the scheduler. A process has its own interpreter and shares nothing but
the buffers we put in shared memory. **Overlap is a property of the device, not of the Python code**: a GPU
executes launched kernels on its own; our worker process plays that part on a laptop. It also needs a core of
its own: on a machine busy with other programs, both ratios sink towards 1× (`python -m radixlab bench overlap`
measures both, with repeats).
""")

md("""
## 4. The real engine, both loops

The engine of notebook 07 runs either loop: `Engine(model, disable_overlap_schedule=False)` (SGLang's flag) uses the
overlap loop on a device backend (this worker process here, CUDA streams on a GPU). Both loops make the same
scheduling decisions, and greedy decoding gives the same tokens.
""")

code("""
from radixlab.engine import Engine
from radixlab.model import load_model

model = load_model("tiny", device="cpu")
prompts = ["The radix tree shares", "The radix tree stores", "Overlap hides", "A barrier orders"]
outs = {}
for name, kwargs in {"normal": {}, "overlap": dict(disable_overlap_schedule=False)}.items():
    with Engine(model, **kwargs) as engine:
        outs[name] = [o["output_ids"] for o in engine.generate(prompts, {"max_new_tokens": 12})]
        if name == "overlap":
            engine_timeline = engine.scheduler.timeline
print("identical tokens:", outs["normal"] == outs["overlap"])
print("steps of the overlap run:", [r.kind for r in engine_timeline.steps()][:3], "...", len(engine_timeline.records))
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (timings)
print(engine_timeline.summary())
""")

md("""
The engine's default is the **normal** loop (`disable_overlap_schedule=True`), unlike SGLang's (overlap on). On a GPU,
overlap is free throughput and SGLang is right to turn it on. Here the course's engine is mainly a thing to
*inspect*: the normal loop runs the model in your process, so you can step into it, patch it and read every
tensor; and the tiny model's device step is long against the scheduler's ~1–2 ms of Python, so overlap buys little
(while writing this, `bench overlap` measured 1.07× for 16 requests, against an ideal of 1.05× from its CPU
and device times). Turn it on with one flag when you want to see it.
""")

md(f"""
## 5. The write-after-read hazard, for real

A launch writes the batch's integer inputs (row indices, positions, slots…) into **one reused staging buffer**
(pinned host memory on CUDA; shared memory for our worker), and returns at once. The device reads the buffer
*later*, when it gets to that batch. In the overlap loop, the CPU goes on to schedule batch N+1 and **writes the
same buffer**. If the device has not read batch N's inputs yet, batch N runs with batch N+1's inputs. Writing
after a pending read: a **WAR** hazard.

Races are rare and never the same twice, which is bad for teaching and for nbval. So the backend has an
**adversarial** mode: the device reads a launch's inputs *as late as the CPU allows*, when the CPU launches the
next batch or blocks waiting on this one (a handshake of messages). It is a legal, if slow, device: a correct
loop must survive it. Every launch carries a checksum of what the CPU wrote, the device reports the checksum of
what it read, and a mismatch marks the step corrupted.

First, without the barrier:
""")

code("""
from radixlab.engine.synthetic import run_toy

with toy_backend("cpu-process", layers=2, hidden=32, adversarial=True) as device:
    reference = run_toy("normal", device, num_reqs=4, max_new_tokens=8, cpu_ms=0.0)
    unsafe = run_toy("overlap", device, num_reqs=4, max_new_tokens=8, cpu_ms=0.0, war_barrier=False)
    safe = run_toy("overlap", device, num_reqs=4, max_new_tokens=8, cpu_ms=0.0, war_barrier=True)

print("no barrier:   corrupted steps", unsafe.timeline.corrupted_steps())
print("              inputs each step actually read:", [r.consumed_step for r in unsafe.timeline.steps()])
print("              tokens equal the normal loop's:", unsafe.outputs == reference.outputs)
print("with barrier: corrupted steps", safe.timeline.corrupted_steps(),
      "| tokens equal the normal loop's:", safe.outputs == reference.outputs)
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (picture of the two runs; corrupted batches are numbered in red)
fig = draw_timelines([unsafe.timeline, safe.timeline], labels=["no barrier", "with the barrier"])
plt.show()
""")

md(f"""
Every batch but the last ran on its successor's inputs, and the tokens are wrong, on every run. With the
barrier, nothing is corrupted. The barrier is one wait: **before the CPU overwrites shared inputs, wait until the
device has read the previous batch's**, and not a moment longer. It does *not* wait for the batch to finish:
reading the inputs happens at the start of a forward, so the CPU is released early and overlap survives.

In SGLang, [`_apply_war_barrier`]({SCHED}#L1664) runs right after each launch. On CUDA it does not block the host:
the scheduler's *stream* waits (`schedule_stream.wait_event`) on a read-done event that the forward records
[right after it has snapshotted its inputs]({CG}#L1232), so every later write the scheduler enqueues is ordered
after the read. Our CUDA backend's staging buffer is written by the *host* into pinned memory, so its barrier is a
host wait on the same kind of event (`inputs_read.synchronize()`); the CPU worker's barrier waits for the worker's
"read" message. The engine also snapshots the request rows (`req_to_token`) during that read, because result
processing and the next schedule rewrite rows.
""")

md("""
## Exercise 08.1 — place the barrier

`run_batch(device, batch, in_flight)` writes `batch.fields` into the staging buffer and launches the batch.
`in_flight` is the launch the device may still be reading (`None` for the first batch). The tools:

- `device.write_inputs(batch.step, batch.fields)` → a layout (this *writes the shared buffer*);
- `device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)` → a `Launch`;
- `in_flight.wait_inputs_read()`: returns once the device has read `in_flight`'s inputs;
- `in_flight.result()`: returns once `in_flight`'s tokens are on the host (a full sync).

Complete `run_batch` so that no batch ever reads another batch's inputs **and** the loop still overlaps.
The check runs the overlap loop with your `run_batch` on the adversarial device.
""")

code('''
def run_batch(device, batch, in_flight):
    ### BEGIN SOLUTION
    if in_flight is not None:
        in_flight.wait_inputs_read()      # WAR barrier: the device has consumed the buffer we reuse
    ### END SOLUTION
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)
''')

code("""
from radixlab.course.ex_overlap import check_run_batch

check_run_batch(run_batch)
""")

md("""
*Follow-up (mapping point):* which object plays `in_flight.wait_inputs_read()` in SGLang, which event does it wait
on, and on which stream? Why would `in_flight.result()` in its place be correct but slow?
""")

md("""
## 6. Lesson 4, Q3

**Q3.** *Why does overlap scheduling need a WAR barrier? Isn't it enough, in Python, to process the previous
batch first and then write the next one?*

Your answer:
""")

md(f"""
**Reference answer (instructor).**

1. *Objects:* the scheduler (CPU), the forward stream (device), and the buffers both touch: the staging buffer
   of batch inputs (pinned host memory), the request-to-token table `req_to_token`, the `FutureMap`'s
   `output_tokens_buf`.
2. *State change:* a launch only *enqueues* work; the Python call returns at once. Batch N's kernels read its
   inputs later, when the stream reaches them. In the overlap loop the CPU meanwhile processes N−1 and
   schedules N+1, which writes the same buffers (new positions and slots, rows freed by finished requests and
   reused by new ones).
3. *Correctness chain:* Python's statement order says nothing about the device's order. "Process N−1, then write
   N+1" only waits for N−1, not for N's reads, so batch N can read N+1's inputs: wrong tokens, or out-of-range
   slots, and never reproducibly. (Section 5 made it reproducible: every batch ran with its successor's inputs.)
4. *Cost chain:* a full `synchronize()` (or `result()`) before each write is correct, but it serialises CPU and
   device and brings back the bubbles of the normal loop (exercise 08.1's third wrong answer).
5. *The fix:* record an event when the device has *read* batch N's inputs and make the next write wait for that
   event only: SGLang's [`_apply_war_barrier`]({SCHED}#L1664) makes the schedule stream wait on the read-done
   event, which fires early in the forward, so the CPU keeps running ahead.
""", tags=["solution"])

md("""
### How lesson 4's 10 points add up

| part | points | where |
| --- | --- | --- |
| code: exercise 04.1 `longest_cached_prefix` | 4 | notebook 04 |
| Q1 RadixAttention vs PagedAttention | 2 | notebook 04 |
| Q2 `extra_key` as a correctness and security boundary | 2 | notebook 04 |
| **Q3 the WAR barrier** | **2** | **this notebook** |
| total (pass: at least 8) | 10 | |

Exercise 08.1 is practice for Q3 and is scored on its own (the course rubric: main path, hidden cases, and the
mapping follow-up above); it is not one of lesson 4's 10 points.
""")

md("""
## 7. Honest limits, measured

**(a) When the device step is short against scheduling, overlap cannot help much**: the ideal ratio is
`(c + d) / max(c, d)`, 2× at `d = c` and falling towards 1× on both sides. The benchmark's two idle targets pin
the useful range down: the normal loop idles `c / (c + d)` of the time, over 30 % only while `d < 2.3 c`; the overlap
loop idles `max(0, c − d) / c` plus the hand-off between steps, under 10 % only once `d` is comfortably above `c`.
Both hold together for `d` ≈ 1.5–2 × `c`. Measured here over a few proportions (`python -m radixlab bench overlap`
runs the full curve):
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (timings)
from radixlab.benchmarks.overlap import curve
from radixlab.viz.timeline import plot_ratio_curve

rows = curve("cpu-process", cpu_ms=2.0, batch=8, hidden=256, steps=16, repeats=1, proportions=(0.5, 1.0, 2.0, 4.0),
             progress=False)
fig = plot_ratio_curve(rows)
plt.show()
for r in rows:
    print(f"device/CPU {r['proportion']:.2f}: measured {r['ratio']:.2f}x, ideal {r['ideal']:.2f}x")
""")

md("""
**(b) When the CPU needs the previous step's tokens before it can build the next batch**, there is nothing to
overlap: grammar-constrained decoding builds the next step's token mask from the tokens just sampled, so SGLang
syncs there (`need_grammar_sync` in `is_disable_overlap_for_batch`); likewise a request whose next prompt depends
on what the model just said. The toy scheduler can be told it needs the previous tokens:
""")

code("""
# NBVAL_IGNORE_OUTPUT
# (timings)
with toy_backend("cpu-process", layers=layers, hidden=256) as device:
    for needs in (False, True):
        n, o = compare_loops(device, num_reqs=BATCH, max_new_tokens=16, cpu_ms=CPU_MS, needs_previous_tokens=needs)
        print(f"needs the previous tokens: {needs!s:<5}  overlap/normal {o.timeline.throughput() / n.timeline.throughput():.2f}x")
""")

md("""
**(c) Overlap changes *when* the CPU learns things**, and that has costs a timeline does not show:

- A request that stops on EOS in step N−1 was already launched in step N: one wasted decode slot per finished
  request (SGLang frees its `out_cache_loc` the same way).
- The tree adopts a prefill's KV (`cache_unfinished_req`) when the result is *processed*, one step later. A
  request admitted in that step finds less to share. Measured on notebook 07's half-page example:
""")

code("""
def b_cached(**kwargs):
    a, b = [10, 20, 30, 40, 50, 60], [10, 20, 30, 40, 50, 99, 98, 97]
    with Engine(model, page_size=4, max_prefill_tokens=6, **kwargs) as engine:
        return engine.generate([a, b], {"max_new_tokens": 4})[1]["meta_info"]["cached_tokens"]

print("B's cached tokens, normal loop: ", b_cached())
print("B's cached tokens, overlap loop:", b_cached(disable_overlap_schedule=False))
""")

md(f"""
SGLang also turns overlap off between two consecutive prefill batches when asked to (`SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`,
[`is_disable_overlap_for_batch`]({SCHED}#L1789)), to get the first batch's tokens out sooner.

On a GPU, `python -m radixlab bench overlap --device cuda --trace overlap_trace.json` also saves a `torch.profiler`
trace of one normal and one overlap run: open <https://ui.perfetto.dev> and drop the file in (or `chrome://tracing`),
and look for the gaps between kernels on the stream row.

## Where this lives in SGLang

SGLang v0.5.17 (`python/sglang/srt/managers/scheduler.py` unless noted):

| here | SGLang |
| --- | --- |
| `event_loop_normal` (`engine/overlap.py`, `OverlapScheduler._run`) | [`event_loop_normal`]({SCHED}#L1682) |
| `event_loop_overlap`, its `result_queue` | [`event_loop_overlap`]({SCHED}#L1716) |
| `Engine(disable_overlap_schedule=...)` | [`enable_overlap`]({SCHED}#L414) from `server_args.disable_overlap_schedule` |
| `Launch.wait_inputs_read` (the WAR barrier) | [`_apply_war_barrier`]({SCHED}#L1664), read-done event [`war_fastpath_read_done_event`]({CG}#L1232) |
| the device's `output_tokens_buf` (future token ids) | [`FutureMap`]({OVU}#L232), [`resolve_forward_inputs`]({OVU}#L84) |
| CUDA backend: forward stream, copy stream | [`forward_stream.wait_stream`]({SCHED}#L3566), [`copy_stream`]({SCHED}#L1457) |
| `Launch.result()` | [`copy_done`]({BRP}#L201) `.synchronize()` before processing |
| `needs_previous_tokens`, consecutive prefills | [`is_disable_overlap_for_batch`]({SCHED}#L1789) |

## Recap

- One loop, deferred processing: launch N, process N−1 while N runs. Decode inputs are future token ids resolved
  on the device.
- The gain is `(c + d) / max(c, d)`, at most 2×, largest when device and CPU steps are about equal; nothing to gain
  when the CPU must see the last tokens first.
- Overlap needs a device that really runs on its own: a CUDA stream, or a process; a thread shares the GIL.
- Reused inputs + asynchronous reads = a WAR hazard. Wait for *the read* of the previous batch before writing, not
  for the whole batch.
""")

nb = nbf.v4.new_notebook()
nb.cells = cells
nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
nb.metadata["language_info"] = {"name": "python"}
nbf.write(nb, "notebooks/08_overlap_scheduling.ipynb")
print("wrote notebooks/08_overlap_scheduling.ipynb with", len(cells), "cells")
