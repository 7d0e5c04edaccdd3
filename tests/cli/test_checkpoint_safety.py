"""Checkpoints load weights-only everywhere (insnet_fairseq/checkpoint_safety.py): a checkpoint whose unpickling would
create a file is refused by every loader, in one line naming the file, the class and the converter, and the file is
never created; every kind of checkpoint the project's training writes loads; recipes/trust_checkpoint.py converts a
trusted older one."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import AR_TINY, BIN, ENV, ROOT, TINY, TINY_LM, run, train_cmd  # noqa: F401  (small_data, lm_data)
from insnet_fairseq import checkpoint_safety
from insnet_fairseq.errors import CheckpointError

REFUSED = "which weights-only loading refuses"


class CreatesFile:
    """Unpickled, it calls ``open(path, "w")``: the file appears if anything unpickles it fully."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


class RunsShell:
    """Unpickled, it runs ``touch path`` in a shell."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


@pytest.fixture(scope="module")
def crafted(tiny_checkpoint, tmp_path_factory):
    """(checkpoint, marker): tiny_checkpoint with an object in its extra_state that creates ``marker`` when
    unpickled."""
    tmp = tmp_path_factory.mktemp("crafted")
    state = checkpoint_safety.load(tiny_checkpoint)
    marker = str(tmp / "MARKER")
    state["extra_state"]["payload"] = CreatesFile(marker)
    path = str(tmp / "crafted.pt")
    torch.save(state, path)
    return path, marker


def assert_refused(out, path, marker):
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if REFUSED in line]
    assert lines, text[-3000:]
    assert path in lines[0] and "io.open" in lines[0] and "recipes/trust_checkpoint.py" in lines[0]
    assert not os.path.exists(marker)


def test_the_package_loader_refuses_without_running_it(tiny_checkpoint, tmp_path):
    marker = str(tmp_path / "MARKER")
    for payload, name in ((CreatesFile(marker), "io.open"), (RunsShell(marker), "posix.system")):
        state = checkpoint_safety.load(tiny_checkpoint)
        state["extra_state"]["payload"] = payload
        path = str(tmp_path / "crafted.pt")
        torch.save(state, path)
        with pytest.raises(CheckpointError) as e:
            checkpoint_safety.load(path)
        message = str(e.value)
        assert "\n" not in message and path in message and name in message
        assert f"python recipes/trust_checkpoint.py {path} SAFE.pt" in message
        assert not os.path.exists(marker)


def fairseq_cli(tool, data, path, *flags):
    return [os.path.join(BIN, tool), data, "--user-dir", "insnet_fairseq", "--task", "insertion_translation",
            "--path", path, *flags]


@pytest.mark.parametrize("entry", ["generate", "interactive", "restore-file", "finetune-from-model"])
def test_fairseq_tools_refuse_in_one_line(small_data, crafted, entry, tmp_path):
    path, marker = crafted
    if entry == "generate":
        out = run(fairseq_cli("fairseq-generate", small_data, path, "--gen-subset", "test", "--batch-size", "8"),
                  timeout=600)
    elif entry == "interactive":
        out = run(fairseq_cli("fairseq-interactive", small_data, path), input="a man rides a horse .\n", timeout=600)
    else:
        out = run(train_cmd(small_data, str(tmp_path / "save"), f"--{entry}", path, "--max-update", "1"), timeout=600)
    assert_refused(out, path, marker)


def test_hub_refuses(small_data, crafted):
    from insnet_fairseq.models.insnet import InsNetModel

    path, marker = crafted
    with pytest.raises(CheckpointError, match=REFUSED) as e:
        InsNetModel.from_pretrained(os.path.dirname(path), checkpoint_file=os.path.basename(path),
                                    data_name_or_path=small_data)
    assert "\n" not in str(e.value) and path in str(e.value)
    assert not os.path.exists(marker)


def recipe_commands(data, path, raw, tmp):
    """Every recipe and benchmark that reads a checkpoint named on its command line: (name, argv[, environment])."""
    py = sys.executable
    work = os.path.join(os.path.dirname(os.path.dirname(data)), "work", os.path.basename(data))  # conftest's small_data
    return [
        ("average_checkpoints", [py, "recipes/average_checkpoints.py", "--inputs", path, "--output", f"{tmp}/avg.pt"]),
        ("inference_checkpoint", [py, "recipes/inference_checkpoint.py", path, f"{tmp}/small.pt"]),
        ("store_decoding", [py, "recipes/store_decoding.py", path, "--show"]),
        ("distill", [py, "recipes/distill.py", os.path.basename(data), "--data-dir", os.path.dirname(data),
                     "--work-dir", f"{tmp}/work", "--checkpoint-dir", f"{tmp}/ck"], {"TEACHER": path}),
        ("evaluate", [py, "recipes/evaluate.py", "--data", data, "--path", path, "--src", "en", "--tgt", "de",
                      "--raw-ref", os.path.join(raw, "test.de"), "--", "--user-dir", "insnet_fairseq", "--task",
                      "insertion_translation"]),
        ("decode_latency", [py, "benchmarks/decode_latency.py", "--data", data, "--insnet", path, "--ar", path,
                            "--sentences", "4", "--batch-sizes", "1", "--rounds", "1"]),
        ("fuzz_input", [py, "benchmarks/fuzz_input.py", "--path", path, "--data", data, "--lines", "4",
                        "--channels", "api"]),
        ("constraint_phrases", [py, "benchmarks/constraint_phrases.py", "--path", path, "--data", data, "--source",
                                f"{work}/test.bpe.en", "--target", f"{work}/test.bpe.de", "--lines", "4"]),
    ]


@pytest.mark.parametrize("name", ["average_checkpoints", "inference_checkpoint", "store_decoding", "distill",
                                  "evaluate", "decode_latency", "fuzz_input", "constraint_phrases"])
def test_recipes_and_benchmarks_refuse_in_one_line(small_data, raw_corpus, crafted, name, tmp_path):
    path, marker = crafted
    entry = {c[0]: c for c in recipe_commands(small_data, path, raw_corpus, str(tmp_path))}[name]
    extra_env = entry[2] if len(entry) > 2 else {}
    out = subprocess.run(entry[1], cwd=ROOT, env={**ENV, **extra_env}, capture_output=True, text=True, timeout=600)
    assert_refused(out, path, marker)


def test_kill_campaign_reads_weights_only(crafted):
    from benchmarks import kill_campaign

    path, marker = crafted
    with pytest.raises(CheckpointError, match=REFUSED):
        kill_campaign.load(path)
    assert kill_campaign.readable(os.path.dirname(path))[0][1].startswith("CheckpointError")
    assert not os.path.exists(marker)


# ---------------------------------------------------------------- every kind of checkpoint the project writes loads
NAT = ["--task", "translation_lev", "--criterion", "nat_loss", "--noise", "random_delete", "--decoder-learned-pos",
       "--encoder-learned-pos", "--apply-bert-init", "--ddp-backend", "legacy_ddp", *AR_TINY[2:],
       "--share-all-embeddings", "--max-tokens", "512"]


def kinds(small_data, lm_data):
    """{kind: fairseq-train arguments after the data directory}: each a tiny model of recipes/train.sh's KINDs."""
    insnet = ["--task", "insertion_translation", "--criterion", "insnet_loss", "--share-all-embeddings",
              "--max-tokens", "256"]
    return {
        "insnet": (small_data, [*insnet, *TINY, "--memory-efficient-fp16"]),
        "indigo": (small_data, [*insnet, "--arch", "indigo_small", *TINY[2:]]),
        "insnet_lm_infill": (lm_data, ["--task", "insertion_lm", "--infill", "--criterion", "insnet_loss", *TINY_LM,
                                       "--share-all-embeddings", "--max-tokens", "512"]),
        "ar": (small_data, ["--task", "translation", *AR_TINY, "--share-all-embeddings", "--max-tokens", "512",
                            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]),
        "levt": (small_data, ["--arch", "levenshtein_transformer", *NAT]),
        "inst": (small_data, ["--arch", "insertion_transformer", *NAT]),
        "ar_lm": (lm_data, ["--task", "language_modeling", "--sample-break-mode", "eos", "--arch", "transformer_lm",
                            "--decoder-layers", "1", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
                            "--decoder-attention-heads", "2", "--criterion", "cross_entropy", "--max-tokens", "256"]),
    }


# InsNet's in the fast tier; the other systems' in the slow one (make test-all)
@pytest.mark.parametrize("kind", ["insnet", *(pytest.param(k, marks=pytest.mark.slow)
                                              for k in ("indigo", "insnet_lm_infill", "ar", "levt", "inst", "ar_lm"))])
def test_every_kind_of_checkpoint_loads_weights_only(small_data, lm_data, kind, tmp_path):
    """Two updates with optimizer state and an interval checkpoint, then its average, its decoding-only copy (and,
    for InsNet, stored decoding settings): every file loads through the package's loader and resumes training
    through fairseq's (the expansion LM's own run: tests/cli/test_expansion_lm_cli.py)."""
    data, flags = kinds(small_data, lm_data)[kind]
    save = str(tmp_path / "save")
    common = ["--user-dir", "insnet_fairseq", "--optimizer", "adam", "--lr", "1e-3", "--save-interval-updates", "1",
              "--num-workers", "0", "--seed", "1", "--disable-validation", "--save-dir", save, "--log-format", "simple"]
    out = run([os.path.join(BIN, "fairseq-train"), data, *flags, *common, "--max-update", "2"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    py = sys.executable
    made = [run([py, "recipes/average_checkpoints.py", "--inputs", save, "--output", f"{save}/avg.pt"]),
            run([py, "recipes/inference_checkpoint.py", f"{save}/checkpoint_last.pt", f"{save}/infer.pt", "--half"])]
    if kind == "insnet":
        made.append(run([py, "recipes/store_decoding.py", f"{save}/infer.pt", "--insertion-mode", "parallel",
                         "--stop-check-prob", "0.5"]))
    assert all(m.returncode == 0 for m in made), [m.stderr[-2000:] for m in made]
    files = sorted(f for f in os.listdir(save) if f.endswith(".pt"))
    assert {"checkpoint_last.pt", "avg.pt", "infer.pt"} <= set(files)
    for f in files:
        assert checkpoint_safety.unsafe_globals(os.path.join(save, f)) == [], f
        checkpoint_safety.load(os.path.join(save, f))
    resumed = run([os.path.join(BIN, "fairseq-train"), data, *flags, *common, "--max-update", "3"], timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "@ 2 updates" in resumed.stdout + resumed.stderr  # fairseq's "Loaded checkpoint ... (epoch 1 @ 2 updates)"


# ---------------------------------------------------------------- converting a trusted checkpoint
def test_trust_checkpoint_converts_a_trusted_older_checkpoint(small_data, tiny_checkpoint, tmp_path):
    import http

    from omegaconf import OmegaConf

    state = checkpoint_safety.load(tiny_checkpoint)
    state["cfg"] = OmegaConf.create(state["cfg"], flags={"allow_objects": True})  # as older code saved it
    state["extra_state"]["status"] = http.HTTPStatus.OK
    state["extra_state"]["kept"] = {3}
    state["extra_state"]["handle"] = CreatesFile(str(tmp_path / "opened"))
    old, new = str(tmp_path / "old.pt"), str(tmp_path / "new.pt")
    torch.save(state, old)
    refused = run(fairseq_cli("fairseq-generate", small_data, old, "--gen-subset", "test", "--batch-size", "8"))
    assert refused.returncode != 0 and "omegaconf.dictconfig.DictConfig" in refused.stderr and REFUSED in refused.stderr
    out = run([sys.executable, "recipes/trust_checkpoint.py", old, new])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cfg: an omegaconf DictConfig, converted to plain containers" in out.stdout
    assert "extra_state.status: the enum HTTPStatus.OK, kept as its value 200" in out.stdout
    assert "extra_state.handle: dropped" in out.stdout
    converted = checkpoint_safety.load(new)
    assert converted["extra_state"]["kept"] == [3] and "handle" not in converted["extra_state"]
    assert isinstance(converted["cfg"], dict)
    decoded = run(fairseq_cli("fairseq-generate", small_data, new, "--gen-subset", "test", "--batch-size", "8",
                              "--max-insertion-steps", "3"))
    assert decoded.returncode == 0, decoded.stderr[-3000:]
    again = run([sys.executable, "recipes/trust_checkpoint.py", new, str(tmp_path / "copy.pt")])
    assert again.returncode == 0 and "already loads weights-only" in again.stdout


def test_only_the_converter_unpickles_fully():
    """Full unpickling (torch.load with weights_only off) is written in one file of the tree: the converter."""
    hits = []
    for top in ("insnet_fairseq", "recipes", "benchmarks", "experiments", "tests"):
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".py", ".sh")) and "weights_only" + "=False" in open(os.path.join(d, n)).read():
                    hits.append(os.path.relpath(os.path.join(d, n), ROOT))
    assert hits == ["recipes/trust_checkpoint.py"]
