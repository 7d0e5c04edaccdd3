"""fairseq-train that holds still after its first checkpoint, so a test can kill it at a known point.

    python tests/cli/train_then_hold.py MARKER [fairseq-train arguments...]

Runs fairseq-train unchanged until the first ``save_checkpoint`` returns (every file written and
copied), then creates MARKER and sleeps until it is killed. A test waits for MARKER and sends
SIGKILL: the kill lands mid-epoch, after a known update, whatever the machine's load (polling for
checkpoint_last.pt instead raced with the trainer, which could reach the next save, or be killed
while copying checkpoint_last.pt, before the poll saw the file).
"""
import sys
import time

from fairseq import checkpoint_utils
from fairseq_cli import train


def main():
    marker, argv = sys.argv[1], sys.argv[2:]
    save = checkpoint_utils.save_checkpoint

    def save_then_hold(*args, **kwargs):
        save(*args, **kwargs)
        open(marker, "w").close()
        while True:  # wait here for SIGKILL
            time.sleep(3600)

    checkpoint_utils.save_checkpoint = save_then_hold  # fairseq_cli.train calls it through the module
    sys.argv = ["fairseq-train", *argv]
    train.cli_main()
    sys.exit("train_then_hold: training ended without saving a checkpoint")


if __name__ == "__main__":
    main()
