# insnet-fairseq: `make demo` runs the main job, `make test` the tests; both install on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
INSTALLED := $(VENV)/.installed
SHARED_MULTI30K := $(abspath ../shared/data/multi30k)
MULTI30K_DIR ?= $(SHARED_MULTI30K)

.PHONY: install test demo multi30k bench-train clean

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

multi30k: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/prepare_bitext.py --name multi30k_en_de \
		--raw-dir $(MULTI30K_DIR) --src en --tgt de --bpe-merges 10000

# The main job: prepare Multi30k, train insnet_small for DEMO_MINUTES on CPU, decode the test
# set sequentially and in parallel (sacreBLEU, steps, ms/sentence), show one trajectory.
DEMO_MINUTES ?= 15
demo: multi30k
	PATH=$(BIN):$$PATH DEMO_MINUTES=$(DEMO_MINUTES) MULTI30K_DIR=$(MULTI30K_DIR) bash recipes/demo.sh

bench-train: install
	$(BIN)/python benchmarks/train_throughput.py

clean:
	rm -rf checkpoints
