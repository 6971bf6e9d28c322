#!/usr/bin/env python3
"""Loss and grad-norm curves of deltatune against two runs of the peer (CSV: step,loss,grad_norm,
lr, as scripts/gpu/gpu_loss_curves.sh writes them). Prints, per quantity, the max and mean
|ours - peer run 0| beside the peer's own run-to-run |run 1 - run 0| and their ratio, and each
curve's mean over the last 50 steps; --png draws the curves where matplotlib is installed.

  python3 scripts/tools/compare_curves.py ours.csv peer0.csv peer1.csv [--png curves.png]
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
    args = ap.parse_args()
    ours, p0, p1 = read(args.ours), read(args.peer0), read(args.peer1)
    steps = sorted(set(ours) & set(p0) & set(p1))
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
    for label, c in (("ours", ours), ("peer0", p0), ("peer1", p1)):
        print(f"{label}: last-{len(tail)}-step mean loss {sum(c[s][0] for s in tail) / len(tail):.5f}")
    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no matplotlib: no PNG")
            return
        fig, ax = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
        for label, c in (("deltatune", ours), ("peer, seed 0", p0), ("peer, seed 1", p1)):
            ax[0].plot(steps, [c[s][0] for s in steps], label=label, linewidth=0.8)
            ax[1].plot(steps, [c[s][1] for s in steps], label=label, linewidth=0.8)
        ax[0].set_ylabel("loss"); ax[1].set_ylabel("grad norm (before clipping)")
        ax[1].set_xlabel("step"); ax[0].legend()
        fig.savefig(args.png, dpi=120, bbox_inches="tight")
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
