# Tempora — every entry point a user needs. `make install` builds .venv/ (editable install);
# every other target depends on it, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

TRACE  := $(PY) -m tempora_trace.cli
SIM    := $(PY) -m tempora_sim.cli

.PHONY: install test bench docs demo demo-run demo-traces demo-models validate lint clean \
        paper paper-vit paper-cifar paper-traces paper-vit-traces paper-cifar-traces

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q tests

bench: install
	$(PY) bench/bench_sim.py
	$(PY) bench/bench_trace.py

# The documentation site (mkdocs.yml) into site/, warnings as errors. Generated parts (CLI
# reference, methods table) are written from the code at build time, so they never go stale.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site
	@echo "documentation: site/index.html"

# ------------------------------------------------------------------ demo (no download)
# `make demo`: trace every method that fits each demo model on one corruption per category,
# sweep all protocols and write the report. Trace files are Make targets, so an interrupted
# demo resumes (`--resume` picks up the last complete episode) and finished traces are kept.
DEMO_DOMAINS ?= gaussian_noise motion_blur fog contrast
DEMO_MODELS  ?= demo-resnet demo-resnet-gn
DEMO_DEVICE  ?= cpu
DEMO_OUT     ?= results/demo
DEMO_TRACES  ?= $(DEMO_OUT)/traces
# Two traces at a time, one core each, fit the demo into ~10 minutes on 2 cores; per-episode
# summary lines stream as they finish (live bars need a terminal of their own: DEMO_JOBS=1).
DEMO_JOBS    ?= 2
DEMO_TRACE_OPTS ?= --frozen-sample 4 --threads 1

# $(call demo_files,ROOT): ROOT/<model>/<device>/<method>.parquet for every method that fits
# each demo model (asked of the tracer, so the lists never go stale). Expanded in recipes
# only, after `install` made the tracer importable.
demo_files = $(foreach model,$(DEMO_MODELS),\
    $(addprefix $(1)/$(model)/$(DEMO_DEVICE)/,$(addsuffix .parquet,$(shell $(TRACE) --methods-for $(model)))))

demo: install
	@$(MAKE) --no-print-directory -j$(DEMO_JOBS) --output-sync=line demo-run \
	    DEMO_FILES='$(call demo_files,$(DEMO_TRACES))'

# The committed set under traces/demo/: all methods, all 15 corruptions, severity 5.
demo-traces: install
	@$(MAKE) --no-print-directory -j$(DEMO_JOBS) --output-sync=line demo-trace-files \
	    DEMO_TRACES=traces/demo DEMO_DOMAINS=all DEMO_TRACE_OPTS='--frozen-sample 8 --threads 1' \
	    DEMO_FILES='$(call demo_files,traces/demo)'

demo-trace-files: $(DEMO_FILES)

demo-run: $(DEMO_FILES)
	$(SIM) report $(DEMO_TRACES) --out $(DEMO_OUT)/report
	@echo "report: $(DEMO_OUT)/report/report.md"

# <root>/<model>/<device>/<method>.parquet; the model is the stem's first path component.
$(DEMO_TRACES)/%.parquet:
	$(TRACE) --dataset demo --model $(firstword $(subst /, ,$*)) --method $(basename $(notdir $@)) \
	    --device $(DEMO_DEVICE) --domains $(DEMO_DOMAINS) --out $(@D) $(DEMO_TRACE_OPTS) \
	    $(if $(wildcard $(@D)/$(basename $(notdir $@)).partial),--resume)

demo-models: install
	$(PY) -m tempora_trace.models.train_demo --out src/tempora_trace/models/weights

# ------------------------------------------------------------------ validate (how faithful is the replay?)
# `make validate`: trace four methods on the demo benchmark, play each live against a real clock
# (discrete ρ = 100 %, 50 %, b = 1; amortised at two budgets; every setting twice), then
# `tempora-sim validate` puts replay and live side by side and exits 1 when a target is missed
# (docs/validation.md). One thing at a time: a live run beside another job would time that job.
VALIDATE_METHODS ?= standard tent eta cmf
VALIDATE_DOMAINS ?= gaussian_noise,motion_blur,fog,contrast
VALIDATE_BATCHES ?= 40
VALIDATE_RHO     ?= 1,0.5
VALIDATE_B       ?= 250ms,1s
VALIDATE_REPEATS ?= 2
VALIDATE_DEVICE  ?= cpu
VALIDATE_OUT     ?= results/validate
VALIDATE_OPTS    ?= --dataset demo --model demo-resnet --device $(VALIDATE_DEVICE) --domains $(VALIDATE_DOMAINS) \
                    --max-batches $(VALIDATE_BATCHES) --threads 1 --force
# Checkpoints scored on 16 later batches each (the amortised replay reads them).
VALIDATE_TRACE_OPTS ?= --frozen-sample 16

validate: install
	@mkdir -p $(VALIDATE_OUT)
	@for m in $(VALIDATE_METHODS); do \
	    extra=$$( [ $$m = standard ] && echo --no-default-checkpoints || echo $(VALIDATE_TRACE_OPTS) ); \
	    echo "trace $$m"; \
	    $(TRACE) run --method $$m $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/traces $$extra || exit 2; \
	done
	@for m in $(VALIDATE_METHODS); do \
	    echo "live $$m"; \
	    $(TRACE) live --method $$m $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/live --standard $(VALIDATE_OUT)/traces \
	        --protocol discrete,amortised --rho $(VALIDATE_RHO) --queue 1 --B $(VALIDATE_B) \
	        --repeats $(VALIDATE_REPEATS) || exit 2; \
	done
	$(SIM) validate $(VALIDATE_OUT)/live --traces $(VALIDATE_OUT)/traces --out $(VALIDATE_OUT)/report

# ------------------------------------------------------------------ paper reproduction
# `make paper DATA=/path/to/ImageNet-C [WEIGHTS=resnet50-0676ba61.pth] DEVICE=cuda`
# Each trace is its own target (`make -j` on several GPUs, or several machines writing into
# traces/); the simulator merges whatever lands there. Don't run two traces on one GPU at
# once: they would time each other. λ comes from the `standard` trace of each group.
DATA    ?=
WEIGHTS ?=
DEVICE  ?= cuda
PAPER_METHODS       := standard adabn lame neo tent eta shot-im sar deyo cmf
PAPER_VIT_METHODS   := standard lame neo tent eta shot-im sar deyo cmf spa zerosiam
PAPER_CIFAR_METHODS := standard adabn lame neo tent eta shot-im sar
# The paper's grids: ResNet-50 uses the sweep defaults; ViT-B/16 (Tables 32-34) its own.
PAPER_SWEEP_OPTS       := --budget-rule overshoot
PAPER_VIT_SWEEP_OPTS   := --budget-rule overshoot --T 200,400,1000,2000 --B 2.5s,5s,10s,20s,40s,80s
PAPER_CIFAR_SWEEP_OPTS := --budget-rule overshoot --protocol offline,discrete,amortised $(CIFAR_B)

# $(call study,NAME,DATASET,MODEL,METHODS,SWEEP_OPTS)
define study
$(1)_DIR := traces/$(2)/$(3)/$(DEVICE)
$(1)-traces: $$(addprefix $$($(1)_DIR)/,$$(addsuffix .parquet,$(4)))
$(1): install $(1)-traces
	$$(SIM) report $$($(1)_DIR) --out results/$(1) $(5)
$$($(1)_DIR)/%.parquet: | install
	$$(TRACE) --dataset $(2) --model $(3) --method $$* --device $$(DEVICE) --out $$(@D) \
	    $$(if $$(DATA),--data-root $$(DATA)) $$(if $$(WEIGHTS),--weights $$(WEIGHTS)) \
	    $$(if $$(wildcard $$(@D)/$$*.partial),--resume)
endef
$(eval $(call study,paper,imagenet-c,resnet50,$(PAPER_METHODS),$(PAPER_SWEEP_OPTS)))
$(eval $(call study,paper-vit,imagenet-c,vit_base_patch16_224,$(PAPER_VIT_METHODS),$(PAPER_VIT_SWEEP_OPTS)))
$(eval $(call study,paper-cifar,cifar10-c,cifar-resnet18,$(PAPER_CIFAR_METHODS),$(PAPER_CIFAR_SWEEP_OPTS)))

lint: install
	$(PY) -m compileall -q src tests bench
	@! grep -rEn '^\s*(import torch|from torch)' src/tempora_sim src/tempora_schema && echo "tempora_sim/tempora_schema are torch-free"

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache
