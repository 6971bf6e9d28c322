#!/usr/bin/env python3
"""Loss and grad-norm curves of deltatune against two runs of the peer (CSV: step,loss,grad_norm,
lr, as scripts/gpu/gpu_loss_curves.sh writes them). Prints, per quantity, the max and mean
|ours - peer run 0| beside the peer's own run-to-run |run 1 - run 0| and their ratio, and each
curve's mean over the last 50 steps; --png draws the curves where matplotlib is installed.
--fp8 CSV adds our run with FP8 projections: its |difference| from ours (bf16) beside the peer's
spread, and the relative difference of the last-50-step mean losses (the bar: within 1%).

  python3 scripts/tools/compare_curves.py ours.csv peer0.csv peer1.csv [--fp8 ours_fp8.csv]
      [--png curves.png]
"""
import argparse, csv, sys


def read(path):
    with open(path) as f:
        return {int(r["step"]): (float(r["loss"]), float(r["grad_norm"])) for r in csv.DictReader(f)}


def stats(a, b, steps, k):
    d = [abs(a[s][k] - b[s][k]) for s in steps]
    return max(d), sum(d) / len(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours"); ap.add_argument("peer0"); ap.add_argument("peer1")
    ap.add_argument("--png")
    ap.add_argument("--fp8")
    args = ap.parse_args()
    ours, p0, p1 = read(args.ours), read(args.peer0), read(args.peer1)
    fp8 = read(args.fp8) if args.fp8 else None
    steps = sorted(set(ours) & set(p0) & set(p1) & (set(fp8) if fp8 else set(ours)))
    if not steps:
        sys.exit("no step in all three curves")
    missing = max(len(ours), len(p0), len(p1)) - len(steps)
    print(f"{len(steps)} common steps" + (f" ({missing} missing from a curve)" if missing else ""))
    print(f"{'':10} {'ours-peer max':>14} {'mean':>10} {'peer-peer max':>14} {'mean':>10} "
          f"{'ratio of means':>15}")
    for k, name in ((0, "loss"), (1, "grad_norm")):
        om, oa = stats(ours, p0, steps, k)
        pm, pa = stats(p1, p0, steps, k)
        ratio = oa / pa if pa > 0 else float("inf")
        print(f"{name:10} {om:14.5f} {oa:10.5f} {pm:14.5f} {pa:10.5f} {ratio:15.2f}")
    tail = steps[-50:]
    curves = [("ours", ours), ("peer0", p0), ("peer1", p1)] + ([("ours_fp8", fp8)] if fp8 else [])
    tail_mean = {label: sum(c[s][0] for s in tail) / len(tail) for label, c in curves}
    for label, _ in curves:
        print(f"{label}: last-{len(tail)}-step mean loss {tail_mean[label]:.5f}")
    if fp8:
        fm, fa = stats(fp8, ours, steps, 0)
        rel = abs(tail_mean["ours_fp8"] - tail_mean["ours"]) / abs(tail_mean["ours"])
        finite = all(fp8[s][0] == fp8[s][0] and abs(fp8[s][0]) != float("inf") for s in steps)
        print(f"fp8 vs bf16 (ours): loss max {fm:.5f} mean {fa:.5f}; last-{len(tail)}-step mean "
              f"loss relative difference {100 * rel:.3f}% ({'within' if rel <= 0.01 else 'OVER'} "
              f"1%); {'no' if finite else 'a'} non-finite loss")
    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no matplotlib: no PNG")
            return
        fig, ax = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
        drawn = [("deltatune", ours), ("peer, seed 0", p0), ("peer, seed 1", p1)]
        for label, c in drawn + ([("deltatune, FP8 projections", fp8)] if fp8 else []):
            ax[0].plot(steps, [c[s][0] for s in steps], label=label, linewidth=0.8)
            ax[1].plot(steps, [c[s][1] for s in steps], label=label, linewidth=0.8)
        ax[0].set_ylabel("loss"); ax[1].set_ylabel("grad norm (before clipping)")
        ax[1].set_xlabel("step"); ax[0].legend()
        fig.savefig(args.png, dpi=120, bbox_inches="tight")
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
