#!/usr/bin/env python
"""Training throughput: target tokens/s of InsNet (one pass per trajectory) vs fairseq's
autoregressive ``transformer`` of the same size vs InsNet with naive per-prefix re-encoding,
on the same batches, measured side by side in one run (rounds interleave the models).
"InsNet" trains on random insertion orders; "InsNet l2r" on the ``l2r`` order, the default ``--insertion-order``;
"InsNet parallel" (``--slot-objective gap --layerization sampled``) on a layered trajectory drawn afresh for every
batch, the draw timed with the step ("InsNet parallel with the slot query stream": the same with a query at every slot
of every layer end) (its training has no layering pass, so its first epoch costs what the others do).
``--gap-slot-rates R,...`` adds "InsNet parallel with the slot query stream, slot rate R" for each R: the same model
scoring a drawn sample of its slots, each with probability R (``--gap-slot-rate R``,
:func:`~insnet_fairseq.geometry.gaps.sample_slots`), the draw timed with the step.
``--slot-query-layers K,...`` adds "InsNet parallel with the slot query stream through the last K layers" for each K:
the same model with every slot's query starting at the decoder's last K layers (``--slot-query-layers K``).
``--asked-slots`` adds, for the slot query stream through every layer and through each K, the same model scoring
the slots parallel decoding asks only (``--gap-slots asked``, :func:`~insnet_fairseq.geometry.gaps.asked_slots`: a
done slot at the layer end where it appears, not again), the selection timed with the step.
Both score their offset term as training does on the CPU, by the C++ kernel of the unblocked pairs
(:mod:`insnet_fairseq.modules.offset_scores`).

    python benchmarks/train_throughput.py [--data data-bin/multi30k_en_de] [--rounds 3]

Settings: "multi30k" = real training batches of the binarised Multi30k (max-tokens budget);
"len32" ... "len256" = synthetic batches whose source and target have exactly that many tokens.
A training step is forward + backward + Adam step, each model with its criterion's loss at ``--label-smoothing``
(0.1, the results tables'): the AR model as fairseq's ``label_smoothed_cross_entropy`` computes it (``cross_entropy``,
plain NLL, at 0), InsNet as ``insnet_loss``. "AR, InsNet's token loss" is the same AR model with the token loss
InsNet uses (:func:`~insnet_fairseq.tasks.token_loss.smoothed_nll`, the same values with a one-pass backward): the
ratio of InsNet l2r to it compares the models with like losses (the "like with like" line), while the ratio to
fairseq's AR criterion also measures the two loss implementations. Prints tokens/s per model and the ratios. The naive
re-encoding (one pass per prefix: O(n) passes) runs only up to ``--naive-max-length`` (64) tokens.

``--without-offset-term`` adds "InsNet, no offset term": the same InsNet model whose self-attention drops the
position term ``(q + v) . p_offset`` (plain causal attention, ``is_causal``). Not a model anyone trains: the cost
of everything in InsNet but its offsets, so its ratio to the AR model, beside InsNet's, is the offsets' share.

Every model's linear layers run through :mod:`insnet_fairseq.modules.packed_linear` (oneDNN's products on a CPU),
the AR model's too (:func:`~insnet_fairseq.modules.packed_linear.pack_linears`, called here for it as for every
system the benchmarks time).
``--linear-kernels`` adds each of AR, "AR, InsNet's token loss" and both InsNet models with its layers on
``F.linear`` (MKL's products; :func:`~insnet_fairseq.modules.packed_linear.set_packed`), and prints each model's
speed-up and the like-with-like ratio both ways.

``--on-policy P --on-policy-checkpoint CKPT`` adds two systems, both InsNet parallel with the weights of CKPT (a
trained ``--slot-objective gap`` checkpoint of this size, so that the rollouts write what training's would): "InsNet
parallel, CKPT" as without the flag, and "InsNet parallel, on-policy" whose sentences each begin, with probability P,
with the model's own parallel decoding of 1-4 steps (``--on-policy P``, :mod:`insnet_fairseq.training.on_policy`), the
rollout timed with the step. Their ratio is what on-policy contexts cost an update.

``--offset-kernels`` adds the same two InsNet models with the dense offset term that the kernel replaced: "InsNet,
gather" (every query against all 2S - 1 offsets, gathered) and "InsNet l2r, view" (the l2r order's S + 1 offsets
skewed into place by a view, :meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.left_to_right_bias`).
"""
import argparse
import os
import statistics
import sys
import time

import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerModel

import insnet_fairseq  # noqa: F401  (registers the tasks and models)
from insnet_fairseq import checkpoint_safety
from insnet_fairseq.decoding.core_options import CoreOptions
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.geometry.gaps import asked_slots, gap_targets, sample_layers, sample_slots
from insnet_fairseq.training.on_policy import on_policy_trajectories
from insnet_fairseq.tasks.criterion import gap_losses, term_losses
from insnet_fairseq.tasks.token_loss import smoothed_nll
from insnet_fairseq.modules import offset_scores
from insnet_fairseq.modules.attention import OffsetSelfAttention
from insnet_fairseq.modules.packed_linear import pack_linears, set_packed
from insnet_fairseq.models.insnet import InsNetModel
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.reference import reencode_prefixes
from insnet_fairseq.tasks.translation import InsertionTranslationTask

SIZE = dict(encoder_layers=3, decoder_layers=3, encoder_embed_dim=256, encoder_ffn_embed_dim=1024,
            encoder_attention_heads=4, decoder_attention_heads=4, dropout=0.1, share_all_embeddings=True,
            max_source_positions=512, max_target_positions=512)


NO_OFFSETS = "insnet-no-offsets"  # --without-offset-term's diagnostic system
L2R = "insnet-l2r"  # InsNet trained in the l2r order (the default --insertion-order)
GATHER = "insnet-gather"  # --offset-kernels: InsNet (random orders) with the dense gather instead of the C++ kernel
L2R_VIEW = "insnet-l2r-view"  # --offset-kernels: InsNet l2r with the skewed view instead of the C++ kernel
PARALLEL = "insnet-parallel"  # InsNet parallel: the end-of-slot objective on sampled trajectories
PARALLEL_QUERY = "insnet-parallel-query"  # InsNet parallel with --slot-query-stream: a query at every slot
SLOT_RATE = "@"  # --gap-slot-rates: PARALLEL_QUERY + "@R" is that model scoring a sample of its slots (rate R)
QUERY_LAYERS = "/"  # --slot-query-layers: PARALLEL_QUERY + "/K" is that model with queries through the last K layers
ASKED = "+asked"  # --asked-slots: a stream model's name + ASKED is that model scoring the slots decoding asks only
TRAINED = "insnet-parallel-trained"  # --on-policy-checkpoint: InsNet parallel with that checkpoint's weights
ON_POLICY = "insnet-parallel-on-policy"  # ... the same, with --on-policy P
AR_FUSED = "ar-fused"  # the AR model with InsNet's token loss (smoothed_nll): the like-with-like baseline
STOCK = ", F.linear"  # --linear-kernels: a model's name with this suffix is the same model on F.linear's products


class Task(InsertionTranslationTask):
    """The task's dictionaries and nothing else (InsNet models are built for insertion_translation only)."""

    def __init__(self, d):
        self.src_dict = self.tgt_dict = d


def build(kind, d, checkpoint=None):
    if kind.endswith(STOCK):
        return set_packed(build(kind[: -len(STOCK)], d), False)
    if kind in (TRAINED, ON_POLICY):
        model = build(PARALLEL, d)
        model.load_state_dict(checkpoint_safety.load(checkpoint)["model"])
        return model
    torch.manual_seed(0)
    args = argparse.Namespace(**SIZE)
    if kind in ("ar", AR_FUSED):
        TransformerModel.add_args(argparse.ArgumentParser())
        return pack_linears(TransformerModel.build_model(args, Task(d)))
    if kind.startswith(PARALLEL):
        kind = kind.removesuffix(ASKED)  # the same model: only the slots scored differ
        args.slot_objective = "gap"
        args.slot_query_stream = kind.startswith(PARALLEL_QUERY)
        if QUERY_LAYERS in kind:
            args.slot_query_layers = int(kind.split(QUERY_LAYERS)[1])  # (ASKED removed above)
    model = InsNetModel.build_model(args, Task(d))
    if kind in (GATHER, L2R_VIEW):
        for m in model.modules():
            if isinstance(m, OffsetSelfAttention):
                m.offset_kernel = False
    return without_offset_term(model) if kind == NO_OFFSETS else model


def drop_offset_term(att):
    """An :class:`~insnet_fairseq.modules.attention.OffsetSelfAttention` whose scores leave out the offset term, in
    place: ``softmax((q + u) k^T / sqrt(Dh)) v`` with the causal mask of insertion order (``is_causal``), through its
    own :meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.content_attend`. Returns ``att``."""
    att._attend = lambda q, k, v, offsets, rel_table, attn_mask, left_to_right=False, index=None: att.content_attend(
        q, k, v, None, is_causal=True)
    return att


def without_offset_term(model):
    """``model`` (InsNet) with the offset term left out of every self-attention layer (:func:`drop_offset_term`). A
    diagnostic (the cost of InsNet without its offsets), never a trained model. Returns the model."""
    for layer in model.decoder.context.layers:
        drop_offset_term(layer.self_attn)
    return model


def multi30k_batches(data, d, max_tokens, count):
    from fairseq.data import LanguagePairDataset, data_utils as du

    src = du.load_indexed_dataset(os.path.join(data, "train.en-de.en"), d)
    tgt = du.load_indexed_dataset(os.path.join(data, "train.en-de.de"), d)
    ds = LanguagePairDataset(src, src.sizes, d, tgt, tgt.sizes, d, shuffle=True)
    with du.numpy_seed(1):
        indices = ds.ordered_indices()
    batches = ds.batch_by_size(indices, max_tokens=max_tokens)
    rng = torch.Generator().manual_seed(0)
    pick = torch.randperm(len(batches), generator=rng)[:count].tolist()
    return [ds.collater([ds[i] for i in batches[j]]) for j in pick]


def synthetic_batches(d, length, max_tokens, count):
    out = []
    g = torch.Generator().manual_seed(length)
    bsz = max(1, max_tokens // length)
    for _ in range(count):
        words = torch.randint(d.nspecial, len(d), (bsz, length - 1), generator=g)
        eos = torch.full((bsz, 1), d.eos())
        src = torch.cat([words.flip(1), eos], 1)
        tgt = torch.cat([words, eos], 1)
        prev = torch.cat([eos, words], 1)
        out.append({"net_input": {"src_tokens": src, "src_lengths": torch.full((bsz,), length),
                                  "prev_output_tokens": prev}, "target": tgt})
    return out


def step_fn(kind, model, batch, d, eps, on_policy=0.0):
    kind = kind[: -len(STOCK)] if kind.endswith(STOCK) else kind
    ni = batch["net_input"]
    tgt = batch["target"]
    if kind == "ar":  # fairseq's criteria: label_smoothed_cross_entropy (eps > 0), cross_entropy (eps 0)
        out, _ = model(ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])
        lprobs = torch.log_softmax(out.float(), -1).view(-1, out.size(-1))
        if eps > 0:
            return label_smoothed_nll_loss(lprobs, tgt.view(-1), eps, ignore_index=d.pad(), reduce=True)[0]
        return torch.nn.functional.nll_loss(lprobs, tgt.view(-1), ignore_index=d.pad(), reduction="sum")
    if kind == AR_FUSED:  # InsNet's token loss on the AR model's non-pad positions, as insnet_loss applies it
        out, _ = model(ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])
        real = tgt.ne(d.pad())  # [B, T]
        return smoothed_nll(out[real], tgt[real], eps)[0]
    target = torch.cat([tgt.new_full((tgt.size(0), 1), d.bos()), tgt], 1)
    if kind in (PARALLEL, PARALLEL_QUERY, TRAINED) or any(m in kind for m in (SLOT_RATE, QUERY_LAYERS, ASKED)):
        # the task's defaults: --trajectory-spread 1, --gap-skip 0.1, --gap-temperature 1; --gap-slot-rate R for
        # PARALLEL_QUERY@R; --gap-slots asked for a name ending in ASKED
        layers = sample_layers(target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0), 1.0, 0.1)
        weight = None
        if SLOT_RATE in kind:
            weight = sample_slots(layers, float(kind.split(SLOT_RATE)[1]), torch.Generator().manual_seed(2))
        if kind.endswith(ASKED):
            weight = asked_slots(layers)
        out = model(ni["src_tokens"], ni["src_lengths"], target, None, layers=layers, slot_weight=weight)
        return sum(v[0] for v in gap_losses(out["gap"], eps).values())
    if kind == ON_POLICY:  # the task's --on-policy P --on-policy-steps 4, the rollout included
        g, pick = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)  # g: the layers, as above
        B = target.size(0)
        chosen, k = torch.rand(B, generator=pick) < on_policy, torch.randint(1, 5, (B,), generator=pick)
        max_len = torch.minimum(ni["src_lengths"] * 2 + 12,
                                model.decoder.max_target_positions - target.ne(d.pad()).sum(1) + 2)
        target, layers, foreign = on_policy_trajectories(model, InsertionSteps(d, CoreOptions(mode="parallel")),
                                                         ni["src_tokens"], ni["src_lengths"], target, chosen, k,
                                                         max_len, g, 1.0, 0.1)
        out = model(ni["src_tokens"], ni["src_lengths"], target, None, layers=layers, foreign=foreign)
        return sum(v[0] for v in gap_losses(out["gap"], eps).values())
    policy = "l2r" if kind in (L2R, L2R_VIEW) else "random"
    order = make_order(policy, target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0))
    if kind == "naive":
        return reencode_prefixes(model, ni["src_tokens"], ni["src_lengths"], target, order)
    terms = term_losses(model(ni["src_tokens"], ni["src_lengths"], target, order), eps)
    return sum(v[0] for v in terms.values())


def time_steps(kind, model, opt, batches, d, eps, on_policy=0.0):
    model.train()
    t0 = time.perf_counter()
    for batch in batches:
        opt.zero_grad()
        step_fn(kind, model, batch, d, eps, on_policy).backward()
        opt.step()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batches", type=int, default=4, help="batches per model per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--settings", default="multi30k,len32,len64,len128,len256")
    p.add_argument("--naive-max-length", type=int, default=64,
                   help="time the naive per-prefix re-encoding only for settings up to this target length")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: every core)")
    p.add_argument("--label-smoothing", type=float, default=0.1,
                   help="each model's loss as its criterion computes it with this label smoothing (the tables': 0.1)")
    p.add_argument("--without-offset-term", action="store_true",
                   help="also time InsNet without the position term of its self-attention (a diagnostic: what the "
                        "offsets cost)")
    p.add_argument("--offset-kernels", action="store_true",
                   help="also time both InsNet models with the dense offset term the C++ kernel replaced (the gather; "
                        "the l2r order's skewed view)")
    p.add_argument("--on-policy", type=float, default=0.0,
                   help="with --on-policy-checkpoint: also time InsNet parallel with --on-policy P against it without")
    p.add_argument("--on-policy-checkpoint", help="a trained InsNet parallel checkpoint of this size (--on-policy)")
    p.add_argument("--gap-slot-rates", default="",
                   help="comma-separated rates R in (0, 1): also time InsNet parallel with the slot query stream "
                        "scoring each slot with probability R (--gap-slot-rate R)")
    p.add_argument("--slot-query-layers", default="",
                   help="comma-separated K in [1, 3): also time InsNet parallel with the slot query stream through "
                        "the decoder's last K layers only (--slot-query-layers K)")
    p.add_argument("--asked-slots", action="store_true",
                   help="also time each slot query stream model (through every layer and through each K of "
                        "--slot-query-layers) scoring only the slots parallel decoding asks (--gap-slots asked)")
    p.add_argument("--linear-kernels", action="store_true",
                   help="also time AR, AR with InsNet's token loss and both InsNet models on F.linear's products")
    p.add_argument("--flush-denormal", action="store_true",
                   help="torch.set_flush_denormal(True): denormal floats (an untrained model's tiny probabilities) "
                        "computed as zero, a diagnostic of how much of a difference they make")
    args = p.parse_args()
    if (args.on_policy > 0) != bool(args.on_policy_checkpoint):
        sys.exit("--on-policy P and --on-policy-checkpoint CKPT go together")
    try:
        rates = [float(r) for r in args.gap_slot_rates.split(",") if r]
    except ValueError:
        sys.exit(f"--gap-slot-rates {args.gap_slot_rates!r}: give comma-separated numbers, e.g. 0.25,0.5")
    if any(not 0 < r < 1 for r in rates):
        sys.exit(f"--gap-slot-rates {args.gap_slot_rates}: every rate must be in (0, 1)")
    try:
        query_layers = [int(k) for k in args.slot_query_layers.split(",") if k]
    except ValueError:
        sys.exit(f"--slot-query-layers {args.slot_query_layers!r}: give comma-separated whole numbers, e.g. 1,2")
    if any(not 1 <= k < SIZE["decoder_layers"] for k in query_layers):
        sys.exit(f"--slot-query-layers {args.slot_query_layers}: each K must be in [1, {SIZE['decoder_layers']}) "
                 f"({SIZE['decoder_layers']}: every layer, timed anyway)")
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    if args.flush_denormal and not torch.set_flush_denormal(True):
        sys.exit("--flush-denormal: this CPU does not support flushing denormals")
    dict_path = os.path.join(args.data, "dict.en.txt")
    if not os.path.exists(dict_path):
        sys.exit(f"{dict_path} not found: run `make multi30k` first")
    d = Dictionary.load(dict_path)
    if not offset_scores.available():
        print("warning: the offset-score kernel is not built (`make install`): InsNet takes the dense offset term",
              file=sys.stderr)
    print(f"device: cpu x{torch.get_num_threads()} threads, torch {torch.__version__}, vocab {len(d)}, "
          f"model 3+3 layers d=256 h=4 ffn=1024, max-tokens {args.max_tokens}, label smoothing {args.label_smoothing}" +
          (", denormals flushed" if args.flush_denormal else ""))
    rows = []
    for setting in args.settings.split(","):
        if setting == "multi30k":
            batches = multi30k_batches(args.data, d, args.max_tokens, args.batches)
        else:
            batches = synthetic_batches(d, int(setting[3:]), args.max_tokens, args.batches)
        ntok = sum(int(b["target"].ne(d.pad()).sum()) for b in batches)
        mean_len = ntok / sum(b["target"].size(0) for b in batches)
        kinds = ("ar", AR_FUSED, "insnet") + (("naive",) if mean_len <= args.naive_max_length else ())
        kinds += (L2R, PARALLEL, PARALLEL_QUERY) + ((NO_OFFSETS,) if args.without_offset_term else ())
        kinds += tuple(f"{PARALLEL_QUERY}{SLOT_RATE}{r:g}" for r in rates)
        kinds += tuple(f"{PARALLEL_QUERY}{QUERY_LAYERS}{k}" for k in query_layers)
        streams = [(PARALLEL_QUERY, "")] + [(f"{PARALLEL_QUERY}{QUERY_LAYERS}{k}", f" through the last {k} layers")
                                            for k in query_layers]
        kinds += tuple(k + ASKED for k, _ in streams) if args.asked_slots else ()
        kinds += (TRAINED, ON_POLICY) if args.on_policy > 0 else ()
        kinds += (GATHER, L2R_VIEW) if args.offset_kernels else ()
        kinds += tuple(k + STOCK for k in ("ar", AR_FUSED, "insnet", L2R)) if args.linear_kernels else ()
        models = {k: build(k, d, args.on_policy_checkpoint) for k in kinds}
        opts = {k: torch.optim.Adam(m.parameters(), lr=1e-4) for k, m in models.items()}
        # warm-up
        for k in models:
            time_steps(k, models[k], opts[k], batches[:1], d, args.label_smoothing, args.on_policy)
        times = {k: [] for k in models}
        for _ in range(args.rounds):
            for k in models:
                times[k].append(time_steps(k, models[k], opts[k], batches, d, args.label_smoothing, args.on_policy))
        tps = {k: ntok / statistics.median(v) for k, v in times.items()}
        rows.append((setting, mean_len, tps))
        naive = (f"naive re-encoding {tps['naive']:6.0f} tok/s  |  " if "naive" in tps else "naive not timed  |  ")
        plain = f"  InsNet l2r/AR {tps[L2R] / tps['ar']:.2f}x  InsNet parallel {tps[PARALLEL]:.0f} tok/s, " \
            f"/InsNet l2r {tps[PARALLEL] / tps[L2R]:.2f}x, /AR {tps[PARALLEL] / tps['ar']:.2f}x  InsNet parallel with " \
            f"the slot query stream {tps[PARALLEL_QUERY]:.0f} tok/s, /InsNet l2r {tps[PARALLEL_QUERY] / tps[L2R]:.2f}x" + (
            f"  like with like (same token loss): InsNet l2r/AR {tps[L2R] / tps[AR_FUSED]:.2f}x, "
            f"InsNet/AR {tps['insnet'] / tps[AR_FUSED]:.2f}x") + (
            f"  InsNet without offset term/AR {tps[NO_OFFSETS] / tps['ar']:.2f}x" if NO_OFFSETS in tps else "") + (
            f"  InsNet gather/AR {tps[GATHER] / tps['ar']:.2f}x  InsNet l2r view/AR {tps[L2R_VIEW] / tps['ar']:.2f}x"
            if GATHER in tps else "") + (
            f"  InsNet parallel from the checkpoint {tps[TRAINED]:.0f} tok/s, on-policy {args.on_policy} "
            f"{tps[ON_POLICY]:.0f} tok/s: on-policy/without {tps[ON_POLICY] / tps[TRAINED]:.2f}x, "
            f"/InsNet l2r {tps[ON_POLICY] / tps[L2R]:.2f}x" if ON_POLICY in tps else "") + "".join(
            f"  InsNet parallel with the slot query stream, slot rate {r:g}: {tps[k]:.0f} tok/s, "
            f"/InsNet l2r {tps[k] / tps[L2R]:.2f}x, /with every slot {tps[k] / tps[PARALLEL_QUERY]:.2f}x"
            for r in rates for k in [f"{PARALLEL_QUERY}{SLOT_RATE}{r:g}"]) + "".join(
            f"  InsNet parallel with the slot query stream through the last {n} layers: {tps[k]:.0f} tok/s, "
            f"/InsNet l2r {tps[k] / tps[L2R]:.2f}x, /through every layer {tps[k] / tps[PARALLEL_QUERY]:.2f}x"
            for n in query_layers for k in [f"{PARALLEL_QUERY}{QUERY_LAYERS}{n}"]) + "".join(
            f"  InsNet parallel with the slot query stream{where}, the slots decoding asks: {tps[k + ASKED]:.0f} "
            f"tok/s, /InsNet l2r {tps[k + ASKED] / tps[L2R]:.2f}x, /every slot scored {tps[k + ASKED] / tps[k]:.2f}x"
            for k, where in streams if k + ASKED in tps)
        if args.asked_slots:  # the slots a pass scores per target word, on this setting's drawn trajectories
            counts = {"every": 0, "asked": 0}
            for batch in batches:
                tgt = batch["target"]
                target = torch.cat([tgt.new_full((tgt.size(0), 1), d.bos()), tgt], 1)
                lengths = target.ne(d.pad()).sum(1)
                layers = sample_layers(lengths, target.size(1), torch.Generator().manual_seed(0), 1.0, 0.1)
                counts["every"] += gap_targets(layers, lengths).row.numel()
                counts["asked"] += gap_targets(layers, lengths, weight=asked_slots(layers)).row.numel()
            words = ntok - sum(b["target"].size(0) for b in batches)  # </s> is not a word
            print(f"{setting:9s} slots scored per target word: every slot {counts['every'] / words:.2f}, the slots "
                  f"decoding asks {counts['asked'] / words:.2f}", flush=True)
        print(f"{setting:9s} mean target len {mean_len:5.1f}: AR {tps['ar']:7.0f} tok/s  InsNet {tps['insnet']:7.0f} tok/s  "
              f"{naive}InsNet/AR {tps['insnet'] / tps['ar']:.2f}x" +
              (f"  InsNet/naive {tps['insnet'] / tps['naive']:.1f}x" if "naive" in tps else "") + plain, flush=True)
        if args.linear_kernels:
            print(f"{setting:9s} oneDNN's products against F.linear's: " + "  ".join(
                f"{k} {tps[k]:.0f} against {tps[k + STOCK]:.0f} tok/s ({tps[k] / tps[k + STOCK]:.2f}x)"
                for k in ("ar", AR_FUSED, "insnet", L2R)) +
                  f"  |  like with like, InsNet l2r/AR: {tps[L2R] / tps[AR_FUSED]:.2f}x oneDNN, "
                  f"{tps[L2R + STOCK] / tps[AR_FUSED + STOCK]:.2f}x F.linear", flush=True)
    extra, kernels = args.without_offset_term, args.offset_kernels
    print("\n| setting | target len | AR tok/s | InsNet tok/s | naive tok/s | InsNet/AR | InsNet/naive | "
          "InsNet l2r tok/s | InsNet l2r/AR | AR, InsNet's token loss, tok/s | InsNet l2r/AR, same loss | "
          "InsNet parallel tok/s | InsNet parallel/InsNet l2r | InsNet parallel/AR |" + (" no offset term tok/s | no offset term/AR |" if extra else "") +
          (" InsNet gather tok/s | InsNet gather/AR | InsNet l2r view tok/s | InsNet l2r view/AR |" if kernels else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if extra else "") + ("---|---|---|---|" if kernels else ""))
    for setting, mean_len, tps in rows:
        naive = (f"{tps['naive']:.0f} | ", f"{tps['insnet'] / tps['naive']:.1f}x") if "naive" in tps else ("| ", "")
        print(f"| {setting} | {mean_len:.1f} | {tps['ar']:.0f} | {tps['insnet']:.0f} | {naive[0]}"
              f"{tps['insnet'] / tps['ar']:.2f}x | {naive[1]} | {tps[L2R]:.0f} | {tps[L2R] / tps['ar']:.2f}x | "
              f"{tps[AR_FUSED]:.0f} | {tps[L2R] / tps[AR_FUSED]:.2f}x | {tps[PARALLEL]:.0f} | "
              f"{tps[PARALLEL] / tps[L2R]:.2f}x | {tps[PARALLEL] / tps['ar']:.2f}x |" +
              (f" {tps[NO_OFFSETS]:.0f} | {tps[NO_OFFSETS] / tps['ar']:.2f}x |" if extra else "") +
              (f" {tps[GATHER]:.0f} | {tps[GATHER] / tps['ar']:.2f}x | {tps[L2R_VIEW]:.0f} | "
               f"{tps[L2R_VIEW] / tps['ar']:.2f}x |" if kernels else ""))

if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
