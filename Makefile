# insnet-fairseq: `make demo` runs the main job, `make test` the tests; both install on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
INSTALLED := $(VENV)/.installed
SHARED_MULTI30K := $(abspath ../shared/data/multi30k)
MULTI30K_DIR ?= $(SHARED_MULTI30K)

.PHONY: install test demo multi30k wmt-ro-en wmt-en-de wat-en-ja bench-train clean

install: $(INSTALLED)

$(INSTALLED): setup.py requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel setuptools
	# the pinned version resolves to the local CPU wheel; never the CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt
	# fairseq-fixed is an sdist whose build needs torch and whose metadata asks for torchaudio:
	# build it against the torch above and take no dependencies from it
	$(BIN)/pip install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
	$(BIN)/pip install -q --no-build-isolation --no-deps -e .
	$(BIN)/python -c "import torch, fairseq, insnet_fairseq; assert torch.__version__.startswith('2.13.0'), torch.__version__; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	! $(BIN)/pip list 2>/dev/null | grep -qi '^nvidia-' || (echo 'a CUDA package was installed' >&2; exit 1)
	touch $@

test: install
	$(BIN)/python -m pytest -q tests

# Data recipes (recipes/corpora.py lists the raw files each needs in RAW_DIR): data-bin/multi30k_en_de,
# wmt16_ro_en, wmt14_en_de, wat_en_ja. Without RAW_DIR they download (ASPEC: a licence, never).
multi30k: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/corpora.py multi30k --raw-dir $(or $(RAW_DIR),$(MULTI30K_DIR))

wmt-ro-en wmt-en-de wat-en-ja: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/corpora.py $@ $(if $(RAW_DIR),--raw-dir $(RAW_DIR))

# make distill-multi30k_en_de: AR teacher (recipes/train.sh ar), beam search over the training set,
# data-bin/multi30k_en_de-distill (see recipes/distill.py for TEACHER_ARGS, BEAM, GEN_BATCH, ...)
distill-%: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/distill.py $*

# The main job: prepare Multi30k, train insnet_small for DEMO_MINUTES on CPU, decode the test
# set sequentially and in parallel (sacreBLEU, steps, ms/sentence), show one trajectory.
DEMO_MINUTES ?= 15
demo: multi30k
	PATH=$(BIN):$$PATH DEMO_MINUTES=$(DEMO_MINUTES) MULTI30K_DIR=$(MULTI30K_DIR) bash recipes/demo.sh

bench-train: install
	$(BIN)/python benchmarks/train_throughput.py

clean:
	rm -rf checkpoints
