"""Do two versions of the decoding package decode the same tokens? A check without checkpoints or data.

    python experiments/identical_outputs.py save OUT.pt      # decode with this tree, keep every output
    python experiments/identical_outputs.py compare OUT.pt   # decode again, compare with OUT.pt
    python experiments/identical_outputs.py against OLD_DIR  # save with the tree OLD_DIR (e.g. `git worktree add
                                                             # /tmp/old REV`), then compare with this one

Tiny InsNet models with random weights (tests/conftest.py's ``build_tiny_model``: the plain heads, the query stream
``--slot-query-stream``, a ``--slot-objective gap`` model) and a tiny autoregressive model (the judge and the verifier)
decode random source batches at batch 1 and 64 with every decoding: sequential, parallel (the command line's defaults
and the paper's plain rules), beam 3, 4 candidates + MBR, candidates that finish early, the stop check, the repeat rule,
the minimum length, sampling (seeded), external rerank, verification, constrained starts (initial tokens and
constraint phrases), infilling blanks, and the uncached path. ``compare`` prints one line per decoding and batch size,
``identical`` or ``DIFFERENT``, and exits 1 on any difference. ``experiments/identical_outputs.sh`` does the same
with trained checkpoints through fairseq-generate.
"""
import os
import subprocess
import sys
import tempfile

# the tree whose package and tests/conftest.py decode (``against`` runs this script with the other tree's)
ROOT = os.environ.get("IDENTICAL_OUTPUTS_TREE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # tests/conftest.py imports its neighbours by name

import torch  # noqa: E402
from fairseq.token_generation_constraints import pack_constraints  # noqa: E402

from insnet_fairseq.decoding.generator import InsertionGenerator  # noqa: E402
from insnet_fairseq.decoding.options import DecodingOptions  # noqa: E402
from tests.conftest import build_tiny_ar, build_tiny_model, random_batch, sample_of  # noqa: E402

PARALLEL = dict(mode="parallel", slot_top_p=0.9, skip_repeats=True, stop_check_prob=0.75)
# name -> (model, options, inputs); inputs: None, "initial", "constraints" or "blanks"
DECODINGS = {
    "sequential": ("plain", dict(mode="sequential"), None),
    "sequential-qs": ("query", dict(mode="sequential"), None),
    "parallel": ("plain", PARALLEL, None),
    "parallel-qs": ("query", PARALLEL, None),
    "parallel-paper": ("plain", dict(mode="parallel", slot_top_p=0.7), None),
    "parallel-rules": ("query", dict(PARALLEL, min_token_prob=0.05, min_length_ratio=1.0), None),
    "parallel-nocache": ("query", dict(PARALLEL, use_cache=False), None),
    "beam3": ("plain", dict(mode="sequential", beam=3), None),
    "beam3-qs": ("query", dict(mode="sequential", beam=3, min_length_ratio=0.5), None),
    "cand4-mbr": ("plain", dict(PARALLEL, candidates=4, candidates_mbr=1.0), None),
    "cand4-finish2": ("query", dict(PARALLEL, candidates=4, candidates_finish=2), None),
    "cand4-sampled": ("plain", dict(PARALLEL, candidates=4, sampling=True, sampling_topk=5), None),
    "cand3-rerank": ("plain", dict(PARALLEL, candidates=3, reranking=True), None),
    "verify": ("plain", dict(mode="parallel", slot_top_p=0.9, verify=True, verify_max_len=(2.0, 10)), None),
    "gap-parallel": ("gap", dict(mode="parallel"), None),
    "gap-sequential": ("gap", dict(mode="sequential"), None),
    "initial-tokens": ("query", PARALLEL, "initial"),
    "constraints": ("plain", dict(mode="sequential"), "constraints"),
    "constraints-par": ("query", PARALLEL, "constraints"),
    "blanks": ("plain", PARALLEL, "blanks"),
    "gap-blanks": ("gap", dict(mode="parallel"), "blanks"),
}


def models():
    """The tiny models: name -> (model, dictionary); and the autoregressive judge/verifier."""
    out = {}
    for name, seed, extra in (("plain", 7, {}), ("query", 8, dict(slot_query_stream=True)),
                              ("gap", 9, dict(slot_objective="gap"))):
        model, d = build_tiny_model(seed=seed, vocab=30, **extra)
        if name != "gap":  # random weights that stop after a while
            model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
        out[name] = (model, d)
    return out, build_tiny_ar(out["plain"][1])


def inputs(kind, B, d, seed):
    """The generate() keywords of ``kind`` for a batch of B sentences."""
    if kind is None:
        return {}
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(d.nspecial, len(d), (int(n),), generator=g).tolist()
            for n in torch.randint(0, 4, (B,), generator=g)]
    if kind == "initial":
        return dict(initial_tokens=rows)
    if kind == "constraints":
        return dict(constraints=pack_constraints([[torch.tensor(r)] if r else [] for r in rows]))
    blanks = [sorted(set(torch.randint(0, len(r) + 1, (2,), generator=g).tolist())) for r in rows]
    return dict(initial_tokens=rows, blanks=blanks)


def decode_all():
    """{(decoding, batch size): [per sentence, per hypothesis: token list]}."""
    torch.set_num_threads(1)
    zoo, ar = models()
    out = {}
    for name, (which, options, kind) in DECODINGS.items():
        model, d = zoo[which]
        for B in (1, 64):
            src, src_lengths, _ = random_batch(d, [5] * B, src_len=9, seed=B)
            torch.manual_seed(0)  # sampling
            gen = InsertionGenerator(d, DecodingOptions(max_steps=30, **options))
            given = [model, ar] if options.get("reranking") or options.get("verify") else [model]
            hyps = gen.generate(given, sample_of(src, src_lengths), **inputs(kind, B, d, seed=B + 1))
            out[(name, B)] = [[h["tokens"].tolist() for h in sentence] for sentence in hyps]
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "compare", "against"):
        sys.exit(__doc__)
    if sys.argv[1] == "against":
        old = os.path.abspath(sys.argv[2])
        saved = os.path.join(tempfile.mkdtemp(), "old.pt")
        env = dict(os.environ, IDENTICAL_OUTPUTS_TREE=old, PYTHONPATH=old)
        subprocess.run([sys.executable, os.path.abspath(__file__), "save", saved], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sys.argv[1:] = ["compare", saved]
    outputs = decode_all()
    if sys.argv[1] == "save":
        torch.save(outputs, sys.argv[2])
        print(f"saved {len(outputs)} decodings to {sys.argv[2]}")
        return
    before = torch.load(sys.argv[2])
    status = 0
    for key in sorted(set(before) | set(outputs), key=str):
        n = sum(len(s) for s in outputs.get(key, []))
        same = before.get(key) == outputs.get(key)
        print(f"{'identical' if same else 'DIFFERENT'}: {key[0]} batch {key[1]}, {n} hypotheses")
        status |= not same
    sys.exit(status)


if __name__ == "__main__":
    main()
