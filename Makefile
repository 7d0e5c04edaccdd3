# insnet-fairseq: `make demo` runs the main job, `make test` the fast tests, `make test-all` every test; all install on
# first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
INSTALLED := $(VENV)/.installed
SHARED_MULTI30K := $(abspath ../shared/data/multi30k)
MULTI30K_DIR ?= $(SHARED_MULTI30K)

.PHONY: install test test-all demo frontier multi30k wmt-ro-en wmt-en-de wat-en-ja custom lm-multi30k lm-custom lm-parse-multi30k infill-multi30k infill-baseline-multi30k bench-train bench-memory kill-campaign fuzz constraint-check clean

# make install: .venv with torch 2.13.0, fairseq-fixed 0.12.3.1 and this package (editable, with its C++ kernel).
# TORCH_VARIANT picks the torch build: auto (default: cuda when `nvidia-smi -L` finds a GPU, else cpu), cpu or cuda.
#   cpu   torch==2.13.0 as pip's configured sources offer it; the install fails if an nvidia- package came in (where
#         pip's index offers only the CUDA build: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu).
#   cuda  torch==2.13.0 from TORCH_INDEX_URL (https://download.pytorch.org/whl/cu128; e.g. .../whl/cu126 for an older
#         driver); prints whether torch sees the GPU. fairseq-train and fairseq-generate (so every recipe) then run on
#         the GPU; CUDA_VISIBLE_DEVICES= keeps a run on the CPU.
# To switch an installed .venv to the other build, remove .venv first.
# PIP_OPTS: options added to every pip call of the install.
# A machine without network: `bash recipes/offline_bundle.sh pack DIR` on a machine with network downloads every
# wheel (and the Multi30k raw files when present) into DIR; `bash recipes/offline_bundle.sh install DIR` on the
# offline machine runs this install with PIP_OPTS="--no-index --find-links DIR".
TORCH_VERSION := 2.13.0
TORCH_VARIANT ?= auto
TORCH_BUILD = $(if $(filter auto,$(TORCH_VARIANT)),$(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu),$(TORCH_VARIANT))
TORCH_INDEX_URL ?= $(if $(filter cuda,$(TORCH_BUILD)),https://download.pytorch.org/whl/cu128)
PIP_OPTS ?=
PIP := $(BIN)/pip

install: $(INSTALLED)

$(INSTALLED): setup.py requirements.txt insnet_fairseq/modules/offset_scores.cpp
	@case "$(TORCH_BUILD)" in cpu|cuda) echo "make install: torch $(TORCH_VERSION), $(TORCH_BUILD) build" ;; \
	  *) echo "make install: TORCH_VARIANT is auto, cpu or cuda, not '$(TORCH_VARIANT)'" >&2; exit 2 ;; esac
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(PIP_OPTS) --upgrade pip wheel setuptools
	$(PIP) install -q $(PIP_OPTS) torch==$(TORCH_VERSION) $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	$(PIP) install -q $(PIP_OPTS) -r requirements.txt
	# fairseq-fixed is an sdist whose build needs torch and whose metadata asks for torchaudio: build it against the
	# torch above and take no dependencies from it. Without CUDA_HOME it leaves out its optional CUDA kernels (they
	# need nvcc; nothing here uses them).
	env -u CUDA_HOME $(PIP) install -q $(PIP_OPTS) --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
	$(PIP) install -q $(PIP_OPTS) --no-build-isolation --no-deps -e .
	$(BIN)/python -c "import torch, fairseq, insnet_fairseq; assert torch.__version__.startswith('$(TORCH_VERSION)'), torch.__version__; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	if [ "$(TORCH_BUILD)" = cuda ]; then \
	  $(BIN)/python -c "import sys, torch; print('CUDA build', torch.version.cuda, '| GPU available:', torch.cuda.is_available()); torch.version.cuda or sys.exit('a CPU build of torch is installed in $(VENV): remove $(VENV) and run make install again')"; \
	else \
	  ! $(PIP) list 2>/dev/null | grep -qi '^nvidia-' || { echo 'a CUDA package was installed on the CPU variant: pass TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu, or TORCH_VARIANT=cuda' >&2; exit 1; }; \
	fi
	touch $@

# Tests in two tiers (pytest.ini's markers): `make test` the fast tier, the unit tests, invariants and command-line
# checks (-m "not slow"); `make test-all` every test, the recipe and stress runs too (what .ci/run calls).
test: install
	$(BIN)/python -m pytest -q -m "not slow" tests

test-all: install
	$(BIN)/python -m pytest -q tests

# Data recipes (recipes/corpora.py lists the raw files each needs in RAW_DIR): data-bin/multi30k_en_de,
# wmt16_ro_en, wmt14_en_de, wat_en_ja. Without RAW_DIR they download (ASPEC: a licence, never).
multi30k: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/corpora.py multi30k --raw-dir $(or $(RAW_DIR),$(MULTI30K_DIR))

wmt-ro-en wmt-en-de wat-en-ja: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/corpora.py $@ $(if $(RAW_DIR),--raw-dir $(RAW_DIR))

# Any parallel corpus: make custom NAME=my_corpus SRC=xx TGT=yy RAW_DIR=dir-with-{train,valid,test}.{xx,yy}
# prepares data-bin/NAME (escapes and pre-tokenised sides detected), trains recipes/train.sh KIND (insnet)
# into checkpoints/NAME-KIND and scores the test set with recipes/evaluate.py. Optional: KIND, MODE,
# BPE_MERGES (10000), TOKENIZED / UNESCAPE (auto|yes|no), MAX_LINES, STAGES (prepare,train,evaluate),
# TRAIN_ARGS, GEN_ARGS, WORK_DIR, DEST_DIR, SAVE_DIR, CSV; train.sh's UPDATES, MINUTES, MAX_TOKENS, LR, WARMUP.
custom: install
	@if [ -z "$(NAME)" ] || [ -z "$(SRC)" ] || [ -z "$(TGT)" ] || [ -z "$(RAW_DIR)" ]; then \
	  echo "usage: make custom NAME=name SRC=xx TGT=yy RAW_DIR=folder-with-{train,valid,test}.{xx,yy}" >&2; exit 2; fi
	PATH=$(BIN):$$PATH $(BIN)/python recipes/custom.py --name '$(NAME)' --src '$(SRC)' --tgt '$(TGT)' \
	  --raw-dir '$(RAW_DIR)' $(if $(KIND),--kind $(KIND)) $(if $(MODE),--mode $(MODE)) \
	  $(if $(BPE_MERGES),--bpe-merges $(BPE_MERGES)) $(if $(TOKENIZED),--tokenized $(TOKENIZED)) \
	  $(if $(UNESCAPE),--unescape $(UNESCAPE)) $(if $(MAX_LINES),--max-lines $(MAX_LINES)) \
	  $(if $(STAGES),--stages $(STAGES)) $(if $(WORK_DIR),--work-dir '$(WORK_DIR)') \
	  $(if $(DEST_DIR),--dest-dir '$(DEST_DIR)') $(if $(SAVE_DIR),--save-dir '$(SAVE_DIR)') \
	  $(if $(CSV),--csv '$(CSV)') --train-args '$(TRAIN_ARGS)' --generate-args '$(GEN_ARGS)'

# Lexically constrained generation (--task insertion_lm, recipes/prepare_lm.py): word-level, Moses-tokenised,
# lowercased monolingual data-bin, YAKE keywords of valid/test written next to it ({valid,test}.keywords, with the
# references {valid,test}.ref), and data-bin/NAME-ar, the AR baseline's keywords->sentence bitext (AR_BITEXT=no: skip).
# make lm-multi30k: the English side of Multi30k -> data-bin/lm_multi30k (and lm_multi30k-ar).
# make lm-custom NAME=yelp RAW_DIR=dir-with-{train,valid,test}.txt [EXT=txt] [LM_LANG=en] [TOKENIZED=auto|yes|no]
#   [LOWERCASE=yes|no] [MIN_COUNT=2] [MAX_KEYWORDS=4] [MAX_LINES=0] [AR_BITEXT=yes|no]: any one-sentence-per-line corpus.
# Train: bash recipes/train.sh insnet-lm data-bin/NAME SAVE_DIR (InsNet), bash recipes/train.sh ar data-bin/NAME-ar SAVE_DIR
# (the AR baseline); score: recipes/evaluate_lm.py. The paper's Table 2 / Table 6 rows: experiments/lm_budget.sh.
LM_FLAGS = $(if $(TOKENIZED),--tokenized $(TOKENIZED)) $(if $(LOWERCASE),--lowercase $(LOWERCASE)) \
  $(if $(MIN_COUNT),--min-count $(MIN_COUNT)) $(if $(MAX_KEYWORDS),--max-keywords $(MAX_KEYWORDS)) \
  $(if $(MAX_LINES),--max-lines $(MAX_LINES)) $(if $(AR_BITEXT),--ar $(AR_BITEXT)) $(if $(WORK_DIR),--work-dir '$(WORK_DIR)') \
  $(if $(DEST_DIR),--dest-dir '$(DEST_DIR)')
lm-multi30k: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/prepare_lm.py --name lm_multi30k --raw-dir $(or $(RAW_DIR),$(MULTI30K_DIR)) \
	  --ext en --lang en $(LM_FLAGS)

lm-custom: install
	@if [ -z "$(NAME)" ] || [ -z "$(RAW_DIR)" ]; then \
	  echo "usage: make lm-custom NAME=name RAW_DIR=folder-with-{train,valid,test}.txt [EXT=txt] [LM_LANG=en]" >&2; exit 2; fi
	PATH=$(BIN):$$PATH $(BIN)/python recipes/prepare_lm.py --name '$(NAME)' --raw-dir '$(RAW_DIR)' \
	  --ext '$(or $(EXT),txt)' --lang '$(or $(LM_LANG),en)' $(LM_FLAGS)

# make lm-parse-multi30k: an English dependency parse of every sentence of data-bin/lm_multi30k,
# data-bin/lm_multi30k/{train,valid,test}.deps (HEAD:DEPREL per token; recipes/parse_dependencies.py, spaCy 2
# in its own .venv-parse, installed on first use).
lm-parse-multi30k: lm-multi30k
	PATH=$(BIN):$$PATH $(BIN)/python recipes/parse_dependencies.py --name lm_multi30k --raw-dir $(or $(RAW_DIR),$(MULTI30K_DIR)) \
	  --ext en

# make infill-multi30k: text-infilling templates for data-bin/lm_multi30k (recipes/prepare_infill.py);
# fill them with fairseq-generate --task insertion_lm --infill, score with recipes/evaluate_infill.py.
infill-multi30k: lm-multi30k
	$(BIN)/python recipes/prepare_infill.py --data data-bin/lm_multi30k

# make infill-baseline-multi30k: the Self-attn baseline's bitext data-bin/lm_multi30k-infill (one example per
# blank; recipes/prepare_infill_seq2seq.py); train with recipes/train.sh infill, fill with recipes/infill_seq2seq.py.
infill-baseline-multi30k: infill-multi30k
	$(BIN)/python recipes/prepare_infill_seq2seq.py --data data-bin/lm_multi30k

# make distill-multi30k_en_de: AR teacher (recipes/train.sh ar), beam search over the training set,
# data-bin/multi30k_en_de-distill (see recipes/distill.py for TEACHER_ARGS, BEAM, GEN_BATCH, ...)
distill-%: install
	PATH=$(BIN):$$PATH $(BIN)/python recipes/distill.py $*

# The main job: prepare Multi30k, train InsNet parallel (insnet_small: l2r, then the end-of-slot objective with the
# slot query stream, as the frontier) and the autoregressive transformer at once for DEMO_UPDATES updates each (one
# thread each; on the GPU when there is one),
# score the test set the same way for both (AR greedy, InsNet parallel: sacreBLEU, its paired-bootstrap interval
# against AR, decoder passes per token, ms/sentence at batch 1 and 64: benchmarks/frontier.py), show one trajectory.
DEMO_UPDATES ?= 1000
demo: multi30k
	PATH=$(BIN):$$PATH DEMO_UPDATES=$(DEMO_UPDATES) MULTI30K_DIR=$(MULTI30K_DIR) bash recipes/demo.sh

# The frontier: AR teacher, distilled corpus, AR+KD and InsNet(-Dinic)+KD at one update budget, chosen on valid,
# scored on test by benchmarks/frontier.py -> results/frontier_multi30k_cpu.{csv,png} (recipes/frontier.sh: stages,
# TEACHER_UPDATES, UPDATES, BASE_UPDATES, VARIANTS, THREADS)
frontier: multi30k
	PATH=$(BIN):$$PATH MULTI30K_DIR=$(MULTI30K_DIR) bash recipes/frontier.sh

bench-train: install
	$(BIN)/python benchmarks/train_throughput.py

# Peak memory against target length (64..1024), InsNet vs the autoregressive model (and InsNet decoding)
bench-memory: install multi30k
	$(BIN)/python benchmarks/memory_scaling.py --decode

# SIGKILL the trainer KILLS (20) times, half mid-training (after an update drawn up front) and half during a
# checkpoint write, resuming each time; the resumed run must equal an uninterrupted one, unrounded (minutes)
KILLS ?= 20
kill-campaign: install multi30k
	PATH=$(BIN):$$PATH $(BIN)/python benchmarks/kill_campaign.py --kills $(KILLS)

# Fuzzed input: LINES (1000) hostile lines through fairseq-interactive (plain, --constraints) and the Python
# interface of checkpoint CKPT: make fuzz CKPT=checkpoints/demo/checkpoint_last.pt [DATA=data-bin/multi30k_en_de]
# (raw text through Moses + the recipe's BPE_CODES, work/<data name>/bpe.codes when it exists; FUZZ_ARGS: more flags)
DATA ?= data-bin/multi30k_en_de
LINES ?= 1000
BPE_CODES ?= $(wildcard work/$(notdir $(DATA))/bpe.codes)
fuzz: install
	@if [ -z "$(CKPT)" ]; then echo "usage: make fuzz CKPT=checkpoint.pt [DATA=data-bin/...] [LINES=1000]" >&2; exit 2; fi
	PATH=$(BIN):$$PATH $(BIN)/python benchmarks/fuzz_input.py --path '$(CKPT)' --data '$(DATA)' --lines $(LINES) \
	  $(if $(BPE_CODES),--bpe-codes '$(BPE_CODES)') $(FUZZ_ARGS)

# Constraint phrases kept whole by fairseq-interactive --constraints in every decoding mode: 200 test sentences, 1-2
# reference phrases each (default checkpoint: make demo's parallel model; the test set's BPE text of make multi30k)
CONSTRAINT_CKPT ?= checkpoints/demo-parallel/checkpoint_last.pt
constraint-check: install
	PATH=$(BIN):$$PATH $(BIN)/python benchmarks/constraint_phrases.py --path '$(CONSTRAINT_CKPT)' --data '$(DATA)'

clean:
	rm -rf checkpoints
