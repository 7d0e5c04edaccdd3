"""docs/flags.md is what ``python -m insnet_fairseq.flag_reference`` prints: the flag reference is generated from the
options' own help and defaults, so it cannot drift from them."""
import pathlib

from insnet_fairseq.flag_reference import reference

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_docs_flags_md_is_generated_from_the_options():
    committed = (ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    assert committed == reference(), (
        "docs/flags.md differs from the options' metadata: regenerate it with "
        "`python -m insnet_fairseq.flag_reference > docs/flags.md`")


def test_every_flag_of_the_package_is_in_the_reference():
    """Each group's flags come out, with a default: the gap objective's flags of four groups among them."""
    text = reference()
    for flag in ("--slot-objective", "--layerization", "--trajectory-spread", "--gap-skip", "--gap-temperature",
                 "--end-of-slot", "--insertion-mode", "--stop-check-prob", "--dinic-tau", "--infill",
                 "--max-iterations"):
        assert f"| `{flag}`" in text, flag
    assert "| `--encoder-layers`" not in text  # fairseq's own transformer flags are not repeated
    assert "| `--source-lang`" not in text
    row = next(line for line in text.splitlines() if line.startswith("| `--slot-top-p`"))
    assert "sequential `0.7`, parallel `0.9`; or stored with the model" in row
