#!/usr/bin/env python
"""What InsNet-Dinic layerization costs per batch, relative to a training step, side by side.

    .venv/bin/python experiments/layerization_cost.py --path checkpoints/dinic_base/checkpoint_best.pt

On the same Multi30k batches (valid split, --max-tokens per batch, the checkpoint's insertion
order) it times, interleaved over --rounds: one training step (forward + backward, sequential
objective) and one layerization from the sequential layering (no gradient) at each tau, and one
layerization continuing from the previous layering (what later epochs pay). Prints median
seconds, promotion rounds, layers per sentence and the ratio to a training step.

Each tau also gets the rows of ``--dinic-lagged``: one promotion round computed from the states of the
training pass itself (no layering pass; the states come from a training-mode forward over the layering,
which the training step runs anyway), from the sequential layering (a first visit), from one round's
layering (a second visit) and from the fixpoint (the visits once the layering has converged).

``--max-rounds R`` adds the progressive layering of ``--dinic-max-rounds R``: each visit of a batch
(one per epoch) runs at most R rounds and the next continues from its result, so the rows
``tau T, <= R rounds, visit v`` give what the v-th epoch pays and how many layers it trains on, up
to the visit that reaches the fixpoint (``--visits``, 6, at most).
"""
import argparse
import statistics
import time

import torch


import insnet_fairseq  # noqa: F401  (registers the tasks and models)
from insnet_fairseq.tasks.criterion import term_losses
from insnet_fairseq.geometry.layers import num_layers, sequential_layers, trajectory
from insnet_fairseq.training.layerization import layerize, promotions_from_states, token_logprobs_by_step
from insnet_fairseq.tasks import checkpoint_checks


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", required=True)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--taus", type=float, nargs="+", default=[0.3, 1.0, 3.0, 10.0])
    p.add_argument("--max-rounds", type=int, default=0, help="also the progressive layering, R rounds per visit")
    p.add_argument("--visits", type=int, default=6)
    args = p.parse_args(argv)
    models, _, task = checkpoint_checks.load_model_ensemble_and_task([args.path], arg_overrides={"data": args.data})
    model = models[0]
    task.load_dataset("valid")
    ds = task.dataset("valid")
    chunks = ds.batch_by_size(ds.ordered_indices(), max_tokens=args.max_tokens)
    step = len(chunks) // args.batches
    samples = [ds.collater([ds[i] for i in chunks[k * step]]) for k in range(args.batches)]
    opt = torch.optim.Adam(model.parameters(), lr=1e-9)

    def train_step(sample):
        model.train()
        loss = sum(v[0] for v in term_losses(model(**sample["net_input"])).values())
        loss.backward()
        opt.step()
        opt.zero_grad()

    def layer(sample, tau, start=None, ladder=False, max_rounds=0):
        ni = sample["net_input"]
        return layerize(model, ni["src_tokens"], ni["src_lengths"], ni["target"], ni["order"], tau, start=start,
                        ladder=ladder, max_rounds=max_rounds)

    def lagged_round(sample, tau, layers):  # --dinic-lagged: the round from the training pass's states
        ni = sample["net_input"]
        with torch.no_grad():
            model.train()  # the training pass (dropout on): not timed, the training step runs it
            out = model(ni["src_tokens"], ni["src_lengths"], ni["target"], *trajectory(layers), return_states=True)
            model.eval()
            t = time.perf_counter()  # what the task's promote_lagged does
            current = token_logprobs_by_step(out["token"], out["states"][4], layers.size(1))
            promotions_from_states(model.decoder, layers, *out["states"], tau, current=current)
            return time.perf_counter() - t

    kinds = ["", ", ladder", ", continued", ", lagged round, first visit", ", lagged round, second visit",
             ", lagged round, at the fixpoint"]
    times = {k: [] for k in ["train step"] + [f"tau {t}{kind}" for t in args.taus for kind in kinds]}
    stats = {}
    for s in samples:  # warm-up
        train_step(s)
    for _ in range(args.rounds):
        for s_i, s in enumerate(samples):
            t = time.perf_counter()
            train_step(s)
            times["train step"].append(time.perf_counter() - t)
            for tau in args.taus:
                t = time.perf_counter()
                layers, rounds = layer(s, tau)
                times[f"tau {tau}"].append(time.perf_counter() - t)
                t = time.perf_counter()
                laddered, rounds1 = layer(s, tau, ladder=True)
                times[f"tau {tau}, ladder"].append(time.perf_counter() - t)
                t = time.perf_counter()
                _, rounds2 = layer(s, tau, start=layers)
                times[f"tau {tau}, continued"].append(time.perf_counter() - t)
                ni = s["net_input"]
                seq = sequential_layers(ni["order"], ni["target"].ne(model.decoder.padding_idx).sum(1))
                once, _ = layer(s, tau, max_rounds=1)  # the layering a second visit trains on
                times[f"tau {tau}, lagged round, first visit"].append(lagged_round(s, tau, seq))
                times[f"tau {tau}, lagged round, second visit"].append(lagged_round(s, tau, once))
                times[f"tau {tau}, lagged round, at the fixpoint"].append(lagged_round(s, tau, layers))
                for kind, r, lay in [("", rounds, layers), (", ladder", rounds1, laddered), (", continued", rounds2, layers),
                                     (", lagged round, first visit", 1, seq), (", lagged round, second visit", 1, once),
                                     (", lagged round, at the fixpoint", 1, layers)]:
                    stats.setdefault(f"tau {tau}{kind}", []).append((r, float(num_layers(lay).float().mean())))
                start = None  # --max-rounds: one visit per epoch, each continuing the last, until the fixpoint
                for v in range(1, args.visits + 1) if args.max_rounds > 0 else ():
                    name = f"tau {tau}, <= {args.max_rounds} rounds, visit {v}"
                    t = time.perf_counter()
                    start, r = layer(s, tau, start=start, max_rounds=args.max_rounds)
                    times.setdefault(name, []).append(time.perf_counter() - t)
                    stats.setdefault(name, []).append((r, float(num_layers(start).float().mean())))
                    if r < args.max_rounds:  # nothing moved in its last round: the fixpoint
                        break
    words = statistics.mean(float((s["net_input"]["target"].ne(1).sum(1) - 2).float().mean()) for s in samples)
    base = statistics.median(times["train step"])
    print(f"\n{args.batches} Multi30k valid batches of <= {args.max_tokens} tokens ({words:.1f} words/sentence), "
          f"{torch.get_num_threads()} threads, median of {args.rounds} rounds\n")
    print("| work per batch | seconds | promotion rounds | layers/sentence | x training step |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        r, l = (statistics.mean(x[0] for x in stats[name]), statistics.mean(x[1] for x in stats[name])) if name in stats else ("", words)
        r = f"{r:.1f}" if r != "" else ""
        print(f"| {name} | {med:.2f} | {r} | {l:.2f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
