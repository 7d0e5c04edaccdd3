# insnet-fairseq: `make demo` runs the main job, `make test` the tests; both install on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
INSTALLED := $(VENV)/.installed
SHARED_MULTI30K := $(abspath ../shared/data/multi30k)
MULTI30K_DIR ?= $(SHARED_MULTI30K)

.PHONY: install test demo multi30k wmt-ro-en wmt-en-de wat-en-ja custom lm-multi30k lm-custom lm-parse-multi30k infill-multi30k infill-baseline-multi30k bench-train bench-memory kill-campaign fuzz clean

install: $(INSTALLED)

$(INSTALLED): setup.py requirements.txt insnet_fairseq/models/offset_scores.cpp
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
# Train and score the rows of the paper's Table 2 / Table 6: bash recipes/lm_budget.sh rows|train ROW|eval.
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

# The main job: prepare Multi30k, train insnet_small for DEMO_MINUTES on CPU, decode the test
# set sequentially and in parallel (sacreBLEU, steps, ms/sentence), show one trajectory.
DEMO_MINUTES ?= 15
demo: multi30k
	PATH=$(BIN):$$PATH DEMO_MINUTES=$(DEMO_MINUTES) MULTI30K_DIR=$(MULTI30K_DIR) bash recipes/demo.sh

bench-train: install
	$(BIN)/python benchmarks/train_throughput.py

# Peak memory against target length (64..1024), InsNet vs the autoregressive model (and InsNet decoding)
bench-memory: install multi30k
	$(BIN)/python benchmarks/memory_scaling.py --decode

# SIGKILL the trainer KILLS (20) times, at random moments and during checkpoint writes, resuming each time
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

clean:
	rm -rf checkpoints
