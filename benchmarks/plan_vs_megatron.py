#!/usr/bin/env python3
"""`nanodist plan` against two published tables that nobody here wrote, on the a100-80gb preset
with Megatron-LM's memory (--implementation megatron):

  Narayanan et al. 2021 (SC'21), "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", Table 1: achieved teraFLOP/s per GPU of ten GPT models, 1.7B to 1T, counted
  with the paper's Eq. 3 (96·B·s·l·h²·(1 + s/6h + V/16lh), activation recomputation included);
  settings from the paper's section 5 and NVIDIA/Megatron-LM examples/sc21/run_table_1.sh:
  fp16, full recomputation, the micro-batches and interleaving below, data parallelism over the
  rest of the GPUs.

  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  Table 5: seconds per iteration of 22B, 175B, 530B and 1T with full recomputation, and with
  sequence parallelism + selective recomputation ("present work"); Table 3's layouts.

    python3 benchmarks/plan_vs_megatron.py [--markdown] [--calibrate]

--calibrate prints the matmul efficiency at which the planner reproduces Korthikanti et al.'s
Table 4 (one 22B layer, t = 8, b = 4: 7.7 ms forward + 11.9 ms backward), the a100-80gb
preset's source."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# (model preset, t, p, GPUs, global batch, micro-batch, virtual stages, published TF/s per GPU)
NARAYANAN_TABLE_1 = [
    ("gpt-1.7b", 1, 1, 32, 512, 16, 1, 137),
    ("gpt-3.6b", 2, 1, 64, 512, 16, 1, 138),
    ("gpt-7.5b", 4, 1, 128, 512, 16, 1, 142),
    ("gpt-18.4b", 8, 1, 256, 1024, 8, 1, 135),
    ("gpt-39.1b", 8, 2, 512, 1536, 4, 1, 138),
    ("gpt-76.1b", 8, 4, 1024, 1792, 2, 3, 140),
    ("gpt-145.6b", 8, 8, 1536, 2304, 2, 2, 148),
    ("gpt-310.1b", 8, 16, 1920, 2160, 1, 2, 155),
    ("gpt-529.6b", 8, 35, 2520, 2520, 1, 3, 163),
    ("gpt-1t", 8, 64, 3072, 3072, 1, 1, 163),
]
# (model preset, t, p, GPUs, global batch, micro-batch, virtual stages, s/iteration full, present work)
KORTHIKANTI_TABLE_5 = [
    ("gpt-22b", 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    ("gpt-175b", 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    ("gpt-530b", 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    ("gpt-1t", 8, 64, 512, 512, 1, 1, 94.42, 71.49),
]


def plan(nanodist, model, t, p, gpus, batch, micro, v, recompute, sp, machine_file=None, layers=None):
    cmd = [nanodist, "plan", "--model", model, "--implementation", "megatron", "--precision", "bf16",
           "--devices", str(gpus), "--global-batch", str(batch), "--tp", str(t), "--pp", str(p),
           "--micro-batch", str(micro), "--virtual-stages", str(v), "--recompute", recompute,
           "--sequence-parallel", "1" if sp else "0", "--json", "--all"]
    cmd += ["--schedule", "interleaved" if v > 1 else "1f1b"] if p > 1 else []
    cmd += ["--machine-file", machine_file] if machine_file else ["--machine", "a100-80gb"]
    cmd += ["--n-layer", str(layers)] if layers else []
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"plan_vs_megatron: {' '.join(cmd)} failed: {out.stderr.strip()}")
    result = json.loads(out.stdout)
    return result["model"], result["layouts"][0]


def eq3_flops(model, batch):
    s, h, l, V = model["block_size"], model["n_embd"], model["n_layer"], model["vocab_size"]
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def calibrate(nanodist):
    """The efficiency at which one 22B layer (t = 8, b = 4, no recompute) takes 19.6 ms."""
    machine = json.loads(subprocess.run([nanodist, "plan", "--machine", "a100-80gb", "--print-machine"],
                                        capture_output=True, text=True, check=True).stdout)
    low, high = 0.05, 1.0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a100.json")
        for _ in range(40):
            machine["matmul_efficiency"] = machine["matmul_efficiency_bf16"] = (low + high) / 2
            with open(path, "w") as f:
                json.dump(machine, f)
            one = plan(nanodist, "gpt-22b", 8, 1, 8, 4, 4, 1, "none", False, path, layers=1)[1]["time"]
            two = plan(nanodist, "gpt-22b", 8, 1, 8, 4, 4, 1, "none", False, path, layers=2)[1]["time"]
            layer = (two["compute"] + two["tp"]) - (one["compute"] + one["tp"])
            low, high = (low, (low + high) / 2) if layer < 19.6e-3 else ((low + high) / 2, high)
    return (low + high) / 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--calibrate", action="store_true")
    args = parser.parse_args()
    nanodist = os.path.join(args.build_dir, "planning", "nanodist")
    if args.calibrate:
        print(f"matmul efficiency reproducing Korthikanti et al. Table 4 (22B layer, t 8, b 4: 19.6 ms): "
              f"{calibrate(nanodist):.3f}")
        return
    print("Narayanan et al. 2021, Table 1 (teraFLOP/s per GPU, Eq. 3):")
    if args.markdown:
        print("| model | t | p | v | GPUs | batch | micro-batch | published | predicted | error | step | bubble | tp | dp exposed |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, t, p, gpus, batch, micro, v, published in NARAYANAN_TABLE_1:
        config, layout = plan(nanodist, model, t, p, gpus, batch, micro, v, "full", False)
        step = layout["time"]["total"]
        predicted = eq3_flops(config, batch) / step / gpus / 1e12
        error = 100 * (predicted - published) / published
        shares = {k: 100 * layout["time"][k] / step for k in ("bubble", "tp", "dp_exposed")}
        if args.markdown:
            print(f"| {model[4:]} | {t} | {p} | {v} | {gpus} | {batch} | {micro} | {published} | {predicted:.0f} | "
                  f"{error:+.0f} % | {step:.2f} s | {shares['bubble']:.0f} % | {shares['tp']:.0f} % | "
                  f"{shares['dp_exposed']:.0f} % |")
        else:
            print(f"  {model:<11} t {t} p {p:>2} v {v} on {gpus:>4}: published {published} TF/s, predicted "
                  f"{predicted:5.1f} ({error:+5.1f}%) | step {step:6.2f} s: bubble {shares['bubble']:4.1f}%, "
                  f"tp {shares['tp']:4.1f}%, dp exposed {shares['dp_exposed']:4.1f}%")
    print("\nKorthikanti et al. 2022, Table 5 (seconds per iteration):")
    if args.markdown:
        print("| model | t | p | v | GPUs | batch | setting | published | predicted | error | activations (first stage) |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, t, p, gpus, batch, micro, v, full_s, present_s in KORTHIKANTI_TABLE_5:
        for name, recompute, sp, published in (("full recompute", "full", False, full_s),
                                               ("SP + selective", "selective", True, present_s)):
            _, layout = plan(nanodist, model, t, p, gpus, batch, micro, v, recompute, sp)
            step = layout["time"]["total"]
            error = 100 * (step - published) / published
            activations = layout["memory"]["activations"] / 1e9
            if args.markdown:
                print(f"| {model[4:]} | {t} | {p} | {v} | {gpus} | {batch} | {name} | {published} s | {step:.2f} s | "
                      f"{error:+.0f} % | {activations:.1f} GB |")
            else:
                print(f"  {model:<9} {name:<15} published {published:6.2f} s, predicted {step:6.2f} s "
                      f"({error:+5.1f}%); activations {activations:5.1f} GB")


if __name__ == "__main__":
    main()
