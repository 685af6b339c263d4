"""What the PyTorch baselines of `megatron bench` (torch_gpt2.py, torch_moe.py) share: the device
set-up and the matmul peak, the optimizer, the timed training loop with its torch.compile
fallback, the memory numbers, the report (a table and the JSON line) and the out-of-memory exit.

The scripts run as `python3 bench/baselines/X.py` (or under torchrun, which starts them the same
way) and import this module as `import bench_common`: Python puts a script's own folder first on
sys.path.
"""
import contextlib
import json
import math
import resource
import statistics
import sys
import time

import torch


def add_step_args(p, micro_batch_size):
    """The argparse flags of a run's steps: --micro-batch-size (default micro_batch_size), --iters,
    --warmup."""
    p.add_argument("--micro-batch-size", type=int, default=micro_batch_size)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)


def add_device_args(p):
    """The argparse flags of the device: --peak-size (the caller fills in its default, which
    depends on --device), --device (cuda when there is one), --no-compile."""
    p.add_argument("--peak-size", type=int, help="side of the peak matmul (8192 on cuda, 1024 on cpu)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--no-compile", action="store_true", help="eager mode (no torch.compile)")


def setup_device(device, threads):
    """torch.set_num_threads(threads) when given; on CUDA fp32 accumulation everywhere, as
    megatron.c's cuBLASLt calls (CUBLAS_COMPUTE_32F)."""
    if threads:
        torch.set_num_threads(threads)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def measure_peak(device, n):
    """TFLOP/s of an (n, n) x (n, n) product on random inputs: bf16 on CUDA, fp32 on the CPU.
    Measured before the model exists; on CUDA the caching allocator is emptied and its peak
    statistics reset afterwards, so that the memory numbers are the model's."""
    g = torch.Generator(device=device).manual_seed(1234)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.rand(n, n, device=device, generator=g).mul_(2).sub_(1).to(dtype)
    b = torch.rand(n, n, device=device, generator=g).mul_(2).sub_(1).to(dtype)
    times = []
    if device == "cuda":
        for _ in range(10):
            c = torch.matmul(a, b)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
        for s, e in ev:
            s.record()
            c = torch.matmul(a, b)
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in ev]
    else:
        for i in range(7):
            t0 = time.perf_counter()
            c = torch.matmul(a, b)
            if i >= 2:
                times.append(time.perf_counter() - t0)
    del a, b, c
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return 2.0 * n**3 / statistics.median(times) / 1e12


def autocast(device):
    """The context of the forward pass: bf16 autocast on CUDA (the parameters stay fp32, the
    masters), plain fp32 on the CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)


def adamw(decay, no_decay, lr, device):
    """AdamW at a constant lr, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the parameters in
    decay and none on those in no_decay (as Megatron: the norms and biases), fused on CUDA."""
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=(device == "cuda"))


def timed_steps(step, warmup, iters, script, to_eager=None, describe=str, after=None):
    """warmup untimed training steps, then iters steps each timed by the host clock around the whole
    step(), which ends with its read-back of the loss (one synchronisation per step, as megatron.c's
    mg_trainer_step). step() returns the loss, or a list of losses; each must be finite, else
    RuntimeError("the loss of step N is <describe(value)>"). after(i, value, seconds), when given,
    follows each step (i from 0).

    torch.compile fails, if at all, in the first step: given to_eager (the model is compiled), a
    failure there other than out of memory is said on stderr ("SCRIPT: torch.compile failed (...);
    running eager"), torch._dynamo.reset() and to_eager() (the caller's way back to the eager model,
    its gradients zeroed) undo the compilation and the step runs again.

    Returns (the timed steps' seconds, every step's value, the warm-up's seconds (0.0 without
    warm-up), the compile error's text (None when none))."""
    compile_error = None

    def first_step():
        nonlocal compile_error
        try:
            return step()
        except Exception as e:  # noqa: BLE001 - any failure inside Dynamo/Inductor
            if to_eager is None or isinstance(e, torch.cuda.OutOfMemoryError):
                raise
            compile_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
            print(f"{script}: torch.compile failed ({compile_error}); running eager", file=sys.stderr)
            torch._dynamo.reset()
            to_eager()
            return step()

    times, values = [], []
    warmup_s = 0.0
    t_warm = time.perf_counter()
    for i in range(warmup + iters):
        if i == warmup and warmup:
            warmup_s = time.perf_counter() - t_warm
        t0 = time.perf_counter()
        value = first_step() if i == 0 else step()
        dt = time.perf_counter() - t0
        if not all(math.isfinite(x) for x in (value if isinstance(value, (list, tuple)) else [value])):
            raise RuntimeError(f"the loss of step {i + 1} is {describe(value)}")
        values.append(value)
        if i >= warmup:
            times.append(dt)
        if after:
            after(i, value, dt)
    return times, values, warmup_s, compile_error


def memory_gib(device, model):
    """(peak, allocated, reserved) GiB after the timed steps. CUDA: peak = the device memory in use
    as the driver sees it (total - free from torch.cuda.mem_get_info, so the CUDA context and the
    caching allocator's reserve count, as they do for megatron.c's number), allocated and reserved =
    torch.cuda.max_memory_allocated and max_memory_reserved. CPU: peak = the peak resident set, the
    other two 4 x the parameters' bytes."""
    gib = 1024.0**3
    if device == "cuda":
        free_b, total_b = torch.cuda.mem_get_info()
        return ((total_b - free_b) / gib, torch.cuda.max_memory_allocated() / gib,
                torch.cuda.max_memory_reserved() / gib)
    params_gib = sum(p.numel() * p.element_size() for p in model.parameters()) * 4 / gib
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib, params_gib, params_gib


def report(r, json_out, above, between, setting="", loss_tail=""):
    """The summary table of the result r (megatron bench's names): on stderr with json_out, then
    the JSON line r on stdout; else the table on stdout. The first line says what ran (setting is
    added to its parenthesis), then the lines in above, the step time, the lines in between, the
    matmul peak, MFU, memory and the loss line (loss_tail after its first -> last)."""
    out = sys.stderr if json_out else sys.stdout
    print(f"torch baseline: {r['model']} on {r['device']} ({r['dtype']}{', compiled' if r['compile'] else ', eager'}"
          f"{setting}), {r['num_layers']} layers, hidden {r['hidden_size']}, {r['num_attention_heads']} heads, "
          f"seq {r['seq_length']}, micro-batch {r['micro_batch_size']}, vocab {r['vocab_size']}", file=out)
    for line in above:
        print(line, file=out)
    print(f"  step time          {r['ms_per_step']:.2f} ms mean, {r['ms_per_step_median']:.2f} ms median "
          f"({r['iters']} steps after {r['warmup']} warm-up, {r['warmup_s']:.1f} s)", file=out)
    for line in between:
        print(line, file=out)
    print(f"  {r['dtype']} matmul peak  {r['peak_tflops']:.2f} TFLOP/s ({r['peak_n']}^3, torch.matmul, measured now)",
          file=out)
    print(f"  MFU                {100 * r['mfu']:.1f}%", file=out)
    print(f"  memory             {r['mem_peak_gib']:.2f} GiB peak, allocated {r['mem_alloc_gib']:.2f} GiB, "
          f"reserved {r['mem_reserved_gib']:.2f} GiB", file=out)
    print(f"  loss               {r['loss_first']:.4f} (first step) -> {r['loss_last']:.4f} (last){loss_tail}",
          file=out)
    out.flush()
    if json_out:
        print(json.dumps(r), flush=True)


@contextlib.contextmanager
def exit_on_oom(script, micro_batch_size):
    """Out of memory inside the block: a stderr line "SCRIPT: error: out of memory at micro-batch N:
    <the error's first line>" (the bench scripts look for "out of memory") and exit status 3."""
    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"{script}: error: out of memory at micro-batch {micro_batch_size}: {first}", file=sys.stderr)
        sys.exit(3)
