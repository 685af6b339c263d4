#!/usr/bin/env python3
"""Writes tests/golden/lr_schedule/megatron_lr_scheduler.json: Megatron's per-iteration learning rates, weight
decay, global batch sizes and microbatch counts for a set of schedule configurations, from
Megatron-LM's own scheduler and microbatch-calculator source.

Run from the repository root (torch must be importable: the scheduler module imports it):

    python3 tools/reference/megatron_lr_scheduler.py [--megatron-git DIR]

DIR is a Megatron-LM git repository (bare is fine; default /work/.mirror/NVIDIA+Megatron-LM/repo).
It takes about two seconds and writes identical bytes on every run. CI never runs it.

Imported unchanged (their text read with `git show`, written into a temporary package):
  * megatron/core/optimizer_param_scheduler.py at MEGATRON_COMMIT: OptimizerParamScheduler
    (__init__'s asserts, get_lr, get_wd, step), driven with stand-in param groups;
  * megatron/core/num_microbatches_calculator.py at RAMPUP_COMMIT, the last commit whose
    calculator has RampupBatchsizeNumMicroBatchesCalculator (532ad926b4, 2026-04-21, replaced it by
    --step-batch-size-schedule; at MEGATRON_COMMIT --rampup-batch-size is accepted and ignored with
    a deprecation warning). megatron.c follows the rampup semantics.
Stubbed: megatron.core.utils.log_single_rank (logging only).

Restated (Megatron-LM's training code, not importable without torch.distributed and a model):
  * training.get_optimizer_param_scheduler (MEGATRON_COMMIT): steps in samples; iteration-based
    lengths are iterations x global batch size; wd_incr_steps = train_iters x gbs or train_samples;
  * training.update_train_iters (RAMPUP_COMMIT): train_iters of sample-based training, walking the
    rampup phase;
  * arguments.validate_args: constant --weight-decay-incr-style sets start = end = --weight-decay;
  * optimizer._get_param_groups with get_standard_config_overrides: three groups here, the default
    one, the no-weight-decay one (biases and 1-D: wd_mult 0) and, with --decoupled-lr, the
    embedding/output one ({'max_lr': decoupled_lr, 'min_lr': decoupled_min_lr or min_lr});
  * the training loop (RAMPUP_COMMIT): each iteration update_num_microbatches(consumed,
    consistency_check=True); the optimizer steps with the lr and weight decay the scheduler set at
    its previous step(); then step(increment = num_microbatches x mbs x dp); consumed samples grow
    by the same; the log line shows the first default group's lr after the step.

Output, one case per line: {"megatron_commit", "rampup_commit", "cases": [{"name", "args" (the
schedule flags, appended by the test to a fixed tiny model), "dp" (data-parallel size),
"train_iters", "every" (1: every iteration recorded, else a sample: every `every`-th iteration and
each one whose global batch size differs from the previous one's), "steps": [[iteration (1-based),
global batch size, microbatches per rank, consumed samples after the step, lr used by the update,
decoupled lr used (= lr without --decoupled-lr), weight decay used (params with weight decay),
lr logged], ...]}]}.
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import types

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
RAMPUP_COMMIT = "532ad926b4f2e50770841c120efcf70f686f74d9^"
OUT = os.path.join("tests", "golden", "lr_schedule", "megatron_lr_scheduler.json")


def git_show(repo, rev, path):
    return subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def load_megatron(repo):
    """The two modules, imported from a temporary package holding their unchanged text."""
    root = tempfile.mkdtemp(prefix="mg_sched_ref_")
    core = os.path.join(root, "megatron", "core")
    os.makedirs(core)
    for d in (os.path.join(root, "megatron"), core):
        open(os.path.join(d, "__init__.py"), "w").close()
    with open(os.path.join(core, "utils.py"), "w") as f:
        f.write("def log_single_rank(logger, *args, rank=0, **kwargs):\n    pass\n")
    files = {"optimizer_param_scheduler.py": MEGATRON_COMMIT,
             "num_microbatches_calculator.py": RAMPUP_COMMIT}
    for name, rev in files.items():
        with open(os.path.join(core, name), "w") as f:
            f.write(git_show(repo, rev, "megatron/core/" + name))
    sys.path.insert(0, root)
    sched = importlib.import_module("megatron.core.optimizer_param_scheduler")
    calc = importlib.import_module("megatron.core.num_microbatches_calculator")
    return sched, calc


def parse_args(argv):
    """The schedule flags of a case, with Megatron's defaults (arguments.py)."""
    p = argparse.ArgumentParser()
    p.add_argument("--train-iters", type=int)
    p.add_argument("--train-samples", type=int)
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--global-batch-size", type=int)
    p.add_argument("--rampup-batch-size", nargs=3)
    p.add_argument("--lr", type=float)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--decoupled-lr", type=float)
    p.add_argument("--decoupled-min-lr", type=float)
    p.add_argument("--lr-decay-style", default="linear")
    p.add_argument("--lr-wsd-decay-style", default="exponential")
    p.add_argument("--lr-decay-iters", type=int)
    p.add_argument("--lr-decay-samples", type=int)
    p.add_argument("--lr-wsd-decay-iters", type=int)
    p.add_argument("--lr-wsd-decay-samples", type=int)
    p.add_argument("--lr-warmup-fraction", type=float)
    p.add_argument("--lr-warmup-iters", type=int, default=0)
    p.add_argument("--lr-warmup-samples", type=int, default=0)
    p.add_argument("--lr-warmup-init", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--start-weight-decay", type=float)
    p.add_argument("--end-weight-decay", type=float)
    p.add_argument("--weight-decay-incr-style", default="constant")
    a = p.parse_args(argv)
    # arguments.validate_args
    if a.weight_decay_incr_style == "constant":
        assert a.start_weight_decay is None and a.end_weight_decay is None
        a.start_weight_decay = a.weight_decay
        a.end_weight_decay = a.weight_decay
    return a


class StubOptimizer:
    def __init__(self, groups):
        self.param_groups = groups


def param_groups(a):
    """optimizer._get_param_groups with get_standard_config_overrides' keys: default, no-wd, and
    the decoupled embedding/output group (sorted as Megatron sorts them: None key first)."""
    base = {"wd_mult": 1.0, "lr_mult": 1.0, "is_decoupled_lr": False, "max_lr": a.lr,
            "min_lr": a.min_lr}
    groups = [dict(base, default_config=True), dict(base, wd_mult=0.0, default_config=True)]
    if a.decoupled_lr is not None:
        over = {"max_lr": a.decoupled_lr}
        if a.decoupled_min_lr is not None:
            over["min_lr"] = a.decoupled_min_lr
        groups.append(dict(base, default_config=False, **over))
    return groups


def run_case(sched, calc, name, argv, dp, every=1):
    a = parse_args(argv)
    calc.destroy_num_microbatches_calculator()
    calc.init_num_microbatches_calculator(0, a.rampup_batch_size, a.global_batch_size,
                                          a.micro_batch_size, dp, False)
    # training.update_train_iters (RAMPUP_COMMIT)
    if not a.train_iters:
        if a.rampup_batch_size is None:
            a.train_iters = a.train_samples // a.global_batch_size
        else:
            iterations = 0
            consumed = 0
            while consumed <= int(a.rampup_batch_size[2]) and consumed <= a.train_samples:
                calc.update_num_microbatches(consumed, consistency_check=False)
                consumed += calc.get_current_global_batch_size()
                iterations += 1
            calc.update_num_microbatches(0, consistency_check=False)
            if a.train_samples > consumed:
                iterations += (a.train_samples - consumed) // a.global_batch_size
            a.train_iters = iterations
    # training.get_optimizer_param_scheduler (MEGATRON_COMMIT)
    if not a.train_samples:
        if a.lr_decay_iters is None:
            a.lr_decay_iters = a.train_iters
        lr_decay_steps = a.lr_decay_iters * a.global_batch_size
        wd_incr_steps = a.train_iters * a.global_batch_size
        wsd_decay_steps = None
        if a.lr_wsd_decay_iters is not None:
            wsd_decay_steps = a.lr_wsd_decay_iters * a.global_batch_size
        if a.lr_warmup_fraction is not None:
            lr_warmup_steps = a.lr_warmup_fraction * lr_decay_steps
        else:
            lr_warmup_steps = a.lr_warmup_iters * a.global_batch_size
    else:
        if a.lr_decay_samples is None:
            a.lr_decay_samples = a.train_samples
        lr_decay_steps = a.lr_decay_samples
        wd_incr_steps = a.train_samples
        wsd_decay_steps = a.lr_wsd_decay_samples
        if a.lr_warmup_fraction is not None:
            lr_warmup_steps = a.lr_warmup_fraction * lr_decay_steps
        else:
            lr_warmup_steps = a.lr_warmup_samples
    opt = StubOptimizer(param_groups(a))
    s = sched.OptimizerParamScheduler(
        opt, init_lr=a.lr_warmup_init, max_lr=a.lr, min_lr=a.min_lr,
        lr_warmup_steps=lr_warmup_steps, lr_decay_steps=lr_decay_steps,
        lr_decay_style=a.lr_decay_style, start_wd=a.start_weight_decay,
        end_wd=a.end_weight_decay, wd_incr_steps=wd_incr_steps,
        wd_incr_style=a.weight_decay_incr_style, use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=False, wsd_decay_steps=wsd_decay_steps,
        lr_wsd_decay_style=a.lr_wsd_decay_style)
    dec = opt.param_groups[2] if a.decoupled_lr is not None else opt.param_groups[0]
    steps, consumed, last_gbs = [], 0, None
    for it in range(a.train_iters):
        calc.update_num_microbatches(consumed, consistency_check=True)
        nmb = calc.get_num_microbatches()
        lr_used, dlr_used = opt.param_groups[0]["lr"], dec["lr"]
        wd_used = opt.param_groups[0]["weight_decay"]
        assert opt.param_groups[1]["weight_decay"] == 0.0
        increment = nmb * a.micro_batch_size * dp
        s.step(increment=increment)
        consumed += increment
        logged = sched.get_canonical_lr_for_logging(opt.param_groups)
        if every == 1 or (it + 1) % every == 0 or increment != last_gbs or it + 1 == a.train_iters:
            steps.append([it + 1, increment, nmb, consumed, lr_used, dlr_used, wd_used, logged])
        last_gbs = increment
    return {"name": name, "args": argv, "dp": dp, "train_iters": a.train_iters, "every": every,
            "steps": steps}


def flags(s):
    return s.split()


CASES = [
    # iteration-based, the styles megatron.c had, with the weight decay schedules
    ("iter_linear_wd_linear", "--train-iters 20 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3 "
     "--min-lr 1e-4 --lr-warmup-iters 3 --start-weight-decay 0.01 --end-weight-decay 0.1 "
     "--weight-decay-incr-style linear", 1),
    ("iter_cosine_wd_cosine_fraction", "--train-iters 17 --global-batch-size 6 --micro-batch-size 1 "
     "--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-fraction 0.07 "
     "--lr-decay-iters 14 --start-weight-decay 0.0 --end-weight-decay 0.05 "
     "--weight-decay-incr-style cosine --lr-warmup-init 1e-5", 2),
    ("iter_constant_wd_constant", "--train-iters 9 --global-batch-size 4 --lr 2e-3 "
     "--lr-decay-style constant --lr-warmup-iters 2 --weight-decay 0.05", 1),
    # inverse square root: with and without warm-up, decay ending before training does
    ("iter_isr", "--train-iters 20 --global-batch-size 8 --micro-batch-size 4 --lr 1e-3 "
     "--min-lr 2e-4 --lr-decay-style inverse-square-root --lr-warmup-iters 4 --lr-decay-iters 15", 2),
    ("iter_isr_no_warmup", "--train-iters 12 --global-batch-size 3 --lr 6e-4 --min-lr 1e-5 "
     "--lr-decay-style inverse-square-root", 1),
    # WSD, each anneal style, iterations and samples
    ("iter_wsd_exponential", "--train-iters 20 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3 "
     "--min-lr 1e-4 --lr-decay-style WSD --lr-wsd-decay-iters 6 --lr-warmup-iters 2", 1),
    ("iter_wsd_linear", "--train-iters 16 --global-batch-size 4 --lr 1e-3 --min-lr 0 "
     "--lr-decay-style WSD --lr-wsd-decay-style linear --lr-wsd-decay-iters 5 "
     "--lr-decay-iters 14", 1),
    ("samples_wsd_cosine", "--train-samples 100 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3 "
     "--min-lr 1e-4 --lr-decay-style WSD --lr-wsd-decay-style cosine "
     "--lr-wsd-decay-samples 37 --lr-warmup-samples 10", 2),
    ("samples_wsd_minus_sqrt", "--train-samples 90 --global-batch-size 6 --micro-batch-size 3 "
     "--lr 5e-4 --min-lr 5e-5 --lr-decay-style WSD --lr-wsd-decay-style minus_sqrt "
     "--lr-wsd-decay-samples 29 --lr-decay-samples 80", 1),
    # decoupled lr for the embedding and output layer
    ("iter_decoupled_cosine", "--train-iters 15 --global-batch-size 4 --lr 1e-3 --min-lr 1e-4 "
     "--lr-decay-style cosine --lr-warmup-iters 3 --decoupled-lr 5e-3 --decoupled-min-lr 5e-4", 1),
    ("samples_decoupled_no_min", "--train-samples 64 --global-batch-size 4 --lr 1e-3 --min-lr 1e-4 "
     "--lr-warmup-samples 6 --decoupled-lr 2e-4 --start-weight-decay 0.02 "
     "--end-weight-decay 0.2 --weight-decay-incr-style linear", 1),
    # sample-based, constant batch: lengths that are not multiples of the batch
    ("samples_cosine", "--train-samples 100 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3 "
     "--min-lr 1e-4 --lr-decay-style cosine --lr-decay-samples 80 --lr-warmup-samples 12", 1),
    ("samples_fraction", "--train-samples 77 --global-batch-size 5 --lr 1e-3 --min-lr 1e-4 "
     "--lr-decay-style cosine --lr-warmup-fraction 0.1", 1),
    # batch-size rampup (sample-based only)
    ("rampup_cosine", "--train-samples 200 --global-batch-size 16 --micro-batch-size 2 "
     "--rampup-batch-size 4 4 60 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
     "--lr-warmup-samples 20", 2),
    ("rampup_fractional_increment", "--train-samples 150 --global-batch-size 10 --micro-batch-size 1 "
     "--rampup-batch-size 4 2 50 --lr 1e-3 --lr-warmup-samples 7 --start-weight-decay 0.0 "
     "--end-weight-decay 0.1 --weight-decay-incr-style cosine --decoupled-lr 3e-3", 1),
    # consumed lands on SAMPLES exactly, where 58 / (58 / 7) = 6.999...: one increment short
    ("rampup_boundary_rounding", "--train-samples 90 --global-batch-size 9 --micro-batch-size 1 "
     "--rampup-batch-size 2 1 58 --lr 1e-3 --lr-warmup-samples 5", 1),
    ("rampup_past_train_samples", "--train-samples 40 --global-batch-size 12 --micro-batch-size 2 "
     "--rampup-batch-size 2 2 100 --lr 1e-3 --lr-decay-style WSD --lr-wsd-decay-samples 15", 1),
    # GPT-3 175B's schedule (the paper's samples; the example script's rampup), dp 16, sampled
    ("gpt3_175b_samples", "--train-samples 146484375 --global-batch-size 1536 --micro-batch-size 1 "
     "--rampup-batch-size 16 16 5859375 --lr 6.0e-5 --min-lr 6.0e-6 --lr-decay-style cosine "
     "--lr-decay-samples 126953125 --lr-warmup-samples 183105 --weight-decay 0.1", 16, 4000),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron-git", default="/work/.mirror/NVIDIA+Megatron-LM/repo")
    opts = ap.parse_args()
    sched, calc = load_megatron(opts.megatron_git)
    out = []
    for case in CASES:
        name, argv, dp = case[0], flags(case[1]), case[2]
        every = case[3] if len(case) > 3 else 1
        out.append(run_case(sched, calc, name, argv, dp, every))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write('{"megatron_commit":%s,"rampup_commit":%s,\n"cases":[\n'
                % (json.dumps(MEGATRON_COMMIT), json.dumps(RAMPUP_COMMIT)))
        f.write(",\n".join(json.dumps(x, separators=(",", ":")) for x in out))
        f.write("\n]}\n")
    for c in out:
        print(f"{c['name']}: {c['train_iters']} iterations, {len(c['steps'])} recorded")


if __name__ == "__main__":
    main()
